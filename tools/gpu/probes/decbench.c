/*
 * Decoder-only ProRes benchmark: the packets of a clip are read into memory
 * first, then decoded in a loop through libavcodec, so that demuxing, the
 * ffmpeg command line's threads and its muxer do not count. Prints one JSON
 * object: start-up times, steady frames per second, CPU time per frame.
 *
 * Build (tools/gpu/bench does this):
 *   cc -O2 -o decbench decbench.c -I$FF/include -L$FF/lib \
 *      -lavformat -lavcodec -lavutil -Wl,-rpath,$FF/lib
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/hwcontext.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>

#include "read_packets.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
           ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static enum AVPixelFormat want_vulkan(AVCodecContext *avctx,
                                      const enum AVPixelFormat *fmts)
{
    for (int i = 0; fmts[i] != AV_PIX_FMT_NONE; i++)
        if (fmts[i] == AV_PIX_FMT_VULKAN)
            return fmts[i];
    fprintf(stderr, "the decoder did not offer Vulkan output\n");
    return AV_PIX_FMT_NONE;
}

typedef struct Bench {
    AVCodecContext *dec;
    AVFrame *frame, *sw;
    int download;
    long frames;
} Bench;

static int drain(Bench *b)
{
    for (;;) {
        int ret = avcodec_receive_frame(b->dec, b->frame);
        if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF)
            return 0;
        if (ret < 0)
            return ret;
        if (b->download) {
            /* One destination, reused as hwdownload's frame pool would be: a
             * fresh 50 MB frame per download would time page faults (above
             * glibc's 32 MiB mmap threshold every allocation is a new mmap). */
            const AVHWFramesContext *fc = (const AVHWFramesContext *)b->frame->hw_frames_ctx->data;
            if (b->sw->buf[0] && (b->sw->width != b->frame->width ||
                                  b->sw->height != b->frame->height ||
                                  b->sw->format != fc->sw_format))
                av_frame_unref(b->sw);
            ret = av_hwframe_transfer_data(b->sw, b->frame, 0);
            if (ret < 0)
                return ret;
        }
        av_frame_unref(b->frame);
        b->frames++;
    }
}

