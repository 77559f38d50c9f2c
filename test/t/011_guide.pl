# 011_guide.pl: the user's documentation cannot drift from the code.
#
# Runs every ```sql block of README.md, then of doc/guide.md, in order, with
# psql (-X -q, ON_ERROR_STOP) against a server with notif_deliver preloaded
# whose providers point at the provider simulator, so the snippets really
# deliver.  A ```text block right after a ```sql block is that block's
# output: what psql printed must equal it (trailing blanks aside).  A block
# that only reads (no INSERT/UPDATE/..., no notif_enqueue/_retry/_cancel/
# _dlr) is re-run, read-only, until its output matches or 60 s have passed:
# it shows the state "a moment later".  A failing block is reported with its
# file and line.
#
# The snippet text is never edited.  What the test does between blocks is
# listed in @hooks below, each tied to exactly one block: point the example
# provider URL (https://sms.example.com) at the simulator right after the
# block that sets it, make the day of traffic that the guide's notif_stats
# output shows, take the provider down and bring it back for the "bad day"
# (its circuit breaker opens, and closes when the provider is back),
# and check what a snippet's prose claims (the simulator's ledger, the
# request on the wire, privileges).  The roles the guide grants to (app,
# dlr_webhook, ops) stand for the reader's own and are created first.
#
# Run: make installcheck REGRESS= PROVE_TESTS=test/t/011_guide.pl
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use IPC::Run;
use Time::HiRes qw(usleep time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('guide');
my $sim = start_sim();
my $sim_base = "http://127.0.0.1:$sim->{port}";
my @my_sims;    # simulators this file starts itself (the one after the outage)
my $request_55001;    # the payment alert's request, as the simulator got it
END { local $?; kill 'KILL', $_ for @my_sims; }

# ---------------------------------------------------------------- blocks

# The fenced blocks of a markdown file: [{ lang, line, text, expected }],
# sql blocks only, each with the text block that follows it, if any.
# Fences may be indented (inside a list item); the indent is removed.
sub sql_blocks
{
	my ($file) = @_;
	my @lines = split /\n/, slurp_file($file), -1;
	my (@fenced, $cur);
	for my $i (0 .. $#lines)
	{
		my $l = $lines[$i];
		if (!$cur)
		{
			$cur = { indent => length($1), lang => $2, line => $i + 2, text => '' }
			  if $l =~ /^( *)```(\S*)\s*$/;
		}
		elsif ($l =~ /^ *```\s*$/)
		{
			push @fenced, $cur;
			undef $cur;
		}
		else
		{
			$l =~ s/^ {0,$cur->{indent}}//;
			$cur->{text} .= "$l\n";
		}
	}
	die "$file: a ``` block is not closed" if $cur;

	my @sql;
	for my $i (0 .. $#fenced)
	{
		my $b = $fenced[$i];
		$b->{file} = $file;
		if ($b->{lang} eq 'sql')
		{
			push @sql, $b;
		}
		elsif ($b->{lang} eq 'text')
		{
			die "$file:$b->{line}: a ```text block (an output) must follow a ```sql block"
			  unless $i > 0 && $fenced[ $i - 1 ]{lang} eq 'sql';
			$fenced[ $i - 1 ]{expected} = $b->{text};
		}
	}
	return (\@sql, \@fenced);
}

# psql output without trailing blanks on each line and at the end
sub normalized
{
	my ($s) = @_;
	$s =~ s/[ \t]+$//mg;
	$s =~ s/\s+\z//;
	return $s;
}

sub is_query
{
	my ($sql) = @_;
	return $sql !~ /\b(INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|GRANT|REVOKE|BEGIN|COMMIT|
		notif_enqueue|notif_retry|notif_cancel|notif_dlr|pg_reload_conf)\b/xi;
}

# run SQL with psql as a reader would; returns (exit code, stdout, stderr)
sub psql_run
{
	my ($sql, $read_only) = @_;
	local $ENV{PGOPTIONS} = $read_only ? '-c default_transaction_read_only=on' : '';
	my ($out, $err) = ('', '');
	IPC::Run::run(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-f', '-' ],
		'<', \$sql, '>', \$out, '2>', \$err);
	return ($? >> 8, $out, $err);
}

# Run one block; a test per block, two when it shows an output.
sub run_block
{
	my ($b) = @_;
	my $where = "$b->{file}:$b->{line}";
	(my $first = $b->{text}) =~ s/\n.*//s;
	my $poll = defined $b->{expected} && is_query($b->{text});
	my $deadline = time + 60;
	my ($rc, $out, $err);
	while (1)
	{
		($rc, $out, $err) = psql_run($b->{text}, $poll);
		last if $rc != 0 || !$poll || normalized($out) eq normalized($b->{expected}) || time > $deadline;
		usleep(200_000);
	}
	if ($rc != 0)
	{
		# psql:<stdin>:N: names the line within the block
		$err =~ s/psql:<stdin>:(\d+):/"$b->{file}:" . ($b->{line} + $1 - 1) . ":"/ge;
		fail("$where runs: $first");
		diag($err);
		stop_here("$where failed; the blocks after it depend on it");
	}
	pass("$where runs: $first");
	is(normalized($out), normalized($b->{expected}), "$where prints what the doc shows")
	  if defined $b->{expected};
}

# ---------------------------------------------------------------- helpers

# the blocks after a failed one depend on it: end this file here (failed)
sub stop_here
{
	diag($_[0]);
	done_testing();
	exit 1;
}

sub q1 { return $node->safe_psql('postgres', $_[0]); }

sub wait_settled
{
	my ($what) = @_;
	ok( wait_until($node,
			"SELECT count(*) FROM notif_job WHERE status IN ('queued', 'sending') OR claimed_by IS NOT NULL",
			'0', $what),
		$what);
}

# point the documented example URL at the simulator (the host only: the
# path the reader wrote stays, and the simulator records it)
sub point_at_sim
{
	my ($base) = @_;
	q1( "UPDATE notif_provider SET url = replace(url, 'https://sms.example.com', '$base')"
		  . " WHERE url LIKE 'https://sms.example.com/%'");
	is(q1("SELECT count(*) FROM notif_provider WHERE url LIKE 'https://sms.example.com/%'"),
		'0', "the example provider now points at the simulator ($base)");
}

# the simulator again, on the port the providers point at
sub restart_sim
{
	my ($port) = @_;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		open(STDOUT, '>', "$PostgreSQL::Test::Utils::tmp_check/sim_restarted_$port.log");
		open(STDERR, '>&', \*STDOUT);
		exec('test/sim/provider_sim', '--port', $port) or die "exec: $!";
	}
	push @my_sims, $pid;
	my $s = { port => $port, pid => $pid };
	for (1 .. 100)
	{
		return $s if (eval { sim_get($s, '/health') } // '') =~ /ok/;
		usleep(50_000);
	}
	die "provider_sim did not start again on port $port";
}

# A day of traffic for notif_stats: for each type, hand-made finished jobs,
# attempts and delivery reports (as sql/stats.sql makes them) so that with
# the jobs the snippets sent the type has exactly 20,000 attempts, 100 of
# them ambiguous (p = 0.005), and half of those delivered anyway (q = 0.5).
sub make_history
{
	for my $t (['giao_dich', 0], ['otp', 0], ['promo', 1])
	{
		my ($kind, $amo) = @$t;
		my ($attempts, $ambiguous) = split /\|/, q1(qq{
			SELECT count(*), count(*) FILTER (WHERE a.outcome = 'unknown')
			  FROM notif_calls a JOIN notif_job j ON j.id = a.job_id WHERE j.kind = '$kind'});
		is($ambiguous, '0', "$kind: no ambiguous call so far ($attempts attempts)");
		my $amb_tries = $amo ? 1 : 2;    # at_least_once: unknown, then accepted
		my $n = 20000 - $attempts - 100 * ($amb_tries - 1);
		my $amo_sql = $amo ? 'true' : 'false';
		q1(qq{
			WITH j AS (
			    INSERT INTO notif_job (user_id, kind, order_id, payload, status, tries,
			                           created_at, next_at, outcome)
			    SELECT g, '$kind', 'history-' || g, '{}', 'sent', CASE WHEN g <= 100 THEN $amb_tries ELSE 1 END,
			           now() - interval '2 hours', now() - interval '2 hours',
			           CASE WHEN g <= 100 AND $amo_sql THEN 'unknown' ELSE 'accepted' END
			      FROM generate_series(1, $n) g
			    RETURNING id, user_id AS g
			), a AS (
			    INSERT INTO notif_attempt (job_id, try, started_at, ended_at, outcome)
			    SELECT j.id, t, now() - interval '2 hours', now() - interval '2 hours',
			           CASE WHEN j.g <= 100 AND t = 1 THEN 'unknown' ELSE 'accepted' END
			      FROM j, generate_series(1, CASE WHEN j.g <= 100 THEN $amb_tries ELSE 1 END) t
			)
			INSERT INTO notif_dlr (key, job_id, delivered, reported_at)
			SELECT notif_key('$kind', j.g, 'history-' || j.g), j.id,
			       NOT ($amo_sql AND j.g > 50 AND j.g <= 100), now() - interval '2 hours'
			  FROM j, generate_series(1, CASE WHEN NOT $amo_sql AND j.g <= 50 THEN 2 ELSE 1 END) r});
	}
	is(q1(q{SELECT string_agg(kind || ' ' || attempts || ' ' || ambiguous_attempts || ' ' || q_sample, ', ')
	          FROM notif_stats}),
		'giao_dich 20000 100 100, otp 20000 100 100, promo 20000 100 100',
		'the day of traffic: 20,000 attempts per type, 100 ambiguous, all judged');
}

sub drop_history
{
	q1(q{DELETE FROM notif_attempt WHERE job_id IN (SELECT id FROM notif_job WHERE order_id LIKE 'history-%');
	     DELETE FROM notif_job WHERE order_id LIKE 'history-%'});
}

# ---------------------------------------------------------------- hooks

# [file, regex that names one block, 'before' | 'after', code]
my @hooks = (
	# README.md
	[ 'README.md', qr/SET url = 'https:\/\/sms\.example\.com\/send'/, 'after', sub { point_at_sim($sim_base) } ],
	[ 'README.md', qr/notif_enqueue\(812, 'otp', 'login-7f3a'/, 'after', sub {
			wait_settled('the README\'s OTP reached a final status');
			is(job_row($node, q1("SELECT id FROM notif_job WHERE order_id = 'login-7f3a'")),
				'sent accepted 1 200', 'the README\'s OTP was sent');
			my @keys = keys %{ ledger($sim) };
			is(scalar(@keys), 1, 'one request reached the simulator');
			like(last_request($sim, $keys[0])->{body}, qr/Your code: 428913/, 'with the README\'s payload');
		} ],

	# doc/guide.md, 1. Install
	[ 'doc/guide.md', qr/SET url = 'https:\/\/sms\.example\.com\/v1\/messages'/, 'after', sub { point_at_sim($sim_base) } ],
	# 4. push first: the push provider at the simulator too
	[ 'doc/guide.md', qr/^INSERT INTO notif_provider \(name, url, format, headers, idempotency_header\)\nVALUES \('push'/, 'after', sub {
			q1("UPDATE notif_provider SET url = replace(url, 'https://push.example.com', '$sim_base') WHERE name = 'push'");
		} ],
	[ 'doc/guide.md', qr/^SELECT kind, status, outcome, payload->>'text' AS text FROM notif_job/, 'after', sub {
			is(join(',', map { ledger_key($sim, $_) } qw(otp_push:812:login-9d10 otp:812:login-9d10)),
				'1 1 1,1 1 1', 'the push and, 5 s later, its SMS reached the provider once each');
			is(last_request($sim, 'otp:812:login-9d10')->{body},
				'{"to": "+84901234567", "text": "Your code: 551234", "client_ref": "otp:812:login-9d10"}',
				'the SMS carried the fallback member (and, as every OTP, its key as client_ref)');
		} ],
	# 2. Enqueue
	[ 'doc/guide.md', qr/^BEGIN;\nINSERT INTO payment VALUES \(55001/, 'after', sub {
			is(q1(q{BEGIN; SELECT notif_enqueue(812, 'giao_dich', 55002, '{}') IS NOT NULL; ROLLBACK;
			        SELECT count(*) FROM notif_job WHERE order_id = '55002'}),
				"t\n0", 'a job enqueued in a transaction that rolls back never existed');
		} ],
	[ 'doc/guide.md', qr/sent twice by a retrying client/, 'after', sub {
			wait_settled('the payment alert reached a final status');
			is(ledger_key($sim, 'giao_dich:812:55001'), '1 1 1',
				'the alert reached the provider once, however often it was enqueued');
			# kept for section 6's request, before the outage replaces the simulator
			$request_55001 = last_request($sim, 'giao_dich:812:55001');
			is($request_55001->{body},
				'{"to": "+84901234567", "text": "GD 55001: -500.000 VND"}', 'with the first payload');
		} ],

	# 3. Choosing delivery: the day of traffic behind the notif_stats output
	[ 'doc/guide.md', qr/cost_per_million_at_most_once  AS cost_amo/, 'before', sub {
			wait_settled('the jobs so far reached a final status');
			make_history();
		} ],
	[ 'doc/guide.md', qr/cost_per_million_at_most_once  AS cost_amo/, 'after', \&drop_history ],
	[ 'doc/guide.md', qr/SELECT notif_dlr\('giao_dich:812:55001', true\)/, 'after', sub {
			is(q1(q{SELECT count(*) FROM notif_dlr d JOIN notif_job j ON j.id = d.job_id
			         WHERE j.kind = 'giao_dich' AND j.order_id = '55001' AND d.delivered}),
				'1', 'the report is recorded against its job');
			my ($rc, $out, $err) = $node->psql('postgres',
				q{SET ROLE dlr_webhook; SELECT notif_dlr('no:such:key', true) IS NULL});
			is($out, 't', 'the webhook role records a stray report, which matches no job, without an error');
		} ],

	# 5. Lanes: the burst and the OTP
	[ 'doc/guide.md', qr/notif_enqueue\(812, 'otp', 'login-7f3a'/, 'after', sub {
			wait_settled('the burst and the OTP reached a final status');
			my $l = ledger($sim);
			my @promo = grep { /^promo:\d+:black-friday-2026$/ } keys %$l;
			is(scalar(@promo), 1001, 'each opted-in customer\'s promotion reached the provider');
			is(scalar(grep { $l->{$_}{received} == 1 && $l->{$_}{delivered} == 1 } @promo), 1001, 'each exactly once');
			is(last_request($sim, 'otp:812:login-7f3a')->{body},
				'{"to": "+84901234567", "text": "Your code: 428913", "client_ref": "otp:812:login-7f3a"}',
				'ref_field: the OTP\'s body carries its key as client_ref');
		} ],

	# 8. Operating: the provider goes down, and comes back
	[ 'doc/guide.md', qr/^SELECT notif_enqueue\(812, 'otp', 'login-8c21'/, 'before', sub {
			NotifTest::stop_sim($sim);
			note('the provider is down: the simulator is stopped');
		} ],
	[ 'doc/guide.md', qr/^SELECT kind, status, outcome, tries FROM notif_job/, 'before', sub {
			# the prose's claim: the jobs wait, none failed, while the breaker is open
			is(q1(q{SELECT count(*) FROM notif_job WHERE status IN ('failed', 'expired')
			         AND order_id IN ('login-8c21', '55004', 'flash-sale-42')}),
				'0', 'while the breaker is open no job of the outage failed');
			$sim = restart_sim($sim->{port});
			note('the provider is back: the simulator runs again on the same port');
		} ],
	[ 'doc/guide.md', qr/^SELECT kind, status, outcome, tries FROM notif_job/, 'after', sub {
			wait_settled('the jobs that waited reached a final status');
			is(join(',', map { ledger_key($sim, $_) } qw(otp:812:login-8c21 giao_dich:812:55004 promo:812:flash-sale-42)),
				'1 1 1,1 1 1,1 1 1', 'the three jobs that waited reached the provider once each');
			is(ledger_key($sim, 'giao_dich:812:statement-2026-11'), '0 0 0', 'the cancelled job did not');
			is(q1(q{SELECT state FROM notif_provider_health WHERE name = 'default'}), 'closed',
				'the breaker closed');
		} ],

	# (6. Idempotency keys: the request the guide shows is checked at the
	# end, against the one kept when the payment alert was sent)
);

# ---------------------------------------------------------------- run

$node->safe_psql('postgres', 'CREATE ROLE app LOGIN; CREATE ROLE dlr_webhook LOGIN; CREATE ROLE ops LOGIN');

my ($readme, undef) = sql_blocks('README.md');
my ($guide, $guide_fenced) = sql_blocks('doc/guide.md');
cmp_ok(scalar(@$readme), '>=', 1, 'README.md has SQL blocks: ' . scalar(@$readme));
cmp_ok(scalar(@$guide), '>=', 20, 'doc/guide.md has SQL blocks: ' . scalar(@$guide));

# every hook names exactly one block
my %hooks_of;
for my $h (@hooks)
{
	my ($file, $re, $when, $code) = @$h;
	my @hit = grep { $_->{text} =~ /$re/m } ($file eq 'README.md' ? @$readme : @$guide);
	is(scalar(@hit), 1, "hook $when $file $re names one block") or stop_here('a hook lost its block');
	push @{ $hooks_of{"$hit[0]{file}:$hit[0]{line}"}{$when} }, $code;
}

# the README first, in the server's database; then it starts again from a
# database without the extension, as the guide does
sub run_file
{
	my ($blocks) = @_;
	for my $b (@$blocks)
	{
		my $h = $hooks_of{"$b->{file}:$b->{line}"} // {};
		$_->() for @{ $h->{before} // [] };
		run_block($b);
		$_->() for @{ $h->{after} // [] };
	}
}

$node->safe_psql('postgres', 'DROP EXTENSION notif_deliver');
run_file($readme);
wait_settled('the README\'s jobs are done');
$node->safe_psql('postgres', 'DROP EXTENSION notif_deliver');

run_file($guide);

# the GRANT to app: enough to enqueue, and no privilege on the tables
# (checked last: the enqueue takes a job id, and the guide shows ids)
my ($rc, $out, $err) = $node->psql('postgres', q{
	SET ROLE app;
	BEGIN;
	SELECT notif_enqueue(1, 'otp', 'grant-check') IS NOT NULL;
	ROLLBACK;
	SELECT count(*) FROM notif_job});
is($out, 't', 'the role app can enqueue');
like($err, qr/permission denied for table notif_job/, 'and has no privilege on the tables');

# 6. the request the guide shows (```http) against the one the simulator got
my ($http) = grep { $_->{lang} eq 'http' } @$guide_fenced;
ok($http, 'the guide shows a request');
my ($head, $body) = split /\n\n/, $http->{text}, 2;
my ($request_line, @shown_headers) = split /\n/, $head;
my ($method, $path) = split / /, $request_line;
is("$request_55001->{method} $request_55001->{target}", "$method $path",
	"$http->{file}:$http->{line}: the request line");
for my $h (@shown_headers)
{
	ok((grep { $_ eq $h } @{ $request_55001->{headers} }), "$http->{file}:$http->{line}: header $h");
}
is($request_55001->{body}, normalized($body), "$http->{file}:$http->{line}: the body");

done_testing();
