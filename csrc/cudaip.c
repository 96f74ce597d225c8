/*
 * cudaip.c - frames handed to CUDA without a host copy (ppr_cuda): Vulkan
 * memory exported as opaque file descriptors and imported into CUDA, a copy
 * on the GPU per frame, and an exported timeline semaphore that CUDA waits on
 * in the consumer's stream. See pyprores.h.
 *
 * The CUDA driver is loaded at run time (dlopen libcuda.so.1): the library
 * builds and runs without it, and ppr_cuda_open says why when it is missing.
 * The pattern is hwcontext_vulkan's export to CUDA (vulkan_export_to_cuda):
 * memory exported with VK_KHR_external_memory_fd and imported with
 * cuImportExternalMemory, a timeline semaphore exported with
 * VK_KHR_external_semaphore_fd and imported as
 * CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD. Here the exported
 * memory is a linear buffer of our own per frame (the planes one after the
 * other, rows unpadded), so that a CUDA pointer is all a consumer needs.
 *
 * Lifetimes: a buffer is referenced by its creator and by each DLPack tensor
 * made of it; the last reference frees it (its Vulkan and CUDA objects). A
 * buffer holds the ppr_cuda, which holds the Vulkan device and the CUDA
 * primary context: tensors outlive the decoder. A tensor's deleter records a
 * CUDA event on the stream it was made for, and the buffer's next copy waits
 * for those events, so the GPU never writes a buffer that CUDA work queued
 * before the tensor was dropped still reads.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>
#include <libavutil/buffer.h>
#include <libavutil/common.h>
#include <libavutil/frame.h>
#include <libavutil/hwcontext.h>
#include <libavutil/hwcontext_vulkan.h>
#include <libavutil/log.h>
#include <libavutil/pixdesc.h>

#include "internal.h"
#include "vkcopy.h"

/* ------------------------------------------------------------------------ */
/* the CUDA driver API, as much as is used (types from the driver API's
 * documentation; the library does not need CUDA's headers)                  */

typedef int CUresult;
#define CUDA_SUCCESS 0
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUextMemory_st *CUexternalMemory;
typedef struct CUextSemaphore_st *CUexternalSemaphore;
typedef unsigned long long CUdeviceptr;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef struct CUarray_st *CUarray;
typedef struct { char bytes[16]; } CUuuid;

enum {
    CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD = 1,
    CUDA_EXTERNAL_MEMORY_DEDICATED = 1,
    CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD = 9,
    CU_EVENT_DISABLE_TIMING = 2,
    CU_STREAM_NON_BLOCKING = 1,
    CU_AD_FORMAT_UNSIGNED_INT16 = 2,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_ARRAY = 3,
};

typedef struct {                        /* CUDA_ARRAY3D_DESCRIPTOR */
    size_t Width, Height, Depth;
    int Format;                         /* CUarray_format */
    unsigned int NumChannels;
    unsigned int Flags;
} cu_array3d_desc;

typedef struct {                        /* CUDA_EXTERNAL_MEMORY_MIPMAPPED_ARRAY_DESC */
    unsigned long long offset;
    cu_array3d_desc arrayDesc;
    unsigned int numLevels;
    unsigned int reserved[16];
} cu_ext_mem_mipmap_desc;

typedef struct {                        /* CUDA_MEMCPY2D */
    size_t srcXInBytes, srcY;
    int srcMemoryType;                  /* CUmemorytype */
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} cu_memcpy2d;

typedef struct {
    int type;
    union {
        int fd;
        struct { void *handle; const void *name; } win32;
        const void *nvSciBufObject;
    } handle;
    unsigned long long size;
    unsigned int flags;
    unsigned int reserved[16];
} cu_ext_mem_desc;

typedef struct {
    unsigned long long offset;
    unsigned long long size;
    unsigned int flags;
    unsigned int reserved[16];
} cu_ext_mem_buffer_desc;

typedef struct {
    int type;
    union {
        int fd;
        struct { void *handle; const void *name; } win32;
        const void *nvSciSyncObj;
    } handle;
    unsigned int flags;
    unsigned int reserved[16];
} cu_ext_sem_desc;

typedef struct {
    struct {
        struct { unsigned long long value; } fence;
        union { void *fence; unsigned long long reserved; } nvSciSync;
        struct { unsigned long long key; unsigned int timeoutMs; } keyedMutex;
        unsigned int reserved[10];
    } params;
    unsigned int flags;
    unsigned int reserved[16];
} cu_ext_sem_wait_params;

typedef struct cuda_fns {
    CUresult (*Init)(unsigned);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetUuid)(CUuuid *, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*CtxPushCurrent)(CUcontext);
    CUresult (*CtxPopCurrent)(CUcontext *);
    CUresult (*CtxSynchronize)(void);
    CUresult (*ImportExternalMemory)(CUexternalMemory *, const cu_ext_mem_desc *);
    CUresult (*ExternalMemoryGetMappedBuffer)(CUdeviceptr *, CUexternalMemory,
                                              const cu_ext_mem_buffer_desc *);
    CUresult (*DestroyExternalMemory)(CUexternalMemory);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*ImportExternalSemaphore)(CUexternalSemaphore *, const cu_ext_sem_desc *);
    CUresult (*WaitExternalSemaphoresAsync)(const CUexternalSemaphore *,
                                            const cu_ext_sem_wait_params *, unsigned, CUstream);
    CUresult (*DestroyExternalSemaphore)(CUexternalSemaphore);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventQuery)(CUevent);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*StreamSynchronize)(CUstream);
    /* the copy from the decoder's own images (PPR_COPY_CUDA) */
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
    CUresult (*StreamQuery)(CUstream);
    CUresult (*ExternalMemoryGetMappedMipmappedArray)(CUmipmappedArray *, CUexternalMemory,
                                                      const cu_ext_mem_mipmap_desc *);
    CUresult (*MipmappedArrayGetLevel)(CUarray *, CUmipmappedArray, unsigned);
    CUresult (*MipmappedArrayDestroy)(CUmipmappedArray);
    CUresult (*Memcpy2DAsync)(const cu_memcpy2d *, CUstream);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
} cuda_fns;

static cuda_fns g_cu;
static int g_cu_ret;                    /* 0, or why the driver cannot be used */
static char g_cu_err[PPR_MSG_SIZE];
static pthread_once_t g_cu_once = PTHREAD_ONCE_INIT;

static void cuda_load(void)
{
    static const struct { const char *names[2]; size_t off; } syms[] = {
#define SYM(field, a, b) { { a, b }, offsetof(cuda_fns, field) }
        SYM(Init, "cuInit", NULL),
        SYM(GetErrorString, "cuGetErrorString", NULL),
        SYM(DeviceGetCount, "cuDeviceGetCount", NULL),
        SYM(DeviceGet, "cuDeviceGet", NULL),
        SYM(DeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid"),
        SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL),
        SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
        SYM(CtxPushCurrent, "cuCtxPushCurrent_v2", "cuCtxPushCurrent"),
        SYM(CtxPopCurrent, "cuCtxPopCurrent_v2", "cuCtxPopCurrent"),
        SYM(CtxSynchronize, "cuCtxSynchronize", NULL),
        SYM(ImportExternalMemory, "cuImportExternalMemory", NULL),
        SYM(ExternalMemoryGetMappedBuffer, "cuExternalMemoryGetMappedBuffer", NULL),
        SYM(DestroyExternalMemory, "cuDestroyExternalMemory", NULL),
        SYM(MemFree, "cuMemFree_v2", "cuMemFree"),
        SYM(ImportExternalSemaphore, "cuImportExternalSemaphore", NULL),
        SYM(WaitExternalSemaphoresAsync, "cuWaitExternalSemaphoresAsync", NULL),
        SYM(DestroyExternalSemaphore, "cuDestroyExternalSemaphore", NULL),
        SYM(EventCreate, "cuEventCreate", NULL),
        SYM(EventRecord, "cuEventRecord", NULL),
        SYM(EventSynchronize, "cuEventSynchronize", NULL),
        SYM(EventQuery, "cuEventQuery", NULL),
        SYM(EventDestroy, "cuEventDestroy_v2", "cuEventDestroy"),
        SYM(StreamSynchronize, "cuStreamSynchronize", NULL),
        SYM(StreamCreate, "cuStreamCreate", NULL),
        SYM(StreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy"),
        SYM(StreamWaitEvent, "cuStreamWaitEvent", NULL),
        SYM(StreamQuery, "cuStreamQuery", NULL),
        SYM(ExternalMemoryGetMappedMipmappedArray, "cuExternalMemoryGetMappedMipmappedArray", NULL),
        SYM(MipmappedArrayGetLevel, "cuMipmappedArrayGetLevel", NULL),
        SYM(MipmappedArrayDestroy, "cuMipmappedArrayDestroy", NULL),
        SYM(Memcpy2DAsync, "cuMemcpy2DAsync_v2", "cuMemcpy2DAsync"),
        SYM(EventElapsedTime, "cuEventElapsedTime", NULL),
#undef SYM
    };
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    const char *why;
    size_t i;
    CUresult r;

    if (!lib) {
        why = dlerror();
        g_cu_ret = PPR_ENODEVICE;
        snprintf(g_cu_err, sizeof(g_cu_err), "CUDA frames need NVIDIA's CUDA driver, which "
                 "is not installed here (%s); decode into numpy (output=\"numpy\") instead",
                 why ? why : "libcuda.so.1 not found");
        return;
    }
    /* the library stays loaded for the process: buffers may outlive everything */
    for (i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *f = dlsym(lib, syms[i].names[0]);
        if (!f && syms[i].names[1])
            f = dlsym(lib, syms[i].names[1]);
        if (!f) {
            g_cu_ret = PPR_ENODEVICE;
            snprintf(g_cu_err, sizeof(g_cu_err), "the CUDA driver (libcuda.so.1) has no %s: "
                     "too old for external memory (CUDA 11.2 or later is needed)",
                     syms[i].names[0]);
            return;
        }
        memcpy((char *)&g_cu + syms[i].off, &f, sizeof(f));
    }
    if ((r = g_cu.Init(0))) {
        const char *s = NULL;
        g_cu.GetErrorString(r, &s);
        g_cu_ret = PPR_ENODEVICE;
        snprintf(g_cu_err, sizeof(g_cu_err), "the CUDA driver did not start: cuInit: %s (%d)",
                 s ? s : "?", r);
    }
}

static int cu_fail(CUresult r, const char *what)
{
    const char *s = NULL;
    if (g_cu.GetErrorString)
        g_cu.GetErrorString(r, &s);
    return ppr__fail(r == 2 /* CUDA_ERROR_OUT_OF_MEMORY */ ? PPR_ENOMEM : PPR_ENODEVICE,
                     "%s failed: %s (CUresult %d)", what, s ? s : "?", r);
}

/* ------------------------------------------------------------------------ */

#define MAX_EVENTS 16
#define MAX_IMPORTS 96          /* the decoder's images imported into CUDA, kept */

/* One of the decoder's frames (a pool image set of its frames context) as
 * CUDA sees it: each plane's memory imported and mapped as a CUDA array, and
 * its timeline semaphore imported. Made once per AVVkFrame: the frames
 * context's pool keeps its frames until the context goes, which the cache
 * holds a reference to (imp_frames). */
typedef struct cuda_image {
    const AVVkFrame *vkf;
    VkDeviceMemory mem[4];          /* with vkf: the key */
    int nb;
    uint32_t w[4], h[4];            /* each plane's image extent */
    CUexternalMemory ext[4];
    CUmipmappedArray mma[4];
    CUarray arr[4];
    CUexternalSemaphore sem[4];
} cuda_image;

struct ppr_cuda {
    int refs;                       /* the opener's and each buffer's (__atomic) */
    AVBufferRef *device;
    void (*release)(void *);        /* the session side's hold on the device */
    void *release_opaque;
    AVHWDeviceContext *dc;
    host_vk vk;
    VkDevice dev;
    VkPhysicalDevice phys;
    const VkAllocationCallbacks *alloc;
    uint32_t qf, qi;
    VkQueue queue;                  /* the transfer queue (PPR_COPY_TRANSFER) */
    ppr_copier *sh;                 /* the shader copy's (PPR_COPY_SHADER), or NULL */
    char sh_err[PPR_MSG_SIZE];      /* why there is none */
    int copy;                       /* PPR_COPY_SHADER(_ASYNC), _TRANSFER or _CUDA */
    int last_shader;                /* the last copy went to the copier's queue */
    uint64_t n_shader, n_transfer;  /* copies so far */
    /* PPR_COPY_CUDA: CUDA copies from the decoder's images, on a stream of ours */
    pthread_mutex_t imp_lock;       /* the fields below */
    CUstream stream;
    AVBufferRef *imp_frames;        /* the frames context the imports belong to */
    cuda_image imp[MAX_IMPORTS];
    int nb_imp;
    char cu_fallback[PPR_MSG_SIZE]; /* why frames go to the shader copy instead ("": none) */
    PFN_vkGetImageMemoryRequirements2 get_image_req;
    PFN_vkGetPhysicalDeviceImageFormatProperties2 get_format_props;
    uint64_t n_cuda;
    uint64_t n_in_place;            /* PPR_COPY_NONE: frames handed over, no copy (under lock) */
    int pumps;                      /* pumps running with this side (under lock) */
    struct ppr_cuda_buffer *deferred;   /* in-place frames whose tensors' streams still
                                     * run: back to the pool once done (under lock) */
    /* consumers' synchronisation (__atomic): waits queued on their streams and those
     * not needed (the copy had ended), events recorded by tensors' deleters and those
     * not needed (the stream was idle) */
    uint64_t n_waits, n_waits_skipped, n_events, n_events_skipped;
    int gpu_time;                   /* PYPRORES_COPY_GPU_TIME=1: CUDA's copies timed too */
    uint64_t cu_gpu_ns, cu_gpu_copies;  /* under lock */
    VkSemaphore ready;              /* exported timeline semaphore: copies signal it */
    uint64_t ready_value;           /* the last value a copy was submitted to signal */
    CUexternalSemaphore cu_ready;
    CUdevice cudev;
    int ordinal;
    CUcontext ctx;                  /* the device's primary context, retained */
    pthread_mutex_t lock;           /* ready_value, submissions */
};

struct ppr_cuda_buffer {
    int refs;                       /* the creator's and each tensor's (__atomic) */
    ppr_cuda *c;
    VkBuffer buf;
    VkDeviceMemory mem;
    size_t size;
    CUexternalMemory ext;
    CUdeviceptr ptr;
    VkCommandPool pool;
    VkCommandBuffer cmd;
    VkFence fence;
    pthread_mutex_t lock;           /* the fields below */
    int pending;                    /* a copy submitted, its fence not waited for */
    AVFrame *frame;                 /* the copied frame, held until its copy ended */
    uint64_t ready_value;           /* the value of c->ready its copy signals */
    int via_cuda;                   /* the last copy was CUDA's own (c->stream, `copied`) */
    CUevent copied;                 /* recorded on c->stream after a CUDA copy */
    CUevent copy_start;             /* and before it (PYPRORES_COPY_GPU_TIME=1) */
    int timed;                      /* the pending CUDA copy has both events */
    uint64_t gen;                   /* copies into it so far */
    uint64_t legacy_waited;         /* the copy (gen) CUDA's legacy stream was made to wait for */
    CUevent events[MAX_EVENTS];     /* recorded by tensors' deleters, waited for by the next copy */
    int nb_events, nb_recorded;
    /* PPR_COPY_NONE: the decoder's own frame (`frame`), its images' memory in place */
    int in_place;
    int nb_zc;
    CUdeviceptr zc_lo[4], zc_hi[4];         /* each plane's memory, as tensors may take it */
    CUexternalSemaphore zc_sem[4];          /* the images' timeline semaphores, imported */
    VkSemaphore zc_vksem[4];
    uint64_t zc_val[4];                     /* and the decode's values */
    struct ppr_cuda_buffer *next;           /* in c->deferred */
};

static int g_cuda_buffers_live;     /* __atomic */

/* Destroy an image's CUDA objects; c->ctx current. */
static void image_destroy(cuda_image *im)
{
    int i;
    for (i = 0; i < 4; i++) {
        if (im->sem[i])
            g_cu.DestroyExternalSemaphore(im->sem[i]);
        if (im->mma[i])
            g_cu.MipmappedArrayDestroy(im->mma[i]);
        if (im->ext[i])
            g_cu.DestroyExternalMemory(im->ext[i]);
    }
    memset(im, 0, sizeof(*im));
}

/* Let go of the decoder's images imported into CUDA, once the copies that
 * read them ended, and of their frames context; c->imp_lock held. */
static void imports_clear(ppr_cuda *c)
{
    CUcontext old;
    int i;

    if (c->nb_imp && !g_cu.CtxPushCurrent(c->ctx)) {
        if (c->stream)
            g_cu.StreamSynchronize(c->stream);
        for (i = 0; i < c->nb_imp; i++)
            image_destroy(&c->imp[i]);
        g_cu.CtxPopCurrent(&old);
    }
    c->nb_imp = 0;
}

static void imports_flush(ppr_cuda *c)
{
    imports_clear(c);
    av_buffer_unref(&c->imp_frames);
}

static void cuda_unref(ppr_cuda *c)
{
    CUcontext old;
    if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL))
        return;
    ppr__copier_free(c->sh);        /* waits for its copies */
    imports_flush(c);
    if (c->stream && !g_cu.CtxPushCurrent(c->ctx)) {
        g_cu.StreamSynchronize(c->stream);
        g_cu.StreamDestroy(c->stream);
        g_cu.CtxPopCurrent(&old);
    }
    if (c->cu_ready && !g_cu.CtxPushCurrent(c->ctx)) {
        g_cu.DestroyExternalSemaphore(c->cu_ready);
        g_cu.CtxPopCurrent(&old);
    }
    if (c->ready)
        c->vk.DestroySemaphore(c->dev, c->ready, c->alloc);
    if (c->ctx)
        g_cu.DevicePrimaryCtxRelease(c->cudev);
    av_buffer_unref(&c->device);
    if (c->release)
        c->release(c->release_opaque);
    pthread_mutex_destroy(&c->imp_lock);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

