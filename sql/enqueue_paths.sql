-- enqueue_paths: notif_enqueue inserts the way INSERT would, whatever the
-- table has become: user triggers, CHECKs and columns added by the DBA.
-- (A table with BEFORE or statement triggers is served by the SPI path,
-- the others by the fast path; both must behave as INSERT ... ON CONFLICT.)

CREATE TABLE enqueue_audit (job_id bigint, kind text, at text);
CREATE FUNCTION audit_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO enqueue_audit VALUES (NEW.id, NEW.kind, TG_WHEN || ' ' || TG_LEVEL);
    RETURN NEW;
END $$;

-- an AFTER ROW trigger fires once per new job, not for a repeated key
CREATE TRIGGER audit_after AFTER INSERT ON notif_job FOR EACH ROW EXECUTE FUNCTION audit_job();
SELECT notif_enqueue(6000, 'otp', 'after-trigger') = notif_enqueue(6000, 'otp', 'after-trigger') AS same_job;
SELECT a.at, a.job_id = j.id AS its_job FROM enqueue_audit a JOIN notif_job j ON j.user_id = 6000;
DROP TRIGGER audit_after ON notif_job;

-- a BEFORE ROW trigger may change the row: it runs, as for INSERT
CREATE FUNCTION stamp_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.payload := NEW.payload || '{"stamped": true}';
    RETURN NEW;
END $$;
CREATE TRIGGER stamp_before BEFORE INSERT ON notif_job FOR EACH ROW EXECUTE FUNCTION stamp_job();
SELECT notif_enqueue(6001, 'otp', 'before-trigger', '{"text":"x"}') = notif_enqueue(6001, 'otp', 'before-trigger') AS same_job;
SELECT payload FROM notif_job WHERE user_id = 6001;
DROP TRIGGER stamp_before ON notif_job;
-- and statement triggers too
CREATE TRIGGER audit_statement AFTER INSERT ON notif_job FOR EACH STATEMENT EXECUTE FUNCTION audit_job();
SELECT notif_enqueue(6002, 'otp', 'statement-trigger') > 0 AS enqueued;
SELECT at FROM enqueue_audit WHERE at LIKE '%STATEMENT' ;
DROP TRIGGER audit_statement ON notif_job;

-- a CHECK the DBA adds is enforced, with its own name
ALTER TABLE notif_job ADD CONSTRAINT positive_user CHECK (user_id > 0);
SELECT try($$SELECT notif_enqueue(-5, 'otp', 'negative')$$) AS negative_user;
SELECT notif_enqueue(6003, 'otp', 'positive') > 0 AS enqueued;
ALTER TABLE notif_job DROP CONSTRAINT positive_user;
SELECT notif_enqueue(-5, 'otp', 'negative') > 0 AS enqueued_after_drop;

-- a column the DBA adds gets its default
ALTER TABLE notif_job ADD COLUMN tenant text NOT NULL DEFAULT 'vn';
SELECT notif_enqueue(6004, 'otp', 'tenant') > 0 AS enqueued;
SELECT tenant FROM notif_job WHERE user_id = 6004;
ALTER TABLE notif_job DROP COLUMN tenant;
SELECT notif_enqueue(6005, 'otp', 'after-drop-column') > 0 AS enqueued;

-- ids come from the identity, in order
SELECT notif_enqueue(6006, 'otp', 'a') < notif_enqueue(6006, 'otp', 'b') AS ids_grow;

-- a job enqueued and read back in one statement is visible to it
SELECT (SELECT count(*) FROM notif_job WHERE user_id = 6007) AS before,
       notif_enqueue(6007, 'otp', 'one-statement') > 0 AS enqueued;
SELECT count(*) AS after FROM notif_job WHERE user_id = 6007;

-- an AFTER ROW trigger with a transition table: the SPI path serves it
CREATE FUNCTION audit_new() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO enqueue_audit SELECT id, kind, 'new table' FROM nt;
    RETURN NULL;
END $$;
CREATE TRIGGER audit_new AFTER INSERT ON notif_job REFERENCING NEW TABLE AS nt
    FOR EACH ROW EXECUTE FUNCTION audit_new();
SELECT notif_enqueue(6008, 'otp', 'transition-table') > 0 AS enqueued;
SELECT count(*) AS audited FROM enqueue_audit WHERE at = 'new table';
DROP TRIGGER audit_new ON notif_job;

-- whichever path inserted it (the fast path, the SPI path, a plain INSERT),
-- each queued job has its one row in notif_active, with its kind and next_at
INSERT INTO notif_job (user_id, kind, order_id, payload, next_at)
VALUES (6100, 'otp', 'plain-insert', '{}', now());
SELECT count(*) AS queued,
       count(*) FILTER (WHERE a.job_id IS NULL) AS without_work,
       count(*) FILTER (WHERE a.kind <> j.kind OR a.next_at <> j.next_at OR a.claimed_by IS NOT NULL) AS unlike
  FROM notif_job j LEFT JOIN notif_active a ON a.job_id = j.id
 WHERE j.status = 'queued';
