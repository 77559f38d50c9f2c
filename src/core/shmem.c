/*-------------------------------------------------------------------------
 *
 * shmem.c
 *      The shared memory of notif_deliver: one slot per lane (which sender
 *      serves it, its latch, its in-flight count), one slot per provider
 *      (in-flight calls and the rate-limit bucket, shared by all lanes), the
 *      launcher's latch and a configuration generation counter.
 *
 * Exists only when the library is in shared_preload_libraries; everything
 * here is a no-op otherwise (enqueue still works, nothing is sent).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "core/shared.h"

NotifShared *notif_shared = NULL;
NotifProviderSlot *notif_providers = NULL;

#define NOTIF_TRANCHE "notif_deliver"

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static Size
providers_offset(void)
{
	return MAXALIGN(add_size(offsetof(NotifShared, lanes),
							 mul_size(notif_max_lanes, sizeof(NotifLaneSlot))));
}

static Size
notif_shmem_size(void)
{
	return add_size(providers_offset(),
					mul_size(notif_max_providers, sizeof(NotifProviderSlot)));
}

static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(notif_shmem_size());
	RequestNamedLWLockTranche(NOTIF_TRANCHE, 2);
}

static void
shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	/*
	 * The postmaster runs this at start and again after a crash, when shared
	 * memory has been created anew: never keep a pointer into the old one.
	 */
	notif_shared = NULL;
	notif_providers = NULL;
	notif_shmem_attach();
}

/* Called from _PG_init when preloading. */
void
notif_shmem_request(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = shmem_startup;
}

/*
 * Create or attach to the shared state.  Created at postmaster start and at
 * every crash restart: the incarnation counter then starts from the clock,
 * above every incarnation recorded in notif_job before the crash.
 */
