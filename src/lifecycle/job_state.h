/*-------------------------------------------------------------------------
 *
 * job_state.h
 *      The job lifecycle as data (job_state.c): the statuses, how a provider
 *      call's result is classified, and one table of every transition a job
 *      makes (claim, call result, recovery, operator retry and cancel).
 *      SQL sees the same table as notif_transitions() (job_state_sql.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_JOB_STATE_H
#define NOTIF_JOB_STATE_H

#include "datatype/timestamp.h"

/* notif_job.status; the bit form lets a transition name several */
typedef enum NotifStatus
{
	STATUS_QUEUED = 1 << 0,
	STATUS_SENDING = 1 << 1,
	STATUS_SENT = 1 << 2,
	STATUS_FAILED = 1 << 3,
	STATUS_EXPIRED = 1 << 4
} NotifStatus;

#define STATUS_NONE		0		/* a transition that refuses: nothing is written */
#define STATUS_ANY		0x1f

/* notif_type.delivery */
typedef enum NotifDelivery
{
	AT_MOST_ONCE = 1 << 0,
	AT_LEAST_ONCE = 1 << 1
} NotifDelivery;

#define DELIVERY_ANY	(AT_MOST_ONCE | AT_LEAST_ONCE)

/* how a call ended (notif_job.outcome, notif_attempt.outcome) */
typedef enum NotifOutcome
{
	OUTCOME_ACCEPTED = 1 << 0,	/* 2xx */
	OUTCOME_REJECTED = 1 << 1,	/* refused: a 4xx other than 408/429, a 3xx */
	OUTCOME_UNREACHED = 1 << 2, /* provably never reached the provider */
	OUTCOME_UNKNOWN = 1 << 3,	/* the provider may have acted */
	OUTCOME_NOT_STARTED = 1 << 4	/* the deadline passed before the call */
} NotifOutcome;

#define OUTCOME_NONE	0		/* no call: claim, retry, cancel */
#define OUTCOME_ANY		0x1f

/* what happens to a job */
typedef enum NotifEvent
{
	EVENT_CLAIM,				/* a sender takes a due queued job */
	EVENT_CALL_ENDED,			/* its provider call ended (or never started) */
	EVENT_SENDER_LOST,			/* its sender stopped during the call */
	EVENT_RETRY,				/* notif_retry */
	EVENT_CANCEL,				/* notif_cancel */
	EVENT_REPORT				/* notif_dlr: the provider reports the job's
								 * message delivered */
} NotifEvent;

/* the condition under which a transition applies (first match wins) */
typedef enum NotifCondition
{
	COND_ALWAYS,
	COND_DEADLINE_PASSED,		/* claim: the type's deadline has passed */
	COND_OUT_OF_TRIES,			/* no try left (tries >= max_tries) */
	COND_OUT_OF_TIME,			/* the next try would start after the deadline */
	COND_IDLE_FORCED,			/* retry: no sender holds it, force => true */
	COND_IDLE,					/* retry: no sender holds it */
	COND_CANCELLED_BY_KIND,		/* retry of a whole type: a cancelled job */
	COND_IN_DEDUP_WINDOW,		/* a try is left, before the deadline, and it
								 * reaches the provider inside the window in
								 * which it deduplicates the job's key */
	COND_DEDUP_WINDOW_PASSED,	/* a retry made for that window could not
								 * start inside it */
	COND_DEDUP_RETRY,			/* the call was a retry made for that window */
	COND_DEDUP_RETRY_EXHAUSTED, /* ... and no try or time is left for another */
	COND_DEDUP_RETRY_LATE,		/* claim: a job queued for such a retry, its
								 * deadline passed */
	COND_REPORTED,				/* a delivery report of the job, delivered,
								 * came before the call ended */
	COND_REPORT_WAIT,			/* the type waits for a delivery report
								 * before it retries (resolve_wait) */
	COND_LOOKUP_FOUND,			/* asked before the retry, the provider's
								 * status lookup said it has the message */
	COND_BREAKER_OPEN,			/* the provider's circuit breaker was open
								 * when the call was to start: no call */
	COND_PROBE,					/* the call was the one probe of its
								 * provider's half-open circuit breaker */
	COND_NEXT_ROUTE				/* the type has a backup provider after the
								 * one that took the call (not a retry made
								 * for that one's deduplication window) */
} NotifCondition;

