# 029_dump_restore.pl: a backup restores into a working database.  A
# database in use (jobs in every status, calls held in flight, the default
# provider and another with credentials, delivery reports, a lane, the
# shard's identity) is dumped while its sender holds calls, in the custom
# and the plain format, whole and --data-only, and restored into empty
# databases (the data-only dumps after CREATE EXTENSION there), as
# doc/guide.md's "Backups" section says.  Each restored database has every
# row, the default provider's settings, identity sequences that continue
# past the largest id (by the shard's step), and notif_active matching
# notif_job; the custom dump, restored into the database of a second
# server's launcher, resumes delivery from where the dump was taken: held
# at_most_once calls recorded unknown and never made again, held and
# queued at_least_once jobs delivered.  A database updated from 1.3 keeps
# the EXECUTE its application was granted on notif_enqueue through a dump.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $sim = start_sim('--hold-ms', '600000');
my $old = new_node('dumped');

set_provider($old, 'default', $sim->{url},
	headers => q('{"Authorization": "Bearer dump-test-secret"}'),
	idempotency_header => q('Idempotency-Key'),
	max_inflight => 7);
# the first call of each key hangs (until the test ends); later ones are accepted
set_provider($old, 'hangs', $sim->{url},
	headers => q('{"X-Sim-Fault": "timeout", "X-Sim-Fail-First": "1", "X-Api-Key": "hangs-secret"}'),
	idempotency_header => q('Idempotency-Key'),
	timeout => q('10 minutes'));
set_provider($old, 'refuses', $sim->{url}, headers => q('{"X-Sim-Fault": "400"}'));
$old->safe_psql('postgres', q{
	SELECT notif_shard_setup(2, 4);
	INSERT INTO notif_type (code, delivery, max_tries, deadline, backoff_min, backoff_max)
	VALUES ('otp', 'at_least_once', 3, '1 hour', '100 ms', '200 ms'),
	       ('promo', 'at_most_once', 1, '1 hour', '100 ms', '200 ms');
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, backoff_min, backoff_max)
	VALUES ('alo', 'at_least_once', 3, '1 hour', 'hangs', '100 ms', '200 ms'),
	       ('amo', 'at_most_once', 3, '1 hour', 'hangs', '100 ms', '200 ms'),
	       ('bad', 'at_least_once', 3, '1 hour', 'refuses', '100 ms', '200 ms');
	INSERT INTO notif_type (code, delivery, max_tries, deadline, paused)
	VALUES ('later', 'at_least_once', 3, '1 day', true),
	       ('stale', 'at_least_once', 3, '1 second', true);
	INSERT INTO notif_lane (lane, senders) VALUES ('default', 1);
});

# shard 2 of 4: every user below hashes to it
my @users = split /\n/, $old->safe_psql('postgres',
	q{SELECT u FROM generate_series(1, 2000) u WHERE hashint8(u::bigint) & 3 = 2 ORDER BY u LIMIT 60});
my ($u_otp, $u_promo, $u_later, $u_held, $u_other) = map { [ @users[ $_ * 10 .. $_ * 10 + 9 ] ] } 0 .. 4;
my $list = sub { join ',', @{ $_[0] } };