#define CUCHECK(call, what)                                                    \
    do {                                                                       \
        CUresult c_ = (call);                                                  \
        if (c_) {                                                              \
            ret = cu_fail(c_, what);                                           \
            goto fail;                                                         \
        }                                                                      \
    } while (0)

/* Vulkan memory of `size` bytes imported into CUDA through an opaque fd, which
 * CUDA owns once it took it; `dedicated`: allocated for one image or buffer
 * alone, as the import must say. c->ctx current. 0, or an error (its message
 * set). */
static int import_memory(ppr_cuda *c, VkDeviceMemory mem, uint64_t size, int dedicated,
                         CUexternalMemory *out)
{
    cu_ext_mem_desc d = {
        .type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD,
        .size = size,
        .flags = dedicated ? CUDA_EXTERNAL_MEMORY_DEDICATED : 0,
    };
    CUresult cr;
    VkResult r;
    int fd = -1;

    r = c->vk.GetMemoryFdKHR(c->dev, &(VkMemoryGetFdInfoKHR) {
            .sType = VK_STRUCTURE_TYPE_MEMORY_GET_FD_INFO_KHR,
            .memory = mem,
            .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT,
        }, &fd);
    if (r != VK_SUCCESS)
        return ppr__vk_fail(r, "vkGetMemoryFdKHR");
    d.handle.fd = fd;
    if ((cr = g_cu.ImportExternalMemory(out, &d))) {
        close(fd);
        *out = NULL;
        return cu_fail(cr, "cuImportExternalMemory");
    }
    return 0;
}

/* A timeline semaphore imported into CUDA the same way. */
static int import_timeline(ppr_cuda *c, VkSemaphore sem, CUexternalSemaphore *out)
{
    cu_ext_sem_desc d = { .type = CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD };
    CUresult cr;
    VkResult r;
    int fd = -1;

    r = c->vk.GetSemaphoreFdKHR(c->dev, &(VkSemaphoreGetFdInfoKHR) {
            .sType = VK_STRUCTURE_TYPE_SEMAPHORE_GET_FD_INFO_KHR,
            .semaphore = sem,
            .handleType = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT,
        }, &fd);
    if (r != VK_SUCCESS)
        return ppr__vk_fail(r, "vkGetSemaphoreFdKHR");
    d.handle.fd = fd;
    if ((cr = g_cu.ImportExternalSemaphore(out, &d))) {
        close(fd);
        *out = NULL;
        return cu_fail(cr, "cuImportExternalSemaphore (timeline fd)");
    }
    return 0;
}

int ppr__cuda_create(ppr_cuda **out, AVBufferRef *device, const char *device_name,
                     void (*release)(void *), void *release_opaque)
{
    AVHWDeviceContext *dc = (AVHWDeviceContext *)device->data;
    AVVulkanDeviceContext *hw = dc->hwctx;
    VkPhysicalDeviceIDProperties id = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES };
    VkPhysicalDeviceProperties2 props = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                          .pNext = &id };
    ppr_cuda *c;
    CUcontext old;
    int ret, n = 0, i, nb_queues = 1, pushed = 0;

    *out = NULL;
    pthread_once(&g_cu_once, cuda_load);
    if (g_cu_ret < 0) {
        ret = ppr__fail(g_cu_ret, "%s", g_cu_err);
        goto fail_early;
    }
    if (!ppr__has_device_extension(hw, VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME) ||
        !ppr__has_device_extension(hw, VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME)) {
        ret = ppr__fail(PPR_ENODEVICE, "the Vulkan device \"%s\" cannot share memory with CUDA "
                        "(it lacks %s or %s)", device_name, VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME,
                        VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME);
        goto fail_early;
    }
    if (!(c = calloc(1, sizeof(*c)))) {
        ret = ppr__fail(PPR_ENOMEM, "out of memory");
        goto fail_early;
    }
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->imp_lock, NULL);
    c->refs = 1;
    if (!(c->device = av_buffer_ref(device))) {
        pthread_mutex_destroy(&c->imp_lock);
        pthread_mutex_destroy(&c->lock);
        free(c);
        ret = ppr__fail(PPR_ENOMEM, "out of memory");
        goto fail_early;
    }
    /* from here on cuda_unref() undoes everything, the caller's hold included */
    c->release = release;
    c->release_opaque = release_opaque;
    c->dc = dc;
    c->dev = hw->act_dev;
    c->phys = hw->phys_dev;
    c->alloc = hw->alloc;
    if ((ret = ppr__vk_load(&c->vk, hw)) < 0)
        goto fail;
    if (!c->vk.GetMemoryFdKHR || !c->vk.GetSemaphoreFdKHR || !c->vk.GetPhysicalDeviceProperties2 ||
        !c->vk.WaitSemaphores) {
        ret = ppr__fail(PPR_ENODEVICE, "the Vulkan device has no vkGetMemoryFdKHR/vkGetSemaphoreFdKHR/"
                        "vkWaitSemaphores");
        goto fail;
    }

    /* for PPR_COPY_CUDA (without them, frames go to the shader copy) */
    {
        const char *env = getenv("PYPRORES_COPY_GPU_TIME");
        c->gpu_time = env && !strcmp(env, "1");
    }
    c->get_image_req = (PFN_vkGetImageMemoryRequirements2)
        c->vk.GetDeviceProcAddr(c->dev, "vkGetImageMemoryRequirements2");
    c->get_format_props = (PFN_vkGetPhysicalDeviceImageFormatProperties2)
        hw->get_proc_addr(hw->inst, "vkGetPhysicalDeviceImageFormatProperties2");

    /* the CUDA device that is this Vulkan device */
    c->vk.GetPhysicalDeviceProperties2(c->phys, &props);
    CUCHECK(g_cu.DeviceGetCount(&n), "cuDeviceGetCount");
    c->ordinal = -1;
    for (i = 0; i < n; i++) {
        CUuuid u;
        CUdevice d;
        if (!g_cu.DeviceGet(&d, i) && !g_cu.DeviceGetUuid(&u, d) &&
            !memcmp(u.bytes, id.deviceUUID, VK_UUID_SIZE)) {
            c->cudev = d;
            c->ordinal = i;
            break;
        }
    }
    if (c->ordinal < 0) {
        char uuid[2 * VK_UUID_SIZE + 1];
        for (i = 0; i < VK_UUID_SIZE; i++)
            snprintf(uuid + 2 * i, 3, "%02x", id.deviceUUID[i]);
        ret = ppr__fail(PPR_ENODEVICE, "none of the %d CUDA device(s) is the Vulkan device \"%s\" "
                        "(UUID %s): choose the NVIDIA GPU with device=", n, device_name, uuid);
        goto fail;
    }
    CUCHECK(g_cu.DevicePrimaryCtxRetain(&c->ctx, c->cudev), "cuDevicePrimaryCtxRetain");

    /* copies go to one queue, so that the timeline's values are signalled in order */
    if ((ret = ppr__pick_queue_family(hw, &c->qf, &nb_queues)) < 0)
        goto fail;
    c->qi = nb_queues - 1;
    if ((ret = ppr__get_queue(&c->vk, c->dev, hw, c->qf, c->qi, &c->queue)) < 0)
        goto fail;

    PPR_VKCHECK(c->vk.CreateSemaphore(c->dev, &(VkSemaphoreCreateInfo) {
                .sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO,
                .pNext = &(VkSemaphoreTypeCreateInfo) {
                    .sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                    .pNext = &(VkExportSemaphoreCreateInfo) {
                        .sType = VK_STRUCTURE_TYPE_EXPORT_SEMAPHORE_CREATE_INFO,
                        .handleTypes = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT,
                    },
                    .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE,
                    .initialValue = 0,
                },
            }, c->alloc, &c->ready), "vkCreateSemaphore (exportable timeline)");
    CUCHECK(g_cu.CtxPushCurrent(c->ctx), "cuCtxPushCurrent");
    pushed = 1;
    if ((ret = import_timeline(c, c->ready, &c->cu_ready)) < 0)
        goto fail;
    g_cu.CtxPopCurrent(&old);
    pushed = 0;

    /* the shader copy by default; without it, transfers (and the reason kept) */
    if (ppr__copier_create(&c->sh, device, NULL, NULL) < 0) {
        snprintf(c->sh_err, sizeof(c->sh_err), "%s", ppr__thread_error());
        c->copy = PPR_COPY_TRANSFER;
        ppr__clear_error();
    }
    *out = c;
    return 0;

fail:
    if (pushed)
        g_cu.CtxPopCurrent(&old);
    cuda_unref(c);
    return ret;
fail_early:
    if (release)
        release(release_opaque);
    return ret;
}

int ppr_cuda_device(const ppr_cuda *c) { return c ? c->ordinal : -1; }

