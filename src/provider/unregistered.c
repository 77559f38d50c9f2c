/*-------------------------------------------------------------------------
 *
 * provider/unregistered.c
 *      The SQL of push: the dead device tokens of a round's finished calls
 *      (FCM 404 UNREGISTERED, APNs 410 Unregistered, 400 BadDeviceToken)
 *      into notif_unregistered_token, which notif_unregistered shows.  Run
 *      in the sender's round transaction, after the results are recorded,
 *      and only for jobs that the record left 'failed' (a stale result
 *      lists nothing).  Rare, so not a kept plan.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "core/shared.h"
#include "provider/push.h"

static const char *const sql_unregistered =
"INSERT INTO %s.notif_unregistered_token (job_id, kind, user_id, token, reason, reported_at)"
" SELECT j.id, j.kind, j.user_id, u.token, u.reason, u.reported_at"
"   FROM unnest($1::int8[], $2::text[], $3::text[], $4::timestamptz[])"
"        AS u(id, token, reason, reported_at)"
"   JOIN %s.notif_job j ON j.id = u.id AND j.status = 'failed'"
" ON CONFLICT (job_id) DO UPDATE"
"    SET token = excluded.token, reason = excluded.reason, reported_at = excluded.reported_at";

static Datum
array_of(Datum *elems, int n, Oid elemtype)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;

	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	return PointerGetDatum(construct_array(elems, n, elemtype, typlen, typbyval, typalign));
}

void
notif_push_record_unregistered(dlist_head *finished)
{
	dlist_iter	iter;
	int			n = 0;
	Datum	   *ids,
			   *tokens,
			   *reasons,
			   *ats;
	Datum		values[4];
	Oid			types[4] = {INT8ARRAYOID, TEXTARRAYOID, TEXTARRAYOID, TIMESTAMPTZARRAYOID};
	Oid			ext;
	char	   *version;
	int			ret;

	dlist_foreach(iter, finished)
	{
		NotifCall  *call = dlist_container(NotifCall, node, iter.cur);

		if (call->unregistered)
			n++;
	}
	if (n == 0)
		return;
	ids = palloc(sizeof(Datum) * n);
	tokens = palloc(sizeof(Datum) * n);
	reasons = palloc(sizeof(Datum) * n);
	ats = palloc(sizeof(Datum) * n);
	n = 0;
	dlist_foreach(iter, finished)
	{
		NotifCall  *call = dlist_container(NotifCall, node, iter.cur);

		if (!call->unregistered)
			continue;
		ids[n] = Int64GetDatum(call->job.id);
		tokens[n] = CStringGetTextDatum(call->push_token);
		reasons[n] = CStringGetTextDatum(call->reason ? call->reason : "?");
		ats[n] = TimestampTzGetDatum(call->unregistered_at);
		n++;
	}
	values[0] = array_of(ids, n, INT8OID);
	values[1] = array_of(tokens, n, TEXTOID);
	values[2] = array_of(reasons, n, TEXTOID);
	values[3] = array_of(ats, n, TIMESTAMPTZOID);

	ext = get_extension_oid(NOTIF_EXTENSION_NAME, false);
	ret = SPI_execute_with_args(notif_qualified_sql(notif_extension_schema(ext, &version),
													sql_unregistered),
								4, types, values, NULL, false, 0);
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "notif_deliver: recording unregistered tokens failed: %s",
			 SPI_result_code_string(ret));
}
