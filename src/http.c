/*-------------------------------------------------------------------------
 *
 * http.c
 *      The libcurl event loop of a sender: many provider calls in flight at
 *      once through the multi interface, driven by curl_multi_socket_action
 *      over an epoll set of libcurl's sockets.
 *
 * The sender waits on that epoll descriptor together with its latch (one
 * WaitEventSet), so that a wake-up, a signal or a socket event all end the
 * wait.  No transaction is open while calls are in flight.
 *
 * The at_most_once guard: libcurl silently re-sends a request on a fresh
 * connection when a reused keep-alive connection dies before any response
 * byte.  For at_most_once that copy would be a duplicate behind our back, so
 * at_most_once bodies are given through a read callback without a seek
 * callback (libcurl cannot rewind them and fails with CURLE_SEND_FAIL_REWIND
 * instead), and at_most_once requests without a body never reuse a
 * connection.
 *
 * Connection pools: each HTTPS provider has a multi handle of its own (one
 * per provider and lane), which negotiates HTTP/2 (ALPN) and multiplexes
 * its calls over at most max_connections connections
 * (CURLMOPT_MAX_HOST_CONNECTIONS, with CURLOPT_PIPEWAIT so that a call
 * waits for a stream on an open connection rather than opening another).
 * Should the provider answer over HTTP/1.1, that cap would queue calls
 * behind each other, so it is lifted for that pool.  Plain http providers
 * share the plain pools, HTTP/1.1, as many connections as calls: a call
 * goes to the first plain pool with fewer than PLAIN_POOL_CALLS calls in
 * flight, and another is opened when all are full.  One pool would do,
 * but libcurl looks for an idle connection by walking every connection it
 * has to the host, and walks its connection cache again when a transfer is
 * removed: with 512 calls in flight over one pool those walks were a
 * quarter of libcurl's work per call.  A plain pool other than the first
 * closes, with its connections, after notif_deliver.spare_connections_idle
 * without a call (close_spare_pools).  All pools share one epoll set; an
 * event carries its pool's index and the socket.
 * Which sockets it watches, and why an idle connection's socket stays in
 * it, is http_sockets.c's.
 *
 * Besides the jobs' calls, the loop carries auxiliary transfers (a push
 * provider's token fetch, push_auth.c): they end in their on_done callback
 * and do not count as calls in flight.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/epoll.h>
#include <unistd.h>

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "notif_deliver.h"
#include "push.h"

#define MAX_HTTPS_POOLS 64			/* HTTPS providers of one lane */
#define PLAIN_POOL_CALLS 64			/* calls in flight a plain pool takes */
#define MAX_PLAIN_POOLS 16
#define MAX_POOLS (MAX_HTTPS_POOLS + MAX_PLAIN_POOLS)
#define MAX_ANSWER (16 * 1024)

typedef struct HttpPool
{
	char		provider[NOTIF_NAME_MAXLEN];	/* "": the plain-http pool */
	CURLM	   *multi;
	TimestampTz timer_at;		/* 0: no libcurl timer pending */
	long		max_connections;	/* 0: no cap */
	bool		http1_seen;		/* answered over HTTP/1.x: cap lifted */
	int			calls;			/* transfers in it now */
	TimestampTz unused_since;	/* calls fell to 0 then; 0: in use, or closed */
} HttpPool;

static HttpPool pools[MAX_POOLS];
static int	n_pools = 0;
static int	n_plain_pools = 0;
static int	epfd = -1;
static int	n_inflight = 0;
static dlist_head inflight_calls = DLIST_STATIC_INIT(inflight_calls);
static dlist_head done_calls = DLIST_STATIC_INIT(done_calls);

/*
 * Easy handles of finished calls, reset and kept for the next ones: a
 * busy sender then reuses as many handles as it has calls in flight,
 * instead of allocating and freeing one (with its buffers) per call, which
 * let its memory drift up with malloc fragmentation.
 */
static CURL *idle_handles[NOTIF_MAX_INFLIGHT_LIMIT];
static int	n_idle = 0;

static CURL *
get_handle(void)
{
	if (n_idle > 0)
		return idle_handles[--n_idle];
	return curl_easy_init();
}

/* Free the idle handles (a sender that fell idle). */
void
notif_http_release_idle(void)
{
	while (n_idle > 0)
		curl_easy_cleanup(idle_handles[--n_idle]);
}

