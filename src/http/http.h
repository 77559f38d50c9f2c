/*-------------------------------------------------------------------------
 *
 * http.h
 *      The HTTP transport's interface: calls (lifecycle/delivery.h's
 *      NotifCall) started, driven on one epoll set, and handed back when
 *      they end.  It knows requests and answers only; how an answer is read
 *      beyond its status is the call's read_answer hook.
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_HTTP_H
#define NOTIF_HTTP_H

#include "lifecycle/delivery.h"

/*
 * libcurl 7.85 or later: CURLOPT_PROTOCOLS_STR limits every call to http
 * and https (handles.c), and curl_easy_header reads Retry-After (http.c).
 */
#if LIBCURL_VERSION_NUM < 0x075500
#error "notif_deliver needs libcurl 7.85.0 or later (CURLOPT_PROTOCOLS_STR): install a newer libcurl4-openssl-dev"
#endif

/* http.c */
extern void notif_http_init(void);
extern int	notif_http_epoll_fd(void);
extern long notif_http_timeout_ms(void);
extern void notif_http_drive(bool sockets_ready);
extern bool notif_http_start(NotifCall *call);
extern NotifCall *notif_http_next_done(void);
extern void notif_http_abort_all(const char *reason);
extern int	notif_http_inflight(void);
extern void notif_http_release_idle(void);
extern bool notif_http_start_aux(NotifCall *call);
extern void notif_http_config_read(const NotifTypeConf *types, int n);
extern int	notif_http_room(const NotifProviderConf *provider);

/* handles.c */
extern CURL *notif_http_get_handle(const char **refused, CURLcode *rc);
extern void notif_http_put_handle(CURL *easy, bool discard);

/* trust.c */
extern void notif_http_trust_defaults(CURL *easy);
extern CURLcode notif_http_trust(CURL *easy, const char *ca_cert);

/* sockets.c */
extern void notif_http_sockets_init(int epfd);
extern CURLcode notif_http_socket_callbacks(CURL *easy);
extern int	notif_http_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp,
								 void *socketp);
extern bool notif_http_socket_stray(curl_socket_t fd);
extern void notif_http_socket_drop(curl_socket_t fd);

#endif							/* NOTIF_HTTP_H */
