/*
 * notif_deliver 1.1 -> 1.2
 *
 * Plain SQL, run by ALTER EXTENSION notif_deliver UPDATE (and by a fresh
 * CREATE EXTENSION, after the 1.0 script and the 1.0 -> 1.1 update: there
 * is one path to 1.2).  Delivery pauses while the 1.2 library waits for
 * this update, and resumes when it commits.
 *
 * Each part below says what it adds; docs: doc/reference.md, "Upgrading".
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION notif_deliver UPDATE TO '1.2'" to load this file. \quit

/* ---------------------------------------------------------------------
 * The job lifecycle
 * --------------------------------------------------------------------- */

/*
 * notif_transitions(): every transition a job makes, as the library's one
 * table holds it (src/job_state.c): claim, call ended, sender lost, retry,
 * cancel.  For an event, the first row whose delivery, from_status,
 * outcome and condition match applies; to_status NULL means refused (note
 * says why).  The senders and notif_retry / notif_cancel all follow it.
 */
CREATE FUNCTION notif_transitions(
    OUT name text, OUT event text, OUT delivery text, OUT from_status text,
    OUT outcome text, OUT condition text, OUT to_status text, OUT retries boolean,
    OUT tries text, OUT holds boolean, OUT note text)
RETURNS SETOF record
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'notif_transitions';

COMMENT ON FUNCTION notif_transitions() IS 'the job lifecycle: every transition (claim, call ended, sender lost, retry, cancel), first match wins';

/*
 * notif_transition_for(event, delivery, status, outcome, last_error, held,
 * forced, by_kind): the row of notif_transitions() that applies to one job.
 * Internal: notif_retry and notif_cancel ask it.
 */
CREATE FUNCTION notif_transition_for(
    event text, delivery text, status text, outcome text, last_error text,
    held boolean, forced boolean, by_kind boolean,
    OUT name text, OUT event text, OUT delivery text, OUT from_status text,
    OUT outcome text, OUT condition text, OUT to_status text, OUT retries boolean,
    OUT tries text, OUT holds boolean, OUT note text)
RETURNS record
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'notif_transition_for';

REVOKE ALL ON FUNCTION notif_transition_for(text, text, text, text, text, boolean, boolean, boolean) FROM PUBLIC;

/* notif_redrive writes the status the transition decided */
DROP FUNCTION notif_redrive(bigint[]);

/*
 * notif_redrive(ids, status): the common part of notif_retry, on rows it
 * has locked, with the status the "retry" transition decided: due now,
 * with fresh tries (the tries made so far move to earlier_tries) and, if
 * the type has one, a fresh deadline.  Wakes the lanes' senders at commit.
 * Internal: runs as notif_retry's owner.
 */
CREATE FUNCTION notif_redrive(ids bigint[], status text)
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
           SET status = notif_redrive.status,
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

REVOKE ALL ON FUNCTION notif_redrive(bigint[], text) FROM PUBLIC;

/*
 * notif_decide(caller, job_id, event, force): lock one job and return the
 * transition that applies to it for an operator's event ('retry' or
 * 'cancel'), with its kind and status.  Waits for a sender's claim of the
 * job to commit, then decides on what it left.  An unknown id is an error
 * (P0002) in the caller's name.  Internal: notif_retry and notif_cancel.
 */
CREATE FUNCTION notif_decide(caller text, job_id bigint, event text, force boolean,
                             OUT kind text, OUT status text, OUT rule text,
                             OUT to_status text, OUT note text)
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    j record;
    t record;
BEGIN
    SELECT n.kind, n.status, n.outcome, n.last_error, n.claimed_by, y.delivery INTO j
      FROM @extschema@.notif_job n
      JOIN @extschema@.notif_type y ON y.code OPERATOR(pg_catalog.=) n.kind
     WHERE n.id OPERATOR(pg_catalog.=) notif_decide.job_id
       FOR NO KEY UPDATE OF n;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: job % does not exist', caller, job_id
            USING ERRCODE = 'no_data_found';
    END IF;
    SELECT * INTO t
      FROM @extschema@.notif_transition_for(event, j.delivery, j.status, j.outcome, j.last_error,
                                            j.claimed_by IS NOT NULL, force, false);
    kind := j.kind;
    status := j.status;
    rule := t.name;
    to_status := t.to_status;
    note := t.note;
END;
$$;

REVOKE ALL ON FUNCTION notif_decide(text, bigint, text, boolean) FROM PUBLIC;

/*
 * notif_retry(job_id, force): put a failed or expired job back in the
 * queue with fresh tries, as the "retry" transitions say: an at_most_once
 * job whose last call ended 'unknown' may have been delivered, and is
 * re-sent only with force => true.
 */
