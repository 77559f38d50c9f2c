/*-------------------------------------------------------------------------
 *
 * webhook_sign.c
 *      Standard Webhooks signing, with OpenSSL's HMAC-SHA256.
 *
 * A provider with signing 'standard_webhooks' holds its secrets in
 * credentials as {"secrets": ["whsec_<base64 key>", ...]}.  Each call
 * carries
 *
 *   webhook-id         the job's key kind:user_id:order_id (a byte outside
 *                      printable ASCII, or a space or %, as %XX): the same
 *                      on every attempt of the job
 *   webhook-timestamp  the attempt's time, in seconds since 1970
 *   webhook-signature  "v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>"
 *                      for each secret, in their order, space-separated:
 *                      a receiver holding any one of them verifies, so a
 *                      secret is rotated by listing the new one beside the
 *                      old, then dropping the old
 *
 * The body signed is the call's body as it goes on the wire (request.c
 * builds the same bytes on every attempt; a query call has none).  The
 * keys are decoded for one signature and wiped after it; a secret never
 * reaches an error, a log or a table other than notif_provider.
 *
 * webhook_sign() takes the secrets from its caller, so that another owner
 * of secrets (an endpoint's) signs the same way.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "lib/stringinfo.h"
#include "utils/timestamp.h"

#include "provider/webhook_sign.h"

#define WHSEC_PREFIX "whsec_"
#define WHSEC_PREFIX_LEN 6

/* a standard base64 digit's value, or -1 */
static int
b64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/*
 * Decode standard base64 with its padding into out (room for
 * NOTIF_WEBHOOK_KEY_MAX bytes); the length, or -1 if it is not canonical
 * base64 or decodes to more than out holds.
 */
static int
b64_decode_key(const char *s, size_t len, unsigned char *out)
{
	size_t		i;
	int			n = 0;

	if (len == 0 || len % 4 != 0)
		return -1;
	for (i = 0; i < len; i += 4)
	{
		int			v[4];
		int			pad = 0;
		int			j;

		for (j = 0; j < 4; j++)
		{
			unsigned char c = (unsigned char) s[i + j];

			if (c == '=' && i + 4 == len && j >= 2)
			{
				v[j] = 0;
				pad++;
			}
			else if (pad > 0 || (v[j] = b64_value(c)) < 0)
				return -1;
		}
		if (n + 3 - pad > NOTIF_WEBHOOK_KEY_MAX)
			return -1;
		out[n++] = (unsigned char) ((v[0] << 2) | (v[1] >> 4));
		if (pad < 2)
			out[n++] = (unsigned char) ((v[1] << 4) | (v[2] >> 2));
		if (pad < 1)
			out[n++] = (unsigned char) ((v[2] << 6) | v[3]);
	}
	return n;
}

/* the key of a whsec_ secret into key; its length, or -1 with *why */
static int
secret_key(const char *secret, size_t len, unsigned char *key, const char **why)
{
	int			n;

	if (len < WHSEC_PREFIX_LEN || memcmp(secret, WHSEC_PREFIX, WHSEC_PREFIX_LEN) != 0)
	{
		*why = "does not start with \"whsec_\"";
		return -1;
	}
	n = b64_decode_key(secret + WHSEC_PREFIX_LEN, len - WHSEC_PREFIX_LEN, key);
	if (n < 0 && len - WHSEC_PREFIX_LEN > (NOTIF_WEBHOOK_KEY_MAX + 2) / 3 * 4)
	{
		*why = "has a key longer than 64 bytes";
		return -1;
	}
	if (n < 0)
	{
		*why = "is not \"whsec_\" followed by standard base64 (with its = padding)";
		return -1;
	}
	if (n < NOTIF_WEBHOOK_KEY_MIN)
	{
		explicit_bzero(key, NOTIF_WEBHOOK_KEY_MAX);
		*why = "has a key shorter than 24 bytes";
		return -1;
	}
	return n;
}

const char *
notif_webhook_secret_error(const char *secret, size_t len)
{
	unsigned char key[NOTIF_WEBHOOK_KEY_MAX];
	const char *why = NULL;

	if (secret_key(secret, len, key, &why) >= 0)
		explicit_bzero(key, sizeof(key));
	return why;
}

char *
webhook_sign(const char *id, int64 timestamp, const char *body, size_t body_len,
			 const char *const *secrets, int n)
{
	StringInfoData signed_part;
	StringInfoData out;
	int			i;

	if (n <= 0)
		return NULL;
	initStringInfo(&signed_part);
	appendStringInfo(&signed_part, "%s." INT64_FORMAT ".", id, timestamp);
	if (body_len > 0)
		appendBinaryStringInfo(&signed_part, body, (int) body_len);
	initStringInfo(&out);
	for (i = 0; i < n; i++)
	{
		unsigned char key[NOTIF_WEBHOOK_KEY_MAX];
		unsigned char mac[EVP_MAX_MD_SIZE];
		unsigned int mac_len = 0;
		unsigned char b64[(EVP_MAX_MD_SIZE + 2) / 3 * 4 + 1];
		const char *why;
		int			key_len = secret_key(secrets[i], strlen(secrets[i]), key, &why);
		bool		ok;

		if (key_len < 0)
		{
			pfree(signed_part.data);
			pfree(out.data);
			return NULL;
		}
		ok = HMAC(EVP_sha256(), key, key_len, (const unsigned char *) signed_part.data,
				  signed_part.len, mac, &mac_len) != NULL;
		explicit_bzero(key, sizeof(key));
		if (!ok)
		{
			pfree(signed_part.data);
			pfree(out.data);
			return NULL;
		}
		EVP_EncodeBlock(b64, mac, (int) mac_len);
		if (i > 0)
			appendStringInfoChar(&out, ' ');
		appendStringInfo(&out, "v1,%s", (const char *) b64);
	}
	pfree(signed_part.data);
	return out.data;
}

