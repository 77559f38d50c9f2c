/*-------------------------------------------------------------------------
 *
 * notif_deliver.h
 *      Declarations shared by the files of the notif_deliver extension.
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_DELIVER_H
#define NOTIF_DELIVER_H

#include "postgres.h"

#include "datatype/timestamp.h"

/* guc.c */
extern int	notif_max_payload_size;

extern void notif_define_gucs(void);

/* type_cache.c */
typedef struct NotifTypeInfo
{
	bool		has_deadline;
	Interval	deadline;
} NotifTypeInfo;

extern bool notif_type_lookup(Oid nspid, const char *code, NotifTypeInfo *info);

/* quoting helper for the SQL of a given schema */
extern char *notif_qualified_sql(Oid nspid, const char *fmt);

#endif							/* NOTIF_DELIVER_H */
