# 028_push_bad_answers.pl: a push provider's answers that are not what the
# platform documents never stop a sender, and what they say is stored as
# text.  On the loopback push rig (test/lib/perl/PushTest.pm): a token endpoint
# whose expires_in is out of any range (1e30, -5) is a failed fetch, logged
# once, retried with backoff, and the jobs wait for a good answer; so is
# one whose access_token is not a bearer token (a CR LF in it would add a
# header line to every call), and no call carries it; an APNs
# 410 whose timestamp is 1e30 is Unregistered at the time it came; an APNs
# 502 whose body is not text and an FCM reason cut inside a UTF-8
# character go into last_error as printable ASCII; an APNs 400 in a 4 MB
# answer is read up to 16 kB, and rejected on its status; a Retry-After
# past all bounds (a number past any integer, the largest 64-bit one, a
# date in the year 9999) holds the job an hour, no more.  Throughout, the
# sender is the same process: nothing made it exit.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PushTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

if (my $missing = push_rig_missing())
{
	plan skip_all => "$missing (test/deps.sh installs it)";
}

my $keys = make_push_keys();
my $node = new_node('push_bad', 'notif_deliver.poll_interval' => "'200ms'");

sub q_lit { my ($s) = @_; $s =~ s/'/''/g; return "'$s'"; }

my $rig = start_push_rig($keys, 'token-life' => 3600);
push_control($rig, '/expires-in/1e30');		# before any fetch
my $base = $rig->{base};
my $ca = q_lit($keys->{cert_pem});
my $sa = service_account_json($keys, "$base/token");
my $p8 = apns_key_json($keys);

sql($node, "INSERT INTO notif_provider (name, url, format, auth, credentials, ca_cert, timeout)
     VALUES ('fcm', '$base/v1/projects/demo-project/messages:send', 'fcm', 'google_service_account',
             " . q_lit($sa) . ", $ca, '5 s'),
            ('fcm2', '$base/v1/projects/demo-project/messages:send', 'fcm', 'google_service_account',
             " . q_lit($sa) . ", $ca, '5 s'),
            ('apns', '$base', 'apns', 'apns_token', " . q_lit($p8) . ", $ca, '5 s')");
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max) VALUES
      ('fcm_push', 'at_least_once', 2, 'fcm', '100 ms', '200 ms'),
      ('fcm2_push', 'at_least_once', 2, 'fcm2', '100 ms', '200 ms'),
      ('apns_push', 'at_least_once', 2, 'apns', '100 ms', '200 ms')});
ok(wait_until($node, "SELECT count(*) = 1 FROM notif_workers() WHERE role = 'sender'"), 'a sender runs');
my $sender = sql($node, "SELECT pid FROM notif_workers() WHERE role = 'sender'");

sub same_sender
{
	my ($what) = @_;
	is(sql($node, "SELECT string_agg(pid::text, ',') FROM notif_workers() WHERE role = 'sender'"), $sender,
		"$what: the same sender process as at the start");
}

