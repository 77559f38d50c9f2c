/*-------------------------------------------------------------------------
 *
 * job_state.c
 *      The delivery guarantee in one screen: how a call's result is
 *      classified (classification[]), and what the job becomes after it,
 *      per delivery (transitions[]).  Everything else only carries out what
 *      these two tables say.  The TAP tests name their rows.
 *
 * When the commit happens is the other half of the guarantee, in sender.c:
 * an at_most_once job is committed 'sent' before its request leaves the
 * process; an at_least_once job is 'sending' during the call and becomes
 * 'sent' only in a commit after a 2xx arrived.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <curl/curl.h>

#include "common/pg_prng.h"
#include "utils/timestamp.h"

#include "job_state.h"

/*
 * What the job becomes after a call, by delivery and outcome.
 *   done:       the final status when there is no retry to consider
 *   retry:      go back to 'queued' (with backoff) while tries and the
 *               deadline allow; otherwise out_of_tries / out_of_time
 */
typedef struct TransitionRow
{
	NotifDelivery delivery;
	NotifOutcome outcome;
	const char *done;
	bool		retry;
	const char *out_of_tries;
	const char *out_of_time;
} TransitionRow;

static const TransitionRow transitions[] = {
	/* delivery      outcome             done      retry  no tries  no time */
	{AT_MOST_ONCE, OUTCOME_ACCEPTED, "sent", false, NULL, NULL},
	{AT_MOST_ONCE, OUTCOME_UNKNOWN, "sent", false, NULL, NULL},	/* never again */
	{AT_MOST_ONCE, OUTCOME_REJECTED, "failed", false, NULL, NULL},
	{AT_MOST_ONCE, OUTCOME_UNREACHED, NULL, true, "failed", "failed"},
	{AT_MOST_ONCE, OUTCOME_NOT_STARTED, "expired", false, NULL, NULL},
	{AT_LEAST_ONCE, OUTCOME_ACCEPTED, "sent", false, NULL, NULL},
	{AT_LEAST_ONCE, OUTCOME_REJECTED, "failed", false, NULL, NULL},
	{AT_LEAST_ONCE, OUTCOME_UNKNOWN, NULL, true, "failed", "expired"},
	{AT_LEAST_ONCE, OUTCOME_UNREACHED, NULL, true, "failed", "expired"},
	{AT_LEAST_ONCE, OUTCOME_NOT_STARTED, "expired", false, NULL, NULL},
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

NotifDelivery
notif_delivery_from_string(const char *s)
{
	return strcmp(s, "at_most_once") == 0 ? AT_MOST_ONCE : AT_LEAST_ONCE;
}

const char *
notif_outcome_name(NotifOutcome outcome)
{
	switch (outcome)
	{
		case OUTCOME_ACCEPTED:
			return "accepted";
		case OUTCOME_REJECTED:
			return "rejected";
		case OUTCOME_UNREACHED:
			return "unreached";
		case OUTCOME_UNKNOWN:
			return "unknown";
		case OUTCOME_NOT_STARTED:
			return NULL;
	}
	return NULL;
}

/*
 * Classify a finished call.  connected: the TCP (and TLS) connection was
 * established; request_sent: any byte of the request was written.
 */
NotifOutcome
notif_classify(int curl_code, long http_status, bool connected, bool request_sent)
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

	/* a timeout is safe to retry only if it struck before sending */
	if (curl_code == CURLE_OPERATION_TIMEDOUT)
		return (connected && request_sent) ? OUTCOME_UNKNOWN : OUTCOME_UNREACHED;

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

	return request_sent ? OUTCOME_UNKNOWN : OUTCOME_UNREACHED;
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

static const TransitionRow *
transition_row(NotifDelivery delivery, NotifOutcome outcome)
{
	int			i;

	for (i = 0; i < (int) lengthof(transitions); i++)
		if (transitions[i].delivery == delivery && transitions[i].outcome == outcome)
			return &transitions[i];
	Assert(false);
	return NULL;
}

/* Does a call that ended so leave its job 'sent', with no retry to consider? */
bool
notif_ends_sent(NotifDelivery delivery, NotifOutcome outcome)
{
	const TransitionRow *row = transition_row(delivery, outcome);

	return row->done != NULL && strcmp(row->done, "sent") == 0;
}

NotifTransition
notif_next_state(NotifDelivery delivery, NotifOutcome outcome, int tries,
				 const NotifRetryPolicy *policy, TimestampTz now,
				 TimestampTz deadline_at, int64 retry_after_ms)
{
	NotifTransition t = {0};
	const TransitionRow *row = transition_row(delivery, outcome);
	int64		delay_ms;

	t.tries_delta = (outcome == OUTCOME_NOT_STARTED) ? -1 : 0;
	if (!row->retry)
	{
		t.status = row->done;
		return t;
	}

	/* a retry: when, and is it allowed? */
	delay_ms = notif_backoff_ms(policy, tries);
	if (retry_after_ms > delay_ms)
		delay_ms = retry_after_ms;
	t.next_at = TimestampTzPlusMilliseconds(now, delay_ms);

	if (tries >= policy->max_tries)
		t.status = row->out_of_tries;
	else if (deadline_at != 0 && t.next_at >= deadline_at)
		t.status = row->out_of_time;
	else
	{
		t.status = "queued";
		t.retry = true;
	}
	return t;
}