/*
 * How the last ambiguous outcome of a job was resolved (notif_job.resolved_by),
 * as a transition leaves it: a row whose condition is COND_IN_DEDUP_WINDOW
 * resolves it by the provider's deduplication window, one whose condition
 * is COND_REPORTED (and notif_dlr's report event) by the report; any other
 * row that ends an ambiguous call, or finds that
 * window passed, leaves it unresolved; the rest keep what the job had.
 */
typedef enum NotifResolution
{
	RESOLUTION_KEPT,
	RESOLUTION_NONE,			/* NULL: unresolved */
	RESOLUTION_DEDUP_WINDOW,	/* 'dedup_window' */
	RESOLUTION_REPORT,			/* 'report': a delivery report came first */
	RESOLUTION_LOOKUP_FOUND,	/* 'lookup_found': the provider has it */
	RESOLUTION_LOOKUP_NOT_FOUND /* 'lookup_not_found': it has not; the
								 * retry that followed was no copy */
} NotifResolution;

/*
 * What the provider's status lookup, asked before an at_least_once retry
 * after an ambiguous call (sender/lookup.c), said.
 */
typedef enum NotifLookup
{
	LOOKUP_NONE,				/* not asked */
	LOOKUP_FOUND,				/* it has the message: no retry */
	LOOKUP_NOT_FOUND,			/* it has not: the retry goes ahead */
	LOOKUP_UNANSWERED			/* no answer to rely on: the retry goes ahead */
} NotifLookup;

/* what the tries become */
typedef enum NotifTries
{
	TRIES_KEPT,
	TRIES_COUNTED,				/* +1: a call is about to start */
	TRIES_UNCOUNTED,			/* -1: the counted call never started */
	TRIES_FRESH					/* a re-drive: tries move to earlier_tries */
} NotifTries;

/* one row of the lifecycle */
typedef struct NotifTransitionRow
{
	const char *name;			/* named by the tests and the SQL */
	NotifEvent	event;
	int			delivery;		/* NotifDelivery bits */
	int			from;			/* NotifStatus bits */
	int			outcome;		/* NotifOutcome bits; OUTCOME_NONE: no call */
	NotifCondition when;
	int			to;				/* a NotifStatus; STATUS_NONE: refused */
	bool		retries;		/* queued again for another call */
	NotifTries	tries;
	bool		holds;			/* a sender holds the job (claimed_by) */
	const char *note;			/* last_error it writes, or why it refuses */
} NotifTransitionRow;

/* what decides the condition of a transition */
typedef struct NotifFacts
{
	bool		deadline_passed;
	bool		out_of_tries;
	bool		out_of_time;
	bool		held;
	bool		forced;
	bool		cancelled;
	bool		by_kind;
	bool		in_dedup_window;
	bool		dedup_window_passed;
	bool		dedup_retry;
	bool		report_wait;
	bool		reported;
	bool		lookup_found;
	bool		breaker_open;
	bool		probe;
	bool		next_route;
} NotifFacts;

/*
 * A job whose provider deduplicates its key for a window (its dedup_window,
 * less its timeout: the latest a call may start and still reach it inside
 * the window), counted from the job's creation, which its first call
 * cannot precede.
 */
typedef struct NotifDedup
{
	TimestampTz until;			/* 0: the provider does not deduplicate */
	bool		retry;			/* this call is a retry made for the window */
	bool		started_late;	/* ... and it started after the window */
} NotifDedup;

/* the retry policy of a type */
typedef struct NotifRetryPolicy
{
	int			max_tries;
	int64		backoff_min_ms;
	int64		backoff_max_ms;
	int64		resolve_wait_ms;	/* hold an ambiguous call's retry for a
									 * report this long (0: no wait) */
	int64		call_timeout_ms;	/* its provider's timeout */
} NotifRetryPolicy;

