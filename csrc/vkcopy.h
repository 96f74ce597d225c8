/* Vulkan helpers shared by hostdl.c and cudaip.c. Not installed, not API. */
#ifndef PYPRORES_VKCOPY_H
#define PYPRORES_VKCOPY_H

#include <stddef.h>
#include <stdint.h>

#include <libavutil/frame.h>
#include <libavutil/hwcontext.h>
#include <libavutil/hwcontext_vulkan.h>

#include "internal.h"
#include "pyprores.h"

/* The Vulkan calls made here, loaded through the device context's
 * get_proc_addr: the extension does not link the loader itself. */
typedef struct host_vk {
    PFN_vkGetPhysicalDeviceMemoryProperties GetPhysicalDeviceMemoryProperties;
    PFN_vkGetDeviceProcAddr GetDeviceProcAddr;
    PFN_vkCreateBuffer CreateBuffer;
    PFN_vkDestroyBuffer DestroyBuffer;
    PFN_vkGetBufferMemoryRequirements GetBufferMemoryRequirements;
    PFN_vkAllocateMemory AllocateMemory;
    PFN_vkFreeMemory FreeMemory;
    PFN_vkBindBufferMemory BindBufferMemory;
    PFN_vkMapMemory MapMemory;
    PFN_vkUnmapMemory UnmapMemory;
    PFN_vkInvalidateMappedMemoryRanges InvalidateMappedMemoryRanges;
    PFN_vkCreateCommandPool CreateCommandPool;
    PFN_vkDestroyCommandPool DestroyCommandPool;
    PFN_vkAllocateCommandBuffers AllocateCommandBuffers;
    PFN_vkResetCommandPool ResetCommandPool;
    PFN_vkBeginCommandBuffer BeginCommandBuffer;
    PFN_vkEndCommandBuffer EndCommandBuffer;
    PFN_vkCmdPipelineBarrier CmdPipelineBarrier;
    PFN_vkCmdCopyImageToBuffer CmdCopyImageToBuffer;
    PFN_vkCreateFence CreateFence;
    PFN_vkDestroyFence DestroyFence;
    PFN_vkResetFences ResetFences;
    PFN_vkWaitForFences WaitForFences;
    PFN_vkGetDeviceQueue2 GetDeviceQueue2;
    PFN_vkQueueSubmit QueueSubmit;
    PFN_vkCreateSemaphore CreateSemaphore;
    PFN_vkDestroySemaphore DestroySemaphore;
    PFN_vkGetSemaphoreCounterValue GetSemaphoreCounterValue;
    /* the shader copy's (shcopy.c) */
    PFN_vkGetPhysicalDeviceProperties GetPhysicalDeviceProperties;
    PFN_vkGetPhysicalDeviceFormatProperties GetPhysicalDeviceFormatProperties;
    PFN_vkWaitSemaphores WaitSemaphores;
    PFN_vkCreateImageView CreateImageView;
    PFN_vkDestroyImageView DestroyImageView;
    PFN_vkCreateShaderModule CreateShaderModule;
    PFN_vkDestroyShaderModule DestroyShaderModule;
    PFN_vkCreateDescriptorSetLayout CreateDescriptorSetLayout;
    PFN_vkDestroyDescriptorSetLayout DestroyDescriptorSetLayout;
    PFN_vkCreatePipelineLayout CreatePipelineLayout;
    PFN_vkDestroyPipelineLayout DestroyPipelineLayout;
    PFN_vkCreateComputePipelines CreateComputePipelines;
    PFN_vkDestroyPipeline DestroyPipeline;
    PFN_vkCreateDescriptorPool CreateDescriptorPool;
    PFN_vkDestroyDescriptorPool DestroyDescriptorPool;
    PFN_vkAllocateDescriptorSets AllocateDescriptorSets;
    PFN_vkUpdateDescriptorSets UpdateDescriptorSets;
    PFN_vkCmdBindPipeline CmdBindPipeline;
    PFN_vkCmdBindDescriptorSets CmdBindDescriptorSets;
    PFN_vkCmdPushConstants CmdPushConstants;
    PFN_vkCmdDispatch CmdDispatch;
    PFN_vkGetPhysicalDeviceQueueFamilyProperties GetPhysicalDeviceQueueFamilyProperties;
    PFN_vkCreateQueryPool CreateQueryPool;
    PFN_vkDestroyQueryPool DestroyQueryPool;
    PFN_vkCmdResetQueryPool CmdResetQueryPool;
    PFN_vkCmdWriteTimestamp CmdWriteTimestamp;
    PFN_vkGetQueryPoolResults GetQueryPoolResults;
    /* optional (NULL when the device lacks the extension) */
    PFN_vkGetMemoryFdKHR GetMemoryFdKHR;
    PFN_vkGetSemaphoreFdKHR GetSemaphoreFdKHR;
    PFN_vkGetPhysicalDeviceProperties2 GetPhysicalDeviceProperties2;
} host_vk;

/* Load the table from the device context (optional entries may stay NULL). */
int ppr__vk_load(host_vk *f, const AVVulkanDeviceContext *hw);

/* The queue family copies go to (a copy engine where there is one), and its queue count. */
int ppr__pick_queue_family(const AVVulkanDeviceContext *hw, uint32_t *qf, int *nb);

