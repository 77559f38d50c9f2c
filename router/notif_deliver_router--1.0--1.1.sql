/*
 * notif_deliver_router 1.0 -> 1.1
 *
 * Plain SQL, run by ALTER EXTENSION notif_deliver_router UPDATE.  It is
 * also the second half of the 1.1 install script: make builds
 * notif_deliver_router--1.1.sql as notif_deliver_router--1.0.sql followed
 * by this file, so a fresh install and an update run the same statements.
 *
 * Every function of the router names what it uses with its schema and runs
 * with search_path pinned to pg_catalog, pg_temp, so that nothing a caller
 * puts on their search_path (a look-alike format() or hashint8() that fits
 * the arguments better, the CVE-2018-1058 pattern) runs inside them:
 *
 *  - the router's own objects as @extschema@.name; PostgreSQL's functions
 *    as pg_catalog.name (operators and types are PostgreSQL's: the pinned
 *    path searches pg_catalog alone, pg_temp never for functions);
 *  - what runs on the shards as @extschema@.name too: the router calls the
 *    shards' notif_deliver in the schema of its own name (public, in the
 *    guide), whatever the search_path of the role PL/Proxy connects as.
 *    (PL/Proxy's TARGET takes an unquoted name, so that schema's name is
 *    one a plain identifier spells.)
 *
 * CREATE OR REPLACE keeps each function's owner, grants and comment.
 * Docs: doc/shards.md.
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION notif_deliver_router UPDATE TO '1.1'" to load this file. \quit

/* ---------------------------------------------------------------------
 * The cluster and its shards
 * --------------------------------------------------------------------- */

-- the PL/Proxy cluster (foreign server) the calls go to
CREATE OR REPLACE FUNCTION notif_router_cluster()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN coalesce(nullif(pg_catalog.current_setting('notif_deliver_router.cluster', true), ''), 'notif_shards');

-- how many shards it has: its foreign server's partition options p0, p1, ...
CREATE OR REPLACE FUNCTION notif_router_shards()
RETURNS int
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cluster text := @extschema@.notif_router_cluster();
    n int;
BEGIN
    SELECT (SELECT pg_catalog.count(*) FROM pg_catalog.unnest(s.srvoptions) o WHERE o ~ '^p[0-9]+=')
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

-- the shard of a user: where PL/Proxy's RUN ON hashint8(user_id) goes
CREATE OR REPLACE FUNCTION notif_router_shard_of_user(user_id bigint)
RETURNS int
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN pg_catalog.hashint8(user_id) & (@extschema@.notif_router_shards() - 1);

-- the shard of a job: its id modulo the number of shards
CREATE OR REPLACE FUNCTION notif_router_shard_of_job(job_id bigint)
RETURNS int
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN (job_id & (@extschema@.notif_router_shards() - 1))::int;

-- one shard's own idea of itself (internal: RUN ON one partition)
CREATE OR REPLACE FUNCTION notif_router_shard_info(part int, OUT shard int, OUT shards int)
RETURNS record
LANGUAGE plproxy
SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON part;
    SELECT * FROM @extschema@.notif_shard_info();
$$;

/*
 * notif_shards(): every partition of the cluster, what the shard there says
 * it is, and whether that is right.  error: why it could not be asked.
 */
CREATE OR REPLACE FUNCTION notif_shards(OUT partition int, OUT shard int, OUT shards int,
                             OUT ok boolean, OUT error text)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
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

/* ---------------------------------------------------------------------
 * Errors: which shard, and what happened there
 * --------------------------------------------------------------------- */

