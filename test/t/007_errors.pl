# 007_errors.pl: errors in a sender are logged once, with context, and never
# crash or crash-loop it.  A configuration reload that fails (notif_type
# locked past lock_timeout), a cancel request, and the extension dropped
# under running senders.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('errors');
my $sim = start_sim();
set_provider($node, 'default', $sim->{url},
	headers => q('{"Authorization": "Bearer s3cr3t"}'),
	idempotency_header => q('Idempotency-Key'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type VALUES ('otp', 'at_least_once', 3, '1 minute');
	ALTER DATABASE postgres SET lock_timeout = '200ms';});
# the senders pick the database setting up when they start
$node->restart;
ok(wait_until($node, q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender'}),
	'the sender runs');
my $pid = $node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender'});
my $first = $node->safe_psql('postgres', q{SELECT notif_enqueue(1, 'otp', 'before', '{"text":"1"}')});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $first"), 'a job goes out');

# --- the sender cannot read its configuration for a while ---
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN');
$locker->query_safe('LOCK TABLE notif_type IN ACCESS EXCLUSIVE MODE');
# a configuration change makes the sender re-read notif_type: it times out
$node->safe_psql('postgres', q{UPDATE notif_provider SET headers = '{"Authorization": "Bearer n3w"}' WHERE name = 'default'});
sleep(4);
my $log = slurp_file($node->logfile);
my @errors = ($log =~ /notif_deliver sender of lane "default": canceling statement due to lock timeout/g);
is(scalar(@errors), 1, 'the failing reload is logged once, though it is retried');
like($log, qr/retrying with backoff/, 'with its context');
unlike($log, qr/terminated by signal|double free|server process .* was terminated/,
	'nothing crashed');
is($node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender'}),
	$pid, 'the same sender process is still running');
$locker->query_safe('COMMIT');
$locker->quit;

my $after = $node->safe_psql('postgres', q{SELECT notif_enqueue(1, 'otp', 'after', '{"text":"2"}')});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $after"),
	'once the lock is gone, jobs go out again');
ok((grep { $_ eq 'Authorization: Bearer n3w' } @{ last_request($sim, 'otp:1:after')->{headers} }),
	'with the new configuration');

# --- a cancel request to an idle sender is ignored ---
$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
sleep(1);
is($node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender'}),
	$pid, 'a cancelled idle sender keeps running');
my $third = $node->safe_psql('postgres', q{SELECT notif_enqueue(1, 'otp', 'cancel', '{"text":"3"}')});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $third"), 'and sending');

# --- DROP EXTENSION under a running sender: it stops, without error noise ---
$node->safe_psql('postgres', q{DROP EXTENSION notif_deliver CASCADE});
ok(wait_until($node, q{SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender'}),
	'the sender stopped');
unlike(slurp_file($node->logfile), qr/terminated by signal/, 'nothing crashed');

done_testing();
