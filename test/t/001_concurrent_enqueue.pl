# 001_concurrent_enqueue.pl: notif_enqueue under concurrency.  Sessions that
# enqueue the same (user_id, kind, order_id) at once end with one row, and
# every one of them gets that row's id.  A transaction's jobs keep their
# type's row locked (the foreign key is checked once per kind) until it ends.
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

# Wait until some session is blocked on a lock (the second enqueuer).
sub wait_for_lock_waiter
{
	$node->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM pg_stat_activity
		   WHERE wait_event_type = 'Lock' AND query LIKE '%notif_enqueue%'})
	  or die "the second session never waited for the first";
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
$node->poll_query_until('postgres',
	q{SELECT count(*) > 0 FROM pg_stat_activity
	   WHERE wait_event_type = 'Lock' AND query LIKE '%DELETE FROM notif_type%'})
  or die "the DELETE of the type never waited for the enqueuer";
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
