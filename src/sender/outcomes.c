/*-------------------------------------------------------------------------
 *
 * sender/outcomes.c
 *      Outcomes back to the application (notif_type.emit_outcomes): the
 *      jobs a round ends (its results, the orphans it recovers, the late
 *      jobs its claims expire) are told, in the round's transaction, by
 *      notif_outcomes_emit() (a logical message and a NOTIFY per job, of
 *      the types that emit them).  Nothing runs while no type emits.
 *      The fallbacks a round writes are told by sender/fallback.c's
 *      statement itself.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "sender/sender.h"
#include "store/job_sql.h"

/*
 * Where a record writes which results ended their job (notif_sql_record's
 * ended), allocated in the current context; NULL while no type emits.
 */
bool *
sender_outcomes_ended(int n)
{
	if (!sender.any_outcomes)
		return NULL;
	return palloc0(sizeof(bool) * Max(n, 1));
}

/* The jobs a record ended (ended[i], from notif_sql_record). */
void
sender_outcomes_of_results(const NotifResult *results, int n, const bool *ended)
{
	int64	   *ids;
	int			k = 0,
				i;

	if (ended == NULL || n == 0)
		return;
	ids = palloc(sizeof(int64) * n);
	for (i = 0; i < n; i++)
		if (ended[i])
			ids[k++] = results[i].job_id;
	notif_sql_outcomes(ids, k, NULL, 0);
}
