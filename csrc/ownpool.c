/*
 * ownpool.c - the decoder's frames from a pool of the session's own
 * (PPR_STREAM_OWN_POOL), so that CUDA can read the decoder's images in place
 * (cudaip.c, PPR_COPY_NONE): per frame one LINEAR image per plane (the
 * formats the hwaccel's frame_params asks for: R16 for every ProRes format),
 * each in DEVICE_LOCAL memory of its own, exportable as an opaque fd where
 * the device can (dedicated when the image prefers or requires it), with a
 * timeline semaphore per image, exportable too. hwcontext_vulkan allocates
 * LINEAR images only from HOST_VISIBLE memory (alloc_bind_mem), which on
 * NVIDIA is system memory, and OPTIMAL ones cannot be read as pitched memory.
 *
 * The frames context is made in get_format (session.c) as libavcodec would
 * (avcodec_get_hw_frames_parameters), its tiling LINEAR and its pool ours
 * (AVHWFramesContext.pool; hwcontext_vulkan makes no pool of its own then).
 * AVVkFrame.internal is hwcontext_vulkan's private state and stays NULL here:
 * the frames context's lock_frame/unlock_frame are ours (a mutex per image),
 * and nothing else the decoder, the downloads or the copies use touches it
 * (only hwcontext's CUDA and DRM mappings do, which no path here calls).
 * Images start in layout UNDEFINED, access 0, queue family IGNORED (shared
 * CONCURRENT by the device's families when it has more than one, as
 * hwcontext does): the hwaccel's first barrier (IGNORED to IGNORED) moves them
 * to GENERAL before its shaders write every sample; hwcontext's prepare_frame
 * is not run.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavutil/buffer.h>
#include <libavutil/hwcontext.h>
#include <libavutil/hwcontext_vulkan.h>
#include <libavutil/log.h>
#include <libavutil/pixdesc.h>

#include "session.h"

#define OWN_MAGIC 0x70707231u   /* "ppr1": an image of an own pool */

typedef struct own_fns {
    PFN_vkCreateImage CreateImage;
    PFN_vkDestroyImage DestroyImage;
    PFN_vkGetImageMemoryRequirements2 GetImageMemoryRequirements2;
    PFN_vkGetImageSubresourceLayout GetImageSubresourceLayout;
    PFN_vkBindImageMemory BindImageMemory;
    PFN_vkAllocateMemory AllocateMemory;
    PFN_vkFreeMemory FreeMemory;
    PFN_vkCreateSemaphore CreateSemaphore;
    PFN_vkDestroySemaphore DestroySemaphore;
    PFN_vkWaitSemaphores WaitSemaphores;
    PFN_vkGetPhysicalDeviceMemoryProperties GetPhysicalDeviceMemoryProperties;
    PFN_vkGetPhysicalDeviceImageFormatProperties2 GetPhysicalDeviceImageFormatProperties2;
    PFN_vkGetPhysicalDeviceFormatProperties GetPhysicalDeviceFormatProperties;
} own_fns;

/* What the images of one frames context are made of; freed with the pool,
 * once its last image is gone (av_buffer_pool_init2's pool_free). */
typedef struct own_pool {
    AVBufferRef *device;            /* a reference: images outlive the frames context's user */
    VkDevice dev;
    VkPhysicalDevice phys;
    const VkAllocationCallbacks *alloc;
    own_fns vk;
    VkPhysicalDeviceMemoryProperties mprops;
    int nb;                         /* images (planes) per frame */
    VkFormat fmt[4];
    uint32_t w[4], h[4];
    VkImageUsageFlags usage;
    VkImageCreateFlags flags;
    uint32_t qfs[64];               /* the device's queue families, each once */
    uint32_t nb_qfs;
    int export_mem, export_sem;     /* made exportable (opaque fd) */
    AVBufferPool *pool;
} own_pool;

typedef struct own_image {
    AVVkFrame vkf;                  /* first: the frame's data[0] points here */
    uint32_t magic;
    own_pool *pool;
    pthread_mutex_t lock;           /* lock_frame/unlock_frame, and the slot */
    ppr__own_info info;
    void *slot;                     /* a user's state of this image (cudaip.c's import) */
    void (*slot_free)(void *);
} own_image;

