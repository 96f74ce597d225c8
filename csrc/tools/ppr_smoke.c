/*
 * ppr_smoke: drive the whole C API once (for valgrind / ASan runs, see
 * tools/gpu/memcheck-native). Reads concatenated ProRes packets (each starts
 * with its 32-bit big-endian size, as ProRes frames do, e.g. the output of
 * `ffmpeg ... -c:v prores_ks -f rawvideo out.prores`) and, per packet:
 * inspect, layout, decode, rebuild from all slices, rebuild with one slice
 * garbled, rebuild with one slice left out; then error paths. Then it streams
 * the packets: sent as they are, and sent prepared (ppr_packet_new,
 * ppr_send_prepared) with the frames taken out of the session
 * (ppr_take_frame) and downloaded later, into unpadded planes (on vulkan
 * straight into them, one buffer reference per plane), padded planes and
 * planes with one left out, each compared with the packet's ppr_decode by a
 * software session; one taken frame is downloaded after both sessions are
 * closed. On vulkan, the frames again into two host buffers the GPU copies
 * into (ppr_download_start, ppr_host_buffer_wait), one copy pending while
 * the next frame is received, the last one waited for after both sessions
 * are closed. Error paths of those calls; then close.
 *
 * The pump (ppr_pump): packets pushed, or read by a reader, into a pump with
 * the host sink (vulkan) or none, frames against the software decodes; freed
 * early; a refused packet's error; error paths.
 *
 * The CUDA calls (ppr_cuda_open and its error paths; a buffer where there is
 * a CUDA driver). With MOV, the same packets in a container: read by a reader (ppr_reader),
 * against the raw ones, one decoded from it; the reader's error paths.
 *
 * Usage: ppr_smoke FILE FOURCC [software|vulkan [nohwcheck|full [MOV]]]
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

/* planes with data == NULL in either are skipped */
static int same_planes(const ppr_planes *a, const ppr_planes *b)
{
    if (a->count != b->count)
        return 0;
    for (int i = 0; i < a->count; i++) {
        if (!a->plane[i].data || !b->plane[i].data)
            continue;
        for (int y = 0; y < a->plane[i].height; y++)
            if (memcmp((uint8_t *)a->plane[i].data + y * a->plane[i].stride,
                       (uint8_t *)b->plane[i].data + y * b->plane[i].stride,
                       (size_t)a->plane[i].width * 2))
                return 0;
    }
    return 1;
}

static int same_layout(const ppr_planes *a, const ppr_planes *b)
{
    if (a->count != b->count)
        return 0;
    for (int i = 0; i < a->count; i++)
        if (a->plane[i].width != b->plane[i].width || a->plane[i].height != b->plane[i].height)
            return 0;
    return 1;
}

#define MAX_PACKETS 64

/* The size of the packet at pos (its first 4 bytes, big-endian, as ProRes
 * frames start), or 0 when fewer than 8 bytes are left, or the size is below 8
 * or runs past the end of the data. */
static long packet_at(const uint8_t *data, long size, long pos)
{
    long psize;
    if (pos < 0 || pos + 8 > size)
        return 0;
    psize = (long)((uint32_t)data[pos] << 24 | data[pos + 1] << 16 | data[pos + 2] << 8 | data[pos + 3]);
    return psize >= 8 && pos + psize <= size ? psize : 0;
}

/* A frame taken out of the session in prepared_and_taken(), downloaded after
 * ppr_close (its handle keeps the frames context and device alive), and the
 * software decode it must equal. */
static ppr_frame *late_frame;
static ppr_planes late_want;

/* Stream `data`'s packets through `s` as prepared packets, taking every frame
 * out of the session and downloading it later, and check each against `ref`'s
 * ppr_decode (a software session). Then error paths: packets that are not
 * sent or not ProRes, frames taken twice or never received, downloads into
 * planes of the wrong size, frames freed without a download, a reset with
 * frames in flight. Returns the number of failures. */
