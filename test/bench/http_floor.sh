#!/usr/bin/env bash
# test/bench/http_floor.sh: the HTTP floor under the sender (issue 15): what
# the HTTP part of a job costs a libcurl client that drives libcurl as the
# sender does, with no database at all.  test/bench/floor/http_floor.c (built
# here, into the work folder) sends CALLS POSTs to the provider simulator
# with INFLIGHT always in flight over HTTP/1.1 keep-alive, after a warm-up
# of INFLIGHT calls (every connection open), and measures its own CPU (user
# and system, getrusage) and the simulator's over those calls.  Each round
# runs it once per latency; the medians of the rounds are the result.
# Compare with test/bench/sender_cost.sh's sender_cpu_per_1k (the sender,
# database work included) at the same CALLS, INFLIGHT and latency.
#
#   bash test/bench/http_floor.sh [CALLS] [INFLIGHT]    (defaults 30000 512)
#
# Environment: FLOOR_ROUNDS [5]; FLOOR_LATENCIES ["0 50"] (the simulator's
# answer latency, ms); FLOOR_ARGS (more options for the client, e.g.
# "--shared-headers": one header list built once, the Idempotency-Key
# linked in front of it per call, instead of a list per call as the
# sender builds today), given to every variant; FLOOR_VARIANTS ["default"]:
# client variants run side by side, each round running each variant once
# per latency, the order rotated from round to round: "default" (no more
# options), a bare NAME (the option --NAME: park, no-proxy, no-reset, curlu, curlu-dup,
# shared-headers), or NAME:OPTIONS with commas for spaces (e.g.
# "maxconn64:--maxconnects,64"); the first variant is the baseline of the
# per-round ratios (variant / baseline, same round and latency: CPU per
# 1,000 calls and calls/s) and their medians; FLOOR_SYSCALLS=1: after the
# rounds, one more run per latency and variant under `perf stat`
# (tracepoints syscalls:sys_enter_*, enabled
# by the client for the measured calls only), printing the system calls
# per call of the client and of the simulator, by name (perf's tracing
# slows both down: that run's CPU is not reported); FLOOR_IR=1: per
# variant, the client's user-space instructions per call, which unlike CPU
# time hardly vary from run to run on a shared machine: two runs under
# valgrind's callgrind at 0 ms (2,000 and 12,000 measured calls, 128 in
# flight), their difference over 10,000 (about 10 s per variant; needs
# valgrind); BENCH_SIM_PORT
# [26451] (the simulator's port; see test/bench/lib/common.sh).  Needs the
# simulator built (make -C test/sim), libcurl's headers (test/deps.sh) and,
# for FLOOR_SYSCALLS, perf (Debian package linux-perf) run as root.
# About 30 s per variant at the defaults.
# Prints a table, then "RESULT floor_<latency>ms_<what> value" lines for
# the first variant and "RESULT floor_<latency>ms_<variant>_<what> value"
# for the others (what: calls_per_s, cpu_per_1k, user_per_1k, sys_per_1k:
# the client's CPU seconds per 1,000 calls; sim_cpu_per_1k: the
# simulator's; csw_per_call: the client's context switches per call; with
# FLOOR_SYSCALLS, syscalls_per_call and sim_syscalls_per_call; with
# FLOOR_IR, instructions_per_call; for the
# others also cpu_ratio and rate_ratio, the medians of the per-round
# ratios).
set -euo pipefail
# not lib/common.sh's default: the other benchmarks' ports stay free
BENCH_SIM_PORT=${BENCH_SIM_PORT:-26451}
. "$(dirname "$0")/lib/common.sh"
CALLS=${1:-30000}
INFLIGHT=${2:-512}
ROUNDS=${FLOOR_ROUNDS:-5}
LATENCIES=${FLOOR_LATENCIES:-0 50}
SYSCALLS=${FLOOR_SYSCALLS:-0}
IR=${FLOOR_IR:-0}
read -ra ARGS <<<"${FLOOR_ARGS:-}"
read -ra VARIANTS <<<"${FLOOR_VARIANTS:-default}"
SIM=$BENCH_SIM_PORT

bench_dir floor
perf_pid=
floor_cleanup() {
	[ -z "$perf_pid" ] || kill -INT "$perf_pid" 2>/dev/null || true
	bench_cleanup
}
trap floor_cleanup EXIT
if [ "$SYSCALLS" = 1 ] && ! command -v perf >/dev/null; then
	echo "FLOOR_SYSCALLS=1 needs perf (apt-get install linux-perf)" >&2
	exit 2
