# 041_circuit_breaker.pl: a provider's circuit breaker (sender/breaker.c;
# notif_provider.breaker_threshold and breaker_cooldown, the view
# notif_provider_health).  While it is open no call to the provider starts
# and its jobs wait without spending tries, their deadlines holding; a call
# claimed before it opened is put back without a try (the lifecycle row
# alo_breaker_open); after the cooldown one probe call closes it, and the
# jobs that waited go out, each delivered once.  NULL: no breaker, every job
# spends its tries as in 1.3.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('circuit_breaker');
my $sim = start_sim('--lookup-latency-ms', '3000');
my $status = $sim->{url} =~ s{/send$}{/status/{key}}r;
# a port nobody listens on: every connection is refused
my $closed = 'http://127.0.0.1:' . PostgreSQL::Test::Cluster::get_free_port() . '/send';

sub health_of
{
	my ($n, $name) = @_;
	return $n->safe_psql('postgres',
		"SELECT state || ' ' || consecutive_failures || ' ' || refused_calls || ' ' || coalesce(last_error, '-')"
		  . " FROM notif_provider_health WHERE name = '$name'");
}

sub health { return health_of($node, $_[0]); }

# --- the settings are checked ---
my ($rc, $out, $err) = $node->psql('postgres',
	q{UPDATE notif_provider SET breaker_threshold = 0 WHERE name = 'default'});
like($err, qr/violates check constraint "notif_provider_breaker_threshold_check"/,
	'a breaker_threshold of 0 is refused (NULL means no breaker)');
($rc, $out, $err) = $node->psql('postgres',
	q{UPDATE notif_provider SET breaker_cooldown = '0 s' WHERE name = 'default'});
like($err, qr/violates check constraint "notif_provider_breaker_cooldown_check"/,
	'a breaker_cooldown of 0 is refused');
is($node->safe_psql('postgres',
		q{SELECT breaker_threshold || ' ' || breaker_cooldown FROM notif_provider WHERE name = 'default'}),
	'5 00:00:10', 'a provider opens its breaker after 5 failures in a row, probes after 10 s');
is(health('default'), 'closed 0 0 -', 'notif_provider_health lists a provider no sender uses, closed');

# --- a provider that refuses every connection: the breaker opens, jobs wait, deadlines hold ---
set_provider($node, 'down', $closed, breaker_threshold => 2, breaker_cooldown => q('1 hour'),
	connect_timeout => q('500 ms'));
set_provider($node, 'unguarded', $closed, breaker_threshold => 'NULL');
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, backoff_min, backoff_max) VALUES
		('otp_down', 'at_least_once', 4, '4 s', 'down', '100 ms', '200 ms'),
		('promo_down', 'at_most_once', 3, NULL, 'down', '100 ms', '200 ms'),
		('promo_unguarded', 'at_most_once', 2, NULL, 'unguarded', '100 ms', '200 ms');
	SELECT notif_enqueue(g, 'otp_down', 'o' || g, '{"text": "code"}') FROM generate_series(1, 5) g;
	SELECT notif_enqueue(g, 'promo_down', 'p' || g, '{"text": "sale"}') FROM generate_series(1, 5) g;
	SELECT notif_enqueue(g, 'promo_unguarded', 'u' || g, '{"text": "sale"}') FROM generate_series(1, 3) g;
});
ok(wait_until($node, q{SELECT state = 'open' FROM notif_provider_health WHERE name = 'down'}),
	'the breaker of a provider that refuses connections opens');
like(health('down'), qr/^open ([2-9]|[1-9]\d+) \d+ .*connect/i,
	'notif_provider_health: open, the failures in a row, the last error');
ok(wait_until($node,
		q{SELECT count(*) FILTER (WHERE status = 'queued' AND claimed_by IS NULL) || ' ' || count(*) FILTER (WHERE tries <= 1)
		    FROM notif_job WHERE kind IN ('otp_down', 'promo_down')}, '10 10'),
	'while it is open every job waits, queued, having spent at most its first try');
