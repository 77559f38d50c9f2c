# 048_webhook_signing.pl: Standard Webhooks signing (notif_provider.signing,
# src/provider/webhook_sign.c) checked by the specification's reference
# verifier, and a job's W3C traceparent (notif_enqueue(..., traceparent)).
# The receiver, test/sim/webhook_receiver.js, verifies every request with
# npm's standardwebhooks (a verifier we did not write; test/deps.sh installs
# it) under each secret it is given, and can verify a kept request again
# with its clock later (a replay) or its body changed (tampered):
#   a signed json call and a signed form call verify; a receiver holding
#   another secret refuses them;
#   rotation: a provider with two secrets, a receiver holding either verifies;
#   a replay older than the verifier's tolerance (5 minutes) is refused, and
#   a tampered body;
#   a retry after an ambiguous call (held past the timeout) carries the same
#   webhook-id and body bytes as the first attempt, each signed and verified;
#   malformed secrets are refused (23514) without the secret in the error;
#   no secret in the server log or any table but notif_provider;
#   traceparent: on every call of its job (signed or not, the simulator's
#   last_request too), refused with 22023 when malformed, nothing written;
#   the update from 1.3 gives the new notif_enqueue functions (a sixth
#   argument) the EXECUTE grants of the old, grant options too.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $npm_dir = $ENV{NOTIF_NPM_DIR} // '/var/cache/notif_deliver/npm';
plan skip_all => 'node is not installed (test/deps.sh)' unless grep { -x "$_/node" } split /:/, $ENV{PATH};
plan skip_all => "npm standardwebhooks is not in $npm_dir (test/deps.sh, as root)"
  unless -f "$npm_dir/node_modules/standardwebhooks/package.json";

# three keys of 32 bytes: the provider signs with A (then A and B); C is
# a receiver's that the provider never holds
my %secret = (
	A => 'whsec_' . 'QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=',
	B => 'whsec_' . 'QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=',
	C => 'whsec_' . 'Q0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0M=');
my @held = qw(A B C);    # the receiver's secrets, in this order

# the receiver, on a free port, stopped when the test ends
my $port = PostgreSQL::Test::Cluster::get_free_port();
$ENV{NOTIF_NPM_DIR} = $npm_dir;
my $receiver = start_server('webhook_receiver', $port,
	'node', 'test/sim/webhook_receiver.js', $port, map { $secret{$_} } @held);
my $url = "http://127.0.0.1:$port/hook";
is(sim_get($receiver, '/health'), 'ok', 'the receiver started');

sub wait_for
{
	my ($cond) = @_;
	for (1 .. 1200)
	{
		return 1 if $cond->();
		select(undef, undef, undef, 0.05);
	}
	return 0;
}

sub requests { return decode_json(sim_get($receiver, '/requests')); }

