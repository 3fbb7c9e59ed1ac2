/* text.h — UTF-8 checks, and untrusted text made safe for one terminal line. */
#ifndef FERRY_UTIL_TEXT_H
#define FERRY_UTIL_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence starting at s[0] (at most `avail` bytes), or 0 if the bytes
 * there are not one: overlong forms, surrogates and code points above U+10FFFF are refused, as
 * Rust's str (the safetensors reference) refuses them. */
size_t text_utf8_len(const unsigned char *s, size_t avail);

/* Offset of the first byte that is not valid UTF-8, or `len` if all are. */
size_t text_utf8_invalid_at(const unsigned char *s, size_t len);

/* Whether code point `cp` is escaped on output: C0 and C1 controls, DEL, bidirectional
 * formatting (U+061C, U+200E/F, U+202A-E, U+2066-9), every format (Cf) character of Unicode 15
 * (soft hyphen, prepended concatenation marks such as U+0600-0605, zero-width spaces and
 * joiners, word joiner and invisible operators, byte order mark, interlinear annotation marks,
 * hieroglyph and shorthand format controls, tag characters) and other invisible characters
 * (line and paragraph separators, variation selectors, Hangul fillers, U+FFFE/F). */
bool text_hidden(uint32_t cp);

/* Offset of the first byte of `s` (len bytes) that text_quote would escape: invalid UTF-8, or the
 * start of a code point text_hidden flags (C0, DEL, C1, bidi and invisible format characters);
 * `len` if none. For names refused outright rather than escaped. */
size_t text_hidden_at(const char *s, size_t len);

/* Writes `text` into buf (of `size` >= 8 bytes) fit for one terminal line: C0 controls, DEL and
 * each byte that does not start a valid UTF-8 sequence become \xNN; valid sequences of hidden
 * code points become \uXXXX (two, a UTF-16 surrogate pair, above U+FFFF: so that escaped JSON
 * text stays valid JSON); everything else is copied. A text that does not fit ends in "...",
 * never inside an escape or a sequence. Idempotent: the output is printable ASCII plus visible
 * UTF-8. Returns buf. */
const char *text_quote(const char *text, char *buf, size_t size);
/* (NULL `text` is written as "?".) */
/* A buffer that holds any name a message quotes (longer ones end in "..."). */
#define TEXT_QUOTE_MAX 256

#endif
