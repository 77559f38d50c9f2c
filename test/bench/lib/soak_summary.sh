#!/usr/bin/env bash
# test/bench/lib/soak_summary.sh: what a soak's samples say over the hour
# (test/bench/soak.sh calls it at the end; by hand on a kept soak.dat).
#
#   bash test/bench/lib/soak_summary.sh SOAK_DAT SETTLE_MINUTES
#
# Prints RESULT lines, from the samples of soak.dat (columns as soak.sh
# writes them): the promotions finished per second (mean, least and most
# of the samples); the OTP latency p99 of the samples taken after
# SETTLE_MINUTES (least, median, most) and the most of all of them; the
# autovacuum runs on notif_job, notif_active and notif_attempt by the last
# sample; their dead tuples, the most of any sample after SETTLE_MINUTES
# and at the last one; the most file descriptors the bulk sender had open
# at a sample (a 14th column; older soak.dat files have none).  Rates and
# latencies as the samples print them.
set -euo pipefail
dat=$1
settle=$2
awk -v s="$settle" '
	function med(a, n,   i, j, t) {	# the lower median of a[1..n]
		for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
		return a[int((n + 1) / 2)]
	}
	!/^#/ && NF >= 13 {
		n++; r = $13 + 0; sum += r
		if (n == 1 || r < rmin) rmin = r
		if (n == 1 || r > rmax) rmax = r
		if (n == 1 || $12 + 0 > pall + 0) pall = $12
		if ($1 >= s) {
			m++; p[m] = $12
			for (c = 6; c <= 8; c++) if ($c + 0 > dmax[c]) dmax[c] = $c + 0
		}
		for (c = 6; c <= 11; c++) last[c] = $c
		if (NF >= 14 && $14 + 0 > fmax) fmax = $14 + 0
	}
	END {
		if (n == 0) { print "no samples in the file" > "/dev/stderr"; exit 1 }
		printf "RESULT soak_samples %d\n", n
		printf "RESULT soak_promo_per_s_mean %.0f\nRESULT soak_promo_per_s_min %d\nRESULT soak_promo_per_s_max %d\n", sum / n, rmin, rmax
		printf "RESULT soak_otp_p99_all_max_ms %s\n", pall
		if (m > 0) {
			pmin = p[1]; pmax = p[1]
			for (i = 2; i <= m; i++) { if (p[i] + 0 < pmin + 0) pmin = p[i]; if (p[i] + 0 > pmax + 0) pmax = p[i] }
			printf "RESULT soak_settled_samples %d\n", m
			printf "RESULT soak_otp_p99_min_ms %s\nRESULT soak_otp_p99_median_ms %s\nRESULT soak_otp_p99_max_ms %s\n", pmin, med(p, m), pmax
			printf "RESULT soak_job_dead_max %d\nRESULT soak_active_dead_max %d\nRESULT soak_attempt_dead_max %d\n", dmax[6], dmax[7], dmax[8]
		}
		printf "RESULT soak_job_dead_last %d\nRESULT soak_active_dead_last %d\nRESULT soak_attempt_dead_last %d\n", last[6], last[7], last[8]
		printf "RESULT soak_job_autovacuums %d\nRESULT soak_active_autovacuums %d\nRESULT soak_attempt_autovacuums %d\n", last[9], last[10], last[11]
		if (fmax > 0) printf "RESULT soak_bulk_fds_max %d\n", fmax
	}' "$dat"
