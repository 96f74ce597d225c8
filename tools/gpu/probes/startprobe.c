/*
 * startprobe: where the start-up time of a Vulkan hwaccel process goes (issue 20). Two modes,
 * each printing one JSON object on stdout and a readable timeline on stderr; times in seconds
 * from the start of main() (plus exec_to_main_s, from /proc, +-10 ms). Under tools/gpu/probes/vktime.c
 * (its libvulkan.so.1 first on LD_LIBRARY_PATH) the shim's offsets start there too.
 *
 *   startprobe [--device DEV] [--opt KEY=VALUE]... [--threads N] [--frames N] [FILE]
 *       FFmpeg: av_hwdevice_ctx_create("vulkan", DEV, the --opt dictionary, e.g. limit_queues=1)
 *       with an av_log callback at AV_LOG_DEBUG that stamps each line (hwcontext_vulkan's
 *       messages form a timeline of device creation); then, with FILE, the decoder opened
 *       with the hwaccel (frame threads: --threads, default 0 = auto, as ffmpeg), packets sent
 *       until --frames frames (default 1) come out (the first one also waited for until the GPU
 *       has written it: a frame comes out once submitted), the decoder freed; then the device
 *       unref (teardown). FILE is demuxed first (its packets in memory), outside the timed part.
 *   startprobe --raw [--device N] [--repeat N]
 *       No FFmpeg: dlopen("libvulkan.so.1"), vkCreateInstance with no extension, enumerate,
 *       then vkCreateDevice + vkGetDeviceQueue + vkDestroyDevice for: 1 compute queue; every
 *       queue of each family alone; every queue of every family; 1 compute queue plus each
 *       device extension of FFmpeg 7.1.5's or 9.0.2's lists that the device has (with its
 *       feature structure, every supported feature on); 1 compute queue plus the core
 *       features (1.1-1.3) all on; all of it together; 1 compute queue again (warm). The
 *       driver's floor, against which FFmpeg's device creation is compared.
 *
 * Build (tools/gpu/gpu-pack does this, per FFmpeg build):
 *   cc -O2 -o startprobe startprobe.c -I$FF/include -I$VULKAN_HEADERS/include -L$FF/lib \
 *      -lavformat -lavcodec -lavutil -ldl -lpthread -Wl,-rpath,$FF/lib
 */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <vulkan/vulkan.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/dict.h>
#include <libavutil/hwcontext.h>
#include <libavutil/hwcontext_vulkan.h>
#include <libavutil/pixdesc.h>

#include "json_str.h"
#include "read_packets.h"
#include "since_exec.h"

static double t_main;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9 - t_main;
}

/* ------------------------------------------------------------------ marks and log lines */
typedef struct Mark {
    double at;
    int level;                 /* -1: a mark of the probe itself */
    char *text;
} Mark;

#define MAX_MARKS 4000
static Mark marks[MAX_MARKS];
static int nb_marks, marks_dropped;
static pthread_mutex_t mark_lock = PTHREAD_MUTEX_INITIALIZER;

static void add_mark_locked(double at, int level, const char *text)
{
    if (nb_marks >= MAX_MARKS) {
        marks_dropped++;
        return;
    }
    marks[nb_marks++] = (Mark){ at, level, strdup(text) };
}

static void mark(const char *fmt, ...)
{
    char buf[512];
    va_list vl;
    va_start(vl, fmt);
    vsnprintf(buf, sizeof(buf), fmt, vl);
    va_end(vl);
    pthread_mutex_lock(&mark_lock);
    add_mark_locked(now(), -1, buf);
    pthread_mutex_unlock(&mark_lock);
}

/* av_log may deliver a line in pieces: they are joined, stamped with the first one's time. */
static char pending[2048];
static double pending_at;
static int pending_level;

static void log_cb(void *avcl, int level, const char *fmt, va_list vl)
{
    static int print_prefix = 1;
    char line[1024];
    if (level > AV_LOG_DEBUG)
        return;
    pthread_mutex_lock(&mark_lock);
    av_log_format_line2(avcl, level, fmt, vl, line, sizeof(line), &print_prefix);
    if (!pending[0]) {
        pending_at = now();
        pending_level = level;
    }
    strncat(pending, line, sizeof(pending) - strlen(pending) - 1);
    size_t n = strlen(pending);
    if (n && (pending[n - 1] == '\n' || n >= sizeof(pending) - 1)) {
        if (pending[n - 1] == '\n')
            pending[n - 1] = 0;
        add_mark_locked(pending_at, pending_level, pending);
        pending[0] = 0;
    }
    pthread_mutex_unlock(&mark_lock);
}

