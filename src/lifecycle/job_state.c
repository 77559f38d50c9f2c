/*-------------------------------------------------------------------------
 *
 * lifecycle/job_state.c
 *      The delivery guarantee in one screen: every transition a job makes
 *      (transitions[]: claim, call result, a lost sender's recovery,
 *      notif_retry, notif_cancel) and how a call's result is classified
 *      (classification[], and answers[] for the push platforms' reasons).
 *      The senders and the SQL functions only carry out what these tables
 *      say; SQL reads them as notif_transitions(),
 *      whose expected output (expected/lifecycle.out) is the specification,
 *      and the TAP tests name their rows.
 *
 * When the commit happens is the other half of the guarantee (a sender's
 * round, sender/round.c, committed by sender/commit.c, which waits for a
 * synchronous standby where one is configured): a claim commits before
 * its call leaves the process, so an at_most_once
 * job is durably 'sent' before the provider can act, and an at_least_once
 * job becomes 'sent' only in a commit after a 2xx arrived.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <curl/curl.h>

#include "common/pg_prng.h"
#include "utils/timestamp.h"

#include "lifecycle/job_state.h"

#define AMO			AT_MOST_ONCE
#define ALO			AT_LEAST_ONCE
#define QUEUED		STATUS_QUEUED
#define SENDING		STATUS_SENDING
#define SENT		STATUS_SENT
#define FAILED		STATUS_FAILED
#define EXPIRED		STATUS_EXPIRED
#define FINISHED	(STATUS_SENT | STATUS_FAILED | STATUS_EXPIRED)
#define AMBIGUOUS	(OUTCOME_UNKNOWN | OUTCOME_UNREACHED)

/*
 * Every transition.  For an event, the first row whose delivery, status,
 * outcome and condition match applies; a row that goes to STATUS_NONE
 * refuses (nothing is written, its note says why).
 */
