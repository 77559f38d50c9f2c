# 014_failover.pl: the guarantee across a failover to a streaming standby
# (doc/ha.md).  5,000 at_least_once and 5,000 at_most_once jobs, the
# simulator holding every call for 200 ms; the primary stopped in immediate
# mode with calls in flight while its standby lags (its walreceiver stopped
# with SIGSTOP: the standby has not received the newest claims); the standby
# promoted.  With a synchronous standby and the server at
# synchronous_commit = off: no at_least_once job is lost, no at_most_once job
# arrives twice, nothing stays 'sending', and the senders' incarnations on
# the promoted node are above every one the old primary used.  The same with
# asynchronous replication: at_least_once holds, and what at_most_once lost
# to the failover is measured.  A stalled synchronous standby: the lanes
# show that they wait, SIGTERM stops a waiting sender within seconds without
# letting its calls leave, and when replication resumes nothing is sent twice
# and nothing lost.  On a standby: notif_enqueue fails read-only,
# notif_workers() and notif_stats answer, the launcher waits for promotion.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use HaTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $N = 5000;

# Is a lane's sender stuck waiting for the synchronous standby?  (A wait
# seen twice, half a second apart: not one of the brief waits of a healthy
# standby.)  Gives up after 20 s.
sub stalled_in_sync_rep
{
	my ($node, $lane) = @_;
	my $sql = qq{SELECT count(*) FROM pg_stat_activity
		 WHERE application_name = 'notif_deliver sender $lane' AND wait_event = 'SyncRep'
		   AND now() - query_start > interval '0.5 s'};
	for (1 .. 200)
	{
		return 1 if $node->safe_psql('postgres', $sql) eq '1';
		select(undef, undef, undef, 0.1);
	}
	return 0;
}

