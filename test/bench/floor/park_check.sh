#!/usr/bin/env bash
# test/bench/floor/park_check.sh: checks of http_floor's --park (issue 15),
# the design for keeping idle connections' sockets in the epoll set (see
# park.c).  Each check runs the client against the provider simulator and
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
#   idle-close     after the calls the simulator is terminated while every
#                  connection is parked: each socket's end of file must
#                  take it out of the epoll set within 1,000 turns of the
#                  loop (a loop that kept them would spin)
#
#   bash test/bench/floor/park_check.sh     (a few seconds; prints "ok" per check)
#
# BENCH_SIM_PORT [26452]; needs the simulator built (make -C test/sim).
set -euo pipefail
BENCH_SIM_PORT=${BENCH_SIM_PORT:-26452}
. "$(dirname "$0")/../lib.sh"
SIM=$BENCH_SIM_PORT

bench_dir park_check
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

sim_start park "$SIM"
check plain 127.0.0.1 --park --calls 30000 --inflight 512
check "close-every 7" 127.0.0.1 --park --calls 30000 --inflight 512 --close-every 7
check "maxconnects 64" 127.0.0.1 --park --calls 30000 --inflight 512 --maxconnects 64
check localhost localhost --park --calls 5000 --inflight 64
check no-reset 127.0.0.1 --park --no-reset --calls 30000 --inflight 512
# last: it terminates the simulator
check idle-close 127.0.0.1 --park --calls 5000 --inflight 512 --idle-close
