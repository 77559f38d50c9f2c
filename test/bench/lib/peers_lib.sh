# test/bench/lib/peers_lib.sh: the four systems of test/bench/peers.sh behind
# one set of verbs, so that every measurement runs the same steps for each.
# Source it after lib.sh.  A system is one of
#   nd    notif_deliver (this tree), its sender inside PostgreSQL
#   pgq   PgQ 3.5 (Debian postgresql-<major>-pgq3) + pgqd, consumer peers/pgq.cjs
#   gw    graphile-worker 0.17.3, worker peers/gw.cjs
#   boss  pg-boss 10.4.2, worker peers/boss.cjs
#
#   peers_install              npm install the pinned peers under $BENCH_DIR/node;
#                              make PgQ's extension files visible to this PostgreSQL
#   peers_setup SIM_PORT       the schemas of all four in the running cluster
#   worker_start SYS MODE      start SYS's worker (MODE: post, or flood for
#                              the two-queue run: a worker process per queue,
#                              as notif_deliver has a sender per lane; gw:
#                              flood or flood2, see _workers_start); waits
#                              until it is ready;
#                              sets WORKER_SINCE (the database's clock then)
#   worker_stop SYS            stop it (and pgqd)
#   worker_kill SYS            SIGKILL the worker (nd: a sender), start a new one
#   worker_cpu SYS             CPU ticks of the worker process(es) so far
#   enqueue SYS QUEUE N TAG    N jobs in one statement by SYS's bulk path;
#                              prints "EPOCH_S LSN" taken right after the commit
#   settled SYS QUEUE          t when SYS has nothing left to do on QUEUE
#                              (jobs held by a killed worker excepted; nd:
#                              QUEUE is a type, or "all")
#   held SYS QUEUE             jobs still held by a killed worker
#   gave_up SYS QUEUE          jobs given up on, their tries used up
#   trickle_sql SYS I          the statement that enqueues OTP number I, and
#                              prints "I epoch_us" (the clock just before commit)
#   reset_jobs                 empty every system's job tables (workers stopped)
#
# Pinned versions (npm): graphile-worker 0.17.3 and pg-boss 10.4.2 (the
# newest that run on Node 20), undici 7.30.2, pg 8.16.3.

PEERS_NPM='{"graphile-worker": "0.17.3", "pg-boss": "10.4.2", "undici": "7.30.2", "pg": "8.16.3"}'
PEERS_JS=$BENCH_HERE/bench/peers
BODY_TO='+84900000000'
BODY_TEXT=hello

