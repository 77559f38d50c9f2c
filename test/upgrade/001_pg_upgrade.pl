# 001_pg_upgrade.pl: a PostgreSQL 15 cluster with notif_deliver in use,
# taken through pg_upgrade to 17, as doc/guide.md's "A major upgrade" says
# to do it.  Runs in the upgrade chroot (test/upgrade/run: Debian 13 with
# Debian 12's postgresql-15 beside its own 17, both with the extension
# built and installed), with PostgreSQL 17's TAP modules.
#
# Before: jobs sent (with attempts and delivery reports), jobs queued (a
# paused type), jobs held by a sender stopped in the middle of their calls
# (at_most_once and at_least_once: an immediate stop, then the crash
# recovery, which empties the unlogged notif_active), a provider with
# credentials, the shard's identity.  After: every row as it was, the identity sequences
# going on past the largest id, notif_active built and matching notif_job,
# delivery resuming; no at_most_once job sent twice, no at_least_once job
# lost.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $version = schema_version();	# read before the test leaves the tree

my $old_install = $ENV{NOTIF_OLD_INSTALL} // '/usr/lib/postgresql/15';
my $sim = start_sim('--hold-ms', '600000');

# --- the old cluster, in use ---
my $old = PostgreSQL::Test::Cluster->new('pg15', install_path => $old_install);
$old->init;
configure_node($old);
$old->start;
like($old->safe_psql('postgres', 'SHOW server_version'), qr/^15\./, 'the old cluster runs PostgreSQL 15');
$old->safe_psql('postgres', 'CREATE EXTENSION notif_deliver');

set_provider($old, 'sms', $sim->{url},
	headers => q('{"Authorization": "Bearer upgrade-test-secret"}'),
	idempotency_header => q('Idempotency-Key'));
# the first call of each key hangs (until the sender is stopped); later ones are accepted
set_provider($old, 'hangs', $sim->{url},
	headers => q('{"X-Sim-Fault": "timeout", "X-Sim-Fail-First": "1"}'),
	idempotency_header => q('Idempotency-Key'),
	timeout => q('10 minutes'));
$old->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, backoff_min, backoff_max)
	VALUES ('otp', 'at_least_once', 3, '1 hour', 'sms', '100 ms', '200 ms'),
	       ('promo', 'at_most_once', 1, '1 hour', 'sms', '100 ms', '200 ms'),
	       ('alo', 'at_least_once', 3, '1 hour', 'hangs', '100 ms', '200 ms'),
	       ('amo', 'at_most_once', 3, '1 hour', 'hangs', '100 ms', '200 ms');
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, paused)
	VALUES ('later', 'at_least_once', 3, '1 day', 'sms', true);
	SELECT notif_shard_setup(2, 4);
});

# sent, with a delivery report for some
$old->safe_psql('postgres', q{
	SELECT notif_enqueue(u, 'otp', 'o' || u, jsonb_build_object('text', 'code ' || u)) FROM generate_series(1, 20) u;
	SELECT notif_enqueue(u, 'promo', 'p' || u, jsonb_build_object('text', 'sale ' || u)) FROM generate_series(1, 20) u;
});
ok(wait_until($old, q{SELECT count(*) = 40 FROM notif_job WHERE status = 'sent' AND claimed_by IS NULL}),
	'the old cluster sent 40 jobs');
$old->safe_psql('postgres', q{
	SELECT notif_dlr('otp:' || u || ':o' || u, true) FROM generate_series(1, 10) u;
	SELECT notif_dlr('nobody:1:x', true);
});
# queued: a paused type
$old->safe_psql('postgres',
	q{SELECT notif_enqueue(u, 'later', 'l' || u, '{"text":"later"}') FROM generate_series(1, 30) u});
# held: calls in flight when the sender stops
$old->safe_psql('postgres', q{
	SELECT notif_enqueue(u, 'alo', 'h' || u, '{"text":"held"}') FROM generate_series(1, 3) u;
	SELECT notif_enqueue(u, 'amo', 'h' || u, '{"text":"held"}') FROM generate_series(1, 3) u;
});
ok( wait_until(
		$old,
		q{SELECT count(*) = 6 FROM notif_job WHERE kind IN ('alo', 'amo') AND claimed_by IS NOT NULL}),
	'six calls held by the sender');
