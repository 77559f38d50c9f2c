/*-------------------------------------------------------------------------
 *
 * sender/round.c
 *      One round of a lane's sender, in one short transaction: record the
 *      results of the calls that ended, recover jobs left in flight by
 *      stopped senders, claim due jobs; commit; only then start the claimed
 *      calls.  What each job becomes is job_state.c's to say; this file
 *      carries it out and puts the commit where the guarantee needs it.
 *
 * So an at_most_once job is committed 'sent' before its request leaves
 * (durably, even under synchronous_commit = off), and an at_least_once job
 * is committed 'sending' before, and 'sent' only in a round after its 2xx
 * arrived.  No transaction is open while calls are in flight.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "sender/commit.h"
#include "http/http.h"
#include "provider/push.h"
#include "sender/breaker.h"
#include "sender/lookup.h"
#include "provider/request.h"
#include "sender/sender.h"
#include "sender/throttle.h"
#include "store/job_sql.h"

static void
free_config(MemoryContext cxt, NotifTypeConf *t, int n)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		notif_throttle_detach(t[i].provider.throttle, sender.slot);
		if (t[i].provider.headers)
			curl_slist_free_all(t[i].provider.headers);
		if (t[i].provider.curlu)
			curl_url_cleanup(t[i].provider.curlu);
		if (t[i].provider.lookup && t[i].provider.lookup->headers)
		{
			struct curl_slist *h;

			for (h = t[i].provider.lookup->headers; h; h = h->next)
				explicit_bzero(h->data, strlen(h->data));
			curl_slist_free_all(t[i].provider.lookup->headers);
		}
	}
	MemoryContextDelete(cxt);
}

/*
 * Re-read the lane's types.  The new configuration replaces the old only
 * once it is read whole: a failed read leaves the old one in place.  Jobs
 * left in flight by stopped senders are looked for again too (a type may
 * have moved into this lane, or been resumed).
 */
void
sender_reload_config(void)
{
	uint64		generation;
	MemoryContext cxt;
	NotifTypeConf *fresh;
	int			n,
				i;

	/* read the generation first: a change after this is seen next time */
	generation = pg_atomic_read_u64(&notif_shared->config_generation);
	cxt = AllocSetContextCreate(TopMemoryContext, "notif_deliver config",
								ALLOCSET_DEFAULT_SIZES);
	PG_TRY();
	{
		n = notif_sql_lane_types(sender.lane, cxt, &fresh);
	}
	PG_CATCH();
	{
		MemoryContextDelete(cxt);
		PG_RE_THROW();
	}
	PG_END_TRY();

	/*
	 * Attach to the providers' throttles before letting go of the old ones.
	 * A provider's max_connections is the lane's: this sender takes its
	 * share among the lane's running senders, read again when they change.
	 */
	for (i = 0; i < n; i++)
	{
		fresh[i].provider.throttle = notif_throttle_attach(fresh[i].provider.name, sender.slot);
		fresh[i].provider.curlu = notif_url_parse(&fresh[i].provider);
		fresh[i].provider.max_connections =
			notif_sender_share(fresh[i].provider.max_connections, sender.lane_senders);
	}
	sender.config_senders = sender.lane_senders;
	if (sender.config_cxt)
		free_config(sender.config_cxt, sender.types, sender.n_types);
	sender.config_cxt = cxt;
	sender.types = fresh;
	sender.n_types = n;
	/* database-wide, the same on every row (a round recovers any lane's jobs) */
	sender.any_fallback = n > 0 && fresh[0].any_fallback;
	sender.any_outcomes = n > 0 && fresh[0].any_outcomes;
	notif_http_config_read(fresh, n);
	notif_push_auth_keep_only(fresh, n);
	sender.config_generation = generation;
	pg_atomic_write_u64(&sender.slot->config_seen, generation);
	sender.config_stale = false;
	sender.need_recovery = true;
}

/*
 * An at_most_once claim must be durable before its call starts, on this
 * server and on the synchronous standby that a failover would promote:
 * were its commit lost, the job would be claimed and sent again.  Under a
 * weaker synchronous_commit (off, local, remote_write), this round commits
 * with "on" (a transaction-local setting; remote_apply is kept).  A round
 * without at_most_once claims keeps the user's setting.  Should the wait
 * for the standby be cut short, the calls stay back (hold_back_claimed).
 */
