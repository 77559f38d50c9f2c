/*-------------------------------------------------------------------------
 *
 * token.h
 *      Push credentials and the JWTs signed with them (token.c): Google
 *      service-account assertions (RS256) and APNs provider tokens (ES256).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_TOKEN_H
#define NOTIF_TOKEN_H

#include "utils/jsonb.h"

#include "lifecycle/delivery.h"


struct evp_pkey_st;				/* OpenSSL's EVP_PKEY */

/*
 * Credentials, parsed.  Everything here is secret or sits next to a
 * secret: it is never logged, and notif_credentials_free() wipes it.
 */
typedef struct NotifCredentials
{
	NotifAuth	auth;
	/* google_service_account */
	char	   *client_email;
	char	   *token_uri;
	char	   *project_id;
	char	   *private_key_id; /* NULL if absent */
	/* apns_token */
	char	   *key_id;
	char	   *team_id;
	/* both */
	struct evp_pkey_st *pkey;
} NotifCredentials;

/*
 * Why credentials were refused: what is wrong, naming the member; why it
 * is refused and what to do, when the auth method's own hint is not
 * enough.  None of it shows a secret.
 */
typedef struct NotifCredentialsError
{
	char	   *message;
	const char *detail;			/* or NULL */
	const char *hint;			/* or NULL */
} NotifCredentialsError;

/* the longest PEM private key read (an 8192-bit RSA key's is about 6.4 kB) */
#define NOTIF_PEM_KEY_MAXLEN (16 * 1024)

#define NOTIF_FCM_SCOPE "https://www.googleapis.com/auth/firebase.messaging"
#define NOTIF_JWT_BEARER_GRANT "urn:ietf:params:oauth:grant-type:jwt-bearer"

extern bool notif_credentials_parse(NotifAuth auth, Jsonb *credentials,
									NotifCredentials *out, NotifCredentialsError *error);
extern void notif_credentials_free(NotifCredentials *c);
extern char *notif_jwt_google(const NotifCredentials *c, int64 iat);
extern char *notif_jwt_apns(const NotifCredentials *c, int64 iat);
extern char *notif_base64url(const unsigned char *data, size_t len);

#endif							/* NOTIF_TOKEN_H */
