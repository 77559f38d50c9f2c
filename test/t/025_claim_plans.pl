# 025_claim_plans.pl: the plans of a sender's statements (its claim, its
# record of results, its look for the next due job, its look for jobs
# orphaned by a stopped sender), as auto_explain logs
# them, read every table by key whatever the statistics said when they
# were made.  Planned once per sender (src/store/job_sql.c), generic, they keep
# their plan until an ANALYZE: a plan made from statistics that no longer
# hold must still not read a whole table at each round.  Five sets of
# statistics, each of which once made a plan that did:
#  - notif_job's from before a bulk enqueue (every job finished, none
#    queued), notif_active's with the backlog in it (autovacuum analyzes
#    it first: it is small): the claim read and sorted every job;
#  - notif_active vacuumed and analyzed empty, as after a drain, and the
#    claim planned then (an idle sender claims at each poll_interval, and
#    an ANALYZE makes it plan again; so does a sender started with the
#    queue empty, or after a crash empties notif_active), before a burst:
#    the claim read all of notif_active, each row matched against every
#    claimed job;
#  - both tables so analyzed (all jobs deleted, or a new install), the
#    claim planned then, and the record with one job, before a burst;
#  - both analyzed with one job in them (a new install's first job) and
#    the plans made then by a sender that starts: the record read all of
#    notif_job at each round, each job matched against every result;
#  - none at all (a new install before autovacuum came), a backlog
#    enqueued while its type was paused, then resumed: the look for
#    orphaned jobs walked notif_job by kind, every job (1.6 s at the
#    start of test/bench/flood.sh's 1,000,000 promotions, in every
#    sender, the OTPs' included).
# Autovacuum is off, so that only the statistics set here are seen.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# auto_explain logs the sender's statements, not this script's own
$ENV{PGOPTIONS} = '-c auto_explain.log_min_duration=-1';
my $node = new_node('claim_plans',
	shared_preload_libraries => q('notif_deliver,auto_explain'),
	autovacuum => 'off',
	'auto_explain.log_min_duration' => 0,
	'auto_explain.log_nested_statements' => 'on');
my $sim = start_sim();
set_provider($node, 'default', $sim->{url}, idempotency_header => q('Idempotency-Key'), max_inflight => 500);

# each plan auto_explain logged since $offset for a statement whose text matches
sub plans_of
{
	my ($offset, $re) = @_;
	my $log = slurp_file($node->logfile, $offset);
	my @plans;
	for my $entry (split /\n(?=\S.*LOG:  duration: )/, $log)
	{
		push @plans, $entry if $entry =~ /Query Text:.*$re/s;
	}
	return @plans;
}

# A plan that reads a whole table of jobs: a sort, a sequential scan of
# notif_job or notif_active, or an index of theirs walked without an index
# condition (a probe, or a range of the due index, has one on the next line).
sub reads_a_whole_table
{
	my ($plan) = @_;
	return 1 if $plan =~ /\bSort\b/;
	return 1 if $plan =~ /Seq Scan on notif_(?:job|active)\b/;
	return 1 if $plan =~ /Index (?:Only )?Scan(?: Backward)? using \S+ on notif_(?:job|active)\b[^\n]*\n(?!\s+Index Cond)/;
	return 0;
}

