#!/usr/bin/env bash
# test/bench/shards.sh: the capacity plan's figures (doc/scaling.md).  The
# same backlog of JOBS queued at_least_once jobs, users spread by
# hashint8(user_id) as the router spreads them, drained through 1, 2 and 4
# shards (each its own cluster with notif_deliver, one lane, one provider
# simulator for all: one provider account), side by side in one run; then
# the router's own enqueue rate (notif_deliver_router over PL/Proxy, into
# the 4 shards, clients calling notif_enqueue on the router).
#
#   bash test/bench/shards.sh [JOBS]          (default 200000 x BENCH_SCALE)
#
# For each layout: the wall time of the drain, jobs/s in all and per shard,
# CPU seconds per 1,000 jobs of all the shards' PostgreSQL processes
# (senders included) and of the simulator, and the WAL each job wrote
# (bulk enqueue and delivery; the purge after the retention comes on top).  On a machine with fewer cores
# than shards the shards share the cores: the total rate then shows the
# machine, and the CPU per 1,000 jobs is what carries over to bigger ones.
#
# Environment: BENCH_SCALE [1]; SHARDS_LAYOUTS ["1 2 4"]; SHARDS_INFLIGHT
# [512, per shard]; ROUTER_CALLS [20000 x BENCH_SCALE]; ROUTER_CLIENTS [8];
# BENCH_PORT (shards use BENCH_PORT .. +3, the router +4), BENCH_SIM_PORT.
# Needs the extensions installed (make install), PL/Proxy
# (postgresql-15-plproxy) and the simulator (make -C test/sim).
# Prints a table and "RESULT name value" lines:
#   shards_N_jobs_per_s  shards_N_jobs_per_s_per_shard  shards_N_pg_cpu_per_1k
#   shards_N_sim_cpu_per_1k  shards_N_wal_bytes_per_job
#   shards_N_disk_bytes_per_job (notif_job + notif_attempt with indexes)   (N = 1, 2, 4)
#   router_enqueue_per_s  router_enqueue_router_cpu_per_1k  router_enqueue_shards_cpu_per_1k
#   router_enqueue_wal_bytes_per_call
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
JOBS=${1:-$(bench_scale 200000)}
LAYOUTS=${SHARDS_LAYOUTS:-1 2 4}
INFLIGHT=${SHARDS_INFLIGHT:-512}
ROUTER_CALLS=${ROUTER_CALLS:-$(bench_scale 20000)}
ROUTER_CLIENTS=${ROUTER_CLIENTS:-8}
SIM=$BENCH_SIM_PORT

bench_dir shards
sim_start main "$SIM" --hold-ms 5000
sim_pid=${_bench_sims[0]}

# --- a set of clusters, by index: shards 0..3 and the router (4) ---
node_dirs=()
node_port() { echo $((BENCH_PORT + $1)); }
node_psql() { local i=$1; shift; PGHOST=$BENCH_DIR/n$i PGPORT=$(node_port "$i") cluster_psql "$@"; }
export PGUSER=postgres PGDATABASE=postgres
node_start() {	# index, extra conf lines
	local i=$1
	shift
	cluster_create "$BENCH_DIR/n$i" "$(node_port "$i")" "synchronous_commit = off" "max_wal_size = '4GB'" \
		"checkpoint_timeout = '30min'" "$@"
	node_dirs+=("$BENCH_DIR/n$i")
}
node_stop() {
	cluster_as "$PG_BINDIR/pg_ctl" -D "$BENCH_DIR/n$1/data" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$BENCH_DIR/n$1"
}
nodes_cleanup() {
	local d
	for d in "${node_dirs[@]}"; do
		cluster_as "$PG_BINDIR/pg_ctl" -D "$d/data" -m immediate stop >/dev/null 2>&1 || true
	done
	bench_cleanup
}
trap nodes_cleanup EXIT
node_cpu_ticks() { cluster_cpu_ticks "$BENCH_DIR/n$1"; }
# WAL written so far by the shards 0 .. n-1, in bytes
wal_bytes() {
	local k total=0
	for k in $(seq 0 $(($1 - 1))); do
		total=$((total + $(node_psql "$k" -At -c "SELECT pg_current_wal_insert_lsn() - '0/0'")))
	done
	echo "$total"
}
shard_start() {	# index, shards
	node_start "$1" "shared_preload_libraries = 'notif_deliver'" "notif_deliver.database = 'postgres'" \
		"notif_deliver.max_inflight = $INFLIGHT"
	node_psql "$1" <<SQL
CREATE EXTENSION notif_deliver;
SELECT notif_shard_setup($1, $2) \gset
UPDATE notif_provider SET url = 'http://127.0.0.1:$SIM/send', idempotency_header = 'Idempotency-Key',
       timeout = '5 seconds', max_inflight = $INFLIGHT WHERE name = 'default';
INSERT INTO notif_type (code, delivery, max_tries, lane, paused)
VALUES ('bench', 'at_least_once', 3, 'bench', true);
SQL
}

