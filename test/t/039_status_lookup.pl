# 039_status_lookup.pl: asking the provider before an at_least_once retry
# (notif_provider.lookup_*, src/sender/lookup.c).  The first call of each
# job is held past the provider's timeout (X-Sim-Fail-First: 1): delivered
# all the same (timeout_delivered) or not (timeout).  Before the retry the
# sender asks the simulator's GET /status/<key>, backed by its ledger:
#   found      the call is not made, the job ends sent, outcome accepted
#              (alo_lookup_found), resolved_by lookup_found;
#   not found  the retry goes ahead, resolved_by lookup_not_found;
#   no answer  (an unreachable lookup, a value not among the found ones)
#              the retry goes ahead as without a lookup: a duplicate when
#              the first call had delivered.
# at_most_once jobs and first calls are never asked about.  Checked in
# notif_job, notif_attempt, notif_resolved and the simulator's ledger and
# lookup counters; and the provider CHECKs on lookup_*.  And a SIGKILL of
# the sender while a lookup is in flight: asked again after the restart.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('status_lookup');
my $sim = start_sim();
my $status = "$sim->{url}";
$status =~ s{/send$}{};
$status .= '/status/{key}';

# --- the CHECKs: bad settings are refused, naming their constraint ---
set_provider($node, 'checks', $sim->{url});
for my $bad (
	[ q{lookup_url = 'http://127.0.0.1/status', lookup_headers = '{}'}, 'notif_provider_lookup_url_check', 'a lookup_url without {key}' ],
	[ q{lookup_url = 'ftp://127.0.0.1/{key}', lookup_headers = '{}'}, 'notif_provider_lookup_url_check', 'a lookup_url not http(s)' ],
	[ q{lookup_url = 'https://status.example.com/{key}'}, 'notif_provider_lookup_origin_check',
		"a lookup elsewhere than the provider's calls, with the provider's headers" ],
	[ q{lookup_found = '{502}'}, 'notif_provider_lookup_status_check', 'an error status meaning found' ],
	[ q{lookup_method = 'HEAD', lookup_field = 'status', lookup_found_values = '{x}'},
		'notif_provider_lookup_field_values_check', 'a field to read in a HEAD answer' ],
	[ q{lookup_method = 'POST'}, 'notif_provider_lookup_method_check', 'a method other than GET or HEAD' ],
	[ q{lookup_found = '{200}', lookup_not_found = '{200,404}'}, 'notif_provider_lookup_status_check',
		'a status both found and not found' ],
	[ q{lookup_found = '{}'}, 'notif_provider_lookup_status_check', 'no found status' ],
	[ q{lookup_not_found = '{404,NULL}'}, 'notif_provider_lookup_status_check', 'a NULL status' ],
	[ q{lookup_not_found = '{42}'}, 'notif_provider_lookup_status_check', 'a status that is not HTTP' ],
	[ q{lookup_field = 'status'}, 'notif_provider_lookup_field_values_check', 'a field without found values' ],
	[ q{lookup_not_found_values = '{x}'}, 'notif_provider_lookup_field_values_check', 'values without a field' ],
	[ q{lookup_field = 'a..b', lookup_found_values = '{x}'}, 'notif_provider_lookup_field_check', 'an empty step in the field path' ],
	[ q{lookup_headers = '{"X-Api-Key": 1}'}, 'notif_provider_lookup_headers_check', 'a header that is not a string' ],
	[ q{lookup_url = 'http://sms.example.com/status/{key}', lookup_headers = '{"Authorization": "Bearer s3cr3t"}'},
		'needs an https:// url', 'credentials to a lookup over plain http' ])
{
	my ($rc, $out, $err) = $node->psql('postgres', "UPDATE notif_provider SET $bad->[0] WHERE name = 'checks'");
	like($err, qr/\Q$bad->[1]\E/, "refused: $bad->[2]");
	unlike($err, qr/s3cr3t/, "... and the error shows no secret ($bad->[2])");
}

