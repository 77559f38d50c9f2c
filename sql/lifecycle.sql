-- lifecycle: the job lifecycle, every transition a job makes, as the
-- library holds it in one table (src/lifecycle/job_state.c).  This output is the
-- specification: for an event, the first row whose delivery, from_status,
-- outcome and condition match applies; to_status NULL means refused.
\pset null '(refused)'
SELECT name, event, delivery, from_status, outcome, condition, to_status, retries, tries, holds
  FROM notif_transitions();
\pset null ''
SELECT name, note FROM notif_transitions() WHERE note IS NOT NULL;

-- every (event, delivery, status, outcome) a job can be in has a row
SELECT e.event, d.delivery, s.status, count(*) AS unmatched
  FROM unnest(ARRAY['retry', 'cancel']) e(event),
       unnest(ARRAY['at_most_once', 'at_least_once']) d(delivery),
       unnest(ARRAY['queued', 'sending', 'sent', 'failed', 'expired']) s(status),
       unnest(ARRAY[NULL, 'accepted', 'rejected', 'unreached', 'unknown']) o(outcome),
       unnest(ARRAY[false, true]) f(forced)
 WHERE notif_transition_for(e.event, d.delivery, s.status, o.outcome, NULL, false, f.forced, false) IS NULL
 GROUP BY 1, 2, 3;

-- what notif_retry and notif_cancel ask
SELECT name, to_status, note
  FROM notif_transition_for('retry', 'at_most_once', 'sent', 'unknown', NULL, false, false, false);
SELECT name, to_status
  FROM notif_transition_for('retry', 'at_most_once', 'sent', 'unknown', NULL, false, true, false);
SELECT name, to_status, note
  FROM notif_transition_for('retry', 'at_most_once', 'sent', 'unknown', NULL, true, true, false);
SELECT name, to_status
  FROM notif_transition_for('retry', 'at_least_once', 'failed', 'unknown', 'cancelled', false, false, false);
SELECT name, to_status, note
  FROM notif_transition_for('retry', 'at_least_once', 'failed', 'unknown', 'cancelled', false, false, true);
SELECT name, to_status, note
  FROM notif_transition_for('cancel', 'at_least_once', 'sending', NULL, NULL, true, false, false);

-- bad names are errors
SELECT * FROM notif_transition_for('resend', 'at_most_once', 'sent', NULL, NULL, false, false, false);
SELECT * FROM notif_transition_for('retry', 'at_most_once', 'lost', NULL, NULL, false, false, false);
