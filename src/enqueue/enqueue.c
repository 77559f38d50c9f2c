/*-------------------------------------------------------------------------
 *
 * enqueue.c
 *      notif_enqueue(): the idempotent, transactional way into notif_job.
 *
 * A job is inserted with one INSERT ... ON CONFLICT DO NOTHING on the
 * business key (user_id, kind, order_id).  When the key already exists,
 * nothing is written and the existing job's id is returned: a replayed
 * event, a client retry or two sessions racing all end with one row, and
 * the first payload stands.  The type's deadline comes from the session's
 * type cache (type_cache.c); the insert itself goes through the fast path
 * (enqueue/fast.c) when the table allows it, else through SPI.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "access/xact.h"

#include "core/shared.h"
#include "enqueue/enqueue.h"
#include "enqueue/fast.h"
#include "provider/push.h"

/* longest order_id, in bytes: it travels in the idempotency key header */
#define ORDER_ID_MAXLEN 200

/* how often a key that vanished under us (retention) is retried */
#define ENQUEUE_MAX_LOOPS 3

static Oid	plans_nspid = InvalidOid;
static SPIPlanPtr insert_plan = NULL;
static SPIPlanPtr select_plan = NULL;

static int64 enqueue_spi(Oid nspid, Datum *values, char *nulls, int64 user_id,
						 const char *kind, const char *order_id);

PG_FUNCTION_INFO_V1(notif_enqueue);
PG_FUNCTION_INFO_V1(notif_enqueue_bigint);

static void
prepare_plans(Oid nspid)
{
	Oid			insert_types[NOTIF_FAST_NCOLS] = {INT8OID, TEXTOID, TEXTOID, JSONBOID,
	TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID};
	bool		has_traceparent;
	Oid			select_types[3] = {INT8OID, TEXTOID, TEXTOID};
	SPIPlanPtr	ins,
				sel;

	if (insert_plan)
		SPI_freeplan(insert_plan);
	if (select_plan)
		SPI_freeplan(select_plan);
	insert_plan = select_plan = NULL;

	/* notif_job.traceparent: from 1.4 (the library may wait for the update) */
	has_traceparent = get_attnum(get_relname_relid("notif_job", nspid),
								 "traceparent") != InvalidAttrNumber;
	ins = SPI_prepare(notif_qualified_sql(nspid, has_traceparent ?
										  "INSERT INTO %s.notif_job"
										  " (user_id, kind, order_id, payload, next_at, deadline_at,"
										  "  traceparent)"
										  " VALUES ($1, $2, $3, $4, $5, $6, $7)"
										  " ON CONFLICT (user_id, kind, order_id) DO NOTHING"
										  " RETURNING id" :
										  "INSERT INTO %s.notif_job"
										  " (user_id, kind, order_id, payload, next_at, deadline_at)"
										  " VALUES ($1, $2, $3, $4, $5, $6)"
										  " ON CONFLICT (user_id, kind, order_id) DO NOTHING"
										  " RETURNING id"),
					  has_traceparent ? 7 : 6, insert_types);
	if (ins == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	sel = SPI_prepare(notif_qualified_sql(nspid,
										  "SELECT id FROM %s.notif_job"
										  " WHERE user_id OPERATOR(pg_catalog.=) $1"
										  "   AND kind OPERATOR(pg_catalog.=) $2"
										  "   AND order_id OPERATOR(pg_catalog.=) $3"),
					  3, select_types);
	if (sel == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));

	SPI_keepplan(ins);
	SPI_keepplan(sel);
	insert_plan = ins;
	select_plan = sel;
	plans_nspid = nspid;
}

/*
 * The schema of the extension is the schema of the function being called.
 * It is looked up once per call site (fn_extra lives as long as the query).
 */
static Oid
extension_namespace(FunctionCallInfo fcinfo)
{
	Oid		   *cached = (Oid *) fcinfo->flinfo->fn_extra;

	if (cached == NULL)
	{
		cached = MemoryContextAlloc(fcinfo->flinfo->fn_mcxt, sizeof(Oid));
		*cached = get_func_namespace(fcinfo->flinfo->fn_oid);
		fcinfo->flinfo->fn_extra = cached;
	}
	return *cached;
}

static void
check_order_id(const char *order_id)
{
	size_t		len = strlen(order_id);
	const unsigned char *p;

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("order_id must not be empty")));
	if (len > ORDER_ID_MAXLEN)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("order_id is too long"),
				 errdetail("It is %zu bytes; the limit is %d.", len, ORDER_ID_MAXLEN)));
	for (p = (const unsigned char *) order_id; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("order_id must not contain control characters"),
					 errdetail("The idempotency key kind:user_id:order_id travels in an HTTP header.")));
}

