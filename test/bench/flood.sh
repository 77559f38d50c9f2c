#!/usr/bin/env bash
# test/bench/flood.sh: isolation under a flood (issue 4, section 3).
# 1,000,000 promotions (lane bulk, at_most_once) drain to a provider that
# times out 1% of calls, while another session enqueues an OTP (lane otp,
# at_least_once, 3 tries, deadline 15 s) every 20 ms to another provider.
# Reports the OTPs' enqueue-commit to request-arrival latency p50/p99
# (target p99 < 500 ms), how many OTPs expired (target 0) or were lost, and
# the promotions' drain rate.  Two simulators, so that the bulk provider's
# timeouts are not the OTPs'.
#
#   bash test/bench/flood.sh
#
# With FLOOD_RESOLVE=1 (flood_resolve.sh), the same night with the 1.3
# means of resolving the unknown on: the bulk provider honours its
# idempotency key for 24 hours (simulator --dedup-window-ms, provider
# dedup_window; promotions get 3 tries), so the promotions' ambiguous calls
# are retried in their lane (after the backlog: a retry is due after the
# jobs queued before it, so a window shorter than the flood's drain would
# pass first); the OTP provider has a status lookup and the
# OTP type a resolve_wait of 2 s.  Its RESULT names start with FLOOD_TAG
# [flood_resolve] instead of flood.  Both report the promotions lost and
# duplicated, from the bulk simulator's ledger.
#
# Environment: FLOOD_JOBS [1000000 x BENCH_SCALE], FLOOD_OTP_GAP [0.02] s;
# FLOOD_RESOLVE [0]; FLOOD_TAG;
# BENCH_PORT, BENCH_SIM_PORT (+1), BENCH_OUT (see test/bench/lib/common.sh).
# Needs the extension installed and the simulator built.  Prints RESULT
# lines; BENCH_OUT gets flood_otp.dat (seconds since the flood began,
# latency ms) and flood_promo.dat (seconds, promotions finished).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
N=${FLOOD_JOBS:-$(bench_scale 1000000)}
GAP=${FLOOD_OTP_GAP:-0.02}
RESOLVE=${FLOOD_RESOLVE:-0}
if [ "$RESOLVE" = 1 ]; then
	TAG=${FLOOD_TAG:-flood_resolve}
	bulk_dedup=(--dedup-window-ms 86400000)
	promo_tries=3
	settings="UPDATE notif_provider SET dedup_window = '24 hours' WHERE name = 'bulk_sms';
UPDATE notif_provider SET lookup_url = 'http://127.0.0.1:$BENCH_SIM_PORT/status/{key}' WHERE name = 'sms';
UPDATE notif_type SET resolve_wait = '2 seconds' WHERE code = 'otp';"
else
	TAG=${FLOOD_TAG:-flood}
	bulk_dedup=()
	promo_tries=1
	settings=
fi
SIM_OTP=$BENCH_SIM_PORT
SIM_BULK=$((BENCH_SIM_PORT + 1))

bench_dir "$TAG"
sim_start otp "$SIM_OTP"
sim_start bulk "$SIM_BULK" --p-timeout 0.01 --q 0.5 --hold-ms 3000 --seed 11 "${bulk_dedup[@]}"
cluster_start "$BENCH_DIR/pg" "$BENCH_PORT" "notif_deliver.database = 'postgres'" \
	"notif_deliver.max_inflight = 512" "max_worker_processes = 16" "max_wal_size = '4GB'"
cluster_psql <<SQL
CREATE EXTENSION notif_deliver;
INSERT INTO notif_provider (name, url, idempotency_header, timeout, max_inflight) VALUES
  ('sms', 'http://127.0.0.1:$SIM_OTP/send', 'Idempotency-Key', '2 seconds', 64),
  ('bulk_sms', 'http://127.0.0.1:$SIM_BULK/send', 'Idempotency-Key', '1 second', 512);
INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, lane, paused) VALUES
  ('otp',   'at_least_once', 3, '15 seconds', 'sms',      'otp',  false),
  ('promo', 'at_most_once',  $promo_tries, NULL,         'bulk_sms', 'bulk', true);
$settings
SQL
echo "$TAG: $N promotions (1% of calls time out) while an OTP is enqueued every ${GAP}s; $(nproc) cores, $(pg_config --version)"
cluster_psql -c "SELECT count(notif_enqueue(g, 'promo', 'blackfriday', '{\"to\":\"+84900000000\",\"text\":\"Black Friday: -50% today\"}')) FROM generate_series(1, $N) g" \
	-c "CHECKPOINT" >/dev/null
wait_sql "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'notif_deliver sender otp'" 30

