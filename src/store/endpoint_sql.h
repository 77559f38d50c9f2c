/*-------------------------------------------------------------------------
 *
 * store/endpoint_sql.h
 *      Customers' endpoints (notif_endpoint) as the senders read and
 *      update them (endpoint_sql.c).  Inside a transaction, connected to
 *      SPI, with the plans prepared (notif_sql_prepare).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_ENDPOINT_SQL_H
#define NOTIF_ENDPOINT_SQL_H

#include "datatype/timestamp.h"

/* a notif_endpoint row as a claim reads it */
typedef struct NotifEndpoint
{
	char	   *owner;
	char	   *url;
	char	  **secrets;		/* NULL-terminated; NULL: none (secret) */
	bool		enabled;
	char	   *disabled_reason;	/* or NULL */
} NotifEndpoint;

/* an endpoint the results just disabled */
typedef struct NotifEndpointDisabled
{
	char	   *owner;
	TimestampTz failing_since;
} NotifEndpointDisabled;

extern int	notif_sql_endpoints(char **owners, int n, MemoryContext cxt, NotifEndpoint **out);
extern int	notif_sql_endpoint_results(char **owners, const bool *ok, const TimestampTz *at, int n,
									   int64 disable_after_ms, MemoryContext cxt,
									   NotifEndpointDisabled **out);

#endif							/* NOTIF_ENDPOINT_SQL_H */
