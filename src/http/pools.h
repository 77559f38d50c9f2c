/*-------------------------------------------------------------------------
 *
 * http/pools.h
 *      A sender's libcurl connection pools (http/pools.c), for its event
 *      loop (http.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_HTTP_POOLS_H
#define NOTIF_HTTP_POOLS_H

#include "lifecycle/delivery.h"
#include "core/shared.h"

typedef struct HttpPool
{
	int			index;			/* in the pools: events and calls carry it */
	char		provider[NOTIF_NAME_MAXLEN];	/* "": a plain-http pool */
	CURLM	   *multi;			/* NULL: closed (a spare plain pool, or a
								 * provider's that left the lane) */
	TimestampTz timer_at;		/* 0: no libcurl timer pending */
	long		max_connections;	/* 0: no cap */
	bool		http1_seen;		/* answered over HTTP/1.x: cap lifted */
	bool		h2_seen;		/* answered over HTTP/2 */
	/* the slow start over HTTP/1.x (http/ramp.c) */
	int			ramp;			/* calls it may have at once */
	int			ramp_credit;	/* calls started while over half of it was used */
	TimestampTz ramp_cut_at;	/* when a failed connect last cut it */
	TimestampTz last_answer_at; /* of a job's call; 0: none yet */
	uint32		url_hash;		/* of its provider's url; 0: not known yet */
	int			calls;			/* transfers in it now */
	TimestampTz unused_since;	/* calls fell to 0 then; 0: in use, or closed */
	bool		retired;		/* its provider left the lane: closes when unused */
} HttpPool;

extern bool notif_pools_init(void);
extern int	notif_pools_count(void);
extern HttpPool *notif_pool(int i);
extern HttpPool *notif_pool_for(NotifCall *call);
extern void notif_pool_enter(HttpPool *pool, bool job_call);
extern void notif_pool_leave(HttpPool *pool, TimestampTz when);
extern int	notif_pool_room(const char *provider, const char *url, int max_connections);

/* ramp.c */
extern void notif_ramp_forget(HttpPool *pool);
extern void notif_ramp_enter(HttpPool *pool, bool job_call, TimestampTz now);
extern void notif_ramp_answered(HttpPool *pool, long http_version, TimestampTz when);
extern void notif_ramp_failed(HttpPool *pool, bool sent, TimestampTz when);
extern int	notif_ramp_room(HttpPool *pool, uint32 url_hash, TimestampTz now);
extern TimestampTz notif_pools_next_at(void);
extern void notif_pools_close_unused(TimestampTz now);
extern void notif_pools_keep_only(const NotifTypeConf *types, int n);

#endif							/* NOTIF_HTTP_POOLS_H */
