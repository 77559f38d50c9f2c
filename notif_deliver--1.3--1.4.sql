/*
 * notif_deliver 1.3 -> 1.4
 *
 * Plain SQL, run by ALTER EXTENSION notif_deliver UPDATE.  It is also the
 * second half of the 1.4 install script: make builds
 * notif_deliver--1.4.sql as notif_deliver--1.3.sql followed by this file,
 * so every change to 1.4 is written here, once, and a fresh install and an
 * update run the same statements.  sql/upgrade.sql still compares a
 * database updated from 1.0 with a fresh one (sql/schema_fingerprint.sql).
 *
 * Delivery pauses while the 1.4 library waits for this update, and resumes
 * when it commits.  Each part below says what it adds; docs:
 * doc/reference.md, "Upgrading".  New columns go at the end of their
 * tables, with constant defaults (no table is rewritten).
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION notif_deliver UPDATE TO '1.4'" to load this file. \quit
