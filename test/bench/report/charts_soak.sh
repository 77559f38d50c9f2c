#!/usr/bin/env bash
# test/bench/report/charts_soak.sh: draw the soak's chart of doc/benchmarks.md with
# gnuplot from a soak.dat (test/bench/soak.sh writes it; `make soak` keeps
# it in test/bench/results/ and calls this).  Not part of `make bench`, whose
# charts.sh leaves soak.png alone.
#
#   bash test/bench/report/charts_soak.sh SOAK_DAT OUT_DIR [SETTLE_MINUTES]
#
#   soak.png   above: the sizes of notif_job (heap), its indexes, notif_active
#              and notif_attempt over the minutes; below: the OTP latency p99
#              of each minute and the promotions finished per second.  A
#              dashed line at SETTLE_MINUTES (the first retention period and
#              a purge: where the level check starts), when given.
set -euo pipefail
dat=$1
out=$2
settle=${3:-}
mkdir -p "$out"
[ -s "$dat" ] || { echo "$dat: no samples" >&2; exit 1; }
marker=
[ -z "$settle" ] || marker="set arrow 1 from $settle, graph 0 to $settle, graph 1 nohead dt 2 lc rgb '#888888'"
gnuplot <<EOF
set terminal pngcairo size 900,720 font 'DejaVu Sans,10'
set output '$out/soak.png'
set multiplot layout 2,1 title 'The soak: an hour at a steady rate with a short retention'
set grid
set key outside right center vertical
set lmargin at screen 0.09
set rmargin at screen 0.72
set xrange [0:*]
$marker
set title 'Sizes'
set ylabel 'MB'
set yrange [0:*]
plot '$dat' using 1:(\$2/1024) with linespoints pt 7 ps 0.4 lw 2 lc rgb '#1b9e77' title 'notif\_job heap', \
     '' using 1:(\$3/1024) with linespoints pt 7 ps 0.4 lw 2 lc rgb '#d95f02' title 'notif\_job indexes', \
     '' using 1:(\$4/1024) with linespoints pt 7 ps 0.4 lw 2 lc rgb '#7570b3' title 'notif\_active', \
     '' using 1:(\$5/1024) with linespoints pt 7 ps 0.4 lw 2 lc rgb '#e7298a' title 'notif\_attempt'
set title 'OTP latency and the rate'
set xlabel 'minutes'
set ylabel 'OTP latency p99 of the minute (ms)'
set y2label 'promotions finished per second'
set ytics nomirror
set y2tics
set y2range [0:*]
plot '$dat' using 1:12 with linespoints pt 7 ps 0.4 lw 2 lc rgb '#d95f02' title 'OTP p99', \
     '' using 1:13 axes x1y2 with linespoints pt 5 ps 0.4 lw 2 lc rgb '#1b9e77' title 'promotions/s'
unset multiplot
EOF
echo "$out/soak.png"
