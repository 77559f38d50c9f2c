# 037_crash_resolving.pl: a crash between an ambiguous call and its
# resolution (issue 31).  SIGKILL of the sender, and an immediate-mode
# server restart, while an at_most_once job of a provider with a
# dedup_window waits for its retry inside the window
# (amo_unknown_dedup_retry) or is in that retry (then lost_at_most_once),
# while the window passes (amo_dedup_window_passed), and while an
# at_least_once job holds its retry for a delivery report (resolve_wait,
# alo_retry_after_report_wait; then report_resolves, or the retry); and a
# SIGKILL during a call whose delivery report is already in (lost_reported)
# or not yet (lost_retry_after_report_wait: the retry waits for it).  The
# held and queued states are committed rows: they survive, and the provider
# (the simulator's ledger) gets nothing twice that its window does not drop
# and loses nothing at_least_once promised.  The simulator honours a ten
# minute window (--dedup-window-ms); the first call of each job is held
# past its 600 ms timeout (X-Sim-Fail-First: 1), the next is answered.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $node = new_node('crash_resolving');
my $sim = start_sim('--dedup-window-ms', '600000');

# providers: the first call of a key held past the timeout, delivered
# ("timeout_delivered") or not ("timeout"); the next answered 200
fault_provider($node, 'p_dedup', $sim->{url}, 'timeout_delivered', dedup_window => q('10 minutes'));
fault_provider($node, 'p_hang_k', $sim->{url}, 'timeout_delivered', dedup_window => q('10 minutes'));
fault_provider($node, 'p_hang_r', $sim->{url}, 'timeout_delivered', dedup_window => q('10 minutes'));
# the window less the timeout: 7.4 s after the job's creation
fault_provider($node, 'p_short', $sim->{url}, 'timeout_delivered', dedup_window => q('8 s'));
fault_provider($node, 'p_alo_delivered', $sim->{url}, 'timeout_delivered', dedup_window => 'NULL');
fault_provider($node, 'p_alo_lost', $sim->{url}, 'timeout', dedup_window => 'NULL');
# the first call hangs for a minute (the sender's timeout), the next is answered
fault_provider($node, 'p_hang', $sim->{url}, 'timeout_delivered', dedup_window => 'NULL');
$node->safe_psql('postgres', q{UPDATE notif_provider SET timeout = '60 s' WHERE name = 'p_hang'});

# a backoff of 2.5 to 5 s: time to pause a type before its retry is claimed
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max, resolve_wait) VALUES
		('amo_wait', 'at_most_once', 3, 'p_dedup', '5 s', '5 s', '0'),
		('amo_hang_k', 'at_most_once', 3, 'p_hang_k', '5 s', '5 s', '0'),
		('amo_hang_r', 'at_most_once', 3, 'p_hang_r', '5 s', '5 s', '0'),
		('amo_short', 'at_most_once', 3, 'p_short', '5 s', '5 s', '0'),
		('alo_report', 'at_least_once', 3, 'p_alo_delivered', '100 ms', '100 ms', '1 hour'),
		('alo_noreport', 'at_least_once', 3, 'p_alo_lost', '100 ms', '100 ms', '6 s'),
		('alo_inflight', 'at_least_once', 3, 'p_hang', '100 ms', '100 ms', '1 hour'),
		('alo_inflight_wait', 'at_least_once', 3, 'p_hang', '100 ms', '100 ms', '1 hour'),
		('amo_inflight', 'at_most_once', 3, 'p_hang', '100 ms', '100 ms', '0');
});

my %id;


# "status outcome tries resolved_by" of a job

# "received delivered" of a job's key in the simulator's ledger
sub sim_ledger
{
	my ($key) = @_;
	my ($kind, $order) = split /:/, $key;
	my @l = split / /, ledger_key($sim, "$kind:1:$order");
	return "$l[0] $l[1]";
}

sub in_work
{
	my ($key) = @_;
	return $node->safe_psql('postgres', "SELECT count(*) FROM notif_active WHERE job_id = $id{$key}");
}

sub set_paused
{
	my ($paused, @kinds) = @_;
	$node->safe_psql('postgres',
		"UPDATE notif_type SET paused = $paused WHERE code IN ("
		  . join(', ', map { "'$_'" } @kinds) . ')');
	wait_config_read($node, 'default');
}


