/*-------------------------------------------------------------------------
 *
 * sender/activity.c
 *      What a lane's sender shows of itself: its state in notif_workers()
 *      (shared memory), its activity in pg_stat_activity (at most once a
 *      second while busy), and, once it falls idle, giving back the memory
 *      that bursts of calls left behind.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "pgstat.h"
#include "utils/timestamp.h"

#include "http/http.h"
#include "sender/sender.h"

/*
 * Idle for a second after sending: free the libcurl handles kept for
 * reuse, and give the memory that calls freed back to the system (glibc
 * keeps it, fragmented, and a sender's resident size would drift up after
 * bursts).  Once per idle spell; the main loop's wait wakes us for it.
 */
static void
trim_when_idle(NotifWorkerState state, TimestampTz now)
{
	if (state != WORKER_IDLE)
	{
		sender.idle_since = 0;
		if (state == WORKER_SENDING)
			sender.trim_pending = true;
	}
	else if (sender.idle_since == 0)
		sender.idle_since = now;
	else if (sender.trim_pending &&
			 TimestampDifferenceExceeds(sender.idle_since, now, SENDER_TRIM_AFTER_IDLE_MS))
	{
		notif_http_release_idle();
#ifdef __GLIBC__
		malloc_trim(0);
#endif
		sender.trim_pending = false;
	}
}

void
sender_report_state(TimestampTz now)
{
	int			inflight = notif_http_inflight();
	NotifWorkerState state;
	char		activity[128];

	if (now < sender.backoff_until)
		state = WORKER_BACKING_OFF;
	else if (inflight > 0)
		state = WORKER_SENDING;
	else
		state = WORKER_IDLE;
	pg_atomic_write_u32(&sender.slot->state, state);
	trim_when_idle(state, now);

	if (!sender.activity_stale && state == sender.reported &&
		(state != WORKER_SENDING ||
		 !TimestampDifferenceExceeds(sender.reported_at, now, SENDER_ACTIVITY_REPORT_MS)))
		return;
	sender.activity_stale = false;
	sender.reported = state;
	sender.reported_at = now;
	switch (state)
	{
		case WORKER_SENDING:
			snprintf(activity, sizeof(activity),
					 "sending: %d calls in flight, " UINT64_FORMAT " jobs sent in the last minute",
					 inflight, notif_sent_last_minute(sender.slot));
			pgstat_report_activity(STATE_RUNNING, activity);
			break;
		case WORKER_BACKING_OFF:
			pgstat_report_activity(STATE_IDLE, "backing off after an error (see the server log)");
			break;
		default:
			pgstat_report_activity(STATE_IDLE, "waiting for due jobs");
			break;
	}
}
