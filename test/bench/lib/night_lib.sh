# test/bench/lib/night_lib.sh: the rig of the night (test/bench/night.sh), of
# the night through PgQ beside it (test/bench/night_peers.sh) and of the
# soak (test/bench/soak.sh), and the parts of it the outage
# (test/bench/outage.sh) builds its own rig from.  Source it after
# test/bench/lib/common.sh.
#
#   night_rig NAME RETENTION [postgresql.conf lines...]
#       a work folder (bench_dir NAME); a throwaway self-signed certificate;
#       two provider simulators (sms on BENCH_SIM_PORT, push on the next
#       port), each answering after a lognormal latency (median 120 ms, p99
#       600 ms) and holding 0.5% of calls unanswered (half of those
#       delivered, q = 0.5), each writing its ledger to
#       $BENCH_DIR/ledger_{sms,push}.txt when stopped (SIGTERM); a TLS front (nghttpx) for each: sms offering
#       only http/1.1 on FRONT_SMS, push offering h2 (100 streams per
#       connection) on FRONT_PUSH, each logging its calls' client ports in
#       $BENCH_DIR/access_{sms,push}.log; a cluster with the extension, four
#       providers (sms, sms_otp, sms_bulk on the sms front, push on the push
#       front, each with the certificate as its ca_cert and a TIMEOUT s
#       timeout), four types (otp, alert, promo_sms, promo_push; retention
#       RETENTION), lane bulk with BULK_SENDERS senders, and the load
#       procedures night_promos(n, rate[, sys]) and night_trickle (below)
#       with their tables night_log, night_progress and night_stop (see the
#       SQL below; sys 'pgq' enqueues the same jobs as events of PgQ's
#       queues night_bulk, night_otp and night_alert, which night_peers.sh
#       creates).  Returns once every lane's sender runs.
#   night_batching N
#       the bulk providers (sms_bulk, push) take up to N messages per call
#       (notif_provider.batch_max) on their simulator's /batch: each message
#       its key in "ref" (ref_field), the results in request order; N 1: one
#       message per call on /send, as before 1.4.  Returns once the bulk
#       lane's sender has read it.  NIGHT_BATCH_WAIT_MS [0]: their
#       batch_wait.
#   night_cert
#       the throwaway certificate: $BENCH_DIR/srv.key and srv.crt (P-256,
#       for 127.0.0.1), what front_start serves and a provider's ca_cert
#       trusts
#   night_load_sql
#       prints the SQL of the trickle every rig shares: the tables night_log
#       and night_stop, night_body(kind), and night_trickle(kind, rate,
#       poisson[, sys[, push_every]]): one job of kind K per transaction,
#       RATE per second (Poisson arrivals, or evenly spaced), until
#       night_stop.stop; with push_every N > 0, every Nth OTP is enqueued
#       push first instead (kind otp_push, an APNs payload to a device
#       token of its own, "a0" and the number in hex, and the SMS as its
#       "fallback" member)
#
# It reads INFLIGHT, PUSH_CONNS, BULK_SENDERS, TIMEOUT, FRONT_SMS and sets
# FRONT_PUSH, SIM_SMS, SIM_PUSH, sim_pid_sms, sim_pid_push, front_pid_sms,
# front_pid_push; front_pids PID lists a front's master and its worker.

front_pids() {	# the master and its worker
	echo "$1" $(ps -o pid= --ppid "$1")
}

night_batching() {
	if [ "$1" -gt 1 ]; then
		cluster_psql -c "UPDATE notif_provider SET url = replace(url, '/send', '/batch'), ref_field = 'ref', batch_max = $1,
			batch_wait = '${NIGHT_BATCH_WAIT_MS:-0} ms',
			batch_format = '{\"field\": \"messages\"}',
			batch_results = '{\"path\": \"results\", \"field\": \"status\", \"accepted\": [\"accepted\"], \"rejected\": [\"rejected\"]}'
			WHERE name IN ('sms_bulk', 'push')" >/dev/null
	else
		cluster_psql -c "UPDATE notif_provider SET url = replace(url, '/batch', '/send'), ref_field = NULL, batch_max = NULL,
			batch_format = NULL, batch_results = NULL, batch_wait = '0' WHERE name IN ('sms_bulk', 'push')" >/dev/null
	fi
	wait_sql "SELECT notif_config_applied('bulk')" 30
}

night_cert() {
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=127.0.0.1 \
		-addext "subjectAltName=IP:127.0.0.1" -keyout "$BENCH_DIR/srv.key" -out "$BENCH_DIR/srv.crt" 2>/dev/null
}

