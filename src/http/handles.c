/*-------------------------------------------------------------------------
 *
 * http/handles.c
 *      A sender's libcurl easy handles: kept from call to call, with the
 *      options every call shares and the callbacks that give a call its
 *      body and keep its answer.
 *
 * Used by the event loop (http.c), which sets each call's own options.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"

#include "core/shared.h"
#include "http/http.h"

#define MAX_ANSWER (16 * 1024)	/* the most of an answer read (write_cb) */
#define HANDLE_RECV_BUFFER 4096		/* a read's most; libcurl's default: 16 kB */
#define HANDLE_SEND_BUFFER (16 * 1024)	/* libcurl's least; default 64 kB */

/*
 * Easy handles of finished calls, kept for the next ones: a busy sender
 * then reuses as many handles as it has calls in flight, instead of
 * allocating and freeing one (with its buffers) per call, which let its
 * memory drift up with malloc fragmentation.
 *
 * A kept handle is not reset: curl_easy_reset, and the options set again
 * after it, were about a sixth of libcurl's work per call, together with
 * the URL parsed per call (doc/benchmarks.md, "Levers on libcurl's own
 * work per call").  What every call sets alike is set once per handle
 * (handle_defaults).  http.c's start() sets every other option for each
 * call, the ones a call does not use back to what a new handle has (or,
 * for a body's pointers, to NULL), so that no call inherits one from the
 * call before; and notif_http_put_handle() unsets the pointers into the
 * call that ended.
 *
 * A handle whose transfer failed, or was sent again by libcurl (a re-send
 * on another connection after a kept-alive one died, or a stream the
 * server refused), is freed instead.  libcurl 7.88 keeps state of such a
 * transfer in the handle: the count of re-sends over the handle's life (at
 * the sixth it fails the call instead), which only curl_easy_reset clears;
 * and two flags that not even a reset clears: a refused stream's, which
 * lets the handle's next transfer be re-sent on a fresh connection (an
 * at_most_once call without a body included), and a pending rewind.  So
 * only a new handle starts clean.  A re-send shows as a redirect time
 * (libcurl's "follow" of the same URL), which a call never has otherwise:
 * redirects are not followed.
 */
static CURL *idle_handles[NOTIF_MAX_INFLIGHT_LIMIT];
static int	n_idle = 0;

static size_t read_cb(char *buffer, size_t size, size_t nitems, void *userdata);
static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *userdata);

/* one option of handle_defaults, unless one before it was refused */
#define DEFAULT_OPTION(option, value) \
	do { \
		if (rc == CURLE_OK && (rc = curl_easy_setopt(easy, option, value)) != CURLE_OK) \
			*refused = #option; \
	} while (0)

/*
 * The options that are the same for every call, each checked: a handle on
 * which libcurl refused one is never used (its calls would go without the
 * limits set here: http and https only, no redirects, certificates and
 * host names verified).  Returns CURLE_OK, or libcurl's code with
 * *refused naming the option.
 */
static CURLcode
handle_defaults(CURL *easy, const char **refused)
{
	CURLcode	rc;

	notif_http_trust_defaults(easy);	/* a new handle's CA file and folder */
	rc = notif_http_socket_callbacks(easy); /* its connections' sockets can park */
	if (rc != CURLE_OK)
		*refused = "CURLOPT_OPENSOCKETFUNCTION";
	DEFAULT_OPTION(CURLOPT_PROTOCOLS_STR, "http,https");
	DEFAULT_OPTION(CURLOPT_FOLLOWLOCATION, 0L);
	DEFAULT_OPTION(CURLOPT_NOSIGNAL, 1L);
	DEFAULT_OPTION(CURLOPT_SSL_VERIFYPEER, 1L);
	DEFAULT_OPTION(CURLOPT_SSL_VERIFYHOST, 2L);
	DEFAULT_OPTION(CURLOPT_USERAGENT, "notif_deliver/" NOTIF_SCHEMA_VERSION);
	DEFAULT_OPTION(CURLOPT_WRITEFUNCTION, write_cb);
	/* used only by a call without CURLOPT_POSTFIELDS (at_most_once) */
	DEFAULT_OPTION(CURLOPT_READFUNCTION, read_cb);

	/*
	 * libcurl 7.88 (Debian 12's) keeps a handle's buffers for its life,
	 * and a busy sender keeps as many handles as it had calls in flight:
	 * the defaults (16 kB to receive, 64 kB to send a body read through
	 * read_cb) were a fifth of a bulk sender's memory, for answers and
	 * bodies of a few hundred bytes.  A longer one only takes more reads.
	 * (Later libcurl may share the receive buffer between a multi
	 * handle's transfers; the sizes are within its limits either way.)
	 */
	DEFAULT_OPTION(CURLOPT_BUFFERSIZE, (long) HANDLE_RECV_BUFFER);
	DEFAULT_OPTION(CURLOPT_UPLOAD_BUFFERSIZE, (long) HANDLE_SEND_BUFFER);
	return rc;
}

