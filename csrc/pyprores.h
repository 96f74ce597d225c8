/*
 * pyprores.h - a small C library over FFmpeg 7.1 (libavcodec/libavutil) that
 * decodes Apple ProRes packets with FFmpeg's software decoder or with the
 * ProRes Vulkan hwaccel, into caller-owned 16-bit planes, and that reads a
 * packet's ProRes headers without decoding it.
 *
 * Conventions
 * -----------
 * - Every function that can fail returns int: 0 on success, or a negative
 *   PPR_E* code (rarely a raw negative AVERROR code, which ppr_strerror also
 *   explains). Nothing here aborts, and nothing prints to stderr unless the
 *   user asked for FFmpeg's log with ppr_set_log_level().
 * - ppr_last_error(session) gives a human-readable message for the last
 *   failure of a call on that session; ppr_last_error(NULL) gives the last
 *   failure of any ppr_ call on the calling thread (e.g. ppr_inspect()).
 * - A session may be used from one thread at a time. Different sessions may
 *   be used from different threads concurrently.
 * - All sample data is uint16: 10- or 12-bit values in the low bits, exactly
 *   as FFmpeg's yuv4xxp10le/yuv4xxp12le (and yuva...) formats store them.
 *
 * Typical use:
 *
 *     ppr_frame_info info;
 *     ppr_planes planes;
 *     ppr_inspect(pkt, size, MKTAG('a','p','c','h'), &info);  // headers only
 *     ppr_frame_layout(&info, &planes);                        // plane sizes
 *     for (i = 0; i < planes.count; i++) {                     // caller allocs
 *         planes.plane[i].data   = malloc(planes.plane[i].height *
 *                                         planes.plane[i].width * 2);
 *         planes.plane[i].stride = planes.plane[i].width * 2;
 *     }
 *     ppr_open(&s, "vulkan", NULL, 0);
 *     ppr_decode(s, pkt, size, tag, &planes);
 *     ppr_close(s);
 *     ppr_frame_info_free(&info);
 *
 * The declarations between the CFFI markers below are read verbatim by
 * csrc/build_ffi.py as the cffi cdef: keep that region free of preprocessor
 * directives and of anything pycparser cannot parse.
 */
#ifndef PYPRORES_H
#define PYPRORES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CFFI_BEGIN */

/* Error codes (all negative). Chosen far from -errno values and from
 * FFmpeg's FFERRTAG codes so that the two sets never collide. */
enum {
    PPR_OK         = 0,
    PPR_EINVAL     = -20001, /* bad argument (NULL pointer, plane too small, bad backend name, ...) */
    PPR_ENOTPRORES = -20002, /* the packet is not a ProRes frame (no 'icpf' signature) */
    PPR_ENODEVICE  = -20003, /* no usable Vulkan device (or the validation layer is missing) */
    PPR_ENOHWACCEL = -20004, /* this FFmpeg build has no ProRes Vulkan hwaccel, or it failed to start */
    PPR_ETRUNCATED = -20005, /* the packet ends before the headers/slices it declares */
    PPR_EDECODE    = -20006, /* invalid header field, or FFmpeg's decoder rejected the data */
    PPR_ENOMEM     = -20007, /* out of memory */
    PPR_EAGAIN     = -20008, /* streaming: receive frames first, then send the packet again */
    PPR_EFORMAT    = -20009, /* files: this build's demuxers cannot read the file */
    PPR_ENOFILE    = -20010  /* files: no such file */
};

/* Field of a coded picture (ppr_picture_info.field). */
enum {
    PPR_FIELD_FRAME  = 0,    /* progressive: the picture is the whole frame      */
    PPR_FIELD_TOP    = 1,    /* interlaced: even frame rows 0, 2, 4, ...         */
    PPR_FIELD_BOTTOM = 2     /* interlaced: odd frame rows 1, 3, 5, ...          */
};

typedef struct ppr_session ppr_session;

/* One slice as the picture's slice index describes it. */
typedef struct ppr_slice_info {
    int index;          /* slice number within its picture (0-based)            */
    int mb_x;           /* first macroblock column                              */
    int mb_y;           /* macroblock row (within the field for interlaced)     */
    int mb_count;       /* width in macroblocks: 1, 2, 4 or 8                   */
    size_t offset;      /* byte offset of the slice data in the packet          */
    size_t size;        /* byte size from the slice index                       */
    int qscale;         /* raw quantiser byte (slice header byte 1)             */
} ppr_slice_info;

/* One coded picture: the whole frame, or one field of an interlaced frame. */
typedef struct ppr_picture_info {
    int field;                  /* PPR_FIELD_*                                   */
    size_t offset;              /* byte offset of the picture header in the packet */
    size_t size;                /* picture data size from the picture header      */
    int header_size;            /* picture header size in bytes (buf[0] >> 3)    */
    int log2_slice_mb_width;
    int mb_width;
    int mb_height;              /* per picture: per field when interlaced        */
    int slice_count;            /* computed as proresdec.c does, not read        */
    ppr_slice_info *slices;     /* slice_count entries; owned, see ppr_frame_info_free */
} ppr_picture_info;

/* Frame header facts, read by ppr_inspect() without decoding any slice. */
typedef struct ppr_frame_info {
    int width;
    int height;
    int chroma_format;          /* 422 or 444                                    */
    int bit_depth;              /* 10 or 12: from the codec tag, as FFmpeg does  */
    char pix_fmt[32];           /* FFmpeg's name, e.g. "yuva444p12le"            */
    int alpha_info;             /* 0 none, 1 8-bit alpha, 2 16-bit alpha         */
    int interlace_mode;         /* 0 progressive, 1 TFF, 2 BFF (3: as 2)         */
    int frame_header_size;      /* from the frame header (bytes after 'icpf')    */
    uint32_t codec_tag;         /* the tag given to ppr_inspect                  */
    int picture_count;          /* 1, or 2 for an interlaced frame               */
    ppr_picture_info pictures[2];
} ppr_frame_info;

/* One output plane, owned by the caller. */
typedef struct ppr_plane {
    uint16_t *data;             /* caller's buffer; NULL = skip this plane       */
    ptrdiff_t stride;           /* bytes between rows, >= width * 2              */
    int width;                  /* samples per row (filled by ppr_frame_layout)  */
    int height;                 /* rows (filled by ppr_frame_layout)             */
} ppr_plane;

