# 006_requests.pl: what goes over the wire.  The exact bytes of a json, form
# and query request, the static and idempotency headers, redirects not
# followed, TLS certificates verified.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IO::Socket::INET;
use MIME::Base64 ();

my $node = new_node('requests');
my $sim = start_sim();
my $base = "http://127.0.0.1:$sim->{port}";

my $payload = q({"to": "+84901234567", "text": "Mã OTP: 482913", "flag": true,
                 "count": 5, "nested": {"a": [1, 2]}, "nothing": null});

for my $f ('json', 'form', 'query')
{
	my $url = $f eq 'query' ? "$base/cgi-bin/sendsms?username=u&password=p" : "$base/send";
	set_provider($node, "p_$f", $url,
		format => "'$f'",
		headers => q('{"Authorization": "Bearer s3cr3t", "X-Tenant": "vn"}'),
		idempotency_header => q('Idempotency-Key'));
	$node->safe_psql('postgres', qq{
		INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES ('fmt_$f', 'at_least_once', 3, 'p_$f')});
	$node->safe_psql('postgres', qq{SELECT notif_enqueue(5, 'fmt_$f', 'o-1', '$payload')});
}
ok(wait_until($node, q{SELECT count(*) = 3 FROM notif_job WHERE kind LIKE 'fmt_%' AND status = 'sent'}),
	'a job of each format was sent');

my %want_headers = (
	'Authorization' => 'Bearer s3cr3t',
	'X-Tenant' => 'vn',
	'User-Agent' => 'notif_deliver/'
	  . $node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'notif_deliver'}));


# json: the stored payload, byte for byte
my $json = last_request($sim, 'fmt_json:5:o-1');
my $h = headers_of($json);
is($json->{method}, 'POST', 'json: POST');
is($json->{target}, '/send', 'json: to the provider URL');
is($json->{body}, $node->safe_psql('postgres', q{SELECT payload::text FROM notif_job WHERE kind = 'fmt_json'}),
	'json: the body is the stored payload');
is($h->{'Content-Type'}, 'application/json', 'json: Content-Type');
is($h->{'Idempotency-Key'}, 'fmt_json:5:o-1', 'json: the idempotency key kind:user_id:order_id');
is($h->{$_}, $want_headers{$_}, "json: header $_") for sort keys %want_headers;
ok(!exists $h->{'Expect'}, 'json: no Expect: 100-continue round trip');

# form: top-level keys, in the stored order, percent-encoded
my $form = last_request($sim, 'fmt_form:5:o-1');
$h = headers_of($form);
my $pairs = 'to=%2B84901234567&flag=true&text=M%C3%A3%20OTP%3A%20482913&count=5'
  . '&nested=%7B%22a%22%3A%20%5B1%2C%202%5D%7D&nothing=';
is($form->{method}, 'POST', 'form: POST');
is($form->{body}, $pairs,
	'form: strings as they are, numbers and booleans as JSON text, objects as JSON, null empty');
is($h->{'Content-Type'}, 'application/x-www-form-urlencoded', 'form: Content-Type');
is($h->{'Idempotency-Key'}, 'fmt_form:5:o-1', 'form: the idempotency key');

# query: GET, the pairs appended to the URL's own query
my $query = last_request($sim, 'fmt_query:5:o-1');
$h = headers_of($query);
is($query->{method}, 'GET', 'query: GET');
is($query->{target}, "/cgi-bin/sendsms?username=u&password=p&$pairs", 'query: the pairs follow the URL\'s parameters');
is($query->{'body-length'}, '0', 'query: no body');
is($h->{'Authorization'}, 'Bearer s3cr3t', 'query: static headers too');

# --- the JSON provider of doc/providers.md, as documented ---
$node->safe_psql('postgres', doc_sql('doc/providers.md', 'json'));
$node->safe_psql('postgres', qq{UPDATE notif_provider SET url = replace(url, 'https://api.sms.example.com', '$base')
                                WHERE name = 'sms_api'});
