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