/* the W3C Trace Context rule a traceparent breaks, or NULL */
static const char *
traceparent_error(const char *tp, size_t len)
{
	size_t		i;
	bool		nonzero;

	if (len != 55)
		return "A traceparent of version 00 is 55 characters: 00-<trace-id>-<parent-id>-<flags>.";
	if (tp[0] != '0' || tp[1] != '0' || tp[2] != '-')
		return "Only version 00 is taken: it starts with \"00-\".";
	if (tp[35] != '-' || tp[52] != '-')
		return "Its fields are separated by \"-\": 00-<trace-id>-<parent-id>-<flags>.";
	for (i = 3; i < 55; i++)
		if (i != 35 && i != 52 &&
			!((tp[i] >= '0' && tp[i] <= '9') || (tp[i] >= 'a' && tp[i] <= 'f')))
			return i < 35 ? "The trace-id is 32 lowercase hexadecimal digits."
				: i < 52 ? "The parent-id is 16 lowercase hexadecimal digits."
				: "The flags are 2 lowercase hexadecimal digits.";
	for (nonzero = false, i = 3; i < 35; i++)
		nonzero |= tp[i] != '0';
	if (!nonzero)
		return "The trace-id must not be all zeros.";
	for (nonzero = false, i = 36; i < 52; i++)
		nonzero |= tp[i] != '0';
	if (!nonzero)
		return "The parent-id must not be all zeros.";
	return NULL;
}

static const char *
jsonb_kind_name(Jsonb *jb)
{
	if (JB_ROOT_IS_SCALAR(jb))
		return "a scalar";
	if (JB_ROOT_IS_ARRAY(jb))
		return "an array";
	return "an object";
}

/*
 * The body of both overloads; order_id is already text.
 */
static Datum
enqueue_internal(FunctionCallInfo fcinfo, text *order_id_text)
{
	int64		user_id;
	char	   *kind;
	char	   *order_id;
	Jsonb	   *payload;
	NotifTypeInfo type;
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	TimestampTz next_at;
	Datum		deadline_at = (Datum) 0;
	Datum		values[NOTIF_FAST_NCOLS];
	char		nulls[NOTIF_FAST_NCOLS] = {' ', ' ', ' ', ' ', ' ', ' ', 'n'};
	Oid			nspid;
	int64		id;

	/* validate the arguments, naming the one at fault */
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("user_id must not be NULL")));
	user_id = PG_GETARG_INT64(0);

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("kind must not be NULL")));
	kind = text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (kind[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("kind must not be empty")));

	if (order_id_text == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("order_id must not be NULL")));
	order_id = text_to_cstring(order_id_text);
	check_order_id(order_id);

	if (PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payload must not be NULL"),
				 errhint("Pass '{}' for a notification without data.")));
	payload = PG_GETARG_JSONB_P(3);
	if (!JB_ROOT_IS_OBJECT(payload))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("payload must be a JSON object"),
				 errdetail("The payload is %s.", jsonb_kind_name(payload))));
	if (VARSIZE(payload) - VARHDRSZ > (Size) notif_max_payload_size)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("payload is too large"),
				 errdetail("It is %zu bytes; the limit is %d bytes.",
						   (size_t) (VARSIZE(payload) - VARHDRSZ), notif_max_payload_size),
				 errhint("The limit is set by notif_deliver.max_payload_size.")));

	/*
	 * not_before: a time in the past is now (the job takes its place in its
	 * type's queue, never before the jobs already waiting); infinity and
	 * -infinity are refused (a job for -infinity would go before every
	 * other, and now() - min(next_at) would fail the monitors while it
	 * waits).  Both paths of the insert (fast.c's and SPI's) take next_at
	 * from here.
	 */
	next_at = PG_ARGISNULL(4) ? now : PG_GETARG_TIMESTAMPTZ(4);
	if (TIMESTAMP_NOT_FINITE(next_at))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("not_before must be a finite time"),
				 errdetail("not_before is %s.", TIMESTAMP_IS_NOBEGIN(next_at) ? "-infinity" : "infinity"),
				 errhint("Pass NULL, or leave it out, for a notification to go at once.")));
	if (next_at < now)
		next_at = now;

	/* traceparent (1.4): sent as a header on each call, so checked here */
	values[NOTIF_FAST_TRACEPARENT] = (Datum) 0;
	if (PG_NARGS() > 5 && !PG_ARGISNULL(5))
	{
		text	   *tp = PG_GETARG_TEXT_PP(5);
		const char *why = traceparent_error(VARDATA_ANY(tp), VARSIZE_ANY_EXHDR(tp));

		if (why)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("traceparent is not a valid W3C trace context"),
					 errdetail("%s", why),
					 errhint("Pass the traceparent header of the request being traced, or NULL.")));
		values[NOTIF_FAST_TRACEPARENT] = PointerGetDatum(tp);
		nulls[NOTIF_FAST_TRACEPARENT] = ' ';
	}

	/* on a standby, or in a read-only transaction: PostgreSQL's own error */
	PreventCommandIfReadOnly("notif_enqueue()");

	nspid = extension_namespace(fcinfo);

	if (!notif_type_lookup(nspid, kind, &type))
		ereport(ERROR,
				(errcode(ERRCODE_FOREIGN_KEY_VIOLATION),
				 errmsg("unknown notification type \"%s\"", kind),
				 errhint("Create it first, e.g. INSERT INTO notif_type VALUES ('%s', 'at_least_once', 3, '15 seconds').",
						 kind)));

	/*
	 * an fcm or apns provider's rules: refused here, not at every call; on
	 * the payload as its calls send it (a fallback member is the fallback's)
	 */
	if (type.format == FORMAT_FCM || type.format == FORMAT_APNS)
		notif_push_check_payload((NotifFormat) type.format,
								 type.has_fallback ?
								 DatumGetJsonbP(DirectFunctionCall2(jsonb_delete, JsonbPGetDatum(payload),
																	CStringGetTextDatum("fallback"))) :
								 payload,
								 kind, type.apns_topics, type.fcm_topics);

	if (type.has_deadline)
	{
		deadline_at = DirectFunctionCall2(timestamptz_pl_interval,
										  TimestampTzGetDatum(now),
										  IntervalPGetDatum(&type.deadline));
		if (next_at > DatumGetTimestampTz(deadline_at))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("not_before is after the deadline of notification type \"%s\"", kind),
					 errdetail("not_before is %s; the deadline is %s.",
							   timestamptz_to_str(next_at),
							   timestamptz_to_str(DatumGetTimestampTz(deadline_at)))));
	}
	else
		nulls[NOTIF_FAST_DEADLINE_AT] = 'n';

	values[NOTIF_FAST_USER_ID] = Int64GetDatum(user_id);
	values[NOTIF_FAST_KIND] = CStringGetTextDatum(kind);
	values[NOTIF_FAST_ORDER_ID] = PointerGetDatum(cstring_to_text(order_id));
	values[NOTIF_FAST_PAYLOAD] = JsonbPGetDatum(payload);
	values[NOTIF_FAST_NEXT_AT] = TimestampTzGetDatum(next_at);
	values[NOTIF_FAST_DEADLINE_AT] = deadline_at;

	if (notif_fast_usable(nspid))
	{
		bool		isnull[NOTIF_FAST_NCOLS] = {0};
		bool		inserted;

		isnull[NOTIF_FAST_DEADLINE_AT] = (nulls[NOTIF_FAST_DEADLINE_AT] == 'n');
		isnull[NOTIF_FAST_TRACEPARENT] = (nulls[NOTIF_FAST_TRACEPARENT] == 'n');
		id = notif_fast_insert(values, isnull, &inserted);
	}
	else
		id = enqueue_spi(nspid, values, nulls, user_id, kind, order_id);

	/* the lane's sender is woken when (and if) this transaction commits */
	notif_wake_lane_at_commit(type.lane);

	PG_RETURN_INT64(id);
}

