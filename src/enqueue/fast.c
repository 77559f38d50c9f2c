/*-------------------------------------------------------------------------
 *
 * enqueue/fast.c
 *      The fast path of notif_enqueue: one INSERT ... ON CONFLICT DO NOTHING
 *      into notif_job done the way the executor's ExecInsert does it, without
 *      the setup the executor repeats for every statement (plan cache checks,
 *      plan tree, projections, and reading the table's CHECK constraints
 *      anew, which costs more than the insert itself).
 *
 * What a plain INSERT would do, this does: column defaults (the identity
 * included), NOT NULL and CHECK constraints, a speculative insertion with
 * the unique key as arbiter, every index, AFTER ROW triggers (the foreign
 * key check on notif_type among them) fired at the end of the call, and the
 * serialization check of ON CONFLICT DO NOTHING at REPEATABLE READ.  The
 * CHECK and default expressions, and what the executor builds for each
 * index (enqueue/indexes.c), are prepared once per session and forgotten
 * whenever notif_job's or notif_active's definition changes, or one of
 * their indexes' (relcache callback).  The foreign key's check runs once
 * per transaction and kind (enqueue/fk.c).
 *
 * A new job is queued work: its row in notif_active (1.2 on) is inserted
 * the same way, in the same call; that is what notif_job's statement
 * trigger notif_job_work does for other inserts, so this path skips it.
 *
 * A table this path does not know how to serve exactly as INSERT would
 * (statement or BEFORE triggers, row level security, generated columns, a
 * CHECK or default whose prepared state could not be kept from one call to
 * the next, a given column of another type; any trigger or default on
 * notif_active) makes notif_enqueue use its SPI path instead: correctness
 * first.  So does a notif_enqueue called while another is in its call.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "rewrite/rewriteHandler.h"
#include "storage/lmgr.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "enqueue/fast.h"
#include "core/pg_compat.h"

/*
 * The executor internals this file calls, as each supported major declares
 * them (pg_compat.h hides the differences): a later change fails the build
 * here, naming the function.
 */
#if PG_VERSION_NUM >= 180000
NOTIF_EXPECT_SIGNATURE(ExecCheckIndexConstraints,
					   bool (*) (ResultRelInfo *, TupleTableSlot *, EState *,
								 ItemPointer, ItemPointer, List *));
#else
NOTIF_EXPECT_SIGNATURE(ExecCheckIndexConstraints,
					   bool (*) (ResultRelInfo *, TupleTableSlot *, EState *,
								 ItemPointer, List *));
#endif
#if PG_VERSION_NUM >= 160000
NOTIF_EXPECT_SIGNATURE(ExecInsertIndexTuples,
					   List *(*) (ResultRelInfo *, TupleTableSlot *, EState *,
								  bool, bool, bool *, List *, bool));
#else
NOTIF_EXPECT_SIGNATURE(ExecInsertIndexTuples,
					   List *(*) (ResultRelInfo *, TupleTableSlot *, EState *,
								  bool, bool, bool *, List *));
#endif
NOTIF_EXPECT_SIGNATURE(ExecConstraints,
					   void (*) (ResultRelInfo *, TupleTableSlot *, EState *));
NOTIF_EXPECT_SIGNATURE(InitResultRelInfo,
					   void (*) (ResultRelInfo *, Relation, Index, ResultRelInfo *, int));
NOTIF_EXPECT_SIGNATURE(ExecARInsertTriggers,
					   void (*) (EState *, ResultRelInfo *, TupleTableSlot *, List *,
								 TransitionCaptureState *));
NOTIF_EXPECT_SIGNATURE(SpeculativeInsertionLockAcquire, uint32 (*) (TransactionId));
NOTIF_EXPECT_SIGNATURE(build_column_default, Node *(*) (Relation, int));

typedef struct FastCache
{
	bool		valid;
	bool		usable;			/* false: use the SPI path */
	Oid			nspid;
	Oid			relid;
	Oid			arbiter;		/* the unique index on (user_id, kind, order_id) */
	MemoryContext cxt;
	int			natts;
	AttrNumber	att[NOTIF_FAST_NCOLS];	/* where the given values go */
	AttrNumber	att_id;
	ExprState **defaults;		/* per attribute, NULL: given, or no default */
	ExprState **checks;			/* the CHECK constraints, prepared */
	FastIndexes indexes;		/* notif_job's, with the speculative info */
	Oid			work_relid;		/* notif_active (InvalidOid before 1.2) */
	AttrNumber	work_att[3];	/* its job_id, kind, next_at */
	FastIndexes work_indexes;	/* notif_active's */
	bool		fk_skippable;	/* see enqueue/fk.c */
} FastCache;

