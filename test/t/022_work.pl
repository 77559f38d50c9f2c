# 022_work.pl: notif_active, the work apart from the history.  The queued
# and held jobs are in the unlogged notif_active, so that notif_job's status
# updates are heap-only; notif_job stays the truth.  After a crash
# PostgreSQL empties notif_active, and the launcher rebuilds it from
# notif_job before any sender claims; notif_active_rebuild() reconciles it
# by hand; a work row whose job is not queued is never claimed; a renamed
# type keeps its work; notif_cancel and notif_retry keep it exact; a user's
# lock on one job holds back that job only, queued or with its call in
# flight (its result waits, the lane goes on), or finished (the purge
# passes over it); a provider that leaves the lane and comes back while a
# call of its is in flight keeps its slot; a table lock is waited for a second at most (the round
# fails, logged once; SIGTERM stops the sender meanwhile); the sender's
# updates of a backlog are heap-only.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = new_node('work');
my $sim = start_sim();
set_provider($node, 'default', $sim->{url}, idempotency_header => q('Idempotency-Key'));
$node->safe_psql('postgres', q{
	INSERT INTO notif_type (code, delivery, max_tries, lane, paused)
	VALUES ('promo', 'at_most_once', 1, 'bulk', true),
	       ('otp', 'at_least_once', 3, 'otp', false)});

my $work = q{SELECT count(*) FROM notif_active};

# Poll the simulator until what(), one of its answers, is $want.
sub wait_sim
{
	my ($what, $want) = @_;
	my $until = time + $PostgreSQL::Test::Utils::timeout_default;
	while (time < $until)
	{
		return 1 if $what->() eq $want;
		usleep(10_000);
	}
	diag('the simulator says ' . $what->() . ", not $want");
	return 0;
}
# its counter NAME; its ledger's "received delivered bodies" of KEY
sub wait_stat { my ($name, $want) = @_; return wait_sim(sub { stats($sim)->{$name} }, $want); }
sub wait_ledger_key { my ($key, $want) = @_; return wait_sim(sub { ledger_key($sim, $key) }, $want); }

my $queued = q{SELECT count(*) FROM notif_job WHERE status = 'queued'};

# --- every new job is queued work; the work is the queued jobs exactly ---
$node->safe_psql('postgres',
	q{SELECT count(notif_enqueue(g, 'promo', 'crash', '{"text":"sale"}')) FROM generate_series(1, 300) g});
is($node->safe_psql('postgres', $work), '300', 'each enqueued job has its work row');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM notif_active a JOIN notif_job j ON j.id = a.job_id
	 WHERE a.kind = j.kind AND a.next_at = j.next_at AND a.claimed_by IS NULL AND j.status = 'queued'}),
	'300', 'with the job\'s kind and next_at, and no holder');

# --- a crash empties notif_active; the launcher rebuilds it before any claim ---
$node->stop('immediate');
my $log_offset = -s $node->logfile;
$node->start;
ok(wait_until($node, q{SELECT count(*) = 300 FROM notif_active}),
	'after an immediate stop, notif_active holds the queued jobs again');
ok(wait_until($node, q{SELECT count(*) = 1 FROM notif_active_built}), 'and is marked built');
like(slurp_file($node->logfile, $log_offset),
	qr/built notif_active from notif_job in database "postgres": 300 rows/,
	'the launcher logged the rebuild, once, with its count');
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code = 'promo'});
ok(wait_until($node, q{SELECT count(*) = 300 FROM notif_job WHERE kind = 'promo' AND status = 'sent' AND claimed_by IS NULL}),
	'every job of the rebuilt work was sent');
is(scalar(grep { /^promo:\d+:crash$/ } keys %{ ledger($sim) }), 300, 'the provider got each key');
ok(wait_until($node, "SELECT ($work) = 0"), 'and their work rows are gone');

# --- a queued job without its work row (loaded by COPY): rebuild finds it ---
# (due in an hour, so that no sender takes it meanwhile)
my $lost = $node->safe_psql('postgres',
	q{SELECT notif_enqueue(1, 'promo', 'copied', '{"text":"sale"}', now() + interval '1 hour')});
$node->safe_psql('postgres', "DELETE FROM notif_active WHERE job_id = $lost");
# a work row whose job is finished
my $done = $node->safe_psql('postgres', q{SELECT id FROM notif_job WHERE kind = 'promo' AND status = 'sent' LIMIT 1});
$node->safe_psql('postgres', "INSERT INTO notif_active (job_id, kind, next_at) VALUES ($done, 'promo', now() - interval '1 hour')");
is($node->safe_psql('postgres', q{SELECT notif_active_rebuild()}), '2',
	'notif_active_rebuild() adds the missing row and drops the stale one');
