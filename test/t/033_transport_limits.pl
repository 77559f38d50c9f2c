# 033_transport_limits.pl: what libcurl may do with a provider's url and
# answer, beyond the url CHECK.  With the CHECK dropped (a superuser can), a
# file:// url (a file the server can read) is never read and an ftp:// url
# never connected to: libcurl is limited to http and https
# (CURLOPT_PROTOCOLS_STR, src/http/http.c).  A provider answering 64 MB gets its
# call ended with the right status, the start of the answer in last_error,
# and the sender's memory does not grow by the answer: it keeps at most 255
# bytes of it, and reads no more than 16 kB before it closes the connection
# (src/http/handles.c, write_cb).  A 64 MB 200 is read to its end (the
# provider took the request; the call is not ended early), kept alike.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IO::Socket::INET;
use IO::Select;
use POSIX ();
use Time::HiRes qw(usleep);

my $node = new_node('transport_limits');

# --- only http and https, whatever the url says ---------------------------
sql($node, 'ALTER TABLE notif_provider DROP CONSTRAINT notif_provider_url_check');
my $ftp = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 5, Proto => 'tcp')
  or die "listen: $!";
my $ftp_port = $ftp->sockport;
my $local = PostgreSQL::Test::Utils::tempdir() . '/local.txt';
PostgreSQL::Test::Utils::append_to_file($local, "words of a local file\n");
set_provider($node, 'file', "file://$local", timeout => q('2 s'));
set_provider($node, 'ftp', "ftp://127.0.0.1:$ftp_port/notif.txt", timeout => q('2 s'));
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES
      ('to_file', 'at_least_once', 1, 'file'), ('to_ftp', 'at_least_once', 1, 'ftp')});
my $file_job = sql($node, q{SELECT notif_enqueue(1, 'to_file', 'a', '{"text": "x"}')});
my $ftp_job = sql($node, q{SELECT notif_enqueue(1, 'to_ftp', 'a', '{"text": "x"}')});
ok(wait_until($node, "SELECT count(*) = 2 FROM notif_job WHERE id IN ($file_job, $ftp_job)"
	  . " AND status <> 'queued' AND claimed_by IS NULL"), 'the file:// and ftp:// jobs finished');
for ([ 'file', $file_job ], [ 'ftp', $ftp_job ])
{
	my ($scheme, $id) = @$_;
	is(job_row($node, $id), 'failed unreached 1 -', "$scheme://: failed, unreached (nothing sent)");
	like(sql($node, "SELECT last_error FROM notif_job WHERE id = $id"), qr/protocol "?$scheme"?.*(not supported|disabled)/i,
		"$scheme://: last_error says libcurl refused the protocol");
}
unlike(sql($node, "SELECT last_error FROM notif_job WHERE id = $file_job"), qr/words/,
	'file://: nothing of the file was read into last_error');
# a connection would wait in the listen queue, accepted or not
ok(!IO::Select->new($ftp)->can_read(0), 'ftp://: no connection was ever made to the ftp port');

# --- a 64 MB answer: the call ends, the sender keeps 255 bytes -------------
my $size = 64 * 1024 * 1024;
# it answers every request 400 with $size bytes (200 to a request for
# /ok), and writes down how many the sender let through before it closed;
# a child, which leaves with _exit (an exit would run the test's END
# blocks: stop the node)
my $big = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 5, Proto => 'tcp')
  or die "listen: $!";
