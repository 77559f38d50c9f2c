/*-------------------------------------------------------------------------
 *
 * lane_config.c
 *      A lane's configuration as a sender holds it: the rows of job_sql.c's
 *      lane-types statement (its types, each with its provider) read into
 *      NotifTypeConf, the provider's headers as a libcurl list.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"
#include "utils/datum.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "core/shared.h"
#include "store/job_sql.h"
#include "store/spi_values.h"

/* "Name: value" lines from a headers object (strings only, by CHECK) */
static struct curl_slist *
headers_from_jsonb(Jsonb *jb)
{
	struct curl_slist *list = NULL;
	JsonbIterator *it = JsonbIteratorInit(&jb->root);
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *key = NULL;

	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
			key = pnstrdup(v.val.string.val, v.val.string.len);
		else if (tok == WJB_VALUE && v.type == jbvString && key)
			list = curl_slist_append(list, psprintf("%s: %.*s", key,
													v.val.string.len, v.val.string.val));
	}
	return list;
}

/* a column of int8[] as ints, allocated in cxt */
static int *
ints_of(int row, int c, MemoryContext cxt, int *n)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);
	int64	   *v = spi_col_int8_array(row, c, n);
	int		   *out = palloc(sizeof(int) * Max(*n, 1));
	int			i;

	for (i = 0; i < *n; i++)
		out[i] = (int) v[i];
	MemoryContextSwitchTo(old);
	return out;
}

/*
 * The provider's status lookup (columns 23 to 30), allocated in cxt; NULL
 * when it has none.
 */
static NotifLookupConf *
lookup_from_row(int row, MemoryContext cxt)
{
	NotifLookupConf *l;
	char	   *url = spi_col_text(row, 23, cxt);
	char	   *field;
	bool		isnull;
	Datum		d;

	if (url == NULL)
		return NULL;
	l = MemoryContextAllocZero(cxt, sizeof(NotifLookupConf));
	l->url = url;
	l->head = strcmp(spi_col_text(row, 24, cxt), "HEAD") == 0;
	d = spi_col(row, 25, &isnull);
	l->headers = isnull ? NULL : headers_from_jsonb(DatumGetJsonbP(d));
	l->found = ints_of(row, 26, cxt, &l->n_found);
	l->not_found = ints_of(row, 27, cxt, &l->n_not_found);
	field = spi_col_text(row, 28, cxt);
	if (field)
	{
		/* a dotted path: each step a key (the CHECK refuses empty steps) */
		char	   *step;
		char	   *save = NULL;

		l->field = MemoryContextAlloc(cxt, sizeof(char *) * (strlen(field) / 2 + 1));
		for (step = strtok_r(field, ".", &save); step; step = strtok_r(NULL, ".", &save))
			l->field[l->field_depth++] = step;
	}
	l->found_values = spi_col_text_array(row, 29, cxt, &l->n_found_values);
	l->not_found_values = spi_col_text_array(row, 30, cxt, &l->n_not_found_values);
	return l;
}

/*
 * The result of the lane-types statement just run (SPI_tuptable), one
 * NotifTypeConf per row, allocated in cxt; returns how many.
 */
