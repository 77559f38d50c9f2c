# test/lib/cluster.sh: start and stop a throwaway PostgreSQL cluster for the
# demo and the benchmarks.  Source it, then:
#   cluster_start DIR PORT [extra postgresql.conf lines...]
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
	mkdir -p "$CLUSTER_DIR"
	[ "$(id -u)" = 0 ] && chown postgres "$CLUSTER_DIR"
	cluster_as "$PG_BINDIR/initdb" -D "$CLUSTER_DIR/data" -U postgres -A trust --no-sync >"$CLUSTER_DIR/initdb.log" 2>&1 ||
		{ cat "$CLUSTER_DIR/initdb.log"; return 1; }
	{
		echo "port = $CLUSTER_PORT"
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$CLUSTER_DIR'"
		echo "shared_preload_libraries = 'notif_deliver'"
		echo "fsync = off"
		for line in "$@"; do echo "$line"; done
	} >>"$CLUSTER_DIR/data/postgresql.conf"
	cluster_as "$PG_BINDIR/pg_ctl" -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/server.log" -w start >/dev/null ||
		{ cat "$CLUSTER_DIR/server.log"; return 1; }
	export PGHOST=$CLUSTER_DIR PGPORT=$CLUSTER_PORT PGUSER=postgres PGDATABASE=postgres
}

cluster_psql() {
	"$PG_BINDIR/psql" -X -v ON_ERROR_STOP=1 -q "$@"
}

cluster_stop() {
	[ -n "${CLUSTER_DIR:-}" ] && [ -d "$CLUSTER_DIR/data" ] &&
		cluster_as "$PG_BINDIR/pg_ctl" -D "$CLUSTER_DIR/data" -m immediate stop >/dev/null 2>&1
	return 0
}
