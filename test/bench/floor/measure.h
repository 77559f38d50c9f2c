/*-------------------------------------------------------------------------
 *
 * measure.h
 *      http_floor's measurements (see measure.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef FLOOR_MEASURE_H
#define FLOOR_MEASURE_H

#include <sys/resource.h>
#include <sys/time.h>

typedef struct Sample
{
	double		at;
	struct rusage ru;
	double		sim_cpu;		/* seconds, schedstat */
	double		sim_user;		/* seconds, /proc/PID/stat */
	double		sim_sys;
} Sample;

extern double now_s(void);
extern void sample(Sample *s, int sim_pid);
extern void perf_command(const char *cmd, int n_perf, const int *perf_ctl,
						 const int *perf_ack);
extern double tv(struct timeval t);

#endif
