/* vk_fake_discrete: a test-only Vulkan layer (tests/test_discrete_downloads.py).
 * - reports every physical device as a discrete GPU, so that FFmpeg's hwcontext_vulkan takes
 *   its discrete-GPU download path (the staging buffer, copied out in bands by threads: 7.1.5
 *   series patches 17 and 22-24, 9.0.2 series 17-20) on lavapipe;
 * - with FD_NO_HOST_MEMORY set, hides VK_EXT_external_memory_host (uploads through the
 *   staging buffer too, synchronously);
 * - with FD_NO_HOST_IMAGE_COPY set, hides VK_EXT_host_image_copy (FFmpeg 9's downloads and
 *   uploads then record a copy on a queue instead of copying on the host);
 * - with FD_NO_SHADER_OBJECT set, hides VK_EXT_shader_object (FFmpeg 9 leaves it out only
 *   when its own debug option loads the validation layer; Debian 12's layer, enabled through
 *   VK_INSTANCE_LAYERS, predates it and the first vkCreateShadersEXT crashes);
 * - with FD_ALIGN1 set, reports optimalBufferCopyOffsetAlignment and
 *   optimalBufferCopyRowPitchAlignment as 1, as NVIDIA's driver does;
 * - with FD_FAKE_SEM_FD set, offers VK_KHR_external_semaphore_fd where the driver lacks it
 *   (lavapipe): the extension is left out of vkCreateDevice, VkExportSemaphoreCreateInfo out of
 *   vkCreateSemaphore, vkGetSemaphoreFdKHR gives an eventfd that signals nothing and
 *   vkImportSemaphoreFdKHR refuses (for
 *   tests/test_frame_pool.py's fake CUDA driver, which imports and closes it);
 * - with FD_STATS=FILE, appends counts of a few calls to FILE when it is unloaded.
 * Dispatch is kept per instance and per device (keyed by the loader's dispatch pointer), as
 * instances and devices with different layer chains may live side by side. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <vulkan/vulkan.h>
#include <vulkan/vk_layer.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_OBJ 256

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *key_of(const void *handle) { return *(void **)handle; }

typedef struct Inst {
    void *key;
    VkInstance inst;
    PFN_vkGetInstanceProcAddr gipa;
    PFN_vkDestroyInstance destroy;
    PFN_vkEnumeratePhysicalDevices enum_pd;
    PFN_vkGetPhysicalDeviceProperties props;
    PFN_vkGetPhysicalDeviceProperties2 props2, props2khr;
    PFN_vkEnumerateDeviceExtensionProperties enum_dev_ext;
} Inst;
typedef struct Dev {
    void *key;
    PFN_vkGetDeviceProcAddr gdpa;
    PFN_vkDestroyDevice destroy;
    PFN_vkCmdCopyImageToBuffer i2b;
    PFN_vkGetMemoryHostPointerPropertiesEXT hostptr;
    PFN_vkQueueSubmit2 submit2;
    PFN_vkGetSemaphoreCounterValue semval;
    PFN_vkCreateSemaphore create_sem;
} Dev;
static Inst insts[MAX_OBJ];
static Dev devs[MAX_OBJ];
static struct { VkPhysicalDevice pd; Inst *inst; } pds[MAX_OBJ];

static Inst *inst_get(void *key)
{
    Inst *r = NULL;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_OBJ; i++)
        if (insts[i].key == key) { r = &insts[i]; break; }
    pthread_mutex_unlock(&lock);
    return r;
}
static Inst *inst_of_pd(VkPhysicalDevice pd)
{
    Inst *r = NULL;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_OBJ; i++)
        if (pds[i].pd == pd) { r = pds[i].inst; break; }
    for (int i = 0; !r && i < MAX_OBJ; i++)     /* not enumerated through this layer */
        if (insts[i].key) r = &insts[i];
    pthread_mutex_unlock(&lock);
    return r;
}
static Dev *dev_get(void *key)
{
    Dev *r = NULL;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_OBJ; i++)
        if (devs[i].key == key) { r = &devs[i]; break; }
    pthread_mutex_unlock(&lock);
    return r;
}

static atomic_int n_i2b, n_i2b_band, n_hostptr, n_submit, n_submit_batches, n_semval;