/* what a finished call, or a recovered one, does to its job */
typedef struct NotifTransition
{
	const NotifTransitionRow *row;
	NotifStatus status;			/* next notif_job.status */
	TimestampTz next_at;		/* when row->retries */
	int			tries_delta;
	NotifResolution resolution; /* what notif_job.resolved_by becomes */
	bool		keeps_outcome;	/* notif_job.outcome stays as it was (the
								 * call's own goes to notif_attempt) */
	bool		no_call;		/* no notif_attempt row: no call was made
								 * (a status lookup found the message), or
								 * its try was given back (a breaker's
								 * probe that never reached the provider) */
} NotifTransition;

/* names, in one place (job_names.c) */
extern const char *notif_status_name(NotifStatus status);
extern NotifStatus notif_status_from_name(const char *name);
extern const char *notif_delivery_name(NotifDelivery delivery);
extern NotifDelivery notif_delivery_from_name(const char *name);
extern const char *notif_outcome_name(NotifOutcome outcome);
extern NotifOutcome notif_outcome_from_name(const char *name);
extern NotifEvent notif_event_from_name(const char *name);
extern char *notif_delivery_set_text(int bits);
extern char *notif_status_set_text(int bits);
extern char *notif_outcome_set_text(int bits);

/* the table, for notif_transitions() */
extern const NotifTransitionRow *notif_transition_rows(int *n);
extern const char *notif_event_name(NotifEvent event);
extern const char *notif_condition_name(NotifCondition when);
extern const char *notif_tries_name(NotifTries tries);
extern const char *notif_resolution_name(NotifResolution resolution);

/* the first row that applies, or NULL */
extern const NotifTransitionRow *notif_find_transition(NotifEvent event,
													   NotifDelivery delivery,
													   NotifStatus from,
													   int outcome,
													   const NotifFacts *facts);

/* a claim: what a due job of this delivery becomes, and when it is late */
extern const NotifTransitionRow *notif_claim_row(NotifDelivery delivery, bool deadline_passed);
extern const NotifTransitionRow *notif_claim_late_dedup_row(NotifDelivery delivery);

/* which delivery's claim leaves a job in this status */
extern NotifDelivery notif_delivery_claimed_as(NotifStatus status);

extern NotifOutcome notif_classify(int curl_code, long http_status, bool request_sent);

/*
 * A push platform's answer, by HTTP status and the platform's reason (FCM
 * details[].errorCode, APNs reason): refines notif_classify() for 'fcm' and
 * 'apns' providers (provider/answer.c reads the reason).
 */
typedef enum NotifAnswerAction
{
	ANSWER_KEEP,				/* nothing more */
	ANSWER_NEW_TOKEN,			/* our token was refused: get another */
	ANSWER_RESIGN_NOW,			/* ... as expired: re-sign it at once */
	ANSWER_DEAD_TOKEN,			/* the device token is dead: notif_unregistered */
	ANSWER_DEVICE_BUSY			/* one device throttled: not the provider's pause */
} NotifAnswerAction;

typedef struct NotifAnswerRow
{
	const char *name;			/* named by the tests */
	const char *platform;		/* notif_provider.format: 'fcm', 'apns' */
	long		http_status;
	const char *reason;
	NotifOutcome outcome;
	NotifAnswerAction action;
	int64		min_retry_ms;	/* retry no sooner (a later Retry-After wins) */
} NotifAnswerRow;

extern const NotifAnswerRow *notif_classify_answer(const char *platform, long http_status,
												   const char *reason);

extern bool notif_ends_sent(NotifDelivery delivery, NotifOutcome outcome);
extern bool notif_call_may_start(NotifDelivery delivery, TimestampTz deadline_at,
								 const NotifDedup *dedup, TimestampTz now);
extern NotifTransition notif_after_call(NotifEvent event, NotifDelivery delivery,
										NotifOutcome outcome,
										int tries,
										const NotifRetryPolicy *policy,
										TimestampTz now,
										TimestampTz deadline_at,	/* 0: none */
										int64 retry_after_ms,
										const NotifDedup *dedup,
										bool reported,	/* COND_REPORTED */
										NotifLookup lookup,
										bool breaker_open,	/* COND_BREAKER_OPEN */
										bool probe, /* COND_PROBE */
										bool next_route);	/* COND_NEXT_ROUTE */

#endif							/* NOTIF_JOB_STATE_H */
