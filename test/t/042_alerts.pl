# 042_alerts.pl: the alerts as code, doc/prometheus_rules.yaml, and the
# exporter file whose metrics they read, doc/postgres_exporter.yaml.
#
# 1. promtool (Debian's prometheus package) checks the rules file and runs
#    its unit tests, doc/prometheus_rules_test.yaml; on copies with a rule
#    broken, the check (a syntax error) and the tests (a threshold changed)
#    fail.
# 2. Every alert has a severity, a summary, a description and a unit test,
#    and doc/monitoring.md's table shows its expression, severity and `for`;
#    every metric a rule reads is one the exporter file makes, and every
#    label a rule matches on is one of that metric's (copies with a metric
#    misspelt, or a label, fail).
# 3. Debian's prometheus-postgres-exporter, started on a free loopback port
#    with --extend.query-path=doc/postgres_exporter.yaml and DATA_SOURCE_NAME
#    for a pg_monitor role, scrapes a node with the extension: every metric
#    of the file, so every metric the rules read, is in /metrics with its
#    labels, and no query of the file failed.
#
use strict;
use warnings;
use lib 'test/lib/perl';
use CPAN::Meta::YAML;
use Cwd qw(getcwd);
use File::Temp qw(tempdir);
use IO::Socket::INET;
use IPC::Run;
use POSIX ();
use Time::HiRes qw(usleep);
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $rules_file = 'doc/prometheus_rules.yaml';
my $tests_file = 'doc/prometheus_rules_test.yaml';
my $queries_file = 'doc/postgres_exporter.yaml';
my $exporter = '/usr/bin/prometheus-postgres-exporter';
my $promtool = '/usr/bin/promtool';
my $tmp = tempdir(DIR => $PostgreSQL::Test::Utils::tmp_check, CLEANUP => 1);

sub spew { my ($f, $s) = @_; open my $fh, '>', $f or die "$f: $!"; print $fh $s; close $fh; }

