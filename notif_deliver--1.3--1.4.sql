/*
 * notif_deliver 1.3 -> 1.4
 *
 * Plain SQL, run by ALTER EXTENSION notif_deliver UPDATE.  It is also the
 * second half of the 1.4 install script: make builds
 * notif_deliver--1.4.sql as notif_deliver--1.3.sql followed by this file,
 * so every change to 1.4 is written here, once, and a fresh install and an
 * update run the same statements.  sql/upgrade.sql still compares a
 * database updated from 1.0 with a fresh one (sql/schema_fingerprint.sql).
 *
 * Delivery pauses while the 1.4 library waits for this update, and resumes
 * when it commits.  Each part below says what it adds; docs:
 * doc/reference.md, "Upgrading".  New columns go at the end of their
 * tables, with constant defaults (no table is rewritten).
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION notif_deliver UPDATE TO '1.4'" to load this file. \quit

/* ---------------------------------------------------------------------
 * A circuit breaker per provider (sender/breaker.c)
 *
 * breaker_threshold calls in a row that say the provider is down (never
 * reached it, timed out, reset, or answered 5xx) open its breaker: no call
 * to it starts, its jobs wait without spending tries (their deadlines
 * hold), and after breaker_cooldown one probe call decides whether it
 * closes.  The state lives in shared memory, shared by every lane; a
 * restart starts it closed.  Docs: doc/reference.md, "Circuit breakers".
 * --------------------------------------------------------------------- */

/*
 * 5 in a row: one refused connection or one 503 does not stop a provider,
 * and under any load an outage opens it within a second, before an OTP has
 * spent its tries.  10 seconds: a provider back from an outage gets its
 * traffic within about that, and a dead one one probe call each time.
 */
ALTER TABLE notif_provider
    ADD COLUMN breaker_threshold int DEFAULT 5
        CONSTRAINT notif_provider_breaker_threshold_check
        CHECK (breaker_threshold BETWEEN 1 AND 1000000),
    ADD COLUMN breaker_cooldown interval NOT NULL DEFAULT '10 seconds'
        CONSTRAINT notif_provider_breaker_cooldown_check
        CHECK (breaker_cooldown >= interval '100 milliseconds'
               AND breaker_cooldown <= interval '1 day');

COMMENT ON COLUMN notif_provider.breaker_threshold IS 'calls in a row that say the provider is down (unreached, a timeout, a reset, a 5xx) before its circuit breaker opens; NULL: no breaker';
COMMENT ON COLUMN notif_provider.breaker_cooldown IS 'how long its open breaker lets no call start before one probe call';

/*
 * notif_provider_breakers(): each breaker in shared memory, as the view
 * below shows it (a provider no sender uses has none: closed).
 */
CREATE FUNCTION notif_provider_breakers(OUT name text, OUT state text, OUT since timestamptz,
                                        OUT consecutive_failures int, OUT last_error text,
                                        OUT refused_calls bigint)
RETURNS SETOF record
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'notif_provider_breakers';

COMMENT ON FUNCTION notif_provider_breakers() IS 'the providers'' circuit breakers in shared memory (notif_provider_health shows every provider)';

REVOKE ALL ON FUNCTION notif_provider_breakers() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION notif_provider_breakers() TO pg_monitor;

/*
 * notif_provider_health: every provider, with its breaker's state
 * ('closed', 'open', 'half_open'), since when, the calls in a row that said
 * it is down, the last one's error (an excerpt: notif_excerpt), and the
 * calls it refused while open.  No url, header or credential.
 */
CREATE VIEW notif_provider_health AS
SELECT p.name,
       CASE WHEN p.breaker_threshold IS NULL THEN 'closed' ELSE coalesce(b.state, 'closed') END AS state,
       b.since,
       coalesce(b.consecutive_failures, 0) AS consecutive_failures,
       b.last_error,
       coalesce(b.refused_calls, 0) AS refused_calls
  FROM notif_provider p
  LEFT JOIN notif_provider_breakers() b ON b.name = p.name
 ORDER BY p.name;

COMMENT ON VIEW notif_provider_health IS 'each provider''s circuit breaker: state, since, calls in a row that said it is down, the last error, calls refused while open';

GRANT SELECT ON notif_provider_health TO pg_monitor;

/* ---------------------------------------------------------------------
 * The order_id rule on the table (doc/security.md)
 *
 * notif_enqueue refuses an empty order_id, one over 200 bytes and one with
 * a control character: the key kind:user_id:order_id travels in an HTTP
 * header.  A job written another way (COPY, an INSERT, replication) is held
 * to the same rule.  NOT VALID: the rows already there are not read, so the
 * update stays quick and no old hand-made row can fail it; every row
 * written from now on is checked.
 * --------------------------------------------------------------------- */

ALTER TABLE notif_job
    ADD CONSTRAINT notif_job_order_id_check
    CHECK (octet_length(order_id) BETWEEN 1 AND 200 AND order_id !~ '[\x01-\x1f\x7f]') NOT VALID;

/* ---------------------------------------------------------------------
 * A backup provider per type, and what each provider's body looks like
 *
 * A call goes to the first of the type's provider, then its
 * backup_providers, whose circuit breaker is not open; a job whose call
 * certainly never reached one provider takes the next at once
 * (amo_unreached_next_route, alo_next_route).  payload_map reshapes the
 * job's payload for a provider that names its fields otherwise.
 * notif_calls says which provider took each call.  Docs:
 * doc/reference.md, "Backup providers".
 * --------------------------------------------------------------------- */

ALTER TABLE notif_type
    ADD COLUMN backup_providers text[]
        CONSTRAINT notif_type_backup_providers_check
        CHECK (cardinality(backup_providers) BETWEEN 1 AND 8
               AND array_position(backup_providers, NULL) IS NULL);

COMMENT ON COLUMN notif_type.backup_providers IS 'providers that take the calls, in order, while the provider''s circuit breaker is open (each a notif_provider.name); NULL: none';

