# 024_lane_senders.pl: a lane served by several senders
# (notif_deliver.senders_per_lane, or the lane's row in notif_lane).  Each is a process with its own slot
# and incarnation; they claim the lane's due jobs side by side, each job
# once; the lane's max_inflight is shared out between them; a sender that
# starts beside a busy one leaves that one's calls alone (its recovery takes
# only the jobs of senders that are gone); a stopped one is replaced, and
# lowering the setting retires the extra ones: they claim no more, end
# their calls, record them, and leave.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# purge_interval: the launcher's own rounds are an hour apart, so a change
# to notif_lane is seen by its commit's wake-up or not at all
my $node = new_node('lane_senders', 'notif_deliver.max_inflight' => 40,
	'notif_deliver.purge_interval' => q('1h'));
my $sim = start_sim();
set_provider($node, 'default', $sim->{url}, idempotency_header => q('Idempotency-Key'),
	max_inflight => 1000, timeout => q('20 seconds'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, lane) VALUES ('bulk', 'at_least_once', 3, 'bulk')});

# the pids of the lane's senders, as notif_workers() shows them
sub sender_pids
{
	return split /,/, $node->safe_psql('postgres', q{
		SELECT coalesce(string_agg(pid::text, ',' ORDER BY pid), '') FROM notif_workers()
		 WHERE role = 'sender' AND lane = 'bulk' AND pid IS NOT NULL});
}

sub senders_running
{
	my ($n) = @_;
	return wait_until($node, qq{
		SELECT count(*) = $n AND count(DISTINCT pid) = $n
		  FROM notif_workers() WHERE role = 'sender' AND lane = 'bulk' AND pid IS NOT NULL}, 't',
		"$n senders of lane bulk");
}

sub set_senders
{
	my ($n) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET notif_deliver.senders_per_lane = $n");
	$node->reload;
}

sub enqueue_bulk
{
	my ($prefix, $n) = @_;
	$node->safe_psql('postgres', qq{
		SELECT notif_enqueue(g, 'bulk', '$prefix-' || g, '{"to": "+84900000001"}') FROM generate_series(1, $n) g});
}

# the most calls of a burst in flight at once, by the jobs' call times
sub most_in_flight
{
	my ($prefix) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT max((SELECT count(*) FROM notif_job o
		             WHERE o.order_id LIKE '$prefix-%'
		               AND o.last_started_at <= j.last_started_at AND o.last_ended_at > j.last_started_at))
		  FROM notif_job j WHERE j.order_id LIKE '$prefix-%'});
}

# the keys of a burst in the ledger, and how many of them were received more than once
sub received
{
	my ($prefix) = @_;
	my $l = ledger($sim);
	my @keys = grep { (split /:/, $_)[2] =~ /^\Q$prefix\E-/ } keys %$l;
	return (scalar(@keys), scalar(grep { $l->{$_}{received} > 1 } @keys));
}

# --- one sender by default ---
ok(senders_running(1), 'one sender per lane by default');

# --- two senders: both claim, each job once, max_inflight shared out ---
set_senders(2);
ok(senders_running(2), 'senders_per_lane = 2 starts a second sender for the lane, with its own pid');
sim_get($sim, '/config?latency_ms=300');
enqueue_bulk('a', 300);
ok(wait_until($node, q{SELECT count(*) = 300 FROM notif_job WHERE order_id LIKE 'a-%' AND status = 'sent'}),
	'a burst of 300 is sent');
my $most = most_in_flight('a');
my ($keys, $twice) = received('a');
is($keys, 300, 'the provider received each of the 300 jobs');
is($twice, 0, 'no job was claimed and sent by both senders');
cmp_ok($most, '>', 20, "both senders had calls in flight at once ($most at most; each may have 20)");
cmp_ok($most, '<=', 40, "the lane's max_inflight of 40 held across its senders ($most at most)");
is($node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE sent_last_minute > 0) || ' ' || sum(sent_last_minute)
	  FROM notif_workers() WHERE role = 'sender' AND lane = 'bulk'}),
	'2 300', 'each sender sent some of them; together, each job once');

# --- a third sender starts while the others have calls in flight: its
# recovery leaves their jobs alone ---
sim_get($sim, '/config?latency_ms=2000');
enqueue_bulk('b', 30);
ok(wait_until($node, q{SELECT count(*) = 30 FROM notif_job WHERE order_id LIKE 'b-%' AND status = 'sending'}),
	'30 calls in flight (the provider answers in 2 s)');
