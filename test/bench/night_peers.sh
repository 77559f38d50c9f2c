#!/usr/bin/env bash
# test/bench/night_peers.sh: the seeds' Friday night (test/bench/night.sh)
# through notif_deliver, one call per message and with provider batches
# (issue 45: the bulk providers take NIGHT_BATCH messages per call on the
# simulators' /batch, night_batching in night_lib.sh), and through the
# fastest peer, PgQ 3.5 + pgqd with a Node consumer
# (test/bench/peers/pgq_night.cjs), in one run (issue 32).
# One rig (night_lib.sh's: the two provider simulators behind their TLS
# fronts, sms over HTTP/1.1 and push over HTTP/2, lognormal latency median
# 120 ms p99 600 ms, 0.5% of calls held past the timeout) and one cluster
# with both systems; ROUNDS rounds, each a night of each of SYSTEMS (nd:
# notif_deliver one call per message, ndb: with batches, pgq: PgQ; each
# round the list turned by one place), with the simulators' ledgers reset
# before each and only the system under test running a worker.
#
# The same load for both, from the same procedures (night_lib.sh): NIGHT_PEERS_PROMOS
# promotions at NIGHT_RATE per second in small transactions (PgQ: events
# of the queue night_bulk), alerts at NIGHT_ALERT_RATE per second (PgQ:
# queue night_alert) and OTPs, Poisson, NIGHT_OTP_RATE per second (PgQ:
# queue night_otp), one transaction each, from just before the promotions
# until they are drained.  PgQ has no priorities: the OTPs and the alerts
# get a queue and a consumer process of their own, as notif_deliver's get a
# lane (a sender) each; the promotions one queue and one consumer process,
# as notif_deliver's lane bulk one sender.  The consumer applies
# notif_deliver's per-type rules of the night (tries, at most / at least
# once, the OTPs' 15 s deadline) and calls the providers through the same
# fronts with undici.request: HTTP/1.1 keep-alive to sms, HTTP/2 (allowH2)
# to push, trusting the throwaway CA, with the same caps (calls in flight
# NIGHT_INFLIGHT per lane, half for each bulk provider; NIGHT_PUSH_CONNECTIONS
# HTTP/2 connections of 100 streams; 256 for the OTPs and for the alerts)
# and the same NIGHT_TIMEOUT.  A consumer behind takes what waits in one
# batch, at most NIGHT_PGQ_BATCH events (see pgq_night.cjs).
#
# Per night: the promotions' drain time (from the first enqueue to the last
# promotion finished: recorded by notif_deliver, its batch finished by
# PgQ's consumer) and sustained rate; the OTPs' latency from the enqueue's
# clock to their first arrival at the provider, p50/p99/max, and how many
# expired; per type enqueued, delivered, lost, duplicated (the simulators'
# ledgers), expired and given up; CPU seconds per 1,000 jobs of PostgreSQL
# (with the enqueueing sessions; notif_deliver's senders are in it) and of
# the worker (PgQ: the three Node processes and pgqd), the total, the TLS
# fronts' (nghttpx: the providers' side of each call) and the total with
# them; the calls each front took; the connections opened through each
# front and the ALPN they used; the bulk worker's peak memory.  Then
# notif_deliver / PgQ, notif_deliver with batches / PgQ and with batches /
# without, per round, side by side.
#
#   bash test/bench/night_peers.sh
#
# Environment: NIGHT_PEERS_PROMOS [200000 x BENCH_SCALE: 2 x 3 nights of
# about a minute at scale 1 on 2 cores]; as night.sh NIGHT_RATE [5556],
# NIGHT_OTP_RATE [20], NIGHT_ALERT_RATE [50], NIGHT_INFLIGHT [3000],
# NIGHT_PUSH_CONNECTIONS [16], NIGHT_TIMEOUT [3 s]; NIGHT_PEERS_ROUNDS [3],
# NIGHT_PGQ_BATCH [20000], NIGHT_BATCH [100] (ndb's batch_max),
# NIGHT_BATCH_WAIT_MS [100] (ndb's batch_wait),
# NIGHT_PEERS_SYSTEMS ["nd ndb pgq"],
# NIGHT_PEERS_FRONT_PORT [28463] (and the next one); NIGHT_PEERS_PREFIX
# [night_peers] (the names of the results and tables); BENCH_PORT,
# BENCH_SIM_PORT (+1), BENCH_OUT (see lib/common.sh).  Needs what night.sh needs
# and what peers.sh needs (Node 20, npm, PgQ and pgqd: test/deps.sh
# --bench, run by this script as root).  Prints RESULT lines (night_peers_*)
# and the ROW tables night_peers (a row per night), night_peers_cost (a
# row per night: calls, CPU with the fronts), night_peers_types (per
# night and type), night_peers_ratio (per round: nd / pgq),
# night_peers_ndb_over_pgq and night_peers_ndb_over_nd; after each PgQ night
# the calls its consumer left ambiguous, gave up or let expire, by type and
# reason (its logs go to BENCH_OUT/night_peers_pgq_rROUND.log when set).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/night_lib.sh"
. "$(dirname "$0")/lib/peers_lib.sh"
N=${NIGHT_PEERS_PROMOS:-$(bench_scale 200000)}
RATE=${NIGHT_RATE:-5556}
OTP_RATE=${NIGHT_OTP_RATE:-20}
ALERT_RATE=${NIGHT_ALERT_RATE:-50}
INFLIGHT=${NIGHT_INFLIGHT:-3000}
PUSH_CONNS=${NIGHT_PUSH_CONNECTIONS:-16}
BULK_SENDERS=1
TIMEOUT=${NIGHT_TIMEOUT:-3}
ROUNDS=${NIGHT_PEERS_ROUNDS:-3}
PGQ_BATCH=${NIGHT_PGQ_BATCH:-20000}
BATCH=${NIGHT_BATCH:-100}
export NIGHT_BATCH_WAIT_MS=${NIGHT_BATCH_WAIT_MS:-100}
SYSTEMS=${NIGHT_PEERS_SYSTEMS:-nd ndb pgq}
# not night.sh's ports: the two scripts can run side by side
FRONT_SMS=${NIGHT_PEERS_FRONT_PORT:-28463}
# the results' names: night_peers_*, or NIGHT_PEERS_PREFIX's (night_full.sh)
P=${NIGHT_PEERS_PREFIX:-night_peers}

