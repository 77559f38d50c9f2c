#!/usr/bin/env bash
# test/bench/peers.sh: notif_deliver next to the outboxes a team could
# install instead (issue 14): PgQ 3.5 + pgqd, graphile-worker 0.17.3 and
# pg-boss 10.4.2, in one cluster, against one provider simulator, in one
# run.  The peers are installed by the script itself (npm into its temp
# folder, pinned; PgQ from Debian through test/deps.sh --bench); only our
# workers for them are in this tree (test/bench/peers/*.cjs, all sending
# with undici.request over a keep-alive pool).  One worker runs at a time.
#
# 1. throughput: N jobs enqueued in one statement by each system's bulk
#    path, drained at 0 ms and 50 ms provider latency, ROUNDS rounds
#    (medians; each worker first drains min(1000, N/10) jobs unmeasured,
#    as a long-running one would have): jobs/s from the enqueue commit to
#    the last arrival at the simulator; CPU s per 1,000 jobs of PostgreSQL
#    and of the worker
#    (notif_deliver: its sender; PgQ: consumer + pgqd); WAL bytes per job
#    over the drain (pg_current_wal_lsn after the enqueue commit and once
#    everything is recorded) and over the enqueue; notif_deliver / peer.
#    notif_deliver drains twice more per round: with ANALYZE after the
#    enqueue (nda) and with notif_deliver.senders_per_lane = 2 (nd2), whose
#    jobs/s and CPU over each peer's are RESULT peers_nd2_over_<peer>_<lat>ms
#    and ..._cpu; its jobs/s over the best peer's (the one it leads by the
#    least) peers_nd2_over_best_<lat>ms, that peer's name peers_best_<lat>ms.
# 2. semantics: SEM_N jobs, calls time out with p = 0.5% (q = 0.5 of them
#    delivered anyway; 500 ms client timeout), each peer with its default
#    retries, then again with the worker SIGKILLed MAX_KILLS times, evenly
#    over the drain (at each 1/(MAX_KILLS+1) of the jobs arrived, at least
#    KILL_GAP_MS apart; a new one is started at once; notif_deliver: a
#    sender, and PostgreSQL restarts all its processes, as after any
#    crash); lost and duplicated from the
#    simulator's ledger; notif_deliver with SEM_N at_most_once and SEM_N
#    at_least_once jobs (max_tries 3) in the same conditions.
# 3. latency: FLOOD_N bulk jobs drain on one queue while an OTP is enqueued
#    on another every 20 ms: p50/p99 enqueue-to-arrival of the OTPs
#    (graphile-worker twice: see peers/gw.cjs).
# Then every row where a peer did better, with the reason (table peers_wins).
# The headline of doc/benchmarks.md (its section 5) comes from the
# same run: tables peers_head, peers_sem_head and peers_wins_head (the wins
# per peer, in short), and peers_stale_note (what stale statistics cost
# notif_deliver's claims, in a sentence that follows the numbers).
#
#   bash test/bench/peers.sh            (as root: installs what is missing)
#
# Environment: BENCH_SCALE [1]; PEERS_JOBS [100000 x scale]; PEERS_SEM_JOBS
# [20000 x scale]; PEERS_FLOOD_JOBS [200000 x scale]; PEERS_ROUNDS [3];
# PEERS_SYSTEMS ["nd pgq gw boss"]; PEERS_PARTS ["throughput semantics
# latency"]; PEERS_KILLS [5]; PEERS_KILL_GAP_MS [300] (at least between two
# kills, after the new worker is ready); PEERS_INFLIGHT [512];
# BENCH_PORT, BENCH_SIM_PORT, BENCH_OUT (see lib/common.sh).  The workers' settings
# are printed as RESULT lines (peers_setting_*).  Prints RESULT and ROW
# lines for test/bench/run (doc/benchmarks-peers.md).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/peers_lib.sh"

N=${PEERS_JOBS:-$(bench_scale 100000)}
SEM_N=${PEERS_SEM_JOBS:-$(bench_scale 20000)}
FLOOD_N=${PEERS_FLOOD_JOBS:-$(bench_scale 200000)}
ROUNDS=${PEERS_ROUNDS:-3}
WARM=$(( N / 10 < 1000 ? N / 10 + 1 : 1000 ))
SYSTEMS=${PEERS_SYSTEMS:-nd pgq gw boss}
PARTS=${PEERS_PARTS:-throughput semantics latency}
MAX_KILLS=${PEERS_KILLS:-5}
KILL_GAP_MS=${PEERS_KILL_GAP_MS:-300}
P=0.005
Q=0.5
OTP_GAP=0.02
SIM=$BENCH_SIM_PORT

bench_dir peers
if [ "$(id -u)" = 0 ]; then bash "$BENCH_HERE/deps.sh" --bench; fi
peers_install
sim_start main "$SIM" --hold-ms 2000
cluster_start "$BENCH_DIR/pg" "$BENCH_PORT" "notif_deliver.database = 'postgres'" \
	"notif_deliver.max_inflight = $PEERS_INFLIGHT" "max_worker_processes = 16" "restart_after_crash = on" \
	"max_connections = 200" "max_wal_size = '4GB'" "checkpoint_timeout = '30min'"
export PEER_URL=http://127.0.0.1:$SIM/send PEER_CONNECTIONS=$PEERS_INFLIGHT PEER_TIMEOUT_MS=5000
export BOSS_BATCH_OTP=${BOSS_BATCH_OTP:-100}
peers_setup "$SIM"

