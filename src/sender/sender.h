/*-------------------------------------------------------------------------
 *
 * sender/sender.h
 *      The state of a lane's sender process, in one struct, with the rules
 *      that keep it consistent, and the calls between the files of sender/:
 *      its main loop (sender.c), its round (round.c) with its claim
 *      (claim.c), calls (calls.c), results (results.c) and channel
 *      fallbacks (fallback.c), and what it shows of itself (activity.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_SENDER_H
#define NOTIF_SENDER_H

#include "lib/ilist.h"

#include "lifecycle/delivery.h"
#include "core/shared.h"

/*
 * After an error, the round is tried again in 100 ms, doubling with each
 * error in a row up to 30 s (the shift stops once past the maximum).
 */
#define SENDER_ERROR_BACKOFF_MIN_MS	100
#define SENDER_ERROR_BACKOFF_MAX_MS	30000
#define SENDER_ERROR_BACKOFF_DOUBLINGS	9	/* 100 ms << 9 > 30 s */

/*
 * When the extension is not installed (a DROP EXTENSION committed), look
 * again after this long: the launcher stops the sender within its own
 * naptime of a second.
 */
#define SENDER_NOT_INSTALLED_WAIT_MS	1000

/*
 * A job due now that a claim did not get is locked by another session (a
 * notif_retry, a notif_cancel): claim again after this long, not in a spin.
 */
#define SENDER_LOCKED_DUE_WAIT_MS	100

/*
 * A round's record waits this long for a job's row lock (another session's
 * notif_cancel or SELECT ... FOR UPDATE left open), then the round fails
 * and is tried again at once with a record that passes over locked jobs;
 * the results so passed over are tried again after
 * SENDER_LOCKED_RESULT_WAIT_MS, until recorded.
 */
#define SENDER_RECORD_LOCK_WAIT		"100ms"
#define SENDER_LOCKED_RESULT_WAIT_MS	100

/* pg_stat_activity shows a busy sender's counts at most this often */
#define SENDER_ACTIVITY_REPORT_MS	1000

/* idle this long after sending: free kept handles, trim the heap */
#define SENDER_TRIM_AFTER_IDLE_MS	1000

typedef struct NotifSender
{
	/* who it is: set at start, never changed */
	NotifLaneSlot *slot;
	char		lane[NOTIF_NAME_MAXLEN];
	int64		incarnation;

	/*
	 * The lane's types.  config_stale is set when the shared configuration
	 * generation moved past config_generation (or a round failed); the next
	 * round reads them again, whole, before it claims.
	 */
	MemoryContext config_cxt;
	NotifTypeConf *types;
	int			n_types;
	uint64		config_generation;
	bool		config_stale;

	/*
	 * Calls.  Every call is on exactly one list, or in flight in http.c
	 * (or carried by the first call of its provider batch, which holds
	 * the batch's one slot: batch_calls.c):
	 * claimed (its claim is not committed yet: it must not start),
	 * finished (its result is not committed yet), passed (its result was
	 * not recorded because another session holds its job's row: back to
	 * finished at passed_at).  Each call in claimed or in flight holds one
	 * slot of its provider's throttle, given back when it ends or is
	 * discarded.  calls_cxt is the parent of each call's own context;
	 * round_cxt is reset after every round.
	 */
	MemoryContext calls_cxt;
	MemoryContext round_cxt;
	dlist_head	claimed;
	dlist_head	finished;
	dlist_head	passed;
	TimestampTz passed_at;
	bool		record_passing; /* the record passes over locked jobs */
	bool		recording;		/* in the round's usual record */

	/*
	 * The throttle grant claim_jobs is turning into calls: grant_left slots
	 * of provider grant_slot were granted and are not yet calls on
	 * "claimed".  claim_jobs gives back what it did not use before it
	 * returns; if the claim statement fails, round_failed gives them back.
	 * Zero outside claim_jobs.
	 */
	int			grant_slot;
	int			grant_left;

	/*
	 * The probe of a half-open breaker claim_jobs took (the provider's
	 * throttle handle), until a claimed call carries it; -1: none.  Given
	 * back if the claim fails (round_failed) or claims no job.
	 */
	int			probe_held;

	/*
	 * Channel fallback (notif_type.fallback_type): some type has one, so
	 * the jobs a round ends are offered to it (sender_fallbacks); one due
	 * at once wakes the senders after the round commits.
	 */
	bool		any_fallback;
	bool		fallback_wake;

	/*
	 * Outcomes (notif_type.emit_outcomes): some type emits them, so the
	 * ends a round writes are told (sender/outcomes.c).
	 */
	bool		any_outcomes;

	/* the lane's running senders, itself included, counted at each round */
	int			lane_senders;
	int			config_senders; /* lane_senders the configuration was shared for */

	/* jobs left in flight by stopped senders are looked for (at start, after a reload) */
	bool		need_recovery;

	/* when to claim next (0: as soon as there is room), and error backoff */
	TimestampTz claim_at;
	bool		claim_when_call_ends;	/* a provider's pool was full (http/pools.c) */
	TimestampTz record_at;		/* a round held back for more results (sender/batch.c) */
	TimestampTz backoff_until;
	int			n_errors;
	char	   *last_error;		/* logged once; TopMemoryContext */

	/* what pg_stat_activity shows, and heap trimming when idle */
	bool		activity_stale;
	NotifWorkerState reported;
	TimestampTz reported_at;
	TimestampTz idle_since;		/* nothing in flight since; 0: busy */
	bool		trim_pending;	/* sent since the last trim */
} NotifSender;

