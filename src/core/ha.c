/*-------------------------------------------------------------------------
 *
 * ha.c
 *      What notif_deliver does about standbys and failover (doc/ha.md):
 *      a sender round's commit and the synchronous standby, the launcher's
 *      wait for promotion, and incarnations above every earlier timeline's.
 *
 * A round's commit may wait for the synchronous standby (an at_most_once
 * claim always does: make_claims_durable in sender/round.c).  PostgreSQL
 * ends such a wait only on a termination or cancel request (or the
 * postmaster's death), and the commit is then local only: the standby may
 * not have it.  So the sender's SIGTERM handler ends a wait in progress
 * (ProcDiePending, which SyncRepWaitForLSN looks at, without raising an
 * interrupt), and notif_commit_round() says when the standby's
 * confirmation may be missing: the calls of such a claim must not leave.
 * While it waits, the lane shows it (notif_workers(), pg_stat_activity).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "core/ha.h"

#define PROMOTION_POLL_MS 100

/*
 * Incarnations on timeline T start at T << 52, plus the clock: a timeline's
 * are above every earlier timeline's while the clock (microseconds since
 * 2000) stays below 2^52 (until 2142), for timelines up to 2047.
 */
#define TIMELINE_SHIFT 52
#define MAX_TIMELINE_PREFIX 2047

static volatile sig_atomic_t in_commit = false;
static volatile sig_atomic_t commit_interrupted = false;

/* SIGTERM: stop; a wait for the synchronous standby ends now. */
void
notif_sender_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	ShutdownRequestPending = true;
	if (in_commit)
	{
		ProcDiePending = true;
		commit_interrupted = true;
	}
	SetLatch(MyLatch);
	errno = save_errno;
}

/* SIGINT (pg_cancel_backend): ends a wait for the standby, too. */
void
notif_sender_sigint(SIGNAL_ARGS)
{
	if (in_commit)
		commit_interrupted = true;
	StatementCancelHandler(postgres_signal_arg);
}

/*
 * Commit the round's transaction.  Returns false when the commit may lack
 * the synchronous standby's confirmation that synchronous_commit asked for
 * (its wait was ended by a signal, or by the postmaster's death): whatever
 * needed the standby to have it must not act on it.  With stopping true
 * (the sender's last round: results only), the commit does not wait for a
 * standby at all: a result lost in a failover makes an at_least_once job be
 * sent again, never an at_most_once one.
 */
bool
notif_commit_round(NotifLaneSlot *slot, bool stopping)
{
	bool		may_wait;
	bool		confirmed;

	if (stopping && synchronous_commit > SYNCHRONOUS_COMMIT_LOCAL_FLUSH)
		(void) set_config_option("synchronous_commit", "local",
								 PGC_SUSET, PGC_S_SESSION,
								 GUC_ACTION_LOCAL, true, 0, false);
	may_wait = SyncRepRequested() && SyncRepStandbyNames && SyncRepStandbyNames[0] != '\0';
	if (may_wait)
	{
		pg_atomic_write_u32(&slot->state, WORKER_WAITING_SYNC_REP);
		pgstat_report_activity(STATE_RUNNING, "committing: waiting for synchronous replication");
	}

	commit_interrupted = false;
	in_commit = true;
	if (ShutdownRequestPending)
	{
		/* asked to stop before the commit: do not start waiting */
		ProcDiePending = true;
		commit_interrupted = true;
	}
	PG_TRY();
	{
		CommitTransactionCommand();
	}
	PG_FINALLY();
	{
		in_commit = false;
		confirmed = !commit_interrupted && !ProcDiePending;
		if (commit_interrupted)
			ProcDiePending = false; /* ours: the sender stops in its own way */
	}
	PG_END_TRY();
	return confirmed || !may_wait;
}

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
