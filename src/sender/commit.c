/*-------------------------------------------------------------------------
 *
 * sender/commit.c
 *      A sender round's commit, which is where the guarantee is kept, and
 *      the synchronous standby (doc/ha.md); the sender's signal handlers,
 *      which end a wait for that standby.  (The launcher's wait for a
 *      promotion and the incarnations of a new timeline: launcher/promotion.c.)
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

#include "sender/commit.h"

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
