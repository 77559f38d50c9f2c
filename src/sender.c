/*-------------------------------------------------------------------------
 *
 * sender.c
 *      A lane's sender: a background worker that claims the due jobs of its
 *      lane's types, calls their providers (many calls in flight, http.c),
 *      and records what each call did, putting each COMMIT where the type's
 *      delivery demands.
 *
 * One round is one short transaction: record the results of the calls that
 * ended (job_state.c says what each job becomes), then claim due jobs
 * (FOR UPDATE SKIP LOCKED, higher type priority first, up to the lane's and
 * the providers' limits).  The round commits, and only then do the claimed
 * calls start: so an at_most_once job is committed 'sent' (durably, even
 * under synchronous_commit = off) before its request leaves, and an
 * at_least_once job is committed 'sending' before, and 'sent' only in a
 * round after its 2xx arrived.  No transaction is open
 * while calls are in flight.
 *
 * The sender sleeps on one WaitEventSet: its latch (set by an enqueue's
 * commit, a configuration change, a signal), libcurl's sockets, and a
 * timeout (libcurl's timer, the next due job, notif_deliver.poll_interval).
 *
 * At start it recovers the jobs that a previous sender of these types left
 * in flight (held by an incarnation that is no longer running): their call
 * ended 'unknown', and job_state.c decides (at_least_once: tried again,
 * counting the try; at_most_once: never again).  On SIGTERM it drops its
 * calls, records them the same way, and exits within the second.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "access/xact.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "delivery.h"
#include "job_sql.h"
#include "notif_deliver.h"
#include "push.h"
#include "throttle.h"

#define MAX_LIVE_SENDERS 256
#define ERROR_BACKOFF_MAX_MS 30000

static NotifLaneSlot *slot;
static char lane[NOTIF_NAME_MAXLEN];
static int64 incarnation;

/* the lane's types, re-read when a configuration change commits */
static MemoryContext config_cxt;
static NotifTypeConf *types;
static int	n_types;
static uint64 config_generation;
static bool config_stale = true;

static MemoryContext calls_cxt;		/* parent of every call's context */
static MemoryContext round_cxt;		/* reset after every round */
static dlist_head finished = DLIST_STATIC_INIT(finished);	/* to record */
static dlist_head claimed = DLIST_STATIC_INIT(claimed); /* to start */
static bool need_recovery = true;
static int	pending_grant_slot = -1;	/* provider slots granted to a claim */
static int	pending_grant = 0;	/* not yet turned into calls */

static TimestampTz claim_at = 0;	/* next claim round; 0: as soon as room */
static TimestampTz backoff_until = 0;	/* after an error */
static int	n_errors = 0;
static char *last_error = NULL;
static bool activity_stale = true;	/* pg_stat_activity needs a new report */
static TimestampTz idle_since = 0;	/* nothing in flight since; 0: busy */
static bool trim_pending = false;	/* sent since the last heap trim */

#define TRIM_AFTER_IDLE_MS 1000

/*
 * At exit, however it happens: give back the provider slots this process
 * holds, and the lane slot (unless the launcher gave it to another lane).
 */
static void
sender_detach(int code, Datum arg)
{
	bool		mine;

	notif_throttle_release_all();
	SpinLockAcquire(&notif_shared->mutex);
	mine = (slot->pid == MyProcPid);
	if (mine)
	{
		slot->pid = 0;
		slot->latch = NULL;
		slot->incarnation = 0;
	}
	SpinLockRelease(&notif_shared->mutex);
	if (mine)
		pg_atomic_write_u32(&slot->inflight, 0);
}

static void
free_config(MemoryContext cxt, NotifTypeConf *t, int n)
{
	int			i;

	for (i = 0; i < n; i++)
		if (t[i].provider.headers)
			curl_slist_free_all(t[i].provider.headers);
	MemoryContextDelete(cxt);
}

/*
 * Re-read the lane's types.  The new configuration replaces the old only
 * once it is read whole: a failed read leaves the old one in place.  Jobs
 * left in flight by stopped senders are looked for again too (a type may
 * have moved into this lane, or been resumed).
 */
