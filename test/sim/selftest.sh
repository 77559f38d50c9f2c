#!/usr/bin/env bash
#
# selftest.sh: end-to-end self-test of provider_sim (provider_sim.c here).
#
# Starts the simulator on a free loopback port, exercises every feature
# with the curl command line tool (and bash's /dev/tcp where raw HTTP is
# needed: split heads, pipelining, malformed requests), and checks the
# answers, the ledger and the stats.  Exits non-zero on any failure; the
# last line printed is "N passed, M failed".
#
# Environment:
#   SIM          the binary (default: provider_sim next to this script,
#                built with make when missing)
#   SIM_WRAPPER  a command to run it under, e.g.
#                "valgrind --leak-check=full --error-exitcode=99"
#                (a non-zero exit of the simulator then fails the test)
#
set -u
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SIM=${SIM:-$HERE/provider_sim}
SIM_WRAPPER=${SIM_WRAPPER:-}
TMP=$(mktemp -d)
PASSED=0
FAILED=0
SIM_PID=
PORT=
BASE=

if [ ! -x "$SIM" ]; then
	make -s -C "$HERE" OUT="$SIM" >&2 || { echo "cannot build $SIM" >&2; exit 1; }
fi
command -v curl >/dev/null || { echo "curl is needed" >&2; exit 1; }

