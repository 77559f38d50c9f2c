# 036_report_resolves.pl: a delivery report resolves an ambiguous call
# before its retry.  notif_type.resolve_wait holds the retry of an
# at_least_once job whose call ended unknown (alo_retry_after_report_wait),
# as far as the deadline allows; a delivered report (notif_dlr) for a job
# queued again after such a call ends it 'sent' with no retry
# (report_resolves); a report for a job not waiting is only recorded
# (report_recorded).  Rows of src/lifecycle/job_state.c; checked in
# notif_job, notif_active and the simulator's ledger.  The first call of
# each job is held past the timeout (X-Sim-Fail-First: 1), the next succeeds.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('report_resolves');
my $sim = start_sim();

for my $p (['delivered', 'timeout_delivered', '600 ms'], ['lost', 'timeout', '600 ms'],
	['slow', 'timeout_delivered', '4 s'])
{
	set_provider($node, "p_$p->[0]", $sim->{url},
		headers => qq('{"X-Sim-Fault": "$p->[1]", "X-Sim-Fail-First": "1"}'),
		idempotency_header => q('Idempotency-Key'),
		timeout => qq('$p->[2]'));
}
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max, resolve_wait, deadline) VALUES
		('waits', 'at_least_once', 3, 'p_delivered', '100 ms', '100 ms', '1 hour', NULL),
		('waits_in_vain', 'at_least_once', 3, 'p_lost', '100 ms', '100 ms', '2 s', NULL),
		('backs_off', 'at_least_once', 3, 'p_delivered', '1 hour', '1 hour', '0', NULL),
		('deadline', 'at_least_once', 3, 'p_lost', '100 ms', '100 ms', '1 hour', '8 s'),
		('in_flight', 'at_least_once', 3, 'p_slow', '100 ms', '100 ms', '0', NULL);
});
my ($rc, $out, $err) = $node->psql('postgres', q{UPDATE notif_type SET resolve_wait = '-1 s' WHERE code = 'waits'});
like($err, qr/violates check constraint "notif_type_resolve_wait_check"/, 'a negative resolve_wait is refused');

my %id;
for my $kind (qw(waits waits_in_vain backs_off deadline in_flight))
{
	$id{$kind} = $node->safe_psql('postgres',
		qq{SELECT notif_enqueue(1, '$kind', 'o1', '{"to":"+84900000001","text":"$kind"}')});
}

sub received
{
	my ($kind) = @_;
	return (split / /, ledger_key($sim, "$kind:1:o1"))[0];
}

# the first call of each ended unknown; "waits" holds its retry an hour
ok( wait_until(
		$node,
		qq{SELECT status = 'queued' AND outcome = 'unknown' AND tries = 1
		          AND next_at > now() + interval '50 minutes'
		     FROM notif_job WHERE id = $id{waits}}),
	'alo_retry_after_report_wait: the retry of an ambiguous call waits for a report (resolve_wait)');
ok( wait_until(
		$node,
		qq{SELECT status = 'queued' AND outcome = 'unknown' AND tries = 1 FROM notif_job WHERE id = $id{backs_off}}),
	'backs_off: queued again after its ambiguous call, for its hour of backoff');
# with a deadline (8 s), the wait ends a timeout (600 ms) before it, so
# that the retry can still start and end
ok( wait_until(
		$node,
		qq{SELECT status = 'queued' AND tries = 1 FROM notif_job WHERE id = $id{deadline}}),
	'deadline: its ambiguous call ended, and its retry waits');
is($node->safe_psql('postgres', qq{
		SELECT next_at = deadline_at - interval '600 ms' FROM notif_job WHERE id = $id{deadline}}),
	't', 'deadline: the retry is due a timeout before the deadline, not after the hour');

# a report that comes while the call is in flight (the provider reports
# before the sender's timeout): recorded, and when the call ends unknown the
# job is done, with no retry (alo_reported)
ok( wait_until(
		$node,
		qq{SELECT status = 'sending' AND tries = 1 FROM notif_job WHERE id = $id{in_flight}}),
	'in_flight: its first call is in flight (held 4 s)');
