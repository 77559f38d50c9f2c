/*-------------------------------------------------------------------------
 *
 * park.c
 *      http_floor's --park (issue 15): the socket callback keeps an idle
 *      keep-alive connection's socket in the epoll set when libcurl stops
 *      watching it, so that the next call on that connection costs no
 *      epoll_ctl.  Written as the design to port to src/http/http.c.
 *
 * libcurl says CURL_POLL_REMOVE for a connection's socket when its
 * transfer ends (the connection goes back to the cache) and asks for
 * CURL_POLL_IN again when the next transfer takes the connection: two
 * epoll_ctl per call.  Here a table indexed by the socket number remembers
 * per socket whether we opened it (the open callback), whether libcurl
 * watches it, and which events are registered in the epoll set (0: not
 * registered).  The rules:
 *
 *  - REMOVE on a socket opened through our open callback: it stays
 *    registered ("parked"), libcurl no longer watches it.  REMOVE on any
 *    other socket (libcurl's resolver socketpair, for a host name, which
 *    libcurl closes without the close callback): EPOLL_CTL_DEL as before.
 *  - IN/OUT/INOUT: no system call when those events are already
 *    registered; EPOLL_CTL_MOD when others are, EPOLL_CTL_ADD when none
 *    (with the old fallbacks: ENOENT retries ADD, EEXIST retries MOD).
 *  - An event on a parked socket (libcurl does not watch it: typically the
 *    server closed the idle connection, or sent something unasked): the
 *    loop takes it out of the epoll set (DEL, marked unregistered) and does
 *    not hand it to libcurl, which would ignore it (an unknown socket) and
 *    leave a level-triggered event that wakes every wait: a spin.  libcurl
 *    finds out the connection is dead itself, by its liveness check when
 *    the next transfer would reuse it, exactly as without parking.
 *  - The open callback creates the socket as libcurl would
 *    (socket(family, socktype, protocol), CURL_SOCKET_BAD on failure) and
 *    starts its table entry afresh: a socket number can be a reused one.
 *  - The close callback takes the socket out of the epoll set if it is
 *    registered (close would too, unless the descriptor were duplicated),
 *    clears its entry and closes it.  libcurl keeps the close callback with
 *    the connection (url.c allocate_conn copies it from the easy handle
 *    that opened the connection) and calls it for every close of a socket
 *    it opened through the open callback (cf-socket.c socket_close, called
 *    by cf_socket_close), also for connections closed by the connection
 *    cache's closure handle (conncache.c
 *    Curl_conncache_close_all_connections, curl_multi_cleanup) or evicted
 *    from the cache (Curl_disconnect).  Before it, libcurl says
 *    CURL_POLL_REMOVE for a socket it still watches (multi.c
 *    Curl_multi_closed), which parks it until the close callback.
 *
 * Both callbacks are easy-handle options: curl_easy_reset clears them, so
 * they are set with every call's options.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE

#include "park.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* sockets numbered from MAX_FDS on are never parked (plain DEL on REMOVE) */
#define MAX_FDS 65536

typedef struct FdState
{
	bool		ours;			/* opened through the open callback */
	bool		watched;		/* libcurl watches it (IN/OUT/INOUT) */
	uint32_t	events;			/* registered in the epoll set; 0: not */
} FdState;

long		park_opened = 0;
long		park_closed = 0;
long		park_events = 0;

static int	park_epfd = -1;
static FdState fds[MAX_FDS];

void
park_init(int epfd)
{
	park_epfd = epfd;
}

static void
unregister(int fd, FdState *st)
{
	if (st->events != 0)
		(void) epoll_ctl(park_epfd, EPOLL_CTL_DEL, fd, NULL);
	st->events = 0;
}

