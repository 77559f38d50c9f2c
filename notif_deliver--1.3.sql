/*
 * notif_deliver--1.3.sql
 *      Install script of notif_deliver 1.3, the whole schema in one file:
 *      what CREATE EXTENSION notif_deliver runs.  The per-version scripts
 *      (notif_deliver--1.0.sql, then --1.0--1.1.sql, --1.1--1.2.sql and
 *      --1.2--1.3.sql) stay for ALTER EXTENSION ... UPDATE, and for
 *      CREATE EXTENSION notif_deliver VERSION '1.0' (or '1.1', '1.2').
 *
 * 1.3 is released: this file no longer changes.  make builds the 1.4
 * install script from it and notif_deliver--1.3--1.4.sql, where every
 * change to 1.4 goes.  The regression test sql/upgrade.sql proves
 * that they agree: it compares what this script makes with what 1.0 and
 * the updates to 1.3 make (sql/schema_fingerprint.sql: columns in order,
 * constraints, indexes, triggers, functions with their bodies, views,
 * comments, grants, what pg_dump keeps).  A function here has the body it
 * has after the updates, to the character, so that a PL/pgSQL error's
 * line number is the same on both.
 *
 * Everything is created in the schema given to CREATE EXTENSION.  The names
 * and the column order of the tables are a contract that other tools and
 * the tests rely on: add columns at the end, never reorder.  The columns
 * below are in the order the updates leave them (each added by an update
 * is marked with its version).
 *
 * Sections: 1. providers; 2. notification types; 3. jobs (the outbox);
 * 4. calls and delivery reports; 5. the work (notif_active); 6. enqueue,
 * retry, cancel: the job lifecycle; 7. lanes; 8. configuration changes;
 * 9. statistics and monitoring; 10. push providers; 11. shards;
 * 12. backups: what pg_dump keeps.
 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION notif_deliver" to load this file. \quit


/* ---------------------------------------------------------------------
 * 1. Providers
 * --------------------------------------------------------------------- */

-- refuses malformed credentials when the row is written (a clear error, never the secret)
CREATE FUNCTION notif_credentials_check(auth text, credentials jsonb)
RETURNS boolean
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'notif_credentials_check';

COMMENT ON FUNCTION notif_credentials_check(text, jsonb) IS 'CHECK of notif_provider: credentials suit their auth method';

/*
 * notif_provider: where the messages of a type go, and how they travel.
 * It may hold credentials (headers, credentials): only its owner can read it.
 */
CREATE TABLE notif_provider (
    -- at most 63 bytes: a provider's name is kept in shared memory in 64
    name text PRIMARY KEY
        CONSTRAINT notif_provider_name_check
        CHECK (name ~ '^[^[:cntrl:]]{1,63}$' AND octet_length(name) <= 63),
    url text
        CONSTRAINT notif_provider_url_check CHECK (url ~* '^https?://[^[:space:]]+$'),
    -- 'fcm': FCM HTTP v1, the payload is FCM's message object, sent as
    -- {"message": payload}; 'apns': POST /3/device/<token>, the payload's
    -- "headers" as request headers
    format text NOT NULL DEFAULT 'json'
        CONSTRAINT notif_provider_format_check
        CHECK (format IN ('json', 'form', 'query', 'fcm', 'apns')),
    headers jsonb NOT NULL DEFAULT '{}'
        CONSTRAINT notif_provider_headers_check CHECK (
            jsonb_typeof(headers) = 'object'
            -- every value a string, every name an HTTP token, no line breaks
            AND NOT jsonb_path_exists(headers, '$.* ? (@.type() != "string")')
            AND NOT jsonb_path_exists(headers,
                    '$.keyvalue() ? (!(@.key like_regex "^[-!#$%&''*+.^_`|~0-9A-Za-z]+$") || @.value like_regex "[\\r\\n]")')),
    idempotency_header text
        CONSTRAINT notif_provider_idempotency_header_check
        CHECK (idempotency_header ~ '^[-!#$%&''*+.^_`|~0-9A-Za-z]+$'),
    timeout interval NOT NULL DEFAULT '2 seconds'
        CONSTRAINT notif_provider_timeout_check CHECK (timeout > '0'),
    connect_timeout interval NOT NULL DEFAULT '1 second'
        CONSTRAINT notif_provider_connect_timeout_check CHECK (connect_timeout > '0'),
    max_inflight int NOT NULL DEFAULT 64
        CONSTRAINT notif_provider_max_inflight_check CHECK (max_inflight > 0),
    rate_limit numeric
        CONSTRAINT notif_provider_rate_limit_check CHECK (rate_limit > 0),
    -- (1.1) when set, the sender adds this top-level field, holding the
    -- job's key kind:user_id:order_id, to every request (a JSON field, a
    -- form field or a query parameter), so that the provider can echo it
    -- back in its delivery reports.  Every attempt still sends the same bytes.
    ref_field text
        CONSTRAINT notif_provider_ref_field_check CHECK (ref_field ~ '^[^[:cntrl:]]{1,63}$'),
    -- (1.2) push: the sender signs the tokens itself; auth names the
    -- method, credentials holds the key
    auth text
        CONSTRAINT notif_provider_auth_check
        CHECK (auth IN ('google_service_account', 'apns_token')),
    credentials jsonb,
    -- (1.2) HTTP/2: calls of a lane to this provider share at most this many connections
    max_connections int NOT NULL DEFAULT 4
        CONSTRAINT notif_provider_max_connections_check CHECK (max_connections > 0),
    -- (1.2) the CA certificate(s), PEM, that this provider's TLS certificate must chain to
    -- (NULL: the system's trust store)
    ca_cert text
        CONSTRAINT notif_provider_ca_cert_check
        CHECK (ca_cert LIKE '%-----BEGIN CERTIFICATE-----%-----END CERTIFICATE-----%'),
    -- (1.3) how long the provider drops a repeat of a key it received,
    -- counted from its first copy (NULL: it promises nothing); it needs the
    -- header that carries the key
    dedup_window interval,
    -- (1.3) the status lookup asked before an at_least_once retry after an
    -- ambiguous call (see below)
    lookup_url text
        CONSTRAINT notif_provider_lookup_url_check
        CHECK (lookup_url ~* '^https?://[^[:space:]]+$' AND strpos(lookup_url, '{key}') > 0),
    lookup_method text NOT NULL DEFAULT 'GET'
        CONSTRAINT notif_provider_lookup_method_check CHECK (lookup_method IN ('GET', 'HEAD')),
    lookup_headers jsonb
        CONSTRAINT notif_provider_lookup_headers_check CHECK (
            jsonb_typeof(lookup_headers) = 'object'
            AND NOT jsonb_path_exists(lookup_headers, '$.* ? (@.type() != "string")')
            AND NOT jsonb_path_exists(lookup_headers,
                    '$.keyvalue() ? (!(@.key like_regex "^[-!#$%&''*+.^_`|~0-9A-Za-z]+$") || @.value like_regex "[\\r\\n]")')),
    lookup_found int[] NOT NULL DEFAULT '{200}',
    lookup_not_found int[] NOT NULL DEFAULT '{404}',
    lookup_field text
        CONSTRAINT notif_provider_lookup_field_check CHECK (lookup_field ~ '^[^[:cntrl:].]+(\.[^[:cntrl:].]+)*$' AND octet_length(lookup_field) <= 255),
    lookup_found_values text[],
    lookup_not_found_values text[],
    CONSTRAINT notif_provider_credentials_check
        CHECK (notif_credentials_check(auth, credentials)),
    CONSTRAINT notif_provider_dedup_window_check
        CHECK (dedup_window IS NULL OR (dedup_window > interval '0' AND dedup_window <= interval '100 years'
                                         AND isfinite(dedup_window) AND idempotency_header IS NOT NULL)),
    CONSTRAINT notif_provider_lookup_status_check
        CHECK (cardinality(lookup_found) > 0 AND NOT (lookup_found && lookup_not_found)
               AND array_position(lookup_found || lookup_not_found, NULL) IS NULL
               -- found is an answer, never an error a gateway may give
               AND 200 <= ALL (lookup_found) AND 399 >= ALL (lookup_found)
               AND 100 <= ALL (lookup_not_found) AND 599 >= ALL (lookup_not_found)),
    CONSTRAINT notif_provider_lookup_field_values_check
        CHECK ((lookup_field IS NULL) = (lookup_found_values IS NULL)
               AND (lookup_not_found_values IS NULL OR lookup_field IS NOT NULL)
               AND array_position(lookup_found_values || lookup_not_found_values, NULL) IS NULL
               -- a HEAD answer has no body to read a field in
               AND NOT (lookup_method = 'HEAD' AND lookup_field IS NOT NULL)),
    -- the provider's headers (its credentials) go only where its calls go:
    -- a lookup elsewhere names its own
    CONSTRAINT notif_provider_lookup_origin_check
        CHECK (lookup_url IS NULL OR lookup_headers IS NOT NULL
               OR lower(substring(lookup_url FROM '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*'))
                  IS NOT DISTINCT FROM lower(substring(url FROM '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*')))
);