static int prepared_and_taken(ppr_session *s, ppr_session *ref, const uint8_t *data, long size,
                              uint32_t tag)
{
    static ppr_planes want[MAX_PACKETS];
    ppr_packet *pk[MAX_PACKETS] = { NULL };
    ppr_frame *taken[MAX_PACKETS] = { NULL };
    int64_t taken_pts[MAX_PACKETS];
    long off[MAX_PACKETS], len[MAX_PACKETS], pos;
    int failures = 0, ret, n = 0, ntaken = 0, next = 0, eof = 0, spins = 0, live0;
    ppr_stream_frame sf;
    ppr_planes none = { 0 };

    for (pos = 0; pos + 8 <= size && n < MAX_PACKETS; n++) {
        long psize = packet_at(data, size, pos);
        if (!psize)
            break;
        off[n] = pos;
        len[n] = psize;
        pos += psize;
    }
    live0 = ppr_frames_live();

    /* the reference: each packet decoded whole by a software session */
    for (int i = 0; i < n; i++) {
        ppr_frame_info info;
        memset(&want[i], 0, sizeof(want[i]));
        ret = ppr_inspect(data + off[i], (size_t)len[i], tag, &info);
        CHECK(ret == 0, "reference inspect: %s", ppr_strerror(ret));
        if (ret < 0)
            continue;
        ppr_frame_layout(&info, &want[i]);
        ppr_frame_info_free(&info);
        if (alloc_planes(&want[i], 0) < 0)
            return failures + 1;
        ret = ppr_decode(ref, data + off[i], (size_t)len[i], tag, &want[i]);
        CHECK(ret == 0, "reference decode of packet %d: %s (%s)", i, ppr_strerror(ret),
              ppr_last_error(ref));
    }

    /* error paths before any frame */
    CHECK(ppr_packet_new(NULL, 16, 0) == NULL, "ppr_packet_new(NULL, 16) succeeded");
    CHECK(ppr_packet_size(NULL) == 0, "ppr_packet_size(NULL)");
    ppr_packet_free(NULL);
    ppr_frame_free(NULL);
    CHECK(ppr_take_frame(NULL) == NULL, "ppr_take_frame(NULL) succeeded");
    CHECK(ppr_take_frame(s) == NULL, "took a frame from a session that received none");
    CHECK(ppr_frame_download(NULL, &want[0]) == PPR_EINVAL, "ppr_frame_download(NULL)");
    CHECK(ppr_send_prepared(NULL, NULL, tag) == PPR_EINVAL, "ppr_send_prepared(NULL)");
    {
        ppr_packet *unsent = ppr_packet_new(data, (size_t)len[0], 99);
        CHECK(unsent && ppr_packet_size(unsent) == (size_t)len[0], "prepared packet size");
        ppr_packet_free(unsent);                            /* never sent */
    }
    ret = ppr_stream_config(s, 2, PPR_STREAM_ERR_DETECT);
    CHECK(ret == 0, "stream config (prepared): %s", ppr_strerror(ret));
    {
        ppr_packet *empty = ppr_packet_new(NULL, 0, 0);
        ppr_packet *junk = ppr_packet_new((const uint8_t *)"0123456789abcdefghijklmnopqrstuvwxyz",
                                          36, 0);
        CHECK(empty && ppr_packet_size(empty) == 0, "empty prepared packet");
        ret = ppr_send_prepared(s, empty, tag);
        CHECK(ret == PPR_ETRUNCATED, "empty prepared packet sent: %s", ppr_strerror(ret));
        ret = ppr_send_prepared(s, junk, tag);
        CHECK(ret == PPR_ENOTPRORES, "junk prepared packet sent: %s", ppr_strerror(ret));
        ppr_packet_free(empty);
        ppr_packet_free(junk);
    }

    /* every packet prepared ahead, each freed once sent; every frame taken */
    for (int i = 0; i < n; i++) {
        pk[i] = ppr_packet_new(data + off[i], (size_t)len[i], i);
        CHECK(pk[i], "ppr_packet_new: %s", ppr_last_error(NULL));
        if (!pk[i])
            n = i;
    }
    while (spins++ < 10 * MAX_PACKETS + 10) {
        if (next < n) {
            ret = ppr_send_prepared(s, pk[next], tag);
            if (ret == 0) {
                ppr_packet_free(pk[next]);       /* the decoder holds its own reference */
                pk[next++] = NULL;
            } else if (ret != PPR_EAGAIN) {
                CHECK(0, "send prepared %d: %s", next, ppr_strerror(ret));
                break;
            }
        } else if (!eof) {
            ret = ppr_send_prepared(s, NULL, tag);
            CHECK(ret == 0, "send prepared end of stream: %s", ppr_strerror(ret));
            eof = 1;
        }
        while ((ret = ppr_receive_frame(s, &sf)) == PPR_RECV_FRAME) {
            ppr_frame *f = ppr_take_frame(s);
            CHECK(f, "take frame: %s", ppr_last_error(s));
            CHECK(sf.pts >= 0 && sf.pts < n && same_layout(&sf.layout, &want[sf.pts]),
                  "received frame pts %lld, layout differs", (long long)sf.pts);
            CHECK(ppr_take_frame(s) == NULL, "a frame taken twice");
            CHECK(ppr_download_frame(s, &none) == PPR_EINVAL, "downloaded a taken frame");
            if (f && ntaken < MAX_PACKETS) {
                taken[ntaken] = f;
                taken_pts[ntaken++] = sf.pts;
            } else {
                ppr_frame_free(f);
            }
        }
        if (ret == PPR_RECV_EOF)
            break;
        CHECK(ret == PPR_RECV_AGAIN, "receive (prepared): %s", ppr_strerror(ret));
        if (ret < 0)
            break;
    }
    CHECK(ntaken == n && next == n, "prepared: sent %d, took %d frames of %d packets",
          next, ntaken, n);
    CHECK(ppr_frames_live() == live0 + ntaken, "frames live: %d, want %d", ppr_frames_live(),
          live0 + ntaken);

    /* download them last first: unpadded (on vulkan straight into the planes),
     * padded, unpadded with a plane left out; the first frame after close */
    for (int i = ntaken - 1; i >= 0; i--) {
        ppr_planes out;
        int64_t p = taken_pts[i];
        if (p < 0 || p >= n)
            continue;
        if (i == 0 && !late_frame) {
            late_frame = taken[0];
            late_want = want[p];
            memset(&want[p], 0, sizeof(want[p]));      /* freed after the late download */
            continue;
        }
        out = want[p];
        if (alloc_planes(&out, i % 3 == 1 ? 48 : 0) < 0)
            return failures + 1;
        if (i % 3 == 2) {
            free(out.plane[1].data);
            out.plane[1].data = NULL;
        }
        ret = ppr_frame_download(taken[i], &out);
        CHECK(ret == 0 && same_planes(&want[p], &out), "taken frame %lld (%s): %s %s",
              (long long)p, i % 3 == 1 ? "padded" : i % 3 == 2 ? "plane 1 skipped" : "unpadded",
              ppr_strerror(ret), ret ? ppr_last_error(NULL) : "differs from the reference");
        CHECK(out.corrupt == 0, "taken frame %lld flagged corrupt", (long long)p);
        ret = ppr_frame_download(taken[i], &out);
        CHECK(ret == PPR_EINVAL, "a taken frame downloaded twice: %s", ppr_strerror(ret));
        free_planes(&out);
        ppr_frame_free(taken[i]);
    }
    ppr_stream_reset(s);

    /* wrong planes, a frame freed undownloaded, a reset with frames in flight
     * and the sent packets still the caller's */
    ret = ppr_stream_config(s, 2, 0);
    CHECK(ret == 0, "stream config (errors): %s", ppr_strerror(ret));
    ntaken = 0;
    for (int i = 0; i < n; i++)
        pk[i] = ppr_packet_new(data + off[i], (size_t)len[i], 100 + i);
    for (next = 0, eof = 0, spins = 0; ntaken < 3 && spins++ < 10 * MAX_PACKETS; ) {
        if (next < n) {
            ret = ppr_send_prepared(s, pk[next], tag);
            CHECK(ret == 0 || ret == PPR_EAGAIN, "send prepared (errors): %s", ppr_strerror(ret));
            if (ret == 0)
                next++;
            else if (ret != PPR_EAGAIN)
                break;
        } else if (!eof) {
            ppr_send_prepared(s, NULL, tag);
            eof = 1;
        }
        ret = ppr_receive_frame(s, &sf);
        if (ret == PPR_RECV_EOF)
            break;
        CHECK(ret >= 0, "receive (errors): %s", ppr_strerror(ret));
        if (ret != PPR_RECV_FRAME)
            continue;
        if (ntaken == 0) {
            /* planes of the wrong size: refused, and the frame released */
            ppr_frame *f = ppr_take_frame(s);
            ppr_planes out = sf.layout;
            CHECK(f, "take frame (errors): %s", ppr_last_error(s));
            out.plane[0].height++;
            if (alloc_planes(&out, 0) < 0)
                return failures + 1;
            ret = ppr_frame_download(f, &out);
            CHECK(ret == PPR_EINVAL && ppr_last_error(NULL)[0],
                  "download into a plane of the wrong size: %s", ppr_strerror(ret));
            out.plane[0].height--;
            ret = ppr_frame_download(f, &out);
            CHECK(ret == PPR_EINVAL, "download after a failed download: %s", ppr_strerror(ret));
            free_planes(&out);
            ppr_frame_free(f);
        } else if (ntaken == 1) {
            ppr_frame_free(ppr_take_frame(s));      /* never downloaded */
        } else {
            ppr_planes out = sf.layout;
            out.count--;
            ret = ppr_download_frame(s, &out);
            CHECK(ret == PPR_EINVAL, "download into too few planes: %s", ppr_strerror(ret));
            CHECK(ppr_take_frame(s) == NULL, "took a frame after its download");
        }
        ntaken++;
    }
    CHECK(ntaken == (n < 3 ? n : 3), "errors: took %d frames", ntaken);
    ppr_stream_reset(s);                                /* frames maybe in flight */
    CHECK(ppr_take_frame(s) == NULL, "took a frame after a reset");
    for (int i = 0; i < n; i++)
        ppr_packet_free(pk[i]);
    CHECK(ppr_frames_live() == live0 + (late_frame ? 1 : 0), "frames live after the checks: %d",
          ppr_frames_live());
    for (int i = 0; i < n; i++)
        free_planes(&want[i]);
    return failures;
}

