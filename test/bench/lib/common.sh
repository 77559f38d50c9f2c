# test/bench/lib/common.sh: what the benchmark scripts share.  Source it after
# setting `set -euo pipefail`; it sources test/lib/cluster.sh.
#
#   bench_dir NAME          a fresh work folder (removed at exit), in $BENCH_DIR
#   bench_scale N           N times $BENCH_SCALE (default 1), rounded, at least 1
#   result NAME VALUE       print "RESULT NAME VALUE" (what test/bench/run collects)
#   row TABLE CELLS...      print "ROW TABLE | cell | cell |" (a markdown row)
#   sim_start NAME PORT ARGS...   start the provider simulator, wait until it answers
#   sim_get PORT PATH       GET a control endpoint of a simulator; prints the body
#   cpu_ticks PID...        CPU time (user + system) of processes, in clock ticks
#   cpu_ns PID...           CPU time of processes in nanoseconds (/proc/PID/schedstat)
#   pm_children             pid and title of every process of the cluster
#   cluster_cpu_ticks [DIR] CPU time the whole cluster (default the current one) has
#                           used so far, in clock ticks: the postmaster, its live
#                           processes and those that exited
#   sender_pids             pids of the cluster's senders
#   nd_pids                 pids of the cluster's notif_deliver processes (launcher, senders)
#   wait_sql SQL [TIMEOUT]  poll until SQL returns t (errors, e.g. during a restart, are retried)
#   percentile P FILE       the P-th percentile (nearest rank) of a file of numbers
#   nd_idle_sql [KIND]      SQL returning t once no job (of KIND) is queued or held
#                           (and notif_active is built: not before its rebuild)
#   nd_busy_sql [KIND]      SQL counting the jobs (of KIND) queued or held
#                           (both read notif_active, by its primary key: never
#                           a scan of notif_job's history while a drain runs)
#
# Ports: every script takes its PostgreSQL port from BENCH_PORT and its
# simulators' ports from BENCH_SIM_PORT (and BENCH_SIM_PORT + 1), so that
# runs on a shared machine do not collide.  Work files go to BENCH_TMP
# (default /tmp); data files for the charts to BENCH_OUT when it is set.

# a failing command inside $(...) fails the script too
shopt -s inherit_errexit
BENCH_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$BENCH_HERE/lib/cluster.sh"

# no NOTICEs (e.g. "truncate cascades to table") in the output
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
BENCH_SCALE=${BENCH_SCALE:-1}
# below the ephemeral range (32768-60999): an outgoing connection of a busy
# machine can hold a port there (a simulator once failed to listen on one)
BENCH_PORT=${BENCH_PORT:-26201}
BENCH_SIM_PORT=${BENCH_SIM_PORT:-26251}
BENCH_TMP=${BENCH_TMP:-/tmp}
BENCH_SIM=$BENCH_HERE/sim/provider_sim
HZ=$(getconf CLK_TCK)
_bench_sims=()

bench_cleanup() {
	local pid
	for pid in "${_bench_sims[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	cluster_stop
	[ -n "${BENCH_DIR:-}" ] && rm -rf "$BENCH_DIR"
	return 0
}

bench_dir() {
	BENCH_DIR=$(mktemp -d "$BENCH_TMP/notif_$1.XXXXXX")
	chmod 755 "$BENCH_DIR"
	trap bench_cleanup EXIT
	trap 'echo "interrupted" >&2; exit 130' INT TERM
	[ -x "$BENCH_SIM" ] || { echo "$BENCH_SIM is not built (make -C test/sim)" >&2; exit 2; }
	[ -n "${BENCH_OUT:-}" ] && mkdir -p "$BENCH_OUT"
	return 0
}

bench_scale() {
	awk -v n="$1" -v s="$BENCH_SCALE" 'BEGIN { v = int(n * s + 0.5); print (v < 1 ? 1 : v) }'
}

result() {
	echo "RESULT $1 $2"
}

row() {
	local table=$1 line="ROW $1 |"
	shift
	for cell in "$@"; do line+=" $cell |"; done
	echo "$line"
}

sim_get() {
	local port=$1 path=$2
	exec 7<>"/dev/tcp/127.0.0.1/$port"
	printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$path" >&7
	sed '1,/^\r$/d' <&7
	exec 7<&-
}