# the receiver's requests of a webhook-id, once there are at least $n
sub requests_of
{
	my ($id, $n) = @_;
	my @r;
	wait_for(sub { @r = grep { ($_->{headers}{'webhook-id'} // '') eq $id } @{ requests() }; @r >= $n; });
	return @r;
}

sub reverify
{
	my ($r, %how) = @_;
	my $q = join('&', "n=$r->{n}", map { "$_=$how{$_}" } sort keys %how);
	return decode_json(sim_get($receiver, "/verify?$q"));
}

# which of the receiver's secrets verify a request, e.g. "A C"
sub verified_by
{
	my ($r) = @_;
	return join(' ', map { $r->{verified}[$_] ? $held[$_] : () } 0 .. $#held) || 'none';
}

my $node = new_node('webhook_signing');
my $sim = start_sim();

# --- the secrets are checked when the row is written, never shown ---
set_provider($node, 'hook', $url);
for my $bad (
	[ q{'{"secrets": ["c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"]}'}, 'does not start with "whsec_"', 'no whsec_ prefix' ],
	[ q{'{"secrets": ["whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0!!!!"]}'}, 'standard base64', 'not base64' ],
	[ q{'{"secrets": ["whsec_c2VjcmV0c2VjcmV0"]}'}, 'shorter than 24 bytes', 'a key of 12 bytes' ],
	[ q{'{"secrets": []}'}, 'credentials.secrets is empty', 'no secret' ],
	[ q{'{"secrets": "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"}'}, 'must be {"secrets"', 'not a list' ],
	[ q{NULL}, 'needs credentials', 'no credentials' ])
{
	my ($rc, $out, $err) = $node->psql('postgres',
		"UPDATE notif_provider SET signing = 'standard_webhooks', credentials = $bad->[0] WHERE name = 'hook'",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/23514/, "refused with 23514: $bad->[2]");
	like($err, qr/\Q$bad->[1]\E/, "... saying why: $bad->[2]");
	unlike($err, qr/c2VjcmV0/, "... never showing the secret: $bad->[2]");
}
my ($rc, $out, $err) = $node->psql('postgres',
	"UPDATE notif_provider SET signing = 'hmac', credentials = '{\"secrets\": [\"$secret{A}\"]}' WHERE name = 'hook'");
like($err, qr/notif_provider_signing_check/, 'a signing other than standard_webhooks is refused');
($rc, $out, $err) = $node->psql('postgres',
	"UPDATE notif_provider SET signing = 'standard_webhooks', format = 'fcm', credentials = '{\"secrets\": [\"$secret{A}\"]}' WHERE name = 'hook'");
like($err, qr/notif_provider_signing_format_check/, 'a push provider cannot sign');

# --- a signed call verifies, under the provider's secret only ---
set_provider($node, 'hook', $url, signing => q('standard_webhooks'),
	credentials => qq('{"secrets": ["$secret{A}"]}'), idempotency_header => q('Idempotency-Key'));
set_provider($node, 'hook_form', $url, format => q('form'), signing => q('standard_webhooks'),
	credentials => qq('{"secrets": ["$secret{A}"]}'));
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES
	('hook', 'at_least_once', 3, 'hook'), ('hook_form', 'at_least_once', 3, 'hook_form')});
my $tp = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
sql($node, qq{SELECT notif_enqueue(1, 'hook', 'o1', '{"event": "order.paid", "amount": 12}', traceparent => '$tp')});
sql($node, q{SELECT notif_enqueue(2, 'hook_form', 'o2', '{"to": "+84900000002", "text": "héllo & bye"}')});
my ($signed) = requests_of('hook:1:o1', 1);
is(verified_by($signed), 'A', 'a signed json call verifies with the provider\'s secret, not with another');
like($signed->{errors}[2], qr/No matching signature/, '... the other secret\'s verifier says no signature matches');
like($signed->{headers}{'webhook-signature'}, qr/^v1,[A-Za-z0-9+\/]{43}=$/, '... one v1 signature');
like($signed->{headers}{'webhook-timestamp'}, qr/^\d{10}$/, '... a timestamp in seconds');
ok(abs($signed->{headers}{'webhook-timestamp'} - time()) < 120, '... the attempt\'s time');
is($signed->{headers}{traceparent}, $tp, '... and the job\'s traceparent');
my ($form) = requests_of('hook_form:2:o2', 1);
is(verified_by($form), 'A', 'a signed form call verifies');
ok(!defined $form->{headers}{traceparent}, '... a job without a traceparent sends none');

# --- a replay and a tampered body ---
is(reverify($signed, secret => 0)->{verified}, JSON::PP::true, 'verified again at once');
my $replay = reverify($signed, secret => 0, shift => 301);
ok(!$replay->{verified}, 'replayed 301 s later: refused by the verifier');
like($replay->{error}, qr/too old/, '... as too old');
my $tampered = reverify($signed, secret => 0, tamper => 1);
ok(!$tampered->{verified}, 'a tampered body: refused');
like($tampered->{error}, qr/No matching signature/, '... no signature matches');

# --- rotation: two secrets, a receiver holding either verifies ---
set_provider($node, 'hook', $url, credentials => qq('{"secrets": ["$secret{A}", "$secret{B}"]}'));
wait_config_read($node, 'default');
sql($node, q{SELECT notif_enqueue(3, 'hook', 'o3', '{"event": "rotated"}')});
my ($rotated) = requests_of('hook:3:o3', 1);
is(verified_by($rotated), 'A B', 'two secrets: the old one verifies, and the new one');
like($rotated->{headers}{'webhook-signature'}, qr/^v1,\S+ v1,\S+$/, '... two signatures, space-separated');

# --- doc/providers.md's signed webhook, as written (its URL and secret the test's) ---
(my $doc = doc_sql('doc/providers.md', 'webhook')) =~ s{https://hooks\.shop\.example\.com/notif}{$url} or die;
$doc =~ s{whsec_[A-Za-z0-9+/=]+}{$secret{C}} or die;
sql($node, $doc);
sql($node, doc_sql('doc/providers.md', 'webhook-enqueue'));
my ($documented) = requests_of('order_paid:812:ord-5501', 1);
is(verified_by($documented), 'C', "the documented webhook verifies with its secret");
is($documented->{headers}{traceparent}, $tp, '... with the documented traceparent');

# --- a retry: the same webhook-id and body bytes, each attempt signed ---
set_provider($node, 'hook_retry', $url, signing => q('standard_webhooks'),
	credentials => qq('{"secrets": ["$secret{B}"]}'),
	headers => q('{"X-Sim-Fault": "timeout", "X-Sim-Fail-First": "1"}'),
	idempotency_header => q('Idempotency-Key'), timeout => q('600 ms'));
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min) VALUES
	('hook_retry', 'at_least_once', 3, 'hook_retry', '0')});
my $job = sql($node, qq{SELECT notif_enqueue(4, 'hook_retry', 4, '{"event": "retried"}', NULL, '$tp')});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $job"), 'the retried job is sent');
my @tries = requests_of('hook_retry:4:4', 2);
is(scalar @tries, 2, 'two attempts reached the receiver');
is(join(' ', map { verified_by($_) } @tries), 'B B', '... each verified');
is($tries[1]{headers}{'webhook-id'}, $tries[0]{headers}{'webhook-id'}, '... the same webhook-id');
is($tries[1]{body}, $tries[0]{body}, '... the same body bytes');
is(join(' ', map { $_->{headers}{traceparent} } @tries), "$tp $tp", '... the traceparent on each (bigint order_id)');
is($job, sql($node, qq{SELECT id FROM notif_job WHERE traceparent = '$tp' AND kind = 'hook_retry'}),
	'... kept on the job');

# --- traceparent on an unsigned call, as the provider simulator saw it ---
set_provider($node, 'plain', $sim->{url}, idempotency_header => q('Idempotency-Key'));
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES ('plain', 'at_most_once', 1, 'plain')});
$job = sql($node, qq{SELECT notif_enqueue(5, 'plain', 'o5', '{"to": "+84900000005"}', traceparent => '$tp')});
ok(wait_until($node, "SELECT status = 'sent' AND outcome = 'accepted' FROM notif_job WHERE id = $job"), 'an unsigned job is sent');
my $last = headers_of(last_request($sim, 'plain:5:o5'));
is($last->{traceparent}, $tp, '... with its traceparent');
ok(!defined $last->{'webhook-signature'}, '... and no signature');