static void
reload_config(void)
{
	uint64		generation;
	MemoryContext cxt;
	NotifTypeConf *fresh;
	int			n;

	/* read the generation first: a change after this is seen next time */
	generation = pg_atomic_read_u64(&notif_shared->config_generation);
	cxt = AllocSetContextCreate(TopMemoryContext, "notif_deliver config",
								ALLOCSET_DEFAULT_SIZES);
	PG_TRY();
	{
		n = notif_sql_lane_types(lane, cxt, &fresh);
	}
	PG_CATCH();
	{
		MemoryContextDelete(cxt);
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (config_cxt)
		free_config(config_cxt, types, n_types);
	config_cxt = cxt;
	types = fresh;
	n_types = n;
	config_generation = generation;
	config_stale = false;
	need_recovery = true;
}

static NotifCall *
new_call(NotifTypeConf *type, NotifClaimedJob *job)
{
	MemoryContext cxt = AllocSetContextCreate(calls_cxt, "notif_deliver call",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	NotifCall  *call = palloc0(sizeof(NotifCall));
	char	   *key;

	call->cxt = cxt;
	call->job_id = job->id;
	call->tries = job->tries;
	call->earlier_tries = job->earlier_tries;
	call->claimed_status = pstrdup(job->status);
	call->delivery = strcmp(job->status, "sent") == 0 ? AT_MOST_ONCE : AT_LEAST_ONCE;
	call->deadline_at = job->deadline_at;
	call->policy = type->policy;
	call->timeout_ms = type->provider.timeout_ms;
	call->connect_timeout_ms = type->provider.connect_timeout_ms;
	key = psprintf("%s:" INT64_FORMAT ":%s", type->code, job->user_id, job->order_id);
	notif_build_request(call, &type->provider, key, job->payload);
	MemoryContextSwitchTo(old);
	return call;
}

static void
free_call(NotifCall *call)
{
	notif_free_request(call);
	MemoryContextDelete(call->cxt);
}

static bool
is_live(int64 incarnation, const int64 *live, int n_live)
{
	int			i;

	for (i = 0; i < n_live; i++)
		if (live[i] == incarnation)
			return true;
	return false;
}

/*
 * Recover the jobs left in flight by senders that are gone, of any type and
 * any lane.  A sender records its incarnation in shared memory before it
 * claims anything, so the senders alive are read again after the query: a
 * job claimed by a sender that started meanwhile is not touched.
 */
static void
recover_orphans(void)
{
	int64		live[MAX_LIVE_SENDERS];
	int			n_live = notif_live_incarnations(live, MAX_LIVE_SENDERS);
	NotifOrphanJob *orphans;
	NotifResult *results;
	TimestampTz now = GetCurrentTimestamp();
	int			n,
				i,
				k = 0;

	n = notif_sql_orphans(live, n_live, round_cxt, &orphans);
	if (n == 0)
		return;
	n_live = notif_live_incarnations(live, MAX_LIVE_SENDERS);

	results = palloc0(sizeof(NotifResult) * n);
	for (i = 0; i < n; i++)
	{
		NotifOrphanJob *o = &orphans[i];
		NotifDelivery delivery = strcmp(o->status, "sent") == 0 ? AT_MOST_ONCE : AT_LEAST_ONCE;
		NotifResult *r;

		if (is_live(o->claimed_by, live, n_live))
			continue;
		r = &results[k++];
		r->job_id = o->id;
		r->tries = o->tries;
		r->earlier_tries = o->earlier_tries;
		r->expected_status = o->status;
		r->claimed_by = o->claimed_by;
		r->outcome = OUTCOME_UNKNOWN;
		r->error = "the sender stopped during the call";
		r->started_at = o->claimed_at ? o->claimed_at : now;
		r->ended_at = now;
		r->next = notif_next_state(delivery, OUTCOME_UNKNOWN, o->tries, &o->policy,
								   now, o->deadline_at, 0);
	}
	if (k == 0)
		return;
	notif_sql_record(results, k, NULL);
	ereport(LOG,
			(errmsg("notif_deliver sender of lane \"%s\": recovered %d job(s) left in flight by a stopped sender",
					lane, k)));
}

/* The results of the finished calls, as job_sql.c records them. */
static int
finished_results(NotifResult **out)
{
	dlist_iter	iter;
	int			n = 0;
	NotifResult *results;
	TimestampTz now = GetCurrentTimestamp();

	dlist_foreach(iter, &finished)
		n++;
	results = palloc0(sizeof(NotifResult) * Max(n, 1));
	n = 0;
	dlist_foreach(iter, &finished)
	{
		NotifCall  *call = dlist_container(NotifCall, node, iter.cur);
		NotifResult *r = &results[n++];
		int64		retry_after = (call->http_status == 429 || call->http_status == 503)
		? call->retry_after_ms : 0;

		r->job_id = call->job_id;
		r->tries = call->tries;
		r->earlier_tries = call->earlier_tries;
		r->expected_status = call->claimed_status;
		r->claimed_by = incarnation;
		r->outcome = call->outcome;
		r->http_status = call->http_status;
		if (call->error && call->http_status != 0 && call->outcome != OUTCOME_ACCEPTED)
			r->error = psprintf("HTTP %ld%s%s", call->http_status,
								call->error[0] ? ": " : "", call->error);
		else
			r->error = call->error;
		r->started_at = call->started_at;
		r->ended_at = call->ended_at;
		r->next = notif_next_state(call->delivery, call->outcome, call->tries,
								   &call->policy, now, call->deadline_at, retry_after);
		if (call->delivery == AT_LEAST_ONCE && call->outcome == OUTCOME_ACCEPTED)
			r->sent_at = call->ended_at;
	}
	*out = results;
	return n;
}

/*
 * Claim due jobs, type by type in priority order, within the lane's room
 * and each provider's limits.  The calls are started after the commit.
 */
static void
claim_jobs(void)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz next = TimestampTzPlusMilliseconds(now, notif_poll_interval_ms);
	int			room = notif_max_inflight - notif_http_inflight();
	bool		more = false;
	int			i;

	for (i = 0; i < n_types; i++)
	{
		NotifTypeConf *type = &types[i];
		NotifClaimedJob *jobs;
		TimestampTz retry_at;
		int			want,
					granted,
					pslot,
					n,
					j,
					sendable = 0;

		if (type->provider.url == NULL)
			continue;			/* not configured: its jobs wait */
		if (!notif_push_auth_ready(&type->provider, now, false, &retry_at))
		{
			/* no token (push_auth.c): get one if jobs are due; they wait */
			TimestampTz due = notif_sql_next_due(type->code);

			if (due == 0 || due > now ||
				!notif_push_auth_ready(&type->provider, now, true, &retry_at))
			{
				if (due > now && due < next)
					next = due;
				if (retry_at != 0 && retry_at < next)
					next = retry_at;
				continue;
			}
		}
		if (room <= 0)
		{
			more = true;
			break;
		}
		want = Min(room, notif_batch_size);
		granted = notif_throttle_acquire(&type->provider, want, now, &retry_at, &pslot);
		if (retry_at != 0 && retry_at < next)
			next = retry_at;
		if (granted == 0)
			continue;

		/* if the claim fails, round_failed gives the grant back */
		pending_grant_slot = pslot;
		pending_grant = granted;
		n = notif_sql_claim(type->code, granted, incarnation, round_cxt, &jobs);
		for (j = 0; j < n; j++)
		{
			NotifCall  *call;

			if (strcmp(jobs[j].status, "expired") == 0)
				continue;
			call = new_call(type, &jobs[j]);
			call->provider_slot = pslot;
			dlist_push_tail(&claimed, &call->node);
			sendable++;
			pending_grant--;
		}
		notif_throttle_release(pslot, granted - sendable, true);
		pending_grant = 0;
		room -= sendable;

		if (n == granted)
		{
			/*
			 * There may be more due: claim again as soon as there is room
			 * (a call ends), or when the rate limit allows.
			 */
			if (retry_at == 0)
				more = true;
		}
		else
		{
			TimestampTz due = notif_sql_next_due(type->code);

			if (due != 0)
			{
				/* due now, yet not claimed (locked by another): not a spin */
				if (due <= now)
					due = TimestampTzPlusMilliseconds(now, 100);
				if (due < next)
					next = due;
			}
		}
	}
	claim_at = more ? 0 : next;
}

/* A claimed call that never started: record it with this outcome. */
static void
never_started(NotifCall *call, NotifOutcome outcome, const char *error)
{
	call->outcome = outcome;
	if (error)
		call->error = (char *) error;
	call->started_at = call->ended_at = GetCurrentTimestamp();
	notif_throttle_release(call->provider_slot, 1, false);
	dlist_push_tail(&finished, &call->node);
}

/* The claimed calls, once their claim has committed. */
static void
start_claimed(void)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &claimed)
	{
		NotifCall  *call = dlist_container(NotifCall, node, iter.cur);

		dlist_delete(&call->node);
		if (call->deadline_at != 0 && GetCurrentTimestamp() >= call->deadline_at)
			never_started(call, OUTCOME_NOT_STARTED,	/* none after the deadline */
						  "deadline passed before the attempt could start");
		else if (call->refused)
			never_started(call, OUTCOME_REJECTED, call->refused);	/* no call */
		else if (!notif_http_start(call))
			never_started(call, OUTCOME_UNREACHED, NULL);	/* nothing was sent */
		else
			pg_atomic_fetch_add_u32(&slot->inflight, 1);
	}
}

