#!/usr/bin/env bash
# test/bench/sync_standby.sh: what a synchronous standby costs at_most_once
# dispatch (doc/ha.md).  One primary (synchronous_commit = off) with a
# streaming standby on the same machine; a backlog of JOBS queued
# at_most_once jobs drained by one lane against the provider simulator
# (0 ms latency), alternately with the standby asynchronous
# (synchronous_standby_names = '') and synchronous ('FIRST 1 (s1)'): every
# at_most_once claim round then waits for the standby's flush.  The same for
# at_least_once (which keeps the server's setting: no wait).  Medians over
# the rounds, side by side in one run.  fsync is off on both servers (as in
# every benchmark here): the wait is the round trip to the standby, not a
# disk flush.
#
#   bash test/bench/sync_standby.sh [JOBS]          (default 50000)
#
# Environment: SYNC_ROUNDS [4]; BENCH_PORT (the standby uses BENCH_PORT + 1),
# BENCH_SIM_PORT (see test/bench/lib/common.sh).  Needs the extension installed
# (make install) and the simulator built (make -C test/sim).  Prints a table,
# then "RESULT name value" lines:
#   sync_standby_amo_async_jobs_per_s  sync_standby_amo_sync_jobs_per_s
#   sync_standby_alo_async_jobs_per_s  sync_standby_alo_sync_jobs_per_s
#   sync_standby_amo_ratio             (sync / async, per round, median)
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
JOBS=$(bench_scale "${1:-50000}")
ROUNDS=${SYNC_ROUNDS:-4}
SIM=$BENCH_SIM_PORT
STANDBY_PORT=$((BENCH_PORT + 1))

bench_dir sync_standby
sim_start main "$SIM"
cluster_start "$BENCH_DIR/pg" "$BENCH_PORT" "notif_deliver.database = 'postgres'" \
	"notif_deliver.max_inflight = 512" "synchronous_commit = off" \
	"wal_level = replica" "max_wal_senders = 4" "max_wal_size = '4GB'"
primary_dir=$CLUSTER_DIR

# the standby: a base backup of the primary, streaming over its socket
mkdir -p "$BENCH_DIR/s"
[ "$(id -u)" = 0 ] && chown postgres "$BENCH_DIR/s"
cluster_as "$PG_BINDIR/pg_basebackup" -D "$BENCH_DIR/s/data" -h "$primary_dir" -p "$BENCH_PORT" \
	-U postgres -R --checkpoint=fast
{
	echo "port = $STANDBY_PORT"
	echo "unix_socket_directories = '$BENCH_DIR/s'"
	echo "cluster_name = 's1'"	# its application_name on the primary
} >>"$BENCH_DIR/s/data/postgresql.conf"
cluster_as "$PG_BINDIR/pg_ctl" -D "$BENCH_DIR/s/data" -l "$BENCH_DIR/s/server.log" -w start >/dev/null
stop_standby() {
	cluster_as "$PG_BINDIR/pg_ctl" -D "$BENCH_DIR/s/data" -m immediate stop >/dev/null 2>&1 || true
	bench_cleanup
}
trap stop_standby EXIT
wait_sql "SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = 's1' AND state = 'streaming'" 60

cluster_psql <<SQL
CREATE EXTENSION notif_deliver;
UPDATE notif_provider SET url = 'http://127.0.0.1:$SIM/send', idempotency_header = 'Idempotency-Key',
       timeout = '5 seconds', max_inflight = 512 WHERE name = 'default';
INSERT INTO notif_type (code, delivery, max_tries, lane, paused)
VALUES ('amo', 'at_most_once', 1, 'bench', true),
       ('alo', 'at_least_once', 3, 'bench', true);
SQL

set_mode() {	# async | sync
	local names=''
	[ "$1" = sync ] && names='FIRST 1 (s1)'
	cluster_psql -c "ALTER SYSTEM SET synchronous_standby_names = '$names'" -c "SELECT pg_reload_conf()" >/dev/null
	if [ "$1" = sync ]; then
		wait_sql "SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 's1'" 60
	else
		wait_sql "SELECT sync_state = 'async' FROM pg_stat_replication WHERE application_name = 's1'" 60
	fi
}

# drain JOBS jobs of a type; prints the jobs per second
drain() {
	local kind=$1 t0 t1
	cluster_psql -c "TRUNCATE notif_job, notif_attempt CASCADE" \
		-c "SELECT count(notif_enqueue(g, '$kind', 'o', '{\"text\":\"hello\"}')) FROM generate_series(1, $JOBS) g" \
		-c "ANALYZE notif_job" -c "CHECKPOINT" >/dev/null
	sim_get "$SIM" /reset >/dev/null
	t0=$(date +%s.%N)
	cluster_psql -c "UPDATE notif_type SET paused = false WHERE code = '$kind'" >/dev/null
	wait_sql "$(nd_idle_sql)"
	t1=$(date +%s.%N)
	cluster_psql -c "UPDATE notif_type SET paused = true WHERE code = '$kind'" >/dev/null
	awk -v a="$t0" -v b="$t1" -v n="$JOBS" 'BEGIN { printf "%.0f\n", n / (b - a) }'
}

declare -A rate
for r in $(seq 1 "$ROUNDS"); do
	# alternate which mode goes first, so that neither gains from the order
	modes="async sync"
	[ $((r % 2)) = 0 ] && modes="sync async"
	for kind in amo alo; do
		for mode in $modes; do
			set_mode "$mode"
			rate[$kind,$mode,$r]=$(drain "$kind")
		done
	done
	echo "round $r: amo async ${rate[amo,async,$r]}/s sync ${rate[amo,sync,$r]}/s;" \
		"alo async ${rate[alo,async,$r]}/s sync ${rate[alo,sync,$r]}/s"
done

median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
printf '\n| delivery | standby asynchronous (jobs/s) | standby synchronous (jobs/s) | ratio |\n|---|---|---|---|\n'
for kind in amo alo; do
	as=() ss=() ratios=()
	for r in $(seq 1 "$ROUNDS"); do
		as+=("${rate[$kind,async,$r]}")
		ss+=("${rate[$kind,sync,$r]}")
		ratios+=("$(awk -v a="${rate[$kind,async,$r]}" -v s="${rate[$kind,sync,$r]}" 'BEGIN { printf "%.3f", s / a }')")
	done
	a=$(median "${as[@]}")
	s=$(median "${ss[@]}")
	ratio=$(median "${ratios[@]}")
	name=$([ "$kind" = amo ] && echo at_most_once || echo at_least_once)
	echo "| $name | $a | $s | $ratio |"
	result "sync_standby_${kind}_async_jobs_per_s" "$a"
	result "sync_standby_${kind}_sync_jobs_per_s" "$s"
	result "sync_standby_${kind}_ratio" "$ratio"
done
