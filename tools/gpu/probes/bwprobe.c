/*
 * bwprobe: the machine's transfer bandwidths (issue 20), to tell which part bounds a download
 * of a decoded frame through hwcontext_vulkan: the GPU's copy into the host-visible staging
 * buffer, or the host's copy out of it into the AVFrame. Plain Vulkan 1.1 (the loader is
 * dlopen'ed, as in tools/gpu/probes/startprobe.c --raw), no FFmpeg.
 *
 *   bwprobe [--device N] [--sizes BYTES,...] [--frames WxH,...|none] [--reps N]
 *           [--threads N,...] [--json]
 *
 * It reports:
 *   - the device: name, driver, type, memory heaps and types, queue families, the copy
 *     alignments, timestampPeriod;
 *   - buffer copies: vkCmdCopyBuffer of each --sizes size (default 33177600 and 132710400
 *     bytes: a 3840x2160 and a 7680x4320 yuv422p10 frame) from a DEVICE_LOCAL buffer to a
 *     host-visible one (d2h) and back (h2d), for each class of host-visible memory type the
 *     device has (cached_coherent: HOST_CACHED|HOST_COHERENT; cached: HOST_CACHED without
 *     HOST_COHERENT; coherent: HOST_COHERENT, not cached), on a queue of the dedicated
 *     transfer family (if there is one) and of the compute family;
 *   - image copies, as FFmpeg downloads a frame: vkCmdCopyImageToBuffer of three R16_UNORM
 *     optimal-tiling images, WxH and twice (W/2)xH, into one HOST_CACHED buffer, for each
 *     --frames frame (default 3840x2160 and 7680x4320: the same bytes as the default sizes);
 *     and the same copy into a DEVICE_LOCAL buffer (d2d: what pyprores' CUDA output does per
 *     frame, which the bus does not bound), on each queue;
 *   - host copies of each size, from the staging buffer (a mapped HOST_CACHED buffer the GPU
 *     has just written, as after a download) and, for reference, from malloc'd memory, into
 *     malloc'd memory touched beforehand, with each --threads count (default 1,2,4,8; the
 *     threads are created once and released by a barrier for each repetition, each copying a
 *     contiguous share of whole rows): row by row (memcpy of 7680-byte rows, as
 *     av_image_copy_plane does for 4K 10-bit luma), one memcpy per share, and SSE2
 *     non-temporal stores (where the compiler targets SSE2). Before each repetition the
 *     staging buffer is rewritten by the GPU, as a download does; with --cold, source and
 *     destination are also flushed from the CPU caches (clflush; SSE2 only), which on a host
 *     with a large last-level cache is slow and more pessimistic than a download, whose
 *     destination a decoder reuses.
 * Each figure: --reps repetitions (default 20; host copies --host-reps, default 5) after 2
 * warm-ups; the median and the best.
 * Wall time: from vkQueueSubmit to the end of vkWaitForFences (including the flush or
 * invalidation of non-coherent memory); GPU time: timestamps around the copy, where the
 * queue's family has timestampValidBits. Host copies: from the release of the threads to the
 * last one done. GB/s are 1e9 bytes per second.
 *
 * Output: the readable table on stdout; with --json, one JSON object on stdout and the table
 * on stderr. Every failure: a message on stderr and exit status 1 (2 for usage errors).
 *
 * Build (tools/gpu/gpu-pack does this, once for every build: it uses no FFmpeg):
 *   cc -O2 -o bwprobe bwprobe.c -I$VULKAN_HEADERS/include -ldl -lpthread
 */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <vulkan/vulkan.h>

#include "json_str.h"

#define ROW_BYTES 7680          /* one row of 3840 16-bit samples */
#define WARMUPS 2
#define MAX_LIST 32

/* ------------------------------------------------------------------ errors */
static char stage[256] = "starting";

static void die(const char *fmt, ...)
{
    va_list vl;
    fputs("bwprobe: error: ", stderr);
    va_start(vl, fmt);
    vfprintf(stderr, fmt, vl);
    va_end(vl);
    fprintf(stderr, " (while %s)\n", stage);
    exit(1);
}

static int progress;             /* --progress: each stage on stderr as it starts */
static double now(void);

static void set_stage(const char *fmt, ...)
{
    static double t0;
    va_list vl;
    va_start(vl, fmt);
    vsnprintf(stage, sizeof(stage), fmt, vl);
    va_end(vl);
    if (progress) {
        if (!t0)
            t0 = now();
        fprintf(stderr, "bwprobe: %8.3f s: %s\n", now() - t0, stage);
    }
}

static const char *vk_result_name(VkResult r)
{
    switch (r) {
#define R(n) case n: return #n;
    R(VK_SUCCESS) R(VK_NOT_READY) R(VK_TIMEOUT) R(VK_INCOMPLETE)
    R(VK_ERROR_OUT_OF_HOST_MEMORY) R(VK_ERROR_OUT_OF_DEVICE_MEMORY) R(VK_ERROR_INITIALIZATION_FAILED)
    R(VK_ERROR_DEVICE_LOST) R(VK_ERROR_MEMORY_MAP_FAILED) R(VK_ERROR_LAYER_NOT_PRESENT)
    R(VK_ERROR_EXTENSION_NOT_PRESENT) R(VK_ERROR_FEATURE_NOT_PRESENT) R(VK_ERROR_INCOMPATIBLE_DRIVER)
    R(VK_ERROR_TOO_MANY_OBJECTS) R(VK_ERROR_FORMAT_NOT_SUPPORTED) R(VK_ERROR_UNKNOWN)
#undef R
    default: return "VkResult";
    }
}

#define VK(call) do {                                                                     \
        VkResult r_ = (call);                                                             \
        if (r_ != VK_SUCCESS)                                                             \
            die("%s returned %s (%d)", #call, vk_result_name(r_), (int)r_);               \
    } while (0)

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        die("out of memory (%zu x %zu bytes)", n, size);
    return p;
}

/* Page-aligned, every page touched: no page fault in a timed copy. */
static uint8_t *host_alloc(size_t bytes, int fill)
{
    void *p = NULL;
    int err = posix_memalign(&p, 4096, bytes);
    if (err)
        die("posix_memalign of %zu bytes: %s", bytes, strerror(err));
    memset(p, fill, bytes);
    return p;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ the Vulkan functions */
#define INSTANCE_FUNCS(X)                                                                  \
    X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)    \
    X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceMemoryProperties)              \
    X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkGetPhysicalDeviceImageFormatProperties) \
    X(vkCreateDevice) X(vkGetDeviceProcAddr)
#define DEVICE_FUNCS(X)                                                                    \
    X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkDeviceWaitIdle)                             \
    X(vkCreateBuffer) X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements) X(vkBindBufferMemory) \
    X(vkCreateImage) X(vkDestroyImage) X(vkGetImageMemoryRequirements2) X(vkBindImageMemory) \
    X(vkAllocateMemory) X(vkFreeMemory) X(vkMapMemory) X(vkUnmapMemory)                    \
    X(vkFlushMappedMemoryRanges) X(vkInvalidateMappedMemoryRanges)                        \
    X(vkCreateCommandPool) X(vkDestroyCommandPool) X(vkAllocateCommandBuffers)            \
    X(vkFreeCommandBuffers) X(vkBeginCommandBuffer) X(vkEndCommandBuffer)                  \
    X(vkCmdCopyBuffer) X(vkCmdCopyImageToBuffer) X(vkCmdFillBuffer) X(vkCmdClearColorImage) \
    X(vkCmdPipelineBarrier) X(vkCmdWriteTimestamp) X(vkCmdResetQueryPool)                 \
    X(vkQueueSubmit) X(vkCreateFence) X(vkDestroyFence) X(vkWaitForFences) X(vkResetFences) \
    X(vkCreateQueryPool) X(vkDestroyQueryPool) X(vkGetQueryPoolResults)

static struct {
    void *lib;
    PFN_vkGetInstanceProcAddr gipa;
#define DECL(n) PFN_##n n;
    INSTANCE_FUNCS(DECL)
    DEVICE_FUNCS(DECL)
#undef DECL
} vk;

/* ------------------------------------------------------------------ flag names */
typedef struct Flag {
    uint32_t bit;
    const char *name;
} Flag;

static const Flag mem_flags[] = {
    { VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, "DEVICE_LOCAL" },
    { VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, "HOST_VISIBLE" },
    { VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, "HOST_COHERENT" },
    { VK_MEMORY_PROPERTY_HOST_CACHED_BIT, "HOST_CACHED" },
    { VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT, "LAZILY_ALLOCATED" },
    { VK_MEMORY_PROPERTY_PROTECTED_BIT, "PROTECTED" },
    { VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD, "DEVICE_COHERENT_AMD" },
    { VK_MEMORY_PROPERTY_DEVICE_UNCACHED_BIT_AMD, "DEVICE_UNCACHED_AMD" },
    { VK_MEMORY_PROPERTY_RDMA_CAPABLE_BIT_NV, "RDMA_CAPABLE_NV" },
    { 0, NULL },
};
static const Flag heap_flags[] = {
    { VK_MEMORY_HEAP_DEVICE_LOCAL_BIT, "DEVICE_LOCAL" },
    { VK_MEMORY_HEAP_MULTI_INSTANCE_BIT, "MULTI_INSTANCE" },
    { 0, NULL },
};
static const Flag queue_flags[] = {
    { VK_QUEUE_GRAPHICS_BIT, "GRAPHICS" },
    { VK_QUEUE_COMPUTE_BIT, "COMPUTE" },
    { VK_QUEUE_TRANSFER_BIT, "TRANSFER" },
    { VK_QUEUE_SPARSE_BINDING_BIT, "SPARSE_BINDING" },
    { VK_QUEUE_PROTECTED_BIT, "PROTECTED" },
    { VK_QUEUE_VIDEO_DECODE_BIT_KHR, "VIDEO_DECODE" },
    { VK_QUEUE_VIDEO_ENCODE_BIT_KHR, "VIDEO_ENCODE" },
    { VK_QUEUE_OPTICAL_FLOW_BIT_NV, "OPTICAL_FLOW" },
    { 0, NULL },
};
static const Flag usage_flags[] = {
    { VK_IMAGE_USAGE_TRANSFER_SRC_BIT, "TRANSFER_SRC" },
    { VK_IMAGE_USAGE_TRANSFER_DST_BIT, "TRANSFER_DST" },
    { VK_IMAGE_USAGE_SAMPLED_BIT, "SAMPLED" },
    { VK_IMAGE_USAGE_STORAGE_BIT, "STORAGE" },
    { 0, NULL },
};

