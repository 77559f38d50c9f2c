-- operations: delivery reports (notif_dlr), re-drive (notif_retry), cancel
-- (notif_cancel) and notif_workers().  (The workers watch another
-- database: nothing here is sent.)

INSERT INTO notif_type (code, delivery, max_tries, deadline)
VALUES ('op_alo', 'at_least_once', 3, '15 seconds'),
       ('op_amo', 'at_most_once', 1, NULL);

SELECT notif_enqueue(1, 'op_alo', 'a1') AS alo_queued,
       notif_enqueue(2, 'op_alo', 'a2') AS alo_failed,
       notif_enqueue(3, 'op_alo', 'a3') AS alo_expired,
       notif_enqueue(4, 'op_alo', 'a4') AS alo_sent,
       notif_enqueue(5, 'op_amo', 'm5') AS amo_unknown,
       notif_enqueue(6, 'op_amo', 'm6') AS amo_rejected \gset

-- what the worker would have left: three tries each, then an end
-- error texts without the job ids
CREATE FUNCTION try_n(sql text) RETURNS text LANGUAGE sql
RETURN regexp_replace(try(sql), 'job -?[0-9]+', 'job N');

UPDATE notif_job SET status = 'failed', tries = 3, outcome = 'unknown', next_at = now() - interval '1 minute',
                     deadline_at = now() - interval '1 minute', last_error = 'timed out'
 WHERE id = :alo_failed;
INSERT INTO notif_attempt (job_id, try, started_at, outcome)
SELECT :alo_failed, t, now() - interval '2 minutes', 'unknown' FROM generate_series(1, 3) t;
UPDATE notif_job SET status = 'expired', tries = 2, outcome = 'unreached', next_at = now() - interval '1 minute'
 WHERE id = :alo_expired;
UPDATE notif_job SET status = 'sent', tries = 1, outcome = 'accepted' WHERE id = :alo_sent;
UPDATE notif_job SET status = 'sent', tries = 1, outcome = 'unknown' WHERE id = :amo_unknown;
UPDATE notif_job SET status = 'failed', tries = 1, outcome = 'rejected', http_status = 400 WHERE id = :amo_rejected;

---------------------------------------------------------------------------
-- notif_retry(job_id): a failed job goes back to the queue, due now, with
-- fresh tries and a fresh deadline; its attempts are numbered on from 3
SELECT notif_retry(:alo_failed);
SELECT status, tries, earlier_tries, next_at <= now() AS due,
       deadline_at BETWEEN now() + interval '14 seconds' AND now() + interval '15 seconds' AS fresh_deadline,
       outcome, last_error
  FROM notif_job WHERE id = :alo_failed;
SELECT count(*) AS attempts_kept FROM notif_attempt WHERE job_id = :alo_failed;

-- only failed or expired jobs
SELECT try_n('SELECT notif_retry(' || :alo_queued || ')');
SELECT try_n('SELECT notif_retry(' || :alo_sent || ')');
SELECT try('SELECT notif_retry(-1)');
SELECT try('SELECT notif_retry(NULL::bigint)');
-- an at_most_once job whose call ended unknown may have been delivered:
-- refused unless forced
SELECT try_n('SELECT notif_retry(' || :amo_unknown || ')');
SELECT status FROM notif_job WHERE id = :amo_unknown;
SELECT notif_retry(:amo_unknown, force => true);
SELECT status, tries, earlier_tries, deadline_at IS NULL AS no_deadline FROM notif_job WHERE id = :amo_unknown;
-- a rejected at_most_once job was not delivered: no force needed
SELECT notif_retry(:amo_rejected);
SELECT status, outcome FROM notif_job WHERE id = :amo_rejected;

-- notif_retry(kind, since): every failed and expired job of a type since then
UPDATE notif_job SET status = 'failed', tries = 3, outcome = 'unknown', next_at = now() - interval '1 hour'
 WHERE id = :alo_failed;
SELECT notif_retry('op_alo', now() - interval '10 minutes') AS redriven;   -- the expired one only
SELECT id = :alo_expired AS is_expired_one, status FROM notif_job
 WHERE kind = 'op_alo' AND earlier_tries > 0 AND status = 'queued' AND id <> :alo_failed;
SELECT notif_retry('op_alo', now() - interval '1 day') AS redriven;        -- the older failed one
SELECT status, tries, earlier_tries FROM notif_job WHERE id = :alo_failed;
SELECT try($$SELECT notif_retry('nope', now())$$);
SELECT try($$SELECT notif_retry('op_alo', NULL::timestamptz)$$);
-- at_most_once jobs that may have been delivered are left alone, with a notice
UPDATE notif_job SET status = 'sent', tries = 1, outcome = 'unknown', next_at = now() WHERE kind = 'op_amo';
SELECT notif_retry('op_amo', now() - interval '1 hour') AS redriven;
SELECT notif_retry('op_amo', now() - interval '1 hour', force => true) AS redriven;

---------------------------------------------------------------------------
-- notif_cancel: a queued job never goes out; it ends 'failed', 'cancelled'
SELECT notif_cancel(:alo_queued);
SELECT status, last_error FROM notif_job WHERE id = :alo_queued;
SELECT try_n('SELECT notif_cancel(' || :alo_queued || ')');
SELECT try_n('SELECT notif_cancel(' || :alo_sent || ')');
SELECT try('SELECT notif_cancel(-1)');
SELECT try('SELECT notif_cancel(NULL)');
-- a re-drive of the whole type leaves a cancelled job cancelled ...
SELECT notif_retry('op_alo', now() - interval '1 hour') AS redriven;
SELECT status, last_error FROM notif_job WHERE id = :alo_queued;
-- ... but it can be brought back on purpose
SELECT notif_retry(:alo_queued);
SELECT status FROM notif_job WHERE id = :alo_queued;

