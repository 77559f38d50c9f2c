/*-------------------------------------------------------------------------
 *
 * provider/fcm.c
 *      The request of an 'fcm' provider (FCM HTTP v1): POST to the
 *      provider's URL (by default .../v1/projects/<project_id>/messages:send)
 *      with the body {"message": <payload>} and, with auth
 *      'google_service_account', the access token the sender holds
 *      (provider/auth.c).  The payload was checked (provider/payload.c) before.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/jsonb.h"

#include "provider/push.h"

void
notif_build_fcm(NotifCall *call, const NotifProviderConf *provider,
				Jsonb *payload, struct curl_slist **h)
{
	StringInfoData buf;
	JsonbValue *token;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"message\": ");
	(void) JsonbToCString(&buf, &payload->root, VARSIZE(payload));
	appendStringInfoChar(&buf, '}');
	call->url = pstrdup(provider->url);
	call->body = buf.data;
	call->body_len = buf.len;

	token = getKeyJsonValueFromContainer(&payload->root, "token", 5, NULL);
	if (token && token->type == jbvString)
		call->push_token = pnstrdup(token->val.string.val, token->val.string.len);

	*h = curl_slist_append(*h, "Content-Type: application/json");
	notif_push_call_auth(call, provider, h);
}
