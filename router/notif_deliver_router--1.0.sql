/*
 * notif_deliver_router--1.0.sql
 *      Install script of notif_deliver_router 1.0: notif_deliver's calls on
 *      a router database, sent by PL/Proxy to the shards that hold the
 *      outboxes.  Users are sharded by user_id: a user's jobs live on shard
 *      hashint8(user_id) & (shards - 1), so the unique key (user_id, kind,
 *      order_id) stays on one shard and deduplication stays local.
 *
 * The cluster is a PL/Proxy foreign server (default "notif_shards", or the
 * setting notif_deliver_router.cluster) whose options p0, p1, ... are the
 * shards' connection strings in the order of their numbers; each shard runs
 * notif_deliver 1.2 and was set up with notif_shard_setup(k, shards).
 *
 * A job id names its shard: shard k's ids are all congruent to k modulo the
 * number of shards (notif_shard_setup sets its identity sequence so), and
 * notif_cancel / notif_retry(job_id) go to shard id % shards.
 *
 * Every remote call commits on its shard by itself (PL/Proxy calls are
 * autocommit): a ROLLBACK on the router undoes nothing on a shard.  Calls
 * that touch one shard either happen there or fail with that shard named.
 * Calls that touch every shard are read-only (over RUN ON ALL), or visit
 * the shards one by one and, when one fails, raise an error that says what
 * each shard did.  Docs: doc/shards.md.
 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION notif_deliver_router" to load this file. \quit

/* ---------------------------------------------------------------------
 * The cluster and its shards
 * --------------------------------------------------------------------- */

-- the PL/Proxy cluster (foreign server) the calls go to
CREATE FUNCTION notif_router_cluster()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN coalesce(nullif(current_setting('notif_deliver_router.cluster', true), ''), 'notif_shards');

COMMENT ON FUNCTION notif_router_cluster() IS 'the PL/Proxy cluster of the shards: notif_deliver_router.cluster, default notif_shards';

-- how many shards it has: its foreign server's partition options p0, p1, ...
CREATE FUNCTION notif_router_shards()
RETURNS int
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    cluster text := @extschema@.notif_router_cluster();
    n int;
BEGIN
    SELECT (SELECT count(*) FROM unnest(s.srvoptions) o WHERE o ~ '^p[0-9]+=')
      INTO n
      FROM pg_catalog.pg_foreign_server s
     WHERE s.srvname = cluster;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'notif_deliver_router: the cluster "%" does not exist', cluster
            USING ERRCODE = 'undefined_object',
                  HINT = 'Create it: CREATE SERVER notif_shards FOREIGN DATA WRAPPER plproxy OPTIONS (p0 ''host=... dbname=...'', p1 ...), and a USER MAPPING; or SET notif_deliver_router.cluster to its name.';
    END IF;
    RETURN n;
END;
$$;

COMMENT ON FUNCTION notif_router_shards() IS 'the number of shards: partitions p0, p1, ... of the cluster''s foreign server';

-- the shard of a user: where PL/Proxy's RUN ON hashint8(user_id) goes
CREATE FUNCTION notif_router_shard_of_user(user_id bigint)
RETURNS int
LANGUAGE sql STABLE
RETURN hashint8(user_id) & (@extschema@.notif_router_shards() - 1);

-- the shard of a job: its id modulo the number of shards
CREATE FUNCTION notif_router_shard_of_job(job_id bigint)
RETURNS int
LANGUAGE sql STABLE
RETURN (job_id & (@extschema@.notif_router_shards() - 1))::int;

COMMENT ON FUNCTION notif_router_shard_of_user(bigint) IS 'the shard that holds a user''s jobs: hashint8(user_id) & (shards - 1)';
COMMENT ON FUNCTION notif_router_shard_of_job(bigint) IS 'the shard that holds a job: job_id % shards';

