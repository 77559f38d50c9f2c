/*-------------------------------------------------------------------------
 *
 * ha.h
 *      Standbys and failover (ha.c): the round's commit and the synchronous
 *      standby, the launcher's wait for promotion, incarnation floors.
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_HA_H
#define NOTIF_HA_H

#include "core/notif_deliver.h"

extern void notif_sender_sigterm(SIGNAL_ARGS);
extern void notif_sender_sigint(SIGNAL_ARGS);
extern bool notif_commit_round(NotifLaneSlot *slot, bool stopping);
extern int64 notif_incarnation_floor(void);
extern bool notif_wait_for_promotion(void);

#endif							/* NOTIF_HA_H */
