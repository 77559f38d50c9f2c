# test/trust/001_ca_cert.pl: a provider's ca_cert replaces the system's
# trust store, it does not add to it.  Run by test/system_trust.sh, which
# mounts a folder of the test's own over /etc/ssl/certs (NOTIF_TRUST_STORE)
# in a mount namespace: this test puts a throwaway "system" CA there, as
# Debian's ca-certificates does (the bundle ca-certificates.crt and the
# hashed folder libcurl is built with), and a TLS front (nghttpx) whose
# certificate that CA signed.  Without ca_cert the front is trusted (so the
# refusal below is not for another reason); with a ca_cert of another CA
# it is refused, nothing sent; and a handle that served a ca_cert call
# trusts the system's store again on its next call without one.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PushTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $store = $ENV{NOTIF_TRUST_STORE};
plan skip_all => 'run by test/system_trust.sh (as root: a mount namespace with a test trust store)'
  unless $store && -d $store && -w $store;
plan skip_all => 'nghttpx (package nghttp2-proxy) is not installed'
  unless grep { -x "$_/nghttpx" } split(/:/, $ENV{PATH} . ':/usr/sbin:/usr/bin');

my $dir = PostgreSQL::Test::Utils::tempdir();
sub run { system("$_[0] >/dev/null 2>&1") == 0 or BAIL_OUT("failed: $_[0]"); }

# two CAs: the system's, which signs the front's certificate, and another
for my $ca ('system_ca', 'other_ca')
{
	run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2"
		  . " -subj /CN=$ca -keyout $dir/$ca.key -out $dir/$ca.pem");
}
run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1"
	  . " -keyout $dir/srv.key -out $dir/srv.csr");
PostgreSQL::Test::Utils::append_to_file("$dir/san.ext", "subjectAltName=IP:127.0.0.1\n");
run("openssl x509 -req -in $dir/srv.csr -CA $dir/system_ca.pem -CAkey $dir/system_ca.key"
	  . " -CAcreateserial -days 2 -extfile $dir/san.ext -out $dir/srv.crt");

# the system's trust store: the CA in the bundle and in the hashed folder
run("cp $dir/system_ca.pem $store/system_ca.pem");
run("cp $dir/system_ca.pem $store/ca-certificates.crt");
run("openssl rehash $store");
ok(-l (glob("$store/*.0"))[0], 'the system CA is in the hashed folder');

my $sim = start_sim();
my $front = PostgreSQL::Test::Cluster::get_free_port();
PushTest::spawn("$dir/nghttpx.log", 'nghttpx', '--conf=/dev/null', '--workers=1',
	"--frontend=127.0.0.1,$front", "--backend=127.0.0.1,$sim->{port}",
	"$dir/srv.key", "$dir/srv.crt");
PushTest::wait_port($front, 'nghttpx');

my $node = new_node('trust');
my $url = "https://127.0.0.1:$front/send";
my $system_ca = slurp_file("$dir/system_ca.pem");
my $other_ca = slurp_file("$dir/other_ca.pem");
set_provider($node, 'system', $url, idempotency_header => q('Idempotency-Key'));
set_provider($node, 'other', $url, idempotency_header => q('Idempotency-Key'), ca_cert => "'$other_ca'");
set_provider($node, 'own', $url, idempotency_header => q('Idempotency-Key'), ca_cert => "'$system_ca'");
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max) VALUES
      ('by_system', 'at_least_once', 2, 'system', '100 ms', '100 ms'),
      ('by_other', 'at_least_once', 2, 'other', '100 ms', '100 ms'),
      ('by_own', 'at_least_once', 2, 'own', '100 ms', '100 ms')});

# one job at a time, in this order, so that each call reuses the handle of
# the one before when that one succeeded
sub deliver
{
	my ($kind, $order) = @_;
	my $id = sql($node, "SELECT notif_enqueue(1, '$kind', '$order', '{\"text\":\"x\"}')");
	wait_until($node, "SELECT status <> 'queued' AND claimed_by IS NULL FROM notif_job WHERE id = $id")
	  or diag("job $id of $kind did not finish");
	return $id;
}

my $j = deliver('by_system', 'a');
is(job_row($node, $j), 'sent accepted 1 200', 'no ca_cert: the front, signed by the system CA, is trusted');
is(ledger_key($sim, 'by_system:1:a'), '1 1 1', 'and the provider got the call');

$j = deliver('by_other', 'b');
is(job_row($node, $j), 'failed unreached 2 -',
	'ca_cert of another CA: the front the system trusts is refused (unreached, retried, failed)');
like(sql($node, "SELECT last_error FROM notif_job WHERE id = $j"), qr/certificate/i,
	'last_error names the certificate problem');
is(ledger_key($sim, 'by_other:1:b'), '0 0 0', 'and nothing reached the provider');

$j = deliver('by_own', 'c');
is(job_row($node, $j), 'sent accepted 1 200', 'ca_cert of the CA that signed the front: sent');
$j = deliver('by_system', 'd');
is(job_row($node, $j), 'sent accepted 1 200',
	'no ca_cert again, on the handle of a ca_cert call: the system store is trusted again');

done_testing();