# sent (with delivery reports), failed, cancelled, expired, queued, held
$old->safe_psql('postgres', "
	SELECT notif_enqueue(u, 'otp', 'o' || u, jsonb_build_object('text', 'code ' || u)) FROM unnest('{${\ $list->($u_otp)}}'::bigint[]) u;
	SELECT notif_enqueue(u, 'promo', 'p' || u, jsonb_build_object('text', 'sale ' || u)) FROM unnest('{${\ $list->($u_promo)}}'::bigint[]) u;
	SELECT notif_enqueue(u, 'bad', 'b' || u, '{}') FROM unnest('{${\ $list->([ @{$u_other}[0 .. 1] ])}}'::bigint[]) u;
	SELECT notif_enqueue(u, 'stale', 's' || u, '{}') FROM unnest('{${\ $list->([ @{$u_other}[2 .. 3] ])}}'::bigint[]) u;
	SELECT notif_enqueue(u, 'later', 'l' || u, '{\"text\":\"later\"}') FROM unnest('{${\ $list->($u_later)}}'::bigint[]) u;
	SELECT notif_enqueue(u, 'later', 'c' || u, '{}') FROM unnest('{${\ $list->([ @{$u_other}[4 .. 5] ])}}'::bigint[]) u;
");
$old->safe_psql('postgres', q{SELECT notif_cancel(id) FROM notif_job WHERE order_id LIKE 'c%'});
ok(wait_until($old, q{SELECT count(*) = 20 FROM notif_job WHERE status = 'sent' AND claimed_by IS NULL}),
	'20 jobs sent');
ok(wait_until($old, q{SELECT count(*) = 2 FROM notif_job WHERE kind = 'bad' AND status = 'failed'}),
	'two jobs failed (the provider refused them)');
ok(wait_until($old, q{SELECT bool_and(deadline_at < now()) FROM notif_job WHERE kind = 'stale'}),
	'the stale jobs\' deadline passed while their type was paused');
$old->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code = 'stale'});
ok(wait_until($old, q{SELECT count(*) = 2 FROM notif_job WHERE kind = 'stale' AND status = 'expired'}),
	'two jobs expired');
