/*-------------------------------------------------------------------------
 *
 * provider/payload.c
 *      What an 'fcm' or 'apns' payload must look like, checked twice: by
 *      notif_enqueue (refused with SQLSTATE 22023, nothing written) and by
 *      the sender before a call (a type moved to such a provider: the job
 *      fails with the reason, and no call is made).
 *
 *   fcm    FCM's message object: exactly one of "token", "topic",
 *          "condition" (non-empty strings); "data" a map of strings;
 *          "notification", "android", "apns", "webpush", "fcm_options"
 *          objects; no other member; with the provider's fcm_topics set,
 *          a token or a topic among them (no condition)
 *   apns   {"device_token": "<hex>", "headers": {name: "value"}, ...body}:
 *          header names among APNs' own (not authorization, which the sender
 *          sets), values single-line strings; the body (the payload without
 *          device_token and headers) at most 4096 bytes as sent; with the
 *          provider's apns_topics set, an apns-topic among them
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "lib/stringinfo.h"
#include "utils/jsonb.h"

#include "provider/push.h"

#define APNS_MAX_BODY 4096
#define APNS_MAX_TOKEN_LEN 200

static bool
key_is(JsonbValue *k, const char *name)
{
	return k->val.string.len == (int) strlen(name) &&
		memcmp(k->val.string.val, name, k->val.string.len) == 0;
}

static JsonbValue *
get(Jsonb *jb, const char *name)
{
	return getKeyJsonValueFromContainer(&jb->root, name, strlen(name), NULL);
}

static bool
is_object(JsonbValue *v)
{
	return v->type == jbvBinary && JsonContainerIsObject(v->val.binary.data);
}

/* an HTTP token (RFC 9110 5.6.2) */
static bool
is_http_token(const char *s, int len)
{
	int			i;

	if (len == 0)
		return false;
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  strchr("!#$%&'*+-.^_`|~", c) != NULL) || c == '\0')
			return false;
	}
	return true;
}

/* a provider's apns_topics or fcm_topics as one line: "a", "b" (for an error) */
static char *
topics_list(ArrayType *topics)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n,
				i;
	StringInfoData s;

	deconstruct_array(topics, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	initStringInfo(&s);
	for (i = 0; i < n; i++)
		if (!nulls[i])
			appendStringInfo(&s, "%s\"%s\"", s.len > 0 ? ", " : "", TextDatumGetCString(elems[i]));
	return s.data;
}

/* whether topics holds the topic of len bytes (compared exactly) */
static bool
topic_listed(const char *topic, int len, ArrayType *topics)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n,
				i;

	deconstruct_array(topics, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	for (i = 0; i < n; i++)
		if (!nulls[i] && VARSIZE_ANY_EXHDR(DatumGetPointer(elems[i])) == (Size) len &&
			memcmp(VARDATA_ANY(DatumGetPointer(elems[i])), topic, len) == 0)
			return true;
	return false;
}

/*
 * Why an FCM message's target (one of "token", "topic", "condition", the
 * payload checked to name exactly one) cannot go to a provider whose
 * fcm_topics are topics, or NULL when it can: a token always can; a topic
 * when listed; a condition never, as it can combine any topics.
 */
static char *
fcm_target_error(Jsonb *payload, ArrayType *topics)
{
	JsonbValue *t = get(payload, "topic");

	if (get(payload, "token"))
		return NULL;
	if (t && topic_listed(t->val.string.val, t->val.string.len, topics))
		return NULL;
	if (ArrayGetNItems(ARR_NDIM(topics), ARR_DIMS(topics)) == 0)
		return t
			? psprintf("\"topic\" \"%.*s\" is refused: its provider's fcm_topics are empty (tokens only)",
					   Min(t->val.string.len, 64), t->val.string.val)
			: pstrdup("\"condition\" is refused: its provider's fcm_topics are empty (tokens only)");
	return t
		? psprintf("\"topic\" \"%.*s\" is not one of its provider's fcm_topics (%s)",
				   Min(t->val.string.len, 64), t->val.string.val, topics_list(topics))
		: psprintf("\"condition\" is refused: it can combine any topics, and its provider sends only to tokens and its fcm_topics (%s)",
				   topics_list(topics));
}

