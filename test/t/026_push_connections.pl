# 026_push_connections.pl: a provider's max_connections is shared among the
# lane's senders that run, not those the setting asks for.  Here
# senders_per_lane = 2 but max_lanes = 1 leaves the lane one sender: it
# takes max_connections = 4 whole.  The HTTP/2 front lets a connection
# carry 4 calls at once, so 80 calls in flight need more connections than
# the cap, and the cap is what the sender keeps open at once (shared by
# the setting, it would be 2).
#
# Then the provider leaves the lane (its type paused): the sender closes
# its connections to it, which it would otherwise keep for its life (the
# front here keeps idle connections 30 minutes), and opens them again when
# the type is resumed; left with calls in flight, it lets them end and be
# recorded first.  Then 70 providers come and go in batches of 10: a
# sender has pools for 64 HTTPS providers, and those of providers that
# left must make room for new ones (else the newest calls went through
# the plain pools, over HTTP/1.1, which APNs refuses).  Last, all 70 at
# once: a sender holds the tokens of 64, so the others' jobs wait, with a
# WARNING, until some providers leave the lane.  And 65 https webhooks at
# once: 64 get a pool each, the last goes through the plain pools over
# HTTP/1.1, with a WARNING.  And a Google token fetch still in flight when
# its provider's slot goes to another: its answer is dropped, not written
# into the slot's new provider.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PushTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

if (my $missing = push_rig_missing())
{
	plan skip_all => "$missing (test/deps.sh installs it)";
}
require JSON::PP;

my $keys = make_push_keys();
my $node = new_node('push_connections',
	'notif_deliver.senders_per_lane' => 2,
	'notif_deliver.max_lanes' => 1);
my $rig = start_push_rig($keys, 'delay-ms' => 500, 'token-hold' => 1, 'token-life' => 600,
	front_streams => 4, front_idle => '30m');
my $p8 = JSON::PP->new->canonical->encode({
	key_id => 'KEYID12345', team_id => 'TEAMID1234', private_key => $keys->{ec_key} });
(my $p8_sql = $p8) =~ s/'/''/g;
(my $ca = $keys->{cert_pem}) =~ s/'/''/g;
(my $sa_sql = JSON::PP->new->canonical->encode({
	type => 'service_account', project_id => 'demo-project', private_key_id => 'k1',
	private_key => $keys->{rsa_key}, client_email => 'notif@demo.iam.gserviceaccount.com',
	token_uri => "$rig->{base}/token" })) =~ s/'/''/g;
