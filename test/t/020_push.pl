# 020_push.pl: FCM HTTP v1 and APNs end to end, on loopback with real
# parts: nghttpx as the HTTP/2 TLS front (a throwaway certificate, trusted
# through notif_provider.ca_cert), test/sim/push_sim.pl behind it playing
# Google's token endpoint, FCM and APNs, verifying every token it gets.
# Asserted from the server's side: HTTP/2 for every call, at most
# max_connections connections, refreshes without a job failing, one new
# provider token after ExpiredProviderToken, dead device tokens failed and
# listed in notif_unregistered, and no secret in the server log, notif_job
# or notif_attempt.  Each row of job_state.c's answers[] is named.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PushTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use MIME::Base64 qw(decode_base64url);
use Time::HiRes qw(usleep);

if (my $missing = push_rig_missing())
{
	plan skip_all => "$missing (test/deps.sh installs it)";
}
require Crypt::PK::RSA;
require Crypt::PK::ECC;
require JSON::PP;

my $keys = make_push_keys();
my $node = new_node('push', 'notif_deliver.poll_interval' => "'200ms'");

sub q_lit { my ($s) = @_; $s =~ s/'/''/g; return "'$s'"; }

my $sa = service_account_json($keys, 'https://127.0.0.1:1/token');
my $p8 = apns_key_json($keys);

# --- token.c: every signature verifies with the public key --------------
sql($node, q{CREATE FUNCTION notif_jwt_sign(text, jsonb, bigint) RETURNS text
      LANGUAGE c STRICT AS '$libdir/notif_deliver', 'notif_jwt_sign'});
my $ecc = Crypt::PK::ECC->new($keys->{ec_pub});
my @es = split /\n/, sql($node, "SELECT notif_jwt_sign('apns_token', " . q_lit($p8)
	  . ", 1700000000 + g) FROM generate_series(1, 2000) g");
my ($es_ok, $short) = (0, 0);
for my $jwt (@es)
{
	my ($h, $c, $s) = split /\./, $jwt;
	my $sig = decode_base64url($s);
	$short++ if substr($sig, 0, 1) eq "\0" || substr($sig, 32, 1) eq "\0";
	$es_ok++ if length($sig) == 64 && $ecc->verify_message_rfc7518($sig, "$h.$c", 'SHA256');
}
is($es_ok, 2000, 'ES256: 2,000 provider tokens signed, every one verifies (JOSE r||s, 64 bytes)');
cmp_ok($short, '>', 0, "ES256: the sample holds signatures with a short r or s ($short), left-padded");
my ($h0, $c0) = map { JSON::PP->new->decode(decode_base64url($_)) } (split /\./, $es[0])[0, 1];
is_deeply([ $h0, $c0 ], [ { alg => 'ES256', kid => 'KEYID12345' }, { iss => 'TEAMID1234', iat => 1700000001 } ],
	'ES256: header alg and kid, claims iss and iat');

my $rsa = Crypt::PK::RSA->new($keys->{rsa_pub});
my @rs = split /\n/, sql($node, "SELECT notif_jwt_sign('google_service_account', " . q_lit($sa)
	  . ", 1700000000 + g) FROM generate_series(1, 300) g");
my $rs_ok = grep {
	my ($h, $c, $s) = split /\./;
	$rsa->verify_message(decode_base64url($s), "$h.$c", 'SHA256', 'v1.5')
} @rs;
is($rs_ok, 300, 'RS256: 300 assertions signed, every one verifies');
($h0, $c0) = map { JSON::PP->new->decode(decode_base64url($_)) } (split /\./, $rs[0])[0, 1];
is_deeply([ $h0, $c0 ],
	[ { alg => 'RS256', typ => 'JWT', kid => 'k1' },
	  { iss => 'notif@demo.iam.gserviceaccount.com', scope => 'https://www.googleapis.com/auth/firebase.messaging',
		aud => 'https://127.0.0.1:1/token', iat => 1700000001, exp => 1700003601 } ],
	'RS256: header, and claims iss, scope, aud, iat, exp = iat + 3600');
sql($node, 'DROP FUNCTION notif_jwt_sign(text, jsonb, bigint)');

# --- the rig -------------------------------------------------------------
my $rig = start_push_rig($keys, 'token-life' => 3, 'apns-max-age' => 3, 'delay-ms' => 100,
	'retry-after' => 2);
my $base = $rig->{base};
(my $sa_rig = $sa) =~ s{https://127\.0\.0\.1:1/token}{$base/token} or die;
my $ca = q_lit($keys->{cert_pem});

sql($node, "INSERT INTO notif_provider (name, url, format, auth, credentials, ca_cert, max_connections, timeout)
     VALUES ('fcm', '$base/v1/projects/demo-project/messages:send', 'fcm', 'google_service_account',
             " . q_lit($sa_rig) . ", $ca, 1, '5 s'),
            ('apns', '$base', 'apns', 'apns_token', " . q_lit($p8) . ", $ca, 1, '5 s')");
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max) VALUES
      ('fcm_push', 'at_least_once', 3, 'fcm', '100 ms', '200 ms'),
      ('apns_push', 'at_least_once', 3, 'apns', '100 ms', '200 ms')});

