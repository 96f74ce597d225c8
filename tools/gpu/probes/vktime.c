/*
 * vktime: a Vulkan call-timing shim. Built as a shared library named libvulkan.so.1 and put
 * first on LD_LIBRARY_PATH, it is what FFmpeg's dlopen("libvulkan.so.1") finds (LD_PRELOAD
 * would not do: FFmpeg looks vkGetInstanceProcAddr up with dlsym on its own handle). It loads
 * the real loader by path and hands out, from vkGetInstanceProcAddr and vkGetDeviceProcAddr,
 * timing wrappers of the calls listed in FUNCS below (those that can be slow: creation and
 * destruction, enumeration and queries, memory, pipelines, submissions and waits); every other
 * function is the real one, untouched.
 *
 * At process exit it writes, to each file of $VKTIME_OUT (comma-separated; stderr when unset;
 * "%p" in a name becomes the pid; a name ending in ".json" gets JSON, any other text):
 *   - per function: calls, total and longest time, offset of the first call;
 *   - a timeline of every call that took at least $VKTIME_MIN_US microseconds (default 1000),
 *     with its start offset from the moment the shim was loaded, and its thread.
 * $VKTIME_DUMP_AFTER=vkDestroyInstance (any wrapped name) also writes the report after each
 * such call, for processes that leave without running exit handlers.
 * $VKTIME_LOADER names the real loader (default: the system's libvulkan.so.1, by full path).
 * $VKTIME_T0 (CLOCK_MONOTONIC nanoseconds, as tools/gpu/probes/startprobe.c sets it at the start of its
 * main()) replaces the shim's load time as the origin of the offsets, so that both timelines
 * share it.
 *
 * Real function pointers are kept per dispatch key (the loader's dispatch table pointer, the
 * first word of every dispatchable handle, as layers do), so several devices at once are
 * handled; pointers from vkGetInstanceProcAddr (loader trampolines) serve any handle.
 *
 * Build (tools/gpu/gpu-pack does this):
 *   cc -O2 -shared -fPIC -fvisibility=hidden -Wl,-soname,libvulkan.so.1 -Wl,-z,nodelete \
 *      -I.../vulkan-headers/include -o DIR/libvulkan.so.1 vktime.c -ldl -lpthread
 * Use:  LD_LIBRARY_PATH=DIR:$LD_LIBRARY_PATH VKTIME_OUT=/tmp/vk.txt ffmpeg -init_hw_device vulkan ...
 */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <vulkan/vulkan.h>

#include "since_exec.h"

#define EXPORT __attribute__((visibility("default")))
#define DK(h) ((h) ? *(void **)(h) : NULL)     /* dispatch key of a dispatchable handle */
#define AC const VkAllocationCallbacks *

/* X(return type, name, key, (parameters), (arguments)); V(...) the same for void functions.
 * The key of instance-level and global calls is NULL: their pointers come from
 * vkGetInstanceProcAddr and serve any handle. */