/*
 * The SPI path: for a notif_job the fast path does not serve (see
 * enqueue/fast.c), one prepared INSERT ... ON CONFLICT DO NOTHING.
 */
static int64
enqueue_spi(Oid nspid, Datum *values, char *nulls, int64 user_id,
			const char *kind, const char *order_id)
{
	int64		id = 0;
	bool		found = false;
	int			loops;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (insert_plan == NULL || plans_nspid != nspid)
		prepare_plans(nspid);

	/*
	 * Insert; on a conflict read the existing row's id.  The row can vanish
	 * between the two (retention purge, an operator's DELETE), hence the loop.
	 */
	for (loops = 0; loops < ENQUEUE_MAX_LOOPS && !found; loops++)
	{
		int			ret;
		bool		isnull;

		/* no row limit: a limited run would skip AFTER STATEMENT triggers */
		ret = SPI_execute_plan(insert_plan, values, nulls, false, 0);
		if (ret != SPI_OK_INSERT_RETURNING)
			elog(ERROR, "notif_job insert failed: %s", SPI_result_code_string(ret));
		if (SPI_processed == 0)
		{
			ret = SPI_execute_plan(select_plan, values, NULL, false, 1);
			if (ret != SPI_OK_SELECT)
				elog(ERROR, "notif_job lookup failed: %s", SPI_result_code_string(ret));
		}
		if (SPI_processed == 1)
		{
			id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											 SPI_tuptable->tupdesc, 1, &isnull));
			found = true;
		}
	}
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not enqueue notification (" INT64_FORMAT ", %s, %s): its key keeps vanishing",
						user_id, kind, order_id)));

	SPI_finish();
	return id;
}

/* notif_enqueue(user_id bigint, kind text, order_id text, payload jsonb, not_before timestamptz, traceparent text) */
Datum
notif_enqueue(PG_FUNCTION_ARGS)
{
	return enqueue_internal(fcinfo, PG_ARGISNULL(2) ? NULL : PG_GETARG_TEXT_PP(2));
}

/* notif_enqueue(user_id bigint, kind text, order_id bigint, payload jsonb, not_before timestamptz, traceparent text) */
Datum
notif_enqueue_bigint(PG_FUNCTION_ARGS)
{
	text	   *order_id = NULL;

	if (!PG_ARGISNULL(2))
		order_id = cstring_to_text(DatumGetCString(DirectFunctionCall1(int8out,
																	   PG_GETARG_DATUM(2))));
	return enqueue_internal(fcinfo, order_id);
}