# which promotions spent a try before it opened depends on the senders' order
my $promo_tries = $node->safe_psql('postgres',
	q{SELECT sum(tries) FROM notif_job WHERE kind = 'promo_down'});
ok(wait_until($node, q{SELECT count(*) = 5 FROM notif_job WHERE kind = 'otp_down' AND status = 'expired'}),
	'the OTPs still expire at their deadline (claim_late)');
is($node->safe_psql('postgres',
		q{SELECT count(*) FILTER (WHERE status = 'queued') || ' ' || sum(tries)
		    FROM notif_job WHERE kind = 'promo_down'}),
	"5 $promo_tries", 'the promotions, with no deadline, still wait, no try spent while it is open');
ok(wait_until($node, q{SELECT count(*) = 3 FROM notif_job WHERE kind = 'promo_unguarded' AND status = 'failed' AND tries = 2}),
	'a provider without a breaker (NULL): each job spends its tries and fails, as before');
is(health('unguarded'), 'closed 0 0 -', '  and shows closed, no failures counted');

# --- an answer says the provider is there: a 4xx or a 429 never opens it ---
set_provider($node, 'busy', $sim->{url}, breaker_threshold => 2, headers => q('{"X-Sim-Fault": "429"}'));
set_provider($node, 'picky', $sim->{url}, breaker_threshold => 2, headers => q('{"X-Sim-Fault": "400"}'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max) VALUES
		('promo_busy', 'at_most_once', 3, 'busy', '50 ms', '100 ms'),
		('promo_picky', 'at_most_once', 3, 'picky', '50 ms', '100 ms');
	SELECT notif_enqueue(g, 'promo_busy', 'b' || g, '{"text": "sale"}') FROM generate_series(1, 3) g;
	SELECT notif_enqueue(g, 'promo_picky', 'k' || g, '{"text": "sale"}') FROM generate_series(1, 3) g;
});
ok(wait_until($node, q{SELECT count(*) = 6 FROM notif_job WHERE kind IN ('promo_busy', 'promo_picky') AND status = 'failed'}),
	'nine 429s and three 400s: every job ended as without a breaker');
is(health('busy') . ', ' . health('picky'), 'closed 0 0 -, closed 0 0 -',
	'and neither breaker counted them: the provider answered');

# --- a call claimed before the breaker opened is put back without a try (alo_breaker_open) ---
# Every call is answered 5xx, undelivered (an ambiguous outcome, counted).
# The alert's first call ends unknown; its retry asks the status lookup
# first (answered after 3 s), and meanwhile three promotions' calls, each
# answered at once, open the breaker: when the lookup has answered, the
# call is refused.
sim_get($sim, '/config?p_5xx=1');
set_provider($node, 'gw', $sim->{url}, breaker_threshold => 3, breaker_cooldown => q('8 s'),
	timeout => q('5 s'), idempotency_header => q('Idempotency-Key'), lookup_url => qq('$status'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, backoff_min, backoff_max) VALUES
		('alert', 'at_least_once', 5, '1 minute', 'gw', '100 ms', '100 ms'),
		('promo', 'at_most_once', 3, NULL, 'gw', '100 ms', '200 ms');
});
my $alert = $node->safe_psql('postgres', q{SELECT notif_enqueue(1, 'alert', 'a1', '{"text": "paid"}')});
ok(wait_until($node, qq{SELECT tries = 2 FROM notif_job WHERE id = $alert}),
	'the alert\'s first call ended unknown; its retry was claimed (the lookup asked first)');
$node->safe_psql('postgres',
	q{SELECT notif_enqueue(g, 'promo', 'q' || g, '{"text": "sale"}') FROM generate_series(1, 3) g});
