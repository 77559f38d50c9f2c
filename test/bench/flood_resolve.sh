#!/usr/bin/env bash
# test/bench/flood_resolve.sh: flood.sh with the 1.3 means of resolving the
# unknown on (issue 31): the bulk provider's dedup_window (promotions'
# ambiguous calls retried in their lane), the OTP provider's status lookup
# and the OTP type's resolve_wait.  Run by `make bench` right after
# flood.sh, so that the OTP latency and expired count of the two sit side
# by side.  RESULT names start with flood_resolve_.  Environment: as
# flood.sh.
set -euo pipefail
FLOOD_RESOLVE=1 exec bash "$(dirname "$0")/flood.sh"