int ppr_cuda_set_copy(ppr_cuda *c, int how)
{
    CUcontext old;
    CUresult r;
    int ret = 0;

    ppr__clear_error();
    if (!c || (how != PPR_COPY_SHADER && how != PPR_COPY_TRANSFER && how != PPR_COPY_SHADER_ASYNC &&
               how != PPR_COPY_CUDA && how != PPR_COPY_NONE))
        return ppr__fail(PPR_EINVAL, "ppr_cuda_set_copy: no CUDA side, or not PPR_COPY_SHADER, "
                         "PPR_COPY_SHADER_ASYNC, PPR_COPY_TRANSFER, PPR_COPY_CUDA or PPR_COPY_NONE");
    if ((how == PPR_COPY_SHADER || how == PPR_COPY_SHADER_ASYNC) && !c->sh)
        return ppr__fail(PPR_ENODEVICE, "no shader copies on this device: %s", c->sh_err);
    if (how == PPR_COPY_CUDA) {     /* the stream CUDA's copies go to */
        pthread_mutex_lock(&c->imp_lock);
        if (!c->stream) {
            if ((r = g_cu.CtxPushCurrent(c->ctx))) {
                ret = cu_fail(r, "cuCtxPushCurrent");
            } else {
                r = g_cu.StreamCreate(&c->stream, CU_STREAM_NON_BLOCKING);
                g_cu.CtxPopCurrent(&old);
                if (r) {
                    c->stream = NULL;
                    ret = cu_fail(r, "cuStreamCreate");
                }
            }
        }
        pthread_mutex_unlock(&c->imp_lock);
        if (ret < 0)
            return ret;
    }
    pthread_mutex_lock(&c->lock);
    if (c->sh)
        ret = ppr__copier_set_async(c->sh, how == PPR_COPY_SHADER_ASYNC);
    if (!ret)
        c->copy = how;
    pthread_mutex_unlock(&c->lock);
    return ret;
}

ppr_copier *ppr_cuda_copier(ppr_cuda *c) { return c ? c->sh : NULL; }

void ppr_cuda_copies(ppr_cuda *c, uint64_t *shader, uint64_t *transfer)
{
    uint64_t a = 0, b = 0;
    if (c) {
        pthread_mutex_lock(&c->lock);
        a = c->n_shader;
        b = c->n_transfer;
        pthread_mutex_unlock(&c->lock);
    }
    if (shader)
        *shader = a;
    if (transfer)
        *transfer = b;
}

uint64_t ppr_cuda_copies_cuda(ppr_cuda *c)
{
    uint64_t n = 0;
    if (c) {
        pthread_mutex_lock(&c->lock);
        n = c->n_cuda;
        pthread_mutex_unlock(&c->lock);
    }
    return n;
}

void ppr_cuda_syncs(ppr_cuda *c, uint64_t out[4])
{
    out[0] = c ? __atomic_load_n(&c->n_waits, __ATOMIC_RELAXED) : 0;
    out[1] = c ? __atomic_load_n(&c->n_waits_skipped, __ATOMIC_RELAXED) : 0;
    out[2] = c ? __atomic_load_n(&c->n_events, __ATOMIC_RELAXED) : 0;
    out[3] = c ? __atomic_load_n(&c->n_events_skipped, __ATOMIC_RELAXED) : 0;
}

const char *ppr_cuda_copy_fallback(ppr_cuda *c)
{
    const char *why;
    if (!c)
        return "";
    pthread_mutex_lock(&c->imp_lock);   /* written once, then left alone */
    why = c->cu_fallback;
    pthread_mutex_unlock(&c->imp_lock);
    return why;
}

/* The decoder's frames are not held by its tensors: the views and imports of
 * its images go (the copies that read them ended first). */
static void release_frames(ppr_cuda *c)
{
    ppr__copier_release_frames(c->sh);
    pthread_mutex_lock(&c->imp_lock);
    imports_flush(c);
    pthread_mutex_unlock(&c->imp_lock);
}

void ppr_cuda_close(ppr_cuda *c)
{
    if (c)
        release_frames(c);
    cuda_unref(c);
}

/* b's CUDA copy ended: its GPU time, when timed; c->ctx current, b->lock held. */
static void cuda_copy_ended(ppr_cuda_buffer *b)
{
    float ms = 0;

    if (b->timed && !g_cu.EventElapsedTime(&ms, b->copy_start, b->copied)) {
        pthread_mutex_lock(&b->c->lock);
        b->c->cu_gpu_ns += (uint64_t)((double)ms * 1e6);
        b->c->cu_gpu_copies++;
        pthread_mutex_unlock(&b->c->lock);
    }
    b->timed = 0;
}

/* Wait for the buffer's copy and for CUDA work queued before its tensors were
 * dropped; b->lock held. */
static int buffer_idle(ppr_cuda_buffer *b)
{
    CUcontext old;
    VkResult r;
    int i, ret = 0;

    if (b->pending && b->via_cuda) {    /* CUDA's own copy: its event, 60 s at most */
        CUresult cr = g_cu.CtxPushCurrent(b->c->ctx);
        struct timespec t0, t;
        int late = 0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (!cr) {
            while ((cr = g_cu.EventQuery(b->copied)) == 600 /* CUDA_ERROR_NOT_READY */ && !late) {
                usleep(20);
                clock_gettime(CLOCK_MONOTONIC, &t);
                late = t.tv_sec - t0.tv_sec > 60;
            }
            if (!cr)
                cuda_copy_ended(b);
            g_cu.CtxPopCurrent(&old);
        }
        b->pending = 0;     /* even on an error: nothing better to wait for */
        av_frame_free(&b->frame);
        if (late)
            return ppr__fail(PPR_EDECODE, "a CUDA copy of the decoder's images did not end in 60 s "
                             "(its wait for their timeline semaphores, or the copy, hangs)");
        if (cr)
            return cu_fail(cr, "waiting for a CUDA copy (cuEventQuery)");
    }
    if (b->pending) {
        /* the exported timeline at the copy's value, whichever queue copied */
        r = b->c->vk.WaitSemaphores(b->c->dev, &(VkSemaphoreWaitInfo) {
            .sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
            .semaphoreCount = 1,
            .pSemaphores = &b->c->ready,
            .pValues = &b->ready_value,
        }, 60ULL * 1000000000ULL);
        if (r != VK_SUCCESS)
            return ppr__fail(r == VK_TIMEOUT ? PPR_EDECODE : PPR_ENODEVICE,
                             "waiting for a copy to CUDA memory failed (VkResult %d)", (int)r);
        b->pending = 0;
        av_frame_free(&b->frame);
    }
    if (b->nb_recorded) {
        if (g_cu.CtxPushCurrent(b->c->ctx))
            return ppr__fail(PPR_ENODEVICE, "cuCtxPushCurrent failed");
        for (i = 0; i < b->nb_recorded; i++) {
            CUresult cr = g_cu.EventSynchronize(b->events[i]);
            if (cr && !ret)
                ret = cu_fail(cr, "cuEventSynchronize");
        }
        g_cu.CtxPopCurrent(&old);
        b->nb_recorded = 0;
    }
    return ret;
}

static void buffer_destroy(ppr_cuda_buffer *b)
{
    ppr_cuda *c = b->c;
    CUcontext old;
    int i;

    pthread_mutex_lock(&b->lock);
    while (buffer_idle(b) < 0 && b->pending)
        ;   /* the GPU may write the memory until the copy ends: never free before */
    pthread_mutex_unlock(&b->lock);
    if (!g_cu.CtxPushCurrent(c->ctx)) {
        for (i = 0; i < b->nb_events; i++)
            g_cu.EventDestroy(b->events[i]);
        if (b->copied)
            g_cu.EventDestroy(b->copied);
        if (b->copy_start)
            g_cu.EventDestroy(b->copy_start);
        if (b->ptr)
            g_cu.MemFree(b->ptr);
        if (b->ext)
            g_cu.DestroyExternalMemory(b->ext);
        g_cu.CtxPopCurrent(&old);
    }
    if (b->fence)
        c->vk.DestroyFence(c->dev, b->fence, c->alloc);
    if (b->pool)
        c->vk.DestroyCommandPool(c->dev, b->pool, c->alloc);
    if (b->buf)
        c->vk.DestroyBuffer(c->dev, b->buf, c->alloc);
    if (b->mem)
        c->vk.FreeMemory(c->dev, b->mem, c->alloc);
    av_frame_free(&b->frame);
    pthread_mutex_destroy(&b->lock);
    free(b);
    __atomic_sub_fetch(&g_cuda_buffers_live, 1, __ATOMIC_RELAXED);
    cuda_unref(c);
}

static void in_place_release(ppr_cuda_buffer *b);

static void buffer_unref(ppr_cuda_buffer *b)
{
    if (b && !__atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL)) {
        if (b->in_place)
            in_place_release(b);
        else
            buffer_destroy(b);
    }
}

