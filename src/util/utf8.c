/* utf8.c — strict UTF-8 validation. */
#include "util/utf8.h"

size_t utf8_sequence_len(const unsigned char *s, size_t avail)
{
    unsigned c = s[0];
    size_t len;
    unsigned min_second = 0x80, max_second = 0xBF;

    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) min_second = 0xA0;       /* overlong */
        if (c == 0xED) max_second = 0x9F;       /* UTF-16 surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) min_second = 0x90;       /* overlong */
        if (c == 0xF4) max_second = 0x8F;       /* above U+10FFFF */
    } else {
        return 0;
    }
    if (avail < len || s[1] < min_second || s[1] > max_second)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

size_t utf8_invalid_at(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        size_t n = utf8_sequence_len(s + i, len - i);
        if (n == 0)
            return i;
        i += n;
    }
    return len;
}
