/*-------------------------------------------------------------------------
 *
 * wake.c
 *      Wake-ups that must happen when a transaction commits, and not before:
 *      a committed notif_enqueue or notif_retry wakes its lane's sender; a
 *      committed change to notif_type, notif_provider or notif_lane, or an
 *      extension install or update, wakes the launcher and every sender.
 *
 * A transaction remembers what to wake in backend-local memory and a
 * transaction callback does it at XACT_EVENT_COMMIT (after the commit is
 * visible to others); at abort it is forgotten.  A prepared transaction
 * wakes nobody: the senders' safety poll picks its jobs up.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/inval.h"

#include "core/shared.h"

/* lanes remembered by name; a transaction that enqueues into more wakes every sender */
#define MAX_PENDING_LANES 8

static bool callback_registered = false;
static bool pending_any = false;
static bool pending_config = false;	/* a configuration change: everyone */
static bool pending_senders = false;	/* more lanes than remembered */
static int	n_pending_lanes = 0;
static char pending_lanes[MAX_PENDING_LANES][NOTIF_NAME_MAXLEN];

PG_FUNCTION_INFO_V1(notif_config_changed);
PG_FUNCTION_INFO_V1(notif_wake_launcher);
PG_FUNCTION_INFO_V1(notif_wake_lane_sql);

static void
reset_pending(void)
{
	pending_any = false;
	pending_config = false;
	pending_senders = false;
	n_pending_lanes = 0;
}

static void
wake_xact_callback(XactEvent event, void *arg)
{
	if (!pending_any)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (pending_config)
			{
				pg_atomic_fetch_add_u64(&notif_shared->config_generation, 1);
				notif_wake_all();
			}
			else if (pending_senders)
				notif_wake_senders();
			else
			{
				int			i;

				for (i = 0; i < n_pending_lanes; i++)
					notif_wake_lane(pending_lanes[i]);
			}
			reset_pending();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			reset_pending();
			break;
		default:
			break;
	}
}

static bool
prepare_pending(void)
{
	if (notif_shared == NULL)
		return false;			/* not preloaded: there is nobody to wake */
	if (!callback_registered)
	{
		RegisterXactCallback(wake_xact_callback, NULL);
		callback_registered = true;
	}
	pending_any = true;
	return true;
}

/* Wake the sender of this lane when the current transaction commits. */
void
notif_wake_lane_at_commit(const char *lane)
{
	int			i;

	if (pending_config || pending_senders)
		return;
	/* the common case, a transaction enqueueing into one lane */
	if (n_pending_lanes > 0 && strcmp(pending_lanes[n_pending_lanes - 1], lane) == 0)
		return;
	if (!prepare_pending())
		return;
	for (i = 0; i < n_pending_lanes; i++)
		if (strcmp(pending_lanes[i], lane) == 0)
			return;
	if (n_pending_lanes == MAX_PENDING_LANES)
		pending_senders = true; /* wakes every sender, changes nothing */
	else
		strlcpy(pending_lanes[n_pending_lanes++], lane, NOTIF_NAME_MAXLEN);
}

/* Wake the launcher and every sender when the current transaction commits. */
void
notif_config_changed_at_commit(void)
{
	if (prepare_pending())
		pending_config = true;
}

/*
 * notif_config_changed(): statement trigger on notif_type, notif_provider
 * and notif_lane.  Invalidates every session's type cache (a relcache
 * invalidation of notif_type, delivered to all sessions at commit) and wakes
 * the launcher and the senders at commit.
 */
Datum
notif_config_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("notif_config_changed() must be called as a trigger")));

	CacheInvalidateRelcache(trigdata->tg_relation);
	notif_config_changed_at_commit();

	PG_RETURN_POINTER(NULL);
}

/* notif_wake_launcher(): called by the install script. */
Datum
notif_wake_launcher(PG_FUNCTION_ARGS)
{
	notif_config_changed_at_commit();
	PG_RETURN_VOID();
}

/* notif_wake_lane(lane): wake a lane's sender at commit (notif_retry). */
Datum
notif_wake_lane_sql(PG_FUNCTION_ARGS)
{
	char	   *lane = text_to_cstring(PG_GETARG_TEXT_PP(0));

	notif_wake_lane_at_commit(lane);
	PG_RETURN_VOID();
}