#define FUNCS(X, V) \
    X(VkResult, vkCreateInstance, NULL, (const VkInstanceCreateInfo *a, AC b, VkInstance *c), (a, b, c)) \
    V(vkDestroyInstance, NULL, (VkInstance a, AC b), (a, b)) \
    X(VkResult, vkEnumerateInstanceExtensionProperties, NULL, (const char *a, uint32_t *b, VkExtensionProperties *c), (a, b, c)) \
    X(VkResult, vkEnumerateInstanceLayerProperties, NULL, (uint32_t *a, VkLayerProperties *b), (a, b)) \
    X(VkResult, vkEnumerateInstanceVersion, NULL, (uint32_t *a), (a)) \
    X(VkResult, vkEnumeratePhysicalDevices, NULL, (VkInstance a, uint32_t *b, VkPhysicalDevice *c), (a, b, c)) \
    X(VkResult, vkEnumerateDeviceExtensionProperties, NULL, (VkPhysicalDevice a, const char *b, uint32_t *c, VkExtensionProperties *d), (a, b, c, d)) \
    X(VkResult, vkEnumerateDeviceLayerProperties, NULL, (VkPhysicalDevice a, uint32_t *b, VkLayerProperties *c), (a, b, c)) \
    V(vkGetPhysicalDeviceProperties, NULL, (VkPhysicalDevice a, VkPhysicalDeviceProperties *b), (a, b)) \
    V(vkGetPhysicalDeviceProperties2, NULL, (VkPhysicalDevice a, VkPhysicalDeviceProperties2 *b), (a, b)) \
    V(vkGetPhysicalDeviceProperties2KHR, NULL, (VkPhysicalDevice a, VkPhysicalDeviceProperties2 *b), (a, b)) \
    V(vkGetPhysicalDeviceFeatures, NULL, (VkPhysicalDevice a, VkPhysicalDeviceFeatures *b), (a, b)) \
    V(vkGetPhysicalDeviceFeatures2, NULL, (VkPhysicalDevice a, VkPhysicalDeviceFeatures2 *b), (a, b)) \
    V(vkGetPhysicalDeviceFeatures2KHR, NULL, (VkPhysicalDevice a, VkPhysicalDeviceFeatures2 *b), (a, b)) \
    V(vkGetPhysicalDeviceMemoryProperties, NULL, (VkPhysicalDevice a, VkPhysicalDeviceMemoryProperties *b), (a, b)) \
    V(vkGetPhysicalDeviceMemoryProperties2, NULL, (VkPhysicalDevice a, VkPhysicalDeviceMemoryProperties2 *b), (a, b)) \
    V(vkGetPhysicalDeviceQueueFamilyProperties, NULL, (VkPhysicalDevice a, uint32_t *b, VkQueueFamilyProperties *c), (a, b, c)) \
    V(vkGetPhysicalDeviceQueueFamilyProperties2, NULL, (VkPhysicalDevice a, uint32_t *b, VkQueueFamilyProperties2 *c), (a, b, c)) \
    V(vkGetPhysicalDeviceQueueFamilyProperties2KHR, NULL, (VkPhysicalDevice a, uint32_t *b, VkQueueFamilyProperties2 *c), (a, b, c)) \
    V(vkGetPhysicalDeviceFormatProperties2, NULL, (VkPhysicalDevice a, VkFormat b, VkFormatProperties2 *c), (a, b, c)) \
    V(vkGetPhysicalDeviceFormatProperties2KHR, NULL, (VkPhysicalDevice a, VkFormat b, VkFormatProperties2 *c), (a, b, c)) \
    X(VkResult, vkGetPhysicalDeviceImageFormatProperties2, NULL, (VkPhysicalDevice a, const VkPhysicalDeviceImageFormatInfo2 *b, VkImageFormatProperties2 *c), (a, b, c)) \
    X(VkResult, vkGetPhysicalDeviceImageFormatProperties2KHR, NULL, (VkPhysicalDevice a, const VkPhysicalDeviceImageFormatInfo2 *b, VkImageFormatProperties2 *c), (a, b, c)) \
    X(VkResult, vkGetPhysicalDeviceVideoCapabilitiesKHR, NULL, (VkPhysicalDevice a, const VkVideoProfileInfoKHR *b, VkVideoCapabilitiesKHR *c), (a, b, c)) \
    X(VkResult, vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR, NULL, (VkPhysicalDevice a, uint32_t *b, VkCooperativeMatrixPropertiesKHR *c), (a, b, c)) \
    X(VkResult, vkCreateDevice, NULL, (VkPhysicalDevice a, const VkDeviceCreateInfo *b, AC c, VkDevice *d), (a, b, c, d)) \
    V(vkDestroyDevice, DK(a), (VkDevice a, AC b), (a, b)) \
    X(VkResult, vkDeviceWaitIdle, DK(a), (VkDevice a), (a)) \
    V(vkGetDeviceQueue, DK(a), (VkDevice a, uint32_t b, uint32_t c, VkQueue *d), (a, b, c, d)) \
    V(vkGetDeviceQueue2, DK(a), (VkDevice a, const VkDeviceQueueInfo2 *b, VkQueue *c), (a, b, c)) \
    X(VkResult, vkQueueSubmit, DK(a), (VkQueue a, uint32_t b, const VkSubmitInfo *c, VkFence d), (a, b, c, d)) \
    X(VkResult, vkQueueSubmit2, DK(a), (VkQueue a, uint32_t b, const VkSubmitInfo2 *c, VkFence d), (a, b, c, d)) \
    X(VkResult, vkQueueSubmit2KHR, DK(a), (VkQueue a, uint32_t b, const VkSubmitInfo2 *c, VkFence d), (a, b, c, d)) \
    X(VkResult, vkQueueWaitIdle, DK(a), (VkQueue a), (a)) \
    X(VkResult, vkCreateFence, DK(a), (VkDevice a, const VkFenceCreateInfo *b, AC c, VkFence *d), (a, b, c, d)) \
    V(vkDestroyFence, DK(a), (VkDevice a, VkFence b, AC c), (a, b, c)) \
    X(VkResult, vkWaitForFences, DK(a), (VkDevice a, uint32_t b, const VkFence *c, VkBool32 d, uint64_t e), (a, b, c, d, e)) \
    X(VkResult, vkResetFences, DK(a), (VkDevice a, uint32_t b, const VkFence *c), (a, b, c)) \
    X(VkResult, vkGetFenceStatus, DK(a), (VkDevice a, VkFence b), (a, b)) \
    X(VkResult, vkCreateSemaphore, DK(a), (VkDevice a, const VkSemaphoreCreateInfo *b, AC c, VkSemaphore *d), (a, b, c, d)) \
    V(vkDestroySemaphore, DK(a), (VkDevice a, VkSemaphore b, AC c), (a, b, c)) \
    X(VkResult, vkWaitSemaphores, DK(a), (VkDevice a, const VkSemaphoreWaitInfo *b, uint64_t c), (a, b, c)) \
    X(VkResult, vkWaitSemaphoresKHR, DK(a), (VkDevice a, const VkSemaphoreWaitInfo *b, uint64_t c), (a, b, c)) \
    X(VkResult, vkAllocateMemory, DK(a), (VkDevice a, const VkMemoryAllocateInfo *b, AC c, VkDeviceMemory *d), (a, b, c, d)) \
    V(vkFreeMemory, DK(a), (VkDevice a, VkDeviceMemory b, AC c), (a, b, c)) \
    X(VkResult, vkMapMemory, DK(a), (VkDevice a, VkDeviceMemory b, VkDeviceSize c, VkDeviceSize d, VkMemoryMapFlags e, void **f), (a, b, c, d, e, f)) \
    V(vkUnmapMemory, DK(a), (VkDevice a, VkDeviceMemory b), (a, b)) \
    X(VkResult, vkCreateBuffer, DK(a), (VkDevice a, const VkBufferCreateInfo *b, AC c, VkBuffer *d), (a, b, c, d)) \
    V(vkDestroyBuffer, DK(a), (VkDevice a, VkBuffer b, AC c), (a, b, c)) \
    X(VkResult, vkBindBufferMemory, DK(a), (VkDevice a, VkBuffer b, VkDeviceMemory c, VkDeviceSize d), (a, b, c, d)) \
    X(VkResult, vkCreateImage, DK(a), (VkDevice a, const VkImageCreateInfo *b, AC c, VkImage *d), (a, b, c, d)) \
    V(vkDestroyImage, DK(a), (VkDevice a, VkImage b, AC c), (a, b, c)) \
    X(VkResult, vkBindImageMemory2, DK(a), (VkDevice a, uint32_t b, const VkBindImageMemoryInfo *c), (a, b, c)) \
    X(VkResult, vkBindImageMemory2KHR, DK(a), (VkDevice a, uint32_t b, const VkBindImageMemoryInfo *c), (a, b, c)) \
    X(VkResult, vkCreateImageView, DK(a), (VkDevice a, const VkImageViewCreateInfo *b, AC c, VkImageView *d), (a, b, c, d)) \
    V(vkDestroyImageView, DK(a), (VkDevice a, VkImageView b, AC c), (a, b, c)) \
    X(VkResult, vkCreateSampler, DK(a), (VkDevice a, const VkSamplerCreateInfo *b, AC c, VkSampler *d), (a, b, c, d)) \
    X(VkResult, vkCreateShaderModule, DK(a), (VkDevice a, const VkShaderModuleCreateInfo *b, AC c, VkShaderModule *d), (a, b, c, d)) \
    V(vkDestroyShaderModule, DK(a), (VkDevice a, VkShaderModule b, AC c), (a, b, c)) \
    X(VkResult, vkCreateShadersEXT, DK(a), (VkDevice a, uint32_t b, const VkShaderCreateInfoEXT *c, AC d, VkShaderEXT *e), (a, b, c, d, e)) \
    V(vkDestroyShaderEXT, DK(a), (VkDevice a, VkShaderEXT b, AC c), (a, b, c)) \
    X(VkResult, vkCreateComputePipelines, DK(a), (VkDevice a, VkPipelineCache b, uint32_t c, const VkComputePipelineCreateInfo *d, AC e, VkPipeline *f), (a, b, c, d, e, f)) \
    V(vkDestroyPipeline, DK(a), (VkDevice a, VkPipeline b, AC c), (a, b, c)) \
    X(VkResult, vkCreatePipelineLayout, DK(a), (VkDevice a, const VkPipelineLayoutCreateInfo *b, AC c, VkPipelineLayout *d), (a, b, c, d)) \
    V(vkDestroyPipelineLayout, DK(a), (VkDevice a, VkPipelineLayout b, AC c), (a, b, c)) \
    X(VkResult, vkCreateDescriptorSetLayout, DK(a), (VkDevice a, const VkDescriptorSetLayoutCreateInfo *b, AC c, VkDescriptorSetLayout *d), (a, b, c, d)) \
    V(vkDestroyDescriptorSetLayout, DK(a), (VkDevice a, VkDescriptorSetLayout b, AC c), (a, b, c)) \
    X(VkResult, vkCreateDescriptorPool, DK(a), (VkDevice a, const VkDescriptorPoolCreateInfo *b, AC c, VkDescriptorPool *d), (a, b, c, d)) \
    V(vkDestroyDescriptorPool, DK(a), (VkDevice a, VkDescriptorPool b, AC c), (a, b, c)) \
    X(VkResult, vkAllocateDescriptorSets, DK(a), (VkDevice a, const VkDescriptorSetAllocateInfo *b, VkDescriptorSet *c), (a, b, c)) \
    X(VkResult, vkCreateCommandPool, DK(a), (VkDevice a, const VkCommandPoolCreateInfo *b, AC c, VkCommandPool *d), (a, b, c, d)) \
    V(vkDestroyCommandPool, DK(a), (VkDevice a, VkCommandPool b, AC c), (a, b, c)) \
    X(VkResult, vkAllocateCommandBuffers, DK(a), (VkDevice a, const VkCommandBufferAllocateInfo *b, VkCommandBuffer *c), (a, b, c)) \
    V(vkFreeCommandBuffers, DK(a), (VkDevice a, VkCommandPool b, uint32_t c, const VkCommandBuffer *d), (a, b, c, d)) \
    X(VkResult, vkBeginCommandBuffer, DK(a), (VkCommandBuffer a, const VkCommandBufferBeginInfo *b), (a, b)) \
    X(VkResult, vkEndCommandBuffer, DK(a), (VkCommandBuffer a), (a)) \
    X(VkResult, vkCreateQueryPool, DK(a), (VkDevice a, const VkQueryPoolCreateInfo *b, AC c, VkQueryPool *d), (a, b, c, d)) \
    V(vkDestroyQueryPool, DK(a), (VkDevice a, VkQueryPool b, AC c), (a, b, c)) \
    X(VkResult, vkGetQueryPoolResults, DK(a), (VkDevice a, VkQueryPool b, uint32_t c, uint32_t d, size_t e, void *f, VkDeviceSize g, VkQueryResultFlags h), (a, b, c, d, e, f, g, h)) \
    X(VkResult, vkCreateVideoSessionKHR, DK(a), (VkDevice a, const VkVideoSessionCreateInfoKHR *b, AC c, VkVideoSessionKHR *d), (a, b, c, d))

