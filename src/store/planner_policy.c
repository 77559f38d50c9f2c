/*-------------------------------------------------------------------------
 *
 * planner_policy.c
 *      How a sender's statements are planned.  They are planned once,
 *      generic, and kept until an ANALYZE of their tables (job_sql.c), so a
 *      plan must be right for whatever size the tables reach before then:
 *      a bulk enqueue can make notif_job a hundred times bigger, and a
 *      burst can fill notif_active, in one statement.
 *
 * Two rules, for the sender's session only:
 *  - no sequential, bitmap, hash or merge plans, so that no scan of a
 *    whole table can look cheaper than the due index and primary-key
 *    probes (notif_sql_planner_settings);
 *  - the planner reckons notif_job and notif_active at least
 *    PLAN_MIN_ROWS rows in PLAN_MIN_PAGES pages, whatever their statistics
 *    or their size say (get_relation_info_hook).  A plan made when a
 *    table was empty, or analyzed with one row (a new install's first
 *    job), otherwise takes a walk of that table for as cheap as a probe:
 *    the record of results, a join of the round's results with their
 *    jobs, was planned as a walk of all of notif_job with each job matched
 *    against every result, and kept so through a burst of 10,000 jobs
 *    (test/t/025_claim_plans.pl).  With the floor, a walk always costs
 *    more than a probe per row of the round.  Where the tables are really
 *    that small, any plan is fast.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "nodes/pathnodes.h"
#include "optimizer/plancat.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"

#include "store/job_sql.h"

#define PLAN_MIN_ROWS 1000000.0
#define PLAN_MIN_PAGES 10000

static get_relation_info_hook_type prev_get_relation_info = NULL;
static bool hook_installed = false;
static Oid	floored[2] = {InvalidOid, InvalidOid};	/* notif_job, notif_active */

/*
 * The tables whose size is floored, in the extension's schema; none for
 * InvalidOid (no extension, or another version).
 */
void
notif_planner_policy_tables(Oid nspid)
{
	floored[0] = OidIsValid(nspid) ? get_relname_relid("notif_job", nspid) : InvalidOid;
	floored[1] = OidIsValid(nspid) ? get_relname_relid("notif_active", nspid) : InvalidOid;
}

/*
 * get_relation_info_hook: a floored table's size, and its indexes', raised
 * to the floor (in PostgreSQL 15 an index's tuples are copied from its
 * table's before the hook runs).
 */
static void
notif_get_relation_info(PlannerInfo *root, Oid relid, bool inhparent, RelOptInfo *rel)
{
	ListCell   *lc;

	if (prev_get_relation_info)
		prev_get_relation_info(root, relid, inhparent, rel);
	if (relid != floored[0] && relid != floored[1])
		return;

	rel->tuples = Max(rel->tuples, PLAN_MIN_ROWS);
	rel->pages = Max(rel->pages, PLAN_MIN_PAGES);
	foreach(lc, rel->indexlist)
	{
		IndexOptInfo *index = (IndexOptInfo *) lfirst(lc);

		/* a partial index keeps its own estimate (at most the table's) */
		if (index->indpred == NIL)
			index->tuples = Max(index->tuples, rel->tuples);
	}
}

/*
 * A sender's session: the planner may not use sequential, bitmap, hash or
 * merge plans, and reckons the job tables big (see the top).  Each kind of
 * plan is only made costly, so a statement with no other way (a small
 * table without an index) still plans, at a cost above every JIT
 * threshold: so no JIT either, which would load LLVM into the sender
 * (25 MB) to compile a lookup in notif_type.
 */
void
notif_sql_planner_settings(void)
{
	static const char *const off[] = {
		"enable_seqscan", "enable_bitmapscan", "enable_hashjoin", "enable_mergejoin",
		"jit"
	};
	int			i;

	for (i = 0; i < (int) lengthof(off); i++)
		SetConfigOption(off[i], "off", PGC_SUSET, PGC_S_OVERRIDE);
	if (!hook_installed)
	{
		prev_get_relation_info = get_relation_info_hook;
		get_relation_info_hook = notif_get_relation_info;
		hook_installed = true;
	}
}