if [ "$(id -u)" = 0 ]; then bash "$BENCH_HERE/deps.sh" --bench >/dev/null; fi
night_rig night_peers "7 days" "max_connections = 100"
trap 'worker_stop pgq; bench_cleanup' EXIT
peers_install
cluster_psql >/dev/null <<SQL
CREATE EXTENSION pgq;
SELECT pgq.create_queue(q), pgq.register_consumer(q, 'bench'),
       -- a tick as soon as there are events (the default waits up to 3 s for 500)
       pgq.set_queue_config(q, 'ticker_max_lag', '0.1 seconds')
  FROM unnest(ARRAY['night_bulk', 'night_alert', 'night_otp']) q;
SQL
export DATABASE_URL="postgresql://postgres@/postgres?host=$CLUSTER_DIR&port=$CLUSTER_PORT"
export NIGHT_CA=$BENCH_DIR/srv.crt NIGHT_TIMEOUT_MS=$((TIMEOUT * 1000))
export NIGHT_SMS_URL=https://127.0.0.1:$FRONT_SMS/send NIGHT_PUSH_URL=https://127.0.0.1:$FRONT_PUSH/send
export NIGHT_SMS_CONNECTIONS=$((INFLIGHT / 2)) NIGHT_PUSH_CONNECTIONS=$PUSH_CONNS NIGHT_PUSH_STREAMS=100
export NIGHT_SMALL_CONNECTIONS=256 PGQ_BATCH
echo "night_peers: $N promotions (scale $(awk -v n="$N" 'BEGIN { print n / 5000000 }') of the night) offered at $RATE/s, alerts at $ALERT_RATE/s, OTPs at $OTP_RATE/s (Poisson)," \
	"through notif_deliver and through PgQ + pgqd + a Node consumer, $ROUNDS rounds; max_inflight $INFLIGHT per lane," \
	"push over h2 ($PUSH_CONNS connections), timeout $TIMEOUT s; PgQ batches of what waits, at most $PGQ_BATCH events;" \
	"$(nproc) cores, $(pg_config --version), load $(cut -d' ' -f1-3 /proc/loadavg)"

