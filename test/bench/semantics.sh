#!/usr/bin/env bash
# test/bench/semantics.sh: the delivery guarantee in numbers (issue 4, section 1).
#
# N at_most_once and N at_least_once jobs (max_tries 3 each) go to the
# provider simulator, where each call times out with probability p and a
# timed-out call was delivered anyway with probability q.  Lost and
# duplicated messages are counted from the simulator's ledger (never from
# notif_job) and printed next to what theory expects:
#   at_most_once   lost  ~ N p (1-q)        duplicated 0
#   at_least_once  lost  ~ N (p(1-q))^3     duplicated ~ N ((1+p+p^2)(1-p+pq) - 1 + (p(1-q))^3)
#                  (0 duplicated when the provider honours the idempotency key)
# A measurement outside the 4-sigma band of the binomial expectation fails
# the script.  Then the kill runs: the same, with a sender SIGKILLed every
# few seconds (PostgreSQL then restarts all its processes, as after any
# crash); there only the invariants are asserted (at_most_once never
# duplicates, at_least_once never loses, nothing is left in flight), and the
# counts are reported.
#
#   bash test/bench/semantics.sh
#
# Environment (defaults in brackets):
#   BENCH_SCALE [1]       multiplies N
#   SEM_JOBS [100000]     N per delivery mode
#   SEM_P [0.005]         p
#   SEM_RUNS              runs as q:seed:idempotency[:off], ["0.5:1:0 0.5:2:0 0.5:3:0 0.9:1:0 0.9:2:0 0.9:3:0 0.5:1:1"]
#                         (":off": with the server's synchronous_commit = off)
#   SEM_KILL_RUNS         kill runs, same form [the SEM_RUNS, plus 0.5:1:0:off]; "" for none
#   SEM_KILL_EVERY [2]    seconds between kills
#   SEM_BATCH_RUNS [""]   runs with provider batches, as q:seed:batch_max
#                         (test/bench/semantics_batch.sh sets them): the
#                         provider on the simulator's /batch, p per call, q
#                         per message; the same means, and a band widened by
#                         the batches' design effect (below)
#   BENCH_PORT, BENCH_SIM_PORT, BENCH_OUT: see test/bench/lib/common.sh
# Needs the extension installed (make install) and the simulator built.
# Prints RESULT and ROW lines for test/bench/run; exits 1 if a check failed.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

N=${SEM_JOBS:-$(bench_scale 100000)}
P=${SEM_P:-0.005}
RUNS=${SEM_RUNS-0.5:1:0 0.5:2:0 0.5:3:0 0.9:1:0 0.9:2:0 0.9:3:0 0.5:1:1}
KILL_RUNS=${SEM_KILL_RUNS-$RUNS 0.5:1:0:off}
KILL_EVERY=${SEM_KILL_EVERY:-2}
BATCH_RUNS=${SEM_BATCH_RUNS-}
SIM=$BENCH_SIM_PORT

bench_dir semantics
sim_start main "$SIM" --hold-ms 2000
cluster_start "$BENCH_DIR/pg" "$BENCH_PORT" "notif_deliver.database = 'postgres'" \
	"notif_deliver.max_inflight = 256" "notif_deliver.poll_interval = '1s'" \
	"max_worker_processes = 16" "restart_after_crash = on" \
	"max_wal_size = '4GB'"
cluster_psql <<SQL
CREATE EXTENSION notif_deliver;
UPDATE notif_provider SET url = 'http://127.0.0.1:$SIM/send', idempotency_header = 'Idempotency-Key',
       timeout = '500 ms', max_inflight = 512,
       breaker_threshold = NULL WHERE name = 'default';  -- the theory is per call: no breaker
INSERT INTO notif_type (code, delivery, max_tries, lane, backoff_min, backoff_max, paused) VALUES
  ('amo', 'at_most_once',  3, 'amo', '50 ms', '200 ms', true),
  ('alo', 'at_least_once', 3, 'alo', '50 ms', '200 ms', true);
