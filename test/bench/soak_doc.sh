#!/usr/bin/env bash
# test/bench/soak_doc.sh: keep a soak's run in doc/ (`make soak` calls it
# through soak.sh's SOAK_DOC=1): its samples and results into doc/data/
# (soak.dat, soak_results.txt), its chart doc/img/soak.png
# (test/bench/charts_soak.sh) and the soak section of doc/benchmarks.md
# filled from them (test/bench/report.pl --section soak --into).  make
# bench fills that section from doc/data/soak_results.txt as well, and
# leaves soak.png alone, so that the soak's numbers survive its
# regenerations until the next make soak.
#
#   bash test/bench/soak_doc.sh SOAK_OUT     the folder soak.sh wrote them to
set -euo pipefail
src=$1
cd "$(dirname "$0")/../.."
[ -s "$src/soak.dat" ] && [ -s "$src/soak_results.txt" ] || { echo "$src: no soak.dat or soak_results.txt" >&2; exit 1; }
mkdir -p doc/data doc/img
[ "$(cd "$src" && pwd)" = "$(cd doc/data && pwd)" ] || cp "$src/soak.dat" "$src/soak_results.txt" doc/data/
settle=$(sed -n 's/^soak RESULT soak_settle_minutes \(.*\)$/\1/p' doc/data/soak_results.txt)
bash test/bench/charts_soak.sh doc/data/soak.dat doc/img "$settle" >/dev/null
perl test/bench/report.pl --section soak --into doc/benchmarks.md doc/benchmarks.md.in doc/data/soak_results.txt \
	>doc/benchmarks.md.tmp
mv doc/benchmarks.md.tmp doc/benchmarks.md
echo "== wrote doc/data/soak.dat, doc/data/soak_results.txt, doc/img/soak.png and the soak section of doc/benchmarks.md"