static const NotifTransitionRow transitions[] = {
	/* name               event delivery from outcome when to retries tries holds note */

	/* a sender claims a due job; the claim commits before the call starts */
	{"claim_late_dedup_retry", EVENT_CLAIM, AMO, QUEUED, OUTCOME_ANY, COND_DEDUP_RETRY_LATE,
	SENT, false, TRIES_KEPT, false, "deadline passed before the retry made for the provider's deduplication window could start: not sent again"},
	{"claim_late", EVENT_CLAIM, DELIVERY_ANY, QUEUED, OUTCOME_ANY, COND_DEADLINE_PASSED,
	EXPIRED, false, TRIES_KEPT, false, "deadline passed before an attempt could start"},
	{"claim_at_most_once", EVENT_CLAIM, AMO, QUEUED, OUTCOME_ANY, COND_ALWAYS,
	SENT, false, TRIES_COUNTED, true, NULL},
	{"claim_at_least_once", EVENT_CLAIM, ALO, QUEUED, OUTCOME_ANY, COND_ALWAYS,
	SENDING, false, TRIES_COUNTED, true, NULL},

	/*
	 * the provider's circuit breaker was open when the call was to start
	 * (sender/breaker.c): nothing was sent, so the job goes back to the
	 * queue with its try given back, either delivery, due when the breaker
	 * lets a call through again (its deadline holds: claim_late)
	 */
	{"amo_breaker_open", EVENT_CALL_ENDED, AMO, SENT, OUTCOME_UNREACHED, COND_BREAKER_OPEN,
	QUEUED, true, TRIES_UNCOUNTED, false, "the provider's circuit breaker is open: not called"},
	{"alo_breaker_open", EVENT_CALL_ENDED, ALO, SENDING, OUTCOME_UNREACHED, COND_BREAKER_OPEN,
	QUEUED, true, TRIES_UNCOUNTED, false, "the provider's circuit breaker is open: not called"},

	/* an at_most_once call ended: the job is already 'sent' */
	{"amo_accepted", EVENT_CALL_ENDED, AMO, SENT, OUTCOME_ACCEPTED, COND_ALWAYS,
	SENT, false, TRIES_KEPT, false, NULL},
	{"amo_reported", EVENT_CALL_ENDED, AMO, SENT, OUTCOME_UNKNOWN, COND_REPORTED,
	SENT, false, TRIES_KEPT, false, NULL},	/* delivered: nothing to retry */
	{"amo_unknown_dedup_retry", EVENT_CALL_ENDED, AMO, SENT, OUTCOME_UNKNOWN, COND_IN_DEDUP_WINDOW,
	QUEUED, true, TRIES_KEPT, false, NULL},	/* the provider drops a repeat */
	{"amo_unknown", EVENT_CALL_ENDED, AMO, SENT, OUTCOME_UNKNOWN, COND_ALWAYS,
	SENT, false, TRIES_KEPT, false, NULL},	/* never again */
	/*
	 * a retry made for the provider's window that gets no answer to rely
	 * on: the first call may have delivered, so the job ends as that call
	 * left it, sent with outcome unknown (its own outcome is the attempt's)
	 */
	{"amo_dedup_retry_rejected", EVENT_CALL_ENDED, AMO, SENT, OUTCOME_REJECTED, COND_DEDUP_RETRY,
	SENT, false, TRIES_KEPT, false, "the retry made for the provider's deduplication window was refused: the first call may have delivered"},
	{"amo_dedup_retry_unreached_exhausted", EVENT_CALL_ENDED, AMO, SENT, OUTCOME_UNREACHED, COND_DEDUP_RETRY_EXHAUSTED,
	SENT, false, TRIES_KEPT, false, "the retries made for the provider's deduplication window never reached it: the first call may have delivered"},
	{"amo_rejected", EVENT_CALL_ENDED, AMO, SENT, OUTCOME_REJECTED, COND_ALWAYS,
	FAILED, false, TRIES_KEPT, false, NULL},
	/*
	 * the probe of a half-open breaker that never reached the provider
	 * (still down, and the breaker open again) gives its try back, either
	 * delivery: in a long outage the probes would otherwise spend the tries
	 * of the jobs they carry, one per cooldown, until each fails.  Due when
	 * the breaker lets a call through again (its deadline holds:
	 * claim_late), or at once if a backup provider follows.  No attempt
	 * row (its try number is the next call's): the job's last error and
	 * notif_provider_health show it.  A probe that ends ambiguous keeps its
	 * try, as any call.
	 */
	{"amo_probe_unreached", EVENT_CALL_ENDED, AMO, SENT, OUTCOME_UNREACHED, COND_PROBE,
	QUEUED, true, TRIES_UNCOUNTED, false, NULL},
	{"amo_unreached_out_of_tries", EVENT_CALL_ENDED, AMO, SENT, OUTCOME_UNREACHED, COND_OUT_OF_TRIES,
	FAILED, false, TRIES_KEPT, false, NULL},
	{"amo_unreached_out_of_time", EVENT_CALL_ENDED, AMO, SENT, OUTCOME_UNREACHED, COND_OUT_OF_TIME,
	FAILED, false, TRIES_KEPT, false, NULL},
	/* it never reached that provider: the next one takes it, at once */
	{"amo_unreached_next_route", EVENT_CALL_ENDED, AMO, SENT, OUTCOME_UNREACHED, COND_NEXT_ROUTE,
	QUEUED, true, TRIES_KEPT, false, NULL},
	{"amo_unreached_retry", EVENT_CALL_ENDED, AMO, SENT, OUTCOME_UNREACHED, COND_ALWAYS,
	QUEUED, true, TRIES_KEPT, false, NULL},
	{"amo_dedup_window_passed", EVENT_CALL_ENDED, AMO, SENT, OUTCOME_NOT_STARTED, COND_DEDUP_WINDOW_PASSED,
	SENT, false, TRIES_UNCOUNTED, false, "the provider's deduplication window passed before the retry could start: not sent again"},
	{"amo_dedup_retry_not_started", EVENT_CALL_ENDED, AMO, SENT, OUTCOME_NOT_STARTED, COND_DEDUP_RETRY,
	SENT, false, TRIES_UNCOUNTED, false, "deadline passed before the retry made for the provider's deduplication window could start: not sent again"},
	{"amo_not_started", EVENT_CALL_ENDED, AMO, SENT, OUTCOME_NOT_STARTED, COND_ALWAYS,
	EXPIRED, false, TRIES_UNCOUNTED, false, "deadline passed before the attempt could start"},

	/* an at_least_once call ended: the job is 'sending' */
	{"alo_lookup_found", EVENT_CALL_ENDED, ALO, SENDING, OUTCOME_ACCEPTED, COND_LOOKUP_FOUND,
	SENT, false, TRIES_KEPT, false, "the provider's status lookup found it: not sent again"},
	{"alo_accepted", EVENT_CALL_ENDED, ALO, SENDING, OUTCOME_ACCEPTED, COND_ALWAYS,
	SENT, false, TRIES_KEPT, false, NULL},
	{"alo_rejected", EVENT_CALL_ENDED, ALO, SENDING, OUTCOME_REJECTED, COND_ALWAYS,
	FAILED, false, TRIES_KEPT, false, NULL},
	{"alo_reported", EVENT_CALL_ENDED, ALO, SENDING, OUTCOME_UNKNOWN, COND_REPORTED,
	SENT, false, TRIES_KEPT, false, NULL},	/* a report said delivered: no retry */
	{"alo_probe_unreached", EVENT_CALL_ENDED, ALO, SENDING, OUTCOME_UNREACHED, COND_PROBE,
	QUEUED, true, TRIES_UNCOUNTED, false, NULL},
	{"alo_out_of_tries", EVENT_CALL_ENDED, ALO, SENDING, AMBIGUOUS, COND_OUT_OF_TRIES,
	FAILED, false, TRIES_KEPT, false, NULL},
	{"alo_out_of_time", EVENT_CALL_ENDED, ALO, SENDING, AMBIGUOUS, COND_OUT_OF_TIME,
	EXPIRED, false, TRIES_KEPT, false, NULL},
	{"alo_retry_in_dedup_window", EVENT_CALL_ENDED, ALO, SENDING, OUTCOME_UNKNOWN, COND_IN_DEDUP_WINDOW,
	QUEUED, true, TRIES_KEPT, false, NULL},	/* no duplicate: the provider drops it */
	{"alo_retry_after_report_wait", EVENT_CALL_ENDED, ALO, SENDING, OUTCOME_UNKNOWN, COND_REPORT_WAIT,
	QUEUED, true, TRIES_KEPT, false, NULL},	/* a report may come first */
	/*
	 * the next provider takes it at once (after an ambiguous call, a copy
	 * there may be a duplicate; its own provider's report wait came first)
	 */
	{"alo_next_route", EVENT_CALL_ENDED, ALO, SENDING, AMBIGUOUS, COND_NEXT_ROUTE,
	QUEUED, true, TRIES_KEPT, false, NULL},
	{"alo_retry", EVENT_CALL_ENDED, ALO, SENDING, AMBIGUOUS, COND_ALWAYS,
	QUEUED, true, TRIES_KEPT, false, NULL},
	{"alo_not_started", EVENT_CALL_ENDED, ALO, SENDING, OUTCOME_NOT_STARTED, COND_ALWAYS,
	EXPIRED, false, TRIES_UNCOUNTED, false, "deadline passed before the attempt could start"},

	/*
	 * the sender holding the job stopped during its call: outcome unknown,
	 * resolved as a call that ended unknown would be by a report already
	 * recorded, and held as long for one (resolve_wait)
	 */
	{"lost_reported", EVENT_SENDER_LOST, DELIVERY_ANY, SENT | SENDING, OUTCOME_UNKNOWN, COND_REPORTED,
	SENT, false, TRIES_KEPT, false, "the sender stopped during the call"},	/* a report said delivered */
	{"lost_at_most_once", EVENT_SENDER_LOST, AMO, SENT, OUTCOME_UNKNOWN, COND_ALWAYS,
	SENT, false, TRIES_KEPT, false, "the sender stopped during the call"},
	{"lost_out_of_tries", EVENT_SENDER_LOST, ALO, SENDING, OUTCOME_UNKNOWN, COND_OUT_OF_TRIES,
	FAILED, false, TRIES_KEPT, false, "the sender stopped during the call"},
	{"lost_out_of_time", EVENT_SENDER_LOST, ALO, SENDING, OUTCOME_UNKNOWN, COND_OUT_OF_TIME,
	EXPIRED, false, TRIES_KEPT, false, "the sender stopped during the call"},
	{"lost_retry_after_report_wait", EVENT_SENDER_LOST, ALO, SENDING, OUTCOME_UNKNOWN, COND_REPORT_WAIT,
	QUEUED, true, TRIES_KEPT, false, "the sender stopped during the call"},
	{"lost_retry", EVENT_SENDER_LOST, ALO, SENDING, OUTCOME_UNKNOWN, COND_ALWAYS,
	QUEUED, true, TRIES_KEPT, false, "the sender stopped during the call"},

	/* notif_retry: a re-drive with fresh tries (and a fresh deadline) */
	{"retry_cancelled_by_kind", EVENT_RETRY, DELIVERY_ANY, FAILED, OUTCOME_ANY, COND_CANCELLED_BY_KIND,
	STATUS_NONE, false, TRIES_KEPT, false, "cancelled jobs stay cancelled (retry them by id)"},
	{"retry_forced", EVENT_RETRY, AMO, FINISHED, OUTCOME_UNKNOWN, COND_IDLE_FORCED,
	QUEUED, true, TRIES_FRESH, false, NULL},
	{"retry_maybe_delivered", EVENT_RETRY, AMO, FINISHED, OUTCOME_UNKNOWN, COND_IDLE,
	STATUS_NONE, false, TRIES_KEPT, false, "may already have been delivered"},
	{"retry", EVENT_RETRY, DELIVERY_ANY, FAILED | EXPIRED, OUTCOME_ANY, COND_ALWAYS,
	QUEUED, true, TRIES_FRESH, false, NULL},
	{"retry_refused", EVENT_RETRY, DELIVERY_ANY, STATUS_ANY, OUTCOME_ANY, COND_ALWAYS,
	STATUS_NONE, false, TRIES_KEPT, false, "only failed or expired jobs can be retried"},

	/* notif_cancel: a queued job never goes out */
	{"cancel", EVENT_CANCEL, DELIVERY_ANY, QUEUED, OUTCOME_ANY, COND_ALWAYS,
	FAILED, false, TRIES_KEPT, false, "cancelled"},
	{"cancel_refused", EVENT_CANCEL, DELIVERY_ANY, STATUS_ANY, OUTCOME_ANY, COND_ALWAYS,
	STATUS_NONE, false, TRIES_KEPT, false, "only a queued job can be cancelled"},

	/*
	 * notif_dlr: a report that the message was delivered, for a job queued
	 * again after an ambiguous call, ends it: the call it retries did
	 * deliver.  Otherwise the report is only recorded (a job in flight, or
	 * finished: a copy already retried is a measured duplicate).
	 */
	{"report_resolves", EVENT_REPORT, DELIVERY_ANY, QUEUED, OUTCOME_UNKNOWN, COND_ALWAYS,
	SENT, false, TRIES_KEPT, false, NULL},
	{"report_recorded", EVENT_REPORT, DELIVERY_ANY, STATUS_ANY, OUTCOME_ANY, COND_ALWAYS,
	STATUS_NONE, false, TRIES_KEPT, false, "the report is recorded; the job is not waiting for one"},
};

