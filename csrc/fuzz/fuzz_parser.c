/*
 * libFuzzer target: the ProRes AVCodecParser (libavcodec/prores_parser.c of
 * the ffmpeg_patches series), driven through av_parser_parse2() the way
 * FFmpeg's tools/target_dec_fuzzer.c drives parsers: the input is cut into
 * chunks of fuzzer-chosen sizes and each chunk is handed to the parser as it
 * is, in a buffer of exactly that size (no padding), so that AddressSanitizer
 * reports any read past what the parser was given.
 *
 * After every call the fields the parser sets are checked:
 *  - it consumes the whole chunk and returns it unchanged as one frame
 *    (ProRes is one frame per packet);
 *  - key_frame, pict_type and picture_structure say "intra frame";
 *  - when it exported header fields: width/height in 1..65535, coded sizes
 *    aligned as the decoder lays out macroblocks, a ProRes pixel format that
 *    agrees with the codec tag (12-bit for ap4h/ap4x) and with skip_alpha,
 *    and a valid field order;
 *  - cross-check with csrc's ppr_inspect(), a transcription of the
 *    decoder's header checks: a chunk that the decoder accepts (headers and
 *    slice table) must be accepted by the parser, with the same width,
 *    height and pixel format. Interlace mode 3 (reserved; the decoder reads
 *    it as bottom field first, the parser refuses it) is left out.
 *
 * Input layout: byte 0 selects the codec tag (bits 0-2), skip_alpha (bit 3)
 * and how to cut (bits 4-5: whole input, cuts from the following bytes,
 * fixed-size cuts); bytes 1-3 seed the cut sizes; the rest is the stream.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavutil/common.h>
#include <libavutil/mem.h>
#include <libavutil/pixdesc.h>

#include "pyprores.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Compiled into this target from the patched source tree (tools/gpu/fuzz-coverage),
 * so that it is fuzzed even when the FFmpeg build lists no ProRes parser. */
extern const AVCodecParser ff_prores_parser;

/* av_parser_init() when the build has the ProRes parser; otherwise the same
 * initialisation (libavcodec/parser.c) done here for ff_prores_parser. */
static AVCodecParserContext *open_parser(void)
{
    AVCodecParserContext *s = av_parser_init(AV_CODEC_ID_PRORES);

    if (s)
        return s;
    s = av_mallocz(sizeof(*s));
    if (!s)
        return NULL;
    s->parser = (AVCodecParser *)&ff_prores_parser;
    s->priv_data = av_mallocz(ff_prores_parser.priv_data_size);
    if (!s->priv_data) {
        av_free(s);
        return NULL;
    }
    s->fetch_timestamp   = 1;
    s->pict_type         = AV_PICTURE_TYPE_I;
    s->key_frame         = -1;
    s->dts_sync_point    = INT_MIN;
    s->dts_ref_dts_delta = INT_MIN;
    s->pts_dts_delta     = INT_MIN;
    s->format            = -1;
    return s;
}

static const uint32_t tags[8] = {
    MKTAG('a', 'p', 'c', 'o'), MKTAG('a', 'p', 'c', 's'), MKTAG('a', 'p', 'c', 'n'),
    MKTAG('a', 'p', 'c', 'h'), MKTAG('a', 'p', '4', 'h'), MKTAG('a', 'p', '4', 'x'),
    MKTAG('i', 'c', 'o', 'd'), 0,
};

#define CHECK(cond, ...) do {                                        \
        if (!(cond)) {                                               \
            fprintf(stderr, "fuzz_parser: check failed: %s: ", #cond); \
            fprintf(stderr, __VA_ARGS__);                            \
            fputc('\n', stderr);                                     \
            abort();                                                 \
        }                                                            \
    } while (0)

static int is_prores_format(int fmt, int is_12bit, int alpha_allowed)
{
    static const int f10[] = { AV_PIX_FMT_YUV422P10, AV_PIX_FMT_YUV444P10,
                               AV_PIX_FMT_YUVA422P10, AV_PIX_FMT_YUVA444P10 };
    static const int f12[] = { AV_PIX_FMT_YUV422P12, AV_PIX_FMT_YUV444P12,
                               AV_PIX_FMT_YUVA422P12, AV_PIX_FMT_YUVA444P12 };
    const int *f = is_12bit ? f12 : f10;
    int i, n = alpha_allowed ? 4 : 2;

    for (i = 0; i < n; i++)
        if (fmt == f[i])
            return 1;
    return 0;
}

