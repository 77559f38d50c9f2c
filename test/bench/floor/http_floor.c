/*-------------------------------------------------------------------------
 *
 * http_floor.c
 *      The HTTP floor under notif_deliver's sender (issue 15): a bare
 *      libcurl client, no database, that drives libcurl the way the sender
 *      does (src/http/http.c) and says what the HTTP part of a job costs.
 *
 * The same machinery as the sender: the multi interface driven by
 * curl_multi_socket_action over an epoll set (CURLMOPT_SOCKETFUNCTION and
 * CURLMOPT_TIMERFUNCTION), easy handles reset and reused from a free list,
 * a fixed number of calls in flight over HTTP/1.1 keep-alive connections
 * (CURLMOPT_MAXCONNECTS as many), and per call the options and headers
 * that src/http/http.c start() and src/sender/request.c set for a plain-http json
 * provider: POST with CURLOPT_POSTFIELDS (at_least_once), Content-Type,
 * "Expect:", Idempotency-Key "kind:user_id:order_id", the User-Agent, the
 * timeouts, NOSIGNAL, a write callback keeping the printable start of the
 * body, and after the call the four curl_easy_getinfo of finish_call(),
 * the finished calls read in batches as collect_done() reads them.
 * The header list is built per call with curl_slist_append, as the sender
 * does today; --shared-headers links a per-call Idempotency-Key node in
 * front of one list built once (no allocation per call), to measure that
 * lever.  What the sender does besides (SQL, memory contexts, building the
 * body from jsonb, the latch) is not here: this is the floor under it.
 *
 * More levers, each its own option (http_floor.sh's FLOOR_VARIANTS runs
 * them side by side):
 *   --park          keep an idle connection's socket in the epoll set when
 *                   libcurl unwatches it (CURL_POLL_REMOVE), so that the
 *                   next call on that connection makes no epoll_ctl; see
 *                   the comment at the top of park.c for the rules.
 *   --no-proxy      CURLOPT_PROXY "" and CURLOPT_NOPROXY "" per call:
 *                   libcurl reads no proxy environment variables (5 getenv
 *                   per transfer otherwise: no_proxy, NO_PROXY, http_proxy,
 *                   all_proxy, ALL_PROXY); this changes behaviour for a
 *                   user who relies on http_proxy and friends.
 *   --curlu         the URL parsed once (a CURLU handle, CURLOPT_CURLU)
 *                   instead of CURLOPT_URL's string parsed per call.
 *   --curlu-dup     as --curlu, but each call gets its own copy
 *                   (curl_url_dup), freed when it ends: what a sender
 *                   whose provider settings can change under its calls
 *                   in flight would do.
 *   --no-reset      no curl_easy_reset between calls: the options that are
 *                   the same for every call are set once per handle, only
 *                   the per-call ones (private, URL, headers, body, error
 *                   buffer, write data) per call.
 *   --maxconnects N CURLMOPT_MAXCONNECTS N instead of --inflight (0:
 *                   libcurl's default).
 * Checks of the levers (levers_check.sh): --close-every N sends
 * "Connection: close" on every Nth call (the simulator closes, libcurl
 * closes its socket, a new one often gets the same number); --idle-close,
 * after the calls, terminates the simulator (--sim-pid) while every
 * connection is parked and waits until each parked socket's end-of-file
 * event has taken it out of the epoll set (exit 3 if that takes more than
 * 1,000 turns of the loop or 5 s: a spinning loop); --alt-url URL sends
 * every other call (the even keys) there instead, to check that a handle
 * reused without a reset (or with a CURLU) goes where its call says.  With
 * --park the client also checks at exit that every socket opened through
 * the open callback was closed through the close callback (exit 3 if not).
 * Measurement helpers are in measure.c.
 *
 *   http_floor [--url URL] [--calls N] [--inflight N] [--warmup N]
 *              [--sim-pid PID] [--perf-ctl CTL,ACK]... [--shared-headers]
 *              [--park] [--no-proxy] [--no-reset] [--curlu] [--curlu-dup] [--maxconnects N]
 *              [--close-every N] [--idle-close] [--alt-url URL]
 *
 * It completes --warmup calls first (default: --inflight, so that every
 * connection is open), then measures --calls calls with --inflight always
 * in flight, then lets the rest finish unmeasured.  It prints one line of
 * "name value" pairs: calls, seconds, calls_per_s, user_per_1k,
 * sys_per_1k, cpu_per_1k (its own CPU seconds per 1,000 calls, getrusage),
 * csw_per_call (its context switches), and with --sim-pid the simulator's
 * CPU per 1,000 calls over the same window (sim_cpu_per_1k, from
 * /proc/PID/task/N/schedstat; sim_user_per_1k and sim_sys_per_1k from
 * /proc/PID/stat, in clock ticks).  Each --perf-ctl names the control and
 * ack fifos of a `perf stat --delay=-1 --control fifo:CTL,ACK`: the
 * window's start writes "enable" to each, its end "disable", so that perf
 * counts the measured calls only.  With --park the line also has
 * sockets_opened and sockets_closed_so_far (through the callbacks, before
 * curl_multi_cleanup) and parked_events (events on a parked socket: taken out of the
 * epoll set).  Exits 1 if a call did not get a 2xx.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "measure.h"
#include "park.h"

#define MAX_INFLIGHT 4096
#define MAX_PERF 4
/* what notif_build_request sends for {"to":"+84900000000","text":"hello"} */
#define BODY "{\"to\": \"+84900000000\", \"text\": \"hello\"}"