# --- the providers and their types ---
# the lookup providers: a fault, the lookup endpoint, a credential to keep secret
sub lookup_provider
{
	my ($name, $fault, %cols) = @_;
	fault_provider($node, $name, $sim->{url}, $fault,
		extra_headers => { 'X-Api-Key' => "k3y-$name" },
		lookup_url => qq('$status'),
		%cols);
}
lookup_provider('p_found', 'timeout_delivered');
lookup_provider('p_not_found', 'timeout');
lookup_provider('p_head', 'timeout_delivered', lookup_method => q('HEAD'));
lookup_provider('p_field', 'timeout_delivered',
	lookup_field => q('status'), lookup_found_values => q('{delivered}'),
	lookup_not_found_values => q('{not_found}'));
lookup_provider('p_field_other', 'timeout_delivered',
	lookup_field => q('status'), lookup_found_values => q('{accepted}'));
lookup_provider('p_unreachable', 'timeout_delivered', lookup_url => q('http://127.0.0.1:1/status/{key}'),
	lookup_headers => q('{}'));
lookup_provider('p_amo', 'timeout');
# one call in flight at most: the lookup holds the job's own grant
lookup_provider('p_one', 'timeout_delivered', max_inflight => 1, rate_limit => 1);

$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
	SELECT p, 'at_least_once', 3, 'p_' || p, '100 ms', '100 ms'
	  FROM unnest(ARRAY['found', 'not_found', 'head', 'field', 'field_other', 'unreachable', 'one']) p;
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
	VALUES ('amo', 'at_most_once', 3, 'p_amo', '100 ms', '100 ms');
});

my $lookups0 = stats($sim)->{lookups};
my %id;
for my $kind (qw(found not_found head field field_other unreachable amo one))
{
	$id{$kind} = $node->safe_psql('postgres',
		qq{SELECT notif_enqueue(1, '$kind', 'o1', '{"to":"+84900000001","text":"$kind"}')});
}
ok( wait_until(
		$node,
		q{SELECT count(*) = 8 FROM notif_job WHERE status IN ('sent', 'failed', 'expired') AND claimed_by IS NULL}),
	'every job finished');

sub ledger_of
{
	my ($kind) = @_;
	my ($received, $delivered) = split / /, ledger_key($sim, "$kind:1:o1");
	return "$received $delivered";
}
sub calls
{
	my ($kind) = @_;
	return $node->safe_psql('postgres',
		qq{SELECT string_agg(try || ':' || outcome, ',' ORDER BY try) FROM notif_calls WHERE job_id = $id{$kind}});
}

is(job_resolution($node, $id{'found'}), 'sent accepted 2 lookup_found',
	'alo_lookup_found: the lookup found it, the job is sent with no second call (its try went to the lookup)');
is(ledger_of('found'), '1 1', 'found: the provider got it once');
is(calls('found'), '1:unknown',
	'found: notif_calls shows the one call made (the lookup is no call: p and q in notif_stats stay true)');
is($node->safe_psql('postgres', qq{SELECT last_error FROM notif_job WHERE id = $id{found}}),
	"the provider's status lookup found it: not sent again", '... and the job says why it was not sent again');

is(job_resolution($node, $id{'not_found'}), 'sent accepted 2 lookup_not_found',
	'not found: the retry went ahead and was accepted; resolved_by lookup_not_found');
is(ledger_of('not_found'), '2 1', 'not found: received twice, delivered once (the first was never delivered)');

is(job_resolution($node, $id{'head'}), 'sent accepted 2 lookup_found', 'lookup_method HEAD: found by its status alone');
is(ledger_of('head'), '1 1', 'HEAD: no second call');

is(job_resolution($node, $id{'field'}), 'sent accepted 2 lookup_found', 'lookup_field: "status" is "delivered", among the found values');
is(ledger_of('field'), '1 1', 'lookup_field: no second call');

is(job_resolution($node, $id{'field_other'}), 'sent accepted 2 -',
	'a found status whose field holds no found value is no answer: the retry went ahead, unresolved');
is(ledger_of('field_other'), '2 2', '... and delivered a duplicate, as without a lookup');