ppr_cuda_buffer *ppr_cuda_buffer_new(ppr_cuda *c, size_t size)
{
    VkPhysicalDeviceMemoryProperties mprops;
    VkMemoryRequirements req;
    ppr_cuda_buffer *b;
    CUcontext old;
    uint32_t i;
    int ret, type = -1, pushed = 0;

    ppr__clear_error();
    if (!c || !size || size > ((size_t)1 << 40)) {
        ppr__fail(PPR_EINVAL, "a CUDA buffer of %zu bytes", size);
        return NULL;
    }
    if (!(b = calloc(1, sizeof(*b)))) {
        ppr__fail(PPR_ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&b->lock, NULL);
    b->refs = 1;
    b->c = c;
    b->size = size;
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
    __atomic_add_fetch(&g_cuda_buffers_live, 1, __ATOMIC_RELAXED);

    PPR_VKCHECK(c->vk.CreateBuffer(c->dev, &(VkBufferCreateInfo) {
                .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                .pNext = &(VkExternalMemoryBufferCreateInfo) {
                    .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
                    .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT,
                },
                .size = size,
                /* written by transfers or by the shader copy */
                .usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
            }, c->alloc, &b->buf), "vkCreateBuffer (exportable)");
    c->vk.GetBufferMemoryRequirements(c->dev, b->buf, &req);
    c->vk.GetPhysicalDeviceMemoryProperties(c->phys, &mprops);
    for (i = 0; i < mprops.memoryTypeCount && type < 0; i++)
        if ((req.memoryTypeBits & (1u << i)) &&
            (mprops.memoryTypes[i].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT))
            type = i;
    if (type < 0) {
        ret = ppr__fail(PPR_ENODEVICE, "the Vulkan device has no device-local memory to export");
        goto fail;
    }
    PPR_VKCHECK(c->vk.AllocateMemory(c->dev, &(VkMemoryAllocateInfo) {
                .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                .pNext = &(VkExportMemoryAllocateInfo) {
                    .sType = VK_STRUCTURE_TYPE_EXPORT_MEMORY_ALLOCATE_INFO,
                    .pNext = &(VkMemoryDedicatedAllocateInfo) {
                        .sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO,
                        .buffer = b->buf,
                    },
                    .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT,
                },
                .allocationSize = req.size,
                .memoryTypeIndex = type,
            }, c->alloc, &b->mem), "vkAllocateMemory (exportable)");
    PPR_VKCHECK(c->vk.BindBufferMemory(c->dev, b->buf, b->mem, 0), "vkBindBufferMemory");

    CUCHECK(g_cu.CtxPushCurrent(c->ctx), "cuCtxPushCurrent");
    pushed = 1;
    if ((ret = import_memory(c, b->mem, req.size, 1, &b->ext)) < 0)
        goto fail;
    CUCHECK(g_cu.ExternalMemoryGetMappedBuffer(&b->ptr, b->ext, &(cu_ext_mem_buffer_desc) {
                .offset = 0, .size = size,
            }), "cuExternalMemoryGetMappedBuffer");
    g_cu.CtxPopCurrent(&old);
    pushed = 0;

    if ((ret = ppr__vk_copy_init(&c->vk, c->dev, c->alloc, c->qf, &b->pool, &b->cmd, &b->fence)) < 0)
        goto fail;
    return b;

fail:
    if (pushed)
        g_cu.CtxPopCurrent(&old);
    buffer_destroy(b);
    (void)ret;
    return NULL;
}

uint64_t ppr_cuda_buffer_ptr(const ppr_cuda_buffer *b) { return b ? (uint64_t)b->ptr : 0; }
size_t ppr_cuda_buffer_size(const ppr_cuda_buffer *b) { return b ? b->size : 0; }
int ppr_cuda_buffer_refs(const ppr_cuda_buffer *b)
{
    return b ? __atomic_load_n(&b->refs, __ATOMIC_ACQUIRE) : 0;
}
int ppr_cuda_buffers_live(void) { return __atomic_load_n(&g_cuda_buffers_live, __ATOMIC_RELAXED); }

void ppr_cuda_buffer_free(ppr_cuda_buffer *b)
{
    buffer_unref(b);
}

/* ------------------------------------------------------------------------ */
/* PPR_COPY_CUDA: CUDA copies the decoder's own images. hwcontext_vulkan
 * allocates its pool images exportable (vulkan_pool_alloc: external memory,
 * opaque fds) and their timeline semaphores too, when the device has
 * VK_KHR_external_memory_fd and VK_KHR_external_semaphore_fd; each image is
 * imported once (memory mapped as a CUDA array, semaphore imported) and each
 * frame's copy is a wait for its semaphores' current values and a
 * cuMemcpy2DAsync per plane on a stream of ours: no Vulkan submission. The
 * frame is held until the copy's event completed, so that the decoder does
 * not write its images while CUDA reads them.                              */

/* The extent of plane i of the frames context's images (hwcontext_vulkan's
 * get_plane_wh). */
static void plane_extent(const AVHWFramesContext *fc, int i, uint32_t *w, uint32_t *h)
{
    const AVPixFmtDescriptor *desc = av_pix_fmt_desc_get(fc->sw_format);

    *w = fc->width;
    *h = fc->height;
    if (desc && i && i != 3 && !(desc->flags & AV_PIX_FMT_FLAG_RGB) &&
        (desc->flags & AV_PIX_FMT_FLAG_PLANAR)) {
        *w = AV_CEIL_RSHIFT(fc->width, desc->log2_chroma_w);
        *h = AV_CEIL_RSHIFT(fc->height, desc->log2_chroma_h);
    }
}

/* 0 when the frames context's images are ones CUDA can read as arrays: one
 * optimally tiled R16 image per plane, made exportable by hwcontext_vulkan
 * (it asks the device with these parameters, try_export_flags); else 1 and
 * why not. */
static int frames_unexportable(ppr_cuda *c, const AVHWFramesContext *fc, int nb,
                               char *why, size_t size)
{
    const AVVulkanFramesContext *vfc = fc->hwctx;
    const VkFormat *fmt = av_vkfmt_from_pixfmt(fc->sw_format);
    VkExternalImageFormatProperties eprops = {
        .sType = VK_STRUCTURE_TYPE_EXTERNAL_IMAGE_FORMAT_PROPERTIES,
    };
    VkImageFormatProperties2 props = {
        .sType = VK_STRUCTURE_TYPE_IMAGE_FORMAT_PROPERTIES_2,
        .pNext = &eprops,
    };
    VkResult r;
    int i;

    if (!c->get_image_req || !c->get_format_props) {
        snprintf(why, size, "the Vulkan device has no vkGetImageMemoryRequirements2 or "
                 "vkGetPhysicalDeviceImageFormatProperties2");
        return 1;
    }
    if (vfc->tiling != VK_IMAGE_TILING_OPTIMAL || nb < 1 || nb > 4 ||
        av_pix_fmt_count_planes(fc->sw_format) != nb || vfc->nb_layers > 1 ||
        (nb < AV_NUM_DATA_POINTERS && vfc->format[nb] != VK_FORMAT_UNDEFINED)) {
        snprintf(why, size, "the decoder's frames are not one optimally tiled image per plane "
                 "(tiling %d, %d planes, %d layers)", (int)vfc->tiling, nb, vfc->nb_layers);
        return 1;
    }
    for (i = 0; i < nb; i++)
        if (vfc->format[i] != VK_FORMAT_R16_UNORM) {
            snprintf(why, size, "plane %d's image is not R16 (VkFormat %d)", i, (int)vfc->format[i]);
            return 1;
        }
    if (!fmt) {
        snprintf(why, size, "no Vulkan format for the frames' %s",
                 av_get_pix_fmt_name(fc->sw_format));
        return 1;
    }
    r = c->get_format_props(c->phys, &(VkPhysicalDeviceImageFormatInfo2) {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_IMAGE_FORMAT_INFO_2,
            .pNext = &(VkPhysicalDeviceExternalImageFormatInfo) {
                .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_IMAGE_FORMAT_INFO,
                .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT,
            },
            .format = fmt[0],
            .type = VK_IMAGE_TYPE_2D,
            .tiling = vfc->tiling,
            .usage = vfc->usage,
            .flags = VK_IMAGE_CREATE_ALIAS_BIT,
        }, &props);
    if (r != VK_SUCCESS || !(eprops.externalMemoryProperties.externalMemoryFeatures &
                             VK_EXTERNAL_MEMORY_FEATURE_EXPORTABLE_BIT)) {
        snprintf(why, size, "the device cannot export the decoder's images as opaque fds "
                 "(VkResult %d, features 0x%x): hwcontext_vulkan made them without the export bit",
                 (int)r, (unsigned)eprops.externalMemoryProperties.externalMemoryFeatures);
        return 1;
    }
    return 0;
}

/* Import the nb planes of vkf into im (memory as a CUDA array of its image's
 * extent, and its timeline semaphore); c->ctx current. 0, or 1 and why not
 * (im's objects made so far are destroyed by the caller). */
static int image_import(ppr_cuda *c, const AVHWFramesContext *fc, const AVVkFrame *vkf, int nb,
                        cuda_image *im, char *why, size_t size)
{
    CUresult cr;
    int i, ret = 0;

    im->vkf = vkf;
    im->nb = nb;
    for (i = 0; i < nb && ret >= 0; i++) {
        VkMemoryDedicatedRequirements ded = {
            .sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_REQUIREMENTS,
        };
        VkMemoryRequirements2 req = { .sType = VK_STRUCTURE_TYPE_MEMORY_REQUIREMENTS_2, .pNext = &ded };

        if (!vkf->img[i] || !vkf->mem[i] || !vkf->sem[i] || !vkf->size[i]) {
            snprintf(why, size, "the decoder's frame has no image, memory or semaphore for plane %d", i);
            return 1;
        }
        im->mem[i] = vkf->mem[i];
        plane_extent(fc, i, &im->w[i], &im->h[i]);
        /* allocated dedicated (hwcontext_vulkan's alloc_bind_mem: when the image
         * prefers or requires it), the import must say so */
        c->get_image_req(c->dev, &(VkImageMemoryRequirementsInfo2) {
                .sType = VK_STRUCTURE_TYPE_IMAGE_MEMORY_REQUIREMENTS_INFO_2,
                .image = vkf->img[i],
            }, &req);
        if ((ret = import_memory(c, vkf->mem[i], vkf->size[i],
                                 ded.prefersDedicatedAllocation || ded.requiresDedicatedAllocation,
                                 &im->ext[i])) < 0)
            break;
        if ((cr = g_cu.ExternalMemoryGetMappedMipmappedArray(&im->mma[i], im->ext[i],
                &(cu_ext_mem_mipmap_desc) {
                    .offset = vkf->offset[i],
                    .arrayDesc = {
                        .Width = im->w[i], .Height = im->h[i], .Depth = 0,
                        .Format = CU_AD_FORMAT_UNSIGNED_INT16, .NumChannels = 1, .Flags = 0,
                    },
                    .numLevels = 1,
                }))) {
            im->mma[i] = NULL;
            ret = cu_fail(cr, "cuExternalMemoryGetMappedMipmappedArray");
            break;
        }
        if ((cr = g_cu.MipmappedArrayGetLevel(&im->arr[i], im->mma[i], 0))) {
            ret = cu_fail(cr, "cuMipmappedArrayGetLevel");
            break;
        }
        ret = import_timeline(c, vkf->sem[i], &im->sem[i]);
    }
    if (ret < 0) {      /* not an error: the frames go to the shader copy, this is why */
        snprintf(why, size, "plane %d of the decoder's image: %s", i, ppr__thread_error());
        ppr__clear_error();
        return 1;
    }
    return 0;
}

/* CUDA's own copy of frame into b at out's planes (offsets from the buffer's
 * start): 0; 1 when CUDA cannot read the decoder's images (why is kept in
 * c->cu_fallback and logged, once: later frames go to the shader copy too);
 * or an error. b->lock held. */
static int cuda_copy_submit(ppr_cuda_buffer *b, AVFrame *frame, const size_t offset[4],
                            const ppr_planes *out)
{
    ppr_cuda *c = b->c;
    AVHWFramesContext *fc = (AVHWFramesContext *)frame->hw_frames_ctx->data;
    AVVulkanFramesContext *vfc = fc->hwctx;
    AVVkFrame *vkf = (AVVkFrame *)frame->data[0];
    cu_ext_sem_wait_params w[4];
    cuda_image *im = NULL;
    char why[PPR_MSG_SIZE] = "";
    CUcontext old;
    CUresult r;
    int i, nb = out->count, ret = 0;

    if (!vkf)
        return ppr__fail(PPR_EINVAL, "not a Vulkan frame");
    pthread_mutex_lock(&c->imp_lock);
    if (*c->cu_fallback || !c->stream) {
        pthread_mutex_unlock(&c->imp_lock);
        return 1;
    }
    if (c->imp_frames && c->imp_frames->data != frame->hw_frames_ctx->data)
        imports_flush(c);       /* the decoder made a new frames context */
    if (!c->imp_frames) {
        if (frames_unexportable(c, fc, nb, why, sizeof(why)))
            goto fallback;
        if (!(c->imp_frames = av_buffer_ref(frame->hw_frames_ctx))) {
            pthread_mutex_unlock(&c->imp_lock);
            return ppr__fail(PPR_ENOMEM, "out of memory");
        }
    }
    if ((r = g_cu.CtxPushCurrent(c->ctx))) {
        pthread_mutex_unlock(&c->imp_lock);
        return cu_fail(r, "cuCtxPushCurrent");
    }
    for (i = 0; i < c->nb_imp && !im; i++)
        if (c->imp[i].vkf == vkf && c->imp[i].mem[0] == vkf->mem[0] && c->imp[i].nb == nb)
            im = &c->imp[i];
    if (!im) {
        if (c->nb_imp == MAX_IMPORTS)
            imports_clear(c);
        im = &c->imp[c->nb_imp];
        if (image_import(c, fc, vkf, nb, im, why, sizeof(why))) {
            image_destroy(im);
            g_cu.CtxPopCurrent(&old);
            goto fallback;
        }
        c->nb_imp++;
    }
    for (i = 0; i < nb; i++)
        if ((uint32_t)out->plane[i].width > im->w[i] || (uint32_t)out->plane[i].height > im->h[i]) {
            ret = ppr__fail(PPR_EINVAL, "plane %d (%dx%d) is larger than its image (%ux%u)", i,
                            out->plane[i].width, out->plane[i].height, im->w[i], im->h[i]);
            goto done;
        }
    if (!b->copied && (r = g_cu.EventCreate(&b->copied, c->gpu_time ? 0 : CU_EVENT_DISABLE_TIMING))) {
        b->copied = NULL;
        ret = cu_fail(r, "cuEventCreate");
        goto done;
    }
    if (c->gpu_time && !b->copy_start && (r = g_cu.EventCreate(&b->copy_start, 0))) {
        b->copy_start = NULL;
        ret = cu_fail(r, "cuEventCreate");
        goto done;
    }
    /* the values the work submitted on the images so far signals (the decode's
     * included), read as libavutil's users do, under lock_frame() */
    memset(w, 0, sizeof(w));
    vfc->lock_frame(fc, vkf);
    for (i = 0; i < nb; i++)
        w[i].params.fence.value = vkf->sem_value[i];
    vfc->unlock_frame(fc, vkf);
    if ((r = g_cu.WaitExternalSemaphoresAsync(im->sem, w, nb, c->stream))) {
        ret = cu_fail(r, "cuWaitExternalSemaphoresAsync (the decoder's images)");
        goto done;
    }
    /* timed: from the end of the wait (the decode) to the end of the copy */
    b->timed = c->gpu_time && !g_cu.EventRecord(b->copy_start, c->stream);
    for (i = 0; i < nb; i++) {
        const ppr_plane *p = &out->plane[i];
        cu_memcpy2d m = {
            .srcMemoryType = CU_MEMORYTYPE_ARRAY,
            .srcArray = im->arr[i],
            .dstMemoryType = CU_MEMORYTYPE_DEVICE,
            .dstDevice = b->ptr + offset[i],
            .dstPitch = (size_t)p->stride,
            .WidthInBytes = (size_t)p->width * 2,
            .Height = (size_t)p->height,
        };
        if ((r = g_cu.Memcpy2DAsync(&m, c->stream))) {
            ret = cu_fail(r, "cuMemcpy2DAsync (a plane of the decoder's image)");
            goto done;
        }
    }
    if ((r = g_cu.EventRecord(b->copied, c->stream)))
        ret = cu_fail(r, "cuEventRecord");
done:
    g_cu.CtxPopCurrent(&old);
    pthread_mutex_unlock(&c->imp_lock);
    return ret;

fallback:
    snprintf(c->cu_fallback, sizeof(c->cu_fallback), "%s", why);
    pthread_mutex_unlock(&c->imp_lock);
    av_log(NULL, AV_LOG_WARNING, "pyprores: CUDA cannot read the decoder's images, so CUDA frames "
           "are copied by the %s instead: %s\n", c->sh ? "compute shader" : "transfer queue", why);
    return 1;
}

int ppr__cuda_download_start(ppr_cuda_buffer *b, AVFrame *frame, const ppr_planes *out)
{
    ppr_cuda *c = b->c;
    size_t offset[4];
    AVFrame *hold;
    int i, ret, how;

    if (!frame || frame->format != AV_PIX_FMT_VULKAN || !frame->hw_frames_ctx)
        return ppr__fail(PPR_EINVAL, "not a Vulkan frame");
    if (((AVHWFramesContext *)frame->hw_frames_ctx->data)->device_ref->data != c->device->data)
        return ppr__fail(PPR_EINVAL, "the CUDA buffer belongs to another Vulkan device");
    for (i = 0; i < out->count && i < 4; i++) {
        const ppr_plane *p = &out->plane[i];
        uint64_t start = (uint64_t)(uintptr_t)p->data;
        size_t need;
        if (!p->data || p->width <= 0 || p->height <= 0 || p->stride < (ptrdiff_t)p->width * 2 ||
            (p->stride & 1))
            return ppr__fail(PPR_EINVAL, "plane %d: no data, or a stride below its %d samples",
                             i, p->width);
        if (start < b->ptr || start >= b->ptr + b->size || ((start - b->ptr) & 3))
            return ppr__fail(PPR_EINVAL, "plane %d does not start inside the CUDA buffer on a "
                             "4-byte boundary", i);
        need = (size_t)p->stride * (p->height - 1) + (size_t)p->width * 2;
        if (need > b->size - (start - b->ptr))
            return ppr__fail(PPR_EINVAL, "plane %d ends past the CUDA buffer's %zu bytes", i,
                             b->size);
        offset[i] = start - b->ptr;
    }
    if (!(hold = av_frame_alloc()))
        return ppr__fail(PPR_ENOMEM, "out of memory");

    pthread_mutex_lock(&b->lock);
    if ((ret = buffer_idle(b)) < 0) {
        pthread_mutex_unlock(&b->lock);
        av_frame_free(&hold);
        return ret;
    }
    pthread_mutex_lock(&c->lock);
    how = c->copy;
    pthread_mutex_unlock(&c->lock);
    ret = 1;
    if (how == PPR_COPY_CUDA && !(ret = cuda_copy_submit(b, frame, offset, out))) {
        pthread_mutex_lock(&c->lock);
        c->n_cuda++;
        pthread_mutex_unlock(&c->lock);
        b->via_cuda = 1;
        goto copied;
    }
    if (ret < 0) {
        pthread_mutex_unlock(&b->lock);
        av_frame_free(&hold);
        return ret;
    }
    b->via_cuda = 0;
    /* The exported timeline's values are signalled in order: the copies of
     * one kind go to one queue, and a copy on the other queue than the last
     * one waits for the last one's value first. */
    pthread_mutex_lock(&c->lock);
    ret = 1;
    if (c->copy != PPR_COPY_TRANSFER && c->sh) {
        ret = ppr__copier_submit(c->sh, frame, offset, out, &(ppr__copy_dst) {
                .buf = b->buf, .size = b->size,     /* the timeline says when it ended */
                .signal = c->ready, .signal_value = c->ready_value + 1,
                .wait = !c->last_shader && c->ready_value ? c->ready : VK_NULL_HANDLE,
                .wait_value = c->ready_value,
            });
        if (!ret) {
            c->last_shader = 1;
            c->n_shader++;
        }
    }
    if (ret > 0) {      /* by transfer: asked for, or a frame the shader does not take */
        ret = ppr__vk_copy_submit(&(ppr__vk_copy) {
                .vk = &c->vk, .dev = c->dev, .queue = c->queue, .qf = c->qf, .qi = c->qi,
                .pool = b->pool, .cmd = b->cmd, .fence = b->fence, .buf = b->buf,
                .signal = c->ready, .signal_value = c->ready_value + 1,
                .wait = c->last_shader && c->ready_value ? c->ready : VK_NULL_HANDLE,
                .wait_value = c->ready_value,
            }, frame, offset, out);
        if (!ret) {
            c->last_shader = 0;
            c->n_transfer++;
        }
    }
    if (ret >= 0)
        b->ready_value = ++c->ready_value;
    pthread_mutex_unlock(&c->lock);
    if (ret < 0) {
        pthread_mutex_unlock(&b->lock);
        av_frame_free(&hold);
        return ret;
    }
copied:
    b->gen++;
    av_frame_move_ref(hold, frame);
    b->frame = hold;
    b->pending = 1;
    pthread_mutex_unlock(&b->lock);
    return 0;
}


/* ------------------------------------------------------------------------ */
/* PPR_COPY_NONE: the decoder's own images are the tensors' memory. The
 * session's own frame pool (ownpool.c) makes them linear, in device-local
 * memory exported as opaque fds, with exported timeline semaphores; each
 * image is imported into CUDA once (its memory mapped whole as a buffer, its
 * semaphore as a timeline fd) and the import kept with the image (its slot),
 * holding this side: it goes with the image, after the frames context. Per
 * frame: no copy, no CUDA call. The frame is held by a buffer of its own
 * (in_place) that its planes and tensors reference; when the last lets go and
 * the streams of dropped tensors still run, it waits on c->deferred until
 * their events completed (polled by the pump's thread), so that the pool
 * does not give the images to the decoder while a consumer's kernel reads
 * them.                                                                     */

typedef struct zc_import {
    ppr_cuda *c;                    /* a reference */
    int nb;
    CUexternalMemory ext[4];
    CUdeviceptr base[4];            /* each plane's memory, mapped whole */
    CUexternalSemaphore sem[4];
} zc_import;

static void zc_import_free(void *opaque)
{
    zc_import *z = opaque;
    CUcontext old;
    int i;

    if (!g_cu.CtxPushCurrent(z->c->ctx)) {
        for (i = 0; i < 4; i++) {
            if (z->sem[i])
                g_cu.DestroyExternalSemaphore(z->sem[i]);
            if (z->base[i])
                g_cu.MemFree(z->base[i]);
            if (z->ext[i])
                g_cu.DestroyExternalMemory(z->ext[i]);
        }
        g_cu.CtxPopCurrent(&old);
    }
    cuda_unref(z->c);
    free(z);
}

typedef struct zc_make {
    ppr_cuda *c;
    const AVVkFrame *vkf;
    const ppr__own_info *info;
    int ret;                        /* 0, or the error (its message set) */
} zc_make;

/* The image's import for m->c: the one it has, or a new one (under the
 * image's lock, ppr__own_frame_slot). */
static void *zc_swap(void *old, void *arg)
{
    zc_make *m = arg;
    ppr_cuda *c = m->c;
    const AVVkFrame *vkf = m->vkf;
    zc_import *z;
    CUcontext cold;
    CUresult cr;
    int i;

    if (old && ((zc_import *)old)->c == c)
        return old;
    if (!(z = calloc(1, sizeof(*z)))) {
        m->ret = ppr__fail(PPR_ENOMEM, "out of memory");
        return old;
    }
    z->c = c;
    z->nb = m->info->nb;
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
    if ((cr = g_cu.CtxPushCurrent(c->ctx))) {
        m->ret = cu_fail(cr, "cuCtxPushCurrent");
        zc_import_free(z);
        return old;
    }
    for (i = 0; i < z->nb && m->ret >= 0; i++) {
        if ((m->ret = import_memory(c, vkf->mem[i], m->info->mem_size[i], m->info->dedicated[i],
                                    &z->ext[i])) < 0)
            break;
        if ((cr = g_cu.ExternalMemoryGetMappedBuffer(&z->base[i], z->ext[i], &(cu_ext_mem_buffer_desc) {
                    .offset = 0, .size = m->info->mem_size[i],
                }))) {
            z->base[i] = 0;
            m->ret = cu_fail(cr, "cuExternalMemoryGetMappedBuffer");
            break;
        }
        m->ret = import_timeline(c, vkf->sem[i], &z->sem[i]);
    }
    g_cu.CtxPopCurrent(&cold);
    if (m->ret < 0) {
        zc_import_free(z);
        return old;
    }
    return z;
}

int ppr__cuda_take_frame(ppr_cuda *c, AVFrame *frame, ppr_cuda_buffer **out, ppr_planes *planes)
{
    AVHWFramesContext *fc;
    AVVulkanFramesContext *vfc;
    AVVkFrame *vkf;
    ppr__own_info info;
    zc_make m = { .c = c };
    zc_import *z;
    ppr_cuda_buffer *b;
    int i;

    *out = NULL;
    if (!frame || frame->format != AV_PIX_FMT_VULKAN || !frame->hw_frames_ctx || !frame->data[0])
        return ppr__fail(PPR_EINVAL, "not a Vulkan frame");
    fc = (AVHWFramesContext *)frame->hw_frames_ctx->data;
    vfc = fc->hwctx;
    vkf = (AVVkFrame *)frame->data[0];
    if (fc->device_ref->data != c->device->data)
        return ppr__fail(PPR_EINVAL, "the frame belongs to another Vulkan device than the CUDA side");
    if (!ppr__own_frame_info(frame, &info))
        return ppr__fail(PPR_EINVAL, "frames handed to CUDA in place (PPR_COPY_NONE) must come from "
                         "the session's own frame pool: stream with PPR_STREAM_OWN_POOL "
                         "(_frame_pool=\"linear\")");
    if (!info.exportable)
        return ppr__fail(PPR_ENODEVICE, "the Vulkan device cannot export the frame pool's linear "
                         "images or their semaphores as opaque fds: CUDA cannot read them in place");
    if (info.nb != planes->count || info.nb > 4)
        return ppr__fail(PPR_EINVAL, "the frame has %d images for %d planes", info.nb, planes->count);
    for (i = 0; i < info.nb; i++)
        if ((info.row_pitch[i] & 1) || (info.offset[i] & 1) ||
            info.row_pitch[i] < (uint64_t)planes->plane[i].width * 2 ||
            (uint32_t)planes->plane[i].width > info.width[i] ||
            (uint32_t)planes->plane[i].height > info.height[i] ||
            info.offset[i] + info.row_pitch[i] * (planes->plane[i].height - 1) +
            (uint64_t)planes->plane[i].width * 2 > info.mem_size[i])
            return ppr__fail(PPR_EINVAL, "plane %d (%dx%d) does not fit its linear image (%ux%u, "
                             "rows %llu bytes apart at offset %llu)", i, planes->plane[i].width,
                             planes->plane[i].height, info.width[i], info.height[i],
                             (unsigned long long)info.row_pitch[i],
                             (unsigned long long)info.offset[i]);
    m.vkf = vkf;
    m.info = &info;
    z = ppr__own_frame_slot(frame, zc_swap, &m, zc_import_free);
    if (m.ret < 0)
        return m.ret;
    if (!z || z->c != c)
        return ppr__fail(PPR_ENODEVICE, "the frame pool's image could not be imported into CUDA");

    if (!(b = calloc(1, sizeof(*b))))
        return ppr__fail(PPR_ENOMEM, "out of memory");
    if (!(b->frame = av_frame_alloc())) {
        free(b);
        return ppr__fail(PPR_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&b->lock, NULL);
    b->refs = 1;
    b->c = c;
    b->in_place = 1;
    b->gen = 1;             /* one "copy": the decode */
    b->nb_zc = info.nb;
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
    __atomic_add_fetch(&g_cuda_buffers_live, 1, __ATOMIC_RELAXED);
    /* the values the decode signals, read as libavutil's users do */
    vfc->lock_frame(fc, vkf);
    for (i = 0; i < info.nb; i++) {
        b->zc_val[i] = vkf->sem_value[i];
        b->zc_vksem[i] = vkf->sem[i];
    }
    vfc->unlock_frame(fc, vkf);
    for (i = 0; i < info.nb; i++) {
        b->zc_lo[i] = z->base[i];
        b->zc_hi[i] = z->base[i] + info.mem_size[i];
        b->zc_sem[i] = z->sem[i];
        planes->plane[i].data = (uint16_t *)(uintptr_t)(z->base[i] + info.offset[i]);
        planes->plane[i].stride = (ptrdiff_t)info.row_pitch[i];
    }
    b->ptr = z->base[0] + info.offset[0];
    b->size = info.mem_size[0] - info.offset[0];
    av_frame_move_ref(b->frame, frame);
    pthread_mutex_lock(&c->lock);
    c->n_in_place++;
    pthread_mutex_unlock(&c->lock);
    *out = b;
    return 0;
}

uint64_t ppr_cuda_frames_in_place(ppr_cuda *c)
{
    uint64_t n = 0;
    if (c) {
        pthread_mutex_lock(&c->lock);
        n = c->n_in_place;
        pthread_mutex_unlock(&c->lock);
    }
    return n;
}

/* Whether the events b's dropped tensors recorded completed; c->ctx current. */
static int in_place_events_done(ppr_cuda_buffer *b)
{
    int i;
    for (i = 0; i < b->nb_recorded; i++)
        if (g_cu.EventQuery(b->events[i]) != CUDA_SUCCESS)
            return 0;
    return 1;
}

/* The frame goes back to the pool; the buffer is freed. */
static void in_place_free(ppr_cuda_buffer *b)
{
    ppr_cuda *c = b->c;
    CUcontext old;
    int i;

    if (b->nb_events && !g_cu.CtxPushCurrent(c->ctx)) {
        for (i = 0; i < b->nb_events; i++)
            g_cu.EventDestroy(b->events[i]);
        g_cu.CtxPopCurrent(&old);
    }
    av_frame_free(&b->frame);
    pthread_mutex_destroy(&b->lock);
    free(b);
    __atomic_sub_fetch(&g_cuda_buffers_live, 1, __ATOMIC_RELAXED);
    cuda_unref(c);
}

/* The last reference is gone: the frame goes back to the pool now, or, while
 * streams of its dropped tensors still run and a pump polls, once they are
 * done (without a pump: after waiting for them here). */
static void in_place_release(ppr_cuda_buffer *b)
{
    ppr_cuda *c = b->c;
    CUcontext old;
    int i, done = 1;

    if (b->nb_recorded && !g_cu.CtxPushCurrent(c->ctx)) {
        done = in_place_events_done(b);
        g_cu.CtxPopCurrent(&old);
    }
    if (!done) {
        pthread_mutex_lock(&c->lock);
        if (c->pumps > 0) {
            b->next = c->deferred;
            c->deferred = b;
            pthread_mutex_unlock(&c->lock);
            return;
        }
        pthread_mutex_unlock(&c->lock);
        if (!g_cu.CtxPushCurrent(c->ctx)) {
            for (i = 0; i < b->nb_recorded; i++)
                g_cu.EventSynchronize(b->events[i]);
            g_cu.CtxPopCurrent(&old);
        }
    }
    in_place_free(b);
}

/* Frames on c->deferred whose tensors' streams are done go back to the pool
 * (wait: after waiting for them, when no pump will poll any more). */
static void in_place_poll(ppr_cuda *c, int wait)
{
    ppr_cuda_buffer *done = NULL, **pp, *b;
    CUcontext old;
    int i;

    pthread_mutex_lock(&c->lock);
    if (!c->deferred || g_cu.CtxPushCurrent(c->ctx)) {
        pthread_mutex_unlock(&c->lock);
        return;
    }
    for (pp = &c->deferred; (b = *pp);) {
        if (wait)
            for (i = 0; i < b->nb_recorded; i++)
                g_cu.EventSynchronize(b->events[i]);
        if (wait || in_place_events_done(b)) {
            *pp = b->next;
            b->next = done;
            done = b;
        } else {
            pp = &b->next;
        }
    }
    g_cu.CtxPopCurrent(&old);
    pthread_mutex_unlock(&c->lock);
    while ((b = done)) {
        done = b->next;
        in_place_free(b);
    }
}

/* ------------------------------------------------------------------------ */
/* DLPack (dlpack.h 1.x, written from the specification)                      */

typedef struct { uint32_t major, minor; } dl_version;
typedef struct { int32_t device_type, device_id; } dl_device;
typedef struct { uint8_t code, bits; uint16_t lanes; } dl_dtype;
typedef struct {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} dl_tensor;
typedef struct dl_managed {                 /* DLManagedTensor */
    dl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct dl_managed *self);
} dl_managed;
typedef struct dl_managed_v {               /* DLManagedTensorVersioned */
    dl_version version;
    void *manager_ctx;
    void (*deleter)(struct dl_managed_v *self);
    uint64_t flags;
    dl_tensor dl_tensor;
} dl_managed_v;

enum { DL_CUDA = 2, DL_UINT = 1 };

/* what a tensor holds: its buffer, and the stream it was made for */
typedef struct dl_ctx {
    ppr_cuda_buffer *b;
    CUstream stream;
    int64_t shape[2], strides[2];
    union { dl_managed m; dl_managed_v v; } t;
} dl_ctx;

/* The tensor is gone: CUDA work queued on its stream before now may still
 * read the buffer, so the buffer's next copy waits for an event recorded
 * here (or, without room for one, for the stream). */
static void tensor_release(dl_ctx *x)
{
    ppr_cuda_buffer *b = x->b;
    CUcontext old;

    if (x->stream != (CUstream)(intptr_t)-1 && !g_cu.CtxPushCurrent(b->c->ctx)) {
        /* A stream with nothing left to run has finished whatever it queued
         * before the drop: the buffer need not wait for it. An event recorded
         * anyway is work in the CUDA context for every plane of every frame, and
         * CUDA work beside the decoder's own slows the decoder (docs/PYTHON.md). */
        if (g_cu.StreamQuery(x->stream) == CUDA_SUCCESS) {
            __atomic_add_fetch(&b->c->n_events_skipped, 1, __ATOMIC_RELAXED);
            g_cu.CtxPopCurrent(&old);
            buffer_unref(b);
            free(x);
            return;
        }
        __atomic_add_fetch(&b->c->n_events, 1, __ATOMIC_RELAXED);
        pthread_mutex_lock(&b->lock);
        if (b->nb_recorded == b->nb_events && b->nb_events < MAX_EVENTS &&
            !g_cu.EventCreate(&b->events[b->nb_events], CU_EVENT_DISABLE_TIMING))
            b->nb_events++;
        if (b->nb_recorded < b->nb_events &&
            !g_cu.EventRecord(b->events[b->nb_recorded], x->stream))
            b->nb_recorded++;
        else if (g_cu.StreamSynchronize(x->stream))
            g_cu.CtxSynchronize();
        pthread_mutex_unlock(&b->lock);
        g_cu.CtxPopCurrent(&old);
    }
    buffer_unref(b);
    free(x);
}

static void delete_managed(dl_managed *m) { tensor_release(m->manager_ctx); }
static void delete_managed_v(dl_managed_v *m) { tensor_release(m->manager_ctx); }

/* A tensor of the `height` x `width` samples at device pointer `start` (rows
 * `stride` bytes apart) inside b, whose stream waits for b's copy. */
static void *dlpack_make(ppr_cuda_buffer *b, uint64_t start, int height, int width,
                         ptrdiff_t stride, intptr_t stream, int versioned)
{
    ppr_cuda *c = b->c;
    dl_ctx *x;
    dl_tensor *t;
    CUcontext old;
    CUresult r;

    if (b->in_place) {      /* inside one of the frame's planes' memory */
        uint64_t end = start + (uint64_t)stride * (height - 1) + (uint64_t)width * 2;
        int i, in = 0;
        for (i = 0; i < b->nb_zc && !in; i++)
            in = start >= b->zc_lo[i] && end <= b->zc_hi[i];
        if (!in) {
            ppr__fail(PPR_EINVAL, "ppr_cuda_dlpack: the plane is not inside the frame's images");
            return NULL;
        }
    } else if (start < b->ptr || start + (uint64_t)stride * (height - 1) +
               (uint64_t)width * 2 > b->ptr + b->size) {
        ppr__fail(PPR_EINVAL, "ppr_cuda_dlpack: the plane is not inside the buffer");
        return NULL;
    }
    if (!(x = calloc(1, sizeof(*x)))) {
        ppr__fail(PPR_ENOMEM, "out of memory");
        return NULL;
    }
    /* the consumer's stream waits for the copy (DLPack: -1 asks for no synchronisation).
     * The legacy default stream (0, 1) is one stream for the whole context and is never
     * destroyed: once it waited for this copy, work queued on it later is behind that
     * wait, so the frame's other planes need none. A stream of the caller's own is
     * waited on each time (its handle may be another stream's by the next call). */
    if (stream != -1 && b->in_place) {
        /* the decode's semaphores, unless the host sees them signalled; on the
         * legacy stream once per frame (gen is 1), as for a copy */
        cu_ext_sem_wait_params w[4];
        int legacy = stream == 0 || stream == 1, skip, i;
        pthread_mutex_lock(&b->lock);
        skip = legacy && b->legacy_waited == b->gen;
        pthread_mutex_unlock(&b->lock);
        if (!skip) {
            memset(w, 0, sizeof(w));
            skip = 1;
            for (i = 0; i < b->nb_zc; i++) {
                uint64_t v = 0;
                w[i].params.fence.value = b->zc_val[i];
                if (c->vk.GetSemaphoreCounterValue(c->dev, b->zc_vksem[i], &v) != VK_SUCCESS ||
                    v < b->zc_val[i])
                    skip = 0;
            }
            if (!skip) {
                if ((r = g_cu.CtxPushCurrent(c->ctx))) {
                    free(x);
                    cu_fail(r, "cuCtxPushCurrent");
                    return NULL;
                }
                r = g_cu.WaitExternalSemaphoresAsync(b->zc_sem, w, b->nb_zc, (CUstream)stream);
                g_cu.CtxPopCurrent(&old);
                if (r) {
                    free(x);
                    cu_fail(r, "cuWaitExternalSemaphoresAsync (the decoder's images)");
                    return NULL;
                }
            }
            __atomic_add_fetch(skip ? &c->n_waits_skipped : &c->n_waits, 1, __ATOMIC_RELAXED);
            if (legacy) {
                pthread_mutex_lock(&b->lock);
                b->legacy_waited = b->gen;
                pthread_mutex_unlock(&b->lock);
            }
        }
    } else if (stream != -1) {
        cu_ext_sem_wait_params w;
        int legacy = stream == 0 || stream == 1, skip, via_cuda;
        CUevent copied;
        uint64_t gen;
        memset(&w, 0, sizeof(w));
        pthread_mutex_lock(&b->lock);
        w.params.fence.value = b->ready_value;
        via_cuda = b->via_cuda;
        copied = b->copied;
        gen = b->gen;
        skip = legacy && gen && b->legacy_waited == gen;
        pthread_mutex_unlock(&b->lock);
        if (!skip && gen) {     /* nothing to wait for before the first copy */
            uint64_t v = 0;
            if ((r = g_cu.CtxPushCurrent(c->ctx))) {
                free(x);
                cu_fail(r, "cuCtxPushCurrent");
                return NULL;
            }
            /* A copy that has ended, as the host sees it, needs no wait on the
             * consumer's stream: its writes are done before anything queued from
             * now on runs. With frames in flight most copies have ended by the
             * time the caller takes the frame, and a wait queued anyway is work
             * in the CUDA context, which slows the decoder (docs/PYTHON.md). */
            skip = via_cuda ? g_cu.EventQuery(copied) == CUDA_SUCCESS :
                   c->vk.GetSemaphoreCounterValue(c->dev, c->ready, &v) == VK_SUCCESS &&
                   v >= w.params.fence.value;
            /* CUDA's own copy: its event, recorded on our stream (the buffer is
             * not copied into again while a plane of it is held); else the
             * exported timeline that the Vulkan copy signals */
            r = skip ? CUDA_SUCCESS :
                via_cuda ? g_cu.StreamWaitEvent((CUstream)stream, copied, 0) :
                g_cu.WaitExternalSemaphoresAsync(&c->cu_ready, &w, 1, (CUstream)stream);
            g_cu.CtxPopCurrent(&old);
            if (r) {
                free(x);
                cu_fail(r, via_cuda ? "cuStreamWaitEvent" : "cuWaitExternalSemaphoresAsync");
                return NULL;
            }
            __atomic_add_fetch(skip ? &c->n_waits_skipped : &c->n_waits, 1, __ATOMIC_RELAXED);
            if (legacy) {
                pthread_mutex_lock(&b->lock);
                if (b->gen == gen)
                    b->legacy_waited = gen;
                pthread_mutex_unlock(&b->lock);
            }
        }
    }
    __atomic_add_fetch(&b->refs, 1, __ATOMIC_ACQ_REL);
    x->b = b;
    x->stream = (CUstream)stream;
    x->shape[0] = height;
    x->shape[1] = width;
    x->strides[0] = stride / 2;
    x->strides[1] = 1;
    if (versioned) {
        x->t.v.version = (dl_version) { 1, 0 };
        x->t.v.manager_ctx = x;
        x->t.v.deleter = delete_managed_v;
        t = &x->t.v.dl_tensor;
    } else {
        x->t.m.manager_ctx = x;
        x->t.m.deleter = delete_managed;
        t = &x->t.m.dl_tensor;
    }
    t->data = (void *)(uintptr_t)start;
    t->device = (dl_device) { DL_CUDA, c->ordinal };
    t->ndim = 2;
    t->dtype = (dl_dtype) { DL_UINT, 16, 1 };
    t->shape = x->shape;
    t->strides = x->strides;
    t->byte_offset = 0;
    return &x->t;
}

void *ppr_cuda_dlpack(ppr_cuda_buffer *b, const ppr_plane *plane, intptr_t stream, int versioned)
{
    ppr__clear_error();
    if (!b || !plane || !plane->data || plane->width <= 0 || plane->height <= 0 ||
        plane->stride < (ptrdiff_t)plane->width * 2 || (plane->stride & 1)) {
        ppr__fail(PPR_EINVAL, "ppr_cuda_dlpack: no buffer, or a bad plane");
        return NULL;
    }
    return dlpack_make(b, (uint64_t)(uintptr_t)plane->data, plane->height, plane->width,
                       plane->stride, stream, versioned);
}

void *ppr_cuda_dlpack_at(ppr_cuda_buffer *b, uint64_t ptr, int height, int width,
                         intptr_t stream, int versioned)
{
    ppr__clear_error();
    if (!b || !ptr || width <= 0 || height <= 0) {
        ppr__fail(PPR_EINVAL, "ppr_cuda_dlpack_at: no buffer, or a bad plane");
        return NULL;
    }
    return dlpack_make(b, ptr, height, width, (ptrdiff_t)width * 2, stream, versioned);
}

void *ppr_cuda_dlpack_strided(ppr_cuda_buffer *b, uint64_t ptr, int height, int width,
                              int64_t stride, intptr_t stream, int versioned)
{
    ppr__clear_error();
    if (!b || !ptr || width <= 0 || height <= 0 || stride < (int64_t)width * 2 || (stride & 1)) {
        ppr__fail(PPR_EINVAL, "ppr_cuda_dlpack_strided: no buffer, or a bad plane");
        return NULL;
    }
    return dlpack_make(b, ptr, height, width, (ptrdiff_t)stride, stream, versioned);
}

void ppr_dlpack_delete(void *managed, int versioned)
{
    if (!managed)
        return;
    if (versioned) {
        dl_managed_v *v = managed;
        if (v->deleter)
            v->deleter(v);
    } else {
        dl_managed *m = managed;
        if (m->deleter)
            m->deleter(m);
    }
}

/* ------------------------------------------------------------------------ */
/* The pump: a thread of the library's own sends packets, receives frames and
 * starts their copies, so that the caller's thread (Python's, with the GIL)
 * only takes frames that are ready. See pyprores.h.                         */

#define PUMP_POOL 16            /* CUDA buffers kept for reuse */
#define PUMP_ALIGN_CUDA 256     /* plane offsets in a CUDA buffer */
#define PUMP_ALIGN_HOST 4096    /* and in a host buffer */

enum { PUMP_END = 0, PUMP_FRAME = 1 };

typedef struct pump_entry {
    int kind;                   /* PUMP_FRAME, PUMP_END, or an error code */
    ppr_pump_frame f;
    char msg[PPR_MSG_SIZE];
} pump_entry;

struct ppr_pump {
    ppr_session *s;
    ppr_cuda *c;
    ppr_copier *cp;             /* PPR_PUMP_HOST_SHADER's */
    ppr_reader *reader;
    int sink;
    uint32_t tag;
    pthread_t thread;
    int started, joined;
    pthread_mutex_t lock;
    pthread_cond_t cond;        /* any change of the queues, or stop */
    int stop;
    int done;                   /* the thread queued its last entry (or stopped) */
    /* packets pushed, not yet taken by the thread */
    ppr_packet **in;
    int in_cap, in_head, in_count, in_end;
    /* entries ready for ppr_pump_next */
    pump_entry *out;
    int out_cap, out_head, out_count;
    char err[PPR_MSG_SIZE];
    ppr_pump_stats st;          /* under lock */
    /* the thread's own */
    ppr_cuda_buffer *pool[PUMP_POOL];
    uint64_t used[PUMP_POOL];
    int nb_pool;
    uint64_t seq;
    int n_sent, n_recv;
    ppr_pump_stats mine;        /* copied into st as entries are queued */
    int in_place;               /* PPR_PUMP_CUDA with PPR_COPY_NONE: frames handed over as they are */
    /* helpers of ppr_pump_push_data's copies */
    pthread_t copier[7];
    int nb_copiers;
    pthread_mutex_t copy_lock;  /* the fields below */
    pthread_cond_t copy_go, copy_done;
    const uint8_t *copy_src;
    uint8_t *copy_dst;
    size_t copy_size, copy_chunk;
    unsigned copy_gen;
    int copy_pending, copy_quit;
    AVBufferPool *pkt_pool;     /* ppr_pump_push_data's packet buffers, reused */
    size_t pkt_pool_size;
    int exact_packets;          /* software: a packet's buffer is its data and padding */
};

typedef struct pump_copier_arg {
    ppr_pump *p;
    int index;
} pump_copier_arg;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void pump_entry_release(pump_entry *e)
{
    if (e->kind != PUMP_FRAME)
        return;
    if (e->f.cuda)
        buffer_unref(e->f.cuda);
    if (e->f.host)
        ppr_host_buffer_free(e->f.host);
    e->f.cuda = NULL;
    e->f.host = NULL;
}

/* The copies made so far, into p->mine. */
static void pump_copies(ppr_pump *p)
{
    ppr_copier *cp = p->c ? p->c->sh : p->cp;

    if (p->c) {
        ppr_cuda_copies(p->c, &p->mine.shader_copies, &p->mine.transfer_copies);
        p->mine.cuda_copies = ppr_cuda_copies_cuda(p->c);
        p->mine.frames_in_place = ppr_cuda_frames_in_place(p->c);
    }
    else if (p->cp)
        p->mine.shader_copies = ppr__copier_copies(p->cp);
    else if (p->sink == PPR_PUMP_HOST)
        p->mine.transfer_copies = p->mine.frames;
    ppr__copier_gpu_time(cp, &p->mine.copy_gpu_ns, &p->mine.copies_gpu_timed);
    if (p->c) {                 /* and CUDA's own copies, timed by its events */
        pthread_mutex_lock(&p->c->lock);
        p->mine.copy_gpu_ns += p->c->cu_gpu_ns;
        p->mine.copies_gpu_timed += p->c->cu_gpu_copies;
        pthread_mutex_unlock(&p->c->lock);
    }
}

/* Queue an entry for the caller, waiting for room: 0, or -1 when stopping
 * (the entry released). */
static int pump_post(ppr_pump *p, pump_entry *e)
{
    uint64_t t0 = now_ns();

    pthread_mutex_lock(&p->lock);
    while (p->out_count == p->out_cap && !p->stop)
        pthread_cond_wait(&p->cond, &p->lock);
    p->mine.output_ns += now_ns() - t0;
    if (p->stop) {
        pthread_mutex_unlock(&p->lock);
        pump_entry_release(e);
        return -1;
    }
    p->out[(p->out_head + p->out_count) % p->out_cap] = *e;
    p->out_count++;
    if (e->kind == PUMP_FRAME)
        p->mine.frames++;
    pump_copies(p);
    p->mine.next_wait_ns = p->st.next_wait_ns;   /* the caller's own counter */
    p->st = p->mine;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

/* Queue the error `code` about packet or frame `index`, with the session's
 * message (else this thread's). */
static void pump_post_error(ppr_pump *p, int code, int index, const char *msg)
{
    pump_entry e;
    memset(&e, 0, sizeof(e));
    e.kind = code;
    e.f.index = index;
    if (!msg || !*msg) {
        msg = ppr_last_error(p->s);
        if (!msg || !*msg)
            msg = ppr_last_error(NULL);
    }
    snprintf(e.msg, sizeof(e.msg), "%s", msg ? msg : "");
    pump_post(p, &e);
}

/* Let go of b's decoded frame once its copy ended (no wait): the decoder's
 * images are not held by buffers that frames or tensors keep. */
static void buffer_poll(ppr_cuda_buffer *b)
{
    CUcontext old;
    uint64_t v = 0;
    int done = 0;

    pthread_mutex_lock(&b->lock);
    if (b->pending && b->via_cuda) {
        if (!g_cu.CtxPushCurrent(b->c->ctx)) {
            done = g_cu.EventQuery(b->copied) == 0;     /* CUDA_SUCCESS: it ended */
            if (done)
                cuda_copy_ended(b);
            g_cu.CtxPopCurrent(&old);
        }
    } else if (b->pending) {
        done = b->c->vk.GetSemaphoreCounterValue(b->c->dev, b->c->ready, &v) == VK_SUCCESS &&
               v >= b->ready_value;
    }
    if (done) {
        b->pending = 0;
        av_frame_free(&b->frame);
    }
    pthread_mutex_unlock(&b->lock);
}

/* Whether b's copy ended and the CUDA work its dropped tensors' streams had
 * queued is done (no wait): a copy into it starts without waiting on the host. */
static int buffer_ready(ppr_cuda_buffer *b)
{
    CUcontext old;
    int i, ready;

    pthread_mutex_lock(&b->lock);
    ready = !b->pending;
    if (ready && b->nb_recorded) {
        if (g_cu.CtxPushCurrent(b->c->ctx)) {
            ready = 0;
        } else {
            for (i = 0; i < b->nb_recorded && ready; i++)
                ready = g_cu.EventQuery(b->events[i]) == 0;   /* CUDA_SUCCESS: done */
            g_cu.CtxPopCurrent(&old);
            if (ready)
                b->nb_recorded = 0;
        }
    }
    pthread_mutex_unlock(&b->lock);
    return ready;
}

/* A CUDA buffer of `size` bytes nothing holds, or a new one; the reference
 * returned is the caller's. The least recently used of those whose copy and
 * tensors' work are done; else a new one while the pool has room; else the
 * least recently used free one (its copy waits for them on this thread). */
static ppr_cuda_buffer *pump_cuda_buffer(ppr_pump *p, size_t size)
{
    ppr_cuda_buffer *b;
    int i, best = -1, ready = -1;

    for (i = 0; i < p->nb_pool; i++) {
        int free_now = __atomic_load_n(&p->pool[i]->refs, __ATOMIC_ACQUIRE) == 1;
        buffer_poll(p->pool[i]);
        if (p->pool[i]->size != size) {
            if (free_now) {         /* of another frame size: let it go */
                buffer_unref(p->pool[i]);
                p->pool[i] = p->pool[p->nb_pool - 1];
                p->used[i] = p->used[p->nb_pool - 1];
                p->nb_pool--;
                i--;
            }
            continue;
        }
        if (free_now && (best < 0 || p->used[i] < p->used[best]))
            best = i;
        if (free_now && (ready < 0 || p->used[i] < p->used[ready]) && buffer_ready(p->pool[i]))
            ready = i;
    }
    if (ready < 0 && p->nb_pool < PUMP_POOL)
        best = -1;          /* a new buffer rather than a wait */
    else if (ready >= 0)
        best = ready;
    if (best >= 0) {
        p->used[best] = ++p->seq;
        __atomic_add_fetch(&p->pool[best]->refs, 1, __ATOMIC_ACQ_REL);
        return p->pool[best];
    }
    if (!(b = ppr_cuda_buffer_new(p->c, size)))
        return NULL;
    p->mine.buffers_made++;
    if (p->nb_pool < PUMP_POOL) {   /* kept: the pool's reference and the caller's */
        p->pool[p->nb_pool] = b;
        p->used[p->nb_pool++] = ++p->seq;
        __atomic_add_fetch(&b->refs, 1, __ATOMIC_ACQ_REL);
    }
    return b;
}

/* Receive a frame and start its copy into the sink: 1 (queued), 0 (none yet,
 * or the end), -1 (an error was queued, or stopping). */
static int pump_receive(ppr_pump *p)
{
    pump_entry e;
    ppr_planes *pl = &e.f.planes;
    size_t off[4], size = 0;
    uint64_t t0, base;
    int rc, i, align = p->sink == PPR_PUMP_CUDA ? PUMP_ALIGN_CUDA : PUMP_ALIGN_HOST;

    memset(&e, 0, sizeof(e));
    t0 = now_ns();
    rc = ppr_receive_frame(p->s, &e.f.info);
    p->mine.receive_ns += now_ns() - t0;
    if (rc == PPR_RECV_AGAIN || rc == PPR_RECV_EOF)
        return 0;
    if (rc < 0) {
        pump_post_error(p, rc, p->n_recv, NULL);
        return -1;
    }
    e.kind = PUMP_FRAME;
    e.f.index = p->n_recv;
    if (p->sink == PPR_PUMP_CUDA && p->in_place) {
        /* no copy: the frame itself, its images imported once each */
        t0 = now_ns();
        in_place_poll(p->c, 0);     /* frames whose tensors' streams are done: to the pool */
        *pl = e.f.info.layout;
        rc = ppr_cuda_take_frame(p->s, p->c, &e.f.cuda, pl);
        p->mine.copy_ns += now_ns() - t0;
        if (rc < 0) {
            char msg[PPR_MSG_SIZE];
            snprintf(msg, sizeof(msg), "%s", *ppr_last_error(p->s) ? ppr_last_error(p->s)
                                                                  : ppr_last_error(NULL));
            pump_post_error(p, rc, p->n_recv, msg);
            return -1;
        }
    } else if (p->sink != PPR_PUMP_NONE) {
        *pl = e.f.info.layout;
        for (i = 0; i < pl->count; i++) {
            off[i] = size;
            size += ((size_t)pl->plane[i].width * pl->plane[i].height * 2 + align - 1) /
                    align * align;
        }
        t0 = now_ns();
        if (p->sink == PPR_PUMP_CUDA) {
            e.f.cuda = pump_cuda_buffer(p, size);
            base = e.f.cuda ? e.f.cuda->ptr : 0;
        } else {
            e.f.host = ppr_host_buffer_new(p->s, size);
            base = e.f.host ? (uint64_t)(uintptr_t)ppr_host_buffer_data(e.f.host) : 0;
        }
        p->mine.buffer_ns += now_ns() - t0;
        if (!base) {
            pump_post_error(p, PPR_ENOMEM, p->n_recv, NULL);
            return -1;
        }
        for (i = 0; i < pl->count; i++) {
            pl->plane[i].data = (uint16_t *)(uintptr_t)(base + off[i]);
            pl->plane[i].stride = (ptrdiff_t)pl->plane[i].width * 2;
        }
        t0 = now_ns();
        rc = p->sink == PPR_PUMP_CUDA ? ppr_cuda_download_start(p->s, e.f.cuda, pl) :
             p->cp ? ppr_download_start_shader(p->s, e.f.host, p->cp, pl)
                                             : ppr_download_start(p->s, e.f.host, pl);
        p->mine.copy_ns += now_ns() - t0;
        if (rc < 0) {
            char msg[PPR_MSG_SIZE];
            snprintf(msg, sizeof(msg), "%s", *ppr_last_error(p->s) ? ppr_last_error(p->s)
                                                                  : ppr_last_error(NULL));
            pump_entry_release(&e);
            pump_post_error(p, rc, p->n_recv, msg);
            return -1;
        }
    }
    p->n_recv++;
    return pump_post(p, &e) < 0 ? -1 : 1;
}

/* The next packet: 1, 0 at the end, -1 when stopping, or the reader's error
 * (its message in msg). */
static int pump_input(ppr_pump *p, ppr_packet **pkt, char *msg, size_t msg_size)
{
    int rc;

    *pkt = NULL;
    if (p->reader) {
        rc = ppr_reader_next(p->reader, pkt);
        if (rc < 0)
            snprintf(msg, msg_size, "%s", ppr_last_error(NULL));
        return __atomic_load_n(&p->stop, __ATOMIC_ACQUIRE) ? (ppr_packet_free(*pkt), -1) : rc;
    }
    pthread_mutex_lock(&p->lock);
    while (!p->in_count && !p->in_end && !p->stop)
        pthread_cond_wait(&p->cond, &p->lock);
    if (p->stop) {
        rc = -1;
    } else if (p->in_count) {
        *pkt = p->in[p->in_head];
        p->in_head = (p->in_head + 1) % p->in_cap;
        p->in_count--;
        pthread_cond_broadcast(&p->cond);
        rc = 1;
    } else {
        rc = 0;
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static void *pump_run(void *arg)
{
    ppr_pump *p = arg;
    char msg[PPR_MSG_SIZE] = "";
    ppr_packet *pkt;
    struct timespec cpu;
    uint64_t t0;
    int rc, got, stalls, read_error = 0;

    for (;;) {
        t0 = now_ns();
        rc = pump_input(p, &pkt, msg, sizeof(msg));
        p->mine.input_ns += now_ns() - t0;
        if (rc < 0 && rc != -1) {   /* the file's error: after its frames */
            read_error = rc;
            break;
        }
        if (rc == -1)
            goto out;
        if (rc == 0)
            break;
        stalls = 0;
        for (;;) {
            t0 = now_ns();
            rc = ppr_send_prepared(p->s, pkt, p->tag);
            p->mine.send_ns += now_ns() - t0;
            if (rc != PPR_EAGAIN)
                break;
            if ((got = pump_receive(p)) < 0) {
                ppr_packet_free(pkt);
                goto out;
            }
            stalls = got ? 0 : stalls + 1;
            if (stalls > 2) {
                ppr_packet_free(pkt);
                snprintf(msg, sizeof(msg), "the decoder stalled at packet %d", p->n_sent);
                pump_post_error(p, PPR_EDECODE, p->n_sent, msg);
                goto out;
            }
        }
        ppr_packet_free(pkt);
        if (rc < 0) {
            pump_post_error(p, rc, p->n_sent, NULL);
            goto out;
        }
        p->n_sent++;
        p->mine.packets++;
        while ((got = pump_receive(p)) > 0)
            ;
        if (got < 0)
            goto out;
    }
    if ((rc = ppr_send_prepared(p->s, NULL, p->tag)) < 0) {
        pump_post_error(p, rc, p->n_sent, NULL);
        goto out;
    }
    /* drain: every frame in flight, then PPR_RECV_EOF */
    while ((got = pump_receive(p)) > 0)
        ;
    if (got < 0)
        goto out;
    if (read_error)
        pump_post_error(p, read_error, -1, msg);
    else {
        pump_entry e;
        memset(&e, 0, sizeof(e));
        e.kind = PUMP_END;
        pump_post(p, &e);
    }
out:
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    pthread_mutex_lock(&p->lock);
    p->mine.thread_cpu_ns = (uint64_t)cpu.tv_sec * 1000000000ULL + cpu.tv_nsec;
    p->mine.next_wait_ns = p->st.next_wait_ns;
    p->st = p->mine;
    p->done = 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* A helper of the copies: piece index + 1 of each packet. */
static void *pump_copier_run(void *arg)
{
    pump_copier_arg *a = arg;
    ppr_pump *p = a->p;
    int index = a->index;
    unsigned seen = 0;

    free(a);
    pthread_mutex_lock(&p->copy_lock);
    for (;;) {
        size_t off, len;
        while (p->copy_gen == seen && !p->copy_quit)
            pthread_cond_wait(&p->copy_go, &p->copy_lock);
        if (p->copy_quit)
            break;
        seen = p->copy_gen;
        off = (size_t)(index + 1) * p->copy_chunk;
        len = off >= p->copy_size ? 0 : FFMIN(p->copy_chunk, p->copy_size - off);
        if (index + 1 == p->nb_copiers && off < p->copy_size)
            len = p->copy_size - off;       /* the last piece takes the rest */
        pthread_mutex_unlock(&p->copy_lock);
        if (len)
            memcpy(p->copy_dst + off, p->copy_src + off, len);
        pthread_mutex_lock(&p->copy_lock);
        if (!--p->copy_pending)
            pthread_cond_signal(&p->copy_done);
    }
    pthread_mutex_unlock(&p->copy_lock);
    return NULL;
}

int ppr_pump_copiers(ppr_pump *p, int n)
{
    if (!p)
        return 0;
    if (n < 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        n = cpus >= 8 ? (int)FFMIN(cpus / 4, 3) : 0;
    }
    n = FFMIN(n, 7);
    pthread_mutex_lock(&p->copy_lock);
    while (p->nb_copiers < n) {
        pump_copier_arg *a = malloc(sizeof(*a));
        if (!a)
            break;
        a->p = p;
        a->index = p->nb_copiers;
        if (pthread_create(&p->copier[p->nb_copiers], NULL, pump_copier_run, a)) {
            free(a);
            break;
        }
        p->nb_copiers++;
    }
    n = p->nb_copiers;
    pthread_mutex_unlock(&p->copy_lock);
    return n;
}

/* memcpy, in nb_copiers + 1 pieces at once when it is large */
static void pump_copy(ppr_pump *p, uint8_t *dst, const uint8_t *src, size_t size)
{
    size_t chunk;

    if (!p->nb_copiers || size < (1 << 20)) {
        memcpy(dst, src, size);
        return;
    }
    chunk = (size / (p->nb_copiers + 1) + 63) & ~(size_t)63;
    pthread_mutex_lock(&p->copy_lock);
    p->copy_src = src;
    p->copy_dst = dst;
    p->copy_size = size;
    p->copy_chunk = chunk;
    p->copy_pending = p->nb_copiers;
    p->copy_gen++;
    pthread_cond_broadcast(&p->copy_go);
    pthread_mutex_unlock(&p->copy_lock);
    memcpy(dst, src, FFMIN(chunk, size));
    pthread_mutex_lock(&p->copy_lock);
    while (p->copy_pending)
        pthread_cond_wait(&p->copy_done, &p->copy_lock);
    pthread_mutex_unlock(&p->copy_lock);
}

int ppr_pump_push_data(ppr_pump *p, const uint8_t *data, size_t size, int64_t pts)
{
    ppr_packet *pkt;
    AVBufferRef *buf = NULL;

    if (!p || (size && !data) || size > INT_MAX - AV_INPUT_BUFFER_PADDING_SIZE - (1 << 18))
        return ppr__fail(PPR_EINVAL, "ppr_pump_push_data: no pump, no data or too large");
    /* The packet's memory comes from a pool of buffers that the decoder gives
     * back once done with them: a fresh 4 MB allocation per packet faults in
     * every page (and zeroes it) each time. The pool's buffers are the
     * largest packet so far rounded up to 256 KiB, plus the padding; a
     * larger packet starts a new pool (the old one goes with its last buffer).
     * Not on the software backend, which finds a corrupt frame's concealed
     * slices in its packet's buffer, taken to be the packet and its padding. */
    if (p->exact_packets) {
        ppr_packet *exact = ppr_packet_new(data, size, pts);
        return exact ? ppr_pump_push(p, exact) : PPR_ENOMEM;
    }
    if (size + AV_INPUT_BUFFER_PADDING_SIZE > p->pkt_pool_size) {
        size_t want = ((size + AV_INPUT_BUFFER_PADDING_SIZE + (1 << 18) - 1) >> 18) << 18;
        AVBufferPool *pool = av_buffer_pool_init(want, NULL);
        if (!pool)
            return ppr__fail(PPR_ENOMEM, "out of memory");
        av_buffer_pool_uninit(&p->pkt_pool);
        p->pkt_pool = pool;
        p->pkt_pool_size = want;
    }
    if (!(pkt = calloc(1, sizeof(*pkt))) || !(pkt->av = av_packet_alloc()) ||
        !(buf = av_buffer_pool_get(p->pkt_pool))) {
        if (pkt)
            av_packet_free(&pkt->av);
        free(pkt);
        return ppr__fail(PPR_ENOMEM, "out of memory");
    }
    pkt->av->buf = buf;
    pkt->av->data = buf->data;
    pkt->av->size = (int)size;
    if (size)
        pump_copy(p, buf->data, data, size);
    memset(buf->data + size, 0, AV_INPUT_BUFFER_PADDING_SIZE);
    pkt->av->pts = pts;
    return ppr_pump_push(p, pkt);
}

int ppr_pump_open(ppr_pump **out, ppr_session *s, ppr_cuda *c, int sink, ppr_reader *reader,
                  uint32_t tag, int depth)
{
    ppr_pump *p;

    ppr__clear_error();
    if (!out)
        return ppr__fail(PPR_EINVAL, "out is NULL");
    *out = NULL;
    if (!s || depth < 1 || depth > 64 || sink < PPR_PUMP_NONE || sink > PPR_PUMP_HOST_SHADER_ASYNC ||
        (sink == PPR_PUMP_CUDA && !c))
        return ppr__fail(PPR_EINVAL, "ppr_pump_open: no session, a depth outside 1..64, or "
                         "no CUDA side for the CUDA sink");
    if (!(p = calloc(1, sizeof(*p))) ||
        !(p->in = calloc(depth, sizeof(*p->in))) ||
        !(p->out = calloc(depth, sizeof(*p->out)))) {
        if (p)
            free(p->in);
        free(p);
        return ppr__fail(PPR_ENOMEM, "out of memory");
    }
    p->s = s;
    p->exact_packets = !strcmp(ppr_backend(s), "software");
    p->sink = sink;
    p->reader = reader;
    p->tag = tag;
    p->in_cap = p->out_cap = depth;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    pthread_mutex_init(&p->copy_lock, NULL);
    pthread_cond_init(&p->copy_go, NULL);
    pthread_cond_init(&p->copy_done, NULL);
    if (sink == PPR_PUMP_CUDA) {
        p->c = c;
        __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
        pthread_mutex_lock(&c->lock);
        c->pumps++;             /* it polls c->deferred */
        p->in_place = c->copy == PPR_COPY_NONE;
        pthread_mutex_unlock(&c->lock);
    }
    if ((sink == PPR_PUMP_HOST_SHADER || sink == PPR_PUMP_HOST_SHADER_ASYNC) &&
        (!(p->cp = ppr_copier_new(s)) ||
         (sink == PPR_PUMP_HOST_SHADER_ASYNC && ppr_copier_set_async(p->cp, 1) < 0))) {
        char msg[PPR_MSG_SIZE];
        snprintf(msg, sizeof(msg), "%s", *ppr_last_error(s) ? ppr_last_error(s) : ppr_last_error(NULL));
        ppr_pump_free(p);
        return ppr__fail(PPR_ENODEVICE, "%s", msg);
    }
    if (pthread_create(&p->thread, NULL, pump_run, p)) {
        ppr_pump_free(p);
        return ppr__fail(PPR_ENOMEM, "could not start the pump's thread");
    }
    p->started = 1;
    *out = p;
    return 0;
}

int ppr_pump_push(ppr_pump *p, ppr_packet *pkt)
{
    if (!p) {
        ppr_packet_free(pkt);
        return 0;
    }
    pthread_mutex_lock(&p->lock);
    while (pkt && p->in_count == p->in_cap && !p->stop && !p->done)
        pthread_cond_wait(&p->cond, &p->lock);
    if (p->stop || p->done || p->in_end) {
        pthread_mutex_unlock(&p->lock);
        ppr_packet_free(pkt);
        return 0;
    }
    if (pkt) {
        p->in[(p->in_head + p->in_count) % p->in_cap] = pkt;
        p->in_count++;
    } else {
        p->in_end = 1;
    }
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    return 1;
}

int ppr_pump_next(ppr_pump *p, ppr_pump_frame *out)
{
    pump_entry *e;
    uint64_t t0 = now_ns();
    int kind;

    ppr__clear_error();
    if (!p || !out)
        return ppr__fail(PPR_EINVAL, "pump or out is NULL");
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&p->lock);
    while (!p->out_count && !p->done)
        pthread_cond_wait(&p->cond, &p->lock);
    p->st.next_wait_ns += now_ns() - t0;
    if (!p->out_count) {        /* the thread ended without an entry: stopped */
        pthread_mutex_unlock(&p->lock);
        return 0;
    }
    e = &p->out[p->out_head];
    kind = e->kind;
    if (kind != PUMP_FRAME) {
        /* The end or an error is the thread's last entry: let it finish, so that
         * what follows sees a pump that is done (its statistics final, pushes
         * refused) and not one that is still between posting and returning. */
        while (!p->done)
            pthread_cond_wait(&p->cond, &p->lock);
    }
    if (kind == PUMP_FRAME) {
        *out = e->f;
    } else {
        out->index = e->f.index;
        snprintf(p->err, sizeof(p->err), "%s", e->msg);
    }
    if (kind == PUMP_FRAME || kind < 0) {   /* the end and errors stay: later calls repeat them */
        if (kind == PUMP_FRAME) {
            p->out_head = (p->out_head + 1) % p->out_cap;
            p->out_count--;
        }
    }
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    return kind;
}

const char *ppr_pump_error(ppr_pump *p)
{
    return p ? p->err : "";
}

void ppr_pump_stats_get(ppr_pump *p, ppr_pump_stats *out)
{
    if (!p || !out)
        return;
    pthread_mutex_lock(&p->lock);
    *out = p->st;
    pthread_mutex_unlock(&p->lock);
}

void ppr_pump_stop(ppr_pump *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    if (p->started && !p->joined) {
        pthread_join(p->thread, NULL);
        p->joined = 1;
    }
}

void ppr_pump_free(ppr_pump *p)
{
    int i;

    if (!p)
        return;
    ppr_pump_stop(p);
    pthread_mutex_lock(&p->copy_lock);
    p->copy_quit = 1;
    pthread_cond_broadcast(&p->copy_go);
    pthread_mutex_unlock(&p->copy_lock);
    for (i = 0; i < p->nb_copiers; i++)
        pthread_join(p->copier[i], NULL);
    pthread_cond_destroy(&p->copy_go);
    pthread_cond_destroy(&p->copy_done);
    pthread_mutex_destroy(&p->copy_lock);
    av_buffer_pool_uninit(&p->pkt_pool);   /* freed once the decoder let go of the last */
    for (i = 0; i < p->out_count; i++)
        pump_entry_release(&p->out[(p->out_head + i) % p->out_cap]);
    for (i = 0; i < p->in_count; i++)
        ppr_packet_free(p->in[(p->in_head + i) % p->in_cap]);
    for (i = 0; i < p->nb_pool; i++)
        buffer_unref(p->pool[i]);
    if (p->c) {                 /* the stream ended: the decoder's frames go */
        pthread_mutex_lock(&p->c->lock);
        p->c->pumps--;
        pthread_mutex_unlock(&p->c->lock);
        in_place_poll(p->c, 1);     /* no pump polls them any more */
        release_frames(p->c);
        cuda_unref(p->c);
    }
    ppr_copier_free(p->cp);     /* waits for its copies */
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    free(p->in);
    free(p->out);
    free(p);
}
