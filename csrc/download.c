/*
 * download.c - a received frame into the caller's planes (ppr_download_frame,
 * ppr_frame_download: here or on another thread), into host buffers (hostdl.c)
 * and CUDA buffers (cudaip.c). See pyprores.h for the API.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libavutil/buffer.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/hwcontext.h>

#include "session.h"

static void keep_caller_memory(void *opaque, uint8_t *data)
{
}

/* Point dst's planes at the caller's memory, one buffer reference per plane:
 * hwcontext_vulkan may import the destination (FFmpeg 9.0 imports each of
 * buf[] and, with a single buffer, places every plane inside buf[0]'s range),
 * so each reference must cover exactly its own plane. */
int ppr__wrap_caller_planes(AVFrame *dst, const ppr_planes *out)
{
    int i;

    for (i = 0; i < out->count; i++) {
        dst->buf[i] = av_buffer_create((uint8_t *)out->plane[i].data,
                                       (size_t)out->plane[i].stride * out->plane[i].height,
                                       keep_caller_memory, NULL, 0);
        if (!dst->buf[i])
            return AVERROR(ENOMEM);
        dst->data[i]     = (uint8_t *)out->plane[i].data;
        dst->linesize[i] = (int)out->plane[i].stride;
    }
    return 0;
}

/* Do out's planes have the count and sizes of the received frame's layout
 * `want`? 0 or PPR_EINVAL with a message. */
static int check_layout(ppr_session *s, const ppr_planes *want, const ppr_planes *out)
{
    int i;

    if (out->count != want->count)
        return ppr__sfail(s, PPR_EINVAL, "the frame has %d planes, got %d", want->count, out->count);
    for (i = 0; i < want->count; i++)
        if (out->plane[i].width != want->plane[i].width ||
            out->plane[i].height != want->plane[i].height)
            return ppr__sfail(s, PPR_EINVAL, "plane %d: the frame's plane is %dx%d, got %dx%d",
                              i, want->plane[i].width, want->plane[i].height,
                              out->plane[i].width, out->plane[i].height);
    return 0;
}

/* ppr_download_frame's and ppr_frame_download's work: write `frame` (received
 * with layout `want` and format `fmt`) into the caller's planes `out`, through
 * `sw` (a scratch frame, unreferenced on return) unless the planes are unpadded.
 * Touches no session state but s->err (s may be NULL: the message is only this
 * thread's). */
static int download_into(ppr_session *s, AVFrame *frame, AVFrame *sw, int vulkan,
                         enum AVPixelFormat fmt, const ppr_planes *want, ppr_planes *out)
{
    const AVFrame *src = frame;
    char msg[PPR_MSG_SIZE];
    int i, ret, direct = 1;

    if ((ret = check_layout(s, want, out)) < 0)
        return ret;
    for (i = 0; i < want->count; i++) {
        const ppr_plane *p = &out->plane[i];
        if (p->data && p->stride < (ptrdiff_t)p->width * 2)
            return ppr__sfail(s, PPR_EINVAL, "plane %d: stride %td < %d bytes per row", i,
                              p->stride, p->width * 2);
        if (!p->data || p->stride != (ptrdiff_t)p->width * 2)
            direct = 0;
    }
    ppr__copy_damage(out, want);

    if (vulkan) {
        av_frame_unref(sw);
        if (direct) {
            /* hwcontext_vulkan writes whole rows: only unpadded planes */
            if (ppr__wrap_caller_planes(sw, out) < 0) {
                av_frame_unref(sw);
                return ppr__sfail(s, PPR_ENOMEM, "out of memory");
            }
            sw->format = fmt;
            sw->width  = frame->width;
            sw->height = frame->height;
        }
        ret = av_hwframe_transfer_data(sw, frame, 0);
        if (ret < 0) {
            ppr__last_av_error(s, msg, sizeof(msg));
            ret = ppr__sfail(s, ret == AVERROR(ENOMEM) ? PPR_ENOMEM : PPR_EDECODE,
                             "could not download the Vulkan frame: %s%s%s", av_err2str(ret),
                             msg[0] ? " - " : "", msg);
            av_frame_unref(sw);
            return ret;
        }
        src = sw;
    } else {
        direct = 0;
    }
    ret = 0;
    for (i = 0; i < out->count && !direct; i++) {
        const ppr_plane *p = &out->plane[i];
        int y;
        if (!p->data)
            continue;
        if (!src->data[i]) {
            ret = ppr__sfail(s, PPR_EDECODE, "the decoded frame has no plane %d", i);
            break;
        }
        for (y = 0; y < p->height; y++)
            memcpy((uint8_t *)p->data + (ptrdiff_t)y * p->stride,
                   src->data[i] + (ptrdiff_t)y * src->linesize[i], (size_t)p->width * 2);
    }
    av_frame_unref(sw);
    return ret;
}

