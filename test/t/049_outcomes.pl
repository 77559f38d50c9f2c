# 049_outcomes.pl: notif_type.emit_outcomes (issue 46; sender/outcomes.c,
# notif_outcomes_emit, notif_cancel, notif_dlr).  Read with the
# test_decoding plugin on a logical slot: a job sent, one failed, one
# expired, one cancelled, and a fallback made each emit exactly one
# message 'notif_deliver' with the documented fields; a type without
# emit_outcomes emits none; a cancel rolled back emits nothing; a LISTEN
# session on notif_outcome is woken with the job's id and status.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('outcomes', wal_level => 'logical', max_replication_slots => '2');
my $sim = start_sim();
my $closed = 'http://127.0.0.1:' . PostgreSQL::Test::Cluster::get_free_port() . '/send';

set_provider($node, 'gw', $sim->{url}, idempotency_header => q('Idempotency-Key'));
set_provider($node, 'gw_bad', $sim->{url}, idempotency_header => q('Idempotency-Key'),
	headers => q('{"X-Sim-Fault": "400"}'));
set_provider($node, 'gw_down', $closed, breaker_threshold => 1, breaker_cooldown => q('1 hour'));

sql($node, q{
	SELECT pg_create_logical_replication_slot('outcomes', 'test_decoding');
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, emit_outcomes) VALUES
		('sms', 'at_least_once', 3, '1 day', 'gw', true),
		('sms_quiet', 'at_least_once', 3, '1 minute', 'gw', false),
		('sms_down', 'at_least_once', 3, '3 seconds', 'gw_down', true);
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, fallback_type, emit_outcomes) VALUES
		('push_bad', 'at_least_once', 3, '1 minute', 'gw_bad', 'sms', true)});

# every message decoded so far: { json, ... } in commit order
my @messages;
my $listener = $node->background_psql('postgres');
$listener->query_safe('LISTEN notif_outcome');

sub read_slot
{
	my $out = sql($node, q{SELECT data FROM pg_logical_slot_get_changes('outcomes', NULL, NULL)
		WHERE data LIKE 'message:%'});
	for my $line (split /\n/, $out)
	{
		$line =~ /^message: transactional: (\d) prefix: ([^,]+), sz: \d+ content:(.*)$/
		  or die "unexpected message line: $line";
		push @messages, { transactional => $1, prefix => $2, %{ decode_json($3) } };
	}
}

# the messages of a job, "status" each
sub statuses_of
{
	my ($id) = @_;
	read_slot();
	return join(' ', map { $_->{status} } grep { $_->{id} == $id } @messages);
}

my $fb = q('{"to": "+84901234567", "text": "code 1234", "fallback": {"to": "+84901234567", "text": "sms 1234"}}');
my $sent = enqueue($node, 1, 'sms', 'o1');
my $quiet = enqueue($node, 2, 'sms_quiet', 'o2');
my $failed = sql($node, q{SELECT notif_enqueue(3, 'push_bad', 'o3', '{"to": "+84900000003", "text": "no fallback"}')});
my $fell = sql($node, "SELECT notif_enqueue(4, 'push_bad', 'o4', $fb)");
my $expired = enqueue($node, 5, 'sms_down', 'o5');
my $cancelled = sql($node, q{SELECT notif_enqueue(6, 'sms', 'o6', '{"to": "+84900000006", "text": "x"}', now() + interval '1 hour')});
my $kept = sql($node, q{SELECT notif_enqueue(7, 'sms', 'o7', '{"to": "+84900000007", "text": "x"}', now() + interval '1 hour')});

ok(wait_until($node, qq{SELECT count(*) = 5 FROM notif_job WHERE id IN ($sent, $quiet, $failed, $fell, $expired)
                          AND status IN ('sent', 'failed', 'expired') AND claimed_by IS NULL}),
	'the jobs ended');
ok(wait_until($node, qq{SELECT status = 'sent' FROM notif_job WHERE fallback_of = $fell}), 'the fallback was sent');
my $fallback = sql($node, "SELECT id FROM notif_job WHERE fallback_of = $fell");

# --- cancelled: one message; a cancel rolled back, none ---
sql($node, "SELECT notif_cancel($cancelled)");
sql($node, "BEGIN; SELECT notif_cancel($kept); ROLLBACK");
is(sql($node, "SELECT status || ' ' || last_error FROM notif_job WHERE id = $cancelled"), 'failed cancelled',
	'  (the job is cancelled)');

