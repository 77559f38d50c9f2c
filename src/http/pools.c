/*-------------------------------------------------------------------------
 *
 * http/pools.c
 *      A sender's libcurl connection pools: which multi handle a call goes
 *      through, and when one closes.
 *
 * Each HTTPS provider has a multi handle of its own (one per provider and
 * lane), which negotiates HTTP/2 (ALPN) and multiplexes its calls over at
 * most max_connections connections (CURLMOPT_MAX_HOST_CONNECTIONS, with
 * CURLOPT_PIPEWAIT so that a call waits for a stream on an open connection
 * rather than opening another).  Should the provider answer over HTTP/1.1,
 * that cap would queue calls behind each other, so it is lifted for that
 * pool (notif_pool_answered): each call in flight then needs a connection
 * of its own.
 *
 * Those connections open no faster than the provider answers: the pool's
 * slow start, and the room it leaves for more calls, are http/ramp.c's.
 *
 * Plain http providers share the plain pools, HTTP/1.1, as many
 * connections as calls: a call goes to the first plain pool with fewer
 * than PLAIN_POOL_CALLS calls in flight, and another is opened when all
 * are full.  One pool would do, but libcurl looks for an idle connection
 * by walking every connection it has to the host, and walks its connection
 * cache again when a transfer is removed: with 512 calls in flight over
 * one pool those walks were a quarter of libcurl's work per call.  A plain
 * pool other than the first closes, with its connections, after
 * notif_deliver.spare_connections_idle without a call.
 *
 * An HTTPS pool stays open while its provider is one of the lane's (a push
 * platform wants its connections kept, not opened again and again).  When
 * the provider leaves the lane's configuration (its types paused, moved or
 * pointed elsewhere, the provider renamed), the pool closes with its
 * connections once its last call has ended, and its slot can take another
 * provider.  Left open, its connections would stay for the sender's life:
 * libcurl looks after a pool's idle connections only when the pool starts
 * a call.
 *
 * All pools share the sender's epoll set (http/sockets.c); an event
 * carries its pool's index, given to libcurl as the socket callback's
 * userp, and the loop (http.c) drives the pool by that index.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/timestamp.h"

#include "http/http.h"
#include "http/pools.h"

#define MAX_HTTPS_POOLS 64			/* HTTPS providers of one lane */
#define PLAIN_POOL_CALLS 64			/* calls in flight a plain pool takes */
#define MAX_PLAIN_POOLS 16
/* room too for as many retired HTTPS pools still ending their calls */
#define MAX_POOLS (2 * MAX_HTTPS_POOLS + MAX_PLAIN_POOLS)
#define CLOSE_NOW 1					/* close_at(): due at once */

static HttpPool pools[MAX_POOLS];
static int	n_pools = 0;
static int	n_plain_pools = 0;
static bool full_warned = false;	/* since an HTTPS pool last opened */

/* Does a provider's url go over TLS (its calls then get a pool of their own)? */
static bool
is_https(const char *url)
{
	return url != NULL && pg_strncasecmp(url, "https://", 8) == 0;
}

/* libcurl tells when it next wants to be called without a socket event */
static int
timer_cb(CURLM *m, long timeout_ms, void *userp)
{
	HttpPool   *pool = (HttpPool *) userp;

	if (timeout_ms < 0)
		pool->timer_at = 0;
	else
		pool->timer_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	return 0;
}

/* open pool i: "" for plain http, else an HTTPS provider's; false if it cannot */
static bool
open_pool(int i, const char *provider, long max_connections)
{
	HttpPool   *pool = &pools[i];
	CURLM	   *multi = curl_multi_init();

	if (multi == NULL)
		return false;
	memset(pool, 0, sizeof(*pool));
	pool->index = i;
	strlcpy(pool->provider, provider, sizeof(pool->provider));
	pool->multi = multi;
	curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, notif_http_socket_cb);
	curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, (void *) (uintptr_t) i);
	curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, timer_cb);
	curl_multi_setopt(multi, CURLMOPT_TIMERDATA, pool);
	if (provider[0])
	{
		/* as many idle keep-alive connections as calls can be in flight */
		curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long) notif_max_inflight);
		pool->max_connections = max_connections;
		curl_multi_setopt(multi, CURLMOPT_PIPELINING, (long) CURLPIPE_MULTIPLEX);
		curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, max_connections);
	}
	else
	{
		/*
		 * Idle connections for its calls, with room to spare for a lane's
		 * several plain providers (in-use and idle ones count alike), or
		 * its share of max_inflight past 2,048 calls.  Unused, it closes
		 * (notif_pools_close_unused), so "never used" counts from now.
		 */
		curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS,
						  (long) Max(2 * PLAIN_POOL_CALLS,
									 (notif_max_inflight + MAX_PLAIN_POOLS - 1) / MAX_PLAIN_POOLS));
		pool->unused_since = GetCurrentTimestamp();
	}
	return true;
}

