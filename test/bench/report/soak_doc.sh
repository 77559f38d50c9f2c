#!/usr/bin/env bash
# test/bench/report/soak_doc.sh: keep a soak's run (`make soak` calls it
# through soak.sh's SOAK_DOC=1): its samples and results into
# test/bench/results/ (soak.dat, soak.txt), its chart doc/img/soak.png
# (test/bench/report/charts_soak.sh), then doc/benchmarks.md written again
# from every script's kept results (test/bench/report/report.pl).  make
# bench reads soak.txt there as well and leaves soak.png alone, so that
# the soak's numbers stay on the page until the next make soak.
#
#   bash test/bench/report/soak_doc.sh SOAK_OUT     the folder soak.sh wrote them to
set -euo pipefail
src=$1
cd "$(dirname "$0")/../../.."
store=${BENCH_STORE:-test/bench/results}
[ -s "$src/soak.dat" ] && [ -s "$src/soak_results.txt" ] || { echo "$src: no soak.dat or soak_results.txt" >&2; exit 1; }
mkdir -p "$store" doc/img
cp "$src/soak.dat" "$store/soak.dat"
cp "$src/soak_results.txt" "$store/soak.txt"
settle=$(sed -n 's/^soak RESULT soak_settle_minutes \(.*\)$/\1/p' "$store/soak.txt")
bash test/bench/report/charts_soak.sh "$store/soak.dat" doc/img "$settle" >/dev/null
perl test/bench/report/report.pl test/bench/report/benchmarks.md.in "$store" >doc/benchmarks.md.tmp
mv doc/benchmarks.md.tmp doc/benchmarks.md
echo "== wrote $store/soak.dat, $store/soak.txt, doc/img/soak.png and doc/benchmarks.md"
