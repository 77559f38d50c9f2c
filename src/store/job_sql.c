/*-------------------------------------------------------------------------
 *
 * job_sql.c
 *      All the SQL the launcher and the senders run, in one place: each
 *      statement, its arguments and how it is planned (job_plans.c
 *      prepares and runs them).  "%s" stands for the extension's schema.
 *
 * The workers run with search_path = pg_catalog, so operators resolve
 * there; tables are schema-qualified.
 *
 * Plans are saved once per process, and a bulk enqueue can make notif_job
 * a hundred times bigger in one statement without invalidating them (an
 * ANALYZE would).  So the statements a sender runs at every round (the
 * claim, the record) are written to have one right plan whatever the
 * sizes: each job found by primary key, the due jobs taken in order from
 * notif_active's due index.  They are planned once, generic, under
 * planner_policy.c's rules (no sequential, bitmap, hash or merge plans;
 * the job tables reckoned big whatever their size), so that no statistics,
 * stale or fresh, can make a walk of a whole table look cheaper.  (Planning
 * them at each execution instead, with the sizes known, took 8-9% of a
 * sender's CPU in a steady drain: doc/benchmarks.md.)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "store/job_plans.h"
#include "store/job_sql.h"
#include "store/spi_values.h"
#include "core/shared.h"

/*
 * The types of a lane with their providers, a row per route (the type's
 * provider, route 1, then each of its backup_providers), paused types left
 * out.
 */
static const char *const sql_lane_types =
"SELECT t.code, t.delivery, t.max_tries, t.priority,"
"       (extract(epoch FROM t.backoff_min) * 1000)::int8,"
"       (extract(epoch FROM t.backoff_max) * 1000)::int8,"
"       p.name,"
"       coalesce(p.url, CASE WHEN p.format = 'fcm' AND p.auth = 'google_service_account'"
"                            THEN 'https://fcm.googleapis.com/v1/projects/'"
"                                 || (p.credentials ->> 'project_id') || '/messages:send' END),"
"       p.format, p.headers, p.idempotency_header,"
"       greatest(1, ceil(extract(epoch FROM p.timeout) * 1000))::int8,"
"       greatest(1, ceil(extract(epoch FROM p.connect_timeout) * 1000))::int8,"
"       p.max_inflight, p.rate_limit::float8, p.ref_field,"
"       p.auth, p.credentials, p.max_connections, p.ca_cert,"
"       CASE WHEN p.dedup_window > p.timeout"
"            THEN (extract(epoch FROM p.dedup_window - p.timeout) * 1000)::int8 ELSE 0 END,"
"       (extract(epoch FROM t.resolve_wait) * 1000)::int8,"
"       p.lookup_url, p.lookup_method, coalesce(p.lookup_headers, p.headers),"
"       p.lookup_found::int8[], p.lookup_not_found::int8[], p.lookup_field,"
"       p.lookup_found_values, p.lookup_not_found_values,"
"       p.breaker_threshold, (extract(epoch FROM p.breaker_cooldown) * 1000)::int8,"
"       t.deadline IS NOT NULL, p.payload_map, r.route::int4, cardinality(rs.routes), rs.routes,"
"       EXISTS (SELECT FROM %s.notif_type f WHERE f.fallback_type IS NOT NULL),"
"       p.apns_topics, p.fcm_topics,"
"       EXISTS (SELECT FROM %s.notif_type e WHERE e.emit_outcomes),"
"       t.endpoint_by,"
"       CASE WHEN p.format = 'json' AND p.batch_results IS NOT NULL"
"            THEN coalesce(p.batch_max, 1) ELSE 1 END,"
"       (extract(epoch FROM p.batch_wait) * 1000)::int8, p.batch_format ->> 'field', p.batch_results,"
"       p.signing IS NOT NULL, t.fallback_type IS NOT NULL"
"  FROM %s.notif_type t"
"  CROSS JOIN LATERAL (SELECT ARRAY[t.provider] || coalesce(t.backup_providers, '{}') AS routes) rs"
"  CROSS JOIN LATERAL unnest(rs.routes) WITH ORDINALITY AS r(name, route)"
"  JOIN %s.notif_provider p ON p.name = r.name"
" WHERE t.lane = $1 AND NOT t.paused"
" ORDER BY t.priority DESC, t.code, r.route";

