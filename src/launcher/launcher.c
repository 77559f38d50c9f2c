/*-------------------------------------------------------------------------
 *
 * launcher.c
 *      The launcher: one background worker, started by the postmaster, that
 *      keeps the sender processes of each lane of the non-paused types
 *      running (notif_lane.senders of them, else
 *      notif_deliver.senders_per_lane), and deletes finished jobs past their
 *      retention.
 *
 * It waits on its latch, set when a change to notif_type, notif_provider
 * or notif_lane commits (wake.c) and when a sender it started stops; and it
 * looks once a second whether the extension was created or dropped (a
 * catalog lookup, no query).  It starts the senders of a new lane, stops
 * those of a lane that went away (or past a lowered count), and starts
 * again a sender that stopped.  Senders are independent processes: an
 * error in one lane never stops another.  A lane's senders each take a
 * slot of their own, with its own incarnation; they claim the lane's due
 * jobs side by side (a claim skips the rows another holds).
 *
 * Until the extension exists in notif_deliver.database it waits quietly;
 * while it exists at an older version than this library's, it warns once
 * and starts no sender until ALTER EXTENSION ... UPDATE commits.
 * On a standby it only waits for the promotion (ha.c), and says so once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "core/shared.h"
#include "launcher/launcher.h"
#include "store/job_sql.h"

#define LAUNCHER_NAPTIME_MS 1000

/* the launcher's own view of each lane slot */
typedef struct LaneWorker
{
	BackgroundWorkerHandle *handle; /* NULL: not started by this launcher */
	bool		start_failed;	/* no worker slot: said once, retried quietly */
} LaneWorker;

static LaneWorker *workers;
static char *last_error = NULL;

/* what the last successful round saw */
static uint64 seen_generation = 0;
static Oid	seen_extension = InvalidOid;
static bool seen_enabled = true;
static int	seen_senders_per_lane = 1;
static TimestampTz next_purge = 0;

/* the lanes short of senders at the last round: each is warned of once */
static char short_lanes[NOTIF_MAX_LANES_LIMIT][NOTIF_NAME_MAXLEN];
static int	n_short_lanes = 0;

void
notif_register_launcher(void)
{
	BackgroundWorker worker = {0};

	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	/* on a standby too: it says that it waits for the promotion */
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "notif_deliver");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "notif_launcher_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "notif_deliver launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "notif_deliver launcher");
	RegisterBackgroundWorker(&worker);
}

static void
launcher_detach(int code, Datum arg)
{
	LWLockAcquire(notif_shared->lanes_lock, LW_EXCLUSIVE);
	notif_shared->launcher_pid = 0;
	notif_shared->launcher_latch = NULL;
	LWLockRelease(notif_shared->lanes_lock);
}

/* Log an error once; the same error again is not repeated. */
static void
report_error_once(ErrorData *edata)
{
	if (last_error && strcmp(last_error, edata->message) == 0)
		return;
	ereport(LOG,
			(errmsg("notif_deliver launcher: %s", edata->message),
			 edata->detail ? errdetail_internal("%s", edata->detail) : 0,
			 errcontext("managing the senders of database \"%s\"", notif_database)));
	if (last_error)
		pfree(last_error);
	last_error = MemoryContextStrdup(TopMemoryContext, edata->message);
}

static bool
start_sender(int slotno)
{
	BackgroundWorker worker = {0};
	NotifLaneSlot *slot = &notif_shared->lanes[slotno];

	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;	/* the launcher does it */
	worker.bgw_main_arg = Int32GetDatum(slotno);
	worker.bgw_notify_pid = MyProcPid;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "notif_deliver");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "notif_sender_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "notif_deliver sender %s", slot->lane);
	snprintf(worker.bgw_type, BGW_MAXLEN, "notif_deliver sender");

	if (!RegisterDynamicBackgroundWorker(&worker, &workers[slotno].handle))
	{
		if (!workers[slotno].start_failed)
			ereport(WARNING,
					(errmsg("notif_deliver: could not start a sender of lane \"%s\": no background worker slot",
							slot->lane),
					 errdetail("Its jobs wait; the launcher tries again every second."),
					 errhint("Raise max_worker_processes: it must cover the launcher, each lane's senders (notif_lane.senders, else notif_deliver.senders_per_lane), and the server's other background workers.")));
		workers[slotno].start_failed = true;
		workers[slotno].handle = NULL;
		return false;
	}
	if (workers[slotno].start_failed)
		ereport(LOG, (errmsg("notif_deliver: a sender of lane \"%s\" could start at last", slot->lane)));
	workers[slotno].start_failed = false;
	return true;
}