int ppr_download_frame(ppr_session *s, ppr_planes *out)
{
    int ret;

    ppr__enter(s);
    if (!s || !out)
        return ppr__leave(ppr__fail(PPR_EINVAL, "session or planes is NULL"));
    if (!s->stream || !s->st_have)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "no frame received: call ppr_receive_frame first"));
    ret = download_into(s, s->frame, s->swframe, s->backend == BACKEND_VULKAN, s->st_fmt,
                        &s->st_layout, out);
    av_frame_unref(s->frame);
    av_frame_unref(s->swframe);
    s->st_have = 0;
    return ppr__leave(ret);
}

ppr_host_buffer *ppr_host_buffer_new(ppr_session *s, size_t size)
{
    ppr_host_buffer *b = NULL;
    int ret;

    ppr__enter(s);
    if (!s) {
        ppr__fail(PPR_EINVAL, "session is NULL");
    } else if (s->backend != BACKEND_VULKAN || !s->hw_device || !s->dev) {
        ppr__sfail(s, PPR_EINVAL, "host buffers need a Vulkan session");
    } else if (!size || size > ((size_t)1 << 40)) {
        ppr__sfail(s, PPR_EINVAL, "a host buffer of %zu bytes", size);
    } else {
        /* the buffer counts as a user of the shared device, so that sessions
         * opened while it lives share that device rather than add one */
        ppr__device_hold(s);
        ret = ppr__host_buffer_create(&b, s->hw_device, size, ppr__device_unhold, s->dev);
        if (ret < 0)
            snprintf(s->err, sizeof(s->err), "%s", ppr__thread_error());
    }
    ppr__leave(0);
    return b;
}

/* After a copy into a host or a CUDA buffer was started with the received frame (ret):
 * the frame's reference moved into the buffer, the damage report into out. */
static int took_frame(ppr_session *s, ppr_planes *out, int ret)
{
    if (ret < 0) {
        snprintf(s->err, sizeof(s->err), "%s", ppr__thread_error());
        return ret;
    }
    ppr__copy_damage(out, &s->st_layout);
    av_frame_unref(s->frame);   /* moved into the buffer already */
    av_frame_unref(s->swframe);
    s->st_have = 0;
    return 0;
}

int ppr_download_start(ppr_session *s, ppr_host_buffer *b, ppr_planes *out)
{
    int ret;

    ppr__enter(s);
    if (!s || !b || !out)
        return ppr__leave(ppr__fail(PPR_EINVAL, "session, host buffer or planes is NULL"));
    if (!s->stream || !s->st_have)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "no frame received: call ppr_receive_frame first"));
    if (s->backend != BACKEND_VULKAN)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "host buffers take Vulkan frames: use "
                                     "ppr_download_frame for a software session"));
    if ((ret = check_layout(s, &s->st_layout, out)) < 0)
        return ppr__leave(ret);
    return ppr__leave(took_frame(s, out, ppr__host_download_start(b, s->frame, out)));
}

ppr_copier *ppr_copier_new(ppr_session *s)
{
    ppr_copier *cp = NULL;
    int ret;

    ppr__enter(s);
    if (!s) {
        ppr__fail(PPR_EINVAL, "session is NULL");
    } else if (s->backend != BACKEND_VULKAN || !s->hw_device || !s->dev) {
        ppr__sfail(s, PPR_EINVAL, "shader copies need a Vulkan session");
    } else {
        ppr__device_hold(s);   /* as a host buffer does */
        ret = ppr__copier_create(&cp, s->hw_device, ppr__device_unhold, s->dev);
        if (ret < 0)
            snprintf(s->err, sizeof(s->err), "%s", ppr__thread_error());
    }
    ppr__leave(0);
    return cp;
}

int ppr_download_start_shader(ppr_session *s, ppr_host_buffer *b, ppr_copier *cp, ppr_planes *out)
{
    int ret;

    ppr__enter(s);
    if (!s || !b || !cp || !out)
        return ppr__leave(ppr__fail(PPR_EINVAL, "session, host buffer, copier or planes is NULL"));
    if (!s->stream || !s->st_have)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "no frame received: call ppr_receive_frame first"));
    if (s->backend != BACKEND_VULKAN)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "shader copies take Vulkan frames"));
    if ((ret = check_layout(s, &s->st_layout, out)) < 0)
        return ppr__leave(ret);
    return ppr__leave(took_frame(s, out, ppr__host_download_shader(b, cp, s->frame, out)));
}