static void print_marks(FILE *f)
{
    fprintf(f, "\"marks\": [");
    for (int i = 0; i < nb_marks; i++) {
        fprintf(f, "%s\n  {\"at_s\": %.6f, \"level\": %d, \"text\": ", i ? "," : "", marks[i].at, marks[i].level);
        json_str(f, marks[i].text);
        fputc('}', f);
    }
    fprintf(f, "], \"marks_dropped\": %d", marks_dropped);
}

/* ------------------------------------------------------------------ the FFmpeg mode */
/* Waits until the GPU has finished writing a Vulkan frame (its timeline semaphores reach
 * their values): a frame comes out of the decoder as soon as its work is submitted. */
static int wait_frame(const AVFrame *frame)
{
    AVHWFramesContext *fc = (AVHWFramesContext *)frame->hw_frames_ctx->data;
    AVVulkanFramesContext *vkfc = fc->hwctx;
    AVVulkanDeviceContext *dev = fc->device_ctx->hwctx;
    AVVkFrame *f = (AVVkFrame *)frame->data[0];
    PFN_vkGetDeviceProcAddr gdpa = (PFN_vkGetDeviceProcAddr)dev->get_proc_addr(dev->inst, "vkGetDeviceProcAddr");
    PFN_vkWaitSemaphores wait = gdpa ? (PFN_vkWaitSemaphores)gdpa(dev->act_dev, "vkWaitSemaphores") : NULL;
    VkSemaphore sems[AV_NUM_DATA_POINTERS];
    uint64_t values[AV_NUM_DATA_POINTERS];
    uint32_t n = 0;
    VkResult res;
    if (!wait)
        return -1;
    vkfc->lock_frame(fc, f);
    for (; n < AV_NUM_DATA_POINTERS && f->sem[n] != VK_NULL_HANDLE; n++) {
        sems[n] = f->sem[n];
        values[n] = f->sem_value[n];
    }
    vkfc->unlock_frame(fc, f);
    VkSemaphoreWaitInfo info = {
        .sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
        .semaphoreCount = n,
        .pSemaphores = sems,
        .pValues = values,
    };
    res = wait(dev->act_dev, &info, UINT64_MAX);
    return res == VK_SUCCESS ? 0 : -1;
}

static enum AVPixelFormat want_vulkan(AVCodecContext *avctx, const enum AVPixelFormat *fmts)
{
    (void)avctx;
    mark("get_format called");
    for (int i = 0; fmts[i] != AV_PIX_FMT_NONE; i++)
        if (fmts[i] == AV_PIX_FMT_VULKAN)
            return fmts[i];
    mark("the decoder did not offer Vulkan output");
    return AV_PIX_FMT_NONE;
}