/* Output planes: Y, Cb, Cr and, when the frame has alpha, A. */
typedef struct ppr_planes {
    int count;                  /* 3 or 4                                        */
    ppr_plane plane[4];
    int corrupt;                /* set by decode: FFmpeg flagged the frame as
                                   damaged (decode_error_flags/AV_FRAME_FLAG_CORRUPT),
                                   e.g. a slice failed to decode                 */
    int error_flags;            /* set by decode: the frame's decode_error_flags
                                   (FF_DECODE_ERROR_*, 1 = invalid bitstream)     */
    int concealed;              /* set by decode: slices found concealed, listed
                                   by ppr_concealed_slices()                     */
} ppr_planes;

/* --- library --------------------------------------------------------------- */

/* Human-readable text for a PPR_E* code or an AVERROR code. Never NULL. */
const char *ppr_strerror(int code);

/* Message for the last failure on `session`, or with session == NULL, the
 * last failure of any call on this thread. "" when there was none. */
const char *ppr_last_error(ppr_session *session);

/* FFmpeg's log is captured (its last error line goes into error messages) and
 * never printed. Pass an AV_LOG_* level (e.g. 16 = error, 32 = info, 48 =
 * debug) to also print lines up to that level to stderr; -8 (quiet, the
 * default) prints nothing. Process-wide. */
void ppr_set_log_level(int level);

/* 1 when this FFmpeg build's ProRes decoder can use `backend` ("software"
 * always; "vulkan" when the build has a ProRes Vulkan hwaccel), else 0. */
int ppr_has_hwaccel(const char *backend);

/* Versions of the libavcodec/libavutil actually loaded (LIBAVCODEC_VERSION_INT
 * style) and FFmpeg's version string (e.g. "7.1.5"). */
unsigned ppr_avcodec_version(void);
const char *ppr_ffmpeg_version(void);

/* --- inspection ------------------------------------------------------------ */

/* Parse the frame header and picture headers of one ProRes packet exactly as
 * FFmpeg 7.1.5's proresdec.c does (same checks, same slice count and slice
 * layout), without decoding. `codec_tag` is the container's fourcc
 * (MKTAG('a','p','c','h') = 0x68637061 ...): 'ap4h'/'ap4x' mean 12-bit,
 * anything else 10-bit, as in FFmpeg. On success *out owns allocated slice
 * arrays: release them with ppr_frame_info_free(). On failure *out holds
 * nothing to free (freeing it is still harmless).
 * Errors: PPR_EINVAL, PPR_ENOTPRORES, PPR_ETRUNCATED, PPR_EDECODE, PPR_ENOMEM. */
int ppr_inspect(const uint8_t *pkt, size_t size, uint32_t codec_tag,
                ppr_frame_info *out);

/* Like ppr_inspect, but stop after the frame header: picture_count is 0 and
 * nothing is allocated. Enough for ppr_frame_layout(). Also refused, with
 * PPR_ETRUNCATED: a first picture whose slice index cannot fit the packet,
 * which FFmpeg's decoder refuses before it allocates a frame (so a header
 * claiming a huge frame in a small packet costs no memory anywhere). */
int ppr_inspect_header(const uint8_t *pkt, size_t size, uint32_t codec_tag,
                       ppr_frame_info *out);

/* Free what ppr_inspect allocated and zero *info. NULL-safe, idempotent. */
void ppr_frame_info_free(ppr_frame_info *info);

/* Fill out->count and each plane's width/height for frames described by
 * `info` (visible size; chroma width (w+1)/2 for 4:2:2), and set data = NULL,
 * stride = width * 2, corrupt = 0. The caller then points data/stride at its
 * own buffers. A Vulkan session downloads the frame straight into them when
 * every plane is given with stride == width * 2; otherwise it downloads into
 * a frame of its own and copies the rows (padding between rows is never
 * written). */
int ppr_frame_layout(const ppr_frame_info *info, ppr_planes *out);

/* --- sessions -------------------------------------------------------------- */

/* Open a decoding session.
 * backend: "software" (FFmpeg's C decoder, `threads` slice threads, 0 = auto)
 *          or "vulkan" (the ProRes Vulkan hwaccel; one decoder thread).
 * device:  vulkan only: NULL (FFmpeg's default device), an index ("0") or a
 *          substring of the device name; passed to av_hwdevice_ctx_create().
 * With the environment variable PYPRORES_VALIDATION=1 the Vulkan device is
 * created with the Khronos validation layer (core and synchronization
 * validation: FFmpeg's device option debug=practices, whose best-practices
 * messages are left out; PYPRORES_VALIDATION=validate, printf or practices
 * selects that mode as it is), and its messages are counted
 * (ppr_validation_messages); without the layer installed ppr_open fails with
 * PPR_ENODEVICE. A vulkan session
 * never falls back to software: when the build has no ProRes Vulkan hwaccel,
 * ppr_open fails with PPR_ENOHWACCEL (after the device was found, so the
 * message names it); when no device can be created, with PPR_ENODEVICE.
 * On failure *out is NULL and ppr_last_error(NULL) explains. */
int ppr_open(ppr_session **out, const char *backend, const char *device,
             int threads);

/* Flags of ppr_open_ex(). */
enum {
    /* vulkan: open the device even when this FFmpeg build has no ProRes
     * Vulkan hwaccel; every decode then fails with PPR_ENOHWACCEL (never a
     * software fallback). For diagnostics (device name, validation) and tests. */
    PPR_OPEN_NO_HWACCEL_CHECK = 1
};

/* ppr_open() with flags (PPR_OPEN_*). */
int ppr_open_ex(ppr_session **out, const char *backend, const char *device,
                int threads, unsigned flags);

/* Free everything the session holds. NULL-safe. */
void ppr_close(ppr_session *session);

/* "cpu" for the software backend; for vulkan, the physical device's name as
 * Vulkan reports it (e.g. "llvmpipe (LLVM 15.0.6, 256 bits)"). */
const char *ppr_device_name(ppr_session *session);

/* Vulkan sessions opened with the same device string and validation setting
 * share one Vulkan device (FFmpeg's AVHWDeviceContext), created by the first
 * and destroyed with the last: the number of open sessions on this session's
 * device, 0 for software. */
