/*
 * json_str(): a C string as a JSON string (quotes, backslashes and newlines
 * escaped, other control and non-ASCII bytes as \u00XX). Shared by
 * tools/gpu/probes/startprobe.c and tools/gpu/probes/bwprobe.c, which are built one file each.
 */
#ifndef PYPRORES_JSON_STR_H
#define PYPRORES_JSON_STR_H

#include <stdio.h>

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = *s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c < 0x20 || c >= 0x7f)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

#endif
