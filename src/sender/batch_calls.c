/*-------------------------------------------------------------------------
 *
 * sender/batch_calls.c
 *      Provider batches in the sender (notif_provider.batch_max > 1): the
 *      jobs of one provider claimed in one round grouped into calls of at
 *      most batch_max messages (provider/batch.c writes each call's body and
 *      reads its answer), how long a claim holds back to fill a batch
 *      (batch_wait), and a batch's messages handed on when its call ends.
 *
 * Each message keeps its own call record (its job, its outcome, its row in
 * notif_calls); the first of a batch goes on the wire and carries the
 * others.  A call holds one grant of its provider's throttle: max_inflight
 * counts calls, and rate_limit counts messages (a batch's messages past
 * its first take their tokens after its grant, in debt if need be, so
 * that the provider's rate of messages holds on average).  A job whose
 * retry asks its provider's status lookup first goes in a call of its
 * own, while the round's grant has calls for it; past them it goes in a
 * batch without asking (at_least_once allows the copy).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "provider/batch.h"
#include "sender/sender.h"
#include "sender/throttle.h"
#include "store/job_sql.h"

/*
 * Group a batching type's claimed calls (n, taken with a grant of
 * `granted` calls, n at most granted * batch_max) into calls on the
 * claimed list; returns how many calls they make (at most granted).
 */
int
sender_batch_group(NotifTypeConf *type, NotifCall **calls, int n, int granted)
{
	const NotifProviderConf *p = &type->provider;
	int			bm = Max(p->batch_max, 1);
	int			n_alone = 0;
	int			n_calls,
				n_batches = 0,
				i,
				k;
	int64	   *ids;
	NotifCall **rest;
	int			n_rest = 0;

	if (n == 0)
		return 0;
	for (i = 0; i < n; i++)
		if (calls[i]->lookup_url)
			n_alone++;
	/* a lookup's call of its own while the grant has calls for it */
	while (n_alone > 0 && n_alone + (n - n_alone + bm - 1) / bm > granted)
		n_alone--;
	rest = palloc(sizeof(NotifCall *) * n);
	k = 0;
	for (i = 0; i < n; i++)
	{
		if (calls[i]->lookup_url && k < n_alone)
			calls[k++] = calls[i];	/* kept in place, before the rest */
		else
		{
			calls[i]->lookup_url = NULL;	/* not asked: in a batch */
			rest[n_rest++] = calls[i];
		}
	}
	n_calls = n_alone + (n_rest + bm - 1) / bm;
	for (i = 0; i < n_rest; i += bm)
		if (Min(bm, n_rest - i) > 1)
			n_batches++;
	ids = palloc0(sizeof(int64) * Max(n_batches, 1));
	if (n_batches > 0)
		notif_sql_batch_ids(n_batches, ids);

	/* the calls of their own: one message each, as a batch still writes it */
	for (i = 0; i < n_alone; i++)
	{
		(void) notif_batch_new(sender.calls_cxt, p, 0, &calls[i], 1);
		dlist_push_tail(&sender.claimed, &calls[i]->node);
	}
	k = 0;
	for (i = 0; i < n_rest; i += bm)
	{
		int			m = Min(bm, n_rest - i);

		(void) notif_batch_new(sender.calls_cxt, p, m > 1 ? ids[k++] : 0, &rest[i], m);
		dlist_push_tail(&sender.claimed, &rest[i]->node);
	}

	/* rate_limit counts messages: those past one per call take theirs now */
	if (p->rate_limit > 0)
	{
		TimestampTz now = GetCurrentTimestamp();

		for (i = n_calls; i < n; i++)
			notif_throttle_charge(p->throttle, p, sender.lane_senders, now);
	}
	return n_calls;
}

/*
 * How many jobs a claim of a batching type may take with a grant of
 * `granted` calls: enough to fill them, at most the larger of a claim's
 * batch size (notif_deliver.batch_size) and one batch.
 */
int
sender_batch_claim_limit(const NotifTypeConf *type, int granted)
{
	int			bm = Max(type->provider.batch_max, 1);

	if (bm == 1)
		return granted;
	return (int) Min((int64) granted * bm, (int64) Max(notif_batch_size, bm));
}

/*
 * batch_wait: a batching type whose due jobs do not fill a batch waits
 * until its earliest due job has waited batch_wait; true when it claims
 * now, else *next says when to look again.
 */
bool
sender_batch_ready(const NotifTypeConf *type, TimestampTz now, TimestampTz *next)
{
	TimestampTz due,
				until;

	if (type->provider.batch_max <= 1 || type->provider.batch_wait_ms <= 0)
		return true;
	due = notif_sql_next_due(type->code);
	if (due == 0 || due > now)
		return true;			/* nothing due: the claim finds that */
	until = TimestampTzPlusMilliseconds(due, type->provider.batch_wait_ms);
	if (until <= now || notif_sql_due_count(type->code, type->provider.batch_max) >=
		type->provider.batch_max)
		return true;
	if (until < *next)
		*next = until;
	return false;
}

/*
 * The call that carried a batch ended (or was dropped at shutdown, its
 * answer never read): its other messages get their results, onto the
 * finished list after it; returns how many of them ended sent.
 */
int
sender_batch_ended(NotifCall *carrier)
{
	NotifBatch *b = carrier->batch;
	int			sent = 0;
	int			i;

	if (b == NULL)
		return 0;
	notif_batch_read_answer(carrier);	/* if the transport did not: dropped at shutdown */
	for (i = 1; i < b->n; i++)
	{
		NotifCall  *m = b->calls[i];

		if (notif_ends_sent(m->job.delivery, m->outcome) &&
			!(m->job.delivery == AT_MOST_ONCE && m->job.dedup.retry))
			sent++;
		dlist_push_tail(&sender.finished, &m->node);
	}
	return sent;
}

/* A batch's call that never went: its other messages are dropped with it (shutdown). */
void
sender_batch_discard(NotifCall *carrier)
{
	NotifBatch *b = carrier->batch;
	int			i;

	if (b == NULL)
		return;
	for (i = 1; i < b->n; i++)
		sender_free_call(b->calls[i]);
	b->n = 1;
}
