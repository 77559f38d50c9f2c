/*-------------------------------------------------------------------------
 *
 * launcher/connect.c
 *      The launcher's connection to notif_deliver.database, with backoff.
 *      A database that does not exist (a typo in the setting, a DROP
 *      DATABASE) makes the connection fail with FATAL, and the postmaster
 *      starts the launcher again a second later: without this, a FATAL
 *      line a second, forever.  So before connecting, a launcher whose
 *      predecessor died connecting waits 1 s, doubling up to a minute;
 *      a reload (pg_reload_conf() once the database is created) ends the
 *      wait at once, and a connection that succeeds starts the count again
 *      (test/t/005_launcher.pl).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "core/shared.h"
#include "launcher/launcher.h"

#define CONNECT_BACKOFF_MIN_MS	1000
#define CONNECT_BACKOFF_MAX_MS	60000

void
notif_launcher_connect(void)
{
	if (notif_shared->launcher_connecting)
	{
		/* the last launcher died connecting: wait before this try */
		int			failures = ++notif_shared->launcher_connect_failures;
		long		delay = Min((long) CONNECT_BACKOFF_MAX_MS,
								(long) CONNECT_BACKOFF_MIN_MS << Min(failures - 1, 6));
		TimestampTz until;
		long		left;

		if (failures == 1)
			ereport(LOG,
					(errmsg("notif_deliver launcher could not connect to database \"%s\"; trying again with backoff",
							notif_database),
					 errhint("Create the database notif_deliver.database names (then pg_reload_conf() tries again at once), or set the setting and restart the server.")));
		until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), delay);
		while ((left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), until)) > 0)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 left, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			if (ShutdownRequestPending)
				proc_exit(0);
			if (ConfigReloadPending)
			{
				ConfigReloadPending = false;
				ProcessConfigFile(PGC_SIGHUP);
				break;
			}
		}
	}
	notif_shared->launcher_connecting = true;
	BackgroundWorkerInitializeConnection(notif_database, NULL, 0);
	notif_shared->launcher_connecting = false;
	notif_shared->launcher_connect_failures = 0;
}
