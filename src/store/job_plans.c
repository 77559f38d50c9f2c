/*-------------------------------------------------------------------------
 *
 * store/job_plans.c
 *      The workers' statements (job_sql.c) prepared once per process, for
 *      the extension as it is installed, and run: the notif_sql_* calls
 *      that the launcher and the senders make (job_sql.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "store/job_plans.h"
#include "store/job_sql.h"
#include "store/spi_values.h"
#include "core/shared.h"

static Oid	plans_extension = InvalidOid;	/* prepared at this library's version */

/* the version of the extension installed, when it is not the one we need */
char	   *notif_sql_wrong_version = NULL;

/*
 * Prepare the plans for the extension as it is now.  Returns false when the
 * extension is not installed, or is installed at another version than this
 * library's (notif_sql_wrong_version then says which).  Re-prepares after a
 * DROP and CREATE, or an ALTER EXTENSION ... UPDATE.
 */
bool
notif_sql_prepare(void)
{
	Oid			ext = get_extension_oid(NOTIF_EXTENSION_NAME, true);
	Oid			nspid;
	char	   *version;
	int			i;

	if (notif_sql_wrong_version)
		pfree(notif_sql_wrong_version);
	notif_sql_wrong_version = NULL;
	if (!OidIsValid(ext))
	{
		plans_extension = InvalidOid;
		notif_planner_policy_tables(InvalidOid);
		return false;
	}
	nspid = notif_extension_schema(ext, &version);
	if (version == NULL || strcmp(version, NOTIF_SCHEMA_VERSION) != 0)
	{
		notif_sql_wrong_version = MemoryContextStrdup(TopMemoryContext,
													  version ? version : "?");
		plans_extension = InvalidOid;
		notif_planner_policy_tables(InvalidOid);
		return false;
	}
	if (ext == plans_extension)
		return true;			/* an update would have failed the check above */

	notif_planner_policy_tables(nspid);

	for (i = 0; i < N_RECORD_COLUMNS; i++)
		notif_plans[PLAN_RECORD].argtypes[i] = notif_plans[PLAN_RECORD_PASSING].argtypes[i] =
			notif_plans[PLAN_RECORD_ENDED].argtypes[i] =
			notif_plans[PLAN_RECORD_PASSING_ENDED].argtypes[i] = notif_record_columns[i].arraytype;
	for (i = 0; i < N_PLANS; i++)
	{
		SPIPlanPtr	p;
		const char *sql = notif_plans[i].sql ? *notif_plans[i].sql : notif_plans[i].make_sql();

		if (notif_plans[i].plan)
			SPI_freeplan(notif_plans[i].plan);
		notif_plans[i].plan = NULL;
		p = SPI_prepare_cursor(notif_qualified_sql(nspid, sql),
							   notif_plans[i].nargs, notif_plans[i].argtypes,
							   notif_plans[i].generic ? CURSOR_OPT_GENERIC_PLAN : 0);
		if (p == NULL)
			elog(ERROR, "notif_deliver: could not prepare statement: %s",
				 SPI_result_code_string(SPI_result));
		SPI_keepplan(p);
		notif_plans[i].plan = p;
	}
	plans_extension = ext;
	return true;
}

/* Run a plan, with a snapshot of its own (InvalidSnapshot) or the one given. */
static void
run_with(int plan, Datum *values, const char *nulls, bool read_only, int expect,
		 Snapshot snapshot)
{
	int			ret = (snapshot == InvalidSnapshot)
		? SPI_execute_plan(notif_plans[plan].plan, values, nulls, read_only, 0)
		: SPI_execute_snapshot(notif_plans[plan].plan, values, nulls, snapshot,
							   InvalidSnapshot, read_only, true, 0);

	if (ret != expect)
		elog(ERROR, "notif_deliver: statement %d failed: %s", plan, SPI_result_code_string(ret));
}

static void
run(int plan, Datum *values, const char *nulls, bool read_only, int expect)
{
	run_with(plan, values, nulls, read_only, expect, InvalidSnapshot);
}

int
notif_sql_lane_types(const char *lane, MemoryContext cxt, NotifTypeConf **out)
{
	Datum		values[1] = {CStringGetTextDatum(lane)};

	/*
	 * Not read-only: a snapshot of its own, taken now.  The caller read the
	 * configuration generation just before; with the round's older snapshot
	 * a change committed in between would be marked as read and never be.
	 */
	run(PLAN_LANE_TYPES, values, NULL, false, SPI_OK_SELECT);
	return notif_lane_types_from_rows(cxt, out);	/* lane_config.c */
}

/*
 * Claim a type's due jobs for calls to provider (NULL with late_only: no
 * call; sql_claim says the rest).
 */
