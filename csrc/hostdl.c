/*
 * hostdl.c - downloads that the GPU writes straight into host memory of the
 * device's own (ppr_host_buffer): no copy on the host, and the copy runs
 * while the caller goes on. See pyprores.h.
 *
 * hwcontext_vulkan's download copies the image into a staging buffer, waits,
 * and copies that into the destination frame on the host: the host copy is
 * most of a 4K frame's download time, and the caller waits for all of it.
 * Here the destination is itself mapped device memory, allocated once and
 * reused by the caller, so the GPU's copy is the whole download, and
 * ppr_download_start() returns once it is submitted.
 *
 * The frame is synchronised as libavutil/vulkan.c does for its own work on
 * hwcontext frames: under the frames context's lock_frame(), wait for each
 * image's timeline semaphore at its value, signal the next value, and record
 * the layout and access the images are left in.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <libavutil/buffer.h>
#include <libavutil/frame.h>
#include <libavutil/hwcontext.h>
#include <libavutil/hwcontext_vulkan.h>
#include <libavutil/pixdesc.h>
#include <libavutil/version.h>

#include "internal.h"
#include "vkcopy.h"

struct ppr_host_buffer {
    AVBufferRef *device;            /* keeps the VkDevice alive */
    void (*release)(void *);        /* the session side's hold on the device */
    void *release_opaque;
    host_vk vk;
    VkDevice dev;
    const VkAllocationCallbacks *alloc;
    VkBuffer buf;
    VkDeviceMemory mem;
    uint8_t *data;
    size_t size;
    int coherent;
    uint32_t qf, qi;                /* the queue its copies go to */
    VkQueue queue;
    VkCommandPool pool;
    VkCommandBuffer cmd;
    VkFence fence;
    VkSemaphore tl;                 /* timeline the shader copies signal (made by the first) */
    uint64_t tl_value;              /* the value the last one signals */

    pthread_mutex_t lock;           /* start, wait and free on any thread */
    int pending;                    /* a copy submitted and not waited for */
    int pending_tl;                 /* it signals tl at tl_value (not the fence) */
    AVFrame *frame;                 /* its frame, held until it completes */
};

static int g_live;                  /* buffers not freed (__atomic) */

/* A wait longer than this is reported; the copy stays pending (the buffer
 * cannot be reused or freed before the GPU is done with it). */
#define WAIT_NS (60ULL * 1000 * 1000 * 1000)

