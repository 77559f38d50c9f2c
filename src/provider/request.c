/*-------------------------------------------------------------------------
 *
 * provider/request.c
 *      The provider request builder: turns a job's payload into the URL,
 *      body and headers of one HTTP call, by the provider's format.
 *
 *   json   POST, the payload as a JSON document (application/json)
 *   form   POST, its top-level keys as application/x-www-form-urlencoded
 *   query  GET, its top-level keys as URL query parameters
 *   fcm    FCM HTTP v1 (provider/fcm.c)
 *   apns   APNs (provider/apns.c)
 *
 * A payload that an fcm or apns provider cannot take (provider/payload.c) is
 * not sent: call->refused says why, and the job fails without a call.
 *
 * A provider with a ref_field gets the job's key as one more top-level
 * field (replacing a payload field of that name), so that its delivery
 * reports can name the job.  The bytes depend on the stored payload and the
 * key only, so every attempt of a job sends the same body.  Top-level
 * string values travel as they are; other values as their JSON text; null
 * as an empty value.
 *
 * A job's traceparent (W3C trace context) goes as the traceparent header
 * on each of its calls, whatever the format; a provider with signing adds
 * the Standard Webhooks headers, signing the body built here
 * (provider/webhook_sign.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "provider/push.h"
#include "provider/request.h"
#include "provider/webhook_sign.h"

/* percent-encode everything but RFC 3986 unreserved characters */
void
notif_append_urlencoded(StringInfo buf, const char *s, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t		i;

	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			(c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~')
			appendStringInfoChar(buf, (char) c);
		else
		{
			appendStringInfoChar(buf, '%');
			appendStringInfoChar(buf, hex[c >> 4]);
			appendStringInfoChar(buf, hex[c & 15]);
		}
	}
}

/* a top-level value as the text it travels as */
static void
append_value(StringInfo buf, JsonbValue *v)
{
	switch (v->type)
	{
		case jbvString:
			notif_append_urlencoded(buf, v->val.string.val, v->val.string.len);
			break;
		case jbvNumeric:
			{
				char	   *s = DatumGetCString(DirectFunctionCall1(numeric_out,
																	NumericGetDatum(v->val.numeric)));

				notif_append_urlencoded(buf, s, strlen(s));
				break;
			}
		case jbvBool:
			appendStringInfoString(buf, v->val.boolean ? "true" : "false");
			break;
		case jbvNull:
			break;
		case jbvBinary:
			{
				char	   *s = JsonbToCString(NULL, v->val.binary.data, v->val.binary.len);

				notif_append_urlencoded(buf, s, strlen(s));
				break;
			}
		default:
			elog(ERROR, "unexpected jsonb value type %d", (int) v->type);
	}
}

/* k1=v1&k2=v2 from the payload's top-level keys */
static void
append_pairs(StringInfo buf, Jsonb *payload)
{
	JsonbIterator *it = JsonbIteratorInit(&payload->root);
	JsonbValue	v;
	JsonbIteratorToken tok;
	bool		first = true;

	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			if (!first)
				appendStringInfoChar(buf, '&');
			first = false;
			notif_append_urlencoded(buf, v.val.string.val, v.val.string.len);
			appendStringInfoChar(buf, '=');
		}
		else if (tok == WJB_VALUE)
			append_value(buf, &v);
	}
}

/*
 * The payload with "field": key added at the top level (jsonb keeps an
 * object's keys in one canonical order, so the result is the same bytes
 * for every attempt).
 */
/*
 * The payload as a provider with a payload_map wants it: under each of the
 * map's keys, the payload's member its value names (left out when the
 * payload lacks it).  The same payload gives the same bytes every attempt.
 */
static Jsonb *
mapped_payload(Jsonb *payload, Jsonb *map)
{
	JsonbParseState *state = NULL;
	JsonbIterator *it = JsonbIteratorInit(&map->root);
	JsonbValue	v;
	JsonbValue	k = {0};
	JsonbValue *result;
	JsonbIteratorToken tok;

	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		JsonbValue	member;

		if (tok == WJB_KEY)
			k = v;
		else if (tok == WJB_VALUE && v.type == jbvString &&
				 getKeyJsonValueFromContainer(&payload->root, v.val.string.val,
											  v.val.string.len, &member) != NULL)
		{
			pushJsonbValue(&state, WJB_KEY, &k);
			pushJsonbValue(&state, WJB_VALUE, &member);
		}
	}
	result = pushJsonbValue(&state, WJB_END_OBJECT, NULL);
	return JsonbValueToJsonb(result);
}

static Jsonb *
with_ref_field(Jsonb *payload, const char *field, const char *key)
{
	JsonbParseState *state = NULL;
	JsonbIterator *it = JsonbIteratorInit(&payload->root);
	JsonbValue	v;
	JsonbValue	k;
	JsonbIteratorToken tok;
	JsonbValue *result = NULL;
	bool		skip = false;

	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_END_OBJECT)
		{
			k.type = jbvString;
			k.val.string.val = (char *) field;
			k.val.string.len = strlen(field);
			pushJsonbValue(&state, WJB_KEY, &k);
			v.type = jbvString;
			v.val.string.val = (char *) key;
			v.val.string.len = strlen(key);
			pushJsonbValue(&state, WJB_VALUE, &v);
			result = pushJsonbValue(&state, WJB_END_OBJECT, NULL);
		}
		else if (tok == WJB_KEY)
		{
			skip = (v.val.string.len == (int) strlen(field) &&
					memcmp(v.val.string.val, field, v.val.string.len) == 0);
			if (!skip)
				pushJsonbValue(&state, tok, &v);
		}
		else if (tok == WJB_VALUE)
		{
			if (!skip)
				pushJsonbValue(&state, tok, &v);
		}
		else
			pushJsonbValue(&state, tok, tok == WJB_BEGIN_OBJECT ? NULL : &v);
	}
	return JsonbValueToJsonb(result);
}

