/* strbuf.h — a growable text buffer for building dumps and descriptions. A failed allocation
 * sets `oom` and later appends are dropped, so callers check once at the end. */
#ifndef FERRY_UTIL_STRBUF_H
#define FERRY_UTIL_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct strbuf {
    char *data;              /* NUL-terminated once anything was appended */
    size_t len, cap;
    bool oom;
} strbuf;

void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_puts(strbuf *b, const char *s);
/* Appends `n` bytes, NULs included (a binary buffer: `len` counts them). */
void sb_putn(strbuf *b, const void *data, size_t n);
/* Hands the text over (the caller frees it); NULL after an allocation failure. The buffer is
 * empty afterwards. */
char *sb_take(strbuf *b);
void sb_free(strbuf *b);

#endif