# The sender's plans since $offset, checked; $what names the statistics.
sub check_plans
{
	my ($offset, $what) = @_;
	my @claims = plans_of($offset, qr/LIMIT \$2\s+FOR UPDATE OF a SKIP LOCKED/);
	cmp_ok(scalar(@claims), '>', 0, "$what: auto_explain logged the sender's claims (" . scalar(@claims) . ')');
	is(scalar(grep { !/Index Scan using notif_active_due_idx/ } @claims), 0, "$what: every claim reads the due index");
	is(scalar(grep { reads_a_whole_table($_) } @claims), 0,
		"$what: no claim sorts, or reads notif_job or notif_active other than by key");
	my @records = plans_of($offset, qr/WITH r AS \(SELECT \* FROM unnest\(/);
	cmp_ok(scalar(@records), '>', 0, "$what: auto_explain logged the sender's records of results (" . scalar(@records) . ')');
	is(scalar(grep { reads_a_whole_table($_) } @records), 0,
		"$what: no record of results reads notif_job or notif_active other than by key");
	my @next = plans_of($offset, qr/SELECT \(SELECT a\.next_at FROM/);
	cmp_ok(scalar(@next), '>', 0, "$what: the look for the next due job ran (" . scalar(@next) . ' times)');
	is(scalar(grep { !/Index Scan using notif_active_due_idx/ || reads_a_whole_table($_) } @next), 0,
		"$what: each look for the next due job (" . scalar(@next) . ') reads the due index in order');
}

# The look for jobs held by senders no longer running (at a sender's start,
# and at each reload of its configuration: a type paused or resumed) must
# find them by notif_active's index of held jobs, and read notif_job only
# by key: it once walked notif_job by kind, every job of every type (1.6 s
# with a backlog of 1,000,000 promotions, at the flood's start, during
# which no OTP was claimed).
sub check_orphans
{
	my ($offset, $what) = @_;
	my @looks = plans_of($offset, qr/a\.claimed_by <> ALL/);
	cmp_ok(scalar(@looks), '>', 0, "$what: the look for orphaned jobs ran (" . scalar(@looks) . ' times)');
	is(scalar(grep { !/Index (?:Only )?Scan using notif_active_held_idx/ } @looks), 0,
		"$what: each look for orphaned jobs reads the index of held jobs");
	# (the index of held jobs is read whole: it holds only those)
	my @rest = map { (my $p = $_) =~ s/Index (?:Only )?Scan using notif_active_held_idx[^\n]*\n//g; $p } @looks;
	is(scalar(grep { /notif_job_kind_next_idx/ || reads_a_whole_table($_) } @rest), 0,
		"$what: no look for orphaned jobs reads notif_job or notif_active other than by key");
	return @looks;
}

# Enqueue $n jobs of order $order, wait until all are sent.
sub burst
{
	my ($n, $order) = @_;
	$node->safe_psql('postgres',
		qq{SELECT count(notif_enqueue(g, 'bulk', '$order', '{"to": "+84900000001"}')) FROM generate_series(1, $n) g});
	ok(wait_until($node, qq{SELECT count(*) = $n FROM notif_job WHERE order_id = '$order' AND status = 'sent'}),
		"the $n jobs of burst $order are sent");
}

# 1. notif_job analyzed before a bulk enqueue, notif_active with it in.
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, lane, paused) VALUES ('bulk', 'at_least_once', 3, 'bulk', true);
	INSERT INTO notif_job (user_id, kind, order_id, payload, status, tries, created_at, next_at, sent_at, outcome, http_status)
	SELECT g, 'bulk', 'old', '{"to": "+84900000000"}', 'sent', 1, now() - interval '1 day', now() - interval '1 day',
	       now() - interval '1 day', 'accepted', 200
	  FROM generate_series(1, 100000) g;
	ANALYZE notif_job;
	SELECT count(notif_enqueue(g, 'bulk', 'new', '{"to": "+84900000001"}')) FROM generate_series(1, 50000) g;
	ANALYZE notif_active;});
is($node->safe_psql('postgres', q{SELECT reltuples FROM pg_class WHERE relname = 'notif_active'}), '50000',
	'notif_active is analyzed with 50,000 queued jobs in it');
my $offset = -s $node->logfile;
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code = 'bulk'});
ok(wait_until($node, q{SELECT count(*) = 0 FROM notif_active}), 'the backlog is sent');
check_plans($offset, 'a backlog analyzed');
check_orphans($offset, 'a backlog analyzed');

# The sender's next claim, planned again after an ANALYZE, once the queue is empty.
sub idle_claim
{
	my ($what) = @_;
	ok($node->wait_for_log(qr/LOG:  duration: [^\n]*\n\s+Query Text: WITH work AS MATERIALIZED/, -s $node->logfile),
		"$what: the idle sender claims (nothing) and plans its claim again");
}

# 2. notif_active analyzed empty, the plans made then.
$node->safe_psql('postgres', q{VACUUM ANALYZE notif_active});
is($node->safe_psql('postgres', q{SELECT reltuples = 0 AND relpages = 0 FROM pg_class WHERE relname = 'notif_active'}), 't',
	'notif_active is vacuumed and analyzed empty');
