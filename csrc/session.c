/*
 * session.c - opening and closing sessions, and the libavcodec ProRes decoder
 * each one (re)opens for the frames it is given. See pyprores.h for the API.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavutil/avutil.h>
#include <libavutil/dict.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/hwcontext.h>
#include <libavutil/pixdesc.h>

#include "session.h"

/* ------------------------------------------------------------------------ */
/* library facts                                                              */

int ppr_has_hwaccel(const char *backend)
{
    const AVCodec *codec;
    const AVCodecHWConfig *cfg;
    int i;

    ppr__ensure_init();
    if (!backend)
        return 0;
    codec = avcodec_find_decoder(AV_CODEC_ID_PRORES);
    if (!codec)
        return 0;
    if (!strcmp(backend, "software"))
        return 1;
    if (strcmp(backend, "vulkan"))
        return 0;
    for (i = 0; (cfg = avcodec_get_hw_config(codec, i)); i++)
        if (cfg->device_type == AV_HWDEVICE_TYPE_VULKAN)
            return 1;
    return 0;
}

unsigned ppr_avcodec_version(void) { return avcodec_version(); }
const char *ppr_ffmpeg_version(void) { return av_version_info(); }

/* ------------------------------------------------------------------------ */
/* sessions                                                                   */

void ppr__free_decoder(ppr_session *s)
{
    ppr__vulkan_idle_before_free(s);
    avcodec_free_context(&s->avctx);
}

static void session_free(ppr_session *s)
{
    if (!s)
        return;
    ppr__free_decoder(s);
    av_packet_free(&s->pkt);
    av_frame_free(&s->frame);
    av_frame_free(&s->swframe);
    av_buffer_unref(&s->hw_device);
    ppr__device_release(s->dev);
    s->dev = NULL;
    ppr__end_frame_state(s);
    ppr__session_remove(s);
    free(s);
}

int ppr_open(ppr_session **out, const char *backend, const char *device, int threads)
{
    return ppr_open_ex(out, backend, device, threads, 0);
}

int ppr_open_ex(ppr_session **out, const char *backend, const char *device, int threads,
                unsigned flags)
{
    ppr_session *s;
    int ret;

    ppr__enter(NULL);
    if (!out)
        return ppr__leave(ppr__fail(PPR_EINVAL, "ppr_open: out is NULL"));
    *out = NULL;
    if (!backend)
        backend = "vulkan";
    if (strcmp(backend, "software") && strcmp(backend, "vulkan"))
        return ppr__leave(ppr__fail(PPR_EINVAL, "unknown backend \"%s\" (use \"vulkan\" or \"software\")",
                                    backend));
    if (threads < 0)
        return ppr__leave(ppr__fail(PPR_EINVAL, "threads must be >= 0"));
    if (!avcodec_find_decoder(AV_CODEC_ID_PRORES))
        return ppr__leave(ppr__fail(PPR_EDECODE, "this FFmpeg build has no ProRes decoder"));

    s = calloc(1, sizeof(*s));
    if (!s)
        return ppr__leave(ppr__fail(PPR_ENOMEM, "out of memory"));
    s->backend = strcmp(backend, "vulkan") ? BACKEND_SOFTWARE : BACKEND_VULKAN;
    s->threads = threads;
    s->cur_fmt = AV_PIX_FMT_NONE;
    ppr__session_add(s);
    ppr__set_current(s);

    s->pkt = av_packet_alloc();
    s->frame = av_frame_alloc();
    s->swframe = av_frame_alloc();
    if (!s->pkt || !s->frame || !s->swframe) {
        session_free(s);
        return ppr__leave(ppr__fail(PPR_ENOMEM, "out of memory"));
    }

    if (s->backend == BACKEND_SOFTWARE) {
        snprintf(s->device_name, sizeof(s->device_name), "cpu");
    } else {
        AVDictionary *opts = NULL;
        char msg[PPR_MSG_SIZE], key[PPR_MSG_SIZE];
        const char *debug = ppr__env_validation(&s->validation_no_practices);

        s->validation = !!debug;
        if (s->validation && getenv("PYPRORES_VALIDATION_IGNORE")) {
            s->validation_ignore = strdup(getenv("PYPRORES_VALIDATION_IGNORE"));
            if (!s->validation_ignore) {
                session_free(s);
                return ppr__leave(ppr__fail(PPR_ENOMEM, "out of memory"));
            }
        }
        /* A session decodes on the compute queues only. Every queue costs
         * device creation time (about 30 ms each with NVIDIA's driver), and
         * four per family decode as fast as all of them (docs/BENCHMARKS.md,
         * run 7); the option comes with the series' patch 15. */
        if ((debug && av_dict_set(&opts, "debug", debug, 0) < 0) ||
            av_dict_set(&opts, "limit_queues", "4", 0) < 0) {
            av_dict_free(&opts);
            session_free(s);
            return ppr__leave(ppr__fail(PPR_ENOMEM, "out of memory"));
        }
        if (av_hwdevice_find_type_by_name("vulkan") != AV_HWDEVICE_TYPE_VULKAN) {
            av_dict_free(&opts);
            session_free(s);
            return ppr__leave(ppr__fail(PPR_ENODEVICE, "this FFmpeg build has no Vulkan support"));
        }
        snprintf(key, sizeof(key), "%s:%s", debug ? debug : "", device ? device : "");
        ret = ppr__device_acquire(s, key, device, opts);
        av_dict_free(&opts);
        if (ret < 0) {
            int validation = s->validation;
            ppr__last_av_error(s, msg, sizeof(msg));
            session_free(s);
            return ppr__leave(ppr__fail(PPR_ENODEVICE, "could not create a Vulkan device%s%s%s: %s%s%s%s",
                                        device ? " \"" : "", device ? device : "", device ? "\"" : "",
                                        av_err2str(ret), msg[0] ? " - " : "", msg,
                                        validation ? " (PYPRORES_VALIDATION=1 needs the Khronos "
                                        "validation layer: apt-get install vulkan-validationlayers)" : ""));
        }
        s->device_ready = 1;
        if (s->dev->validation_dropped)
            s->validation = 0;

        if (!(flags & PPR_OPEN_NO_HWACCEL_CHECK) && !ppr_has_hwaccel("vulkan")) {
            char name[256];
            snprintf(name, sizeof(name), "%s", s->device_name);
            session_free(s);
            return ppr__leave(ppr__fail(PPR_ENOHWACCEL,
                                        "this FFmpeg build has no ProRes Vulkan hwaccel "
                                        "(the Vulkan device \"%s\" works; rebuild FFmpeg with "
                                        "the pyprores patches: ./scripts/setup)", name));
        }
    }

    *out = s;
    return ppr__leave(0);
}

