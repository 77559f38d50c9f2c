#!/usr/bin/env bash
# test/bench/semantics_batch.sh: the delivery guarantee in numbers with
# provider batches (issue 45), beside test/bench/semantics.sh's rows
# without.  The same N at_most_once and N at_least_once jobs (3 tries),
# the provider on the simulator's /batch in calls of up to BATCH messages:
# each call held past the timeout with probability p, and then each of
# its messages delivered all the same with probability q, drawn per
# message.  The means are semantics.sh's; the 4-sigma band is widened by
# the batches' design effect (sum of n^2 over sum of n, the first tries'
# batch sizes), and a count outside it fails the script.  Rows in the ROW
# table semantics_batch, results sem_q<q>_s<seed>_batch<n>_*.
#
#   bash test/bench/semantics_batch.sh
#
# Environment: SEM_BATCH_RUNS ["0.5:1:100 0.9:1:100"] (q:seed:batch_max);
# SEM_JOBS [1,000,000 x BENCH_SCALE]: ten times semantics.sh's, since a
# run holds only about N p / 100 batches; the rest as semantics.sh (SEM_P).
# About two minutes a run at scale 1.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
export SEM_JOBS=${SEM_JOBS:-$(bench_scale 1000000)}
export SEM_RUNS= SEM_KILL_RUNS= SEM_BATCH_RUNS=${SEM_BATCH_RUNS-0.5:1:100 0.9:1:100}
exec bash "$(dirname "$0")/semantics.sh" "$@"
