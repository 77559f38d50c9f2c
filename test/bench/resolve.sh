#!/usr/bin/env bash
# test/bench/resolve.sh: resolving the unknown (issue 31), in numbers.
#
# The fault model of semantics.sh (a call times out with probability p; a
# timed-out call was delivered anyway with probability q; max_tries 3;
# provider timeout 500 ms), with a provider that cooperates.  N jobs per
# run; lost and duplicated are counted from the simulator's ledger:
#   dedup    at_most_once, the provider honours its idempotency key for a
#            minute (simulator --dedup-window-ms, provider dedup_window):
#            an ambiguous call is retried inside the window.  Lost ~
#            N (p(1-q))^3 (every try ambiguous, none delivered), duplicated 0
#            (without the window: lost ~ N p (1-q), semantics.sh).
#   breaks   the same, the provider breaking its promise for every repeat
#            (--dedup-breaks 1): duplicated ~ N p q, what the guide warns of.
#   nowait   at_least_once, delivery reports on (latency lognormal, median
#            DLR_MEDIAN ms, p99 DLR_P99 ms, fed to notif_dlr every 100 ms),
#            resolve_wait 0: duplicated ~ N p q (1 - F0), F0 the share of
#            reports that beat the 50-200 ms backoff.
#   wait     the same with resolve_wait RESOLVE_WAIT: duplicated ~ N p q
#            (1 - F), F the share of reports in time (the report's latency
#            below the wait plus the call's timeout, less the feeding
#            delay), lost 0; and the delay the wait adds to the retried
#            jobs (p50/p99 of the time from an ambiguous call's end to the
#            next call's start).
#   lookup   at_least_once, the provider's status lookup (GET /status/{key},
#            backed by the simulator's ledger) asked before each retry, a
#            share LOOKUP_FAIL of the lookups answering 503: duplicated ~
#            N p q LOOKUP_FAIL (a retry follows only a lookup that said not
#            found, or gave no answer), lost ~ N (p(1-q))^3.
# A count outside its band (binomial, 4 sigma, at least 2) fails the script.
#
#   bash test/bench/resolve.sh
#
# Environment: BENCH_SCALE [1] multiplies N [RES_JOBS, 100000]; the rows
# nowait and wait run min(N, 20000) jobs [RES_REPORT_JOBS]; RES_P
# [0.005]; RES_Q [0.5]; RES_SEED [1]; DLR_MEDIAN [300] and DLR_P99 [1500]
# (ms); RESOLVE_WAIT [2] (s); LOOKUP_FAIL [0.2]; BENCH_PORT, BENCH_SIM_PORT, BENCH_OUT: see
# test/bench/lib/common.sh.  Needs the extension installed and the simulator built.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

N=${RES_JOBS:-$(bench_scale 100000)}
# the rows with delivery reports time them against the backoff: their jobs
# must not wait behind a backlog (a retry due after 125 ms then starts when
# the backlog has drained, seconds later), nor their reports behind the
# feeder; at most RES_REPORT_JOBS jobs each
NR=${RES_REPORT_JOBS:-$((N < 20000 ? N : 20000))}
P=${RES_P:-0.005}
Q=${RES_Q:-0.5}
SEED=${RES_SEED:-1}
DLR_MEDIAN=${DLR_MEDIAN:-300}
DLR_P99=${DLR_P99:-1500}
WAIT=${RESOLVE_WAIT:-2}
LOOKUP_FAIL=${LOOKUP_FAIL:-0.2}
SIM=$BENCH_SIM_PORT

bench_dir resolve
sim_start main "$SIM" --hold-ms 2000
cluster_start "$BENCH_DIR/pg" "$BENCH_PORT" "notif_deliver.database = 'postgres'" \
	"notif_deliver.max_inflight = 256" "notif_deliver.poll_interval = '1s'" \
	"max_worker_processes = 16" "max_wal_size = '4GB'"
cluster_psql <<SQL >/dev/null
CREATE EXTENSION notif_deliver;
UPDATE notif_provider SET url = 'http://127.0.0.1:$SIM/send', idempotency_header = 'Idempotency-Key',
       timeout = '500 ms', max_inflight = 512, dedup_window = '1 minute' WHERE name = 'default';