# every result is kept for the comparison at the end
declare -A R
presult() { R[$1]=$2; result "$1" "$2"; }

name_of() {
	case $1 in
	nd) echo notif_deliver ;;
	nda) echo "notif_deliver, ANALYZE after the enqueue" ;;
	nd2) echo "notif_deliver, 2 senders per lane" ;;
	pgq) echo "PgQ 3.5 + pgqd" ;;
	gw) echo "graphile-worker 0.17.3" ;;
	boss) echo "pg-boss 10.4.2" ;;
	esac
}
queue_of() {	# the throughput / semantics queue of a system
	case $1 in nd) echo ndb ;; gw) echo post ;; *) echo bench ;; esac
}
sim_stat() { sim_get "$SIM" /stats | awk -v k="$1" '$1 == k { print $2 }'; }
sim_conf() { sim_get "$SIM" "/config?$1" >/dev/null && sim_get "$SIM" /reset >/dev/null; }
wait_for() {	# TIMEOUT STEP COMMAND...: until COMMAND prints t; 1 on timeout
	local timeout=$1 step=$2 start=$SECONDS
	shift 2
	until [ "$("$@")" = t ]; do
		[ $((SECONDS - start)) -lt "$timeout" ] || return 1
		sleep "$step"
	done
}
keys_reached() { [ "$(sim_stat keys)" -ge "$1" ] && echo t || echo f; }
median() {	# values on stdin
	sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print "nan" }'
}
declare -A s_tick
snap_senders() {
	local p
	s_tick=()
	for p in $(sender_pids); do s_tick[$p]=$(cpu_ticks "$p"); done
}
sender_delta() {
	local p t d=0
	for p in $(sender_pids); do
		t=$(cpu_ticks "$p")
		d=$((d + t - ${s_tick[$p]:-0}))
	done
	echo "$d"
}

echo "peers: $(nproc) cores, $(pg_config --version), load $(cut -d' ' -f1-3 /proc/loadavg)"
presult peers_jobs "$N"
presult peers_sem_jobs "$SEM_N"
presult peers_flood_jobs "$FLOOD_N"
presult peers_rounds "$ROUNDS"
presult peers_inflight "$PEERS_INFLIGHT"
presult peers_max_kills "$MAX_KILLS"
presult peers_kill_gap_ms "$KILL_GAP_MS"
presult peers_setting_gw "\"concurrency ${GW_CONCURRENCY:-512}, localQueue.size ${GW_LOCAL_QUEUE:-512}, completeJobBatchDelay and failJobBatchDelay ${GW_BATCH_DELAY_MS:-5} ms, pool 12\""
presult peers_setting_boss "\"${BOSS_LOOPS:-4} loops per queue of boss.fetch (as boss.work() runs it, their polls interleaved; each batch completed and failed by the loop itself, see peers/boss.cjs), batchSize ${BOSS_BATCH:-5000} (the OTP queue: $BOSS_BATCH_OTP), pollingIntervalSeconds 0.5\""
presult peers_setting_pgq "\"ticker_period 0.1 s, queue ticker_max_lag 0.1 s, retry_period 1 s; ${PGQ_CONCURRENCY:-512} calls in flight per batch\""
presult peers_setting_http "\"undici.request, one keep-alive Agent of $PEERS_INFLIGHT connections (the OTP queue: its own Agent of 64)\""
presult peers_setting_nd "\"notif_deliver.max_inflight $PEERS_INFLIGHT, provider max_inflight $PEERS_INFLIGHT (OTP provider: 64), batch_size $(cluster_psql -At -c 'SHOW notif_deliver.batch_size')\""