static int g_own_images_live;       /* __atomic */

int ppr_own_images_live(void) { return __atomic_load_n(&g_own_images_live, __ATOMIC_RELAXED); }

static void image_destroy(own_image *im)
{
    own_pool *p = im->pool;
    int i, nb_sems = 0;

    /* work submitted on the images ends first (hwcontext's vulkan_frame_free does the same) */
    while (nb_sems < 4 && im->vkf.sem[nb_sems])
        nb_sems++;
    if (nb_sems)
        p->vk.WaitSemaphores(p->dev, &(VkSemaphoreWaitInfo) {
                .sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
                .semaphoreCount = nb_sems,
                .pSemaphores = im->vkf.sem,
                .pValues = im->vkf.sem_value,
            }, UINT64_MAX);
    if (im->slot_free && im->slot)
        im->slot_free(im->slot);   /* before the memory it may map goes */
    for (i = 0; i < 4; i++) {
        if (im->vkf.img[i])
            p->vk.DestroyImage(p->dev, im->vkf.img[i], p->alloc);
        if (im->vkf.mem[i])
            p->vk.FreeMemory(p->dev, im->vkf.mem[i], p->alloc);
        if (im->vkf.sem[i])
            p->vk.DestroySemaphore(p->dev, im->vkf.sem[i], p->alloc);
    }
    pthread_mutex_destroy(&im->lock);
    free(im);
    __atomic_sub_fetch(&g_own_images_live, 1, __ATOMIC_RELAXED);
}

static void image_free_cb(void *opaque, uint8_t *data)
{
    image_destroy((own_image *)data);
}

static void pool_free_cb(void *opaque)
{
    own_pool *p = opaque;
    av_buffer_unref(&p->device);
    free(p);
}