static char *
fcm_error(Jsonb *payload, ArrayType *topics)
{
	static const char *const targets[] = {"token", "topic", "condition"};
	static const char *const objects[] = {"notification", "android", "apns", "webpush",
	"fcm_options"};
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			n_targets = 0;
	int			i;
	JsonbValue *data;

	for (i = 0; i < (int) lengthof(targets); i++)
	{
		JsonbValue *t = get(payload, targets[i]);

		if (t == NULL)
			continue;
		if (t->type != jbvString || t->val.string.len == 0)
			return psprintf("\"%s\" must be a non-empty string", targets[i]);
		n_targets++;
	}
	if (n_targets != 1)
		return pstrdup(n_targets == 0
					   ? "it names no target: give one of \"token\", \"topic\", \"condition\""
					   : "it names more than one target: give exactly one of \"token\", \"topic\", \"condition\"");
	if (topics)
	{
		char	   *error = fcm_target_error(payload, topics);

		if (error)
			return error;
	}

	for (i = 0; i < (int) lengthof(objects); i++)
	{
		JsonbValue *o = get(payload, objects[i]);

		if (o && !is_object(o))
			return psprintf("\"%s\" must be an object", objects[i]);
	}

	data = get(payload, "data");
	if (data)
	{
		JsonbValue	k = {0};

		if (!is_object(data))
			return pstrdup("\"data\" must be an object (a map of strings)");
		it = JsonbIteratorInit(data->val.binary.data);
		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		{
			if (tok == WJB_KEY)
				k = v;
			else if (tok == WJB_VALUE && v.type != jbvString)
				return psprintf("\"data\" is a map of strings, but \"data\".\"%.*s\" is not a string",
								Min(k.val.string.len, 64), k.val.string.val);
		}
	}

	/* no member FCM does not define (a typo would be a 400 at every call) */
	it = JsonbIteratorInit(&payload->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok != WJB_KEY)
			continue;
		if (!key_is(&v, "token") && !key_is(&v, "topic") && !key_is(&v, "condition") &&
			!key_is(&v, "data") && !key_is(&v, "notification") && !key_is(&v, "android") &&
			!key_is(&v, "apns") && !key_is(&v, "webpush") && !key_is(&v, "fcm_options") &&
			!key_is(&v, "name"))
			return psprintf("FCM's message has no member \"%.*s\"",
							Min(v.val.string.len, 64), v.val.string.val);
	}
	return NULL;
}

/* the APNs request body: the payload without device_token and headers */
Jsonb *
notif_apns_body(Jsonb *payload)
{
	Datum		drop[2] = {CStringGetTextDatum("device_token"), CStringGetTextDatum("headers")};
	ArrayType  *keys = construct_array(drop, 2, TEXTOID, -1, false, TYPALIGN_INT);

	return DatumGetJsonbP(DirectFunctionCall2(jsonb_delete_array, JsonbPGetDatum(payload),
											  PointerGetDatum(keys)));
}

/*
 * The request headers an APNs payload may set (Apple's "Sending
 * notification requests to APNs"): anything else (Host, which libcurl sends
 * as :authority, Content-Length, Connection, Cookie, ...) could move or
 * reshape the call, and is refused.  authorization is the sender's.
 */
static const char *const apns_headers[] = {
	"apns-push-type", "apns-id", "apns-expiration", "apns-priority", "apns-topic",
	"apns-collapse-id"
};

static bool
is_apns_header(const char *name, int len)
{
	int			i;

	for (i = 0; i < (int) lengthof(apns_headers); i++)
		if ((int) strlen(apns_headers[i]) == len && pg_strncasecmp(name, apns_headers[i], len) == 0)
			return true;
	return false;
}

/*
 * Why an apns-topic (NULL: the payload names none) cannot go to a provider
 * whose apns_topics are topics, or NULL when it can.
 */
static char *
apns_topic_error(const char *topic, int len, ArrayType *topics)
{
	if (topic == NULL)
		return psprintf("it names no apns-topic, and its provider sends only to its apns_topics (%s)",
						topics_list(topics));
	if (topic_listed(topic, len, topics))
		return NULL;
	return psprintf("\"headers\": apns-topic \"%.*s\" is not one of its provider's apns_topics (%s)",
					Min(len, 64), topic, topics_list(topics));
}

