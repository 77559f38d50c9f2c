/*-------------------------------------------------------------------------
 *
 * provider/batch.c
 *      Provider batches on the wire (notif_provider.batch_max > 1, json
 *      providers only): the body of one call that carries several messages,
 *      and what its answer says of each.
 *
 * Each message is its job's payload as one call of that provider would
 * send it (payload_map, ref_field: provider/request.c); the body is their
 * JSON array, or an object whose batch_format "field" member is that
 * array.  The call carries the provider's headers but no idempotency
 * header: one header cannot name the keys of many messages, so each
 * message carries its own key (ref_field).
 *
 * The answer: a call that did not end 2xx gives every message its outcome
 * (a timeout or a 5xx makes each ambiguous, a 4xx rejects each).  A 2xx is
 * read by batch_results: the array at "path", each result matched to its
 * message by order or by the key at "key_field", its value at "field"
 * (read as a status lookup's field: a string, a number or a boolean, as
 * text) among the "accepted" or "rejected" values; any other value, and a
 * message with no result, is unknown.  A 2xx whose results cannot be read
 * (not JSON, no array at the path) makes every message unknown.  A
 * rejected message whose reason is one of "unregistered" (Expo's
 * DeviceNotRegistered) names a dead device token: the one at
 * "token_field" of its message (default "to") goes to notif_unregistered,
 * as an FCM or APNs answer's does.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

#include "core/excerpt.h"
#include "core/json.h"
#include "provider/batch.h"

/* the value at a dotted path of a container, or false */
static bool
value_at(JsonbContainer *c, const char *path, JsonbValue *out)
{
	char	   *copy = pstrdup(path);
	char	   *save = NULL;
	char	   *step;
	bool		first = true;

	for (step = strtok_r(copy, ".", &save); step; step = strtok_r(NULL, ".", &save))
	{
		if (!first)
		{
			if (out->type != jbvBinary)
				return false;
			c = out->val.binary.data;
		}
		first = false;
		if (c == NULL || !JsonContainerIsObject(c) ||
			getKeyJsonValueFromContainer(c, step, strlen(step), out) == NULL)
			return false;
	}
	return !first;
}

/* a member of the spec, as a C string, or NULL */
static char *
spec_text(Jsonb *spec, const char *name)
{
	JsonbValue	v;

	if (getKeyJsonValueFromContainer(&spec->root, name, strlen(name), &v) == NULL ||
		v.type != jbvString)
		return NULL;
	return pnstrdup(v.val.string.val, v.val.string.len);
}

/* a scalar as the text it is compared as; NULL if not a scalar */
static char *
scalar_text(JsonbValue *v)
{
	switch (v->type)
	{
		case jbvString:
			return pnstrdup(v->val.string.val, v->val.string.len);
		case jbvNumeric:
			return DatumGetCString(DirectFunctionCall1(numeric_out,
													   NumericGetDatum(v->val.numeric)));
		case jbvBool:
			return pstrdup(v->val.boolean ? "true" : "false");
		default:
			return NULL;
	}
}

/* is s one of the strings of the spec's array member "name"? */
static bool
spec_lists(Jsonb *spec, const char *name, const char *s)
{
	JsonbValue	v;
	JsonbValue	wanted;

	if (s == NULL ||
		getKeyJsonValueFromContainer(&spec->root, name, strlen(name), &v) == NULL ||
		v.type != jbvBinary || !JsonContainerIsArray(v.val.binary.data))
		return false;
	wanted.type = jbvString;
	wanted.val.string.val = (char *) s;
	wanted.val.string.len = strlen(s);
	return findJsonbValueFromContainer(v.val.binary.data, JB_FARRAY, &wanted) != NULL;
}