void ppr_close(ppr_session *s)
{
    if (!s)
        return;
    ppr__set_current(s);
    session_free(s);
    ppr__set_current(NULL);
}

const char *ppr_device_name(ppr_session *s) { return s ? s->device_name : ""; }
const char *ppr_backend(ppr_session *s)
{
    return !s ? "" : s->backend == BACKEND_VULKAN ? "vulkan" : "software";
}


/* ------------------------------------------------------------------------ */
/* the decoder                                                                */

static enum AVPixelFormat get_format(AVCodecContext *avctx, const enum AVPixelFormat *fmts)
{
    ppr_session *s = avctx->opaque;
    const enum AVPixelFormat *p;

    if (s->backend == BACKEND_SOFTWARE) {
        for (p = fmts; *p != AV_PIX_FMT_NONE; p++) {
            const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(*p);
            if (d && !(d->flags & AV_PIX_FMT_FLAG_HWACCEL))
                return *p;
        }
        return AV_PIX_FMT_NONE;
    }
    for (p = fmts; *p != AV_PIX_FMT_NONE; p++)
        if (*p == AV_PIX_FMT_VULKAN) {
            s->vulkan_offered = 1;
            /* frames from the session's own pool: the frames context made here
             * (libavcodec makes one only when the caller did not) */
            if (s->stream && (s->stream_flags & PPR_STREAM_OWN_POOL) &&
                ppr__own_pool_frames(avctx) < 0)
                break;
            return *p;
        }
    /* never fall back to software on a vulkan session */
    s->format_failed = PPR_ENOHWACCEL;
    s->need_reopen = 1;
    if (s->vulkan_offered)
        av_log(avctx, AV_LOG_ERROR, "the ProRes Vulkan hwaccel failed to initialise "
               "for this stream; not falling back to software\n");
    else
        av_log(avctx, AV_LOG_ERROR, "this FFmpeg build has no ProRes Vulkan hwaccel "
               "for this stream (offered: %s); not falling back to software\n",
               av_get_pix_fmt_name(fmts[0]) ? av_get_pix_fmt_name(fmts[0]) : "none");
    return AV_PIX_FMT_NONE;
}