/* Is a sender running (or starting) for this slot? */
static bool
sender_alive(int slotno)
{
	pid_t		pid;

	if (workers[slotno].handle)
	{
		BgwHandleStatus st = GetBackgroundWorkerPid(workers[slotno].handle, &pid);

		if (st == BGWH_STARTED || st == BGWH_NOT_YET_STARTED)
			return true;
		pfree(workers[slotno].handle);
		workers[slotno].handle = NULL;
	}
	/* a sender started by a previous launcher */
	LWLockAcquire(notif_shared->lanes_lock, LW_EXCLUSIVE);
	pid = notif_shared->lanes[slotno].pid;
	LWLockRelease(notif_shared->lanes_lock);
	return pid != 0 && kill(pid, 0) == 0;
}

/*
 * Stop the sender of a slot: at once (SIGTERM: it drops its calls), or,
 * retiring, once the calls it has in flight have ended and are recorded
 * (it claims no more meanwhile).
 */
static void
stop_sender(int slotno, bool retire)
{
	pid_t		pid;
	Latch	   *latch;

	if (retire)
	{
		LWLockAcquire(notif_shared->lanes_lock, LW_SHARED);
		pg_atomic_write_u32(&notif_shared->lanes[slotno].retire, 1);
		latch = notif_shared->lanes[slotno].latch;
		LWLockRelease(notif_shared->lanes_lock);
		if (latch)
			SetLatch(latch);
		return;
	}
	if (workers[slotno].handle)
	{
		TerminateBackgroundWorker(workers[slotno].handle);
		return;
	}
	LWLockAcquire(notif_shared->lanes_lock, LW_EXCLUSIVE);
	pid = notif_shared->lanes[slotno].pid;
	LWLockRelease(notif_shared->lanes_lock);
	if (pid != 0)
		kill(pid, SIGTERM);
}

/*
 * The lanes with a wanted sender past the slots (entries from max_lanes
 * on): each is warned of when it becomes short, not again at each round
 * while it stays so.
 */
static void
warn_short_lanes(char **lanes, int n_lanes)
{
	int			n = 0,
				j,
				k;
	char		(*now)[NOTIF_NAME_MAXLEN];

	now = palloc(NOTIF_NAME_MAXLEN * Max(n_lanes, 1));
	for (j = notif_max_lanes; j < n_lanes; j++)
	{
		for (k = 0; k < n; k++)
			if (strcmp(now[k], lanes[j]) == 0)
				break;
		if (k < n)
			continue;			/* a lane appears once per sender it lacks */
		strlcpy(now[n++], lanes[j], NOTIF_NAME_MAXLEN);
		for (k = 0; k < n_short_lanes; k++)
			if (strcmp(short_lanes[k], lanes[j]) == 0)
				break;
		if (k == n_short_lanes)
			ereport(WARNING,
					(errmsg("notif_deliver: lane \"%s\" lacks a sender: more than %d senders",
							lanes[j], notif_max_lanes),
					 errdetail("A lane takes its notif_lane.senders, or else notif_deliver.senders_per_lane (%d), of the notif_deliver.max_lanes sender slots.",
							   notif_senders_per_lane),
					 errhint("Raise notif_deliver.max_lanes (and max_worker_processes), or lower a lane's count.")));
	}
	n_short_lanes = Min(n, NOTIF_MAX_LANES_LIMIT);
	memcpy(short_lanes, now, NOTIF_NAME_MAXLEN * n_short_lanes);
	pfree(now);
}

