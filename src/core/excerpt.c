/*-------------------------------------------------------------------------
 *
 * excerpt.c
 *      What of a provider's own text is kept for operators: a short,
 *      printable excerpt with what looks like a credential, a phone number
 *      or an e-mail address masked.
 *
 * A provider's answer goes into notif_job.last_error and notif_calls (and
 * a token endpoint's into a log line), which every operator reads.  An
 * answer may echo what it was sent: an API key it refuses, the Authorization
 * header, the recipient's number.  So none of it is kept as written:
 *
 *  - every byte outside printable ASCII becomes '?';
 *  - masked, each by "***" (the rules, in the order tried at each place):
 *      an e-mail address's local part (the domain stays);
 *      the word after an HTTP auth scheme (Bearer, Basic, Digest);
 *      the value after the name of a secret and ':' or '=' (quoted or
 *        not): a name ending in key, token, secret, password, passwd,
 *        pwd, pass, auth, authorization, authentication, signature, sig,
 *        credential(s), cookie, session or session_id, in any case
 *        (api_key, X-Api-Key, access_token, Authorization, client_secret);
 *      a phone number: 7 or more digits, with an optional leading '+' and
 *        single spaces, hyphens or parentheses between them (a date
 *        written YYYY-MM-DD is not one);
 *      a token: 20 or more characters of [A-Za-z0-9+/=_.-] with a letter
 *        and a digit among them (API keys, JWTs, hex digests);
 *  - a URL's user:password@ is masked; its host and path stay as they
 *    are, but for a path segment with 7 or more digits, an '@', or that is
 *    a token; its query is read as any other text (so api_key=... and
 *    to=+84... in it are masked);
 *  - then cut to NOTIF_EXCERPT_MAX characters, never inside a word, and
 *    "..." added when anything was cut.
 *
 * The whole answer is never stored: the sender keeps at most its first
 * 255 bytes (http.c), masks them, and keeps the excerpt; what follows the
 * last separator before such a cut is dropped first (a token's tail is not
 * a token, an address's local part without its '@' not an address).  notif_excerpt()
 * exposes the same function to SQL, for tests and for operators who want
 * to see what would be kept.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#if PG_VERSION_NUM >= 160000
#include "varatt.h"				/* VARDATA_ANY: postgres.h's before 16 */
#endif

#include "core/excerpt.h"

#define MASK "***"

/* how the name of a secret ends */
static const char *const secret_words[] = {
	"key", "token", "secret", "password", "passwd", "pwd", "pass", "auth",
	"authorization", "authentication", "signature", "sig", "credential",
	"credentials", "cookie", "session", "sessionid", "session_id"
};

static const char *const auth_schemes[] = {"bearer", "basic", "digest"};

static bool
is_word_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static bool
is_token_char(char c)
{
	return is_word_char(c) || c == '+' || c == '/' || c == '=' || c == '_' ||
		c == '.' || c == '-';
}

/* what ends a word, a value or an address */
static bool
is_separator(char c)
{
	return c == ' ' || c == '"' || c == '\'' || c == ',' || c == ';' ||
		c == '<' || c == '>' || c == '(' || c == ')' || c == '[' || c == ']' ||
		c == '{' || c == '}';
}

static bool
is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* whether s[0 .. n) ends with word, in any case */
static bool
ends_with_ci(const char *s, int n, const char *word)
{
	int			w = strlen(word);

	return n >= w && pg_strncasecmp(s + n - w, word, w) == 0;
}

/* e-mail at s[i]: the length of the local part (before '@'), or 0 */
static int
email_local(const char *s, int n, int i)
{
	int			j = i;
	int			dot = 0;
	int			k;

	while (j < n && (is_word_char(s[j]) || strchr("._%+-", s[j])))
		j++;
	if (j == i || j >= n || s[j] != '@')
		return 0;
	for (k = j + 1; k < n && (is_word_char(s[k]) || s[k] == '.' || s[k] == '-'); k++)
		if (s[k] == '.')
			dot = k;
	/* a domain with a dot and at least two letters after the last one */
	if (dot == 0 || k - dot < 3)
		return 0;
	return j - i;
}

/* an auth scheme word and its blanks at s[i]: their length, or 0 */
static int
auth_scheme(const char *s, int n, int i)
{
	int			k;

	for (k = 0; k < (int) lengthof(auth_schemes); k++)
	{
		int			w = strlen(auth_schemes[k]);
		int			j = i + w;

		if (j < n && pg_strncasecmp(s + i, auth_schemes[k], w) == 0 && s[j] == ' ')
		{
			while (j < n && s[j] == ' ')
				j++;
			return j - i;
		}
	}
	return 0;
}

