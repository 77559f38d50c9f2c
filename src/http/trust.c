/*-------------------------------------------------------------------------
 *
 * trust.c
 *      Which CAs a call trusts: its provider's ca_cert alone when it has
 *      one, else the system's store (libcurl's built-in CA file and folder,
 *      Debian's /etc/ssl/certs).  Handles are reused from call to call, so
 *      each call sets both ways explicitly.  test/trust/001_ca_cert.pl.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "http/http.h"

/* libcurl's own CA file and folder, as a new handle has them */
static char *default_cainfo = NULL;
static char *default_capath = NULL;
static bool have_defaults = false;

/* Read the built-in CA file and folder from a new handle, once. */
void
notif_http_trust_defaults(CURL *easy)
{
	char	   *path = NULL;

	if (have_defaults)
		return;
	if (curl_easy_getinfo(easy, CURLINFO_CAINFO, &path) == CURLE_OK && path)
		default_cainfo = MemoryContextStrdup(TopMemoryContext, path);
	path = NULL;
	if (curl_easy_getinfo(easy, CURLINFO_CAPATH, &path) == CURLE_OK && path)
		default_capath = MemoryContextStrdup(TopMemoryContext, path);
	have_defaults = true;
}

/*
 * The CAs of one call: ca_cert (PEM) alone, or the system's when NULL.  A
 * blob replaces only libcurl's CA file; its CA folder would still be
 * trusted, so both are unset.  Not CURLE_OK: the call must not start.
 */
CURLcode
notif_http_trust(CURL *easy, const char *ca_cert)
{
	CURLcode	rc;

	if (ca_cert == NULL)
	{
		/* the system's (the handle's last call may have unset them) */
		curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, NULL);
		curl_easy_setopt(easy, CURLOPT_CAINFO, default_cainfo);
		curl_easy_setopt(easy, CURLOPT_CAPATH, default_capath);
		return CURLE_OK;
	}
	{
		struct curl_blob blob = {(void *) ca_cert, strlen(ca_cert), CURL_BLOB_COPY};

		rc = curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, &blob);
	}
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(easy, CURLOPT_CAINFO, NULL);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(easy, CURLOPT_CAPATH, NULL);
	return rc;
}
