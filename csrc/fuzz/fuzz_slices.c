/*
 * libFuzzer target: slice-table handling. One input, one ProRes packet, read
 * three ways:
 *
 *  1. csrc's ppr_inspect() (prores_headers.c): frame header, picture headers
 *     and slice index. When it succeeds, the table it returns is checked:
 *     slices tile the macroblock grid row by row, lie inside the packet,
 *     follow each other without gaps, and the pictures follow each other.
 *
 *  2. FFmpeg's software ProRes decoder (proresdec.c): a frame it decodes must
 *     be one that ppr_inspect() accepts, with the same size and pixel format
 *     (ppr_inspect claims to fail exactly where the decoder's header checks
 *     fail).
 *
 *  3. proresdec.c's slice-level hwaccel path (decode_frame_hwaccel() and the
 *     hwaccel branches of decode_picture_header(), from the ffmpeg_patches
 *     series), through a recording hwaccel that this file links in place of
 *     the Vulkan one (same symbol, ff_prores_vulkan_hwaccel, so the static
 *     libavcodec.a member with the real one is not pulled in). It checks
 *     every start_frame/decode_slice/end_frame call: the whole packet at
 *     start_frame, then slices of at least 6 bytes inside the packet, each
 *     the entry cur_slice of the decoder's table, in increasing order within
 *     a picture, at most two pictures; end_frame after start_frame. When
 *     ppr_inspect() accepted the packet, the submitted slices must be exactly
 *     its table (offsets, sizes, macroblock positions).
 *
 * The packet is copied into a buffer of its exact size for ppr_inspect (any
 * read past the end is an ASan report) and into an AVPacket with FFmpeg's
 * usual zeroed padding for the decoders.
 *
 * Input layout: bytes 0-3 as in fuzz_parser.c (byte 0 bits 0-2: codec tag;
 * the rest is ignored here), then the packet.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavutil/common.h>
#include <libavutil/pixdesc.h>

/* FFmpeg internals, from the configured source tree of build/ffmpeg-fuzz */
#include "libavcodec/hwaccel_internal.h"
#include "libavcodec/proresdec.h"

#include "pyprores.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define MAX_PIXELS   (1 << 20)
#define MAX_RECORDED 4096

static const uint32_t tags[8] = {
    MKTAG('a', 'p', 'c', 'o'), MKTAG('a', 'p', 'c', 's'), MKTAG('a', 'p', 'c', 'n'),
    MKTAG('a', 'p', 'c', 'h'), MKTAG('a', 'p', '4', 'h'), MKTAG('a', 'p', '4', 'x'),
    MKTAG('i', 'c', 'o', 'd'), 0,
};

#define CHECK(cond, ...) do {                                        \
        if (!(cond)) {                                               \
            fprintf(stderr, "fuzz_slices: check failed: %s: ", #cond); \
            fprintf(stderr, __VA_ARGS__);                            \
            fputc('\n', stderr);                                     \
            abort();                                                 \
        }                                                            \
    } while (0)

/* ------------------------------------------------------------ recording hwaccel */

typedef struct Submitted {
    int picture;
    int index;
    size_t offset;
    size_t size;
    int mb_x, mb_y, mb_count;
} Submitted;

static struct {
    const uint8_t *pkt;
    size_t pkt_size;
    int open;               /* between start_frame and end_frame       */
    int frames;             /* end_frame calls for this packet         */
    int picture;            /* current picture (0 or 1)                */
    int last_slice;         /* last cur_slice within the picture       */
    int first_field;        /* first_field seen at the last slice      */
    int count;
    Submitted slices[MAX_RECORDED];
    unsigned checksum;
} rec;

static int mock_start_frame(AVCodecContext *avctx, const uint8_t *buf, uint32_t size)
{
    CHECK(buf == rec.pkt && size == rec.pkt_size,
          "start_frame got %p/%u, packet is %p/%zu", (const void *)buf, size,
          (const void *)rec.pkt, rec.pkt_size);
    /* a failed frame never reaches end_frame: the next start_frame begins again */
    rec.open = 1;
    rec.picture = 0;
    rec.last_slice = -1;
    rec.first_field = -1;
    rec.count = 0;
    return 0;
}

