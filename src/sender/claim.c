/*-------------------------------------------------------------------------
 *
 * sender/claim.c
 *      A round's claim: due jobs, type by type in priority order, within
 *      the lane's room and each provider's limits, each job through the
 *      route this round gives it.  A type's routes are its provider, then
 *      its backup_providers, each an entry of the lane's configuration; a
 *      route takes calls while its circuit breaker lets them (breaker.c),
 *      and a job goes to the first such route from where it starts: the
 *      first, or the one after the provider its last call certainly never
 *      reached (or, at_least_once, left ambiguous), or the same one for a
 *      retry made for that provider's deduplication window (an
 *      at_most_once one waits for it).  Half-open, a route takes one job,
 *      its probe.  When no route takes calls, the type's jobs wait and the
 *      late ones still expire.  A batching provider's jobs are grouped
 *      into calls of batch_max (batch_calls.c).  The calls start after the
 *      round commits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "http/http.h"
#include "provider/push.h"
#include "sender/breaker.h"
#include "sender/lookup.h"
#include "sender/sender.h"
#include "sender/throttle.h"
#include "store/job_sql.h"

/* a type's routes: its provider and at most 8 backup_providers (by CHECK) */
#define MAX_ROUTES	9

/*
 * A type whose routes all wait: its late jobs still expire (claim_late),
 * looked for at most once a second.
 */
#define EXPIRE_WHILE_OPEN_MS	1000

/*
 * The jobs a claim found late (expired, or an at_most_once one left
 * sent): their ends told to the application, their fallbacks made.
 */
static void
ended_late(const NotifClaimedJob *jobs, int n)
{
	int64	   *ids;
	int			k = 0,
				j;

	if ((!sender.any_outcomes && !sender.any_fallback) || n == 0)
		return;
	ids = palloc(sizeof(int64) * n);
	for (j = 0; j < n; j++)
		if (jobs[j].deadline_passed)
			ids[k++] = jobs[j].id;
	if (k == 0)
		return;
	if (sender.any_outcomes)
		notif_sql_outcomes(ids, k, NULL, 0);	/* outcomes.c's, for results */
	if (sender.any_fallback)
		sender_fallbacks(ids, k);
}

/* the routes of one type this round */
typedef struct Routes
{
	const char *code;			/* the type's */
	int			n;
	NotifBreakerAdmit admit[MAX_ROUTES];
	TimestampTz until[MAX_ROUTES];	/* a waiting route's next look */
	int			start[MAX_ROUTES];	/* a job starting at route d: taken by
									 * start[d] (1-based; 0: it waits) */
	int			stay[MAX_ROUTES];	/* ... a retry for d's window */
	bool		any_calls;
} Routes;

/*
 * Which route takes a job that starts at route d (start[d], 1-based; 0: it
 * waits), and which takes a retry made for route d's provider's
 * deduplication window (stay[d]).  A job goes to the first route from d on
 * that takes calls; for a probe of route probe_k (else -1), the jobs that
 * meet that route first go to it, and the others to none.  An at_most_once
 * retry for a window goes to its own provider only.
 */
static void
choose_routes(const Routes *r, int probe_k, NotifDelivery delivery, int *start, int *stay)
{
	int			d,
				j;

	for (d = 0; d < r->n; d++)
	{
		start[d] = 0;
		for (j = 0; j < r->n; j++)
		{
			int			k = (d + j) % r->n;

			if (k == probe_k || (probe_k < 0 && r->admit[k] == BREAKER_CALLS))
			{
				start[d] = k + 1;
				break;
			}
			if (r->admit[k] == BREAKER_CALLS)
				break;			/* it meets another route first */
		}
		if (delivery == AT_MOST_ONCE)
			stay[d] = (probe_k < 0 ? r->admit[d] == BREAKER_CALLS : d == probe_k) ? d + 1 : 0;
		else
			stay[d] = start[d];
	}
}

/* Where each job of type entry `first` goes this round. */
static void
plan_routes(int first, TimestampTz now, Routes *r)
{
	NotifTypeConf *t = &sender.types[first];
	int			d,
				j;

	r->code = t->code;
	r->n = Min(Max(t->n_routes, 1), MAX_ROUTES);
	r->any_calls = false;
	for (d = 0; d < r->n; d++)
	{
		r->admit[d] = BREAKER_WAITS;	/* a route whose provider was not read */
		r->until[d] = 0;
	}
	/* the entries of the type, each at its route (one read between changes may lack one) */
	for (j = first; j < sender.n_types && strcmp(sender.types[j].code, t->code) == 0; j++)
	{
		NotifTypeConf *e = &sender.types[j];

		if (e->route < 0 || e->route >= r->n ||
			(e->provider.url == NULL && e->endpoint_by == NULL))
			continue;			/* not configured: it waits */
		r->admit[e->route] = notif_breaker_admit(&e->provider, now, &r->until[e->route]);
		r->any_calls |= r->admit[e->route] == BREAKER_CALLS;
	}
	choose_routes(r, -1, t->delivery, r->start, r->stay);
}

