/*
 * log.c - FFmpeg's log lines, each attributed to the session it is about:
 * its last error line, the validation layer's messages, the slices the
 * Vulkan hwaccel reports concealed; the library lock and the registry of
 * live sessions and shared devices that this needs; the start and end of
 * every session call. See pyprores.h for the API.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavutil/hwcontext.h>
#include <libavutil/log.h>

#include "session.h"

static __thread char tls_av_last[PPR_MSG_SIZE];
static __thread ppr_session *tls_session;   /* session of the ppr_ call in progress */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static ppr_session *g_sessions;
static shared_device *g_devices;
static volatile int g_user_level = AV_LOG_QUIET;

static int session_live(ppr_session *s)  /* g_lock held */
{
    ppr_session *it;
    for (it = g_sessions; it; it = it->next)
        if (it == s)
            return 1;
    return 0;
}

static int device_live(const shared_device *d)  /* g_lock held */
{
    const shared_device *it;
    for (it = g_devices; it; it = it->next)
        if (it == d)
            return 1;
    return 0;
}

static int looks_like_validation(const char *line)
{
    return strstr(line, "VUID-") || strstr(line, "Validation") ||
           strstr(line, "MessageID") || strstr(line, "The Vulkan spec states");
}

static void append_line(char *dst, size_t dst_size, int *open, const char *line)
{
    size_t n;
    if (*open) {
        n = strlen(dst);
        snprintf(dst + n, dst_size - n, "%s", line);
    } else {
        snprintf(dst, dst_size, "%s", line);
    }
    n = strlen(line);
    *open = !(n && line[n - 1] == '\n');
    /* keep messages single-line and without the trailing newline */
    n = strlen(dst);
    while (n && (dst[n - 1] == '\n' || dst[n - 1] == '\r'))
        dst[--n] = 0;
}

#define PPR_VALIDATION_KEEP 1000

/* Known noise of Debian 12's validation layers (1.3.239), older than the
 * Vulkan headers FFmpeg is built with: they flag every structure and
 * extension newer than themselves. Not bugs of FFmpeg's or ours. */
static const char *const validation_noise[] = {
    "-pNext-pNext",
    "is not supported by this layer",
    NULL
};

static int ignored_validation(const ppr_session *s, const char *line)
{
    const char *p, *end;
    int i;
    for (i = 0; validation_noise[i]; i++)
        if (strstr(line, validation_noise[i]))
            return 1;
    if (s->validation_no_practices && strstr(line, "BestPractices"))
        return 1;
    for (p = s->validation_ignore; p && *p; p = *end ? end + 1 : end) {
        char pat[256];
        size_t n;
        end = strchr(p, ';');
        if (!end)
            end = p + strlen(p);
        n = (size_t)(end - p);
        if (n && n < sizeof(pat)) {
            memcpy(pat, p, n);
            pat[n] = 0;
            if (strstr(line, pat))
                return 1;
        }
    }
    return 0;
}

static void keep_validation(ppr_session *s, const char *line)  /* g_lock held */
{
    char **msgs;
    size_t n;
    if (ignored_validation(s, line))
        return;
    s->validation_count++;
    if (s->validation_kept >= PPR_VALIDATION_KEEP)
        return;
    msgs = realloc(s->validation_msgs, (size_t)(s->validation_kept + 1) * sizeof(*msgs));
    if (!msgs)
        return;
    s->validation_msgs = msgs;
    n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        n--;
    msgs[s->validation_kept] = malloc(n + 1);
    if (!msgs[s->validation_kept])
        return;
    memcpy(msgs[s->validation_kept], line, n);
    msgs[s->validation_kept][n] = 0;
    s->validation_kept++;
}

static void deliver(ppr_session *s, int level, const char *line, int from_device)  /* g_lock held */
{
    if (level <= AV_LOG_ERROR)
        append_line(s->av_last, sizeof(s->av_last), &s->av_last_open, line);
    if (s->validation && from_device && line[0] != '\t' &&
        (s->device_ready || looks_like_validation(line)))
        keep_validation(s, line);
}

