/*-------------------------------------------------------------------------
 *
 * catalog.c
 *      The extension as the catalogs know it: the schema (and version) it
 *      is installed in, and SQL text naming its objects in that schema.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "core/shared.h"

/*
 * Expand every "%s" of fmt into the quoted name of schema nspid, so that the
 * SQL of a prepared plan names the extension's objects whatever the caller's
 * search_path (the SQL also spells its operators OPERATOR(pg_catalog.=):
 * SECURITY DEFINER code must not resolve a name through the caller's path).
 * The result is palloc'd in the current memory context.
 */
char *
notif_qualified_sql(Oid nspid, const char *fmt)
{
	const char *nsp = quote_identifier(get_namespace_name(nspid));
	StringInfoData buf;
	const char *p;

	initStringInfo(&buf);
	for (p = fmt; *p; p++)
	{
		if (p[0] == '%' && p[1] == 's')
		{
			appendStringInfoString(&buf, nsp);
			p++;
		}
		else
			appendStringInfoChar(&buf, *p);
	}
	return buf.data;
}

/*
 * The schema of an installed extension (get_extension_schema() is not
 * exported before PostgreSQL 16) and, if version is not NULL, its version
 * (palloc'd).
 */
Oid
notif_extension_schema(Oid extoid, char **version)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	Oid			result = InvalidOid;

	if (version)
		*version = NULL;
	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(extoid));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		result = ((Form_pg_extension) GETSTRUCT(tuple))->extnamespace;
		if (version)
		{
			bool		isnull;
			Datum		d = heap_getattr(tuple, Anum_pg_extension_extversion,
										 RelationGetDescr(rel), &isnull);

			if (!isnull)
				*version = TextDatumGetCString(d);
		}
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return result;
}