is($node->safe_psql('postgres', "SELECT string_agg(job_id::text, ',') FROM notif_active"), $lost,
	'the work is the one queued job');
is($node->safe_psql('postgres', q{SELECT notif_active_rebuild()}), '0', 'a second run finds nothing to change');

# a stale work row, due, is passed over by the claims: its job is not called again
$node->safe_psql('postgres', "INSERT INTO notif_active (job_id, kind, next_at) VALUES ($done, 'promo', now() - interval '1 hour')");
# the job made due in notif_job: the rebuild corrects its work row's next_at
$node->safe_psql('postgres', "UPDATE notif_job SET next_at = now() WHERE id = $lost");
is($node->safe_psql('postgres', q{SELECT notif_active_rebuild()}), '2',
	'the rebuild corrects a next_at (and drops the stale row again)');
$node->safe_psql('postgres', "INSERT INTO notif_active (job_id, kind, next_at) VALUES ($done, 'promo', now() - interval '1 hour')");
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $lost"), 'the found job was sent');
my $key_done = $node->safe_psql('postgres', "SELECT kind || ':' || user_id || ':' || order_id FROM notif_job WHERE id = $done");
is((split / /, ledger_key($sim, $key_done))[0], '1', 'the job behind the stale work row was not called again');
is($node->safe_psql('postgres', "SELECT status || ' ' || tries FROM notif_job WHERE id = $done"), 'sent 1',
	'nor claimed again');
$node->safe_psql('postgres', "DELETE FROM notif_active WHERE job_id = $done");

# --- a renamed type keeps its work ---
my $otp = $node->safe_psql('postgres',
	q{SELECT notif_enqueue(7, 'otp', 'renamed', '{"text":"Ma OTP: 7"}', now() + interval '1 hour')});
$node->safe_psql('postgres', q{UPDATE notif_type SET code = 'otp2' WHERE code = 'otp'});
is($node->safe_psql('postgres', "SELECT kind FROM notif_active WHERE job_id = $otp"), 'otp2',
	'the work row follows the rename');
$node->safe_psql('postgres', "UPDATE notif_job SET next_at = now() WHERE id = $otp");
$node->safe_psql('postgres', "UPDATE notif_active SET next_at = now() WHERE job_id = $otp");
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $otp"), 'and the job is sent');

# --- notif_cancel takes the work row away, notif_retry brings it back ---
my $c = $node->safe_psql('postgres',
	q{SELECT notif_enqueue(9, 'otp2', 'cancelled', '{"text":"Ma OTP: 9"}', now() + interval '1 hour')});
$node->safe_psql('postgres', "SELECT notif_cancel($c)");
is($node->safe_psql('postgres', "SELECT count(*) FROM notif_active WHERE job_id = $c"), '0',
	'a cancelled job has no work row');
# (looked at in notif_retry's transaction: once it commits, the job goes out)
is($node->safe_psql('postgres', "BEGIN; SELECT 1 FROM (SELECT notif_retry($c)) r;
	SELECT a.claimed_by IS NULL AND a.next_at = j.next_at FROM notif_active a JOIN notif_job j ON j.id = a.job_id
	 WHERE a.job_id = $c; COMMIT;"),
	"1\nt", 'a retried one is queued work again, due with its job');
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $c"), 'and is sent');

# --- a user's lock on one queued job holds back that job only ---
my $x = $node->safe_psql('postgres',
	q{SELECT notif_enqueue(10, 'otp2', 'locked', '{"text":"Ma OTP: 10"}', now() + interval '1 hour')});
my $y = $node->safe_psql('postgres',
	q{SELECT notif_enqueue(10, 'otp2', 'free', '{"text":"Ma OTP: 11"}', now() + interval '1 hour')});
my $bg = $node->background_psql('postgres');
$bg->query_safe('BEGIN');
$bg->query_safe("SELECT id FROM notif_job WHERE id = $x FOR SHARE");
# both due (by their work rows: the locked job's row cannot be updated now)
$node->safe_psql('postgres', "UPDATE notif_active SET next_at = now() WHERE job_id IN ($x, $y)");
$node->safe_psql('postgres', q{SELECT notif_wake_lane('otp')});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $y"),
	'the other job of the lane is sent while one is locked');
