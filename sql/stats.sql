-- stats: notif_stats on hand-made jobs, attempts and delivery reports.
-- p = ambiguous attempts / attempts; q = delivered ambiguous attempts /
-- judged ambiguous attempts, from the reports; the cost rule: at_least_once
-- is the cheaper exactly when cost_lost / cost_dup > q / (1 - q) (to first
-- order in p), bounded by the attempts the deadline leaves room for.
-- (The workers watch another database: nothing here is sent.)

SET notif_deliver.stats_min_sample = 10;

INSERT INTO notif_provider (name, url, timeout) VALUES ('slow', 'http://127.0.0.1:9/', '10 seconds');
INSERT INTO notif_type (code, delivery, max_tries, deadline, cost_lost, cost_dup)
VALUES ('st_amo', 'at_most_once', 1, NULL, 3, 1),
       ('st_alo', 'at_least_once', 3, NULL, 1, 5),
       ('st_thin', 'at_least_once', 3, NULL, 1, 1),
       ('st_none', 'at_most_once', 1, NULL, NULL, NULL);
INSERT INTO notif_type (code, delivery, max_tries, deadline, provider, backoff_min, cost_lost, cost_dup)
VALUES ('st_otp', 'at_least_once', 5, '15 seconds', 'default', '1 second', 1, 1),
       ('st_otp_slow', 'at_least_once', 5, '15 seconds', 'slow', '1 second', 1, 1);

