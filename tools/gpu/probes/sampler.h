/*
 * sampler.h: what the LD_PRELOAD samplers of the soak step (mallstat.c, poolstat.c) share:
 * a CSV file named by an environment variable, a header, and a detached thread that calls
 * the sampler's tick function every $..._INTERVAL seconds (default 2). Included by each
 * sampler, so each library has its own copy of this state.
 */

#ifndef PPR_SAMPLER_H
#define PPR_SAMPLER_H

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int out_fd = -1;
static double interval = 2.0;
static struct timespec t_load;
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;
static void (*sampler_tick)(void);

static double since_load(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t_load.tv_sec) + (t.tv_nsec - t_load.tv_nsec) * 1e-9;
}

static void *sampler(void *arg)
{
    struct timespec d = { (time_t)interval, (long)((interval - (time_t)interval) * 1e9) };

    (void)arg;
    for (;;) {
        nanosleep(&d, NULL);
        sampler_tick();
    }
    return NULL;
}

/* Starts sampling into the file $out_env names, if it names one: 0 then, -1 when not sampling
 * (the times are still taken from now). */
static int sampler_start(const char *name, const char *out_env, const char *interval_env,
                         const char *header, void (*tick)(void))
{
    const char *out = getenv(out_env), *s;
    pthread_attr_t attr;
    pthread_t th;

    clock_gettime(CLOCK_MONOTONIC, &t_load);
    if (!out || !*out)
        return -1;
    if ((s = getenv(interval_env)) && atof(s) >= 0.01)
        interval = atof(s);
    out_fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out_fd < 0) {
        fprintf(stderr, "%s: cannot open %s\n", name, out);
        return -1;
    }
    if (write(out_fd, header, strlen(header)) < 0)
        return -1;
    sampler_tick = tick;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    if (pthread_create(&th, &attr, sampler, NULL))
        fprintf(stderr, "%s: no sampler thread\n", name);
    pthread_attr_destroy(&attr);
    return 0;
}

#endif /* PPR_SAMPLER_H */