ok(wait_until($node, q{SELECT state <> 'closed' FROM notif_provider_health WHERE name = 'gw'}),
	'three more calls in a row answered 5xx: the breaker opened');
ok(wait_until($node, qq{SELECT last_error = 'the provider''s circuit breaker is open: not called' FROM notif_job WHERE id = $alert}),
	'the alert\'s call, due after its lookup, was refused by the open breaker');
is($node->safe_psql('postgres',
		qq{SELECT status || ' ' || outcome || ' ' || tries || ' ' || (next_at > now())
		     || ' ' || (SELECT count(*) FROM notif_attempt WHERE job_id = $alert) FROM notif_job WHERE id = $alert}),
	'queued unknown 1 true 1',
	'alo_breaker_open: queued again, its try given back, its last call\'s outcome kept, no attempt recorded, due later');
like(health('gw'), qr/^(open|half_open) ([3-9]|[1-9]\d+) [1-9]\d* HTTP 5\d\d$/, 'the refused call is counted in refused_calls; the last error is the status alone, never the answer\'s body');

# --- the provider recovers: one probe closes the breaker, the waiting jobs go out ---
sim_get($sim, '/config?p_5xx=0');
ok(wait_until($node, q{SELECT state = 'closed' FROM notif_provider_health WHERE name = 'gw'}),
	'after the cooldown a probe call was answered: closed');
ok(wait_until($node, qq{SELECT status = 'sent' FROM notif_job WHERE id = $alert}), 'the alert is sent');
my $l = ledger($sim);
is($l->{'alert:1:a1'}{delivered}, 1, 'delivered once: the call the breaker refused never left');
is($node->safe_psql('postgres',
		q{SELECT string_agg(status || '/' || outcome, ' ' ORDER BY order_id) FROM notif_job WHERE kind = 'promo'}),
	'sent/unknown sent/unknown sent/unknown',
	'the promotions whose calls ended 5xx are not sent again (at_most_once)');
like(health('gw'), qr/^closed 0 [1-9]\d* HTTP 5\d\d$/, 'closed: no failure in a row; the refused calls and the last error stay shown');

# --- a probe that never reached the provider gives its try back (alo_probe_unreached) ---
# Down for longer than max_tries cooldowns: without it, the probes would
# spend the OTP's tries, one per cooldown, and fail it while it waits.
for my $name ('flaky', 'flaky_p')
{
	set_provider($node, $name, $closed, breaker_threshold => 1, breaker_cooldown => q('1 s'),
		idempotency_header => q('Idempotency-Key'), connect_timeout => q('500 ms'));
}
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, backoff_min, backoff_max) VALUES
		('otp_probe', 'at_least_once', 2, '1 minute', 'flaky', '100 ms', '100 ms'),
		('promo_probe', 'at_most_once', 2, NULL, 'flaky_p', '100 ms', '100 ms')});
my $otp = $node->safe_psql('postgres', q{SELECT notif_enqueue(7, 'otp_probe', 'p7', '{"text": "code"}')});
my $promo = $node->safe_psql('postgres', q{SELECT notif_enqueue(7, 'promo_probe', 'p7', '{"text": "sale"}')});
ok(wait_until($node, q{SELECT bool_and(consecutive_failures >= 3) FROM notif_provider_health WHERE name IN ('flaky', 'flaky_p')}),
	'each job\'s first call opened its provider\'s breaker; two probes since met it down');
# between two probes (a probe holds it for a moment)
ok(wait_until($node,
		qq{SELECT status || ' ' || tries || ' ' || outcome || ' ' || (SELECT count(*) FROM notif_attempt WHERE job_id = $otp)
		     FROM notif_job WHERE id = $otp}, 'queued 1 unreached 1'),
	'alo_probe_unreached: the OTP still waits with the one try its first call spent; no attempt row per probe');
ok(wait_until($node,
		qq{SELECT status || ' ' || tries || ' ' || outcome FROM notif_job WHERE id = $promo}, 'queued 1 unreached'),
	'amo_probe_unreached: so does the promotion, its one try kept');
