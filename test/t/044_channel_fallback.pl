# 044_channel_fallback.pl: notif_type.fallback_type and fallback_after
# (sender/results.c, job_sql.c's sql_fallback; notif_dlr).  Push first,
# then SMS: a job that fails, expires, or has no delivered report within
# fallback_after of its accepted call gets one job of the fallback type,
# the same user and order, its payload the "fallback" member; a delivered
# report in time cancels it; a cancelled job, or one without a "fallback"
# member, gets none; an application's uncommitted enqueue of the
# fallback's key holds no round (sender/fallback.c).
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('channel_fallback');
my $push = start_sim();
my $sms = start_sim();
my $closed = 'http://127.0.0.1:' . PostgreSQL::Test::Cluster::get_free_port() . '/send';

set_provider($node, 'push_gw', $push->{url}, idempotency_header => q('Idempotency-Key'));
set_provider($node, 'push_bad', $push->{url}, idempotency_header => q('Idempotency-Key'),
	headers => q('{"X-Sim-Fault": "400"}'));
set_provider($node, 'push_down', $closed, breaker_threshold => 1, breaker_cooldown => q('1 hour'));
set_provider($node, 'sms_gw', $sms->{url}, idempotency_header => q('Idempotency-Key'));

# --- the settings are checked ---
my ($rc, $out, $err) = $node->psql('postgres',
	q{INSERT INTO notif_type (code, delivery, max_tries, fallback_type) VALUES ('x', 'at_most_once', 1, 'nowhere')});
like($err, qr/violates foreign key constraint "notif_type_fallback_type_fkey"/, 'a fallback_type that is no type is refused');
($rc, $out, $err) = $node->psql('postgres',
	q{INSERT INTO notif_type (code, delivery, max_tries, fallback_type) VALUES ('x', 'at_most_once', 1, 'x')});
like($err, qr/violates check constraint "notif_type_fallback_type_check"/, 'so is the type itself');

sql($node, q{
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, lane) VALUES
		('otp_sms', 'at_least_once', 3, '1 minute', 'sms_gw', 'sms');
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, fallback_type, fallback_after) VALUES
		('otp_push', 'at_least_once', 3, '1 minute', 'push_gw', 'otp_sms', '2 seconds'),
		('otp_push_bad', 'at_least_once', 3, '1 minute', 'push_bad', 'otp_sms', NULL),
		('otp_push_down', 'at_least_once', 3, '3 seconds', 'push_down', 'otp_sms', NULL)});

my $payload = q('{"token": "t", "text": "code 1234", "fallback": {"to": "+84901234567", "text": "code 1234"}}');

# --- accepted, no delivered report within fallback_after: the SMS goes ---
sql($node, "SELECT notif_enqueue(1, 'otp_push', 'o1', $payload)");
ok(wait_until($node, q{SELECT status = 'sent' FROM notif_job WHERE kind = 'otp_sms' AND user_id = 1}),
	'no report 2 s after the push was accepted: the SMS was sent');
is(sql($node, q{SELECT payload::text || ' ' || (created_at - (SELECT last_ended_at FROM notif_job WHERE kind = 'otp_push' AND user_id = 1) < interval '1 second')
           || ' ' || (next_at - created_at >= interval '2 seconds')
           FROM notif_job WHERE kind = 'otp_sms' AND user_id = 1}),
	'{"to": "+84901234567", "text": "code 1234"} true true',
	'its payload the "fallback" member; written with the push\'s accepted call, due 2 s later');
is(last_request($sms, 'otp_sms:1:o1')->{body}, '{"to": "+84901234567", "text": "code 1234"}',
	'the SMS provider got the fallback member, under the same user and order');
is(last_request($push, 'otp_push:1:o1')->{body}, '{"text": "code 1234", "token": "t"}',
	'the push provider got the payload without its "fallback" member (the phone number is the SMS\'s)');

# --- a delivered report in time cancels it ---
sql($node, "SELECT notif_enqueue(2, 'otp_push', 'o2', $payload)");
ok(wait_until($node, q{SELECT count(*) = 1 FROM notif_job WHERE kind = 'otp_sms' AND user_id = 2 AND status = 'queued'}),
	'the push was accepted: its SMS waits for fallback_after');
sql($node, q{SELECT notif_dlr('otp_push:2:o2', true)});
is(sql($node, q{SELECT status || ' ' || last_error FROM notif_job WHERE kind = 'otp_sms' AND user_id = 2}), 'failed cancelled',
	'a delivered report of the push cancels the waiting SMS');

