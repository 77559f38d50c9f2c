/*-------------------------------------------------------------------------
 *
 * sender/calls.c
 *      A lane sender's calls, from claim to result: each built from its
 *      claimed job (sender_new_call), started once its claim has committed
 *      (after the provider's status lookup, when it asks one: lookup.c),
 *      taken back from the transport when it ends, and dropped at shutdown.
 *      Each holds one grant of its provider's throttle until then, and
 *      starts only if its provider's circuit breaker lets it (breaker.c),
 *      which hears how each ended.  The round (round.c) records what they
 *      did.  A provider batch (batch_calls.c) is one call on the wire for
 *      several jobs' calls: the first carries the others and their grant.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "postmaster/interrupt.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "http/http.h"
#include "provider/batch.h"
#include "provider/lookup.h"
#include "provider/request.h"
#include "sender/breaker.h"
#include "sender/lookup.h"
#include "sender/sender.h"
#include "sender/throttle.h"
#include "store/job_sql.h"

NotifCall *
sender_new_call(NotifTypeConf *type, NotifClaimedJob *job, const SenderEndpoints *eps)
{
	MemoryContext cxt = AllocSetContextCreate(sender.calls_cxt, "notif_deliver call",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	NotifCall  *call = palloc0(sizeof(NotifCall));
	NotifClaimedJob sent;		/* the job as its call sends it */
	char	   *key;
	bool		same_provider = job->last_provider == NULL ||	/* its last call's, or none */
		strcmp(job->last_provider, type->provider.name) == 0;

	call->cxt = cxt;
	call->job.id = job->id;
	call->job.tries = job->tries;
	call->job.earlier_tries = job->earlier_tries;
	call->job.delivery = type->delivery;
	call->job.claimed_by = sender.incarnation;
	call->job.deadline_at = job->deadline_at;
	call->job.policy = type->policy;
	if (type->provider.dedup_reach_ms > 0)
		call->job.dedup.until = TimestampTzPlusMilliseconds(job->created_at,
															type->provider.dedup_reach_ms);
	else if (job->dedup_retry)
		call->job.dedup.until = job->created_at;	/* no window now: passed */
	/* a retry made for a provider's window, to that provider (else a copy) */
	call->job.dedup.retry = job->dedup_retry && same_provider;
	call->job.next_route = type->route < type->n_routes - 1;	/* a backup follows */
	call->timeout_ms = type->provider.timeout_ms;
	call->connect_timeout_ms = type->provider.connect_timeout_ms;
	call->throttle = type->provider.throttle;
	call->breaker_threshold = type->provider.breaker_threshold;
	call->breaker_cooldown_ms = type->provider.breaker_cooldown_ms;
	key = psprintf("%s:" INT64_FORMAT ":%s", type->code, job->user_id, job->order_id);
	/* the fallback's payload is for the fallback's provider only */
	sent = *job;
	if (type->has_fallback)
		sent.payload = DatumGetJsonbP(DirectFunctionCall2(jsonb_delete, JsonbPGetDatum(job->payload),
														  CStringGetTextDatum("fallback")));
	if (type->endpoint_by)
		sender_endpoint_request(call, type, eps, &sent, key);	/* endpoints.c */
	else
		notif_build_request(call, &type->provider, key, sent.payload, job->traceparent);
	call->key = key;
	if (type->provider.batch_max > 1)
		call->message = call->body; /* it goes in a batch (batch_calls.c) */
	/*
	 * a retry after an unknown outcome: first ask the provider that took
	 * that call (lookup.c), whichever takes this one; found, no call (a
	 * backup's copy would be a duplicate).  Not while its breaker is open:
	 * a provider that is down answers no lookup either.
	 */
	if (job->after_unknown && type->delivery == AT_LEAST_ONCE)
	{
		const NotifProviderConf *asked = same_provider ? &type->provider :
			notif_lane_provider(sender.types, sender.n_types, job->last_provider);
		TimestampTz until;

		if (asked && asked->lookup &&
			(same_provider ||
			 notif_breaker_admit(asked, GetCurrentTimestamp(), &until) == BREAKER_CALLS))
		{
			call->lookup_url = notif_lookup_url(asked->lookup, key);
			call->lookup_provider = pstrdup(asked->name);
		}
	}
	MemoryContextSwitchTo(old);
	return call;
}

void
sender_free_call(NotifCall *call)
{
	notif_free_request(call);
	sender_endpoint_wipe(call);
	if (call->batch)
		notif_batch_free(call->batch);
	MemoryContextDelete(call->cxt);
}


/*
 * A provider's pool has room again (a call ended, or a claimed job made no
 * call): claim now if a claim stopped at a full pool (http/ramp.c).
 */
static void
room_freed(void)
{
	if (sender.claim_when_call_ends)
	{
		sender.claim_when_call_ends = false;
		sender.claim_at = 0;
	}
}

/* SIGTERM: the calls it ends say nothing of their provider */
static bool dropping = false;

