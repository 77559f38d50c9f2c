/*-------------------------------------------------------------------------
 *
 * pg_compat.h
 *      Everything that differs between the PostgreSQL majors notif_deliver
 *      is built and tested for (15, 17 and 18), in one place.
 *
 * The rest of the source is written once, against the macros below.  Each
 * server internal the library calls whose signature or meaning changed
 * between those majors is named here, with the major that changed it.
 *
 * Forward compatibility: a major not listed fails the build here, at once,
 * naming what to check (define NOTIF_UNTESTED_MAJOR to try anyway:
 * PG_CPPFLAGS=-DNOTIF_UNTESTED_MAJOR).  On every major, the signatures of
 * the executor internals the enqueue fast path calls are checked at
 * compile time (NOTIF_EXPECT_SIGNATURE, in enqueue/fast.c): a change the
 * compiler would otherwise accept (a parameter's type, a new argument with
 * a default-like meaning) fails the build with the function's name.
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_PG_COMPAT_H
#define NOTIF_PG_COMPAT_H

#if PG_VERSION_NUM < 150000
#error "notif_deliver needs PostgreSQL 15 or later (built and tested on 15, 17 and 18)"
#elif PG_VERSION_NUM >= 160000 && PG_VERSION_NUM < 170000 && !defined(NOTIF_UNTESTED_MAJOR)
#error "notif_deliver is not tested on PostgreSQL 16 (no Debian package in reach): build with PG_CPPFLAGS=-DNOTIF_UNTESTED_MAJOR to try, then run make installcheck"
#elif PG_VERSION_NUM >= 190000 && !defined(NOTIF_UNTESTED_MAJOR)
#error "notif_deliver is built and tested on PostgreSQL 15, 17 and 18, not on this major: check src/core/pg_compat.h (ExecInsertIndexTuples, ExecCheckIndexConstraints, ResultRelInfo's CHECK expressions, TupleConstr, CreateWaitEventSet), then build with PG_CPPFLAGS=-DNOTIF_UNTESTED_MAJOR and run the whole suite"
#endif

/*
 * CreateWaitEventSet: its first argument was the MemoryContext to allocate
 * in until 16; from 17 on it is the ResourceOwner that releases the set on
 * abort (NULL: none, the set lives in TopMemoryContext and the caller frees
 * it, as the sender's lasts until it exits).
 */
#if PG_VERSION_NUM >= 170000
#define notif_create_wait_event_set(nevents) CreateWaitEventSet(NULL, (nevents))
#else
#define notif_create_wait_event_set(nevents) CreateWaitEventSet(TopMemoryContext, (nevents))
#endif

/*
 * ExecInsertIndexTuples: 16 added onlySummarizing (false: every index, as
 * a plain INSERT).
 */
#if PG_VERSION_NUM >= 160000
#define notif_insert_index_tuples(rri, slot, estate, noDupErr, specConflict, arbiters) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, (noDupErr), (specConflict), \
						  (arbiters), false)
#else
#define notif_insert_index_tuples(rri, slot, estate, noDupErr, specConflict, arbiters) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, (noDupErr), (specConflict), \
						  (arbiters))
#endif

/*
 * index_insert_cleanup (17 on): ends an access method's insert state kept
 * in the IndexInfo (BRIN's pinned revmap pages); ExecCloseIndices calls it
 * before closing each index.
 */
#if PG_VERSION_NUM >= 170000
#define notif_index_insert_cleanup(index, ii) index_insert_cleanup((index), (ii))
#else
#define notif_index_insert_cleanup(index, ii) ((void) 0)
#endif

/*
 * ExecCheckIndexConstraints: 18 added tupleid, the row an UPDATE replaces
 * (NULL for an insert).
 */
#if PG_VERSION_NUM >= 180000
#define notif_check_index_constraints(rri, slot, estate, conflict, arbiters) \
	ExecCheckIndexConstraints((rri), (slot), (estate), (conflict), NULL, (arbiters))
#else
#define notif_check_index_constraints(rri, slot, estate, conflict, arbiters) \
	ExecCheckIndexConstraints((rri), (slot), (estate), (conflict), (arbiters))
#endif

/*
 * The CHECK constraints' prepared expressions in a ResultRelInfo: renamed
 * ri_CheckConstraintExprs in 18.  18 also has NOT ENFORCED CHECK
 * constraints, which ExecRelCheck skips (a NULL expression: ExecCheck
 * passes it), and virtual generated columns.
 */
#if PG_VERSION_NUM >= 180000
#define NOTIF_RRI_CHECK_EXPRS(rri) ((rri)->ri_CheckConstraintExprs)
#define notif_check_enforced(constr, i) ((constr)->check[(i)].ccenforced)
#define notif_has_generated(constr) \
	((constr) != NULL && ((constr)->has_generated_stored || (constr)->has_generated_virtual))
#else
#define NOTIF_RRI_CHECK_EXPRS(rri) ((rri)->ri_ConstraintExprs)
#define notif_check_enforced(constr, i) true
#define notif_has_generated(constr) ((constr) != NULL && (constr)->has_generated_stored)
#endif

/*
 * A compile-time check that a server function still has the type this
 * source was written for: fails the build naming the function when a
 * major changes it in a way a call would still compile with.
 */
#if defined(__GNUC__) || defined(__clang__)
#define NOTIF_EXPECT_SIGNATURE(fn, type) \
	StaticAssertDecl(__builtin_types_compatible_p(__typeof__(&(fn)), type), \
					 "PostgreSQL " PG_MAJORVERSION " changed " #fn ": port it in src/core/pg_compat.h")
#else
#define NOTIF_EXPECT_SIGNATURE(fn, type) \
	StaticAssertDecl(true, #fn)
#endif

#endif							/* NOTIF_PG_COMPAT_H */