static int mock_decode_slice(AVCodecContext *avctx, const uint8_t *buf, uint32_t size)
{
    const ProresContext *ctx = avctx->priv_data;
    const SliceContext *slice;
    int cur = ctx->cur_slice;
    uint32_t i;

    CHECK(rec.open, "decode_slice outside start_frame/end_frame");
    CHECK(cur >= 0 && cur < ctx->slice_count, "cur_slice %d of %d", cur, ctx->slice_count);
    slice = &ctx->slices[cur];
    CHECK(buf == slice->data && size == slice->data_size,
          "slice %d submitted as %p/%u, table says %p/%u", cur, (const void *)buf, size,
          (const void *)slice->data, slice->data_size);
    CHECK(size >= 6, "slice %d of %u bytes submitted", cur, size);
    CHECK(buf >= rec.pkt && buf + size <= rec.pkt + rec.pkt_size,
          "slice %d at packet offset %td size %u runs outside the %zu-byte packet",
          cur, buf - rec.pkt, size, rec.pkt_size);
    CHECK(ctx->log2_slice_mb_width >= 0 && ctx->log2_slice_mb_width <= 3,
          "log2_slice_mb_width %d", ctx->log2_slice_mb_width);
    CHECK(slice->mb_count >= 1 && slice->mb_count <= (1u << ctx->log2_slice_mb_width) &&
          !(slice->mb_count & (slice->mb_count - 1)), "slice %d mb_count %u", cur,
          slice->mb_count);
    CHECK(slice->mb_x + slice->mb_count <= ctx->mb_width && slice->mb_y < ctx->mb_height,
          "slice %d at mb %u,%u (+%u) outside %ux%u", cur, slice->mb_x, slice->mb_y,
          slice->mb_count, ctx->mb_width, ctx->mb_height);

    /* a new picture starts when first_field drops (second field) */
    if (rec.first_field == 1 && !ctx->first_field) {
        rec.picture++;
        rec.last_slice = -1;
    }
    CHECK(rec.picture <= 1, "more than two pictures in a frame");
    CHECK(cur > rec.last_slice, "slice %d after slice %d", cur, rec.last_slice);
    rec.last_slice = cur;
    rec.first_field = ctx->first_field;

    /* read every byte, as a hwaccel uploading the slice would */
    for (i = 0; i < size; i++)
        rec.checksum += buf[i];

    if (rec.count < MAX_RECORDED) {
        Submitted *s = &rec.slices[rec.count];
        s->picture = rec.picture;
        s->index = cur;
        s->offset = (size_t)(buf - rec.pkt);
        s->size = size;
        s->mb_x = slice->mb_x;
        s->mb_y = slice->mb_y;
        s->mb_count = slice->mb_count;
    }
    rec.count++;
    return 0;
}

static int mock_end_frame(AVCodecContext *avctx)
{
    CHECK(rec.open, "end_frame without start_frame");
    CHECK(rec.count > 0, "end_frame of a frame without slices");
    rec.open = 0;
    rec.frames++;
    return 0;
}

/* Takes the place of libavcodec/vulkan_prores.c's hwaccel at link time. */
const FFHWAccel ff_prores_vulkan_hwaccel = {
    .p.name               = "prores_vulkan",
    .p.type               = AVMEDIA_TYPE_VIDEO,
    .p.id                 = AV_CODEC_ID_PRORES,
    .p.pix_fmt            = AV_PIX_FMT_VULKAN,
    .start_frame          = mock_start_frame,
    .decode_slice         = mock_decode_slice,
    .end_frame            = mock_end_frame,
    .frame_priv_data_size = 64,
};

static enum AVPixelFormat pick_hw(AVCodecContext *avctx, const enum AVPixelFormat *fmts)
{
    const enum AVPixelFormat *p;

    for (p = fmts; *p != AV_PIX_FMT_NONE; p++)
        if (*p == AV_PIX_FMT_VULKAN)
            return *p;
    CHECK(0, "AV_PIX_FMT_VULKAN not offered by get_format");
    return AV_PIX_FMT_NONE;
}

static void free_dummy(void *opaque, uint8_t *data)
{
    av_free(data);
}

/* A hardware frame has no planes: give the decoder a token buffer. */
static int dummy_buffer(AVCodecContext *avctx, AVFrame *frame, int flags)
{
    uint8_t *p = av_mallocz(16);

    if (!p)
        return AVERROR(ENOMEM);
    frame->buf[0] = av_buffer_create(p, 16, free_dummy, NULL, 0);
    if (!frame->buf[0]) {
        av_free(p);
        return AVERROR(ENOMEM);
    }
    frame->data[0] = p;
    return 0;
}