static AVBufferRef *pool_alloc(void *opaque, size_t size)
{
    own_pool *p = opaque;
    own_image *im;
    AVBufferRef *buf;
    VkResult r;
    int i;
    uint32_t t;

    if (!(im = calloc(1, sizeof(*im))))
        return NULL;
    im->magic = OWN_MAGIC;
    im->pool = p;
    pthread_mutex_init(&im->lock, NULL);
    __atomic_add_fetch(&g_own_images_live, 1, __ATOMIC_RELAXED);
    im->vkf.tiling = VK_IMAGE_TILING_LINEAR;
    im->info.nb = p->nb;
    im->info.exportable = p->export_mem && p->export_sem;
    for (i = 0; i < p->nb; i++) {
        VkMemoryDedicatedRequirements ded = { .sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_REQUIREMENTS };
        VkMemoryRequirements2 req = { .sType = VK_STRUCTURE_TYPE_MEMORY_REQUIREMENTS_2, .pNext = &ded };
        VkMemoryDedicatedAllocateInfo ded_alloc = {
            .sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO,
        };
        VkExportMemoryAllocateInfo exp_alloc = {
            .sType = VK_STRUCTURE_TYPE_EXPORT_MEMORY_ALLOCATE_INFO,
            .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT,
        };
        VkSubresourceLayout sl;
        int type = -1, use_ded;
        const void *chain = NULL;

        r = p->vk.CreateImage(p->dev, &(VkImageCreateInfo) {
                .sType = VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO,
                .pNext = p->export_mem ? &(VkExternalMemoryImageCreateInfo) {
                    .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMAGE_CREATE_INFO,
                    .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT,
                } : NULL,
                .flags = p->flags,
                .imageType = VK_IMAGE_TYPE_2D,
                .format = p->fmt[i],
                .extent = { p->w[i], p->h[i], 1 },
                .mipLevels = 1,
                .arrayLayers = 1,
                .samples = VK_SAMPLE_COUNT_1_BIT,
                .tiling = VK_IMAGE_TILING_LINEAR,
                .usage = p->usage,
                .sharingMode = p->nb_qfs > 1 ? VK_SHARING_MODE_CONCURRENT : VK_SHARING_MODE_EXCLUSIVE,
                .queueFamilyIndexCount = p->nb_qfs,
                .pQueueFamilyIndices = p->qfs,
                .initialLayout = VK_IMAGE_LAYOUT_UNDEFINED,
            }, p->alloc, &im->vkf.img[i]);
        if (r != VK_SUCCESS) {
            av_log(NULL, AV_LOG_ERROR, "pyprores: vkCreateImage (a linear image of the frame "
                   "pool) failed: VkResult %d\n", (int)r);
            goto fail;
        }
        p->vk.GetImageMemoryRequirements2(p->dev, &(VkImageMemoryRequirementsInfo2) {
                .sType = VK_STRUCTURE_TYPE_IMAGE_MEMORY_REQUIREMENTS_INFO_2,
                .image = im->vkf.img[i],
            }, &req);
        /* device-local memory the image may use: the first such type (types are
         * listed best first) */
        for (t = 0; t < p->mprops.memoryTypeCount && type < 0; t++)
            if ((req.memoryRequirements.memoryTypeBits & (1u << t)) &&
                (p->mprops.memoryTypes[t].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT))
                type = (int)t;
        if (type < 0) {
            av_log(NULL, AV_LOG_ERROR, "pyprores: no device-local memory type for a linear "
                   "image of the frame pool (memoryTypeBits 0x%x)\n",
                   (unsigned)req.memoryRequirements.memoryTypeBits);
            goto fail;
        }
        use_ded = ded.prefersDedicatedAllocation || ded.requiresDedicatedAllocation;
        if (use_ded) {
            ded_alloc.image = im->vkf.img[i];
            ded_alloc.pNext = chain;
            chain = &ded_alloc;
        }
        if (p->export_mem) {
            exp_alloc.pNext = chain;
            chain = &exp_alloc;
        }
        r = p->vk.AllocateMemory(p->dev, &(VkMemoryAllocateInfo) {
                .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                .pNext = chain,
                .allocationSize = req.memoryRequirements.size,
                .memoryTypeIndex = (uint32_t)type,
            }, p->alloc, &im->vkf.mem[i]);
        if (r != VK_SUCCESS) {
            av_log(NULL, AV_LOG_ERROR, "pyprores: vkAllocateMemory (%llu bytes of device-local "
                   "memory for the frame pool) failed: VkResult %d\n",
                   (unsigned long long)req.memoryRequirements.size, (int)r);
            goto fail;
        }
        r = p->vk.BindImageMemory(p->dev, im->vkf.img[i], im->vkf.mem[i], 0);
        if (r != VK_SUCCESS) {
            av_log(NULL, AV_LOG_ERROR, "pyprores: vkBindImageMemory failed: VkResult %d\n", (int)r);
            goto fail;
        }
        p->vk.GetImageSubresourceLayout(p->dev, im->vkf.img[i], &(VkImageSubresource) {
                .aspectMask = VK_IMAGE_ASPECT_COLOR_BIT,
            }, &sl);
        r = p->vk.CreateSemaphore(p->dev, &(VkSemaphoreCreateInfo) {
                .sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO,
                .pNext = &(VkSemaphoreTypeCreateInfo) {
                    .sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                    .pNext = p->export_sem ? &(VkExportSemaphoreCreateInfo) {
                        .sType = VK_STRUCTURE_TYPE_EXPORT_SEMAPHORE_CREATE_INFO,
                        .handleTypes = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT,
                    } : NULL,
                    .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE,
                    .initialValue = 0,
                },
            }, p->alloc, &im->vkf.sem[i]);
        if (r != VK_SUCCESS) {
            av_log(NULL, AV_LOG_ERROR, "pyprores: vkCreateSemaphore (timeline) failed: "
                   "VkResult %d\n", (int)r);
            goto fail;
        }
        im->vkf.size[i] = req.memoryRequirements.size;
        im->vkf.offset[i] = 0;
        im->vkf.flags |= p->mprops.memoryTypes[type].propertyFlags;
        im->vkf.access[i] = 0;
        im->vkf.layout[i] = VK_IMAGE_LAYOUT_UNDEFINED;
        im->vkf.sem_value[i] = 0;
        /* no ownership to transfer: shared by all families, or exclusive to the
         * one there is (a barrier from a family to IGNORED would be a release) */
        im->vkf.queue_family[i] = VK_QUEUE_FAMILY_IGNORED;
        im->info.offset[i] = sl.offset;
        im->info.row_pitch[i] = sl.rowPitch;
        im->info.mem_size[i] = req.memoryRequirements.size;
        im->info.width[i] = p->w[i];
        im->info.height[i] = p->h[i];
        im->info.dedicated[i] = use_ded;
    }
    if (!(buf = av_buffer_create((uint8_t *)im, sizeof(AVVkFrame), image_free_cb, p, 0)))
        goto fail;
    return buf;

fail:
    image_destroy(im);
    return NULL;
}

