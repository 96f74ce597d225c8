/*
 * mallstat: what glibc's allocator holds inside a running process, for the soak step of
 * tools/gpu/gpu-run (issue 35: the process's RSS grew while its GPU memory stayed flat).
 * Built as a shared library and put on LD_PRELOAD, it starts a thread that writes, every
 * $MALLSTAT_INTERVAL seconds (default 2) and once at exit, one CSV line of mallinfo2() to
 * $MALLSTAT_OUT (nothing is written without it):
 *
 *   t_s          seconds since the library was loaded (CLOCK_MONOTONIC)
 *   in_use_mib   bytes handed out by malloc and not yet freed: uordblks + hblkhd (all arenas)
 *   free_mib     bytes free inside the arenas, kept by the allocator (fordblks): fragmentation
 *   arena_mib    bytes of the arenas from sbrk/heaps (arena), in use and free
 *   mmap_mib     bytes of chunks allocated with mmap (hblkhd), in use
 *   mmap_chunks  number of such chunks (hblks)
 *   free_chunks  free chunks in the arenas (ordblks)
 *   top_mib      releasable space at the top of the main arena (keepcost)
 *
 * So RSS that grows with in_use_mib is memory something still holds (a leak or a cache that
 * grows); with free_mib, the allocator keeping freed memory (arena fragmentation); with
 * neither, memory that malloc does not hand out (the driver's mappings: compare RssFile and
 * RssShmem against RssAnon in /proc/PID/status).
 *
 * Build (tools/gpu/gpu-pack does this):
 *   cc -O2 -shared -fPIC -o DIR/libmallstat.so tools/gpu/probes/mallstat.c -lpthread
 * Use:  LD_PRELOAD=DIR/libmallstat.so MALLSTAT_OUT=/tmp/m.csv ffmpeg ...
 */

#define _GNU_SOURCE
#include <malloc.h>

#include "sampler.h"

static void write_line(void)
{
    struct mallinfo2 mi = mallinfo2();
    const double mib = 1.0 / (1024 * 1024);
    char line[256];
    int n = snprintf(line, sizeof(line), "%.2f,%.3f,%.3f,%.3f,%.3f,%zu,%zu,%.3f\n", since_load(),
                     (mi.uordblks + mi.hblkhd) * mib, mi.fordblks * mib, mi.arena * mib,
                     mi.hblkhd * mib, mi.hblks, mi.ordblks, mi.keepcost * mib);

    if (n <= 0 || n >= (int)sizeof(line))
        return;
    pthread_mutex_lock(&write_lock);
    if (write(out_fd, line, n) != n) {
        /* nothing to do: a lost sample shows as a gap */
    }
    pthread_mutex_unlock(&write_lock);
}

__attribute__((constructor)) static void mallstat_init(void)
{
    static const char header[] =
        "t_s,in_use_mib,free_mib,arena_mib,mmap_mib,mmap_chunks,free_chunks,top_mib\n";

    /* children (ffmpeg runs none here) must not inherit the sampler */
    if (!sampler_start("mallstat", "MALLSTAT_OUT", "MALLSTAT_INTERVAL", header, write_line))
        unsetenv("LD_PRELOAD");
}

__attribute__((destructor)) static void mallstat_fini(void)
{
    if (out_fd >= 0)
        write_line();
}
