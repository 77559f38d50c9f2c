/*-------------------------------------------------------------------------
 *
 * launcher/promotion.c
 *      The launcher on a standby (doc/ha.md): it waits for the promotion
 *      (a standby sends nothing), then raises the senders' incarnations
 *      above every earlier timeline's, so that the jobs the old primary's
 *      senders held are recovered.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "core/shared.h"
#include "launcher/launcher.h"

#define PROMOTION_POLL_MS 100

/*
 * Incarnations on timeline T start at T << 52, plus the clock: a timeline's
 * are above every earlier timeline's while the clock (microseconds since
 * 2000) stays below 2^52 (until 2142), for timelines up to 2047.
 */
#define TIMELINE_SHIFT 52
#define MAX_TIMELINE_PREFIX 2047

/*
 * The floor of the incarnations on this server's timeline (the launcher
 * raises the next incarnation to it before it starts any sender).
 */
int64
notif_incarnation_floor(void)
{
	int64		tli = (int64) Min(GetWALInsertionTimeLine(), MAX_TIMELINE_PREFIX);

	return (tli << TIMELINE_SHIFT) + GetCurrentTimestamp();
}

/*
 * On a standby the launcher waits for the promotion: nothing is sent from
 * a standby, and no sender starts there.  Said once in the log; shown in
 * notif_workers().  Returns false when asked to stop meanwhile.
 */
bool
notif_wait_for_promotion(void)
{
	if (!RecoveryInProgress())
		return true;
	pg_atomic_write_u32(&notif_shared->launcher_state, WORKER_STANDBY);
	pgstat_report_activity(STATE_IDLE, "waiting for promotion (standby)");
	ereport(LOG,
			(errmsg("notif_deliver launcher: this server is a standby; waiting for its promotion"),
			 errdetail("Senders start when the server is promoted; a standby sends nothing.")));
	while (RecoveryInProgress())
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 PROMOTION_POLL_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ShutdownRequestPending)
			return false;
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
	}
	pg_atomic_write_u32(&notif_shared->launcher_state, WORKER_STARTING);
	pgstat_report_activity(STATE_IDLE, NULL);
	ereport(LOG,
			(errmsg("notif_deliver launcher: the server was promoted (timeline %u); starting the senders",
					GetWALInsertionTimeLine())));
	return true;
}