/* A host buffer whose last copy is waited for after ppr_close, and what it
 * must hold then. */
static ppr_host_buffer *late_hb;
static ppr_planes late_hb_planes, late_hb_want;

/* Planes for layout `want` laid out in host buffer b (offsets a multiple of
 * `align`, plus `skew` bytes for the error path). */
static void host_planes(ppr_planes *out, const ppr_planes *want, ppr_host_buffer *b,
                        size_t align, size_t skew)
{
    uint8_t *p = ppr_host_buffer_data(b);
    size_t off = skew;
    *out = *want;
    for (int i = 0; i < out->count; i++) {
        out->plane[i].data = (uint16_t *)(p + off);
        out->plane[i].stride = (ptrdiff_t)out->plane[i].width * 2;
        off += (((size_t)out->plane[i].stride * out->plane[i].height) + align - 1) / align * align;
    }
}

static size_t host_size(const ppr_planes *want)
{
    size_t size = 0;
    for (int i = 0; i < want->count; i++)
        size += ((size_t)want->plane[i].width * 2 * want->plane[i].height + 255) / 256 * 256;
    return size;
}

/* Stream the packets through vulkan session s, each frame copied by the GPU
 * into one of two host buffers while the next one is received, each checked
 * against `ref`'s ppr_decode once waited for; error paths. */
