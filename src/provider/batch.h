/*-------------------------------------------------------------------------
 *
 * provider/batch.h
 *      A provider batch on the wire (provider/batch.c): the body of one call
 *      carrying several messages, and the per-message results read in its
 *      answer.
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_PROVIDER_BATCH_H
#define NOTIF_PROVIDER_BATCH_H

#include "lifecycle/delivery.h"

/*
 * The messages of one call.  calls[0] is the call that goes on the wire
 * (it carries this batch); the others wait on it.  Lives in its own memory
 * context, under the sender's calls, freed with notif_batch_free once every
 * message has its result.
 */
typedef struct NotifBatch
{
	MemoryContext cxt;
	int64		id;				/* notif_calls.batch_id */
	char	   *field;			/* the body's member holding the array, or NULL */
	Jsonb	   *results;		/* notif_provider.batch_results */
	int			n;
	NotifCall **calls;
	bool		answered;		/* its answer was read: each message has its outcome */
} NotifBatch;

extern NotifBatch *notif_batch_new(MemoryContext parent, const NotifProviderConf *provider,
								   int64 id, NotifCall **calls, int n);
extern void notif_batch_carry(NotifBatch *batch, const NotifProviderConf *provider);
extern void notif_batch_keep(NotifBatch *batch, NotifCall **calls, int n);
extern void notif_batch_read_answer(NotifCall *carrier);
extern void notif_batch_free(NotifBatch *batch);

#endif							/* NOTIF_PROVIDER_BATCH_H */
