-- the extension's schema in one hash: columns in order, constraints,
-- indexes, triggers, functions (and their bodies), views, and what pg_dump
-- keeps (used by upgrade.sql in two databases)
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
    SELECT format('dumped %s %s', x.tab::regclass, x.cond)
      FROM pg_extension e, unnest(e.extconfig, e.extcondition) x(tab, cond)
     WHERE e.extname = 'notif_deliver'
    UNION ALL
    SELECT format('%s %s %s %s %s', p.oid::regprocedure, p.prosecdef, p.proconfig, p.proacl, md5(p.prosrc))
      FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'notif\_%'
    UNION ALL
    SELECT format('%s %s %s', c.relname, pg_get_viewdef(c.oid), c.relacl)
      FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'v'
       AND c.relname LIKE 'notif\_%'
) s(x)
