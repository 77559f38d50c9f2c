# 026_push_connections.pl: a provider's max_connections is shared among the
# lane's senders that run, not those the setting asks for.  Here
# senders_per_lane = 2 but max_lanes = 1 leaves the lane one sender: it
# takes max_connections = 4 whole.  The HTTP/2 front lets a connection
# carry 4 calls at once, so 80 calls in flight need more connections than
# the cap, and the cap is what the sender keeps open at once (shared by
# the setting, it would be 2).
use strict;
use warnings;
use lib 'test';
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
my $rig = start_push_rig($keys, 'delay-ms' => 500, front_streams => 4);
my $p8 = JSON::PP->new->canonical->encode({
	key_id => 'KEYID12345', team_id => 'TEAMID1234', private_key => $keys->{ec_key} });
(my $p8_sql = $p8) =~ s/'/''/g;
(my $ca = $keys->{cert_pem}) =~ s/'/''/g;
$node->safe_psql('postgres', "
	INSERT INTO notif_provider (name, url, format, auth, credentials, ca_cert, max_connections, timeout)
	VALUES ('apns', '$rig->{base}', 'apns', 'apns_token', '$p8_sql', '$ca', 4, '10 s');
	INSERT INTO notif_type (code, delivery, max_tries, provider, lane) VALUES ('apns_push', 'at_least_once', 3, 'apns', 'push')");

ok($node->wait_for_log(qr/lane "push" lacks a sender: more than 1 senders/),
	'max_lanes = 1: the lane has one of its two senders, and the launcher says so');
is($node->safe_psql('postgres', q{SELECT count(*) FROM notif_workers() WHERE role = 'sender' AND pid IS NOT NULL}),
	'1', 'one sender runs');

$node->safe_psql('postgres', q{
	SELECT notif_enqueue(g, 'apns_push', 'b' || g,
	                     jsonb_build_object('device_token', 'a1b2c3' || g,
	                                        'headers', '{"apns-push-type": "alert", "apns-topic": "com.example.app"}'::jsonb,
	                                        'aps', '{"alert": "hi"}'::jsonb))
	  FROM generate_series(1, 80) g});

# the sender's connections to the front open at once, as the kernel lists
# them, sampled until the jobs are sent
my ($most, $sent) = (0, 0);
my $deadline = time + 120;
while (time < $deadline)
{
	my @open = grep { /\S/ } split /\n/, `ss -Htn state established '( dport = :$rig->{front} )'`;
	$most = scalar(@open) if @open > $most;
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

done_testing();