night_rig() {
	local name=$1 RETENTION=$2 lane
	SIM_SMS=$BENCH_SIM_PORT
	SIM_PUSH=$((BENCH_SIM_PORT + 1))
	FRONT_PUSH=$((FRONT_SMS + 1))
	shift 2
	command -v nghttpx >/dev/null || { echo "nghttpx is not installed (package nghttp2-proxy)" >&2; exit 2; }

	bench_dir "$name"
	night_cert
	# the providers: lognormal latency, 0.5% held (the client times out), half of those delivered
	sim_args=(--latency-ms 120 --latency-p99-ms 600 --p-timeout 0.005 --q 0.5 --hold-ms 10000)
	sim_start sms "$SIM_SMS" "${sim_args[@]}" --seed 32 --ledger-file "$BENCH_DIR/ledger_sms.txt"
	sim_start push "$SIM_PUSH" "${sim_args[@]}" --seed 33 --ledger-file "$BENCH_DIR/ledger_push.txt"
	sim_pid_sms=${_bench_sims[0]}
	sim_pid_push=${_bench_sims[1]}

	front_start sms "$FRONT_SMS" "$SIM_SMS" http/1.1
	front_start push "$FRONT_PUSH" "$SIM_PUSH" h2
	front_wait sms "$FRONT_SMS"
	front_wait push "$FRONT_PUSH"
	front_pid_sms=${_bench_sims[2]}
	front_pid_push=${_bench_sims[3]}

	cluster_start "$BENCH_DIR/pg" "$BENCH_PORT" "notif_deliver.database = 'postgres'" \
		"notif_deliver.max_inflight = $INFLIGHT" "max_worker_processes = 32" "max_wal_size = '4GB'" "$@"
	ca=$(sed "s/'/''/g" "$BENCH_DIR/srv.crt")
	half=$((INFLIGHT / 2))
	cluster_psql <<-SQL
	CREATE EXTENSION notif_deliver;
	INSERT INTO notif_provider (name, url, idempotency_header, timeout, max_inflight, max_connections, ca_cert) VALUES
	  ('sms',      'https://127.0.0.1:$FRONT_SMS/send',  'Idempotency-Key', '$TIMEOUT s', 256,   1, '$ca'),
	  ('sms_otp',  'https://127.0.0.1:$FRONT_SMS/send',  'Idempotency-Key', '$TIMEOUT s', 256,   1, '$ca'),
	  ('sms_bulk', 'https://127.0.0.1:$FRONT_SMS/send',  'Idempotency-Key', '$TIMEOUT s', $half, 1, '$ca'),
	  ('push',     'https://127.0.0.1:$FRONT_PUSH/send', 'Idempotency-Key', '$TIMEOUT s', $half, $PUSH_CONNS, '$ca');
	INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, lane, retention) VALUES
	  ('otp',        'at_least_once', 3, '15 seconds', 'sms_otp',  'otp',   '$RETENTION'),
	  ('alert',      'at_least_once', 5, NULL,         'sms',      'alert', '$RETENTION'),
	  ('promo_sms',  'at_most_once',  3, NULL,         'sms_bulk', 'bulk',  '$RETENTION'),
	  ('promo_push', 'at_most_once',  3, NULL,         'push',     'bulk',  '$RETENTION');
	INSERT INTO notif_lane VALUES ('bulk', $BULK_SENDERS);

	-- the load generators' bookkeeping: how many promotions so far (the
	-- trickle's night_log and night_stop: night_load_sql)
	CREATE TABLE night_progress (enqueued bigint);
	INSERT INTO night_progress VALUES (0);
