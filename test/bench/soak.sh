#!/usr/bin/env bash
# test/bench/soak.sh: an hour without drift (issue 32), `make soak`; not in
# CI, not in `make bench`.  The night's rig (test/bench/lib/night_lib.sh: two
# provider simulators with lognormal latency and 0.5% timeouts behind TLS
# fronts, SMS over HTTP/1.1 and push over HTTP/2) at a steady fraction of
# the night's rate for SOAK_MINUTES: promotions at SOAK_RATE per second,
# alerts and OTPs alongside, every type with a short retention so that the
# purge runs many times.  Every SOAK_SAMPLE seconds it records the sizes
# of notif_job (heap), its indexes, notif_active (with its indexes) and
# notif_attempt (with its indexes), their dead tuples, the autovacuum runs
# on them so far, the OTP latency p99 over the sample (enqueue to the
# provider's acceptance recorded) and the promotions finished per second.
# At the end: whether each size levelled off (its mean over the last
# quarter of the samples against its mean over the samples of the first
# quarter after the first retention period and a purge; level means at
# most SOAK_TOLERANCE, 10% by default, above), and what was lost and
# duplicated per type from the simulators' ledgers.
#
# Lost and duplicated, key by key: every key the load sessions enqueued
# (promotions 1..enqueued, the even ones push; OTPs and alerts from
# night_log) is looked up in the ledgers, which the simulators write to a
# file when stopped (never read over HTTP: the file has every key, and the
# script checks its count against the simulator's /stats).  A key with no
# delivered copy is lost; each delivered copy past the first a duplicate.
# The jobs are purged after the retention, so a trigger copies each
# purged job the provider did not accept (failed, expired, or an
# at_most_once call whose outcome is unknown or unreached) into
# soak_unaccepted as it is deleted (the jobs left at the end are copied
# too), and each lost key is explained by its job there:
# "ambiguous" (outcome unknown: the call may or may not have been acted
# upon, the at_most_once allowance), "unreached" (never reached the
# provider: failed or expired with every try refused before the request
# went out), or "unexplained" (no such job: the provider accepted it, by
# the database, and the ledger has no delivered copy; 0 if the count is
# right).  The last_error of the unaccepted jobs is summed up per type.
#
#   make soak                                   installs and builds what it needs, then the hour,
#                                               then keeps its results and writes doc/benchmarks.md (SOAK_DOC=1)
#   bash test/bench/soak.sh                     the hour alone (extension installed, simulator built)
#   SOAK_MINUTES=5 SOAK_RETENTION='1 minute' bash test/bench/soak.sh   a short check
#
# Environment: SOAK_INSTALL [unset; 1: install and build first, as make
# soak does]; SOAK_DOC [unset; 1: keep the run, as make soak does:
# test/bench/report/soak_doc.sh copies soak.dat and soak_results.txt to
# test/bench/results/ (soak.dat, soak.txt), draws doc/img/soak.png and
# writes doc/benchmarks.md again]; SOAK_MINUTES [60]; SOAK_RATE [500] promotions/s (9% of the
# night's 5,556/s; about a quarter of what a night on this shared 2-core
# machine sustained); SOAK_OTP_RATE [20]/s; SOAK_ALERT_RATE [50]/s;
# SOAK_RETENTION [5 minutes]; SOAK_PURGE_INTERVAL [30s]; SOAK_SAMPLE [60]
# s; SOAK_TOLERANCE [0.10]; SOAK_OUT (folder for soak.dat and
# soak_results.txt; default BENCH_OUT, else the current folder); NIGHT_INFLIGHT, NIGHT_PUSH_CONNECTIONS,
# NIGHT_TIMEOUT, NIGHT_FRONT_PORT as night.sh's; BENCH_PORT, BENCH_SIM_PORT.
# The simulators keep every key they received (about 1 kB each with its
# last request): an hour at 500/s is about 1.8 million keys, 2 GB.
# Output: soak.dat, one line per sample, columns
#   minute job_heap_kb job_index_kb active_kb attempt_kb job_dead active_dead
#   attempt_dead job_autovacuums active_autovacuums attempt_autovacuums
#   otp_p99_ms promo_per_s bulk_fds
# (bulk_fds: the file descriptors the bulk lane's sender has open at the
# sample, against its RLIMIT_NOFILE, often 1024: each HTTP/1.1 call holds
# a socket)
# the same lines on stdout as they come, then "LEVEL relation first last
# growth_pct yes|no" per size, the table of types (enqueued delivered
# lost duplicated, and the lost as ambiguous unreached unexplained),
# "UNACCEPTED type status outcome count last_error" lines, and RESULT
# lines (soak_*: the machine and the settings first, at the end what
# test/bench/lib/soak_summary.sh says of the samples: the rate, the OTP p99
# range, autovacuum runs, dead tuples).  soak_results.txt: the RESULT and
# ROW lines (the LEVEL lines and the types' table as rows), as
# test/bench/report/report.pl reads them.
set -euo pipefail
# `make soak` (SOAK_INSTALL=1): first what make bench installs and builds
if [ "${SOAK_INSTALL:-}" = 1 ]; then
	(
		cd "$(dirname "$0")/../.."
		bash test/deps.sh --bench
		make -s >/dev/null
		make -s -C test/sim >/dev/null
		if [ "$(id -u)" = 0 ]; then make -s install >/dev/null; else sudo make -s install >/dev/null; fi
	)