$node->safe_psql('postgres', "
	INSERT INTO notif_provider (name, url, format, auth, credentials, ca_cert, max_connections, timeout)
	VALUES ('apns', '$rig->{base}', 'apns', 'apns_token', '$p8_sql', '$ca', 4, '10 s');
	INSERT INTO notif_type (code, delivery, max_tries, provider, lane) VALUES ('apns_push', 'at_least_once', 3, 'apns', 'push');
	-- a second type keeps the lane (and its sender) when apns_push is paused
	INSERT INTO notif_type (code, delivery, max_tries, lane) VALUES ('push_other', 'at_least_once', 3, 'push')");

ok($node->wait_for_log(qr/lane "push" lacks a sender: more than 1 senders/),
	'max_lanes = 1: the lane has one of its two senders, and the launcher says so');
is($node->safe_psql('postgres', q{SELECT count(*) FROM notif_workers() WHERE role = 'sender' AND pid IS NOT NULL}),
	'1', 'one sender runs');

# n APNs jobs of apns_push, orders and device tokens with the given prefixes
sub enqueue_apns
{
	my ($n, $order, $token) = @_;
	$node->safe_psql('postgres', qq{
		SELECT notif_enqueue(g, 'apns_push', '$order' || g,
		                     jsonb_build_object('device_token', '$token' || g,
		                                        'headers', '{"apns-push-type": "alert", "apns-topic": "com.example.app"}'::jsonb,
		                                        'aps', '{"alert": "hi"}'::jsonb))
		  FROM generate_series(1, $n) g});
}
enqueue_apns(80, 'b', 'a1b2c3');

# the sender's connections to the front open at once, as the kernel lists
# them, sampled until the jobs are sent
sub front_open
{
	return scalar grep { /\S/ } split /\n/, `ss -Htn state established '( dport = :$rig->{front} )'`;
}

# the connections still open once none is, or the wait times out
sub front_closed
{
	my $left = front_open();
	my $until = time + $PostgreSQL::Test::Utils::timeout_default;
	while ($left > 0 && time < $until)
	{
		usleep(50_000);
		$left = front_open();
	}
	return $left;
}

# true once a condition holds; false if the wait times out
sub wait_for_true
{
	my ($cond) = @_;
	my $until = time + $PostgreSQL::Test::Utils::timeout_default;
	while (time < $until)
	{
		return 1 if $cond->();
		usleep(50_000);
	}
	return 0;
}

# true once no established connection matches an ss filter
sub wait_for_none
{
	my ($filter) = @_;
	return wait_for_true(sub { `ss -Htn state established '$filter'` !~ /\S/ });
}

my ($most, $sent) = (0, 0);
my $deadline = time + 120;
while (time < $deadline)
{
	my $open = front_open();
	$most = $open if $open > $most;
	$sent = $node->safe_psql('postgres', q{SELECT count(*) FROM notif_job WHERE kind = 'apns_push' AND status = 'sent'});
	last if $sent == 80;
	usleep(20_000);
}
is($sent, 80, 'the 80 jobs are sent');
my $st = push_stats($rig);
cmp_ok($st->{max_inflight}, '>', 8, "calls were in flight together (up to $st->{max_inflight}), more than 2 connections carry");
my $conns = front_connections($rig, qr{^/3/device/});
is($conns->{h2}, $conns->{calls}, "all $conns->{calls} calls over HTTP/2");
cmp_ok($most, '>', 2, "the one running sender had more connections open at once ($most) than a share of 2");
cmp_ok($most, '<=', 4, 'and no more than max_connections = 4');

# the provider leaves the lane: its connections close
cmp_ok(front_open(), '>', 0, 'the connections to the provider stay open while it is the lane\'s');
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = true WHERE code = 'apns_push'});
ok(wait_config_read($node, 'push'), 'the sender read the lane without the provider');
is(front_closed(), 0, 'the sender closed its connections to a provider no longer in its lane');
is($node->safe_psql('postgres', q{SELECT count(*) FROM notif_workers() WHERE role = 'sender' AND pid IS NOT NULL}),
	'1', 'the sender still runs (the lane has another type)');

# and back: the pool opens again
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code = 'apns_push'});
enqueue_apns(8, 'c', 'd4e5f6');
ok(wait_until($node, q{SELECT count(*) = 8 FROM notif_job WHERE kind = 'apns_push' AND order_id LIKE 'c%' AND status = 'sent'}),
	'resumed, the provider\'s jobs are sent over new connections');
cmp_ok(front_open(), '>', 0, 'which stay open');

# it leaves with calls in flight (the front answers these after 4 s, so
# that they are still in flight however slow the machine is once the sender
# has read the lane): they end and are recorded, then the connections close
push_control($rig, '/delay-ms/4000');
enqueue_apns(8, 'd', 'a7b8c9');
ok(wait_until($node, q{SELECT count(*) > 0 FROM notif_job WHERE kind = 'apns_push' AND order_id LIKE 'd%' AND status = 'sending'}),
	'calls are in flight');
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = true WHERE code = 'apns_push'});
ok(wait_config_read($node, 'push'), 'the sender read the lane without the provider');
cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM notif_job WHERE kind = 'apns_push' AND order_id LIKE 'd%' AND status = 'sending'}),
	'>', 0, 'with some of its calls still in flight');