static FastCache cache;
static bool callback_registered = false;
static bool fast_active = false;	/* a notif_fast_insert() is running */

static const char *const given_columns[NOTIF_FAST_NCOLS] = {
	"user_id", "kind", "order_id", "payload", "next_at", "deadline_at", "traceparent"
};

static const Oid given_types[NOTIF_FAST_NCOLS] = {
	INT8OID, TEXTOID, TEXTOID, JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID
};

static const char *const work_columns[3] = {"job_id", "kind", "next_at"};
static const Oid work_types[3] = {INT8OID, TEXTOID, TIMESTAMPTZOID};

/*
 * The tables, and their indexes too: a change to an index's pg_index row
 * (CREATE INDEX CONCURRENTLY marking it ready) invalidates the index itself.
 */
static void
fast_cache_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == cache.relid || relid == cache.work_relid ||
		notif_fast_index_in(&cache.indexes, relid) ||
		notif_fast_index_in(&cache.work_indexes, relid))
		cache.valid = false;
	notif_fk_relcache_changed(relid);
}

/*
 * Whether the statement-level insert triggers of notif_job are just ours,
 * notif_job_work, which adds the new jobs to notif_active: this path does
 * that itself (insert_work), so it may skip the trigger.
 */
static bool
only_work_trigger(TriggerDesc *trig)
{
	int			i;
	int			ours = 0;

	for (i = 0; i < trig->numtriggers; i++)
	{
		Trigger    *t = &trig->triggers[i];
		char	   *fn;

		if (!TRIGGER_FOR_INSERT(t->tgtype) ||
			(TRIGGER_FOR_ROW(t->tgtype) && t->tgnewtable == NULL))
			continue;			/* row triggers without a transition table are served */
		fn = get_func_name(t->tgfoid);
		if (TRIGGER_FOR_ROW(t->tgtype) || strcmp(t->tgname, "notif_job_work") != 0 ||
			fn == NULL || strcmp(fn, "notif_job_inserted") != 0 ||
			get_func_namespace(t->tgfoid) != cache.nspid)
			return false;
		ours++;
	}
	return ours == 1;
}

/*
 * Prepare, for notif_job in schema nspid, what every call needs: where each
 * column goes, the default expressions, the CHECK expressions.  Decides
 * whether the fast path can serve this table.
 */
