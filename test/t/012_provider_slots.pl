# 012_provider_slots.pl: more providers in use than shared provider slots
# (notif_deliver.max_providers = 2).  Every provider's max_inflight still
# holds: across lanes where it has a shared slot, in its lane where it has
# none (a warning says so once, notif_provider_slots() shows it); a slot
# that no sender uses any more is reused by the next provider.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('provider_slots', 'notif_deliver.max_providers' => '2');
my $sim = start_sim();

# the most calls of these types that were in flight at once
sub max_overlap
{
	my ($kinds) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT max(c) FROM (
		  SELECT (SELECT count(*) FROM notif_calls b JOIN notif_job jb ON jb.id = b.job_id
		           WHERE jb.kind IN ($kinds)
		             AND b.started_at <= a.started_at AND b.ended_at > a.started_at) AS c
		    FROM notif_calls a JOIN notif_job ja ON ja.id = a.job_id
		   WHERE ja.kind IN ($kinds)) x});
}

sub slots
{
	return $node->safe_psql('postgres', q{
		SELECT string_agg(provider || ':' || coalesce(lane, '*') || ':' || shared || ':' || senders, ','
		                  ORDER BY provider, lane)
		  FROM notif_provider_slots()});
}

for my $p ('shared_narrow', 'x1', 'x2', 'x3', 'late')
{
	set_provider($node, $p, $sim->{url}, headers => q('{"X-Sim-Latency-Ms": "300"}'),
		idempotency_header => q('Idempotency-Key'), max_inflight => 2);
}

# one provider used by two lanes takes the first shared slot
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, lane) VALUES
	    ('na', 'at_least_once', 1, 'shared_narrow', 'la'),
	    ('nb', 'at_least_once', 1, 'shared_narrow', 'lb')});
ok(wait_until($node, q{SELECT slots = 'shared_narrow:*:true:2' FROM (SELECT 1) x,
	LATERAL (SELECT string_agg(provider || ':' || coalesce(lane, '*') || ':' || shared || ':' || senders, ',') AS slots
	           FROM notif_provider_slots()) s}),
	'both lanes share the slot of their provider');

# three more providers in one lane: one gets the last shared slot, two do not
my $log_offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, lane) VALUES
	    ('t1', 'at_least_once', 1, 'x1', 'lc'),
	    ('t2', 'at_least_once', 1, 'x2', 'lc'),
	    ('t3', 'at_least_once', 1, 'x3', 'lc')});
ok(wait_config_read($node, 'lc'), 'the new lane read its types');
is($node->safe_psql('postgres', q{SELECT count(*) FILTER (WHERE shared) || ' shared, ' || count(*) FILTER (WHERE NOT shared AND lane = 'lc') || ' in lane lc' FROM notif_provider_slots()}),
	'2 shared, 2 in lane lc', 'the table is full: two providers are limited in their lane');
ok($node->wait_for_log(qr/provider "x\d" has no shared slot: its max_inflight and rate_limit apply per lane/, $log_offset),
	'a warning says so');

$node->safe_psql('postgres', q{
	SELECT count(notif_enqueue(g, k, 'o')) FROM generate_series(1, 8) g,
	       unnest(ARRAY['na', 'nb', 't1', 't2', 't3']) k});
ok(wait_until($node, q{SELECT count(*) = 40 FROM notif_job WHERE status = 'sent'}),
	'all 40 jobs were sent');
is(max_overlap(q{'na', 'nb'}), '2', 'the shared provider: never more than its max_inflight (2) at once, across two lanes');
for my $t ('t1', 't2', 't3')
{
	is(max_overlap("'$t'"), '2', "provider of $t: never more than its max_inflight (2) at once");
}
my @warnings = (slurp_file($node->logfile, $log_offset) =~ /has no shared slot/g);
is(scalar(@warnings), 2, 'one warning per provider without a shared slot, not one per round');

# lanes la and lb go away: their provider's slot is free for the next one
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = true WHERE code IN ('na', 'nb')});
ok(wait_until($node, q{SELECT count(*) = 0 FROM notif_workers() WHERE lane IN ('la', 'lb')}),
	'the paused lanes lost their senders');
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, lane) VALUES ('tl', 'at_least_once', 1, 'late', 'ld')});
ok(wait_config_read($node, 'ld'), 'the next lane read its type');
like(slots(), qr/(^|,)late:\*:true:1(,|$)/, 'its provider took the freed shared slot');
unlike(slots(), qr/shared_narrow/, 'the provider no lane uses holds no slot');
$node->safe_psql('postgres', q{SELECT count(notif_enqueue(g, 'tl', 'o')) FROM generate_series(1, 8) g});
ok(wait_until($node, q{SELECT count(*) = 8 FROM notif_job WHERE kind = 'tl' AND status = 'sent'}),
	'its jobs were sent');
is(max_overlap(q{'tl'}), '2', 'within its max_inflight');

done_testing();
