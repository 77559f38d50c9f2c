# 027_handle_reuse.pl: a libcurl handle kept from one call to the next
# without a reset (src/http/http.c) carries nothing of the call before.  One
# sender with one call in flight reuses one handle for every call, over one
# kept-alive connection, while the calls change their shape: POST from a
# buffer (at_least_once), POST through the read callback (at_most_once),
# POST without a body on a fresh connection (at_most_once), GET (query
# format), each provider with its own URL and static header.  The calls
# are queued at once and run back to back (a type each, in priority
# order), so the sender never idles long enough to free its handle.  Each
# request must arrive as its own call built it; and the at_most_once guard
# must hold on a handle whose last call was an at_least_once POST (libcurl
# re-sends a buffer on its own, never the read callback's body).
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('handle_reuse', 'notif_deliver.max_inflight' => '1');
my $sim = start_sim();
my $base = "http://127.0.0.1:$sim->{port}";

# name => [format, delivery, URL, static header]
my %providers = (
	r_json => ['json', 'at_least_once', "$base/json/send?via=json", 'X-From-Json'],
	r_form => ['form', 'at_least_once', "$base/form/send", 'X-From-Form'],
	r_query => ['query', 'at_least_once', "$base/cgi-bin/sendsms?user=q", 'X-From-Query'],
	r_amo => ['json', 'at_most_once', "$base/amo/send", 'X-From-Amo'],
	r_amo_form => ['form', 'at_most_once', "$base/amo-form/send", 'X-From-Amo-Form'],
	r_amo_empty => ['form', 'at_most_once', "$base/amo-empty/send", 'X-From-Amo-Empty'],
);
for my $p (sort keys %providers)
{
	my ($format, $delivery, $url, $header) = @{ $providers{$p} };
	set_provider($node, $p, $url,
		format => "'$format'",
		headers => qq('{"$header": "$p"}'),
		idempotency_header => q('Idempotency-Key'));
	$node->safe_psql('postgres', qq{
		INSERT INTO notif_type (code, delivery, max_tries, provider, lane)
		VALUES ('$p', '$delivery', 1, '$p', 'reuse')});
}


sub wait_final
{
	my ($id) = @_;
	return wait_until($node,
		"SELECT status NOT IN ('queued', 'sending') AND claimed_by IS NULL FROM notif_job WHERE id = $id");
}


# The shapes interleaved so that each follows the others: call k is a job
# of type seq_k (priority 100 - k), sent to its provider.
my @sequence = qw(r_json r_query r_amo r_form r_query r_amo_form r_json r_amo
  r_amo_empty r_query r_json r_amo_form r_amo_empty r_form r_amo r_json);
my $k = 0;
for my $p (@sequence)
{
	$k++;
	my $delivery = $providers{$p}[1];
	$node->safe_psql('postgres', qq{
		INSERT INTO notif_type (code, delivery, max_tries, provider, lane, priority, paused)
		VALUES ('seq_$k', '$delivery', 1, '$p', 'reuse', 100 - $k, true)});
}
my $values = join(', ', map {
		my $payload = $sequence[$_ - 1] eq 'r_amo_empty' ? '{}' : qq({"to":"+84900000007","text":"o$_"});
		"('seq_$_', '$payload')"
	} 1 .. $k);
$node->safe_psql('postgres', qq{
	SELECT count(notif_enqueue(7, kind, 'o', payload::jsonb)) FROM (VALUES $values) v(kind, payload);
	UPDATE notif_type SET paused = false WHERE code LIKE 'seq_%'});
ok(wait_until($node, q{SELECT count(*) = 0 FROM notif_job WHERE kind LIKE 'seq_%' AND (status IN ('queued', 'sending') OR claimed_by IS NOT NULL)}),
	"the $k calls finished");
is($node->safe_psql('postgres', q{SELECT string_agg(kind, ' ' ORDER BY sent_at) FROM notif_job WHERE kind LIKE 'seq_%'}),
	join(' ', map { "seq_$_" } 1 .. $k), 'they were sent one after the other, in the order of the sequence');