cleanup()
{
	[ -n "$SIM_PID" ] && kill -KILL "$SIM_PID" 2>/dev/null
	jobs -p | xargs -r kill 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT

# ---------------------------------------------------------------- helpers

pass() { PASSED=$((PASSED + 1)); echo "ok - $1"; }
fail() { FAILED=$((FAILED + 1)); echo "not ok - $1"; }

# is GOT EXPECTED NAME
is()
{
	if [ "$1" = "$2" ]; then
		pass "$3"
	else
		fail "$3"
		printf '#   got:      %s\n#   expected: %s\n' "$1" "$2"
	fi
}

# like GOT EXTENDED_REGEX NAME
like()
{
	if printf '%s' "$1" | grep -Eq -- "$2"; then
		pass "$3"
	else
		fail "$3"
		printf '#   got:      %s\n#   expected: /%s/\n' "$1" "$2"
	fi
}

# ok COMMAND... : passes when the command succeeds; name in $OK_NAME
ok() { if "$@"; then pass "$OK_NAME"; else fail "$OK_NAME"; fi; }

# start_sim ARGS...: start on a free port, wait for /health
start_sim()
{
	local log=$TMP/sim.$RANDOM.log i
	$SIM_WRAPPER "$SIM" --port 0 "$@" 2>"$log" &
	SIM_PID=$!
	SIM_LOG=$log
	for i in $(seq 1 300); do
		PORT=$(sed -n 's/^provider_sim listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$log")
		if [ -n "$PORT" ] && [ "$(curl -s -m 2 "http://127.0.0.1:$PORT/health")" = ok ]; then
			BASE=http://127.0.0.1:$PORT
			return 0
		fi
		sleep 0.1
	done
	echo "# simulator did not start:" >&2
	cat "$log" >&2
	exit 1
}

# stop_sim: SIGTERM, wait; the exit code is left in STOP_RC
stop_sim()
{
	kill -TERM "$SIM_PID"
	wait "$SIM_PID"
	STOP_RC=$?
	SIM_PID=
}

stat() { curl -s "$BASE/stats" | awk -v k="$1" '$1 == k { print $2 }'; }

# ledger KEY: "received delivered distinct_bodies" of a key
ledger() { curl -s "$BASE/ledger" | awk -v k="$1" '$1 == k { print $2, $3, $4 }'; }

# wait_stat NAME VALUE: poll /stats until NAME is VALUE (10 s at most)
wait_stat()
{
	local i
	for i in $(seq 1 100); do
		[ "$(stat "$1")" = "$2" ] && return 0
		sleep 0.1
	done
	return 1
}

# code ARGS...: POST to /send, print the status code (000: no answer)
code() { curl -s -o /dev/null -w '%{http_code}' "$@" "$BASE/send"; }

# curl_rc ARGS...: POST to /send, print curl's exit code
curl_rc() { curl -s -o /dev/null "$@" "$BASE/send"; echo $?; }

# 64-bit FNV-1a of a string, as 16 hex digits
fnv1a()
{
	local s=$1 h=$((0xcbf29ce484222325)) i c
	for ((i = 0; i < ${#s}; i++)); do
		printf -v c '%d' "'${s:i:1}"
		h=$(((h ^ c) * 0x100000001b3))
	done
	printf '%016x' "$h"
}

# raw PART...: send the parts over one connection (0.2 s apart, printf %b
# escapes), print everything answered until the server closes (5 s at most)
raw()
{
	local part
	exec 3<>"/dev/tcp/127.0.0.1/$PORT" || return 1
	for part in "$@"; do
		printf '%b' "$part" >&3
		sleep 0.2
	done
	timeout 5 cat <&3 | tr -d '\r'
	exec 3<&- 3>&-
}

# seconds, as a float, that a curl call took
elapsed() { curl -s -o /dev/null -w '%{time_total}' "$@"; }

# float comparison: fge A B (A >= B), flt A B (A < B)
fge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }
flt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

accepted() { printf '{"status":"accepted","key":"%s"}' "$1"; }

# last QUERY_VALUE: GET /last?key=QUERY_VALUE into $TMP/last, print the status
last() { curl -s -o "$TMP/last" -w '%{http_code}' "$BASE/last?key=$1"; }

# the meta lines of $TMP/last (before the empty line), and its body bytes
last_meta() { sed -n '/^$/q;p' "$TMP/last"; }
last_body()
{
	local n
	n=$(sed '/^$/q' "$TMP/last" | wc -c)
	tail -c +$((n + 1)) "$TMP/last"
}

# last_line QUERY_VALUE FIELD: the value of the first "FIELD ..." meta line
last_line()
{
	last "$1" >/dev/null
	last_meta | awk -v f="$2" '$1 == f { sub(/^[^ ]* /, ""); print; exit }'
}

# same FILE EXPECTED_FILE NAME: byte for byte equal
same()
{
	if cmp -s "$1" "$2"; then
		pass "$3"
	else
		fail "$3"
		cmp "$1" "$2" 2>&1 | sed 's/^/#   /'
	fi
}

# ---------------------------------------------------------------- basics

start_sim
echo "# simulator on port $PORT"

is "$(curl -s "$BASE/health")" "ok" "GET /health answers ok"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/health")" 200 "GET /health is 200"

resp=$(curl -s -D "$TMP/h" -H 'Idempotency-Key: t-1' --data-binary 'hello' "$BASE/send")
is "$resp" "$(accepted t-1)" "POST answered with the accepted JSON"
like "$(tr -d '\r' <"$TMP/h")" '^Content-Length: 33$' "answer has Content-Length"
like "$(tr -d '\r' <"$TMP/h")" '^Content-Type: application/json$' "answer is JSON"
is "$(ledger t-1)" "1 1 1" "ledger: received, delivered, one body"

line=$(curl -s "$BASE/ledger" | awk '$1 == "t-1"')
first=$(echo "$line" | awk '{ print $5 }')
last=$(echo "$line" | awk '{ print $6 }')
now=$(date +%s%6N)
is "$(echo "$line" | awk '{ print NF }')" 6 "ledger line has 6 fields"
OK_NAME="first_us is the wall clock in microseconds"
ok test $((now - first)) -ge 0 -a $((now - first)) -lt 60000000
is "$first" "$last" "first_us = last_us after one request"

code -H 'Idempotency-Key: t-1' --data-binary 'hello' >/dev/null
line=$(curl -s "$BASE/ledger" | awk '$1 == "t-1"')
is "$(echo "$line" | awk '{ print $2, $3, $4 }')" "2 2 1" "same key and body again: delivered twice, one body"
OK_NAME="last_us moves on"
ok test "$(echo "$line" | awk '{ print $6 }')" -gt "$first"
is "$(echo "$line" | awk '{ print $5 }')" "$first" "first_us stays"

code -H 'Idempotency-Key: t-1' --data-binary 'hello!' >/dev/null
is "$(ledger t-1)" "3 3 2" "another body under the key counts a distinct body"

code -H 'idempotency-key: t-case' --data-binary 'x' >/dev/null
is "$(ledger t-case)" "1 1 1" "key header matched case-insensitively"

code -H 'Idempotency-Key: a b	c' --data-binary 'x' >/dev/null
is "$(ledger 'a%20b%09c')" "1 1 1" "blanks in a key are written as %XX"

body='{"to":"+15550100","text":"hi"}'
resp=$(curl -s --data-binary "$body" "$BASE/send")
key="body:$(fnv1a "$body")"
is "$resp" "$(accepted "$key")" "no key header: key is body: and the FNV-1a of the body"
is "$(ledger "$key")" "1 1 1" "body-keyed request in the ledger"

resp=$(curl -s "$BASE/send?to=1&msg=hi")
key="body:$(fnv1a 'to=1&msg=hi')"
is "$resp" "$(accepted "$key")" "GET without key: key from the query string"
code -G -H 'Idempotency-Key: g-1' --data-urlencode 'a=1' >/dev/null
code -G -H 'Idempotency-Key: g-1' --data-urlencode 'a=1' >/dev/null
code -G -H 'Idempotency-Key: g-1' --data-urlencode 'a=2' >/dev/null
is "$(ledger g-1)" "3 3 2" "GET: distinct bodies are distinct query strings"

# chunked bodies hash like the same bytes sent with Content-Length
printf 'chunky body' >"$TMP/small"
code -H 'Idempotency-Key: c-1' --data-binary @"$TMP/small" >/dev/null
st=$(code -H 'Idempotency-Key: c-1' -H 'Transfer-Encoding: chunked' --data-binary @"$TMP/small")
is "$st" 200 "chunked POST answered 200"
is "$(ledger c-1)" "2 2 1" "chunked body hashes like the same bytes with Content-Length"
resp=$(curl -s -H 'Transfer-Encoding: chunked' --data-binary @"$TMP/small" "$BASE/send")
is "$resp" "$(accepted "body:$(fnv1a 'chunky body')")" "chunked body without key: key from the decoded body"
out=$(raw 'POST /send HTTP/1.1\r\nHost: x\r\nIdempotency-Key: c-2\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n4;ext=1\r\nchun\r\n' \
	'7\r\nky body\r\n0\r\nX-Trailer: 1\r\n\r\n')
like "$out" '"key":"c-2"' "hand-made chunks with extension and trailer, split across writes"
is "$(ledger c-2)" "1 1 1" "... recorded"
code -H 'Idempotency-Key: c-2' --data-binary @"$TMP/small" >/dev/null
is "$(ledger c-2)" "2 2 1" "... with the same body hash as the plain bytes"

# bodies of a megabyte and more, both framings
head -c 1500000 /dev/urandom >"$TMP/big"
is "$(code -H 'Idempotency-Key: big' --data-binary @"$TMP/big")" 200 "1.5 MB body with Content-Length"
is "$(code -H 'Idempotency-Key: big' -H 'Transfer-Encoding: chunked' --data-binary @"$TMP/big")" 200 "1.5 MB chunked body"
is "$(ledger big)" "2 2 1" "both big bodies hash the same"

# Expect: 100-continue (curl would wait a second without the 100)
curl -s -v -o /dev/null -H 'Idempotency-Key: e-1' -H 'Expect: 100-continue' \
	--data-binary @"$TMP/small" "$BASE/send" 2>"$TMP/v"
like "$(tr -d '\r' <"$TMP/v")" '< HTTP/1.1 100 Continue' "Expect: 100-continue gets 100 Continue"
like "$(tr -d '\r' <"$TMP/v")" '< HTTP/1.1 200 OK' "... then the answer"
t=$(elapsed -H 'Idempotency-Key: e-1' -H 'Expect: 100-continue' --data-binary @"$TMP/big" "$BASE/send")
OK_NAME="... without curl's one second wait ($t s)"
ok flt "$t" 0.9
is "$(ledger e-1)" "2 2 2" "100-continue requests recorded"

# keep-alive: curl reuses one connection for two URLs
out=$(curl -s -o /dev/null -o /dev/null -w '%{num_connects} ' -H 'Idempotency-Key: ka' \
	--data-binary 'x' "$BASE/send" "$BASE/send")
is "$out" "1 0 " "keep-alive: the second request reuses the connection"
is "$(ledger ka)" "2 2 1" "... both recorded"

curl -s -o /dev/null -D "$TMP/h" -H 'Connection: close' -H 'Idempotency-Key: cc' --data-binary 'x' "$BASE/send"
like "$(tr -d '\r' <"$TMP/h")" '^Connection: close$' "Connection: close is answered with Connection: close"
out=$(raw 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
like "$out" '^ok$' "... and the server closes the connection"
out=$(raw 'GET /send?h10 HTTP/1.0\r\nIdempotency-Key: h10\r\n\r\n')
like "$out" '^HTTP/1.1 200 OK' "HTTP/1.0 request answered, then closed"

# HEAD: headers only, connection still usable
out=$(curl -s -I -H 'Idempotency-Key: hd' "$BASE/send" | tr -d '\r')
like "$out" '^Content-Length: 32$' "HEAD answered with Content-Length"
out=$(raw 'HEAD /send HTTP/1.1\r\nHost: x\r\nIdempotency-Key: hd\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
like "$(echo "$out" | tail -1)" '^ok$' "HEAD answer has no body: the next answer is intact"

# a head that arrives in pieces
out=$(raw 'POST /send HTTP/1.1\r\nHo' 'st: x\r\nIdempotency-Key: sp' 'lit-1\r\nContent-Length: 5\r\nConnection: close\r' '\n\r\nhel' 'lo')
like "$out" '"key":"split-1"' "head and body split across many writes"
is "$(ledger split-1)" "1 1 1" "... recorded once"

# pipelining: two requests in one write, answered in order
out=$(raw 'POST /send HTTP/1.1\r\nHost: x\r\nIdempotency-Key: p-1\r\nContent-Length: 1\r\n\r\naPOST /send HTTP/1.1\r\nHost: x\r\nIdempotency-Key: p-2\r\nX-Sim-Latency-Ms: 100\r\nContent-Length: 1\r\n\r\nbGET /health HTTP/1.1\r\nConnection: close\r\n\r\n')
is "$(echo "$out" | grep -o '"key":"p-[12]"' | tr '\n' ' ')" '"key":"p-1" "key":"p-2" ' "pipelined requests answered in order"
like "$(echo "$out" | tail -1)" '^ok$' "... and the third after the delayed second"

# malformed requests: 400, not counted
m0=$(stat malformed)
r0=$(stat requests)
like "$(raw 'GARBAGE\r\n\r\n')" '^HTTP/1.1 400 ' "malformed request line: 400"
like "$(raw 'POST /send HTTP/1.1\r\nContent-Length: abc\r\n\r\n')" '^HTTP/1.1 400 ' "bad Content-Length: 400"
like "$(raw 'POST /send HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n')" '^HTTP/1.1 400 ' "Content-Length with chunked: 400"
like "$(raw 'POST /send HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n')" '^HTTP/1.1 400 ' "bad chunk size: 400"
like "$(raw 'GET /send HTTP/1.1\r\nX-Sim-Fault: explode\r\n\r\n')" '^HTTP/1.1 400 ' "unknown X-Sim-Fault: 400"
like "$(raw 'GET /send HTTP/1.1\r\nX-Sim-Fault: 303\r\n\r\n')" '^HTTP/1.1 400 ' "X-Sim-Fault: 303 (not simulated): 400"
like "$(raw 'GET /send HTTP/1.1\r\nbad header\r\n\r\n')" '^HTTP/1.1 400 ' "header without colon: 400"
like "$(raw 'POST /send HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n')" '^HTTP/1.1 413 ' "huge Content-Length: 413"
is "$(stat malformed)" $((m0 + 8)) "malformed requests counted as malformed"
is "$(stat requests)" "$r0" "... and not as requests"
is "$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$BASE/ledger")" 405 "wrong method on a control endpoint: 405"

# ---------------------------------------------------------------- last request per key (GET /last)

# a hand-made request: the exact text of /last
b='{"to":"+15550100","text":"your code 1234"}'
raw "POST /send?x=1&y=%C3%A9 HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\nIdempotency-Key: otp:1:a\r\nX-Note:   café \t\r\nx-lower:v\r\nX-Empty:\r\nContent-Length: ${#b}\r\nConnection: close\r\n\r\n$b" >/dev/null
printf 'method POST\ntarget /send?x=1&y=%%C3%%A9\nheader Host: sim\nheader Content-Type: application/json\nheader Idempotency-Key: otp:1:a\nheader X-Note: café\nheader x-lower: v\nheader X-Empty: \nheader Content-Length: %d\nheader Connection: close\nbody-length %d\n\n%s' \
	"${#b}" "${#b}" "$b" >"$TMP/expected"
is "$(last otp%3A1%3Aa)" 200 "GET /last?key=otp%3A1%3Aa: 200"
same "$TMP/last" "$TMP/expected" "... method, target, headers in order (values trimmed), body-length, body: exact"
curl -s -D "$TMP/h" -o /dev/null "$BASE/last?key=otp:1:a"
like "$(tr -d '\r' <"$TMP/h")" '^Content-Type: text/plain$' "... as text/plain"
is "$(last otp:1:a)" 200 "the key parameter need not be encoded"

# bodies come back byte for byte
printf '{"text":"Xin chào — 你好 🎉","to":"+84901234567"}' >"$TMP/utf8"
code -H 'Idempotency-Key: l-utf8' -H 'Content-Type: application/json; charset=utf-8' --data-binary @"$TMP/utf8" >/dev/null
is "$(last l-utf8)" 200 "UTF-8 body recorded"
last_body >"$TMP/got"
same "$TMP/got" "$TMP/utf8" "... and returned byte for byte"
is "$(last_line l-utf8 body-length)" "$(wc -c <"$TMP/utf8")" "... body-length counts bytes"
like "$(last_meta)" '^header Content-Type: application/json; charset=utf-8$' "... with its Content-Type"

printf 'text=hello+world+%%26+more&to=%%2B15550100&note=Xin+ch%%C3%%A0o&empty=' >"$TMP/form"
code -H 'Idempotency-Key: l-form' -d @"$TMP/form" >/dev/null
last l-form >/dev/null
last_body >"$TMP/got"
same "$TMP/got" "$TMP/form" "form-urlencoded body returned as sent (not decoded)"
like "$(last_meta)" '^header Content-Type: application/x-www-form-urlencoded$' "... with its Content-Type"
like "$(last_meta)" '^method POST$' "... method POST"

head -c 3000 /dev/urandom >"$TMP/bin"
printf '\r\n\r\n\n' >>"$TMP/bin"
code -H 'Idempotency-Key: l-bin' --data-binary @"$TMP/bin" >/dev/null
last l-bin >/dev/null
last_body >"$TMP/got"
same "$TMP/got" "$TMP/bin" "binary body ending in CRLFs returned byte for byte"
code -H 'Idempotency-Key: l-bin' -H 'Transfer-Encoding: chunked' --data-binary @"$TMP/bin" >/dev/null
last l-bin >/dev/null
last_body >"$TMP/got"
same "$TMP/got" "$TMP/bin" "chunked body returned de-chunked"
like "$(last_meta)" '^header Transfer-Encoding: chunked$' "... with its Transfer-Encoding header"

curl -s -o /dev/null -H 'Idempotency-Key: l-get' "$BASE/send?to=%2B1+555&msg=h%C3%A9llo&empty=&flag"
last l-get >/dev/null
like "$(last_meta)" '^method GET$' "GET recorded: method GET"
is "$(last_line l-get target)" '/send?to=%2B1+555&msg=h%C3%A9llo&empty=&flag' "... target with the query string as sent"
like "$(last_meta)" '^body-length 0$' "... body-length 0"
is "$(last_body | wc -c)" 0 "... empty body"
like "$(tail -c 2 "$TMP/last" | od -An -c | tr -d ' ')" '^\\n\\n$' "... the text ends with the empty line"

code -H 'Idempotency-Key: l-2' --data-binary 'first' >/dev/null
code -H 'Idempotency-Key: l-2' -H 'X-Two: 2' --data-binary 'second!' >/dev/null
last l-2 >/dev/null
is "$(last_body)" 'second!' "only the most recent request of a key is kept"
like "$(last_meta)" '^header X-Two: 2$' "... with its headers"
like "$(last_meta)" '^body-length 7$' "... and its length"

# bodies are kept up to 64 KB
code -H 'Idempotency-Key: l-big' --data-binary @"$TMP/big" >/dev/null
last l-big >/dev/null
like "$(last_meta)" '^body-length 1500000$' "1.5 MB body: body-length as received"
like "$(last_meta)" '^body-truncated-to 65536$' "... body-truncated-to 65536"
head -c 65536 "$TMP/big" >"$TMP/b64k"
last_body >"$TMP/got"
same "$TMP/got" "$TMP/b64k" "... followed by its first 65536 bytes"
code -H 'Idempotency-Key: l-64k' --data-binary @"$TMP/b64k" >/dev/null
last l-64k >/dev/null
OK_NAME="a body of exactly 64 KB is not truncated"
ok test -z "$(last_meta | grep body-truncated)"
last_body >"$TMP/got"
same "$TMP/got" "$TMP/b64k" "... and comes back whole"

# the key parameter: URL-decoded, then spelled like the ledger spells keys
code -H 'Idempotency-Key: a b+c' --data-binary 'k' >/dev/null
is "$(ledger 'a%20b+c')" "1 1 1" "a key with a blank and a plus"
is "$(last 'a+b%2Bc')" 200 "... found by its raw value (+ and %XX decoded)"
is "$(last 'a%2520b%2Bc')" 200 "... and by its ledger spelling"
is "$(last 'a%20b+c')" 404 "... + in the parameter is a blank: a%20b+c is another key"
body='{"to":"+1"}'
code --data-binary "$body" >/dev/null
is "$(last "body:$(fnv1a "$body")")" 200 "body-keyed request found by its body: key"
is "$(last_body)" "$body" "... with its body"

is "$(last nope)" 404 "unknown key: 404"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/last")" 400 "no key parameter: 400"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/last?key=")" 400 "empty key parameter: 400"
is "$(last 'a%zz')" 400 "bad %XX: 400"
is "$(last 'a%2')" 400 "cut %XX: 400"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/last?x=1&key=l-2")" 200 "key found among other parameters"
is "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$BASE/last?key=l-2")" 405 "POST /last: 405"
r0=$(stat requests)
last l-2 >/dev/null
is "$(stat requests)" "$r0" "/last is not counted"
is "$(ledger l-2)" "2 2 2" "... and does not touch the ledger"

# ---------------------------------------------------------------- faults by header

is "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$BASE/reset")" 200 "POST /reset"
is "$(curl -s "$BASE/ledger")" "" "... empties the ledger"
is "$(stat keys)" 0 "... and the key count"
is "$(last l-2)" 404 "... and the last requests"

for s in 400 408 429 500 502 503 504; do
	is "$(code -H "Idempotency-Key: f-$s" -H "X-Sim-Fault: $s" --data-binary x)" "$s" "X-Sim-Fault: $s answers $s"
	is "$(ledger "f-$s")" "1 0 1" "... not delivered"
done
is "$(code -H 'Idempotency-Key: f-ok' -H 'X-Sim-Fault: ok' --data-binary x)" 200 "X-Sim-Fault: ok"
is "$(ledger f-ok)" "1 1 1" "... delivered"
is "$(code -H 'Idempotency-Key: f-502d' -H 'X-Sim-Fault: 502' -H 'X-Sim-Deliver: 1' --data-binary x)" 502 "502 with X-Sim-Deliver: 1"
is "$(ledger f-502d)" "1 1 1" "... delivered"
is "$(stat status_4xx) $(stat status_429) $(stat status_5xx) $(stat status_2xx)" "2 1 5 1" "status counters"

# redirects: never delivered, and a client that follows one shows in the ledger
for s in 301 302 307; do
	st=$(curl -s -o "$TMP/b" -D "$TMP/h" -w '%{http_code}' -H "Idempotency-Key: rd-$s" \
		-H "X-Sim-Fault: $s" --data-binary x "$BASE/send")
	is "$st" "$s" "X-Sim-Fault: $s answers $s"
	like "$(tr -d '\r' <"$TMP/h")" "^Location: http://127\.0\.0\.1:$PORT/redirected\$" "... with Location: http://127.0.0.1:$PORT/redirected"
	like "$(tr -d '\r' <"$TMP/h")" '^Content-Length: 0$' "... Content-Length: 0"
	is "$(wc -c <"$TMP/b")" 0 "... and an empty body"
	is "$(ledger "rd-$s")" "1 0 1" "... not delivered"
	is "$(last_line "rd-$s" target)" /send "... not followed by curl without -L"
done
is "$(stat status_3xx)" 3 "redirects counted in status_3xx"
is "$(stat status_4xx)" 2 "... not in status_4xx"

resp=$(curl -s -L -H 'Idempotency-Key: rd-f307' -H 'X-Sim-Fault: 307' --data-binary 'y' "$BASE/send")
is "$resp" "$(accepted rd-f307)" "307 followed (curl -L): /redirected answers normally, despite X-Sim-Fault: 307"
is "$(ledger rd-f307)" "2 1 1" "... the key is received twice, delivered once"
is "$(last_line rd-f307 target)" /redirected "... its last request went to /redirected"
is "$(last_body)" y "... with the body (307 keeps the POST)"
curl -s -o /dev/null -L -H 'Idempotency-Key: rd-f302' -H 'X-Sim-Fault: 302' --data-binary 'y' "$BASE/send"
is "$(ledger rd-f302)" "2 1 2" "302 followed by curl -L: received twice"
is "$(last_line rd-f302 method) $(last_line rd-f302 target)" "GET /redirected" "... as a GET of /redirected"
is "$(curl -s -o /dev/null -w '%{http_code}' -H 'Idempotency-Key: rd-direct' -H 'X-Sim-Fault: 500' "$BASE/redirected")" 500 \
	"/redirected takes other faults"
is "$(ledger rd-direct)" "1 0 1" "... and is counted like any path"
is "$(code -H 'Idempotency-Key: rd-d' -H 'X-Sim-Fault: 301' -H 'X-Sim-Deliver: 1' --data-binary x)" 301 "301 with X-Sim-Deliver: 1"
is "$(ledger rd-d)" "1 1 1" "... delivered"
hdr=(-H 'Idempotency-Key: rd-ff' -H 'X-Sim-Fault: 302' -H 'X-Sim-Fail-First: 1' --data-binary x)
is "$(code "${hdr[@]}") $(code "${hdr[@]}")" "302 200" "302 with X-Sim-Fail-First: 1"
out=$(raw 'POST /send HTTP/1.1\r\nHost: x\r\nX-Sim-Fault: 302\r\nContent-Length: 1\r\n\r\naHEAD /send HTTP/1.1\r\nX-Sim-Fault: 307\r\n\r\nGET /health HTTP/1.1\r\nConnection: close\r\n\r\n')
is "$(echo "$out" | grep -c '^Location: ')" 2 "redirects on a kept-alive connection (also HEAD)"
like "$(echo "$out" | tail -1)" '^ok$' "... the next answer is intact"

curl -s -o /dev/null -D "$TMP/h" -H 'X-Sim-Fault: 429' --data-binary x "$BASE/send"
like "$(tr -d '\r' <"$TMP/h")" '^Retry-After: 1$' "429 has Retry-After: 1 by default"
curl -s -o /dev/null -D "$TMP/h" -H 'X-Sim-Fault: 429' -H 'X-Sim-Retry-After: 7' --data-binary x "$BASE/send"
like "$(tr -d '\r' <"$TMP/h")" '^Retry-After: 7$' "X-Sim-Retry-After sets it"
curl -s -o /dev/null -D "$TMP/h" -H 'X-Sim-Fault: 503' -H 'X-Sim-Retry-After: 3' --data-binary x "$BASE/send"
like "$(tr -d '\r' <"$TMP/h")" '^Retry-After: 3$' "... on 503 too"
curl -s -o /dev/null -D "$TMP/h" -H 'X-Sim-Fault: 503' --data-binary x "$BASE/send"
OK_NAME="503 without X-Sim-Retry-After has no Retry-After"
ok test -z "$(grep -i retry-after "$TMP/h")"

t0=$(stat timeouts)
curl -s -o /dev/null -m 5 -H 'Idempotency-Key: to-bg' -H 'X-Sim-Fault: timeout' --data-binary x "$BASE/send" &
bg=$!
OK_NAME="held request shows in inflight"
ok wait_stat inflight 1
kill "$bg" 2>/dev/null
wait "$bg" 2>/dev/null
OK_NAME="client gone: the held request is cleaned up"
ok wait_stat inflight 0
is "$(last_line to-bg target)" /send "held requests are recorded for /last"
is "$(curl_rc -m 1 -H 'Idempotency-Key: to-1' -H 'X-Sim-Fault: timeout' --data-binary x)" 28 "X-Sim-Fault: timeout: the client times out"
is "$(ledger to-1)" "1 0 1" "... not delivered"
is "$(curl_rc -m 1 -H 'Idempotency-Key: to-2' -H 'X-Sim-Fault: timeout_delivered' --data-binary x)" 28 "timeout_delivered: the client times out"
is "$(ledger to-2)" "1 1 1" "... delivered"
is "$(stat timeouts)" $((t0 + 3)) "timeouts counted"

is "$(curl_rc -H 'Idempotency-Key: rs-1' -H 'X-Sim-Fault: reset' --data-binary x)" 56 "X-Sim-Fault: reset: connection reset"
is "$(ledger rs-1)" "1 0 1" "... not delivered"
like "$(curl -s "$BASE/last?key=rs-1")" '^header X-Sim-Fault: reset$' "... but recorded for /last"
is "$(curl_rc -H 'Idempotency-Key: rs-2' -H 'X-Sim-Fault: reset_delivered' --data-binary x)" 56 "reset_delivered: connection reset"
is "$(ledger rs-2)" "1 1 1" "... delivered"
is "$(curl_rc -H 'Idempotency-Key: rs-3' -H 'X-Sim-Fault: reset' -H 'Transfer-Encoding: chunked' --data-binary @"$TMP/big")" 56 "reset after a big chunked body"
is "$(stat resets)" 3 "resets counted"

# X-Sim-Fail-First: a timeout, then the retry succeeds
hdr=(-H 'Idempotency-Key: ff-1' -H 'X-Sim-Fault: timeout' -H 'X-Sim-Fail-First: 1' --data-binary x)
is "$(curl_rc -m 1 "${hdr[@]}")" 28 "Fail-First 1: the first attempt times out"
is "$(code "${hdr[@]}")" 200 "... the retry is answered 200"
is "$(ledger ff-1)" "2 1 1" "... and delivered once"
hdr=(-H 'Idempotency-Key: ff-2' -H 'X-Sim-Fault: 503' -H 'X-Sim-Fail-First: 2' --data-binary x)
is "$(code "${hdr[@]}") $(code "${hdr[@]}") $(code "${hdr[@]}") $(code "${hdr[@]}")" "503 503 200 200" "Fail-First 2 with 503"
is "$(ledger ff-2)" "4 2 1" "... delivered by the successful ones"

# latency
t=$(elapsed -H 'Idempotency-Key: lat-1' -H 'X-Sim-Latency-Ms: 300' --data-binary x "$BASE/send")
OK_NAME="X-Sim-Latency-Ms: 300 delays the answer ($t s)"
ok fge "$t" 0.3
is "$(curl_rc -m 0.5 -H 'Idempotency-Key: lat-2' -H 'X-Sim-Latency-Ms: 3000' --data-binary x)" 28 "answer slower than the client's timeout"
is "$(ledger lat-2)" "1 1 1" "... delivered all the same"
OK_NAME="... and the server cleans up (no connection left)"
ok wait_stat connections_open 1

# ---------------------------------------------------------------- run-time configuration

cfg=$(curl -s "$BASE/config")
like "$cfg" '^latency_ms 0$' "GET /config lists latency_ms"
like "$cfg" '^status_5xx 502$' "... status_5xx"
like "$cfg" '^hold_ms 60000$' "... hold_ms"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/config?p_5xx=2")" 400 "/config rejects a probability above 1"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/config?nope=1")" 400 "/config rejects an unknown name"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/config?p_5xx=1&latency_ms=x")" 400 "/config rejects a bad integer"
like "$(curl -s "$BASE/config")" '^p_5xx 0$' "... and changes nothing then"

curl -s -o /dev/null "$BASE/config?latency_ms=500"
t=$(elapsed -H 'Idempotency-Key: lat-3' --data-binary x "$BASE/send")
OK_NAME="latency_ms=500 delays simulated answers ($t s)"
ok fge "$t" 0.5
t=$(elapsed "$BASE/stats")
OK_NAME="... but not control endpoints ($t s)"
ok flt "$t" 0.4
curl -s -o /dev/null "$BASE/config?latency_ms=0"

# a lognormal spread: median latency_ms, 99th percentile latency_p99_ms
like "$(curl -s "$BASE/config?latency_ms=20&latency_p99_ms=100")" '^latency_p99_ms 100$' "/config sets latency_p99_ms"
for i in $(seq 1 41); do elapsed -H "Idempotency-Key: lgn-$i" --data-binary x "$BASE/send"; echo; done | grep . | sort -g >"$TMP/lgn"
med=$(sed -n 21p "$TMP/lgn")
hi=$(tail -1 "$TMP/lgn")
OK_NAME="latency_ms=20, latency_p99_ms=100: the median answer after about 20 ms ($med s)"
ok fge "$med" 0.010
ok flt "$med" 0.045
OK_NAME="... spread out: the slowest of 41 after more than 35 ms ($hi s)"
ok fge "$hi" 0.035
curl -s -o /dev/null "$BASE/config?latency_ms=0&latency_p99_ms=0"

curl -s -o /dev/null "$BASE/config?p_5xx=1"
is "$(code -H 'Idempotency-Key: r-5' --data-binary x)" 502 "p_5xx=1: 502"
is "$(ledger r-5)" "1 0 1" "... not delivered"
curl -s -o /dev/null "$BASE/config?status_5xx=503&q=1"
is "$(code -H 'Idempotency-Key: r-5q' --data-binary x)" 503 "status_5xx=503: 503"
is "$(ledger r-5q)" "1 1 1" "... q=1: delivered all the same"
curl -s -o /dev/null "$BASE/config?p_5xx=0&q=0&p_4xx=1"
is "$(code -H 'Idempotency-Key: r-4' --data-binary x)" 400 "p_4xx=1: 400"
is "$(ledger r-4)" "1 0 1" "... not delivered"
curl -s -o /dev/null "$BASE/config?p_4xx=0&p_429=1&retry_after=5"
curl -s -o /dev/null -D "$TMP/h" -H 'Idempotency-Key: r-429' --data-binary x "$BASE/send"
like "$(tr -d '\r' <"$TMP/h")" '^HTTP/1.1 429 ' "p_429=1: 429"
like "$(tr -d '\r' <"$TMP/h")" '^Retry-After: 5$' "... with retry_after=5"
curl -s -o /dev/null "$BASE/config?p_429=0&p_reset=1"
is "$(curl_rc -H 'Idempotency-Key: r-rst' --data-binary x)" 56 "p_reset=1: reset"
curl -s -o /dev/null "$BASE/config?p_reset=0&p_timeout=1&hold_ms=300"
t=$(elapsed -m 5 -H 'Idempotency-Key: r-to' --data-binary x "$BASE/send")
is "$(curl_rc -m 5 -H 'Idempotency-Key: r-to' --data-binary x)" 52 "p_timeout=1, hold_ms=300: closed without an answer"
OK_NAME="... after the hold ($t s)"
ok fge "$t" 0.3
is "$(ledger r-to)" "2 0 1" "... not delivered"
curl -s -o /dev/null "$BASE/config?p_timeout=0&hold_ms=60000"

# the same seed gives the same sequence
draw()
{
	local i s=
	curl -s -o /dev/null "$BASE/config?p_5xx=0.5&seed=$1"
	for i in $(seq 1 40); do
		s="$s$(code -H "Idempotency-Key: d-$i" --data-binary x | cut -c1)"
	done
	echo "$s"
}
a=$(draw 42)
b=$(draw 42)
c=$(draw 43)
is "$a" "$b" "seed 42 twice: the same faults ($a)"
OK_NAME="another seed, other faults ($c)"
ok test "$a" != "$c"
n5=$(echo "$a" | tr -cd 5 | wc -c)
OK_NAME="p_5xx=0.5: about half fail ($n5 of 40)"
ok test "$n5" -ge 10 -a "$n5" -le 30
curl -s -o /dev/null "$BASE/config?p_5xx=0"

# idempotency
code -H 'Idempotency-Key: dup' --data-binary x >/dev/null
code -H 'Idempotency-Key: dup' --data-binary x >/dev/null
is "$(ledger dup)" "2 2 1" "without idempotency a replay is delivered again"
like "$(curl -s "$BASE/config?idempotency=1")" '^idempotency 1$' "idempotency=1"
for i in 1 2 3; do
	st=$(code -H 'Idempotency-Key: idem' --data-binary x)
done
is "$st" 200 "idempotent replay answered 200"
is "$(ledger idem)" "3 1 1" "... but delivered once"
curl_rc -m 1 -H 'Idempotency-Key: idem-2' -H 'X-Sim-Fault: timeout_delivered' --data-binary x >/dev/null
is "$(code -H 'Idempotency-Key: idem-2' --data-binary x)" 200 "delivered during a timeout, the retry is answered 200"
is "$(ledger idem-2)" "2 1 1" "... and not delivered again"
curl -s -o /dev/null "$BASE/config?idempotency=0"

# /stats after /reset
curl -s -o /dev/null "$BASE/reset"
for i in 1 2 3; do code -H "Idempotency-Key: s-$i" --data-binary x >/dev/null; done
code -H 'Idempotency-Key: s-4' -H 'X-Sim-Fault: 500' --data-binary x >/dev/null
curl -s -o /dev/null "$BASE/health"
curl -s -o /dev/null "$BASE/ledger"
st=$(curl -s "$BASE/stats")
for kv in 'requests 4' 'delivered 3' 'status_2xx 3' 'status_3xx 0' 'status_5xx 1' 'timeouts 0' 'resets 0' 'keys 4' 'inflight 0' 'connections_open 1' 'answered 4'; do
	like "$st" "^$kv\$" "stats: $kv (control endpoints not counted)"
done

# ---------------------------------------------------------------- many connections

curl -s -o /dev/null "$BASE/config?hold_ms=10000"
pids=()
for i in $(seq 1 16); do
	curl -s -m 60 --parallel --parallel-immediate --parallel-max 256 -H 'Idempotency-Key: conc' -H 'X-Sim-Fault: timeout' \
		"$BASE/conc/[1-256]" >/dev/null 2>&1 &
	pids+=($!)
done
OK_NAME="4096 concurrent held requests"
ok wait_stat inflight 4096
like "$(curl -s "$BASE/stats")" '^connections_open 4097$' "... on 4097 open connections"
wait "${pids[@]}"
OK_NAME="... all closed after hold_ms"
ok wait_stat inflight 0
OK_NAME="... and no connection left behind"
ok wait_stat connections_open 1
is "$(ledger conc)" "4096 0 1" "... all recorded"
curl -s -o /dev/null "$BASE/config?hold_ms=60000"

# ---------------------------------------------------------------- shutdown

stop_sim
is "$STOP_RC" 0 "SIGTERM: exit 0${SIM_WRAPPER:+ (under $SIM_WRAPPER)}"

# ---------------------------------------------------------------- resolving an ambiguous call (sim_resolve.c)

# pipeline FILE: send the requests of FILE over one connection (the last
# one says Connection: close), answers into $TMP/pipe.out (60 s at most)
pipeline()
{
	exec 3<>"/dev/tcp/127.0.0.1/$PORT" || return 1
	cat "$1" >&3
	timeout 60 cat <&3 | tr -d '\r' >"$TMP/pipe.out"
	exec 3<&- 3>&-
}

# requests PREFIX N REPEATS: N keys PREFIX1..PREFIXN, each sent REPEATS
# times in a row, as raw HTTP into $TMP/req
requests()
{
	awk -v p="$1" -v n="$2" -v r="$3" 'BEGIN {
		for (i = 1; i <= n; i++)
			for (j = 1; j <= r; j++)
				printf "POST /send HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s%d\r\nContent-Length: 1\r\n%s\r\nx",
					p, i, (i == n && j == r) ? "Connection: close\r\n" : ""
	}' >"$TMP/req"
}

# the sum of the ledger's delivered over the keys starting with PREFIX
delivered_sum() { curl -s "$BASE/ledger" | awk -v p="$1" 'index($1, p) == 1 { s += $3 } END { print s + 0 }'; }

# in_band VALUE LOW HIGH NAME: LOW <= VALUE <= HIGH
in_band()
{
	OK_NAME="$4: $1 in [$2, $3]"
	ok awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v != "" && v + 0 >= lo && v + 0 <= hi) }'
}

# (3 s: the three calls below must fall inside it however slow this
# machine is between them; then the test waits for it to pass)
start_sim --dedup-window-ms 3000
echo "# simulator on port $PORT (--dedup-window-ms 3000)"

# the window is honoured, then passes
for i in 1 2 3; do st=$(code -H 'Idempotency-Key: w-1' --data-binary x); done
is "$st" 200 "dedup window: a repeat inside it is answered 200"
is "$(ledger w-1)" "3 1 1" "... received three times, delivered once"
is "$(stat dedup_hits) $(stat dedup_broken)" "2 0" "... counted in dedup_hits"
sleep 3.1	# the window's time passes: nothing else to observe
is "$(code -H 'Idempotency-Key: w-1' --data-binary x)" 200 "after the window: answered 200"
is "$(ledger w-1)" "4 2 1" "... and delivered again, like a new key"
code -H 'Idempotency-Key: w-1' --data-binary x >/dev/null
is "$(ledger w-1)" "5 2 1" "... which opens a new window"
code --data-binary 'no key' >/dev/null
code --data-binary 'no key' >/dev/null
is "$(ledger "body:$(fnv1a 'no key')")" "2 2 1" "a request without the key header is not deduplicated"

curl -s -o /dev/null "$BASE/config?dedup_window_ms=5000"
is "$(code -H 'Idempotency-Key: w-2' -H 'X-Sim-Fault: 500' --data-binary x)" 500 "a first call failing without acting (500)"
is "$(code -H 'Idempotency-Key: w-2' --data-binary x)" 200 "... its repeat in the window"
is "$(ledger w-2)" "2 1 1" "... is delivered (nothing delivered in the window yet)"
is "$(curl_rc -m 1 -H 'Idempotency-Key: w-3' -H 'X-Sim-Fault: timeout_delivered' --data-binary x)" 28 "a call acted upon that times out"
is "$(code -H 'Idempotency-Key: w-3' --data-binary x)" 200 "... its retry in the window is answered 200"
is "$(ledger w-3)" "2 1 1" "... and not delivered again"
is "$(code -H 'Idempotency-Key: w-3' -H 'X-Sim-Fault: 502' --data-binary x)" 502 "a repeat in the window with X-Sim-Fault: 502 answers 502"
is "$(code -H 'Idempotency-Key: w-3' -H 'X-Sim-Fault: ok' -H 'X-Sim-Deliver: 1' --data-binary x)" 200 "... X-Sim-Deliver: 1 does not deliver it either"
is "$(ledger w-3)" "4 1 1" "... delivered once"
curl -s -o /dev/null "$BASE/config?p_5xx=1"
is "$(code -H 'Idempotency-Key: w-3' --data-binary x)" 200 "p_5xx=1: a repeat in the window is still answered 200"
is "$(code -H 'Idempotency-Key: w-4' --data-binary x)" 502 "... a new key gets its 502"
curl -s -o /dev/null "$BASE/config?p_5xx=0"
like "$(curl -s "$BASE/config?idempotency=1&dedup_breaks=1")" '^dedup_breaks 1$' "idempotency=1 with dedup_breaks=1"
code -H 'Idempotency-Key: w-3' --data-binary x >/dev/null
is "$(ledger w-3)" "6 1 1" "... --idempotency wins: the break changes nothing"
curl -s -o /dev/null "$BASE/config?idempotency=0"
code -H 'Idempotency-Key: w-3' --data-binary x >/dev/null
is "$(ledger w-3)" "7 2 1" "... without it, dedup_breaks=1 delivers every repeat again"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/config?dedup_breaks=1.5")" 400 "/config rejects dedup_breaks=1.5"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/config?dedup_window_ms=-1")" 400 "... and dedup_window_ms=-1"

# the breaks share, with a fixed seed: 1000 keys, each sent twice in the window
curl -s -o /dev/null "$BASE/reset"
curl -s -o /dev/null "$BASE/config?dedup_window_ms=60000&dedup_breaks=0.25&seed=11"
requests brk- 1000 2
pipeline "$TMP/req"
is "$(grep -o 'HTTP/1.1 200 OK' "$TMP/pipe.out" | wc -l)" 2000 "dedup_breaks=0.25: 2000 pipelined calls answered 200"
broken=$(stat dedup_broken)
in_band "$broken" 200 300 "... broken promises"
is "$(($(stat dedup_hits) + broken))" 1000 "... hits and breaks make the 1000 repeats"
is "$(delivered_sum brk-)" $((1000 + broken)) "... each break is a second delivered copy in the ledger"
curl -s "$BASE/ledger" | awk '$3 == 2 { print $1 }' | sort >"$TMP/broken.1"
curl -s -o /dev/null "$BASE/reset"
curl -s -o /dev/null "$BASE/config?seed=11"
pipeline "$TMP/req"
curl -s "$BASE/ledger" | awk '$3 == 2 { print $1 }' | sort >"$TMP/broken.2"
same "$TMP/broken.2" "$TMP/broken.1" "... the same seed breaks the same keys"
curl -s -o /dev/null "$BASE/config?dedup_breaks=0"

# the status lookup
curl -s -o /dev/null "$BASE/reset"
curl -s -o /dev/null "$BASE/config?dedup_window_ms=0"
code -H 'Idempotency-Key: otp:9 a' --data-binary x >/dev/null
code -H 'Idempotency-Key: lk-500' -H 'X-Sim-Fault: 500' --data-binary x >/dev/null
curl_rc -m 1 -H 'Idempotency-Key: lk-td' -H 'X-Sim-Fault: timeout_delivered' --data-binary x >/dev/null
curl -s -o /dev/null "$BASE/ledger" >"$TMP/ledger.before"
r0=$(stat requests)
resp=$(curl -s -D "$TMP/h" -w ' %{http_code}' "$BASE/status/otp%3A9%20a")
is "$resp" '{"ref":"otp:9%20a","status":"delivered"} 200' "GET /status/K of a delivered key: 200, delivered (ref in the ledger's spelling)"
like "$(tr -d '\r' <"$TMP/h")" '^Content-Type: application/json$' "... as JSON"
is "$(curl -s -w ' %{http_code}' "$BASE/status?ref=otp:9+a")" '{"ref":"otp:9%20a","status":"delivered"} 200' "GET /status?ref=K (+ a blank there)"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/status/otp:9%2520a")" 200 "... and by the ledger's spelling"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/status/otp:9+a")" 404 "in the path a + is a plus"
is "$(curl -s -w ' %{http_code}' "$BASE/status/lk-none")" '{"ref":"lk-none","status":"not_found"} 404' "an unknown key: 404, not_found"
is "$(curl -s -w ' %{http_code}' "$BASE/status/lk-500")" '{"ref":"lk-500","status":"not_found"} 404' "a key received, never delivered: 404"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/status/lk-td")" 200 "a key delivered by a call that timed out: 200"
is "$(curl -s -I -o /dev/null -w '%{http_code}' "$BASE/status/lk-td")" 200 "HEAD /status/K"
is "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$BASE/status/lk-td")" 405 "POST /status/K: 405"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/status/")" 400 "no key: 400"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/status?ref=")" 400 "... empty ref: 400"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/status/a%zz")" 400 "bad %XX: 400"
is "$(stat requests)" "$r0" "lookups are not requests"
curl -s -o /dev/null "$BASE/ledger" >"$TMP/ledger.after"
same "$TMP/ledger.after" "$TMP/ledger.before" "... nor ledger receipts"
is "$(last_line otp:9%20a target)" /send "... and /last keeps the send"
is "$(stat lookups) $(stat lookups_found) $(stat lookups_not_found) $(stat lookups_failed)" "8 5 3 0" \
	"stats: lookups, lookups_found, lookups_not_found, lookups_failed (bad ones not counted)"