/* "A|B|0x40" into buf; "none" for 0 */
static const char *flag_str(char *buf, size_t size, uint32_t flags, const Flag *tab)
{
    size_t len = 0;
    buf[0] = 0;
    for (const Flag *f = tab; f->name; f++)
        if (flags & f->bit) {
            len += snprintf(buf + len, len < size ? size - len : 0, "%s%s", len ? "|" : "", f->name);
            flags &= ~f->bit;
        }
    if (flags)
        len += snprintf(buf + len, len < size ? size - len : 0, "%s0x%x", len ? "|" : "", flags);
    if (!len)
        snprintf(buf, size, "none");
    return buf;
}

/* the flag names as a JSON array */
static void json_flags(FILE *f, uint32_t flags, const Flag *tab)
{
    char buf[256], *save = NULL;
    int n = 0;
    fputc('[', f);
    if (flags) {
        flag_str(buf, sizeof(buf), flags, tab);
        for (char *t = strtok_r(buf, "|", &save); t; t = strtok_r(NULL, "|", &save)) {
            fputs(n++ ? ", " : "", f);
            json_str(f, t);
        }
    }
    fputc(']', f);
}

/* ------------------------------------------------------------------ statistics */
typedef struct Stats {
    int ok;
    double median, min;         /* seconds */
} Stats;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static Stats stats_of(const double *v, int n)
{
    Stats s = { 0 };
    double *w;
    if (n < 1)
        return s;
    w = xcalloc(n, sizeof(*w));
    memcpy(w, v, n * sizeof(*w));
    qsort(w, n, sizeof(*w), cmp_double);
    s.min = w[0];
    s.median = n % 2 ? w[n / 2] : (w[n / 2 - 1] + w[n / 2]) / 2;
    s.ok = s.min > 0;
    free(w);
    return s;
}

static double gbps(uint64_t bytes, double s)
{
    return s > 0 ? bytes / s / 1e9 : 0;
}

/* ------------------------------------------------------------------ the context */
enum { CACHED_COHERENT, CACHED, COHERENT, NB_CLASSES };
static const char *const class_names[NB_CLASSES] = { "cached_coherent", "cached", "coherent" };

typedef struct Queue {
    const char *role;           /* "transfer" or "compute" */
    uint32_t family;
    uint32_t ts_bits;           /* timestampValidBits of the family */
    VkQueue queue;
    VkCommandPool pool;
} Queue;

typedef struct Ctx {
    VkInstance inst;
    VkPhysicalDevice pd;
    VkDevice dev;
    uint32_t api;               /* min(instance, device) */
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceDriverProperties driver;
    int has_driver_props;
    VkPhysicalDeviceMemoryProperties mem;
    VkQueueFamilyProperties fams[64];
    uint32_t nb_fams;
    Queue queues[2];            /* the transfer queue first when there is one */
    int nb_queues;
    Queue *compute;
    uint32_t families[2];       /* distinct families, for VK_SHARING_MODE_CONCURRENT */
    uint32_t nb_families;
    VkFence fence;
    int class_type[NB_CLASSES]; /* memory type of each class, -1: none */
    int device_type;            /* the DEVICE_LOCAL memory type of the buffers */
    int staging_class;          /* the HOST_CACHED class of the image copies and host copies */
    int reps;
    int host_reps;              /* repetitions of the host copies */
    int cold;                   /* evict source and destination before each host copy */
} Ctx;

typedef struct Buf {
    VkBuffer buf;
    VkDeviceMemory mem;
    uint8_t *map;
    VkDeviceSize size;
    uint32_t type;
    int coherent;
} Buf;

/* The memory type for memoryTypeBits bits with all of want and none of avoid; one without
 * prefer_not if there is one. -1: none. */
static int find_type(const Ctx *c, uint32_t bits, uint32_t want, uint32_t avoid, uint32_t prefer_not)
{
    int found = -1;
    avoid |= VK_MEMORY_PROPERTY_PROTECTED_BIT | VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT;
    for (uint32_t i = 0; i < c->mem.memoryTypeCount; i++) {
        uint32_t f = c->mem.memoryTypes[i].propertyFlags;
        if (!(bits & (1u << i)) || (f & want) != want || (f & avoid))
            continue;
        if (!(f & prefer_not))
            return i;
        if (found < 0)
            found = i;
    }
    return found;
}

static int class_type(const Ctx *c, uint32_t bits, int cls)
{
    const uint32_t hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, cached = VK_MEMORY_PROPERTY_HOST_CACHED_BIT,
                   coherent = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, dl = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    /* host memory first: a DEVICE_LOCAL host-visible type (a BAR) only where there is no
     * other (a CPU or integrated device) */
    switch (cls) {
    case CACHED_COHERENT: return find_type(c, bits, hv | cached | coherent, 0, dl);
    case CACHED:          return find_type(c, bits, hv | cached, coherent, dl);
    default:              return find_type(c, bits, hv | coherent, cached, dl);
    }
}

static void buf_create(Ctx *c, Buf *b, VkDeviceSize size, int type, VkBufferUsageFlags usage)
{
    VkBufferCreateInfo bci = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = size,
        .usage = usage,
        .sharingMode = c->nb_families > 1 ? VK_SHARING_MODE_CONCURRENT : VK_SHARING_MODE_EXCLUSIVE,
        .queueFamilyIndexCount = c->nb_families > 1 ? c->nb_families : 0,
        .pQueueFamilyIndices = c->nb_families > 1 ? c->families : NULL,
    };
    VkMemoryRequirements req;
    uint32_t flags = c->mem.memoryTypes[type].propertyFlags;
    memset(b, 0, sizeof(*b));
    b->size = size;
    b->type = type;
    b->coherent = !!(flags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    VK(vk.vkCreateBuffer(c->dev, &bci, NULL, &b->buf));
    vk.vkGetBufferMemoryRequirements(c->dev, b->buf, &req);
    if (!(req.memoryTypeBits & (1u << type)))
        die("memory type %d does not suit a buffer of %" PRIu64 " bytes", type, (uint64_t)size);
    VkMemoryAllocateInfo mai = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
        .allocationSize = req.size,
        .memoryTypeIndex = type,
    };
    VK(vk.vkAllocateMemory(c->dev, &mai, NULL, &b->mem));
    VK(vk.vkBindBufferMemory(c->dev, b->buf, b->mem, 0));
    if (flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) {
        void *p = NULL;
        VK(vk.vkMapMemory(c->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &p));
        b->map = p;
    }
}

static void buf_free(Ctx *c, Buf *b)
{
    if (b->map)
        vk.vkUnmapMemory(c->dev, b->mem);
    vk.vkDestroyBuffer(c->dev, b->buf, NULL);
    vk.vkFreeMemory(c->dev, b->mem, NULL);
    memset(b, 0, sizeof(*b));
}

static VkMappedMemoryRange whole_range(const Buf *b)
{
    return (VkMappedMemoryRange){ .sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE, .memory = b->mem,
                                  .offset = 0, .size = VK_WHOLE_SIZE };
}

static void buf_flush(Ctx *c, const Buf *b)
{
    if (b->coherent)
        return;
    VkMappedMemoryRange r = whole_range(b);
    VK(vk.vkFlushMappedMemoryRanges(c->dev, 1, &r));
}

static void buf_invalidate(Ctx *c, const Buf *b)
{
    if (b->coherent)
        return;
    VkMappedMemoryRange r = whole_range(b);
    VK(vk.vkInvalidateMappedMemoryRanges(c->dev, 1, &r));
}

/* ------------------------------------------------------------------ recording and submitting */
typedef void (*Record)(VkCommandBuffer cb, const void *arg);

static void submit_wait(Ctx *c, const Queue *q, VkCommandBuffer cb)
{
    VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb };
    VK(vk.vkQueueSubmit(q->queue, 1, &si, c->fence));
    VK(vk.vkWaitForFences(c->dev, 1, &c->fence, VK_TRUE, UINT64_MAX));
    VK(vk.vkResetFences(c->dev, 1, &c->fence));
}

static void alloc_cbs(Ctx *c, const Queue *q, VkCommandBuffer *cbs, uint32_t n)
{
    VkCommandBufferAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
        .commandPool = q->pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
        .commandBufferCount = n,
    };
    VK(vk.vkAllocateCommandBuffers(c->dev, &ai, cbs));
}

