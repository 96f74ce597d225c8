/*
 * pyprores.c - sessions, decoding, slice submission, logging and errors.
 * See pyprores.h for the API. FFmpeg 7.1 public API only.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavutil/avutil.h>
#include <libavutil/dict.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/hwcontext.h>
#include <libavutil/hwcontext_vulkan.h>
#include <libavutil/log.h>
#include <libavutil/pixdesc.h>
#include <libavutil/version.h>

#include "internal.h"

enum { BACKEND_SOFTWARE = 0, BACKEND_VULKAN = 1 };

typedef struct submitted_slice {
    uint8_t *data;
    size_t size;
    int submitted;
} submitted_slice;

/* A Vulkan device shared by the sessions that asked for the same device with
 * the same validation setting. Creating a VkDevice costs about a second on
 * some drivers, and NVIDIA's driver 580 crashes in vkCreateDevice when one
 * process holds more than four of FFmpeg's devices; FFmpeg's Vulkan device
 * context is safe to share between decoders (its queues are locked). */
typedef struct shared_device {
    char key[PPR_MSG_SIZE];         /* validation flag and device string */
    AVBufferRef *ref;               /* the cache's own reference */
    int users;                      /* sessions holding it */
    int holds;                      /* host buffers holding it (ppr_host_buffer_new) */
    int validation_dropped;         /* created without the layer that was asked for */
    char note[PPR_MSG_SIZE];        /* why, for ppr_session_note(); "" when nothing to say */
    struct shared_device *next;
} shared_device;

struct ppr_session {
    int backend;
    int threads;
    AVBufferRef *hw_device;
    shared_device *dev;             /* vulkan: the cache entry of hw_device */
    int device_ready;               /* device creation finished */
    AVCodecContext *avctx;
    int need_reopen;                /* e.g. after a failed get_format */
    uint32_t cur_tag;
    int cur_width, cur_height;
    enum AVPixelFormat cur_fmt;
    AVPacket *pkt;
    AVFrame *frame;
    AVFrame *swframe;
    char device_name[256];
    char err[PPR_MSG_SIZE];

    /* written by the log callback, under g_lock */
    char av_last[PPR_MSG_SIZE];     /* last error-level line from FFmpeg */
    int av_last_open;               /* its last fragment had no newline */
    int validation;
    int validation_no_practices;    /* "practices" chosen for PYPRORES_VALIDATION=1: drop them */
    int validation_count;           /* all messages seen */
    int validation_kept;            /* messages stored (at most PPR_VALIDATION_KEEP) */
    char **validation_msgs;
    char *validation_ignore;        /* ';'-separated substrings from the environment */

    /* slices concealed by the current decode, as (picture, slice) pairs;
     * Vulkan: appended by the log callback, under g_lock */
    int *concealed;
    int nb_concealed, concealed_alloc;

    /* get_format bookkeeping */
    int vulkan_offered;
    int format_failed;              /* 0, PPR_ENOHWACCEL */

    /* slice submission */
    int in_frame;
    uint8_t *frame_pkt;
    size_t frame_pkt_size;
    ppr_frame_info frame_info;
    submitted_slice *subs[2];

    /* streaming: ppr_send_packet/ppr_receive_frame */
    int stream;                     /* avctx was opened for streaming */
    int stream_threads;             /* vulkan frame threads */
    unsigned stream_flags;          /* PPR_STREAM_* */
    int st_in_flight;               /* packets accepted, frames not received */
    int st_draining;                /* NULL packet sent */
    int st_eof;                     /* the decoder returned AVERROR_EOF */
    int st_have;                    /* s->frame holds a received frame */
    enum AVPixelFormat st_fmt;      /* its (downloaded) format */
    ppr_planes st_layout;           /* its planes */

    struct ppr_session *next;       /* registry of live sessions */
};

/* ------------------------------------------------------------------------ */
/* errors                                                                     */

static __thread char tls_err[PPR_MSG_SIZE];
static __thread char tls_av_last[PPR_MSG_SIZE];
static __thread char tls_strerror[128];
static __thread ppr_session *tls_session;   /* session of the ppr_ call in progress */

char *ppr__thread_error(void) { return tls_err; }
void ppr__clear_error(void) { tls_err[0] = 0; }

int ppr__fail(int code, const char *fmt, ...)
{
    va_list vl;
    va_start(vl, fmt);
    vsnprintf(tls_err, sizeof(tls_err), fmt, vl);
    va_end(vl);
    return code;
}

static int sfail(ppr_session *s, int code, const char *fmt, ...) PPR_PRINTF(3, 4);
static int sfail(ppr_session *s, int code, const char *fmt, ...)
{
    va_list vl;
    va_start(vl, fmt);
    vsnprintf(tls_err, sizeof(tls_err), fmt, vl);
    va_end(vl);
    if (s)
        snprintf(s->err, sizeof(s->err), "%s", tls_err);
    return code;
}

const char *ppr_strerror(int code)
{
    switch (code) {
    case PPR_OK:         return "success";
    case PPR_EINVAL:     return "invalid argument";
    case PPR_ENOTPRORES: return "not a ProRes frame";
    case PPR_ENODEVICE:  return "no usable Vulkan device";
    case PPR_ENOHWACCEL: return "this FFmpeg build has no ProRes Vulkan hwaccel";
    case PPR_ETRUNCATED: return "truncated ProRes frame";
    case PPR_EDECODE:    return "ProRes decoding failed";
    case PPR_ENOMEM:     return "out of memory";
    case PPR_EAGAIN:     return "receive frames first, then send the packet again";
    case PPR_EFORMAT:    return "this FFmpeg build cannot read the file";
    case PPR_ENOFILE:    return "no such file";
    }
    if (av_strerror(code, tls_strerror, sizeof(tls_strerror)) < 0)
        snprintf(tls_strerror, sizeof(tls_strerror), "unknown error %d", code);
    return tls_strerror;
}

const char *ppr_last_error(ppr_session *s)
{
    return s ? s->err : tls_err;
}

/* ------------------------------------------------------------------------ */
/* logging                                                                    */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static ppr_session *g_sessions;
static shared_device *g_devices;
static volatile int g_user_level = AV_LOG_QUIET;

static int session_live(ppr_session *s)  /* g_lock held */
{
    ppr_session *it;
    for (it = g_sessions; it; it = it->next)
        if (it == s)
            return 1;
    return 0;
}

static int device_live(const shared_device *d)  /* g_lock held */
{
    const shared_device *it;
    for (it = g_devices; it; it = it->next)
        if (it == d)
            return 1;
    return 0;
}

static int looks_like_validation(const char *line)
{
    return strstr(line, "VUID-") || strstr(line, "Validation") ||
           strstr(line, "MessageID") || strstr(line, "The Vulkan spec states");
}

static void append_line(char *dst, size_t dst_size, int *open, const char *line)
{
    size_t n;
    if (*open) {
        n = strlen(dst);
        snprintf(dst + n, dst_size - n, "%s", line);
    } else {
        snprintf(dst, dst_size, "%s", line);
    }
    n = strlen(line);
    *open = !(n && line[n - 1] == '\n');
    /* keep messages single-line and without the trailing newline */
    n = strlen(dst);
    while (n && (dst[n - 1] == '\n' || dst[n - 1] == '\r'))
        dst[--n] = 0;
}

#define PPR_VALIDATION_KEEP 1000

/* Known noise of Debian 12's validation layers (1.3.239), older than the
 * Vulkan headers FFmpeg is built with: they flag every structure and
 * extension newer than themselves. Not bugs of FFmpeg's or ours. */
static const char *const validation_noise[] = {
    "-pNext-pNext",
    "is not supported by this layer",
    NULL
};

static int ignored_validation(const ppr_session *s, const char *line)
{
    const char *p, *end;
    int i;
    for (i = 0; validation_noise[i]; i++)
        if (strstr(line, validation_noise[i]))
            return 1;
    if (s->validation_no_practices && strstr(line, "BestPractices"))
        return 1;
    for (p = s->validation_ignore; p && *p; p = *end ? end + 1 : end) {
        char pat[256];
        size_t n;
        end = strchr(p, ';');
        if (!end)
            end = p + strlen(p);
        n = (size_t)(end - p);
        if (n && n < sizeof(pat)) {
            memcpy(pat, p, n);
            pat[n] = 0;
            if (strstr(line, pat))
                return 1;
        }
    }
    return 0;
}

static void keep_validation(ppr_session *s, const char *line)  /* g_lock held */
{
    char **msgs;
    size_t n;
    if (ignored_validation(s, line))
        return;
    s->validation_count++;
    if (s->validation_kept >= PPR_VALIDATION_KEEP)
        return;
    msgs = realloc(s->validation_msgs, (size_t)(s->validation_kept + 1) * sizeof(*msgs));
    if (!msgs)
        return;
    s->validation_msgs = msgs;
    n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        n--;
    msgs[s->validation_kept] = malloc(n + 1);
    if (!msgs[s->validation_kept])
        return;
    memcpy(msgs[s->validation_kept], line, n);
    msgs[s->validation_kept][n] = 0;
    s->validation_kept++;
}

static void deliver(ppr_session *s, int level, const char *line, int from_device)  /* g_lock held */
{
    if (level <= AV_LOG_ERROR)
        append_line(s->av_last, sizeof(s->av_last), &s->av_last_open, line);
    if (s->validation && from_device && line[0] != '\t' &&
        (s->device_ready || looks_like_validation(line)))
        keep_validation(s, line);
}

/* The series' report of failed slices (7.1.5 patch 19, 9.0.2 patch 12) logs
 * each slice the Vulkan hwaccel concealed. */
#define CONCEALED_LINE "concealed slice "

static void add_concealed(ppr_session *s, int picture, int slice)  /* g_lock held */
{
    if (s->nb_concealed == s->concealed_alloc) {
        int n = s->concealed_alloc ? 2 * s->concealed_alloc : 64;
        int *c = realloc(s->concealed, (size_t)n * 2 * sizeof(*c));
        if (!c)
            return;
        s->concealed = c;
        s->concealed_alloc = n;
    }
    s->concealed[2 * s->nb_concealed] = picture;
    s->concealed[2 * s->nb_concealed + 1] = slice;
    s->nb_concealed++;
}