# A failover with the standby lagging.  Returns the measured counts.
sub failover_run
{
	my ($name, %opt) = @_;
	my $sync = $opt{sync};
	my ($primary, $standby) = new_pair($name, sync => $sync,
		conf => { synchronous_commit => 'off' });
	my $sim = start_sim('--latency-ms', '200');

	# A fresh shared memory on the primary after the standby started: the
	# primary's incarnations now start from a later clock than the standby's.
	$primary->restart;

	# 64 calls at a time of 200 ms each: about 15 s per lane, so that
	# calls are still in flight when the primary dies (at 256, a machine
	# with nothing else to do sent all 5,000 first)
	add_load_types($primary, $sim, max_inflight => 64);
	$primary->wait_for_catchup($standby);
	if ($opt{standby_checks})
	{
		# --- on a standby ---
		my ($ret, $out, $err) = $standby->psql('postgres',
			q{SELECT notif_enqueue(1, 'alo', 'on-standby', '{}')},
			extra_params => [ '-v', 'VERBOSITY=verbose' ]);
		isnt($ret, 0, 'standby: notif_enqueue fails');
		like($err, qr/ERROR:  25006: cannot execute notif_enqueue\(\) in a read-only transaction/,
			'standby: with PostgreSQL\'s read-only error (SQLSTATE 25006)');
		is($standby->safe_psql('postgres', 'SELECT 1'), '1', 'standby: the server is fine after it');
		ok( $standby->poll_query_until('postgres', q{
				SELECT state = 'waiting for promotion (standby)' FROM notif_workers() WHERE role = 'launcher'}),
			'standby: notif_workers() shows the launcher waiting for promotion');
		is($standby->safe_psql('postgres', q{SELECT count(*) FROM notif_workers() WHERE role = 'sender'}),
			'0', 'standby: no sender runs');
		is($standby->safe_psql('postgres', q{
				SELECT (SELECT coalesce(sum(queued_now + in_flight), 0) FROM notif_stats)
				     = (SELECT count(*) FROM notif_job WHERE status = 'queued' OR claimed_by IS NOT NULL)}), 't',
			'standby: notif_stats answers, its backlog and calls in flight read from notif_job (notif_active is unreadable there)');
		($ret, $out, $err) = $primary->psql('postgres',
			q{SET default_transaction_read_only = on; SELECT notif_enqueue(1, 'alo', 'read-only', '{}')});
		like($err, qr/cannot execute notif_enqueue\(\) in a read-only transaction/,
			'primary: a read-only transaction cannot enqueue either');
		is($primary->safe_psql('postgres', q{SELECT count(*) FROM notif_job WHERE order_id = 'read-only'}),
			'0', 'primary: and nothing was written');
	}

	enqueue_load($primary, $N);
	# the enqueues committed under synchronous_commit = on: on the standby
	$primary->wait_for_catchup($standby) unless $sync;

	# --- the standby falls behind in the middle of the run ---
	for (1 .. 600)
	{
		last if received($sim, 'amo') >= 1000;
		select(undef, undef, undef, 0.05);
	}
	cmp_ok(received($sim, 'amo'), '>=', 1000, "$name: at_most_once calls are going out");
	my $walreceiver = walreceiver_pid($standby);
	kill 'STOP', $walreceiver;
	my $alo_at_stall = received($sim, 'alo');
	if ($sync)
	{
		ok(stalled_in_sync_rep($primary, 'amo'),
			"$name: the at_most_once sender waits for the synchronous standby");
	}
	my $amo_at_stall = received($sim, 'amo');

	# a new alo sender, whose claims the standby never gets
	my $alo_pid = sender_pid_of($primary, 'alo');
	$primary->safe_psql('postgres', "SELECT pg_terminate_backend($alo_pid)");
	$primary->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM notif_workers() WHERE lane = 'alo' AND pid IS NOT NULL AND pid <> $alo_pid")
	  or die 'the alo sender did not come back';
	for (1 .. 600)
	{
		last if received($sim, 'alo') >= $alo_at_stall + 300 || received($sim, 'alo') == $N;
		select(undef, undef, undef, 0.05);
	}
	cmp_ok(received($sim, 'alo'), '>', $alo_at_stall,
		"$name: at_least_once calls went on after the standby stalled");
	my $amo_exposed = received($sim, 'amo') - $amo_at_stall;
	if ($sync)
	{
		is($amo_exposed, 0,
			"$name: no at_most_once call left while the standby could not confirm its claim");
	}
	my ($old_max) = sort { $b <=> $a } incarnations($primary);

	# --- failover: the primary dies with calls in flight ---
	cmp_ok($primary->safe_psql('postgres', q{SELECT count(*) FROM notif_job WHERE claimed_by IS NOT NULL}),
		'>', 0, "$name: calls in flight when the primary dies");
	$primary->stop('immediate');
	kill 'CONT', $walreceiver;
	my $t0 = time();
	$standby->promote;
	ok($standby->poll_query_until('postgres', q{SELECT count(*) = 2 FROM notif_workers() WHERE role = 'sender' AND pid IS NOT NULL}),
		"$name: the promoted standby runs a sender per lane");
	note(sprintf("%s: senders running %.1f s after the promotion began", $name, time() - $t0));

	my $m = check_guarantee($standby, $sim, $N, what => $name, amo_measure_only => !$sync);

	# incarnations are unique across the timeline switch
	my @new = incarnations($standby);
	ok(@new >= 2, "$name: the promoted node logged its senders' incarnations");
	is(scalar(grep { $_ <= $old_max } @new), 0,
		"$name: every incarnation on the promoted node is above every one of the old primary");
	my $log = slurp_file($standby->logfile);
	like($log, qr/recovered \d+ job\(s\) left in flight by a stopped sender/,
		"$name: the promoted node's senders recovered the old primary's jobs in flight");
	is(scalar(() = $log =~ /this server is a standby; waiting for its promotion/g), 1,
		"$name: the standby's launcher said once that it waits for the promotion");
	like($log, qr/the server was promoted \(timeline 2\); starting the senders/,
		"$name: and when the promotion came");

	$m->{amo_exposed} = $amo_exposed;
	$standby->stop;
	NotifTest::stop_sim($sim);
	return $m;
}

# --- synchronous standby, the server at synchronous_commit = off ---
my $m = failover_run('sync', sync => 1, standby_checks => 1);
note("sync: at_least_once re-sent $m->{alo_dup}, at_most_once lost $m->{amo_lost} (of $N each)");

