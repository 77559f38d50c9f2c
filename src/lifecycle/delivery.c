/*-------------------------------------------------------------------------
 *
 * delivery.c
 *      Helpers on the records of delivery.h that every layer uses: a lane's
 *      provider by name, and a call's request freed (its headers wiped when
 *      they carry a token).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lifecycle/delivery.h"

/* The provider of that name among the lane's types, or NULL. */
const NotifProviderConf *
notif_lane_provider(const NotifTypeConf *types, int n, const char *name)
{
	int			i;

	for (i = 0; i < n; i++)
		if (strcmp(types[i].provider.name, name) == 0)
			return &types[i].provider;
	return NULL;
}

/* A call's request freed, when its transfer ends or it never starts. */
void
notif_free_request(NotifCall *call)
{
	struct curl_slist *s;

	/* a push call's headers carry its provider's token: wipe them */
	if (call->headers_secret)
		for (s = call->headers; s; s = s->next)
			explicit_bzero(s->data, strlen(s->data));
	if (call->headers)
		curl_slist_free_all(call->headers);
	call->headers = NULL;
	if (call->curlu)
		curl_url_cleanup(call->curlu);
	call->curlu = NULL;
}
