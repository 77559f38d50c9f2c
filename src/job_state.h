/*-------------------------------------------------------------------------
 *
 * job_state.h
 *      The delivery guarantee as data: how a provider call's result is
 *      classified, and what a job becomes after it (job_state.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_JOB_STATE_H
#define NOTIF_JOB_STATE_H

#include "datatype/timestamp.h"

typedef enum NotifDelivery
{
	AT_MOST_ONCE,
	AT_LEAST_ONCE
} NotifDelivery;

typedef enum NotifOutcome
{
	OUTCOME_ACCEPTED,			/* 2xx */
	OUTCOME_REJECTED,			/* refused: a 4xx other than 408/429, a 3xx */
	OUTCOME_UNREACHED,			/* provably never reached the provider */
	OUTCOME_UNKNOWN,			/* the provider may have acted */
	OUTCOME_NOT_STARTED			/* the deadline passed before the call */
} NotifOutcome;

/* what a finished call, or a recovered one, does to its job */
typedef struct NotifTransition
{
	const char *status;			/* next notif_job.status */
	bool		retry;			/* queued again, at next_at */
	TimestampTz next_at;		/* when retry */
	int			tries_delta;	/* -1 when the call never started */
} NotifTransition;

/* the retry policy of a type */
typedef struct NotifRetryPolicy
{
	int			max_tries;
	int64		backoff_min_ms;
	int64		backoff_max_ms;
} NotifRetryPolicy;

extern NotifDelivery notif_delivery_from_string(const char *s);
extern const char *notif_outcome_name(NotifOutcome outcome);

extern NotifOutcome notif_classify(int curl_code, long http_status,
								   bool connected, bool request_sent);

extern bool notif_ends_sent(NotifDelivery delivery, NotifOutcome outcome);
extern NotifTransition notif_next_state(NotifDelivery delivery,
										NotifOutcome outcome,
										int tries,
										const NotifRetryPolicy *policy,
										TimestampTz now,
										TimestampTz deadline_at,	/* 0: none */
										int64 retry_after_ms);

#endif							/* NOTIF_JOB_STATE_H */
