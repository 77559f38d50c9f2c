-- upgrade: ALTER EXTENSION notif_deliver UPDATE from 1.0 to 1.1, then on
-- to the current version (1.1 -> 1.2 -> 1.3 -> 1.4), on a database that has jobs:
-- nothing is lost, the new objects work at once, and the result is what
-- CREATE EXTENSION makes.

SELECT current_database() AS regress_db \gset
CREATE DATABASE notif_upgrade;
\c notif_upgrade

CREATE EXTENSION notif_deliver VERSION '1.0';
SELECT extversion FROM pg_extension WHERE extname = 'notif_deliver';
INSERT INTO notif_type VALUES ('otp', 'at_least_once', 3, '15 seconds');
SELECT count(notif_enqueue(g, 'otp', 'o' || g, jsonb_build_object('n', g))) AS enqueued
  FROM generate_series(1, 1000) g;
UPDATE notif_job SET status = 'failed', tries = 3, outcome = 'unknown' WHERE user_id <= 10;
INSERT INTO notif_attempt (job_id, try, started_at, outcome)
SELECT id, t, now(), 'unknown' FROM notif_job, generate_series(1, 3) t WHERE user_id <= 10;
CREATE TEMP TABLE before_update AS SELECT * FROM notif_job;

ALTER EXTENSION notif_deliver UPDATE TO '1.1';
SELECT extversion FROM pg_extension WHERE extname = 'notif_deliver';

-- every job is still there, unchanged, with the new column at its default
SELECT count(*) AS jobs,
       count(*) FILTER (WHERE earlier_tries = 0) AS earlier_tries_zero,
       count(*) FILTER (WHERE (j.id, j.user_id, j.kind, j.order_id, j.payload, j.status, j.tries,
                               j.created_at, j.next_at, j.deadline_at, j.outcome)
                              IS NOT DISTINCT FROM
                              (b.id, b.user_id, b.kind, b.order_id, b.payload, b.status, b.tries,
                               b.created_at, b.next_at, b.deadline_at, b.outcome)) AS unchanged
  FROM notif_job j JOIN before_update b USING (id);
-- enqueue goes on, and the 1.1 functions work on the old jobs
SELECT notif_enqueue(5000, 'otp', 'after') > 0 AS enqueued_after;
SELECT notif_retry('otp', now() - interval '1 hour') AS redriven;
SELECT count(*) FILTER (WHERE status = 'queued' AND earlier_tries = 3) AS redriven_jobs FROM notif_job;
SELECT notif_dlr('otp:1:o1', true) IS NOT NULL AS report_matched;
SELECT kind, jobs, failed, queued_now, ambiguous_attempts FROM notif_stats;

-- and on to the current version, with the same jobs, and a provider that
-- sends a credential over plain http (allowed before 1.3)
CREATE TEMP TABLE before_second_update AS SELECT * FROM notif_job;
UPDATE notif_provider SET url = 'http://sms.example.com/send',
       headers = '{"Authorization": "Bearer s3cr3t"}' WHERE name = 'default';
ALTER EXTENSION notif_deliver UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'notif_deliver';
-- (1.3: that provider was named in a warning; it keeps working, and its
-- next change must give it an https:// url)
SELECT url FROM notif_provider WHERE name = 'default';
\set SHOW_CONTEXT never
UPDATE notif_provider SET timeout = '3 seconds' WHERE name = 'default';
\set SHOW_CONTEXT errors
UPDATE notif_provider SET url = 'https://sms.example.com/send' WHERE name = 'default';
-- (1.2 adds last_started_at and last_ended_at at the end, NULL: no call recorded
-- since; 1.3 resolved_by, NULL: no ambiguous call resolved; 1.4 provider,
-- NULL: no call recorded since, claimed_provider, NULL: not held,
-- fallback_of, NULL: enqueued by the app, batch_id, NULL: no batch, and
-- traceparent, NULL: none given)
SELECT count(*) AS jobs,
       count(*) FILTER (WHERE (j.*)::text = rtrim((b.*)::text, ')') || ',,,,,,,,)') AS unchanged
  FROM notif_job j JOIN before_second_update b USING (id);
-- the calls made before the update are still all there, in notif_calls too
SELECT (SELECT count(*) FROM notif_attempt) AS attempts, (SELECT count(*) FROM notif_calls) AS calls;

-- the updated schema is the one a fresh install makes: the same columns
-- in the same order, constraints, indexes, functions and view
\set schema_fingerprint `cat sql/schema_fingerprint.sql`
:schema_fingerprint \gset updated_
\c :regress_db
:schema_fingerprint \gset fresh_
SELECT :'updated_fingerprint' = :'fresh_fingerprint' AS same_schema_as_fresh_install;
SELECT extversion FROM pg_extension WHERE extname = 'notif_deliver';
DROP DATABASE notif_upgrade;