# a TLS front: nghttpx on PORT for the simulator on BACK, offering the ALPN
# list, STREAMS [100] streams per HTTP/2 connection, with BENCH_DIR's
# srv.key and srv.crt; each call's client port logged (connections are
# counted from it) in access_NAME.log
front_start() {
	local name=$1 port=$2 back=$3 alpn=$4 streams=${5:-100}
	nghttpx --conf=/dev/null --workers=1 --frontend="127.0.0.1,$port" --backend="127.0.0.1,$back" \
		--npn-list="$alpn" --frontend-http2-max-concurrent-streams="$streams" \
		--accesslog-file="$BENCH_DIR/access_$name.log" --accesslog-format='$remote_port $alpn $status' \
		"$BENCH_DIR/srv.key" "$BENCH_DIR/srv.crt" >"$BENCH_DIR/nghttpx_$name.log" 2>&1 &
	_bench_sims+=($!)
}

# wait until the front NAME accepts connections on PORT
front_wait() {
	local name=$1 port=$2 i
	for i in $(seq 1 100); do
		(exec 7<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
		sleep 0.05
	done
	echo "nghttpx $name did not start on port $port" >&2
	cat "$BENCH_DIR/nghttpx_$name.log" >&2
	return 1
}

sim_start() {
	local name=$1 port=$2 i
	shift 2
	"$BENCH_SIM" --port "$port" "$@" >"$BENCH_DIR/sim_$name.log" 2>&1 &
	_bench_sims+=($!)
	for i in $(seq 1 100); do
		# ours, not another run's on the same port (ours then exits: in use)
		if sim_get "$port" /health 2>/dev/null | grep -q ok && kill -0 "${_bench_sims[-1]}" 2>/dev/null; then
			sleep 0.1
			if kill -0 "${_bench_sims[-1]}" 2>/dev/null; then return 0; fi
		fi
		sleep 0.05
	done
	echo "provider_sim $name did not start on port $port" >&2
	cat "$BENCH_DIR/sim_$name.log" >&2
	return 1
}

# the median of the numbers on stdin, one per line (the lower of the two
# middle ones for an even count)
median_values() {
	sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}

cpu_ticks() {
	local total=0 pid v
	for pid in "$@"; do
		v=$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null) || continue
		total=$((total + v))
	done
	echo "$total"
}

cpu_ns() {
	local pid
	for pid in "$@"; do
		awk '{ print $1 }' "/proc/$pid/schedstat" 2>/dev/null || true
	done | awk '{ t += $1 } END { printf "%d\n", t }'
}

pm_pid() {	# [DIR]: of the cluster in DIR, default the current one
	head -1 "${1:-$CLUSTER_DIR}/data/postmaster.pid" 2>/dev/null
}

pm_children() {
	local pm
	pm=$(pm_pid) || return 0
	[ -n "$pm" ] || return 0
	ps -o pid=,args= --ppid "$pm" 2>/dev/null || true
}

cluster_cpu_ticks() {	# [DIR]
	local pm p
	pm=$(pm_pid "${1:-}")
	{
		# utime stime cutime cstime: the exited (reaped) processes count too
		awk '{ print $14 + $15 + $16 + $17 }' "/proc/$pm/stat"
		for p in $(ps -o pid= --ppid "$pm"); do
			awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || true
		done
	} | awk '{ t += $1 } END { printf "%d\n", t }'
}

sender_pids() {
	pm_children | awk '/notif_deliver sender/ { print $1 }'
}

nd_pids() {
	pm_children | awk '/notif_deliver (sender|launcher)/ { print $1 }'
}

wait_sql() {
	local sql=$1 timeout=${2:-600} start=$SECONDS out
	while :; do
		out=$(cluster_psql -At -c "$sql" 2>/dev/null) || out=
		[ "$out" = t ] && return 0
		if [ $((SECONDS - start)) -ge "$timeout" ]; then
			echo "timed out after ${timeout}s waiting for: $sql" >&2
			return 1
		fi
		sleep 0.2
	done
}

