-- transport: credentials never travel over plain HTTP.  A provider whose
-- calls carry one (auth; an Authorization, Cookie or *key/*token/*secret
-- header; a password-like query parameter) needs an https:// url, and a
-- service account's token_uri must be https://; plain http:// is allowed
-- to a loopback address only.  Refused rows: 23514, naming what would
-- travel in clear, never its value.

\set SHOW_CONTEXT never

-- which urls are protected
SELECT u, notif_url_protected(u) AS protected FROM (VALUES
    ('https://sms.example.com/send'),
    ('HTTPS://sms.example.com/send'),
    ('http://sms.example.com/send'),
    ('http://127.0.0.1:13013/cgi-bin/sendsms'),
    ('http://127.8.9.10/send'),
    ('http://localhost:8080/send'),
    ('http://[::1]:8080/send'),
    ('http://user:pw@127.0.0.1/send'),
    ('http://127.0.0.1@evil.example.com/send'),
    ('http://127.0.0.1.evil.example.com/send'),
    ('http://localhost.evil.example.com/send')
) t(u);

-- a credential over plain http to another host: refused, with what and why
INSERT INTO notif_provider (name, url, headers)
VALUES ('clear', 'http://sms.example.com/send', '{"Authorization": "Bearer s3cr3t-never-shown"}');
INSERT INTO notif_provider (name, url, headers)
VALUES ('clear', 'http://sms.example.com/send', '{"X-Api-Key": "s3cr3t-never-shown"}');
INSERT INTO notif_provider (name, url, format)
VALUES ('clear', 'http://gw.example.com/cgi-bin/sendsms?username=u&password=s3cr3t-never-shown', 'query');

SELECT a AS would_carry, try(format($$INSERT INTO notif_provider (name, url, headers, auth, credentials)
                                      VALUES ('clear', %L, %L, %L, %L)$$, u, h, au, cr)) AS refused
  FROM (VALUES
    ('a cookie', 'http://10.1.2.3/send', '{"Cookie": "session=s3cr3t-never-shown"}', NULL, NULL),
    ('a proxy credential', 'http://10.1.2.3/send', '{"Proxy-Authorization": "Basic czM="}', NULL, NULL),
    ('a token header', 'http://10.1.2.3/send', '{"X-Auth-Token": "s3cr3t-never-shown"}', NULL, NULL),
    ('a secret header', 'http://10.1.2.3/send', '{"X-Client-Secret": "s3cr3t-never-shown"}', NULL, NULL),
    ('user and password', 'http://u:s3cr3t-never-shown@10.1.2.3/send', '{}', NULL, NULL)
  ) t(a, u, h, au, cr);

-- the same over https, or to a loopback address, or without a credential: accepted
SELECT try($$INSERT INTO notif_provider (name, url, headers)
             VALUES ('tls', 'https://sms.example.com/send', '{"Authorization": "Bearer x"}')$$) AS https,
       try($$INSERT INTO notif_provider (name, url, format)
             VALUES ('kannel', 'http://127.0.0.1:13013/cgi-bin/sendsms?username=u&password=p', 'query')$$) AS loopback,
       try($$INSERT INTO notif_provider (name, url, headers)
             VALUES ('open', 'http://hooks.example.com/notify', '{"X-Request-Source": "notif"}')$$) AS no_credential;

-- a row made unsafe later is refused too, and keeps its value
UPDATE notif_provider SET url = 'http://sms.example.com/send' WHERE name = 'tls';
SELECT url FROM notif_provider WHERE name = 'tls';

-- a Google service account: its token_uri must be https://
\set rsa_key `openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 2>/dev/null`
SELECT jsonb_build_object('type', 'service_account', 'project_id', 'demo-project',
                          'private_key', :'rsa_key',
                          'client_email', 'notif@demo-project.iam.gserviceaccount.com',
                          'token_uri', 'http://oauth.example.com/token') AS sa \gset
INSERT INTO notif_provider (name, url, format, auth, credentials)
VALUES ('fcm_clear', 'https://fcm.googleapis.com', 'fcm', 'google_service_account', :'sa');
SELECT try(format($$INSERT INTO notif_provider (name, url, format, auth, credentials)
                    VALUES ('fcm_tls', 'https://fcm.googleapis.com', 'fcm', 'google_service_account', %L)$$,
                  :'sa'::jsonb || '{"token_uri": "https://oauth2.googleapis.com/token"}')) AS https_token_uri;

DELETE FROM notif_provider WHERE name IN ('tls', 'kannel', 'open', 'fcm_tls');
