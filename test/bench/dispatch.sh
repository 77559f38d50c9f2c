#!/usr/bin/env bash
# test/bench/dispatch.sh: how fast a lane drains a backlog of queued
# at_least_once jobs against the provider simulator, at 0 ms and at 50 ms
# provider latency, side by side in one run; with the CPU time PostgreSQL
# (all its processes) and the simulator spent per 1,000 jobs.
#
#   bash test/bench/dispatch.sh [JOBS] [INFLIGHT]     (defaults 200000 512)
#
# Needs the extension installed (make install) and the simulator built
# (make -C test/sim).  Starts and removes its own cluster and simulator.
set -euo pipefail
JOBS=${1:-200000}
INFLIGHT=${2:-512}
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/lib/cluster.sh"
dir=$(mktemp -d /tmp/notif_dispatch.XXXXXX)
chmod 755 "$dir"
SIM_PORT=18091
"$here/sim/provider_sim" --port "$SIM_PORT" --hold-ms 5000 >"$dir/sim.log" 2>&1 &
sim_pid=$!
trap 'kill $sim_pid 2>/dev/null; cluster_stop; rm -rf "$dir"' EXIT
cluster_start "$dir" 55434 "notif_deliver.database = 'postgres'" \
	"notif_deliver.max_inflight = $INFLIGHT" "notif_deliver.batch_size = 200" \
	"max_wal_size = '4GB'" "checkpoint_timeout = '30min'" "synchronous_commit = off"

cluster_psql <<SQL
CREATE EXTENSION notif_deliver;
UPDATE notif_provider SET url = 'http://127.0.0.1:$SIM_PORT/send', idempotency_header = 'Idempotency-Key',
       timeout = '5 seconds', max_inflight = $INFLIGHT WHERE name = 'default';
INSERT INTO notif_type (code, delivery, max_tries, lane, paused)
VALUES ('bench', 'at_least_once', 3, 'bench', true);
SQL

sim_get() {
	exec 3<>"/dev/tcp/127.0.0.1/$SIM_PORT"
	printf 'GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' "$1" >&3
	cat <&3 >/dev/null
	exec 3<&-
}

# CPU seconds (user + system) of a set of processes
cpu_of() {
	local total=0 pid
	for pid in "$@"; do
		[ -r "/proc/$pid/stat" ] || continue
		total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
	done
	echo "$total"
}
pg_pids() { pgrep -u postgres -f "postgres" | tr '\n' ' '; }

echo "dispatch of $JOBS at_least_once jobs, $INFLIGHT in flight, $(nproc) cores, $(pg_config --version)"
printf '%-10s %10s %12s %16s %16s\n' latency seconds jobs_per_s pg_cpu_s_per_1k sim_cpu_s_per_1k
hz=$(getconf CLK_TCK)
for latency in 0 50; do
	sim_get "/config?latency_ms=$latency"
	sim_get "/reset"
	cluster_psql -c "TRUNCATE notif_job, notif_attempt CASCADE" \
		-c "SELECT count(notif_enqueue(g, 'bench', 'o', '{\"to\":\"+84900000000\",\"text\":\"hello\"}')) FROM generate_series(1, $JOBS) g" \
		-c "CHECKPOINT" >/dev/null
	pg0=$(cpu_of $(pg_pids)); sim0=$(cpu_of "$sim_pid")
	t0=$(date +%s.%N)
	cluster_psql -c "UPDATE notif_type SET paused = false WHERE code = 'bench'" >/dev/null
	until [ "$(cluster_psql -At -c "SELECT count(*) FROM notif_job WHERE status = 'sent'")" -ge "$JOBS" ]; do
		sleep 0.2
	done
	t1=$(date +%s.%N)
	pg1=$(cpu_of $(pg_pids)); sim1=$(cpu_of "$sim_pid")
	cluster_psql -c "UPDATE notif_type SET paused = true WHERE code = 'bench'" >/dev/null
	awk -v l="$latency" -v t0="$t0" -v t1="$t1" -v n="$JOBS" -v pg=$((pg1 - pg0)) -v sim=$((sim1 - sim0)) -v hz="$hz" \
		'BEGIN { s = t1 - t0; printf "%-10s %10.2f %12.0f %16.3f %16.3f\n", l " ms", s, n / s, pg / hz / n * 1000, sim / hz / n * 1000 }'
	sleep 1
done