__attribute__((destructor)) static void fd_report(void)
{
    const char *path = getenv("FD_STATS");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (!f)
        return;
    fprintf(f, "fake_discrete: CmdCopyImageToBuffer %d (regions with imageOffset.y > 0: %d), "
            "GetMemoryHostPointerProperties %d, QueueSubmit2 %d (batches %d), GetSemaphoreCounterValue %d\n",
            n_i2b, n_i2b_band, n_hostptr, n_submit, n_submit_batches, n_semval);
    fclose(f);
}

/* ---- instance level */
static VKAPI_ATTR VkResult VKAPI_CALL fd_enum_pd(VkInstance inst, uint32_t *count, VkPhysicalDevice *out)
{
    Inst *in = inst_get(key_of(inst));
    VkResult ret = in->enum_pd(inst, count, out);
    if ((ret == VK_SUCCESS || ret == VK_INCOMPLETE) && out) {
        pthread_mutex_lock(&lock);
        for (uint32_t i = 0; i < *count; i++) {
            int j, freej = -1;
            for (j = 0; j < MAX_OBJ; j++) {
                if (pds[j].pd == out[i]) break;
                if (!pds[j].pd && freej < 0) freej = j;
            }
            if (j == MAX_OBJ && freej >= 0) j = freej;
            if (j < MAX_OBJ) { pds[j].pd = out[i]; pds[j].inst = in; }
        }
        pthread_mutex_unlock(&lock);
    }
    return ret;
}

static void fd_fix_props(VkPhysicalDeviceProperties *p)
{
    p->deviceType = VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
    if (getenv("FD_ALIGN1")) {
        p->limits.optimalBufferCopyOffsetAlignment = 1;
        p->limits.optimalBufferCopyRowPitchAlignment = 1;
    }
}

static VKAPI_ATTR void VKAPI_CALL fd_props(VkPhysicalDevice pd, VkPhysicalDeviceProperties *p)
{
    inst_of_pd(pd)->props(pd, p);
    fd_fix_props(p);
}

static VKAPI_ATTR void VKAPI_CALL fd_props2(VkPhysicalDevice pd, VkPhysicalDeviceProperties2 *p)
{
    Inst *in = inst_of_pd(pd);
    (in->props2 ? in->props2 : in->props2khr)(pd, p);
    fd_fix_props(&p->properties);
}

static VKAPI_ATTR VkResult VKAPI_CALL fd_enum_dev_ext(VkPhysicalDevice pd, const char *layer,
                                                     uint32_t *count, VkExtensionProperties *props)
{
    Inst *in = inst_of_pd(pd);
    uint32_t n = 0, m = 0;
    VkExtensionProperties *all;
    VkResult ret;

    int no_mem = !!getenv("FD_NO_HOST_MEMORY"), no_hic = !!getenv("FD_NO_HOST_IMAGE_COPY");
    int no_so = !!getenv("FD_NO_SHADER_OBJECT"), fake_sem = !!getenv("FD_FAKE_SEM_FD");

    if (layer || (!no_mem && !no_hic && !no_so && !fake_sem))
        return in->enum_dev_ext(pd, layer, count, props);
    ret = in->enum_dev_ext(pd, NULL, &n, NULL);
    if (ret != VK_SUCCESS)
        return ret;
    all = calloc(n + 1, sizeof(*all));
    ret = in->enum_dev_ext(pd, NULL, &n, all);
    if (ret != VK_SUCCESS && ret != VK_INCOMPLETE) {
        free(all);
        return ret;
    }
    for (uint32_t i = 0; i < n; i++)
        if (!(no_mem && !strcmp(all[i].extensionName, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME)) &&
            !(no_hic && !strcmp(all[i].extensionName, VK_EXT_HOST_IMAGE_COPY_EXTENSION_NAME)) &&
            !(no_so && !strcmp(all[i].extensionName, VK_EXT_SHADER_OBJECT_EXTENSION_NAME)))
            all[m++] = all[i];
    if (fake_sem) {
        uint32_t i;
        for (i = 0; i < m && strcmp(all[i].extensionName, VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME); i++)
            ;
        if (i == m) {
            memset(&all[m], 0, sizeof(all[m]));
            snprintf(all[m].extensionName, sizeof(all[m].extensionName), "%s",
                     VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME);
            all[m++].specVersion = 1;
        }
    }
    if (!props) {
        *count = m;
        free(all);
        return VK_SUCCESS;
    }
    ret = *count < m ? VK_INCOMPLETE : VK_SUCCESS;
    if (*count > m)
        *count = m;
    memcpy(props, all, *count * sizeof(*props));
    free(all);
    return ret;
}

