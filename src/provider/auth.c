/*-------------------------------------------------------------------------
 *
 * provider/auth.c
 *      The tokens a sender holds for its push providers, refreshed inside
 *      its libcurl event loop: a lane never blocks on them.
 *
 *   google_service_account  an OAuth 2.0 access token.  The sender signs an
 *       RS256 assertion (token.c) and POSTs it to the service account's
 *       token_uri as one more transfer of the loop (one in flight per
 *       provider); the token is refreshed before it expires (at the latest
 *       five minutes, at the earliest half its life, before), and at once
 *       after FCM refused it (401 UNAUTHENTICATED).  While there is no
 *       token, the provider's jobs wait (they are not claimed); a failed
 *       fetch is retried with backoff, and logged once.
 *   apns_token  an ES256 provider token, signed here (no network): again
 *       after 50 minutes, never more than once in 20 minutes, except at
 *       once after APNs answered ExpiredProviderToken.
 *
 * A refusal counts only for the token the call carried (its generation):
 * a hundred calls refused together cause one refresh.  Tokens and keys
 * never leave this file and the request headers: not in a log line, not
 * in last_error.  They are wiped when replaced.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <time.h>
#include <openssl/evp.h>

#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "core/excerpt.h"
#include "core/shared.h"
#include "http/http.h"
#include "core/json.h"
#include "provider/push.h"
#include "provider/token.h"

#define APNS_RESIGN_AFTER_S		(50 * 60)
#define APNS_RESIGN_MIN_S		(20 * 60)
#define GOOGLE_REFRESH_MARGIN_S	300
#define FETCH_BACKOFF_MAX_MS	60000
/* the longest expires_in believed (Google's tokens live an hour) */
#define TOKEN_LIFE_MAX_S		86400
#define FETCH_MIN_TIMEOUT_MS	10000

typedef struct ProviderAuth
{
	bool		in_use;
	char		name[NOTIF_NAME_MAXLEN];
	NotifAuth	auth;
	unsigned char digest[32];	/* of auth and credentials */
	bool		creds_ok;
	NotifCredentials creds;
	char	   *token;			/* the bearer token, or NULL */
	uint64		generation;		/* of its token: unique in the process */
	TimestampTz expires_at;
	TimestampTz refresh_at;
	int64		signed_at;		/* apns: iat of the token, Unix seconds */
	bool		refused;		/* the platform refused the current token */
	bool		expired;		/* ... saying it expired */
	bool		refusal_logged; /* since a call was last accepted */
	NotifCall  *fetch;			/* google: the token fetch in flight */
	TimestampTz retry_at;		/* google: after a failed fetch */
	TimestampTz used_at;		/* a call last took the token */
	bool		stale;			/* its provider left the lane: the slot may go */
	int			failures;
	char	   *logged;			/* the last fetch problem logged */
} ProviderAuth;

#define MAX_AUTH_PROVIDERS 64	/* push providers with a token, per lane */

static ProviderAuth auths[MAX_AUTH_PROVIDERS];
static MemoryContext auth_cxt = NULL;
static bool full_warned = false;	/* since a slot was last free */
static uint64 last_generation = 0;	/* tokens' generations, never reused */

static void
free_secret(char *s)
{
	if (s)
	{
		explicit_bzero(s, strlen(s));
		pfree(s);
	}
}

static void
digest_of(const NotifProviderConf *p, unsigned char *out)
{
	char	   *text = p->credentials
		? JsonbToCString(NULL, &p->credentials->root, VARSIZE(p->credentials)) : pstrdup("");
	char	   *both = psprintf("%d:%s", (int) p->auth, text);
	unsigned int len = 32;

	EVP_Digest(both, strlen(both), out, &len, EVP_sha256(), NULL);
	free_secret(text);
	free_secret(both);
}

static void
drop_token(ProviderAuth *pa)
{
	free_secret(pa->token);
	pa->token = NULL;
	pa->refused = false;
	pa->expired = false;
}

static void
reset(ProviderAuth *pa)
{
	drop_token(pa);
	if (pa->creds_ok)
		notif_credentials_free(&pa->creds);
	if (pa->fetch)
		pa->fetch->on_done_arg = NULL;	/* its answer will be dropped */
	if (pa->logged)
		pfree(pa->logged);
	memset(pa, 0, sizeof(*pa));
}

