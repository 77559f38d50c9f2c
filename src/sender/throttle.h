/*-------------------------------------------------------------------------
 *
 * throttle.h
 *      Per-provider limits shared by all lanes (throttle.c).  A sender
 *      attaches to the throttle of each provider its types use and gets a
 *      handle; calls are granted, released and paused through it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_THROTTLE_H
#define NOTIF_THROTTLE_H

#include "lifecycle/delivery.h"
#include "core/shared.h"

extern int	notif_throttle_attach(const char *provider, NotifLaneSlot *lane);
extern void notif_throttle_detach(int handle, NotifLaneSlot *lane);
extern int	notif_throttle_acquire(int handle, const NotifProviderConf *provider, int senders, int want,
								   TimestampTz now, TimestampTz *retry_at);
extern void notif_throttle_charge(int handle, const NotifProviderConf *provider, int senders,
								  TimestampTz now);
extern void notif_throttle_release(int handle, int n, bool unused);
extern void notif_throttle_pause(int handle, TimestampTz until);
extern void notif_throttle_release_all(NotifLaneSlot *lane);
extern NotifProviderSlot *notif_throttle_lock(int handle);
extern void notif_throttle_unlock(int handle);

#endif							/* NOTIF_THROTTLE_H */
