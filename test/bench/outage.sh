#!/usr/bin/env bash
# test/bench/outage.sh: a bad day without an operator (issue 42, "Measured,
# side by side"), on the night's TLS rig (test/bench/lib/night_lib.sh's
# parts).  Two SMS gateways, each a provider simulator behind a TLS front
# of its own (nghttpx offering http/1.1, the throwaway certificate each
# provider row's ca_cert, https:// urls):
#   gw_a   the primary: json, the job's payload as it is, key header
#          Idempotency-Key
#   gw_b   the backup: another dialect, payload_map
#          {"phone": "to", "message": "text"}, the same key header
# both answering after a lognormal latency (median 120 ms, p99 600 ms), no
# fault of their own; and a push provider, APNs-style (format apns, token
# auth with a throwaway .p8 key): test/sim/push_sim.pl behind an h2 front,
# answering after 100 ms, healthy throughout.  Four types:
#   otp       at_least_once, 4 tries, deadline 15 s, lane otp, gw_a: the
#             SMS OTPs, Poisson arrivals at OUTAGE_OTP_RATE per second, one
#             transaction each (night_trickle), of which every
#             OUTAGE_PUSH_EVERY-th (half) is enqueued push first instead:
#   otp_push  at_least_once, 3 tries, deadline 15 s, lane otp, push, with
#             fallback_type otp and fallback_after OUTAGE_FALLBACK_AFTER
#             s (the guide's "push first, SMS after 5 s"): the SMS in its
#             payload's "fallback" member; the app reports delivered
#             (notif_dlr, 1 s after the push was accepted, from a session
#             of its own) OUTAGE_PUSH_DLR tenths of the pushes; the others'
#             SMS goes after fallback_after
#   alert     at_least_once, 5 tries, no deadline, lane alert, gw_a,
#             OUTAGE_ALERT_RATE per second, evenly spaced
#   promo     at_most_once, 3 tries, lane bulk, gw_a, a flood at
#             OUTAGE_PROMO_RATE per second in small transactions every 10 ms
# After OUTAGE_LEAD seconds of load, the primary gateway goes bad for
# OUTAGE_SECONDS, then the load goes on for OUTAGE_TAIL seconds, stops,
# and the jobs left drain (at most OUTAGE_DRAIN_MAX seconds).  Three cases:
#   refused   gw_a's TLS front stopped (nothing listens on its port:
#             connections refused; its simulator runs on), then started
#             again on the same port (a stopped simulator behind a running
#             front would be answered 502, a 5xx, not a refusal)
#   brownout  gw_a holds half its calls past the providers' timeout
#             (/config p_timeout=0.5, hold_ms 10 s; q=0.5: half of the held
#             calls delivered all the same), behind its front
#   http503   gw_a answers 503 to every call (/config p_5xx=1,
#             status_5xx=503; q=0: a 503 delivers nothing), behind its front
# each twice, in a cluster of its own (breakers start closed):
#   backup    gw_a's breaker on (breaker_threshold 5, the default;
#             breaker_cooldown OUTAGE_COOLDOWN s) and the SMS types'
#             backup_providers '{gw_b}'
#   today     breaker_threshold NULL, no backup_providers: as before 1.4
#             (push first with its SMS fallback in both)
# Measured per case and configuration, per type, key by key from the
# simulators' ledgers (GET /ledger of push_sim, the SMS simulators'
# written to their --ledger-file on SIGTERM): enqueued, delivered, lost,
# duplicated (copies beyond the first, over both gateways), and from
# notif_job expired, failed, still unfinished; the SMS fallbacks are their
# own row (otp_fallback: those written, less those a report cancelled),
# and a row otp_any counts each OTP once, delivered when either channel
# delivered it.  OTP latency p50/p99/max from the application's job's
# created_at (the enqueuing transaction's start, one transaction per OTP)
# to the start of the first accepted call of either channel for the user
# (notif_calls.started_at of its push, or of its SMS), over every
# delivered OTP of the run and over those enqueued during the outage, and
# of those, the push-first and the SMS-only OTPs apart; push calls
# (accepted), reports, and fallbacks written (notif_job.fallback_of: by
# what became of them); notif_provider_health sampled every 200 ms by a
# session of its own: when gw_a's breaker opened, how long it was open,
# the calls (notif_calls rows with provider gw_a) that started inside an
# open interval (from the first to the last sample that read open: a probe
# that starts in the last 200 ms is not counted) and their jobs, the calls
# the breaker refused (refused_calls); every call to gw_a during the
# outage; its at_least_once ambiguous calls (outcome unknown); and the
# seconds from the outage's end to the start of gw_a's first accepted call
# after it.  The issue's targets, with the backup, are printed and
# reported (not asserted: the exit status is 0 when the runs completed): 0
# OTPs lost (either channel) or expired (any OTP job, fallbacks included),
# OTP p99 (of those enqueued during the outage) under 2 s, at_most_once
# duplicates 0, at_least_once duplicates no more than the ambiguous calls
# of the type (both gateways'); each duplicated job traced to its
# ambiguous calls: those after one to gw_a no more than gw_a's, those
# after the backup's own shown, none without one.
#
#   bash test/bench/outage.sh
#
# About 2.2 minutes a run at scale 1, six runs: about 14 minutes.
# Environment: OUTAGE_SECONDS [60 x BENCH_SCALE, at least 10];
# OUTAGE_LEAD [20 x BENCH_SCALE, at least 5] s; OUTAGE_TAIL [30 x
# BENCH_SCALE, at least 15] s; OUTAGE_DRAIN_MAX [120] s; OUTAGE_OTP_RATE
# [10]/s; OUTAGE_PUSH_EVERY [2] (0: no push); OUTAGE_PUSH_DLR [8] tenths;
# OUTAGE_FALLBACK_AFTER [5] s; OUTAGE_ALERT_RATE [20]/s;
# OUTAGE_PROMO_RATE [300]/s; OUTAGE_COOLDOWN [5] s; OUTAGE_TIMEOUT [1] s
# (every provider's timeout); OUTAGE_CASES ["refused brownout http503"];
# OUTAGE_CONFIGS ["backup today"]; OUTAGE_FRONT_PORT [28463] (gw_a's
# front; gw_b's and push's the next two); BENCH_PORT, BENCH_SIM_PORT (gw_a;
# gw_b +1, push_sim +2), BENCH_OUT (see test/bench/lib/common.sh).  Needs
# nghttpx (nghttp2-proxy), openssl, curl, Perl's CryptX, the extension
# installed and the simulator built.  Prints what it measured as it goes,
# then RESULT lines (outage_<case>_<config>_*) and the ROW tables
# outage_types (per case, configuration and type), outage_gw_a and
# outage_push (per case and configuration) and outage_targets; BENCH_OUT
# gets outage_health_<case>_<config>.dat (seconds since the load began,
# gw_a's breaker state).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/night_lib.sh"
at_least() { awk -v v="$1" -v m="$2" 'BEGIN { print (v < m ? m : v) }'; }
OUTAGE=${OUTAGE_SECONDS:-$(at_least "$(bench_scale 60)" 10)}
LEAD=${OUTAGE_LEAD:-$(at_least "$(bench_scale 20)" 5)}
TAIL=${OUTAGE_TAIL:-$(at_least "$(bench_scale 30)" 15)}
DRAIN_MAX=${OUTAGE_DRAIN_MAX:-120}
OTP_RATE=${OUTAGE_OTP_RATE:-10}
PUSH_EVERY=${OUTAGE_PUSH_EVERY:-2}
PUSH_DLR=${OUTAGE_PUSH_DLR:-8}
FALLBACK_AFTER=${OUTAGE_FALLBACK_AFTER:-5}
ALERT_RATE=${OUTAGE_ALERT_RATE:-20}
PROMO_RATE=${OUTAGE_PROMO_RATE:-300}
COOLDOWN=${OUTAGE_COOLDOWN:-5}
TIMEOUT=${OUTAGE_TIMEOUT:-1}
CASES=${OUTAGE_CASES:-refused brownout http503}
CONFIGS=${OUTAGE_CONFIGS:-backup today}
HOLD_MS=10000
INFLIGHT=1000
SIM_A=$BENCH_SIM_PORT
SIM_B=$((BENCH_SIM_PORT + 1))
SIM_PUSH=$((BENCH_SIM_PORT + 2))
# below the ephemeral range, and not the night's (28453, 28454)
FRONT_A=${OUTAGE_FRONT_PORT:-28463}
FRONT_B=$((FRONT_A + 1))
FRONT_PUSH=$((FRONT_A + 2))
sim_args=(--latency-ms 120 --latency-p99-ms 600 --hold-ms $HOLD_MS)
command -v nghttpx >/dev/null || { echo "nghttpx is not installed (package nghttp2-proxy)" >&2; exit 2; }
bench_dir outage
# the rig's certificate, and an APNs .p8 key (the push provider signs its tokens with it)
night_cert
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$BENCH_DIR/apns.p8" 2>/dev/null
openssl pkey -in "$BENCH_DIR/apns.p8" -pubout -out "$BENCH_DIR/apns.pub" 2>/dev/null
echo "outage: scale $BENCH_SCALE: ${LEAD}s of load, then gw_a bad for ${OUTAGE}s, then ${TAIL}s more;" \
	"OTPs $OTP_RATE/s (Poisson), every ${PUSH_EVERY}th push first (SMS after ${FALLBACK_AFTER}s unless reported," \
	"$PUSH_DLR in 10 reported), alerts $ALERT_RATE/s, promotions $PROMO_RATE/s; gateways lognormal" \
	"(median 120 ms, p99 600 ms) behind TLS fronts (http/1.1), push (APNs) behind an h2 front, timeout ${TIMEOUT}s," \
	"breaker_cooldown ${COOLDOWN}s; cases: $CASES; configurations: $CONFIGS; $(nproc) cores, $(pg_config --version)"