COMMENT ON TABLE notif_provider IS 'HTTP endpoints that notifications are delivered to';
COMMENT ON COLUMN notif_provider.ref_field IS 'top-level request field that carries the job''s key, for delivery reports';
COMMENT ON COLUMN notif_provider.auth IS 'token the sender signs: google_service_account (FCM) or apns_token (APNs)';
COMMENT ON COLUMN notif_provider.credentials IS 'the service-account JSON file, or {key_id, team_id, private_key} of an APNs .p8 key';
COMMENT ON COLUMN notif_provider.max_connections IS 'HTTP/2 connections per lane to this provider (shared out between its senders, at least one each); calls are multiplexed over them';
COMMENT ON COLUMN notif_provider.ca_cert IS 'PEM CA certificate(s) to verify the provider with, instead of the system store';
COMMENT ON COLUMN notif_provider.dedup_window IS 'how long the provider drops a repeat of a key: ambiguous calls are retried inside it';
COMMENT ON COLUMN notif_provider.lookup_url IS 'status lookup asked before an at_least_once retry after an ambiguous call; {key} is the job''s key, percent-encoded';
COMMENT ON COLUMN notif_provider.lookup_method IS 'the status lookup''s method: GET or HEAD';
COMMENT ON COLUMN notif_provider.lookup_headers IS 'the status lookup''s headers (NULL: the provider''s headers)';
COMMENT ON COLUMN notif_provider.lookup_found IS 'HTTP statuses of a lookup answer that mean the provider has the message';
COMMENT ON COLUMN notif_provider.lookup_not_found IS 'HTTP statuses of a lookup answer that mean it has not';
COMMENT ON COLUMN notif_provider.lookup_field IS 'field of the JSON lookup answer (a dotted path) whose value says found or not found';
COMMENT ON COLUMN notif_provider.lookup_found_values IS 'values of lookup_field that mean found';
COMMENT ON COLUMN notif_provider.lookup_not_found_values IS 'values of lookup_field that mean not found';

INSERT INTO notif_provider (name) VALUES ('default');

/*
 * A row of notif_provider that breaks a NOT NULL or CHECK constraint is
 * refused by this trigger, before PostgreSQL's own checks, with the same
 * SQLSTATE, message and constraint name, but without PostgreSQL's
 * "DETAIL: Failing row contains (...)", which would show the row's
 * headers and credentials to the client and the server log.  It evaluates
 * the table's constraints as they are (pg_constraint), so one added later
 * is covered too; the constraints stay, the last word.
 */
CREATE FUNCTION notif_provider_check_row()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    broken boolean;
BEGIN
    FOR c IN SELECT a.attname FROM pg_attribute a
              WHERE a.attrelid = TG_RELID AND a.attnum > 0 AND a.attnotnull AND NOT a.attisdropped
              ORDER BY a.attnum
    LOOP
        EXECUTE format('SELECT ($1).%I IS NULL', c.attname) INTO broken USING NEW;
        IF broken THEN
            RAISE EXCEPTION USING ERRCODE = 'not_null_violation',
                MESSAGE = format('null value in column "%s" of relation "%s" violates not-null constraint',
                                 c.attname, TG_TABLE_NAME),
                DETAIL = 'The row is not shown: it may hold credentials.',
                SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, COLUMN = c.attname;
        END IF;
    END LOOP;
    FOR c IN SELECT con.conname, pg_get_expr(con.conbin, con.conrelid) AS expr FROM pg_constraint con
              WHERE con.conrelid = TG_RELID AND con.contype = 'c'
              ORDER BY con.conname
    LOOP
        EXECUTE format('SELECT (%s) IS FALSE FROM (SELECT ($1).*) AS %I', c.expr, TG_TABLE_NAME)
           INTO broken USING NEW;
        IF broken THEN
            RAISE EXCEPTION USING ERRCODE = 'check_violation',
                MESSAGE = format('new row for relation "%s" violates check constraint "%s"',
                                 TG_TABLE_NAME, c.conname),
                DETAIL = 'The row is not shown: it may hold credentials.',
                SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME, CONSTRAINT = c.conname;
        END IF;
    END LOOP;
    RETURN NEW;
END;
$$;

REVOKE ALL ON FUNCTION notif_provider_check_row() FROM PUBLIC;

CREATE TRIGGER notif_provider_check_row
    BEFORE INSERT OR UPDATE ON notif_provider
    FOR EACH ROW EXECUTE FUNCTION notif_provider_check_row();

-- Credentials travel over TLS only
/*
 * notif_url_protected(url): whether a call to url is out of an
 * eavesdropper's reach: https://, or plain http:// to a loopback address
 * (127.0.0.0/8, [::1], localhost: tests, and a gateway on the same machine).
 */
CREATE FUNCTION notif_url_protected(url text)
RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT url ~* '^https://'
        OR lower(substring(url FROM '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^/?#@]*@)?(\[[^]/?#]*\]|[^/?#:]*)'))
           ~ '^(localhost|127(\.[0-9]{1,3}){3}|\[::1\])$'
$$;

COMMENT ON FUNCTION notif_url_protected(text) IS 'whether a URL is https:// or goes to a loopback address';

/*
 * notif_transport_check(url, headers, auth, credentials): the CHECK of
 * notif_provider that keeps credentials off plain HTTP.  A provider whose
 * calls carry one (a token the sender signs, auth; a user and password in
 * its url; a header named Proxy-Authorization or ending as a secret's name
 * does, as src/core/excerpt.c reads one: Authorization, X-Api-Key, Cookie,
 * X-Auth-Token...; a query parameter of its url so named, as Kannel's
 * password) must have a protected url (notif_url_protected),
 * and a Google service account's token_uri too (the signed JWT and the
 * access token it buys cross it).  Refused with 23514 and a message that
 * names what would travel in clear, never its value.
 */
CREATE FUNCTION notif_transport_check(url text, headers jsonb, auth text, credentials jsonb)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    carried text;
    -- the names src/core/excerpt.c masks the values of
    secret_name constant text := '(key|token|secret|password|passwd|pwd|pass|auth|authorization|authentication'
                                 '|signature|sig|credentials?|cookie|session|sessionid|session_id)$';
