/*-------------------------------------------------------------------------
 *
 * sender/endpoints.c
 *      Customers' endpoints (notif_endpoint): a type with an endpoint_by
 *      sends each job to the endpoint that the job's user_id, or a member
 *      of its payload, names; the call is its provider's (format, headers,
 *      timeouts, limits) but for the url, and carries the endpoint's
 *      signing secrets.  Its destination is guarded by the transport
 *      (core/endpoint_rules.c, http/sockets.c).  A job whose endpoint is
 *      missing or disabled makes no call: it fails, rejected, saying why.
 *      What the calls say of their endpoints is recorded with the round's
 *      results: a success clears failing_since, a failure (no answer, a
 *      timeout, a 5xx) sets it, and one that has failed for
 *      notif_deliver.endpoint_disable_after is disabled, with a WARNING.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

#include "core/endpoint_rules.h"
#include "provider/request.h"
#include "sender/breaker.h"
#include "sender/sender.h"
#include "store/endpoint_sql.h"
#include "store/job_sql.h"

/* the longest owner a job may name (notif_endpoint_owner_check) */
#define OWNER_MAXLEN 200

/* The owner of the endpoint a job addresses, or NULL (palloc'd). */
static char *
job_owner(const NotifTypeConf *type, const NotifClaimedJob *job)
{
	JsonbValue	v;

	if (strcmp(type->endpoint_by, "user_id") == 0)
		return psprintf(INT64_FORMAT, job->user_id);
	if (job->payload == NULL || !JB_ROOT_IS_OBJECT(job->payload) ||
		getKeyJsonValueFromContainer(&job->payload->root, type->endpoint_by,
									 strlen(type->endpoint_by), &v) == NULL)
		return NULL;
	if (v.type == jbvString && v.val.string.len > 0 && v.val.string.len <= OWNER_MAXLEN)
		return pnstrdup(v.val.string.val, v.val.string.len);
	if (v.type == jbvNumeric)
		return DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v.val.numeric)));
	return NULL;
}

/*
 * The endpoints of a claim's jobs of an endpoint type, read in one
 * statement (in the round's memory); NULL for any other type.
 */
SenderEndpoints *
sender_claim_endpoints(const NotifTypeConf *type, NotifClaimedJob *jobs, int n)
{
	SenderEndpoints *eps;
	char	  **owners;
	int			k = 0;
	int			j;

	if (type->endpoint_by == NULL || n == 0)
		return NULL;
	owners = palloc(sizeof(char *) * n);
	for (j = 0; j < n; j++)
		if (!jobs[j].deadline_passed && (owners[k] = job_owner(type, &jobs[j])) != NULL)
			k++;
	eps = MemoryContextAllocZero(sender.round_cxt, sizeof(SenderEndpoints));
	eps->n = notif_sql_endpoints(owners, k, sender.round_cxt, &eps->rows);
	return eps;
}

static const NotifEndpoint *
find(const SenderEndpoints *eps, const char *owner)
{
	int			i;

	for (i = 0; eps && i < eps->n; i++)
		if (strcmp(eps->rows[i].owner, owner) == 0)
			return &eps->rows[i];
	return NULL;
}

/*
 * Build a call of an endpoint type (in the call's memory): to the job's
 * endpoint, or refused (no call; the job fails, rejected, with why).
 */