static void
put_handle(CURL *easy)
{
	if (n_idle < notif_max_inflight)
	{
		curl_easy_reset(easy);
		idle_handles[n_idle++] = easy;
	}
	else
		curl_easy_cleanup(easy);
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

/* at_most_once bodies: read once, never rewound */
static size_t
read_cb(char *buffer, size_t size, size_t nitems, void *userdata)
{
	NotifCall  *call = (NotifCall *) userdata;
	size_t		n = Min(size * nitems, call->body_len - call->body_sent);

	memcpy(buffer, call->body + call->body_sent, n);
	call->body_sent += n;
	return n;
}

/* keep the start of a response body, for last_error */
static size_t
write_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	NotifCall  *call = (NotifCall *) userdata;
	size_t		n = size * nmemb;
	size_t		room = sizeof(call->response) - 1 - call->response_len;

	size_t		i;

	/* a push answer or a token is read whole (it may hold a secret) */
	if (call->answer)
	{
		if (call->answer->len + n <= MAX_ANSWER)
			appendBinaryStringInfo(call->answer, ptr, n);
		return n;
	}

	/* printable ASCII only: it goes into a text column, whatever it was */
	for (i = 0; i < n && room > 0; i++, room--)
	{
		unsigned char c = (unsigned char) ptr[i];

		call->response[call->response_len++] = (c >= 0x20 && c < 0x7f) ? (char) c : '?';
	}
	call->response[call->response_len] = '\0';
	return n;
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
		 * (close_spare_pools), so "never used" counts from now.
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
 * Close the spare plain pools (all but the first) unused for
 * notif_deliver.spare_connections_idle, with their connections.  libcurl
 * looks after a pool's idle connections (closes those the provider closed,
 * or idle too long) only when the pool starts a call, and calls go to the
 * first pools: after a peak, the connections of a pool no longer used would
 * stay, dead or alive, for the sender's life.  spare_close_at() says when
 * the next is due (the sender's wait ends then).
 */
static TimestampTz
spare_close_at(HttpPool *pool)
{
	if (pool == &pools[0] || pool->provider[0] != '\0' || pool->multi == NULL ||
		pool->calls > 0 || pool->unused_since == 0)
		return 0;				/* the first plain pool stays open */
	return TimestampTzPlusMilliseconds(pool->unused_since, notif_spare_connections_idle_ms);
}

static void
close_spare_pools(TimestampTz now)
{
	int			i;

	for (i = 0; i < n_pools; i++)
	{
		HttpPool   *pool = &pools[i];
		TimestampTz close_at = spare_close_at(pool);

		if (close_at != 0 && now >= close_at)
		{
			curl_multi_cleanup(pool->multi);	/* its sockets leave the epoll set */
			pool->multi = NULL;
			pool->timer_at = 0;
			pool->unused_since = 0;
		}
	}
}

/* The pool of a call: its provider's if it is HTTPS (and there is room). */
static HttpPool *
pool_of(NotifCall *call)
{
	bool		https = pg_strncasecmp(call->url, "https://", 8) == 0;
	int			i;

	if (https && call->provider && call->provider[0])
	{
		for (i = 0; i < n_pools; i++)
			if (strcmp(pools[i].provider, call->provider) == 0)
			{
				HttpPool   *pool = &pools[i];

				/* max_connections changed (the cap stays lifted over HTTP/1.1) */
				if (pool->max_connections != call->max_connections)
				{
					pool->max_connections = call->max_connections;
					if (!pool->http1_seen)
						curl_multi_setopt(pool->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
										  (long) call->max_connections);
				}
				return pool;
			}
		if (n_pools - n_plain_pools < MAX_HTTPS_POOLS && n_pools < MAX_POOLS)
		{
			HttpPool   *pool = new_pool(call->provider, call->max_connections);

			if (pool)
				return pool;
		}
	}
	return plain_pool();
}

void
notif_http_init(void)
{
	if (curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK)
		elog(ERROR, "curl_global_init failed");
	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (epfd < 0)
		elog(ERROR, "epoll_create1 failed: %m");
	notif_http_sockets_init(epfd);
	if (new_pool("", 0) == NULL)
		elog(ERROR, "curl_multi_init failed");
}

int
notif_http_epoll_fd(void)
{
	return epfd;
}

int
notif_http_inflight(void)
{
	return n_inflight;
}

/* milliseconds until libcurl wants a timeout call or a spare pool closes; -1 for none */
long
notif_http_timeout_ms(void)
{
	TimestampTz now;
	TimestampTz timer_at = 0;
	int			i;

	for (i = 0; i < n_pools; i++)
	{
		TimestampTz close_at = spare_close_at(&pools[i]);

		if (pools[i].timer_at != 0 && (timer_at == 0 || pools[i].timer_at < timer_at))
			timer_at = pools[i].timer_at;
		if (close_at != 0 && (timer_at == 0 || close_at < timer_at))
			timer_at = close_at;
	}
	if (timer_at == 0)
		return -1;
	now = GetCurrentTimestamp();
	if (now >= timer_at)
		return 0;
	return (long) ((timer_at - now + 999) / 1000);
}

/*
 * A call's transfer leaves its pool (it ended at "when"): the handle goes
 * back to the idle ones, its request is freed, and a pool left without
 * calls counts as unused from then.
 */
static void
leave_pool(NotifCall *call, TimestampTz when)
{
	HttpPool   *pool = &pools[call->pool];

	curl_multi_remove_handle(pool->multi, call->easy);
	if (--pool->calls == 0)
		pool->unused_since = when;
	put_handle(call->easy);
	call->easy = NULL;
	notif_free_request(call);
}

/* A call's transfer ended: what it did, and its handle back to the free list. */
static void
finish_call(HttpPool *pool, CURL *easy, CURLcode result)
{
	NotifCall  *call;
	curl_off_t	retry_after = 0;
	long		request_size = 0;

	curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **) &call);
	call->ended_at = GetCurrentTimestamp();
	curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &call->http_status);
	curl_easy_getinfo(easy, CURLINFO_REQUEST_SIZE, &request_size);
	curl_easy_getinfo(easy, CURLINFO_RETRY_AFTER, &retry_after);
	curl_easy_getinfo(easy, CURLINFO_HTTP_VERSION, &call->http_version);
	call->retry_after_ms = (int64) retry_after * 1000;
	call->outcome = notif_classify(result, call->http_status,
								   request_size > 0 || call->body_sent > 0);
	if (result != CURLE_OK)
		call->error = MemoryContextStrdup(call->cxt,
										  call->errbuf[0] ? call->errbuf : curl_easy_strerror(result));
	else if (call->outcome != OUTCOME_ACCEPTED && call->answer == NULL)
		call->error = MemoryContextStrdup(call->cxt, call->response);

	/* an HTTPS provider without HTTP/2: its calls need connections */
	if (pool->max_connections > 0 && !pool->http1_seen && call->on_done == NULL &&
		call->http_status != 0 &&
		call->http_version != CURL_HTTP_VERSION_2_0 &&
		call->http_version != CURL_HTTP_VERSION_NONE)
	{
		pool->http1_seen = true;
		curl_multi_setopt(pool->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
	}

	leave_pool(call, call->ended_at);
	dlist_delete(&call->node);
	if (call->on_done)
	{
		call->on_done(call);
		return;
	}
	if (call->format == FORMAT_FCM || call->format == FORMAT_APNS)
		notif_push_read_answer(call);
	n_inflight--;
	dlist_push_tail(&done_calls, &call->node);
}

