/*-------------------------------------------------------------------------
 *
 * measure.c
 *      http_floor's measurements: the client's and the simulator's CPU
 *      over the measured calls, and perf stat's control fifos.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE

#include "measure.h"

#include <dirent.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void
die(const char *what)
{
	fprintf(stderr, "http_floor: %s\n", what);
	exit(2);
}

double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* the simulator's CPU: every thread's run time, and user and system */
static void
sample_sim(Sample *s, int sim_pid)
{
	char		path[64];
	DIR		   *dir;
	struct dirent *de;
	FILE	   *f;
	unsigned long long ns;
	unsigned long utime,
				stime;

	s->sim_cpu = s->sim_user = s->sim_sys = 0;
	if (sim_pid == 0)
		return;
	snprintf(path, sizeof(path), "/proc/%d/task", sim_pid);
	if ((dir = opendir(path)) == NULL)
		die("cannot read the simulator's /proc/PID/task");
	while ((de = readdir(dir)) != NULL)
	{
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/schedstat", sim_pid, de->d_name);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		if (fscanf(f, "%llu", &ns) == 1)
			s->sim_cpu += ns / 1e9;
		fclose(f);
	}
	closedir(dir);
	snprintf(path, sizeof(path), "/proc/%d/stat", sim_pid);
	if ((f = fopen(path, "r")) == NULL ||
		fscanf(f, "%*d (%*[^)]) %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
			   &utime, &stime) != 2)
		die("cannot read the simulator's /proc/PID/stat");
	fclose(f);
	s->sim_user = (double) utime / sysconf(_SC_CLK_TCK);
	s->sim_sys = (double) stime / sysconf(_SC_CLK_TCK);
}

void
sample(Sample *s, int sim_pid)
{
	s->at = now_s();
	getrusage(RUSAGE_SELF, &s->ru);
	sample_sim(s, sim_pid);
}

/* tell each perf stat to enable or disable its counters, wait for its ack */
void
perf_command(const char *cmd, int n_perf, const int *perf_ctl, const int *perf_ack)
{
	char		ack[16];
	int			i;

	for (i = 0; i < n_perf; i++)
	{
		struct pollfd pfd = {.fd = perf_ack[i],.events = POLLIN};

		/* (a perf that is gone never answers: give up after 10 s) */
		if (write(perf_ctl[i], cmd, strlen(cmd)) != (ssize_t) strlen(cmd) ||
			poll(&pfd, 1, 10000) != 1 || read(perf_ack[i], ack, sizeof(ack)) <= 0)
			die("no answer from perf stat on its control fifo");
	}
}

double
tv(struct timeval t)
{
	return t.tv_sec + t.tv_usec / 1e6;
}
