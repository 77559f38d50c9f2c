# 043_backup_providers.pl: a type's backup_providers (sender/claim.c) and
# a provider's payload_map.  A job whose call certainly never reached its
# provider takes the next at once, either delivery (the lifecycle rows
# alo_next_route and amo_unreached_next_route); while the provider's
# circuit breaker is open, claims send its jobs to the backup, spending no
# try on it; once a probe closes it, jobs go back to it.  An ambiguous call
# moves an at_least_once job (a possible duplicate) and never an
# at_most_once one.  Each provider gets the body its payload_map makes, the
# same key, and notif_calls says which provider took each call.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('backup_providers');
my $sim_b = start_sim();
my $sim_c = start_sim();
my $port_a = PostgreSQL::Test::Cluster::get_free_port();	# nobody listens, until later


sub calls_of
{
	my ($kind, $order) = @_;
	return sql($node, qq{SELECT string_agg(c.provider || ' ' || c.outcome, ', ' ORDER BY c.try)
	                FROM notif_calls c JOIN notif_job j ON j.id = c.job_id
	               WHERE j.kind = '$kind' AND j.order_id = '$order'});
}

set_provider($node, 'gw_a', "http://127.0.0.1:$port_a/send", breaker_threshold => 3,
	breaker_cooldown => q('5 s'), idempotency_header => q('Idempotency-Key'));
set_provider($node, 'gw_b', $sim_b->{url}, idempotency_header => q('Idempotency-Key'),
	payload_map => q('{"phone": "to", "message": "text"}'));
set_provider($node, 'gw_c', $sim_c->{url}, idempotency_header => q('Idempotency-Key'),
	headers => q('{"X-Sim-Fault": "503"}'));

# --- the settings are checked ---
my ($rc, $out, $err) = $node->psql('postgres',
	q{INSERT INTO notif_type (code, delivery, max_tries, provider, backup_providers) VALUES ('x', 'at_most_once', 1, 'gw_a', '{nowhere}')});
like($err, qr/backup provider "nowhere" is not in notif_provider/, 'a backup provider that does not exist is refused');
($rc, $out, $err) = $node->psql('postgres',
	q{INSERT INTO notif_type (code, delivery, max_tries, provider, backup_providers) VALUES ('x', 'at_most_once', 1, 'gw_a', '{gw_b,gw_a}')});
like($err, qr/violates check constraint "notif_type_backup_providers_check"|backup_providers must name other providers/,
	'so is the type\'s own provider among them');
($rc, $out, $err) = $node->psql('postgres',
	q{UPDATE notif_provider SET payload_map = '{"phone": 1}' WHERE name = 'gw_b'});
like($err, qr/violates check constraint "notif_provider_payload_map_check"/, 'a payload_map naming no member is refused');

sql($node, q{
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, backup_providers, backoff_min, backoff_max) VALUES
		('otp', 'at_least_once', 4, '1 minute', 'gw_a', '{gw_b}', '100 ms', '200 ms'),
		('promo', 'at_most_once', 3, NULL, 'gw_a', '{gw_b}', '100 ms', '200 ms'),
		('alert', 'at_least_once', 4, '1 minute', 'gw_c', '{gw_b}', '100 ms', '200 ms'),
		('promo_c', 'at_most_once', 3, NULL, 'gw_c', '{gw_b}', '100 ms', '200 ms')});
($rc, $out, $err) = $node->psql('postgres', q{DELETE FROM notif_provider WHERE name = 'gw_b'});
like($err, qr/provider "gw_b" is a backup provider of notif_type/, 'a backup provider cannot be deleted');
sql($node, q{UPDATE notif_provider SET name = 'gw_bb' WHERE name = 'gw_b'});
is(sql($node, q{SELECT string_agg(DISTINCT array_to_string(backup_providers, ','), ' ') FROM notif_type}), 'gw_bb',
	'renaming it renames it in the lists');
sql($node, q{UPDATE notif_provider SET name = 'gw_b' WHERE name = 'gw_bb'});