/* Take the calls libcurl finished; account for them. */
static void
collect_finished(void)
{
	NotifCall  *call;
	int			sent = 0;

	while ((call = notif_http_next_done()) != NULL)
	{
		if (notif_ends_sent(call->delivery, call->outcome))
			sent++;
		notif_throttle_release(call->provider_slot, 1, false);
		if (call->http_status == 429 && call->retry_after_ms > 0)
			notif_throttle_pause(call->provider_slot,
								 TimestampTzPlusMilliseconds(call->ended_at, call->retry_after_ms));
		pg_atomic_fetch_sub_u32(&slot->inflight, 1);
		pg_atomic_fetch_add_u64(&slot->sent, 1);
		dlist_push_tail(&finished, &call->node);
	}
	if (sent > 0)
		notif_count_sent(slot, sent);
}

/*
 * Show what the sender is doing, in notif_workers() and, at most once a
 * second, in pg_stat_activity; and trim the heap when it falls idle.
 */
static void
report_state(TimestampTz now)
{
	static NotifWorkerState reported = WORKER_STARTING;
	static TimestampTz reported_at = 0;
	int			inflight = notif_http_inflight();
	NotifWorkerState state;
	char		activity[128];

	if (now < backoff_until)
		state = WORKER_BACKING_OFF;
	else if (inflight > 0)
		state = WORKER_SENDING;
	else
		state = WORKER_IDLE;
	pg_atomic_write_u32(&slot->state, state);

	/*
	 * Idle for a second after sending: free the libcurl handles kept for
	 * reuse, and give the memory that calls freed back to the system (glibc
	 * keeps it, fragmented, and a sender's resident size would drift up
	 * after bursts).  Once per idle spell; wait_timeout_ms() wakes us.
	 */
	if (state != WORKER_IDLE)
	{
		idle_since = 0;
		if (state == WORKER_SENDING)
			trim_pending = true;
	}
	else if (idle_since == 0)
		idle_since = now;
	else if (trim_pending && TimestampDifferenceExceeds(idle_since, now, TRIM_AFTER_IDLE_MS))
	{
		notif_http_release_idle();
#ifdef __GLIBC__
		malloc_trim(0);
#endif
		trim_pending = false;
	}

	if (!activity_stale && state == reported &&
		(state != WORKER_SENDING || !TimestampDifferenceExceeds(reported_at, now, 1000)))
		return;
	activity_stale = false;
	reported = state;
	reported_at = now;
	switch (state)
	{
		case WORKER_SENDING:
			snprintf(activity, sizeof(activity),
					 "sending: %d calls in flight, " UINT64_FORMAT " jobs sent in the last minute",
					 inflight, notif_sent_last_minute(slot));
			pgstat_report_activity(STATE_RUNNING, activity);
			break;
		case WORKER_BACKING_OFF:
			pgstat_report_activity(STATE_IDLE, "backing off after an error (see the server log)");
			break;
		default:
			pgstat_report_activity(STATE_IDLE, "waiting for due jobs");
			break;
	}
}