ok(wait_until_ledger($sim, sub { my $l = shift; 6 == grep { ($l->{"$_"} // {})->{received} } held_keys() }),
	'the six calls reached the provider and hang');
# The sender stops in the middle of its calls: an immediate stop (a fast
# one would let it record them first: test/t/004_crash.pl).
$old->stop('immediate');

# What the upgrade must keep, read with the library not loaded (no
# launcher: nothing changes between the reading and the upgrade), after the
# crash recovery that pg_upgrade needs done (it takes a cleanly stopped
# cluster).
my $no_preload = "shared_preload_libraries = ''\n";
$old->append_conf('postgresql.conf', $no_preload);
$old->start;
my %before = table_rows($old);
like($before{notif_job}, qr/\S/, 'the snapshot has the jobs');
is($old->safe_psql('postgres',
		q{SELECT count(*) FROM notif_job WHERE claimed_by IS NOT NULL AND kind IN ('alo', 'amo')}),
	'6', 'the six jobs are still held by the stopped sender');
is($old->safe_psql('postgres', q{SELECT count(*) FROM notif_active}),
	'0', 'notif_active (unlogged) was emptied by the crash recovery: the new cluster must rebuild it');
my $max_job = $old->safe_psql('postgres', 'SELECT max(id) FROM notif_job');
my $max_dlr = $old->safe_psql('postgres', 'SELECT max(id) FROM notif_dlr');
$old->stop;
$old->append_conf('postgresql.conf', "shared_preload_libraries = 'notif_deliver'\n");

# --- pg_upgrade to 17, the library preloaded on the new cluster ---
my $new = PostgreSQL::Test::Cluster->new('pg17');
$new->init;
configure_node($new);
my $workdir = PostgreSQL::Test::Utils::tempdir;
chdir $workdir;
command_ok(
	[
		'pg_upgrade', '--no-sync',
		'--old-datadir' => $old->data_dir,
		'--new-datadir' => $new->data_dir,
		'--old-bindir' => $old->config_data('--bindir'),
		'--new-bindir' => $new->config_data('--bindir'),
		'--socketdir' => $new->host,
		'--old-port' => $old->port,
		'--new-port' => $new->port,
		'--copy'
	],
	'pg_upgrade from 15 to 17 with notif_deliver preloaded');
chdir $PostgreSQL::Test::Utils::tmp_check;

$new->append_conf('postgresql.conf', $no_preload);
$new->start;
like($new->safe_psql('postgres', 'SHOW server_version'), qr/^17\./, 'the new cluster runs PostgreSQL 17');
my %after = table_rows($new);
for my $t (sort keys %before)
{
	is($after{$t}, $before{$t}, "$t: every row as it was");
}
is($new->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'notif_deliver'}),
	$version, "the extension is at $version");
$new->stop;

# --- the new cluster in use ---
$new->append_conf('postgresql.conf', "shared_preload_libraries = 'notif_deliver'\n");
$new->start;
ok( wait_until(
		$new, q{SELECT count(*) = 0 FROM notif_job WHERE claimed_by IS NOT NULL AND kind IN ('alo', 'amo')}
	),
	'the held jobs were recovered on the new cluster');
ok(wait_until($new, q{SELECT count(*) = 3 FROM notif_job WHERE kind = 'alo' AND status = 'sent'}),
	'at_least_once: the three interrupted jobs were sent again');
is( $new->safe_psql('postgres',
		q{SELECT string_agg(status || ' ' || outcome || ' ' || tries, ',' ORDER BY id) FROM notif_job WHERE kind = 'amo'}),
	'sent unknown 1,sent unknown 1,sent unknown 1',
	'at_most_once: the three interrupted jobs recorded unknown, not attempted again');
is( $new->safe_psql('postgres', 'SELECT count(*) FROM notif_active_built'), '1',
	'notif_active was rebuilt by the launcher');
is(active_mismatches($new), '0', 'notif_active matches notif_job: every queued or held job, and nothing else');

# new work, on the identity sequences
my $id = $new->safe_psql('postgres', q{SELECT notif_enqueue(500, 'otp', 'after', '{"text":"after the upgrade"}')});
cmp_ok($id, '>', $max_job, 'notif_job ids go on past the largest one before the upgrade');
$new->safe_psql('postgres', q{SELECT notif_dlr('otp:1:o1', true)});
cmp_ok($new->safe_psql('postgres', 'SELECT max(id) FROM notif_dlr'), '>', $max_dlr,
	'notif_dlr ids go on too');
$new->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code = 'later'});
ok( wait_until(
		$new, q{SELECT count(*) = 0 FROM notif_job WHERE status NOT IN ('sent') OR claimed_by IS NOT NULL}),
	'delivery resumed: every job is sent, the 30 queued ones and the new one included');

# the provider's ledger: nothing lost, nothing at_most_once twice
my $ledger = ledger($sim);
my @lost = grep { !($ledger->{$_} && $ledger->{$_}{delivered} >= 1) }
  ((map { "otp:$_:o$_" } 1 .. 20), (map { "later:$_:l$_" } 1 .. 30), (map { "alo:$_:h$_" } 1 .. 3), 'otp:500:after');
is_deeply(\@lost, [], 'no at_least_once job lost: each was delivered');
my @twice = grep { ($ledger->{$_}{received} // 0) != 1 }
  ((map { "promo:$_:p$_" } 1 .. 20), (map { "amo:$_:h$_" } 1 .. 3));
is_deeply(\@twice, [], 'no at_most_once job sent twice: the provider got each once');
is((split / /, ledger_key($sim, 'alo:1:h1'))[2], '1', 'the retried job carried the same body bytes');
is( $new->safe_psql('postgres', q{SELECT headers->>'Authorization' FROM notif_provider WHERE name = 'sms'}),
	'Bearer upgrade-test-secret', "the provider's credentials came through");
is($new->safe_psql('postgres', 'SELECT shard || \'/\' || shards FROM notif_shard_info()'),
	'2/4', "the shard's identity came through");
my $log = slurp_file($new->logfile);
unlike($log, qr/retrying with backoff|upgrade-test-secret/, 'no error in the new cluster\'s log, no credential');

done_testing();

sub held_keys { return ((map { "alo:$_:h$_" } 1 .. 3), (map { "amo:$_:h$_" } 1 .. 3)); }

