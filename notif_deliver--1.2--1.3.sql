/*
 * notif_deliver 1.2 -> 1.3
 *
 * Plain SQL, run by ALTER EXTENSION notif_deliver UPDATE (a fresh CREATE
 * EXTENSION runs notif_deliver--1.3.sql instead).  Delivery pauses while
 * the 1.3 library waits for this update, and resumes when it commits.
 *
 * Each part below says what it adds; docs: doc/reference.md, "Upgrading".
 *
 * 1.3 is released: this file and notif_deliver--1.3.sql no longer
 * change (1.4's changes go into notif_deliver--1.3--1.4.sql).  The
 * regression test sql/upgrade.sql proves that they agree (it
 * compares a database updated 1.0 -> 1.1 -> 1.2 -> 1.3 with a fresh one:
 * sql/schema_fingerprint.sql).
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION notif_deliver UPDATE TO '1.3'" to load this file. \quit

/* ---------------------------------------------------------------------
 * Backups: what pg_dump keeps, and what a restore puts back
 *
 * pg_dump writes the rows of the tables marked below with
 * pg_extension_config_dump, and a restore runs CREATE EXTENSION before it
 * loads them.  Docs: doc/guide.md, "Backups".
 * --------------------------------------------------------------------- */

/*
 * The identity sequences of notif_job and notif_dlr: their positions are
 * dumped with the rows (before 1.3 they started again at 1 after a
 * restore, and the first enqueue failed on notif_job_pkey).
 */
SELECT pg_catalog.pg_extension_config_dump(pg_catalog.pg_get_serial_sequence('notif_job', 'id')::regclass, '');
SELECT pg_catalog.pg_extension_config_dump(pg_catalog.pg_get_serial_sequence('notif_dlr', 'id')::regclass, '');

/*
 * Every provider row is dumped, the 'default' one included (before 1.3 it
 * was left out, and a restore lost its settings: its url NULL, every type
 * on it waiting for ever).  CREATE EXTENSION makes the 'default' row, so a
 * restore loads a second one: notif_provider_restore_default lets that
 * insert replace the row while it is still exactly as CREATE EXTENSION
 * made it (every column at its default); a 'default' row that someone has
 * configured is never replaced, and an insert of another then fails on the
 * primary key as before.
 */
SELECT pg_catalog.pg_extension_config_dump('notif_provider', '');

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
 * What of a provider's answer is kept
 * --------------------------------------------------------------------- */

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
 * Credentials travel over TLS only
 * --------------------------------------------------------------------- */

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
 * Rows written before 1.3 are not checked (NOT VALID): a provider that
 * sends credentials over plain http keeps working, and this update warns
 * about it once; the row is refused at its next change until its url is
 * https://.
 */
DO $$
DECLARE
    p record;
    msg text;
    detail text;
BEGIN
    FOR p IN SELECT name, url, headers, auth, credentials FROM notif_provider ORDER BY name
    LOOP
        BEGIN
            PERFORM notif_transport_check(p.url, p.headers, p.auth, p.credentials);
        EXCEPTION WHEN check_violation THEN
            GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, detail = PG_EXCEPTION_DETAIL;
            RAISE WARNING 'provider "%": %', p.name, msg
                USING DETAIL = detail,
                      HINT = 'It keeps working; from 1.3 the row is refused at its next change, and by a restore of a dump, until its url is https://.';
        END;
    END LOOP;
END;
$$;

ALTER TABLE notif_provider
    ADD CONSTRAINT notif_provider_transport_check
    CHECK (notif_transport_check(url, headers, auth, credentials)) NOT VALID;

