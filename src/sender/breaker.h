/*-------------------------------------------------------------------------
 *
 * breaker.h
 *      A provider's circuit breaker, shared by all lanes (breaker.c): the
 *      claim asks whether its jobs may be claimed, a call whether it may
 *      start, and every call that ended says what it found.
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_BREAKER_H
#define NOTIF_BREAKER_H

#include "lifecycle/delivery.h"

/* what a claim may do for a provider's jobs */
typedef enum NotifBreakerAdmit
{
	BREAKER_CALLS,				/* closed (or no breaker): claim as usual */
	BREAKER_PROBE_DUE,			/* its cooldown passed: one job may probe it */
	BREAKER_WAITS				/* open: its jobs wait (the late ones expire) */
} NotifBreakerAdmit;

extern NotifBreakerAdmit notif_breaker_admit(const NotifProviderConf *provider, TimestampTz now,
											 TimestampTz *until);
extern bool notif_breaker_take_probe(const NotifProviderConf *provider, TimestampTz now);
extern void notif_breaker_probe_unused(int throttle, bool none_due);
extern bool notif_breaker_may_call(const NotifCall *call, TimestampTz now, int64 *wait_ms);
extern void notif_breaker_record(const NotifCall *call, TimestampTz now);
extern bool notif_call_says_down(const NotifCall *call);

#endif							/* NOTIF_BREAKER_H */