is "$(stat answered)" 2 "... lookups not counted in answered"

curl -s -o /dev/null "$BASE/config?lookup_latency_ms=300"
t=$(elapsed "$BASE/status/lk-td")
OK_NAME="lookup_latency_ms=300 delays lookups ($t s)"
ok fge "$t" 0.3
t=$(elapsed -H 'Idempotency-Key: lk-fast' --data-binary x "$BASE/send")
OK_NAME="... not sends ($t s)"
ok flt "$t" 0.25
curl -s -o /dev/null "$BASE/config?lookup_latency_ms=0&p_lookup_fail=1"
is "$(curl -s -w ' %{http_code}' "$BASE/status/lk-td")" '{"ref":"lk-td","status":"error","code":503} 503' "p_lookup_fail=1: 503"
curl -s -o /dev/null "$BASE/config?lookup_fail_mode=500"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/status/lk-td")" 500 "lookup_fail_mode=500: 500"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/config?lookup_fail_mode=404")" 400 "/config rejects lookup_fail_mode=404"
curl -s -o /dev/null "$BASE/config?lookup_fail_mode=timeout&hold_ms=2000"
t0=$(stat timeouts)
is "$(curl -s -o /dev/null -m 1 "$BASE/status/lk-td"; echo $?)" 28 "lookup_fail_mode=timeout: the client times out"
is "$(stat inflight) $(stat timeouts)" "0 $t0" "... not counted as a held request"
is "$(curl -s -o /dev/null -m 5 -w '%{http_code}' "$BASE/status/lk-td")" 000 "... closed without an answer after hold_ms"
OK_NAME="... no connection left behind"
ok wait_stat connections_open 1
curl -s -o /dev/null "$BASE/config?lookup_fail_mode=503&p_lookup_fail=0.3&hold_ms=60000&seed=5"
f0=$(stat lookups_failed)
curl -s -o "$TMP/codes" -w '%{http_code}\n' "$BASE/status/lk-[1-400]" >"$TMP/codes"
n503=$(grep -c 503 "$TMP/codes")
in_band "$n503" 85 155 "p_lookup_fail=0.3: of 400 lookups, failed"
is "$(($(stat lookups_failed) - f0))" "$n503" "... counted in lookups_failed"
is "$(grep -c 404 "$TMP/codes")" $((400 - n503)) "... the others not found"
curl -s -o /dev/null "$BASE/config?p_lookup_fail=0"
stop_sim
is "$STOP_RC" 0 "SIGTERM: exit 0"

