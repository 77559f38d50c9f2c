-- enqueue: notif_enqueue inserts a queued job, once per (user_id, kind, order_id).

INSERT INTO notif_type VALUES ('giao_dich', 'at_least_once', 5, NULL);
INSERT INTO notif_type (code, delivery, max_tries, lane) VALUES ('promo', 'at_most_once', 1, 'bulk');
-- otp (at_least_once, 3 tries within 15 seconds) exists from the schema test

-- the example from the README resolves without casts (order_id bigint)
SELECT notif_enqueue(812, 'giao_dich', 55001, '{"to":"+84901234567","text":"GD 55001: -500.000 VND"}') > 0 AS enqueued;
-- and with a text order_id
SELECT notif_enqueue(812, 'otp', 'login-7f3a', '{"to":"+84901234567","text":"Ma OTP: 482913"}') > 0 AS enqueued;
-- payload and not_before have defaults
SELECT notif_enqueue(813, 'promo', 'blackfriday') > 0 AS enqueued;

SELECT user_id, kind, order_id, payload, status, tries, outcome, http_status, last_error, sent_at,
       next_at = created_at AS due_now,
       deadline_at - created_at AS deadline
  FROM notif_job ORDER BY id;

-- both overloads name the same job: 55001 and '55001' are one order_id
SELECT notif_enqueue(812, 'giao_dich', 55001) = notif_enqueue(812, 'giao_dich', '55001') AS same_job;

-- a repeated key returns the existing id and writes nothing; the first payload stands
SELECT notif_enqueue(812, 'otp', 'login-7f3a', '{"to":"+84901234567","text":"Ma OTP: 000000"}')
     = (SELECT id FROM notif_job WHERE order_id = 'login-7f3a') AS existing_id;
SELECT payload->>'text' AS text FROM notif_job WHERE order_id = 'login-7f3a';
SELECT count(*) AS jobs FROM notif_job;

-- a twin (same user, same text, another order) is a new job
SELECT notif_enqueue(812, 'giao_dich', 55002, '{"to":"+84901234567","text":"GD 55001: -500.000 VND"}')
    <> notif_enqueue(812, 'giao_dich', 55001) AS twin_is_new;
SELECT count(*) AS jobs FROM notif_job;

-- not_before schedules the first attempt
SELECT notif_enqueue(900, 'giao_dich', 1, '{}', now() + interval '1 hour') > 0 AS enqueued;
SELECT next_at - created_at AS waits, deadline_at FROM notif_job WHERE user_id = 900;
-- within the deadline it is fine, after it is an error
SELECT notif_enqueue(900, 'otp', 1, '{}', now() + interval '10 seconds') > 0 AS enqueued;
SELECT try($$SELECT notif_enqueue(900, 'otp', 2, '{}', now() + interval '16 seconds')$$) AS after_deadline;
-- a not_before in the past is now: the job takes its place behind those
-- waiting; infinity and -infinity are refused (22008), on both insert paths
SELECT notif_enqueue(901, 'giao_dich', 'past', '{}', now() - interval '1 year') > 0 AS enqueued;
SELECT try($$SELECT notif_enqueue(901, 'giao_dich', 'inf', '{}', 'infinity')$$) AS infinity,
       try($$SELECT notif_enqueue(901, 'giao_dich', 'inf', '{}', '-infinity')$$) AS minus_infinity;
CREATE FUNCTION keep_job() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER keep_before BEFORE INSERT ON notif_job FOR EACH ROW EXECUTE FUNCTION keep_job();
SELECT notif_enqueue(901, 'giao_dich', 'past-spi', '{}', now() - interval '1 year') > 0 AS enqueued_spi;
SELECT try($$SELECT notif_enqueue(901, 'giao_dich', 'inf', '{}', '-infinity')$$) AS minus_infinity_spi;
DROP TRIGGER keep_before ON notif_job;
DROP FUNCTION keep_job();
SELECT order_id, next_at = created_at AS at_once FROM notif_job WHERE user_id = 901 ORDER BY order_id;
DELETE FROM notif_job WHERE user_id = 901;

-- transactional: an enqueue in a transaction that rolls back never existed
BEGIN;
SELECT notif_enqueue(1000, 'otp', 'rolled-back') > 0 AS enqueued;
SELECT count(*) AS inside FROM notif_job WHERE user_id = 1000;
ROLLBACK;
SELECT count(*) AS after_rollback FROM notif_job WHERE user_id = 1000;
-- and the key is free again
SELECT notif_enqueue(1000, 'otp', 'rolled-back') > 0 AS enqueued;
-- a savepoint too
BEGIN;
SAVEPOINT s;
SELECT notif_enqueue(1001, 'otp', 'sp') > 0 AS enqueued;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT count(*) AS after_savepoint_rollback FROM notif_job WHERE user_id = 1001;