/* CURLOPT_OPENSOCKETFUNCTION: what libcurl would do, and remember it */
static curl_socket_t
open_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *addr)
{
	int			fd = socket(addr->family, addr->socktype, addr->protocol);

	(void) clientp;
	(void) purpose;
	if (fd < 0)
		return CURL_SOCKET_BAD;
	park_opened++;
	if (fd < MAX_FDS)
	{
		/* a reused number: its old registration went with its close */
		fds[fd].ours = true;
		fds[fd].watched = false;
		fds[fd].events = 0;
	}
	return fd;
}

/* CURLOPT_CLOSESOCKETFUNCTION: out of the epoll set, forget it, close it */
static int
close_cb(void *clientp, curl_socket_t fd)
{
	(void) clientp;
	park_closed++;
	if (fd >= 0 && fd < MAX_FDS)
	{
		unregister(fd, &fds[fd]);
		fds[fd].ours = false;
		fds[fd].watched = false;
	}
	return close(fd);
}

void
park_set_callbacks(CURL *easy)
{
	curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, open_cb);
	curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, close_cb);
}

/* epoll_ctl, with the old fallbacks (ENOENT retries ADD, EEXIST MOD) */
static void
watch(int fd, int op, uint32_t events)
{
	struct epoll_event ev = {0};

	ev.events = events;
	ev.data.fd = fd;
	if (epoll_ctl(park_epfd, op, fd, &ev) != 0 &&
		!(errno == ENOENT && epoll_ctl(park_epfd, EPOLL_CTL_ADD, fd, &ev) == 0) &&
		!(errno == EEXIST && epoll_ctl(park_epfd, EPOLL_CTL_MOD, fd, &ev) == 0))
	{
		fprintf(stderr, "http_floor: epoll_ctl failed\n");
		exit(2);
	}
}

/* CURLMOPT_SOCKETFUNCTION with parking (the table replaces socketp) */
int
park_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	FdState    *st;
	uint32_t	events = 0;

	(void) easy;
	(void) userp;
	(void) socketp;
	if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
		events |= EPOLLIN;
	if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
		events |= EPOLLOUT;
	if (fd < 0 || fd >= MAX_FDS)
	{
		/* outside the table: never parked */
		if (what == CURL_POLL_REMOVE)
			(void) epoll_ctl(park_epfd, EPOLL_CTL_DEL, fd, NULL);
		else
			watch(fd, EPOLL_CTL_MOD, events);
		return 0;
	}
	st = &fds[fd];
	if (what == CURL_POLL_REMOVE)
	{
		st->watched = false;
		/* ours: stays registered (parked); else out, as without parking */
		if (!st->ours)
			unregister(fd, st);
		return 0;
	}
	st->watched = true;
	if (st->events == events)
		return 0;
	watch(fd, st->events != 0 ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, events);
	st->events = events;
	return 0;
}

/*
 * An event from epoll_wait on socket fd: true if it is parked (ours,
 * libcurl does not watch it).  Then it is out of the epoll set now and the
 * event must not go to libcurl.
 */
bool
park_event_is_stray(int fd)
{
	FdState    *st;

	if (fd < 0 || fd >= MAX_FDS)
		return false;
	st = &fds[fd];
	if (!st->ours || st->watched)
		return false;
	park_events++;
	unregister(fd, st);
	return true;
}

/* how many sockets are parked now */
int
park_parked_count(void)
{
	int			n = 0;
	int			fd;

	for (fd = 0; fd < MAX_FDS; fd++)
		if (fds[fd].ours && !fds[fd].watched && fds[fd].events != 0)
			n++;
	return n;
}

/* after curl_multi_cleanup: 0 if every socket we opened was closed by us */
int
park_check_all_closed(void)
{
	int			fd;
	int			left = 0;

	for (fd = 0; fd < MAX_FDS; fd++)
		if (fds[fd].ours)
			left++;
	if (left > 0 || park_opened != park_closed)
	{
		fprintf(stderr, "http_floor: %ld sockets opened through the open callback, %ld closed"
				" through the close callback, %d still known\n",
				park_opened, park_closed, left);
		return 3;
	}
	return 0;
}