/*
 * Let libcurl work, then take the calls it finished.  Always both: a call
 * that ends inside the drive (a fast provider answers while the batch is
 * still being sent) must be seen before the next wait, which knows nothing
 * of libcurl's finished calls and would otherwise sleep on sockets that
 * have nothing more to say.
 */
static void
drive_calls(bool sockets_ready)
{
	notif_http_drive(sockets_ready);
	collect_finished();
}

static void
discard_claimed(void)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &claimed)
	{
		NotifCall  *call = dlist_container(NotifCall, node, iter.cur);

		dlist_delete(&call->node);
		notif_throttle_release(call->provider_slot, 1, true);
		free_call(call);
	}
}

/*
 * An at_most_once claim must be durable before its call starts: were its
 * commit lost in a crash, the job would be claimed and sent again.  Under
 * synchronous_commit = off, make this round's commit wait for its WAL
 * flush (a transaction-local setting; stronger settings are kept).
 */
static void
make_claims_durable(void)
{
	dlist_iter	iter;

	if (synchronous_commit > SYNCHRONOUS_COMMIT_OFF)
		return;
	dlist_foreach(iter, &claimed)
	{
		NotifCall  *call = dlist_container(NotifCall, node, iter.cur);

		if (call->delivery == AT_MOST_ONCE)
		{
			(void) set_config_option("synchronous_commit", "local",
									 PGC_SUSET, PGC_S_SESSION,
									 GUC_ACTION_LOCAL, true, 0, false);
			return;
		}
	}
}

