#!/usr/bin/env bash
# test/bench/drain_phases.sh: a sender's CPU per job through one drain, in
# half-second steps (issue 15's 50 ms / 0 ms ratio).  One throwaway
# cluster and the simulator; per latency a backlog of JOBS at_least_once
# jobs is unpaused and, until the simulator has every key, each step
# prints the keys received and the sender's CPU (user and system, from
# /proc) in that step, so that a costlier start or end of a drain shows
# apart from its steady middle; then the drain's whole CPU per 1,000 jobs
# (the sender starts with the unpause and is stopped by the next pause).
# Not part of `make bench`: a tool to look with, about 20 s per latency.
#
#   bash test/bench/drain_phases.sh [JOBS] [INFLIGHT]   (defaults 100000 512)
#
# Environment: PHASE_LATENCIES ["0 50"] (ms), BENCH_PORT, BENCH_SIM_PORT
# (see lib/common.sh).  Prints the steps, then "RESULT phases_<latency>ms_sender_cpu_per_1k value".
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
JOBS=${1:-100000}
INFLIGHT=${2:-512}
LATENCIES=${PHASE_LATENCIES:-0 50}
SIM=$BENCH_SIM_PORT

bench_dir phases
PG_BINDIR=$(pg_config --bindir)
sim_start main "$SIM" --hold-ms 5000
cluster_start "$BENCH_DIR/pg" "$BENCH_PORT" "notif_deliver.database = 'postgres'" \
	"notif_deliver.max_inflight = $INFLIGHT" "max_wal_size = '4GB'" \
	"checkpoint_timeout = '30min'" "synchronous_commit = off"
bench_lane_setup "$SIM" "$INFLIGHT" at_least_once

keys() {
	sim_get "$SIM" /stats | awk '$1 == "keys" { print $2 }'
}

for latency in $LATENCIES; do
	sim_get "$SIM" "/config?latency_ms=$latency" >/dev/null
	sim_get "$SIM" /reset >/dev/null
	cluster_psql -c "TRUNCATE notif_job, notif_attempt CASCADE" \
		-c "SELECT count(notif_enqueue(g, 'bench', 'o', '{\"to\":\"+84900000000\",\"text\":\"hello\"}'))
		      FROM generate_series(1, $JOBS) g" \
		-c "VACUUM ANALYZE notif_job" -c "CHECKPOINT" >/dev/null
	cluster_psql -c "UPDATE notif_type SET paused = false WHERE code = 'bench'" >/dev/null
	pid=
	until [ -n "$pid" ]; do
		pid=$(sender_pids | head -1)
		[ -n "$pid" ] || sleep 0.01
	done
	echo "$latency ms: seconds, keys received, in the step, sender CPU s in the step, µs per job"
	t0=$(date +%s.%N) k0=0 c0=0
	while :; do
		k=$(keys)
		c=$(cpu_ticks "$pid")
		awk -v t="$(date +%s.%N)" -v t0="$t0" -v k="$k" -v k0="$k0" -v c="$c" -v c0="$c0" -v hz="$HZ" 'BEGIN {
			n = k - k0
			printf "%7.2f %8d %7d %6.2f %8s\n", t - t0, k, n, (c - c0) / hz,
				(n > 0 ? sprintf("%.1f", (c - c0) / hz / n * 1e6) : "-") }'
		k0=$k c0=$c
		[ "$k" -ge "$JOBS" ] && break
		sleep 0.5
	done
	wait_sql "SELECT count(*) = 0 FROM notif_job WHERE status = 'sending'" 60
	result "phases_${latency}ms_sender_cpu_per_1k" \
		"$(awk -v c="$(cpu_ticks "$pid")" -v hz="$HZ" -v n="$JOBS" 'BEGIN { printf "%.4f", c / hz / n * 1000 }')"
	cluster_psql -c "UPDATE notif_type SET paused = true WHERE code = 'bench'" >/dev/null
	wait_sql "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name LIKE 'notif_deliver sender%'" 60
done
