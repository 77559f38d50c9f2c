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

/*
 * Two more formats: 'fcm' (FCM HTTP v1: the payload is FCM's message
 * object, sent as {"message": payload}) and 'apns' (POST /3/device/<token>,
 * the payload's "headers" as request headers).  The sender signs their
 * tokens itself: auth names the method, credentials holds the key.
 */
ALTER TABLE notif_provider DROP CONSTRAINT notif_provider_format_check;
ALTER TABLE notif_provider ADD CONSTRAINT notif_provider_format_check
    CHECK (format IN ('json', 'form', 'query', 'fcm', 'apns'));

-- refuses malformed credentials when the row is written (a clear error, never the secret)
CREATE FUNCTION notif_credentials_check(auth text, credentials jsonb)
RETURNS boolean
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'notif_credentials_check';

COMMENT ON FUNCTION notif_credentials_check(text, jsonb) IS 'CHECK of notif_provider: credentials suit their auth method';

ALTER TABLE notif_provider
    ADD COLUMN auth text
        CONSTRAINT notif_provider_auth_check
        CHECK (auth IN ('google_service_account', 'apns_token')),
    ADD COLUMN credentials jsonb,
    -- HTTP/2: calls of a lane to this provider share at most this many connections
    ADD COLUMN max_connections int NOT NULL DEFAULT 4
        CONSTRAINT notif_provider_max_connections_check CHECK (max_connections > 0),
    -- the CA certificate(s), PEM, that this provider's TLS certificate must chain to
    -- (NULL: the system's trust store)
    ADD COLUMN ca_cert text
        CONSTRAINT notif_provider_ca_cert_check
        CHECK (ca_cert LIKE '%-----BEGIN CERTIFICATE-----%-----END CERTIFICATE-----%'),
    ADD CONSTRAINT notif_provider_credentials_check
        CHECK (notif_credentials_check(auth, credentials));

COMMENT ON COLUMN notif_provider.auth IS 'token the sender signs: google_service_account (FCM) or apns_token (APNs)';
COMMENT ON COLUMN notif_provider.credentials IS 'the service-account JSON file, or {key_id, team_id, private_key} of an APNs .p8 key';
COMMENT ON COLUMN notif_provider.max_connections IS 'HTTP/2 connections per lane to this provider; calls are multiplexed over them';
COMMENT ON COLUMN notif_provider.ca_cert IS 'PEM CA certificate(s) to verify the provider with, instead of the system store';

/*
 * notif_unregistered: device tokens the platform said are dead (FCM 404
 * UNREGISTERED, APNs 410 Unregistered or 400 BadDeviceToken), one row per
 * job that was refused so; the app deletes them on its side, then the rows
 * here (DELETE FROM notif_unregistered WHERE ...).  Rows go with their job
 * when the retention purge takes it.
 */
CREATE TABLE notif_unregistered_token (
    job_id bigint PRIMARY KEY REFERENCES notif_job ON DELETE CASCADE,
    kind text NOT NULL,
    user_id bigint NOT NULL,
    token text NOT NULL,
    reason text NOT NULL,
    reported_at timestamptz NOT NULL
);

COMMENT ON TABLE notif_unregistered_token IS 'dead device tokens, as the platforms reported them (read notif_unregistered)';

CREATE VIEW notif_unregistered AS
SELECT kind, user_id, token, reason, reported_at, job_id
  FROM notif_unregistered_token;

COMMENT ON VIEW notif_unregistered IS 'device tokens FCM or APNs reported dead: delete them in the app, then here';

SELECT pg_catalog.pg_extension_config_dump('notif_unregistered_token', '');


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
