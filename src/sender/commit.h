/*-------------------------------------------------------------------------
 *
 * sender/commit.h
 *      A sender round's commit and the synchronous standby (commit.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_SENDER_COMMIT_H
#define NOTIF_SENDER_COMMIT_H

#include "core/shared.h"

extern void notif_sender_sigterm(SIGNAL_ARGS);
extern void notif_sender_sigint(SIGNAL_ARGS);
extern bool notif_commit_round(NotifLaneSlot *slot, bool stopping);

#endif							/* NOTIF_SENDER_COMMIT_H */
