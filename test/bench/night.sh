#!/usr/bin/env bash
# test/bench/night.sh: the seeds' Friday night as one scenario (issue 32).
# Two providers behind TLS fronts (nghttpx, a throwaway self-signed
# certificate given to each provider row as its ca_cert), each a provider
# simulator answering after a lognormal latency (median 120 ms, p99
# 600 ms) and timing out 0.5% of calls (held, never answered; half of
# those delivered all the same, q = 0.5):
#   sms    an SMS-style provider over HTTP/1.1 (the front offers only
#          http/1.1: a connection per call in flight)
#   push   a push-style provider over HTTP/2 (the front offers h2, 100
#          streams per connection, as FCM's do; max_connections of them):
#          the simulator's plain JSON over h2, not FCM's format and OAuth
#          (push_sim.pl, which has those, is a Perl test server that
#          sustains nowhere near this rate)
# The load, from three sessions inside PostgreSQL (procedures that pace
# themselves by the clock):
#   promotions  at_most_once (3 tries: a call that certainly did not reach
#               the provider, a connection refused or timed out, is made
#               again; an ambiguous one never), lane bulk, half to sms (promo_sms) and half
#               to push (promo_push), enqueued in small transactions at
#               NIGHT_RATE per second (default 5,000,000 in 15 minutes)
#               until NIGHT_PROMOS (5,000,000 x BENCH_SCALE: the scale
#               shortens the night, not its rate)
#   alerts      at_least_once (5 tries), lane alert, to sms, at a steady
#               NIGHT_ALERT_RATE per second, one transaction each
#   OTPs        at_least_once (3 tries, deadline 15 s), lane otp, to sms
#               through a provider row of their own (its own max_inflight,
#               same front and simulator), arriving as people log in
#               (Poisson, NIGHT_OTP_RATE per second), one transaction each
# The alerts and OTPs start just before the promotions and stop once the
# promotions are drained.  The concurrency this needs is rate x latency
# (about 1,000 calls in flight at 5,556/s): notif_deliver.max_inflight and
# the providers' max_inflight are set to NIGHT_INFLIGHT, the push
# provider's max_connections to NIGHT_PUSH_CONNECTIONS.
#
#   bash test/bench/night.sh
#
# Environment: NIGHT_PROMOS [5000000 x BENCH_SCALE]; NIGHT_RATE [5556]
# promotions/s offered; NIGHT_OTP_RATE [20]/s; NIGHT_ALERT_RATE [50]/s;
# NIGHT_INFLIGHT [3000] (per lane; each bulk provider gets half, the OTP
# and alert providers 256); NIGHT_PUSH_CONNECTIONS [16];
# NIGHT_BULK_SENDERS [1] (senders of lane bulk); NIGHT_TIMEOUT [3 s]
# (every provider's timeout); NIGHT_BATCH [1] (the bulk providers' batch_max:
# night_batching in night_lib.sh); NIGHT_RESULT_PREFIX [night] (the
# results' and .dat files' names; test/bench/night_batch.sh's night_batch);
# NIGHT_FRONT_PORT [28453] (and the next one);
# BENCH_PORT, BENCH_SIM_PORT (+1), BENCH_OUT (see test/bench/lib/common.sh).
# Needs nghttpx (nghttp2-proxy), openssl, the extension installed and the
# simulator built.  Prints what it measured as it goes, then RESULT lines
# (night_*) and the ROW table night_types (per type: enqueued, delivered,
# lost, duplicated, expired, failed); BENCH_OUT gets night_promo.dat
# (seconds since the night began, promotions enqueued, promotions
# finished, calls in flight to sms_bulk, to push) and night_otp.dat,
# night_alert.dat (seconds, latency ms).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/night_lib.sh"
N=${NIGHT_PROMOS:-$(bench_scale 5000000)}
RATE=${NIGHT_RATE:-5556}
OTP_RATE=${NIGHT_OTP_RATE:-20}
ALERT_RATE=${NIGHT_ALERT_RATE:-50}
INFLIGHT=${NIGHT_INFLIGHT:-3000}
PUSH_CONNS=${NIGHT_PUSH_CONNECTIONS:-16}
BULK_SENDERS=${NIGHT_BULK_SENDERS:-1}
TIMEOUT=${NIGHT_TIMEOUT:-3}
BATCH=${NIGHT_BATCH:-1}
# the results' names: night_*, or those of test/bench/night_batch.sh
P=${NIGHT_RESULT_PREFIX:-night}
# below the ephemeral range, as http2.sh's
FRONT_SMS=${NIGHT_FRONT_PORT:-28453}
night_rig night "7 days"
night_batching "$BATCH"
echo "night: scale $BENCH_SCALE: $N promotions offered at $RATE/s (5,000,000 in 15 minutes at scale 1)," \
	"alerts at $ALERT_RATE/s, OTPs at $OTP_RATE/s (Poisson); providers lognormal (median 120 ms, p99 600 ms)," \
	"0.5% timeouts ($TIMEOUT s), sms over HTTP/1.1 and push over h2 ($PUSH_CONNS connections), both through TLS;" \
	"max_inflight $INFLIGHT per lane; bulk providers $([ "$BATCH" -gt 1 ] && echo "in batches of $BATCH" || echo "one message per call");" \
	"$(nproc) cores, $(pg_config --version)"

