/*-------------------------------------------------------------------------
 *
 * park.h
 *      http_floor's --park: idle connections' sockets stay in the epoll set
 *      (see park.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef FLOOR_PARK_H
#define FLOOR_PARK_H

#include <curl/curl.h>
#include <stdbool.h>

extern long park_opened;		/* sockets opened through the open callback */
extern long park_closed;		/* ... closed through the close callback */
extern long park_events;		/* events on parked sockets (taken out) */

extern void park_init(int epfd);
extern void park_set_callbacks(CURL *easy);
extern int	park_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp,
						   void *socketp);
extern bool park_event_is_stray(int fd);
extern int	park_parked_count(void);
extern int	park_check_all_closed(void);

#endif