int ppr_device_sessions(ppr_session *session);

/* The session's backend: "software" or "vulkan". */
const char *ppr_backend(ppr_session *session);

/* Validation-layer messages (warnings and errors) seen on this session's
 * Vulkan device since ppr_open; 0 when validation is off or software.
 * Counted: lines that FFmpeg's Vulkan device context logs at warning level or
 * worse once the device exists (that is where hwcontext_vulkan routes the
 * Khronos layer's debug messenger), plus lines during device creation that
 * look like validation output ("VUID-", "Validation", "MessageID").
 * Not counted: the known noise of validation layers older than FFmpeg's
 * Vulkan headers (messages containing "-pNext-pNext" or "is not supported by
 * this layer"), and messages containing any of the ';'-separated substrings
 * in the environment variable PYPRORES_VALIDATION_IGNORE (read at ppr_open). */
int ppr_validation_messages(ppr_session *session);
/* 1 when the session runs with the validation layer. */
int ppr_validation_enabled(ppr_session *session);
/* Text of validation message i (0-based, the first 1000 are kept), or NULL
 * when i is out of range. Valid until ppr_close. */
const char *ppr_validation_message(ppr_session *session, int i);
/* Something the caller should know about how the session's device was set
 * up, "" when nothing: with FFmpeg 9, a device that uses
 * VK_EXT_host_image_copy for its transfers is created without the validation
 * layer asked for when the installed layer predates that extension (it
 * crashes there); validation is then off for the session. Valid until
 * ppr_close. */
const char *ppr_session_note(ppr_session *session);

/* --- decoding -------------------------------------------------------------- */

/* Decode one whole packet (one frame) and write it to the caller's planes,
 * whose count/width/height must match ppr_frame_layout() of the packet
 * (planes with data == NULL are skipped). One packet in, one frame out: the
 * decoder is drained as needed. The codec tag is set before avcodec_open2
 * (proresdec derives the bit depth from it); the decoder is reopened when
 * the tag, the size or the pixel format changes. out->corrupt is set when
 * FFmpeg flagged the frame as damaged (some slices failed but not all).
 * Errors: PPR_EINVAL, PPR_ENOTPRORES, PPR_ETRUNCATED, PPR_EDECODE (FFmpeg
 * produced no frame), PPR_ENOHWACCEL, PPR_ENOMEM. */
int ppr_decode(ppr_session *session, const uint8_t *pkt, size_t size,
               uint32_t codec_tag, ppr_planes *out);

/* Slice submission: rebuild a packet slice by slice.
 *
 * ppr_frame_begin() inspects `pkt` (copied; the caller may free it) and starts
 * an empty frame with its frame header and picture headers.
 * ppr_frame_submit_slice() sets the bytes of slice `slice_index` of picture
 * `picture` (0 or 1): the original slice bytes, a replacement, a corrupted
 * copy, any size up to 65535 bytes (the slice index stores 16-bit sizes).
 * The bytes are copied; submitting a slice again replaces it.
 * ppr_frame_end() builds a ProRes packet with the original frame header and
 * picture headers (picture sizes rewritten) and a slice index listing the
 * submitted slices' sizes, decodes it with the session's backend like
 * ppr_decode(), writes the planes, and ends the frame (also on failure).
 *
 * A slice never submitted gets a zero-size index entry. FFmpeg 7.1.5's
 * decoder treats that as a malformed picture (slices must be >= 6 bytes), so
 * on the software backend leaving any slice out makes the whole frame fail
 * with PPR_EDECODE. To isolate one slice, submit every slice and change only
 * the one under test. Slices of fewer than 6 bytes behave the same way. */
int ppr_frame_begin(ppr_session *session, const uint8_t *pkt, size_t size,
                    uint32_t codec_tag);
int ppr_frame_submit_slice(ppr_session *session, int picture, int slice_index,
                           const uint8_t *data, size_t size);
int ppr_frame_end(ppr_session *session, ppr_planes *out);

/* The slices that the last ppr_decode()/ppr_frame_end() of `session`
 * concealed (slices that failed to decode, or that lay outside their
 * picture): writes up to `max` of them, picture (0, or 1 for the second
 * field) and slice index, in decoding order, and returns how many there
 * were (out->concealed of that call). Software: slices whose first sample
 * of Y, Cb or Cr was not written (the frame is prefilled with 0xffff, which
 * no decoded sample takes, so a concealed slice keeps that value in the
 * caller's planes). Vulkan: the hwaccel's "concealed slice N of picture P"
 * log lines (7.1.5 series patch 19, 9.0.2 series patch 12, which report
 * failed slices when error detection is asked for: vulkan sessions decode
 * with err_detect bitstream; without the patch, none are listed). */
int ppr_concealed_slices(ppr_session *session, int *pictures, int *slices, int max);

/* The frame info of the frame begun with ppr_frame_begin (NULL when none).
 * Owned by the session; valid until ppr_frame_end/ppr_close. */
const ppr_frame_info *ppr_frame_current(ppr_session *session);

/* --- streaming ------------------------------------------------------------- */

/* Several frames in flight: packets go in with ppr_send_packet(), frames come
 * out with ppr_receive_frame() and are written to caller planes with
 * ppr_download_frame(), as avcodec_send_packet/avcodec_receive_frame do.
 * A vulkan session decodes with `frame_threads` frame threads (FFmpeg's frame
 * threading: that many frames decode at once on the GPU while the caller
 * downloads an earlier one); a software session with its slice threads (one
 * frame in flight). A change of codec tag, size or pixel format between
 * packets drains the frames in flight (ppr_send_packet answers PPR_EAGAIN
 * until they are received) and reopens the decoder. Do not mix with
 * ppr_decode/ppr_frame_end on the same session without ppr_stream_reset. */

/* Flags of ppr_stream_config(). */
enum {
    /* vulkan: decode with err_detect bitstream, so that the hwaccel flags
     * damaged frames (7.1.5 series patch 19, 9.0.2 series patch 12; it
     * costs GPU throughput). Software
     * sessions always flag damaged frames. */
    PPR_STREAM_ERR_DETECT = 1,
    /* vulkan: the decoder's frames come from a pool of the session's own, one
     * linear image per plane in device-local memory, exportable (opaque fd)
     * with its timeline semaphore: what PPR_COPY_NONE hands to CUDA in place.
     * Frames download and copy as usual. */
    PPR_STREAM_OWN_POOL = 2
};

