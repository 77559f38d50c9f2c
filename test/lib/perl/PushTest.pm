# PushTest.pm: the loopback push rig of test/t/020_push.pl and the HTTP/2
# benchmark.  Throwaway keys (a service account's RSA key, an APNs .p8 EC
# key) and a TLS certificate made by openssl; test/sim/push_sim.pl (Google's
# token endpoint, FCM v1, APNs) on a free port; nghttpx in front of it as
# the HTTP/2 TLS front, with an access log of each call's client port and
# protocol.
package PushTest;

use strict;
use warnings;
use Exporter 'import';
use IO::Socket::INET;
use Time::HiRes qw(usleep time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;

our @EXPORT = qw(push_rig_missing make_push_keys start_push_rig push_stats push_secrets
  push_control front_connections wait_push_stat service_account_json apns_key_json tls_front);

my @pids;
END { local $?; kill 'TERM', $_ for @pids; waitpid($_, 0) for @pids; }

# why the rig cannot run here, or undef
sub push_rig_missing
{
	return 'nghttpx (package nghttp2-proxy) is not installed'
	  unless grep { -x "$_/nghttpx" } split(/:/, $ENV{PATH} . ':/usr/sbin:/usr/bin');
	return 'Perl CryptX (package libcryptx-perl) is not installed'
	  unless eval { require Crypt::PK::ECC; 1 };
	return undef;
}

sub run_ok
{
	my ($cmd) = @_;
	system("$cmd >/dev/null 2>&1") == 0 or die "failed: $cmd";
}

# { dir, rsa_key, rsa_pub, ec_key, ec_pub, cert, cert_pem, key }
sub make_push_keys
{
	my $dir = PostgreSQL::Test::Utils::tempdir();
	run_ok("openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out $dir/sa.pem");
	run_ok("openssl pkey -in $dir/sa.pem -pubout -out $dir/sa.pub");
	run_ok("openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $dir/apns.p8");
	run_ok("openssl pkey -in $dir/apns.p8 -pubout -out $dir/apns.pub");
	run_ok("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2"
		  . " -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1,DNS:localhost"
		  . " -keyout $dir/srv.key -out $dir/srv.crt");
	return {
		dir => $dir,
		rsa_key => slurp_file("$dir/sa.pem"),
		rsa_pub => "$dir/sa.pub",
		ec_key => slurp_file("$dir/apns.p8"),
		ec_pub => "$dir/apns.pub",
		cert => "$dir/srv.crt",
		cert_pem => slurp_file("$dir/srv.crt"),
		key => "$dir/srv.key",
	};
}

sub spawn
{
	my ($log, @cmd) = @_;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		open(STDOUT, '>>', $log);
		open(STDERR, '>&', \*STDOUT);
		exec(@cmd) or die "exec $cmd[0]: $!";
	}
	push @pids, $pid;
	return $pid;
}

sub wait_port
{
	my ($port, $what) = @_;
	for (1 .. 200)
	{
		my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp');
		if ($s) { close $s; return; }
		usleep(50_000);
	}
	die "$what did not start on port $port";
}

# The throwaway keys as notif_provider.credentials: the service account's
# JSON file (its token_uri given), and an APNs key's {key_id, team_id,
# private_key}
sub service_account_json
{
	my ($keys, $token_uri) = @_;
	require JSON::PP;
	return JSON::PP->new->canonical->encode({
		type => 'service_account', project_id => 'demo-project', private_key_id => 'k1',
		private_key => $keys->{rsa_key}, client_email => 'notif@demo.iam.gserviceaccount.com',
		token_uri => $token_uri });
}

sub apns_key_json
{
	my ($keys) = @_;
	require JSON::PP;
	return JSON::PP->new->canonical->encode({
		key_id => 'KEYID12345', team_id => 'TEAMID1234', private_key => $keys->{ec_key} });
}

