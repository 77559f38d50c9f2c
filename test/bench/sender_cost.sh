#!/usr/bin/env bash
# test/bench/sender_cost.sh: what the sender costs per job, two builds side
# by side in one run (issue 15).  Two throwaway clusters, one per
# installation (the baseline's, e.g. main's, and the one on PATH), the same
# settings, the same simulator; each round drains the same backlog of
# at_least_once jobs with each build in turn (the order alternates from
# round to round), at 0 ms and at 50 ms provider latency.  Per drain:
# jobs/s (unpause to drained), CPU seconds per 1,000 jobs of the whole
# cluster (the sender included) and of the sender alone, WAL bytes per job
# (pg_current_wal_lsn before and after; the backlog is loaded and
# checkpointed first, so the full-page images of the first change to each
# page after a checkpoint are counted, as in production), and the rounds'
# medians.
#
#   COST_BASE_PG_CONFIG=/opt/pg-base/usr/lib/postgresql/15/bin/pg_config \
#       bash test/bench/sender_cost.sh [JOBS] [INFLIGHT]   (defaults 30000 512)
#
# Environment: COST_BASE_PG_CONFIG (required: the baseline installation,
# with notif_deliver installed in it); COST_ROUNDS [5]; COST_LATENCIES
# ["0 50"]; COST_DELIVERY [at_least_once]; COST_SQL_BASE, COST_SQL_NEW (SQL
# run once in that build's cluster after the setup, e.g. to try a storage
# parameter: COST_SQL_NEW="ALTER TABLE notif_job SET (fillfactor = 70)"
# with both builds the same); BENCH_PORT (the clusters use it
# and BENCH_PORT + 1), BENCH_SIM_PORT (see test/bench/lib/common.sh).  Needs the
# simulator built (make -C test/sim).
#
# COST_STATS=stale: each drain as a long-running sender meets a burst
# while notif_job's statistics are stale (the peers benchmark's case, doc/
# benchmarks-peers.md): the table's last ANALYZE saw a full queue (JOBS
# queued, as autovacuum does in the middle of a burst), then the table was
# emptied (TRUNCATE: the statistics stay, the size estimate starts again),
# the sender drained COST_WARM [1000] jobs (its plans are chosen then, on a
# small table), and only then are JOBS enqueued in one statement and
# drained, timed from the enqueue's commit.  Each build drains twice per
# latency: as is ("<build>"), and with ANALYZE notif_job in the enqueue's
# transaction ("<build>_an": fresh statistics, the plans invalidated at
# the same commit), the reference.  Autovacuum is off in this mode, so
# that no ANALYZE lands inside a drain.  About 5 minutes with COST_ROUNDS=3
# at 30000 jobs on 2 busy cores.
# Prints a table, then "RESULT cost_<build>_<latency>ms_<what> value" lines
# (what: jobs_per_s, cpu_per_1k, sender_cpu_per_1k, wal_bytes_per_job,
# commits_per_1k: transactions committed in the cluster per 1,000 jobs, the
# sender's rounds and this script's few polls); with two latencies, each
# build's CPU per job at the second over the first, per round and as the
# median of the rounds: "RESULT cost_<build>_cpu_ratio_<hi>_<lo>" (the
# cluster) and "cost_<build>_sender_cpu_ratio_<hi>_<lo>".  The new build
# over the base, per round (same round and latency) and their median:
# "RESULT cost_new_over_base_<latency>ms_cpu" (the cluster) and
# "..._sender_cpu".
#
# COST_FLOOR=1: each round also runs the HTTP floor at each latency
# (test/bench/http_floor.sh's client: the same number of calls, in flight
# and simulator, no database; with COST_FLOOR_ARGS ["--park --no-reset
# --curlu-dup"], the sender's own ways with libcurl: idle sockets parked,
# handles kept without a reset, a copy of the parsed URL per call), so
# that what each build's sender spends
# above the HTTP part is measured side by side: its sender CPU per 1,000
# jobs minus the floor client's, per round ("RESULT
# cost_<build>_<latency>ms_above_floor_per_1k", the median) and new over
# base per round ("cost_new_over_base_<latency>ms_above_floor").
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
JOBS=${1:-30000}
INFLIGHT=${2:-512}
ROUNDS=${COST_ROUNDS:-5}
LATENCIES=${COST_LATENCIES:-0 50}
DELIVERY=${COST_DELIVERY:-at_least_once}
STATS=${COST_STATS:-}
FLOOR=${COST_FLOOR:-0}
read -ra FLOOR_ARGS <<<"${COST_FLOOR_ARGS---park --no-reset --curlu-dup}"
WARM=${COST_WARM:-1000}
case $STATS in "" | stale) ;; *) echo "COST_STATS: stale or empty, not $STATS" >&2; exit 2 ;; esac
SIM=$BENCH_SIM_PORT
: "${COST_BASE_PG_CONFIG:?set COST_BASE_PG_CONFIG to the pg_config of the baseline installation}"