now_s() { date +%s.%N; }
secs_between() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# stop_proc PID: SIGTERM (a simulator writes its ledger file), wait for it,
# and forget it (bench_cleanup kills only what is still running); a front's
# exit status is not asked
stop_proc() {
	local pid=$1 i keep=()
	kill -TERM "$pid" 2>/dev/null || true
	if [ "${2:-}" = front ]; then
		wait "$pid" 2>/dev/null || true
	else
		wait "$pid" || { echo "process $pid did not end cleanly" >&2; return 1; }
	fi
	for i in "${_bench_sims[@]}"; do [ "$i" = "$pid" ] || keep+=("$i"); done
	_bench_sims=("${keep[@]}")
}

# push_sim on SIM_PUSH (APNs, answers after 100 ms), until it answers
push_start() {
	local i
	perl "$BENCH_HERE/sim/push_sim.pl" --port "$SIM_PUSH" --apns-key "$BENCH_DIR/apns.pub" --delay-ms 100 \
		>"$BENCH_DIR/push_sim.log" 2>&1 &
	_bench_sims+=($!)
	for i in $(seq 1 100); do
		curl -sf --max-time 2 "http://127.0.0.1:$SIM_PUSH/health" 2>/dev/null | grep -q ok && return 0
		sleep 0.05
	done
	echo "push_sim did not start on port $SIM_PUSH" >&2
	cat "$BENCH_DIR/push_sim.log" >&2
	return 1
}