enum {
#define ID_X(r, n, k, p, a) ID_##n,
#define ID_V(n, k, p, a) ID_##n,
    FUNCS(ID_X, ID_V)
    ID_vkGetInstanceProcAddr,
    ID_vkGetDeviceProcAddr,
    ID_loader_dlopen,           /* the shim's dlopen of the real loader */
    NB_IDS
};

static const char *const names[NB_IDS] = {
#define NAME_X(r, n, k, p, a) #n,
#define NAME_V(n, k, p, a) #n,
    FUNCS(NAME_X, NAME_V)
    "vkGetInstanceProcAddr",
    "vkGetDeviceProcAddr",
    "(dlopen of the real loader)",
};

/* ------------------------------------------------------------------ real pointers, by key */
#define NB_ENTRIES 16
typedef struct Slot {
    atomic_int n;                              /* entries written, ever (ring of NB_ENTRIES) */
    struct { void *key; void *fn; } e[NB_ENTRIES];
} Slot;
static Slot slots[NB_IDS];
static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;

static void *real_fn(int id, void *key)
{
    Slot *s = &slots[id];
    int n = atomic_load_explicit(&s->n, memory_order_acquire);
    void *newest = NULL, *any_key = NULL;
    for (int i = n - 1; i >= 0 && i >= n - NB_ENTRIES; i--) {
        int j = i % NB_ENTRIES;
        if (s->e[j].key == key)
            return s->e[j].fn;
        if (!s->e[j].key && !any_key)
            any_key = s->e[j].fn;
        if (!newest)
            newest = s->e[j].fn;
    }
    return any_key ? any_key : newest;
}