/*
 * The calls type entry i's provider takes now (notif_http_room), less those
 * claimed for it this round and not yet started (claimed[k] for the
 * entries before i; entries may share a provider).
 */
static int
pool_room_left(int i, const int *claimed)
{
	const NotifProviderConf *p = &sender.types[i].provider;
	int			room = notif_http_room(p);
	int			k;

	if (room == INT_MAX)
		return room;
	for (k = 0; k < i; k++)
		if (claimed[k] > 0 && strcmp(sender.types[k].provider.name, p->name) == 0)
			room -= claimed[k];
	return room;
}

static void
expire_while_open(NotifTypeConf *type, TimestampTz now, Snapshot snapshot, TimestampTz *next)
{
	NotifClaimedJob *jobs;
	TimestampTz again;
	int			n;

	if (!type->has_deadline)
		return;
	again = TimestampTzPlusMilliseconds(type->expired_at, EXPIRE_WHILE_OPEN_MS);
	if (type->expired_at == 0 || again <= now)
	{
		n = notif_sql_claim(type->code, type->delivery, notif_batch_size, true, NULL, NULL,
							sender.incarnation, snapshot, sender.round_cxt, &jobs);
		ended_late(jobs, n);
		type->expired_at = now;
		again = TimestampTzPlusMilliseconds(now, EXPIRE_WHILE_OPEN_MS);
	}
	if (again < *next)
		*next = again;
}