# ---------------------------------------------------------------- throughput
# one drain: prints "jobs_per_s pg_ticks worker_ticks wal_drain wal_enqueue"
tput_one() {
	local sys=$1 lat=$2 tag=$3 q lsn0 t0 lsn1 lsn2 pg0 pg1 w0 w1 snd=0 last analyze= senders=1
	# nda: notif_deliver with ANALYZE notif_job right after the enqueue's
	# commit (not counted), to show what stale statistics cost its claims;
	# nd2: notif_deliver with two senders per lane
	[ "$sys" = nda ] && sys=nd analyze=1
	[ "$sys" = nd2 ] && sys=nd senders=2
	q=$(queue_of "$sys")
	worker_stop "$sys"
	reset_jobs
	cluster_psql -c CHECKPOINT >/dev/null
	sim_conf "latency_ms=$lat&p_timeout=0"
	[ "$sys" != nd ] || nd_senders "$senders"
	worker_start "$sys" post
	# warm up (a worker runs for long: its first jobs JIT-compile, connect, plan)
	enqueue "$sys" "$q" "$WARM" "w$tag" >/dev/null
	wait_for 300 0.1 keys_reached "$WARM" && wait_for 300 0.1 settled "$sys" "$q" ||
		{ echo "peers: $sys did not warm up" >&2; return 1; }
	[ "$sys" != nd ] || [ "$(pm_children | grep -c 'notif_deliver sender bench *$')" = "$senders" ] ||
		{ echo "peers: the lane of $q has $(pm_children | grep -c 'notif_deliver sender bench *$') senders, not $senders" >&2; return 1; }
	sim_get "$SIM" /reset >/dev/null
	lsn0=$(cluster_psql -At -c "SELECT pg_current_wal_lsn()")
	read -r t0 lsn1 <<<"$(enqueue "$sys" "$q" "$N" "$tag")"
	[ -z "$analyze" ] || cluster_psql -c "ANALYZE notif_job" >/dev/null
	pg0=$(cluster_cpu_ticks)
	w0=$(worker_cpu "$sys")
	[ "$sys" = nd ] && snap_senders
	wait_for 900 0.05 keys_reached "$N" || { echo "peers: $sys at $lat ms: $(sim_stat keys) of $N arrived" >&2; return 1; }
	wait_for 300 0.1 settled "$sys" "$q" || { echo "peers: $sys at $lat ms did not settle" >&2; return 1; }
	pg1=$(cluster_cpu_ticks)
	w1=$(worker_cpu "$sys")
	[ "$sys" = nd ] && snd=$(sender_delta)
	lsn2=$(cluster_psql -At -c "SELECT pg_current_wal_lsn()")
	last=$(sim_get "$SIM" /ledger | awk '$5 > m { m = $5 } END { printf "%.6f", m / 1e6 }')
	worker_stop "$sys"
	if [ "$sys" = nd ]; then w0=0 w1=$snd; pg1=$((pg1 - snd)); fi
	awk -v n="$N" -v t0="$t0" -v t1="$last" -v pg=$((pg1 - pg0)) -v w=$((w1 - w0)) \
		-v wd="$(cluster_psql -At -c "SELECT pg_wal_lsn_diff('$lsn2', '$lsn1')")" \
		-v we="$(cluster_psql -At -c "SELECT pg_wal_lsn_diff('$lsn1', '$lsn0')")" \
		'BEGIN { printf "%.0f %d %d %.0f %.0f\n", n / (t1 - t0), pg, w, wd / n, we / n }'
}

if [[ " $PARTS " == *" throughput "* ]]; then
	echo "throughput: $N jobs per drain, $ROUNDS rounds, $PEERS_INFLIGHT calls in flight"
	tput=()
	TPUT_SYSTEMS=$(sed 's/\bnd\b/nd nda nd2/' <<<"$SYSTEMS")
	for round in $(seq 1 "$ROUNDS"); do
		for lat in 0 50; do
			for sys in $TPUT_SYSTEMS; do
				r=$(tput_one "$sys" "$lat" "t$round$lat")
				tput+=("$sys $lat $round $r $(awk '{ print $2 + $3 }' <<<"$r")")
				printf '%-5s %3s ms round %s: %s\n' "$sys" "$lat" "$round" "$r"
			done
		done
	done
	[ -n "${BENCH_OUT:-}" ] && : >"$BENCH_OUT/peers_tput.dat"
	col() { printf '%s\n' "${tput[@]}" | awk -v s="$1" -v l="$2" -v c="$3" '$1 == s && $2 == l { print $c }' | median; }
	# notif_deliver's figure (or that of the variant NUM) / this system's,
	# per round (side by side), then the median ("-" when that is infinite:
	# the system's figure 0 in most rounds); columns: 4 jobs/s, 7 WAL
	# drain, 8 WAL enqueue, 9 CPU ticks
	ratio_of() {	# SYS LAT COLUMN [NUM]
		local round
		for round in $(seq 1 "$ROUNDS"); do
			printf '%s\n' "${tput[@]}" | awk -v s="$1" -v l="$2" -v r="$round" -v c="$3" -v num="${4:-nd}" \
				'$2 == l && $3 == r { if ($1 == num) a = $c; if ($1 == s) b = $c }
				END { if (b > 0) printf "%.2f\n", a / b; else if (a > 0) print "inf" }'
		done | median | sed 's/^nan$/-/; s/^inf$/-/'
	}
	for lat in 0 50; do
		for sys in $TPUT_SYSTEMS; do
			jps=$(col "$sys" "$lat" 4)
			pg=$(awk -v t="$(col "$sys" "$lat" 5)" -v hz="$HZ" -v n="$N" 'BEGIN { printf "%.3f", t / hz / n * 1000 }')
			w=$(awk -v t="$(col "$sys" "$lat" 6)" -v hz="$HZ" -v n="$N" 'BEGIN { printf "%.3f", t / hz / n * 1000 }')
			wd=$(col "$sys" "$lat" 7)
			we=$(col "$sys" "$lat" 8)
			ratio=$(ratio_of "$sys" "$lat" 4)
			tot=$(awk -v a="$pg" -v b="$w" 'BEGIN { printf "%.3f", a + b }')
			for k in jobs_per_s:$jps pg_cpu_per_1k:$pg worker_cpu_per_1k:$w total_cpu_per_1k:$tot \
				wal_per_job:$wd wal_enqueue_per_job:$we ratio:$ratio; do
				presult "peers_${sys}_${lat}ms_${k%%:*}" "${k#*:}"
			done
			row peers_tput "$(name_of "$sys")" "$lat ms" "$jps" "$([ "$sys" = nd ] && echo "" || echo "$ratio")" \
				"$pg" "$w" "$tot" "$wd" "$we"
			[ -z "${BENCH_OUT:-}" ] || printf '%s\t%s\t%s\n' "$(name_of "$sys")" "$lat" "$jps" >>"$BENCH_OUT/peers_tput.dat"
			rc= rw= re= ratio_h=
			if [ "$sys" != nd ]; then
				rc=$(ratio_of "$sys" "$lat" 9)
				rw=$(ratio_of "$sys" "$lat" 7)
				re=$(ratio_of "$sys" "$lat" 8)
				presult "peers_${sys}_${lat}ms_cpu_ratio" "$rc"
				presult "peers_${sys}_${lat}ms_wal_ratio" "$rw"
				presult "peers_${sys}_${lat}ms_wal_enqueue_ratio" "$re"
				ratio_h=$ratio
			fi
			[ "$sys" = nd ] || [ "$sys" = nda ] || [ "$sys" = nd2 ] || row peers_ratio "$(name_of "$sys")" "$lat ms" "$ratio" "$rc" "$rw" "$re"
			# the headline table of doc/benchmarks.md
			row peers_head "$(name_of "$sys")" "$lat ms" "$jps" "$ratio_h" "$tot" "$rc" "$wd" "$rw"
		done
		# two senders per lane against each peer, jobs/s and total CPU
		best= best_ratio=
		for sys in $SYSTEMS; do
			[ "$sys" = nd ] && continue
			presult "peers_nd2_over_${sys}_${lat}ms" "$(ratio_of "$sys" "$lat" 4 nd2)"
			presult "peers_nd2_over_${sys}_${lat}ms_cpu" "$(ratio_of "$sys" "$lat" 9 nd2)"
			# the best peer: the one two senders lead by the least (of those measured)
			[[ ${R[peers_nd2_over_${sys}_${lat}ms]} =~ ^[0-9.]+$ ]] || continue
			if [ -z "$best" ] || awk -v a="${R[peers_nd2_over_${sys}_${lat}ms]}" -v b="$best_ratio" 'BEGIN { exit !(a < b) }'; then
				best=$sys best_ratio=${R[peers_nd2_over_${sys}_${lat}ms]}
			fi
		done
		if [ -n "$best" ]; then
			presult "peers_best_${lat}ms" "$(name_of "$best")"
			presult "peers_nd2_over_best_${lat}ms" "$best_ratio"
		fi
	done
	nd_senders 1