declare -A bindir dir port
bindir[base]=$("$COST_BASE_PG_CONFIG" --bindir)
bindir[new]=$(pg_config --bindir)
builds="base new"
# what is drained and reported: a build, or in the stale mode each build
# as is and with ANALYZE after the enqueue (<build>_an)
variants=$builds
[ -z "$STATS" ] || variants="base base_an new new_an"

bench_dir cost
stop_all() {
	local b
	for b in $builds; do
		[ -d "${dir[$b]:-/nonexistent}/data" ] &&
			cluster_as "${bindir[$b]}/pg_ctl" -D "${dir[$b]}/data" -m immediate stop >/dev/null 2>&1
	done
	CLUSTER_DIR=
	bench_cleanup
}
trap stop_all EXIT

# point cluster_psql and the helpers of lib/common.sh at one build's cluster
use() {
	PG_BINDIR=${bindir[$1]}
	CLUSTER_DIR=${dir[$1]}
	export PGHOST=${dir[$1]} PGPORT=${port[$1]}
}

if [ "$FLOOR" = 1 ]; then
	CLIENT=$BENCH_DIR/http_floor
	make -s -C "$BENCH_HERE/bench/floor" OUT="$CLIENT" >/dev/null
fi
sim_start main "$SIM" --hold-ms 5000
sim_pid=${_bench_sims[0]}
p=$BENCH_PORT
for b in $builds; do
	dir[$b]=$BENCH_DIR/pg_$b
	port[$b]=$p
	p=$((p + 1))
	PG_BINDIR=${bindir[$b]}
	cluster_start "${dir[$b]}" "${port[$b]}" "notif_deliver.database = 'postgres'" \
		"notif_deliver.max_inflight = $INFLIGHT" \
		"max_wal_size = '4GB'" "checkpoint_timeout = '30min'" "synchronous_commit = off" \
		"autovacuum = $([ -n "$STATS" ] && echo off || echo on)"
	bench_lane_setup "$SIM" "$INFLIGHT" "$DELIVERY"
	extra=COST_SQL_${b^^}
	[ -z "${!extra:-}" ] || cluster_psql <<<"${!extra}"
done

# the sender's commits (and the few of this script's polls): its rounds
commits="SELECT sum(xact_commit) FROM pg_stat_database"
# drained: from notif_active where the build has it (1.2), by its index as
# the old build's query was by its partial indexes: the polls cost both
# builds alike
drained_sql() {
	if [ "$(cluster_psql -At -c "SELECT to_regclass('notif_active') IS NOT NULL")" = t ]; then
		nd_idle_sql
	else
		echo "SELECT NOT EXISTS (SELECT 1 FROM notif_job WHERE kind = 'bench' AND status = 'queued')
		   AND NOT EXISTS (SELECT 1 FROM notif_job WHERE claimed_by IS NOT NULL)"
	fi
}

enqueue() {	# N TAG
	echo "SELECT count(notif_enqueue(g, 'bench', '$2', '{\"to\":\"+84900000000\",\"text\":\"hello\"}')) FROM generate_series(1, $1) g"
}

