/*-------------------------------------------------------------------------
 *
 * job_names.c
 *      The job lifecycle's names (statuses, deliveries, outcomes, events,
 *      conditions, tries), converted to and from text in this one place, for
 *      the tables (job_rows.c), the configuration (lane_config.c), messages
 *      (job_state.c) and the table as SQL sees it (job_state_sql.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"

#include "lifecycle/delivery.h"
#include "lifecycle/job_state.h"

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
	{EVENT_REPORT, "report"},
};
static const NameOf condition_names[] = {
	{COND_ALWAYS, ""}, {COND_DEADLINE_PASSED, "deadline passed"},
	{COND_OUT_OF_TRIES, "no try left"}, {COND_OUT_OF_TIME, "next try after the deadline"},
	{COND_IDLE_FORCED, "not held, forced"}, {COND_IDLE, "not held"},
	{COND_CANCELLED_BY_KIND, "cancelled, retried by kind"},
	{COND_IN_DEDUP_WINDOW, "inside the provider's deduplication window"},
	{COND_DEDUP_WINDOW_PASSED, "the deduplication window passed"},
	{COND_REPORT_WAIT, "the type waits for a report (resolve_wait)"},
	{COND_DEDUP_RETRY, "a retry made for the window"},
	{COND_DEDUP_RETRY_EXHAUSTED, "a retry made for the window, no try left"},
	{COND_DEDUP_RETRY_LATE, "a retry made for the window, deadline passed"},
	{COND_REPORTED, "a report said delivered during the call"},
	{COND_LOOKUP_FOUND, "the provider's status lookup found it"},
	{COND_BREAKER_OPEN, "the provider's circuit breaker is open"},
	{COND_PROBE, "the probe of the provider's circuit breaker"},
	{COND_NEXT_ROUTE, "a backup provider follows"},
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

NotifEvent
notif_event_from_name(const char *name)
{
	return (NotifEvent) VALUE_OF(event_names, name, "event");
}

const char *
notif_event_name(NotifEvent event)
{
	return NAME_OF(event_names, event);
}

const char *
notif_condition_name(NotifCondition when)
{
	return NAME_OF(condition_names, when);
}

const char *
notif_tries_name(NotifTries tries)
{
	return NAME_OF(tries_names, tries);
}

/* sets of bits as a transition row names them: "a, b", or "any" for all */
char *
notif_delivery_set_text(int bits)
{
	return names_of_set(delivery_names, lengthof(delivery_names), bits, DELIVERY_ANY);
}

char *
notif_status_set_text(int bits)
{
	return names_of_set(status_names, lengthof(status_names), bits, STATUS_ANY);
}

char *
notif_outcome_set_text(int bits)
{
	return names_of_set(outcome_names, lengthof(outcome_names), bits, OUTCOME_ANY);
}

/* notif_job.resolved_by as a transition leaves it; NULL: unresolved (or kept) */
const char *
notif_resolution_name(NotifResolution resolution)
{
	switch (resolution)
	{
		case RESOLUTION_DEDUP_WINDOW:
			return "dedup_window";
		case RESOLUTION_REPORT:
			return "report";
		case RESOLUTION_LOOKUP_FOUND:
			return "lookup_found";
		case RESOLUTION_LOOKUP_NOT_FOUND:
			return "lookup_not_found";
		default:
			return NULL;
	}
}

/* a provider's format and auth, as notif_provider spells them */
NotifFormat
notif_format_from_string(const char *s)
{
	if (strcmp(s, "form") == 0)
		return FORMAT_FORM;
	if (strcmp(s, "query") == 0)
		return FORMAT_QUERY;
	if (strcmp(s, "fcm") == 0)
		return FORMAT_FCM;
	if (strcmp(s, "apns") == 0)
		return FORMAT_APNS;
	return FORMAT_JSON;
}

NotifAuth
notif_auth_from_string(const char *s)
{
	if (s == NULL)
		return AUTH_NONE;
	if (strcmp(s, "google_service_account") == 0)
		return AUTH_GOOGLE_SERVICE_ACCOUNT;
	if (strcmp(s, "apns_token") == 0)
		return AUTH_APNS_TOKEN;
	return AUTH_NONE;
}
