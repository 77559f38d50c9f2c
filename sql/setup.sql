-- setup: the extension installs into the current schema and is not relocatable.
CREATE EXTENSION notif_deliver;

SELECT e.extname, e.extversion, n.nspname AS schema, e.extrelocatable
  FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'notif_deliver';

-- its objects, as pg_dump would see them (from PostgreSQL 17 on, the row
-- types of its tables and views, and their array types, are members too:
-- left out, so that every major lists the same)
SELECT pg_describe_object(classid, objid, 0) AS object
  FROM pg_depend d
 WHERE refclassid = 'pg_extension'::regclass
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'notif_deliver')
   AND deptype = 'e'
   AND NOT (classid = 'pg_type'::regclass AND EXISTS
            (SELECT FROM pg_type t JOIN pg_class c ON c.reltype IN (t.oid, t.typelem)
              WHERE t.oid = d.objid))
 ORDER BY 1;

-- tables whose rows pg_dump keeps
SELECT unnest(extconfig)::regclass AS config_table, unnest(extcondition) AS condition
  FROM pg_extension WHERE extname = 'notif_deliver' ORDER BY 1::text;

-- a helper for the tests: the SQLSTATE and message a statement fails with
CREATE FUNCTION try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