for my $n (1 .. $k)
{
	my $p = $sequence[$n - 1];
	my ($format, $delivery, $url, $header) = @{ $providers{$p} };
	my $key = "seq_$n:7:o";
	my $id = $node->safe_psql('postgres', "SELECT id FROM notif_job WHERE kind = 'seq_$n'");
	is(job_row($node, $id), 'sent accepted 1 200', "call $n ($p): accepted");
	my $r = last_request($sim, $key);
	my $h = headers_of($r);
	(my $target = $url) =~ s{^\Q$base\E}{};
	if ($format eq 'query')
	{
		is($r->{method}, 'GET', "call $n ($p): GET");
		like($r->{target}, qr{^\Q$target\E&to=%2B84900000007&text=o$n$}, "call $n ($p): its own URL and query");
		is($r->{'body-length'}, '0', "call $n ($p): no body");
		ok(!exists $h->{'Content-Type'}, "call $n ($p): no Content-Type");
	}
	else
	{
		is($r->{method}, 'POST', "call $n ($p): POST");
		is($r->{target}, $target, "call $n ($p): its own URL");
		my $body = $format eq 'json'
		  ? $node->safe_psql('postgres', "SELECT payload::text FROM notif_job WHERE id = $id")
		  : $p eq 'r_amo_empty' ? '' : "to=%2B84900000007&text=o$n";
		is($r->{body} // '', $body, "call $n ($p): its own body");
		is($h->{'Content-Type'},
			$format eq 'json' ? 'application/json' : 'application/x-www-form-urlencoded',
			"call $n ($p): its Content-Type");
	}
	is($h->{'Idempotency-Key'}, $key, "call $n ($p): its own key");
	is($h->{$header}, $p, "call $n ($p): its provider's static header");
	is(scalar(grep { /^X-From-/ } keys %$h), 1, "call $n ($p): no other provider's header");
	is(ledger_key($sim, $key), '1 1 1', "call $n ($p): received once");
}

# The at_most_once guard on a handle whose last call gave libcurl a buffer
# to re-send: the connection is reset right after the request was read.
for my $p ('r_json', 'r_amo')
{
	$node->safe_psql('postgres', qq{UPDATE notif_provider SET headers = '{"X-Sim-Fault": "reset"}' WHERE name = '$p'});
}
ok(wait_config_read($node, 'reuse'), 'the sender read the reset faults');
my $warm = enqueue($node, 7, 'r_form', 'warm', 'warm');
ok(wait_final($warm), 'an at_least_once POST went out over the kept-alive connection');
is(job_row($node, $warm), 'sent accepted 1 200', 'it was accepted');
my $amo = enqueue($node, 7, 'r_amo', 'hit', 'hit');
ok(wait_final($amo), 'the at_most_once call after it finished');
is(job_row($node, $amo), 'sent unknown 1 -', 'at_most_once, reset after receipt: sent/unknown');
is(ledger_key($sim, 'r_amo:7:hit'), '1 0 1', 'at_most_once: the provider got it exactly once (no re-send)');

# And libcurl's re-send of an at_least_once call goes to that call's URL
# (the handle's last call went elsewhere).
my $warm2 = enqueue($node, 7, 'r_query', 'warm2', 'warm2');
ok(wait_final($warm2), 'a GET to another URL went out over the kept-alive connection');
my $alo = enqueue($node, 7, 'r_json', 'hit', 'hit');
ok(wait_final($alo), 'the at_least_once call after it finished');
# libcurl 7.88 (Debian 12) sends it twice; 8.14 (Debian 13 on) may send it
# a third time, when the fresh connection is reset too: each copy the same body
like(ledger_key($sim, 'r_json:7:hit'), qr/^[23] 0 1$/,
	'at_least_once: libcurl re-sent the request on a fresh connection (the hazard guarded above)');
is(last_request($sim, 'r_json:7:hit')->{target}, '/json/send?via=json', 'the re-sent copy went to its own URL');

# libcurl counts its silent re-sends over a handle's life and fails the
# sixth (7.88): a handle that re-sent is not kept.  Seven at_least_once
# calls back to back, each reset once by the provider right after it read
# the request on the kept-alive connection; libcurl sends each again on a
# fresh one, which is accepted.  A sender that kept those handles as they
# were failed the sixth call ("Connection died, tried 5 times").
set_provider($node, 'r_once', "$base/once/send",
	headers => q('{"X-Sim-Fault": "reset", "X-Sim-Fail-First": "1"}'),
	idempotency_header => q('Idempotency-Key'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, lane, priority, paused)
	VALUES ('once_warm', 'at_least_once', 1, 'r_form', 'reuse', 100, true)});
for my $i (1 .. 7)
{
	$node->safe_psql('postgres', qq{
		INSERT INTO notif_type (code, delivery, max_tries, provider, lane, priority, paused)
		VALUES ('once_$i', 'at_least_once', 1, 'r_once', 'reuse', 100 - $i, true)});
}
$node->safe_psql('postgres', q{
	SELECT notif_enqueue(7, 'once_warm', 'o', '{"to":"+84900000007","text":"warm"}');
	SELECT count(notif_enqueue(7, 'once_' || i, 'o', '{"to":"+84900000007","text":"once"}')) FROM generate_series(1, 7) i;
	UPDATE notif_type SET paused = false WHERE code LIKE 'once_%'});
ok(wait_until($node, q{SELECT count(*) = 0 FROM notif_job WHERE kind LIKE 'once_%' AND (status IN ('queued', 'sending') OR claimed_by IS NOT NULL)}),
	'the seven calls reset once each finished');
is($node->safe_psql('postgres', q{SELECT string_agg(status || ' ' || coalesce(outcome, '-'), ', ' ORDER BY kind) FROM notif_job WHERE kind ~ '^once_[0-9]'}),
	join(', ', ('sent accepted') x 7), 'each was accepted on libcurl\'s second copy, the sixth and seventh too')
  or diag($node->safe_psql('postgres', q{SELECT string_agg(kind || ': ' || coalesce(last_error, '-'), '; ' ORDER BY kind) FROM notif_job WHERE kind LIKE 'once_%'}));
is(join(' ', map { ledger_key($sim, "once_$_:7:o") } 1 .. 7), join(' ', ('2 1 1') x 7),
	'the provider got each twice (reset, then accepted), one body each');

done_testing();
