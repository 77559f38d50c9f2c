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

# wait until a window is seen (polled every 20 ms), while the demo runs
# and at most 60 s; false if it never is
await_window() {
	local i
	for ((i = 0; i < 3000; i++)); do
		"$@" && return 0
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.02
	done
	return 1
}

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
	for p in $(pgrep -u postgres) $(pgrep -f -- 'provider_sim --port 18090( |$)'); do
		case "$(readlink "/proc/$p/cwd" 2>/dev/null)" in
			/tmp/notif_demo.*) ;;
			*) pgrep -f -- 'provider_sim --port 18090( |$)' | grep -qx "$p" || continue ;;
		esac
		echo "$p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
		found=0
	done
	return $found
}
no_leftovers() { ! leftovers >/dev/null; }

# the windows: the state to wait for before the interrupt.  initdb and the
# server's start are short: the step's own process must still be running
# when the interrupt goes (a window missed is tried again, up to 5 times)
in_initdb() {
	d=$(demo_dir) && [ -n "$d" ] && [ -f "$d/initdb.log" ] && [ ! -f "$d/data/postmaster.pid" ] &&
		pgrep -f -- "initdb -D $d/data" >/dev/null
}
in_start() {
	d=$(demo_dir) && [ -n "$d" ] && [ -f "$d/data/postmaster.pid" ] &&
		pgrep -f -- "pg_ctl -D $d/data -l .* start" >/dev/null
}
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
	for attempt in 1 2 3 4 5; do
		before=$(demo_dirs)
		log=$(mktemp)
		# a process group of its own, as a shell's job: Ctrl-C goes to all of
		# it.  (A script's background command starts with SIGINT ignored, and
		# bash cannot trap a signal ignored at its start: the demo gets it
		# back, as from a terminal.)
		setsid env --default-signal=INT bash test/demo --burst 100000 >"$log" 2>&1 &
		pid=$!
		hit=0
		if await_window "in_$window"; then
			kill -INT -- -"$pid"
			hit=1
		else
			# missed (the step ended between two looks): the demo is
			# interrupted anyway, and must clean up as well
			kill -INT -- -"$pid" 2>/dev/null
		fi
		# the demo cleans up and exits (within 30 s)
		for ((i = 0; i < 300; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$pid" 2>/dev/null; then
			fail "$window: the demo did not exit within 30 s of the interrupt"
			# where it is stuck: its processes (state, kernel wait) and its output
			ps -o pid,ppid,stat,wchan:24,etime,args -g "$pid" | sed 's/^/#   /'
			tail -n 15 "$log" | sed 's/^/#   log: /'
			kill -KILL -- -"$pid" 2>/dev/null
		fi
		rc=0
		wait "$pid" 2>/dev/null || rc=$?
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
		# the interrupt ended it: through its trap (130), or through the
		# failure of the psql it interrupted; 0 would mean it went on to its
		# end (as when bash ignored a Ctrl-C that initdb survived)
		if [ "$hit" = 1 ] && [ "$rc" = 0 ]; then
			fail "$window: the demo ran to its end: the interrupt did not stop it"
			sed 's/^/# /' "$log"
		fi
		rm -f "$log"
		[ "$hit" = 1 ] || [ "$failures" -gt 0 ] && break
		echo "# $window: the step ended before it was seen; again"
	done
	if [ "$failures" -eq 0 ] && [ "$hit" = 1 ]; then
		echo "ok - interrupted during $window: nothing left"
	elif [ "$failures" -eq 0 ]; then
		fail "$window: the step ended before the interrupt in 5 tries"
	fi
done
exit $((failures > 0))