/* Images of own frame pools (PPR_STREAM_OWN_POOL) not freed, in the whole
 * process (for tests). */
int ppr_own_images_live(void);

/* Values ppr_receive_frame() returns besides errors. */
enum {
    PPR_RECV_AGAIN = 0,         /* no frame yet: send more packets            */
    PPR_RECV_FRAME = 1,         /* a frame was received: download it          */
    PPR_RECV_EOF   = 2          /* after ppr_send_packet(NULL): all received  */
};

/* A received frame's facts, filled by ppr_receive_frame(). */
typedef struct ppr_stream_frame {
    int width;
    int height;
    char pix_fmt[32];           /* the downloaded format, e.g. "yuv422p10le"     */
    int bit_depth;
    int64_t pts;                /* the pts passed to ppr_send_packet             */
    int interlaced;             /* the frame holds two fields                    */
    int top_field_first;
    int corrupt;                /* as ppr_planes.corrupt                         */
    int error_flags;            /* as ppr_planes.error_flags                     */
    int concealed;              /* software: slices found concealed (see ppr_concealed_slices) */
    ppr_planes layout;          /* plane sizes, data = NULL, as ppr_frame_layout */
} ppr_stream_frame;

/* Configure streaming (before the first ppr_send_packet, or after
 * ppr_stream_reset): frame_threads >= 1 (vulkan; 0 = 4), flags PPR_STREAM_*.
 * Once the stream has started, asking again for the settings in use is a
 * no-op (a caller that keeps the decoder between files says so each time);
 * other settings are PPR_EINVAL until ppr_stream_reset. */
int ppr_stream_config(ppr_session *session, int frame_threads, unsigned flags);

/* Send one packet (one frame; copied) with its pts, or pkt == NULL to signal
 * the end of the stream (then receive until PPR_RECV_EOF). PPR_EAGAIN: receive
 * a frame first (the decoder is full, or a size/format change waits for the
 * frames in flight), then send the same packet again. Errors as ppr_decode. */
int ppr_send_packet(ppr_session *session, const uint8_t *pkt, size_t size,
                    uint32_t codec_tag, int64_t pts);

/* Packets prepared ahead: ppr_packet_new() makes the padded copy that
 * ppr_send_packet() would make (AV_INPUT_BUFFER_PADDING_SIZE zeroed bytes
 * after the data), so that another thread can prepare the next packets while
 * the decoding thread only hands them over with ppr_send_prepared(), which
 * takes a reference and copies nothing. A packet belongs to no session:
 * ppr_packet_new and ppr_packet_free may run on any thread, with or without
 * a session call in progress elsewhere. */
typedef struct ppr_packet ppr_packet;

/* A new packet holding a copy of data[0..size) and its pts; NULL when out of
 * memory or too large (ppr_last_error(NULL) of the calling thread says). */
ppr_packet *ppr_packet_new(const uint8_t *data, size_t size, int64_t pts);

/* Its size in bytes (without the padding), and its data. NULL-safe (0, NULL). */
size_t ppr_packet_size(const ppr_packet *packet);
const uint8_t *ppr_packet_data(const ppr_packet *packet);

/* Free a packet (the decoder keeps its own reference to what it was sent).
 * NULL-safe. */
void ppr_packet_free(ppr_packet *packet);

/* As ppr_send_packet() with the prepared packet's data and pts, without a
 * copy; packet == NULL signals the end of the stream. The packet stays the
 * caller's: after PPR_EAGAIN send it again, then free it when convenient. */
int ppr_send_prepared(ppr_session *session, const ppr_packet *packet, uint32_t codec_tag);

/* Receive the next frame in decoding order into the session (a frame received
 * and not yet downloaded is dropped) and describe it in *out. Returns
 * PPR_RECV_FRAME, PPR_RECV_AGAIN, PPR_RECV_EOF or an error (PPR_EDECODE: the
 * decoder rejected a packet; the stream goes on with the next one). */
int ppr_receive_frame(ppr_session *session, ppr_stream_frame *out);

/* Write the received frame to the caller's planes (count/width/height as
 * out->layout of ppr_receive_frame; data == NULL skips a plane) and release
 * it. A vulkan frame is downloaded straight into planes without row padding. */
int ppr_download_frame(ppr_session *session, ppr_planes *out);

/* A received frame as a handle of its own, to download on another thread
 * while the session goes on: ppr_take_frame() moves the frame that
 * ppr_receive_frame() received out of the session (NULL on an error, see
 * ppr_last_error(session)); ppr_frame_download() writes it to the caller's
 * planes as ppr_download_frame() would and releases the decoded frame (an
 * error's message: ppr_last_error(NULL) on the thread that called it);
 * ppr_frame_free() frees the handle (NULL-safe). ppr_frame_download takes no
 * session lock and may run while the session sends and receives, but only on
 * one thread at a time per session (ppr_download_frame included): the frames
 * of a session share hwcontext_vulkan's transfer contexts, handed out
 * round-robin, which are not safe for concurrent transfers. A handle keeps
 * its frames context (and device) alive: free it before or after the session. */
typedef struct ppr_frame ppr_frame;
ppr_frame *ppr_take_frame(ppr_session *session);
int ppr_frame_download(ppr_frame *frame, ppr_planes *out);
void ppr_frame_free(ppr_frame *frame);
/* ppr_frame handles taken and not freed, in the whole process (for tests). */
int ppr_frames_live(void);

/* Host memory the GPU writes into (vulkan sessions): a download into a host
 * buffer is a copy on the GPU (no copy on the host), and it runs while the
 * caller goes on. The memory is allocated from the session's device
 * (host-visible, host-cached where the driver offers it) and mapped for the
 * buffer's whole life, at ppr_host_buffer_data(); the caller lays the planes
 * out inside it. A buffer keeps its device alive and may outlive its session;
 * ppr_host_buffer_wait and ppr_host_buffer_free may run on any thread.
 *
 *     b = ppr_host_buffer_new(s, bytes);        // once, reused frame after frame
 *     ppr_receive_frame(s, &f);                  // plane i at data + offset_i
 *     ppr_download_start(s, b, &planes);         // submitted; the session goes on
 *     ...                                        // send and receive more frames
 *     ppr_host_buffer_wait(b);                   // the planes hold the frame now
 */