/*
 * A secret's name and value at s[i]: sets *value_at and *value_len, returns
 * the name's length, or 0.
 */
static int
secret_pair(const char *s, int n, int i, int *value_at, int *value_len)
{
	int			j = i;
	int			k;
	bool		secret = false;
	char		quote = 0;

	while (j < n && (is_word_char(s[j]) || s[j] == '_' || s[j] == '-'))
		j++;
	for (k = 0; k < (int) lengthof(secret_words) && !secret; k++)
		secret = ends_with_ci(s + i, j - i, secret_words[k]);
	if (!secret)
		return 0;
	k = j;
	if (k < n && (s[k] == '"' || s[k] == '\''))
		k++;
	while (k < n && s[k] == ' ')
		k++;
	if (k >= n || (s[k] != ':' && s[k] != '='))
		return 0;
	k++;
	/* (the value may be a list or an object: its first element) */
	while (k < n && (s[k] == ' ' || s[k] == '[' || s[k] == '{'))
		k++;
	if (k < n && (s[k] == '"' || s[k] == '\''))
		quote = s[k++];
	*value_at = k;
	/* an auth scheme is part of the value: what follows it is masked too */
	k += auth_scheme(s, n, k);
	while (k < n && (quote ? s[k] != quote : !strchr(" ,;&}])\"'<>", s[k])))
		k++;
	*value_len = k - *value_at;
	return *value_len > 0 ? j - i : 0;
}

/* a phone number at s[i]: its length, or 0 */
static int
phone(const char *s, int n, int i)
{
	int			j = i;
	int			digits = 0;
	int			end = i;

	if (s[i] != '+' && s[i] != '(' && !is_digit(s[i]))
		return 0;
	if (j < n && s[j] == '+')
		j++;
	if (j < n && s[j] == '(')
		j++;
	while (j < n)
	{
		if (is_digit(s[j]))
		{
			digits++;
			end = ++j;
		}
		else if ((s[j] == ' ' || s[j] == '-' || s[j] == '(' || s[j] == ')') &&
				 j + 1 < n && (is_digit(s[j + 1]) || (s[j] == ')' && s[j + 1] == ' ')))
			j++;
		else
			break;
	}
	if (digits < 7 || (end < n && is_word_char(s[end])))
		return 0;
	/* YYYY-MM-DD (and a time after it) is a date */
	if (end - i >= 10 && is_digit(s[i]) && s[i + 4] == '-' && s[i + 7] == '-' &&
		(end - i == 10 || s[i + 10] == ' '))
		return 0;
	return end - i;
}

