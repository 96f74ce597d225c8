/* fake_libcuda: a test-only stand-in for NVIDIA's libcuda.so.1 (tests/test_frame_pool.py), as
 * much of the driver API as csrc/cudaip.c loads, on the host: so that the zero-copy path
 * (_cuda_copy="none") runs on lavapipe. "Device memory" is the exported Vulkan memory mapped
 * into the process (lavapipe's opaque fds are memfds), so a device pointer is a host pointer
 * the test reads. Work is done at once: semaphore waits, events and streams count calls only.
 * - FAKE_CUDA_UUID (32 hex digits): the one device's UUID (else zeros);
 * - FAKE_CUDA_STREAM_BUSY=1: cuStreamQuery says a stream still runs (CUDA_ERROR_NOT_READY),
 *   so that dropped tensors record events;
 * - FAKE_CUDA_EVENT_POLLS=N: an event recorded answers cuEventQuery NOT_READY N times first;
 * - FAKE_CUDA_FD_HEADER=N: the allocation starts N bytes into the fd (lavapipe's opaque fds
 *   begin with a page of llvmpipe's own header).
 * fake_cuda_count(name) gives how often a call was made; fake_cuda_mapped() the bytes mapped. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define NOT_READY 600

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long counts[32];
static const char *names[32] = {
    "cuImportExternalMemory", "cuExternalMemoryGetMappedBuffer", "cuDestroyExternalMemory",
    "cuMemFree", "cuImportExternalSemaphore", "cuWaitExternalSemaphoresAsync",
    "cuDestroyExternalSemaphore", "cuEventCreate", "cuEventRecord", "cuEventSynchronize",
    "cuEventQuery", "cuEventDestroy", "cuStreamQuery", "cuStreamSynchronize",
    "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease", NULL,
};
enum { IMPORT, MAP, DESTROY_MEM, MEMFREE, IMPORT_SEM, WAIT_SEM, DESTROY_SEM, EV_CREATE, EV_RECORD,
       EV_SYNC, EV_QUERY, EV_DESTROY, ST_QUERY, ST_SYNC, RETAIN, RELEASE };
static void count(int i) { __atomic_add_fetch(&counts[i], 1, __ATOMIC_RELAXED); }

EXPORT long fake_cuda_count(const char *name)
{
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], name))
            return __atomic_load_n(&counts[i], __ATOMIC_RELAXED);
    return -1;
}

typedef struct { int fd; unsigned long long size; } ext_mem;
typedef struct { void *p; size_t size; } mapping;
static mapping maps[4096];
static long long mapped;

EXPORT long long fake_cuda_mapped(void) { return __atomic_load_n(&mapped, __ATOMIC_RELAXED); }

typedef struct { int polls; } event;

EXPORT CUresult cuInit(unsigned f) { return 0; }
EXPORT CUresult cuGetErrorString(CUresult r, const char **s) { *s = "fake CUDA error"; return 0; }
EXPORT CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
EXPORT CUresult cuDeviceGet(int *d, int i) { *d = i; return 0; }
EXPORT CUresult cuDeviceGetUuid_v2(char *uuid, int d)
{
    const char *hex = getenv("FAKE_CUDA_UUID");
    memset(uuid, 0, 16);
    for (int i = 0; hex && i < 16 && hex[2 * i] && hex[2 * i + 1]; i++) {
        char b[3] = { hex[2 * i], hex[2 * i + 1], 0 };
        uuid[i] = (char)strtol(b, NULL, 16);
    }
    return 0;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int d) { count(RETAIN); *ctx = (void *)1; return 0; }
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int d) { count(RELEASE); return 0; }
EXPORT CUresult cuCtxPushCurrent_v2(void *ctx) { return 0; }
EXPORT CUresult cuCtxPopCurrent_v2(void **ctx) { if (ctx) *ctx = (void *)1; return 0; }
EXPORT CUresult cuCtxSynchronize(void) { return 0; }

typedef struct { int type; union { int fd; void *p[2]; } handle; unsigned long long size;
                 unsigned flags; unsigned reserved[16]; } mem_desc;
typedef struct { unsigned long long offset, size; unsigned flags; unsigned reserved[16]; } buf_desc;

EXPORT CUresult cuImportExternalMemory(void **out, const mem_desc *d)
{
    ext_mem *m;
    if (d->type != 1 || d->handle.fd < 0)
        return 1;
    m = calloc(1, sizeof(*m));
    m->fd = d->handle.fd;       /* the driver owns it now */
    m->size = d->size;
    count(IMPORT);
    *out = m;
    return 0;
}
EXPORT CUresult cuExternalMemoryGetMappedBuffer(CUdeviceptr *ptr, void *ext, const buf_desc *d)
{
    ext_mem *m = ext;
    const char *header = getenv("FAKE_CUDA_FD_HEADER");
    void *p;
    if (d->offset + d->size > m->size)
        return 1;
    p = mmap(NULL, d->size, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd,
             (off_t)d->offset + (header ? atol(header) : 0));
    if (p == MAP_FAILED)
        return 2;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < 4096; i++)
        if (!maps[i].p) { maps[i].p = p; maps[i].size = d->size; break; }
    pthread_mutex_unlock(&lock);
    __atomic_add_fetch(&mapped, (long long)d->size, __ATOMIC_RELAXED);
    count(MAP);
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return 0;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr)
{
    count(MEMFREE);
    pthread_mutex_lock(&lock);
    for (int i = 0; i < 4096; i++)
        if (maps[i].p == (void *)(uintptr_t)ptr) {
            munmap(maps[i].p, maps[i].size);
            __atomic_sub_fetch(&mapped, (long long)maps[i].size, __ATOMIC_RELAXED);
            maps[i].p = NULL;
            break;
        }
    pthread_mutex_unlock(&lock);
    return 0;
}
EXPORT CUresult cuDestroyExternalMemory(void *ext)
{
    ext_mem *m = ext;
    count(DESTROY_MEM);
    close(m->fd);
    free(m);
    return 0;
}
EXPORT CUresult cuImportExternalSemaphore(void **out, const mem_desc *d)
{
    if (d->type != 9 || d->handle.fd < 0)
        return 1;
    close(d->handle.fd);
    count(IMPORT_SEM);
    *out = malloc(1);
    return 0;
}
EXPORT CUresult cuWaitExternalSemaphoresAsync(void *const *s, const void *p, unsigned n, void *st)
{
    count(WAIT_SEM);
    return 0;
}
EXPORT CUresult cuDestroyExternalSemaphore(void *s) { count(DESTROY_SEM); free(s); return 0; }
EXPORT CUresult cuEventCreate(void **e, unsigned f) { count(EV_CREATE); *e = calloc(1, sizeof(event)); return 0; }
EXPORT CUresult cuEventRecord(void *e, void *st)
{
    const char *n = getenv("FAKE_CUDA_EVENT_POLLS");
    count(EV_RECORD);
    ((event *)e)->polls = n ? atoi(n) : 0;
    return 0;
}
EXPORT CUresult cuEventSynchronize(void *e) { count(EV_SYNC); ((event *)e)->polls = 0; return 0; }
EXPORT CUresult cuEventQuery(void *e)
{
    event *ev = e;
    count(EV_QUERY);
    if (ev->polls > 0) {
        ev->polls--;
        return NOT_READY;
    }
    return 0;
}
EXPORT CUresult cuEventDestroy_v2(void *e) { count(EV_DESTROY); free(e); return 0; }
EXPORT CUresult cuEventElapsedTime(float *ms, void *a, void *b) { *ms = 0; return 0; }
EXPORT CUresult cuStreamSynchronize(void *s) { count(ST_SYNC); return 0; }
EXPORT CUresult cuStreamCreate(void **s, unsigned f) { *s = malloc(1); return 0; }
EXPORT CUresult cuStreamDestroy_v2(void *s) { free(s); return 0; }
EXPORT CUresult cuStreamWaitEvent(void *s, void *e, unsigned f) { return 0; }
EXPORT CUresult cuStreamQuery(void *s)
{
    const char *busy = getenv("FAKE_CUDA_STREAM_BUSY");
    count(ST_QUERY);
    return busy && !strcmp(busy, "1") ? NOT_READY : 0;
}
/* PPR_COPY_CUDA's, not used by these tests */
EXPORT CUresult cuExternalMemoryGetMappedMipmappedArray(void **a, void *m, const void *d) { return 801; }
EXPORT CUresult cuMipmappedArrayGetLevel(void **a, void *m, unsigned l) { return 801; }
EXPORT CUresult cuMipmappedArrayDestroy(void *m) { return 0; }
EXPORT CUresult cuMemcpy2DAsync_v2(const void *c, void *s) { return 801; }
