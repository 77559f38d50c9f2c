/*-------------------------------------------------------------------------
 *
 * store/job_plans.h
 *      The workers' statements as job_sql.c writes them (the text, the
 *      arguments, how each is planned) and job_plans.c prepares and runs
 *      them.  Private to store/.
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_JOB_PLANS_H
#define NOTIF_JOB_PLANS_H

#include "executor/spi.h"

#include "store/job_sql.h"

/* a claim for one route looks at no more due jobs than this (or 4 x its limit) */
#define CLAIM_ROUTED_WINDOW 1000

typedef struct PlanDef
{
	const char *const *sql;		/* NULL: built by make_sql */
	const char *(*make_sql) (void);
	int			nargs;
	Oid			argtypes[N_RECORD_COLUMNS];
	bool		generic;		/* planned once, without custom plans (job_sql.c) */
	SPIPlanPtr	plan;
} PlanDef;

enum
{
	PLAN_LANE_TYPES, PLAN_CLAIM, PLAN_RECORD, PLAN_RECORD_PASSING, PLAN_ORPHANS, PLAN_NEXT_DUE,
	PLAN_LANES, PLAN_PURGE, PLAN_MAX_HOLDER, PLAN_BUILD_ACTIVE, PLAN_REPORTED, PLAN_FALLBACK,
	PLAN_RECORD_ENDED, PLAN_RECORD_PASSING_ENDED, PLAN_OUTCOMES, PLAN_ENDPOINTS,
	PLAN_ENDPOINT_RESULTS, PLAN_BATCH_IDS, PLAN_DUE_COUNT, N_PLANS
};

extern PlanDef notif_plans[N_PLANS];

/* endpoint_sql.c: the statements of customers' endpoints */
extern const char *const notif_sql_endpoints_text;
extern const char *const notif_sql_endpoint_results_text;

#endif							/* NOTIF_JOB_PLANS_H */