SELECT count(*) AS work_without_job FROM notif_active a
 WHERE NOT EXISTS (SELECT FROM notif_job j WHERE j.id = a.job_id AND j.status = 'queued');

-- deleted jobs leave no work
DROP TABLE enqueue_audit;
DROP FUNCTION audit_job();
DROP FUNCTION stamp_job();
DROP FUNCTION audit_new();
DELETE FROM notif_job WHERE user_id BETWEEN 6000 AND 6008 OR user_id = -5;

SELECT count(*) AS work_without_job FROM notif_active a
 WHERE NOT EXISTS (SELECT FROM notif_job j WHERE j.id = a.job_id AND j.status = 'queued');

-- indexes the DBA adds or drops, even within the transaction that enqueues:
-- every new job is in every index (amcheck finds each heap row in each
-- btree), a unique index is enforced (and nothing is half-written), and a
-- dropped index is no longer written
CREATE EXTENSION amcheck;
-- every btree of notif_job and notif_active, checked to hold every row
CREATE TEMP VIEW btrees_complete AS
SELECT c.relname, bt_index_check(c.oid, true)::text = '' AS every_row_in_it
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam
 WHERE i.indrelid IN ('notif_job'::regclass, 'notif_active'::regclass) AND am.amname = 'btree';
BEGIN;
SELECT notif_enqueue(6200, 'otp', 'before-indexes') > 0 AS enqueued;
CREATE INDEX dba_order_lower ON notif_job (lower(order_id));
CREATE INDEX dba_otp_users ON notif_job (user_id) WHERE kind = 'otp';
CREATE UNIQUE INDEX dba_one_otp ON notif_job (user_id, (payload->>'text')) WHERE kind = 'otp';
SELECT notif_enqueue(6200, 'otp', 'with-indexes', '{"text":"a"}') > 0 AS enqueued;
SAVEPOINT s;
SELECT try($$SELECT notif_enqueue(6200, 'otp', 'same-text', '{"text":"a"}')$$) AS second_text_a;
ROLLBACK TO s;
SELECT count(*) AS same_text_rows FROM notif_job WHERE order_id = 'same-text';
SELECT count(*) AS same_text_work FROM notif_active a JOIN notif_job j ON j.id = a.job_id
 WHERE j.order_id = 'same-text';
SELECT * FROM btrees_complete ORDER BY relname;
DROP INDEX dba_order_lower, dba_otp_users, dba_one_otp;
SELECT notif_enqueue(6200, 'otp', 'after-drop-index', '{"text":"a"}') > 0 AS enqueued;
COMMIT;
SELECT * FROM btrees_complete ORDER BY relname;
-- after the enqueues, the same transaction may still empty or alter the table
BEGIN;
SELECT notif_enqueue(6201, 'otp', 'then-truncate') > 0 AS enqueued;
TRUNCATE notif_job CASCADE;
SELECT notif_enqueue(6201, 'otp', 'after-truncate') > 0 AS enqueued;
ALTER TABLE notif_job ADD COLUMN dba_note text;
ALTER TABLE notif_job DROP COLUMN dba_note;
ROLLBACK;
DELETE FROM notif_job WHERE user_id IN (6200, 6201);

-- an index or a CHECK on the whole row (a function of notif_job): each call
-- evaluates it anew, as INSERT would
CREATE FUNCTION job_sig(j notif_job) RETURNS text LANGUAGE plpgsql IMMUTABLE
    AS $$ BEGIN RETURN j.kind || ':' || j.order_id; END $$;
CREATE INDEX dba_job_sig ON notif_job (job_sig(notif_job));
SELECT notif_enqueue(6202, 'otp', 'whole-row-a') > 0 AS enqueued;
SELECT count(*) > 0 AS another_query FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid;
SELECT notif_enqueue(6202, 'otp', 'whole-row-b') > 0 AS enqueued;
SELECT bt_index_check('dba_job_sig', true)::text = '' AS every_row_in_it;
DROP INDEX dba_job_sig;
ALTER TABLE notif_job ADD CONSTRAINT dba_sig_check CHECK (job_sig(notif_job) <> 'otp:forbidden');
SELECT notif_enqueue(6202, 'otp', 'whole-row-c') > 0 AS enqueued;
SELECT count(*) > 0 AS another_query FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid;
SELECT try($$SELECT notif_enqueue(6202, 'otp', 'forbidden')$$) AS forbidden;
ALTER TABLE notif_job DROP CONSTRAINT dba_sig_check;
DROP FUNCTION job_sig(notif_job);
SELECT order_id FROM notif_job WHERE user_id = 6202 ORDER BY order_id;
DELETE FROM notif_job WHERE user_id = 6202;
DROP VIEW btrees_complete;
DROP EXTENSION amcheck;

