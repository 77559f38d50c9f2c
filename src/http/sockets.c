/*-------------------------------------------------------------------------
 *
 * http/sockets.c
 *      Which sockets the sender's epoll set watches: libcurl's socket
 *      callback, with the sockets of idle keep-alive connections "parked".
 *
 * libcurl stops watching a connection's socket (CURL_POLL_REMOVE) when its
 * call ends and the connection goes back to its cache, and watches it
 * again (CURL_POLL_IN) when the next call takes the connection: two
 * epoll_ctl per call, for nothing.  So a socket that libcurl opened through
 * our open callback stays in the epoll set when libcurl lets go of it, and
 * a table indexed by the socket number remembers what is registered; a
 * request for the events already registered costs no system call.
 *
 * The rules that keep this right:
 *  - Only sockets opened through sock_open (a connection's) are parked.
 *    Any other (libcurl's resolver socketpair, closed without our close
 *    callback) leaves the set on CURL_POLL_REMOVE, as it always did.
 *  - libcurl closes every socket it opened through the open callback
 *    through the close callback (it keeps both with the connection, so
 *    also when its connection cache or curl_multi_cleanup closes it):
 *    sock_close takes the socket out of the set and forgets it, so that a
 *    new socket with the same number starts afresh.  sock_open starts a
 *    number afresh too.
 *  - A parked socket is registered for input only (park_for_input).
 *  - An event on a parked socket (the server closed the idle connection,
 *    or sent something unasked) is not for libcurl, which does not watch
 *    it and would leave it pending: notif_http_socket_stray takes the
 *    socket out of the set, and the loop does not pass the event on.
 *    libcurl finds the connection dead itself, when a call would reuse it.
 *  - Other sockets are not cached either: each change is its epoll_ctl.
 *  - No callback throws: a socket the table cannot hold (its memory could
 *    not grow) is simply never parked.
 *
 * An event's data is the pool's index and the socket (no pointer that
 * could dangle); the index comes as the callback's userp.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/epoll.h>
#include <sys/resource.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "utils/memutils.h"

#include "core/endpoint_rules.h"
#include "core/shared.h"
#include "http/http.h"

/* files beyond max_inflight: PostgreSQL's own, libcurl's, the lookups' */
#define FD_HEADROOM 64

typedef struct SockState
{
	bool		ours;			/* opened through sock_open */
	bool		watched;		/* libcurl watches it */
	uint32		events;			/* registered in the epoll set; 0: not */
	uint64		data;			/* its event's data, while registered */
} SockState;

static int	sockets_epfd = -1;
static SockState *socks = NULL;
static int	n_socks = 0;

/*
 * A call over HTTP/1.1 holds a connection, a file descriptor, of its own,
 * and a lane may have notif_deliver.max_inflight calls in flight: more
 * than the soft limit of 1,024 open files that systemd gives a service by
 * default.  The sender raises its own soft limit to the hard one (as
 * servers that hold many connections do; the postmaster's is unchanged,
 * and PostgreSQL's own files stay within max_files_per_process), and says
 * once when even that is short of max_inflight and some headroom.
 */
static void
raise_fd_limit(void)
{
	struct rlimit rl;
	rlim_t		wanted = (rlim_t) notif_max_inflight + FD_HEADROOM;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	if (rl.rlim_cur < rl.rlim_max)
	{
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0 && getrlimit(RLIMIT_NOFILE, &rl) != 0)
			return;
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < wanted)
		ereport(WARNING,
				(errmsg("notif_deliver: this sender may open %lu files, fewer than the %lu that notif_deliver.max_inflight = %d may need",
						(unsigned long) rl.rlim_cur, (unsigned long) wanted, notif_max_inflight),
				 errdetail("Each call to a provider that answers over HTTP/1.1 holds a connection; calls beyond the limit fail to connect and are made again later."),
				 errhint("Raise the server's hard limit on open files (LimitNOFILE in its systemd unit, or ulimit -Hn), or lower notif_deliver.max_inflight.")));
}

void
notif_http_sockets_init(int epfd)
{
	sockets_epfd = epfd;
	raise_fd_limit();
}

/* fd's entry, the table grown to hold it if need be; NULL if it cannot */
static SockState *
state_of(curl_socket_t fd, bool grow)
{
	if (fd < 0)
		return NULL;
	if (fd >= n_socks)
	{
		int			n = Max(1024, n_socks);
		SockState  *more;

		if (!grow)
			return NULL;
		while (n <= fd)
			n *= 2;
		more = MemoryContextAllocExtended(TopMemoryContext, n * sizeof(SockState),
										  MCXT_ALLOC_NO_OOM | MCXT_ALLOC_ZERO);
		if (more == NULL)
			return NULL;
		if (socks)
		{
			memcpy(more, socks, n_socks * sizeof(SockState));
			pfree(socks);
		}
		socks = more;
		n_socks = n;
	}
	return &socks[fd];
}

static void
unregister(curl_socket_t fd, SockState *st)
{
	if (st->events != 0)
		(void) epoll_ctl(sockets_epfd, EPOLL_CTL_DEL, fd, NULL);
	st->events = 0;
}

/*
 * A socket parks watching for input only: the server's close, or anything
 * it sends unasked.  libcurl may let go of a socket still registered for
 * output (libcurl 8.14 does, now and then, when a call ends): a connected
 * socket is always writable, so that registration would report it at once,
 * as a stray, and take it out of the set for good.
 */