/* ---------------------------------------------------------------------
 * Resolving the unknown: a provider that deduplicates, and delivery
 * reports waited for
 *
 * A call that ends ambiguous (a timeout after sending, a reset, a 5xx) may
 * or may not have been acted on.  A provider that promises to drop a
 * repeat of the same idempotency key for a while makes a retry inside that
 * while safe for both deliveries: an at_most_once job is then retried
 * instead of being left possibly lost, and an at_least_once retry sends no
 * duplicate.  The rows of the lifecycle (notif_transitions()):
 * amo_unknown_dedup_retry, alo_retry_in_dedup_window and
 * amo_dedup_window_passed.  Docs: doc/guide.md, "Choosing the delivery";
 * doc/reference.md, notif_provider.dedup_window.
 * --------------------------------------------------------------------- */

/*
 * dedup_window: how long the provider drops a repeat of a key it received
 * (counted from its first copy); NULL: it does not promise it.  It needs
 * the header that carries the key.  A retry is made only when it reaches
 * the provider inside the window: it must start before the job's creation
 * plus dedup_window less the provider's timeout.
 */
ALTER TABLE notif_provider
    ADD COLUMN dedup_window interval,
    ADD CONSTRAINT notif_provider_dedup_window_check
        CHECK (dedup_window IS NULL OR (dedup_window > interval '0' AND dedup_window <= interval '100 years'
                                         AND isfinite(dedup_window) AND idempotency_header IS NOT NULL));

/*
 * resolved_by: how the job's last ambiguous call was resolved
 * ('dedup_window': retried inside the provider's window; 'report': a
 * delivery report came before its retry, below); NULL when it was not, or
 * the job never had one.
 */
ALTER TABLE notif_job
    ADD COLUMN resolved_by text
        CONSTRAINT notif_job_resolved_by_check CHECK (resolved_by IN ('dedup_window', 'report', 'lookup_found', 'lookup_not_found'));

COMMENT ON COLUMN notif_provider.dedup_window IS 'how long the provider drops a repeat of a key: ambiguous calls are retried inside it';
COMMENT ON COLUMN notif_job.resolved_by IS 'how the last ambiguous call was resolved: dedup_window, report, lookup_found or lookup_not_found; NULL: not resolved';

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
ALTER TABLE notif_provider
    ADD COLUMN lookup_url text
        CONSTRAINT notif_provider_lookup_url_check
        CHECK (lookup_url ~* '^https?://[^[:space:]]+$' AND strpos(lookup_url, '{key}') > 0),
    ADD COLUMN lookup_method text NOT NULL DEFAULT 'GET'
        CONSTRAINT notif_provider_lookup_method_check CHECK (lookup_method IN ('GET', 'HEAD')),
    ADD COLUMN lookup_headers jsonb
        CONSTRAINT notif_provider_lookup_headers_check CHECK (
            jsonb_typeof(lookup_headers) = 'object'
            AND NOT jsonb_path_exists(lookup_headers, '$.* ? (@.type() != "string")')
            AND NOT jsonb_path_exists(lookup_headers,
                    '$.keyvalue() ? (!(@.key like_regex "^[-!#$%&''*+.^_`|~0-9A-Za-z]+$") || @.value like_regex "[\\r\\n]")')),
    ADD COLUMN lookup_found int[] NOT NULL DEFAULT '{200}',
    ADD COLUMN lookup_not_found int[] NOT NULL DEFAULT '{404}',
    ADD COLUMN lookup_field text
        CONSTRAINT notif_provider_lookup_field_check CHECK (lookup_field ~ '^[^[:cntrl:].]+(\.[^[:cntrl:].]+)*$' AND octet_length(lookup_field) <= 255),
    ADD COLUMN lookup_found_values text[],
    ADD COLUMN lookup_not_found_values text[],
    ADD CONSTRAINT notif_provider_lookup_status_check
        CHECK (cardinality(lookup_found) > 0 AND NOT (lookup_found && lookup_not_found)
               AND array_position(lookup_found || lookup_not_found, NULL) IS NULL
               -- found is an answer, never an error a gateway may give
               AND 200 <= ALL (lookup_found) AND 399 >= ALL (lookup_found)
               AND 100 <= ALL (lookup_not_found) AND 599 >= ALL (lookup_not_found)),
    ADD CONSTRAINT notif_provider_lookup_field_values_check
        CHECK ((lookup_field IS NULL) = (lookup_found_values IS NULL)
               AND (lookup_not_found_values IS NULL OR lookup_field IS NOT NULL)
               AND array_position(lookup_found_values || lookup_not_found_values, NULL) IS NULL
               -- a HEAD answer has no body to read a field in
               AND NOT (lookup_method = 'HEAD' AND lookup_field IS NOT NULL)),
    -- the provider's headers (its credentials) go only where its calls go:
    -- a lookup elsewhere names its own
    ADD CONSTRAINT notif_provider_lookup_origin_check
        CHECK (lookup_url IS NULL OR lookup_headers IS NOT NULL
               OR lower(substring(lookup_url FROM '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*'))
                  IS NOT DISTINCT FROM lower(substring(url FROM '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*')));

