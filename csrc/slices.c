/*
 * slices.c - a frame rebuilt from the slices the caller submits, with the
 * original frame and picture headers, then decoded (ppr_frame_begin,
 * ppr_frame_submit_slice, ppr_frame_end). See pyprores.h for the API.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <libavcodec/avcodec.h>

#include "session.h"

int ppr_frame_begin(ppr_session *s, const uint8_t *pkt, size_t size, uint32_t tag)
{
    int ret, p;

    ppr__enter(s);
    if (!s)
        return ppr__leave(ppr__fail(PPR_EINVAL, "session is NULL"));
    ppr__end_frame_state(s);
    ret = ppr__session_inspect(s, pkt, size, tag, &s->frame_info);
    if (ret < 0)
        return ppr__leave(ret);
    s->frame_pkt = malloc(size);
    if (!s->frame_pkt) {
        ppr__end_frame_state(s);
        return ppr__leave(ppr__sfail(s, PPR_ENOMEM, "out of memory"));
    }
    memcpy(s->frame_pkt, pkt, size);
    s->frame_pkt_size = size;
    for (p = 0; p < s->frame_info.picture_count; p++) {
        s->subs[p] = calloc((size_t)s->frame_info.pictures[p].slice_count, sizeof(submitted_slice));
        if (!s->subs[p]) {
            ppr__end_frame_state(s);
            return ppr__leave(ppr__sfail(s, PPR_ENOMEM, "out of memory"));
        }
    }
    s->in_frame = 1;
    return ppr__leave(0);
}

const ppr_frame_info *ppr_frame_current(ppr_session *s)
{
    return s && s->in_frame ? &s->frame_info : NULL;
}

int ppr_frame_submit_slice(ppr_session *s, int picture, int slice_index,
                           const uint8_t *data, size_t size)
{
    submitted_slice *sl;
    uint8_t *copy = NULL;

    ppr__enter(s);
    if (!s)
        return ppr__leave(ppr__fail(PPR_EINVAL, "session is NULL"));
    if (!s->in_frame)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "no frame begun (call ppr_frame_begin first)"));
    if (picture < 0 || picture >= s->frame_info.picture_count)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "picture %d out of range (the frame has %d)",
                                     picture, s->frame_info.picture_count));
    if (slice_index < 0 || slice_index >= s->frame_info.pictures[picture].slice_count)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "slice %d out of range (picture %d has %d slices)",
                                     slice_index, picture, s->frame_info.pictures[picture].slice_count));
    if (size > 0xFFFF)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "slice of %zu bytes: the slice index holds at most "
                                     "65535 bytes per slice", size));
    if (size && !data)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "slice data is NULL"));
    if (size) {
        copy = malloc(size);
        if (!copy)
            return ppr__leave(ppr__sfail(s, PPR_ENOMEM, "out of memory"));
        memcpy(copy, data, size);
    }
    sl = &s->subs[picture][slice_index];
    free(sl->data);
    sl->data = copy;
    sl->size = size;
    sl->submitted = 1;
    return ppr__leave(0);
}

static void wb32(uint8_t *p, uint32_t v)
{
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

int ppr_frame_end(ppr_session *s, ppr_planes *out)
{
    const ppr_frame_info *fi;
    size_t head, total, pos;
    uint8_t *buf;
    int p, i, ret;

    ppr__enter(s);
    if (!s)
        return ppr__leave(ppr__fail(PPR_EINVAL, "session is NULL"));
    if (!s->in_frame)
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "no frame begun (call ppr_frame_begin first)"));
    fi = &s->frame_info;

    /* size: frame container + header, then per picture: header, index, data */
    head = fi->pictures[0].offset;   /* 8 + frame header size */
    total = head;
    for (p = 0; p < fi->picture_count; p++) {
        const ppr_picture_info *pic = &fi->pictures[p];
        total += (size_t)pic->header_size + (size_t)pic->slice_count * 2;
        for (i = 0; i < pic->slice_count; i++)
            total += s->subs[p][i].size;
    }
    if (total > 0x7fffffff - AV_INPUT_BUFFER_PADDING_SIZE) {
        ppr__end_frame_state(s);
        return ppr__leave(ppr__sfail(s, PPR_EINVAL, "rebuilt frame too large"));
    }
    buf = malloc(total);
    if (!buf) {
        ppr__end_frame_state(s);
        return ppr__leave(ppr__sfail(s, PPR_ENOMEM, "out of memory"));
    }
    memcpy(buf, s->frame_pkt, head);
    wb32(buf, (uint32_t)total);
    pos = head;
    for (p = 0; p < fi->picture_count; p++) {
        const ppr_picture_info *pic = &fi->pictures[p];
        size_t pic_start = pos, data_pos;
        memcpy(buf + pos, s->frame_pkt + pic->offset, (size_t)pic->header_size);
        pos += (size_t)pic->header_size;
        data_pos = pos + (size_t)pic->slice_count * 2;
        for (i = 0; i < pic->slice_count; i++) {
            const submitted_slice *sl = &s->subs[p][i];
            buf[pos + 2 * i] = (uint8_t)(sl->size >> 8);
            buf[pos + 2 * i + 1] = (uint8_t)sl->size;
            if (sl->size)
                memcpy(buf + data_pos, sl->data, sl->size);
            data_pos += sl->size;
        }
        pos = data_pos;
        wb32(buf + pic_start + 1, (uint32_t)(pos - pic_start));
    }

    ret = ppr__decode_packet(s, buf, total, fi->codec_tag, fi, out);
    free(buf);
    ppr__end_frame_state(s);
    return ppr__leave(ret);
}
