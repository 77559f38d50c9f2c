# 005_launcher.pl: the processes.  One sender per lane, started and stopped
# as lanes come and go; a stopped sender restarted without touching other
# lanes; CREATE and DROP EXTENSION noticed without a restart; a commit (and
# not a poll, nor anything before the commit) wakes the lane's sender; the
# retention purge; the providers' in-flight and rate limits; a database
# that does not exist: the launcher tries again with backoff, said once.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

# A long safety poll: whatever goes out quickly was woken, not polled.
my $node = PostgreSQL::Test::Cluster->new('launcher');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'notif_deliver'
notif_deliver.database = 'postgres'
notif_deliver.poll_interval = '1h'
notif_deliver.purge_interval = '1s'
notif_deliver.purge_batch_size = 100
});
$node->start;
my $sim = start_sim();

sub senders
{
	return $node->safe_psql('postgres', q{
		SELECT coalesce(string_agg(application_name, ',' ORDER BY application_name), '')
		  FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender'});
}

sub senders_are
{
	my ($expected, $what) = @_;
	ok( wait_until($node, qq{
			SELECT coalesce(string_agg(application_name, ',' ORDER BY application_name), '') = '$expected'
			  FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender'}),
		$what);
}

# --- before CREATE EXTENSION the launcher waits quietly ---
ok(wait_until($node, q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'notif_deliver launcher'}),
	'the launcher runs');
is(senders(), '', 'no sender without the extension');

# --- CREATE EXTENSION in a schema of its own is noticed without a restart ---
$node->safe_psql('postgres', q{
	CREATE SCHEMA notif;
	CREATE EXTENSION notif_deliver SCHEMA notif;
	SET search_path = notif;
	UPDATE notif_provider SET url = '} . $sim->{url} . q{', idempotency_header = 'Idempotency-Key' WHERE name = 'default';
	INSERT INTO notif_type VALUES ('otp', 'at_least_once', 3, '15 seconds');});
senders_are('notif_deliver sender default', 'a sender starts for the first lane');

# --- lanes come and go with notif_type ---
$node->safe_psql('postgres', q{
	INSERT INTO notif.notif_type (code, delivery, max_tries, lane) VALUES ('promo', 'at_most_once', 1, 'bulk')});
senders_are('notif_deliver sender bulk,notif_deliver sender default', 'a new lane gets its own sender');
$node->safe_psql('postgres', q{UPDATE notif.notif_type SET paused = true WHERE code = 'promo'});
senders_are('notif_deliver sender default', 'a lane whose types are all paused loses its sender');
$node->safe_psql('postgres', q{UPDATE notif.notif_type SET paused = false WHERE code = 'promo'});
senders_are('notif_deliver sender bulk,notif_deliver sender default', 'resumed: the lane is back');

# --- a stopped sender is started again; the other lane is not touched ---
my $default_pid = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE application_name = 'notif_deliver sender default'});
my $bulk_pid = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE application_name = 'notif_deliver sender bulk'});
$node->safe_psql('postgres', "SELECT pg_terminate_backend($bulk_pid)");
ok( wait_until($node, qq{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE application_name = 'notif_deliver sender bulk' AND pid <> $bulk_pid}),
	'the terminated sender was started again');
is($node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE application_name = 'notif_deliver sender default'}),
	$default_pid, 'the other lane kept its sender');

# --- the wake-up comes with the commit, not before it, and not from a poll ---
my $bg = $node->background_psql('postgres');
$bg->query_safe('BEGIN');
my $id = $bg->query_safe(q{SELECT notif.notif_enqueue(1, 'otp', 'wake', '{"text":"Ma OTP: 1"}')});
# another session's enqueue commits meanwhile and is sent: the sender has
# been awake since the first one's enqueue, and left it
$node->safe_psql('postgres', q{SELECT notif.notif_enqueue(1, 'otp', 'canary-1')});
ok(wait_until($node, "SELECT status <> 'queued' FROM notif.notif_job WHERE order_id = 'canary-1'"),
	'a job committed meanwhile was claimed');
is(ledger_key($sim, 'otp:1:wake'), '0 0 0', 'nothing is sent before the enqueue commits');
$bg->query_safe('COMMIT');
ok(wait_until($node, "SELECT status = 'sent' FROM notif.notif_job WHERE id = $id"),
	'the commit woke the sender');
is( $node->safe_psql('postgres', "SELECT sent_at - created_at < interval '1 minute' FROM notif.notif_job WHERE id = $id"),
	't', 'sent at once, with the safety poll set to an hour');
$bg->quit;

# a rolled-back enqueue wakes nobody and sends nothing
$node->safe_psql('postgres', q{
	BEGIN; SELECT notif.notif_enqueue(1, 'otp', 'rolled-back'); ROLLBACK;
	SELECT notif.notif_enqueue(1, 'otp', 'canary-2');});
