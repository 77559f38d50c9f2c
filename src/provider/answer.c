/*-------------------------------------------------------------------------
 *
 * provider/answer.c
 *      What an FCM or APNs answer says, read on a finished call: the
 *      platform's reason (FCM details[].errorCode or error.status, APNs
 *      reason) into last_error, and what job_state.c's answers[] says of
 *      that status and reason: the outcome, a new token (provider/auth.c), a
 *      dead device token (notif_unregistered).  TAP test 020_push.pl names
 *      each row.  APNs answers over anything but HTTP/2 are not APNs.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/excerpt.h"
#include "core/json.h"
#include "provider/push.h"

/* 2100-01-01 in Unix milliseconds: later APNs timestamps are not believed */
#define APNS_TIMESTAMP_MAX_MS 4102444800000.0

/* a string member of an object container, or NULL */
static char *
string_member(JsonbContainer *c, const char *name)
{
	JsonbValue *v;

	if (c == NULL || !JsonContainerIsObject(c))
		return NULL;
	v = getKeyJsonValueFromContainer(c, name, strlen(name), NULL);
	if (v == NULL || v->type != jbvString)
		return NULL;
	return notif_printable_copy(v->val.string.val, v->val.string.len, 200);
}

static JsonbContainer *
object_member(JsonbContainer *c, const char *name)
{
	JsonbValue *v;

	if (c == NULL || !JsonContainerIsObject(c))
		return NULL;
	v = getKeyJsonValueFromContainer(c, name, strlen(name), NULL);
	if (v == NULL || v->type != jbvBinary)
		return NULL;
	return v->val.binary.data;
}

/* FCM: {"error": {"status", "message", "details": [{"errorCode"}]}} */
static void
read_fcm(NotifCall *call, Jsonb *jb, char **reason, char **message)
{
	JsonbContainer *error = object_member(jb ? &jb->root : NULL, "error");
	JsonbContainer *details = object_member(error, "details");

	*message = string_member(error, "message");
	*reason = NULL;
	if (details && JsonContainerIsArray(details))
	{
		JsonbIterator *it = JsonbIteratorInit(details);
		JsonbValue	v;
		JsonbIteratorToken tok;

		while (*reason == NULL && (tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
			if (tok == WJB_ELEM && v.type == jbvBinary)
				*reason = string_member(v.val.binary.data, "errorCode");
	}
	if (*reason == NULL)
		*reason = string_member(error, "status");
}

/* APNs: {"reason": "...", "timestamp": <ms>} */
static void
read_apns(NotifCall *call, Jsonb *jb, char **reason)
{
	double		ms;

	*reason = string_member(jb ? &jb->root : NULL, "reason");
	/* Unix ms, from 1970 to 2100 (else the time the answer came) */
	if (jb && JB_ROOT_IS_OBJECT(jb) &&
		notif_json_number_in(getKeyJsonValueFromContainer(&jb->root, "timestamp", 9, NULL),
							 0, APNS_TIMESTAMP_MAX_MS, &ms))
	{
		/* to PostgreSQL's microseconds since 2000 */
		call->unregistered_at = (int64) ms * 1000 -
			((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC);
	}
}

void
notif_push_read_answer(NotifCall *call)
{
	MemoryContext old = MemoryContextSwitchTo(call->cxt);
	Jsonb	   *jb = NULL;
	char	   *reason = NULL;
	char	   *message = NULL;
	const NotifAnswerRow *row;

	if (call->http_status == 0)
	{
		MemoryContextSwitchTo(old);
		return;					/* no answer: the transport's error stands */
	}

	/* APNs speaks HTTP/2 only: anything else is not APNs */
	if (call->format == FORMAT_APNS && call->http_version != CURL_HTTP_VERSION_2_0)
	{
		call->outcome = OUTCOME_REJECTED;
		call->error = pstrdup("APNs requires HTTP/2, but the server answered over HTTP/1.x");
		MemoryContextSwitchTo(old);
		return;
	}
	if (call->outcome == OUTCOME_ACCEPTED)
	{
		notif_push_auth_accepted(call->provider, call->auth_generation);
		MemoryContextSwitchTo(old);
		return;
	}

	if (call->answer && call->answer->len > 0)
		jb = notif_parse_json(call->answer->data);
	if (call->format == FORMAT_FCM)
		read_fcm(call, jb, &reason, &message);
	else
		read_apns(call, jb, &reason);

	call->reason = reason;
	/* for operators, the provider's words as excerpt.c keeps them */
	if (reason && message)
		call->error = psprintf("%s: %s", notif_excerpt(reason, strlen(reason), false),
							   notif_excerpt(message, strlen(message), false));
	else if (reason)
		call->error = notif_excerpt(reason, strlen(reason), false);
	else if (call->answer && call->answer->len > 0)
		call->error = notif_excerpt(call->answer->data, call->answer->len, false);
	else
		call->error = pstrdup("");

	row = notif_classify_answer(call->format == FORMAT_FCM ? "fcm" : "apns",
								call->http_status, reason);
	if (row)
	{
		call->outcome = row->outcome;
		if (row->min_retry_ms > call->retry_after_ms)
			call->retry_after_ms = row->min_retry_ms;
		switch (row->action)
		{
			case ANSWER_KEEP:
				break;
			case ANSWER_NEW_TOKEN:
			case ANSWER_RESIGN_NOW:
				notif_push_auth_refused(call->provider, call->auth_generation,
										row->action == ANSWER_RESIGN_NOW, call->error);
				break;
			case ANSWER_DEVICE_BUSY:
				call->device_busy = true;
				break;
			case ANSWER_DEAD_TOKEN:
				if (call->push_token)
				{
					call->unregistered = true;
					if (call->unregistered_at == 0)
						call->unregistered_at = GetCurrentTimestamp();
				}
				break;
		}
	}
	MemoryContextSwitchTo(old);
}
