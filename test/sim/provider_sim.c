/*-------------------------------------------------------------------------
 *
 * provider_sim.c
 *      A fault-injecting HTTP/1.1 SMS/push provider simulator.
 *
 * It is the far end of notif_deliver's libcurl delivery path in the TAP
 * tests, the benchmarks and the demo.  It answers like a provider would,
 * injects faults (held requests that time out, connection resets, 4xx,
 * 429 and 5xx answers, 301/302/307 redirects) at configurable rates or on
 * request through X-Sim-* headers, and keeps a ledger of what it received
 * and what it "delivered" (acted upon) per idempotency key, read at GET
 * /ledger.
 *
 * Every counted request (any path but the control endpoints) is also kept
 * as its key's last request, replacing the one before: method, target,
 * headers as received and the decoded body (the first 64 KB of it).  GET
 * /last?key=K (K URL-encoded; the ledger's spelling or the raw header
 * value) answers 404 for an unknown key, else text/plain:
 *
 *     method POST
 *     target /send?x=1
 *     header Content-Type: application/json
 *     header Idempotency-Key: otp:1:a
 *     body-length 42
 *
 *     {"to":"+15550100","text":"your code 1234"}
 *
 * that is "target" with the path and query as received, one "header" line
 * per header in received order (the value without blanks around it),
 * "body-length" with the bytes received (after de-chunking), then, only
 * for bodies over 64 KB, "body-truncated-to 65536"; an empty line; the
 * (kept) body bytes verbatim.  This costs memory per key, on top of the
 * ledger entry: the head and the body, a few hundred bytes for a typical
 * request.  /stats counts 3xx answers in status_3xx, and every answer
 * written in answered (a delayed one when its delay ends, not a held one).
 *
 * X-Sim-Fault: 301|302|307 answers that status, not delivered, with an
 * empty body and Location: http://127.0.0.1:PORT/redirected (the address
 * and port the connection came in on).  /redirected is an ordinary path,
 * counted like any other, where redirect faults are ignored (a client that
 * follows gets the normal answer, not a loop): a followed redirect shows
 * as a second receipt of the key, whose last target is /redirected.
 *
 * Resolving an ambiguous call (issue 31, in sim_resolve.c): three ways a
 * cooperating provider lets a client that does not know whether a call
 * was acted upon find out, each off by default.  Their settings are also
 * /config names (dedup_window_ms, dedup_breaks, lookup_latency_ms,
 * p_lookup_fail, lookup_fail_mode, dlr_median_ms, dlr_p99_ms, p_dlr_lost,
 * p_dlr_failed), listed after the others; /stats lists their counters
 * after its others.  Each draws from a PRNG stream of its own derived
 * from the seed, so the fault draws of a seed are the same with or
 * without them.
 *
 * A deduplication window, --dedup-window-ms N.  A key's window opens at
 * its first receipt and lasts N ms; the first receipt after it closed
 * opens a new one (the key is then like a new key).  A request whose key
 * header (--key-header) was delivered inside its open window is not
 * delivered again: answered 200 like a success, counted in the ledger as
 * received and not delivered (stats dedup_hits).  Its fault draws are
 * made all the same (and dropped); an X-Sim-Fault names its answer still,
 * and it is not delivered either.  A repeat inside the window of a key
 * not yet delivered in it (the earlier calls failed without acting) is
 * handled as usual.  --dedup-breaks P: that share of the repeats that
 * would be deduplicated is handled as usual instead, delivered again when
 * its draw says so (dedup_broken): a provider breaking its promise.
 * Requests without the key header (keyed by body) are never deduplicated.
 * --idempotency wins: with it a key delivered once is never delivered
 * again, its answers drawn as usual, and the window changes nothing.
 *
 * A status lookup, GET (or HEAD) /status/K or /status?ref=K: K is the key
 * header's value, URL-encoded (%XX; in ref= a + is a blank, in the path a
 * plus), or the ledger's spelling of the key.  200 with
 * {"ref":"K","status":"delivered"} when the ledger has a delivered copy
 * of K, else 404 with {"ref":"K","status":"not_found"} (unknown, or only
 * received); "K" is the ledger's spelling, JSON-escaped.  The ledger is
 * read as it is when the lookup arrives, never written: a lookup is not a
 * receipt, nor a request, and /last does not keep it.  Every answer comes
 * after --lookup-latency-ms (or X-Sim-Latency-Ms); a --p-lookup-fail share
 * fails: answered --lookup-fail-mode's status (default 503, any 5xx) with
 * {"ref":"K","status":"error","code":503}, or with --lookup-fail-mode
 * timeout held without an answer until the client gives up (hold_ms at
 * most; not counted in inflight).  /stats: lookups (all), lookups_found,
 * lookups_not_found, lookups_failed.  Any other method: 405; no key or a
 * bad %XX: 400 at once, not counted.  Paths /status and /status/... are
 * no longer simulated sends.
 *
 * Delivery reports (DLRs), on with --dlr-median-ms M.  Each delivered
 * copy (each step of the ledger's delivered count) gets a report that
 * becomes available after a latency drawn from a lognormal distribution
 * of median M and 99th percentile --dlr-p99-ms P (default M: no spread),
 * or, for a --p-dlr-lost share, none ever (dlrs_lost).  A --p-dlr-failed
 * share of the reports say not delivered (0; dlrs_failed), the others
 * delivered (1).  GET /dlrs?after=SEQ&limit=N (defaults 0 and 1000, N at
 * most 1000000) answers text/plain, the reports available now with a seq
 * above SEQ, in seq order, one a line:
 *
 *     seq TAB key TAB delivered (1/0) TAB reported_at (Unix ms)
 *
 * key as in the ledger; reported_at is the wall clock when the copy was
 * delivered plus the latency.  A report gets its seq (1, 2, ...) when it
 * becomes available, so that seq order is the order of availability and
 * a poller that asks after the last seq it saw misses none.  /stats:
 * dlrs_made (reports made, available or not yet), dlrs_lost, dlrs_failed,
 * dlrs_taken (reports handed out by /dlrs at least once).  /reset forgets
 * the reports; seq starts at 1 again.
 *
 * Answer latency: --latency-ms N delays every answer N ms; with
 * --latency-p99-ms P as well (P > N), each answer's delay is drawn from a
 * lognormal distribution of median N and 99th percentile P instead (a
 * real provider's spread: a few answers much slower than most), capped at
 * hold_ms.  The draws come from a PRNG stream of their own, derived from
 * the seed, so that a seed gives the same fault draws with or without the
 * spread.  An X-Sim-Latency-Ms header still fixes a request's delay.
 *
 * Design: only libc (libm for the lognormal latencies).  One epoll event
 * loop per thread over non-blocking sockets; per-connection timers
 * (answer latency, held requests, lingering close) live in a min-heap
 * whose head gives epoll_wait its timeout, so nothing ever sleeps (a DLR
 * needs no timer: it is handed out by the first GET /dlrs after its
 * time).  The ledger is an open-addressing hash table.  All
 * state shared between threads (config, counters, ledger, PRNG) sits
 * behind one mutex, which costs next to nothing in the default single
 * thread.  Run with --help for the options; the control endpoints and
 * X-Sim-* headers are described at usage() and in selftest.sh.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "sim_resolve.h"
#include "sim_batch.h"

#define MAX_HEAD_SIZE		(64 * 1024)			/* request line + headers */
#define MAX_BODY_SIZE		(64 * 1024 * 1024)	/* decoded body */
#define MAX_RAW_BODY_SIZE	(2 * MAX_BODY_SIZE) /* chunked, with framing */
#define MAX_BUFFERED		(1024 * 1024)		/* input kept while waiting */
#define MAX_CHUNK_LINE		1024
#define READ_CHUNK			(16 * 1024)
#define SHRINK_ABOVE		(256 * 1024)		/* free idle buffers above */
#define LINGER_MS			2000
#define MAX_EVENTS			256
#define ACCEPT_BATCH		64
#define MAX_THREADS			64
#define MAX_LAST_BODY		(64 * 1024)			/* body bytes kept by /last */
#define PRNG_LATENCY_SALT	UINT64_C(0x6c6174656e637904)	/* the latency stream's seed */

/* ----------------------------------------------------------------
 * Growable byte buffers
 * ----------------------------------------------------------------
 */
/* Buf is declared in sim_resolve.h, with what sim_resolve.c uses of this file */

void *
xrealloc(void *p, size_t n)
{
	p = realloc(p, n);
	if (p == NULL)
	{
		fprintf(stderr, "provider_sim: out of memory\n");
		abort();
	}
	return p;
}

void *
xcalloc(size_t n, size_t size)
{
	void	   *p = calloc(n, size);

	if (p == NULL)
	{
		fprintf(stderr, "provider_sim: out of memory\n");
		abort();
	}
	return p;
}

/* make room for at least extra more bytes */
static void
buf_reserve(Buf *b, size_t extra)
{
	size_t		need = b->len + extra;
	size_t		cap;

	if (need <= b->cap)
		return;
	cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap *= 2;
	b->data = xrealloc(b->data, cap);
	b->cap = cap;
}

void
buf_append(Buf *b, const void *p, size_t n)
{
	buf_reserve(b, n);
	memcpy(b->data + b->len, p, n);
	b->len += n;
}

void
buf_puts(Buf *b, const char *s)
{
	buf_append(b, s, strlen(s));
}