typedef struct Call
{
	CURL	   *easy;
	struct curl_slist *headers; /* per call: curl_slist_append */
	struct curl_slist key_node; /* --shared-headers: in front of the list */
	CURLU	   *curlu;			/* --curlu-dup: this call's copy */
	char		key_header[96];
	char		response[256];	/* the start of the body, as the sender keeps */
	size_t		response_len;
	char		errbuf[CURL_ERROR_SIZE];
	struct Call *next_free;
} Call;

static const char *url = "http://127.0.0.1:26451/send";
static long n_calls = 30000;
static int	n_inflight_max = 512;
static long n_warmup = -1;
static int	sim_pid = 0;
static bool shared_headers = false;
static bool park = false;
static bool no_proxy = false;
static bool no_reset = false;
static bool use_curlu = false;
static bool curlu_dup = false;
static const char *alt_url = NULL;
static CURLU *curlu;
static CURLU *alt_curlu;
static long maxconnects = -1;	/* -1: --inflight */
static long close_every = 0;
static bool idle_close = false;
static int	n_perf = 0;
static int	perf_ctl[MAX_PERF];
static int	perf_ack[MAX_PERF];

static CURLM *multi;
static int	epfd;
static double timer_at = -1;	/* monotonic seconds; -1: no timer */
static Call calls[MAX_INFLIGHT];
static Call *free_calls;
static CURL *idle_handles[MAX_INFLIGHT];
static int	n_idle = 0;
static struct curl_slist *provider_headers; /* --shared-headers */
static long started = 0;
static long done = 0;
static long failed = 0;
static int	inflight = 0;

static void
die(const char *what)
{
	fprintf(stderr, "http_floor: %s\n", what);
	exit(2);
}

static int
socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	struct epoll_event ev = {0};

	(void) easy;
	(void) userp;
	if (what == CURL_POLL_REMOVE)
	{
		if (socketp)
			(void) epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
		curl_multi_assign(multi, fd, NULL);
		return 0;
	}
	ev.data.fd = fd;
	if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
		ev.events |= EPOLLIN;
	if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
		ev.events |= EPOLLOUT;
	if (epoll_ctl(epfd, socketp ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0 &&
		!(errno == ENOENT && epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0) &&
		!(errno == EEXIST && epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) == 0))
		die("epoll_ctl failed");
	curl_multi_assign(multi, fd, (void *) 1);
	return 0;
}

