/*
 * ppr_smoke: drive the whole C API once (for valgrind / ASan runs, see
 * scripts/memcheck-native). Reads concatenated ProRes packets (each starts
 * with its 32-bit big-endian size, as ProRes frames do, e.g. the output of
 * `ffmpeg ... -c:v prores_ks -f rawvideo out.prores`) and, per packet:
 * inspect, layout, decode, rebuild from all slices, rebuild with one slice
 * garbled, rebuild with one slice left out; then error paths; then close.
 *
 * Usage: ppr_smoke FILE FOURCC [software|vulkan [nohwcheck]]
 * Exit status 0 when every call behaved as expected.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pyprores.h"

#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, " [%s:%d] (%s)\n", __FILE__, __LINE__, ppr_last_error(s)); failures++; } } while (0)

/* Padded rows make the library copy the frame in; unpadded ones let a Vulkan
 * session download straight into them: both paths run, and are compared. */
static int alloc_planes(ppr_planes *pl, int padding)
{
    for (int i = 0; i < pl->count; i++) {
        pl->plane[i].stride = (ptrdiff_t)pl->plane[i].width * 2 + padding;
        pl->plane[i].data = malloc((size_t)pl->plane[i].stride * pl->plane[i].height);
        if (!pl->plane[i].data)
            return -1;
    }
    return 0;
}

static void free_planes(ppr_planes *pl)
{
    for (int i = 0; i < pl->count; i++)
        free(pl->plane[i].data);
}

static int same_planes(const ppr_planes *a, const ppr_planes *b)
{
    for (int i = 0; i < a->count; i++)
        for (int y = 0; y < a->plane[i].height; y++)
            if (memcmp((uint8_t *)a->plane[i].data + y * a->plane[i].stride,
                       (uint8_t *)b->plane[i].data + y * b->plane[i].stride,
                       (size_t)a->plane[i].width * 2))
                return 0;
    return 1;
}

