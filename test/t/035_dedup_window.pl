# 035_dedup_window.pl: a provider that deduplicates (notif_provider.dedup_window)
# lets an ambiguous call be retried with the same key while the retry still
# reaches it inside its window: the rows amo_unknown_dedup_retry,
# alo_retry_in_dedup_window and amo_dedup_window_passed of the lifecycle
# (src/lifecycle/job_state.c), checked in notif_job (resolved_by) and in the
# simulator's ledger.  The simulator runs with --idempotency: it acts on a
# key once, as such a provider promises; the first call of each job ends
# ambiguous (held past the timeout, X-Sim-Fail-First: 1), the next succeeds.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('dedup_window');
my $sim = start_sim('--idempotency');
# a provider that breaks its promise: it says it drops repeats for a
# minute, and delivers every one (the guide's warning)
my $liar = start_sim('--dedup-window-ms', '60000', '--dedup-breaks', '1');

# one provider per case, all on the simulator, a 600 ms timeout
fault_provider($node, 'dedup', $sim->{url}, 'timeout_delivered', dedup_window => q('1 minute'));
fault_provider($node, 'dedup_lost', $sim->{url}, 'timeout', dedup_window => q('1 minute'));
fault_provider($node, 'plain', $sim->{url}, 'timeout_delivered', dedup_window => 'NULL');
# the window less the timeout, 100 ms, ends before the first backoff
fault_provider($node, 'short', $sim->{url}, 'timeout_delivered', dedup_window => q('700 ms'));
fault_provider($node, 'passing', $sim->{url}, 'timeout_delivered', dedup_window => q('10600 ms'));
fault_provider($node, 'breaking', $liar->{url}, 'timeout_delivered', dedup_window => q('1 minute'));

$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max) VALUES
		('amo_dedup', 'at_most_once', 3, 'dedup', '100 ms', '200 ms'),
		('amo_dedup_lost', 'at_most_once', 3, 'dedup_lost', '100 ms', '200 ms'),
		('alo_dedup', 'at_least_once', 3, 'dedup', '100 ms', '200 ms'),
		('amo_plain', 'at_most_once', 3, 'plain', '100 ms', '200 ms'),
		('amo_short', 'at_most_once', 3, 'short', '1 s', '1 s'),
		('amo_passing', 'at_most_once', 3, 'passing', '4 s', '4 s'),
		('amo_breaking', 'at_most_once', 3, 'breaking', '100 ms', '200 ms');
});

# the settings are checked: a window needs the key's header, and is positive
my ($rc, $out, $err) = $node->psql('postgres',
	q{UPDATE notif_provider SET idempotency_header = NULL WHERE name = 'dedup'});
like($err, qr/violates check constraint "notif_provider_dedup_window_check"/,
	'a dedup_window without an idempotency_header is refused');
($rc, $out, $err) = $node->psql('postgres',
	q{UPDATE notif_provider SET dedup_window = '0 s' WHERE name = 'plain'});
like($err, qr/violates check constraint "notif_provider_dedup_window_check"/,
	'a dedup_window of 0 is refused');

my %id;
for my $kind (qw(amo_dedup amo_dedup_lost alo_dedup amo_plain amo_short amo_breaking))
{
	$id{$kind} = $node->safe_psql('postgres',
		qq{SELECT notif_enqueue(1, '$kind', 'o1', '{"to":"+84900000001","text":"$kind"}')});
}
ok( wait_until(
		$node,
		q{SELECT count(*) = 0 FROM notif_job WHERE status IN ('queued', 'sending') OR claimed_by IS NOT NULL}),
	'every job reached a final state');

my @rows = (
	# kind, job (status outcome tries resolved_by), ledger (received delivered), what
	['amo_dedup', 'sent accepted 2 dedup_window', '2 1',
		'amo_unknown_dedup_retry, then amo_accepted: at_most_once, timeout after delivering: retried inside the window, the provider dropped the repeat'],
	['amo_dedup_lost', 'sent accepted 2 dedup_window', '2 1',
		'amo_unknown_dedup_retry, then amo_accepted: at_most_once, timeout before delivering: the retry delivered it (no loss)'],
	['alo_dedup', 'sent accepted 2 dedup_window', '2 1',
		'alo_retry_in_dedup_window, then alo_accepted: at_least_once: the retry is no duplicate'],
	['amo_plain', 'sent unknown 1 -', '1 1',
		'amo_unknown: at_most_once, no window declared: never again, as without one'],
	['amo_short', 'sent unknown 1 -', '1 1',
		'amo_unknown: at_most_once, the next try would reach the provider after its window: not retried'],
	['amo_breaking', 'sent accepted 2 dedup_window', '2 2',
		'amo_unknown_dedup_retry: a provider that breaks its promise delivers the retry too: an at_most_once duplicate, as the guide warns'],
);
for my $r (@rows)
{
	my ($kind, $want, $ledger, $what) = @$r;
	is(job_resolution($node, $id{$kind}), $want, "$kind: $what");
	my @l = split / /, ledger_key($kind eq 'amo_breaking' ? $liar : $sim, "$kind:1:o1");
	is("$l[0] $l[1]", $ledger, "$kind: the provider received and delivered (ledger)");
}

