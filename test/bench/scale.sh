#!/usr/bin/env bash
# test/bench/scale.sh: scale (issue 4, section 4).
#  1. Memory of one sender (same process throughout) after 10,000 jobs and
#     after 1,000,000: its private memory (RssAnon) may grow by at most 10%.
#     Total RSS is printed too, but it also counts the shared buffers the
#     process has touched (RssShmem), which grow with the work done and are
#     not the sender's own memory.  A point in between (100,000 jobs) tells
#     growth that levels off from growth per job.  A sender's memory follows
#     its peak of calls in flight (a keep-alive connection each, with its
#     state in libcurl: about 15 kB), not the jobs it has sent: the first 10,000 jobs
#     are drained with the provider answering after 50 ms, so that all
#     max_inflight calls are in flight at once and every connection is open
#     before the first reading; the rest at 0 ms.  The connections open at
#     each reading are printed.
#  2. Dispatch rate and claim-query time with an empty table, then with 10
#     million finished jobs in it (status 'sent', one notif_attempt row each,
#     retention not yet due): the queued-job index keeps claims flat
#     (target: full/empty dispatch rate >= 0.8, and empty/full claim time
#     >= 0.8).  The claim time is the mean execution time of the sender's
#     claim statement in pg_stat_statements; each round also shows the mean
#     time of the statement that records the calls' results.
#
#   bash test/bench/scale.sh
#
# Environment: SCALE_RSS_SMALL [10000], SCALE_RSS_JOBS [1000000 x BENCH_SCALE],
# SCALE_FINISHED [10000000 x BENCH_SCALE], SCALE_JOBS [200000 x BENCH_SCALE]
# per dispatch round, SCALE_ROUNDS [3] per table state, SCALE_RSS_MID [RSS_JOBS / 10]; BENCH_PORT,
# BENCH_SIM_PORT (see test/bench/lib/common.sh).  Needs the extension installed
# and the simulator built.  Prints RESULT lines for test/bench/run.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
RSS_SMALL=${SCALE_RSS_SMALL:-10000}
RSS_JOBS=${SCALE_RSS_JOBS:-$(bench_scale 1000000)}
FINISHED=${SCALE_FINISHED:-$(bench_scale 10000000)}
JOBS=${SCALE_JOBS:-$(bench_scale 200000)}
ROUNDS=${SCALE_ROUNDS:-3}
SIM=$BENCH_SIM_PORT

bench_dir scale
sim_start main "$SIM" --hold-ms 5000
cluster_start "$BENCH_DIR/pg" "$BENCH_PORT" "notif_deliver.database = 'postgres'" \
	"shared_preload_libraries = 'notif_deliver,pg_stat_statements'" "pg_stat_statements.track = all" \
	"notif_deliver.max_inflight = 512" "notif_deliver.batch_size = 200" "max_worker_processes = 16" \
	"max_wal_size = '8GB'" "checkpoint_timeout = '30min'" "synchronous_commit = off" "shared_buffers = '512MB'"
cluster_psql <<SQL
CREATE EXTENSION notif_deliver;
CREATE EXTENSION pg_stat_statements;
UPDATE notif_provider SET url = 'http://127.0.0.1:$SIM/send', idempotency_header = 'Idempotency-Key',
       timeout = '5 seconds', max_inflight = 512 WHERE name = 'default';
INSERT INTO notif_type (code, delivery, max_tries, lane) VALUES ('bench', 'at_least_once', 3, 'bench');
SQL
payload='{"to":"+84900000000","text":"hello"}'
drained=$(nd_idle_sql)
echo "scale: $(nproc) cores, $(free -g | awk '/^Mem:/ { print $2 }') GB, $(pg_config --version)"