# RssAnon and VmHWM of a process, in kB
rss_of() {
	awk '/^RssAnon:/ { a = $2 } /^VmHWM:/ { h = $2 } END { print a + 0, h + 0 }' "/proc/$1/status" 2>/dev/null || echo "0 0"
}
declare -A sender_pid max_anon
for lane in otp alert bulk; do
	sender_pid[$lane]=$(cluster_psql -At -c "SELECT string_agg(pid::text, ' ') FROM pg_stat_activity WHERE application_name = 'notif_deliver sender $lane'")
	max_anon[$lane]=0
done

# the machine's CPU (it is shared: what the others used shows here)
machine_busy() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
pg0=$(cluster_cpu_ticks)
m0=$(machine_busy)
bulk0=$(cpu_ticks ${sender_pid[bulk]})
frs0=$(cpu_ticks $(front_pids "$front_pid_sms"))
frp0=$(cpu_ticks $(front_pids "$front_pid_push"))
sims0=$(cpu_ticks "$sim_pid_sms")
simp0=$(cpu_ticks "$sim_pid_push")
t0=$(date +%s%N)
cluster_psql -c "CALL night_trickle('otp', $OTP_RATE, true)" >"$BENCH_DIR/trickle_otp.log" 2>&1 &
otp_pid=$!
cluster_psql -c "CALL night_trickle('alert', $ALERT_RATE, false)" >"$BENCH_DIR/trickle_alert.log" 2>&1 &
alert_pid=$!
cluster_psql -c "CALL night_promos($N, $RATE)" >"$BENCH_DIR/promos.log" 2>&1 &
promo_pid=$!

# every second: promotions enqueued and finished, calls in flight per provider, senders' memory
: >"$BENCH_DIR/promo_progress"
enq_done=
max_sms=0
max_push=0
while :; do
	read -r enq busy in_sms in_push <<<"$(cluster_psql -At -F' ' -c "
		SELECT (SELECT enqueued FROM night_progress),
		       (SELECT count(*) FROM notif_active WHERE kind IN ('promo_sms', 'promo_push')),
		       coalesce((SELECT sum(in_flight) FROM notif_provider_slots() WHERE provider = 'sms_bulk'), 0),
		       coalesce((SELECT sum(in_flight) FROM notif_provider_slots() WHERE provider = 'push'), 0)")"
	now=$(date +%s%N)
	s=$(awk -v a="$now" -v b="$t0" 'BEGIN { printf "%.2f", (a - b) / 1e9 }')
	echo "$s $enq $((enq - busy)) $in_sms $in_push" >>"$BENCH_DIR/promo_progress"
	[ "$in_sms" -gt "$max_sms" ] && max_sms=$in_sms
	[ "$in_push" -gt "$max_push" ] && max_push=$in_push
	for lane in otp alert bulk; do
		for p in ${sender_pid[$lane]}; do
			read -r a _ <<<"$(rss_of "$p")"
			[ "$a" -gt "${max_anon[$lane]}" ] && max_anon[$lane]=$a
		done
	done
	if [ -z "$enq_done" ] && ! kill -0 "$promo_pid" 2>/dev/null; then
		wait "$promo_pid" || { cat "$BENCH_DIR/promos.log" >&2; exit 1; }
		enq_done=$now
	fi
	[ -n "$enq_done" ] && [ "$busy" -eq 0 ] && break
	if [ $((${s%.*} % 10)) -eq 0 ]; then
		echo "  ${s}s: $enq enqueued, $((enq - busy)) finished; in flight: sms_bulk $in_sms, push $in_push"
	fi
	sleep 1
