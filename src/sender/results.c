/*-------------------------------------------------------------------------
 *
 * sender/results.c
 *      What a lane's sender records in its round: the result of each call
 *      that ended, and of each job a stopped sender left in flight (its
 *      call's outcome is unknown).  job_state.c decides what each job
 *      becomes; this builds the one result record job_sql.c writes, and
 *      runs it (passing over jobs another session holds, when one did).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/guc.h"
#include "utils/timestamp.h"

#include "store/job_sql.h"
#include "sender/sender.h"

/*
 * What to record for one call of a job that ended (EVENT_CALL_ENDED) or
 * whose sender was lost during it (EVENT_SENDER_LOST).
 */
static void
make_result(NotifResult *r, NotifEvent event, const NotifJobRef *job,
			NotifOutcome outcome, long http_status, const char *error,
			TimestampTz started_at, TimestampTz ended_at, int64 retry_after_ms,
			TimestampTz now, bool reported)
{
	r->job_id = job->id;
	r->tries = job->tries;
	r->earlier_tries = job->earlier_tries;
	r->expected_status = (NotifStatus) notif_claim_row(job->delivery, false)->to;
	r->claimed_by = job->claimed_by;
	r->outcome = outcome;
	r->http_status = http_status;
	r->started_at = started_at;
	r->ended_at = ended_at;
	r->next = notif_after_call(event, job->delivery, outcome, job->tries, &job->policy,
							   now, job->deadline_at, retry_after_ms, &job->dedup, reported,
							   event == EVENT_CALL_ENDED ? job->lookup : LOOKUP_NONE,
							   event == EVENT_CALL_ENDED && job->breaker_open,
							   event == EVENT_CALL_ENDED && job->probe,
							   event == EVENT_CALL_ENDED && job->next_route);
	r->error = r->next.row->note ? r->next.row->note : error;
	if (r->next.row->when == COND_BREAKER_OPEN)
		r->outcome = OUTCOME_NONE;	/* no call: the job keeps its last call's */
	if (r->next.status == STATUS_SENT && r->expected_status != STATUS_SENT)
		r->sent_at = ended_at;	/* at_most_once's was set by its claim */
}

/* the incarnations of the live senders are read onto the stack */
StaticAssertDecl(NOTIF_MAX_LANES_LIMIT * sizeof(int64) <= 8192,
				 "one incarnation per lane must fit on a sender's stack");

/* is v one of list's n?  (a live incarnation; a job a report came for) */
static bool
in_list(int64 v, const int64 *list, int n)
{
	int			i;

	for (i = 0; i < n; i++)
		if (list[i] == v)
			return true;
	return false;
}

/*
 * Recover the jobs left in flight by senders that are gone, of any type and
 * any lane.  A sender records its incarnation in shared memory before it
 * claims anything, so the senders alive are read again after the query: a
 * job claimed by a sender that started meanwhile is not touched.  A job
 * that a delivery report says delivered (it came during the call, and was
 * only recorded) needs no retry (lost_reported), as after a call that ended
 * unknown.
 */
void
sender_recover_orphans(void)
{
	int64		live[NOTIF_MAX_LANES_LIMIT];
	int			n_live = notif_live_incarnations(live);
	NotifOrphanJob *orphans;
	NotifResult *results;
	TimestampTz now = GetCurrentTimestamp();
	int64	   *ids;
	int64	   *reported;
	bool	   *ends;
	int			n_reported = 0;
	int			n,
				i,
				k = 0;

	n = notif_sql_orphans(live, n_live, sender.round_cxt, &orphans);
	if (n == 0)
		return;
	n_live = notif_live_incarnations(live);

	ids = palloc(sizeof(int64) * n);
	for (i = 0; i < n; i++)
		ids[i] = orphans[i].job.id;
	reported = notif_sql_reported(ids, n, &n_reported);

	results = palloc0(sizeof(NotifResult) * n);
	for (i = 0; i < n; i++)
	{
		NotifOrphanJob *o = &orphans[i];

		if (in_list(o->job.claimed_by, live, n_live))
			continue;
		make_result(&results[k++], EVENT_SENDER_LOST, &o->job, OUTCOME_UNKNOWN, 0, NULL,
					o->claimed_at ? o->claimed_at : now, now, 0, now,
					in_list(o->job.id, reported, n_reported));
		results[k - 1].provider = o->provider;	/* the call's, cut off */
	}
	if (k == 0)
		return;
	ends = sender_outcomes_ended(k);
	notif_sql_record(results, k, NULL, ends);
	sender_outcomes_of_results(results, k, ends);
	{
		int64	   *ended = palloc(sizeof(int64) * k);
		int			e = 0;

		for (i = 0; i < k; i++)
			if (results[i].next.status != STATUS_QUEUED)
				ended[e++] = results[i].job_id;
		sender_fallbacks(ended, e);
	}
	ereport(LOG,
			(errmsg("notif_deliver sender of lane \"%s\": recovered %d job(s) left in flight by a stopped sender",
					sender.lane, k)));
}