CREATE OR REPLACE FUNCTION notif_retry(job_id bigint, force boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d record;
BEGIN
    IF job_id IS NULL OR force IS NULL THEN
        RAISE EXCEPTION 'notif_retry: job_id and force must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    SELECT * INTO d FROM @extschema@.notif_decide('notif_retry', job_id, 'retry', force);
    IF d.rule OPERATOR(pg_catalog.=) 'retry_maybe_delivered' THEN
        RAISE EXCEPTION 'notif_retry: job % %', job_id, d.note
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('Its type "%s" is at_most_once and its last call ended with outcome "unknown".', d.kind),
                  HINT = 'Sending it again may duplicate it; use notif_retry(job_id, force => true) to send it anyway.';
    ELSIF d.to_status IS NULL THEN
        RAISE EXCEPTION 'notif_retry: job % is %, %', job_id, d.status, d.note
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;

    PERFORM @extschema@.notif_redrive(ARRAY[job_id], d.to_status);
END;
$$;

/*
 * notif_retry(kind, since, force): re-drive every job of a type whose last
 * attempt was due at or after since and that the "retry" transitions
 * allow, retried by kind (so cancelled jobs stay cancelled).  Returns how
 * many.  Without force, at_most_once jobs that may have been delivered are
 * left alone (a NOTICE says how many).
 */
CREATE OR REPLACE FUNCTION notif_retry(kind text, since timestamptz, force boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    type_delivery text;
    skipped bigint;
    status text;
    n_statuses bigint;
    ids bigint[];
BEGIN
    IF kind IS NULL OR since IS NULL OR force IS NULL THEN
        RAISE EXCEPTION 'notif_retry: kind, since and force must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT y.delivery INTO type_delivery
      FROM @extschema@.notif_type y WHERE y.code OPERATOR(pg_catalog.=) notif_retry.kind;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'notif_retry: unknown notification type "%"', kind
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'Types are rows of notif_type.';
    END IF;

    WITH decided AS (
        SELECT n.id, t.name, t.to_status
          FROM @extschema@.notif_job n,
               LATERAL @extschema@.notif_transition_for('retry', type_delivery, n.status, n.outcome,
                                                        n.last_error, n.claimed_by IS NOT NULL,
                                                        force, true) t
         WHERE n.kind OPERATOR(pg_catalog.=) notif_retry.kind
           AND n.next_at OPERATOR(pg_catalog.>=) since
           AND (t.to_status IS NOT NULL OR t.name OPERATOR(pg_catalog.=) 'retry_maybe_delivered')
           FOR NO KEY UPDATE OF n
    )
    SELECT coalesce(array_agg(d.id) FILTER (WHERE d.to_status IS NOT NULL), '{}'),
           max(d.to_status),
           count(DISTINCT d.to_status),
           count(*) FILTER (WHERE d.to_status IS NULL)
      INTO ids, status, n_statuses, skipped
      FROM decided d;

    IF skipped OPERATOR(pg_catalog.>) 0 THEN
        RAISE NOTICE 'notif_retry: % at_most_once job(s) of type "%" left alone: they may already have been delivered', skipped, kind
            USING HINT = 'Use force => true to send them again anyway (they may duplicate).';
    END IF;
    IF n_statuses OPERATOR(pg_catalog.>) 1 THEN
        RAISE EXCEPTION 'notif_retry: the retry transitions lead to more than one status'
            USING ERRCODE = 'internal_error';
    END IF;
    IF status IS NULL THEN
        RETURN 0;
    END IF;
    RETURN @extschema@.notif_redrive(ids, status);
END;
$$;

/*
 * notif_cancel(job_id): a queued job never goes out, as the "cancel"
 * transition says (it becomes 'failed' with last_error 'cancelled', so
 * notif_retry can still bring it back).  A job a sender already holds is
 * not cancelled: an error says so.
 */
CREATE OR REPLACE FUNCTION notif_cancel(job_id bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d record;
BEGIN
    IF job_id IS NULL THEN
        RAISE EXCEPTION 'notif_cancel: job_id must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    SELECT * INTO d FROM @extschema@.notif_decide('notif_cancel', job_id, 'cancel', false);
    IF d.to_status IS NULL THEN
        RAISE EXCEPTION 'notif_cancel: job % is %, %', job_id, d.status, d.note
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE @extschema@.notif_job n
       SET status = d.to_status, last_error = d.note, next_at = now()
     WHERE n.id OPERATOR(pg_catalog.=) notif_cancel.job_id;
END;
$$;

/*
 * notif_config_applied(lane): whether the sender of the lane (without a
 * lane: the launcher and every sender) has read the configuration as last
 * committed.  A change to notif_type or notif_provider reaches a sender at
 * its next round; this says when it has.  (A function of its own, so that
 * notif_workers() keeps its 1.1 signature, its grants and the views over it.)
 */
CREATE FUNCTION notif_config_applied(lane text DEFAULT NULL)
RETURNS boolean
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'notif_config_applied';

COMMENT ON FUNCTION notif_config_applied(text) IS 'whether the lane''s sender (default: every process) has read the latest committed configuration';

REVOKE ALL ON FUNCTION notif_config_applied(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION notif_config_applied(text) TO pg_monitor;

/*
 * notif_provider_slots(): the providers' limits in shared memory: one row
 * per provider whose max_inflight and rate_limit all lanes share, and one
 * per provider and lane limited in that lane only, because all
 * notif_deliver.max_providers shared slots were taken.
 */
CREATE FUNCTION notif_provider_slots(OUT provider text, OUT lane text, OUT shared boolean,
                                     OUT senders int, OUT in_flight int,
                                     OUT paused_until timestamptz)
RETURNS SETOF record
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'notif_provider_slots';

COMMENT ON FUNCTION notif_provider_slots() IS 'providers'' shared limits in use; providers limited per lane when the shared slots are full';

REVOKE ALL ON FUNCTION notif_provider_slots() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION notif_provider_slots() TO pg_monitor;


/* ---------------------------------------------------------------------
 * Push providers (FCM, APNs)
 * --------------------------------------------------------------------- */

/*
 * Two more formats: 'fcm' (FCM HTTP v1: the payload is FCM's message
 * object, sent as {"message": payload}) and 'apns' (POST /3/device/<token>,
 * the payload's "headers" as request headers).  The sender signs their
 * tokens itself: auth names the method, credentials holds the key.
 */
ALTER TABLE notif_provider DROP CONSTRAINT notif_provider_format_check;
ALTER TABLE notif_provider ADD CONSTRAINT notif_provider_format_check
    CHECK (format IN ('json', 'form', 'query', 'fcm', 'apns'));

-- refuses malformed credentials when the row is written (a clear error, never the secret)
CREATE FUNCTION notif_credentials_check(auth text, credentials jsonb)
RETURNS boolean
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'notif_credentials_check';

COMMENT ON FUNCTION notif_credentials_check(text, jsonb) IS 'CHECK of notif_provider: credentials suit their auth method';

ALTER TABLE notif_provider
    ADD COLUMN auth text
        CONSTRAINT notif_provider_auth_check
        CHECK (auth IN ('google_service_account', 'apns_token')),
    ADD COLUMN credentials jsonb,
    -- HTTP/2: calls of a lane to this provider share at most this many connections
    ADD COLUMN max_connections int NOT NULL DEFAULT 4
        CONSTRAINT notif_provider_max_connections_check CHECK (max_connections > 0),
    -- the CA certificate(s), PEM, that this provider's TLS certificate must chain to
    -- (NULL: the system's trust store)
    ADD COLUMN ca_cert text
        CONSTRAINT notif_provider_ca_cert_check
        CHECK (ca_cert LIKE '%-----BEGIN CERTIFICATE-----%-----END CERTIFICATE-----%'),
    ADD CONSTRAINT notif_provider_credentials_check
        CHECK (notif_credentials_check(auth, credentials));

COMMENT ON COLUMN notif_provider.auth IS 'token the sender signs: google_service_account (FCM) or apns_token (APNs)';
COMMENT ON COLUMN notif_provider.credentials IS 'the service-account JSON file, or {key_id, team_id, private_key} of an APNs .p8 key';
COMMENT ON COLUMN notif_provider.max_connections IS 'HTTP/2 connections per lane to this provider; calls are multiplexed over them';
COMMENT ON COLUMN notif_provider.ca_cert IS 'PEM CA certificate(s) to verify the provider with, instead of the system store';

/*
 * notif_unregistered: device tokens the platform said are dead (FCM 404
 * UNREGISTERED, APNs 410 Unregistered or 400 BadDeviceToken), one row per
 * job that was refused so; the app deletes them on its side, then the rows
 * here (DELETE FROM notif_unregistered WHERE ...).  Rows go with their job
 * when the retention purge takes it.
 */
CREATE TABLE notif_unregistered_token (
    job_id bigint PRIMARY KEY REFERENCES notif_job ON DELETE CASCADE,
    kind text NOT NULL,
    user_id bigint NOT NULL,
    token text NOT NULL,
    reason text NOT NULL,
    reported_at timestamptz NOT NULL
);

COMMENT ON TABLE notif_unregistered_token IS 'dead device tokens, as the platforms reported them (read notif_unregistered)';

CREATE VIEW notif_unregistered AS
SELECT kind, user_id, token, reason, reported_at, job_id
  FROM notif_unregistered_token;

COMMENT ON VIEW notif_unregistered IS 'device tokens FCM or APNs reported dead: delete them in the app, then here';

SELECT pg_catalog.pg_extension_config_dump('notif_unregistered_token', '');


/* ---------------------------------------------------------------------
 * High availability
 * --------------------------------------------------------------------- */


/* ---------------------------------------------------------------------
 * Shards
 * --------------------------------------------------------------------- */


/* ---------------------------------------------------------------------
 * Last: the 1.2 library waits for this update; wake it when it commits.
 * --------------------------------------------------------------------- */
SELECT notif_wake_launcher();
