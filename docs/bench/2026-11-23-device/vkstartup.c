/*
 * Where does Vulkan device creation spend its time? Times the raw Vulkan
 * steps (instance, enumeration, device creation with different queue sets)
 * and then FFmpeg's av_hwdevice_ctx_create() with a timestamped log.
 *
 *   cc -O2 -o vkstartup vkstartup.c -I$VKH/include -I$FF/include \
 *      -L$FF/lib -lavutil -ldl
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <vulkan/vulkan.h>

#include <libavutil/hwcontext.h>
#include <libavutil/log.h>

static double t_start;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void cpu(double *u, double *s)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *u = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6;
    *s = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

#define STEP(name, ...) do {                                                \
        double a = now(), u0, s0, u1, s1, b;                           \
        cpu(&u0, &s0);                                                 \
        __VA_ARGS__;                                                   \
        b = now();                                                     \
        cpu(&u1, &s1);                                                 \
        printf("%-46s %8.1f ms (user %6.1f, sys %6.1f)\n", name,      \
               (b - a) * 1e3, (u1 - u0) * 1e3, (s1 - s0) * 1e3);       \
    } while (0)

static void log_cb(void *avcl, int level, const char *fmt, va_list vl)
{
    char line[1024];
    if (level > AV_LOG_DEBUG)
        return;
    vsnprintf(line, sizeof(line), fmt, vl);
    printf("  [%8.1f ms] %s", (now() - t_start) * 1e3, line);
}

int main(int argc, char **argv)
{
    void *lib;
    PFN_vkGetInstanceProcAddr gipa;
    PFN_vkCreateInstance create_instance;
    PFN_vkEnumeratePhysicalDevices enum_devs;
    PFN_vkGetPhysicalDeviceQueueFamilyProperties get_qf;
    PFN_vkCreateDevice create_device;
    PFN_vkDestroyDevice destroy_device;
    PFN_vkDestroyInstance destroy_instance;
    VkInstance inst;
    VkPhysicalDevice pd[8];
    uint32_t nb_pd = 8, nb_qf = 16;
    VkQueueFamilyProperties qf[16];
    float prio[64];
    VkResult ret;
    int ffmpeg_rounds = argc > 1 ? atoi(argv[1]) : 2;

    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < 64; i++)
        prio[i] = 1.0f;

    STEP("dlopen(libvulkan.so.1)", lib = dlopen("libvulkan.so.1", RTLD_NOW));
    if (!lib) {
        printf("no loader: %s\n", dlerror());
        return 1;
    }
    gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
    create_instance = (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance");

    STEP("vkCreateInstance (1.3, no layers)", {
        VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                                  .apiVersion = VK_API_VERSION_1_3 };
        VkInstanceCreateInfo ci = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                    .pApplicationInfo = &app };
        ret = create_instance(&ci, NULL, &inst);
    });
    if (ret != VK_SUCCESS) {
        printf("vkCreateInstance: %d\n", ret);
        return 1;
    }
    enum_devs        = (PFN_vkEnumeratePhysicalDevices)gipa(inst, "vkEnumeratePhysicalDevices");
    get_qf           = (PFN_vkGetPhysicalDeviceQueueFamilyProperties)gipa(inst, "vkGetPhysicalDeviceQueueFamilyProperties");
    create_device    = (PFN_vkCreateDevice)gipa(inst, "vkCreateDevice");
    destroy_device   = (PFN_vkDestroyDevice)gipa(inst, "vkDestroyDevice");
    destroy_instance = (PFN_vkDestroyInstance)gipa(inst, "vkDestroyInstance");

    STEP("vkEnumeratePhysicalDevices", enum_devs(inst, &nb_pd, pd));
    get_qf(pd[0], &nb_qf, NULL);
    if (nb_qf > 16)
        nb_qf = 16;
    get_qf(pd[0], &nb_qf, qf);
    for (uint32_t i = 0; i < nb_qf; i++)
        printf("queue family %u: flags 0x%x, %u queues\n", i,
               qf[i].queueFlags, qf[i].queueCount);

    for (int round = 0; round < 2; round++) {
        /* one compute queue; one queue in every family; every queue of every
         * family (what hwcontext_vulkan asks for) */
        for (int variant = 0; variant < 3; variant++) {
            VkDeviceQueueCreateInfo q[16];
            uint32_t nb_q = 0, total = 0;
            VkDevice dev;
            char name[96];
            for (uint32_t i = 0; i < nb_qf; i++) {
                uint32_t n;
                if (variant == 0 && nb_q)
                    break;
                if (variant == 0 && !(qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT))
                    continue;
                n = variant == 2 ? qf[i].queueCount : 1;
                if (n > 64)
                    n = 64;
                q[nb_q++] = (VkDeviceQueueCreateInfo) {
                    .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                    .queueFamilyIndex = i,
                    .queueCount = n,
                    .pQueuePriorities = prio,
                };
                total += n;
            }
            snprintf(name, sizeof(name), "vkCreateDevice, %u queues in %u families",
                     total, nb_q);
            STEP(name, {
                VkDeviceCreateInfo ci = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                                          .queueCreateInfoCount = nb_q,
                                          .pQueueCreateInfos = q };
                ret = create_device(pd[0], &ci, NULL, &dev);
            });
            if (ret != VK_SUCCESS) {
                printf("vkCreateDevice: %d\n", ret);
                continue;
            }
            STEP("  vkDestroyDevice", destroy_device(dev, NULL));
        }
    }
    STEP("vkDestroyInstance", destroy_instance(inst, NULL));

    av_log_set_level(AV_LOG_DEBUG);
    av_log_set_callback(log_cb);
    for (int round = 0; round < ffmpeg_rounds; round++) {
        AVBufferRef *dev = NULL;
        int err;
        t_start = now();
        STEP("av_hwdevice_ctx_create(VULKAN)",
             err = av_hwdevice_ctx_create(&dev, AV_HWDEVICE_TYPE_VULKAN, NULL, NULL, 0));
        if (err < 0)
            printf("av_hwdevice_ctx_create: %d\n", err);
        STEP("av_buffer_unref(device)", av_buffer_unref(&dev));
    }
    return 0;
}
