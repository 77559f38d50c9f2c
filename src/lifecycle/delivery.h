/*-------------------------------------------------------------------------
 *
 * lifecycle/delivery.h
 *      What a sender works with: the configuration of its lane's types and
 *      their providers, and one provider call in flight.  Shared by every
 *      layer above lifecycle/: the transport (http/), the wire formats
 *      (provider/), the SQL (store/) and the sender (sender/).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_DELIVERY_H
#define NOTIF_DELIVERY_H

#include <curl/curl.h>

#include "lib/ilist.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/jsonb.h"

#include "lifecycle/job_state.h"

/* how a provider authenticates: a token the sender signs (provider/auth.c) */
typedef enum NotifAuth
{
	AUTH_NONE,
	AUTH_GOOGLE_SERVICE_ACCOUNT,
	AUTH_APNS_TOKEN
} NotifAuth;

typedef enum NotifFormat
{
	FORMAT_JSON,
	FORMAT_FORM,
	FORMAT_QUERY,
	FORMAT_FCM,					/* FCM HTTP v1: {"message": payload} */
	FORMAT_APNS					/* APNs: POST /3/device/<token> */
} NotifFormat;

/* as notif_provider spells them (job_names.c) */
extern NotifFormat notif_format_from_string(const char *s);
extern NotifAuth notif_auth_from_string(const char *s);

/*
 * A provider's status lookup (notif_provider.lookup_*), asked before an
 * at_least_once retry after an ambiguous call (sender/lookup.c).
 */
typedef struct NotifLookupConf
{
	char	   *url;			/* with "{key}" where the job's key goes */
	bool		head;			/* HEAD, not GET */
	struct curl_slist *headers; /* "Name: value"; secret */
	int		   *found;			/* HTTP statuses meaning found */
	int			n_found;
	int		   *not_found;		/* ... not found */
	int			n_not_found;
	char	  **field;			/* the JSON answer's field, its path; or NULL */
	int			field_depth;
	char	  **found_values;	/* the field's values meaning found */
	int			n_found_values;
	char	  **not_found_values;	/* ... not found */
	int			n_not_found_values;
} NotifLookupConf;

/* a provider, as read from notif_provider */
typedef struct NotifProviderConf
{
	char	   *name;
	char	   *url;			/* NULL: not configured, its jobs wait */
	CURLU	   *curlu;			/* url parsed once, or NULL (request.c) */
	NotifFormat format;
	struct curl_slist *headers; /* static headers, "Name: value" */
	char	   *idempotency_header;
	long		timeout_ms;
	long		connect_timeout_ms;
	int			max_inflight;
	double		rate_limit;		/* requests/s, 0 = none */
	char	   *ref_field;		/* top-level field carrying the key, or NULL */
	NotifAuth	auth;			/* a token the sender signs (provider/auth.c) */
	bool		signing;		/* Standard Webhooks signing: its calls
								 * signed with credentials' secrets
								 * (provider/webhook_sign.c) */
	Jsonb	   *credentials;	/* for auth or signing; secret */
	int			max_connections;	/* HTTP/2 connections per lane */
	char	   *ca_cert;		/* PEM CA certificates, or NULL */
	int64		dedup_reach_ms; /* its dedup_window less its timeout; 0: none */
	NotifLookupConf *lookup;	/* its status lookup, or NULL */
	Jsonb	   *payload_map;	/* its body's fields from the payload's, or NULL */
	ArrayType  *apns_topics;	/* the apns-topic values a payload may name,
								 * or NULL: any */
	ArrayType  *fcm_topics;		/* the topics an FCM payload may name beside a
								 * token (no condition), or NULL: any target */
	int			breaker_threshold;	/* failures in a row that open its
									 * breaker; 0: no breaker */
	int64		breaker_cooldown_ms;	/* open this long before a probe */
	int			throttle;		/* its throttle handle (throttle.c) */
	int			batch_max;		/* messages per call (provider/batch.c); 1: one */
	int64		batch_wait_ms;	/* how long a due job may wait to fill a batch */
	char	   *batch_field;	/* the body's member holding the messages;
								 * NULL: the body is their array */
	Jsonb	   *batch_results;	/* how the answer's per-message results are
								 * read; NULL unless batch_max > 1 */
} NotifProviderConf;

/* a type of the lane, as read from notif_type, with its provider */
typedef struct NotifTypeConf
{
	char	   *code;
	NotifDelivery delivery;
	int			priority;
	bool		has_deadline;	/* notif_type.deadline is set */
	int			route;			/* its provider's place: 0 the type's
								 * provider, then its backup_providers (a
								 * type has an entry per route, in order) */
	int			n_routes;
	Datum		routes;			/* their names, a text[] */
	bool		has_fallback;	/* it has a fallback_type: its payload's
								 * "fallback" member is the fallback's,
								 * never sent with its own calls */
	bool		any_fallback;	/* some type of the database has a
								 * fallback_type (the sender asks for
								 * fallbacks only then) */
	bool		any_outcomes;	/* some type of the database has
								 * emit_outcomes (the sender tells the ends
								 * it writes only then) */
	NotifRetryPolicy policy;
	NotifProviderConf provider;
	TimestampTz expired_at;		/* its late jobs were last expired while
								 * its provider's breaker was open */
	char	   *endpoint_by;	/* notif_type.endpoint_by: "user_id" or a
								 * payload member naming the job's
								 * notif_endpoint; NULL: the provider's url */
} NotifTypeConf;