static int
timer_cb(CURLM *m, long timeout_ms, void *userp)
{
	(void) m;
	(void) userp;
	timer_at = timeout_ms < 0 ? -1 : now_s() + timeout_ms / 1000.0;
	return 0;
}

/* the printable start of the body, as src/http/http.c write_cb keeps it */
static size_t
write_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	Call	   *call = userdata;
	size_t		n = size * nmemb;
	size_t		room = sizeof(call->response) - 1 - call->response_len;
	size_t		i;

	for (i = 0; i < n && room > 0; i++, room--)
	{
		unsigned char c = (unsigned char) ptr[i];

		call->response[call->response_len++] = (c >= 0x20 && c < 0x7f) ? (char) c : '?';
	}
	call->response[call->response_len] = '\0';
	return n;
}

static void
start_call(void)
{
	Call	   *call = free_calls;
	CURL	   *easy;

	bool		fresh = n_idle == 0 || !no_reset;

	if (n_idle > 0)
		easy = idle_handles[--n_idle];
	else
		easy = curl_easy_init();
	if (easy == NULL)
		die("curl_easy_init failed");
	free_calls = call->next_free;
	call->easy = easy;
	call->errbuf[0] = '\0';
	call->response_len = 0;
	/* the key of job "started" of user "started", order "o", type bench */
	snprintf(call->key_header, sizeof(call->key_header),
			 "Idempotency-Key: bench:%ld:o", started + 1);
	if (shared_headers)
	{
		call->key_node.data = call->key_header;
		call->key_node.next = provider_headers;
		call->headers = &call->key_node;
	}
	else
	{
		struct curl_slist *h = NULL;

		h = curl_slist_append(h, "Content-Type: application/json");
		h = curl_slist_append(h, "Expect:");
		h = curl_slist_append(h, call->key_header);
		if (close_every > 0 && (started + 1) % close_every == 0)
			h = curl_slist_append(h, "Connection: close");
		if (h == NULL)
			die("out of memory");
		call->headers = h;
	}

	/* what every call sets alike: per call, or once per handle (--no-reset) */
	if (fresh)
	{
		curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
		curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_1_1);
		curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 1L);
		curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 2L);
		curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, 5000L);
		curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
		curl_easy_setopt(easy, CURLOPT_USERAGENT, "notif_deliver/1.2");
		curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, write_cb);
		curl_easy_setopt(easy, CURLOPT_POST, 1L);
		if (no_proxy)
		{
			curl_easy_setopt(easy, CURLOPT_PROXY, "");
			curl_easy_setopt(easy, CURLOPT_NOPROXY, "");
		}
		/* easy-handle options: curl_easy_reset clears them */
		if (park)
			park_set_callbacks(easy);
	}
	/* what differs per call */
	curl_easy_setopt(easy, CURLOPT_PRIVATE, call);
	if (alt_url && started % 2 == 1)
	{
		if (use_curlu)
			curl_easy_setopt(easy, CURLOPT_CURLU, alt_curlu);
		else
			curl_easy_setopt(easy, CURLOPT_URL, alt_url);
	}
	else if (use_curlu && curlu_dup)
	{
		if ((call->curlu = curl_url_dup(curlu)) == NULL)
			die("curl_url_dup failed");
		curl_easy_setopt(easy, CURLOPT_CURLU, call->curlu);
	}
	else if (use_curlu)
		curl_easy_setopt(easy, CURLOPT_CURLU, curlu);
	else
		curl_easy_setopt(easy, CURLOPT_URL, url);
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, call->headers);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, call->errbuf);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, call);
	curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) strlen(BODY));
	curl_easy_setopt(easy, CURLOPT_POSTFIELDS, BODY);
	if (curl_multi_add_handle(multi, easy) != CURLM_OK)
		die("curl_multi_add_handle failed");
	started++;
	inflight++;
}

