-- shards: a database becomes shard k of n (doc/shards.md); its job ids then
-- name the shard.  The router side (notif_deliver_router, PL/Proxy) is
-- tested with four shard clusters in test/t/021_shards.pl.

-- not a shard yet: the shard functions say so
SELECT try($$SELECT notif_shard_info()$$);
SELECT try($$SELECT notif_shard_enqueue(1, 'otp', 'x')$$);

-- bad layouts are refused
SELECT try($$SELECT notif_shard_setup(0, 3)$$);
SELECT try($$SELECT notif_shard_setup(4, 4)$$);
SELECT try($$SELECT notif_shard_setup(-1, 4)$$);
SELECT try($$SELECT notif_shard_setup(NULL, 4)$$);

-- this database holds jobs of every user: it cannot become one shard of four
SELECT count(*) > 0 AS has_jobs FROM notif_job;
SELECT regexp_replace(try($$SELECT notif_shard_setup(1, 4)$$), '[0-9]+ job', 'N job');

-- it can be the one shard of one; then every id is congruent to 0 mod 1,
-- and new ids step by 1 from after the largest
BEGIN;
SELECT notif_shard_setup(0, 1);
SELECT * FROM notif_shard_info();
SELECT notif_shard_enqueue(990001, 'otp', 'shard-one') AS one_id \gset
SELECT :one_id = (SELECT max(id) FROM notif_job) AS newest;
ROLLBACK;

-- an empty outbox can become shard 2 of 4: ids 2, 6, 10, ... for its users only
BEGIN;
DELETE FROM notif_dlr;
DELETE FROM notif_attempt;
DELETE FROM notif_job;
SELECT notif_shard_setup(2, 4);
SELECT notif_shard_setup(2, 4);     -- idempotent
SELECT u AS user_id, notif_shard_enqueue(u, 'otp', 'shard-two') % 4 AS id_mod_4
  FROM generate_series(1, 40) u WHERE hashint8(u) & 3 = 2 LIMIT 3;
SELECT notif_shard_enqueue(u, 'otp', '77') % 4 AS id_mod_4
  FROM generate_series(1, 40) u WHERE hashint8(u) & 3 = 2 LIMIT 1;
-- a user of shard 0 is refused here (nothing written)
SELECT try(format($$SELECT notif_shard_enqueue(%s, 'otp', 'stray')$$,
                  (SELECT min(u) FROM generate_series(1, 40) u WHERE hashint8(u) & 3 = 0)));
SELECT * FROM notif_shard_counts() WHERE kind = 'otp';
-- provider limits: this shard's share of a cluster-wide figure
SELECT * FROM notif_shard_set_provider_limits('default', 100, 10);
SELECT * FROM notif_shard_provider_limits() WHERE provider = 'default';
SELECT try($$SELECT notif_shard_set_provider_limits('default', 100, 3)$$);
SELECT try($$SELECT notif_shard_set_provider_limits('default', 0, 8)$$);
SELECT try($$SELECT notif_shard_set_provider_limits('nope', 100, 8)$$);
SELECT * FROM notif_shard_set_provider_limits('default', NULL, 8);
ROLLBACK;