# (exit status, output) of a command
sub run_cmd
{
	my (@cmd) = @_;
	my ($stdout, $stderr);
	IPC::Run::run(\@cmd, '>', \$stdout, '2>', \$stderr);
	return ($? >> 8, ($stdout // '') . ($stderr // ''));
}

# A copy of the rules and their tests in a new folder, with the rules
# text changed by $edit (a sub on $_); returns the folder.
sub broken_copy
{
	my ($edit, $tests) = @_;
	my $dir = tempdir(DIR => $tmp);
	local $_ = slurp_file($rules_file);
	my $before = $_;
	$edit->();
	die 'the edit changed nothing' if $_ eq $before;
	spew("$dir/prometheus_rules.yaml", $_);
	spew("$dir/prometheus_rules_test.yaml", $tests // slurp_file($tests_file));
	return $dir;
}

# Without them nothing here can run: fail, and stop this test only
for ([ $promtool, 'prometheus' ], [ $exporter, 'prometheus-postgres-exporter' ])
{
	next if ok(-x $_->[0], "$_->[0] is installed (test/deps.sh: $_->[1])");
	done_testing();
	exit 1;
}

# --- 1. promtool: the check and the unit tests, and a broken rule fails them ---
my ($rc, $out) = run_cmd($promtool, 'check', 'rules', $rules_file);
is($rc, 0, 'promtool check rules passes') or diag($out);
($rc, $out) = run_cmd($promtool, 'test', 'rules', $tests_file);
is($rc, 0, 'promtool test rules passes: every alert fires on its series and not on the others') or diag($out);

my $dir = broken_copy(sub { s/expr: notif_workers_backing_off == 1/expr: notif_workers_backing_off == = 1/ or die });
($rc, $out) = run_cmd($promtool, 'check', 'rules', "$dir/prometheus_rules.yaml");
isnt($rc, 0, 'promtool check rules fails on a rule with a syntax error');
like($out, qr/NotifSenderBackingOff|notif_workers_backing_off|parse error/, 'and names it');

# the unit tests of NotifBacklog alone (the whole file takes seconds)
my ($head, $tests) = split /^tests:\n/m, slurp_file($tests_file);
my @backlog_tests = grep { /^  - name: NotifBacklog / } split /(?=^  - name: )/m, $tests;
is(scalar(@backlog_tests), 1, 'the unit tests have a test of NotifBacklog');
$dir = broken_copy(sub { s/(notif_stats_oldest_queued_age_seconds\{delivery="at_least_once"\}) > 5$/$1 > 50/m or die },
	"${head}tests:\n@backlog_tests");
($rc, $out) = run_cmd($promtool, 'test', 'rules', "$dir/prometheus_rules_test.yaml");
isnt($rc, 0, 'promtool test rules fails when the OTP backlog threshold is 50 s instead of 5 s');
like($out, qr/alertname: NotifBacklog/, 'and names the alert');

# --- 2. the rules' form, and the metrics and labels they read ---

# { metric => { labels => { name => 1 }, query => query name } } of the exporter file
sub exporter_metrics
{
	my ($yaml) = @_;
	my %m;
	while (my ($query, $def) = each %$yaml)
	{
		my (@labels, @values);
		for my $col (@{ $def->{metrics} })
		{
			my ($name, $spec) = %$col;
			if ($spec->{usage} eq 'LABEL') { push @labels, $name; }
			elsif ($spec->{usage} =~ /^(GAUGE|COUNTER)$/) { push @values, $name; }
			else { die "$queries_file: $query.$name: usage $spec->{usage} is not handled here"; }
		}
		$m{"${query}_$_"} = { labels => { map { $_ => 1 } @labels }, query => $query } for @values;
	}
	return \%m;
}

# The metric names and the label names matched on of a PromQL expression:
# ({ metric => { label => 1 } }, [ other identifiers ]).  Recording rules'
# names count as metrics.
sub expr_metrics
{
	my ($expr) = @_;
	my %used;
	$expr =~ s/"(?:[^"\\]|\\.)*"/""/g;                                                # strings
	$expr =~ s/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)//g;    # grouping labels
	$expr =~ s/\[[^\]]*\]//g;                                                         # ranges
	$expr =~ s/\boffset\s+\w+//g;
	while ($expr =~ /([A-Za-z_:][\w:]*)\s*(\{[^}]*\})?/g)
	{
		my ($id, $matchers) = ($1, $2 // '');
		next if substr($expr, pos($expr)) =~ /^\s*\(/ && !$matchers;               # a function
		next if $id =~ /^(?:and|or|unless|bool|inf|nan)$/i;
		$used{$id}{$_} = 1 for $matchers =~ /([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)/g;
		$used{$id} //= {};
	}
	return \%used;
}

# What is wrong with a rules file read against the exporter file's metrics:
# a list of complaints, empty when nothing is.
sub rules_problems
{
	my ($text, $metrics) = @_;
	my $yaml = CPAN::Meta::YAML->read_string($text) or return ('does not parse: ' . CPAN::Meta::YAML->errstr);
	my @rules = map { @{ $_->{rules} } } @{ $yaml->[0]{groups} };
	my %recorded = map { $_->{record} => 1 } grep { $_->{record} } @rules;
	my @problems;
	for my $r (@rules)
	{
		my $name = $r->{alert} // $r->{record};
		if ($r->{alert})
		{
			push @problems, "$name: severity is not critical, warning or info"
			  unless ($r->{labels}{severity} // '') =~ /^(critical|warning|info)$/;
			push @problems, "$name: no $_" for grep { !($r->{annotations}{$_} // '') } qw(summary description);
		}
		my $used = expr_metrics($r->{expr});
		for my $m (sort keys %$used)
		{
			next if $recorded{$m};
			if (!$metrics->{$m}) { push @problems, "$name: $m is not a metric of $queries_file"; next; }
			push @problems, "$name: $m has no label $_" for grep { !$metrics->{$m}{labels}{$_} } sort keys %{ $used->{$m} };
		}
	}
	return @problems;
}

my $queries = CPAN::Meta::YAML->read_string(slurp_file($queries_file)) or die CPAN::Meta::YAML->errstr;
my $metrics = exporter_metrics($queries->[0]);
my $rules = CPAN::Meta::YAML->read_string(slurp_file($rules_file)) or die CPAN::Meta::YAML->errstr;
my @rules = map { @{ $_->{rules} } } @{ $rules->[0]{groups} };
my %alerts = map { $_->{alert} => 1 } grep { $_->{alert} } @rules;
my %recorded = map { $_->{record} => 1 } grep { $_->{record} } @rules;
my %read;    # metric => alerts that read it
for my $r (@rules)
{
	for my $m (keys %{ expr_metrics($r->{expr}) })
	{
		$read{$m}{ $r->{alert} // $r->{record} } = 1 unless $recorded{$m};
	}
}
cmp_ok(scalar(keys %alerts), '>=', 9, 'the rules file has its alerts: ' . join(' ', sort keys %alerts));
is(join("\n", rules_problems(slurp_file($rules_file), $metrics)), '',
	'every alert has a severity, a summary and a description; every metric and label it reads is the exporter file\'s');
my %tested = map { $_ => 1 } slurp_file($tests_file) =~ /^\s+alertname: (\w+)$/mg;
is(join(' ', grep { !$tested{$_} } sort keys %alerts), '', 'every alert has a unit test');
# doc/monitoring.md's table of alerts shows each rule as it is
my $doc = slurp_file('doc/monitoring.md');
for my $r (grep { $_->{alert} } @rules)
{
	my $for = $r->{for} ? ' for ' . ($r->{for} =~ s/^(\d+)([smhd])$/$1 $2/r) : '';
	ok(index($doc, "| `$r->{alert}` ($r->{labels}{severity}) | `$r->{expr}`$for |") >= 0,
		"doc/monitoring.md's table shows $r->{alert} ($r->{labels}{severity}): $r->{expr}$for");
}
my $misspelt = slurp_file($rules_file) =~ s/notif_workers_backing_off == 1/notif_workers_backingoff == 1/r;
like(join("\n", rules_problems($misspelt, $metrics)), qr/notif_workers_backingoff is not a metric of/,
	'a rule that reads a metric the exporter does not make is found');
my $mislabelled = slurp_file($rules_file) =~ s/notif_workers_running\{role="sender"\}/notif_workers_running{kind="sender"}/r;
like(join("\n", rules_problems($mislabelled, $metrics)), qr/notif_workers_running has no label kind/,
	'and one that matches on a label the metric does not have');

# --- 3. Debian's exporter scrapes the file from a node with the extension ---
my $node = new_node('alerts');
$node->safe_psql('postgres', q{
	CREATE ROLE exporter LOGIN IN ROLE pg_monitor;
	INSERT INTO notif_type (code, delivery, max_tries, deadline) VALUES
	  ('otp', 'at_least_once', 3, '15 seconds'), ('promo', 'at_most_once', 3, '1 day')});
ok(wait_until($node, q{SELECT count(*) = 1 FROM notif_workers() WHERE role = 'sender' AND pid IS NOT NULL}),
	'the default lane has its sender');

# a provider that refuses every connection, its breaker open after one call
my $closed = PostgreSQL::Test::Cluster::get_free_port();
set_provider($node, 'down', "http://127.0.0.1:$closed/send", breaker_threshold => 1,
	breaker_cooldown => q('1 hour'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES ('promo_down', 'at_most_once', 3, 'down');
	SELECT notif_enqueue(1, 'promo_down', 'p1')});
ok(wait_until($node, q{SELECT state = 'open' FROM notif_provider_health WHERE name = 'down'}),
	'the breaker of a provider that refuses connections is open');

# GET a path of the exporter: (HTTP status, body), or () when nothing answers
sub http_get
{
	my ($port, $path) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 10)
	  or return ();
	print $s "GET $path HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
	local $/;
	my $resp = <$s>;
	close $s;
	return () unless defined $resp && $resp =~ m{^HTTP/1\.\d (\d+)};
	my $status = $1;
	my (undef, $body) = split /\r\n\r\n/, $resp, 2;
	return ($status, $body // '');
}

my $port = PostgreSQL::Test::Cluster::get_free_port();
my $exporter_log = "$PostgreSQL::Test::Utils::log_path/041_exporter.log";
my $query_path = getcwd() . "/$queries_file";
my $exporter_pid = fork();
die "fork: $!" unless defined $exporter_pid;
if ($exporter_pid == 0)
{
	open(STDOUT, '>', $exporter_log);
	open(STDERR, '>&', \*STDOUT);
	chdir $tmp;    # no postgres_exporter.yml of its own here
	$ENV{DATA_SOURCE_NAME} = 'host=' . $node->host . ' port=' . $node->port . ' user=exporter dbname=postgres sslmode=disable';
	exec($exporter, "--web.listen-address=127.0.0.1:$port",
		"--extend.query-path=$query_path",
		'--disable-default-metrics', '--disable-settings-metrics')
	  or print STDERR "exec $exporter: $!\n";
	POSIX::_exit(127);    # not exit: the parent's END blocks would stop its node
}
END
{
	if ($exporter_pid)
	{
		local $?;
		kill 'TERM', $exporter_pid;
		waitpid($exporter_pid, 0);
	}
}

# poll until the exporter answers with a scrape of the node (each GET of
# /metrics runs the file's queries), at most
# PostgreSQL::Test::Utils::timeout_default
my ($status, $body) = (0, '');
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
while (time() < $deadline)
{
	($status, $body) = http_get($port, '/metrics');
	last if ($status // 0) == 200 && $body =~ /^pg_up(?:\{[^}]*\})? 1$/m;
	last if waitpid($exporter_pid, POSIX::WNOHANG()) == $exporter_pid;    # it exited
	usleep(100_000);
}
is($status, 200, "the exporter answers /metrics on 127.0.0.1:$port") or diag(slurp_file($exporter_log));
note(join("\n", grep { /^notif_/ } split /\n/, $body // ''));

# { metric => [ { label => value } ... ] } of the samples scraped
my %scraped;
for my $line (split /\n/, $body // '')
{
	next if $line =~ /^#/ || $line !~ /^([A-Za-z_:][\w:]*)(?:\{(.*)\})? \S+$/;
	my ($m, $labels) = ($1, $2 // '');
	push @{ $scraped{$m} }, { $labels =~ /([A-Za-z_]\w*)="((?:[^"\\]|\\.)*)"/g };
}
like($body, qr/^pg_up(?:\{[^}]*\})? 1$/m, 'pg_up is 1: the exporter reached the node')
  or diag(slurp_file($exporter_log));
like($body, qr/^pg_exporter_last_scrape_error(?:\{[^}]*\})? 0$/m,
	'no query of the file failed in the last scrape (pg_exporter_last_scrape_error 0)');
unlike($body, qr/^pg_exporter_user_queries_load_error\{[^}]*\} 1$/m, 'the file loaded');

for my $m (sort keys %read)
{
	my $why = 'read by ' . join(', ', sort keys %{ $read{$m} });
	my $samples = $scraped{$m} // [];
	ok(scalar(@$samples), "/metrics has $m ($why)") or next;
	my @missing = grep { my $l = $_; grep { !exists $_->{$l} } @$samples } sort keys %{ $metrics->{$m}{labels} };
	is("@missing", '', "$m carries the labels " . join(', ', sort keys %{ $metrics->{$m}{labels} }));
}
my @absent = grep { !$scraped{$_} } sort keys %$metrics;
is("@absent", '', 'every other metric of the exporter file is in /metrics too');

# the values the alerts will see: one sender running for the default lane,
# nothing backing off; the open breaker
my ($running) = $body =~ /^notif_workers_running\{[^}]*lane="default"[^}]*role="sender"[^}]*\} (\S+)$/m;
is($running, '1', 'notif_workers_running of the default lane\'s sender is 1');
like($body, qr/^notif_provider_health_open\{[^}]*name="down"[^}]*state="open"[^}]*\} 1$/m,
	'the open breaker reads notif_provider_health_open 1');
like($body, qr/^notif_provider_health_open\{[^}]*name="default"[^}]*state="closed"[^}]*\} 0$/m,
	'a closed one 0');

kill 'TERM', $exporter_pid;
waitpid($exporter_pid, 0);
$exporter_pid = 0;
done_testing();
