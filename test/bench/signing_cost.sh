#!/usr/bin/env bash
# test/bench/signing_cost.sh: what Standard Webhooks signing costs the
# sender (notif_provider.signing, src/provider/webhook_sign.c), signed and
# unsigned calls side by side in one run.  One throwaway cluster, the
# simulator at 0 ms; each round drains the same backlog of JOBS
# at_least_once jobs twice, once with the provider unsigned and once signed
# with SECRETS secrets (the order alternates from round to round).  Per
# drain: the sender's CPU (its run time in nanoseconds, /proc/PID/schedstat:
# a clock tick, 10 ms, is about what signing 1,000 calls costs) per 1,000
# calls, jobs/s;
# per round the signed over the unsigned; and the medians.
#
#   bash test/bench/signing_cost.sh [JOBS] [SECRETS]   (defaults 20000 x BENCH_SCALE, 1)
#
# Environment: SIGN_ROUNDS [5]; BENCH_PORT, BENCH_SIM_PORT (see
# test/bench/lib/common.sh).  Needs the extension installed and the
# simulator built (make -C test/sim).  Prints a table, then RESULT lines:
# sign_<variant>_sender_cpu_per_1k (variant: unsigned, signed),
# sign_<variant>_jobs_per_s, sign_signed_over_unsigned_sender_cpu (the
# median of the rounds' ratios) and sign_cost_us_per_call (the median of
# the rounds' differences, in microseconds of sender CPU per call).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
JOBS=${1:-$(bench_scale 20000)}
SECRETS=${2:-1}
ROUNDS=${SIGN_ROUNDS:-5}
SIM=$BENCH_SIM_PORT
bench_dir signing
sim_start main "$SIM"
cluster_start "$BENCH_DIR/pg" "$BENCH_PORT" "notif_deliver.database = 'postgres'" \
	"max_wal_size = '4GB'" "checkpoint_timeout = '30min'" "synchronous_commit = off"
bench_lane_setup "$SIM" 256 at_least_once

# SECRETS keys of 32 bytes, as whsec_ secrets (a JSON list)
secrets=$(for i in $(seq "$SECRETS"); do
	printf '"whsec_%s"\n' "$(head -c 32 /dev/urandom | base64)"
done | paste -sd, -)

drained=$(nd_idle_sql)
# one drain of JOBS jobs with the provider as VARIANT; prints
# "variant seconds jobs_per_s sender_cpu_per_1k"
drain() {
	local v=$1 t0 t1 snd
	if [ "$v" = signed ]; then
		cluster_psql -c "UPDATE notif_provider SET signing = 'standard_webhooks', credentials = '{\"secrets\": [$secrets]}' WHERE name = 'default'" >/dev/null
	else
		cluster_psql -c "UPDATE notif_provider SET signing = NULL, credentials = NULL WHERE name = 'default'" >/dev/null
	fi
	sim_get "$SIM" /reset >/dev/null
	cluster_psql -c "TRUNCATE notif_job, notif_attempt CASCADE" \
		-c "SELECT count(notif_enqueue(g, 'bench', 'o', '{\"event\":\"order.paid\",\"order\":\"ord-5501\",\"amount\":129000}')) FROM generate_series(1, $JOBS) g" \
		-c "VACUUM ANALYZE notif_job" -c "CHECKPOINT" >/dev/null
	t0=$(date +%s.%N)
	cluster_psql -c "UPDATE notif_type SET paused = false WHERE code = 'bench'" >/dev/null
	wait_sql "SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender'" 30
	snd=$(sender_pids)
	local c0
	c0=$(cpu_ns $snd)
	drain_wait "$SIM" "$JOBS" "$drained"
	t1=$(date +%s.%N)
	local c1
	c1=$(cpu_ns $snd)
	end_drain bench "$v"
	awk -v v="$v" -v t0="$t0" -v t1="$t1" -v n="$JOBS" -v c=$((c1 - c0)) 'BEGIN {
		s = t1 - t0; printf "%s %.3f %.0f %.5f\n", v, s, n / s, c / 1e9 / n * 1000 }'
}

: >"$BENCH_DIR/drains"
for r in $(seq "$ROUNDS"); do
	order="unsigned signed"
	[ $((r % 2)) -eq 0 ] && order="signed unsigned"
	for v in $order; do
		line=$(drain "$v")
		echo "$r $line" | tee -a "$BENCH_DIR/drains"
	done
done

echo
printf '%-9s %8s %12s\n' variant jobs/s 'cpu s/1k'
for v in unsigned signed; do
	jps=$(awk -v v="$v" '$2 == v { print $4 }' "$BENCH_DIR/drains" | median_values)
	cpu=$(awk -v v="$v" '$2 == v { print $5 }' "$BENCH_DIR/drains" | median_values)
	printf '%-9s %8s %12s\n' "$v" "$jps" "$cpu"
	result "sign_${v}_jobs_per_s" "$jps"
	result "sign_${v}_sender_cpu_per_1k" "$cpu"
done
# per round: signed over unsigned, and the difference per call
awk '{ cpu[$1 " " $2] = $5 } END {
	for (k in cpu) { split(k, a, " "); if (a[2] == "signed") {
		u = cpu[a[1] " unsigned"]; if (u > 0) print cpu[k] / u } } }' "$BENCH_DIR/drains" |
	median_values | { read -r ratio; result sign_signed_over_unsigned_sender_cpu "$ratio"; }
awk '{ cpu[$1 " " $2] = $5 } END {
	for (k in cpu) { split(k, a, " "); if (a[2] == "signed") {
		printf "%.2f\n", (cpu[k] - cpu[a[1] " unsigned"]) * 1000 } } }' "$BENCH_DIR/drains" |
	median_values | { read -r us; result sign_cost_us_per_call "$us"; }
