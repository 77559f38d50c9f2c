#!/usr/bin/env bash
# test/bench/http2.sh: HTTP/2 against HTTP/1.1, side by side in one run.
# One lane drains a backlog of at_least_once jobs at 0 ms provider latency
# through a TLS front (nghttpx, a throwaway certificate trusted through
# notif_provider.ca_cert) in front of the provider simulator:
#   h2   the front offers h2: max_connections = 1, the calls in flight
#        multiplexed as streams of one connection
#   h1   a second front offers only http/1.1: a connection per call in
#        flight (the cap is lifted once the provider answers over HTTP/1.1)
# Both with the same number of calls in flight.  Reported per round and as
# medians: jobs/s, CPU seconds per 1,000 jobs of PostgreSQL (all its
# processes), of the sender alone, of the front (nghttpx) and of the
# simulator, and the connections the front saw (from its access log).
#
#   bash test/bench/http2.sh [JOBS] [INFLIGHT]     (defaults 20000 x BENCH_SCALE, 100)
#
# Environment: HTTP2_ROUNDS [3]; HTTP2_MAX_CONNECTIONS [1] (of h2); HTTP2_FRONT_PORT [28443] (and the next one)
# for the fronts; BENCH_PORT, BENCH_SIM_PORT.  Needs nghttpx
# (nghttp2-proxy), the extension installed and the simulator built.
# Prints "RESULT name value":
#   http2_{h2,h1}_jobs_per_s  http2_{h2,h1}_pg_cpu_per_1k  http2_{h2,h1}_sender_cpu_per_1k
#   http2_{h2,h1}_front_cpu_per_1k  http2_{h2,h1}_connections  http2_speedup (h2 / h1 jobs/s)
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
JOBS=${1:-$(bench_scale 20000)}
INFLIGHT=${2:-100}
ROUNDS=${HTTP2_ROUNDS:-3}
H2_CONNECTIONS=${HTTP2_MAX_CONNECTIONS:-1}
SIM=$BENCH_SIM_PORT
# below the ephemeral range (32768-60999): a busy machine's outgoing
# connections cannot hold these ports
FRONT_H2=${HTTP2_FRONT_PORT:-28443}
FRONT_H1=$((FRONT_H2 + 1))
command -v nghttpx >/dev/null || { echo "nghttpx is not installed (package nghttp2-proxy)" >&2; exit 2; }

bench_dir http2
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=127.0.0.1 \
	-addext "subjectAltName=IP:127.0.0.1" -keyout "$BENCH_DIR/srv.key" -out "$BENCH_DIR/srv.crt" 2>/dev/null
sim_start main "$SIM"
sim_pid=${_bench_sims[0]}

front_start h2 "$FRONT_H2" "$SIM" h2 256
front_start h1 "$FRONT_H1" "$SIM" http/1.1 256
front_wait h2 "$FRONT_H2"
front_wait h1 "$FRONT_H1"
front_pids() {	# the master and its worker
	local m=$1
	echo "$m" $(ps -o pid= --ppid "$m")
}
declare -A front_pid=([h2]=${_bench_sims[1]} [h1]=${_bench_sims[2]})

cluster_start "$BENCH_DIR/pg" "$BENCH_PORT" "notif_deliver.database = 'postgres'" \
	"notif_deliver.max_inflight = $INFLIGHT" "synchronous_commit = off" "max_wal_size = '4GB'"
ca=$(sed "s/'/''/g" "$BENCH_DIR/srv.crt")
cluster_psql <<SQL
CREATE EXTENSION notif_deliver;
INSERT INTO notif_provider (name, url, idempotency_header, timeout, max_inflight, max_connections, ca_cert)
VALUES ('h2', 'https://127.0.0.1:$FRONT_H2/send', 'Idempotency-Key', '10 s', $INFLIGHT, $H2_CONNECTIONS, '$ca'),
       ('h1', 'https://127.0.0.1:$FRONT_H1/send', 'Idempotency-Key', '10 s', $INFLIGHT, 1, '$ca');
INSERT INTO notif_type (code, delivery, max_tries, provider, lane, paused) VALUES
    ('h2', 'at_least_once', 3, 'h2', 'bench', true),
    ('h1', 'at_least_once', 3, 'h1', 'bench', true);
SQL