INSERT INTO notif_provider (name, url, idempotency_header, timeout, max_inflight)
VALUES ('reports', 'http://127.0.0.1:$SIM/send', 'Idempotency-Key', '500 ms', 512);
INSERT INTO notif_provider (name, url, idempotency_header, timeout, max_inflight, lookup_url)
VALUES ('lookup', 'http://127.0.0.1:$SIM/send', 'Idempotency-Key', '500 ms', 512,
        'http://127.0.0.1:$SIM/status/{key}');
INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max, resolve_wait, paused) VALUES
  ('dedup', 'at_most_once', 3, 'default', '50 ms', '200 ms', '0', true),
  ('breaks', 'at_most_once', 3, 'default', '50 ms', '200 ms', '0', true),
  ('nowait', 'at_least_once', 3, 'reports', '50 ms', '200 ms', '0', true),
  ('wait', 'at_least_once', 3, 'reports', '50 ms', '200 ms', '$WAIT s', true),
  ('lookup', 'at_least_once', 3, 'lookup', '50 ms', '200 ms', '0', true);
SQL

# "mean band" of a binomial count n * pi
band() {
	awk -v n="$RN" -v pi="$1" 'BEGIN { s = 4 * sqrt(n * pi * (1 - pi)); printf "%.2f %.2f\n", n * pi, (s < 2 ? 2 : s) }'
}

# the share of reports in time for a retry W seconds after an ambiguous
# call's end: the lognormal's CDF at W plus the call's timeout, less 0.2 s
# of feeding (Abramowitz-Stegun 7.1.26 for erf)
in_time() {
	awk -v m="$DLR_MEDIAN" -v p99="$DLR_P99" -v w="$1" 'BEGIN {
		t = (w + 0.5 - 0.2) * 1000
		if (p99 <= m) { print (t >= m ? 1 : 0); exit }
		s = log(p99 / m) / 2.3263; z = (log(t) - log(m)) / (s * sqrt(2))
		x = z < 0 ? -z : z; k = 1 / (1 + 0.3275911 * x)
		e = 1 - (((((1.061405429 * k - 1.453152027) * k) + 1.421413741) * k - 0.284496736) * k + 0.254829592) * k * exp(-x * x)
		if (z < 0) e = -e
		printf "%.4f\n", 0.5 * (1 + e) }'
}

# feed the simulator's delivery reports to notif_dlr: up to 5,000 a
# statement (on standard input), polling every 100 ms when none is waiting
feeder() {
	local after=0 lines
	while :; do
		lines=$(sim_get "$SIM" "/dlrs?after=$after&limit=5000") || lines=
		if [ -n "$lines" ]; then
			awk -F'\t' 'BEGIN { print "SELECT count(notif_dlr(k, d, to_timestamp(ms / 1000.0))) FROM (VALUES" }
				{ printf "%s('\''%s'\'', %s, %s)\n", (NR > 1 ? ", " : ""), $2, ($3 == 1 ? "true" : "false"), $4 }
				END { print ") AS r(k, d, ms);" }' <<<"$lines" | cluster_psql >/dev/null
			after=$(tail -n 1 <<<"$lines" | cut -f1)
			continue
		fi
		sleep 0.1
	done
}

failed=0
check() {	# tag what measured mean band
	if awk -v m="$3" -v t="$4" -v b="$5" 'BEGIN { exit !(m >= t - b && m <= t + b) }'; then echo pass; else
		echo "FAIL $1: $2 $3 outside $4 ± $5" >&2
		echo FAIL
	fi
}