/*
 * Claim due jobs of one type, writing what job_state.c's claim rows say
 * (the sender passes them): $4 the status of a claimed job, $5 the change
 * of its tries, $6 the status of a job whose deadline has passed, $7 the
 * last_error that one gets, $8 and $9 the same for such a job queued again
 * for its provider's deduplication window (claim_late_dedup_retry: an
 * at_most_once one stays sent, unresolved).  A type with backup providers
 * claims per route: $11 its routes, $14 the one claimed for, and a job is
 * taken when its route this round is that one: from the first (a job
 * whose last call did not end ambiguous or unreached), $12[first]; after
 * one that took a call it may retry there (a retry made for that
 * provider's deduplication window), $13[that]; else the next after it,
 * $12[next] ($12 and $13: which route takes a job starting at each, 0:
 * none, it waits; sender/claim.c).  Such a claim looks at the first $15
 * due jobs of the type only: one for a route few jobs are meant for never
 * walks a backlog meant for another (the rest wait their turn).  With $10,
 * only the late jobs are locked and written (their provider's breaker is
 * open: the others wait; their work rows, in the unlogged notif_active,
 * are locked only).  A late job is not held and has no call; a claimed
 * one is held by the sender ($3), for a call to provider $16 (which a
 * recovery records when the sender's end cuts the call off).  sent_at is
 * set when a status becomes 'sent'.
 * The due jobs come from notif_active: "work" takes its first $2 due rows
 * of the type whose job is queued, in next_at order, locking them and
 * skipping any another transaction holds (another sender's claim); "due"
 * then locks their jobs, skipping any another transaction holds
 * (notif_cancel, notif_retry, a user's lock), and checks again that each
 * is queued; so a claim never waits.  "claimed" and "overdue" write the jobs;
 * their work rows then say who holds them, or go with the late jobs.  A
 * work row whose job is not queued (it cannot be, short of a hand-made
 * one) is passed over, never claimed.
 * Generic (see the top), and written so that the planner has no choice to
 * get wrong: "work" reads notif_active alone in the due index's order (the
 * job's status is a subquery, one primary-key probe per row), and every
 * other step names its rows by primary key, = ANY of the array of the step
 * before; there is no join.  Each join there was (with "due" and with
 * "claimed") could be planned the wrong way round: the whole table read,
 * each row matched against every claimed job, when the plan was made with
 * the table empty (an idle sender claims at each poll_interval, and plans
 * again after an ANALYZE): 1.7 s for a claim of 200 with 50,000 jobs
 * queued.  And as one join of notif_active and notif_job, the planner
 * could drive "work" from notif_job's primary key, read every job and
 * sort: 335 ms instead of 2 (doc/benchmarks.md).
 */