push_control($rig, '/delay-ms/500');
ok(wait_until($node, q{SELECT count(*) = 8 FROM notif_job WHERE kind = 'apns_push' AND order_id LIKE 'd%' AND status = 'sent' AND outcome = 'accepted'}),
	'the calls in flight ended and were recorded, accepted');
is(front_closed(), 0, 'then the sender closed the connections');

# n APNs providers <provider>1..n, each with a type <type>1..n of the
# lane, paused
sub add_apns_providers
{
	my ($provider, $type, $n) = @_;
	$node->safe_psql('postgres', qq{
		INSERT INTO notif_provider (name, url, format, auth, credentials, ca_cert, timeout)
		SELECT '$provider' || i, '$rig->{base}', 'apns', 'apns_token', '$p8_sql', '$ca', '10 s'
		  FROM generate_series(1, $n) i;
		INSERT INTO notif_type (code, delivery, max_tries, provider, lane, paused)
		SELECT '$type' || i, 'at_least_once', 3, '$provider' || i, 'push', true
		  FROM generate_series(1, $n) i});
}

# 70 providers, 10 at a time in the lane
add_apns_providers('apns_', 'many_', 70);
for my $batch (0 .. 6)
{
	my ($from, $to) = (10 * $batch + 1, 10 * $batch + 10);
	$node->safe_psql('postgres', qq{
		UPDATE notif_type SET paused = NOT (substr(code, 6)::int BETWEEN $from AND $to) WHERE code LIKE 'many_%';
		SELECT notif_enqueue(1, 'many_' || i, 'm',
		                     jsonb_build_object('device_token', 'ee' || lpad(i::text, 4, '0'),
		                                        'headers', '{"apns-push-type": "alert", "apns-topic": "com.example.app"}'::jsonb,
		                                        'aps', '{"alert": "many"}'::jsonb))
		  FROM generate_series($from, $to) i});
	ok(wait_until($node, qq{SELECT count(*) = 10 FROM notif_job
	                         WHERE kind LIKE 'many_%' AND substr(kind, 6)::int BETWEEN $from AND $to AND status = 'sent'}),
		"providers $from to $to: their jobs are sent");
}
my $many = front_connections($rig, qr{^/3/device/ee});
is($many->{calls}, 70, 'the 70 providers\' calls reached the front');
is($many->{h2}, 70, 'all of them over HTTP/2, the last 6 providers\' too (their pools took the slots of providers gone)');

# all 70 at once: a sender holds the tokens of 64; the others' jobs wait,
# with a WARNING, until providers leave the lane
my $log_at = -s $node->logfile;
$node->safe_psql('postgres', q{
	UPDATE notif_type SET paused = false WHERE code LIKE 'many_%';
	SELECT notif_enqueue(2, 'many_' || i, 'all',
	                     jsonb_build_object('device_token', 'ff' || lpad(i::text, 4, '0'),
	                                        'headers', '{"apns-push-type": "alert", "apns-topic": "com.example.app"}'::jsonb,
	                                        'aps', '{"alert": "all"}'::jsonb))
	  FROM generate_series(1, 70) i});
ok($node->wait_for_log(qr/WARNING:  notif_deliver: the jobs of provider "apns_\d+" wait for a token slot\n.*DETAIL:  This sender holds the tokens of 64 push providers of its lane already/, $log_at),
	'70 push providers at once: the sender warns that some wait');
ok(wait_until($node, q{SELECT count(*) = 64 FROM notif_job WHERE order_id = 'all' AND status = 'sent'}),
	'64 providers\' jobs are sent');
is($node->safe_psql('postgres', q{SELECT count(*) FROM notif_job WHERE order_id = 'all' AND status = 'queued'}),
	'6', 'the other 6 wait, queued');
my $waiting = $node->safe_psql('postgres', q{SELECT string_agg(kind, ',' ORDER BY kind) FROM notif_job WHERE order_id = 'all' AND status = 'queued'});
$node->safe_psql('postgres', qq{
	UPDATE notif_type SET paused = true
	 WHERE code LIKE 'many_%' AND code <> ALL (string_to_array('$waiting', ','))
	   AND substr(code, 6)::int <= 20});