/*
 * {"their_field": "our_member", ...}: the body a provider gets holds, under
 * each key, the job payload's member that the value names (a member the
 * payload lacks is left out); NULL: the payload as it is.
 */
ALTER TABLE notif_provider
    ADD COLUMN payload_map jsonb
        CONSTRAINT notif_provider_payload_map_check
        CHECK (jsonb_typeof(payload_map) = 'object' AND payload_map <> '{}'
               AND NOT payload_map @? '$.* ? (@.type() != "string")');

COMMENT ON COLUMN notif_provider.payload_map IS 'the body''s fields, each naming the payload member it holds ({"phone": "to", "message": "text"}); NULL: the payload as it is';

-- which provider took a call: the job's last, and each attempt's (NULL: before 1.4)
ALTER TABLE notif_job ADD COLUMN provider text;
ALTER TABLE notif_attempt ADD COLUMN provider text;

COMMENT ON COLUMN notif_job.provider IS 'the provider that took its last call; NULL: none yet (or before 1.4)';
COMMENT ON COLUMN notif_attempt.provider IS 'the provider that took the call; NULL: before 1.4';

-- while a sender holds a job: the provider its call goes to, written by the
-- claim, so that a call cut off by its sender's end is recorded with it
ALTER TABLE notif_job ADD COLUMN claimed_provider text;

COMMENT ON COLUMN notif_job.claimed_provider IS 'while a sender holds the job: the provider its call goes to; NULL otherwise';

-- (notif_calls shows each call's provider: the view is made once, with
-- batch_id too, in "provider batches" below)

/*
 * backup_providers name providers, as notif_type.provider does: each must
 * exist and differ from the type's provider and the others (23503, 23514);
 * a provider a type names cannot be deleted, and a renamed one is renamed
 * in the lists too.
 */
CREATE FUNCTION notif_type_check_backups()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    missing text;
BEGIN
    IF NEW.backup_providers IS NULL THEN
        RETURN NEW;
    END IF;
    IF NEW.provider = ANY (NEW.backup_providers)
       OR cardinality(NEW.backup_providers)
          <> (SELECT count(DISTINCT b) FROM unnest(NEW.backup_providers) b) THEN
        RAISE EXCEPTION 'notif_type "%": backup_providers must name other providers than its provider, each once', NEW.code
            USING ERRCODE = 'check_violation', CONSTRAINT = 'notif_type_backup_providers_check';
    END IF;
    -- a provider deleted meanwhile waits for this, or is seen gone below
    PERFORM FROM @extschema@.notif_provider p
     WHERE p.name OPERATOR(pg_catalog.=) ANY (NEW.backup_providers) FOR KEY SHARE;
    SELECT b INTO missing FROM unnest(NEW.backup_providers) b
     WHERE NOT EXISTS (SELECT FROM @extschema@.notif_provider p WHERE p.name = b) LIMIT 1;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'notif_type "%": backup provider "%" is not in notif_provider', NEW.code, missing
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION notif_type_check_backups() FROM PUBLIC;

CREATE TRIGGER notif_type_check_backups
    BEFORE INSERT OR UPDATE OF provider, backup_providers ON notif_type
    FOR EACH ROW EXECUTE FUNCTION notif_type_check_backups();

CREATE FUNCTION notif_provider_backup_refs()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    user_type text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        SELECT t.code INTO user_type FROM @extschema@.notif_type t
         WHERE OLD.name = ANY (t.backup_providers) LIMIT 1;
        IF user_type IS NOT NULL THEN
            RAISE EXCEPTION 'provider "%" is a backup provider of notif_type "%"', OLD.name, user_type
                USING ERRCODE = 'foreign_key_violation';
        END IF;
        RETURN OLD;
    END IF;
    IF NEW.name IS DISTINCT FROM OLD.name THEN
        UPDATE @extschema@.notif_type
           SET backup_providers = array_replace(backup_providers, OLD.name, NEW.name)
         WHERE OLD.name = ANY (backup_providers);
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION notif_provider_backup_refs() FROM PUBLIC;

CREATE TRIGGER notif_provider_backup_refs
    AFTER UPDATE OF name OR DELETE ON notif_provider
    FOR EACH ROW EXECUTE FUNCTION notif_provider_backup_refs();

/* ---------------------------------------------------------------------
 * A delivery report's key is bounded (doc/security.md)
 *
 * A job's key kind:user_id:order_id is at most 63 + 1 + 20 + 1 + 200 = 285
 * bytes; a report whose key is longer matches no job and is refused
 * (23514) rather than kept.  NOT VALID: the rows already there are not
 * read.
 * --------------------------------------------------------------------- */

ALTER TABLE notif_dlr
    ADD CONSTRAINT notif_dlr_key_check CHECK (octet_length(key) <= 285) NOT VALID;

/* ---------------------------------------------------------------------
 * Channel fallback: push first, then SMS
 *
 * A job of a type with a fallback_type that ends failed or expired (not
 * cancelled), or that was accepted and has no delivered report within the
 * type's fallback_after, gets one job of fallback_type: the same user_id
 * and order_id (the unique key makes it one, across crashes), its payload
 * the original payload's "fallback" member (the app writes both at
 * enqueue; none, no fallback).  The sender writes it in the transaction
 * that records the first job's end (due at once), or its accepted call
 * (due fallback_after later); a delivered report cancels the latter
 * before it goes out (notif_dlr, below).  Docs: doc/reference.md,
 * "Channel fallback".
 * --------------------------------------------------------------------- */

ALTER TABLE notif_type
    ADD COLUMN fallback_type text
        REFERENCES notif_type (code) ON UPDATE CASCADE
        CONSTRAINT notif_type_fallback_type_check CHECK (fallback_type <> code),
    ADD COLUMN fallback_after interval
        CONSTRAINT notif_type_fallback_after_check
        CHECK (fallback_after > interval '0' AND isfinite(fallback_after));

