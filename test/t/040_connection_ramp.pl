# 040_connection_ramp.pl: an HTTPS provider that answers over HTTP/1.1
# needs a connection per call in flight, and the sender opens them no
# faster than the provider answers (http/ramp.c, slow start): at most
# max_connections before the first answer, then one more per answer while
# the pool is busy.  Without it, a sender with a backlog opened a TLS
# connection for every call it could have in flight at once (the night's
# 2,648 connections, hundreds failing their connect timeout).
#
# 120 jobs wait when the provider comes in; it answers each call after
# 400 ms, behind an nghttpx TLS front that speaks HTTP/1.1 only.  While
# they go out, the connections open to the front are sampled, and after
# each sample the calls answered so far (the front's access log, written
# before the sender reads the answer): never more open than
# max_connections (4) plus the answers.  The ramp still grows to what the
# backlog needs (more than 16 at once), and each job is delivered once.
# After 11 s without a call (the front closed the idle connections after
# 2), the ramp starts again: the same bound holds for 120 more.  Claimed
# jobs that make no call (past their deadline) leave the pool's room to
# the next claim at once, not to the poll (an hour here).  And a sender
# raises its limit on open files, which a service's default (1,024) keeps
# under what max_inflight calls over HTTP/1.1 need.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PushTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);

if (my $missing = push_rig_missing())
{
	plan skip_all => "$missing (test/deps.sh installs it)";
}

my $keys = make_push_keys();
# claims must never wait for the poll: an hour's shows it
my $node = new_node('connection_ramp', 'notif_deliver.poll_interval' => "'1h'");
my $sim = start_sim('--latency-ms', 400);
my $front = PostgreSQL::Test::Cluster::get_free_port();
my $accesslog = "$keys->{dir}/access_$front.log";
tls_front($keys, $front, $sim->{port}, $accesslog, '--npn-list=http/1.1',
	'--frontend-keep-alive-timeout=2s');
(my $ca = $keys->{cert_pem}) =~ s/'/''/g;

# the jobs wait for their provider's url
$node->safe_psql('postgres', q{
	INSERT INTO notif_provider (name) VALUES ('sms_tls');
	INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES ('ramp', 'at_least_once', 3, 'sms_tls');
	SELECT notif_enqueue(g, 'ramp', 'o' || g, '{"text": "hi"}') FROM generate_series(1, 120) g});
