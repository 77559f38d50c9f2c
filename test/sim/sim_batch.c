/*-------------------------------------------------------------------------
 *
 * sim_batch.c
 *      provider_sim's reading of a batch request (sim_batch.h): a small
 *      JSON scanner that finds the array of messages and, in each message,
 *      its key and its "sim" member (a per-message fault).  It checks the
 *      structure it walks (brackets, strings, escapes), not every token.
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "sim_batch.h"

static const char *
skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* past a string starting at p (its opening quote); NULL if unterminated */
static const char *
skip_string(const char *p, const char *end)
{
	for (p++; p < end; p++)
	{
		if (*p == '\\')
			p++;
		else if (*p == '"')
			return p + 1;
	}
	return NULL;
}

/* past one value starting at p; NULL if malformed */
static const char *
skip_value(const char *p, const char *end)
{
	int			depth = 0;

	p = skip_ws(p, end);
	if (p >= end)
		return NULL;
	if (*p == '"')
		return skip_string(p, end);
	if (*p != '{' && *p != '[')
	{
		/* a number, true, false or null */
		while (p < end && *p != ',' && *p != ']' && *p != '}' &&
			   *p != ' ' && *p != '\n' && *p != '\r' && *p != '\t')
			p++;
		return p;
	}
	for (; p < end; p++)
	{
		if (*p == '"')
		{
			p = skip_string(p, end);
			if (p == NULL)
				return NULL;
			p--;
		}
		else if (*p == '{' || *p == '[')
			depth++;
		else if (*p == '}' || *p == ']')
		{
			if (--depth == 0)
				return p + 1;
		}
	}
	return NULL;
}

/*
 * The string member "name" of the object at p..end: its raw contents
 * (escapes kept) into *val, *len; false if absent or not a string.
 */
static bool
string_member(const char *p, const char *end, const char *name, const char **val, size_t *len)
{
	size_t		nlen = strlen(name);

	p = skip_ws(p, end);
	if (p >= end || *p != '{')
		return false;
	p++;
	for (;;)
	{
		const char *k,
				   *kend,
				   *v;

		p = skip_ws(p, end);
		if (p >= end || *p != '"')
			return false;
		k = p + 1;
		if ((p = skip_string(p, end)) == NULL)
			return false;
		kend = p - 1;
		p = skip_ws(p, end);
		if (p >= end || *p != ':')
			return false;
		v = skip_ws(p + 1, end);
		if ((p = skip_value(v, end)) == NULL)
			return false;
		if ((size_t) (kend - k) == nlen && memcmp(k, name, nlen) == 0 && *v == '"')
		{
			*val = v + 1;
			*len = (size_t) (p - 1 - (v + 1));
			return true;
		}
		p = skip_ws(p, end);
		if (p >= end || *p != ',')
			return false;
		p++;
	}
}

static SimMessageFault
message_fault(const char *p, const char *end)
{
	const char *v;
	size_t		n;

	if (!string_member(p, end, "sim", &v, &n))
		return MSG_OK;
	if (n == 6 && memcmp(v, "reject", 6) == 0)
		return MSG_REJECT;
	if (n == 7 && memcmp(v, "unknown", 7) == 0)
		return MSG_UNKNOWN;
	if (n == 17 && memcmp(v, "unknown_delivered", 17) == 0)
		return MSG_UNKNOWN_DELIVERED;
	if (n == 4 && memcmp(v, "drop", 4) == 0)
		return MSG_DROP;
	if (n == 12 && memcmp(v, "unregistered", 12) == 0)
		return MSG_UNREGISTERED;
	return MSG_OK;
}

/* the array of messages: the body, or the object's first array member */
static const char *
find_array(const char *p, const char *end)
{
	p = skip_ws(p, end);
	if (p < end && *p == '[')
		return p;
	if (p >= end || *p != '{')
		return NULL;
	p++;
	for (;;)
	{
		const char *v;

		p = skip_ws(p, end);
		if (p >= end || *p != '"' || (p = skip_string(p, end)) == NULL)
			return NULL;
		p = skip_ws(p, end);
		if (p >= end || *p != ':')
			return NULL;
		v = skip_ws(p + 1, end);
		if (v < end && *v == '[')
			return v;
		if ((p = skip_value(v, end)) == NULL)
			return NULL;
		p = skip_ws(p, end);
		if (p >= end || *p != ',')
			return NULL;
		p++;
	}
}

int
sim_batch_parse(const char *body, size_t len, const char *key_field, SimMessage *out)
{
	const char *end = body + len;
	const char *p = find_array(body, end);
	int			n = 0;

	if (p == NULL)
		return -1;
	p = skip_ws(p + 1, end);
	if (p < end && *p == ']')
		return 0;
	for (;;)
	{
		const char *m = skip_ws(p, end);
		const char *mend = skip_value(m, end);

		if (mend == NULL || *m != '{' || n == SIM_BATCH_MAX)
			return -1;
		out[n].text = m;
		out[n].len = (size_t) (mend - m);
		if (!string_member(m, mend, key_field, &out[n].key, &out[n].key_len))
			out[n].key = NULL;
		out[n].fault = message_fault(m, mend);
		n++;
		p = skip_ws(mend, end);
		if (p < end && *p == ']')
			return n;
		if (p >= end || *p != ',')
			return -1;
		p++;
	}
}
