# 047_provider_batches.pl: provider batches (notif_provider.batch_max, issue
# 45).  A json provider with batch_max > 1 gets the due jobs of a round in
# calls of at most batch_max messages (sender/batch_calls.c, provider/batch.c);
# each job keeps its own outcome through the lifecycle table and its own row
# in notif_calls, batch_id naming the call it shared.  The simulator's
# /batch endpoint records each message under its ref (test/sim/README.md).
# Checked: the CHECKs of the columns; a batch with mixed per-message results
# (accepted, rejected, unknown, none; matched by key, answered in reverse);
# a batch answered 2xx but unreadable; a batch that times out, per delivery;
# a SIGKILL of the sender with batches in flight; max_inflight and
# rate_limit with batches; an Expo-style DeviceNotRegistered result listed
# in notif_unregistered.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('provider_batches');
my $sim = start_sim();
(my $batch_url = $sim->{url}) =~ s{/send$}{/batch};

my $results = q('{"path": "results", "match": "key", "key_field": "ref", "field": "status",
	"accepted": ["accepted"], "rejected": ["rejected"]}');
my $in_order = q('{"path": "results", "field": "status", "accepted": ["accepted"], "rejected": ["rejected"]}');

# ---- the columns' CHECKs
set_provider($node, 'plain', $sim->{url});
my ($rc, $out, $err) = $node->psql('postgres',
	q{UPDATE notif_provider SET format = 'form', batch_max = 10,
	  batch_results = '{"field": "status", "accepted": ["ok"]}' WHERE name = 'plain'});
like($err, qr/violates check constraint "notif_provider_batch_json_check"/,
	'batch_max > 1 is refused for a provider that is not json');
($rc, $out, $err) = $node->psql('postgres',
	q{UPDATE notif_provider SET batch_max = 10 WHERE name = 'plain'});
like($err, qr/violates check constraint "notif_provider_batch_json_check"/,
	'batch_max > 1 without batch_results is refused');
for my $bad ('{"field": "status"}', '{"field": "status", "accepted": [1]}',
	'{"field": "status", "accepted": ["ok"], "match": "key"}',
	'{"field": "a..b", "accepted": ["ok"]}', '{"field": "s", "accepted": ["ok"], "extra": 1}')
{
	($rc, $out, $err) = $node->psql('postgres',
		qq{UPDATE notif_provider SET batch_results = '$bad' WHERE name = 'plain'});
	like($err, qr/violates check constraint "notif_provider_batch_results_check"/,
		"a malformed batch_results is refused: $bad");
}
($rc, $out, $err) = $node->psql('postgres',
	q{UPDATE notif_provider SET batch_max = 0,
	  batch_results = '{"field": "status", "accepted": ["ok"]}' WHERE name = 'plain'});
like($err, qr/notif_provider_batch_max_check/, 'batch_max 0 is refused');
($rc, $out, $err) = $node->psql('postgres',
	q{UPDATE notif_provider SET batch_format = '{"field": ""}' WHERE name = 'plain'});
like($err, qr/notif_provider_batch_format_check/, 'an empty batch_format field is refused');

# ---- the providers: all on the simulator's /batch
set_provider($node, 'bulk', $batch_url, ref_field => q('ref'), batch_max => 10,
	batch_format => q('{"field": "messages"}'), batch_results => $results,
	headers => q('{"X-Sim-Batch-Order": "reverse"}'));
set_provider($node, 'bulk_garbled', $batch_url, ref_field => q('ref'), batch_max => 10,
	batch_results => $in_order, headers => q('{"X-Sim-Fault": "garbled"}'));
# the first call of each batch held past the 600 ms timeout, delivered; the next succeed
set_provider($node, 'bulk_timeout', $batch_url, ref_field => q('ref'), batch_max => 10,
	batch_results => $in_order, timeout => q('600 ms'),
	headers => q('{"X-Sim-Fault": "timeout_delivered", "X-Sim-Fail-First": "1"}'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max) VALUES
		('mixed', 'at_most_once', 3, 'bulk', '100 ms', '200 ms'),
		('garbled', 'at_least_once', 1, 'bulk_garbled', '100 ms', '200 ms'),
		('amo_to', 'at_most_once', 3, 'bulk_timeout', '100 ms', '200 ms'),
		('alo_to', 'at_least_once', 3, 'bulk_timeout', '100 ms', '200 ms');
});

