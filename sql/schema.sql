-- schema: the tables, their column order, defaults and CHECKs (the contract).

SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod) AS type,
       a.attnotnull AS not_null, pg_get_expr(d.adbin, d.adrelid) AS default
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE c.relname IN ('notif_provider', 'notif_type', 'notif_job', 'notif_attempt', 'notif_dlr', 'notif_shard',
                     'notif_active', 'notif_active_built', 'notif_lane')
   AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY c.relname, a.attnum;

SELECT a.attname, a.attidentity FROM pg_attribute a
 WHERE a.attrelid = 'notif_job'::regclass AND a.attidentity <> '';

-- keys, foreign keys and CHECKs (NOT NULL, a constraint of its own from
-- PostgreSQL 18 on, is in the columns' list above)
SELECT conrelid::regclass AS tab, conname, pg_get_constraintdef(oid) AS def
  FROM pg_constraint
 WHERE contype <> 'n'
   AND conrelid IN ('notif_provider'::regclass, 'notif_type'::regclass,
                    'notif_job'::regclass, 'notif_attempt'::regclass, 'notif_dlr'::regclass,
                    'notif_shard'::regclass, 'notif_active'::regclass, 'notif_lane'::regclass)
 ORDER BY 1::text, 2;

-- indexes: none on a column a status change writes (its updates are
-- heap-only); the work (queued and held jobs) is in notif_active
SELECT indexrelid::regclass AS index, pg_get_indexdef(indexrelid) AS def
  FROM pg_index WHERE indrelid IN ('notif_job'::regclass, 'notif_active'::regclass)
 ORDER BY indrelid::regclass::text, 1::text;
SELECT relname, relpersistence, reloptions FROM pg_class
 WHERE oid IN ('notif_job'::regclass, 'notif_active'::regclass, 'notif_active_built'::regclass)
 ORDER BY 1;

-- the extension creates the 'default' provider, not configured yet
SELECT * FROM notif_provider;

-- the first four columns of notif_type are positional
INSERT INTO notif_type VALUES ('otp', 'at_least_once', 3, interval '15 seconds');
SELECT * FROM notif_type;

-- the CHECKs, one bad value each (nothing is written)
SELECT try($$INSERT INTO notif_type VALUES ('t1', 'exactly_once', 1, NULL)$$);
SELECT try($$INSERT INTO notif_type VALUES ('t1', 'at_most_once', 0, NULL)$$);
SELECT try($$INSERT INTO notif_type VALUES ('t1', 'at_most_once', 1, '0 seconds')$$);
SELECT try($$INSERT INTO notif_type VALUES ('t1', 'at_most_once', 1, '-1 second')$$);
SELECT try($$INSERT INTO notif_type VALUES ('a:b', 'at_most_once', 1, NULL)$$);
SELECT try($$INSERT INTO notif_type VALUES ('', 'at_most_once', 1, NULL)$$);
SELECT try($$INSERT INTO notif_type VALUES ('t1', NULL, 1, NULL)$$);
SELECT try($$INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES ('t1', 'at_most_once', 1, 'nowhere')$$);
SELECT try($$INSERT INTO notif_type (code, delivery, max_tries, lane) VALUES ('t1', 'at_most_once', 1, '')$$);
SELECT try($$INSERT INTO notif_type (code, delivery, max_tries, backoff_min, backoff_max) VALUES ('t1', 'at_most_once', 1, '10 s', '1 s')$$);
SELECT try($$INSERT INTO notif_type (code, delivery, max_tries, backoff_min) VALUES ('t1', 'at_most_once', 1, '-1 s')$$);
SELECT try($$INSERT INTO notif_type (code, delivery, max_tries, retention) VALUES ('t1', 'at_most_once', 1, '0 s')$$);
SELECT try($$INSERT INTO notif_type (code, delivery, max_tries, cost_lost) VALUES ('t1', 'at_most_once', 1, -1)$$);
SELECT try($$INSERT INTO notif_type (code, delivery, max_tries, cost_dup) VALUES ('t1', 'at_most_once', 1, -1)$$);
SELECT try($$INSERT INTO notif_type (code, delivery, max_tries, endpoint_by) VALUES ('t1', 'at_most_once', 1, '')$$);
SELECT try($$INSERT INTO notif_type (code, delivery, max_tries, endpoint_by) VALUES ('t1', 'at_most_once', 1, repeat('m', 64))$$);
SELECT count(*) AS types_written FROM notif_type WHERE code = 't1';

-- (1.4) customers' endpoints: one bad value each
SELECT try($$INSERT INTO notif_endpoint (owner, url) VALUES ('', 'https://a.example/')$$);
SELECT try($$INSERT INTO notif_endpoint (owner, url) VALUES (repeat('o', 201), 'https://a.example/')$$);
SELECT try($$INSERT INTO notif_endpoint (owner, url) VALUES (E'a\nb', 'https://a.example/')$$);
SELECT try($$INSERT INTO notif_endpoint (owner, url) VALUES ('c1', NULL)$$);
SELECT try($$INSERT INTO notif_endpoint (owner, url) VALUES ('c1', 'ftp://a.example/')$$);
SELECT try($$INSERT INTO notif_endpoint (owner, url) VALUES ('c1', 'https://a.example/a b')$$);
SELECT try($$INSERT INTO notif_endpoint (owner, url, secrets) VALUES ('c1', 'https://a.example/', '{}')$$);
SELECT try($$INSERT INTO notif_endpoint (owner, url, secrets) VALUES ('c1', 'https://a.example/', '{whsec_c2VjcmV0, NULL}')$$);
SELECT try($$INSERT INTO notif_endpoint (owner, url, secrets) VALUES ('c1', 'https://a.example/', '{c2VjcmV0}')$$);
SELECT try($$INSERT INTO notif_endpoint (owner, url, secrets) VALUES ('c1', 'https://a.example/', '{"whsec_c2Vj cmV0"}')$$);
SELECT try($$INSERT INTO notif_endpoint (owner, url, secrets) VALUES ('c1', 'https://a.example/', array_fill('whsec_c2VjcmV0'::text, ARRAY[9]))$$);
SELECT try($$INSERT INTO notif_endpoint (owner, url, secrets) VALUES ('c1', 'https://a.example/', '{whsec_c2VjcmV0, whsec_b3RoZXI=}')$$) AS two_secrets;
SELECT count(*) AS endpoints_written FROM notif_endpoint;
DELETE FROM notif_endpoint;

SELECT try($$INSERT INTO notif_lane VALUES ('bulk', 0)$$);
SELECT try($$INSERT INTO notif_lane VALUES ('bulk', 17)$$);
SELECT try($$INSERT INTO notif_lane VALUES ('bulk', NULL)$$);
SELECT try($$INSERT INTO notif_lane VALUES ('a b', 2)$$);
-- names are kept in shared memory in 64 bytes: 63 at most
SELECT try($$INSERT INTO notif_lane VALUES (repeat('é', 32), 2)$$);
SELECT try($$INSERT INTO notif_type (code, delivery, max_tries, lane) VALUES ('t1', 'at_most_once', 1, repeat('é', 32))$$);
SELECT try($$INSERT INTO notif_provider (name) VALUES (repeat('é', 32))$$);
SELECT count(*) AS lanes_written FROM notif_lane;

SELECT try($$INSERT INTO notif_provider (name, format) VALUES ('p1', 'xml')$$);
SELECT try($$INSERT INTO notif_provider (name, url) VALUES ('p1', 'ftp://example.com/x')$$);
SELECT try($$INSERT INTO notif_provider (name, url) VALUES ('p1', 'http://exa mple.com/')$$);
SELECT try($$INSERT INTO notif_provider (name, headers) VALUES ('p1', '[]')$$);
SELECT try($$INSERT INTO notif_provider (name, headers) VALUES ('p1', '{"X-N": 1}')$$);
SELECT try($$INSERT INTO notif_provider (name, headers) VALUES ('p1', '{"Bad Name": "v"}')$$);
SELECT try($$INSERT INTO notif_provider (name, headers) VALUES ('p1', '{"X-A": "v\r\nX-Injected: 1"}')$$);
SELECT try($$INSERT INTO notif_provider (name, idempotency_header) VALUES ('p1', 'Idempotency Key')$$);
SELECT try($$INSERT INTO notif_provider (name, timeout) VALUES ('p1', '0 s')$$);
SELECT try($$INSERT INTO notif_provider (name, connect_timeout) VALUES ('p1', '-1 s')$$);
SELECT try($$INSERT INTO notif_provider (name, max_inflight) VALUES ('p1', 0)$$);
SELECT try($$INSERT INTO notif_provider (name, rate_limit) VALUES ('p1', 0)$$);
SELECT count(*) AS providers_written FROM notif_provider WHERE name = 'p1';
-- a refused row is not shown (its headers and credentials may be secrets):
-- the constraint is named, PostgreSQL's "Failing row contains" is not said
INSERT INTO notif_provider (name, url, headers) VALUES ('p1', 'ftp://sms.example.com', '{"Authorization": "Bearer s3cr3t"}');
UPDATE notif_provider SET headers = '{"Authorization": "Bearer s3cr3t"}', max_inflight = NULL WHERE name = 'default';
DO $$
DECLARE
    c text;
    d text;
BEGIN
    UPDATE notif_provider SET headers = '{"Authorization": "Bearer s3cr3t"}', timeout = '0 s' WHERE name = 'default';
EXCEPTION WHEN check_violation THEN
    GET STACKED DIAGNOSTICS c = CONSTRAINT_NAME, d = PG_EXCEPTION_DETAIL;
    RAISE NOTICE 'constraint %: %', c, d;
END $$;
SELECT headers FROM notif_provider WHERE name = 'default';

-- a well-formed provider with headers and an idempotency header
INSERT INTO notif_provider (name, url, format, headers, idempotency_header, rate_limit)
VALUES ('sms', 'https://sms.example.com/send', 'form',
        '{"Authorization": "Bearer s3cr3t", "X-Tenant": "vn"}', 'Idempotency-Key', 50.5);
SELECT name, url, format, headers, idempotency_header, rate_limit FROM notif_provider WHERE name = 'sms';

-- renaming a provider follows into its types; a provider in use cannot go
UPDATE notif_type SET provider = 'sms' WHERE code = 'otp';
UPDATE notif_provider SET name = 'sms_vn' WHERE name = 'sms';
SELECT code, provider FROM notif_type;
SELECT try($$DELETE FROM notif_provider WHERE name = 'sms_vn'$$);
UPDATE notif_type SET provider = 'default' WHERE code = 'otp';
DELETE FROM notif_provider WHERE name = 'sms_vn';

-- the job table's CHECKs
SELECT try($$INSERT INTO notif_job (user_id, kind, order_id, payload, next_at, status) VALUES (1, 'otp', 'x', '{}', now(), 'lost')$$);
SELECT try($$INSERT INTO notif_job (user_id, kind, order_id, payload, next_at, outcome) VALUES (1, 'otp', 'x', '{}', now(), 'maybe')$$);
SELECT try($$INSERT INTO notif_job (user_id, kind, order_id, payload, next_at) VALUES (1, 'otp', 'x', '[1]', now())$$);
SELECT try($$INSERT INTO notif_job (user_id, kind, order_id, payload, next_at, tries) VALUES (1, 'otp', 'x', '{}', now(), -1)$$);
SELECT try($$INSERT INTO notif_job (user_id, kind, order_id, payload, next_at) VALUES (1, 'nokind', 'x', '{}', now())$$);
SELECT try($$INSERT INTO notif_job (id, user_id, kind, order_id, payload, next_at) VALUES (7, 1, 'otp', 'x', '{}', now())$$);
SELECT try($$INSERT INTO notif_attempt (job_id, try, started_at, outcome) VALUES (1, 1, now(), 'maybe')$$);
-- (1.4) notif_enqueue's order_id rule holds for any writer (COPY, INSERT,
-- replication): the key kind:user_id:order_id travels in an HTTP header
SELECT try($$INSERT INTO notif_job (user_id, kind, order_id, payload, next_at) VALUES (1, 'otp', E'x\r\nX-Injected: 1', '{}', now())$$);
SELECT try($$INSERT INTO notif_job (user_id, kind, order_id, payload, next_at) VALUES (1, 'otp', '', '{}', now())$$);
SELECT try($$INSERT INTO notif_job (user_id, kind, order_id, payload, next_at) VALUES (1, 'otp', repeat('x', 201), '{}', now())$$);
SELECT try($$INSERT INTO notif_job (user_id, kind, order_id, payload, next_at) VALUES (1, 'otp', 'x' || chr(127), '{}', now())$$);
BEGIN;
SELECT try($$INSERT INTO notif_job (user_id, kind, order_id, payload, next_at) VALUES (1, 'otp', 'ok: a:b ü', '{}', now())$$) AS allowed;
ROLLBACK;
-- (1.4) a delivery report's key is at most a job key's length: 285 bytes
SELECT try($$SELECT notif_dlr(repeat('k', 286), true)$$);
SELECT try($$SELECT notif_dlr('otp:1:' || repeat('k', 279), true)$$) AS report_of_285_bytes;
DELETE FROM notif_dlr;
SELECT count(*) AS jobs_written FROM notif_job;

-- notif_key: the idempotency key
SELECT notif_key('giao_dich', 812, '55001');
SELECT notif_key('otp', -1, 'a:b') AS order_id_may_hold_colons;
SELECT notif_key(NULL, 1, 'x') IS NULL AS strict;
