/*
 * Link-time shim for FFmpeg's tools/target_dec_fuzzer.c built outside an
 * --enable-ossfuzz configuration (tools/gpu/fuzz-coverage, target_dec):
 *  - codec_list: the fuzzer stores its decoder there; only ossfuzz builds of
 *    allcodecs.c define it (a non-static list), so it is defined here.
 *  - ff_mjpeg_decoder: the fuzzer's "#if FFMPEG_DECODER == tiff" compares
 *    two undefined identifiers, which is true for every decoder, so it takes
 *    the address of the MJPEG decoder; the minimal build has none. Weak, so a
 *    build with MJPEG keeps its own.
 */
#include <stddef.h>

#include "libavcodec/codec_internal.h"

const FFCodec *codec_list[] = { NULL, NULL, NULL };

__attribute__((weak)) FFCodec ff_mjpeg_decoder;
