#!/usr/bin/env bash
# test/bench/dispatch.sh: how fast one lane drains a backlog of queued
# at_least_once jobs against the provider simulator, at 0 ms and at 50 ms
# provider latency, and the database's own limit for the same jobs
# (test/bench/claim_limit.sh: pgbench claiming batches of 100 with FOR
# UPDATE SKIP LOCKED and marking them done, no HTTP), side by side in one
# cluster.  Each round drains at 0 ms, measures the limit, drains at 50 ms,
# and drains at 0 ms again with DISPATCH_SENDERS senders for the lane
# (notif_deliver.senders_per_lane); the medians over the rounds are the
# results.  CPU seconds per 1,000 jobs
# for PostgreSQL (all its processes, the sender included), for the sender
# alone, and for the simulator.  Each round also runs the HTTP floor at
# 0 ms: test/bench/floor/http_floor.c (built here, with cc and
# curl-config), a bare libcurl client with no database driving libcurl as
# the sender does (its levers --park --no-reset --curlu-dup), the same
# number of calls, in flight and simulator, its connections opened before
# it is measured (so it is the least the calls cost); it says what the HTTP
# part of a job costs on this machine under any SQL, and with the claim
# limit's database work and the simulator's CPU per call, how fast any
# sender could drain on this machine's cores.
#
#   bash test/bench/dispatch.sh [JOBS] [INFLIGHT]     (defaults 200000 512)
#
# Environment: DISPATCH_ROUNDS [3]; DISPATCH_SENDERS [2]; DISPATCH_BATCH [the default of
# notif_deliver.batch_size: 100 and 200 drain alike, 500 is slower];
# DISPATCH_FLOOR [1] (0: no floor; a floor client that does not build is
# skipped with a warning, its results "not measured");
# DISPATCH_EMIT_OUTCOMES [0] (1: the type has notif_type.emit_outcomes, each
# job's end a logical message and a NOTIFY; no slot reads them);
# CLAIM_CLIENTS (see claim_limit.sh);
# BENCH_PORT, BENCH_SIM_PORT (see test/bench/lib/common.sh).  Needs the extension
# installed (make install) and the simulator built (make -C test/sim).
# Prints a table, then the medians as lines "RESULT name value":
#   dispatch_0ms_jobs_per_s  dispatch_0ms_pg_cpu_per_1k  dispatch_0ms_sender_cpu_per_1k
#   dispatch_0ms_sim_cpu_per_1k  dispatch_0ms_wal_per_job (WAL bytes per job over
#   the drain)  (and the same five for 50ms)
#   dispatch_cpu_50ms_over_0ms  dispatch_sender_cpu_50ms_over_0ms  (CPU per job at
#   50 ms over that at 0 ms, per round, median: the cluster's, the sender's)
#   claim_limit_jobs_per_s  claim_limit_pg_cpu_per_1k  claim_limit_wal_per_job
#   dispatch_fraction_of_limit    (0 ms rate / limit, per round, median)
#   dispatch_0ms_senders dispatch_0ms_senders_jobs_per_s  dispatch_0ms_senders_pg_cpu_per_1k
#   dispatch_0ms_senders_sender_cpu_per_1k  dispatch_0ms_senders_sim_cpu_per_1k
#   dispatch_senders_speedup      (DISPATCH_SENDERS senders' rate / one's, per round, median)
#   dispatch_senders_fraction_of_limit
#   dispatch_floor_0ms_calls_per_s  dispatch_floor_0ms_cpu_per_1k (the floor
#   client's CPU per 1,000 calls)  dispatch_floor_0ms_sim_cpu_per_1k
#   dispatch_0ms_above_floor_per_1k  (PostgreSQL's CPU per 1,000 jobs at 0 ms
#   minus the floor client's, per round, median: what the database and the
#   sender's bookkeeping add to the calls)
#   dispatch_floor_plus_limit_cpu_per_1k  (the floor client's CPU per 1,000 calls
#   plus the claim limit's PostgreSQL CPU per 1,000 jobs, per round,
#   median: the least a sender could cost here, paying only the floor's
#   HTTP and the limit's database work)
#   dispatch_cores_bound_fraction_of_limit  (nproc cores over the CPU per job of
#   the floor client, the simulator and the limit's database work, as
#   jobs/s, over the claim limit, per round, median: the fastest any
#   sender could drain on this machine, with the simulator on the same
#   cores, as a fraction of the limit)
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
JOBS=${1:-200000}
INFLIGHT=${2:-512}
ROUNDS=${DISPATCH_ROUNDS:-3}
SENDERS=${DISPATCH_SENDERS:-2}
BATCH=${DISPATCH_BATCH:-}
SIM=$BENCH_SIM_PORT