/* a probe of its provider's breaker that makes no call: another may go */
static void
probe_unused(NotifCall *call)
{
	if (call->probe)
		notif_breaker_probe_unused(call->throttle, false);
	call->probe = false;
}

/* A claimed call that never started: record it with this outcome. */
void
sender_never_started(NotifCall *call, NotifOutcome outcome)
{
	probe_unused(call);
	call->outcome = outcome;
	call->started_at = call->ended_at = GetCurrentTimestamp();
	notif_throttle_release(call->throttle, 1, false);
	dlist_push_tail(&sender.finished, &call->node);
	room_freed();
}

/*
 * Its provider's breaker is open (and it is not the probe): the call does
 * not start, and its job goes back to the queue without a try, due when
 * the breaker lets a call through (amo_breaker_open, alo_breaker_open).
 */
static bool
breaker_refuses(NotifCall *call, TimestampTz now)
{
	int64		wait_ms;

	if (notif_breaker_may_call(call, now, &wait_ms))
		return false;
	call->job.breaker_open = true;
	call->retry_after_ms = wait_ms;
	return true;
}

/*
 * Start a call whose claim has committed, if it still may: OUTCOME_NONE
 * when it is in flight, else why it never started (nothing was sent).
 */
static NotifOutcome
start_call(NotifCall *call, TimestampTz now)
{
	if (!notif_call_may_start(call->job.delivery, call->job.deadline_at, &call->job.dedup, now))
		return OUTCOME_NOT_STARTED;
	if (breaker_refuses(call, now))
		return OUTCOME_UNREACHED;
	if (call->refused)
	{
		call->error = call->refused;	/* its provider cannot take it: no call */
		return OUTCOME_REJECTED;
	}
	if (!notif_http_start(call))
		return OUTCOME_UNREACHED;
	return OUTCOME_NONE;
}

/*
 * A message of a batch that does not go: recorded with this outcome (the
 * call that carries the batch holds the grant).
 */
static void
set_aside(NotifCall *call, NotifOutcome outcome, TimestampTz now)
{
	probe_unused(call);
	call->outcome = outcome;
	call->started_at = call->ended_at = now;
	dlist_push_tail(&sender.finished, &call->node);
}

/*
 * Start the call of a batch (batch_calls.c): its messages that may still
 * go, the first of them on the wire carrying the others (its body written
 * again without those that may not); none, or the call cannot start: each
 * message is recorded as not sent, and the call's grant given back.
 */
static void
start_batch(NotifCall *carrier, TimestampTz now)
{
	NotifBatch *b = carrier->batch;
	NotifCall **go = palloc(sizeof(NotifCall *) * b->n);
	bool		refused = breaker_refuses(carrier, now);
	int			n_go = 0;
	int			i;

	for (i = 0; i < b->n; i++)
	{
		NotifCall  *m = b->calls[i];

		if (refused)
		{
			m->job.breaker_open = true;
			m->retry_after_ms = carrier->retry_after_ms;
		}
		else if (notif_call_may_start(m->job.delivery, m->job.deadline_at, &m->job.dedup, now))
		{
			go[n_go++] = m;
			continue;
		}
		if (m != carrier)
			set_aside(m, refused ? OUTCOME_UNREACHED : OUTCOME_NOT_STARTED, now);
	}
	if (n_go > 0 && n_go < b->n)
		notif_batch_keep(b, go, n_go);
	if (n_go > 0 && notif_http_start(go[0]))
	{
		pg_atomic_fetch_add_u32(&sender.slot->inflight, 1);
		if (go[0] != carrier)
			set_aside(carrier, OUTCOME_NOT_STARTED, now);
		pfree(go);
		return;
	}
	/* nothing goes: each message not sent, the grant back */
	for (i = 1; i < n_go; i++)
	{
		go[i]->error = go[0]->error;
		set_aside(go[i], OUTCOME_UNREACHED, now);
	}
	if (n_go > 0 && go[0] != carrier)
	{
		set_aside(go[0], OUTCOME_UNREACHED, now);
		sender_never_started(carrier, refused ? OUTCOME_UNREACHED : OUTCOME_NOT_STARTED);
	}
	else
		sender_never_started(carrier, n_go > 0 || refused ? OUTCOME_UNREACHED : OUTCOME_NOT_STARTED);
	pfree(go);
}

/*
 * The claimed calls, once their claim has committed.  A call with a status
 * lookup to ask (lookup.c) starts that instead; the lookup holds the call's
 * grant meanwhile (the two are never in flight together).
 */
