/*-------------------------------------------------------------------------
 *
 * job_sql.h
 *      The SQL the background workers run, as prepared plans (job_sql.c).
 *      Every function must be called inside a transaction, connected to SPI.
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_JOB_SQL_H
#define NOTIF_JOB_SQL_H

#include "lifecycle/delivery.h"
#include "utils/snapshot.h"

/* a job as a claim returns it */
typedef struct NotifClaimedJob
{
	int64		id;
	int64		user_id;
	char	   *order_id;
	Jsonb	   *payload;
	bool		deadline_passed;	/* claimed as late (claim_late): no call */
	int			tries;
	TimestampTz deadline_at;	/* 0: none */
	int			earlier_tries;	/* before the last re-drive */
	TimestampTz created_at;
	bool		dedup_retry;	/* queued again for its provider's window */
	bool		after_unknown;	/* its last call's outcome is unknown */
	char	   *last_provider;	/* the provider that took its last call, or NULL */
	char	   *traceparent;	/* its W3C trace context, or NULL */
} NotifClaimedJob;

/*
 * A claim for one route of a type with backup providers (sender/round.c):
 * the type's routes (a text[]), and for a job whose route this round
 * starts at route d (1-based), the route that takes it: start[d - 1]
 * (a job that moves on, or starts at the first), stay[d - 1] (a retry
 * made for route d's provider's deduplication window); 0: it waits.
 */
typedef struct NotifClaimRoute
{
	Datum		routes;			/* text[] */
	int			n;
	int		   *start;
	int		   *stay;
	int			route;			/* the route claimed for, 1-based */
} NotifClaimRoute;

/* a job held by a sender that is gone */
typedef struct NotifOrphanJob
{
	NotifJobRef job;			/* delivery: what its claimed status says */
	char	   *kind;
	NotifStatus status;			/* as its claim left it */
	TimestampTz claimed_at;
	char	   *provider;		/* its call's (NULL: claimed before 1.4) */
} NotifOrphanJob;

/* what to write about one finished (or abandoned) call */
typedef struct NotifResult
{
	int64		job_id;
	int			tries;			/* the job's tries as claimed (CAS) */
	int			earlier_tries;	/* the attempt is earlier_tries + tries */
	NotifStatus expected_status;	/* as claimed (CAS) */
	int64		claimed_by;		/* as claimed (CAS) */
	NotifTransition next;
	NotifOutcome outcome;
	long		http_status;
	const char *error;
	const char *provider;		/* the provider that took the call, or NULL */
	int64		batch_id;		/* the batch its message went in; 0: none */
	TimestampTz sent_at;		/* 0: keep */
	TimestampTz started_at;
	TimestampTz ended_at;
} NotifResult;

extern char *notif_sql_wrong_version;

/*
 * The columns of a result, in the order of the record statement's
 * parameters: (enum, column name, element type, array type, SQL type).
 */
#define RECORD_COLUMNS(C) \
	C(ID, id, INT8OID, INT8ARRAYOID, "int8") \
	C(TRIES, tries, INT4OID, INT4ARRAYOID, "int4") \
	C(EXPECTED, expected, TEXTOID, TEXTARRAYOID, "text") \
	C(CLAIMED_BY, claimed_by, INT8OID, INT8ARRAYOID, "int8") \
	C(STATUS, status, TEXTOID, TEXTARRAYOID, "text") \
	C(OUTCOME, outcome, TEXTOID, TEXTARRAYOID, "text") \
	C(HTTP, http_status, INT4OID, INT4ARRAYOID, "int4") \
	C(ERROR_, error, TEXTOID, TEXTARRAYOID, "text") \
	C(NEXT_AT, next_at, TIMESTAMPTZOID, TIMESTAMPTZARRAYOID, "timestamptz") \
	C(SENT_AT, sent_at, TIMESTAMPTZOID, TIMESTAMPTZARRAYOID, "timestamptz") \
	C(TRIES_DELTA, tries_delta, INT4OID, INT4ARRAYOID, "int4") \
	C(STARTED, started_at, TIMESTAMPTZOID, TIMESTAMPTZARRAYOID, "timestamptz") \
	C(ENDED, ended_at, TIMESTAMPTZOID, TIMESTAMPTZARRAYOID, "timestamptz") \
	C(ATTEMPT, attempt, INT4OID, INT4ARRAYOID, "int4") \
	C(RESOLVES, resolves, BOOLOID, BOOLARRAYOID, "bool") \
	C(RESOLVED_BY, resolved_by, TEXTOID, TEXTARRAYOID, "text") \
	C(KEEPS_OUTCOME, keeps_outcome, BOOLOID, BOOLARRAYOID, "bool") \
	C(PROVIDER, provider, TEXTOID, TEXTARRAYOID, "text") \
	C(BATCH, batch_id, INT8OID, INT8ARRAYOID, "int8")

#define AS_ENUM(e, name, elem, array, sqltype) REC_##e,
enum
{
	RECORD_COLUMNS(AS_ENUM) N_RECORD_COLUMNS
};

typedef struct RecordColumn
{
	const char *name;
	Oid			elemtype;
	Oid			arraytype;
	const char *sqltype;
} RecordColumn;

extern const RecordColumn notif_record_columns[N_RECORD_COLUMNS];	/* job_rows.c */

extern bool notif_sql_prepare(void);

/* planner_policy.c */
extern void notif_sql_planner_settings(void);
extern void notif_planner_policy_tables(Oid nspid);

extern int	notif_sql_lane_types(const char *lane, MemoryContext cxt, NotifTypeConf **out);

extern int	notif_sql_claim(const char *kind, NotifDelivery delivery, int limit,
							bool late_only, const NotifClaimRoute *route,
							const char *provider, int64 incarnation, Snapshot snapshot,
							MemoryContext cxt, NotifClaimedJob **out);
extern void notif_sql_record(NotifResult *results, int n, bool *passed, bool *ended);
extern int	notif_sql_orphans(const int64 *live, int n_live,
							  MemoryContext cxt, NotifOrphanJob **out);
extern int64 notif_sql_max_holder(void);
extern int64 notif_sql_build_active(void);
extern TimestampTz notif_sql_next_due(const char *kind);
extern void notif_sql_batch_ids(int n, int64 *ids);
extern int	notif_sql_due_count(const char *kind, int most);
extern int64 *notif_sql_reported(const int64 *ids, int n, int *n_out);
/* the lanes that need a sender, each with its notif_lane.senders (0: the setting's) */
extern int	notif_sql_lanes(MemoryContext cxt, char ***out, int **senders);
extern int64 notif_sql_purge(int batch_size);
extern int64 notif_sql_fallback(const int64 *ids, int n, bool outcomes);
extern void notif_sql_outcomes(const int64 *ended, int n_ended,
							   const int64 *fell_back, int n_fell_back);

/* lane_config.c */
extern int	notif_lane_types_from_rows(MemoryContext cxt, NotifTypeConf **out);

/* job_rows.c */
extern int	notif_claimed_from_rows(MemoryContext cxt, NotifClaimedJob **out);
extern int	notif_orphans_from_rows(MemoryContext cxt, NotifOrphanJob **out);
extern void notif_record_arrays(const NotifResult *results, int n, Datum *values);

#endif							/* NOTIF_JOB_SQL_H */