sub settled
{
	my ($kind) = @_;
	return "SELECT count(*) = 0 FROM notif_job WHERE kind = '$kind' AND (status IN ('queued', 'sending') OR claimed_by IS NOT NULL)";
}

# --- FCM: access tokens of 3 s, refreshed before they expire -------------
sql($node, q{SELECT notif_enqueue(g, 'fcm_push', 'r' || g,
             jsonb_build_object('token', 'tok' || g, 'data', jsonb_build_object('n', g::text)),
             now() + g * interval '250 ms')
        FROM generate_series(1, 32) g});
ok(wait_until($node, settled('fcm_push')), 'fcm: the jobs spread over 8 s finished');
is(sql($node, q{SELECT string_agg(DISTINCT status || ' ' || tries, ',') FROM notif_job WHERE kind = 'fcm_push'}),
	'sent 1', 'fcm: every job sent at its first try: the refreshes failed none');
my $st = push_stats($rig);
cmp_ok($st->{tokens_issued}, '>=', 3, "fcm: several access tokens fetched ($st->{tokens_issued} for 8 s of 3-s tokens)");
is($st->{assertions_bad}, 0, 'fcm: every RS256 assertion verified at the token endpoint');
is($st->{fcm_unauthenticated}, 0, 'fcm: no call carried an expired or unknown token');
is($st->{fcm_accepted}, 32, 'fcm: 32 messages accepted');

# answers row fcm_unauthenticated: the token is refused (revoked): refresh, retry.
# First a token of an hour, observed issued: a 3-s token is refreshed every
# 1.5 s, and a refresh between the revoke and the call would carry a fresh
# token past the revoke.  No answer is held meanwhile (delay 0): a token
# answer still held at the revoke would reach the sender after it, and the
# job's call would then meet two revoked tokens
push_control($rig, '/delay-ms/0');
push_control($rig, '/token-life/3600');
ok(wait_push_stat($rig, 'last_token_life', 3599), 'fcm: a token of an hour was fetched');
push_control($rig, '/revoke');
my $j401 = sql($node, q{SELECT notif_enqueue(1, 'fcm_push', 'revoked', '{"token": "tok-r", "notification": {"title": "x"}}')});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $j401"),
	'answers row fcm_unauthenticated: the job was sent after all');
is(sql($node, "SELECT string_agg(try || ' ' || outcome || ' ' || coalesce(http_status::text, '-'), ',' ORDER BY try) FROM notif_calls WHERE job_id = $j401"),
	'1 unreached 401,2 accepted 200', 'answers row fcm_unauthenticated: unreached, a new token, then accepted');
like(sql($node, "SELECT error FROM notif_calls WHERE job_id = $j401 AND try = 1"), qr/^HTTP 401: UNAUTHENTICATED: /,
	'answers row fcm_unauthenticated: the reason in the error');
push_control($rig, '/token-life/');
push_control($rig, '/delay-ms/100');

# answers row fcm_unregistered: rejected, never retried, listed
my $j404 = sql($node, q{SELECT notif_enqueue(77, 'fcm_push', 'dead', '{"token": "dead-fcm-1", "notification": {"title": "x"}}')});
ok(wait_until($node, "SELECT status = 'failed' FROM notif_job WHERE id = $j404"), 'answers row fcm_unregistered: failed');
is(job_row($node, $j404), 'failed rejected 1 404', 'answers row fcm_unregistered: rejected at the first try');
like(sql($node, "SELECT last_error FROM notif_job WHERE id = $j404"), qr/^HTTP 404: UNREGISTERED: Requested entity was not found/,
	'answers row fcm_unregistered: the errorCode in last_error');
