/*
 * What does one download of a 4K 4:2:2 10-bit Vulkan frame cost, and where
 * does it go? Times av_hwframe_transfer_data() into a frame from
 * av_frame_get_buffer() (what hwdownload does), the host-pointer import that
 * hwcontext_vulkan performs per plane and per call, and a host memcpy of
 * the same size.
 *
 *   cc -O2 -o dlprobe dlprobe.c -I$VKH/include -I$FF/include -L$FF/lib \
 *      -lavutil -lpthread
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vulkan/vulkan.h>

#include <libavutil/frame.h>
#include <libavutil/hwcontext.h>
#include <libavutil/hwcontext_vulkan.h>
#include <libavutil/mem.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *t, int n)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += t[i];
    qsort(t, n, sizeof(*t), cmp);
    printf("%-52s median %8.1f us, mean %8.1f us, min %8.1f us (n=%d)\n",
           what, t[n / 2] * 1e6, sum / n * 1e6, t[0] * 1e6, n);
}

static void no_free(void *opaque, uint8_t *data)
{
}

/*
 * Upload a pattern, download it into memory of the given kind and compare:
 * a file-backed shared mapping is what a driver may refuse to import, so it
 * exercises hwcontext_vulkan's staging-buffer download.
 */
static void check_download(AVFrame *hw, int w, int h, const char *kind)
{
    AVFrame *src = av_frame_alloc(), *dst = av_frame_alloc();
    size_t ls = FFALIGN(w * 2, 64), size = ls * h * 2;
    uint8_t *mem = NULL;
    int fd = -1, err, bad = 0;

    src->format = dst->format = AV_PIX_FMT_YUV422P10;
    src->width = dst->width = w;
    src->height = dst->height = h;
    av_frame_get_buffer(src, 0);
    for (int p = 0; p < 3; p++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < (p ? w / 2 : w); x++)
                ((uint16_t *)(src->data[p] + y * src->linesize[p]))[x] = (x * 7 + y * 3 + p * 101) & 1023;
    if ((err = av_hwframe_transfer_data(hw, src, 0)) < 0) {
        printf("%s: upload failed: %d\n", kind, err);
        goto end;
    }

    if (!strcmp(kind, "malloc")) {
        mem = av_malloc(size);
    } else {
        char path[] = "/tmp/dlprobe-XXXXXX";
        fd = mkstemp(path);
        unlink(path);
        if (fd < 0 || ftruncate(fd, size) < 0)
            goto end;
        mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (mem == MAP_FAILED)
            mem = NULL;
    }
    if (!mem)
        goto end;
    memset(mem, 0, size);
    dst->buf[0] = av_buffer_create(mem, size, no_free, NULL, 0);
    dst->data[0] = mem;
    dst->data[1] = mem + ls * h;
    dst->data[2] = mem + ls * h + ls * h / 2;
    dst->linesize[0] = ls;
    dst->linesize[1] = dst->linesize[2] = ls / 2;
    if ((err = av_hwframe_transfer_data(dst, hw, 0)) < 0) {
        printf("%s: download failed: %d\n", kind, err);
        goto end;
    }
    for (int p = 0; p < 3; p++)
        for (int y = 0; y < h; y++)
            bad += memcmp(src->data[p] + y * src->linesize[p],
                          dst->data[p] + y * dst->linesize[p], (p ? w / 2 : w) * 2) != 0;
    printf("download into %-6s memory: %s (%d of %d rows differ)\n", kind,
           bad ? "WRONG" : "correct", bad, 3 * h);
end:
    if (fd >= 0) {
        if (mem)
            munmap(mem, size);
        close(fd);
    } else {
        av_free(mem);
    }
    av_frame_free(&src);
    av_frame_free(&dst);
}