static void
fast_cache_build(Oid nspid)
{
	Relation	rel;
	TupleDesc	desc;
	TriggerDesc *trig;
	MemoryContext old;
	int			i;
	List	   *indexes;
	ListCell   *lc;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(fast_cache_invalidate, (Datum) 0);
		callback_registered = true;
	}
	if (cache.cxt)
		MemoryContextDelete(cache.cxt);
	memset(&cache, 0, sizeof(cache));
	cache.cxt = AllocSetContextCreate(TopMemoryContext, "notif_deliver enqueue fast path",
									  ALLOCSET_SMALL_SIZES);
	cache.nspid = nspid;
	cache.relid = get_relname_relid("notif_job", nspid);
	cache.valid = true;
	if (!OidIsValid(cache.relid))
		return;

	rel = table_open(cache.relid, AccessShareLock);
	desc = RelationGetDescr(rel);
	trig = rel->trigdesc;

	/* what only the executor's full path does */
	if ((trig && (trig->trig_insert_before_row || trig->trig_insert_instead_row ||
				  trig->trig_insert_before_statement ||
				  ((trig->trig_insert_after_statement || trig->trig_insert_new_table) &&
				   !only_work_trigger(trig)))) ||
		rel->rd_rel->relrowsecurity ||
		rel->rd_rel->relkind != RELKIND_RELATION ||
		notif_has_generated(desc->constr))
	{
		table_close(rel, AccessShareLock);
		return;
	}

	old = MemoryContextSwitchTo(cache.cxt);
	cache.natts = desc->natts;
	for (i = 0; i < NOTIF_FAST_NCOLS; i++)
	{
		Form_pg_attribute attr;

		cache.att[i] = get_attnum(cache.relid, given_columns[i]);
		if (cache.att[i] == InvalidAttrNumber && i == NOTIF_FAST_TRACEPARENT)
			continue;			/* a table before 1.4: no value is ever given */
		if (cache.att[i] == InvalidAttrNumber)
			goto unusable;
		/* the values go in as notif_enqueue has them: no coercion here */
		attr = TupleDescAttr(desc, cache.att[i] - 1);
		if (attr->atttypid != given_types[i] || attr->atttypmod != -1)
			goto unusable;
	}
	cache.att_id = get_attnum(cache.relid, "id");
	if (cache.att_id == InvalidAttrNumber ||
		TupleDescAttr(desc, cache.att_id - 1)->atttypid != INT8OID)
		goto unusable;

	/* defaults (the identity too) for the columns not given */
	cache.defaults = palloc0(sizeof(ExprState *) * desc->natts);
	for (i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute attr = TupleDescAttr(desc, i);
		Node	   *expr;
		int			j;
		bool		given = false;

		if (attr->attisdropped)
			continue;
		for (j = 0; j < NOTIF_FAST_NCOLS; j++)
			if (cache.att[j] == attr->attnum)
				given = true;
		if (given)
			continue;
		expr = build_column_default(rel, attr->attnum);
		if (expr)
		{
			expr = (Node *) expression_planner((Expr *) expr);
			if (notif_expr_per_call(expr))
				goto unusable;	/* a domain's default: its checks may change */
			cache.defaults[i] = ExecInitExpr((Expr *) expr, NULL);
		}
	}

	/* the CHECK constraints, in the order ExecConstraints expects them */
	if (desc->constr && desc->constr->num_check > 0)
	{
		cache.checks = palloc0(sizeof(ExprState *) * desc->constr->num_check);
		for (i = 0; i < desc->constr->num_check; i++)
		{
			Expr	   *check;

			/* NOT ENFORCED (18): ExecRelCheck skips it, a NULL state passes */
			if (!notif_check_enforced(desc->constr, i))
				continue;
			check = expression_planner(stringToNode(desc->constr->check[i].ccbin));

			if (notif_expr_per_call((Node *) check))
				goto unusable;	/* its state cannot outlive a call */
			cache.checks[i] = ExecInitExpr(check, NULL);
		}
	}

	/* the arbiter: the unique index on exactly (user_id, kind, order_id) */
	indexes = RelationGetIndexList(rel);
	foreach(lc, indexes)
	{
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = idx->rd_index;

		if (form->indisunique && form->indimmediate && form->indisvalid &&
			form->indnkeyatts == 3 &&
			form->indkey.values[0] == cache.att[NOTIF_FAST_USER_ID] &&
			form->indkey.values[1] == cache.att[NOTIF_FAST_KIND] &&
			form->indkey.values[2] == cache.att[NOTIF_FAST_ORDER_ID] &&
			RelationGetIndexPredicate(idx) == NIL &&
			RelationGetIndexExpressions(idx) == NIL)
			cache.arbiter = RelationGetRelid(idx);
		index_close(idx, AccessShareLock);
	}
	if (!OidIsValid(cache.arbiter))
		goto unusable;
	notif_fast_prepare_indexes(rel, true, &cache.indexes);
	cache.fk_skippable = notif_fk_check_skippable(rel, nspid, cache.att[NOTIF_FAST_KIND]);

	/* notif_active (1.2 on, with its trigger): a new job is queued work */
	if (trig && trig->trig_insert_new_table)
		cache.work_relid = get_relname_relid("notif_active", nspid);
	if (OidIsValid(cache.work_relid))
	{
		Relation	work = table_open(cache.work_relid, AccessShareLock);
		TriggerDesc *wtrig = work->trigdesc;
		bool		plain = !(wtrig || work->rd_rel->relrowsecurity ||
							  work->rd_rel->relkind != RELKIND_RELATION);

		/* insert_work fills its three columns, the others stay NULL */
		for (i = 0; plain && i < RelationGetDescr(work)->natts; i++)
			if (TupleDescAttr(RelationGetDescr(work), i)->atthasdef)
				plain = false;
		if (plain)
			notif_fast_prepare_indexes(work, false, &cache.work_indexes);
		table_close(work, AccessShareLock);
		if (!plain)
			goto unusable;
		for (i = 0; i < 3; i++)
		{
			cache.work_att[i] = get_attnum(cache.work_relid, work_columns[i]);
			if (cache.work_att[i] == InvalidAttrNumber ||
				get_atttype(cache.work_relid, cache.work_att[i]) != work_types[i])
				goto unusable;
		}
	}

	MemoryContextSwitchTo(old);
	table_close(rel, AccessShareLock);
	cache.usable = true;
	return;

unusable:
	MemoryContextSwitchTo(old);
	table_close(rel, AccessShareLock);
}

