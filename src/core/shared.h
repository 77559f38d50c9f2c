/*-------------------------------------------------------------------------
 *
 * core/shared.h
 *      What every process of notif_deliver shares: its limits and schema
 *      version, its settings (guc.c), and the shared memory of lanes and
 *      providers with the calls that use it (shmem.c, wake.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_SHARED_H
#define NOTIF_SHARED_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"

#define NOTIF_EXTENSION_NAME	"notif_deliver"
#define NOTIF_NAME_MAXLEN		64	/* lane and provider names in shmem */
#define NOTIF_MAX_INFLIGHT_LIMIT	10000	/* notif_deliver.max_inflight's bound */

/*
 * The most sender slots notif_deliver.max_lanes allows (a lane takes one
 * per sender: its notif_lane.senders, else senders_per_lane).  Every array
 * with an entry per sender slot is sized by it: were one smaller, live
 * senders would look dead and their jobs be "recovered" and sent again.
 */
#define NOTIF_MAX_LANES_LIMIT	256
#define NOTIF_MAX_SENDERS_PER_LANE	16	/* notif_deliver.senders_per_lane's bound */
#define NOTIF_MAX_PROVIDERS_LIMIT	4096	/* notif_deliver.max_providers' bound */

/*
 * The extension version whose schema this library's workers need.  Until
 * ALTER EXTENSION ... UPDATE brings an older installation to it, nothing is
 * sent (enqueueing goes on).
 */
#define NOTIF_SCHEMA_VERSION	"1.4"

/*
 * The launcher's and the senders' lock_timeout.  Their statements pass
 * over rows another session has locked (SKIP LOCKED); a lock they still
 * wait for (a table's, during DDL or notif_active_rebuild()) fails the
 * round after this long, logged once and tried again with backoff, so
 * that neither waits unboundedly, unable to see SIGTERM meanwhile.
 */
#define NOTIF_LOCK_TIMEOUT		"1s"

/* guc.c */
extern int	notif_max_payload_size;
extern char *notif_database;
extern bool notif_enabled;
extern int	notif_max_inflight;
extern int	notif_batch_size;
extern int	notif_poll_interval_ms;
extern int	notif_record_delay_ms;
extern int	notif_spare_connections_idle_ms;
extern int	notif_max_lanes;
extern int	notif_senders_per_lane;
extern int	notif_max_providers;
extern int	notif_purge_interval_ms;
extern int	notif_purge_batch_size;

extern void notif_define_gucs(void);
extern void notif_worker_settings(void);
extern int	notif_sender_share(int lane_limit, int senders);

/*
 * shmem.c: what the launcher, the senders and enqueuing sessions share.
 * lanes_lock guards the lane slots' identity (in_use, lane, pid, latch,
 * incarnation) and the launcher's pid and latch; providers_lock guards
 * the provider slots.  Counters are atomics, read and written without a
 * lock.  Neither lock is held across anything that can block or fail.
 */
#define NOTIF_RATE_SECONDS 60
#define NOTIF_UNSHARED_SHOWN 8	/* providers a lane lists as limited per lane */

/* what a process is doing, as notif_workers() shows it */
typedef enum NotifWorkerState
{
	WORKER_STARTING,
	WORKER_IDLE,				/* nothing due */
	WORKER_SENDING,				/* calls in flight, or claiming */
	WORKER_BACKING_OFF,			/* after an error, retrying soon */
	WORKER_DISABLED,			/* launcher: notif_deliver.enabled is off */
	WORKER_NOT_INSTALLED,		/* launcher: no extension in the database */
	WORKER_NEEDS_UPDATE,		/* launcher: ALTER EXTENSION ... UPDATE */
	WORKER_WAITING_SYNC_REP,	/* sender: a commit waits for the standby */
	WORKER_STANDBY				/* launcher: waits for the promotion */
} NotifWorkerState;
typedef struct NotifLaneSlot
{
	bool		in_use;			/* a lane is assigned to this slot */
	char		lane[NOTIF_NAME_MAXLEN];
	pid_t		pid;			/* its sender, 0 if none runs */
	Latch	   *latch;			/* its sender's latch, NULL if none runs */
	int64		incarnation;	/* its sender's incarnation, 0 if none */
	pg_atomic_uint32 inflight;	/* calls in flight */
	pg_atomic_uint64 sent;		/* calls ended, since the slot was assigned */
	pg_atomic_uint32 state;		/* NotifWorkerState */
	pg_atomic_uint32 retire;	/* 1: claim no more, end the calls, exit */
	pg_atomic_uint64 config_seen;	/* the configuration generation it read */
	/* jobs sent, per second of the last minute (written by the sender) */
	pg_atomic_uint64 sent_second[NOTIF_RATE_SECONDS];	/* which second */
	pg_atomic_uint32 sent_count[NOTIF_RATE_SECONDS];	/* how many in it */
	/* providers with no shared slot, limited in this lane only (throttle.c) */
	int			n_unshared;		/* under lanes_lock */
	char		unshared[NOTIF_UNSHARED_SHOWN][NOTIF_NAME_MAXLEN];
} NotifLaneSlot;