# The rig: push_sim behind nghttpx.  Returns { front, back, base, accesslog, sim_log }.
# Options are push_sim's, but front_streams: the streams the front lets one
# connection carry at once (200 by default), and front_idle: how long the
# front keeps an idle HTTP/2 connection open (nghttpx's default, 3m, unless
# given).
sub start_push_rig
{
	my ($keys, %opt) = @_;
	my $streams = delete $opt{front_streams} // 200;
	my $idle = delete $opt{front_idle};
	my $back = PostgreSQL::Test::Cluster::get_free_port();
	my $front = PostgreSQL::Test::Cluster::get_free_port();
	my $dir = $keys->{dir};
	my $base = "https://127.0.0.1:$front";
	my $rig = { front => $front, back => $back, base => $base,
		accesslog => "$dir/access_$front.log", sim_log => "$dir/push_sim_$back.log" };
	spawn($rig->{sim_log}, $^X, 'test/sim/push_sim.pl', '--port', $back,
		'--google-key', $keys->{rsa_pub}, '--apns-key', $keys->{ec_pub},
		'--token-uri', "$base/token",
		map { ("--$_", $opt{$_}) } sort keys %opt);
	wait_port($back, 'push_sim');
	tls_front($keys, $front, $back, $rig->{accesslog},
		"--frontend-http2-max-concurrent-streams=$streams",
		(defined $idle ? ("--frontend-http2-read-timeout=$idle") : ()));
	return $rig;
}

# nghttpx on port FRONT, TLS with the throwaway certificate, in front of
# the plain http server on port BACK; each call a line of ACCESSLOG
# ("client_port alpn method path status"), written once its answer is
# sent; more nghttpx options after.  Returns when it accepts connections.
sub tls_front
{
	my ($keys, $front, $back, $accesslog, @opt) = @_;
	spawn("$keys->{dir}/nghttpx_$front.log", 'nghttpx', '--conf=/dev/null', '--workers=1',
		"--frontend=127.0.0.1,$front", "--backend=127.0.0.1,$back",
		"--accesslog-file=$accesslog",
		'--accesslog-format=$remote_port $alpn $method $path $status',
		@opt, $keys->{key}, $keys->{cert});
	wait_port($front, 'nghttpx');
}

sub backend_request
{
	my ($rig, $method, $path) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $rig->{back},
		Proto => 'tcp', Timeout => 5) or die "connect to push_sim: $!";
	print $s "$method $path HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n";
	my $resp = '';
	while ($resp !~ /\r\n\r\n/ || length($resp) < length($`) + 4 + (($resp =~ /Content-Length: (\d+)/i)[0] // 0))
	{
		my $n = sysread($s, my $buf, 65536);
		last unless $n;
		$resp .= $buf;
	}
	close $s;
	my ($head, $body) = split /\r\n\r\n/, $resp, 2;
	return $body;
}

# push_sim's counters
sub push_stats
{
	my ($rig) = @_;
	return { map { split / /, $_, 2 } split /\n/, backend_request($rig, 'GET', '/stats') };
}

# wait until the simulator's counter NAME is above ABOVE; false on timeout
sub wait_push_stat
{
	my ($rig, $name, $above) = @_;
	my $until = time + $PostgreSQL::Test::Utils::timeout_default;
	while (time < $until)
	{
		return 1 if (push_stats($rig)->{$name} // 0) > $above;
		usleep(20_000);
	}
	return 0;
}

# every access token issued and provider token seen
sub push_secrets
{
	my ($rig) = @_;
	return [ grep { length } split /\n/, backend_request($rig, 'GET', '/secrets') ];
}

sub push_control
{
	my ($rig, $path) = @_;
	return backend_request($rig, 'POST', $path);
}

# From nghttpx's access log: { connections => distinct client ports, calls,
# h2 => calls over h2 } of the calls whose path matches.
sub front_connections
{
	my ($rig, $path_re) = @_;
	my (%ports, $calls, $h2);
	$calls = $h2 = 0;
	open(my $f, '<', $rig->{accesslog}) or return { connections => 0, calls => 0, h2 => 0 };
	while (<$f>)
	{
		my ($port, $alpn, $method, $path) = split / /;
		next unless defined $path && $path =~ $path_re;
		$ports{$port} = 1;
		$calls++;
		$h2++ if $alpn eq 'h2';
	}
	close $f;
	return { connections => scalar(keys %ports), calls => $calls, h2 => $h2 };
}

1;