-- make jobs: n of a type, with a status, an outcome and attempts ending an
-- hour ago (past the reports' grace time)
CREATE FUNCTION make_jobs(kind text, n int, status text, outcomes text[],
                          delivered_reports int)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    j bigint;
    i int;
    t int;
BEGIN
    FOR i IN 1 .. n LOOP
        INSERT INTO notif_job (user_id, kind, order_id, payload, status, tries, next_at, outcome)
        VALUES (i, kind, status || ':' || array_to_string(outcomes, ',') || ':' || delivered_reports || ':' || i,
                '{}', status, cardinality(outcomes), now() - interval '1 hour',
                outcomes[cardinality(outcomes)])
        RETURNING id INTO j;
        FOR t IN 1 .. cardinality(outcomes) LOOP
            INSERT INTO notif_attempt (job_id, try, started_at, ended_at, outcome)
            VALUES (j, t, now() - interval '61 minutes', now() - interval '1 hour', outcomes[t]);
        END LOOP;
        FOR t IN 1 .. delivered_reports LOOP
            PERFORM notif_dlr(notif_key(kind, i, status || ':' || array_to_string(outcomes, ',')
                                        || ':' || delivered_reports || ':' || i), true);
        END LOOP;
    END LOOP;
END
$$;

-- at_most_once: 90 accepted and reported once (one of them twice: a copy
-- the provider made); 10 ambiguous, 4 of them reported delivered
SELECT make_jobs('st_amo', 89, 'sent', '{accepted}', 1);
SELECT make_jobs('st_amo', 1, 'sent', '{accepted}', 2);
SELECT make_jobs('st_amo', 4, 'sent', '{unknown}', 1);
SELECT make_jobs('st_amo', 6, 'sent', '{unknown}', 0);

-- at_least_once: 80 accepted at once; 20 ambiguous, then accepted on the
-- second try: 10 of them got two copies (the ambiguous call delivered too)
SELECT make_jobs('st_alo', 80, 'sent', '{accepted}', 1);
SELECT make_jobs('st_alo', 10, 'sent', '{unknown,accepted}', 2);
SELECT make_jobs('st_alo', 10, 'sent', '{unknown,accepted}', 1);

-- too little data for q: 4 jobs, one ambiguous
SELECT make_jobs('st_thin', 3, 'sent', '{accepted}', 1);
SELECT make_jobs('st_thin', 1, 'failed', '{unknown,unknown,unknown}', 0);

-- the queue now: one job due for 5 minutes, one not due yet, one in flight
INSERT INTO notif_job (user_id, kind, order_id, payload, next_at)
VALUES (1, 'st_none', 'due', '{}', now() - interval '5 minutes'),
       (2, 'st_none', 'later', '{}', now() + interval '1 hour');
INSERT INTO notif_job (user_id, kind, order_id, payload, next_at, status, tries, claimed_by, claimed_at)
VALUES (3, 'st_none', 'held', '{}', now(), 'sent', 1, 12345, now());

-- counts, p, q, measured and estimated loss and duplicates
SELECT kind, delivery, jobs, queued, sent, failed, attempts, ambiguous_attempts, p, q, q_sample,
       q_min_sample, dlr_jobs, measured_lost, measured_duplicates, estimated_lost, estimated_duplicates
  FROM notif_stats WHERE kind LIKE 'st\_%' ORDER BY kind;

SELECT kind, queued_now, oldest_queued_age >= interval '5 minutes' AS due_5min_ago,
       oldest_queued_age < interval '1 hour' AS not_the_later_one, in_flight
  FROM notif_stats WHERE kind = 'st_none';

-- the cost rule.  st_amo: p = 0.1, q = 0.4, so q / (1 - q) = 0.667.
-- cost_lost / cost_dup = 3: at_least_once, and it differs from the type's
SELECT kind, cost_per_million_at_most_once, cost_per_million_at_least_once,
       recommended_delivery, recommendation_differs
  FROM notif_stats WHERE kind IN ('st_amo', 'st_alo', 'st_thin', 'st_none') ORDER BY kind;

-- just above the threshold (0.8 > 0.667): at_least_once
UPDATE notif_type SET cost_lost = 0.8, cost_dup = 1 WHERE code = 'st_amo';
SELECT kind, cost_per_million_at_most_once, cost_per_million_at_least_once, recommended_delivery
  FROM notif_stats WHERE kind = 'st_amo';
-- just below it (0.5 < 0.667): at_most_once, the type's own: no change advised
UPDATE notif_type SET cost_lost = 0.5, cost_dup = 1 WHERE code = 'st_amo';
SELECT kind, cost_per_million_at_most_once, cost_per_million_at_least_once,
       recommended_delivery, recommendation_differs
  FROM notif_stats WHERE kind = 'st_amo';
-- without costs there is no advice
UPDATE notif_type SET cost_dup = NULL WHERE code = 'st_amo';
SELECT kind, cost_per_million_at_least_once, recommended_delivery, recommendation_differs
  FROM notif_stats WHERE kind = 'st_amo';

-- fewer judged ambiguous attempts than notif_deliver.stats_min_sample: no q
SET notif_deliver.stats_min_sample = 11;
SELECT kind, q, q_sample, q_min_sample, estimated_lost, recommended_delivery
  FROM notif_stats WHERE kind = 'st_amo';
RESET notif_deliver.stats_min_sample;
SHOW notif_deliver.stats_min_sample;

-- reports still within the grace time: the jobs are not judged yet
SET notif_deliver.stats_min_sample = 10;
SET notif_deliver.stats_dlr_grace = '2h';
SELECT kind, q, q_sample, measured_lost FROM notif_stats WHERE kind = 'st_amo';
RESET notif_deliver.stats_dlr_grace;

-- the window: jobs created before it do not count
SET notif_deliver.stats_window = '1s';
UPDATE notif_job SET created_at = now() - interval '1 minute' WHERE kind = 'st_alo';
SELECT kind, jobs, attempts, p FROM notif_stats WHERE kind = 'st_alo';
RESET notif_deliver.stats_window;

-- OTP-like types: the deadline bounds the tries.  15 s with a 2 s timeout
-- and backoffs of 1, 2, 4 s: attempts start at 0, 3, 7 and 13 s (4 of 5);
-- with a 10 s timeout: at 0 and 11 s (2)
SELECT kind, attempts_within_deadline FROM notif_stats
 WHERE kind IN ('st_otp', 'st_otp_slow', 'st_alo') ORDER BY kind;
SELECT notif_attempts_within('15 s', '2 s', '1 s', '5 min', 3) AS three_tries,
       notif_attempts_within('1 s', '2 s', '1 s', '5 min', 3) AS short_deadline,
       notif_attempts_within('1 h', '2 s', '1 s', '5 s', 1000) AS capped_backoff,
       notif_attempts_within(NULL, '2 s', '1 s', '5 min', 3) AS no_deadline;
-- an at_least_once type whose deadline leaves room for one attempt cannot
-- retry: both deliveries cost the same, the type's own is kept
UPDATE notif_type SET deadline = '5 seconds', provider = 'slow' WHERE code = 'st_alo';
SELECT kind, attempts_within_deadline, cost_per_million_at_most_once = cost_per_million_at_least_once AS same_cost,
       recommended_delivery, recommendation_differs
  FROM notif_stats WHERE kind = 'st_alo';

-- a monitoring role reads the view, not the jobs
SELECT has_table_privilege('pg_monitor', 'notif_stats', 'SELECT') AS monitor_reads_stats,
       has_table_privilege('pg_monitor', 'notif_job', 'SELECT') AS monitor_reads_jobs;

DROP FUNCTION make_jobs(text, int, text, text[], int);
DELETE FROM notif_job WHERE kind LIKE 'st\_%';
DELETE FROM notif_type WHERE code LIKE 'st\_%';
DELETE FROM notif_provider WHERE name = 'slow';