/*
 * A provider's circuit breaker (sender/breaker.c), in its provider slot:
 * closed (calls go), open (no call starts until probe_at), or half-open
 * (the cooldown passed; one probe call, given up at probe_until, decides).
 */
typedef enum NotifBreakerState
{
	BREAKER_CLOSED,
	BREAKER_OPEN,
	BREAKER_HALF_OPEN
} NotifBreakerState;

#define NOTIF_BREAKER_ERROR_LEN	128	/* "HTTP 503", or the transport's error cut here */

typedef struct NotifBreaker
{
	NotifBreakerState state;
	TimestampTz since;			/* when it last opened from closed, or closed;
								 * 0: closed since the slot was taken */
	TimestampTz probe_at;		/* open: when the probe may go */
	TimestampTz probe_until;	/* half-open: the probe is given up after this */
	int			failures;		/* consecutive calls that said the provider is down */
	int64		refused;		/* calls it refused while open, since the slot was taken */
	char		last_error[NOTIF_BREAKER_ERROR_LEN];	/* of the last such call */
} NotifBreaker;

/* a provider's limits shared by all lanes (throttle.c), under providers_lock */
typedef struct NotifProviderSlot
{
	bool		in_use;
	char		name[NOTIF_NAME_MAXLEN];
	int			senders;		/* attachments: lane types that use it */
	int			inflight;		/* calls in flight, all lanes */
	double		tokens;			/* rate limit bucket */
	TimestampTz refilled_at;
	TimestampTz paused_until;	/* after a 429 with Retry-After */
	bool		starved;		/* a lane found no room: wake senders on release */
	NotifBreaker breaker;		/* its circuit breaker (sender/breaker.c) */
} NotifProviderSlot;

typedef struct NotifShared
{
	LWLock	   *lanes_lock;
	LWLock	   *providers_lock;
	pid_t		launcher_pid;
	Latch	   *launcher_latch;
	pg_atomic_uint32 launcher_state;	/* NotifWorkerState */
	pg_atomic_uint64 launcher_config_seen;	/* the generation it acted on */
	pg_atomic_uint64 config_generation;	/* bumped by each config commit */
	pg_atomic_uint64 next_incarnation;
	/* the launcher's alone (launcher/connect.c) */
	bool		launcher_connecting;	/* set while it connects */
	int			launcher_connect_failures;	/* launchers in a row that died connecting */
	NotifLaneSlot lanes[FLEXIBLE_ARRAY_MEMBER];	/* notif_max_lanes of them */
	/* then notif_max_providers NotifProviderSlots: notif_providers */
} NotifShared;

extern NotifShared *notif_shared;
extern NotifProviderSlot *notif_providers;

extern void notif_shmem_request(void);
extern void notif_shmem_attach(void);
extern int64 notif_new_incarnation(void);
extern void notif_raise_incarnation(int64 floor);
extern void notif_wake_lane(const char *lane);
extern void notif_wake_all(void);
extern void notif_wake_senders(void);
extern int	notif_live_incarnations(int64 out[NOTIF_MAX_LANES_LIMIT]);
extern int	notif_lane_senders(const char *lane);
extern void notif_count_sent(NotifLaneSlot *lane, int n);
extern uint64 notif_sent_last_minute(NotifLaneSlot *lane);

/* wake.c: wake-ups at commit */
extern void notif_wake_lane_at_commit(const char *lane);
extern void notif_config_changed_at_commit(void);

/* catalog.c */
extern char *notif_qualified_sql(Oid nspid, const char *fmt);
extern Oid	notif_extension_schema(Oid extoid, char **version);

#endif							/* NOTIF_SHARED_H */