is($node->safe_psql('postgres', "SELECT status FROM notif_job WHERE id = $x"), 'queued',
	'the locked one waits, queued');
$bg->query_safe('COMMIT');
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $x"), 'and is sent once the lock is gone');

# --- a user's lock on a job whose call is in flight holds back its result only ---
# (the provider answers in 1 s; the lock is taken before the answer)
set_provider($node, 'slow', $sim->{url}, headers => q('{"X-Sim-Latency-Ms": "1000"}'),
	idempotency_header => q('Idempotency-Key'), timeout => q('10 s'));
$node->safe_psql('postgres', q{INSERT INTO notif_type (code, delivery, max_tries, lane, provider)
                               VALUES ('otp_slow', 'at_least_once', 3, 'otp', 'slow')});
ok(wait_config_read($node, 'otp'), 'the lane has the slow provider');
my $answered = stats($sim)->{answered};
my $held_log_at = -s $node->logfile;
my $held = $node->safe_psql('postgres', q{SELECT notif_enqueue(20, 'otp_slow', 'held', '{"text":"Ma OTP: 20"}')});
ok(wait_ledger_key('otp_slow:20:held', '1 1 1'), 'a result held back: the call reached the provider');
$bg->query_safe('BEGIN');
$bg->query_safe("SELECT id FROM notif_job WHERE id = $held FOR SHARE");
is(stats($sim)->{answered}, $answered, 'a result held back: locked before the provider answered');
ok(wait_stat('answered', $answered + 1), 'a result held back: the provider answered');
my $next = $node->safe_psql('postgres', q{SELECT notif_enqueue(21, 'otp2', 'next', '{"text":"Ma OTP: 21"}')});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $next"),
	'a result held back: the lane goes on (the next job is claimed, called and recorded)');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity
                                   WHERE application_name = 'notif_deliver sender otp' AND wait_event_type = 'Lock'}),
	'0', 'a result held back: the sender does not wait for the lock');
is($node->safe_psql('postgres', "SELECT status FROM notif_job WHERE id = $held"), 'sending',
	'a result held back: the locked job is still sending');
$bg->query_safe('COMMIT');
$bg->quit;
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $held"),
	'a result held back: recorded once the lock is gone');
is(job_row($node, $held) . ' ' . ledger_key($sim, 'otp_slow:20:held'), 'sent accepted 1 200 1 1 1',
	'a result held back: accepted at its only call, not sent again');
unlike(slurp_file($node->logfile, $held_log_at), qr/sender of lane "otp"/,
	'a result held back: nothing logged (the record passed over the lock at once)');

# --- a provider that leaves the lane with a call in flight and comes back
# before it ends keeps the lane's sender counted in its shared slot ---
set_provider($node, 'slower', $sim->{url}, headers => q('{"X-Sim-Latency-Ms": "5000"}'),
	idempotency_header => q('Idempotency-Key'), timeout => q('10 s'));
$node->safe_psql('postgres', q{INSERT INTO notif_type (code, delivery, max_tries, lane, provider)
                               VALUES ('otp_slower', 'at_least_once', 1, 'otp', 'slower')});
ok(wait_config_read($node, 'otp'), 'rejoin: the lane has the slower provider');
my $slot_of = q{SELECT coalesce(string_agg(senders || ' ' || in_flight, ','), 'none') FROM notif_provider_slots() WHERE provider = 'slower'};
my $before = stats($sim)->{answered};
my $rejoin = $node->safe_psql('postgres', q{SELECT notif_enqueue(23, 'otp_slower', 'rejoin', '{"text":"Ma OTP: 23"}')});
ok(wait_ledger_key('otp_slower:23:rejoin', '1 1 1'), 'rejoin: the call reached the provider');
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = true WHERE code = 'otp_slower'});
ok(wait_config_read($node, 'otp'), 'rejoin: the type paused, the provider left the lane');
is($node->safe_psql('postgres', $slot_of), '0 1', 'rejoin: its slot kept for the call in flight, no sender');
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code = 'otp_slower'});
ok(wait_config_read($node, 'otp'), 'rejoin: resumed, the provider is in the lane again');
is(stats($sim)->{answered}, $before, 'rejoin: before the provider answered');
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $rejoin"), 'rejoin: the call ended and was recorded');
is($node->safe_psql('postgres', $slot_of), '1 0', 'rejoin: the lane\'s sender counted in the slot again');
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = true WHERE code = 'otp_slower'});