/*
 * How a call ended, by libcurl's result.  A failure is 'unreached' only
 * when the request provably never reached the provider; anything that may
 * have reached it is 'unknown'.  Codes not listed: 'unknown' once the
 * request was (partly) sent, 'unreached' before.
 */
typedef struct ClassificationRow
{
	CURLcode	code;
	NotifOutcome outcome;
} ClassificationRow;

static const ClassificationRow classification[] = {
	{CURLE_COULDNT_RESOLVE_PROXY, OUTCOME_UNREACHED},
	{CURLE_COULDNT_RESOLVE_HOST, OUTCOME_UNREACHED},
	{CURLE_COULDNT_CONNECT, OUTCOME_UNREACHED},
	{CURLE_SSL_CONNECT_ERROR, OUTCOME_UNREACHED},	/* TLS handshake */
	{CURLE_PEER_FAILED_VERIFICATION, OUTCOME_UNREACHED},
	{CURLE_SSL_CACERT_BADFILE, OUTCOME_UNREACHED},
	{CURLE_URL_MALFORMAT, OUTCOME_UNREACHED},
	{CURLE_UNSUPPORTED_PROTOCOL, OUTCOME_UNREACHED},
	{CURLE_SEND_FAIL_REWIND, OUTCOME_UNKNOWN},	/* at_most_once resend refused */
	{CURLE_GOT_NOTHING, OUTCOME_UNKNOWN},	/* closed after receiving */
	{CURLE_RECV_ERROR, OUTCOME_UNKNOWN},	/* reset mid-call */
	{CURLE_PARTIAL_FILE, OUTCOME_UNKNOWN},
};