/*
 * Make the running senders match the wanted lanes, one entry of lanes per
 * sender (a lane appears once per sender it wants, in senders_wanted's
 * order).  Only the first max_lanes entries are wanted: every lane has a
 * sender before any has a second, so a lane that appears when the slots
 * are full takes one from a lane with several (whose extra sender
 * retires).  A slot is freed only once its sender has stopped, so a lane
 * never has more senders than it wants, plus those still stopping.  A
 * freed slot's sender may have left jobs held (its last round failed): the
 * configuration generation moves on, so that the other senders read it
 * again and recover them.
 */
static void
reconcile(char **lanes, int n_lanes)
{
	bool		wanted[NOTIF_MAX_LANES_LIMIT];
	int			i,
				k,
				j;

	warn_short_lanes(lanes, n_lanes);
	n_lanes = Min(n_lanes, notif_max_lanes);

	/*
	 * The slots that serve a wanted lane's sender: those whose sender runs
	 * first, so that a lane with one too many retires a running sender
	 * only if none of its slots is a dead one to leave.
	 */
	for (i = 0; i < notif_max_lanes; i++)
		wanted[i] = false;
	for (k = 0; k < 2; k++)
		for (i = 0; i < notif_max_lanes; i++)
		{
			NotifLaneSlot *slot = &notif_shared->lanes[i];

			if (!slot->in_use || wanted[i] || sender_alive(i) != (k == 0))
				continue;
			for (j = 0; j < n_lanes; j++)
				if (lanes[j] && strcmp(lanes[j], slot->lane) == 0)
				{
					wanted[i] = true;
					lanes[j] = NULL;	/* served */
					break;
				}
		}

	for (i = 0; i < notif_max_lanes; i++)
	{
		NotifLaneSlot *slot = &notif_shared->lanes[i];

		if (!slot->in_use)
			continue;
		if (wanted[i])
		{
			pg_atomic_write_u32(&slot->retire, 0);	/* wanted again */
			if (!sender_alive(i))
				start_sender(i);
		}
		else if (sender_alive(i))
		{
			/* one too many for a lane still served retires: no call is cut */
			bool		retire = false;

			for (k = 0; k < notif_max_lanes; k++)
				if (wanted[k] && strcmp(notif_shared->lanes[k].lane, slot->lane) == 0)
					retire = true;
			stop_sender(i, retire);
		}
		else
		{
			ereport(LOG, (errmsg("notif_deliver: a sender of lane \"%s\" stopped", slot->lane)));
			LWLockAcquire(notif_shared->lanes_lock, LW_EXCLUSIVE);
			slot->in_use = false;
			LWLockRelease(notif_shared->lanes_lock);
			pg_atomic_fetch_add_u64(&notif_shared->config_generation, 1);
			notif_wake_senders();
		}
	}

	for (j = 0; j < n_lanes; j++)
	{
		if (lanes[j] == NULL)
			continue;
		for (i = 0; i < notif_max_lanes; i++)
			if (!notif_shared->lanes[i].in_use)
				break;
		if (i == notif_max_lanes)
			break;				/* slots still held by stopping senders: when
								 * they stop, the next round starts these */
		workers[i].start_failed = false;
		LWLockAcquire(notif_shared->lanes_lock, LW_EXCLUSIVE);
		notif_shared->lanes[i].in_use = true;
		strlcpy(notif_shared->lanes[i].lane, lanes[j], NOTIF_NAME_MAXLEN);
		pg_atomic_write_u32(&notif_shared->lanes[i].inflight, 0);
		pg_atomic_write_u64(&notif_shared->lanes[i].sent, 0);
		pg_atomic_write_u32(&notif_shared->lanes[i].state, WORKER_STARTING);
		pg_atomic_write_u32(&notif_shared->lanes[i].retire, 0);
		pg_atomic_write_u64(&notif_shared->lanes[i].config_seen, 0);
		notif_shared->lanes[i].n_unshared = 0;
		for (k = 0; k < NOTIF_RATE_SECONDS; k++)
			pg_atomic_write_u64(&notif_shared->lanes[i].sent_second[k], 0);
		LWLockRelease(notif_shared->lanes_lock);
		ereport(LOG, (errmsg("notif_deliver: starting a sender of lane \"%s\"", lanes[j])));
		start_sender(i);
	}
}