int ppr_cuda_open(ppr_session *s, ppr_cuda **out)
{
    int ret;

    ppr__enter(s);
    if (!s || !out)
        return ppr__leave(ppr__fail(PPR_EINVAL, "session or out is NULL"));
    *out = NULL;
    if (s->backend != BACKEND_VULKAN || !s->hw_device || !s->dev)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "CUDA frames need a Vulkan session"));
    /* like a host buffer, the CUDA side holds the shared device */
    ppr__device_hold(s);
    ret = ppr__cuda_create(out, s->hw_device, s->device_name, ppr__device_unhold, s->dev);
    if (ret < 0)
        snprintf(s->err, sizeof(s->err), "%s", ppr__thread_error());
    return ppr__leave(ret);
}

int ppr_cuda_download_start(ppr_session *s, ppr_cuda_buffer *b, ppr_planes *out)
{
    int ret;

    ppr__enter(s);
    if (!s || !b || !out)
        return ppr__leave(ppr__fail(PPR_EINVAL, "session, CUDA buffer or planes is NULL"));
    if (!s->stream || !s->st_have)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "no frame received: call ppr_receive_frame first"));
    if (s->backend != BACKEND_VULKAN)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "CUDA buffers take Vulkan frames"));
    if ((ret = check_layout(s, &s->st_layout, out)) < 0)
        return ppr__leave(ret);
    return ppr__leave(took_frame(s, out, ppr__cuda_download_start(b, s->frame, out)));
}

int ppr_cuda_take_frame(ppr_session *s, ppr_cuda *c, ppr_cuda_buffer **out, ppr_planes *planes)
{
    ppr__enter(s);
    if (!s || !c || !out || !planes)
        return ppr__leave(ppr__fail(PPR_EINVAL, "session, CUDA side, out or planes is NULL"));
    *out = NULL;
    if (!s->stream || !s->st_have)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "no frame received: call ppr_receive_frame first"));
    if (s->backend != BACKEND_VULKAN)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "CUDA takes Vulkan frames"));
    *planes = s->st_layout;
    return ppr__leave(took_frame(s, planes, ppr__cuda_take_frame(c, s->frame, out, planes)));
}

static int g_frames_live;   /* ppr_frame handles not freed (__atomic) */

/* A received frame taken out of its session (ppr_take_frame) */
struct ppr_frame {
    AVFrame *frame;             /* the decoded frame: a reference */
    AVFrame *sw;                /* scratch download target */
    int vulkan;
    enum AVPixelFormat fmt;     /* its downloaded format */
    ppr_planes layout;          /* as ppr_receive_frame reported */
};

ppr_frame *ppr_take_frame(ppr_session *s)
{
    ppr_frame *f;

    ppr__enter(s);
    if (!s) {
        ppr__fail(PPR_EINVAL, "session is NULL");
        ppr__leave(0);
        return NULL;
    }
    if (!s->stream || !s->st_have) {
        ppr__sfail(s, PPR_EINVAL, "no frame received: call ppr_receive_frame first");
        ppr__leave(0);
        return NULL;
    }
    f = calloc(1, sizeof(*f));
    if (!f || !(f->frame = av_frame_alloc()) || !(f->sw = av_frame_alloc())) {
        if (f) {
            av_frame_free(&f->frame);
            free(f);
        }
        ppr__sfail(s, PPR_ENOMEM, "out of memory");
        ppr__leave(0);
        return NULL;
    }
    __atomic_add_fetch(&g_frames_live, 1, __ATOMIC_RELAXED);
    av_frame_move_ref(f->frame, s->frame);   /* the session holds no frame now */
    av_frame_unref(s->swframe);
    f->vulkan = s->backend == BACKEND_VULKAN;
    f->fmt = s->st_fmt;
    f->layout = s->st_layout;
    s->st_have = 0;
    ppr__leave(0);
    return f;
}

int ppr_frame_download(ppr_frame *f, ppr_planes *out)
{
    int ret;

    ppr__enter(NULL);
    if (!f || !out)
        return ppr__leave(ppr__fail(PPR_EINVAL, "frame or planes is NULL"));
    if (!f->frame->buf[0])
        return ppr__leave(ppr__fail(PPR_EINVAL, "the frame was downloaded already"));
    ret = download_into(NULL, f->frame, f->sw, f->vulkan, f->fmt, &f->layout, out);
    av_frame_unref(f->frame);
    return ppr__leave(ret);
}

void ppr_frame_free(ppr_frame *f)
{
    if (!f)
        return;
    av_frame_free(&f->frame);
    av_frame_free(&f->sw);
    free(f);
    __atomic_sub_fetch(&g_frames_live, 1, __ATOMIC_RELAXED);
}

int ppr_frames_live(void)
{
    return __atomic_load_n(&g_frames_live, __ATOMIC_RELAXED);
}