static int ffmpeg_mode(const char *dev, AVDictionary *opts, const char *path, int threads, int frames_wanted)
{
    AVFormatContext *fmt = NULL;
    AVPacket **pkts = NULL;
    AVBufferRef *device = NULL;
    AVCodecContext *dec = NULL;
    AVFrame *frame = av_frame_alloc();
    const AVCodec *codec = NULL;
    int nb_pkts = 0, stream = -1, ret = 0, frames = 0, sent = 0;
    double t[16] = { 0 }, frame_at[64], done_at = 0;
    char *optstr = NULL;
    enum { T_DEMUX0, T_DEMUX1, T_DEV0, T_DEV1, T_OPEN0, T_OPEN1, T_FIRST, T_CLOSE0, T_CLOSE1,
           T_FREE0, T_FREE1, T_END };

    av_dict_get_string(opts, &optstr, '=', ',');
    av_log_set_level(AV_LOG_DEBUG);
    av_log_set_callback(log_cb);

    if (path) {
        t[T_DEMUX0] = now();
        if ((nb_pkts = read_packets(path, &fmt, &stream, &codec, &pkts)) < 0)
            return 1;
        t[T_DEMUX1] = now();
        mark("demuxed: %d packets", nb_pkts);
    }

    mark("av_hwdevice_ctx_create(vulkan, %s, %s)", dev ? dev : "NULL", optstr ? optstr : "");
    t[T_DEV0] = now();
    ret = av_hwdevice_ctx_create(&device, AV_HWDEVICE_TYPE_VULKAN, dev, opts, 0);
    t[T_DEV1] = now();
    mark("av_hwdevice_ctx_create returned %d", ret);
    if (ret < 0) {
        fprintf(stderr, "cannot create the Vulkan device: %s\n", av_err2str(ret));
        return 1;
    }

    if (path) {
        t[T_OPEN0] = now();
        if (!(dec = avcodec_alloc_context3(codec)))
            return 1;
        avcodec_parameters_to_context(dec, fmt->streams[stream]->codecpar);
        dec->thread_count = threads;
        dec->hw_device_ctx = av_buffer_ref(device);
        dec->get_format = want_vulkan;
        if ((ret = avcodec_open2(dec, codec, NULL)) < 0) {
            fprintf(stderr, "cannot open the decoder: %s\n", av_err2str(ret));
            return 1;
        }
        t[T_OPEN1] = now();
        threads = dec->thread_count;      /* what 0 (auto) became */
        mark("decoder open (%d threads)", dec->thread_count);
        /* send packets (in a loop over the clip when more frames are wanted than it has)
         * until the frames wanted came out, as ffmpeg -frames:v N does */
        while (frames < frames_wanted && frames < 64 && ret >= 0) {
            ret = avcodec_send_packet(dec, sent < 16 * nb_pkts + 64 ? pkts[sent % nb_pkts] : NULL);
            if (ret == AVERROR(EAGAIN))
                ret = 0;
            else if (ret >= 0 && sent++ < 4)
                mark("packet %d sent", sent - 1);
            while (ret >= 0 && frames < frames_wanted) {
                ret = avcodec_receive_frame(dec, frame);
                if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF) {
                    ret = ret == AVERROR_EOF ? AVERROR_EOF : 0;
                    break;
                }
                if (ret < 0)
                    break;
                frame_at[frames++] = now();
                mark("frame %d out (%s, after %d packets)", frames - 1,
                     av_get_pix_fmt_name(frame->format), sent);
                if (frames == 1 && frame->format == AV_PIX_FMT_VULKAN) {
                    if (wait_frame(frame) < 0)
                        mark("could not wait for frame 0");
                    done_at = now();
                    mark("frame 0 done on the GPU");
                }
                av_frame_unref(frame);
            }
        }
        if (frames < frames_wanted) {
            fprintf(stderr, "decoding failed after %d frames: %s\n", frames, av_err2str(ret));
            return 1;
        }
        t[T_FIRST] = frame_at[0];
        t[T_CLOSE0] = now();
        avcodec_free_context(&dec);
        t[T_CLOSE1] = now();
        mark("decoder freed");
    }
    av_frame_free(&frame);

    t[T_FREE0] = now();
    av_buffer_unref(&device);
    t[T_FREE1] = now();
    mark("device freed");
    for (int i = 0; i < nb_pkts; i++)
        av_packet_free(&pkts[i]);
    av_free(pkts);
    avformat_close_input(&fmt);
    t[T_END] = now();
    av_log_set_callback(av_log_default_callback);

    printf("{\"mode\": \"ffmpeg\", \"ffmpeg\": ");
    json_str(stdout, av_version_info());
    printf(", \"libavutil\": \"%u.%u.%u\", \"device\": ", avutil_version() >> 16,
           (avutil_version() >> 8) & 0xff, avutil_version() & 0xff);
    json_str(stdout, dev ? dev : "");
    printf(", \"options\": ");
    json_str(stdout, optstr ? optstr : "");
    printf(", \"file\": ");
    json_str(stdout, path ? path : "");
    printf(", \"threads\": %d, \"frames\": %d, \"packets_sent\": %d,\n \"exec_to_main_s\": %.3f, "
           "\"demux_s\": %.6f, \"device_create_s\": %.6f, \"decoder_open_s\": %.6f, "
           "\"first_frame_s\": %.6f, \"first_frame_done_s\": %.6f, \"frames_s\": %.6f, "
           "\"decoder_close_s\": %.6f, \"device_free_s\": %.6f, \"main_s\": %.6f,\n ",
           threads, frames, sent, since_exec() - now(), t[T_DEMUX1] - t[T_DEMUX0],
           t[T_DEV1] - t[T_DEV0], t[T_OPEN1] - t[T_OPEN0], path ? t[T_FIRST] - t[T_OPEN1] : 0.0,
           done_at ? done_at - t[T_OPEN1] : 0.0,
           path ? frame_at[frames - 1] - t[T_OPEN1] : 0.0, t[T_CLOSE1] - t[T_CLOSE0],
           t[T_FREE1] - t[T_FREE0], t[T_END]);
    print_marks(stdout);
    printf("}\n");

    fprintf(stderr, "startprobe %s, device %s, options '%s'%s%s: device %.3f s, decoder open %.3f s, "
            "first frame out %.3f s, done on the GPU %.3f s, %d frame(s) %.3f s, decoder close %.3f s, "
            "device free %.3f s, main() %.3f s\n", av_version_info(), dev ? dev : "default", optstr ? optstr : "",
            path ? ", " : "", path ? path : "", t[T_DEV1] - t[T_DEV0], t[T_OPEN1] - t[T_OPEN0],
            path ? t[T_FIRST] - t[T_OPEN1] : 0.0, done_at ? done_at - t[T_OPEN1] : 0.0, frames,
            path ? frame_at[frames - 1] - t[T_OPEN1] : 0.0,
            t[T_CLOSE1] - t[T_CLOSE0], t[T_FREE1] - t[T_FREE0], t[T_END]);
    for (int i = 0; i < nb_marks; i++)
        fprintf(stderr, "  +%8.3f ms  %s%s\n", marks[i].at * 1e3, marks[i].level < 0 ? "== " : "", marks[i].text);
    av_free(optstr);
    return 0;
}