# enqueue N jobs of KIND in one statement (one claim takes them all); the
# payload of job i gets "sim": SIM{i} when given
sub enqueue_many
{
	my ($kind, $n, %sim) = @_;
	my $cases = join(' ', map { "WHEN $_ THEN '$sim{$_}'" } sort keys %sim);
	my $sim_expr = %sim ? "CASE i $cases END" : 'NULL';
	return split /\n/, sql($node, qq{
		SELECT notif_enqueue(1, '$kind', 'o' || i,
		       jsonb_strip_nulls(jsonb_build_object('to', '+8490000000' || i, 'text', 'batch', 'sim', $sim_expr)))
		  FROM generate_series(1, $n) i ORDER BY i});
}

sub all_done
{
	my ($kinds) = @_;
	return wait_until($node, qq{SELECT count(*) = 0 FROM notif_job
		WHERE kind IN ($kinds) AND (status IN ('queued', 'sending') OR claimed_by IS NOT NULL)});
}

# ---- mixed per-message results in one call, matched by key
# the first message (the one whose call carries the others) rejected
my @mixed = enqueue_many('mixed', 5, 1 => 'reject', 3 => 'unknown', 4 => 'drop');
ok(all_done(q('mixed')), 'the mixed batch ended');
is(sql($node, q{SELECT count(DISTINCT c.batch_id) || ' ' || count(c.batch_id) FROM notif_calls c
	JOIN notif_job j ON j.id = c.job_id WHERE j.kind = 'mixed'}), '1 5',
	'the five messages went in one call: one batch_id, on each row of notif_calls');
my %mixed_expect = (
	1 => ['failed rejected 1 200', '1 0 1', 'rejected alone (amo_rejected)'],
	2 => ['sent accepted 1 200', '1 1 1', 'accepted'],
	3 => ['sent unknown 1 200', '1 0 1', 'a result neither accepted nor rejected: unknown, not retried (amo_unknown)'],
	4 => ['sent unknown 1 200', '1 1 1', 'no result for it: unknown (amo_unknown)'],
	5 => ['sent accepted 1 200', '1 1 1', 'accepted'],
);
for my $i (1 .. 5)
{
	my ($row, $ledger, $what) = @{ $mixed_expect{$i} };
	is(job_row($node, $mixed[ $i - 1 ]), $row, "mixed batch, message $i: $what");
	is(ledger_key($sim, "mixed:1:o$i"), $ledger, "mixed batch, message $i: the provider's ledger");
}
like(sql($node, "SELECT last_error FROM notif_job WHERE id = $mixed[0]"), qr/batch result rejected/,
	'a rejected message says its result in last_error');
my $body = last_request($sim, 'mixed:1:o2')->{body};
like($body, qr/^\{.*"ref": "mixed:1:o2".*\}$/, 'each message carries its key in ref_field');
my %h = %{ headers_of(last_request($sim, 'mixed:1:o2')) };
ok(!exists $h{'Idempotency-Key'}, 'a batch call carries no idempotency header');

# ---- a 2xx whose results cannot be read: every message unknown
my @garbled = enqueue_many('garbled', 3);
ok(all_done(q('garbled')), 'the unreadable batch ended');
is(sql($node, "SELECT string_agg(status || ' ' || outcome, ',' ORDER BY id) FROM notif_job WHERE kind = 'garbled'"),
	'failed unknown,failed unknown,failed unknown',
	'a 2xx whose results cannot be read makes every message unknown (at_least_once, one try: alo_out_of_tries)');
like(sql($node, "SELECT last_error FROM notif_job WHERE id = $garbled[0]"), qr/could not be read/,
	'... and says so');

