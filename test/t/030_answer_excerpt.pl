# 030_answer_excerpt.pl: what is kept of a provider's answer.  A provider
# that echoes the request's Authorization header and body (the recipient's
# number in it) when it refuses or fails a call: notif_job.last_error and
# notif_calls keep the HTTP status and a short printable excerpt with the
# credential and the number masked (src/core/excerpt.c, notif_excerpt()), never
# the answer as written; nothing of either reaches the server log.  libcurl's
# own error text is kept the same way (src/http/http.c, finish_call): it
# names the url's host, which may look like a key.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('answer_excerpt');
my $sim = start_sim();
my $secret = 'sk_live_4eC39HqLyjWDarjtT1zdp7dc';
my $number = '+84901234567';
set_provider($node, 'refuses', $sim->{url},
	headers => qq('{"Authorization": "Bearer $secret", "X-Sim-Fault": "400", "X-Sim-Echo": "1"}'),
	idempotency_header => q('Idempotency-Key'));
set_provider($node, 'fails', $sim->{url},
	headers => qq('{"Authorization": "Bearer $secret", "X-Sim-Fault": "502", "X-Sim-Echo": "1"}'),
	idempotency_header => q('Idempotency-Key'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, backoff_min, backoff_max)
	VALUES ('refused', 'at_least_once', 3, '1 hour', 'refuses', '100 ms', '200 ms'),
	       ('failing', 'at_least_once', 2, '1 hour', 'fails', '100 ms', '200 ms')});
my $log_at = -s $node->logfile;
my $refused = $node->safe_psql('postgres',
	qq{SELECT notif_enqueue(1, 'refused', 'r1', '{"to": "$number", "text": "your code 1234"}')});
my $failing = $node->safe_psql('postgres',
	qq{SELECT notif_enqueue(1, 'failing', 'f1', '{"to": "$number", "text": "your code 5678"}')});
ok(wait_until($node, "SELECT count(*) = 2 FROM notif_job WHERE id IN ($refused, $failing) AND status = 'failed'"),
	'both jobs failed');

# the provider did echo both: the test would show them if they were kept
my $raw = last_request($sim, "refused:1:r1");
is(headers_of($raw)->{Authorization}, "Bearer $secret", 'the provider got the credential');
like($raw->{body}, qr/\Q$number\E/, 'and the number, which its answers echo');

my $row = $node->safe_psql('postgres', "SELECT http_status || ' ' || outcome || ' ' || last_error FROM notif_job WHERE id = $refused");
is( $row,
	'400 rejected HTTP 400: {"status":"error","code":400,"authorization":"***","request":"{\"to\": \"***\", \"text\": \"your code 1234\"}"}',
	'a refusal: the status and its classification, the answer with the credential and the number masked');
my $calls = $node->safe_psql('postgres', "SELECT string_agg(error, E'\\n' ORDER BY try) FROM notif_calls WHERE job_id = $failing");
is( $calls,
	join("\n",
		('HTTP 502: {"status":"error","code":502,"authorization":"***","request":"{\"to\": \"***\", \"text\": \"your code 5678\"}"}') x 2),
	'each ambiguous call of a retried job: masked in notif_calls too');
my $kept = $node->safe_psql('postgres', q{
	SELECT coalesce(string_agg(last_error, ' '), '') FROM notif_job}) . ' '
  . $node->safe_psql('postgres', q{SELECT coalesce(string_agg(error, ' '), '') FROM notif_calls});
unlike($kept, qr/\Q$secret\E|84901234567/, 'no credential, no number in any last_error or call error');
cmp_ok(length($node->safe_psql('postgres', "SELECT last_error FROM notif_job WHERE id = $refused")),
	'<=', length('HTTP 400: ') + 120 + 3, 'the excerpt is short: at most 120 characters of the answer');
# (the test's own statements, logged by log_statement = all, aside)
my @log = grep { !/LOG:  statement: / } split /\n/, substr(slurp_file($node->logfile), $log_at);
unlike(join("\n", @log), qr/\Q$secret\E|84901234567/, 'nothing of either in the server log');

# --- libcurl's words: excerpted as an answer is -----------------------------
# nothing listens on port 1; *.localhost is loopback to libcurl (no DNS)
my $keyhost = 'sk-live-4ec39hqlyjwdarjtt1zdp7dc.localhost';
my $longhost = join('.', ('x' x 60) x 3) . '.localhost';
set_provider($node, 'keyhost', "http://$keyhost:1/send");
set_provider($node, 'longhost', "http://$longhost:1/send");
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider)
	VALUES ('to_keyhost', 'at_least_once', 1, 'keyhost'), ('to_longhost', 'at_least_once', 1, 'longhost')});
my $jkey = $node->safe_psql('postgres', q{SELECT notif_enqueue(2, 'to_keyhost', 'k', '{"text": "x"}')});
my $jlong = $node->safe_psql('postgres', q{SELECT notif_enqueue(2, 'to_longhost', 'l', '{"text": "x"}')});
ok(wait_until($node, "SELECT count(*) = 2 FROM notif_job WHERE id IN ($jkey, $jlong) AND status = 'failed'"),
	'libcurl error: both calls failed to connect');
like($node->safe_psql('postgres', "SELECT last_error FROM notif_job WHERE id = $jkey"),
	qr/^Failed to connect to \*\*\*( port |:)1 /, 'libcurl error: a host name that looks like a key is masked');
my $long_error = $node->safe_psql('postgres', "SELECT last_error FROM notif_job WHERE id = $jlong");
cmp_ok(length($long_error), '<=', 120 + 3, "libcurl error: at most 120 characters of it ($long_error)");

done_testing();