static int host_buffers(ppr_session *s, ppr_session *ref, const uint8_t *data, long size,
                        uint32_t tag)
{
    ppr_host_buffer *hb[2] = { NULL, NULL };
    ppr_planes want[2], out[2], bad;
    int failures = 0, ret, sent = 0, got = 0, eof = 0, busy[2] = { 0, 0 }, live0;
    long pos = 0;
    ppr_stream_frame sf;

    live0 = ppr_host_buffers_live();
    CHECK(ppr_host_buffer_new(NULL, 64) == NULL, "host buffer without a session");
    CHECK(ppr_host_buffer_new(ref, 64) == NULL, "host buffer on a software session");
    CHECK(ppr_host_buffer_new(s, 0) == NULL, "empty host buffer");
    CHECK(ppr_host_buffer_wait(NULL) == PPR_EINVAL, "ppr_host_buffer_wait(NULL)");
    CHECK(ppr_host_buffer_data(NULL) == NULL && ppr_host_buffer_size(NULL) == 0, "NULL buffer");
    ppr_host_buffer_free(NULL);
    ret = ppr_stream_config(s, 2, 0);
    CHECK(ret == 0, "stream config (host buffers): %s", ppr_strerror(ret));
    while (!eof) {
        long psize = packet_at(data, size, pos);
        const uint8_t *pkt = psize ? data + pos : NULL;
        ret = ppr_send_packet(s, pkt, pkt ? (size_t)psize : 0, tag, sent);
        if (!pkt)
            eof = 1;
        else if (ret == 0) {
            pos += psize;
            sent++;
        } else if (ret != PPR_EAGAIN) {
            CHECK(0, "send (host buffers): %s", ppr_strerror(ret));
            break;
        }
        while ((ret = ppr_receive_frame(s, &sf)) == PPR_RECV_FRAME) {
            int k = got & 1;
            if (busy[k]) {              /* the frame before last: check it */
                ret = ppr_host_buffer_wait(hb[k]);
                CHECK(ret == 0 && same_planes(&want[k], &out[k]), "host buffer frame %d: %s %s",
                      got - 2, ppr_strerror(ret), ret ? ppr_last_error(NULL) : "differs");
                free_planes(&want[k]);
                busy[k] = 0;
            }
            if (!hb[k]) {
                hb[k] = ppr_host_buffer_new(s, host_size(&sf.layout));
                CHECK(hb[k], "ppr_host_buffer_new: %s", ppr_last_error(s));
                if (!hb[k])
                    return failures;
            }
            /* the reference: the packet decoded by the software session */
            want[k] = sf.layout;
            if (alloc_planes(&want[k], 0) < 0)
                return failures + 1;
            ret = -1;
            for (long q = 0, i = 0, qs; (qs = packet_at(data, size, q)); i++) {
                if (i == sf.pts) {
                    ret = ppr_decode(ref, data + q, (size_t)qs, tag, &want[k]);
                    break;
                }
                q += qs;
            }
            CHECK(ret == 0, "reference of frame %lld: %s", (long long)sf.pts, ppr_strerror(ret));
            host_planes(&bad, &sf.layout, hb[k], 4, 2);   /* 2 bytes off: refused */
            CHECK(ppr_download_start(s, hb[k], &bad) == PPR_EINVAL, "misaligned plane accepted");
            host_planes(&out[k], &sf.layout, hb[k], 256, 0);
            bad = out[k];
            bad.plane[0].height++;
            CHECK(ppr_download_start(s, hb[k], &bad) == PPR_EINVAL, "wrong plane size accepted");
            ret = ppr_download_start(s, hb[k], &out[k]);
            CHECK(ret == 0, "ppr_download_start: %s", ppr_strerror(ret));
            CHECK(ppr_download_start(s, hb[k], &out[k]) == PPR_EINVAL, "a frame copied twice");
            busy[k] = ret == 0;
            if (!busy[k])
                free_planes(&want[k]);
            got++;
        }
        CHECK(ret >= 0, "receive (host buffers): %s", ppr_strerror(ret));
    }
    CHECK(got == sent, "host buffers: %d frames of %d packets", got, sent);
    /* one buffer freed with its copy pending (the free waits for it); the
     * other waited for after the sessions are closed */
    for (int k = 0; k < 2; k++) {
        if (busy[k] && k == ((got - 1) & 1) && !late_hb) {
            late_hb = hb[k];
            late_hb_planes = out[k];
            late_hb_want = want[k];
            continue;
        }
        ppr_host_buffer_free(hb[k]);
        if (busy[k])
            free_planes(&want[k]);
    }
    ppr_stream_reset(s);
    CHECK(ppr_host_buffers_live() == live0 + (late_hb ? 1 : 0), "host buffers live: %d",
          ppr_host_buffers_live());
    return failures;
}