/*
 * The transfers that ended.  Their messages are read before any handle is
 * removed: curl_multi_remove_handle walks the messages not yet read, so
 * removing each as it is read would cost the square of a round's calls.
 */
static void
collect_done(HttpPool *pool)
{
	struct
	{
		CURL	   *easy;
		CURLcode	result;
	}			done[256];
	CURLMsg    *msg;
	int			left;
	int			n,
				i;

	do
	{
		n = 0;
		while (n < (int) lengthof(done) &&
			   (msg = curl_multi_info_read(pool->multi, &left)) != NULL)
		{
			if (msg->msg != CURLMSG_DONE)
				continue;
			done[n].easy = msg->easy_handle;
			done[n].result = msg->data.result;
			n++;
		}
		for (i = 0; i < n; i++)
			finish_call(pool, done[i].easy, done[i].result);
	} while (n == (int) lengthof(done));
}

/* Let libcurl work: on ready sockets, and on its timer when due. */
void
notif_http_drive(bool sockets_ready)
{
	int			running;
	int			i;
	TimestampTz now;

	if (sockets_ready)
	{
		struct epoll_event evs[64];
		int			n;

		while ((n = epoll_wait(epfd, evs, lengthof(evs), 0)) > 0)
		{
			for (i = 0; i < n; i++)
			{
				curl_socket_t fd = (curl_socket_t) (uint32) evs[i].data.u64;
				int			flags = 0;

				if (notif_http_socket_stray(fd))
					continue;	/* a parked socket: not libcurl's now */

				if (evs[i].events & (EPOLLIN | EPOLLHUP))
					flags |= CURL_CSELECT_IN;
				if (evs[i].events & EPOLLOUT)
					flags |= CURL_CSELECT_OUT;
				if (evs[i].events & EPOLLERR)
					flags |= CURL_CSELECT_ERR;
				if (pools[evs[i].data.u64 >> 32].multi == NULL)
				{
					/* its pool closed (none should be left): never spin on it */
					notif_http_socket_drop(fd);
					continue;
				}
				curl_multi_socket_action(pools[evs[i].data.u64 >> 32].multi, fd,
										 flags, &running);
			}
			if (n < (int) lengthof(evs))
				break;
		}
	}
	now = GetCurrentTimestamp();
	for (i = 0; i < n_pools; i++)
	{
		HttpPool   *pool = &pools[i];

		if (pool->multi == NULL)
			continue;			/* a spare pool, closed */
		if (pool->timer_at != 0 && now >= pool->timer_at)
		{
			pool->timer_at = 0;
			curl_multi_socket_action(pool->multi, CURL_SOCKET_TIMEOUT, 0, &running);
		}
		collect_done(pool);
	}
	close_spare_pools(now);
}