static void set_real_fn(int id, void *key, void *fn)
{
    Slot *s = &slots[id];
    pthread_mutex_lock(&slot_lock);
    int n = atomic_load_explicit(&s->n, memory_order_relaxed), found = 0;
    for (int i = n - 1; i >= 0 && i >= n - NB_ENTRIES && !found; i--)
        if (s->e[i % NB_ENTRIES].key == key)
            found = s->e[i % NB_ENTRIES].fn == fn ? 1 : -1;  /* newest for this key */
    if (found != 1) {
        s->e[n % NB_ENTRIES].key = key;
        s->e[n % NB_ENTRIES].fn = fn;
        atomic_store_explicit(&s->n, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&slot_lock);
}

/* ------------------------------------------------------------------ statistics */
typedef struct Stat {
    atomic_uint_fast64_t calls, total_ns, max_ns, first_ns;   /* first_ns: offset + 1 */
} Stat;
typedef struct Event {
    uint64_t start_ns, dur_ns;                 /* start: from the shim's load */
    int id, tid;
} Event;
#define NB_EVENTS 8192

static Stat stats[NB_IDS];
static Event events[NB_EVENTS];
static atomic_int nb_events, events_done[NB_EVENTS];
static atomic_int dropped;
static uint64_t t_load, min_ns = 1000000;     /* t_load: origin of the offsets */
static const char *origin = "the shim's load";
static double load_at_s;                        /* the shim's load, from the origin */
static double exec_to_load_s = -1;
static int dump_after = -1;
static void *loader;
static char loader_path[PATH_MAX];
static PFN_vkGetInstanceProcAddr real_gipa;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

static void write_report(const char *why);

static void note(int id, uint64_t t0, uint64_t t1)
{
    Stat *s = &stats[id];
    uint64_t d = t1 - t0, m = atomic_load_explicit(&s->max_ns, memory_order_relaxed), zero = 0;
    atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->total_ns, d, memory_order_relaxed);
    while (d > m && !atomic_compare_exchange_weak(&s->max_ns, &m, d))
        ;
    atomic_compare_exchange_strong(&s->first_ns, &zero, t0 - t_load + 1);
    if (d >= min_ns) {
        int i = atomic_fetch_add(&nb_events, 1);
        if (i < NB_EVENTS) {
            events[i] = (Event){ t0 - t_load, d, id, (int)syscall(SYS_gettid) };
            atomic_store_explicit(&events_done[i], 1, memory_order_release);
        } else {
            atomic_fetch_add(&dropped, 1);
        }
    }
    if (id == dump_after)
        write_report(names[id]);
}