# --- one call never reached the provider: the backup takes the job at once ---
sql($node, q{SELECT notif_enqueue(1, 'otp', 'o1', '{"to": "+84901234567", "text": "Your code: 111111"}')});
ok(wait_until($node, q{SELECT status = 'sent' FROM notif_job WHERE kind = 'otp' AND order_id = 'o1'}),
	'the OTP whose call gw_a refused was sent');
is(calls_of('otp', 'o1'), 'gw_a unreached, gw_b accepted', 'alo_next_route: refused by gw_a, then gw_b took it');
is(sql($node, q{SELECT tries || ' ' || provider FROM notif_job WHERE kind = 'otp' AND order_id = 'o1'}), '2 gw_b',
	'two tries; notif_job.provider names the last');
my $req = last_request($sim_b, 'otp:1:o1');
is($req->{body}, '{"phone": "+84901234567", "message": "Your code: 111111"}', 'gw_b got the body its payload_map makes');
is(headers_of($req)->{'Idempotency-Key'}, 'otp:1:o1', 'and the job\'s key');
sql($node, q{SELECT notif_enqueue(1, 'promo', 'p1', '{"to": "+84901234567", "text": "sale"}')});
ok(wait_until($node, q{SELECT status = 'sent' AND outcome = 'accepted' FROM notif_job WHERE kind = 'promo' AND order_id = 'p1'}),
	'the promotion too');
is(calls_of('promo', 'p1'), 'gw_a unreached, gw_b accepted', 'amo_unreached_next_route: an at_most_once job moves on too');

# --- gw_a's breaker is open: its jobs go to gw_b, no try spent on gw_a ---
sql($node, q{SELECT notif_enqueue(g, 'promo', 'w' || g, '{"to": "+1", "text": "x"}') FROM generate_series(1, 3) g});
ok(wait_until($node, q{SELECT state = 'open' FROM notif_provider_health WHERE name = 'gw_a'}),
	'more calls in a row refused: gw_a\'s breaker opened');
ok(wait_until($node, q{SELECT count(*) = 3 FROM notif_job WHERE kind = 'promo' AND order_id LIKE 'w%' AND status = 'sent' AND provider = 'gw_b'}),
	'the promotions refused meanwhile went to gw_b');
sql($node, q{SELECT notif_enqueue(g, 'otp', 'q' || g, '{"to": "+84901234567", "text": "code"}') FROM generate_series(1, 5) g});
ok(wait_until($node, q{SELECT count(*) = 5 FROM notif_job WHERE kind = 'otp' AND order_id LIKE 'q%' AND status = 'sent'}),
	'OTPs enqueued while it is open are sent');
is(sql($node, q{SELECT count(*) FILTER (WHERE c.provider = 'gw_b' AND c.outcome = 'accepted') || '/' || count(*)
           FROM notif_calls c JOIN notif_job j ON j.id = c.job_id WHERE j.kind = 'otp' AND j.order_id LIKE 'q%'}),
	'5/5', 'each by one call to gw_b: none spent on gw_a while its breaker is open');

# --- gw_a is back: a probe closes its breaker, and jobs go to it again ---
# (a probe is a job's call: with no job due, nothing probes)
my $sim_a = start_sim({ port => $port_a });
ok(wait_until($node, q{SELECT state = 'half_open' FROM notif_provider_health WHERE name = 'gw_a'}),
	'after its cooldown gw_a\'s breaker is half-open');
sql($node, q{SELECT notif_enqueue(g, 'otp', 'r' || g, '{"to": "+84901234567", "text": "code"}') FROM generate_series(1, 5) g});
ok(wait_until($node, q{SELECT state = 'closed' FROM notif_provider_health WHERE name = 'gw_a'}),
	'gw_a answers: the first job due probed it, and closed its breaker');
ok(wait_until($node, q{SELECT count(*) = 5 FROM notif_job WHERE kind = 'otp' AND order_id LIKE 'r%' AND status = 'sent'}),
	'those OTPs are sent (the probe by gw_a, the others by either)');
sql($node, q{SELECT notif_enqueue(g, 'otp', 's' || g, '{"to": "+84901234567", "text": "code"}') FROM generate_series(1, 5) g});
ok(wait_until($node, q{SELECT count(*) = 5 FROM notif_job WHERE kind = 'otp' AND order_id LIKE 's%' AND status = 'sent'}),
	'OTPs enqueued after it closed are sent');
