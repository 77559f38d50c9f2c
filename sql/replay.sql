-- replay: duplicates that arise before the job table are stopped by the
-- business key.  100,000 transaction alerts; 2% of the events are replayed
-- (same key, same payload) and 1% are re-sent by a client retry (same key,
-- re-rendered payload); 300 legitimate twins (same user, same amount, other
-- order) are among the 100,000.

CREATE TEMP TABLE message AS
SELECT m,
       1 + (src % 5000) AS user_id,
       'ord-' || m AS order_id,
       jsonb_build_object('to', '+8490' || lpad((1 + src % 5000)::text, 7, '0'),
                          'text', 'GD: -' || ((src * 37) % 1000 + 1) * 1000 || ' VND') AS payload
  FROM generate_series(1, 100000) m,
       LATERAL (SELECT CASE WHEN m > 99700 THEN m - 99700 ELSE m END AS src) s;

-- the calls: every message once, then replays and client retries
CREATE TEMP TABLE call AS
SELECT row_number() OVER (ORDER BY phase, m) AS seq, *
  FROM (SELECT 1 AS phase, 'first' AS what, m, user_id, order_id, payload FROM message
        UNION ALL
        SELECT 2, 'replay', m, user_id, order_id, payload FROM message WHERE m % 50 = 0
        UNION ALL
        SELECT 2, 'retry', m, user_id, order_id, payload || '{"retry": true}' FROM message WHERE m % 100 = 7) c;

SELECT what, count(*) AS calls FROM call GROUP BY what ORDER BY what;

CREATE TEMP TABLE result AS
SELECT seq, what, m, notif_enqueue(user_id, 'giao_dich', order_id, payload) AS job_id
  FROM call ORDER BY seq;

-- exactly one job per message
SELECT count(*) AS jobs FROM notif_job WHERE kind = 'giao_dich' AND order_id LIKE 'ord-%';
SELECT count(DISTINCT job_id) AS distinct_ids FROM result;
-- every repeated call got the id of the first
SELECT count(*) AS keys_with_two_ids
  FROM (SELECT m FROM result GROUP BY m HAVING count(DISTINCT job_id) > 1) x;
-- the first payload stands
SELECT count(*) AS retried_payloads_stored FROM notif_job WHERE payload ? 'retry';
-- the twins are all kept: same user and text as their original, their own job
SELECT count(*) AS twins_kept
  FROM message t
  JOIN message o ON o.m = t.m - 99700
  JOIN notif_job jt ON jt.kind = 'giao_dich' AND jt.order_id = t.order_id
  JOIN notif_job jo ON jo.kind = 'giao_dich' AND jo.order_id = o.order_id
 WHERE t.m > 99700
   AND jt.user_id = jo.user_id AND jt.payload = jo.payload AND jt.id <> jo.id;