/* ------------------------------------------------------------------ helpers */

static const AVCodec *decoder;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    av_log_set_level(getenv("FUZZ_VERBOSE") ? AV_LOG_DEBUG : AV_LOG_QUIET);
    decoder = avcodec_find_decoder(AV_CODEC_ID_PRORES);
    CHECK(decoder, "no ProRes decoder in this build");
    return 0;
}

static void check_table(const ppr_frame_info *info, size_t size)
{
    int p, i;

    CHECK(info->picture_count >= 1 && info->picture_count <= 2 &&
          (info->interlace_mode || info->picture_count == 1),
          "picture_count %d, interlace_mode %d", info->picture_count, info->interlace_mode);
    for (p = 0; p < info->picture_count; p++) {
        const ppr_picture_info *pic = &info->pictures[p];
        int mb_x = 0, mb_y = 0;
        size_t next = pic->offset + pic->header_size + 2 * (size_t)pic->slice_count;

        CHECK(pic->header_size >= 8 && pic->offset + pic->size <= size,
              "picture %d at %zu size %zu header %d in %zu bytes", p, pic->offset, pic->size,
              pic->header_size, size);
        if (p == 1)
            CHECK(pic->offset == info->pictures[0].offset + info->pictures[0].size,
                  "picture 1 at %zu, picture 0 ends at %zu", pic->offset,
                  info->pictures[0].offset + info->pictures[0].size);
        CHECK(pic->slice_count > 0 && pic->slices, "picture %d without slices", p);
        for (i = 0; i < pic->slice_count; i++) {
            const ppr_slice_info *s = &pic->slices[i];

            CHECK(s->index == i && s->offset == next && s->size >= 6 &&
                  s->offset + s->size <= size,
                  "picture %d slice %d: index %d offset %zu (expected %zu) size %zu of %zu",
                  p, i, s->index, s->offset, next, s->size, size);
            CHECK(s->mb_x == mb_x && s->mb_y == mb_y && s->mb_count >= 1 &&
                  s->mb_count <= (1 << pic->log2_slice_mb_width) &&
                  s->mb_x + s->mb_count <= pic->mb_width,
                  "picture %d slice %d at mb %d,%d (+%d), expected %d,%d in %dx%d", p, i,
                  s->mb_x, s->mb_y, s->mb_count, mb_x, mb_y, pic->mb_width, pic->mb_height);
            CHECK(s->qscale >= 0 && s->qscale < 256, "qscale %d", s->qscale);
            next = s->offset + s->size;
            mb_x += s->mb_count;
            if (mb_x == pic->mb_width) {
                mb_x = 0;
                mb_y++;
            }
        }
        CHECK(mb_x == 0 && mb_y == pic->mb_height, "picture %d: grid ends at %d,%d of %dx%d",
              p, mb_x, mb_y, pic->mb_width, pic->mb_height);
    }
}

static AVCodecContext *open_decoder(uint32_t tag, int hw)
{
    AVCodecContext *avctx = avcodec_alloc_context3(decoder);

    if (!avctx)
        return NULL;
    avctx->codec_tag = tag;
    avctx->thread_count = 1;
    avctx->max_pixels = MAX_PIXELS;
    if (hw) {
        avctx->get_format = pick_hw;
        avctx->get_buffer2 = dummy_buffer;
    }
    if (avcodec_open2(avctx, decoder, NULL) < 0)
        avcodec_free_context(&avctx);
    return avctx;
}

/* Decode pkt; returns 1 with *frame filled when a frame came out. */
static int decode(AVCodecContext *avctx, const AVPacket *pkt, AVFrame *frame)
{
    int got = 0;

    if (avcodec_send_packet(avctx, pkt) >= 0 && avcodec_receive_frame(avctx, frame) >= 0)
        got = 1;
    if (!got && avcodec_send_packet(avctx, NULL) >= 0 &&
        avcodec_receive_frame(avctx, frame) >= 0)
        got = 1;
    return got;
}