/* ------------------------------------------------------------------ the raw Vulkan mode */
typedef struct Ext {
    const char *name;
    VkStructureType features;      /* its feature structure, or 0 */
} Ext;

/* The optional device extensions of FFmpeg 7.1.5 and 9.0.2 (hwcontext_vulkan.c), with the
 * feature structure of those that have one FFmpeg turns on. */
static const Ext ffmpeg_exts[] = {
    { "VK_KHR_push_descriptor", 0 },
    { "VK_EXT_descriptor_buffer", VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DESCRIPTOR_BUFFER_FEATURES_EXT },
    { "VK_EXT_physical_device_drm", 0 },
    { "VK_EXT_shader_atomic_float", VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT },
    { "VK_KHR_cooperative_matrix", VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR },
    { "VK_NV_optical_flow", VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_OPTICAL_FLOW_FEATURES_NV },
    { "VK_EXT_shader_object", VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_OBJECT_FEATURES_EXT },
    { "VK_KHR_shader_subgroup_rotate", VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SUBGROUP_ROTATE_FEATURES_KHR },
    { "VK_EXT_host_image_copy", VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_HOST_IMAGE_COPY_FEATURES_EXT },
    { "VK_KHR_workgroup_memory_explicit_layout", VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_WORKGROUP_MEMORY_EXPLICIT_LAYOUT_FEATURES_KHR },
    { "VK_KHR_shader_relaxed_extended_instruction", VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_RELAXED_EXTENDED_INSTRUCTION_FEATURES_KHR },
    { "VK_EXT_shader_long_vector", 0 },
    { "VK_EXT_shader_replicated_composites", VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_REPLICATED_COMPOSITES_FEATURES_EXT },
    { "VK_EXT_zero_initialize_device_memory", 0 },
    { "VK_KHR_shader_expect_assume", VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_EXPECT_ASSUME_FEATURES_KHR },
    { "VK_KHR_video_maintenance1", VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VIDEO_MAINTENANCE_1_FEATURES_KHR },
    { "VK_KHR_video_maintenance2", 0 },
    { "VK_KHR_internally_synchronized_queues", 0 },
    { "VK_KHR_external_memory_fd", 0 },
    { "VK_EXT_external_memory_dma_buf", 0 },
    { "VK_EXT_image_drm_format_modifier", 0 },
    { "VK_KHR_external_semaphore_fd", 0 },
    { "VK_EXT_external_memory_host", 0 },
    { "VK_KHR_video_queue", 0 },
    { "VK_KHR_video_decode_queue", 0 },
    { "VK_KHR_video_encode_queue", 0 },
    { "VK_KHR_video_decode_h264", 0 },
    { "VK_KHR_video_decode_h265", 0 },
    { "VK_KHR_video_decode_vp9", 0 },
    { "VK_KHR_video_decode_av1", 0 },
    { "VK_KHR_video_encode_h264", 0 },
    { "VK_KHR_video_encode_h265", 0 },
    { "VK_KHR_video_encode_av1", 0 },
};
#define NB_FFMPEG_EXTS (int)(sizeof(ffmpeg_exts) / sizeof(ffmpeg_exts[0]))

