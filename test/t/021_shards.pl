# 021_shards.pl: four shards (each its own cluster with notif_deliver) behind
# a router (notif_deliver_router over PL/Proxy), one provider simulator.
# Racing enqueues through the router end with one job per key, on its
# user's shard, whose id names the shard; the place_order outbox of
# doc/shards.md commits or rolls back with its notification; a stopped shard
# fails only its own users' calls, with an error naming it, and delivers its
# queue after the restart; a provider limit set from the router holds for
# all shards together.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib 'test/lib/perl';
use NotifTest;

my $N = 4;

my $probe = PostgreSQL::Test::Cluster->new('probe');
plan skip_all => 'PL/Proxy is not installed (postgresql-15-plproxy; test/deps.sh installs it)'
  unless -f $probe->config_data('--sharedir') . '/extension/plproxy.control';

my $sim = start_sim();

# --- the shards ---
my @shards;
for my $k (0 .. $N - 1)
{
	my $node = new_node("shard$k");
	$node->safe_psql('postgres', qq{
		SELECT notif_shard_setup($k, $N);
		UPDATE notif_provider SET url = '$sim->{url}', idempotency_header = 'Idempotency-Key'
		 WHERE name = 'default';
		INSERT INTO notif_provider (name, url, idempotency_header, rate_limit)
		VALUES ('paced', '$sim->{url}', 'Idempotency-Key', 20),
		       ('rated', '$sim->{url}', 'Idempotency-Key', NULL);
		INSERT INTO notif_type (code, delivery, max_tries, provider, lane) VALUES
		    ('otp', 'at_least_once', 5, 'default', 'default'),
		    ('alert', 'at_least_once', 10, 'paced', 'paced'),
		    ('promo', 'at_most_once', 1, 'paced', 'paced'),
		    ('bulk', 'at_most_once', 1, 'rated', 'rated');});
	push @shards, $node;
}

# --- the router ---
my $router = PostgreSQL::Test::Cluster->new('router');
$router->init;
$router->start;
my $partitions = join(', ',
	map { "p$_ 'host=" . $shards[$_]->host . ' port=' . $shards[$_]->port . " dbname=postgres'" } 0 .. $N - 1);
$router->safe_psql('postgres', qq{
	SET client_min_messages = warning;
	CREATE EXTENSION notif_deliver_router CASCADE;
	CREATE SERVER notif_shards FOREIGN DATA WRAPPER plproxy OPTIONS ($partitions);
	CREATE USER MAPPING FOR PUBLIC SERVER notif_shards;});
sub rsql { return $router->safe_psql('postgres', $_[0]); }

is( rsql(q{SELECT string_agg(partition || ':' || shard || '/' || shards || ':' || ok, ' ' ORDER BY partition) FROM notif_shards()}),
	'0:0/4:true 1:1/4:true 2:2/4:true 3:3/4:true',
	'every partition answers as the shard of its number');

# the shard of a user and of a job, as the router computes them
sub shard_of { my ($u) = @_; return rsql("SELECT notif_router_shard_of_user($u)"); }

# on every shard, one value (summed over the shards)
sub sum_shards
{
	my ($sql) = @_;
	my $sum = 0;
	$sum += $_->safe_psql('postgres', $sql) for @shards;
	return $sum;
}

# --- eight sessions race through the router on the same 1,000 keys ---
rsql(q{CREATE TABLE seen (session int, user_id bigint, id bigint)});
$router->pgbench(
	'--no-vacuum --client=8 --jobs=2 --transactions=1',
	0,
	[qr{processed: 8/8}],
	[qr{^(?!.*ERROR)}s],
	'8 sessions enqueue the same 1,000 keys through the router, each in its own order',
	{
		'020_race' => q{
INSERT INTO seen
SELECT :client_id, k, notif_enqueue(k, 'otp', 'race', jsonb_build_object('text', 'code ' || k))
  FROM (SELECT k FROM generate_series(1, 1000) k ORDER BY (k * (2 * :client_id + 3)) % 1009 OFFSET 0) o;
}
	});