is(sql($node, "SELECT kind || ' ' || user_id || ' ' || token || ' ' || reason || ' ' || (job_id = $j404) FROM notif_unregistered"),
	'fcm_push 77 dead-fcm-1 UNREGISTERED true', 'answers row fcm_unregistered: listed in notif_unregistered');

# an FCM 400 INVALID_ARGUMENT: rejected, not listed (the generic 4xx)
my $j400 = sql($node, q{SELECT notif_enqueue(78, 'fcm_push', 'bad', '{"token": "bad-fcm", "notification": {"title": "x"}}')});
ok(wait_until($node, "SELECT status = 'failed' FROM notif_job WHERE id = $j400"), 'fcm 400: failed');
is(sql($node, "SELECT count(*) FROM notif_unregistered WHERE job_id = $j400"), '0', 'fcm 400 INVALID_ARGUMENT: not listed');

my $fcm_conns = front_connections($rig, qr{^/(v1/projects|token)});
is($fcm_conns->{connections}, 1,
	"fcm: its $fcm_conns->{calls} calls and token fetches shared max_connections = 1 connection");

# --- APNs: N calls in flight over max_connections = 1 --------------------
sql($node, q{SELECT notif_enqueue(g, 'apns_push', 'b' || g,
             jsonb_build_object('device_token', 'a1b2c3' || g,
                                'headers', '{"apns-push-type": "alert", "apns-topic": "com.example.app"}'::jsonb,
                                'aps', '{"alert": "hi"}'::jsonb))
        FROM generate_series(1, 40) g});
ok(wait_until($node, settled('apns_push')), 'apns: a burst of 40 jobs finished');
is(sql($node, q{SELECT string_agg(DISTINCT status, ',') FROM notif_job WHERE kind = 'apns_push'}), 'sent', 'apns: all sent');
$st = push_stats($rig);
cmp_ok($st->{max_inflight}, '>=', 10, "apns: calls were in flight together (up to $st->{max_inflight})");
my $apns_conns = front_connections($rig, qr{^/3/device/});
is($apns_conns->{connections}, 1, "apns: $apns_conns->{calls} calls used max_connections = 1 connection");

# answers row apns_expired_provider_token: provider tokens older than 3 s are refused
sql($node, q{SELECT notif_enqueue(g, 'apns_push', 'e' || g,
             jsonb_build_object('device_token', 'e1e2' || g,
                                'headers', '{"apns-topic": "com.example.app"}'::jsonb, 'aps', '{}'::jsonb),
             now() + g * interval '250 ms')
        FROM generate_series(1, 32) g});
ok(wait_until($node, settled('apns_push')), 'apns: the jobs spread over 8 s finished');
is(sql($node, q{SELECT string_agg(DISTINCT status, ',') FROM notif_job WHERE kind = 'apns_push'}), 'sent',
	'answers row apns_expired_provider_token: every job sent after all');
$st = push_stats($rig);
cmp_ok($st->{apns_expired_tokens}, '>=', 1, "answers row apns_expired_provider_token: answered ($st->{apns_expired_answers} calls, $st->{apns_expired_tokens} tokens)");
is($st->{apns_jwt_verified}, $st->{apns_expired_tokens} + 1,
	'answers row apns_expired_provider_token: one new provider token per expired one, no more');
is($st->{apns_jwt_bad}, 0, 'apns: every provider token verified (ES256, kid, iss)');
my $expired = sql($node, q{SELECT a.outcome || ' ' || a.http_status || ' ' || a.error FROM notif_calls a
                     JOIN notif_job j ON j.id = a.job_id WHERE j.kind = 'apns_push' AND a.try = 1
                      AND a.http_status = 403 LIMIT 1});
is($expired, 'unreached 403 HTTP 403: ExpiredProviderToken',
	'answers row apns_expired_provider_token: unreached, the reason in the error, retried');

