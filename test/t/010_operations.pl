# 010_operations.pl: operating it (version 1.1).  The update from 1.0
# under a running worker; ref_field carrying the job key to the provider;
# delivery reports fed from the simulator's ledger giving notif_stats a q
# close to the simulator's; notif_retry waking its lane; notif_workers and
# pg_stat_activity; the postgres_exporter queries of doc/.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('operations');
my $sim = start_sim();

# --- the update: the library waits for ALTER EXTENSION on a 1.0 schema ---
my $log_offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	DROP EXTENSION notif_deliver;
	CREATE EXTENSION notif_deliver VERSION '1.0'});
set_provider($node, 'default', $sim->{url}, idempotency_header => q('Idempotency-Key'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, lane) VALUES ('upd', 'at_least_once', 3, 'upd');
	SELECT count(notif_enqueue(g, 'upd', 'u' || g)) FROM generate_series(1, 50) g});
ok($node->wait_for_log(qr/is version 1\.0, this library needs \Q${\ schema_version()}\E/, $log_offset),
	'with the extension at 1.0, the launcher says it waits for the update');
# the warning is the launcher's decision, made in the round that read the
# lane: it starts no sender until the update (1.0 has no notif_workers())
is(scalar(keys %{ ledger($sim) }), 0, 'nothing was sent before the update');
is($node->safe_psql('postgres', "SELECT count(*) FROM notif_job WHERE status = 'queued'"),
	'50', 'the jobs wait, queued');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender'"),
	'0', 'no sender runs meanwhile');
my $log = slurp_file($node->logfile, $log_offset);
my @warnings = ($log =~ /is version 1\.0, this library needs \Q${\ schema_version()}\E/g);
is(scalar(@warnings), 1, 'the launcher warned once');
like($log, qr/HINT:  Run ALTER EXTENSION notif_deliver UPDATE in database "postgres"/,
	'with a hint that says what to do');

$node->safe_psql('postgres', 'ALTER EXTENSION notif_deliver UPDATE');
ok( wait_until($node, "SELECT count(*) FROM notif_job WHERE status = 'sent'", '50'),
	'after ALTER EXTENSION UPDATE every waiting job is sent');
is($node->safe_psql('postgres', "SELECT extversion FROM pg_extension WHERE extname = 'notif_deliver'"),
	schema_version(), 'the extension is at ' . schema_version());
my $l = ledger($sim);
is(scalar(grep { $l->{$_}{received} == 1 } keys %$l), 50, 'each job reached the provider once');

# --- ref_field: the key travels in the body, the same bytes every attempt ---
set_provider($node, 'reffed', $sim->{url}, idempotency_header => q('Idempotency-Key'),
	ref_field => q('ref'));
set_provider($node, 'reffed_form', $sim->{url}, idempotency_header => q('Idempotency-Key'),
	ref_field => q('client_ref'), format => q('form'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES
	    ('refj', 'at_least_once', 3, 'reffed'), ('reff', 'at_least_once', 3, 'reffed_form');
	SELECT notif_enqueue(7, 'refj', 'a:1', '{"text": "xin chào", "ref": "from the payload"}');
	SELECT notif_enqueue(7, 'reff', 'b', '{"text": "hi"}')});
ok(wait_until($node, "SELECT count(*) FROM notif_job WHERE kind IN ('refj', 'reff') AND status = 'sent'", '2'),
	'both jobs were sent');
is(last_request($sim, 'refj:7:a:1')->{body}, '{"ref": "refj:7:a:1", "text": "xin chào"}',
	'json: the key replaces the payload field of that name');
is(last_request($sim, 'reff:7:b')->{body}, 'text=hi&client_ref=reff%3A7%3Ab',
	'form: the key is one more field');

# --- q measured from delivery reports, against the simulator's q ---
my $sim_q = start_sim('--p-timeout', '0.05', '--q', '0.3', '--seed', '11', '--hold-ms', '3000');
set_provider($node, 'sms', $sim_q->{url}, idempotency_header => q('Idempotency-Key'),
	timeout => q('200 ms'), max_inflight => 512);
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, lane, provider) VALUES ('promo', 'at_most_once', 1, 'bulk', 'sms');
	SELECT count(notif_enqueue(g, 'promo', 'p' || g, '{"text": "sale"}')) FROM generate_series(1, 20000) g});
ok( wait_until($node,
		"SELECT count(*) FROM notif_job WHERE kind = 'promo' AND status = 'sent' AND claimed_by IS NULL",
		'20000'),
	'20,000 promotions sent');
my $ledger = ledger($sim_q);
my ($reports, $delivered, $never_delivered) = ('', 0, 0);
for my $key (keys %$ledger)
{
	my $e = $ledger->{$key};
	$reports .= ",('$key', true)" x $e->{delivered};
	$reports .= ",('$key', false)" if $e->{delivered} == 0;
	$delivered += $e->{delivered};
	$never_delivered++ if $e->{delivered} == 0;
}
$reports =~ s/^,//;
is($node->safe_psql('postgres',
		"SELECT count(*) FILTER (WHERE job IS NULL) FROM (VALUES $reports) r(k, d),"
		  . " LATERAL (SELECT notif_dlr(k, d) AS job) x"),
	'0', 'every report from the ledger matched its job');
my ($p, $q, $q_sample, $lost, $dups) = split /\|/, $node->safe_psql('postgres', q{
	SET notif_deliver.stats_dlr_grace = 0;
	SELECT p, q, q_sample, measured_lost, measured_duplicates FROM notif_stats WHERE kind = 'promo'});
