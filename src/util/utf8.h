/* utf8.h — strict UTF-8 validation, shared by every reader that must refuse what Python's and
 * Rust's decoders refuse (transformers reads JSON through the former, safetensors through the
 * latter). */
#ifndef FERRY_UTIL_UTF8_H
#define FERRY_UTIL_UTF8_H

#include <stddef.h>

/* Length of the valid UTF-8 sequence starting at s[0] (at most `avail` bytes, avail >= 1), or
 * 0 if the bytes there are not one: overlong forms, surrogates and code points above U+10FFFF
 * are refused. */
size_t utf8_sequence_len(const unsigned char *s, size_t avail);

/* Offset of the first byte that is not valid UTF-8, or `len` if all are. */
size_t utf8_invalid_at(const unsigned char *s, size_t len);

#endif