bool
notif_fast_usable(Oid nspid)
{
	/* a CHECK or a trigger that enqueues, within a call: the SPI path */
	if (fast_active)
		return false;

	/*
	 * As SPI does before a statement that writes, the command counter moves
	 * on, which also reads this transaction's own changes to the tables'
	 * definitions (an index created since the last call).
	 */
	CommandCounterIncrement();

	/*
	 * Lock notif_job and notif_active as the insert will (until the
	 * transaction ends), and use the cache only if it is still valid once
	 * both are locked: taking a lock reads the invalidations committed before
	 * it, and a change to either table or its indexes (an index created, an
	 * ALTER EXTENSION UPDATE) that commits after it waits for this
	 * transaction.
	 */
	for (;;)
	{
		if (!cache.valid || cache.nspid != nspid)
			fast_cache_build(nspid);
		if (OidIsValid(cache.relid))
			LockRelationOid(cache.relid, RowExclusiveLock);
		if (cache.usable && OidIsValid(cache.work_relid))
			LockRelationOid(cache.work_relid, RowExclusiveLock);
		if (cache.valid)
			return cache.usable;
	}
}

/* the id of the row at tid; at REPEATABLE READ it must be visible to us */
static int64
conflicting_id(Relation rel, ItemPointer tid, EState *estate)
{
	TupleTableSlot *slot = table_slot_create(rel, &estate->es_tupleTable);
	bool		isnull;
	Datum		id;

	if (!table_tuple_fetch_row_version(rel, tid, SnapshotAny, slot))
		elog(ERROR, "notif_deliver: failed to fetch the conflicting notif_job row");

	/* as ON CONFLICT DO NOTHING checks it (ExecCheckTIDVisible) */
	if (IsolationUsesXactSnapshot() &&
		!table_tuple_satisfies_snapshot(rel, slot, estate->es_snapshot))
	{
		Datum		xmin = slot_getsysattr(slot, MinTransactionIdAttributeNumber, &isnull);

		if (!TransactionIdIsCurrentTransactionId(DatumGetTransactionId(xmin)))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent update")));
	}
	id = slot_getattr(slot, cache.att_id, &isnull);
	return DatumGetInt64(id);
}

/*
 * The new job's row in notif_active (queued: no holder), with its indexes,
 * in the caller's executor state (which closes its indexes).  Returns the
 * relation, for the caller to close.
 */
static Relation
insert_work(EState *estate, Datum id, Datum kind, Datum next_at)
{
	ResultRelInfo *rri = makeNode(ResultRelInfo);
	Relation	rel = table_open(cache.work_relid, RowExclusiveLock);
	TupleTableSlot *slot;
	int			i;

	InitResultRelInfo(rri, rel, 0, NULL, 0);
	notif_fast_open_indexes(rri, &cache.work_indexes);
	estate->es_opened_result_relations = lappend(estate->es_opened_result_relations, rri);
	slot = table_slot_create(rel, &estate->es_tupleTable);
	ExecClearTuple(slot);
	for (i = 0; i < RelationGetDescr(rel)->natts; i++)
	{
		slot->tts_isnull[i] = true;
		slot->tts_values[i] = (Datum) 0;
	}
	slot->tts_values[cache.work_att[0] - 1] = id;
	slot->tts_values[cache.work_att[1] - 1] = kind;
	slot->tts_values[cache.work_att[2] - 1] = next_at;
	for (i = 0; i < 3; i++)
		slot->tts_isnull[cache.work_att[i] - 1] = false;
	ExecStoreVirtualTuple(slot);
	ExecConstraints(rri, slot, estate);
	table_tuple_insert(rel, slot, estate->es_output_cid, 0, NULL);
	list_free(notif_insert_index_tuples(rri, slot, estate, false, NULL, NIL));
	return rel;
}