static void begin_cb(VkCommandBuffer cb, VkCommandBufferUsageFlags flags)
{
    VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, .flags = flags };
    VK(vk.vkBeginCommandBuffer(cb, &bi));
}

/* transfer writes made visible to the host */
static void barrier_to_host(VkCommandBuffer cb)
{
    VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                           .dstAccessMask = VK_ACCESS_HOST_READ_BIT };
    vk.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* once, outside the measurements */
static void submit_once(Ctx *c, const Queue *q, Record rec, const void *arg)
{
    VkCommandBuffer cb;
    alloc_cbs(c, q, &cb, 1);
    begin_cb(cb, VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
    rec(cb, arg);
    VK(vk.vkEndCommandBuffer(cb));
    submit_wait(c, q, cb);
    vk.vkFreeCommandBuffers(c->dev, q->pool, 1, &cb);
}

typedef struct CopyArgs {
    VkBuffer src, dst;
    VkDeviceSize size;
    int to_host;
} CopyArgs;

static void rec_copy(VkCommandBuffer cb, const void *arg)
{
    const CopyArgs *a = arg;
    VkBufferCopy region = { .srcOffset = 0, .dstOffset = 0, .size = a->size };
    vk.vkCmdCopyBuffer(cb, a->src, a->dst, 1, &region);
    if (a->to_host)
        barrier_to_host(cb);
}

static void rec_fill(VkCommandBuffer cb, const void *arg)
{
    const Buf *b = arg;
    vk.vkCmdFillBuffer(cb, b->buf, 0, VK_WHOLE_SIZE, 0xa5a5a5a5u);
}

typedef struct QueryArgs {
    VkQueryPool pool;
    uint32_t count;
} QueryArgs;

static void rec_reset_queries(VkCommandBuffer cb, const void *arg)
{
    const QueryArgs *a = arg;
    vk.vkCmdResetQueryPool(cb, a->pool, 0, a->count);
}

#define NB_PLANES 3
typedef struct Frame {
    uint32_t w, h;
    VkImage img[NB_PLANES];
    VkDeviceMemory mem[NB_PLANES];
    VkExtent3D ext[NB_PLANES];
    VkDeviceSize offset[NB_PLANES], plane_bytes[NB_PLANES];
    VkDeviceSize bytes, buf_size;
    VkImageUsageFlags usage;
    int dedicated;
    VkBuffer dst;               /* set per measurement */
} Frame;

static void rec_clear_frame(VkCommandBuffer cb, const void *arg)
{
    const Frame *f = arg;
    VkImageSubresourceRange range = { VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1 };
    VkImageMemoryBarrier ib[NB_PLANES];
    VkClearColorValue color = { .float32 = { 0.25f, 0, 0, 0 } };
    for (int p = 0; p < NB_PLANES; p++)
        ib[p] = (VkImageMemoryBarrier){
            .sType = VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER,
            .srcAccessMask = 0,
            .dstAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
            .oldLayout = VK_IMAGE_LAYOUT_UNDEFINED,
            .newLayout = VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
            .srcQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
            .dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
            .image = f->img[p],
            .subresourceRange = range,
        };
    vk.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 0, NULL, 0,
                            NULL, NB_PLANES, ib);
    for (int p = 0; p < NB_PLANES; p++) {
        vk.vkCmdClearColorImage(cb, f->img[p], VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, &color, 1, &range);
        ib[p].srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
        ib[p].dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
        ib[p].oldLayout = VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL;
        ib[p].newLayout = VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL;
    }
    vk.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 0, NULL, 0,
                            NULL, NB_PLANES, ib);
}

static void rec_copy_frame(VkCommandBuffer cb, const void *arg)
{
    const Frame *f = arg;
    for (int p = 0; p < NB_PLANES; p++) {
        VkBufferImageCopy region = {
            .bufferOffset = f->offset[p],
            .bufferRowLength = 0,
            .bufferImageHeight = 0,
            .imageSubresource = { VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1 },
            .imageOffset = { 0, 0, 0 },
            .imageExtent = f->ext[p],
        };
        vk.vkCmdCopyImageToBuffer(cb, f->img[p], VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, f->dst, 1, &region);
    }
    barrier_to_host(cb);
}

/* warm-ups + reps submissions of what rec records, one command buffer each, waited for one by
 * one: wall and (where the family has timestamps) GPU time of the reps. host: the
 * host-visible buffer, flushed before each submission (to_host 0) or invalidated after it
 * (to_host 1) where it is not coherent; NULL for a copy that stays in device memory. */
static void run_series(Ctx *c, const Queue *q, Record rec, const void *arg, const Buf *host, int to_host,
                       Stats *wall, Stats *gpu)
{
    uint32_t n = WARMUPS + c->reps;
    VkCommandBuffer *cbs = xcalloc(n, sizeof(*cbs));
    double *w = xcalloc(n, sizeof(*w)), *g = xcalloc(n, sizeof(*g));
    uint64_t *ts = xcalloc(2 * n, sizeof(*ts));
    VkQueryPool qp = VK_NULL_HANDLE;

    if (q->ts_bits) {
        VkQueryPoolCreateInfo qci = { .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                      .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = 2 * n };
        VK(vk.vkCreateQueryPool(c->dev, &qci, NULL, &qp));
        /* vkCmdResetQueryPool needs a graphics or compute queue: reset all on the compute one */
        QueryArgs qa = { qp, 2 * n };
        submit_once(c, c->compute, rec_reset_queries, &qa);
    }
    alloc_cbs(c, q, cbs, n);
    for (uint32_t i = 0; i < n; i++) {
        begin_cb(cbs[i], VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
        if (qp)
            vk.vkCmdWriteTimestamp(cbs[i], VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, qp, 2 * i);
        rec(cbs[i], arg);
        if (qp)
            vk.vkCmdWriteTimestamp(cbs[i], VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, qp, 2 * i + 1);
        VK(vk.vkEndCommandBuffer(cbs[i]));
    }
    for (uint32_t i = 0; i < n; i++) {
        VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
                            .pCommandBuffers = &cbs[i] };
        double t0 = now();
        if (host && !to_host)
            buf_flush(c, host);
        VK(vk.vkQueueSubmit(q->queue, 1, &si, c->fence));
        VK(vk.vkWaitForFences(c->dev, 1, &c->fence, VK_TRUE, UINT64_MAX));
        if (host && to_host)
            buf_invalidate(c, host);
        w[i] = now() - t0;
        VK(vk.vkResetFences(c->dev, 1, &c->fence));
    }
    *wall = stats_of(w + WARMUPS, c->reps);
    memset(gpu, 0, sizeof(*gpu));
    if (qp) {
        uint64_t mask = q->ts_bits >= 64 ? ~0ull : (1ull << q->ts_bits) - 1;
        VK(vk.vkGetQueryPoolResults(c->dev, qp, 0, 2 * n, 2 * n * sizeof(*ts), ts, sizeof(*ts),
                                    VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
        for (uint32_t i = 0; i < n; i++)
            g[i] = ((ts[2 * i + 1] - ts[2 * i]) & mask) * (double)c->props.limits.timestampPeriod * 1e-9;
        *gpu = stats_of(g + WARMUPS, c->reps);
        vk.vkDestroyQueryPool(c->dev, qp, NULL);
    }
    vk.vkFreeCommandBuffers(c->dev, q->pool, n, cbs);
    free(cbs);
    free(w);
    free(g);
    free(ts);
}

/* ------------------------------------------------------------------ results */
typedef struct Result {
    const char *what;           /* "d2h", "h2d", "image_d2h" or "image_d2d" */
    int cls;                    /* the host memory class; -1: device-local memory (image_d2d) */
    uint64_t bytes;
    uint32_t frame_w, frame_h;  /* image copies: the frame, its images' usage and allocation */
    VkImageUsageFlags usage;
    int dedicated;
    uint32_t type;
    const Queue *queue;
    Stats wall, gpu;
} Result;

typedef struct HostResult {
    uint64_t bytes;
    const char *source;         /* "staging" or "malloc" */
    int method;
    int threads;
    Stats s;
} HostResult;

enum { M_ROWS, M_WHOLE, M_STREAM, NB_METHODS };
static const char *const method_names[NB_METHODS] = { "rows", "whole", "stream" };

static Result *results;
static int nb_results, max_results;
static HostResult *host_results;
static int nb_host_results, max_host_results;

static void add_result(Result r)
{
    if (nb_results == max_results) {
        max_results = max_results ? 2 * max_results : 32;
        Result *p = realloc(results, max_results * sizeof(*p));
        if (!p)
            die("out of memory");
        results = p;
    }
    results[nb_results++] = r;
}

static void add_host_result(HostResult r)
{
    if (nb_host_results == max_host_results) {
        max_host_results = max_host_results ? 2 * max_host_results : 64;
        HostResult *p = realloc(host_results, max_host_results * sizeof(*p));
        if (!p)
            die("out of memory");
        host_results = p;
    }
    host_results[nb_host_results++] = r;
}

/* ------------------------------------------------------------------ host copies */
#ifdef __SSE2__
static void stream_copy(uint8_t *dst, const uint8_t *src, size_t len)
{
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15, n;
    if (head > len)
        head = len;
    memcpy(dst, src, head);
    dst += head;
    src += head;
    len -= head;
    n = len & ~(size_t)63;
    for (size_t i = 0; i < n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
        _mm_stream_si128((__m128i *)(dst + i), a);
        _mm_stream_si128((__m128i *)(dst + i + 16), b);
        _mm_stream_si128((__m128i *)(dst + i + 32), c);
        _mm_stream_si128((__m128i *)(dst + i + 48), d);
    }
    memcpy(dst + n, src + n, len - n);
    _mm_sfence();
}

/* out of every cache level: a cold start for each repetition */
static void evict(const void *p, size_t len)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < len; i += 64)
        _mm_clflush(b + i);
    if (len)
        _mm_clflush(b + len - 1);
    _mm_mfence();
}
#define HAVE_STREAM 1
#else
static void evict(const void *p, size_t len)
{
    (void)p;
    (void)len;
}
#define HAVE_STREAM 0
#endif