typedef struct Vk {
    PFN_vkGetInstanceProcAddr gipa;
    PFN_vkCreateDevice CreateDevice;
    PFN_vkGetDeviceProcAddr GetDeviceProcAddr;
    PFN_vkGetPhysicalDeviceFeatures2 GetPhysicalDeviceFeatures2;
    VkPhysicalDevice pd;
    uint32_t api;
} Vk;

/* A feature structure of unknown layout: sType, pNext, then VkBool32s; room to spare. */
typedef struct FeatureBlob {
    VkStructureType sType;
    void *pNext;
    VkBool32 bits[256];
} FeatureBlob;

/* Chains every structure of types[] to f2 (queried: every supported feature on). */
static FeatureBlob *query_features(Vk *vk, VkPhysicalDeviceFeatures2 *f2, const VkStructureType *types, int n)
{
    FeatureBlob *blobs = calloc(n ? n : 1, sizeof(*blobs));
    memset(f2, 0, sizeof(*f2));
    f2->sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    for (int i = 0; i < n; i++) {
        blobs[i].sType = types[i];
        blobs[i].pNext = i + 1 < n ? &blobs[i + 1] : NULL;
    }
    f2->pNext = n ? blobs : NULL;
    vk->GetPhysicalDeviceFeatures2(vk->pd, f2);
    return blobs;
}

typedef struct Config {
    char name[160];
    int nb_qci;
    VkDeviceQueueCreateInfo qci[64];
    const char *exts[NB_FFMPEG_EXTS];
    int nb_exts;
    VkStructureType features[NB_FFMPEG_EXTS + 3];
    int nb_features, core_features;
} Config;

static float priorities[256];