SQL

failed=0
run_no=0
[ -n "${BENCH_OUT:-}" ] && [ -n "$RUNS" ] && : >"$BENCH_OUT/semantics.dat"

# theory: mean and 4-sigma half-width, for one mode.  With batches the
# means are the same (a message's call is held with probability p, and
# then it is delivered with probability q, drawn per message), but the
# misses come in lumps: the variance is at most the binomial one times the
# design effect DEFF = sum(n^2) / sum(n) over the batches' sizes n (first
# tries), which widens the band (1 without batches)
theory() {	# mode q idem what [deff] -> "mean band"
	awk -v n="$N" -v p="$P" -v q="$2" -v idem="$3" -v mode="$1" -v what="$4" -v deff="${5:-1}" 'BEGIN {
		miss = p * (1 - q)
		if (mode == "amo" && what == "lost") pi = miss
		else if (mode == "amo") pi = 0
		else if (what == "lost") pi = miss ^ 3
		else if (idem) pi = 0
		else pi = (1 + p + p * p) * (1 - p + p * q) - 1 + miss ^ 3
		printf "%.2f %.2f\n", n * pi, 4 * sqrt(n * pi * (1 - pi) * deff) }'
}

# one run: q seed idem killing(0/1) [off [batch_max]]; prints the rows, sets failed
one_run() {
	local q=$1 seed=$2 idem=$3 kill=$4 sc=${5:-on} batch=${6:-1} tag kills=0 killer= t0 secs
	run_no=$((run_no + 1))
	local idem_yn=no
	tag="q${q}_s${seed}"
	if [ "$idem" = 1 ]; then tag+=_idem; idem_yn=yes; fi
	if [ "$sc" = off ]; then tag+=_async; fi
	if [ "$kill" = 1 ]; then tag+=_kill; fi
	if [ "$batch" -gt 1 ]; then
		tag+=_batch$batch
		cluster_psql -c "UPDATE notif_provider SET url = 'http://127.0.0.1:$SIM/batch', ref_field = 'ref', batch_max = $batch,
			batch_results = '{\"path\": \"results\", \"field\": \"status\", \"accepted\": [\"accepted\"], \"rejected\": [\"rejected\"]}'
			WHERE name = 'default'" >/dev/null
	else
		cluster_psql -c "UPDATE notif_provider SET url = 'http://127.0.0.1:$SIM/send', ref_field = NULL, batch_max = NULL,
			batch_results = NULL WHERE name = 'default'" >/dev/null
	fi
	# (the types are paused: their senders read the provider with the resume below)
	cluster_psql -c "ALTER SYSTEM SET synchronous_commit = $sc" -c "SELECT pg_reload_conf()" >/dev/null
	sim_get "$SIM" /reset >/dev/null
	sim_get "$SIM" "/config?p_timeout=$P&q=$q&seed=$seed&idempotency=$idem" >/dev/null
	cluster_psql -c "TRUNCATE notif_job, notif_attempt CASCADE" \
		-c "SELECT count(notif_enqueue(g, 'amo', 'r$run_no', '{\"to\":\"+84900000000\",\"text\":\"sale\"}')) FROM generate_series(1, $N) g" \
		-c "SELECT count(notif_enqueue(g, 'alo', 'r$run_no', '{\"to\":\"+84900000000\",\"text\":\"Ma OTP: 123456\"}')) FROM generate_series(1, $N) g" \
		-c "CHECKPOINT" >/dev/null
	t0=$SECONDS
	cluster_psql -c "UPDATE notif_type SET paused = false" >/dev/null
	if [ "$kill" = 1 ]; then
		: >"$BENCH_DIR/kills"
		(
			lane=amo
			while :; do
				sleep "$KILL_EVERY"
				pid=$(pm_children | awk -v l="$lane" '$0 ~ "notif_deliver sender " l " *$" { print $1; exit }')
				if [ -n "$pid" ]; then
					kill -KILL "$pid" 2>/dev/null && echo kill >>"$BENCH_DIR/kills"
					[ $lane = amo ] && lane=alo || lane=amo
				fi
			done
		) &
		killer=$!
	fi
	wait_sql "$(nd_idle_sql)" 1800
	secs=$((SECONDS - t0))
	if [ -n "$killer" ]; then
		kill "$killer" 2>/dev/null || true
		wait "$killer" 2>/dev/null || true
		kills=$(wc -l <"$BENCH_DIR/kills")
		# a kill may have landed after the last check: wait for the restart
		wait_sql "$(nd_idle_sql)" 600
	fi
	until cluster_psql -c "UPDATE notif_type SET paused = true" >/dev/null 2>&1; do sleep 0.5; done
	sim_get "$SIM" /ledger >"$BENCH_DIR/ledger"

	# lost / duplicated per mode, from the ledger; interrupted calls from notif_attempt
	local counts interrupted
	counts=$(awk -v n="$N" '
		{ split($1, k, ":"); m = k[1]; if ($3 >= 1) got[m]++; if ($3 > 1) dup[m] += $3 - 1 }
		END { printf "%d %d %d %d\n", n - got["amo"], dup["amo"] + 0, n - got["alo"], dup["alo"] + 0 }' "$BENCH_DIR/ledger")
	interrupted=$(cluster_psql -At -F' ' -c "SELECT count(*) FILTER (WHERE j.kind = 'amo'), count(*) FILTER (WHERE j.kind = 'alo')
		FROM notif_attempt a JOIN notif_job j ON j.id = a.job_id WHERE a.error LIKE 'the sender stopped%'")
	local amo_lost amo_dup alo_lost alo_dup amo_int alo_int
	read -r amo_lost amo_dup alo_lost alo_dup <<<"$counts"
	read -r amo_int alo_int <<<"$interrupted"
	local stuck
	stuck=$(cluster_psql -At -c "SELECT count(*) FROM notif_job WHERE status IN ('queued', 'sending') OR claimed_by IS NOT NULL")

	local mode lost dup tl bl td bd verdict what deff=1 calls=0
	for mode in amo alo; do
		if [ $mode = amo ]; then lost=$amo_lost dup=$amo_dup; else lost=$alo_lost dup=$alo_dup; fi
		if [ "$batch" -gt 1 ]; then
			read -r deff calls <<<"$(cluster_psql -At -F' ' -c "SELECT round(sum(n * n)::numeric / sum(n), 2), count(*)
				FROM (SELECT count(*) AS n FROM notif_calls c JOIN notif_job j ON j.id = c.job_id
				       WHERE j.kind = '$mode' AND c.try = 1 GROUP BY coalesce(c.batch_id, -c.job_id)) b")"
		fi
		read -r tl bl <<<"$(theory $mode "$q" "$idem" lost "$deff")"
		read -r td bd <<<"$(theory $mode "$q" "$idem" dup "$deff")"
		verdict=pass
		if [ "$kill" = 0 ]; then
			for what in lost dup; do
				local m t b
				if [ $what = lost ]; then m=$lost t=$tl b=$bl; else m=$dup t=$td b=$bd; fi
				if ! awk -v m="$m" -v t="$t" -v b="$b" 'BEGIN { exit !(m >= t - b && m <= t + b) }'; then
					verdict=FAIL
					echo "FAIL $tag $mode: $what $m outside $t ± $b" >&2
				fi
			done
		else
			if [ $mode = amo ] && [ "$dup" -ne 0 ]; then verdict=FAIL; echo "FAIL $tag: at_most_once duplicated $dup under kills" >&2; fi
			if [ $mode = alo ] && [ "$lost" -ne 0 ]; then verdict=FAIL; echo "FAIL $tag: at_least_once lost $lost under kills" >&2; fi
			if [ "$stuck" -ne 0 ]; then verdict=FAIL; echo "FAIL $tag: $stuck jobs left in flight" >&2; fi
		fi
		[ $verdict = pass ] || failed=1
		local dname
		[ $mode = amo ] && dname=at_most_once || dname=at_least_once
		result "sem_${tag}_${mode}_lost" "$lost"
		result "sem_${tag}_${mode}_dup" "$dup"
		if [ "$batch" -gt 1 ]; then
			result "sem_${tag}_${mode}_lost_theory" "$tl"
			result "sem_${tag}_${mode}_dup_theory" "$td"
			result "sem_${tag}_${mode}_deff" "$deff"
			row semantics_batch "$q" "$seed" "$batch" "$calls" "$deff" "$dname" \
				"$(printf '%.1f ± %.1f' "$tl" "$bl")" "$lost" "$(printf '%.1f ± %.1f' "$td" "$bd")" "$dup" "$verdict"
		elif [ "$kill" = 0 ]; then
			result "sem_${tag}_${mode}_lost_theory" "$tl"
			result "sem_${tag}_${mode}_dup_theory" "$td"
			row semantics "$q" "$seed" "$idem_yn" "$sc" "$dname" \
				"$(printf '%.1f ± %.1f' "$tl" "$bl")" "$lost" "$(printf '%.1f ± %.1f' "$td" "$bd")" "$dup" "$verdict"
			[ -z "${BENCH_OUT:-}" ] || printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
				"q=$q s=$seed$([ "$idem" = 1 ] && echo ' idem' || true)" "$mode" "$tl" "$bl" "$lost" "$td" "$bd" "$dup" \
				>>"$BENCH_OUT/semantics.dat"
		else
			local inter
			[ $mode = amo ] && inter=$amo_int || inter=$alo_int
			row semantics_kill "$q" "$seed" "$idem_yn" "$sc" "$dname" "$kills" "$inter" \
				"$lost" "$dup" "$([ $mode = amo ] && echo "duplicated = 0" || echo "lost = 0")" "$verdict"
		fi
		if [ "$kill" = 0 ]; then
			printf '%-22s %-14s lost %6d (theory %9.2f ± %7.2f)  duplicated %6d (theory %9.2f ± %7.2f)  %s\n' \
				"$tag" "$dname" "$lost" "$tl" "$bl" "$dup" "$td" "$bd" "$verdict"
		else
			printf '%-22s %-14s lost %6d  duplicated %6d  (no theory under kills)  %s\n' \
				"$tag" "$dname" "$lost" "$dup" "$verdict"
		fi
	done
	if [ "$kill" = 1 ]; then
		echo "$tag: $kills kills, calls interrupted: at_most_once $amo_int, at_least_once $alo_int, drained in ${secs}s"
	else
		echo "$tag: drained $((2 * N)) jobs in ${secs}s"
	fi
	result "sem_${tag}_seconds" "$secs"
	return 0
}

echo "semantics: $N jobs per mode, p = $P, $(nproc) cores, $(pg_config --version)"
result sem_jobs "$N"
result sem_p "$P"
for r in $RUNS; do
	IFS=: read -r q seed idem sc <<<"$r"
	one_run "$q" "$seed" "$idem" 0 "${sc:-on}"
done
for r in $KILL_RUNS; do
	IFS=: read -r q seed idem sc <<<"$r"
	one_run "$q" "$seed" "$idem" 1 "${sc:-on}"
done
for r in $BATCH_RUNS; do
	IFS=: read -r q seed batch <<<"$r"
	one_run "$q" "$seed" 0 0 on "$batch"
done
result sem_kill_every_s "$KILL_EVERY"
if [ $failed -ne 0 ]; then
	echo "semantics: FAILED" >&2
	exit 1
fi
echo "semantics: every measurement within its band, every invariant held"
