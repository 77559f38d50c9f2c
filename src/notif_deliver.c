/*-------------------------------------------------------------------------
 *
 * notif_deliver.c
 *      Module entry point: defines the GUCs when the library is loaded and,
 *      when it is in shared_preload_libraries, the background workers.  The
 *      one file that may call any subsystem; nothing calls into it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"

#include "core/endpoint_rules.h"
#include "core/shared.h"
#include "launcher/launcher.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	notif_define_endpoint_gucs();
	notif_define_gucs();

	if (!process_shared_preload_libraries_in_progress)
		return;					/* enqueue works; nothing is sent */

	notif_shmem_request();

	/*
	 * pg_upgrade starts both clusters in binary upgrade mode, with the
	 * library preloaded: nothing may be claimed or sent then (the launcher
	 * starts when the upgraded cluster is started for use).
	 */
	if (IsBinaryUpgrade)
		return;
	notif_register_launcher();
}
