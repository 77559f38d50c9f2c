# test/lib/installcheck.sh: `make installcheck` on throwaway clusters, from
# a root script or not (sourced by test/run and test/upgrade/inner).
# pg_regress and PostgreSQL::Test::Cluster run initdb, never as root: they
# run in a copy owned by the test user ("postgres" for root, else oneself),
# so that the checkout keeps its owner.
#
#   installcheck_copy TOP    copy the tree TOP into a new folder, $IC_WORK/src
#                            (removed when the script exits)
#   installcheck ARGS...     make installcheck ARGS there, as the test user;
#                            on failure, prints regression.diffs and the end
#                            of each TAP log, and keeps in IC_FAILED the
#                            checks that failed (for a summary at the end
#                            of a long run); returns make's status

installcheck_copy()
{
	IC_WORK=$(mktemp -d /tmp/notif_deliver_test.XXXXXX)
	trap 'rm -rf "$IC_WORK"' EXIT
	cp -a "$1/." "$IC_WORK/src"
	IC_AS_USER=()
	if [ "$(id -u)" = 0 ]; then
		chown -R postgres "$IC_WORK"
		IC_AS_USER=(runuser -u postgres --)
	fi
}

installcheck()
{
	# an output file per call: test/run runs pg_regress and TAP side by side
	local status=0 f out
	out=$(mktemp "$IC_WORK/installcheck.XXXXXX")
	{
		(cd "$IC_WORK/src" && TMPDIR="$IC_WORK" "${IC_AS_USER[@]}" make installcheck "$@") 2>&1 &&
			echo 0 >"$out.rc" || echo $? >"$out.rc"
	} | tee "$out"
	status=$(cat "$out.rc")
	if [ $status -ne 0 ]; then
		echo "== FAILED: diagnostics"
		[ -f "$IC_WORK/src/regression.diffs" ] && cat "$IC_WORK/src/regression.diffs"
		for f in "$IC_WORK"/src/tmp_check/log/*; do
			[ -f "$f" ] || continue
			echo "---- $f"
			tail -n 60 "$f"
		done
		# pg_regress's failed tests, prove's summary, each failed check
		IC_FAILED=$(
			{
				grep -E '^not ok|^# +(Failed test|got:|expected:|timed out)|Wstat|^ +Failed tests?:' "$out"
				grep -H -E '^\[[0-9:.]+\]\([0-9.]+s\) not ok' "$IC_WORK"/src/tmp_check/log/regress_log_* 2>/dev/null |
					sed -e 's|^.*/regress_log_||' -e 's/:\[[0-9:.]*\]([0-9.]*s) /: /'
			} | awk '!seen[$0]++' | head -n 40
		) || true
		IC_FAILED=${IC_FAILED:-"make installcheck exited $status (no failed check found in its logs)"}
	fi
	return $status
}