static void copy_share(int method, uint8_t *dst, const uint8_t *src, size_t len)
{
    switch (method) {
    case M_ROWS: {
        size_t off = 0;
        for (; off + ROW_BYTES <= len; off += ROW_BYTES)
            memcpy(dst + off, src + off, ROW_BYTES);
        memcpy(dst + off, src + off, len - off);
        break;
    }
#if HAVE_STREAM
    case M_STREAM:
        stream_copy(dst, src, len);
        break;
#endif
    default:
        memcpy(dst, src, len);
    }
}

typedef struct Pool Pool;
typedef struct Worker {
    Pool *pool;
    int index;
    pthread_t thread;
} Worker;

struct Pool {
    int n;
    Worker *workers;
    pthread_barrier_t start, done;
    /* the job, set by the main thread before it releases the workers */
    int stop, method;
    const uint8_t *src;
    uint8_t *dst;
    size_t *cut;                /* n + 1 boundaries, at whole rows */
};

static void *worker_main(void *arg)
{
    Worker *w = arg;
    Pool *p = w->pool;
    for (;;) {
        pthread_barrier_wait(&p->start);
        if (p->stop)
            break;
        copy_share(p->method, p->dst + p->cut[w->index], p->src + p->cut[w->index],
                   p->cut[w->index + 1] - p->cut[w->index]);
        pthread_barrier_wait(&p->done);
    }
    return NULL;
}

static void pool_start(Pool *p, int n)
{
    int err;
    memset(p, 0, sizeof(*p));
    p->n = n;
    p->workers = xcalloc(n, sizeof(*p->workers));
    p->cut = xcalloc(n + 1, sizeof(*p->cut));
    if ((err = pthread_barrier_init(&p->start, NULL, n + 1)) || (err = pthread_barrier_init(&p->done, NULL, n + 1)))
        die("pthread_barrier_init: %s", strerror(err));
    for (int i = 0; i < n; i++) {
        p->workers[i] = (Worker){ .pool = p, .index = i };
        if ((err = pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i])))
            die("pthread_create (thread %d of %d): %s", i + 1, n, strerror(err));
    }
}

static void pool_stop(Pool *p)
{
    p->stop = 1;
    pthread_barrier_wait(&p->start);
    for (int i = 0; i < p->n; i++)
        pthread_join(p->workers[i].thread, NULL);
    pthread_barrier_destroy(&p->start);
    pthread_barrier_destroy(&p->done);
    free(p->workers);
    free(p->cut);
}

/* The staging source: before each repetition the GPU rewrites it, as a download does. */
typedef struct Refill {
    Ctx *c;
    const Queue *q;
    VkCommandBuffer cb;
    const Buf *staging;
} Refill;

static Stats host_series(Ctx *c, Pool *p, int method, const uint8_t *src, uint8_t *dst, size_t bytes,
                         const Refill *refill)
{
    int n = WARMUPS + c->host_reps;
    double *t = xcalloc(n, sizeof(*t));
    size_t rows = bytes / ROW_BYTES;
    for (int i = 0; i <= p->n; i++)
        p->cut[i] = i == p->n ? bytes : rows * i / p->n * ROW_BYTES;
    p->method = method;
    p->src = src;
    p->dst = dst;
    for (int i = 0; i < n; i++) {
        if (refill) {
            submit_wait(c, refill->q, refill->cb);
            buf_invalidate(c, refill->staging);
        }
        if (c->cold) {
            evict(src, bytes);
            evict(dst, bytes);
        }
        double t0 = now();
        pthread_barrier_wait(&p->start);
        pthread_barrier_wait(&p->done);
        t[i] = now() - t0;
    }
    if (memcmp(dst, src, bytes < 64 ? bytes : 64) || memcmp(dst + bytes / 2, src + bytes / 2, (bytes + 1) / 2))
        die("the host copy (%s, %d threads, %zu bytes) does not match its source", method_names[method], p->n, bytes);
    Stats s = stats_of(t + WARMUPS, c->host_reps);
    free(t);
    return s;
}

/* ------------------------------------------------------------------ the measurements */
static void check_pattern(const Buf *b, const char *what)
{
    uint64_t at[3] = { 0, b->size / 2, b->size - 1 };
    for (int i = 0; i < 3; i++)
        if (b->map[at[i]] != 0xa5)
            die("%s: byte %" PRIu64 " of the host buffer is 0x%02x, not the device buffer's 0xa5", what, at[i],
                b->map[at[i]]);
}

static void measure_size(Ctx *c, uint64_t size, Pool *pools, int nb_pools)
{
    Buf dev, host[NB_CLASSES];
    const VkBufferUsageFlags usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;

    set_stage("allocating a device buffer of %" PRIu64 " bytes", size);
    buf_create(c, &dev, size, c->device_type, usage);
    submit_once(c, c->compute, rec_fill, &dev);
    for (int k = 0; k < NB_CLASSES; k++) {
        if (c->class_type[k] < 0)
            continue;
        set_stage("allocating a %s buffer of %" PRIu64 " bytes", class_names[k], size);
        buf_create(c, &host[k], size, c->class_type[k], usage);
        for (int qi = 0; qi < c->nb_queues; qi++) {
            const Queue *q = &c->queues[qi];
            Result r = { .bytes = size, .cls = k, .type = c->class_type[k], .queue = q };
            CopyArgs d2h = { dev.buf, host[k].buf, size, 1 }, h2d = { host[k].buf, dev.buf, size, 0 };

            set_stage("copying %" PRIu64 " bytes to %s memory on the %s queue", size, class_names[k], q->role);
            memset(host[k].map, 0, size);
            buf_flush(c, &host[k]);
            run_series(c, q, rec_copy, &d2h, &host[k], 1, &r.wall, &r.gpu);
            check_pattern(&host[k], stage);
            r.what = "d2h";
            add_result(r);

            set_stage("copying %" PRIu64 " bytes from %s memory on the %s queue", size, class_names[k], q->role);
            memset(host[k].map, 0xa5, size);
            run_series(c, q, rec_copy, &h2d, &host[k], 0, &r.wall, &r.gpu);
            r.what = "h2d";
            add_result(r);
        }
    }

    /* host copies */
    uint8_t *dst = host_alloc(size, 0x11), *ref = host_alloc(size, 0x5a);
    const Buf *staging = c->staging_class >= 0 ? &host[c->staging_class] : NULL;
    Refill refill = { c, c->compute, VK_NULL_HANDLE, staging };
    CopyArgs fill = { dev.buf, staging ? staging->buf : VK_NULL_HANDLE, size, 1 };
    if (staging) {
        alloc_cbs(c, c->compute, &refill.cb, 1);
        begin_cb(refill.cb, 0);
        rec_copy(refill.cb, &fill);
        VK(vk.vkEndCommandBuffer(refill.cb));
    }
    for (int t = 0; t < nb_pools; t++) {
        for (int src = 0; src < 2; src++) {
            if (!src && !staging)
                continue;
            for (int m = 0; m < NB_METHODS; m++) {
                if (m == M_STREAM && !HAVE_STREAM)
                    continue;
                set_stage("copying %" PRIu64 " bytes on the host from %s memory, %s, %d threads", size,
                          src ? "malloc'd" : "staging", method_names[m], pools[t].n);
                HostResult hr = { .bytes = size, .source = src ? "malloc" : "staging", .method = m,
                                  .threads = pools[t].n };
                hr.s = host_series(c, &pools[t], m, src ? ref : staging->map, dst, size, src ? NULL : &refill);
                add_host_result(hr);
            }
        }
    }
    if (staging)
        vk.vkFreeCommandBuffers(c->dev, c->compute->pool, 1, &refill.cb);
    free(dst);
    free(ref);
    for (int k = 0; k < NB_CLASSES; k++)
        if (c->class_type[k] >= 0)
            buf_free(c, &host[k]);
    buf_free(c, &dev);
}

static VkImageUsageFlags image_usage(Ctx *c, uint32_t w, uint32_t h)
{
    /* FFmpeg's frames are also sampled and storage images; transfer alone where that fails */
    const VkImageUsageFlags tries[2] = {
        VK_IMAGE_USAGE_TRANSFER_SRC_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT | VK_IMAGE_USAGE_SAMPLED_BIT |
            VK_IMAGE_USAGE_STORAGE_BIT,
        VK_IMAGE_USAGE_TRANSFER_SRC_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT,
    };
    for (int i = 0; i < 2; i++) {
        VkImageFormatProperties ifp;
        VkResult r = vk.vkGetPhysicalDeviceImageFormatProperties(c->pd, VK_FORMAT_R16_UNORM, VK_IMAGE_TYPE_2D,
                                                                 VK_IMAGE_TILING_OPTIMAL, tries[i], 0, &ifp);
        if (r == VK_ERROR_FORMAT_NOT_SUPPORTED)
            continue;
        if (r != VK_SUCCESS)
            die("vkGetPhysicalDeviceImageFormatProperties returned %s (%d)", vk_result_name(r), (int)r);
        if (ifp.maxExtent.width < w || ifp.maxExtent.height < h)
            die("a %ux%u R16_UNORM image is larger than the device's %ux%u", w, h, ifp.maxExtent.width,
                ifp.maxExtent.height);
        return tries[i];
    }
    die("R16_UNORM optimal-tiling images cannot be copied on this device");
    return 0;
}