static void
make_claims_durable(void)
{
	dlist_iter	iter;

	if (synchronous_commit >= SYNCHRONOUS_COMMIT_REMOTE_FLUSH)
		return;
	dlist_foreach(iter, &sender.claimed)
	{
		NotifCall  *call = dlist_container(NotifCall, node, iter.cur);

		if (call->job.delivery == AT_MOST_ONCE)
		{
			(void) set_config_option("synchronous_commit", "on",
									 PGC_SUSET, PGC_S_SESSION,
									 GUC_ACTION_LOCAL, true, 0, false);
			return;
		}
	}
}

/*
 * The round's commit may lack the synchronous standby's confirmation (ha.c):
 * its claims are not to be acted on.  Their calls never start; they are
 * recorded as not having reached the provider (job_state.c: tried again
 * while tries remain).
 */
static void
hold_back_claimed(void)
{
	dlist_mutable_iter iter;
	int			n = 0;

	dlist_foreach_modify(iter, &sender.claimed)
	{
		NotifCall  *call = dlist_container(NotifCall, node, iter.cur);

		dlist_delete(&call->node);
		call->error = MemoryContextStrdup(call->cxt,
										  "not sent: the synchronous standby did not confirm the claim");
		sender_never_started(call, OUTCOME_UNREACHED);
		n++;
	}
	if (n > 0)
		ereport(LOG,
				(errmsg("notif_deliver sender of lane \"%s\": %d claimed job(s) not sent: the synchronous standby did not confirm the claim",
						sender.lane, n),
				 errdetail("The wait for synchronous replication was cancelled.")));
}

/*
 * A job this round queued again for another try is due at its next_at:
 * claim no later than that (else it would wait for a wake-up, or for
 * notif_deliver.poll_interval, past a short deadline).
 */
static void
claim_retries_when_due(const NotifResult *results, int n)
{
	int			i;

	for (i = 0; i < n; i++)
		if (results[i].next.row->retries && sender.claim_at != 0 &&
			results[i].next.next_at < sender.claim_at)
			sender.claim_at = results[i].next.next_at;
}

/*
 * The calls in flight this sender may have: its share of the lane's
 * notif_deliver.max_inflight among the lane's running senders (as counted
 * at the last round).  While a sibling starts, calls started under the
 * larger share end before this sender claims again.
 */
int
sender_max_inflight(void)
{
	return notif_sender_share(notif_max_inflight, sender.lane_senders);
}

/* Results to record, jobs to recover, or a configuration to read? */
bool
sender_has_work(void)
{
	TimestampTz fallbacks_at = sender_fallbacks_retry_at();

	return !dlist_is_empty(&sender.finished) || sender.need_recovery || sender.config_stale ||
		(!dlist_is_empty(&sender.passed) && sender.passed_at <= GetCurrentTimestamp()) ||
		(fallbacks_at != 0 && fallbacks_at <= GetCurrentTimestamp());
}

/*
 * The round's results are committed: let their calls go, but keep those
 * whose job another session held locked (passed[i], in the order of the
 * finished list) for a later round.
 */
static void
let_recorded_go(const bool *passed)
{
	int			i = 0;

	while (!dlist_is_empty(&sender.finished))
	{
		NotifCall  *call = dlist_container(NotifCall, node, dlist_pop_head_node(&sender.finished));

		if (passed[i++])
		{
			dlist_push_tail(&sender.passed, &call->node);
			sender.passed_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														   SENDER_LOCKED_RESULT_WAIT_MS);
		}
		else
			sender_free_call(call);
	}
}

/*
 * One round: record, recover, claim, in one transaction; then start the
 * claimed calls.  On error the transaction rolls back, the results stay to
 * be recorded next time, nothing claimed is started.
 */