/*
 * Each of the n_lanes lanes as many times over as it has senders (in
 * cxt): its notif_lane.senders, else notif_deliver.senders_per_lane.  Every
 * lane once, then every lane with more again, so that when the slots run
 * out every lane has a sender before any has a second.
 */
static int
senders_wanted(int n_lanes, char ***lanes, int *senders, MemoryContext cxt)
{
	char	  **each;
	int			most = 0,
				total = 0,
				n = 0,
				i,
				k;

	for (i = 0; i < n_lanes; i++)
	{
		/* the lane's row, else the setting (the same bounds, 1 to 16) */
		senders[i] = Min(senders[i] > 0 ? senders[i] : notif_senders_per_lane,
						 NOTIF_MAX_SENDERS_PER_LANE);
		most = Max(most, senders[i]);
		total += senders[i];
	}
	if (total == n_lanes)
		return n_lanes;			/* one each */
	each = MemoryContextAlloc(cxt, sizeof(char *) * total);
	for (k = 0; k < most; k++)
		for (i = 0; i < n_lanes; i++)
			if (k < senders[i])
				each[n++] = (*lanes)[i];
	*lanes = each;
	return n;
}

/* Read the wanted lanes and reconcile; delete a purge batch when due. */
static void
launcher_round(MemoryContext round_cxt, bool purge)
{
	char	  **lanes = NULL;
	int			n_lanes = 0;
	int64		purged = 0;
	NotifWorkerState state;
	static bool warned_version = false;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "reading lanes");

	if (!notif_enabled)
		state = WORKER_DISABLED;
	else if (notif_sql_prepare())
	{
		int64		built;
		int		   *senders;

		state = WORKER_IDLE;

		/*
		 * notif_active is unlogged: after a crash or a promotion PostgreSQL
		 * has emptied it.  Rebuild it from notif_job before any sender
		 * starts and before the holders are read from it.
		 */
		pgstat_report_activity(STATE_RUNNING, "building notif_active");
		built = notif_sql_build_active();
		if (built >= 0)
			ereport(LOG,
					(errmsg("notif_deliver: built notif_active from notif_job in database \"%s\": %lld rows",
							notif_database, (long long) built),
					 errdetail("It is empty after a crash, a promotion or a fresh install; it holds the queued and held jobs.")));
		pgstat_report_activity(STATE_RUNNING, "reading lanes");

		/*
		 * Incarnations start from the clock at each server start; should the
		 * clock have gone back, start above every holder recorded in jobs;
		 * and above every earlier timeline's (ha.c), also those whose claims
		 * a promoted standby never received.  Senders start after this.
		 */
		notif_raise_incarnation(notif_sql_max_holder());
		notif_raise_incarnation(notif_incarnation_floor());
		n_lanes = notif_sql_lanes(round_cxt, &lanes, &senders);
		n_lanes = senders_wanted(n_lanes, &lanes, senders, round_cxt);
		if (purge)
		{
			pgstat_report_activity(STATE_RUNNING, "purging finished jobs");
			purged = notif_sql_purge(notif_purge_batch_size);
		}
	}
	else if (notif_sql_wrong_version)
	{
		state = WORKER_NEEDS_UPDATE;
		if (!warned_version)
			ereport(WARNING,
					(errmsg("notif_deliver: the extension in database \"%s\" is version %s, this library needs %s",
							notif_database, notif_sql_wrong_version, NOTIF_SCHEMA_VERSION),
					 errdetail("Nothing is sent until the extension is updated; enqueued jobs wait."),
					 errhint("Run ALTER EXTENSION notif_deliver UPDATE in database \"%s\".",
							 notif_database)));
		warned_version = true;
	}
	else
		state = WORKER_NOT_INSTALLED;
	if (state != WORKER_NEEDS_UPDATE)
		warned_version = false;
	pg_atomic_write_u32(&notif_shared->launcher_state, state);

	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);

	reconcile(lanes, n_lanes);
	if (purged > 0)
		elog(DEBUG1, "notif_deliver: purged " INT64_FORMAT " finished jobs", purged);
	if (purged >= notif_purge_batch_size)
	{
		next_purge = 0;			/* more to purge: go on at once */
		SetLatch(MyLatch);
	}
}