# drain one backlog with one variant at one latency; prints
# "variant latency seconds jobs_per_s cpu_per_1k sender_cpu_per_1k wal_per_job"
drain() {
	local v=$1 latency=$2 b=${1%_an} pg0 pg1 t0 t1 lsn0 wal snd snd0=0 sent x0 x1 sent_all=$JOBS
	use "$b"
	drained=$(drained_sql)
	sim_get "$SIM" "/config?latency_ms=$latency" >/dev/null
	sim_get "$SIM" /reset >/dev/null
	if [ -z "$STATS" ]; then
		cluster_psql -c "TRUNCATE notif_job, notif_attempt CASCADE" -c "$(enqueue "$JOBS" o)" \
			-c "VACUUM ANALYZE notif_job" -c "CHECKPOINT" >/dev/null
	else
		# statistics of a full queue, an empty table, a sender warmed on it
		cluster_psql -c "TRUNCATE notif_job, notif_attempt CASCADE" -c "$(enqueue "$JOBS" s)" \
			-c "ANALYZE notif_job" -c "TRUNCATE notif_job, notif_attempt CASCADE" \
			-c "$(enqueue "$WARM" w)" -c "UPDATE notif_type SET paused = false WHERE code = 'bench'" >/dev/null
		drain_wait "$SIM" "$WARM" "$drained"
		cluster_psql -c "CHECKPOINT" >/dev/null
		sent_all=$((JOBS + WARM))
	fi
	lsn0=$(cluster_psql -At -c "SELECT pg_current_wal_lsn()")
	x0=$(cluster_psql -At -c "$commits")
	if [ -z "$STATS" ]; then
		pg0=$(cluster_cpu_ticks)
		t0=$(date +%s.%N)
		cluster_psql -c "UPDATE notif_type SET paused = false WHERE code = 'bench'" >/dev/null
	else
		# the running sender starts on the jobs at the commit
		if [ "$v" = "$b" ]; then
			cluster_psql -c "$(enqueue "$JOBS" o)" >/dev/null
		else
			cluster_psql -c "BEGIN" -c "$(enqueue "$JOBS" o)" -c "ANALYZE notif_job" -c "COMMIT" >/dev/null
		fi
		t0=$(date +%s.%N)
		pg0=$(cluster_cpu_ticks)
		snd0=$(cpu_ticks $(sender_pids))
	fi
	drain_wait "$SIM" "$sent_all" "$drained"
	t1=$(date +%s.%N)
	pg1=$(cluster_cpu_ticks)
	snd=$(($(cpu_ticks $(sender_pids)) - snd0))
	wal=$(cluster_psql -At -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn0')")
	x1=$(cluster_psql -At -c "$commits")
	JOBS=$sent_all end_drain bench "$v at $latency ms"
	awk -v b="$v" -v l="$latency" -v t0="$t0" -v t1="$t1" -v n="$JOBS" -v pg=$((pg1 - pg0)) \
		-v snd="$snd" -v wal="$wal" -v hz="$HZ" -v x=$((x1 - x0)) 'BEGIN {
		s = t1 - t0
		printf "%s %s %.3f %.0f %.4f %.4f %.0f %.1f\n", b, l, s, n / s, pg / hz / n * 1000,
			snd / hz / n * 1000, wal / n, x / n * 1000 }'
}

# the HTTP floor at one latency, as a drain's line (its CPU: the client's,
# as the sender's is the sender's; no WAL, no commits)
floor_drain() {	# LATENCY
	local line
	sim_get "$SIM" "/config?latency_ms=$1" >/dev/null
	sim_get "$SIM" /reset >/dev/null
	line=$("$CLIENT" --url "http://127.0.0.1:$SIM/send" --calls "$JOBS" --inflight "$INFLIGHT" \
		--sim-pid "$sim_pid" "${FLOOR_ARGS[@]}")
	awk -v l="$1" -v n="$JOBS" '{
		for (i = 1; i < NF; i += 2) v[$i] = $(i + 1)
		printf "floor %s %.3f %.0f %.4f %.4f 0 0.0\n", l, n / v["calls_per_s"], v["calls_per_s"],
			v["cpu_per_1k"], v["cpu_per_1k"] }' <<<"$line"
}

echo "sender cost: $JOBS $DELIVERY jobs per drain, $INFLIGHT in flight, $ROUNDS rounds${STATS:+, statistics $STATS (warm-up $WARM jobs)};"
echo "base: ${bindir[base]}, new: ${bindir[new]}; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %-7s %8s %8s %10s %10s %14s %10s %11s\n' round build latency seconds jobs_per_s cpu_1k sender_cpu_1k wal_per_job commits_1k
rows=()
declare -A cpu_of sender_of
# what each round runs, the floor among them; the order reversed every
# other round
drained=$variants
[ "$FLOOR" = 1 ] && drained+=" floor"
for round in $(seq 1 "$ROUNDS"); do
	order=$drained
	[ $((round % 2)) = 0 ] && order=$(tr ' ' '\n' <<<"$drained" | tac | tr '\n' ' ')
	for latency in $LATENCIES; do
		for b in $order; do
			if [ "$b" = floor ]; then r=$(floor_drain "$latency"); else r=$(drain "$b" "$latency"); fi
			rows+=("$r")
			read -r rb rl s j c sc w x <<<"$r"
			cpu_of["$round $rb $rl"]=$c sender_of["$round $rb $rl"]=$sc
			printf '%-5s %-7s %6sms %8.2f %10s %10.4f %14.4f %10s %11s\n' "$round" "$rb" "$rl" "$s" "$j" "$c" "$sc" "$w" "$x"
		done
	done
done