# delivery reports
start_sim
echo "# simulator on port $PORT (DLRs)"
code -H 'Idempotency-Key: nodlr' --data-binary x >/dev/null
is "$(stat dlrs_made) $(curl -s "$BASE/dlrs")" "0 " "DLRs are off by default"
# (2 s: "not at once" must hold however slow this machine is between calls)
curl -s -o /dev/null "$BASE/config?dlr_median_ms=2000"
code -H 'Idempotency-Key: dl-one' --data-binary x >/dev/null
is "$(stat dlrs_made)" 1 "dlr_median_ms=2000: a delivered copy makes a report"
is "$(curl -s "$BASE/dlrs")" "" "... not available at once"
for _ in $(seq 100); do line=$(curl -s "$BASE/dlrs"); [ -n "$line" ] && break; sleep 0.1; done
first=$(curl -s "$BASE/ledger" | awk '$1 == "dl-one" { print $5 }')
is "$(echo "$line" | cut -f1-3 | tr '\t' ' ')" "1 dl-one 1" "... after its latency: seq TAB key TAB delivered"
lat=$(($(echo "$line" | cut -f4) - first / 1000))
OK_NAME="... reported_at is the delivery plus 2000 ms (no spread): $lat"
ok test "$lat" -ge 1999 -a "$lat" -le 2001
code -H 'Idempotency-Key: dl-500' -H 'X-Sim-Fault: 500' --data-binary x >/dev/null
code -H 'Idempotency-Key: dl-4' -H 'X-Sim-Fault: 400' --data-binary x >/dev/null
curl_rc -m 1 -H 'Idempotency-Key: dl-td' -H 'X-Sim-Fault: timeout_delivered' --data-binary x >/dev/null
is "$(stat dlrs_made)" 2 "calls not acted upon make none; a timeout acted upon makes one"
curl -s -o /dev/null "$BASE/config?dedup_window_ms=5000"
code -H 'Idempotency-Key: dl-w' --data-binary x >/dev/null
code -H 'Idempotency-Key: dl-w' --data-binary x >/dev/null
is "$(stat dlrs_made)" 3 "a repeat deduplicated makes none"
curl -s -o /dev/null "$BASE/config?dedup_window_ms=0"
for _ in $(seq 100); do [ "$(curl -s "$BASE/dlrs" | wc -l)" -ge 3 ] && break; sleep 0.1; done
is "$(curl -s "$BASE/dlrs" | cut -f1,2 | tr '\t\n' ': ')" "1:dl-one 2:dl-td 3:dl-w " "GET /dlrs: all in seq order"
is "$(curl -s "$BASE/dlrs?after=1&limit=1" | cut -f1,2 | tr '\t\n' ': ')" "2:dl-td " "after=1&limit=1"
is "$(curl -s "$BASE/dlrs?after=3")" "" "after=3: none"
is "$(stat dlrs_taken)" 3 "dlrs_taken counts each report once"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/dlrs?after=x")" 400 "after=x: 400"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/dlrs?limit=0x")" 400 "limit=0x: 400"
is "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$BASE/dlrs")" 405 "POST /dlrs: 405"
is "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/config?dlr_median_ms=400&dlr_p99_ms=200")" 400 "/config rejects dlr_p99_ms below dlr_median_ms"
curl -s -o /dev/null "$BASE/reset"
is "$(stat dlrs_made) $(stat dlrs_taken) $(curl -s "$BASE/dlrs")" "0 0 " "/reset forgets them"