void
notif_shmem_attach(void)
{
	bool		found;
	int			i;

	if (notif_shared)
		return;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	notif_shared = ShmemInitStruct("notif_deliver", notif_shmem_size(), &found);
	notif_providers = (NotifProviderSlot *) ((char *) notif_shared + providers_offset());
	if (!found)
	{
		LWLockPadded *locks = GetNamedLWLockTranche(NOTIF_TRANCHE);

		memset(notif_shared, 0, notif_shmem_size());
		notif_shared->lanes_lock = &locks[0].lock;
		notif_shared->providers_lock = &locks[1].lock;
		pg_atomic_init_u64(&notif_shared->config_generation, 1);
		pg_atomic_init_u64(&notif_shared->next_incarnation, GetCurrentTimestamp());
		pg_atomic_init_u32(&notif_shared->launcher_state, WORKER_STARTING);
		pg_atomic_init_u64(&notif_shared->launcher_config_seen, 0);
		for (i = 0; i < notif_max_lanes; i++)
		{
			NotifLaneSlot *slot = &notif_shared->lanes[i];
			int			s;

			pg_atomic_init_u32(&slot->inflight, 0);
			pg_atomic_init_u64(&slot->sent, 0);
			pg_atomic_init_u32(&slot->state, WORKER_STARTING);
			pg_atomic_init_u32(&slot->retire, 0);
			pg_atomic_init_u64(&slot->config_seen, 0);
			for (s = 0; s < NOTIF_RATE_SECONDS; s++)
			{
				pg_atomic_init_u64(&slot->sent_second[s], 0);
				pg_atomic_init_u32(&slot->sent_count[s], 0);
			}
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/* A number no sender has had since the cluster was initialised. */
int64
notif_new_incarnation(void)
{
	return (int64) pg_atomic_add_fetch_u64(&notif_shared->next_incarnation, 1);
}

/* Make every incarnation from now on larger than "floor". */
void
notif_raise_incarnation(int64 floor)
{
	uint64		current = pg_atomic_read_u64(&notif_shared->next_incarnation);

	while (current < (uint64) floor &&
		   !pg_atomic_compare_exchange_u64(&notif_shared->next_incarnation, &current,
										   (uint64) floor))
		;						/* current was updated: look again */
}

/* How many senders of a lane run (at least 1: the caller is one). */
int
notif_lane_senders(const char *lane)
{
	int			n = 0;
	int			i;

	LWLockAcquire(notif_shared->lanes_lock, LW_SHARED);
	for (i = 0; i < notif_max_lanes; i++)
	{
		NotifLaneSlot *slot = &notif_shared->lanes[i];

		if (slot->in_use && slot->pid != 0 && strcmp(slot->lane, lane) == 0)
			n++;
	}
	LWLockRelease(notif_shared->lanes_lock);
	return Max(n, 1);
}

/* Set the latches of a lane's senders, if they run. */
void
notif_wake_lane(const char *lane)
{
	Latch	   *latches[NOTIF_MAX_SENDERS_PER_LANE];
	int			n = 0;
	int			i;

	if (notif_shared == NULL)
		return;
	LWLockAcquire(notif_shared->lanes_lock, LW_SHARED);
	for (i = 0; i < notif_max_lanes && n < NOTIF_MAX_SENDERS_PER_LANE; i++)
	{
		NotifLaneSlot *slot = &notif_shared->lanes[i];

		if (slot->in_use && slot->latch && strcmp(slot->lane, lane) == 0)
			latches[n++] = slot->latch;
	}
	LWLockRelease(notif_shared->lanes_lock);
	for (i = 0; i < n; i++)
		SetLatch(latches[i]);
}

static void
wake(bool launcher)
{
	Latch	   *latches[1 + NOTIF_MAX_LANES_LIMIT];
	int			n = 0;
	int			i;

	if (notif_shared == NULL)
		return;
	LWLockAcquire(notif_shared->lanes_lock, LW_SHARED);
	if (launcher && notif_shared->launcher_latch)
		latches[n++] = notif_shared->launcher_latch;
	for (i = 0; i < notif_max_lanes && n < (int) lengthof(latches); i++)
		if (notif_shared->lanes[i].in_use && notif_shared->lanes[i].latch)
			latches[n++] = notif_shared->lanes[i].latch;
	LWLockRelease(notif_shared->lanes_lock);
	for (i = 0; i < n; i++)
		SetLatch(latches[i]);
}

/* Wake the launcher and every sender. */
void
notif_wake_all(void)
{
	wake(true);
}

/* Wake every sender. */
void
notif_wake_senders(void)
{
	wake(false);
}

/* The incarnations of the senders running now; returns how many. */
int
notif_live_incarnations(int64 out[NOTIF_MAX_LANES_LIMIT])
{
	int			n = 0;
	int			i;

	Assert(notif_max_lanes <= NOTIF_MAX_LANES_LIMIT);
	LWLockAcquire(notif_shared->lanes_lock, LW_SHARED);
	for (i = 0; i < notif_max_lanes; i++)
		if (notif_shared->lanes[i].in_use && notif_shared->lanes[i].incarnation != 0)
			out[n++] = notif_shared->lanes[i].incarnation;
	LWLockRelease(notif_shared->lanes_lock);
	return n;
}

/*
 * Count n jobs sent by a lane's sender, in the bucket of the current second.
 * Only the lane's sender writes its buckets; readers may see a bucket just
 * being reset, which costs at most one second's count, once.
 */
void
notif_count_sent(NotifLaneSlot *lane, int n)
{
	uint64		second = (uint64) (GetCurrentTimestamp() / USECS_PER_SEC);
	int			b = (int) (second % NOTIF_RATE_SECONDS);

	if (pg_atomic_read_u64(&lane->sent_second[b]) != second)
	{
		pg_atomic_write_u32(&lane->sent_count[b], 0);
		pg_atomic_write_u64(&lane->sent_second[b], second);
	}
	pg_atomic_fetch_add_u32(&lane->sent_count[b], n);
}

/* Jobs a lane's sender sent in the last NOTIF_RATE_SECONDS seconds. */
uint64
notif_sent_last_minute(NotifLaneSlot *lane)
{
	uint64		now = (uint64) (GetCurrentTimestamp() / USECS_PER_SEC);
	uint64		total = 0;
	int			b;

	for (b = 0; b < NOTIF_RATE_SECONDS; b++)
	{
		uint64		second = pg_atomic_read_u64(&lane->sent_second[b]);

		if (second + NOTIF_RATE_SECONDS > now && second <= now)
			total += pg_atomic_read_u32(&lane->sent_count[b]);
	}
	return total;
}