void
notif_launcher_main(Datum arg)
{
	MemoryContext round_cxt;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	notif_shmem_attach();
	notif_launcher_connect();
	notif_worker_settings();
	pgstat_report_appname("notif_deliver launcher");

	LWLockAcquire(notif_shared->lanes_lock, LW_EXCLUSIVE);
	notif_shared->launcher_pid = MyProcPid;
	notif_shared->launcher_latch = MyLatch;
	LWLockRelease(notif_shared->lanes_lock);
	before_shmem_exit(launcher_detach, (Datum) 0);

	/* its only writes are purges: they never wait for a standby */
	if (synchronous_commit > SYNCHRONOUS_COMMIT_LOCAL_FLUSH)
		SetConfigOption("synchronous_commit", "local", PGC_SUSET, PGC_S_OVERRIDE);

	if (!notif_wait_for_promotion())
		proc_exit(1);

	workers = MemoryContextAllocZero(TopMemoryContext, sizeof(LaneWorker) * notif_max_lanes);
	round_cxt = AllocSetContextCreate(TopMemoryContext, "notif_deliver launcher round",
									  ALLOCSET_DEFAULT_SIZES);

	ereport(LOG, (errmsg("notif_deliver launcher started for database \"%s\"", notif_database)));

	while (!ShutdownRequestPending)
	{
		uint64		generation;
		Oid			extension;
		bool		senders_ok = true;
		volatile bool purge = false;
		int			i;

		if (ConfigReloadPending)
		{
			TimestampTz soonest;

			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			/* a shorter purge_interval counts from now, not from the last purge */
			soonest = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), notif_purge_interval_ms);
			if (next_purge > soonest)
				next_purge = soonest;
		}

		/* is there anything to do?  (no query unless something changed) */
		generation = pg_atomic_read_u64(&notif_shared->config_generation);
		StartTransactionCommand();
		extension = get_extension_oid(NOTIF_EXTENSION_NAME, true);
		CommitTransactionCommand();
		for (i = 0; i < notif_max_lanes; i++)
			if (notif_shared->lanes[i].in_use && !sender_alive(i))
				senders_ok = false;
		if (OidIsValid(extension) && notif_enabled && GetCurrentTimestamp() >= next_purge)
		{
			purge = true;
			next_purge = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), notif_purge_interval_ms);
		}

		if (generation != seen_generation || extension != seen_extension ||
			notif_enabled != seen_enabled || !senders_ok || purge ||
			notif_senders_per_lane != seen_senders_per_lane)
		{
			PG_TRY();
			{
				launcher_round(round_cxt, purge);
				seen_generation = generation;
				pg_atomic_write_u64(&notif_shared->launcher_config_seen, generation);
				seen_extension = extension;
				seen_enabled = notif_enabled;
				seen_senders_per_lane = notif_senders_per_lane;
				if (last_error)
				{
					pfree(last_error);
					last_error = NULL;
				}
			}
			PG_CATCH();
			{
				ErrorData  *edata;

				MemoryContextSwitchTo(round_cxt);
				edata = CopyErrorData();
				FlushErrorState();
				AbortCurrentTransaction();
				report_error_once(edata);
				pgstat_report_activity(STATE_IDLE, NULL);
			}
			PG_END_TRY();
			MemoryContextReset(round_cxt);
		}

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 LAUNCHER_NAPTIME_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}

	/*
	 * Stopped on purpose (server shutdown, or pg_terminate_backend).  The
	 * senders go on serving their lanes; exit code 1 makes the postmaster
	 * start a new launcher (unless the server is shutting down), which
	 * adopts them.
	 */
	proc_exit(1);
}