# the latency distribution, lost and failed shares: 2000 deliveries
curl -s -o /dev/null "$BASE/config?dlr_median_ms=40&dlr_p99_ms=400&p_dlr_lost=0.1&p_dlr_failed=0.05&seed=3"
requests dlr- 2000 1
pipeline "$TMP/req"
is "$(grep -o 'HTTP/1.1 200 OK' "$TMP/pipe.out" | wc -l)" 2000 "2000 pipelined deliveries"
is "$(($(stat dlrs_made) + $(stat dlrs_lost)))" 2000 "... each made a report or lost one"
: >"$TMP/dlrs"
seq_seen=0
early=0
for i in $(seq 1 100); do
	curl -s "$BASE/dlrs?after=$seq_seen&limit=500" >"$TMP/batch"
	now=$(date +%s%3N)
	early=$((early + $(awk -F'\t' -v now="$now" '$4 > now' "$TMP/batch" | wc -l)))
	cat "$TMP/batch" >>"$TMP/dlrs"
	[ -s "$TMP/batch" ] && seq_seen=$(tail -1 "$TMP/batch" | cut -f1)
	[ "$(stat dlrs_taken)" = "$(stat dlrs_made)" ] && break
	sleep 0.1
done
made=$(stat dlrs_made)
is "$(wc -l <"$TMP/dlrs")" "$made" "polled with after=SEQ: every report made, once"
is "$(cut -f1 "$TMP/dlrs" | tr '\n' ' ')" "$(seq 1 "$made" | tr '\n' ' ')" "... seq 1..$made in order"
is "$early" 0 "... none handed out before its reported_at"
is "$(cut -f2 "$TMP/dlrs" | sort -u | wc -l)" "$made" "... each of its own key"
in_band "$(stat dlrs_lost)" 140 260 "p_dlr_lost=0.1: lost of 2000"
in_band "$(awk -F'\t' '$3 == 0' "$TMP/dlrs" | wc -l)" "$((made * 5 / 100 - 35))" "$((made * 5 / 100 + 35))" "p_dlr_failed=0.05: saying not delivered"
is "$(awk -F'\t' '$3 == 0' "$TMP/dlrs" | wc -l)" "$(stat dlrs_failed)" "... counted in dlrs_failed"
curl -s "$BASE/ledger" | awk '{ print $1, $5 }' | sort >"$TMP/first"
cut -f2,4 "$TMP/dlrs" | tr '\t' ' ' | sort | join - "$TMP/first" | awk '{ print $2 - int($3 / 1000) }' | sort -n >"$TMP/lat"
n=$(wc -l <"$TMP/lat")
p50=$(sed -n "$(((n + 1) / 2))p" "$TMP/lat")
p99=$(sed -n "$(((n * 99 + 99) / 100))p" "$TMP/lat")
in_band "$p50" 34 46 "lognormal latency, median 40 ms: the median of $n"
in_band "$p99" 260 540 "... p99 400 ms: the p99"
cut -f2 "$TMP/dlrs" | sort >"$TMP/reported.1"
curl -s -o /dev/null "$BASE/reset"
curl -s -o /dev/null "$BASE/config?dlr_median_ms=1&dlr_p99_ms=1&seed=3"
pipeline "$TMP/req"
sleep 0.2
curl -s "$BASE/dlrs?limit=5000" | cut -f2 | sort >"$TMP/reported.2"
same "$TMP/reported.2" "$TMP/reported.1" "... the same seed loses the same keys"
stop_sim
is "$STOP_RC" 0 "SIGTERM: exit 0"