/* The file's packets through a reader (ppr_reader): the same bytes as the raw
 * packets, in order, then the end; decoded on `s` from the reader's packets
 * and equal to `ref`'s decodes of the raw ones (the planes of the first
 * frame); error paths: a missing file, a file no demuxer reads, a reader
 * closed before its open or with packets read ahead. */
static int reader_checks(ppr_session *s, ppr_session *ref, const char *mov, const char *raw,
                         const uint8_t *data, long size, uint32_t tag)
{
    ppr_reader *r = NULL;
    ppr_file_info fi;
    ppr_packet *p;
    long pos = 0;
    int failures = 0, ret, n = 0, live0 = ppr_readers_live();

    ret = ppr_reader_open(&r, mov, 1);
    CHECK(ret == 0, "reader open: %s", ppr_strerror(ret));
    if (ret < 0)
        return failures;
    ret = ppr_reader_info(r, &fi);
    CHECK(ret == 0 && fi.codec_tag == tag && fi.width > 0 && fi.pix_fmt[0],
          "reader info: %s (%s)", ppr_strerror(ret), ppr_last_error(NULL));
    while ((ret = ppr_reader_next(r, &p)) == 1) {
        long psize = packet_at(data, size, pos);
        CHECK(psize && ppr_packet_size(p) == (size_t)psize &&
              !memcmp(ppr_packet_data(p), data + pos, (size_t)psize),
              "reader packet %d differs from the raw one", n);
        if (n == 0 && ref) {
            /* decoded from the reader's packet on s, against ref's decode of the raw one */
            ppr_frame_info info;
            ppr_planes a, b;
            ppr_stream_frame sf;
            if (ppr_inspect(data, (size_t)psize, tag, &info) == 0) {
                ppr_frame_layout(&info, &a);
                ppr_frame_layout(&info, &b);
                if (alloc_planes(&a, 0) < 0 || alloc_planes(&b, 0) < 0)
                    return failures + 1;
                ret = ppr_decode(ref, data, (size_t)psize, tag, &a);
                CHECK(ret == 0, "reference decode: %s", ppr_strerror(ret));
                ret = ppr_stream_config(s, 1, 0);
                if (ret == 0)
                    ret = ppr_send_prepared(s, p, fi.codec_tag);
                if (ret == 0)
                    ret = ppr_send_prepared(s, NULL, fi.codec_tag);
                CHECK(ret == 0, "send the reader's packet: %s", ppr_strerror(ret));
                ret = ppr_receive_frame(s, &sf);
                CHECK(ret == PPR_RECV_FRAME, "receive the reader's frame: %d", ret);
                if (ret == PPR_RECV_FRAME) {
                    ret = ppr_download_frame(s, &b);
                    CHECK(ret == 0 && same_planes(&a, &b), "the reader's frame differs");
                }
                ppr_stream_reset(s);
                free_planes(&a);
                free_planes(&b);
                ppr_frame_info_free(&info);
            }
        }
        ppr_packet_free(p);
        pos += psize;
        n++;
    }
    CHECK(ret == 0 && pos == size, "reader: %s after %d packets (%ld of %ld bytes)",
          ppr_strerror(ret), n, pos, size);
    CHECK(ppr_reader_next(r, &p) == 0 && !p, "the reader's end did not stay");
    ppr_reader_close(r);

    /* closed with packets read ahead, and before its open */
    ret = ppr_reader_open(&r, mov, 2);
    CHECK(ret == 0 && ppr_reader_next(r, &p) == 1, "reader reopen: %s", ppr_strerror(ret));
    ppr_packet_free(p);
    ppr_reader_close(r);
    ret = ppr_reader_open(&r, mov, 3);
    ppr_reader_close(r);
    ppr_reader_close(NULL);

    /* errors */
    ret = ppr_reader_open(&r, "/nonexistent/clip.mov", 2);
    CHECK(ret == 0, "reader open of a missing file: %s", ppr_strerror(ret));
    ret = ppr_reader_info(r, &fi);
    CHECK(ret == PPR_ENOFILE, "missing file: %s", ppr_strerror(ret));
    CHECK(ppr_reader_next(r, &p) == PPR_ENOFILE && !p, "next of a missing file");
    ppr_reader_close(r);
    ret = ppr_reader_open(&r, raw, 2);
    ret = ret < 0 ? ret : ppr_reader_info(r, &fi);
    CHECK(ret == PPR_EFORMAT || ret == PPR_ENOTPRORES, "raw packets as a file: %s",
          ppr_strerror(ret));
    ppr_reader_close(r);
    CHECK(ppr_reader_open(&r, mov, 0) == PPR_EINVAL && !r, "depth 0 accepted");
    CHECK(ppr_reader_open(NULL, mov, 1) == PPR_EINVAL, "out NULL accepted");
    CHECK(ppr_reader_info(NULL, &fi) == PPR_EINVAL, "info of NULL");
    CHECK(ppr_reader_next(NULL, &p) == PPR_EINVAL, "next of NULL");
    CHECK(ppr_readers_live() == live0, "readers live: %d", ppr_readers_live());
    printf("reader: %d packets\n", n);
    return failures;
}