void
sender_claim_jobs(void)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz next = TimestampTzPlusMilliseconds(now, notif_poll_interval_ms);
	int			room = sender_max_inflight() - notif_http_inflight() - sender_lookups_asking();
	bool		more = false;
	int		   *claimed;
	int			i;
	Snapshot	snapshot;
	Routes		routes = {0};

	/*
	 * The claims see the jobs committed before this snapshot, and the
	 * configuration is checked after it: a change that committed before a
	 * job was enqueued (the generation is bumped at its commit, before its
	 * session goes on) is read before that job is claimed, so the job never
	 * goes out with the configuration it was enqueued after.
	 */
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	if (pg_atomic_read_u64(&notif_shared->config_generation) != sender.config_generation)
		sender_reload_config();
	claimed = palloc0(sizeof(int) * Max(sender.n_types, 1));

	for (i = 0; i < sender.n_types; i++)
	{
		NotifTypeConf *type = &sender.types[i];
		NotifClaimedJob *jobs;
		SenderEndpoints *endpoints;
		TimestampTz retry_at;
		NotifBreakerAdmit admit;
		NotifClaimRoute claim_route;
		int			probe_start[MAX_ROUTES];
		int			probe_stay[MAX_ROUTES];
		bool		probe = false;
		NotifCall **batched = NULL;
		int			k,
					want,
					pool_room,
					granted,
					limit,
					n_batched = 0,
					n,
					j;

		if (routes.code == NULL || strcmp(routes.code, type->code) != 0)
		{
			plan_routes(i, now, &routes);
			if (!routes.any_calls)
				expire_while_open(type, now, snapshot, &next);
		}
		k = type->route;
		if (k < 0 || k >= routes.n)
			continue;			/* past MAX_ROUTES (the CHECK forbids it) */
		admit = routes.admit[k];
		if (admit == BREAKER_WAITS)
		{
			if (routes.until[k] != 0 && routes.until[k] < next)
				next = routes.until[k];
			continue;			/* not configured, or its breaker is open */
		}
		if (!notif_push_auth_ready(&type->provider, now, false, &retry_at))
		{
			/* no token (provider/auth.c): get one if jobs are due; they wait */
			TimestampTz due = notif_sql_next_due(type->code);

			if (due == 0 || due > now ||
				!notif_push_auth_ready(&type->provider, now, true, &retry_at))
			{
				if (due > now && due < next)
					next = due;
				if (retry_at != 0 && retry_at < next)
					next = retry_at;
				continue;
			}
		}
		if (room <= 0)
		{
			more = true;
			break;
		}
		if (!sender_batch_ready(type, now, &next))
			continue;			/* batch_wait: its jobs may fill a batch yet */
		want = Min(room, notif_batch_size);
		pool_room = pool_room_left(i, claimed);
		if (pool_room <= 0)
		{
			/* its connections open no faster than it answers: when one does */
			sender.claim_when_call_ends = true;
			continue;
		}
		want = Min(want, pool_room);
		if (admit == BREAKER_PROBE_DUE)
		{
			if (!notif_breaker_take_probe(&type->provider, now))
			{
				/* another's: its end, or its giving up, decides */
				if (notif_breaker_admit(&type->provider, now, &retry_at) == BREAKER_WAITS &&
					retry_at < next)
					next = retry_at;
				continue;
			}
			probe = true;
			sender.probe_held = type->provider.throttle;
			want = 1;
		}
		granted = notif_throttle_acquire(type->provider.throttle, &type->provider, sender.lane_senders,
										 want, now, &retry_at);
		if (retry_at != 0 && retry_at < next)
			next = retry_at;
		if (granted == 0)
		{
			if (probe)
				notif_breaker_probe_unused(type->provider.throttle, false);
			sender.probe_held = -1;
			continue;
		}

		/* which jobs this route takes (a probe: those that start at it) */
		claim_route.routes = type->routes;
		claim_route.n = routes.n;
		claim_route.start = routes.start;
		claim_route.stay = routes.stay;
		claim_route.route = k + 1;
		if (probe)
		{
			choose_routes(&routes, k, type->delivery, probe_start, probe_stay);
			claim_route.start = probe_start;
			claim_route.stay = probe_stay;
		}

		sender.grant_slot = type->provider.throttle;
		sender.grant_left = granted;
		/* a batching provider's calls carry up to batch_max jobs each (batch_calls.c) */
		limit = probe ? granted : sender_batch_claim_limit(type, granted);
		n = notif_sql_claim(type->code, type->delivery, limit, false,
							type->n_routes > 1 ? &claim_route : NULL, type->provider.name,
							sender.incarnation, snapshot, sender.round_cxt, &jobs);
		ended_late(jobs, n);
		endpoints = sender_claim_endpoints(type, jobs, n);	/* NULL: not needed */
		if (type->provider.batch_max > 1)
			batched = palloc(sizeof(NotifCall *) * Max(n, 1));

		for (j = 0; j < n; j++)
		{
			NotifCall  *call;

			if (jobs[j].deadline_passed)
				continue;		/* claim_late: expired, no call */
			call = sender_new_call(type, &jobs[j], endpoints);
			if (batched)
			{
				batched[n_batched++] = call;	/* grouped below */
				continue;
			}
			call->probe = probe;
			if (probe)
				sender.probe_held = -1; /* the call carries it */
			probe = false;
			dlist_push_tail(&sender.claimed, &call->node);
			sender.grant_left--;
			room--;
			claimed[i]++;
		}
		if (batched)
		{
			int			calls = sender_batch_group(type, batched, n_batched, granted);

			if (probe && calls > 0)
			{
				batched[0]->probe = true;	/* one job: its call is the probe */
				sender.probe_held = -1;
				probe = false;
			}
			sender.grant_left -= calls;
			room -= calls;
			claimed[i] += calls;
		}
		notif_throttle_release(sender.grant_slot, sender.grant_left, true);
		sender.grant_left = 0;
		if (probe)
			notif_breaker_probe_unused(type->provider.throttle, n == 0);	/* no job to probe with */
		sender.probe_held = -1;

		if (claimed[i] >= pool_room)
			sender.claim_when_call_ends = true; /* its calls fill the pool */
		else if (n == limit)
		{
			/*
			 * There may be more due: claim again as soon as there is room
			 * (a call ends), or when the rate limit allows.
			 */
			if (retry_at == 0)
				more = true;
		}
		else
		{
			TimestampTz due = notif_sql_next_due(type->code);

			if (due != 0)
			{
				/*
				 * Due now but not taken: locked by another session, or (a
				 * type with routes that wait) meant for one of those.
				 */
				if (due <= now)
					due = TimestampTzPlusMilliseconds(now, routes.any_calls && routes.n == 1
													  ? SENDER_LOCKED_DUE_WAIT_MS
													  : EXPIRE_WHILE_OPEN_MS);
				if (due < next)
					next = due;
			}
		}
	}
	UnregisterSnapshot(snapshot);
	sender.claim_at = more ? 0 : next;
}