/* a finished call: read it as src/http/http.c finish_call() does, free its handle */
static void
finish_call(CURL *easy, CURLcode result)
{
	Call	   *call;
	long		status = 0;
	long		request_size = 0;
	long		version = 0;
	curl_off_t	retry_after = 0;

	curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **) &call);
	curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(easy, CURLINFO_REQUEST_SIZE, &request_size);
	curl_easy_getinfo(easy, CURLINFO_RETRY_AFTER, &retry_after);
	curl_easy_getinfo(easy, CURLINFO_HTTP_VERSION, &version);
	if (result != CURLE_OK || status < 200 || status > 299)
	{
		if (failed++ < 5)
			fprintf(stderr, "http_floor: call failed: %s (HTTP %ld) %s\n",
					call->errbuf[0] ? call->errbuf : curl_easy_strerror(result),
					status, call->response);
	}
	curl_multi_remove_handle(multi, easy);
	if (!no_reset)
		curl_easy_reset(easy);
	idle_handles[n_idle++] = easy;
	if (!shared_headers)
		curl_slist_free_all(call->headers);
	if (call->curlu)
		curl_url_cleanup(call->curlu);
	call->curlu = NULL;
	call->headers = NULL;
	call->next_free = free_calls;
	free_calls = call;
	inflight--;
	done++;
}

/*
 * The finished calls, as src/http/http.c collect_done() reads them: a batch of
 * messages first, then their handles removed (curl_multi_remove_handle
 * walks the messages not yet read).
 */
static void
collect_done(void)
{
	struct
	{
		CURL	   *easy;
		CURLcode	result;
	}			batch[256];
	CURLMsg    *msg;
	int			left;
	int			n,
				i;

	do
	{
		n = 0;
		while (n < (int) (sizeof(batch) / sizeof(batch[0])) &&
			   (msg = curl_multi_info_read(multi, &left)) != NULL)
		{
			if (msg->msg != CURLMSG_DONE)
				continue;
			batch[n].easy = msg->easy_handle;
			batch[n].result = msg->data.result;
			n++;
		}
		for (i = 0; i < n; i++)
			finish_call(batch[i].easy, batch[i].result);
	} while (n == (int) (sizeof(batch) / sizeof(batch[0])));
}

/* one turn of the loop: wait for sockets or the timer, let libcurl work */
static void
drive(void)
{
	struct epoll_event evs[64];
	int			running;
	int			timeout = -1;
	int			n,
				i;

	if (timer_at >= 0)
	{
		double		left = timer_at - now_s();

		timeout = left <= 0 ? 0 : (int) (left * 1000 + 0.999);
	}
	n = epoll_wait(epfd, evs, 64, timeout);
	if (n < 0 && errno != EINTR)
		die("epoll_wait failed");
	for (i = 0; i < n; i++)
	{
		int			flags = 0;

		/* a parked socket's event: out of the set, not libcurl's business */
		if (park && park_event_is_stray(evs[i].data.fd))
			continue;
		if (evs[i].events & (EPOLLIN | EPOLLHUP))
			flags |= CURL_CSELECT_IN;
		if (evs[i].events & EPOLLOUT)
			flags |= CURL_CSELECT_OUT;
		if (evs[i].events & EPOLLERR)
			flags |= CURL_CSELECT_ERR;
		curl_multi_socket_action(multi, evs[i].data.fd, flags, &running);
	}
	if (timer_at >= 0 && now_s() >= timer_at)
	{
		timer_at = -1;
		curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running);
	}
	collect_done();
}

