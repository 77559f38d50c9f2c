#!/usr/bin/env bash
# test/compat_check.sh: src/core/pg_compat.h's build-time checks do fail, and
# name what changed (test/run runs it after the build; about 1 s).  Three
# probes compiled against the server's headers (pg_config, or $PG_CONFIG):
#   - a signature this major does not have for an executor function the
#     fast enqueue path calls: the build fails naming the function;
#   - a major after the tested ones: the build fails naming what to check;
#   - a libcurl before 7.85 (src/http/http.h): the build fails naming the
#     version it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
pg_config=${PG_CONFIG:-pg_config}
inc=$("$pg_config" --includedir-server)
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
status=0

# probe NAME EXPECTED WHAT: $probe/NAME.c must fail to compile, and say EXPECTED
probe()
{
	local name=$1 expected=$2 what=$3 out
	if out=$(gcc -c -Isrc -I"$inc" "$probe/$name.c" -o "$probe/$name.o" 2>&1); then
		echo "not ok - $what: it compiled" >&2
		status=1
	elif ! grep -qF "$expected" <<<"$out"; then
		echo "not ok - $what: the build failed without saying \"$expected\":" >&2
		echo "$out" >&2
		status=1
	else
		echo "ok - $what: the build fails, saying \"$expected\""
	fi
}

cat >"$probe/signature.c" <<'C'
#include "postgres.h"
#include "executor/executor.h"
#include "core/pg_compat.h"
/* one argument more than any supported major's ExecCheckIndexConstraints */
NOTIF_EXPECT_SIGNATURE(ExecCheckIndexConstraints,
					   bool (*) (ResultRelInfo *, TupleTableSlot *, EState *,
								 ItemPointer, ItemPointer, ItemPointer, List *));
C
probe signature "changed ExecCheckIndexConstraints: port it in src/core/pg_compat.h" \
	"an executor function whose signature changed"

cat >"$probe/future.c" <<'C'
#include "postgres.h"
#undef PG_VERSION_NUM
#define PG_VERSION_NUM 190000
#include "core/pg_compat.h"
C
probe future "not on this major: check src/core/pg_compat.h (ExecInsertIndexTuples" \
	"a major after 18"

cat >"$probe/libcurl.c" <<'C'
#include "postgres.h"
#include <curl/curl.h>
#undef LIBCURL_VERSION_NUM
#define LIBCURL_VERSION_NUM 0x075400
#include "http/http.h"
C
probe libcurl "notif_deliver needs libcurl 7.85.0 or later" "a libcurl before 7.85"
exit $status
