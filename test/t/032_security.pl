# 032_security.pl: claims of doc/security.md that need a server of their
# own.  The background workers run as the bootstrap superuser and do not
# follow a search_path set on their database; only a superuser can create
# the extension; an operators' role granted notif_retry and notif_cancel
# uses them without any right on the tables; a sender's error is logged
# without the row it failed on; a failed statement's text,
# secrets included, reaches the server log (the documented limit), and a
# provider written from a file (pg_read_file) keeps its secret out of it.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('security');
my $sim = start_sim();
set_provider($node, 'default', $sim->{url}, idempotency_header => q('Idempotency-Key'));
$node->safe_psql('postgres', q{INSERT INTO notif_type VALUES ('otp', 'at_least_once', 3, '1 hour')});
my $first = $node->safe_psql('postgres', q{SELECT notif_enqueue(1, 'otp', 'o1', '{}')});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $first"), 'a job is sent');

# --- the workers: as whom ---
is( $node->safe_psql('postgres', q{
		SELECT count(*) FILTER (WHERE a.usesysid = 10) || '/' || count(*)
		  FROM pg_stat_activity a WHERE a.backend_type IN ('notif_deliver launcher', 'notif_deliver sender')}),
	'2/2', 'the launcher and the sender run as the bootstrap superuser (OID 10)');

# --- their search_path: a database setting and look-alikes do not reach them ---
my ($rc, $out, $err);
my $old_sender = $node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender'});
$node->safe_psql('postgres', q{
	CREATE SCHEMA evil;
	CREATE TABLE evil.notif_job (LIKE public.notif_job);
	CREATE TABLE evil.notif_type (LIKE public.notif_type);
	CREATE TABLE evil.notif_active (LIKE public.notif_active);
	ALTER DATABASE postgres SET search_path = evil, public;
	SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender'});
ok( wait_until(
		$node, qq{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender'
		          AND pid <> $old_sender}),
	'a new sender starts under the database\'s search_path = evil, public');
my $second = $node->safe_psql('postgres', q{SELECT public.notif_enqueue(2, 'otp', 'o2', '{}')});
ok(wait_until($node, "SELECT status = 'sent' FROM public.notif_job WHERE id = $second"),
	'it claims and records in the extension\'s tables');
is( $node->safe_psql('postgres',
		q{SELECT (SELECT count(*) FROM evil.notif_job) + (SELECT count(*) FROM evil.notif_active)}),
	'0', 'and never in the look-alikes first on its search_path');
$node->safe_psql('postgres', q{ALTER DATABASE postgres RESET search_path; DROP SCHEMA evil CASCADE});

# --- only a superuser creates the extension ---
$node->safe_psql('postgres', q{
	CREATE ROLE app_owner LOGIN CREATEDB;
	CREATE DATABASE appdb OWNER app_owner});
($rc, $out, $err) = $node->psql('appdb', 'CREATE EXTENSION notif_deliver', extra_params => [ '-U', 'app_owner' ]);
like($err, qr/permission denied to create extension "notif_deliver"/,
	'a database owner who is not a superuser cannot create the extension');

# --- an operators' role ---
$node->safe_psql('postgres', q{
	CREATE ROLE ops LOGIN;
	GRANT EXECUTE ON FUNCTION notif_cancel(bigint), notif_retry(bigint, boolean) TO ops;
	UPDATE notif_type SET paused = true WHERE code = 'otp'});
my $waiting = $node->safe_psql('postgres', q{SELECT notif_enqueue(3, 'otp', 'o3', '{}')});
($rc, $out, $err) = $node->psql('postgres', "SELECT notif_cancel($waiting)", extra_params => [ '-U', 'ops' ]);
is($rc, 0, 'ops cancels a job with the granted notif_cancel') or diag($err);
is($node->safe_psql('postgres', "SELECT status FROM notif_job WHERE id = $waiting"), 'failed', 'it is cancelled');
($rc, $out, $err) = $node->psql('postgres', 'SELECT count(*) FROM notif_job', extra_params => [ '-U', 'ops' ]);
like($err, qr/permission denied for table notif_job/, 'ops cannot read notif_job');
($rc, $out, $err) = $node->psql('postgres', "SELECT notif_retry($waiting, false)", extra_params => [ '-U', 'ops' ]);
is($rc, 0, 'ops re-drives the job with the granted notif_retry') or diag($err);

# --- a sender's error in a round: logged without the row it failed on ---
$node->safe_psql('postgres', q{
	UPDATE notif_type SET paused = false WHERE code = 'otp';
	ALTER TABLE notif_job ADD CONSTRAINT test_refuses_sent
	    CHECK (status <> 'sent' OR payload->>'to' IS DISTINCT FROM '+84911111111')});
my $at = -s $node->logfile;
my $blocked = $node->safe_psql('postgres', q{SELECT notif_enqueue(4, 'otp', 'o4', '{"to": "+84911111111"}')});
ok($node->wait_for_log(qr/notif_deliver sender of lane "default": new row for relation "notif_job" violates check constraint "test_refuses_sent"/, $at),
	'recording the job fails, and the sender logs why');
my @lines = grep { !/LOG:  statement: / } split /\n/, slurp_file($node->logfile, $at);
unlike(join("\n", @lines), qr/84911111111/, 'without the failing row (its payload, the number) that PostgreSQL\'s DETAIL shows');
$node->safe_psql('postgres', q{ALTER TABLE notif_job DROP CONSTRAINT test_refuses_sent});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $blocked"), 'and records it once it can');

# --- what a failed statement puts in the server log ---
my $offset = -s $node->logfile;
$node->psql('postgres', q{INSERT INTO notif_provider (name, url, headers)
	VALUES ('typo', 'htps://sms.example.com/send', '{"Authorization": "Bearer literal-secret-1"}')});
my $file = PostgreSQL::Test::Utils::tempdir() . '/headers.json';
PostgreSQL::Test::Utils::append_to_file($file, '{"Authorization": "Bearer file-secret-2"}');
chmod 0644, $file;
my ($rc2) = $node->psql('postgres', qq{INSERT INTO notif_provider (name, url, headers)
	VALUES ('typo', 'htps://sms.example.com/send', pg_read_file('$file')::jsonb)});
isnt($rc2, 0, 'both inserts were refused (the url is not http)');
my $log = slurp_file($node->logfile, $offset);
like($log, qr/literal-secret-1/, 'a refused statement with a literal secret: its text, secret included, is in the log');
unlike($log, qr/file-secret-2/, 'the same statement reading its headers from a file: the secret is not');

# --- the database's settings cannot stop the workers (its owner may set them) ---
$node->safe_psql('postgres', q{
	ALTER DATABASE postgres SET default_transaction_read_only = on;
	ALTER DATABASE postgres SET idle_in_transaction_session_timeout = '1ms';
	ALTER DATABASE postgres SET default_transaction_isolation = 'serializable'});
$node->restart;
my $ro = $node->safe_psql('postgres',
	q{SET default_transaction_read_only = off; SELECT notif_enqueue(5, 'otp', 'o5', '{"to": "+84900000005"}')});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $ro"),
	'with the database read-only by default, its workers still send (they set what they depend on)');
$node->safe_psql('postgres', q{SET default_transaction_read_only = off; ALTER DATABASE postgres RESET ALL});

done_testing();