fi

# what stale statistics cost notif_deliver's claims: its own row against
# its row with ANALYZE after the enqueue, per round, median (nd / nda);
# the sentence goes into both documents, so that no text claims more than
# the numbers show (a difference within 10%, or within the largest one in
# notif_deliver's favour without the ANALYZE, is noise)
STALE=
if [ -n "${R[peers_nda_0ms_ratio]:-}" ]; then
	read -r STALE stale_note <<<"$(awk -v j0="${R[peers_nda_0ms_ratio]}" -v j50="${R[peers_nda_50ms_ratio]}" \
		-v c0="${R[peers_nda_0ms_cpu_ratio]}" -v c50="${R[peers_nda_50ms_cpu_ratio]}" '
		function pct(x) { return sprintf("%+.0f%%", (x - 1) * 100) }
		function add(t) { w = w (w == "" ? "" : ", ") t }
		BEGIN {
		# the noise: 10%, or the largest difference in notif_deliver'"'"'s
		# favour without the ANALYZE, if larger (that one cannot be a cost)
		f = j0 - 1; if (j50 - 1 > f) f = j50 - 1; if (1 - c0 > f) f = 1 - c0; if (1 - c50 > f) f = 1 - c50
		z = f > 0.1 ? f : 0.1
		if (1 - j0 > z) add("a slower drain at 0 ms (" pct(j0) ")")
		if (1 - j50 > z) add("a slower drain at 50 ms (" pct(j50) ")")
		if (c0 - 1 > z) add("more CPU per job at 0 ms (" pct(c0) ")")
		if (c50 - 1 > z) add("more CPU per job at 50 ms (" pct(c50) ")")
		printf "%s Without the ANALYZE, notif_deliver drained at %s times the rate it had with it at 0 ms and %s times at 50 ms, for %s and %s times the total CPU per job",
			(w != "") ? "yes" : "no", j0, j50, c0, c50
		if (w != "")
			printf ". Beyond %.0f%% (the noise: 10%%, or the largest difference in its favour), stale statistics cost its statements %s.", z * 100, w
		else if (f <= 0.1 && j0 >= 0.9 && j50 >= 0.9 && c0 <= 1.1 && c50 <= 1.1)
			printf ": every figure within 10%% of the other, which is this machine'"'"'s noise, so in this run stale statistics did not measurably cost its statements."
		else
			printf ": no difference in its disfavour beyond %.0f%% (the noise: the largest difference in its favour), so in this run stale statistics did not measurably cost its statements.", z * 100
	}')"
	presult peers_stale_stats "$STALE"
	presult peers_stale_note "\"$stale_note\""
fi

