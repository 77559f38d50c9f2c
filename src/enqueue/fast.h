/*-------------------------------------------------------------------------
 *
 * enqueue/fast.h
 *      The fast path of notif_enqueue (enqueue/fast.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_ENQUEUE_FAST_H
#define NOTIF_ENQUEUE_FAST_H

#include "nodes/execnodes.h"
#include "utils/rel.h"

/* the values notif_enqueue gives, in this order */
enum
{
	NOTIF_FAST_USER_ID,
	NOTIF_FAST_KIND,
	NOTIF_FAST_ORDER_ID,
	NOTIF_FAST_PAYLOAD,
	NOTIF_FAST_NEXT_AT,
	NOTIF_FAST_DEADLINE_AT,
	NOTIF_FAST_TRACEPARENT,		/* from 1.4: absent from an older table */
	NOTIF_FAST_NCOLS
};

/* a table's indexes, as ExecOpenIndices would find and prepare them */
typedef struct FastIndexes
{
	int			n;
	Oid		   *oids;
	IndexInfo **infos;			/* predicates and expressions prepared */
} FastIndexes;

extern bool notif_fast_usable(Oid nspid);
extern int64 notif_fast_insert(Datum *given, bool *given_null, bool *inserted);

/* enqueue/indexes.c */
extern bool notif_fast_index_in(const FastIndexes *fi, Oid relid);
extern bool notif_expr_per_call(Node *expr);
extern void notif_fast_prepare_indexes(Relation rel, bool speculative, FastIndexes *fi);
extern void notif_fast_open_indexes(ResultRelInfo *rri, const FastIndexes *fi);
extern void notif_fast_close_indexes(ResultRelInfo *rri);

/* enqueue/fk.c */
extern bool notif_fk_check_skippable(Relation rel, Oid nspid, AttrNumber kind_att);
extern bool notif_fk_kind_locked(Datum kind);
extern void notif_fk_kind_remember(Datum kind);
extern void notif_fk_relcache_changed(Oid relid);

#endif							/* NOTIF_ENQUEUE_FAST_H */