$node->safe_psql('postgres', q{SELECT notif_dlr('in_flight:1:o1', true)});
is(job_resolution($node, $id{'in_flight'}), 'sending - 1 -', 'in_flight: the report is recorded; the call goes on (report_recorded)');
ok( wait_until(
		$node,
		qq{SELECT status <> 'sending' AND claimed_by IS NULL FROM notif_job WHERE id = $id{in_flight}}),
	'in_flight: the call ended');
is(job_resolution($node, $id{'in_flight'}), 'sent unknown 1 report',
	'alo_reported: the call ended unknown after a report said delivered: sent, resolved by the report, no retry');

# a report that the message was not delivered changes nothing
$node->safe_psql('postgres', q{SELECT notif_dlr('waits:1:o1', false)});
is(job_resolution($node, $id{'waits'}), 'queued unknown 1 -', 'a report of no delivery: the job still waits');

# the provider reports the first copy delivered: no retry
is($node->safe_psql('postgres', q{SELECT notif_dlr('waits:1:o1', true)}), $id{waits}, 'the report matches the job');
is(job_resolution($node, $id{'waits'}), 'sent unknown 1 report', 'report_resolves: sent, resolved by the report, no second call');
is($node->safe_psql('postgres', qq{SELECT count(*) FROM notif_active WHERE job_id = $id{waits}}),
	'0', 'and it left the work (notif_active)');
$node->safe_psql('postgres', q{SELECT notif_dlr('backs_off:1:o1', true)});
is(job_resolution($node, $id{'backs_off'}), 'sent unknown 1 report', 'report_resolves: also without resolve_wait, when it comes before the retry');
is(active_mismatches($node), 0, 'notif_active matches notif_job');

# no report in time: retried once the wait ends, not before
ok( wait_until(
		$node,
		qq{SELECT status = 'sent' FROM notif_job WHERE id = $id{waits_in_vain}}),
	'waits_in_vain: retried after its wait');
is(job_resolution($node, $id{'waits_in_vain'}), 'sent accepted 2 -', 'alo_retry_after_report_wait, then alo_accepted: no report, so the retry delivered it');
ok( $node->safe_psql('postgres', qq{
		SELECT j.last_started_at >= a.ended_at + interval '2 s'
		  FROM notif_job j JOIN notif_attempt a ON a.job_id = j.id AND a.try = 1
		 WHERE j.id = $id{waits_in_vain}}) eq 't',
	'waits_in_vain: the retry started no sooner than resolve_wait (2 s) after the ambiguous call');

# a report for a job not waiting for one is only recorded
$node->safe_psql('postgres', q{SELECT notif_dlr('waits_in_vain:1:o1', true)});
is(job_resolution($node, $id{'waits_in_vain'}), 'sent accepted 2 -', 'report_recorded: a finished job stays as it was');
is($node->safe_psql('postgres', qq{SELECT count(*) FROM notif_dlr WHERE job_id = $id{waits_in_vain}}),
	'1', 'and the report is kept');

# the wait ends before the deadline (above): the retry delivers it
ok( wait_until(
		$node,
		qq{SELECT status = 'sent' FROM notif_job WHERE id = $id{deadline}}),
	'deadline: retried before its deadline despite a wait of an hour');
is(job_resolution($node, $id{'deadline'}), 'sent accepted 2 -', 'deadline: the retry delivered it');

is($node->safe_psql('postgres', q{
		SELECT string_agg(kind || ' ' || resolved_report || ' ' || resolved_dedup_window, ', ' ORDER BY kind)
		  FROM notif_resolved}),
	'backs_off 1 0, deadline 0 0, in_flight 1 0, waits 1 0, waits_in_vain 0 0',
	'notif_resolved counts the jobs resolved by a report, per type');

# what the provider received: one copy of each resolved job, two of the others
is(received('waits'), 1, 'waits: one call (the ledger)');
is(received('backs_off'), 1, 'backs_off: one call');
is(received('waits_in_vain'), 2, 'waits_in_vain: two calls');
is(received('deadline'), 2, 'deadline: two calls');
is(received('in_flight'), 1, 'in_flight: one call');

done_testing();