static const char *const sql_claim =
"WITH work AS MATERIALIZED ("
"    SELECT a.job_id"
"      FROM %s.notif_active a"
"     WHERE a.kind = $1 AND a.claimed_by IS NULL AND a.next_at <= now()"
"       AND a.next_at <= CASE WHEN $11::text[] IS NULL THEN now() ELSE"
"           (SELECT max(w.next_at) FROM (SELECT w.next_at FROM %s.notif_active w"
"              WHERE w.kind = $1 AND w.claimed_by IS NULL AND w.next_at <= now()"
"              ORDER BY w.next_at LIMIT $15) w) END"
"       AND (SELECT j.status = 'queued'"
"                   AND ($11::text[] IS NULL OR $14 = CASE"
"                        WHEN j.outcome IS NULL OR j.outcome NOT IN ('unreached', 'unknown')"
"                             OR array_position($11, j.provider) IS NULL THEN $12[1]"
"                        WHEN j.resolved_by = 'dedup_window' THEN $13[array_position($11, j.provider)]"
"                        ELSE $12[array_position($11, j.provider) % cardinality($11) + 1] END)"
"              FROM %s.notif_job j WHERE j.id = a.job_id)"
"     ORDER BY a.next_at"
"     LIMIT $2"
"       FOR UPDATE OF a SKIP LOCKED),"
" due AS MATERIALIZED ("
"    SELECT j.id, coalesce(j.deadline_at <= now(), false) AS late"
"      FROM %s.notif_job j"
"     WHERE j.id = ANY (ARRAY (SELECT w.job_id FROM work w)) AND j.status = 'queued'"
"       AND (NOT $10 OR j.deadline_at <= now())"
"       FOR NO KEY UPDATE OF j SKIP LOCKED),"
" claimed AS ("
"    UPDATE %s.notif_job j"
"       SET status = $4,"
"           tries = j.tries + $5,"
"           sent_at = CASE WHEN $4 = 'sent' THEN now() ELSE j.sent_at END,"
"           claimed_by = $3,"
"           claimed_at = now(),"
"           claimed_provider = $16"
"     WHERE j.id = ANY (ARRAY (SELECT d.id FROM due d WHERE NOT d.late AND NOT $10))"
"    RETURNING j.id, j.user_id, j.order_id, j.payload, false AS late, j.tries, j.deadline_at,"
"              j.earlier_tries, j.created_at, (j.resolved_by = 'dedup_window') IS TRUE,"
"              (j.outcome = 'unknown') IS TRUE, j.provider, j.traceparent),"
" overdue AS ("
"    UPDATE %s.notif_job j"
"       SET status = CASE WHEN j.resolved_by = 'dedup_window' THEN $8 ELSE $6 END,"
"           last_error = CASE WHEN j.resolved_by = 'dedup_window' THEN $9 ELSE $7 END,"
"           resolved_by = CASE WHEN j.resolved_by = 'dedup_window' THEN NULL ELSE j.resolved_by END,"
"           claimed_by = NULL, claimed_at = NULL, claimed_provider = NULL"
"     WHERE j.id = ANY (ARRAY (SELECT d.id FROM due d WHERE d.late))"
"    RETURNING j.id, j.user_id, j.order_id, j.payload, true AS late, j.tries, j.deadline_at,"
"              j.earlier_tries, j.created_at, (j.resolved_by = 'dedup_window') IS TRUE,"
"              (j.outcome = 'unknown') IS TRUE, j.provider, j.traceparent),"
" held AS ("
"    UPDATE %s.notif_active a SET claimed_by = $3"
"     WHERE a.job_id = ANY (ARRAY (SELECT c.id FROM claimed c))),"
" ended AS ("
"    DELETE FROM %s.notif_active a"
"     WHERE a.job_id = ANY (ARRAY (SELECT o.id FROM overdue o)))"
" SELECT * FROM claimed"
" UNION ALL"
" SELECT * FROM overdue";

/*
 * Record what calls did: the job's next state, guarded by what the claim
 * wrote (status, tries, holder), so a stale result never overwrites a newer
 * one, with when its last call started and ended; and one notif_attempt row
 * per call (numbered across re-drives), except for a job's first call when
 * it was accepted and its job row was written: that row describes it whole
 * (the view notif_calls shows it), and a result that made no call (its
 * attempt NULL: a status lookup found the message).
 * "r" is the results, one array per column of record_columns (the unnest
 * is written by record_sql()).
 * A job that goes back to the queue (a retry later) is queued work again
 * in notif_active, due at its next_at; any other leaves it.
 * Each job is found by its primary key alone: the guard against a stale
 * result is one expression (IS TRUE), which the planner can neither join
 * on nor use to prove a partial index's predicate; with "claimed_by =
 * r.claimed_by" it once walked the index of held jobs (all the jobs in
 * flight, and its dead entries), looking empty by statistics from an idle
 * time, for each batch of results.  Generic (see the top): a nested loop
 * over the results, a primary-key probe each.  The work rows of jobs that
 * leave are named by key, = ANY of an array, as in the claim; the two
 * joins left (each result with its job, each requeued job with its work
 * row) carry a value per row.  Planned when notif_job had been analyzed
 * with one row, they were walks of the table with the results matched
 * against each row; planner_policy.c's floor on the tables' size is what
 * keeps them probes (test/t/025_claim_plans.pl).
 */