typedef struct ppr_host_buffer ppr_host_buffer;

/* A host buffer of `size` bytes on the session's device; NULL on an error
 * (ppr_last_error(session)). */
ppr_host_buffer *ppr_host_buffer_new(ppr_session *session, size_t size);

/* Its memory and size. NULL-safe (NULL, 0). */
void *ppr_host_buffer_data(ppr_host_buffer *buffer);
size_t ppr_host_buffer_size(const ppr_host_buffer *buffer);

/* Start copying the frame ppr_receive_frame() received into buffer, at the
 * planes of out (each plane's data inside the buffer on a 4-byte boundary,
 * its width and height those of the frame's layout, stride >= width * 2 and
 * even). The session lets go of the frame (the buffer holds it until the copy
 * ends); out's corrupt/error_flags/concealed are set. One copy at a time per
 * buffer: PPR_EINVAL while one is pending. PPR_EINVAL for a frame that is
 * not a Vulkan one (a software session): use ppr_download_frame then. */
int ppr_download_start(ppr_session *session, ppr_host_buffer *buffer, ppr_planes *out);

/* Wait until the buffer's copy (if any) is done: 0, then the planes hold the
 * frame; or an error (PPR_ENODEVICE: the device was lost; the planes are
 * undefined). The message: ppr_last_error(NULL) on the calling thread. */
int ppr_host_buffer_wait(ppr_host_buffer *buffer);

/* Wait for a copy in progress, then free the buffer. NULL-safe. */
void ppr_host_buffer_free(ppr_host_buffer *buffer);

/* Host buffers not freed, in the whole process (for tests). */
int ppr_host_buffers_live(void);

/* Copies by a compute shader (csrc/shaders/planecopy.comp) on a compute
 * queue: the SMs read the frame's images and write the planes packed (rows
 * unpadded), where vkCmdCopyImageToBuffer of the tiled images runs at a
 * fraction of the memory's bandwidth. CUDA frames are copied so by default
 * (ppr_cuda_set_copy); into a host buffer it is the same copy, which tests
 * compare with ppr_download_start's on any device (lavapipe too). */
typedef struct ppr_copier ppr_copier;

/* A copier on the session's device (it holds the device; it may outlive the
 * session); NULL on an error (ppr_last_error(session)). */
ppr_copier *ppr_copier_new(ppr_session *session);

/* Copies it submitted so far. */
uint64_t ppr_copier_copies(ppr_copier *copier);

/* 1: vkQueueSubmit runs on a thread of the copier's own, the copy's commands
 * recorded and its semaphore values taken by the caller (work submitted on
 * the frame meanwhile waits for them on the GPU); 0 (the default): in the
 * caller's call. 0, or an error. */
int ppr_copier_set_async(ppr_copier *copier, int on);

/* Where its copies go (ppr_copier_queue, ppr_copy_queue_pick). */
enum {
    PPR_COPY_QUEUE_OWN = 0,             /* a family the decoder does not submit to */
    PPR_COPY_QUEUE_DECODER = 1,         /* a queue the decoder submits to too: the
                                         * copies wait behind decodes */
    PPR_COPY_QUEUE_DECODER_FAMILY = 2   /* the decoder's family, a queue it leaves alone */
};

/* The queue its copies go to (family, index): PPR_COPY_QUEUE_*, -1 without
 * a copier. */
int ppr_copier_queue(const ppr_copier *copier, uint32_t *family, uint32_t *index);

/* A queue family of a Vulkan device context. */
typedef struct ppr_queue_family {
    uint32_t index;     /* Vulkan's queue family index */
    uint32_t flags;     /* the family's VkQueueFlags, as the device reports them */
    uint32_t roles;     /* what the device context enabled it for (its
                         * AVVulkanDeviceQueueFamily's flags): FFmpeg's decoders
                         * take the first family with VK_QUEUE_COMPUTE_BIT */
    uint32_t queues;    /* queues the device context created in it */
} ppr_queue_family;

/* The families of the copier's device context, in its order (at most max
 * into out): how many it has, -1 without a copier. *decoder_queues: how many
 * queues of its family the decoder submits to (0: every one). */
int ppr_copier_families(const ppr_copier *copier, ppr_queue_family *out, int max,
                        int *decoder_queues);

/* The queue the copier takes on a device context with these families (in its
 * order) when the decoder submits to decoder_queues queues of its family (0:
 * every one): a family that can compute and that the decoder does not use,
 * one FFmpeg submits nothing to first (NVIDIA's and AMD's graphics family),
 * else a queue of the decoder's family it leaves alone, else the decoder's
 * last queue. PPR_COPY_QUEUE_*, or PPR_ENODEVICE when no family can compute. */
int ppr_copy_queue_pick(const ppr_queue_family *families, int nb, int decoder_queues,
                        uint32_t *family, uint32_t *index);

/* Wait for its copies, then free it. NULL-safe. */
void ppr_copier_free(ppr_copier *copier);

/* ppr_download_start, the copy made by the copier's shader. The planes'
 * rows must be unpadded (stride = width * 2) and each plane needs room for
 * its last 32-bit word (the second sample of a plane with an odd number of
 * samples is written as 0): PPR_EINVAL otherwise, and for a frame that is not
 * one R16 image per plane. */
int ppr_download_start_shader(ppr_session *session, ppr_host_buffer *buffer,
                              ppr_copier *copier, ppr_planes *out);

/* Drop every frame in flight and close the streaming decoder (its threads end).
 * The session stays open. NULL-safe. */
void ppr_stream_reset(ppr_session *session);

/* --- files ------------------------------------------------------------------ */