# ---------------------------------------------------------------- batches (sim_batch.c)

start_sim
resp=$(curl -s -d '{"messages": [{"ref": "bt:1:a", "text": "x"}, {"ref": "bt:1:b", "sim": "reject"}, {"ref": "bt:1:c", "sim": "unknown"}, {"ref": "bt:1:d", "sim": "unknown_delivered"}, {"ref": "bt:1:e", "sim": "drop"}]}' "$BASE/batch")
is "$resp" '{"results": [{"ref": "bt:1:a", "status": "accepted"}, {"ref": "bt:1:b", "status": "rejected"}, {"ref": "bt:1:c", "status": "pending"}, {"ref": "bt:1:d", "status": "pending"}]}' "batch in a named field: a result per message, in order, none for drop"
is "$(ledger bt:1:a) $(ledger bt:1:b) $(ledger bt:1:c) $(ledger bt:1:d) $(ledger bt:1:e)" \
	"1 1 1 1 0 1 1 0 1 1 1 1 1 1 1" "batch: each message in the ledger by its ref, delivered as its result says"
is "$(stat batch_calls) $(stat batch_messages) $(stat requests)" "1 5 1" "batch: one call, five messages"
like "$(curl -s "$BASE/last?key=bt:1:b")" '"sim": "reject"}$' "batch: /last of a key is its message"
resp=$(curl -s -H 'X-Sim-Batch-Order: reverse' -d '[{"ref": "br:1"}, {"ref": "br:2"}]' "$BASE/batch")
is "$resp" '{"results": [{"ref": "br:2", "status": "accepted"}, {"ref": "br:1", "status": "accepted"}]}' "batch as an array, answered in reverse"
is "$(curl -s -H 'X-Sim-Fault: garbled' -d '[{"ref": "bg:1"}]' "$BASE/batch")" '<html>busy</html>' "garbled: a 200 that is not the results"
is "$(ledger bg:1)" "1 1 1" "... delivered"
is "$(curl -s -o /dev/null -w '%{http_code}' -H 'X-Sim-Fault: 503' -d '[{"ref": "b5:1"}, {"ref": "b5:2", "sim": "drop"}]' "$BASE/batch")" 503 "a batch answered 503"
is "$(ledger b5:1) $(ledger b5:2)" "1 0 1 1 0 1" "... delivers none"
curl -s -m 1 -o /dev/null -H 'X-Sim-Fault: timeout_delivered' -d '[{"ref": "bh:1"}, {"ref": "bh:2", "sim": "reject"}]' "$BASE/batch"
is "$(ledger bh:1) $(ledger bh:2)" "1 1 1 1 0 1" "a batch held, delivered: each but the rejected one"
is "$(curl -s -o /dev/null -w '%{http_code}' -d 'nope' "$BASE/batch")" 400 "not a batch: 400"
stop_sim

