# 004_crash.pl: the guarantee across a sender's death.  SIGKILL of the
# sender during a call (PostgreSQL then restarts every backend, as after any
# crash), an immediate-mode server restart, and a fast shutdown with calls
# in flight: no at_least_once job is lost, no at_most_once job marked 'sent'
# is ever attempted again, nothing stays 'sending'.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = new_node('crash');
my $sim = start_sim('--hold-ms', '120000');

# The first call of each key hangs; later ones are accepted.
set_provider($node, 'first_hangs', $sim->{url},
	headers => q('{"X-Sim-Fault": "timeout", "X-Sim-Fail-First": "1"}'),
	idempotency_header => q('Idempotency-Key'),
	timeout => q('60 seconds'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
	VALUES ('amo', 'at_most_once', 3, 'first_hangs', '100 ms', '200 ms'),
	       ('alo', 'at_least_once', 3, 'first_hangs', '100 ms', '200 ms')});


sub in_flight
{
	my ($key) = @_;
	for (1 .. 300)
	{
		return 1 if (split / /, ledger_key($sim, $key))[0] >= 1;
		select(undef, undef, undef, 0.1);
	}
	return 0;
}

# --- SIGKILL while an at_most_once and an at_least_once call are in flight ---
my $amo = $node->safe_psql('postgres', q{SELECT notif_enqueue(1, 'amo', 'kill', '{"text":"sale"}')});
my $alo = $node->safe_psql('postgres', q{SELECT notif_enqueue(1, 'alo', 'kill', '{"text":"Ma OTP: 1"}')});
ok(in_flight('amo:1:kill') && in_flight('alo:1:kill'), 'both calls reached the provider and hang');
is($node->safe_psql('postgres', "SELECT status FROM notif_job WHERE id = $amo"), 'sent',
	'at_most_once: committed sent before the call');
is($node->safe_psql('postgres', "SELECT status FROM notif_job WHERE id = $alo"), 'sending',
	'at_least_once: sending during the call');

my $pid = sender_pid($node);
kill 'KILL', $pid;
ok(wait_until($node, q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender'}),
	'the server restarted after the crash, and the sender with it');
ok(wait_until($node, "SELECT status = 'sent' AND claimed_by IS NULL FROM notif_job WHERE id = $alo"),
	'at_least_once: the job was sent again after the restart');
is(job_row($node, $alo), 'sent accepted 2 200', 'lost_retry: at_least_once, the interrupted call counted as a try');
is(ledger_key($sim, 'alo:1:kill'), '2 1 1', 'at_least_once: the provider got it again, same key and body');
sleep(2);
is(job_row($node, $amo), 'sent unknown 1 -', 'lost_at_most_once: recorded as unknown, not attempted again');
is(ledger_key($sim, 'amo:1:kill'), '1 0 1', 'at_most_once: the provider got it exactly once');
is( $node->safe_psql('postgres', "SELECT string_agg(try || ':' || outcome, ',' ORDER BY try) FROM notif_calls WHERE job_id = $alo"),
	'1:unknown,2:accepted', 'the interrupted call has its attempt row');

# --- immediate-mode server restart with an at_least_once call in flight ---
my $alo2 = $node->safe_psql('postgres', q{SELECT notif_enqueue(2, 'alo', 'restart', '{"text":"Ma OTP: 2"}')});
my $amo2 = $node->safe_psql('postgres', q{SELECT notif_enqueue(2, 'amo', 'restart', '{"text":"sale"}')});
ok(in_flight('alo:2:restart') && in_flight('amo:2:restart'), 'calls in flight before the restart');
$node->stop('immediate');
$node->start;
ok(wait_until($node, "SELECT status = 'sent' AND claimed_by IS NULL FROM notif_job WHERE id = $alo2"),
	'at_least_once: sent after an immediate restart');
is(job_row($node, $alo2), 'sent accepted 2 200', 'lost_retry: at_least_once, tried again, counting the try');
ok(wait_until($node, "SELECT claimed_by IS NULL FROM notif_job WHERE id = $amo2"),
	'at_most_once: recovered after the restart');
is(job_row($node, $amo2), 'sent unknown 1 -', 'lost_at_most_once: never attempted again');
is(ledger_key($sim, 'amo:2:restart'), '1 0 1', 'at_most_once: the provider got it once');

# --- a fast shutdown with calls in flight stops within seconds ---
my $alo3 = $node->safe_psql('postgres', q{SELECT notif_enqueue(3, 'alo', 'stop', '{"text":"Ma OTP: 3"}')});
ok(in_flight('alo:3:stop'), 'a call in flight before the shutdown');
my $t0 = time();
$node->stop('fast');
my $took = time() - $t0;
cmp_ok($took, '<', 5, 'the server stopped promptly with a call hanging for two minutes');
$node->start;
ok(wait_until($node, "SELECT status = 'sent' AND claimed_by IS NULL FROM notif_job WHERE id = $alo3"),
	'at_least_once: the interrupted job was sent after the restart');
is(job_row($node, $alo3), 'sent accepted 2 200', 'lost_retry: at_least_once, the interrupted call counted as a try');

# --- synchronous_commit = off: the at_most_once claim is still durable ---
# The WAL writer flushes asynchronous commits only every 10 s here: a claim
# committed asynchronously would be lost by an immediate restart, and the
# job claimed and sent again.
$node->append_conf('postgresql.conf', "synchronous_commit = off\nwal_writer_delay = '10s'\n");
$node->reload;
my $amo4 = $node->safe_psql('postgres',
	q{SET synchronous_commit = on; SELECT notif_enqueue(4, 'amo', 'async', '{"text":"sale"}')});
ok(in_flight('amo:4:async'), 'under synchronous_commit = off, an at_most_once call in flight');
$node->stop('immediate');
$node->start;
ok(wait_until($node, "SELECT claimed_by IS NULL FROM notif_job WHERE id = $amo4"),
	'at_most_once: its claim survived the immediate restart, and was recovered');
sleep(2);
is(job_row($node, $amo4), 'sent unknown 1 -', 'at_most_once under asynchronous commit: never attempted again');
is(ledger_key($sim, 'amo:4:async'), '1 0 1', 'the provider got it once');

is($node->safe_psql('postgres', q{SELECT count(*) FROM notif_job WHERE status = 'sending'}), '0',
	'nothing stays sending');
# no crash loop: the sender logged no error
my $log = slurp_file($node->logfile);
unlike($log, qr/retrying with backoff/, 'the sender logged no error');

done_testing();