COMMENT ON COLUMN notif_type.fallback_type IS 'the type of the one job enqueued when a job of this type fails, expires, or has no delivered report within fallback_after (its payload: the job''s "fallback" member); NULL: none';

ALTER TABLE notif_job
    ADD COLUMN fallback_of bigint;

COMMENT ON COLUMN notif_job.fallback_of IS 'the job whose channel fallback this job is (its type''s fallback_type); NULL: enqueued by the application';

COMMENT ON COLUMN notif_type.fallback_after IS 'how long after its accepted call a job waits for a delivered report (notif_dlr) before its fallback goes; NULL: only failed and expired jobs fall back';

/* ---------------------------------------------------------------------
 * The APNs topics a provider sends to (push/payload.c; doc/security.md)
 *
 * An APNs key may send to every app of its team: apns_topics pins the
 * topics (bundle IDs) a provider's calls may name in their apns-topic
 * header.  Set, a payload must name one of them: refused at enqueue
 * (22023) for the type's provider, and before the call (the job fails,
 * no call made) for a backup provider or after a change.  NULL: any
 * topic, as before 1.4.
 * --------------------------------------------------------------------- */

ALTER TABLE notif_provider
    ADD COLUMN apns_topics text[]
        CONSTRAINT notif_provider_apns_topics_check
        CHECK (cardinality(apns_topics) > 0 AND array_ndims(apns_topics) = 1
               AND array_position(apns_topics, NULL) IS NULL
               AND array_position(apns_topics, '') IS NULL);

COMMENT ON COLUMN notif_provider.apns_topics IS 'apns: the apns-topic values a payload may name (one of them, then); NULL: any topic of the key''s team';

/* ---------------------------------------------------------------------
 * The rows a webhook role's reports can add, and the provider a report
 * names (doc/security.md)
 *
 * notif_dlr keeps at most 32 reports per job: a report past them still
 * returns the job's id and still ends a job waiting after an ambiguous
 * call, but adds no row.  A report that matches no job goes into one of
 * 65,536 slots chosen by its key's hash, the newest in each slot kept.  So
 * a role that may call notif_dlr adds at most 32 rows per job and 65,536
 * orphaned rows in all (the orphaned rows of 1.3 and earlier aside, until
 * the purge), however many reports it sends.
 *
 * notif_dlr(key, delivered, reported_at, provider) names the provider the
 * report comes from: it then matches only a job whose last call went to
 * that provider (notif_job.provider); another is an orphaned report.  The
 * three-argument notif_dlr is that with no provider named.  Its status
 * changes are told to the app (notif_outcomes_emit, in "outcomes" below:
 * for a type with emit_outcomes): a delivered report that ends a job
 * waiting after an ambiguous call emits its 'sent', and the fallback it
 * cancels its 'cancelled'; a report that changes no status, nothing.
 * --------------------------------------------------------------------- */

ALTER TABLE notif_dlr ADD COLUMN orphan_slot int;

COMMENT ON COLUMN notif_dlr.orphan_slot IS 'an orphaned report''s slot, hashtext(key) & 65535: one row per slot, the newest (NULL: matched, or recorded before 1.4)';

CREATE UNIQUE INDEX notif_dlr_orphan_slot_idx ON notif_dlr (orphan_slot) WHERE job_id IS NULL;

