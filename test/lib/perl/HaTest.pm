# HaTest.pm: what the failover tests share.  A primary with a streaming
# standby (synchronous or not), its walreceiver (to stall with SIGSTOP), a
# load of at_least_once and at_most_once jobs against the simulator, and the
# guarantee checked from the simulator's ledger after a failover.
package HaTest;

use strict;
use warnings;
use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/lib/perl';
use NotifTest;

our @EXPORT = qw(new_pair walreceiver_pid add_load_types enqueue_load received
  sender_pid_of incarnations check_guarantee);

# A primary and a standby streaming from it, both started, notif_deliver
# preloaded on both and created on the primary.  sync => 1 makes the standby
# the primary's synchronous standby; conf => { ... } adds primary settings.
# The standby gets synchronous_standby_names = '' before its first start: a
# promoted standby must not inherit the primary's (doc/ha.md, the traps).
sub new_pair
{
	my ($name, %opt) = @_;
	my $primary = PostgreSQL::Test::Cluster->new("${name}_primary");
	my $standby_name = "${name}_standby";
	$primary->init(allows_streaming => 1);
	configure_node($primary, %{ $opt{conf} // {} });
	$primary->start;
	$primary->safe_psql('postgres', 'CREATE EXTENSION notif_deliver');
	$primary->backup('base');

	my $standby = PostgreSQL::Test::Cluster->new($standby_name);
	$standby->init_from_backup($primary, 'base', has_streaming => 1);
	$standby->append_conf('postgresql.conf', "synchronous_standby_names = ''\n");
	$standby->start;
	if ($opt{sync})
	{
		# once the standby streams (else the primary's commits would wait);
		# cluster_name is its application_name (PostgreSQL::Test::Cluster)
		$primary->safe_psql('postgres',
			"ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 ($standby_name)'; SELECT pg_reload_conf()");
	}
	my $state = $opt{sync} ? 'sync' : 'async';
	$primary->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = '$standby_name' AND state = 'streaming' AND sync_state = '$state'"
	) or die "the standby $standby_name did not start streaming ($state)";
	return ($primary, $standby);
}

sub walreceiver_pid
{
	my ($standby) = @_;
	my $pid;
	$standby->poll_query_until('postgres', 'SELECT count(*) = 1 FROM pg_stat_wal_receiver')
	  or die 'no walreceiver';
	return $standby->safe_psql('postgres', 'SELECT pid FROM pg_stat_wal_receiver');
}

# Two types, each in its own lane with its own provider (so that neither
# waits for the other's room): 'alo' at_least_once, 'amo' at_most_once.
sub add_load_types
{
	my ($node, $sim, %opt) = @_;
	for my $p ('sim_alo', 'sim_amo')
	{
		set_provider($node, $p, $sim->{url},
			idempotency_header => q('Idempotency-Key'),
			timeout => q('60 seconds'),
			max_inflight => $opt{max_inflight} // 256);
	}
	my $amo_tries = $opt{amo_tries} // 1;
	$node->safe_psql('postgres', qq{
		INSERT INTO notif_type (code, delivery, max_tries, provider, lane, backoff_min, backoff_max)
		VALUES ('alo', 'at_least_once', 5, 'sim_alo', 'alo', '50 ms', '100 ms'),
		       ('amo', 'at_most_once', $amo_tries, 'sim_amo', 'amo', '50 ms', '100 ms')});
	for my $lane ('alo', 'amo')
	{
		$node->poll_query_until('postgres',
			"SELECT count(*) = 1 FROM notif_workers() WHERE lane = '$lane' AND pid IS NOT NULL")
		  or die "no sender for lane $lane";
	}
}

# n jobs of each type, keys alo:U:ORDER and amo:U:ORDER for U in 1..n (order
# 'o' unless given), committed with synchronous_commit = on (so on the
# synchronous standby, if any) unless told otherwise.
sub enqueue_load
{
	my ($node, $n, $commit, $order) = @_;
	$commit //= 'on';
	$order //= 'o';
	$node->safe_psql('postgres', qq{
		SET synchronous_commit = $commit;
		SELECT count(notif_enqueue(g, 'alo', '$order', '{"text":"Ma OTP"}')) FROM generate_series(1, $n) g;
		SELECT count(notif_enqueue(g, 'amo', '$order', '{"text":"sale"}')) FROM generate_series(1, $n) g;});
}

# How many keys of a type (and order, if given) the simulator has received
# (at least once).
sub received
{
	my ($sim, $kind, $order) = @_;
	my $l = ledger($sim);
	my $re = defined $order ? qr/^\Q$kind\E:\d+:\Q$order\E$/ : qr/^\Q$kind\E:/;
	return scalar grep { $_ =~ $re && $l->{$_}{received} > 0 } keys %$l;
}

sub sender_pid_of
{
	my ($node, $lane) = @_;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM notif_workers() WHERE lane = '$lane' AND pid IS NOT NULL")
	  or die "no sender for lane $lane";
	return $node->safe_psql('postgres', "SELECT pid FROM notif_workers() WHERE lane = '$lane'");
}

# The incarnations of the senders a server log shows started.
sub incarnations
{
	my ($node) = @_;
	my $log = slurp_file($node->logfile);
	return ($log =~ /notif_deliver sender of lane "[^"]+" started \(incarnation (\d+)\)/g);
}

# After a failover: wait until every job is final on the new primary, then
# check the guarantee from the simulator's ledger.  Asserts what holds under
# any replication (at_least_once: no key whose enqueue committed is lost;
# nothing stays sending); asserts at_most_once's "never twice" unless
# amo_measure_only.  Returns the measured counts.
sub check_guarantee
{
	my ($node, $sim, $n, %opt) = @_;
	my $what = $opt{what} // 'after the failover';
	my $o = $opt{order} // 'o';
	ok( $node->poll_query_until('postgres', qq{
			SELECT count(*) = 2 * $n FROM notif_job
			 WHERE kind IN ('alo', 'amo') AND order_id = '$o'
			   AND status NOT IN ('queued', 'sending') AND claimed_by IS NULL}),
		"$what: all " . 2 * $n . ' jobs reached a final state, none held');
	my $l = ledger($sim);
	my %m = (alo_missing => 0, alo_dup => 0, amo_twice => 0, amo_lost => 0);
	for my $u (1 .. $n)
	{
		my $a = $l->{"alo:$u:$o"};
		my $b = $l->{"amo:$u:$o"};
		$m{alo_missing}++ if !$a || $a->{received} < 1;
		$m{alo_dup}++ if $a && $a->{received} > 1;
		$m{amo_twice}++ if $b && $b->{received} > 1;
		$m{amo_lost}++ if !$b || $b->{received} < 1;
	}
	is($m{alo_missing}, 0, "$what: every at_least_once key arrived at least once");
	is($node->safe_psql('postgres', qq{SELECT count(*) FROM notif_job WHERE kind = 'alo' AND order_id = '$o' AND status <> 'sent'}),
		'0', "$what: every at_least_once job ended sent");
	is($node->safe_psql('postgres', q{SELECT count(*) FROM notif_job WHERE status = 'sending'}),
		'0', "$what: nothing stays sending");
	unless ($opt{amo_measure_only})
	{
		is($m{amo_twice}, 0, "$what: no at_most_once key arrived twice");
		is( $node->safe_psql('postgres', qq{
				SELECT count(*) FROM notif_job j
				 WHERE kind = 'amo' AND order_id = '$o'
				   AND (SELECT count(*) FROM notif_calls a
				         WHERE a.job_id = j.id AND a.outcome IS DISTINCT FROM 'unreached') > 1}),
			'0', "$what: no at_most_once job was attempted again");
	}
	return \%m;
}

1;