static HttpPool *
new_pool(const char *provider, long max_connections)
{
	if (n_pools >= MAX_POOLS || !open_pool(n_pools, provider, max_connections))
		return NULL;
	if (!provider[0])
		n_plain_pools++;
	return &pools[n_pools++];
}

/*
 * The plain pool for a call: the first open one with room, else a closed
 * one opened again, else a new one, else the least busy.
 */
static HttpPool *
plain_pool(void)
{
	HttpPool   *least = NULL;
	int			closed = -1;
	int			i;

	for (i = 0; i < n_pools; i++)
	{
		HttpPool   *pool = &pools[i];

		if (pool->provider[0] != '\0')
			continue;
		if (pool->multi == NULL)
		{
			if (closed < 0)
				closed = i;
			continue;
		}
		if (pool->calls < PLAIN_POOL_CALLS)
			return pool;
		if (least == NULL || pool->calls < least->calls)
			least = pool;
	}
	if (closed >= 0 && open_pool(closed, "", 0))
		return &pools[closed];
	if (n_plain_pools < MAX_PLAIN_POOLS)
	{
		HttpPool   *pool = new_pool("", 0);

		if (pool)
			return pool;
	}
	return least;
}

/*
 * Close the pools no longer needed, with their connections: an HTTPS pool
 * whose provider left the lane, once its calls have ended; a spare plain
 * pool (all but the first) unused for notif_deliver.spare_connections_idle.
 * libcurl looks after a pool's idle connections (closes those the provider
 * closed, or idle too long) only when the pool starts a call, and calls go
 * to the first pools: after a peak, the connections of a pool no longer
 * used would stay, dead or alive, for the sender's life.  close_at() says
 * when the next is due (the sender's wait ends then).
 */
static TimestampTz
close_at(HttpPool *pool)
{
	if (pool->multi == NULL || pool->calls > 0)
		return 0;
	if (pool->retired)
		return CLOSE_NOW;
	/* the first plain pool, and those of the lane's providers, stay open */
	if (pool == &pools[0] || pool->provider[0] != '\0' || pool->unused_since == 0)
		return 0;
	return TimestampTzPlusMilliseconds(pool->unused_since, notif_spare_connections_idle_ms);
}

void
notif_pools_close_unused(TimestampTz now)
{
	int			i;

	for (i = 0; i < n_pools; i++)
	{
		HttpPool   *pool = &pools[i];
		TimestampTz at = close_at(pool);

		if (at != 0 && now >= at)
		{
			curl_multi_cleanup(pool->multi);	/* its sockets leave the epoll set */
			pool->multi = NULL;
			pool->timer_at = 0;
			pool->unused_since = 0;
		}
	}
}

/*
 * The lane's configuration was read again: the HTTPS pools of providers
 * no longer among its types' are retired (closed now if they have no call,
 * else by notif_pools_close_unused once their calls end), and those of
 * providers back in it are not.
 */
void
notif_pools_keep_only(const NotifTypeConf *types, int n)
{
	int			i;

	for (i = 0; i < n_pools; i++)
	{
		HttpPool   *pool = &pools[i];
		const NotifProviderConf *p;

		if (pool->provider[0] == '\0' || pool->multi == NULL)
			continue;
		p = notif_lane_provider(types, n, pool->provider);
		pool->retired = (p == NULL || !is_https(p->url));
	}
	/* those without calls now, so that this round's calls find their slots */
	notif_pools_close_unused(GetCurrentTimestamp());
}

/*
 * The open HTTPS pool of a provider, or NULL; *closed (if asked) gets a
 * closed HTTPS slot that another provider may take, or -1.
 */
static HttpPool *
https_pool(const char *provider, int *closed)
{
	int			i;

	if (closed)
		*closed = -1;
	for (i = 0; i < n_pools; i++)
	{
		HttpPool   *pool = &pools[i];

		if (pool->provider[0] == '\0')
			continue;
		if (pool->multi == NULL)
		{
			/* a retired provider's slot, closed: free for any */
			if (closed && *closed < 0)
				*closed = i;
			continue;
		}
		if (strcmp(pool->provider, provider) == 0)
			return pool;
	}
	return NULL;
}

