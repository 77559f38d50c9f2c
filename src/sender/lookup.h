/*-------------------------------------------------------------------------
 *
 * sender/lookup.h
 *      The provider's status lookup asked before an at_least_once retry
 *      (sender/lookup.c; the wire: provider/lookup.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_LOOKUP_H
#define NOTIF_LOOKUP_H

#include "lifecycle/delivery.h"

extern bool sender_lookup_start(NotifCall *call, TimestampTz now);
extern NotifCall *sender_lookup_next_answered(void);
extern int	sender_lookups_asking(void);

#endif							/* NOTIF_LOOKUP_H */