static void parse_chunk(AVCodecParserContext *s, AVCodecContext *avctx,
                        const uint8_t *chunk_src, int len)
{
    ppr_frame_info info;
    uint8_t *out = NULL, *chunk;
    int out_size = -1, ret, is_12bit, inspected;

    /* exact size, no padding: any read past len is an ASan report */
    chunk = malloc(len ? len : 1);
    if (!chunk)
        return;
    memcpy(chunk, chunk_src, len);

    s->width = s->height = -1;
    s->coded_width = s->coded_height = -1;
    s->format = -2;
    s->field_order = -1;
    s->key_frame = -1;

    ret = av_parser_parse2(s, avctx, &out, &out_size, chunk, len,
                           AV_NOPTS_VALUE, AV_NOPTS_VALUE, 0);

    CHECK(ret == len, "consumed %d of %d bytes", ret, len);
    /* av_parser_parse2() substitutes a zeroed buffer for an empty input */
    CHECK((out == chunk || !len) && out_size == len, "output %p/%d for input %p/%d",
          (void *)out, out_size, (void *)chunk, len);
    CHECK(s->key_frame == 1, "key_frame %d", s->key_frame);
    CHECK(s->pict_type == AV_PICTURE_TYPE_I, "pict_type %d", s->pict_type);
    CHECK(s->picture_structure == AV_PICTURE_STRUCTURE_FRAME,
          "picture_structure %d", s->picture_structure);

    is_12bit = avctx->codec_tag == MKTAG('a', 'p', '4', 'h') ||
               avctx->codec_tag == MKTAG('a', 'p', '4', 'x');
    if (s->width != -1) {
        CHECK(s->width >= 1 && s->width <= 65535, "width %d", s->width);
        CHECK(s->height >= 1 && s->height <= 65535, "height %d", s->height);
        CHECK(s->coded_width == FFALIGN(s->width, 16), "coded_width %d for width %d",
              s->coded_width, s->width);
        CHECK(s->coded_height >= s->height && !(s->coded_height & 15) &&
              s->coded_height - s->height < 32, "coded_height %d for height %d",
              s->coded_height, s->height);
        CHECK(is_prores_format(s->format, is_12bit, !avctx->skip_alpha),
              "format %d (%s) for tag %08x skip_alpha %d", s->format,
              av_get_pix_fmt_name(s->format) ? av_get_pix_fmt_name(s->format) : "?",
              avctx->codec_tag, avctx->skip_alpha);
        CHECK(s->field_order == AV_FIELD_PROGRESSIVE || s->field_order == AV_FIELD_TT ||
              s->field_order == AV_FIELD_BB, "field_order %d", s->field_order);
        CHECK(s->field_order == AV_FIELD_PROGRESSIVE || !(s->coded_height & 31),
              "coded_height %d not a multiple of 32 for an interlaced frame", s->coded_height);
    } else {
        CHECK(s->height == -1 && s->coded_width == -1 && s->coded_height == -1 &&
              s->format == -2 && s->field_order == -1,
              "a refused frame changed the exported fields");
    }

    /* the decoder's view (csrc transcription of proresdec.c's header checks) */
    inspected = ppr_inspect(chunk, len, avctx->codec_tag, &info) == 0;
    if (inspected && info.interlace_mode != 3) {
        char name[32];

        CHECK(s->width != -1, "the parser refused a frame the decoder accepts (%dx%d, %s)",
              info.width, info.height, info.pix_fmt);
        CHECK(s->width == info.width && s->height == info.height,
              "parser %dx%d, decoder %dx%d", s->width, s->height, info.width, info.height);
        if (!avctx->skip_alpha) {
            snprintf(name, sizeof(name), "%s", av_get_pix_fmt_name(s->format));
            CHECK(!strcmp(name, info.pix_fmt), "parser %s, decoder %s", name, info.pix_fmt);
        }
        CHECK((s->field_order == AV_FIELD_PROGRESSIVE) == (info.interlace_mode == 0),
              "field order %d, interlace mode %d", s->field_order, info.interlace_mode);
    }
    ppr_frame_info_free(&info);
    free(chunk);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    AVCodecParserContext *s;
    AVCodecContext *avctx;
    uint32_t rng;
    int mode;
    size_t pos = 0;

    if (size < 4 || size > (1 << 24))
        return 0;
    avctx = avcodec_alloc_context3(NULL);
    s = open_parser();
    if (!avctx || !s) {
        fprintf(stderr, "fuzz_parser: out of memory\n");
        abort();
    }
    avctx->codec_type = AVMEDIA_TYPE_VIDEO;
    avctx->codec_id = AV_CODEC_ID_PRORES;
    avctx->codec_tag = tags[data[0] & 7];
    avctx->skip_alpha = (data[0] >> 3) & 1;
    mode = (data[0] >> 4) & 3;
    rng = (uint32_t)data[1] << 16 | (uint32_t)data[2] << 8 | data[3];
    data += 4;
    size -= 4;

    while (pos < size) {
        size_t len = size - pos;

        if (mode == 1) {            /* pseudo-random cut sizes, 1..len */
            rng = rng * 1664525u + 1013904223u;
            len = 1 + (rng >> 8) % len;
        } else if (mode == 2) {     /* fixed-size cuts */
            size_t step = 1 + (rng & 0xfff);
            len = FFMIN(len, step);
        }
        parse_chunk(s, avctx, data + pos, (int)len);
        pos += len;
    }
    /* flush call, as a demuxer does at EOF */
    parse_chunk(s, avctx, data, 0);

    av_parser_close(s);
    avcodec_free_context(&avctx);
    return 0;
}
