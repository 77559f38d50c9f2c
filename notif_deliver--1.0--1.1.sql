/*
 * notif_deliver--1.0--1.1.sql
 *      Update from 1.0 to 1.1 (also the last step of a fresh install of 1.1):
 *      delivery reports (notif_dlr) and the provider field that carries the
 *      job's key to them (notif_provider.ref_field); notif_stats, which
 *      measures p and q per type and advises a delivery; the operators'
 *      tools notif_retry, notif_cancel and notif_workers.
 *
 * Safe on a database that has jobs: columns are added at the end of their
 * tables with constant defaults (no table rewrite; the new CHECK reads
 * notif_job once).  Delivery pauses while the 1.1 library waits for this
 * update, and resumes when it commits.
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION notif_deliver UPDATE TO '1.1'" to load this file. \quit

/*
 * ref_field: when set, the sender adds this top-level field, holding the
 * job's key kind:user_id:order_id, to every request (a JSON field, a form
 * field or a query parameter), so that the provider can echo it back in
 * its delivery reports.  Every attempt still sends the same bytes.
 */
ALTER TABLE notif_provider ADD COLUMN ref_field text
    CONSTRAINT notif_provider_ref_field_check CHECK (ref_field ~ '^[^[:cntrl:]]{1,63}$');

COMMENT ON COLUMN notif_provider.ref_field IS 'top-level request field that carries the job''s key, for delivery reports';

/*
 * earlier_tries: the tries a job made before it was last re-driven by
 * notif_retry, which gives it fresh tries.  notif_attempt numbers a job's
 * calls across re-drives: attempt try = earlier_tries + tries.
 */
ALTER TABLE notif_job ADD COLUMN earlier_tries int NOT NULL DEFAULT 0
    CONSTRAINT notif_job_earlier_tries_check CHECK (earlier_tries >= 0);

COMMENT ON COLUMN notif_job.earlier_tries IS 'tries made before the last notif_retry; attempts are numbered after them';

-- notif_stats reads a window of recent jobs: a BRIN index costs next to
-- nothing to keep (jobs arrive in time order) and spares a full scan
CREATE INDEX notif_job_created_brin ON notif_job USING brin (created_at);

/*
 * notif_dlr: delivery reports, one row per report a provider sent back.
 * job_id is NULL when no job has the key (unknown, or already purged): an
 * orphaned report.  Reports go with their job when it is purged; orphaned
 * ones after the longest retention of any type.
 */
