/*-------------------------------------------------------------------------
 *
 * webhook_sign.h
 *      Standard Webhooks signing (provider/webhook_sign.c): the headers
 *      webhook-id, webhook-timestamp and webhook-signature of a call, and
 *      the check of the whsec_ secrets they are signed with.
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_WEBHOOK_SIGN_H
#define NOTIF_WEBHOOK_SIGN_H

#include <curl/curl.h>

#include "lib/stringinfo.h"
#include "utils/jsonb.h"

/* a secret's key, base64-decoded: 24 to 64 bytes (the specification's) */
#define NOTIF_WEBHOOK_KEY_MIN 24
#define NOTIF_WEBHOOK_KEY_MAX 64
/* secrets a provider signs with at once (a rotation needs two) */
#define NOTIF_WEBHOOK_MAX_SECRETS 8

/*
 * Why one secret is refused ("is not whsec_ followed by base64", ...), or
 * NULL when it is a good one.  Never shows the secret.
 */
extern const char *notif_webhook_secret_error(const char *secret, size_t len);

/*
 * The webhook-signature header's value: "v1,<base64 HMAC-SHA256(key,
 * "{id}.{timestamp}.{body}")>" under each of the n whsec_ secrets, in
 * their order, separated by a space.  NULL if a secret is not a good one
 * (notif_webhook_secret_error) or n is 0.  The decoded keys are wiped
 * before it returns.  Any caller with its own secrets (a provider's, an
 * endpoint's) calls this.
 */
extern char *webhook_sign(const char *id, int64 timestamp, const char *body, size_t body_len,
						  const char *const *secrets, int n);

/*
 * The whsec_ strings of credentials {"secrets": [...]}, palloc'd (they
 * point into credentials); returns how many, or -1 with *error saying
 * what is wrong (never a secret's value).
 */
extern int	notif_webhook_secrets(Jsonb *credentials, const char ***secrets, char **error);

/* a job's key as its webhook-id: printable ASCII as it is, any other byte %XX */
extern char *notif_webhook_id(const char *key);

/*
 * The three headers of a call signed with its own secrets (own: a NULL-
 * terminated list, a customer endpoint's) or else credentials' secrets,
 * appended to *h: webhook-id (the job's key), webhook-timestamp (now) and
 * webhook-signature.  NULL, or why the secrets cannot sign (the row's
 * CHECK refuses such secrets: a hand-made row only), nothing appended.
 */
extern char *notif_webhook_headers(struct curl_slist **h, Jsonb *credentials,
								  char *const *own, const char *key,
								  const char *body, size_t body_len);

/* the CHECK of notif_provider for a signing provider (token.c calls it) */
extern void notif_webhook_credentials_check(const char *signing, bool has_auth,
											Jsonb *credentials);

#endif							/* NOTIF_WEBHOOK_SIGN_H */