# ---------------------------------------------------------------- start-up options

start_sim --key-header X-Req-Id --idempotency --ledger-file "$TMP/ledger.txt" \
	--latency-ms 100 --seed 7 --status-5xx 503 --retry-after 4 --hold-ms 500 \
	--p-timeout 0 --q 0 --p-5xx 0 --p-4xx 0 --p-reset 0 --p-429 0 --threads 2
cfg=$(curl -s "$BASE/config")
for kv in 'latency_ms 100' 'hold_ms 500' 'idempotency 1' 'status_5xx 503' 'retry_after 4' 'seed 7'; do
	like "$cfg" "^$kv\$" "command line sets $kv"
done
for i in 1 2 3; do code -H 'x-req-id: opt-1' --data-binary x >/dev/null; done
is "$(ledger opt-1)" "3 1 1" "--key-header (any case) and --idempotency"
resp=$(curl -s -H 'Idempotency-Key: ignored' --data-binary 'y' "$BASE/send")
is "$resp" "$(accepted "body:$(fnv1a y)")" "the default key header is not used then"
curl -s -o /dev/null "$BASE/config?latency_ms=0"
pids=()
for i in $(seq 1 8); do
	curl -s -o /dev/null -H 'X-Req-Id: thr' --data-binary x "$BASE/send" &
	pids+=($!)
