/*-------------------------------------------------------------------------
 *
 * throttle.c
 *      Per-provider limits shared by all lanes: calls in flight
 *      (notif_provider.max_inflight), requests per second
 *      (notif_provider.rate_limit, a token bucket holding at most a tenth of
 *      a second's worth, at least one), and a pause after the provider
 *      answered 429 with Retry-After.
 *
 * A sender attaches to the throttle of each provider its types use when it
 * reads its configuration, and detaches when it reads it again or exits.
 * The limits live in a shared provider slot (notif_providers, under
 * providers_lock); a slot no sender is attached to and with no call in
 * flight is free for another provider.  When every one of the
 * notif_deliver.max_providers slots is taken, the provider's limits are
 * still applied, in the lane alone, by a slot of the sender's own (a lane
 * with several senders shares them out): a warning says so once, and
 * notif_provider_slots() shows it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "lifecycle/delivery.h"
#include "core/shared.h"
#include "sender/throttle.h"

/* the longest pause a Retry-After may impose on a provider */
#define MAX_PAUSE_MS NOTIF_RETRY_AFTER_MAX_MS

/* a provider this process is attached to; a handle is its index */
typedef struct Attachment
{
	char		name[NOTIF_NAME_MAXLEN];
	int			refs;			/* attachments of this process's lane types */
	int			held;			/* granted, not yet released */
	int			shared;			/* its slot in notif_providers; -1: local */
	NotifProviderSlot local;	/* the limits, when not shared */
} Attachment;

static Attachment *attachments = NULL;
static int	n_attachments = 0;
static int	max_attachments = 0;
static List *warned = NIL;		/* providers already warned about */

#define IN_USE(a) ((a)->refs > 0 || (a)->held > 0)

static void
reset_slot(NotifProviderSlot *p, const char *name)
{
	memset(p, 0, sizeof(*p));
	p->in_use = true;
	strlcpy(p->name, name, NOTIF_NAME_MAXLEN);
	p->tokens = 1;
}

/* The provider's shared slot, taking a free one; -1 if all are taken. */
static int
take_shared_slot(const char *name)
{
	int			free_slot = -1;
	int			i;

	LWLockAcquire(notif_shared->providers_lock, LW_EXCLUSIVE);
	for (i = 0; i < notif_max_providers; i++)
	{
		NotifProviderSlot *p = &notif_providers[i];

		if (p->in_use && strcmp(p->name, name) == 0)
		{
			p->senders++;
			LWLockRelease(notif_shared->providers_lock);
			return i;
		}
		if (free_slot < 0 && (!p->in_use || (p->senders == 0 && p->inflight == 0)))
			free_slot = i;
	}
	if (free_slot >= 0)
	{
		reset_slot(&notif_providers[free_slot], name);
		notif_providers[free_slot].senders = 1;
	}
	LWLockRelease(notif_shared->providers_lock);
	return free_slot;
}

/* Show (or stop showing) a provider limited in this lane only. */
static void
list_unshared(NotifLaneSlot *lane, const char *name, bool add)
{
	int			i;

	LWLockAcquire(notif_shared->lanes_lock, LW_EXCLUSIVE);
	for (i = 0; i < lane->n_unshared; i++)
		if (strcmp(lane->unshared[i], name) == 0)
			break;
	if (add && i == lane->n_unshared && i < NOTIF_UNSHARED_SHOWN)
		strlcpy(lane->unshared[lane->n_unshared++], name, NOTIF_NAME_MAXLEN);
	else if (!add && i < lane->n_unshared)
	{
		lane->n_unshared--;
		memmove(lane->unshared[i], lane->unshared[i + 1],
				(lane->n_unshared - i) * NOTIF_NAME_MAXLEN);
	}
	LWLockRelease(notif_shared->lanes_lock);
}

static void
warn_unshared(const char *name)
{
	ListCell   *lc;
	MemoryContext old;

	foreach(lc, warned)
		if (strcmp((char *) lfirst(lc), name) == 0)
			return;
	ereport(WARNING,
			(errmsg("notif_deliver: provider \"%s\" has no shared slot: its max_inflight and rate_limit apply per lane",
					name),
			 errdetail("All %d provider slots are in use by other providers.", notif_max_providers),
			 errhint("Raise notif_deliver.max_providers (a restart); notif_provider_slots() shows the slots.")));
	old = MemoryContextSwitchTo(TopMemoryContext);
	warned = lappend(warned, pstrdup(name));
	MemoryContextSwitchTo(old);
}