/* May another HTTPS provider have a pool?  (Else its calls go plain.) */
static bool
can_open_https_pool(void)
{
	int			live = 0;	/* open, not retired */
	bool		closed = false;
	int			i;

	for (i = 0; i < n_pools; i++)
	{
		if (pools[i].provider[0] == '\0')
			continue;
		if (pools[i].multi == NULL)
			closed = true;
		else if (!pools[i].retired)
			live++;
	}
	return live < MAX_HTTPS_POOLS &&
		(closed || n_pools - n_plain_pools < MAX_POOLS - MAX_PLAIN_POOLS);
}

/* The pool of a call: its provider's if it is HTTPS (and there is room). */
HttpPool *
notif_pool_for(NotifCall *call)
{
	bool		https = is_https(call->url);

	if (https && call->provider && call->provider[0])
	{
		int			closed;
		HttpPool   *pool = https_pool(call->provider, &closed);

		if (pool)
		{
			/* max_connections changed (the cap stays lifted over HTTP/1.1) */
			if (pool->max_connections != call->max_connections)
			{
				pool->max_connections = call->max_connections;
				if (!pool->http1_seen)
					curl_multi_setopt(pool->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
									  (long) call->max_connections);
				else
					pool->ramp = Max(pool->ramp, call->max_connections);
			}
			return pool;
		}
		if (can_open_https_pool())
		{
			if (closed >= 0 && open_pool(closed, call->provider, call->max_connections))
				pool = &pools[closed];
			else if (closed < 0)
				pool = new_pool(call->provider, call->max_connections);
			if (pool)
			{
				full_warned = false;
				return pool;
			}
		}
		if (!full_warned)
			ereport(WARNING,
					(errmsg("notif_deliver: provider \"%s\" is called through the plain pools, over HTTP/1.1",
							call->provider),
					 errdetail("This sender has connection pools for %d https providers of its lane already; this one's max_connections does not apply.",
							   MAX_HTTPS_POOLS),
					 errhint("Move some of the lane's https providers' types to another lane.")));
		full_warned = true;
	}
	return plain_pool();
}


/* The first plain pool, opened; false if libcurl could not make it. */
bool
notif_pools_init(void)
{
	return new_pool("", 0) != NULL;
}

int
notif_pools_count(void)
{
	return n_pools;
}

HttpPool *
notif_pool(int i)
{
	Assert(i >= 0 && i < n_pools);
	return &pools[i];
}

/* A call's transfer was added to the pool (job_call: not a lookup or a token fetch). */
void
notif_pool_enter(HttpPool *pool, bool job_call)
{
	pool->calls++;
	notif_ramp_enter(pool, job_call, GetCurrentTimestamp());
	pool->unused_since = 0;
}

/* A call's transfer left the pool (it ended at "when"). */
void
notif_pool_leave(HttpPool *pool, TimestampTz when)
{
	if (--pool->calls == 0)
		pool->unused_since = when;
}

/*
 * How many more calls to a provider its pool takes now without opening
 * connections faster than http/ramp.c allows; INT_MAX for no limit (plain
 * http, an HTTPS provider that multiplexes, or one whose calls go through
 * the plain pools).
 */
int
notif_pool_room(const char *provider, const char *url, int max_connections)
{
	HttpPool   *pool;

	if (!is_https(url) || provider == NULL || !provider[0])
		return INT_MAX;
	pool = https_pool(provider, NULL);
	if (pool == NULL)
		return can_open_https_pool() ? max_connections : INT_MAX;
	return notif_ramp_room(pool, hash_bytes((const unsigned char *) url, strlen(url)) | 1,
						   GetCurrentTimestamp());
}

/* When a pool next wants driving: libcurl's timer, or a spare pool's close; 0 for never. */
TimestampTz
notif_pools_next_at(void)
{
	TimestampTz next_at = 0;
	int			i;

	for (i = 0; i < n_pools; i++)
	{
		TimestampTz at = close_at(&pools[i]);

		if (pools[i].timer_at != 0 && (next_at == 0 || pools[i].timer_at < next_at))
			next_at = pools[i].timer_at;
		if (at != 0 && (next_at == 0 || at < next_at))
			next_at = at;
	}
	return next_at;
}