/* A file's ProRes packets, read by this build's libavformat on a thread of
 * the reader's own, up to `depth` packets ahead of the caller:
 *
 *     ppr_reader_open(&r, "clip.mov", 4);     // returns at once; the thread opens the file
 *     ...                                     // e.g. ppr_open: the device is created meanwhile
 *     ppr_reader_info(r, &info);              // waits for the open: the stream's facts
 *     while ((ret = ppr_reader_next(r, &p)) == 1) {   // blocks while none is read yet
 *         ppr_send_prepared(s, p, info.codec_tag);    // (receive frames on PPR_EAGAIN)
 *         ppr_packet_free(p);
 *     }                                       // 0: the end; < 0: the file's error
 *     ppr_reader_close(r);
 *
 * Packets are those of av_read_frame() (no copy: padded and refcounted as
 * libavformat reads them), of the first ProRes video stream, empty ones left
 * out, with their pts. The file is opened without avformat_find_stream_info()
 * (the container's header says all that is needed); the open ends once the
 * first packet is read (or the file has none). A packet shorter than
 * the frame size in its first 4 bytes, or fewer packets than the container
 * lists, is PPR_ETRUNCATED and a read error PPR_EDECODE, each after the
 * packets before it. Errors of the open (ppr_reader_info, or ppr_reader_next
 * then): PPR_ENOFILE, PPR_EFORMAT (not a container this build reads; FFmpeg's
 * reason in the message), PPR_ENOTPRORES (no ProRes video stream; the message
 * lists the streams). Messages: ppr_last_error(NULL) of the calling thread.
 * One caller thread at a time per reader; ppr_reader_close ends the thread
 * (a read in progress is interrupted) and frees what was read ahead. */
typedef struct ppr_reader ppr_reader;

/* The ProRes stream's facts, from the container. */
typedef struct ppr_file_info {
    int stream_index;
    int width;
    int height;
    uint32_t codec_tag;         /* e.g. MKTAG('a','p','c','h'): 10 or 12 bit      */
    char tag[8];                /* the same as text, e.g. "apch"                  */
    int64_t frames;             /* packets the container lists, 0 when unknown    */
    int time_base_num;          /* pts unit: time_base_num / time_base_den s      */
    int time_base_den;
    int field_order;            /* AVFieldOrder (1 progressive, 2 tt, 3 bb, 4 tb, 5 bt):
                                   the container's, else the first frame header's;
                                   0 unknown (no frame)                            */
    char pix_fmt[32];           /* the first frame header's (ppr_inspect_header), "" without one */
} ppr_file_info;

/* Start reading `path` with at most `depth` (1..1024) packets read ahead.
 * Fails only on bad arguments or no memory: the file's errors come from
 * ppr_reader_info/ppr_reader_next. */
int ppr_reader_open(ppr_reader **out, const char *path, int depth);

/* Wait until the file is open: 0 and *info, or the open's error. */
int ppr_reader_info(ppr_reader *reader, ppr_file_info *info);

/* The next packet (1, *out is the caller's: ppr_packet_free), 0 at the end
 * of the stream, or an error (the file's, after the packets before it). */
int ppr_reader_next(ppr_reader *reader, ppr_packet **out);

/* Stop the thread and free the reader and its queued packets. NULL-safe. */
void ppr_reader_close(ppr_reader *reader);

/* Readers not closed, in the whole process (for tests). */
int ppr_readers_live(void);

/* --- CUDA ------------------------------------------------------------------- */

/* Frames for CUDA without a host copy (vulkan sessions on an NVIDIA GPU): the
 * GPU copies each frame into a buffer of device memory that Vulkan exports
 * (VK_KHR_external_memory_fd) and CUDA imports, and signals a timeline
 * semaphore that CUDA waits on in the consumer's stream
 * (VK_KHR_external_semaphore_fd). The CUDA driver (libcuda.so.1) is loaded at
 * run time; without it, or on a Vulkan device that is not a CUDA device,
 * ppr_cuda_open fails with PPR_ENODEVICE and a message that says so.
 *
 *     ppr_cuda_open(s, &c);                           // once per session
 *     b = ppr_cuda_buffer_new(c, bytes);              // reused while nothing holds it
 *     ppr_receive_frame(s, &f);                       // plane i at ppr_cuda_buffer_ptr(b) + off_i
 *     ppr_cuda_download_start(s, b, &planes);         // the copy is submitted; no wait
 *     t = ppr_cuda_dlpack(b, &planes.plane[0], stream, 0);   // stream waits for the copy
 *     ...                                             // the consumer calls t's deleter
 *
 * Lifetimes: a buffer is referenced by its creator (ppr_cuda_buffer_free
 * drops that) and by each DLPack tensor made of it (its deleter drops that);
 * a buffer keeps its ppr_cuda, which keeps the Vulkan device and the CUDA
 * context: tensors may outlive the session and ppr_cuda_close. A tensor's
 * deleter records an event on its stream; the buffer's next copy waits for
 * it (CUDA work queued before the tensor was dropped finishes first). */
typedef struct ppr_cuda ppr_cuda;
typedef struct ppr_cuda_buffer ppr_cuda_buffer;

/* The CUDA device that is the session's Vulkan device (matched by UUID), its
 * primary context, and the semaphore copies signal. Errors: PPR_EINVAL (not
 * a vulkan session), PPR_ENODEVICE (no CUDA driver, no such CUDA device, a
 * Vulkan device without the extensions), PPR_ENOMEM; ppr_last_error(session). */
int ppr_cuda_open(ppr_session *session, ppr_cuda **out);

/* The CUDA device ordinal (DLPack's device_id). */
int ppr_cuda_device(const ppr_cuda *cuda);

/* How frames are copied into CUDA buffers: PPR_COPY_SHADER (the default; a
 * compute shader on a compute queue, see ppr_copier; frames or layouts it
 * does not take go by transfer), PPR_COPY_SHADER_ASYNC (the same, its
 * vkQueueSubmit on a thread of the copier's own: ppr_copier_set_async),
 * PPR_COPY_TRANSFER (vkCmdCopyImageToBuffer on a transfer queue) or
 * PPR_COPY_CUDA (no Vulkan submission: the decoder's images, exportable as
 * hwcontext_vulkan makes them, imported into CUDA once each, and each frame
 * copied by cuMemcpy2DAsync on a stream of the library's own after waiting
 * for the images' timeline semaphores; the frame is held until the copy
 * ended. Where CUDA cannot read the images, the shader copy instead, and
 * ppr_cuda_copy_fallback says why). Any time: the exported semaphore's
 * values stay in order across the two queues. PPR_COPY_NONE: no copy, the
 * decoder's own images are the tensors' memory (ppr_cuda_take_frame; the
 * session streams with PPR_STREAM_OWN_POOL). PPR_ENODEVICE (with the
 * reason) when the device cannot run the shader copy or CUDA's stream
 * cannot be made; PPR_EINVAL for another value. */
