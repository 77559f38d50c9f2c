/*-------------------------------------------------------------------------
 *
 * enqueue.h
 *      What notif_enqueue needs of a type, cached per session
 *      (enqueue/type_cache.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_ENQUEUE_H
#define NOTIF_ENQUEUE_H

#include "utils/array.h"

#include "core/shared.h"

typedef struct NotifTypeInfo
{
	bool		has_deadline;
	Interval	deadline;
	char		lane[NOTIF_NAME_MAXLEN];
	int			format;			/* NotifFormat of its provider (push rules) */
	ArrayType  *apns_topics;	/* its provider's apns_topics, or NULL: any
								 * (in the caller's memory context) */
	ArrayType  *fcm_topics;		/* its provider's fcm_topics, or NULL: any
								 * target (in the caller's memory context) */
	bool		has_fallback;	/* a fallback_type: the payload's "fallback"
								 * member is not sent with its calls */
} NotifTypeInfo;

extern bool notif_type_lookup(Oid nspid, const char *code, NotifTypeInfo *info);

#endif							/* NOTIF_ENQUEUE_H */
