#!/usr/bin/env bash
# test/bench/night_full.sh: the whole Friday night side by side, once:
# test/bench/night_peers.sh at scale 1 (5,000,000 promotions offered at
# 5,556 a second, OTPs and alerts beside them, through the TLS fronts),
# one round of notif_deliver with provider batches of 100 and one of PgQ +
# pgqd + Node one call per event, one after the other.  Everything is
# night_peers.sh's (rig, load, measures, ratios); the results are named
# night_full_* so that the page shows this run beside night_peers.sh's
# shorter rounds.  NIGHT_FULL_SYSTEMS="ndb nd pgq" adds notif_deliver one
# call per message (about 32 minutes more).
#
#   bash test/bench/night_full.sh
#
# About 55 minutes at scale 1 on 2 cores (the batches' night about 16,
# PgQ's about 37); BENCH_SCALE scales the promotions (NIGHT_FULL_PROMOS
# overrides them).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
export NIGHT_PEERS_PREFIX=night_full
export NIGHT_PEERS_PROMOS=${NIGHT_FULL_PROMOS:-$(bench_scale 5000000)}
export NIGHT_PEERS_ROUNDS=${NIGHT_FULL_ROUNDS:-1}
export NIGHT_PEERS_SYSTEMS=${NIGHT_FULL_SYSTEMS:-ndb pgq}
exec bash "$(dirname "$0")/night_peers.sh" "$@"