-- the lookup's credentials (its headers, else the provider's) never travel in clear
ALTER TABLE notif_provider
    ADD CONSTRAINT notif_provider_lookup_transport_check
    CHECK (lookup_url IS NULL OR notif_transport_check(lookup_url, coalesce(lookup_headers, headers), NULL, NULL));

COMMENT ON COLUMN notif_provider.lookup_url IS 'status lookup asked before an at_least_once retry after an ambiguous call; {key} is the job''s key, percent-encoded';
COMMENT ON COLUMN notif_provider.lookup_method IS 'the status lookup''s method: GET or HEAD';
COMMENT ON COLUMN notif_provider.lookup_headers IS 'the status lookup''s headers (NULL: the provider''s headers)';
COMMENT ON COLUMN notif_provider.lookup_found IS 'HTTP statuses of a lookup answer that mean the provider has the message';
COMMENT ON COLUMN notif_provider.lookup_not_found IS 'HTTP statuses of a lookup answer that mean it has not';
COMMENT ON COLUMN notif_provider.lookup_field IS 'field of the JSON lookup answer (a dotted path) whose value says found or not found';
COMMENT ON COLUMN notif_provider.lookup_found_values IS 'values of lookup_field that mean found';
COMMENT ON COLUMN notif_provider.lookup_not_found_values IS 'values of lookup_field that mean not found';

/*
 * notif_redrive(ids, status) as in 1.2, and the re-driven job starts with
 * no resolution: a retry an operator asks for is not one made for a
 * provider's window, whatever the job's last drive did.
 */
CREATE OR REPLACE FUNCTION notif_redrive(ids bigint[], status text)
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

/*
 * resolve_wait: how long an at_least_once type holds the retry of an
 * ambiguous call for a delivery report of the job (as far as its deadline
 * allows: the retry still starts a provider's timeout before it); 0: no
 * wait.  Row alo_retry_after_report_wait.
 */
ALTER TABLE notif_type
    ADD COLUMN resolve_wait interval NOT NULL DEFAULT interval '0'
        CONSTRAINT notif_type_resolve_wait_check
            CHECK (resolve_wait >= interval '0' AND resolve_wait <= interval '100 years' AND isfinite(resolve_wait));

COMMENT ON COLUMN notif_type.resolve_wait IS 'how long the retry of an ambiguous call waits for a delivery report';

/*
 * notif_dlr as in 1.1, and a delivered report for a job queued again after
 * an ambiguous call ends it 'sent' (resolved_by 'report'): the call it
 * would retry did deliver.  Rows report_resolves, report_recorded.
 */
CREATE OR REPLACE FUNCTION notif_dlr(key text, delivered boolean,
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

/*
 * notif_stats as in 1.2, but jobs whose last ambiguous call was resolved
 * are left out of estimated_lost and estimated_duplicates (its columns are
 * those of 1.2: a router reads them whole on every shard).
 */
CREATE OR REPLACE VIEW notif_stats AS
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