static VkDeviceSize align_up(VkDeviceSize v, VkDeviceSize a)
{
    return a > 1 ? (v + a - 1) / a * a : v;
}

static void frame_create(Ctx *c, Frame *f, uint32_t w, uint32_t h)
{
    VkDeviceSize align = c->props.limits.optimalBufferCopyOffsetAlignment;
    memset(f, 0, sizeof(*f));
    f->w = w;
    f->h = h;
    f->usage = image_usage(c, w, h);
    if (align < 16)
        align = 16;
    for (int p = 0; p < NB_PLANES; p++) {
        f->ext[p] = (VkExtent3D){ p ? w / 2 : w, h, 1 };
        f->plane_bytes[p] = (VkDeviceSize)f->ext[p].width * h * 2;
        f->offset[p] = p ? align_up(f->offset[p - 1] + f->plane_bytes[p - 1], align) : 0;
        f->bytes += f->plane_bytes[p];
        VkImageCreateInfo ici = {
            .sType = VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO,
            .imageType = VK_IMAGE_TYPE_2D,
            .format = VK_FORMAT_R16_UNORM,
            .extent = f->ext[p],
            .mipLevels = 1,
            .arrayLayers = 1,
            .samples = VK_SAMPLE_COUNT_1_BIT,
            .tiling = VK_IMAGE_TILING_OPTIMAL,
            .usage = f->usage,
            .sharingMode = c->nb_families > 1 ? VK_SHARING_MODE_CONCURRENT : VK_SHARING_MODE_EXCLUSIVE,
            .queueFamilyIndexCount = c->nb_families > 1 ? c->nb_families : 0,
            .pQueueFamilyIndices = c->nb_families > 1 ? c->families : NULL,
            .initialLayout = VK_IMAGE_LAYOUT_UNDEFINED,
        };
        VK(vk.vkCreateImage(c->dev, &ici, NULL, &f->img[p]));
        VkMemoryDedicatedRequirements dr = { .sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_REQUIREMENTS };
        VkMemoryRequirements2 req = { .sType = VK_STRUCTURE_TYPE_MEMORY_REQUIREMENTS_2, .pNext = &dr };
        VkImageMemoryRequirementsInfo2 ri = { .sType = VK_STRUCTURE_TYPE_IMAGE_MEMORY_REQUIREMENTS_INFO_2,
                                              .image = f->img[p] };
        vk.vkGetImageMemoryRequirements2(c->dev, &ri, &req);
        int type = find_type(c, req.memoryRequirements.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0,
                             VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
        if (type < 0)
            die("no DEVICE_LOCAL memory type for a %ux%u R16_UNORM image", f->ext[p].width, h);
        VkMemoryDedicatedAllocateInfo dai = { .sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO,
                                              .image = f->img[p] };
        f->dedicated = dr.prefersDedicatedAllocation || dr.requiresDedicatedAllocation;
        VkMemoryAllocateInfo mai = {
            .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
            .pNext = f->dedicated ? &dai : NULL,
            .allocationSize = req.memoryRequirements.size,
            .memoryTypeIndex = type,
        };
        VK(vk.vkAllocateMemory(c->dev, &mai, NULL, &f->mem[p]));
        VK(vk.vkBindImageMemory(c->dev, f->img[p], f->mem[p], 0));
    }
    f->buf_size = f->offset[NB_PLANES - 1] + f->plane_bytes[NB_PLANES - 1];
}

static void frame_free(Ctx *c, Frame *f)
{
    for (int p = 0; p < NB_PLANES; p++) {
        vk.vkDestroyImage(c->dev, f->img[p], NULL);
        vk.vkFreeMemory(c->dev, f->mem[p], NULL);
    }
}

/* The last sample of each plane in host, a copy of the frame's images cleared by
 * rec_clear_frame: 16384 (give or take the UNORM rounding), or the copy went wrong. */
static void check_cleared_frame(const Frame *f, const Buf *host, const char *from)
{
    for (int p = 0; p < NB_PLANES; p++) {
        uint16_t v;
        memcpy(&v, host->map + f->offset[p] + f->plane_bytes[p] - 2, 2);
        if (v < 16383 || v > 16385)
            die("plane %d came back%s as %u, not the 16384 it was cleared to", p, from, v);
    }
}

/* The frame's images copied into a DEVICE_LOCAL buffer on each queue; the copy is then read
 * back once through a HOST_CACHED buffer to check it. */
static void measure_frame_d2d(Ctx *c, Frame *f)
{
    Buf dev, host;
    set_stage("allocating a DEVICE_LOCAL buffer of %" PRIu64 " bytes", (uint64_t)f->buf_size);
    buf_create(c, &dev, f->buf_size, c->device_type,
               VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT);
    int cls = c->staging_class;
    for (int k = 0; cls < 0 && k < NB_CLASSES; k++)
        if (c->class_type[k] >= 0)
            cls = k;
    buf_create(c, &host, f->buf_size, c->class_type[cls], VK_BUFFER_USAGE_TRANSFER_DST_BIT);
    f->dst = dev.buf;
    for (int qi = 0; qi < c->nb_queues; qi++) {
        const Queue *q = &c->queues[qi];
        Result r = { .what = "image_d2d", .bytes = f->bytes, .frame_w = f->w, .frame_h = f->h, .usage = f->usage,
                     .dedicated = f->dedicated, .cls = -1, .type = c->device_type, .queue = q };
        CopyArgs back = { dev.buf, host.buf, f->buf_size, 1 };
        set_stage("copying a %ux%u frame's images to device memory on the %s queue", f->w, f->h, q->role);
        submit_once(c, c->compute, rec_fill, &dev);
        run_series(c, q, rec_copy_frame, f, NULL, 1, &r.wall, &r.gpu);
        memset(host.map, 0, f->buf_size);
        buf_flush(c, &host);
        submit_once(c, c->compute, rec_copy, &back);
        buf_invalidate(c, &host);
        check_cleared_frame(f, &host, " from device memory");
        add_result(r);
    }
    buf_free(c, &host);
    buf_free(c, &dev);
}

static void measure_frame(Ctx *c, uint32_t w, uint32_t h)
{
    Frame f;
    set_stage("creating the images of a %ux%u frame", w, h);
    frame_create(c, &f, w, h);
    submit_once(c, c->compute, rec_clear_frame, &f);
    for (int k = 0; k < NB_CLASSES; k++) {
        Buf host;
        if (c->class_type[k] < 0 || k == COHERENT)
            continue;
        set_stage("allocating a %s buffer of %" PRIu64 " bytes", class_names[k], (uint64_t)f.buf_size);
        buf_create(c, &host, f.buf_size, c->class_type[k], VK_BUFFER_USAGE_TRANSFER_DST_BIT);
        f.dst = host.buf;
        for (int qi = 0; qi < c->nb_queues; qi++) {
            const Queue *q = &c->queues[qi];
            Result r = { .what = "image_d2h", .bytes = f.bytes, .frame_w = w, .frame_h = h, .usage = f.usage,
                         .dedicated = f.dedicated, .cls = k, .type = c->class_type[k], .queue = q };
            set_stage("copying a %ux%u frame's images to %s memory on the %s queue", w, h, class_names[k], q->role);
            memset(host.map, 0, f.buf_size);
            buf_flush(c, &host);
            run_series(c, q, rec_copy_frame, &f, &host, 1, &r.wall, &r.gpu);
            check_cleared_frame(&f, &host, "");
            add_result(r);
        }
        buf_free(c, &host);
    }
    measure_frame_d2d(c, &f);
    frame_free(c, &f);
}

/* ------------------------------------------------------------------ set-up */
static void load_vulkan(void)
{
    if (!(vk.lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL)))
        die("dlopen(libvulkan.so.1): %s", dlerror());
    if (!(vk.gipa = (PFN_vkGetInstanceProcAddr)dlsym(vk.lib, "vkGetInstanceProcAddr")))
        die("libvulkan.so.1 has no vkGetInstanceProcAddr");
}

static uint32_t pick_family(const Ctx *c, uint32_t want, uint32_t avoid)
{
    for (uint32_t f = 0; f < c->nb_fams; f++)
        if ((c->fams[f].queueFlags & want) == want && !(c->fams[f].queueFlags & avoid) && c->fams[f].queueCount)
            return f;
    return UINT32_MAX;
}

static void setup(Ctx *c, int device_index)
{
    uint32_t inst_version = VK_API_VERSION_1_0, nb_pd = 0;
    VkPhysicalDevice *pds;

    set_stage("creating the Vulkan instance");
    load_vulkan();
    PFN_vkEnumerateInstanceVersion eiv = (PFN_vkEnumerateInstanceVersion)vk.gipa(NULL, "vkEnumerateInstanceVersion");
    PFN_vkCreateInstance create_instance = (PFN_vkCreateInstance)vk.gipa(NULL, "vkCreateInstance");
    if (!create_instance)
        die("the loader has no vkCreateInstance");
    if (eiv)
        VK(eiv(&inst_version));
    if (inst_version < VK_API_VERSION_1_1)
        die("the Vulkan loader is 1.0: bwprobe needs 1.1");
    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "bwprobe",
        .apiVersion = inst_version >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : inst_version,
    };
    VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app };
    VK(create_instance(&ici, NULL, &c->inst));