BEGIN
    IF auth IS NOT NULL THEN
        carried := format('a token it signs (auth %s)', auth);
    ELSIF url ~ '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#@]*@' THEN
        carried := 'the user and password in its url (HTTP Basic)';
    END IF;
    IF carried IS NULL AND jsonb_typeof(headers) = 'object' THEN
        SELECT format('its header %s', k) INTO carried
          FROM jsonb_object_keys(headers) k
         WHERE lower(k) ~ secret_name OR lower(k) = 'proxy-authorization'
         ORDER BY k LIMIT 1;
    END IF;
    IF carried IS NULL THEN
        SELECT format('its url''s query parameter %s', m[1]) INTO carried
          FROM regexp_matches(url, '[?&]([^=&#]+)=', 'g') m
         WHERE lower(m[1]) ~ secret_name
         LIMIT 1;
    END IF;
    -- (a url that is not http(s) at all is notif_provider_url_check's to refuse)
    IF carried IS NOT NULL AND url ~* '^http://' AND NOT @extschema@.notif_url_protected(url) THEN
        RAISE EXCEPTION 'notif_provider: a provider whose calls carry a credential needs an https:// url'
            USING ERRCODE = 'check_violation',
                  DETAIL = format('Each call carries %s, and its url is plain http:// to a host that is not a loopback address.', carried),
                  HINT = 'Use https://. Plain http:// is allowed to 127.0.0.1, [::1] or localhost only (a gateway on the same machine).',
                  CONSTRAINT = 'notif_provider_transport_check';
    END IF;
    IF auth = 'google_service_account' AND jsonb_typeof(credentials) = 'object'
       AND jsonb_typeof(credentials -> 'token_uri') = 'string'
       AND NOT @extschema@.notif_url_protected(credentials ->> 'token_uri') THEN
        RAISE EXCEPTION 'notif_provider: the service account''s token_uri must be https://'
            USING ERRCODE = 'check_violation',
                  DETAIL = 'The sender posts a signed JWT there and gets an access token back: both would cross the network in clear.',
                  HINT = 'Use the token_uri of the key file Google issued (https://oauth2.googleapis.com/token). Plain http:// is allowed to a loopback address only.',
                  CONSTRAINT = 'notif_provider_transport_check';
    END IF;
    RETURN true;
END;
$$;

COMMENT ON FUNCTION notif_transport_check(text, jsonb, text, jsonb) IS 'CHECK of notif_provider: credentials never travel over plain http (but to a loopback address)';

/*
 * The CHECK is NOT VALID as the 1.2 -> 1.3 update adds it (there, rows
 * written before 1.3 are not checked: the update names each in a WARNING),
 * so that a fresh install and an updated one have the same constraint.
 * Every row written from now on is checked.
 */
ALTER TABLE notif_provider
    ADD CONSTRAINT notif_provider_transport_check
    CHECK (notif_transport_check(url, headers, auth, credentials)) NOT VALID;

/*
 * (1.3) Asking the provider before retrying: a provider that answers
 * "do you have message K?" lets an at_least_once retry after an ambiguous
 * call be asked first.  lookup_url is the lookup's URL, its "{key}" the
 * job's key kind:user_id:order_id, percent-encoded; lookup_method GET or
 * HEAD; lookup_headers its headers (NULL: the provider's headers, which
 * carry its credentials).  The answer is read by its status:
 * lookup_found or lookup_not_found; with lookup_field (a field of the
 * JSON answer, a dotted path for a nested one), a found status also needs
 * the field's value in lookup_found_values, and a value in
 * lookup_not_found_values means not found.  Anything else (a timeout, a
 * 5xx, an answer that does not read) is no answer: the retry goes ahead.
 * Docs: doc/reference.md, notif_provider.lookup_url.
 */
-- the lookup's credentials (its headers, else the provider's) never travel in clear
ALTER TABLE notif_provider
    ADD CONSTRAINT notif_provider_lookup_transport_check
    CHECK (lookup_url IS NULL OR notif_transport_check(lookup_url, coalesce(lookup_headers, headers), NULL, NULL));


/* ---------------------------------------------------------------------
 * 2. Notification types
 * --------------------------------------------------------------------- */

/*
 * notif_type: one row per kind of notification, with its guarantee.
 * The first four columns are positional on purpose:
 *   INSERT INTO notif_type VALUES ('otp', 'at_least_once', 3, '15 seconds');
 */
CREATE TABLE notif_type (
    code text PRIMARY KEY
        -- the code is part of the idempotency key kind:user_id:order_id
        CONSTRAINT notif_type_code_check CHECK (code ~ '^[^:[:space:][:cntrl:]]+$'),
    delivery text NOT NULL
        CONSTRAINT notif_type_delivery_check CHECK (delivery IN ('at_most_once', 'at_least_once')),
    max_tries int NOT NULL
        CONSTRAINT notif_type_max_tries_check CHECK (max_tries >= 1),
    deadline interval
        CONSTRAINT notif_type_deadline_check CHECK (deadline > '0'),
    provider text NOT NULL DEFAULT 'default'
        REFERENCES notif_provider ON UPDATE CASCADE,
    -- at most 63 bytes: a lane's name is kept in shared memory in 64
    lane text NOT NULL DEFAULT 'default'
        CONSTRAINT notif_type_lane_check
        CHECK (lane ~ '^[^[:space:][:cntrl:]]{1,63}$' AND octet_length(lane) <= 63),
    priority int NOT NULL DEFAULT 0,
    backoff_min interval NOT NULL DEFAULT '1 second'
        CONSTRAINT notif_type_backoff_min_check CHECK (backoff_min >= '0'),
    backoff_max interval NOT NULL DEFAULT '5 minutes',
    retention interval NOT NULL DEFAULT '7 days'
        CONSTRAINT notif_type_retention_check CHECK (retention > '0'),
    cost_lost numeric
        CONSTRAINT notif_type_cost_lost_check CHECK (cost_lost >= 0),
    cost_dup numeric
        CONSTRAINT notif_type_cost_dup_check CHECK (cost_dup >= 0),
    paused boolean NOT NULL DEFAULT false,
    -- (1.3) how long the retry of an ambiguous at_least_once call waits for
    -- a delivery report of the job (0: it does not wait)
    resolve_wait interval NOT NULL DEFAULT interval '0'
        CONSTRAINT notif_type_resolve_wait_check
            CHECK (resolve_wait >= interval '0' AND resolve_wait <= interval '100 years' AND isfinite(resolve_wait)),
    CONSTRAINT notif_type_backoff_check CHECK (backoff_max >= backoff_min)
);

COMMENT ON TABLE notif_type IS 'kinds of notification, each with its delivery guarantee, deadline, lane and provider';
COMMENT ON COLUMN notif_type.resolve_wait IS 'how long the retry of an ambiguous call waits for a delivery report';


/* ---------------------------------------------------------------------
 * 3. Jobs (the outbox)
 * --------------------------------------------------------------------- */

/*
 * notif_job: the outbox, one row per business message.
 * (user_id, kind, order_id) is the business key: enqueueing it twice is a no-op.
 *
 * Its indexes are on columns a status change never writes, so that the
 * sender's updates are heap-only (HOT) and write no index entry, given
 * room on the page (fillfactor 40: room for a job's new versions even when
 * a backlog is claimed page by page, a page's jobs in one round, before
 * the versions they leave can be pruned).  The work (queued and held jobs)
 * is in notif_active (section 5).
 */
CREATE TABLE notif_job (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id bigint NOT NULL,
    kind text NOT NULL REFERENCES notif_type ON UPDATE CASCADE,
    order_id text NOT NULL,
    payload jsonb NOT NULL
        CONSTRAINT notif_job_payload_check CHECK (jsonb_typeof(payload) = 'object'),
    status text NOT NULL DEFAULT 'queued'
        CONSTRAINT notif_job_status_check
        CHECK (status IN ('queued', 'sending', 'sent', 'failed', 'expired')),
    tries int NOT NULL DEFAULT 0
        CONSTRAINT notif_job_tries_check CHECK (tries >= 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    next_at timestamptz NOT NULL,
    deadline_at timestamptz,
    sent_at timestamptz,
    outcome text
        CONSTRAINT notif_job_outcome_check
        CHECK (outcome IN ('accepted', 'rejected', 'unreached', 'unknown')),
    http_status int,
    last_error text,
    -- set while a sender holds the job (status 'sending', or 'sent' by an
    -- at_most_once claim whose call has not ended): the sender's incarnation.
    -- A job whose holder is no longer alive is recovered by the next sender.
    claimed_by bigint,
    claimed_at timestamptz,             -- when that sender claimed it
    -- (1.1) the tries a job made before it was last re-driven by
    -- notif_retry, which gives it fresh tries.  notif_attempt numbers a
    -- job's calls across re-drives: attempt try = earlier_tries + tries.
    earlier_tries int NOT NULL DEFAULT 0
        CONSTRAINT notif_job_earlier_tries_check CHECK (earlier_tries >= 0),
    -- (1.2) when the job's last call started and ended: a first call that
    -- was accepted has no notif_attempt row, its job row describes it
    last_started_at timestamptz,
    last_ended_at timestamptz,
    -- (1.3) how the job's last ambiguous call was resolved ('dedup_window':
    -- retried inside its provider's window; 'report': a delivery report
    -- came before the retry); NULL: it was not
    resolved_by text
        CONSTRAINT notif_job_resolved_by_check CHECK (resolved_by IN ('dedup_window', 'report', 'lookup_found', 'lookup_not_found')),
    CONSTRAINT notif_job_key UNIQUE (user_id, kind, order_id)
) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02,
        fillfactor = 40);

