/*-------------------------------------------------------------------------
 *
 * core/json.h
 *      Reading a provider's JSON answer without raising an ERROR (json.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_JSON_H
#define NOTIF_JSON_H

#include "utils/jsonb.h"

extern Jsonb *notif_parse_json(const char *text);
extern bool notif_json_number_in(JsonbValue *v, double lo, double hi, double *out);

#endif							/* NOTIF_JSON_H */
