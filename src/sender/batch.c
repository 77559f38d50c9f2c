/*-------------------------------------------------------------------------
 *
 * sender/batch.c
 *      Commit batching: when results trickle in (a slow provider, many calls
 *      in flight), a round waits a few milliseconds for more calls to end,
 *      so that one commit records many results instead of each almost
 *      alone.
 *
 * A round is held back only while all of these hold: other calls are still
 * in flight (a lane's single call is recorded at once), fewer than
 * notif_deliver.batch_size results wait, the oldest of them ended less than
 * notif_deliver.record_delay ago, nothing else needs the round (a
 * configuration to read, jobs to recover, a shutdown), and the sender was
 * not woken by an enqueue's commit or a change (new jobs are claimed at
 * once).  The guarantee is untouched: a result is still recorded only
 * after its call ended, and an at_most_once claim still commits before its
 * call starts; only the commit that makes an at_least_once job 'sent' may
 * come a few milliseconds later.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "postmaster/interrupt.h"
#include "utils/timestamp.h"

#include "http/http.h"
#include "sender/sender.h"

/*
 * When the pending round must run: 0 for now, else the time by which the
 * results waiting must be recorded (the round is held back until then, or
 * until a wake-up or enough results make it due).
 */
TimestampTz
sender_record_due(bool woken)
{
	dlist_iter	iter;
	NotifCall  *oldest;
	int			n = 0;

	if (notif_record_delay_ms <= 0 || woken || ShutdownRequestPending ||
		sender.config_stale || sender.need_recovery ||
		dlist_is_empty(&sender.finished) || notif_http_inflight() == 0)
		return 0;
	dlist_foreach(iter, &sender.finished)
	{
		if (++n >= notif_batch_size)
			return 0;
	}
	oldest = dlist_head_element(NotifCall, node, &sender.finished);
	return TimestampTzPlusMilliseconds(oldest->ended_at, notif_record_delay_ms);
}
