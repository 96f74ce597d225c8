/*
 * device.c - the Vulkan devices that sessions share, one per device string and
 * validation setting, held by the sessions and by the host buffers and CUDA
 * sides made on them. See pyprores.h for the API.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libavutil/avutil.h>
#include <libavutil/dict.h>
#include <libavutil/error.h>
#include <libavutil/hwcontext.h>
#include <libavutil/hwcontext_vulkan.h>
#include <libavutil/version.h>

#include "session.h"

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
    ppr__lock();
    if (hold)
        d->holds--;
    else
        d->users--;
    if (!d->users && !d->holds) {
        ppr__device_remove(d);
        last = 1;
    }
    ppr__unlock();
    if (last) {
        av_buffer_unref(&d->ref);
        free(d);
    }
}

void ppr__device_release(shared_device *d)
{
    device_drop(d, 0);
}

void ppr__device_hold(ppr_session *s)
{
    ppr__lock();
    s->dev->holds++;
    ppr__unlock();
}

void ppr__device_unhold(void *opaque)
{
    device_drop(opaque, 1);
}

/* FFmpeg 9's hwcontext_vulkan downloads and uploads with VK_EXT_host_image_copy
 * where the device offers it (lavapipe does). Validation layers older than
 * that extension do not intercept its calls but still wrap the handles passed
 * to them, so the driver gets the layer's VkImage handles and crashes
 * (vkCopyImageToMemoryEXT in lavapipe, under Debian 12's layer 1.3.239). The
 * layers know the extension from about the 1.3.268 SDK on. */
#define PPR_HOST_IMAGE_COPY "VK_EXT_host_image_copy"  /* older Vulkan headers lack the macro */
#define PPR_LAYER_KNOWS_HOST_IMAGE_COPY VK_MAKE_API_VERSION(0, 1, 3, 268)

int ppr__has_device_extension(const AVVulkanDeviceContext *vk, const char *name)
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

    if (!vk || !ppr__has_device_extension(vk, PPR_HOST_IMAGE_COPY))
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

int ppr__device_acquire(ppr_session *s, const char *key, const char *device,
                        AVDictionary *opts)
{
    shared_device *d;
    int ret;

    ppr__lock();
    d = ppr__device_find(key);
    if (d) {
        s->hw_device = av_buffer_ref(d->ref);
        if (s->hw_device) {
            d->users++;
            s->dev = d;
        }
    }
    ppr__unlock();
    if (d) {
        if (!s->hw_device)
            return AVERROR(ENOMEM);
        vulkan_device_name(s);
        return 0;
    }

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
    ppr__lock();
    ppr__device_add(d);
    ppr__unlock();
    vulkan_device_name(s);
    return 0;
}

int ppr_device_sessions(ppr_session *s)
{
    int n;
    if (!s || !s->dev)
        return 0;
    ppr__lock();
    n = s->dev->users;
    ppr__unlock();
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
const char *ppr__env_validation(int *no_practices)
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
void ppr__vulkan_idle_before_free(ppr_session *s)
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

const char *ppr_session_note(ppr_session *s) { return s && s->dev ? s->dev->note : ""; }
