/*-------------------------------------------------------------------------
 *
 * guc.c
 *      The configuration parameters (GUCs) of notif_deliver, and the
 *      settings its workers set for themselves (notif_worker_settings).
 *
 * Every parameter is documented in doc/reference.md.  All but
 * notif_deliver.database and notif_deliver.max_lanes reload on SIGHUP.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/guc.h"

#include "core/shared.h"

int			notif_max_payload_size = 64 * 1024;
char	   *notif_database = NULL;
bool		notif_enabled = true;
int			notif_max_inflight = 256;
int			notif_batch_size = 100;
int			notif_poll_interval_ms = 10000;
int			notif_record_delay_ms = 2;
int			notif_spare_connections_idle_ms = 120 * 1000;
int			notif_max_lanes = 16;
int			notif_senders_per_lane = 1;
int			notif_max_providers = 64;
int			notif_purge_interval_ms = 60000;
int			notif_purge_batch_size = 10000;

/* read only by the notif_stats view (current_setting), never in C */
static int	notif_stats_window_s = 24 * 3600;
static int	notif_stats_dlr_grace_s = 600;
static int	notif_stats_min_sample = 100;

/*
 * One sender's share of a lane's limit when the lane has that many senders:
 * the limit over them, rounded down, so that together they stay within it,
 * but at least 1 (each must be able to work); 0 (no limit) stays 0.
 */
int
notif_sender_share(int lane_limit, int senders)
{
	if (lane_limit <= 0 || senders <= 1)
		return lane_limit;
	return Max(1, lane_limit / senders);
}

void
notif_define_gucs(void)
{
	DefineCustomIntVariable("notif_deliver.max_payload_size",
							"Largest payload notif_enqueue accepts.",
							"Measured as the size of the stored jsonb value.",
							&notif_max_payload_size,
							64 * 1024, 64, 16 * 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomStringVariable("notif_deliver.database",
							   "Database that holds the notif_deliver extension.",
							   "The launcher connects to it; set before the server starts.",
							   &notif_database,
							   "postgres",
							   PGC_POSTMASTER, 0,
							   NULL, NULL, NULL);

	DefineCustomBoolVariable("notif_deliver.enabled",
							 "Whether queued notifications are sent.",
							 "When off, the launcher stops every sender; jobs wait in the queue.",
							 &notif_enabled,
							 true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("notif_deliver.max_inflight",
							"Most provider calls in flight at once, per lane.",
							NULL,
							&notif_max_inflight,
							256, 1, NOTIF_MAX_INFLIGHT_LIMIT,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("notif_deliver.batch_size",
							"Most jobs a sender claims in one transaction.",
							NULL,
							&notif_batch_size,
							100, 1, 10000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("notif_deliver.record_delay",
							"Longest a sender waits for more calls to end before it records their results.",
							"Only while other calls are in flight and the sender was not woken by an enqueue; 0 records at once.",
							&notif_record_delay_ms,
							2, 0, 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("notif_deliver.spare_connections_idle",
							"How long a sender keeps the connections of a past peak without using them.",
							"Plain http connections beyond those of a lane's first 64 calls in flight, closed together after this long without a call.",
							&notif_spare_connections_idle_ms,
							120 * 1000, 1000, 24 * 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("notif_deliver.poll_interval",
							"How often an idle sender looks for due jobs without being woken.",
							"Enqueues wake senders at commit; this catches jobs inserted otherwise.",
							&notif_poll_interval_ms,
							10000, 100, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("notif_deliver.senders_per_lane",
							"Sender processes per lane.",
							"They claim the lane's due jobs side by side; the lane's max_inflight, and a provider's max_connections, are shared out between them.",
							&notif_senders_per_lane,
							1, 1, NOTIF_MAX_SENDERS_PER_LANE,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("notif_deliver.max_lanes",
							"Most sender processes at once: the senders of all lanes.",
							NULL,
							&notif_max_lanes,
							16, 1, NOTIF_MAX_LANES_LIMIT,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("notif_deliver.max_providers",
							"Most providers whose limits all lanes share.",
							"A provider in use beyond this has its max_inflight and rate_limit applied per lane (a warning says so).",
							&notif_max_providers,
							64, 1, NOTIF_MAX_PROVIDERS_LIMIT,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("notif_deliver.purge_interval",
							"How often finished jobs past their retention are deleted.",
							NULL,
							&notif_purge_interval_ms,
							60000, 1000, 24 * 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("notif_deliver.purge_batch_size",
							"Most jobs deleted in one purge transaction.",
							NULL,
							&notif_purge_batch_size,
							10000, 100, 1000000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	/* read by the notif_stats view, with these defaults if not loaded */
	DefineCustomIntVariable("notif_deliver.stats_window",
							"How far back notif_stats looks: jobs created since then.",
							NULL,
							&notif_stats_window_s,
							24 * 3600, 1, INT_MAX,
							PGC_USERSET, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("notif_deliver.stats_dlr_grace",
							"How long after a job's last call notif_stats waits for its delivery reports.",
							"Until then the job counts neither for q nor as lost.",
							&notif_stats_dlr_grace_s,
							600, 0, INT_MAX,
							PGC_USERSET, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("notif_deliver.stats_min_sample",
							"Fewest judged ambiguous attempts for notif_stats to show q.",
							NULL,
							&notif_stats_min_sample,
							100, 1, INT_MAX,
							PGC_USERSET, 0,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("notif_deliver");
}

/*
 * What the workers' transactions depend on, set over whatever the database
 * or its owner says (ALTER DATABASE ... SET, ALTER ROLE ... SET): a read-only
 * default, a statement or idle timeout, another isolation level or a
 * search_path would stop or misdirect delivery.  lock_timeout is theirs
 * (NOTIF_LOCK_TIMEOUT).
 */
void
notif_worker_settings(void)
{
	SetConfigOption("search_path", "pg_catalog", PGC_SUSET, PGC_S_OVERRIDE);
	/* a claim skips rows that others claimed meanwhile, never fails on them */
	SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_read_only", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("idle_in_transaction_session_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", NOTIF_LOCK_TIMEOUT, PGC_SUSET, PGC_S_OVERRIDE);
}
