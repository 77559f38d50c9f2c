-- privileges: an application role needs only EXECUTE on notif_enqueue and
-- USAGE on the schema; it cannot read providers (credentials) nor change types.

CREATE ROLE notif_app LOGIN;
CREATE ROLE notif_nobody LOGIN;
GRANT USAGE ON SCHEMA public TO notif_app, notif_nobody;
GRANT EXECUTE ON FUNCTION notif_enqueue(bigint, text, text, jsonb, timestamptz, text),
                          notif_enqueue(bigint, text, bigint, jsonb, timestamptz, text)
   TO notif_app;

-- enqueue is not granted to PUBLIC
SELECT p.oid::regprocedure AS function, p.prosecdef AS security_definer,
       has_function_privilege('notif_nobody', p.oid, 'EXECUTE') AS public_can_execute
  FROM pg_proc p
 WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'notif\_%'
 ORDER BY 1::text;

-- a SECURITY DEFINER function in SQL or PL/pgSQL pins its search_path to
-- pg_catalog, pg_temp (and names the extension's objects with their
-- schema); notif_enqueue (C) names them itself (see enqueue.sql's decoy)
SELECT p.oid::regprocedure AS security_definer_function, l.lanname AS language, p.proconfig
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'notif\_%' AND p.prosecdef
 ORDER BY 1::text;

-- what pg_monitor may run: the views' helpers and the status functions
SELECT p.oid::regprocedure AS pg_monitor_can_execute
  FROM pg_proc p
 WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'notif\_%'
   AND has_function_privilege('pg_monitor', p.oid, 'EXECUTE')
   AND NOT has_function_privilege('notif_nobody', p.oid, 'EXECUTE')
 ORDER BY 1::text;

SET ROLE notif_nobody;
SELECT notif_enqueue(5000, 'otp', 'nobody');
RESET ROLE;

SET ROLE notif_app;
SELECT notif_enqueue(5000, 'otp', 'app', '{"to":"+84900000000"}') > 0 AS enqueued;
SELECT notif_enqueue(5000, 'otp', 'app') > 0 AS repeat_enqueued;
SELECT notif_enqueue(5000, 'giao_dich', 77) > 0 AS enqueued_bigint;
SELECT notif_key('otp', 5000, 'app');
-- what it cannot do
SELECT * FROM notif_provider;
SELECT count(*) FROM notif_job;
UPDATE notif_type SET max_tries = 100 WHERE code = 'otp';
INSERT INTO notif_type VALUES ('mine', 'at_least_once', 9, NULL);
INSERT INTO notif_lane VALUES ('otp', 16);
INSERT INTO notif_job (user_id, kind, order_id, payload, next_at) VALUES (5000, 'otp', 'direct', '{}', now());
SET notif_deliver.max_payload_size = '1MB';
RESET ROLE;

SELECT count(*) AS app_jobs FROM notif_job WHERE user_id = 5000;
SELECT max_tries FROM notif_type WHERE code = 'otp';

-- a role can be given its own kinds of work: reading jobs for a dashboard
GRANT SELECT ON notif_job TO notif_nobody;
SET ROLE notif_nobody;
SELECT count(*) AS visible FROM notif_job WHERE user_id = 5000;
RESET ROLE;

REVOKE ALL ON notif_job FROM notif_nobody;
REVOKE ALL ON FUNCTION notif_enqueue(bigint, text, text, jsonb, timestamptz, text),
                       notif_enqueue(bigint, text, bigint, jsonb, timestamptz, text)
    FROM notif_app;
REVOKE USAGE ON SCHEMA public FROM notif_app, notif_nobody;
DROP ROLE notif_app;
DROP ROLE notif_nobody;