# one run: KIND SIMCONFIG
one_run() {
	local kind=$1 config=$2 feeding=${3:-0} fpid= t0 secs counts lost dup
	sim_get "$SIM" /reset >/dev/null
	sim_get "$SIM" "/config?p_timeout=$P&q=$Q&seed=$SEED&$config" >/dev/null
	cluster_psql -c "TRUNCATE notif_job, notif_attempt, notif_dlr CASCADE" \
		-c "SELECT count(notif_enqueue(g, '$kind', 'r1', '{\"to\":\"+84900000000\",\"text\":\"hi\"}')) FROM generate_series(1, $RN) g" \
		-c "CHECKPOINT" >/dev/null
	if [ "$feeding" = 1 ]; then feeder & fpid=$!; fi
	t0=$SECONDS
	cluster_psql -c "UPDATE notif_type SET paused = false WHERE code = '$kind'" >/dev/null
	wait_sql "$(nd_idle_sql "$kind")" 1800
	secs=$((SECONDS - t0))
	cluster_psql -c "UPDATE notif_type SET paused = true WHERE code = '$kind'" >/dev/null
	if [ -n "$fpid" ]; then kill "$fpid" 2>/dev/null || true; wait "$fpid" 2>/dev/null || true; fi
	counts=$(sim_get "$SIM" /ledger | awk -v n="$RN" '{ if ($3 >= 1) got++; if ($3 > 1) dup += $3 - 1 }
		END { printf "%d %d\n", n - got, dup + 0 }')
	read -r lost dup <<<"$counts"
	echo "$lost $dup $secs"
}

# the added delay of the retried jobs: p50 and p99 (ms) of the time from an
# ambiguous call's end to the job's next call's start (a call after the
# first is always a row of notif_attempt)
retry_delay_sql="SELECT coalesce(round(percentile_cont(0.5) WITHIN GROUP (ORDER BY d))::text, '-') || ' ' ||
                        coalesce(round(percentile_cont(0.99) WITHIN GROUP (ORDER BY d))::text, '-')
                   FROM (SELECT 1000 * extract(epoch FROM (SELECT min(b.started_at) FROM notif_attempt b
                                                     WHERE b.job_id = a.job_id AND b.try > a.try) - a.ended_at) AS d
                           FROM notif_attempt a WHERE a.outcome = 'unknown') x WHERE d IS NOT NULL"

echo "resolve: $N jobs per run ($NR with reports), p = $P, q = $Q, $(nproc) cores, $(pg_config --version)"
result res_jobs "$N"
result res_report_jobs "$NR"
result res_p "$P"
result res_q "$Q"
result res_wait_s "$WAIT"
result res_dlr_median_ms "$DLR_MEDIAN"
result res_dlr_p99_ms "$DLR_P99"
F=$(in_time "$WAIT")
F0=$(in_time 0.125)	# the mean backoff
result res_reports_in_time "$F"
result res_reports_in_time_nowait "$F0"
miss=$(awk -v p="$P" -v q="$Q" 'BEGIN { print p * (1 - q) }')

row_of() {	# tag delivery cooperation lost_theory lost dup_theory dup extra
	local tag=$1 lt lb dt db v1 v2 verdict seed ratio
	read -r lt lb <<<"$(band "$4")"
	read -r dt db <<<"$(band "$6")"
	v1=$(check "$tag" lost "$5" "$lt" "$lb")
	v2=$(check "$tag" duplicated "$7" "$dt" "$db")
	verdict=pass
	[ "$v1" = pass ] && [ "$v2" = pass ] || { verdict=FAIL; failed=1; }
	result "res_${tag}_lost" "$5"
	result "res_${tag}_dup" "$7"
	result "res_${tag}_lost_theory" "$lt"
	result "res_${tag}_dup_theory" "$dt"
	# against the seed's table, no cooperation: at_most_once loses N p (1-q),
	# at_least_once duplicates N p q; the ratio of what this row measured
	if [ "$2" = at_most_once ]; then
		seed=$(awk -v n="$RN" -v p="$P" -v q="$Q" 'BEGIN { printf "%.1f", n * p * (1 - q) }')
		ratio=$(awk -v m="$5" -v d="$7" -v s="$seed" 'BEGIN { printf "%.2f", (m + d) / s }')
	else
		seed=$(awk -v n="$RN" -v p="$P" -v q="$Q" 'BEGIN { printf "%.1f", n * p * q }')
		ratio=$(awk -v m="$5" -v d="$7" -v s="$seed" 'BEGIN { printf "%.2f", (m + d) / s }')
	fi
	result "res_${tag}_seed" "$seed"
	result "res_${tag}_ratio" "$ratio"
	row resolve "$2" "$3" "$(printf '%.1f ± %.1f' "$lt" "$lb")" "$5" "$(printf '%.1f ± %.1f' "$dt" "$db")" "$7" "$ratio ($seed)" "$8" "$verdict"
	printf '%-7s %-14s lost %5d (theory %7.2f ± %5.2f)  duplicated %5d (theory %7.2f ± %5.2f)  x%s of %s  %s  %s\n' \
		"$tag" "$2" "$5" "$lt" "$lb" "$7" "$dt" "$db" "$ratio" "$seed" "$8" "$verdict"
}

RN=$N
read -r lost dup secs <<<"$(one_run dedup "dedup_window_ms=60000&dedup_breaks=0")"
row_of dedup at_most_once "dedup_window 1 min, honoured" "$(awk -v m="$miss" 'BEGIN { print m ^ 3 }')" "$lost" 0 "$dup" "-"
read -r lost dup secs <<<"$(one_run breaks "dedup_window_ms=60000&dedup_breaks=1")"
row_of breaks at_most_once "dedup_window 1 min, broken" "$(awk -v m="$miss" 'BEGIN { print m ^ 3 }')" "$lost" \
	"$(awk -v p="$P" -v q="$Q" 'BEGIN { print p * q }')" "$dup" "-"
RN=$NR
read -r lost dup secs <<<"$(one_run nowait "dedup_window_ms=0&dlr_median_ms=$DLR_MEDIAN&dlr_p99_ms=$DLR_P99" 1)"
delay=$(cluster_psql -At -c "$retry_delay_sql")
result res_nowait_retry_delay_p50_ms "${delay% *}"
result res_nowait_retry_delay_p99_ms "${delay#* }"
row_of nowait at_least_once "reports, resolve_wait 0" "$(awk -v m="$miss" 'BEGIN { print m ^ 3 }')" "$lost" \
	"$(awk -v p="$P" -v q="$Q" -v f="$F0" 'BEGIN { print p * q * (1 - f) }')" "$dup" "${delay% *} / ${delay#* } ms"
read -r lost dup secs <<<"$(one_run wait "dedup_window_ms=0&dlr_median_ms=$DLR_MEDIAN&dlr_p99_ms=$DLR_P99" 1)"
delay=$(cluster_psql -At -c "$retry_delay_sql")
resolved=$(cluster_psql -At -c "SELECT count(*) FROM notif_job WHERE resolved_by = 'report'")
result res_wait_retry_delay_p50_ms "${delay% *}"
result res_wait_retry_delay_p99_ms "${delay#* }"
result res_wait_resolved_by_report "$resolved"
row_of wait at_least_once "reports, resolve_wait $WAIT s" "$(awk -v m="$miss" 'BEGIN { print m ^ 3 }')" "$lost" \
	"$(awk -v p="$P" -v q="$Q" -v f="$F" 'BEGIN { print p * q * (1 - f) }')" "$dup" "${delay% *} / ${delay#* } ms"
echo "wait: $resolved jobs resolved by a report; reports in time (theory): $F"
RN=$N
read -r lost dup secs <<<"$(one_run lookup "dedup_window_ms=0&dlr_median_ms=0&p_lookup_fail=$LOOKUP_FAIL&lookup_fail_mode=503")"
counts=$(cluster_psql -At -F ' ' -c "SELECT resolved_lookup_found, resolved_lookup_not_found FROM notif_resolved WHERE kind = 'lookup'")
result res_lookup_fail "$LOOKUP_FAIL"
result res_lookup_found "${counts% *}"
result res_lookup_not_found "${counts#* }"
row_of lookup at_least_once "status lookup, $LOOKUP_FAIL of lookups fail" "$(awk -v m="$miss" 'BEGIN { print m ^ 3 }')" "$lost" \
	"$(awk -v p="$P" -v q="$Q" -v f="$LOOKUP_FAIL" 'BEGIN { print p * q * f }')" "$dup" "found ${counts% *}, not found ${counts#* }"
echo "lookup: found ${counts% *}, not found ${counts#* }"

if [ $failed -ne 0 ]; then
	echo "resolve: FAILED" >&2
	exit 1
fi
echo "resolve: every count within its band"
