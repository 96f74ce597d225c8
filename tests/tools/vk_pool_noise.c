/*
 * vk_pool_noise: stock libavutil only, no ProRes code. Shows that Debian 12's
 * validation layer (1.3.239) reports UNASSIGNED-VkSemaphore-state-timeout (and,
 * once a frame is downloaded, UNASSIGNED-CoreValidation-DrawState-InvalidImageLayout
 * with "current layout is VK_IMAGE_LAYOUT_UNDEFINED") for plain hwcontext_vulkan pool
 * frames: the layer does not see the layout transition + semaphore signal that the
 * pool's prepare_frame() submits when it allocates a frame, so it waits (10 s per
 * semaphore) for a signal it thinks never happened when the frame is freed.
 *
 *   vk_pool_noise DOWNLOAD FRAMES_CTX [N]
 *     DOWNLOAD   0: allocate and free; 1: also av_hwframe_transfer_data to memory
 *     FRAMES_CTX 0: like the ProRes hwaccel's frames (one R16 image per plane,
 *                   STORAGE|SAMPLED|TRANSFER_SRC); 1: hwcontext_vulkan's defaults
 *     N          frames to get from the pool (default 1)
 *
 * Build: cc -o vk_pool_noise vk_pool_noise.c -I$FF/include -L$FF/lib -Wl,-rpath,$FF/lib -lavutil
 * (plus -I for Vulkan headers >= FFmpeg's). tests/test_hwaccel.py builds and runs it
 * (slow test) to keep tests/conftest.py's KNOWN_LAYER_NOISE honest.
 */
#include <stdio.h>
#include <stdlib.h>
#include <libavutil/dict.h>
#include <libavutil/frame.h>
#include <libavutil/hwcontext.h>
#include <libavutil/hwcontext_vulkan.h>

int main(int argc, char **argv)
{
    AVBufferRef *dev = NULL, *fr;
    AVDictionary *opts = NULL;
    AVHWFramesContext *fc;
    AVVulkanFramesContext *vk;
    int download, defaults, n;

    if (argc < 3) {
        fprintf(stderr, "usage: %s DOWNLOAD FRAMES_CTX [N]\n", argv[0]);
        return 2;
    }
    download = atoi(argv[1]);
    defaults = atoi(argv[2]);
    n = argc > 3 ? atoi(argv[3]) : 1;

    av_dict_set(&opts, "debug", "1", 0);   /* VK_LAYER_KHRONOS_validation */
    if (av_hwdevice_ctx_create(&dev, AV_HWDEVICE_TYPE_VULKAN, "0", opts, 0) < 0) {
        fprintf(stderr, "no Vulkan device\n");
        return 1;
    }
    av_dict_free(&opts);
    fr = av_hwframe_ctx_alloc(dev);
    fc = (AVHWFramesContext *)fr->data;
    vk = fc->hwctx;
    fc->format = AV_PIX_FMT_VULKAN;
    fc->sw_format = AV_PIX_FMT_YUV422P10;
    fc->width = 64;
    fc->height = 48;
    if (!defaults) {
        vk->tiling = VK_IMAGE_TILING_OPTIMAL;
        vk->usage = VK_IMAGE_USAGE_STORAGE_BIT | VK_IMAGE_USAGE_SAMPLED_BIT |
                    VK_IMAGE_USAGE_TRANSFER_SRC_BIT;
        vk->img_flags = VK_IMAGE_CREATE_MUTABLE_FORMAT_BIT;
        for (int i = 0; i < 3; i++)
            vk->format[i] = VK_FORMAT_R16_UNORM;
    }
    if (av_hwframe_ctx_init(fr) < 0) {
        fprintf(stderr, "frames context init failed\n");
        return 1;
    }
    for (int k = 0; k < n; k++) {
        AVFrame *f = av_frame_alloc();
        if (av_hwframe_get_buffer(fr, f, 0) < 0) {
            fprintf(stderr, "get_buffer failed\n");
            return 1;
        }
        if (download) {
            AVFrame *s = av_frame_alloc();
            s->format = AV_PIX_FMT_YUV422P10;
            if (av_hwframe_transfer_data(s, f, 0) < 0) {
                fprintf(stderr, "download failed\n");
                return 1;
            }
            av_frame_free(&s);
        }
        av_frame_free(&f);
    }
    av_buffer_unref(&fr);
    av_buffer_unref(&dev);
    fprintf(stderr, "vk_pool_noise: done\n");
    return 0;
}
