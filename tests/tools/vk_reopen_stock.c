/*
 * vk_reopen_stock: stock libavutil only, no ProRes code: a negative control for
 * tests/data/regressions/reopen-*.bin. Frames contexts of two formats (like the
 * ProRes hwaccel's: one R16 image per plane) are created, used (upload + download)
 * and freed alternately, as a decoder reopen does, N times (default 40).
 * On lavapipe this never crashed (10 runs x 80 frames contexts, 2026-11-22), while
 * reopening the ProRes Vulkan decoder crashes or deadlocks within a few reopens.
 *
 * Build: cc -o vk_reopen_stock vk_reopen_stock.c -I$FF/include -L$FF/lib
 *        -Wl,-rpath,$FF/lib -lavutil (plus -I for Vulkan headers >= FFmpeg's).
 */
#include <stdio.h>
#include <stdlib.h>
#include <libavutil/frame.h>
#include <libavutil/hwcontext.h>
#include <libavutil/hwcontext_vulkan.h>

static int round_trip(AVBufferRef *dev, enum AVPixelFormat sw, int w, int h, int nplanes)
{
    AVBufferRef *fr = av_hwframe_ctx_alloc(dev);
    AVHWFramesContext *fc = (AVHWFramesContext *)fr->data;
    AVVulkanFramesContext *vk = fc->hwctx;
    fc->format = AV_PIX_FMT_VULKAN; fc->sw_format = sw; fc->width = w; fc->height = h;
    vk->tiling = VK_IMAGE_TILING_OPTIMAL;
    vk->usage = VK_IMAGE_USAGE_STORAGE_BIT | VK_IMAGE_USAGE_SAMPLED_BIT |
                VK_IMAGE_USAGE_TRANSFER_SRC_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT;
    vk->img_flags = VK_IMAGE_CREATE_MUTABLE_FORMAT_BIT;
    for (int i = 0; i < nplanes; i++) vk->format[i] = VK_FORMAT_R16_UNORM;
    if (av_hwframe_ctx_init(fr) < 0) { fprintf(stderr, "init failed\n"); return -1; }
    for (int k = 0; k < 3; k++) {
        AVFrame *f = av_frame_alloc(), *s = av_frame_alloc(), *d = av_frame_alloc();
        s->format = sw; s->width = w; s->height = h;
        av_frame_get_buffer(s, 0);
        if (av_hwframe_get_buffer(fr, f, 0) < 0) return -1;
        if (av_hwframe_transfer_data(f, s, 0) < 0) { fprintf(stderr, "upload failed\n"); return -1; }
        d->format = sw;
        if (av_hwframe_transfer_data(d, f, 0) < 0) { fprintf(stderr, "download failed\n"); return -1; }
        av_frame_free(&s); av_frame_free(&d); av_frame_free(&f);
    }
    av_buffer_unref(&fr);
    return 0;
}

int main(int argc, char **argv)
{
    AVBufferRef *dev = NULL;
    int n = argc > 1 ? atoi(argv[1]) : 40;
    if (av_hwdevice_ctx_create(&dev, AV_HWDEVICE_TYPE_VULKAN, "0", NULL, 0) < 0) return 1;
    for (int i = 0; i < n; i++) {
        if (round_trip(dev, AV_PIX_FMT_YUV422P10, 72, 48, 3) < 0) return 1;
        if (round_trip(dev, AV_PIX_FMT_YUVA444P12, 48, 48, 4) < 0) return 1;
    }
    fprintf(stderr, "done %d\n", n);
    return 0;
}
