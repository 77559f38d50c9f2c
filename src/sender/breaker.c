/*-------------------------------------------------------------------------
 *
 * sender/breaker.c
 *      A provider's circuit breaker, in its shared provider slot (beside
 *      its throttle: throttle.c), so that every lane and sender sees one
 *      state.  Closed, calls go and each that ends says whether the
 *      provider is down (no answer: never reached, a timeout, a reset; or
 *      a 5xx) or up (any other answer, a 4xx and a 429 included: it is
 *      there, and a 429's pause is the throttle's); notif_provider.
 *      breaker_threshold such calls in a row open it.  Open, no call to the
 *      provider starts: claims leave its jobs queued (they spend no try;
 *      the late ones still expire), and a call claimed before it opened is
 *      put back without a try (amo_breaker_open, alo_breaker_open).  After
 *      breaker_cooldown it is half-open: one claim takes one job, whose
 *      call is the probe; up closes it, down opens it again for another
 *      cooldown.  A probe that never reports (its sender died) is given up
 *      after its timeouts, and another goes.
 *
 * The state lives as long as the slot: a restart, or a provider no sender
 * uses any more, starts it closed.  Every function here holds the slot's
 * lock for a few instructions; what it logs is logged after.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "core/excerpt.h"
#include "core/shared.h"
#include "sender/breaker.h"
#include "sender/throttle.h"

/* a probe with no result after its timeouts, and this, is given up */
#define PROBE_SLACK_MS	1000

static void
log_change(const char *provider, NotifBreakerState to, int failures, const char *last_error,
		   int64 cooldown_ms)
{
	if (to == BREAKER_OPEN)
		ereport(LOG,
				(errmsg("notif_deliver: the circuit breaker of provider \"%s\" is open after %d call(s) in a row that said it is down",
						provider, failures),
				 errdetail("The last: %s.  No call to it starts for " INT64_FORMAT " ms; then one call probes it.",
						   last_error, cooldown_ms),
				 errhint("notif_provider_health shows it; its jobs wait, or expire at their deadline.")));
	else
		ereport(LOG,
				(errmsg("notif_deliver: the circuit breaker of provider \"%s\" is closed: a probe call was answered",
						provider)));
}

/*
 * Whether a call that ended says its provider is down: no answer (never
 * reached it, a timeout, a reset), or a 5xx.  Any other answer says it is
 * there: a 4xx is the message's or the credentials' (a push token refused
 * is fetched again at once), a 429 the throttle's (throttle.c pauses for
 * its Retry-After).
 */
bool
notif_call_says_down(const NotifCall *call)
{
	if (call->http_status != 0)
		return call->http_status >= 500;
	return call->outcome == OUTCOME_UNREACHED || call->outcome == OUTCOME_UNKNOWN;
}

/* the breaker of a configuration that has none any more is closed */
static void
forget(NotifBreaker *b)
{
	if (b->state != BREAKER_CLOSED || b->failures != 0)
	{
		b->state = BREAKER_CLOSED;
		b->failures = 0;
		b->since = 0;
	}
}

/*
 * At a claim: may the provider's jobs be claimed?  BREAKER_WAITS sets
 * *until to when to ask again.
 */
NotifBreakerAdmit
notif_breaker_admit(const NotifProviderConf *provider, TimestampTz now, TimestampTz *until)
{
	NotifProviderSlot *p = notif_throttle_lock(provider->throttle);
	NotifBreaker *b = &p->breaker;
	NotifBreakerAdmit admit = BREAKER_CALLS;

	*until = 0;
	if (provider->breaker_threshold <= 0)
		forget(b);
	else if (b->state == BREAKER_OPEN)
	{
		if (now >= b->probe_at)
			admit = BREAKER_PROBE_DUE;
		else
		{
			admit = BREAKER_WAITS;
			*until = b->probe_at;
		}
	}
	else if (b->state == BREAKER_HALF_OPEN)
	{
		if (now >= b->probe_until)
			admit = BREAKER_PROBE_DUE;	/* the probe was lost */
		else
		{
			admit = BREAKER_WAITS;
			*until = b->probe_until;
		}
	}
	notif_throttle_unlock(provider->throttle);
	return admit;
}

/*
 * Take the probe of a breaker whose cooldown passed: true for one caller
 * only, until the probe ends, is given up or goes unused.
 */
