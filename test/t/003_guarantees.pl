# 003_guarantees.pl: the promises around the state machine.  Deadlines,
# idempotency keys, libcurl's silent re-send on a dead kept-alive
# connection, lane isolation, live tuning, waiting jobs, and a 10,000-job run
# against a provider that times out now and then.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('guarantees');
my $sim = start_sim();
my $idem_sim = start_sim('--idempotency');


sub wait_final
{
	my ($id, $what) = @_;
	return wait_until($node,
		"SELECT status NOT IN ('queued', 'sending') AND claimed_by IS NULL FROM notif_job WHERE id = $id",
		't', $what);
}

# --- deadline: no attempt starts after deadline_at; the job expires ---
set_provider($node, 'hang', $sim->{url},
	headers => q('{"X-Sim-Fault": "timeout"}'), timeout => q('500 ms'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, backoff_min, backoff_max)
	VALUES ('otp_short', 'at_least_once', 100, '2 seconds', 'hang', '100 ms', '200 ms')});
my $dl = enqueue($node, 9, 'otp_short', 'dl-1');
ok(wait_final($dl), 'the job with a short deadline reached a final state');
is($node->safe_psql('postgres', "SELECT status FROM notif_job WHERE id = $dl"),
	'expired', 'a provider that always times out: the job ends expired');
is( $node->safe_psql('postgres', qq{
		SELECT count(*) FROM notif_calls a JOIN notif_job j ON j.id = a.job_id
		 WHERE j.id = $dl AND a.started_at >= j.deadline_at}),
	'0', 'no attempt started after deadline_at');
cmp_ok($node->safe_psql('postgres', "SELECT count(*) FROM notif_calls WHERE job_id = $dl"),
	'>=', 2, 'it was retried while the deadline allowed');
is($node->safe_psql('postgres', "SELECT tries = (SELECT count(*) FROM notif_calls WHERE job_id = $dl) FROM notif_job WHERE id = $dl"),
	't', 'tries counts exactly the calls made');

# --- idempotency: delivered-then-timed-out calls are retried with one key ---
for my $s ([$sim, 'plain'], [$idem_sim, 'idem'])
{
	my ($which, $name) = @$s;
	set_provider($node, "flaky_$name", $which->{url},
		headers => q('{"X-Sim-Fault": "timeout_delivered", "X-Sim-Fail-First": "2"}'),
		idempotency_header => q('Idempotency-Key'),
		timeout => q('500 ms'));
	$node->safe_psql('postgres', qq{
		INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
		VALUES ('tx_$name', 'at_least_once', 5, 'flaky_$name', '100 ms', '200 ms')});
}
my $plain = enqueue($node, 9, 'tx_plain', 'gd-1', 'GD 1: -500.000 VND');
my $idem = enqueue($node, 9, 'tx_idem', 'gd-1', 'GD 1: -500.000 VND');
ok(wait_final($plain) && wait_final($idem), 'both idempotency jobs finished');
is(job_row($node, $idem), 'sent accepted 3 200', 'two timeouts, then accepted on the third try');
is(ledger_key($idem_sim, 'tx_idem:9:gd-1'), '3 1 1',
	'a provider honouring the key delivered it once: three copies, one key, one body');
is(ledger_key($sim, 'tx_plain:9:gd-1'), '3 3 1',
	'a provider ignoring the key delivered every copy (the duplicates at_least_once accepts)');

# --- a kept-alive connection reset right after the request was read ---
# at_least_once gives libcurl the body to re-send: it silently sends a
# second copy; at_most_once must not let it.
for my $d ('at_most_once', 'at_least_once')
{
	my $p = "ka_$d";
	set_provider($node, $p, $sim->{url}, idempotency_header => q('Idempotency-Key'));
	$node->safe_psql('postgres', qq{
		INSERT INTO notif_type (code, delivery, max_tries, provider, lane)
		VALUES ('$p', '$d', 1, '$p', '$p')});
	# a first job opens the connection, which libcurl keeps alive
	my $warm = enqueue($node, 9, $p, 'warm');
	ok(wait_final($warm), "$d: the first job went out on a new connection");
	is(job_row($node, $warm), 'sent accepted 1 200', "$d: the first job was accepted");
	$node->safe_psql('postgres',
		qq{UPDATE notif_provider SET headers = '{"X-Sim-Fault": "reset"}' WHERE name = '$p'});
	ok(wait_config_read($node, $p), "$d: the sender read the new headers");
	my $hit = enqueue($node, 9, $p, 'hit');
	ok(wait_final($hit), "$d: the second job finished");
	$node->safe_psql('postgres', qq{UPDATE notif_provider SET headers = '{}' WHERE name = '$p'});
}
is(job_row($node, $node->safe_psql('postgres', "SELECT id FROM notif_job WHERE kind = 'ka_at_most_once' AND order_id = 'hit'")),
	'sent unknown 1 -', 'at_most_once, reset after receipt on a kept-alive connection: sent/unknown');