static void
park_for_input(curl_socket_t fd, SockState *st)
{
	struct epoll_event ev = {0};

	ev.events = EPOLLIN;
	ev.data.u64 = st->data;
	if (epoll_ctl(sockets_epfd, EPOLL_CTL_MOD, fd, &ev) == 0)
		st->events = EPOLLIN;
	else
		unregister(fd, st);
}

/*
 * CURLOPT_OPENSOCKETFUNCTION: the socket libcurl would make, remembered.
 *
 * For a call whose destination is guarded (a customer's endpoint: clientp
 * is the call, http.c), libcurl hands over here the very address it is
 * about to connect to, after its DNS lookup: one that
 * core/endpoint_rules.c refuses gets no socket, so libcurl never connects
 * to it (it tries the next address of the name, if any, and fails with
 * "could not connect" when none is left); the call says why.  No second
 * lookup can come between this check and the connection.
 */
static curl_socket_t
sock_open(void *clientp, curlsocktype purpose, struct curl_sockaddr *addr)
{
	NotifCall  *call = (NotifCall *) clientp;
	int			fd;
	SockState  *st;

	if (call != NULL && call->guard_destination)
	{
		const char *why = purpose != CURLSOCKTYPE_IPCXN ? "not a connection" :
			notif_endpoint_address_refused(&addr->addr);

		if (why != NULL)
		{
			char		host[INET6_ADDRSTRLEN] = "?";

			if (addr->family == AF_INET)
				inet_ntop(AF_INET, &((struct sockaddr_in *) &addr->addr)->sin_addr, host, sizeof(host));
			else if (addr->family == AF_INET6)
				inet_ntop(AF_INET6, &((struct sockaddr_in6 *) &addr->addr)->sin6_addr, host, sizeof(host));
			snprintf(call->destination_refused, sizeof(call->destination_refused),
					 "%s is %s", host, why);
			return CURL_SOCKET_BAD;
		}
	}
	fd = socket(addr->family, addr->socktype, addr->protocol);
	if (fd < 0)
		return CURL_SOCKET_BAD;
	st = state_of(fd, true);
	if (st)
	{
		/* the number may be a reused one: its registration went with its close */
		st->ours = true;
		st->watched = false;
		st->events = 0;
	}
	return fd;
}

/* CURLOPT_CLOSESOCKETFUNCTION: out of the epoll set, forgotten, closed */
static int
sock_close(void *clientp, curl_socket_t fd)
{
	SockState  *st = state_of(fd, false);

	if (st)
	{
		unregister(fd, st);
		st->ours = false;
		st->watched = false;
	}
	return close(fd);
}

/* Out of the epoll set, whatever it was (a socket whose pool is gone). */
void
notif_http_socket_drop(curl_socket_t fd)
{
	SockState  *st = state_of(fd, false);

	if (st && st->events != 0)
		unregister(fd, st);
	else
		(void) epoll_ctl(sockets_epfd, EPOLL_CTL_DEL, fd, NULL);
	if (st)
		st->watched = false;
}

/* For every easy handle, once (handles.c's handle_defaults): libcurl's answer */
CURLcode
notif_http_socket_callbacks(CURL *easy)
{
	CURLcode	rc = curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, sock_open);

	if (rc == CURLE_OK)
		rc = curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, sock_close);
	return rc;
}

/* CURLMOPT_SOCKETFUNCTION: libcurl tells which sockets to watch */
int
notif_http_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	SockState  *st = state_of(fd, false);
	struct epoll_event ev = {0};

	if (st && !st->ours)
		st = NULL;				/* not a connection's: never parked, not cached */
	if (what == CURL_POLL_REMOVE)
	{
		if (st == NULL)
			(void) epoll_ctl(sockets_epfd, EPOLL_CTL_DEL, fd, NULL);
		else
		{
			st->watched = false;	/* parked: it stays registered */
			if (st->events & EPOLLOUT)
				park_for_input(fd, st);
		}
		return 0;
	}
	if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
		ev.events |= EPOLLIN;
	if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
		ev.events |= EPOLLOUT;
	ev.data.u64 = ((uint64) (uintptr_t) userp << 32) | (uint32) fd;
	if (st)
	{
		st->watched = true;
		if (st->events == ev.events)
			return 0;			/* registered so already: no system call */
	}
	if (epoll_ctl(sockets_epfd, (st && st->events == 0) ? EPOLL_CTL_ADD : EPOLL_CTL_MOD,
				  fd, &ev) != 0 &&
		!(errno == ENOENT && epoll_ctl(sockets_epfd, EPOLL_CTL_ADD, fd, &ev) == 0) &&
		!(errno == EEXIST && epoll_ctl(sockets_epfd, EPOLL_CTL_MOD, fd, &ev) == 0))
	{
		elog(WARNING, "notif_deliver: epoll_ctl on fd %d failed: %m", (int) fd);
		return 0;
	}
	if (st)
	{
		st->events = ev.events;
		st->data = ev.data.u64;
	}
	return 0;
}

/*
 * An event came for fd: true when it is parked (libcurl does not watch
 * it).  It is then out of the epoll set, and the event must not go to
 * libcurl.
 */
bool
notif_http_socket_stray(curl_socket_t fd)
{
	SockState  *st = state_of(fd, false);

	if (st == NULL || !st->ours || st->watched)
		return false;
	unregister(fd, st);
	return true;
}