CREATE FUNCTION notif_dlr(key text, delivered boolean, reported_at timestamptz, provider text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts text[];
    job bigint;
    job_provider text;
    waiting boolean;
    d record;
    fb bigint;
BEGIN
    IF key IS NULL OR delivered IS NULL THEN
        RAISE EXCEPTION 'notif_dlr: key and delivered must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    -- key = kind:user_id:order_id (the kind has no ':'; the order_id may)
    parts := regexp_match(key, '^([^:]+):(-?[0-9]{1,19}):(.+)$');
    IF parts IS NOT NULL
       AND parts[2]::numeric BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
        SELECT j.id, j.provider,
               j.status OPERATOR(pg_catalog.=) 'queued' AND j.outcome OPERATOR(pg_catalog.=) 'unknown'
          INTO job, job_provider, waiting
          FROM @extschema@.notif_job j
         WHERE j.user_id OPERATOR(pg_catalog.=) parts[2]::bigint
           AND j.kind OPERATOR(pg_catalog.=) parts[1]
           AND j.order_id OPERATOR(pg_catalog.=) parts[3];
        -- a report that names its provider: only a job whose last call went there
        IF provider IS NOT NULL AND job_provider IS DISTINCT FROM provider THEN
            job := NULL;
            waiting := false;
        END IF;
    END IF;

    IF job IS NULL THEN
        INSERT INTO @extschema@.notif_dlr (key, job_id, delivered, reported_at, orphan_slot)
        VALUES (key, NULL, delivered, coalesce(reported_at, now()), hashtext(key) & 65535)
        ON CONFLICT (orphan_slot) WHERE job_id IS NULL
        DO UPDATE SET key = EXCLUDED.key, delivered = EXCLUDED.delivered,
                      reported_at = EXCLUDED.reported_at, received_at = EXCLUDED.received_at;
    ELSIF (SELECT count(*) FROM (SELECT FROM @extschema@.notif_dlr r
                                  WHERE r.job_id OPERATOR(pg_catalog.=) job LIMIT 32) s) < 32 THEN
        INSERT INTO @extschema@.notif_dlr (key, job_id, delivered, reported_at)
        VALUES (key, job, delivered, coalesce(reported_at, now()));
    END IF;

    -- delivered: a job queued again after an ambiguous call is done, as the
    -- lifecycle's "report" rows say (report_resolves).  Only a job that
    -- looked so is locked and decided on: the report of a job sent (nearly
    -- every report) takes no lock.
    IF delivered AND waiting THEN
        SELECT * INTO d FROM @extschema@.notif_decide('notif_dlr', job, 'report', false);
        IF d.to_status IS NOT NULL THEN
            UPDATE @extschema@.notif_job n
               SET status = d.to_status, sent_at = now(), resolved_by = 'report'
             WHERE n.id OPERATOR(pg_catalog.=) job;
            DELETE FROM @extschema@.notif_active a
             WHERE a.job_id OPERATOR(pg_catalog.=) job;
            PERFORM @extschema@.notif_outcomes_emit(ARRAY[job]);
        END IF;
    END IF;

    -- (1.4) delivered: the fallback the sender wrote for this job, held
    -- for such a report (fallback_after), is not needed; cancelled, if it
    -- has not gone out.  A job the application enqueued is never touched.
    IF delivered AND job IS NOT NULL THEN
        FOR fb IN
            SELECT f.id
              FROM @extschema@.notif_job j
              JOIN @extschema@.notif_type t ON t.code OPERATOR(pg_catalog.=) j.kind
              JOIN @extschema@.notif_job f
                ON f.user_id OPERATOR(pg_catalog.=) j.user_id
               AND f.kind OPERATOR(pg_catalog.=) t.fallback_type
               AND f.order_id OPERATOR(pg_catalog.=) j.order_id
             WHERE j.id OPERATOR(pg_catalog.=) job
               AND f.fallback_of OPERATOR(pg_catalog.=) job
               AND f.status OPERATOR(pg_catalog.=) 'queued'
        LOOP
            SELECT * INTO d FROM @extschema@.notif_decide('notif_dlr', fb, 'cancel', false);
            IF d.to_status IS NOT NULL THEN
                UPDATE @extschema@.notif_job n
                   SET status = d.to_status, last_error = d.note, next_at = now()
                 WHERE n.id OPERATOR(pg_catalog.=) fb;
                DELETE FROM @extschema@.notif_active a
                 WHERE a.job_id OPERATOR(pg_catalog.=) fb;
                PERFORM @extschema@.notif_outcomes_emit(ARRAY[fb]);
            END IF;
        END LOOP;
    END IF;
    RETURN job;
END;
$$;

COMMENT ON FUNCTION notif_dlr(text, boolean, timestamptz, text) IS 'record a provider''s delivery report for a job key, matching only a job whose last call went to that provider; returns the job id, NULL if orphaned';

REVOKE ALL ON FUNCTION notif_dlr(text, boolean, timestamptz, text) FROM PUBLIC;

-- the three-argument notif_dlr: any provider
CREATE OR REPLACE FUNCTION notif_dlr(key text, delivered boolean,
                                     reported_at timestamptz DEFAULT now())
RETURNS bigint
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.notif_dlr(key, delivered, reported_at, NULL::text);

/* ---------------------------------------------------------------------
 * The FCM targets a provider sends to (push/payload.c; doc/security.md)
 *
 * An FCM message names a token, a topic or a condition, and a topic or a
 * condition reaches every subscriber of the app's topics: fcm_topics pins
 * what a provider's calls may name.  Set, a payload names a token or one
 * of the listed topics (compared exactly); a condition, which can combine
 * any topics, is refused; '{}' is tokens only.  Refused at enqueue
 * (22023) for the type's provider, and before the call (the job fails, no
 * call made) for a backup provider or after a change.  NULL: any target,
 * as before 1.4.
 * --------------------------------------------------------------------- */

ALTER TABLE notif_provider
    ADD COLUMN fcm_topics text[]
        CONSTRAINT notif_provider_fcm_topics_check
        CHECK (cardinality(fcm_topics) = 0
               OR (array_ndims(fcm_topics) = 1
                   AND array_position(fcm_topics, NULL) IS NULL
                   AND array_position(fcm_topics, '') IS NULL));

COMMENT ON COLUMN notif_provider.fcm_topics IS 'fcm: the topics a payload may name beside a token (a condition is refused, ''{}'' is tokens only); NULL: a token, any topic or any condition';

/* ---------------------------------------------------------------------
 * outcomes (issue 46): each job's end told to the application
 *
 * A type with emit_outcomes tells, in the transaction that writes it,
 * each final status of its jobs (sent, failed, expired, and cancelled: a
 * job failed by notif_cancel) and each channel fallback enqueued for one
 * of them: a transactional logical message (prefix 'notif_deliver', a
 * JSON object) that a logical-decoding consumer (pg_recvlogical,
 * Debezium, wal2json, pgoutput with messages) reads when, and only if, the
 * status commits; and a NOTIFY on the channel notif_outcome
 * ({"id": ..., "status": ...}) for an application that only needs a
 * wake-up.  The senders call notif_outcomes_emit() with the jobs their
 * statement ended (only when some type emits: nothing is run otherwise),
 * and so do notif_cancel and notif_dlr.  Docs: doc/reference.md,
 * "Outcomes".
 * --------------------------------------------------------------------- */

ALTER TABLE notif_type
    ADD COLUMN emit_outcomes boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN notif_type.emit_outcomes IS 'each final status of its jobs (and each fallback enqueued for one) is emitted at commit: a logical message with prefix ''notif_deliver'' and a NOTIFY on notif_outcome';

/*
 * notif_outcomes_emit(ended, fell_back): the messages of the jobs ended
 * (their final status just written by the caller, no longer held), and
 * of the jobs fell_back whose fallback job was just written, of the types
 * with emit_outcomes; returns how many.  The NOTIFY is left out while
 * the notification queue is half full or more.  The job rows are read as the
 * caller's transaction left them.  Internal: the senders, notif_cancel
 * and notif_dlr call it, each once for the rows it wrote.
 */
CREATE FUNCTION notif_outcomes_emit(ended bigint[], fell_back bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
    -- a wake-up, not a record: never let a listener that does not read
    -- (its queue full, every commit that notifies fails) stall delivery
    wake boolean := pg_notification_queue_usage() OPERATOR(pg_catalog.<) 0.5;
BEGIN
    WITH m AS (
        SELECT j.id, j.kind, j.user_id, j.order_id,
               CASE WHEN j.status OPERATOR(pg_catalog.=) 'failed'
                         AND j.last_error OPERATOR(pg_catalog.=) 'cancelled'
                    THEN 'cancelled' ELSE j.status END AS status,
               j.outcome, j.resolved_by, j.provider,
               j.earlier_tries OPERATOR(pg_catalog.+) j.tries AS tries,
               j.http_status, j.last_error AS error, j.sent_at, j.fallback_of,
               NULL::bigint AS fallback_id, NULL::text AS fallback_kind,
               NULL::timestamptz AS fallback_due_at
          FROM @extschema@.notif_job j
          JOIN @extschema@.notif_type t ON t.code OPERATOR(pg_catalog.=) j.kind
         WHERE j.id OPERATOR(pg_catalog.=) ANY (ended)
           AND t.emit_outcomes
           AND j.status OPERATOR(pg_catalog.=) ANY ('{sent,failed,expired}'::text[])
           AND j.claimed_by IS NULL
        UNION ALL
        SELECT j.id, j.kind, j.user_id, j.order_id, 'fallback',
               j.outcome, j.resolved_by, j.provider,
               j.earlier_tries OPERATOR(pg_catalog.+) j.tries,
               j.http_status, j.last_error, j.sent_at, j.fallback_of,
               f.id, f.kind, f.next_at
          FROM @extschema@.notif_job j
          JOIN @extschema@.notif_type t ON t.code OPERATOR(pg_catalog.=) j.kind
          JOIN @extschema@.notif_job f
            ON f.user_id OPERATOR(pg_catalog.=) j.user_id
           AND f.kind OPERATOR(pg_catalog.=) t.fallback_type
           AND f.order_id OPERATOR(pg_catalog.=) j.order_id
         WHERE j.id OPERATOR(pg_catalog.=) ANY (fell_back)
           AND t.emit_outcomes
           AND f.fallback_of OPERATOR(pg_catalog.=) j.id
    ),
    sent AS (
        SELECT pg_logical_emit_message(true, 'notif_deliver',
                   json_build_object('id', m.id, 'kind', m.kind, 'user_id', m.user_id,
                                     'order_id', m.order_id, 'status', m.status,
                                     'outcome', m.outcome, 'resolved_by', m.resolved_by,
                                     'provider', m.provider, 'tries', m.tries,
                                     'http_status', m.http_status, 'error', m.error,
                                     'sent_at', m.sent_at, 'fallback_of', m.fallback_of,
                                     'fallback_id', m.fallback_id,
                                     'fallback_kind', m.fallback_kind,
                                     'fallback_due_at', m.fallback_due_at)::text) AS lsn,
               CASE WHEN wake THEN pg_notify('notif_outcome',
                         json_build_object('id', m.id, 'status', m.status)::text) END AS woken
          FROM m
         ORDER BY m.id, m.status OPERATOR(pg_catalog.=) 'fallback'
    )
    SELECT count(*) INTO n FROM sent;
    RETURN n;
END;
$$;

COMMENT ON FUNCTION notif_outcomes_emit(bigint[], bigint[]) IS 'internal: emit the outcome messages (logical message and NOTIFY notif_outcome) of jobs just ended and of jobs whose fallback was just enqueued';

REVOKE ALL ON FUNCTION notif_outcomes_emit(bigint[], bigint[]) FROM PUBLIC;

-- notif_cancel (1.3), its cancelled job told
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
    DELETE FROM @extschema@.notif_active a
     WHERE a.job_id OPERATOR(pg_catalog.=) notif_cancel.job_id;
    PERFORM @extschema@.notif_outcomes_emit(ARRAY[job_id]);
END;
$$;

/* ---------------------------------------------------------------------
 * Endpoints per customer (issue 46)
 *
 * One webhook type serves every customer: notif_type.endpoint_by names
 * what addresses a job's endpoint ('user_id', or a member of the payload),
 * and the call goes to that notif_endpoint's url with everything else
 * (format, headers, timeouts, limits) from the type's provider, carrying
 * the endpoint's own signing secrets.  A job whose endpoint is missing or
 * disabled makes no call: it fails (rejected), last_error saying why.
 * A customer's url may point anywhere: the sender refuses to connect to
 * loopback, private, link-local (cloud metadata), multicast and other
 * special-purpose addresses, judged after DNS resolution on the address
 * it connects to (notif_endpoint_refuses; the allow-list
 * notif_deliver.endpoint_allow_cidrs).  An endpoint whose calls keep
 * failing for notif_deliver.endpoint_disable_after is disabled, with a
 * record (notif_endpoint_status) and a WARNING.  Only the owner reads the
 * table (secrets); grant columns for an application role
 * (doc/security.md).
 * --------------------------------------------------------------------- */

CREATE TABLE notif_endpoint (
    owner text PRIMARY KEY
        CONSTRAINT notif_endpoint_owner_check
        CHECK (length(owner) BETWEEN 1 AND 200 AND owner !~ '[[:cntrl:]]'),
    url text NOT NULL
        CONSTRAINT notif_endpoint_url_check CHECK (url ~* '^https?://[^[:space:]]+$'),
    secrets text[]
        CONSTRAINT notif_endpoint_secrets_check
        CHECK (array_ndims(secrets) = 1 AND cardinality(secrets) BETWEEN 1 AND 8
               AND array_position(secrets, NULL) IS NULL
               AND array_to_string(secrets, ' ')
                   ~ '^whsec_[A-Za-z0-9+/]+={0,2}( whsec_[A-Za-z0-9+/]+={0,2})*$'),
    enabled boolean NOT NULL DEFAULT true,
    created timestamptz NOT NULL DEFAULT now(),
    failing_since timestamptz,
    disabled_at timestamptz,
    disabled_reason text
);

COMMENT ON TABLE notif_endpoint IS 'customers'' webhook endpoints: a type with endpoint_by sends each job to its owner''s url';
COMMENT ON COLUMN notif_endpoint.owner IS 'whom it belongs to: what a job of a type with endpoint_by names (its user_id as text, or the payload member''s value)';
COMMENT ON COLUMN notif_endpoint.url IS 'where the calls go (http or https); refused at connect time when it resolves to a loopback, private, link-local, multicast or other special-purpose address, unless notif_deliver.endpoint_allow_cidrs allows it';
COMMENT ON COLUMN notif_endpoint.secrets IS 'its Standard Webhooks signing secrets (whsec_...), newest first during a rotation; NULL: its provider''s; secret';
COMMENT ON COLUMN notif_endpoint.enabled IS 'false: its jobs fail without a call; set true again to resume (clears the failure record)';
COMMENT ON COLUMN notif_endpoint.failing_since IS 'the first of its calls that failed (no answer, a timeout, a 5xx) since its last success; NULL: the last succeeded';
COMMENT ON COLUMN notif_endpoint.disabled_at IS 'when the sender disabled it, after failing for notif_deliver.endpoint_disable_after';
COMMENT ON COLUMN notif_endpoint.disabled_reason IS 'why the sender disabled it';

-- a refused row is not shown (it holds secrets): notif_provider's check
CREATE TRIGGER notif_endpoint_check_row
    BEFORE INSERT OR UPDATE ON notif_endpoint
    FOR EACH ROW EXECUTE FUNCTION notif_provider_check_row();

/*
 * An endpoint enabled again starts afresh: its failure record is cleared,
 * so that its next failure does not disable it at once.
 */
CREATE FUNCTION notif_endpoint_reenabled()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.enabled AND NOT OLD.enabled THEN
        NEW.failing_since := NULL;
        NEW.disabled_at := NULL;
        NEW.disabled_reason := NULL;
    END IF;
    RETURN NEW;
END;
$$;

REVOKE ALL ON FUNCTION notif_endpoint_reenabled() FROM PUBLIC;

CREATE TRIGGER notif_endpoint_reenabled
    BEFORE UPDATE OF enabled ON notif_endpoint
    FOR EACH ROW EXECUTE FUNCTION notif_endpoint_reenabled();

SELECT pg_catalog.pg_extension_config_dump('notif_endpoint', '');

-- what an operator watches: no url, no secrets
CREATE VIEW notif_endpoint_status AS
SELECT owner, enabled, created, failing_since, disabled_at, disabled_reason
  FROM notif_endpoint;

COMMENT ON VIEW notif_endpoint_status IS 'customers'' endpoints without their urls and secrets: which are failing, which the sender disabled and why';

GRANT SELECT ON notif_endpoint_status TO pg_monitor;

ALTER TABLE notif_type
    ADD COLUMN endpoint_by text
        CONSTRAINT notif_type_endpoint_by_check
        CHECK (length(endpoint_by) BETWEEN 1 AND 63 AND endpoint_by !~ '[[:cntrl:]]');

COMMENT ON COLUMN notif_type.endpoint_by IS 'what names a job''s notif_endpoint: ''user_id'', or a top-level payload member (a string or a number); NULL: the provider''s url';

CREATE FUNCTION notif_endpoint_refuses(address inet)
RETURNS text
LANGUAGE C STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'notif_endpoint_refuses';

COMMENT ON FUNCTION notif_endpoint_refuses(inet) IS 'the rule that keeps an endpoint''s call from connecting to an address, under notif_deliver.endpoint_allow_cidrs; NULL: allowed';

/* ---------------------------------------------------------------------
 * provider batches (issue 45)
 *
 * A json provider with batch_max > 1 takes up to that many messages per
 * call: the sender groups the due jobs of one provider claimed in the same
 * round into calls of at most batch_max (sender/batch_calls.c).  The body
 * is the reshaped payloads (payload_map, ref_field, as for one call) as a
 * JSON array, or that array as the member batch_format names; the answer's
 * per-message results are read by batch_results (provider/batch.c).  Each
 * job keeps its own outcome and its own row in notif_calls, where batch_id
 * is the same for the messages of one call (NULL: a call of its own).
 * max_inflight counts calls; rate_limit counts messages.  Docs:
 * doc/reference.md, "Provider batches"; doc/guide.md, "Batching".
 * --------------------------------------------------------------------- */

/*
 * batch_results, checked whole: an object with
 *   "field": a dotted path to the value each result says (required),
 *   "accepted": the values that mean accepted (a non-empty array of strings),
 *   "rejected": those that mean rejected (an array of strings; others:
 *               unknown),
 *   "path": a dotted path to the results' array in the answer (absent:
 *           the answer is the array),
 *   "match": "order" (the default: result i is message i) or "key" (each
 *            result names its message's key at "key_field", a dotted path),
 *   "reason": a dotted path to a text kept as a rejected or unknown
 *             message's last_error,
 *   "unregistered": the reasons of a rejected message that say its device
 *                   token is dead (Expo's DeviceNotRegistered; needs
 *                   "reason" and "rejected"): notif_unregistered lists it,
 *   "token_field": a dotted path in the message as sent to that token
 *                  (default "to"; only with "unregistered").
 * A dotted path: one or more keys, none empty.
 */
CREATE FUNCTION notif_batch_results_valid(spec jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN coalesce(jsonb_typeof(spec) = 'object'
   AND NOT EXISTS (SELECT FROM jsonb_object_keys(spec) k
                    WHERE k NOT IN ('path', 'match', 'key_field', 'field', 'accepted',
                                    'rejected', 'reason', 'unregistered', 'token_field'))
   AND jsonb_typeof(spec -> 'field') = 'string'
   AND (spec ->> 'field') ~ '^[^.]+(\.[^.]+)*$'
   AND coalesce((spec ->> 'path') ~ '^[^.]+(\.[^.]+)*$', NOT spec ? 'path')
   AND coalesce((spec ->> 'reason') ~ '^[^.]+(\.[^.]+)*$', NOT spec ? 'reason')
   AND coalesce(jsonb_typeof(spec -> 'path') = 'string', true)
   AND coalesce(jsonb_typeof(spec -> 'reason') = 'string', true)
   AND jsonb_typeof(spec -> 'accepted') = 'array'
   AND jsonb_array_length(spec -> 'accepted') > 0
   AND NOT (spec -> 'accepted') @? '$[*] ? (@.type() != "string")'
   AND coalesce(jsonb_typeof(spec -> 'rejected') = 'array', NOT spec ? 'rejected')
   AND NOT coalesce((spec -> 'rejected') @? '$[*] ? (@.type() != "string")', false)
   -- unregistered: reasons of a rejected message that name a dead device
   -- token (at token_field of the message): needs rejected and reason
   AND CASE WHEN spec ? 'unregistered'
            THEN jsonb_typeof(spec -> 'unregistered') = 'array'
                 AND jsonb_array_length(spec -> 'unregistered') > 0
                 AND NOT (spec -> 'unregistered') @? '$[*] ? (@.type() != "string")'
                 AND spec ? 'reason' AND spec ? 'rejected'
            ELSE true END
   AND CASE WHEN spec ? 'token_field'
            THEN jsonb_typeof(spec -> 'token_field') = 'string'
                 AND (spec ->> 'token_field') ~ '^[^.]+(\.[^.]+)*$'
                 AND spec ? 'unregistered'
            ELSE true END
   AND coalesce(spec ->> 'match', 'order') IN ('order', 'key')
   AND ((coalesce(spec ->> 'match', 'order') = 'key')
        = ((jsonb_typeof(spec -> 'key_field') = 'string'
            AND (spec ->> 'key_field') ~ '^[^.]+(\.[^.]+)*$') IS TRUE)), false);

COMMENT ON FUNCTION notif_batch_results_valid(jsonb) IS 'whether a notif_provider.batch_results spec is well formed (its CHECK)';

-- a batch's result can say a device token is dead (batch_results.unregistered)
COMMENT ON VIEW notif_unregistered IS 'device tokens FCM or APNs reported dead, or a batching provider (batch_results.unregistered): delete them in the app, then here';

ALTER TABLE notif_provider
    ADD COLUMN batch_max int
        CONSTRAINT notif_provider_batch_max_check CHECK (batch_max BETWEEN 1 AND 1000),
    ADD COLUMN batch_format jsonb
        CONSTRAINT notif_provider_batch_format_check
        CHECK (jsonb_typeof(batch_format) = 'object'
               AND batch_format - 'field' = '{}'::jsonb
               AND jsonb_typeof(batch_format -> 'field') = 'string'
               AND octet_length(batch_format ->> 'field') BETWEEN 1 AND 64),
    ADD COLUMN batch_results jsonb
        CONSTRAINT notif_provider_batch_results_check
        CHECK (notif_batch_results_valid(batch_results)),
    ADD COLUMN batch_wait interval NOT NULL DEFAULT '0'
        CONSTRAINT notif_provider_batch_wait_check
        CHECK (batch_wait >= interval '0' AND batch_wait <= interval '1 minute'),
    -- only json bodies are batched; a batch's results must be readable
    ADD CONSTRAINT notif_provider_batch_json_check
        CHECK (coalesce(batch_max, 1) = 1 OR (format = 'json' AND batch_results IS NOT NULL));

COMMENT ON COLUMN notif_provider.batch_max IS 'json: the most messages one call carries (its body an array of the payloads, its answer a result per message: batch_results); NULL or 1: one message per call';
COMMENT ON COLUMN notif_provider.batch_format IS 'a batch''s body: {"field": "messages"} puts the payloads'' array in that member of an object; NULL: the body is the array';
COMMENT ON COLUMN notif_provider.batch_results IS 'where a batch''s answer has its per-message results and what they say: {"path", "match": "order"|"key", "key_field", "field", "accepted": [...], "rejected": [...], "reason", "unregistered": [...], "token_field"}';
COMMENT ON COLUMN notif_provider.batch_wait IS 'how long a due job may wait for others to fill a batch (0: only what is due now)';

-- the call a job's message shared with others (NULL: a call of its own)
CREATE SEQUENCE notif_batch_id_seq;
ALTER TABLE notif_job ADD COLUMN batch_id bigint;
ALTER TABLE notif_attempt ADD COLUMN batch_id bigint;

COMMENT ON COLUMN notif_job.batch_id IS 'the batch its last call went in (the same for every message of that call); NULL: a call of its own';
COMMENT ON COLUMN notif_attempt.batch_id IS 'the batch the call''s message went in; NULL: a call of its own';

-- each call with the provider that took it and the batch it went in
CREATE OR REPLACE VIEW notif_calls AS
SELECT a.job_id, a.try, a.started_at, a.ended_at, a.outcome, a.http_status, a.error, a.provider,
       a.batch_id
  FROM notif_attempt a
UNION ALL
-- a first call that was accepted: its job row, not notif_attempt, holds it
SELECT j.id, 1, j.last_started_at, j.last_ended_at, j.outcome, j.http_status, NULL::text, j.provider,
       j.batch_id
  FROM notif_job j
 WHERE j.earlier_tries + j.tries = 1 AND j.outcome = 'accepted'
   AND j.last_started_at IS NOT NULL AND j.claimed_by IS NULL;

/* ---------------------------------------------------------------------
 * Webhook signing (issue 46), and the trace context of a job
 *
 * signing 'standard_webhooks': every call of the provider carries the
 * Standard Webhooks headers webhook-id (the job's key), webhook-timestamp
 * (the attempt's, in seconds) and webhook-signature ("v1,<base64
 * HMAC-SHA256>" of "id.timestamp.body" under each secret of
 * credentials.secrets, space-separated), signed by provider/webhook_sign.c.
 * The secrets are checked when the row is written (notif_credentials_check,
 * now told the signing too: 23514 naming which secret and what is wrong,
 * never its value).
 *
 * traceparent: a W3C trace context given to notif_enqueue, kept on the
 * job and sent as the traceparent header on each of its calls.  The two
 * notif_enqueue functions are replaced by ones with a sixth argument,
 * traceparent text DEFAULT NULL (positional calls of five arguments or
 * fewer mean what they meant); the EXECUTE granted on the old ones is
 * granted again on the new.  Docs: doc/reference.md, "Webhook signing"
 * and notif_job.traceparent.
 * --------------------------------------------------------------------- */

ALTER TABLE notif_provider
    ADD COLUMN signing text
        CONSTRAINT notif_provider_signing_check CHECK (signing = 'standard_webhooks'),
    -- a push platform's request is its own; a webhook is json, form or query
    ADD CONSTRAINT notif_provider_signing_format_check
        CHECK (signing IS NULL OR (format IN ('json', 'form', 'query') AND auth IS NULL));

COMMENT ON COLUMN notif_provider.signing IS 'standard_webhooks: every call carries webhook-id, webhook-timestamp and webhook-signature, signed with each of credentials.secrets; NULL: unsigned';
COMMENT ON COLUMN notif_provider.credentials IS 'auth: the service-account JSON file, or {key_id, team_id, private_key} of an APNs .p8 key; signing: {"secrets": ["whsec_...", ...]}';

-- the credentials CHECK, told the signing as well as the auth method (a
-- call with two arguments, checking a credentials file, works as before)
ALTER TABLE notif_provider DROP CONSTRAINT notif_provider_credentials_check;
DROP FUNCTION notif_credentials_check(text, jsonb);

CREATE FUNCTION notif_credentials_check(auth text, credentials jsonb, signing text DEFAULT NULL)
RETURNS boolean
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'notif_credentials_check';

COMMENT ON FUNCTION notif_credentials_check(text, jsonb, text) IS 'CHECK of notif_provider: credentials suit their auth method, or hold the signing secrets';

ALTER TABLE notif_provider
    ADD CONSTRAINT notif_provider_credentials_check
    CHECK (notif_credentials_check(auth, credentials, signing));

/*
 * A job's W3C trace context (version 00), as notif_enqueue checks it; a
 * row written another way is held to it too: it travels in an HTTP header.
 */
ALTER TABLE notif_job
    ADD COLUMN traceparent text,
    ADD CONSTRAINT notif_job_traceparent_check
    CHECK (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
           AND substr(traceparent, 4, 32) <> '00000000000000000000000000000000'
           AND substr(traceparent, 37, 16) <> '0000000000000000') NOT VALID;

COMMENT ON COLUMN notif_job.traceparent IS 'the W3C traceparent given at enqueue, sent as the traceparent header on each call; NULL: none';

/*
 * The new notif_enqueue functions are made beside the old ones, given the
 * EXECUTE grants of the old (aclexplode: each grantee, PUBLIC too), then
 * the old are dropped.  PostgreSQL records what an extension's script
 * grants as the extension's initial privileges (pg_init_privs), which
 * pg_dump leaves out; so the new functions' initial privileges are set
 * back to what a fresh 1.4 records (the owner's alone, as after the
 * REVOKE): the copied grants stay the user's, and a dump carries them.
 */
CREATE FUNCTION notif_enqueue(user_id bigint, kind text, order_id text,
                              payload jsonb DEFAULT '{}',
                              not_before timestamptz DEFAULT NULL,
                              traceparent text DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE SECURITY DEFINER
AS 'MODULE_PATHNAME', 'notif_enqueue';

CREATE FUNCTION notif_enqueue(user_id bigint, kind text, order_id bigint,
                              payload jsonb DEFAULT '{}',
                              not_before timestamptz DEFAULT NULL,
                              traceparent text DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE SECURITY DEFINER
AS 'MODULE_PATHNAME', 'notif_enqueue_bigint';

COMMENT ON FUNCTION notif_enqueue(bigint, text, text, jsonb, timestamptz, text) IS 'enqueue a notification; a repeated (user_id, kind, order_id) returns the existing job id';
COMMENT ON FUNCTION notif_enqueue(bigint, text, bigint, jsonb, timestamptz, text) IS 'enqueue a notification; a repeated (user_id, kind, order_id) returns the existing job id';

REVOKE ALL ON FUNCTION notif_enqueue(bigint, text, text, jsonb, timestamptz, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION notif_enqueue(bigint, text, bigint, jsonb, timestamptz, text) FROM PUBLIC;

DO $$
DECLARE
    g record;
    fresh_acl aclitem[];
BEGIN
    SELECT p.proacl INTO STRICT fresh_acl
      FROM pg_catalog.pg_proc p
     WHERE p.proname = 'notif_enqueue' AND p.pronargs = 6
       AND p.pronamespace = '@extschema@'::regnamespace
       AND p.proargtypes[2] = 'pg_catalog.text'::pg_catalog.regtype;
    FOR g IN SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END AS grantee,
                    a.is_grantable, format_type(p.proargtypes[2], NULL) AS order_id_type
               FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
              WHERE p.proname = 'notif_enqueue' AND p.pronargs = 5
                AND p.pronamespace = '@extschema@'::regnamespace
                AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
              ORDER BY 3, 1
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION @extschema@.notif_enqueue(bigint, text, %s, jsonb, timestamptz, text) TO %s%s',
                       g.order_id_type, g.grantee,
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
    UPDATE pg_catalog.pg_init_privs i
       SET initprivs = fresh_acl
      FROM pg_catalog.pg_proc p
     WHERE i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND i.objoid = p.oid
       AND i.objsubid = 0 AND p.proname = 'notif_enqueue' AND p.pronargs = 6
       AND p.pronamespace = '@extschema@'::regnamespace;
END;
$$;

DROP FUNCTION notif_enqueue(bigint, text, text, jsonb, timestamptz);
DROP FUNCTION notif_enqueue(bigint, text, bigint, jsonb, timestamptz);