ok(wait_until($node, "SELECT status <> 'queued' FROM notif.notif_job WHERE order_id = 'canary-2'"),
	'a job committed after the rollback was claimed');
is(ledger_key($sim, 'otp:1:rolled-back'), '0 0 0', 'a rolled-back enqueue sends nothing');

# --- provider limits: in flight and rate ---
$node->safe_psql('postgres', qq{
	INSERT INTO notif.notif_provider (name, url, headers, idempotency_header, max_inflight)
	VALUES ('narrow', '$sim->{url}', '{"X-Sim-Latency-Ms": "300"}', 'Idempotency-Key', 2);
	INSERT INTO notif.notif_provider (name, url, idempotency_header, rate_limit)
	VALUES ('slow', '$sim->{url}', 'Idempotency-Key', 20);
	INSERT INTO notif.notif_type (code, delivery, max_tries, provider, lane)
	VALUES ('narrow_a', 'at_least_once', 1, 'narrow', 'la'),
	       ('narrow_b', 'at_least_once', 1, 'narrow', 'lb'),
	       ('rated', 'at_most_once', 1, 'slow', 'lr');});
senders_are(join(',', map { "notif_deliver sender $_" } qw(bulk default la lb lr)), 'three more lanes');
$node->safe_psql('postgres', q{
	SELECT count(notif.notif_enqueue(g, 'narrow_a', 'n')) FROM generate_series(1, 6) g;
	SELECT count(notif.notif_enqueue(g, 'narrow_b', 'n')) FROM generate_series(1, 6) g;
	SELECT count(notif.notif_enqueue(g, 'rated', 'r')) FROM generate_series(1, 60) g;});
ok( wait_until($node,
		q{SELECT count(*) = 72 FROM notif.notif_job WHERE kind IN ('narrow_a', 'narrow_b', 'rated') AND outcome = 'accepted'}),
	'the throttled jobs were all sent')
  or diag($node->safe_psql('postgres', q{SELECT kind, status, outcome, count(*) FROM notif.notif_job GROUP BY 1, 2, 3}));
is( $node->safe_psql('postgres', q{
		SELECT max(c) FROM (
		  SELECT (SELECT count(*) FROM notif.notif_calls b JOIN notif.notif_job jb ON jb.id = b.job_id
		           WHERE jb.kind IN ('narrow_a', 'narrow_b')
		             AND b.started_at <= a.started_at AND b.ended_at > a.started_at) AS c
		    FROM notif.notif_calls a JOIN notif.notif_job ja ON ja.id = a.job_id
		   WHERE ja.kind IN ('narrow_a', 'narrow_b')) x}),
	'2', 'never more than the provider\'s max_inflight (2) calls at once, across two lanes');
cmp_ok( $node->safe_psql('postgres', q{
		SELECT extract(epoch FROM max(a.started_at) - min(a.started_at))
		  FROM notif.notif_calls a JOIN notif.notif_job j ON j.id = a.job_id WHERE j.kind = 'rated'}),
	'>=', 2.5, '60 calls at rate_limit 20/s take at least 2.5 s (a tenth of a second of burst)');

# --- the lane's cap, notif_deliver.max_inflight, reloads on SIGHUP ---
$node->append_conf('postgresql.conf', "notif_deliver.max_inflight = 2\n");
$node->reload;
$node->safe_psql('postgres', qq{
	INSERT INTO notif.notif_provider (name, url, headers, idempotency_header)
	VALUES ('wide', '$sim->{url}', '{"X-Sim-Latency-Ms": "300"}', 'Idempotency-Key');
	INSERT INTO notif.notif_type (code, delivery, max_tries, provider, lane)
	VALUES ('capped', 'at_least_once', 1, 'wide', 'lc');});
ok(wait_until($node, q{SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'notif_deliver sender lc'}),
	'the capped lane has its sender');
$node->safe_psql('postgres', q{SELECT count(notif.notif_enqueue(g, 'capped', 'c')) FROM generate_series(1, 8) g});
ok(wait_until($node, q{SELECT count(*) = 8 FROM notif.notif_job WHERE kind = 'capped' AND status = 'sent'}),
	'the capped jobs were sent');
is( $node->safe_psql('postgres', q{
		SELECT max(c) FROM (
		  SELECT (SELECT count(*) FROM notif.notif_calls b JOIN notif.notif_job jb ON jb.id = b.job_id
		           WHERE jb.kind = 'capped' AND b.started_at <= a.started_at AND b.ended_at > a.started_at) AS c
		    FROM notif.notif_calls a JOIN notif.notif_job ja ON ja.id = a.job_id
		   WHERE ja.kind = 'capped') x}),
	'2', 'never more than notif_deliver.max_inflight (2, set by reload) calls at once in a lane');