/* The series' report of failed slices (7.1.5 patch 19, 9.0.2 patch 12) logs
 * each slice the Vulkan hwaccel concealed. */
#define CONCEALED_LINE "concealed slice "

void ppr__add_concealed(ppr_session *s, int picture, int slice)  /* g_lock held */
{
    if (s->nb_concealed == s->concealed_alloc) {
        int n = s->concealed_alloc ? 2 * s->concealed_alloc : 64;
        int *c = realloc(s->concealed, (size_t)n * 2 * sizeof(*c));
        if (!c)
            return;
        s->concealed = c;
        s->concealed_alloc = n;
    }
    s->concealed[2 * s->nb_concealed] = picture;
    s->concealed[2 * s->nb_concealed + 1] = slice;
    s->nb_concealed++;
}

static void log_concealed(void *avcl, const char *fmt, va_list vl)
{
    char line[64];
    const AVClass *cls = avcl ? *(const AVClass **)avcl : NULL;
    ppr_session *s;
    int slice, picture;
    va_list vl2;

    if (!cls || !cls->class_name || strcmp(cls->class_name, "AVCodecContext"))
        return;
    va_copy(vl2, vl);
    vsnprintf(line, sizeof(line), fmt, vl2);
    va_end(vl2);
    if (sscanf(line, CONCEALED_LINE "%d of picture %d", &slice, &picture) != 2)
        return;
    s = ((AVCodecContext *)avcl)->opaque;
    pthread_mutex_lock(&g_lock);
    if (s && session_live(s))
        ppr__add_concealed(s, picture, slice);
    pthread_mutex_unlock(&g_lock);
}

static void log_callback(void *avcl, int level, const char *fmt, va_list vl)
{
    char line[PPR_MSG_SIZE];
    const AVClass *cls = NULL;
    void *cand = NULL;
    shared_device *dev = NULL;
    int from_device = 0;
    ppr_session *s = NULL;
    va_list vl2;

    if (level <= g_user_level) {
        va_copy(vl2, vl);
        av_log_default_callback(avcl, level, fmt, vl2);
        va_end(vl2);
    }
    if (level == AV_LOG_DEBUG && !strncmp(fmt, CONCEALED_LINE, strlen(CONCEALED_LINE)))
        log_concealed(avcl, fmt, vl);
    if (level > AV_LOG_WARNING)
        return;

    vsnprintf(line, sizeof(line), fmt, vl);

    if (avcl)
        cls = *(const AVClass **)avcl;
    if (cls && cls->class_name) {
        if (!strcmp(cls->class_name, "AVCodecContext")) {
            cand = ((AVCodecContext *)avcl)->opaque;
        } else if (!strcmp(cls->class_name, "AVHWDeviceContext")) {
            dev = ((AVHWDeviceContext *)avcl)->user_opaque;
            from_device = 1;
        } else if (!strcmp(cls->class_name, "AVHWFramesContext")) {
            cand = ((AVHWFramesContext *)avcl)->user_opaque;
        }
    }

    pthread_mutex_lock(&g_lock);
    if (cand && session_live(cand))
        s = cand;
    else if (tls_session && session_live(tls_session) &&
             (!dev || tls_session->dev == dev))
        s = tls_session;
    if (s) {
        deliver(s, level, line, from_device);
    } else if (dev && device_live(dev)) {
        /* a shared device's line outside any call of its sessions (e.g. from
         * a driver thread): every session on the device sees it */
        for (s = g_sessions; s; s = s->next)
            if (s->dev == dev)
                deliver(s, level, line, from_device);
    }
    pthread_mutex_unlock(&g_lock);

    if (level <= AV_LOG_ERROR) {
        int open = 0;
        append_line(tls_av_last, sizeof(tls_av_last), &open, line);
    }
}

static void init_once(void)
{
    av_log_set_callback(log_callback);
}

