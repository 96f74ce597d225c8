/*
 * damage.c - which slices of a frame failed to decode: the software
 * decoder's, from the samples it left unwritten; the Vulkan hwaccel's come
 * as log lines (log.c). See pyprores.h for the API.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavutil/buffer.h>
#include <libavutil/frame.h>

#include "session.h"

/* Software frames start out as 0xffff, a value no decoded sample takes
 * (samples are 10 or 12 bits): proresdec.c leaves the samples of a slice
 * that fails to decode unwritten, so they show which slices failed. */
int ppr__prefill_get_buffer(AVCodecContext *avctx, AVFrame *frame, int flags)
{
    int i, ret = avcodec_default_get_buffer2(avctx, frame, flags);

    for (i = 0; ret >= 0 && i < AV_NUM_DATA_POINTERS && frame->buf[i]; i++)
        memset(frame->buf[i]->data, 0xff, frame->buf[i]->size);
    return ret;
}

/* Is the sample at (x, y) of plane i of a prefilled software frame still
 * unwritten? Rows below the visible height are read where the buffer has
 * them (slices of the last macroblock row of an odd field). */
static int unwritten(const AVFrame *f, int i, int x, int y)
{
    const uint8_t *p;
    size_t off;

    if (!f->data[i] || !f->buf[i] || f->linesize[i] <= 0)
        return 0;
    p = f->data[i] + (ptrdiff_t)y * f->linesize[i] + 2 * (ptrdiff_t)x;
    off = (size_t)(p - f->buf[i]->data);
    if (p < f->buf[i]->data || off + 2 > f->buf[i]->size)
        return 0;
    return p[0] == 0xff && p[1] == 0xff;
}

/* The slices of a damaged software frame that proresdec.c did not write. */
void ppr__find_software_concealed(ppr_session *s, const uint8_t *data, size_t size,
                                  uint32_t tag, const AVFrame *f)
{
    ppr_frame_info fi;
    int p, i, cshift;

    if (ppr_inspect(data, size, tag, &fi) < 0)
        return;
    cshift = fi.chroma_format == 444 ? 0 : 1;
    ppr__lock();
    for (p = 0; p < fi.picture_count; p++) {
        const ppr_picture_info *pic = &fi.pictures[p];
        for (i = 0; i < pic->slice_count; i++) {
            const ppr_slice_info *sl = &pic->slices[i];
            int x = sl->mb_x * 16, y = sl->mb_y * 16;
            if (pic->field != PPR_FIELD_FRAME)
                y = 2 * y + (pic->field == PPR_FIELD_BOTTOM);
            if (unwritten(f, 0, x, y) || unwritten(f, 1, x >> cshift, y) ||
                unwritten(f, 2, x >> cshift, y))
                ppr__add_concealed(s, p, sl->index);
        }
    }
    ppr__unlock();
    ppr_frame_info_free(&fi);
}

void ppr__concealed_reset(ppr_session *s)
{
    ppr__lock();
    s->nb_concealed = 0;
    ppr__unlock();
}

int ppr__concealed_count(ppr_session *s)
{
    int n;
    ppr__lock();
    n = s->nb_concealed;
    ppr__unlock();
    return n;
}

int ppr_concealed_slices(ppr_session *s, int *pictures, int *slices, int max)
{
    int i, n;

    if (!s)
        return 0;
    ppr__lock();
    n = s->nb_concealed;
    for (i = 0; i < n && i < max; i++) {
        if (pictures)
            pictures[i] = s->concealed[2 * i];
        if (slices)
            slices[i] = s->concealed[2 * i + 1];
    }
    ppr__unlock();
    return n;
}

void ppr__copy_damage(ppr_planes *out, const ppr_planes *want)
{
    out->corrupt = want->corrupt;
    out->error_flags = want->error_flags;
    out->concealed = want->concealed;
}