# gw_a's front on FRONT_A, until it accepts connections
front_a_start() {
	front_start gw_a "$FRONT_A" "$SIM_A" http/1.1
	front_a=${_bench_sims[-1]}
	front_wait gw_a "$FRONT_A"
}

setup_sql() {	# CONFIG
	local thr=NULL backups=NULL ca key
	if [ "$1" = backup ]; then thr=5; backups="'{gw_b}'"; fi
	ca=$(sed "s/'/''/g" "$BENCH_DIR/srv.crt")
	key=$(sed "s/'/''/g" "$BENCH_DIR/apns.p8")
	cluster_psql <<-SQL
	CREATE EXTENSION notif_deliver;
	INSERT INTO notif_provider (name, url, idempotency_header, timeout, max_inflight, breaker_threshold,
	                            breaker_cooldown, payload_map, ca_cert) VALUES
	  ('gw_a', 'https://127.0.0.1:$FRONT_A/send', 'Idempotency-Key', '$TIMEOUT s', $INFLIGHT, $thr, '$COOLDOWN s', NULL, '$ca'),
	  ('gw_b', 'https://127.0.0.1:$FRONT_B/sms', 'Idempotency-Key', '$TIMEOUT s', $INFLIGHT, 5, '$COOLDOWN s',
	   '{"phone": "to", "message": "text"}', '$ca');
	INSERT INTO notif_provider (name, url, format, auth, credentials, ca_cert, timeout, max_inflight, breaker_threshold) VALUES
	  ('push', 'https://127.0.0.1:$FRONT_PUSH', 'apns', 'apns_token',
	   jsonb_build_object('key_id', 'KEYID12345', 'team_id', 'TEAMID1234', 'private_key', '$key'),
	   '$ca', '$TIMEOUT s', 256, $thr);
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, lane, backup_providers) VALUES
	  ('otp',   'at_least_once', 4, '15 seconds', 'gw_a', 'otp',   $backups),
	  ('alert', 'at_least_once', 5, NULL,         'gw_a', 'alert', $backups),
	  ('promo', 'at_most_once',  3, NULL,         'gw_a', 'bulk',  $backups);
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, lane, fallback_type, fallback_after) VALUES
	  ('otp_push', 'at_least_once', 3, '15 seconds', 'push', 'otp', 'otp', '$FALLBACK_AFTER s');
$(night_load_sql)

	CREATE TABLE outage_stop (sampler boolean);
	INSERT INTO outage_stop VALUES (false);
	CREATE TABLE outage_health (t timestamptz, state text, consecutive_failures int, refused_calls bigint);
	CREATE TABLE outage_dlr (job_id bigint PRIMARY KEY, t timestamptz);

	-- promotions at RATE per second: every 10 ms those due by the clock, in one transaction
	CREATE PROCEDURE outage_promos(rate float8) LANGUAGE plpgsql AS \$\$
	DECLARE
	    t0 float8 := extract(epoch FROM clock_timestamp());
	    done bigint := 0;
	    target bigint;
	BEGIN
	    LOOP
	        EXIT WHEN (SELECT stop FROM night_stop);
	        target := floor(rate * (extract(epoch FROM clock_timestamp()) - t0))::bigint;
	        IF target > done THEN
	            PERFORM notif_enqueue(g, 'promo', 'flood', '{"to":"+84900000000","text":"Friday night: -50% until midnight"}'::jsonb)
	              FROM generate_series(done + 1, target) g;
	            done := target;
	            COMMIT;
	        ELSE
	            PERFORM pg_sleep(0.01);
	        END IF;
	    END LOOP;
	END \$\$;

	-- gw_a's breaker every 200 ms; and the app's delivered reports: TENTHS in
	-- 10 of the pushes (by their number), 1 s after the push was accepted
	CREATE PROCEDURE outage_sample(push_every int, tenths int) LANGUAGE plpgsql AS \$\$
	DECLARE
	    r record;
	BEGIN
	    LOOP
	        EXIT WHEN (SELECT sampler FROM outage_stop);
	        INSERT INTO outage_health SELECT clock_timestamp(), state, consecutive_failures, refused_calls
	          FROM notif_provider_health WHERE name = 'gw_a';
	        FOR r IN SELECT j.id, j.kind || ':' || j.user_id || ':' || j.order_id AS k FROM notif_job j
	                  WHERE j.kind = 'otp_push' AND j.status = 'sent' AND j.sent_at < clock_timestamp() - interval '1 s'
	                    AND (j.user_id / push_every) % 10 < tenths
	                    AND NOT EXISTS (SELECT 1 FROM outage_dlr d WHERE d.job_id = j.id) LOOP
	            PERFORM notif_dlr(r.k, true);
	            INSERT INTO outage_dlr VALUES (r.id, clock_timestamp());
	        END LOOP;
	        COMMIT;
	        PERFORM pg_sleep(0.2);
	    END LOOP;
	END \$\$;
	SQL
	local lane
	for lane in otp alert bulk; do
		wait_sql "SELECT count(*) >= 1 FROM pg_stat_activity WHERE application_name = 'notif_deliver sender $lane'" 30
	done
}

