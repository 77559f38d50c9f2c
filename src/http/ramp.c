/*-------------------------------------------------------------------------
 *
 * http/ramp.c
 *      How fast an HTTPS provider's connections open: the slow start of a
 *      provider's pool (http/pools.c) over HTTP/1.x.
 *
 * Over HTTP/1.x each call in flight holds a connection of its own, and a
 * sender with a backlog could start a TLS handshake for every call its
 * max_inflight allows, hundreds at once: more than a provider's front
 * completes within a connect timeout (the night's benchmark: thousands of
 * calls unreached, promotions failed).  So a pool's connections open no
 * faster than the provider answers, as TCP's slow start:
 *
 *  - until the first answer to a job's call says whether the provider
 *    multiplexes (HTTP/2: no limit here, its calls share max_connections
 *    connections), the pool takes at most max_connections calls at once;
 *  - over HTTP/1.x its ramp, the calls it may have at once, starts at
 *    max_connections and grows by one with each answer while calls are
 *    started with more than half of it in use (its credit, at most half of
 *    it: by half per round trip under load; a pool used below half of its
 *    ramp never grows);
 *  - a job's call that fails before its request went out (a connection
 *    refused, or not opened in time) halves it, once per RAMP_CUT_MS (the
 *    calls that were opening together fail together);
 *  - a job's call that went out and got no answer (a timeout, a reset)
 *    while the provider has answered nothing for RAMP_STALL_MS (it
 *    stalled) sets it back to max_connections, so that the provider is not
 *    met with a connection per waiting call when it comes back; the
 *    timeouts of a provider that otherwise answers do not;
 *  - after RAMP_RESTART_MS without a call it starts again from
 *    max_connections (the provider may have closed the idle connections);
 *  - a change of the provider's url forgets what its pool learnt.
 *
 * The sender claims no more of a provider's jobs than notif_pool_room
 * allows: the others wait in the job table, not in libcurl.  Lookups and
 * token fetches count as calls in flight (over HTTP/1.x they hold a
 * connection too) but neither grow nor cut the ramp.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "core/shared.h"
#include "http/http.h"
#include "http/pools.h"

#define RAMP_CUT_MS 200				/* a failed connect halves once per */
#define RAMP_STALL_MS 1000			/* no answer this long: a stall */
#define RAMP_RESTART_MS 10000		/* idle this long: start again */

/* What the pool learnt of its provider is forgotten: the first call again. */
void
notif_ramp_forget(HttpPool *pool)
{
	pool->h2_seen = false;
	pool->http1_seen = false;
	pool->ramp = 0;
	pool->ramp_credit = 0;
	pool->ramp_cut_at = 0;
	pool->last_answer_at = 0;
	if (pool->multi)
		curl_multi_setopt(pool->multi, CURLMOPT_MAX_HOST_CONNECTIONS, pool->max_connections);
}

/* idle for RAMP_RESTART_MS: the ramp starts again */
static void
restart_if_idle(HttpPool *pool, TimestampTz now)
{
	if (pool->http1_seen && pool->calls == 0 && pool->unused_since != 0 &&
		pool->ramp > pool->max_connections &&
		TimestampDifferenceExceeds(pool->unused_since, now, RAMP_RESTART_MS))
	{
		pool->ramp = (int) pool->max_connections;
		pool->ramp_credit = 0;
	}
}

/* A transfer joins the pool (counted in pool->calls already). */
void
notif_ramp_enter(HttpPool *pool, bool job_call, TimestampTz now)
{
	if (!pool->http1_seen)
		return;
	if (pool->calls == 1)
		restart_if_idle(pool, now);
	if (job_call && 2 * pool->calls > pool->ramp &&
		pool->ramp_credit < Max(1, pool->ramp / 2))
		pool->ramp_credit++;
}

/*
 * A job's call had an answer over this HTTP version (its transfer still
 * counted in pool->calls).  The first over HTTP/1.x lifts libcurl's cap on
 * connections: the ramp limits the calls instead.
 */
void
notif_ramp_answered(HttpPool *pool, long http_version, TimestampTz when)
{
	if (pool->max_connections <= 0 || http_version == CURL_HTTP_VERSION_NONE)
		return;
	pool->last_answer_at = when;
	if (http_version == CURL_HTTP_VERSION_2_0)
	{
		pool->h2_seen = true;
		return;
	}
	if (!pool->http1_seen)
	{
		pool->h2_seen = false;
		pool->http1_seen = true;
		pool->ramp = (int) pool->max_connections;
		pool->ramp_credit = 0;
		curl_multi_setopt(pool->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
	}
	if (pool->ramp_credit > 0)
	{
		pool->ramp_credit--;
		if (pool->ramp < notif_max_inflight)
			pool->ramp++;
	}
}

/*
 * A job's call failed without an answer: before its request went out
 * (!sent), or after it (a timeout, a reset).
 */
void
notif_ramp_failed(HttpPool *pool, bool sent, TimestampTz when)
{
	if (!pool->http1_seen)
		return;
	if (!sent)
	{
		if (pool->ramp_cut_at != 0 &&
			!TimestampDifferenceExceeds(pool->ramp_cut_at, when, RAMP_CUT_MS))
			return;
		pool->ramp = Max((int) pool->max_connections, pool->ramp / 2);
		pool->ramp_cut_at = when;
	}
	else if (pool->last_answer_at == 0 ||
			 TimestampDifferenceExceeds(pool->last_answer_at, when, RAMP_STALL_MS))
		pool->ramp = (int) pool->max_connections;
	else
		return;
	pool->ramp_credit = 0;
}

/*
 * How many more calls the pool takes now; INT_MAX if it multiplexes.
 * url_hash: its provider's url now (a change forgets what was learnt).
 */
int
notif_ramp_room(HttpPool *pool, uint32 url_hash, TimestampTz now)
{
	if (pool->url_hash != url_hash)
	{
		if (pool->url_hash != 0)
			notif_ramp_forget(pool);
		pool->url_hash = url_hash;
	}
	if (pool->h2_seen)
		return INT_MAX;
	if (!pool->http1_seen)
		return (int) pool->max_connections - pool->calls;
	restart_if_idle(pool, now);
	return pool->ramp - pool->calls;
}
