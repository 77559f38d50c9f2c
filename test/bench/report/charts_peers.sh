#!/usr/bin/env bash
# test/bench/report/charts_peers.sh: draw the charts of doc/benchmarks-peers.md with
# gnuplot from a benchmark run's results folder (test/bench/run calls it
# when test/bench/peers.sh ran; the other charts are charts.sh's).  A chart
# whose data the run did not produce is left as it was.
#
#   bash test/bench/report/charts_peers.sh RESULTS_DIR OUT_DIR
#
#   peers_throughput.png  jobs/s of each system, provider at 0 ms and at 50 ms
#   peers_latency.png     OTP latency p50 and p99 of each system during the flood
set -euo pipefail
res=$1
out=$2
data=$res/data
mkdir -p "$out"
term="set terminal pngcairo size 900,480 font 'DejaVu Sans,10' noenhanced"
# (a chart whose data this run did not produce is left as it is)

if [ -s "$data/peers_tput.dat" ]; then
	# one line per system: index, name, jobs/s at 0 ms, at 50 ms
	awk -F'\t' '!($1 in i) { i[$1] = ++n; name[n] = $1 } { v[$1, $2] = $3 }
		END { for (k = 1; k <= n; k++) printf "%d\t\"%s\"\t%s\t%s\n", k, name[k], v[name[k], 0], v[name[k], 50] }' \
		"$data/peers_tput.dat" >"$data/peers_tput_chart.dat"
	gnuplot <<GNUPLOT
$term
set output '$out/peers_throughput.png'
set title 'Drain rate: the same jobs and provider simulator, one run (higher is better)'
set ylabel 'jobs/s'
set xtics rotate by -15
set style fill solid 0.6 border -1
set boxwidth 0.35
set key top right
set grid ytics
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set xrange [0.4:*]
plot '$data/peers_tput_chart.dat' using (\$1-0.18):3:xtic(2) with boxes lc rgb '#1b9e77' title 'provider at 0 ms', \
     '' using (\$1+0.18):4 with boxes lc rgb '#7570b3' title 'provider at 50 ms', \
     '' using (\$1-0.18):3:(sprintf('%.0f', \$3)) with labels offset 0,0.8 notitle, \
     '' using (\$1+0.18):4:(sprintf('%.0f', \$4)) with labels offset 0,0.8 notitle
GNUPLOT
fi

if [ -s "$data/peers_latency.dat" ]; then
	awk -F'\t' '{ printf "%d\t\"%s\"\t%s\t%s\n", NR, $1, $2, $3 }' "$data/peers_latency.dat" \
		>"$data/peers_latency_chart.dat"
	gnuplot <<GNUPLOT
$term
set output '$out/peers_latency.png'
set title 'OTP latency, enqueue commit to provider, while a flood drains (lower is better; log scale)'
set ylabel 'ms'
set xtics rotate by -15
set logscale y
set style fill solid 0.6 border -1
set boxwidth 0.35
set key top left
set grid ytics
set xrange [0.4:*]
plot '$data/peers_latency_chart.dat' using (\$1-0.18):3:xtic(2) with boxes lc rgb '#1b9e77' title 'p50', \
     '' using (\$1+0.18):4 with boxes lc rgb '#d95f02' title 'p99', \
     '' using (\$1-0.18):3:(sprintf('%.1f', \$3)) with labels offset 0,0.8 notitle, \
     '' using (\$1+0.18):4:(sprintf('%.1f', \$4)) with labels offset 0,0.8 notitle
GNUPLOT
fi
ls "$out"/peers_*.png 2>/dev/null || true
