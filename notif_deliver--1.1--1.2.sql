/*
 * notif_deliver 1.1 -> 1.2
 *
 * Plain SQL, run by ALTER EXTENSION notif_deliver UPDATE (and by a fresh
 * CREATE EXTENSION, after the 1.0 script and the 1.0 -> 1.1 update: there
 * is one path to 1.2).  Delivery pauses while the 1.2 library waits for
 * this update, and resumes when it commits.
 *
 * Each part below says what it adds; docs: doc/reference.md, "Upgrading".
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION notif_deliver UPDATE TO '1.2'" to load this file. \quit

/* ---------------------------------------------------------------------
 * The job lifecycle
 * --------------------------------------------------------------------- */


/* ---------------------------------------------------------------------
 * Push providers (FCM, APNs)
 * --------------------------------------------------------------------- */


/* ---------------------------------------------------------------------
 * High availability
 * --------------------------------------------------------------------- */


/* ---------------------------------------------------------------------
 * Shards
 * --------------------------------------------------------------------- */


/* ---------------------------------------------------------------------
 * Last: the 1.2 library waits for this update; wake it when it commits.
 * --------------------------------------------------------------------- */
SELECT notif_wake_launcher();
