/*-------------------------------------------------------------------------
 *
 * job_state_sql.c
 *      The job lifecycle's table as SQL sees it (names from job_names.c):
 *        notif_transitions()      every row of job_state.c's table;
 *        notif_transition_for()   the row that applies to one job, which
 *                                 notif_retry and notif_cancel ask instead
 *                                 of restating the rules.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"

#include "lifecycle/job_state.h"

PG_FUNCTION_INFO_V1(notif_transitions);
PG_FUNCTION_INFO_V1(notif_transition_for);

#define N_COLUMNS 11

/* one row of the table as notif_transitions() shows it */
static void
row_values(const NotifTransitionRow *row, Datum *values, bool *nulls)
{
	memset(nulls, false, sizeof(bool) * N_COLUMNS);
	values[0] = CStringGetTextDatum(row->name);
	values[1] = CStringGetTextDatum(notif_event_name(row->event));
	values[2] = CStringGetTextDatum(notif_delivery_set_text(row->delivery));
	values[3] = CStringGetTextDatum(notif_status_set_text(row->from));
	values[4] = CStringGetTextDatum(notif_outcome_set_text(row->outcome));
	values[5] = CStringGetTextDatum(notif_condition_name(row->when));
	if (row->to == STATUS_NONE)
		nulls[6] = true;		/* refused */
	else
		values[6] = CStringGetTextDatum(notif_status_name((NotifStatus) row->to));
	values[7] = BoolGetDatum(row->retries);
	values[8] = CStringGetTextDatum(notif_tries_name(row->tries));
	values[9] = BoolGetDatum(row->holds);
	if (row->note)
		values[10] = CStringGetTextDatum(row->note);
	else
		nulls[10] = true;
}

/*
 * notif_transitions(): name, event, delivery, from_status, outcome,
 * condition, to_status (NULL: refused), retries, tries, holds, note.
 */
Datum
notif_transitions(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	const NotifTransitionRow *rows;
	int			n,
				i;

	InitMaterializedSRF(fcinfo, 0);
	rows = notif_transition_rows(&n);
	for (i = 0; i < n; i++)
	{
		Datum		values[N_COLUMNS];
		bool		nulls[N_COLUMNS];

		row_values(&rows[i], values, nulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	PG_RETURN_VOID();
}

static char *
text_arg(FunctionCallInfo fcinfo, int n)
{
	return PG_ARGISNULL(n) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(n));
}

/*
 * notif_transition_for(event, delivery, status, outcome, last_error, held,
 * forced, by_kind): the row that applies to a job in this state, with the
 * columns of notif_transitions().  outcome and last_error may be NULL.
 */
Datum
notif_transition_for(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	NotifFacts	facts = {0};
	const NotifTransitionRow *row;
	NotifEvent	event;
	NotifStatus status;
	char	   *outcome = text_arg(fcinfo, 3);
	char	   *last_error = text_arg(fcinfo, 4);
	const NotifTransitionRow *cancel;
	Datum		values[N_COLUMNS];
	bool		nulls[N_COLUMNS];
	int			i;

	for (i = 0; i < 3; i++)
		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("notif_transition_for: event, delivery and status must not be null")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "notif_transition_for: return type must be a row type");

	event = notif_event_from_name(text_arg(fcinfo, 0));
	status = notif_status_from_name(text_arg(fcinfo, 2));
	facts.held = !PG_ARGISNULL(5) && PG_GETARG_BOOL(5);
	facts.forced = !PG_ARGISNULL(6) && PG_GETARG_BOOL(6);
	facts.by_kind = !PG_ARGISNULL(7) && PG_GETARG_BOOL(7);

	/* cancelled: what notif_cancel's row wrote */
	cancel = notif_find_transition(EVENT_CANCEL, DELIVERY_ANY, STATUS_QUEUED, OUTCOME_NONE, &facts);
	facts.cancelled = status == (NotifStatus) cancel->to && last_error != NULL &&
		strcmp(last_error, cancel->note) == 0;

	row = notif_find_transition(event, notif_delivery_from_name(text_arg(fcinfo, 1)), status,
								outcome ? (int) notif_outcome_from_name(outcome) : OUTCOME_NONE,
								&facts);
	if (row == NULL)
		PG_RETURN_NULL();
	row_values(row, values, nulls);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}