is(ledger_key($sim, 'ka_at_most_once:9:hit'), '1 0 1',
	'at_most_once: the request reached the provider exactly once');
like($node->safe_psql('postgres', "SELECT last_error FROM notif_job WHERE kind = 'ka_at_most_once' AND order_id = 'hit'"),
	qr/rewind|reset|Recv failure/, 'libcurl did not re-send it: the error is the reset (or the refused rewind)');
is(ledger_key($sim, 'ka_at_least_once:9:hit'), '2 0 1',
	'at_least_once: libcurl re-sent the request on a fresh connection (the hazard being guarded)');

# the same with an empty body (form format, payload {}): no byte to fail to
# rewind, so at_most_once must not reuse the connection at all
set_provider($node, 'ka_empty', $sim->{url}, format => q('form'), idempotency_header => q('Idempotency-Key'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, lane)
	VALUES ('ka_empty', 'at_most_once', 1, 'ka_empty', 'ka_empty')});
my $warm_empty = $node->safe_psql('postgres', q{SELECT notif_enqueue(9, 'ka_empty', 'warm')});
ok(wait_final($warm_empty), 'empty body: the first job went out');
$node->safe_psql('postgres', q{UPDATE notif_provider SET headers = '{"X-Sim-Fault": "reset"}' WHERE name = 'ka_empty'});
ok(wait_config_read($node, 'ka_empty'), 'empty body: the sender read the new headers');
my $hit_empty = $node->safe_psql('postgres', q{SELECT notif_enqueue(9, 'ka_empty', 'hit')});
ok(wait_final($hit_empty), 'empty body: the second job finished');
is(job_row($node, $hit_empty), 'sent unknown 1 -', 'at_most_once, empty body, reset after receipt: sent/unknown');
is(ledger_key($sim, 'ka_empty:9:hit'), '1 0 1', 'at_most_once, empty body: the provider got it exactly once');

# --- isolation: a lane whose provider hangs does not delay another lane ---
set_provider($node, 'stuck', $sim->{url},
	headers => q('{"X-Sim-Fault": "timeout"}'), timeout => q('20 seconds'));
set_provider($node, 'fast', $sim->{url}, idempotency_header => q('Idempotency-Key'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, lane)
	VALUES ('promo_stuck', 'at_most_once', 1, 'stuck', 'bulk'),
	       ('otp_fast', 'at_least_once', 3, 'fast', 'otp')});
ok(wait_until($node, q{SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'notif_deliver sender otp'}),
	'the otp lane has its own sender');
$node->safe_psql('postgres',
	q{SELECT count(notif_enqueue(g, 'promo_stuck', 'flood', '{"text":"sale"}')) FROM generate_series(1, 500) g});
ok( wait_until($node, q{SELECT count(*) >= 64 FROM notif_job WHERE kind = 'promo_stuck' AND status = 'sent'}),
	'the bulk lane is stuck in calls that hang');
$node->safe_psql('postgres',
	q{SELECT count(notif_enqueue(g, 'otp_fast', 'login', '{"text":"Ma OTP: 111111"}')) FROM generate_series(1, 20) g});
ok(wait_until($node, q{SELECT count(*) = 20 FROM notif_job WHERE kind = 'otp_fast' AND status = 'sent'}),
	'every OTP was sent while the other lane hung');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM notif_job WHERE kind = 'otp_fast' AND sent_at - created_at > interval '2 seconds'}),
	'0', 'no OTP waited for the hung lane');
# no transaction stays open while calls are in flight
# (polled: a short claim round may be running at the instant of one look)
ok( wait_until($node, q{
		SELECT count(*) = 0 FROM pg_stat_activity
		 WHERE application_name = 'notif_deliver sender bulk'
		   AND (xact_start IS NOT NULL OR backend_xid IS NOT NULL OR backend_xmin IS NOT NULL)}),
	'the hung lane\'s sender holds no transaction, no xid, no snapshot during its calls');
# stop the flood: its calls would hold the provider's slots for 20 s
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = true WHERE code = 'promo_stuck'});

# --- live tuning: delivery and max_tries change for jobs claimed afterwards ---
set_provider($node, 'bad_gw', $sim->{url}, headers => q('{"X-Sim-Fault": "502"}'),
	idempotency_header => q('Idempotency-Key'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
	VALUES ('tuned', 'at_least_once', 3, 'bad_gw', '100 ms', '200 ms')});
my $before = enqueue($node, 9, 'tuned', 'before');
ok(wait_final($before), 'the job before the change finished');
is(job_row($node, $before), 'failed unknown 3 502', 'before: at_least_once, retried three times');
$node->safe_psql('postgres',
	q{UPDATE notif_type SET delivery = 'at_most_once', max_tries = 1 WHERE code = 'tuned'});
