/*-------------------------------------------------------------------------
 *
 * enqueue/fk.c
 *      The foreign key check of notif_job.kind, once per transaction and
 *      kind on the enqueue fast path.
 *
 * For every new row, the foreign key's AFTER ROW trigger (RI_FKey_check_ins)
 * runs SELECT 1 FROM notif_type WHERE kind = $1 FOR KEY SHARE: it checks
 * that the type exists and locks its row until the transaction ends, so that
 * no other transaction can delete it or change its key meanwhile.  A bulk
 * enqueue of a million promotions would run that query a million times (a
 * quarter of the enqueue's cost) for one row, locked by the first.
 *
 * So the fast path lets the trigger run for the first job of a kind in a
 * transaction, and remembers the kind once the check has passed; the next
 * jobs of that kind skip it.  What the lock guarantees is what the check
 * would find again: the row exists, with that key.  The remembered kinds are
 * forgotten when the transaction ends, when any subtransaction rolls back (it
 * may have taken the lock), and whenever notif_type changes (its statement
 * trigger sends a relcache invalidation, which this session reads at its next
 * command: this transaction may have deleted or renamed the type itself).
 *
 * Only a plain foreign key qualifies: NOT DEFERRABLE (a deferred check would
 * lock the row only at commit), on notif_job (kind) alone, to notif_type, and
 * the only AFTER ROW INSERT trigger of notif_job (with another one, every
 * row's events are queued anyway, and the trigger runs as for INSERT).
 *
 * Not seen: the type's row deleted or renamed by this same transaction
 * without notif_type's triggers (session_replication_role = replica, which
 * turns off the foreign key for that statement, or DISABLE TRIGGER ALL);
 * this transaction's later jobs of that kind are then not checked again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "enqueue/fast.h"

/* a bulk enqueue has one kind or a few: a short list, searched in order */
#define MAX_LOCKED_KINDS	16

static Oid	type_relid = InvalidOid;	/* notif_type, whose changes forget */
static text *locked_kinds[MAX_LOCKED_KINDS];	/* in kinds_cxt */
static int	nlocked = 0;
static MemoryContext kinds_cxt = NULL;
static bool callbacks_registered = false;

static void
forget_kinds(void)
{
	if (nlocked > 0)
		MemoryContextReset(kinds_cxt);
	nlocked = 0;
}

static void
fk_xact_callback(XactEvent event, void *arg)
{
	forget_kinds();
}

static void
fk_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		forget_kinds();
}

/* from enqueue/fast.c's relcache callback (PostgreSQL has few slots) */
void
notif_fk_relcache_changed(Oid relid)
{
	if (relid == InvalidOid || relid == type_relid)
		forget_kinds();
}

/*
 * Whether rel (notif_job, in schema nspid, with kind at attribute kind_att)
 * has the plain foreign key described above as its only AFTER ROW INSERT
 * trigger.  Called when the fast path's cache is built.
 */
bool
notif_fk_check_skippable(Relation rel, Oid nspid, AttrNumber kind_att)
{
	TriggerDesc *trig = rel->trigdesc;
	Trigger    *fk = NULL;
	HeapTuple	tup;
	Form_pg_constraint con;
	bool		plain;
	int			i;

	if (!callbacks_registered)
	{
		RegisterXactCallback(fk_xact_callback, NULL);
		RegisterSubXactCallback(fk_subxact_callback, NULL);
		kinds_cxt = AllocSetContextCreate(TopMemoryContext, "notif_deliver locked kinds",
										  ALLOCSET_SMALL_SIZES);
		callbacks_registered = true;
	}
	forget_kinds();
	type_relid = get_relname_relid("notif_type", nspid);
	if (trig == NULL || !OidIsValid(type_relid))
		return false;

	for (i = 0; i < trig->numtriggers; i++)
	{
		Trigger    *t = &trig->triggers[i];

		if (!TRIGGER_FOR_ROW(t->tgtype) || !TRIGGER_FOR_INSERT(t->tgtype) ||
			TRIGGER_FOR_BEFORE(t->tgtype) || TRIGGER_FOR_INSTEAD(t->tgtype))
			continue;
		if (fk != NULL || t->tgfoid != F_RI_FKEY_CHECK_INS)
			return false;		/* another AFTER ROW INSERT trigger */
		fk = t;
	}
	if (fk == NULL || fk->tgdeferrable || fk->tginitdeferred || fk->tgqual != NULL ||
		(fk->tgenabled != TRIGGER_FIRES_ON_ORIGIN && fk->tgenabled != TRIGGER_FIRES_ALWAYS))
		return false;

	tup = SearchSysCache1(CONSTROID, ObjectIdGetDatum(fk->tgconstraint));
	if (!HeapTupleIsValid(tup))
		return false;
	con = (Form_pg_constraint) GETSTRUCT(tup);
	plain = con->contype == CONSTRAINT_FOREIGN && !con->condeferrable &&
		con->conrelid == RelationGetRelid(rel) && con->confrelid == type_relid;
	if (plain)
	{
		bool		isnull;
		Datum		conkey = SysCacheGetAttr(CONSTROID, tup, Anum_pg_constraint_conkey,
											 &isnull);
		Datum	   *keys;
		int			nkeys = 0;

		if (!isnull)
			deconstruct_array(DatumGetArrayTypeP(conkey), INT2OID, sizeof(int16), true,
							  TYPALIGN_SHORT, &keys, NULL, &nkeys);
		plain = nkeys == 1 && DatumGetInt16(keys[0]) == kind_att;
	}
	ReleaseSysCache(tup);
	return plain;
}

/* whether this transaction's check of kind has passed, and still holds */
bool
notif_fk_kind_locked(Datum kind)
{
	text	   *k = DatumGetTextPP(kind);
	Size		len = VARSIZE_ANY_EXHDR(k);
	int			i;

	for (i = 0; i < nlocked; i++)
		if (VARSIZE_ANY_EXHDR(locked_kinds[i]) == len &&
			memcmp(VARDATA_ANY(locked_kinds[i]), VARDATA_ANY(k), len) == 0)
			return true;
	return false;
}

/*
 * The check of kind has just passed: its row is locked until the end.  Not
 * as a replica (session_replication_role), where the check did not run.
 */
void
notif_fk_kind_remember(Datum kind)
{
	MemoryContext old;

	if (SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA ||
		nlocked >= MAX_LOCKED_KINDS || notif_fk_kind_locked(kind))
		return;
	old = MemoryContextSwitchTo(kinds_cxt);
	locked_kinds[nlocked++] = DatumGetTextPCopy(kind);
	MemoryContextSwitchTo(old);
}