static void own_lock_frame(AVHWFramesContext *fc, AVVkFrame *vkf)
{
    pthread_mutex_lock(&((own_image *)vkf)->lock);
}

static void own_unlock_frame(AVHWFramesContext *fc, AVVkFrame *vkf)
{
    pthread_mutex_unlock(&((own_image *)vkf)->lock);
}

/* AVHWFramesContext.free: hwcontext does not uninit a pool it did not make. */
static void frames_free(AVHWFramesContext *fc)
{
    AVBufferPool *pool = fc->user_opaque;
    av_buffer_pool_uninit(&pool);
    fc->pool = NULL;
}

static own_image *own_image_of(const AVFrame *frame)
{
    const AVHWFramesContext *fc;
    own_image *im;

    if (!frame || frame->format != AV_PIX_FMT_VULKAN || !frame->hw_frames_ctx || !frame->data[0])
        return NULL;
    fc = (const AVHWFramesContext *)frame->hw_frames_ctx->data;
    if (fc->free != frames_free)
        return NULL;
    im = (own_image *)frame->data[0];
    return im->magic == OWN_MAGIC ? im : NULL;
}

int ppr__own_frame_info(const AVFrame *frame, ppr__own_info *info)
{
    own_image *im = own_image_of(frame);
    if (!im)
        return 0;
    if (info)
        *info = im->info;
    return 1;
}

void *ppr__own_frame_slot(const AVFrame *frame, void *(*swap)(void *old, void *arg), void *arg,
                          void (*slot_free)(void *))
{
    own_image *im = own_image_of(frame);
    void *now;

    if (!im)
        return NULL;
    pthread_mutex_lock(&im->lock);
    now = swap(im->slot, arg);
    if (now != im->slot && im->slot && im->slot_free)
        im->slot_free(im->slot);
    im->slot = now;
    im->slot_free = slot_free;
    pthread_mutex_unlock(&im->lock);
    return now;
}

#define LOAD(field, name)                                                      \
    do {                                                                       \
        if (!(p->vk.field = (void *)hw->get_proc_addr(hw->inst, name))) {      \
            av_log(avctx, AV_LOG_ERROR, "pyprores: the Vulkan device has no %s\n", name); \
            goto fail;                                                         \
        }                                                                      \
    } while (0)

