/*-------------------------------------------------------------------------
 *
 * token.c
 *      Push credentials and the JWTs signed with them, with OpenSSL 3.
 *
 *   google_service_account  the service-account JSON file as Google issues
 *                           it; signs the RS256 assertion that the token
 *                           endpoint exchanges for an access token
 *   apns_token              {"key_id", "team_id", "private_key" (.p8)};
 *                           signs the ES256 provider token APNs takes
 *
 * An ES256 signature travels in the JOSE form (RFC 7518 3.4): r and s,
 * each left-padded to 32 bytes, 64 bytes in all.  OpenSSL returns DER,
 * whose integers are as short as their value: about one signature in 150
 * has a short r or s, and an unpadded one is refused by APNs.
 *
 * notif_credentials_check() is the CHECK constraint of notif_provider: a
 * malformed credentials object is refused when the row is written, with an
 * error that names what is wrong and never shows a secret.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"

#include "provider/token.h"
#include "provider/webhook_sign.h"

PG_FUNCTION_INFO_V1(notif_credentials_check);
PG_FUNCTION_INFO_V1(notif_jwt_sign);

char *
notif_base64url(const unsigned char *data, size_t len)
{
	static const char alphabet[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	char	   *out = palloc((len + 2) / 3 * 4 + 1);
	char	   *p = out;
	size_t		i;

	for (i = 0; i + 2 < len; i += 3)
	{
		uint32		v = (data[i] << 16) | (data[i + 1] << 8) | data[i + 2];

		*p++ = alphabet[(v >> 18) & 63];
		*p++ = alphabet[(v >> 12) & 63];
		*p++ = alphabet[(v >> 6) & 63];
		*p++ = alphabet[v & 63];
	}
	if (i < len)
	{
		uint32		v = data[i] << 16;

		if (i + 1 < len)
			v |= data[i + 1] << 8;
		*p++ = alphabet[(v >> 18) & 63];
		*p++ = alphabet[(v >> 12) & 63];
		if (i + 1 < len)
			*p++ = alphabet[(v >> 6) & 63];
	}
	*p = '\0';
	return out;
}

/* a string member of the credentials, or NULL with *error set */
static char *
member(Jsonb *jb, const char *name, bool required, char **error)
{
	JsonbValue *v = getKeyJsonValueFromContainer(&jb->root, name, strlen(name), NULL);

	if (v == NULL || v->type == jbvNull)
	{
		if (required && *error == NULL)
			*error = psprintf("the credentials have no \"%s\" member", name);
		return NULL;
	}
	if (v->type != jbvString || v->val.string.len == 0)
	{
		if (*error == NULL)
			*error = psprintf("the \"%s\" member of the credentials must be a non-empty string", name);
		return NULL;
	}
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* wipe and free a string that held a secret */
static void
free_secret(char *s)
{
	if (s)
	{
		explicit_bzero(s, strlen(s));
		pfree(s);
	}
}

/*
 * OpenSSL asks this for the passphrase of an encrypted key: there is none.
 * Decrypting would run the key derivation that the key itself names
 * (PBKDF2 with any iteration count: minutes of CPU inside OpenSSL, where
 * neither statement_timeout nor a cancel can interrupt it); without a
 * passphrase OpenSSL gives up before it.  This holds whatever the PEM
 * label says: OpenSSL 3 also decrypts a PKCS#8 EncryptedPrivateKeyInfo
 * under "BEGIN PRIVATE KEY".
 */
static int
no_passphrase(char *buf, int size, int rwflag, void *u)
{
	return -1;
}

/*
 * The private key of a PEM text, or NULL with *error set (the text is
 * never shown).  Refused before OpenSSL sees it: a text over
 * NOTIF_PEM_KEY_MAXLEN, and an encrypted key ("BEGIN ENCRYPTED PRIVATE
 * KEY", or a "Proc-Type: 4,ENCRYPTED" header): that one would be refused
 * without a passphrase anyway, this says why.
 */
static EVP_PKEY *
parse_key(const char *pem, NotifCredentialsError *error)
{
	size_t		len = strlen(pem);
	BIO		   *bio;
	EVP_PKEY   *pkey = NULL;

	if (len > NOTIF_PEM_KEY_MAXLEN)
	{
		error->message = psprintf("the \"private_key\" of the credentials is too long (%zu bytes)", len);
		error->detail = psprintf("A PEM private key is read up to %d bytes; an 8192-bit RSA key takes about 6.4 kB.",
								 NOTIF_PEM_KEY_MAXLEN);
		return NULL;
	}
	if (strstr(pem, "ENCRYPTED") != NULL || strstr(pem, "Proc-Type:") != NULL)
	{
		error->message = pstrdup("the \"private_key\" of the credentials is an encrypted PEM key");
		error->detail = "An encrypted key is never decrypted: no passphrase is given for it.";
		error->hint = "Give the key unencrypted, as Google and Apple issue it (openssl pkey -in KEY -out PLAIN writes one).";
		return NULL;
	}
	bio = BIO_new_mem_buf(pem, (int) len);
	if (bio)
	{
		pkey = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL);
		BIO_free(bio);
	}
	ERR_clear_error();
	if (pkey == NULL)
		error->message = pstrdup("the \"private_key\" of the credentials is not a PEM private key");
	return pkey;
}