# end_drain CODE WHAT: the drain of type CODE is over: pause it, check that
# all $JOBS jobs were sent (else say so, as WHAT, and exit 1), and wait for
# its sender to stop, so that the next measurement starts alone.
end_drain() {
	local sent
	cluster_psql -c "UPDATE notif_type SET paused = true WHERE code = '$1'" >/dev/null
	sent=$(cluster_psql -At -c "SELECT count(*) FROM notif_job WHERE status = 'sent'")
	if [ "$sent" != "$JOBS" ]; then
		echo "$2: $sent of $JOBS jobs sent" >&2
		cluster_psql -c "SELECT status, last_error, count(*) FROM notif_job GROUP BY 1, 2" >&2
		exit 1
	fi
	wait_sql "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'notif_deliver sender'" 30
}

percentile() {
	sort -n "$2" | awk -v p="$1" '{ a[NR] = $1 } END {
		if (NR == 0) { print "nan"; exit }
		i = int(p / 100 * NR + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR; print a[i] }'
}

# The extension with one type, and plain_job: a table of notif_job's shape
# (same columns, CHECKs, indexes and foreign key), for the enqueue
# benchmarks to compare a plain INSERT ... ON CONFLICT with.
# bench_lane_setup SIM_PORT INFLIGHT DELIVERY: the extension, its default
# provider at the simulator (max_inflight INFLIGHT), and a paused type
# "bench" of DELIVERY in its own lane, for a drain to resume.
bench_lane_setup() {
	cluster_psql <<SQL
CREATE EXTENSION notif_deliver;
UPDATE notif_provider SET url = 'http://127.0.0.1:$1/send', idempotency_header = 'Idempotency-Key',
       timeout = '5 seconds', max_inflight = $2 WHERE name = 'default';
INSERT INTO notif_type (code, delivery, max_tries, lane, paused)
VALUES ('bench', '$3', 3, 'bench', true);
SQL
}

plain_job_setup() {
	cluster_psql <<'SQL'
CREATE EXTENSION notif_deliver;
INSERT INTO notif_type VALUES ('promo', 'at_most_once', 1, '1 day');
CREATE TABLE plain_job (LIKE notif_job INCLUDING ALL);
ALTER TABLE plain_job ADD FOREIGN KEY (kind) REFERENCES notif_type ON UPDATE CASCADE;
SQL
}

# drain_wait SIM KEYS SQL: until a drain of KEYS calls to the simulator on
# port SIM is over and SQL (a query printing t) says every result is
# recorded.  The simulator's count of keys is polled first: a poll of the
# cluster is a new backend, about 5 ms of CPU on a small machine, that a
# benchmark would count as the cluster's (10 polls a second were a tenth of
# the CPU measured at 50 ms).  The cluster is asked once every 2 s
# meanwhile (a drain whose calls fail never reaches KEYS), then until SQL
# holds.
drain_wait() {
	local sim=$1 keys=$2 sql=$3 i=0 k
	until k=$(sim_get "$sim" /stats | awk '$1 == "keys" { print $2 }') && [ -n "$k" ] && [ "$k" -ge "$keys" ]; do
		i=$((i + 1))
		if [ $((i % 40)) -eq 0 ] && [ "$(cluster_psql -At -c "$sql")" = t ]; then
			return 0
		fi
		sleep 0.05
	done
	until [ "$(cluster_psql -At -c "$sql")" = t ]; do
		sleep 0.05
	done
}

# nd_senders N: notif_deliver.senders_per_lane for the next drain (a lane
# paused between drains starts its senders with it)
nd_senders() {
	cluster_psql -c "ALTER SYSTEM SET notif_deliver.senders_per_lane = $1" -c "SELECT pg_reload_conf()" >/dev/null
}

nd_idle_sql() {
	# (after a crash notif_active is empty until the launcher has rebuilt it)
	echo "SELECT EXISTS (SELECT 1 FROM notif_active_built)
	         AND NOT EXISTS (SELECT 1 FROM notif_active${1:+ WHERE kind = '$1'})"
}

nd_busy_sql() {
	# (from notif_job, all of it, while notif_active waits for its rebuild)
	echo "SELECT CASE WHEN EXISTS (SELECT 1 FROM notif_active_built)
	            THEN (SELECT count(*) FROM notif_active${1:+ WHERE kind = '$1'})
	            ELSE (SELECT count(*) FROM notif_job WHERE ${1:+kind = '$1' AND }(status IN ('queued', 'sending') OR claimed_by IS NOT NULL)) END"
}