# --- expires_in out of range: a failed fetch, once in the log ------------
my $log_at = -s $node->logfile;
my $waiting = sql($node, q{SELECT notif_enqueue(1, 'fcm_push', 'w', '{"token": "tok-w", "notification": {"title": "x"}}')});
ok(wait_push_stat($rig, 'token_requests', 1), 'expires_in 1e30: the token was fetched again (backoff)');
push_control($rig, '/expires-in/-5');
ok(wait_push_stat($rig, 'token_requests', 2), 'expires_in -5: and again');
is(job_row($node, $waiting), 'queued - 0 -', 'expires_in out of range: the job waits, queued, never called');
my $log = substr(slurp_file($node->logfile), $log_at);
my @lines = $log =~ /(could not get an access token for provider "fcm": [^\n]*)/g;
is_deeply(\@lines,
	[ q{could not get an access token for provider "fcm": the token endpoint's expires_in is not a number of seconds from 1 to 86400} ],
	'expires_in out of range: one LOG line for every failed fetch, naming the member');
unlike($log, qr/out of range|terminated by signal|exited with exit code/,
	'expires_in out of range: no ERROR, no sender exit');
same_sender('expires_in out of range');
push_control($rig, '/expires-in/');
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $waiting"),
	'expires_in back to 3600: the waiting job was sent');
like(substr(slurp_file($node->logfile), $log_at), qr/provider "fcm" has an access token again/,
	'expires_in back to 3600: the recovery logged');

# --- an access_token with a CR LF: refused, never in a header -------------
# (src/provider/auth.c, is_bearer_token: RFC 6750's b64token only)
push_control($rig, '/token-suffix/%0D%0AX-Injected:%201');
$log_at = -s $node->logfile;
my $before = push_stats($rig);
my $crlf = sql($node, q{SELECT notif_enqueue(6, 'fcm2_push', 'crlf', '{"token": "tok-crlf", "notification": {"title": "x"}}')});
ok(wait_push_stat($rig, 'token_requests', $before->{token_requests} + 1),
	'access_token with CR LF: refused, and fetched again (backoff)');
is(job_row($node, $crlf), 'queued - 0 -', 'access_token with CR LF: the job waits, queued, never called');
my $after = push_stats($rig);
is($after->{fcm_calls} - $before->{fcm_calls}, 0, 'access_token with CR LF: no FCM call was made with it');
is($after->{injected}, 0, 'access_token with CR LF: no request carried its header line');
$log = substr(slurp_file($node->logfile), $log_at);
@lines = $log =~ /(could not get an access token for provider "fcm2": [^\n]*)/g;
is_deeply(\@lines,
	[ q{could not get an access token for provider "fcm2": the token endpoint's access_token is not a bearer token (RFC 6750: letters, digits, -._~+/ and = at its end)} ],
	'access_token with CR LF: one LOG line for every refused token, naming the rule');
is(scalar(grep { index($log, $_) >= 0 } 'X-Injected', @{ push_secrets($rig) }), 0,
	'access_token with CR LF: the token is not in the log');
push_control($rig, '/token-suffix/');
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $crlf"),
	'a bearer token again: the waiting job was sent');

# --- an FCM reason cut at 120 bytes inside a UTF-8 character ---------------
my $jlong = sql($node, q{SELECT notif_enqueue(2, 'fcm_push', 'l', '{"token": "long-1", "notification": {"title": "x"}}')});
ok(wait_until($node, "SELECT status = 'failed' FROM notif_job WHERE id = $jlong"), 'fcm long reason: failed (400)');
is(sql($node, "SELECT last_error FROM notif_job WHERE id = $jlong"), 'HTTP 400: x' . ('?' x 119) . '...',
	'fcm long reason: its first 120 bytes (src/core/excerpt.c), each byte of "é" a "?"');

# --- APNs: a 410 with timestamp 1e30, a 502 that is not text --------------
my $t0 = sql($node, 'SELECT now()');
my $jfar = sql($node, q{SELECT notif_enqueue(3, 'apns_push', 'far', '{"device_token": "deadbeef01", "headers": {"apns-topic": "t"}, "aps": {}}')});
my $jhtml = sql($node, q{SELECT notif_enqueue(4, 'apns_push', 'html', '{"device_token": "0bad0001", "headers": {"apns-topic": "t"}, "aps": {}}')});
ok(wait_until($node, "SELECT count(*) = 2 FROM notif_job WHERE id IN ($jfar, $jhtml) AND status = 'failed'"),
	'apns 410 with timestamp 1e30, 502 with a binary body: both failed');
is(job_row($node, $jfar), 'failed rejected 1 410', 'apns timestamp 1e30: Unregistered, rejected at its first try');
is(sql($node, "SELECT token || ' ' || reason || ' ' || (reported_at >= '$t0' AND reported_at <= now())
          FROM notif_unregistered WHERE job_id = $jfar"),
	'deadbeef01 Unregistered true', 'apns timestamp 1e30: listed, reported at the time the answer came');
is(job_row($node, $jhtml), 'failed unknown 2 502', 'apns 502: ambiguous, retried, failed after max_tries');
is(sql($node, "SELECT string_agg(DISTINCT error, ',') FROM notif_calls WHERE job_id = $jhtml"),
	'HTTP 502: ??<html>Bad Gateway, caf??</html>',
	'apns 502: its body in the error as printable ASCII, each other byte a "?"');

# --- APNs: a 400 whose answer is 4 MB ---------------------------------------
# a push answer is kept up to 16 kB (MAX_ANSWER, src/http/handles.c), and a
# 400 read no further: the sender's memory does not grow by the answer, and
# the cut answer is not JSON: its status alone decides, its start is last_error
sub peak_kb { return (slurp_file("/proc/$sender/status") =~ /^VmHWM:\s+(\d+) kB/m)[0]; }
my $peak_before = peak_kb();
my $jfat = sql($node, q{SELECT notif_enqueue(5, 'apns_push', 'fat', '{"device_token": "fa700001", "headers": {"apns-topic": "t"}, "aps": {}}')});
ok(wait_until($node, "SELECT status = 'failed' FROM notif_job WHERE id = $jfat"), 'apns 400 in a 4 MB answer: failed');
is(job_row($node, $jfat), 'failed rejected 1 400', 'apns 4 MB answer: rejected on its status, at its first try');
is(sql($node, "SELECT count(*) FROM notif_unregistered WHERE job_id = $jfat"), '0',
	'apns 4 MB answer: its reason, past 16 kB of padding, unread: the device token is not listed as dead');
like(sql($node, "SELECT last_error FROM notif_job WHERE id = $jfat"), qr/^HTTP 400: \{"padding":"/,
	'apns 4 MB answer: last_error is its start');
my $grew = peak_kb() - $peak_before;
cmp_ok($grew, '<', 2 * 1024, "apns 4 MB answer: the sender's peak memory grew by less than 2 MB ($grew kB)");
# --- APNs: a 429 whose Retry-After is past all bounds -----------------------
# (NOTIF_RETRY_AFTER_MAX_MS, src/lifecycle/delivery.h: an hour; a c0de*
# device is answered 429 once, then accepted: a job retried sooner is sent)
my $n = 0;
for my $ra ('99999999999999999999999', '9223372036854775807', 'Fri, 31 Dec 9999 23:59:59 GMT')
{
	(my $escaped = $ra) =~ s/([^A-Za-z0-9])/sprintf('%%%02X', ord $1)/ge;
	push_control($rig, "/retry-after/$escaped");
	$n++;
	my $j = sql($node, qq{SELECT notif_enqueue(7, 'apns_push', 'ra$n', '{"device_token": "c0de000$n", "headers": {"apns-topic": "t"}, "aps": {}}')});
	ok(wait_until($node, "SELECT tries >= 1 FROM notif_job WHERE id = $j"), "Retry-After: $ra: the 429 came");
	is(sql($node, "SELECT status || ' ' || tries || ' ' || http_status || ' ' || (next_at > now() + interval '59 minutes' AND next_at <= now() + interval '1 hour')
	          FROM notif_job WHERE id = $j"),
		'queued 1 429 true', "Retry-After: $ra: the job waits an hour, no more");
}
same_sender('after every bad answer');

done_testing();
