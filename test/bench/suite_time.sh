#!/usr/bin/env bash
# test/bench/suite_time.sh: how long `make test` takes here, a measurement
# (not a test, and not part of `make bench`).
#
#   bash test/bench/suite_time.sh [JOBS...]
#
# Runs `make test` once per JOBS value (NOTIF_TEST_JOBS: TAP files at a
# time; default: test/run's own), and prints for each its wall time, the
# TAP part's wall time, the sum of the TAP files' times, and the slowest
# TAP files (SUITE_TIME_SLOWEST of them, default 10), from prove's --timer
# lines.  `bash test/bench/suite_time.sh 1 4` compares one at a time with
# four.  Keeps each run's output in SUITE_TIME_OUT (default a new folder
# in /tmp).  A failed run is reported as such and the others still run;
# the exit status is 1 if any failed.  Root or sudo, as make test.
set -euo pipefail
cd "$(dirname "$0")/../.."

out=${SUITE_TIME_OUT:-$(mktemp -d /tmp/notif_suite_time.XXXXXX)}
mkdir -p "$out"
[ $# -gt 0 ] || set -- default
status=0
for jobs in "$@"; do
	log="$out/make_test.j$jobs.log"
	start=$(date +%s)
	rc=0
	if [ "$jobs" = default ]; then
		make test >"$log" 2>&1 || rc=$?
	else
		NOTIF_TEST_JOBS=$jobs make test >"$log" 2>&1 || rc=$?
	fi
	wall=$(($(date +%s) - start))
	[ $rc -eq 0 ] || status=1
	echo "== make test, TAP jobs $jobs: $([ $rc -eq 0 ] && echo pass || echo "FAILED (exit $rc)"), $((wall / 60)) min $((wall % 60)) s (log: $log)"
	# prove's summary: "Files=38, Tests=1585, 225 wallclock secs ..."
	sed -n 's/^Files=\([0-9]*\), Tests=[0-9]*, *\([0-9]*\) wallclock secs.*/   TAP: \1 files, \2 s wall/p' "$log" | head -n 1
	# --timer lines: "[13:37:11] test/t/012_provider_slots.pl ... ok    12380 ms ..."
	grep -E '^\[[0-9:]+\] test/t/[^ ]+\.pl \.+ ok +[0-9]+ ms' "$log" |
		awk '{ printf "%d %s\n", $5, $2 }' | sort -rn >"$out/tap_times.j$jobs" || true
	awk '{ s += $1 } END { if (NR) printf "   sum of the TAP files: %d s (%d files)\n", s / 1000, NR }' "$out/tap_times.j$jobs"
	echo "   slowest:"
	head -n "${SUITE_TIME_SLOWEST:-10}" "$out/tap_times.j$jobs" | awk '{ printf "     %6.1f s  %s\n", $1 / 1000, $2 }'
done
exit $status
