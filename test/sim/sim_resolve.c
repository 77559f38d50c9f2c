/*-------------------------------------------------------------------------
 *
 * sim_resolve.c
 *      provider_sim's means for a client to resolve an ambiguous call
 *      (issue 31): a provider that honours the idempotency key for a
 *      window (or breaks its promise for a share of repeats), the draws
 *      and counters of its status lookup endpoint, and the delivery
 *      reports (DLRs) it makes for every delivered copy, each available
 *      after a lognormal latency.
 *
 * provider_sim.c parses the requests, keeps the ledger (where each key's
 * DedupWindow lives) and answers; this file decides and keeps what the
 * features need: the settings, three PRNG streams of their own (so that
 * a seed gives provider_sim's fault draws the same sequence whether these
 * features are on or not), the DLRs and the counters.  Everything runs
 * under provider_sim's one lock.  Nothing here sleeps or keeps a timer: a
 * DLR becomes available when a GET /dlrs comes after its time.
 *
 * DLRs: a pending report waits in a min-heap by the monotonic time it is
 * due; a GET /dlrs moves the due ones, in due order, to the list of
 * available reports, numbering them 1, 2, ... as they arrive there, so
 * that seq order is the order of availability and a poller that asks for
 * "after the last seq I saw" never misses one.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE

#include "sim_resolve.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* z of the 99th percentile of the standard normal distribution */
#define Z_P99		2.3263478740408408

typedef struct Dlr
{
	uint64_t	made_no;		/* order of making: ties in the heap */
	int64_t		due_us;			/* monotonic */
	int64_t		reported_ms;	/* wall clock, Unix milliseconds */
	bool		delivered;
	bool		taken;			/* handed out by GET /dlrs at least once */
	size_t		keylen;
	char		key[];
} Dlr;

typedef struct ResolveStats
{
	uint64_t	dedup_hits;		/* in-window repeats not delivered again */
	uint64_t	dedup_broken;	/* in-window repeats handled as new ones */
	uint64_t	lookups;
	uint64_t	lookups_found;
	uint64_t	lookups_not_found;
	uint64_t	lookups_failed;
	uint64_t	dlrs_made;		/* reports made (they become available) */
	uint64_t	dlrs_lost;		/* delivered copies never reported */
	uint64_t	dlrs_failed;	/* reports made that say not delivered */
	uint64_t	dlrs_taken;		/* reports handed out at least once */
} ResolveStats;

static struct
{
	uint64_t	prng_dedup;
	uint64_t	prng_lookup;
	uint64_t	prng_dlr;
	ResolveStats stats;
	Dlr		  **pending;		/* min-heap by (due_us, made_no) */
	size_t		n_pending;
	size_t		cap_pending;
	Dlr		  **ready;			/* available, ready[i] has seq i + 1 */
	size_t		n_ready;
	size_t		cap_ready;
	uint64_t	made;
} rs;

/* ----------------------------------------------------------------
 * Settings
 * ----------------------------------------------------------------
 */
void
resolve_config_defaults(ResolveConfig *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->lookup_fail_status = 503;
}

/*
 * Apply one name=value.  *known says whether the name is one of ours;
 * returns false when it is not or the value is bad.
 */
bool
resolve_config_set(ResolveConfig *cfg, const char *name, const char *val, bool *known)
{
	*known = true;
	if (strcmp(name, "dedup_window_ms") == 0)
		return parse_int_str(val, 0, INT_MAX, &cfg->dedup_window_ms);
	if (strcmp(name, "dedup_breaks") == 0)
		return parse_prob_str(val, &cfg->dedup_breaks);
	if (strcmp(name, "lookup_latency_ms") == 0)
		return parse_int_str(val, 0, 86400000, &cfg->lookup_latency_ms);
	if (strcmp(name, "p_lookup_fail") == 0)
		return parse_prob_str(val, &cfg->p_lookup_fail);
	if (strcmp(name, "lookup_fail_mode") == 0)
	{
		if (strcmp(val, "timeout") == 0)
		{
			cfg->lookup_fail_status = 0;
			return true;
		}
		return parse_int_str(val, 500, 599, &cfg->lookup_fail_status);
	}
	if (strcmp(name, "dlr_median_ms") == 0)
		return parse_int_str(val, 0, 86400000, &cfg->dlr_median_ms);
	if (strcmp(name, "dlr_p99_ms") == 0)
		return parse_int_str(val, 0, 86400000, &cfg->dlr_p99_ms);
	if (strcmp(name, "p_dlr_lost") == 0)
		return parse_prob_str(val, &cfg->p_dlr_lost);
	if (strcmp(name, "p_dlr_failed") == 0)
		return parse_prob_str(val, &cfg->p_dlr_failed);
	*known = false;
	return false;
}

/* the settings together: a p99 below the median cannot be */
bool
resolve_config_check(const ResolveConfig *cfg, Buf *err)
{
	if (cfg->dlr_p99_ms > 0 && cfg->dlr_p99_ms < cfg->dlr_median_ms)
	{
		buf_printf(err, "dlr_p99_ms (%d) is below dlr_median_ms (%d)\n",
				   cfg->dlr_p99_ms, cfg->dlr_median_ms);
		return false;
	}
	return true;
}