/*
 * Start a call whose request is built.  Returns false, with call->error
 * set, when it could not start (nothing was sent).  Never throws: the job
 * is already committed as claimed.
 */
static bool
start(NotifCall *call)
{
	CURL	   *easy = get_handle();
	HttpPool   *pool = pool_of(call);

	if (easy == NULL)
	{
		call->error = "could not start the call: curl_easy_init failed";
		return false;
	}
	call->easy = easy;
	call->errbuf[0] = '\0';
	call->body_sent = 0;

	curl_easy_setopt(easy, CURLOPT_PRIVATE, call);
	notif_http_socket_callbacks(easy);	/* its connections' sockets can park */
	curl_easy_setopt(easy, CURLOPT_URL, call->url);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
	if (pool->max_connections > 0)
	{
		/* HTTP/2 where TLS offers it; wait for a stream, not a new connection */
		curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_2TLS);
		curl_easy_setopt(easy, CURLOPT_PIPEWAIT, 1L);
	}
	else
		curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_1_1);
	if (call->ca_cert)
	{
		struct curl_blob blob = {call->ca_cert, strlen(call->ca_cert), CURL_BLOB_COPY};

		curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, &blob);
	}
	curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 2L);
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, call->timeout_ms);
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, call->connect_timeout_ms);
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, call->headers);
	curl_easy_setopt(easy, CURLOPT_USERAGENT, "notif_deliver/" NOTIF_SCHEMA_VERSION);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, call->errbuf);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, call);

	/*
	 * Without a body byte to fail to rewind, libcurl would re-send an
	 * at_most_once request silently: such requests use a new connection.
	 */
	if (call->job.delivery == AT_MOST_ONCE && call->body_len == 0)
		curl_easy_setopt(easy, CURLOPT_FRESH_CONNECT, 1L);

	if (call->body == NULL)
		curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
	else
	{
		curl_easy_setopt(easy, CURLOPT_POST, 1L);
		curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) call->body_len);
		if (call->job.delivery == AT_MOST_ONCE)
		{
			/* no CURLOPT_SEEKFUNCTION: libcurl cannot send it twice */
			curl_easy_setopt(easy, CURLOPT_READFUNCTION, read_cb);
			curl_easy_setopt(easy, CURLOPT_READDATA, call);
		}
		else
			curl_easy_setopt(easy, CURLOPT_POSTFIELDS, call->body);
	}

	if (call->answer)
		resetStringInfo(call->answer);
	else if (call->on_done || call->format == FORMAT_FCM || call->format == FORMAT_APNS)
	{
		MemoryContext old = MemoryContextSwitchTo(call->cxt);

		call->answer = makeStringInfo();
		MemoryContextSwitchTo(old);
	}

	call->started_at = GetCurrentTimestamp();
	if (curl_multi_add_handle(pool->multi, easy) != CURLM_OK)
	{
		put_handle(easy);
		call->easy = NULL;
		call->error = "could not start the call: curl_multi_add_handle failed";
		return false;
	}
	call->pool = pool - pools;
	pool->calls++;
	pool->unused_since = 0;
	dlist_push_tail(&inflight_calls, &call->node);
	/* libcurl now asks for a 0 ms timer: the next notif_http_drive() starts it */
	return true;
}

bool
notif_http_start(NotifCall *call)
{
	if (!start(call))
		return false;
	n_inflight++;
	return true;
}

/*
 * Start a transfer that is not a job's call (a token fetch): it ends in
 * call->on_done, which owns the call from then on; not counted in flight.
 */
bool
notif_http_start_aux(NotifCall *call)
{
	Assert(call->on_done != NULL);
	return start(call);
}

/*
 * Drop every call in flight (shutdown): they end now, their result unknown
 * (the provider may or may not have acted).
 */
void
notif_http_abort_all(const char *reason)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &inflight_calls)
	{
		NotifCall  *call = dlist_container(NotifCall, node, iter.cur);

		call->ended_at = GetCurrentTimestamp();
		leave_pool(call, call->ended_at);
		call->outcome = OUTCOME_UNKNOWN;
		call->error = MemoryContextStrdup(call->cxt, reason);
		dlist_delete(&call->node);
		if (call->on_done)
		{
			call->on_done(call);
			continue;
		}
		n_inflight--;
		dlist_push_tail(&done_calls, &call->node);
	}
}

/* The next finished call, or NULL. */
NotifCall *
notif_http_next_done(void)
{
	if (dlist_is_empty(&done_calls))
		return NULL;
	return dlist_container(NotifCall, node, dlist_pop_head_node(&done_calls));
}