COMMENT ON TABLE notif_job IS 'notifications to deliver (the outbox), one row per business message';
COMMENT ON COLUMN notif_job.earlier_tries IS 'tries made before the last notif_retry; attempts are numbered after them';
COMMENT ON COLUMN notif_job.last_started_at IS 'when the job''s last call started (NULL: no call recorded since 1.2)';
COMMENT ON COLUMN notif_job.last_ended_at IS 'when the job''s last call ended';
COMMENT ON COLUMN notif_job.resolved_by IS 'how the last ambiguous call was resolved: dedup_window, report, lookup_found or lookup_not_found; NULL: not resolved';

-- notif_stats reads a window of recent jobs: a BRIN index costs next to
-- nothing to keep (jobs arrive in time order) and spares a full scan
CREATE INDEX notif_job_created_brin ON notif_job USING brin (created_at);
-- What the retention purge walks, per type (it skips the few unfinished).
CREATE INDEX notif_job_kind_next_idx ON notif_job (kind, next_at);

/*
 * notif_key: the idempotency key every attempt of a job carries.
 */
CREATE FUNCTION notif_key(kind text, user_id bigint, order_id text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN kind || ':' || user_id::text || ':' || order_id;

COMMENT ON FUNCTION notif_key(text, bigint, text) IS 'idempotency key of a job: kind:user_id:order_id';


/* ---------------------------------------------------------------------
 * 4. Calls and delivery reports
 * --------------------------------------------------------------------- */

/*
 * notif_attempt: one row per provider call, but the first call of a job
 * when it was accepted (its job row holds it: see notif_calls).
 */
CREATE TABLE notif_attempt (
    job_id bigint NOT NULL,
    try int NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at timestamptz,
    outcome text
        CONSTRAINT notif_attempt_outcome_check
        CHECK (outcome IN ('accepted', 'rejected', 'unreached', 'unknown')),
    http_status int,
    error text,
    PRIMARY KEY (job_id, try)
) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

COMMENT ON TABLE notif_attempt IS 'one row per call to a provider: when, what came back';

CREATE VIEW notif_calls AS
SELECT a.job_id, a.try, a.started_at, a.ended_at, a.outcome, a.http_status, a.error
  FROM notif_attempt a
UNION ALL
-- a first call that was accepted: its job row, not notif_attempt, holds it
SELECT j.id, 1, j.last_started_at, j.last_ended_at, j.outcome, j.http_status, NULL::text
  FROM notif_job j
 WHERE j.earlier_tries + j.tries = 1 AND j.outcome = 'accepted'
   AND j.last_started_at IS NOT NULL AND j.claimed_by IS NULL;

COMMENT ON VIEW notif_calls IS 'every provider call: the rows of notif_attempt, and the first calls that were accepted (held by their job row)';

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

/*
 * notif_dlr(key, delivered, reported_at): record one delivery report.
 * Returns the job's id, or NULL for a report no job matches (recorded as
 * orphaned, not an error: a provider's webhook must not fail on it).
 * Several delivered reports for one key mean the recipient got several
 * copies: a measured duplicate.  (1.3) A delivered report for a job queued
 * again after an ambiguous call ends it 'sent' (resolved_by 'report'): the
 * call it would retry did deliver.  Grant EXECUTE to the webhook's role.
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
    waiting boolean;
    d record;
BEGIN
    IF key IS NULL OR delivered IS NULL THEN
        RAISE EXCEPTION 'notif_dlr: key and delivered must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    -- key = kind:user_id:order_id (the kind has no ':'; the order_id may)
    parts := regexp_match(key, '^([^:]+):(-?[0-9]{1,19}):(.+)$');
    IF parts IS NOT NULL
       AND parts[2]::numeric BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
        SELECT j.id, j.status OPERATOR(pg_catalog.=) 'queued' AND j.outcome OPERATOR(pg_catalog.=) 'unknown'
          INTO job, waiting
          FROM @extschema@.notif_job j
         WHERE j.user_id OPERATOR(pg_catalog.=) parts[2]::bigint
           AND j.kind OPERATOR(pg_catalog.=) parts[1]
           AND j.order_id OPERATOR(pg_catalog.=) parts[3];
    END IF;

    INSERT INTO @extschema@.notif_dlr (key, job_id, delivered, reported_at)
    VALUES (key, job, delivered, coalesce(reported_at, now()));

    -- (1.3) delivered: a job queued again after an ambiguous call is done,
    -- as the lifecycle's "report" rows say (report_resolves).  Only a job
    -- that looked so is locked and decided on: the report of a job sent
    -- (nearly every report) takes no lock.
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
    RETURN job;
END;
$$;

COMMENT ON FUNCTION notif_dlr(text, boolean, timestamptz) IS 'record a provider''s delivery report for a job key; returns the job id, NULL if orphaned';

REVOKE ALL ON FUNCTION notif_dlr(text, boolean, timestamptz) FROM PUBLIC;

/*
 * notif_excerpt(text): what the sender keeps of a provider's text in
 * notif_job.last_error and notif_calls: printable ASCII, credentials,
 * phone numbers and e-mail addresses masked, at most 120 characters (the
 * rules: doc/reference.md, "What is kept of an answer").  The sender
 * calls the same C function; this is for tests and for operators.
 */
CREATE FUNCTION notif_excerpt(answer text)
RETURNS text
LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'notif_excerpt_sql';

COMMENT ON FUNCTION notif_excerpt(text) IS 'what the sender keeps of a provider''s answer: printable, credentials, numbers and addresses masked, at most 120 characters';


/* ---------------------------------------------------------------------
 * 5. The work: notif_active, notif_job's index of work
 * --------------------------------------------------------------------- */

/*
 * notif_active holds one row per job a sender may still have to call,
 * queued (claimed_by NULL) or held by a sender (claimed_by: its
 * incarnation), with the job's kind and next_at; a job leaves it when it
 * ends.  notif_job stays the truth: notif_active is its index of work,
 * written in the same transactions (enqueue, claim, result, recovery,
 * notif_retry, notif_cancel), and UNLOGGED, because it can be rebuilt from
 * notif_job: after a crash or on a promoted standby (where PostgreSQL
 * empties unlogged tables) the launcher rebuilds it before any sender
 * starts (notif_active_rebuild).  Its WAL would otherwise double the job's.
 */
CREATE UNLOGGED TABLE notif_active (
    job_id bigint PRIMARY KEY,
    kind text NOT NULL,
    next_at timestamptz NOT NULL,
    claimed_by bigint
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.01);

COMMENT ON TABLE notif_active IS 'the jobs still to call, queued or held by a sender: notif_job''s index of work, rebuilt from it after a crash or a promotion';

-- What a sender claims: due queued jobs of a kind, oldest first.
CREATE INDEX notif_active_due_idx ON notif_active (kind, next_at) WHERE claimed_by IS NULL;
-- What crash recovery looks at: jobs held by a sender.
CREATE INDEX notif_active_held_idx ON notif_active (claimed_by) WHERE claimed_by IS NOT NULL;

-- One row once notif_active has been built; gone with it after a crash.
CREATE UNLOGGED TABLE notif_active_built (
    built_at timestamptz NOT NULL
);

COMMENT ON TABLE notif_active_built IS 'a row once notif_active has been built from notif_job (emptied with it after a crash or a promotion)';

/*
 * notif_active_rebuild(): make notif_active match notif_job: add the
 * queued and held jobs it lacks, drop the rows of jobs that are neither,
 * correct kind, next_at and holder.  Returns how many rows it changed.
 * The launcher runs it, before it starts any sender, whenever
 * notif_active_built is empty (a fresh install, a crash, a promotion);
 * run it by hand after a load that skipped notif_job's triggers (a
 * data-only restore with --disable-triggers, session_replication_role =
 * replica, logical replication).  It locks notif_active (EXCLUSIVE):
 * enqueues, claims and results wait until it commits.
 */
CREATE FUNCTION notif_active_rebuild()
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    added bigint;
    dropped bigint;
    corrected bigint;
BEGIN
    -- exact: no transaction writes notif_active meanwhile (enqueues and
    -- claims wait the few seconds it takes; plain reads go on)
    LOCK TABLE @extschema@.notif_active IN EXCLUSIVE MODE;

    INSERT INTO @extschema@.notif_active (job_id, kind, next_at, claimed_by)
    SELECT j.id, j.kind, j.next_at, j.claimed_by
      FROM @extschema@.notif_job j
     WHERE j.status OPERATOR(pg_catalog.=) 'queued' OR j.claimed_by IS NOT NULL
    ON CONFLICT (job_id) DO NOTHING;
    GET DIAGNOSTICS added = ROW_COUNT;

    DELETE FROM @extschema@.notif_active a
     WHERE NOT EXISTS (SELECT FROM @extschema@.notif_job j
                        WHERE j.id OPERATOR(pg_catalog.=) a.job_id
                          AND (j.status OPERATOR(pg_catalog.=) 'queued' OR j.claimed_by IS NOT NULL));
    GET DIAGNOSTICS dropped = ROW_COUNT;

    UPDATE @extschema@.notif_active a
       SET kind = j.kind, next_at = j.next_at, claimed_by = j.claimed_by
      FROM @extschema@.notif_job j
     WHERE j.id OPERATOR(pg_catalog.=) a.job_id
       AND (a.kind, a.next_at, a.claimed_by) IS DISTINCT FROM (j.kind, j.next_at, j.claimed_by);
    GET DIAGNOSTICS corrected = ROW_COUNT;

    IF NOT EXISTS (SELECT FROM @extschema@.notif_active_built) THEN
        INSERT INTO @extschema@.notif_active_built VALUES (now());
    END IF;
    RETURN added OPERATOR(pg_catalog.+) dropped OPERATOR(pg_catalog.+) corrected;
END;
$$;

REVOKE ALL ON FUNCTION notif_active_rebuild() FROM PUBLIC;

/*
 * Jobs inserted into notif_job by other means than notif_enqueue (an
 * INSERT, a COPY, a restore: pg_dump keeps notif_job, not notif_active)
 * are queued work too: one statement per statement adds their rows.
 * notif_enqueue's fast path writes the row itself, in the same way.
 */
CREATE FUNCTION notif_job_inserted()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO @extschema@.notif_active (job_id, kind, next_at, claimed_by)
    SELECT n.id, n.kind, n.next_at, n.claimed_by FROM new_jobs n
     WHERE n.status OPERATOR(pg_catalog.=) 'queued' OR n.claimed_by IS NOT NULL
    ON CONFLICT (job_id) DO NOTHING;
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION notif_job_inserted() FROM PUBLIC;

CREATE TRIGGER notif_job_work
    AFTER INSERT ON notif_job
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION notif_job_inserted();

-- Jobs deleted (the retention purge, a DBA's DELETE or TRUNCATE) leave no work.
CREATE FUNCTION notif_job_deleted()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP OPERATOR(pg_catalog.=) 'TRUNCATE' THEN
        TRUNCATE @extschema@.notif_active;
    ELSE
        -- by its primary key, whatever the sizes (a purge batch against a
        -- backlog of millions): never a scan of notif_active
        DELETE FROM @extschema@.notif_active a
         WHERE a.job_id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT o.id FROM old_jobs o));
    END IF;
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION notif_job_deleted() FROM PUBLIC;