# rows APNs 410 Unregistered and 400 BadDeviceToken: rejected and listed
my $j410 = sql($node, q{SELECT notif_enqueue(90, 'apns_push', 'gone', '{"device_token": "dead0001", "headers": {"apns-topic": "t"}, "aps": {}}')});
my $jbad = sql($node, q{SELECT notif_enqueue(91, 'apns_push', 'baddev', '{"device_token": "bad00002", "headers": {"apns-topic": "t"}, "aps": {}}')});
ok(wait_until($node, "SELECT count(*) = 2 FROM notif_job WHERE id IN ($j410, $jbad) AND status = 'failed'"),
	'answers rows apns_unregistered, apns_bad_device_token: failed');
# (a first try may meet an expired provider token: count the calls that got the answer)
sub answered
{
	my ($id, $status) = @_;
	return sql($node, "SELECT j.status || ' ' || j.outcome || ' ' || j.http_status || ' ' || count(a.*)
	              FROM notif_job j JOIN notif_calls a ON a.job_id = j.id AND a.http_status = $status
	             WHERE j.id = $id GROUP BY j.id");
}
is(answered($j410, 410), 'failed rejected 410 1', 'answers row apns_unregistered: rejected, not retried');
is(answered($jbad, 400), 'failed rejected 400 1', 'answers row apns_bad_device_token: rejected, not retried');
is(sql($node, "SELECT string_agg(user_id || ' ' || token || ' ' || reason, ',' ORDER BY user_id) FROM notif_unregistered WHERE kind = 'apns_push'"),
	'90 dead0001 Unregistered,91 bad00002 BadDeviceToken', 'answers rows apns_unregistered, apns_bad_device_token: listed in notif_unregistered');
is(sql($node, "SELECT reported_at = to_timestamp(1700000000) FROM notif_unregistered WHERE job_id = $j410"), 't',
	'answers row apns_unregistered: with the timestamp APNs gave');

# row apns_too_many_requests (Retry-After: 2): unreached, retried no
# sooner; only that device waits, not the provider.  The 2 s wait can
# outlive the 3 s provider token, so the job may meet an expired token
# before and after its 429 (403, 429, 403, sent): its type gets 5 tries.
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
      VALUES ('apns_busy', 'at_least_once', 5, 'apns', '100 ms', '200 ms')});
my $j429 = sql($node, q{SELECT notif_enqueue(92, 'apns_busy', 'busy', '{"device_token": "c0de0003", "headers": {"apns-topic": "t"}, "aps": {}}')});
ok(wait_until($node, "SELECT EXISTS (SELECT 1 FROM notif_calls WHERE job_id = $j429 AND http_status = 429)"),
	'answers row apns_too_many_requests: answered 429');