# --- 1. a sender's memory after RSS_SMALL and after RSS_JOBS jobs ---
wait_sql "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'notif_deliver sender bench'" 30
# Read once the sender has been idle for 2 s: a sender idle for 1 s after
# sending frees its spare libcurl handles and trims its heap, so this is
# its resident size between bursts (during a burst it holds up to
# max_inflight handles and connections, whatever the job count).
mem_of() {	# pid -> "RssAnon_kB VmRSS_kB"
	sleep 2
	awk '/^RssAnon:/ { a = $2 } /^VmRSS:/ { r = $2 } END { print a, r }' "/proc/$1/status"
}
conns() { echo $(($(sim_get "$SIM" /stats | awk '$1 == "connections_open" { print $2 }') - 1)); }
pid0=$(sender_pids)
sim_get "$SIM" "/config?latency_ms=50" >/dev/null	# every slot in flight at once
cluster_psql -c "SELECT count(notif_enqueue(g, 'bench', 'rss', '$payload')) FROM generate_series(1, $RSS_SMALL) g" >/dev/null
wait_sql "$drained" 600
sim_get "$SIM" "/config?latency_ms=0" >/dev/null
read -r anon_small rss_small <<<"$(mem_of "$pid0")"
conns_small=$(conns)
# a point in between, to tell growth that levels off from growth per job
RSS_MID=${SCALE_RSS_MID:-$(((RSS_JOBS / 10 > RSS_SMALL) ? RSS_JOBS / 10 : RSS_SMALL + 1))}
cluster_psql -c "SELECT count(notif_enqueue(g, 'bench', 'rss', '$payload')) FROM generate_series($RSS_SMALL + 1, $RSS_MID) g" >/dev/null
wait_sql "$drained" 3600
read -r anon_mid rss_mid <<<"$(mem_of "$pid0")"
conns_mid=$(conns)
cluster_psql -c "SELECT count(notif_enqueue(g, 'bench', 'rss', '$payload')) FROM generate_series($RSS_MID + 1, $RSS_JOBS) g" >/dev/null
wait_sql "$drained" 3600
pid1=$(sender_pids)
if [ "$pid0" != "$pid1" ]; then
	echo "FAIL: the sender was restarted during the memory run ($pid0 -> $pid1)" >&2
	exit 1
fi
read -r anon_big rss_big <<<"$(mem_of "$pid0")"
conns_big=$(conns)
growth=$(awk -v a="$anon_small" -v b="$anon_big" 'BEGIN { printf "%.1f", (b - a) / a * 100 }')
late=$(awk -v a="$anon_mid" -v b="$anon_big" 'BEGIN { printf "%.1f", (b - a) / a * 100 }')
echo "sender $pid0: RssAnon after $RSS_SMALL jobs $anon_small kB (VmRSS $rss_small kB), after $RSS_MID $anon_mid kB (VmRSS $rss_mid kB), after $RSS_JOBS $anon_big kB (VmRSS $rss_big kB)"
echo "connections open to the provider: $conns_small, $conns_mid, $conns_big"
echo "private memory growth $growth% from $RSS_SMALL jobs (target <= 10%), $late% from $RSS_MID jobs"
result rss_small_jobs "$RSS_SMALL"
result rss_big_jobs "$RSS_JOBS"
result rss_small_anon_kb "$anon_small"
result rss_big_anon_kb "$anon_big"
result rss_small_total_kb "$rss_small"
result rss_big_total_kb "$rss_big"
result rss_growth_pct "$growth"
result rss_mid_jobs "$RSS_MID"
result rss_mid_anon_kb "$anon_mid"
result rss_mid_total_kb "$rss_mid"
result rss_late_growth_pct "$late"
result rss_small_connections "$conns_small"
result rss_mid_connections "$conns_mid"
result rss_big_connections "$conns_big"
cluster_psql -c "TRUNCATE notif_job, notif_attempt CASCADE" >/dev/null

