# 001_concurrent_enqueue.pl: notif_enqueue under concurrency.  Sessions that
# enqueue the same (user_id, kind, order_id) at once end with one row, and
# every one of them gets that row's id.  A transaction's jobs keep their
# type's row locked (the foreign key is checked once per kind) until it ends,
# and an index created on notif_active during a call waits for it.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('enqueue');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'notif_deliver'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION notif_deliver;
	INSERT INTO notif_type VALUES ('otp', 'at_least_once', 3, '15 seconds');
});

# Wait until some session whose query is LIKE $like (by default an enqueuer:
# the second one) is blocked on a lock (advisory locks included).
sub wait_for_lock_waiter
{
	my ($like, $what) = @_;
	$like //= '%notif_enqueue%';
	$what //= 'the second session never waited for the first';
	$node->poll_query_until('postgres',
		qq{SELECT count(*) > 0 FROM pg_stat_activity
		    WHERE wait_event_type = 'Lock' AND query LIKE '$like'})
	  or die $what;
}

# --- A commits: B, which waited on A's uncommitted row, gets A's id ---
my $a = $node->background_psql('postgres');
my $b = $node->background_psql('postgres');

$a->query_safe('BEGIN');
my $a_id = $a->query_safe(q{SELECT notif_enqueue(42, 'otp', 'race-commit', '{"text":"from A"}')});
$b->query_until(qr/started/, q{
\echo started
SELECT notif_enqueue(42, 'otp', 'race-commit', '{"text":"from B"}') AS b_id \gset
});
wait_for_lock_waiter();
$a->query_safe('COMMIT');
my $b_id = $b->query_safe('SELECT :b_id');

is($b_id, $a_id, 'the waiting session gets the id of the committed job');
is( $node->safe_psql('postgres',
		q{SELECT count(*) || ' ' || min(payload->>'text') FROM notif_job WHERE order_id = 'race-commit'}),
	'1 from A',
	'one row, with the first payload');

# --- A rolls back: B's enqueue goes ahead and its job is the one ---
$a->query_safe('BEGIN');
my $a_id2 = $a->query_safe(q{SELECT notif_enqueue(42, 'otp', 'race-abort', '{"text":"from A"}')});
$b->query_until(qr/started/, q{
\echo started
SELECT notif_enqueue(42, 'otp', 'race-abort', '{"text":"from B"}') AS b_id2 \gset
});
wait_for_lock_waiter();
$a->query_safe('ROLLBACK');
my $b_id2 = $b->query_safe('SELECT :b_id2');

isnt($b_id2, $a_id2, 'after a rollback the waiting session inserts its own job');
is( $node->safe_psql('postgres',
		q{SELECT id || ' ' || (payload->>'text') FROM notif_job WHERE order_id = 'race-abort'}),
	"$b_id2 from B",
	'the surviving row is the second session\'s');

# --- REPEATABLE READ: a key committed after the snapshot cannot be reused ---
# (as INSERT ... ON CONFLICT DO NOTHING does: a serialization failure)
my $rr = $node->background_psql('postgres', on_error_stop => 0);
$rr->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$rr->query_safe('SELECT count(*) FROM notif_job');
$b->query_safe(q{SELECT notif_enqueue(42, 'otp', 'race-rr')});
$rr->query(q{SELECT notif_enqueue(42, 'otp', 'race-rr')});
like($rr->{stderr}, qr/could not serialize access due to concurrent update/,
	'REPEATABLE READ: a key committed after the snapshot is a serialization failure');
$rr->{stderr} = '';
$rr->query_safe('ROLLBACK');
# a key committed before the snapshot is simply found
$rr->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
is($rr->query_safe(q{SELECT notif_enqueue(42, 'otp', 'race-rr')}),
	$node->safe_psql('postgres', q{SELECT id FROM notif_job WHERE order_id = 'race-rr'}),
	'REPEATABLE READ: a key visible to the snapshot returns its job');
$rr->query_safe('COMMIT');
$rr->quit;

# --- the type's row stays locked for the transaction that enqueues ---
# The foreign key's check runs for the first job of a kind in a transaction
# and locks the type's row in notif_type; the later jobs rely on that lock.
# So another session cannot delete the type meanwhile: it waits, and fails
# once the jobs commit.
$node->safe_psql('postgres', q{INSERT INTO notif_type VALUES ('fk_held', 'at_most_once', 1, NULL)});
my $deleter = $node->background_psql('postgres', on_error_stop => 0);
$a->query_safe('BEGIN');
$a->query_safe(q{SELECT count(notif_enqueue(g, 'fk_held', 'held-' || g)) FROM generate_series(1, 100) g});
$deleter->query_until(qr/started/, q{
\echo started
DELETE FROM notif_type WHERE code = 'fk_held';
});
wait_for_lock_waiter('%DELETE FROM notif_type%', 'the DELETE of the type never waited for the enqueuer');
$a->query_safe(q{SELECT count(notif_enqueue(g, 'fk_held', 'held-' || g)) FROM generate_series(101, 200) g});
$a->query_safe('COMMIT');
$deleter->query(q{SELECT 1});
like($deleter->{stderr},
	qr/update or delete on table "notif_type" violates foreign key constraint "notif_job_kind_fkey"/,
	'a type deleted while a transaction enqueues its jobs waits for it, then fails on the foreign key');