my $other = sql($node, q{SELECT notif_enqueue(92, 'apns_push', 'not-busy', '{"device_token": "0a0b0c", "headers": {"apns-topic": "t"}, "aps": {}}')});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $other"), 'apns 429: another device\'s job was sent');
is(sql($node, "SELECT (SELECT sent_at FROM notif_job WHERE id = $other)
             < (SELECT ended_at + interval '2 s' FROM notif_calls WHERE job_id = $j429 AND http_status = 429)"),
	't', 'answers row apns_too_many_requests: the provider was not paused for it');
ok(wait_until($node, "SELECT status IN ('sent', 'failed', 'expired') FROM notif_job WHERE id = $j429"), 'apns 429: the job ended');
is(sql($node, "SELECT status FROM notif_job WHERE id = $j429"), 'sent',
	'apns 429: sent after all (calls: ' . sql($node, "SELECT string_agg(coalesce(http_status::text, outcome), ' ' ORDER BY try)
	                                             FROM notif_calls WHERE job_id = $j429") . ')');
# (a provider token may expire in between: look at the 429 attempt and the next)
is(sql($node, "SELECT outcome || ' ' || http_status || ' ' || error FROM notif_calls WHERE job_id = $j429 AND http_status = 429"),
	'unreached 429 HTTP 429: TooManyRequests', 'answers row apns_too_many_requests: unreached, the reason in the error');
is(sql($node, "SELECT a2.started_at - a1.ended_at >= interval '2 s' FROM notif_calls a1
          JOIN notif_calls a2 ON a2.job_id = a1.job_id AND a2.try = a1.try + 1
         WHERE a1.job_id = $j429 AND a1.http_status = 429"),
	't', 'answers row apns_too_many_requests: the retry waited for Retry-After (2 s)');

# row fcm_quota_exceeded: unreached, and no retry for at least a minute
# (FCM's advice for its message-rate quota; no Retry-After was given)
my $jq = sql($node, q{SELECT notif_enqueue(79, 'fcm_push', 'quota', '{"token": "quota-1", "notification": {"title": "x"}}')});
ok(wait_until($node, "SELECT status = 'queued' AND tries = 1 FROM notif_job WHERE id = $jq"),
	'answers row fcm_quota_exceeded: queued again after one try');
is(sql($node, "SELECT j.outcome || ' ' || j.http_status || ' ' || (j.next_at >= a.ended_at + interval '60 s')
          FROM notif_job j JOIN notif_calls a ON a.job_id = j.id WHERE j.id = $jq"),
	'unreached 429 true', 'answers row fcm_quota_exceeded: unreached, next try a minute later at the earliest');
like(sql($node, "SELECT last_error FROM notif_job WHERE id = $jq"), qr/^HTTP 429: QUOTA_EXCEEDED: /,
	'answers row fcm_quota_exceeded: the errorCode in last_error');
sql($node, "SELECT notif_cancel($jq)");
# (the quota pauses the whole provider for that minute: FCM's quota is the project's)

# row apns_invalid_provider_token: a key APNs does not know (another key
# id): unreached, retried with the same token (no re-signing within 20
# minutes), failed when the tries run out, with the reason; logged once
sql($node, "INSERT INTO notif_provider (name, url, format, auth, credentials, ca_cert)
     VALUES ('apns_badkey', '$base', 'apns', 'apns_token', "
	  . q_lit($p8 =~ s/KEYID12345/WRONGKID00/r) . ", $ca)");
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
      VALUES ('apns_badkey', 'at_least_once', 3, 'apns_badkey', '100 ms', '100 ms')});
my $bad_before = push_stats($rig)->{apns_jwt_bad};
my $log_at = -s $node->logfile;
my $jinv = sql($node, q{SELECT notif_enqueue(98, 'apns_badkey', 'k1', '{"device_token": "ab", "headers": {"apns-topic": "t"}, "aps": {}}')});
ok(wait_until($node, "SELECT status = 'failed' FROM notif_job WHERE id = $jinv"), 'answers row apns_invalid_provider_token: failed');
is(job_row($node, $jinv) . ' ' . sql($node, "SELECT last_error FROM notif_job WHERE id = $jinv"),
	'failed unreached 3 403 HTTP 403: InvalidProviderToken',
	'answers row apns_invalid_provider_token: unreached at each of its 3 tries, the reason in last_error');
is(push_stats($rig)->{apns_jwt_bad} - $bad_before, 1, 'answers row apns_invalid_provider_token: one provider token, not re-signed');
my @refusals = slurp_file($node->logfile, $log_at) =~ /(provider "apns_badkey" refused the sender's token: \w+)/g;
is_deeply(\@refusals, [ 'provider "apns_badkey" refused the sender\'s token: InvalidProviderToken' ],
	'answers row apns_invalid_provider_token: logged once');

# a type moved to an apns provider: its old payloads fail before any call
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, paused) VALUES ('moved', 'at_least_once', 3, true)});
my $moved = sql($node, q{SELECT notif_enqueue(93, 'moved', 'm1', '{"text": "not a push message"}')});
my $calls_before = push_stats($rig)->{apns_calls};
sql($node, q{UPDATE notif_type SET provider = 'apns', paused = false WHERE code = 'moved'});
ok(wait_until($node, "SELECT status = 'failed' FROM notif_job WHERE id = $moved"), 'moved type: the old job failed');
is(sql($node, "SELECT outcome || ' ' || coalesce(http_status::text, '-') || ' ' || last_error FROM notif_job WHERE id = $moved"),
	'rejected - payload refused before the call: not a valid APNs message: it has no "device_token"',
	'moved type: rejected with the reason, no HTTP status');
is(push_stats($rig)->{apns_calls}, $calls_before, 'moved type: no call was made');

# (1.4) a provider's apns_topics, pinned after the enqueue: a job that names
# another topic fails before any call (at enqueue it is refused: sql/push.sql)
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider, paused) VALUES ('pinned', 'at_least_once', 3, 'apns', true)});
my $pinned = sql($node, q{SELECT notif_enqueue(95, 'pinned', 'p1', '{"device_token": "ab", "headers": {"apns-topic": "com.other.app"}, "aps": {}}')});
$calls_before = push_stats($rig)->{apns_calls};
sql($node, q{UPDATE notif_provider SET apns_topics = '{com.example.app}' WHERE name = 'apns';
      UPDATE notif_type SET paused = false WHERE code = 'pinned'});