int
notif_webhook_secrets(Jsonb *credentials, const char ***secrets, char **error)
{
	JsonbValue	list;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	const char **out;
	int			n = 0;

	*error = NULL;
	if (credentials == NULL || !JB_ROOT_IS_OBJECT(credentials) ||
		getKeyJsonValueFromContainer(&credentials->root, "secrets", 7, &list) == NULL ||
		list.type != jbvBinary || !JsonContainerIsArray(list.val.binary.data))
	{
		*error = pstrdup("credentials must be {\"secrets\": [\"whsec_...\", ...]}");
		return -1;
	}
	out = palloc0(sizeof(char *) * NOTIF_WEBHOOK_MAX_SECRETS);
	it = JsonbIteratorInit(list.val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		const char *why;

		if (tok != WJB_ELEM)
			continue;
		if (n == NOTIF_WEBHOOK_MAX_SECRETS)
		{
			*error = psprintf("credentials.secrets lists more than %d secrets",
							  NOTIF_WEBHOOK_MAX_SECRETS);
			return -1;
		}
		if (v.type != jbvString)
		{
			*error = psprintf("secret %d of credentials.secrets is not a string", n + 1);
			return -1;
		}
		why = notif_webhook_secret_error(v.val.string.val, v.val.string.len);
		if (why)
		{
			*error = psprintf("secret %d of credentials.secrets %s", n + 1, why);
			return -1;
		}
		out[n++] = pnstrdup(v.val.string.val, v.val.string.len);
	}
	if (n == 0)
	{
		*error = pstrdup("credentials.secrets is empty");
		return -1;
	}
	*secrets = out;
	return n;
}

char *
notif_webhook_id(const char *key)
{
	static const char hex[] = "0123456789ABCDEF";
	StringInfoData buf;
	const unsigned char *p;

	initStringInfo(&buf);
	for (p = (const unsigned char *) key; *p; p++)
	{
		if (*p > 0x20 && *p < 0x7f && *p != '%')
			appendStringInfoChar(&buf, (char) *p);
		else
		{
			appendStringInfoChar(&buf, '%');
			appendStringInfoChar(&buf, hex[*p >> 4]);
			appendStringInfoChar(&buf, hex[*p & 15]);
		}
	}
	return buf.data;
}

char *
notif_webhook_headers(struct curl_slist **h, Jsonb *credentials, char *const *own,
					  const char *key, const char *body, size_t body_len)
{
	const char **secrets = NULL;
	char	   *error = NULL;
	int			n = 0;
	char	   *id = notif_webhook_id(key);
	int64		timestamp = (int64) timestamptz_to_time_t(GetCurrentTimestamp());
	char	   *signature;
	int			i;

	if (own)
	{
		/* the caller's copies: it wipes them */
		while (own[n])
			n++;
		signature = n > 0 ? webhook_sign(id, timestamp, body, body_len,
										 (const char *const *) own, n) : NULL;
	}
	else
	{
		n = notif_webhook_secrets(credentials, &secrets, &error);
		signature = n > 0 ? webhook_sign(id, timestamp, body, body_len, secrets, n) : NULL;
		for (i = 0; i < n; i++)
		{
			explicit_bzero((char *) secrets[i], strlen(secrets[i]));
			pfree((char *) secrets[i]);
		}
	}
	if (signature == NULL)
		return psprintf("the provider's signing secrets cannot be used: %s",
						n < 0 ? error : "signing failed");
	*h = curl_slist_append(*h, psprintf("webhook-id: %s", id));
	*h = curl_slist_append(*h, psprintf("webhook-timestamp: " INT64_FORMAT, timestamp));
	*h = curl_slist_append(*h, psprintf("webhook-signature: %s", signature));
	return NULL;
}

void
notif_webhook_credentials_check(const char *signing, bool has_auth, Jsonb *credentials)
{
	const char **secrets = NULL;
	char	   *error = NULL;
	int			n;
	int			i;

	if (strcmp(signing, "standard_webhooks") != 0)
		return;					/* the signing column's own CHECK names it */
	if (has_auth)
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("a signing provider has no auth method"),
				 errdetail("Its credentials hold the signing secrets."),
				 errhint("Set notif_provider.auth to NULL, or signing to NULL.")));
	if (credentials == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("signing \"%s\" needs credentials", signing),
				 errhint("Set notif_provider.credentials to {\"secrets\": [\"whsec_...\"]} in the same statement.")));
	n = notif_webhook_secrets(credentials, &secrets, &error);
	for (i = 0; i < n; i++)
	{
		explicit_bzero((char *) secrets[i], strlen(secrets[i]));
		pfree((char *) secrets[i]);
	}
	if (n < 0)
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("invalid credentials for signing \"%s\": %s", signing, error),
				 errdetail("The secret is not shown."),
				 errhint("Each secret is \"whsec_\" followed by the standard base64 of a random key of 24 to 64 bytes, as the receiver holds it.")));
}
