/*-------------------------------------------------------------------------
 *
 * throttle.h
 *      Per-provider limits shared by all lanes (throttle.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_THROTTLE_H
#define NOTIF_THROTTLE_H

#include "delivery.h"

extern int	notif_throttle_acquire(const NotifProviderConf *provider, int want,
								   TimestampTz now, TimestampTz *retry_at, int *slot_out);
extern void notif_throttle_release(int slot, int n, bool unused);
extern void notif_throttle_release_all(void);
extern void notif_throttle_pause(int slot, TimestampTz until);

#endif							/* NOTIF_THROTTLE_H */