set_senders(3);
ok(senders_running(3), 'a third sender starts beside them');
ok(wait_config_read($node, 'bulk'), 'the three have read the configuration (and so looked for jobs to recover)');
is($node->safe_psql('postgres', q{SELECT count(*) FROM notif_job WHERE order_id LIKE 'b-%' AND status = 'sending'}),
	'30', 'meanwhile the 30 calls were still in flight');
ok(wait_until($node, q{SELECT count(*) = 30 FROM notif_job WHERE order_id LIKE 'b-%' AND status = 'sent'}),
	'the 30 are sent');
is($node->safe_psql('postgres', q{SELECT max(tries) FROM notif_job WHERE order_id LIKE 'b-%'}), '1',
	'each in one try: the new sender recovered none of the live senders\' jobs');
($keys, $twice) = received('b');
is("$keys $twice", '30 0', 'the provider received each once');

# --- three senders: 40 shared out as 13 each, rounded down ---
sim_get($sim, '/config?latency_ms=300');
enqueue_bulk('r', 200);
ok(wait_until($node, q{SELECT count(*) = 200 FROM notif_job WHERE order_id LIKE 'r-%' AND status = 'sent'}),
	'a burst of 200 is sent by three senders');
$most = most_in_flight('r');
cmp_ok($most, '>', 26, "all three had calls in flight at once ($most at most; each may have 13)");
cmp_ok($most, '<=', 39, "the three together stayed within the lane's 40 ($most at most)");

# --- a sender stopped mid-call is replaced; the other senders go on ---
sim_get($sim, '/config?latency_ms=2000');
my @before = sender_pids();
enqueue_bulk('c', 30);
ok(wait_until($node, q{SELECT count(*) = 30 FROM notif_job WHERE order_id LIKE 'c-%' AND status = 'sending'}),
	'30 calls in flight');
ok(wait_until($node, q{SELECT sum(in_flight) = 30 FROM notif_workers() WHERE role = 'sender' AND lane = 'bulk'}),
	'the senders count them in flight');
my ($victim, $dropped) = split /\|/, $node->safe_psql('postgres', q{
	SELECT pid, in_flight FROM notif_workers() WHERE role = 'sender' AND lane = 'bulk' AND in_flight > 0
	 ORDER BY in_flight DESC, pid LIMIT 1});
BAIL_OUT('no sender has calls in flight') unless $victim && $victim =~ /^\d+$/;
kill 'TERM', $victim;
ok(wait_until($node, qq{SELECT count(*) = 3 AND bool_and(pid <> $victim)
                         FROM notif_workers() WHERE role = 'sender' AND lane = 'bulk' AND pid IS NOT NULL}),
	"the stopped sender (which had $dropped calls in flight) is replaced");
my @after = sender_pids();
is(scalar(grep { my $p = $_; grep { $_ == $p } @after } grep { $_ != $victim } @before), 2,
	'the other two senders kept running');
ok(wait_until($node, q{SELECT count(*) = 30 FROM notif_job WHERE order_id LIKE 'c-%' AND status = 'sent'}),
	'all 30 are sent');
is($node->safe_psql('postgres', q{SELECT count(*) FROM notif_job WHERE order_id LIKE 'c-%' AND tries = 2}),
	$dropped, "the stopped sender's $dropped calls, ended as unknown, were tried again, and only those");
($keys, $twice) = received('c');
is($keys, 30, 'the provider received each of them');

# --- back to one sender: the extra ones retire, their calls not cut ---
enqueue_bulk('e', 30);
ok(wait_until($node, q{SELECT count(*) = 30 FROM notif_job WHERE order_id LIKE 'e-%' AND status = 'sending'}),
	'30 calls in flight');
my $spread = $node->safe_psql('postgres', q{
	SELECT count(*) FROM notif_workers() WHERE role = 'sender' AND lane = 'bulk' AND in_flight > 0});
set_senders(1);
ok(wait_until($node, q{SELECT count(*) = 1 AND bool_and(pid IS NOT NULL)
                        FROM notif_workers() WHERE role = 'sender' AND lane = 'bulk'}),
	'senders_per_lane = 1: the extra senders stop and free their slots');
