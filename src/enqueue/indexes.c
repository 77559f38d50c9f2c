/*-------------------------------------------------------------------------
 *
 * enqueue/indexes.c
 *      The indexes of notif_job and notif_active for the enqueue fast path:
 *      what ExecOpenIndices and ExecInsertIndexTuples build in every
 *      statement, prepared once per session (enqueue/fast.c forgets it with
 *      the rest of its cache when a table or one of its indexes changes).
 *
 * Each call still opens the indexes, from a copy of their prepared
 * IndexInfo, and keeps their ROW EXCLUSIVE locks until the transaction ends,
 * as it keeps the tables' (the executor releases an index's lock at the end
 * of each statement; a plain INSERT ... ON CONFLICT keeps them too).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/sysattr.h"
#include "catalog/index.h"
#include "executor/executor.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "utils/rel.h"

#include "enqueue/fast.h"
#include "core/pg_compat.h"

/* whether relid is one of the prepared indexes */
bool
notif_fast_index_in(const FastIndexes *fi, Oid relid)
{
	int			i;

	for (i = 0; i < fi->n; i++)
		if (fi->oids[i] == relid)
			return true;
	return false;
}

static bool
per_call_walker(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, Var) && ((Var *) node)->varattno == InvalidAttrNumber)
		return true;
	if (IsA(node, ConvertRowtypeExpr) || IsA(node, CoerceToDomain))
		return true;
	return expression_tree_walker(node, per_call_walker, context);
}

/*
 * Whether a state prepared for expr (planned) once per session would be
 * wrong at a later call: a reference to the whole row and a row type
 * conversion keep what they build at their first evaluation in the
 * statement's memory, and a domain's constraints are read when the state is
 * prepared (ALTER DOMAIN would not be seen).
 */
bool
notif_expr_per_call(Node *expr)
{
	return per_call_walker(expr, NULL);
}

/*
 * Prepare, in the cache's context (the current one), what ExecOpenIndices
 * builds for each index of rel: BuildIndexInfo (and for a unique index that
 * may arbitrate, BuildSpeculativeIndexInfo), with the predicate and the
 * expressions prepared as ExecInsertIndexTuples and FormIndexDatum would
 * prepare them in each statement, unless notif_expr_per_call says they
 * cannot be kept.
 */
void
notif_fast_prepare_indexes(Relation rel, bool speculative, FastIndexes *fi)
{
	List	   *oids = RelationGetIndexList(rel);
	ListCell   *lc;

	fi->oids = palloc0(sizeof(Oid) * (list_length(oids) + 1));
	fi->infos = palloc0(sizeof(IndexInfo *) * (list_length(oids) + 1));
	fi->n = list_length(oids);
	foreach(lc, oids)
	{
		int			i = foreach_current_index(lc);
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);
		IndexInfo  *ii = BuildIndexInfo(idx);
		Expr	   *pred = NULL;
		List	   *exprs;

		if (speculative && ii->ii_Unique)
			BuildSpeculativeIndexInfo(idx, ii);
		if (ii->ii_Predicate != NIL)
			pred = expression_planner((Expr *) ii->ii_Predicate);
		exprs = (List *) expression_planner((Expr *) ii->ii_Expressions);

		/* else left to each call (FormIndexDatum, ExecInsertIndexTuples) */
		if (!notif_expr_per_call((Node *) pred) && !notif_expr_per_call((Node *) exprs))
		{
			ListCell   *le;

			if (pred)
				ii->ii_PredicateState = ExecInitQual((List *) pred, NULL);
			foreach(le, exprs)
				ii->ii_ExpressionsState = lappend(ii->ii_ExpressionsState,
												  ExecInitExpr(lfirst(le), NULL));
		}
		fi->oids[i] = lfirst_oid(lc);
		fi->infos[i] = ii;
		index_close(idx, AccessShareLock);
	}
	list_free(oids);
}

/*
 * ExecOpenIndices(rri, ...) from the prepared indexes.  Each IndexInfo is
 * copied, so that an access method's per-statement state (ii_AmCache, in
 * ii_Context) lives in this call's memory.  The indexes' locks stay until
 * the transaction ends: notif_fast_close_indexes() closes them with NoLock.
 */
void
notif_fast_open_indexes(ResultRelInfo *rri, const FastIndexes *fi)
{
	int			i;

	rri->ri_NumIndices = fi->n;
	if (fi->n == 0)
		return;
	rri->ri_IndexRelationDescs = palloc(sizeof(Relation) * fi->n);
	rri->ri_IndexRelationInfo = palloc(sizeof(IndexInfo *) * fi->n);
	for (i = 0; i < fi->n; i++)
	{
		IndexInfo  *ii = palloc(sizeof(IndexInfo));

		memcpy(ii, fi->infos[i], sizeof(IndexInfo));
		ii->ii_AmCache = NULL;
		ii->ii_Context = CurrentMemoryContext;
		rri->ri_IndexRelationDescs[i] = index_open(fi->oids[i], RowExclusiveLock);
		rri->ri_IndexRelationInfo[i] = ii;
	}
}

/*
 * Closes what notif_fast_open_indexes (or the executor) opened, keeping the
 * locks, as ExecCloseIndices does: each access method first ends its insert
 * state (17 on: BRIN keeps its revmap's pages pinned until then).  Leaves
 * nothing for ExecCloseIndices, which from 17 on expects every index still
 * open.
 */
void
notif_fast_close_indexes(ResultRelInfo *rri)
{
	int			i;

	for (i = 0; i < rri->ri_NumIndices; i++)
	{
		if (rri->ri_IndexRelationDescs[i] == NULL)
			continue;
		notif_index_insert_cleanup(rri->ri_IndexRelationDescs[i],
								   rri->ri_IndexRelationInfo[i]);
		index_close(rri->ri_IndexRelationDescs[i], NoLock);
		rri->ri_IndexRelationDescs[i] = NULL;
	}
	rri->ri_NumIndices = 0;
}