static VKAPI_ATTR VkResult VKAPI_CALL fd_create_instance(const VkInstanceCreateInfo *ci,
                                                        const VkAllocationCallbacks *a,
                                                        VkInstance *inst)
{
    VkLayerInstanceCreateInfo *li = (VkLayerInstanceCreateInfo *)ci->pNext;
    PFN_vkGetInstanceProcAddr gipa;
    PFN_vkCreateInstance create;
    VkResult ret;
    Inst *in = NULL;

    while (li && !(li->sType == VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO &&
                   li->function == VK_LAYER_LINK_INFO))
        li = (VkLayerInstanceCreateInfo *)li->pNext;
    if (!li)
        return VK_ERROR_INITIALIZATION_FAILED;
    gipa = li->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    li->u.pLayerInfo = li->u.pLayerInfo->pNext;
    create = (PFN_vkCreateInstance)gipa(VK_NULL_HANDLE, "vkCreateInstance");
    ret = create(ci, a, inst);
    if (ret != VK_SUCCESS)
        return ret;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_OBJ; i++)
        if (!insts[i].key) { in = &insts[i]; in->key = key_of(*inst); break; }
    pthread_mutex_unlock(&lock);
    if (!in)
        abort();
    in->inst = *inst;
    in->gipa = gipa;
#define GET(field, type, name) in->field = (type)gipa(*inst, name)
    GET(destroy, PFN_vkDestroyInstance, "vkDestroyInstance");
    GET(enum_pd, PFN_vkEnumeratePhysicalDevices, "vkEnumeratePhysicalDevices");
    GET(props, PFN_vkGetPhysicalDeviceProperties, "vkGetPhysicalDeviceProperties");
    GET(props2, PFN_vkGetPhysicalDeviceProperties2, "vkGetPhysicalDeviceProperties2");
    GET(props2khr, PFN_vkGetPhysicalDeviceProperties2, "vkGetPhysicalDeviceProperties2KHR");
    GET(enum_dev_ext, PFN_vkEnumerateDeviceExtensionProperties, "vkEnumerateDeviceExtensionProperties");
#undef GET
    return VK_SUCCESS;
}

static VKAPI_ATTR void VKAPI_CALL fd_destroy_instance(VkInstance inst, const VkAllocationCallbacks *a)
{
    Inst *in = inst_get(key_of(inst));
    PFN_vkDestroyInstance destroy = in->destroy;
    pthread_mutex_lock(&lock);
    for (int j = 0; j < MAX_OBJ; j++)
        if (pds[j].inst == in) { pds[j].pd = NULL; pds[j].inst = NULL; }
    in->key = NULL;
    pthread_mutex_unlock(&lock);
    destroy(inst, a);
}

/* ---- device level */
/* FD_FAKE_SEM_FD: semaphores made without the export the driver cannot do */
static VKAPI_ATTR VkResult VKAPI_CALL fd_create_sem(VkDevice d, const VkSemaphoreCreateInfo *ci,
                                                   const VkAllocationCallbacks *a, VkSemaphore *sem)
{
    VkSemaphoreCreateInfo c = *ci;
    VkSemaphoreTypeCreateInfo type;
    const VkBaseInStructure *p;

    c.pNext = NULL;
    for (p = ci->pNext; p; p = p->pNext)
        if (p->sType == VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO) {
            type = *(const VkSemaphoreTypeCreateInfo *)p;
            type.pNext = NULL;
            c.pNext = &type;
        }
    return dev_get(key_of(d))->create_sem(d, &c, a, sem);
}

static VKAPI_ATTR VkResult VKAPI_CALL fd_get_sem_fd(VkDevice d, const VkSemaphoreGetFdInfoKHR *info, int *fd)
{
    *fd = eventfd(0, EFD_CLOEXEC);
    return *fd < 0 ? VK_ERROR_TOO_MANY_OBJECTS : VK_SUCCESS;
}