my $after = enqueue($node, 9, 'tuned', 'after');
ok(wait_final($after), 'the job after the change finished');
is(job_row($node, $after), 'sent unknown 1 502', 'after: at_most_once, a 502 is never retried');
is(ledger_key($sim, 'tuned:9:after'), '1 0 1', 'after: the provider got it once');

# --- waiting jobs: a paused type, a provider without a URL ---
$node->safe_psql('postgres', q{
	INSERT INTO notif_provider (name) VALUES ('later');
	INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES ('no_url', 'at_least_once', 3, 'later');
	INSERT INTO notif_type (code, delivery, max_tries, provider, paused) VALUES ('held', 'at_least_once', 3, 'fast', true);
	INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES ('canary', 'at_least_once', 1, 'fast')});
my $no_url = enqueue($node, 9, 'no_url', 'w');
my $held = enqueue($node, 9, 'held', 'w');
# a job of the same lane, committed after them, is claimed: the sender has
# claimed since, and left them
my $canary = enqueue($node, 9, 'canary', 'w');
ok(wait_until($node, "SELECT status <> 'queued' FROM notif_job WHERE id = $canary"),
	'the lane\'s sender claimed a job committed after the waiting ones')
  or diag($node->safe_psql('postgres', "SELECT kind, status, tries, last_error, next_at - now() FROM notif_job WHERE status IN ('queued', 'sending') OR id = $canary"));
is($node->safe_psql('postgres', "SELECT string_agg(status || '/' || tries, ',' ORDER BY id) FROM notif_job WHERE id IN ($no_url, $held)"),
	'queued/0,queued/0', 'jobs of a paused type and of a provider without URL wait, untouched');
$node->safe_psql('postgres', qq{UPDATE notif_provider SET url = '$sim->{url}' WHERE name = 'later'});
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code = 'held'});
ok(wait_until($node, "SELECT count(*) = 2 FROM notif_job WHERE id IN ($no_url, $held) AND status = 'sent'"),
	'they go out once the URL is set and the type resumed, without a restart');

# --- priority: within a lane, higher goes first ---
set_provider($node, 'single', $sim->{url}, headers => q('{"X-Sim-Latency-Ms": "100"}'),
	idempotency_header => q('Idempotency-Key'), max_inflight => 1);
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, lane, priority)
	VALUES ('low', 'at_least_once', 1, 'single', 'prio', 0),
	       ('high', 'at_least_once', 1, 'single', 'prio', 10)});
ok(wait_until($node, q{SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'notif_deliver sender prio'}),
	'the priority lane has its sender');
# a backlog of low jobs, then high ones enqueued last: both types paused
# while they are enqueued and resumed in one commit, so that one claim
# sees them all (not a race between the enqueues and the sender)
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = true WHERE code IN ('low', 'high')});
$node->safe_psql('postgres', q{SELECT count(notif_enqueue(g, 'low', 'p')) FROM generate_series(1, 10) g});
$node->safe_psql('postgres', q{SELECT count(notif_enqueue(g, 'high', 'p')) FROM generate_series(1, 3) g});
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code IN ('low', 'high')});
ok(wait_until($node, q{SELECT count(*) = 13 FROM notif_job WHERE kind IN ('low', 'high') AND status = 'sent'}),
	'all prioritised jobs sent');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM notif_job WHERE kind = 'low'
		   AND sent_at > (SELECT max(sent_at) FROM notif_job WHERE kind = 'high')}),
	'10', 'the high-priority jobs, enqueued last, went out before the whole backlog');

# --- a deadline that passes while the job waits: expired, never sent ---
$node->safe_psql('postgres', q{
	INSERT INTO notif_provider (name) VALUES ('unset');
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider)
	VALUES ('dl_wait', 'at_least_once', 3, '1 second', 'unset')});
my $waited = enqueue($node, 9, 'dl_wait', 'w');
ok(wait_until($node, "SELECT deadline_at < now() FROM notif_job WHERE id = $waited"),
	'its deadline passed while it waited');
$node->safe_psql('postgres', qq{UPDATE notif_provider SET url = '$sim->{url}', idempotency_header = 'Idempotency-Key' WHERE name = 'unset'});
ok(wait_final($waited), 'the job whose deadline passed while waiting finished');
is(job_row($node, $waited), 'expired - 0 -', 'claim_late: expired without an attempt');
like($node->safe_psql('postgres', "SELECT last_error FROM notif_job WHERE id = $waited"),
	qr/deadline/, 'last_error says why');
is(ledger_key($sim, 'dl_wait:9:w'), '0 0 0', 'the provider never got it');