void
resolve_config_format(const ResolveConfig *cfg, Buf *out)
{
	buf_printf(out, "dedup_window_ms %d\ndedup_breaks %g\nlookup_latency_ms %d\n"
			   "p_lookup_fail %g\n",
			   cfg->dedup_window_ms, cfg->dedup_breaks, cfg->lookup_latency_ms,
			   cfg->p_lookup_fail);
	if (cfg->lookup_fail_status == 0)
		buf_puts(out, "lookup_fail_mode timeout\n");
	else
		buf_printf(out, "lookup_fail_mode %d\n", cfg->lookup_fail_status);
	buf_printf(out, "dlr_median_ms %d\ndlr_p99_ms %d\np_dlr_lost %g\np_dlr_failed %g\n",
			   cfg->dlr_median_ms, cfg->dlr_p99_ms, cfg->p_dlr_lost, cfg->p_dlr_failed);
}

/* ----------------------------------------------------------------
 * State, counters
 * ----------------------------------------------------------------
 */

/* each feature draws from a stream of its own, derived from the seed */
void
resolve_reseed(uint64_t seed)
{
	rs.prng_dedup = seed ^ UINT64_C(0x6465647570000001);
	rs.prng_lookup = seed ^ UINT64_C(0x6c6f6f6b75700002);
	rs.prng_dlr = seed ^ UINT64_C(0x646c720000000003);
}

/* forget the DLRs (seq starts at 1 again) and zero the counters */
void
resolve_reset(void)
{
	for (size_t i = 0; i < rs.n_pending; i++)
		free(rs.pending[i]);
	for (size_t i = 0; i < rs.n_ready; i++)
		free(rs.ready[i]);
	free(rs.pending);
	free(rs.ready);
	rs.pending = rs.ready = NULL;
	rs.n_pending = rs.cap_pending = rs.n_ready = rs.cap_ready = 0;
	rs.made = 0;
	memset(&rs.stats, 0, sizeof(rs.stats));
}

/* appended to GET /stats, after provider_sim's own lines */
void
resolve_stats_format(Buf *out)
{
	const ResolveStats *s = &rs.stats;

	buf_printf(out,
			   "dedup_hits %" PRIu64 "\ndedup_broken %" PRIu64 "\nlookups %" PRIu64 "\n"
			   "lookups_found %" PRIu64 "\nlookups_not_found %" PRIu64 "\n"
			   "lookups_failed %" PRIu64 "\ndlrs_made %" PRIu64 "\ndlrs_lost %" PRIu64 "\n"
			   "dlrs_failed %" PRIu64 "\ndlrs_taken %" PRIu64 "\n",
			   s->dedup_hits, s->dedup_broken, s->lookups, s->lookups_found,
			   s->lookups_not_found, s->lookups_failed, s->dlrs_made, s->dlrs_lost,
			   s->dlrs_failed, s->dlrs_taken);
}

/* ----------------------------------------------------------------
 * The deduplication window
 * ----------------------------------------------------------------
 */

/*
 * A request carrying a key header, with a window set and --idempotency
 * off.  A key's window opens at its first receipt, and again at the
 * first receipt after it closed (dedup_window_ms later); a repeat inside
 * the window of a key delivered inside it is a REPEAT, or, for a
 * dedup_breaks share of them, BROKEN.  One number is drawn per such
 * repeat whatever dedup_breaks is.
 */
DedupVerdict
resolve_dedup(const ResolveConfig *cfg, DedupWindow *w, int64_t now_us)
{
	double		d;

	if (!w->open || now_us - w->start_us >= (int64_t) cfg->dedup_window_ms * 1000)
	{
		w->open = true;
		w->delivered = false;
		w->start_us = now_us;
		return DEDUP_NEW;
	}
	if (!w->delivered)
		return DEDUP_NEW;
	d = prng_double(&rs.prng_dedup);
	if (d < cfg->dedup_breaks)
	{
		rs.stats.dedup_broken++;
		return DEDUP_BROKEN;
	}
	rs.stats.dedup_hits++;
	return DEDUP_REPEAT;
}

/* ----------------------------------------------------------------
 * DLRs
 * ----------------------------------------------------------------
 */
static bool
dlr_before(const Dlr *a, const Dlr *b)
{
	return a->due_us < b->due_us || (a->due_us == b->due_us && a->made_no < b->made_no);
}

static void
pending_push(Dlr *d)
{
	size_t		i;

	if (rs.n_pending == rs.cap_pending)
	{
		rs.cap_pending = rs.cap_pending ? rs.cap_pending * 2 : 1024;
		rs.pending = xrealloc(rs.pending, rs.cap_pending * sizeof(Dlr *));
	}
	for (i = rs.n_pending++; i > 0; i = (i - 1) / 2)
	{
		Dlr		   *parent = rs.pending[(i - 1) / 2];

		if (!dlr_before(d, parent))
			break;
		rs.pending[i] = parent;
	}
	rs.pending[i] = d;
}