is(sum_shards(q{SELECT count(*) FROM notif_job WHERE order_id = 'race'}),
	1000, 'exactly 1,000 jobs cluster-wide');
is( sum_shards(qq{SELECT count(*) FROM notif_job j, notif_shard s WHERE j.order_id = 'race'
		   AND ((hashint8(j.user_id) & ($N - 1)) <> s.shard OR j.id % $N <> s.shard)}),
	0, 'each on its user\'s shard, with an id that names that shard');
my %job_of;
for my $node (@shards)
{
	for my $line (split /\n/, $node->safe_psql('postgres', q{SELECT user_id || ' ' || id FROM notif_job WHERE order_id = 'race'}))
	{
		my ($u, $id) = split / /, $line;
		$job_of{$u} = $id;
	}
}
my @seen = map { [ split /\|/ ] } split /\n/, rsql(q{SELECT session, user_id, id FROM seen});
is(scalar(@seen), 8000, 'every call returned');
is(scalar(grep { !defined $_->[2] || !defined $job_of{ $_->[1] } || $job_of{ $_->[1] } ne $_->[2] } @seen),
	0, 'every session got the id of its key\'s one job');
is(rsql(q{SELECT count(*) FROM (SELECT session FROM seen GROUP BY session HAVING count(DISTINCT user_id) = 1000) s}),
	8, 'each session saw all 1,000 keys');

ok( wait_until($router, q{SELECT coalesce(sum(jobs), 0) = 1000 FROM notif_counts() WHERE kind = 'otp' AND status = 'sent'}),
	'all 1,000 delivered (notif_counts on the router)');
my $ledger = ledger($sim);
is(scalar(grep { /^otp:\d+:race$/ && $ledger->{$_}{received} == 1 && $ledger->{$_}{delivered} == 1 } keys %$ledger),
	1000, 'each received and delivered once by the simulator');

# the cluster-wide reads: a row per shard
is( rsql(q{SELECT string_agg(shard || ':' || sent, ' ' ORDER BY shard) FROM notif_stats() WHERE kind = 'otp'}),
	join(' ', map { "$_:" . $shards[$_]->safe_psql('postgres', q{SELECT count(*) FROM notif_job WHERE kind = 'otp' AND status = 'sent'}) } 0 .. $N - 1),
	'notif_stats: each shard\'s row for the type, with its shard');
is(rsql(q{SELECT count(DISTINCT shard) FROM notif_workers() WHERE role = 'launcher' AND pid IS NOT NULL}),
	$N, 'notif_workers: each shard\'s launcher');

# an order_id bigint is the text of its number, as on a shard
is(rsql(q{SELECT notif_enqueue(5, 'otp', 123456789012::bigint)}), rsql(q{SELECT notif_enqueue(5, 'otp', '123456789012')}),
	'notif_enqueue with a bigint order_id is the job of its text');

# --- one job: cancel and retry go to the shard its id names ---
my $later = rsql(q{SELECT notif_enqueue(77, 'otp', 'later', '{}', now() + interval '1 hour')});
my $s77 = shard_of(77);
is(rsql("SELECT notif_router_shard_of_job($later)"), $s77, 'the job id names its user\'s shard');
rsql("SELECT notif_cancel($later)");
is($shards[$s77]->safe_psql('postgres', "SELECT status || ' ' || last_error FROM notif_job WHERE id = $later"),
	'failed cancelled', 'notif_cancel through the router cancels the job on its shard');
my ($rc, $out, $err) = $router->psql('postgres', "SELECT notif_cancel($later)");
like($err, qr/ERROR:  notif_cancel: job $later is failed, only a queued job can be cancelled\n.*Raised by shard $s77 \(partition p$s77 of cluster "notif_shards"\)/s,
	'a shard\'s error comes back with its message, naming the shard');
