/*-------------------------------------------------------------------------
 *
 * job_rows.c
 *      The rows of job_sql.c's claim and orphans statements, just run
 *      (SPI_tuptable), read into the jobs a sender holds: NotifClaimedJob
 *      and NotifOrphanJob.  Their columns are in the order of the
 *      statements' RETURNING and SELECT lists.  And the other way, a
 *      round's results as the record statement's arrays.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "store/job_sql.h"
#include "store/spi_values.h"

/* The claimed jobs (sql_claim's RETURNING), allocated in cxt; returns how many. */
int
notif_claimed_from_rows(MemoryContext cxt, NotifClaimedJob **out)
{
	NotifClaimedJob *jobs;
	uint64		i;

	jobs = MemoryContextAllocZero(cxt, sizeof(NotifClaimedJob) * Max(SPI_processed, 1));
	for (i = 0; i < SPI_processed; i++)
	{
		NotifClaimedJob *j = &jobs[i];
		bool		isnull;
		MemoryContext old;

		j->id = spi_col_int(i, 1);
		j->user_id = spi_col_int(i, 2);
		j->order_id = spi_col_text(i, 3, cxt);
		old = MemoryContextSwitchTo(cxt);
		j->payload = DatumGetJsonbPCopy(spi_col(i, 4, &isnull));
		MemoryContextSwitchTo(old);
		j->deadline_passed = DatumGetBool(spi_col(i, 5, &isnull));
		j->tries = spi_col_int(i, 6);
		j->deadline_at = spi_col_timestamptz(i, 7);
		j->earlier_tries = spi_col_int(i, 8);
		j->created_at = spi_col_timestamptz(i, 9);
		j->dedup_retry = DatumGetBool(spi_col(i, 10, &isnull));
		j->after_unknown = DatumGetBool(spi_col(i, 11, &isnull));
		j->last_provider = spi_col_text(i, 12, cxt);
		j->traceparent = spi_col_text(i, 13, cxt);
	}
	*out = jobs;
	return (int) SPI_processed;
}

/* The jobs of senders gone (sql_orphans), allocated in cxt; returns how many. */
int
notif_orphans_from_rows(MemoryContext cxt, NotifOrphanJob **out)
{
	NotifOrphanJob *jobs;
	int			i;

	jobs = MemoryContextAllocZero(cxt, sizeof(NotifOrphanJob) * Max(SPI_processed, 1));
	for (i = 0; i < (int) SPI_processed; i++)
	{
		NotifOrphanJob *j = &jobs[i];

		j->job.id = spi_col_int(i, 1);
		j->kind = spi_col_text(i, 2, cxt);
		j->status = notif_status_from_name(spi_col_text(i, 3, cxt));
		j->job.delivery = notif_delivery_claimed_as(j->status);
		j->job.tries = spi_col_int(i, 4);
		j->job.claimed_by = spi_col_int(i, 5);
		j->claimed_at = spi_col_timestamptz(i, 6);
		j->job.deadline_at = spi_col_timestamptz(i, 7);
		j->job.policy.max_tries = spi_col_int(i, 8);
		j->job.policy.backoff_min_ms = spi_col_int(i, 9);
		j->job.policy.backoff_max_ms = spi_col_int(i, 10);
		j->job.earlier_tries = spi_col_int(i, 11);
		j->job.policy.resolve_wait_ms = spi_col_int(i, 12);
		j->job.policy.call_timeout_ms = spi_col_int(i, 13);
		j->provider = spi_col_text(i, 14, cxt);
	}
	*out = jobs;
	return (int) SPI_processed;
}

#define AS_COLUMN(e, name, elem, array, sqltype) {#name, elem, array, sqltype},
const RecordColumn notif_record_columns[N_RECORD_COLUMNS] = {RECORD_COLUMNS(AS_COLUMN)};

/*
 * The other way: a round's results as the record statement's parameters,
 * an array per column of notif_record_columns, into values.
 */
void
notif_record_arrays(const NotifResult *results, int n, Datum *values)
{
	Datum	   *elems[N_RECORD_COLUMNS];
	bool	   *nulls[N_RECORD_COLUMNS];
	int			c,
				i;

	for (c = 0; c < N_RECORD_COLUMNS; c++)
	{
		elems[c] = palloc0(sizeof(Datum) * n);
		nulls[c] = palloc0(sizeof(bool) * n);
	}
	for (i = 0; i < n; i++)
	{
		const NotifResult *r = &results[i];
		const char *outcome = notif_outcome_name(r->outcome);
		const char *resolved_by;

		elems[REC_ID][i] = Int64GetDatum(r->job_id);
		elems[REC_TRIES][i] = Int32GetDatum(r->tries);
		elems[REC_EXPECTED][i] = CStringGetTextDatum(notif_status_name(r->expected_status));
		elems[REC_CLAIMED_BY][i] = Int64GetDatum(r->claimed_by);
		elems[REC_STATUS][i] = CStringGetTextDatum(notif_status_name(r->next.status));
		if (outcome)
			elems[REC_OUTCOME][i] = CStringGetTextDatum(outcome);
		else
			nulls[REC_OUTCOME][i] = true;
		elems[REC_HTTP][i] = Int32GetDatum((int32) r->http_status);
		nulls[REC_HTTP][i] = (r->http_status == 0);
		if (r->error && r->error[0])
			elems[REC_ERROR_][i] = CStringGetTextDatum(r->error);
		else
			nulls[REC_ERROR_][i] = true;
		elems[REC_NEXT_AT][i] = TimestampTzGetDatum(r->next.next_at);
		nulls[REC_NEXT_AT][i] = !r->next.row->retries;
		elems[REC_SENT_AT][i] = TimestampTzGetDatum(r->sent_at);
		nulls[REC_SENT_AT][i] = (r->sent_at == 0);
		elems[REC_TRIES_DELTA][i] = Int32GetDatum(r->next.tries_delta);
		elems[REC_STARTED][i] = TimestampTzGetDatum(r->started_at);
		elems[REC_ENDED][i] = TimestampTzGetDatum(r->ended_at);
		elems[REC_ATTEMPT][i] = Int32GetDatum(r->earlier_tries + r->tries);
		nulls[REC_ATTEMPT][i] = r->next.no_call;	/* no attempt row */
		elems[REC_RESOLVES][i] = BoolGetDatum(r->next.resolution != RESOLUTION_KEPT);
		elems[REC_KEEPS_OUTCOME][i] = BoolGetDatum(r->next.keeps_outcome);
		if (r->provider)
			elems[REC_PROVIDER][i] = CStringGetTextDatum(r->provider);
		else
			nulls[REC_PROVIDER][i] = true;
		elems[REC_BATCH][i] = Int64GetDatum(r->batch_id);
		nulls[REC_BATCH][i] = (r->batch_id == 0);
		resolved_by = notif_resolution_name(r->next.resolution);
		if (resolved_by)
			elems[REC_RESOLVED_BY][i] = CStringGetTextDatum(resolved_by);
		else
			nulls[REC_RESOLVED_BY][i] = true;
	}
	for (c = 0; c < N_RECORD_COLUMNS; c++)
		values[c] = spi_array_of(elems[c], nulls[c], n, notif_record_columns[c].elemtype);
}