#define LOAD_INSTANCE(n)                                                                    \
    if (!(vk.n = (PFN_##n)vk.gipa(c->inst, #n)))                                           \
        die("the loader has no " #n);
    INSTANCE_FUNCS(LOAD_INSTANCE)
#undef LOAD_INSTANCE

    set_stage("choosing device %d", device_index);
    VK(vk.vkEnumeratePhysicalDevices(c->inst, &nb_pd, NULL));
    if (device_index < 0 || (uint32_t)device_index >= nb_pd)
        die("no Vulkan device %d: %u found", device_index, nb_pd);
    pds = xcalloc(nb_pd, sizeof(*pds));
    VkResult res = vk.vkEnumeratePhysicalDevices(c->inst, &nb_pd, pds);
    if (res != VK_SUCCESS && res != VK_INCOMPLETE)
        die("vkEnumeratePhysicalDevices returned %s (%d)", vk_result_name(res), (int)res);
    if ((uint32_t)device_index >= nb_pd)
        die("no Vulkan device %d: %u found", device_index, nb_pd);
    c->pd = pds[device_index];
    free(pds);
    vk.vkGetPhysicalDeviceProperties(c->pd, &c->props);
    c->api = c->props.apiVersion < app.apiVersion ? c->props.apiVersion : app.apiVersion;
    if (c->api < VK_API_VERSION_1_1)
        die("%s is a Vulkan 1.0 device: bwprobe needs 1.1", c->props.deviceName);
    c->driver.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
    c->has_driver_props = c->api >= VK_API_VERSION_1_2;
    VkPhysicalDeviceProperties2 p2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                       .pNext = c->has_driver_props ? &c->driver : NULL };
    vk.vkGetPhysicalDeviceProperties2(c->pd, &p2);
    vk.vkGetPhysicalDeviceMemoryProperties(c->pd, &c->mem);
    c->nb_fams = 64;
    vk.vkGetPhysicalDeviceQueueFamilyProperties(c->pd, &c->nb_fams, c->fams);

    /* the compute family FFmpeg picks (without graphics where there is one) and a dedicated
     * transfer family: no graphics or compute, and no video or optical flow if it can be */
    uint32_t compute = pick_family(c, VK_QUEUE_COMPUTE_BIT, VK_QUEUE_GRAPHICS_BIT);
    if (compute == UINT32_MAX)
        compute = pick_family(c, VK_QUEUE_COMPUTE_BIT, 0);
    if (compute == UINT32_MAX)
        die("%s has no compute queue family", c->props.deviceName);
    uint32_t transfer = pick_family(c, VK_QUEUE_TRANSFER_BIT, VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT |
                                    VK_QUEUE_VIDEO_DECODE_BIT_KHR | VK_QUEUE_VIDEO_ENCODE_BIT_KHR |
                                    VK_QUEUE_OPTICAL_FLOW_BIT_NV);
    if (transfer == UINT32_MAX)
        transfer = pick_family(c, VK_QUEUE_TRANSFER_BIT, VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT);
    if (transfer != UINT32_MAX)
        c->queues[c->nb_queues++] = (Queue){ .role = "transfer", .family = transfer };
    c->queues[c->nb_queues++] = (Queue){ .role = "compute", .family = compute };
    c->compute = &c->queues[c->nb_queues - 1];

    set_stage("creating the device");
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci[2];
    for (int i = 0; i < c->nb_queues; i++) {
        c->queues[i].ts_bits = c->fams[c->queues[i].family].timestampValidBits;
        c->families[c->nb_families++] = c->queues[i].family;
        qci[i] = (VkDeviceQueueCreateInfo){ .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                            .queueFamilyIndex = c->queues[i].family, .queueCount = 1,
                                            .pQueuePriorities = &prio };
    }
    VkDeviceCreateInfo dci = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                               .queueCreateInfoCount = c->nb_queues, .pQueueCreateInfos = qci };
    VK(vk.vkCreateDevice(c->pd, &dci, NULL, &c->dev));
#define LOAD_DEVICE(n)                                                                      \
    if (!(vk.n = (PFN_##n)vk.vkGetDeviceProcAddr(c->dev, #n)))                             \
        die("the device has no " #n);
    DEVICE_FUNCS(LOAD_DEVICE)
#undef LOAD_DEVICE
    for (int i = 0; i < c->nb_queues; i++) {
        VkCommandPoolCreateInfo pci = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                        .queueFamilyIndex = c->queues[i].family };
        vk.vkGetDeviceQueue(c->dev, c->queues[i].family, 0, &c->queues[i].queue);
        VK(vk.vkCreateCommandPool(c->dev, &pci, NULL, &c->queues[i].pool));
    }
    VkFenceCreateInfo fci = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
    VK(vk.vkCreateFence(c->dev, &fci, NULL, &c->fence));

    /* the memory types a transfer buffer may use */
    VkBuffer b;
    VkMemoryRequirements req;
    VkBufferCreateInfo bci = { .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = 4096,
                               .usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                               .sharingMode = VK_SHARING_MODE_EXCLUSIVE };
    VK(vk.vkCreateBuffer(c->dev, &bci, NULL, &b));
    vk.vkGetBufferMemoryRequirements(c->dev, b, &req);
    vk.vkDestroyBuffer(c->dev, b, NULL);
    for (int k = 0; k < NB_CLASSES; k++)
        c->class_type[k] = class_type(c, req.memoryTypeBits, k);
    c->device_type = find_type(c, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0,
                               VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
    if (c->device_type < 0)
        die("no DEVICE_LOCAL memory type for a transfer buffer");
    c->staging_class = c->class_type[CACHED_COHERENT] >= 0 ? CACHED_COHERENT
                     : c->class_type[CACHED] >= 0 ? CACHED : -1;
}

static void teardown(Ctx *c)
{
    set_stage("tearing down");
    VK(vk.vkDeviceWaitIdle(c->dev));
    vk.vkDestroyFence(c->dev, c->fence, NULL);
    for (int i = 0; i < c->nb_queues; i++)
        vk.vkDestroyCommandPool(c->dev, c->queues[i].pool, NULL);
    vk.vkDestroyDevice(c->dev, NULL);
    vk.vkDestroyInstance(c->inst, NULL);
    dlclose(vk.lib);
}

/* ------------------------------------------------------------------ the report */
static const char *device_type_name(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "INTEGRATED_GPU";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "DISCRETE_GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "VIRTUAL_GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "OTHER";
    }
}

/* NVIDIA packs its driver version 10.8.8.6 bits; the others as Vulkan versions */
static void driver_version_str(char *buf, size_t size, const VkPhysicalDeviceProperties *p)
{
    uint32_t v = p->driverVersion;
    if (p->vendorID == 0x10de)
        snprintf(buf, size, "%u.%u.%u", v >> 22, (v >> 14) & 0xff, (v >> 6) & 0xff);
    else
        snprintf(buf, size, "%u.%u.%u", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), VK_API_VERSION_PATCH(v));
}

static const char *memory_name(const Result *r)
{
    return r->cls < 0 ? "device" : class_names[r->cls];
}

static void print_stats_json(FILE *f, const char *key, Stats s, uint64_t bytes)
{
    fprintf(f, "\"%s\": ", key);
    if (!s.ok)
        fputs("null", f);
    else
        fprintf(f, "{\"median_s\": %.9f, \"min_s\": %.9f, \"median_gbps\": %.3f, \"best_gbps\": %.3f}", s.median,
                s.min, gbps(bytes, s.median), gbps(bytes, s.min));
}

static void print_json(FILE *f, const Ctx *c, int device_index, const int *threads, int nb_threads)
{
    char buf[256];
    const VkPhysicalDeviceLimits *l = &c->props.limits;
    fprintf(f, "{\"tool\": \"bwprobe\", \"device\": {\"index\": %d, \"name\": ", device_index);
    json_str(f, c->props.deviceName);
    driver_version_str(buf, sizeof(buf), &c->props);
    fprintf(f, ", \"vendor_id\": %u, \"device_id\": %u, \"device_type\": \"%s\", \"api_version\": \"%u.%u.%u\", "
            "\"driver_version\": %u, \"driver_version_str\": \"%s\", \"driver_name\": ",
            c->props.vendorID, c->props.deviceID, device_type_name(c->props.deviceType),
            VK_API_VERSION_MAJOR(c->props.apiVersion), VK_API_VERSION_MINOR(c->props.apiVersion),
            VK_API_VERSION_PATCH(c->props.apiVersion), c->props.driverVersion, buf);
    if (c->has_driver_props) {
        json_str(f, c->driver.driverName);
        fputs(", \"driver_info\": ", f);
        json_str(f, c->driver.driverInfo);
    } else
        fputs("null, \"driver_info\": null", f);
    fprintf(f, ", \"timestamp_period_ns\": %g, \"optimal_buffer_copy_offset_alignment\": %" PRIu64
            ", \"optimal_buffer_copy_row_pitch_alignment\": %" PRIu64 ", \"non_coherent_atom_size\": %" PRIu64 "},\n",
            l->timestampPeriod, (uint64_t)l->optimalBufferCopyOffsetAlignment,
            (uint64_t)l->optimalBufferCopyRowPitchAlignment, (uint64_t)l->nonCoherentAtomSize);

    fputs(" \"memory_heaps\": [", f);
    for (uint32_t i = 0; i < c->mem.memoryHeapCount; i++) {
        fprintf(f, "%s{\"index\": %u, \"size\": %" PRIu64 ", \"flags\": %u, \"flag_names\": ", i ? ", " : "", i,
                (uint64_t)c->mem.memoryHeaps[i].size, c->mem.memoryHeaps[i].flags);
        json_flags(f, c->mem.memoryHeaps[i].flags, heap_flags);
        fputc('}', f);
    }
    fputs("],\n \"memory_types\": [", f);
    for (uint32_t i = 0; i < c->mem.memoryTypeCount; i++) {
        fprintf(f, "%s{\"index\": %u, \"heap\": %u, \"flags\": %u, \"flag_names\": ", i ? ", " : "", i,
                c->mem.memoryTypes[i].heapIndex, c->mem.memoryTypes[i].propertyFlags);
        json_flags(f, c->mem.memoryTypes[i].propertyFlags, mem_flags);
        fputc('}', f);
    }
    fputs("],\n \"queue_families\": [", f);
    for (uint32_t i = 0; i < c->nb_fams; i++) {
        const VkExtent3D *g = &c->fams[i].minImageTransferGranularity;
        fprintf(f, "%s{\"index\": %u, \"flags\": %u, \"flag_names\": ", i ? ", " : "", i, c->fams[i].queueFlags);
        json_flags(f, c->fams[i].queueFlags, queue_flags);
        fprintf(f, ", \"count\": %u, \"timestamp_valid_bits\": %u, \"min_image_transfer_granularity\": [%u, %u, %u]}",
                c->fams[i].queueCount, c->fams[i].timestampValidBits, g->width, g->height, g->depth);
    }
    fputs("],\n \"queues\": [", f);
    for (int i = 0; i < c->nb_queues; i++)
        fprintf(f, "%s{\"role\": \"%s\", \"family\": %u, \"timestamps\": %s}", i ? ", " : "", c->queues[i].role,
                c->queues[i].family, c->queues[i].ts_bits ? "true" : "false");
    fputs("],\n \"memory_classes\": {", f);
    for (int k = 0; k < NB_CLASSES; k++) {
        fprintf(f, "%s\"%s\": ", k ? ", " : "", class_names[k]);
        if (c->class_type[k] < 0)
            fputs("null", f);
        else
            fprintf(f, "%d", c->class_type[k]);
    }
    fprintf(f, "}, \"device_local_type\": %d, \"staging_class\": ", c->device_type);
    if (c->staging_class < 0)
        fputs("null", f);
    else
        fprintf(f, "\"%s\"", class_names[c->staging_class]);
    fprintf(f, ",\n \"reps\": %d, \"host_reps\": %d, \"cold\": %s, \"warmups\": %d, \"row_bytes\": %d, "
            "\"nproc\": %ld, \"threads\": [", c->reps, c->host_reps, c->cold ? "true" : "false", WARMUPS,
            ROW_BYTES, sysconf(_SC_NPROCESSORS_ONLN));
    for (int t = 0; t < nb_threads; t++)
        fprintf(f, "%s%d", t ? ", " : "", threads[t]);
    fprintf(f, "], \"stream_stores\": %s, \"cold_caches\": %s,\n", HAVE_STREAM ? "true" : "false",
            HAVE_STREAM ? "true" : "false");

    for (int pass = 0; pass < 2; pass++) {
        int n = 0;
        fprintf(f, " \"%s\": [", pass ? "image_copies" : "buffer_copies");
        for (int i = 0; i < nb_results; i++) {
            const Result *r = &results[i];
            if (pass != !strncmp(r->what, "image_", 6))
                continue;
            fprintf(f, "%s\n  {\"direction\": \"%s\", \"bytes\": %" PRIu64 ", ", n++ ? "," : "",
                    pass ? r->what + 6 : r->what, r->bytes);
            if (pass)
                fprintf(f, "\"frame\": \"%ux%u\", \"planes\": [[%u, %u], [%u, %u], [%u, %u]], \"image_usage\": \"%s\", "
                        "\"dedicated\": %s, ", r->frame_w, r->frame_h, r->frame_w, r->frame_h, r->frame_w / 2,
                        r->frame_h, r->frame_w / 2, r->frame_h,
                        flag_str(buf, sizeof(buf), r->usage, usage_flags), r->dedicated ? "true" : "false");
            fprintf(f, "\"memory\": \"%s\", \"memory_type\": %u, \"queue\": \"%s\", \"family\": %u, ",
                    memory_name(r), r->type, r->queue->role, r->queue->family);
            print_stats_json(f, "wall", r->wall, r->bytes);
            fputs(", ", f);
            print_stats_json(f, "gpu", r->gpu, r->bytes);
            fputc('}', f);
        }
        fputs("],\n", f);
    }
    fputs(" \"host_copies\": [", f);
    for (int i = 0; i < nb_host_results; i++) {
        const HostResult *h = &host_results[i];
        fprintf(f, "%s\n  {\"bytes\": %" PRIu64 ", \"source\": \"%s\", \"method\": \"%s\", \"threads\": %d, ",
                i ? "," : "", h->bytes, h->source, method_names[h->method], h->threads);
        print_stats_json(f, "wall", h->s, h->bytes);
        fputc('}', f);
    }
    fputs("]}\n", f);
}

static const char *gb_cell(char *buf, size_t size, Stats s, uint64_t bytes)
{
    if (!s.ok)
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, "%.2f (%.2f)", gbps(bytes, s.median), gbps(bytes, s.min));
    return buf;
}

static void print_table(FILE *f, const Ctx *c, int device_index, const int *threads, int nb_threads)
{
    char buf[256], a[64], b[64];
    const VkPhysicalDeviceLimits *l = &c->props.limits;
    driver_version_str(buf, sizeof(buf), &c->props);
    fprintf(f, "bwprobe: device %d: %s (%s), Vulkan %u.%u.%u, driver %s", device_index, c->props.deviceName,
            device_type_name(c->props.deviceType), VK_API_VERSION_MAJOR(c->props.apiVersion),
            VK_API_VERSION_MINOR(c->props.apiVersion), VK_API_VERSION_PATCH(c->props.apiVersion), buf);
    if (c->has_driver_props)
        fprintf(f, " (%s %s)", c->driver.driverName, c->driver.driverInfo);
    fprintf(f, "\n  timestampPeriod %g ns, optimalBufferCopyOffsetAlignment %" PRIu64
            ", optimalBufferCopyRowPitchAlignment %" PRIu64 ", nonCoherentAtomSize %" PRIu64 "\n",
            l->timestampPeriod, (uint64_t)l->optimalBufferCopyOffsetAlignment,
            (uint64_t)l->optimalBufferCopyRowPitchAlignment, (uint64_t)l->nonCoherentAtomSize);
    for (uint32_t i = 0; i < c->mem.memoryHeapCount; i++)
        fprintf(f, "  heap %u: %.2f GiB, %s\n", i, c->mem.memoryHeaps[i].size / (double)(1ull << 30),
                flag_str(buf, sizeof(buf), c->mem.memoryHeaps[i].flags, heap_flags));
    for (uint32_t i = 0; i < c->mem.memoryTypeCount; i++) {
        fprintf(f, "  type %u: heap %u, %s", i, c->mem.memoryTypes[i].heapIndex,
                flag_str(buf, sizeof(buf), c->mem.memoryTypes[i].propertyFlags, mem_flags));
        for (int k = 0; k < NB_CLASSES; k++)
            if (c->class_type[k] == (int)i)
                fprintf(f, "  [%s]", class_names[k]);
        if (c->device_type == (int)i)
            fputs("  [device buffers]", f);
        fputc('\n', f);
    }
    for (uint32_t i = 0; i < c->nb_fams; i++) {
        const VkExtent3D *g = &c->fams[i].minImageTransferGranularity;
        fprintf(f, "  family %u: %u queue(s), %s, timestampValidBits %u, minImageTransferGranularity %ux%ux%u", i,
                c->fams[i].queueCount, flag_str(buf, sizeof(buf), c->fams[i].queueFlags, queue_flags),
                c->fams[i].timestampValidBits, g->width, g->height, g->depth);
        for (int q = 0; q < c->nb_queues; q++)
            if (c->queues[q].family == i)
                fprintf(f, "  [%s queue]", c->queues[q].role);
        fputc('\n', f);
    }
    if (c->nb_queues == 1)
        fputs("  no dedicated transfer family\n", f);
    fprintf(f, "  %ld CPUs online; GB/s = 1e9 bytes/s, median (best) of %d (host copies %d%s) after %d "
            "warm-ups\n", sysconf(_SC_NPROCESSORS_ONLN), c->reps, c->host_reps,
            c->cold ? ", caches flushed before each" : "", WARMUPS);

    for (int pass = 0; pass < 2; pass++) {
        int header = 0;
        for (int i = 0; i < nb_results; i++) {
            const Result *r = &results[i];
            if (pass != !strncmp(r->what, "image_", 6))
                continue;
            if (!header++) {
                if (pass)
                    fprintf(f, "\nimage copies: vkCmdCopyImageToBuffer of R16_UNORM optimal-tiling images WxH, "
                            "W/2xH, W/2xH (usage %s%s)\n  %-10s %-11s %-4s", flag_str(buf, sizeof(buf), r->usage,
                            usage_flags), r->dedicated ? ", dedicated memory" : "", "frame", "bytes", "dir");
                else
                    fprintf(f, "\nbuffer copies: vkCmdCopyBuffer between a DEVICE_LOCAL buffer and host-visible "
                            "memory\n  %-11s %-4s", "bytes", "dir");
                fprintf(f, " %-16s %-4s %-9s %-18s %s\n", "memory", "type", "queue", "wall GB/s", "gpu GB/s");
            }
            if (pass) {
                snprintf(buf, sizeof(buf), "%ux%u", r->frame_w, r->frame_h);
                fprintf(f, "  %-10s %-11" PRIu64 " %-4s", buf, r->bytes, r->what + 6);
            } else
                fprintf(f, "  %-11" PRIu64 " %-4s", r->bytes, r->what);
            fprintf(f, " %-16s %-4u %-9s %-18s %s\n", memory_name(r), r->type, r->queue->role,
                    gb_cell(a, sizeof(a), r->wall, r->bytes), gb_cell(b, sizeof(b), r->gpu, r->bytes));
        }
    }

    if (!nb_host_results)
        return;
    fprintf(f, "\nhost copies into malloc'd memory, GB/s by threads (rows: memcpy of %d-byte rows; whole: one memcpy "
            "per thread; stream: SSE2 non-temporal stores)%s\n  %-11s %-8s %-7s", ROW_BYTES,
            HAVE_STREAM && c->cold ? "; caches flushed before each" : "", "bytes", "source", "method");
    for (int t = 0; t < nb_threads; t++) {
        snprintf(buf, sizeof(buf), "%d thread%s", threads[t], threads[t] > 1 ? "s" : "");
        fprintf(f, t + 1 < nb_threads ? " %-15s" : " %s", buf);
    }
    fputc('\n', f);
    for (int i = 0; i < nb_host_results; i++) {
        const HostResult *h = &host_results[i];
        if (h->threads != threads[0])
            continue;
        fprintf(f, "  %-11" PRIu64 " %-8s %-7s", h->bytes, h->source, method_names[h->method]);
        for (int t = 0; t < nb_threads; t++)
            for (int j = 0; j < nb_host_results; j++) {
                const HostResult *o = &host_results[j];
                if (o->bytes == h->bytes && o->threads == threads[t] && o->method == h->method &&
                    !strcmp(o->source, h->source))
                    fprintf(f, t + 1 < nb_threads ? " %-15s" : " %s", gb_cell(a, sizeof(a), o->s, o->bytes));
            }
        fputc('\n', f);
    }
    if (c->staging_class >= 0)
        fprintf(f, "  (staging: the %s buffer, memory type %d, rewritten by the GPU before each repetition)\n",
                class_names[c->staging_class], c->class_type[c->staging_class]);
}

/* ------------------------------------------------------------------ arguments */
static void usage(FILE *f)
{
    fputs("usage: bwprobe [--device N] [--sizes BYTES,...] [--frames WxH,...|none] [--reps N]\n"
          "               [--host-reps N] [--cold] [--progress] [--threads N,...] [--json]\n"
          "  --device N       Vulkan device index (default 0)\n"
          "  --sizes LIST     buffer and host copy sizes in bytes (default 33177600,132710400: a\n"
          "                   3840x2160 and a 7680x4320 yuv422p10 frame)\n"
          "  --frames LIST    frames of the image copies, W even (default 3840x2160,7680x4320); none: no\n"
          "                   image copies\n"
          "  --reps N         repetitions of each GPU copy, after 2 warm-ups (default 20)\n"
          "  --host-reps N    repetitions of each host copy, after 2 warm-ups (default 5)\n"
          "  --cold           flush source and destination from the CPU caches before each host copy\n"
          "  --progress       each stage on stderr as it starts, with the time since the first\n"
          "  --threads LIST   thread counts of the host copies (default 1,2,4,8)\n"
          "  --json           JSON on stdout, the table on stderr\n", f);
}

static void usage_error(const char *fmt, ...)
{
    va_list vl;
    fputs("bwprobe: ", stderr);
    va_start(vl, fmt);
    vfprintf(stderr, fmt, vl);
    va_end(vl);
    fputs(" (see --help)\n", stderr);
    exit(2);
}

/* a whole number from lo to hi, digits only */
static uint64_t parse_uint(const char *opt, const char *s, uint64_t lo, uint64_t hi)
{
    char *end;
    unsigned long long v;
    if (!*s || strspn(s, "0123456789") != strlen(s))
        usage_error("%s: '%s' is not a whole number", opt, s);
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || v < lo || v > hi)
        usage_error("%s: %s is out of range (%" PRIu64 " to %" PRIu64 ")", opt, s, lo, hi);
    return v;
}

/* a comma-separated list of items, each handed to item() */
static int parse_list(const char *opt, const char *s, void (*item)(const char *opt, const char *s, void *out, int i),
                      void *out)
{
    char *copy = strdup(s), *save = NULL;
    int n = 0;
    if (!copy)
        die("out of memory");
    if (!*s || s[0] == ',' || s[strlen(s) - 1] == ',' || strstr(s, ",,"))
        usage_error("%s: '%s' is not a comma-separated list", opt, s);
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == MAX_LIST)
            usage_error("%s: at most %d items", opt, MAX_LIST);
        item(opt, t, out, n++);
    }
    free(copy);
    return n;
}