static int decode_all(Bench *b, AVPacket **pkts, int nb_pkts, int loops)
{
    for (int l = 0; l < loops; l++) {
        for (int i = 0; i < nb_pkts; i++) {
            int ret;
            while ((ret = avcodec_send_packet(b->dec, pkts[i])) == AVERROR(EAGAIN))
                if ((ret = drain(b)) < 0)
                    return ret;
            if (ret < 0)
                return ret;
            if ((ret = drain(b)) < 0)
                return ret;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *hw = "vulkan", *dev = NULL;
    int threads = 0, loops = 10, nb_pkts = 0, ret, stream;
    const char *err_detect = NULL;
    AVDictionary *dev_opts = NULL;
    const char *opt_str = "";
    AVFormatContext *fmt = NULL;
    AVPacket **pkts = NULL;
    AVBufferRef *device = NULL;
    const AVCodec *codec;
    Bench b = { 0 };
    double t0, t1, t2, t3, t4, c3, c4;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--loops") && i + 1 < argc)
            loops = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hw") && i + 1 < argc)
            hw = argv[++i];
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            dev = argv[++i];
        else if (!strcmp(argv[i], "--download"))
            b.download = 1;
        else if (!strcmp(argv[i], "--opt") && i + 1 < argc) {
            /* a device option, e.g. limit_queues=2 (hwcontext_vulkan.c) */
            opt_str = argv[++i];
            if (av_dict_parse_string(&dev_opts, opt_str, "=", ",", 0) < 0) {
                fprintf(stderr, "bad --opt %s: expected KEY=VALUE[,KEY=VALUE]\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--err-detect") && i + 1 < argc)
            err_detect = argv[++i];   /* e.g. "bitstream": the hwaccel reports damaged slices */
        else
            path = argv[i];
    }
    if (!path || loops < 1) {
        fprintf(stderr, "usage: decbench [--threads N] [--loops N] "
                "[--hw vulkan|none] [--device DEV] [--opt KEY=VALUE[,...]] [--download] "
                "[--err-detect FLAGS] FILE\n");
        return 2;
    }

    if ((nb_pkts = read_packets(path, &fmt, &stream, &codec, &pkts)) < 0)
        return 1;

    t0 = now();
    if (strcmp(hw, "none")) {
        ret = av_hwdevice_ctx_create(&device, av_hwdevice_find_type_by_name(hw),
                                     dev, dev_opts, 0);
        if (ret < 0) {
            fprintf(stderr, "cannot open a %s device: %s\n", hw, av_err2str(ret));
            return 1;
        }
    }
    t1 = now();

    b.dec = avcodec_alloc_context3(codec);
    b.frame = av_frame_alloc();
    b.sw = av_frame_alloc();
    if (!b.dec || !b.frame || !b.sw)
        return 1;
    avcodec_parameters_to_context(b.dec, fmt->streams[stream]->codecpar);
    b.dec->thread_count = threads;
    if (err_detect && (ret = av_opt_set(b.dec, "err_detect", err_detect, 0)) < 0) {
        fprintf(stderr, "bad --err-detect %s: %s\n", err_detect, av_err2str(ret));
        return 2;
    }
    if (device) {
        b.dec->hw_device_ctx = av_buffer_ref(device);
        b.dec->get_format = want_vulkan;
    }
    if ((ret = avcodec_open2(b.dec, codec, NULL)) < 0) {
        fprintf(stderr, "cannot open the decoder: %s\n", av_err2str(ret));
        return 1;
    }

    /* The first frame out creates the hwaccel: pipelines and first buffers. */
    for (int i = 0; i < nb_pkts && !b.frames; i++)
        if ((ret = decode_all(&b, pkts + i, 1, 1)) < 0)
            goto fail;
    t2 = now();
    /* One pass over the clip warms every pool up; it is drained so that none
     * of its frames is counted below. */
    if ((ret = decode_all(&b, pkts, nb_pkts, 1)) < 0)
        goto fail;
    avcodec_send_packet(b.dec, NULL);
    if ((ret = drain(&b)) < 0)
        goto fail;
    avcodec_flush_buffers(b.dec);
    t3 = now();
    c3 = cpu_seconds();
    b.frames = 0;
    if ((ret = decode_all(&b, pkts, nb_pkts, loops)) < 0)
        goto fail;
    /* Flush so that every frame counted has completed on the CPU side. */
    avcodec_send_packet(b.dec, NULL);
    if ((ret = drain(&b)) < 0)
        goto fail;
    t4 = now();
    c4 = cpu_seconds();

    printf("{\"file\": \"%s\", \"hw\": \"%s\", \"opt\": \"%s\", \"download\": %d, \"err_detect\": \"%s\", \"threads\": %d, "
           "\"packets\": %d, \"frames\": %ld, \"device_s\": %.4f, "
           "\"first_frame_s\": %.4f, \"fps\": %.1f, \"cpu_us_per_frame\": %.1f, "
           "\"ffmpeg\": \"%s\", \"libavcodec\": \"%u.%u.%u\"}\n",
           path, hw, opt_str, b.download, err_detect ? err_detect : "", b.dec->thread_count, nb_pkts,
           b.frames, t1 - t0, t2 - t1, b.frames / (t4 - t3), (c4 - c3) * 1e6 / b.frames,
           av_version_info(), avcodec_version() >> 16, (avcodec_version() >> 8) & 0xff,
           avcodec_version() & 0xff);

    ret = 0;
fail:
    if (ret < 0)
        fprintf(stderr, "decoding failed: %s\n", av_err2str(ret));
    for (int i = 0; i < nb_pkts; i++)
        av_packet_free(&pkts[i]);
    av_free(pkts);
    av_frame_free(&b.frame);
    av_frame_free(&b.sw);
    avcodec_free_context(&b.dec);
    av_buffer_unref(&device);
    av_dict_free(&dev_opts);
    avformat_close_input(&fmt);
    return ret < 0;
}