/*
 * One round: record, recover, claim, in one transaction; then start the
 * claimed calls.  On error the transaction rolls back, the results stay to
 * be recorded next time, nothing claimed is started.
 */
static void
sender_round(bool want_claim)
{
	NotifResult *results;
	int			n_results = 0;
	bool		installed;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "recording results and claiming jobs");

	installed = notif_sql_prepare();
	if (installed)
	{
		if (config_stale)
			reload_config();
		if (need_recovery)
			recover_orphans();
		n_results = finished_results(&results);
		notif_sql_record(results, n_results, NULL);
		notif_push_record_unregistered(&finished);
		if (want_claim && !ShutdownRequestPending)
			claim_jobs();
		make_claims_durable();
	}

	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	activity_stale = true;

	if (!installed)
	{
		/* the extension is gone: the launcher will stop us; do not spin */
		backoff_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
		return;
	}
	need_recovery = false;

	/* the results are committed: let their calls go */
	while (!dlist_is_empty(&finished))
		free_call(dlist_container(NotifCall, node, dlist_pop_head_node(&finished)));

	start_claimed();
	drive_calls(false);
	n_errors = 0;
	if (last_error)
	{
		pfree(last_error);
		last_error = NULL;
	}
}

/* Is the extension installed now?  (A transaction of its own.) */
static bool
extension_installed(void)
{
	bool		installed;

	StartTransactionCommand();
	installed = OidIsValid(get_extension_oid(NOTIF_EXTENSION_NAME, true));
	CommitTransactionCommand();
	return installed;
}

static void
round_failed(void)
{
	ErrorData  *edata;
	int64		delay;

	MemoryContextSwitchTo(round_cxt);
	edata = CopyErrorData();
	FlushErrorState();
	AbortCurrentTransaction();
	discard_claimed();
	notif_throttle_release(pending_grant_slot, pending_grant, true);
	pending_grant = 0;
	config_stale = true;
	activity_stale = true;

	/*
	 * A DROP EXTENSION that committed during the round is no error: the
	 * launcher stops this sender within a second.  Wait for it quietly.
	 */
	if (!extension_installed())
	{
		backoff_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
		return;
	}

	if (last_error == NULL || strcmp(last_error, edata->message) != 0)
	{
		ereport(LOG,
				(errmsg("notif_deliver sender of lane \"%s\": %s", lane, edata->message),
				 edata->detail ? errdetail_internal("%s", edata->detail) : 0,
				 errcontext("recording results and claiming jobs; retrying with backoff")));
		if (last_error)
			pfree(last_error);
		last_error = MemoryContextStrdup(TopMemoryContext, edata->message);
	}
	n_errors++;
	delay = Min((int64) ERROR_BACKOFF_MAX_MS, (int64) 100 << Min(n_errors, 10));
	backoff_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), delay);
}

static long
wait_timeout_ms(TimestampTz now, bool room)
{
	long		timeout = notif_poll_interval_ms;
	long		curl_ms = notif_http_timeout_ms();
	TimestampTz wake = 0;

	if (curl_ms >= 0 && curl_ms < timeout)
		timeout = curl_ms;
	if (backoff_until > now)
		wake = backoff_until;
	else if (!dlist_is_empty(&finished) || need_recovery || config_stale)
		return 0;
	else if (room)
		wake = claim_at;
	if (trim_pending && idle_since != 0)
	{
		TimestampTz trim_at = TimestampTzPlusMilliseconds(idle_since, TRIM_AFTER_IDLE_MS);

		if (wake == 0 || trim_at < wake)
			wake = trim_at;
	}
	if (wake != 0)
	{
		long		ms = (wake <= now) ? 0 : (long) ((wake - now + 999) / 1000);

		if (ms < timeout)
			timeout = ms;
	}
	return timeout;
}