# fault CASE on|off: make gw_a bad, or good again
fault() {
	local c=$1 how=$2 i
	case "$c:$how" in
	refused:on)
		stop_proc "$front_a" front
		# (its worker too: until the port refuses)
		for i in $(seq 1 100); do
			(exec 7<>"/dev/tcp/127.0.0.1/$FRONT_A") 2>/dev/null || return 0
			sleep 0.05
		done
		echo "gw_a's front still accepts connections" >&2
		exit 1 ;;
	refused:off) front_a_start ;;
	brownout:on) sim_get "$SIM_A" "/config?p_timeout=0.5&q=0.5" >/dev/null ;;
	brownout:off) sim_get "$SIM_A" "/config?p_timeout=0&q=0" >/dev/null ;;
	http503:on) sim_get "$SIM_A" "/config?p_5xx=1&status_5xx=503&q=0" >/dev/null ;;
	http503:off) sim_get "$SIM_A" "/config?p_5xx=0" >/dev/null ;;
	*) echo "unknown case $c" >&2; exit 2 ;;
	esac
}

# open intervals of gw_a's breaker: from the first to the last of each run
# of samples that read open
OPEN_SQL="WITH s AS (SELECT t, state = 'open' AS o,
                     sum(CASE WHEN state = 'open' THEN 0 ELSE 1 END) OVER (ORDER BY t) AS grp
                FROM outage_health),
          iv AS (SELECT min(t) AS t_from, max(t) AS t_to FROM s WHERE o GROUP BY grp)"

