# test/ha/patroni.pl: the guarantee across Patroni's switchover and
# failover, end to end (doc/ha.md, "Patroni").  One etcd and two Patroni
# nodes on 127.0.0.1, synchronous_mode: true, notif_deliver in each node's
# shared_preload_libraries, the server at synchronous_commit = off.  Under
# load (5,000 at_least_once + 5,000 at_most_once jobs against the simulator
# holding each call 200 ms): a planned switchover, then an unplanned
# failover (kill -9 of the primary's postmaster, with primary_start_timeout
# 0 so that Patroni fails over rather than restart it).  After each: every
# at_least_once key arrived and ended sent, no at_most_once key arrived
# twice or was attempted again, nothing stays sending.  Then a failover
# while the provider is down and its circuit breakers are open.
#
# Not in `make test` (it takes about a minute with the build, more on a busy
# machine, and needs Patroni): `make test-ha`,
# which .ci/run runs after `make test`.  Needs patroni and etcd-server.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use HaTest;
use File::Path qw(make_path);
use IO::Socket::INET;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

for my $bin ('patroni', 'patronictl', 'etcd')
{
	plan skip_all => "$bin is not installed (test/deps.sh --ha installs it)"
	  unless grep { -x "$_/$bin" } split /:/, $ENV{PATH};
}

my $N = 5000;
my $base = PostgreSQL::Test::Utils::tempdir('patroni');
my $sockdir = PostgreSQL::Test::Utils::tempdir_short();
chomp(my $bindir = `pg_config --bindir`);
my @children;    # pids started here, killed at the end whatever happens

sub spawn
{
	my ($log, @cmd) = @_;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		open(STDOUT, '>>', $log) or die;
		open(STDERR, '>&', \*STDOUT);
		exec(@cmd) or die "exec $cmd[0]: $!";
	}
	push @children, $pid;
	return $pid;
}

# GET http://127.0.0.1:port/path; returns the status code (0: no answer)
sub http_status
{
	my ($port, $path) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 2)
	  or return 0;
	print $s "GET $path HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
	my $line = <$s>;
	close $s;
	return ($line && $line =~ m{^HTTP/\S+ (\d+)}) ? $1 : 0;
}

