/*
 * ProRes frame/picture header parsing, a faithful C transcription of
 * decode_frame(), decode_frame_header() and decode_picture_header() in
 * FFmpeg 7.1.5's libavcodec/proresdec.c: the same fields, the same checks in
 * the same order, the same slice count (computed from mb_width and
 * log2_slice_mb_width; the header's slice count is ignored, as QuickTime
 * does) and the same slice layout. Where proresdec.c would fail, this fails.
 * Every read is bounds-checked against the packet.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
#include <libavutil/pixfmt.h>

#include "internal.h"

static unsigned rb16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }
static unsigned rb32(const uint8_t *p)
{
    return (unsigned)p[0] << 24 | (unsigned)p[1] << 16 | (unsigned)p[2] << 8 | p[3];
}

static int popcount(unsigned v)
{
    int n = 0;
    for (; v; v &= v - 1)
        n++;
    return n;
}

#define TAG(a, b, c, d) ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)

/* proresdec.c's picture_slice_count(): the slice count follows from the
 * frame size and the slice width (the value in the picture header is ignored). */
static long slice_count_of(const ppr_frame_info *fi, int log2_w, unsigned *mb_width,
                           unsigned *mb_height)
{
    *mb_width = (fi->width + 15) >> 4;
    *mb_height = fi->interlace_mode ? (fi->height + 31) >> 5 : (fi->height + 15) >> 4;
    return (long)*mb_height * ((*mb_width >> log2_w) + popcount(*mb_width & ((1u << log2_w) - 1)));
}

/* proresdec.c decode_picture_header(); `buf` points at the picture header,
 * `buf_size` is everything left in the packet from there (as in FFmpeg).
 * Returns the picture data size (>= 0) or an error. */
static int parse_picture(const uint8_t *pkt, const uint8_t *buf, long buf_size,
                         const ppr_frame_info *fi, int pic_no, ppr_picture_info *pic)
{
    int hdr_size, log2_w, log2_h, slice_count, slice_mb_count, mb_x, mb_y, i;
    unsigned pic_data_size, mb_width, mb_height;
    const uint8_t *index_ptr, *data_ptr;

    if (buf_size < 1)
        return ppr__fail(PPR_ETRUNCATED, "picture %d: packet ends before the picture header", pic_no);
    hdr_size = buf[0] >> 3;
    if (hdr_size < 8 || hdr_size > buf_size)
        return ppr__fail(hdr_size < 8 ? PPR_EDECODE : PPR_ETRUNCATED,
                         "picture %d: wrong picture header size %d (%ld bytes left)",
                         pic_no, hdr_size, buf_size);

    pic_data_size = rb32(buf + 1);
    if (pic_data_size > (unsigned long)buf_size)
        return ppr__fail(PPR_ETRUNCATED,
                         "picture %d: picture data size %u exceeds the %ld bytes left",
                         pic_no, pic_data_size, buf_size);

    log2_w = buf[7] >> 4;
    log2_h = buf[7] & 0xF;
    if (log2_w > 3 || log2_h)
        return ppr__fail(PPR_EDECODE, "picture %d: unsupported slice resolution: %dx%d",
                         pic_no, 1 << log2_w, 1 << log2_h);

    slice_count = (int)slice_count_of(fi, log2_w, &mb_width, &mb_height);
    if (!slice_count)
        return ppr__fail(PPR_EDECODE, "picture %d: no slices", pic_no);

    if ((long)hdr_size + (long)slice_count * 2 > buf_size)
        return ppr__fail(PPR_ETRUNCATED, "picture %d: slice index (%d slices) exceeds the packet",
                         pic_no, slice_count);

    pic->offset = (size_t)(buf - pkt);
    pic->size = pic_data_size;
    pic->header_size = hdr_size;
    pic->log2_slice_mb_width = log2_w;
    pic->mb_width = (int)mb_width;
    pic->mb_height = (int)mb_height;
    pic->slice_count = slice_count;
    if (!fi->interlace_mode)
        pic->field = PPR_FIELD_FRAME;
    else /* proresdec: first picture is the top field iff TFF (frame_type 1) */
        pic->field = ((pic_no == 0) == (fi->interlace_mode == 1)) ? PPR_FIELD_TOP : PPR_FIELD_BOTTOM;

    pic->slices = calloc((size_t)slice_count, sizeof(*pic->slices));
    if (!pic->slices)
        return ppr__fail(PPR_ENOMEM, "out of memory");

    index_ptr = buf + hdr_size;
    data_ptr = index_ptr + slice_count * 2;
    slice_mb_count = 1 << log2_w;
    mb_x = mb_y = 0;

    for (i = 0; i < slice_count; i++) {
        ppr_slice_info *s = &pic->slices[i];
        const uint8_t *sdata = data_ptr;
        unsigned ssize = rb16(index_ptr + i * 2);

        while ((int)mb_width - mb_x < slice_mb_count)
            slice_mb_count >>= 1;

        s->index = i;
        s->mb_x = mb_x;
        s->mb_y = mb_y;
        s->mb_count = slice_mb_count;
        s->offset = (size_t)(sdata - pkt);
        s->size = ssize;
        s->qscale = -1;

        if (ssize < 6)
            return ppr__fail(PPR_EDECODE, "picture %d slice %d: wrong slice data size %u (< 6)",
                             pic_no, i, ssize);

        mb_x += slice_mb_count;
        if (mb_x == (int)mb_width) {
            slice_mb_count = 1 << log2_w;
            mb_x = 0;
            mb_y++;
        }
        if ((long)(sdata - buf) + (long)ssize > buf_size)
            return ppr__fail(PPR_ETRUNCATED, "picture %d slice %d: slice out of bounds",
                             pic_no, i);
        s->qscale = sdata[1];
        data_ptr = sdata + ssize;
    }

    if (mb_x || mb_y != (int)mb_height)
        return ppr__fail(PPR_EDECODE, "picture %d: wrong mb count y %d h %u", pic_no, mb_y, mb_height);

    return (int)pic_data_size;
}