my $doc_job = $node->safe_psql('postgres', doc_sql('doc/providers.md', 'json-enqueue'));
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $doc_job"), 'doc json provider: the example was sent');
my $doc = last_request($sim, 'otp:812:login-7');
is("$doc->{method} $doc->{target}", 'POST /v1/messages', 'doc json provider: POST to the URL\'s path');
my @doc_headers = map { s{^(User-Agent: notif_deliver/)[0-9.]+$}{$1<version>}r }
  grep { !/^(Host|Content-Length):/ } @{ $doc->{headers} };
is_deeply(\@doc_headers,
	[ 'User-Agent: notif_deliver/<version>', 'Content-Type: application/json',
	  'Accept: application/json', 'Authorization: Bearer sk_live_REPLACE_ME',
	  'Idempotency-Key: otp:812:login-7' ],
	'doc json provider: the headers doc/providers.md shows, in that order');
is($doc->{body}, $node->safe_psql('postgres', "SELECT payload::text FROM notif_job WHERE id = $doc_job"),
	'doc json provider: the body is the stored payload');

# the Basic authentication variation, with a credential long enough for
# base64's line breaks
my $cred = 'AC' . ('0123456789abcdef' x 4) . ':' . ('s3cr3t' x 8);
(my $basic = doc_sql('doc/providers.md', 'basic-auth')) =~ s/ACCOUNT_ID:SECRET/$cred/ or die;
$node->safe_psql('postgres', $basic);
my $basic_job = $node->safe_psql('postgres', q{SELECT notif_enqueue(812, 'otp', 'login-8', '{"to": "+84901234567", "text": "x"}')});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $basic_job"), 'doc basic auth: sent');
is(headers_of(last_request($sim, 'otp:812:login-8'))->{Authorization}, 'Basic ' . MIME::Base64::encode_base64($cred, ''),
	'doc basic auth: the Authorization header is Basic base64(id:secret), on one line');

# the variation for a provider that deduplicates (1.3)
$node->safe_psql('postgres', doc_sql('doc/providers.md', 'dedup-window'));
is($node->safe_psql('postgres', q{SELECT dedup_window FROM notif_provider WHERE name = 'sms_api'}),
	'24:00:00', 'doc dedup window: the provider row takes it');
is($node->safe_psql('postgres', q{SELECT resolve_wait FROM notif_type WHERE code = 'otp'}),
	'00:00:05', 'doc report wait: the type takes it');

