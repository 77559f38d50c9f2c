/*-------------------------------------------------------------------------
 *
 * enqueue_fast.h
 *      The fast path of notif_enqueue (enqueue_fast.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_ENQUEUE_FAST_H
#define NOTIF_ENQUEUE_FAST_H

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
	NOTIF_FAST_NCOLS
};

extern bool notif_fast_usable(Oid nspid);
extern int64 notif_fast_insert(Datum *given, bool *given_null, bool *inserted);

/* enqueue_fk.c */
extern bool notif_fk_check_skippable(Relation rel, Oid nspid, AttrNumber kind_att);
extern bool notif_fk_kind_locked(Datum kind);
extern void notif_fk_kind_remember(Datum kind);

#endif							/* NOTIF_ENQUEUE_FAST_H */