$old->safe_psql('postgres', "
	SELECT notif_dlr('otp:' || u || ':o' || u, true) FROM unnest('{${\ $list->([ @{$u_otp}[0 .. 4] ])}}'::bigint[]) u;
	SELECT notif_dlr('nobody:1:x', false);
");
$old->safe_psql('postgres', "
	SELECT notif_enqueue(u, 'alo', 'h' || u, '{\"text\":\"held\"}') FROM unnest('{${\ $list->([ @{$u_held}[0 .. 2] ])}}'::bigint[]) u;
	SELECT notif_enqueue(u, 'amo', 'h' || u, '{\"text\":\"held\"}') FROM unnest('{${\ $list->([ @{$u_held}[3 .. 5] ])}}'::bigint[]) u;
");
ok( wait_until(
		$old, q{SELECT count(*) = 6 FROM notif_job WHERE kind IN ('alo', 'amo') AND claimed_by IS NOT NULL}),
	'six calls held by the sender');
my @held = map { "alo:$_:h$_" } @{$u_held}[0 .. 2];
my @held_amo = map { "amo:$_:h$_" } @{$u_held}[3 .. 5];
ok(wait_until_ledger($sim, sub { my $l = shift; 6 == grep { ($l->{$_} // {})->{received} } @held, @held_amo }),
	'the six calls reached the provider and hang');
is( $old->safe_psql('postgres', q{SELECT string_agg(DISTINCT status, ',' ORDER BY status) FROM notif_job}),
	'expired,failed,queued,sending,sent', 'jobs in every status');

# --- the dumps, taken while the calls are held ---
my %before = table_rows($old);
my $dir = PostgreSQL::Test::Utils::tempdir;
my $src = $old->connstr('postgres');
my %dump = (
	custom => [ '-Fc', '-f', "$dir/all.dump" ],
	plain => [ '-Fp', '-f', "$dir/all.sql" ],
	custom_data => [ '-Fc', '--data-only', '-f', "$dir/data.dump" ],
	plain_data => [ '-Fp', '--data-only', '-f', "$dir/data.sql" ]);
command_ok([ 'pg_dump', @{ $dump{$_} }, '-d', $src ], "pg_dump $_") for sort keys %dump;
my %again = table_rows($old);
is_deeply(\%again, \%before, 'nothing changed while the dumps were taken');
my $max_job = $old->safe_psql('postgres', 'SELECT max(id) FROM notif_job');
my $max_dlr = $old->safe_psql('postgres', 'SELECT max(id) FROM notif_dlr');
unlike(slurp_file("$dir/all.sql"), qr/notif_active/, 'the dump holds no row of notif_active (rebuilt from notif_job)');

# --- restored into empty databases of a second server (its launcher
# serves "postgres", restored last) ---
my $new = PostgreSQL::Test::Cluster->new('restored');
$new->init;
configure_node($new);
$new->start;
my %restore = (
	custom => sub { [ 'pg_restore', '-d', $_[0], "$dir/all.dump" ] },
	plain => sub { [ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $_[0], '-f', "$dir/all.sql" ] },
	custom_data => sub { [ 'pg_restore', '--data-only', '-d', $_[0], "$dir/data.dump" ] },
	plain_data => sub { [ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $_[0], '-f', "$dir/data.sql" ] });
for my $way (sort keys %restore)
{
	$new->safe_psql('postgres', "CREATE DATABASE $way");
	$new->safe_psql($way, 'CREATE EXTENSION notif_deliver') if $way =~ /_data$/;
	command_ok($restore{$way}->($new->connstr($way)), "$way: restored");
	my %after = table_rows($new, $way);
	is($after{$_}, $before{$_}, "$way: $_, every row as it was") for sort keys %before;
	check_restored($way);
}

# the custom dump, into the launcher's database: delivery resumes there
command_ok($restore{custom}->($new->connstr('postgres')), 'restored into the launcher\'s database');
check_restored('postgres');
ok( wait_until(
		$new, q{SELECT count(*) = 0 FROM notif_job WHERE claimed_by IS NOT NULL}),
	'the held jobs were recovered');
ok(wait_until($new, q{SELECT count(*) = 3 FROM notif_job WHERE kind = 'alo' AND status = 'sent'}),
	'at_least_once: the three jobs held at dump time were sent again');
is( $new->safe_psql('postgres',
		q{SELECT string_agg(status || ' ' || outcome || ' ' || tries, ',' ORDER BY id) FROM notif_job WHERE kind = 'amo'}),
	'sent unknown 1,sent unknown 1,sent unknown 1',
	'at_most_once: the three jobs held at dump time recorded unknown, not attempted again');
$new->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code = 'later'});
my $fresh = $new->safe_psql('postgres', "SELECT notif_enqueue($u_other->[6], 'otp', 'after', '{\"text\":\"after\"}')");
ok( wait_until(
		$new,
		q{SELECT count(*) = 0 FROM notif_job WHERE status IN ('queued', 'sending') OR claimed_by IS NOT NULL}),
	'delivery resumed: the queued jobs and a new one were delivered');
is($new->safe_psql('postgres', "SELECT status FROM notif_job WHERE id = $fresh"), 'sent', 'the new job was sent');
is( $new->safe_psql('postgres', q{SELECT string_agg(status, ',' ORDER BY order_id) FROM notif_job WHERE order_id LIKE 'c%'}),
	'failed,failed', 'the cancelled jobs stay cancelled');

# the provider's ledger: nothing lost, no at_most_once job twice, no sent job again
my $ledger = ledger($sim);
my @lost = grep { !($ledger->{$_} && $ledger->{$_}{delivered} >= 1) }
  ((map { "later:$_:l$_" } @$u_later), @held, "otp:$u_other->[6]:after");
is_deeply(\@lost, [], 'no at_least_once job lost: each was delivered');
my @twice = grep { ($ledger->{$_}{received} // 0) != 1 }
  ((map { "otp:$_:o$_" } @$u_otp), (map { "promo:$_:p$_" } @$u_promo), @held_amo);
is_deeply(\@twice, [], 'nothing sent before the dump was sent again, no at_most_once job twice');
is((split / /, ledger_key($sim, $held[0]))[2], '1', 'the job sent again carried the same body bytes');
is(headers_of(last_request($sim, "later:$u_later->[0]:l$u_later->[0]"))->{Authorization},
	'Bearer dump-test-secret', 'the default provider\'s credentials came through the restore');
unlike(slurp_file($new->logfile), qr/dump-test-secret|hangs-secret/, 'no credential in the server log');

# A database updated from 1.3: the EXECUTE an application was granted on
# notif_enqueue is granted on the 1.4 functions by the update, as the
# user's grant (not the extension's initial privileges), so a dump carries
# it; the initial privileges are those of a fresh 1.4.
my $acl_sql = q{SELECT p.oid::regprocedure || ' ' || coalesce(i.initprivs::text, '-')
                  FROM pg_proc p LEFT JOIN pg_init_privs i ON i.classoid = 'pg_proc'::regclass AND i.objoid = p.oid
                 WHERE p.proname = 'notif_enqueue' ORDER BY 1};
$old->safe_psql('postgres', q{CREATE ROLE enqueuer; CREATE DATABASE upd13; CREATE DATABASE fresh14});
$old->safe_psql('upd13', q{CREATE EXTENSION notif_deliver VERSION '1.3';
	GRANT EXECUTE ON FUNCTION notif_enqueue(bigint, text, text, jsonb, timestamptz) TO enqueuer;
	ALTER EXTENSION notif_deliver UPDATE TO '1.4'});
$old->safe_psql('fresh14', 'CREATE EXTENSION notif_deliver');
is($old->safe_psql('upd13', $acl_sql), $old->safe_psql('fresh14', $acl_sql),
	'updated from 1.3: notif_enqueue\'s initial privileges are a fresh 1.4\'s');
my $can = q{SELECT has_function_privilege('enqueuer', 'notif_enqueue(bigint, text, text, jsonb, timestamptz, text)', 'EXECUTE')
	           || ' ' || has_function_privilege('enqueuer', 'notif_enqueue(bigint, text, bigint, jsonb, timestamptz, text)', 'EXECUTE')};
is($old->safe_psql('upd13', $can), 'true false', 'updated from 1.3: the grant went to the new notif_enqueue(text order_id), only there');
$new->safe_psql('postgres', 'CREATE ROLE enqueuer; CREATE DATABASE upd13');
command_ok([ 'sh', '-c', 'pg_dump -d "$0" | psql -X -q -v ON_ERROR_STOP=1 -d "$1" >/dev/null',
		$old->connstr('upd13'), $new->connstr('upd13') ], 'updated from 1.3: dumped and restored');
is($new->safe_psql('upd13', $can), 'true false', 'updated from 1.3: the restore keeps the grant');

done_testing();

# What every restored database must be: the default provider as it was
# set, ids going on past the largest (by the shard's step, in its class),
# notif_active matching notif_job.
sub check_restored
{
	my ($db) = @_;
	is( $new->safe_psql($db, q{SELECT url || ' ' || headers::text FROM notif_provider WHERE name = 'default'}),
		"$sim->{url} " . '{"Authorization": "Bearer dump-test-secret"}',
		"$db: the default provider's settings came through");
	is($new->safe_psql($db, 'SELECT shard || \'/\' || shards FROM notif_shard_info()'),
		'2/4', "$db: the shard's identity came through");
	my $id = $new->safe_psql($db, "SELECT notif_enqueue($u_other->[7], 'later', 'new-$db', '{}')");
	cmp_ok($id, '>', $max_job, "$db: notif_job ids go on past the largest one in the dump");
	is($id % 4, 2, "$db: ... in the shard's class (id % 4 = 2)");
	$new->safe_psql($db, "DELETE FROM notif_job WHERE id = $id") unless $db eq 'postgres';
	$new->safe_psql($db, q{SELECT notif_dlr('otp:1:o1', true)});
	cmp_ok($new->safe_psql($db, 'SELECT max(id) FROM notif_dlr'), '>', $max_dlr, "$db: notif_dlr ids go on too");
	is(active_mismatches($new, $db), '0', "$db: notif_active matches notif_job: every queued or held job, and nothing else");
}