# --- a malformed traceparent: 22023, naming the rule, nothing written ---
my $jobs = sql($node, 'SELECT count(*) FROM notif_job');
for my $bad (
	[ '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01', 'trace-id is 32 lowercase hexadecimal', 'uppercase' ],
	[ '00-00000000000000000000000000000000-00f067aa0ba902b7-01', 'trace-id must not be all zeros', 'a zero trace-id' ],
	[ '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01', 'parent-id must not be all zeros', 'a zero parent-id' ],
	[ '01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', 'Only version 00', 'another version' ],
	[ '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1', '55 characters', 'too short' ],
	[ '00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01', 'separated by', 'a wrong separator' ],
	[ '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g', 'flags are 2 lowercase', 'bad flags' ])
{
	for my $order (q{'t1'}, '7')
	{
		($rc, $out, $err) = $node->psql('postgres',
			"SELECT notif_enqueue(9, 'plain', $order, '{}', traceparent => '$bad->[0]')",
			extra_params => [ '-v', 'VERBOSITY=verbose' ]);
		like($err, qr/22023: traceparent is not a valid W3C trace context/, "refused with 22023: $bad->[2] ($order)");
		like($err, qr/\Q$bad->[1]\E/, "... naming the rule: $bad->[2] ($order)");
	}
}
is(sql($node, 'SELECT count(*) FROM notif_job'), $jobs, 'no job written for a malformed traceparent');
($rc, $out, $err) = $node->psql('postgres',
	q{INSERT INTO notif_job (user_id, kind, order_id, payload, next_at, traceparent)
	  VALUES (9, 'plain', 'x', '{}', now(), E'00-x\r\nX-Injected: 1')});
like($err, qr/notif_job_traceparent_check/, 'a job written by hand is held to the rule too');