int
notif_sql_claim(const char *kind, NotifDelivery delivery, int limit, bool late_only,
				const NotifClaimRoute *route, const char *provider, int64 incarnation,
				Snapshot snapshot, MemoryContext cxt, NotifClaimedJob **out)
{
	const NotifTransitionRow *claimed = notif_claim_row(delivery, false);
	const NotifTransitionRow *late = notif_claim_row(delivery, true);
	const NotifTransitionRow *late_dedup = notif_claim_late_dedup_row(delivery);
	Datum		values[16] = {CStringGetTextDatum(kind), Int32GetDatum(limit),
		Int64GetDatum(incarnation),
		CStringGetTextDatum(notif_status_name((NotifStatus) claimed->to)),
		Int32GetDatum(claimed->tries == TRIES_COUNTED ? 1 : 0),
		CStringGetTextDatum(notif_status_name((NotifStatus) late->to)),
		CStringGetTextDatum(late->note),
		CStringGetTextDatum(notif_status_name((NotifStatus) late_dedup->to)),
	CStringGetTextDatum(late_dedup->note), BoolGetDatum(late_only)};
	char		nulls[16];
	int			i;

	memset(nulls, ' ', 10);
	memset(nulls + 10, 'n', 5); /* no routes: NULL */
	nulls[15] = provider ? ' ' : 'n';
	values[15] = provider ? CStringGetTextDatum(provider) : (Datum) 0;

	Assert(claimed->holds && !late->holds && late->tries == TRIES_KEPT);
	Assert(!late_dedup->holds && late_dedup->tries == TRIES_KEPT);
	if (route)
	{
		Datum	   *start = palloc(sizeof(Datum) * route->n);
		Datum	   *stay = palloc(sizeof(Datum) * route->n);

		for (i = 0; i < route->n; i++)
		{
			start[i] = Int32GetDatum(route->start[i]);
			stay[i] = Int32GetDatum(route->stay[i]);
		}
		values[10] = route->routes;
		values[11] = spi_array_of(start, NULL, route->n, INT4OID);
		values[12] = spi_array_of(stay, NULL, route->n, INT4OID);
		values[13] = Int32GetDatum(route->route);
		values[14] = Int32GetDatum(Max(4 * limit, CLAIM_ROUTED_WINDOW));
		memset(nulls + 10, ' ', 5);
	}
	run_with(PLAN_CLAIM, values, nulls, false, SPI_OK_SELECT, snapshot);
	return notif_claimed_from_rows(cxt, out);	/* job_rows.c */
}

/* Which of results[n] have their id among ids[c]: out[i]. */
static void
mark_ids(const NotifResult *results, int n, const int64 *ids, int c, bool *out)
{
	int			i;

	for (i = 0; i < n; i++)
		out[i] = false;
	while (--c >= 0)
		for (i = 0; i < n; i++)
			out[i] |= (results[i].job_id == ids[c]);
}

/*
 * Record the results.  With passed, the record passes over jobs another
 * session has locked, and passed[i] says of each whether it was: not
 * recorded, to try again.  Without, it waits for such locks.  With ended,
 * ended[i] says whether it wrote the job's end (a final status): the
 * outcomes to tell (sender/outcomes.c).
 */
void
notif_sql_record(NotifResult *results, int n, bool *passed, bool *ended)
{
	Datum		values[N_RECORD_COLUMNS];
	int			c;
	int			plan;

	if (n == 0)
		return;
	notif_record_arrays(results, n, values);	/* job_rows.c */

	if (ended)
		plan = passed ? PLAN_RECORD_PASSING_ENDED : PLAN_RECORD_ENDED;
	else
		plan = passed ? PLAN_RECORD_PASSING : PLAN_RECORD;
	run(plan, values, NULL, false, SPI_OK_SELECT);
	if (ended)
	{
		int64	   *ids = spi_col_int8_array(0, 2, &c);

		mark_ids(results, n, ids, c, ended);
	}
	if (passed)
	{
		int64	   *ids = spi_col_int8_array(0, 1, &c);

		mark_ids(results, n, ids, c, passed);
	}
}

int
notif_sql_orphans(const int64 *live, int n_live, MemoryContext cxt, NotifOrphanJob **out)
{
	Datum		values[1] = {spi_int8_array_of(live, n_live)};

	run(PLAN_ORPHANS, values, NULL, false, SPI_OK_SELECT);
	return notif_orphans_from_rows(cxt, out);	/* job_rows.c */
}

/* The highest incarnation that holds a job (0 if none). */
int64
notif_sql_max_holder(void)
{
	run(PLAN_MAX_HOLDER, NULL, NULL, true, SPI_OK_SELECT);
	return spi_col_int(0, 1);
}