drained=$(nd_idle_sql)

echo "drain of $JOBS at_least_once jobs through 1, 2 and 4 shards (provider simulator at 0 ms, one account);"
echo "each shard: one lane, $INFLIGHT in flight, fsync and synchronous_commit off;"
echo "$(nproc) cores shared by every shard, the simulator and whatever else runs; $(pg_config --version)"
printf '%-7s %9s %11s %15s %12s %12s %9s\n' shards seconds jobs_per_s per_shard_per_s pg_cpu_1k sim_cpu_1k wal_B_job
for n in $LAYOUTS; do
	for k in $(seq 0 $((n - 1))); do shard_start "$k" "$n"; done
	# the backlog: each shard gets the users the router would send it
	w0=$(wal_bytes "$n")
	for k in $(seq 0 $((n - 1))); do
		node_psql "$k" -c "SELECT count(notif_enqueue(g, 'bench', 'o', '{\"to\":\"+84900000000\",\"text\":\"hello\"}'))
		                     FROM generate_series(1, $JOBS) g WHERE hashint8(g) & ($n - 1) = $k" \
			-c "ANALYZE notif_job" -c "CHECKPOINT" >/dev/null
	done
	sim_get "$SIM" /reset >/dev/null
	pg0=0
	for k in $(seq 0 $((n - 1))); do pg0=$((pg0 + $(node_cpu_ticks "$k"))); done
	sim0=$(cpu_ticks "$sim_pid")
	t0=$(date +%s.%N)
	unpause=()
	for k in $(seq 0 $((n - 1))); do
		node_psql "$k" -c "UPDATE notif_type SET paused = false WHERE code = 'bench'" >/dev/null &
		unpause+=($!)
	done
	wait "${unpause[@]}"
	for k in $(seq 0 $((n - 1))); do
		until [ "$(node_psql "$k" -At -c "$drained")" = t ]; do sleep 0.1; done
	done
	t1=$(date +%s.%N)
	pg1=0
	for k in $(seq 0 $((n - 1))); do pg1=$((pg1 + $(node_cpu_ticks "$k"))); done
	sim1=$(cpu_ticks "$sim_pid")
	w1=$(wal_bytes "$n")
	sent=0
	for k in $(seq 0 $((n - 1))); do
		sent=$((sent + $(node_psql "$k" -At -c "SELECT count(*) FROM notif_job WHERE status = 'sent'")))
	done
	if [ "$sent" != "$JOBS" ]; then
		echo "$n shards: $sent of $JOBS jobs sent" >&2
		exit 1
	fi
	# what a finished job occupies until its retention ends (the job, its
	# attempt and their indexes), over all shards
	disk=0
	for k in $(seq 0 $((n - 1))); do
		disk=$((disk + $(node_psql "$k" -At -c "VACUUM notif_job, notif_attempt" \
			-c "SELECT pg_total_relation_size('notif_job') + pg_total_relation_size('notif_attempt')")))
	done
	result "shards_${n}_disk_bytes_per_job" $((disk / JOBS))
	read -r secs rate per pg sim wal <<<"$(awk -v a="$t0" -v b="$t1" -v j="$JOBS" -v n="$n" -v pg=$((pg1 - pg0)) \
		-v sim=$((sim1 - sim0)) -v w=$((w1 - w0)) -v hz="$HZ" 'BEGIN { s = b - a; printf "%.2f %.0f %.0f %.4f %.4f %.0f\n",
			s, j / s, j / s / n, pg / hz / j * 1000, sim / hz / j * 1000, w / j }')"
	printf '%-7s %9s %11s %15s %12s %12s %9s\n' "$n" "$secs" "$rate" "$per" "$pg" "$sim" "$wal"
	row shards "$n" "$secs" "$rate" "$per" "$pg" "$sim" "$wal"
	result "shards_${n}_jobs_per_s" "$rate"
	result "shards_${n}_jobs_per_s_per_shard" "$per"
	result "shards_${n}_pg_cpu_per_1k" "$pg"
	result "shards_${n}_sim_cpu_per_1k" "$sim"
	result "shards_${n}_wal_bytes_per_job" "$wal"
	for k in $(seq 0 $((n - 1))); do node_stop "$k"; done
	node_dirs=()
