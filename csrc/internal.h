/* Internal helpers shared by the pyprores C files. Not installed, not API. */
#ifndef PYPRORES_INTERNAL_H
#define PYPRORES_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>

#include "pyprores.h"

#define PPR_MSG_SIZE 512

#if defined(__GNUC__)
#define PPR_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PPR_PRINTF(a, b)
#endif

/* Record an error message for the calling thread (ppr_last_error(NULL)) and
 * return `code`, so that callers can write `return ppr__fail(code, ...)`. */
int ppr__fail(int code, const char *fmt, ...) PPR_PRINTF(2, 3);

/* Clear the calling thread's message. */
void ppr__clear_error(void);

/* The calling thread's message buffer. */
char *ppr__thread_error(void);

/* Install the FFmpeg log callback (once). */
void ppr__ensure_init(void);

/* device.c: whether the Vulkan device was created with extension `name`. */
struct AVVulkanDeviceContext;
int ppr__has_device_extension(const struct AVVulkanDeviceContext *vk, const char *name);

/* hostdl.c: a host buffer on `device` (an AVBufferRef of a Vulkan
 * AVHWDeviceContext; the buffer takes a reference); release(release_opaque)
 * runs when the buffer is freed, or before an error returns. */
struct AVBufferRef;
struct AVFrame;
int ppr__host_buffer_create(ppr_host_buffer **out, struct AVBufferRef *device, size_t size,
                            void (*release)(void *), void *release_opaque);

/* hostdl.c: submit the copy of `frame` (a Vulkan frame) into b at out's
 * planes; on success the frame's reference moves into b. */
int ppr__host_download_start(ppr_host_buffer *b, struct AVFrame *frame, const ppr_planes *out);

/* shcopy.c: the copier of `device` (see vkcopy.h for the rest). */
int ppr__copier_create(ppr_copier **out, struct AVBufferRef *device,
                       void (*release)(void *), void *release_opaque);

/* hostdl.c: ppr__host_download_start with the copy made by the compute
 * shader of `cp` (shcopy.c); PPR_EINVAL for a frame or layout it does not take. */
int ppr__host_download_shader(ppr_host_buffer *b, ppr_copier *cp, struct AVFrame *frame,
                              const ppr_planes *out);

/* cudaip.c: the CUDA side of `device` (a Vulkan AVHWDeviceContext; it takes a
 * reference); release(release_opaque) runs when the last holder lets go, or
 * before an error returns. */
int ppr__cuda_create(ppr_cuda **out, struct AVBufferRef *device, const char *device_name,
                     void (*release)(void *), void *release_opaque);

/* cudaip.c: submit the copy of `frame` into b at out's planes (device
 * pointers inside the buffer); on success the frame's reference moves into b. */
int ppr__cuda_download_start(ppr_cuda_buffer *b, struct AVFrame *frame, const ppr_planes *out);

/* cudaip.c: PPR_COPY_NONE's buffer of `frame` (of the session's own pool; its
 * reference moves into *out on success), out's planes its images' memory. */
int ppr__cuda_take_frame(ppr_cuda *c, struct AVFrame *frame, ppr_cuda_buffer **out,
                         ppr_planes *planes);

/* ownpool.c: an image of the session's own frame pool (PPR_STREAM_OWN_POOL):
 * one LINEAR image per plane, each in memory of its own (at offset 0). */
typedef struct ppr__own_info {
    int nb;                         /* planes (images) */
    int exportable;                 /* memory and semaphores exportable as opaque fds */
    uint64_t offset[4];             /* each plane's first sample in its memory */
    uint64_t row_pitch[4];          /* bytes from one row to the next */
    uint64_t mem_size[4];           /* the memory's size (AVVkFrame.size) */
    uint32_t width[4], height[4];   /* the image's extent */
    int dedicated[4];               /* a dedicated allocation */
} ppr__own_info;

/* 1 and *info when frame's images come from a pool of the session's own; else 0. */
int ppr__own_frame_info(const struct AVFrame *frame, ppr__own_info *info);

/* A user's state kept with the frame's image (cudaip.c: its CUDA import):
 * under the image's lock, the slot becomes swap(slot, arg); an old value that
 * swap replaced is freed with the slot_free given before; slot_free(slot) runs
 * when the image is destroyed, before its memory goes. Returns the new value
 * (NULL when the frame is not of an own pool). */
void *ppr__own_frame_slot(const struct AVFrame *frame, void *(*swap)(void *old, void *arg),
                          void *arg, void (*slot_free)(void *));

/* A prepared packet (stream.c; reader.c makes them too). */
struct AVPacket;
struct ppr_packet {
    struct AVPacket *av;        /* refcounted, padded, pts set */
};

#endif