ok(wait_until($node, q{SELECT count(*) = 70 FROM notif_job WHERE order_id = 'all' AND status = 'sent'}),
	'once providers left the lane, the waiting ones got tokens and their jobs were sent')
  or diag("waiting were $waiting; now: " . $node->safe_psql('postgres', q{SELECT string_agg(kind || ' ' || status || ' ' || coalesce(last_error, '-'), '; ') FROM notif_job WHERE order_id = 'all' AND status <> 'sent'})
	. "; unpaused: " . $node->safe_psql('postgres', q{SELECT count(*) FROM notif_type WHERE code LIKE 'many_%' AND NOT paused}));
my $all = front_connections($rig, qr{^/3/device/ff});
is("$all->{calls} $all->{h2}", '70 70', 'each of the 70 went out once, over HTTP/2');

# 65 https webhooks at once (no token): a sender has pools for 64 https
# providers of its lane; the one left over is called through the plain
# pools, over HTTP/1.1, with a WARNING, and its job is sent all the same
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = true WHERE code LIKE 'many_%'});
ok(wait_config_read($node, 'push'), 'the sender read the lane without the 70 push providers');
$log_at = -s $node->logfile;
$node->safe_psql('postgres', qq{
	INSERT INTO notif_provider (name, url, format, ca_cert, timeout)
	SELECT 'hook_' || i, '$rig->{base}/hook/' || i, 'json', '$ca', '10 s'
	  FROM generate_series(1, 65) i;
	INSERT INTO notif_type (code, delivery, max_tries, provider, lane)
	SELECT 'hook_' || i, 'at_least_once', 3, 'hook_' || i, 'push'
	  FROM generate_series(1, 65) i;
	SELECT notif_enqueue(3, 'hook_' || i, 'h' || n, '{"n": 1}')
	  FROM generate_series(1, 65) i, generate_series(1, 2) n});
ok($node->wait_for_log(qr/WARNING:  notif_deliver: provider "hook_\d+" is called through the plain pools, over HTTP\/1\.1\n.*DETAIL:  This sender has connection pools for 64 https providers of its lane already/, $log_at),
	'65 https providers at once: the sender warns that one goes through the plain pools');
ok(wait_until($node, q{SELECT count(*) = 130 FROM notif_job WHERE kind LIKE 'hook_%' AND status = 'sent' AND outcome = 'accepted'}),
	'the 65 webhooks\' jobs, 2 each, are sent, accepted');
my $hooks = front_connections($rig, qr{^/hook/});
is("$hooks->{calls} $hooks->{h2}", '130 128', 'each went out once: 64 providers\' over HTTP/2 (a pool each), one\'s over HTTP/1.1');
my @warned = grep { /is called through the plain pools/ } split /\n/, substr(slurp_file($node->logfile), $log_at);
is(scalar @warned, 1, 'the WARNING is logged once, not for each of the provider\'s calls');
my ($left_out) = ($warned[0] // '') =~ /provider "hook_(\d+)"/;
$left_out //= 'none';
my $its = front_connections($rig, qr{^/hook/$left_out$});
is("$its->{calls} $its->{h2}", '2 0', "the HTTP/1.1 calls are the provider warned of's (hook_$left_out)");

# A Google token fetch in flight when its slot is taken.  An FCM provider
# joins the lane; its token endpoint holds the answer.  Its type is
# paused while the fetch is in flight (its slot is stale), and 64 new
# APNs providers take every slot, the FCM one first (never used).  The
# fetch's answer, let go then, must be dropped: written into the slot
# now an APNs provider's, it would replace that provider's JWT
# (InvalidProviderToken at its next call).  Resumed, the FCM provider
# fetches a token again (answered when let go) and its job is sent.
$node->safe_psql('postgres', qq{
	UPDATE notif_type SET paused = true WHERE code LIKE 'hook_%';
	INSERT INTO notif_provider (name, url, format, auth, credentials, ca_cert, timeout)
	VALUES ('fcm', '$rig->{base}/v1/projects/demo-project/messages:send', 'fcm',
	        'google_service_account', '$sa_sql', '$ca', '60 s')});
add_apns_providers('apns_new_', 'new_', 64);
my $before = push_stats($rig);
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, lane) VALUES ('fcm_push', 'at_least_once', 3, 'fcm', 'push');
	SELECT notif_enqueue(4, 'fcm_push', 'f', '{"token": "tok-f", "notification": {"title": "x"}}')});
