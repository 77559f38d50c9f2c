-- excerpt: what the sender keeps of a provider's answer (notif_job.last_error,
-- notif_calls.error): notif_excerpt() is the C function it calls.  Printable
-- ASCII; credentials, phone numbers and e-mail addresses masked as ***;
-- at most 120 characters, never cut inside a word, and "..." when cut.

-- an auth scheme's credential; the value of a name that ends like a secret's
SELECT notif_excerpt(a) FROM (VALUES
    ('Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2ln rejected'),
    ('Basic dXNlcjpwYXNz is not accepted'),
    ('{"error": "bad key", "api_key": "live_1234", "user": "bob"}'),
    ('X-Api-Key: abc is unknown'),
    ('{"client_secret":"s3", "password": "hunter2"}'),
    ('access_token=ya29.a0Af&to=x'),
    ('THIRD_PARTY_AUTH_ERROR: the token is wrong')     -- a name that only contains "auth"
) t(a);

-- tokens: 20 or more of [A-Za-z0-9+/=_.-] with a letter and a digit
SELECT notif_excerpt(a) FROM (VALUES
    ('Invalid API key provided: sk_test_4eC39HqLyjWDarjtT1zdp7dc'),
    ('digest 4f9a0c6de5b5c0a1b2c3d4e5f60718293a4b5c6d mismatch'),
    ('REGISTRATION_TOKEN_NOT_REGISTERED')              -- no digit: a word
) t(a);

-- phone numbers (7 or more digits, with +, blanks, hyphens, parentheses)
-- and e-mail addresses; dates and short numbers stay
SELECT notif_excerpt(a) FROM (VALUES
    ('{"to":"+84901234567","error":"unknown subscriber"}'),
    ('call (555) 123-4567 or +1 555 010 0199 now'),
    ('user john.doe@example.com is blocked'),
    ('retry after 2026-12-04 08:00:00, code 40001')
) t(a);

-- URLs: host and path stay (a token segment is masked), the query is text
SELECT notif_excerpt(a) FROM (VALUES
    ('see https://fcm.googleapis.com/v1/projects/p1/messages:send'),
    ('GET /cgi-bin/sendsms?username=tester&password=foobar&to=+84900000001'),
    ('https://api.example.com/2010-04-01/Accounts/AC0123456789abcdef0123456789abcdef/Messages.json'),
    ('POST http://admin:hunter2@gw.example.com/send failed'),
    ('GET https://api.example.com/v1/sms/+84912345678/status'),
    ('https://mail.example.com/users/john.doe@example.com/inbox'),
    ('https://api.telegram.org/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/sendMessage')
) t(a);

-- a secret's value in a list; numbers written with hyphens; a value after "name: "
SELECT notif_excerpt(a) FROM (VALUES
    ('{"X-Api-Key": ["abc123"], "ok": true}'),
    ('call 0912-34-5678 now'),
    ('to: 0912345678')
) t(a);

-- bytes outside printable ASCII become '?'; long answers are cut
SELECT notif_excerpt(convert_from('\x3c68313e6361666520c3a93c2f68313e'::bytea, 'UTF8'));
SELECT notif_excerpt(repeat('word ', 40)) AS cut_between_words,
       length(notif_excerpt(repeat('word ', 40))) AS length;
SELECT notif_excerpt(repeat('a', 150)) AS a_long_word_is_dropped;
-- only the first 1024 bytes are read (the sender keeps 255 of an answer):
-- a secret that the cut leaves too short to look like a token is dropped
-- with the word it ends in
SELECT notif_excerpt(repeat(rpad('t0', 100, 'abc123') || ' ', 10) || 'sk_live_4eC39HqLyjWDarjtT1zdp7dc')
       AS cut_inside_a_secret;
SELECT notif_excerpt(NULL) IS NULL AS null_is_null;