static const char *const sql_record =
" upd AS ("
"    UPDATE %s.notif_job j"
"       SET status = r.status,"
"           outcome = CASE WHEN r.keeps_outcome THEN j.outcome ELSE coalesce(r.outcome, j.outcome) END,"
"           http_status = CASE WHEN r.outcome IS NULL THEN j.http_status ELSE r.http_status END,"
"           last_error = r.error,"
"           next_at = coalesce(r.next_at, j.next_at),"
"           sent_at = CASE WHEN r.status = 'sent' THEN coalesce(r.sent_at, j.sent_at) END,"
"           tries = j.tries + r.tries_delta,"
"           claimed_by = NULL,"
"           claimed_at = NULL,"
"           claimed_provider = NULL,"
"           last_started_at = CASE WHEN r.outcome IS NULL THEN j.last_started_at ELSE r.started_at END,"
"           last_ended_at = CASE WHEN r.outcome IS NULL THEN j.last_ended_at ELSE r.ended_at END,"
"           provider = CASE WHEN r.outcome IS NULL THEN j.provider ELSE coalesce(r.provider, j.provider) END,"
"           batch_id = CASE WHEN r.outcome IS NULL THEN j.batch_id ELSE r.batch_id END,"
"           resolved_by = CASE WHEN r.resolves THEN r.resolved_by ELSE j.resolved_by END"
"      FROM r"
"     WHERE j.id = r.id"
"       AND (j.status = r.expected AND j.tries = r.tries AND j.claimed_by = r.claimed_by) IS TRUE"
"    RETURNING j.id, j.status, j.next_at),"
" requeued AS ("
"    UPDATE %s.notif_active a SET claimed_by = NULL, next_at = u.next_at"
"      FROM upd u WHERE a.job_id = u.id AND u.status = 'queued'),"
" ended AS ("
"    DELETE FROM %s.notif_active a"
"     WHERE a.job_id = ANY (ARRAY (SELECT u.id FROM upd u WHERE u.status <> 'queued'))),"
" att AS ("
"    INSERT INTO %s.notif_attempt (job_id, try, started_at, ended_at, outcome, http_status, error, provider, batch_id)"
"    SELECT r.id, r.attempt, r.started_at, r.ended_at, r.outcome, r.http_status, r.error, r.provider, r.batch_id"
"      FROM r WHERE r.outcome IS NOT NULL AND r.attempt IS NOT NULL"
"       AND (r.attempt <> 1 OR r.outcome <> 'accepted'"
"            OR NOT EXISTS (SELECT FROM upd WHERE upd.id = r.id))"
"    ON CONFLICT (job_id, try) DO NOTHING)";

/*
 * The record that passes over locked jobs, for a round after one whose
 * record met a lock (sender/results.c): the results ("r_all") whose job
 * another session holds (a notif_cancel or a SELECT ... FOR UPDATE left
 * open) are left out of "r" and their ids come back, to be recorded in a
 * later round; the lane goes on meanwhile (test/t/022_work.pl).  Not the
 * usual record: locking the jobs first writes a WAL record per job.
 */
static const char *const sql_record_passing =
" locked AS ("
"    SELECT j.id FROM %s.notif_job j WHERE j.id = ANY (ARRAY (SELECT a.id FROM r_all a))"
"       FOR NO KEY UPDATE OF j SKIP LOCKED),"
" passed AS ("
"    SELECT a.id FROM r_all a"
"     WHERE a.id <> ALL (ARRAY (SELECT l.id FROM locked l))"
"       AND EXISTS (SELECT FROM %s.notif_job j WHERE j.id = a.id)),"
" r AS (SELECT * FROM r_all a WHERE a.id <> ALL (ARRAY (SELECT p.id FROM passed p))),";

/*
 * "WITH r AS (SELECT * FROM unnest($1::int8[], ...) AS x(id, ...))," +
 * sql_record, returning no ids; or passing over locked jobs, "r_all" so,
 * then sql_record_passing, sql_record, returning the ids passed over.
 * With ended (some type emits its outcomes: sender/outcomes.c), a second
 * column: the ids of the jobs it ended (a status other than queued
 * written), which alone have a final status to tell.
 */