$node->safe_psql('postgres', "
	UPDATE notif_provider SET url = 'https://127.0.0.1:$front/send', ca_cert = '$ca',
	       idempotency_header = 'Idempotency-Key', max_connections = 4, max_inflight = 500, timeout = '10 s'
	 WHERE name = 'sms_tls'");

sub open_to_front
{
	return scalar grep { /\S/ } split /\n/, `ss -Htn state established '( dport = :$front )'`;
}

sub answered
{
	open(my $f, '<', $accesslog) or return 0;
	my $n = grep { m{ POST /send } } <$f>;
	close $f;
	return $n;
}

# Sampled without a query in between, until N more calls were answered:
# "" if never more connections were open than 4 plus the answers since
# the start, else the first sample that had more; and the most open at once.
sub sample_ramp
{
	my ($n) = @_;
	my $base = answered();
	my ($most, $over) = (0, '');
	my $until = time + 120;
	while (time < $until)
	{
		my $open = open_to_front();
		my $done = answered() - $base;
		$most = $open if $open > $most;
		$over ||= "$open connections open after $done answers" if $open > 4 + $done;
		last if $done >= $n;
		usleep(5_000);
	}
	return ($over, $most);
}

my ($over, $most) = sample_ramp(120);
is($over, '', 'never more connections open than max_connections plus the answers');
cmp_ok($most, '>', 16, "the ramp grew with the answers: $most connections open at once");
ok(wait_until($node, q{SELECT count(*) FROM notif_job WHERE kind = 'ramp' AND status = 'sent'}, '120'),
	'the 120 jobs are sent');

# --- idle: the front closed the connections, the ramp starts again ---
ok(wait_until($node, qq{SELECT now() - max(sent_at) > interval '11 seconds' FROM notif_job WHERE kind = 'ramp'}),
	'no call for 11 s (the ramp restarts after 10)');
is(open_to_front(), 0, 'the front closed the idle connections');
$node->safe_psql('postgres', q{SELECT notif_enqueue(g, 'ramp', 'again' || g, '{"text": "hi"}') FROM generate_series(1, 120) g});
($over, $most) = sample_ramp(120);
is($over, '', 'after the idle time: again never more open than max_connections plus the answers');
ok(wait_until($node, q{SELECT count(*) FROM notif_job WHERE kind = 'ramp' AND status = 'sent'}, '240'),
	'the 120 more are sent');

my $ledger = ledger($sim);
is(scalar(grep { /^ramp:/ && $ledger->{$_}{delivered} == 1 } keys %$ledger), 240, 'each job delivered once');
open(my $log, '<', $accesslog) or die "$accesslog: $!";
my @calls = grep { (split / /)[3] eq '/send' } <$log>;
is(scalar(grep { (split / /)[1] ne 'http/1.1' } @calls), 0, 'every call over HTTP/1.1');

# --- claimed jobs that make no call leave their room to the next claim ---
# A provider's pool takes max_connections calls before its first answer.
# 40 jobs past their deadline (claimed, expired, no call) ahead of 8 that
# may go: each claim that took only late jobs must be followed by another
# at once, not after the poll (an hour here).
$node->safe_psql('postgres', "
	INSERT INTO notif_provider (name, url, idempotency_header, ca_cert, max_connections, timeout)
	SELECT 'sms_tls2', url, idempotency_header, ca_cert, 4, timeout FROM notif_provider WHERE name = 'sms_tls';
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, paused) VALUES
	  ('late', 'at_least_once', 3, '1 second', 'sms_tls2', true),
	  ('after_late', 'at_least_once', 3, NULL, 'sms_tls2', true);
	SELECT notif_enqueue(g, 'late', 'l' || g, '{}') FROM generate_series(1, 40) g;
	SELECT notif_enqueue(g, 'after_late', 'a' || g, '{}') FROM generate_series(1, 8) g");
ok(wait_until($node, q{SELECT now() > max(created_at) + interval '1 second' FROM notif_job WHERE kind = 'late'}),
	'the late jobs are past their deadline');
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code IN ('late', 'after_late')});
ok(wait_until($node, q{SELECT count(*) FILTER (WHERE kind = 'late' AND status = 'expired') = 40
                          AND count(*) FILTER (WHERE kind = 'after_late' AND status = 'sent') = 8
                         FROM notif_job}),
	'the 40 late jobs expired and the 8 others were sent, without waiting for the poll');

# --- the sender's limit on open files: a call over HTTP/1.1 holds one ---
# The postmaster's soft limit is lowered under max_inflight (256) to what
# a service gets by default, scaled down; a sender started after it
# raises its own to the hard limit.

# "soft hard" of a process's open files
sub nofile
{
	my ($pid) = @_;
	open(my $f, '<', "/proc/$pid/limits") or return '';
	my ($line) = grep { /^Max open files/ } <$f>;
	return join(' ', (split /\s{2,}/, $line)[1, 2]);
}

my $postmaster = (split /\n/, slurp_file($node->data_dir . '/postmaster.pid'))[0];
my (undef, $hard) = split / /, nofile($postmaster);
SKIP:
{
	skip "the hard limit on open files ($hard) leaves no room to lower the soft one under 320", 2
	  unless $hard =~ /^\d+$/ && $hard > 320;
	system('prlimit', '--pid', $postmaster, '--nofile=200:') == 0 or die 'prlimit failed';
	is(nofile($postmaster), "200 $hard", 'the postmaster may open 200 files');
	my $old = sender_pid($node, q{default});
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
	my $new;
	wait_until($node, qq{SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'notif_deliver sender default' AND pid <> $old});
	$new = sender_pid($node, q{default});
	is(nofile($new), "$hard $hard", "a sender started after it raised its own soft limit to the hard one ($hard)");
}

done_testing();