ok(wait_until($node, "SELECT status = 'failed' FROM notif_job WHERE id = $pinned"), 'apns_topics: the job of another topic failed');
is(sql($node, "SELECT outcome || ' ' || coalesce(http_status::text, '-') || ' ' || last_error FROM notif_job WHERE id = $pinned"),
	'rejected - payload refused before the call: not a valid APNs message: "headers": apns-topic "com.other.app" is not one of its provider\'s apns_topics ("com.example.app")',
	'apns_topics: rejected with the reason, no HTTP status');
is(push_stats($rig)->{apns_calls}, $calls_before, 'apns_topics: no call was made');
sql($node, q{UPDATE notif_provider SET apns_topics = NULL WHERE name = 'apns'});

# (1.4) a provider's fcm_topics, pinned after the enqueue: a job that names
# another topic, or a condition, fails before any call (at enqueue it is
# refused: sql/push.sql)
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider, paused) VALUES ('fcm_pinned', 'at_least_once', 3, 'fcm', true)});
my $ftopic = sql($node, q{SELECT notif_enqueue(96, 'fcm_pinned', 'p1', '{"topic": "sports", "notification": {"title": "x"}}')});
my $fcond = sql($node, q{SELECT notif_enqueue(96, 'fcm_pinned', 'p2', '{"condition": "''news'' in topics", "notification": {"title": "x"}}')});
$calls_before = push_stats($rig)->{fcm_calls};
sql($node, q{UPDATE notif_provider SET fcm_topics = '{news}' WHERE name = 'fcm';
      UPDATE notif_type SET paused = false WHERE code = 'fcm_pinned'});
ok(wait_until($node, "SELECT count(*) = 2 FROM notif_job WHERE id IN ($ftopic, $fcond) AND status = 'failed'"),
	'fcm_topics: the jobs of another topic and of a condition failed');
is(sql($node, "SELECT string_agg(outcome || ' ' || coalesce(http_status::text, '-') || ' ' || last_error, E'\\n' ORDER BY id)
          FROM notif_job WHERE id IN ($ftopic, $fcond)"),
	qq{rejected - payload refused before the call: not a valid FCM message: "topic" "sports" is not one of its provider's fcm_topics ("news")\n}
	  . q{rejected - payload refused before the call: not a valid FCM message: "condition" is refused: it can combine any topics, and its provider sends only to tokens and its fcm_topics ("news")},
	'fcm_topics: rejected with the reason, no HTTP status');
is(push_stats($rig)->{fcm_calls}, $calls_before, 'fcm_topics: no call was made');
sql($node, q{UPDATE notif_provider SET fcm_topics = NULL WHERE name = 'fcm'});

# apns needs HTTP/2: pointed at the plain HTTP/1.1 backend, a clear error
sql($node, "INSERT INTO notif_provider (name, url, format, auth, credentials)
     VALUES ('apns_h1', 'http://127.0.0.1:$rig->{back}', 'apns', 'apns_token', " . q_lit($p8) . ")");
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES ('apns_h1', 'at_least_once', 3, 'apns_h1')});
my $h1 = sql($node, q{SELECT notif_enqueue(94, 'apns_h1', 'h1', '{"device_token": "ab", "headers": {"apns-topic": "t"}, "aps": {}}')});
ok(wait_until($node, "SELECT status = 'failed' FROM notif_job WHERE id = $h1"), 'apns over HTTP/1.1: failed');
like(sql($node, "SELECT last_error FROM notif_job WHERE id = $h1"), qr/APNs requires HTTP\/2/, 'apns over HTTP/1.1: last_error says HTTP/2 is required');

# at_most_once over HTTP/2 (its body goes through the read callback, once)
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES ('apns_amo', 'at_most_once', 3, 'apns')});
my $amo = sql($node, q{SELECT notif_enqueue(95, 'apns_amo', 'a1', '{"device_token": "a0a0", "headers": {"apns-topic": "t"}, "aps": {"alert": "x"}}')});
ok(wait_until($node, "SELECT status = 'sent' AND claimed_by IS NULL FROM notif_job WHERE id = $amo"), 'apns at_most_once: sent');
like(job_row($node, $amo), qr/^sent accepted [12] 200$/,
	'apns at_most_once: accepted (at the second try if its provider token had just expired)');