static VKAPI_ATTR VkResult VKAPI_CALL fd_import_sem_fd(VkDevice d, const VkImportSemaphoreFdInfoKHR *info)
{
    return VK_ERROR_INVALID_EXTERNAL_HANDLE;
}

static VKAPI_ATTR void VKAPI_CALL fd_i2b(VkCommandBuffer cb, VkImage img, VkImageLayout l, VkBuffer buf,
                                         uint32_t n, const VkBufferImageCopy *r)
{
    n_i2b++;
    for (uint32_t i = 0; i < n; i++)
        if (r[i].imageOffset.y)
            n_i2b_band++;
    dev_get(key_of(cb))->i2b(cb, img, l, buf, n, r);
}

static VKAPI_ATTR VkResult VKAPI_CALL fd_hostptr(VkDevice d, VkExternalMemoryHandleTypeFlagBits t,
                                                const void *p, VkMemoryHostPointerPropertiesEXT *pr)
{
    n_hostptr++;
    return dev_get(key_of(d))->hostptr(d, t, p, pr);
}

static VKAPI_ATTR VkResult VKAPI_CALL fd_submit2(VkQueue q, uint32_t n, const VkSubmitInfo2 *s, VkFence f)
{
    n_submit++;
    n_submit_batches += n;
    return dev_get(key_of(q))->submit2(q, n, s, f);
}

static VKAPI_ATTR VkResult VKAPI_CALL fd_semval(VkDevice d, VkSemaphore s, uint64_t *v)
{
    n_semval++;
    return dev_get(key_of(d))->semval(d, s, v);
}

static VKAPI_ATTR void VKAPI_CALL fd_destroy_device(VkDevice d, const VkAllocationCallbacks *a)
{
    Dev *dv = dev_get(key_of(d));
    PFN_vkDestroyDevice destroy = dv->destroy;
    pthread_mutex_lock(&lock);
    dv->key = NULL;
    pthread_mutex_unlock(&lock);
    destroy(d, a);
}

static VKAPI_ATTR VkResult VKAPI_CALL fd_create_device(VkPhysicalDevice pd, const VkDeviceCreateInfo *ci,
                                                      const VkAllocationCallbacks *a, VkDevice *dev)
{
    VkLayerDeviceCreateInfo *li = (VkLayerDeviceCreateInfo *)ci->pNext;
    PFN_vkGetInstanceProcAddr gipa;
    PFN_vkGetDeviceProcAddr gdpa;
    PFN_vkCreateDevice create;
    Dev *dv = NULL;
    VkResult ret;

    while (li && !(li->sType == VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO &&
                   li->function == VK_LAYER_LINK_INFO))
        li = (VkLayerDeviceCreateInfo *)li->pNext;
    if (!li)
        return VK_ERROR_INITIALIZATION_FAILED;
    gipa = li->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    gdpa = li->u.pLayerInfo->pfnNextGetDeviceProcAddr;
    li->u.pLayerInfo = li->u.pLayerInfo->pNext;
    create = (PFN_vkCreateDevice)gipa(inst_of_pd(pd)->inst, "vkCreateDevice");
    if (getenv("FD_FAKE_SEM_FD")) {     /* the driver does not know the extension offered */
        VkDeviceCreateInfo c = *ci;
        const char **names = calloc(ci->enabledExtensionCount + 1, sizeof(*names));
        c.enabledExtensionCount = 0;
        for (uint32_t i = 0; i < ci->enabledExtensionCount; i++)
            if (strcmp(ci->ppEnabledExtensionNames[i], VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME))
                names[c.enabledExtensionCount++] = ci->ppEnabledExtensionNames[i];
        c.ppEnabledExtensionNames = names;
        ret = create(pd, &c, a, dev);
        free(names);
    } else {
        ret = create(pd, ci, a, dev);
    }
    if (ret != VK_SUCCESS)
        return ret;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_OBJ; i++)
        if (!devs[i].key) { dv = &devs[i]; dv->key = key_of(*dev); break; }
    pthread_mutex_unlock(&lock);
    if (!dv)
        abort();
    dv->gdpa = gdpa;
