/*-------------------------------------------------------------------------
 *
 * request.h
 *      A job's call built from its provider's format (provider/request.c):
 *      json, form and query here, FCM and APNs by push/.
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_REQUEST_H
#define NOTIF_REQUEST_H

#include "lifecycle/delivery.h"

extern void notif_build_request(NotifCall *call, const NotifProviderConf *provider,
								const char *key, Jsonb *payload, const char *traceparent);
extern CURLU *notif_url_parse(const NotifProviderConf *provider);
extern void notif_append_urlencoded(StringInfo buf, const char *s, size_t len);

#endif							/* NOTIF_REQUEST_H */