/*
 * Classify a finished call.  request_sent: any byte of the request was
 * written (so the connection, and TLS, were established).
 */
NotifOutcome
notif_classify(int curl_code, long http_status, bool request_sent)
{
	int			i;

	/* the provider answered 2xx: accepted, even if reading the rest failed */
	if (http_status >= 200 && http_status < 300)
		return OUTCOME_ACCEPTED;

	if (curl_code == CURLE_OK)
	{
		if (http_status == 408 || http_status == 429)
			return OUTCOME_UNREACHED;	/* the provider says it did not act */
		if (http_status >= 500)
			return OUTCOME_UNKNOWN; /* 502/504 from a gateway above all */
		return OUTCOME_REJECTED;	/* other 4xx; 1xx/3xx (redirects are
									 * not followed) */
	}

	for (i = 0; i < (int) lengthof(classification); i++)
		if (classification[i].code == (CURLcode) curl_code)
		{
			/*
			 * A connection failure after request bytes went out: the request
			 * died on a reused keep-alive connection, libcurl silently re-sent
			 * it on a fresh one, and that one failed (e.g. refused because the
			 * provider just died).  The first copy may have been acted on.
			 */
			if (classification[i].outcome == OUTCOME_UNREACHED && request_sent)
				return OUTCOME_UNKNOWN;
			return classification[i].outcome;
		}

	/* a timeout among others: safe to retry only if it struck before sending */
	return request_sent ? OUTCOME_UNKNOWN : OUTCOME_UNREACHED;
}

