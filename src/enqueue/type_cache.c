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

#include "core/shared.h"
#include "enqueue/enqueue.h"
#include "provider/push.h"

#define TYPE_CODE_MAXLEN	NAMEDATALEN * 2

typedef struct NotifTypeCacheEntry
{
	char		code[TYPE_CODE_MAXLEN];	/* hash key */
	bool		exists;
	NotifTypeInfo info;
} NotifTypeCacheEntry;

static HTAB *type_cache = NULL;
static MemoryContext type_cache_cxt = NULL; /* the entries' topics */
static bool type_cache_valid = false;
static bool callback_registered = false;
static Oid	cached_nspid = InvalidOid;
static Oid	cached_relid = InvalidOid;
static Oid	cached_provider_relid = InvalidOid;
static SPIPlanPtr lookup_plan = NULL;
static bool lookup_plan_apns = false;	/* it reads notif_provider.apns_topics */
static bool lookup_plan_fcm = false;	/* and fcm_topics */
static bool lookup_plan_fallback = false;	/* and notif_type.fallback_type */

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

/* whether the type table has this column (an older schema has not) */
static bool
type_has(const char *column)
{
	return OidIsValid(cached_relid) && get_attnum(cached_relid, column) != InvalidAttrNumber;
}

/* whether the provider table has this column (an older schema has not) */
static bool
provider_has(const char *column)
{
	return OidIsValid(cached_provider_relid) &&
		get_attnum(cached_provider_relid, column) != InvalidAttrNumber;
}

/*
 * The lookup plan, prepared once per session (connected to SPI), and again
 * when notif_provider gains apns_topics or fcm_topics (1.4): until the
 * update, an older schema's enqueue reads none.
 */
static SPIPlanPtr
get_lookup_plan(Oid nspid)
{
	bool		apns = provider_has("apns_topics");
	bool		fcm = provider_has("fcm_topics");
	bool		fallback = type_has("fallback_type");

	if (lookup_plan && (lookup_plan_apns != apns || lookup_plan_fcm != fcm ||
						lookup_plan_fallback != fallback))
	{
		SPI_freeplan(lookup_plan);
		lookup_plan = NULL;
	}
	if (lookup_plan == NULL)
	{
		Oid			argtypes[1] = {TEXTOID};
		SPIPlanPtr	plan;

		/* each %%s becomes %s, the schema notif_qualified_sql puts in */
		plan = SPI_prepare(notif_qualified_sql(nspid,
											   psprintf("SELECT t.deadline, t.lane, p.format, %s, %s, %s"
														"  FROM %%s.notif_type t JOIN %%s.notif_provider p"
														"    ON p.name OPERATOR(pg_catalog.=) t.provider"
														" WHERE t.code OPERATOR(pg_catalog.=) $1",
														apns ? "p.apns_topics" : "NULL::pg_catalog.text[]",
														fcm ? "p.fcm_topics" : "NULL::pg_catalog.text[]",
														fallback ? "t.fallback_type IS NOT NULL" : "false")),
						   1, argtypes);
		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed");
		lookup_plan = plan;
		lookup_plan_apns = apns;
		lookup_plan_fcm = fcm;
		lookup_plan_fallback = fallback;
	}
	return lookup_plan;
}

/* a copy of array a (NULL: NULL) in cxt */
static ArrayType *
copy_array(ArrayType *a, MemoryContext cxt)
{
	ArrayType  *copy;

	if (a == NULL)
		return NULL;
	copy = MemoryContextAlloc(cxt, VARSIZE(a));
	memcpy(copy, a, VARSIZE(a));
	return copy;
}

/* column col of the lookup's row, an array or NULL, copied with SPI_palloc */
static ArrayType *
spi_array(int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col, &isnull);
	ArrayType  *a;
	ArrayType  *copy;

	if (isnull)
		return NULL;
	a = DatumGetArrayTypeP(d);
	copy = SPI_palloc(VARSIZE(a));
	memcpy(copy, a, VARSIZE(a));
	return copy;
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
			info->apns_topics = copy_array(info->apns_topics, CurrentMemoryContext);
			info->fcm_topics = copy_array(info->fcm_topics, CurrentMemoryContext);
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
			/* in the caller's memory, which SPI_finish keeps */
			fresh.apns_topics = spi_array(4);
			fresh.fcm_topics = spi_array(5);
			d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 6, &isnull);
			fresh.has_fallback = !isnull && DatumGetBool(d);
		}
		SPI_finish();

		/* the lookup may have processed an invalidation: recheck */
		if (strlen(code) < TYPE_CODE_MAXLEN && type_cache_valid)
		{
			entry = hash_search(type_cache, code, HASH_ENTER, &found);
			entry->exists = exists;
			entry->info = fresh;
			entry->info.apns_topics = copy_array(fresh.apns_topics, type_cache_cxt);
			entry->info.fcm_topics = copy_array(fresh.fcm_topics, type_cache_cxt);
		}
		*info = fresh;
		return exists;
	}
}