$(night_load_sql)

	-- N promotions (or until night_stop says so) at RATE per second: every 10 ms, those due by the clock,
	-- in one transaction (a campaign tool's batches), half sms and half push; SYS 'pgq': the same
	-- jobs as events of PgQ's queue night_bulk (test/bench/night_peers.sh), their type the kind,
	-- their data the key notif_deliver would send (kind:user_id:order_id) and the body it would send (b)
	CREATE PROCEDURE night_promos(n bigint, rate float8, sys text DEFAULT 'nd') LANGUAGE plpgsql AS \$\$
	DECLARE
	    t0 float8 := extract(epoch FROM clock_timestamp());
	    done bigint := 0;
	    target bigint;
	BEGIN
	    WHILE done < n LOOP
	        EXIT WHEN (SELECT stop FROM night_stop);
	        target := least(n, floor(rate * (extract(epoch FROM clock_timestamp()) - t0))::bigint);
	        IF target > done THEN
	            IF sys = 'pgq' THEN
	                PERFORM pgq.insert_event('night_bulk', k, json_build_object('k', k || ':' || g || ':friday', 'b', night_body(k)::text)::text)
	                  FROM (SELECT g, CASE WHEN g % 2 = 0 THEN 'promo_push' ELSE 'promo_sms' END AS k
	                          FROM generate_series(done + 1, target) g) e;
	            ELSE
	                PERFORM notif_enqueue(g, CASE WHEN g % 2 = 0 THEN 'promo_push' ELSE 'promo_sms' END, 'friday',
	                            CASE WHEN g % 2 = 0
	                            THEN '{"token":"fcm-device-token","notification":{"title":"Friday night","body":"-50% until midnight"}}'
	                            ELSE '{"to":"+84900000000","text":"Friday night: -50% until midnight"}' END::jsonb)
	                  FROM generate_series(done + 1, target) g;
	            END IF;
	            UPDATE night_progress SET enqueued = target;
	            done := target;
	            COMMIT;
	        ELSE
	            PERFORM pg_sleep(0.01);
	        END IF;
	    END LOOP;
	END \$\$;

	SQL
	for lane in otp alert bulk; do
		wait_sql "SELECT count(*) >= 1 FROM pg_stat_activity WHERE application_name = 'notif_deliver sender $lane'" 30
	done
}

night_load_sql() {
	cat <<-'SQL'
	-- when each trickled job was enqueued, and the flag that ends the load
	CREATE TABLE night_log (kind text, id bigint, t_us bigint);
	CREATE TABLE night_stop (stop boolean);
	INSERT INTO night_stop VALUES (false);

	-- the body of a job of kind K (the same bytes notif_deliver sends: its payload's jsonb text)
	CREATE FUNCTION night_body(k text) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
	    SELECT CASE k
	        WHEN 'promo_push' THEN '{"token":"fcm-device-token","notification":{"title":"Friday night","body":"-50% until midnight"}}'
	        WHEN 'promo_sms' THEN '{"to":"+84900000000","text":"Friday night: -50% until midnight"}'
	        WHEN 'otp' THEN '{"to":"+84912345678","text":"Ma OTP: 654321"}'
	        ELSE '{"to":"+84912345678","text":"Card *1234: -1,250,000 VND at 21:04"}' END::jsonb
	$$;

	-- one job of kind K per transaction, RATE per second (Poisson arrivals,
	-- or evenly spaced), each logged with the clock read before its commit,
	-- until night_stop says so; SYS 'pgq': an event of PgQ's queue night_K;
	-- PUSH_EVERY N > 0: every Nth OTP push first (kind otp_push, an APNs
	-- payload whose "fallback" member is the SMS)
	CREATE PROCEDURE night_trickle(k text, rate float8, poisson boolean, sys text DEFAULT 'nd',
	                               push_every int DEFAULT 0) LANGUAGE plpgsql AS $$
	DECLARE
	    t0 float8 := extract(epoch FROM clock_timestamp());
	    next_at float8 := 0;
	    now_s float8;
	    i bigint := 0;
	    kind text;
	BEGIN
	    LOOP
	        EXIT WHEN (SELECT stop FROM night_stop);
	        now_s := extract(epoch FROM clock_timestamp()) - t0;
	        IF now_s < next_at THEN
	            -- (at most 0.2 s: night_stop is read again)
	            PERFORM pg_sleep(least(next_at - now_s, 0.2));
	            CONTINUE;
	        END IF;
	        i := i + 1;
	        kind := k;
	        IF sys = 'pgq' THEN
	            PERFORM pgq.insert_event('night_' || k, k, json_build_object('k', k || ':' || i || ':' || k || '-' || i, 'b', night_body(k)::text)::text);
	        ELSIF k = 'otp' AND push_every > 0 AND i % push_every = 0 THEN
	            kind := 'otp_push';
	            PERFORM notif_enqueue(i, kind, k || '-' || i,
	                        jsonb_build_object('device_token', 'a0' || lpad(to_hex(i), 10, '0'),
	                                           'headers', '{"apns-topic": "com.example.bank", "apns-push-type": "alert"}'::jsonb,
	                                           'aps', '{"alert": "Ma OTP: 654321"}'::jsonb,
	                                           'fallback', night_body(k)));
	        ELSE
	            PERFORM notif_enqueue(i, k, k || '-' || i, night_body(k));
	        END IF;
	        INSERT INTO night_log VALUES (kind, i, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
	        COMMIT;
	        next_at := next_at + CASE WHEN poisson THEN -ln(1.0 - random()) / rate ELSE 1.0 / rate END;
	    END LOOP;
	END $$;
	SQL
}