# --- each end, one message ---
is(statuses_of($sent), 'sent', 'a job sent: one message, "sent"');
is(statuses_of($failed), 'failed', 'a job failed: one message, "failed"');
is(statuses_of($expired), 'expired', 'a job expired at its deadline: one message, "expired"');
is(statuses_of($cancelled), 'cancelled', 'a job cancelled: one message, "cancelled"');
is(statuses_of($fell), 'failed fallback', 'a job failed with a fallback: "failed", then "fallback"');
is(statuses_of($fallback), 'sent', 'its fallback job (a type that emits), sent: "sent"');
is(statuses_of($quiet), '', 'a type without emit_outcomes: none');
is(statuses_of($kept), '', 'a cancel rolled back: none');
is(sql($node, "SELECT status FROM notif_job WHERE id = $kept"), 'queued', '  (the job is still queued)');

# --- the fields ---
my %m = map { ("$_->{id} $_->{status}" => $_) } @messages;
my $s = $m{"$sent sent"};
is(join(' ', $s->{prefix}, $s->{transactional}), 'notif_deliver 1', 'prefix notif_deliver, transactional');
is(join(' ', map { $s->{$_} // '-' } qw(id kind user_id order_id status outcome provider tries http_status)),
	"$sent sms 1 o1 sent accepted gw 1 200",
	'a sent message: id kind user_id order_id status outcome provider tries http_status');
ok(defined $s->{sent_at} && !defined $s->{error} && !defined $s->{fallback_id} && exists $s->{resolved_by},
	'  and sent_at, no error, no fallback_id, resolved_by null');
my $f = $m{"$failed failed"};
is(join(' ', map { $f->{$_} // '-' } qw(status outcome provider tries http_status)), 'failed rejected gw_bad 1 400',
	'a failed message: the call that ended it (rejected, HTTP 400)');
like($f->{error}, qr/400/, '  with the job\'s last_error');
my $e = $m{"$expired expired"};
is(join(' ', map { $e->{$_} // '-' } qw(status outcome provider)), 'expired unreached gw_down',
	'an expired message: its last call never reached the provider');
my $c = $m{"$cancelled cancelled"};
is(join(' ', map { $c->{$_} // '-' } qw(status outcome tries error)), 'cancelled - 0 cancelled',
	'a cancelled message: no call, error "cancelled"');
my $fm = $m{"$fell fallback"};
is(join(' ', map { $fm->{$_} // '-' } qw(kind user_id status fallback_id fallback_kind)),
	"push_bad 4 fallback $fallback sms", 'a fallback message: the job, its fallback job and type');
ok(defined $fm->{fallback_due_at}, '  and when the fallback is due');
is($m{"$fallback sent"}{fallback_of}, $fell, 'the fallback job\'s own message names the job it falls back for');
is(scalar(@messages), 7, 'seven messages in all');

# --- a delivered report that ends a job waiting after an ambiguous call ---
fault_provider($node, 'gw_ambiguous', $sim->{url}, 'timeout');
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, resolve_wait, emit_outcomes)
             VALUES ('sms_wait', 'at_least_once', 3, '1 minute', 'gw_ambiguous', '1 hour', true)});
my $waiting = enqueue($node, 8, 'sms_wait', 'o8');
ok(wait_until($node, "SELECT status = 'queued' AND outcome = 'unknown' FROM notif_job WHERE id = $waiting"),
	'a call ended ambiguous: the job waits for a report');
is(statuses_of($waiting), '', '  (no message: not a final status)');
sql($node, q{SELECT notif_dlr('sms_wait:8:o8', true)});
is(statuses_of($waiting), 'sent', 'a delivered report ends it: one message, "sent"');
is((grep { $_->{id} == $waiting } @messages)[0]{resolved_by}, 'report', '  resolved_by "report"');

# --- the wake-up ---
my $woken = $listener->query_safe('SELECT 1');
$woken .= $listener->{stderr} // '';
like($woken, qr/"id" : $cancelled, "status" : "cancelled"/, 'a LISTEN session on notif_outcome was woken: id and status');
unlike($woken, qr/"id" : $kept\b/, '  not for the cancel rolled back');
$listener->quit;

done_testing();