# ---- a batch that times out, per delivery
my @amo = enqueue_many('amo_to', 3);
my @alo = enqueue_many('alo_to', 3);
ok(all_done(q('amo_to', 'alo_to')), 'the batches that timed out ended');
for my $i (1 .. 3)
{
	is(job_row($node, $amo[ $i - 1 ]), 'sent unknown 1 -',
		"at_most_once message $i of a batch that timed out: unknown, never retried (amo_unknown)");
	is(ledger_key($sim, "amo_to:1:o$i"), '1 1 1', "... received and delivered once");
	is(job_row($node, $alo[ $i - 1 ]), 'sent accepted 2 200',
		"at_least_once message $i of a batch that timed out: retried, accepted");
	is(ledger_key($sim, "alo_to:1:o$i"), '2 2 1', "... the ledger shows its copy");
}
is(sql($node, q{SELECT count(DISTINCT a.batch_id) FROM notif_attempt a JOIN notif_job j ON j.id = a.job_id
	WHERE j.kind = 'alo_to' AND a.try = 1}), '1', 'the at_least_once messages timed out in one call');

# ---- a SIGKILL of the sender with batches in flight
my $slow = start_sim('--latency-ms', '60000');
(my $slow_url = $slow->{url}) =~ s{/send$}{/batch};
set_provider($node, 'bulk_slow', $slow_url, ref_field => q('ref'), batch_max => 10,
	batch_results => $in_order, timeout => q('30 s'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max) VALUES
		('amo_kill', 'at_most_once', 3, 'bulk_slow', '100 ms', '200 ms'),
		('alo_kill', 'at_least_once', 3, 'bulk_slow', '100 ms', '200 ms');
});
my @amo_kill = enqueue_many('amo_kill', 4);
my @alo_kill = enqueue_many('alo_kill', 4);
ok(wait_until_ledger($slow, sub { keys %{ $_[0] } == 8 }), 'both batches reached the provider');
is(stats($slow)->{batch_calls}, 2, '... in two calls');
my $pid = sender_pid($node);
kill 'KILL', $pid;
sim_get($slow, '/config?latency_ms=0');
ok(all_done(q('amo_kill', 'alo_kill')), 'the jobs of the killed sender ended');
my $ledger = ledger($slow);
for my $i (1 .. 4)
{
	is($ledger->{"amo_kill:1:o$i"}{delivered}, 1, "at_most_once message $i in flight at the SIGKILL: delivered once, never twice");
	is(job_row($node, $amo_kill[ $i - 1 ]) =~ /^sent unknown/ ? 1 : 0, 1, '... and left unknown');
	cmp_ok($ledger->{"alo_kill:1:o$i"}{delivered}, '>=', 1, "at_least_once message $i in flight at the SIGKILL: never lost");
	like(job_row($node, $alo_kill[ $i - 1 ]), qr/^sent accepted/, '... and sent');
}

# ---- batch_wait: jobs due wait for others to fill a batch (at most that long)
set_provider($node, 'bulk_wait', $batch_url, ref_field => q('ref'), batch_max => 3,
	batch_results => $in_order, batch_wait => q('1 minute'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES ('waiting', 'at_least_once', 3, 'bulk_wait');
});
wait_config_read($node, 'default');
sql($node, q{SELECT notif_enqueue(1, 'waiting', 'o' || i, '{"to": "+84900000009"}') FROM generate_series(1, 2) i});
sql($node, q{SELECT notif_enqueue(1, 'waiting', 'o3', '{"to": "+84900000009"}')});
ok(all_done(q('waiting')), 'the batch that waited ended');
is(sql($node, q{SELECT count(DISTINCT c.batch_id) || ' ' || count(c.batch_id) FROM notif_calls c
	JOIN notif_job j ON j.id = c.job_id WHERE j.kind = 'waiting'}), '1 3',
	'batch_wait: two jobs due waited for a third, and went in one call');

# ---- limits: max_inflight counts calls, rate_limit counts messages
set_provider($node, 'bulk_one', $batch_url, ref_field => q('ref'), batch_max => 3,
	batch_results => $in_order, max_inflight => 1, headers => q('{"X-Sim-Latency-Ms": "100"}'));
set_provider($node, 'bulk_rate', $batch_url, ref_field => q('ref'), batch_max => 10,
	batch_results => $in_order, rate_limit => 20);
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES
		('one', 'at_least_once', 3, 'bulk_one'), ('rate', 'at_least_once', 3, 'bulk_rate');
});
wait_config_read($node, 'default');
enqueue_many('one', 9);
enqueue_many('rate', 40);
ok(all_done(q('one', 'rate')), 'the limited batches ended');
is(sql($node, q{SELECT string_agg(n::text, ',') FROM (SELECT count(*) AS n FROM notif_calls c
	JOIN notif_job j ON j.id = c.job_id WHERE j.kind = 'one' GROUP BY c.batch_id) s}), '3,3,3',
	'max_inflight 1, batch_max 3: nine messages in three calls of three');