static void run_config(Vk *vk, const Config *c, int repeat, FILE *js, int first)
{
    fprintf(js, "%s\n  {\"name\": ", first ? "" : ",");
    json_str(js, c->name);
    int queues = 0;
    for (int i = 0; i < c->nb_qci; i++)
        queues += c->qci[i].queueCount;
    fprintf(js, ", \"queues\": %d, \"extensions\": %d, \"runs\": [", queues, c->nb_exts);
    for (int r = 0; r < repeat; r++) {
        VkPhysicalDeviceFeatures2 f2;
        FeatureBlob *blobs = query_features(vk, &f2, c->features, c->nb_features);
        VkDeviceCreateInfo dci = {
            .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
            .pNext = c->nb_features || c->core_features ? &f2 : NULL,
            .queueCreateInfoCount = c->nb_qci,
            .pQueueCreateInfos = c->qci,
            .enabledExtensionCount = c->nb_exts,
            .ppEnabledExtensionNames = c->exts,
        };
        VkDevice dev = VK_NULL_HANDLE;
        if (!c->core_features)
            memset(&f2.features, 0, sizeof(f2.features));   /* extension features only */
        double t0 = now();
        VkResult res = vk->CreateDevice(vk->pd, &dci, NULL, &dev);
        double t1 = now(), t2 = t1, t3 = t1;
        if (res == VK_SUCCESS) {
            PFN_vkGetDeviceQueue GetDeviceQueue = (PFN_vkGetDeviceQueue)vk->GetDeviceProcAddr(dev, "vkGetDeviceQueue");
            PFN_vkDestroyDevice DestroyDevice = (PFN_vkDestroyDevice)vk->GetDeviceProcAddr(dev, "vkDestroyDevice");
            for (int i = 0; i < c->nb_qci; i++)
                for (uint32_t q = 0; q < c->qci[i].queueCount; q++) {
                    VkQueue queue;
                    GetDeviceQueue(dev, c->qci[i].queueFamilyIndex, q, &queue);
                }
            t2 = now();
            DestroyDevice(dev, NULL);
            t3 = now();
        }
        free(blobs);
        fprintf(js, "%s{\"result\": %d, \"create_s\": %.6f, \"get_queues_s\": %.6f, \"destroy_s\": %.6f}",
                r ? ", " : "", res, t1 - t0, t2 - t1, t3 - t2);
        fprintf(stderr, "  %-72s create %8.3f ms, queues %6.3f ms, destroy %7.3f ms%s\n", c->name,
                (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3,
                res == VK_SUCCESS ? "" : "  (vkCreateDevice FAILED)");
    }
    fprintf(js, "]}");
}

static void add_queues(Config *c, uint32_t family, uint32_t count)
{
    c->qci[c->nb_qci++] = (VkDeviceQueueCreateInfo){
        .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
        .queueFamilyIndex = family,
        .queueCount = count,
        .pQueuePriorities = priorities,
    };
}

static int raw_mode(int device_index, int repeat)
{
    Vk vk = { 0 };
    double t0, t1, t_open, t_inst, t_enum;
    void *lib;
    uint32_t nb_pd = 0, nb_fam = 0, nb_dext = 0, inst_version = VK_API_VERSION_1_0;
    VkPhysicalDevice pds[16];
    VkQueueFamilyProperties fams[64];
    VkExtensionProperties *dext;
    VkPhysicalDeviceProperties props;
    VkInstance inst;
    VkResult res;
    int has_ext[NB_FFMPEG_EXTS] = { 0 }, compute_family = -1, nb_configs = 0;
    Config *configs = calloc(NB_FFMPEG_EXTS + 72, sizeof(*configs));

    for (int i = 0; i < 256; i++)
        priorities[i] = 1.0f;
    t0 = now();
    if (!(lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL))) {
        fprintf(stderr, "dlopen(libvulkan.so.1): %s\n", dlerror());
        return 1;
    }
    t_open = now() - t0;
    vk.gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
#define GLOBAL(n) PFN_##n n = (PFN_##n)vk.gipa(NULL, #n)
    GLOBAL(vkEnumerateInstanceVersion);
    GLOBAL(vkCreateInstance);
    if (vkEnumerateInstanceVersion)
        vkEnumerateInstanceVersion(&inst_version);
    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "startprobe",
        .apiVersion = inst_version >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : inst_version,
    };
    VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app };
    t0 = now();
    res = vkCreateInstance(&ici, NULL, &inst);
    t_inst = now() - t0;
    if (res != VK_SUCCESS) {
        fprintf(stderr, "vkCreateInstance: %d\n", res);
        return 1;
    }
