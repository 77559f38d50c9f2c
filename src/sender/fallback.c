/*-------------------------------------------------------------------------
 *
 * sender/fallback.c
 *      Channel fallback (notif_type.fallback_type), in a sender's round: the
 *      jobs the round ended (failed, expired, or accepted with a
 *      fallback_after) are offered to job_sql.c's sql_fallback, which
 *      writes each one's fallback job in the round's transaction, so that
 *      a job's end and its fallback commit together.
 *
 *      The insert runs in a subtransaction that waits for a row lock no
 *      longer than SENDER_RECORD_LOCK_WAIT: an application's uncommitted
 *      enqueue of the same key would otherwise hold the round (the unique
 *      key's insert waits for it).  Such jobs stay pending, offered again
 *      a second later (the sender wakes for it), until a round that wrote
 *      them commits.  A sender that stops meanwhile forgets them: the
 *      application's enqueue of that key, if it commits, stands for the
 *      fallback.  Any other error
 *      is one job's (a trigger, a constraint of the application's): the
 *      jobs are then offered one by one, and a job whose fallback cannot
 *      be written is logged once and given up; the round goes on.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "sender/sender.h"
#include "store/job_sql.h"

/*
 * Jobs whose fallback met a lock: offered again each round; written[i]
 * once a round wrote it (gone when that round commits).
 */
typedef struct Pending
{
	int64		id;
	bool		written;
} Pending;

static Pending *pending = NULL;
static int	n_pending = 0;
static int	max_pending = 0;

/* when pending fallbacks are offered again (a lock is not waited for in a spin) */
#define FALLBACK_PENDING_RETRY_MS	1000
static TimestampTz pending_retry_at = 0;

static void
add_pending(int64 id)
{
	int			i;

	for (i = 0; i < n_pending; i++)
		if (pending[i].id == id)
			return;
	if (n_pending == max_pending)
	{
		max_pending = Max(16, max_pending * 2);
		if (pending == NULL)
			pending = MemoryContextAlloc(TopMemoryContext, sizeof(Pending) * max_pending);
		else
			pending = repalloc(pending, sizeof(Pending) * max_pending);
	}
	pending[n_pending].id = id;
	pending[n_pending].written = false;
	n_pending++;
	pending_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												   FALLBACK_PENDING_RETRY_MS);
}

/* When the pending fallbacks are due to be offered again; 0: none pending. */
TimestampTz
sender_fallbacks_retry_at(void)
{
	return n_pending > 0 ? pending_retry_at : 0;
}

/*
 * Write the fallbacks of ids in a subtransaction: true if it committed
 * (*written: how many jobs it wrote), else the error, copied.
 */
static bool
try_fallbacks(const int64 *ids, int n, int64 *written, ErrorData **error)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool ok = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		/* undone with the subtransaction, whichever way it ends */
		(void) set_config_option("lock_timeout", SENDER_RECORD_LOCK_WAIT, PGC_SUSET,
								 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
		*written = notif_sql_fallback(ids, n, sender.any_outcomes);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		*error = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return ok;
}

/*
 * A job's fallback could not be written: false if it met a lock (it stays,
 * or becomes, pending); else logged once and given up (true).
 */
static bool
given_up(int64 id, ErrorData *error)
{
	if (error->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
		return false;
	/*
	 * Not the error's DETAIL: a constraint's "Failing row contains (...)"
	 * would put the fallback's payload (an OTP, a phone number) in the log.
	 */
	ereport(WARNING,
			(errcode(error->sqlerrcode),
			 errmsg("notif_deliver sender of lane \"%s\": the channel fallback of job %lld was not written: %s",
					sender.lane, (long long) id, error->message),
			 errhint("Enqueue it with notif_enqueue() if it is still wanted.")));
	return true;
}

/*
 * Write the fallbacks of ids (all at once, else each alone to find the
 * ones that fail); done[i] says which are written or given up.  Returns
 * whether any was written.
 */
static bool
write_fallbacks(const int64 *ids, int n, bool *done)
{
	int64		written = 0;
	ErrorData  *error = NULL;
	bool		any = false;
	int			i;

	if (try_fallbacks(ids, n, &written, &error))
	{
		for (i = 0; i < n; i++)
			done[i] = true;
		return written > 0;
	}
	FreeErrorData(error);
	for (i = 0; i < n; i++)
	{
		error = NULL;
		done[i] = try_fallbacks(&ids[i], 1, &written, &error);
		if (done[i])
			any |= written > 0;
		else
		{
			done[i] = given_up(ids[i], error);
			FreeErrorData(error);
		}
	}
	return any;
}

/*
 * The fallbacks of these jobs, just ended or accepted, in the round's
 * transaction.  A written one wakes the senders once the round commits:
 * one due now is sent at once, one due later is known to the lane that
 * sleeps until its next job is due.
 */
void
sender_fallbacks(const int64 *ids, int n)
{
	bool	   *done;
	int			i;

	if (!sender.any_fallback || n == 0)
		return;
	done = palloc(sizeof(bool) * n);
	if (write_fallbacks(ids, n, done))
		sender.fallback_wake = true;
	for (i = 0; i < n; i++)
		if (!done[i])
			add_pending(ids[i]);
}

/* Once a round, before its results: the fallbacks that met a lock. */
void
sender_fallbacks_pending(void)
{
	int64	   *ids;
	bool	   *done;
	int			n = 0,
				i;
	int		   *at;

	if (n_pending == 0 || GetCurrentTimestamp() < pending_retry_at)
		return;
	ids = palloc(sizeof(int64) * n_pending);
	at = palloc(sizeof(int) * n_pending);
	done = palloc(sizeof(bool) * n_pending);
	for (i = 0; i < n_pending; i++)
		if (!pending[i].written)
		{
			at[n] = i;
			ids[n++] = pending[i].id;
		}
	if (n > 0 && write_fallbacks(ids, n, done))
		sender.fallback_wake = true;
	for (i = 0; i < n; i++)
		pending[at[i]].written = done[i];
	pending_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												   FALLBACK_PENDING_RETRY_MS);
}

/* The round committed: the pending fallbacks it wrote (or gave up) are done. */
void
sender_fallbacks_committed(void)
{
	int			kept = 0,
				i;

	for (i = 0; i < n_pending; i++)
		if (!pending[i].written)
			pending[kept++] = pending[i];
	n_pending = kept;
}

/* The round rolled back: nothing it wrote stays; the pending stay pending. */
void
sender_fallbacks_rolled_back(void)
{
	int			i;

	for (i = 0; i < n_pending; i++)
		pending[i].written = false;
}

/* The jobs whose end (or accepted call) the round recorded. */
void
sender_fallbacks_of_results(const NotifResult *results, int n, const bool *passed)
{
	int64	   *ids;
	int			k = 0,
				i;

	if (!sender.any_fallback)
		return;
	ids = palloc(sizeof(int64) * Max(n, 1));
	for (i = 0; i < n; i++)
		if (!passed[i] && results[i].next.status != STATUS_QUEUED)
			ids[k++] = results[i].job_id;
	sender_fallbacks(ids, k);
}