$node->append_conf('postgresql.conf', "notif_deliver.max_inflight = 256\n");
$node->reload;

# --- a backlog to a provider that answers at once drains without the poll ---
# Calls that end while the round is still starting its batch are recorded
# straight away; were they missed, the sender would sleep on sockets with
# nothing more to say until the safety poll (1 h here).
$node->safe_psql('postgres', q{
	INSERT INTO notif.notif_type (code, delivery, max_tries) VALUES ('backlog', 'at_least_once', 1);
	SELECT count(notif.notif_enqueue(g, 'backlog', 'b')) FROM generate_series(1, 20000) g;});
ok(wait_until($node, q{SELECT count(*) = 20000 FROM notif.notif_job WHERE kind = 'backlog' AND status = 'sent'}),
	'20,000 jobs to a provider answering at once are all sent, with no poll in between')
  or diag($node->safe_psql('postgres', q{SELECT status, count(*) FROM notif.notif_job WHERE kind = 'backlog' GROUP BY 1}));

# --- retention: finished jobs and their attempts are purged, the rest kept ---
$node->safe_psql('postgres', q{
	INSERT INTO notif.notif_type (code, delivery, max_tries, retention, provider)
	VALUES ('shortlived', 'at_most_once', 1, '1 second', 'default');
	INSERT INTO notif.notif_provider (name) VALUES ('nowhere');
	INSERT INTO notif.notif_type (code, delivery, max_tries, retention, provider)
	VALUES ('waiting', 'at_most_once', 1, '1 second', 'nowhere');
	SELECT count(notif.notif_enqueue(g, 'shortlived', 's')) FROM generate_series(1, 350) g;
	SELECT count(notif.notif_enqueue(g, 'waiting', 's')) FROM generate_series(1, 5) g;});
ok(wait_until($node, q{SELECT count(*) = 0 FROM notif.notif_job WHERE kind = 'shortlived'}),
	'finished jobs past their retention are deleted (in batches of 100)')
  or diag($node->safe_psql('postgres', q{SELECT kind, status, count(*), min(created_at), now() FROM notif.notif_job GROUP BY 1, 2}));
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM notif.notif_attempt a WHERE NOT EXISTS (SELECT FROM notif.notif_job j WHERE j.id = a.job_id)}),
	'0', 'with their attempt rows');
is($node->safe_psql('postgres', q{SELECT count(*) FROM notif.notif_job WHERE kind = 'waiting'}),
	'5', 'queued jobs are kept whatever their age');

# retention counts from when a job finished, not from when it was due: a
# job that waited past its retention (its provider had no url) is kept
# for its retention once sent, while purges go on (a canary of
# shortlived, sent after it, is purged first)
$node->safe_psql('postgres', q{
	INSERT INTO notif.notif_provider (name) VALUES ('later');
	INSERT INTO notif.notif_type (code, delivery, max_tries, retention, provider)
	VALUES ('waited', 'at_least_once', 1, '10 seconds', 'later');
	SELECT notif.notif_enqueue(1, 'waited', 'w')});
ok(wait_until($node, q{SELECT now() > created_at + interval '10 seconds' FROM notif.notif_job WHERE kind = 'waited'}),
	'a job waited longer than its retention');
$node->safe_psql('postgres', q{UPDATE notif.notif_provider SET url = '} . $sim->{url} . q{' WHERE name = 'later'});
ok(wait_until($node, q{SELECT status FROM notif.notif_job WHERE kind = 'waited'}, 'sent'), 'then it is sent');
$node->safe_psql('postgres', q{SELECT notif.notif_enqueue(1, 'shortlived', 'canary')});
ok(wait_until($node, q{SELECT count(*) = 0 FROM notif.notif_job WHERE kind = 'shortlived'}),
	'a purge ran after it was sent (the canary is gone)');
is($node->safe_psql('postgres', q{SELECT count(*) FROM notif.notif_job WHERE kind = 'waited'}),
	'1', 'the job sent after waiting is kept: its retention counts from then');
ok(wait_until($node, q{SELECT count(*) = 0 FROM notif.notif_job WHERE kind = 'waited'}),
	'and purged once its retention passed');
is($node->safe_psql('postgres', q{SELECT count(*) FROM notif.notif_job WHERE kind = 'otp'}),
	'3', 'jobs within their retention are kept (the woken one and two canaries)');

# --- DROP EXTENSION stops the senders; CREATE brings them back ---
$node->safe_psql('postgres', q{DROP EXTENSION notif_deliver CASCADE});
senders_are('', 'DROP EXTENSION: the senders stop');
$node->safe_psql('postgres', q{
	CREATE EXTENSION notif_deliver SCHEMA notif;
	INSERT INTO notif.notif_type (code, delivery, max_tries, lane) VALUES ('again', 'at_most_once', 1, 'again')});