done
wait "${pids[@]}"
is "$(ledger thr)" "8 1 1" "--threads 2 shares one ledger"
curl -s "$BASE/ledger" | sort >"$TMP/ledger.live"
stop_sim
is "$STOP_RC" 0 "SIGTERM with --ledger-file: exit 0"
is "$(sort "$TMP/ledger.txt" 2>/dev/null)" "$(cat "$TMP/ledger.live")" "--ledger-file holds the ledger"

start_sim
timeout 20 $SIM_WRAPPER "$SIM" --port "$PORT" 2>"$TMP/busy.log"
is "$?" 1 "port already in use: exit 1"
like "$(cat "$TMP/busy.log")" 'cannot listen' "... with a message"
stop_sim
is "$STOP_RC" 0 "exit 0 after a quiet run"
"$SIM" --p-5xx 1.5 2>/dev/null
is "$?" 2 "probability out of range: exit 2"
"$SIM" --dlr-median-ms 100 --dlr-p99-ms 50 2>/dev/null
is "$?" 2 "--dlr-p99-ms below --dlr-median-ms: exit 2"
"$SIM" --lookup-fail-mode 404 2>/dev/null
is "$?" 2 "--lookup-fail-mode neither 5xx nor timeout: exit 2"
start_sim --dedup-window-ms 1000 --dedup-breaks 0.5 --lookup-latency-ms 7 --p-lookup-fail 0.2 \
	--lookup-fail-mode timeout --dlr-median-ms 30 --dlr-p99-ms 90 --p-dlr-lost 0.3 --p-dlr-failed 0.4
cfg=$(curl -s "$BASE/config")
for kv in 'dedup_window_ms 1000' 'dedup_breaks 0.5' 'lookup_latency_ms 7' 'p_lookup_fail 0.2' \
	'lookup_fail_mode timeout' 'dlr_median_ms 30' 'dlr_p99_ms 90' 'p_dlr_lost 0.3' 'p_dlr_failed 0.4'; do
	like "$cfg" "^$kv\$" "command line sets $kv"
done
stop_sim
"$SIM" --no-such-option 2>/dev/null
is "$?" 2 "unknown option: exit 2"
like "$("$SIM" --help)" '^Usage: provider_sim' "--help"

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