CREATE TRIGGER notif_job_unwork
    AFTER DELETE ON notif_job
    REFERENCING OLD TABLE AS old_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION notif_job_deleted();

CREATE TRIGGER notif_job_truncated
    AFTER TRUNCATE ON notif_job
    FOR EACH STATEMENT EXECUTE FUNCTION notif_job_deleted();

-- A type renamed (ON UPDATE CASCADE renames its jobs) renames its work too.
CREATE FUNCTION notif_type_renamed()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE @extschema@.notif_active SET kind = NEW.code
     WHERE kind OPERATOR(pg_catalog.=) OLD.code;
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION notif_type_renamed() FROM PUBLIC;

CREATE TRIGGER notif_type_renamed
    AFTER UPDATE OF code ON notif_type
    FOR EACH ROW WHEN (OLD.code IS DISTINCT FROM NEW.code)
    EXECUTE FUNCTION notif_type_renamed();

-- notif_active (empty) is built: the launcher need not rebuild it
INSERT INTO notif_active_built VALUES (now());


/* ---------------------------------------------------------------------
 * 6. Enqueue, retry, cancel: the job lifecycle
 * --------------------------------------------------------------------- */

/*
 * notif_enqueue: put a notification into the outbox, idempotently and
 * transactionally.  Returns the job id, the existing one for a repeated key.
 *
 * SECURITY DEFINER, so that a role granted only EXECUTE can enqueue.  The
 * statements its C code runs name every table, type and operator with its
 * schema (OPERATOR(pg_catalog.=) and so on), so the caller's search_path
 * cannot redirect them; a SET search_path clause here would instead cost a
 * search_path switch, and a re-plan, on every call of a bulk enqueue.
 */