fi
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/night_lib.sh"
MINUTES=${SOAK_MINUTES:-60}
RATE=${SOAK_RATE:-500}
OTP_RATE=${SOAK_OTP_RATE:-20}
ALERT_RATE=${SOAK_ALERT_RATE:-50}
RETENTION=${SOAK_RETENTION:-5 minutes}
PURGE_INTERVAL=${SOAK_PURGE_INTERVAL:-30s}
SAMPLE=${SOAK_SAMPLE:-60}
TOLERANCE=${SOAK_TOLERANCE:-0.10}
INFLIGHT=${NIGHT_INFLIGHT:-3000}
PUSH_CONNS=${NIGHT_PUSH_CONNECTIONS:-16}
BULK_SENDERS=1
TIMEOUT=${NIGHT_TIMEOUT:-3}
FRONT_SMS=${NIGHT_FRONT_PORT:-28453}
OUT=${SOAK_OUT:-${BENCH_OUT:-.}}
mkdir -p "$OUT"
: >"$OUT/soak_results.txt"
# RESULT and ROW lines go to soak_results.txt as well, as test/bench/run's
# results file has them (for report.pl)
result() {
	echo "RESULT $1 $2"
	echo "soak RESULT $1 $2" >>"$OUT/soak_results.txt"
}
row() {
	local line="ROW $1 |"
	shift
	for cell in "$@"; do line+=" $cell |"; done
	echo "$line"
	echo "soak $line" >>"$OUT/soak_results.txt"
}
result soak_date "$(date -u '+%Y-%m-%d %H:%M UTC')"
result soak_commit "$(cd "$(dirname "$0")" && git rev-parse --short HEAD 2>/dev/null || echo unknown)$(cd "$(dirname "$0")" && git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
result soak_cores "$(nproc)"
result soak_cpu "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
result soak_memory "$(awk '/^MemTotal:/ { printf "%.1f GB", $2 / 1048576 }' /proc/meminfo)"
result soak_postgres "$(pg_config --version)"
result soak_load_start "$(cut -d' ' -f1-3 /proc/loadavg)"
result soak_otp_rate "$OTP_RATE"
result soak_alert_rate "$ALERT_RATE"
result soak_retention "$RETENTION"
result soak_purge_interval "$PURGE_INTERVAL"

night_rig soak "$RETENTION" "notif_deliver.purge_interval = '$PURGE_INTERVAL'"
retention_s=$(cluster_psql -At -c "SELECT extract(epoch FROM interval '$RETENTION')::int")
purge_s=$(cluster_psql -At -c "SELECT extract(epoch FROM interval '$PURGE_INTERVAL')::int")
# the finished jobs the provider did not accept, kept past their purge (the
# trigger's WHEN skips the accepted ones before anything is queued)
cluster_psql >/dev/null <<'SQL'
CREATE TABLE soak_unaccepted (id bigint PRIMARY KEY, kind text, user_id bigint, order_id text,
                              status text, outcome text, tries int, last_error text);
-- (qualified: the purge runs in the launcher, whose search_path is not public)
CREATE FUNCTION soak_keep_unaccepted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.soak_unaccepted VALUES (OLD.id, OLD.kind, OLD.user_id, OLD.order_id,
                                               OLD.status, OLD.outcome, OLD.tries, OLD.last_error)
        ON CONFLICT (id) DO NOTHING;    -- copied already by the end's copy of the jobs left
    RETURN NULL;