#define INST(n) PFN_##n n = (PFN_##n)vk.gipa(inst, #n)
    INST(vkEnumeratePhysicalDevices);
    INST(vkGetPhysicalDeviceProperties);
    INST(vkGetPhysicalDeviceQueueFamilyProperties);
    INST(vkEnumerateDeviceExtensionProperties);
    INST(vkDestroyInstance);
    vk.CreateDevice = (PFN_vkCreateDevice)vk.gipa(inst, "vkCreateDevice");
    vk.GetDeviceProcAddr = (PFN_vkGetDeviceProcAddr)vk.gipa(inst, "vkGetDeviceProcAddr");
    vk.GetPhysicalDeviceFeatures2 = (PFN_vkGetPhysicalDeviceFeatures2)vk.gipa(inst, "vkGetPhysicalDeviceFeatures2");
    t0 = now();
    nb_pd = 16;
    res = vkEnumeratePhysicalDevices(inst, &nb_pd, pds);
    t_enum = now() - t0;
    if ((res != VK_SUCCESS && res != VK_INCOMPLETE) || device_index >= (int)nb_pd) {
        fprintf(stderr, "no Vulkan device %d (%u found)\n", device_index, nb_pd);
        return 1;
    }
    vk.pd = pds[device_index];
    vkGetPhysicalDeviceProperties(vk.pd, &props);
    vk.api = props.apiVersion;
    nb_fam = 64;
    vkGetPhysicalDeviceQueueFamilyProperties(vk.pd, &nb_fam, fams);
    vkEnumerateDeviceExtensionProperties(vk.pd, NULL, &nb_dext, NULL);
    dext = calloc(nb_dext + 1, sizeof(*dext));
    vkEnumerateDeviceExtensionProperties(vk.pd, NULL, &nb_dext, dext);
    for (int e = 0; e < NB_FFMPEG_EXTS; e++)
        for (uint32_t i = 0; i < nb_dext; i++)
            if (!strcmp(dext[i].extensionName, ffmpeg_exts[e].name))
                has_ext[e] = 1;
    /* a compute family without graphics if there is one, as FFmpeg picks */
    for (uint32_t f = 0; f < nb_fam && compute_family < 0; f++)
        if ((fams[f].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(fams[f].queueFlags & VK_QUEUE_GRAPHICS_BIT))
            compute_family = f;
    for (uint32_t f = 0; f < nb_fam && compute_family < 0; f++)
        if (fams[f].queueFlags & VK_QUEUE_COMPUTE_BIT)
            compute_family = f;
    if (compute_family < 0) {
        fprintf(stderr, "no compute queue family\n");
        return 1;
    }

    fprintf(stderr, "startprobe --raw: %s (Vulkan %u.%u.%u), loader dlopen %.3f ms, vkCreateInstance %.3f ms, "
            "vkEnumeratePhysicalDevices %.3f ms; compute family %d\n", props.deviceName,
            VK_API_VERSION_MAJOR(vk.api), VK_API_VERSION_MINOR(vk.api), VK_API_VERSION_PATCH(vk.api),
            t_open * 1e3, t_inst * 1e3, t_enum * 1e3, compute_family);

    /* the configurations */
    Config *c;
#define NEW_CONFIG(...) (c = &configs[nb_configs++], snprintf(c->name, sizeof(c->name), __VA_ARGS__), c)
    add_queues(NEW_CONFIG("1 compute queue (family %d)", compute_family), compute_family, 1);
    for (uint32_t f = 0; f < nb_fam && nb_configs < 40; f++)
        add_queues(NEW_CONFIG("family %u alone: all its %u queues (flags 0x%x)", f, fams[f].queueCount,
                              fams[f].queueFlags), f, fams[f].queueCount);
    (void)NEW_CONFIG("every queue of every family");
    for (uint32_t f = 0; f < nb_fam && f < 64; f++)
        add_queues(c, f, fams[f].queueCount);
    for (int e = 0; e < NB_FFMPEG_EXTS; e++) {
        if (!has_ext[e])
            continue;
        add_queues(NEW_CONFIG("1 compute queue + %s%s", ffmpeg_exts[e].name,
                              ffmpeg_exts[e].features ? " and its features" : ""), compute_family, 1);
        c->exts[c->nb_exts++] = ffmpeg_exts[e].name;
        /* the video extensions need VK_KHR_video_queue, the codecs their decode or encode queue */
        if (strstr(ffmpeg_exts[e].name, "VK_KHR_video_") && strcmp(ffmpeg_exts[e].name, "VK_KHR_video_queue"))
            c->exts[c->nb_exts++] = "VK_KHR_video_queue";
        if (strstr(ffmpeg_exts[e].name, "VK_KHR_video_decode_") && !strstr(ffmpeg_exts[e].name, "_queue"))
            c->exts[c->nb_exts++] = "VK_KHR_video_decode_queue";
        if (strstr(ffmpeg_exts[e].name, "VK_KHR_video_encode_") && !strstr(ffmpeg_exts[e].name, "_queue"))
            c->exts[c->nb_exts++] = "VK_KHR_video_encode_queue";
        if (ffmpeg_exts[e].features)
            c->features[c->nb_features++] = ffmpeg_exts[e].features;
    }
    add_queues(NEW_CONFIG("1 compute queue + core features 1.0-1.3 all on"), compute_family, 1);
    c->core_features = 1;
    c->features[c->nb_features++] = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
    c->features[c->nb_features++] = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
    if (vk.api >= VK_API_VERSION_1_3)
        c->features[c->nb_features++] = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES;
    Config *core = c;
    for (int all_queues = 0; all_queues < 2; all_queues++) {
        c = &configs[nb_configs++];
        *c = *core;
        snprintf(c->name, sizeof(c->name), "%s + every extension above + all their features and the core ones",
                 all_queues ? "every queue" : "1 compute queue");
        if (all_queues) {
            c->nb_qci = 0;
            for (uint32_t f = 0; f < nb_fam && f < 64; f++)
                add_queues(c, f, fams[f].queueCount);
        }
        c->nb_exts = 0;
        c->nb_features = vk.api >= VK_API_VERSION_1_3 ? 3 : 2;
        for (int e = 0; e < NB_FFMPEG_EXTS; e++) {
            if (!has_ext[e])
                continue;
            c->exts[c->nb_exts++] = ffmpeg_exts[e].name;
            if (ffmpeg_exts[e].features)
                c->features[c->nb_features++] = ffmpeg_exts[e].features;
        }
    }
    add_queues(NEW_CONFIG("1 compute queue (family %d), again", compute_family), compute_family, 1);

    /* JSON, written as the configurations run */
    char *jbuf = NULL;
    size_t jlen = 0;
    FILE *js = open_memstream(&jbuf, &jlen);
    fprintf(js, "{\"mode\": \"raw\", \"device\": ");
    json_str(js, props.deviceName);
    fprintf(js, ", \"api\": \"%u.%u.%u\", \"driver_version\": %u, \"instance_version\": \"%u.%u.%u\", "
            "\"loader_dlopen_s\": %.6f, \"create_instance_s\": %.6f, \"enumerate_s\": %.6f, \"families\": [",
            VK_API_VERSION_MAJOR(vk.api), VK_API_VERSION_MINOR(vk.api), VK_API_VERSION_PATCH(vk.api),
            props.driverVersion, VK_API_VERSION_MAJOR(inst_version), VK_API_VERSION_MINOR(inst_version),
            VK_API_VERSION_PATCH(inst_version), t_open, t_inst, t_enum);
    for (uint32_t f = 0; f < nb_fam; f++)
        fprintf(js, "%s{\"flags\": %u, \"count\": %u}", f ? ", " : "", fams[f].queueFlags, fams[f].queueCount);
    fprintf(js, "], \"extensions\": [");
    for (int e = 0, n = 0; e < NB_FFMPEG_EXTS; e++)
        if (has_ext[e])
            fprintf(js, "%s\"%s\"", n++ ? ", " : "", ffmpeg_exts[e].name);
    fprintf(js, "],\n \"configs\": [");
    for (int i = 0; i < nb_configs; i++)
        run_config(&vk, &configs[i], repeat, js, !i);
    t0 = now();
    vkDestroyInstance(inst, NULL);
    t1 = now();
    dlclose(lib);
    fprintf(js, "],\n \"destroy_instance_s\": %.6f, \"dlclose_s\": %.6f, \"main_s\": %.6f, \"exec_to_main_s\": %.3f}\n",
            t1 - t0, now() - t1, now(), since_exec() - now());
    fclose(js);
    fputs(jbuf, stdout);
    fprintf(stderr, "  vkDestroyInstance %.3f ms, dlclose %.3f ms, main() %.3f s\n", (t1 - t0) * 1e3,
            (now() - t1) * 1e3, now());
    free(jbuf);
    free(dext);
    free(configs);
    return 0;
}