/* The state of a provider, made afresh when its credentials changed. */
static ProviderAuth *
auth_of(const NotifProviderConf *p)
{
	unsigned char digest[32];
	ProviderAuth *free_slot = NULL;
	ProviderAuth *pa = NULL;
	MemoryContext old;
	NotifCredentialsError error;
	int			i;

	if (auth_cxt == NULL)
		auth_cxt = AllocSetContextCreate(TopMemoryContext, "notif_deliver push auth",
										 ALLOCSET_SMALL_SIZES);
	digest_of(p, digest);
	for (i = 0; i < MAX_AUTH_PROVIDERS; i++)
	{
		if (!auths[i].in_use)
		{
			if (!free_slot)
				free_slot = &auths[i];
		}
		else if (strcmp(auths[i].name, p->name) == 0)
			pa = &auths[i];
	}
	if (pa && memcmp(pa->digest, digest, 32) == 0)
	{
		pa->stale = false;		/* back in the lane, its token kept */
		return pa;
	}
	if (pa)
		reset(pa);
	else if (free_slot)
		pa = free_slot;
	else
	{
		/* a stale slot, the one whose token was used longest ago */
		for (i = 0; i < MAX_AUTH_PROVIDERS; i++)
			if (auths[i].stale && (pa == NULL || auths[i].used_at < pa->used_at))
				pa = &auths[i];
		if (pa == NULL)
		{
			if (!full_warned)
				ereport(WARNING,
						(errmsg("notif_deliver: the jobs of provider \"%s\" wait for a token slot",
								p->name),
						 errdetail("This sender holds the tokens of %d push providers of its lane already.",
								   MAX_AUTH_PROVIDERS),
						 errhint("Move some of the lane's push providers' types to another lane.")));
			full_warned = true;
			return NULL;
		}
		reset(pa);
	}
	full_warned = false;

	pa->in_use = true;
	strlcpy(pa->name, p->name, sizeof(pa->name));
	pa->auth = p->auth;
	memcpy(pa->digest, digest, 32);
	old = MemoryContextSwitchTo(auth_cxt);
	pa->creds_ok = p->credentials &&
		notif_credentials_parse(p->auth, p->credentials, &pa->creds, &error);
	MemoryContextSwitchTo(old);
	if (!pa->creds_ok)
		ereport(LOG,
				(errmsg("notif_deliver: the credentials of provider \"%s\" are unusable; its jobs wait",
						p->name)));
	return pa;
}

/*
 * The lane's configuration was read again: the token state of providers no
 * longer among its types' is marked stale, and its slot goes to another
 * provider when one needs it (auth_of).  Until then it is kept: a provider
 * whose type is resumed keeps its token (APNs refuses a provider's tokens
 * renewed more often than every 20 minutes).
 */
void
notif_push_auth_keep_only(const NotifTypeConf *types, int n)
{
	int			i;

	for (i = 0; i < MAX_AUTH_PROVIDERS; i++)
	{
		const NotifProviderConf *p;

		if (!auths[i].in_use)
			continue;
		p = notif_lane_provider(types, n, auths[i].name);
		auths[i].stale = (p == NULL || p->auth == AUTH_NONE || p->url == NULL);
	}
}

static ProviderAuth *
auth_by_name(const char *name)
{
	int			i;

	if (name == NULL)
		return NULL;
	for (i = 0; i < MAX_AUTH_PROVIDERS; i++)
		if (auths[i].in_use && strcmp(auths[i].name, name) == 0)
			return &auths[i];
	return NULL;
}

/* log a token-fetch problem, once while it stays the same */
static void
fetch_failed(ProviderAuth *pa, const char *why)
{
	int64		delay = Min((int64) FETCH_BACKOFF_MAX_MS, (int64) 500 << Min(pa->failures, 10));

	pa->failures++;
	pa->retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), delay);
	SetLatch(MyLatch);			/* the claim loop learns when to try again */
	if (ShutdownRequestPending)
		return;
	if (pa->logged == NULL || strcmp(pa->logged, why) != 0)
	{
		ereport(LOG,
				(errmsg("notif_deliver: could not get an access token for provider \"%s\": %s",
						pa->name, why),
				 errdetail("Its jobs wait; the token is fetched again with backoff.")));
		if (pa->logged)
			pfree(pa->logged);
		pa->logged = MemoryContextStrdup(auth_cxt, why);
	}
}

