/*
 * errors.c - the calling thread's error message and the error codes' names.
 * See pyprores.h for the API.
 */
#include <stdarg.h>
#include <stdio.h>

#include <libavutil/error.h>

#include "internal.h"

static __thread char tls_err[PPR_MSG_SIZE];
static __thread char tls_strerror[128];

char *ppr__thread_error(void) { return tls_err; }
void ppr__clear_error(void) { tls_err[0] = 0; }

int ppr__fail(int code, const char *fmt, ...)
{
    va_list vl;
    va_start(vl, fmt);
    vsnprintf(tls_err, sizeof(tls_err), fmt, vl);
    va_end(vl);
    return code;
}

const char *ppr_strerror(int code)
{
    switch (code) {
    case PPR_OK:         return "success";
    case PPR_EINVAL:     return "invalid argument";
    case PPR_ENOTPRORES: return "not a ProRes frame";
    case PPR_ENODEVICE:  return "no usable Vulkan device";
    case PPR_ENOHWACCEL: return "this FFmpeg build has no ProRes Vulkan hwaccel";
    case PPR_ETRUNCATED: return "truncated ProRes frame";
    case PPR_EDECODE:    return "ProRes decoding failed";
    case PPR_ENOMEM:     return "out of memory";
    case PPR_EAGAIN:     return "receive frames first, then send the packet again";
    case PPR_EFORMAT:    return "this FFmpeg build cannot read the file";
    case PPR_ENOFILE:    return "no such file";
    }
    if (av_strerror(code, tls_strerror, sizeof(tls_strerror)) < 0)
        snprintf(tls_strerror, sizeof(tls_strerror), "unknown error %d", code);
    return tls_strerror;
}