# the variation for a provider with a status lookup (1.3), pointed at the
# simulator's GET /status/<key>; the first call of the job is delivered but
# times out, and its retry is asked about first: found, no second copy
(my $lookup = doc_sql('doc/providers.md', 'status-lookup'))
	=~ s{https://api\.sms\.example\.com/v1/messages/\{key\}}{$base/status/{key}} or die;
$node->safe_psql('postgres', $lookup);
$node->safe_psql('postgres', q{
	UPDATE notif_provider SET timeout = '600 ms',
	       headers = headers || '{"X-Sim-Fault": "timeout_delivered", "X-Sim-Fail-First": "1"}'
	 WHERE name = 'sms_api'});
my $asked = $node->safe_psql('postgres', q{SELECT notif_enqueue(812, 'otp', 'login-9', '{"to": "+84901234567", "text": "x"}')});
ok(wait_until($node, "SELECT status = 'sent' AND claimed_by IS NULL FROM notif_job WHERE id = $asked"),
	'doc status lookup: sent');
is($node->safe_psql('postgres', "SELECT outcome || ' ' || resolved_by FROM notif_job WHERE id = $asked"),
	'accepted lookup_found', 'doc status lookup: the lookup found it ("status": "delivered")');
is((split / /, ledger_key($sim, 'otp:812:login-9'))[0], 1, 'doc status lookup: no second copy');
$node->safe_psql('postgres', q{
	UPDATE notif_provider SET headers = headers - 'X-Sim-Fault' - 'X-Sim-Fail-First', lookup_url = NULL,
	       lookup_field = NULL, lookup_found_values = NULL, lookup_not_found_values = NULL
	 WHERE name = 'sms_api'});

# --- redirects are not followed ---
set_provider($node, 'moved', "$base/send", headers => q('{"X-Sim-Fault": "302"}'),
	idempotency_header => q('Idempotency-Key'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES ('moved', 'at_least_once', 3, 'moved')});
my $moved = $node->safe_psql('postgres', q{SELECT notif_enqueue(5, 'moved', 'o-1', '{"text":"x"}')});
ok(wait_until($node, "SELECT status <> 'queued' AND claimed_by IS NULL FROM notif_job WHERE id = $moved"),
	'the redirected job finished');
is(job_row($node, $moved), 'failed rejected 1 302', 'a 302 is rejected, not followed');
is(ledger_key($sim, 'moved:5:o-1'), '1 0 1', 'the provider got one request');
is(last_request($sim, 'moved:5:o-1')->{target}, '/send', 'and the Location was never visited');

# --- TLS certificates are verified ---
my $dir = PostgreSQL::Test::Utils::tempdir();
# A TLS server (openssl s_server) with a new self-signed certificate for
# the given subject, listening before it returns: (its pid, port, the
# certificate's PEM file).
sub tls_server
{
	my ($name, @subject) = @_;
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	system("openssl req -x509 -newkey rsa:2048 -nodes -days 1 @subject"
		  . " -keyout $dir/$name.key -out $dir/$name.pem >/dev/null 2>&1") == 0
	  or BAIL_OUT('openssl could not make a certificate');
	my $pid = fork();
	if ($pid == 0)
	{
		open(STDOUT, '>', '/dev/null');
		open(STDERR, '>', '/dev/null');
		exec('openssl', 's_server', '-accept', $port, '-cert', "$dir/$name.pem",
			'-key', "$dir/$name.key", '-www', '-quiet');
	}
	for (1 .. 200)
	{
		last if IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp');
		select(undef, undef, undef, 0.05);
	}
	return ($pid, $port, "$dir/$name.pem");
}
my ($tls_pid, $tls_port) = tls_server('selfsigned', '-subj /CN=127.0.0.1');
set_provider($node, 'selfsigned', "https://127.0.0.1:$tls_port/send");
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
	VALUES ('tls', 'at_least_once', 2, 'selfsigned', '100 ms', '100 ms')});
my $tls = $node->safe_psql('postgres', q{SELECT notif_enqueue(5, 'tls', 'o-1', '{"text":"x"}')});
ok(wait_until($node, "SELECT status <> 'queued' AND claimed_by IS NULL FROM notif_job WHERE id = $tls"),
	'the job to a self-signed server finished');
is(job_row($node, $tls), 'failed unreached 2 -',
	'an unverifiable certificate: unreached (nothing was sent), retried, failed');
like($node->safe_psql('postgres', "SELECT last_error FROM notif_job WHERE id = $tls"),
	qr/certificate/i, 'last_error names the certificate problem');
kill 'KILL', $tls_pid;
waitpid($tls_pid, 0);

# --- the host name is verified too: a certificate that chains to the
# provider's own ca_cert but names another host is refused ---
my $wrong_pem;
($tls_pid, $tls_port, $wrong_pem) = tls_server('wrongname', '-subj /CN=wrong.example',
	'-addext subjectAltName=DNS:wrong.example');
my $wrong_ca = slurp_file($wrong_pem);
set_provider($node, 'wrongname', "https://127.0.0.1:$tls_port/send", ca_cert => "'$wrong_ca'");
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
	VALUES ('tls_name', 'at_least_once', 2, 'wrongname', '100 ms', '100 ms')});
my $named = $node->safe_psql('postgres', q{SELECT notif_enqueue(5, 'tls_name', 'o-1', '{"text":"x"}')});
ok(wait_until($node, "SELECT status <> 'queued' AND claimed_by IS NULL FROM notif_job WHERE id = $named"),
	'the job to a server whose certificate names another host finished');
is(job_row($node, $named), 'failed unreached 2 -',
	'a certificate trusted through ca_cert but for another host name: unreached, retried, failed');
like($node->safe_psql('postgres', "SELECT last_error FROM notif_job WHERE id = $named"),
	qr/subject name|host ?name|does not match/i, 'last_error names the host name, not the chain');
kill 'KILL', $tls_pid;
waitpid($tls_pid, 0);

done_testing();
