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
#                            of each TAP log; returns make's status

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
	local status=0 f
	(cd "$IC_WORK/src" && TMPDIR="$IC_WORK" "${IC_AS_USER[@]}" make installcheck "$@") || status=$?
	if [ $status -ne 0 ]; then
		echo "== FAILED: diagnostics"
		[ -f "$IC_WORK/src/regression.diffs" ] && cat "$IC_WORK/src/regression.diffs"
		for f in "$IC_WORK"/src/tmp_check/log/*; do
			[ -f "$f" ] || continue
			echo "---- $f"
			tail -n 60 "$f"
		done
	fi
	return $status
}