/*
 * Whether a token endpoint's access_token may go into an Authorization
 * header: RFC 6750's b64token, 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" /
 * "+" / "/" ) *"=".  Anything else (a CR or LF from a JSON escape, which
 * would add a header line; a blank; a byte outside ASCII) is refused.
 */
static bool
is_bearer_token(const char *s, int len)
{
	int			i = 0;

	while (i < len &&
		   ((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
			(s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '.' ||
			s[i] == '_' || s[i] == '~' || s[i] == '+' || s[i] == '/'))
		i++;
	if (i == 0)
		return false;
	while (i < len && s[i] == '=')
		i++;
	return i == len;
}

/* The token endpoint answered (or the fetch failed). */
static void
fetch_done(NotifCall *call)
{
	ProviderAuth *pa = (ProviderAuth *) call->on_done_arg;
	Jsonb	   *jb = NULL;
	JsonbValue *token = NULL;
	JsonbValue *expires = NULL;
	double		life_s;
	bool		has_token;
	MemoryContext old = MemoryContextSwitchTo(call->cxt);	/* all goes with it */

	if (call->body)
		explicit_bzero(call->body, call->body_len);
	if (pa == NULL)
	{
		/* the provider's credentials changed meanwhile */
		if (call->answer)
			explicit_bzero(call->answer->data, call->answer->len);
		MemoryContextSwitchTo(old);
		MemoryContextDelete(call->cxt);
		return;
	}
	pa->fetch = NULL;

	if (call->http_status == 200 && call->answer && call->answer->len > 0)
	{
		jb = notif_parse_json(call->answer->data);
		if (jb && JB_ROOT_IS_OBJECT(jb) && !JB_ROOT_IS_SCALAR(jb))
		{
			token = getKeyJsonValueFromContainer(&jb->root, "access_token", 12, NULL);
			expires = getKeyJsonValueFromContainer(&jb->root, "expires_in", 10, NULL);
		}
	}

	has_token = token && token->type == jbvString && token->val.string.len > 0;
	if (has_token && !is_bearer_token(token->val.string.val, token->val.string.len))
		fetch_failed(pa, "the token endpoint's access_token is not a bearer token "
					 "(RFC 6750: letters, digits, -._~+/ and = at its end)");
	else if (has_token && !notif_json_number_in(expires, 1, TOKEN_LIFE_MAX_S, &life_s))
		fetch_failed(pa, "the token endpoint's expires_in is not a number of seconds from 1 to "
					 CppAsString2(TOKEN_LIFE_MAX_S));
	else if (has_token)
	{
		int64		life = (int64) life_s;
		int64		margin = Min((int64) GOOGLE_REFRESH_MARGIN_S, life / 2);
		TimestampTz now = GetCurrentTimestamp();

		drop_token(pa);
		pa->token = MemoryContextAlloc(auth_cxt, token->val.string.len + 1);
		memcpy(pa->token, token->val.string.val, token->val.string.len);
		pa->token[token->val.string.len] = '\0';
		pa->generation = ++last_generation;
		pa->expires_at = TimestampTzPlusMilliseconds(now, life * 1000);
		pa->refresh_at = TimestampTzPlusMilliseconds(now, (life - margin) * 1000);
		pa->failures = 0;
		pa->retry_at = 0;
		if (pa->logged)
		{
			ereport(LOG,
					(errmsg("notif_deliver: provider \"%s\" has an access token again", pa->name)));
			pfree(pa->logged);
			pa->logged = NULL;
		}
		SetLatch(MyLatch);		/* its jobs may go now */
	}
	else if (call->http_status == 0)
		fetch_failed(pa, call->error ? call->error : "the token endpoint did not answer");
	else
	{
		/* Google's {"error": ..., "error_description": ...}: no secret */
		JsonbValue *e = NULL;
		JsonbValue *d = NULL;

		if (jb == NULL && call->answer && call->answer->len > 0)
			jb = notif_parse_json(call->answer->data);
		if (jb && JB_ROOT_IS_OBJECT(jb) && !JB_ROOT_IS_SCALAR(jb))
		{
			e = getKeyJsonValueFromContainer(&jb->root, "error", 5, NULL);
			d = getKeyJsonValueFromContainer(&jb->root, "error_description", 17, NULL);
		}
		fetch_failed(pa, psprintf("HTTP %ld from the token endpoint%s%s%s%s",
								  call->http_status,
								  e && e->type == jbvString ? ": " : "",
								  e && e->type == jbvString ?
								  notif_excerpt(e->val.string.val, e->val.string.len, false) : "",
								  d && d->type == jbvString ? ": " : "",
								  d && d->type == jbvString ?
								  notif_excerpt(d->val.string.val, d->val.string.len, false) : ""));
	}
	if (call->answer)
		explicit_bzero(call->answer->data, call->answer->len);
	if (jb)
		explicit_bzero(jb, VARSIZE(jb));	/* it held the token */
	MemoryContextSwitchTo(old);
	MemoryContextDelete(call->cxt);
}

/* Start fetching an access token, unless one is on its way or must wait. */
static void
start_fetch(ProviderAuth *pa, const NotifProviderConf *p, TimestampTz now)
{
	MemoryContext cxt;
	MemoryContext old;
	NotifCall  *call;
	char	   *jwt;
	struct curl_slist *h = NULL;

	if (pa->fetch || now < pa->retry_at)
		return;
	cxt = AllocSetContextCreate(auth_cxt, "notif_deliver token fetch", ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(cxt);
	call = palloc0(sizeof(NotifCall));
	call->cxt = cxt;
	call->job.delivery = AT_LEAST_ONCE;	/* a body libcurl may send again */
	call->provider = pstrdup(pa->name);
	call->format = FORMAT_FORM;
	call->max_connections = p->max_connections;
	call->ca_cert = p->ca_cert ? pstrdup(p->ca_cert) : NULL;
	call->timeout_ms = Max(p->timeout_ms, FETCH_MIN_TIMEOUT_MS);
	call->connect_timeout_ms = p->connect_timeout_ms;
	call->url = pstrdup(pa->creds.token_uri);
	jwt = notif_jwt_google(&pa->creds, (int64) time(NULL));
	if (jwt == NULL)
	{
		MemoryContextSwitchTo(old);
		MemoryContextDelete(cxt);
		fetch_failed(pa, "signing the assertion failed");
		return;
	}
	/* base64url and dots need no percent-encoding */
	call->body = psprintf("grant_type=%s&assertion=%s",
						  "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer", jwt);
	call->body_len = strlen(call->body);
	free_secret(jwt);
	h = curl_slist_append(h, "Content-Type: application/x-www-form-urlencoded");
	h = curl_slist_append(h, "Accept: application/json");
	h = curl_slist_append(h, "Expect:");
	call->headers = h;
	call->on_done = fetch_done;
	call->on_done_arg = pa;
	MemoryContextSwitchTo(old);

	if (h == NULL || !notif_http_start_aux(call))
	{
		const char *why = call->error ? call->error : "out of memory";

		fetch_failed(pa, why);
		notif_free_request(call);
		explicit_bzero(call->body, call->body_len);
		MemoryContextDelete(cxt);
		return;
	}
	pa->fetch = call;
}

/* (Re-)sign an APNs provider token. */
static void
sign_apns(ProviderAuth *pa)
{
	int64		iat = (int64) time(NULL);
	char	   *jwt = notif_jwt_apns(&pa->creds, iat);

	if (jwt == NULL)
		return;
	drop_token(pa);
	pa->token = MemoryContextStrdup(auth_cxt, jwt);
	free_secret(jwt);
	pa->signed_at = iat;
	pa->generation = ++last_generation;
}

/*
 * May jobs of this provider be claimed now?  True when it needs no token
 * or has a usable one.  With jobs_due (the caller saw due jobs), a missing
 * or stale token is obtained: signed at once (APNs), or fetched (Google:
 * false until the fetch ends and sets the latch; *wake_at is when to look
 * again after a failed one).  Without, nothing is signed or fetched for a
 * provider that has no work, except the early refresh of a Google token
 * that calls use.
 */
bool
notif_push_auth_ready(const NotifProviderConf *p, TimestampTz now, bool jobs_due,
					  TimestampTz *wake_at)
{
	ProviderAuth *pa;

	*wake_at = 0;
	if (p->auth == AUTH_NONE)
		return true;
	pa = auth_of(p);
	if (pa == NULL || !pa->creds_ok)
	{
		*wake_at = TimestampTzPlusMilliseconds(now, FETCH_BACKOFF_MAX_MS);
		return false;
	}

	if (pa->auth == AUTH_APNS_TOKEN)
	{
		int64		age = (int64) time(NULL) - pa->signed_at;

		if (pa->token != NULL && age < APNS_RESIGN_AFTER_S &&
			!(pa->refused && (pa->expired || age >= APNS_RESIGN_MIN_S)))
			return true;
		if (!jobs_due)
			return false;
		sign_apns(pa);
		return pa->token != NULL;
	}

	/* google_service_account */
	if (pa->token && !pa->refused && now < pa->expires_at)
	{
		if (now >= pa->refresh_at &&
			(jobs_due ||
			 !TimestampDifferenceExceeds(pa->used_at, now, GOOGLE_REFRESH_MARGIN_S * 1000)))
			start_fetch(pa, p, now);
		return true;
	}
	if (!jobs_due)
		return false;
	start_fetch(pa, p, now);
	if (pa->fetch == NULL)
		*wake_at = pa->retry_at;
	return false;
}

/*
 * The header that carries the provider's current token, and its
 * generation; NULL when it needs none (or has none: the call will be
 * refused, and retried).
 */
char *
notif_push_auth_header(const NotifProviderConf *p, uint64 *generation)
{
	ProviderAuth *pa;

	*generation = 0;
	if (p->auth == AUTH_NONE || (pa = auth_by_name(p->name)) == NULL || pa->token == NULL)
		return NULL;
	*generation = pa->generation;
	pa->used_at = GetCurrentTimestamp();
	return psprintf(pa->auth == AUTH_APNS_TOKEN ? "authorization: bearer %s"
					: "Authorization: Bearer %s", pa->token);
}

/*
 * The platform refused the token a call carried (FCM 401, APNs 403): get
 * another (once per token), and log it once until a call is accepted.
 */
void
notif_push_auth_refused(const char *provider, uint64 generation, bool expired,
						const char *reason)
{
	ProviderAuth *pa = auth_by_name(provider);

	if (pa == NULL || generation == 0 || generation != pa->generation)
		return;
	if (!pa->refusal_logged)
	{
		ereport(LOG,
				(errmsg("notif_deliver: provider \"%s\" refused the sender's token: %s",
						pa->name, reason ? reason : "?"),
				 pa->auth == AUTH_APNS_TOKEN && !expired
				 ? errdetail("The calls are retried; APNs allows a new token 20 minutes after the last one.")
				 : errdetail("A new token is obtained; the calls are retried.")));
		pa->refusal_logged = true;
	}
	pa->refused = true;
	pa->expired = pa->expired || expired;
	if (pa->auth == AUTH_GOOGLE_SERVICE_ACCOUNT)
		drop_token(pa);			/* its jobs wait for the next one */
}

/* A call with this token was accepted: a later refusal is news again. */
void
notif_push_auth_accepted(const char *provider, uint64 generation)
{
	ProviderAuth *pa = auth_by_name(provider);

	if (pa && generation == pa->generation)
		pa->refusal_logged = false;
}

/*
 * What every push call gets from its provider's auth: the Authorization
 * header with the token (appended to *h, our copy wiped), the transport's
 * hook that reads a push answer, and the headers marked for wiping when
 * the call is freed (they carry the token).
 */
void
notif_push_call_auth(NotifCall *call, const NotifProviderConf *provider, struct curl_slist **h)
{
	char	   *auth;

	call->read_answer = notif_push_read_answer;
	call->headers_secret = true;
	auth = notif_push_auth_header(provider, &call->auth_generation);
	if (auth)
	{
		*h = curl_slist_append(*h, auth);
		explicit_bzero(auth, strlen(auth));
		pfree(auth);
	}
}
