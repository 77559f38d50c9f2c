#!/usr/bin/env bash
# test/bench/enqueue_single.sh: single-row enqueue throughput, pgbench with
# 8 clients: `SELECT notif_enqueue(...)` against the plain
# `INSERT ... ON CONFLICT DO NOTHING` into a table of the same shape (same
# columns, CHECKs, indexes, foreign key), alternating, in one run (issue 4,
# section 2: ratio >= 0.8).  Each transaction is one row, committed.
#
#   bash test/bench/enqueue_single.sh
#
# Environment: ENQ_SECONDS [10 x BENCH_SCALE] per pgbench run, ENQ_ROUNDS
# [3] pairs of runs, ENQ_CLIENTS [8]; BENCH_PORT (see test/bench/lib/common.sh).
# The type's lane has its sender running (as in production): each commit
# wakes it.
# Needs the extension installed (make install).  Prints RESULT lines.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
SECS=${ENQ_SECONDS:-$(bench_scale 10)}
ROUNDS=${ENQ_ROUNDS:-3}
CLIENTS=${ENQ_CLIENTS:-8}
bench_dir enqueue_single
cluster_start "$BENCH_DIR/pg" "$BENCH_PORT" "notif_deliver.database = 'postgres'" \
	"max_wal_size = '4GB'" "checkpoint_timeout = '30min'" "max_connections = 50"
plain_job_setup

cat >"$BENCH_DIR/plain.sql" <<'SQL'
\set u random(1, 1000000000000)
INSERT INTO plain_job (user_id, kind, order_id, payload, next_at, deadline_at)
VALUES (:u, 'promo', 'o', '{"to":"+84901234567","text":"sale"}', now(), now() + interval '1 day')
ON CONFLICT DO NOTHING;
SQL
cat >"$BENCH_DIR/enqueue.sql" <<'SQL'
\set u random(1, 1000000000000)
SELECT notif_enqueue(:u, 'promo', 'o'::text, '{"to":"+84901234567","text":"sale"}');
SQL
chmod 644 "$BENCH_DIR"/*.sql

# one pgbench run; prints tps
bench() {
	cluster_psql -c "TRUNCATE notif_job, plain_job CASCADE" -c "CHECKPOINT" >/dev/null
	"$PG_BINDIR/pgbench" -n -M prepared -c "$CLIENTS" -j 2 -T "$SECS" -f "$BENCH_DIR/$1.sql" 2>&1 |
		tee "$BENCH_DIR/$1.log" | sed -n 's/^tps = \([0-9.]*\) .*/\1/p'
}

echo "single-row enqueue, pgbench $CLIENTS clients, ${SECS}s per run, $(nproc) cores, $(pg_config --version)"
printf '%-6s %12s %12s %7s\n' round plain_tps enqueue_tps ratio
: >"$BENCH_DIR/rounds"
for r in $(seq 1 "$ROUNDS"); do
	p=$(bench plain)
	e=$(bench enqueue)
	[ -n "$p" ] && [ -n "$e" ] || { cat "$BENCH_DIR"/*.log >&2; exit 1; }
	ratio=$(awk -v e="$e" -v p="$p" 'BEGIN { printf "%.2f", e / p }')
	echo "$p $e $ratio" >>"$BENCH_DIR/rounds"
	printf '%-6s %12.0f %12.0f %7s\n' "$r" "$p" "$e" "$ratio"
done
read -r p e median <<<"$(sort -k3 -n "$BENCH_DIR/rounds" | awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)] }')"
echo "median ratio enqueue/plain: $median (target >= 0.8)"
result enqueue_single_clients "$CLIENTS"
result enqueue_single_plain_tps "$(printf '%.0f' "$p")"
result enqueue_single_enqueue_tps "$(printf '%.0f' "$e")"
result enqueue_single_ratio "$median"