static void size_item(const char *opt, const char *s, void *out, int i)
{
    ((uint64_t *)out)[i] = parse_uint(opt, s, 1, 1ull << 40);
}

static void thread_item(const char *opt, const char *s, void *out, int i)
{
    ((int *)out)[i] = (int)parse_uint(opt, s, 1, 256);
}

static void frame_item(const char *opt, const char *s, void *out, int i)
{
    uint32_t *wh = (uint32_t *)out + 2 * i;
    char w[32], *x = strchr(s, 'x');
    if (!x || x == s || (size_t)(x - s) >= sizeof(w))
        usage_error("%s: '%s' is not WxH", opt, s);
    memcpy(w, s, x - s);
    w[x - s] = 0;
    wh[0] = (uint32_t)parse_uint(opt, w, 2, 65536);
    wh[1] = (uint32_t)parse_uint(opt, x + 1, 1, 65536);
    if (wh[0] % 2)
        usage_error("%s: the width of %s is odd (the chroma planes are W/2 wide)", opt, s);
}

int main(int argc, char **argv)
{
    Ctx c = { .reps = 20, .host_reps = 5 };
    int device_index = 0, json = 0, nb_sizes = 2, nb_threads = 4, nb_frames = 2;
    uint64_t sizes[MAX_LIST] = { 33177600, 132710400 };
    int threads[MAX_LIST] = { 1, 2, 4, 8 };
    uint32_t frames[2 * MAX_LIST] = { 3840, 2160, 7680, 4320 };

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json"))
            json = 1;
        else if (!strcmp(a, "--cold"))
            c.cold = 1;
        else if (!strcmp(a, "--progress"))
            progress = 1;
        else if (i + 1 >= argc && (!strcmp(a, "--device") || !strcmp(a, "--sizes") || !strcmp(a, "--frames") ||
                                   !strcmp(a, "--reps") || !strcmp(a, "--threads") ||
                                   !strcmp(a, "--host-reps")))
            usage_error("%s needs a value", a);
        else if (!strcmp(a, "--device"))
            device_index = (int)parse_uint(a, argv[++i], 0, 1023);
        else if (!strcmp(a, "--sizes"))
            nb_sizes = parse_list(a, argv[++i], size_item, sizes);
        else if (!strcmp(a, "--threads"))
            nb_threads = parse_list(a, argv[++i], thread_item, threads);
        else if (!strcmp(a, "--reps"))
            c.reps = (int)parse_uint(a, argv[++i], 1, 100000);
        else if (!strcmp(a, "--host-reps"))
            c.host_reps = (int)parse_uint(a, argv[++i], 1, 100000);
        else if (!strcmp(a, "--frames")) {
            i++;
            nb_frames = !strcmp(argv[i], "none") ? 0 : parse_list("--frames", argv[i], frame_item, frames);
        } else
            usage_error("unknown argument '%s'", a);
    }

    setup(&c, device_index);
    Pool *pools = xcalloc(nb_threads, sizeof(*pools));
    for (int t = 0; t < nb_threads; t++)
        pool_start(&pools[t], threads[t]);
    for (int s = 0; s < nb_sizes; s++)
        measure_size(&c, sizes[s], pools, nb_threads);
    for (int t = 0; t < nb_threads; t++)
        pool_stop(&pools[t]);
    free(pools);
    if (c.staging_class >= 0)
        for (int i = 0; i < nb_frames; i++)
            measure_frame(&c, frames[2 * i], frames[2 * i + 1]);
    else if (nb_frames)
        fputs("bwprobe: no HOST_CACHED memory type: no image copies\n", stderr);

    if (json) {
        print_json(stdout, &c, device_index, threads, nb_threads);
        print_table(stderr, &c, device_index, threads, nb_threads);
    } else
        print_table(stdout, &c, device_index, threads, nb_threads);
    if (fflush(stdout) || ferror(stdout))
        die("writing the report: %s", strerror(errno));
    teardown(&c);
    free(results);
    free(host_results);
    return 0;
}