$node->safe_psql('postgres', qq{UPDATE notif_provider SET url = '$sim->{url}' WHERE name IN ('flaky', 'flaky_p')});
ok(wait_until($node, qq{SELECT status = 'sent' FROM notif_job WHERE id = $otp}),
	'the provider is back: the next probe delivers the OTP');
is($node->safe_psql('postgres',
		qq{SELECT string_agg(try || ':' || outcome, ' ' ORDER BY try) FROM notif_calls WHERE job_id = $otp})
	  . ' ' . $node->safe_psql('postgres', qq{SELECT tries FROM notif_job WHERE id = $otp}),
	'1:unreached 2:accepted 2', 'its calls: the first, unreached, and the probe that was answered, its second try');
is(ledger($sim)->{'otp_probe:7:p7'}{delivered}, 1, 'delivered once');
ok(wait_until($node, qq{SELECT status || ' ' || outcome || ' ' || tries FROM notif_job WHERE id = $promo}, 'sent accepted 2'),
	'the promotion too, at its second try');
is(health('flaky') =~ s/ .*//r, 'closed', 'the answered probe closed the breaker');

# --- an at_most_once call claimed before the breaker opened is put back
# without a try (amo_breaker_open).  Its claim's commit waits for a
# synchronous standby (an at_most_once claim always does; the server's
# synchronous_commit is local, so nothing else waits) that is named but
# absent; meanwhile another lane's two calls answered 503 open the
# breaker; then the standby is no longer required, the wait ends and the
# claimed call meets the open breaker. ---
my $sync = new_node('breaker_sync', synchronous_commit => 'local', max_wal_senders => '2', wal_level => 'replica',
	synchronous_standby_names => q('nobody'));
my $sim_s = start_sim();
set_provider($sync, 'gw_s', $sim_s->{url}, breaker_threshold => 2, breaker_cooldown => q('1 hour'),
	idempotency_header => q('Idempotency-Key'), headers => q('{"X-Sim-Fault": "503"}'));
$sync->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, provider, lane, backoff_min, backoff_max) VALUES
		('promo_s', 'at_most_once', 3, 'gw_s', 'promos', '100 ms', '200 ms'),
		('alert_s', 'at_least_once', 5, 'gw_s', 'alerts', '10 s', '10 s')});
my $held = $sync->safe_psql('postgres', q{SELECT notif_enqueue(1, 'promo_s', 's1', '{"text": "sale"}')});
ok($sync->poll_query_until('postgres',
		q{SELECT state = 'waiting for synchronous replication' FROM notif_workers() WHERE lane = 'promos'}),
	'the promotion\'s claim waits for the synchronous standby; its call has not started');
$sync->safe_psql('postgres', q{SELECT notif_enqueue(g, 'alert_s', 'a' || g, '{"text": "paid"}') FROM generate_series(1, 2) g});
ok($sync->poll_query_until('postgres', q{SELECT state = 'open' FROM notif_provider_health WHERE name = 'gw_s'}),
	'two alerts answered 503: the breaker opened');
$sync->safe_psql('postgres', q{ALTER SYSTEM SET synchronous_standby_names = ''; SELECT pg_reload_conf()});
ok($sync->poll_query_until('postgres',
		qq{SELECT status || ' ' || tries || ' ' || coalesce(outcome, '-') || ' ' || last_error FROM notif_job WHERE id = $held},
		'queued 0 - the provider\'s circuit breaker is open: not called'),
	'amo_breaker_open: the claimed promotion went back to the queue, its try given back, not called');
is(ledger_key($sim_s, 'promo_s:1:s1'), '0 0 0', 'the provider never got it');
like(health_of($sync, 'gw_s'), qr/^open 2 [1-9]\d* HTTP 503$/, 'the refused call is counted in refused_calls');

done_testing();
