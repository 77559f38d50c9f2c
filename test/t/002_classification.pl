# 002_classification.pl: the call-ended rows of the job lifecycle
# (src/lifecycle/job_state.c, notif_transitions(); each test names its rows),
# for both deliveries: what each provider answer or failure does to a job,
# checked in notif_job, notif_attempt (notif_calls) and the simulator's ledger.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IO::Socket::INET;
use POSIX ();

my $node = new_node('classification');
my $sim = start_sim('--retry-after', '1');

# One provider per fault, all pointing at the simulator; the fault is forced
# with the simulator's X-Sim-Fault header.  "refused" points at a closed port.
my $closed_port = PostgreSQL::Test::Cluster::get_free_port();
my %fault = (
	ok => 'ok',
	timeout => 'timeout',
	reset => 'reset',
	s400 => '400',
	s429 => '429',
	s502 => '502',
	s504 => '504',
	refused => undef);
for my $f (sort keys %fault)
{
	my $url = $f eq 'refused' ? "http://127.0.0.1:$closed_port/send" : $sim->{url};
	my $headers = defined $fault{$f} ? qq('{"X-Sim-Fault": "$fault{$f}"}') : q('{}');
	set_provider($node, "p_$f", $url,
		headers => $headers,
		idempotency_header => q('Idempotency-Key'),
		timeout => q('600 ms'));
	for my $d ('at_most_once', 'at_least_once')
	{
		my $code = ($d eq 'at_most_once' ? 'amo_' : 'alo_') . $f;
		$node->safe_psql('postgres', qq{
			INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
			VALUES ('$code', '$d', 3, 'p_$f', '100 ms', '200 ms')});
	}
}

# enqueue one job of each type, remembering its id
my %id;
for my $f (sort keys %fault)
{
	for my $p ('amo', 'alo')
	{
		$id{"${p}_$f"} = $node->safe_psql('postgres',
			qq{SELECT notif_enqueue(7, '${p}_$f', 'order-1', '{"to":"+84900000007","text":"$p $f"}')});
	}
}

ok( wait_until(
		$node,
		q{SELECT count(*) = 0 FROM notif_job WHERE status IN ('queued', 'sending') OR claimed_by IS NOT NULL}),
	'every job reached a final state');

# what each job became: status outcome tries http_status, and the ledger
my @rows = (
	# type         job                           received by the provider
	['amo_ok', 'sent accepted 1 200', '1 1 1', 'amo_accepted: at_most_once, 2xx: sent'],
	['amo_timeout', 'sent unknown 1 -', '1 0 1', 'amo_unknown: at_most_once, timeout after sending: unknown, never again'],
	['amo_reset', 'sent unknown 1 -', '1 0 1', 'amo_unknown: at_most_once, reset: unknown, never again'],
	['amo_s502', 'sent unknown 1 502', '1 0 1', 'amo_unknown: at_most_once, 502: unknown, never again'],
	['amo_s504', 'sent unknown 1 504', '1 0 1', 'amo_unknown: at_most_once, 504: unknown, never again'],
	['amo_s400', 'failed rejected 1 400', '1 0 1', 'amo_rejected: at_most_once, 400: rejected, failed at once'],
	['amo_s429', 'failed unreached 3 429', '3 0 1', 'amo_unreached_retry, then amo_unreached_out_of_tries: at_most_once, 429: retried (never reached), failed after max_tries'],
	['amo_refused', 'failed unreached 3 -', '0 0 0', 'amo_unreached_retry, then amo_unreached_out_of_tries: at_most_once, connection refused: retried, failed after max_tries'],
	['alo_ok', 'sent accepted 1 200', '1 1 1', 'alo_accepted: at_least_once, 2xx: sent'],
	['alo_timeout', 'failed unknown 3 -', '3 0 1', 'alo_retry, then alo_out_of_tries: at_least_once, timeout: retried up to max_tries, then failed'],
	['alo_s502', 'failed unknown 3 502', '3 0 1', 'alo_retry, then alo_out_of_tries: at_least_once, 502: retried up to max_tries, then failed'],
	['alo_s504', 'failed unknown 3 504', '3 0 1', 'alo_retry, then alo_out_of_tries: at_least_once, 504: retried up to max_tries, then failed'],
	['alo_s400', 'failed rejected 1 400', '1 0 1', 'alo_rejected: at_least_once, 400: rejected, failed at once'],
	['alo_s429', 'failed unreached 3 429', '3 0 1', 'alo_retry, then alo_out_of_tries: at_least_once, 429: retried, failed after max_tries'],
	['alo_refused', 'failed unreached 3 -', '0 0 0', 'alo_retry, then alo_out_of_tries: at_least_once, connection refused: retried, failed after max_tries'],
);
for my $r (@rows)
{
	my ($type, $job, $ledger, $name) = @$r;
	is(job_row($node, $id{$type}), $job, "$name (job)");
	is(ledger_key($sim, "$type:7:order-1"), $ledger, "$name (provider ledger)");
}