void
sender_start_claimed(void)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &sender.claimed)
	{
		NotifCall  *call = dlist_container(NotifCall, node, iter.cur);
		TimestampTz now = GetCurrentTimestamp();
		NotifOutcome not_started;

		dlist_delete(&call->node);
		if (call->batch && call->batch->n > 1)
		{
			start_batch(call, now);
			continue;
		}
		if (call->lookup_url && notif_call_may_start(call->job.delivery, call->job.deadline_at,
													 &call->job.dedup, now) &&
			!breaker_refuses(call, now) &&
			sender_lookup_start(call, now))
		{
			pg_atomic_fetch_add_u32(&sender.slot->inflight, 1);	/* asked first */
			continue;
		}
		call->lookup_url = NULL;	/* not asked: the call goes ahead */
		if (call->job.breaker_open)
			not_started = OUTCOME_UNREACHED;	/* refused above */
		else
			not_started = start_call(call, now);
		if (not_started != OUTCOME_NONE)
			sender_never_started(call, not_started);
		else
			pg_atomic_fetch_add_u32(&sender.slot->inflight, 1);
	}
}

/*
 * The calls whose status lookup ended (lookup.c).  Found: the job's call is
 * not made, the job ends as accepted (alo_lookup_found).  Otherwise the call
 * starts now, if it still may, under the grant the lookup held, taking one
 * more of the provider's rate-limit tokens (throttle.c).  Each was counted
 * in flight while it asked.
 */
static int
go_on_after_lookups(void)
{
	NotifCall  *call;
	int			found = 0;

	while ((call = sender_lookup_next_answered()) != NULL)
	{
		NotifOutcome not_started;

		call->lookup_url = NULL;
		if (call->job.lookup == LOOKUP_FOUND)
		{
			/* the lookup's times and status are the job's */
			call->outcome = OUTCOME_ACCEPTED;
			probe_unused(call);
			notif_throttle_release(call->throttle, 1, false);
			dlist_push_tail(&sender.finished, &call->node);
			room_freed();
			found++;
		}
		else if ((not_started = start_call(call, GetCurrentTimestamp())) != OUTCOME_NONE)
			sender_never_started(call, not_started);
		else
		{
			const NotifProviderConf *provider = notif_lane_provider(sender.types, sender.n_types,
																	call->provider);

			if (provider)
				notif_throttle_charge(call->throttle, provider, sender.lane_senders,
									  GetCurrentTimestamp());
			continue;			/* in flight, still counted */
		}
		pg_atomic_fetch_sub_u32(&sender.slot->inflight, 1);
	}
	return found;
}

/* Take the calls libcurl finished; account for them. */
void
sender_collect_finished(void)
{
	NotifCall  *call;
	int			sent = go_on_after_lookups();

	while ((call = notif_http_next_done()) != NULL)
	{
		/* an at_most_once job retried for its provider's window counted once */
		if (notif_ends_sent(call->job.delivery, call->outcome) &&
			!(call->job.delivery == AT_MOST_ONCE && call->job.dedup.retry))
			sent++;
		/* before its grant is released: the slot is still its provider's */
		if (!dropping)
			notif_breaker_record(call, call->ended_at);
		else
			probe_unused(call);
		notif_throttle_release(call->throttle, 1, false);
		if (call->http_status == 429 && call->retry_after_ms > 0 && !call->device_busy)
			notif_throttle_pause(call->throttle,
								 TimestampTzPlusMilliseconds(call->ended_at, call->retry_after_ms));
		pg_atomic_fetch_sub_u32(&sender.slot->inflight, 1);
		pg_atomic_fetch_add_u64(&sender.slot->sent, 1);
		dlist_push_tail(&sender.finished, &call->node);
		sent += sender_batch_ended(call);	/* its other messages, if a batch */
		room_freed();
	}
	if (sent > 0)
		notif_count_sent(sender.slot, sent);
}

/*
 * Let libcurl work, then take the calls it finished.  Always both: a call
 * that ends inside the drive (a fast provider answers while the batch is
 * still being sent) must be seen before the next wait, which knows nothing
 * of libcurl's finished calls and would otherwise sleep on sockets that
 * have nothing more to say.
 */
void
sender_drive_calls(bool sockets_ready)
{
	notif_http_drive(sockets_ready);
	sender_collect_finished();
}

void
sender_discard_claimed(void)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &sender.claimed)
	{
		NotifCall  *call = dlist_container(NotifCall, node, iter.cur);

		dlist_delete(&call->node);
		probe_unused(call);
		notif_throttle_release(call->throttle, 1, true);
		sender_batch_discard(call);
		sender_free_call(call);
	}
}

/*
 * SIGTERM: the calls whose lookup ended are dropped like the claimed ones,
 * their jobs left to the recovery of a stopped sender's (lost_retry).
 */
static void
discard_answered(void)
{
	NotifCall  *call;

	while ((call = sender_lookup_next_answered()) != NULL)
	{
		probe_unused(call);
		notif_throttle_release(call->throttle, 1, false);
		pg_atomic_fetch_sub_u32(&sender.slot->inflight, 1);
		sender_free_call(call);
	}
}

/* SIGTERM: drop the calls in flight and the claimed ones; they are recorded next round. */
void
sender_drop_calls(void)
{
	dropping = true;
	notif_http_abort_all("the sender stopped during the call (shutdown)");
	discard_answered();
	sender_collect_finished();
	sender_discard_claimed();
}