bool
notif_breaker_take_probe(const NotifProviderConf *provider, TimestampTz now)
{
	NotifProviderSlot *p = notif_throttle_lock(provider->throttle);
	NotifBreaker *b = &p->breaker;
	bool		taken = false;

	if ((b->state == BREAKER_OPEN && now >= b->probe_at) ||
		(b->state == BREAKER_HALF_OPEN && now >= b->probe_until))
	{
		b->state = BREAKER_HALF_OPEN;
		/* a status lookup may come first: two calls' timeouts */
		b->probe_until = TimestampTzPlusMilliseconds(now, 2 * (provider->timeout_ms +
															   provider->connect_timeout_ms) +
													 PROBE_SLACK_MS);
		taken = true;
	}
	notif_throttle_unlock(provider->throttle);
	return taken;
}

/*
 * The probe taken for a provider (by its throttle handle) made no call:
 * another may go at once.  Its job's deadline passed, a status lookup
 * found it, its sender stopped: the senders are woken for it.  No job was
 * due (none_due): none is woken (each would take the probe and give it
 * back, and wake the others, in a loop); the next job enqueued wakes its
 * lane's sender, whose claim takes the probe with it.
 */
void
notif_breaker_probe_unused(int throttle, bool none_due)
{
	NotifProviderSlot *p = notif_throttle_lock(throttle);
	bool		released = false;

	if (p->breaker.state == BREAKER_HALF_OPEN)
	{
		p->breaker.state = BREAKER_OPEN;
		p->breaker.probe_at = 0;	/* due now */
		released = !none_due;
	}
	notif_throttle_unlock(throttle);
	if (released)
		notif_wake_senders();	/* a sender with a due job takes it */
}

/*
 * May a claimed call start now?  Not while its provider's breaker is open,
 * unless it is the probe; then *wait_ms says how long until one may.
 */
bool
notif_breaker_may_call(const NotifCall *call, TimestampTz now, int64 *wait_ms)
{
	NotifProviderSlot *p;
	NotifBreaker *b;
	bool		may = true;

	*wait_ms = 0;
	if (call->breaker_threshold <= 0)
		return true;
	p = notif_throttle_lock(call->throttle);
	b = &p->breaker;
	if (b->state != BREAKER_CLOSED && !(call->probe && b->state == BREAKER_HALF_OPEN))
	{
		TimestampTz at = b->state == BREAKER_OPEN ? b->probe_at : b->probe_until;

		may = false;
		b->refused++;
		if (at > now)
			*wait_ms = (at - now + 999) / 1000;
	}
	notif_throttle_unlock(call->throttle);
	return may;
}

/* A job's call ended: what it says of its provider. */
void
notif_breaker_record(const NotifCall *call, TimestampTz now)
{
	NotifProviderSlot *p;
	NotifBreaker *b;
	bool		down = notif_call_says_down(call);
	char		error[NOTIF_BREAKER_ERROR_LEN] = "";
	bool		opened = false,
				closed = false;
	int			failures = 0;

	if (call->breaker_threshold <= 0)
		return;
	if (down && call->http_status != 0)
		snprintf(error, sizeof(error), "HTTP %ld", call->http_status);	/* never its body */
	else if (down)
	{
		/* the transport's own words (host, port, what failed), excerpted */
		const char *what = call->error ? call->error : "no answer";
		char	   *kept = notif_excerpt(what, strlen(what), false);

		strlcpy(error, kept, sizeof(error));
		pfree(kept);
	}

	p = notif_throttle_lock(call->throttle);
	b = &p->breaker;
	if (down)
	{
		b->failures++;
		memcpy(b->last_error, error, sizeof(error));
		if (call->probe && b->state == BREAKER_HALF_OPEN)
		{
			/* still down: open for another cooldown, since when it first opened */
			b->state = BREAKER_OPEN;
			b->probe_at = TimestampTzPlusMilliseconds(now, call->breaker_cooldown_ms);
		}
		else if (b->state == BREAKER_CLOSED && b->failures >= call->breaker_threshold)
		{
			b->state = BREAKER_OPEN;
			b->since = now;
			b->probe_at = TimestampTzPlusMilliseconds(now, call->breaker_cooldown_ms);
			opened = true;
		}
	}
	else if (b->state == BREAKER_CLOSED)
		b->failures = 0;
	else if (call->probe)
	{
		/*
		 * Only the probe's answer ends an outage (a call started before it
		 * opened may still be answered): the failures shown stay those that
		 * opened it until then.
		 */
		b->failures = 0;
		b->state = BREAKER_CLOSED;
		b->since = now;
		closed = true;
	}
	failures = b->failures;
	notif_throttle_unlock(call->throttle);

	if (closed)
		notif_wake_senders();	/* the jobs that waited for it */
	if (opened || closed)
		log_change(call->provider, opened ? BREAKER_OPEN : BREAKER_CLOSED, failures, error,
				   call->breaker_cooldown_ms);
}