senders_are('notif_deliver sender again', 'CREATE EXTENSION again: its lane gets a sender');

# --- notif_deliver.enabled = off stops every sender ---
$node->append_conf('postgresql.conf', "notif_deliver.enabled = off\n");
$node->reload;
senders_are('', 'disabled: no sender');
$node->append_conf('postgresql.conf', "notif_deliver.enabled = on\n");
$node->reload;
senders_are('notif_deliver sender again', 'enabled again');

# --- more lanes than background worker slots: said once, retried quietly ---
# max_worker_processes = 8: the logical replication launcher, our launcher,
# and six senders.  Lane "again" has one; seven more lanes: two cannot start.
$node->safe_psql('postgres', q{
	INSERT INTO notif.notif_type (code, delivery, max_tries, lane)
	SELECT 'many' || g, 'at_most_once', 1, 'many' || g FROM generate_series(1, 7) g});
sleep(4);
my @warnings = (slurp_file($node->logfile) =~ /could not start a sender of lane "many\d": no background worker slot/g);
is(scalar(@warnings), 2, 'each lane without a worker slot is reported once, not every second');
$node->safe_psql('postgres', q{DELETE FROM notif.notif_type WHERE code LIKE 'many%' AND code <> 'many1'});
ok( wait_until($node, q{SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender'}),
	'the lanes that went away released their slots');

# (a sender whose statement waited on a lock past its lock_timeout, e.g.
# behind DROP EXTENSION above, logs that and retries: by design, no error)
my @errors;
my %last_message;	# pid => its last line that is not a CONTEXT, DETAIL or HINT
for my $line (split /\n/, slurp_file($node->logfile))
{
	my ($pid, $level) = $line =~ /\[(\d+)\] (?:\S+ )?([A-Z]+):/ or next;
	if ($level =~ /^(CONTEXT|DETAIL|HINT|STATEMENT)$/)
	{
		push @errors, $last_message{$pid} // $line
		  if $line =~ /retrying with backoff/ && ($last_message{$pid} // '') !~ /due to lock timeout/;
		next;
	}
	$last_message{$pid} = $line;
}
is_deeply(\@errors, [], 'no sender logged an error');

# --- notif_deliver.database names no database: the launcher backs off ---
# (each launcher dies connecting, FATAL; the next waits 1 s, doubling)
$node->append_conf('postgresql.conf', "notif_deliver.database = 'nodb'");
my $log_at = -s $node->logfile;
$node->restart;
my @fatal;
my $until = time + $PostgreSQL::Test::Utils::timeout_default;
while (time < $until)
{
	@fatal = slurp_file($node->logfile, $log_at) =~ /^\S+ (\d+):(\d+):([\d.]+) \S+ \[\d+\] FATAL:  database "nodb" does not exist/mg;
	last if @fatal >= 4 * 3;
	usleep(100_000);
}
is(scalar(@fatal) / 3, 4, 'no database: the launcher tried four times');
my @at = map { $fatal[$_ * 3] * 3600 + $fatal[$_ * 3 + 1] * 60 + $fatal[$_ * 3 + 2] } 0 .. 3;
my @gaps = map { sprintf '%.1f', $at[$_ + 1] - $at[$_] } 0 .. 2;
ok($gaps[1] > $gaps[0] + 0.5 && $gaps[2] > $gaps[1] + 0.5,
	"no database: further apart each time (@gaps s), not a try a second");
my @said = slurp_file($node->logfile, $log_at) =~ /(could not connect to database "nodb"; trying again with backoff)/g;
is(scalar(@said), 1, 'no database: said once');
# the fifth launcher waits 8 s before it tries: a reload ends the wait
$node->safe_psql('postgres', 'CREATE DATABASE nodb');
$until = time + $PostgreSQL::Test::Utils::timeout_default;
my $pm = $node->{_pid};
usleep(20_000) until time > $until || `pgrep -P $pm -f 'notif_deliver launcher'` =~ /\d/;
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
ok(wait_until($node, q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'notif_deliver launcher' AND datname = 'nodb'}),
	'no database: created, the launcher connects to it');
my ($h, $m, $sec) = slurp_file($node->logfile, $log_at) =~ /^\S+ (\d+):(\d+):([\d.]+) \S+ \[\d+\] LOG:  notif_deliver launcher started for database "nodb"/m;
my $waited = $h * 3600 + $m * 60 + $sec - $at[3];
cmp_ok($waited, '<', 6, sprintf('no database: the reload ended the 8 s wait (connected %.1f s after the fourth try)', $waited));
done_testing();
