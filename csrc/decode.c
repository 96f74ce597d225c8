/*
 * decode.c - one packet in, one frame out (ppr_decode; ppr_frame_end too):
 * the frame decoded and downloaded into the caller's planes at once.
 * See pyprores.h for the API.
 */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/hwcontext.h>
#include <libavutil/pixdesc.h>

#include "session.h"

static int check_planes(ppr_session *s, const ppr_frame_info *info, const ppr_planes *out)
{
    ppr_planes want;
    char msg[PPR_MSG_SIZE];
    int i, ret = ppr_frame_layout(info, &want);

    if (ret < 0) {
        snprintf(msg, sizeof(msg), "%s", ppr__thread_error());   /* overwritten by ppr__sfail */
        return ppr__sfail(s, ret, "%s", msg);
    }
    if (!out)
        return ppr__sfail(s, PPR_EINVAL, "planes is NULL");
    if (out->count != want.count)
        return ppr__sfail(s, PPR_EINVAL, "the frame (%s) has %d planes, got %d", info->pix_fmt,
                          want.count, out->count);
    for (i = 0; i < want.count; i++) {
        const ppr_plane *p = &out->plane[i];
        if (p->width != want.plane[i].width || p->height != want.plane[i].height)
            return ppr__sfail(s, PPR_EINVAL, "plane %d: the frame's plane is %dx%d, got %dx%d", i,
                              want.plane[i].width, want.plane[i].height, p->width, p->height);
        if (p->data && p->stride < (ptrdiff_t)p->width * 2)
            return ppr__sfail(s, PPR_EINVAL, "plane %d: stride %td < %d bytes per row", i,
                              p->stride, p->width * 2);
    }
    return 0;
}

/* Can the download write straight into the caller's planes? hwcontext_vulkan
 * copies whole rows of linesize bytes out of its staging buffer, so only rows
 * without padding qualify, and the frame must have exactly the caller's size,
 * format and planes. Otherwise the frame goes through s->swframe. */
static int direct_download_ok(const ppr_session *s, const ppr_planes *out,
                              enum AVPixelFormat fmt, const ppr_frame_info *info)
{
    const AVHWFramesContext *fc = (const AVHWFramesContext *)s->frame->hw_frames_ctx->data;
    int i;

    if (fc->sw_format != fmt || s->frame->width != info->width ||
        s->frame->height != info->height || out->count != av_pix_fmt_count_planes(fmt))
        return 0;
    for (i = 0; i < out->count; i++)
        if (!out->plane[i].data || out->plane[i].stride != (ptrdiff_t)out->plane[i].width * 2)
            return 0;
    return 1;
}