bench_dir dispatch
FLOOR=${DISPATCH_FLOOR:-1}
FLOOR_CLIENT=$BENCH_DIR/http_floor
if [ "$FLOOR" = 1 ] && ! make -s -C "$BENCH_HERE/bench/floor" OUT="$FLOOR_CLIENT" >/dev/null; then
	echo "dispatch: the floor client did not build; no floor in this run" >&2
	FLOOR=0
fi
sim_start main "$SIM" --hold-ms 5000
cluster_start "$BENCH_DIR/pg" "$BENCH_PORT" "notif_deliver.database = 'postgres'" \
	"notif_deliver.max_inflight = $INFLIGHT" ${BATCH:+"notif_deliver.batch_size = $BATCH"} \
	"max_wal_size = '4GB'" "checkpoint_timeout = '30min'" "synchronous_commit = off"
BATCH=$(cluster_psql -At -c "SHOW notif_deliver.batch_size")
bench_lane_setup "$SIM" "$INFLIGHT" at_least_once
[ "${DISPATCH_EMIT_OUTCOMES:-0}" = 0 ] ||
	cluster_psql -c "UPDATE notif_type SET emit_outcomes = true WHERE code = 'bench'" >/dev/null
sim_pid=${_bench_sims[0]}

# a fresh backlog of JOBS queued jobs of the paused type
load_jobs() {
	cluster_psql -c "TRUNCATE notif_job, notif_attempt CASCADE" \
		-c "SELECT count(notif_enqueue(g, 'bench', 'o', '{\"to\":\"+84900000000\",\"text\":\"hello\"}')) FROM generate_series(1, $JOBS) g" \
		-c "ANALYZE notif_job" -c "CHECKPOINT" >/dev/null
}

# nothing queued and nothing held (both answered by partial indexes: the
# poll must not cost the cluster what it measures)
drained=$(nd_idle_sql)

rows=()
row_of() {	# what seconds jobs pg_ticks sender_ticks sim_ticks wal_bytes
	awk -v w="$1" -v s="$2" -v n="$3" -v pg="$4" -v snd="$5" -v sim="$6" -v wal="$7" -v hz="$HZ" 'BEGIN {
		printf "%s %.3f %.0f %.4f %.4f %.4f %.0f\n", w, s, n / s, pg / hz / n * 1000,
			snd / hz / n * 1000, sim / hz / n * 1000, wal / n }'
}