# RssAnon and VmHWM of a process, in kB
rss_of() {
	awk '/^RssAnon:/ { a = $2 } /^VmHWM:/ { h = $2 } END { print a + 0, h + 0 }' "/proc/$1/status" 2>/dev/null || echo "0 0"
}
now_ns() { date +%s%N; }
secs_between() { awk -v a="$2" -v b="$1" 'BEGIN { printf "%.1f", (a - b) / 1e9 }'; }
per1k() {	# TICKS JOBS: CPU seconds per 1,000 jobs
	awk -v t="$1" -v n="$2" -v hz="$HZ" 'BEGIN { printf "%.3f", (n > 0 ? t / hz / n * 1000 : 0) }'
}
name_of() { case $1 in nd) echo notif_deliver ;; ndb) echo "notif_deliver, batches of $BATCH" ;; pgq) echo "PgQ 3.5 + pgqd + Node" ;; esac; }
sender_of() {	# the pid of notif_deliver's sender of LANE
	pm_children | awk -v l="$1" '$0 ~ "notif_deliver sender " l " *$" { print $1; exit }'
}
declare -A R	# R[sys,round,metric]

# the promotions not finished yet: notif_deliver's still queued or held;
# PgQ's in no finished batch yet, or waiting to be retried
busy_sql() {
	case $1 in
	nd | ndb) echo "SELECT count(*) FROM notif_active WHERE kind IN ('promo_sms', 'promo_push')" ;;
	pgq) echo "SELECT coalesce((SELECT pending_events + CASE WHEN current_batch IS NULL THEN 0 ELSE 1 END
	                   FROM pgq.get_consumer_info('night_bulk', 'bench')), 0)
	          + (SELECT ev_new FROM pgq.get_queue_info('night_bulk'))
	          + (SELECT count(*) FROM pgq.retry_queue r JOIN pgq.subscription s ON s.sub_id = r.ev_owner
	               JOIN pgq.queue q ON q.queue_id = s.sub_queue WHERE q.queue_name = 'night_bulk')" ;;
	esac
}

