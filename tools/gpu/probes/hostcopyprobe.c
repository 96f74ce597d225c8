/*
 * hostcopyprobe: what a Vulkan driver offers for images that hwcontext_vulkan creates with
 * VK_IMAGE_USAGE_HOST_TRANSFER_BIT_EXT (VK_EXT_host_image_copy) next to the same images without
 * it, plain and exportable (opaque fd, as vulkan_pool_alloc() creates them): memory type bits, each allowed type's property flags and heap size, and the device's
 * identicalMemoryTypeRequirements. Written for FFmpeg master's "No memory type found for
 * flags 0x1" on NVIDIA (issue 31). No FFmpeg: the loader and the headers only.
 *   cc -O2 -I VULKAN_HEADERS/include -o hostcopyprobe hostcopyprobe.c -ldl
 *   ./hostcopyprobe [DEVICE_INDEX]
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#define LOAD(inst, name) PFN_##name name = (PFN_##name)gipa(inst, #name)

static void show(PFN_vkGetDeviceImageMemoryRequirements req_fn, VkDevice dev,
                 const VkPhysicalDeviceMemoryProperties *mp, VkFormat fmt, VkImageUsageFlags usage,
                 int exportable, const char *what)
{
    VkExternalMemoryImageCreateInfo ext = { .sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMAGE_CREATE_INFO,
                                            .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT };
    VkImageCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO, .pNext = exportable ? &ext : NULL, .imageType = VK_IMAGE_TYPE_2D, .format = fmt,
        .extent = { 3840, 2160, 1 }, .mipLevels = 1, .arrayLayers = 1,
        .samples = VK_SAMPLE_COUNT_1_BIT, .tiling = VK_IMAGE_TILING_OPTIMAL, .usage = usage,
    };
    VkDeviceImageMemoryRequirements ri = { .sType = VK_STRUCTURE_TYPE_DEVICE_IMAGE_MEMORY_REQUIREMENTS,
                                           .pCreateInfo = &ci };
    VkMemoryRequirements2 r = { .sType = VK_STRUCTURE_TYPE_MEMORY_REQUIREMENTS_2 };
    req_fn(dev, &ri, &r);
    printf("format %d usage 0x%x (%s%s): size %llu, memoryTypeBits 0x%x:", fmt, usage, what,
           exportable ? ", exportable" : "", (unsigned long long)r.memoryRequirements.size,
           r.memoryRequirements.memoryTypeBits);
    for (unsigned i = 0; i < mp->memoryTypeCount; i++)
        if (r.memoryRequirements.memoryTypeBits & (1u << i))
            printf(" [%u: flags 0x%x heap %u %llu MiB]", i, mp->memoryTypes[i].propertyFlags,
                   mp->memoryTypes[i].heapIndex,
                   (unsigned long long)(mp->memoryHeaps[mp->memoryTypes[i].heapIndex].size >> 20));
    printf("\n");
}

int main(int argc, char **argv)
{
    void *lib = dlopen("libvulkan.so.1", RTLD_NOW);
    if (!lib) { fprintf(stderr, "no libvulkan.so.1\n"); return 2; }
    PFN_vkGetInstanceProcAddr gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
    LOAD(NULL, vkCreateInstance);
    VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_3 };
    VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app };
    VkInstance inst;
    if (vkCreateInstance(&ici, NULL, &inst) != VK_SUCCESS) { fprintf(stderr, "no instance\n"); return 2; }
    LOAD(inst, vkEnumeratePhysicalDevices);
    LOAD(inst, vkGetPhysicalDeviceProperties2);
    LOAD(inst, vkGetPhysicalDeviceMemoryProperties);
    LOAD(inst, vkCreateDevice);
    LOAD(inst, vkGetDeviceProcAddr);
    VkPhysicalDevice pd[16];
    uint32_t n = 16;
    vkEnumeratePhysicalDevices(inst, &n, pd);
    unsigned idx = argc > 1 ? atoi(argv[1]) : 0;
    if (idx >= n) { fprintf(stderr, "no device %u\n", idx); return 2; }
    VkPhysicalDeviceHostImageCopyPropertiesEXT hic = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_HOST_IMAGE_COPY_PROPERTIES_EXT };
    VkPhysicalDeviceProperties2 props = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &hic };
    vkGetPhysicalDeviceProperties2(pd[idx], &props);
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(pd[idx], &mp);
    printf("device %s, identicalMemoryTypeRequirements %u\n", props.properties.deviceName,
           hic.identicalMemoryTypeRequirements);
    for (unsigned i = 0; i < mp.memoryTypeCount; i++)
        printf("type %u: flags 0x%x heap %u\n", i, mp.memoryTypes[i].propertyFlags, mp.memoryTypes[i].heapIndex);
    VkPhysicalDeviceHostImageCopyFeaturesEXT hicf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_HOST_IMAGE_COPY_FEATURES_EXT, .hostImageCopy = VK_TRUE };
    const char *exts[] = { VK_EXT_HOST_IMAGE_COPY_EXTENSION_NAME, VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME };
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = { .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                    .queueCount = 1, .pQueuePriorities = &prio };
    VkDeviceCreateInfo dci = { .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &hicf,
                               .queueCreateInfoCount = 1, .pQueueCreateInfos = &qci,
                               .enabledExtensionCount = 2, .ppEnabledExtensionNames = exts };
    VkDevice dev;
    if (vkCreateDevice(pd[idx], &dci, NULL, &dev) != VK_SUCCESS) { fprintf(stderr, "no device with %s and %s\n", exts[0], exts[1]); return 1; }
    PFN_vkGetDeviceImageMemoryRequirements req_fn =
        (PFN_vkGetDeviceImageMemoryRequirements)vkGetDeviceProcAddr(dev, "vkGetDeviceImageMemoryRequirements");
    VkImageUsageFlags base = VK_IMAGE_USAGE_TRANSFER_SRC_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT |
                             VK_IMAGE_USAGE_STORAGE_BIT | VK_IMAGE_USAGE_SAMPLED_BIT;
    VkFormat fmts[] = { VK_FORMAT_R16_UNORM, VK_FORMAT_R8_UNORM, VK_FORMAT_R16G16B16A16_UNORM };
    for (unsigned f = 0; f < sizeof(fmts) / sizeof(fmts[0]); f++) {
        for (int x = 0; x < 2; x++) {
            show(req_fn, dev, &mp, fmts[f], base, x, "plain");
            show(req_fn, dev, &mp, fmts[f], base | VK_IMAGE_USAGE_HOST_TRANSFER_BIT_EXT, x, "host transfer");
        }
    }
    return 0;
}
