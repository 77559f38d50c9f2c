#!/usr/bin/env bash
# test/bench/claim_limit.sh: the database's own dispatch limit.  A pgbench
# script claims batches of 100 due jobs from notif_active with FOR UPDATE
# SKIP LOCKED (the sender's claim: the same filter, order, index and locks)
# and marks them done (status 'sent', as after a 2xx, their work rows
# deleted) in one statement, with no HTTP at all.
# No sender can drain a backlog faster than that on this machine.
#
# test/bench/dispatch.sh runs it inside its own cluster, between its
# dispatch measurements, and reports the sender's rate as a fraction of it
# (side by side, same cluster, same jobs):
#
#   bash test/bench/claim_limit.sh --attached KIND
#       against the running cluster of PGHOST/PGPORT: completes every queued
#       job of type KIND (paused, so that no sender touches them) and prints
#       one line "JOBS SECONDS"
#
# On its own it starts a throwaway cluster, measures CLAIM_ROUNDS rounds of
# JOBS jobs, and prints a table and the medians as RESULT
# claim_limit_alone_jobs_per_s and claim_limit_alone_pg_cpu_per_1k (the
# in-run limit, next to the sender's rate, is dispatch.sh's
# claim_limit_jobs_per_s):
#
#   bash test/bench/claim_limit.sh [JOBS]          (default 200000 x BENCH_SCALE)
#
# Environment: CLAIM_CLIENTS [1] pgbench clients (more only contend for
# the same index pages: 2 and 4 were slower on 2 cores); CLAIM_BATCH [100];
# CLAIM_ROUNDS [3]; BENCH_PORT (see test/bench/lib/common.sh).  Needs the
# extension installed (make install).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
CLIENTS=${CLAIM_CLIENTS:-1}
BATCH=${CLAIM_BATCH:-100}

# complete every queued job of a type with pgbench; prints "JOBS SECONDS"
claim_limit_run() {
	local kind=$1 script n tx out tps processed left
	script=$(mktemp "$BENCH_TMP/notif_claim.XXXXXX")
	cat >"$script" <<SQL
WITH due AS (
    SELECT a.job_id AS id
      FROM notif_active a JOIN notif_job j ON j.id = a.job_id
     WHERE a.kind = '$kind' AND a.claimed_by IS NULL AND a.next_at <= now()
       AND j.status = 'queued'
     ORDER BY a.next_at
     LIMIT $BATCH
       FOR UPDATE OF a SKIP LOCKED FOR NO KEY UPDATE OF j SKIP LOCKED),
done AS (
    UPDATE notif_job j
       SET status = 'sent', tries = j.tries + 1, sent_at = now(),
           outcome = 'accepted', http_status = 200
      FROM due
     WHERE j.id = due.id
    RETURNING j.id)
DELETE FROM notif_active a USING done d WHERE a.job_id = d.id;
SQL
	n=$(cluster_psql -At -c "SELECT count(*) FROM notif_job WHERE kind = '$kind' AND status = 'queued'")
	# transactions per client: enough for every job (the last ones may find none)
	tx=$(((n + BATCH * CLIENTS - 1) / (BATCH * CLIENTS)))
	out=$("$PG_BINDIR/pgbench" -n -M prepared -f "$script" -c "$CLIENTS" -j "$CLIENTS" -t "$tx" 2>&1) ||
		{ echo "$out" >&2; rm -f "$script"; return 1; }
	rm -f "$script"
	tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out")
	processed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
	left=$(cluster_psql -At -c "SELECT count(*) FROM notif_job WHERE kind = '$kind' AND status = 'queued'")
	if [ -z "$tps" ] || [ -z "$processed" ] || [ "$left" != 0 ]; then
		echo "claim_limit: pgbench did not complete the jobs ($left left):" >&2
		echo "$out" >&2
		return 1
	fi
	awk -v n="$n" -v p="$processed" -v tps="$tps" 'BEGIN { printf "%d %.4f\n", n, p / tps }'
}

if [ "${1:-}" = --attached ]; then
	[ -n "${2:-}" ] || { echo "usage: $0 --attached KIND" >&2; exit 2; }
	claim_limit_run "$2"
	exit 0
fi

JOBS=${1:-$(bench_scale 200000)}
ROUNDS=${CLAIM_ROUNDS:-3}
bench_dir claim_limit
cluster_start "$BENCH_DIR/pg" "$BENCH_PORT" "notif_deliver.database = 'postgres'" \
	"max_wal_size = '4GB'" "checkpoint_timeout = '30min'" "synchronous_commit = off"
cluster_psql <<'SQL'
CREATE EXTENSION notif_deliver;
INSERT INTO notif_type (code, delivery, max_tries, lane, paused)
VALUES ('bench', 'at_least_once', 3, 'bench', true);
SQL

echo "claim limit: $JOBS queued jobs completed by pgbench in batches of $BATCH, $CLIENTS client(s), no HTTP;"
echo "$(nproc) cores, $(pg_config --version)"
printf '%-6s %10s %12s %16s\n' round seconds jobs_per_s pg_cpu_s_per_1k
rates=() cpus=()
for round in $(seq 1 "$ROUNDS"); do
	cluster_psql -c "TRUNCATE notif_job, notif_attempt CASCADE" \
		-c "SELECT count(notif_enqueue(g, 'bench', 'o', '{\"to\":\"+84900000000\",\"text\":\"hello\"}')) FROM generate_series(1, $JOBS) g" \
		-c "ANALYZE notif_job" -c "CHECKPOINT" >/dev/null
	c0=$(cluster_cpu_ticks)
	read -r n secs <<<"$(claim_limit_run bench)"
	c1=$(cluster_cpu_ticks)
	read -r rate cpu <<<"$(awk -v n="$n" -v s="$secs" -v c=$((c1 - c0)) -v hz="$HZ" \
		'BEGIN { printf "%.0f %.4f\n", n / s, c / hz / n * 1000 }')"
	printf '%-6s %10.2f %12s %16.3f\n' "$round" "$secs" "$rate" "$cpu"
	rates+=("$rate")
	cpus+=("$cpu")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
printf '%-6s %10s %12s %16.3f\n' median "" "$(median "${rates[@]}")" "$(median "${cpus[@]}")"
result claim_limit_alone_jobs_per_s "$(median "${rates[@]}")"
result claim_limit_alone_pg_cpu_per_1k "$(printf '%.3f' "$(median "${cpus[@]}")")"