int ppr__vk_load(host_vk *f, const AVVulkanDeviceContext *hw)
{
#define INST(name) \
    if (!(f->name = (PFN_vk##name)hw->get_proc_addr(hw->inst, "vk" #name))) \
        return ppr__fail(PPR_ENODEVICE, "the Vulkan loader has no vk" #name);
#define DEV(name) \
    if (!(f->name = (PFN_vk##name)f->GetDeviceProcAddr(hw->act_dev, "vk" #name))) \
        return ppr__fail(PPR_ENODEVICE, "the Vulkan device has no vk" #name);
    INST(GetPhysicalDeviceMemoryProperties)
    INST(GetDeviceProcAddr)
    DEV(CreateBuffer) DEV(DestroyBuffer) DEV(GetBufferMemoryRequirements)
    DEV(AllocateMemory) DEV(FreeMemory) DEV(BindBufferMemory) DEV(MapMemory)
    DEV(UnmapMemory) DEV(InvalidateMappedMemoryRanges)
    DEV(CreateCommandPool) DEV(DestroyCommandPool) DEV(AllocateCommandBuffers)
    DEV(ResetCommandPool) DEV(BeginCommandBuffer) DEV(EndCommandBuffer)
    DEV(CmdPipelineBarrier) DEV(CmdCopyImageToBuffer)
    DEV(CreateFence) DEV(DestroyFence) DEV(ResetFences) DEV(WaitForFences)
    DEV(CreateSemaphore) DEV(DestroySemaphore) DEV(GetSemaphoreCounterValue)
    DEV(GetDeviceQueue2) DEV(QueueSubmit)
    DEV(CreateImageView) DEV(DestroyImageView) DEV(CreateShaderModule) DEV(DestroyShaderModule)
    DEV(CreateDescriptorSetLayout) DEV(DestroyDescriptorSetLayout)
    DEV(CreatePipelineLayout) DEV(DestroyPipelineLayout)
    DEV(CreateComputePipelines) DEV(DestroyPipeline)
    DEV(CreateDescriptorPool) DEV(DestroyDescriptorPool)
    DEV(AllocateDescriptorSets) DEV(UpdateDescriptorSets)
    DEV(CmdBindPipeline) DEV(CmdBindDescriptorSets) DEV(CmdPushConstants) DEV(CmdDispatch)
    INST(GetPhysicalDeviceProperties) INST(GetPhysicalDeviceFormatProperties)
    INST(GetPhysicalDeviceQueueFamilyProperties)
    DEV(CreateQueryPool) DEV(DestroyQueryPool) DEV(CmdResetQueryPool) DEV(CmdWriteTimestamp)
    DEV(GetQueryPoolResults)
    /* optional: the CUDA interop's (cudaip.c), NULL without the extensions */
    f->GetMemoryFdKHR = (PFN_vkGetMemoryFdKHR)f->GetDeviceProcAddr(hw->act_dev, "vkGetMemoryFdKHR");
    f->GetSemaphoreFdKHR = (PFN_vkGetSemaphoreFdKHR)f->GetDeviceProcAddr(hw->act_dev, "vkGetSemaphoreFdKHR");
    f->GetPhysicalDeviceProperties2 = (PFN_vkGetPhysicalDeviceProperties2)
        hw->get_proc_addr(hw->inst, "vkGetPhysicalDeviceProperties2");
    /* core in Vulkan 1.2, which FFmpeg's devices are; NULL: no shader copies */
    f->WaitSemaphores = (PFN_vkWaitSemaphores)f->GetDeviceProcAddr(hw->act_dev, "vkWaitSemaphores");
#undef INST
#undef DEV
    return 0;
}

/* Host memory the CPU reads fast: host-cached, not device-local (a
 * device-local host-visible type is memory across the bus), coherent when
 * there is the choice. -1 when no type is host-visible. */
static int pick_memory_type(const VkPhysicalDeviceMemoryProperties *props, uint32_t bits)
{
    int best = -1, best_score = -1;
    uint32_t i;

    for (i = 0; i < props->memoryTypeCount; i++) {
        VkMemoryPropertyFlags fl = props->memoryTypes[i].propertyFlags;
        int score;
        if (!(bits & (1u << i)) || !(fl & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
            continue;
        score = (fl & VK_MEMORY_PROPERTY_HOST_CACHED_BIT   ? 4 : 0) +
                (fl & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT  ? 0 : 2) +
                (fl & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT ? 1 : 0);
        if (score > best_score) {
            best = i;
            best_score = score;
        }
    }
    return best;
}

/* The family copies go to: one with transfer but neither graphics nor
 * compute (a copy engine, which leaves the decoder's queues alone) when the
 * device has it, preferably one without video or optical flow work (NVIDIA's
 * decode family can transfer too), else any that can transfer. */
int ppr__pick_queue_family(const AVVulkanDeviceContext *hw, uint32_t *qf, int *nb)
{
    int i, best = -1, best_score = -1;

    for (i = 0; i < hw->nb_qf; i++) {
        VkQueueFlags fl = hw->qf[i].flags;
        int score;
        if (hw->qf[i].num < 1 ||
            !(fl & (VK_QUEUE_TRANSFER_BIT | VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT)))
            continue;
        score = (fl & (VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT)) ? 0 : 4;
        score += (fl & (VK_QUEUE_VIDEO_DECODE_BIT_KHR | VK_QUEUE_VIDEO_ENCODE_BIT_KHR |
                        VK_QUEUE_OPTICAL_FLOW_BIT_NV)) ? 0 : 2;
        score += !(fl & VK_QUEUE_GRAPHICS_BIT);
        if (score > best_score) {
            best = i;
            best_score = score;
        }
    }
    if (best < 0)
        return ppr__fail(PPR_ENODEVICE, "the Vulkan device has no queue that can copy");
    *qf = hw->qf[best].idx;
    *nb = hw->qf[best].num;
    return 0;
}

int ppr__get_queue(const host_vk *vk, VkDevice dev, const AVVulkanDeviceContext *hw,
                   uint32_t qf, uint32_t qi, VkQueue *queue)
{
#if LIBAVUTIL_VERSION_MAJOR < 60
    (void)hw;   /* FFmpeg 7.1 creates its queues without flags */
#endif
    *queue = VK_NULL_HANDLE;
    vk->GetDeviceQueue2(dev, &(VkDeviceQueueInfo2) {
        .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_INFO_2,
#if LIBAVUTIL_VERSION_MAJOR >= 60
        .flags = hw->queue_flags,   /* as the queues were created */
#endif
        .queueFamilyIndex = qf,
        .queueIndex = qi,
    }, queue);
    if (!*queue)
        return ppr__fail(PPR_ENODEVICE, "no queue %u of family %u", qi, qf);
    return 0;
}

void ppr__lock_queue(AVHWDeviceContext *dc, uint32_t qf, uint32_t qi, int lock)
{
    AVVulkanDeviceContext *hw = dc->hwctx;
#if LIBAVUTIL_VERSION_MAJOR >= 60
#if FF_API_VULKAN_SYNC_QUEUES
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    (lock ? hw->lock_queue : hw->unlock_queue)(dc, qf, qi);
#pragma GCC diagnostic pop
#else
    (void)hw; (void)qf; (void)qi; (void)lock;   /* queues synchronised internally */
#endif
#else
    (lock ? hw->lock_queue : hw->unlock_queue)(dc, qf, qi);
#endif
}

static void destroy(ppr_host_buffer *b)
{
    host_vk *f = &b->vk;

    if (b->dev) {
        if (b->tl)
            f->DestroySemaphore(b->dev, b->tl, b->alloc);
        if (b->fence)
            f->DestroyFence(b->dev, b->fence, b->alloc);
        if (b->pool)
            f->DestroyCommandPool(b->dev, b->pool, b->alloc);
        if (b->data)
            f->UnmapMemory(b->dev, b->mem);
        if (b->buf)
            f->DestroyBuffer(b->dev, b->buf, b->alloc);
        if (b->mem)
            f->FreeMemory(b->dev, b->mem, b->alloc);
    }
    av_frame_free(&b->frame);
    av_buffer_unref(&b->device);
    if (b->release)
        b->release(b->release_opaque);
    pthread_mutex_destroy(&b->lock);
    free(b);
}


int ppr__host_buffer_create(ppr_host_buffer **out, AVBufferRef *device, size_t size,
                            void (*release)(void *), void *release_opaque)
{
    static unsigned next_queue;
    AVHWDeviceContext *dc = (AVHWDeviceContext *)device->data;
    AVVulkanDeviceContext *hw = dc->hwctx;
    VkPhysicalDeviceMemoryProperties mprops;
    VkMemoryRequirements req;
    ppr_host_buffer *b;
    int ret, type, nb_queues = 1;
    void *map = NULL;

    *out = NULL;
    if (dc->type != AV_HWDEVICE_TYPE_VULKAN || !hw->get_proc_addr)
        return ppr__fail(PPR_EINVAL, "host buffers need a Vulkan session");
    b = calloc(1, sizeof(*b));
    if (!b)
        return ppr__fail(PPR_ENOMEM, "out of memory");
    pthread_mutex_init(&b->lock, NULL);
    b->device = av_buffer_ref(device);
    if (!b->device) {
        pthread_mutex_destroy(&b->lock);
        free(b);
        return ppr__fail(PPR_ENOMEM, "out of memory");
    }
    /* from here on destroy() undoes everything, the caller's hold included */
    b->release = release;
    b->release_opaque = release_opaque;
    __atomic_add_fetch(&g_live, 1, __ATOMIC_RELAXED);

    if ((ret = ppr__vk_load(&b->vk, hw)) < 0 ||
        (ret = ppr__pick_queue_family(hw, &b->qf, &nb_queues)) < 0)
        goto fail;
    b->dev = hw->act_dev;
    b->alloc = hw->alloc;
    b->size = size;
    /* spread the buffers over the family's queues */
    b->qi = __atomic_fetch_add(&next_queue, 1, __ATOMIC_RELAXED) % (unsigned)nb_queues;

    PPR_VKCHECK(b->vk.CreateBuffer(b->dev, &(VkBufferCreateInfo) {
              .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
              .size = size,
              /* written by copies, or by the shader copy (shcopy.c) */
              .usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
              .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
          }, b->alloc, &b->buf), "vkCreateBuffer");
    b->vk.GetBufferMemoryRequirements(b->dev, b->buf, &req);
    b->vk.GetPhysicalDeviceMemoryProperties(hw->phys_dev, &mprops);
    type = pick_memory_type(&mprops, req.memoryTypeBits);
    if (type < 0) {
        ret = ppr__fail(PPR_ENODEVICE, "the Vulkan device has no host-visible memory for a buffer");
        goto fail;
    }
    b->coherent = !!(mprops.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    PPR_VKCHECK(b->vk.AllocateMemory(b->dev, &(VkMemoryAllocateInfo) {
              .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
              .allocationSize = req.size,
              .memoryTypeIndex = type,
          }, b->alloc, &b->mem), "vkAllocateMemory of a host buffer");
    PPR_VKCHECK(b->vk.BindBufferMemory(b->dev, b->buf, b->mem, 0), "vkBindBufferMemory");
    PPR_VKCHECK(b->vk.MapMemory(b->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &map), "vkMapMemory");
    b->data = map;

    if ((ret = ppr__vk_copy_init(&b->vk, b->dev, b->alloc, b->qf, &b->pool, &b->cmd, &b->fence)) < 0)
        goto fail;
    if ((ret = ppr__get_queue(&b->vk, b->dev, hw, b->qf, b->qi, &b->queue)) < 0)
        goto fail;
    *out = b;
    return 0;

fail:
    destroy(b);
    __atomic_sub_fetch(&g_live, 1, __ATOMIC_RELAXED);
    return ret;
}

void *ppr_host_buffer_data(ppr_host_buffer *b) { return b ? b->data : NULL; }
size_t ppr_host_buffer_size(const ppr_host_buffer *b) { return b ? b->size : 0; }
int ppr_host_buffers_live(void) { return __atomic_load_n(&g_live, __ATOMIC_RELAXED); }

/* Wait for the pending copy, b->lock held. */
static int wait_locked(ppr_host_buffer *b)
{
    VkResult r;

    if (!b->pending)
        return 0;
    if (b->pending_tl)
        r = b->vk.WaitSemaphores(b->dev, &(VkSemaphoreWaitInfo) {
            .sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
            .semaphoreCount = 1,
            .pSemaphores = &b->tl,
            .pValues = &b->tl_value,
        }, WAIT_NS);
    else
        r = b->vk.WaitForFences(b->dev, 1, &b->fence, VK_TRUE, WAIT_NS);
    if (r == VK_TIMEOUT)
        return ppr__fail(PPR_EDECODE, "the GPU did not finish a download within %llu s",
                         (unsigned long long)(WAIT_NS / 1000000000ULL));
    b->pending = 0;
    av_frame_free(&b->frame);
    if (r != VK_SUCCESS)
        return ppr__fail(PPR_ENODEVICE, "waiting for a download failed (VkResult %d)", (int)r);
    if (!b->coherent) {
        r = b->vk.InvalidateMappedMemoryRanges(b->dev, 1, &(VkMappedMemoryRange) {
            .sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE,
            .memory = b->mem,
            .size = VK_WHOLE_SIZE,
        });
        if (r != VK_SUCCESS)
            return ppr__fail(PPR_ENODEVICE, "vkInvalidateMappedMemoryRanges failed (VkResult %d)",
                             (int)r);
    }
    return 0;
}

int ppr_host_buffer_wait(ppr_host_buffer *b)
{
    int ret;

    ppr__clear_error();
    if (!b)
        return ppr__fail(PPR_EINVAL, "host buffer is NULL");
    pthread_mutex_lock(&b->lock);
    ret = wait_locked(b);
    pthread_mutex_unlock(&b->lock);
    return ret;
}

void ppr_host_buffer_free(ppr_host_buffer *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&b->lock);
    /* the GPU may write the memory until the copy ends: never free before */
    while (b->pending && wait_locked(b) < 0 && b->pending)
        ;
    pthread_mutex_unlock(&b->lock);
    destroy(b);
    __atomic_sub_fetch(&g_live, 1, __ATOMIC_RELAXED);
}

/* The planes of out must lie inside b, start on 4-byte boundaries (copies on
 * a transfer-only queue need it) and hold whole rows of 2-byte samples. */
static int check_planes(const ppr_host_buffer *b, int nb_planes,
                        const ppr_planes *out, size_t offset[4])
{
    int i;

    if (out->count != nb_planes)
        return ppr__fail(PPR_EINVAL, "the frame has %d planes, got %d", nb_planes, out->count);
    for (i = 0; i < out->count; i++) {
        const ppr_plane *p = &out->plane[i];
        uintptr_t start = (uintptr_t)p->data, base = (uintptr_t)b->data;
        size_t need;
        if (!p->data || p->width <= 0 || p->height <= 0 || p->stride < (ptrdiff_t)p->width * 2 ||
            (p->stride & 1))
            return ppr__fail(PPR_EINVAL, "plane %d: no data, or a stride below its %d samples",
                             i, p->width);
        if (start < base || start >= base + b->size || ((start - base) & 3))
            return ppr__fail(PPR_EINVAL, "plane %d does not start inside the host buffer on a "
                             "4-byte boundary", i);
        need = (size_t)p->stride * (p->height - 1) + (size_t)p->width * 2;
        if (need > b->size - (start - base))
            return ppr__fail(PPR_EINVAL, "plane %d (%dx%d, stride %td) ends past the host "
                             "buffer's %zu bytes", i, p->width, p->height, p->stride, b->size);
        offset[i] = start - base;
    }
    return 0;
}

/* Record and submit the copy of a Vulkan frame into c->buf, synchronised as
 * libavutil does for its own work on hwcontext frames: under lock_frame(),
 * wait for each image's timeline semaphore at its value, signal the next
 * value, and record the layout and access the images are left in. */
int ppr__vk_copy_init(const host_vk *vk, VkDevice dev, const VkAllocationCallbacks *alloc,
                      uint32_t qf, VkCommandPool *pool, VkCommandBuffer *cmd, VkFence *fence)
{
    int ret = 0;

    PPR_VKCHECK(vk->CreateCommandPool(dev, &(VkCommandPoolCreateInfo) {
              .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
              .flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT,
              .queueFamilyIndex = qf,
          }, alloc, pool), "vkCreateCommandPool");
    PPR_VKCHECK(vk->AllocateCommandBuffers(dev, &(VkCommandBufferAllocateInfo) {
              .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
              .commandPool = *pool,
              .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
              .commandBufferCount = 1,
          }, cmd), "vkAllocateCommandBuffers");
    PPR_VKCHECK(vk->CreateFence(dev, &(VkFenceCreateInfo) {
              .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO,
          }, alloc, fence), "vkCreateFence");
fail:
    return ret;
}

int ppr__vk_copy_submit(const ppr__vk_copy *c, AVFrame *frame, const size_t offset[4],
                        const ppr_planes *out)
{
    static const VkImageAspectFlags plane_aspect[] = {
        VK_IMAGE_ASPECT_PLANE_0_BIT, VK_IMAGE_ASPECT_PLANE_1_BIT, VK_IMAGE_ASPECT_PLANE_2_BIT,
    };
    AVHWFramesContext *fc;
    AVVulkanFramesContext *vfc;
    AVHWDeviceContext *dc;
    AVVkFrame *vkf;
    VkImageMemoryBarrier bar[AV_NUM_DATA_POINTERS];
    VkSemaphore sems[AV_NUM_DATA_POINTERS + 1], sig[AV_NUM_DATA_POINTERS + 1];
    uint64_t wait_val[AV_NUM_DATA_POINTERS + 1], signal_val[AV_NUM_DATA_POINTERS + 1];
    VkPipelineStageFlags wait_stage[AV_NUM_DATA_POINTERS + 1];
    int nb_images = 0, nb_planes, multiplane, i;
    VkResult r;

    if (!frame || frame->format != AV_PIX_FMT_VULKAN || !frame->hw_frames_ctx || !frame->data[0])
        return ppr__fail(PPR_EINVAL, "not a Vulkan frame");
    fc = (AVHWFramesContext *)frame->hw_frames_ctx->data;
    vfc = fc->hwctx;
    dc = fc->device_ctx;
    if (((AVVulkanDeviceContext *)dc->hwctx)->act_dev != c->dev)
        return ppr__fail(PPR_EINVAL, "the buffer belongs to another Vulkan device");
    vkf = (AVVkFrame *)frame->data[0];
    while (nb_images < AV_NUM_DATA_POINTERS && vkf->img[nb_images])
        nb_images++;
    nb_planes = av_pix_fmt_count_planes(fc->sw_format);
    multiplane = nb_images == 1 && nb_planes > 1;
    if (nb_planes > 4 || (!multiplane && nb_images != nb_planes) ||
        (multiplane && nb_planes > 3))
        return ppr__fail(PPR_EINVAL, "%d planes in %d images: not a layout buffers take",
                         nb_planes, nb_images);
    if (out->count != nb_planes)
        return ppr__fail(PPR_EINVAL, "the frame has %d planes, got %d", nb_planes, out->count);

    r = c->vk->ResetCommandPool(c->dev, c->pool, 0);
    if (r == VK_SUCCESS)
        r = c->vk->BeginCommandBuffer(c->cmd, &(VkCommandBufferBeginInfo) {
            .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
            .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
        });
    if (r == VK_SUCCESS)
        r = c->vk->ResetFences(c->dev, 1, &c->fence);
    if (r != VK_SUCCESS)
        return ppr__fail(PPR_ENODEVICE, "could not record a download (VkResult %d)", (int)r);

    /* From here until the submission, no one else may touch the frame's
     * semaphores and layouts (the decoder's threads use the same lock). */
    vfc->lock_frame(fc, vkf);
    for (i = 0; i < nb_images; i++) {
        /* The semaphore wait below orders the copy after every earlier use
         * of the image and makes its writes visible: no source access here. */
        bar[i] = (VkImageMemoryBarrier) {
            .sType = VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER,
            .srcAccessMask = 0,
            .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT,
            .oldLayout = vkf->layout[i],
            .newLayout = VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL,
            .srcQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
            .dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
            .image = vkf->img[i],
            .subresourceRange = {
                .aspectMask = VK_IMAGE_ASPECT_COLOR_BIT,
                .levelCount = 1,
                .layerCount = 1,
            },
        };
        sems[i] = sig[i] = vkf->sem[i];
        wait_val[i] = vkf->sem_value[i];
        signal_val[i] = vkf->sem_value[i] + 1;
        wait_stage[i] = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
    }
    c->vk->CmdPipelineBarrier(c->cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                             VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 0, NULL, 0, NULL,
                             nb_images, bar);
    for (i = 0; i < nb_planes; i++) {
        const ppr_plane *p = &out->plane[i];
        VkBufferImageCopy region = {
            .bufferOffset = offset[i],
            .bufferRowLength = (uint32_t)(p->stride / 2),
            .imageSubresource = {
                .aspectMask = multiplane ? plane_aspect[i] : VK_IMAGE_ASPECT_COLOR_BIT,
                .layerCount = 1,
            },
            .imageExtent = { (uint32_t)p->width, (uint32_t)p->height, 1 },
        };
        c->vk->CmdCopyImageToBuffer(c->cmd, vkf->img[multiplane ? 0 : i],
                                   VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, c->buf, 1, &region);
    }
    /* the copy's writes, made visible to the host that waits for the fence
     * (the extra semaphore's signal makes them available to its waiter) */
    if (c->to_host)
        c->vk->CmdPipelineBarrier(c->cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                                  0, 1, &(VkMemoryBarrier) {
                                      .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                      .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                                      .dstAccessMask = VK_ACCESS_HOST_READ_BIT,
                                  }, 0, NULL, 0, NULL);
    r = c->vk->EndCommandBuffer(c->cmd);
    if (r == VK_SUCCESS) {
        int nb_signal = nb_images, nb_wait = nb_images;
        VkTimelineSemaphoreSubmitInfo tl;
        if (c->signal) {
            sig[nb_signal] = c->signal;
            signal_val[nb_signal++] = c->signal_value;
        }
        if (c->wait) {
            sems[nb_wait] = c->wait;
            wait_val[nb_wait] = c->wait_value;
            wait_stage[nb_wait++] = VK_PIPELINE_STAGE_TRANSFER_BIT;
        }
        tl = (VkTimelineSemaphoreSubmitInfo) {
            .sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
            .waitSemaphoreValueCount = nb_wait,
            .pWaitSemaphoreValues = wait_val,
            .signalSemaphoreValueCount = nb_signal,
            .pSignalSemaphoreValues = signal_val,
        };
        ppr__lock_queue(dc, c->qf, c->qi, 1);
        r = c->vk->QueueSubmit(c->queue, 1, &(VkSubmitInfo) {
            .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
            .pNext = &tl,
            .waitSemaphoreCount = nb_wait,
            .pWaitSemaphores = sems,
            .pWaitDstStageMask = wait_stage,
            .commandBufferCount = 1,
            .pCommandBuffers = &c->cmd,
            .signalSemaphoreCount = nb_signal,
            .pSignalSemaphores = sig,
        }, c->fence);
        ppr__lock_queue(dc, c->qf, c->qi, 0);
    }
    if (r == VK_SUCCESS) {
        for (i = 0; i < nb_images; i++) {
            vkf->layout[i] = VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL;
            vkf->access[i] = VK_ACCESS_TRANSFER_READ_BIT;
            vkf->sem_value[i]++;
        }
    }
    vfc->unlock_frame(fc, vkf);
    if (r != VK_SUCCESS)
        return ppr__fail(r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY ?
                         PPR_ENOMEM : PPR_ENODEVICE,
                         "could not submit a download (VkResult %d)", (int)r);
    return 0;
}

/* Checks the frame and the planes, and takes the buffer for a download:
 * on success the buffer's lock is held and *hold is the frame's holder */
static int download_begin(ppr_host_buffer *b, const AVFrame *frame, const ppr_planes *out,
                          size_t offset[4], AVFrame **hold)
{
    int ret;

    if (!frame || frame->format != AV_PIX_FMT_VULKAN || !frame->hw_frames_ctx || !frame->data[0])
        return ppr__fail(PPR_EINVAL, "not a Vulkan frame");
    if (((AVHWFramesContext *)frame->hw_frames_ctx->data)->device_ref->data != b->device->data)
        return ppr__fail(PPR_EINVAL, "the host buffer belongs to another Vulkan device");
    if ((ret = check_planes(b, out->count, out, offset)) < 0)
        return ret;
    /* the images must outlive the copy: the buffer holds the frame till then */
    if (!(*hold = av_frame_alloc()))
        return ppr__fail(PPR_ENOMEM, "out of memory");

    pthread_mutex_lock(&b->lock);
    if (b->pending) {
        pthread_mutex_unlock(&b->lock);
        av_frame_free(hold);
        return ppr__fail(PPR_EINVAL, "the host buffer has a download in progress: wait for it first");
    }
    return 0;
}

/* After download_begin(): the copy was not submitted */
static int download_abort(ppr_host_buffer *b, AVFrame **hold, int ret)
{
    pthread_mutex_unlock(&b->lock);
    av_frame_free(hold);
    return ret;
}

/* After download_begin(): the copy was submitted, the buffer keeps the frame */
static void download_submitted(ppr_host_buffer *b, AVFrame *frame, AVFrame *hold, int timeline)
{
    av_frame_move_ref(hold, frame);
    b->frame = hold;
    b->pending = 1;
    b->pending_tl = timeline;
    if (timeline)
        b->tl_value++;
    pthread_mutex_unlock(&b->lock);
}

int ppr__host_download_start(ppr_host_buffer *b, AVFrame *frame, const ppr_planes *out)
{
    size_t offset[4];
    AVFrame *hold;
    int ret;

    if ((ret = download_begin(b, frame, out, offset, &hold)) < 0)
        return ret;
    ret = ppr__vk_copy_submit(&(ppr__vk_copy) {
            .vk = &b->vk, .dev = b->dev, .queue = b->queue, .qf = b->qf, .qi = b->qi,
            .pool = b->pool, .cmd = b->cmd, .fence = b->fence, .buf = b->buf, .to_host = 1,
        }, frame, offset, out);
    if (ret < 0)
        return download_abort(b, &hold, ret);
    download_submitted(b, frame, hold, 0);
    return 0;
}

int ppr__host_download_shader(ppr_host_buffer *b, ppr_copier *cp, AVFrame *frame,
                              const ppr_planes *out)
{
    size_t offset[4];
    AVFrame *hold;
    int ret;

    if ((ret = download_begin(b, frame, out, offset, &hold)) < 0)
        return ret;
    /* the copy signals a timeline of the buffer's own, not its fence: a
     * copier may submit on a thread of its own, which must not race a waiter
     * on the same fence */
    if (!b->tl && (!b->vk.WaitSemaphores ||
                   b->vk.CreateSemaphore(b->dev, &(VkSemaphoreCreateInfo) {
                       .sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO,
                       .pNext = &(VkSemaphoreTypeCreateInfo) {
                           .sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                           .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE,
                       },
                   }, b->alloc, &b->tl) != VK_SUCCESS)) {
        b->tl = VK_NULL_HANDLE;
        return download_abort(b, &hold, ppr__fail(PPR_ENODEVICE,
                              "could not make the host buffer's timeline semaphore"));
    }
    ret = ppr__copier_submit(cp, frame, offset, out, &(ppr__copy_dst) {
            .buf = b->buf, .size = b->size, .to_host = 1,
            .signal = b->tl, .signal_value = b->tl_value + 1,
        });
    if (ret)
        return download_abort(b, &hold, ret < 0 ? ret :
                              ppr__fail(PPR_EINVAL, "the shader copy does not take this frame "
                                        "or layout (one R16 image per plane, rows unpadded, "
                                        "planes on 4-byte boundaries with room for their "
                                        "last 32-bit word)"));
    download_submitted(b, frame, hold, 1);
    return 0;
}