is($node->safe_psql('postgres', q{
		SELECT string_agg(kind || ' ' || resolved_dedup_window || ' ' || resolved_report, ', ' ORDER BY kind)
		  FROM notif_resolved WHERE kind IN ('amo_dedup', 'amo_dedup_lost', 'alo_dedup', 'amo_plain')}),
	'alo_dedup 1 0, amo_dedup 1 0, amo_dedup_lost 1 0, amo_plain 0 0',
	'notif_resolved counts the jobs resolved by the window, per type');
is($node->safe_psql('postgres', q{
		SELECT string_agg(kind || ' ' || losses_avoided || ' ' || duplicates_avoided, ', ' ORDER BY kind)
		  FROM notif_resolved WHERE kind IN ('amo_dedup', 'amo_dedup_lost', 'alo_dedup', 'amo_plain')}),
	'alo_dedup 0 0, amo_dedup 1 0, amo_dedup_lost 1 0, amo_plain 0 0',
	'notif_resolved: each at_most_once job retried inside the window and accepted is a loss avoided');

# A retry made for the window that cannot start inside it is not made: the
# type is paused after the first call, and resumed once the window (less
# the timeout: 10 s) has passed since the job was created.
$id{amo_passing} = $node->safe_psql('postgres',
	q{SELECT notif_enqueue(1, 'amo_passing', 'o1', '{"to":"+84900000001","text":"passing"}')});
ok( wait_until(
		$node,
		qq{SELECT status = 'queued' AND tries = 1 AND resolved_by = 'dedup_window'
		     FROM notif_job WHERE id = $id{amo_passing}}),
	'amo_passing: its first call ended unknown, and it is queued again for the window');
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = true WHERE code = 'amo_passing'});
wait_config_read($node, 'default');
is($node->safe_psql('postgres', qq{SELECT tries FROM notif_job WHERE id = $id{amo_passing}}),
	'1', 'amo_passing: paused before its retry was claimed');
ok( wait_until(
		$node,
		qq{SELECT now() > created_at + interval '10200 ms' FROM notif_job WHERE id = $id{amo_passing}}),
	'amo_passing: the window less the timeout has passed');
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code = 'amo_passing'});
ok( wait_until(
		$node,
		qq{SELECT status <> 'queued' AND claimed_by IS NULL FROM notif_job WHERE id = $id{amo_passing}}),
	'amo_passing: claimed after the window');
is(job_resolution($node, $id{'amo_passing'}), 'sent unknown 1 -',
	'amo_dedup_window_passed: at_most_once, the retry could not reach the provider inside its window: not made, sent and unknown as before');
like($node->safe_psql('postgres', qq{SELECT last_error FROM notif_job WHERE id = $id{amo_passing}}),
	qr/deduplication window passed before the retry could start/, 'amo_passing: last_error says why');
my @l = split / /, ledger_key($sim, 'amo_passing:1:o1');
is("$l[0] $l[1]", '1 1', 'amo_passing: the provider received it once');

# A retry made for the window that gets no answer to rely on leaves the
# job as its first, ambiguous call did: sent, outcome unknown, so that
# notif_retry asks for force.  The providers change between the calls:
# the retry is refused (400), or cannot reach the provider (a closed port)
# on each of its tries, or its deadline passes before it can be claimed.
fault_provider($node, 'then_refused', $sim->{url}, 'timeout_delivered', dedup_window => q('1 minute'));
fault_provider($node, 'then_gone', $sim->{url}, 'timeout_delivered', dedup_window => q('1 minute'));
fault_provider($node, 'then_late', $sim->{url}, 'timeout_delivered', dedup_window => q('1 minute'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max, deadline) VALUES
		('amo_then_refused', 'at_most_once', 3, 'then_refused', '3 s', '3 s', NULL),
		('amo_then_gone', 'at_most_once', 2, 'then_gone', '3 s', '3 s', NULL),
		('amo_then_late', 'at_most_once', 3, 'then_late', '3 s', '3 s', '6 s');
});
for my $kind (qw(amo_then_refused amo_then_gone amo_then_late))
{
	$id{$kind} = $node->safe_psql('postgres',
		qq{SELECT notif_enqueue(1, '$kind', 'o1', '{"to":"+84900000001","text":"$kind"}')});
}
ok( wait_until(
		$node,
		qq{SELECT count(*) = 3 FROM notif_job
		    WHERE id IN ($id{amo_then_refused}, $id{amo_then_gone}, $id{amo_then_late})
		      AND status = 'queued' AND tries = 1 AND resolved_by = 'dedup_window'}),
	'their first calls ended unknown, and they are queued again for the window');