# ---------------------------------------------------------------- semantics
# counts from the ledger: "lost dup" of the keys starting with PREFIX, out of N
ledger_counts() {
	awk -v p="$1" -v n="$2" 'index($1, p) == 1 { if ($3 >= 1) got++; if ($3 > 1) dup += $3 - 1 }
		END { printf "%d %d\n", n - got, dup }' "$BENCH_DIR/ledger"
}
promise_of() {
	case $1 in
	pgq) echo "at least once per batch: a batch not finished is served again, whole" ;;
	gw) echo "at least once: 25 attempts with exponential backoff; a crashed worker's jobs stay locked 4 h" ;;
	boss) echo "at least once: retryLimit 2 (3 tries); a crashed worker's active jobs expire after 15 min" ;;
	esac
}
left_of() {	# what keeps SYS from settling (for the log)
	local sql
	case $1 in
	boss) sql="SELECT string_agg(format('%s %s (retry_count %s, start_after %s)', state, n, r, a), '; ')
		FROM (SELECT state, count(*) n, max(retry_count) r, max(start_after) a FROM pgboss.job WHERE name = '$2' GROUP BY state) s" ;;
	gw) sql="SELECT format('%s jobs not done, %s locked, max attempts %s, next run_at %s', count(*), count(locked_at), max(attempts), min(run_at))
		FROM graphile_worker.jobs WHERE task_identifier = '$2' AND attempts < max_attempts" ;;
	pgq) sql="SELECT format('ev_new %s', ev_new) FROM pgq.get_queue_info('$2')" ;;
	nd) sql="SELECT string_agg(format('%s %s', status, n), '; ') FROM (SELECT status, count(*) n FROM notif_job GROUP BY status) s" ;;
	esac
	cluster_psql -At -c "$sql" 2>&1 | tr '\n' ' '
}
sem_one() {
	local sys=$1 kill=$2 q kills=0 total=$SEM_N secs start settled_ok=yes lost dup held gaveup faults next=0
	q=$(queue_of "$sys")
	[ "$sys" = nd ] && total=$((2 * SEM_N))
	worker_stop "$sys"
	reset_jobs
	sim_conf "latency_ms=0&p_timeout=$P&q=$Q&seed=1"
	export PEER_TIMEOUT_MS=500
	cluster_psql -c "UPDATE notif_provider SET timeout = '500 ms' WHERE name = 'default'" >/dev/null
	worker_start "$sys" post
	start=$SECONDS
	if [ "$sys" = nd ]; then
		enqueue nd amo "$SEM_N" "s$kill" >/dev/null
		enqueue nd alo "$SEM_N" "s$kill" >/dev/null
		q=all
	else
		enqueue "$sys" "$q" "$SEM_N" "$sys" >/dev/null
	fi
	# kills evenly spread over the drain, by progress (keys arrived), so that
	# every system gets the same number whatever its speed
	while [ "$(settled "$sys" "$q")" != t ]; do
		if [ "$kill" = 1 ] && [ "$kills" -lt "$MAX_KILLS" ] && [ "$(date +%s%3N)" -ge "$next" ] &&
			[ "$(sim_stat keys)" -ge $((total * (kills + 1) / (MAX_KILLS + 1))) ]; then
			worker_kill "$sys" && kills=$((kills + 1))
			next=$(($(date +%s%3N) + KILL_GAP_MS))
		fi
		if [ $((SECONDS - start)) -ge 600 ]; then settled_ok=no; break; fi
		sleep 0.05
	done
	secs=$((SECONDS - start))
	[ "$settled_ok" = yes ] || echo "peers: $sys did not settle within 600 s; left: $(left_of "$sys" "$q")" >&2
	sim_get "$SIM" /ledger >"$BENCH_DIR/ledger"
	held=$(held "$sys" "$q")
	worker_stop "$sys"
	export PEER_TIMEOUT_MS=5000
	cluster_psql -c "UPDATE notif_provider SET timeout = '5 seconds' WHERE name = 'default'" >/dev/null
	faults="timeouts$([ "$kill" = 1 ] && echo " + SIGKILL" || true)"
	local tag=peers_sem_$sys
	[ "$kill" = 0 ] || tag+=_kill
	presult "${tag}_kills" "$kills"
	presult "${tag}_seconds" "$secs"
	presult "${tag}_settled" "$settled_ok"
	if [ "$sys" = nd ]; then
		local m
		presult "${tag}_held" "$held"
		for m in amo alo; do
			read -r lost dup <<<"$(ledger_counts "$m:" "$SEM_N")"
			gaveup=$(gave_up nd "$m")
			presult "${tag}_${m}_lost" "$lost"
			presult "${tag}_${m}_dup" "$dup"
			presult "${tag}_${m}_gave_up" "$gaveup"
			row peers_sem "notif_deliver $([ $m = amo ] && echo at_most_once || echo at_least_once)" \
				"$([ $m = amo ] && echo "at most once: never a duplicate" || echo "at least once: never a loss, within max_tries")" \
				"$faults" "$kills" "$SEM_N" "$lost" "$dup" "$held" "$gaveup" "$secs"
			echo "$sys $m kill=$kill: lost $lost, duplicated $dup, gave up $gaveup, kills $kills, ${secs}s"
		done
	else
		read -r lost dup <<<"$(ledger_counts "$sys:" "$SEM_N")"
		gaveup=$(gave_up "$sys" "$q")
		presult "${tag}_lost" "$lost"
		presult "${tag}_dup" "$dup"
		presult "${tag}_held" "$held"
		presult "${tag}_gave_up" "$gaveup"
		row peers_sem "$(name_of "$sys")" "$(promise_of "$sys")" "$faults" "$kills" "$SEM_N" "$lost" "$dup" "$held" \
			"$gaveup" "$secs$([ $settled_ok = yes ] || echo " (not settled)")"
		echo "$sys kill=$kill: lost $lost, duplicated $dup, held $held, gave up $gaveup, kills $kills, ${secs}s"
	fi
}