static Dlr *
pending_pop(void)
{
	Dlr		   *top = rs.pending[0];
	Dlr		   *last = rs.pending[--rs.n_pending];
	size_t		i = 0;

	for (;;)
	{
		size_t		child = 2 * i + 1;

		if (child >= rs.n_pending)
			break;
		if (child + 1 < rs.n_pending && dlr_before(rs.pending[child + 1], rs.pending[child]))
			child++;
		if (!dlr_before(rs.pending[child], last))
			break;
		rs.pending[i] = rs.pending[child];
		i = child;
	}
	if (rs.n_pending > 0)
		rs.pending[i] = last;
	return top;
}

/* move the reports due by now to the available ones, numbering them */
static void
dlrs_release(int64_t now_us)
{
	while (rs.n_pending > 0 && rs.pending[0]->due_us <= now_us)
	{
		if (rs.n_ready == rs.cap_ready)
		{
			rs.cap_ready = rs.cap_ready ? rs.cap_ready * 2 : 1024;
			rs.ready = xrealloc(rs.ready, rs.cap_ready * sizeof(Dlr *));
		}
		rs.ready[rs.n_ready++] = pending_pop();
	}
}

/*
 * A report's latency in microseconds: lognormal with the median and the
 * 99th percentile configured, from two uniform draws (Box-Muller).
 */
static int64_t
dlr_latency_us(const ResolveConfig *cfg, double u1, double u2)
{
	double		median = cfg->dlr_median_ms;
	double		p99 = cfg->dlr_p99_ms > 0 ? cfg->dlr_p99_ms : median;
	double		sigma = log(p99 / median) / Z_P99;
	double		z = sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
	double		ms = median * exp(sigma * z);

	if (ms > 1e9)
		ms = 1e9;
	return (int64_t) (ms * 1000.0 + 0.5);
}

/*
 * A copy of a key was delivered (the ledger's delivered went up): it is
 * inside the key's window, and with DLRs on it gets a report, or is lost.
 * Four numbers are drawn per delivered copy with DLRs on: lost, failed
 * and two for the latency.
 */
void
resolve_delivered(const ResolveConfig *cfg, DedupWindow *w,
				  const char *key, size_t keylen, int64_t now_us, int64_t wall_now_us)
{
	double		d_lost,
				d_failed,
				u1,
				u2;
	int64_t		latency_us;
	Dlr		   *d;

	if (cfg->dedup_window_ms > 0)
		w->delivered = true;
	if (cfg->dlr_median_ms <= 0)
		return;
	d_lost = prng_double(&rs.prng_dlr);
	d_failed = prng_double(&rs.prng_dlr);
	u1 = prng_double(&rs.prng_dlr);
	u2 = prng_double(&rs.prng_dlr);
	if (d_lost < cfg->p_dlr_lost)
	{
		rs.stats.dlrs_lost++;
		return;
	}
	latency_us = dlr_latency_us(cfg, u1, u2);
	d = xcalloc(1, sizeof(Dlr) + keylen + 1);
	d->made_no = ++rs.made;
	d->due_us = now_us + latency_us;
	d->reported_ms = (wall_now_us + latency_us) / 1000;
	d->delivered = !(d_failed < cfg->p_dlr_failed);
	d->keylen = keylen;
	memcpy(d->key, key, keylen);
	pending_push(d);
	rs.stats.dlrs_made++;
	if (!d->delivered)
		rs.stats.dlrs_failed++;
}

/*
 * GET /dlrs?after=SEQ&limit=N: the reports available by now with a seq
 * above after, in seq order, at most limit of them, one a line:
 * seq TAB key TAB delivered (1/0) TAB reported_at (Unix ms).
 */
void
resolve_dlrs_format(uint64_t after, uint64_t limit, int64_t now_us, Buf *out)
{
	dlrs_release(now_us);
	for (uint64_t i = after; i < rs.n_ready && i - after < limit; i++)
	{
		Dlr		   *d = rs.ready[i];

		buf_printf(out, "%" PRIu64 "\t", i + 1);
		buf_append(out, d->key, d->keylen);
		buf_printf(out, "\t%d\t%" PRId64 "\n", d->delivered ? 1 : 0, d->reported_ms);
		if (!d->taken)
		{
			d->taken = true;
			rs.stats.dlrs_taken++;
		}
	}
}

/* ----------------------------------------------------------------
 * Status lookups
 * ----------------------------------------------------------------
 */

/*
 * A lookup of a key whose ledger entry has (delivered) or has not a
 * delivered copy: one number drawn per lookup decides whether it fails.
 */
LookupVerdict
resolve_lookup(const ResolveConfig *cfg, bool delivered)
{
	double		d = prng_double(&rs.prng_lookup);

	rs.stats.lookups++;
	if (d < cfg->p_lookup_fail)
	{
		rs.stats.lookups_failed++;
		return LOOKUP_FAILED;
	}
	if (delivered)
	{
		rs.stats.lookups_found++;
		return LOOKUP_FOUND;
	}
	rs.stats.lookups_not_found++;
	return LOOKUP_NOT_FOUND;
}