void
sender_round(bool want_claim)
{
	NotifResult *results;
	int			n_results = 0;
	bool	   *passed = NULL;
	bool	   *ended;
	bool		installed;
	bool		confirmed;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "recording results and claiming jobs");

	installed = notif_sql_prepare();
	sender.lane_senders = notif_lane_senders(sender.lane);
	if (sender.lane_senders != sender.config_senders)
		sender.config_stale = true; /* max_connections is shared out anew */
	if (installed)
	{
		if (sender.config_stale)
			sender_reload_config();
		if (sender.need_recovery)
		{
			/* a failed round reads the configuration again, which asks again */
			sender.need_recovery = false;
			sender_recover_orphans();
		}
		sender_retake_passed(ShutdownRequestPending);
		sender_fallbacks_pending();
		n_results = sender_finished_results(&results);
		/* read after the commit: not in the SPI or transaction memory */
		passed = MemoryContextAllocZero(sender.round_cxt, sizeof(bool) * Max(n_results, 1));
		ended = sender_outcomes_ended(n_results);
		sender_record(results, n_results, passed, ended);
		sender_outcomes_of_results(results, n_results, ended);
		sender_endpoint_results(passed);
		sender_fallbacks_of_results(results, n_results, passed);
		notif_push_record_unregistered(&sender.finished);
		if (want_claim && !ShutdownRequestPending)
			sender_claim_jobs();
		claim_retries_when_due(results, n_results);
		make_claims_durable();
	}

	SPI_finish();
	PopActiveSnapshot();
	confirmed = notif_commit_round(sender.slot,
								   ShutdownRequestPending && dlist_is_empty(&sender.claimed));
	sender_fallbacks_committed();
	pgstat_report_stat(false);
	sender.activity_stale = true;
	if (sender.fallback_wake)
	{
		sender.fallback_wake = false;
		notif_wake_senders();	/* fallbacks written, maybe another lane's */
	}

	if (!installed)
	{
		/* the extension is gone: the launcher will stop us; do not spin */
		sender.backoff_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														   SENDER_NOT_INSTALLED_WAIT_MS);
		return;
	}

	let_recorded_go(passed);
	sender.record_passing = !dlist_is_empty(&sender.passed);

	if (!confirmed)
		hold_back_claimed();
	sender_start_claimed();
	sender_drive_calls(false);
	sender.n_errors = 0;
	if (sender.last_error)
	{
		pfree(sender.last_error);
		sender.last_error = NULL;
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

/* A round raised an error: roll back, give back what it held, back off. */
void
sender_round_failed(void)
{
	ErrorData  *edata;
	int64		delay;

	MemoryContextSwitchTo(sender.round_cxt);
	edata = CopyErrorData();
	FlushErrorState();
	AbortCurrentTransaction();
	sender_fallbacks_rolled_back();
	sender.fallback_wake = false;
	sender_discard_claimed();
	notif_throttle_release(sender.grant_slot, sender.grant_left, true);
	sender.grant_left = 0;
	if (sender.probe_held >= 0)
		notif_breaker_probe_unused(sender.probe_held, false);
	sender.probe_held = -1;
	sender.config_stale = true;
	sender.activity_stale = true;

	/* the record met a job's lock: again at once, passing over locked jobs */
	if (sender.recording && edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
	{
		sender.recording = false;
		sender.record_passing = true;
		return;
	}
	sender.recording = false;

	/*
	 * A DROP EXTENSION that committed during the round is no error: the
	 * launcher stops this sender within a second.  Wait for it quietly.
	 */
	if (!extension_installed())
	{
		sender.backoff_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														   SENDER_NOT_INSTALLED_WAIT_MS);
		return;
	}

	/*
	 * An integrity error's DETAIL shows the row or the key ("Failing row
	 * contains (...)"): a job's payload, a recipient's number.  It is not
	 * logged; the message names the constraint.
	 */
	if (edata->detail &&
		ERRCODE_TO_CATEGORY(edata->sqlerrcode) == ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION)
		edata->detail = NULL;

	if (sender.last_error == NULL || strcmp(sender.last_error, edata->message) != 0)
	{
		ereport(LOG,
				(errmsg("notif_deliver sender of lane \"%s\": %s", sender.lane, edata->message),
				 edata->detail ? errdetail_internal("%s", edata->detail) : 0,
				 errcontext("recording results and claiming jobs; retrying with backoff")));
		if (sender.last_error)
			pfree(sender.last_error);
		sender.last_error = MemoryContextStrdup(TopMemoryContext, edata->message);
	}
	sender.n_errors++;
	delay = Min((int64) SENDER_ERROR_BACKOFF_MAX_MS,
				(int64) SENDER_ERROR_BACKOFF_MIN_MS << Min(sender.n_errors,
												   SENDER_ERROR_BACKOFF_DOUBLINGS));
	sender.backoff_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), delay);
}