rsql("SELECT notif_retry($later)");
ok(wait_until($shards[$s77], "SELECT status = 'sent' FROM notif_job WHERE id = $later"),
	'notif_retry(job_id) through the router re-drives it on its shard (due now: sent)');

# the router's functions run as their caller, so that each shard's own
# grants decide what a role may do there
like(rsql(q{SELECT count(*) FILTER (WHERE p.prosecdef) || ' of ' || count(*) FROM pg_proc p
           JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
           JOIN pg_extension e ON e.oid = d.refobjid WHERE e.extname = 'notif_deliver_router'}),
	qr/^0 of [1-9]/, 'no function of notif_deliver_router is SECURITY DEFINER');

# an application role: EXECUTE on notif_enqueue and USAGE on the server on
# the router, EXECUTE on notif_shard_enqueue on the shards
$_->safe_psql('postgres', q{CREATE ROLE app LOGIN;
	GRANT EXECUTE ON FUNCTION notif_shard_enqueue(bigint, text, text, jsonb, timestamptz) TO app;}) for @shards;
rsql(q{CREATE ROLE app LOGIN;
	GRANT USAGE ON FOREIGN SERVER notif_shards TO app;
	GRANT EXECUTE ON FUNCTION notif_enqueue(bigint, text, text, jsonb, timestamptz) TO app;});
ok($router->safe_psql('postgres', q{SET ROLE app; SELECT notif_enqueue(78, 'otp', 'as-app')}) > 0,
	'a role granted notif_enqueue and the server enqueues through the router');
($rc, $out, $err) = $router->psql('postgres', q{SET ROLE app; SELECT notif_enqueue(78, 'nope', 'as-app')});
like($err, qr/ERROR:  unknown notification type "nope"/, '... and gets the shard\'s errors');
($rc, $out, $err) = $router->psql('postgres', q{SET ROLE app; SELECT notif_cancel(1)});
like($err, qr/permission denied for function notif_cancel/, '... but not notif_cancel');

# a shard refuses a user of another shard
($rc, $out, $err) = $shards[ ($s77 + 1) % $N ]->psql('postgres', q{SELECT notif_shard_enqueue(77, 'otp', 'stray')});
like($err, qr/user 77 belongs to shard $s77, not to this shard/, 'a shard refuses to enqueue a user of another shard');

# --- the router's functions and what a caller's search_path holds ---
# Each pins search_path = pg_catalog, pg_temp and names what it uses with
# its schema (1.1): look-alikes a caller put first on their path are never
# run, on the router nor on the shards
like(rsql(q{SELECT count(*) FILTER (WHERE p.proconfig IS DISTINCT FROM '{"search_path=pg_catalog, pg_temp"}')
                || ' of ' || count(*) FROM pg_proc p
           JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
           JOIN pg_extension e ON e.oid = d.refobjid WHERE e.extname = 'notif_deliver_router'}),
	qr/^0 of [1-9]/, 'every function of notif_deliver_router pins search_path to pg_catalog, pg_temp');
# a format() that fits notif_router_error's call better than pg_catalog's
# (text, VARIADIC "any") wins over it even with pg_catalog searched first;
# a hashint8(bigint) first on the path would choose the shard
rsql(q{CREATE SCHEMA evil;
	CREATE FUNCTION evil.format(text, int, int, text) RETURNS text LANGUAGE plpgsql
	    AS $$BEGIN RAISE EXCEPTION 'look-alike format() ran'; END$$;
	CREATE FUNCTION evil.hashint8(bigint) RETURNS int LANGUAGE plpgsql
	    AS $$BEGIN RAISE EXCEPTION 'look-alike hashint8() ran'; END$$;});
($rc, $out, $err) = $router->psql('postgres', "SET search_path = evil, public; SELECT notif_cancel($later)");
like($err, qr/ERROR:  notif_cancel: job $later is \w+, only a queued job can be cancelled\n.*Raised by shard $s77 /s,
	'a caller with a look-alike format() first on its path: the shard\'s error, named by the router');