static void
parse_options(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"url", required_argument, NULL, 'u'},
		{"calls", required_argument, NULL, 'n'},
		{"inflight", required_argument, NULL, 'i'},
		{"warmup", required_argument, NULL, 'w'},
		{"sim-pid", required_argument, NULL, 's'},
		{"perf-ctl", required_argument, NULL, 'p'},
		{"shared-headers", no_argument, NULL, 'H'},
		{"park", no_argument, NULL, 'P'},
		{"no-proxy", no_argument, NULL, 'X'},
		{"no-reset", no_argument, NULL, 'R'},
		{"curlu", no_argument, NULL, 'U'},
		{"curlu-dup", no_argument, NULL, 'D'},
		{"alt-url", required_argument, NULL, 'a'},
		{"maxconnects", required_argument, NULL, 'm'},
		{"close-every", required_argument, NULL, 'c'},
		{"idle-close", no_argument, NULL, 'I'},
		{NULL, 0, NULL, 0}
	};
	int			ch;
	char	   *comma;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1)
	{
		switch (ch)
		{
			case 'u':
				url = optarg;
				break;
			case 'n':
				n_calls = atol(optarg);
				break;
			case 'i':
				n_inflight_max = atoi(optarg);
				break;
			case 'w':
				n_warmup = atol(optarg);
				break;
			case 's':
				sim_pid = atoi(optarg);
				break;
			case 'p':
				if (n_perf == MAX_PERF || (comma = strchr(optarg, ',')) == NULL)
					die("--perf-ctl CTL,ACK (at most 4)");
				*comma = '\0';
				if ((perf_ctl[n_perf] = open(optarg, O_WRONLY)) < 0 ||
					(perf_ack[n_perf] = open(comma + 1, O_RDONLY)) < 0)
					die("cannot open the perf control fifos");
				n_perf++;
				break;
			case 'H':
				shared_headers = true;
				break;
			case 'P':
				park = true;
				break;
			case 'X':
				no_proxy = true;
				break;
			case 'R':
				no_reset = true;
				break;
			case 'U':
				use_curlu = true;
				break;
			case 'D':
				use_curlu = curlu_dup = true;
				break;
			case 'a':
				alt_url = optarg;
				break;
			case 'm':
				maxconnects = atol(optarg);
				break;
			case 'c':
				close_every = atol(optarg);
				break;
			case 'I':
				idle_close = true;
				break;
			default:
				die("usage: http_floor [--url URL] [--calls N] [--inflight N] [--warmup N]"
					" [--sim-pid PID] [--perf-ctl CTL,ACK]... [--shared-headers]"
					" [--park] [--no-proxy] [--no-reset] [--curlu] [--curlu-dup] [--maxconnects N]"
					" [--close-every N] [--idle-close] [--alt-url URL]");
		}
	}
	if (n_calls < 1 || n_inflight_max < 1 || n_inflight_max > MAX_INFLIGHT || optind < argc)
		die("--calls at least 1, --inflight 1 to 4096");
	if (n_warmup < 0)
		n_warmup = n_inflight_max;
	if (maxconnects < 0)
		maxconnects = n_inflight_max;
	if (idle_close && (!park || sim_pid == 0))
		die("--idle-close needs --park and --sim-pid");
}

/*
 * --idle-close: every connection is parked now; terminate the simulator
 * and wait until each parked socket's end-of-file has taken it out of the
 * epoll set.  A loop that handed those events to libcurl without taking
 * the sockets out would spin here (level-triggered): exit 3 then.
 */
static void
check_idle_close(void)
{
	int			parked = park_parked_count();
	int			turns = 0;
	double		until = now_s() + 5;

	if (kill(sim_pid, SIGTERM) != 0)
		die("cannot terminate the simulator");
	while (park_parked_count() > 0 && turns < 1000 && now_s() < until)
	{
		drive();
		turns++;
	}
	fprintf(stderr, "http_floor: --idle-close: %d parked sockets, %d left after %d turns of the loop,"
			" %ld events on parked sockets\n", parked, park_parked_count(), turns, park_events);
	if (parked == 0 || park_parked_count() > 0)
		exit(3);
}

