#!/usr/bin/env bash
# test/bench/enqueue_bulk.sh: bulk notif_enqueue against the equivalent plain
# INSERT ... ON CONFLICT DO NOTHING into a table of the same shape (same
# columns, CHECKs, indexes and foreign key), side by side in one run
# (issue 4, section 2, bulk: ratio of times <= 1.5).
#
#   bash test/bench/enqueue_bulk.sh [ROWS] [ROUNDS]     (defaults 1000000 x BENCH_SCALE, 3)
#
# Needs the extension installed (make install).  Starts and removes its own
# throwaway cluster (port BENCH_PORT).  Prints one line per round, the
# median ratio, and RESULT lines for test/bench/run.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
ROWS=${1:-$(bench_scale 1000000)}
ROUNDS=${2:-3}
bench_dir enqueue_bulk
cluster_start "$BENCH_DIR/pg" "$BENCH_PORT" "max_wal_size = '4GB'" "checkpoint_timeout = '30min'"

plain_job_setup

# one timed statement; prints milliseconds
timed() {
	cluster_psql -At -c "TRUNCATE notif_job, plain_job CASCADE" -c "CHECKPOINT" >/dev/null
	cluster_psql -At <<SQL | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p'
\\timing on
$1
SQL
}

plain="INSERT INTO plain_job (user_id, kind, order_id, payload, next_at, deadline_at)
 SELECT g, 'promo', g::text, '{\"to\":\"+84901234567\",\"text\":\"sale\"}', now(), now() + interval '1 day'
 FROM generate_series(1, $ROWS) g ON CONFLICT DO NOTHING;"
enq="SELECT count(notif_enqueue(g, 'promo', g, '{\"to\":\"+84901234567\",\"text\":\"sale\"}'))
 FROM generate_series(1, $ROWS) g;"

echo "bulk enqueue of $ROWS rows, $(nproc) cores, $(pg_config --version)"
printf '%-6s %14s %14s %7s\n' round plain_ms enqueue_ms ratio
: >"$BENCH_DIR/rounds"
for r in $(seq 1 "$ROUNDS"); do
	p=$(timed "$plain")
	e=$(timed "$enq")
	ratio=$(awk -v e="$e" -v p="$p" 'BEGIN { printf "%.2f", e / p }')
	echo "$p $e $ratio" >>"$BENCH_DIR/rounds"
	printf '%-6s %14.0f %14.0f %7s\n' "$r" "$p" "$e" "$ratio"
done
# the round with the median ratio
read -r p e median <<<"$(sort -k3 -n "$BENCH_DIR/rounds" | awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)] }')"
echo "median ratio enqueue/plain: $median (target <= 1.5)"
result enqueue_bulk_rows "$ROWS"
result enqueue_bulk_rounds "$ROUNDS"
result enqueue_bulk_plain_s "$(awk -v v="$p" 'BEGIN { printf "%.2f", v / 1000 }')"
result enqueue_bulk_enqueue_s "$(awk -v v="$e" 'BEGIN { printf "%.2f", v / 1000 }')"
result enqueue_bulk_ratio "$median"
