# 040_connection_ramp.pl: an HTTPS provider that answers over HTTP/1.1
# needs a connection per call in flight, and the sender opens them no
# faster than the provider answers (http/pools.c, slow start): at most
# max_connections before the first answer, then one more per answer that
# came while the pool was full.  Without it, a sender with a backlog opened
# a TLS connection for every call it could have in flight at once (the
# night's 2,648 connections, hundreds failing their connect timeout).
#
# 120 jobs wait when the provider comes in; it answers each call after
# 400 ms, behind an nghttpx TLS front that speaks HTTP/1.1 only.  While they
# go out, the connections open to the front are sampled, and after each
# sample the calls answered so far (the front's access log, written before
# the sender reads the answer): never more open than max_connections (4) plus
# the answers.  The ramp still grows to what the backlog needs (more than
# 16 at once), and each job is delivered once.  And a sender raises its
# limit on open files, which a service's default (1,024) keeps under
# what max_inflight calls over HTTP/1.1 need.
use strict;
use warnings;
use lib 'test';
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
my $node = new_node('connection_ramp');
my $sim = start_sim('--latency-ms', 400);
my $front = PostgreSQL::Test::Cluster::get_free_port();
my $accesslog = "$keys->{dir}/access_$front.log";
tls_front($keys, $front, $sim->{port}, $accesslog, '--npn-list=http/1.1');
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

# sampled without a query in between, as fast as ss answers
my ($most, $over, $samples) = (0, '', 0);
my $until = time + 120;
while (time < $until)
{
	my $open = open_to_front();
	my $done = answered();
	$samples++;
	$most = $open if $open > $most;
	$over ||= "$open connections open after $done answers" if $open > 4 + $done;
	last if $done >= 120;
}
is($over, '', "never more connections open than max_connections plus the answers ($samples samples)");
cmp_ok($most, '>', 16, "the ramp grew with the answers: $most connections open at once");
ok(wait_until($node, q{SELECT count(*) FROM notif_job WHERE kind = 'ramp' AND status = 'sent'}, '120'),
	'the 120 jobs are sent');

my $ledger = ledger($sim);
is(scalar(grep { /^ramp:/ && $ledger->{$_}{delivered} == 1 } keys %$ledger), 120, 'each job delivered once');
open(my $log, '<', $accesslog) or die "$accesslog: $!";
my @calls = grep { (split / /)[3] eq '/send' } <$log>;
is(scalar(grep { (split / /)[1] ne 'http/1.1' } @calls), 0, 'every call over HTTP/1.1');

# --- the sender's limit on open files: a call over HTTP/1.1 holds one ---
# The postmaster's soft limit is lowered under max_inflight (256) to what
# a service gets by default, scaled down; a sender started after it
# raises its own to the hard limit.
sub sender_pid
{
	my $pid;
	wait_until($node, q{SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'notif_deliver sender default'});
	$pid = $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE application_name = 'notif_deliver sender default'});
	return $pid;
}

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
	my $old = sender_pid();
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
	my $new;
	wait_until($node, qq{SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'notif_deliver sender default' AND pid <> $old});
	$new = sender_pid();
	is(nofile($new), "$hard $hard", "a sender started after it raised its own soft limit to the hard one ($hard)");
}

done_testing();