/*
 * A provider this sender let go of (let_go) while its calls were still in
 * flight is in the lane's configuration again: count the sender in again,
 * in the shared slot it kept (a slot with calls in flight is never taken by
 * another provider), or in the lane's list of unshared providers.
 */
static void
rejoin(Attachment *a, NotifLaneSlot *lane)
{
	if (a->shared >= 0)
	{
		LWLockAcquire(notif_shared->providers_lock, LW_EXCLUSIVE);
		notif_providers[a->shared].senders++;
		LWLockRelease(notif_shared->providers_lock);
	}
	else
		list_unshared(lane, a->name, true);
}

/* Attach this lane's sender to a provider's throttle; returns the handle. */
int
notif_throttle_attach(const char *provider, NotifLaneSlot *lane)
{
	Attachment *a = NULL;
	int			h;

	for (h = 0; h < n_attachments; h++)
		if (IN_USE(&attachments[h]) && strcmp(attachments[h].name, provider) == 0)
		{
			if (attachments[h].refs++ == 0)
				rejoin(&attachments[h], lane);
			return h;
		}
	for (h = 0; h < n_attachments; h++)
		if (!IN_USE(&attachments[h]))
			break;
	if (h == max_attachments)
	{
		max_attachments = Max(16, 2 * max_attachments);
		attachments = attachments
			? repalloc(attachments, sizeof(Attachment) * max_attachments)
			: MemoryContextAlloc(TopMemoryContext, sizeof(Attachment) * max_attachments);
	}
	if (h == n_attachments)
		n_attachments++;
	a = &attachments[h];
	memset(a, 0, sizeof(*a));
	strlcpy(a->name, provider, NOTIF_NAME_MAXLEN);
	a->refs = 1;
	a->shared = take_shared_slot(provider);
	if (a->shared < 0)
	{
		reset_slot(&a->local, provider);
		list_unshared(lane, provider, true);
		warn_unshared(provider);
	}
	return h;
}

static void
let_go(Attachment *a, NotifLaneSlot *lane)
{
	if (a->shared >= 0)
	{
		LWLockAcquire(notif_shared->providers_lock, LW_EXCLUSIVE);
		notif_providers[a->shared].senders--;
		LWLockRelease(notif_shared->providers_lock);
	}
	else
		list_unshared(lane, a->name, false);
}

void
notif_throttle_detach(int handle, NotifLaneSlot *lane)
{
	Attachment *a = &attachments[handle];

	Assert(a->refs > 0);
	if (--a->refs == 0)
		let_go(a, lane);
}

static NotifProviderSlot *
lock_slot(Attachment *a)
{
	if (a->shared < 0)
		return &a->local;
	LWLockAcquire(notif_shared->providers_lock, LW_EXCLUSIVE);
	return &notif_providers[a->shared];
}

static void
unlock_slot(Attachment *a)
{
	if (a->shared >= 0)
		LWLockRelease(notif_shared->providers_lock);
}

/*
 * The provider's slot, locked, for what else it holds (its breaker:
 * breaker.c); unlock it within a few instructions.
 */
NotifProviderSlot *
notif_throttle_lock(int handle)
{
	return lock_slot(&attachments[handle]);
}

void
notif_throttle_unlock(int handle)
{
	unlock_slot(&attachments[handle]);
}

/*
 * Ask for up to "want" calls to a provider now, for a sender of a lane
 * with that many running senders.  Returns how many may
 * start; when that is fewer than wanted because of the rate limit or a
 * pause, *retry_at says when to ask again (0: when a call ends).
 */