-- raise an error from its parts; detail and hint may be NULL (internal)
CREATE OR REPLACE FUNCTION notif_router_raise(state text, message text, detail text, hint text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
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
CREATE OR REPLACE FUNCTION notif_router_unreachable_error(state text, message text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN state LIKE '08%' OR state IN ('57P01', '57P02', '57P03')
       OR (state = 'XX000'
           AND message ~ '(PQconnect|connection to server|server closed the connection|could not connect|no connection to the server|timeout|REMOTE FATAL)');

-- an error message without PL/Proxy's prefix "fn(nargs): [db] REMOTE ERROR: "
-- and without trailing line breaks (internal)
CREATE OR REPLACE FUNCTION notif_router_message(message text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN pg_catalog.rtrim(coalesce(substring(message FROM '^\S+\(\d+\): \[[^]]*\] REMOTE (?:ERROR|FATAL): (.*)$'), message),
             E' \n\t');

/*
 * notif_router_error(fn, shard, state, message, detail, hint, unreachable_hint):
 * re-raise an error that a call to one shard raised, with the shard named.
 * An unreachable shard is 08006 "fn: shard N is unreachable" (libpq's
 * message in the detail); a remote error keeps its SQLSTATE, message
 * (without PL/Proxy's prefix), detail and hint, and its detail says which
 * shard raised it.  Internal.
 */
CREATE OR REPLACE FUNCTION notif_router_error(fn text, shard int, state text, message text,
                                   detail text, hint text, unreachable_hint text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    what text := pg_catalog.format('shard %s (partition p%s of cluster "%s")', shard, shard,
                        @extschema@.notif_router_cluster());
    remote text;
BEGIN
    IF @extschema@.notif_router_unreachable_error(state, message) THEN
        RAISE EXCEPTION '%: shard % is unreachable', fn, shard
            USING ERRCODE = 'connection_failure',
                  DETAIL = pg_catalog.format('%s: %s', what, pg_catalog.rtrim(message, E' \n\t')),
                  HINT = unreachable_hint;
    END IF;
    remote := @extschema@.notif_router_message(message);
    IF remote = pg_catalog.rtrim(message, E' \n\t') THEN
        -- not from the shard (e.g. the cluster's configuration): as it was
        PERFORM @extschema@.notif_router_raise(state, message, detail, hint);
    END IF;
    PERFORM @extschema@.notif_router_raise(state, remote,
                                           pg_catalog.concat_ws(' ', detail, pg_catalog.format('Raised by %s.', what)), hint);
END;
$$;

/*
 * After a call over RUN ON ALL failed: if some shards are unreachable, an
 * error naming them; otherwise the error as it was.  Internal.
 */
CREATE OR REPLACE FUNCTION notif_router_all_error(fn text, state text, message text, detail text, hint text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    down text;
BEGIN
    IF @extschema@.notif_router_unreachable_error(state, message) THEN
        SELECT pg_catalog.string_agg(pg_catalog.format('shard %s: %s', s.partition, @extschema@.notif_router_message(s.error)),
                          '; ' ORDER BY s.partition)
          INTO down
          FROM @extschema@.notif_shards() s
         WHERE s.error IS NOT NULL AND @extschema@.notif_router_unreachable_error('XX000', s.error);
        IF down IS NOT NULL THEN
            RAISE EXCEPTION '%: shard % unreachable', fn,
                  (SELECT pg_catalog.string_agg(s.partition::text, ', ' ORDER BY s.partition)
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
CREATE OR REPLACE FUNCTION notif_router_enqueue(user_id bigint, kind text, order_id text,
                                     payload jsonb, not_before timestamptz)
RETURNS bigint
LANGUAGE plproxy
SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON pg_catalog.hashint8(user_id);
    TARGET @extschema@.notif_shard_enqueue;
$$;

-- the router's enqueue, with the shard named in its errors (internal)
CREATE OR REPLACE FUNCTION notif_router_enqueue_named(user_id bigint, kind text, order_id text,
                                           payload jsonb, not_before timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
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
CREATE OR REPLACE FUNCTION notif_enqueue(user_id bigint, kind text, order_id text,
                              payload jsonb DEFAULT '{}',
                              not_before timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.notif_router_enqueue_named(user_id, kind, order_id, payload, not_before);

CREATE OR REPLACE FUNCTION notif_enqueue(user_id bigint, kind text, order_id bigint,
                              payload jsonb DEFAULT '{}',
                              not_before timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.notif_router_enqueue_named(user_id, kind, order_id::text, payload, not_before);

/* ---------------------------------------------------------------------
 * One job: to the shard its id names
 * --------------------------------------------------------------------- */

CREATE OR REPLACE FUNCTION notif_router_cancel(job_id bigint)
RETURNS void
LANGUAGE plproxy
SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON job_id;
    TARGET @extschema@.notif_cancel;
$$;

CREATE OR REPLACE FUNCTION notif_router_retry(job_id bigint, force boolean)
RETURNS void
LANGUAGE plproxy
SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON job_id;
    TARGET @extschema@.notif_retry;
$$;

-- notif_cancel(job_id), notif_retry(job_id, force): as on a shard, on the job's shard
CREATE OR REPLACE FUNCTION notif_cancel(job_id bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
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

CREATE OR REPLACE FUNCTION notif_retry(job_id bigint, force boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
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
CREATE OR REPLACE FUNCTION notif_router_on_each_shard(fn text, query text, done_others text, done_none text)
RETURNS TABLE (shard int, result jsonb)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
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
            report := report || pg_catalog.format('shard %s %s', p, said);
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
            report := report || pg_catalog.format('shard %s failed (%s): %s', p, st, msg);
            failed := failed + 1;
        END;
    END LOOP;
    IF failed > 0 THEN
        RAISE EXCEPTION '%: % of % shards failed; %', fn, failed, n,
                        CASE WHEN done > 0 THEN done_others ELSE done_none END
            USING ERRCODE = first_state,
                  DETAIL = pg_catalog.array_to_string(report, '; ') || '.',
                  HINT = 'Call it again when the failing shards are back: it is safe to repeat.';
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION notif_router_retry_on(part int, kind text, since timestamptz, force boolean)
RETURNS bigint
LANGUAGE plproxy
SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON part;
    SELECT @extschema@.notif_retry(kind, since, force);
$$;

/*
 * notif_retry(kind, since, force): on every shard, as on one; returns the
 * total.  If a shard fails, the others have still re-driven their jobs:
 * the error says what each shard did.  Running it again is safe: re-driven
 * jobs are queued, so a shard that did its part finds nothing more to do.
 */
CREATE OR REPLACE FUNCTION notif_retry(kind text, since timestamptz, force boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF kind IS NULL OR since IS NULL OR force IS NULL THEN
        RAISE EXCEPTION 'notif_retry: kind, since and force must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    RETURN (SELECT coalesce(pg_catalog.sum((e.result #>> '{}')::bigint), 0)::bigint
              FROM @extschema@.notif_router_on_each_shard('notif_retry',
                       pg_catalog.format('SELECT ''re-drove '' || n, pg_catalog.to_jsonb(n) FROM @extschema@.notif_router_retry_on($1, %L, %L, %L) n',
                              kind, since, force),
                       'the others re-drove their jobs', 'none re-drove a job') e);
END;
$$;

CREATE OR REPLACE FUNCTION notif_router_set_limits_on(part int, provider text, rate_limit numeric, max_inflight int,
                                           OUT shard int, OUT shard_rate_limit numeric,
                                           OUT shard_max_inflight int)
RETURNS record
LANGUAGE plproxy
SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON part;
    SELECT * FROM @extschema@.notif_shard_set_provider_limits(provider, rate_limit, max_inflight);
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
CREATE OR REPLACE FUNCTION notif_set_provider_limits(provider text, rate_limit numeric, max_inflight int)
RETURNS TABLE (shard int, shard_rate_limit numeric, shard_max_inflight int)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
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
    IF rate_limit <= 0 OR pg_catalog.trunc(rate_limit / n, 6) <= 0 THEN
        RAISE EXCEPTION 'notif_set_provider_limits: rate_limit (%) must be positive, and at least 0.000001 per shard', rate_limit
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    RETURN QUERY
        SELECT r.shard, r.shard_rate_limit, r.shard_max_inflight
          FROM @extschema@.notif_router_on_each_shard('notif_set_provider_limits',
                   pg_catalog.format('SELECT pg_catalog.format(''set rate_limit %%s, max_inflight %%s'', coalesce(l.shard_rate_limit::text, ''NULL''), l.shard_max_inflight), pg_catalog.to_jsonb(l)
                             FROM @extschema@.notif_router_set_limits_on($1, %L, %L, %L) l',
                          provider, rate_limit, max_inflight),
                   'the others set their share', 'none changed') e,
               pg_catalog.jsonb_populate_record(NULL::@extschema@.notif_router_shard_limits, e.result) r
         ORDER BY r.shard;
END;
$$;

/* ---------------------------------------------------------------------
 * Cluster-wide reads (RUN ON ALL: read-only, so a failure changes nothing)
 * --------------------------------------------------------------------- */

CREATE OR REPLACE FUNCTION notif_router_stats_all(
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
SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON ALL;
    SELECT i.shard, s.* FROM @extschema@.notif_shard_info() i, @extschema@.notif_stats s;
$$;

/*
 * notif_stats(): every shard's notif_stats rows, each with its shard
 * (each shard's notif_deliver.stats_window applies).
 */
CREATE OR REPLACE FUNCTION notif_stats()
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
SET search_path = pg_catalog, pg_temp
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

CREATE OR REPLACE FUNCTION notif_router_workers_all(OUT shard int, OUT pid int, OUT role text, OUT lane text,
                                         OUT state text, OUT in_flight int, OUT sent_last_minute bigint)
RETURNS SETOF record
LANGUAGE plproxy
SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON ALL;
    SELECT i.shard, w.* FROM @extschema@.notif_shard_info() i, @extschema@.notif_workers() w;
$$;

-- notif_workers(): every shard's launcher and senders, each with its shard
CREATE OR REPLACE FUNCTION notif_workers()
RETURNS TABLE (shard int, pid int, role text, lane text, state text,
               in_flight int, sent_last_minute bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
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

CREATE OR REPLACE FUNCTION notif_router_counts_all(OUT shard int, OUT kind text, OUT status text, OUT jobs bigint)
RETURNS SETOF record
LANGUAGE plproxy
SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON ALL;
    SELECT * FROM @extschema@.notif_shard_counts();
$$;

-- notif_counts(): jobs by shard, type and status (every job, not a window)
CREATE OR REPLACE FUNCTION notif_counts()
RETURNS TABLE (shard int, kind text, status text, jobs bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
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

CREATE OR REPLACE FUNCTION notif_router_limits_all(OUT shard int, OUT provider text,
                                        OUT rate_limit numeric, OUT max_inflight int,
                                        OUT in_flight int)
RETURNS SETOF record
LANGUAGE plproxy
SET search_path = pg_catalog, pg_temp
AS $$
    CLUSTER @extschema@.notif_router_cluster();
    RUN ON ALL;
    SELECT * FROM @extschema@.notif_shard_provider_limits();
$$;

/*
 * notif_provider_limits(): each provider's cluster-wide limits, the sums
 * over the shards of what each enforces (rate_limit NULL when a shard has
 * none), with the smallest and largest share, and the calls in flight to
 * it now on all shards together.
 */
CREATE OR REPLACE FUNCTION notif_provider_limits()
RETURNS TABLE (provider text, shards int, rate_limit numeric, max_inflight bigint,
               in_flight bigint,
               min_shard_rate_limit numeric, max_shard_rate_limit numeric,
               min_shard_max_inflight int, max_shard_max_inflight int)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st text; msg text; det text; hnt text;
BEGIN
    RETURN QUERY
        SELECT x.provider, pg_catalog.count(*)::int,
               CASE WHEN pg_catalog.count(x.rate_limit) = pg_catalog.count(*) THEN pg_catalog.sum(x.rate_limit) END,
               pg_catalog.sum(x.max_inflight)::bigint,
               pg_catalog.sum(x.in_flight)::bigint,
               pg_catalog.min(x.rate_limit), pg_catalog.max(x.rate_limit), pg_catalog.min(x.max_inflight), pg_catalog.max(x.max_inflight)
          FROM @extschema@.notif_router_limits_all() x
         GROUP BY x.provider
         ORDER BY x.provider;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                            det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    PERFORM @extschema@.notif_router_all_error('notif_provider_limits', st, msg, nullif(det, ''), nullif(hnt, ''));
END;
$$;