void ppr__ensure_init(void)
{
    pthread_once(&g_once, init_once);
}

void ppr_set_log_level(int level)
{
    ppr__ensure_init();
    g_user_level = level;
    av_log_set_level(level > AV_LOG_WARNING ? level : AV_LOG_WARNING);
}

void ppr__enter(ppr_session *s)
{
    ppr__ensure_init();
    tls_session = s;
    ppr__clear_error();
    tls_av_last[0] = 0;
    if (s) {
        s->err[0] = 0;
        pthread_mutex_lock(&g_lock);
        s->av_last[0] = 0;
        s->av_last_open = 0;
        pthread_mutex_unlock(&g_lock);
    }
}

int ppr__leave(int ret)
{
    tls_session = NULL;
    return ret;
}

void ppr__lock(void) { pthread_mutex_lock(&g_lock); }
void ppr__unlock(void) { pthread_mutex_unlock(&g_lock); }

void ppr__session_add(ppr_session *s)
{
    pthread_mutex_lock(&g_lock);
    s->next = g_sessions;
    g_sessions = s;
    pthread_mutex_unlock(&g_lock);
}

void ppr__session_remove(ppr_session *s)
{
    ppr_session **pp;
    int i;

    pthread_mutex_lock(&g_lock);
    free(s->concealed);
    s->concealed = NULL;
    for (i = 0; i < s->validation_kept; i++)
        free(s->validation_msgs[i]);
    free(s->validation_msgs);
    s->validation_msgs = NULL;
    s->validation_kept = 0;
    free(s->validation_ignore);
    s->validation_ignore = NULL;
    for (pp = &g_sessions; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    pthread_mutex_unlock(&g_lock);
}

shared_device *ppr__device_find(const char *key)  /* g_lock held */
{
    shared_device *d;
    for (d = g_devices; d; d = d->next)
        if (!strcmp(d->key, key))
            return d;
    return NULL;
}

void ppr__device_add(shared_device *d)  /* g_lock held */
{
    d->next = g_devices;
    g_devices = d;
}

void ppr__device_remove(shared_device *d)  /* g_lock held */
{
    shared_device **pp;
    for (pp = &g_devices; *pp; pp = &(*pp)->next)
        if (*pp == d) {
            *pp = d->next;
            break;
        }
}

void ppr__set_current(ppr_session *s)
{
    ppr__ensure_init();
    tls_session = s;
}

int ppr__sfail(ppr_session *s, int code, const char *fmt, ...)
{
    char *err = ppr__thread_error();
    va_list vl;
    va_start(vl, fmt);
    vsnprintf(err, PPR_MSG_SIZE, fmt, vl);
    va_end(vl);
    if (s)
        snprintf(s->err, sizeof(s->err), "%s", err);
    return code;
}

void ppr__last_av_error(ppr_session *s, char *dst, size_t size)
{
    if (s) {
        pthread_mutex_lock(&g_lock);
        snprintf(dst, size, "%s", s->av_last);
        pthread_mutex_unlock(&g_lock);
    } else {
        dst[0] = 0;
    }
    if (!dst[0])
        snprintf(dst, size, "%s", tls_av_last);
}

const char *ppr_last_error(ppr_session *s)
{
    return s ? s->err : ppr__thread_error();
}

int ppr_validation_messages(ppr_session *s)
{
    int n;
    if (!s)
        return 0;
    pthread_mutex_lock(&g_lock);
    n = s->validation_count;
    pthread_mutex_unlock(&g_lock);
    return n;
}

int ppr_validation_enabled(ppr_session *s) { return s ? s->validation : 0; }
const char *ppr_validation_message(ppr_session *s, int i)
{
    const char *m = NULL;
    if (!s)
        return NULL;
    pthread_mutex_lock(&g_lock);
    if (i >= 0 && i < s->validation_kept)
        m = s->validation_msgs[i];
    pthread_mutex_unlock(&g_lock);
    return m;
}
