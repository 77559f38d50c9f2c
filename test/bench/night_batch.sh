#!/usr/bin/env bash
# test/bench/night_batch.sh: the seeds' Friday night (test/bench/night.sh)
# with provider batches (issue 45): the bulk providers sms_bulk and push
# take NIGHT_BATCH (100) promotions per call on their simulators' /batch,
# a due promotion waiting at most NIGHT_BATCH_WAIT_MS (100) ms for others
# to fill its batch (batch_wait), the OTPs and alerts one per call as
# before.  Everything else is
# night.sh's (its rig, load, measures and environment); the results are
# named night_batch_* (RESULT lines, the ROW tables night_batch_types and
# night_batch_calls, BENCH_OUT's night_batch_{promo,otp,alert}.dat), so
# that the page shows this night beside night.sh's.
#
#   bash test/bench/night_batch.sh
#
# About 15 minutes of offer at scale 1 and the drain; about 2 at 0.1.
set -euo pipefail
export NIGHT_BATCH=${NIGHT_BATCH:-100} NIGHT_BATCH_WAIT_MS=${NIGHT_BATCH_WAIT_MS:-100} NIGHT_RESULT_PREFIX=night_batch
exec bash "$(dirname "$0")/night.sh" "$@"