/* What proresdec.c's decode_frame() checks before it allocates a frame
 * (check_slice_index_size() of the series): the first picture's slice index
 * fits the packet. Other picture header faults are left to parse_picture(),
 * as the decoder leaves them to decode_picture_header(). */
static int check_first_index(const uint8_t *buf, long buf_size, const ppr_frame_info *fi)
{
    int hdr_size, log2_w;
    unsigned mb_width, mb_height;
    long slice_count;

    if (buf_size < 8)
        return 0;
    hdr_size = buf[0] >> 3;
    log2_w = buf[7] >> 4;
    if (hdr_size < 8 || hdr_size > buf_size || log2_w > 3)
        return 0;
    slice_count = slice_count_of(fi, log2_w, &mb_width, &mb_height);
    if (hdr_size + slice_count * 2 > buf_size)
        return ppr__fail(PPR_ETRUNCATED, "picture 0: slice index (%ld slices) exceeds the packet",
                         slice_count);
    return 0;
}

static int inspect(const uint8_t *pkt, size_t size, uint32_t codec_tag, ppr_frame_info *out,
                   int with_pictures)
{
    const uint8_t *buf;
    long buf_size;
    int hdr_size, version, width, height, frame_type, alpha_info, flags, is444, ret, p;
    enum AVPixelFormat pix_fmt;
    const char *name;

    ppr__ensure_init();
    ppr__clear_error();
    if (!out)
        return ppr__fail(PPR_EINVAL, "ppr_inspect: out is NULL");
    memset(out, 0, sizeof(*out));
    if (!pkt && size)
        return ppr__fail(PPR_EINVAL, "ppr_inspect: packet is NULL");
    if (size == 0)
        return ppr__fail(PPR_ETRUNCATED, "empty packet");
    if (size > 0x7fffffff)
        return ppr__fail(PPR_EINVAL, "packet too large (%zu bytes)", size);
    if (size < 8)
        return ppr__fail(PPR_ETRUNCATED, "packet of %zu bytes is too short for a ProRes frame", size);
    if (memcmp(pkt + 4, "icpf", 4))
        return ppr__fail(PPR_ENOTPRORES, "not a ProRes frame: no 'icpf' signature at byte 4");
    if (size < 28)
        return ppr__fail(PPR_ETRUNCATED, "invalid frame header: packet of %zu bytes is too short", size);

    out->codec_tag = codec_tag;
    out->bit_depth = (codec_tag == TAG('a', 'p', '4', 'h') || codec_tag == TAG('a', 'p', '4', 'x')) ? 12 : 10;

    /* decode_frame_header() */
    buf = pkt + 8;
    buf_size = (long)size - 8;

    hdr_size = (int)rb16(buf);
    if (hdr_size > buf_size)
        return ppr__fail(PPR_ETRUNCATED, "wrong frame header size %d (%ld bytes left)", hdr_size, buf_size);

    version = (int)rb16(buf + 2);
    if (version > 1)
        return ppr__fail(PPR_EDECODE, "unsupported frame header version: %d", version);

    width = (int)rb16(buf + 8);
    height = (int)rb16(buf + 10);
    /* ff_set_dimensions() -> av_image_check_size2() */
    if (av_image_check_size2((unsigned)width, (unsigned)height, INT_MAX, AV_PIX_FMT_NONE, 0, NULL) < 0)
        return ppr__fail(PPR_EDECODE, "invalid picture size %dx%d", width, height);

    frame_type = (buf[12] >> 2) & 3;
    alpha_info = buf[17] & 0xf;
    if (alpha_info > 2)
        return ppr__fail(PPR_EDECODE, "invalid alpha mode %d", alpha_info);

    is444 = (buf[12] & 0xC0) == 0xC0;
    if (alpha_info)
        pix_fmt = out->bit_depth == 10 ? (is444 ? AV_PIX_FMT_YUVA444P10 : AV_PIX_FMT_YUVA422P10)
                                       : (is444 ? AV_PIX_FMT_YUVA444P12 : AV_PIX_FMT_YUVA422P12);
    else
        pix_fmt = out->bit_depth == 10 ? (is444 ? AV_PIX_FMT_YUV444P10 : AV_PIX_FMT_YUV422P10)
                                       : (is444 ? AV_PIX_FMT_YUV444P12 : AV_PIX_FMT_YUV422P12);

    flags = buf[19];
    {
        long need = 20 + ((flags & 2) ? 64 : 0) + ((flags & 1) ? 64 : 0);
        if (need > buf_size)
            return ppr__fail(PPR_ETRUNCATED, "frame header truncated (quantisation matrices)");
    }

    out->width = width;
    out->height = height;
    out->chroma_format = is444 ? 444 : 422;
    out->alpha_info = alpha_info;
    out->interlace_mode = frame_type;
    out->frame_header_size = hdr_size;
    name = av_get_pix_fmt_name(pix_fmt);
    snprintf(out->pix_fmt, sizeof(out->pix_fmt), "%s", name ? name : "?");

    /* decode_frame(): the pictures follow the frame header */
    buf += hdr_size;
    buf_size -= hdr_size;

    if (!with_pictures)
        return check_first_index(buf, buf_size, out);

    for (p = 0; p < 2; p++) {
        ret = parse_picture(pkt, buf, buf_size, out, p, &out->pictures[p]);
        out->picture_count = p + 1;
        if (ret < 0) {
            ppr_frame_info_free(out);
            return ret;
        }
        buf += ret;
        buf_size -= ret;
        /* the second field is decoded only when data is left after the first */
        if (!(frame_type && buf_size > 0))
            break;
    }
    return 0;
}