CREATE TABLE notif_dlr (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key text NOT NULL,
    job_id bigint REFERENCES notif_job ON DELETE CASCADE,
    delivered boolean NOT NULL,
    reported_at timestamptz NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE notif_dlr IS 'delivery reports from providers; job_id NULL for an orphaned report';

CREATE INDEX notif_dlr_job_idx ON notif_dlr (job_id) WHERE job_id IS NOT NULL;
CREATE INDEX notif_dlr_orphaned_idx ON notif_dlr (received_at) WHERE job_id IS NULL;

SELECT pg_catalog.pg_extension_config_dump('notif_dlr', '');

/*
 * notif_dlr(key, delivered, reported_at): record one delivery report.
 * Returns the job's id, or NULL for a report no job matches (recorded as
 * orphaned, not an error: a provider's webhook must not fail on it).
 * Several delivered reports for one key mean the recipient got several
 * copies: a measured duplicate.  Grant EXECUTE to the webhook's role.
 */
CREATE FUNCTION notif_dlr(key text, delivered boolean,
                          reported_at timestamptz DEFAULT now())
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts text[];
    job bigint;
BEGIN
    IF key IS NULL OR delivered IS NULL THEN
        RAISE EXCEPTION 'notif_dlr: key and delivered must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    -- key = kind:user_id:order_id (the kind has no ':'; the order_id may)
    parts := regexp_match(key, '^([^:]+):(-?[0-9]{1,19}):(.+)$');
    IF parts IS NOT NULL
       AND parts[2]::numeric BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
        SELECT j.id INTO job
          FROM @extschema@.notif_job j
         WHERE j.user_id OPERATOR(pg_catalog.=) parts[2]::bigint
           AND j.kind OPERATOR(pg_catalog.=) parts[1]
           AND j.order_id OPERATOR(pg_catalog.=) parts[3];
    END IF;

    INSERT INTO @extschema@.notif_dlr (key, job_id, delivered, reported_at)
    VALUES (key, job, delivered, coalesce(reported_at, now()));
    RETURN job;
END;
$$;

COMMENT ON FUNCTION notif_dlr(text, boolean, timestamptz) IS 'record a provider''s delivery report for a job key; returns the job id, NULL if orphaned';

REVOKE ALL ON FUNCTION notif_dlr(text, boolean, timestamptz) FROM PUBLIC;

/*
 * notif_attempts_within(...): how many attempts of a type can start before
 * its deadline when every attempt ends ambiguous, i.e. takes the provider's
 * whole timeout, and every backoff is the longest its jitter allows.
 * NULL without a deadline.  Used by notif_stats.
 */
CREATE FUNCTION notif_attempts_within(deadline interval, timeout interval,
                                      backoff_min interval, backoff_max interval,
                                      max_tries int)
RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (
    WITH RECURSIVE attempt (n, starts_at, backoff) AS (
        SELECT 1, interval '0', least(backoff_min, backoff_max)
        UNION ALL
        SELECT n + 1, starts_at + timeout + backoff, least(backoff * 2, backoff_max)
          FROM attempt
         WHERE n < max_tries AND starts_at < deadline
    )
    SELECT CASE WHEN deadline IS NOT NULL
                THEN count(*) FILTER (WHERE starts_at < deadline)::int END
      FROM attempt
);

COMMENT ON FUNCTION notif_attempts_within(interval, interval, interval, interval, int) IS 'attempts that can start before the deadline if each takes the whole timeout and the longest backoff';

/*
 * notif_stats: one row per type, over the jobs created in the last
 * notif_deliver.stats_window (default 24 hours).
 *
 *   p  ambiguous attempts / attempts (outcome 'unknown': the provider may
 *      or may not have acted)
 *   q  the share of ambiguous attempts the provider delivered anyway,
 *      measured from delivery reports: a job's delivered reports beyond its
 *      accepted attempts are its delivered ambiguous attempts.  Counted over
 *      jobs whose last attempt ended more than notif_deliver.stats_dlr_grace
 *      ago; NULL while the type has no reports at all, or fewer such
 *      ambiguous attempts (q_sample) than notif_deliver.stats_min_sample.
 *
 * The expected cost per million messages under each delivery uses p, q,
 * the type's cost_lost and cost_dup, and the number of attempts an
 * at_least_once job of the type could make (its max_tries, at least 2,
 * bounded by what the deadline leaves room for: attempts_within_deadline).
 * When only one attempt fits, both deliveries cost the same and the type's
 * own is kept.  To first order in p, at_least_once is the cheaper
 * exactly when cost_lost / cost_dup > q / (1 - q).
 */
CREATE VIEW notif_stats AS
WITH settings AS (
    SELECT now() - coalesce(current_setting('notif_deliver.stats_window', true), '1d')::interval AS since,
           coalesce(current_setting('notif_deliver.stats_window', true), '1d')::interval AS stats_window,
           coalesce(current_setting('notif_deliver.stats_dlr_grace', true), '10min')::interval AS grace,
           coalesce(current_setting('notif_deliver.stats_min_sample', true), '100')::int AS min_sample
),
-- A job tried once, and not ambiguously, is known from its row: that one
-- call's outcome is the job's.  Only the others (a few per cent: retried,
-- or ended unknown) have their calls read from notif_attempt.
per_job AS (
    SELECT j.kind, j.status,
           -- (a call in flight is counted in tries, and has no row yet)
           CASE WHEN x.detailed THEN a.attempts
                ELSE j.tries + j.earlier_tries - (j.claimed_by IS NOT NULL)::int END AS attempts,
           CASE WHEN x.detailed THEN a.ambiguous ELSE 0 END AS ambiguous,
           CASE WHEN x.detailed THEN a.accepted
                ELSE (j.outcome IS NOT DISTINCT FROM 'accepted')::int END AS accepted,
           d.reports,
           d.delivered,
           -- finished, and its reports had time to arrive
           (j.status IN ('sent', 'failed', 'expired') AND j.claimed_by IS NULL
            AND coalesce(CASE WHEN x.detailed THEN a.last_ended
                              ELSE greatest(j.next_at, j.sent_at) END < now() - s.grace, false)) AS judged,
           -- it ended on an ambiguous call: delivered, or lost?
           (j.status IN ('sent', 'failed', 'expired') AND j.claimed_by IS NULL
            AND j.outcome = 'unknown') AS ended_ambiguous
      FROM notif_job j
     CROSS JOIN settings s
     CROSS JOIN LATERAL (SELECT j.tries + j.earlier_tries > 1
                                OR j.outcome IS NOT DISTINCT FROM 'unknown' AS detailed) x
     CROSS JOIN LATERAL (SELECT count(*) AS attempts,
                                count(*) FILTER (WHERE c.outcome = 'unknown') AS ambiguous,
                                count(*) FILTER (WHERE c.outcome = 'accepted') AS accepted,
                                max(c.ended_at) AS last_ended
                           FROM notif_attempt c
                          WHERE x.detailed AND c.job_id = j.id) a
     -- its reports, by index (whatever the planner knows of the tables)
     CROSS JOIN LATERAL (SELECT count(*) AS reports,
                                count(*) FILTER (WHERE r.delivered) AS delivered
                           FROM notif_dlr r
                          WHERE r.job_id = j.id) d
     WHERE j.created_at >= s.since
),
-- the jobs in a few groups; what the estimates need is kept apart
groups AS MATERIALIZED (
    SELECT kind, status, ambiguous, ended_ambiguous,
           count(*) AS jobs,
           sum(attempts) AS attempts,
           count(*) FILTER (WHERE reports > 0) AS dlr_jobs,
           coalesce(sum(ambiguous) FILTER (WHERE judged), 0) AS q_sample,
           coalesce(sum(least(ambiguous, greatest(0, delivered - accepted))) FILTER (WHERE judged), 0) AS q_delivered,
           count(*) FILTER (WHERE judged AND ended_ambiguous AND delivered = 0) AS measured_lost,
           coalesce(sum(delivered - 1) FILTER (WHERE delivered > 1), 0) AS measured_duplicates
      FROM per_job
     GROUP BY kind, status, ambiguous, ended_ambiguous
),
per_kind AS (
    SELECT kind,
           sum(jobs) AS jobs,
           coalesce(sum(jobs) FILTER (WHERE status = 'queued'), 0) AS queued,
           coalesce(sum(jobs) FILTER (WHERE status = 'sending'), 0) AS sending,
           coalesce(sum(jobs) FILTER (WHERE status = 'sent'), 0) AS sent,
           coalesce(sum(jobs) FILTER (WHERE status = 'failed'), 0) AS failed,
           coalesce(sum(jobs) FILTER (WHERE status = 'expired'), 0) AS expired,
           sum(attempts) AS attempts,
           sum(ambiguous * jobs) AS ambiguous,
           sum(dlr_jobs) AS dlr_jobs,
           sum(q_sample) AS q_sample,
           sum(q_delivered) AS q_delivered,
           sum(measured_lost) AS measured_lost,
           sum(measured_duplicates) AS measured_duplicates
      FROM groups
     GROUP BY kind
),
queue AS (
    SELECT kind,
           count(*) AS queued_now,
           coalesce(now() - min(next_at) FILTER (WHERE next_at <= now()), interval '0') AS oldest_queued_age
      FROM notif_job
     WHERE status = 'queued'
     GROUP BY kind
),
held AS (
    SELECT kind, count(*) AS in_flight
      FROM notif_job
     WHERE claimed_by IS NOT NULL
     GROUP BY kind
),
measured AS (
    SELECT t.code AS kind, t.delivery, t.cost_lost, t.cost_dup, t.max_tries,
           notif_attempts_within(t.deadline, p.timeout, t.backoff_min, t.backoff_max, t.max_tries)
               AS attempts_within_deadline,
           -- the tries an at_least_once job of this type could make: its
           -- max_tries (at least 2: one retry), as far as the deadline allows
           coalesce(notif_attempts_within(t.deadline, p.timeout, t.backoff_min, t.backoff_max,
                                          greatest(t.max_tries, 2)),
                    greatest(t.max_tries, 2)) AS alo_tries,
           s.stats_window, s.min_sample,
           coalesce(k.jobs, 0)::bigint AS jobs,
           coalesce(k.queued, 0)::bigint AS queued,
           coalesce(k.sending, 0)::bigint AS sending,
           coalesce(k.sent, 0)::bigint AS sent,
           coalesce(k.failed, 0)::bigint AS failed,
           coalesce(k.expired, 0)::bigint AS expired,
           coalesce(qu.queued_now, 0) AS queued_now,
           coalesce(qu.oldest_queued_age, interval '0') AS oldest_queued_age,
           coalesce(h.in_flight, 0) AS in_flight,
           coalesce(k.attempts, 0)::bigint AS attempts,
           coalesce(k.ambiguous, 0)::bigint AS ambiguous_attempts,
           (k.ambiguous::float8 / nullif(k.attempts, 0)) AS p,
           CASE WHEN k.dlr_jobs > 0 AND k.q_sample >= greatest(s.min_sample, 1)
                THEN k.q_delivered::float8 / k.q_sample END AS q,
           coalesce(k.q_sample, 0)::bigint AS q_sample,
           coalesce(k.dlr_jobs, 0)::bigint AS dlr_jobs,
           CASE WHEN k.dlr_jobs > 0 THEN k.measured_lost::bigint END AS measured_lost,
           CASE WHEN k.dlr_jobs > 0 THEN k.measured_duplicates::bigint END AS measured_duplicates
      FROM notif_type t
      JOIN notif_provider p ON p.name = t.provider
     CROSS JOIN settings s
      LEFT JOIN per_kind k ON k.kind = t.code
      LEFT JOIN queue qu ON qu.kind = t.code
      LEFT JOIN held h ON h.kind = t.code
),
estimated AS (
    -- every job that ended on k ambiguous calls is lost unless one of them
    -- delivered: (1 - q)^k; every ambiguous call followed by another try
    -- is a copy with probability q
    SELECT m.kind,
           sum(g.jobs * power(1 - m.q, g.ambiguous)) FILTER (WHERE g.ended_ambiguous) AS lost,
           sum(m.q * g.jobs * (g.ambiguous - CASE WHEN g.ended_ambiguous THEN 1 ELSE 0 END)) AS duplicates
      FROM measured m
      JOIN groups g ON g.kind = m.kind
     WHERE m.q IS NOT NULL
     GROUP BY m.kind
),
costs AS (
    SELECT m.*,
           round(coalesce(e.lost, 0)::numeric, 1) AS estimated_lost,
           round(coalesce(e.duplicates, 0)::numeric, 1) AS estimated_duplicates,
           -- per message: at_most_once loses p(1-q); at_least_once with k = alo_tries
           -- attempts loses (p(1-q))^k and sends E[deliveries] - P(any)
           -- extra copies, E[deliveries] = (1-p+pq)(1 + p + ... + p^(k-1))
           m.p * (1 - m.q) AS amo_lost,
           power(m.p * (1 - m.q), m.alo_tries) AS alo_lost,
           (1 - m.p + m.p * m.q)
               * CASE WHEN m.p < 1 THEN (1 - power(m.p, m.alo_tries)) / (1 - m.p) ELSE m.alo_tries END
               - (1 - power(m.p * (1 - m.q), m.alo_tries)) AS alo_dup
      FROM measured m
      LEFT JOIN estimated e ON e.kind = m.kind
),
priced AS (
    SELECT c.*,
           round((1e6 * c.amo_lost * c.cost_lost)::numeric, 2) AS cost_at_most_once,
           round((1e6 * (c.alo_lost * c.cost_lost + greatest(c.alo_dup, 0) * c.cost_dup))::numeric, 2)
               AS cost_at_least_once
      FROM costs c
)
SELECT kind,
       delivery,
       stats_window,
       jobs, queued, sending, sent, failed, expired,
       queued_now, oldest_queued_age, in_flight,
       attempts, ambiguous_attempts,
       round(p::numeric, 6) AS p,
       round(q::numeric, 4) AS q,
       q_sample,
       min_sample AS q_min_sample,
       dlr_jobs,
       measured_lost, measured_duplicates,
       CASE WHEN q IS NOT NULL THEN estimated_lost END AS estimated_lost,
       CASE WHEN q IS NOT NULL THEN estimated_duplicates END AS estimated_duplicates,
       attempts_within_deadline,
       cost_at_most_once AS cost_per_million_at_most_once,
       cost_at_least_once AS cost_per_million_at_least_once,
       CASE WHEN cost_at_most_once < cost_at_least_once THEN 'at_most_once'
            WHEN cost_at_least_once < cost_at_most_once THEN 'at_least_once'
            WHEN cost_at_most_once = cost_at_least_once THEN delivery
       END AS recommended_delivery,
       CASE WHEN cost_at_most_once < cost_at_least_once THEN delivery <> 'at_most_once'
            WHEN cost_at_least_once < cost_at_most_once THEN delivery <> 'at_least_once'
            WHEN cost_at_most_once = cost_at_least_once THEN false
       END AS recommendation_differs
  FROM priced
 ORDER BY kind;

COMMENT ON VIEW notif_stats IS 'per type over notif_deliver.stats_window: statuses, p and q, measured and estimated loss and duplicates, the delivery the costs recommend';

-- monitoring roles may read it: it holds counts, never payloads
GRANT SELECT ON notif_stats TO pg_monitor;

/*
 * notif_retry(job_id, force): put a failed or expired job back in the queue
 * with fresh tries and, if its type has one, a fresh deadline (a dead-letter
 * re-drive).  An at_most_once job whose last call ended 'unknown' may have
 * been delivered: re-sending it may duplicate, so it is refused unless
 * force => true (such a job is 'sent', or 'failed' if its type changed).
 */
CREATE FUNCTION notif_retry(job_id bigint, force boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    j record;
BEGIN
    IF job_id IS NULL OR force IS NULL THEN
        RAISE EXCEPTION 'notif_retry: job_id and force must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    SELECT n.id, n.kind, n.status, n.outcome, n.claimed_by, t.delivery INTO j
      FROM @extschema@.notif_job n
      JOIN @extschema@.notif_type t ON t.code OPERATOR(pg_catalog.=) n.kind
     WHERE n.id OPERATOR(pg_catalog.=) notif_retry.job_id
       FOR NO KEY UPDATE OF n;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'notif_retry: job % does not exist', job_id
            USING ERRCODE = 'no_data_found';
    END IF;

    IF j.delivery OPERATOR(pg_catalog.=) 'at_most_once'
       AND j.outcome IS NOT DISTINCT FROM 'unknown'
       AND j.status IN ('sent', 'failed', 'expired') AND j.claimed_by IS NULL THEN
        IF NOT force THEN
            RAISE EXCEPTION 'notif_retry: job % may already have been delivered', job_id
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = format('Its type "%s" is at_most_once and its last call ended with outcome "unknown".', j.kind),
                      HINT = 'Sending it again may duplicate it; use notif_retry(job_id, force => true) to send it anyway.';
        END IF;
    ELSIF j.status NOT IN ('failed', 'expired') THEN
        RAISE EXCEPTION 'notif_retry: job % is %, only failed or expired jobs can be retried', job_id, j.status
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;

    PERFORM @extschema@.notif_redrive(ARRAY[j.id]);
END;
$$;

/*
 * notif_retry(kind, since, force): re-drive every failed or expired job of
 * a type whose last attempt was due at or after since.  Returns how many.
 * Jobs cancelled by notif_cancel stay cancelled (notif_retry(job_id) can
 * bring one back).  Without force, at_most_once jobs whose last call ended
 * 'unknown' are left alone (a NOTICE says how many).
 */
CREATE FUNCTION notif_retry(kind text, since timestamptz, force boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    type_delivery text;
    ids bigint[];
    skipped bigint;
BEGIN
    IF kind IS NULL OR since IS NULL OR force IS NULL THEN
        RAISE EXCEPTION 'notif_retry: kind, since and force must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT t.delivery INTO type_delivery
      FROM @extschema@.notif_type t WHERE t.code OPERATOR(pg_catalog.=) notif_retry.kind;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'notif_retry: unknown notification type "%"', kind
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'Types are rows of notif_type.';
    END IF;

    WITH eligible AS (
        SELECT n.id,
               (type_delivery OPERATOR(pg_catalog.=) 'at_most_once'
                AND n.outcome IS NOT DISTINCT FROM 'unknown') AS maybe_delivered
          FROM @extschema@.notif_job n
         WHERE n.kind OPERATOR(pg_catalog.=) notif_retry.kind
           AND n.next_at OPERATOR(pg_catalog.>=) since
           AND (n.status OPERATOR(pg_catalog.=) 'expired'
                OR (n.status OPERATOR(pg_catalog.=) 'failed'
                    AND n.last_error IS DISTINCT FROM 'cancelled')
                OR (n.status OPERATOR(pg_catalog.=) 'sent' AND n.claimed_by IS NULL
                    AND type_delivery OPERATOR(pg_catalog.=) 'at_most_once'
                    AND n.outcome OPERATOR(pg_catalog.=) 'unknown'))
           FOR NO KEY UPDATE OF n
    )
    SELECT coalesce(array_agg(id) FILTER (WHERE force OR NOT maybe_delivered), '{}'),
           count(*) FILTER (WHERE maybe_delivered AND NOT force)
      INTO ids, skipped
      FROM eligible;

    IF skipped OPERATOR(pg_catalog.>) 0 THEN
        RAISE NOTICE 'notif_retry: % at_most_once job(s) of type "%" left alone: they may already have been delivered', skipped, kind
            USING HINT = 'Use force => true to send them again anyway (they may duplicate).';
    END IF;
    RETURN @extschema@.notif_redrive(ids);
END;
$$;

COMMENT ON FUNCTION notif_retry(bigint, boolean) IS 're-drive a failed or expired job with fresh tries; force for an at_most_once job that may have been delivered';
COMMENT ON FUNCTION notif_retry(text, timestamptz, boolean) IS 're-drive the failed and expired jobs of a type due since a time; returns how many';

REVOKE ALL ON FUNCTION notif_retry(bigint, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION notif_retry(text, timestamptz, boolean) FROM PUBLIC;

/*
 * notif_redrive(ids): the common part of notif_retry, on rows it has
 * locked: queued and due now, with fresh tries (the tries made so far move
 * to earlier_tries) and, if the type has one, a fresh deadline.  Wakes the
 * lanes' senders at commit.  Internal: runs as notif_retry's owner.
 */
CREATE FUNCTION notif_redrive(ids bigint[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
    lanes text[];
BEGIN
    WITH redriven AS (
        UPDATE @extschema@.notif_job j
           SET status = 'queued',
               earlier_tries = j.earlier_tries OPERATOR(pg_catalog.+) j.tries,
               tries = 0,
               next_at = now(),
               deadline_at = now() OPERATOR(pg_catalog.+) t.deadline,
               sent_at = NULL
          FROM @extschema@.notif_type t
         WHERE j.id OPERATOR(pg_catalog.=) ANY (ids)
           AND t.code OPERATOR(pg_catalog.=) j.kind
        RETURNING t.lane
    )
    SELECT count(*), array_agg(DISTINCT lane) INTO n, lanes FROM redriven;

    PERFORM @extschema@.notif_wake_lane(lane) FROM unnest(lanes) AS lane;
    RETURN n;
END;
$$;

REVOKE ALL ON FUNCTION notif_redrive(bigint[]) FROM PUBLIC;

-- wake a lane's sender when the current transaction commits (internal)
CREATE FUNCTION notif_wake_lane(lane text)
RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'notif_wake_lane_sql';

REVOKE ALL ON FUNCTION notif_wake_lane(text) FROM PUBLIC;

/*
 * notif_cancel(job_id): a queued job never goes out.  It becomes 'failed'
 * with last_error 'cancelled', so notif_retry can still bring it back.  A
 * job a sender already holds ('sending') is not cancelled: an error says so.
 */
CREATE FUNCTION notif_cancel(job_id bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    current_status text;
BEGIN
    IF job_id IS NULL THEN
        RAISE EXCEPTION 'notif_cancel: job_id must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    -- waits for a sender's claim of this job to commit, then sees its status
    UPDATE @extschema@.notif_job n
       SET status = 'failed', last_error = 'cancelled', next_at = now()
     WHERE n.id OPERATOR(pg_catalog.=) notif_cancel.job_id
       AND n.status OPERATOR(pg_catalog.=) 'queued';
    IF FOUND THEN
        RETURN;
    END IF;

    SELECT n.status INTO current_status
      FROM @extschema@.notif_job n WHERE n.id OPERATOR(pg_catalog.=) notif_cancel.job_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'notif_cancel: job % does not exist', job_id
            USING ERRCODE = 'no_data_found';
    END IF;
    RAISE EXCEPTION 'notif_cancel: job % is %, only a queued job can be cancelled', job_id, current_status
        USING ERRCODE = 'object_not_in_prerequisite_state';
END;
$$;

COMMENT ON FUNCTION notif_cancel(bigint) IS 'cancel a queued job: it becomes failed (cancelled) and is never sent';

REVOKE ALL ON FUNCTION notif_cancel(bigint) FROM PUBLIC;

/*
 * notif_workers(): the launcher and each lane's sender: pid, lane, state,
 * calls in flight, jobs sent in the last minute.  Readable by pg_monitor.
 */
CREATE FUNCTION notif_workers(OUT pid int, OUT role text, OUT lane text, OUT state text,
                              OUT in_flight int, OUT sent_last_minute bigint)
RETURNS SETOF record
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'notif_workers';

COMMENT ON FUNCTION notif_workers() IS 'the launcher and the senders: pid, lane, state, calls in flight, jobs sent in the last minute';

REVOKE ALL ON FUNCTION notif_workers() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION notif_workers() TO pg_monitor;

-- the 1.1 library waits for this update: wake it when it commits
SELECT notif_wake_launcher();
