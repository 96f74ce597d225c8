/*
 * stream.c - several frames in flight: packets sent (copied, or prepared on
 * any thread: ppr_packet), frames received with their layout and damage
 * report, the decoder drained and reopened when the stream changes size or
 * format. See pyprores.h for the API.
 */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavutil/buffer.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/hwcontext.h>
#include <libavutil/pixdesc.h>

#include "session.h"

static void stream_state_reset(ppr_session *s)
{
    s->st_in_flight = 0;
    s->st_draining = 0;
    s->st_eof = 0;
    s->st_have = 0;
}

int ppr_stream_config(ppr_session *s, int frame_threads, unsigned flags)
{
    ppr__enter(s);
    if (!s)
        return ppr__leave(ppr__fail(PPR_EINVAL, "session is NULL"));
    if (frame_threads < 0 || frame_threads > 64)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "frame_threads must be 0..64, not %d", frame_threads));
    if (frame_threads == 0)
        frame_threads = 4;
    if (s->stream && s->avctx) {
        if (frame_threads == s->stream_threads && flags == s->stream_flags)
            return ppr__leave(0);   /* the settings in use: keep the decoder */
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "the stream has started with other settings: "
                                     "ppr_stream_reset first"));
    }
    s->stream_threads = frame_threads;
    s->stream_flags = flags;
    return ppr__leave(0);
}

void ppr_stream_reset(ppr_session *s)
{
    if (!s)
        return;
    ppr__set_current(s);
    if (s->stream)
        ppr__free_decoder(s);   /* joins the frame threads */
    s->stream = 0;
    av_frame_unref(s->frame);
    av_frame_unref(s->swframe);
    stream_state_reset(s);
    ppr__set_current(NULL);
}

ppr_packet *ppr_packet_new(const uint8_t *data, size_t size, int64_t pts)
{
    ppr_packet *p;

    ppr__ensure_init();
    if (size > INT_MAX - AV_INPUT_BUFFER_PADDING_SIZE || (size && !data)) {
        ppr__fail(PPR_EINVAL, size && !data ? "packet data is NULL" : "packet too large");
        return NULL;
    }
    p = calloc(1, sizeof(*p));
    if (!p || !(p->av = av_packet_alloc()) || av_new_packet(p->av, (int)size) < 0) {
        if (p)
            av_packet_free(&p->av);
        free(p);
        ppr__fail(PPR_ENOMEM, "out of memory");
        return NULL;
    }
    /* av_new_packet zeroed the padding */
    if (size)
        memcpy(p->av->data, data, size);
    p->av->pts = pts;
    return p;
}

size_t ppr_packet_size(const ppr_packet *p)
{
    return p ? (size_t)p->av->size : 0;
}

const uint8_t *ppr_packet_data(const ppr_packet *p)
{
    return p ? p->av->data : NULL;
}

void ppr_packet_free(ppr_packet *p)
{
    if (!p)
        return;
    av_packet_free(&p->av);
    free(p);
}

static int stream_send(ppr_session *s, const uint8_t *pkt, size_t size, uint32_t tag,
                       int64_t pts, const AVPacket *prepared);

int ppr_send_packet(ppr_session *s, const uint8_t *pkt, size_t size, uint32_t tag, int64_t pts)
{
    ppr__enter(s);
    return ppr__leave(stream_send(s, pkt, size, tag, pts, NULL));
}

int ppr_send_prepared(ppr_session *s, const ppr_packet *p, uint32_t tag)
{
    ppr__enter(s);
    if (!p)
        return ppr__leave(stream_send(s, NULL, 0, tag, 0, NULL));
    return ppr__leave(stream_send(s, p->av->data, (size_t)p->av->size, tag, p->av->pts, p->av));
}

/* ppr_send_packet's work, between ppr__enter() and ppr__leave(): the packet is pkt/size
 * (NULL: the end of the stream), copied unless `prepared` holds it already */