static void log_concealed(void *avcl, const char *fmt, va_list vl)
{
    char line[64];
    const AVClass *cls = avcl ? *(const AVClass **)avcl : NULL;
    ppr_session *s;
    int slice, picture;
    va_list vl2;

    if (!cls || !cls->class_name || strcmp(cls->class_name, "AVCodecContext"))
        return;
    va_copy(vl2, vl);
    vsnprintf(line, sizeof(line), fmt, vl2);
    va_end(vl2);
    if (sscanf(line, CONCEALED_LINE "%d of picture %d", &slice, &picture) != 2)
        return;
    s = ((AVCodecContext *)avcl)->opaque;
    pthread_mutex_lock(&g_lock);
    if (s && session_live(s))
        add_concealed(s, picture, slice);
    pthread_mutex_unlock(&g_lock);
}

static void log_callback(void *avcl, int level, const char *fmt, va_list vl)
{
    char line[PPR_MSG_SIZE];
    const AVClass *cls = NULL;
    void *cand = NULL;
    shared_device *dev = NULL;
    int from_device = 0;
    ppr_session *s = NULL;
    va_list vl2;

    if (level <= g_user_level) {
        va_copy(vl2, vl);
        av_log_default_callback(avcl, level, fmt, vl2);
        va_end(vl2);
    }
    if (level == AV_LOG_DEBUG && !strncmp(fmt, CONCEALED_LINE, strlen(CONCEALED_LINE)))
        log_concealed(avcl, fmt, vl);
    if (level > AV_LOG_WARNING)
        return;

    vsnprintf(line, sizeof(line), fmt, vl);

    if (avcl)
        cls = *(const AVClass **)avcl;
    if (cls && cls->class_name) {
        if (!strcmp(cls->class_name, "AVCodecContext")) {
            cand = ((AVCodecContext *)avcl)->opaque;
        } else if (!strcmp(cls->class_name, "AVHWDeviceContext")) {
            dev = ((AVHWDeviceContext *)avcl)->user_opaque;
            from_device = 1;
        } else if (!strcmp(cls->class_name, "AVHWFramesContext")) {
            cand = ((AVHWFramesContext *)avcl)->user_opaque;
        }
    }

    pthread_mutex_lock(&g_lock);
    if (cand && session_live(cand))
        s = cand;
    else if (tls_session && session_live(tls_session) &&
             (!dev || tls_session->dev == dev))
        s = tls_session;
    if (s) {
        deliver(s, level, line, from_device);
    } else if (dev && device_live(dev)) {
        /* a shared device's line outside any call of its sessions (e.g. from
         * a driver thread): every session on the device sees it */
        for (s = g_sessions; s; s = s->next)
            if (s->dev == dev)
                deliver(s, level, line, from_device);
    }
    pthread_mutex_unlock(&g_lock);

    if (level <= AV_LOG_ERROR) {
        int open = 0;
        append_line(tls_av_last, sizeof(tls_av_last), &open, line);
    }
}

static void init_once(void)
{
    av_log_set_callback(log_callback);
}

void ppr__ensure_init(void)
{
    pthread_once(&g_once, init_once);
}

void ppr_set_log_level(int level)
{
    ppr__ensure_init();
    g_user_level = level;
    av_log_set_level(level > AV_LOG_WARNING ? level : AV_LOG_WARNING);
}

/* Start of a session call: attribute log lines to it, clear messages. */
static void enter(ppr_session *s)
{
    ppr__ensure_init();
    tls_session = s;
    tls_err[0] = 0;
    tls_av_last[0] = 0;
    if (s) {
        s->err[0] = 0;
        pthread_mutex_lock(&g_lock);
        s->av_last[0] = 0;
        s->av_last_open = 0;
        pthread_mutex_unlock(&g_lock);
    }
}

static int leave(int ret)
{
    tls_session = NULL;
    return ret;
}

/* Copy of the last FFmpeg error line seen for s (or this thread). */
static void last_av_error(ppr_session *s, char *dst, size_t size)
{
    if (s) {
        pthread_mutex_lock(&g_lock);
        snprintf(dst, size, "%s", s->av_last);
        pthread_mutex_unlock(&g_lock);
    } else {
        dst[0] = 0;
    }
    if (!dst[0])
        snprintf(dst, size, "%s", tls_av_last);
}

/* ------------------------------------------------------------------------ */
/* library facts                                                              */

int ppr_has_hwaccel(const char *backend)
{
    const AVCodec *codec;
    const AVCodecHWConfig *cfg;
    int i;

    ppr__ensure_init();
    if (!backend)
        return 0;
    codec = avcodec_find_decoder(AV_CODEC_ID_PRORES);
    if (!codec)
        return 0;
    if (!strcmp(backend, "software"))
        return 1;
    if (strcmp(backend, "vulkan"))
        return 0;
    for (i = 0; (cfg = avcodec_get_hw_config(codec, i)); i++)
        if (cfg->device_type == AV_HWDEVICE_TYPE_VULKAN)
            return 1;
    return 0;
}

unsigned ppr_avcodec_version(void) { return avcodec_version(); }
const char *ppr_ffmpeg_version(void) { return av_version_info(); }

/* ------------------------------------------------------------------------ */
/* sessions                                                                   */

static void vulkan_device_name(ppr_session *s)
{
    AVHWDeviceContext *dc = (AVHWDeviceContext *)s->hw_device->data;
    AVVulkanDeviceContext *vk = dc->hwctx;
    PFN_vkGetPhysicalDeviceProperties get_props = NULL;
    VkPhysicalDeviceProperties props;

    snprintf(s->device_name, sizeof(s->device_name), "vulkan");
    if (vk && vk->get_proc_addr && vk->inst && vk->phys_dev)
        get_props = (PFN_vkGetPhysicalDeviceProperties)
            vk->get_proc_addr(vk->inst, "vkGetPhysicalDeviceProperties");
    if (!get_props)
        return;
    memset(&props, 0, sizeof(props));
    get_props(vk->phys_dev, &props);
    props.deviceName[sizeof(props.deviceName) - 1] = 0;
    if (props.deviceName[0])
        snprintf(s->device_name, sizeof(s->device_name), "%s", props.deviceName);
}

/* Drop a session's use of a shared device (or a host buffer's, `hold`); the
 * last one destroys it (its log lines still reach the closing session through
 * tls_session). */
static void device_drop(shared_device *d, int hold)
{
    int last = 0;
    if (!d)
        return;
    pthread_mutex_lock(&g_lock);
    if (hold)
        d->holds--;
    else
        d->users--;
    if (!d->users && !d->holds) {
        shared_device **pp;
        for (pp = &g_devices; *pp; pp = &(*pp)->next)
            if (*pp == d) {
                *pp = d->next;
                break;
            }
        last = 1;
    }
    pthread_mutex_unlock(&g_lock);
    if (last) {
        av_buffer_unref(&d->ref);
        free(d);
    }
}

static void device_release(shared_device *d)
{
    device_drop(d, 0);
}

/* FFmpeg 9's hwcontext_vulkan downloads and uploads with VK_EXT_host_image_copy
 * where the device offers it (lavapipe does). Validation layers older than
 * that extension do not intercept its calls but still wrap the handles passed
 * to them, so the driver gets the layer's VkImage handles and crashes
 * (vkCopyImageToMemoryEXT in lavapipe, under Debian 12's layer 1.3.239). The
 * layers know the extension from about the 1.3.268 SDK on. */
#define PPR_HOST_IMAGE_COPY "VK_EXT_host_image_copy"  /* older Vulkan headers lack the macro */
#define PPR_LAYER_KNOWS_HOST_IMAGE_COPY VK_MAKE_API_VERSION(0, 1, 3, 268)

static int has_device_extension(const AVVulkanDeviceContext *vk, const char *name)
{
    int i;
    for (i = 0; i < vk->nb_enabled_dev_extensions; i++)
        if (vk->enabled_dev_extensions[i] && !strcmp(vk->enabled_dev_extensions[i], name))
            return 1;
    return 0;
}

/* specVersion of the Khronos validation layer, 0 when it is not installed. */
static uint32_t validation_layer_version(const AVVulkanDeviceContext *vk)
{
    PFN_vkEnumerateInstanceLayerProperties enum_layers = NULL;
    VkLayerProperties *props;
    uint32_t n = 0, i, version = 0;

    if (vk->get_proc_addr)
        enum_layers = (PFN_vkEnumerateInstanceLayerProperties)
            vk->get_proc_addr(NULL, "vkEnumerateInstanceLayerProperties");
    if (!enum_layers || enum_layers(&n, NULL) != VK_SUCCESS || !n)
        return 0;
    props = calloc(n, sizeof(*props));
    if (!props)
        return 0;
    enum_layers(&n, props);   /* VK_INCOMPLETE when a layer came in between: fine */
    for (i = 0; i < n; i++)
        if (!strcmp(props[i].layerName, "VK_LAYER_KHRONOS_validation"))
            version = props[i].specVersion;
    free(props);
    return version;
}

/* Was the device created with the validation layer (debug=1), on a build
 * whose downloads use VK_EXT_host_image_copy, under a layer too old for it?
 * Then it is recreated without the layer: note says so. */
static int host_copy_needs_no_layer(AVBufferRef *ref, char *note, size_t note_size)
{
    const AVVulkanDeviceContext *vk = ((AVHWDeviceContext *)ref->data)->hwctx;
    uint32_t v;

    if (!vk || !has_device_extension(vk, PPR_HOST_IMAGE_COPY))
        return 0;
    v = validation_layer_version(vk);
    if (v >= PPR_LAYER_KNOWS_HOST_IMAGE_COPY)
        return 0;
    snprintf(note, note_size, "created without the validation layer: this FFmpeg (%s) "
             "transfers frames with %s, which the installed validation layer (%u.%u.%u) "
             "predates and crashes on", av_version_info(), PPR_HOST_IMAGE_COPY,
             VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), VK_API_VERSION_PATCH(v));
    return 1;
}

/* Give s a reference to the shared device for key, creating it when no
 * session holds one. Returns 0 or a negative AVERROR. */