/*
 * Parse and check credentials for an auth method.  Returns false with
 * *error (no secret in it) when they are malformed.
 */
bool
notif_credentials_parse(NotifAuth auth, Jsonb *jb, NotifCredentials *out,
						NotifCredentialsError *error)
{
	char	   *pem = NULL;

	memset(out, 0, sizeof(*out));
	memset(error, 0, sizeof(*error));
	out->auth = auth;
	if (!JB_ROOT_IS_OBJECT(jb) || JB_ROOT_IS_SCALAR(jb))
	{
		error->message = pstrdup("the credentials must be a JSON object");
		return false;
	}
	switch (auth)
	{
		case AUTH_GOOGLE_SERVICE_ACCOUNT:
			out->client_email = member(jb, "client_email", true, &error->message);
			out->token_uri = member(jb, "token_uri", true, &error->message);
			out->project_id = member(jb, "project_id", true, &error->message);
			out->private_key_id = member(jb, "private_key_id", false, &error->message);
			pem = member(jb, "private_key", true, &error->message);
			if (error->message == NULL &&
				pg_strncasecmp(out->token_uri, "https://", 8) != 0 &&
				pg_strncasecmp(out->token_uri, "http://", 7) != 0)
				error->message = pstrdup("the \"token_uri\" of the credentials must be an http(s) URL");
			break;
		case AUTH_APNS_TOKEN:
			out->key_id = member(jb, "key_id", true, &error->message);
			out->team_id = member(jb, "team_id", true, &error->message);
			pem = member(jb, "private_key", true, &error->message);
			break;
		case AUTH_NONE:
			error->message = pstrdup("credentials need an auth method");
			break;
	}
	if (error->message == NULL)
		out->pkey = parse_key(pem, error);	/* NULL: it says why */
	if (out->pkey != NULL)
	{
		char		group[64];
		size_t		len = 0;

		if (auth == AUTH_GOOGLE_SERVICE_ACCOUNT &&
			EVP_PKEY_get_base_id(out->pkey) != EVP_PKEY_RSA)
			error->message = pstrdup("the \"private_key\" of a service account must be an RSA key");
		else if (auth == AUTH_APNS_TOKEN &&
				 (EVP_PKEY_get_base_id(out->pkey) != EVP_PKEY_EC ||
				  !EVP_PKEY_get_group_name(out->pkey, group, sizeof(group), &len) ||
				  strcmp(group, "prime256v1") != 0))
			error->message = pstrdup("the \"private_key\" of an APNs key must be an EC P-256 key (a .p8 file)");
	}
	free_secret(pem);
	if (error->message)
	{
		notif_credentials_free(out);
		return false;
	}
	return true;
}