static int stream_send(ppr_session *s, const uint8_t *pkt, size_t size, uint32_t tag,
                       int64_t pts, const AVPacket *prepared)
{
    ppr_frame_info info;
    enum AVPixelFormat fmt;
    int ret;

    if (!s)
        return ppr__fail(PPR_EINVAL, "session is NULL");
    if (!pkt) {                                     /* end of stream */
        if (!s->stream || !s->avctx || s->st_draining || s->st_eof)
            return 0;
        ret = avcodec_send_packet(s->avctx, NULL);
        if (ret < 0 && ret != AVERROR_EOF)
            return ppr__sfail(s, PPR_EDECODE, "could not drain the decoder: %s",
                              av_err2str(ret));
        s->st_draining = 1;
        return 0;
    }
    if (size > INT_MAX - AV_INPUT_BUFFER_PADDING_SIZE)
        return ppr__sfail(s, PPR_EINVAL, "packet too large");
    /* as ppr_decode: the software decoder gets only packets that the header
     * parser accepts, the hwaccel those with a sound frame header */
    ret = s->backend == BACKEND_SOFTWARE ? ppr__session_inspect(s, pkt, size, tag, &info)
                                         : ppr_inspect_header(pkt, size, tag, &info);
    if (ret < 0) {
        if (s->backend != BACKEND_SOFTWARE)
            snprintf(s->err, sizeof(s->err), "%s", ppr__thread_error());
        return ret;
    }
    fmt = av_get_pix_fmt(info.pix_fmt);

    if (!s->avctx || !s->stream || s->need_reopen || tag != s->cur_tag ||
        info.width != s->cur_width || info.height != s->cur_height || fmt != s->cur_fmt) {
        if (s->avctx && s->stream && s->st_in_flight > 0 && !s->st_eof) {
            /* a new size or format: the frames in flight come out first */
            if (!s->st_draining) {
                avcodec_send_packet(s->avctx, NULL);
                s->st_draining = 1;
            }
            ppr_frame_info_free(&info);
            return ppr__sfail(s, PPR_EAGAIN, "the stream changes: receive the frames in flight");
        }
        av_frame_unref(s->frame);
        stream_state_reset(s);
        if (!s->stream_threads)
            s->stream_threads = 4;
        s->stream = 1;
        ret = ppr__open_decoder(s, tag, &info, fmt);
        if (ret < 0) {
            s->stream = 0;
            ppr_frame_info_free(&info);
            return ret;
        }
    } else if (s->st_eof || s->st_draining) {
        if (s->st_in_flight > 0 && !s->st_eof) {
            ppr_frame_info_free(&info);
            return ppr__sfail(s, PPR_EAGAIN, "the stream is draining: receive its frames");
        }
        avcodec_flush_buffers(s->avctx);
        stream_state_reset(s);
    }
    ppr_frame_info_free(&info);

    av_packet_unref(s->pkt);
    if (prepared) {                     /* a reference, no copy */
        if (av_packet_ref(s->pkt, prepared) < 0)
            return ppr__sfail(s, PPR_ENOMEM, "out of memory");
        av_buffer_unref(&s->pkt->opaque_ref);
    } else {
        if (av_new_packet(s->pkt, (int)size) < 0)
            return ppr__sfail(s, PPR_ENOMEM, "out of memory");
        memcpy(s->pkt->data, pkt, size);
        s->pkt->pts = pts;
    }
    s->pkt->opaque_ref = av_buffer_ref(s->pkt->buf);
    if (!s->pkt->opaque_ref) {
        av_packet_unref(s->pkt);
        return ppr__sfail(s, PPR_ENOMEM, "out of memory");
    }
    s->format_failed = 0;
    ret = avcodec_send_packet(s->avctx, s->pkt);
    av_packet_unref(s->pkt);
    if (ret == AVERROR(EAGAIN))
        return ppr__sfail(s, PPR_EAGAIN, "the decoder is full: receive a frame");
    if (ret < 0)
        return ppr__decode_error(s, ret);
    s->st_in_flight++;
    return 0;
}