static int device_acquire(ppr_session *s, const char *key, const char *device,
                          AVDictionary *opts)
{
    shared_device *d;
    int ret;

    pthread_mutex_lock(&g_lock);
    for (d = g_devices; d; d = d->next)
        if (!strcmp(d->key, key))
            break;
    if (d) {
        s->hw_device = av_buffer_ref(d->ref);
        if (s->hw_device) {
            d->users++;
            s->dev = d;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (d)
        return s->hw_device ? 0 : AVERROR(ENOMEM);

    d = calloc(1, sizeof(*d));
    if (!d)
        return AVERROR(ENOMEM);
    snprintf(d->key, sizeof(d->key), "%s", key);
    /* log lines of the creation reach this session through tls_session */
    ret = av_hwdevice_ctx_create(&d->ref, AV_HWDEVICE_TYPE_VULKAN, device, opts, 0);
    if (ret >= 0 && av_dict_get(opts, "debug", NULL, 0) &&
        host_copy_needs_no_layer(d->ref, d->note, sizeof(d->note))) {
        AVDictionary *plain = NULL;
        av_buffer_unref(&d->ref);
        ret = av_dict_copy(&plain, opts, 0);
        if (ret >= 0)
            ret = av_dict_set(&plain, "debug", NULL, 0);
        if (ret >= 0)
            ret = av_hwdevice_ctx_create(&d->ref, AV_HWDEVICE_TYPE_VULKAN, device, plain, 0);
        av_dict_free(&plain);
        d->validation_dropped = 1;
    }
    if (ret >= 0) {
        s->hw_device = av_buffer_ref(d->ref);
        if (!s->hw_device)
            ret = AVERROR(ENOMEM);
    }
    if (ret < 0) {
        av_buffer_unref(&d->ref);
        free(d);
        return ret;
    }
    ((AVHWDeviceContext *)d->ref->data)->user_opaque = d;
    d->users = 1;
    s->dev = d;
    pthread_mutex_lock(&g_lock);
    d->next = g_devices;
    g_devices = d;
    pthread_mutex_unlock(&g_lock);
    return 0;
}

int ppr_device_sessions(ppr_session *s)
{
    int n;
    if (!s || !s->dev)
        return 0;
    pthread_mutex_lock(&g_lock);
    n = s->dev->users;
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* The validation mode PYPRORES_VALIDATION asks for, as the value of FFmpeg's
 * device option debug, or NULL: none when unset, empty or "0"; one of
 * FFmpeg's mode names as given; else ("1") "practices", whose messages of
 * the best-practices checks the session then leaves out (*no_practices),
 * i.e. core and synchronization validation. Not "validate" by default: the
 * GPU-assisted validation it adds loses, in Debian 12's layer (1.3.239), the
 * timeline semaphore signals of vkQueueSubmit2, so each hwcontext_vulkan
 * frame freed waits 10 s per semaphore in the layer
 * (UNASSIGNED-VkSemaphore-state-timeout): 30-40 s for every decoder closed. */
static const char *env_validation(int *no_practices)
{
    static const char *const modes[] = { "validate", "printf", "practices", NULL };
    const char *v = getenv("PYPRORES_VALIDATION");
    int i;

    *no_practices = 0;
    if (!v || !*v || !strcmp(v, "0"))
        return NULL;
    for (i = 0; modes[i]; i++)
        if (!strcmp(v, modes[i]))
            return modes[i];
    *no_practices = 1;
    return "practices";
}

/* FFmpeg 9 (libavutil 60 and later): let the device finish all submitted work
 * before a Vulkan decoder is freed. Its teardown destroys semaphores and
 * other objects once their values are reached, which the Vulkan spec does not
 * allow before the batches that use them have completed; lavapipe's queue
 * thread then touches freed memory (a crash in its mutex code, or a hang of
 * the next decode) when decoders are reopened on a device that stays, as
 * sessions do on a format change. FFmpeg 7.1 needs no such wait. */
static void vulkan_idle_before_free(ppr_session *s)
{
#if LIBAVUTIL_VERSION_MAJOR >= 60
    AVHWDeviceContext *dc;
    AVVulkanDeviceContext *vk;
    PFN_vkDeviceWaitIdle wait_idle;
    int q, i;

    if (!s->avctx || !s->hw_device || s->backend != BACKEND_VULKAN)
        return;
    dc = (AVHWDeviceContext *)s->hw_device->data;
    vk = dc->hwctx;
    if (!vk || !vk->get_proc_addr ||
        !(wait_idle = (PFN_vkDeviceWaitIdle)vk->get_proc_addr(vk->inst, "vkDeviceWaitIdle")))
        return;
#if FF_API_VULKAN_SYNC_QUEUES
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    /* vkDeviceWaitIdle needs every queue; hwcontext_vulkan's own lock */
    for (q = 0; q < vk->nb_qf; q++)
        for (i = 0; i < vk->qf[q].num; i++)
            vk->lock_queue(dc, vk->qf[q].idx, i);
    wait_idle(vk->act_dev);
    for (q = 0; q < vk->nb_qf; q++)
        for (i = 0; i < vk->qf[q].num; i++)
            vk->unlock_queue(dc, vk->qf[q].idx, i);
#pragma GCC diagnostic pop
#else
    (void)q; (void)i;
    wait_idle(vk->act_dev);   /* queues synchronised internally */
#endif
#else
    (void)s;
#endif
}

/* Every free of the session's decoder goes through here (FFmpeg 9's wait above). */
static void free_decoder(ppr_session *s)
{
    vulkan_idle_before_free(s);
    avcodec_free_context(&s->avctx);
}

static void session_free(ppr_session *s)
{
    int p;
    if (!s)
        return;
    free_decoder(s);
    av_packet_free(&s->pkt);
    av_frame_free(&s->frame);
    av_frame_free(&s->swframe);
    av_buffer_unref(&s->hw_device);
    device_release(s->dev);
    s->dev = NULL;
    for (p = 0; p < 2; p++) {
        if (s->subs[p]) {
            int i;
            for (i = 0; i < s->frame_info.pictures[p].slice_count; i++)
                free(s->subs[p][i].data);
            free(s->subs[p]);
        }
    }
    ppr_frame_info_free(&s->frame_info);
    free(s->frame_pkt);

    pthread_mutex_lock(&g_lock);
    free(s->concealed);
    for (p = 0; p < s->validation_kept; p++)
        free(s->validation_msgs[p]);
    free(s->validation_msgs);
    free(s->validation_ignore);
    {
        ppr_session **pp;
        for (pp = &g_sessions; *pp; pp = &(*pp)->next)
            if (*pp == s) {
                *pp = s->next;
                break;
            }
    }
    pthread_mutex_unlock(&g_lock);
    free(s);
}

int ppr_open(ppr_session **out, const char *backend, const char *device, int threads)
{
    return ppr_open_ex(out, backend, device, threads, 0);
}

int ppr_open_ex(ppr_session **out, const char *backend, const char *device, int threads,
                unsigned flags)
{
    ppr_session *s;
    int ret;

    enter(NULL);
    if (!out)
        return leave(ppr__fail(PPR_EINVAL, "ppr_open: out is NULL"));
    *out = NULL;
    if (!backend)
        backend = "vulkan";
    if (strcmp(backend, "software") && strcmp(backend, "vulkan"))
        return leave(ppr__fail(PPR_EINVAL, "unknown backend \"%s\" (use \"vulkan\" or \"software\")",
                               backend));
    if (threads < 0)
        return leave(ppr__fail(PPR_EINVAL, "threads must be >= 0"));
    if (!avcodec_find_decoder(AV_CODEC_ID_PRORES))
        return leave(ppr__fail(PPR_EDECODE, "this FFmpeg build has no ProRes decoder"));

    s = calloc(1, sizeof(*s));
    if (!s)
        return leave(ppr__fail(PPR_ENOMEM, "out of memory"));
    s->backend = strcmp(backend, "vulkan") ? BACKEND_SOFTWARE : BACKEND_VULKAN;
    s->threads = threads;
    s->cur_fmt = AV_PIX_FMT_NONE;
    pthread_mutex_lock(&g_lock);
    s->next = g_sessions;
    g_sessions = s;
    pthread_mutex_unlock(&g_lock);
    tls_session = s;

    s->pkt = av_packet_alloc();
    s->frame = av_frame_alloc();
    s->swframe = av_frame_alloc();
    if (!s->pkt || !s->frame || !s->swframe) {
        session_free(s);
        return leave(ppr__fail(PPR_ENOMEM, "out of memory"));
    }

    if (s->backend == BACKEND_SOFTWARE) {
        snprintf(s->device_name, sizeof(s->device_name), "cpu");
    } else {
        AVDictionary *opts = NULL;
        char msg[PPR_MSG_SIZE], key[PPR_MSG_SIZE];
        const char *debug = env_validation(&s->validation_no_practices);

        s->validation = !!debug;
        if (s->validation && getenv("PYPRORES_VALIDATION_IGNORE")) {
            s->validation_ignore = strdup(getenv("PYPRORES_VALIDATION_IGNORE"));
            if (!s->validation_ignore) {
                session_free(s);
                return leave(ppr__fail(PPR_ENOMEM, "out of memory"));
            }
        }
        /* A session decodes on the compute queues only. Every queue costs
         * device creation time (about 30 ms each with NVIDIA's driver), and
         * four per family decode as fast as all of them (docs/BENCHMARKS.md,
         * run 7); the option comes with the series' patch 15. */
        if ((debug && av_dict_set(&opts, "debug", debug, 0) < 0) ||
            av_dict_set(&opts, "limit_queues", "4", 0) < 0) {
            av_dict_free(&opts);
            session_free(s);
            return leave(ppr__fail(PPR_ENOMEM, "out of memory"));
        }
        if (av_hwdevice_find_type_by_name("vulkan") != AV_HWDEVICE_TYPE_VULKAN) {
            av_dict_free(&opts);
            session_free(s);
            return leave(ppr__fail(PPR_ENODEVICE, "this FFmpeg build has no Vulkan support"));
        }
        snprintf(key, sizeof(key), "%s:%s", debug ? debug : "", device ? device : "");
        ret = device_acquire(s, key, device, opts);
        av_dict_free(&opts);
        if (ret < 0) {
            int validation = s->validation;
            last_av_error(s, msg, sizeof(msg));
            session_free(s);
            return leave(ppr__fail(PPR_ENODEVICE, "could not create a Vulkan device%s%s%s: %s%s%s%s",
                                   device ? " \"" : "", device ? device : "", device ? "\"" : "",
                                   av_err2str(ret), msg[0] ? " - " : "", msg,
                                   validation ? " (PYPRORES_VALIDATION=1 needs the Khronos "
                                   "validation layer: apt-get install vulkan-validationlayers)" : ""));
        }
        s->device_ready = 1;
        if (s->dev->validation_dropped)
            s->validation = 0;
        vulkan_device_name(s);

        if (!(flags & PPR_OPEN_NO_HWACCEL_CHECK) && !ppr_has_hwaccel("vulkan")) {
            char name[256];
            snprintf(name, sizeof(name), "%s", s->device_name);
            session_free(s);
            return leave(ppr__fail(PPR_ENOHWACCEL,
                                   "this FFmpeg build has no ProRes Vulkan hwaccel "
                                   "(the Vulkan device \"%s\" works; rebuild FFmpeg with "
                                   "the pyprores patches: ./scripts/setup)", name));
        }
    }

    *out = s;
    return leave(0);
}

void ppr_close(ppr_session *s)
{
    if (!s)
        return;
    ppr__ensure_init();
    tls_session = s;
    session_free(s);
    tls_session = NULL;
}

const char *ppr_device_name(ppr_session *s) { return s ? s->device_name : ""; }
const char *ppr_backend(ppr_session *s)
{
    return !s ? "" : s->backend == BACKEND_VULKAN ? "vulkan" : "software";
}

int ppr_validation_messages(ppr_session *s)
{
    int n;
    if (!s)
        return 0;
    pthread_mutex_lock(&g_lock);
    n = s->validation_count;
    pthread_mutex_unlock(&g_lock);
    return n;
}

int ppr_validation_enabled(ppr_session *s) { return s ? s->validation : 0; }
const char *ppr_session_note(ppr_session *s) { return s && s->dev ? s->dev->note : ""; }
const char *ppr_validation_message(ppr_session *s, int i)
{
    const char *m = NULL;
    if (!s)
        return NULL;
    pthread_mutex_lock(&g_lock);
    if (i >= 0 && i < s->validation_kept)
        m = s->validation_msgs[i];
    pthread_mutex_unlock(&g_lock);
    return m;
}

/* ------------------------------------------------------------------------ */
/* decoding                                                                   */

static enum AVPixelFormat get_format(AVCodecContext *avctx, const enum AVPixelFormat *fmts)
{
    ppr_session *s = avctx->opaque;
    const enum AVPixelFormat *p;

    if (s->backend == BACKEND_SOFTWARE) {
        for (p = fmts; *p != AV_PIX_FMT_NONE; p++) {
            const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(*p);
            if (d && !(d->flags & AV_PIX_FMT_FLAG_HWACCEL))
                return *p;
        }
        return AV_PIX_FMT_NONE;
    }
    for (p = fmts; *p != AV_PIX_FMT_NONE; p++)
        if (*p == AV_PIX_FMT_VULKAN) {
            s->vulkan_offered = 1;
            return *p;
        }
    /* never fall back to software on a vulkan session */
    s->format_failed = PPR_ENOHWACCEL;
    s->need_reopen = 1;
    if (s->vulkan_offered)
        av_log(avctx, AV_LOG_ERROR, "the ProRes Vulkan hwaccel failed to initialise "
               "for this stream; not falling back to software\n");
    else
        av_log(avctx, AV_LOG_ERROR, "this FFmpeg build has no ProRes Vulkan hwaccel "
               "for this stream (offered: %s); not falling back to software\n",
               av_get_pix_fmt_name(fmts[0]) ? av_get_pix_fmt_name(fmts[0]) : "none");
    return AV_PIX_FMT_NONE;
}

/* Software frames start out as 0xffff, a value no decoded sample takes
 * (samples are 10 or 12 bits): proresdec.c leaves the samples of a slice
 * that fails to decode unwritten, so they show which slices failed. */
static int prefill_get_buffer(AVCodecContext *avctx, AVFrame *frame, int flags)
{
    int i, ret = avcodec_default_get_buffer2(avctx, frame, flags);

    for (i = 0; ret >= 0 && i < AV_NUM_DATA_POINTERS && frame->buf[i]; i++)
        memset(frame->buf[i]->data, 0xff, frame->buf[i]->size);
    return ret;
}

/* Is the sample at (x, y) of plane i of a prefilled software frame still
 * unwritten? Rows below the visible height are read where the buffer has
 * them (slices of the last macroblock row of an odd field). */
static int unwritten(const AVFrame *f, int i, int x, int y)
{
    const uint8_t *p;
    size_t off;

    if (!f->data[i] || !f->buf[i] || f->linesize[i] <= 0)
        return 0;
    p = f->data[i] + (ptrdiff_t)y * f->linesize[i] + 2 * (ptrdiff_t)x;
    off = (size_t)(p - f->buf[i]->data);
    if (p < f->buf[i]->data || off + 2 > f->buf[i]->size)
        return 0;
    return p[0] == 0xff && p[1] == 0xff;
}

/* The slices of a damaged software frame that proresdec.c did not write. */
static void find_software_concealed(ppr_session *s, const uint8_t *data, size_t size,
                                    uint32_t tag, const AVFrame *f)
{
    ppr_frame_info fi;
    int p, i, cshift;

    if (ppr_inspect(data, size, tag, &fi) < 0)
        return;
    cshift = fi.chroma_format == 444 ? 0 : 1;
    pthread_mutex_lock(&g_lock);
    for (p = 0; p < fi.picture_count; p++) {
        const ppr_picture_info *pic = &fi.pictures[p];
        for (i = 0; i < pic->slice_count; i++) {
            const ppr_slice_info *sl = &pic->slices[i];
            int x = sl->mb_x * 16, y = sl->mb_y * 16;
            if (pic->field != PPR_FIELD_FRAME)
                y = 2 * y + (pic->field == PPR_FIELD_BOTTOM);
            if (unwritten(f, 0, x, y) || unwritten(f, 1, x >> cshift, y) ||
                unwritten(f, 2, x >> cshift, y))
                add_concealed(s, p, sl->index);
        }
    }
    pthread_mutex_unlock(&g_lock);
    ppr_frame_info_free(&fi);
}

static int open_decoder(ppr_session *s, uint32_t tag, const ppr_frame_info *info,
                        enum AVPixelFormat fmt)
{
    const AVCodec *codec = avcodec_find_decoder(AV_CODEC_ID_PRORES);
    AVCodecContext *avctx;
    int ret;

    free_decoder(s);
    s->need_reopen = 0;
    s->vulkan_offered = 0;
    if (!codec)
        return sfail(s, PPR_EDECODE, "this FFmpeg build has no ProRes decoder");
    avctx = avcodec_alloc_context3(codec);
    if (!avctx)
        return sfail(s, PPR_ENOMEM, "out of memory");
    avctx->opaque = s;
    avctx->codec_tag = tag;
    avctx->width = info->width;
    avctx->height = info->height;
    avctx->get_format = get_format;
    if (s->backend == BACKEND_VULKAN) {
        avctx->hw_device_ctx = av_buffer_ref(s->hw_device);
        if (!avctx->hw_device_ctx) {
            avcodec_free_context(&avctx);
            return sfail(s, PPR_ENOMEM, "out of memory");
        }
        avctx->thread_count = s->stream ? s->stream_threads : 1;
        if (s->stream)
            avctx->thread_type = FF_THREAD_FRAME;
        avctx->hwaccel_flags = AV_HWACCEL_FLAG_IGNORE_LEVEL | AV_HWACCEL_FLAG_ALLOW_PROFILE_MISMATCH;
        /* The ProRes Vulkan hwaccel reports slices that failed to decode, as
         * the software decoder always does, only when asked to (7.1.5 series
         * patch 19, 9.0.2 series patch 12). */
        if (!s->stream || (s->stream_flags & PPR_STREAM_ERR_DETECT))
            avctx->err_recognition |= AV_EF_BITSTREAM;
    } else {
        avctx->thread_count = s->threads;
        avctx->thread_type = FF_THREAD_SLICE;
        avctx->get_buffer2 = prefill_get_buffer;
    }
    if (s->stream)
        avctx->flags |= AV_CODEC_FLAG_COPY_OPAQUE;   /* the packet travels with its frame */
    ret = avcodec_open2(avctx, codec, NULL);
    if (ret < 0) {
        char msg[PPR_MSG_SIZE];
        last_av_error(s, msg, sizeof(msg));
        avcodec_free_context(&avctx);
        return sfail(s, ret == AVERROR(ENOMEM) ? PPR_ENOMEM : PPR_EDECODE,
                     "could not open the ProRes decoder: %s%s%s", av_err2str(ret),
                     msg[0] ? " - " : "", msg);
    }
    s->avctx = avctx;
    s->cur_tag = tag;
    s->cur_width = info->width;
    s->cur_height = info->height;
    s->cur_fmt = fmt;
    return 0;
}

static int check_planes(ppr_session *s, const ppr_frame_info *info, const ppr_planes *out)
{
    ppr_planes want;
    char msg[PPR_MSG_SIZE];
    int i, ret = ppr_frame_layout(info, &want);

    if (ret < 0) {
        snprintf(msg, sizeof(msg), "%s", tls_err);   /* sfail writes tls_err */
        return sfail(s, ret, "%s", msg);
    }
    if (!out)
        return sfail(s, PPR_EINVAL, "planes is NULL");
    if (out->count != want.count)
        return sfail(s, PPR_EINVAL, "the frame (%s) has %d planes, got %d", info->pix_fmt,
                     want.count, out->count);
    for (i = 0; i < want.count; i++) {
        const ppr_plane *p = &out->plane[i];
        if (p->width != want.plane[i].width || p->height != want.plane[i].height)
            return sfail(s, PPR_EINVAL, "plane %d: the frame's plane is %dx%d, got %dx%d", i,
                         want.plane[i].width, want.plane[i].height, p->width, p->height);
        if (p->data && p->stride < (ptrdiff_t)p->width * 2)
            return sfail(s, PPR_EINVAL, "plane %d: stride %td < %d bytes per row", i,
                         p->stride, p->width * 2);
    }
    return 0;
}

static void keep_caller_memory(void *opaque, uint8_t *data)
{
}

/* Point dst's planes at the caller's memory, one buffer reference per plane:
 * hwcontext_vulkan may import the destination (FFmpeg 9.0 imports each of
 * buf[] and, with a single buffer, places every plane inside buf[0]'s range),
 * so each reference must cover exactly its own plane. */
static int wrap_caller_planes(AVFrame *dst, const ppr_planes *out)
{
    int i;

    for (i = 0; i < out->count; i++) {
        dst->buf[i] = av_buffer_create((uint8_t *)out->plane[i].data,
                                       (size_t)out->plane[i].stride * out->plane[i].height,
                                       keep_caller_memory, NULL, 0);
        if (!dst->buf[i])
            return AVERROR(ENOMEM);
        dst->data[i]     = (uint8_t *)out->plane[i].data;
        dst->linesize[i] = (int)out->plane[i].stride;
    }
    return 0;
}

/* Can the download write straight into the caller's planes? hwcontext_vulkan
 * copies whole rows of linesize bytes out of its staging buffer, so only rows
 * without padding qualify, and the frame must have exactly the caller's size,
 * format and planes. Otherwise the frame goes through s->swframe. */
static int direct_download_ok(const ppr_session *s, const ppr_planes *out,
                              enum AVPixelFormat fmt, const ppr_frame_info *info)
{
    const AVHWFramesContext *fc = (const AVHWFramesContext *)s->frame->hw_frames_ctx->data;
    int i;

    if (fc->sw_format != fmt || s->frame->width != info->width ||
        s->frame->height != info->height || out->count != av_pix_fmt_count_planes(fmt))
        return 0;
    for (i = 0; i < out->count; i++)
        if (!out->plane[i].data || out->plane[i].stride != (ptrdiff_t)out->plane[i].width * 2)
            return 0;
    return 1;
}

/* Decode `size` bytes at `data` (already copied where needed) as one frame
 * described by `info` (only its frame-header fields are used) into out. */
static int decode_packet(ppr_session *s, const uint8_t *data, size_t size, uint32_t tag,
                         const ppr_frame_info *info, ppr_planes *out)
{
    enum AVPixelFormat fmt = av_get_pix_fmt(info->pix_fmt);
    AVFrame *src;
    int ret, drained = 0, direct = 0, i;
    char msg[PPR_MSG_SIZE];

    if ((ret = check_planes(s, info, out)) < 0)
        return ret;
    out->corrupt = 0;
    out->error_flags = 0;
    out->concealed = 0;
    pthread_mutex_lock(&g_lock);
    s->nb_concealed = 0;
    pthread_mutex_unlock(&g_lock);
    if (size > INT_MAX - AV_INPUT_BUFFER_PADDING_SIZE)
        return sfail(s, PPR_EINVAL, "packet too large");

    if (!s->avctx || s->stream || s->need_reopen || tag != s->cur_tag ||
        info->width != s->cur_width || info->height != s->cur_height || fmt != s->cur_fmt) {
        s->stream = 0;
        if ((ret = open_decoder(s, tag, info, fmt)) < 0)
            return ret;
    }

    av_packet_unref(s->pkt);
    if (av_new_packet(s->pkt, (int)size) < 0)
        return sfail(s, PPR_ENOMEM, "out of memory");
    memcpy(s->pkt->data, data, size);

    s->format_failed = 0;
    av_frame_unref(s->frame);
    av_frame_unref(s->swframe);

    ret = avcodec_send_packet(s->avctx, s->pkt);
    av_packet_unref(s->pkt);
    if (ret >= 0 || ret == AVERROR(EAGAIN)) {
        ret = avcodec_receive_frame(s->avctx, s->frame);
        if (ret == AVERROR(EAGAIN)) {
            /* frame threading or a delaying hwaccel: drain to get this frame */
            drained = 1;
            ret = avcodec_send_packet(s->avctx, NULL);
            if (ret >= 0)
                ret = avcodec_receive_frame(s->avctx, s->frame);
        }
    }
    if (ret < 0 || drained)
        avcodec_flush_buffers(s->avctx);   /* ready for the next packet */

    if (ret < 0) {
        last_av_error(s, msg, sizeof(msg));
        if (s->format_failed)
            return sfail(s, s->format_failed, "%s", msg[0] ? msg :
                         "this FFmpeg build has no ProRes Vulkan hwaccel");
        if (ret == AVERROR(ENOMEM))
            return sfail(s, PPR_ENOMEM, "out of memory while decoding");
        if (ret == AVERROR_EOF)
            return sfail(s, PPR_EDECODE, "the decoder produced no frame%s%s",
                         msg[0] ? ": " : "", msg);
        return sfail(s, PPR_EDECODE, "FFmpeg could not decode the frame: %s%s%s",
                     av_err2str(ret), msg[0] ? " - " : "", msg);
    }

    src = s->frame;
    if (s->backend == BACKEND_VULKAN) {
        if (s->frame->format != AV_PIX_FMT_VULKAN || !s->frame->hw_frames_ctx) {
            av_frame_unref(s->frame);
            s->need_reopen = 1;
            return sfail(s, PPR_ENOHWACCEL, "the decoder returned a %s frame instead of a "
                         "Vulkan frame; not accepting a software fallback",
                         av_get_pix_fmt_name(s->frame->format) ?
                         av_get_pix_fmt_name(s->frame->format) : "?");
        }
        if (direct_download_ok(s, out, fmt, info)) {
            /* saves a copy of the whole frame and its allocation */
            AVFrame *dst = s->swframe;
            if (wrap_caller_planes(dst, out) < 0) {
                av_frame_unref(dst);
                av_frame_unref(s->frame);
                return sfail(s, PPR_ENOMEM, "out of memory");
            }
            dst->format = fmt;
            dst->width  = info->width;
            dst->height = info->height;
            direct = 1;
        }
        ret = av_hwframe_transfer_data(s->swframe, s->frame, 0);
        if (ret < 0) {
            last_av_error(s, msg, sizeof(msg));
            av_frame_unref(s->frame);
            av_frame_unref(s->swframe);
            return sfail(s, ret == AVERROR(ENOMEM) ? PPR_ENOMEM : PPR_EDECODE,
                         "could not download the Vulkan frame: %s%s%s", av_err2str(ret),
                         msg[0] ? " - " : "", msg);
        }
        src = s->swframe;
    }

    out->corrupt = s->frame->decode_error_flags != 0 ||
                   (s->frame->flags & AV_FRAME_FLAG_CORRUPT) != 0;
    out->error_flags = s->frame->decode_error_flags;
    if (s->backend == BACKEND_SOFTWARE && out->corrupt)
        find_software_concealed(s, data, size, tag, s->frame);
    pthread_mutex_lock(&g_lock);
    out->concealed = s->nb_concealed;
    pthread_mutex_unlock(&g_lock);

    if (src->format != fmt || src->width < info->width || src->height < info->height) {
        ret = sfail(s, PPR_EDECODE, "the decoder output is %s %dx%d, expected %s %dx%d",
                    av_get_pix_fmt_name(src->format) ? av_get_pix_fmt_name(src->format) : "?",
                    src->width, src->height, info->pix_fmt, info->width, info->height);
        av_frame_unref(s->frame);
        av_frame_unref(s->swframe);
        return ret;
    }

    for (i = 0; i < out->count && !direct; i++) {
        const ppr_plane *p = &out->plane[i];
        const uint8_t *sp = src->data[i];
        uint8_t *dp = (uint8_t *)p->data;
        int y;
        if (!dp)
            continue;
        if (!sp) {
            av_frame_unref(s->frame);
            av_frame_unref(s->swframe);
            return sfail(s, PPR_EDECODE, "the decoded frame has no plane %d", i);
        }
        for (y = 0; y < p->height; y++)
            memcpy(dp + (ptrdiff_t)y * p->stride, sp + (ptrdiff_t)y * src->linesize[i],
                   (size_t)p->width * 2);
    }
    av_frame_unref(s->frame);
    av_frame_unref(s->swframe);
    return 0;
}

/* ppr_inspect(), keeping the message on the session. */
static int session_inspect(ppr_session *s, const uint8_t *pkt, size_t size, uint32_t tag,
                           ppr_frame_info *info)
{
    int ret = ppr_inspect(pkt, size, tag, info);
    if (ret < 0)
        snprintf(s->err, sizeof(s->err), "%s", tls_err);
    return ret;
}

int ppr_decode(ppr_session *s, const uint8_t *pkt, size_t size, uint32_t tag, ppr_planes *out)
{
    ppr_frame_info info;
    char inspect_msg[PPR_MSG_SIZE];
    int ret, inspect_ret;

    enter(s);
    if (!s)
        return leave(ppr__fail(PPR_EINVAL, "session is NULL"));
    if (!out)
        return leave(sfail(s, PPR_EINVAL, "planes is NULL"));
    inspect_ret = session_inspect(s, pkt, size, tag, &info);
    if (inspect_ret < 0) {
        /* The software decoder would fail exactly where the inspection did.
         * The Vulkan hwaccel parses the pictures itself: give it the packet
         * when the frame header is sound, so that differential tests see
         * what it does with a bad picture. */
        snprintf(inspect_msg, sizeof(inspect_msg), "%s", s->err);
        if (s->backend != BACKEND_VULKAN ||
            ppr_inspect_header(pkt, size, tag, &info) < 0) {
            sfail(s, inspect_ret, "%s", inspect_msg);
            return leave(inspect_ret);
        }
        s->err[0] = 0;
    }
    ret = decode_packet(s, pkt, size, tag, &info, out);
    ppr_frame_info_free(&info);
    if (ret == PPR_EDECODE && inspect_ret < 0)   /* both refused: report the diagnosis */
        ret = sfail(s, inspect_ret, "%s", inspect_msg);
    return leave(ret);
}

/* ------------------------------------------------------------------------ */
/* slice submission                                                           */

static void end_frame_state(ppr_session *s)
{
    int p, i;
    for (p = 0; p < 2; p++) {
        if (s->subs[p]) {
            for (i = 0; i < s->frame_info.pictures[p].slice_count; i++)
                free(s->subs[p][i].data);
            free(s->subs[p]);
            s->subs[p] = NULL;
        }
    }
    ppr_frame_info_free(&s->frame_info);
    free(s->frame_pkt);
    s->frame_pkt = NULL;
    s->frame_pkt_size = 0;
    s->in_frame = 0;
}

int ppr_frame_begin(ppr_session *s, const uint8_t *pkt, size_t size, uint32_t tag)
{
    int ret, p;

    enter(s);
    if (!s)
        return leave(ppr__fail(PPR_EINVAL, "session is NULL"));
    end_frame_state(s);
    ret = session_inspect(s, pkt, size, tag, &s->frame_info);
    if (ret < 0)
        return leave(ret);
    s->frame_pkt = malloc(size);
    if (!s->frame_pkt) {
        end_frame_state(s);
        return leave(sfail(s, PPR_ENOMEM, "out of memory"));
    }
    memcpy(s->frame_pkt, pkt, size);
    s->frame_pkt_size = size;
    for (p = 0; p < s->frame_info.picture_count; p++) {
        s->subs[p] = calloc((size_t)s->frame_info.pictures[p].slice_count, sizeof(submitted_slice));
        if (!s->subs[p]) {
            end_frame_state(s);
            return leave(sfail(s, PPR_ENOMEM, "out of memory"));
        }
    }
    s->in_frame = 1;
    return leave(0);
}

int ppr_concealed_slices(ppr_session *s, int *pictures, int *slices, int max)
{
    int i, n;

    if (!s)
        return 0;
    pthread_mutex_lock(&g_lock);
    n = s->nb_concealed;
    for (i = 0; i < n && i < max; i++) {
        if (pictures)
            pictures[i] = s->concealed[2 * i];
        if (slices)
            slices[i] = s->concealed[2 * i + 1];
    }
    pthread_mutex_unlock(&g_lock);
    return n;
}

const ppr_frame_info *ppr_frame_current(ppr_session *s)
{
    return s && s->in_frame ? &s->frame_info : NULL;
}

int ppr_frame_submit_slice(ppr_session *s, int picture, int slice_index,
                           const uint8_t *data, size_t size)
{
    submitted_slice *sl;
    uint8_t *copy = NULL;

    enter(s);
    if (!s)
        return leave(ppr__fail(PPR_EINVAL, "session is NULL"));
    if (!s->in_frame)
        return leave(sfail(s, PPR_EINVAL, "no frame begun (call ppr_frame_begin first)"));
    if (picture < 0 || picture >= s->frame_info.picture_count)
        return leave(sfail(s, PPR_EINVAL, "picture %d out of range (the frame has %d)",
                           picture, s->frame_info.picture_count));
    if (slice_index < 0 || slice_index >= s->frame_info.pictures[picture].slice_count)
        return leave(sfail(s, PPR_EINVAL, "slice %d out of range (picture %d has %d slices)",
                           slice_index, picture, s->frame_info.pictures[picture].slice_count));
    if (size > 0xFFFF)
        return leave(sfail(s, PPR_EINVAL, "slice of %zu bytes: the slice index holds at most "
                           "65535 bytes per slice", size));
    if (size && !data)
        return leave(sfail(s, PPR_EINVAL, "slice data is NULL"));
    if (size) {
        copy = malloc(size);
        if (!copy)
            return leave(sfail(s, PPR_ENOMEM, "out of memory"));
        memcpy(copy, data, size);
    }
    sl = &s->subs[picture][slice_index];
    free(sl->data);
    sl->data = copy;
    sl->size = size;
    sl->submitted = 1;
    return leave(0);
}

static void wb32(uint8_t *p, uint32_t v)
{
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

int ppr_frame_end(ppr_session *s, ppr_planes *out)
{
    const ppr_frame_info *fi;
    size_t head, total, pos;
    uint8_t *buf;
    int p, i, ret;

    enter(s);
    if (!s)
        return leave(ppr__fail(PPR_EINVAL, "session is NULL"));
    if (!s->in_frame)
        return leave(sfail(s, PPR_EINVAL, "no frame begun (call ppr_frame_begin first)"));
    fi = &s->frame_info;

    /* size: frame container + header, then per picture: header, index, data */
    head = fi->pictures[0].offset;   /* 8 + frame header size */
    total = head;
    for (p = 0; p < fi->picture_count; p++) {
        const ppr_picture_info *pic = &fi->pictures[p];
        total += (size_t)pic->header_size + (size_t)pic->slice_count * 2;
        for (i = 0; i < pic->slice_count; i++)
            total += s->subs[p][i].size;
    }
    if (total > 0x7fffffff - AV_INPUT_BUFFER_PADDING_SIZE) {
        end_frame_state(s);
        return leave(sfail(s, PPR_EINVAL, "rebuilt frame too large"));
    }
    buf = malloc(total);
    if (!buf) {
        end_frame_state(s);
        return leave(sfail(s, PPR_ENOMEM, "out of memory"));
    }
    memcpy(buf, s->frame_pkt, head);
    wb32(buf, (uint32_t)total);
    pos = head;
    for (p = 0; p < fi->picture_count; p++) {
        const ppr_picture_info *pic = &fi->pictures[p];
        size_t pic_start = pos, data_pos;
        memcpy(buf + pos, s->frame_pkt + pic->offset, (size_t)pic->header_size);
        pos += (size_t)pic->header_size;
        data_pos = pos + (size_t)pic->slice_count * 2;
        for (i = 0; i < pic->slice_count; i++) {
            const submitted_slice *sl = &s->subs[p][i];
            buf[pos + 2 * i] = (uint8_t)(sl->size >> 8);
            buf[pos + 2 * i + 1] = (uint8_t)sl->size;
            if (sl->size)
                memcpy(buf + data_pos, sl->data, sl->size);
            data_pos += sl->size;
        }
        pos = data_pos;
        wb32(buf + pic_start + 1, (uint32_t)(pos - pic_start));
    }

    ret = decode_packet(s, buf, total, fi->codec_tag, fi, out);
    free(buf);
    end_frame_state(s);
    return leave(ret);
}

/* ------------------------------------------------------------------------ */
/* streaming                                                                  */

static void stream_state_reset(ppr_session *s)
{
    s->st_in_flight = 0;
    s->st_draining = 0;
    s->st_eof = 0;
    s->st_have = 0;
}

int ppr_stream_config(ppr_session *s, int frame_threads, unsigned flags)
{
    enter(s);
    if (!s)
        return leave(ppr__fail(PPR_EINVAL, "session is NULL"));
    if (frame_threads < 0 || frame_threads > 64)
        return leave(sfail(s, PPR_EINVAL, "frame_threads must be 0..64, not %d", frame_threads));
    if (frame_threads == 0)
        frame_threads = 4;
    if (s->stream && s->avctx) {
        if (frame_threads == s->stream_threads && flags == s->stream_flags)
            return leave(0);   /* the settings in use: keep the decoder */
        return leave(sfail(s, PPR_EINVAL, "the stream has started with other settings: "
                           "ppr_stream_reset first"));
    }
    s->stream_threads = frame_threads;
    s->stream_flags = flags;
    return leave(0);
}

void ppr_stream_reset(ppr_session *s)
{
    if (!s)
        return;
    ppr__ensure_init();
    tls_session = s;
    if (s->stream)
        free_decoder(s);   /* joins the frame threads */
    s->stream = 0;
    av_frame_unref(s->frame);
    av_frame_unref(s->swframe);
    stream_state_reset(s);
    tls_session = NULL;
}

ppr_packet *ppr_packet_new(const uint8_t *data, size_t size, int64_t pts)
{
    ppr_packet *p;

    ppr__ensure_init();
    if (size > INT_MAX - AV_INPUT_BUFFER_PADDING_SIZE || (size && !data)) {
        ppr__fail(PPR_EINVAL, size && !data ? "packet data is NULL" : "packet too large");
        return NULL;
    }
    p = calloc(1, sizeof(*p));
    if (!p || !(p->av = av_packet_alloc()) || av_new_packet(p->av, (int)size) < 0) {
        if (p)
            av_packet_free(&p->av);
        free(p);
        ppr__fail(PPR_ENOMEM, "out of memory");
        return NULL;
    }
    /* av_new_packet zeroed the padding */
    if (size)
        memcpy(p->av->data, data, size);
    p->av->pts = pts;
    return p;
}

size_t ppr_packet_size(const ppr_packet *p)
{
    return p ? (size_t)p->av->size : 0;
}

const uint8_t *ppr_packet_data(const ppr_packet *p)
{
    return p ? p->av->data : NULL;
}

void ppr_packet_free(ppr_packet *p)
{
    if (!p)
        return;
    av_packet_free(&p->av);
    free(p);
}

static int stream_send(ppr_session *s, const uint8_t *pkt, size_t size, uint32_t tag,
                       int64_t pts, const AVPacket *prepared);

int ppr_send_packet(ppr_session *s, const uint8_t *pkt, size_t size, uint32_t tag, int64_t pts)
{
    enter(s);
    return leave(stream_send(s, pkt, size, tag, pts, NULL));
}

int ppr_send_prepared(ppr_session *s, const ppr_packet *p, uint32_t tag)
{
    enter(s);
    if (!p)
        return leave(stream_send(s, NULL, 0, tag, 0, NULL));
    return leave(stream_send(s, p->av->data, (size_t)p->av->size, tag, p->av->pts, p->av));
}

/* ppr_send_packet's work, between enter() and leave(): the packet is pkt/size
 * (NULL: the end of the stream), copied unless `prepared` holds it already */
static int stream_send(ppr_session *s, const uint8_t *pkt, size_t size, uint32_t tag,
                       int64_t pts, const AVPacket *prepared)
{
    ppr_frame_info info;
    enum AVPixelFormat fmt;
    char msg[PPR_MSG_SIZE];
    int ret;

    if (!s)
        return ppr__fail(PPR_EINVAL, "session is NULL");
    if (!pkt) {                                     /* end of stream */
        if (!s->stream || !s->avctx || s->st_draining || s->st_eof)
            return 0;
        ret = avcodec_send_packet(s->avctx, NULL);
        if (ret < 0 && ret != AVERROR_EOF)
            return sfail(s, PPR_EDECODE, "could not drain the decoder: %s",
                         av_err2str(ret));
        s->st_draining = 1;
        return 0;
    }
    if (size > INT_MAX - AV_INPUT_BUFFER_PADDING_SIZE)
        return sfail(s, PPR_EINVAL, "packet too large");
    /* as ppr_decode: the software decoder gets only packets that the header
     * parser accepts, the hwaccel those with a sound frame header */
    ret = s->backend == BACKEND_SOFTWARE ? session_inspect(s, pkt, size, tag, &info)
                                         : ppr_inspect_header(pkt, size, tag, &info);
    if (ret < 0) {
        if (s->backend != BACKEND_SOFTWARE)
            snprintf(s->err, sizeof(s->err), "%s", tls_err);
        return ret;
    }
    fmt = av_get_pix_fmt(info.pix_fmt);

    if (!s->avctx || !s->stream || s->need_reopen || tag != s->cur_tag ||
        info.width != s->cur_width || info.height != s->cur_height || fmt != s->cur_fmt) {
        if (s->avctx && s->stream && s->st_in_flight > 0 && !s->st_eof) {
            /* a new size or format: the frames in flight come out first */
            if (!s->st_draining) {
                avcodec_send_packet(s->avctx, NULL);
                s->st_draining = 1;
            }
            ppr_frame_info_free(&info);
            return sfail(s, PPR_EAGAIN, "the stream changes: receive the frames in flight");
        }
        av_frame_unref(s->frame);
        stream_state_reset(s);
        if (!s->stream_threads)
            s->stream_threads = 4;
        s->stream = 1;
        ret = open_decoder(s, tag, &info, fmt);
        if (ret < 0) {
            s->stream = 0;
            ppr_frame_info_free(&info);
            return ret;
        }
    } else if (s->st_eof || s->st_draining) {
        if (s->st_in_flight > 0 && !s->st_eof) {
            ppr_frame_info_free(&info);
            return sfail(s, PPR_EAGAIN, "the stream is draining: receive its frames");
        }
        avcodec_flush_buffers(s->avctx);
        stream_state_reset(s);
    }
    ppr_frame_info_free(&info);

    av_packet_unref(s->pkt);
    if (prepared) {                     /* a reference, no copy */
        if (av_packet_ref(s->pkt, prepared) < 0)
            return sfail(s, PPR_ENOMEM, "out of memory");
        av_buffer_unref(&s->pkt->opaque_ref);
    } else {
        if (av_new_packet(s->pkt, (int)size) < 0)
            return sfail(s, PPR_ENOMEM, "out of memory");
        memcpy(s->pkt->data, pkt, size);
        s->pkt->pts = pts;
    }
    s->pkt->opaque_ref = av_buffer_ref(s->pkt->buf);
    if (!s->pkt->opaque_ref) {
        av_packet_unref(s->pkt);
        return sfail(s, PPR_ENOMEM, "out of memory");
    }
    s->format_failed = 0;
    ret = avcodec_send_packet(s->avctx, s->pkt);
    av_packet_unref(s->pkt);
    if (ret == AVERROR(EAGAIN))
        return sfail(s, PPR_EAGAIN, "the decoder is full: receive a frame");
    if (ret < 0) {
        last_av_error(s, msg, sizeof(msg));
        if (s->format_failed)
            return sfail(s, s->format_failed, "%s", msg[0] ? msg :
                         "this FFmpeg build has no ProRes Vulkan hwaccel");
        if (ret == AVERROR(ENOMEM))
            return sfail(s, PPR_ENOMEM, "out of memory while decoding");
        return sfail(s, PPR_EDECODE, "FFmpeg could not decode the frame: %s%s%s",
                     av_err2str(ret), msg[0] ? " - " : "", msg);
    }
    s->st_in_flight++;
    return 0;
}

int ppr_receive_frame(ppr_session *s, ppr_stream_frame *out)
{
    const AVPixFmtDescriptor *desc;
    char msg[PPR_MSG_SIZE];
    int ret, i, cw;

    enter(s);
    if (!s || !out)
        return leave(ppr__fail(PPR_EINVAL, "session or out is NULL"));
    memset(out, 0, sizeof(*out));
    av_frame_unref(s->frame);
    av_frame_unref(s->swframe);
    s->st_have = 0;
    if (!s->stream || !s->avctx)
        return leave(PPR_RECV_AGAIN);
    if (s->st_eof)
        return leave(PPR_RECV_EOF);
    pthread_mutex_lock(&g_lock);
    s->nb_concealed = 0;
    pthread_mutex_unlock(&g_lock);

    ret = avcodec_receive_frame(s->avctx, s->frame);
    if (ret == AVERROR(EAGAIN))
        return leave(PPR_RECV_AGAIN);
    if (ret == AVERROR_EOF) {
        s->st_eof = 1;
        s->st_draining = 0;
        s->st_in_flight = 0;
        return leave(PPR_RECV_EOF);
    }
    if (s->st_in_flight > 0)
        s->st_in_flight--;
    if (ret < 0) {
        last_av_error(s, msg, sizeof(msg));
        if (s->format_failed)
            return leave(sfail(s, s->format_failed, "%s", msg[0] ? msg :
                               "this FFmpeg build has no ProRes Vulkan hwaccel"));
        if (ret == AVERROR(ENOMEM))
            return leave(sfail(s, PPR_ENOMEM, "out of memory while decoding"));
        return leave(sfail(s, PPR_EDECODE, "FFmpeg could not decode the frame: %s%s%s",
                           av_err2str(ret), msg[0] ? " - " : "", msg));
    }

    if (s->backend == BACKEND_VULKAN) {
        if (s->frame->format != AV_PIX_FMT_VULKAN || !s->frame->hw_frames_ctx) {
            int f = s->frame->format;
            av_frame_unref(s->frame);
            s->need_reopen = 1;
            return leave(sfail(s, PPR_ENOHWACCEL, "the decoder returned a %s frame instead of "
                               "a Vulkan frame; not accepting a software fallback",
                               av_get_pix_fmt_name(f) ? av_get_pix_fmt_name(f) : "?"));
        }
        s->st_fmt = ((const AVHWFramesContext *)s->frame->hw_frames_ctx->data)->sw_format;
    } else {
        s->st_fmt = s->frame->format;
    }
    desc = av_pix_fmt_desc_get(s->st_fmt);
    if (!desc || (desc->flags & AV_PIX_FMT_FLAG_HWACCEL) || desc->comp[0].depth <= 8 ||
        s->frame->width <= 0 || s->frame->height <= 0) {
        av_frame_unref(s->frame);
        return leave(sfail(s, PPR_EDECODE, "unexpected decoder output %s %dx%d",
                           desc ? desc->name : "?", s->frame->width, s->frame->height));
    }

    out->width = s->frame->width;
    out->height = s->frame->height;
    snprintf(out->pix_fmt, sizeof(out->pix_fmt), "%s", desc->name);
    out->bit_depth = desc->comp[0].depth;
    out->pts = s->frame->pts;
    out->interlaced = !!(s->frame->flags & AV_FRAME_FLAG_INTERLACED);
    out->top_field_first = !!(s->frame->flags & AV_FRAME_FLAG_TOP_FIELD_FIRST);
    out->corrupt = s->frame->decode_error_flags != 0 ||
                   (s->frame->flags & AV_FRAME_FLAG_CORRUPT) != 0;
    out->error_flags = s->frame->decode_error_flags;
    if (s->backend == BACKEND_SOFTWARE && out->corrupt && s->frame->opaque_ref &&
        s->frame->opaque_ref->size > AV_INPUT_BUFFER_PADDING_SIZE)
        find_software_concealed(s, s->frame->opaque_ref->data,
                                s->frame->opaque_ref->size - AV_INPUT_BUFFER_PADDING_SIZE,
                                s->cur_tag, s->frame);
    av_buffer_unref(&s->frame->opaque_ref);
    pthread_mutex_lock(&g_lock);
    out->concealed = s->backend == BACKEND_SOFTWARE ? s->nb_concealed : 0;
    if (s->backend != BACKEND_SOFTWARE)
        s->nb_concealed = 0;   /* frame threads interleave the hwaccel's lines */
    pthread_mutex_unlock(&g_lock);

    memset(&out->layout, 0, sizeof(out->layout));
    out->layout.count = av_pix_fmt_count_planes(s->st_fmt);
    if (out->layout.count > 4)
        out->layout.count = 4;
    cw = AV_CEIL_RSHIFT(out->width, desc->log2_chroma_w);
    for (i = 0; i < out->layout.count; i++) {
        out->layout.plane[i].width = (i == 1 || i == 2) ? cw : out->width;
        out->layout.plane[i].height = (i == 1 || i == 2) ?
                                      AV_CEIL_RSHIFT(out->height, desc->log2_chroma_h) : out->height;
        out->layout.plane[i].stride = (ptrdiff_t)out->layout.plane[i].width * 2;
    }
    out->layout.corrupt = out->corrupt;
    out->layout.error_flags = out->error_flags;
    out->layout.concealed = out->concealed;
    s->st_layout = out->layout;
    s->st_have = 1;
    return leave(PPR_RECV_FRAME);
}

/* ppr_download_frame's and ppr_frame_download's work: write `frame` (received
 * with layout `want` and format `fmt`) into the caller's planes `out`, through
 * `sw` (a scratch frame, unreferenced on return) unless the planes are unpadded.
 * Touches no session state but s->err (s may be NULL: the message is only this
 * thread's). */
/* Do out's planes have the count and sizes of the received frame's layout
 * `want`? 0 or PPR_EINVAL with a message. */
static int check_layout(ppr_session *s, const ppr_planes *want, const ppr_planes *out)
{
    int i;

    if (out->count != want->count)
        return sfail(s, PPR_EINVAL, "the frame has %d planes, got %d", want->count, out->count);
    for (i = 0; i < want->count; i++)
        if (out->plane[i].width != want->plane[i].width ||
            out->plane[i].height != want->plane[i].height)
            return sfail(s, PPR_EINVAL, "plane %d: the frame's plane is %dx%d, got %dx%d",
                         i, want->plane[i].width, want->plane[i].height,
                         out->plane[i].width, out->plane[i].height);
    return 0;
}

/* The received frame's damage report, as a download gives it */
static void copy_damage(ppr_planes *out, const ppr_planes *want)
{
    out->corrupt = want->corrupt;
    out->error_flags = want->error_flags;
    out->concealed = want->concealed;
}

static int download_into(ppr_session *s, AVFrame *frame, AVFrame *sw, int vulkan,
                         enum AVPixelFormat fmt, const ppr_planes *want, ppr_planes *out)
{
    const AVFrame *src = frame;
    char msg[PPR_MSG_SIZE];
    int i, ret, direct = 1;

    if ((ret = check_layout(s, want, out)) < 0)
        return ret;
    for (i = 0; i < want->count; i++) {
        const ppr_plane *p = &out->plane[i];
        if (p->data && p->stride < (ptrdiff_t)p->width * 2)
            return sfail(s, PPR_EINVAL, "plane %d: stride %td < %d bytes per row", i,
                         p->stride, p->width * 2);
        if (!p->data || p->stride != (ptrdiff_t)p->width * 2)
            direct = 0;
    }
    copy_damage(out, want);

    if (vulkan) {
        av_frame_unref(sw);
        if (direct) {
            /* hwcontext_vulkan writes whole rows: only unpadded planes */
            if (wrap_caller_planes(sw, out) < 0) {
                av_frame_unref(sw);
                return sfail(s, PPR_ENOMEM, "out of memory");
            }
            sw->format = fmt;
            sw->width  = frame->width;
            sw->height = frame->height;
        }
        ret = av_hwframe_transfer_data(sw, frame, 0);
        if (ret < 0) {
            last_av_error(s, msg, sizeof(msg));
            ret = sfail(s, ret == AVERROR(ENOMEM) ? PPR_ENOMEM : PPR_EDECODE,
                        "could not download the Vulkan frame: %s%s%s", av_err2str(ret),
                        msg[0] ? " - " : "", msg);
            av_frame_unref(sw);
            return ret;
        }
        src = sw;
    } else {
        direct = 0;
    }
    ret = 0;
    for (i = 0; i < out->count && !direct; i++) {
        const ppr_plane *p = &out->plane[i];
        int y;
        if (!p->data)
            continue;
        if (!src->data[i]) {
            ret = sfail(s, PPR_EDECODE, "the decoded frame has no plane %d", i);
            break;
        }
        for (y = 0; y < p->height; y++)
            memcpy((uint8_t *)p->data + (ptrdiff_t)y * p->stride,
                   src->data[i] + (ptrdiff_t)y * src->linesize[i], (size_t)p->width * 2);
    }
    av_frame_unref(sw);
    return ret;
}

int ppr_download_frame(ppr_session *s, ppr_planes *out)
{
    int ret;

    enter(s);
    if (!s || !out)
        return leave(ppr__fail(PPR_EINVAL, "session or planes is NULL"));
    if (!s->stream || !s->st_have)
        return leave(sfail(s, PPR_EINVAL, "no frame received: call ppr_receive_frame first"));
    ret = download_into(s, s->frame, s->swframe, s->backend == BACKEND_VULKAN, s->st_fmt,
                        &s->st_layout, out);
    av_frame_unref(s->frame);
    av_frame_unref(s->swframe);
    s->st_have = 0;
    return leave(ret);
}

static void host_buffer_release(void *opaque)
{
    device_drop(opaque, 1);
}

ppr_host_buffer *ppr_host_buffer_new(ppr_session *s, size_t size)
{
    ppr_host_buffer *b = NULL;
    int ret;

    enter(s);
    if (!s) {
        ppr__fail(PPR_EINVAL, "session is NULL");
    } else if (s->backend != BACKEND_VULKAN || !s->hw_device || !s->dev) {
        sfail(s, PPR_EINVAL, "host buffers need a Vulkan session");
    } else if (!size || size > ((size_t)1 << 40)) {
        sfail(s, PPR_EINVAL, "a host buffer of %zu bytes", size);
    } else {
        /* the buffer counts as a user of the shared device, so that sessions
         * opened while it lives share that device rather than add one */
        pthread_mutex_lock(&g_lock);
        s->dev->holds++;
        pthread_mutex_unlock(&g_lock);
        ret = ppr__host_buffer_create(&b, s->hw_device, size, host_buffer_release, s->dev);
        if (ret < 0)
            snprintf(s->err, sizeof(s->err), "%s", tls_err);
    }
    leave(0);
    return b;
}

/* After a copy into a host or a CUDA buffer was started with the received frame (ret):
 * the frame's reference moved into the buffer, the damage report into out. */
static int took_frame(ppr_session *s, ppr_planes *out, int ret)
{
    if (ret < 0) {
        snprintf(s->err, sizeof(s->err), "%s", tls_err);
        return ret;
    }
    copy_damage(out, &s->st_layout);
    av_frame_unref(s->frame);   /* moved into the buffer already */
    av_frame_unref(s->swframe);
    s->st_have = 0;
    return 0;
}

int ppr_download_start(ppr_session *s, ppr_host_buffer *b, ppr_planes *out)
{
    int ret;

    enter(s);
    if (!s || !b || !out)
        return leave(ppr__fail(PPR_EINVAL, "session, host buffer or planes is NULL"));
    if (!s->stream || !s->st_have)
        return leave(sfail(s, PPR_EINVAL, "no frame received: call ppr_receive_frame first"));
    if (s->backend != BACKEND_VULKAN)
        return leave(sfail(s, PPR_EINVAL, "host buffers take Vulkan frames: use "
                           "ppr_download_frame for a software session"));
    if ((ret = check_layout(s, &s->st_layout, out)) < 0)
        return leave(ret);
    return leave(took_frame(s, out, ppr__host_download_start(b, s->frame, out)));
}

int ppr_cuda_open(ppr_session *s, ppr_cuda **out)
{
    int ret;

    enter(s);
    if (!s || !out)
        return leave(ppr__fail(PPR_EINVAL, "session or out is NULL"));
    *out = NULL;
    if (s->backend != BACKEND_VULKAN || !s->hw_device || !s->dev)
        return leave(sfail(s, PPR_EINVAL, "CUDA frames need a Vulkan session"));
    /* like a host buffer, the CUDA side holds the shared device */
    pthread_mutex_lock(&g_lock);
    s->dev->holds++;
    pthread_mutex_unlock(&g_lock);
    ret = ppr__cuda_create(out, s->hw_device, s->device_name, host_buffer_release, s->dev);
    if (ret < 0)
        snprintf(s->err, sizeof(s->err), "%s", tls_err);
    return leave(ret);
}

int ppr_cuda_download_start(ppr_session *s, ppr_cuda_buffer *b, ppr_planes *out)
{
    int ret;

    enter(s);
    if (!s || !b || !out)
        return leave(ppr__fail(PPR_EINVAL, "session, CUDA buffer or planes is NULL"));
    if (!s->stream || !s->st_have)
        return leave(sfail(s, PPR_EINVAL, "no frame received: call ppr_receive_frame first"));
    if (s->backend != BACKEND_VULKAN)
        return leave(sfail(s, PPR_EINVAL, "CUDA buffers take Vulkan frames"));
    if ((ret = check_layout(s, &s->st_layout, out)) < 0)
        return leave(ret);
    return leave(took_frame(s, out, ppr__cuda_download_start(b, s->frame, out)));
}

static int g_frames_live;   /* ppr_frame handles not freed (__atomic) */

/* A received frame taken out of its session (ppr_take_frame) */
struct ppr_frame {
    AVFrame *frame;             /* the decoded frame: a reference */
    AVFrame *sw;                /* scratch download target */
    int vulkan;
    enum AVPixelFormat fmt;     /* its downloaded format */
    ppr_planes layout;          /* as ppr_receive_frame reported */
};

ppr_frame *ppr_take_frame(ppr_session *s)
{
    ppr_frame *f;

    enter(s);
    if (!s) {
        ppr__fail(PPR_EINVAL, "session is NULL");
        leave(0);
        return NULL;
    }
    if (!s->stream || !s->st_have) {
        sfail(s, PPR_EINVAL, "no frame received: call ppr_receive_frame first");
        leave(0);
        return NULL;
    }
    f = calloc(1, sizeof(*f));
    if (!f || !(f->frame = av_frame_alloc()) || !(f->sw = av_frame_alloc())) {
        if (f) {
            av_frame_free(&f->frame);
            free(f);
        }
        sfail(s, PPR_ENOMEM, "out of memory");
        leave(0);
        return NULL;
    }
    __atomic_add_fetch(&g_frames_live, 1, __ATOMIC_RELAXED);
    av_frame_move_ref(f->frame, s->frame);   /* the session holds no frame now */
    av_frame_unref(s->swframe);
    f->vulkan = s->backend == BACKEND_VULKAN;
    f->fmt = s->st_fmt;
    f->layout = s->st_layout;
    s->st_have = 0;
    leave(0);
    return f;
}

int ppr_frame_download(ppr_frame *f, ppr_planes *out)
{
    int ret;

    enter(NULL);
    if (!f || !out)
        return leave(ppr__fail(PPR_EINVAL, "frame or planes is NULL"));
    if (!f->frame->buf[0])
        return leave(ppr__fail(PPR_EINVAL, "the frame was downloaded already"));
    ret = download_into(NULL, f->frame, f->sw, f->vulkan, f->fmt, &f->layout, out);
    av_frame_unref(f->frame);
    return leave(ret);
}

void ppr_frame_free(ppr_frame *f)
{
    if (!f)
        return;
    av_frame_free(&f->frame);
    av_frame_free(&f->sw);
    free(f);
    __atomic_sub_fetch(&g_frames_live, 1, __ATOMIC_RELAXED);
}

int ppr_frames_live(void)
{
    return __atomic_load_n(&g_frames_live, __ATOMIC_RELAXED);
}
