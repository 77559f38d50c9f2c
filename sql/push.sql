-- push: the 'fcm' and 'apns' formats, their credentials (checked when the
-- row is written, never shown), and their payload rules (checked at
-- enqueue: SQLSTATE 22023, nothing written).  The types are paused, so no
-- sender calls anyone here; test/t/020_push.pl does the calls.

-- keys as a user loads them from files, with psql's \set and backticks
\set rsa_key `openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 2>/dev/null`
\set ec_key `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 2>/dev/null`
SELECT jsonb_build_object('type', 'service_account', 'project_id', 'demo-project',
                          'private_key_id', 'k1', 'private_key', :'rsa_key',
                          'client_email', 'notif@demo-project.iam.gserviceaccount.com',
                          'token_uri', 'https://oauth2.googleapis.com/token') AS sa \gset
SELECT jsonb_build_object('key_id', 'ABC123DEFG', 'team_id', 'DEF123GHIJ',
                          'private_key', :'ec_key') AS p8 \gset

INSERT INTO notif_provider (name, format, auth, credentials)
VALUES ('fcm', 'fcm', 'google_service_account', :'sa');
INSERT INTO notif_provider (name, url, format, auth, credentials, max_connections)
VALUES ('apns', 'https://api.push.apple.com', 'apns', 'apns_token', :'p8', 2);
SELECT name, format, auth, credentials ? 'private_key' AS has_key, max_connections
  FROM notif_provider WHERE name IN ('fcm', 'apns') ORDER BY name;

-- malformed credentials are refused when the row is written, naming what is
-- wrong and never showing the key
SELECT try($$INSERT INTO notif_provider (name, auth) VALUES ('p1', 'google_service_account')$$);
SELECT try($$INSERT INTO notif_provider (name, credentials) VALUES ('p1', '{}')$$);
SELECT try($$INSERT INTO notif_provider (name, auth, credentials) VALUES ('p1', 'oauth', '{}')$$);
SELECT try($$INSERT INTO notif_provider (name, auth, credentials) VALUES ('p1', 'google_service_account', '"x"')$$);
SELECT try(format($$INSERT INTO notif_provider (name, auth, credentials) VALUES ('p1', 'google_service_account', %L)$$,
                  :'sa'::jsonb - 'client_email'));
SELECT try(format($$INSERT INTO notif_provider (name, auth, credentials) VALUES ('p1', 'google_service_account', %L)$$,
                  :'sa'::jsonb || '{"token_uri": 42}'));
SELECT try(format($$INSERT INTO notif_provider (name, auth, credentials) VALUES ('p1', 'google_service_account', %L)$$,
                  :'sa'::jsonb || '{"private_key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}'));
SELECT try(format($$INSERT INTO notif_provider (name, auth, credentials) VALUES ('p1', 'google_service_account', %L)$$,
                  :'sa'::jsonb || jsonb_build_object('private_key', :'ec_key')));
SELECT try(format($$INSERT INTO notif_provider (name, auth, credentials) VALUES ('p1', 'apns_token', %L)$$,
                  :'p8'::jsonb - 'team_id'));
SELECT try(format($$INSERT INTO notif_provider (name, auth, credentials) VALUES ('p1', 'apns_token', %L)$$,
                  :'p8'::jsonb || jsonb_build_object('private_key', :'rsa_key')));
SELECT try($$UPDATE notif_provider SET credentials = credentials - 'private_key' WHERE name = 'apns'$$);
-- an encrypted key is refused unread, at once, by the CHECK function any
-- role may call.  This one is a P-256 key as "openssl pkcs8 -topk8 -v2
-- aes-256-cbc -iter 100000000 -passout pass:" writes it (made at -iter 1,
-- then its iteration count set to 100,000,000: writing it so takes openssl
-- as long as reading it).  Decrypting it, OpenSSL would first run PBKDF2
-- 100,000,000 times (40 s of CPU that no statement_timeout or cancel
-- interrupts); the same DER under "BEGIN PRIVATE KEY" would be decrypted
-- too, were a passphrase ever given (src/provider/token.c, no_passphrase)
SELECT 'MIHuMFkGCSqGSIb3DQEFDTBMMCsGCSqGSIb3DQEFDDAeBAj/uX286IYRBAIEBfXh
ADAMBggqhkiG9w0CCQUAMB0GCWCGSAFlAwQBKgQQMgt1wJHIo9igOctfzVvm/gSB
kHBr0xqMAvGROg9TtkcZLh0qP2ZvRnDVjRPKvEemqvnEbx4k/zBf1c0/kCfqfh+V
umLeucByckg+drqJLTF10b6WjkPgCaIDN6a5gaCWDukBQhUHNf1nQyuU0tTk0uPr
bCWQmp8wC1bHouLzux3sCDli5b87YGmFVsHz99BKC348nQ5PlSv8jmZbl03wZqq8
Xg==' AS epki \gset
CREATE FUNCTION check_key(pem text, OUT error text, OUT detail text, OUT hint text, OUT fast boolean)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
BEGIN
    PERFORM notif_credentials_check('apns_token',
        jsonb_build_object('key_id', 'ABC123DEFG', 'team_id', 'DEF123GHIJ', 'private_key', pem));
    error := 'accepted';
    fast := clock_timestamp() - t0 < interval '1 second';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS error = RETURNED_SQLSTATE, detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    error := error || ': ' || SQLERRM;
    fast := clock_timestamp() - t0 < interval '1 second';
