/*
 * reader.c - a file's ProRes packets read by libavformat on a thread of the
 * reader's own (ppr_reader), ahead of the decoder. See pyprores.h.
 *
 * The thread opens the file (the caller meanwhile creates its Vulkan device),
 * finds the ProRes stream, and reads its packets into a bounded queue; the
 * caller takes them with ppr_reader_next(), which blocks only when the queue
 * is empty. Packets come from av_read_frame() as they are: refcounted, with
 * AV_INPUT_BUFFER_PADDING_SIZE zeroed bytes after the data (a packet that
 * lacks them, or whose buffer holds more than the packet, is copied once),
 * so the decoder takes them by reference (ppr_send_prepared).
 *
 * A local file is read through an AVIOContext of the reader's own: a read of
 * 1 MiB or more (a frame, which libavformat reads straight into the packet)
 * is split into pieces that helper threads pread() at once, so that copying
 * out of the page cache (and faulting in the packet's fresh pages) is not
 * one thread's work: a 4K frame is 4-9 MB, and one thread copies a few GB/s.
 * The demuxer sees an ordinary file (the same packets, pts and errors).
 *
 * The file is checked as pyprores.demux checks it: a packet shorter than the
 * frame size written in its first 4 bytes, a read error, or fewer packets than
 * the container lists end the stream with an error after the packets before.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/intreadwrite.h>

#include "internal.h"

#define IO_HELPERS_MAX 3
#define IO_SPLIT_MIN (1 << 20)      /* reads from this size on are split */
#define IO_BUF_SIZE (1 << 16)

/* A file read by pread(), big reads split over helper threads. */
typedef struct par_io {
    int fd;
    int64_t pos, size;
    int nb_helpers;
    pthread_t helpers[IO_HELPERS_MAX];
    pthread_mutex_t lock;
    pthread_cond_t work, done;      /* a job was posted; a piece was finished */
    int quit;
    /* the current job: pieces of dst at file offset off */
    uint8_t *dst;
    int64_t off;
    size_t piece, total;
    int nb_pieces, next, finished;
    ssize_t got[IO_HELPERS_MAX + 1];    /* bytes read per piece, or -errno */
} par_io;

struct ppr_reader {
    char *path;
    int depth;                      /* packets queued at most */
    pthread_t thread;
    int started;                    /* the thread was created */

    pthread_mutex_t lock;
    pthread_cond_t cond;            /* any change below */
    int stop;                       /* ppr_reader_close asked the thread to end */
    int opened;                     /* the open finished (open_ret says how) */
    int open_ret;
    char open_err[PPR_MSG_SIZE];
    ppr_file_info info;
    AVPacket **queue;               /* ring of `depth` */
    int head, count;
    int done;                       /* no packet will be queued any more */
    int end_ret;                    /* 0: the end of the file; else the error after the packets */
    char end_err[PPR_MSG_SIZE];
    int64_t read;                   /* packets queued so far */
    par_io *io;                     /* the file's reads; NULL: libavformat's own */
};

static int g_readers_live;          /* __atomic */

