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

#include "core/notif_deliver.h"

extern void notif_register_launcher(void);
extern PGDLLEXPORT void notif_launcher_main(Datum arg);
extern void notif_launcher_connect(void);	/* connect.c */

#endif							/* NOTIF_LAUNCHER_H */