-- one shard's own idea of itself (internal: RUN ON one partition)
CREATE FUNCTION notif_router_shard_info(part int, OUT shard int, OUT shards int)
RETURNS record
LANGUAGE plproxy
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON part;
    SELECT * FROM notif_shard_info();
$$;

/*
 * notif_shards(): every partition of the cluster, what the shard there says
 * it is, and whether that is right.  error: why it could not be asked.
 */
CREATE FUNCTION notif_shards(OUT partition int, OUT shard int, OUT shards int,
                             OUT ok boolean, OUT error text)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    n int := @extschema@.notif_router_shards();
BEGIN
    FOR p IN 0 .. n - 1 LOOP
        partition := p;
        error := NULL;
        BEGIN
            SELECT i.shard, i.shards INTO shard, shards FROM @extschema@.notif_router_shard_info(p) i;
            ok := shard = p AND shards = n;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS error = MESSAGE_TEXT;
            shard := NULL;
            shards := NULL;
            ok := false;
        END;
        RETURN NEXT;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION notif_shards() IS 'each partition of the cluster, the shard number it reports, and whether it matches';

/* ---------------------------------------------------------------------
 * Errors: which shard, and what happened there
 * --------------------------------------------------------------------- */

-- raise an error from its parts; detail and hint may be NULL (internal)
CREATE FUNCTION notif_router_raise(state text, message text, detail text, hint text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF detail IS NOT NULL AND hint IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message, DETAIL = detail, HINT = hint;
    ELSIF detail IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message, DETAIL = detail;
    ELSIF hint IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message, HINT = hint;
    END IF;
    RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message;
END;
$$;

-- Did an error mean that the shard could not be reached (or the connection
-- was lost during the call)?  PL/Proxy reports a failed connection as
-- XX000 with libpq's message, a shut-down shard as 57P01.
CREATE FUNCTION notif_router_unreachable_error(state text, message text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
RETURN state LIKE '08%' OR state IN ('57P01', '57P02', '57P03')
       OR (state = 'XX000'
           AND message ~ '(PQconnect|connection to server|server closed the connection|could not connect|no connection to the server|timeout|REMOTE FATAL)');

-- an error message without PL/Proxy's prefix "fn(nargs): [db] REMOTE ERROR: "
-- and without trailing line breaks (internal)
CREATE FUNCTION notif_router_message(message text)
RETURNS text
LANGUAGE sql IMMUTABLE
RETURN rtrim(coalesce(substring(message FROM '^\S+\(\d+\): \[[^]]*\] REMOTE (?:ERROR|FATAL): (.*)$'), message),
             E' \n\t');

/*
 * notif_router_error(fn, shard, state, message, detail, hint, unreachable_hint):
 * re-raise an error that a call to one shard raised, with the shard named.
 * An unreachable shard is 08006 "fn: shard N is unreachable" (libpq's
 * message in the detail); a remote error keeps its SQLSTATE, message
 * (without PL/Proxy's prefix), detail and hint, and its detail says which
 * shard raised it.  Internal.
 */
CREATE FUNCTION notif_router_error(fn text, shard int, state text, message text,
                                   detail text, hint text, unreachable_hint text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    what text := format('shard %s (partition p%s of cluster "%s")', shard, shard,
                        @extschema@.notif_router_cluster());
    remote text;
BEGIN
    IF @extschema@.notif_router_unreachable_error(state, message) THEN
        RAISE EXCEPTION '%: shard % is unreachable', fn, shard
            USING ERRCODE = 'connection_failure',
                  DETAIL = format('%s: %s', what, rtrim(message, E' \n\t')),
                  HINT = unreachable_hint;
    END IF;
    remote := @extschema@.notif_router_message(message);
    IF remote = rtrim(message, E' \n\t') THEN
        -- not from the shard (e.g. the cluster's configuration): as it was
        PERFORM @extschema@.notif_router_raise(state, message, detail, hint);
    END IF;
    PERFORM @extschema@.notif_router_raise(state, remote,
                                           concat_ws(' ', detail, format('Raised by %s.', what)), hint);
END;
$$;

/*
 * After a call over RUN ON ALL failed: if some shards are unreachable, an
 * error naming them; otherwise the error as it was.  Internal.
 */
CREATE FUNCTION notif_router_all_error(fn text, state text, message text, detail text, hint text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    down text;
BEGIN
    IF @extschema@.notif_router_unreachable_error(state, message) THEN
        SELECT string_agg(format('shard %s: %s', s.partition, @extschema@.notif_router_message(s.error)),
                          '; ' ORDER BY s.partition)
          INTO down
          FROM @extschema@.notif_shards() s
         WHERE s.error IS NOT NULL AND @extschema@.notif_router_unreachable_error('XX000', s.error);
        IF down IS NOT NULL THEN
            RAISE EXCEPTION '%: shard % unreachable', fn,
                  (SELECT string_agg(s.partition::text, ', ' ORDER BY s.partition)
                     FROM @extschema@.notif_shards() s WHERE s.error IS NOT NULL)
                USING ERRCODE = 'connection_failure', DETAIL = down,
                      HINT = 'Nothing was changed: this function only reads. Call it again when the shard is back.';
        END IF;
    END IF;
    PERFORM @extschema@.notif_router_raise(state, message, detail, hint);
END;
$$;

-- The helpers stay executable by PUBLIC: the router's functions run as
-- their caller (SECURITY INVOKER), so that PL/Proxy connects to the shards
-- as the caller (or as the user mapping says) and the shards' own grants
-- apply.  A caller also needs USAGE on the cluster's foreign server.

/* ---------------------------------------------------------------------
 * Enqueue: to the user's shard
 * --------------------------------------------------------------------- */

-- the call on the user's shard (internal)
CREATE FUNCTION notif_router_enqueue(user_id bigint, kind text, order_id text,
                                     payload jsonb, not_before timestamptz)
RETURNS bigint
LANGUAGE plproxy
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON hashint8(user_id);
    TARGET notif_shard_enqueue;
$$;

-- the router's enqueue, with the shard named in its errors (internal)
CREATE FUNCTION notif_router_enqueue_named(user_id bigint, kind text, order_id text,
                                           payload jsonb, not_before timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    st text; msg text; det text; hnt text;
BEGIN
    IF user_id IS NULL THEN
        RAISE EXCEPTION 'user_id must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    BEGIN
        RETURN @extschema@.notif_router_enqueue(user_id, kind, order_id, payload, not_before);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                                det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
        PERFORM @extschema@.notif_router_error('notif_enqueue', @extschema@.notif_router_shard_of_user(user_id),
                                               st, msg, nullif(det, ''), nullif(hnt, ''),
                                               'The other shards'' users are not affected. Enqueue again with the same key when the shard is back: a job the lost call created is returned, never doubled.');
        RETURN NULL;
    END;
END;
$$;

/*
 * notif_enqueue: as on a shard (the same two signatures, the job id as the
 * result), for an enqueue that has no business write of its own; it
 * commits on the user's shard when it returns.  An unreachable shard is an
 * error (08006) that names it; calling again with the same key is safe
 * (the shard's unique key returns the job if the lost call had created it).
 * An order_id bigint travels as its text, which is how a shard stores it.
 */
CREATE FUNCTION notif_enqueue(user_id bigint, kind text, order_id text,
                              payload jsonb DEFAULT '{}',
                              not_before timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE
RETURN @extschema@.notif_router_enqueue_named(user_id, kind, order_id, payload, not_before);

CREATE FUNCTION notif_enqueue(user_id bigint, kind text, order_id bigint,
                              payload jsonb DEFAULT '{}',
                              not_before timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE
RETURN @extschema@.notif_router_enqueue_named(user_id, kind, order_id::text, payload, not_before);

COMMENT ON FUNCTION notif_enqueue(bigint, text, text, jsonb, timestamptz) IS 'enqueue on the user''s shard; a repeated (user_id, kind, order_id) returns the existing job id';
COMMENT ON FUNCTION notif_enqueue(bigint, text, bigint, jsonb, timestamptz) IS 'enqueue on the user''s shard; a repeated (user_id, kind, order_id) returns the existing job id';

-- as on a shard: granted, never public
REVOKE ALL ON FUNCTION notif_enqueue(bigint, text, text, jsonb, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION notif_enqueue(bigint, text, bigint, jsonb, timestamptz) FROM PUBLIC;

/* ---------------------------------------------------------------------
 * One job: to the shard its id names
 * --------------------------------------------------------------------- */

CREATE FUNCTION notif_router_cancel(job_id bigint)
RETURNS void
LANGUAGE plproxy
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON job_id;
    TARGET notif_cancel;
$$;

CREATE FUNCTION notif_router_retry(job_id bigint, force boolean)
RETURNS void
LANGUAGE plproxy
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON job_id;
    TARGET notif_retry;
$$;

-- notif_cancel(job_id), notif_retry(job_id, force): as on a shard, on the job's shard
CREATE FUNCTION notif_cancel(job_id bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    st text; msg text; det text; hnt text;
BEGIN
    IF job_id IS NULL THEN
        RAISE EXCEPTION 'notif_cancel: job_id must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    BEGIN
        PERFORM @extschema@.notif_router_cancel(job_id);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                                det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
        PERFORM @extschema@.notif_router_error('notif_cancel', @extschema@.notif_router_shard_of_job(job_id),
                                               st, msg, nullif(det, ''), nullif(hnt, ''),
                                               'The job was not cancelled, unless the connection was lost after it was: call notif_cancel again when the shard is back.');
    END;
END;
$$;

CREATE FUNCTION notif_retry(job_id bigint, force boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    st text; msg text; det text; hnt text;
BEGIN
    IF job_id IS NULL OR force IS NULL THEN
        RAISE EXCEPTION 'notif_retry: job_id and force must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    BEGIN
        PERFORM @extschema@.notif_router_retry(job_id, force);
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                                det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
        PERFORM @extschema@.notif_router_error('notif_retry', @extschema@.notif_router_shard_of_job(job_id),
                                               st, msg, nullif(det, ''), nullif(hnt, ''),
                                               'The job was not re-driven, unless the connection was lost after it was (the job is then queued): look at it when the shard is back.');
    END;
END;
$$;

COMMENT ON FUNCTION notif_cancel(bigint) IS 'cancel a queued job, on the shard its id names';
COMMENT ON FUNCTION notif_retry(bigint, boolean) IS 're-drive a failed or expired job, on the shard its id names';

REVOKE ALL ON FUNCTION notif_cancel(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION notif_retry(bigint, boolean) FROM PUBLIC;

/* ---------------------------------------------------------------------
 * Writes to every shard: one shard at a time, and a failure says what
 * each shard did (a shard that did its part has committed it)
 * --------------------------------------------------------------------- */

/*
 * notif_router_on_each_shard(fn, query, done_others, done_none): run a
 * query on every shard, one after the other, and return each shard's
 * result.  query is a SELECT of two columns, what the shard did (text, for
 * the report) and its result (jsonb), with $1 for the partition number.
 * When a shard fails, the others have still committed their part: then an
 * error (the first failure's SQLSTATE; 08006 for an unreachable shard)
 * whose detail lists what each shard did, in shard order.  Internal.
 */
CREATE FUNCTION notif_router_on_each_shard(fn text, query text, done_others text, done_none text)
RETURNS TABLE (shard int, result jsonb)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    n int := @extschema@.notif_router_shards();
    report text[] := '{}';
    done int := 0;
    failed int := 0;
    first_state text;
    said text;
    st text; msg text;
BEGIN
    FOR p IN 0 .. n - 1 LOOP
        BEGIN
            EXECUTE query INTO said, result USING p;
            shard := p;
            report := report || format('shard %s %s', p, said);
            done := done + 1;
            RETURN NEXT;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
            IF @extschema@.notif_router_unreachable_error(st, msg) THEN
                st := '08006';
                msg := 'unreachable: ' || @extschema@.notif_router_message(msg);
            ELSE
                msg := @extschema@.notif_router_message(msg);
            END IF;
            first_state := coalesce(first_state, st);
            report := report || format('shard %s failed (%s): %s', p, st, msg);
            failed := failed + 1;
        END;
    END LOOP;
    IF failed > 0 THEN
        RAISE EXCEPTION '%: % of % shards failed; %', fn, failed, n,
                        CASE WHEN done > 0 THEN done_others ELSE done_none END
            USING ERRCODE = first_state,
                  DETAIL = array_to_string(report, '; ') || '.',
                  HINT = 'Call it again when the failing shards are back: it is safe to repeat.';
    END IF;
END;
$$;

CREATE FUNCTION notif_router_retry_on(part int, kind text, since timestamptz, force boolean)
RETURNS bigint
LANGUAGE plproxy
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON part;
    SELECT notif_retry(kind, since, force);
$$;

/*
 * notif_retry(kind, since, force): on every shard, as on one; returns the
 * total.  If a shard fails, the others have still re-driven their jobs:
 * the error says what each shard did.  Running it again is safe: re-driven
 * jobs are queued, so a shard that did its part finds nothing more to do.
 */
CREATE FUNCTION notif_retry(kind text, since timestamptz, force boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF kind IS NULL OR since IS NULL OR force IS NULL THEN
        RAISE EXCEPTION 'notif_retry: kind, since and force must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    RETURN (SELECT coalesce(sum((e.result #>> '{}')::bigint), 0)::bigint
              FROM @extschema@.notif_router_on_each_shard('notif_retry',
                       format('SELECT ''re-drove '' || n, to_jsonb(n) FROM @extschema@.notif_router_retry_on($1, %L, %L, %L) n',
                              kind, since, force),
                       'the others re-drove their jobs', 'none re-drove a job') e);
END;
$$;

COMMENT ON FUNCTION notif_retry(text, timestamptz, boolean) IS 're-drive the failed and expired jobs of a type on every shard; returns how many';

REVOKE ALL ON FUNCTION notif_retry(text, timestamptz, boolean) FROM PUBLIC;

-- what a shard set (internal)
CREATE TYPE notif_router_shard_limits AS (shard int, shard_rate_limit numeric, shard_max_inflight int);

CREATE FUNCTION notif_router_set_limits_on(part int, provider text, rate_limit numeric, max_inflight int,
                                           OUT shard int, OUT shard_rate_limit numeric,
                                           OUT shard_max_inflight int)
RETURNS record
LANGUAGE plproxy
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON part;
    SELECT * FROM notif_shard_set_provider_limits(provider, rate_limit, max_inflight);
$$;

/*
 * notif_set_provider_limits(provider, rate_limit, max_inflight): a provider
 * account's limits are global, but each shard enforces its own: give each
 * shard an even share of the cluster-wide figures (rate_limit / shards;
 * max_inflight split so that the shares add up to it).  rate_limit NULL:
 * no limit.  One row per shard with what it set.  If a shard fails, the
 * others have set theirs: the error says what each shard did, and running
 * it again is safe.
 */
CREATE FUNCTION notif_set_provider_limits(provider text, rate_limit numeric, max_inflight int)
RETURNS TABLE (shard int, shard_rate_limit numeric, shard_max_inflight int)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    n int := @extschema@.notif_router_shards();
BEGIN
    -- checked here first, so that bad input changes no shard
    IF provider IS NULL OR max_inflight IS NULL THEN
        RAISE EXCEPTION 'notif_set_provider_limits: provider and max_inflight must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF max_inflight < n THEN
        RAISE EXCEPTION 'notif_set_provider_limits: max_inflight (%) must be at least the number of shards (%)', max_inflight, n
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Each shard needs at least one call in flight.';
    END IF;
    IF rate_limit <= 0 OR trunc(rate_limit / n, 6) <= 0 THEN
        RAISE EXCEPTION 'notif_set_provider_limits: rate_limit (%) must be positive, and at least 0.000001 per shard', rate_limit
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    RETURN QUERY
        SELECT r.shard, r.shard_rate_limit, r.shard_max_inflight
          FROM @extschema@.notif_router_on_each_shard('notif_set_provider_limits',
                   format('SELECT format(''set rate_limit %%s, max_inflight %%s'', coalesce(l.shard_rate_limit::text, ''NULL''), l.shard_max_inflight), to_jsonb(l)
                             FROM @extschema@.notif_router_set_limits_on($1, %L, %L, %L) l',
                          provider, rate_limit, max_inflight),
                   'the others set their share', 'none changed') e,
               jsonb_populate_record(NULL::@extschema@.notif_router_shard_limits, e.result) r
         ORDER BY r.shard;
END;
$$;

COMMENT ON FUNCTION notif_set_provider_limits(text, numeric, int) IS 'set a provider''s cluster-wide rate_limit and max_inflight, split evenly over the shards';

REVOKE ALL ON FUNCTION notif_set_provider_limits(text, numeric, int) FROM PUBLIC;

/* ---------------------------------------------------------------------
 * Cluster-wide reads (RUN ON ALL: read-only, so a failure changes nothing)
 * --------------------------------------------------------------------- */

CREATE FUNCTION notif_router_stats_all(
    OUT shard int, OUT kind text, OUT delivery text, OUT stats_window interval,
    OUT jobs bigint, OUT queued bigint, OUT sending bigint, OUT sent bigint,
    OUT failed bigint, OUT expired bigint, OUT queued_now bigint,
    OUT oldest_queued_age interval, OUT in_flight bigint, OUT attempts bigint,
    OUT ambiguous_attempts bigint, OUT p numeric, OUT q numeric, OUT q_sample bigint,
    OUT q_min_sample int, OUT dlr_jobs bigint, OUT measured_lost bigint,
    OUT measured_duplicates bigint, OUT estimated_lost numeric,
    OUT estimated_duplicates numeric, OUT attempts_within_deadline int,
    OUT cost_per_million_at_most_once numeric, OUT cost_per_million_at_least_once numeric,
    OUT recommended_delivery text, OUT recommendation_differs boolean)
RETURNS SETOF record
LANGUAGE plproxy
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON ALL;
    SELECT i.shard, s.* FROM notif_shard_info() i, notif_stats s;
$$;

/*
 * notif_stats(): every shard's notif_stats rows, each with its shard
 * (each shard's notif_deliver.stats_window applies).
 */
CREATE FUNCTION notif_stats()
RETURNS TABLE (
    shard int, kind text, delivery text, stats_window interval,
    jobs bigint, queued bigint, sending bigint, sent bigint,
    failed bigint, expired bigint, queued_now bigint,
    oldest_queued_age interval, in_flight bigint, attempts bigint,
    ambiguous_attempts bigint, p numeric, q numeric, q_sample bigint,
    q_min_sample int, dlr_jobs bigint, measured_lost bigint,
    measured_duplicates bigint, estimated_lost numeric,
    estimated_duplicates numeric, attempts_within_deadline int,
    cost_per_million_at_most_once numeric, cost_per_million_at_least_once numeric,
    recommended_delivery text, recommendation_differs boolean)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    st text; msg text; det text; hnt text;
BEGIN
    RETURN QUERY SELECT * FROM @extschema@.notif_router_stats_all() x ORDER BY x.kind, x.shard;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                            det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    PERFORM @extschema@.notif_router_all_error('notif_stats', st, msg, nullif(det, ''), nullif(hnt, ''));
END;
$$;

COMMENT ON FUNCTION notif_stats() IS 'every shard''s notif_stats, one row per shard and type';

CREATE FUNCTION notif_router_workers_all(OUT shard int, OUT pid int, OUT role text, OUT lane text,
                                         OUT state text, OUT in_flight int, OUT sent_last_minute bigint)
RETURNS SETOF record
LANGUAGE plproxy
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON ALL;
    SELECT i.shard, w.* FROM notif_shard_info() i, notif_workers() w;
$$;

-- notif_workers(): every shard's launcher and senders, each with its shard
CREATE FUNCTION notif_workers()
RETURNS TABLE (shard int, pid int, role text, lane text, state text,
               in_flight int, sent_last_minute bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    st text; msg text; det text; hnt text;
BEGIN
    RETURN QUERY SELECT * FROM @extschema@.notif_router_workers_all() x
                  ORDER BY x.shard, x.role, x.lane;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                            det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    PERFORM @extschema@.notif_router_all_error('notif_workers', st, msg, nullif(det, ''), nullif(hnt, ''));
END;
$$;

COMMENT ON FUNCTION notif_workers() IS 'every shard''s launcher and senders, with the shard';

CREATE FUNCTION notif_router_counts_all(OUT shard int, OUT kind text, OUT status text, OUT jobs bigint)
RETURNS SETOF record
LANGUAGE plproxy
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON ALL;
    SELECT * FROM notif_shard_counts();
$$;

-- notif_counts(): jobs by shard, type and status (every job, not a window)
CREATE FUNCTION notif_counts()
RETURNS TABLE (shard int, kind text, status text, jobs bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    st text; msg text; det text; hnt text;
BEGIN
    RETURN QUERY SELECT * FROM @extschema@.notif_router_counts_all() x
                  ORDER BY x.shard, x.kind, x.status;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                            det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    PERFORM @extschema@.notif_router_all_error('notif_counts', st, msg, nullif(det, ''), nullif(hnt, ''));
END;
$$;

COMMENT ON FUNCTION notif_counts() IS 'jobs by shard, type and status';

CREATE FUNCTION notif_router_limits_all(OUT shard int, OUT provider text,
                                        OUT rate_limit numeric, OUT max_inflight int,
                                        OUT in_flight int)
RETURNS SETOF record
LANGUAGE plproxy
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON ALL;
    SELECT * FROM notif_shard_provider_limits();
$$;

/*
 * notif_provider_limits(): each provider's cluster-wide limits, the sums
 * over the shards of what each enforces (rate_limit NULL when a shard has
 * none), with the smallest and largest share, and the calls in flight to
 * it now on all shards together.
 */
CREATE FUNCTION notif_provider_limits()
RETURNS TABLE (provider text, shards int, rate_limit numeric, max_inflight bigint,
               in_flight bigint,
               min_shard_rate_limit numeric, max_shard_rate_limit numeric,
               min_shard_max_inflight int, max_shard_max_inflight int)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    st text; msg text; det text; hnt text;
BEGIN
    RETURN QUERY
        SELECT x.provider, count(*)::int,
               CASE WHEN count(x.rate_limit) = count(*) THEN sum(x.rate_limit) END,
               sum(x.max_inflight)::bigint,
               sum(x.in_flight)::bigint,
               min(x.rate_limit), max(x.rate_limit), min(x.max_inflight), max(x.max_inflight)
          FROM @extschema@.notif_router_limits_all() x
         GROUP BY x.provider
         ORDER BY x.provider;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                            det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    PERFORM @extschema@.notif_router_all_error('notif_provider_limits', st, msg, nullif(det, ''), nullif(hnt, ''));
END;
$$;

COMMENT ON FUNCTION notif_provider_limits() IS 'each provider''s rate_limit and max_inflight summed over the shards';
