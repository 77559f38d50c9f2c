# 033_transport_limits.pl: what libcurl may do with a provider's url,
# beyond the url CHECK.  With the CHECK dropped (a superuser can), a
# file:// url (a file the server can read) is never read and an ftp:// url
# never connected to: libcurl is limited to http and https
# (CURLOPT_PROTOCOLS_STR, src/http.c).
use strict;
use warnings;
use lib 'test';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IO::Socket::INET;
use IO::Select;

my $node = new_node('transport_limits');
sub sql { return $node->safe_psql('postgres', $_[0]); }

# --- only http and https, whatever the url says ---------------------------
sql('ALTER TABLE notif_provider DROP CONSTRAINT notif_provider_url_check');
my $ftp = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 5, Proto => 'tcp')
  or die "listen: $!";
my $ftp_port = $ftp->sockport;
my $local = PostgreSQL::Test::Utils::tempdir() . '/local.txt';
PostgreSQL::Test::Utils::append_to_file($local, "words of a local file\n");
set_provider($node, 'file', "file://$local", timeout => q('2 s'));
set_provider($node, 'ftp', "ftp://127.0.0.1:$ftp_port/notif.txt", timeout => q('2 s'));
sql(q{INSERT INTO notif_type (code, delivery, max_tries, provider) VALUES
      ('to_file', 'at_least_once', 1, 'file'), ('to_ftp', 'at_least_once', 1, 'ftp')});
my $file_job = sql(q{SELECT notif_enqueue(1, 'to_file', 'a', '{"text": "x"}')});
my $ftp_job = sql(q{SELECT notif_enqueue(1, 'to_ftp', 'a', '{"text": "x"}')});
ok(wait_until($node, "SELECT count(*) = 2 FROM notif_job WHERE id IN ($file_job, $ftp_job)"
	  . " AND status <> 'queued' AND claimed_by IS NULL"), 'the file:// and ftp:// jobs finished');
for ([ 'file', $file_job ], [ 'ftp', $ftp_job ])
{
	my ($scheme, $id) = @$_;
	is(job_row($node, $id), 'failed unreached 1 -', "$scheme://: failed, unreached (nothing sent)");
	like(sql("SELECT last_error FROM notif_job WHERE id = $id"), qr/protocol "?$scheme"?.*(not supported|disabled)/i,
		"$scheme://: last_error says libcurl refused the protocol");
}
unlike(sql("SELECT last_error FROM notif_job WHERE id = $file_job"), qr/words/,
	'file://: nothing of the file was read into last_error');
# a connection would wait in the listen queue, accepted or not
ok(!IO::Select->new($ftp)->can_read(0), 'ftp://: no connection was ever made to the ftp port');

done_testing();