# Wait until at_most_once jobs' first calls ended unknown and they are
# queued again for their provider's window, then pause their types.
sub queued_for_window
{
	my ($what, @keys) = @_;
	my $ids = join(', ', map { $id{$_} } @keys);
	ok( wait_until(
			$node,
			qq{SELECT count(*) = ${\ scalar @keys} FROM notif_job
			    WHERE id IN ($ids) AND status = 'queued' AND outcome = 'unknown'
			      AND tries = 1 AND resolved_by = 'dedup_window'}),
		"$what: the first calls ended unknown, queued again for the window (amo_unknown_dedup_retry)");
	set_paused('true', map { (split /:/)[0] } @keys);
	is($node->safe_psql('postgres', qq{SELECT count(*) FROM notif_job WHERE id IN ($ids) AND tries = 1}),
		scalar @keys, "$what: paused before their retries were claimed");
}

# Make the retry of an at_most_once job hang: its provider now holds every
# call (a minute's timeout, the window still ahead), and delivers none of
# the repeats (the simulator's window drops them).
sub retry_in_flight
{
	my ($key, $provider) = @_;
	my ($kind) = split /:/, $key;
	$node->safe_psql('postgres', qq{
		UPDATE notif_provider SET headers = '{"X-Sim-Fault": "timeout_delivered"}', timeout = '60 s'
		 WHERE name = '$provider'});
	set_paused('false', $kind);
	ok( wait_until(
			$node,
			qq{SELECT status = 'sent' AND tries = 2 AND claimed_by IS NOT NULL FROM notif_job WHERE id = $id{$key}}),
		"$key: its retry for the window is claimed");
	ok(wait_until_ledger($sim, sub { ($_[0]->{"$kind:1:" . (split /:/, $key)[1]}{received} // 0) >= 2 }),
		"$key: its retry reached the provider and hangs");
}

# An at_least_once job whose call ended unknown, held for a report.
sub held_for_report
{
	my ($key, $wait) = @_;
	ok( wait_until(
			$node,
			qq{SELECT status = 'queued' AND outcome = 'unknown' AND tries = 1
			          AND next_at >= last_ended_at + interval '$wait' - interval '10 ms'
			     FROM notif_job WHERE id = $id{$key}}),
		"$key: its call ended unknown and its retry waits $wait for a report (alo_retry_after_report_wait)");
}

# ---------- SIGKILL of the sender ----------
$id{'amo_wait:k'} = enqueue($node, 1, 'amo_wait', 'k', 'amo_wait');
$id{'amo_hang_k:k'} = enqueue($node, 1, 'amo_hang_k', 'k', 'amo_hang_k');
queued_for_window('sigkill', 'amo_wait:k', 'amo_hang_k:k');
retry_in_flight('amo_hang_k:k', 'p_hang_k');
$id{'alo_report:k'} = enqueue($node, 1, 'alo_report', 'k', 'alo_report');
held_for_report('alo_report:k', '1 hour');

my $pid = sender_pid($node);
kill 'KILL', $pid;
ok( wait_until(
		$node,
		qq{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender' AND pid <> $pid}),
	'sigkill: the server restarted after the crash, and the sender with it');

ok(wait_until($node, "SELECT claimed_by IS NULL FROM notif_job WHERE id = $id{'amo_hang_k:k'}"),
	'amo_hang_k: the job left in its retry was recovered');
is(job_resolution($node, $id{'amo_hang_k:k'}), 'sent unknown 2 -',
	'lost_at_most_once: at_most_once, the sender died in the retry made for the window: sent, unknown, unresolved');
is(in_work('amo_hang_k:k'), '0', 'amo_hang_k: and not queued for another try');
is(sim_ledger('amo_hang_k:k'), '2 1', 'amo_hang_k: the provider received two copies, delivered one (its window)');

is(job_resolution($node, $id{'alo_report:k'}), 'queued unknown 1 -', 'alo_report (sigkill): still held for its report');
is( $node->safe_psql('postgres', qq{SELECT next_at > now() + interval '50 minutes' FROM notif_job WHERE id = $id{'alo_report:k'}}),
	't', 'alo_report (sigkill): the hold of an hour survived the crash');
is($node->safe_psql('postgres', q{SELECT notif_dlr('alo_report:1:k', true)}), $id{'alo_report:k'},
	'alo_report (sigkill): the report matches the job');
is(job_resolution($node, $id{'alo_report:k'}), 'sent unknown 1 report',
	'report_resolves after the crash: sent, resolved by the report, no retry');
is(in_work('alo_report:k'), '0', 'alo_report (sigkill): it left the work');

set_paused('false', 'amo_wait');
ok( wait_until(
		$node,
		qq{SELECT status <> 'queued' AND claimed_by IS NULL FROM notif_job WHERE id = $id{'amo_wait:k'}}),
	'amo_wait (sigkill): its retry was made after the crash');
is(job_resolution($node, $id{'amo_wait:k'}), 'sent accepted 2 dedup_window',
	'amo_unknown_dedup_retry survived the crash: retried inside the window, then amo_accepted');
is(sim_ledger('amo_wait:k'), '2 1', 'amo_wait (sigkill): two copies received, delivered once (the window dropped the repeat)');
is((split / /, sim_ledger('alo_report:k'))[0], '1', 'alo_report (sigkill): the provider received one copy');

# ---------- immediate-mode restart ----------
$id{'amo_wait:r'} = enqueue($node, 1, 'amo_wait', 'r', 'amo_wait');
$id{'amo_hang_r:r'} = enqueue($node, 1, 'amo_hang_r', 'r', 'amo_hang_r');
$id{'amo_short:r'} = enqueue($node, 1, 'amo_short', 'r', 'amo_short');
queued_for_window('immediate', 'amo_wait:r', 'amo_hang_r:r', 'amo_short:r');
retry_in_flight('amo_hang_r:r', 'p_hang_r');
$id{'alo_report:r'} = enqueue($node, 1, 'alo_report', 'r', 'alo_report');
$id{'alo_noreport:r'} = enqueue($node, 1, 'alo_noreport', 'r', 'alo_noreport');
held_for_report('alo_report:r', '1 hour');
held_for_report('alo_noreport:r', '6 s');

# the server stays down until amo_short's window (less the timeout) has passed
my $window_ends = $node->safe_psql('postgres',
	qq{SELECT extract(epoch FROM created_at + interval '7400 ms') FROM notif_job WHERE id = $id{'amo_short:r'}});
$node->stop('immediate');
my $left = $window_ends + 0.3 - time();
sleep($left) if $left > 0;
$node->start;

ok(wait_until($node, "SELECT claimed_by IS NULL FROM notif_job WHERE id = $id{'amo_hang_r:r'}"),
	'amo_hang_r: the job left in its retry was recovered after the restart');
is(job_resolution($node, $id{'amo_hang_r:r'}), 'sent unknown 2 -', 'lost_at_most_once after the restart: sent, unknown, unresolved');
is(in_work('amo_hang_r:r'), '0', 'amo_hang_r: not queued for another try');
is(sim_ledger('amo_hang_r:r'), '2 1', 'amo_hang_r: two copies received, delivered once');

is(job_resolution($node, $id{'alo_report:r'}), 'queued unknown 1 -', 'alo_report (restart): still held for its report');
is( $node->safe_psql('postgres', qq{SELECT next_at > now() + interval '50 minutes' FROM notif_job WHERE id = $id{'alo_report:r'}}),
	't', 'alo_report (restart): the hold survived the restart');
$node->safe_psql('postgres', q{SELECT notif_dlr('alo_report:1:r', true)});
is(job_resolution($node, $id{'alo_report:r'}), 'sent unknown 1 report', 'report_resolves after the restart: sent, resolved by the report');
is(in_work('alo_report:r'), '0', 'alo_report (restart): it left the work');
is((split / /, sim_ledger('alo_report:r'))[0], '1', 'alo_report (restart): the provider received one copy');

ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $id{'alo_noreport:r'}"),
	'alo_noreport: no report came, and it was retried after the restart');
is(job_resolution($node, $id{'alo_noreport:r'}), 'sent accepted 2 -', 'alo_retry_after_report_wait, then alo_accepted: nothing lost');
is(sim_ledger('alo_noreport:r'), '2 1', 'alo_noreport: the retry delivered it (the first call had not)');
is( $node->safe_psql('postgres', qq{
		SELECT j.last_started_at >= a.ended_at + interval '6 s'
		  FROM notif_job j JOIN notif_attempt a ON a.job_id = j.id AND a.try = 1
		 WHERE j.id = $id{'alo_noreport:r'}}),
	't', 'alo_noreport: the retry started no sooner than its resolve_wait after the ambiguous call');

set_paused('false', 'amo_wait', 'amo_short');
ok( wait_until(
		$node,
		qq{SELECT count(*) = 2 FROM notif_job WHERE id IN ($id{'amo_wait:r'}, $id{'amo_short:r'})
		      AND status <> 'queued' AND claimed_by IS NULL}),
	'amo_wait, amo_short (restart): claimed after the restart');
is(job_resolution($node, $id{'amo_wait:r'}), 'sent accepted 2 dedup_window',
	'amo_unknown_dedup_retry survived the restart: retried inside the window');
is(sim_ledger('amo_wait:r'), '2 1', 'amo_wait (restart): delivered once');
is(job_resolution($node, $id{'amo_short:r'}), 'sent unknown 1 -',
	'amo_dedup_window_passed: the window passed while the server was down: no retry, sent and unknown');
like($node->safe_psql('postgres', qq{SELECT last_error FROM notif_job WHERE id = $id{'amo_short:r'}}),
	qr/deduplication window passed before the retry could start/, 'amo_short: last_error says why');
is(sim_ledger('amo_short:r'), '1 1', 'amo_short: the provider received it once');

# ---------- SIGKILL during a call, a report already in ----------
# A report that comes while the call is in flight is only recorded
# (report_recorded); the sender then dies in the call.  Its recovery finds
# the report: the job is done, with no retry (lost_reported).  Without a
# report, the retry of an at_least_once job cut off so waits for one, as
# after a call that ended unknown (lost_retry_after_report_wait).
$id{'alo_inflight:s'} = enqueue($node, 1, 'alo_inflight', 's', 'alo_inflight');
$id{'alo_inflight_wait:s'} = enqueue($node, 1, 'alo_inflight_wait', 's', 'alo_inflight_wait');
$id{'amo_inflight:s'} = enqueue($node, 1, 'amo_inflight', 's', 'amo_inflight');
my $s_ids = join(', ', map { $id{$_} } qw(alo_inflight:s alo_inflight_wait:s amo_inflight:s));
ok( wait_until(
		$node,
		qq{SELECT count(*) = 3 FROM notif_job WHERE id IN ($s_ids) AND tries = 1 AND claimed_by IS NOT NULL}),
	'in flight: the three calls are claimed');
ok( wait_until_ledger(
		$sim,
		sub { my $l = shift; scalar(grep { ($l->{"$_:1:s"}{received} // 0) >= 1 } qw(alo_inflight alo_inflight_wait amo_inflight)) == 3 }),
	'in flight: the three calls reached the provider and hang');
$node->safe_psql('postgres', q{SELECT notif_dlr('alo_inflight:1:s', true); SELECT notif_dlr('amo_inflight:1:s', true)});
is(job_resolution($node, $id{'alo_inflight:s'}), 'sending - 1 -', 'alo_inflight: the report is only recorded during the call (report_recorded)');
$pid = sender_pid($node);
kill 'KILL', $pid;
ok( wait_until(
		$node,
		qq{SELECT count(*) = 3 FROM notif_job WHERE id IN ($s_ids) AND claimed_by IS NULL}),
	'in flight: the three jobs were recovered after the crash');
is(job_resolution($node, $id{'alo_inflight:s'}), 'sent unknown 1 report',
	'lost_reported: at_least_once, a report said delivered before the crash: sent, resolved by the report, no retry');
is(job_resolution($node, $id{'amo_inflight:s'}), 'sent unknown 1 report', 'lost_reported: at_most_once, the same');
is(job_resolution($node, $id{'alo_inflight_wait:s'}), 'queued unknown 1 -', 'alo_inflight_wait: no report yet: queued again');
is( $node->safe_psql('postgres', qq{SELECT next_at > now() + interval '50 minutes' FROM notif_job WHERE id = $id{'alo_inflight_wait:s'}}),
	't', 'lost_retry_after_report_wait: its retry waits resolve_wait for a report');
$node->safe_psql('postgres', q{SELECT notif_dlr('alo_inflight_wait:1:s', true)});
is(job_resolution($node, $id{'alo_inflight_wait:s'}), 'sent unknown 1 report', 'alo_inflight_wait: the report then resolves it (report_resolves)');
is( $node->safe_psql('postgres', qq{SELECT count(*) FROM notif_active WHERE job_id IN ($s_ids)}),
	'0', 'in flight: none of the three is queued for another try');

# at the end, seconds later: no copy more reached the provider
my %final = (
	'amo_wait:k' => '2 1', 'amo_hang_k:k' => '2 1', 'alo_report:k' => '1 1',
	'amo_wait:r' => '2 1', 'amo_hang_r:r' => '2 1', 'amo_short:r' => '1 1',
	'alo_report:r' => '1 1', 'alo_noreport:r' => '2 1',
	'alo_inflight:s' => '1 1', 'alo_inflight_wait:s' => '1 1', 'amo_inflight:s' => '1 1');
is(join(', ', map { "$_ " . sim_ledger($_) } sort keys %final),
	join(', ', map { "$_ $final{$_}" } sort keys %final),
	'the ledger at the end: no job got a copy more');
is($node->safe_psql('postgres', q{SELECT count(*) FROM notif_job WHERE status = 'sending'}), '0',
	'nothing stays sending');
is(active_mismatches($node), 0, 'notif_active matches notif_job');
is($node->safe_psql('postgres', q{
		SELECT string_agg(kind || ' ' || resolved_dedup_window || ' ' || resolved_report, ', ' ORDER BY kind)
		  FROM notif_resolved}),
	'alo_inflight 0 1, alo_inflight_wait 0 1, alo_noreport 0 0, alo_report 0 2, amo_hang_k 0 0, amo_hang_r 0 0, amo_inflight 0 1, amo_short 0 0, amo_wait 2 0',
	'notif_resolved: what was resolved, and how');

done_testing();