/* The pump (ppr_pump): on vulkan, the packets pushed into a pump with the host
 * sink, every frame against `ref`'s ppr_decode; from a reader (mov) too; one
 * freed with frames queued and packets waiting; the no-copy sink on either
 * backend; a refused packet's error after the frames before it; error paths. */
static int pump_checks(ppr_session *s, ppr_session *ref, const char *mov, const uint8_t *data,
                       long size, uint32_t tag)
{
    int failures = 0, ret, n, round, vulkan = !strcmp(ppr_backend(s), "vulkan");
    int sessions = ppr_device_sessions(s), live0 = ppr_host_buffers_live();

    for (round = 0; round < (vulkan ? 4 : 1); round++) {
        /* 0: no copy, pushed; 1: host, pushed; 2: host, reader; 3: host, freed early */
        int sink = round ? PPR_PUMP_HOST : PPR_PUMP_NONE;
        ppr_reader *r = NULL;
        ppr_pump *p = NULL;
        ppr_pump_frame f;
        long pos = 0;

        if (round == 2 && (!mov || ppr_reader_open(&r, mov, 2) < 0))
            continue;
        ret = ppr_stream_config(s, 2, PPR_STREAM_ERR_DETECT);
        ret = ret < 0 ? ret : ppr_pump_open(&p, s, NULL, sink, r, tag, 2);
        CHECK(ret == 0 && p, "pump open (round %d): %s", round, ppr_strerror(ret));
        if (ret < 0) {
            ppr_reader_close(r);
            continue;
        }
        if (!r) {
            /* pushed from here: the pump's input holds 2, so push and take in turn */
            n = 0;
            for (pos = 0; pos + 8 <= size && round != 3;) {
                long psize = packet_at(data, size, pos);
                ppr_packet *pkt = psize ? ppr_packet_new(data + pos, (size_t)psize, pos) : NULL;
                if (!pkt)
                    break;
                CHECK(ppr_pump_push(p, pkt) == 1, "push");
                pos += psize;
            }
            if (round == 3) {   /* two packets in, then freed with what is queued */
                ppr_pump_push(p, ppr_packet_new(data, (size_t)packet_at(data, size, 0), 0));
                ppr_pump_push(p, ppr_packet_new(data, (size_t)packet_at(data, size, 0), 0));
                ppr_pump_free(p);
                ppr_stream_reset(s);
                continue;
            }
            CHECK(ppr_pump_push(p, NULL) == 1, "push the end");
        }
        n = 0;
        pos = 0;
        while ((ret = ppr_pump_next(p, &f)) == 1) {
            long psize = packet_at(data, size, pos);
            CHECK(f.index == n && (sink == PPR_PUMP_NONE || f.host), "pump frame %d", n);
            if (f.host) {
                ppr_frame_info info;
                ppr_planes want;
                CHECK(ppr_host_buffer_wait(f.host) == 0, "pump host wait");
                if (psize && ppr_inspect(data + pos, (size_t)psize, tag, &info) == 0) {
                    ppr_frame_layout(&info, &want);
                    if (alloc_planes(&want, 0) == 0) {
                        ret = ppr_decode(ref, data + pos, (size_t)psize, tag, &want);
                        CHECK(ret == 0 && same_planes(&want, &f.planes), "pump frame %d differs", n);
                        free_planes(&want);
                    }
                    ppr_frame_info_free(&info);
                }
                ppr_host_buffer_free(f.host);
            }
            pos += psize;
            n++;
        }
        CHECK(ret == 0 && ppr_pump_next(p, &f) == 0, "pump end: %d %s", ret, ppr_pump_error(p));
        CHECK(pos == size, "pump: %d frames, %ld of %ld bytes", n, pos, size);
        if (round == 1) {
            ppr_pump_stats st;
            ppr_pump_stats_get(p, &st);
            CHECK(st.frames == (uint64_t)n && st.packets == (uint64_t)n, "pump stats: %llu %llu",
                  (unsigned long long)st.frames, (unsigned long long)st.packets);
        }
        CHECK(ppr_pump_push(p, NULL) == 0, "push after the end");
        ppr_pump_free(p);
        ppr_stream_reset(s);
        ppr_reader_close(r);
    }
    /* a packet the decoder refuses, after one it decodes: that frame, then the error */
    {
        ppr_pump *p = NULL;
        ppr_pump_frame f;
        static const uint8_t junk[64] = { 0, 0, 0, 64, 'n', 'o', 'p', 'e' };
        ret = ppr_stream_config(s, 1, PPR_STREAM_ERR_DETECT);
        ret = ret < 0 ? ret : ppr_pump_open(&p, s, NULL, PPR_PUMP_NONE, NULL, tag, 4);
        if (ret == 0) {
            /* the first packet copied by the pump, in pieces where it is large */
            size_t big = 2 << 20;
            uint8_t *copy = calloc(1, big);
            CHECK(ppr_pump_copiers(p, 3) == 3, "pump copiers");
            CHECK(ppr_pump_push_data(p, data, (size_t)packet_at(data, size, 0), 0) == 1,
                  "push data");
            if (copy) {     /* 2 MiB: split over the copiers, then refused as not ProRes */
                memcpy(copy, junk, sizeof(junk));
                CHECK(ppr_pump_push_data(p, copy, big, 1) == 1, "push 2 MiB");
                free(copy);
            }
            ppr_pump_push(p, ppr_packet_new(junk, sizeof(junk), 2));
            ppr_pump_push(p, NULL);
            n = 0;
            while ((ret = ppr_pump_next(p, &f)) == 1)
                n++;
            CHECK(n == 1 && ret < 0 && f.index == 1 && ppr_pump_error(p)[0] &&
                  ppr_pump_next(p, &f) == ret, "refused packet: %d frames, %d (%s)", n, ret,
                  ppr_pump_error(p));
            ppr_pump_free(p);
        }
        ppr_stream_reset(s);
    }
    CHECK(ppr_pump_open(NULL, s, NULL, 0, NULL, tag, 2) == PPR_EINVAL, "pump out NULL");
    {
        ppr_pump *p = NULL;
        CHECK(ppr_pump_open(&p, s, NULL, PPR_PUMP_CUDA, NULL, tag, 2) == PPR_EINVAL && !p,
              "pump CUDA sink without CUDA");
        CHECK(ppr_pump_open(&p, s, NULL, 0, NULL, tag, 65) == PPR_EINVAL && !p, "pump depth 65");
    }
    CHECK(ppr_pump_push(NULL, NULL) == 0 && ppr_pump_next(NULL, NULL) == PPR_EINVAL,
          "pump NULL calls");
    ppr_pump_free(NULL);
    ppr_pump_stop(NULL);
    CHECK(ppr_host_buffers_live() == live0, "host buffers live after the pump: %d",
          ppr_host_buffers_live());
    CHECK(ppr_device_sessions(s) == sessions, "device sessions after the pump: %d",
          ppr_device_sessions(s));
    printf("pump: %s\n", failures ? "failed" : "ok");
    return failures;
}