-- bad input: a clear error, the fitting SQLSTATE, nothing written
SELECT count(*) AS jobs_before FROM notif_job \gset
SELECT notif_enqueue(NULL, 'otp', 'x');
SELECT notif_enqueue(1, NULL, 'x');
SELECT notif_enqueue(1, '', 'x');
SELECT notif_enqueue(1, 'otp', NULL::text);
SELECT notif_enqueue(1, 'otp', NULL::bigint);
SELECT notif_enqueue(1, 'otp', '');
SELECT notif_enqueue(1, 'otp', E'a\r\nX-Injected: 1');
SELECT notif_enqueue(1, 'otp', repeat('x', 201));
SELECT notif_enqueue(1, 'sms_otp', 'x');
SELECT notif_enqueue(1, 'otp', 'x', NULL);
SELECT notif_enqueue(1, 'otp', 'x', '[1, 2]');
SELECT notif_enqueue(1, 'otp', 'x', '"text"');
SELECT notif_enqueue(1, 'otp', 'x', jsonb_build_object('text', repeat('x', 70000)));
SELECT try($$SELECT notif_enqueue(NULL, 'otp', 'x')$$) AS null_user_id,
       try($$SELECT notif_enqueue(1, '', 'x')$$) AS empty_kind,
       try($$SELECT notif_enqueue(1, 'otp', '')$$) AS empty_order_id;
SELECT try($$SELECT notif_enqueue(1, 'sms_otp', 'x')$$) AS unknown_kind;
SELECT try($$SELECT notif_enqueue(1, 'otp', 'x', '[]')$$) AS not_an_object;
SELECT try($$SELECT notif_enqueue(1, 'otp', 'x', jsonb_build_object('t', repeat('x', 70000)))$$) AS too_large;
SELECT try($$SELECT notif_enqueue(1, 'otp', 'x', '{}', now() + interval '1 day')$$) AS after_deadline;
SELECT count(*) = :jobs_before AS nothing_written FROM notif_job;

-- the payload limit is a setting (superuser only)
SET notif_deliver.max_payload_size = '128kB';
SELECT notif_enqueue(1, 'otp', 'big', jsonb_build_object('text', repeat('x', 70000))) > 0 AS enqueued;
RESET notif_deliver.max_payload_size;
SHOW notif_deliver.max_payload_size;

-- notif_type changes reach the session's cache of types at once
UPDATE notif_type SET deadline = interval '1 minute' WHERE code = 'otp';
SELECT notif_enqueue(2000, 'otp', 'after-update') > 0 AS enqueued;
SELECT deadline_at - created_at AS deadline FROM notif_job WHERE user_id = 2000;
-- a rolled-back change is forgotten too
BEGIN;
UPDATE notif_type SET deadline = interval '2 minutes' WHERE code = 'otp';
SELECT notif_enqueue(2001, 'otp', 'inside') > 0 AS enqueued;
ROLLBACK;
SELECT notif_enqueue(2002, 'otp', 'after-rollback') > 0 AS enqueued;
SELECT user_id, deadline_at - created_at AS deadline FROM notif_job WHERE user_id IN (2001, 2002) ORDER BY 1;
-- a new type is found, a deleted one is unknown again
INSERT INTO notif_type VALUES ('tmp', 'at_most_once', 1, NULL);
SELECT notif_enqueue(3000, 'tmp', 1) > 0 AS enqueued;
DELETE FROM notif_job WHERE kind = 'tmp';
DELETE FROM notif_type WHERE code = 'tmp';
SELECT try($$SELECT notif_enqueue(3000, 'tmp', 2)$$) AS deleted_kind;
-- a type with jobs cannot be deleted; renaming it follows into its jobs
SELECT try($$DELETE FROM notif_type WHERE code = 'promo'$$) AS delete_in_use;
UPDATE notif_type SET code = 'khuyen_mai' WHERE code = 'promo';
SELECT kind, order_id FROM notif_job WHERE user_id = 813;
SELECT notif_enqueue(813, 'khuyen_mai', 'blackfriday') = (SELECT id FROM notif_job WHERE user_id = 813) AS same_job;
SELECT try($$SELECT notif_enqueue(813, 'promo', 'blackfriday')$$) AS old_code;
UPDATE notif_type SET code = 'promo' WHERE code = 'khuyen_mai';

-- the caller's search_path cannot redirect enqueue to another table
CREATE SCHEMA decoy;
CREATE TABLE decoy.notif_job (LIKE notif_job);
SET search_path = decoy, public;
SELECT notif_enqueue(4000, 'otp', 'decoy') > 0 AS enqueued;
RESET search_path;
SELECT (SELECT count(*) FROM decoy.notif_job) AS in_decoy,
       (SELECT count(*) FROM notif_job WHERE user_id = 4000) AS in_outbox;
DROP SCHEMA decoy CASCADE;
