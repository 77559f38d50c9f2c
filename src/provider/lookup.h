/*-------------------------------------------------------------------------
 *
 * provider/lookup.h
 *      A provider's status lookup on the wire (provider/lookup.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_PROVIDER_LOOKUP_H
#define NOTIF_PROVIDER_LOOKUP_H

#include "lifecycle/delivery.h"

extern char *notif_lookup_url(const NotifLookupConf *lookup, const char *key);
extern NotifLookup notif_lookup_read(const NotifLookupConf *lookup, const NotifCall *look);

#endif							/* NOTIF_PROVIDER_LOOKUP_H */