static const char *
record_sql_of(bool passing, bool ended)
{
	StringInfoData buf;
	int			c;

	initStringInfo(&buf);
	appendStringInfo(&buf, "WITH %s AS (SELECT * FROM unnest(", passing ? "r_all" : "r");
	for (c = 0; c < N_RECORD_COLUMNS; c++)
		appendStringInfo(&buf, "%s$%d::%s[]", c ? ", " : "", c + 1, notif_record_columns[c].sqltype);
	appendStringInfoString(&buf, ") AS x(");
	for (c = 0; c < N_RECORD_COLUMNS; c++)
		appendStringInfo(&buf, "%s%s", c ? ", " : "", notif_record_columns[c].name);
	appendStringInfoString(&buf, ")),");
	if (passing)
		appendStringInfoString(&buf, sql_record_passing);
	appendStringInfoString(&buf, sql_record);
	appendStringInfoString(&buf, passing ? " SELECT ARRAY (SELECT p.id FROM passed p)"
						   : " SELECT NULL::int8[]");
	if (ended)
		appendStringInfoString(&buf, ", ARRAY (SELECT u.id FROM upd u WHERE u.status <> 'queued')");
	return buf.data;
}

static const char *
record_sql(void)
{
	return record_sql_of(false, false);
}

static const char *
record_passing_sql(void)
{
	return record_sql_of(true, false);
}

static const char *
record_ended_sql(void)
{
	return record_sql_of(false, true);
}

static const char *
record_passing_ended_sql(void)
{
	return record_sql_of(true, true);
}

/*
 * Jobs held by senders that are no longer running, with their type's
 * policy (its resolve_wait, and its provider's timeout that bounds it);
 * their work rows and jobs locked, as a claim locks them.  Run at a
 * sender's start and at each reload of its configuration.  The held jobs
 * are first read from notif_active's index of held jobs, then named by
 * key, = ANY of an array, as in the claim: as one join, planned without
 * statistics (a new install before autovacuum came), it walked notif_job
 * by kind, every job of every type (1.6 s with a backlog of 1,000,000,
 * during which the sender claimed nothing; test/t/025_claim_plans.pl).
 * The outer WHERE repeats the sub-select's filter on the holder: only it
 * is checked again on a row that changed before its lock was taken (a job
 * claimed again meanwhile is then skipped).
 */
static const char *const sql_orphans =
"SELECT j.id, j.kind, j.status, j.tries, j.claimed_by, j.claimed_at, j.deadline_at,"
"       t.max_tries,"
"       (extract(epoch FROM t.backoff_min) * 1000)::int8,"
"       (extract(epoch FROM t.backoff_max) * 1000)::int8,"
"       j.earlier_tries,"
"       (extract(epoch FROM t.resolve_wait) * 1000)::int8,"
"       greatest(1, ceil(extract(epoch FROM p.timeout) * 1000))::int8,"
"       j.claimed_provider"
"  FROM %s.notif_active a"
"  JOIN %s.notif_job j ON j.id = a.job_id"
"  JOIN %s.notif_type t ON t.code = j.kind"
"  JOIN %s.notif_provider p ON p.name = t.provider"
" WHERE a.job_id = ANY (ARRAY (SELECT h.job_id FROM %s.notif_active h"
"                               WHERE h.claimed_by IS NOT NULL AND h.claimed_by <> ALL ($1)))"
"   AND a.claimed_by IS NOT NULL AND a.claimed_by <> ALL ($1)"
"   AND j.claimed_by IS NOT NULL"
"   FOR UPDATE OF a SKIP LOCKED FOR NO KEY UPDATE OF j SKIP LOCKED";

/*
 * When the type's next job is due, NULL if none (a work row whose job is
 * not queued, which a claim passes over, is no wake-up).  The due index in
 * order, up to the first row whose job is queued: as a join with min(),
 * it read every due job (1.7 s with 10 million jobs kept).
 */
/*
 * Of these jobs, whose call just ended ambiguous, those a delivery report
 * already says delivered (it came while the call was in flight): they need
 * no retry (alo_reported, amo_reported).  By notif_dlr_job_idx.
 */
static const char *const sql_reported =
"SELECT ARRAY (SELECT DISTINCT d.job_id FROM %s.notif_dlr d"
"               WHERE d.job_id = ANY ($1) AND d.delivered)";

/* $1 ids for provider batches, each the batch_id of one call's messages */
static const char *const sql_batch_ids =
"SELECT ARRAY (SELECT nextval('%s.notif_batch_id_seq'::regclass) FROM generate_series(1, $1))";

/* how many of a type's jobs are due now, counted up to $2 (batch_wait) */
static const char *const sql_due_count =
"SELECT count(*)::int4 FROM (SELECT FROM %s.notif_active a"
"                             WHERE a.kind = $1 AND a.claimed_by IS NULL AND a.next_at <= now()"
"                             LIMIT $2) d";