enum {
    PPR_COPY_SHADER = 0,
    PPR_COPY_TRANSFER = 1,
    PPR_COPY_SHADER_ASYNC = 2,
    PPR_COPY_CUDA = 3,
    PPR_COPY_NONE = 4
};
int ppr_cuda_set_copy(ppr_cuda *cuda, int how);

/* Copies into its buffers so far, by the shader and by transfer. */
void ppr_cuda_copies(ppr_cuda *cuda, uint64_t *shader, uint64_t *transfer);

/* And by CUDA from the decoder's images (PPR_COPY_CUDA). */
uint64_t ppr_cuda_copies_cuda(ppr_cuda *cuda);

/* Frames handed to CUDA in place so far (PPR_COPY_NONE). */
uint64_t ppr_cuda_frames_in_place(ppr_cuda *cuda);

/* PPR_COPY_NONE: the frame ppr_receive_frame() received, as a buffer of its
 * own (*out, the caller's reference; no copy): its images, of the session's
 * own pool (PPR_STREAM_OWN_POOL: linear, device-local, exported), imported
 * into CUDA once each, and out's planes their device pointers and row
 * strides (bytes). The buffer holds the decoded frame, so that the pool does
 * not reuse its images while a plane or tensor of it lives; a tensor's stream
 * waits for the decode (the images' timeline semaphores) unless the host sees
 * it ended; the frame goes back to the pool once the CUDA work queued on the
 * streams of its dropped tensors is done. PPR_EINVAL for a frame of another
 * pool; PPR_ENODEVICE when CUDA cannot import it. */
int ppr_cuda_take_frame(ppr_session *session, ppr_cuda *cuda, ppr_cuda_buffer **out,
                        ppr_planes *planes);

/* The consumers' synchronisation so far: out[0] waits queued on a consumer's
 * stream for a copy, out[1] those not queued because the copy had ended,
 * out[2] events a dropped tensor recorded on its stream, out[3] those not
 * recorded because the stream was idle. */
void ppr_cuda_syncs(ppr_cuda *cuda, uint64_t out[4]);

/* Why PPR_COPY_CUDA's frames went to the shader copy instead ("" while they
 * did not): the decoder's images not exportable, or an import that failed. */
const char *ppr_cuda_copy_fallback(ppr_cuda *cuda);

/* Its shader copier (NULL when the device cannot run it), for ppr_copier_queue. */
ppr_copier *ppr_cuda_copier(ppr_cuda *cuda);

/* Drop the opener's reference (buffers keep it alive). NULL-safe. */
void ppr_cuda_close(ppr_cuda *cuda);

/* A buffer of `size` bytes of device memory seen by both; NULL on an error
 * (ppr_last_error(NULL)). Its CUDA device pointer and size. */
ppr_cuda_buffer *ppr_cuda_buffer_new(ppr_cuda *cuda, size_t size);
uint64_t ppr_cuda_buffer_ptr(const ppr_cuda_buffer *buffer);
size_t ppr_cuda_buffer_size(const ppr_cuda_buffer *buffer);

/* References held: the creator's (until ppr_cuda_buffer_free) and one per
 * live tensor. A caller reuses a buffer when only its own is left. */
int ppr_cuda_buffer_refs(const ppr_cuda_buffer *buffer);

/* Drop the creator's reference (the last one frees the buffer, after its copy
 * ended). NULL-safe. */
void ppr_cuda_buffer_free(ppr_cuda_buffer *buffer);

/* Buffers not freed, in the whole process (for tests). */
int ppr_cuda_buffers_live(void);

/* Start copying the frame ppr_receive_frame() received into buffer, at the
 * planes of out (each plane's data a device pointer inside the buffer on a
 * 4-byte boundary, width and height those of the frame's layout, stride >=
 * width * 2 and even). Waits first (on the CPU) for the buffer's previous
 * copy and for the CUDA work its dropped tensors' streams had queued. The
 * session lets go of the frame; out's corrupt/error_flags/concealed are set. */
int ppr_cuda_download_start(ppr_session *session, ppr_cuda_buffer *buffer, ppr_planes *out);

/* A DLPack tensor (DLManagedTensor, or DLManagedTensorVersioned 1.0 when
 * `versioned`) of one plane of buffer (a device pointer inside it): uint16,
 * shape (height, width), strides (stride / 2, 1), on (kDLCUDA, the CUDA
 * ordinal). `stream` (a CUstream; DLPack's 1 and 2 are CUDA's legacy and
 * per-thread default streams, 0 the null stream) waits for the buffer's copy
 * before any work queued on it after this call; -1: no wait. The tensor holds
 * a reference to the buffer until its deleter runs. NULL on an error
 * (ppr_last_error(NULL)). */
void *ppr_cuda_dlpack(ppr_cuda_buffer *buffer, const ppr_plane *plane, intptr_t stream,
                      int versioned);

/* Call a tensor's deleter: for one that no consumer took. NULL-safe. */
void ppr_dlpack_delete(void *managed, int versioned);

/* ppr_cuda_dlpack of the plane at device pointer `ptr` (inside buffer),
 * `height` rows of `width` samples, rows contiguous: the same tensor without
 * a ppr_plane. On the legacy default stream (`stream` 0 or 1) the wait for the
 * buffer's copy is enqueued once per copy: a frame's other planes reuse it. */
void *ppr_cuda_dlpack_at(ppr_cuda_buffer *buffer, uint64_t ptr, int height, int width,
                         intptr_t stream, int versioned);

/* The same with rows `stride` bytes apart (even, >= width * 2). */
void *ppr_cuda_dlpack_strided(ppr_cuda_buffer *buffer, uint64_t ptr, int height, int width,
                              int64_t stride, intptr_t stream, int versioned);

/* --- the pump: decoding on a thread of the library's own -------------------- */