extern NotifSender sender;

/* the background worker's entry point, started by the launcher */
extern PGDLLEXPORT void notif_sender_main(Datum arg);

/* sender/round.c */
extern void sender_reload_config(void);
extern bool sender_has_work(void);
extern int	sender_max_inflight(void);
extern void sender_round(bool want_claim);
extern void sender_round_failed(void);

/* sender/fallback.c: channel fallback for the jobs a round ends */
struct NotifResult;
struct NotifClaimedJob;
extern void sender_fallbacks(const int64 *ids, int n);
extern void sender_fallbacks_pending(void);
extern void sender_fallbacks_of_results(const struct NotifResult *results, int n, const bool *passed);
extern void sender_fallbacks_committed(void);
extern void sender_fallbacks_rolled_back(void);
extern TimestampTz sender_fallbacks_retry_at(void);

/* sender/outcomes.c */
extern bool *sender_outcomes_ended(int n);
extern void sender_outcomes_of_results(const struct NotifResult *results, int n,
									   const bool *ended);

/* sender/claim.c */
extern void sender_claim_jobs(void);

/* sender/endpoints.c: customers' endpoints (notif_endpoint) */
struct NotifClaimedJob;
struct NotifEndpoint;
typedef struct SenderEndpoints
{
	int			n;
	struct NotifEndpoint *rows;
} SenderEndpoints;
extern SenderEndpoints *sender_claim_endpoints(const NotifTypeConf *type,
											   struct NotifClaimedJob *jobs, int n);
extern void sender_endpoint_request(NotifCall *call, const NotifTypeConf *type,
									const SenderEndpoints *eps,
									const struct NotifClaimedJob *job, const char *key);
extern void sender_endpoint_wipe(NotifCall *call);
extern void sender_endpoint_results(const bool *passed);

/* sender/calls.c */
extern NotifCall *sender_new_call(NotifTypeConf *type, struct NotifClaimedJob *job,
								  const SenderEndpoints *eps);
extern void sender_free_call(NotifCall *call);
extern void sender_never_started(NotifCall *call, NotifOutcome outcome);
extern void sender_start_claimed(void);
extern void sender_collect_finished(void);
extern void sender_discard_claimed(void);
extern void sender_drive_calls(bool sockets_ready);
extern void sender_drop_calls(void);

/* sender/batch_calls.c: provider batches */
extern int	sender_batch_group(NotifTypeConf *type, NotifCall **calls, int n, int granted);
extern int	sender_batch_claim_limit(const NotifTypeConf *type, int granted);
extern bool sender_batch_ready(const NotifTypeConf *type, TimestampTz now, TimestampTz *next);
extern int	sender_batch_ended(NotifCall *carrier);
extern void sender_batch_discard(NotifCall *carrier);

/* sender/batch.c */
extern TimestampTz sender_record_due(bool woken);

/* sender/results.c */
struct NotifResult;
extern void sender_recover_orphans(void);
extern int	sender_finished_results(struct NotifResult **out);
extern void sender_record(struct NotifResult *results, int n, bool *passed, bool *ended);
extern void sender_retake_passed(bool force);

/* sender/activity.c */
extern void sender_report_state(TimestampTz now);

#endif							/* NOTIF_SENDER_H */