---------------------------------------------------------------------------
-- notif_dlr: a report names its job by key; several delivered reports for
-- one key are copies; a report no job matches is kept as orphaned
SELECT notif_dlr('op_alo:4:a4', true) = :alo_sent AS matched;
SELECT notif_dlr('op_alo:4:a4', true, '2026-01-01 00:00+00') = :alo_sent AS matched_again;
SELECT notif_dlr('op_alo:4:nope', true) AS unknown_key,
       notif_dlr('no colons', false) AS malformed,
       notif_dlr('op_alo:99999999999999999999:a4', true) AS user_id_too_big,
       notif_dlr('op_alo:4:a4:x', false) AS order_id_with_colon;
SELECT key, job_id = :alo_sent AS is_job, delivered, reported_at = '2026-01-01 00:00+00' AS reported_then
  FROM notif_dlr ORDER BY id;
SELECT try($$SELECT notif_dlr(NULL, true)$$);
SELECT try($$SELECT notif_dlr('op_alo:4:a4', NULL)$$);
-- an order_id may hold ':'
SELECT notif_enqueue(7, 'op_alo', 'x:y') AS colon_job \gset
SELECT notif_dlr('op_alo:7:x:y', true) = :colon_job AS matched_colon;

-- (1.4) what reports can add: at most 32 rows per job (every report still
-- returns the job's id); the reports no job matches in one of 65,536 slots
-- by their key's hash, the newest in each kept
SELECT count(*) FILTER (WHERE notif_dlr('op_alo:7:x:y', false) = :colon_job) AS reports_matched
  FROM generate_series(1, 40);
SELECT count(*) AS rows_of_the_job FROM notif_dlr WHERE job_id = :colon_job;
SELECT count(notif_dlr('op_none:' || g || ':o', true)) AS none_matched FROM generate_series(1, 2000) g;
SELECT count(*) < 2000 AS fewer_rows, count(*) = count(DISTINCT hashtext(key) & 65535) AS one_per_slot,
       count(*) = count(*) FILTER (WHERE orphan_slot = hashtext(key) & 65535) AS slot_of_its_key
  FROM notif_dlr WHERE key LIKE 'op\_none:%';
SELECT notif_dlr('op_none:1:o', false) IS NULL AS orphaned_again;
SELECT count(*) AS rows_of_the_key, bool_and(NOT delivered) AS the_newest FROM notif_dlr WHERE key = 'op_none:1:o';

-- (1.4) a report that names its provider matches only a job whose last
-- call went to that provider, and ends it only then
SELECT notif_enqueue(8, 'op_alo', 'w') AS waiting_job \gset
UPDATE notif_job SET tries = 1, outcome = 'unknown', provider = 'default' WHERE id = :waiting_job;
SELECT notif_dlr('op_alo:8:w', true, now(), 'other_gateway') IS NULL AS other_provider_orphaned;
SELECT status, resolved_by FROM notif_job WHERE id = :waiting_job;
SELECT notif_dlr('op_alo:8:w', true, now(), 'default') = :waiting_job AS its_provider_matched;
SELECT status, resolved_by FROM notif_job WHERE id = :waiting_job;
SELECT notif_dlr('op_alo:8:w', true, now(), NULL) = :waiting_job AS any_provider_matched;
SELECT count(*) FILTER (WHERE job_id = :waiting_job) AS matched_rows,
       count(*) FILTER (WHERE job_id IS NULL) AS orphaned_rows
  FROM notif_dlr WHERE key = 'op_alo:8:w';

-- a webhook role needs only EXECUTE on notif_dlr
CREATE ROLE notif_webhook LOGIN;
GRANT USAGE ON SCHEMA public TO notif_webhook;
GRANT EXECUTE ON FUNCTION notif_dlr(text, boolean, timestamptz) TO notif_webhook;
SET ROLE notif_webhook;
SELECT notif_dlr('op_alo:4:a4', false) IS NOT NULL AS recorded;
SELECT try('SELECT count(*) FROM notif_dlr');
SELECT try('SELECT notif_retry(1)');
SELECT try('SELECT notif_cancel(1)');
-- (the variant that names the provider is granted on its own)
SELECT try($$SELECT notif_dlr('op_alo:4:a4', true, now(), 'default')$$);
RESET ROLE;
SELECT count(*) AS reports_of_a4 FROM notif_dlr WHERE job_id = :alo_sent;

-- reports go with their job
DELETE FROM notif_job WHERE id = :alo_sent;
SELECT count(*) AS reports_left_of_a4 FROM notif_dlr WHERE key = 'op_alo:4:a4';

---------------------------------------------------------------------------
-- notif_workers(): here the launcher waits for the extension in its own
-- database (notif_deliver.database); no lane has a sender
SELECT role, lane, state, in_flight, sent_last_minute, pid > 0 AS has_pid FROM notif_workers();
SELECT has_function_privilege('pg_monitor', 'notif_workers()', 'EXECUTE') AS monitor_can_call;
SELECT application_name, backend_type FROM pg_stat_activity WHERE backend_type LIKE 'notif_deliver%';

REVOKE ALL ON FUNCTION notif_dlr(text, boolean, timestamptz) FROM notif_webhook;
REVOKE USAGE ON SCHEMA public FROM notif_webhook;
DROP ROLE notif_webhook;
DELETE FROM notif_dlr;
DELETE FROM notif_job WHERE kind LIKE 'op\_%';
DELETE FROM notif_type WHERE code LIKE 'op\_%';
DROP FUNCTION try_n(text);
