# NotifTest.pm: what the TAP tests of notif_deliver share.  A node with the
# extension preloaded and created, the provider simulator
# (test/sim/provider_sim) on a free loopback port, its ledger, and waits.
package NotifTest;

use strict;
use warnings;
use Exporter 'import';
use IO::Socket::INET;
use Time::HiRes qw(usleep time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(new_node configure_node start_sim start_server sim_get ledger ledger_key stats wait_until headers_of
  job_row set_provider last_request doc_sql wait_config_read table_rows wait_until_ledger
  active_mismatches schema_version sql sender_pid enqueue job_resolution fault_provider);

# simulators (and other servers) started by this test, stopped when it ends
my @sims;
END { local $?; kill "KILL", $_->{pid} for @sims; waitpid($_->{pid}, 0) for @sims; }

# A started node with notif_deliver preloaded and created in "postgres".
sub new_node
{
	my ($name, %conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	configure_node($node, %conf);
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION notif_deliver');
	return $node;
}

# The settings of a test node (notif_deliver preloaded for "postgres"),
# and the given ones, appended to its postgresql.conf.
sub configure_node
{
	my ($node, %conf) = @_;
	my %settings = (
		shared_preload_libraries => "'notif_deliver'",
		'notif_deliver.database' => "'postgres'",
		'notif_deliver.poll_interval' => "'1s'",
		restart_after_crash => 'on',
		max_worker_processes => '20',
		%conf);
	$node->append_conf('postgresql.conf',
		join("\n", map { "$_ = $settings{$_}" } sort keys %settings) . "\n");
}

# The simulator, started on a free port (or on { port => N }, a first
# argument: a restart where one was stopped); returns { port, pid, url }.
sub start_sim
{
	my (@args) = @_;
	my $bin = 'test/sim/provider_sim';
	die "$bin not built (make -C test/sim)" unless -x $bin;
	my $port = ref $args[0] eq 'HASH' ? (shift @args)->{port} : PostgreSQL::Test::Cluster::get_free_port();
	my $sim = start_server('sim', $port, $bin, '--port', $port, @args);
	$sim->{url} = "http://127.0.0.1:$port/send";
	return $sim;
}

# A test server on $port (the simulator, or another that answers GET
# /health with "ok"), its output in tmp_check/NAME_PORT.log, killed when
# the test ends; returns { port, pid } once it answers.
sub start_server
{
	my ($name, $port, @cmd) = @_;
	my $log = "$PostgreSQL::Test::Utils::tmp_check/${name}_$port.log";
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		open(STDOUT, '>', $log);
		open(STDERR, '>&', \*STDOUT);
		exec(@cmd) or die "exec $cmd[0]: $!";
	}
	my $server = { port => $port, pid => $pid };
	push @sims, $server;
	for (1 .. 100)
	{
		my $r = eval { sim_get($server, '/health') };
		return $server if defined $r && $r =~ /ok/;
		usleep(50_000);
	}
	die "$cmd[0] did not start on port $port: " . slurp_file($log);
}

# Stop a simulator (SIGKILL, as a provider that crashes), and wait until no
# connection to its port is still ESTABLISHED on the client's side: each
# client has received its FIN, so a sender that would reuse a kept-alive
# connection finds it dead and opens a new one (refused, never sent).  The
# kernel may process that FIN a moment after the process is gone (on a
# busy machine, later still): a call reusing the connection before it did
# would write its request to the dead peer, which at_most_once must count
# as ambiguous.
sub stop_sim
{
	my ($sim) = @_;
	kill 'KILL', $sim->{pid};
	waitpid($sim->{pid}, 0);
	my $port = sprintf('%04X', $sim->{port});
	for (1 .. 200)
	{
		my $open = 0;
		for my $f ('/proc/net/tcp', '/proc/net/tcp6')
		{
			open(my $fh, '<', $f) or next;
			# "sl local_address rem_address st ...": 01 is ESTABLISHED
			$open += grep { (split ' ')[2] =~ /:$port$/ && (split ' ')[3] eq '01' } <$fh>;
		}
		return if $open == 0;
		usleep(50_000);
	}
	diag("connections to port $sim->{port} still established 10 s after its simulator stopped");
}

# GET a control endpoint of the simulator; returns the body.
sub sim_get
{
	my ($sim, $path) = @_;
	my $s = IO::Socket::INET->new(
		PeerAddr => '127.0.0.1',
		PeerPort => $sim->{port},
		Proto => 'tcp',
		Timeout => 5) or die "connect to simulator: $!";
	print $s "GET $path HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
	local $/;
	my $resp = <$s>;
	close $s;
	die "no answer from simulator for $path" unless defined $resp;
	my ($head, $body) = split /\r\n\r\n/, $resp, 2;
	return $body;
}

# { key => { received, delivered, bodies } }
sub ledger
{
	my ($sim) = @_;
	my %l;
	for my $line (split /\n/, sim_get($sim, '/ledger'))
	{
		my ($key, $received, $delivered, $bodies) = split / /, $line;
		next unless defined $bodies;
		$l{$key} = { received => $received, delivered => $delivered, bodies => $bodies };
	}
	return \%l;
}

# "received delivered bodies" of one key, or "0 0 0"
sub ledger_key
{
	my ($sim, $key) = @_;
	my $e = ledger($sim)->{$key};
	return $e ? "$e->{received} $e->{delivered} $e->{bodies}" : '0 0 0';
}

# The last request the simulator got for a key:
# { method, target, headers => [ "Name: value", ... ], body }
sub last_request
{
	my ($sim, $key) = @_;
	(my $enc = $key) =~ s/([^A-Za-z0-9._~-])/sprintf('%%%02X', ord($1))/ge;
	my $text = sim_get($sim, "/last?key=$enc");
	my ($meta, $body) = split /\n\n/, $text, 2;
	my %r = (headers => [], body => $body);
	for my $line (split /\n/, $meta)
	{
		my ($name, $value) = split / /, $line, 2;
		if ($name eq 'header') { push @{ $r{headers} }, $value; }
		else { $r{$name} = $value; }
	}
	return \%r;
}

# The headers of a last_request, { name => value } (the last of a name).
sub headers_of
{
	my ($r) = @_;
	my %h;
	for (@{ $r->{headers} })
	{
		my ($n, $v) = split /: ?/, $_, 2;
		$h{$n} = $v;
	}
	return \%h;
}

sub stats
{
	my ($sim) = @_;
	my %s = map { split / /, $_, 2 } split /\n/, sim_get($sim, '/stats');
	return \%s;
}

# The version CREATE EXTENSION notif_deliver installs (the control file's
# default_version), read from the tree the tests run in.
sub schema_version
{
	open(my $fh, '<', 'notif_deliver.control') or die "notif_deliver.control: $!";
	my ($v) = map { /^default_version\s*=\s*'([^']+)'/ ? $1 : () } <$fh>;
	close $fh;
	return $v // die 'no default_version in notif_deliver.control';
}