unlike($err, qr/look-alike/, '... and the look-alike format() never ran');
($rc, $out, $err) = $router->psql('postgres', q{SET search_path = evil, pg_catalog, public; SELECT notif_enqueue(77, 'otp', 'look-alike')});
ok($rc == 0 && $out > 0 && $out % $N == $s77,
	'a caller with a look-alike hashint8() first on its path: the job goes to its user\'s shard') or diag($err);
rsql(q{DROP SCHEMA evil CASCADE});
# on the shard, the role PL/Proxy connects as has a look-alike
# notif_shard_enqueue first on its search_path
my $s78 = shard_of(78);
$shards[$s78]->safe_psql('postgres', q{CREATE SCHEMA evil; GRANT USAGE ON SCHEMA evil TO app;
	CREATE FUNCTION evil.notif_shard_enqueue(user_id bigint, kind text, order_id text,
	    payload jsonb DEFAULT '{}', not_before timestamptz DEFAULT NULL)
	RETURNS bigint LANGUAGE sql RETURN -1;
	ALTER ROLE app SET search_path = evil, public;});
my $app_job = $router->safe_psql('postgres', q{SET ROLE app; SELECT notif_enqueue(78, 'otp', 'look-alike')});
is($shards[$s78]->safe_psql('postgres', qq{SELECT count(*) FROM notif_job WHERE id = $app_job AND order_id = 'look-alike'}),
	'1', 'a look-alike notif_shard_enqueue first on the shard role\'s path: the router still enqueued through the extension\'s');
$shards[$s78]->safe_psql('postgres', q{ALTER ROLE app RESET search_path; DROP SCHEMA evil CASCADE;});

# 1.0 -> 1.1 gives what a fresh 1.1 install gives: each function whole
# (body, settings, grants), comments, the extension's members
my $router_fingerprint = q{
SELECT e.extversion || ' ' || md5(string_agg(x, E'\n' ORDER BY x)) FROM pg_extension e, (
    SELECT format('%s %s %s %s', p.oid::regprocedure, p.proacl, p.proconfig, md5(pg_get_functiondef(p.oid)))
      FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'notif\_%'
    UNION ALL
    SELECT format('member %s', pg_describe_object(d.classid, d.objid, d.objsubid))
      FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
     WHERE d.refclassid = 'pg_extension'::regclass AND e.extname = 'notif_deliver_router' AND d.deptype = 'e'
    UNION ALL
    SELECT format('comment %s: %s', pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description)
      FROM pg_description d JOIN pg_proc p ON d.classoid = 'pg_proc'::regclass AND d.objoid = p.oid
     WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'notif\_%'
) s(x) WHERE e.extname = 'notif_deliver_router' GROUP BY e.extversion};
$router->safe_psql('postgres', q{CREATE DATABASE router_updated; CREATE DATABASE router_fresh;});
$router->safe_psql('router_updated', q{SET client_min_messages = warning;
	CREATE EXTENSION notif_deliver_router VERSION '1.0' CASCADE;
	ALTER EXTENSION notif_deliver_router UPDATE;});
$router->safe_psql('router_fresh', q{SET client_min_messages = warning; CREATE EXTENSION notif_deliver_router CASCADE;});
my $updated = $router->safe_psql('router_updated', $router_fingerprint);
like($updated, qr/^1\.1 /, 'the router updates from 1.0 to 1.1');
is($updated, $router->safe_psql('router_fresh', $router_fingerprint),
	'and has the same functions, settings, grants, comments and members as a fresh 1.1');

# the shards' functions are called by the router's schema name: a router in
# schema notif, with the shards' notif_deliver in public, finds none, and
# notif_shards() says so for each partition (doc/shards.md)
$router->safe_psql('postgres', q{CREATE DATABASE router_notif;});
$router->safe_psql('router_notif', qq{SET client_min_messages = warning;
	CREATE SCHEMA notif;
	CREATE EXTENSION notif_deliver_router SCHEMA notif CASCADE;
	CREATE SERVER notif_shards FOREIGN DATA WRAPPER plproxy OPTIONS ($partitions);
	CREATE USER MAPPING FOR PUBLIC SERVER notif_shards;});