is(sql($node, q{SELECT string_agg(DISTINCT provider, ',') FROM notif_job WHERE kind = 'otp' AND order_id LIKE 's%'}), 'gw_a',
	'by gw_a, the type\'s provider, again');
is(last_request($sim_a, 'otp:1:s1')->{body}, '{"to": "+84901234567", "text": "code"}', 'with the payload as it is');

# --- an ambiguous call (503) moves an at_least_once job, never an at_most_once one ---
sql($node, q{SELECT notif_enqueue(7, 'alert', 'a1', '{"to": "+1", "text": "paid"}'), notif_enqueue(7, 'promo_c', 'c1', '{"to": "+1", "text": "sale"}')});
ok(wait_until($node, q{SELECT count(*) = 2 FROM notif_job WHERE user_id = 7 AND status = 'sent'}), 'both end sent');
is(calls_of('alert', 'a1'), 'gw_c unknown, gw_b accepted', 'alo_next_route: the alert moved on after a 503 (a possible duplicate)');
is(calls_of('promo_c', 'c1'), 'gw_c unknown', 'amo_unknown: the at_most_once promotion did not');
is(ledger_key($sim_b, 'promo_c:7:c1'), '0 0 0', 'gw_b never got it');

# --- after an ambiguous call the provider that took it is asked first,
# whichever provider takes the retry: found there, no copy elsewhere ---
my $status_c = $sim_c->{url} =~ s{/send$}{/status/{key}}r;
set_provider($node, 'gw_d', $sim_c->{url}, idempotency_header => q('Idempotency-Key'),
	timeout => q('1 s'), headers => q('{"X-Sim-Fault": "timeout_delivered"}'),
	lookup_url => qq('$status_c'));
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, backup_providers, backoff_min, backoff_max)
      VALUES ('alert_d', 'at_least_once', 4, '1 minute', 'gw_d', '{gw_b}', '100 ms', '200 ms')});
sql($node, q{SELECT notif_enqueue(8, 'alert_d', 'd1', '{"to": "+1", "text": "paid"}')});
ok(wait_until($node, q{SELECT status = 'sent' FROM notif_job WHERE kind = 'alert_d'}),
	'the alert whose call to gw_d timed out (delivered there) ends sent');
is(sql($node, q{SELECT resolved_by || ' ' || provider FROM notif_job WHERE kind = 'alert_d'})
	  . ', ' . calls_of('alert_d', 'd1'),
	'lookup_found gw_d, gw_d unknown',
	'alo_lookup_found: gw_d\'s status lookup, asked before gw_b took the retry, found it');
is(ledger_key($sim_b, 'alert_d:8:d1'), '0 0 0', 'gw_b never got it: no duplicate');

# --- payload_map is an allow-list: a member it does not name never reaches
# the provider (a query-format gateway's own parameters: Kannel's dlr-url) ---
set_provider($node, 'gateway_q', $sim_b->{url}, format => q('query'), idempotency_header => q('Idempotency-Key'),
	payload_map => q('{"to": "to", "text": "text"}'));
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES ('sms_q', 'at_most_once', 1, 'gateway_q');
      SELECT notif_enqueue(9, 'sms_q', 'q1', '{"to": "+84901234567", "text": "hi", "dlr-url": "http://evil.example/"}')});
ok(wait_until($node, q{SELECT status = 'sent' FROM notif_job WHERE kind = 'sms_q'}), 'a query-format job with a payload_map is sent');
my $target = last_request($sim_b, 'sms_q:9:q1')->{target} // '';
like($target, qr/[?&]text=hi(&|$)/, 'with the members the map names');
unlike($target, qr/dlr-url|evil/, 'and not one it does not name (dlr-url)');

# --- doc/providers.md's primary and backup gateways, as written ---
sql($node, 'CREATE DATABASE docs');
$node->safe_psql('docs', 'CREATE EXTENSION notif_deliver');
$node->safe_psql('docs', doc_sql('doc/providers.md', 'json') . doc_sql('doc/providers.md', 'backup'));
is($node->safe_psql('docs', q{SELECT backup_providers::text || ' ' || p.payload_map::text
                                 FROM notif_type t, notif_provider p WHERE t.code = 'otp' AND p.name = 'sms_backup'}),
	'{sms_backup} {"phone": "to", "message": "text"}', 'doc/providers.md: the backup gateway\'s rows work as written');