#define GET(field, type, name) dv->field = (type)gdpa(*dev, name)
    GET(destroy, PFN_vkDestroyDevice, "vkDestroyDevice");
    GET(i2b, PFN_vkCmdCopyImageToBuffer, "vkCmdCopyImageToBuffer");
    GET(hostptr, PFN_vkGetMemoryHostPointerPropertiesEXT, "vkGetMemoryHostPointerPropertiesEXT");
    GET(submit2, PFN_vkQueueSubmit2, "vkQueueSubmit2");
    if (!dv->submit2)
        GET(submit2, PFN_vkQueueSubmit2, "vkQueueSubmit2KHR");
    GET(semval, PFN_vkGetSemaphoreCounterValue, "vkGetSemaphoreCounterValue");
    GET(create_sem, PFN_vkCreateSemaphore, "vkCreateSemaphore");
    if (!dv->semval)
        GET(semval, PFN_vkGetSemaphoreCounterValue, "vkGetSemaphoreCounterValueKHR");
#undef GET
    return VK_SUCCESS;
}

EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL fd_GetDeviceProcAddr(VkDevice dev, const char *name)
{
    Dev *dv = dev_get(key_of(dev));
#define WRAP(vkname, fn, field) \
    if (!strcmp(name, vkname)) return dv->field ? (PFN_vkVoidFunction)fn : NULL;
    WRAP("vkDestroyDevice", fd_destroy_device, destroy)
    WRAP("vkCmdCopyImageToBuffer", fd_i2b, i2b)
    WRAP("vkGetMemoryHostPointerPropertiesEXT", fd_hostptr, hostptr)
    WRAP("vkQueueSubmit2", fd_submit2, submit2)
    WRAP("vkQueueSubmit2KHR", fd_submit2, submit2)
    WRAP("vkGetSemaphoreCounterValue", fd_semval, semval)
    WRAP("vkGetSemaphoreCounterValueKHR", fd_semval, semval)
    if (getenv("FD_FAKE_SEM_FD")) {
        WRAP("vkCreateSemaphore", fd_create_sem, create_sem)
        if (!strcmp(name, "vkGetSemaphoreFdKHR")) return (PFN_vkVoidFunction)fd_get_sem_fd;
        if (!strcmp(name, "vkImportSemaphoreFdKHR")) return (PFN_vkVoidFunction)fd_import_sem_fd;
    }
#undef WRAP
    if (!strcmp(name, "vkGetDeviceProcAddr")) return (PFN_vkVoidFunction)fd_GetDeviceProcAddr;
    return dv->gdpa(dev, name);
}

EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL fd_GetInstanceProcAddr(VkInstance inst, const char *name)
{
    Inst *in;
    if (!strcmp(name, "vkGetInstanceProcAddr")) return (PFN_vkVoidFunction)fd_GetInstanceProcAddr;
    if (!strcmp(name, "vkCreateInstance")) return (PFN_vkVoidFunction)fd_create_instance;
    if (!strcmp(name, "vkDestroyInstance")) return (PFN_vkVoidFunction)fd_destroy_instance;
    if (!strcmp(name, "vkCreateDevice")) return (PFN_vkVoidFunction)fd_create_device;
    if (!strcmp(name, "vkGetDeviceProcAddr")) return (PFN_vkVoidFunction)fd_GetDeviceProcAddr;
    if (!strcmp(name, "vkEnumeratePhysicalDevices")) return (PFN_vkVoidFunction)fd_enum_pd;
    if (!strcmp(name, "vkEnumerateDeviceExtensionProperties")) return (PFN_vkVoidFunction)fd_enum_dev_ext;
    if (!strcmp(name, "vkGetPhysicalDeviceProperties")) return (PFN_vkVoidFunction)fd_props;
    if (!strcmp(name, "vkGetPhysicalDeviceProperties2")) return (PFN_vkVoidFunction)fd_props2;
    if (!strcmp(name, "vkGetPhysicalDeviceProperties2KHR")) return (PFN_vkVoidFunction)fd_props2;
    if (!inst)
        return NULL;
    in = inst_get(key_of(inst));
    return in ? in->gipa(inst, name) : NULL;
}