int main(int argc, char **argv)
{
    int w = 3840, h = 2160, n = argc > 1 ? atoi(argv[1]) : 40;
    AVBufferRef *dev = NULL, *frames = NULL;
    AVHWFramesContext *fc;
    AVFrame *hw = av_frame_alloc(), *sw = av_frame_alloc();
    double *t = calloc(n, sizeof(*t));
    int err;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if ((err = av_hwdevice_ctx_create(&dev, AV_HWDEVICE_TYPE_VULKAN, NULL, NULL, 0)) < 0) {
        printf("no Vulkan device: %d\n", err);
        return 1;
    }
    frames = av_hwframe_ctx_alloc(dev);
    fc = (AVHWFramesContext *)frames->data;
    fc->format = AV_PIX_FMT_VULKAN;
    fc->sw_format = AV_PIX_FMT_YUV422P10;
    fc->width = w;
    fc->height = h;
    if ((err = av_hwframe_ctx_init(frames)) < 0 ||
        (err = av_hwframe_get_buffer(frames, hw, 0)) < 0) {
        printf("frames: %d\n", err);
        return 1;
    }
    sw->format = AV_PIX_FMT_YUV422P10;
    sw->width = w;
    sw->height = h;
    if (av_frame_get_buffer(sw, 0) < 0)
        return 1;
    memset(sw->data[0], 1, sw->linesize[0] * h);

    /* warm-up, then one call at a time */
    for (int i = 0; i < 3; i++)
        av_hwframe_transfer_data(sw, hw, 0);
    for (int i = 0; i < n; i++) {
        double a = now();
        if ((err = av_hwframe_transfer_data(sw, hw, 0)) < 0) {
            printf("transfer: %d\n", err);
            return 1;
        }
        t[i] = now() - a;
    }
    report("av_hwframe_transfer_data, 4K yuv422p10", t, n);
    check_download(hw, w, h, "malloc");
    check_download(hw, w, h, "file");

    /* the import hwcontext_vulkan does for the luma plane, alone */
    {
        AVHWDeviceContext *dc = (AVHWDeviceContext *)dev->data;
        AVVulkanDeviceContext *vk = dc->hwctx;
        PFN_vkGetDeviceProcAddr gdpa = (PFN_vkGetDeviceProcAddr)
            vk->get_proc_addr(vk->inst, "vkGetDeviceProcAddr");
        PFN_vkGetMemoryHostPointerPropertiesEXT props_fn = (PFN_vkGetMemoryHostPointerPropertiesEXT)
            gdpa(vk->act_dev, "vkGetMemoryHostPointerPropertiesEXT");
        PFN_vkAllocateMemory alloc_fn = (PFN_vkAllocateMemory)gdpa(vk->act_dev, "vkAllocateMemory");
        PFN_vkFreeMemory free_fn = (PFN_vkFreeMemory)gdpa(vk->act_dev, "vkFreeMemory");
        size_t size = (size_t)sw->linesize[0] * h, offs = (uintptr_t)sw->data[0] % 4096;
        double *t2 = calloc(n, sizeof(*t2));
        if (props_fn && alloc_fn && free_fn) {
            for (int i = 0; i < n; i++) {
                VkMemoryHostPointerPropertiesEXT props = {
                    .sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT,
                };
                VkImportMemoryHostPointerInfoEXT imp = {
                    .sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
                    .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
                    .pHostPointer = sw->data[0] - offs,
                };
                VkMemoryAllocateInfo ai = {
                    .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                    .pNext = &imp,
                    .allocationSize = (offs + size + 4095) & ~(size_t)4095,
                };
                VkDeviceMemory mem;
                double a = now(), b;
                props_fn(vk->act_dev, imp.handleType, imp.pHostPointer, &props);
                ai.memoryTypeIndex = __builtin_ctz(props.memoryTypeBits);
                if (alloc_fn(vk->act_dev, &ai, NULL, &mem) != VK_SUCCESS) {
                    printf("import failed\n");
                    break;
                }
                b = now();
                free_fn(vk->act_dev, mem, NULL);
                t[i] = b - a;
                t2[i] = now() - b;
            }
            report("import of the luma plane (16.6 MB)", t, n);
            report("release of that import", t2, n);
        }
        free(t2);
    }

    {
        size_t size = (size_t)sw->linesize[0] * h * 2;
        uint8_t *a = av_malloc(size), *b = av_malloc(size);
        memset(a, 3, size);
        memset(b, 4, size);
        for (int i = 0; i < n; i++) {
            double s = now();
            memcpy(b, a, size);
            t[i] = now() - s;
        }
        report("memcpy of 33 MB, one thread", t, n);
        av_free(a);
        av_free(b);
    }

    av_frame_free(&hw);
    av_frame_free(&sw);
    av_buffer_unref(&frames);
    av_buffer_unref(&dev);
    free(t);
    return 0;
}