/*
 * What a push platform's answer says beyond its status: our token refused
 * (the platform did not act: unreached, with a new token), the device
 * token dead (rejected, and listed), FCM's quota (at least a minute), one
 * device sent to too often (only its job waits for Retry-After; a 429
 * otherwise pauses the whole provider).
 * Answers not listed keep notif_classify()'s outcome: 429 unreached, 5xx
 * unknown, other 4xx rejected.
 */
static const NotifAnswerRow answers[] = {
	/* name                      platform status reason            outcome  action  min retry */
	{"fcm_unauthenticated", "fcm", 401, "UNAUTHENTICATED", OUTCOME_UNREACHED, ANSWER_NEW_TOKEN, 0},
	{"fcm_unregistered", "fcm", 404, "UNREGISTERED", OUTCOME_REJECTED, ANSWER_DEAD_TOKEN, 0},
	{"fcm_quota_exceeded", "fcm", 429, "QUOTA_EXCEEDED", OUTCOME_UNREACHED, ANSWER_KEEP, 60 * 1000},
	{"apns_expired_provider_token", "apns", 403, "ExpiredProviderToken", OUTCOME_UNREACHED, ANSWER_RESIGN_NOW, 0},
	{"apns_invalid_provider_token", "apns", 403, "InvalidProviderToken", OUTCOME_UNREACHED, ANSWER_NEW_TOKEN, 0},
	{"apns_unregistered", "apns", 410, "Unregistered", OUTCOME_REJECTED, ANSWER_DEAD_TOKEN, 0},
	{"apns_bad_device_token", "apns", 400, "BadDeviceToken", OUTCOME_REJECTED, ANSWER_DEAD_TOKEN, 0},
	{"apns_too_many_requests", "apns", 429, "TooManyRequests", OUTCOME_UNREACHED, ANSWER_DEVICE_BUSY, 0},
};

