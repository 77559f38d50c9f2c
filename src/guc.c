/*-------------------------------------------------------------------------
 *
 * guc.c
 *      The configuration parameters (GUCs) of notif_deliver.
 *
 * Every parameter is documented in doc/reference.md.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/guc.h"

#include "notif_deliver.h"

/* largest payload notif_enqueue accepts, in bytes of stored jsonb */
int			notif_max_payload_size = 64 * 1024;

void
notif_define_gucs(void)
{
	DefineCustomIntVariable("notif_deliver.max_payload_size",
							"Largest payload notif_enqueue accepts.",
							"Measured as the size of the stored jsonb value.",
							&notif_max_payload_size,
							64 * 1024,
							64,
							16 * 1024 * 1024,
							PGC_SUSET,
							GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("notif_deliver");
}