int ppr_receive_frame(ppr_session *s, ppr_stream_frame *out)
{
    const AVPixFmtDescriptor *desc;
    int ret, i, cw;

    ppr__enter(s);
    if (!s || !out)
        return ppr__leave(ppr__fail(PPR_EINVAL, "session or out is NULL"));
    memset(out, 0, sizeof(*out));
    av_frame_unref(s->frame);
    av_frame_unref(s->swframe);
    s->st_have = 0;
    if (!s->stream || !s->avctx)
        return ppr__leave(PPR_RECV_AGAIN);
    if (s->st_eof)
        return ppr__leave(PPR_RECV_EOF);
    ppr__concealed_reset(s);

    ret = avcodec_receive_frame(s->avctx, s->frame);
    if (ret == AVERROR(EAGAIN))
        return ppr__leave(PPR_RECV_AGAIN);
    if (ret == AVERROR_EOF) {
        s->st_eof = 1;
        s->st_draining = 0;
        s->st_in_flight = 0;
        return ppr__leave(PPR_RECV_EOF);
    }
    if (s->st_in_flight > 0)
        s->st_in_flight--;
    if (ret < 0)
        return ppr__leave(ppr__decode_error(s, ret));

    if (s->backend == BACKEND_VULKAN) {
        if (s->frame->format != AV_PIX_FMT_VULKAN || !s->frame->hw_frames_ctx) {
            int f = s->frame->format;
            av_frame_unref(s->frame);
            s->need_reopen = 1;
            return ppr__leave(ppr__sfail(s, PPR_ENOHWACCEL, "the decoder returned a %s frame instead of "
                                         "a Vulkan frame; not accepting a software fallback",
                                         av_get_pix_fmt_name(f) ? av_get_pix_fmt_name(f) : "?"));
        }
        s->st_fmt = ((const AVHWFramesContext *)s->frame->hw_frames_ctx->data)->sw_format;
    } else {
        s->st_fmt = s->frame->format;
    }
    desc = av_pix_fmt_desc_get(s->st_fmt);
    if (!desc || (desc->flags & AV_PIX_FMT_FLAG_HWACCEL) || desc->comp[0].depth <= 8 ||
        s->frame->width <= 0 || s->frame->height <= 0) {
        av_frame_unref(s->frame);
        return ppr__leave(ppr__sfail(s, PPR_EDECODE, "unexpected decoder output %s %dx%d",
                                     desc ? desc->name : "?", s->frame->width, s->frame->height));
    }

    out->width = s->frame->width;
    out->height = s->frame->height;
    snprintf(out->pix_fmt, sizeof(out->pix_fmt), "%s", desc->name);
    out->bit_depth = desc->comp[0].depth;
    out->pts = s->frame->pts;
    out->interlaced = !!(s->frame->flags & AV_FRAME_FLAG_INTERLACED);
    out->top_field_first = !!(s->frame->flags & AV_FRAME_FLAG_TOP_FIELD_FIRST);
    out->corrupt = s->frame->decode_error_flags != 0 ||
                   (s->frame->flags & AV_FRAME_FLAG_CORRUPT) != 0;
    out->error_flags = s->frame->decode_error_flags;
    if (s->backend == BACKEND_SOFTWARE && out->corrupt && s->frame->opaque_ref &&
        s->frame->opaque_ref->size > AV_INPUT_BUFFER_PADDING_SIZE)
        ppr__find_software_concealed(s, s->frame->opaque_ref->data,
                                     s->frame->opaque_ref->size - AV_INPUT_BUFFER_PADDING_SIZE,
                                     s->cur_tag, s->frame);
    av_buffer_unref(&s->frame->opaque_ref);
    if (s->backend == BACKEND_SOFTWARE) {
        out->concealed = ppr__concealed_count(s);
    } else {
        out->concealed = 0;
        ppr__concealed_reset(s);   /* frame threads interleave the hwaccel's lines */
    }

    memset(&out->layout, 0, sizeof(out->layout));
    out->layout.count = av_pix_fmt_count_planes(s->st_fmt);
    if (out->layout.count > 4)
        out->layout.count = 4;
    cw = AV_CEIL_RSHIFT(out->width, desc->log2_chroma_w);
    for (i = 0; i < out->layout.count; i++) {
        out->layout.plane[i].width = (i == 1 || i == 2) ? cw : out->width;
        out->layout.plane[i].height = (i == 1 || i == 2) ?
                                      AV_CEIL_RSHIFT(out->height, desc->log2_chroma_h) : out->height;
        out->layout.plane[i].stride = (ptrdiff_t)out->layout.plane[i].width * 2;
    }
    out->layout.corrupt = out->corrupt;
    out->layout.error_flags = out->error_flags;
    out->layout.concealed = out->concealed;
    s->st_layout = out->layout;
    s->st_have = 1;
    return ppr__leave(PPR_RECV_FRAME);
}
