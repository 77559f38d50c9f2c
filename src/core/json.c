/*-------------------------------------------------------------------------
 *
 * core/json.c
 *      Reading what a provider's JSON answer holds without ever raising an
 *      ERROR, whatever it sent: the document (or NULL), a number within
 *      bounds.  Used on push answers (provider/answer.c), token answers
 *      (provider/auth.c) and status lookups' answers (provider/lookup.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "core/json.h"

/* a JSON document, or NULL when the text is not one */
Jsonb *
notif_parse_json(const char *text)
{
	MemoryContext cxt = CurrentMemoryContext;
	Jsonb	   *volatile result = NULL;

	PG_TRY();
	{
		result = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(text)));
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		result = NULL;
	}
	PG_END_TRY();
	return result;
}

/*
 * A JSON number as a double when it lies in [lo, hi], else false: never an
 * ERROR, whatever the provider sent (1e30, -1, a fraction).
 */
bool
notif_json_number_in(JsonbValue *v, double lo, double hi, double *out)
{
	double		d;

	if (v == NULL || v->type != jbvNumeric)
		return false;
	d = DatumGetFloat8(DirectFunctionCall1(numeric_float8_no_overflow,
										   NumericGetDatum(v->val.numeric)));
	if (isnan(d) || d < lo || d > hi)
		return false;
	*out = d;
	return true;
}