is(job_resolution($node, $id{'unreachable'}), 'sent accepted 2 -', 'an unreachable lookup is no answer: the retry went ahead');
is(ledger_of('unreachable'), '2 2', '... a duplicate, as without a lookup');

is(job_resolution($node, $id{'amo'}), 'sent unknown 1 -', 'at_most_once: never asked, never retried');

is(job_resolution($node, $id{'one'}), 'sent accepted 2 lookup_found', 'max_inflight 1, rate_limit 1/s: asked all the same, found');
is(ledger_of('one'), '1 1', 'max_inflight 1: no second call');

# found, not_found, head, field, field_other: one lookup each; no first
# call, no at_most_once job was asked about (the unreachable one never
# reached the simulator)
is(stats($sim)->{lookups} - $lookups0, 6, 'the simulator answered one lookup per retried job, and no other');

is( $node->safe_psql('postgres', q{
		SELECT string_agg(kind || ' ' || resolved_lookup_found || ' ' || resolved_lookup_not_found, ', ' ORDER BY kind)
		  FROM notif_resolved WHERE kind IN ('found', 'not_found', 'head', 'field', 'field_other')}),
	'field 1 0, field_other 0 0, found 1 0, head 1 0, not_found 0 1',
	'notif_resolved counts the jobs each answer resolved');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(kind || ' ' || duplicates_avoided || ' ' || losses_avoided, ', ' ORDER BY kind)
		  FROM notif_resolved WHERE kind IN ('found', 'not_found', 'field_other')}),
	'field_other 0 0, found 1 0, not_found 0 0',
	'notif_resolved: a job the lookup found is a duplicate avoided');

# every grant of the providers' limits went back
is($node->safe_psql('postgres', q{SELECT coalesce(sum(in_flight), 0) FROM notif_provider_slots()}), '0',
	'the providers have no call in flight left: every lookup gave its grant back');

# --- the sender killed while a lookup is in flight ---
# The lookup answers after 3 s; SIGKILL of the sender meanwhile (the server
# restarts every backend).  The job, claimed for its retry, is recovered as
# a call cut off (lost_retry), asked about again after the restart, found:
# no second copy.
sim_get($sim, '/config?lookup_latency_ms=3000');
lookup_provider('p_crash', 'timeout_delivered', timeout => q('5 s'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
	VALUES ('crash', 'at_least_once', 4, 'p_crash', '100 ms', '100 ms')});
my $lookups1 = stats($sim)->{lookups};
$id{crash} = $node->safe_psql('postgres',
	q{SELECT notif_enqueue(1, 'crash', 'o1', '{"to":"+84900000001","text":"crash"}')});
ok( wait_until(
		$node, qq{SELECT status = 'sending' AND tries = 2 FROM notif_job WHERE id = $id{crash}}),
	'crash: claimed for its retry, the lookup in flight');
my $pid = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender'});
kill 'KILL', $pid;
sim_get($sim, '/config?lookup_latency_ms=0');
ok(wait_until($node, qq{SELECT status = 'sent' AND claimed_by IS NULL FROM notif_job WHERE id = $id{crash}}),
	'crash: sent after the restart');
is(job_resolution($node, $id{'crash'}), 'sent accepted 3 lookup_found',
	'crash: recovered (lost_retry), asked again, found: no retry');
is(ledger_of('crash'), '1 1', 'crash: the provider got it once');
cmp_ok(stats($sim)->{lookups} - $lookups1, '>=', 1, 'crash: the lookup was asked again after the restart');

# the lookups' credentials (the provider's X-Api-Key) reach no log line but
# the statements that set them, and no table but notif_provider
my @lines = grep { !/statement:|STATEMENT:/ } split /\n/, slurp_file($node->logfile);
is(scalar(grep { /k3y-/ } @lines), 0, 'no credential in the server log');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM notif_job WHERE last_error LIKE '%k3y-%'}) . ' '
	  . $node->safe_psql('postgres', q{SELECT count(*) FROM notif_attempt WHERE error LIKE '%k3y-%'}),
	'0 0', 'no credential in last_error or notif_attempt');
unlike(join("\n", @lines), qr/retrying with backoff/, 'the sender logged no error');

done_testing();