note("p $p, q $q over $q_sample ambiguous calls, lost $lost, duplicates $dups");
cmp_ok(abs($p - 0.05), '<', 0.01, 'p is the simulator\'s timeout rate (0.05)');
cmp_ok($q_sample, '>', 700, 'q is measured over the ambiguous calls');
cmp_ok(abs($q - 0.3), '<', 0.06, 'q is within 6 points of the simulator\'s q (0.3)');
is($lost, $never_delivered, 'measured lost = the jobs the simulator never delivered');
is($dups, '0', 'at_most_once: no duplicates');

# --- notif_retry wakes its lane (the poll is an hour) ---
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET notif_deliver.poll_interval = '1h';
	SELECT pg_reload_conf()});
set_provider($node, 'refuse', $sim->{url}, idempotency_header => q('Idempotency-Key'),
	headers => q('{"X-Sim-Fault": "400"}'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, lane) VALUES ('redo', 'at_least_once', 3, 'refuse', 'redo');
	SELECT count(notif_enqueue(g, 'redo', 'r' || g)) FROM generate_series(1, 20) g});
ok(wait_until($node, "SELECT count(*) FROM notif_job WHERE kind = 'redo' AND status = 'failed'", '20'),
	'a refusing provider: 20 jobs failed');
$node->safe_psql('postgres', q{UPDATE notif_provider SET headers = '{}' WHERE name = 'refuse'});
ok(wait_config_read($node, 'redo'), 'the redo lane read the fixed provider');
my $t0 = time;
is($node->safe_psql('postgres', "SELECT notif_retry('redo', now() - interval '1 hour')"),
	'20', 'notif_retry re-drove the 20 failed jobs');
ok(wait_until($node, "SELECT count(*) FROM notif_job WHERE kind = 'redo' AND status = 'sent'", '20'),
	'they were sent');
cmp_ok(time - $t0, '<', 60, 'woken at commit, not by the hourly poll');

# a retry is claimed when its backoff ends, not at the next poll
set_provider($node, 'once502', $sim->{url}, idempotency_header => q('Idempotency-Key'),
	headers => q('{"X-Sim-Fault": "502", "X-Sim-Fail-First": "1"}'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
	VALUES ('again', 'at_least_once', 3, 'once502', '200 ms', '200 ms')});
my $t_again = time;
my $again = $node->safe_psql('postgres', q{SELECT notif_enqueue(1, 'again', 'a')});
ok(wait_until($node, "SELECT status = 'sent' AND tries = 2 FROM notif_job WHERE id = $again"),
	'alo_retry: a 502, then accepted on the second try');
cmp_ok(time - $t_again, '<', 60, 'the retry went out when its backoff ended, not at the hourly poll');
is($node->safe_psql('postgres', q{
	SELECT string_agg(a.try || ':' || a.outcome, ',' ORDER BY a.try) FROM notif_calls a
	  JOIN notif_job j ON j.id = a.job_id WHERE j.kind = 'redo' AND j.order_id = 'r1'}),
	'1:rejected,2:accepted', 'its attempts are numbered on across the re-drive');
is($node->safe_psql('postgres', "SELECT tries || ' ' || earlier_tries FROM notif_job WHERE kind = 'redo' AND order_id = 'r1'"),
	'1 1', 'tries restarted; earlier_tries keeps the first one');

# --- notif_workers and pg_stat_activity ---
is($node->safe_psql('postgres', q{
	SELECT string_agg(lane || ':' || (pid IS NOT NULL), ',' ORDER BY lane)
	  FROM notif_workers() WHERE role = 'sender'}),
	'bulk:true,default:true,redo:true,upd:true',
	'notif_workers: one running sender per lane');
ok(wait_until($node, 'SELECT notif_config_applied()'),
	'notif_config_applied: every process has read the latest configuration');
is($node->safe_psql('postgres', q{SELECT sent_last_minute FROM notif_workers() WHERE lane = 'redo'}),
	'20', 'the redo lane sent its 20 re-driven jobs in the last minute (the rejected calls do not count)');
is($node->safe_psql('postgres', q{
	SELECT string_agg(DISTINCT backend_type || '/' || (query IN ('waiting for due jobs', 'reading lanes') OR query LIKE 'sending:%'), ',')
	  FROM pg_stat_activity WHERE backend_type LIKE 'notif_deliver%'}),
	'notif_deliver launcher/true,notif_deliver sender/true',
	'pg_stat_activity says what each process is doing');

# --- every query of the postgres_exporter file runs, as a pg_monitor role ---
$node->safe_psql('postgres', 'CREATE ROLE exporter LOGIN IN ROLE pg_monitor');
my $yaml = slurp_file('doc/postgres_exporter.yaml');
my %queries = ($yaml =~ /^(\w+):\n\s+query: "(.*)"$/mg);
is(join(' ', sort keys %queries), 'notif_provider_health notif_stats notif_workers', 'the exporter file has its three queries');
# rows: one per type (4), per lane and role (4 lanes and the launcher), per provider (1)
my %rows = (notif_stats => 4, notif_workers => 4, notif_provider_health => 1);
for my $name (sort keys %queries)
{
	my ($rc, $out, $err) = $node->psql('postgres', "SET ROLE exporter; $queries{$name}");
	is($rc, 0, "exporter query $name runs as a pg_monitor role") or diag($err);
	cmp_ok(scalar(split /\n/, $out), '>=', $rows{$name}, 'and returns a row per type, process or provider');
}

done_testing();