set_provider($node, 'doc_backup', $sim_b->{url}, idempotency_header => q('Idempotency-Key'),
	payload_map => q('{"phone": "to", "message": "text"}'));
set_provider($node, 'doc_down', "http://127.0.0.1:" . PostgreSQL::Test::Cluster::get_free_port() . '/send');
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider, backup_providers)
      VALUES ('doc_otp', 'at_least_once', 3, 'doc_down', '{doc_backup}');
      SELECT notif_enqueue(812, 'doc_otp', 'login-7', '{"to": "+84901234567", "text": "Mã OTP của bạn là 482913"}')});
ok(wait_until($node, q{SELECT status = 'sent' FROM notif_job WHERE kind = 'doc_otp'}), 'its OTP, sent through the backup');
is(last_request($sim_b, 'doc_otp:812:login-7')->{body}, '{"phone": "+84901234567", "message": "Mã OTP của bạn là 482913"}',
	'is the body the doc shows');

# --- a SIGKILL after the failover decision, the backup's call in flight:
# nothing lost, nothing sent that the delivery forbids.  gw_x refuses
# every connection; gw_h holds the first call of each key. ---
my $sim_h = start_sim('--hold-ms', '120000');
set_provider($node, 'gw_x', "http://127.0.0.1:" . PostgreSQL::Test::Cluster::get_free_port() . '/send',
	idempotency_header => q('Idempotency-Key'));
set_provider($node, 'gw_h', $sim_h->{url}, idempotency_header => q('Idempotency-Key'), timeout => q('60 seconds'),
	headers => q('{"X-Sim-Fault": "timeout", "X-Sim-Fail-First": "1"}'));
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider, backup_providers, backoff_min, backoff_max, lane) VALUES
		('amo_k', 'at_most_once', 3, 'gw_x', '{gw_h}', '100 ms', '200 ms', 'kill'),
		('alo_k', 'at_least_once', 4, 'gw_x', '{gw_h}', '100 ms', '200 ms', 'kill')});
my $amo_k = sql($node, q{SELECT notif_enqueue(3, 'amo_k', 'k1', '{"to": "+1", "text": "sale"}')});
my $alo_k = sql($node, q{SELECT notif_enqueue(3, 'alo_k', 'k1', '{"to": "+1", "text": "code"}')});
ok(wait_until_ledger($sim_h, sub { ($_[0]{'amo_k:3:k1'}{received} // 0) >= 1 && ($_[0]{'alo_k:3:k1'}{received} // 0) >= 1 }),
	'both jobs moved on from gw_x (unreached) and their calls to gw_h hang');
is(calls_of('amo_k', 'k1') . ', ' . calls_of('alo_k', 'k1'), 'gw_x unreached, gw_x unreached',
	'the decision to move on was committed before the calls to gw_h');
kill 'KILL', sender_pid($node, 'kill');
ok(wait_until($node, "SELECT status = 'sent' AND claimed_by IS NULL FROM notif_job WHERE id = $alo_k"),
	'after the crash, the at_least_once job was sent again');
is(ledger_key($sim_h, 'alo_k:3:k1'), '2 1 1', 'at_least_once: gw_h got it again, same key and body: nothing lost');
ok(wait_until($node, "SELECT status || ' ' || outcome FROM notif_job WHERE id = $amo_k", 'sent unknown'),
	'lost_at_most_once: the at_most_once job is sent, outcome unknown');
is(ledger_key($sim_h, 'amo_k:3:k1'), '1 0 1', 'at_most_once: gw_h got it once, never again');
# the cut-off call is gw_h's: the at_least_once retry moves on from it, to
# the next route (gw_x, refused again), then gw_h
is(calls_of('amo_k', 'k1') . '; ' . calls_of('alo_k', 'k1'),
	'gw_x unreached, gw_h unknown; gw_x unreached, gw_h unknown, gw_x unreached, gw_h accepted',
	'each call the crash cut off is recorded with the provider it went to (notif_job.claimed_provider)');

done_testing();