/*
 * A handle for a call, or NULL: curl_easy_init failed (*refused NULL), or
 * libcurl refused an option every call needs (*refused names it, *rc is
 * libcurl's code; logged once per process, as it stays so).
 */
CURL *
notif_http_get_handle(const char **refused, CURLcode *rc)
{
	static bool refusal_logged = false;
	CURL	   *easy;

	*refused = NULL;
	*rc = CURLE_OK;
	if (n_idle > 0)
		return idle_handles[--n_idle];
	easy = curl_easy_init();
	if (easy == NULL)
		return NULL;
	*rc = handle_defaults(easy, refused);
	if (*rc == CURLE_OK)
		return easy;
	curl_easy_cleanup(easy);
	if (!refusal_logged)
		ereport(LOG,
				(errmsg("notif_deliver: libcurl refused %s: %s; no call starts",
						*refused, curl_easy_strerror(*rc)),
				 errdetail("This process loaded libcurl %s.", curl_version_info(CURLVERSION_NOW)->version),
				 errhint("notif_deliver needs libcurl 7.85.0 or later, with http and https.")));
	refusal_logged = true;
	return NULL;
}

/* Free the idle handles (a sender that fell idle). */
void
notif_http_release_idle(void)
{
	while (n_idle > 0)
		curl_easy_cleanup(idle_handles[--n_idle]);
}

/*
 * A handle whose call ended: kept for the next call, or freed when
 * "discard" (its transfer failed or was sent again: see above) or enough
 * are kept.
 */
void
notif_http_put_handle(CURL *easy, bool discard)
{
	if (discard || n_idle >= notif_max_inflight)
	{
		curl_easy_cleanup(easy);
		return;
	}
	/* nothing may point into the call that ended (it is freed) */
	curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, NULL);
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, NULL);
	curl_easy_setopt(easy, CURLOPT_READDATA, NULL);
	curl_easy_setopt(easy, CURLOPT_POSTFIELDS, NULL);
	curl_easy_setopt(easy, CURLOPT_CURLU, NULL);
	curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, NULL);
	/* and libcurl's copy of a CA certificate goes (the next call sets its own) */
	curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, NULL);
	idle_handles[n_idle++] = easy;
}

/* at_most_once bodies: read once, never rewound */
static size_t
read_cb(char *buffer, size_t size, size_t nitems, void *userdata)
{
	NotifCall  *call = (NotifCall *) userdata;
	size_t		n;

	/* never so: a call without CURLOPT_POSTFIELDS has READDATA set */
	if (call == NULL)
		return CURL_READFUNC_ABORT;
	n = Min(size * nitems, call->body_len - call->body_sent);
	memcpy(buffer, call->body + call->body_sent, n);
	call->body_sent += n;
	return n;
}

/*
 * Keep the start of a response body, for last_error's excerpt, or a push
 * answer or a token whole (it may hold a secret) up to MAX_ANSWER.
 *
 * Past MAX_ANSWER, an answer that is not 2xx is ended there (returning
 * short makes libcurl fail the transfer with CURLE_WRITE_ERROR, which
 * http.c's finish_call judges by the status alone): nothing past it is
 * ever used, and reading megabytes of it held the call in flight for
 * nothing (a 4 MB APNs 400, read 4 kB at a time over HTTP/2, once took
 * until the call's timeout).  A 2xx is read to its end, dropped as it
 * comes, as before: the provider took the request, and no call ends one
 * of its answers early (one that still works while it answers could take
 * that for a cancel).  Answers up to MAX_ANSWER are read whole, so their
 * connection stays open for the next call; a longer one closes it
 * (HTTP/1.1) or resets its stream (HTTP/2).
 */
static size_t
write_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	NotifCall  *call = (NotifCall *) userdata;
	size_t		n = size * nmemb;
	size_t		room = sizeof(call->response) - 1 - call->response_len;
	size_t		kept = Min(n, room);

	if (call->answer)
	{
		/* a longer one keeps its start, which does not parse as JSON */
		if (call->answer->len < MAX_ANSWER)
			appendBinaryStringInfo(call->answer, ptr,
								   Min(n, (size_t) (MAX_ANSWER - call->answer->len)));
	}
	else
	{
		/* as received: notif_excerpt makes it printable when it is kept */
		memcpy(call->response + call->response_len, ptr, kept);
		call->response_len += kept;
		if (kept < n)
			call->response_cut = true;
		call->response[call->response_len] = '\0';
	}

	call->answer_read += n;
	if (call->answer_read > MAX_ANSWER)
	{
		long		status = 0;

		curl_easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &status);
		if (status < 200 || status >= 300)
		{
			call->answer_unread = true;
			return 0;
		}
	}
	return n;
}