int
notif_lane_types_from_rows(MemoryContext cxt, NotifTypeConf **out)
{
	NotifTypeConf *types;
	uint64		i;

	types = MemoryContextAllocZero(cxt, sizeof(NotifTypeConf) * Max(SPI_processed, 1));
	for (i = 0; i < SPI_processed; i++)
	{
		NotifTypeConf *t = &types[i];
		char	   *s;
		bool		isnull;
		Datum		d;

		t->code = spi_col_text(i, 1, cxt);
		s = spi_col_text(i, 2, cxt);
		t->delivery = notif_delivery_from_name(s);
		t->policy.max_tries = spi_col_int(i, 3);
		t->priority = spi_col_int(i, 4);
		t->policy.backoff_min_ms = spi_col_int(i, 5);
		t->policy.backoff_max_ms = spi_col_int(i, 6);
		t->provider.name = spi_col_text(i, 7, cxt);
		t->provider.url = spi_col_text(i, 8, cxt);
		t->provider.format = notif_format_from_string(spi_col_text(i, 9, cxt));
		d = spi_col(i, 10, &isnull);
		t->provider.headers = isnull ? NULL : headers_from_jsonb(DatumGetJsonbP(d));
		t->provider.idempotency_header = spi_col_text(i, 11, cxt);
		t->provider.timeout_ms = spi_col_int(i, 12);
		t->provider.connect_timeout_ms = spi_col_int(i, 13);
		t->provider.max_inflight = spi_col_int(i, 14);
		d = spi_col(i, 15, &isnull);
		t->provider.rate_limit = isnull ? 0 : DatumGetFloat8(d);
		t->provider.ref_field = spi_col_text(i, 16, cxt);
		t->provider.auth = notif_auth_from_string(spi_col_text(i, 17, cxt));
		d = spi_col(i, 18, &isnull);
		if (!isnull)
		{
			MemoryContext old = MemoryContextSwitchTo(cxt);

			t->provider.credentials = DatumGetJsonbPCopy(d);
			MemoryContextSwitchTo(old);
		}
		t->provider.max_connections = spi_col_int(i, 19);	/* the lane's: shared by the reader */
		t->provider.ca_cert = spi_col_text(i, 20, cxt);
		t->provider.dedup_reach_ms = spi_col_int(i, 21);
		t->policy.resolve_wait_ms = spi_col_int(i, 22);
		t->policy.call_timeout_ms = t->provider.timeout_ms;
		t->provider.lookup = lookup_from_row(i, cxt);
		t->provider.breaker_threshold = spi_col_int(i, 31);	/* NULL: 0, none */
		t->provider.breaker_cooldown_ms = spi_col_int(i, 32);
		t->has_deadline = DatumGetBool(spi_col(i, 33, &isnull));
		d = spi_col(i, 34, &isnull);
		if (!isnull)
		{
			MemoryContext old = MemoryContextSwitchTo(cxt);

			t->provider.payload_map = DatumGetJsonbPCopy(d);
			MemoryContextSwitchTo(old);
		}
		t->route = spi_col_int(i, 35) - 1;
		t->n_routes = spi_col_int(i, 36);
		d = spi_col(i, 37, &isnull);
		{
			MemoryContext old = MemoryContextSwitchTo(cxt);

			t->routes = datumCopy(d, false, -1);
			MemoryContextSwitchTo(old);
		}
		t->any_fallback = DatumGetBool(spi_col(i, 38, &isnull));
		d = spi_col(i, 39, &isnull);
		if (!isnull)
		{
			MemoryContext old = MemoryContextSwitchTo(cxt);

			t->provider.apns_topics = DatumGetArrayTypePCopy(d);
			MemoryContextSwitchTo(old);
		}
		d = spi_col(i, 40, &isnull);
		if (!isnull)
		{
			MemoryContext old = MemoryContextSwitchTo(cxt);

			t->provider.fcm_topics = DatumGetArrayTypePCopy(d);
			MemoryContextSwitchTo(old);
		}
		t->any_outcomes = DatumGetBool(spi_col(i, 41, &isnull));
		t->endpoint_by = spi_col_text(i, 42, cxt);
		/*
		 * provider batches (provider/batch.c): 1 for a provider that does not
		 * batch, and for a type with endpoints (each job has its own url)
		 */
		t->provider.batch_max = Max(spi_col_int(i, 43), 1);
		t->provider.batch_wait_ms = spi_col_int(i, 44);
		t->provider.batch_field = spi_col_text(i, 45, cxt);
		d = spi_col(i, 46, &isnull);
		if (!isnull && t->provider.batch_max > 1 && t->endpoint_by == NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(cxt);

			t->provider.batch_results = DatumGetJsonbPCopy(d);
			MemoryContextSwitchTo(old);
		}
		else
			t->provider.batch_max = 1;
		t->provider.signing = DatumGetBool(spi_col(i, 47, &isnull));
		t->has_fallback = DatumGetBool(spi_col(i, 48, &isnull));
	}
	*out = types;
	return (int) SPI_processed;
}