/* The row for a platform's answer, or NULL (the status decides). */
const NotifAnswerRow *
notif_classify_answer(const char *platform, long http_status, const char *reason)
{
	int			i;

	if (reason == NULL)
		return NULL;
	for (i = 0; i < (int) lengthof(answers); i++)
		if (answers[i].http_status == http_status &&
			strcmp(answers[i].platform, platform) == 0 &&
			strcmp(answers[i].reason, reason) == 0)
			return &answers[i];
	return NULL;
}

static bool
condition_holds(NotifCondition when, const NotifFacts *f)
{
	switch (when)
	{
		case COND_ALWAYS:
			return true;
		case COND_DEADLINE_PASSED:
			return f->deadline_passed;
		case COND_OUT_OF_TRIES:
			return f->out_of_tries;
		case COND_OUT_OF_TIME:
			return f->out_of_time;
		case COND_IDLE_FORCED:
			return !f->held && f->forced;
		case COND_IDLE:
			return !f->held;
		case COND_CANCELLED_BY_KIND:
			return f->cancelled && f->by_kind;
		case COND_IN_DEDUP_WINDOW:
			return f->in_dedup_window;
		case COND_DEDUP_WINDOW_PASSED:
			return f->dedup_window_passed;
		case COND_REPORT_WAIT:
			return f->report_wait;
		case COND_DEDUP_RETRY:
			return f->dedup_retry;
		case COND_DEDUP_RETRY_EXHAUSTED:
			return f->dedup_retry && (f->out_of_tries || f->out_of_time);
		case COND_DEDUP_RETRY_LATE:
			return f->dedup_retry && f->deadline_passed;
		case COND_REPORTED:
			return f->reported;
		case COND_LOOKUP_FOUND:
			return f->lookup_found;
		case COND_BREAKER_OPEN:
			return f->breaker_open;
		case COND_PROBE:
			return f->probe;
		case COND_NEXT_ROUTE:
			return f->next_route;
	}
	return false;
}

const NotifTransitionRow *
notif_find_transition(NotifEvent event, NotifDelivery delivery, NotifStatus from,
					  int outcome, const NotifFacts *facts)
{
	int			i;

	for (i = 0; i < (int) lengthof(transitions); i++)
	{
		const NotifTransitionRow *row = &transitions[i];

		if (row->event != event || !(row->delivery & delivery) || !(row->from & from))
			continue;
		if (row->outcome != OUTCOME_ANY &&
			(outcome == OUTCOME_NONE || !(row->outcome & outcome)))
			continue;
		if (condition_holds(row->when, facts))
			return row;
	}
	return NULL;
}

const NotifTransitionRow *
notif_transition_rows(int *n)
{
	*n = (int) lengthof(transitions);
	return transitions;
}

const NotifTransitionRow *
notif_claim_row(NotifDelivery delivery, bool deadline_passed)
{
	NotifFacts	facts = {.deadline_passed = deadline_passed};
	const NotifTransitionRow *row = notif_find_transition(EVENT_CLAIM, delivery, STATUS_QUEUED,
														  OUTCOME_NONE, &facts);

	Assert(row != NULL);
	return row;
}

/*
 * A claim that finds the deadline passed for a job queued again for its
 * provider's deduplication window (the claim's "overdue" jobs whose
 * resolved_by is 'dedup_window'): an at_most_once job is left as its
 * ambiguous call left it, sent.
 */
