/*-------------------------------------------------------------------------
 *
 * excerpt.h
 *      What of a provider's own text is kept (core/excerpt.c): printable,
 *      masked, short.
 *
 *-------------------------------------------------------------------------
 */
#ifndef NOTIF_EXCERPT_H
#define NOTIF_EXCERPT_H

#define NOTIF_EXCERPT_MAX	120		/* characters kept */
#define NOTIF_EXCERPT_SCAN	1024	/* bytes of the text looked at */
extern char *notif_excerpt(const char *raw, size_t len, bool cut);
extern void notif_printable_into(char *dst, const char *src, size_t n);
extern char *notif_printable_copy(const char *s, int len, int max);

#endif							/* NOTIF_EXCERPT_H */
