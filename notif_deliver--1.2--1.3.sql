/*
 * notif_deliver 1.2 -> 1.3
 *
 * Plain SQL, run by ALTER EXTENSION notif_deliver UPDATE (a fresh CREATE
 * EXTENSION runs notif_deliver--1.3.sql instead).  Delivery pauses while
 * the 1.3 library waits for this update, and resumes when it commits.
 *
 * Each part below says what it adds; docs: doc/reference.md, "Upgrading".
 *
 * EVERY CHANGE TO 1.3 GOES INTO BOTH FILES: this one and
 * notif_deliver--1.3.sql, the full install script that CREATE EXTENSION
 * runs.  The regression test sql/upgrade.sql proves that they agree (it
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
 * does, as src/excerpt.c reads one: Authorization, X-Api-Key, Cookie,
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
    -- the names src/excerpt.c masks the values of
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
 * Resolving the unknown: a provider that deduplicates
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
        CHECK (dedup_window IS NULL OR (dedup_window > interval '0' AND idempotency_header IS NOT NULL));

/*
 * resolved_by: how the job's last ambiguous call was resolved
 * ('dedup_window': retried inside the provider's window); NULL when it was
 * not, or the job never had one.
 */
ALTER TABLE notif_job
    ADD COLUMN resolved_by text
        CONSTRAINT notif_job_resolved_by_check CHECK (resolved_by IN ('dedup_window'));

COMMENT ON COLUMN notif_provider.dedup_window IS 'how long the provider drops a repeat of a key: ambiguous calls are retried inside it';
COMMENT ON COLUMN notif_job.resolved_by IS 'how the last ambiguous call was resolved: dedup_window; NULL: not resolved';

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
