#!/usr/bin/env bash
# test/bench/report/charts.sh: draw the PNG charts of doc/benchmarks.md with gnuplot
# from a benchmark run's results folder (test/bench/run calls it).  A chart
# whose data the run did not produce is left as it was.
#
#   bash test/bench/report/charts.sh RESULTS_DIR OUT_DIR
#
#   semantics.png   lost (at_most_once) and duplicated (at_least_once), theory with its 4-sigma band vs measured
#   dispatch.png    dispatch rate by provider latency (from the dispatch_<N>ms_jobs_per_s results)
#   flood.png       OTP latency during the promotion flood, and the promotions drained
#   idle_latency.png  the distribution of idle OTP latency
# (soak.png is make soak's, drawn by charts_soak.sh: left alone here)
set -euo pipefail
res=$1
out=$2
data=$res/data
mkdir -p "$out"
term="set terminal pngcairo size 900,480 font 'DejaVu Sans,10'"

# (a chart whose data this run did not produce is left as it is: the
# page shows the last run of each script, test/bench/results/)

if [ -s "$data/semantics.dat" ]; then
	# one group per run: at_most_once lost, at_least_once duplicated
	awk -F'\t' '$2 == "amo" { a[$1] = $3 "\t" $4 "\t" $5; order[++n] = $1 }
		$2 == "alo" { b[$1] = $6 "\t" $7 "\t" $8 }
		END { for (i = 1; i <= n; i++) print i "\t\"" order[i] "\"\t" a[order[i]] "\t" b[order[i]] }' \
		"$data/semantics.dat" >"$data/semantics_chart.dat"
	groups=$(wc -l <"$data/semantics_chart.dat")
	gnuplot <<EOF
$term
set output '$out/semantics.png'
set title 'Delivery semantics: theory (with its 4-sigma band) vs the provider simulator''s ledger'
set ylabel 'messages'
set style fill solid 0.6 border -1
set boxwidth 0.18
set key outside bottom center horizontal
set xtics rotate by -20
set grid ytics
set yrange [0:*]
set xrange [0.5:$groups + 0.5]
plot '$data/semantics_chart.dat' using (\$1-0.3):3:4 with yerrorbars lc rgb '#555555' pt 7 title 'at\_most\_once lost, theory', \
     '' using (\$1-0.1):5:xtic(2) with boxes lc rgb '#d95f02' title 'at\_most\_once lost, measured', \
     '' using (\$1+0.1):6:7 with yerrorbars lc rgb '#555555' pt 5 title 'at\_least\_once duplicated, theory', \
     '' using (\$1+0.3):8 with boxes lc rgb '#1b9e77' title 'at\_least\_once duplicated, measured'
EOF
fi

if grep -q 'RESULT dispatch_[0-9]*ms_jobs_per_s ' "$res/results.txt"; then
	sed -n 's/^[^ ]* RESULT dispatch_\([0-9]*\)ms_jobs_per_s \([0-9.]*\).*/\1 \2/p' "$res/results.txt" |
		sort -n | awk '{ printf "%d\t\"%s ms\"\t%s\n", NR, $1, $2 }' >"$data/dispatch_chart.dat"
	gnuplot <<EOF
$term
set output '$out/dispatch.png'
set title 'Dispatch rate of one lane by provider latency (at\_least\_once jobs)'
set ylabel 'jobs/s'
set xlabel 'provider latency'
set style fill solid 0.6 border -1
set boxwidth 0.5
set grid ytics
set yrange [0:*]
set xrange [0.3:*]
plot '$data/dispatch_chart.dat' using 1:3:xtic(2) with boxes lc rgb '#7570b3' notitle, \
     '' using 1:3:(sprintf('%.0f', \$3)) with labels offset 0,1 notitle
EOF
fi

if [ -s "$data/flood_otp.dat" ]; then
	n=$(sed -n 's/^[^ ]* RESULT flood_promotions \([0-9]*\).*/\1/p' "$res/results.txt")
	gnuplot <<EOF
$term
set output '$out/flood.png'
set title 'OTP latency (enqueue commit to provider) while ${n:-the} promotions drain'
set xlabel 'seconds since the flood began'
set ylabel 'OTP latency (ms)'
set y2label 'promotions finished'
set ytics nomirror
set y2tics
set grid
set key top left
plot '$data/flood_otp.dat' using 1:2 with points pt 7 ps 0.4 lc rgb '#d95f02' title 'OTP latency', \
     '$data/flood_promo.dat' using 1:2 axes x1y2 with lines lw 2 lc rgb '#1b9e77' title 'promotions finished'
EOF
fi

if [ -s "$data/idle_latency.dat" ]; then
	sort -n "$data/idle_latency.dat" | awk '{ a[NR] = $1 } END { for (i = 1; i <= NR; i++) print a[i], i / NR * 100 }' \
		>"$data/idle_cdf.dat"
	gnuplot <<EOF
$term
set output '$out/idle_latency.png'
set title 'Idle OTP latency, enqueue commit to provider: distribution'
set xlabel 'latency (ms)'
set ylabel 'share of messages at or below (%)'
set grid
set yrange [0:100]
plot '$data/idle_cdf.dat' using 1:2 with lines lw 2 lc rgb '#7570b3' notitle
EOF
fi
ls "$out"/*.png 2>/dev/null || true
