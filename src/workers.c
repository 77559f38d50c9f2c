/*-------------------------------------------------------------------------
 *
 * workers.c
 *      notif_workers(): what the launcher and each lane's sender are doing,
 *      read from shared memory: pid, lane, state, calls in flight, jobs
 *      sent in the last minute.  A lane whose sender is not running (no
 *      worker slot, or being restarted) shows with a NULL pid.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"

#include "notif_deliver.h"

PG_FUNCTION_INFO_V1(notif_workers);

static const char *
state_name(NotifWorkerState state)
{
	switch (state)
	{
		case WORKER_STARTING:
			return "starting";
		case WORKER_IDLE:
			return "idle";
		case WORKER_SENDING:
			return "sending";
		case WORKER_BACKING_OFF:
			return "backing off after an error";
		case WORKER_DISABLED:
			return "disabled (notif_deliver.enabled is off)";
		case WORKER_NOT_INSTALLED:
			return "waiting for CREATE EXTENSION";
		case WORKER_NEEDS_UPDATE:
			return "waiting for ALTER EXTENSION notif_deliver UPDATE";
		case WORKER_WAITING_SYNC_REP:
			return "waiting for synchronous replication";
		case WORKER_STANDBY:
			return "waiting for promotion (standby)";
	}
	return "unknown";
}

Datum
notif_workers(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[6];
	bool		nulls[6];
	pid_t		launcher_pid;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (notif_shared == NULL)
		PG_RETURN_VOID();		/* not preloaded: no worker runs */

	SpinLockAcquire(&notif_shared->mutex);
	launcher_pid = notif_shared->launcher_pid;
	SpinLockRelease(&notif_shared->mutex);
	if (launcher_pid != 0)
	{
		memset(nulls, false, sizeof(nulls));
		values[0] = Int32GetDatum(launcher_pid);
		values[1] = CStringGetTextDatum("launcher");
		nulls[2] = true;
		values[3] = CStringGetTextDatum(state_name(pg_atomic_read_u32(&notif_shared->launcher_state)));
		nulls[4] = nulls[5] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}

	for (i = 0; i < notif_max_lanes; i++)
	{
		NotifLaneSlot *slot = &notif_shared->lanes[i];
		char		lane[NOTIF_NAME_MAXLEN];
		pid_t		pid;
		bool		in_use;

		SpinLockAcquire(&notif_shared->mutex);
		in_use = slot->in_use;
		pid = slot->pid;
		strlcpy(lane, slot->lane, sizeof(lane));
		SpinLockRelease(&notif_shared->mutex);
		if (!in_use)
			continue;

		memset(nulls, false, sizeof(nulls));
		values[0] = Int32GetDatum(pid);
		nulls[0] = (pid == 0);
		values[1] = CStringGetTextDatum("sender");
		values[2] = CStringGetTextDatum(lane);
		values[3] = CStringGetTextDatum(pid == 0 ? "not running" :
										state_name(pg_atomic_read_u32(&slot->state)));
		values[4] = Int32GetDatum(pid == 0 ? 0 : (int32) pg_atomic_read_u32(&slot->inflight));
		values[5] = Int64GetDatum((int64) notif_sent_last_minute(slot));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	PG_RETURN_VOID();
}