if [[ " $PARTS " == *" semantics "* ]]; then
	echo "semantics: $SEM_N jobs, p = $P, q = $Q; under kills: $MAX_KILLS kills spread over the drain"
	presult peers_sem_p "$P"
	presult peers_sem_q "$Q"
	for kill in 0 1; do
		for sys in $SYSTEMS; do sem_one "$sys" "$kill"; done
	done
	# the summary of doc/benchmarks.md: one row per system and delivery
	for sys in $SYSTEMS; do
		for m in $([ "$sys" = nd ] && echo "_amo _alo" || echo "-"); do
			m=${m#-}
			row peers_sem_head "$(name_of "$sys")$(case $m in _amo) echo " at_most_once" ;; _alo) echo " at_least_once" ;; esac)" \
				"${R[peers_sem_$sys${m}_lost]:-}" "${R[peers_sem_$sys${m}_dup]:-}" "${R[peers_sem_${sys}_kill_kills]:-}" \
				"${R[peers_sem_${sys}_kill${m}_lost]:-}" "${R[peers_sem_${sys}_kill${m}_dup]:-}" \
				"${R[peers_sem_${sys}_kill_held]:-}"
		done
	done
fi

# ---------------------------------------------------------------- latency
lat_one() {	# SYS [flood2]
	local sys=$1 mode=${2:-flood} bulk otp t0 t1 trickle sent got p50 p99 max key=$1 name
	case $sys in nd) bulk=promo ;; *) bulk=bulk ;; esac
	otp=otp
	worker_stop "$sys"
	reset_jobs
	cluster_psql -c CHECKPOINT >/dev/null
	sim_conf "latency_ms=0&p_timeout=0"
	rm -f "$BENCH_DIR/stop"
	worker_start "$sys" "$mode"
	read -r t0 _ <<<"$(enqueue "$sys" "$bulk" "$FLOOD_N" flood)"
	(
		i=0
		while [ ! -e "$BENCH_DIR/stop" ]; do
			i=$((i + 1))
			trickle_sql "$sys" "$i"
			sleep "$OTP_GAP"
		done
	) | cluster_psql -At -F' ' >"$BENCH_DIR/otp_sent" &
	trickle=$!
	wait_for 900 0.5 settled "$sys" "$bulk" || echo "peers: the $sys flood did not drain" >&2
	t1=$(date +%s.%N)
	touch "$BENCH_DIR/stop"
	wait "$trickle"
	wait_for 120 0.2 settled "$sys" "$otp" || echo "peers: $sys OTPs did not settle" >&2
	sim_get "$SIM" /ledger >"$BENCH_DIR/ledger"
	worker_stop "$sys"
	awk 'FNR == NR { t[$1] = $2; next }
		{ split($1, k, ":"); if (k[1] == "otp" && (k[2] in t)) printf "%.3f\n", ($5 - t[k[2]]) / 1000 }' \
		"$BENCH_DIR/otp_sent" "$BENCH_DIR/ledger" >"$BENCH_DIR/lat"
	sent=$(wc -l <"$BENCH_DIR/otp_sent")
	got=$(wc -l <"$BENCH_DIR/lat")
	p50=$(percentile 50 "$BENCH_DIR/lat")
	p99=$(percentile 99 "$BENCH_DIR/lat")
	max=$(percentile 100 "$BENCH_DIR/lat")
	local secs rate
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
	rate=$(awk -v a="$t0" -v b="$t1" -v n="$FLOOD_N" 'BEGIN { printf "%.0f", n / (b - a) }')
	local short
	name=$(name_of "$sys")
	short=$name
	case $sys/$mode in
	gw/flood) name+=", one runner, OTPs first by priority"; short="graphile-worker 0.17.3 (one runner)" ;;
	gw/flood2) name+=", OTPs in a runner of their own"; short="graphile-worker 0.17.3 (an OTP runner)"; key=gw2 ;;
	esac
	for k in otps:$sent delivered:$got p50_ms:$p50 p99_ms:$p99 max_ms:$max flood_seconds:$secs flood_jobs_per_s:$rate; do
		presult "peers_lat_${key}_${k%%:*}" "${k#*:}"
	done
	row peers_lat "$name" "$sent" "$got" "$p50" "$p99" "$max" "$secs" "$rate"
	[ -z "${BENCH_OUT:-}" ] || printf '%s\t%s\t%s\n' "$short" "$p50" "$p99" >>"$BENCH_OUT/peers_latency.dat"
	echo "$key: $FLOOD_N flood jobs in ${secs}s ($rate/s); OTPs $sent sent, $got delivered, p50 $p50 ms, p99 $p99 ms, max $max ms"
}

if [[ " $PARTS " == *" latency "* ]]; then
	echo "latency: $FLOOD_N bulk jobs while an OTP is enqueued every ${OTP_GAP}s on a second queue"
	[ -n "${BENCH_OUT:-}" ] && : >"$BENCH_OUT/peers_latency.dat"
	for sys in $SYSTEMS; do
		lat_one "$sys"
		[ "$sys" != gw ] || lat_one gw flood2
	done
fi