int ppr__own_pool_frames(AVCodecContext *avctx)
{
    AVHWDeviceContext *dc = (AVHWDeviceContext *)avctx->hw_device_ctx->data;
    AVVulkanDeviceContext *hw = dc->hwctx;
    AVBufferRef *frames = NULL;
    AVHWFramesContext *fc;
    AVVulkanFramesContext *vfc;
    const AVPixFmtDescriptor *desc;
    own_pool *p = NULL;
    VkExternalImageFormatProperties eprops = {
        .sType = VK_STRUCTURE_TYPE_EXTERNAL_IMAGE_FORMAT_PROPERTIES,
    };
    VkImageFormatProperties2 props = {
        .sType = VK_STRUCTURE_TYPE_IMAGE_FORMAT_PROPERTIES_2,
        .pNext = &eprops,
    };
    VkResult r;
    int ret, i, j, exportable;

    ret = avcodec_get_hw_frames_parameters(avctx, avctx->hw_device_ctx, AV_PIX_FMT_VULKAN, &frames);
    if (ret < 0) {
        av_log(avctx, AV_LOG_ERROR, "pyprores: the hwaccel gave no frames parameters for the "
               "frame pool: %s\n", av_err2str(ret));
        return ret;
    }
    fc = (AVHWFramesContext *)frames->data;
    vfc = fc->hwctx;
    desc = av_pix_fmt_desc_get(fc->sw_format);
    ret = AVERROR_EXTERNAL;
    if (!(p = calloc(1, sizeof(*p))))
        goto fail_nomem;
    if (!(p->device = av_buffer_ref(avctx->hw_device_ctx)))
        goto fail_nomem;
    p->dev = hw->act_dev;
    p->phys = hw->phys_dev;
    p->alloc = hw->alloc;
    LOAD(CreateImage, "vkCreateImage");
    LOAD(DestroyImage, "vkDestroyImage");
    LOAD(GetImageMemoryRequirements2, "vkGetImageMemoryRequirements2");
    LOAD(GetImageSubresourceLayout, "vkGetImageSubresourceLayout");
    LOAD(BindImageMemory, "vkBindImageMemory");
    LOAD(AllocateMemory, "vkAllocateMemory");
    LOAD(FreeMemory, "vkFreeMemory");
    LOAD(CreateSemaphore, "vkCreateSemaphore");
    LOAD(DestroySemaphore, "vkDestroySemaphore");
    LOAD(WaitSemaphores, "vkWaitSemaphores");
    LOAD(GetPhysicalDeviceMemoryProperties, "vkGetPhysicalDeviceMemoryProperties");
    LOAD(GetPhysicalDeviceImageFormatProperties2, "vkGetPhysicalDeviceImageFormatProperties2");
    LOAD(GetPhysicalDeviceFormatProperties, "vkGetPhysicalDeviceFormatProperties");
    p->vk.GetPhysicalDeviceMemoryProperties(p->phys, &p->mprops);

    p->nb = av_pix_fmt_count_planes(fc->sw_format);
    if (!desc || p->nb < 1 || p->nb > 4 || (desc->flags & AV_PIX_FMT_FLAG_RGB)) {
        av_log(avctx, AV_LOG_ERROR, "pyprores: the frame pool does not take %s\n",
               av_get_pix_fmt_name(fc->sw_format));
        goto fail;
    }
    for (i = 0; i < p->nb; i++) {
        if (vfc->format[i] == VK_FORMAT_UNDEFINED) {
            av_log(avctx, AV_LOG_ERROR, "pyprores: the hwaccel asked for no image of plane %d "
                   "of %s: the frame pool makes one image per plane\n", i,
                   av_get_pix_fmt_name(fc->sw_format));
            goto fail;
        }
        p->fmt[i] = vfc->format[i];
        p->w[i] = fc->width;
        p->h[i] = fc->height;
        if (i && i != 3) {
            p->w[i] = AV_CEIL_RSHIFT(fc->width, desc->log2_chroma_w);
            p->h[i] = AV_CEIL_RSHIFT(fc->height, desc->log2_chroma_h);
        }
    }
    p->usage = vfc->usage;
    p->flags = vfc->img_flags;
    for (i = 0; i < hw->nb_qf && p->nb_qfs < 64; i++) {
        for (j = 0; j < (int)p->nb_qfs && p->qfs[j] != (uint32_t)hw->qf[i].idx; j++)
            ;
        if (j == (int)p->nb_qfs)
            p->qfs[p->nb_qfs++] = hw->qf[i].idx;
    }
    if (!p->nb_qfs) {
        av_log(avctx, AV_LOG_ERROR, "pyprores: the Vulkan device lists no queue families\n");
        goto fail;
    }

    /* linear images of these formats and usage, exportable where the device can */
    p->export_mem = ppr__has_device_extension(hw, VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME);
    p->export_sem = ppr__has_device_extension(hw, VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME);
    for (i = 0; i < p->nb; i++) {
        VkPhysicalDeviceExternalImageFormatInfo ext = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_IMAGE_FORMAT_INFO,
            .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT,
        };
        VkPhysicalDeviceImageFormatInfo2 info = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_IMAGE_FORMAT_INFO_2,
            .pNext = p->export_mem ? &ext : NULL,
            .format = p->fmt[i],
            .type = VK_IMAGE_TYPE_2D,
            .tiling = VK_IMAGE_TILING_LINEAR,
            .usage = p->usage,
            .flags = p->flags,
        };
        eprops.externalMemoryProperties.externalMemoryFeatures = 0;
        r = p->vk.GetPhysicalDeviceImageFormatProperties2(p->phys, &info, &props);
        if (r == VK_SUCCESS && p->export_mem &&
            !(eprops.externalMemoryProperties.externalMemoryFeatures &
              VK_EXTERNAL_MEMORY_FEATURE_EXPORTABLE_BIT))
            r = VK_ERROR_FORMAT_NOT_SUPPORTED;
        if (r != VK_SUCCESS && p->export_mem) {     /* then without export */
            p->export_mem = 0;
            info.pNext = NULL;
            r = p->vk.GetPhysicalDeviceImageFormatProperties2(p->phys, &info, &props);
        }
        if (r != VK_SUCCESS) {
            av_log(avctx, AV_LOG_ERROR, "pyprores: the Vulkan device cannot make linear images "
                   "of VkFormat %d with usage 0x%x and flags 0x%x (VkResult %d): decode without "
                   "the session's own frame pool\n", (int)p->fmt[i], (unsigned)p->usage,
                   (unsigned)p->flags, (int)r);
            goto fail;
        }
        /* the ProRes hwaccel's shaders store through R16_UINT views of its R16 images */
        if (p->fmt[i] == VK_FORMAT_R16_UNORM && (p->usage & VK_IMAGE_USAGE_STORAGE_BIT) &&
            (p->flags & VK_IMAGE_CREATE_MUTABLE_FORMAT_BIT)) {
            VkFormatProperties fp;
            p->vk.GetPhysicalDeviceFormatProperties(p->phys, VK_FORMAT_R16_UINT, &fp);
            if (!(fp.linearTilingFeatures & VK_FORMAT_FEATURE_STORAGE_IMAGE_BIT)) {
                av_log(avctx, AV_LOG_ERROR, "pyprores: the Vulkan device cannot store to linear "
                       "R16_UINT images (linearTilingFeatures 0x%x), which the hwaccel's shaders "
                       "write: decode without the session's own frame pool\n",
                       (unsigned)fp.linearTilingFeatures);
                goto fail;
            }
        }
        if (props.imageFormatProperties.maxExtent.width < p->w[i] ||
            props.imageFormatProperties.maxExtent.height < p->h[i]) {
            av_log(avctx, AV_LOG_ERROR, "pyprores: linear images of the device are at most "
                   "%ux%u, the frame's plane %d is %ux%u\n",
                   props.imageFormatProperties.maxExtent.width,
                   props.imageFormatProperties.maxExtent.height, i, p->w[i], p->h[i]);
            goto fail;
        }
    }

    if (!(p->pool = av_buffer_pool_init2(sizeof(AVVkFrame), p, pool_alloc, pool_free_cb)))
        goto fail_nomem;
    /* from here on the pool owns p (pool_free_cb), and the frames context the pool */
    fc->pool = p->pool;
    fc->user_opaque = p->pool;
    fc->free = frames_free;
    fc->initial_pool_size = 0;
    vfc->tiling = VK_IMAGE_TILING_LINEAR;
    vfc->lock_frame = own_lock_frame;
    vfc->unlock_frame = own_unlock_frame;
    exportable = p->export_mem && p->export_sem;
    p = NULL;
    if ((ret = av_hwframe_ctx_init(frames)) < 0) {
        av_log(avctx, AV_LOG_ERROR, "pyprores: the frames context of the frame pool did not "
               "initialise: %s\n", av_err2str(ret));
        av_buffer_unref(&frames);
        return ret;
    }
    av_buffer_unref(&avctx->hw_frames_ctx);
    avctx->hw_frames_ctx = frames;
    av_log(avctx, AV_LOG_VERBOSE, "pyprores: frames from the session's own pool: %d linear "
           "image(s) per frame, %s, %sexportable\n", av_pix_fmt_count_planes(fc->sw_format),
           av_get_pix_fmt_name(fc->sw_format), exportable ? "" : "not ");
    return 0;

fail_nomem:
    ret = AVERROR(ENOMEM);
fail:
    if (p) {
        av_buffer_unref(&p->device);
        free(p);
    }
    av_buffer_unref(&frames);
    return ret;
}
