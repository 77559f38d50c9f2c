#!/usr/bin/env bash
# test/bench/majors.sh: the headline benchmarks on each PostgreSQL major of
# debian/pgversions, one after the other in one run (`make bench-majors`;
# not part of `make bench`, whose page is the machine's own major): the
# machine's own (15) here, 17 and 18 in their chroots (test/chroot, as
# `make test-matrix` left them: the extension built and installed there).
#
#   bench bulk enqueue      test/bench/enqueue_bulk.sh (ROWS: 1,000,000 x BENCH_SCALE)
#   single-row enqueue      test/bench/enqueue_single.sh
#   dispatch and its limit  test/bench/dispatch.sh (MAJORS_DISPATCH_JOBS [20000], 1 round)
#
# Prints each major's RESULT lines, then one markdown table with a column
# per major (rows: the results that every major printed), to read side by
# side (doc/benchmarks.md is this machine's own major).  BENCH_SCALE
# [0.1]; MAJORS ["15 17 18"].  Root only (chroot).  About 4 minutes per major
# at the default scale.
set -euo pipefail
cd "$(dirname "$0")/../.."
export BENCH_SCALE=${BENCH_SCALE:-0.1}
MAJORS=${MAJORS:-$(grep -E '^[0-9]+$' debian/pgversions | tr '\n' ' ')}
jobs=${MAJORS_DISPATCH_JOBS:-20000}
. release/lib.sh
host=$(host_major)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# what each major runs, from the tree's root
inner="make -s -C test/sim >/dev/null && make -s >/dev/null && make -s install >/dev/null &&
	bash test/bench/enqueue_bulk.sh && bash test/bench/enqueue_single.sh &&
	DISPATCH_ROUNDS=1 bash test/bench/dispatch.sh $jobs"
for major in $MAJORS; do
	echo "== PostgreSQL $major"
	if [ "$major" = "$host" ]; then
		bash -c "$inner" | tee "$out/$major"
	else
		bash test/chroot --tree /build/notif_deliver_bench "$major" \
			env BENCH_SCALE="$BENCH_SCALE" bash -c "$inner" | tee "$out/$major"
	fi
done

echo "== side by side (BENCH_SCALE=$BENCH_SCALE, $(nproc) cores, $(date -u +%Y-%m-%d))"
perl -e '
	my @majors = @ARGV[1 .. $#ARGV];
	my (%v, @keys, %seen);
	for my $m (@majors) {
		open(my $f, "<", "$ARGV[0]/$m") or die;
		while (<$f>) {
			next unless /^RESULT (\S+) (\S+)/;
			$v{$1}{$m} = $2;
			push @keys, $1 unless $seen{$1}++;
		}
	}
	print "| result | ", join(" | ", map { "PostgreSQL $_" } @majors), " |\n";
	print "|---|", join("|", map { "---:" } @majors), "|\n";
	for my $k (@keys) {
		next if grep { !defined $v{$k}{$_} } @majors;
		print "| $k | ", join(" | ", map { $v{$k}{$_} } @majors), " |\n";
	}' "$out" $MAJORS
