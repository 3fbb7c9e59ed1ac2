/* text.c — UTF-8 decoding and the escaping every message, warning and printed name goes
 * through, so that nothing from a file can drive or disguise the terminal it is shown on. */
#include "util/text.h"

#include <string.h>

size_t text_utf8_len(const unsigned char *s, size_t avail)
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

size_t text_utf8_invalid_at(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        size_t n = text_utf8_len(s + i, len - i);
        if (n == 0)
            return i;
        i += n;
    }
    return len;
}

/* C1 controls drive terminals as their ESC-sequence twins do (U+009B is CSI); bidi controls
 * reorder what is shown (a name can display as another); the invisible characters make two
 * different names look alike or hide text in plain sight. The table holds every format (Cf)
 * character of Unicode 15 — the prepended concatenation marks (Arabic number signs U+0600-0605,
 * end of ayah U+06DD and U+08E2, pound and piastre marks U+0890-0891, Syriac abbreviation mark
 * U+070F, Kaithi number signs U+110BD and U+110CD) modify the characters around them without a
 * glyph of their own, as do Egyptian hieroglyph format controls U+13430-1343F and shorthand
 * format controls U+1BCA0-1BCA3 — plus other invisible characters (combining grapheme joiner,
 * Hangul fillers, Khmer inherent vowels, Mongolian variation selectors, line and paragraph
 * separators, variation selectors, noncharacters U+FFFE/F). */
bool text_hidden(uint32_t cp)
{
    static const struct { uint32_t lo, hi; } ranges[] = {
        {0x0000, 0x001F}, {0x007F, 0x009F}, {0x00AD, 0x00AD}, {0x034F, 0x034F},
        {0x0600, 0x0605}, {0x061C, 0x061C}, {0x06DD, 0x06DD}, {0x070F, 0x070F},
        {0x0890, 0x0891}, {0x08E2, 0x08E2}, {0x115F, 0x1160}, {0x17B4, 0x17B5},
        {0x180B, 0x180F}, {0x200B, 0x200F}, {0x2028, 0x202E}, {0x2060, 0x206F},
        {0x3164, 0x3164}, {0xFE00, 0xFE0F}, {0xFEFF, 0xFEFF}, {0xFFA0, 0xFFA0},
        {0xFFF9, 0xFFFB}, {0xFFFE, 0xFFFF}, {0x110BD, 0x110BD}, {0x110CD, 0x110CD},
        {0x13430, 0x1343F}, {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A}, {0xE0000, 0xE007F},
        {0xE0100, 0xE01EF},
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        if (cp >= ranges[i].lo && cp <= ranges[i].hi)
            return true;
    return false;
}

static uint32_t decode(const unsigned char *s, size_t len)
{
    static const unsigned char lead_mask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    uint32_t cp = s[0] & lead_mask[len];
    for (size_t i = 1; i < len; i++)
        cp = (cp << 6) | (s[i] & 0x3F);
    return cp;
}

size_t text_hidden_at(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        size_t n = text_utf8_len(s + i, len - i);
        if (n == 0 || text_hidden(n == 1 ? s[i] : decode(s + i, n)))
            return i;
        i += n;
    }
    return len;
}

static size_t put_hex(char *out, char kind, uint32_t v, int digits)
{
    static const char hex[] = "0123456789abcdef";
    out[0] = '\\';
    out[1] = kind;
    for (int d = 0; d < digits; d++)
        out[2 + d] = hex[(v >> (4 * (digits - 1 - d))) & 15];
    return 2 + (size_t)digits;
}

const char *text_quote(const char *text, char *buf, size_t size)
{
    if (!text)
        text = "?";
    const unsigned char *s = (const unsigned char *)text;
    size_t len = strlen(text), o = 0;

    for (size_t i = 0; i < len;) {
        char piece[12];
        size_t n = text_utf8_len(s + i, len - i), plen;
        if (n == 0 || s[i] < 0x20 || s[i] == 0x7F) {
            plen = put_hex(piece, 'x', s[i], 2);
            n = 1;
        } else if (n > 1 && text_hidden(decode(s + i, n))) {
            uint32_t cp = decode(s + i, n);
            if (cp > 0xFFFF) {
                cp -= 0x10000;
                plen = put_hex(piece, 'u', 0xD800 + (cp >> 10), 4);
                plen += put_hex(piece + plen, 'u', 0xDC00 + (cp & 0x3FF), 4);
            } else {
                plen = put_hex(piece, 'u', cp, 4);
            }
        } else {
            memcpy(piece, s + i, n);
            plen = n;
        }
        if (o + plen + 4 > size) {   /* keep room for "..." and the NUL */
            memcpy(buf + o, "...", 4);
            return buf;
        }
        memcpy(buf + o, piece, plen);
        o += plen;
        i += n;
    }
    buf[o] = '\0';
    return buf;
}
