/*-------------------------------------------------------------------------
 *
 * store/endpoint_sql.c
 *      The senders' statements on customers' endpoints (notif_endpoint):
 *      the endpoints of a claim's jobs, read at once, and what their calls
 *      say of them (a success, or how long they have been failing, and the
 *      endpoints that this disables).  Prepared with the others
 *      (job_plans.c, job_sql.c's table); "%s" is the extension's schema.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "store/endpoint_sql.h"
#include "store/job_plans.h"
#include "store/spi_values.h"

/* the endpoints of these owners ($1), each found by primary key */
const char *const notif_sql_endpoints_text =
"SELECT e.owner, e.url, e.secrets, e.enabled, e.disabled_reason"
"  FROM %s.notif_endpoint e"
" WHERE e.owner = ANY ($1)";

/*
 * The calls that ended, one element each: the endpoint's owner ($1), a
 * success or a failure ($2: false is no answer, a timeout or a 5xx), when
 * ($3).  Per endpoint, failing_since becomes the first failure after its
 * last success of these, or NULL when the last of them succeeded; an
 * endpoint that failed already keeps its failing_since.  One still
 * failing past $4 ms (0: never) is disabled with its record; those are
 * returned, each once (its update is the one that disabled it).  Only rows
 * that change are written.  An endpoint row another session holds locked
 * (an application updating it) is passed over, never waited for: what these
 * calls say of it is dropped, and the next calls' results say it again.
 */
const char *const notif_sql_endpoint_results_text =
"WITH r AS ("
"    SELECT r.owner, r.ok, r.at FROM unnest($1, $2, $3) AS r(owner, ok, at)),"
" s AS ("
"    SELECT r.owner, max(r.at) FILTER (WHERE r.ok) AS last_ok FROM r GROUP BY r.owner),"
" f AS ("
"    SELECT s.owner, s.last_ok,"
"           min(r.at) FILTER (WHERE NOT r.ok AND (s.last_ok IS NULL OR r.at > s.last_ok)) AS fail_from"
"      FROM s JOIN r ON r.owner = s.owner GROUP BY s.owner, s.last_ok),"
" n AS ("
"    SELECT e.owner, e.enabled AS was_enabled,"
"           CASE WHEN f.fail_from IS NULL THEN NULL"
"                WHEN f.last_ok IS NOT NULL THEN f.fail_from"
"                ELSE coalesce(e.failing_since, f.fail_from) END AS since"
"      FROM f JOIN %s.notif_endpoint e ON e.owner = f.owner"
"       FOR UPDATE OF e SKIP LOCKED),"
" d AS ("
"    SELECT n.*, n.was_enabled AND n.since IS NOT NULL AND $4 > 0"
"                AND n.since <= now() - $4 * interval '1 millisecond' AS disable"
"      FROM n)"
" UPDATE %s.notif_endpoint e"
"    SET failing_since = d.since,"
"        enabled = e.enabled AND NOT d.disable,"
"        disabled_at = CASE WHEN d.disable THEN now() ELSE e.disabled_at END,"
"        disabled_reason = CASE WHEN d.disable"
"            THEN format('its calls failed (no answer, a timeout or a 5xx) without a success from %1$s to %2$s,"
" longer than notif_deliver.endpoint_disable_after (%3$s)',"
"                        d.since, now(), $4 * interval '1 millisecond')"
"            ELSE e.disabled_reason END"
"   FROM d"
"  WHERE e.owner = d.owner AND (e.failing_since IS DISTINCT FROM d.since OR d.disable)"
" RETURNING e.owner, e.failing_since, d.disable";

static void
run_plan(int plan, Datum *values, int expect)
{
	int			ret = SPI_execute_plan(notif_plans[plan].plan, values, NULL, false, 0);

	if (ret != expect)
		elog(ERROR, "notif_deliver: statement %d failed: %s", plan, SPI_result_code_string(ret));
}

static Datum
text_array_of(char **v, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));
	int			i;

	for (i = 0; i < n; i++)
		elems[i] = CStringGetTextDatum(v[i]);
	return spi_array_of(elems, NULL, n, TEXTOID);
}

/* The endpoints of owners[n] that exist, in no order, allocated in cxt. */
int
notif_sql_endpoints(char **owners, int n, MemoryContext cxt, NotifEndpoint **out)
{
	Datum		values[1];
	NotifEndpoint *eps;
	uint64		i;

	*out = NULL;
	if (n == 0)
		return 0;
	values[0] = text_array_of(owners, n);
	run_plan(PLAN_ENDPOINTS, values, SPI_OK_SELECT);
	eps = MemoryContextAllocZero(cxt, sizeof(NotifEndpoint) * Max(SPI_processed, 1));
	for (i = 0; i < SPI_processed; i++)
	{
		NotifEndpoint *e = &eps[i];
		bool		isnull;
		int			k;
		char	  **s;

		e->owner = spi_col_text(i, 1, cxt);
		e->url = spi_col_text(i, 2, cxt);
		s = spi_col_text_array(i, 3, cxt, &k);
		if (s && k > 0)
		{
			e->secrets = MemoryContextAllocZero(cxt, sizeof(char *) * (k + 1));
			memcpy(e->secrets, s, sizeof(char *) * k);
		}
		e->enabled = DatumGetBool(spi_col(i, 4, &isnull));
		e->disabled_reason = spi_col_text(i, 5, cxt);
	}
	*out = eps;
	return (int) SPI_processed;
}

/*
 * Record what the calls that ended say of their endpoints (the statement
 * above); returns the endpoints this disabled, allocated in cxt.
 */
int
notif_sql_endpoint_results(char **owners, const bool *ok, const TimestampTz *at, int n,
						   int64 disable_after_ms, MemoryContext cxt,
						   NotifEndpointDisabled **out)
{
	Datum		values[4];
	Datum	   *oks = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *ats = palloc(sizeof(Datum) * Max(n, 1));
	NotifEndpointDisabled *d;
	int			k = 0;
	uint64		i;

	*out = NULL;
	if (n == 0)
		return 0;
	for (i = 0; i < (uint64) n; i++)
	{
		oks[i] = BoolGetDatum(ok[i]);
		ats[i] = TimestampTzGetDatum(at[i]);
	}
	values[0] = text_array_of(owners, n);
	values[1] = spi_array_of(oks, NULL, n, BOOLOID);
	values[2] = spi_array_of(ats, NULL, n, TIMESTAMPTZOID);
	values[3] = Int64GetDatum(disable_after_ms);
	run_plan(PLAN_ENDPOINT_RESULTS, values, SPI_OK_UPDATE_RETURNING);
	d = MemoryContextAllocZero(cxt, sizeof(NotifEndpointDisabled) * Max(SPI_processed, 1));
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		if (!DatumGetBool(spi_col(i, 3, &isnull)))
			continue;
		d[k].owner = spi_col_text(i, 1, cxt);
		d[k].failing_since = spi_col_timestamptz(i, 2);
		k++;
	}
	*out = d;
	return k;
}