int
notif_throttle_acquire(int handle, const NotifProviderConf *provider, int senders, int want,
					   TimestampTz now, TimestampTz *retry_at)
{
	Attachment *a = &attachments[handle];
	NotifProviderSlot *p = lock_slot(a);
	int			max_inflight = provider->max_inflight;
	double		rate_limit = provider->rate_limit;
	int			granted;

	if (a->shared < 0 && senders > 1)
	{
		/* a slot of this sender's own: its share of the lane's limits */
		max_inflight = notif_sender_share(max_inflight, senders);
		rate_limit /= senders;
	}
	*retry_at = 0;
	if (p->paused_until > now)
	{
		*retry_at = p->paused_until;
		unlock_slot(a);
		return 0;
	}

	granted = Min(want, max_inflight - p->inflight);
	if (granted <= 0)
	{
		/* all its calls are in flight: whoever ends one wakes us */
		p->starved = true;
		granted = 0;
	}

	if (rate_limit > 0 && granted > 0)
	{
		double		burst = Max(1.0, rate_limit / 10.0);
		double		elapsed = (p->refilled_at == 0) ? 1.0 : (now - p->refilled_at) / 1000000.0;

		p->tokens = Min(burst, p->tokens + elapsed * rate_limit);
		p->refilled_at = now;
		if (granted > (int) floor(p->tokens))
		{
			/* (tokens below 0: a debt notif_throttle_charge left) */
			granted = Max(0, (int) floor(p->tokens));
			*retry_at = TimestampTzPlusMilliseconds(now,
													(int64) ceil((1.0 - (p->tokens - granted)) * 1000.0 / rate_limit));
		}
		p->tokens -= granted;
	}
	p->inflight += granted;
	unlock_slot(a);
	a->held += granted;
	return granted;
}

/*
 * One more request of a call that holds its grant already (a call that a
 * status lookup came first for: lookup.c): it takes a rate-limit token,
 * into debt if none is left, so that the provider's rate holds on average
 * and the next grants wait for it.  Never blocks.
 */
void
notif_throttle_charge(int handle, const NotifProviderConf *provider, int senders, TimestampTz now)
{
	Attachment *a = &attachments[handle];
	NotifProviderSlot *p;
	double		rate_limit = provider->rate_limit;

	if (rate_limit <= 0)
		return;
	p = lock_slot(a);
	if (a->shared < 0 && senders > 1)
		rate_limit /= senders;
	if (p->refilled_at != 0)
		p->tokens = Min(Max(1.0, rate_limit / 10.0),
						p->tokens + (now - p->refilled_at) / 1000000.0 * rate_limit);
	p->refilled_at = now;
	p->tokens -= 1.0;
	unlock_slot(a);
}

/*
 * Give back n slots granted by notif_throttle_acquire: calls that ended,
 * or, with unused = true, grants that were never used (their rate-limit
 * tokens are refunded too).  Lanes starved of this provider are woken.
 */
void
notif_throttle_release(int handle, int n, bool unused)
{
	Attachment *a;
	NotifProviderSlot *p;
	bool		starved;

	if (handle < 0 || n <= 0)
		return;
	a = &attachments[handle];
	p = lock_slot(a);
	p->inflight = Max(0, p->inflight - n);
	if (unused)
		p->tokens += n;
	starved = p->starved;
	p->starved = false;
	unlock_slot(a);
	a->held = Max(0, a->held - n);
	if (starved && a->shared >= 0)
		notif_wake_senders();
	else if (starved)
		SetLatch(MyLatch);		/* only this lane waits for it */
}

/* The provider said 429 with Retry-After: nobody calls it before then. */
void
notif_throttle_pause(int handle, TimestampTz until)
{
	Attachment *a = &attachments[handle];
	NotifProviderSlot *p;
	TimestampTz longest = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), MAX_PAUSE_MS);

	if (until > longest)
		until = longest;
	p = lock_slot(a);
	if (p->paused_until < until)
		p->paused_until = until;
	unlock_slot(a);
}

/* At exit: give back whatever this process still holds, and detach. */
void
notif_throttle_release_all(NotifLaneSlot *lane)
{
	int			h;

	if (notif_shared == NULL)
		return;
	for (h = 0; h < n_attachments; h++)
	{
		Attachment *a = &attachments[h];

		if (a->held > 0)
			notif_throttle_release(h, a->held, false);
		if (a->refs > 0)
		{
			a->refs = 0;
			let_go(a, lane);
		}
	}
}
