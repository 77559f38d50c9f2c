#!/usr/bin/env bash
# test/demo_interrupt.sh: `make demo` interrupted as Ctrl-C does it (SIGINT
# to its whole process group) in each window of its life leaves nothing:
# no postmaster or backend of its cluster, no provider simulator, no
# folder in /tmp.  The windows, each observed before the interrupt (never a
# fixed sleep): initdb running; the server starting (its pid file there,
# the demo not yet past pg_ctl); the 100,000-promotion enqueue running;
# the drain (promotions being sent).  Run by test/run (`make test`), as
# root, after the extension is installed.  About 40 seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
. test/lib/cluster.sh

failures=0
fail() { echo "not ok - $*"; failures=$((failures + 1)); }

# wait until a command succeeds, up to 60 s; false if it never does
await() {
	local i
	for ((i = 0; i < 600; i++)); do
		"$@" && return 0
		sleep 0.1
	done
	return 1
}

demo_dirs() { ls -d /tmp/notif_demo.* 2>/dev/null; }
demo_dir() { demo_dirs | grep -vxF -f <(printf '%s\n' $before) | head -n 1; }
# what a demo started and left: a process of its cluster (every one works
# in the data folder), or the simulator on the demo's port
leftovers() {
	local p found=1
	for p in $(pgrep -u postgres) $(pgrep -f -- 'provider_sim --port 18090'); do
		case "$(readlink "/proc/$p/cwd" 2>/dev/null)" in
			/tmp/notif_demo.*) ;;
			*) pgrep -f -- 'provider_sim --port 18090' | grep -qx "$p" || continue ;;
		esac
		echo "$p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
		found=0
	done
	return $found
}
no_leftovers() { ! leftovers >/dev/null; }

# the windows: the state to wait for before the interrupt
in_initdb() { d=$(demo_dir) && [ -n "$d" ] && [ -f "$d/initdb.log" ] && [ ! -f "$d/data/postmaster.pid" ]; }
# (at the first sight of the pid file: pg_ctl start is still waiting for
# the server to accept connections, unless the poll came late)
in_start() { d=$(demo_dir) && [ -n "$d" ] && [ -f "$d/data/postmaster.pid" ]; }
in_enqueue() { grep -q '== enqueue' "$log"; }
in_drain() {
	d=$(demo_dir) && [ -n "$d" ] &&
		[ "$(PGHOST=$d PGPORT=55433 cluster_psql -U postgres -d postgres -At \
			-c "SELECT count(*) FROM notif_job WHERE kind = 'promo' AND status = 'sent'" 2>/dev/null)" -gt 100 ] 2>/dev/null
}

if leftovers >/dev/null; then
	echo "test/demo_interrupt.sh: a demo is running already; not run" >&2
	exit 1
fi
for window in initdb start enqueue drain; do
	before=$(demo_dirs)
	log=$(mktemp)
	# a process group of its own, as a shell's job: Ctrl-C goes to all of it
	setsid bash test/demo --burst 100000 >"$log" 2>&1 &
	pid=$!
	if ! await "in_$window"; then
		fail "$window: the window was never observed"
		sed 's/^/# /' "$log"
		kill -KILL -- -"$pid" 2>/dev/null
	else
		kill -INT -- -"$pid"
	fi
	# the demo cleans up and exits (within 30 s)
	for ((i = 0; i < 300; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$pid" 2>/dev/null; then
		fail "$window: the demo did not exit within 30 s of the interrupt"
		kill -KILL -- -"$pid" 2>/dev/null
	fi
	wait "$pid" 2>/dev/null
	# what it started is gone (a postmaster's children leave within a second or so)
	if ! await no_leftovers; then
		fail "$window: processes left: $(leftovers | tr '\n' ';')"
		leftovers | awk '{ print $1 }' | xargs -r kill -KILL
	fi
	left=$(demo_dir)
	if [ -n "$left" ]; then
		fail "$window: its folder $left was left"
		rm -rf "$left"
	fi
	[ "$failures" -eq 0 ] && echo "ok - interrupted during $window: nothing left"
	rm -f "$log"
done
exit $((failures > 0))