/*
 * A provider's URL parsed once, when its configuration is read, for the
 * formats whose calls all go to it (json, form, fcm; a query or apns call
 * builds its own).  NULL for the others, or if libcurl's parser refuses
 * it: a call then gives the string alone, and libcurl's own error for it
 * is the call's.
 */
CURLU *
notif_url_parse(const NotifProviderConf *provider)
{
	CURLU	   *u;

	if (provider->url == NULL ||
		(provider->format != FORMAT_JSON && provider->format != FORMAT_FORM &&
		 provider->format != FORMAT_FCM))
		return NULL;
	u = curl_url();
	if (u != NULL && curl_url_set(u, CURLUPART_URL, provider->url, 0) != CURLUE_OK)
	{
		curl_url_cleanup(u);
		u = NULL;
	}
	return u;
}

/*
 * Fill call->url, body and headers.  Allocates in the current memory
 * context (the call's) and, for the header list and the parsed URL, with
 * malloc (libcurl's).
 */
void
notif_build_request(NotifCall *call, const NotifProviderConf *provider,
					const char *key, Jsonb *payload, const char *traceparent)
{
	StringInfoData buf;
	struct curl_slist *h = NULL;
	struct curl_slist *s;

	call->format = provider->format;
	call->provider = pstrdup(provider->name);
	call->max_connections = provider->max_connections;
	call->ca_cert = provider->ca_cert ? pstrdup(provider->ca_cert) : NULL;
	call->refused = notif_push_payload_error(provider->format, payload, provider->apns_topics,
											 provider->fcm_topics);
	if (call->refused)
	{
		call->refused = psprintf("payload refused before the call: not a valid %s message: %s",
								 provider->format == FORMAT_FCM ? "FCM" : "APNs", call->refused);
		return;
	}
	if (provider->payload_map && provider->format != FORMAT_FCM &&
		provider->format != FORMAT_APNS)
		payload = mapped_payload(payload, provider->payload_map);
	if (provider->ref_field && provider->format != FORMAT_FCM &&
		provider->format != FORMAT_APNS)
		payload = with_ref_field(payload, provider->ref_field, key);

	initStringInfo(&buf);
	switch (provider->format)
	{
		case FORMAT_JSON:
			call->url = pstrdup(provider->url);
			call->body = JsonbToCString(NULL, &payload->root, VARSIZE(payload));
			call->body_len = strlen(call->body);
			h = curl_slist_append(h, "Content-Type: application/json");
			break;
		case FORMAT_FORM:
			call->url = pstrdup(provider->url);
			append_pairs(&buf, payload);
			call->body = buf.data;
			call->body_len = buf.len;
			h = curl_slist_append(h, "Content-Type: application/x-www-form-urlencoded");
			break;
		case FORMAT_QUERY:
			appendStringInfoString(&buf, provider->url);
			if (JB_ROOT_COUNT(payload) > 0)
				appendStringInfoChar(&buf, strchr(provider->url, '?') ? '&' : '?');
			append_pairs(&buf, payload);
			call->url = buf.data;
			call->body = NULL;
			call->body_len = 0;
			break;
		case FORMAT_FCM:
			notif_build_fcm(call, provider, payload, &h);
			break;
		case FORMAT_APNS:
			notif_build_apns(call, provider, payload, &h);
			break;
	}

	/* no "Expect: 100-continue" round trip */
	h = curl_slist_append(h, "Expect:");
	for (s = provider->headers; s; s = s->next)
		h = curl_slist_append(h, s->data);
	if (provider->idempotency_header)
		h = curl_slist_append(h, psprintf("%s: %s", provider->idempotency_header, key));
	if (traceparent)
		h = curl_slist_append(h, psprintf("traceparent: %s", traceparent));
	/* a customer endpoint's secrets sign its calls, whatever the provider's signing */
	if ((provider->signing || call->endpoint_secrets) &&
		(provider->format == FORMAT_JSON || provider->format == FORMAT_FORM ||
		 provider->format == FORMAT_QUERY))
	{
		call->refused = notif_webhook_headers(&h, provider->credentials, call->endpoint_secrets,
											  key, call->body, call->body_len);
		if (call->refused)
		{
			curl_slist_free_all(h);
			return;
		}
	}
	if (h == NULL)
		elog(ERROR, "out of memory building request headers");
	call->headers = h;

	/*
	 * The call's own copy of its provider's parsed URL (the provider's may
	 * be freed by a configuration change while the call is in flight), so
	 * that libcurl need not parse the URL again; NULL: it does.  Last, as
	 * nothing may throw after it (a copy would leak).
	 */
	if (provider->curlu)
		call->curlu = curl_url_dup(provider->curlu);
}
