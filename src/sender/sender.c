/*-------------------------------------------------------------------------
 *
 * sender.c
 *      A lane's sender: a background worker that claims the due jobs of its
 *      lane's types, calls their providers (many calls in flight, http.c),
 *      and records what each call did (a round, sender/round.c).  This file
 *      is its start, its main loop and waits, and its exit.
 *
 * The sender sleeps on one WaitEventSet: its latch (set by an enqueue's
 * commit, a configuration change, a signal), libcurl's sockets, and a
 * timeout (libcurl's timer, the next due job, notif_deliver.poll_interval,
 * or the end of a round held back for more results: sender/batch.c).
 *
 * At start it recovers the jobs that a previous sender left in flight
 * (held by an incarnation that is no longer running): job_state.c's
 * "sender lost" rows say what they become.  On SIGTERM it drops its calls,
 * records them, and exits within the second.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "sender/commit.h"
#include "core/pg_compat.h"
#include "http/http.h"
#include "sender/lookup.h"
#include "sender/sender.h"
#include "sender/throttle.h"
#include "store/job_sql.h"

NotifSender sender = {
	.claimed = DLIST_STATIC_INIT(sender.claimed),
	.finished = DLIST_STATIC_INIT(sender.finished),
	.passed = DLIST_STATIC_INIT(sender.passed),
	.config_stale = true,
	.need_recovery = true,
	.activity_stale = true,
	.reported = WORKER_STARTING,
	.grant_slot = -1,
};

/*
 * At exit, however it happens: give back the provider slots this process
 * holds, and the lane slot (unless the launcher gave it to another lane).
 */
static void
sender_detach(int code, Datum arg)
{
	NotifLaneSlot *slot = sender.slot;
	bool		mine;

	notif_throttle_release_all(slot);
	LWLockAcquire(notif_shared->lanes_lock, LW_EXCLUSIVE);
	mine = (slot->pid == MyProcPid);
	if (mine)
	{
		slot->pid = 0;
		slot->latch = NULL;
		slot->incarnation = 0;
	}
	LWLockRelease(notif_shared->lanes_lock);
	if (mine)
		pg_atomic_write_u32(&slot->inflight, 0);
}

/*
 * Take the lane slot the launcher started us for, unless another sender
 * serves it already (then exit quietly).
 */
static void
take_lane_slot(int slotno)
{
	NotifLaneSlot *slot = &notif_shared->lanes[slotno];
	pid_t		other;

	LWLockAcquire(notif_shared->lanes_lock, LW_SHARED);
	other = slot->pid;
	LWLockRelease(notif_shared->lanes_lock);
	if (other != 0 && kill(other, 0) == 0)
		proc_exit(0);			/* another sender serves this lane already */

	LWLockAcquire(notif_shared->lanes_lock, LW_EXCLUSIVE);
	if (!slot->in_use || (slot->pid != 0 && slot->pid != other))
	{
		/* the lane went away, or another sender just took it */
		LWLockRelease(notif_shared->lanes_lock);
		proc_exit(0);
	}
	strlcpy(sender.lane, slot->lane, sizeof(sender.lane));
	slot->pid = MyProcPid;
	slot->latch = MyLatch;
	slot->incarnation = sender.incarnation;
	LWLockRelease(notif_shared->lanes_lock);
	sender.slot = slot;
	before_shmem_exit(sender_detach, (Datum) 0);
}