int main(int argc, char **argv)
{
    const char *dev = NULL, *path = NULL;
    int raw = 0, threads = 0, frames = 1, repeat = 1;
    AVDictionary *opts = NULL;
    struct timespec ts;
    char t0[32];
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t_main = ts.tv_sec + ts.tv_nsec * 1e-9;
    /* tools/gpu/probes/vktime.c, when it is the libvulkan.so.1 loaded later, takes this as its origin */
    snprintf(t0, sizeof(t0), "%llu", (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec);
    setenv("VKTIME_T0", t0, 1);

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--raw"))
            raw = 1;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            dev = argv[++i];
        else if (!strcmp(argv[i], "--opt") && i + 1 < argc) {
            char *kv = argv[++i], *eq = strchr(kv, '=');
            if (!eq) {
                fprintf(stderr, "--opt takes KEY=VALUE, not %s\n", kv);
                return 2;
            }
            *eq = 0;
            av_dict_set(&opts, kv, eq + 1, 0);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--frames") && i + 1 < argc)
            frames = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "usage: startprobe [--device DEV] [--opt KEY=VALUE]... [--threads N] [--frames N] [FILE]\n"
                    "       startprobe --raw [--device N] [--repeat N]\n");
            return 2;
        } else
            path = argv[i];
    }
    if (frames < 1 || frames > 64 || repeat < 1) {
        fprintf(stderr, "--frames takes 1 to 64, --repeat at least 1\n");
        return 2;
    }
    if (raw)
        return raw_mode(dev ? atoi(dev) : 0, repeat);
    int ret = ffmpeg_mode(dev, opts, path, threads, frames);
    av_dict_free(&opts);
    return ret;
}