static const char *const sql_next_due =
"SELECT (SELECT a.next_at FROM %s.notif_active a"
"         WHERE a.kind = $1 AND a.claimed_by IS NULL"
"           AND (SELECT j.status FROM %s.notif_job j WHERE j.id = a.job_id) = 'queued'"
"         ORDER BY a.next_at LIMIT 1)";

/* the highest incarnation holding a job (notif_active_held_idx answers it) */
static const char *const sql_max_holder =
"SELECT max(claimed_by) FROM %s.notif_active";

/*
 * Build notif_active when it is empty because it was never built, or
 * PostgreSQL emptied it (a crash, a promotion): NULL when it was built.
 */
static const char *const sql_build_active =
"SELECT CASE WHEN NOT EXISTS (SELECT FROM %s.notif_active_built)"
"            THEN %s.notif_active_rebuild() END";

/* the lanes that need a sender, with their notif_lane.senders (NULL: the setting's) */
static const char *const sql_lanes =
"SELECT t.lane, l.senders"
"  FROM (SELECT DISTINCT lane FROM %s.notif_type WHERE NOT paused) t"
"  LEFT JOIN %s.notif_lane l ON l.lane = t.lane"
" ORDER BY t.lane";

/*
 * Delete finished jobs past their type's retention, a bounded batch, with
 * their attempts (their delivery reports go by ON DELETE CASCADE); and
 * orphaned delivery reports older than the longest retention.  A job
 * another session has locked is left for a later purge.  Retention counts
 * from when the job finished (its last call's end, or its claim): next_at,
 * which the index orders, is when it was last due, earlier by any time it
 * waited in a backlog; the walk steps over such jobs until their time.
 */
static const char *const sql_purge =
"WITH doomed AS ("
"    SELECT j.id"
"      FROM %s.notif_type t"
"     CROSS JOIN LATERAL ("
"        SELECT j.id FROM %s.notif_job j"
"         WHERE j.kind = t.code AND j.status IN ('sent', 'failed', 'expired')"
"           AND j.next_at < now() - t.retention AND j.claimed_by IS NULL"
"           AND greatest(j.next_at, j.sent_at, j.claimed_at, j.last_ended_at) < now() - t.retention"
"         ORDER BY j.next_at"		/* keeps the plan on notif_job_kind_next_idx */
"         LIMIT $1 FOR UPDATE OF j SKIP LOCKED) j"
"     LIMIT $1),"
" gone AS (DELETE FROM %s.notif_job j USING doomed d WHERE j.id = d.id RETURNING j.id),"
" att AS (DELETE FROM %s.notif_attempt a USING gone g WHERE a.job_id = g.id),"
" orphaned AS ("
"    DELETE FROM %s.notif_dlr d"
"     WHERE d.id IN (SELECT o.id FROM %s.notif_dlr o"
"                     WHERE o.job_id IS NULL"
"                       AND o.received_at < now() -"
"                           (SELECT coalesce(max(retention), '7 days') FROM %s.notif_type)"
"                     LIMIT $1))"
" SELECT count(*) FROM gone";

/*
 * Channel fallback: for the jobs $1 whose end (or accepted call) was just
 * written, a job of their type's fallback_type, the same user and order,
 * the payload's "fallback" member, fallback_of the job, its traceparent;
 * due at once after a failed or expired job (not a cancelled one),
 * fallback_after later after an accepted call (a delivered report cancels it: notif_dlr).  The
 * unique key makes it one; a key already taken is passed over before the
 * insert, which waits only for an enqueue of that key not yet committed
 * (sender/fallback.c bounds the wait).  Returns how many it wrote, and
 * the jobs whose fallback it wrote (their outcome messages: PLAN_OUTCOMES).
 */
