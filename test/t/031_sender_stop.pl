# 031_sender_stop.pl: a sender leaves soon after SIGTERM, whatever it is
# doing: with 200 calls held by a provider that would answer in
# ten minutes, and in the middle of a drain of 50,000 jobs.  Its
# held calls are recorded as the lifecycle says (at_least_once: queued
# again, sent later), and the launcher starts a new sender.  A sender that
# waited for its calls, or finished its backlog first, would take minutes
# here; the bound checked (5 s) is far from both, so that a loaded machine
# does not fail it.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = new_node('sender_stop');
my $sim = start_sim('--hold-ms', '600000');
set_provider($node, 'default', $sim->{url}, idempotency_header => q('Idempotency-Key'),
	max_inflight => 400, timeout => q('10 minutes'));
# the first call of each key hangs; later ones are accepted
set_provider($node, 'hangs', $sim->{url},
	headers => q('{"X-Sim-Fault": "timeout", "X-Sim-Fail-First": "1"}'),
	idempotency_header => q('Idempotency-Key'), max_inflight => 400, timeout => q('10 minutes'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, lane, backoff_min, backoff_max)
	VALUES ('held', 'at_least_once', 3, '1 hour', 'hangs', 'stop', '100 ms', '200 ms'),
	       ('bulk', 'at_least_once', 3, '1 hour', 'default', 'stop', '100 ms', '200 ms')});


# SIGTERM to the sender; how long until its process is gone
sub stop_time
{
	my ($pid) = @_;
	my $t0 = time;
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	usleep(20_000) while kill(0, $pid) && time - $t0 < 60;
	return time - $t0;
}

# --- 200 calls held in flight ---
$node->safe_psql('postgres', q{SELECT notif_enqueue(g, 'held', 'h' || g, '{}') FROM generate_series(1, 200) g});
ok(wait_until($node, q{SELECT count(*) = 200 FROM notif_job WHERE kind = 'held' AND claimed_by IS NOT NULL}),
	'200 calls held by the sender');
my $pid = sender_pid($node, q{stop});
my $took = stop_time($pid);
cmp_ok($took, '<', 5, sprintf('with 200 calls in flight, the sender left %.2f s after SIGTERM', $took));
my $again = sender_pid($node, q{stop});
isnt($again, $pid, 'the launcher started a new sender');
ok(wait_until($node, q{SELECT count(*) = 200 FROM notif_job WHERE kind = 'held' AND status = 'sent'}),
	'at_least_once: the interrupted calls were made again and sent');

# --- in the middle of a drain ---
$node->safe_psql('postgres', q{SELECT notif_enqueue(g, 'bulk', 'b' || g, '{}') FROM generate_series(1, 50000) g});
ok(wait_until($node, q{SELECT count(*) > 500 FROM notif_job WHERE kind = 'bulk' AND status = 'sent'}),
	'the sender is draining 50,000 jobs');
$took = stop_time($again);
cmp_ok($took, '<', 5, sprintf('in the middle of a drain, the sender left %.2f s after SIGTERM', $took));
cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM notif_job WHERE kind = 'bulk' AND status = 'queued'}),
	'>', 1000, 'it left with most of the drain still queued (it did not finish it first)');
ok(wait_until($node, q{SELECT count(*) = 50000 FROM notif_job WHERE kind = 'bulk' AND status = 'sent'}),
	'a new sender drained the rest');
my $l = ledger($sim);
is(scalar(grep { !($l->{"held:$_:h$_"} && $l->{"held:$_:h$_"}{delivered} >= 1) } 1 .. 200), 0,
	'no at_least_once job lost: the provider has each held one delivered');

done_testing();