void
buf_printf(Buf *b, const char *fmt,...)
{
	for (;;)
	{
		va_list		ap;
		size_t		room = b->cap - b->len;
		int			n;

		va_start(ap, fmt);
		n = vsnprintf(b->data ? b->data + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if ((size_t) n < room)
		{
			b->len += n;
			return;
		}
		buf_reserve(b, (size_t) n + 1);
	}
}

static void
buf_free(Buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

/* empty a buffer, giving its memory back when it grew large */
static void
buf_clear(Buf *b)
{
	if (b->cap > SHRINK_ABOVE)
		buf_free(b);
	b->len = 0;
}

/* ----------------------------------------------------------------
 * Hashing, PRNG, clocks
 * ----------------------------------------------------------------
 */
static uint64_t
fnv1a(const char *p, size_t n)
{
	uint64_t	h = UINT64_C(0xcbf29ce484222325);

	for (size_t i = 0; i < n; i++)
	{
		h ^= (unsigned char) p[i];
		h *= UINT64_C(0x100000001b3);
	}
	return h;
}

/* splitmix64: small, fast, deterministic for a given seed */
static uint64_t
splitmix64(uint64_t *state)
{
	uint64_t	z = (*state += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* uniform in [0, 1) */
double
prng_double(uint64_t *state)
{
	return (double) (splitmix64(state) >> 11) * 0x1.0p-53;
}

static int64_t
monotonic_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t
wall_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ----------------------------------------------------------------
 * Ledger: per-key counts in an open-addressing (linear probing) table
 * ----------------------------------------------------------------
 */

/*
 * The most recent request of a key, for GET /last: its head exactly as
 * received (request line and header lines, up to the empty line), then
 * the first body_stored bytes of its decoded body, in one allocation that
 * the next request of the key reuses when it fits.
 */
typedef struct LastRequest
{
	size_t		cap;			/* bytes allocated for data */
	size_t		head_len;
	size_t		body_stored;	/* at most MAX_LAST_BODY */
	size_t		body_len;		/* as received */
	char		data[];
} LastRequest;

typedef struct LedgerEntry
{
	uint64_t	hash;			/* hash of the key */
	uint64_t	received;
	uint64_t	delivered;
	int64_t		first_us;
	int64_t		last_us;
	uint64_t	body_hash;		/* first body hash seen */
	uint64_t   *more_hashes;	/* further distinct body hashes */
	uint32_t	n_more;
	uint32_t	cap_more;
	LastRequest *last;			/* NULL until a request is recorded */
	DedupWindow dedup;			/* --dedup-window-ms: the key's window */
	size_t		keylen;
	char		key[];
} LedgerEntry;

typedef struct Ledger
{
	LedgerEntry **slots;
	size_t		cap;			/* power of two */
	size_t		count;
} Ledger;

#define LEDGER_MIN_CAP	1024

static uint64_t
mix64(uint64_t h)
{
	h ^= h >> 33;
	h *= UINT64_C(0xff51afd7ed558ccd);
	h ^= h >> 33;
	return h;
}

static void
ledger_init(Ledger *l)
{
	l->cap = LEDGER_MIN_CAP;
	l->count = 0;
	l->slots = xcalloc(l->cap, sizeof(LedgerEntry *));
}

static void
ledger_free(Ledger *l)
{
	for (size_t i = 0; i < l->cap; i++)
	{
		if (l->slots[i])
		{
			free(l->slots[i]->more_hashes);
			free(l->slots[i]->last);
			free(l->slots[i]);
		}
	}
	free(l->slots);
	l->slots = NULL;
	l->cap = l->count = 0;
}

static void
ledger_grow(Ledger *l)
{
	size_t		newcap = l->cap * 2;
	LedgerEntry **slots = xcalloc(newcap, sizeof(LedgerEntry *));

	for (size_t i = 0; i < l->cap; i++)
	{
		LedgerEntry *e = l->slots[i];
		size_t		j;

		if (e == NULL)
			continue;
		for (j = mix64(e->hash) & (newcap - 1); slots[j]; j = (j + 1) & (newcap - 1))
			;
		slots[j] = e;
	}
	free(l->slots);
	l->slots = slots;
	l->cap = newcap;
}

/*
 * The slot of a key: where its entry is, or the empty slot where it would
 * go.  hash is fnv1a() of the key.
 */
static size_t
ledger_slot(const Ledger *l, const char *key, size_t keylen, uint64_t hash)
{
	size_t		i;
	const LedgerEntry *e;

	for (i = mix64(hash) & (l->cap - 1); (e = l->slots[i]) != NULL; i = (i + 1) & (l->cap - 1))
	{
		if (e->hash == hash && e->keylen == keylen && memcmp(e->key, key, keylen) == 0)
			break;
	}
	return i;
}

/* the entry of a key, or NULL */
static LedgerEntry *
ledger_find(const Ledger *l, const char *key, size_t keylen)
{
	return l->slots[ledger_slot(l, key, keylen, fnv1a(key, keylen))];
}

/* find the entry of a key, creating it when new */
static LedgerEntry *
ledger_get(Ledger *l, const char *key, size_t keylen)
{
	uint64_t	hash = fnv1a(key, keylen);
	size_t		i = ledger_slot(l, key, keylen, hash);
	LedgerEntry *e = l->slots[i];

	if (e != NULL)
		return e;
	e = xcalloc(1, sizeof(LedgerEntry) + keylen + 1);
	e->hash = hash;
	e->keylen = keylen;
	memcpy(e->key, key, keylen);
	l->slots[i] = e;
	if (++l->count * 10 > l->cap * 7)
		ledger_grow(l);
	return e;
}

/* remember a body hash; the entry has been received at least once */
static void
ledger_note_body(LedgerEntry *e, uint64_t body_hash)
{
	if (e->received == 1 || e->body_hash == body_hash)
	{
		e->body_hash = body_hash;
		return;
	}
	for (uint32_t i = 0; i < e->n_more; i++)
		if (e->more_hashes[i] == body_hash)
			return;
	if (e->n_more == e->cap_more)
	{
		e->cap_more = e->cap_more ? e->cap_more * 2 : 4;
		e->more_hashes = xrealloc(e->more_hashes, e->cap_more * sizeof(uint64_t));
	}
	e->more_hashes[e->n_more++] = body_hash;
}

/* count one received request of a key */
static LedgerEntry *
ledger_receive(Ledger *l, const char *key, size_t keylen, uint64_t body_hash)
{
	LedgerEntry *e = ledger_get(l, key, keylen);
	int64_t		now = wall_us();

	e->received++;
	if (e->received == 1)
		e->first_us = now;
	e->last_us = now;
	ledger_note_body(e, body_hash);
	return e;
}

/*
 * Keep a copy of a request as the key's last one: its head (request line
 * and headers as received) and its decoded body, cut at MAX_LAST_BODY.
 */
static void
ledger_record_last(LedgerEntry *e, const char *head, size_t head_len,
				   const char *body, size_t body_len)
{
	size_t		stored = body_len < MAX_LAST_BODY ? body_len : MAX_LAST_BODY;
	size_t		need = head_len + stored;
	LastRequest *last = e->last;

	/* reuse the allocation unless too small, or much too large */
	if (last == NULL || last->cap < need || last->cap - need > 4096)
	{
		last = xrealloc(last, sizeof(LastRequest) + need);
		last->cap = need;
		e->last = last;
	}
	last->head_len = head_len;
	last->body_stored = stored;
	last->body_len = body_len;
	memcpy(last->data, head, head_len);
	if (stored > 0)
		memcpy(last->data + head_len, body, stored);
}

/*
 * Append a raw key as a ledger key: bytes that would break the ledger's
 * line format (controls, space, DEL) are written as %XX.  Escaping an
 * escaped key changes nothing.
 */
static void
ledger_key_escape(const char *raw, size_t n, Buf *key)
{
	buf_reserve(key, n * 3);
	for (size_t i = 0; i < n; i++)
	{
		unsigned char ch = raw[i];

		if (ch <= ' ' || ch == 0x7f)
		{
			key->data[key->len++] = '%';
			key->data[key->len++] = "0123456789ABCDEF"[ch >> 4];
			key->data[key->len++] = "0123456789ABCDEF"[ch & 15];
		}
		else
			key->data[key->len++] = ch;
	}
}

/* one line per key: key received delivered distinct_bodies first_us last_us */
static void
ledger_format(const Ledger *l, Buf *out)
{
	for (size_t i = 0; i < l->cap; i++)
	{
		const LedgerEntry *e = l->slots[i];

		if (e == NULL)
			continue;
		buf_append(out, e->key, e->keylen);
		buf_printf(out, " %" PRIu64 " %" PRIu64 " %u %" PRId64 " %" PRId64 "\n",
				   e->received, e->delivered, e->n_more + 1,
				   e->first_us, e->last_us);
	}
}

/* ----------------------------------------------------------------
 * Shared state: configuration, counters, ledger, PRNG (under sim.lock)
 * ----------------------------------------------------------------
 */
typedef struct SimConfig
{
	int			latency_ms;
	int			latency_p99_ms; /* 0: every answer after latency_ms */
	int			hold_ms;
	double		p_timeout;
	double		q;
	double		p_5xx;
	double		p_4xx;
	double		p_reset;
	double		p_429;
	bool		idempotency;
	int			status_5xx;
	int			retry_after;
	uint64_t	seed;
	ResolveConfig resolve;		/* dedup window, lookups, DLRs (sim_resolve.c) */
} SimConfig;

typedef struct SimStats
{
	uint64_t	requests;
	uint64_t	delivered;
	uint64_t	timeouts;
	uint64_t	resets;
	uint64_t	status_2xx;
	uint64_t	status_3xx;
	uint64_t	status_4xx;
	uint64_t	status_429;
	uint64_t	status_5xx;
	uint64_t	malformed;
	uint64_t	answered;		/* answers written (a delayed one when its delay ends) */
	uint64_t	batch_calls;	/* requests to /batch */
	uint64_t	batch_messages; /* the messages they carried */
	int64_t		inflight;		/* gauge: requests held right now */
	int64_t		connections_open;	/* gauge */
} SimStats;

static struct
{
	pthread_mutex_t lock;
	SimConfig	config;
	SimStats	stats;
	Ledger		ledger;
	uint64_t	prng;
	uint64_t	prng_latency;	/* the lognormal latencies' own stream */
} sim = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* options fixed at start */
static struct
{
	int			port;
	const char *bind_addr;
	const char *key_header;
	const char *ledger_file;
	int			threads;
} opts = {8089, "127.0.0.1", "Idempotency-Key", NULL, 1};

static void
sim_lock(void)
{
	pthread_mutex_lock(&sim.lock);
}

static void
sim_unlock(void)
{
	pthread_mutex_unlock(&sim.lock);
}

/* adjust a gauge or counter from a worker */
static void
stat_add(int64_t *gauge, int64_t delta)
{
	sim_lock();
	*gauge += delta;
	sim_unlock();
}

/* ----------------------------------------------------------------
 * Connections, requests, workers
 * ----------------------------------------------------------------
 */
typedef enum SourceKind
{
	SRC_LISTENER,
	SRC_SIGNAL,
	SRC_CONN
} SourceKind;

/* what an epoll event points at; first member of Conn */
typedef struct Source
{
	SourceKind	kind;
	int			fd;
} Source;

typedef enum Endpoint
{
	EP_SIM,						/* the simulated provider: any other path */
	EP_LEDGER,
	EP_STATS,
	EP_RESET,
	EP_CONFIG,
	EP_HEALTH,
	EP_LAST,
	EP_DLRS,
	EP_LOOKUP,					/* /status and /status/...: not a control endpoint */
	EP_BATCH					/* /batch and /batch...: many messages a request */
} Endpoint;

typedef enum Method
{
	M_GET,
	M_HEAD,
	M_POST,
	M_OTHER
} Method;

typedef enum Fault
{
	FAULT_RANDOM,				/* no X-Sim-Fault: draw from probabilities */
	FAULT_OK,
	FAULT_TIMEOUT,
	FAULT_TIMEOUT_DELIVERED,
	FAULT_RESET,
	FAULT_RESET_DELIVERED,
	FAULT_STATUS,				/* answer Request.fault_status */
	FAULT_GARBLED				/* a batch: 200 with a body that is not its results */
} Fault;

typedef enum ChunkState
{
	CH_SIZE,					/* expecting a chunk-size line */
	CH_DATA,					/* inside chunk data */
	CH_DATA_END,				/* expecting the CRLF after chunk data */
	CH_TRAILER					/* after the last chunk: trailer lines */
} ChunkState;

/*
 * A request being read.  Positions are offsets into Conn.in, where the
 * request always starts at offset 0 (finish_request() shifts the input).
 */
typedef struct Request
{
	size_t		scan_pos;		/* head-end search resumes here */
	size_t		head_len;
	size_t		req_end;		/* offset just past the body, when complete */
	bool		http10;
	Method		method;
	Endpoint	endpoint;
	bool		redirected;		/* path is /redirected */
	size_t		path_off;
	size_t		path_len;
	size_t		query_off;
	size_t		query_len;
	bool		has_key;
	size_t		key_off;
	size_t		key_len;
	int64_t		content_length; /* -1: none */
	bool		chunked;
	bool		expect_continue;
	bool		conn_close;		/* Connection: close */
	bool		conn_keep_alive;	/* Connection: keep-alive */
	bool		keep_alive;		/* outcome of the two above and version */
	Fault		fault;
	int			fault_status;
	int			latency_ms;		/* -1: not given */
	int			retry_after;	/* -1: not given */
	int			fail_first;		/* -1: not given */
	int			deliver;		/* -1: not given */
	int			echo;			/* X-Sim-Echo: 1: an error answer echoes the request */
	size_t		auth_off;		/* its Authorization header's value */
	size_t		auth_len;
	ChunkState	chunk_state;
	size_t		chunk_pos;		/* next raw chunked byte to decode */
	uint64_t	chunk_left;
} Request;

typedef enum ConnState
{
	CS_HEAD,					/* reading a request head */
	CS_BODY,					/* reading a request body */
	CS_WAIT,					/* answer delayed by latency */
	CS_HELD,					/* request held, never answered */
	CS_LINGER					/* last answer sent, draining input */
} ConnState;

typedef enum CloseMode
{
	CLOSE_NONE,
	CLOSE_GRACEFUL,				/* once the output is flushed */
	CLOSE_RESET					/* once the output is flushed, with RST */
} CloseMode;

typedef enum Action
{
	ACT_RESPOND,
	ACT_RESET,
	ACT_HOLD
} Action;

struct Worker;

typedef struct Conn
{
	Source		src;
	struct Worker *worker;
	struct Conn *prev;
	struct Conn *next;
	ConnState	state;
	CloseMode	close_mode;
	uint32_t	events;			/* epoll interest registered */
	bool		peer_eof;
	Buf			in;
	Buf			out;
	size_t		out_pos;
	Buf			body;			/* decoded chunked body */
	Request		req;
	Buf			pending;		/* delayed answer */
	Action		pending_action;
	bool		close_when_answered;
	bool		lookup;			/* the request is a status lookup (EP_LOOKUP) */
	int64_t		timer_at;		/* monotonic microseconds */
	int			heap_idx;		/* -1: no timer */
} Conn;

typedef struct TimerHeap
{
	Conn	  **items;
	int			n;
	int			cap;
} TimerHeap;

typedef struct Worker
{
	int			epfd;
	pthread_t	thread;
	TimerHeap	timers;
	Conn	   *conns;			/* all open connections */
	int64_t		now_us;			/* monotonic, at the last wake-up */
	bool		stop;
	Buf			scratch;		/* answer bodies */
	Buf			keybuf;			/* sanitized keys */
} Worker;

static Source listen_src = {SRC_LISTENER, -1};
static int	listen_port;		/* the port bound, also with --port 0 */
static Source signal_src = {SRC_SIGNAL, -1};
static int	spare_fd = -1;

static bool conn_process(Conn *c);

/* ----------------------------------------------------------------
 * Timers: a min-heap of connections by timer_at
 * ----------------------------------------------------------------
 */
static void
heap_place(TimerHeap *h, int i, Conn *c)
{
	h->items[i] = c;
	c->heap_idx = i;
}

static void
heap_up(TimerHeap *h, int i)
{
	Conn	   *c = h->items[i];

	while (i > 0)
	{
		int			parent = (i - 1) / 2;

		if (h->items[parent]->timer_at <= c->timer_at)
			break;
		heap_place(h, i, h->items[parent]);
		i = parent;
	}
	heap_place(h, i, c);
}

static void
heap_down(TimerHeap *h, int i)
{
	Conn	   *c = h->items[i];

	for (;;)
	{
		int			child = 2 * i + 1;

		if (child >= h->n)
			break;
		if (child + 1 < h->n && h->items[child + 1]->timer_at < h->items[child]->timer_at)
			child++;
		if (c->timer_at <= h->items[child]->timer_at)
			break;
		heap_place(h, i, h->items[child]);
		i = child;
	}
	heap_place(h, i, c);
}

static void
timer_cancel(Conn *c)
{
	TimerHeap  *h = &c->worker->timers;
	int			i = c->heap_idx;
	Conn	   *last;

	if (i < 0)
		return;
	c->heap_idx = -1;
	last = h->items[--h->n];
	if (last == c)
		return;
	heap_place(h, i, last);
	heap_up(h, i);
	heap_down(h, last->heap_idx);
}

static void
timer_set(Conn *c, int delay_ms)
{
	TimerHeap  *h = &c->worker->timers;

	timer_cancel(c);
	if (h->n == h->cap)
	{
		h->cap = h->cap ? h->cap * 2 : 64;
		h->items = xrealloc(h->items, h->cap * sizeof(Conn *));
	}
	c->timer_at = c->worker->now_us + (int64_t) delay_ms * 1000;
	heap_place(h, h->n++, c);
	heap_up(h, h->n - 1);
}

/*
 * epoll_wait timeout until the earliest timer, -1 without timers; rounded
 * up, so that a delay is never shorter than asked
 */
static int
timers_timeout(Worker *w)
{
	int64_t		d;

	if (w->timers.n == 0)
		return -1;
	d = w->timers.items[0]->timer_at - w->now_us;
	if (d <= 0)
		return 0;
	d = (d + 999) / 1000;
	return d > 60000 ? 60000 : (int) d;
}

/* ----------------------------------------------------------------
 * Connection life cycle and output
 * ----------------------------------------------------------------
 */
static void
conn_close(Conn *c, bool rst)
{
	Worker	   *w = c->worker;

	if (rst)
	{
		struct linger lg = {1, 0};

		setsockopt(c->src.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	timer_cancel(c);
	close(c->src.fd);
	sim_lock();
	sim.stats.connections_open--;
	if (c->state == CS_HELD && !c->lookup)
		sim.stats.inflight--;
	sim_unlock();
	if (c->prev)
		c->prev->next = c->next;
	else
		w->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	buf_free(&c->in);
	buf_free(&c->out);
	buf_free(&c->body);
	buf_free(&c->pending);
	free(c);
}

/* register the epoll interest the connection needs now */
static bool
conn_update_events(Conn *c)
{
	uint32_t	want = 0;
	struct epoll_event ev;

	if (!c->peer_eof)
		want |= EPOLLIN;
	if (c->out_pos < c->out.len)
		want |= EPOLLOUT;
	if (want == c->events)
		return true;
	ev.events = want;
	ev.data.ptr = &c->src;
	if (epoll_ctl(c->worker->epfd, EPOLL_CTL_MOD, c->src.fd, &ev) < 0)
	{
		conn_close(c, false);
		return false;
	}
	c->events = want;
	return true;
}

/* answer sent: stop writing, drain what the peer still sends, then close */
static bool
conn_start_linger(Conn *c)
{
	if (c->peer_eof)
	{
		conn_close(c, false);
		return false;
	}
	shutdown(c->src.fd, SHUT_WR);
	c->state = CS_LINGER;
	c->in.len = 0;
	timer_set(c, LINGER_MS);
	return conn_update_events(c);
}

/* write what can be written; false when the connection went away */
static bool
conn_flush(Conn *c)
{
	while (c->out_pos < c->out.len)
	{
		ssize_t		n = send(c->src.fd, c->out.data + c->out_pos,
							 c->out.len - c->out_pos, MSG_NOSIGNAL);

		if (n > 0)
			c->out_pos += n;
		else if (n < 0 && errno == EINTR)
			continue;
		else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return conn_update_events(c);
		else
		{
			conn_close(c, false);
			return false;
		}
	}
	c->out_pos = 0;
	buf_clear(&c->out);
	if (c->close_mode == CLOSE_RESET)
	{
		conn_close(c, true);
		return false;
	}
	if (c->close_mode == CLOSE_GRACEFUL && c->state != CS_LINGER)
		return conn_start_linger(c);
	return conn_update_events(c);
}

/* ----------------------------------------------------------------
 * Responses
 * ----------------------------------------------------------------
 */
static const char *
status_reason(int status)
{
	switch (status)
	{
		case 200:
			return "OK";
		case 301:
			return "Moved Permanently";
		case 302:
			return "Found";
		case 307:
			return "Temporary Redirect";
		case 400:
			return "Bad Request";
		case 404:
			return "Not Found";
		case 405:
			return "Method Not Allowed";
		case 408:
			return "Request Timeout";
		case 413:
			return "Content Too Large";
		case 429:
			return "Too Many Requests";
		case 500:
			return "Internal Server Error";
		case 501:
			return "Not Implemented";
		case 502:
			return "Bad Gateway";
		case 503:
			return "Service Unavailable";
		case 504:
			return "Gateway Timeout";
		default:
			return status < 500 ? "Client Error" : "Server Error";
	}
}

/*
 * Append a complete response.  r gives the connection handling and HEAD;
 * without r (malformed request) the connection is closed.  ctype and
 * location may be NULL: no such header.
 */
static void
append_response(Buf *out, const Request *r, int status, const char *ctype,
				const char *body, size_t body_len, int retry_after,
				const char *location)
{
	buf_printf(out, "HTTP/1.1 %d %s\r\n", status, status_reason(status));
	if (ctype != NULL)
		buf_printf(out, "Content-Type: %s\r\n", ctype);
	buf_printf(out, "Content-Length: %zu\r\n", body_len);
	if (location != NULL)
		buf_printf(out, "Location: %s\r\n", location);
	if (retry_after >= 0)
		buf_printf(out, "Retry-After: %d\r\n", retry_after);
	if (r == NULL || !r->keep_alive)
		buf_puts(out, "Connection: close\r\n");
	else if (r->http10)
		buf_puts(out, "Connection: keep-alive\r\n");
	buf_puts(out, "\r\n");
	if (r == NULL || r->method != M_HEAD)
		buf_append(out, body, body_len);
}

static void
append_text(Buf *out, const Request *r, int status, const char *text)
{
	append_response(out, r, status, "text/plain", text, strlen(text), -1, NULL);
}

/* malformed or unacceptable request: answer and close */
static void
conn_reject(Conn *c, int status)
{
	char		text[64];

	snprintf(text, sizeof(text), "%d %s\n", status, status_reason(status));
	append_text(&c->out, NULL, status, text);
	c->close_mode = CLOSE_GRACEFUL;
	c->in.len = 0;
	sim_lock();
	sim.stats.malformed++;
	sim_unlock();
}

/* ----------------------------------------------------------------
 * Request parsing
 * ----------------------------------------------------------------
 */
typedef enum ParseResult
{
	PARSE_MORE,					/* need more input */
	PARSE_DONE,
	PARSE_ERROR
} ParseResult;

static void
request_init(Request *r)
{
	memset(r, 0, sizeof(*r));
	r->content_length = -1;
	r->latency_ms = -1;
	r->retry_after = -1;
	r->fail_first = -1;
	r->deliver = -1;
	r->echo = 0;
	r->auth_len = 0;
}

static bool
is_redirect(int status)
{
	return status == 301 || status == 302 || status == 307;
}

static bool
token_eq(const char *p, size_t n, const char *lit)
{
	return strlen(lit) == n && strncasecmp(p, lit, n) == 0;
}

/* a non-negative decimal integer no larger than max */
static bool
parse_uint(const char *p, size_t n, int64_t max, int64_t *out)
{
	int64_t		v = 0;

	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++)
	{
		if (p[i] < '0' || p[i] > '9')
			return false;
		v = v * 10 + (p[i] - '0');
		if (v > max)
			return false;
	}
	*out = v;
	return true;
}

static bool
parse_int_field(const char *p, size_t n, int max, int *out)
{
	int64_t		v;

	if (!parse_uint(p, n, max, &v))
		return false;
	*out = (int) v;
	return true;
}

static bool
parse_fault(Request *r, const char *v, size_t n)
{
	static const struct
	{
		const char *name;
		Fault		fault;
	}			names[] = {
		{"ok", FAULT_OK},
		{"timeout", FAULT_TIMEOUT},
		{"timeout_delivered", FAULT_TIMEOUT_DELIVERED},
		{"reset", FAULT_RESET},
		{"reset_delivered", FAULT_RESET_DELIVERED},
		{"garbled", FAULT_GARBLED},
	};
	static const int statuses[] = {301, 302, 307, 400, 408, 429, 500, 502, 503, 504};
	int64_t		status;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
	{
		if (token_eq(v, n, names[i].name))
		{
			r->fault = names[i].fault;
			return true;
		}
	}
	if (!parse_uint(v, n, 999, &status))
		return false;
	for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
	{
		if (statuses[i] == status)
		{
			r->fault = FAULT_STATUS;
			r->fault_status = (int) status;
			return true;
		}
	}
	return false;
}

/* Transfer-Encoding: only "chunked" (possibly after no-op codings) */
static bool
parse_transfer_encoding(Request *r, const char *v, size_t n)
{
	const char *last = v;
	size_t		len;

	for (size_t i = 0; i < n; i++)
		if (v[i] == ',')
			last = v + i + 1;
	while (last < v + n && (*last == ' ' || *last == '\t'))
		last++;
	len = v + n - last;
	if (!token_eq(last, len, "chunked"))
		return false;
	r->chunked = true;
	return true;
}

static void
parse_connection(Request *r, const char *v, size_t n)
{
	size_t		i = 0;

	while (i < n)
	{
		size_t		start,
					end;

		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		start = i;
		while (i < n && v[i] != ',')
			i++;
		end = i;
		while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
			end--;
		if (token_eq(v + start, end - start, "close"))
			r->conn_close = true;
		else if (token_eq(v + start, end - start, "keep-alive"))
			r->conn_keep_alive = true;
	}
}

/* one header; value already trimmed; false: malformed */
static bool
apply_header(Request *r, const char *base, const char *name, size_t nlen,
			 const char *val, size_t vlen)
{
	if (token_eq(name, nlen, opts.key_header))
	{
		if (vlen > 0)
		{
			r->has_key = true;
			r->key_off = val - base;
			r->key_len = vlen;
		}
		return true;
	}
	if (token_eq(name, nlen, "content-length"))
	{
		int64_t		cl;

		if (!parse_uint(val, vlen, INT64_C(1) << 52, &cl))
			return false;
		if (r->content_length >= 0 && r->content_length != cl)
			return false;
		r->content_length = cl;
		return true;
	}
	if (token_eq(name, nlen, "transfer-encoding"))
		return parse_transfer_encoding(r, val, vlen);
	if (token_eq(name, nlen, "authorization"))
	{
		r->auth_off = val - base;
		r->auth_len = vlen;
	}
	else if (token_eq(name, nlen, "connection"))
		parse_connection(r, val, vlen);
	else if (token_eq(name, nlen, "expect"))
		r->expect_continue = token_eq(val, vlen, "100-continue");
	else if (nlen > 6 && strncasecmp(name, "x-sim-", 6) == 0)
	{
		if (token_eq(name, nlen, "x-sim-fault"))
			return parse_fault(r, val, vlen);
		if (token_eq(name, nlen, "x-sim-latency-ms"))
			return parse_int_field(val, vlen, 86400000, &r->latency_ms);
		if (token_eq(name, nlen, "x-sim-retry-after"))
			return parse_int_field(val, vlen, 86400000, &r->retry_after);
		if (token_eq(name, nlen, "x-sim-fail-first"))
			return parse_int_field(val, vlen, 1000000000, &r->fail_first);
		if (token_eq(name, nlen, "x-sim-deliver"))
			return parse_int_field(val, vlen, 1, &r->deliver);
		if (token_eq(name, nlen, "x-sim-echo"))
			return parse_int_field(val, vlen, 1, &r->echo);
	}
	return true;
}

/* the value of a header line after its colon, without blanks around it */
static const char *
header_value(const char *colon, const char *end, size_t *vlen)
{
	const char *val = colon + 1;

	while (val < end && (*val == ' ' || *val == '\t'))
		val++;
	while (end > val && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	*vlen = end - val;
	return val;
}

/* "Name: value" without its line end */
static bool
parse_header_line(Request *r, const char *base, const char *line, size_t len)
{
	const char *colon = memchr(line, ':', len);
	const char *val;
	size_t		vlen;

	if (colon == NULL || colon == line)
		return false;
	for (const char *p = line; p < colon; p++)
		if (*p <= ' ' || *p >= 0x7f)
			return false;		/* also rejects obsolete line folding */
	val = header_value(colon, line + len, &vlen);
	return apply_header(r, base, line, colon - line, val, vlen);
}

static Endpoint
classify_path(const char *p, size_t n)
{
	if (token_eq(p, n, "/ledger"))
		return EP_LEDGER;
	if (token_eq(p, n, "/stats"))
		return EP_STATS;
	if (token_eq(p, n, "/reset"))
		return EP_RESET;
	if (token_eq(p, n, "/config"))
		return EP_CONFIG;
	if (token_eq(p, n, "/health"))
		return EP_HEALTH;
	if (token_eq(p, n, "/last"))
		return EP_LAST;
	if (token_eq(p, n, "/dlrs"))
		return EP_DLRS;
	if (token_eq(p, n, "/status") || (n >= 8 && strncasecmp(p, "/status/", 8) == 0))
		return EP_LOOKUP;
	if (n >= 6 && strncasecmp(p, "/batch", 6) == 0)
		return EP_BATCH;
	return EP_SIM;
}

/* "METHOD SP /target SP HTTP/1.x" */
static bool
parse_request_line(Request *r, const char *base, const char *line, size_t len)
{
	const char *end = line + len;
	const char *sp1 = memchr(line, ' ', len);
	const char *target,
			   *sp2,
			   *qmark;
	size_t		mlen;

	if (sp1 == NULL || sp1 == line)
		return false;
	mlen = sp1 - line;
	for (size_t i = 0; i < mlen; i++)
		if (line[i] <= ' ' || line[i] >= 0x7f)
			return false;
	r->method = token_eq(line, mlen, "GET") ? M_GET :
		token_eq(line, mlen, "HEAD") ? M_HEAD :
		token_eq(line, mlen, "POST") ? M_POST : M_OTHER;
	target = sp1 + 1;
	sp2 = memchr(target, ' ', end - target);
	if (sp2 == NULL || target == sp2 || *target != '/')
		return false;
	if (end - (sp2 + 1) != 8 || memcmp(sp2 + 1, "HTTP/1.", 7) != 0 ||
		(sp2[8] != '0' && sp2[8] != '1'))
		return false;
	r->http10 = sp2[8] == '0';
	qmark = memchr(target, '?', sp2 - target);
	if (qmark)
	{
		r->query_off = qmark + 1 - base;
		r->query_len = sp2 - (qmark + 1);
	}
	r->path_off = target - base;
	r->path_len = (qmark ? qmark : sp2) - target;
	r->endpoint = classify_path(target, r->path_len);
	r->redirected = token_eq(target, (qmark ? qmark : sp2) - target, "/redirected");
	return true;
}

/*
 * Offset just past the empty line ending the head, or -1 when it has not
 * arrived yet.  Accepts CRLF and bare LF line ends.
 */
static ssize_t
find_head_end(const char *buf, size_t len, size_t *scan_pos)
{
	size_t		pos = *scan_pos;

	while (pos < len)
	{
		const char *nl = memchr(buf + pos, '\n', len - pos);
		size_t		next;

		if (nl == NULL)
			break;
		next = nl - buf + 1;
		if (next < len && buf[next] == '\n')
			return next + 1;
		if (next + 1 < len && buf[next] == '\r' && buf[next + 1] == '\n')
			return next + 2;
		if (next >= len || (next + 1 >= len && buf[next] == '\r'))
		{
			*scan_pos = nl - buf;	/* undecided: look again from here */
			return -1;
		}
		pos = next;
	}
	*scan_pos = len;
	return -1;
}

/* length of a line in [p, end) without its CR, and where the next starts */
static size_t
line_length(const char *p, const char *end, const char **next)
{
	const char *nl = memchr(p, '\n', end - p);
	size_t		len;

	if (nl == NULL)
		nl = end;
	len = nl - p;
	if (len > 0 && p[len - 1] == '\r')
		len--;
	*next = nl < end ? nl + 1 : end;
	return len;
}

static ParseResult
parse_head(Conn *c, int *status)
{
	Request    *r = &c->req;
	const char *base = c->in.data;
	const char *p,
			   *end,
			   *next;
	ssize_t		head_end;
	size_t		len;

	/* stray CRLFs between requests are ignored */
	if (r->scan_pos == 0)
	{
		size_t		skip = 0;

		while (skip < c->in.len && (c->in.data[skip] == '\r' || c->in.data[skip] == '\n'))
			skip++;
		if (skip > 0)
		{
			c->in.len -= skip;
			memmove(c->in.data, c->in.data + skip, c->in.len);
		}
	}
	head_end = find_head_end(c->in.data, c->in.len, &r->scan_pos);
	if (head_end < 0)
		return c->in.len > MAX_HEAD_SIZE ? PARSE_ERROR : PARSE_MORE;
	if (head_end > MAX_HEAD_SIZE)
		return PARSE_ERROR;
	r->head_len = head_end;
	end = base + head_end;
	len = line_length(base, end, &next);
	if (!parse_request_line(r, base, base, len))
		return PARSE_ERROR;
	for (p = next; p < end; p = next)
	{
		len = line_length(p, end, &next);
		if (len == 0)
			break;
		if (!parse_header_line(r, base, p, len))
			return PARSE_ERROR;
	}
	if (r->chunked && r->content_length >= 0)
		return PARSE_ERROR;
	/* a redirect that was followed is answered like any request */
	if (r->redirected && r->fault == FAULT_STATUS && is_redirect(r->fault_status))
		r->fault = FAULT_RANDOM;
	if (r->content_length > MAX_BODY_SIZE)
	{
		*status = 413;
		return PARSE_ERROR;
	}
	r->keep_alive = r->http10 ? (r->conn_keep_alive && !r->conn_close) : !r->conn_close;
	return PARSE_DONE;
}

/* head parsed: wait for the body, inviting it when the client asked */
static void
start_body(Conn *c)
{
	Request    *r = &c->req;
	size_t		have = c->in.len - r->head_len;

	c->state = CS_BODY;
	r->chunk_pos = r->head_len;
	r->chunk_state = CH_SIZE;
	if (r->expect_continue && !r->http10 &&
		(r->chunked ? have == 0 : (int64_t) have < r->content_length))
		buf_puts(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
}

/* one line of chunked framing starting at chunk_pos, or NULL for more */
static const char *
chunk_line(Conn *c, size_t *len, bool *too_long)
{
	const char *p = c->in.data + c->req.chunk_pos;
	size_t		avail = c->in.len - c->req.chunk_pos;
	const char *nl = memchr(p, '\n', avail);

	*too_long = false;
	if (nl == NULL)
	{
		*too_long = avail > MAX_CHUNK_LINE;
		return NULL;
	}
	*len = nl - p;
	if (*len > 0 && p[*len - 1] == '\r')
		(*len)--;
	c->req.chunk_pos = nl + 1 - c->in.data;
	return p;
}

static bool
parse_chunk_size(const char *p, size_t len, uint64_t *size)
{
	uint64_t	v = 0;
	size_t		i;

	for (i = 0; i < len; i++)
	{
		int			d;

		if (p[i] >= '0' && p[i] <= '9')
			d = p[i] - '0';
		else if (p[i] >= 'a' && p[i] <= 'f')
			d = p[i] - 'a' + 10;
		else if (p[i] >= 'A' && p[i] <= 'F')
			d = p[i] - 'A' + 10;
		else
			break;
		v = v * 16 + d;
		if (v > MAX_BODY_SIZE)
			return false;
	}
	if (i == 0 || (i < len && p[i] != ';' && p[i] != ' ' && p[i] != '\t'))
		return false;
	*size = v;
	return true;
}

/* decode as much chunked body as has arrived */
static ParseResult
parse_chunked(Conn *c, int *status)
{
	Request    *r = &c->req;

	for (;;)
	{
		const char *line;
		size_t		len,
					avail;
		bool		too_long;

		if (r->chunk_pos > MAX_RAW_BODY_SIZE)
		{
			*status = 413;
			return PARSE_ERROR;
		}
		switch (r->chunk_state)
		{
			case CH_SIZE:
				if ((line = chunk_line(c, &len, &too_long)) == NULL)
					return too_long ? PARSE_ERROR : PARSE_MORE;
				if (!parse_chunk_size(line, len, &r->chunk_left))
					return PARSE_ERROR;
				if (c->body.len + r->chunk_left > MAX_BODY_SIZE)
				{
					*status = 413;
					return PARSE_ERROR;
				}
				r->chunk_state = r->chunk_left ? CH_DATA : CH_TRAILER;
				break;
			case CH_DATA:
				avail = c->in.len - r->chunk_pos;
				if (avail > r->chunk_left)
					avail = r->chunk_left;
				buf_append(&c->body, c->in.data + r->chunk_pos, avail);
				r->chunk_pos += avail;
				r->chunk_left -= avail;
				if (r->chunk_left > 0)
					return PARSE_MORE;
				r->chunk_state = CH_DATA_END;
				break;
			case CH_DATA_END:
				if ((line = chunk_line(c, &len, &too_long)) == NULL)
					return too_long ? PARSE_ERROR : PARSE_MORE;
				if (len != 0)
					return PARSE_ERROR;
				r->chunk_state = CH_SIZE;
				break;
			case CH_TRAILER:
				if ((line = chunk_line(c, &len, &too_long)) == NULL)
					return too_long ? PARSE_ERROR : PARSE_MORE;
				if (len == 0)
				{
					r->req_end = r->chunk_pos;
					return PARSE_DONE;
				}
				break;			/* a trailer field: ignored */
		}
	}
}

static ParseResult
parse_body(Conn *c, int *status)
{
	Request    *r = &c->req;
	size_t		need;

	if (r->chunked)
		return parse_chunked(c, status);
	need = r->content_length > 0 ? (size_t) r->content_length : 0;
	if (c->in.len - r->head_len < need)
		return PARSE_MORE;
	r->req_end = r->head_len + need;
	return PARSE_DONE;
}

static void
request_body(Conn *c, const char **body, size_t *len)
{
	Request    *r = &c->req;

	if (r->chunked)
	{
		*body = c->body.data ? c->body.data : "";
		*len = c->body.len;
	}
	else
	{
		*body = c->in.data + r->head_len;
		*len = r->content_length > 0 ? (size_t) r->content_length : 0;
	}
}

/* the request is dealt with: drop its bytes, keep what follows */
static void
finish_request(Conn *c)
{
	size_t		rest = c->in.len - c->req.req_end;

	if (rest > 0)
		memmove(c->in.data, c->in.data + c->req.req_end, rest);
	c->in.len = rest;
	if (rest == 0)
		buf_clear(&c->in);
	buf_clear(&c->body);
	request_init(&c->req);
	c->state = CS_HEAD;
}

/* ----------------------------------------------------------------
 * Control endpoints
 * ----------------------------------------------------------------
 */
static void
format_config(const SimConfig *cfg, Buf *out)
{
	buf_printf(out,
			   "latency_ms %d\nlatency_p99_ms %d\nhold_ms %d\np_timeout %g\nq %g\n"
			   "p_5xx %g\np_4xx %g\np_reset %g\np_429 %g\nidempotency %d\n"
			   "status_5xx %d\nretry_after %d\nseed %" PRIu64 "\n",
			   cfg->latency_ms, cfg->latency_p99_ms, cfg->hold_ms, cfg->p_timeout, cfg->q,
			   cfg->p_5xx, cfg->p_4xx, cfg->p_reset, cfg->p_429,
			   cfg->idempotency ? 1 : 0, cfg->status_5xx, cfg->retry_after,
			   cfg->seed);
	resolve_config_format(&cfg->resolve, out);
}

bool
parse_prob_str(const char *s, double *out)
{
	char	   *end;
	double		v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !(v >= 0.0 && v <= 1.0))
		return false;
	*out = v;
	return true;
}

static bool
parse_long_str(const char *s, long min, long max, long *out)
{
	char	   *end;
	long		v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
		return false;
	*out = v;
	return true;
}

bool
parse_int_str(const char *s, int min, int max, int *out)
{
	long		v;

	if (!parse_long_str(s, min, max, &v))
		return false;
	*out = (int) v;
	return true;
}

/* apply one name=value to cfg; false when unknown or out of range */
static bool
config_set(SimConfig *cfg, const char *name, const char *val)
{
	int			flag;
	long		seed;
	bool		known;

	if (strcmp(name, "latency_ms") == 0)
		return parse_int_str(val, 0, 86400000, &cfg->latency_ms);
	if (strcmp(name, "latency_p99_ms") == 0)
		return parse_int_str(val, 0, 86400000, &cfg->latency_p99_ms);
	if (strcmp(name, "hold_ms") == 0)
		return parse_int_str(val, 0, 86400000, &cfg->hold_ms);
	if (strcmp(name, "p_timeout") == 0)
		return parse_prob_str(val, &cfg->p_timeout);
	if (strcmp(name, "q") == 0)
		return parse_prob_str(val, &cfg->q);
	if (strcmp(name, "p_5xx") == 0)
		return parse_prob_str(val, &cfg->p_5xx);
	if (strcmp(name, "p_4xx") == 0)
		return parse_prob_str(val, &cfg->p_4xx);
	if (strcmp(name, "p_reset") == 0)
		return parse_prob_str(val, &cfg->p_reset);
	if (strcmp(name, "p_429") == 0)
		return parse_prob_str(val, &cfg->p_429);
	if (strcmp(name, "status_5xx") == 0)
		return parse_int_str(val, 500, 599, &cfg->status_5xx);
	if (strcmp(name, "retry_after") == 0)
		return parse_int_str(val, 0, 86400000, &cfg->retry_after);
	if (strcmp(name, "idempotency") == 0)
	{
		if (!parse_int_str(val, 0, 1, &flag))
			return false;
		cfg->idempotency = flag == 1;
		return true;
	}
	if (strcmp(name, "seed") == 0)
	{
		if (!parse_long_str(val, 0, LONG_MAX, &seed))
			return false;
		cfg->seed = (uint64_t) seed;
		return true;
	}
	return resolve_config_set(&cfg->resolve, name, val, &known);
}

/*
 * Apply "a=1&b=2" to a copy of cfg; on any bad pair nothing changes and
 * the offending pair is reported in err.
 */
static bool
config_apply_query(SimConfig *cfg, const char *query, size_t qlen,
				   bool *reseed, Buf *err)
{
	SimConfig	copy = *cfg;
	char	   *q = strndup(query, qlen);
	char	   *save = NULL;
	bool		ok = true;

	*reseed = false;
	for (char *pair = strtok_r(q, "&", &save); pair; pair = strtok_r(NULL, "&", &save))
	{
		char	   *eq = strchr(pair, '=');

		if (eq != NULL)
			*eq = '\0';
		if (eq == NULL || !config_set(&copy, pair, eq + 1))
		{
			buf_printf(err, "bad parameter: %s\n", pair);
			ok = false;
			break;
		}
		if (strcmp(pair, "seed") == 0)
			*reseed = true;
	}
	free(q);
	if (ok && !resolve_config_check(&copy.resolve, err))
		ok = false;
	if (ok)
		*cfg = copy;
	return ok;
}

static void
format_stats(Buf *out)
{
	const SimStats *s = &sim.stats;

	buf_printf(out,
			   "requests %" PRIu64 "\ndelivered %" PRIu64 "\ntimeouts %" PRIu64 "\n"
			   "resets %" PRIu64 "\nstatus_2xx %" PRIu64 "\nstatus_3xx %" PRIu64 "\n"
			   "status_4xx %" PRIu64 "\n"
			   "status_429 %" PRIu64 "\nstatus_5xx %" PRIu64 "\ninflight %" PRId64 "\n"
			   "connections_open %" PRId64 "\nkeys %zu\nmalformed %" PRIu64 "\n"
			   "answered %" PRIu64 "\nbatch_calls %" PRIu64 "\nbatch_messages %" PRIu64 "\n",
			   s->requests, s->delivered, s->timeouts, s->resets, s->status_2xx,
			   s->status_3xx, s->status_4xx, s->status_429, s->status_5xx, s->inflight,
			   s->connections_open, sim.ledger.count, s->malformed, s->answered,
			   s->batch_calls, s->batch_messages);
	resolve_stats_format(out);
}

/* clear the ledger and the counters (gauges stay) */
static void
sim_reset(void)
{
	SimStats	kept = sim.stats;

	ledger_free(&sim.ledger);
	ledger_init(&sim.ledger);
	memset(&sim.stats, 0, sizeof(sim.stats));
	sim.stats.inflight = kept.inflight;
	sim.stats.connections_open = kept.connections_open;
	resolve_reset();
}

static int
hex_digit(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/*
 * append the URL-decoded s to out: %XX, and + as a blank when plus (a
 * query string, not a path); false on a bad %XX
 */
static bool
url_decode(const char *s, size_t n, bool plus, Buf *out)
{
	buf_reserve(out, n);
	for (size_t i = 0; i < n; i++)
	{
		if (s[i] == '%')
		{
			int			hi,
						lo;

			if (i + 2 >= n)
				return false;
			hi = hex_digit(s[i + 1]);
			lo = hex_digit(s[i + 2]);
			if (hi < 0 || lo < 0)
				return false;
			out->data[out->len++] = (char) (hi * 16 + lo);
			i += 2;
		}
		else
			out->data[out->len++] = s[i] == '+' && plus ? ' ' : s[i];
	}
	return true;
}

/*
 * The URL-decoded value of the first parameter called name in a query
 * string, appended to out: 1 found, 0 absent, -1 badly encoded.
 */
static int
query_param(const char *q, size_t qlen, const char *name, Buf *out)
{
	size_t		nlen = strlen(name);
	const char *p = q,
			   *end = q + qlen;

	while (p < end)
	{
		const char *amp = memchr(p, '&', end - p);
		const char *pair_end = amp ? amp : end;
		const char *eq = memchr(p, '=', pair_end - p);
		const char *name_end = eq ? eq : pair_end;

		if ((size_t) (name_end - p) == nlen && memcmp(p, name, nlen) == 0)
		{
			const char *val = eq ? eq + 1 : pair_end;

			return url_decode(val, pair_end - val, true, out) ? 1 : -1;
		}
		p = amp ? amp + 1 : end;
	}
	return 0;
}

/*
 * The text of GET /last: "method M", "target T", a "header Name: value"
 * line per header in received order, "body-length N" (as received),
 * "body-truncated-to N" when only the first N bytes were kept, an empty
 * line, then the (kept) body bytes.
 */
static void
format_last(const LastRequest *last, Buf *out)
{
	const char *head = last->data;
	const char *end = head + last->head_len;
	const char *next,
			   *p,
			   *sp1,
			   *sp2;
	size_t		len = line_length(head, end, &next);

	/* the request line was checked when the request was parsed */
	sp1 = memchr(head, ' ', len);
	sp2 = memchr(sp1 + 1, ' ', head + len - (sp1 + 1));
	buf_puts(out, "method ");
	buf_append(out, head, sp1 - head);
	buf_puts(out, "\ntarget ");
	buf_append(out, sp1 + 1, sp2 - (sp1 + 1));
	buf_puts(out, "\n");
	for (p = next; p < end; p = next)
	{
		const char *colon,
				   *val;
		size_t		vlen;

		len = line_length(p, end, &next);
		if (len == 0)
			break;
		colon = memchr(p, ':', len);
		val = header_value(colon, p + len, &vlen);
		buf_puts(out, "header ");
		buf_append(out, p, colon - p);
		buf_puts(out, ": ");
		buf_append(out, val, vlen);
		buf_puts(out, "\n");
	}
	buf_printf(out, "body-length %zu\n", last->body_len);
	if (last->body_stored < last->body_len)
		buf_printf(out, "body-truncated-to %zu\n", last->body_stored);
	buf_puts(out, "\n");
	buf_append(out, last->data + last->head_len, last->body_stored);
}

/*
 * GET /last?key=K, under sim.lock.  K is URL-decoded, then escaped like a
 * key header, so that both the ledger's spelling of a key and the raw
 * header value find it.  Returns the status.
 */
static int
handle_last(Conn *c, Buf *text)
{
	Request    *r = &c->req;
	Buf			raw = {0};
	Buf		   *key = &c->worker->keybuf;
	LedgerEntry *e;
	int			found;
	int			status = 200;

	key->len = 0;
	found = query_param(c->in.data + r->query_off, r->query_len, "key", &raw);
	if (found < 0)
	{
		buf_puts(text, "bad %XX in the key parameter\n");
		status = 400;
	}
	else if (found == 0 || raw.len == 0)
	{
		buf_puts(text, "missing key parameter\n");
		status = 400;
	}
	else
	{
		ledger_key_escape(raw.data, raw.len, key);
		e = ledger_find(&sim.ledger, key->data, key->len);
		if (e == NULL || e->last == NULL)
		{
			buf_puts(text, "unknown key\n");
			status = 404;
		}
		else
			format_last(e->last, text);
	}
	buf_free(&raw);
	buf_clear(key);
	return status;
}

/*
 * A whole-number query parameter: def when absent, false when not a
 * number from 0 to max (the text then says which).
 */
static bool
query_uint(const Request *r, const char *base, const char *name, int64_t def,
		   int64_t max, int64_t *out, Buf *text)
{
	Buf			raw = {0};
	int			found = query_param(base + r->query_off, r->query_len, name, &raw);
	bool		ok = true;

	*out = def;
	if (found != 0 && (found < 0 || !parse_uint(raw.data, raw.len, max, out)))
	{
		buf_printf(text, "bad %s parameter\n", name);
		ok = false;
	}
	buf_free(&raw);
	return ok;
}

/*
 * GET /dlrs?after=SEQ&limit=N, under sim.lock: the delivery reports
 * available now with a seq above SEQ (default 0), N at most (default
 * 1000), one a line (sim_resolve.c).  Returns the status.
 */
static int
handle_dlrs(Conn *c, Buf *text)
{
	int64_t		after,
				limit;

	if (!query_uint(&c->req, c->in.data, "after", 0, INT64_C(1) << 52, &after, text) ||
		!query_uint(&c->req, c->in.data, "limit", 1000, 1000000, &limit, text))
		return 400;
	resolve_dlrs_format((uint64_t) after, (uint64_t) limit, monotonic_us(), text);
	return 200;
}

static bool
method_allowed(const Request *r)
{
	if (r->method == M_GET || r->method == M_HEAD)
		return true;
	return r->method == M_POST &&
		(r->endpoint == EP_RESET || r->endpoint == EP_CONFIG);
}

/* answer a control endpoint; they are never counted nor faulted */
static void
handle_control(Conn *c)
{
	Request    *r = &c->req;
	Buf		   *text = &c->worker->scratch;
	int			status = 200;

	text->len = 0;
	if (!method_allowed(r))
	{
		append_text(&c->out, r, 405, "405 Method Not Allowed\n");
		return;
	}
	sim_lock();
	switch (r->endpoint)
	{
		case EP_HEALTH:
			buf_puts(text, "ok");
			break;
		case EP_LEDGER:
			ledger_format(&sim.ledger, text);
			break;
		case EP_STATS:
			format_stats(text);
			break;
		case EP_LAST:
			status = handle_last(c, text);
			break;
		case EP_DLRS:
			status = handle_dlrs(c, text);
			break;
		case EP_RESET:
			sim_reset();
			buf_puts(text, "ok\n");
			break;
		case EP_CONFIG:
			{
				bool		reseed;

				if (!config_apply_query(&sim.config, c->in.data + r->query_off,
										r->query_len, &reseed, text))
					status = 400;
				else
				{
					if (reseed)
					{
						sim.prng = sim.config.seed;
						sim.prng_latency = sim.config.seed ^ PRNG_LATENCY_SALT;
						resolve_reseed(sim.config.seed);
					}
					format_config(&sim.config, text);
				}
				break;
			}
		case EP_SIM:
		case EP_LOOKUP:
		case EP_BATCH:
			break;
	}
	sim_unlock();
	append_response(&c->out, r, status, "text/plain", text->data ? text->data : "",
					text->len, -1, NULL);
	buf_clear(text);
}

/* ----------------------------------------------------------------
 * The simulated provider
 * ----------------------------------------------------------------
 */
typedef struct Outcome
{
	Action		action;
	int			status;			/* ACT_RESPOND */
	bool		deliver;		/* the provider acted (sent the SMS) */
	int			retry_after;	/* -1: no Retry-After */
} Outcome;

static void
outcome_status(Outcome *o, int status, int retry_after)
{
	o->action = ACT_RESPOND;
	o->status = status;
	o->retry_after = retry_after;
}

/* the outcome named by X-Sim-Fault (and X-Sim-Fail-First) */
static void
decide_forced(const Request *r, const SimConfig *cfg, uint64_t received, Outcome *o)
{
	Fault		fault = r->fault;
	int			status = r->fault_status;

	if (fault == FAULT_RANDOM)
	{
		fault = FAULT_STATUS;	/* X-Sim-Fail-First alone: 500 */
		status = 500;
	}
	if (r->fail_first >= 0 && received > (uint64_t) r->fail_first)
		fault = FAULT_OK;
	switch (fault)
	{
		case FAULT_RANDOM:
		case FAULT_OK:
		case FAULT_GARBLED:
			outcome_status(o, 200, -1);
			o->deliver = true;
			return;
		case FAULT_TIMEOUT:
		case FAULT_TIMEOUT_DELIVERED:
			o->action = ACT_HOLD;
			o->deliver = fault == FAULT_TIMEOUT_DELIVERED;
			break;
		case FAULT_RESET:
		case FAULT_RESET_DELIVERED:
			o->action = ACT_RESET;
			o->deliver = fault == FAULT_RESET_DELIVERED;
			break;
		case FAULT_STATUS:
			if (status == 429)
				outcome_status(o, 429, r->retry_after >= 0 ?
							   r->retry_after : cfg->retry_after);
			else
				outcome_status(o, status, status == 503 ? r->retry_after : -1);
			o->deliver = false;
			break;
	}
	if (r->deliver >= 0)
		o->deliver = r->deliver == 1;
}

/*
 * Draw the outcome from the configured probabilities.  Six numbers are
 * drawn per request, always in the order timeout, q, 5xx, 4xx, reset, 429,
 * so that a seed gives the same sequence whatever the probabilities; the
 * first fault whose draw falls below its probability wins.
 */
static void
decide_random(const Request *r, const SimConfig *cfg, Outcome *o)
{
	double		d_timeout = prng_double(&sim.prng);
	double		d_q = prng_double(&sim.prng);
	double		d_5xx = prng_double(&sim.prng);
	double		d_4xx = prng_double(&sim.prng);
	double		d_reset = prng_double(&sim.prng);
	double		d_429 = prng_double(&sim.prng);
	bool		q_hit = d_q < cfg->q;

	if (d_timeout < cfg->p_timeout)
	{
		o->action = ACT_HOLD;
		o->deliver = q_hit;
	}
	else if (d_5xx < cfg->p_5xx)
	{
		outcome_status(o, cfg->status_5xx,
					   cfg->status_5xx == 503 ? r->retry_after : -1);
		o->deliver = q_hit;
	}
	else if (d_4xx < cfg->p_4xx)
		outcome_status(o, 400, -1);
	else if (d_reset < cfg->p_reset)
	{
		o->action = ACT_RESET;
		o->deliver = q_hit;
	}
	else if (d_429 < cfg->p_429)
		outcome_status(o, 429, r->retry_after >= 0 ? r->retry_after : cfg->retry_after);
	else
	{
		outcome_status(o, 200, -1);
		o->deliver = true;
	}
}

static void
count_outcome(const Outcome *o)
{
	SimStats   *s = &sim.stats;

	if (o->action == ACT_HOLD)
	{
		s->timeouts++;
		s->inflight++;
	}
	else if (o->action == ACT_RESET)
		s->resets++;
	else if (o->status < 300)
		s->status_2xx++;
	else if (o->status < 400)
		s->status_3xx++;
	else if (o->status == 429)
		s->status_429++;
	else if (o->status < 500)
		s->status_4xx++;
	else
		s->status_5xx++;
}

/* z of the 99th percentile of the standard normal distribution */
#define Z_P99		2.3263478740408408

/*
 * An answer's delay: latency_ms, or with latency_p99_ms above it a draw
 * from the lognormal of that median and 99th percentile (Box-Muller, two
 * uniform draws of the latency stream per answer), at most hold_ms.
 */
static int
answer_latency_ms(const SimConfig *cfg)
{
	double		u1,
				u2,
				sigma,
				ms;

	if (cfg->latency_p99_ms <= cfg->latency_ms || cfg->latency_ms <= 0)
		return cfg->latency_ms;
	u1 = prng_double(&sim.prng_latency);
	u2 = prng_double(&sim.prng_latency);
	sigma = log((double) cfg->latency_p99_ms / cfg->latency_ms) / Z_P99;
	ms = cfg->latency_ms * exp(sigma * sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2));
	if (ms > cfg->hold_ms)
		ms = cfg->hold_ms;
	return (int) (ms + 0.5);
}

/*
 * Record a received request in the ledger and decide what happens to it.
 * Runs under sim.lock.  With --idempotency a key delivered before is not
 * delivered again, whatever the outcome.  Else, with --dedup-window-ms, a
 * repeat of a key header delivered inside its window is not delivered
 * again and is answered 200 (the faults are drawn all the same, and an
 * X-Sim-Fault still names the answer), unless it is one of the
 * --dedup-breaks share, handled as usual.  Each delivered copy may get a
 * DLR (sim_resolve.c).  Returns the key's entry.
 */
static LedgerEntry *
record_and_decide(const Request *r, const char *key, size_t keylen,
				  uint64_t body_hash, Outcome *o, int *delay_ms, int *hold_ms)
{
	const SimConfig *cfg = &sim.config;
	LedgerEntry *e = ledger_receive(&sim.ledger, key, keylen, body_hash);
	DedupVerdict dedup = DEDUP_NEW;
	int64_t		now_us = monotonic_us();

	memset(o, 0, sizeof(*o));
	o->retry_after = -1;
	sim.stats.requests++;
	if (!cfg->idempotency && r->has_key && cfg->resolve.dedup_window_ms > 0)
		dedup = resolve_dedup(&cfg->resolve, &e->dedup, now_us);
	if (r->fault != FAULT_RANDOM || r->fail_first >= 0)
		decide_forced(r, cfg, e->received, o);
	else
	{
		decide_random(r, cfg, o);
		if (dedup == DEDUP_REPEAT)
			outcome_status(o, 200, -1);
	}
	if (dedup == DEDUP_REPEAT)
		o->deliver = false;
	if (o->deliver && !(cfg->idempotency && e->delivered > 0))
	{
		e->delivered++;
		sim.stats.delivered++;
		resolve_delivered(&cfg->resolve, &e->dedup, key, keylen, now_us, e->last_us);
	}
	count_outcome(o);
	*delay_ms = r->latency_ms >= 0 ? r->latency_ms : answer_latency_ms(cfg);
	*hold_ms = cfg->hold_ms;
	return e;
}

/*
 * The ledger key of a request: its key header, escaped by ledger_key_escape();
 * else "body:" and the body hash.
 */
static void
request_key(Conn *c, uint64_t body_hash, Buf *key)
{
	Request    *r = &c->req;

	key->len = 0;
	if (!r->has_key)
		buf_printf(key, "body:%016" PRIx64, body_hash);
	else
		ledger_key_escape(c->in.data + r->key_off, r->key_len, key);
}

/*
 * Where a redirect fault sends the client: /redirected on the address and
 * port the connection came in on (http://127.0.0.1:PORT/redirected with
 * the default --bind).
 */
static void
redirect_location(Conn *c, char *loc, size_t size)
{
	struct sockaddr_storage ss;
	socklen_t	sslen = sizeof(ss);
	char		addr[INET6_ADDRSTRLEN] = "127.0.0.1";
	int			port = listen_port;

	if (getsockname(c->src.fd, (struct sockaddr *) &ss, &sslen) == 0)
	{
		if (ss.ss_family == AF_INET)
		{
			struct sockaddr_in *sin = (struct sockaddr_in *) &ss;

			inet_ntop(AF_INET, &sin->sin_addr, addr, sizeof(addr));
			port = ntohs(sin->sin_port);
		}
		else if (ss.ss_family == AF_INET6)
		{
			struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *) &ss;

			port = ntohs(sin6->sin6_port);
			if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr))
				inet_ntop(AF_INET, &sin6->sin6_addr.s6_addr[12], addr, sizeof(addr));
			else
			{
				inet_ntop(AF_INET6, &sin6->sin6_addr, addr, sizeof(addr));
				snprintf(loc, size, "http://[%s]:%d/redirected", addr, port);
				return;
			}
		}
	}
	snprintf(loc, size, "http://%s:%d/redirected", addr, port);
}

/* bytes into a JSON string's contents */
static void
buf_json_escaped(Buf *b, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
	{
		if (s[i] == '"' || s[i] == '\\')
			buf_append(b, "\\", 1);
		buf_append(b, s + i, 1);
	}
}

/* the answer of the simulated provider: JSON, or an empty redirect */
static void
build_sim_answer(Conn *c, const Outcome *o, const char *key, size_t keylen,
				 const char *req_body, size_t req_body_len)
{
	Buf		   *body = &c->worker->scratch;

	c->pending.len = 0;
	if (is_redirect(o->status))
	{
		char		location[INET6_ADDRSTRLEN + 32];

		redirect_location(c, location, sizeof(location));
		append_response(&c->pending, &c->req, o->status, NULL, "", 0, -1, location);
		return;
	}
	body->len = 0;
	if (o->status != 200 && c->req.echo == 1)
	{
		/* what a careless API does: echo the credential and the request */
		buf_printf(body, "{\"status\":\"error\",\"code\":%d,\"authorization\":\"", o->status);
		buf_json_escaped(body, c->in.data + c->req.auth_off, c->req.auth_len);
		buf_puts(body, "\",\"request\":\"");
		buf_json_escaped(body, req_body, req_body_len);
		buf_puts(body, "\"}");
		append_response(&c->pending, &c->req, o->status, "application/json",
						body->data, body->len, o->retry_after, NULL);
		buf_clear(body);
		return;
	}
	if (o->status == 200)
		buf_puts(body, "{\"status\":\"accepted\",\"key\":\"");
	else
		buf_printf(body, "{\"status\":\"error\",\"code\":%d,\"key\":\"", o->status);
	buf_json_escaped(body, key, keylen);
	buf_puts(body, "\"}");
	append_response(&c->pending, &c->req, o->status, "application/json",
					body->data, body->len, o->retry_after, NULL);
	buf_clear(body);
}

/* a delayed (or immediate) answer is due: queue it, or reset */
static void
conn_answer(Conn *c)
{
	if (c->pending_action == ACT_RESET)
		c->close_mode = CLOSE_RESET;
	else
	{
		buf_append(&c->out, c->pending.data, c->pending.len);
		if (c->close_when_answered)
			c->close_mode = CLOSE_GRACEFUL;
		if (!c->lookup)
		{
			sim_lock();
			sim.stats.answered++;
			sim_unlock();
		}
	}
	buf_clear(&c->pending);
	c->state = CS_HEAD;
}

/*
 * The request is decided (its answer, if any, in c->pending): done with
 * its bytes, then answer now, after delay_ms, or hold it for hold_ms.
 */
static void
conn_schedule(Conn *c, Action action, int delay_ms, int hold_ms)
{
	c->pending_action = action;
	c->close_when_answered = !c->req.keep_alive;
	finish_request(c);
	if (action == ACT_HOLD)
	{
		c->state = CS_HELD;
		timer_set(c, hold_ms);
	}
	else if (delay_ms > 0)
	{
		c->state = CS_WAIT;
		timer_set(c, delay_ms);
	}
	else
		conn_answer(c);
}

static void
simulate(Conn *c, const char *body, size_t body_len)
{
	Request    *r = &c->req;
	Buf		   *key = &c->worker->keybuf;
	LedgerEntry *e;
	uint64_t	hash;
	Outcome		o;
	int			delay_ms,
				hold_ms;

	if (r->method == M_GET || r->method == M_HEAD)
		hash = fnv1a(c->in.data + r->query_off, r->query_len);
	else
		hash = fnv1a(body, body_len);
	request_key(c, hash, key);

	sim_lock();
	e = record_and_decide(r, key->data, key->len, hash, &o, &delay_ms, &hold_ms);
	ledger_record_last(e, c->in.data, r->head_len, body, body_len);
	sim_unlock();

	if (o.action == ACT_RESPOND)
		build_sim_answer(c, &o, key->data, key->len, body, body_len);
	buf_clear(key);
	conn_schedule(c, o.action, delay_ms, hold_ms);
}

/*
 * POST /batch: many messages in one request (sim_batch.c reads them), each
 * recorded in the ledger under its "ref" member (else "body:" and its
 * hash).  The call's outcome is decided once, as for /send, from its
 * X-Sim-Fault or the drawn faults (a held call, a reset, a status): each
 * message is delivered when the call's outcome says so (a drawn held,
 * reset or 5xx call: each message with probability q, drawn per message;
 * p is per call, q per message), but a message
 * whose "sim" member is "reject", "unregistered" or "unknown" (never) or "drop" and
 * "unknown_delivered" (always, unless the call was refused).  A 200
 * answers {"results": [{"ref": K, "status": S}, ...]} in the messages'
 * order (X-Sim-Batch-Order: reverse, the reverse), S "accepted",
 * "rejected" or "pending" (unknown), no result for "drop", and for
 * "unregistered" "rejected" with "error": "DeviceNotRegistered"; with
 * X-Sim-Fault: garbled, a 200 whose body is not JSON.  A body that is not
 * a batch: 400, not counted.
 */
static void
simulate_batch(Conn *c, const char *body, size_t body_len)
{
	Request    *r = &c->req;
	const SimConfig *cfg = &sim.config;
	Buf		   *key = &c->worker->keybuf;
	Buf		   *out = &c->worker->scratch;
	SimMessage *msgs;
	char	  **keys;
	size_t	   *key_lens;
	Outcome		o;
	int			n,
				i,
				delay_ms,
				hold_ms;
	int64_t		now_us = monotonic_us();
	bool		reverse = false;
	bool		q_per_message = false;

	/* the messages point into the request's bytes */
	msgs = xcalloc(SIM_BATCH_MAX, sizeof(SimMessage));
	n = sim_batch_parse(body, body_len, "ref", msgs);
	if (n < 0)
	{
		append_text(&c->out, r, 400, "not a batch: a JSON array of objects, or an object with one\n");
		free(msgs);
		if (!r->keep_alive)
			c->close_mode = CLOSE_GRACEFUL;
		finish_request(c);
		return;
	}
	/* X-Sim-Batch-Order: reverse (as spelled here) */
	reverse = memmem(c->in.data, r->head_len, "X-Sim-Batch-Order: reverse", 26) != NULL;
	keys = xcalloc(n + 1, sizeof(char *));
	key_lens = xcalloc(n + 1, sizeof(size_t));
	for (i = 0; i < n; i++)
	{
		key->len = 0;
		if (msgs[i].key)
			ledger_key_escape(msgs[i].key, msgs[i].key_len, key);
		else
			buf_printf(key, "body:%016" PRIx64, fnv1a(msgs[i].text, msgs[i].len));
		keys[i] = xcalloc(key->len + 1, 1);
		memcpy(keys[i], key->data, key->len);
		key_lens[i] = key->len;
	}

	sim_lock();
	memset(&o, 0, sizeof(o));
	o.retry_after = -1;
	sim.stats.requests++;
	sim.stats.batch_calls++;
	sim.stats.batch_messages += n;
	if (r->fault != FAULT_RANDOM || r->fail_first >= 0)
	{
		LedgerEntry *first = n > 0 ? ledger_find(&sim.ledger, keys[0], key_lens[0]) : NULL;

		decide_forced(r, cfg, (first ? first->received : 0) + 1, &o);
	}
	else
	{
		decide_random(r, cfg, &o);
		/* an ambiguous call: each message delivered with probability q */
		q_per_message = o.action != ACT_RESPOND || o.status >= 500;
	}
	for (i = 0; i < n; i++)
	{
		LedgerEntry *e = ledger_receive(&sim.ledger, keys[i], key_lens[i],
										fnv1a(msgs[i].text, msgs[i].len));
		bool		deliver = q_per_message ? prng_double(&sim.prng) < cfg->q : o.deliver;

		ledger_record_last(e, c->in.data, r->head_len, msgs[i].text, msgs[i].len);
		if (msgs[i].fault == MSG_REJECT || msgs[i].fault == MSG_UNKNOWN ||
			msgs[i].fault == MSG_UNREGISTERED)
			deliver = false;
		else if (msgs[i].fault == MSG_DROP || msgs[i].fault == MSG_UNKNOWN_DELIVERED)
			deliver = o.action != ACT_RESPOND || o.status < 400;
		if (deliver && !(cfg->idempotency && e->delivered > 0))
		{
			e->delivered++;
			sim.stats.delivered++;
			resolve_delivered(&cfg->resolve, &e->dedup, keys[i], key_lens[i], now_us, e->last_us);
		}
	}
	count_outcome(&o);
	delay_ms = r->latency_ms >= 0 ? r->latency_ms : answer_latency_ms(cfg);
	hold_ms = cfg->hold_ms;
	sim_unlock();

	if (o.action == ACT_RESPOND)
	{
		out->len = 0;
		c->pending.len = 0;
		if (o.status == 200 && r->fault == FAULT_GARBLED)
			buf_puts(out, "<html>busy</html>");
		else if (o.status == 200)
		{
			bool		first = true;

			buf_puts(out, "{\"results\": [");
			for (int j = 0; j < n; j++)
			{
				int			m = reverse ? n - 1 - j : j;
				const char *status = "accepted";

				if (msgs[m].fault == MSG_DROP)
					continue;
				if (msgs[m].fault == MSG_REJECT || msgs[m].fault == MSG_UNREGISTERED)
					status = "rejected";
				else if (msgs[m].fault == MSG_UNKNOWN || msgs[m].fault == MSG_UNKNOWN_DELIVERED)
					status = "pending";
				buf_puts(out, first ? "{\"ref\": \"" : ", {\"ref\": \"");
				buf_json_escaped(out, keys[m], key_lens[m]);
				buf_printf(out, "\", \"status\": \"%s\"%s}", status,
						   msgs[m].fault == MSG_UNREGISTERED ? ", \"error\": \"DeviceNotRegistered\"" : "");
				first = false;
			}
			buf_puts(out, "]}");
		}
		else
			buf_printf(out, "{\"status\":\"error\",\"code\":%d}", o.status);
		append_response(&c->pending, r, o.status, "application/json", out->data, out->len,
						o.retry_after, NULL);
		buf_clear(out);
	}
	for (i = 0; i < n; i++)
		free(keys[i]);
	free(keys);
	free(key_lens);
	free(msgs);
	buf_clear(key);
	conn_schedule(c, o.action, delay_ms, hold_ms);
}

/*
 * GET /status/K or GET /status?ref=K: the provider's status lookup, by
 * the key header's value K (URL-decoded: %XX, and + too in ref=, not in
 * the path; then escaped like a key header, so that the ledger's
 * spelling finds it as well).  Not a receipt: the ledger is read, never
 * written.  One number drawn per lookup fails a --p-lookup-fail share:
 * answered --lookup-fail-mode's status, or held until the client gives up
 * (hold_ms at most).  Else 200 {"ref":K,"status":"delivered"} when the
 * ledger has a delivered copy of K, 404 {"ref":K,"status":"not_found"}
 * when not (unknown, or received and never delivered), as the ledger is
 * when the lookup arrives; every answer after --lookup-latency-ms (or
 * X-Sim-Latency-Ms).  A bad or missing K is answered 400 at once, not
 * counted.
 */
static void
handle_lookup(Conn *c)
{
	Request    *r = &c->req;
	Buf			raw = {0};
	Buf		   *key = &c->worker->keybuf;
	Buf		   *body = &c->worker->scratch;
	const char *error = NULL;
	int			error_status = 400;
	int			found;
	int			status = 200;
	int			fail_status,
				delay_ms,
				hold_ms;
	LookupVerdict v;
	LedgerEntry *e;

	if (r->method != M_GET && r->method != M_HEAD)
	{
		error = "405 Method Not Allowed\n";
		error_status = 405;
	}
	else
	{
		if (r->path_len >= 8)
			found = url_decode(c->in.data + r->path_off + 8, r->path_len - 8, false, &raw) ? 1 : -1;
		else
			found = query_param(c->in.data + r->query_off, r->query_len, "ref", &raw);
		if (found < 0)
			error = "bad %XX in the key\n";
		else if (found == 0 || raw.len == 0)
			error = "missing key: GET /status/KEY or /status?ref=KEY\n";
	}
	if (error != NULL)
	{
		append_text(&c->out, r, error_status, error);
		buf_free(&raw);
		if (!r->keep_alive)
			c->close_mode = CLOSE_GRACEFUL;
		finish_request(c);
		return;
	}
	key->len = 0;
	ledger_key_escape(raw.data, raw.len, key);
	buf_free(&raw);

	sim_lock();
	e = ledger_find(&sim.ledger, key->data, key->len);
	v = resolve_lookup(&sim.config.resolve, e != NULL && e->delivered > 0);
	fail_status = sim.config.resolve.lookup_fail_status;
	delay_ms = r->latency_ms >= 0 ? r->latency_ms : sim.config.resolve.lookup_latency_ms;
	hold_ms = sim.config.hold_ms;
	sim_unlock();

	body->len = 0;
	buf_puts(body, "{\"ref\":\"");
	buf_json_escaped(body, key->data, key->len);
	if (v == LOOKUP_FOUND)
		buf_puts(body, "\",\"status\":\"delivered\"}");
	else if (v == LOOKUP_NOT_FOUND)
	{
		status = 404;
		buf_puts(body, "\",\"status\":\"not_found\"}");
	}
	else
	{
		status = fail_status;
		buf_printf(body, "\",\"status\":\"error\",\"code\":%d}", status);
	}
	buf_clear(key);
	c->pending.len = 0;
	if (v != LOOKUP_FAILED || fail_status > 0)
		append_response(&c->pending, r, status, "application/json",
						body->data, body->len, -1, NULL);
	buf_clear(body);
	conn_schedule(c, v == LOOKUP_FAILED && fail_status == 0 ? ACT_HOLD : ACT_RESPOND,
				  delay_ms, hold_ms);
}

/* a complete request has been read */
static void
dispatch(Conn *c)
{
	const char *body;
	size_t		body_len;

	request_body(c, &body, &body_len);
	c->lookup = c->req.endpoint == EP_LOOKUP;
	if (c->req.endpoint == EP_SIM)
	{
		simulate(c, body, body_len);
		return;
	}
	if (c->req.endpoint == EP_BATCH)
	{
		simulate_batch(c, body, body_len);
		return;
	}
	if (c->lookup)
	{
		handle_lookup(c);
		return;
	}
	handle_control(c);
	if (!c->req.keep_alive)
		c->close_mode = CLOSE_GRACEFUL;
	finish_request(c);
}

/* ----------------------------------------------------------------
 * Connection events
 * ----------------------------------------------------------------
 */

/* parse and dispatch buffered requests until one waits or input runs out */
static bool
conn_process(Conn *c)
{
	while (c->close_mode == CLOSE_NONE &&
		   (c->state == CS_HEAD || c->state == CS_BODY))
	{
		ParseResult res;
		int			status = 400;

		if (c->state == CS_HEAD)
		{
			res = parse_head(c, &status);
			if (res == PARSE_DONE)
			{
				start_body(c);
				continue;
			}
		}
		else
			res = parse_body(c, &status);

		if (res == PARSE_MORE)
			break;
		if (res == PARSE_ERROR)
			conn_reject(c, status);
		else
			dispatch(c);
	}
	/* the peer stopped sending: nothing more will come */
	if (c->peer_eof && c->close_mode == CLOSE_NONE &&
		(c->state == CS_HEAD || c->state == CS_BODY))
		c->close_mode = CLOSE_GRACEFUL;
	return conn_flush(c);
}

/* read what arrived; false when the connection went away */
static bool
conn_read(Conn *c)
{
	for (int i = 0; i < 8; i++)
	{
		size_t		room;
		ssize_t		n;

		if (c->state == CS_LINGER)
			c->in.len = 0;
		buf_reserve(&c->in, READ_CHUNK);
		room = c->in.cap - c->in.len;
		n = recv(c->src.fd, c->in.data + c->in.len, room, 0);
		if (n > 0)
		{
			c->in.len += n;
			if ((size_t) n < room)
				break;
		}
		else if (n == 0)
		{
			c->peer_eof = true;
			break;
		}
		else if (errno == EAGAIN || errno == EWOULDBLOCK)
			break;
		else if (errno != EINTR)
		{
			conn_close(c, false);
			return false;
		}
	}
	return true;
}

static void
conn_on_readable(Conn *c)
{
	if (!conn_read(c))
		return;
	switch (c->state)
	{
		case CS_LINGER:
			c->in.len = 0;
			if (c->peer_eof)
				conn_close(c, false);
			return;
		case CS_HELD:
			/* the client gave up (or misbehaves): clean up */
			if (c->peer_eof || c->in.len > MAX_BUFFERED)
				conn_close(c, false);
			return;
		case CS_WAIT:
			if (c->in.len > MAX_BUFFERED)
				conn_close(c, false);
			else
				conn_update_events(c);
			return;
		case CS_HEAD:
		case CS_BODY:
			conn_process(c);
			return;
	}
}

static void
conn_on_event(Conn *c, uint32_t events)
{
	/* an error, or a hang-up after the end of input: the peer is gone */
	if ((events & EPOLLERR) || ((events & EPOLLHUP) && c->peer_eof))
	{
		conn_close(c, false);
		return;
	}
	if ((events & EPOLLOUT) && !conn_flush(c))
		return;
	if ((events & (EPOLLIN | EPOLLHUP)) && !c->peer_eof)
		conn_on_readable(c);
}

static void
conn_on_timer(Conn *c)
{
	switch (c->state)
	{
		case CS_WAIT:
			conn_answer(c);
			conn_process(c);
			break;
		case CS_HELD:
		case CS_LINGER:
			conn_close(c, false);
			break;
		case CS_HEAD:
		case CS_BODY:
			break;
	}
}

static void
conn_open(Worker *w, int fd)
{
	Conn	   *c = xcalloc(1, sizeof(Conn));
	struct epoll_event ev;
	int			one = 1;

	c->src.kind = SRC_CONN;
	c->src.fd = fd;
	c->worker = w;
	c->heap_idx = -1;
	c->state = CS_HEAD;
	request_init(&c->req);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	ev.events = c->events = EPOLLIN;
	ev.data.ptr = &c->src;
	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
	{
		close(fd);
		free(c);
		return;
	}
	c->next = w->conns;
	if (w->conns)
		w->conns->prev = c;
	w->conns = c;
	stat_add(&sim.stats.connections_open, 1);
}

/* out of descriptors: accept and drop one, so the backlog keeps moving */
static void
shed_connection(void)
{
	int			fd;

	sim_lock();
	if (spare_fd >= 0)
	{
		close(spare_fd);
		fd = accept(listen_src.fd, NULL, NULL);
		if (fd >= 0)
			close(fd);
		spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	sim_unlock();
}

static void
worker_accept(Worker *w)
{
	for (int i = 0; i < ACCEPT_BATCH; i++)
	{
		int			fd = accept4(listen_src.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd >= 0)
			conn_open(w, fd);
		else if (errno == EINTR || errno == ECONNABORTED)
			continue;
		else
		{
			if (errno == EMFILE || errno == ENFILE)
				shed_connection();
			return;
		}
	}
}

/* ----------------------------------------------------------------
 * Workers
 * ----------------------------------------------------------------
 */
static void
worker_watch(Worker *w, Source *src, uint32_t events)
{
	struct epoll_event ev;

	ev.events = events;
	ev.data.ptr = src;
	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, src->fd, &ev) < 0)
	{
		perror("provider_sim: epoll_ctl");
		exit(1);
	}
}

static void
worker_init(Worker *w)
{
	memset(w, 0, sizeof(*w));
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (w->epfd < 0)
	{
		perror("provider_sim: epoll_create1");
		exit(1);
	}
	/* with several threads one listener wakes one of them at a time */
	worker_watch(w, &listen_src, EPOLLIN | (opts.threads > 1 ? EPOLLEXCLUSIVE : 0));
	/* never read: every worker sees it and stops */
	worker_watch(w, &signal_src, EPOLLIN);
}

static void
timers_run(Worker *w)
{
	while (w->timers.n > 0 && w->timers.items[0]->timer_at <= w->now_us)
	{
		Conn	   *c = w->timers.items[0];

		timer_cancel(c);
		conn_on_timer(c);
	}
}

static void *
worker_run(void *arg)
{
	Worker	   *w = arg;
	struct epoll_event events[MAX_EVENTS];

	while (!w->stop)
	{
		int			n;

		w->now_us = monotonic_us();
		n = epoll_wait(w->epfd, events, MAX_EVENTS, timers_timeout(w));
		if (n < 0 && errno != EINTR)
		{
			perror("provider_sim: epoll_wait");
			exit(1);
		}
		w->now_us = monotonic_us();
		for (int i = 0; i < n; i++)
		{
			Source	   *src = events[i].data.ptr;

			if (src->kind == SRC_CONN)
				conn_on_event((Conn *) src, events[i].events);
			else if (src->kind == SRC_LISTENER)
				worker_accept(w);
			else
				w->stop = true;
		}
		timers_run(w);
	}
	return NULL;
}

static void
worker_cleanup(Worker *w)
{
	while (w->conns)
		conn_close(w->conns, false);
	free(w->timers.items);
	buf_free(&w->scratch);
	buf_free(&w->keybuf);
	close(w->epfd);
}

/* ----------------------------------------------------------------
 * Start-up and shut-down
 * ----------------------------------------------------------------
 */
static void
usage(FILE *f)
{
	fprintf(f,
			"Usage: provider_sim [OPTION]...\n"
			"Fault-injecting HTTP/1.1 SMS/push provider simulator.\n\n"
			"  --port N            listen port (default 8089, 0: any free port)\n"
			"  --bind ADDR         listen address (default 127.0.0.1)\n"
			"  --latency-ms N      delay before answering (default 0)\n"
			"  --latency-p99-ms P  with P > N: each delay lognormal, median N, 99th\n"
			"                      percentile P (at most --hold-ms; default 0: fixed)\n"
			"  --seed N            PRNG seed (default 1)\n"
			"  --p-timeout P       hold the request, never answer\n"
			"  --q P               share of timeouts/resets/5xx delivered anyway\n"
			"  --p-5xx P           answer --status-5xx (default 502)\n"
			"  --p-4xx P           answer 400, not delivered\n"
			"  --p-reset P         read the request, then reset the connection\n"
			"  --p-429 P           answer 429 with Retry-After: --retry-after (default 1)\n"
			"  --hold-ms N         how long a held request is kept (default 60000)\n"
			"  --idempotency       deliver each key at most once\n"
			"  --key-header NAME   idempotency key header (default Idempotency-Key)\n"
			"  --ledger-file PATH  write the ledger there on SIGTERM/SIGINT\n"
			"  --threads N         event loops (default 1)\n"
			"  --dedup-window-ms N a repeat of a key delivered within N ms of the key's\n"
			"                      first receipt is answered 200, not delivered again\n"
			"                      (--idempotency wins over it)\n"
			"  --dedup-breaks P    share of such repeats handled as new ones anyway\n"
			"  --lookup-latency-ms N  delay of GET /status answers (default 0)\n"
			"  --p-lookup-fail P   share of lookups that fail\n"
			"  --lookup-fail-mode M  503 (default) or another 5xx: answered so;\n"
			"                      timeout: held, never answered\n"
			"  --dlr-median-ms N   make a delivery report per delivered copy, median\n"
			"                      latency N ms (lognormal; default 0: no reports)\n"
			"  --dlr-p99-ms N      their 99th percentile (default: the median)\n"
			"  --p-dlr-lost P      share of delivered copies never reported\n"
			"  --p-dlr-failed P    share of reports saying not delivered\n\n"
			"Request headers: X-Sim-Fault: ok|timeout|timeout_delivered|reset|\n"
			"reset_delivered|301|302|307|400|408|429|500|502|503|504,\n"
			"X-Sim-Deliver: 0|1, X-Sim-Latency-Ms: N, X-Sim-Retry-After: S,\n"
			"X-Sim-Fail-First: N, X-Sim-Echo: 1 (an error answer echoes the\n"
			"Authorization header and the request body).  301|302|307 answer Location:\n"
			"http://127.0.0.1:PORT/redirected (address and port of the connection),\n"
			"empty body, not delivered; /redirected is counted like any path and\n"
			"ignores redirect faults.\n"
			"Control: GET /ledger, /stats, /health, /config?name=value&...,\n"
			"/last?key=K, /dlrs?after=SEQ&limit=N, GET or POST /reset.\n"
			"GET /last?key=K (K URL-decoded; %%XX and +): the last request of a key,\n"
			"404 when unknown.  text/plain: \"method M\", \"target T\" (path and query\n"
			"as received), \"header Name: value\" per header in received order,\n"
			"\"body-length N\" (received), \"body-truncated-to 65536\" when longer than\n"
			"64 KB, an empty line, then the (de-chunked) body bytes verbatim.\n"
			"GET /status/K or /status?ref=K (K URL-encoded): status lookup, not a\n"
			"receipt; 200 {\"ref\":\"K\",\"status\":\"delivered\"} when K has a delivered\n"
			"copy, else 404 {\"ref\":\"K\",\"status\":\"not_found\"}; failing: the\n"
			"--lookup-fail-mode status {\"ref\":\"K\",\"status\":\"error\",\"code\":503},\n"
			"or held.\n"
			"GET /dlrs?after=SEQ&limit=N (defaults 0, 1000): the delivery reports\n"
			"available now with seq > SEQ, in seq order, text/plain lines\n"
			"\"seq<TAB>key<TAB>delivered (1/0)<TAB>reported_at_unix_ms\".\n"
			"The settings above are also /config names (dedup_window_ms, dedup_breaks,\n"
			"lookup_latency_ms, p_lookup_fail, lookup_fail_mode, dlr_median_ms,\n"
			"dlr_p99_ms, p_dlr_lost, p_dlr_failed); see the top of provider_sim.c.\n");
}

__attribute__((noreturn))
static void
bad_option(const char *name, const char *val)
{
	fprintf(stderr, "provider_sim: invalid value for --%s: %s\n", name, val);
	exit(2);
}

/* long options without a letter */
enum
{
	OPT_DEDUP_WINDOW = 256,
	OPT_DEDUP_BREAKS,
	OPT_LOOKUP_LATENCY,
	OPT_P_LOOKUP_FAIL,
	OPT_LOOKUP_FAIL_MODE,
	OPT_DLR_MEDIAN,
	OPT_DLR_P99,
	OPT_P_DLR_LOST,
	OPT_P_DLR_FAILED,
	OPT_LATENCY_P99
};

/* the /config name of an option that sets a run-time setting, or NULL */
static const char *
config_name_of_option(int ch)
{
	switch (ch)
	{
		case 'l':
			return "latency_ms";
		case OPT_LATENCY_P99:
			return "latency_p99_ms";
		case 's':
			return "seed";
		case 'T':
			return "p_timeout";
		case 'q':
			return "q";
		case '5':
			return "p_5xx";
		case '4':
			return "p_4xx";
		case 'R':
			return "p_reset";
		case '9':
			return "p_429";
		case 'S':
			return "status_5xx";
		case 'r':
			return "retry_after";
		case 'H':
			return "hold_ms";
		case OPT_DEDUP_WINDOW:
			return "dedup_window_ms";
		case OPT_DEDUP_BREAKS:
			return "dedup_breaks";
		case OPT_LOOKUP_LATENCY:
			return "lookup_latency_ms";
		case OPT_P_LOOKUP_FAIL:
			return "p_lookup_fail";
		case OPT_LOOKUP_FAIL_MODE:
			return "lookup_fail_mode";
		case OPT_DLR_MEDIAN:
			return "dlr_median_ms";
		case OPT_DLR_P99:
			return "dlr_p99_ms";
		case OPT_P_DLR_LOST:
			return "p_dlr_lost";
		case OPT_P_DLR_FAILED:
			return "p_dlr_failed";
		default:
			return NULL;
	}
}

static void
parse_options(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"port", required_argument, NULL, 'p'},
		{"bind", required_argument, NULL, 'b'},
		{"latency-ms", required_argument, NULL, 'l'},
		{"latency-p99-ms", required_argument, NULL, OPT_LATENCY_P99},
		{"seed", required_argument, NULL, 's'},
		{"p-timeout", required_argument, NULL, 'T'},
		{"q", required_argument, NULL, 'q'},
		{"p-5xx", required_argument, NULL, '5'},
		{"p-4xx", required_argument, NULL, '4'},
		{"p-reset", required_argument, NULL, 'R'},
		{"p-429", required_argument, NULL, '9'},
		{"status-5xx", required_argument, NULL, 'S'},
		{"retry-after", required_argument, NULL, 'r'},
		{"hold-ms", required_argument, NULL, 'H'},
		{"idempotency", no_argument, NULL, 'i'},
		{"key-header", required_argument, NULL, 'k'},
		{"ledger-file", required_argument, NULL, 'f'},
		{"threads", required_argument, NULL, 't'},
		{"dedup-window-ms", required_argument, NULL, OPT_DEDUP_WINDOW},
		{"dedup-breaks", required_argument, NULL, OPT_DEDUP_BREAKS},
		{"lookup-latency-ms", required_argument, NULL, OPT_LOOKUP_LATENCY},
		{"p-lookup-fail", required_argument, NULL, OPT_P_LOOKUP_FAIL},
		{"lookup-fail-mode", required_argument, NULL, OPT_LOOKUP_FAIL_MODE},
		{"dlr-median-ms", required_argument, NULL, OPT_DLR_MEDIAN},
		{"dlr-p99-ms", required_argument, NULL, OPT_DLR_P99},
		{"p-dlr-lost", required_argument, NULL, OPT_P_DLR_LOST},
		{"p-dlr-failed", required_argument, NULL, OPT_P_DLR_FAILED},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	SimConfig  *cfg = &sim.config;
	int			ch,
				idx = 0;

	cfg->hold_ms = 60000;
	cfg->status_5xx = 502;
	cfg->retry_after = 1;
	cfg->seed = 1;
	resolve_config_defaults(&cfg->resolve);
	while ((ch = getopt_long(argc, argv, "", longopts, &idx)) != -1)
	{
		const char *setting = config_name_of_option(ch);

		if (setting != NULL)
		{
			if (!config_set(cfg, setting, optarg))
				bad_option(longopts[idx].name, optarg);
			continue;
		}
		switch (ch)
		{
			case 'p':
				if (!parse_int_str(optarg, 0, 65535, &opts.port))
					bad_option("port", optarg);
				break;
			case 't':
				if (!parse_int_str(optarg, 1, MAX_THREADS, &opts.threads))
					bad_option("threads", optarg);
				break;
			case 'b':
				opts.bind_addr = optarg;
				break;
			case 'i':
				cfg->idempotency = true;
				break;
			case 'k':
				if (*optarg == '\0')
					bad_option("key-header", optarg);
				opts.key_header = optarg;
				break;
			case 'f':
				opts.ledger_file = optarg;
				break;
			case 'h':
				usage(stdout);
				exit(0);
			default:
				usage(stderr);
				exit(2);
		}
	}
	if (optind < argc)
	{
		usage(stderr);
		exit(2);
	}
	{
		Buf			err = {0};

		if (!resolve_config_check(&cfg->resolve, &err))
		{
			fprintf(stderr, "provider_sim: %s", err.data);
			exit(2);
		}
	}
	sim.prng = cfg->seed;
	sim.prng_latency = cfg->seed ^ PRNG_LATENCY_SALT;
	resolve_reseed(cfg->seed);
}

static void
raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max)
	{
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* bind and listen; prints the start-up line */
static int
open_listener(void)
{
	struct sockaddr_storage ss;
	socklen_t	sslen;
	char		addr[INET6_ADDRSTRLEN];
	int			fd,
				one = 1;
	bool		v6;

	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, opts.bind_addr, &((struct sockaddr_in *) &ss)->sin_addr) == 1)
	{
		v6 = false;
		ss.ss_family = AF_INET;
		((struct sockaddr_in *) &ss)->sin_port = htons(opts.port);
		sslen = sizeof(struct sockaddr_in);
	}
	else if (inet_pton(AF_INET6, opts.bind_addr,
					   &((struct sockaddr_in6 *) &ss)->sin6_addr) == 1)
	{
		v6 = true;
		ss.ss_family = AF_INET6;
		((struct sockaddr_in6 *) &ss)->sin6_port = htons(opts.port);
		sslen = sizeof(struct sockaddr_in6);
	}
	else
		bad_option("bind", opts.bind_addr);

	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 ||
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		bind(fd, (struct sockaddr *) &ss, sslen) < 0 ||
		listen(fd, 65535) < 0 ||
		getsockname(fd, (struct sockaddr *) &ss, &sslen) < 0)
	{
		fprintf(stderr, "provider_sim: cannot listen on %s:%d: %s\n",
				opts.bind_addr, opts.port, strerror(errno));
		exit(1);
	}
	if (v6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *) &ss)->sin6_addr, addr, sizeof(addr));
	else
		inet_ntop(AF_INET, &((struct sockaddr_in *) &ss)->sin_addr, addr, sizeof(addr));
	listen_port = ntohs(v6 ? ((struct sockaddr_in6 *) &ss)->sin6_port :
						((struct sockaddr_in *) &ss)->sin_port);
	fprintf(stderr, v6 ? "provider_sim listening on [%s]:%d\n" :
			"provider_sim listening on %s:%d\n", addr, listen_port);
	return fd;
}