static char *
apns_error(Jsonb *payload, ArrayType *topics)
{
	JsonbValue *t = get(payload, "device_token");
	JsonbValue *h = get(payload, "headers");
	Jsonb	   *body;
	char	   *text;
	int			i;
	const char *topic = NULL;
	int			topic_len = 0;

	if (t == NULL)
		return pstrdup("it has no \"device_token\"");
	if (t->type != jbvString || t->val.string.len == 0)
		return pstrdup("\"device_token\" must be a non-empty string of hex digits");
	if (t->val.string.len > APNS_MAX_TOKEN_LEN)
		return psprintf("\"device_token\" is longer than %d characters", APNS_MAX_TOKEN_LEN);
	for (i = 0; i < t->val.string.len; i++)
		if (!isxdigit((unsigned char) t->val.string.val[i]))
			return pstrdup("\"device_token\" must be hex digits only");

	if (h)
	{
		JsonbIterator *it;
		JsonbValue	v,
					k = {0};
		JsonbIteratorToken tok;

		if (!is_object(h))
			return pstrdup("\"headers\" must be an object of header names and string values");
		it = JsonbIteratorInit(h->val.binary.data);
		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		{
			if (tok == WJB_KEY)
			{
				k = v;
				if (!is_http_token(v.val.string.val, v.val.string.len))
					return psprintf("\"headers\": \"%.*s\" is not a header name",
									Min(v.val.string.len, 64), v.val.string.val);
				if (pg_strncasecmp(v.val.string.val, "authorization", v.val.string.len) == 0 &&
					v.val.string.len == 13)
					return pstrdup("\"headers\": authorization is set by the sender");
				if (!is_apns_header(v.val.string.val, v.val.string.len))
					return psprintf("\"headers\": \"%.*s\" is not an APNs request header (apns-push-type, apns-id, apns-expiration, apns-priority, apns-topic, apns-collapse-id)",
									Min(v.val.string.len, 64), v.val.string.val);
			}
			else if (tok == WJB_VALUE)
			{
				if (v.type != jbvString || v.val.string.len == 0)
					return psprintf("\"headers\": the value of \"%.*s\" must be a non-empty string",
									Min(k.val.string.len, 64), k.val.string.val);
				for (i = 0; i < v.val.string.len; i++)
					if (v.val.string.val[i] == '\r' || v.val.string.val[i] == '\n' ||
						v.val.string.val[i] == '\0')
						return psprintf("\"headers\": the value of \"%.*s\" must be one line",
										Min(k.val.string.len, 64), k.val.string.val);
				if (k.val.string.len == 10 &&
					pg_strncasecmp(k.val.string.val, "apns-topic", 10) == 0)
				{
					topic = v.val.string.val;
					topic_len = v.val.string.len;
				}
			}
		}
	}
	if (topics)
	{
		char	   *error = apns_topic_error(topic, topic_len, topics);

		if (error)
			return error;
	}

	body = notif_apns_body(payload);
	text = JsonbToCString(NULL, &body->root, VARSIZE(body));
	if (strlen(text) > APNS_MAX_BODY)
		return psprintf("the body (the payload without device_token and headers) is %zu bytes; APNs takes at most %d",
						strlen(text), APNS_MAX_BODY);
	return NULL;
}

/*
 * Why a payload cannot go to a provider of this format, or NULL when it
 * can (and for formats without rules).  apns_topics: an apns provider's,
 * or NULL (any topic); fcm_topics: an fcm provider's, or NULL (any target).
 */
char *
notif_push_payload_error(NotifFormat format, Jsonb *payload, ArrayType *apns_topics,
						 ArrayType *fcm_topics)
{
	if (format != FORMAT_FCM && format != FORMAT_APNS)
		return NULL;
	if (!JB_ROOT_IS_OBJECT(payload) || JB_ROOT_IS_SCALAR(payload))
		return pstrdup("it must be a JSON object");
	return format == FORMAT_FCM ? fcm_error(payload, fcm_topics) : apns_error(payload, apns_topics);
}

/* notif_enqueue's check: refuse, naming the format and the rule */
void
notif_push_check_payload(NotifFormat format, Jsonb *payload, const char *kind,
						 ArrayType *apns_topics, ArrayType *fcm_topics)
{
	char	   *error = notif_push_payload_error(format, payload, apns_topics, fcm_topics);

	if (error)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("payload is not a valid %s message: %s",
						format == FORMAT_FCM ? "FCM" : "APNs", error),
				 errdetail("Notification type \"%s\" goes to a provider of format '%s'.",
						   kind, format == FORMAT_FCM ? "fcm" : "apns")));
}