END $$;
CREATE TRIGGER soak_keep_unaccepted AFTER DELETE ON notif_job FOR EACH ROW
    WHEN (OLD.status IN ('failed', 'expired') OR OLD.outcome IS DISTINCT FROM 'accepted')
    EXECUTE FUNCTION soak_keep_unaccepted();
SQL
echo "soak: $MINUTES minutes, promotions at $RATE/s, alerts at $ALERT_RATE/s, OTPs at $OTP_RATE/s;" \
	"retention $RETENTION, purge every $PURGE_INTERVAL, a sample every ${SAMPLE}s; $(nproc) cores, $(pg_config --version)"

t0=$(date +%s)
cluster_psql -c "CALL night_trickle('otp', $OTP_RATE, true)" >"$BENCH_DIR/trickle_otp.log" 2>&1 &
otp_pid=$!
cluster_psql -c "CALL night_trickle('alert', $ALERT_RATE, false)" >"$BENCH_DIR/trickle_alert.log" 2>&1 &
alert_pid=$!
# (night_promos stops at night_stop, long before this count)
cluster_psql -c "CALL night_promos($((RATE * (MINUTES + 10) * 60)), $RATE)" >"$BENCH_DIR/promos.log" 2>&1 &
promo_pid=$!

# one sample: sizes, dead tuples, autovacuum runs, OTP p99 and promotions
# finished since the last sample (SINCE: its Unix time in microseconds)
sample_sql() {
	cat <<SQL
SELECT pg_relation_size('notif_job') / 1024, pg_indexes_size('notif_job') / 1024,
       pg_total_relation_size('notif_active') / 1024, pg_total_relation_size('notif_attempt') / 1024,
       (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'notif_job'),
       (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'notif_active'),
       (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'notif_attempt'),
       (SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'notif_job'),
       (SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'notif_active'),
       (SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'notif_attempt'),
       coalesce((SELECT round(percentile_disc(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM j.sent_at) * 1000 - l.t_us / 1000.0)::numeric, 1)
                   FROM night_log l JOIN notif_job j ON j.kind = l.kind AND j.user_id = l.id
                  WHERE l.kind = 'otp' AND l.t_us >= $1 AND j.status = 'sent'), 0),
       (SELECT enqueued FROM night_progress)
         - (SELECT count(*) FROM notif_active WHERE kind IN ('promo_sms', 'promo_push'))