# --- a user's lock on a finished job holds back its purge only ---
# (the finished jobs of otp2 last due in the past, the oldest locked)
my $due = $node->safe_psql('postgres', q{SELECT string_agg(id::text, ',' ORDER BY next_at) FROM notif_job
                                          WHERE kind = 'otp2' AND status = 'sent' AND next_at < now()});
my ($oldest) = split /,/, $due;
cmp_ok(scalar(split /,/, $due), '>=', 3, "a purge held back: finished jobs of otp2 past due ($due)");
$bg = $node->background_psql('postgres');
$bg->query_safe('BEGIN');
$bg->query_safe("SELECT id FROM notif_job WHERE id = $oldest FOR SHARE");
$node->safe_psql('postgres', q{UPDATE notif_type SET retention = '1 ms' WHERE code = 'otp2';
                               ALTER SYSTEM SET notif_deliver.purge_interval = '1s'; SELECT pg_reload_conf()});
ok(wait_until($node, "SELECT string_agg(id::text, ',') FROM notif_job WHERE id IN ($due)", $oldest),
	'a purge held back: the launcher purged every one of them but the locked one');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity
                                   WHERE backend_type = 'notif_deliver launcher' AND wait_event_type = 'Lock'}),
	'0', 'a purge held back: the launcher does not wait for the lock');
$bg->query_safe('COMMIT');
$bg->quit;
ok(wait_until($node, "SELECT count(*) = 0 FROM notif_job WHERE id IN ($due)"),
	'a purge held back: the locked one is purged once the lock is gone');
$node->safe_psql('postgres', q{ALTER SYSTEM RESET notif_deliver.purge_interval; SELECT pg_reload_conf()});

# --- a lock the workers must wait for (a table's) is waited for 1 s at most ---
# (lock_timeout: the round fails, logged once, and is tried again; SIGTERM
# is seen meanwhile)
my $sender_pid = $node->safe_psql('postgres', q{SELECT pid FROM notif_workers() WHERE lane = 'otp'});
my $log_at = -s $node->logfile;
$bg = $node->background_psql('postgres');
$bg->query_safe('BEGIN');
$bg->query_safe('LOCK TABLE notif_active IN ACCESS EXCLUSIVE MODE');
ok($node->poll_query_until('postgres', q{SELECT count(*) > 0 FROM pg_stat_activity
                                         WHERE application_name = 'notif_deliver sender otp' AND wait_event_type = 'Lock'}),
	'a table locked: the sender waits for it');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($sender_pid)");
ok(wait_until($node, "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $sender_pid"),
	'a table locked: the waiting sender stops on SIGTERM, the lock still held');
my $lock_log = slurp_file($node->logfile, $log_at);
my $timeouts = () = $lock_log =~ /sender of lane "otp": canceling statement due to lock timeout/g;
is($timeouts, 1, 'a table locked: the lock timeout logged once');
$bg->query_safe('COMMIT');
$bg->quit;
my $after = $node->safe_psql('postgres', q{SELECT notif_enqueue(22, 'otp_slow', 'after-lock', '{"text":"Ma OTP: 22"}')});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $after"),
	'a table locked: once it is released, a new sender sends the lane\'s jobs');

# --- a backlog's status updates are heap-only ---
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = true WHERE code = 'promo'});
$node->safe_psql('postgres', q{TRUNCATE notif_job CASCADE});
is($node->safe_psql('postgres', $work), '0', 'TRUNCATE notif_job empties notif_active too');
$node->safe_psql('postgres',
	q{SELECT count(notif_enqueue(g, 'promo', 'hot', '{"text":"sale"}')) FROM generate_series(1, 2000) g});
$node->safe_psql('postgres', q{SELECT pg_stat_reset_single_table_counters('notif_job'::regclass)});
$node->safe_psql('postgres', q{UPDATE notif_type SET paused = false WHERE code = 'promo'});
ok(wait_until($node, q{SELECT count(*) = 2000 FROM notif_job WHERE status = 'sent' AND claimed_by IS NULL}),
	'the backlog was sent');
# the sender reports its table statistics when idle
ok(wait_until($node, q{SELECT n_tup_upd >= 4000 FROM pg_stat_user_tables WHERE relname = 'notif_job'}),
	'its claims and results were counted: two updates per job');
my ($upd, $hot) = split /\|/, $node->safe_psql('postgres',
	q{SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'notif_job'});
cmp_ok($hot / $upd, '>=', 0.9, "at least 90% of them heap-only ($hot of $upd)");

done_testing();