is($node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE status = 'sent' AND tries = 1) FROM notif_job WHERE order_id LIKE 'e-%'}),
	'30', "the calls in flight ($spread senders had some) all ended, each in its first try: none was cut");
($keys, $twice) = received('e');
is("$keys $twice", '30 0', 'the provider received each once');
my @retired = (slurp_file($node->logfile) =~ /sender of lane "bulk" retired, its calls ended and recorded/g);
is(scalar(@retired), 2, 'the two extra senders retired (said once each)');
like(slurp_file($node->logfile), qr/a sender of lane "bulk" stopped/, 'the launcher freed their slots');
sim_get($sim, '/config?latency_ms=0');
enqueue_bulk('d', 50);
ok(wait_until($node, q{SELECT count(*) = 50 FROM notif_job WHERE order_id LIKE 'd-%' AND status = 'sent'}),
	'the remaining sender sends on');
is($node->safe_psql('postgres', q{SELECT count(*) FROM notif_active}), '0', 'nothing is left held or queued');

# --- a lane's own count (notif_lane), over the setting (1 now) ---
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, lane) VALUES ('otp', 'at_least_once', 3, 'otp')});
ok(wait_until($node, q{SELECT count(*) = 1 FROM notif_workers() WHERE role = 'sender' AND lane = 'otp' AND pid IS NOT NULL}),
	'lane otp has its sender');
$node->safe_psql('postgres', doc_sql('doc/guide.md', 'lane-senders'));
ok(senders_running(2), 'notif_lane, as guide.md shows it: lane bulk has the 2 senders its row says, while the setting is 1');
$node->safe_psql('postgres', q{UPDATE notif_lane SET senders = 3 WHERE lane = 'bulk'});
ok(senders_running(3), 'raised to 3 by an UPDATE');
enqueue_bulk('l', 200);
ok(wait_until($node, q{SELECT count(*) = 200 FROM notif_job WHERE order_id LIKE 'l-%' AND status = 'sent'}),
	'they send a burst');
($keys, $twice) = received('l');
is("$keys $twice", '200 0', 'the provider received each job of it once');
is($node->safe_psql('postgres', q{SELECT count(*) FROM notif_workers() WHERE role = 'sender' AND lane = 'otp'}),
	'1', 'lane otp, without a row, keeps the setting\'s one sender');
my $offset = -s $node->logfile;
$node->safe_psql('postgres', q{DELETE FROM notif_lane WHERE lane = 'bulk'});
ok(senders_running(1), 'the row deleted: lane bulk is back to the setting\'s one sender');
@retired = (slurp_file($node->logfile, $offset) =~ /sender of lane "bulk" retired, its calls ended and recorded/g);
is(scalar(@retired), 2, 'its two extra senders retired');

# --- the slots run out: every lane has a sender before any has a second ---
$node->append_conf('postgresql.conf', "notif_deliver.max_lanes = 4\n");
$node->restart;
$node->safe_psql('postgres', q{INSERT INTO notif_lane VALUES ('bulk', 3)});
ok(senders_running(3), 'max_lanes = 4: lane bulk has its 3 senders and lane otp its one');
$offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, lane) VALUES ('third', 'at_least_once', 3, 'third')});
ok(wait_until($node, q{SELECT count(*) = 1 FROM notif_workers() WHERE role = 'sender' AND lane = 'third' AND pid IS NOT NULL}),
	'a new lane gets a sender: lane bulk gives one up');
ok(senders_running(2), 'lane bulk keeps 2');
my $log = slurp_file($node->logfile, $offset);
like($log, qr/sender of lane "bulk" retired, its calls ended and recorded/, 'the sender it gave up retired');
like($log, qr/lane "bulk" lacks a sender: more than 4 senders/, 'and the launcher warned that lane bulk lacks one');
my $third = $node->safe_psql('postgres', q{SELECT notif_enqueue(1, 'third', 'x', '{"to": "+84900000001"}')});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $third"), 'lane third sends');
$node->safe_psql('postgres', q{UPDATE notif_type SET max_tries = 4 WHERE code = 'otp'});
ok(wait_until($node, q{SELECT notif_config_applied()}), 'the launcher and the senders read a later change');
my @short = (slurp_file($node->logfile, $offset) =~ /lane "bulk" lacks a sender/g);
is(scalar(@short), 1, 'the launcher warned of the short lane once, not again at its next round');

done_testing();
