# test/lib/cluster.sh: start and stop a throwaway PostgreSQL cluster for the
# demo and the benchmarks.  Source it, then:
#   cluster_start DIR PORT [extra postgresql.conf lines...]
#   cluster_create DIR PORT [lines...]   another cluster, not the current one
#   cluster_psql ...          psql against it as the superuser "postgres"
#   cluster_stop
# As root the cluster runs as the unprivileged user "postgres" (PostgreSQL
# refuses root); as any other user it runs as that user.

PG_BINDIR=${PG_BINDIR:-$(pg_config --bindir)}

cluster_as() {
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

cluster_start() {
	CLUSTER_DIR=$1
	CLUSTER_PORT=$2
	shift 2
	cluster_create "$CLUSTER_DIR" "$CLUSTER_PORT" "shared_preload_libraries = 'notif_deliver'" "$@"
	export PGHOST=$CLUSTER_DIR PGPORT=$CLUSTER_PORT PGUSER=postgres PGDATABASE=postgres
}

# cluster_create DIR PORT [lines...]: initdb and start a cluster in DIR
# (socket in DIR, fsync off), without making it the current one; for
# scripts that run several (test/bench/shards.sh)
cluster_create() {
	local dir=$1 port=$2
	shift 2
	mkdir -p "$dir"
	[ "$(id -u)" = 0 ] && chown postgres "$dir"
	cluster_step "$PG_BINDIR/initdb" -D "$dir/data" -U postgres -A trust --no-sync >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log"; return 1; }
	{
		echo "port = $port"
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$dir'"
		echo "fsync = off"
		for line in "$@"; do echo "$line"; done
	} >>"$dir/data/postgresql.conf"
	cluster_step "$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null ||
		{ cat "$dir/server.log"; return 1; }
}

# cluster_step CMD...: CMD as the cluster's user, in the background, waited
# for.  An interrupt (Ctrl-C) then ends the wait at once and runs the
# caller's trap; in the foreground, bash would ignore a Ctrl-C that the
# command survived (initdb finishing its work, say) and carry on.  The step
# itself ignores SIGINT, as background commands do: cluster_stop waits for
# it to end before it stops and removes what it made.
cluster_step() {
	local rc=0
	cluster_as "$@" &
	CLUSTER_STEP_PID=$!
	wait "$CLUSTER_STEP_PID" || rc=$?
	CLUSTER_STEP_PID=
	return $rc
}

cluster_psql() {
	"$PG_BINDIR/psql" -X -v ON_ERROR_STOP=1 -q "$@"
}

# cluster_stop: the current cluster stopped (immediate), however far it
# got.  pg_ctl start puts the postmaster in a session of its own, so an
# interrupt that ends pg_ctl while the server starts leaves the server
# starting: wait for its pid file (up to 10 s), stop it, and kill what is
# left of a postmaster of this data folder that never wrote one.
cluster_stop() {
	local data i
	# a step still running (interrupted while initdb or pg_ctl worked): its end first
	if [ -n "${CLUSTER_STEP_PID:-}" ]; then
		wait "$CLUSTER_STEP_PID" 2>/dev/null || true
		CLUSTER_STEP_PID=
	fi
	[ -n "${CLUSTER_DIR:-}" ] && [ -d "$CLUSTER_DIR/data" ] || return 0
	data=$CLUSTER_DIR/data
	for ((i = 0; i < 100; i++)); do
		{ [ -f "$data/postmaster.pid" ] || ! pgrep -f -- "bin/postgres -D $data( |$)" >/dev/null; } && break
		sleep 0.1
	done
	# (either may find nothing to stop: callers run under errexit)
	cluster_as "$PG_BINDIR/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
	pkill -KILL -f -- "bin/postgres -D $data( |$)" 2>/dev/null || true
	return 0
}