median() {	# build latency column
	printf '%s\n' "${rows[@]}" | awk -v b="$1" -v l="$2" -v c="$3" '$1 == b && $2 == l { print $c }' |
		median_values
}
echo "medians (load now $(cut -d' ' -f1-3 /proc/loadavg)):"
printf '%-7s %-7s %10s %10s %14s %10s %11s\n' build latency jobs_per_s cpu_1k sender_cpu_1k wal_per_job commits_1k
for latency in $LATENCIES; do
	for b in $drained; do
		printf '%-7s %5sms %10s %10.4f %14.4f %10s %11s\n' "$b" "$latency" "$(median "$b" "$latency" 4)" \
			"$(median "$b" "$latency" 5)" "$(median "$b" "$latency" 6)" "$(median "$b" "$latency" 7)" \
			"$(median "$b" "$latency" 8)"
		if [ "$b" = floor ]; then	# its calls/s and its own CPU; no cluster
			result "cost_floor_${latency}ms_calls_per_s" "$(median floor "$latency" 4)"
			result "cost_floor_${latency}ms_cpu_per_1k" "$(median floor "$latency" 6)"
			continue
		fi
		result "cost_${b}_${latency}ms_jobs_per_s" "$(median "$b" "$latency" 4)"
		result "cost_${b}_${latency}ms_cpu_per_1k" "$(median "$b" "$latency" 5)"
		result "cost_${b}_${latency}ms_sender_cpu_per_1k" "$(median "$b" "$latency" 6)"
		result "cost_${b}_${latency}ms_wal_bytes_per_job" "$(median "$b" "$latency" 7)"
		result "cost_${b}_${latency}ms_commits_per_1k" "$(median "$b" "$latency" 8)"
	done
done

# issue 15's "CPU per job at the slow latency / at 0 ms": per round (the
# same build, the same round), then the median of the rounds
read -r lo hi rest <<<"$LATENCIES"
if [ -n "${hi:-}" ] && [ -z "${rest:-}" ]; then
	echo "CPU per job at $hi ms / at $lo ms, per round (cluster; sender):"
	for b in $variants; do
		line="" cl="" sl=""
		for round in $(seq 1 "$ROUNDS"); do
			c=$(awk -v a="${cpu_of["$round $b $hi"]}" -v z="${cpu_of["$round $b $lo"]}" 'BEGIN { printf "%.2f", a / z }')
			sc=$(awk -v a="${sender_of["$round $b $hi"]}" -v z="${sender_of["$round $b $lo"]}" 'BEGIN { printf "%.2f", a / z }')
			line+=" $c;$sc" cl+="$c " sl+="$sc "
		done
		mc=$(tr ' ' '\n' <<<"$cl" | grep . | median_values)
		ms=$(tr ' ' '\n' <<<"$sl" | grep . | median_values)
		echo "  $b:$line (medians $mc; $ms)"
		result "cost_${b}_cpu_ratio_${hi}_${lo}" "$mc"
		result "cost_${b}_sender_cpu_ratio_${hi}_${lo}" "$ms"
	done
fi

# the new build over the base, per round (same round and latency), and the
# median; with the floor, what each sender spends above it
floor_of() { echo "${sender_of["$1 floor $2"]}"; }	# ROUND LATENCY
# AWK-EXPR's divisor (1 if none) at or below 0 gives "nan"
report_per_round() {	# LATENCY LABEL RESULT-NAME FORMAT AWK-EXPR(a: new, z: base, f: floor) MAP [DIVISOR]
	local latency=$1 label=$2 name=$3 fmt=$4 expr=$5 div=${7:-1} line="" vals="" round v m
	local -n of=$6
	for round in $(seq 1 "$ROUNDS"); do
		v=$(awk -v a="${of["$round new $latency"]}" -v z="${of["$round base $latency"]}" \
			-v f="$( [ "$FLOOR" = 1 ] && floor_of "$round" "$latency" || echo 0)" \
			"BEGIN { if ($div <= 0) print \"nan\"; else printf \"$fmt\", $expr }")
		line+=" $v" vals+="$v"$'\n'
	done
	m=$(grep . <<<"$vals" | median_values)
	printf '  %5sms %-22s%s; median %s\n' "$latency" "$label" "$line" "$m"
	result "$name" "$m"
}
echo "per round (rounds in order; median):"
for latency in $LATENCIES; do
	report_per_round "$latency" "new/base, cluster:" "cost_new_over_base_${latency}ms_cpu" %.3f "a / z" cpu_of z
	report_per_round "$latency" "new/base, sender:" "cost_new_over_base_${latency}ms_sender_cpu" %.3f "a / z" sender_of z
	[ "$FLOOR" = 1 ] || continue
	report_per_round "$latency" "base above floor:" "cost_base_${latency}ms_above_floor_per_1k" %.4f "z - f" sender_of
	report_per_round "$latency" "new above floor:" "cost_new_${latency}ms_above_floor_per_1k" %.4f "a - f" sender_of
	report_per_round "$latency" "new/base above floor:" "cost_new_over_base_${latency}ms_above_floor" %.3f \
		"(a - f) / (z - f)" sender_of "(z - f)"
done