-- a column of a domain type, with a default: the domain's constraints as
-- they are now, even one added after the session's first enqueue
CREATE DOMAIN tenant_code AS text CHECK (VALUE ~ '^[a-z]{2}$');
ALTER TABLE notif_job ADD COLUMN tenant tenant_code DEFAULT 'vn';
SELECT notif_enqueue(6203, 'otp', 'tenant-vn') > 0 AS enqueued;
ALTER DOMAIN tenant_code ADD CONSTRAINT tenant_not_vn CHECK (VALUE <> 'vn') NOT VALID;
SELECT try($$SELECT notif_enqueue(6203, 'otp', 'tenant-vn-again')$$) AS domain_checked;
ALTER TABLE notif_job DROP COLUMN tenant;
DROP DOMAIN tenant_code;

-- a trigger that enqueues, while its own enqueue is in its call, even one
-- that changes notif_job's definition first (a GRANT): the inner enqueue
-- goes through the SPI path, the outer one ends as usual
CREATE FUNCTION enqueue_echo() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.order_id NOT LIKE 'echo-%' THEN
        GRANT SELECT ON notif_job TO PUBLIC;
        REVOKE SELECT ON notif_job FROM PUBLIC;
        PERFORM notif_enqueue(NEW.user_id, 'promo', 'echo-' || NEW.order_id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER enqueue_echo AFTER INSERT ON notif_job FOR EACH ROW EXECUTE FUNCTION enqueue_echo();
SELECT count(notif_enqueue(6204, 'otp', 'nested-' || g)) AS enqueued FROM generate_series(1, 3) g;
DROP TRIGGER enqueue_echo ON notif_job;
DROP FUNCTION enqueue_echo();
-- and a CHECK that enqueues, odd as it is: the same
CREATE FUNCTION echo_checked(u bigint, o text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF o NOT LIKE 'echo-%' THEN
        GRANT SELECT ON notif_job TO PUBLIC;
        REVOKE SELECT ON notif_job FROM PUBLIC;
        PERFORM notif_enqueue(u, 'promo', 'echo-' || o);
    END IF;
    RETURN true;
END $$;
ALTER TABLE notif_job ADD CONSTRAINT echo_checked CHECK (echo_checked(user_id, order_id)) NOT VALID;
SELECT count(notif_enqueue(6204, 'otp', 'checked-' || g)) AS enqueued FROM generate_series(1, 3) g;
ALTER TABLE notif_job DROP CONSTRAINT echo_checked;
DROP FUNCTION echo_checked(bigint, text);
SELECT kind, order_id FROM notif_job WHERE user_id = 6204 ORDER BY order_id;
DELETE FROM notif_job WHERE user_id IN (6203, 6204);

-- the foreign key on kind: in a transaction, the first job of a kind runs
-- its check, which locks the type's row in notif_type until the end; the
-- next jobs of that kind rely on that lock.  A subtransaction that rolls
-- back takes its lock with it, and the check runs again.  (The test takes
-- the type's row away as a replica would, without notif_type's triggers,
-- so that notif_enqueue's cache of types still knows it.)
INSERT INTO notif_type VALUES ('fk_probe', 'at_most_once', 1, NULL);
SELECT count(notif_enqueue(g, k, 'bulk-' || g)) AS enqueued
  FROM generate_series(6300, 6349) g, unnest(ARRAY['otp', 'promo', 'fk_probe']) k;
BEGIN;
SAVEPOINT first;
SELECT notif_enqueue(6350, 'fk_probe', 'in-savepoint') > 0 AS enqueued;
ROLLBACK TO first;
DELETE FROM notif_job WHERE kind = 'fk_probe';
SET LOCAL session_replication_role = replica;
DELETE FROM notif_type WHERE code = 'fk_probe';
SET LOCAL session_replication_role = origin;
SELECT try($$SELECT notif_enqueue(6350, 'fk_probe', 'after-rollback')$$) AS type_gone;
SELECT count(*) AS jobs_without_type FROM notif_job j
 WHERE NOT EXISTS (SELECT FROM notif_type t WHERE t.code = j.kind);
ROLLBACK;
-- as a replica (session_replication_role), the foreign key is not checked
-- and no lock is taken: the next job of the kind is checked again
BEGIN;
SET LOCAL session_replication_role = replica;
SELECT notif_enqueue(6351, 'fk_probe', 'as-replica') > 0 AS enqueued;
DELETE FROM notif_job WHERE kind = 'fk_probe';
DELETE FROM notif_type WHERE code = 'fk_probe';
SET LOCAL session_replication_role = origin;
SELECT try($$SELECT notif_enqueue(6351, 'fk_probe', 'as-origin')$$) AS type_gone;
ROLLBACK;
-- what a transaction's check locked ends with it: the next transaction
-- checks again
SELECT notif_enqueue(6352, 'fk_probe', 'committed') > 0 AS enqueued;
BEGIN;
DELETE FROM notif_job WHERE kind = 'fk_probe';
SET LOCAL session_replication_role = replica;
DELETE FROM notif_type WHERE code = 'fk_probe';
SET LOCAL session_replication_role = origin;
SELECT try($$SELECT notif_enqueue(6352, 'fk_probe', 'next-transaction')$$) AS type_gone;
ROLLBACK;
DELETE FROM notif_job WHERE user_id BETWEEN 6300 AND 6352;
DELETE FROM notif_type WHERE code = 'fk_probe';
