/*-------------------------------------------------------------------------
 *
 * workers.c
 *      notif_workers(): what the launcher and each lane's sender are doing,
 *      read from shared memory: pid, lane, state, calls in flight, jobs
 *      sent in the last minute.  A lane whose sender is not running (no
 *      worker slot, or being restarted) shows with a NULL pid.
 *      notif_config_applied(): whether they have read the configuration as
 *      last committed.
 *      notif_provider_slots(): the providers' shared limits in use, and the
 *      providers limited per lane because every shared slot was taken.
 *      notif_provider_breakers(): their circuit breakers (the view
 *      notif_provider_health).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "core/shared.h"

PG_FUNCTION_INFO_V1(notif_workers);
PG_FUNCTION_INFO_V1(notif_provider_slots);
PG_FUNCTION_INFO_V1(notif_config_applied);
PG_FUNCTION_INFO_V1(notif_provider_breakers);

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

	LWLockAcquire(notif_shared->lanes_lock, LW_SHARED);
	launcher_pid = notif_shared->launcher_pid;
	LWLockRelease(notif_shared->lanes_lock);
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

		LWLockAcquire(notif_shared->lanes_lock, LW_SHARED);
		in_use = slot->in_use;
		pid = slot->pid;
		strlcpy(lane, slot->lane, sizeof(lane));
		LWLockRelease(notif_shared->lanes_lock);
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

/* A copy of shared provider slot i, if a provider uses it (false: free). */
static bool
provider_slot_copy(int i, NotifProviderSlot *out)
{
	LWLockAcquire(notif_shared->providers_lock, LW_SHARED);
	*out = notif_providers[i];
	LWLockRelease(notif_shared->providers_lock);
	return out->in_use && (out->senders > 0 || out->inflight > 0);
}

/*
 * notif_provider_slots(): provider, lane (NULL: shared by all lanes),
 * shared, senders, in_flight, paused_until.
 */
Datum
notif_provider_slots(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[6];
	bool		nulls[6];
	int			i,
				k;

	InitMaterializedSRF(fcinfo, 0);
	if (notif_shared == NULL)
		PG_RETURN_VOID();

	for (i = 0; i < notif_max_providers; i++)
	{
		NotifProviderSlot p;

		if (!provider_slot_copy(i, &p))
			continue;
		memset(nulls, false, sizeof(nulls));
		values[0] = CStringGetTextDatum(p.name);
		nulls[1] = true;
		values[2] = BoolGetDatum(true);
		values[3] = Int32GetDatum(p.senders);
		values[4] = Int32GetDatum(p.inflight);
		values[5] = TimestampTzGetDatum(p.paused_until);
		nulls[5] = (p.paused_until == 0);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}

	for (i = 0; i < notif_max_lanes; i++)
	{
		NotifLaneSlot *slot = &notif_shared->lanes[i];
		char		lane[NOTIF_NAME_MAXLEN];
		char		unshared[NOTIF_UNSHARED_SHOWN][NOTIF_NAME_MAXLEN];
		int			n = 0;

		LWLockAcquire(notif_shared->lanes_lock, LW_SHARED);
		if (slot->in_use)
		{
			n = slot->n_unshared;
			memcpy(unshared, slot->unshared, sizeof(unshared));
			strlcpy(lane, slot->lane, sizeof(lane));
		}
		LWLockRelease(notif_shared->lanes_lock);
		for (k = 0; k < n; k++)
		{
			memset(nulls, false, sizeof(nulls));
			values[0] = CStringGetTextDatum(unshared[k]);
			values[1] = CStringGetTextDatum(lane);
			values[2] = BoolGetDatum(false);
			values[3] = Int32GetDatum(1);
			nulls[4] = nulls[5] = true;
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	PG_RETURN_VOID();
}

/*
 * notif_config_applied(lane): has the lane's sender (NULL: the launcher
 * and every running sender) read the configuration generation as it is
 * now?  False for a lane without a running sender.
 */
Datum
notif_config_applied(PG_FUNCTION_ARGS)
{
	char	   *lane = PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0));
	uint64		generation;
	bool		applied = true;
	bool		found = false;
	int			i;

	if (notif_shared == NULL)
		PG_RETURN_BOOL(false);	/* not preloaded: nobody reads it */
	generation = pg_atomic_read_u64(&notif_shared->config_generation);
	if (lane == NULL &&
		pg_atomic_read_u64(&notif_shared->launcher_config_seen) != generation)
		PG_RETURN_BOOL(false);

	LWLockAcquire(notif_shared->lanes_lock, LW_SHARED);
	for (i = 0; i < notif_max_lanes; i++)
	{
		NotifLaneSlot *slot = &notif_shared->lanes[i];

		if (!slot->in_use || (lane != NULL && strcmp(slot->lane, lane) != 0))
			continue;
		found = true;
		if (slot->pid == 0 || pg_atomic_read_u64(&slot->config_seen) != generation)
			applied = false;
	}
	LWLockRelease(notif_shared->lanes_lock);
	PG_RETURN_BOOL(applied && (found || lane == NULL));
}

/*
 * notif_provider_breakers(): name, state, since, consecutive_failures,
 * last_error, refused_calls of each shared provider slot's circuit breaker
 * (sender/breaker.c).  An open breaker whose cooldown passed is half-open
 * from then: a probe may go.
 */
Datum
notif_provider_breakers(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentTimestamp();
	Datum		values[6];
	bool		nulls[6];
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (notif_shared == NULL)
		PG_RETURN_VOID();

	for (i = 0; i < notif_max_providers; i++)
	{
		NotifProviderSlot p;
		NotifBreaker *b = &p.breaker;
		const char *state = "closed";
		TimestampTz since;

		if (!provider_slot_copy(i, &p))
			continue;
		since = b->since;
		if (b->state == BREAKER_HALF_OPEN)
			state = "half_open";
		else if (b->state == BREAKER_OPEN && now >= b->probe_at)
			state = "half_open";	/* the cooldown passed: a probe may go */
		else if (b->state == BREAKER_OPEN)
			state = "open";
		memset(nulls, false, sizeof(nulls));
		values[0] = CStringGetTextDatum(p.name);
		values[1] = CStringGetTextDatum(state);
		values[2] = TimestampTzGetDatum(since);
		nulls[2] = (since == 0);
		values[3] = Int32GetDatum(b->failures);
		b->last_error[sizeof(b->last_error) - 1] = '\0';
		values[4] = CStringGetTextDatum(b->last_error);
		nulls[4] = (b->last_error[0] == '\0');
		values[5] = Int64GetDatum(b->refused);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	PG_RETURN_VOID();
}
