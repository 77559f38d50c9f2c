/*-------------------------------------------------------------------------
 *
 * job_rows.c
 *      The rows of job_sql.c's claim and orphans statements, just run
 *      (SPI_tuptable), read into the jobs a sender holds: NotifClaimedJob
 *      and NotifOrphanJob.  Their columns are in the order of the
 *      statements' RETURNING and SELECT lists.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "job_sql.h"
#include "spi_values.h"

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
	}
	*out = jobs;
	return (int) SPI_processed;
}