static long
wait_timeout_ms(TimestampTz now, bool room)
{
	long		timeout = notif_poll_interval_ms;
	long		curl_ms = notif_http_timeout_ms();
	TimestampTz wake = 0;

	if (curl_ms >= 0 && curl_ms < timeout)
		timeout = curl_ms;
	if (sender.backoff_until > now)
		wake = sender.backoff_until;
	else if (sender_has_work())
	{
		if (sender.record_at <= now)
			return 0;
		wake = sender.record_at;	/* more results may come first */
	}
	else if (room)
	{
		/* claim_at 0: claim now (more are due, or a wake-up) */
		if (sender.claim_at <= now)
			return 0;
		wake = sender.claim_at;
	}
	if (!dlist_is_empty(&sender.passed) && sender.backoff_until <= now &&
		(wake == 0 || sender.passed_at < wake))
		wake = sender.passed_at;	/* results a lock held back */
	if (sender_fallbacks_retry_at() != 0 && sender.backoff_until <= now &&
		(wake == 0 || sender_fallbacks_retry_at() < wake))
		wake = sender_fallbacks_retry_at();	/* fallbacks a lock held back */
	if (sender.trim_pending && sender.idle_since != 0)
	{
		TimestampTz trim_at = TimestampTzPlusMilliseconds(sender.idle_since,
														  SENDER_TRIM_AFTER_IDLE_MS);

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
	sender_drop_calls();
	if (!dlist_is_empty(&sender.finished) || !dlist_is_empty(&sender.passed))
	{
		/* a job locked now is passed over, not the round lost for it */
		sender.record_passing = true;
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
	ereport(LOG, (errmsg("notif_deliver sender of lane \"%s\" stopped", sender.lane)));
	proc_exit(0);
}

/*
 * Retired (the lane has one sender too many: its count was lowered, or
 * another lane needed the slot): every call it had has ended and is
 * recorded; leave.
 */
static void
sender_retire(void)
{
	ereport(LOG,
			(errmsg("notif_deliver sender of lane \"%s\" retired, its calls ended and recorded",
					sender.lane),
			 errdetail("The lane wants fewer senders: its notif_lane.senders, or else notif_deliver.senders_per_lane, was lowered, or another lane needed the slot.")));
	proc_exit(0);
}

void
notif_sender_main(Datum arg)
{
	WaitEventSet *wes;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, notif_sender_sigterm);	/* also ends a wait for the standby */
	pqsignal(SIGINT, notif_sender_sigint);
	BackgroundWorkerUnblockSignals();

	notif_shmem_attach();
	sender.incarnation = notif_new_incarnation();
	sender.probe_held = -1;		/* no breaker probe taken */
	take_lane_slot(DatumGetInt32(arg));

	BackgroundWorkerInitializeConnection(notif_database, NULL, 0);
	notif_worker_settings();
	notif_sql_planner_settings();	/* its statements are planned once */
	SetConfigOption("application_name", psprintf("notif_deliver sender %s", sender.lane),
					PGC_USERSET, PGC_S_OVERRIDE);
	pgstat_report_appname(psprintf("notif_deliver sender %s", sender.lane));

	sender.calls_cxt = AllocSetContextCreate(TopMemoryContext, "notif_deliver calls",
											 ALLOCSET_DEFAULT_SIZES);
	sender.round_cxt = AllocSetContextCreate(TopMemoryContext, "notif_deliver round",
											 ALLOCSET_DEFAULT_SIZES);

	notif_http_init();
	wes = notif_create_wait_event_set(3);
	AddWaitEventToSet(wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	AddWaitEventToSet(wes, WL_SOCKET_READABLE, notif_http_epoll_fd(), NULL, NULL);

	ereport(LOG, (errmsg("notif_deliver sender of lane \"%s\" started (incarnation " INT64_FORMAT ")",
						 sender.lane, sender.incarnation)));

	for (;;)
	{
		WaitEvent	events[3];
		int			n,
					i;
		bool		sockets_ready = false;
		bool		woken = false;
		TimestampTz now;
		bool		retiring;
		bool		room;
		volatile bool want_claim;

		now = GetCurrentTimestamp();
		sender_report_state(now);
		retiring = pg_atomic_read_u32(&sender.slot->retire) != 0;
		if (retiring && notif_http_inflight() == 0 && sender_lookups_asking() == 0 &&
			dlist_is_empty(&sender.finished) &&
			dlist_is_empty(&sender.passed) && dlist_is_empty(&sender.claimed))
			sender_retire();
		room = !retiring &&
			notif_http_inflight() + sender_lookups_asking() < sender_max_inflight();
		n = WaitEventSetWait(wes, wait_timeout_ms(now, room), events, lengthof(events),
							 PG_WAIT_EXTENSION);
		for (i = 0; i < n; i++)
		{
			if (events[i].events & WL_LATCH_SET)
			{
				ResetLatch(MyLatch);
				sender.claim_at = 0;	/* woken: an enqueue committed, or a change */
				woken = true;
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
			sender.claim_at = 0;
			woken = true;
		}
		if (pg_atomic_read_u64(&notif_shared->config_generation) != sender.config_generation)
			sender.config_stale = true;

		sender_drive_calls(sockets_ready);

		now = GetCurrentTimestamp();
		if (now < sender.backoff_until)
			continue;
		room = !retiring &&
			notif_http_inflight() + sender_lookups_asking() < sender_max_inflight();
		want_claim = room && sender.claim_at <= now;
		if (!want_claim && !sender_has_work())
			continue;
		/* results trickling in: wait a little for more (sender/batch.c) */
		sender.record_at = sender_record_due(woken);
		if (sender.record_at > now)
			continue;

		PG_TRY();
		{
			sender_round(want_claim);
		}
		PG_CATCH();
		{
			sender_round_failed();
		}
		PG_END_TRY();
		MemoryContextReset(sender.round_cxt);
	}
}