const NotifTransitionRow *
notif_claim_late_dedup_row(NotifDelivery delivery)
{
	NotifFacts	facts = {.deadline_passed = true,.dedup_retry = true};
	const NotifTransitionRow *row = notif_find_transition(EVENT_CLAIM, delivery, STATUS_QUEUED,
														  OUTCOME_NONE, &facts);

	Assert(row != NULL);
	return row;
}

NotifDelivery
notif_delivery_claimed_as(NotifStatus status)
{
	return notif_claim_row(AT_MOST_ONCE, false)->to == (int) status ? AT_MOST_ONCE : AT_LEAST_ONCE;
}

/*
 * Exponential backoff from backoff_min to backoff_max, with jitter: the
 * delay after the n-th try is uniformly random in [d/2, d], d = min(max,
 * min * 2^(n-1)), so that the retries of a burst spread out.
 */
static int64
notif_backoff_ms(const NotifRetryPolicy *policy, int tries)
{
	int64		d = policy->backoff_min_ms;
	int			n;

	for (n = 1; n < tries && d < policy->backoff_max_ms; n++)
		d *= 2;
	if (d > policy->backoff_max_ms)
		d = policy->backoff_max_ms;
	if (d <= 1)
		return d;
	return d / 2 + (int64) pg_prng_uint64_range(&pg_global_prng_state, 0, d - d / 2);
}

/* Does a call that ended so leave its job 'sent', whatever its tries? */
bool
notif_ends_sent(NotifDelivery delivery, NotifOutcome outcome)
{
	NotifFacts	facts = {0};
	const NotifTransitionRow *row;

	row = notif_find_transition(EVENT_CALL_ENDED, delivery,
								(NotifStatus) notif_claim_row(delivery, false)->to,
								outcome, &facts);
	return row != NULL && row->to == STATUS_SENT;
}

/*
 * Whether a claimed call may still start: not after its deadline, and, for
 * an at_most_once retry made for its provider's deduplication window, only
 * inside that window (else it could be a second delivery).  A call that may
 * not ends as not started (amo_dedup_window_passed, *_not_started).
 */
bool
notif_call_may_start(NotifDelivery delivery, TimestampTz deadline_at, const NotifDedup *dedup,
					 TimestampTz now)
{
	if (deadline_at != 0 && now >= deadline_at)
		return false;
	if (delivery == AT_MOST_ONCE && dedup->retry && now >= dedup->until)
		return false;
	return true;
}

/* due at "at", but no later than the deadline (0: none), when its claim expires it */
static TimestampTz
due_by_deadline(TimestampTz at, TimestampTz deadline_at)
{
	return (deadline_at != 0 && at > deadline_at) ? deadline_at : at;
}

/*
 * What a job becomes after its call ended (EVENT_CALL_ENDED) or its sender
 * was lost during it (EVENT_SENDER_LOST): the row that applies, when the
 * next try is due if it retries, and what notif_job.resolved_by becomes.
 */