ok(wait_push_stat($rig, 'token_requests', $before->{token_requests}),
	'the FCM provider\'s token fetch is in flight');
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = true WHERE code = 'fcm_push'});
ok(wait_config_read($node, 'push'), 'the sender read the lane without the FCM provider');
sub enqueue_new
{
	my ($order) = @_;
	$node->safe_psql('postgres', qq{
		SELECT notif_enqueue(5, 'new_' || i, '$order',
		                     jsonb_build_object('device_token', 'ab' || lpad(i::text, 4, '0'),
		                                        'headers', '{"apns-push-type": "alert", "apns-topic": "com.example.app"}'::jsonb,
		                                        'aps', '{"alert": "new"}'::jsonb))
		  FROM generate_series(1, 64) i});
}
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code LIKE 'new_%'});
enqueue_new('n1');
ok(wait_until($node, q{SELECT count(*) = 64 FROM notif_job WHERE order_id = 'n1' AND status = 'sent'}),
	'64 new APNs providers took every token slot, and their jobs are sent');
is(push_stats($rig)->{token_answers}, $before->{token_answers},
	'the FCM provider\'s slot was taken while its fetch was in flight (not answered yet)');
push_control($rig, '/release-tokens');
ok(wait_push_stat($rig, 'token_answers', $before->{token_answers}),
	'the token endpoint answered the fetch');
# the fetch was the last call of the FCM provider's pool (retired): once
# the sender has its answer, that connection closes (nghttpx logs the
# call once it has passed the answer on)
my $fetch_port;
ok(wait_for_true(sub {
		($fetch_port) = map { (split / /)[0] } grep { / POST \/token / } reverse split /\n/, slurp_file($rig->{accesslog});
		return defined $fetch_port; }),
	'the front logged the fetch');
ok(wait_for_none("( sport = :$fetch_port and dport = :$rig->{front} )"),
	'the sender had the answer: the fetch\'s connection closed');
enqueue_new('n2');
ok(wait_until($node, q{SELECT count(*) = 64 FROM notif_job WHERE order_id = 'n2' AND status = 'sent' AND tries = 1}),
	'the 64 APNs providers\' next jobs are sent at their first try');
my $after = push_stats($rig);
is($after->{apns_jwt_bad} - $before->{apns_jwt_bad}, 0,
	'no APNs call carried anything but its own provider token: the dropped answer went nowhere');
$node->safe_psql('postgres', q{
	UPDATE notif_type SET paused = true WHERE code LIKE 'new_%';
	UPDATE notif_type SET paused = false WHERE code = 'fcm_push'});
ok(wait_push_stat($rig, 'token_requests', $before->{token_requests} + 1), 'resumed, the FCM provider fetches a token again');
push_control($rig, '/release-tokens');
ok(wait_until($node, q{SELECT status || ' ' || outcome FROM notif_job WHERE kind = 'fcm_push'}, 'sent accepted'),
	'resumed, the FCM provider\'s job is sent, accepted');
$after = push_stats($rig);
is($after->{token_requests} - $before->{token_requests}, 2, 'with a token fetched again: two fetches in all');
is($after->{fcm_unauthenticated} - $before->{fcm_unauthenticated}, 0, 'and no FCM call without a valid token');
is($node->safe_psql('postgres', q{SELECT count(*) FROM notif_workers() WHERE role = 'sender' AND pid IS NOT NULL}),
	'1', 'the sender ran through it all');

done_testing();