/* A pump owns a streaming session (configured with ppr_stream_config) while
 * it lives: a thread of its own takes packets (from a ppr_reader, or pushed
 * with ppr_pump_push), sends them, receives the frames and starts each
 * frame's copy into a buffer ("sink"), all without the GIL, and queues up to
 * `depth` frames ready for the caller, who takes them with ppr_pump_next:
 *
 *     ppr_pump_open(&p, s, cuda, PPR_PUMP_CUDA, reader, tag, 4);
 *     while ((ret = ppr_pump_next(p, &f)) == 1) {
 *         ...                                  // f.planes: device pointers in f.cuda
 *         ppr_cuda_buffer_free(f.cuda);        // the caller's reference
 *     }                                        // 0: the end; < 0: ppr_pump_error(p)
 *     ppr_pump_free(p);                        // then ppr_stream_reset(s)
 *
 * Sinks: PPR_PUMP_CUDA copies into CUDA buffers of the pump's pool (a buffer
 * is written again once the caller and every tensor let go of it, the least
 * recently used first; at most 16 are kept; with PPR_COPY_NONE no copy: each
 * frame as ppr_cuda_take_frame gives it); PPR_PUMP_HOST into a new host
 * buffer per frame (the caller's: ppr_host_buffer_wait before reading, then
 * ppr_host_buffer_free; PPR_PUMP_HOST_SHADER: the same, copied by the
 * compute shader of ppr_copier); PPR_PUMP_NONE copies nothing (the decoder alone,
 * for measurements). Errors come in order, after the frames before them, as
 * the streaming calls give them (ppr_pump_frame.index: the packet or frame
 * the error is about, -1 for the reader's own). */
typedef struct ppr_pump ppr_pump;

enum {
    PPR_PUMP_NONE = 0,
    PPR_PUMP_CUDA = 1,
    PPR_PUMP_HOST = 2,
    PPR_PUMP_HOST_SHADER = 3,   /* the host sink, copies by a ppr_copier (tests) */
    PPR_PUMP_HOST_SHADER_ASYNC = 4  /* the same, the copier's submissions on its thread */
};

typedef struct ppr_pump_frame {
    ppr_stream_frame info;      /* as ppr_receive_frame gave it                  */
    int index;                  /* frame number; on an error, what it is about  */
    ppr_cuda_buffer *cuda;      /* PPR_PUMP_CUDA: a reference, the caller's      */
    ppr_host_buffer *host;      /* PPR_PUMP_HOST: the caller's                   */
    ppr_planes planes;          /* where the planes are (device or host pointers) */
} ppr_pump_frame;

/* Where the pump's time went (nanoseconds, summed over the frames so far). */
typedef struct ppr_pump_stats {
    uint64_t frames;            /* frames queued                                  */
    uint64_t packets;           /* packets sent                                   */
    uint64_t input_ns;          /* waiting for packets (reader or pushes)         */
    uint64_t send_ns;           /* ppr_send_prepared (the decoder's waits too)    */
    uint64_t receive_ns;        /* ppr_receive_frame                              */
    uint64_t buffer_ns;         /* finding or making a buffer                     */
    uint64_t copy_ns;           /* submitting the copy (after the buffer's waits) */
    uint64_t output_ns;         /* waiting for room: the caller was slower        */
    uint64_t next_wait_ns;      /* ppr_pump_next waiting for a frame              */
    uint64_t thread_cpu_ns;     /* the pump thread's CPU time                     */
    uint64_t buffers_made;
    uint64_t shader_copies;     /* copies made by the compute shader              */
    uint64_t transfer_copies;   /* and by transfer (vkCmdCopyImageToBuffer)       */
    uint64_t copy_gpu_ns;       /* PYPRORES_COPY_GPU_TIME=1: the GPU time of the  */
    uint64_t copies_gpu_timed;  /* shader copies read back so far, and how many   */
    uint64_t cuda_copies;       /* copies made by CUDA from the decoder's images  */
    uint64_t frames_in_place;   /* frames handed to CUDA with no copy (PPR_COPY_NONE) */
} ppr_pump_stats;

/* Start the pump on `session` (streaming, nothing sent yet; the pump uses it
 * until ppr_pump_free). `cuda`: the PPR_PUMP_CUDA sink's (the pump takes a
 * reference). `reader`: packets from it (it must outlive the pump), or NULL:
 * packets come from ppr_pump_push. `depth`: frames queued ahead (1..64). */
int ppr_pump_open(ppr_pump **out, ppr_session *session, ppr_cuda *cuda, int sink,
                  ppr_reader *reader, uint32_t codec_tag, int depth);

/* Hand the pump a packet (it takes it: freed once sent), or NULL for the end
 * of the stream; blocks while `depth` packets wait. 1, or 0 once the pump
 * stopped (the packet freed). Any thread. */
int ppr_pump_push(ppr_pump *pump, ppr_packet *packet);

/* ppr_pump_push of a packet made here: the padded copy of `size` bytes at
 * `data` with `pts`, which helper threads of the pump (ppr_pump_copiers) make
 * in pieces at once; `data` is not used once the call returns. 1, 0 once the
 * pump stopped, PPR_ENOMEM or PPR_EINVAL. Any thread, one at a time. */
int ppr_pump_push_data(ppr_pump *pump, const uint8_t *data, size_t size, int64_t pts);

/* Start `n` helper threads (0..7; -1: one per 4 CPUs, at most 3) that share
 * the copies of ppr_pump_push_data (a packet of 1 MiB or more is split into
 * n + 1 pieces); before the first push. Returns the number started. */
int ppr_pump_copiers(ppr_pump *pump, int n);

/* The next frame (1), the end (0) or an error (< 0, ppr_pump_error), waiting
 * (no GIL) until one is ready. */
int ppr_pump_next(ppr_pump *pump, ppr_pump_frame *out);

/* The message of the error ppr_pump_next returned. */
const char *ppr_pump_error(ppr_pump *pump);

void ppr_pump_stats_get(ppr_pump *pump, ppr_pump_stats *out);

/* End the thread (a call of the decoder in progress finishes; frames queued
 * stay until ppr_pump_free); pushes return 0 from then on. Idempotent. */
void ppr_pump_stop(ppr_pump *pump);

/* Stop, free the frames and packets queued and the pool. NULL-safe. */
void ppr_pump_free(ppr_pump *pump);

/* CFFI_END */

#ifdef __cplusplus
}
#endif

#endif /* PYPRORES_H */