int ppr__open_decoder(ppr_session *s, uint32_t tag, const ppr_frame_info *info,
                      enum AVPixelFormat fmt)
{
    const AVCodec *codec = avcodec_find_decoder(AV_CODEC_ID_PRORES);
    AVCodecContext *avctx;
    int ret;

    ppr__free_decoder(s);
    s->need_reopen = 0;
    s->vulkan_offered = 0;
    if (!codec)
        return ppr__sfail(s, PPR_EDECODE, "this FFmpeg build has no ProRes decoder");
    avctx = avcodec_alloc_context3(codec);
    if (!avctx)
        return ppr__sfail(s, PPR_ENOMEM, "out of memory");
    avctx->opaque = s;
    avctx->codec_tag = tag;
    avctx->width = info->width;
    avctx->height = info->height;
    avctx->get_format = get_format;
    if (s->backend == BACKEND_VULKAN) {
        avctx->hw_device_ctx = av_buffer_ref(s->hw_device);
        if (!avctx->hw_device_ctx) {
            avcodec_free_context(&avctx);
            return ppr__sfail(s, PPR_ENOMEM, "out of memory");
        }
        avctx->thread_count = s->stream ? s->stream_threads : 1;
        if (s->stream)
            avctx->thread_type = FF_THREAD_FRAME;
        avctx->hwaccel_flags = AV_HWACCEL_FLAG_IGNORE_LEVEL | AV_HWACCEL_FLAG_ALLOW_PROFILE_MISMATCH;
        /* The ProRes Vulkan hwaccel reports slices that failed to decode, as
         * the software decoder always does, only when asked to (7.1.5 series
         * patch 19, 9.0.2 series patch 12). */
        if (!s->stream || (s->stream_flags & PPR_STREAM_ERR_DETECT))
            avctx->err_recognition |= AV_EF_BITSTREAM;
    } else {
        avctx->thread_count = s->threads;
        avctx->thread_type = FF_THREAD_SLICE;
        avctx->get_buffer2 = ppr__prefill_get_buffer;
    }
    if (s->stream)
        avctx->flags |= AV_CODEC_FLAG_COPY_OPAQUE;   /* the packet travels with its frame */
    ret = avcodec_open2(avctx, codec, NULL);
    if (ret < 0) {
        char msg[PPR_MSG_SIZE];
        ppr__last_av_error(s, msg, sizeof(msg));
        avcodec_free_context(&avctx);
        return ppr__sfail(s, ret == AVERROR(ENOMEM) ? PPR_ENOMEM : PPR_EDECODE,
                          "could not open the ProRes decoder: %s%s%s", av_err2str(ret),
                          msg[0] ? " - " : "", msg);
    }
    s->avctx = avctx;
    s->cur_tag = tag;
    s->cur_width = info->width;
    s->cur_height = info->height;
    s->cur_fmt = fmt;
    return 0;
}

int ppr__decode_error(ppr_session *s, int ret)
{
    char msg[PPR_MSG_SIZE];

    ppr__last_av_error(s, msg, sizeof(msg));
    if (s->format_failed)
        return ppr__sfail(s, s->format_failed, "%s", msg[0] ? msg :
                          "this FFmpeg build has no ProRes Vulkan hwaccel");
    if (ret == AVERROR(ENOMEM))
        return ppr__sfail(s, PPR_ENOMEM, "out of memory while decoding");
    if (ret == AVERROR_EOF)
        return ppr__sfail(s, PPR_EDECODE, "the decoder produced no frame%s%s",
                          msg[0] ? ": " : "", msg);
    return ppr__sfail(s, PPR_EDECODE, "FFmpeg could not decode the frame: %s%s%s",
                      av_err2str(ret), msg[0] ? " - " : "", msg);
}

/* ------------------------------------------------------------------------ */
/* slice submission state                                                     */

void ppr__end_frame_state(ppr_session *s)
{
    int p, i;
    for (p = 0; p < 2; p++) {
        if (s->subs[p]) {
            for (i = 0; i < s->frame_info.pictures[p].slice_count; i++)
                free(s->subs[p][i].data);
            free(s->subs[p]);
            s->subs[p] = NULL;
        }
    }
    ppr_frame_info_free(&s->frame_info);
    free(s->frame_pkt);
    s->frame_pkt = NULL;
    s->frame_pkt_size = 0;
    s->in_frame = 0;
}