/* ------------------------------------------------------------------ the wrappers */
#define WRAP_X(ret, name, key, params, args)                                   \
    static ret VKAPI_CALL w_##name params                                      \
    {                                                                          \
        typedef ret (VKAPI_PTR *fn_t) params;                                  \
        fn_t fn = (fn_t)real_fn(ID_##name, key);                               \
        uint64_t t0 = now_ns();                                                \
        ret r = fn args;                                                       \
        note(ID_##name, t0, now_ns());                                         \
        return r;                                                              \
    }
#define WRAP_V(name, key, params, args)                                        \
    static void VKAPI_CALL w_##name params                                     \
    {                                                                          \
        typedef void (VKAPI_PTR *fn_t) params;                                 \
        fn_t fn = (fn_t)real_fn(ID_##name, key);                               \
        uint64_t t0 = now_ns();                                                \
        fn args;                                                               \
        note(ID_##name, t0, now_ns());                                         \
    }
FUNCS(WRAP_X, WRAP_V)

static PFN_vkVoidFunction const wrappers[] = {
#define PTR_X(r, n, k, p, a) (PFN_vkVoidFunction)w_##n,
#define PTR_V(n, k, p, a) (PFN_vkVoidFunction)w_##n,
    FUNCS(PTR_X, PTR_V)
};

static int find_id(const char *name)
{
    for (int i = 0; i < (int)(sizeof(wrappers) / sizeof(wrappers[0])); i++)
        if (!strcmp(names[i], name))
            return i;
    return -1;
}

/* The real pointer fn of name, for handles of dispatch key `key`: its wrapper, or fn itself
 * when name is not timed (or fn is NULL: the caller must see that it is missing). */
static PFN_vkVoidFunction wrap(const char *name, void *key, PFN_vkVoidFunction fn)
{
    int id;
    if (!fn || !name || (id = find_id(name)) < 0)
        return fn;
    set_real_fn(id, key, (void *)fn);
    return wrappers[id];
}

EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vkGetDeviceProcAddr(VkDevice dev, const char *name);

static PFN_vkVoidFunction VKAPI_CALL w_vkGetDeviceProcAddr(VkDevice dev, const char *name)
{
    PFN_vkGetDeviceProcAddr real = (PFN_vkGetDeviceProcAddr)real_fn(ID_vkGetDeviceProcAddr, NULL);
    if (!real)
        return NULL;
    uint64_t t0 = now_ns();
    PFN_vkVoidFunction fn = real(dev, name);
    note(ID_vkGetDeviceProcAddr, t0, now_ns());
    if (fn && name && !strcmp(name, "vkGetDeviceProcAddr"))
        return (PFN_vkVoidFunction)w_vkGetDeviceProcAddr;
    return wrap(name, DK(dev), fn);
}

EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vkGetInstanceProcAddr(VkInstance inst, const char *name)
{
    if (!real_gipa)
        return NULL;
    uint64_t t0 = now_ns();
    PFN_vkVoidFunction fn = real_gipa(inst, name);
    note(ID_vkGetInstanceProcAddr, t0, now_ns());
    if (!fn || !name)
        return fn;
    if (!strcmp(name, "vkGetInstanceProcAddr"))
        return (PFN_vkVoidFunction)vkGetInstanceProcAddr;
    if (!strcmp(name, "vkGetDeviceProcAddr")) {
        set_real_fn(ID_vkGetDeviceProcAddr, NULL, (void *)fn);
        return (PFN_vkVoidFunction)w_vkGetDeviceProcAddr;
    }
    return wrap(name, NULL, fn);
}

EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vkGetDeviceProcAddr(VkDevice dev, const char *name)
{
    return w_vkGetDeviceProcAddr(dev, name);
}

/* ------------------------------------------------------------------ loading and the report */
static int self_path(char *out, size_t size)
{
    Dl_info info;
    if (!dladdr((void *)vkGetInstanceProcAddr, &info) || !info.dli_fname || !realpath(info.dli_fname, out))
        return snprintf(out, size, "?"), -1;
    return 0;
}

__attribute__((constructor)) static void vktime_init(void)
{
    static const char *const defaults[] = {
        "/usr/lib/x86_64-linux-gnu/libvulkan.so.1", "/usr/lib64/libvulkan.so.1",
        "/usr/lib/libvulkan.so.1", "/lib/x86_64-linux-gnu/libvulkan.so.1",
        "/usr/lib/aarch64-linux-gnu/libvulkan.so.1",
    };
    const char *env = getenv("VKTIME_LOADER"), *s;
    char self[PATH_MAX], real[PATH_MAX];
    t_load = now_ns();
    exec_to_load_s = since_exec();
    if ((s = getenv("VKTIME_T0")) && strtoull(s, NULL, 10) && strtoull(s, NULL, 10) <= t_load) {
        load_at_s = (t_load - strtoull(s, NULL, 10)) * 1e-9;
        t_load = strtoull(s, NULL, 10);
        origin = "VKTIME_T0";
    }
    if ((s = getenv("VKTIME_MIN_US")))
        min_ns = strtoull(s, NULL, 10) * 1000;
    if ((s = getenv("VKTIME_DUMP_AFTER")))
        dump_after = find_id(s);
    self_path(self, sizeof(self));
    for (size_t i = 0; i < (env ? 1 : sizeof(defaults) / sizeof(defaults[0])); i++) {
        const char *cand = env ? env : defaults[i];
        if (!realpath(cand, real) || !strcmp(real, self))
            continue;                          /* missing, or this very shim */
        uint64_t t0 = now_ns();
        loader = dlopen(real, RTLD_NOW | RTLD_LOCAL);
        note(ID_loader_dlopen, t0, now_ns());
        if (loader) {
            snprintf(loader_path, sizeof(loader_path), "%s", real);
            break;
        }
    }
    if (!loader) {
        fprintf(stderr, "vktime: cannot load the real Vulkan loader (%s): set VKTIME_LOADER\n",
                env ? env : "no libvulkan.so.1 in the usual places");
        return;
    }
    real_gipa = (PFN_vkGetInstanceProcAddr)dlsym(loader, "vkGetInstanceProcAddr");
    if (!real_gipa)
        fprintf(stderr, "vktime: %s has no vkGetInstanceProcAddr\n", loader_path);
}

static int by_total(const void *a, const void *b)
{
    uint64_t x = atomic_load(&stats[*(const int *)a].total_ns);
    uint64_t y = atomic_load(&stats[*(const int *)b].total_ns);
    return x < y ? 1 : x > y ? -1 : 0;
}

static int by_start(const void *a, const void *b)
{
    const Event *x = a, *y = b;
    return x->start_ns < y->start_ns ? -1 : x->start_ns > y->start_ns;
}

static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;

static void print_report(FILE *f, int json, const char *why, uint64_t t_now, uint64_t sum,
                         const int *order, int n, const Event *ev, int ne)
{
    if (json) {
        fprintf(f, "{\"pid\": %d, \"why\": \"%s\", \"loader\": \"%s\", \"origin\": \"%s\", "
                "\"load_at_s\": %.6f, \"exec_to_load_s\": %.3f, \"report_at_s\": %.6f, "
                "\"wrapped_total_s\": %.6f, \"min_us\": %llu, \"functions\": [",
                (int)getpid(), why, loader_path, origin, load_at_s, exec_to_load_s, (t_now - t_load) * 1e-9,
                sum * 1e-9, (unsigned long long)(min_ns / 1000));
        for (int i = 0; i < n; i++) {
            Stat *s = &stats[order[i]];
            fprintf(f, "%s\n  {\"name\": \"%s\", \"calls\": %llu, \"total_s\": %.6f, \"max_s\": %.6f, "
                    "\"first_at_s\": %.6f}", i ? "," : "", names[order[i]],
                    (unsigned long long)atomic_load(&s->calls), atomic_load(&s->total_ns) * 1e-9,
                    atomic_load(&s->max_ns) * 1e-9, (atomic_load(&s->first_ns) - 1) * 1e-9);
        }
        fprintf(f, "],\n \"timeline\": [");
        for (int i = 0; i < ne; i++)
            fprintf(f, "%s\n  {\"at_s\": %.6f, \"dur_s\": %.6f, \"name\": \"%s\", \"tid\": %d}", i ? "," : "",
                    ev[i].start_ns * 1e-9, ev[i].dur_ns * 1e-9, names[ev[i].id], ev[i].tid);
        fprintf(f, "], \"dropped\": %d}\n", atomic_load(&dropped));
        return;
    }
    fprintf(f, "vktime: pid %d, report %s at +%.3f s from %s (the shim loaded at +%.3f s, %.3f s after "
            "exec +-0.01), loader %s\n", (int)getpid(), why, (t_now - t_load) * 1e-9, origin, load_at_s,
            exec_to_load_s, loader_path);
    fprintf(f, "vktime: %.3f s in timed calls (vkGet*ProcAddr apart; calls on several threads add up)\n",
            sum * 1e-9);
    fprintf(f, "%-48s %7s %10s %10s %10s\n", "function", "calls", "total ms", "max ms", "first +ms");
    for (int i = 0; i < n; i++) {
        Stat *s = &stats[order[i]];
        fprintf(f, "%-48s %7llu %10.3f %10.3f %10.3f\n", names[order[i]],
                (unsigned long long)atomic_load(&s->calls), atomic_load(&s->total_ns) * 1e-6,
                atomic_load(&s->max_ns) * 1e-6, (atomic_load(&s->first_ns) - 1) * 1e-6);
    }
    fprintf(f, "timeline: calls of %.3f ms or more (start +ms from %s, duration ms, thread)%s\n",
            min_ns * 1e-6, origin, atomic_load(&dropped) ? ", some dropped" : "");
    for (int i = 0; i < ne; i++)
        fprintf(f, "  +%10.3f %10.3f  %-40s tid %d\n", ev[i].start_ns * 1e-6, ev[i].dur_ns * 1e-6,
                names[ev[i].id], ev[i].tid);
}

/* The report, to each file of $VKTIME_OUT (comma-separated; JSON for names ending in .json). */
static void write_report(const char *why)
{
    static int reports;
    const char *outs = getenv("VKTIME_OUT");
    int order[NB_IDS], n = 0, ne, k = 0;
    Event *ev;
    uint64_t t_now = now_ns(), sum = 0;

    pthread_mutex_lock(&report_lock);
    for (int i = 0; i < NB_IDS; i++)
        if (atomic_load(&stats[i].calls)) {
            order[n++] = i;
            if (i != ID_vkGetInstanceProcAddr && i != ID_vkGetDeviceProcAddr)
                sum += atomic_load(&stats[i].total_ns);
        }
    qsort(order, n, sizeof(*order), by_total);
    ne = atomic_load(&nb_events);
    ne = ne < NB_EVENTS ? ne : NB_EVENTS;
    ev = calloc(ne ? ne : 1, sizeof(*ev));
    for (int i = 0; ev && i < ne; i++)
        if (atomic_load_explicit(&events_done[i], memory_order_acquire))
            ev[k++] = events[i];
    ne = k;
    qsort(ev, ne, sizeof(*ev), by_start);

    if (!outs || !*outs)
        print_report(stderr, 0, why, t_now, sum, order, n, ev, ne);
    while (outs && *outs) {
        char name[PATH_MAX], path[PATH_MAX];
        size_t len = strcspn(outs, ",");
        snprintf(name, sizeof(name), "%.*s", (int)len, outs);
        outs += len + (outs[len] == ',');
        if (!*name)
            continue;
        char *p = strstr(name, "%p");
        if (p)
            snprintf(path, sizeof(path), "%.*s%d%s", (int)(p - name), name, (int)getpid(), p + 2);
        else
            snprintf(path, sizeof(path), "%s", name);
        /* several reports of one process (VKTIME_DUMP_AFTER) follow each other */
        FILE *f = fopen(path, reports ? "a" : "w");
        len = strlen(path);
        print_report(f ? f : stderr, len > 5 && !strcmp(path + len - 5, ".json"), why, t_now, sum,
                     order, n, ev, ne);
        if (f)
            fclose(f);
    }
    free(ev);
    reports++;
    pthread_mutex_unlock(&report_lock);
}

__attribute__((destructor)) static void vktime_fini(void)
{
    write_report("at exit");
}