is( $router->safe_psql('router_notif', q{SELECT count(*) FILTER (WHERE NOT ok
		AND error ~ 'REMOTE ERROR: (schema "notif"|function notif\.notif_shard_info\(\)) does not exist') || ' of ' || count(*)
	  FROM notif.notif_shards()}),
	"$N of $N", 'a router in schema notif calls notif.notif_shard_info() on the shards: notif_shards() says it is not there')
  or diag($router->safe_psql('router_notif', q{SELECT string_agg(ok || ': ' || coalesce(error, ''), E'\n') FROM notif.notif_shards()}));

# --- the outbox on shards: place_order (doc/shards.md) ---
$_->safe_psql('postgres', doc_sql('doc/shards.md', 'shard place_order')) for @shards;
rsql(doc_sql('doc/shards.md', 'router place_order'));
my @buyers = (101 .. 108);
$shards[ shard_of($_) ]->safe_psql('postgres', "INSERT INTO wallets VALUES ($_, 100)") for @buyers;
my %order_job = map { $_ => rsql("SELECT place_order($_, 1, 30)") } @buyers;
is( scalar(grep {
			$shards[ shard_of($_) ]->safe_psql('postgres', qq{
				SELECT count(*) FROM orders o JOIN notif_job j ON j.user_id = o.user_id AND j.order_id = o.order_id::text
				  JOIN wallets w ON w.user_id = o.user_id
				 WHERE o.user_id = $_ AND o.order_id = 1 AND j.kind = 'order_placed' AND j.id = $order_job{$_} AND w.balance = 70})
			  eq '1' } @buyers),
	scalar(@buyers), 'place_order through the router: the order, the payment and its job commit together on the user\'s shard');
my $buyer = $buyers[0];
my $bs = shard_of($buyer);
($rc, $out, $err) = $router->psql('postgres', "SELECT place_order($buyer, 2, 500)");
like($err, qr/violates check constraint "wallets_balance_check"/, 'an order the wallet cannot pay fails');
is( $shards[$bs]->safe_psql('postgres', qq{
		SELECT (SELECT count(*) FROM orders WHERE user_id = $buyer AND order_id = 2) || ' '
		    || (SELECT count(*) FROM notif_job WHERE user_id = $buyer AND kind = 'order_placed' AND order_id = '2') || ' '
		    || (SELECT balance FROM wallets WHERE user_id = $buyer)}),
	'0 0 70', '... and leaves neither the order nor its notification (enqueued before the failing statement)');
ok( wait_until($router, q{SELECT coalesce(sum(jobs), 0) = 8 FROM notif_counts() WHERE kind = 'order_placed' AND status = 'sent'}),
	'the placed orders are notified');
is(join(' ', map { ledger_key($sim, "order_placed:$_:1") } @buyers[0 .. 1]) . ' ' . ledger_key($sim, "order_placed:$buyer:2"),
	'1 1 1 1 1 1 0 0 0', 'the simulator got each placed order once, and never the failed one');

# --- one shard stopped mid-run ---
# 200 users' alert (at_least_once) and promo (at_most_once) go through the
# router to providers paced at 20/s per shard, so each shard still has a
# queue when shard $down stops (immediately, calls in flight).
my $down = 2;
rsql(q{CREATE TABLE got (user_id bigint, kind text, id bigint, state text, message text)});
rsql(q{INSERT INTO got SELECT k, t, notif_enqueue(k, t, 'run') FROM generate_series(1, 200) k, (VALUES ('alert'), ('promo')) v(t)});
ok( $shards[$down]->poll_query_until('postgres',
		q{SELECT count(*) >= 10 FROM notif_job WHERE order_id = 'run' AND status = 'sent'}),
	"shard $down is delivering");
cmp_ok($shards[$down]->safe_psql('postgres', q{SELECT count(*) FROM notif_job WHERE order_id = 'run' AND status = 'queued'}),
	'>', 20, "... and still has a queue");
