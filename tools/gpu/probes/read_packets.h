/*
 * read_packets(): open a file, find its video stream and read every packet of
 * it into memory, so that what is timed afterwards does not include
 * demuxing. Shared by tools/gpu/probes/decbench.c and tools/gpu/probes/startprobe.c, which are
 * built one file each.
 */
#ifndef PYPRORES_READ_PACKETS_H
#define PYPRORES_READ_PACKETS_H

#include <stdio.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>

/* Returns the number of packets (at least 1), with *pkts an av_malloc'ed array
 * of them, *fmt the open input, *stream the video stream's index and *codec its
 * decoder; or -1 after saying why on stderr. */
static int read_packets(const char *path, AVFormatContext **fmt, int *stream,
                        const AVCodec **codec, AVPacket ***pkts)
{
    AVPacket *pkt;
    int nb_pkts = 0, ret;

    if ((ret = avformat_open_input(fmt, path, NULL, NULL)) < 0 ||
        (ret = avformat_find_stream_info(*fmt, NULL)) < 0 ||
        (ret = av_find_best_stream(*fmt, AVMEDIA_TYPE_VIDEO, -1, -1, codec, 0)) < 0) {
        fprintf(stderr, "%s: %s\n", path, av_err2str(ret));
        return -1;
    }
    *stream = ret;

    *pkts = NULL;
    pkt = av_packet_alloc();
    while (pkt && av_read_frame(*fmt, pkt) >= 0) {
        if (pkt->stream_index == *stream) {
            AVPacket **tmp = av_realloc_array(*pkts, nb_pkts + 1, sizeof(**pkts));
            if (!tmp) {
                fprintf(stderr, "out of memory reading %s\n", path);
                return -1;
            }
            *pkts = tmp;
            /* a NULL here would later be sent as the end of the stream */
            if (!((*pkts)[nb_pkts++] = av_packet_clone(pkt))) {
                fprintf(stderr, "out of memory reading %s\n", path);
                return -1;
            }
        }
        av_packet_unref(pkt);
    }
    av_packet_free(&pkt);
    if (!nb_pkts) {
        fprintf(stderr, "%s: no video packets\n", path);
        return -1;
    }
    return nb_pkts;
}

#endif
