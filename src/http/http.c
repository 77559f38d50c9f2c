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
 * Each call goes through a connection pool, a libcurl multi handle
 * (http/pools.c says which, and why there are several); all pools share one
 * epoll set, and an event carries its pool's index and the socket.
 * Which sockets it watches, and why an idle connection's socket stays in
 * it, is http/sockets.c's.
 *
 * Besides the jobs' calls, the loop carries auxiliary transfers (a push
 * provider's token fetch, provider/auth.c; a provider's status lookup,
 * sender/lookup.c): they end in their on_done callback and do not count as
 * calls in flight.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/excerpt.h"
#include "core/shared.h"
#include "http/http.h"
#include "http/pools.h"

static int	epfd = -1;
static int	n_inflight = 0;
static dlist_head inflight_calls = DLIST_STATIC_INIT(inflight_calls);
static dlist_head done_calls = DLIST_STATIC_INIT(done_calls);

void
notif_http_init(void)
{
	if (curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK)
		elog(ERROR, "curl_global_init failed");
	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (epfd < 0)
		elog(ERROR, "epoll_create1 failed: %m");
	notif_http_sockets_init(epfd);
	if (!notif_pools_init())
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

/*
 * The lane's configuration was read again: the connections of providers
 * that left it close once their calls end (http/pools.c).
 */
void
notif_http_config_read(const NotifTypeConf *types, int n)
{
	notif_pools_keep_only(types, n);
}

/*
 * How many more calls to the provider may start now (INT_MAX: no limit
 * here): an HTTPS provider's connections open no faster than it answers
 * (http/pools.c).
 */
int
notif_http_room(const NotifProviderConf *provider)
{
	return notif_pool_room(provider->name, provider->url, provider->max_connections);
}

/* milliseconds until libcurl wants a timeout call or a spare pool closes; -1 for none */
long
notif_http_timeout_ms(void)
{
	TimestampTz next_at = notif_pools_next_at();
	TimestampTz now;

	if (next_at == 0)
		return -1;
	now = GetCurrentTimestamp();
	if (now >= next_at)
		return 0;
	return (long) ((next_at - now + 999) / 1000);
}

/*
 * A call's transfer leaves its pool (it ended at "when"): the handle goes
 * back to the idle ones unless "discard" (http/handles.c), its request is
 * freed, and a pool left without calls counts as unused from then.
 */
static void
leave_pool(NotifCall *call, TimestampTz when, bool discard)
{
	HttpPool   *pool = notif_pool(call->pool);

	curl_multi_remove_handle(pool->multi, call->easy);
	notif_pool_leave(pool, when);
	notif_http_put_handle(call->easy, discard);
	call->easy = NULL;
	notif_free_request(call);
}

/*
 * The wait an answer's Retry-After asks for, in ms, at most
 * NOTIF_RETRY_AFTER_MAX_MS; 0 without one, or with one that does not
 * read as a number of seconds or an HTTP-date (RFC 9110, 10.2.3), or a
 * date already past.  Read here, not through CURLINFO_RETRY_AFTER: for a
 * number past curl_off_t libcurl gives 0 (no wait at all), and its
 * seconds, times 1000, overflowed int64 for the largest it gives.
 */
static int64
retry_after_ms(CURL *easy)
{
	struct curl_header *h;
	const char *p;
	int64		s = 0;

	if (curl_easy_header(easy, "Retry-After", 0, CURLH_HEADER, -1, &h) != CURLHE_OK)
		return 0;
	/* the last one, as libcurl reads it */
	if (h->amount > 1 &&
		curl_easy_header(easy, "Retry-After", h->amount - 1, CURLH_HEADER, -1, &h) != CURLHE_OK)
		return 0;
	p = h->value;
	if (*p >= '0' && *p <= '9')
	{
		/* digits: counted only up to the bound, so never overflowing */
		for (; *p >= '0' && *p <= '9'; p++)
			if (s * 1000 < NOTIF_RETRY_AFTER_MAX_MS)
				s = s * 10 + (*p - '0');
		if (*p != '\0')
			return 0;
	}
	else
	{
		time_t		when = curl_getdate(p, NULL);

		if (when == -1)
			return 0;
		s = (int64) when - (int64) time(NULL);
		if (s <= 0)
			return 0;
	}
	return Min(s * 1000, (int64) NOTIF_RETRY_AFTER_MAX_MS);
}

/* A call's transfer ended: what it did, and its handle back to the free list. */
static void
finish_call(HttpPool *pool, CURL *easy, CURLcode result)
{
	NotifCall  *call;
	long		request_size = 0;
	curl_off_t	resent = 0;
	bool		sent;			/* a byte of the request went out */
	CURLcode	read_result;	/* result, unless only a long answer was cut */

	curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **) &call);
	call->ended_at = GetCurrentTimestamp();
	curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &call->http_status);
	curl_easy_getinfo(easy, CURLINFO_REQUEST_SIZE, &request_size);
	curl_easy_getinfo(easy, CURLINFO_HTTP_VERSION, &call->http_version);
	curl_easy_getinfo(easy, CURLINFO_REDIRECT_TIME_T, &resent);	/* > 0: sent again */
	call->retry_after_ms = retry_after_ms(easy);
	sent = request_size > 0 || call->body_sent > 0;

	/*
	 * A non-2xx answer longer than MAX_ANSWER was not read to its end
	 * (handles.c): its status and its start are all that is judged, as for
	 * one read whole.  The handle is still discarded, as after any failed
	 * transfer.
	 */
	read_result = result;
	if (call->answer_unread && call->http_status != 0)
		read_result = CURLE_OK;
	call->outcome = notif_classify(read_result, call->http_status, sent);
	if (read_result != CURLE_OK)
	{
		/*
		 * libcurl's words: they may hold what the provider or the url said
		 * (a host name, a TLS alert, a proxy's), so only their excerpt
		 * (core/excerpt.c) is kept, as of an answer
		 */
		const char *text = call->errbuf[0] ? call->errbuf : curl_easy_strerror(result);
		MemoryContext old = MemoryContextSwitchTo(call->cxt);

		if (call->destination_refused[0] && !sent)
			call->error = psprintf("destination refused before the call: %s (notif_deliver.endpoint_allow_cidrs does not allow it)",
								   call->destination_refused);
		else
			call->error = notif_excerpt(text, strlen(text), false);
		MemoryContextSwitchTo(old);
	}
	else if (call->outcome != OUTCOME_ACCEPTED && call->answer == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(call->cxt);

		/* never the answer as written: it may echo a key or a number */
		call->error = notif_excerpt(call->response, call->response_len, call->response_cut);
		MemoryContextSwitchTo(old);
	}

	/* what a job's call says of its provider's connections (http/ramp.c) */
	if (call->on_done == NULL && call->http_status != 0)
		notif_ramp_answered(pool, call->http_version, call->ended_at);
	else if (call->on_done == NULL && read_result != CURLE_OK)
		notif_ramp_failed(pool, sent, call->ended_at);

	leave_pool(call, call->ended_at, result != CURLE_OK || resent > 0);
	dlist_delete(&call->node);
	if (call->on_done)
	{
		call->on_done(call);
		return;
	}
	if (call->read_answer)
		call->read_answer(call);
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
	HttpPool   *pool;
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
				pool = notif_pool((int) (evs[i].data.u64 >> 32));
				if (pool->multi == NULL)
				{
					/* its pool closed (none should be left): never spin on it */
					notif_http_socket_drop(fd);
					continue;
				}
				curl_multi_socket_action(pool->multi, fd, flags, &running);
			}
			if (n < (int) lengthof(evs))
				break;
		}
	}
	now = GetCurrentTimestamp();
	for (i = 0; i < notif_pools_count(); i++)
	{
		pool = notif_pool(i);

		if (pool->multi == NULL)
			continue;			/* a spare pool, closed */
		if (pool->timer_at != 0 && now >= pool->timer_at)
		{
			pool->timer_at = 0;
			curl_multi_socket_action(pool->multi, CURL_SOCKET_TIMEOUT, 0, &running);
		}
		collect_done(pool);
	}
	notif_pools_close_unused(now);
}