done
t1=$(date +%s%N)
bulk1=$(cpu_ticks ${sender_pid[bulk]})
pg_drain=$(cluster_cpu_ticks)
m1=$(machine_busy)
cluster_psql -c "UPDATE night_stop SET stop = true" >/dev/null
wait "$otp_pid" || { cat "$BENCH_DIR/trickle_otp.log" >&2; exit 1; }
wait "$alert_pid" || { cat "$BENCH_DIR/trickle_alert.log" >&2; exit 1; }
# the OTPs' and alerts' last calls and retries
wait_sql "$(nd_idle_sql)" 300
t2=$(date +%s%N)
pg1=$(cluster_cpu_ticks)
frs1=$(cpu_ticks $(front_pids "$front_pid_sms"))
frp1=$(cpu_ticks $(front_pids "$front_pid_push"))
sims1=$(cpu_ticks "$sim_pid_sms")
simp1=$(cpu_ticks "$sim_pid_push")
declare -A hwm anon
for lane in otp alert bulk; do
	hwm[$lane]=0
	anon[$lane]=0
	for p in ${sender_pid[$lane]}; do
		read -r a h <<<"$(rss_of "$p")"
		[ "$h" -gt "${hwm[$lane]}" ] && hwm[$lane]=$h
		[ "$a" -gt "${anon[$lane]}" ] && anon[$lane]=$a
	done
done

# ---- what happened
sim_get "$SIM_SMS" /ledger >"$BENCH_DIR/ledger"
sim_get "$SIM_PUSH" /ledger >>"$BENCH_DIR/ledger"
cluster_psql -At -F' ' -c "COPY night_log TO STDOUT WITH (DELIMITER ' ')" >"$BENCH_DIR/sent_log"
cluster_psql -At -F' ' -c "SELECT kind, count(*), count(*) FILTER (WHERE status = 'expired'),
	count(*) FILTER (WHERE status = 'failed') FROM notif_job GROUP BY kind ORDER BY kind" >"$BENCH_DIR/jobs"
# per type: enqueued, delivered (at least once), lost, duplicated (copies beyond the first), expired, failed
awk 'FNR == NR { n[$1] = $2; ex[$1] = $3; fa[$1] = $4; next }
	{ split($1, k, ":"); if ($3 >= 1) { d[k[1]]++; dup[k[1]] += $3 - 1 } }
	END { for (t in n) printf "%s %d %d %d %d %d %d\n", t, n[t], d[t], n[t] - d[t], dup[t], ex[t], fa[t] }' \
	"$BENCH_DIR/jobs" "$BENCH_DIR/ledger" | sort >"$BENCH_DIR/types"
# latency of each OTP and alert: its first arrival at the simulator minus its enqueue's clock
for k in otp alert; do
	awk -v k="$k" -v t0="$t0" 'FNR == NR { if ($1 == k) t[$2] = $3; next }
		{ split($1, p, ":"); if (p[1] == k && (p[2] in t) && $2 >= 1)
			printf "%.3f %.3f\n", (t[p[2]] - t0 / 1000) / 1e6, ($5 - t[p[2]]) / 1000 }' \
		"$BENCH_DIR/sent_log" "$BENCH_DIR/ledger" | sort -n >"$BENCH_DIR/${k}_lat"
	awk '{ print $2 }' "$BENCH_DIR/${k}_lat" >"$BENCH_DIR/${k}_ms"
done

secs=$(awk -v a="$t1" -v b="$t0" 'BEGIN { printf "%.1f", (a - b) / 1e9 }')
enq_secs=$(awk -v a="$enq_done" -v b="$t0" 'BEGIN { printf "%.1f", (a - b) / 1e9 }')
offered=$(awk -v s="$enq_secs" -v n="$N" 'BEGIN { printf "%.0f", n / s }')
sustained=$(awk -v s="$secs" -v n="$N" 'BEGIN { printf "%.0f", n / s }')
jobs_all=$(awk '{ t += $2 } END { print t }' "$BENCH_DIR/types")
jobs_sms=$(awk '$1 != "promo_push" { t += $2 } END { print t }' "$BENCH_DIR/types")
jobs_push=$(awk '$1 == "promo_push" { t += $2 } END { print t + 0 }' "$BENCH_DIR/types")
per1k() {	# TICKS JOBS: CPU seconds per 1,000 jobs
	awk -v t="$1" -v n="$2" -v hz="$HZ" 'BEGIN { printf "%.3f", (n > 0 ? t / hz / n * 1000 : 0) }'
}
conns() {	# distinct client ports in a front's access log
	awk '{ print $1 }' "$BENCH_DIR/access_$1.log" | sort -u | wc -l
}
calls_sms=$(wc -l <"$BENCH_DIR/access_sms.log")
calls_push=$(wc -l <"$BENCH_DIR/access_push.log")
timeouts_sms=$(sim_get "$SIM_SMS" /stats | awk '$1 == "timeouts" { print $2 }')
timeouts_push=$(sim_get "$SIM_PUSH" /stats | awk '$1 == "timeouts" { print $2 }')

