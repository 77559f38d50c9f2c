-- the extension's schema in one hash: columns in order, constraints,
-- indexes, triggers, functions (their whole definitions), views, the
-- tables' storage and privileges, comments, the extension's members, and
-- what pg_dump keeps, in order (used by upgrade.sql in two databases: one
-- updated from 1.0, one made by CREATE EXTENSION: notif_deliver--1.4.sql)
SELECT md5(string_agg(x, E'\n' ORDER BY x)) AS fingerprint FROM (
    SELECT format('%s.%s %s %s %s %s', c.relname, a.attnum, a.attname,
                  format_type(a.atttypid, a.atttypmod), a.attnotnull,
                  pg_get_expr(d.adbin, d.adrelid))
      FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'notif\_%'
       AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT format('%s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
      FROM pg_constraint WHERE connamespace = 'public'::regnamespace AND conname LIKE 'notif\_%'
    UNION ALL
    SELECT pg_get_indexdef(indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
     WHERE c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'notif\_%'
    UNION ALL
    SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
     WHERE c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'notif\_%' AND NOT t.tgisinternal
    UNION ALL
    SELECT format('dumped %s %s %s', x.n, x.tab::regclass, x.cond)
      FROM pg_extension e, unnest(e.extconfig, e.extcondition) WITH ORDINALITY x(tab, cond, n)
     WHERE e.extname = 'notif_deliver'
    UNION ALL
    SELECT format('member %s', pg_describe_object(d.classid, d.objid, d.objsubid))
      FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
     WHERE d.refclassid = 'pg_extension'::regclass AND e.extname = 'notif_deliver' AND d.deptype = 'e'
    UNION ALL
    SELECT format('%s %s %s', p.oid::regprocedure, p.proacl, md5(pg_get_functiondef(p.oid)))
      FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'notif\_%'
    UNION ALL
    SELECT format('%s %s %s', c.relname, pg_get_viewdef(c.oid), c.relacl)
      FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'v'
       AND c.relname LIKE 'notif\_%'
    UNION ALL
    -- (privileges as PostgreSQL shows them: a GRANT then its REVOKE leaves the default written out)
    SELECT format('%s %s %s %s %s', c.relname, c.relkind, c.relpersistence, c.reloptions,
                  coalesce(c.relacl, acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char", c.relowner)))
      FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'notif\_%'
    UNION ALL
    SELECT format('comment %s: %s', pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description)
      FROM pg_description d
     WHERE (d.classoid = 'pg_class'::regclass AND d.objoid IN
            (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relname LIKE 'notif\_%'))
        OR (d.classoid = 'pg_proc'::regclass AND d.objoid IN
            (SELECT oid FROM pg_proc WHERE pronamespace = 'public'::regnamespace AND proname LIKE 'notif\_%'))
) s(x)
