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

CREATE OR REPLACE VIEW notif_calls AS
SELECT a.job_id, a.try, a.started_at, a.ended_at, a.outcome, a.http_status, a.error, a.provider
  FROM notif_attempt a
UNION ALL
-- a first call that was accepted: its job row, not notif_attempt, holds it
SELECT j.id, 1, j.last_started_at, j.last_ended_at, j.outcome, j.http_status, NULL::text, j.provider
  FROM notif_job j
 WHERE j.earlier_tries + j.tries = 1 AND j.outcome = 'accepted'
   AND j.last_started_at IS NOT NULL AND j.claimed_by IS NULL;

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
 * three-argument notif_dlr is that with no provider named.
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
 * the old are dropped.
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
BEGIN
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
END;
$$;

DROP FUNCTION notif_enqueue(bigint, text, text, jsonb, timestamptz);
DROP FUNCTION notif_enqueue(bigint, text, bigint, jsonb, timestamptz);