# --- the update from 1.3 gives the new notif_enqueue the old one's grants ---
$node->safe_psql('postgres', 'CREATE DATABASE upg');
$node->safe_psql('upg', q{CREATE ROLE enq_app; CREATE ROLE enq_admin;
	CREATE EXTENSION notif_deliver VERSION '1.3';
	GRANT EXECUTE ON FUNCTION notif_enqueue(bigint, text, text, jsonb, timestamptz) TO enq_app;
	GRANT EXECUTE ON FUNCTION notif_enqueue(bigint, text, bigint, jsonb, timestamptz) TO enq_admin WITH GRANT OPTION;
	ALTER EXTENSION notif_deliver UPDATE});
is($node->safe_psql('upg', q{SELECT string_agg(format('%s %s %s %s', r, t,
		has_function_privilege(r, format('notif_enqueue(bigint, text, %s, jsonb, timestamptz, text)', t), 'EXECUTE'),
		has_function_privilege(r, format('notif_enqueue(bigint, text, %s, jsonb, timestamptz, text)', t), 'EXECUTE WITH GRANT OPTION')),
		', ' ORDER BY r, t)
	FROM unnest('{enq_admin,enq_app,public}'::text[]) r, unnest('{bigint,text}'::text[]) t}),
	'enq_admin bigint t t, enq_admin text f f, enq_app bigint f f, enq_app text t f, public bigint f f, public text f f',
	'the update from 1.3 grants EXECUTE on the new notif_enqueue to whom it was granted on the old, as it was');
is($node->safe_psql('upg', q{SELECT count(*) FROM pg_proc WHERE proname = 'notif_enqueue'}), '2',
	'... and the old functions are gone');

# --- no secret anywhere but notif_provider ---
# (the test's own statements, which set the secrets, are logged by
# log_statement = all, and a failed one as STATEMENT: aside, with their
# continuation lines, as in 020_push)
my $whole_log = slurp_file($node->logfile);
ok(index($whole_log, substr($secret{A}, 6, 24)) >= 0, 'the needle is found where the secret is (the test\'s own UPDATEs, logged)');
(my $log = $whole_log) =~ s/^[^\n]*(LOG:  statement|STATEMENT): [^\n]*(\n\t[^\n]*)*//mg;
my @tables = split /\n/, sql($node, q{
	SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	 WHERE c.relkind IN ('r', 'p', 'v') AND c.relname LIKE 'notif\_%' AND c.relname <> 'notif_provider'
	   AND n.nspname = 'public' ORDER BY 1});
ok(@tables > 5, 'the tables and views of the extension: ' . scalar @tables);
for my $name (sort keys %secret)
{
	(my $key = $secret{$name}) =~ s/^whsec_//;
	my $part = substr($key, 0, 24);
	unlike($log, qr/\Q$part\E/, "secret $name: not in the server log");
	my @found = grep { sql($node, "SELECT count(*) FROM $_ t WHERE t::text LIKE '%$part%'") ne '0' } @tables;
	is("@found", '', "secret $name: in no table or view but notif_provider");
}

# --- a customer's endpoint signs with its own secrets (notif_endpoint) ---
# The endpoint's secrets sign its calls, whether its provider signs or
# not, and in place of the provider's: C verifies, A (the provider's) not.
$node->append_conf('postgresql.conf', "notif_deliver.endpoint_allow_cidrs = '127.0.0.1/32'\n");
$node->reload;
set_provider($node, 'ep_plain', $url);
sql($node, qq{INSERT INTO notif_type (code, delivery, max_tries, provider, endpoint_by, backoff_min, backoff_max)
	VALUES ('ep_plain', 'at_least_once', 5, 'ep_plain', 'user_id', '100 ms', '200 ms'),
	       ('ep_signed', 'at_least_once', 5, 'hook', 'user_id', '100 ms', '200 ms');
	INSERT INTO notif_endpoint (owner, url, secrets) VALUES ('41', '$url', '{$secret{C}}');
	SELECT notif_enqueue(41, 'ep_plain', 'e1', '{"event": "order.shipped"}');
	SELECT notif_enqueue(41, 'ep_signed', 'e2', '{"event": "order.shipped"}')});
my ($ep_plain) = requests_of('ep_plain:41:e1', 1);
is(verified_by($ep_plain), 'C', 'an endpoint\'s call is signed with its own secret, its provider signing nothing');
my ($ep_signed) = requests_of('ep_signed:41:e2', 1);
is(verified_by($ep_signed), 'C', '... and with its own in place of a signing provider\'s');

done_testing();