# Poll a query until it returns the expected value (up to
# PostgreSQL::Test::Utils::timeout_default, 180 s unless PG_TEST_TIMEOUT_DEFAULT says otherwise).
#
# poll_query_until hands each psql its query on stdin; a psql that exits
# before reading it (a server restarting after a crash refuses the
# connection) makes IPC::Run's write fail with EPIPE, and it dies.  That is
# one more "not yet": polled again, while the timeout has not passed since
# the first poll began (a poll begun just before may take its own whole
# timeout: at most twice it in all).
sub wait_until
{
	my ($node, $sql, $expected, $what) = @_;
	$expected = 't' unless defined $expected;
	my $give_up = time + $PostgreSQL::Test::Utils::timeout_default;
	my $ok;
	while (1)
	{
		$ok = eval { $node->poll_query_until('postgres', $sql, $expected) };
		last if defined $ok;
		die $@ unless $@ =~ /Broken pipe/;
		$ok = 0, last if time >= $give_up;
		usleep(100_000);
	}
	diag("timed out waiting for: " . ($what // $sql)) unless $ok;
	return $ok;
}

# Wait until the sender of a lane has read the configuration as last
# committed (notif_config_applied), so that its next claim uses it.
sub wait_config_read
{
	my ($node, $lane, $schema) = @_;
	$schema //= 'public';
	return wait_until($node,
		"SELECT $schema.notif_config_applied('$lane')",
		't', "the sender of lane $lane to read the new configuration");
}

# "status outcome tries http_status" of a job
sub job_row
{
	my ($node, $id) = @_;
	return $node->safe_psql('postgres',
		"SELECT status || ' ' || coalesce(outcome, '-') || ' ' || tries || ' ' || coalesce(http_status::text, '-') FROM notif_job WHERE id = $id"
	);
}

# "status outcome tries resolved_by" of a job ("-" for a null)
sub job_resolution
{
	my ($node, $id) = @_;
	return $node->safe_psql('postgres',
		"SELECT status || ' ' || coalesce(outcome, '-') || ' ' || tries || ' ' || coalesce(resolved_by, '-') FROM notif_job WHERE id = $id"
	);
}

# A query on the node's "postgres" database; its output.  A string Perl
# holds as characters (a literal under `use utf8`) is sent as UTF-8.
sub sql
{
	my ($node, $query) = @_;
	utf8::encode($query) if utf8::is_utf8($query);
	return $node->safe_psql('postgres', $query);
}

# The pid of the sender of LANE (of the one sender, when no lane is given),
# once there is exactly one.
sub sender_pid
{
	my ($node, $lane) = @_;
	my $which = defined $lane
	  ? "application_name = 'notif_deliver sender $lane'"
	  : "backend_type = 'notif_deliver sender'";
	wait_until($node, "SELECT count(*) = 1 FROM pg_stat_activity WHERE $which");
	my $pid = $node->safe_psql('postgres', "SELECT pid FROM pg_stat_activity WHERE $which");
	die "no sender " . ($lane // '') . ": '$pid'" unless $pid =~ /^\d+$/;
	return $pid;
}

# Enqueue one SMS of KIND for client CLIENT (to +849 and the client number
# on 8 digits), text TEXT ("hello" unless given); its job id.
sub enqueue
{
	my ($node, $client, $kind, $order, $text) = @_;
	$text //= 'hello';
	return $node->safe_psql('postgres',
		sprintf(q{SELECT notif_enqueue(%d, '%s', '%s', '{"to":"+849%08d","text":"%s"}')},
			$client, $kind, $order, $client, $text));
}

# A provider at URL whose calls the simulator fails once with FAULT
# (X-Sim-Fault, X-Sim-Fail-First: 1; test/sim/README.md), with an
# idempotency key and a 600 ms timeout; COLS as set_provider's, and
# extra_headers => { name => value } for more headers.
sub fault_provider
{
	my ($node, $name, $url, $fault, %cols) = @_;
	my $extra = delete $cols{extra_headers} // {};
	my $headers = join(', ', qq("X-Sim-Fault": "$fault"), q("X-Sim-Fail-First": "1"),
		map { qq("$_": "$extra->{$_}") } sort keys %$extra);
	set_provider($node, $name, $url,
		headers => "'{$headers}'",
		idempotency_header => q('Idempotency-Key'),
		timeout => q('600 ms'),
		%cols);
}

# Point a provider row (created if missing) at a URL, with extra settings.
sub set_provider
{
	my ($node, $name, $url, %cols) = @_;
	# no circuit breaker unless asked for: most tests count the tries a
	# failing provider takes (041_circuit_breaker.pl tests the breaker);
	# an extension older than 1.4 has none
	$cols{breaker_threshold} //= 'NULL'
	  if $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_attribute WHERE attrelid = 'notif_provider'::regclass AND attname = 'breaker_threshold'"
	  ) eq '1';
	my @sets = map { "$_ = $cols{$_}" } sort keys %cols;
	$node->safe_psql('postgres',
		"INSERT INTO notif_provider (name) VALUES ('$name') ON CONFLICT DO NOTHING;"
		  . "UPDATE notif_provider SET url = '$url'"
		  . join('', map { ", $_" } @sets)
		  . " WHERE name = '$name'");
}

# Poll the simulator's ledger until $cond->(ledger) is true (up to 60 s).
sub wait_until_ledger
{
	my ($sim, $cond) = @_;
	for (1 .. 600)
	{
		return 1 if $cond->(ledger($sim));
		usleep(100_000);
	}
	return 0;
}

# How many jobs notif_active gets wrong: a queued or held job it lacks, a
# row for any other, or a row whose kind, next_at or holder differ from
# notif_job's.  0 when it matches.
sub active_mismatches
{
	my ($node, $db) = @_;
	return $node->safe_psql($db // 'postgres', q{
		SELECT count(*) FROM notif_job j FULL JOIN notif_active a ON a.job_id = j.id
		 WHERE (j.status = 'queued' OR j.claimed_by IS NOT NULL) IS DISTINCT FROM (a.job_id IS NOT NULL)
		    OR (a.job_id IS NOT NULL AND (a.kind, a.next_at, a.claimed_by) IS DISTINCT FROM (j.kind, j.next_at, j.claimed_by))});
}

# Every row of each table of the extension that holds data, as text, in
# one order, per table: what a dump and a restore, or pg_upgrade, must keep
# (notif_active, rebuilt from notif_job, is compared with it instead).
sub table_rows
{
	my ($node, $db) = @_;
	my %s;
	for my $t (qw(notif_provider notif_type notif_lane notif_job notif_attempt notif_dlr notif_shard
		notif_unregistered_token))
	{
		$s{$t} = $node->safe_psql($db // 'postgres',
			"SELECT count(*) || E'\\n' || coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '') FROM $t t");
	}
	return %s;
}

# The SQL block of a documentation file that the line before its ```sql
# fence marks with <!-- test: NAME -->, as bytes (for safe_psql).  Tests run
# the documented statements themselves, so the doc cannot drift.
sub doc_sql
{
	my ($file, $name) = @_;
	my $text = PostgreSQL::Test::Utils::slurp_file($file);
	$text =~ /^[ \t]*<!-- test: \Q$name\E -->\n[ \t]*```sql\n(.*?)^[ \t]*```/ms
	  or die "no SQL block marked <!-- test: $name --> in $file";
	return $1;
}

1;
