/* The state of a session (ppr_session) and of the Vulkan devices sessions
 * share, and the helpers the files implementing the session API give each
 * other. Not installed, not API.
 *
 * Each file calls only the files listed before it (internal.h's errors below
 * all of them):
 *   log.c       the library lock, the registry of live sessions and devices,
 *               FFmpeg's log lines attributed to their session; call entry/exit
 *   damage.c    which slices of a frame failed: the software decoder's
 *               unwritten samples, the list ppr_concealed_slices() reads
 *   device.c    Vulkan devices shared by the sessions
 *   ownpool.c   the decoder's frames from a pool of the session's own
 *   session.c   ppr_open/ppr_close, the session's libavcodec decoder
 *   download.c  received frames into the caller's planes, host and CUDA buffers
 *   decode.c    one packet -> one frame (ppr_decode)
 *   slices.c    frames rebuilt slice by slice (ppr_frame_begin ... ppr_frame_end)
 *   stream.c    packets and frames in flight (ppr_send_packet, ppr_receive_frame)
 */
#ifndef PYPRORES_SESSION_H
#define PYPRORES_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include <libavcodec/avcodec.h>
#include <libavutil/buffer.h>
#include <libavutil/dict.h>
#include <libavutil/frame.h>
#include <libavutil/pixfmt.h>

#include "internal.h"

enum { BACKEND_SOFTWARE = 0, BACKEND_VULKAN = 1 };

typedef struct submitted_slice {
    uint8_t *data;
    size_t size;
    int submitted;
} submitted_slice;

/* A Vulkan device shared by the sessions that asked for the same device with
 * the same validation setting. Creating a VkDevice costs about a second on
 * some drivers, and NVIDIA's driver 580 crashes in vkCreateDevice when one
 * process holds more than four of FFmpeg's devices; FFmpeg's Vulkan device
 * context is safe to share between decoders (its queues are locked). */
typedef struct shared_device {
    char key[PPR_MSG_SIZE];         /* validation flag and device string */
    AVBufferRef *ref;               /* the cache's own reference */
    int users;                      /* sessions holding it */
    int holds;                      /* host buffers and CUDA sides holding it */
    int validation_dropped;         /* created without the layer that was asked for */
    char note[PPR_MSG_SIZE];        /* why, for ppr_session_note(); "" when nothing to say */
    struct shared_device *next;
} shared_device;

struct ppr_session {
    int backend;
    int threads;
    AVBufferRef *hw_device;
    shared_device *dev;             /* vulkan: the cache entry of hw_device */
    int device_ready;               /* device creation finished */
    AVCodecContext *avctx;
    int need_reopen;                /* e.g. after a failed get_format */
    uint32_t cur_tag;
    int cur_width, cur_height;
    enum AVPixelFormat cur_fmt;
    AVPacket *pkt;
    AVFrame *frame;
    AVFrame *swframe;
    char device_name[256];
    char err[PPR_MSG_SIZE];

    /* written by the log callback, under the library lock */
    char av_last[PPR_MSG_SIZE];     /* last error-level line from FFmpeg */
    int av_last_open;               /* its last fragment had no newline */
    int validation;
    int validation_no_practices;    /* "practices" chosen for PYPRORES_VALIDATION=1: drop them */
    int validation_count;           /* all messages seen */
    int validation_kept;            /* messages stored (at most PPR_VALIDATION_KEEP) */
    char **validation_msgs;
    char *validation_ignore;        /* ';'-separated substrings from the environment */

    /* slices concealed by the current decode, as (picture, slice) pairs;
     * Vulkan: appended by the log callback; under the library lock */
    int *concealed;
    int nb_concealed, concealed_alloc;

    /* get_format bookkeeping */
    int vulkan_offered;
    int format_failed;              /* 0, PPR_ENOHWACCEL */

    /* slice submission */
    int in_frame;
    uint8_t *frame_pkt;
    size_t frame_pkt_size;
    ppr_frame_info frame_info;
    submitted_slice *subs[2];

    /* streaming: ppr_send_packet/ppr_receive_frame */
    int stream;                     /* avctx was opened for streaming */
    int stream_threads;             /* vulkan frame threads */
    unsigned stream_flags;          /* PPR_STREAM_* */
    int st_in_flight;               /* packets accepted, frames not received */
    int st_draining;                /* NULL packet sent */
    int st_eof;                     /* the decoder returned AVERROR_EOF */
    int st_have;                    /* s->frame holds a received frame */
    enum AVPixelFormat st_fmt;      /* its (downloaded) format */
    ppr_planes st_layout;           /* its planes */

    struct ppr_session *next;       /* registry of live sessions */
};

/* ---- log.c ---- */

/* The library lock: guards the registries below and what the log callback
 * writes into sessions and devices (the fields marked so above, users/holds). */