int main(int argc, char **argv)
{
    ppr_session *s = NULL, *s2 = NULL;
    int failures = 0, ret, packets = 0;
    unsigned flags = 0;
    uint32_t tag;
    FILE *f;
    uint8_t *data;
    long size, pos;

    if (argc < 3 || strlen(argv[2]) != 4) {
        fprintf(stderr, "usage: %s FILE FOURCC [software|vulkan [nohwcheck]]\n", argv[0]);
        return 2;
    }
    tag = (uint32_t)argv[2][0] | (uint32_t)argv[2][1] << 8 | (uint32_t)argv[2][2] << 16 |
          (uint32_t)argv[2][3] << 24;
    if (argc > 4 && !strcmp(argv[4], "nohwcheck"))
        flags |= PPR_OPEN_NO_HWACCEL_CHECK;
    f = fopen(argv[1], "rb");
    if (!f || fseek(f, 0, SEEK_END) || (size = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET)) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 2;
    }
    data = malloc((size_t)size);
    if (!data || fread(data, 1, (size_t)size, f) != (size_t)size)
        return 2;
    fclose(f);

    ret = ppr_open_ex(&s, argc > 3 ? argv[3] : "software", NULL, 0, flags);
    if (ret < 0) {
        fprintf(stderr, "ppr_open: %s: %s\n", ppr_strerror(ret), ppr_last_error(NULL));
        free(data);
        return 1;
    }
    printf("device: %s (%s)\n", ppr_device_name(s), ppr_backend(s));
    /* a second session, which shares the first one's Vulkan device */
    ret = ppr_open_ex(&s2, argc > 3 ? argv[3] : "software", NULL, 0, flags);
    if (ret < 0) {
        fprintf(stderr, "second ppr_open: %s: %s\n", ppr_strerror(ret), ppr_last_error(NULL));
        ppr_close(s);
        free(data);
        return 1;
    }
    ret = strcmp(ppr_backend(s), "vulkan") ? 0 : 2;
    CHECK(ppr_device_sessions(s) == ret && ppr_device_sessions(s2) == ret,
          "device sessions: %d, %d (want %d)", ppr_device_sessions(s), ppr_device_sessions(s2), ret);

    for (pos = 0; pos + 8 <= size; packets++) {
        long psize = (long)((uint32_t)data[pos] << 24 | data[pos + 1] << 16 | data[pos + 2] << 8 | data[pos + 3]);
        const uint8_t *pkt = data + pos;
        ppr_frame_info info;
        ppr_planes whole, rebuilt;

        if (psize < 8 || pos + psize > size) {
            fprintf(stderr, "bad packet size at %ld\n", pos);
            failures++;
            break;
        }
        pos += psize;

        ret = ppr_inspect(pkt, (size_t)psize, tag, &info);
        CHECK(ret == 0, "inspect: %s", ppr_strerror(ret));
        if (ret < 0)
            continue;
        ppr_frame_layout(&info, &whole);
        ppr_frame_layout(&info, &rebuilt);
        if (alloc_planes(&whole, 32) < 0 || alloc_planes(&rebuilt, 0) < 0)
            return 1;

        ret = ppr_decode(s, pkt, (size_t)psize, tag, &whole);
        CHECK(ret == 0 || (flags && ret == PPR_ENOHWACCEL), "decode: %s", ppr_strerror(ret));
        if (ret == 0) {
            ret = ppr_decode(s2, pkt, (size_t)psize, tag, &rebuilt);
            CHECK(ret == 0 && same_planes(&whole, &rebuilt), "second session: %s", ppr_strerror(ret));

            /* rebuild from all slices: same picture */
            ppr_frame_begin(s, pkt, (size_t)psize, tag);
            for (int p = 0; p < info.picture_count; p++)
                for (int i = 0; i < info.pictures[p].slice_count; i++)
                    ppr_frame_submit_slice(s, p, i, pkt + info.pictures[p].slices[i].offset,
                                           info.pictures[p].slices[i].size);
            ret = ppr_frame_end(s, &rebuilt);
            CHECK(ret == 0 && same_planes(&whole, &rebuilt), "rebuilt frame differs");

            /* one slice garbled: decodes (maybe flagged corrupt) */
            ppr_frame_begin(s, pkt, (size_t)psize, tag);
            for (int p = 0; p < info.picture_count; p++)
                for (int i = 0; i < info.pictures[p].slice_count; i++) {
                    size_t n = info.pictures[p].slices[i].size;
                    uint8_t *copy = malloc(n);
                    memcpy(copy, pkt + info.pictures[p].slices[i].offset, n);
                    if (i == 0)
                        for (size_t k = 0; k < n; k++)
                            copy[k] = (uint8_t)(k * 151 + 7);
                    ppr_frame_submit_slice(s, p, i, copy, n);
                    free(copy);
                }
            ret = ppr_frame_end(s, &rebuilt);
            CHECK(ret == 0 || ret == PPR_EDECODE, "garbled slice: %s", ppr_strerror(ret));

            /* a slice left out, and a frame abandoned by a new begin */
            ppr_frame_begin(s, pkt, (size_t)psize, tag);
            ppr_frame_submit_slice(s, 0, 0, pkt + info.pictures[0].slices[0].offset, 6);
            ppr_frame_begin(s, pkt, (size_t)psize, tag);
            ret = ppr_frame_end(s, &rebuilt);
            CHECK(ret == PPR_EDECODE || ret == 0, "left-out slices: %s", ppr_strerror(ret));
        }

        /* error paths */
        ret = ppr_decode(s, pkt, (size_t)psize / 2, tag, &whole);
        CHECK(ret < 0 || flags, "half packet decoded");
        ret = ppr_decode(s, (const uint8_t *)"0123456789abcdefghijklmnopqrstuvwxyz", 36, tag, &whole);
        CHECK(ret == PPR_ENOTPRORES, "not prores: %s", ppr_strerror(ret));
        ret = ppr_decode(s, pkt, 0, tag, &whole);
        CHECK(ret == PPR_ETRUNCATED, "empty: %s", ppr_strerror(ret));
        {
            ppr_frame_info bad;
            ret = ppr_inspect(pkt, 20, tag, &bad);
            CHECK(ret == PPR_ETRUNCATED, "short inspect: %s", ppr_strerror(ret));
            ppr_frame_info_free(&bad);
        }

        free_planes(&whole);
        free_planes(&rebuilt);
        ppr_frame_info_free(&info);
    }
    /* streaming on the second session: every packet, frames downloaded, twice
     * (the second time reset with frames in flight) */
    if (!flags) {
        for (int round = 0; round < 2; round++) {
            int sent = 0, got = 0, eof = 0;
            ppr_stream_frame sf;
            ret = ppr_stream_config(s2, 2, PPR_STREAM_ERR_DETECT);
            CHECK(ret == 0, "stream config: %s", ppr_strerror(ret));
            for (pos = 0; pos + 8 <= size && !eof; ) {
                long psize = (long)((uint32_t)data[pos] << 24 | data[pos + 1] << 16 |
                                    data[pos + 2] << 8 | data[pos + 3]);
                const uint8_t *pkt = psize >= 8 && pos + psize <= size ? data + pos : NULL;
                if (round == 1 && sent == 2)
                    break;                              /* abandon: reset below */
                ret = ppr_send_packet(s2, pkt, pkt ? (size_t)psize : 0, tag, sent);
                if (!pkt)
                    eof = 1;
                else if (ret == 0) {
                    pos += psize;
                    sent++;
                } else if (ret != PPR_EAGAIN) {
                    CHECK(0, "send: %s", ppr_strerror(ret));
                    break;
                }
                while ((ret = ppr_receive_frame(s2, &sf)) == PPR_RECV_FRAME) {
                    ppr_planes out = sf.layout;
                    if (alloc_planes(&out, got & 1 ? 16 : 0) < 0)
                        return 1;
                    ret = ppr_download_frame(s2, &out);
                    CHECK(ret == 0, "download: %s", ppr_strerror(ret));
                    free_planes(&out);
                    got++;
                }
                CHECK(ret >= 0, "receive: %s", ppr_strerror(ret));
            }
            if (round == 0 && !eof) {
                ret = ppr_send_packet(s2, NULL, 0, tag, 0);
                while ((ret = ppr_receive_frame(s2, &sf)) == PPR_RECV_FRAME) {
                    ppr_planes out = sf.layout;
                    if (alloc_planes(&out, 0) < 0)
                        return 1;
                    CHECK(ppr_download_frame(s2, &out) == 0, "download");
                    free_planes(&out);
                    got++;
                }
                CHECK(ret == PPR_RECV_EOF, "drain: %d", ret);
            }
            if (round == 0)
                CHECK(got == packets, "streamed %d frames of %d packets", got, packets);
            ppr_stream_reset(s2);
        }
    }
    printf("packets: %d, failures: %d, validation messages: %d\n", packets, failures,
           ppr_validation_messages(s));
    ppr_close(s);
    s = NULL;   /* CHECK reports ppr_last_error(s) */
    CHECK(!strcmp(ppr_backend(s2), "vulkan") ? ppr_device_sessions(s2) == 1 : 1,
          "device sessions after close: %d", ppr_device_sessions(s2));
    ppr_close(s2);
    free(data);
    return failures ? 1 : 0;
}