fi
if [ "$IR" = 1 ] && ! command -v valgrind >/dev/null; then
	echo "FLOOR_IR=1 needs valgrind (apt-get install valgrind)" >&2
	exit 2
fi
CLIENT=$BENCH_DIR/http_floor
make -s -C "$BENCH_HERE/bench/floor" OUT="$CLIENT" >/dev/null
sim_start floor "$SIM"
sim_pid=${_bench_sims[0]}

# a variant's name, and its client options (one per line)
variant_name() { echo "${1%%:*}"; }
variant_args() {	# VARIANT
	case $1 in
	default) ;;
	*:*) tr , '\n' <<<"${1#*:}" ;;
	*) echo "--$1" ;;
	esac
}

# one run of the client at one latency: prints its "name value ..." line
run_client() {	# LATENCY VARIANT [COMMAND...] (the client at its end)
	local latency=$1 variant=$2 vargs=()
	shift 2
	mapfile -t vargs < <(variant_args "$variant")
	sim_get "$SIM" "/config?latency_ms=$latency" >/dev/null
	sim_get "$SIM" /reset >/dev/null
	"$@" --url "http://127.0.0.1:$SIM/send" --calls "$CALLS" --inflight "$INFLIGHT" \
		--sim-pid "$sim_pid" ${ARGS[@]+"${ARGS[@]}"} ${vargs[@]+"${vargs[@]}"}
}

# the value of NAME in a line of "name value" pairs
field() {	# LINE NAME
	awk -v k="$2" '{ for (i = 1; i < NF; i += 2) if ($i == k) { print $(i + 1); exit } }' <<<"$1"
}