$shards[$down]->stop('immediate');

# while it is down: 200 more users' alerts, each call on its own
rsql(q{
	DO $$
	DECLARE st text; msg text;
	BEGIN
	    FOR k IN 201 .. 400 LOOP
	        BEGIN
	            INSERT INTO got VALUES (k, 'alert', notif_enqueue(k, 'alert', 'run'));
	        EXCEPTION WHEN OTHERS THEN
	            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
	            INSERT INTO got VALUES (k, 'alert', NULL, st, msg);
	        END;
	    END LOOP;
	END $$;});
is( rsql(qq{SELECT count(*) FROM got WHERE user_id > 200 AND
		(id IS NULL) <> (notif_router_shard_of_user(user_id) = $down)}),
	0, "only the users of shard $down fail, the others' enqueues go on");
my $failed = rsql(qq{SELECT count(*) FROM got WHERE id IS NULL});
cmp_ok($failed, '>', 20, "$failed enqueues for shard $down failed");
is( rsql(q{SELECT string_agg(DISTINCT state || ' ' || message, '; ') FROM got WHERE id IS NULL}),
	"08006 notif_enqueue: shard $down is unreachable",
	'each with a clear error naming the shard (08006)');
($rc, $out, $err) = $router->psql('postgres', q{SELECT * FROM notif_counts()});
like($err, qr/ERROR:  notif_counts: shard $down unreachable/, 'a cluster-wide read names the unreachable shard');
($rc, $out, $err) = $router->psql('postgres', q{SELECT notif_retry('alert', now() - interval '1 hour')});
like($err, qr/ERROR:  notif_retry: 1 of 4 shards failed; the others re-drove their jobs\nDETAIL:  shard 0 re-drove 0; shard 1 re-drove 0; shard 2 failed \(08006\): unreachable: .*; shard 3 re-drove 0\./s,
	'a write to every shard says what each shard did');

my @up = grep { $_ != $down } 0 .. $N - 1;
ok( wait_until($shards[$_], q{SELECT count(*) = 0 FROM notif_job WHERE order_id = 'run' AND status IN ('queued', 'sending')}),
	"shard $_ delivers its queue while shard $down is down") for @up;

$shards[$down]->start;
ok( wait_until($shards[$down], q{SELECT count(*) = 0 FROM notif_job WHERE order_id = 'run' AND status IN ('queued', 'sending')}),
	"after its restart, shard $down delivers its queue");
my $again = rsql(qq{SELECT notif_enqueue(user_id, 'alert', 'run') FROM got WHERE id IS NULL ORDER BY user_id LIMIT 1});
ok($again > 0 && $again % $N == $down, 'the router reaches the restarted shard again');

# nothing lost, no at_most_once duplicate
my %have;
for my $k (0 .. $N - 1)
{
	$have{$_} = 1 for split /\n/, $shards[$k]->safe_psql('postgres',
		q{SELECT id || ' ' || kind || ' ' || user_id FROM notif_job WHERE order_id = 'run'});
}
my @ok = map { [ split /\|/ ] } split /\n/, rsql(q{SELECT id, kind, user_id FROM got WHERE id IS NOT NULL});
is(scalar(grep { !$have{"$_->[0] $_->[1] $_->[2]"} } @ok), 0,
	'every job the router returned an id for is on its shard (' . scalar(@ok) . ')');
$ledger = ledger($sim);
my @alerts = map { $_->[2] } grep { $_->[1] eq 'alert' } @ok;
is(scalar(grep { !$ledger->{"alert:$_:run"} || $ledger->{"alert:$_:run"}{delivered} < 1 } @alerts),
	0, 'every at_least_once alert was delivered (' . scalar(@alerts) . ')');
is(scalar(grep { /^promo:\d+:run$/ && $ledger->{$_}{received} > 1 } keys %$ledger),
	0, 'no at_most_once promo reached the simulator twice');