# ---------------------------------------------------------------- wins
# every row where a peer did better than notif_deliver, with the reason
cpu_note=
[ "$STALE" != yes ] || cpu_note=" In this run notif_deliver's own row is behind its row with ANALYZE after the enqueue beyond the noise: stale statistics made its statements dearer (see the note under the throughput table)."
why() {
	case $1 in
	jobs_per_s:pgq | pg_cpu_per_1k:pgq | total_cpu_per_1k:pgq)
		echo "PgQ's consumer reads a whole tick's events with one query and writes nothing per event (finish_batch moves one subscription row per batch); notif_deliver claims and records every job (an UPDATE of its row to claim it and one to record the result, its work row in the unlogged notif_active inserted at the enqueue and deleted once done, and a notif_attempt row for every call but an accepted first one), which is what lets it retry per job, keep a per-job status and survive a crash without re-sending a whole batch.$cpu_note" ;;
	wal_per_job:pgq | wal_enqueue_per_job:pgq)
		echo "PgQ writes no per-event state on the way out and drops events by rotating its tables (TRUNCATE), not row by row; an event is one row with one index (on its transaction id) and no unique key, where notif_job carries its primary key, the unique key (user_id, kind, order_id), a per-type index for the retention purge and a BRIN index, and each job's row is updated twice on the way out (claim, result), with a notif_attempt row for every call but an accepted first one" ;;
	wal_per_job:gw)
		echo "graphile-worker deletes a finished job (one DELETE, batched), keeping no history; notif_deliver keeps each job with its status (two updates of its row, claim and result) and a notif_attempt row for every call but an accepted first one, for notif_stats, retries and audit" ;;
	wal_per_job:boss)
		echo "pg-boss marks a whole batch completed in one UPDATE and keeps no per-call row; notif_deliver records each call's outcome (status, HTTP code, timing) in the job's row, and in notif_attempt for every call but an accepted first one" ;;
	wal_enqueue_per_job:gw | wal_enqueue_per_job:boss)
		echo "its enqueue writes less per job: notif_job's row carries the payload and four indexes (the primary key, the unique key (user_id, kind, order_id) that stops duplicate enqueues, the per-type index for the retention purge and a BRIN index on created_at)" ;;
	jobs_per_s:gw | jobs_per_s:boss | pg_cpu_per_1k:gw | pg_cpu_per_1k:boss | total_cpu_per_1k:gw | total_cpu_per_1k:boss)
		echo "it claims and completes in large batches (graphile-worker: a local queue of 512 and batched completion; pg-boss: batches of 5000, each completed by one UPDATE) and keeps no per-call record; notif_deliver claims in batches of at most notif_deliver.batch_size and records each call's outcome (an UPDATE of the job's row, and a notif_attempt row for every call but an accepted first one).$cpu_note" ;;
	worker_cpu_per_1k:*)
		echo "notif_deliver's sender is a PostgreSQL process: its CPU includes running its own claim and record statements (SPI), which for a Node worker are the backends' CPU, counted under PostgreSQL; compare the total.$cpu_note" ;;
	lost:* | dup:*)
		echo "with the same p and q every at-least-once system expects about N·p·q = $(awk -v n="$SEM_N" -v p="$P" -v q="$Q" 'BEGIN { printf "%.0f", n * p * q }') duplicates and practically no loss; differences of duplicates within 4 sigma of that noise (about ±$(awk -v n="$SEM_N" -v p="$P" -v q="$Q" 'BEGIN { printf "%.0f", 4 * sqrt(2 * n * p * q) }')) are not listed, so this one is not chance: see the semantics table and its notes" ;;
	lost_kill:pgq)
		echo "PgQ serves an unfinished batch again with no limit on how often, so a kill never uses up a try (it re-sends the whole batch instead: see its duplicates); notif_deliver counts a call cut off by a kill as one of the job's max_tries (3), and gives up a job whose tries kills and timeouts used up (the 'gave up' column): raise max_tries for a type that must survive repeated crashes" ;;
	lost_kill:* | dup_kill:*)
		echo "a killed worker's jobs stay locked (graphile-worker: 4 h) or active (pg-boss: until expireInSeconds, 15 min) and are not tried again within the run, so they show as held, neither lost nor duplicated yet; their retry comes that much later, and is a duplicate for those the killed worker had already sent" ;;
	*) echo "see the notes below the tables" ;;
	esac
}
# the same reasons in a few words, for the summary in doc/benchmarks.md
short_why() {
	case $1 in
	jobs_per_s:pgq | pg_cpu_per_1k:pgq | total_cpu_per_1k:pgq)
		echo "PgQ reads a tick's events with one query and writes nothing per event; notif_deliver claims and records each job (its per-job status, retries and crash recovery)" ;;
	wal_per_job:pgq | wal_enqueue_per_job:pgq)
		echo "PgQ keeps no per-event state, drops events by rotating its tables, and indexes an event once; notif_deliver updates each job's row twice (claim, result), which has a unique key" ;;
	wal_per_job:gw) echo "graphile-worker deletes a finished job and keeps no history" ;;
	wal_per_job:boss) echo "pg-boss completes a batch with one UPDATE and keeps no per-call row" ;;
	wal_enqueue_per_job:*) echo "Its enqueue writes less per job (notif_job's row has the payload and four indexes, one the unique key against duplicate enqueues)" ;;
	jobs_per_s:* | pg_cpu_per_1k:* | total_cpu_per_1k:*)
		echo "It claims and completes in large batches and keeps no per-call record; notif_deliver records each call's outcome" ;;
	worker_cpu_per_1k:*) echo "notif_deliver's sender runs its own SQL in-process, which a Node worker leaves to the backends: compare the total CPU" ;;
	lost_kill:pgq) echo "PgQ serves an unfinished batch again without limit (hence its duplicates); notif_deliver counts a call cut off by a kill as one of max_tries" ;;
	lost_kill:gw | dup_kill:gw) echo "Not a better guarantee: the killed worker's jobs stay locked for 4 h (held), not yet retried" ;;
	lost_kill:boss | dup_kill:boss) echo "Not a better guarantee: the killed worker's jobs stay active until they expire after 15 min (held), not yet retried" ;;
	lost_kill:* | dup_kill:*) echo "See the semantics table" ;;
	*) echo "See benchmarks-peers.md" ;;
	esac
}
declare -A WS WK
win() {	# what sys peer_value nd_value higher|lower label [noise]
	local what=$1 sys=$2 pv=$3 nv=$4 dir=$5 label=$6 noise=${7:-0} margin
	[ -n "$pv" ] && [ -n "$nv" ] && [ "$pv" != nan ] && [ "$nv" != nan ] && [ "$pv" != - ] && [ "$nv" != - ] || return 0
	# better, and by more than the noise of a count (semantics) if given
	awk -v p="$pv" -v n="$nv" -v d="$dir" -v z="$noise" \
		'BEGIN { exit !((d == "higher" ? p > n : p < n) && (p - n > z || n - p > z)) }' || return 0
	margin=$(awk -v p="$pv" -v n="$nv" 'BEGIN { if (n == 0) print "-"; else printf "%.0f%%\n", (p > n ? p - n : n - p) / n * 100 }')
	row peers_wins "$label" "$(name_of "$sys")" "$pv" "$nv" "$margin" "$(why "$what:$sys")"
	wins=$((wins + 1))
	WS[$sys]+="${WS[$sys]:+; }$label: $pv against $nv"
	local w
	w=$(short_why "$what:$sys")
	w+=.	# a sentence each
	[[ "${WK[$sys]:-}" == *"$w"* ]] || WK[$sys]+="${WK[$sys]:+ }$w"
}
mlabel() {	# a metric's name in the tables
	case $1 in
	pg_cpu_per_1k) echo "PostgreSQL CPU s / 1k jobs" ;;
	worker_cpu_per_1k) echo "worker CPU s / 1k jobs" ;;
	total_cpu_per_1k) echo "total CPU s / 1k jobs" ;;
	wal_per_job) echo "WAL bytes / job, drain" ;;
	wal_enqueue_per_job) echo "WAL bytes / job, enqueue" ;;
	esac
}
wins=0
for sys in $SYSTEMS; do
	[ "$sys" = nd ] && continue
	for lat in 0 50; do
		win jobs_per_s "$sys" "${R[peers_${sys}_${lat}ms_jobs_per_s]:-}" "${R[peers_nd_${lat}ms_jobs_per_s]:-}" higher "jobs/s at $lat ms"
		for m in pg_cpu_per_1k worker_cpu_per_1k total_cpu_per_1k wal_per_job wal_enqueue_per_job; do
			win $m "$sys" "${R[peers_${sys}_${lat}ms_$m]:-}" "${R[peers_nd_${lat}ms_$m]:-}" lower "$(mlabel $m) at $lat ms"
		done
	done
	for k in "" _kill; do
		win "lost$k" "$sys" "${R[peers_sem_$sys${k}_lost]:-}" "${R[peers_sem_nd${k}_alo_lost]:-}" lower \
			"lost$([ -n "$k" ] && echo ", worker killed" || echo ", timeouts"), vs at_least_once"
		# with timeouts only, both counts are binomial samples: a difference
		# within 4 sigma of the difference is noise, not a win
		win "dup$k" "$sys" "${R[peers_sem_$sys${k}_dup]:-}" "${R[peers_sem_nd${k}_alo_dup]:-}" lower \
			"duplicated$([ -n "$k" ] && echo ", worker killed" || echo ", timeouts"), vs at_least_once" \
			"$([ -n "$k" ] && echo 0 || awk -v n="$SEM_N" -v p="$P" -v q="$Q" 'BEGIN { printf "%.1f", 4 * sqrt(2 * n * p * q) }')"
	done
	for m in p50_ms p99_ms; do
		win latency "$sys" "${R[peers_lat_${sys}_$m]:-}" "${R[peers_lat_nd_$m]:-}" lower "OTP latency ${m%_ms} during the flood, ms"
		[ "$sys" != gw ] || win latency gw "${R[peers_lat_gw2_$m]:-}" "${R[peers_lat_nd_$m]:-}" lower \
			"OTP latency ${m%_ms} during the flood (OTP runner of its own), ms"
	done
	win jobs_per_s "$sys" "${R[peers_lat_${sys}_flood_jobs_per_s]:-}" "${R[peers_lat_nd_flood_jobs_per_s]:-}" higher "flood drain, jobs/s"
done
[ $wins -gt 0 ] || row peers_wins "none" "no peer did better than notif_deliver on any row of this run" "" "" "" ""
# the summary: per peer, the rows it won (its figure against notif_deliver's)
for sys in $SYSTEMS; do
	[ "$sys" = nd ] && continue
	row peers_wins_head "$(name_of "$sys")" "${WS[$sys]:-none}" "${WK[$sys]:-}"
done
presult peers_wins "$wins"
presult peers_duration "\"$((SECONDS / 60)) min $((SECONDS % 60)) s\""
presult peers_load_end "\"$(cut -d' ' -f1-3 /proc/loadavg)\""
echo "peers: done"
