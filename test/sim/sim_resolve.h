/*-------------------------------------------------------------------------
 *
 * sim_resolve.h
 *      What provider_sim offers a client to resolve an ambiguous call
 *      (issue 31): a deduplication window on the idempotency key, the
 *      draws and counters of the status lookup endpoint (GET /status/K),
 *      and delivery reports (DLRs, GET /dlrs) with a lognormal latency.
 *
 * Implemented in sim_resolve.c.  provider_sim.c owns the HTTP side, the
 * ledger and the one lock: every function here runs under that lock.
 * The first section declares what sim_resolve.c uses of provider_sim.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SIM_RESOLVE_H
#define SIM_RESOLVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- provided by provider_sim.c ---- */

/* a growable byte buffer */
typedef struct Buf
{
	char	   *data;
	size_t		len;
	size_t		cap;
} Buf;

extern void *xrealloc(void *p, size_t n);
extern void *xcalloc(size_t n, size_t size);
extern void buf_append(Buf *b, const void *p, size_t n);
extern void buf_puts(Buf *b, const char *s);
extern void buf_printf(Buf *b, const char *fmt,...) __attribute__((format(printf, 2, 3)));
extern double prng_double(uint64_t *state);		/* uniform in [0, 1) */
extern bool parse_prob_str(const char *s, double *out);
extern bool parse_int_str(const char *s, int min, int max, int *out);

/* ---- provided by sim_resolve.c ---- */

/* run-time settings, shown and set at /config like the others */
typedef struct ResolveConfig
{
	int			dedup_window_ms;	/* 0: no window */
	double		dedup_breaks;	/* share of in-window repeats not deduplicated */
	int			lookup_latency_ms;
	double		p_lookup_fail;
	int			lookup_fail_status; /* 500..599, or 0: held (the client times out) */
	int			dlr_median_ms;	/* 0: no DLRs */
	int			dlr_p99_ms;		/* 0: the median (no spread) */
	double		p_dlr_lost;		/* share of delivered copies never reported */
	double		p_dlr_failed;	/* share of reports saying not delivered (0) */
} ResolveConfig;

/* a key's deduplication window, kept in its ledger entry (zeroed: none) */
typedef struct DedupWindow
{
	bool		open;			/* a window was opened */
	bool		delivered;		/* a copy was delivered inside it */
	int64_t		start_us;		/* monotonic: the receipt that opened it */
} DedupWindow;

typedef enum DedupVerdict
{
	DEDUP_NEW,					/* handled as usual */
	DEDUP_REPEAT,				/* in the window: 200, not delivered again */
	DEDUP_BROKEN				/* in the window, but handled as usual */
} DedupVerdict;

typedef enum LookupVerdict
{
	LOOKUP_FOUND,
	LOOKUP_NOT_FOUND,
	LOOKUP_FAILED
} LookupVerdict;

extern void resolve_config_defaults(ResolveConfig *cfg);
extern bool resolve_config_set(ResolveConfig *cfg, const char *name, const char *val,
							   bool *known);
extern bool resolve_config_check(const ResolveConfig *cfg, Buf *err);
extern void resolve_config_format(const ResolveConfig *cfg, Buf *out);

extern void resolve_reseed(uint64_t seed);
extern void resolve_reset(void);
extern void resolve_stats_format(Buf *out);

extern DedupVerdict resolve_dedup(const ResolveConfig *cfg, DedupWindow *w, int64_t now_us);
extern void resolve_delivered(const ResolveConfig *cfg, DedupWindow *w,
							  const char *key, size_t keylen,
							  int64_t now_us, int64_t wall_now_us);
extern LookupVerdict resolve_lookup(const ResolveConfig *cfg, bool delivered);
extern void resolve_dlrs_format(uint64_t after, uint64_t limit, int64_t now_us, Buf *out);

#endif							/* SIM_RESOLVE_H */