NotifTransition
notif_after_call(NotifEvent event, NotifDelivery delivery, NotifOutcome outcome,
				 int tries, const NotifRetryPolicy *policy, TimestampTz now,
				 TimestampTz deadline_at, int64 retry_after_ms, const NotifDedup *dedup,
				 bool reported, NotifLookup lookup, bool breaker_open, bool probe,
				 bool next_route)
{
	NotifTransition t = {0};
	NotifFacts	facts = {0};
	int64		delay_ms = notif_backoff_ms(policy, tries);
	TimestampTz next_at;

	if (retry_after_ms > delay_ms)
		delay_ms = retry_after_ms;
	next_at = TimestampTzPlusMilliseconds(now, delay_ms);
	facts.out_of_tries = tries >= policy->max_tries;
	facts.next_route = next_route && !dedup->retry;
	/* a job that moves to the next provider is due at once, not after a backoff */
	facts.out_of_time = deadline_at != 0 && (facts.next_route ? now : next_at) >= deadline_at;
	facts.in_dedup_window = dedup->until != 0 && !facts.out_of_tries && !facts.out_of_time &&
		next_at < dedup->until;
	facts.dedup_window_passed = dedup->retry && now >= dedup->until;
	facts.dedup_retry = dedup->retry;
	facts.reported = reported;
	facts.report_wait = policy->resolve_wait_ms > 0;
	facts.lookup_found = lookup == LOOKUP_FOUND;
	facts.breaker_open = breaker_open;
	facts.probe = probe;

	t.row = notif_find_transition(event, delivery,
								  (NotifStatus) notif_claim_row(delivery, false)->to,
								  outcome, &facts);
	if (t.row == NULL)
		elog(ERROR, "notif_deliver: no transition for a call ended with outcome %s",
			 notif_outcome_name(outcome));
	t.status = (NotifStatus) t.row->to;
	t.tries_delta = (t.row->tries == TRIES_UNCOUNTED) ? -1 : 0;
	if (t.row->retries)
		t.next_at = (t.row->when == COND_NEXT_ROUTE) ? now : next_at;
	if (t.row->when == COND_REPORT_WAIT)
	{
		/*
		 * Held for a report, no later than lets the retry start and end
		 * before the deadline; never sooner than the backoff says.
		 */
		TimestampTz wait_until = TimestampTzPlusMilliseconds(now, policy->resolve_wait_ms);

		if (deadline_at != 0)
			wait_until = Min(wait_until,
							 TimestampTzPlusMilliseconds(deadline_at, -policy->call_timeout_ms));
		t.next_at = Max(next_at, wait_until);
	}
	if (t.row->when == COND_BREAKER_OPEN)
	{
		/*
		 * Due when the breaker lets a call through again (retry_after_ms:
		 * what is left of its cooldown), no backoff; no later than the
		 * deadline, when its claim expires it.
		 */
		t.next_at = due_by_deadline(TimestampTzPlusMilliseconds(now, Max(retry_after_ms, 0)),
									deadline_at);
		t.no_call = true;
		t.keeps_outcome = true;
		t.resolution = RESOLUTION_KEPT;
		return t;
	}
	if (t.row->when == COND_PROBE)
	{
		/*
		 * Due when the breaker, open again, lets a call through (what is
		 * left of its cooldown), or at once on the next provider; no later
		 * than the deadline.
		 */
		t.next_at = due_by_deadline(facts.next_route ? now :
									TimestampTzPlusMilliseconds(now, Max(retry_after_ms, 0)),
									deadline_at);
		/* its try number is the next call's: the job row alone shows it */
		t.no_call = true;
	}
	if (t.row->when == COND_IN_DEDUP_WINDOW)
		t.resolution = RESOLUTION_DEDUP_WINDOW;
	else if (t.row->when == COND_REPORTED)
		t.resolution = RESOLUTION_REPORT;
	else if (t.row->when == COND_LOOKUP_FOUND)
	{
		t.resolution = RESOLUTION_LOOKUP_FOUND;
		t.no_call = true;
	}
	else if (outcome == OUTCOME_UNKNOWN || t.row->when == COND_DEDUP_WINDOW_PASSED ||
			 t.row->when == COND_DEDUP_RETRY || t.row->when == COND_DEDUP_RETRY_EXHAUSTED)
		t.resolution = RESOLUTION_NONE;
	else if (lookup == LOOKUP_NOT_FOUND && outcome != OUTCOME_NOT_STARTED)
		t.resolution = RESOLUTION_LOOKUP_NOT_FOUND; /* the retry was no copy */
	else if (dedup->retry && dedup->started_late)
		t.resolution = RESOLUTION_NONE; /* an at_least_once retry the window
										 * did not cover: maybe a copy */
	else
		t.resolution = RESOLUTION_KEPT;

	/*
	 * A retry made for the window that is not accepted leaves the job's
	 * outcome 'unknown', what its first call left: the job may have been
	 * delivered whatever the retry met (notif_retry asks for force then).
	 */
	t.keeps_outcome = dedup->retry && outcome != OUTCOME_ACCEPTED && t.row->when != COND_REPORTED;
	return t;
}