/* Queue qi of family qf, as FFmpeg created it: 0, or PPR_ENODEVICE. */
int ppr__get_queue(const host_vk *vk, VkDevice dev, const AVVulkanDeviceContext *hw,
                   uint32_t qf, uint32_t qi, VkQueue *queue);

/* hwcontext_vulkan's queue lock (FFmpeg 7.1; FFmpeg 9 locks internally). */
void ppr__lock_queue(AVHWDeviceContext *dc, uint32_t qf, uint32_t qi, int lock);

/* Where a frame is copied to, and how. */
typedef struct ppr__vk_copy {
    const host_vk *vk;
    VkDevice dev;
    VkQueue queue;
    uint32_t qf, qi;
    VkCommandPool pool;         /* reset for the copy: nothing of it may be pending */
    VkCommandBuffer cmd;
    VkFence fence;              /* reset, then signalled when the copy ends */
    VkBuffer buf;               /* the destination */
    int to_host;                /* make the writes visible to the host (fence waiters) */
    VkSemaphore signal;         /* a timeline semaphore also signalled, or VK_NULL_HANDLE */
    uint64_t signal_value;
    VkSemaphore wait;           /* a timeline semaphore also waited for, or VK_NULL_HANDLE */
    uint64_t wait_value;
} ppr__vk_copy;

/* A Vulkan call that failed: out of memory becomes PPR_ENOMEM, anything else
 * PPR_ENODEVICE, with `what` in the message. */
static inline int ppr__vk_fail(VkResult r, const char *what)
{
    return ppr__fail(r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY ?
                     PPR_ENOMEM : PPR_ENODEVICE, "%s failed (VkResult %d)", what, (int)r);
}

/* A Vulkan call that must succeed, in a function with `int ret` and a `fail:` label. */
#define PPR_VKCHECK(call, what)                                                \
    do {                                                                       \
        VkResult r_ = (call);                                                  \
        if (r_ != VK_SUCCESS) {                                                \
            ret = ppr__vk_fail(r_, what);                                      \
            goto fail;                                                         \
        }                                                                      \
    } while (0)

/* What ppr__vk_copy_submit records into: a transient command pool of family qf, one
 * primary command buffer from it and an unsignalled fence. On failure the handles made
 * so far are left for the caller to destroy. */
int ppr__vk_copy_init(const host_vk *vk, VkDevice dev, const VkAllocationCallbacks *alloc,
                      uint32_t qf, VkCommandPool *pool, VkCommandBuffer *cmd, VkFence *fence);

/* Submit the copy of `frame` (a Vulkan frame of c->dev) into c->buf, plane i
 * at offset[i] with out->plane[i]'s width, height and stride (bytes, even).
 * The caller keeps the frame alive until the fence. */
int ppr__vk_copy_submit(const ppr__vk_copy *c, AVFrame *frame, const size_t offset[4],
                        const ppr_planes *out);

/* Where a shader copy writes (shcopy.c): the whole of buf (size bytes); the
 * fence, if any, reset and then signalled when the copy ends (none with
 * asynchronous submission: wait for `signal` instead); to_host, signal and
 * wait as in ppr__vk_copy (wait: an earlier copy submitted to another queue). */
typedef struct ppr__copy_dst {
    VkBuffer buf;
    VkDeviceSize size;
    VkFence fence;
    int to_host;
    VkSemaphore signal;
    uint64_t signal_value;
    VkSemaphore wait;
    uint64_t wait_value;
} ppr__copy_dst;

/* The copier of `device` (shcopy.c): its pipeline, its queue, its slots;
 * release(release_opaque) runs when it is freed, or before an error returns. */
int ppr__copier_create(ppr_copier **out, AVBufferRef *device,
                       void (*release)(void *), void *release_opaque);

/* Wait for its copies, then free it. NULL-safe. */
void ppr__copier_free(ppr_copier *cp);

/* Wait for its copies, destroy the images' views it keeps and let go of the
 * frames context they belong to (which holds the decoder's frames): when the
 * stream ends. NULL-safe. */
void ppr__copier_release_frames(ppr_copier *cp);

/* Whether vkQueueSubmit runs on a thread of the copier's own (1) or in
 * ppr__copier_submit (0, the default). 0, or PPR_ENOMEM (no thread). */
int ppr__copier_set_async(ppr_copier *cp, int on);

/* Copies it submitted. */
uint64_t ppr__copier_copies(ppr_copier *cp);

/* With PYPRORES_COPY_GPU_TIME=1 when it was made (and timestamps on its
 * queue): the GPU time of its copies that ended and were read back so far
 * (ns, from timestamps around each dispatch) and their number; 0, 0 else. */
void ppr__copier_gpu_time(ppr_copier *cp, uint64_t *ns, uint64_t *copies);

/* Submit the copy of `frame` into d->buf, plane i at offset[i] with out->plane[i]'s
 * width and height: 0; 1 when the shader does not take this frame or layout
 * (not one R16 image per plane, rows padded, a plane off a 4-byte boundary or
 * without room for its last 32-bit word, a buffer past maxStorageBufferRange:
 * nothing was done, copy it another way); or an error. The caller keeps the
 * frame alive until the fence. Any thread (the copier locks). */
int ppr__copier_submit(ppr_copier *cp, AVFrame *frame, const size_t offset[4],
                       const ppr_planes *out, const ppr__copy_dst *d);

#endif