# no access token (the token endpoint refuses the assertion: another
# service account): the jobs wait, not fail; the problem is logged once,
# however often the token is fetched again; once the credentials are right
# the jobs go
(my $sa_wrong = $sa_rig) =~ s/notif\@demo\.iam/intruder\@demo.iam/ or die;
sql($node, "INSERT INTO notif_provider (name, url, format, auth, credentials, ca_cert)
     VALUES ('fcm_wait', '$base/v1/projects/demo-project/messages:send', 'fcm', 'google_service_account',
             " . q_lit($sa_wrong) . ", $ca)");
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES ('fcm_wait', 'at_least_once', 1, 'fcm_wait')});
my $log_offset = -s $node->logfile;
my $refused_before = push_stats($rig)->{assertions_bad};
my $waiting = sql($node, q{SELECT notif_enqueue(96, 'fcm_wait', 'w1', '{"topic": "news"}')});
my $refetched = 0;
for (1 .. 300)
{
	last if ($refetched = push_stats($rig)->{assertions_bad} - $refused_before) >= 3;
	usleep(100_000);
}
cmp_ok($refetched, '>=', 3, 'no token: the token endpoint refused the assertion again and again');
is(job_row($node, $waiting), 'queued - 0 -', 'no token: the job waits, untried');
my $meanwhile = sql($node, q{SELECT notif_enqueue(97, 'apns_push', 'meanwhile', '{"device_token": "ab", "headers": {"apns-topic": "t"}, "aps": {}}')});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $meanwhile"),
	'no token: the lane goes on with its other providers');
my @fetch_logs = slurp_file($node->logfile, $log_offset) =~ /(could not get an access token for provider "fcm_wait": .*)/g;
is_deeply(\@fetch_logs, [ 'could not get an access token for provider "fcm_wait": HTTP 400 from the token endpoint: invalid_grant: iss' ],
	'no token: logged once, with Google\'s error');
sql($node, "UPDATE notif_provider SET credentials = " . q_lit($sa_rig) . " WHERE name = 'fcm_wait'");
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $waiting"), 'no token: sent once a token could be had');
is(job_row($node, $waiting), 'sent accepted 1 200', 'no token: at its first try');