# one night of SYS in ROUND
night_one() {
	local sys=$1 round=$2 t0 t1 t2 enq busy enq_done s pg0 pg1 w0 w1 al_sms al_push promo_pid otp_pid alert_pid
	local p a bulk_pid max_anon=0 hwm=0 k fr0 fr1 load=nd
	[ "$sys" = pgq ] && load=pgq
	# a clean slate: no jobs, no events waiting, the ledgers and the load's bookkeeping empty
	cluster_psql >/dev/null <<-SQL
	TRUNCATE notif_job CASCADE;
	TRUNCATE night_log;
	UPDATE night_progress SET enqueued = 0;
	UPDATE night_stop SET stop = false;
	CHECKPOINT;
	SQL
	if [ "$sys" = pgq ]; then
		WORKER_PIDS=()
		_pgqd_start
		for q in night_bulk night_alert night_otp; do _node_start pgq pgq_night.cjs "$q"; done
		bulk_pid=${WORKER_PIDS[0]}
		# their connections open (see pgq_night.cjs)
		local i=0
		until [ "$(cat "$BENCH_DIR"/worker_pgq_*.log | grep -cx warm)" = 3 ]; do
			i=$((i + 1))
			[ $i -lt 1200 ] || { echo "night_peers: PgQ's consumers did not open their connections" >&2; exit 1; }
			sleep 0.1
		done
	else
		# one message per call, or batches of BATCH (the bulk providers)
		night_batching "$([ "$sys" = ndb ] && echo "$BATCH" || echo 1)"
		bulk_pid=$(sender_of bulk)
	fi
	sim_get "$SIM_SMS" /reset >/dev/null
	sim_get "$SIM_PUSH" /reset >/dev/null
	al_sms=$(wc -l <"$BENCH_DIR/access_sms.log")
	al_push=$(wc -l <"$BENCH_DIR/access_push.log")
	pg0=$(cluster_cpu_ticks)
	w0=0 w1=0	# notif_deliver's senders are in the cluster's CPU
	[ "$sys" != pgq ] || w0=$(worker_cpu pgq)
	fr0=$(cpu_ticks $(front_pids "$front_pid_sms") $(front_pids "$front_pid_push"))
	t0=$(now_ns)
	cluster_psql -c "CALL night_trickle('otp', $OTP_RATE, true, '$load')" >"$BENCH_DIR/trickle_otp.log" 2>&1 &
	otp_pid=$!
	cluster_psql -c "CALL night_trickle('alert', $ALERT_RATE, false, '$load')" >"$BENCH_DIR/trickle_alert.log" 2>&1 &
	alert_pid=$!
	cluster_psql -c "CALL night_promos($N, $RATE, '$load')" >"$BENCH_DIR/promos.log" 2>&1 &
	promo_pid=$!
	enq_done=
	while :; do
		read -r enq busy <<<"$(cluster_psql -At -F' ' -c "SELECT (SELECT enqueued FROM night_progress), ($(busy_sql "$sys"))")"
		s=$(secs_between "$t0" "$(now_ns)")
		for p in $bulk_pid; do
			read -r a _ <<<"$(rss_of "$p")"
			[ "$a" -gt "$max_anon" ] && max_anon=$a
		done
		if [ -z "$enq_done" ] && ! kill -0 "$promo_pid" 2>/dev/null; then
			wait "$promo_pid" || { cat "$BENCH_DIR/promos.log" >&2; exit 1; }
			enq_done=$(now_ns)
		fi
		# (PgQ: a tick after the last event too)
		[ -n "$enq_done" ] && [ "$busy" -eq 0 ] && { [ "$sys" != pgq ] || [ "$(settled pgq night_bulk)" = t ]; } && break
		if [ $((${s%.*} % 10)) -eq 0 ]; then
			echo "  $sys ${s}s: $enq enqueued, $busy not finished"
		fi
		if [ "${s%.*}" -gt $((N / 100 + 1200)) ]; then
			echo "night_peers: $sys did not drain $N promotions in ${s}s" >&2
			exit 1
		fi
		sleep 1
	done
	t1=$(now_ns)
	cluster_psql -c "UPDATE night_stop SET stop = true" >/dev/null
	wait "$otp_pid" || { cat "$BENCH_DIR/trickle_otp.log" >&2; exit 1; }
	wait "$alert_pid" || { cat "$BENCH_DIR/trickle_alert.log" >&2; exit 1; }
	# the OTPs' and alerts' last calls and retries
	if [ "$sys" != pgq ]; then
		wait_sql "$(nd_idle_sql)" 300
	else
		for k in night_otp night_alert; do
			local i=0
			until [ "$(settled pgq "$k")" = t ]; do
				i=$((i + 1))
				[ $i -lt 3000 ] || { echo "night_peers: PgQ's $k did not settle" >&2; exit 1; }
				sleep 0.1
			done
		done
	fi
	t2=$(now_ns)
	pg1=$(cluster_cpu_ticks)
	[ "$sys" != pgq ] || w1=$(worker_cpu pgq)
	fr1=$(cpu_ticks $(front_pids "$front_pid_sms") $(front_pids "$front_pid_push"))
	for p in $bulk_pid; do
		read -r a h <<<"$(rss_of "$p")"
		[ "$h" -gt "$hwm" ] && hwm=$h
	done
	[ "$sys" != pgq ] || worker_stop pgq

	# ---- what happened
	sim_get "$SIM_SMS" /ledger >"$BENCH_DIR/ledger"
	sim_get "$SIM_PUSH" /ledger >>"$BENCH_DIR/ledger"
	cluster_psql -At -F' ' -c "COPY night_log TO STDOUT WITH (DELIMITER ' ')" >"$BENCH_DIR/sent_log"
	# per type: enqueued, expired, given up (notif_deliver: failed; PgQ: what
	# its consumer printed)
	if [ "$sys" != pgq ]; then
		cluster_psql -At -F' ' -c "SELECT kind, count(*), count(*) FILTER (WHERE status = 'expired'),
			count(*) FILTER (WHERE status = 'failed') FROM notif_job GROUP BY kind ORDER BY kind" >"$BENCH_DIR/jobs"
	else
		cat "$BENCH_DIR"/worker_pgq_*.log | awk -v n="$N" 'FNR == NR { c[$1]++; next }
			$1 == "expired" || $1 == "gave_up" { split($2, k, ":"); x[$1, k[1]]++ }
			END { c["promo_sms"] = n - int(n / 2); c["promo_push"] = int(n / 2)
				for (t in c) printf "%s %d %d %d\n", t, c[t], x["expired", t], x["gave_up", t] }' \
			"$BENCH_DIR/sent_log" - | sort >"$BENCH_DIR/jobs"
		# what the consumer left ambiguous, given up or let expire, by type and why
		echo "  PgQ's consumer, calls by what it did after them, type and reason:"
		cat "$BENCH_DIR"/worker_pgq_*.log | awk '$1 == "unknown" || $1 == "gave_up" || $1 == "expired" {
				split($2, k, ":"); c[$1 " " k[1] " " ($3 == "" ? "-" : $3)]++ }
			END { for (x in c) printf "    %s %d\n", x, c[x] }' | sort
		# kept in BENCH_OUT when set (one line per such call)
		if [ -n "${BENCH_OUT:-}" ]; then
			cat "$BENCH_DIR"/worker_pgq_*.log >"$BENCH_OUT/${P}_pgq_r${round}.log"
		fi
		rm -f "$BENCH_DIR"/worker_pgq_*.log
	fi
	# enqueued, delivered (at least once), lost, duplicated (copies beyond the first), expired, failed
	awk 'FNR == NR { n[$1] = $2; ex[$1] = $3; fa[$1] = $4; next }
		{ split($1, k, ":"); if ($3 >= 1) { d[k[1]]++; dup[k[1]] += $3 - 1 } }
		END { for (t in n) printf "%s %d %d %d %d %d %d\n", t, n[t], d[t], n[t] - d[t], dup[t], ex[t], fa[t] }' \
		"$BENCH_DIR/jobs" "$BENCH_DIR/ledger" | sort >"$BENCH_DIR/types"
	# the OTPs' latency: the first arrival at the provider minus the enqueue's clock
	awk 'FNR == NR { if ($1 == "otp") t[$2] = $3; next }
		{ split($1, p, ":"); if (p[1] == "otp" && (p[2] in t) && $2 >= 1) printf "%.3f\n", ($5 - t[p[2]]) / 1000 }' \
		"$BENCH_DIR/sent_log" "$BENCH_DIR/ledger" >"$BENCH_DIR/otp_ms"

	local secs sustained jobs_all pg_1k w_1k tot_1k fr_1k all_1k c_sms c_push n_sms n_push alpn
	secs=$(secs_between "$t0" "$t1")
	sustained=$(awk -v s="$secs" -v n="$N" 'BEGIN { printf "%.0f", n / s }')
	jobs_all=$(awk '{ t += $2 } END { print t }' "$BENCH_DIR/types")
	pg_1k=$(per1k $((pg1 - pg0)) "$jobs_all")
	w_1k=$(per1k $((w1 - w0)) "$jobs_all")
	tot_1k=$(awk -v a="$pg_1k" -v b="$w_1k" 'BEGIN { printf "%.3f", a + b }')
	# the TLS fronts (each call's TLS and HTTP framing on the provider's side of the wire)
	fr_1k=$(per1k $((fr1 - fr0)) "$jobs_all")
	all_1k=$(awk -v a="$tot_1k" -v b="$fr_1k" 'BEGIN { printf "%.3f", a + b }')
	# calls: this night's lines of each front's access log
	n_sms=$(($(wc -l <"$BENCH_DIR/access_sms.log") - al_sms))
	n_push=$(($(wc -l <"$BENCH_DIR/access_push.log") - al_push))
	# connections: distinct client ports of this night's calls; the ALPN of the push front's
	c_sms=$(tail -n +$((al_sms + 1)) "$BENCH_DIR/access_sms.log" | awk '{ print $1 }' | sort -u | wc -l)
	c_push=$(tail -n +$((al_push + 1)) "$BENCH_DIR/access_push.log" | awk '{ print $1 }' | sort -u | wc -l)
	alpn=$(tail -n +$((al_push + 1)) "$BENCH_DIR/access_push.log" | awk '{ c[$2]++ } END { for (a in c) printf "%s%s %d", (n++ ? ", " : ""), a, c[a] }')
	local -A M=([drain_s]=$secs [jobs_per_s]=$sustained [otp_p50_ms]=$(percentile 50 "$BENCH_DIR/otp_ms")
		[otp_p99_ms]=$(percentile 99 "$BENCH_DIR/otp_ms") [otp_max_ms]=$(percentile 100 "$BENCH_DIR/otp_ms")
		[pg_cpu_per_1k]=$pg_1k [worker_cpu_per_1k]=$w_1k [total_cpu_per_1k]=$tot_1k
		[front_cpu_per_1k]=$fr_1k [all_cpu_per_1k]=$all_1k [sms_calls]=$n_sms [push_calls]=$n_push
		[sms_connections]=$c_sms [push_connections]=$c_push [bulk_hwm_kb]=$hwm [bulk_anon_max_kb]=$max_anon
		[enqueue_s]=$(secs_between "$t0" "$enq_done") [jobs]=$jobs_all)
	while read -r t n d l dup ex fa; do
		M[${t}_enqueued]=$n M[${t}_lost]=$l M[${t}_duplicated]=$dup M[${t}_expired]=$ex M[${t}_failed]=$fa
		row ${P}_types "$round" "$(name_of "$sys")" "$t" "$n" "$d" "$l" "$dup" "$ex" "$fa"
	done <"$BENCH_DIR/types"
	for k in "${!M[@]}"; do
		R[$sys,$round,$k]=${M[$k]}
		result "${P}_${sys}_r${round}_$k" "${M[$k]}"
	done
	echo "$(name_of "$sys"), round $round: $N promotions drained in ${secs}s ($sustained/s; enqueued in ${M[enqueue_s]}s);" \
		"OTPs p50 ${M[otp_p50_ms]} ms, p99 ${M[otp_p99_ms]} ms, max ${M[otp_max_ms]} ms, ${M[otp_expired]} expired of ${M[otp_enqueued]};" \
		"CPU s per 1,000 jobs: PostgreSQL $pg_1k, worker $w_1k, total $tot_1k, TLS fronts $fr_1k, with the fronts $all_1k;" \
		"calls sms $n_sms, push $n_push; connections sms $c_sms, push $c_push ($alpn);" \
		"bulk worker peak RSS $hwm kB"
	printf '  %-11s %9s %9s %7s %10s %8s %7s\n' type enqueued delivered lost duplicated expired failed
	while read -r t n d l dup ex fa; do
		printf '  %-11s %9s %9s %7s %10s %8s %7s\n' "$t" "$n" "$d" "$l" "$dup" "$ex" "$fa"
	done <"$BENCH_DIR/types"
	row ${P} "$round" "$(name_of "$sys")" "$secs" "$sustained" "${M[otp_p50_ms]}" "${M[otp_p99_ms]}" "${M[otp_max_ms]}" \
		"${M[otp_expired]}" "${M[promo_sms_lost]} / ${M[promo_push_lost]} / ${M[alert_lost]} / ${M[otp_lost]}" \
		"${M[promo_sms_duplicated]} / ${M[promo_push_duplicated]} / ${M[alert_duplicated]} / ${M[otp_duplicated]}" \
		"$pg_1k" "$w_1k" "$tot_1k" "$c_sms / $c_push" "$hwm"
	row ${P}_cost "$round" "$(name_of "$sys")" "$secs" "$sustained" "${M[otp_p99_ms]}" "${M[otp_expired]}" \
		"$n_sms / $n_push" "$pg_1k" "$w_1k" "$fr_1k" "$all_1k"
}