done

# --- the router: enqueues through notif_deliver_router into 4 shards ---
for k in 0 1 2 3; do shard_start "$k" 4; done
node_start 4
parts=$(for k in 0 1 2 3; do printf "%sp%s 'host=%s port=%s dbname=postgres'" "$([ "$k" = 0 ] || echo ', ')" "$k" "$BENCH_DIR/n$k" "$(node_port "$k")"; done)
node_psql 4 <<SQL
CREATE EXTENSION notif_deliver_router CASCADE;
CREATE SERVER notif_shards FOREIGN DATA WRAPPER plproxy OPTIONS ($parts);
CREATE USER MAPPING FOR PUBLIC SERVER notif_shards;
SQL
per_client=$(( (ROUTER_CALLS + ROUTER_CLIENTS - 1) / ROUTER_CLIENTS ))
calls=$((per_client * ROUTER_CLIENTS))
cat >"$BENCH_DIR/enqueue.sql" <<'SQL'
\set u random(1, 1000000000)
SELECT notif_enqueue(:u, 'bench', 'r' || :client_id || '-' || :u, '{"to":"+84900000000","text":"hello"}');
SQL
w0=$(wal_bytes 4)
r0=$(node_cpu_ticks 4)
s0=0
for k in 0 1 2 3; do s0=$((s0 + $(node_cpu_ticks "$k"))); done
t0=$(date +%s.%N)
PGHOST=$BENCH_DIR/n4 PGPORT=$(node_port 4) "$PG_BINDIR/pgbench" -n -c "$ROUTER_CLIENTS" -j 2 \
	-t "$per_client" -f "$BENCH_DIR/enqueue.sql" postgres >"$BENCH_DIR/pgbench.log" 2>&1 ||
	{ cat "$BENCH_DIR/pgbench.log" >&2; exit 1; }
t1=$(date +%s.%N)
r1=$(node_cpu_ticks 4)
s1=0
for k in 0 1 2 3; do s1=$((s1 + $(node_cpu_ticks "$k"))); done
w1=$(wal_bytes 4)
got=0
for k in 0 1 2 3; do got=$((got + $(node_psql "$k" -At -c "SELECT count(*) FROM notif_job"))); done
read -r rate rcpu scpu wal <<<"$(awk -v a="$t0" -v b="$t1" -v c="$calls" -v r=$((r1 - r0)) -v s=$((s1 - s0)) \
	-v w=$((w1 - w0)) -v hz="$HZ" \
	'BEGIN { printf "%.0f %.4f %.4f %.0f\n", c / (b - a), r / hz / c * 1000, s / hz / c * 1000, w / c }')"
echo
echo "router: $calls notif_enqueue calls (random users) from $ROUTER_CLIENTS pgbench clients into 4 shards ($got jobs):"
echo "$rate calls/s; CPU s per 1,000 calls: router $rcpu, shards $scpu (pgbench not counted); shards' WAL $wal bytes per call"
result router_enqueue_per_s "$rate"
result router_enqueue_router_cpu_per_1k "$rcpu"
result router_enqueue_shards_cpu_per_1k "$scpu"
result router_enqueue_wal_bytes_per_call "$wal"