# --- asynchronous standby: measured, not asserted, for at_most_once ---
$m = failover_run('async', sync => 0);
note("async: at_most_once claims the standby had not received: $m->{amo_exposed}; "
	  . "re-sent after the failover: $m->{amo_twice}; lost: $m->{amo_lost}; "
	  . "at_least_once re-sent: $m->{alo_dup} (of $N each)");

# --- a stalled synchronous standby, no failover ---
{
	my ($primary, $standby) = new_pair('stall', sync => 1);
	my $sim = start_sim('--latency-ms', '200');
	add_load_types($primary, $sim, amo_tries => 3);
	my $walreceiver = walreceiver_pid($standby);
	kill 'STOP', $walreceiver;
	my $n = 200;
	enqueue_load($primary, $n, 'local');
	for my $lane ('alo', 'amo')
	{
		ok( $primary->poll_query_until('postgres', qq{
				SELECT state = 'waiting for synchronous replication' FROM notif_workers() WHERE lane = '$lane'}),
			"stall: notif_workers() shows lane $lane waiting for synchronous replication");
		is( $primary->safe_psql('postgres', qq{
				SELECT wait_event || ' / ' || query FROM pg_stat_activity
				 WHERE application_name = 'notif_deliver sender $lane'}),
			'SyncRep / committing: waiting for synchronous replication',
			"stall: pg_stat_activity shows lane $lane waiting for synchronous replication");
	}
	is(received($sim, 'amo') + received($sim, 'alo'), 0, 'stall: no call left before its claim was confirmed');

	my $pid = sender_pid_of($primary, 'amo');
	my $t0 = time();
	kill 'TERM', $pid;
	ok( $primary->poll_query_until('postgres',
			"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"),
		'stall: SIGTERM ended the waiting sender');
	my $took = time() - $t0;
	cmp_ok($took, '<', 5, 'stall: within seconds');
	note(sprintf('stall: the waiting sender stopped %.2f s after SIGTERM', $took));
	like(slurp_file($primary->logfile), qr/canceling the wait for synchronous replication/,
		'stall: PostgreSQL logged the cancelled wait');
	is(received($sim, 'amo'), 0, 'stall: the calls of its unconfirmed claim never left');
	ok( $primary->poll_query_until('postgres', qq{
			SELECT count(*) = 1 FROM pg_stat_activity
			 WHERE application_name = 'notif_deliver sender amo' AND pid <> $pid AND wait_event = 'SyncRep'}),
		'stall: its successor waits too');

	# a cancel request ends the wait too: the calls stay back, the sender stays
	my $successor = sender_pid_of($primary, 'amo');
	is( $primary->safe_psql('postgres', q{
			SELECT count(*) > 0 FROM notif_attempt a JOIN notif_job j ON j.id = a.job_id
			 WHERE j.kind = 'amo' AND a.error = 'not sent: the synchronous standby did not confirm the claim'}),
		't', 'stall: the claims of the stopped sender are recorded as not sent');
	$primary->safe_psql('postgres', "SELECT pg_cancel_backend($successor)");
	my $held = 0;
	for (1 .. 300)
	{
		$held = slurp_file($primary->logfile)
		  =~ /\[$successor\] LOG:  notif_deliver sender of lane "amo": \d+ claimed job\(s\) not sent/;
		last if $held;
		select(undef, undef, undef, 0.1);
	}
	ok($held, 'stall: a cancelled wait: its claims are held back too');
	ok(stalled_in_sync_rep($primary, 'amo'),
		'stall: it records them in a commit that waits for the standby again');
	is(sender_pid_of($primary, 'amo'), $successor, 'stall: the cancelled sender goes on');
	is(received($sim, 'amo'), 0, 'stall: and its calls never left either');

	kill 'CONT', $walreceiver;
	check_guarantee($primary, $sim, $n, what => 'stall, then resumed');
	my $l = ledger($sim);
	is(scalar(grep { ($l->{"amo:$_:o"}{received} // 0) == 1 } 1 .. $n), $n,
		'stall, then resumed: every at_most_once key arrived exactly once: nothing lost');
	$primary->stop;
	$standby->stop;
}

done_testing();