/* SIGTERM/SIGINT become readable on a signalfd watched by every loop */
static int
open_signalfd(void)
{
	sigset_t	mask;
	int			fd;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (fd < 0)
	{
		perror("provider_sim: signalfd");
		exit(1);
	}
	return fd;
}

static bool
write_ledger_file(const char *path)
{
	Buf			text = {0};
	FILE	   *f = fopen(path, "w");
	bool		ok;

	if (f == NULL)
	{
		fprintf(stderr, "provider_sim: cannot write %s: %s\n", path, strerror(errno));
		return false;
	}
	ledger_format(&sim.ledger, &text);
	ok = fwrite(text.data ? text.data : "", 1, text.len, f) == text.len;
	ok = (fclose(f) == 0) && ok;
	buf_free(&text);
	if (!ok)
		fprintf(stderr, "provider_sim: cannot write %s\n", path);
	return ok;
}

int
main(int argc, char **argv)
{
	Worker	   *workers;
	int			rc = 0;

	parse_options(argc, argv);
	raise_fd_limit();
	signal_src.fd = open_signalfd();
	listen_src.fd = open_listener();
	ledger_init(&sim.ledger);
	spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	workers = xcalloc(opts.threads, sizeof(Worker));
	for (int i = 0; i < opts.threads; i++)
		worker_init(&workers[i]);
	for (int i = 1; i < opts.threads; i++)
	{
		if (pthread_create(&workers[i].thread, NULL, worker_run, &workers[i]) != 0)
		{
			fprintf(stderr, "provider_sim: cannot start thread\n");
			exit(1);
		}
	}
	worker_run(&workers[0]);
	for (int i = 1; i < opts.threads; i++)
		pthread_join(workers[i].thread, NULL);
	for (int i = 0; i < opts.threads; i++)
		worker_cleanup(&workers[i]);

	close(listen_src.fd);
	close(signal_src.fd);
	if (spare_fd >= 0)
		close(spare_fd);
	if (opts.ledger_file && !write_ledger_file(opts.ledger_file))
		rc = 1;
	ledger_free(&sim.ledger);
	resolve_reset();
	free(workers);
	return rc;
}