# --- backoff jitter: the retries of a burst spread out ---
my $closed = PostgreSQL::Test::Cluster::get_free_port();
set_provider($node, 'down', "http://127.0.0.1:$closed/send");
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
	VALUES ('jitter', 'at_least_once', 2, 'down', '1 second', '1 second')});
$node->safe_psql('postgres', q{SELECT count(notif_enqueue(g, 'jitter', 'j')) FROM generate_series(1, 20) g});
ok(wait_until($node, q{SELECT count(*) = 20 FROM notif_job WHERE kind = 'jitter' AND status = 'failed'}),
	'the burst to a provider that is down failed after two tries each');
my ($lo, $hi) = split /\|/, $node->safe_psql('postgres', q{
	SELECT min(gap), max(gap) FROM (
	  SELECT extract(epoch FROM a2.started_at - a1.ended_at) AS gap
	    FROM notif_calls a1 JOIN notif_calls a2 ON a2.job_id = a1.job_id AND a2.try = 2
	    JOIN notif_job j ON j.id = a1.job_id
	   WHERE j.kind = 'jitter' AND a1.try = 1) g});
cmp_ok($lo, '>=', 0.45, 'no retry before half the backoff');
cmp_ok($hi - $lo, '>=', 0.1, 'the retries are spread out (jitter)');

# --- backoff grows exponentially from backoff_min: d, 2d, 4d (each in [d/2, d]) ---
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
	VALUES ('expo', 'at_least_once', 4, 'down', '200 ms', '10 seconds')});
my $expo = enqueue($node, 9, 'expo', 'e');
ok(wait_until($node, "SELECT status = 'failed' FROM notif_job WHERE id = $expo"), 'the exponential job failed after four tries');
my @gaps = split /\n/, $node->safe_psql('postgres', qq{
	SELECT extract(epoch FROM a2.started_at - a1.ended_at)
	  FROM notif_calls a1 JOIN notif_calls a2 ON a2.job_id = a1.job_id AND a2.try = a1.try + 1
	 WHERE a1.job_id = $expo ORDER BY a1.try});
is(scalar(@gaps), 3, 'three retries');
cmp_ok($gaps[0], '<', 0.3, 'the first retry waits at most backoff_min (200 ms)');
cmp_ok($gaps[2], '>=', 0.4, 'the third waits at least twice backoff_min: the delay doubles');

# --- 10,000 jobs against 0.5% timeouts, half of them delivered anyway ---
my $loss_sim = start_sim('--p-timeout', '0.005', '--q', '0.5', '--seed', '42');
set_provider($node, 'lossy', $loss_sim->{url},
	idempotency_header => q('Idempotency-Key'), timeout => q('500 ms'), max_inflight => 256);
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, lane, backoff_min, backoff_max)
	VALUES ('alo_10k', 'at_least_once', 5, 'lossy', 'alo', '50 ms', '100 ms'),
	       ('amo_10k', 'at_most_once', 1, 'lossy', 'amo', '50 ms', '100 ms')});
$node->safe_psql('postgres', q{
	SELECT count(notif_enqueue(g, 'alo_10k', 'o', '{"text":"x"}')) FROM generate_series(1, 5000) g;
	SELECT count(notif_enqueue(g, 'amo_10k', 'o', '{"text":"x"}')) FROM generate_series(1, 5000) g;});
ok( wait_until($node, q{
		SELECT count(*) = 10000 FROM notif_job
		 WHERE kind IN ('alo_10k', 'amo_10k') AND status NOT IN ('queued', 'sending') AND claimed_by IS NULL}),
	'all 10,000 jobs finished');
my $l = ledger($loss_sim);
my ($alo_missing, $amo_dup, $alo_dup, $amo_lost) = (0, 0, 0, 0);
for my $u (1 .. 5000)
{
	my $a = $l->{"alo_10k:$u:o"};
	my $m = $l->{"amo_10k:$u:o"};
	$alo_missing++ if !$a || $a->{delivered} < 1;
	$alo_dup++ if $a && $a->{delivered} > 1;
	$amo_dup++ if $m && $m->{delivered} > 1;
	$amo_lost++ if !$m || $m->{delivered} < 1;
}
is($alo_missing, 0, 'at_least_once: every key was delivered at least once');
is($amo_dup, 0, 'at_most_once: no key was delivered more than once');
note("measured: at_least_once duplicates $alo_dup, at_most_once lost $amo_lost (of 5000 each)");
is( $node->safe_psql('postgres', q{SELECT count(*) FROM notif_job WHERE kind = 'alo_10k' AND status <> 'sent'}),
	'0', 'at_least_once: every job ended sent');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM notif_job WHERE kind = 'amo_10k' AND tries <> 1}),
	'0', 'at_most_once: every job was tried exactly once');

done_testing();