NotifBatch *
notif_batch_new(MemoryContext parent, const NotifProviderConf *provider, int64 id,
				NotifCall **calls, int n)
{
	MemoryContext cxt = AllocSetContextCreate(parent, "notif_deliver batch",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	NotifBatch *b = palloc0(sizeof(NotifBatch));
	int			i;

	b->cxt = cxt;
	b->id = id;
	b->field = provider->batch_field ? pstrdup(provider->batch_field) : NULL;
	if (provider->batch_results)
	{
		b->results = palloc(VARSIZE(provider->batch_results));
		memcpy(b->results, provider->batch_results, VARSIZE(provider->batch_results));
	}
	b->calls = palloc(sizeof(NotifCall *) * n);
	for (i = 0; i < n; i++)
		calls[i]->batch_id = id;
	MemoryContextSwitchTo(old);
	notif_batch_keep(b, calls, n);
	notif_batch_carry(b, provider);
	return b;
}

/*
 * The headers of the call that carries the batch: its provider's, without
 * the idempotency header (each message carries its own key).
 */
void
notif_batch_carry(NotifBatch *b, const NotifProviderConf *provider)
{
	NotifCall  *carrier = b->calls[0];
	struct curl_slist *h = NULL;
	struct curl_slist *s;

	h = curl_slist_append(h, "Content-Type: application/json");
	h = curl_slist_append(h, "Expect:");
	for (s = provider->headers; s; s = s->next)
		h = curl_slist_append(h, s->data);
	if (h == NULL)
		elog(ERROR, "out of memory building request headers");
	if (carrier->headers)
		curl_slist_free_all(carrier->headers);
	carrier->headers = h;
}

/*
 * The messages that go in the call, calls[0] the one that goes on the wire
 * (another than before when the first could not start): its body is built
 * again from theirs.
 */
void
notif_batch_keep(NotifBatch *b, NotifCall **calls, int n)
{
	NotifCall  *was = b->n > 0 ? b->calls[0] : NULL;
	NotifCall  *carrier = calls[0];
	StringInfoData body;
	MemoryContext old = MemoryContextSwitchTo(b->cxt);
	int			i;

	if (was != NULL && was != carrier)
	{
		/* the wire's headers and parsed URL go with the batch */
		struct curl_slist *h = carrier->headers;

		carrier->headers = was->headers;
		was->headers = h;
		was->batch = NULL;
		was->read_answer = NULL;
		was->body = was->message;
		was->body_len = strlen(was->message);
	}
	memmove(b->calls, calls, sizeof(NotifCall *) * n);
	b->n = n;
	carrier->batch = b;
	carrier->read_answer = notif_batch_read_answer;

	initStringInfo(&body);
	if (b->field)
	{
		appendStringInfoString(&body, "{");
		escape_json(&body, b->field);
		appendStringInfoString(&body, ": ");
	}
	appendStringInfoChar(&body, '[');
	for (i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoString(&body, ", ");
		appendStringInfoString(&body, b->calls[i]->message);
	}
	appendStringInfoChar(&body, ']');
	if (b->field)
		appendStringInfoChar(&body, '}');
	carrier->body = body.data;
	carrier->body_len = body.len;
	carrier->body_sent = 0;
	MemoryContextSwitchTo(old);
}

/* a message's outcome, and why when it was not accepted */
static void
set_outcome(NotifCall *call, NotifOutcome outcome, const char *why)
{
	call->outcome = outcome;
	call->error = (outcome == OUTCOME_ACCEPTED || why == NULL) ? NULL :
		MemoryContextStrdup(call->cxt, why);
}

/*
 * A rejected message's device token is dead: the token at "token_field"
 * of the message as sent (its payload), for notif_unregistered.
 */
static void
read_dead_token(NotifBatch *b, NotifCall *call, const char *reason)
{
	char	   *token_field = spec_text(b->results, "token_field");
	Jsonb	   *message = notif_parse_json(call->message);
	JsonbValue	v;

	if (message == NULL ||
		!value_at(&message->root, token_field ? token_field : "to", &v) ||
		v.type != jbvString || v.val.string.len == 0)
		return;					/* no token to list: failed all the same */
	call->push_token = MemoryContextAlloc(call->cxt, v.val.string.len + 1);
	memcpy(call->push_token, v.val.string.val, v.val.string.len);
	call->push_token[v.val.string.len] = '\0';
	call->reason = MemoryContextStrdup(call->cxt, reason);
	call->unregistered = true;
	call->unregistered_at = GetCurrentTimestamp();
}

/*
 * What one result says of its message: its value among the accepted or
 * the rejected ones, else unknown; the reason at "reason" goes with it
 * (its excerpt: it may echo a number).
 */
static void
read_result(NotifBatch *b, JsonbContainer *result, NotifCall *call)
{
	char	   *field = spec_text(b->results, "field");
	char	   *reason_path = spec_text(b->results, "reason");
	JsonbValue	v;
	char	   *value = NULL;
	char	   *reason = NULL;
	char	   *why;
	bool		rejected;

	if (result != NULL && value_at(result, field, &v))
		value = scalar_text(&v);
	if (spec_lists(b->results, "accepted", value))
	{
		set_outcome(call, OUTCOME_ACCEPTED, NULL);
		return;
	}
	why = psprintf("batch result %s", value ? value : "missing");
	if (reason_path && result != NULL && value_at(result, reason_path, &v) &&
		v.type == jbvString)
	{
		reason = pnstrdup(v.val.string.val, v.val.string.len);
		why = psprintf("%s: %s", why, notif_excerpt(v.val.string.val, v.val.string.len, false));
	}
	else if (value)
		why = notif_excerpt(why, strlen(why), false);
	rejected = spec_lists(b->results, "rejected", value);
	set_outcome(call, rejected ? OUTCOME_REJECTED : OUTCOME_UNKNOWN, why);
	if (rejected && spec_lists(b->results, "unregistered", reason))
		read_dead_token(b, call, reason);
}

/* the answer's results, matched to the messages by order or by key */
static bool
read_results(NotifBatch *b, NotifCall *carrier)
{
	Jsonb	   *jb;
	JsonbContainer *array;
	JsonbValue	v;
	char	   *path = spec_text(b->results, "path");
	char	   *match = spec_text(b->results, "match");
	char	   *key_field = spec_text(b->results, "key_field");
	bool	   *seen;
	int			n_results,
				i;

	if (carrier->answer == NULL || carrier->answer->len == 0 ||
		(jb = notif_parse_json(carrier->answer->data)) == NULL)
		return false;
	if (path == NULL)
	{
		if (!JB_ROOT_IS_ARRAY(jb) || JB_ROOT_IS_SCALAR(jb))
			return false;
		array = &jb->root;
	}
	else
	{
		if (!value_at(&jb->root, path, &v) || v.type != jbvBinary ||
			!JsonContainerIsArray(v.val.binary.data))
			return false;
		array = v.val.binary.data;
	}
	n_results = JsonContainerSize(array);
	seen = palloc0(sizeof(bool) * b->n);
	for (i = 0; i < n_results; i++)
	{
		JsonbValue *r = getIthJsonbValueFromContainer(array, i);
		JsonbContainer *result = (r && r->type == jbvBinary) ? r->val.binary.data : NULL;
		int			m = -1;

		if (match == NULL || strcmp(match, "order") == 0)
			m = i < b->n ? i : -1;
		else if (result != NULL && value_at(result, key_field, &v))
		{
			char	   *key = scalar_text(&v);
			int			k;

			for (k = 0; key != NULL && k < b->n; k++)
				if (!seen[k] && b->calls[k]->key && strcmp(b->calls[k]->key, key) == 0)
				{
					m = k;
					break;
				}
		}
		if (m < 0 || seen[m])
			continue;			/* a result for no message of this call */
		seen[m] = true;
		read_result(b, result, b->calls[m]);
	}
	for (i = 0; i < b->n; i++)
		if (!seen[i])
			set_outcome(b->calls[i], OUTCOME_UNKNOWN, "the batch's answer has no result for this message");
	return true;
}

/*
 * The call that carried the batch ended: each message gets the call's
 * times and status, and its own outcome.
 */
void
notif_batch_read_answer(NotifCall *carrier)
{
	NotifBatch *b = carrier->batch;
	MemoryContext old;
	int			i;

	if (b->answered)
		return;					/* once: the carrier's outcome is now its message's */
	b->answered = true;
	old = MemoryContextSwitchTo(b->cxt);

	/* a non-2xx answer: its excerpt, never as written (it may echo a number) */
	if (carrier->outcome != OUTCOME_ACCEPTED && carrier->error == NULL &&
		carrier->answer != NULL && carrier->answer->len > 0)
		carrier->error = notif_excerpt(carrier->answer->data,
									   Min(carrier->answer->len, NOTIF_EXCERPT_SCAN),
									   carrier->answer->len > NOTIF_EXCERPT_SCAN);
	for (i = 1; i < b->n; i++)
	{
		NotifCall  *m = b->calls[i];

		m->started_at = carrier->started_at;
		m->ended_at = carrier->ended_at;
		m->http_status = carrier->http_status;
		m->http_version = carrier->http_version;
		m->retry_after_ms = carrier->retry_after_ms;
		m->outcome = carrier->outcome;
		m->error = carrier->error ? MemoryContextStrdup(m->cxt, carrier->error) : NULL;
	}
	if (carrier->outcome == OUTCOME_ACCEPTED && b->results != NULL && !read_results(b, carrier))
		for (i = 0; i < b->n; i++)
			set_outcome(b->calls[i], OUTCOME_UNKNOWN,
						"the batch's answer could not be read: each message's outcome is unknown");
	MemoryContextSwitchTo(old);
}

void
notif_batch_free(NotifBatch *b)
{
	MemoryContextDelete(b->cxt);
}
