# 023_idle_connections.pl: a sender's idle keep-alive connections.  Their
# sockets stay in the sender's epoll set between calls (parked: no
# epoll_ctl per call, src/http/sockets.c); when the provider closes them,
# the sender takes them out of the set instead of spinning on their events,
# and its next calls open fresh connections.  More calls in flight than one
# of its multi handles takes reuse their connections from burst to burst.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = new_node('idle_connections');
my $sim = start_sim();
set_provider($node, 'default', $sim->{url}, idempotency_header => q('Idempotency-Key'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, lane) VALUES ('idle', 'at_least_once', 3, 'idle')});

# the sockets in the epoll sets of a process (each "tfd:" line of an epoll
# descriptor's fdinfo is one registered descriptor)
sub registered
{
	my ($pid) = @_;
	my $n = 0;
	for my $info (glob("/proc/$pid/fdinfo/*"))
	{
		open(my $f, '<', $info) or next;
		$n += scalar grep { /^tfd:/ } <$f>;
		close $f;
	}
	return $n;
}


sub wait_registered
{
	my ($pid, $cond) = @_;
	for (1 .. 300)
	{
		return 1 if $cond->(registered($pid));
		usleep(100_000);
	}
	return 0;
}

# jobs sent, some at once: the sender's connections stay open, idle
$node->safe_psql('postgres', q{SELECT notif_enqueue(1, 'idle', 'o-1', '{"to": "+84900000001"}')});
ok(wait_until($node, q{SELECT status = 'sent' FROM notif_job WHERE order_id = 'o-1'}), 'the first job is sent');
my $pid = sender_pid($node, q{idle});
$node->safe_psql('postgres', q{
	SELECT notif_enqueue(g, 'idle', 'b-' || g, '{"to": "+84900000002"}') FROM generate_series(1, 40) g});
ok(wait_until($node, q{SELECT count(*) = 40 FROM notif_job WHERE order_id LIKE 'b-%' AND status = 'sent'}),
	'40 more jobs sent');
# (its session's planner settings make a seq scan of a small table cost
# more than every JIT threshold: JIT stays off, LLVM is never loaded)
unlike(slurp_file("/proc/$pid/maps"), qr/libLLVM|llvmjit/, 'the sender compiles nothing with JIT');
my $parked = registered($pid);
# (the simulator counts its /stats connection too)
my $open = stats($sim)->{connections_open} - 1;
cmp_ok($open, '>=', 1, "the sender keeps $open connection(s) open to the provider");

# the provider goes away: every idle connection is closed under the sender
NotifTest::stop_sim($sim);
ok(wait_registered($pid, sub { $_[0] <= $parked - $open }),
	'the closed connections leave the epoll set (no event of theirs is left to spin on)');
is($parked - registered($pid), $open,
	"while idle, each open connection's socket stayed in the sender's epoll set ($parked registered, then "
	  . registered($pid) . ')');

# back on the same port: the next calls find their old connections dead and
# open new ones
$sim = start_sim({ port => $sim->{port} });
$node->safe_psql('postgres', q{
	SELECT notif_enqueue(g, 'idle', 'c-' || g, '{"to": "+84900000003"}') FROM generate_series(1, 10) g});
ok(wait_until($node, q{SELECT count(*) = 10 FROM notif_job WHERE order_id LIKE 'c-%' AND status = 'sent'}),
	'after the provider restarted, new jobs are sent');
is(scalar(grep { /^c-/ } map { (split /:/, $_)[2] } keys %{ ledger($sim) }), 10,
	'the restarted provider received each of them');

# 200 calls in flight at once, more than one of the sender's plain-http
# multi handles takes (64, src/http/http.c): each call has its connection, and a
# second such burst reuses them all (each handle its own), opening none.
# A burst is two claims (batch_size 100): the second follows the first at
# once, not at a timer, even when no socket has anything to say (the
# second burst's connections are open already): every call of a burst
# starts before the provider answers the first (0.8 s late).
$node->safe_psql('postgres', q{UPDATE notif_provider SET max_inflight = 300, timeout = '20 seconds' WHERE name = 'default'});
sim_get($sim, '/config?latency_ms=800');
for my $burst (1, 2, 3)
{
	my $r0 = stats($sim)->{requests};
	my $st;
	$node->safe_psql('postgres', qq{
		SELECT notif_enqueue(g, 'idle', 'd$burst-' || g, '{"to": "+84900000004"}') FROM generate_series(1, 200) g});
	for (1 .. 1000)
	{
		$st = stats($sim);
		last if $st->{requests} - $r0 >= 200;
		usleep(5_000);
	}
	is($st->{requests} - $r0, 200, "burst $burst: its 200 calls reached the provider");
	is($st->{connections_open} - 1, 200, "burst $burst: over 200 connections, one per call");
	ok(wait_until($node, qq{SELECT count(*) = 200 FROM notif_job WHERE order_id LIKE 'd$burst-%' AND status = 'sent'}),
		"burst $burst: all sent");
	is($node->safe_psql('postgres', qq{
		SELECT max(last_started_at) < min(last_ended_at) FROM notif_job WHERE order_id LIKE 'd$burst-%'}),
		't', "burst $burst: every call started before the first answer came");
	next unless $burst == 2;

	# idle for notif_deliver.spare_connections_idle (1 s here): the
	# connections beyond the first handle's 64 are closed; the next burst
	# opens them again
	$node->safe_psql('postgres', q{ALTER SYSTEM SET notif_deliver.spare_connections_idle = '1s'});
	$node->reload;
	my $open = 0;
	for (1 .. 600)
	{
		$open = stats($sim)->{connections_open} - 1;
		last if $open <= 64;
		usleep(50_000);
	}
	is($open, 64, 'after 1 s unused, the connections of the peak beyond the first 64 are closed');
}
is(scalar(grep { /^d[123]-/ } map { (split /:/, $_)[2] } keys %{ ledger($sim) }), 600,
	'the provider received each call of the three bursts');
done_testing();