echo "http floor: $CALLS calls per run, $INFLIGHT in flight, $ROUNDS rounds, client options: ${FLOOR_ARGS:-none}, variants: ${VARIANTS[*]};"
echo "$(curl-config --version), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
cols="calls_per_s cpu_per_1k user_per_1k sys_per_1k sim_cpu_per_1k csw_per_call"
fmt='%-5s %7s %-16s %11s %10s %11s %10s %14s %12s\n'
printf "$fmt" round latency variant $cols
rows=()
nv=${#VARIANTS[@]}
for round in $(seq 1 "$ROUNDS"); do
	for latency in $LATENCIES; do
		# the order rotates from round to round: no variant always runs first
		for k in $(seq 0 $((nv - 1))); do
			variant=${VARIANTS[$(((k + round - 1) % nv))]}
			line=$(run_client "$latency" "$variant" "$CLIENT")
			row="$round $latency $(variant_name "$variant")"
			for c in $cols; do row+=" $(field "$line" "$c")"; done
			rows+=("$row")
			printf "$fmt" $row
		done
	done
done

# rows: round latency variant calls_per_s(4) cpu_per_1k(5) ...
median() {	# latency variant column
	printf '%s\n' "${rows[@]}" | awk -v l="$1" -v v="$2" -v c="$3" '$2 == l && $3 == v { print $c }' |
		median_values
}
# per round: variant's column / baseline's column, same round and latency
ratios() {	# latency variant column
	printf '%s\n' "${rows[@]}" | awk -v l="$1" -v v="$2" -v b="$(variant_name "${VARIANTS[0]}")" -v c="$3" '
		$2 == l && $3 == b { base[$1] = $c }
		$2 == l && $3 == v { mine[$1] = $c }
		END { for (r in mine) if (base[r] > 0) printf "%d %.3f\n", r, mine[r] / base[r] }' | sort -n | awk '{ print $2 }'
}
prefix() {	# latency variant
	if [ "$(variant_name "$2")" = "$(variant_name "${VARIANTS[0]}")" ]; then
		echo "floor_${1}ms"
	else
		echo "floor_${1}ms_$(variant_name "$2" | tr -c 'a-zA-Z0-9\n' _)"
	fi
}
mfmt='%7s %-16s %11s %10s %11s %10s %14s %12s\n'
echo "medians (load now $(cut -d' ' -f1-3 /proc/loadavg)):"
printf "$mfmt" latency variant $cols
for latency in $LATENCIES; do
	for variant in "${VARIANTS[@]}"; do
		line="$latency $(variant_name "$variant")"
		i=4
		for c in $cols; do
			m=$(median "$latency" "$(variant_name "$variant")" $i)
			line+=" $m"
			result "$(prefix "$latency" "$variant")_$c" "$m"
			i=$((i + 1))
		done
		printf "$mfmt" $line
	done
done >"$BENCH_DIR/medians"
if [ "$nv" -gt 1 ]; then
	echo "per-round ratios to ${VARIANTS[0]} (rounds in order; median):" >>"$BENCH_DIR/medians"
	for latency in $LATENCIES; do
		for variant in "${VARIANTS[@]:1}"; do
			v=$(variant_name "$variant")
			for what in cpu:5 rate:4; do
				r=$(ratios "$latency" "$v" "${what#*:}")
				m=$(median_values <<<"$r")
				printf '%5sms %-16s %s: %s; median %s\n' "$latency" "$v" "${what%%:*}" "$(echo $r)" "$m"
				result "$(prefix "$latency" "$variant")_${what%%:*}_ratio" "$m"
			done
		done
	done >>"$BENCH_DIR/medians"
fi
grep -v '^RESULT ' "$BENCH_DIR/medians"
results=$(grep '^RESULT ' "$BENCH_DIR/medians")

# system calls per call, by name, from a `perf stat -x,` file
per_call() {	# FILE WHO LATENCY VARIANT
	awk -F, -v n="$CALLS" -v who="$2" -v l="$3" -v v="$4" '
		$3 == "raw_syscalls:sys_enter" { total = $1 / n; next }
		$3 ~ /^syscalls:sys_enter_/ && $1 + 0 > 0 {
			name = substr($3, 20); c = $1 / n
			if (c >= 0.005) list = list sprintf(" %s %.2f", name, c) }
		END { printf "%s %sms %s: %.2f per call:%s\n", who, l, v, total, list }' "$1"
}

if [ "$SYSCALLS" = 1 ]; then
	echo "system calls per call (one run per latency and variant under perf stat):"
	events='raw_syscalls:sys_enter,syscalls:sys_enter_*'
	for latency in $LATENCIES; do
		for variant in "${VARIANTS[@]}"; do
			d=$BENCH_DIR/perf_${latency}_$(variant_name "$variant")
			mkdir "$d"
			mkfifo "$d/cc" "$d/ca" "$d/sc" "$d/sa"
			# held open here too, so that no open of a fifo waits for the other end
			exec {f1}<>"$d/cc" {f2}<>"$d/ca" {f3}<>"$d/sc" {f4}<>"$d/sa"
			perf stat -x, -D -1 --control "fifo:$d/sc,$d/sa" -e "$events" -p "$sim_pid" \
				-o "$d/sim" 2>>"$BENCH_DIR/perf.log" &
			perf_pid=$!
			run_client "$latency" "$variant" perf stat -x, -D -1 --control "fifo:$d/cc,$d/ca" -e "$events" \
				-o "$d/client" -- "$CLIENT" --perf-ctl "$d/cc,$d/ca" --perf-ctl "$d/sc,$d/sa" \
				2>>"$BENCH_DIR/perf.log" >/dev/null
			kill -INT "$perf_pid"
			wait "$perf_pid" || true
			perf_pid=
			exec {f1}<&- {f2}<&- {f3}<&- {f4}<&-
			v=$(variant_name "$variant")
			c=$(per_call "$d/client" client "$latency" "$v")
			s=$(per_call "$d/sim" simulator "$latency" "$v")
			echo "$c"
			echo "$s"
			results+=$'\n'"RESULT $(prefix "$latency" "$variant")_syscalls_per_call $(awk '{ print $4 }' <<<"$c")"
			results+=$'\n'"RESULT $(prefix "$latency" "$variant")_sim_syscalls_per_call $(awk '{ print $4 }' <<<"$s")"
		done
	done
fi
if [ "$IR" = 1 ]; then
	echo "user-space instructions per call (callgrind, 0 ms, 128 in flight):"
	sim_get "$SIM" "/config?latency_ms=0" >/dev/null
	for variant in "${VARIANTS[@]}"; do
		mapfile -t vargs < <(variant_args "$variant")
		ir=()
		for n in 2000 12000; do
			ir+=("$(valgrind --tool=callgrind --callgrind-out-file="$BENCH_DIR/callgrind.out" \
				"$CLIENT" --url "http://127.0.0.1:$SIM/send" --calls "$n" --inflight 128 \
				${ARGS[@]+"${ARGS[@]}"} ${vargs[@]+"${vargs[@]}"} 2>&1 >/dev/null |
				sed -n 's/.*Collected : \([0-9]*\).*/\1/p')")
		done
		v=$(( (ir[1] - ir[0]) / 10000 ))
		echo "client $(variant_name "$variant"): $v per call"
		results+=$'\n'"RESULT $(prefix 0 "$variant")_instructions_per_call $v"
	done
fi
echo "$results"