peers_install() {
	local major pgmajor pgq sharedir libdir f
	command -v node >/dev/null && command -v npm >/dev/null ||
		{ echo "peers: node and npm are needed (Node 20 or newer)" >&2; return 1; }
	major=$(node -p 'process.versions.node.split(".")[0]')
	[ "$major" -ge 20 ] || { echo "peers: Node $major found, 20 or newer is needed" >&2; return 1; }
	mkdir -p "$BENCH_DIR/node"
	printf '{ "name": "notif-bench-peers", "private": true, "dependencies": %s }\n' "$PEERS_NPM" \
		>"$BENCH_DIR/node/package.json"
	(cd "$BENCH_DIR/node" && npm install --no-audit --no-fund --loglevel=error >npm.log 2>&1) ||
		{ cat "$BENCH_DIR/node/npm.log" >&2; return 1; }
	export NODE_PATH=$BENCH_DIR/node/node_modules
	# PgQ's package for the major under test (pg_config's) installs into the
	# system's PostgreSQL of that major; a private installation copy
	# (PG_CONFIG elsewhere) gets the same files
	pgmajor=$(pg_config --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
	pgq=postgresql-$pgmajor-pgq3
	dpkg-query -W -f='${Status}' "$pgq" 2>/dev/null | grep -q 'install ok installed' ||
		{ echo "peers: $pgq is not installed (test/deps.sh --bench)" >&2; return 1; }
	command -v pgqd >/dev/null || { echo "peers: pgqd is not installed (test/deps.sh --bench)" >&2; return 1; }
	sharedir=$(pg_config --sharedir)
	libdir=$(pg_config --pkglibdir)
	if [ ! -f "$sharedir/extension/pgq.control" ]; then
		for f in $(dpkg -L "$pgq"); do
			case $f in
			/usr/share/postgresql/$pgmajor/extension/*) cp "$f" "$sharedir/extension/" ;;
			/usr/lib/postgresql/$pgmajor/lib/*.so) cp "$f" "$libdir/" ;;
			esac
		done
	fi
	echo "peers: node $(node --version), $(cd "$BENCH_DIR/node" && node -p '["graphile-worker", "pg-boss", "undici", "pg"].map(p => p + " " + require(p + "/package.json").version).join(", ")'), pgqd $(dpkg-query -W -f="\${Version}" pgqd), $pgq $(dpkg-query -W -f="\${Version}" "$pgq")"
}

# the four systems' schemas; nd's types: ndb (throughput), amo and alo
# (semantics), promo and otp (flood), all paused until worker_start
peers_setup() {
	local sim=$1
	cluster_psql >/dev/null <<SQL
CREATE EXTENSION notif_deliver;
UPDATE notif_provider SET url = 'http://127.0.0.1:$sim/send', idempotency_header = 'Idempotency-Key',
       timeout = '5 seconds', max_inflight = $PEERS_INFLIGHT WHERE name = 'default';
INSERT INTO notif_provider (name, url, idempotency_header, timeout, max_inflight)
VALUES ('otp', 'http://127.0.0.1:$sim/send', 'Idempotency-Key', '5 seconds', 64);
INSERT INTO notif_type (code, delivery, max_tries, lane, provider, paused) VALUES
  ('ndb',   'at_least_once', 3, 'bench', 'default', true),
  ('amo',   'at_most_once',  3, 'amo',   'default', true),
  ('alo',   'at_least_once', 3, 'alo',   'default', true),
  ('promo', 'at_most_once',  1, 'bulk',  'default', true),
  ('otp',   'at_least_once', 3, 'otp',   'otp',     true);
UPDATE notif_type SET backoff_min = '50 ms', backoff_max = '200 ms' WHERE code IN ('amo', 'alo');
CREATE EXTENSION pgq;
SELECT pgq.create_queue(q) FROM unnest(ARRAY['bench', 'bulk', 'otp']) q;
SELECT pgq.register_consumer(q, 'bench') FROM unnest(ARRAY['bench', 'bulk', 'otp']) q;
-- a tick as soon as there are events (the default waits up to 3 s for 500)
SELECT pgq.set_queue_config(q, 'ticker_max_lag', '0.1 seconds') FROM unnest(ARRAY['bench', 'bulk', 'otp']) q;
SQL

	# graphile-worker and pg-boss create their schemas when they first start
	worker_start gw post && worker_stop gw
	worker_start boss post && worker_stop boss
}

PEERS_INFLIGHT=${PEERS_INFLIGHT:-512}
WORKER_PIDS=()
_starts=0
PGQD_PID=
WORKER_MODE=
WORKER_SINCE=

# start one Node worker: _node_start SYS SCRIPT ARGS...; appends its pid to
# WORKER_PIDS, waits for its "ready" (each start has its own log file)
_node_start() {
	local sys=$1 log pid i
	shift
	_starts=$((_starts + 1))
	log=$BENCH_DIR/worker_${sys}_$_starts.log
	echo "== $* $(date -u +%T.%N)" >"$log"
	(cd "$PEERS_JS" && exec node "$@") >>"$log" 2>&1 &
	pid=$!
	WORKER_PIDS+=("$pid")
	for i in $(seq 1 600); do
		grep -q '^ready$' "$log" && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	echo "peers: the $sys worker did not start" >&2
	tail -n 20 "$log" >&2
	return 1
}

# the worker processes of SYS in MODE: one for post, one per queue for flood
# (graphile-worker: one runner for both tasks; flood2: a runner per task,
# see peers/gw.cjs)
_workers_start() {
	local sys=$1 mode=$2 script
	case $sys in gw) script=gw.cjs ;; boss) script="boss.cjs work" ;; pgq) script=pgq.cjs ;; esac
	if [ "$mode" = post ]; then
		_node_start "$sys" $script "$([ "$sys" = gw ] && echo post || echo bench)"
	elif [ "$sys" = gw ] && [ "$mode" = flood ]; then
		_node_start gw gw.cjs flood
	elif [ "$sys" = gw ]; then	# flood2: the OTPs in a runner of their own
		_node_start gw gw.cjs bulk && _node_start gw gw.cjs otp
	else
		_node_start "$sys" $script bulk && _node_start "$sys" $script otp
	fi
}

_pgqd_start() {
	cat >"$BENCH_DIR/pgqd.ini" <<EOF
[pgqd]
logfile = $BENCH_DIR/pgqd.log
pidfile = $BENCH_DIR/pgqd.pid
base_connstr = host=$CLUSTER_DIR port=$CLUSTER_PORT user=postgres
initial_database = postgres
database_list = postgres
ticker_period = 0.1
retry_period = 1
maint_period = 30
EOF
	pgqd "$BENCH_DIR/pgqd.ini" >>"$BENCH_DIR/pgqd.out" 2>&1 &
	PGQD_PID=$!
}

worker_start() {
	local sys=$1 mode=$2
	WORKER_MODE=$mode
	WORKER_SINCE=$(cluster_psql -At -c "SELECT now()")
	case $sys in
	nd)
		if [ "$mode" = flood ]; then
			cluster_psql -c "UPDATE notif_type SET paused = false WHERE code IN ('promo', 'otp')" >/dev/null
		else
			cluster_psql -c "UPDATE notif_type SET paused = false WHERE code IN ('ndb', 'amo', 'alo')" >/dev/null
		fi
		;;
	pgq) _pgqd_start && _workers_start pgq "$mode" ;;
	*) _workers_start "$sys" "$mode" ;;
	esac
}

worker_stop() {
	case $1 in
	nd)
		until cluster_psql -c "UPDATE notif_type SET paused = true" >/dev/null 2>&1; do sleep 0.2; done
		;;
	*)
		local pid
		for pid in "${WORKER_PIDS[@]}"; do
			kill "$pid" 2>/dev/null || true
			wait "$pid" 2>/dev/null || true
		done
		WORKER_PIDS=()
		if [ -n "$PGQD_PID" ]; then
			kill "$PGQD_PID" 2>/dev/null || true
			wait "$PGQD_PID" 2>/dev/null || true
		fi
		PGQD_PID=
		;;
	esac
}

# nd: one sender (alternating lanes); PostgreSQL restarts all its processes
worker_kill() {
	local sys=$1 pid
	if [ "$sys" = nd ]; then
		pid=$(pm_children | awk -v l="${_kill_lane:-amo}" '$0 ~ "notif_deliver sender " l " *$" { print $1; exit }')
		[ -n "$pid" ] || return 1
		kill -KILL "$pid" 2>/dev/null || return 1
		[ "${_kill_lane:-amo}" = amo ] && _kill_lane=alo || _kill_lane=amo
		return 0
	fi
	kill -KILL "${WORKER_PIDS[0]}" 2>/dev/null || return 1
	wait "${WORKER_PIDS[0]}" 2>/dev/null || true
	WORKER_PIDS=()
	WORKER_SINCE=$(cluster_psql -At -c "SELECT now()")
	_workers_start "$sys" "$WORKER_MODE"
}

worker_cpu() {
	case $1 in
	nd) echo 0 ;;	# the sender is part of the cluster: see peers.sh
	pgq) cpu_ticks "${WORKER_PIDS[@]}" "$PGQD_PID" ;;
	*) cpu_ticks "${WORKER_PIDS[@]}" ;;
	esac
}

_after_commit="SELECT extract(epoch FROM clock_timestamp()), pg_current_wal_lsn()"

enqueue() {
	local sys=$1 q=$2 n=$3 tag=$4
	case $sys in
	nd)
		cluster_psql -At -F' ' -c "SELECT count(notif_enqueue(g, '$q', '$tag', '{\"to\":\"$BODY_TO\",\"text\":\"$BODY_TEXT\"}')) FROM generate_series(1, $n) g" \
			-c "$_after_commit" | tail -1
		;;
	pgq)
		cluster_psql -At -F' ' -c "SELECT count(pgq.insert_event('$q', 'post', json_build_object('k', '$tag:' || g, 'to', '$BODY_TO', 'text', '$BODY_TEXT')::text)) FROM generate_series(1, $n) g" \
			-c "$_after_commit" | tail -1
		;;
	gw)
		cluster_psql -At -F' ' -c "SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(SELECT ROW('$q', json_build_object('k', '$tag:' || g, 'to', '$BODY_TO', 'text', '$BODY_TEXT'), NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec FROM generate_series(1, $n) g))" \
			-c "$_after_commit" | tail -1
		;;
	boss)
		(cd "$PEERS_JS" && node boss.cjs enqueue "$q" "$n" "$tag" | tail -1)
		;;
	esac
}

settled() {
	local sys=$1 q=$2 since=$WORKER_SINCE sql
	case $sys in
	nd) sql=$(nd_idle_sql "$([ "$q" = all ] || echo "$q")") ;;
	pgq) sql="SELECT (SELECT ev_new FROM pgq.get_queue_info('$q')) = 0
		AND NOT EXISTS (SELECT 1 FROM pgq.get_consumer_info('$q', 'bench') WHERE current_batch IS NOT NULL OR pending_events > 0)
		AND NOT EXISTS (SELECT 1 FROM pgq.retry_queue r JOIN pgq.subscription s ON s.sub_id = r.ev_owner
			JOIN pgq.queue qq ON qq.queue_id = s.sub_queue WHERE qq.queue_name = '$q')" ;;
	gw) sql="SELECT NOT EXISTS (SELECT 1 FROM graphile_worker.jobs WHERE task_identifier = '$q' AND attempts < max_attempts
		AND (locked_at IS NULL OR locked_at >= '$since'))" ;;
	boss) sql="SELECT NOT EXISTS (SELECT 1 FROM pgboss.job WHERE name = '$q' AND (state IN ('created', 'retry')
		OR (state = 'active' AND started_on >= '$since')))" ;;
	esac
	cluster_psql -At -c "$sql" 2>/dev/null || echo f
}

held() {
	local sys=$1 q=$2 since=$WORKER_SINCE
	case $sys in
	gw) cluster_psql -At -c "SELECT count(*) FROM graphile_worker.jobs WHERE task_identifier = '$q' AND locked_at < '$since'" ;;
	boss) cluster_psql -At -c "SELECT count(*) FROM pgboss.job WHERE name = '$q' AND state = 'active' AND started_on < '$since'" ;;
	nd) cluster_psql -At -c "$(nd_busy_sql)" ;;
	*) echo 0 ;;
	esac
}

# jobs the system gave up on (tries used up); pgq: its consumer drops an
# event after 3 tries, which PgQ does not record: "-"
gave_up() {
	local sys=$1 q=$2
	case $sys in
	nd) cluster_psql -At -c "SELECT count(*) FROM notif_job WHERE kind = '$q' AND status IN ('failed', 'expired')" ;;
	gw) cluster_psql -At -c "SELECT count(*) FROM graphile_worker.jobs WHERE task_identifier = '$q' AND attempts >= max_attempts" ;;
	boss) cluster_psql -At -c "SELECT count(*) FROM pgboss.job WHERE name = '$q' AND state = 'failed'" ;;
	*) echo - ;;
	esac
}

trickle_sql() {
	local sys=$1 i=$2 e
	case $sys in
	nd) e="notif_enqueue($i, 'otp', 'login-$i', '{\"to\":\"+84912345678\",\"text\":\"Ma OTP: 654321\"}')" ;;
	pgq) e="pgq.insert_event('otp', 'post', '{\"k\":\"otp:$i\",\"to\":\"+84912345678\",\"text\":\"Ma OTP: 654321\"}')" ;;
	gw) e="graphile_worker.add_job('otp', '{\"k\":\"otp:$i\",\"to\":\"+84912345678\",\"text\":\"Ma OTP: 654321\"}', priority := -10)" ;;
	boss)	# a data-modifying WITH must be at the top level
		echo "WITH j AS (INSERT INTO pgboss.job (name, data) VALUES ('otp', '{\"k\":\"otp:$i\",\"to\":\"+84912345678\",\"text\":\"Ma OTP: 654321\"}') RETURNING id)
		      SELECT $i, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint FROM j;"
		return 0 ;;
	esac
	echo "SELECT $i, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint FROM (SELECT $e OFFSET 0) e;"
}

# every system's jobs, between runs (workers stopped)
reset_jobs() {
	cluster_psql -c "TRUNCATE notif_job, notif_attempt CASCADE" \
		-c "DELETE FROM graphile_worker._private_jobs" \
		-c "TRUNCATE pgboss.job" >/dev/null
}