END $$;
\x on
SELECT * FROM check_key(E'-----BEGIN ENCRYPTED PRIVATE KEY-----\n' || :'epki' || E'\n-----END ENCRYPTED PRIVATE KEY-----\n');
\x off
SELECT label, fast, error FROM (VALUES ('PRIVATE KEY')) v(label),
       check_key(E'-----BEGIN ' || label || E'-----\n' || :'epki' || E'\n-----END ' || label || E'-----\n');
-- the older encryption of a PEM key (a Proc-Type: 4,ENCRYPTED header), and
-- a text over 16 kB, are refused unread too
\set legacy_key `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 2>/dev/null | openssl ec -aes256 -passout pass:x 2>/dev/null`
SELECT fast, error FROM check_key(:'legacy_key');
SELECT fast, error, detail FROM check_key(:'ec_key' || repeat(' ', 16384 - length(:'ec_key'))) AS at_16_kB;
SELECT fast, error, detail FROM check_key(:'ec_key' || repeat(' ', 16385 - length(:'ec_key'))) AS over_16_kB;
DROP FUNCTION check_key(text);
SELECT try($$INSERT INTO notif_provider (name, max_connections) VALUES ('p1', 0)$$);
SELECT try($$INSERT INTO notif_provider (name, ca_cert) VALUES ('p1', '/etc/ssl/certs/ca.pem')$$);
SELECT count(*) AS providers_written FROM notif_provider WHERE name = 'p1';

INSERT INTO notif_type (code, delivery, max_tries, provider, paused) VALUES
    ('fcm_msg', 'at_least_once', 3, 'fcm', true),
    ('apns_msg', 'at_least_once', 3, 'apns', true);

-- fcm: FCM's message object, exactly one target, data a map of strings
SELECT try($$SELECT notif_enqueue(1, 'fcm_msg', 'a', '{"notification": {"title": "Hi"}}')$$);
SELECT try($$SELECT notif_enqueue(1, 'fcm_msg', 'b', '{"token": "t1", "topic": "news"}')$$);
SELECT try($$SELECT notif_enqueue(1, 'fcm_msg', 'c', '{"token": "t1", "data": {"n": 5}}')$$);
SELECT try($$SELECT notif_enqueue(1, 'fcm_msg', 'd', '{"token": "t1", "data": ["x"]}')$$);
SELECT try($$SELECT notif_enqueue(1, 'fcm_msg', 'e', '{"token": "", "data": {}}')$$);
SELECT try($$SELECT notif_enqueue(1, 'fcm_msg', 'f', '{"token": "t1", "notfication": {}}')$$);
SELECT try($$SELECT notif_enqueue(1, 'fcm_msg', 'g', '{"topic": "news", "android": "high"}')$$);
SELECT notif_enqueue(1, 'fcm_msg', 'ok', '{"token": "t1", "data": {"n": "5"}, "notification": {"title": "Hi"}}') > 0 AS enqueued;
-- the error names the type and its provider's format
SELECT notif_enqueue(1, 'fcm_msg', 'h', '{"condition": "''a'' in topics", "data": {"flag": true}}');
-- (1.4) push first, SMS after: with a fallback_type, the payload's
-- "fallback" member is the fallback's (never sent to FCM), not FCM's
SELECT try($$SELECT notif_enqueue(1, 'fcm_msg', 'fb1', '{"token": "t1", "fallback": {"to": "+1", "text": "x"}}')$$) AS without_fallback_type;
UPDATE notif_type SET fallback_type = 'apns_msg' WHERE code = 'fcm_msg';
SELECT try($$SELECT notif_enqueue(1, 'fcm_msg', 'fb2', '{"token": "t1", "fallback": {"to": "+1", "text": "x"}}')$$) AS with_fallback_type;
SELECT try($$SELECT notif_enqueue(1, 'fcm_msg', 'fb3', '{"token": "t1", "fallback": {}, "extra": 1}')$$) AS other_members_still_checked;
UPDATE notif_type SET fallback_type = NULL WHERE code = 'fcm_msg';

