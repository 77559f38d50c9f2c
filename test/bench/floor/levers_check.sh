#!/usr/bin/env bash
# test/bench/floor/levers_check.sh: checks of http_floor's levers (issue
# 15): --park, the design for keeping idle connections' sockets in the
# epoll set (see park.c), and handles reused without curl_easy_reset or
# with a parsed URL (--no-reset, --curlu).  Each check runs the client
# against the provider simulator and
# fails on its exit status: 1 if a call did not get a 2xx, 3 if a socket
# opened through the open callback was not closed through the close
# callback by the end (curl_multi_cleanup included), or, for the last
# check, if the loop spun on parked sockets.  The checks:
#   plain          30000 calls, 512 in flight (the benchmark's run)
#   close-every 7  every 7th call asks for "Connection: close": libcurl
#                  closes those connections, new sockets reuse the numbers
#   maxconnects 64 512 in flight but 64 cached connections: libcurl's
#                  connection cache closes the surplus as calls end
#   localhost      a host name: libcurl's resolver socketpair, watched and
#                  unwatched without the callbacks, shares the epoll set
#   no-reset       no curl_easy_reset between calls (the callbacks are set
#                  once per handle)
#   alt-url        --park --no-reset --curlu, every other call to another
#                  URL (another host name, path and query): the simulator
#                  must have received every sampled key with its call's
#                  target and Host (a reused handle goes where its call
#                  says, not where the handle's last call went)
#   idle-close     after the calls the simulator is terminated while every
#                  connection is parked: each socket's end of file must
#                  take it out of the epoll set within 1,000 turns of the
#                  loop (a loop that kept them would spin)
#
#   bash test/bench/floor/levers_check.sh   (a few seconds; prints "ok" per check)
#
# BENCH_SIM_PORT [26452]; needs the simulator built (make -C test/sim).
set -euo pipefail
BENCH_SIM_PORT=${BENCH_SIM_PORT:-26452}
. "$(dirname "$0")/../lib/common.sh"
SIM=$BENCH_SIM_PORT

bench_dir levers_check
CLIENT=$BENCH_DIR/http_floor
make -s -C "$BENCH_HERE/bench/floor" OUT="$CLIENT" >/dev/null

check() {	# NAME HOST CLIENT OPTIONS...
	local name=$1 host=$2 out
	shift 2
	if ! out=$("$CLIENT" --url "http://$host:$SIM/send" --sim-pid "${_bench_sims[0]}" "$@" 2>&1); then
		echo "FAIL $name: $out" >&2
		exit 1
	fi
	echo "ok $name: $(grep -o 'sockets_opened [0-9]* sockets_closed_so_far [0-9]* parked_events [0-9]*' <<<"$out")$(grep -o ' --idle-close: .*' <<<"$out" || true)"
}

sim_start levers "$SIM"
check plain 127.0.0.1 --park --calls 30000 --inflight 512
check "close-every 7" 127.0.0.1 --park --calls 30000 --inflight 512 --close-every 7
check "maxconnects 64" 127.0.0.1 --park --calls 30000 --inflight 512 --maxconnects 64
check localhost localhost --park --calls 5000 --inflight 64
check no-reset 127.0.0.1 --park --no-reset --calls 30000 --inflight 512
sim_get "$SIM" /reset >/dev/null
check alt-url 127.0.0.1 --park --no-reset --curlu --calls 3000 --inflight 512 \
	--alt-url "http://localhost:$SIM/alt?x=1"
# keys 1 to 3512 (warm-up included): the even ones went to the other URL
wrong=0
for k in $(seq 1 37 3512); do
	want="/send 127.0.0.1:$SIM"
	[ $((k % 2)) = 0 ] && want="/alt?x=1 localhost:$SIM"
	got=$(sim_get "$SIM" "/last?key=bench:$k:o" |
		awk '$1 == "target" { t = $2 } $1 == "header" && $2 == "Host:" { h = $3 } END { print t, h }')
	[ "$got" = "$want" ] || wrong=$((wrong + 1))
done
[ "$wrong" = 0 ] || { echo "FAIL alt-url: $wrong sampled keys at the wrong target" >&2; exit 1; }
echo "ok alt-url: every sampled key at its call's target and Host"
# last: it terminates the simulator
check idle-close 127.0.0.1 --park --calls 5000 --inflight 512 --idle-close