# a reset is retried by at_least_once (libcurl may itself re-send a request
# that died on a reused connection: at least three copies reached it)
is(job_row($node, $id{alo_reset}), 'failed unknown 3 -', 'at_least_once, reset: retried up to max_tries, then failed');
cmp_ok((split / /, ledger_key($sim, 'alo_reset:7:order-1'))[0], '>=', 3,
	'at_least_once, reset: the provider received every try');

# one notif_calls row per call
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM notif_job j
		 WHERE j.tries <> (SELECT count(*) FROM notif_calls a WHERE a.job_id = j.id)}),
	'0', 'one notif_calls row per call');
# a first call that was accepted is held by its job row alone; every other
# call has its notif_attempt row
is( $node->safe_psql('postgres', qq{
		SELECT (SELECT count(*) FROM notif_attempt WHERE job_id IN ($id{amo_ok}, $id{alo_ok}))
		       || ' ' || string_agg(c.outcome || ' ' || c.http_status || ' '
		                            || (c.started_at <= c.ended_at AND c.ended_at <= now()), ',')
		  FROM notif_calls c WHERE c.job_id IN ($id{amo_ok}, $id{alo_ok})}),
	'0 accepted 200 true,accepted 200 true',
	'a first call that was accepted: no notif_attempt row; notif_calls shows it, with its times');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM notif_job j
		 WHERE j.tries + j.earlier_tries >= 1 AND j.claimed_by IS NULL
		   AND NOT (j.tries + j.earlier_tries = 1 AND j.outcome = 'accepted')
		   AND j.tries <> (SELECT count(*) FROM notif_attempt a WHERE a.job_id = j.id)}),
	'0', 'every other call has its notif_attempt row');
is( $node->safe_psql('postgres', qq{
		SELECT string_agg(outcome || ':' || coalesce(http_status::text, '-'), ',' ORDER BY try)
		  FROM notif_calls WHERE job_id = $id{alo_s502}}),
	'unknown:502,unknown:502,unknown:502', 'the attempts of a retried job');

# Retry-After on 429 is honoured: tries at least a second apart
is( $node->safe_psql('postgres', qq{
		SELECT bool_and(gap >= interval '900 ms') FROM (
		  SELECT started_at - lag(started_at) OVER (ORDER BY try) AS gap
		    FROM notif_calls WHERE job_id = $id{alo_s429}) g WHERE gap IS NOT NULL}),
	't', '429 with Retry-After: 1 is retried no sooner than a second later');

# Retry-After on a 503 is honoured too (and a 503 is ambiguous: unknown)
set_provider($node, 'p_s503', $sim->{url},
	headers => q('{"X-Sim-Fault": "503", "X-Sim-Retry-After": "1"}'),
	idempotency_header => q('Idempotency-Key'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
	VALUES ('alo_s503', 'at_least_once', 2, 'p_s503', '100 ms', '200 ms')});
my $s503 = $node->safe_psql('postgres', q{SELECT notif_enqueue(7, 'alo_s503', 'order-1', '{"text":"x"}')});
ok(wait_until($node, "SELECT status = 'failed' AND claimed_by IS NULL FROM notif_job WHERE id = $s503"),
	'at_least_once, 503: retried, then failed');
is(job_row($node, $s503), 'failed unknown 2 503', 'at_least_once, 503: unknown, as any 5xx');
is( $node->safe_psql('postgres', qq{
		SELECT max(started_at) - min(started_at) >= interval '900 ms' FROM notif_calls WHERE job_id = $s503}),
	't', '503 with Retry-After: 1 is retried no sooner than a second later');