# drain JOBS jobs of type W (h2 or h1); prints "W seconds jobs pg sender front sim connections calls_of_its_alpn"
drain() {
	local w=$1 alpn pg0 snd0 fr0 sim0 t0 t1 pg1 fr1 sim1 snd sent conns
	[ "$w" = h2 ] && alpn=h2 || alpn=http/1.1
	cluster_psql -c "TRUNCATE notif_job, notif_attempt CASCADE" \
		-c "SELECT count(notif_enqueue(g, '$w', 'o', '{\"to\":\"+84900000000\",\"text\":\"hello\"}')) FROM generate_series(1, $JOBS) g" \
		-c "CHECKPOINT" >/dev/null
	: >"$BENCH_DIR/access_$w.log"
	pg0=$(cluster_cpu_ticks)
	fr0=$(cpu_ticks $(front_pids "${front_pid[$w]}"))
	sim0=$(cpu_ticks "$sim_pid")
	t0=$(date +%s.%N)
	cluster_psql -c "UPDATE notif_type SET paused = false WHERE code = '$w'" >/dev/null
	wait_sql "$(nd_idle_sql)"
	t1=$(date +%s.%N)
	pg1=$(cluster_cpu_ticks)
	fr1=$(cpu_ticks $(front_pids "${front_pid[$w]}"))
	sim1=$(cpu_ticks "$sim_pid")
	snd=$(cpu_ticks $(sender_pids))
	# the sender stops with its lane paused: the next drain opens its connections afresh
	end_drain "$w" "$w"
	conns=$(awk '{ print $1 }' "$BENCH_DIR/access_$w.log" | sort -u | wc -l)
	awk -v w="$w" -v a="$t0" -v b="$t1" -v n="$JOBS" -v pg=$((pg1 - pg0)) -v snd="$snd" \
		-v fr=$((fr1 - fr0)) -v sim=$((sim1 - sim0)) -v hz="$HZ" -v c="$conns" \
		-v calls="$(awk -v p="$alpn" '$2 == p' "$BENCH_DIR/access_$w.log" | wc -l)" 'BEGIN {
		s = b - a
		printf "%s %.3f %.0f %.4f %.4f %.4f %.4f %d %d\n", w, s, n / s, pg / hz / n * 1000,
			snd / hz / n * 1000, fr / hz / n * 1000, sim / hz / n * 1000, c, calls }'
}

echo "$JOBS at_least_once jobs per drain, $INFLIGHT calls in flight, provider at 0 ms, through nghttpx (TLS);"
echo "h2: max_connections = $H2_CONNECTIONS; h1: the front offers only http/1.1. $ROUNDS rounds, $(nproc) cores"
printf '%-6s %-4s %8s %10s %10s %12s %11s %10s %6s %8s\n' round what seconds jobs_per_s pg_cpu_1k \
	sender_cpu_1k front_cpu_1k sim_cpu_1k conns its_alpn
rows=()
for round in $(seq 1 "$ROUNDS"); do
	for w in h2 h1; do
		r=$(drain "$w")
		read -r w s n pg snd fr sim c calls <<<"$r"
		printf '%-6s %-4s %8.2f %10s %10.3f %12.3f %11.3f %10.3f %6s %8s\n' "$round" "$w" "$s" "$n" \
			"$pg" "$snd" "$fr" "$sim" "$c" "$calls"
		[ "$calls" = "$JOBS" ] || { echo "$w: $calls of $JOBS calls over its protocol" >&2; exit 1; }
		rows+=("$r")
	done
done

median() {	# of column C of the rows of W
	printf '%s\n' "${rows[@]}" | awk -v w="$1" -v c="$2" '$1 == w { print $c }' | sort -g |
		awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}
for w in h2 h1; do
	printf '%-6s %-4s %8s %10s %10.3f %12.3f %11.3f %10.3f %6s\n' median "$w" "" "$(median $w 3)" \
		"$(median $w 4)" "$(median $w 5)" "$(median $w 6)" "$(median $w 7)" "$(median $w 8)"
	result "http2_${w}_jobs_per_s" "$(median $w 3)"
	result "http2_${w}_pg_cpu_per_1k" "$(printf '%.3f' "$(median $w 4)")"
	result "http2_${w}_sender_cpu_per_1k" "$(printf '%.3f' "$(median $w 5)")"
	result "http2_${w}_front_cpu_per_1k" "$(printf '%.3f' "$(median $w 6)")"
	result "http2_${w}_connections" "$(median $w 8)"
done
result http2_speedup "$(awk -v a="$(median h2 3)" -v b="$(median h1 3)" 'BEGIN { printf "%.2f", a / b }')"
