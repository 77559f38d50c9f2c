/*-------------------------------------------------------------------------
 *
 * type_cache.c
 *      A per-session cache of notif_type, so that notif_enqueue does not
 *      query notif_type on every call.
 *
 * The statement trigger notif_config_changed() on notif_type sends a relcache
 * invalidation for the table; PostgreSQL delivers it to every session when
 * the change commits (and to the changing session at once), and our relcache
 * callback then forgets the whole cache.  Rows changed by a transaction that
 * rolls back are forgotten too, which is merely a re-read.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "core/notif_deliver.h"
#include "enqueue/enqueue.h"
#include "push/push.h"

#define TYPE_CODE_MAXLEN	NAMEDATALEN * 2

typedef struct NotifTypeCacheEntry
{
	char		code[TYPE_CODE_MAXLEN];	/* hash key */
	bool		exists;
	NotifTypeInfo info;
} NotifTypeCacheEntry;

static HTAB *type_cache = NULL;
static MemoryContext type_cache_cxt = NULL; /* the entries' apns_topics */
static bool type_cache_valid = false;
static bool callback_registered = false;
static Oid	cached_nspid = InvalidOid;
static Oid	cached_relid = InvalidOid;
static Oid	cached_provider_relid = InvalidOid;
static SPIPlanPtr lookup_plan = NULL;
static bool lookup_plan_topics = false; /* it reads notif_provider.apns_topics */

static void
type_cache_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == cached_relid || relid == cached_provider_relid)
		type_cache_valid = false;
}

/*
 * Make the cache empty and tied to schema nspid.
 */
static void
type_cache_reset(Oid nspid)
{
	HASHCTL		ctl;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(type_cache_invalidate, (Datum) 0);
		callback_registered = true;
	}

	if (type_cache)
		hash_destroy(type_cache);
	if (type_cache_cxt == NULL)
		type_cache_cxt = AllocSetContextCreate(CacheMemoryContext, "notif_deliver type cache",
											   ALLOCSET_SMALL_SIZES);
	else
		MemoryContextReset(type_cache_cxt);
	ctl.keysize = TYPE_CODE_MAXLEN;
	ctl.entrysize = sizeof(NotifTypeCacheEntry);
	type_cache = hash_create("notif_deliver type cache", 64, &ctl,
							 HASH_ELEM | HASH_STRINGS);

	if (nspid != cached_nspid && lookup_plan)
	{
		SPI_freeplan(lookup_plan);
		lookup_plan = NULL;
	}
	cached_nspid = nspid;
	cached_relid = get_relname_relid("notif_type", nspid);
	cached_provider_relid = get_relname_relid("notif_provider", nspid);
	type_cache_valid = true;
}

/*
 * The lookup plan, prepared once per session (connected to SPI), and again
 * when notif_provider gains apns_topics (1.4): until the update, an older
 * schema's enqueue reads none.
 */
static SPIPlanPtr
get_lookup_plan(Oid nspid)
{
	bool		topics = OidIsValid(cached_provider_relid) &&
		get_attnum(cached_provider_relid, "apns_topics") != InvalidAttrNumber;

	if (lookup_plan && lookup_plan_topics != topics)
	{
		SPI_freeplan(lookup_plan);
		lookup_plan = NULL;
	}
	if (lookup_plan == NULL)
	{
		Oid			argtypes[1] = {TEXTOID};
		SPIPlanPtr	plan;

		plan = SPI_prepare(notif_qualified_sql(nspid,
											   topics
											   ? "SELECT t.deadline, t.lane, p.format, p.apns_topics"
											   "  FROM %s.notif_type t JOIN %s.notif_provider p"
											   "    ON p.name OPERATOR(pg_catalog.=) t.provider"
											   " WHERE t.code OPERATOR(pg_catalog.=) $1"
											   : "SELECT t.deadline, t.lane, p.format, NULL::pg_catalog.text[]"
											   "  FROM %s.notif_type t JOIN %s.notif_provider p"
											   "    ON p.name OPERATOR(pg_catalog.=) t.provider"
											   " WHERE t.code OPERATOR(pg_catalog.=) $1"),
						   1, argtypes);
		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed");
		lookup_plan = plan;
		lookup_plan_topics = topics;
	}
	return lookup_plan;
}

/*
 * Look up notification type "code" of the extension in schema nspid.
 * Returns false when there is no such type.  Queries (through SPI) only
 * when the session's cache does not know the type.
 */
bool
notif_type_lookup(Oid nspid, const char *code, NotifTypeInfo *info)
{
	NotifTypeCacheEntry *entry;
	bool		found;

	/* codes this long cannot be cached; they are looked up every time */
	if (strlen(code) >= TYPE_CODE_MAXLEN)
		entry = NULL;
	else
	{
		if (!type_cache_valid || nspid != cached_nspid)
			type_cache_reset(nspid);
		entry = hash_search(type_cache, code, HASH_FIND, &found);
		if (found)
		{
			*info = entry->info;
			if (info->apns_topics)
				info->apns_topics = DatumGetArrayTypePCopy(PointerGetDatum(info->apns_topics));
			return entry->exists;
		}
	}

	{
		Datum		values[1] = {CStringGetTextDatum(code)};
		bool		exists;
		NotifTypeInfo fresh = {0};
		int			ret;

		if (nspid != cached_nspid)
			type_cache_reset(nspid);
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		ret = SPI_execute_plan(get_lookup_plan(nspid), values, NULL, true, 1);
		if (ret != SPI_OK_SELECT)
			elog(ERROR, "notif_type lookup failed: %s", SPI_result_code_string(ret));

		exists = (SPI_processed == 1);
		if (exists)
		{
			bool		isnull;
			Datum		d = SPI_getbinval(SPI_tuptable->vals[0],
										  SPI_tuptable->tupdesc, 1, &isnull);

			fresh.has_deadline = !isnull;
			if (!isnull)
				fresh.deadline = *DatumGetIntervalP(d);
			d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
			text_to_cstring_buffer(DatumGetTextPP(d), fresh.lane, sizeof(fresh.lane));
			d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull);
			fresh.format = notif_format_from_string(TextDatumGetCString(d));
			d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull);
			if (!isnull)
			{
				/* in the caller's memory, which SPI_finish keeps */
				ArrayType  *a = DatumGetArrayTypeP(d);

				fresh.apns_topics = SPI_palloc(VARSIZE(a));
				memcpy(fresh.apns_topics, a, VARSIZE(a));
			}
		}
		SPI_finish();

		/* the lookup may have processed an invalidation: recheck */
		if (strlen(code) < TYPE_CODE_MAXLEN && type_cache_valid)
		{
			entry = hash_search(type_cache, code, HASH_ENTER, &found);
			entry->exists = exists;
			entry->info = fresh;
			if (fresh.apns_topics)
			{
				entry->info.apns_topics = MemoryContextAlloc(type_cache_cxt,
															 VARSIZE(fresh.apns_topics));
				memcpy(entry->info.apns_topics, fresh.apns_topics, VARSIZE(fresh.apns_topics));
			}
		}
		*info = fresh;
		return exists;
	}
}
