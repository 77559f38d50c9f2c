/*-------------------------------------------------------------------------
 *
 * sim_batch.h
 *      The messages of a batch request to provider_sim (POST /batch...):
 *      a JSON array of message objects, or an object whose first array
 *      member is that array.  Implemented in sim_batch.c (a JSON scanner,
 *      no allocation); provider_sim.c decides and answers.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SIM_BATCH_H
#define SIM_BATCH_H

#include <stdbool.h>
#include <stddef.h>

#define SIM_BATCH_MAX 1000		/* messages per request */

/* what a message's "sim" member asks for itself */
typedef enum SimMessageFault
{
	MSG_OK,
	MSG_REJECT,					/* result "rejected", not delivered */
	MSG_UNKNOWN,				/* result "pending" (neither), not delivered */
	MSG_UNKNOWN_DELIVERED,		/* result "pending", delivered */
	MSG_DROP,					/* no result for it, delivered */
	MSG_UNREGISTERED			/* result "rejected", error
								 * "DeviceNotRegistered" (Expo's ticket), not
								 * delivered */
} SimMessageFault;

typedef struct SimMessage
{
	const char *text;			/* the message, as received */
	size_t		len;
	const char *key;			/* its key field's string, raw; NULL: none */
	size_t		key_len;
	SimMessageFault fault;
} SimMessage;

/*
 * The messages of body into out (at most SIM_BATCH_MAX); each one's key
 * is its string member key_field.  Returns how many, or -1 when the body
 * is not a batch.
 */
extern int	sim_batch_parse(const char *body, size_t len, const char *key_field,
							SimMessage *out);

#endif							/* SIM_BATCH_H */