# drain the backlog at a provider latency with SENDERS senders [1]; appends a row
drain() {
	local latency=$1 senders=${2:-1} pg0 sim0 t0 t1 pg1 sim1 snd sent n lsn0 wal
	nd_senders "$senders"
	sim_get "$SIM" "/config?latency_ms=$latency" >/dev/null
	sim_get "$SIM" /reset >/dev/null
	load_jobs
	lsn0=$(cluster_psql -At -c "SELECT pg_current_wal_lsn()")
	pg0=$(cluster_cpu_ticks)
	sim0=$(cpu_ticks "$sim_pid")
	t0=$(date +%s.%N)
	cluster_psql -c "UPDATE notif_type SET paused = false WHERE code = 'bench'" >/dev/null
	drain_wait "$SIM" "$JOBS" "$drained"
	t1=$(date +%s.%N)
	pg1=$(cluster_cpu_ticks)
	sim1=$(cpu_ticks "$sim_pid")
	snd=$(cpu_ticks $(sender_pids))
	n=$(sender_pids | wc -l)
	[ "$n" = "$senders" ] || { echo "dispatch at $latency ms: $n senders ran, not $senders" >&2; exit 1; }
	wal=$(cluster_psql -At -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn0')")
	end_drain bench "dispatch at $latency ms"
	row_of "${latency}ms$([ "$senders" = 1 ] || echo "x$senders")" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$JOBS" \
		$((pg1 - pg0)) "$snd" $((sim1 - sim0)) "$wal"
}

# the database's limit on the same backlog (claim_limit.sh); prints a row
limit() {
	local pg0 pg1 n secs lsn0 wal
	load_jobs
	lsn0=$(cluster_psql -At -c "SELECT pg_current_wal_lsn()")
	pg0=$(cluster_cpu_ticks)
	read -r n secs <<<"$(bash "$(dirname "$0")/claim_limit.sh" --attached bench)"
	pg1=$(cluster_cpu_ticks)
	wal=$(cluster_psql -At -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn0')")
	row_of limit "$secs" "$n" $((pg1 - pg0)) 0 0 "$wal"
}

# the HTTP floor at 0 ms (the floor client, no database); prints a row:
# its CPU in the PostgreSQL column, none for the sender
floor() {
	local line
	sim_get "$SIM" "/config?latency_ms=0" >/dev/null
	sim_get "$SIM" /reset >/dev/null
	line=$("$FLOOR_CLIENT" --url "http://127.0.0.1:$SIM/send" --calls "$JOBS" --inflight "$INFLIGHT" \
		--sim-pid "$sim_pid" --park --no-reset --curlu-dup)
	awk '{ for (i = 1; i < NF; i += 2) v[$i] = $(i + 1)
		printf "floor %.3f %.0f %.4f 0 %.4f 0\n", v["seconds"], v["calls_per_s"], v["cpu_per_1k"],
			v["sim_cpu_per_1k"] }' <<<"$line"
}

echo "dispatch of $JOBS at_least_once jobs, $INFLIGHT in flight, batch_size $BATCH, $ROUNDS rounds;"
echo "limit: pgbench claiming and completing them in batches of 100, no HTTP;"
[ "$FLOOR" = 0 ] || echo "floor: a libcurl client with no database, the same calls at 0 ms (pg_cpu_1k: its own CPU);"
echo "$(nproc) cores, $(pg_config --version)"
printf '%-6s %-7s %9s %11s %12s %12s %12s %8s %9s\n' round what seconds jobs_per_s pg_cpu_1k sender_cpu_1k sim_cpu_1k wal_job fraction
for round in $(seq 1 "$ROUNDS"); do
	r0=$(drain 0)
	rf=
	[ "$FLOOR" = 0 ] || rf=$(floor)
	rl=$(limit)
	r50=$(drain 50)
	rs=$(drain 0 "$SENDERS")
	f=$(awk -v a="$(cut -d' ' -f3 <<<"$r0")" -v b="$(cut -d' ' -f3 <<<"$rl")" 'BEGIN { printf "%.3f", a / b }')
	fs=$(awk -v a="$(cut -d' ' -f3 <<<"$rs")" -v b="$(cut -d' ' -f3 <<<"$rl")" 'BEGIN { printf "%.3f", a / b }')
	sp=$(awk -v a="$(cut -d' ' -f3 <<<"$rs")" -v b="$(cut -d' ' -f3 <<<"$r0")" 'BEGIN { printf "%.3f", a / b }')
	# CPU per job at 50 ms over that at 0 ms, the cluster's and the sender's
	cr=$(awk -v a="$(cut -d' ' -f4 <<<"$r50")" -v b="$(cut -d' ' -f4 <<<"$r0")" 'BEGIN { printf "%.3f", a / b }')
	crs=$(awk -v a="$(cut -d' ' -f5 <<<"$r50")" -v b="$(cut -d' ' -f5 <<<"$r0")" 'BEGIN { printf "%.3f", a / b }')
	# the sender's cost above the floor's; the floor's calls with the
	# limit's database work; the cores' bound at that cost over the limit
	if [ -n "$rf" ]; then
		af=$(awk -v a="$(cut -d' ' -f4 <<<"$r0")" -v b="$(cut -d' ' -f4 <<<"$rf")" 'BEGIN { printf "%.4f", a - b }')
		fl=$(awk -v f="$(cut -d' ' -f4 <<<"$rf")" -v l="$(cut -d' ' -f4 <<<"$rl")" 'BEGIN { printf "%.4f", f + l }')
		cb=$(awk -v c="$(nproc)" -v f="$fl" -v s="$(cut -d' ' -f6 <<<"$rf")" \
			-v l="$(cut -d' ' -f3 <<<"$rl")" 'BEGIN { printf "%.3f", c * 1000 / (f + s) / l }')
	fi
	for r in "$r0" ${rf:+"$rf"} "$rl" "$r50" "$rs"; do
		read -r w s n pg snd sim wal <<<"$r"
		printf '%-6s %-7s %9.2f %11s %12.3f %12.3f %12.3f %8s %9s\n' "$round" "$w" "$s" "$n" "$pg" "$snd" "$sim" "$wal" \
			"$([ "$w" = 0ms ] && echo "$f" || { [ "$w" = 0msx$SENDERS ] && echo "$fs"; } || echo)"
		rows+=("$r")
	done
	echo "$round: CPU per job at 50 ms / 0 ms: $cr (the sender alone $crs)"
	if [ -n "$rf" ]; then
		echo "$round: CPU per 1,000 jobs at 0 ms: PostgreSQL's above the floor's $af; the floor's and the limit's database work $fl;" \
			"$(nproc) cores' bound at that cost and the simulator's, over the limit: $cb"
		rows+=("above_floor 0 $af 0 0 0" "floor_plus_limit 0 $fl 0 0 0" "cores_bound 0 $cb 0 0 0")
	fi
	rows+=("fraction 0 $f 0 0 0" "fraction_senders 0 $fs 0 0 0" "speedup 0 $sp 0 0 0"
		"cpu_ratio 0 $cr 0 0 0" "sender_cpu_ratio 0 $crs 0 0 0")
done

# the median of one column (3: jobs/s, 4: pg, 5: sender, 6: sim, 7: WAL bytes per job) of one kind of row
median() {
	printf '%s\n' "${rows[@]}" | awk -v w="$1" -v c="$2" '$1 == w { print $c }' | sort -g |
		awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}
printf '%-6s %-7s %9s %11s %12.3f %12.3f %12.3f %8s %9s\n' median 0ms "" "$(median 0ms 3)" "$(median 0ms 4)" \
	"$(median 0ms 5)" "$(median 0ms 6)" "$(median 0ms 7)" "$(median fraction 3)"
[ "$FLOOR" = 0 ] ||
	printf '%-6s %-7s %9s %11s %12.3f %12s %12.3f\n' median floor "" "$(median floor 3)" "$(median floor 4)" "" "$(median floor 6)"
printf '%-6s %-7s %9s %11s %12.3f %12s %12s %8s\n' median limit "" "$(median limit 3)" "$(median limit 4)" "" "" "$(median limit 7)"
printf '%-6s %-7s %9s %11s %12.3f %12.3f %12.3f %8s\n' median 50ms "" "$(median 50ms 3)" "$(median 50ms 4)" \
	"$(median 50ms 5)" "$(median 50ms 6)" "$(median 50ms 7)"
printf '%-6s %-7s %9s %11s %12.3f %12.3f %12.3f %8s %9s\n' median "0msx$SENDERS" "" "$(median "0msx$SENDERS" 3)" \
	"$(median "0msx$SENDERS" 4)" "$(median "0msx$SENDERS" 5)" "$(median "0msx$SENDERS" 6)" "$(median "0msx$SENDERS" 7)" \
	"$(median fraction_senders 3)"
echo "$SENDERS senders' rate / one sender's, per round, median: $(median speedup 3)"
echo "CPU per job at 50 ms / 0 ms, per round, median: $(median cpu_ratio 3) (the sender alone $(median sender_cpu_ratio 3))"
for l in 0ms 50ms; do
	result "dispatch_${l}_jobs_per_s" "$(median $l 3)"
	result "dispatch_${l}_pg_cpu_per_1k" "$(printf '%.3f' "$(median $l 4)")"
	result "dispatch_${l}_sender_cpu_per_1k" "$(printf '%.3f' "$(median $l 5)")"
	result "dispatch_${l}_sim_cpu_per_1k" "$(printf '%.3f' "$(median $l 6)")"
	result "dispatch_${l}_wal_per_job" "$(median $l 7)"
done
result dispatch_cpu_50ms_over_0ms "$(median cpu_ratio 3)"
result dispatch_sender_cpu_50ms_over_0ms "$(median sender_cpu_ratio 3)"
result claim_limit_jobs_per_s "$(median limit 3)"
result claim_limit_pg_cpu_per_1k "$(printf '%.3f' "$(median limit 4)")"
result claim_limit_wal_per_job "$(median limit 7)"
result dispatch_fraction_of_limit "$(median fraction 3)"
result dispatch_0ms_senders "$SENDERS"
result dispatch_0ms_senders_jobs_per_s "$(median "0msx$SENDERS" 3)"
result dispatch_0ms_senders_pg_cpu_per_1k "$(printf '%.3f' "$(median "0msx$SENDERS" 4)")"
result dispatch_0ms_senders_sender_cpu_per_1k "$(printf '%.3f' "$(median "0msx$SENDERS" 5)")"
result dispatch_0ms_senders_sim_cpu_per_1k "$(printf '%.3f' "$(median "0msx$SENDERS" 6)")"
result dispatch_senders_speedup "$(median speedup 3)"
result dispatch_senders_fraction_of_limit "$(median fraction_senders 3)"
[ "$FLOOR" = 0 ] && exit 0
result dispatch_floor_0ms_calls_per_s "$(median floor 3)"
result dispatch_floor_0ms_cpu_per_1k "$(printf '%.4f' "$(median floor 4)")"
result dispatch_floor_0ms_sim_cpu_per_1k "$(printf '%.4f' "$(median floor 6)")"
result dispatch_0ms_above_floor_per_1k "$(median above_floor 3)"
result dispatch_floor_plus_limit_cpu_per_1k "$(median floor_plus_limit 3)"
result dispatch_cores_bound_fraction_of_limit "$(median cores_bound 3)"
