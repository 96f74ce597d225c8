/*
 * since_exec(): seconds from this process's exec to now, from the start time
 * in /proc/self/stat (field 22, in clock ticks, so +-10 ms). Shared by
 * tools/gpu/probes/startprobe.c and tools/gpu/probes/vktime.c, which are built one file each.
 */
#ifndef PYPRORES_SINCE_EXEC_H
#define PYPRORES_SINCE_EXEC_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double since_exec(void)
{
    char buf[1024], *p;
    unsigned long long start = 0;
    struct timespec ts;
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    if (!(p = strrchr(buf, ')')))
        return -1;
    /* after "pid (comm)": field 3 onwards; starttime is field 22 */
    p++;
    for (int field = 3; field <= 22 && p; field++) {
        while (*p == ' ')
            p++;
        if (field == 22)
            start = strtoull(p, NULL, 10);
        p = strchr(p, ' ');
    }
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9 - (double)start / sysconf(_SC_CLK_TCK);
}

#endif
