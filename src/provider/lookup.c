/*-------------------------------------------------------------------------
 *
 * provider/lookup.c
 *      A provider's status lookup on the wire (notif_provider.lookup_*):
 *      the URL asked for a job's key, and what the answer says by the
 *      provider's rules (found, not found, or no answer to rely on).  The
 *      sender asks it before an at_least_once retry (sender/lookup.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "core/json.h"
#include "provider/lookup.h"
#include "provider/push.h"
#include "provider/request.h"

/* The lookup's URL: the template with each "{key}" the key, percent-encoded. */
char *
notif_lookup_url(const NotifLookupConf *lookup, const char *key)
{
	StringInfoData buf;
	const char *s = lookup->url;
	const char *at;

	initStringInfo(&buf);
	while ((at = strstr(s, "{key}")) != NULL)
	{
		appendBinaryStringInfo(&buf, s, at - s);
		notif_append_urlencoded(&buf, key, strlen(key));
		s = at + strlen("{key}");
	}
	appendStringInfoString(&buf, s);
	return buf.data;
}

static bool
status_in(long status, const int *list, int n)
{
	int			i;

	for (i = 0; i < n; i++)
		if (list[i] == status)
			return true;
	return false;
}

static bool
text_in(const char *s, char **list, int n)
{
	int			i;

	for (i = 0; i < n; i++)
		if (strcmp(list[i], s) == 0)
			return true;
	return false;
}

/* The value at the lookup's field path, as text; NULL when absent or not a scalar. */
static char *
field_text(Jsonb *jb, const NotifLookupConf *lookup)
{
	JsonbContainer *c = &jb->root;
	JsonbValue	v;
	int			i;

	for (i = 0; i < lookup->field_depth; i++)
	{
		const char *key = lookup->field[i];

		if (!JsonContainerIsObject(c) ||
			getKeyJsonValueFromContainer(c, key, strlen(key), &v) == NULL)
			return NULL;
		if (i < lookup->field_depth - 1)
		{
			if (v.type != jbvBinary)
				return NULL;
			c = v.val.binary.data;
		}
	}
	switch (v.type)
	{
		case jbvString:
			return pnstrdup(v.val.string.val, v.val.string.len);
		case jbvNumeric:
			return DatumGetCString(DirectFunctionCall1(numeric_out,
													   NumericGetDatum(v.val.numeric)));
		case jbvBool:
			return pstrdup(v.val.boolean ? "true" : "false");
		default:
			return NULL;
	}
}

/*
 * What an ended lookup says, by its provider's rules: a not-found status,
 * or a found one (with the field's value, when the provider has a field,
 * among the found or the not-found values).  Anything else is no answer.
 */
NotifLookup
notif_lookup_read(const NotifLookupConf *lookup, const NotifCall *look)
{
	Jsonb	   *jb;
	char	   *value;

	if (look->error != NULL || look->http_status == 0)
		return LOOKUP_UNANSWERED;	/* the transfer failed */
	if (status_in(look->http_status, lookup->not_found, lookup->n_not_found))
		return LOOKUP_NOT_FOUND;
	if (!status_in(look->http_status, lookup->found, lookup->n_found))
		return LOOKUP_UNANSWERED;
	if (lookup->field_depth == 0)
		return LOOKUP_FOUND;
	if (look->answer == NULL || look->answer->len == 0 ||
		(jb = notif_parse_json(look->answer->data)) == NULL ||
		(value = field_text(jb, lookup)) == NULL)
		return LOOKUP_UNANSWERED;
	if (text_in(value, lookup->found_values, lookup->n_found_values))
		return LOOKUP_FOUND;
	if (text_in(value, lookup->not_found_values, lookup->n_not_found_values))
		return LOOKUP_NOT_FOUND;
	return LOOKUP_UNANSWERED;
}