echo "promotions: $N enqueued in ${enq_secs}s ($offered/s offered), drained in ${secs}s: $sustained/s sustained"
echo "calls: sms $calls_sms over $(conns sms) connections ($timeouts_sms timed out), push $calls_push over $(conns push) connections ($timeouts_push timed out);" \
	"most in flight: sms_bulk $max_sms, push $max_push"
printf '%-11s %9s %9s %7s %10s %8s %7s\n' type enqueued delivered lost duplicated expired failed
while read -r t n d l dup ex fa; do
	printf '%-11s %9s %9s %7s %10s %8s %7s\n' "$t" "$n" "$d" "$l" "$dup" "$ex" "$fa"
	row ${P}_types "$t" "$n" "$d" "$l" "$dup" "$ex" "$fa"
	result "${P}_${t}_enqueued" "$n"
	result "${P}_${t}_lost" "$l"
	result "${P}_${t}_duplicated" "$dup"
	result "${P}_${t}_expired" "$ex"
	result "${P}_${t}_failed" "$fa"
done <"$BENCH_DIR/types"
for k in otp alert; do
	p50=$(percentile 50 "$BENCH_DIR/${k}_ms")
	p99=$(percentile 99 "$BENCH_DIR/${k}_ms")
	max=$(percentile 100 "$BENCH_DIR/${k}_ms")
	echo "$k latency (enqueue to first arrival at the provider): p50 $p50 ms, p99 $p99 ms, max $max ms"
	result "${P}_${k}_p50_ms" "$p50"
	result "${P}_${k}_p99_ms" "$p99"
	result "${P}_${k}_max_ms" "$max"
	# and until the provider's acceptance was recorded (sent_at)
	read -r d50 d99 dmax <<<"$(cluster_psql -At -F' ' -c "
		SELECT round(percentile_disc(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1),
		       round(percentile_disc(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 1), round(max(ms)::numeric, 1)
		  FROM (SELECT extract(epoch FROM j.sent_at) * 1000 - l.t_us / 1000.0 AS ms
		          FROM notif_job j JOIN night_log l ON l.kind = j.kind AND l.id = j.user_id
		         WHERE j.kind = '$k' AND j.status = 'sent') s")"
	echo "$k latency to sent (enqueue to the provider's acceptance recorded): p50 $d50 ms, p99 $d99 ms, max $dmax ms"
	result "${P}_${k}_sent_p50_ms" "$d50"
	result "${P}_${k}_sent_p99_ms" "$d99"
	result "${P}_${k}_sent_max_ms" "$dmax"
done
# every call by outcome, per type (unreached: certainly not delivered, e.g. a connection timed out)
echo "calls by outcome:"
cluster_psql -At -F' ' -c "SELECT j.kind, count(*) FILTER (WHERE c.outcome = 'accepted'),
	count(*) FILTER (WHERE c.outcome = 'rejected'), count(*) FILTER (WHERE c.outcome = 'unreached'),
	count(*) FILTER (WHERE c.outcome = 'unknown')
	FROM notif_calls c JOIN notif_job j ON j.id = c.job_id GROUP BY 1 ORDER BY 1" >"$BENCH_DIR/calls"
printf '%-11s %9s %9s %9s %8s\n' type accepted rejected unreached unknown
while read -r t a r u k; do
	printf '%-11s %9s %9s %9s %8s\n' "$t" "$a" "$r" "$u" "$k"
	row ${P}_calls "$t" "$a" "$r" "$u" "$k"
done <"$BENCH_DIR/calls"
# why a job failed or expired, if any did
cluster_psql -c "SELECT kind, status, regexp_replace(last_error, '[0-9]+', 'N', 'g') AS last_error, count(*) FROM notif_job WHERE status IN ('failed', 'expired')
	GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
pg_1k=$(per1k $((pg1 - pg0)) "$jobs_all")
frs_1k=$(per1k $((frs1 - frs0)) "$jobs_sms")
frp_1k=$(per1k $((frp1 - frp0)) "$jobs_push")
sims_1k=$(per1k $((sims1 - sims0)) "$jobs_sms")
simp_1k=$(per1k $((simp1 - simp0)) "$jobs_push")
echo "CPU s per 1,000 jobs: PostgreSQL with the senders and the load sessions $pg_1k ($jobs_all jobs in $(awk -v a="$t2" -v b="$t0" 'BEGIN { printf "%.1f", (a - b) / 1e9 }') s);" \
	"sms front $frs_1k, push front $frp_1k (per 1,000 of their jobs); simulators $sims_1k, $simp_1k"
# how busy the bulk lane's sender(s) and the whole cluster were while the promotions drained
bulk_pct=$(awk -v t=$((bulk1 - bulk0)) -v a="$t1" -v b="$t0" -v hz="$HZ" 'BEGIN { printf "%.0f", t / hz / ((a - b) / 1e9) * 100 }')
pg_pct=$(awk -v t=$((pg_drain - pg0)) -v a="$t1" -v b="$t0" -v hz="$HZ" 'BEGIN { printf "%.0f", t / hz / ((a - b) / 1e9) * 100 }')
m_pct=$(awk -v t=$((m1 - m0)) -v a="$t1" -v b="$t0" -v hz="$HZ" 'BEGIN { printf "%.0f", t / hz / ((a - b) / 1e9) * 100 }')
echo "during the drain: the bulk sender(s) used ${bulk_pct}% of one core, the whole cluster ${pg_pct}%," \
	"the machine ${m_pct}% (everything on it, of $(($(nproc) * 100))%)"
result ${P}_machine_cpu_pct "$m_pct"
result ${P}_bulk_sender_cpu_pct "$bulk_pct"
result ${P}_pg_cpu_pct "$pg_pct"
for lane in otp alert bulk; do
	echo "sender $lane: RssAnon $((anon[$lane])) kB at the end, at most ${max_anon[$lane]} kB; peak RSS (VmHWM) ${hwm[$lane]} kB"
	result "${P}_sender_${lane}_anon_max_kb" "${max_anon[$lane]}"
	result "${P}_sender_${lane}_hwm_kb" "${hwm[$lane]}"
done
if [ -n "${BENCH_OUT:-}" ]; then
	cp "$BENCH_DIR/promo_progress" "$BENCH_OUT/${P}_promo.dat"
	cp "$BENCH_DIR/otp_lat" "$BENCH_OUT/${P}_otp.dat"
	cp "$BENCH_DIR/alert_lat" "$BENCH_OUT/${P}_alert.dat"
fi
result ${P}_scale "$(awk -v n="$N" 'BEGIN { print n / 5000000 }')"	# the share of the whole night run
result ${P}_promotions "$N"
result ${P}_rate_target "$RATE"
result ${P}_rate_offered "$offered"
result ${P}_promo_enqueue_seconds "$enq_secs"
result ${P}_promo_seconds "$secs"
result ${P}_promo_jobs_per_s "$sustained"
result ${P}_inflight_max_sms_bulk "$max_sms"
result ${P}_inflight_max_push "$max_push"
result ${P}_max_inflight_setting "$INFLIGHT"
result ${P}_push_max_connections "$PUSH_CONNS"
result ${P}_sms_calls "$calls_sms"
result ${P}_sms_connections "$(conns sms)"
result ${P}_sms_timeouts "$timeouts_sms"
result ${P}_push_calls "$calls_push"
result ${P}_push_connections "$(conns push)"
result ${P}_push_timeouts "$timeouts_push"
result ${P}_jobs "$jobs_all"
result ${P}_pg_cpu_per_1k "$pg_1k"
result ${P}_sms_front_cpu_per_1k "$frs_1k"
result ${P}_push_front_cpu_per_1k "$frp_1k"
result ${P}_sms_sim_cpu_per_1k "$sims_1k"
result ${P}_push_sim_cpu_per_1k "$simp_1k"
# PostgreSQL (senders and load sessions) and both fronts, per 1,000 jobs of the night
result ${P}_all_cpu_per_1k "$(per1k $((pg1 - pg0 + frs1 - frs0 + frp1 - frp0)) "$jobs_all")"
result ${P}_batch "$BATCH"
result ${P}_batch_wait_ms "$([ "$BATCH" -gt 1 ] && echo "${NIGHT_BATCH_WAIT_MS:-0}" || echo -)"
# the drain's time over the offering's (1.1 at most: the offered rate sustained)
result ${P}_drain_over_offer "$(awk -v a="$secs" -v b="$enq_secs" 'BEGIN { printf "%.3f", a / b }')"