void
sender_endpoint_request(NotifCall *call, const NotifTypeConf *type, const SenderEndpoints *eps,
						const NotifClaimedJob *job, const char *key)
{
	const NotifProviderConf *provider = &type->provider;
	char	   *owner = job_owner(type, job);
	const NotifEndpoint *ep = owner ? find(eps, owner) : NULL;
	NotifProviderConf p;
	int			i;

	call->endpoint_owner = owner;
	call->breaker_threshold = 0;	/* one customer's endpoint is not the provider */
	if (provider->format != FORMAT_JSON && provider->format != FORMAT_FORM &&
		provider->format != FORMAT_QUERY)
		call->refused = psprintf("no call: type \"%s\" sends to customers' endpoints (endpoint_by), which needs a provider of format json, form or query",
								 type->code);
	else if (owner == NULL)
		call->refused = psprintf("no call: the payload has no member \"%s\" (a string of 1 to %d characters, or a number) naming the job's endpoint",
					 type->endpoint_by, OWNER_MAXLEN);
	else if (ep == NULL)
		call->refused = psprintf("no call: no endpoint is registered for \"%s\" (notif_endpoint)",
								 owner);
	else if (!ep->enabled)
		call->refused = psprintf("no call: the endpoint of \"%s\" is disabled%s%s", owner,
								 ep->disabled_reason ? ": " : "",
								 ep->disabled_reason ? ep->disabled_reason : "");
	if (call->refused)
	{
		call->endpoint_owner = NULL;	/* no call: says nothing of the endpoint */
		call->format = provider->format;
		call->provider = pstrdup(provider->name);
		call->max_connections = provider->max_connections;
		return;
	}

	/* its secrets first: the request's builder signs with them, if set */
	if (ep->secrets)
	{
		for (i = 0; ep->secrets[i]; i++)
			;
		call->endpoint_secrets = palloc0(sizeof(char *) * (i + 1));
		for (i = 0; ep->secrets[i]; i++)
			call->endpoint_secrets[i] = pstrdup(ep->secrets[i]);
	}
	/* everything but the url from its provider */
	p = *provider;
	p.url = ep->url;
	p.curlu = NULL;				/* parsed by libcurl, per call */
	notif_build_request(call, &p, key, job->payload, job->traceparent);
	call->guard_destination = true;
}

/* Wipe the copies of an endpoint's secrets a call holds. */
void
sender_endpoint_wipe(NotifCall *call)
{
	int			i;

	if (call->endpoint_secrets == NULL)
		return;
	for (i = 0; call->endpoint_secrets[i]; i++)
		explicit_bzero(call->endpoint_secrets[i], strlen(call->endpoint_secrets[i]));
	call->endpoint_secrets = NULL;
}

/*
 * What the round's finished calls (but those passed over: recorded later)
 * say of their endpoints; logs the endpoints this disables, once each.
 */
void
sender_endpoint_results(const bool *passed)
{
	dlist_iter	iter;
	char	  **owners;
	bool	   *ok;
	TimestampTz *at;
	NotifEndpointDisabled *disabled;
	int			n = 0,
				i = 0,
				k;

	dlist_foreach(iter, &sender.finished)
		n++;
	if (n == 0)
		return;
	owners = palloc(sizeof(char *) * n);
	ok = palloc(sizeof(bool) * n);
	at = palloc(sizeof(TimestampTz) * n);
	n = 0;
	dlist_foreach(iter, &sender.finished)
	{
		NotifCall  *call = dlist_container(NotifCall, node, iter.cur);

		if (passed[i++] || call->endpoint_owner == NULL || call->started_at == 0 ||
			call->job.breaker_open ||
			(call->outcome & (OUTCOME_ACCEPTED | OUTCOME_REJECTED | OUTCOME_UNREACHED |
							  OUTCOME_UNKNOWN)) == 0)
			continue;			/* no call was made */
		owners[n] = call->endpoint_owner;
		ok[n] = !notif_call_says_down(call);	/* as the breaker reads it */
		at[n] = call->ended_at;
		n++;
	}
	k = notif_sql_endpoint_results(owners, ok, at, n,
								   (int64) notif_endpoint_disable_after_s * 1000,
								   sender.round_cxt, &disabled);
	for (i = 0; i < k; i++)
		ereport(WARNING,
				(errmsg("notif_deliver: the endpoint of \"%s\" is disabled: its calls have failed since %s",
						disabled[i].owner, timestamptz_to_str(disabled[i].failing_since)),
				 errdetail("No answer, a timeout or a 5xx, with no success, for longer than notif_deliver.endpoint_disable_after (%d s).  notif_endpoint_status shows it.",
						   notif_endpoint_disable_after_s),
				 errhint("Its jobs fail without a call until it is enabled again (UPDATE notif_endpoint SET enabled = true).")));
}
