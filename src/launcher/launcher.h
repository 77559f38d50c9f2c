/*-------------------------------------------------------------------------
 *
 * launcher.h
 *      The launcher's entry points: registered by the module's _PG_init,
 *      started by the postmaster.
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_LAUNCHER_H
#define NOTIF_LAUNCHER_H

#include "core/shared.h"

extern void notif_register_launcher(void);
extern PGDLLEXPORT void notif_launcher_main(Datum arg);
extern void notif_launcher_connect(void);	/* connect.c */

/* launcher/promotion.c */
extern int64 notif_incarnation_floor(void);
extern bool notif_wait_for_promotion(void);

#endif							/* NOTIF_LAUNCHER_H */