/* A call whose options could not be set: nothing was sent. */
static bool
not_started(NotifCall *call, CURL *easy, CURLcode rc)
{
	MemoryContext old = MemoryContextSwitchTo(call->cxt);

	notif_http_put_handle(easy, true);
	call->easy = NULL;
	call->error = psprintf("could not start the call: %s", curl_easy_strerror(rc));
	MemoryContextSwitchTo(old);
	return false;
}

/*
 * Start a call whose request is built.  Returns false, with call->error
 * set, when it could not start (nothing was sent).  Never throws: the job
 * is already committed as claimed.
 */
static bool
start(NotifCall *call)
{
	const char *refused;
	CURLcode	rc;
	CURL	   *easy = notif_http_get_handle(&refused, &rc);
	HttpPool   *pool = notif_pool_for(call);

	if (easy == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(call->cxt);

		call->error = refused == NULL ? pstrdup("could not start the call: curl_easy_init failed")
			: psprintf("could not start the call: libcurl refused %s: %s",
					   refused, curl_easy_strerror(rc));
		MemoryContextSwitchTo(old);
		return false;
	}
	call->easy = easy;
	call->errbuf[0] = '\0';
	call->body_sent = 0;
	call->answer_read = 0;
	call->answer_unread = false;

	/* every option that a call may set, for each call: see http/handles.c */
	curl_easy_setopt(easy, CURLOPT_PRIVATE, call);

	/*
	 * The URL parsed once (libcurl then uses it and need not parse the
	 * string), or NULL; set before the string, because libcurl 8 forgets
	 * the string when CURLOPT_CURLU is set (even to NULL): a call without
	 * a parsed URL on a handle whose last call had one would then fail with
	 * "No URL set".  The string is given all the same, so that what libcurl
	 * holds as the transfer's URL is this call's, not the one before.
	 */
	curl_easy_setopt(easy, CURLOPT_CURLU, call->curlu);
	rc = curl_easy_setopt(easy, CURLOPT_URL, call->url);
	if (rc != CURLE_OK)
	{
		/*
		 * Not started: libcurl would fail the transfer before it clears the
		 * last call's answer, which would then be read as this call's.
		 */
		return not_started(call, easy, rc);
	}
	if (pool->max_connections > 0)
	{
		/* HTTP/2 where TLS offers it; wait for a stream, not a new connection */
		curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_2TLS);
		curl_easy_setopt(easy, CURLOPT_PIPEWAIT, 1L);
	}
	else
	{
		curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_1_1);
		curl_easy_setopt(easy, CURLOPT_PIPEWAIT, 0L);
	}
	rc = notif_http_trust(easy, call->ca_cert);
	if (rc != CURLE_OK)
		return not_started(call, easy, rc); /* never the system's CAs instead */
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, call->timeout_ms);
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, call->connect_timeout_ms);
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, call->headers);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, call->errbuf);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, call);

	/*
	 * Without a body byte to fail to rewind, libcurl would re-send an
	 * at_most_once request silently: such requests use a new connection.
	 * So does a call to a customer's endpoint (guard_destination), and it
	 * leaves none behind: its connection was checked when it opened
	 * (sockets.c), one another call opened was not.  It goes through no
	 * proxy either (a proxy would resolve the host itself, unchecked).
	 */
	curl_easy_setopt(easy, CURLOPT_FRESH_CONNECT,
					 (long) ((call->job.delivery == AT_MOST_ONCE && call->body_len == 0) ||
							 call->guard_destination));
	curl_easy_setopt(easy, CURLOPT_FORBID_REUSE, (long) call->guard_destination);
	call->destination_refused[0] = '\0';
	rc = curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, call->guard_destination ? call : NULL);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(easy, CURLOPT_PROXY, call->guard_destination ? "" : NULL);
	if (rc != CURLE_OK)
		return not_started(call, easy, rc); /* never unguarded */

	if (call->body == NULL)
	{
		curl_easy_setopt(easy, CURLOPT_POSTFIELDS, NULL);
		curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);	/* and no longer HEAD */
		curl_easy_setopt(easy, CURLOPT_READDATA, NULL);
		if (call->head)
			curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
	}
	else
	{
		curl_easy_setopt(easy, CURLOPT_NOBODY, 0L);
		curl_easy_setopt(easy, CURLOPT_POST, 1L);
		curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) call->body_len);
		if (call->job.delivery == AT_MOST_ONCE)
		{
			/*
			 * Read through read_cb, and no CURLOPT_SEEKFUNCTION: libcurl
			 * cannot send it twice.  CURLOPT_POSTFIELDS would be used
			 * instead of the callback: it must be unset.
			 */
			curl_easy_setopt(easy, CURLOPT_POSTFIELDS, NULL);
			curl_easy_setopt(easy, CURLOPT_READDATA, call);
		}
		else
		{
			curl_easy_setopt(easy, CURLOPT_POSTFIELDS, call->body);
			curl_easy_setopt(easy, CURLOPT_READDATA, NULL);
		}
	}

	if (call->answer)
		resetStringInfo(call->answer);
	else if (call->on_done || call->read_answer)
	{
		MemoryContext old = MemoryContextSwitchTo(call->cxt);

		call->answer = makeStringInfo();
		MemoryContextSwitchTo(old);
	}

	call->started_at = GetCurrentTimestamp();
	if (curl_multi_add_handle(pool->multi, easy) != CURLM_OK)
	{
		notif_http_put_handle(easy, true);
		call->easy = NULL;
		call->error = "could not start the call: curl_multi_add_handle failed";
		return false;
	}
	call->pool = pool->index;
	notif_pool_enter(pool, call->on_done == NULL);
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
 * Start a transfer that is not a job's call (a token fetch, a lookup): it ends in
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
		leave_pool(call, call->ended_at, true);
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
