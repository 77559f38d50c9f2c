# 034_proxy.pl: libcurl honours the server's proxy environment (an egress
# proxy is a legitimate deployment): started with http_proxy and
# https_proxy pointing at a recording proxy, the sender's calls go through
# it, and the provider sees none.  Over http the proxy sees the whole
# request, credentials included (and its answer is taken as the
# provider's); over https it sees a CONNECT to the host and port, nothing
# more.  With no_proxy covering 127.0.0.1, calls go direct.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IO::Socket::INET;
use POSIX ();

my $dir = PostgreSQL::Test::Utils::tempdir();
my $seen = "$dir/proxy.log";

# The proxy: appends the head of each request it gets (request line and
# headers) to $seen, then answers a CONNECT 403 and any other request
# 200, forwarding nothing.  A child, which leaves with _exit (an exit would
# run the test's END blocks: stop the node).
my $proxy = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 5, Proto => 'tcp')
  or die "listen: $!";
my $proxy_port = $proxy->sockport;
my $proxy_pid = fork();
die "fork: $!" unless defined $proxy_pid;
if ($proxy_pid == 0)
{
	while (my $c = $proxy->accept)
	{
		my $req = '';
		while ($req !~ /\r\n\r\n/)
		{
			sysread($c, $req, 65536, length $req) or last;
		}
		my ($head) = split /\r\n\r\n/, $req, 2;
		if (open(my $f, '>>', $seen))
		{
			print $f "$head\n\n";
			close $f;
		}
		print $c $head =~ /^CONNECT /
		  ? "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
		  : "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
		close $c;
	}
	POSIX::_exit(0);
}
close $proxy;
END { kill 'KILL', $proxy_pid if $proxy_pid; }
sub proxy_seen { return -e $seen ? slurp_file($seen) : ''; }

# the server's environment, as its start script would set it
$ENV{http_proxy} = "http://127.0.0.1:$proxy_port";
$ENV{https_proxy} = "http://127.0.0.1:$proxy_port";
delete $ENV{$_} for qw(no_proxy NO_PROXY all_proxy ALL_PROXY HTTPS_PROXY);
my $node = new_node('proxy');
my $sim = start_sim();
my $secret = 'sk_live_4eC39HqLyjWDarjtT1zdp7dc';
set_provider($node, 'plain', $sim->{url},
	headers => qq('{"Authorization": "Bearer $secret"}'), idempotency_header => q('Idempotency-Key'));
set_provider($node, 'tls', "https://127.0.0.1:$sim->{port}/send",
	headers => qq('{"Authorization": "Bearer $secret"}'), idempotency_header => q('Idempotency-Key'));
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES
      ('plain', 'at_least_once', 1, 'plain'), ('tls', 'at_least_once', 1, 'tls')});
sub finished
{
	my ($id) = @_;
	return wait_until($node, "SELECT status <> 'queued' AND claimed_by IS NULL FROM notif_job WHERE id = $id");
}

# --- http: through the proxy, which sees everything -----------------------
my $j = sql($node, q{SELECT notif_enqueue(1, 'plain', 'a', '{"to": "+84901234567", "text": "x"}')});
ok(finished($j), 'http: the call ended');
like(proxy_seen(), qr{^POST http://127\.0\.0\.1:$sim->{port}/send HTTP/1\.1\r?$}m,
	'http: the proxy got the request, with the whole url');
like(proxy_seen(), qr{^Authorization: Bearer \Q$secret\E}m, 'http: and its headers, the credential included');
is(job_row($node, $j), 'sent accepted 1 200', "http: the proxy's answer was taken as the provider's");
is(ledger_key($sim, 'plain:1:a'), '0 0 0', 'http: the provider got nothing');

# --- https: the proxy sees a CONNECT, nothing of the request ----------------
my $before = proxy_seen();
$j = sql($node, q{SELECT notif_enqueue(1, 'tls', 'b', '{"to": "+84901234567", "text": "x"}')});
ok(finished($j), 'https: the call ended');
my $connect = substr(proxy_seen(), length $before);
like($connect, qr{\ACONNECT 127\.0\.0\.1:$sim->{port} HTTP/1\.1\r?\n}, 'https: the proxy got a CONNECT to the host and port');
unlike($connect, qr{/send|Authorization|\Q$secret\E|84901234567}, 'https: and not the path, a header or the body');
like(job_row($node, $j), qr/^failed /, 'https: the proxy refused the tunnel: failed');
is(ledger_key($sim, 'tls:1:b'), '0 0 0', 'https: the provider got nothing');

# --- no_proxy covering 127.0.0.1: direct ----------------------------------
$node->stop;
$ENV{no_proxy} = '127.0.0.1';
$node->start;
$before = proxy_seen();
$j = sql($node, q{SELECT notif_enqueue(1, 'plain', 'c', '{"to": "+84901234567", "text": "x"}')});
ok(finished($j), 'no_proxy: the call ended');
is(job_row($node, $j), 'sent accepted 1 200', 'no_proxy: sent');
is(ledger_key($sim, 'plain:1:c'), '1 1 1', 'no_proxy: the provider got it directly');
is(proxy_seen(), $before, 'no_proxy: the proxy saw nothing more');

done_testing();