idle_claim('notif_active empty');
$offset = -s $node->logfile;
burst(10000, 'burst2');
check_plans($offset, 'notif_active empty');

# 3. Both analyzed empty, the plans made then.
$node->safe_psql('postgres', q{DELETE FROM notif_attempt; DELETE FROM notif_job});
$node->safe_psql('postgres', q{VACUUM ANALYZE notif_job, notif_active, notif_attempt});
is($node->safe_psql('postgres', q{SELECT reltuples = 0 AND relpages = 0 FROM pg_class WHERE relname = 'notif_job'}), 't',
	'notif_job is vacuumed and analyzed empty');
idle_claim('both empty');
burst(1, 'one');	# the record of results is planned with one job
$offset = -s $node->logfile;
burst(10000, 'burst3');
check_plans($offset, 'both empty');

# 4. Both analyzed with one job in them, a sender started then.
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = true WHERE code = 'bulk'});
ok(wait_until($node, q{SELECT count(*) = 0 FROM notif_workers() WHERE role = 'sender' AND lane = 'bulk' AND pid IS NOT NULL}), 'the lane\'s sender stops');
$node->safe_psql('postgres', q{DELETE FROM notif_attempt; DELETE FROM notif_job});
$node->safe_psql('postgres', q{VACUUM notif_job, notif_active, notif_attempt});
$node->safe_psql('postgres',
	q{SELECT notif_enqueue(1, 'bulk', 'first', '{"to": "+84900000001"}')});
$node->safe_psql('postgres', q{ANALYZE notif_job, notif_active, notif_attempt});
is($node->safe_psql('postgres', q{SELECT string_agg(relname || ' ' || reltuples, ', ' ORDER BY relname) FROM pg_class WHERE relname IN ('notif_job', 'notif_active')}),
	'notif_active 1, notif_job 1', 'notif_job and notif_active are analyzed with one job');
$offset = -s $node->logfile;
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code = 'bulk'});
ok(wait_until($node, q{SELECT status = 'sent' FROM notif_job WHERE order_id = 'first'}), 'a new sender sends it');
burst(10000, 'burst4');
check_plans($offset, 'one job');
check_orphans($offset, 'one job');

# 5. Never analyzed (a new install: autovacuum has not come yet), a bulk
# enqueue of a paused type, then it is resumed: the lane's new sender, and
# the running sender of another lane (reloading its configuration), look
# for orphaned jobs with a backlog in both tables.
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = true WHERE code = 'bulk'});
ok(wait_until($node, q{SELECT count(*) = 0 FROM notif_workers() WHERE role = 'sender' AND lane = 'bulk' AND pid IS NOT NULL}), 'the lane\'s sender stops');
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, lane) VALUES ('otp', 'at_least_once', 3, 'otp')});
ok(wait_until($node, q{SELECT count(*) = 1 FROM notif_workers() WHERE role = 'sender' AND lane = 'otp' AND pid IS NOT NULL}),
	'the otp lane\'s sender runs');
$node->safe_psql('postgres', q{
	DELETE FROM notif_attempt; DELETE FROM notif_job;
	VACUUM notif_job, notif_active, notif_attempt;
	DELETE FROM pg_statistic WHERE starelid IN ('notif_job'::regclass, 'notif_active'::regclass);
	UPDATE pg_class SET reltuples = -1
	 WHERE oid IN ('notif_job'::regclass, 'notif_active'::regclass)
	    OR oid IN (SELECT indexrelid FROM pg_index WHERE indrelid IN ('notif_job'::regclass, 'notif_active'::regclass));
	SELECT count(notif_enqueue(g, 'bulk', 'never', '{"to": "+84900000001"}')) FROM generate_series(1, 50000) g;});
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_statistic WHERE starelid IN ('notif_job'::regclass, 'notif_active'::regclass)}),
	'0', 'notif_job and notif_active have no statistics');
$offset = -s $node->logfile;
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code = 'bulk'});
ok(wait_until($node, q{SELECT count(*) = 0 FROM notif_active}), 'the backlog is sent');
my %pids = map { /\[(\d+)\]/ ? ($1 => 1) : () } check_orphans($offset, 'never analyzed');
is(scalar(keys %pids), 2, 'never analyzed: both senders looked (the bulk lane\'s at its start, the otp lane\'s at its reload)');

done_testing();
