# 025_claim_plans.pl: the plans of a sender's claim and of its look for
# the next due job, as auto_explain logs them, stay the due index in order
# whatever the statistics say.  Planned once per sender (src/job_sql.c),
# generic, they must not be driven from notif_job's primary key (every
# job read and sorted at each claim).  Here the statistics are those that
# once made it so: notif_job's from before a bulk enqueue (every job
# finished, none queued), notif_active's with the backlog in it (autovacuum
# analyzes it first: it is small), when the sender starts and plans.
use strict;
use warnings;
use lib 'test';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('claim_plans',
	shared_preload_libraries => q('notif_deliver,auto_explain'),
	'auto_explain.log_min_duration' => 0,
	'auto_explain.log_nested_statements' => 'on');
my $sim = start_sim();
set_provider($node, 'default', $sim->{url}, idempotency_header => q('Idempotency-Key'), max_inflight => 500);
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

# each plan auto_explain logged for a statement whose text matches
sub plans_of
{
	my ($re) = @_;
	my $log = substr(slurp_file($node->logfile), $offset);
	my @plans;
	for my $entry (split /\n(?=\S.*LOG:  duration: )/, $log)
	{
		push @plans, $entry if $entry =~ /Query Text:.*$re/s;
	}
	return @plans;
}

# a plan that reads all of notif_job: a sort, or its primary key walked
# without an index condition (a probe has one, on the next line)
sub reads_all_jobs
{
	my ($plan) = @_;
	return 1 if $plan =~ /\bSort\b/;
	return 1 if $plan =~ /Index Scan using notif_job_pkey[^\n]*\n(?!\s+Index Cond)/;
	return 0;
}

my @claims = plans_of(qr/LIMIT \$2\s+FOR UPDATE OF a SKIP LOCKED/);
cmp_ok(scalar(@claims), '>', 0, 'auto_explain logged the sender\'s claims (' . scalar(@claims) . ')');
is(scalar(grep { !/Index Scan using notif_active_due_idx/ } @claims), 0, 'every claim reads the due index');
is(scalar(grep { reads_all_jobs($_) } @claims), 0, 'no claim sorts, or reads notif_job other than by probes');
my @next = plans_of(qr/SELECT (?:min\(a\.next_at\)|\(SELECT a\.next_at) FROM/);
cmp_ok(scalar(@next), '>', 0, 'the look for the next due job ran (' . scalar(@next) . ' times)');
is(scalar(grep { !/Index Scan using notif_active_due_idx/ || reads_all_jobs($_) } @next), 0,
	'it reads the due index in order, up to the first queued job');

done_testing();