/* -------------------------------------------------------------------- target */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ppr_frame_info info;
    AVCodecContext *sw = NULL, *hw = NULL;
    AVPacket *pkt = NULL;
    AVFrame *frame = NULL;
    uint8_t *exact;
    uint32_t tag;
    int inspected, fits, got, i, n, p;

    if (size < 4 || size > (1 << 22))
        return 0;
    tag = tags[data[0] & 7];
    data += 4;
    size -= 4;

    /* 1. inspection, on an exact-size copy */
    exact = malloc(size ? size : 1);
    CHECK(exact, "out of memory");
    memcpy(exact, data, size);
    inspected = ppr_inspect(exact, size, tag, &info) == 0;
    if (inspected) {
        ppr_planes planes;
        check_table(&info, size);
        CHECK(ppr_frame_layout(&info, &planes) == 0 && planes.count == (info.alpha_info ? 4 : 3),
              "layout of an inspected frame");
    } else {
        CHECK(info.picture_count == 0 && !info.pictures[0].slices && !info.pictures[1].slices,
              "a failed ppr_inspect left state behind");
    }
    free(exact);
    /* what the decoders' max_pixels (checked on the 64-aligned width) lets through */
    fits = inspected && (int64_t)FFALIGN(info.width, 64) * info.height <= MAX_PIXELS;

    pkt = av_packet_alloc();
    frame = av_frame_alloc();
    CHECK(pkt && frame, "out of memory");
    CHECK(av_new_packet(pkt, (int)size) == 0, "out of memory");
    memcpy(pkt->data, data, size);

    /* 2. the software decoder */
    sw = open_decoder(tag, 0);
    if (sw) {
        got = decode(sw, pkt, frame);
        if (got) {
            CHECK(inspected, "the software decoder decoded a %dx%d %s frame that ppr_inspect "
                  "refuses (%s)", frame->width, frame->height,
                  av_get_pix_fmt_name(frame->format), ppr_last_error(NULL));
            CHECK(frame->width == info.width && frame->height == info.height &&
                  !strcmp(av_get_pix_fmt_name(frame->format), info.pix_fmt),
                  "decoder %dx%d %s, ppr_inspect %dx%d %s", frame->width, frame->height,
                  av_get_pix_fmt_name(frame->format), info.width, info.height, info.pix_fmt);
        }
        av_frame_unref(frame);
        avcodec_free_context(&sw);
    }

    /* 3. the slice-level hwaccel path */
    memset(&rec, 0, sizeof(rec));
    rec.pkt = pkt->data;
    rec.pkt_size = pkt->size;
    hw = open_decoder(tag, 1);
    if (hw) {
        got = decode(hw, pkt, frame);
        if (got) {
            CHECK(rec.frames == 1 && !rec.open, "frame out after %d end_frame calls", rec.frames);
            CHECK(frame->format == AV_PIX_FMT_VULKAN, "hw frame format %d", frame->format);
        }
        if (got && fits) {
            n = 0;
            for (p = 0; p < info.picture_count; p++)
                n += info.pictures[p].slice_count;
            CHECK(rec.count == n, "%d slices submitted, ppr_inspect lists %d", rec.count, n);
            for (i = 0; i < FFMIN(rec.count, MAX_RECORDED); i++) {
                const Submitted *s = &rec.slices[i];
                const ppr_slice_info *t;

                CHECK(s->picture < info.picture_count && s->index < info.pictures[s->picture].slice_count,
                      "submitted slice %d of picture %d", s->index, s->picture);
                t = &info.pictures[s->picture].slices[s->index];
                CHECK(s->offset == t->offset && s->size == t->size && s->mb_x == t->mb_x &&
                      s->mb_y == t->mb_y && s->mb_count == t->mb_count,
                      "picture %d slice %d: submitted %zu+%zu mb %d,%d/%d, table %zu+%zu mb %d,%d/%d",
                      s->picture, s->index, s->offset, s->size, s->mb_x, s->mb_y, s->mb_count,
                      t->offset, t->size, t->mb_x, t->mb_y, t->mb_count);
            }
        }
        if (!got && fits)
            CHECK(0, "the hwaccel path refused a %dx%d frame that ppr_inspect accepts",
                  info.width, info.height);
        av_frame_unref(frame);
        avcodec_free_context(&hw);
    }

    ppr_frame_info_free(&info);
    av_frame_free(&frame);
    av_packet_free(&pkt);
    return 0;
}