/*
 * Record the round's results (see SENDER_RECORD_LOCK_WAIT): the usual
 * record, which waits for a job's lock (a WAL record less per job than
 * locking first), or while record_passing, the one that passes over
 * locked jobs and says which in passed[].
 */
void
sender_record(NotifResult *results, int n, bool *passed, bool *ended)
{
	if (sender.record_passing)
	{
		notif_sql_record(results, n, passed, ended);
		return;
	}
	/* transaction-local (a source above the session value's PGC_S_OVERRIDE) */
	(void) set_config_option("lock_timeout", SENDER_RECORD_LOCK_WAIT, PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	sender.recording = true;
	notif_sql_record(results, n, NULL, ended);
	sender.recording = false;
	(void) set_config_option("lock_timeout", NOTIF_LOCK_TIMEOUT, PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
}

/* Results passed over for a lock: to be recorded again, when due or when forced. */
void
sender_retake_passed(bool force)
{
	if (!dlist_is_empty(&sender.passed) && (force || sender.passed_at <= GetCurrentTimestamp()))
		while (!dlist_is_empty(&sender.passed))
			dlist_push_tail(&sender.finished, dlist_pop_head_node(&sender.passed));
}

/* The results of the finished calls, as job_sql.c records them. */
int
sender_finished_results(NotifResult **out)
{
	dlist_iter	iter;
	int			n = 0;
	NotifResult *results;
	TimestampTz now = GetCurrentTimestamp();

	int64	   *ambiguous;
	int64	   *reported = NULL;
	int			n_ambiguous = 0,
				n_reported = 0;

	dlist_foreach(iter, &sender.finished)
		n++;
	results = palloc0(sizeof(NotifResult) * Max(n, 1));

	/* the ambiguous calls of jobs that a report says delivered meanwhile */
	ambiguous = palloc(sizeof(int64) * Max(n, 1));
	dlist_foreach(iter, &sender.finished)
	{
		NotifCall  *call = dlist_container(NotifCall, node, iter.cur);

		if (call->outcome == OUTCOME_UNKNOWN)
			ambiguous[n_ambiguous++] = call->job.id;
	}
	if (n_ambiguous > 0)
		reported = notif_sql_reported(ambiguous, n_ambiguous, &n_reported);

	n = 0;
	dlist_foreach(iter, &sender.finished)
	{
		NotifCall  *call = dlist_container(NotifCall, node, iter.cur);
		int64		retry_after = (call->http_status == 429 || call->http_status == 503 ||
								   call->job.breaker_open) ? call->retry_after_ms : 0;
		const char *error = call->error;
		bool		was_reported = call->outcome == OUTCOME_UNKNOWN &&
			in_list(call->job.id, reported, n_reported);

		/* a probe that met the provider down: due when the next may go */
		call->job.probe = call->probe;
		if (call->probe && call->outcome == OUTCOME_UNREACHED)
			retry_after = call->breaker_cooldown_ms;
		/* an at_least_once retry made for the window that started after it */
		call->job.dedup.started_late = call->job.dedup.retry && call->started_at != 0 &&
			call->started_at >= call->job.dedup.until;
		if (error && call->http_status != 0 && call->outcome != OUTCOME_ACCEPTED)
			error = psprintf("HTTP %ld%s%s", call->http_status, error[0] ? ": " : "", error);
		make_result(&results[n], EVENT_CALL_ENDED, &call->job, call->outcome,
					call->http_status, error, call->started_at, call->ended_at,
					retry_after, now, was_reported);
		/* found by the lookup: the provider asked has it (maybe not this call's) */
		results[n].batch_id = call->batch_id;
		results[n++].provider = (call->job.lookup == LOOKUP_FOUND && call->lookup_provider) ?
			call->lookup_provider : call->provider;
	}
	*out = results;
	return n;
}
