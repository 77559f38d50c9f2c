# 038_failover_resolving.pl: a failover between an ambiguous call and its
# resolution (issue 31).  A primary with a synchronous standby; on the
# primary, an at_most_once job waits for its retry inside its provider's
# dedup_window (amo_unknown_dedup_retry), an at_least_once job holds its
# retry for a delivery report (resolve_wait), and two at_least_once calls
# are in flight, one whose report is already in.  The primary is stopped in
# immediate mode and the standby promoted: these are committed rows, and
# the promoted node resolves them as the old primary would have
# (amo_accepted inside the window, report_resolves, lost_reported,
# lost_retry_after_report_wait), checked in notif_job and in the
# simulator's ledger (which honours a ten minute window).
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use HaTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my ($primary, $standby) = new_pair('resolving', sync => 1);
my $sim = start_sim('--dedup-window-ms', '600000');

# the first call of a key held past the timeout and delivered, the next answered
for my $p (['p_dedup', '600 ms', q('10 minutes')], ['p_alo', '600 ms', 'NULL'], ['p_hang', '60 s', 'NULL'])
{
	set_provider($primary, $p->[0], $sim->{url},
		headers => q('{"X-Sim-Fault": "timeout_delivered", "X-Sim-Fail-First": "1"}'),
		idempotency_header => q('Idempotency-Key'),
		timeout => qq('$p->[1]'),
		dedup_window => $p->[2]);
}
$primary->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max, resolve_wait) VALUES
		('amo_wait', 'at_most_once', 3, 'p_dedup', '5 s', '5 s', '0'),
		('alo_held', 'at_least_once', 3, 'p_alo', '100 ms', '100 ms', '1 hour'),
		('alo_inflight', 'at_least_once', 3, 'p_hang', '100 ms', '100 ms', '1 hour'),
		('alo_inflight_wait', 'at_least_once', 3, 'p_hang', '100 ms', '100 ms', '1 hour');
});

my %id;
for my $kind (qw(amo_wait alo_held alo_inflight alo_inflight_wait))
{
	$id{$kind} = $primary->safe_psql('postgres',
		qq{SELECT notif_enqueue(1, '$kind', 'f', '{"to":"+84900000001","text":"$kind"}')});
}


sub sim_ledger
{
	my ($kind) = @_;
	my @l = split / /, ledger_key($sim, "$kind:1:f");
	return "$l[0] $l[1]";
}

# --- on the primary: each job between its ambiguous call and its resolution ---
ok( wait_until(
		$primary,
		qq{SELECT status = 'queued' AND outcome = 'unknown' AND tries = 1 AND resolved_by = 'dedup_window'
		     FROM notif_job WHERE id = $id{amo_wait}}),
	'primary: amo_wait queued again for its retry inside the window');
$primary->safe_psql('postgres', q{UPDATE notif_type SET paused = true WHERE code = 'amo_wait'});
wait_config_read($primary, 'default');
is(job_resolution($primary, $id{'amo_wait'}), 'queued unknown 1 dedup_window', 'primary: amo_wait paused before its retry');
ok( wait_until(
		$primary,
		qq{SELECT status = 'queued' AND outcome = 'unknown' AND tries = 1 AND next_at > now() + interval '50 minutes'
		     FROM notif_job WHERE id = $id{alo_held}}),
	'primary: alo_held holds its retry for a report (alo_retry_after_report_wait)');
ok( wait_until(
		$primary,
		qq{SELECT count(*) = 2 FROM notif_job WHERE id IN ($id{alo_inflight}, $id{alo_inflight_wait})
		      AND status = 'sending' AND claimed_by IS NOT NULL}),
	'primary: the two calls of p_hang are in flight');
ok( wait_until_ledger(
		$sim,
		sub { ($_[0]->{'alo_inflight:1:f'}{received} // 0) >= 1 && ($_[0]->{'alo_inflight_wait:1:f'}{received} // 0) >= 1 }),
	'primary: and reached the provider');
$primary->safe_psql('postgres', q{SELECT notif_dlr('alo_inflight:1:f', true)});
is(job_resolution($primary, $id{'alo_inflight'}), 'sending - 1 -', 'primary: the report of alo_inflight is recorded during its call');

# --- failover ---
$primary->wait_for_catchup($standby);
$primary->stop('immediate');
$standby->promote;
ok( wait_until(
		$standby,
		qq{SELECT count(*) = 2 FROM notif_job WHERE id IN ($id{alo_inflight}, $id{alo_inflight_wait})
		      AND claimed_by IS NULL}),
	'promoted: the calls in flight on the old primary were recovered');
is(job_resolution($standby, $id{'alo_inflight'}), 'sent unknown 1 report',
	'promoted: lost_reported: the report recorded on the old primary ends it, no retry');
is(job_resolution($standby, $id{'alo_inflight_wait'}), 'queued unknown 1 -', 'promoted: alo_inflight_wait queued again');
is( $standby->safe_psql('postgres', qq{SELECT next_at > now() + interval '50 minutes' FROM notif_job WHERE id = $id{alo_inflight_wait}}),
	't', 'promoted: lost_retry_after_report_wait: its retry waits for a report');
is(job_resolution($standby, $id{'alo_held'}), 'queued unknown 1 -', 'promoted: alo_held still holds its retry');
is( $standby->safe_psql('postgres', qq{SELECT next_at > now() + interval '50 minutes' FROM notif_job WHERE id = $id{alo_held}}),
	't', 'promoted: the hold of an hour survived the failover');

$standby->safe_psql('postgres', q{SELECT notif_dlr('alo_held:1:f', true); SELECT notif_dlr('alo_inflight_wait:1:f', true)});
is(job_resolution($standby, $id{'alo_held'}), 'sent unknown 1 report', 'promoted: report_resolves: alo_held sent, resolved by the report');
is(job_resolution($standby, $id{'alo_inflight_wait'}), 'sent unknown 1 report', 'promoted: report_resolves: alo_inflight_wait too');

$standby->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code = 'amo_wait'});
ok( wait_until(
		$standby,
		qq{SELECT status <> 'queued' AND claimed_by IS NULL FROM notif_job WHERE id = $id{amo_wait}}),
	'promoted: amo_wait retried on the promoted node');
is(job_resolution($standby, $id{'amo_wait'}), 'sent accepted 2 dedup_window',
	'promoted: amo_unknown_dedup_retry survived the failover: retried inside the window, then amo_accepted');

is( join(', ', map { "$_ " . sim_ledger($_) } qw(amo_wait alo_held alo_inflight alo_inflight_wait)),
	'amo_wait 2 1, alo_held 1 1, alo_inflight 1 1, alo_inflight_wait 1 1',
	'the ledger: one copy of each at_least_once job, the at_most_once retry dropped by the window');
is($standby->safe_psql('postgres', q{SELECT count(*) FROM notif_job WHERE status = 'sending'}), '0',
	'promoted: nothing stays sending');
is(active_mismatches($standby), 0, 'promoted: notif_active matches notif_job');

done_testing();