/*
 * Build notif_active if it is not built (see sql_build_active): how many
 * rows that wrote, or -1 when it was built already.
 */
int64
notif_sql_build_active(void)
{
	bool		isnull;
	Datum		d;

	run(PLAN_BUILD_ACTIVE, NULL, NULL, false, SPI_OK_SELECT);
	d = spi_col(0, 1, &isnull);
	return isnull ? -1 : DatumGetInt64(d);
}

/* Of ids[n], those with a delivered report, palloc'd; *n_out of them. */
int64 *
notif_sql_reported(const int64 *ids, int n, int *n_out)
{
	Datum		values[1] = {spi_int8_array_of(ids, n)};

	run(PLAN_REPORTED, values, NULL, true, SPI_OK_SELECT);
	return spi_col_int8_array(0, 1, n_out);
}

/* n new batch ids (provider batches: sender/batch_calls.c), into ids[] */
void
notif_sql_batch_ids(int n, int64 *ids)
{
	Datum		values[1] = {Int32GetDatum(n)};
	int64	   *got;
	int			n_got = 0;

	run(PLAN_BATCH_IDS, values, NULL, false, SPI_OK_SELECT);
	got = spi_col_int8_array(0, 1, &n_got);
	if (n_got != n)
		elog(ERROR, "notif_deliver: %d batch ids asked, %d given", n, n_got);
	memcpy(ids, got, sizeof(int64) * n);
}

/* How many jobs of a type are due now, counted up to "most". */
int
notif_sql_due_count(const char *kind, int most)
{
	Datum		values[2] = {CStringGetTextDatum(kind), Int32GetDatum(most)};

	run(PLAN_DUE_COUNT, values, NULL, true, SPI_OK_SELECT);
	return spi_col_int(0, 1);
}

/* When the earliest queued job of a type is due; 0 if none is queued. */
TimestampTz
notif_sql_next_due(const char *kind)
{
	Datum		values[1] = {CStringGetTextDatum(kind)};

	run(PLAN_NEXT_DUE, values, NULL, true, SPI_OK_SELECT);
	return spi_col_timestamptz(0, 1);
}

int
notif_sql_lanes(MemoryContext cxt, char ***out, int **senders)
{
	char	  **lanes;
	int		   *counts;
	int			i;

	run(PLAN_LANES, NULL, NULL, true, SPI_OK_SELECT);
	lanes = MemoryContextAlloc(cxt, sizeof(char *) * Max(SPI_processed, 1));
	counts = MemoryContextAlloc(cxt, sizeof(int) * Max(SPI_processed, 1));
	for (i = 0; i < (int) SPI_processed; i++)
	{
		lanes[i] = spi_col_text(i, 1, cxt);
		counts[i] = (int) spi_col_int(i, 2);	/* NULL: 0 */
	}
	*out = lanes;
	*senders = counts;
	return (int) SPI_processed;
}

/* Delete one batch of expired finished jobs; returns how many. */
int64
notif_sql_purge(int batch_size)
{
	Datum		values[1] = {Int32GetDatum(batch_size)};
	bool		isnull;

	run(PLAN_PURGE, values, NULL, false, SPI_OK_SELECT);
	return DatumGetInt64(spi_col(0, 1, &isnull));
}

/*
 * Channel fallback for these jobs (sql_fallback); returns how many it
 * wrote.  With outcomes, the jobs whose fallback it wrote are told
 * (notif_sql_outcomes), in the same (sub)transaction.
 */
int64
notif_sql_fallback(const int64 *ids, int n, bool outcomes)
{
	Datum		values[1];
	int64		written;
	int64	   *fell_back;
	int			c;

	if (n == 0)
		return 0;
	values[0] = spi_int8_array_of(ids, n);
	run(PLAN_FALLBACK, values, NULL, false, SPI_OK_SELECT);
	written = spi_col_int(0, 1);
	if (outcomes && written > 0)
	{
		fell_back = spi_col_int8_array(0, 2, &c);
		notif_sql_outcomes(NULL, 0, fell_back, c);
	}
	return written;
}

/*
 * The outcome messages of the jobs ended[n_ended] whose end, and of the
 * jobs fell_back[n_fell_back] whose fallback, this transaction just wrote
 * (notif_outcomes_emit: only those of types with emit_outcomes).
 */
void
notif_sql_outcomes(const int64 *ended, int n_ended, const int64 *fell_back, int n_fell_back)
{
	Datum		values[2];

	if (n_ended == 0 && n_fell_back == 0)
		return;
	values[0] = spi_int8_array_of(ended, n_ended);
	values[1] = spi_int8_array_of(fell_back, n_fell_back);
	run(PLAN_OUTCOMES, values, NULL, false, SPI_OK_SELECT);
}