/* pread() all of [off, off + len) unless the file ends first: bytes read, or -errno */
static ssize_t pread_full(int fd, uint8_t *dst, size_t len, int64_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, dst + got, len - got, (off_t)(off + (int64_t)got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

/* Read piece i of the current job (the lock not held). */
static void read_piece(par_io *io, int i)
{
    size_t start = (size_t)i * io->piece;
    size_t len = FFMIN(io->piece, io->total - start);
    ssize_t n = pread_full(io->fd, io->dst + start, len, io->off + (int64_t)start);

    pthread_mutex_lock(&io->lock);
    io->got[i] = n;
    io->finished++;
    pthread_cond_broadcast(&io->done);
    pthread_mutex_unlock(&io->lock);
}

static void *io_helper(void *opaque)
{
    par_io *io = opaque;

    pthread_mutex_lock(&io->lock);
    for (;;) {
        while (!io->quit && io->next >= io->nb_pieces)
            pthread_cond_wait(&io->work, &io->lock);
        if (io->quit)
            break;
        {
            int i = io->next++;
            pthread_mutex_unlock(&io->lock);
            read_piece(io, i);
            pthread_mutex_lock(&io->lock);
        }
    }
    pthread_mutex_unlock(&io->lock);
    return NULL;
}

static int io_read(void *opaque, uint8_t *buf, int size)
{
    par_io *io = opaque;
    ssize_t n = 0;
    int i, pieces;

    if (size <= 0)
        return 0;
    if (size < IO_SPLIT_MIN || !io->nb_helpers) {
        n = pread_full(io->fd, buf, (size_t)size, io->pos);
    } else {
        pieces = io->nb_helpers + 1;
        pthread_mutex_lock(&io->lock);
        io->dst = buf;
        io->off = io->pos;
        io->total = (size_t)size;
        /* pieces of whole 64 KiB blocks */
        io->piece = (((size_t)size + pieces - 1) / pieces + 0xffff) & ~(size_t)0xffff;
        io->nb_pieces = (int)(((size_t)size + io->piece - 1) / io->piece);
        io->next = 1;                   /* piece 0 is this thread's */
        io->finished = 0;
        pthread_cond_broadcast(&io->work);
        pthread_mutex_unlock(&io->lock);
        read_piece(io, 0);
        pthread_mutex_lock(&io->lock);
        while (io->next < io->nb_pieces) {          /* help with what is left */
            i = io->next++;
            pthread_mutex_unlock(&io->lock);
            read_piece(io, i);
            pthread_mutex_lock(&io->lock);
        }
        while (io->finished < io->nb_pieces)
            pthread_cond_wait(&io->done, &io->lock);
        /* the bytes read from the start on, up to the first short piece */
        for (i = 0; i < io->nb_pieces; i++) {
            size_t want = FFMIN(io->piece, io->total - (size_t)i * io->piece);
            if (io->got[i] < 0) {
                if (!n)
                    n = io->got[i];
                break;
            }
            n += io->got[i];
            if ((size_t)io->got[i] < want)
                break;
        }
        io->nb_pieces = io->next = 0;
        pthread_mutex_unlock(&io->lock);
    }
    if (n < 0)
        return AVERROR(-n);
    if (n == 0)
        return AVERROR_EOF;
    io->pos += n;
    return (int)n;
}

static int64_t io_seek(void *opaque, int64_t offset, int whence)
{
    par_io *io = opaque;
    struct stat st;

    if (whence & AVSEEK_SIZE) {
        if (fstat(io->fd, &st) < 0)
            return AVERROR(errno);
        return st.st_size;
    }
    switch (whence & ~AVSEEK_FORCE) {
    case SEEK_SET: break;
    case SEEK_CUR: offset += io->pos; break;
    case SEEK_END:
        if (fstat(io->fd, &st) < 0)
            return AVERROR(errno);
        offset += st.st_size;
        break;
    default:
        return AVERROR(EINVAL);
    }
    if (offset < 0)
        return AVERROR(EINVAL);
    io->pos = offset;
    return offset;
}

static void io_close(par_io *io)
{
    int i;
    if (!io)
        return;
    pthread_mutex_lock(&io->lock);
    io->quit = 1;
    pthread_cond_broadcast(&io->work);
    pthread_mutex_unlock(&io->lock);
    for (i = 0; i < io->nb_helpers; i++)
        pthread_join(io->helpers[i], NULL);
    if (io->fd >= 0)
        close(io->fd);
    pthread_cond_destroy(&io->work);
    pthread_cond_destroy(&io->done);
    pthread_mutex_destroy(&io->lock);
    free(io);
}

/* A regular file opened for io_read(): 0, or a negative AVERROR (ENOENT
 * for a missing file); *out NULL for anything not a regular file (the
 * caller lets libavformat open it). */
static int io_open(par_io **out, const char *path)
{
    struct stat st;
    par_io *io;
    long cpus;
    int fd, i;

    *out = NULL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return AVERROR(errno);
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || !(io = calloc(1, sizeof(*io)))) {
        close(fd);
        return 0;
    }
    io->fd = fd;
    io->size = st.st_size;
    pthread_mutex_init(&io->lock, NULL);
    pthread_cond_init(&io->work, NULL);
    pthread_cond_init(&io->done, NULL);
    /* a helper per 4 CPUs, 1 to IO_HELPERS_MAX */
    cpus = sysconf(_SC_NPROCESSORS_ONLN);
    io->nb_helpers = (int)FFMAX(1, FFMIN(IO_HELPERS_MAX, cpus / 4));
    for (i = 0; i < io->nb_helpers; i++)
        if (pthread_create(&io->helpers[i], NULL, io_helper, io)) {
            io->nb_helpers = i;
            break;
        }
    *out = io;
    return 0;
}

static int interrupted(void *opaque)
{
    ppr_reader *r = opaque;
    int stop;
    pthread_mutex_lock(&r->lock);
    stop = r->stop;
    pthread_mutex_unlock(&r->lock);
    return stop;
}

static void finish_open(ppr_reader *r, int ret, const char *fmt, ...) PPR_PRINTF(3, 4);
static void finish_open(ppr_reader *r, int ret, const char *fmt, ...)
{
    va_list vl;
    pthread_mutex_lock(&r->lock);
    if (fmt) {
        va_start(vl, fmt);
        vsnprintf(r->open_err, sizeof(r->open_err), fmt, vl);
        va_end(vl);
    }
    r->open_ret = ret;
    r->opened = 1;
    if (ret < 0)
        r->done = 1;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

static void finish_read(ppr_reader *r, int ret, const char *fmt, ...) PPR_PRINTF(3, 4);
static void finish_read(ppr_reader *r, int ret, const char *fmt, ...)
{
    va_list vl;
    pthread_mutex_lock(&r->lock);
    if (fmt) {
        va_start(vl, fmt);
        vsnprintf(r->end_err, sizeof(r->end_err), fmt, vl);
        va_end(vl);
    }
    r->end_ret = ret;
    r->done = 1;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

/* Queue pkt (its reference moves), waiting for room; 0, or 1 when stopped. */
static int enqueue(ppr_reader *r, AVPacket *pkt)
{
    pthread_mutex_lock(&r->lock);
    while (!r->stop && r->count == r->depth)
        pthread_cond_wait(&r->cond, &r->lock);
    if (r->stop) {
        pthread_mutex_unlock(&r->lock);
        return 1;
    }
    av_packet_move_ref(r->queue[(r->head + r->count) % r->depth], pkt);
    r->count++;
    r->read++;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    return 0;
}

/* The decoder needs AV_INPUT_BUFFER_PADDING_SIZE zeroed bytes after the data,
 * and the session finds a packet's size from its buffer's (software
 * concealment): copy the packet when its buffer is not exactly that. */
static int normalise(AVPacket *pkt)
{
    static const uint8_t zero[AV_INPUT_BUFFER_PADDING_SIZE];
    AVPacket *copy;
    int ret;

    if (pkt->buf && pkt->data == pkt->buf->data &&
        pkt->buf->size == (size_t)pkt->size + AV_INPUT_BUFFER_PADDING_SIZE &&
        !memcmp(pkt->data + pkt->size, zero, AV_INPUT_BUFFER_PADDING_SIZE))
        return 0;
    if (!(copy = av_packet_alloc()))
        return AVERROR(ENOMEM);
    if ((ret = av_new_packet(copy, pkt->size)) < 0 ||
        (ret = av_packet_copy_props(copy, pkt)) < 0) {
        av_packet_free(&copy);
        return ret;
    }
    memcpy(copy->data, pkt->data, pkt->size);
    av_packet_unref(pkt);
    av_packet_move_ref(pkt, copy);
    av_packet_free(&copy);
    return 0;
}

/* The codec tag as text, e.g. "apch" */
static void tag_text(char dst[8], uint32_t tag)
{
    int i;
    for (i = 0; i < 4; i++) {
        uint8_t c = (tag >> (8 * i)) & 0xff;
        dst[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    dst[4] = 0;
}

static void *reader_thread(void *opaque)
{
    ppr_reader *r = opaque;
    AVFormatContext *fc = NULL;
    AVIOContext *pb = NULL;         /* ours (io_read), or NULL: libavformat's */
    AVPacket *pkt = NULL;
    const AVStream *st = NULL;
    char found[PPR_MSG_SIZE] = "", err[AV_ERROR_MAX_STRING_SIZE], msg[PPR_MSG_SIZE];
    unsigned i;
    int ret, announced = 0;
    int64_t count = 0;

    fc = avformat_alloc_context();
    pkt = av_packet_alloc();
    if (!fc || !pkt) {
        finish_open(r, PPR_ENOMEM, "out of memory");
        goto end;
    }
    fc->interrupt_callback.callback = interrupted;
    fc->interrupt_callback.opaque = r;
    ret = io_open(&r->io, r->path);
    if (ret >= 0 && r->io) {
        uint8_t *iobuf = av_malloc(IO_BUF_SIZE);
        if (!iobuf || !(pb = avio_alloc_context(iobuf, IO_BUF_SIZE, 0, r->io, io_read,
                                                NULL, io_seek))) {
            av_free(iobuf);
            finish_open(r, PPR_ENOMEM, "out of memory");
            goto end;
        }
        fc->pb = pb;
    }
    /* the container's index is enough: no avformat_find_stream_info (it would
     * decode frames with the software decoder) */
    if (ret >= 0)
        ret = avformat_open_input(&fc, r->path, NULL, NULL);
    if (ret < 0) {
        av_strerror(ret, err, sizeof(err));
        finish_open(r, ret == AVERROR(ENOENT) ? PPR_ENOFILE : PPR_EFORMAT,
                    "%s: this build's demuxers cannot read it (%s)", r->path, err);
        goto end;
    }
    for (i = 0; i < fc->nb_streams; i++) {
        const AVStream *s = fc->streams[i];
        size_t n = strlen(found);
        if (!st && s->codecpar->codec_type == AVMEDIA_TYPE_VIDEO &&
            s->codecpar->codec_id == AV_CODEC_ID_PRORES)
            st = s;
        else
            fc->streams[i]->discard = AVDISCARD_ALL;
        snprintf(found + n, sizeof(found) - n, "%s%s", n ? ", " : "",
                 avcodec_get_name(s->codecpar->codec_id));
    }
    if (!st) {
        finish_open(r, PPR_ENOTPRORES, "%s has no ProRes video stream (found: %s)", r->path,
                    found[0] ? found : "no streams");
        goto end;
    }
    r->info.stream_index = st->index;
    r->info.width = st->codecpar->width;
    r->info.height = st->codecpar->height;
    r->info.codec_tag = st->codecpar->codec_tag;
    tag_text(r->info.tag, st->codecpar->codec_tag);
    r->info.frames = st->nb_frames > 0 ? st->nb_frames : 0;
    r->info.time_base_num = st->time_base.num;
    r->info.time_base_den = st->time_base.den;
    r->info.field_order = st->codecpar->field_order;

    /* the open ends with the first packet (or the end of the file): the
     * frame header says the pixel format, and the field order where the
     * container does not */
    for (;;) {
        ret = av_read_frame(fc, pkt);
        if (ret == AVERROR_EOF)
            break;
        if (interrupted(r))
            goto end;
        if (ret < 0) {
            av_strerror(ret, err, sizeof(err));
            ret = PPR_EDECODE;
            snprintf(msg, sizeof(msg), "%s: reading stopped after %" PRId64 " frame(s): %s; "
                     "the file is damaged or incomplete: re-copy or re-export it",
                     r->path, count, err);
            goto failed;
        }
        if (pkt->stream_index != st->index || pkt->size <= 0) {
            av_packet_unref(pkt);
            continue;
        }
        if (pkt->size >= 8 && AV_RL32(pkt->data + 4) == MKTAG('i', 'c', 'p', 'f') &&
            (uint32_t)pkt->size < AV_RB32(pkt->data)) {
            ret = PPR_ETRUNCATED;
            snprintf(msg, sizeof(msg), "%s ends early: frame %" PRId64 " has %d of its %u "
                     "bytes; re-copy the file (its first %" PRId64 " frames are complete)",
                     r->path, count, pkt->size, AV_RB32(pkt->data), count);
            goto failed;
        }
        if ((ret = normalise(pkt)) < 0) {
            ret = PPR_ENOMEM;
            snprintf(msg, sizeof(msg), "out of memory");
            goto failed;
        }
        if (!announced) {
            ppr_frame_info fi;
            if (ppr_inspect_header(pkt->data, pkt->size, r->info.codec_tag, &fi) >= 0) {
                snprintf(r->info.pix_fmt, sizeof(r->info.pix_fmt), "%s", fi.pix_fmt);
                if (r->info.field_order == AV_FIELD_UNKNOWN)
                    r->info.field_order = fi.interlace_mode == 0 ? AV_FIELD_PROGRESSIVE :
                                          fi.interlace_mode == 1 ? AV_FIELD_TT : AV_FIELD_BB;
                ppr_frame_info_free(&fi);
            }
            finish_open(r, 0, NULL);
            announced = 1;
        }
        if (enqueue(r, pkt))
            goto end;
        count++;
    }
    if (!announced)
        finish_open(r, 0, NULL);
    if (r->info.frames && count < r->info.frames)
        finish_read(r, PPR_ETRUNCATED, "%s ends early: the container lists %" PRId64 " frames "
                    "but only %" PRId64 " could be read; re-copy the file", r->path,
                    r->info.frames, count);
    else
        finish_read(r, 0, NULL);
    goto end;
failed:
    if (!announced)
        finish_open(r, 0, NULL);
    finish_read(r, ret, "%s", msg);
end:
    av_packet_free(&pkt);
    avformat_close_input(&fc);      /* a custom pb is ours to free, after */
    if (pb) {
        av_freep(&pb->buffer);
        avio_context_free(&pb);
    }
    io_close(r->io);
    r->io = NULL;
    /* an open that never reached finish_open (stopped early) still ends */
    pthread_mutex_lock(&r->lock);
    if (!r->opened) {
        r->opened = 1;
        r->open_ret = PPR_EINVAL;
        snprintf(r->open_err, sizeof(r->open_err), "the reader was closed");
    }
    r->done = 1;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

static void reader_free(ppr_reader *r)
{
    int i;
    if (r->queue)
        for (i = 0; i < r->depth; i++)
            av_packet_free(&r->queue[i]);
    av_free(r->queue);
    free(r->path);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

int ppr_reader_open(ppr_reader **out, const char *path, int depth)
{
    ppr_reader *r;
    int i, ret;

    ppr__ensure_init();
    ppr__clear_error();
    if (!out || !path)
        return ppr__fail(PPR_EINVAL, "ppr_reader_open: out or path is NULL");
    *out = NULL;
    if (depth < 1 || depth > 1024)
        return ppr__fail(PPR_EINVAL, "read-ahead depth must be 1..1024, not %d", depth);
    if (!(r = calloc(1, sizeof(*r))))
        return ppr__fail(PPR_ENOMEM, "out of memory");
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    r->depth = depth;
    r->path = strdup(path);
    r->queue = av_calloc(depth, sizeof(*r->queue));
    if (!r->path || !r->queue) {
        reader_free(r);
        return ppr__fail(PPR_ENOMEM, "out of memory");
    }
    for (i = 0; i < depth; i++)
        if (!(r->queue[i] = av_packet_alloc())) {
            reader_free(r);
            return ppr__fail(PPR_ENOMEM, "out of memory");
        }
    if ((ret = pthread_create(&r->thread, NULL, reader_thread, r))) {
        reader_free(r);
        return ppr__fail(PPR_ENOMEM, "could not start the reader thread (error %d)", ret);
    }
    r->started = 1;
    __atomic_add_fetch(&g_readers_live, 1, __ATOMIC_RELAXED);
    *out = r;
    return 0;
}

int ppr_reader_info(ppr_reader *r, ppr_file_info *info)
{
    int ret;

    ppr__clear_error();
    if (!r || !info)
        return ppr__fail(PPR_EINVAL, "reader or info is NULL");
    pthread_mutex_lock(&r->lock);
    while (!r->opened)
        pthread_cond_wait(&r->cond, &r->lock);
    ret = r->open_ret;
    if (ret < 0)
        ppr__fail(ret, "%s", r->open_err);
    else
        *info = r->info;
    pthread_mutex_unlock(&r->lock);
    return ret;
}

int ppr_reader_next(ppr_reader *r, ppr_packet **out)
{
    ppr_packet *p;
    int ret;

    ppr__clear_error();
    if (!r || !out)
        return ppr__fail(PPR_EINVAL, "reader or out is NULL");
    *out = NULL;
    if (!(p = calloc(1, sizeof(*p))) || !(p->av = av_packet_alloc())) {
        free(p);
        return ppr__fail(PPR_ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&r->lock);
    while (!r->count && !r->done)
        pthread_cond_wait(&r->cond, &r->lock);
    if (r->count) {
        av_packet_move_ref(p->av, r->queue[r->head]);
        r->head = (r->head + 1) % r->depth;
        r->count--;
        pthread_cond_broadcast(&r->cond);
        ret = 1;
    } else if (r->open_ret < 0) {
        ret = ppr__fail(r->open_ret, "%s", r->open_err);
    } else if (r->end_ret < 0) {
        ret = ppr__fail(r->end_ret, "%s", r->end_err);
    } else {
        ret = 0;
    }
    pthread_mutex_unlock(&r->lock);
    if (ret == 1)
        *out = p;
    else
        ppr_packet_free(p);
    return ret;
}

void ppr_reader_close(ppr_reader *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    r->stop = 1;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    if (r->started)
        pthread_join(r->thread, NULL);
    reader_free(r);
    __atomic_sub_fetch(&g_readers_live, 1, __ATOMIC_RELAXED);
}

int ppr_readers_live(void)
{
    return __atomic_load_n(&g_readers_live, __ATOMIC_RELAXED);
}