# Wait (at most 90 s unless told) for a condition, polling every 0.2 s.
sub wait_for
{
	my ($what, $cond, $secs) = @_;
	my $deadline = time() + ($secs // 90);
	while (time() < $deadline)
	{
		return 1 if $cond->();
		usleep(200_000);
	}
	diag("timed out waiting for: $what");
	return 0;
}

# --- etcd ---
my ($etcd_client, $etcd_peer) = map { PostgreSQL::Test::Cluster::get_free_port() } 1 .. 2;
my $logs = $PostgreSQL::Test::Utils::log_path;
spawn("$logs/etcd.log", 'etcd', '--name', 'e1', '--data-dir', "$base/etcd",
	'--listen-client-urls', "http://127.0.0.1:$etcd_client",
	'--advertise-client-urls', "http://127.0.0.1:$etcd_client",
	'--listen-peer-urls', "http://127.0.0.1:$etcd_peer",
	'--initial-advertise-peer-urls', "http://127.0.0.1:$etcd_peer",
	'--initial-cluster', "e1=http://127.0.0.1:$etcd_peer",
	'--initial-cluster-state', 'new');
ok(wait_for('etcd', sub { http_status($etcd_client, '/health') == 200 }, 30), 'etcd is up');

# --- two Patroni nodes ---
my %node;
for my $name ('node1', 'node2')
{
	my ($pg_port, $rest_port) = map { PostgreSQL::Test::Cluster::get_free_port() } 1 .. 2;
	my $conf = "$base/$name.yml";
	PostgreSQL::Test::Utils::append_to_file($conf, <<"EOF");
scope: notif_ha
name: $name
log:
  level: INFO
restapi:
  listen: 127.0.0.1:$rest_port
  connect_address: 127.0.0.1:$rest_port
etcd3:
  hosts: 127.0.0.1:$etcd_client
bootstrap:
  dcs:
    ttl: 20
    loop_wait: 1
    retry_timeout: 5
    maximum_lag_on_failover: 1048576
    primary_start_timeout: 0
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_wal_senders: 5
        max_replication_slots: 5
        max_worker_processes: 20
        synchronous_commit: "off"
  initdb:
    - encoding: UTF8
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:$pg_port
  connect_address: 127.0.0.1:$pg_port
  data_dir: $base/$name
  bin_dir: $bindir
  pgpass: $base/$name.pgpass
  basebackup:
    - checkpoint: fast
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: '$sockdir'
    shared_buffers: 32MB
    shared_preload_libraries: notif_deliver
    notif_deliver.database: postgres
    notif_deliver.poll_interval: 1s
EOF
	# a handle for psql on the node: PostgreSQL::Test::Cluster on its socket
	my $pg = PostgreSQL::Test::Cluster->new($name, port => $pg_port);
	$pg->{_host} = $sockdir;
	$node{$name} = { conf => $conf, pg_port => $pg_port, rest => $rest_port, pg => $pg,
		log => "$logs/patroni_$name.log", data => "$base/$name" };
}

sub start_patroni
{
	my ($name) = @_;
	$node{$name}{patroni} = spawn($node{$name}{log}, 'patroni', $node{$name}{conf});
}

sub is_primary { http_status($node{ $_[0] }{rest}, '/primary') == 200 }

sub senders_running
{
	my ($name) = @_;
	my $r = eval {
		$node{$name}{pg}->safe_psql('postgres',
			q{SELECT count(*) FROM notif_workers() WHERE role = 'sender' AND pid IS NOT NULL});
	};
	return defined $r && $r eq '2';
}

# Synchronous both for PostgreSQL and in Patroni's view (the DCS /sync key,
# which a switchover checks): GET /sync on the standby answers 200.
sub sync_standby_is
{
	my ($primary, $standby) = @_;
	return 0 unless http_status($node{$standby}{rest}, '/sync') == 200;
	my $r = eval {
		$node{$primary}{pg}->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_replication WHERE application_name = '$standby' AND sync_state = 'sync'");
	};
	return defined $r && $r eq '1';
}

start_patroni('node1');
ok(wait_for('node1 primary', sub { is_primary('node1') }), 'Patroni bootstrapped node1 as primary');
my $p1 = $node{node1}{pg};
$p1->safe_psql('postgres', 'CREATE EXTENSION notif_deliver');
start_patroni('node2');
ok(wait_for('node2 synchronous', sub { sync_standby_is('node1', 'node2') }),
	'node2 streams from node1 as its synchronous standby');
my $p2 = $node{node2}{pg};
is($p2->safe_psql('postgres', q{SELECT state FROM notif_workers() WHERE role = 'launcher'}),
	'waiting for promotion (standby)', 'node2: the launcher waits for promotion');

my $sim = start_sim('--latency-ms', '200');
add_load_types($p1, $sim);

# --- a planned switchover under load ---
enqueue_load($p1, $N, 'on', 'o1');
ok(wait_for('calls going out', sub { received($sim, 'amo', 'o1') >= 1000 }), 'switchover: calls are going out');
my $t0 = time();
my $out = `patronictl -c $node{node1}{conf} switchover --leader node1 --candidate node2 --force 2>&1`;
note($out);
ok(wait_for('node2 primary', sub { is_primary('node2') && senders_running('node2') }),
	'switchover: node2 is the primary and runs its senders')
  or BAIL_OUT('the switchover did not happen');
my $switch_s = time() - $t0;
my $m1 = check_guarantee($p2, $sim, $N, order => 'o1', what => 'after the switchover');

# --- an unplanned failover: kill -9 of the primary's postmaster ---
ok(wait_for('node1 synchronous again', sub { sync_standby_is('node2', 'node1') }),
	'node1 rejoined as node2\'s synchronous standby')
  or BAIL_OUT('node1 did not rejoin');
enqueue_load($p2, $N, 'on', 'o2');
ok(wait_for('calls going out', sub { received($sim, 'amo', 'o2') >= 1000 }), 'failover: calls are going out');
my $postmaster = (split /\n/, slurp_file("$node{node2}{data}/postmaster.pid"))[0];
cmp_ok($p2->safe_psql('postgres', q{SELECT count(*) FROM notif_job WHERE claimed_by IS NOT NULL}),
	'>', 0, 'failover: calls in flight when the postmaster dies');
$t0 = time();
kill 'KILL', $postmaster;
ok(wait_for('node1 primary', sub { is_primary('node1') && senders_running('node1') }),
	'failover: node1 is the primary and runs its senders');
my $failover_s = time() - $t0;
my $m2 = check_guarantee($p1, $sim, $N, order => 'o2', what => 'after the failover');
check_guarantee($p1, $sim, $N, order => 'o1', what => 'the switchover\'s jobs, after the failover');
# --- a failover while the providers' circuit breakers are open ---
# The simulator goes away (every connection refused); the breakers of both
# providers open on node1 and the jobs wait; node1's postmaster is killed.
# node2's breakers start closed (shared memory does not fail over), find
# the providers down and open; once the simulator is back, a probe closes
# each and every job goes out: at_least_once keys all arrive, no
# at_most_once key twice.
my $M = 500;
ok(wait_for('node2 synchronous again', sub { sync_standby_is('node1', 'node2') }),
	'node2 rejoined as node1\'s synchronous standby')
  or BAIL_OUT('node2 did not rejoin');
$p1->safe_psql('postgres', q{UPDATE notif_provider SET breaker_threshold = 5, breaker_cooldown = '2 s'
	WHERE name IN ('sim_alo', 'sim_amo')});
my $sim_port = $sim->{port};
NotifTest::stop_sim($sim);
enqueue_load($p1, $M, 'on', 'o3');
my $breakers_open = q{SELECT count(*) FROM notif_provider_health
	WHERE name IN ('sim_alo', 'sim_amo') AND state <> 'closed'};
ok(wait_for('breakers open on node1', sub { $p1->safe_psql('postgres', $breakers_open) eq '2' }),
	'breakers: the providers are down, both breakers open on node1');
$postmaster = (split /\n/, slurp_file("$node{node1}{data}/postmaster.pid"))[0];
kill 'KILL', $postmaster;
ok(wait_for('node2 primary', sub { is_primary('node2') && senders_running('node2') }),
	'breakers: node2 is the primary and runs its senders');
ok(wait_for('breakers open on node2', sub { (eval { $p2->safe_psql('postgres', $breakers_open) } // '') eq '2' }),
	'breakers: node2\'s own breakers find the providers down and open');
is($p2->safe_psql('postgres',
		q{SELECT count(*) FROM notif_job WHERE kind = 'alo' AND order_id = 'o3' AND status = 'failed'}),
	'0', 'breakers: no at_least_once job failed while the providers were down');
$sim = start_sim({ port => $sim_port }, '--latency-ms', '200');
my $m3 = check_guarantee($p2, $sim, $M, order => 'o3', what => 'after a failover with the breakers open');
ok(wait_for('breakers closed on node2', sub { $p2->safe_psql('postgres', $breakers_open) eq '0' }),
	'breakers: closed again once the provider answered');

note(sprintf('switchover: %.1f s until the new primary ran its senders; '
	  . 'failover (kill -9 of the postmaster): %.1f s', $switch_s, $failover_s));
note("at_least_once re-sent: $m1->{alo_dup} by the switchover, $m2->{alo_dup} by the failover; "
	  . "at_most_once lost (never arrived): $m1->{amo_lost}, $m2->{amo_lost} (of $N each); "
	  . "with the breakers open, $m3->{amo_lost} of $M at_most_once jobs failed before they opened");

# --- stop everything (the END block below kills what is left) ---
for my $name ('node1', 'node2')
{
	my $pid = $node{$name}{patroni};
	kill 'TERM', $pid;
	waitpid($pid, 0);
	@children = grep { $_ != $pid } @children;
}

END
{
	local $?;
	kill 'TERM', $_ for @children;
	waitpid($_, 0) for @children;
	for my $name (keys %node)
	{
		next unless -f "$node{$name}{data}/postmaster.pid";
		system('pg_ctl', '-D', $node{$name}{data}, '-m', 'immediate', 'stop');
	}
}

done_testing();