# --- failed, or expired: the SMS goes at once; none without a "fallback" member ---
sql($node, "SELECT notif_enqueue(3, 'otp_push_bad', 'o3', $payload)");
sql($node, q{SELECT notif_enqueue(4, 'otp_push_bad', 'o4', '{"token": "t", "text": "no fallback"}')});
ok(wait_until($node, q{SELECT status = 'sent' FROM notif_job WHERE kind = 'otp_sms' AND user_id = 3}),
	'the push was rejected (failed): the SMS was sent');
sql($node, "SELECT notif_enqueue(5, 'otp_push_down', 'o5', $payload)");
ok(wait_until($node, q{SELECT status = 'sent' FROM notif_job WHERE kind = 'otp_sms' AND user_id = 5}),
	'the push provider was down and the push expired at its deadline: the SMS was sent');
is(sql($node, q{SELECT status FROM notif_job WHERE kind = 'otp_push_down' AND user_id = 5}), 'expired', '  (the push expired)');
is(sql($node, q{SELECT status || ' ' || (SELECT count(*) FROM notif_job f WHERE f.user_id = 4 AND f.kind = 'otp_sms')
           FROM notif_job WHERE kind = 'otp_push_bad' AND user_id = 4}), 'failed 0',
	'a job without a "fallback" member gets none');

# --- a cancelled job gets none; each job at most one ---
sql($node, q{UPDATE notif_type SET paused = true WHERE code = 'otp_push_bad'});
my $c = sql($node, "SELECT notif_enqueue(6, 'otp_push_bad', 'o6', $payload)");
sql($node, "SELECT notif_cancel($c)");
sql($node, q{UPDATE notif_type SET paused = false WHERE code = 'otp_push_bad'});
# a push of the same type failed after the cancel: its SMS is written...
sql($node, "SELECT notif_enqueue(7, 'otp_push_bad', 'o7', $payload)");
ok(wait_until($node, q{SELECT count(*) = 1 FROM notif_job WHERE kind = 'otp_sms' AND user_id = 7}),
	'a push of the type failed after the cancel: its SMS was written');
# ... and the cancelled one has none
is(sql($node, q{SELECT count(*) FROM notif_job WHERE kind = 'otp_sms' AND user_id = 6}), '0', 'a cancelled push gets no SMS');

# the failed push, re-driven, fails again: still the one SMS it had
my $p3 = sql($node, q{SELECT id FROM notif_job WHERE kind = 'otp_push_bad' AND user_id = 3});
is(sql($node, qq{SELECT fallback_of FROM notif_job WHERE kind = 'otp_sms' AND user_id = 3}), $p3,
	'notif_job.fallback_of names the push the SMS falls back for');
sql($node, "SELECT notif_retry($p3)");
ok(wait_until($node, qq{SELECT status = 'failed' AND earlier_tries > 0 FROM notif_job WHERE id = $p3}),
	'the failed push, re-driven, failed again');
is(sql($node, q{SELECT string_agg(user_id || ':' || n, ' ' ORDER BY user_id) FROM (
           SELECT user_id, count(*) AS n FROM notif_job WHERE kind = 'otp_sms' GROUP BY user_id) c}),
	'1:1 2:1 3:1 5:1 7:1', 'one SMS per push at most');

# --- an application's enqueue of the SMS's key, not yet committed, holds no round ---
my $bg = $node->background_psql('postgres');
$bg->query_safe(q{BEGIN});
$bg->query_safe(q{SELECT notif_enqueue(8, 'otp_sms', 'o8', '{"to": "+84900000008", "text": "the app"}')});
my $p8 = sql($node, "SELECT notif_enqueue(8, 'otp_push_bad', 'o8', $payload)");
ok(wait_until($node, qq{SELECT status = 'failed' FROM notif_job WHERE id = $p8}),
	'the push whose SMS key an open transaction holds failed, and was recorded');
sql($node, "SELECT notif_enqueue(9, 'otp_push_bad', 'o9', $payload)");
ok(wait_until($node, q{SELECT status = 'sent' FROM notif_job WHERE kind = 'otp_sms' AND user_id = 9}),
	'the lane went on meanwhile: the next failed push got its SMS');
$bg->query_safe(q{ROLLBACK});
$bg->quit;
ok(wait_until($node, qq{SELECT status = 'sent' AND fallback_of = $p8 FROM notif_job WHERE kind = 'otp_sms' AND user_id = 8}),
	'the application rolled back: the fallback, pending, was written and sent');

my $l = ledger($sms);
is(join(',', map { $l->{"otp_sms:$_:o$_"}{received} // 0 } 1, 2, 3, 5, 6, 7, 8, 9), '1,0,1,1,0,1,1,1',
	'the SMS provider got each once, and never the cancelled one');

done_testing();