int
main(int argc, char **argv)
{
	Sample		s0,
				s1;
	double		secs;
	double		k;
	int			i;

	parse_options(argc, argv);
	if (curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK)
		die("curl_global_init failed");
	if ((epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 || (multi = curl_multi_init()) == NULL)
		die("epoll_create1 or curl_multi_init failed");
	curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, park ? park_socket_cb : socket_cb);
	curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, timer_cb);
	curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, maxconnects);
	park_init(epfd);
	if (use_curlu &&
		((curlu = curl_url()) == NULL || curl_url_set(curlu, CURLUPART_URL, url, 0) != CURLUE_OK))
		die("curl_url_set failed");
	if (use_curlu && alt_url &&
		((alt_curlu = curl_url()) == NULL ||
		 curl_url_set(alt_curlu, CURLUPART_URL, alt_url, 0) != CURLUE_OK))
		die("curl_url_set failed");
	provider_headers = curl_slist_append(NULL, "Content-Type: application/json");
	provider_headers = curl_slist_append(provider_headers, "Expect:");
	for (i = n_inflight_max - 1; i >= 0; i--)
	{
		calls[i].next_free = free_calls;
		free_calls = &calls[i];
	}

	/* warm-up, then the measured window with the same calls in flight */
	while (done < n_warmup)
	{
		while (inflight < n_inflight_max && started < n_warmup + n_calls)
			start_call();
		drive();
	}
	perf_command("enable\n", n_perf, perf_ctl, perf_ack);
	sample(&s0, sim_pid);
	while (done < n_warmup + n_calls)
	{
		while (inflight < n_inflight_max && started < n_warmup + n_calls + n_inflight_max)
			start_call();
		drive();
	}
	sample(&s1, sim_pid);
	perf_command("disable\n", n_perf, perf_ctl, perf_ack);
	while (inflight > 0)
		drive();
	if (idle_close)
		check_idle_close();

	secs = s1.at - s0.at;
	k = 1000.0 / n_calls;
	printf("calls %ld seconds %.3f calls_per_s %.0f user_per_1k %.4f sys_per_1k %.4f cpu_per_1k %.4f"
		   " csw_per_call %.3f",
		   n_calls, secs, n_calls / secs,
		   (tv(s1.ru.ru_utime) - tv(s0.ru.ru_utime)) * k,
		   (tv(s1.ru.ru_stime) - tv(s0.ru.ru_stime)) * k,
		   (tv(s1.ru.ru_utime) - tv(s0.ru.ru_utime) + tv(s1.ru.ru_stime) - tv(s0.ru.ru_stime)) * k,
		   (double) (s1.ru.ru_nvcsw - s0.ru.ru_nvcsw + s1.ru.ru_nivcsw - s0.ru.ru_nivcsw) / n_calls);
	if (park)
		printf(" sockets_opened %ld sockets_closed_so_far %ld parked_events %ld",
			   park_opened, park_closed, park_events);
	if (sim_pid)
		printf(" sim_cpu_per_1k %.4f sim_user_per_1k %.4f sim_sys_per_1k %.4f",
			   (s1.sim_cpu - s0.sim_cpu) * k, (s1.sim_user - s0.sim_user) * k,
			   (s1.sim_sys - s0.sim_sys) * k);
	printf(" failed %ld\n", failed);

	while (n_idle > 0)
		curl_easy_cleanup(idle_handles[--n_idle]);
	curl_multi_cleanup(multi);
	if (curlu)
		curl_url_cleanup(curlu);
	if (alt_curlu)
		curl_url_cleanup(alt_curlu);
	curl_slist_free_all(provider_headers);
	curl_global_cleanup();
	close(epfd);
	if (failed > 0)
		return 1;
	return park ? park_check_all_closed() : 0;
}
