/*-------------------------------------------------------------------------
 *
 * throttle.c
 *      Per-provider limits shared by all lanes: calls in flight
 *      (notif_provider.max_inflight), requests per second
 *      (notif_provider.rate_limit, a token bucket holding at most a tenth of
 *      a second's worth, at least one), and a pause after the provider
 *      answered 429 with Retry-After.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "utils/timestamp.h"

#include "delivery.h"
#include "notif_deliver.h"
#include "throttle.h"

/* the longest pause a Retry-After may impose on a provider */
#define MAX_PAUSE_MS (3600 * 1000)

/* slots this process holds, per provider slot */
static int	held[NOTIF_MAX_PROVIDERS];

/* find the provider's slot, or take a free one; -1 if all are taken */
static int
provider_slot(const char *name)
{
	int			free_slot = -1;
	int			i;

	for (i = 0; i < NOTIF_MAX_PROVIDERS; i++)
	{
		NotifProviderSlot *p = &notif_shared->providers[i];

		if (p->in_use && strcmp(p->name, name) == 0)
			return i;
		if (!p->in_use && free_slot < 0)
			free_slot = i;
	}
	if (free_slot >= 0)
	{
		NotifProviderSlot *p = &notif_shared->providers[free_slot];

		memset(p, 0, sizeof(*p));
		p->in_use = true;
		strlcpy(p->name, name, NOTIF_NAME_MAXLEN);
		p->tokens = 1;
	}
	return free_slot;
}

/*
 * Ask for up to "want" calls to a provider now.  Returns how many may
 * start; when that is fewer than wanted because of the rate limit or a
 * pause, *retry_at says when to ask again (0: when a call ends).
 */
int
notif_throttle_acquire(const NotifProviderConf *provider, int want,
					   TimestampTz now, TimestampTz *retry_at, int *slot_out)
{
	NotifProviderSlot *p;
	int			slot;
	int			granted;

	*retry_at = 0;
	SpinLockAcquire(&notif_shared->mutex);
	slot = provider_slot(provider->name);
	*slot_out = slot;
	if (slot < 0)
	{
		/* more providers than slots: no shared limit, only the lane's */
		SpinLockRelease(&notif_shared->mutex);
		return want;
	}
	p = &notif_shared->providers[slot];

	if (p->paused_until > now)
	{
		*retry_at = p->paused_until;
		SpinLockRelease(&notif_shared->mutex);
		return 0;
	}

	granted = Min(want, provider->max_inflight - p->inflight);
	if (granted <= 0)
	{
		/* all its calls are in flight: whoever ends one wakes us */
		p->starved = true;
		granted = 0;
	}

	if (provider->rate_limit > 0 && granted > 0)
	{
		double		burst = Max(1.0, provider->rate_limit / 10.0);
		double		elapsed = (p->refilled_at == 0) ? 1.0 : (now - p->refilled_at) / 1000000.0;

		p->tokens = Min(burst, p->tokens + elapsed * provider->rate_limit);
		p->refilled_at = now;
		if (granted > (int) floor(p->tokens))
		{
			granted = (int) floor(p->tokens);
			*retry_at = TimestampTzPlusMilliseconds(now,
													(int64) ceil((1.0 - (p->tokens - granted)) * 1000.0 / provider->rate_limit));
		}
		p->tokens -= granted;
	}
	p->inflight += granted;
	held[slot] += granted;
	SpinLockRelease(&notif_shared->mutex);
	return granted;
}

/*
 * Give back n slots granted by notif_throttle_acquire: calls that ended,
 * or, with unused = true, grants that were never used (their rate-limit
 * tokens are refunded too).  Lanes starved of this provider are woken.
 */
void
notif_throttle_release(int slot, int n, bool unused)
{
	NotifProviderSlot *p;
	bool		starved;

	if (slot < 0 || n <= 0)
		return;
	p = &notif_shared->providers[slot];
	SpinLockAcquire(&notif_shared->mutex);
	p->inflight -= n;
	if (p->inflight < 0)
		p->inflight = 0;
	held[slot] -= n;
	if (unused)
		p->tokens += n;
	starved = p->starved;
	p->starved = false;
	SpinLockRelease(&notif_shared->mutex);
	if (starved)
		notif_wake_senders();
}

/* At exit: give back whatever this process still holds. */
void
notif_throttle_release_all(void)
{
	int			i;

	if (notif_shared == NULL)
		return;
	for (i = 0; i < NOTIF_MAX_PROVIDERS; i++)
		if (held[i] > 0)
			notif_throttle_release(i, held[i], false);
}

/* The provider said 429 with Retry-After: nobody calls it before then. */
void
notif_throttle_pause(int slot, TimestampTz until)
{
	if (slot < 0)
		return;
	if (until > TimestampTzPlusMilliseconds(GetCurrentTimestamp(), MAX_PAUSE_MS))
		until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), MAX_PAUSE_MS);
	SpinLockAcquire(&notif_shared->mutex);
	if (notif_shared->providers[slot].paused_until < until)
		notif_shared->providers[slot].paused_until = until;
	SpinLockRelease(&notif_shared->mutex);
}