SQL
}
: >"$BENCH_DIR/soak.dat"
echo "# minute job_heap_kb job_index_kb active_kb attempt_kb job_dead active_dead attempt_dead job_av active_av attempt_av otp_p99_ms promo_per_s bulk_fds"
since_us=$(($(date +%s) * 1000000))
last_done=0
last_t=$(date +%s.%N)
n=0
while [ "$n" -lt $((MINUTES * 60 / SAMPLE)) ]; do
	n=$((n + 1))
	# the next sample is due SAMPLE seconds after the last one, by the clock
	while [ "$(date +%s)" -lt $((t0 + n * SAMPLE)) ]; do
		for p in "$otp_pid" "$alert_pid" "$promo_pid"; do
			kill -0 "$p" 2>/dev/null || { echo "a load session ended early:" >&2; cat "$BENCH_DIR"/*.log >&2; exit 1; }
		done
		sleep 1
	done
	now_us=$(($(date +%s) * 1000000))
	read -r jh ji ak atk jd ad atd jav aav atav p99 done_ <<<"$(cluster_psql -At -F' ' -c "$(sample_sql "$since_us")")"
	t=$(date +%s.%N)
	rate=$(awk -v d=$((done_ - last_done)) -v a="$t" -v b="$last_t" 'BEGIN { printf "%.0f", d / (a - b) }')
	fds=$(for p in $(pm_children | awk '/notif_deliver sender bulk/ { print $1 }'); do
		ls "/proc/$p/fd" 2>/dev/null | wc -l
	done | sort -n | tail -1)
	line="$(awk -v s="$(date +%s)" -v t0="$t0" 'BEGIN { printf "%.1f", (s - t0) / 60 }') $jh $ji $ak $atk $jd $ad $atd $jav $aav $atav $p99 $rate ${fds:-0}"
	echo "$line" | tee -a "$BENCH_DIR/soak.dat"
	since_us=$now_us
	last_done=$done_
	last_t=$t
done
cluster_psql -c "UPDATE night_stop SET stop = true" >/dev/null
for p in "$promo_pid" "$otp_pid" "$alert_pid"; do wait "$p"; done
wait_sql "$(nd_idle_sql)" 300
cluster_psql -c "INSERT INTO soak_unaccepted
                   SELECT id, kind, user_id, order_id, status, outcome, tries, last_error FROM notif_job
                    WHERE status IN ('failed', 'expired') OR outcome IS DISTINCT FROM 'accepted'
                   ON CONFLICT (id) DO NOTHING" >/dev/null
cp "$BENCH_DIR/soak.dat" "$OUT/soak.dat"

# did each size level off?  "first": the mean of the first quarter of the
# samples taken after the first retention period and a purge; "last": the
# mean of the last quarter of the samples
settle=$(awk -v r="$retention_s" -v p="$purge_s" 'BEGIN { printf "%.2f", (r + 2 * p) / 60 }')
result soak_settle_minutes "$settle"
level_all=yes
for col in 2:notif_job 3:notif_job_indexes 4:notif_active 5:notif_attempt; do
	c=${col%%:*}
	name=${col#*:}
	read -r first last growth ok <<<"$(awk -v c="$c" -v s="$settle" -v tol="$TOLERANCE" '
		$1 >= s { v[++n] = $c }
		END {
			if (n < 4) { print "0 0 0 unknown"; exit }
			q = int(n / 4); if (q < 1) q = 1
			for (i = 1; i <= q; i++) f += v[i]
			for (i = n - q + 1; i <= n; i++) l += v[i]
			f /= q; l /= q
			g = f > 0 ? (l - f) / f : 0
			printf "%.0f %.0f %.1f %s\n", f, l, g * 100, (g <= tol ? "yes" : "no") }' "$BENCH_DIR/soak.dat")"
	echo "LEVEL $name $first $last $growth $ok"
	row soak_level "$name" "$first" "$last" "$growth" "$ok"
	result "soak_${name}_first_kb" "$first"
	result "soak_${name}_last_kb" "$last"
	result "soak_${name}_growth_pct" "$growth"
	result "soak_${name}_level" "$ok"
	[ "$ok" = yes ] || level_all=$ok
done

# lost and duplicated per type, key by key: every key enqueued against the
# ledgers, which the simulators write when stopped; a ledger must hold as
# many keys as its simulator counted
for sim in sms:"$SIM_SMS":"$sim_pid_sms" push:"$SIM_PUSH":"$sim_pid_push"; do
	IFS=: read -r name port pid <<<"$sim"
	keys=$(sim_get "$port" /stats | awk '$1 == "keys" { print $2 }')
	kill -TERM "$pid"
	wait "$pid" || { echo "provider_sim $name did not write its ledger" >&2; exit 1; }
	lines=$(wc -l <"$BENCH_DIR/ledger_$name.txt")
	if [ "$lines" != "$keys" ]; then
		echo "the $name ledger has $lines keys, its simulator counted $keys" >&2
		exit 1
	fi
done
{
	# night_promos numbers them 1..enqueued, the even ones push
	cluster_psql -At -F' ' -c "SELECT 'promos', enqueued FROM night_progress"
	cluster_psql -At -F' ' -c "SELECT kind, id FROM night_log"
} >"$BENCH_DIR/enqueued"
cluster_psql -At -F' ' -c "SELECT kind || ':' || user_id || ':' || order_id, status, coalesce(outcome, '-')
                             FROM soak_unaccepted" >"$BENCH_DIR/unaccepted"
awk -v E="$BENCH_DIR/enqueued" -v U="$BENCH_DIR/unaccepted" -v X="$BENCH_DIR/unexplained" '
	function key(t, k) {
		n[t]++
		if (!(k in del)) {
			lost[t]++; why = (k in st) ? (st[k] == "unknown" ? "ambiguous" : "unreached") : "unexplained"; cause[t, why]++
			if (why == "unexplained") print k > X
		}
		else { if (del[k] > 0) dup[t] += del[k]; delete del[k] }
	}
	# the ledgers: key received delivered ...; a delivered key in del[] (copies past the first)
	{ if ($3 >= 1) del[$1] = $3 - 1 }
	END {
		while ((getline l < U) > 0) { split(l, f, " "); st[f[1]] = f[3] }
		while ((getline l < E) > 0) {
			split(l, f, " ")
			if (f[1] == "promos") {
				for (g = 1; g <= f[2]; g++)
					key(g % 2 == 0 ? "promo_push" : "promo_sms", (g % 2 == 0 ? "promo_push" : "promo_sms") ":" g ":friday")
			} else
				key(f[1], f[1] ":" f[2] ":" f[1] "-" f[2])
		}
		stray = 0
		for (k in del) stray++
		for (t in n)
			printf "%s %d %d %d %d %d %d %d\n", t, n[t], n[t] - lost[t], lost[t], dup[t],
				cause[t, "ambiguous"], cause[t, "unreached"], cause[t, "unexplained"]
		printf "stray %d\n", stray
	}' "$BENCH_DIR/ledger_sms.txt" "$BENCH_DIR/ledger_push.txt" | sort >"$BENCH_DIR/types"
printf '%-11s %9s %9s %7s %10s %10s %10s %12s\n' type enqueued delivered lost duplicated ambiguous unreached unexplained
while read -r t en d l dup amb unr unx; do
	if [ "$t" = stray ]; then
		# a delivered key that no load session enqueued: the key scheme is not what this script thinks
		[ "$en" = 0 ] || { echo "the ledgers have $en delivered keys that were not enqueued" >&2; exit 1; }
		continue
	fi
	printf '%-11s %9s %9s %7s %10s %10s %10s %12s\n' "$t" "$en" "$d" "$l" "$dup" "$amb" "$unr" "$unx"
	row soak_types "$t" "$en" "$d" "$l" "$dup" "$amb" "$unr" "$unx"
	result "soak_${t}_enqueued" "$en"
	result "soak_${t}_lost" "$l"
	result "soak_${t}_duplicated" "$dup"
	result "soak_${t}_lost_ambiguous" "$amb"
	result "soak_${t}_lost_unreached" "$unr"
	result "soak_${t}_lost_unexplained" "$unx"
done <"$BENCH_DIR/types"
[ ! -s "$BENCH_DIR/unexplained" ] || cp "$BENCH_DIR/unexplained" "$OUT/soak_unexplained"
# why the provider did not accept them: per type, status, outcome and error
# (numbers in the errors as N: "timed out after 3004 ms" and after 3012 are one line)
cluster_psql -At -F$'\t' -c "SELECT kind, status, coalesce(outcome, '-'), count(*),
                                     coalesce(translate(left(regexp_replace(last_error, '[0-9]+', 'N', 'g'), 80), '|', '/'), '-') e
                                FROM soak_unaccepted GROUP BY 1, 2, 3, 5 ORDER BY 1, 4 DESC" |
	while IFS=$'\t' read -r t st oc cnt err; do
		echo "UNACCEPTED $t $st $oc $cnt $err"
		row soak_unaccepted "$t" "$st" "$oc" "$cnt" "$err" >/dev/null
	done
# a sender out of file descriptors (its RLIMIT_NOFILE): PostgreSQL says so
# in the server log ("out of file descriptors"), and libcurl fails the
# calls it cannot open a socket for ("Couldn't connect to server")
result soak_log_out_of_fds "$(grep -c 'out of file descriptors' "$CLUSTER_DIR/server.log" || true)"
result soak_bulk_sender_fd_limit "$(for p in $(pm_children | awk '/notif_deliver sender bulk/ { print $1 }'); do
	awk '/^Max open files/ { print $4; exit }' "/proc/$p/limits" 2>/dev/null
done | head -1)"
echo "sizes levelled off (within $(awk -v t="$TOLERANCE" 'BEGIN { print t * 100 }')% after the first ${settle} minutes): $level_all; samples in $OUT/soak.dat"
result soak_minutes "$MINUTES"
result soak_rate "$RATE"
result soak_level "$level_all"
bash "$(dirname "$0")/lib/soak_summary.sh" "$OUT/soak.dat" "$settle" | while read -r _ name value; do result "$name" "$value"; done
result soak_load_end "$(cut -d' ' -f1-3 /proc/loadavg)"
if [ "${SOAK_DOC:-}" = 1 ]; then
	bash "$(dirname "$0")/report/soak_doc.sh" "$OUT"
fi