is( sum_shards(q{SELECT count(*) FROM notif_job WHERE order_id = 'run' AND kind = 'alert' AND status <> 'sent'}),
	0, 'every alert ended sent');

# --- provider limits across shards ---
is( rsql(q{SELECT string_agg(shard || ':' || shard_rate_limit || '/' || shard_max_inflight, ' ' ORDER BY shard)
		     FROM notif_set_provider_limits('rated', 40, 10)}),
	'0:10.000000/3 1:10.000000/3 2:10.000000/2 3:10.000000/2',
	'notif_set_provider_limits splits 40/s and 10 in flight over the four shards');
is(rsql(q{SELECT shards || ' ' || rate_limit || ' ' || max_inflight FROM notif_provider_limits() WHERE provider = 'rated'}),
	'4 40.000000 10', 'notif_provider_limits shows the cluster-wide sums');
($rc, $out, $err) = $router->psql('postgres', q{SELECT * FROM notif_set_provider_limits('rated', 40, 3)});
like($err, qr/max_inflight \(3\) must be at least the number of shards \(4\)/, 'a figure that cannot be split is refused');
is(rsql(q{SELECT max_inflight FROM notif_provider_limits() WHERE provider = 'rated'}), '10', '... and changes nothing');

my $R = 40;
my $jobs = 200;
rsql(qq{SELECT count(notif_enqueue(k, 'bulk', 'rate')) FROM generate_series(1, $jobs) k});
ok( wait_until($router, qq{SELECT coalesce(sum(jobs), 0) = $jobs FROM notif_counts() WHERE kind = 'bulk' AND status = 'sent'}),
	"the $jobs rated jobs were sent");
# when each call started on its shard, and when the simulator received it
# (its ledger's first_us; the same wall clock)
my @calls = map { split /\n/, $_->safe_psql('postgres', q{
		SELECT j.user_id || ' ' || extract(epoch FROM a.started_at) FROM notif_calls a
		  JOIN notif_job j ON j.id = a.job_id WHERE j.kind = 'bulk'}) } @shards;
my %started = map { split / / } @calls;
is(scalar(@calls) . ' ' . scalar(keys %started), "$jobs $jobs", 'one call per job');
my %received = map { /^bulk:(\d+):rate \d+ \d+ \d+ (\d+) / ? ($1 => $2 / 1e6) : () }
  split /\n/, sim_get($sim, '/ledger');
is(scalar(keys %received), $jobs, 'the simulator received each rated job');

# the most calls in any one-second window
sub most_in_a_second
{
	my @t = sort { $a <=> $b } @_;
	my ($max, $j) = (0, 0);
	for my $i (0 .. $#t)
	{
		$j++ while $t[$j] <= $t[$i] - 1.0;
		$max = $i - $j + 1 if $i - $j + 1 > $max;
	}
	return $max;
}
# each shard's bucket holds a tenth of a second of its 10/s: one call
my $started_max = most_in_a_second(values %started);
cmp_ok($started_max, '<=', $R + $N,
	"the shards together started at most $R calls + $N bursts of one in any second (saw $started_max)");
# on the way to the simulator a call can be late by up to $lag, which can
# crowd the calls of 1 + $lag seconds into one
my $lag = 0;
for (keys %started) { my $d = $received{$_} - $started{$_}; $lag = $d if $d > $lag; }
my $seen_max = most_in_a_second(values %received);
cmp_ok($seen_max, '<=', int($R * (1 + $lag)) + $N,
	sprintf('the simulator saw at most %d requests in any second (saw %d; calls arrived within %.3f s of their start)',
		int($R * (1 + $lag)) + $N, $seen_max, $lag));
my @arrivals = sort { $a <=> $b } values %received;
cmp_ok($arrivals[-1] - $arrivals[0], '>=', ($jobs - $R - $N) / $R,
	"$jobs calls at $R/s take at least " . (($jobs - $R - $N) / $R) . ' s');

$_->stop for @shards, $router;
done_testing();