/* notif_fast_insert's work */
static int64
fast_insert(Datum *given, bool *given_null, bool *inserted)
{
	EState	   *estate = CreateExecutorState();
	ExprContext *econtext = GetPerTupleExprContext(estate);
	MemoryContext old = MemoryContextSwitchTo(estate->es_query_cxt);
	ResultRelInfo *rri = makeNode(ResultRelInfo);
	Relation	rel;
	Relation	work = NULL;	/* notif_active, once its row is written */
	TupleTableSlot *slot;
	List	   *arbiters = list_make1_oid(cache.arbiter);
	List	   *recheck;
	Datum		kind = given[NOTIF_FAST_KIND];
	bool		fk_checked = cache.fk_skippable && notif_fk_kind_locked(kind);
	int64		id = 0;
	int			i;
	ListCell   *lc;

	/* notif_fast_usable() moved the command counter on */
	estate->es_output_cid = GetCurrentCommandId(true);
	estate->es_snapshot = GetActiveSnapshot();

	rel = table_open(cache.relid, RowExclusiveLock);
	InitResultRelInfo(rri, rel, 0, NULL, 0);	/* no range table */
	NOTIF_RRI_CHECK_EXPRS(rri) = cache.checks;
	notif_fast_open_indexes(rri, &cache.indexes);
	/* where the trigger machinery looks for the relation (not reopening it) */
	estate->es_opened_result_relations = list_make1(rri);
	slot = table_slot_create(rel, &estate->es_tupleTable);

	/* the row: given values, then defaults (the identity draws its id) */
	ExecClearTuple(slot);
	for (i = 0; i < cache.natts; i++)
	{
		slot->tts_isnull[i] = true;
		slot->tts_values[i] = (Datum) 0;
		if (cache.defaults[i])
			slot->tts_values[i] = ExecEvalExprSwitchContext(cache.defaults[i], econtext,
															&slot->tts_isnull[i]);
	}
	for (i = 0; i < NOTIF_FAST_NCOLS; i++)
	{
		if (cache.att[i] == InvalidAttrNumber)
			continue;			/* traceparent, before 1.4 */
		slot->tts_values[cache.att[i] - 1] = given[i];
		slot->tts_isnull[cache.att[i] - 1] = given_null[i];
	}
	ExecStoreVirtualTuple(slot);

	ExecConstraints(rri, slot, estate);

	AfterTriggerBeginQuery();
	for (;;)
	{
		ItemPointerData conflict;
		bool		spec_conflict = false;
		uint32		token;

		CHECK_FOR_INTERRUPTS();
		if (!notif_check_index_constraints(rri, slot, estate, &conflict, arbiters))
		{
			/* the key exists (committed, or ours): its job stands */
			id = conflicting_id(rel, &conflict, estate);
			*inserted = false;
			break;
		}

		token = SpeculativeInsertionLockAcquire(GetCurrentTransactionId());
		table_tuple_insert_speculative(rel, slot, estate->es_output_cid, 0, NULL, token);
		recheck = notif_insert_index_tuples(rri, slot, estate, true,
											&spec_conflict, arbiters);
		table_tuple_complete_speculative(rel, slot, token, !spec_conflict);
		SpeculativeInsertionLockRelease(GetCurrentTransactionId());
		if (spec_conflict)
		{
			/* someone inserted the key meanwhile: look again */
			list_free(recheck);
			continue;
		}

		/* the foreign key's check, unless it passed for this kind already */
		if (!fk_checked)
			ExecARInsertTriggers(estate, rri, slot, recheck, NULL);
		id = DatumGetInt64(slot->tts_values[cache.att_id - 1]);
		if (OidIsValid(cache.work_relid))
			work = insert_work(estate, slot->tts_values[cache.att_id - 1],
							   slot->tts_values[cache.att[NOTIF_FAST_KIND] - 1],
							   slot->tts_values[cache.att[NOTIF_FAST_NEXT_AT] - 1]);
		*inserted = true;
		break;
	}
	/* fires the AFTER ROW triggers: the foreign key check on kind */
	AfterTriggerEndQuery(estate);
	if (*inserted && cache.fk_skippable && !fk_checked)
		notif_fk_kind_remember(kind);

	/* our indexes, keeping their locks; then what the triggers opened */
	foreach(lc, estate->es_opened_result_relations)
		notif_fast_close_indexes(lfirst(lc));
	ExecCloseResultRelations(estate);
	if (work)
		table_close(work, NoLock);
	table_close(rel, NoLock);
	ExecResetTupleTable(estate->es_tupleTable, false);
	MemoryContextSwitchTo(old);
	FreeExecutorState(estate);
	return id;
}

/*
 * Insert the job, or find the existing one with its key.  Returns the id;
 * *inserted says which.  The caller has checked notif_fast_usable().  While
 * a call runs (its CHECKs, its triggers), a nested notif_enqueue takes the
 * SPI path: rebuilding the cache would free what this call is using.
 */
int64
notif_fast_insert(Datum *given, bool *given_null, bool *inserted)
{
	volatile int64 id = 0;

	fast_active = true;
	PG_TRY();
	{
		id = fast_insert(given, given_null, inserted);
	}
	PG_FINALLY();
	{
		fast_active = false;
	}
	PG_END_TRY();
	return id;
}