# each round in another order: the list turned by one place a round
read -r -a sys_list <<<"$SYSTEMS"
for round in $(seq 1 "$ROUNDS"); do
	n_sys=${#sys_list[@]}
	for i in $(seq 0 $((n_sys - 1))); do
		night_one "${sys_list[$(((i + round - 1) % n_sys))]}" "$round"
	done
done
has_sys() { [[ " $SYSTEMS " == *" $1 "* ]]; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
# A over B per round (RESULT night_peers_r<round>_<NAME>_<metric>, a row of
# TABLE) and the median of the rounds (night_peers_<NAME>_<metric>), when
# both ran
side_by_side() {	# A B TABLE NAME METRIC...
	local a=$1 b=$2 table=$3 name=$4 round m r
	shift 4
	has_sys "$a" && has_sys "$b" || return 0
	local -A acc=()
	for round in $(seq 1 "$ROUNDS"); do
		local cells=()
		for m in "$@"; do
			r=$(ratio "${R[$a,$round,$m]}" "${R[$b,$round,$m]}")
			acc[$m]+="$r "
			result "${P}_r${round}_${name}_$m" "$r"
			cells+=("${R[$a,$round,$m]} / ${R[$b,$round,$m]} = **$r**")
		done
		row "$table" "$round" "${cells[@]}"
	done
	for m in "$@"; do
		result "${P}_${name}_$m" "$(tr ' ' '\n' <<<"${acc[$m]}" | grep -v '^-\?$' | median_values)"
	done
}
# notif_deliver / PgQ; with batches / PgQ and / one call per message
side_by_side nd pgq "${P}_ratio" ratio jobs_per_s otp_p50_ms otp_p99_ms otp_max_ms total_cpu_per_1k
for b in pgq nd; do
	side_by_side ndb "$b" "${P}_ndb_over_$b" "ndb_over_$b" jobs_per_s otp_p99_ms total_cpu_per_1k all_cpu_per_1k
done
result ${P}_batch "$BATCH"
result ${P}_batch_wait_ms "$NIGHT_BATCH_WAIT_MS"
result ${P}_systems "\"$SYSTEMS\""
result ${P}_promotions "$N"
result ${P}_scale "$(awk -v n="$N" 'BEGIN { print n / 5000000 }')"
result ${P}_rate_target "$RATE"
result ${P}_rounds "$ROUNDS"
result ${P}_inflight "$INFLIGHT"
result ${P}_push_connections "$PUSH_CONNS"
result ${P}_timeout_s "$TIMEOUT"
result ${P}_pgq_batch "$PGQ_BATCH"
result ${P}_load_end "\"$(cut -d' ' -f1-3 /proc/loadavg)\""
result ${P}_duration "\"$((SECONDS / 60)) min $((SECONDS % 60)) s\""
echo "night_peers: done"