/* a job held by a sender, as its claim left it */
typedef struct NotifJobRef
{
	int64		id;
	int			tries;			/* after the claim: this call's try number */
	int			earlier_tries;	/* tries before the job's last re-drive */
	NotifDelivery delivery;		/* its type's, when claimed */
	int64		claimed_by;		/* the sender's incarnation */
	TimestampTz deadline_at;	/* 0: none */
	NotifRetryPolicy policy;	/* its type's */
	NotifDedup	dedup;			/* its provider's deduplication window */
	NotifLookup lookup;			/* what the status lookup said before this call */
	bool		breaker_open;	/* its provider's breaker refused the call */
	bool		probe;			/* its call was its provider's breaker's probe */
	bool		next_route;		/* a backup provider follows its call's */
} NotifJobRef;

/*
 * The longest wait a provider's Retry-After imposes, on a job's next try
 * and on the provider's calls (sender/throttle.c): one hour.
 */
#define NOTIF_RETRY_AFTER_MAX_MS (3600 * 1000)

/* one provider call, from claim to recorded result */
typedef struct NotifCall NotifCall;
struct NotifCall
{
	dlist_node	node;
	MemoryContext cxt;			/* everything below lives here */

	NotifJobRef job;			/* the job, as claimed */
	long		timeout_ms;		/* the provider's, at the claim */
	long		connect_timeout_ms;
	int			throttle;		/* its provider's throttle handle */
	int			breaker_threshold;	/* its provider's, at the claim */
	int64		breaker_cooldown_ms;
	bool		probe;			/* the one call of a half-open breaker */

	/* the request */
	CURL	   *easy;
	char	   *url;
	CURLU	   *curlu;			/* url parsed: the provider's, copied; or NULL */
	char	   *body;			/* NULL for GET */
	size_t		body_len;
	size_t		body_sent;		/* read-callback position */
	struct curl_slist *headers;
	char		errbuf[CURL_ERROR_SIZE];
	const char *provider;		/* its name: the connection pool (http.c) */
	NotifFormat format;
	int			max_connections;
	char	   *ca_cert;		/* NULL: the system's trust store */
	char	   *push_token;		/* fcm/apns: the device token, for notif_unregistered */
	char	   *refused;		/* why the payload cannot be sent (no call) */
	uint64		auth_generation;	/* of the token it carries (provider/auth.c) */
	void		(*on_done) (NotifCall *call);	/* not a job's call (a token fetch) */
	/*
	 * How the answer is read, set by the request's builder (push/: an FCM or
	 * APNs answer says more than its status); NULL: the status is all.  The
	 * transport keeps the whole body for it and calls it when the call ends.
	 */
	void		(*read_answer) (NotifCall *call);
	bool		headers_secret; /* wiped when freed: they carry a token */
	bool		head;			/* a HEAD request (a status lookup) */
	char	   *lookup_url;		/* ask this status lookup before the call */
	char	   *lookup_provider;	/* of this provider: the one that took the
									 * job's last call (a backup may take
									 * this one) */
	void	   *on_done_arg;
	int			pool;
	/*
	 * A call of a batching provider (batch_max > 1): the call that goes on
	 * the wire carries batch, the other messages with it and how its answer
	 * is read (provider/batch.h); each message's own call waits on it.
	 * message is its own payload as it goes in a batch, key its job's key.
	 */
	struct NotifBatch *batch;
	int64		batch_id;		/* the batch its message went in; 0: alone */
	char	   *message;
	char	   *key;			/* http.c's connection pool, while in flight */

	/*
	 * A call to a customer's endpoint (notif_endpoint, sender/endpoints.c):
	 * its url is the endpoint's, everything else its provider's.  Its
	 * destination is guarded: the transport refuses to connect to an
	 * address core/endpoint_rules.c refuses (saying why in
	 * destination_refused), never reuses a connection another call opened,
	 * and goes through no proxy.
	 */
	char	   *endpoint_owner; /* notif_endpoint.owner, or NULL */
	bool		guard_destination;
	char		destination_refused[128];
	/*
	 * The endpoint's own signing secrets (notif_endpoint.secrets: whsec_...,
	 * NULL-terminated), or NULL: its provider's are used.  Secret: never
	 * logged, wiped when the call is freed.
	 */
	char	  **endpoint_secrets;

	/* the result */
	TimestampTz started_at;
	TimestampTz ended_at;
	NotifOutcome outcome;
	long		http_status;
	int64		retry_after_ms; /* 0 to NOTIF_RETRY_AFTER_MAX_MS */
	char	   *error;
	char		response[256];	/* start of a non-2xx response body */
	size_t		response_len;
	bool		response_cut;	/* more came than response holds */
	size_t		answer_read;	/* bytes of the body received so far */
	bool		answer_unread;	/* past MAX_ANSWER: the transfer was ended */
	StringInfo	answer;			/* the whole body (up to 16 kB), when wanted */
	long		http_version;	/* CURL_HTTP_VERSION_* the answer came over */
	/* what provider/answer.c read in an FCM or APNs answer */
	char	   *reason;			/* the platform's reason, for last_error */
	bool		unregistered;	/* the device token is dead */
	bool		device_busy;	/* a 429 for this device only: no provider pause */
	TimestampTz unregistered_at;	/* the platform's timestamp, or the answer's */
};

/* delivery.c */
extern const NotifProviderConf *notif_lane_provider(const NotifTypeConf *types, int n,
													const char *name);
extern void notif_free_request(NotifCall *call);

#endif							/* NOTIF_DELIVERY_H */
