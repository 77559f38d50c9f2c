/*
 * notif_deliver--1.0.sql
 *      Install script of notif_deliver 1.0: providers, notification types,
 *      the job table (the outbox), the attempt log, and the functions that
 *      feed them.
 *
 * Everything is created in the schema given to CREATE EXTENSION.  The names
 * and the column order of the tables are a contract that other tools and
 * the tests rely on: add columns at the end, never reorder.
 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION notif_deliver" to load this file. \quit

/*
 * notif_provider: where the messages of a type go, and how they travel.
 * It may hold credentials (headers): only its owner can read it.
 */
CREATE TABLE notif_provider (
    name text PRIMARY KEY
        CONSTRAINT notif_provider_name_check CHECK (name ~ '^[^[:cntrl:]]{1,63}$'),
    url text
        CONSTRAINT notif_provider_url_check CHECK (url ~* '^https?://[^[:space:]]+$'),
    format text NOT NULL DEFAULT 'json'
        CONSTRAINT notif_provider_format_check CHECK (format IN ('json', 'form', 'query')),
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
        CONSTRAINT notif_provider_rate_limit_check CHECK (rate_limit > 0)
);

COMMENT ON TABLE notif_provider IS 'HTTP endpoints that notifications are delivered to';

INSERT INTO notif_provider (name) VALUES ('default');

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
    lane text NOT NULL DEFAULT 'default'
        CONSTRAINT notif_type_lane_check CHECK (lane ~ '^[^[:space:][:cntrl:]]{1,63}$'),
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
    CONSTRAINT notif_type_backoff_check CHECK (backoff_max >= backoff_min)
);

COMMENT ON TABLE notif_type IS 'kinds of notification, each with its delivery guarantee, deadline, lane and provider';

/*
 * notif_job: the outbox, one row per business message.
 * (user_id, kind, order_id) is the business key: enqueueing it twice is a no-op.
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
    CONSTRAINT notif_job_key UNIQUE (user_id, kind, order_id)
) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

COMMENT ON TABLE notif_job IS 'notifications to deliver (the outbox), one row per business message';

-- What a sender claims: due queued jobs of the kinds in its lane, oldest first.
-- Partial, so it holds only the backlog however many finished jobs are kept.
CREATE INDEX notif_job_queued_idx ON notif_job (kind, next_at) WHERE status = 'queued';
-- What crash recovery looks at: jobs held by a sender (in flight).
CREATE INDEX notif_job_claimed_idx ON notif_job (claimed_by) WHERE claimed_by IS NOT NULL;
-- What the retention purge looks at: finished jobs, by when they were last due.
CREATE INDEX notif_job_finished_idx ON notif_job (kind, next_at)
    WHERE status = ANY ('{sent,failed,expired}'::text[]);

/*
 * notif_attempt: one row per provider call.
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

/*
 * pg_dump keeps the user's rows.  The 'default' provider row is created by
 * CREATE EXTENSION itself and so is left out (re-apply its url after a restore).
 */
SELECT pg_catalog.pg_extension_config_dump('notif_provider', $$WHERE name <> 'default'$$);
SELECT pg_catalog.pg_extension_config_dump('notif_type', '');
SELECT pg_catalog.pg_extension_config_dump('notif_job', '');
SELECT pg_catalog.pg_extension_config_dump('notif_attempt', '');

/*
 * notif_key: the idempotency key every attempt of a job carries.
 */
CREATE FUNCTION notif_key(kind text, user_id bigint, order_id text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN kind || ':' || user_id::text || ':' || order_id;

COMMENT ON FUNCTION notif_key(text, bigint, text) IS 'idempotency key of a job: kind:user_id:order_id';

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

-- a new installation is a configuration change too: wake the launcher
CREATE FUNCTION notif_wake_launcher()
RETURNS void
LANGUAGE c
AS 'MODULE_PATHNAME', 'notif_wake_launcher';

REVOKE ALL ON FUNCTION notif_wake_launcher() FROM PUBLIC;

SELECT notif_wake_launcher();