is(sql($node, q{WITH b AS (SELECT c.batch_id, min(c.started_at) AS s, max(c.ended_at) AS e FROM notif_calls c
	JOIN notif_job j ON j.id = c.job_id WHERE j.kind = 'one' GROUP BY c.batch_id)
	SELECT count(*) FROM b b1 JOIN b b2 ON b1.batch_id < b2.batch_id AND b1.s < b2.e AND b2.s < b1.e}), '0',
	'max_inflight 1: never two calls in flight');
is(sql($node, q{SELECT count(DISTINCT c.batch_id) FILTER (WHERE c.batch_id IS NOT NULL) || ' ' || count(*)
	FROM notif_calls c JOIN notif_job j ON j.id = c.job_id WHERE j.kind = 'rate'}), '4 40',
	'rate_limit: forty messages in four calls of ten');
# 20 messages a second: the first two calls take the burst, the next wait
# for the tokens their eighteen other messages took (a lower bound only)
cmp_ok(sql($node, q{SELECT extract(epoch FROM max(c.started_at) - min(c.started_at)) FROM notif_calls c
	JOIN notif_job j ON j.id = c.job_id WHERE j.kind = 'rate'}), '>=', 0.8,
	'rate_limit counts messages: forty at 20 a second are not sent at once');

# ---- an Expo-style push provider: a ticket DeviceNotRegistered fails its
# message alone and lists the message's device token (at token_field) in
# notif_unregistered, as an FCM or APNs answer does
for my $bad ('{"field": "status", "accepted": ["ok"], "unregistered": ["DeviceNotRegistered"]}',
	'{"field": "status", "accepted": ["ok"], "rejected": ["error"], "reason": "e", "unregistered": "DeviceNotRegistered"}',
	'{"field": "status", "accepted": ["ok"], "token_field": "to"}')
{
	is(sql($node, "SELECT notif_batch_results_valid('$bad')"), 'f', "batch_results refused: $bad");
}
set_provider($node, 'expo', $batch_url, ref_field => q('ref'), batch_max => 10,
	batch_results => q('{"path": "results", "field": "status", "accepted": ["accepted"], "rejected": ["rejected"],
		"reason": "error", "unregistered": ["DeviceNotRegistered"], "token_field": "to"}'));
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
	VALUES ('expo_push', 'at_least_once', 3, 'expo', '100 ms', '200 ms')});
my @expo = split /\n/, sql($node, q{
	SELECT notif_enqueue(40 + i, 'expo_push', 'e' || i,
	       jsonb_strip_nulls(jsonb_build_object('to', 'ExponentPushToken[dev' || i || ']', 'title', 'Hi',
	                                            'sim', CASE i WHEN 2 THEN 'unregistered' END)))
	  FROM generate_series(1, 3) i ORDER BY i});
ok(all_done(q('expo_push')), 'the Expo-style batch ended');
is(sql($node, "SELECT count(DISTINCT batch_id) FROM notif_calls WHERE job_id IN (" . join(',', @expo) . ")"), '1',
	'the three pushes went in one call');
is(job_row($node, $expo[1]), 'failed rejected 1 200', 'a DeviceNotRegistered ticket fails its message alone, not retried');
like(sql($node, "SELECT last_error FROM notif_job WHERE id = $expo[1]"), qr/^HTTP 200: batch result rejected: DeviceNotRegistered$/,
	'... the reason in last_error');
is(sql($node, "SELECT string_agg(status, ',' ORDER BY id) FROM notif_job WHERE id IN ($expo[0], $expo[2])"), 'sent,sent',
	'the batch\'s other pushes were sent');
is(sql($node, q{SELECT string_agg(user_id || ' ' || token || ' ' || reason || ' ' || (job_id IS NOT NULL), ',')
	FROM notif_unregistered WHERE kind = 'expo_push'}), '42 ExponentPushToken[dev2] DeviceNotRegistered true',
	'the dead device token is listed in notif_unregistered');

done_testing();