/* SIGTERM: drop the calls in flight, record them as unknown, leave. */
static void
sender_shutdown(void)
{
	notif_http_abort_all("the sender stopped during the call (shutdown)");
	collect_finished();
	discard_claimed();
	if (!dlist_is_empty(&finished))
	{
		PG_TRY();
		{
			sender_round(false);
		}
		PG_CATCH();
		{
			/* left 'sending'/'sent' with a holder: the next sender recovers them */
			FlushErrorState();
			AbortCurrentTransaction();
		}
		PG_END_TRY();
	}
	ereport(LOG, (errmsg("notif_deliver sender of lane \"%s\" stopped", lane)));
	proc_exit(0);
}

void
notif_sender_main(Datum arg)
{
	int			slotno = DatumGetInt32(arg);
	WaitEventSet *wes;
	pid_t		other;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	notif_shmem_attach();
	slot = &notif_shared->lanes[slotno];
	incarnation = notif_new_incarnation();

	SpinLockAcquire(&notif_shared->mutex);
	other = slot->pid;
	SpinLockRelease(&notif_shared->mutex);
	if (other != 0 && kill(other, 0) == 0)
		proc_exit(0);			/* another sender serves this lane already */

	SpinLockAcquire(&notif_shared->mutex);
	if (!slot->in_use || (slot->pid != 0 && slot->pid != other))
	{
		/* the lane went away, or another sender just took it */
		SpinLockRelease(&notif_shared->mutex);
		proc_exit(0);
	}
	strlcpy(lane, slot->lane, sizeof(lane));
	slot->pid = MyProcPid;
	slot->latch = MyLatch;
	slot->incarnation = incarnation;
	SpinLockRelease(&notif_shared->mutex);
	before_shmem_exit(sender_detach, (Datum) 0);

	BackgroundWorkerInitializeConnection(notif_database, NULL, 0);
	SetConfigOption("search_path", "pg_catalog", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("application_name", psprintf("notif_deliver sender %s", lane),
					PGC_USERSET, PGC_S_OVERRIDE);
	pgstat_report_appname(psprintf("notif_deliver sender %s", lane));

	calls_cxt = AllocSetContextCreate(TopMemoryContext, "notif_deliver calls",
									  ALLOCSET_DEFAULT_SIZES);
	round_cxt = AllocSetContextCreate(TopMemoryContext, "notif_deliver round",
									  ALLOCSET_DEFAULT_SIZES);

	notif_http_init();
	wes = CreateWaitEventSet(TopMemoryContext, 3);
	AddWaitEventToSet(wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	AddWaitEventToSet(wes, WL_SOCKET_READABLE, notif_http_epoll_fd(), NULL, NULL);

	ereport(LOG, (errmsg("notif_deliver sender of lane \"%s\" started", lane)));

	for (;;)
	{
		WaitEvent	events[3];
		int			n,
					i;
		bool		sockets_ready = false;
		TimestampTz now;
		bool		room;
		volatile bool want_claim;

		now = GetCurrentTimestamp();
		report_state(now);
		room = notif_http_inflight() < notif_max_inflight;
		n = WaitEventSetWait(wes, wait_timeout_ms(now, room), events, lengthof(events),
							 PG_WAIT_EXTENSION);
		for (i = 0; i < n; i++)
		{
			if (events[i].events & WL_LATCH_SET)
			{
				ResetLatch(MyLatch);
				claim_at = 0;	/* woken: an enqueue committed, or a change */
			}
			if (events[i].events & WL_SOCKET_READABLE)
				sockets_ready = true;
		}
		/* a cancel request means nothing to an idle sender */
		QueryCancelPending = false;
		CHECK_FOR_INTERRUPTS();
		if (ShutdownRequestPending)
			sender_shutdown();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			claim_at = 0;
		}
		if (pg_atomic_read_u64(&notif_shared->config_generation) != config_generation)
			config_stale = true;

		drive_calls(sockets_ready);

		now = GetCurrentTimestamp();
		if (now < backoff_until)
			continue;
		room = notif_http_inflight() < notif_max_inflight;
		want_claim = room && claim_at <= now;
		if (!want_claim && dlist_is_empty(&finished) && !need_recovery && !config_stale)
			continue;

		PG_TRY();
		{
			sender_round(want_claim);
		}
		PG_CATCH();
		{
			round_failed();
		}
		PG_END_TRY();
		MemoryContextReset(round_cxt);
	}
}