static const char *const sql_fallback =
"WITH fb AS ("
"    INSERT INTO %s.notif_job (user_id, kind, order_id, payload, next_at, deadline_at, fallback_of,"
"                              traceparent)"
"    SELECT j.user_id, t.fallback_type, j.order_id, j.payload -> 'fallback',"
"           CASE WHEN j.status = 'sent' THEN now() + t.fallback_after ELSE now() END,"
"           CASE WHEN j.status = 'sent' THEN now() + t.fallback_after ELSE now() END + ft.deadline,"
"           j.id, j.traceparent"
"      FROM %s.notif_job j"
"      JOIN %s.notif_type t ON t.code = j.kind"
"      JOIN %s.notif_type ft ON ft.code = t.fallback_type"
"     WHERE j.id = ANY ($1)"
"       AND jsonb_typeof(j.payload -> 'fallback') = 'object'"
"       AND NOT EXISTS (SELECT FROM %s.notif_dlr d WHERE d.job_id = j.id AND d.delivered)"
"       AND ((j.status IN ('failed', 'expired') AND j.last_error IS DISTINCT FROM 'cancelled')"
"            OR (j.status = 'sent' AND j.outcome = 'accepted' AND t.fallback_after IS NOT NULL))"
"       AND NOT EXISTS (SELECT FROM %s.notif_job x"
"                        WHERE x.user_id = j.user_id AND x.kind = t.fallback_type"
"                          AND x.order_id = j.order_id)"
"    ON CONFLICT (user_id, kind, order_id) DO NOTHING"
"    RETURNING fallback_of)"
" SELECT count(*), ARRAY (SELECT f.fallback_of FROM fb f) FROM fb";

/*
 * The outcome messages (notif_type.emit_outcomes) of the jobs $1 a
 * statement of this transaction just ended, and of the jobs $2 whose
 * fallback it just wrote: run only when some type emits them.
 */
static const char *const sql_outcomes =
"SELECT %s.notif_outcomes_emit($1, $2)";

PlanDef		notif_plans[N_PLANS] = {
	[PLAN_LANE_TYPES] = {&sql_lane_types, NULL, 1, {TEXTOID}},
	[PLAN_CLAIM] = {&sql_claim, NULL, 16,
		{TEXTOID, INT4OID, INT8OID, TEXTOID, INT4OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, BOOLOID,
		TEXTARRAYOID, INT4ARRAYOID, INT4ARRAYOID, INT4OID, INT4OID, TEXTOID},
	true},
	[PLAN_RECORD] = {NULL, record_sql, N_RECORD_COLUMNS, {0}, true},	/* record_columns */
	[PLAN_RECORD_PASSING] = {NULL, record_passing_sql, N_RECORD_COLUMNS, {0}, true},
	[PLAN_RECORD_ENDED] = {NULL, record_ended_sql, N_RECORD_COLUMNS, {0}, true},
	[PLAN_RECORD_PASSING_ENDED] = {NULL, record_passing_ended_sql, N_RECORD_COLUMNS, {0}, true},
	[PLAN_ORPHANS] = {&sql_orphans, NULL, 1, {INT8ARRAYOID}},
	[PLAN_NEXT_DUE] = {&sql_next_due, NULL, 1, {TEXTOID}},
	[PLAN_LANES] = {&sql_lanes, NULL, 0, {0}},
	[PLAN_PURGE] = {&sql_purge, NULL, 1, {INT4OID}},
	[PLAN_MAX_HOLDER] = {&sql_max_holder, NULL, 0, {0}},
	[PLAN_BUILD_ACTIVE] = {&sql_build_active, NULL, 0, {0}},
	[PLAN_REPORTED] = {&sql_reported, NULL, 1, {INT8ARRAYOID}},
	[PLAN_FALLBACK] = {&sql_fallback, NULL, 1, {INT8ARRAYOID}},
	[PLAN_OUTCOMES] = {&sql_outcomes, NULL, 2, {INT8ARRAYOID, INT8ARRAYOID}},
	/* endpoint_sql.c */
	[PLAN_ENDPOINTS] = {&notif_sql_endpoints_text, NULL, 1, {TEXTARRAYOID}},
	[PLAN_ENDPOINT_RESULTS] = {&notif_sql_endpoint_results_text, NULL, 4,
	{TEXTARRAYOID, BOOLARRAYOID, TIMESTAMPTZARRAYOID, INT8OID}},
	[PLAN_BATCH_IDS] = {&sql_batch_ids, NULL, 1, {INT4OID}},
	[PLAN_DUE_COUNT] = {&sql_due_count, NULL, 2, {TEXTOID, INT4OID}},
};

