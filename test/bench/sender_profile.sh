#!/usr/bin/env bash
# test/bench/sender_profile.sh: where a sender's CPU goes, per job, in a
# steady drain (issue 15).  One throwaway cluster and the simulator; a
# backlog of JOBS at_least_once jobs is unpaused, and once the drain runs
# (after SETTLE seconds) `perf record -g` samples the sender alone for SECS
# seconds while the jobs it sends are counted.  test/bench/lib/sender_profile.pl
# then puts each sample in one part (the claim, the record, planning,
# send(), libcurl, ...) and prints microseconds of sender CPU per job for
# each, at each latency.  Unlike sender_cost.sh it leaves out the drain's
# start and end (the sender's start, its first connections, the last
# calls) and the rest of the cluster: it says where the steady cost is,
# not what a drain costs.  Not part of `make bench`; needs perf (Debian:
# linux-perf) and root.  About 30 s per latency.
#
#   bash test/bench/sender_profile.sh [JOBS] [INFLIGHT]   (defaults 200000 512)
#
# Environment: PROFILE_LATENCIES ["0 50"] (ms), PROFILE_SECS [4],
# PROFILE_SETTLE [1.5], PROFILE_HZ [4000] (samples per second),
# PROFILE_CONF (one more postgresql.conf line, e.g.
# "notif_deliver.batch_size = 400"), PROFILE_KEEP (a folder: each
# latency's perf.data is kept there as perf_<latency>ms.data, for
# `perf report -i`), BENCH_PORT, BENCH_SIM_PORT (see
# lib/common.sh).  Prints each latency's table, then "RESULT
# profile_<latency>ms_<part>_us value" lines and profile_<latency>ms_jobs.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
JOBS=${1:-200000}
INFLIGHT=${2:-512}
LATENCIES=${PROFILE_LATENCIES:-0 50}
SECS=${PROFILE_SECS:-4}
SETTLE=${PROFILE_SETTLE:-1.5}
PHZ=${PROFILE_HZ:-4000}
SIM=$BENCH_SIM_PORT
command -v perf >/dev/null || { echo "perf is not installed (apt-get install linux-perf)" >&2; exit 2; }

bench_dir profile
PG_BINDIR=$(pg_config --bindir)
sim_start main "$SIM" --hold-ms 5000
cluster_start "$BENCH_DIR/pg" "$BENCH_PORT" "notif_deliver.database = 'postgres'" \
	"notif_deliver.max_inflight = $INFLIGHT" "max_wal_size = '4GB'" \
	"synchronous_commit = off" ${PROFILE_CONF:+"$PROFILE_CONF"}
bench_lane_setup "$SIM" "$INFLIGHT" at_least_once
sent="SELECT count(*) FROM notif_job WHERE status = 'sent'"

for latency in $LATENCIES; do
	sim_get "$SIM" "/config?latency_ms=$latency" >/dev/null
	cluster_psql -c "TRUNCATE notif_job, notif_attempt CASCADE" \
		-c "SELECT count(notif_enqueue(g, 'bench', 'o', '{\"to\":\"+84900000000\",\"text\":\"hello\"}'))
		      FROM generate_series(1, $JOBS) g" \
		-c "VACUUM ANALYZE notif_job" -c "CHECKPOINT" >/dev/null
	cluster_psql -c "UPDATE notif_type SET paused = false WHERE code = 'bench'" >/dev/null
	sleep "$SETTLE"		# the drain's start is not what is measured
	pid=$(sender_pids | head -1)
	[ -n "$pid" ] || { echo "no sender running" >&2; exit 1; }
	s0=$(cluster_psql -At -c "$sent")
	perf record -q -F "$PHZ" -g -p "$pid" -o "$BENCH_DIR/perf.data" -- sleep "$SECS" >/dev/null 2>&1
	s1=$(cluster_psql -At -c "$sent")
	[ "$(cluster_psql -At -c "SELECT count(*) FROM notif_job WHERE status = 'queued'")" -gt 0 ] ||
		echo "warning: the backlog ran out during the profile at $latency ms: raise JOBS" >&2
	result "profile_${latency}ms_jobs" $((s1 - s0))
	[ -z "${PROFILE_KEEP:-}" ] || cp "$BENCH_DIR/perf.data" "$PROFILE_KEEP/perf_${latency}ms.data"
	perf script -F ip,sym,dso -i "$BENCH_DIR/perf.data" 2>/dev/null |
		perl "$(dirname "$0")/lib/sender_profile.pl" "$PHZ" $((s1 - s0)) "${latency}ms"
	cluster_psql -c "UPDATE notif_type SET paused = true WHERE code = 'bench'" >/dev/null
	wait_sql "SELECT count(*) = 0 FROM notif_job WHERE status = 'sending'" 60
done
