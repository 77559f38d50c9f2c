#!/usr/bin/env bash
# test/bench/latency.sh: an idle system (issue 4, section 3).
#  1. Enqueue-commit to request-arrival latency of single OTPs (lane otp,
#     at_least_once), one at a time with a pause between them: p50 and p99
#     over 1,000 messages at full size (target p99 < 20 ms).  The start is the
#     clock_timestamp() taken in the enqueuing statement, just before its
#     commit (so the commit is counted in); the arrival is the simulator's
#     first receipt of the key (first_us in its ledger; same clock).
#  2. The CPU used by all notif_deliver processes (launcher and senders)
#     over 60 s (full size) with nothing queued (target < 1% of one core).
#
#   bash test/bench/latency.sh
#
# Environment: LAT_MESSAGES [1000 x BENCH_SCALE], LAT_GAP [0.01] seconds
# between messages, LAT_IDLE_SECONDS [60 x BENCH_SCALE]; BENCH_PORT,
# BENCH_SIM_PORT, BENCH_OUT (see test/bench/lib/common.sh).  Needs the extension
# installed and the simulator built.  Prints RESULT lines for test/bench/run.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
MSGS=${LAT_MESSAGES:-$(bench_scale 1000)}
GAP=${LAT_GAP:-0.01}
IDLE=${LAT_IDLE_SECONDS:-$(bench_scale 60)}
SIM=$BENCH_SIM_PORT

bench_dir latency
sim_start otp "$SIM"
cluster_start "$BENCH_DIR/pg" "$BENCH_PORT" "notif_deliver.database = 'postgres'" "max_worker_processes = 16"
cluster_psql <<SQL
CREATE EXTENSION notif_deliver;
INSERT INTO notif_provider (name, url, idempotency_header) VALUES ('sms', 'http://127.0.0.1:$SIM/send', 'Idempotency-Key');
INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, lane)
VALUES ('otp', 'at_least_once', 3, '15 seconds', 'sms', 'otp');
SQL
wait_sql "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'notif_deliver sender otp'" 30
sleep 1

echo "idle OTP latency over $MSGS messages, ${GAP}s apart, $(nproc) cores, $(pg_config --version)"
for i in $(seq 1 "$MSGS"); do
	echo "SELECT $i, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
	        FROM (SELECT notif_enqueue($i, 'otp', 'idle-$i', '{\"to\":\"+84912345678\",\"text\":\"Ma OTP: 123456\"}') OFFSET 0) e;"
	echo "SELECT pg_sleep($GAP);"
done | cluster_psql -At -F' ' | grep -v '^$' >"$BENCH_DIR/sent"
wait_sql "SELECT count(*) = $MSGS FROM notif_job WHERE kind = 'otp' AND status = 'sent'" 120
sim_get "$SIM" /ledger >"$BENCH_DIR/ledger"
awk 'FNR == NR { t[$1] = $2; next }
	{ split($1, k, ":"); if (k[1] == "otp" && (k[2] in t)) printf "%.3f\n", ($5 - t[k[2]]) / 1000 }' \
	"$BENCH_DIR/sent" "$BENCH_DIR/ledger" >"$BENCH_DIR/lat"
n=$(wc -l <"$BENCH_DIR/lat")
p50=$(percentile 50 "$BENCH_DIR/lat")
p99=$(percentile 99 "$BENCH_DIR/lat")
max=$(percentile 100 "$BENCH_DIR/lat")
echo "idle OTP: $n delivered, latency p50 $p50 ms, p99 $p99 ms, max $max ms (target p99 < 20 ms)"
[ -z "${BENCH_OUT:-}" ] || cp "$BENCH_DIR/lat" "$BENCH_OUT/idle_latency.dat"
result idle_otp_messages "$n"
result idle_otp_p50_ms "$p50"
result idle_otp_p99_ms "$p99"
result idle_otp_max_ms "$max"

# nothing queued: the CPU of the launcher and the senders over IDLE seconds
wait_sql "$(nd_idle_sql)" 60
sleep 2
pids=$(nd_pids | tr '\n' ' ')
c0=$(cpu_ns $pids)
sleep "$IDLE"
pids1=$(nd_pids | tr '\n' ' ')
c1=$(cpu_ns $pids)
[ "$pids" = "$pids1" ] || echo "note: the notif_deliver processes changed during the idle measurement ($pids -> $pids1)" >&2
pct=$(awk -v d=$((c1 - c0)) -v s="$IDLE" 'BEGIN { printf "%.4f", d / 1e9 / s * 100 }')
echo "idle CPU of the notif_deliver processes ($(echo $pids | wc -w) processes) over ${IDLE}s: ${pct}% of one core (target < 1%)"
result idle_cpu_seconds "$IDLE"
result idle_cpu_processes "$(echo $pids | wc -w)"
result idle_cpu_pct "$pct"