my $closed_port = PostgreSQL::Test::Cluster::get_free_port();
$node->safe_psql('postgres', qq{
	UPDATE notif_provider SET headers = '{"X-Sim-Fault": "400"}' WHERE name = 'then_refused';
	UPDATE notif_provider SET url = 'http://127.0.0.1:$closed_port/send' WHERE name = 'then_gone';
	UPDATE notif_type SET paused = true WHERE code = 'amo_then_late';
});
wait_config_read($node, 'default');
ok( wait_until(
		$node,
		qq{SELECT now() > deadline_at FROM notif_job WHERE id = $id{amo_then_late}}),
	'amo_then_late: its deadline passed while it waited');
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code = 'amo_then_late'});
ok( wait_until(
		$node,
		qq{SELECT count(*) = 3 FROM notif_job
		    WHERE id IN ($id{amo_then_refused}, $id{amo_then_gone}, $id{amo_then_late})
		      AND status <> 'queued' AND claimed_by IS NULL}),
	'the three retries ended');
is(job_resolution($node, $id{'amo_then_refused'}), 'sent unknown 2 -',
	'amo_dedup_retry_rejected: the retry was refused, the job stays sent and unknown (its first call may have delivered)');
is($node->safe_psql('postgres', qq{SELECT string_agg(try || ' ' || outcome, ', ' ORDER BY try) FROM notif_calls WHERE job_id = $id{amo_then_refused}}),
	'1 unknown, 2 rejected', 'amo_then_refused: each call keeps its own outcome');
is(job_resolution($node, $id{'amo_then_gone'}), 'sent unknown 2 -',
	'amo_dedup_retry_unreached_exhausted: no try left after an unreached retry: sent and unknown');
is(job_resolution($node, $id{'amo_then_late'}), 'sent unknown 1 -',
	'claim_late_dedup_retry: the deadline passed before the retry: not sent again, sent and unknown (not expired)');
like($node->safe_psql('postgres', qq{SELECT last_error FROM notif_job WHERE id = $id{amo_then_late}}),
	qr/deadline passed before the retry made for the provider's deduplication window/, 'amo_then_late: last_error says why');
for my $kind (qw(amo_then_refused amo_then_gone amo_then_late))
{
	($rc, $out, $err) = $node->psql('postgres', qq{SELECT notif_retry($id{$kind})});
	like($err, qr/may already have been delivered/, "$kind: notif_retry without force refuses it (retry_maybe_delivered)");
}
is((split / /, ledger_key($sim, 'amo_then_late:1:o1'))[0], '1', 'amo_then_late: the provider received it once');

# an at_least_once retry made for the window that starts after it (its type
# paused while its first call was in flight, resumed once the window can no
# longer be reached): the window did not cover it, so the job is not
# resolved by it (a possible duplicate, counted as such).  The first call
# is held 3 s (its timeout), time for the sender to read the pause before
# it ends under any load; the window (10 s) is out of reach once a retry
# could not end inside it (after 10 - 3 = 7 s)
fault_provider($node, 'alo_late', $sim->{url}, 'timeout_delivered', dedup_window => q('10 s'),
	timeout => q('3 s'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
	VALUES ('alo_late', 'at_least_once', 3, 'alo_late', '100 ms', '100 ms')});
$id{alo_late} = $node->safe_psql('postgres',
	q{SELECT notif_enqueue(1, 'alo_late', 'o1', '{"to":"+84900000001","text":"alo_late"}')});
ok(wait_until($node, qq{SELECT status = 'sending' FROM notif_job WHERE id = $id{alo_late}}),
	'alo_late: its first call in flight');
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = true WHERE code = 'alo_late'});
wait_config_read($node, 'default');
ok( wait_until(
		$node,
		qq{SELECT status = 'queued' AND resolved_by = 'dedup_window' FROM notif_job WHERE id = $id{alo_late}}),
	'alo_late: queued for a retry inside the window (alo_retry_in_dedup_window)');
# the latest start that reaches the provider inside it: created_at + 10 s - 3 s
ok( wait_until(
		$node,
		qq{SELECT now() > created_at + interval '7000 ms' FROM notif_job WHERE id = $id{alo_late}}),
	'alo_late: the window can no longer be reached');
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code = 'alo_late'});
ok(wait_until($node, qq{SELECT status = 'sent' AND claimed_by IS NULL FROM notif_job WHERE id = $id{alo_late}}),
	'alo_late: sent by its late retry');
is(job_resolution($node, $id{'alo_late'}), 'sent accepted 2 -',
	'alo_late: a retry started after the window is not resolved by it (resolved_by NULL)');

# the window's bounds: finite, at most 100 years (17 and later have
# infinite intervals); the same for resolve_wait
($rc, $out, $err) = $node->psql('postgres',
	q{UPDATE notif_provider SET dedup_window = '200 years' WHERE name = 'dedup'});
like($err, qr/violates check constraint "notif_provider_dedup_window_check"/, 'a dedup_window of 200 years is refused');

done_testing();