/* The CUDA calls: with a CUDA driver and a Vulkan session on its GPU, a buffer
 * is made and freed; without, ppr_cuda_open says why (PPR_ENODEVICE; a
 * software session: PPR_EINVAL) and gives the device hold back. Error paths. */
static int cuda_checks(ppr_session *s)
{
    ppr_cuda *c = NULL;
    ppr_cuda_buffer *b;
    int failures = 0, ret, vulkan = !strcmp(ppr_backend(s), "vulkan");
    int sessions = ppr_device_sessions(s);

    ret = ppr_cuda_open(s, &c);
    if (ret == 0) {
        b = ppr_cuda_buffer_new(c, 4096);
        CHECK(b && ppr_cuda_buffer_ptr(b) && ppr_cuda_buffer_refs(b) == 1 &&
              ppr_cuda_buffer_size(b) == 4096, "CUDA buffer: %s", ppr_last_error(NULL));
        /* CUDA's own copy: its stream made, nothing copied or fallen back yet */
        CHECK(ppr_cuda_set_copy(c, PPR_COPY_CUDA) == 0 && ppr_cuda_copies_cuda(c) == 0 &&
              !ppr_cuda_copy_fallback(c)[0], "PPR_COPY_CUDA: %s", ppr_last_error(NULL));
        CHECK(ppr_cuda_set_copy(c, 99) == PPR_EINVAL, "ppr_cuda_set_copy(99)");
        ppr_cuda_close(c);                  /* the buffer keeps it */
        ppr_cuda_buffer_free(b);
        printf("cuda: device %s\n", ppr_device_name(s));
    } else {
        CHECK(!c && (vulkan ? ret == PPR_ENODEVICE : ret == PPR_EINVAL) && ppr_last_error(s)[0],
              "ppr_cuda_open: %s", ppr_strerror(ret));
        printf("cuda: %s\n", ppr_last_error(s));
    }
    CHECK(ppr_device_sessions(s) == sessions, "device sessions after CUDA: %d", ppr_device_sessions(s));
    CHECK(ppr_cuda_buffers_live() == 0, "CUDA buffers live: %d", ppr_cuda_buffers_live());
    CHECK(ppr_cuda_open(NULL, &c) == PPR_EINVAL, "ppr_cuda_open(NULL)");
    CHECK(ppr_cuda_buffer_new(NULL, 16) == NULL, "ppr_cuda_buffer_new(NULL)");
    CHECK(ppr_cuda_dlpack(NULL, NULL, 0, 0) == NULL, "ppr_cuda_dlpack(NULL)");
    CHECK(ppr_cuda_download_start(s, NULL, NULL) == PPR_EINVAL, "ppr_cuda_download_start(NULL)");
    CHECK(ppr_cuda_set_copy(NULL, PPR_COPY_CUDA) == PPR_EINVAL, "ppr_cuda_set_copy(NULL)");
    CHECK(ppr_cuda_copies_cuda(NULL) == 0 && !ppr_cuda_copy_fallback(NULL)[0],
          "ppr_cuda_copies_cuda/copy_fallback(NULL)");
    ppr_dlpack_delete(NULL, 1);
    ppr_cuda_close(NULL);
    ppr_cuda_buffer_free(NULL);
    return failures;
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
        fprintf(stderr, "usage: %s FILE FOURCC [software|vulkan [nohwcheck|full [MOV]]]\n", argv[0]);
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
        long psize = packet_at(data, size, pos);
        const uint8_t *pkt = data + pos;
        ppr_frame_info info;
        ppr_planes whole, rebuilt;

        if (!psize) {
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
                long psize = packet_at(data, size, pos);
                const uint8_t *pkt = psize ? data + pos : NULL;
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
    /* prepared packets, taken frames: against software decodes */
    if (!flags) {
        ppr_session *ref = s;
        if (strcmp(ppr_backend(s), "software")) {
            ret = ppr_open(&ref, "software", NULL, 0);
            CHECK(ret == 0, "software reference session: %s", ppr_strerror(ret));
        }
        if (ref)
            failures += prepared_and_taken(s2, ref, data, size, tag);
        if (ref && ref != s)
            failures += host_buffers(s2, ref, data, size, tag);
        if (ref && argc > 5)
            failures += reader_checks(s2, ref, argv[5], argv[1], data, size, tag);
        if (ref)
            failures += pump_checks(s2, ref, argc > 5 ? argv[5] : NULL, data, size, tag);
        failures += cuda_checks(s2);
        if (ref != s)
            ppr_close(ref);
    }
    printf("packets: %d, failures: %d, validation messages: %d\n", packets, failures,
           ppr_validation_messages(s));
    ppr_close(s);
    s = NULL;   /* CHECK reports ppr_last_error(s) */
    CHECK(!strcmp(ppr_backend(s2), "vulkan") ? ppr_device_sessions(s2) == 1 : 1,
          "device sessions after close: %d", ppr_device_sessions(s2));
    ppr_close(s2);
    s = NULL;
    if (late_frame) {
        /* downloaded after its session (and, on vulkan, the device's last
         * session) closed */
        ppr_planes out = late_want;
        if (alloc_planes(&out, 0) < 0)
            return 1;
        ret = ppr_frame_download(late_frame, &out);
        CHECK(ret == 0 && same_planes(&late_want, &out), "frame downloaded after close: %s %s",
              ppr_strerror(ret), ret ? ppr_last_error(NULL) : "differs from the reference");
        free_planes(&out);
        ppr_frame_free(late_frame);
        free_planes(&late_want);
    }
    if (late_hb) {
        ret = ppr_host_buffer_wait(late_hb);
        CHECK(ret == 0 && same_planes(&late_hb_want, &late_hb_planes),
              "host buffer waited for after close: %s %s", ppr_strerror(ret),
              ret ? ppr_last_error(NULL) : "differs from the reference");
        ppr_host_buffer_free(late_hb);
        free_planes(&late_hb_want);
    }
    CHECK(ppr_frames_live() == 0, "frames live at exit: %d", ppr_frames_live());
    CHECK(ppr_host_buffers_live() == 0, "host buffers live at exit: %d", ppr_host_buffers_live());
    free(data);
    return failures ? 1 : 0;
}