# the OTP session: one enqueue every GAP seconds until told to stop
(
	i=0
	while [ ! -e "$BENCH_DIR/stop" ]; do
		i=$((i + 1))
		echo "SELECT $i, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
		        FROM (SELECT notif_enqueue($i, 'otp', 'login-$i', '{\"to\":\"+84912345678\",\"text\":\"Ma OTP: 654321\"}') OFFSET 0) e;"
		sleep "$GAP"
	done
) | cluster_psql -At -F' ' >"$BENCH_DIR/otp_sent" &
trickle=$!

t0=$(date +%s%N)
cluster_psql -c "UPDATE notif_type SET paused = false WHERE code = 'promo'" >/dev/null
: >"$BENCH_DIR/promo_progress"
while :; do
	left=$(cluster_psql -At -c "$(nd_busy_sql promo)")
	now=$(date +%s%N)
	echo "$(awk -v a="$now" -v b="$t0" 'BEGIN { printf "%.2f", (a - b) / 1e9 }') $((N - left))" >>"$BENCH_DIR/promo_progress"
	[ "$left" -eq 0 ] && break
	sleep 1
done
t1=$(date +%s%N)
touch "$BENCH_DIR/stop"
wait "$trickle"
wait_sql "$(nd_idle_sql otp)" 120

drain=$(awk -v a="$t1" -v b="$t0" -v n="$N" 'BEGIN { printf "%.0f", n / ((a - b) / 1e9) }')
secs=$(awk -v a="$t1" -v b="$t0" 'BEGIN { printf "%.1f", (a - b) / 1e9 }')
sim_get "$SIM_OTP" /ledger >"$BENCH_DIR/ledger"
# latency of each OTP: first arrival minus the enqueue's clock, and when it was enqueued
awk -v t0="$t0" 'FNR == NR { t[$1] = $2; next }
	{ split($1, k, ":"); if (k[1] == "otp" && (k[2] in t))
		printf "%.3f %.3f\n", (t[k[2]] - t0 / 1000) / 1e6, ($5 - t[k[2]]) / 1000 }' \
	"$BENCH_DIR/otp_sent" "$BENCH_DIR/ledger" | sort -n >"$BENCH_DIR/otp_lat"
awk '{ print $2 }' "$BENCH_DIR/otp_lat" >"$BENCH_DIR/lat"
otps=$(wc -l <"$BENCH_DIR/otp_sent")
delivered=$(awk '$1 ~ /^otp:/ && $3 >= 1' "$BENCH_DIR/ledger" | wc -l)
read -r expired failed <<<"$(cluster_psql -At -F' ' -c "SELECT count(*) FILTER (WHERE status = 'expired'), count(*) FILTER (WHERE status = 'failed') FROM notif_job WHERE kind = 'otp'")"
p50=$(percentile 50 "$BENCH_DIR/lat")
p99=$(percentile 99 "$BENCH_DIR/lat")
max=$(percentile 100 "$BENCH_DIR/lat")
promo_timeouts=$(sim_get "$SIM_BULK" /stats | awk '$1 == "timeouts" { print $2 }')
read -r promo_lost promo_dup <<<"$(sim_get "$SIM_BULK" /ledger | awk -v n="$N" '$1 ~ /^promo:/ {
	if ($3 >= 1) got++; if ($3 > 1) dup += $3 - 1 } END { printf "%d %d\n", n - got, dup + 0 }')"
echo "promotions: $N drained in ${secs}s = $drain/s ($promo_timeouts calls timed out; $promo_lost lost, $promo_dup duplicated)"
echo "OTPs during the flood: $otps enqueued, $delivered delivered, $expired expired, $failed failed;" \
	"latency p50 $p50 ms, p99 $p99 ms, max $max ms (target p99 < 500 ms, 0 expired)"
if [ -n "${BENCH_OUT:-}" ]; then
	cp "$BENCH_DIR/otp_lat" "$BENCH_OUT/${TAG}_otp.dat"
	cp "$BENCH_DIR/promo_progress" "$BENCH_OUT/${TAG}_promo.dat"
fi
result ${TAG}_promotions "$N"
result ${TAG}_promo_seconds "$secs"
result ${TAG}_promo_jobs_per_s "$drain"
result ${TAG}_promo_timeouts "$promo_timeouts"
result ${TAG}_otps "$otps"
result ${TAG}_otp_delivered "$delivered"
result ${TAG}_otp_lost $((otps - delivered))
result ${TAG}_otp_expired "$expired"
result ${TAG}_otp_failed "$failed"
result ${TAG}_otp_p50_ms "$p50"
result ${TAG}_otp_p99_ms "$p99"
result ${TAG}_otp_max_ms "$max"
result "${TAG}_promo_lost" "$promo_lost"
result "${TAG}_promo_dup" "$promo_dup"
