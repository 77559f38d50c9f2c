/*-------------------------------------------------------------------------
 *
 * push.h
 *      FCM HTTP v1 and APNs: their payload rules (provider/payload.c), their
 *      requests (provider/fcm.c, provider/apns.c), their tokens (provider/auth.c,
 *      signed by token.c) and how their answers are read (provider/answer.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_PUSH_H
#define NOTIF_PUSH_H

#include "lifecycle/delivery.h"

/* provider/payload.c */
extern char *notif_push_payload_error(NotifFormat format, Jsonb *payload,
									  ArrayType *apns_topics, ArrayType *fcm_topics);
extern void notif_push_check_payload(NotifFormat format, Jsonb *payload, const char *kind,
									 ArrayType *apns_topics, ArrayType *fcm_topics);
extern Jsonb *notif_apns_body(Jsonb *payload);

/* provider/fcm.c, provider/apns.c: fill call->url, body, headers */
extern void notif_build_fcm(NotifCall *call, const NotifProviderConf *provider,
							Jsonb *payload, struct curl_slist **h);
extern void notif_build_apns(NotifCall *call, const NotifProviderConf *provider,
							 Jsonb *payload, struct curl_slist **h);

/* provider/auth.c: the tokens of this process's providers */
extern bool notif_push_auth_ready(const NotifProviderConf *provider, TimestampTz now,
								  bool jobs_due, TimestampTz *wake_at);
extern char *notif_push_auth_header(const NotifProviderConf *provider, uint64 *generation);
extern void notif_push_call_auth(NotifCall *call, const NotifProviderConf *provider,
								struct curl_slist **h);
extern void notif_push_auth_refused(const char *provider, uint64 generation,
									bool expired, const char *reason);
extern void notif_push_auth_accepted(const char *provider, uint64 generation);
extern void notif_push_auth_keep_only(const NotifTypeConf *types, int n);

/* provider/unregistered.c: list the dead device tokens of the finished calls */
extern void notif_push_record_unregistered(dlist_head *finished);

/* provider/answer.c: what an FCM or APNs answer says, on a finished call */
extern void notif_push_read_answer(NotifCall *call);

#endif							/* NOTIF_PUSH_H */