CREATE FUNCTION notif_enqueue(user_id bigint, kind text, order_id text,
                              payload jsonb DEFAULT '{}',
                              not_before timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE SECURITY DEFINER
AS 'MODULE_PATHNAME', 'notif_enqueue';

CREATE FUNCTION notif_enqueue(user_id bigint, kind text, order_id bigint,
                              payload jsonb DEFAULT '{}',
                              not_before timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE SECURITY DEFINER
AS 'MODULE_PATHNAME', 'notif_enqueue_bigint';

COMMENT ON FUNCTION notif_enqueue(bigint, text, text, jsonb, timestamptz) IS 'enqueue a notification; a repeated (user_id, kind, order_id) returns the existing job id';
COMMENT ON FUNCTION notif_enqueue(bigint, text, bigint, jsonb, timestamptz) IS 'enqueue a notification; a repeated (user_id, kind, order_id) returns the existing job id';

-- Enqueueing is granted, never public: GRANT EXECUTE ON FUNCTION notif_enqueue ... TO app;
REVOKE ALL ON FUNCTION notif_enqueue(bigint, text, text, jsonb, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION notif_enqueue(bigint, text, bigint, jsonb, timestamptz) FROM PUBLIC;

/*
 * notif_transitions(): every transition a job makes, as the library's one
 * table holds it (src/lifecycle/job_state.c): claim, call ended, sender lost, retry,
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
               sent_at = NULL,
               resolved_by = NULL
          FROM @extschema@.notif_type t
         WHERE j.id OPERATOR(pg_catalog.=) ANY (ids)
           AND t.code OPERATOR(pg_catalog.=) j.kind
        RETURNING j.id, j.kind, j.next_at, j.status, t.lane
    ),
    work AS (
        INSERT INTO @extschema@.notif_active AS a (job_id, kind, next_at)
        SELECT r.id, r.kind, r.next_at FROM redriven r
         WHERE r.status OPERATOR(pg_catalog.=) 'queued'
        ON CONFLICT (job_id) DO UPDATE
           SET kind = excluded.kind, next_at = excluded.next_at, claimed_by = NULL
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
    -- the job, then its work row: the order of every writer that may wait
    -- (the sender's record, the purge); a claim never waits (SKIP LOCKED)
    PERFORM FROM @extschema@.notif_active a
      WHERE a.job_id OPERATOR(pg_catalog.=) notif_decide.job_id
        FOR UPDATE;
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
CREATE FUNCTION notif_retry(job_id bigint, force boolean DEFAULT false)
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
CREATE FUNCTION notif_retry(kind text, since timestamptz, force boolean DEFAULT false)
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

COMMENT ON FUNCTION notif_retry(bigint, boolean) IS 're-drive a failed or expired job with fresh tries; force for an at_most_once job that may have been delivered';
COMMENT ON FUNCTION notif_retry(text, timestamptz, boolean) IS 're-drive the failed and expired jobs of a type due since a time; returns how many';

REVOKE ALL ON FUNCTION notif_retry(bigint, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION notif_retry(text, timestamptz, boolean) FROM PUBLIC;

/*
 * notif_cancel(job_id): a queued job never goes out, as the "cancel"
 * transition says (it becomes 'failed' with last_error 'cancelled', so
 * notif_retry can still bring it back).  A job a sender already holds is
 * not cancelled: an error says so.
 */
CREATE FUNCTION notif_cancel(job_id bigint)
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
END;
$$;

COMMENT ON FUNCTION notif_cancel(bigint) IS 'cancel a queued job: it becomes failed (cancelled) and is never sent';

REVOKE ALL ON FUNCTION notif_cancel(bigint) FROM PUBLIC;

-- wake a lane's sender when the current transaction commits (internal)
CREATE FUNCTION notif_wake_lane(lane text)
RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'notif_wake_lane_sql';

REVOKE ALL ON FUNCTION notif_wake_lane(text) FROM PUBLIC;


/* ---------------------------------------------------------------------
 * 7. Lanes
 * --------------------------------------------------------------------- */

/*
 * How many senders a lane has, where it is not notif_deliver.senders_per_lane.
 * A lane is named by its types (notif_type.lane); a row for a lane that no
 * non-paused type names does nothing.  The launcher reads it when a change
 * here commits (and at each of its rounds): raising a lane's count starts
 * senders, lowering it retires the extra ones (each claims no more, lets
 * its calls end, records them and exits).  Each sender takes one of the
 * notif_deliver.max_lanes slots; every lane gets one before any gets a
 * second.
 */
CREATE TABLE notif_lane (
    lane text PRIMARY KEY
        CONSTRAINT notif_lane_lane_check CHECK (lane ~ '^[^[:space:][:cntrl:]]{1,63}$' AND octet_length(lane) <= 63),
    senders int NOT NULL
        CONSTRAINT notif_lane_senders_check CHECK (senders BETWEEN 1 AND 16)
);

COMMENT ON TABLE notif_lane IS 'lanes whose sender count is not notif_deliver.senders_per_lane';
COMMENT ON COLUMN notif_lane.senders IS 'sender processes for the lane (1 to 16); each takes a notif_deliver.max_lanes slot';


/* ---------------------------------------------------------------------
 * 8. Configuration changes
 * --------------------------------------------------------------------- */

/*
 * Changes to notif_type and notif_provider take effect without a restart:
 * when such a change commits, every session's cache of types is invalidated
 * and the launcher and the senders are woken to re-read their configuration.
 */
CREATE FUNCTION notif_config_changed()
RETURNS trigger
LANGUAGE c
AS 'MODULE_PATHNAME', 'notif_config_changed';

REVOKE ALL ON FUNCTION notif_config_changed() FROM PUBLIC;

CREATE TRIGGER notif_type_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON notif_type
    FOR EACH STATEMENT EXECUTE FUNCTION notif_config_changed();

CREATE TRIGGER notif_provider_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON notif_provider
    FOR EACH STATEMENT EXECUTE FUNCTION notif_config_changed();

CREATE TRIGGER notif_lane_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON notif_lane
    FOR EACH STATEMENT EXECUTE FUNCTION notif_config_changed();

-- a new installation is a configuration change too: wake the launcher
CREATE FUNCTION notif_wake_launcher()
RETURNS void
LANGUAGE c
AS 'MODULE_PATHNAME', 'notif_wake_launcher';

REVOKE ALL ON FUNCTION notif_wake_launcher() FROM PUBLIC;

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


/* ---------------------------------------------------------------------
 * 9. Statistics and monitoring
 * --------------------------------------------------------------------- */

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
 * notif_work_now(): per type, the jobs queued now, how long the oldest due
 * one has waited, and the calls in flight.  On a primary from notif_active
 * (its indexes answer); on a standby, where an unlogged table cannot be
 * read, from notif_job (all of it).  notif_stats reads it (as whoever
 * reads notif_stats, pg_monitor: hence SECURITY DEFINER, read only).
 */
CREATE FUNCTION notif_work_now(OUT kind text, OUT queued_now bigint,
                               OUT oldest_queued_age interval, OUT in_flight bigint)
RETURNS SETOF record
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_is_in_recovery() THEN
        RETURN QUERY
        SELECT j.kind,
               count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'queued'),
               coalesce(now() OPERATOR(pg_catalog.-) min(j.next_at)
                        FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'queued'
                                  AND j.next_at OPERATOR(pg_catalog.<=) now()), interval '0'),
               count(*) FILTER (WHERE j.claimed_by IS NOT NULL)
          FROM @extschema@.notif_job j
         WHERE j.status OPERATOR(pg_catalog.=) 'queued' OR j.claimed_by IS NOT NULL
         GROUP BY j.kind;
    ELSE
        RETURN QUERY
        SELECT a.kind,
               count(*) FILTER (WHERE a.claimed_by IS NULL),
               coalesce(now() OPERATOR(pg_catalog.-) min(a.next_at)
                        FILTER (WHERE a.claimed_by IS NULL AND a.next_at OPERATOR(pg_catalog.<=) now()),
                        interval '0'),
               count(*) FILTER (WHERE a.claimed_by IS NOT NULL)
          FROM @extschema@.notif_active a
         GROUP BY a.kind;
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION notif_work_now() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION notif_work_now() TO pg_monitor;

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
 *
 * Its backlog and calls in flight come from notif_work_now().
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
            AND j.outcome = 'unknown') AS ended_ambiguous,
           -- (1.3) its last ambiguous call resolved: by the provider's
           -- deduplication window (no copy beyond one), or by a delivery
           -- report (delivered, not retried)
           j.resolved_by
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
    SELECT kind, status, ambiguous, ended_ambiguous, resolved_by,
           count(*) AS jobs,
           sum(attempts) AS attempts,
           count(*) FILTER (WHERE reports > 0) AS dlr_jobs,
           coalesce(sum(ambiguous) FILTER (WHERE judged), 0) AS q_sample,
           coalesce(sum(least(ambiguous, greatest(0, delivered - accepted))) FILTER (WHERE judged), 0) AS q_delivered,
           count(*) FILTER (WHERE judged AND ended_ambiguous AND delivered = 0) AS measured_lost,
           coalesce(sum(delivered - 1) FILTER (WHERE delivered > 1), 0) AS measured_duplicates
      FROM per_job
     GROUP BY kind, status, ambiguous, ended_ambiguous, resolved_by
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
-- the backlog and the calls in flight now, from notif_active (indexed)
work AS MATERIALIZED (
    SELECT w.kind, w.queued_now, w.oldest_queued_age, w.in_flight FROM notif_work_now() w
),
queue AS (
    SELECT w.kind, w.queued_now, w.oldest_queued_age FROM work w
),
held AS (
    SELECT w.kind, w.in_flight FROM work w
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
    -- is a copy with probability q; (1.3) but not when the ambiguity was
    -- resolved: a report said it delivered, or the provider dropped the
    -- repeat
    SELECT m.kind,
           sum(g.jobs * power(1 - m.q, g.ambiguous))
               FILTER (WHERE g.ended_ambiguous AND g.resolved_by IS NULL) AS lost,
           sum(m.q * g.jobs * (g.ambiguous - CASE WHEN g.ended_ambiguous THEN 1 ELSE 0 END))
               FILTER (WHERE g.resolved_by IS NULL) AS duplicates
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
 * (1.3) notif_resolved: per type, the jobs of the same window whose last
 * ambiguous call was resolved (notif_job.resolved_by), by each means.  A
 * view of its own: notif_stats keeps its columns, which a router reads
 * whole on every shard (notif_deliver_router's notif_stats()).
 */
CREATE VIEW notif_resolved AS
SELECT t.code AS kind,
       t.delivery,
       count(j.id) FILTER (WHERE j.resolved_by = 'dedup_window') AS resolved_dedup_window,
       count(j.id) FILTER (WHERE j.resolved_by = 'report') AS resolved_report,
       count(j.id) FILTER (WHERE j.resolved_by = 'lookup_found') AS resolved_lookup_found,
       count(j.id) FILTER (WHERE j.resolved_by = 'lookup_not_found') AS resolved_lookup_not_found,
       -- at_least_once jobs a report or a lookup said delivered: not sent again
       count(j.id) FILTER (WHERE t.delivery = 'at_least_once'
                             AND j.resolved_by IN ('report', 'lookup_found')) AS duplicates_avoided,
       -- at_most_once jobs whose ambiguous call a retry inside the window
       -- made certain (without it each was lost with probability 1 - q)
       count(j.id) FILTER (WHERE t.delivery = 'at_most_once' AND j.resolved_by = 'dedup_window'
                             AND j.status = 'sent' AND j.outcome = 'accepted') AS losses_avoided
  FROM notif_type t
  LEFT JOIN notif_job j
    ON j.kind = t.code AND j.resolved_by IS NOT NULL
   AND j.created_at >= now() - coalesce(current_setting('notif_deliver.stats_window', true), '1d')::interval
 GROUP BY t.code, t.delivery
 ORDER BY t.code;

COMMENT ON VIEW notif_resolved IS 'per type over notif_deliver.stats_window: jobs whose last ambiguous call was resolved, by each means';

GRANT SELECT ON notif_resolved TO pg_monitor;

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
 * 10. Push providers (FCM, APNs)
 *
 * Their formats and credentials are notif_provider's (section 1).
 * --------------------------------------------------------------------- */

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


/* ---------------------------------------------------------------------
 * 11. Shards
 * --------------------------------------------------------------------- */

/*
 * A shard is one notif_deliver database among several that share users by
 * user_id (the router extension notif_deliver_router, over PL/Proxy, sends
 * each call to the shard of hashint8(user_id) & (shards - 1); docs:
 * doc/shards.md).  notif_shard holds which one this database is: one row,
 * written by notif_shard_setup.  Without it the database is no shard, and
 * the functions below refuse to run.
 */
CREATE TABLE notif_shard (
    singleton boolean PRIMARY KEY DEFAULT true
        CONSTRAINT notif_shard_singleton_check CHECK (singleton),
    shard int NOT NULL,
    shards int NOT NULL
        -- PL/Proxy's hash routing takes hash & (shards - 1)
        CONSTRAINT notif_shard_shards_check CHECK (shards >= 1 AND shards & (shards - 1) = 0),
    set_up_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT notif_shard_shard_check CHECK (shard >= 0 AND shard < shards)
);

COMMENT ON TABLE notif_shard IS 'which shard of how many this database is (one row, set by notif_shard_setup)';

/*
 * notif_shard_info(): this database's shard number and the shard count;
 * an error (55000) if it is not set up as a shard.
 */
CREATE FUNCTION notif_shard_info(OUT shard int, OUT shards int)
RETURNS record
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    SELECT s.shard, s.shards INTO shard, shards FROM @extschema@.notif_shard s;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'notif_deliver: this database is not set up as a shard'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Run SELECT notif_shard_setup(shard, shards) on each shard, e.g. notif_shard_setup(2, 4) on the third of four.';
    END IF;
END;
$$;

COMMENT ON FUNCTION notif_shard_info() IS 'this shard''s number and the number of shards';

/*
 * notif_shard_setup(shard, shards): make this database shard number
 * "shard" (0 .. shards - 1) of "shards" (a power of two).  A job id then
 * names its shard: the identity sequence of notif_job steps by "shards"
 * from a value that is "shard" modulo "shards", so every id of this shard
 * is congruent to its number and ids never collide across shards; the
 * router sends notif_cancel(id) and notif_retry(id) to shard id % shards.
 * Refused when the table holds jobs that contradict it (ids or users of
 * another shard).  Idempotent: run it again after a restore from pg_dump
 * (it sets the sequence's step and start again).
 */
CREATE FUNCTION notif_shard_setup(shard int, shards int)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seq text := pg_get_serial_sequence('@extschema@.notif_job', 'id');
    misplaced bigint;
    next_free bigint;
    restart bigint;
BEGIN
    IF shard IS NULL OR shards IS NULL THEN
        RAISE EXCEPTION 'notif_shard_setup: shard and shards must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF shards < 1 OR shards & (shards - 1) <> 0 THEN
        RAISE EXCEPTION 'notif_shard_setup: shards must be a power of two, not %', shards
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'PL/Proxy routes a call to partition hash & (shards - 1).';
    END IF;
    IF shard < 0 OR shard >= shards THEN
        RAISE EXCEPTION 'notif_shard_setup: shard must be between 0 and % (shards - 1), not %', shards - 1, shard
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- the lock ALTER TABLE takes, taken first: no enqueue runs while the
    -- sequence changes, and no lock upgrade can deadlock with a sender
    LOCK TABLE @extschema@.notif_job IN ACCESS EXCLUSIVE MODE;

    SELECT count(*) INTO misplaced FROM @extschema@.notif_job j
     WHERE j.id % shards <> shard OR (hashint8(j.user_id) & (shards - 1)) <> shard;
    IF misplaced > 0 THEN
        RAISE EXCEPTION 'notif_shard_setup: % job(s) in notif_job do not belong to shard % of %', misplaced, shard, shards
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'A job belongs to shard k when id % shards = k and hashint8(user_id) & (shards - 1) = k.',
                  HINT = 'Set up each shard before it takes jobs; moving jobs between shards is not supported.';
    END IF;

    -- the first free id at or above both the sequence's next value and the largest id
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM %s', seq)
        INTO next_free;
    SELECT greatest(next_free, coalesce(max(j.id) + 1, 1)) INTO next_free FROM @extschema@.notif_job j;
    restart := next_free + ((shard - next_free % shards) % shards + shards) % shards;
    EXECUTE format('ALTER TABLE @extschema@.notif_job ALTER COLUMN id SET INCREMENT BY %s RESTART WITH %s',
                   shards, restart);

    INSERT INTO @extschema@.notif_shard (shard, shards) VALUES (shard, shards)
        ON CONFLICT (singleton) DO UPDATE SET shard = excluded.shard, shards = excluded.shards,
                                              set_up_at = now();
END;
$$;

COMMENT ON FUNCTION notif_shard_setup(int, int) IS 'make this database shard "shard" of "shards": its job ids become congruent to its number';

REVOKE ALL ON FUNCTION notif_shard_setup(int, int) FROM PUBLIC;

/*
 * notif_shard_enqueue(...): notif_enqueue as the router calls it: refused
 * (22023, nothing written) when user_id does not belong to this shard, so
 * that a router with a wrong partition list cannot split a key's jobs over
 * two shards (each would deduplicate on its own).  notif_enqueue's text
 * signature and result (the router sends a bigint order_id as its text,
 * as notif_enqueue itself stores it).
 */
CREATE FUNCTION notif_shard_enqueue(user_id bigint, kind text, order_id text,
                                    payload jsonb DEFAULT '{}',
                                    not_before timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s record;
BEGIN
    -- notif_shard_check_user, inlined (this is every routed enqueue's path)
    SELECT n.shard, n.shards INTO s FROM @extschema@.notif_shard n;
    IF NOT FOUND OR (hashint8(user_id) & (s.shards - 1)) <> s.shard THEN
        PERFORM @extschema@.notif_shard_check_user(user_id);    -- raises the error
    END IF;
    RETURN @extschema@.notif_enqueue(user_id, kind, order_id, payload, not_before);
END;
$$;

COMMENT ON FUNCTION notif_shard_enqueue(bigint, text, text, jsonb, timestamptz) IS 'notif_enqueue for the router: refuses a user of another shard';

REVOKE ALL ON FUNCTION notif_shard_enqueue(bigint, text, text, jsonb, timestamptz) FROM PUBLIC;

/*
 * notif_shard_check_user(user_id): an error (22023) unless the user belongs
 * to this shard.  For business functions on a shard too (see place_order in
 * doc/shards.md).  A NULL user_id passes (notif_enqueue refuses it).
 */
CREATE FUNCTION notif_shard_check_user(user_id bigint)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s record;
BEGIN
    SELECT * INTO s FROM @extschema@.notif_shard_info();
    IF (hashint8(user_id) & (s.shards - 1)) <> s.shard THEN
        RAISE EXCEPTION 'notif_deliver: user % belongs to shard %, not to this shard (% of %)',
                        user_id, hashint8(user_id) & (s.shards - 1), s.shard, s.shards
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The router''s partition list (its foreign server''s options p0, p1, ...) must list the shards in the order of their numbers.';
    END IF;
END;
$$;

COMMENT ON FUNCTION notif_shard_check_user(bigint) IS 'an error unless the user belongs to this shard (hashint8(user_id) & (shards - 1))';

/*
 * notif_shard_counts(): jobs by type and status on this shard, each row
 * with the shard's number (the router's cluster-wide notif_counts).
 */
CREATE FUNCTION notif_shard_counts(OUT shard int, OUT kind text, OUT status text, OUT jobs bigint)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT i.shard, j.kind, j.status, count(*)
      FROM @extschema@.notif_shard_info() i, @extschema@.notif_job j
     GROUP BY i.shard, j.kind, j.status
     ORDER BY j.kind, j.status;
$$;

COMMENT ON FUNCTION notif_shard_counts() IS 'jobs by type and status on this shard, with its number';

REVOKE ALL ON FUNCTION notif_shard_counts() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION notif_shard_counts() TO pg_monitor;

/*
 * notif_shard_set_provider_limits(provider, rate_limit, max_inflight):
 * this shard's share of a provider account's cluster-wide limits, which
 * each shard enforces on its own: rate_limit / shards (rounded down to a
 * millionth; NULL: no limit), and max_inflight split so that the shares
 * add up to it exactly (the first max_inflight % shards shards take one
 * more).  Returns the shard's number and the values it set.
 */
CREATE FUNCTION notif_shard_set_provider_limits(provider text, rate_limit numeric, max_inflight int,
                                                OUT shard int, OUT shard_rate_limit numeric,
                                                OUT shard_max_inflight int)
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n int;
BEGIN
    IF provider IS NULL OR max_inflight IS NULL THEN
        RAISE EXCEPTION 'notif_set_provider_limits: provider and max_inflight must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT i.shard, i.shards INTO shard, n FROM @extschema@.notif_shard_info() i;
    IF max_inflight < n THEN
        RAISE EXCEPTION 'notif_set_provider_limits: max_inflight (%) must be at least the number of shards (%)', max_inflight, n
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Each shard needs at least one call in flight.';
    END IF;
    IF rate_limit <= 0 OR trunc(rate_limit / n, 6) <= 0 THEN
        RAISE EXCEPTION 'notif_set_provider_limits: rate_limit (%) must be positive, and at least 0.000001 per shard', rate_limit
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    shard_rate_limit := trunc(rate_limit / n, 6);
    shard_max_inflight := max_inflight / n + (shard < max_inflight % n)::int;
    UPDATE @extschema@.notif_provider p
       SET rate_limit = shard_rate_limit, max_inflight = shard_max_inflight
     WHERE p.name = provider;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'notif_set_provider_limits: provider "%" does not exist on shard %', provider, shard
            USING ERRCODE = 'no_data_found';
    END IF;
END;
$$;

COMMENT ON FUNCTION notif_shard_set_provider_limits(text, numeric, int) IS 'set this shard''s share of a provider''s cluster-wide rate_limit and max_inflight';

REVOKE ALL ON FUNCTION notif_shard_set_provider_limits(text, numeric, int) FROM PUBLIC;

/*
 * notif_shard_provider_limits(): each provider's limits on this shard and
 * its calls in flight now (over all lanes, from notif_provider_slots), with
 * the shard's number (no url, no headers: those may hold secrets).
 */
CREATE FUNCTION notif_shard_provider_limits(OUT shard int, OUT provider text,
                                            OUT rate_limit numeric, OUT max_inflight int,
                                            OUT in_flight int)
RETURNS SETOF record
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT i.shard, p.name, p.rate_limit, p.max_inflight,
           coalesce((SELECT sum(l.in_flight)::int FROM @extschema@.notif_provider_slots() l
                      WHERE l.provider = p.name), 0)
      FROM @extschema@.notif_shard_info() i, @extschema@.notif_provider p
     ORDER BY p.name;
$$;

COMMENT ON FUNCTION notif_shard_provider_limits() IS 'each provider''s rate_limit, max_inflight and calls in flight on this shard, with its number';

REVOKE ALL ON FUNCTION notif_shard_provider_limits() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION notif_shard_provider_limits() TO pg_monitor;


/* ---------------------------------------------------------------------
 * 12. Backups: what pg_dump keeps, and what a restore puts back
 *
 * pg_dump writes the rows of the tables marked below with
 * pg_extension_config_dump, and a restore runs CREATE EXTENSION before it
 * loads them.  Docs: doc/guide.md, "Backups".  notif_active is not dumped:
 * the launcher rebuilds it from notif_job.
 * --------------------------------------------------------------------- */

/*
 * Every provider row is dumped, the 'default' one included: see
 * notif_provider_restore_default below.
 */
SELECT pg_catalog.pg_extension_config_dump('notif_provider', '');
SELECT pg_catalog.pg_extension_config_dump('notif_type', '');
SELECT pg_catalog.pg_extension_config_dump('notif_job', '');
SELECT pg_catalog.pg_extension_config_dump('notif_attempt', '');
SELECT pg_catalog.pg_extension_config_dump('notif_dlr', '');
SELECT pg_catalog.pg_extension_config_dump('notif_unregistered_token', '');
SELECT pg_catalog.pg_extension_config_dump('notif_shard', '');
SELECT pg_catalog.pg_extension_config_dump('notif_lane', '');

/*
 * The identity sequences of notif_job and notif_dlr: their positions are
 * dumped with the rows (a restore then goes on from the last id).
 */
SELECT pg_catalog.pg_extension_config_dump(pg_catalog.pg_get_serial_sequence('notif_job', 'id')::regclass, '');
SELECT pg_catalog.pg_extension_config_dump(pg_catalog.pg_get_serial_sequence('notif_dlr', 'id')::regclass, '');

/*
 * CREATE EXTENSION makes the 'default' provider row, so a restore loads a
 * second one: notif_provider_restore_default lets that insert replace the
 * row while it is still exactly as CREATE EXTENSION made it (every column
 * at its default); a 'default' row that someone has configured is never
 * replaced, and an insert of another then fails on the primary key.
 */
CREATE FUNCTION notif_provider_restore_default()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    existing jsonb;
    as_made jsonb;
BEGIN
    IF NEW.name IS DISTINCT FROM 'default' THEN
        RETURN NEW;
    END IF;
    SELECT to_jsonb(p) OPERATOR(pg_catalog.-) 'name' INTO existing
      FROM @extschema@.notif_provider p WHERE p.name OPERATOR(pg_catalog.=) 'default' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NEW;
    END IF;
    -- the row as CREATE EXTENSION makes it: each column at its default
    EXECUTE (SELECT 'SELECT to_jsonb(r) FROM (SELECT '
                    || string_agg(format('(%s)::%s AS %I',
                                         coalesce(pg_get_expr(d.adbin, d.adrelid), 'NULL'),
                                         format_type(a.atttypid, a.atttypmod), a.attname),
                                  ', ' ORDER BY a.attnum)
                    || ') r'
               FROM pg_attribute a
               LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
              WHERE a.attrelid = TG_RELID AND a.attnum > 0 AND NOT a.attisdropped
                AND a.attname <> 'name')
       INTO as_made;
    IF existing IS DISTINCT FROM as_made THEN
        RETURN NEW;             -- configured: the insert fails on the key
    END IF;
    -- replaced in place (a type may already name it): the new row's values
    EXECUTE (SELECT format('UPDATE %s SET (%s) = ROW(%s) WHERE name = ''default''',
                           TG_RELID::regclass,
                           string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum),
                           string_agg('($1).' || quote_ident(a.attname), ', ' ORDER BY a.attnum))
               FROM pg_attribute a
              WHERE a.attrelid = TG_RELID AND a.attnum > 0 AND NOT a.attisdropped
                AND a.attname <> 'name')
      USING NEW;
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION notif_provider_restore_default() FROM PUBLIC;

COMMENT ON FUNCTION notif_provider_restore_default() IS 'trigger: an inserted ''default'' provider replaces the one CREATE EXTENSION made, while it is untouched (a restore)';

CREATE TRIGGER notif_provider_restore_default
    BEFORE INSERT ON notif_provider
    FOR EACH ROW EXECUTE FUNCTION notif_provider_restore_default();

/*
 * A shard's job ids step by its shard count (notif_shard_setup); the step
 * is the sequence's definition, which pg_dump does not keep (it is the
 * extension's).  When notif_shard gets its row, as a restore loads it,
 * notif_job's id takes the shard's step again; the sequence's position
 * comes with the dump, in the shard's class.
 */
CREATE FUNCTION notif_shard_restore_step()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    step bigint;
BEGIN
    SELECT s.seqincrement INTO step FROM pg_sequence s
     WHERE s.seqrelid OPERATOR(pg_catalog.=)
           pg_get_serial_sequence('@extschema@.notif_job', 'id')::regclass;
    IF step IS DISTINCT FROM NEW.shards THEN
        EXECUTE format('ALTER TABLE @extschema@.notif_job ALTER COLUMN id SET INCREMENT BY %s', NEW.shards);
    END IF;
    RETURN NULL;
END;
$$;

REVOKE ALL ON FUNCTION notif_shard_restore_step() FROM PUBLIC;

COMMENT ON FUNCTION notif_shard_restore_step() IS 'trigger: notif_job''s ids step by the shard count of the notif_shard row loaded (a restore)';

CREATE TRIGGER notif_shard_restore_step
    AFTER INSERT ON notif_shard
    FOR EACH ROW EXECUTE FUNCTION notif_shard_restore_step();


/* ---------------------------------------------------------------------
 * Last: a new installation is a configuration change too: wake the
 * launcher when it commits.
 * --------------------------------------------------------------------- */
SELECT notif_wake_launcher();
