/*-------------------------------------------------------------------------
 *
 * provider/apns.c
 *      The request of an 'apns' provider: POST <url>/3/device/<device_token>
 *      with the payload's "headers" members as request headers (apns-topic,
 *      apns-push-type, apns-collapse-id, apns-expiration, ...), the rest of
 *      the payload as the body, and, with auth 'apns_token', the provider
 *      token the sender signed (provider/auth.c).  The payload was checked
 *      (provider/payload.c) before.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/jsonb.h"

#include "provider/push.h"

void
notif_build_apns(NotifCall *call, const NotifProviderConf *provider,
				 Jsonb *payload, struct curl_slist **h)
{
	StringInfoData url;
	JsonbValue *token = getKeyJsonValueFromContainer(&payload->root, "device_token", 12, NULL);
	JsonbValue *headers = getKeyJsonValueFromContainer(&payload->root, "headers", 7, NULL);
	Jsonb	   *body = notif_apns_body(payload);
	size_t		len = strlen(provider->url);

	call->push_token = pnstrdup(token->val.string.val, token->val.string.len);
	initStringInfo(&url);
	while (len > 0 && provider->url[len - 1] == '/')
		len--;
	appendBinaryStringInfo(&url, provider->url, len);
	appendStringInfo(&url, "/3/device/%s", call->push_token);
	call->url = url.data;
	call->body = JsonbToCString(NULL, &body->root, VARSIZE(body));
	call->body_len = strlen(call->body);

	*h = curl_slist_append(*h, "Content-Type: application/json");
	if (headers && headers->type == jbvBinary)
	{
		JsonbIterator *it = JsonbIteratorInit(headers->val.binary.data);
		JsonbValue	v;
		JsonbIteratorToken tok;
		char	   *name = NULL;

		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		{
			if (tok == WJB_KEY)
				name = pnstrdup(v.val.string.val, v.val.string.len);
			else if (tok == WJB_VALUE && v.type == jbvString && name)
				*h = curl_slist_append(*h, psprintf("%s: %.*s", name,
													v.val.string.len, v.val.string.val));
		}
	}
	notif_push_call_auth(call, provider, h);
}