void
notif_credentials_free(NotifCredentials *c)
{
	if (c->pkey)
		EVP_PKEY_free(c->pkey);
	free_secret(c->client_email);
	free_secret(c->token_uri);
	free_secret(c->project_id);
	free_secret(c->private_key_id);
	free_secret(c->key_id);
	free_secret(c->team_id);
	memset(c, 0, sizeof(*c));
}

/* signature of data with the key: RS256 as is, ES256 as JOSE r||s */
static unsigned char *
sign(EVP_PKEY *pkey, bool es256, const char *data, size_t *siglen)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char *der = NULL;
	unsigned char *result = NULL;
	size_t		len = 0;

	if (ctx == NULL)
		return NULL;
	if (EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, pkey) != 1 ||
		EVP_DigestSign(ctx, NULL, &len, (const unsigned char *) data, strlen(data)) != 1)
		goto done;
	der = palloc(len);
	if (EVP_DigestSign(ctx, der, &len, (const unsigned char *) data, strlen(data)) != 1)
		goto done;
	if (!es256)
	{
		result = der;
		der = NULL;
		*siglen = len;
	}
	else
	{
		const unsigned char *p = der;
		ECDSA_SIG  *sig = d2i_ECDSA_SIG(NULL, &p, (long) len);
		const BIGNUM *r,
				   *s;

		if (sig == NULL)
			goto done;
		ECDSA_SIG_get0(sig, &r, &s);
		result = palloc(64);
		if (BN_bn2binpad(r, result, 32) != 32 || BN_bn2binpad(s, result + 32, 32) != 32)
		{
			pfree(result);
			result = NULL;
		}
		else
			*siglen = 64;
		ECDSA_SIG_free(sig);
	}
done:
	EVP_MD_CTX_free(ctx);
	if (der)
		pfree(der);
	ERR_clear_error();
	return result;
}

/* header.claims.signature; NULL if signing failed */
static char *
jwt(EVP_PKEY *pkey, bool es256, const char *header, const char *claims)
{
	StringInfoData buf;
	unsigned char *sig;
	size_t		siglen = 0;

	initStringInfo(&buf);
	appendStringInfoString(&buf, notif_base64url((const unsigned char *) header, strlen(header)));
	appendStringInfoChar(&buf, '.');
	appendStringInfoString(&buf, notif_base64url((const unsigned char *) claims, strlen(claims)));
	sig = sign(pkey, es256, buf.data, &siglen);
	if (sig == NULL)
		return NULL;
	appendStringInfoChar(&buf, '.');
	appendStringInfoString(&buf, notif_base64url(sig, siglen));
	pfree(sig);
	return buf.data;
}

/*
 * The assertion a Google token endpoint exchanges for an access token:
 * RS256, valid one hour from iat.
 */
char *
notif_jwt_google(const NotifCredentials *c, int64 iat)
{
	StringInfoData header;
	StringInfoData claims;

	initStringInfo(&header);
	appendStringInfoString(&header, "{\"alg\":\"RS256\",\"typ\":\"JWT\"");
	if (c->private_key_id)
	{
		appendStringInfoString(&header, ",\"kid\":");
		escape_json(&header, c->private_key_id);
	}
	appendStringInfoChar(&header, '}');

	initStringInfo(&claims);
	appendStringInfoString(&claims, "{\"iss\":");
	escape_json(&claims, c->client_email);
	appendStringInfoString(&claims, ",\"scope\":\"" NOTIF_FCM_SCOPE "\",\"aud\":");
	escape_json(&claims, c->token_uri);
	appendStringInfo(&claims, ",\"iat\":" INT64_FORMAT ",\"exp\":" INT64_FORMAT "}",
					 iat, iat + 3600);
	return jwt(c->pkey, false, header.data, claims.data);
}

