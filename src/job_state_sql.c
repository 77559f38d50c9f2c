/*-------------------------------------------------------------------------
 *
 * job_state_sql.c
 *      The job lifecycle's names, converted to and from text in this one
 *      place, and its table as SQL sees it:
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

#include "job_state.h"

PG_FUNCTION_INFO_V1(notif_transitions);
PG_FUNCTION_INFO_V1(notif_transition_for);

typedef struct NameOf
{
	int			value;
	const char *name;
} NameOf;

static const NameOf status_names[] = {
	{STATUS_QUEUED, "queued"}, {STATUS_SENDING, "sending"}, {STATUS_SENT, "sent"},
	{STATUS_FAILED, "failed"}, {STATUS_EXPIRED, "expired"},
};
static const NameOf delivery_names[] = {
	{AT_MOST_ONCE, "at_most_once"}, {AT_LEAST_ONCE, "at_least_once"},
};
static const NameOf outcome_names[] = {
	{OUTCOME_ACCEPTED, "accepted"}, {OUTCOME_REJECTED, "rejected"},
	{OUTCOME_UNREACHED, "unreached"}, {OUTCOME_UNKNOWN, "unknown"},
	{OUTCOME_NOT_STARTED, "not started"},
};
static const NameOf event_names[] = {
	{EVENT_CLAIM, "claim"}, {EVENT_CALL_ENDED, "call ended"},
	{EVENT_SENDER_LOST, "sender lost"}, {EVENT_RETRY, "retry"}, {EVENT_CANCEL, "cancel"},
};
static const NameOf condition_names[] = {
	{COND_ALWAYS, ""}, {COND_DEADLINE_PASSED, "deadline passed"},
	{COND_OUT_OF_TRIES, "no try left"}, {COND_OUT_OF_TIME, "next try after the deadline"},
	{COND_IDLE_FORCED, "not held, forced"}, {COND_IDLE, "not held"},
	{COND_CANCELLED_BY_KIND, "cancelled, retried by kind"},
};
static const NameOf tries_names[] = {
	{TRIES_KEPT, ""}, {TRIES_COUNTED, "+1"}, {TRIES_UNCOUNTED, "-1"}, {TRIES_FRESH, "fresh"},
};

#define NAME_OF(table, v)		name_of(table, lengthof(table), v)
#define VALUE_OF(table, s, what) value_of(table, lengthof(table), s, what)

static const char *
name_of(const NameOf *table, int n, int value)
{
	int			i;

	for (i = 0; i < n; i++)
		if (table[i].value == value)
			return table[i].name;
	return NULL;
}

static int
value_of(const NameOf *table, int n, const char *name, const char *what)
{
	int			i;

	for (i = 0; i < n; i++)
		if (strcmp(table[i].name, name) == 0)
			return table[i].value;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("notif_deliver: unknown %s \"%s\"", what, name)));
	return 0;
}

/* "a, b" for a set of bits; "any" for all of them */
static char *
names_of_set(const NameOf *table, int n, int bits, int all)
{
	StringInfoData buf;
	int			i;

	if (bits == all)
		return pstrdup("any");
	initStringInfo(&buf);
	for (i = 0; i < n; i++)
		if (bits & table[i].value)
			appendStringInfo(&buf, "%s%s", buf.len ? ", " : "", table[i].name);
	return buf.data;
}

const char *
notif_status_name(NotifStatus status)
{
	return NAME_OF(status_names, status);
}

NotifStatus
notif_status_from_name(const char *name)
{
	return (NotifStatus) VALUE_OF(status_names, name, "job status");
}

const char *
notif_delivery_name(NotifDelivery delivery)
{
	return NAME_OF(delivery_names, delivery);
}

NotifDelivery
notif_delivery_from_name(const char *name)
{
	return (NotifDelivery) VALUE_OF(delivery_names, name, "delivery");
}

/* the outcome as notif_job and notif_attempt hold it; NULL for a call never started */
const char *
notif_outcome_name(NotifOutcome outcome)
{
	return outcome == OUTCOME_NOT_STARTED ? NULL : NAME_OF(outcome_names, outcome);
}

NotifOutcome
notif_outcome_from_name(const char *name)
{
	return (NotifOutcome) VALUE_OF(outcome_names, name, "outcome");
}

#define N_COLUMNS 11

/* one row of the table as notif_transitions() shows it */
static void
row_values(const NotifTransitionRow *row, Datum *values, bool *nulls)
{
	memset(nulls, false, sizeof(bool) * N_COLUMNS);
	values[0] = CStringGetTextDatum(row->name);
	values[1] = CStringGetTextDatum(NAME_OF(event_names, row->event));
	values[2] = CStringGetTextDatum(names_of_set(delivery_names, lengthof(delivery_names),
												 row->delivery, DELIVERY_ANY));
	values[3] = CStringGetTextDatum(names_of_set(status_names, lengthof(status_names),
												 row->from, STATUS_ANY));
	values[4] = CStringGetTextDatum(names_of_set(outcome_names, lengthof(outcome_names),
												 row->outcome, OUTCOME_ANY));
	values[5] = CStringGetTextDatum(NAME_OF(condition_names, row->when));
	if (row->to == STATUS_NONE)
		nulls[6] = true;		/* refused */
	else
		values[6] = CStringGetTextDatum(notif_status_name((NotifStatus) row->to));
	values[7] = BoolGetDatum(row->retries);
	values[8] = CStringGetTextDatum(NAME_OF(tries_names, row->tries));
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

	event = (NotifEvent) VALUE_OF(event_names, text_arg(fcinfo, 0), "event");
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