# a 502 carries its error text; a refused connection says so
like($node->safe_psql('postgres', "SELECT last_error FROM notif_job WHERE id = $id{alo_s502}"),
	qr/^HTTP 502/, 'last_error names the HTTP status');
like($node->safe_psql('postgres', "SELECT last_error FROM notif_job WHERE id = $id{alo_refused}"),
	qr/(?i)connect/, 'last_error says the connection failed');

# --- a timeout, then success: one key and one body on every attempt ---
set_provider($node, 'p_flaky', $sim->{url},
	headers => q('{"X-Sim-Fault": "timeout", "X-Sim-Fail-First": "1"}'),
	idempotency_header => q('Idempotency-Key'),
	timeout => q('600 ms'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max)
	VALUES ('alo_flaky', 'at_least_once', 3, 'p_flaky', '100 ms', '200 ms')});
my $flaky = $node->safe_psql('postgres',
	q{SELECT notif_enqueue(7, 'alo_flaky', 'order-1', '{"to":"+84900000007","text":"Ma OTP: 482913"}')});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $flaky"),
	'at_least_once, a timeout then a 2xx: sent');
is(job_row($node, $flaky), 'sent accepted 2 200', 'the second try was accepted');
is(ledger_key($sim, 'alo_flaky:7:order-1'), '2 1 1',
	'both attempts carried the same key and the same body bytes');

# --- the provider dies with the request on a kept-alive connection ---
# A one-connection server: answers the first request, stops listening, reads
# the second and closes without an answer (as a gateway killed mid-call).
# libcurl re-sends the second request on a fresh connection, which is
# refused: that is no proof the request never arrived (it did), so the
# call is 'unknown', not 'unreached'.
my $die_port = PostgreSQL::Test::Cluster::get_free_port();
my $got_file = PostgreSQL::Test::Utils::tempdir() . '/second_request';
my $listener = IO::Socket::INET->new(
	LocalAddr => '127.0.0.1',
	LocalPort => $die_port,
	Proto => 'tcp',
	Listen => 5,
	ReuseAddr => 1) or die "listen on $die_port: $!";
my $die_pid = fork();
die "fork: $!" unless defined $die_pid;
if ($die_pid == 0)
{
	my $c = $listener->accept;
	# one request: the head, then Content-Length bytes of body
	my $read_request = sub {
		my $buf = '';
		while ($buf !~ /\r\n\r\n/) { sysread($c, $buf, 4096, length $buf) or return undef; }
		my ($head, $body) = split /\r\n\r\n/, $buf, 2;
		my ($len) = $head =~ /^Content-Length:\s*(\d+)/mi;
		while (length($body) < ($len // 0)) { sysread($c, $body, 4096, length $body) or last; }
		return $head;
	};
	$read_request->();
	syswrite($c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
	close $listener;
	my $second = $read_request->();
	if (open(my $f, '>', $got_file)) { print $f $second // ''; close $f; }
	close $c;
	POSIX::_exit(0);
}
close $listener;
set_provider($node, 'p_dies', "http://127.0.0.1:$die_port/send", idempotency_header => q('Idempotency-Key'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, lane)
	VALUES ('alo_dies', 'at_least_once', 1, 'p_dies', 'dies')});
my $first = $node->safe_psql('postgres', q{SELECT notif_enqueue(7, 'alo_dies', 'first', '{"text":"x"}')});
ok(wait_until($node, "SELECT status = 'sent' AND claimed_by IS NULL FROM notif_job WHERE id = $first"),
	'provider dies mid-call: the first job went out and kept its connection');
my $second = $node->safe_psql('postgres', q{SELECT notif_enqueue(7, 'alo_dies', 'second', '{"text":"x"}')});
ok(wait_until($node, "SELECT status <> 'queued' AND claimed_by IS NULL FROM notif_job WHERE id = $second"),
	'provider dies mid-call: the second job finished');
waitpid($die_pid, 0);
like(slurp_file($got_file), qr/^Idempotency-Key: alo_dies:7:second/mi,
	'provider dies mid-call: the second request reached it on the kept-alive connection');
is(job_row($node, $second), 'failed unknown 1 -',
	'provider dies mid-call, re-send refused: unknown (it may have acted), not unreached');

done_testing();