my $big_port = $big->sockport;
my $written_file = $node->basedir . '/big_answer_written';
my $big_pid = fork();
die "fork: $!" unless defined $big_pid;
if ($big_pid == 0)
{
	$SIG{PIPE} = 'IGNORE';	# a closed connection: syswrite fails
	while (my $c = $big->accept)
	{
		my $req = '';
		while ($req !~ /\r\n\r\n/)
		{
			sysread($c, $req, 65536, length $req) or last;
		}
		my ($len) = $req =~ /Content-Length: (\d+)/i;
		my ($head, $body) = split /\r\n\r\n/, $req, 2;
		while (length($body // '') < ($len // 0))
		{
			sysread($c, $body, 65536, length $body) or last;
		}
		my $chunk = 'a big answer ' . ('x' x (65536 - 13));
		my $ok = $head =~ m{^POST /ok };
		syswrite($c, ($ok ? "HTTP/1.1 200 OK" : "HTTP/1.1 400 Bad Request")
			  . "\r\nContent-Type: text/plain\r\nContent-Length: $size\r\nConnection: close\r\n\r\n");
		my $written = 0;
		while ($written < $size)
		{
			my $n = syswrite($c, $written ? 'x' x 65536 : $chunk, $size - $written) or last;
			$written += $n;
		}
		close $c;
		my $file = $written_file . ($ok ? '.ok' : '');
		open(my $fh, '>', "$file.tmp") or POSIX::_exit(1);
		print $fh $written;
		close $fh;
		rename("$file.tmp", $file);
	}
	POSIX::_exit(0);
}
close $big;
END { kill 'KILL', $big_pid if $big_pid; }
my $sim = start_sim();
set_provider($node, 'small', $sim->{url}, idempotency_header => q('Idempotency-Key'));
set_provider($node, 'big', "http://127.0.0.1:$big_port/send", timeout => q('60 s'));
set_provider($node, 'big_ok', "http://127.0.0.1:$big_port/ok", timeout => q('60 s'));
sql($node, q{INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES
      ('small', 'at_least_once', 1, 'small'), ('big', 'at_least_once', 1, 'big'),
      ('big_ok', 'at_least_once', 1, 'big_ok')});

# the sender, warmed up by an ordinary call, and its peak memory
my $warm = sql($node, q{SELECT notif_enqueue(1, 'small', 'warm', '{"text": "x"}')});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $warm"), 'an ordinary call was sent');
my $sender = sql($node, q{SELECT pid FROM notif_workers() WHERE role = 'sender'});
sub peak_kb { return (slurp_file("/proc/$sender/status") =~ /^VmHWM:\s+(\d+) kB/m)[0]; }
my $peak_before = peak_kb();

my $big_job = sql($node, q{SELECT notif_enqueue(1, 'big', 'b', '{"text": "x"}')});
ok(wait_until($node, "SELECT status <> 'queued' AND claimed_by IS NULL FROM notif_job WHERE id = $big_job"),
	'the call answered with 64 MB finished');
is(job_row($node, $big_job), 'failed rejected 1 400', 'the 64 MB answer: its status read, rejected');
my $error = sql($node, "SELECT last_error FROM notif_job WHERE id = $big_job");
like($error, qr/^HTTP 400: a big answer /, 'last_error: the status and the start of the answer');
cmp_ok(length $error, '<=', 255, 'last_error holds no more than 255 bytes of it');
my $grew = peak_kb() - $peak_before;
cmp_ok($grew, '<', 8 * 1024, "the sender's peak memory grew by less than 8 MB ($grew kB), not by the answer");
is(sql($node, q{SELECT pid FROM notif_workers() WHERE role = 'sender'}), $sender, 'the same sender runs');
# the sender stops reading past 16 kB and closes the connection: the server
# can write no more than the sockets' buffers hold (a few MB), not 64 MB
sub written
{
	my ($file) = @_;
	my $give_up = time + $PostgreSQL::Test::Utils::timeout_default;
	usleep(100_000) until -e $file || time > $give_up;
	return -e $file ? slurp_file($file) : -1;
}
my $written = written($written_file);
cmp_ok($written, '>=', 0, 'the server stopped writing the answer');
cmp_ok($written, '<', $size / 2,
	"the sender closed the connection unread: the server wrote $written of $size bytes");

# --- a 64 MB 200: read to its end (the provider took the request) ----------
my $ok_job = sql($node, q{SELECT notif_enqueue(1, 'big_ok', 'b', '{"text": "x"}')});
ok(wait_until($node, "SELECT status <> 'queued' AND claimed_by IS NULL FROM notif_job WHERE id = $ok_job"),
	'the call answered 200 with 64 MB finished');
is(job_row($node, $ok_job), 'sent accepted 1 200', 'the 64 MB 200: sent');
is(written("$written_file.ok"), $size, 'the 64 MB 200 was read to its end: the server wrote all of it');
$grew = peak_kb() - $peak_before;
cmp_ok($grew, '<', 8 * 1024, "the sender's peak memory grew by less than 8 MB ($grew kB) after both");

done_testing();