# --- doc/providers.md's push set-ups, as documented -------------------------
PostgreSQL::Test::Utils::append_to_file("$keys->{dir}/service-account.json", $sa_rig);
PostgreSQL::Test::Utils::append_to_file("$keys->{dir}/AuthKey.p8", $keys->{ec_key});
(my $doc_fcm = doc_sql('doc/providers.md', 'fcm')) =~ s{/etc/notif_deliver/service-account\.json}{$keys->{dir}/service-account.json} or die;
(my $doc_apns = doc_sql('doc/providers.md', 'apns')) =~ s{/etc/notif_deliver/AuthKey_ABC123DEFG\.p8}{$keys->{dir}/AuthKey.p8} or die;
$doc_fcm =~ s/'fcm'(, 'fcm')/'fcm_doc'$1/ or die;
$doc_fcm =~ s/'1 hour', 'fcm'/'1 hour', 'fcm_doc'/ or die;
$doc_apns =~ s/\('apns', /('apns_doc', / or die;
$doc_apns =~ s/'1 hour', 'apns'/'1 hour', 'apns_doc'/ or die;
$doc_apns =~ s/ABC123DEFG/KEYID12345/; $doc_apns =~ s/DEF123GHIJ/TEAMID1234/;
$node->safe_psql('postgres', $doc_fcm);
$node->safe_psql('postgres', $doc_apns);
is(sql($node, q{SELECT url IS NULL AND max_connections = 4 FROM notif_provider WHERE name = 'fcm_doc'}), 't',
	'doc fcm: the row as documented (url NULL: the default FCM URL)');
sql($node, "UPDATE notif_provider SET url = '$base/v1/projects/demo-project/messages:send', ca_cert = $ca WHERE name = 'fcm_doc';
     UPDATE notif_provider SET url = '$base', ca_cert = $ca WHERE name = 'apns_doc'");
my $doc_fcm_job = $node->safe_psql('postgres', doc_sql('doc/providers.md', 'fcm-enqueue'));
my $doc_apns_job = $node->safe_psql('postgres', doc_sql('doc/providers.md', 'apns-enqueue'));
ok(wait_until($node, "SELECT count(*) = 2 FROM notif_job WHERE id IN ($doc_fcm_job, $doc_apns_job) AND status = 'sent'"),
	'doc fcm and apns: the examples were sent');

# pruning notif_unregistered as documented
sql($node, q{CREATE TABLE app_device (user_id bigint, token text);
      INSERT INTO app_device VALUES (77, 'dead-fcm-1'), (90, 'dead0001'), (91, 'bad00002'), (5, 'alive')});
sql($node, doc_sql('doc/providers.md', 'prune'));
is(sql($node, q{SELECT string_agg(user_id || ' ' || token, ',') FROM app_device}), '5 alive',
	'doc prune: the dead tokens deleted on the app\'s side');
is(sql($node, q{SELECT count(*) FROM notif_unregistered}), '0', 'doc prune: and from notif_unregistered');

# --- url NULL: an fcm provider defaults to FCM v1's URL for its project ---
# (no network here: the call fails resolving Google's host, which names it)
sql($node, "INSERT INTO notif_provider (name, format, auth, credentials, ca_cert, timeout)
     VALUES ('fcm_default', 'fcm', 'google_service_account', " . q_lit($sa_rig) . ", $ca, '5 s')");
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES ('fcm_default_push', 'at_least_once', 1, 'fcm_default')});
my $jdef = sql($node, q{SELECT notif_enqueue(1, 'fcm_default_push', 'd', '{"token": "tok-d", "notification": {"title": "x"}}')});
ok(wait_until($node, "SELECT status = 'failed' FROM notif_job WHERE id = $jdef"),
	'fcm, url NULL: the job was tried');
like(sql($node, "SELECT last_error FROM notif_job WHERE id = $jdef"), qr{fcm\.googleapis\.com},
	'fcm, url NULL: the call went to fcm.googleapis.com');

# --- from the server's side: HTTP/2 for every call through the front -----
my $all = front_connections($rig, qr{^/(3/device|v1/projects|token)});
is($all->{h2}, $all->{calls}, "every one of the $all->{calls} calls through the front was HTTP/2");

# --- no secret anywhere it must not be -----------------------------------
my @secrets = @{ push_secrets($rig) };
cmp_ok(scalar(@secrets), '>', 5, 'the server issued and saw tokens (' . scalar(@secrets) . ')');
# (a line of each PEM key: a needle across a line break could never match
# the key as stored, in a log line or as JSON)
my ($rsa_line) = grep { length($_) >= 40 && !/-----/ } (split /\n/, $keys->{rsa_key})[ 2 .. 5 ];
my ($ec_line) = grep { length($_) >= 40 && !/-----/ } split /\n/, $keys->{ec_key};
ok(defined $rsa_line && defined $ec_line, 'a line of each private key to look for');
my @needles = (@secrets, $rsa_line, $ec_line);
# (the test's own statements, which set the keys, are logged by
# log_statement = all, and a failed one as STATEMENT: aside, with their
# continuation lines; doc/security.md says so)
my $whole_log = slurp_file($node->logfile);
ok(index($whole_log, $rsa_line) >= 0 && index($whole_log, $ec_line) >= 0,
	'the key needles are found where the keys are (the test\'s own INSERTs, logged)');
(my $log = $whole_log) =~ s/^[^\n]*(LOG:  statement|STATEMENT): [^\n]*(\n\t[^\n]*)*//mg;
my $tables = sql($node, q{SELECT coalesce(string_agg(last_error, ' '), '') FROM notif_job})
  . sql($node, q{SELECT coalesce(string_agg(error, ' '), '') FROM notif_calls})
  . sql($node, q{SELECT coalesce(string_agg(coalesce(query, '') || ' ' || coalesce(application_name, ''), ' '), '') FROM pg_stat_activity});
my @leaks = grep { index($log, $_) >= 0 || index($tables, $_) >= 0 } @needles;
is(scalar(@leaks), 0, 'no token, assertion or key in the server log, notif_job, notif_attempt or pg_stat_activity');
unlike($log, qr/\beyJ[A-Za-z0-9_-]{10,}/, 'no JWT-looking text in the server log');

done_testing();