/* An APNs provider token: ES256, kid = key id, iss = team id. */
char *
notif_jwt_apns(const NotifCredentials *c, int64 iat)
{
	StringInfoData header;
	StringInfoData claims;

	initStringInfo(&header);
	appendStringInfoString(&header, "{\"alg\":\"ES256\",\"kid\":");
	escape_json(&header, c->key_id);
	appendStringInfoChar(&header, '}');
	initStringInfo(&claims);
	appendStringInfoString(&claims, "{\"iss\":");
	escape_json(&claims, c->team_id);
	appendStringInfo(&claims, ",\"iat\":" INT64_FORMAT "}", iat);
	return jwt(c->pkey, true, header.data, claims.data);
}

/*
 * notif_credentials_check(auth text, credentials jsonb, signing text)
 * returns boolean: the CHECK constraint of notif_provider.  True when all
 * are NULL, or the credentials suit the auth method, or hold the secrets of
 * the signing (provider/webhook_sign.c); otherwise an error that says why.
 * (The schema before 1.4 calls it with auth and credentials only.)
 */
Datum
notif_credentials_check(PG_FUNCTION_ARGS)
{
	NotifCredentials c;
	char	   *auth;
	NotifCredentialsError error;

	if (PG_NARGS() > 2 && !PG_ARGISNULL(2))
	{
		notif_webhook_credentials_check(text_to_cstring(PG_GETARG_TEXT_PP(2)),
										!PG_ARGISNULL(0),
										PG_ARGISNULL(1) ? NULL : PG_GETARG_JSONB_P(1));
		PG_RETURN_BOOL(true);
	}
	if (PG_ARGISNULL(0) && PG_ARGISNULL(1))
		PG_RETURN_BOOL(true);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("auth \"%s\" needs credentials",
						text_to_cstring(PG_GETARG_TEXT_PP(0))),
				 errhint("Set notif_provider.credentials in the same statement.")));
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("credentials need an auth method or a signing"),
				 errhint("Set notif_provider.auth to 'google_service_account' or 'apns_token', or signing to 'standard_webhooks'.")));
	auth = text_to_cstring(PG_GETARG_TEXT_PP(0));
	if (notif_auth_from_string(auth) == AUTH_NONE)
		PG_RETURN_BOOL(true);	/* the auth column's own CHECK names it */
	if (!notif_credentials_parse(notif_auth_from_string(auth), PG_GETARG_JSONB_P(1), &c, &error))
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("invalid credentials for auth \"%s\": %s", auth, error.message),
				 error.detail ? errdetail("%s", error.detail) : 0,
				 error.hint ? errhint("%s", error.hint)
				 : auth[0] == 'g'
				 ? errhint("Load the service-account JSON file as Google issues it.")
				 : errhint("Give {\"key_id\": ..., \"team_id\": ..., \"private_key\": <the .p8 file's text>}.")));
	notif_credentials_free(&c);
	PG_RETURN_BOOL(true);
}

/*
 * notif_jwt_sign(auth text, credentials jsonb, iat bigint) returns text:
 * the JWT the sender would sign.  Not part of the extension's schema: the
 * tests create it for themselves, to verify many signatures.
 */
Datum
notif_jwt_sign(PG_FUNCTION_ARGS)
{
	NotifAuth	auth = notif_auth_from_string(text_to_cstring(PG_GETARG_TEXT_PP(0)));
	NotifCredentials c;
	NotifCredentialsError error;
	char	   *token;

	if (!notif_credentials_parse(auth, PG_GETARG_JSONB_P(1), &c, &error))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid credentials: %s", error.message)));
	token = auth == AUTH_GOOGLE_SERVICE_ACCOUNT
		? notif_jwt_google(&c, PG_GETARG_INT64(2))
		: notif_jwt_apns(&c, PG_GETARG_INT64(2));
	notif_credentials_free(&c);
	if (token == NULL)
		elog(ERROR, "signing failed");
	PG_RETURN_TEXT_P(cstring_to_text(token));
}