int ppr__decode_packet(ppr_session *s, const uint8_t *data, size_t size, uint32_t tag,
                       const ppr_frame_info *info, ppr_planes *out)
{
    enum AVPixelFormat fmt = av_get_pix_fmt(info->pix_fmt);
    AVFrame *src;
    int ret, drained = 0, direct = 0, i;
    char msg[PPR_MSG_SIZE];

    if ((ret = check_planes(s, info, out)) < 0)
        return ret;
    out->corrupt = 0;
    out->error_flags = 0;
    out->concealed = 0;
    ppr__concealed_reset(s);
    if (size > INT_MAX - AV_INPUT_BUFFER_PADDING_SIZE)
        return ppr__sfail(s, PPR_EINVAL, "packet too large");

    if (!s->avctx || s->stream || s->need_reopen || tag != s->cur_tag ||
        info->width != s->cur_width || info->height != s->cur_height || fmt != s->cur_fmt) {
        s->stream = 0;
        if ((ret = ppr__open_decoder(s, tag, info, fmt)) < 0)
            return ret;
    }

    av_packet_unref(s->pkt);
    if (av_new_packet(s->pkt, (int)size) < 0)
        return ppr__sfail(s, PPR_ENOMEM, "out of memory");
    memcpy(s->pkt->data, data, size);

    s->format_failed = 0;
    av_frame_unref(s->frame);
    av_frame_unref(s->swframe);

    ret = avcodec_send_packet(s->avctx, s->pkt);
    av_packet_unref(s->pkt);
    if (ret >= 0 || ret == AVERROR(EAGAIN)) {
        ret = avcodec_receive_frame(s->avctx, s->frame);
        if (ret == AVERROR(EAGAIN)) {
            /* frame threading or a delaying hwaccel: drain to get this frame */
            drained = 1;
            ret = avcodec_send_packet(s->avctx, NULL);
            if (ret >= 0)
                ret = avcodec_receive_frame(s->avctx, s->frame);
        }
    }
    if (ret < 0 || drained)
        avcodec_flush_buffers(s->avctx);   /* ready for the next packet */

    if (ret < 0)
        return ppr__decode_error(s, ret);

    src = s->frame;
    if (s->backend == BACKEND_VULKAN) {
        if (s->frame->format != AV_PIX_FMT_VULKAN || !s->frame->hw_frames_ctx) {
            av_frame_unref(s->frame);
            s->need_reopen = 1;
            return ppr__sfail(s, PPR_ENOHWACCEL, "the decoder returned a %s frame instead of a "
                              "Vulkan frame; not accepting a software fallback",
                              av_get_pix_fmt_name(s->frame->format) ?
                              av_get_pix_fmt_name(s->frame->format) : "?");
        }
        if (direct_download_ok(s, out, fmt, info)) {
            /* saves a copy of the whole frame and its allocation */
            AVFrame *dst = s->swframe;
            if (ppr__wrap_caller_planes(dst, out) < 0) {
                av_frame_unref(dst);
                av_frame_unref(s->frame);
                return ppr__sfail(s, PPR_ENOMEM, "out of memory");
            }
            dst->format = fmt;
            dst->width  = info->width;
            dst->height = info->height;
            direct = 1;
        }
        ret = av_hwframe_transfer_data(s->swframe, s->frame, 0);
        if (ret < 0) {
            ppr__last_av_error(s, msg, sizeof(msg));
            av_frame_unref(s->frame);
            av_frame_unref(s->swframe);
            return ppr__sfail(s, ret == AVERROR(ENOMEM) ? PPR_ENOMEM : PPR_EDECODE,
                              "could not download the Vulkan frame: %s%s%s", av_err2str(ret),
                              msg[0] ? " - " : "", msg);
        }
        src = s->swframe;
    }

    out->corrupt = s->frame->decode_error_flags != 0 ||
                   (s->frame->flags & AV_FRAME_FLAG_CORRUPT) != 0;
    out->error_flags = s->frame->decode_error_flags;
    if (s->backend == BACKEND_SOFTWARE && out->corrupt)
        ppr__find_software_concealed(s, data, size, tag, s->frame);
    out->concealed = ppr__concealed_count(s);

    if (src->format != fmt || src->width < info->width || src->height < info->height) {
        ret = ppr__sfail(s, PPR_EDECODE, "the decoder output is %s %dx%d, expected %s %dx%d",
                         av_get_pix_fmt_name(src->format) ? av_get_pix_fmt_name(src->format) : "?",
                         src->width, src->height, info->pix_fmt, info->width, info->height);
        av_frame_unref(s->frame);
        av_frame_unref(s->swframe);
        return ret;
    }

    for (i = 0; i < out->count && !direct; i++) {
        const ppr_plane *p = &out->plane[i];
        const uint8_t *sp = src->data[i];
        uint8_t *dp = (uint8_t *)p->data;
        int y;
        if (!dp)
            continue;
        if (!sp) {
            av_frame_unref(s->frame);
            av_frame_unref(s->swframe);
            return ppr__sfail(s, PPR_EDECODE, "the decoded frame has no plane %d", i);
        }
        for (y = 0; y < p->height; y++)
            memcpy(dp + (ptrdiff_t)y * p->stride, sp + (ptrdiff_t)y * src->linesize[i],
                   (size_t)p->width * 2);
    }
    av_frame_unref(s->frame);
    av_frame_unref(s->swframe);
    return 0;
}

int ppr__session_inspect(ppr_session *s, const uint8_t *pkt, size_t size, uint32_t tag,
                         ppr_frame_info *info)
{
    int ret = ppr_inspect(pkt, size, tag, info);
    if (ret < 0)
        snprintf(s->err, sizeof(s->err), "%s", ppr__thread_error());
    return ret;
}

int ppr_decode(ppr_session *s, const uint8_t *pkt, size_t size, uint32_t tag, ppr_planes *out)
{
    ppr_frame_info info;
    char inspect_msg[PPR_MSG_SIZE];
    int ret, inspect_ret;

    ppr__enter(s);
    if (!s)
        return ppr__leave(ppr__fail(PPR_EINVAL, "session is NULL"));
    if (!out)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "planes is NULL"));
    inspect_ret = ppr__session_inspect(s, pkt, size, tag, &info);
    if (inspect_ret < 0) {
        /* The software decoder would fail exactly where the inspection did.
         * The Vulkan hwaccel parses the pictures itself: give it the packet
         * when the frame header is sound, so that differential tests see
         * what it does with a bad picture. */
        snprintf(inspect_msg, sizeof(inspect_msg), "%s", s->err);
        if (s->backend != BACKEND_VULKAN ||
            ppr_inspect_header(pkt, size, tag, &info) < 0) {
            ppr__sfail(s, inspect_ret, "%s", inspect_msg);
            return ppr__leave(inspect_ret);
        }
        s->err[0] = 0;
    }
    ret = ppr__decode_packet(s, pkt, size, tag, &info, out);
    ppr_frame_info_free(&info);
    if (ret == PPR_EDECODE && inspect_ret < 0)   /* both refused: report the diagnosis */
        ret = ppr__sfail(s, inspect_ret, "%s", inspect_msg);
    return ppr__leave(ret);
}