one_run() {	# CASE CONFIG
	local c=$1 cfg=$2 tag="outage_$1_$2" t0 out_on out_off t_stop pids p drained k
	run_dir=$BENCH_DIR/$c-$cfg
	mkdir -p "$run_dir"
	chmod 755 "$run_dir"
	echo "== $c, $cfg"
	sim_start gw_a "$SIM_A" "${sim_args[@]}" --seed 41 --ledger-file "$run_dir/ledger_a.txt"
	sim_a=${_bench_sims[-1]}
	sim_start gw_b "$SIM_B" "${sim_args[@]}" --seed 42 --ledger-file "$run_dir/ledger_b.txt"
	sim_b=${_bench_sims[-1]}
	push_start
	sim_push=${_bench_sims[-1]}
	front_a_start
	front_start gw_b "$FRONT_B" "$SIM_B" http/1.1
	front_b=${_bench_sims[-1]}
	front_start push "$FRONT_PUSH" "$SIM_PUSH" h2
	front_push=${_bench_sims[-1]}
	front_wait gw_b "$FRONT_B"
	front_wait push "$FRONT_PUSH"
	cluster_start "$run_dir/pg" "$BENCH_PORT" "notif_deliver.database = 'postgres'" \
		"notif_deliver.max_inflight = $INFLIGHT" "max_worker_processes = 32"
	setup_sql "$cfg"

	t0=$(now_s)
	pids=()
	cluster_psql -c "CALL outage_sample(greatest($PUSH_EVERY, 1), $PUSH_DLR)" >"$run_dir/sample.log" 2>&1 &
	pids+=($!)
	cluster_psql -c "CALL night_trickle('otp', $OTP_RATE, true, 'nd', $PUSH_EVERY)" >"$run_dir/otp.log" 2>&1 &
	pids+=($!)
	cluster_psql -c "CALL night_trickle('alert', $ALERT_RATE, false)" >"$run_dir/alert.log" 2>&1 &
	pids+=($!)
	cluster_psql -c "CALL outage_promos($PROMO_RATE)" >"$run_dir/promo.log" 2>&1 &
	pids+=($!)
	sleep "$LEAD"
	# (the start: when gw_a is told to go bad, or its front is told to stop)
	out_on=$(now_s)
	fault "$c" on
	echo "  $(secs_between "$t0" "$out_on")s: gw_a $c"
	sleep "$OUTAGE"
	# (the end: when gw_a is told to be good again, or its front is started again)
	out_off=$(now_s)
	fault "$c" off
	echo "  $(secs_between "$t0" "$out_off")s: gw_a good again ($(secs_between "$out_on" "$out_off")s bad)"
	sleep "$TAIL"
	# the load stops; the sampler (and the app's reports) go on while the jobs left drain
	cluster_psql -c "UPDATE night_stop SET stop = true" >/dev/null
	for p in "${pids[@]:1}"; do wait "$p" || { cat "$run_dir"/*.log >&2; exit 1; }; done
	t_stop=$(now_s)
	drained=yes
	wait_sql "$(nd_idle_sql)" "$DRAIN_MAX" || drained=no
	cluster_psql -c "UPDATE outage_stop SET sampler = true" >/dev/null
	wait "${pids[0]}" || { cat "$run_dir/sample.log" >&2; exit 1; }
	echo "  load stopped at $(secs_between "$t0" "$t_stop")s; drained: $drained ($(secs_between "$t_stop" "$(now_s)")s later)"

	# ---- the ledgers: gw_a's and gw_b's (written as they stop), push_sim's (by device token)
	curl -sf --max-time 10 "http://127.0.0.1:$SIM_PUSH/ledger" >"$run_dir/ledger_push"
	push_calls_sim=$(curl -sf --max-time 10 "http://127.0.0.1:$SIM_PUSH/stats" | awk '$1 == "apns_calls" { print $2 }')
	stop_proc "$sim_a"
	stop_proc "$sim_b"
	stop_proc "$sim_push"
	for p in $front_a $front_b $front_push; do stop_proc "$p" front; done
	cp "$run_dir/ledger_a.txt" "$run_dir/ledger_a"
	cp "$run_dir/ledger_b.txt" "$run_dir/ledger_b"
	# each job: its key in the ledgers (a push's: its device token), its row (the SMS
	# a fallback wrote: otp_fallback), status, whether a report cancelled it, its OTP (user)
	cluster_psql -At -F' ' -c "SELECT CASE WHEN kind = 'otp_push' THEN payload->>'device_token'
	                                       ELSE kind || ':' || user_id || ':' || order_id END,
	                                  CASE WHEN fallback_of IS NOT NULL THEN 'otp_fallback' ELSE kind END, status,
	                                  CASE WHEN last_error = 'cancelled' THEN 'cancelled' ELSE '-' END,
	                                  CASE WHEN kind IN ('otp', 'otp_push') THEN user_id::text ELSE '-' END, id
	                             FROM notif_job" >"$run_dir/jobs"
	# per type: enqueued delivered lost duplicated expired failed unfinished (a fallback a report
	# cancelled is not counted: it was never due), an OTP (otp_any) delivered by either channel,
	# and delivered keys no job has; each at_least_once job delivered more than once (its id, row,
	# copies beyond the first) into dups
	: >"$run_dir/dups"
	awk -v dups="$run_dir/dups" 'FILENAME ~ /ledger/ { if ($3 >= 1) del[$1] += $3; next }
		$4 == "cancelled" && $2 == "otp_fallback" { delete del[$1]; next }
		{ n[$2]++; if ($3 == "expired") ex[$2]++; else if ($3 == "failed") fa[$2]++;
		  else if ($3 != "sent") un[$2]++
		  if ($5 != "-") {
		      if ($2 != "otp_fallback") otp[$5] = 1
		      if ($3 == "expired") oex[$5] = 1; else if ($3 != "sent" && $3 != "failed") oun[$5] = 1 }
		  if ($1 in del) { d[$2]++; dup[$2] += del[$1] - 1; if ($5 != "-") got[$5] = 1
		      if (del[$1] > 1 && $2 != "promo" && $2 != "otp_push") print $6, $2, del[$1] - 1 >dups
		      delete del[$1] } }
		END { for (t in n) printf "%s %d %d %d %d %d %d %d\n", t, n[t], d[t], n[t] - d[t], dup[t], ex[t], fa[t], un[t]
		      for (u in otp) { on++; if (u in got) od++; else { ol++; if (u in oex) oe++; if (u in oun) ou++ } }
		      printf "otp_any %d %d %d - %d - %d\n", on, od, ol, oe, ou
		      s = 0; for (k in del) s++; printf "~stray %d 0 0 0 0 0 0\n", s }' \
		"$run_dir/ledger_a" "$run_dir/ledger_b" "$run_dir/ledger_push" "$run_dir/jobs" | sort >"$run_dir/types"
	read -r _ stray _ < <(grep '^~stray' "$run_dir/types")
	[ "$stray" = 0 ] || { echo "the ledgers have $stray delivered keys that no job has" >&2; exit 1; }

	# ---- gw_a: its breaker, its calls
	local on_ts="to_timestamp($out_on)" off_ts="to_timestamp($out_off)"
	read -r opened open_s intervals open_calls open_jobs refused out_calls out_unreached out_unknown out_accepted \
		amb_otp amb_alert amb_promo back_s <<<"$(cluster_psql -At -F' ' -c "
		$OPEN_SQL
		SELECT coalesce(round(extract(epoch FROM (SELECT min(t_from) FROM iv WHERE t_from >= $on_ts) - $on_ts)::numeric, 1)::text, 'never'),
		       coalesce(round(extract(epoch FROM (SELECT sum(t_to - t_from) FROM iv))::numeric, 1), 0),
		       (SELECT count(*) FROM iv),
		       (SELECT count(*) FROM notif_calls c WHERE c.provider = 'gw_a'
		           AND EXISTS (SELECT 1 FROM iv WHERE c.started_at BETWEEN iv.t_from AND iv.t_to)),
		       (SELECT count(DISTINCT c.job_id) FROM notif_calls c WHERE c.provider = 'gw_a'
		           AND EXISTS (SELECT 1 FROM iv WHERE c.started_at BETWEEN iv.t_from AND iv.t_to)),
		       coalesce((SELECT max(refused_calls) FROM outage_health), 0),
		       (SELECT count(*) FROM notif_calls WHERE provider = 'gw_a' AND started_at BETWEEN $on_ts AND $off_ts),
		       (SELECT count(*) FROM notif_calls WHERE provider = 'gw_a' AND started_at BETWEEN $on_ts AND $off_ts AND outcome = 'unreached'),
		       (SELECT count(*) FROM notif_calls WHERE provider = 'gw_a' AND started_at BETWEEN $on_ts AND $off_ts AND outcome = 'unknown'),
		       (SELECT count(*) FROM notif_calls WHERE provider = 'gw_a' AND started_at BETWEEN $on_ts AND $off_ts AND outcome = 'accepted'),
		       (SELECT count(*) FROM notif_calls c JOIN notif_job j ON j.id = c.job_id WHERE c.provider = 'gw_a' AND c.outcome = 'unknown' AND j.kind = 'otp'),
		       (SELECT count(*) FROM notif_calls c JOIN notif_job j ON j.id = c.job_id WHERE c.provider = 'gw_a' AND c.outcome = 'unknown' AND j.kind = 'alert'),
		       (SELECT count(*) FROM notif_calls c JOIN notif_job j ON j.id = c.job_id WHERE c.provider = 'gw_a' AND c.outcome = 'unknown' AND j.kind = 'promo'),
		       coalesce(round(extract(epoch FROM (SELECT min(started_at) FROM notif_calls WHERE provider = 'gw_a'
		           AND outcome = 'accepted' AND started_at >= $off_ts) - $off_ts)::numeric, 1)::text, 'never')")"
	# at_least_once: the backup's ambiguous calls (its own timeouts: the rig's latency tail), and
	# each duplicated job's copies by where its ambiguous calls went (gw_a's first: a job with one
	# there counts for gw_a; none anywhere would break the guarantee)
	read -r amb_b_otp amb_b_alert <<<"$(cluster_psql -At -F' ' -c "
		SELECT count(*) FILTER (WHERE j.kind = 'otp'), count(*) FILTER (WHERE j.kind = 'alert')
		  FROM notif_calls c JOIN notif_job j ON j.id = c.job_id WHERE c.provider = 'gw_b' AND c.outcome = 'unknown'")"
	local dup_values
	dup_values=$(awk '{ printf "%s(%s, %s, %s)", (NR > 1 ? ", " : ""), $1, ($2 == "alert" ? "'"'alert'"'" : "'"'otp'"'"), $3 }' "$run_dir/dups")
	read -r dup_a_otp dup_b_otp dup_none_otp dup_a_alert dup_b_alert dup_none_alert <<<"$(cluster_psql -At -F' ' -c "
		WITH d(job_id, t, extra) AS (SELECT * FROM (VALUES ${dup_values:-(0::bigint, 'none', 0)}) v),
		     w AS (SELECT d.t, d.extra,
		                  CASE WHEN EXISTS (SELECT 1 FROM notif_calls c WHERE c.job_id = d.job_id AND c.outcome = 'unknown' AND c.provider = 'gw_a') THEN 'a'
		                       WHEN EXISTS (SELECT 1 FROM notif_calls c WHERE c.job_id = d.job_id AND c.outcome = 'unknown') THEN 'b'
		                       ELSE 'none' END AS via FROM d)
		SELECT coalesce(sum(extra) FILTER (WHERE t = 'otp' AND via = 'a'), 0), coalesce(sum(extra) FILTER (WHERE t = 'otp' AND via = 'b'), 0),
		       coalesce(sum(extra) FILTER (WHERE t = 'otp' AND via = 'none'), 0), coalesce(sum(extra) FILTER (WHERE t = 'alert' AND via = 'a'), 0),
		       coalesce(sum(extra) FILTER (WHERE t = 'alert' AND via = 'b'), 0), coalesce(sum(extra) FILTER (WHERE t = 'alert' AND via = 'none'), 0)
		  FROM w")"
	# OTP latency: from the application's job's created_at (a push's or an SMS's) to the start of the
	# first accepted call of either channel for its user; of the run's, of those enqueued during the
	# outage, and of those the push-first ones and the SMS-only ones
	local lat_sql="WITH app AS (SELECT kind, user_id, created_at FROM notif_job
		                           WHERE kind IN ('otp', 'otp_push') AND fallback_of IS NULL),
		     acc AS (SELECT j.user_id, min(c.started_at) AS first_acc
		               FROM notif_job j JOIN notif_calls c ON c.job_id = j.id AND c.outcome = 'accepted'
		              WHERE j.kind IN ('otp', 'otp_push') GROUP BY j.user_id),
		     l AS (SELECT app.kind, app.created_at, extract(epoch FROM acc.first_acc - app.created_at) * 1000 AS ms
		             FROM app JOIN acc USING (user_id))"
	pct() {	# WHERE: p50 / p99 / max, and how many
		cluster_psql -At -F' ' -c "$lat_sql
			SELECT coalesce(round(percentile_disc(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1)::text, 'none'),
			       coalesce(round(percentile_disc(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 1)::text, 'none'),
			       coalesce(round(max(ms)::numeric, 1)::text, 'none'), count(*)
			  FROM l WHERE $1"
	}
	local during="created_at BETWEEN $on_ts AND $off_ts"
	read -r p50 p99 pmax _ <<<"$(pct true)"
	read -r o50 o99 omax n_out <<<"$(pct "$during")"
	read -r op50 op99 opmax n_op <<<"$(pct "$during AND kind = 'otp_push'")"
	read -r os50 os99 osmax n_os <<<"$(pct "$during AND kind = 'otp'")"
	# push: calls (accepted), the app's reports, the fallbacks written and what became of them
	read -r n_push n_sms push_calls push_acc dlrs fb fb_cancel fb_sent fb_exp fb_fail fb_open <<<"$(cluster_psql -At -F' ' -c "
		SELECT (SELECT count(*) FROM notif_job WHERE kind = 'otp_push'),
		       (SELECT count(*) FROM notif_job WHERE kind = 'otp' AND fallback_of IS NULL),
		       (SELECT count(*) FROM notif_calls WHERE provider = 'push'),
		       (SELECT count(*) FROM notif_calls WHERE provider = 'push' AND outcome = 'accepted'),
		       (SELECT count(*) FROM outage_dlr),
		       count(*), count(*) FILTER (WHERE status = 'failed' AND last_error = 'cancelled'),
		       count(*) FILTER (WHERE status = 'sent'), count(*) FILTER (WHERE status = 'expired'),
		       count(*) FILTER (WHERE status = 'failed' AND last_error IS DISTINCT FROM 'cancelled'),
		       count(*) FILTER (WHERE status NOT IN ('sent', 'expired', 'failed'))
		  FROM notif_job WHERE fallback_of IS NOT NULL")"
	if [ -n "${BENCH_OUT:-}" ]; then
		cluster_psql -At -F' ' -c "SELECT round((extract(epoch FROM t) - $t0)::numeric, 2),
			CASE state WHEN 'closed' THEN 0 WHEN 'half_open' THEN 1 ELSE 2 END, consecutive_failures, refused_calls
			FROM outage_health ORDER BY t" >"$BENCH_OUT/outage_health_${c}_${cfg}.dat"
	fi

	# ---- print
	printf '  %-12s %8s %9s %6s %10s %8s %7s %10s\n' type enqueued delivered lost duplicated expired failed unfinished
	while read -r t n d l dup ex fa un; do
		[ "$t" = "~stray" ] && continue
		printf '  %-12s %8s %9s %6s %10s %8s %7s %10s\n' "$t" "$n" "$d" "$l" "$dup" "$ex" "$fa" "$un"
		row outage_types "$c" "$cfg" "$t" "$n" "$d" "$l" "$dup" "$ex" "$fa" "$un"
		for k in enqueued:$n delivered:$d lost:$l duplicated:$dup expired:$ex failed:$fa unfinished:$un; do
			[ "${k#*:}" = - ] || result "${tag}_${t}_${k%%:*}" "${k#*:}"
		done
	done <"$run_dir/types"
	echo "  OTP latency to the first accepted call of either channel: p50 $p50 ms, p99 $p99 ms, max $pmax ms;" \
		"of the $n_out enqueued during the outage: p50 $o50 ms, p99 $o99 ms, max $omax ms" \
		"(push first, $n_op: $op50 / $op99 / $opmax; SMS only, $n_os: $os50 / $os99 / $osmax)"
	echo "  push: $n_push OTPs push first, $n_sms SMS only; $push_calls push calls ($push_acc accepted; push_sim saw $push_calls_sim)," \
		"$dlrs reported delivered; $fb fallbacks written: $fb_cancel cancelled by a report, $fb_sent sent, $fb_exp expired," \
		"$fb_fail failed, $fb_open unfinished"
	echo "  gw_a: breaker opened $opened$([ "$opened" = never ] || echo s) into the outage, open ${open_s}s in $intervals interval(s), $open_calls calls" \
		"($open_jobs jobs) started while it was open, $refused refused; during the outage $out_calls calls" \
		"($out_unreached unreached, $out_unknown unknown, $out_accepted accepted); ambiguous calls otp $amb_otp," \
		"alert $amb_alert, promo $amb_promo (gw_b's: otp $amb_b_otp, alert $amb_b_alert); first accepted call $back_s$([ "$back_s" = never ] || echo s) after the outage's end"
	# for the log: the breaker's changes of state, the calls started while it was open,
	# a few duplicated keys with their calls, and the jobs that did not end sent
	cluster_psql -c "SELECT round(extract(epoch FROM t - $on_ts)::numeric, 1) AS s_into_outage, state, consecutive_failures, refused_calls
		FROM (SELECT *, lag(state) OVER (ORDER BY t) AS prev FROM outage_health) h
		WHERE prev IS DISTINCT FROM state ORDER BY t"
	cluster_psql -c "$OPEN_SQL
		SELECT c.job_id, j.kind, c.try, round(extract(epoch FROM c.started_at - $on_ts)::numeric, 2) AS s_into_outage,
		       c.outcome, c.http_status, left(c.error, 60) AS error
		  FROM notif_calls c JOIN notif_job j ON j.id = c.job_id
		 WHERE c.provider = 'gw_a' AND EXISTS (SELECT 1 FROM iv WHERE c.started_at BETWEEN iv.t_from AND iv.t_to)
		 ORDER BY c.started_at LIMIT 20"
	awk '{ if ($3 >= 1) del[$1] += $3 } END { for (k in del) if (del[k] > 1) print k }' "$run_dir/ledger_a" "$run_dir/ledger_b" |
		grep -v '^promo:' | sort -t: -k2,2n | head -3 >"$run_dir/dup_keys" || true
	while read -r k; do
		cluster_psql -c "SELECT j.id AS job_id, j.kind, j.status, c.try, c.provider, round(extract(epoch FROM c.started_at - $on_ts)::numeric, 2) AS s_into_outage,
		       c.outcome, c.http_status FROM notif_job j JOIN notif_calls c ON c.job_id = j.id
		 WHERE j.kind || ':' || j.user_id || ':' || j.order_id = '$k' ORDER BY c.started_at"
	done <"$run_dir/dup_keys"
	# every call not accepted, by provider, phase of the run, outcome and error (a timeout before the
	# outage, with no fault made, is the machine's or the rig's, not gw_a's), with how long they took
	cluster_psql -c "SELECT c.provider, CASE WHEN c.started_at < $on_ts THEN 'before' WHEN c.started_at <= $off_ts
		       THEN 'during' ELSE 'after' END AS phase, c.outcome, regexp_replace(left(c.error, 60), '[0-9]+', 'N', 'g') AS error,
		       count(*), round(avg(extract(epoch FROM c.ended_at - c.started_at)) * 1000) AS avg_ms
		  FROM notif_calls c WHERE c.outcome <> 'accepted' GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
	cluster_psql -c "SELECT kind, fallback_of IS NOT NULL AS fallback, status, outcome, provider,
		regexp_replace(last_error, '[0-9]+', 'N', 'g') AS last_error, count(*)
		FROM notif_job WHERE status <> 'sent' GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6"
	row outage_gw_a "$c" "$cfg" "$p50 / $p99 / $pmax" "$o50 / $o99 / $omax" "$opened" "$open_s ($intervals)" \
		"$open_calls ($open_jobs)" "$refused" "$out_calls ($out_unreached / $out_unknown / $out_accepted)" \
		"$amb_otp / $amb_alert / $amb_promo" "$back_s"
	row outage_push "$c" "$cfg" "$n_push / $n_sms" "$push_calls ($push_acc)" "$dlrs" \
		"$fb ($fb_cancel / $fb_sent / $fb_exp / $fb_fail)" "$op50 / $op99 / $opmax" "$os50 / $os99 / $osmax"
	for k in otp_p50_ms:$p50 otp_p99_ms:$p99 otp_max_ms:$pmax otp_outage_p50_ms:$o50 otp_outage_p99_ms:$o99 \
		otp_outage_max_ms:$omax otp_outage_n:$n_out otp_push_outage_p50_ms:$op50 otp_push_outage_p99_ms:$op99 \
		otp_push_outage_max_ms:$opmax otp_push_outage_n:$n_op otp_sms_outage_p50_ms:$os50 \
		otp_sms_outage_p99_ms:$os99 otp_sms_outage_max_ms:$osmax otp_sms_outage_n:$n_os \
		otp_push_first:$n_push otp_sms_only:$n_sms push_calls:$push_calls push_accepted:$push_acc \
		push_calls_sim:$push_calls_sim push_reports:$dlrs fallbacks:$fb fallbacks_cancelled:$fb_cancel \
		fallbacks_sent:$fb_sent fallbacks_expired:$fb_exp fallbacks_failed:$fb_fail fallbacks_unfinished:$fb_open \
		breaker_opened_s:$opened open_s:$open_s open_intervals:$intervals \
		open_calls:$open_calls open_jobs:$open_jobs refused_calls:$refused outage_calls:$out_calls \
		outage_unreached:$out_unreached outage_unknown:$out_unknown outage_accepted:$out_accepted \
		ambiguous_otp:$amb_otp ambiguous_alert:$amb_alert ambiguous_promo:$amb_promo back_s:$back_s \
		outage_s:$(secs_between "$out_on" "$out_off") drained:$drained; do
		result "${tag}_${k%%:*}" "${k#*:}"
	done

	# ---- the targets (with the backup)
	if [ "$cfg" = backup ]; then
		v() { awk -v t="$1" '$1 == t { print $'"$2"' }' "$run_dir/types"; }
		target() {	# WHAT MEASURED HELD
			echo "  target $1: $2: $3"
			row outage_targets "$c" "$1" "$2" "$3"
		}
		local otp_lost otp_exp promo_dup d a ok
		otp_lost=$(v otp_any 4)
		# every OTP job that expired: SMS only, push, and the fallbacks' SMS
		otp_exp=$(awk '$1 == "otp" || $1 == "otp_push" || $1 == "otp_fallback" { s += $6 } END { print s + 0 }' "$run_dir/types")
		promo_dup=$(v promo 5)
		target "OTPs lost 0 (either channel)" "$otp_lost" "$([ "$otp_lost" = 0 ] && echo held || echo '**missed**')"
		target "OTP jobs expired 0 (SMS, push and fallbacks)" "$otp_exp" "$([ "$otp_exp" = 0 ] && echo held || echo '**missed**')"
		ok=$(awk -v p="$o99" 'BEGIN { print (p ~ /^[0-9.]+$/ && p + 0 < 2000) ? "held" : "**missed**" }')
		target "OTP p99 (enqueued during the outage, either channel) < 2000 ms" "$o99" "$ok"
		ok=$(awk -v p="$os99" 'BEGIN { print (p ~ /^[0-9.]+$/ && p + 0 < 2000) ? "held" : "**missed**" }')
		target "... of the SMS-only OTPs < 2000 ms" "$os99" "$ok"
		target "at_most_once (promo) duplicates 0" "$promo_dup" "$([ "$promo_dup" = 0 ] && echo held || echo '**missed**')"
		# at_least_once: every copy beyond the first needs an ambiguous call; the issue's bound
		# counts gw_a's (the outage's), the backup's own timeouts make their own
		local t a b da db dn
		for k in otp:$amb_otp:$amb_b_otp:$dup_a_otp:$dup_b_otp:$dup_none_otp \
			alert:$amb_alert:$amb_b_alert:$dup_a_alert:$dup_b_alert:$dup_none_alert; do
			IFS=: read -r t a b da db dn <<<"$k"
			# (an OTP's SMS: the application's and the fallbacks', both of type otp)
			if [ "$t" = otp ]; then
				d=$(awk '$1 == "otp" || $1 == "otp_fallback" { s += $5 } END { print s + 0 }' "$run_dir/types")
			else
				d=$(v "$t" 5)
			fi
			ok=$([ "$d" -le "$((a + b))" ] && echo held || echo '**missed**')
			target "$t duplicates <= ambiguous calls (gw_a + gw_b)" "$d <= $a + $b" "$ok"
			ok=$([ "$da" -le "$a" ] && echo held || echo '**missed**')
			target "... those after an ambiguous call to gw_a <= gw_a's ambiguous calls" "$da <= $a" "$ok"
			target "... those after the backup's own ambiguous calls" "$db" "-"
			target "... those with no ambiguous call 0" "$dn" "$([ "$dn" = 0 ] && echo held || echo '**missed**')"
			result "${tag}_${t}_dup_over_ambiguous" "$((d - a - b))"
			result "${tag}_${t}_dup_gw_a_over_ambiguous" "$((da - a))"
			result "${tag}_${t}_dup_via_gw_a" "$da"
			result "${tag}_${t}_dup_via_gw_b" "$db"
			result "${tag}_${t}_dup_via_none" "$dn"
			result "${tag}_${t}_ambiguous_gw_b" "$b"
		done
	fi
	cluster_stop
	rm -rf "$run_dir/pg"
}

for c in $CASES; do
	for cfg in $CONFIGS; do
		one_run "$c" "$cfg"
	done
done
result outage_scale "$BENCH_SCALE"
result outage_seconds "$OUTAGE"
result outage_lead_seconds "$LEAD"
result outage_tail_seconds "$TAIL"
result outage_otp_rate "$OTP_RATE"
result outage_alert_rate "$ALERT_RATE"
result outage_promo_rate "$PROMO_RATE"
result outage_cooldown_s "$COOLDOWN"
result outage_push_every "$PUSH_EVERY"
result outage_push_dlr_tenths "$PUSH_DLR"
result outage_fallback_after_s "$FALLBACK_AFTER"
result outage_timeout_s "$TIMEOUT"