int ppr_inspect(const uint8_t *pkt, size_t size, uint32_t codec_tag, ppr_frame_info *out)
{
    return inspect(pkt, size, codec_tag, out, 1);
}

int ppr_inspect_header(const uint8_t *pkt, size_t size, uint32_t codec_tag,
                       ppr_frame_info *out)
{
    return inspect(pkt, size, codec_tag, out, 0);
}

void ppr_frame_info_free(ppr_frame_info *info)
{
    int p;
    if (!info)
        return;
    for (p = 0; p < 2; p++)
        free(info->pictures[p].slices);
    memset(info, 0, sizeof(*info));
}

int ppr_frame_layout(const ppr_frame_info *info, ppr_planes *out)
{
    int i, cw;

    if (!info || !out)
        return ppr__fail(PPR_EINVAL, "ppr_frame_layout: NULL argument");
    if (info->width <= 0 || info->height <= 0)
        return ppr__fail(PPR_EINVAL, "ppr_frame_layout: frame info holds no frame");
    memset(out, 0, sizeof(*out));
    out->count = info->alpha_info ? 4 : 3;
    cw = info->chroma_format == 444 ? info->width : (info->width + 1) >> 1;
    for (i = 0; i < out->count; i++) {
        out->plane[i].width = (i == 1 || i == 2) ? cw : info->width;
        out->plane[i].height = info->height;
        out->plane[i].stride = (ptrdiff_t)out->plane[i].width * 2;
    }
    return 0;
}