is( $node->safe_psql('postgres', q{
		SELECT count(*) || ' ' || (SELECT count(*) FROM notif_type WHERE code = 'fk_held')
		  FROM notif_job WHERE kind = 'fk_held'}),
	'200 1',
	'the 200 jobs and their type are there');
$deleter->quit;

# --- an index created on notif_active while an enqueue is in its call ---
# The enqueue locks notif_active before it uses its (cached) indexes: a
# CREATE INDEX that comes while the call is stalled (here in a CHECK that
# waits for an advisory lock) waits for the enqueue's transaction, and the
# new index has the job.
$node->safe_psql('postgres', q{
	CREATE EXTENSION amcheck;
	CREATE FUNCTION stall_for(u bigint) RETURNS boolean LANGUAGE plpgsql AS $$
	BEGIN
		IF u = 777 THEN PERFORM pg_advisory_xact_lock_shared(4242); END IF;
		RETURN true;
	END $$;
	ALTER TABLE notif_job ADD CONSTRAINT stall CHECK (stall_for(user_id));
});
my $holder = $node->background_psql('postgres');
$holder->query_safe('SELECT pg_advisory_lock(4242)');
$a->query_until(qr/started/, q{
\echo started
SELECT notif_enqueue(777, 'otp', 'index-race') AS race_id \gset
});
wait_for_lock_waiter('%notif_enqueue%', 'the enqueue never stalled in its CHECK');
$b->query_until(qr/started/, q{
\echo started
CREATE INDEX race_idx ON notif_active (next_at);
});
$node->poll_query_until('postgres', q{
	SELECT EXISTS (SELECT FROM pg_stat_activity
	                WHERE wait_event_type = 'Lock' AND query LIKE 'CREATE INDEX race_idx%')
	    OR EXISTS (SELECT FROM pg_class WHERE relname = 'race_idx')})
  or die "CREATE INDEX neither waited nor ended";
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM pg_stat_activity
		 WHERE wait_event_type = 'Lock' AND query LIKE 'CREATE INDEX race_idx%'}),
	'1',
	'a CREATE INDEX on notif_active waits for the enqueue in its call');
$holder->query_safe('SELECT pg_advisory_unlock(4242)');
my $race_id = $a->query_safe('SELECT :race_id');
$b->query_safe('SELECT 1');
is( $node->safe_psql('postgres', q{
		SELECT bt_index_check('race_idx', true)::text = ''
		   AND EXISTS (SELECT FROM notif_active a JOIN notif_job j ON j.id = a.job_id
		                WHERE j.order_id = 'index-race')}),
	't',
	'the index created meanwhile has the job');
$node->safe_psql('postgres', q{
	DROP INDEX race_idx;
	ALTER TABLE notif_job DROP CONSTRAINT stall;
	DROP FUNCTION stall_for(bigint);
	DROP EXTENSION amcheck;
});
$holder->quit;

$a->quit;
$b->quit;

# --- many clients hammering a small key space ---
# Every call records the id it got; afterwards each key has exactly one job
# and every call for it returned that job's id.
$node->safe_psql('postgres', q{CREATE TABLE seen (k int, id bigint)});
$node->pgbench(
	'--no-vacuum --client=8 --jobs=2 --transactions=400',
	0,
	[qr{processed: 3200/3200}],
	[qr{^$}],
	'8 clients enqueue 200 keys concurrently without an error',
	{
		'001_enqueue_race' => q{
\set k random(1, 200)
INSERT INTO seen SELECT :k, notif_enqueue(:k, 'otp', 'hammer-' || :k);
}
	});

is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM notif_job WHERE order_id LIKE 'hammer-%'}),
	$node->safe_psql('postgres', q{SELECT count(DISTINCT k) FROM seen}),
	'one job per key');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM seen s
		  LEFT JOIN notif_job j ON j.user_id = s.k AND j.kind = 'otp' AND j.order_id = 'hammer-' || s.k
		 WHERE j.id IS DISTINCT FROM s.id}),
	'0',
	'every call got the id of its key\'s one job');
is($node->safe_psql('postgres', q{SELECT count(*) FROM seen}), '3200', 'every call was recorded');

$node->stop;
done_testing();