-- apns: a hex device token, headers as HTTP headers, a body of at most 4096 bytes
SELECT try($$SELECT notif_enqueue(1, 'apns_msg', 'a', '{"aps": {"alert": "Hi"}}')$$);
SELECT try($$SELECT notif_enqueue(1, 'apns_msg', 'b', '{"device_token": "zz12", "aps": {}}')$$);
SELECT try($$SELECT notif_enqueue(1, 'apns_msg', 'c', '{"device_token": 12, "aps": {}}')$$);
SELECT try($$SELECT notif_enqueue(1, 'apns_msg', 'd', '{"device_token": "ab12", "headers": {"apns topic": "x"}}')$$);
SELECT try($$SELECT notif_enqueue(1, 'apns_msg', 'e', '{"device_token": "ab12", "headers": {"apns-topic": "x\r\ny: 1"}}')$$);
SELECT try($$SELECT notif_enqueue(1, 'apns_msg', 'f', '{"device_token": "ab12", "headers": {"apns-priority": 10}}')$$);
SELECT try($$SELECT notif_enqueue(1, 'apns_msg', 'g', '{"device_token": "ab12", "headers": {"Authorization": "bearer x"}}')$$);
-- (1.4) APNs' own request headers only, never empty: nothing that moves or
-- reshapes the call (Host is libcurl's :authority)
SELECT try($$SELECT notif_enqueue(1, 'apns_msg', 'g2', '{"device_token": "ab12", "headers": {"Host": "attacker.example"}}')$$);
SELECT try($$SELECT notif_enqueue(1, 'apns_msg', 'g3', '{"device_token": "ab12", "headers": {"Content-Length": "0"}}')$$);
SELECT try($$SELECT notif_enqueue(1, 'apns_msg', 'g4', '{"device_token": "ab12", "headers": {"apns-topic": ""}}')$$);
BEGIN;
SELECT try($$SELECT notif_enqueue(1, 'apns_msg', 'g5', '{"device_token": "ab12", "headers": {"APNS-Push-Type": "alert", "apns-collapse-id": "c", "apns-expiration": "0", "apns-id": "6D3BE6A6-0C6E-4C3A-9C5E-3B3D6A4E1C01"}, "aps": {}}')$$) AS apns_headers_ok;
ROLLBACK;
SELECT try(format($$SELECT notif_enqueue(1, 'apns_msg', 'h', %L)$$,
                  jsonb_build_object('device_token', 'ab12', 'aps', jsonb_build_object('alert', repeat('x', 4090)))));
SELECT notif_enqueue(1, 'apns_msg', 'ok', jsonb_build_object(
           'device_token', 'ab12', 'headers', '{"apns-push-type": "alert", "apns-topic": "com.example.app"}'::jsonb,
           'aps', jsonb_build_object('alert', repeat('x', 3000)))) > 0 AS enqueued;
-- nothing refused was written
SELECT kind, order_id FROM notif_job WHERE kind IN ('fcm_msg', 'apns_msg') ORDER BY kind, order_id;

-- a format change reaches the sessions' type cache at once
UPDATE notif_provider SET format = 'json' WHERE name = 'apns';
SELECT notif_enqueue(1, 'apns_msg', 'json', '{"text": "no push rules now"}') > 0 AS enqueued;
UPDATE notif_provider SET format = 'apns' WHERE name = 'apns';
SELECT try($$SELECT notif_enqueue(1, 'apns_msg', 'again', '{"text": "x"}')$$);

-- (1.4) a provider row pins the APNs topics its calls may name: with
-- apns_topics set, a payload names one of them in its apns-topic header
-- (22023 at enqueue otherwise, a change reaching the sessions' cache at once)
SELECT try($$UPDATE notif_provider SET apns_topics = '{}' WHERE name = 'apns'$$);
SELECT try($$UPDATE notif_provider SET apns_topics = '{com.example.app, NULL}' WHERE name = 'apns'$$);
UPDATE notif_provider SET apns_topics = '{com.example.app, com.example.app.voip}' WHERE name = 'apns';
SELECT try($$SELECT notif_enqueue(1, 'apns_msg', 't1', '{"device_token": "ab12", "headers": {"apns-topic": "com.other.app"}, "aps": {}}')$$) AS other_topic;
SELECT try($$SELECT notif_enqueue(1, 'apns_msg', 't2', '{"device_token": "ab12", "headers": {"apns-push-type": "alert"}, "aps": {}}')$$) AS no_topic;
SELECT try($$SELECT notif_enqueue(1, 'apns_msg', 't3', '{"device_token": "ab12", "headers": {"APNS-Topic": "com.example.app.VOIP"}, "aps": {}}')$$) AS other_case;
SELECT notif_enqueue(1, 'apns_msg', 't4', '{"device_token": "ab12", "headers": {"APNS-Topic": "com.example.app.voip"}, "aps": {}}') > 0 AS pinned_topic;
UPDATE notif_provider SET apns_topics = NULL WHERE name = 'apns';
SELECT notif_enqueue(1, 'apns_msg', 't5', '{"device_token": "ab12", "headers": {"apns-topic": "com.other.app"}, "aps": {}}') > 0 AS any_topic;

-- (1.4) a provider row pins the FCM targets a payload may name: with
-- fcm_topics set, a token or one of its topics (compared exactly), never a
-- condition (it can combine any topics); '{}' is tokens only (22023 at
-- enqueue otherwise, a change reaching the sessions' cache at once)
SELECT try($$UPDATE notif_provider SET fcm_topics = '{news, NULL}' WHERE name = 'fcm'$$);
SELECT try($$UPDATE notif_provider SET fcm_topics = '{news, ""}' WHERE name = 'fcm'$$);
SELECT try($$UPDATE notif_provider SET fcm_topics = '{{news}, {sports}}' WHERE name = 'fcm'$$);
UPDATE notif_provider SET fcm_topics = '{news, weather}' WHERE name = 'fcm';
SELECT try($$SELECT notif_enqueue(1, 'fcm_msg', 'f1', '{"topic": "sports"}')$$) AS other_topic;
SELECT try($$SELECT notif_enqueue(1, 'fcm_msg', 'f2', '{"topic": "News"}')$$) AS other_case;
SELECT try($$SELECT notif_enqueue(1, 'fcm_msg', 'f3', '{"condition": "''news'' in topics || ''sports'' in topics"}')$$) AS condition;
SELECT notif_enqueue(1, 'fcm_msg', 'f4', '{"topic": "weather"}') > 0 AS pinned_topic;
SELECT notif_enqueue(1, 'fcm_msg', 'f5', '{"token": "t1"}') > 0 AS token;
UPDATE notif_provider SET fcm_topics = '{}' WHERE name = 'fcm';
SELECT try($$SELECT notif_enqueue(1, 'fcm_msg', 'f6', '{"topic": "news"}')$$) AS tokens_only_topic;
SELECT try($$SELECT notif_enqueue(1, 'fcm_msg', 'f7', '{"condition": "''news'' in topics"}')$$) AS tokens_only_condition;
SELECT notif_enqueue(1, 'fcm_msg', 'f8', '{"token": "t1"}') > 0 AS tokens_only_token;
UPDATE notif_provider SET fcm_topics = NULL WHERE name = 'fcm';
SELECT notif_enqueue(1, 'fcm_msg', 'f9', '{"topic": "sports"}') > 0 AS any_topic;
SELECT notif_enqueue(1, 'fcm_msg', 'f10', '{"condition": "''sports'' in topics"}') > 0 AS any_condition;
-- only the accepted ones were written
SELECT string_agg(order_id, ' ' ORDER BY id) AS written FROM notif_job WHERE kind = 'fcm_msg' AND order_id ~ '^f[0-9]+$';

-- notif_unregistered: empty until a platform reports a dead token; prunable
SELECT * FROM notif_unregistered;
DELETE FROM notif_unregistered WHERE reported_at < now() - interval '30 days';

-- the enqueue-only role can read neither the credentials nor the dead tokens
CREATE ROLE notif_push_app;
GRANT USAGE ON SCHEMA public TO notif_push_app;
GRANT EXECUTE ON FUNCTION notif_enqueue(bigint, text, text, jsonb, timestamptz, text) TO notif_push_app;
SET ROLE notif_push_app;
SELECT notif_enqueue(2, 'fcm_msg', 'app', '{"topic": "news"}') > 0 AS enqueued;
SELECT try($$SELECT credentials FROM notif_provider$$);
SELECT try($$SELECT auth, max_connections FROM notif_provider$$);
SELECT try($$SELECT * FROM notif_unregistered$$);
SELECT try($$SELECT * FROM notif_unregistered_token$$);
RESET ROLE;
REVOKE ALL ON FUNCTION notif_enqueue(bigint, text, text, jsonb, timestamptz, text) FROM notif_push_app;
REVOKE USAGE ON SCHEMA public FROM notif_push_app;
DROP ROLE notif_push_app;

DELETE FROM notif_job WHERE kind IN ('fcm_msg', 'apns_msg');
DELETE FROM notif_type WHERE code IN ('fcm_msg', 'apns_msg');
DELETE FROM notif_provider WHERE name IN ('fcm', 'apns');
