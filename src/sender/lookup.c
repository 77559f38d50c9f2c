/*-------------------------------------------------------------------------
 *
 * sender/lookup.c
 *      Asking the provider before an at_least_once retry: "do you have
 *      message K?" (notif_provider.lookup_*).
 *
 * A claimed at_least_once job whose last call ended unknown, of a provider
 * with a status lookup, gets its lookup started instead of its call: one
 * more transfer of the sender's loop, on the provider's connections; the
 * job's call waits for it meanwhile, and nothing else does.  What the
 * answer says goes to the job (NotifJobRef.lookup), and calls.c goes on
 * from there: found, the call is not made and the
 * job ends as the lifecycle's row alo_lookup_found says; not found, or no
 * answer to rely on (a timeout, a refusal, a 5xx, an answer that does not
 * read), the call starts as it would have without the lookup.
 *
 * A lookup holds its job's grant of the provider's limits (max_inflight and
 * rate_limit: it comes before the call, never beside it), and the call
 * after it takes one more rate-limit token.  Its timeout is the provider's,
 * cut so that the call can still start and end before the job's deadline;
 * when no time is left for both, the retry goes ahead unasked.  Its headers
 * carry credentials: wiped when freed, never logged; its answer is read,
 * never kept.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

#include "http/http.h"
#include "sender/lookup.h"
#include "provider/lookup.h"
#include "provider/request.h"
#include "sender/sender.h"

/* the job calls waiting for their lookup, and those whose lookup ended */
static dlist_head asking = DLIST_STATIC_INIT(asking);
static dlist_head answered = DLIST_STATIC_INIT(answered);
static int	n_asking = 0;

/* A lookup ended (or was dropped): its job's call goes to "answered". */
static void
lookup_done(NotifCall *look)
{
	NotifCall  *call = (NotifCall *) look->on_done_arg;
	const NotifProviderConf *provider;

	/* read by the provider's rules as they are now; none: no answer */
	provider = notif_lane_provider(sender.types, sender.n_types, call->lookup_provider);
	if (provider != NULL && provider->lookup != NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(look->cxt);

		call->job.lookup = notif_lookup_read(provider->lookup, look);
		MemoryContextSwitchTo(old);
	}
	else
		call->job.lookup = LOOKUP_UNANSWERED;
	if (call->job.lookup == LOOKUP_FOUND)
	{
		/* what the job records: the lookup is all that happened */
		call->http_status = look->http_status;
		call->started_at = look->started_at;
		call->ended_at = look->ended_at;
	}
	if (look->answer)
		explicit_bzero(look->answer->data, look->answer->len);
	MemoryContextDelete(look->cxt);

	dlist_delete(&call->node);
	n_asking--;
	dlist_push_tail(&answered, &call->node);
}

/*
 * Start the lookup of a claimed call (its lookup_url set) instead of the
 * call; false when it could not start (the call then goes ahead unasked).
 */
bool
sender_lookup_start(NotifCall *call, TimestampTz now)
{
	const NotifProviderConf *provider;
	MemoryContext cxt;
	MemoryContext old;
	NotifCall  *look;
	struct curl_slist *h;

	long		timeout_ms;

	/* the provider asked: the call's, or the one that took its last call */
	provider = notif_lane_provider(sender.types, sender.n_types, call->lookup_provider);
	if (provider == NULL || provider->lookup == NULL)
		return false;
	timeout_ms = provider->timeout_ms;
	if (call->job.deadline_at != 0)
	{
		/* the call must still be able to start and end before the deadline */
		long		left = (long) ((call->job.deadline_at - now) / 1000) - call->timeout_ms;

		if (left < 1)
			return false;
		timeout_ms = Min(timeout_ms, left);
	}

	cxt = AllocSetContextCreate(call->cxt, "notif_deliver lookup", ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(cxt);
	look = palloc0(sizeof(NotifCall));
	look->cxt = cxt;
	look->job = call->job;
	look->timeout_ms = timeout_ms;
	look->connect_timeout_ms = provider->connect_timeout_ms;
	look->throttle = -1;
	look->url = call->lookup_url;
	look->provider = call->lookup_provider;
	look->format = provider->format;
	look->max_connections = provider->max_connections;
	look->ca_cert = provider->ca_cert ? pstrdup(provider->ca_cert) : NULL;
	look->head = provider->lookup->head;
	for (h = provider->lookup->headers; h; h = h->next)
		look->headers = curl_slist_append(look->headers, h->data);
	look->headers_secret = true;
	look->on_done = lookup_done;
	look->on_done_arg = call;
	MemoryContextSwitchTo(old);

	dlist_push_tail(&asking, &call->node);
	n_asking++;
	if (!notif_http_start_aux(look))
	{
		dlist_delete(&call->node);
		n_asking--;
		notif_free_request(look);
		MemoryContextDelete(cxt);
		return false;
	}
	return true;
}

/* The next call whose lookup ended, or NULL. */
NotifCall *
sender_lookup_next_answered(void)
{
	if (dlist_is_empty(&answered))
		return NULL;
	return dlist_container(NotifCall, node, dlist_pop_head_node(&answered));
}

/* Job calls waiting for their lookup (each holds two grants). */
int
sender_lookups_asking(void)
{
	return n_asking;
}
