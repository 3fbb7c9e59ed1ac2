/* strbuf.c — growable text buffer. */
#include "util/strbuf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/grow.h"

static bool reserve(strbuf *b, size_t extra)
{
    if (b->oom)
        return false;
    char *grown = extra < SIZE_MAX - 1 - b->len ? fy_grow(b->data, &b->cap, b->len + extra + 1, 1)
                                                : NULL;
    if (!grown) {
        b->oom = true;
        return false;
    }
    b->data = grown;
    return true;
}

void sb_printf(strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0 || !reserve(b, (size_t)need))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)need;
}

void sb_puts(strbuf *b, const char *s)
{
    size_t n = strlen(s);
    if (!reserve(b, n))
        return;
    memcpy(b->data + b->len, s, n + 1);
    b->len += n;
}

void sb_putn(strbuf *b, const void *data, size_t n)
{
    if (!reserve(b, n))
        return;
    if (n)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
}

char *sb_take(strbuf *b)
{
    char *out = NULL;
    if (!b->oom && reserve(b, 0)) {
        b->data[b->len] = '\0';
        out = b->data;
        b->data = NULL;
    }
    sb_free(b);
    return out;
}

void sb_free(strbuf *b)
{
    free(b->data);
    *b = (strbuf){0};
}