void ppr__lock(void);
void ppr__unlock(void);

/* Live sessions (so that a log line reaches only a session that still
 * exists). ppr__session_remove also frees what the log callback kept for s. */
void ppr__session_add(ppr_session *s);
void ppr__session_remove(ppr_session *s);

/* Live shared devices; lock held. */
shared_device *ppr__device_find(const char *key);
void ppr__device_add(shared_device *d);
void ppr__device_remove(shared_device *d);

/* Start of a session call: its log lines go to s, the messages are cleared.
 * ppr__leave ends it and returns ret. */
void ppr__enter(ppr_session *s);
int ppr__leave(int ret);

/* The session of the call in progress on this thread (closing, resetting),
 * without clearing any message; installs the log callback if needed. */
void ppr__set_current(ppr_session *s);

/* ppr__fail that also keeps the message on s (s may be NULL). */
int ppr__sfail(ppr_session *s, int code, const char *fmt, ...) PPR_PRINTF(3, 4);

/* Copy of the last FFmpeg error line seen for s (or this thread). */
void ppr__last_av_error(ppr_session *s, char *dst, size_t size);

/* The concealed slice (picture, slice) for s; lock held. */
void ppr__add_concealed(ppr_session *s, int picture, int slice);

/* ---- damage.c ---- */

/* get_buffer2 of software decoders: frames prefilled with a value no sample
 * takes, so that find_software_concealed sees the slices left unwritten. */
int ppr__prefill_get_buffer(AVCodecContext *avctx, AVFrame *frame, int flags);

/* The slices of a damaged software frame f (decoded from data) that
 * proresdec.c did not write, added to s's concealed list. */
void ppr__find_software_concealed(ppr_session *s, const uint8_t *data, size_t size,
                                  uint32_t tag, const AVFrame *f);

/* Empty s's concealed list; how many it holds. */
void ppr__concealed_reset(ppr_session *s);
int ppr__concealed_count(ppr_session *s);

/* The received frame's damage report (want), as a download gives it in out. */
void ppr__copy_damage(ppr_planes *out, const ppr_planes *want);

/* ---- device.c ---- */

/* The validation mode PYPRORES_VALIDATION asks for (FFmpeg's device option
 * debug), or NULL. */
const char *ppr__env_validation(int *no_practices);

/* Give s a reference to the shared device for key, creating it when no
 * session holds one; s->device_name names it. 0 or a negative AVERROR. */
int ppr__device_acquire(ppr_session *s, const char *key, const char *device,
                        AVDictionary *opts);

/* A session lets go of its device. */
void ppr__device_release(shared_device *d);

/* A host buffer or a CUDA side holds s's device (so that sessions opened
 * meanwhile share it); ppr__device_unhold (a release callback, opaque: the
 * shared_device) lets go. */
void ppr__device_hold(ppr_session *s);
void ppr__device_unhold(void *opaque);

/* FFmpeg 9: let s's device finish its work before its decoder is freed. */
void ppr__vulkan_idle_before_free(ppr_session *s);

/* ---- ownpool.c ---- */

/* In get_format: give avctx (streaming, the vulkan hwaccel chosen) a frames
 * context whose frames come from a pool of the session's own: linear images
 * in device-local memory, exportable (PPR_STREAM_OWN_POOL). 0, or a negative
 * AVERROR (logged). */
int ppr__own_pool_frames(AVCodecContext *avctx);

/* ---- session.c ---- */

/* (Re)open s's decoder for frames of tag, info's size, format fmt; streaming
 * when s->stream. 0 or a PPR_ error with the message on s. */
int ppr__open_decoder(ppr_session *s, uint32_t tag, const ppr_frame_info *info,
                      enum AVPixelFormat fmt);

/* A failed avcodec_send_packet/avcodec_receive_frame (ret) as a PPR_ error,
 * with FFmpeg's last line in the message on s. */
int ppr__decode_error(ppr_session *s, int ret);

/* Every free of the session's decoder goes through here. */
void ppr__free_decoder(ppr_session *s);

/* Free the slice submission state (ppr_frame_begin's). */
void ppr__end_frame_state(ppr_session *s);

/* ---- download.c ---- */

/* Point dst's planes at the caller's memory, one buffer reference per plane. */
int ppr__wrap_caller_planes(AVFrame *dst, const ppr_planes *out);

/* ---- decode.c ---- */

/* ppr_inspect(), keeping the message on the session. */
int ppr__session_inspect(ppr_session *s, const uint8_t *pkt, size_t size, uint32_t tag,
                         ppr_frame_info *info);

/* Decode size bytes at data as one frame described by info (only its
 * frame-header fields are used) into out. */
int ppr__decode_packet(ppr_session *s, const uint8_t *data, size_t size, uint32_t tag,
                       const ppr_frame_info *info, ppr_planes *out);

#endif
