/*
 * poolstat: how many buffers each AVBufferPool of a process has allocated, for the soak step
 * (issue 35: RSS that grows in steps of a frame's size). A pool never frees a buffer before
 * it is uninitialised, so its count is the most buffers it ever had out at once; a count that
 * keeps rising is a queue or a reference that grows, one that stops is a high-water mark.
 *
 * Built as a shared library and put on LD_PRELOAD beside the FFmpeg libraries, it interposes
 * av_buffer_pool_init() and av_buffer_pool_init2() where one library calls another's (FFmpeg
 * links its libraries with -Bsymbolic: a pool libavutil makes for itself is not seen, those of
 * libavcodec, libavfilter and libavformat are), counts the buffers each pool allocates, and
 * writes every $POOLSTAT_INTERVAL seconds (default 2) and at exit one line per pool that
 * allocated anything since the last line, to $POOLSTAT_OUT (nothing without it):
 *
 *   t_s,pool,creator,size,buffers,mib
 *
 * pool: its number in creation order; creator: the library and symbol that created it
 * (dladdr of the caller, +offset when the function is not exported); size: the size asked at
 * init; buffers: allocated so far; mib: buffers x the size of the last one allocated.
 *
 * Build: cc -O2 -shared -fPIC -o libpoolstat.so poolstat.c -ldl -lpthread
 * Use:   LD_PRELOAD=./libpoolstat.so POOLSTAT_OUT=/tmp/p.csv ffmpeg ...
 */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sampler.h"

typedef struct AVBufferRef AVBufferRef;
typedef struct AVBufferPool AVBufferPool;
typedef AVBufferRef *(*alloc_fn)(size_t size);
typedef AVBufferRef *(*alloc2_fn)(void *opaque, size_t size);
typedef void (*free_fn)(void *opaque);

#define MAX_POOLS 4096

typedef struct Pool {
    alloc_fn alloc;
    alloc2_fn alloc2;
    free_fn pool_free;
    void *opaque;
    size_t size;
    char creator[96];
    _Atomic size_t buffers, last_size, reported;
} Pool;

static Pool pools[MAX_POOLS];
static atomic_int nb_pools;

static AVBufferPool *(*real_init)(size_t, alloc_fn);
static AVBufferPool *(*real_init2)(size_t, void *, alloc2_fn, free_fn);
static AVBufferRef *(*real_buffer_alloc)(size_t);

static void resolve(void)
{
    if (!real_init2) {
        real_init = (AVBufferPool *(*)(size_t, alloc_fn))dlsym(RTLD_NEXT, "av_buffer_pool_init");
        real_init2 = (AVBufferPool *(*)(size_t, void *, alloc2_fn, free_fn))dlsym(RTLD_NEXT, "av_buffer_pool_init2");
        real_buffer_alloc = (AVBufferRef *(*)(size_t))dlsym(RTLD_NEXT, "av_buffer_alloc");
    }
}

static void name_caller(char *out, size_t n, void *addr)
{
    Dl_info info;
    const char *lib;

    if (!dladdr(addr, &info) || !info.dli_fname) {
        snprintf(out, n, "?");
        return;
    }
    lib = strrchr(info.dli_fname, '/');
    lib = lib ? lib + 1 : info.dli_fname;
    if (info.dli_sname)
        snprintf(out, n, "%s:%s", lib, info.dli_sname);
    else
        snprintf(out, n, "%s+0x%lx", lib, (unsigned long)((uintptr_t)addr - (uintptr_t)info.dli_fbase));
}

static AVBufferRef *counting_alloc(void *opaque, size_t size)
{
    Pool *p = opaque;
    AVBufferRef *ref;

    if (p->alloc2)
        ref = p->alloc2(p->opaque, size);
    else if (p->alloc)
        ref = p->alloc(size);
    else
        ref = real_buffer_alloc ? real_buffer_alloc(size) : NULL;
    if (ref) {
        atomic_fetch_add(&p->buffers, 1);
        atomic_store(&p->last_size, size);
    }
    return ref;
}

static void counting_free(void *opaque)
{
    Pool *p = opaque;
    if (p->pool_free)
        p->pool_free(p->opaque);
}

static Pool *new_pool(size_t size, void *caller)
{
    int i = atomic_fetch_add(&nb_pools, 1);
    Pool *p;

    if (i >= MAX_POOLS)
        return NULL;
    p = &pools[i];
    p->size = size;
    name_caller(p->creator, sizeof(p->creator), caller);
    return p;
}

__attribute__((visibility("default")))
AVBufferPool *av_buffer_pool_init2(size_t size, void *opaque, alloc2_fn alloc, free_fn pool_free)
{
    Pool *p;

    resolve();
    p = new_pool(size, __builtin_return_address(0));
    if (!p || !real_init2)
        return real_init2 ? real_init2(size, opaque, alloc, pool_free) : NULL;
    p->alloc2 = alloc;
    p->opaque = opaque;
    p->pool_free = pool_free;
    return real_init2(size, p, counting_alloc, counting_free);
}

__attribute__((visibility("default")))
AVBufferPool *av_buffer_pool_init(size_t size, alloc_fn alloc)
{
    Pool *p;

    resolve();
    p = new_pool(size, __builtin_return_address(0));
    if (!p || !real_init2)
        return real_init ? real_init(size, alloc) : NULL;
    p->alloc = alloc;
    return real_init2(size, p, counting_alloc, NULL);
}

static void report(void)
{
    char line[256];
    int n = atomic_load(&nb_pools);

    if (out_fd < 0)
        return;
    n = n < MAX_POOLS ? n : MAX_POOLS;
    pthread_mutex_lock(&write_lock);
    for (int i = 0; i < n; i++) {
        Pool *p = &pools[i];
        size_t b = atomic_load(&p->buffers);
        int len;

        if (!b || b == atomic_load(&p->reported))
            continue;
        atomic_store(&p->reported, b);
        len = snprintf(line, sizeof(line), "%.2f,%d,%s,%zu,%zu,%.3f\n", since_load(), i, p->creator, p->size, b,
                       b * (double)atomic_load(&p->last_size) / (1024 * 1024));
        if (len > 0 && len < (int)sizeof(line) && write(out_fd, line, len) != len)
            break;
    }
    pthread_mutex_unlock(&write_lock);
}

__attribute__((constructor)) static void poolstat_init(void)
{
    sampler_start("poolstat", "POOLSTAT_OUT", "POOLSTAT_INTERVAL", "t_s,pool,creator,size,buffers,mib\n",
                  report);
}

__attribute__((destructor)) static void poolstat_fini(void)
{
    report();
}