/* a token at s[i]: its length, or 0 */
static int
token(const char *s, int n, int i)
{
	int			j = i;
	bool		letter = false;
	bool		digit = false;

	while (j < n && is_token_char(s[j]))
	{
		letter |= (s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z');
		digit |= is_digit(s[j]);
		j++;
	}
	return (j - i >= 20 && letter && digit) ? j - i : 0;
}

/*
 * A URL path segment that may name someone or hold a secret: one with 7 or
 * more digits (a number, a bot token), an '@' (an address), or that is a
 * token.
 */
static bool
secret_segment(const char *s, int seg, int end)
{
	int			digits = 0;
	int			k;

	for (k = seg; k < end; k++)
	{
		if (s[k] == '@')
			return true;
		digits += is_digit(s[k]);
	}
	/* (YYYY-MM-DD, an API's version, is a date) */
	if (digits == 8 && end - seg == 10 && s[seg + 4] == '-' && s[seg + 7] == '-')
		digits = 0;
	return digits >= 7 || (end - seg >= 20 && token(s, end, seg) >= end - seg);
}

/*
 * The rest of a URL from its "://" at s[i]: the host as it is, each path
 * segment as it is unless it is a token; returns where the query (or what
 * follows the URL) begins, which the other rules read as any text.
 */
static int
url_rest(const char *s, int n, int i, StringInfo out)
{
	const char *stop = "?# \"'<>,;)]}";
	int			j = i + 3;
	int			end;

	appendStringInfoString(out, "://");
	/* user:password@ is a credential: masked; the host stays */
	for (end = j; end < n && s[end] != '/' && s[end] != '@' && !strchr(stop, s[end]); end++)
		;
	if (end < n && s[end] == '@')
	{
		appendStringInfoString(out, MASK "@");
		j = end + 1;
	}
	while (j < n && s[j] != '/' && !strchr(stop, s[j]))
		appendStringInfoChar(out, s[j++]);
	while (j < n && s[j] == '/')
	{
		int			seg = j + 1;

		end = seg;
		appendStringInfoChar(out, '/');
		while (end < n && s[end] != '/' && !strchr(stop, s[end]))
			end++;
		if (secret_segment(s, seg, end))
			appendStringInfoString(out, MASK);
		else
			appendBinaryStringInfo(out, s + seg, end - seg);
		j = end;
	}
	return j;
}

/*
 * n bytes of a provider's text into dst as printable ASCII (any other byte
 * a '?'): it goes into a text column or a log line, whatever it was (a
 * proxy's HTML page, a string cut inside a UTF-8 character).
 */
void
notif_printable_into(char *dst, const char *src, size_t n)
{
	size_t		i;

	for (i = 0; i < n; i++)
	{
		unsigned char c = (unsigned char) src[i];

		dst[i] = (c >= 0x20 && c < 0x7f) ? (char) c : '?';
	}
}

/* at most max bytes of a provider's text, printable (notif_printable_into) */
char *
notif_printable_copy(const char *s, int len, int max)
{
	int			n = Min(len, max);
	char	   *out = palloc(n + 1);

	notif_printable_into(out, s, n);
	out[n] = '\0';
	return out;
}

/*
 * The excerpt of len bytes of a provider's text, palloc'd in the current
 * memory context: printable, masked, at most NOTIF_EXCERPT_MAX characters
 * (and "..." when cut).
 */
char *
notif_excerpt(const char *raw, size_t len, bool cut)
{
	int			n = (int) Min(len, NOTIF_EXCERPT_SCAN);
	char	   *s = palloc(n + 1);
	StringInfoData out;
	int			i = 0;

	notif_printable_into(s, raw, n);

	/*
	 * A text cut short (here, or before: "cut") may end inside a secret, an
	 * address or a number too short now for its rule: what follows its last
	 * separator goes.
	 */
	if (len > (size_t) n)
		cut = true;
	if (cut)
		while (n > 0 && !is_separator(s[n - 1]))
			n--;
	s[n] = '\0';
	initStringInfo(&out);
	while (i < n)
	{
		bool		boundary = i == 0 || !is_word_char(s[i - 1]);
		int			m,
					at,
					vlen;

		if (s[i] == ':' && i + 2 < n && s[i + 1] == '/' && s[i + 2] == '/')
			i = url_rest(s, n, i, &out);
		else if (boundary && (m = email_local(s, n, i)) > 0)
		{
			appendStringInfoString(&out, MASK);
			i += m;
		}
		else if (boundary && (m = auth_scheme(s, n, i)) > 0)
		{
			appendBinaryStringInfo(&out, s + i, m);
			i += m;
			while (i < n && !strchr(" ,;\"'", s[i]))
				i++;
			appendStringInfoString(&out, MASK);
		}
		else if (boundary && (m = secret_pair(s, n, i, &at, &vlen)) > 0)
		{
			appendBinaryStringInfo(&out, s + i, at - i);
			appendStringInfoString(&out, MASK);
			i = at + vlen;
		}
		else if (boundary && (m = phone(s, n, i)) > 0)
		{
			appendStringInfoString(&out, MASK);
			i += m;
		}
		else if (boundary && (m = token(s, n, i)) > 0)
		{
			appendStringInfoString(&out, MASK);
			i += m;
		}
		else if (boundary && is_word_char(s[i]))
		{
			/* a word that is none of those: whole, so no rule starts inside it */
			m = i;
			while (m < n && is_word_char(s[m]))
				m++;
			appendBinaryStringInfo(&out, s + i, m - i);
			i = m;
		}
		else
			appendStringInfoChar(&out, s[i++]);
	}
	pfree(s);

	if (out.len > NOTIF_EXCERPT_MAX || cut)
	{
		int			end = Min(out.len, NOTIF_EXCERPT_MAX);

		/* never inside a word: a token cut short is not masked by length */
		if (end < out.len && is_token_char(out.data[end]))
			while (end > 0 && is_token_char(out.data[end - 1]))
				end--;
		out.data[end] = '\0';
		out.len = end;
		appendStringInfoString(&out, "...");
	}
	return out.data;
}

PG_FUNCTION_INFO_V1(notif_excerpt_sql);

/* notif_excerpt(text): what a provider's text would be kept as */
Datum
notif_excerpt_sql(PG_FUNCTION_ARGS)
{
	text	   *t = PG_GETARG_TEXT_PP(0);

	PG_RETURN_TEXT_P(cstring_to_text(notif_excerpt(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), false)));
}