# --- 2. dispatch rate and claim time, empty table vs FINISHED finished jobs ---
round_no=0
dispatch_round() {	# state -> appends "rate claim_ms rows_per_claim" to $BENCH_DIR/<state>
	local state=$1 t0 t1
	round_no=$((round_no + 1))
	cluster_psql -c "UPDATE notif_type SET paused = true WHERE code = 'bench'" >/dev/null
	wait_sql "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'notif_deliver sender bench'" 30
	cluster_psql -c "SELECT count(notif_enqueue(g, 'bench', 'r$round_no', '$payload')) FROM generate_series(1, $JOBS) g" \
		-c "CHECKPOINT" -c "SELECT pg_stat_statements_reset()" >/dev/null
	t0=$(date +%s%N)
	cluster_psql -c "UPDATE notif_type SET paused = false WHERE code = 'bench'" >/dev/null
	wait_sql "$drained" 3600
	t1=$(date +%s%N)
	cluster_psql -At -F' ' -c "
		SELECT round($JOBS / (($t1 - $t0) / 1e9)), round((sum(total_exec_time) / sum(calls))::numeric, 3),
		       round(sum(rows)::numeric / sum(calls), 1),
		       (SELECT round((sum(total_exec_time) / sum(calls))::numeric, 3) FROM pg_stat_statements
		         WHERE query ILIKE '%unnest%' AND query ILIKE '%notif_attempt%')
		  FROM pg_stat_statements
		 WHERE query ILIKE '%skip locked%' AND query ILIKE '%next_at <= now()%'" >>"$BENCH_DIR/$state"
	echo "$state round: $(tail -1 "$BENCH_DIR/$state" | awk '{ printf "%s jobs/s, claim %s ms for %s rows, record %s ms", $1, $2, $3, $4 }')"
	row scale_rounds "$([ "$state" = empty ] && echo "empty table" || echo "$FINISHED finished jobs")" \
		$(tail -1 "$BENCH_DIR/$state" | awk '{ print $1, $2, $4 }')
	# where the database time went in this round
	cluster_psql -At -F' | ' -c "
		SELECT round(total_exec_time::numeric / 1000, 2) || ' s', calls, round(mean_exec_time::numeric, 3) || ' ms',
		       left(regexp_replace(query, '\s+', ' ', 'g'), 90)
		  FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 5" | sed 's/^/    /'
}
median_of() {	# file column
	awk -v c="$2" '{ print $c }' "$1" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}
for r in $(seq 1 "$ROUNDS"); do
	cluster_psql -c "TRUNCATE notif_job, notif_attempt CASCADE" >/dev/null
	dispatch_round empty
done

echo "loading $FINISHED finished jobs and their attempts"
t0=$SECONDS
cluster_psql -c "TRUNCATE notif_job, notif_attempt CASCADE" >/dev/null
chunk=1000000
for start in $(seq 1 "$chunk" "$FINISHED"); do
	end=$((start + chunk - 1)); [ "$end" -gt "$FINISHED" ] && end=$FINISHED
	cluster_psql -c "
		INSERT INTO notif_job (user_id, kind, order_id, payload, status, tries, created_at, next_at, sent_at, outcome, http_status)
		SELECT g, 'bench', 'old', '$payload', 'sent', 1, now() - interval '1 day', now() - interval '1 day',
		       now() - interval '1 day', 'accepted', 200
		  FROM generate_series($start, $end) g" >/dev/null
done
cluster_psql -c "INSERT INTO notif_attempt (job_id, try, started_at, ended_at, outcome, http_status)
		SELECT id, 1, sent_at, sent_at, 'accepted', 200 FROM notif_job" \
	-c "VACUUM (ANALYZE) notif_job" -c "VACUUM (ANALYZE) notif_attempt" -c "CHECKPOINT" >/dev/null
size=$(cluster_psql -At -c "SELECT pg_size_pretty(pg_total_relation_size('notif_job') + pg_total_relation_size('notif_attempt'))")
echo "loaded in $((SECONDS - t0))s ($size with indexes)"
for r in $(seq 1 "$ROUNDS"); do
	dispatch_round full
done

re=$(median_of "$BENCH_DIR/empty" 1); ce=$(median_of "$BENCH_DIR/empty" 2)
rf=$(median_of "$BENCH_DIR/full" 1); cf=$(median_of "$BENCH_DIR/full" 2)
rate_ratio=$(awk -v a="$rf" -v b="$re" 'BEGIN { printf "%.2f", a / b }')
claim_ratio=$(awk -v a="$ce" -v b="$cf" 'BEGIN { printf "%.2f", a / b }')
echo "dispatch: empty $re jobs/s, with $FINISHED finished $rf jobs/s: ratio $rate_ratio (target >= 0.8)"
echo "claim: empty $ce ms, with $FINISHED finished $cf ms: speed ratio $claim_ratio (target >= 0.8)"
result scale_finished_jobs "$FINISHED"
result scale_jobs "$JOBS"
result scale_table_size "\"$size\""
result scale_empty_jobs_per_s "$re"
result scale_full_jobs_per_s "$rf"
result scale_rate_ratio "$rate_ratio"
result scale_empty_claim_ms "$ce"
result scale_full_claim_ms "$cf"
result scale_claim_ratio "$claim_ratio"
