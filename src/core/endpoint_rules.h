/*-------------------------------------------------------------------------
 *
 * core/endpoint_rules.h
 *      Where a call to a customer's endpoint may connect, and the endpoint
 *      settings (endpoint_rules.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_ENDPOINT_RULES_H
#define NOTIF_ENDPOINT_RULES_H

struct sockaddr;

extern int	notif_endpoint_disable_after_s;

extern void notif_define_endpoint_gucs(void);
extern const char *notif_endpoint_address_refused(const struct sockaddr *sa);

#endif							/* NOTIF_ENDPOINT_RULES_H */
