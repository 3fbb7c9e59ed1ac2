/* crc_pieces.h — the CRC-32 (zip's, zlib's, `crc32`'s) of a file written in pieces, in any
 * order and from any thread, without reading it back.
 *
 * A CRC-32 is linear over GF(2): a file's is the sum of each piece's own remainder, moved to
 * where the piece ends. Each piece is moved to a place relative to its end offset alone (by
 * x^(-8 * end)), so the sum can be taken before the file's length is known, in any order, and
 * is moved to the file's end once (fy_crc_pieces_value). Bytes never written (holes, padding
 * left by ftruncate) are zeros and add nothing. A byte must be written once, or over zeros. */
#ifndef FERRY_UTIL_CRC_PIECES_H
#define FERRY_UTIL_CRC_PIECES_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct fy_crc_pieces {
    uint32_t sum;            /* 0: nothing written; added to atomically */
} fy_crc_pieces;

/* Adds the `n` bytes written at `offset`; safe from several threads at once. */
void fy_crc_pieces_add(fy_crc_pieces *c, const void *data, size_t n, uint64_t offset);
/* Adds a piece known by its CRC-32 alone: `n` bytes at `offset` whose CRC-32 is `crc`. */
void fy_crc_pieces_add_crc(fy_crc_pieces *c, uint32_t crc, uint64_t n, uint64_t offset);
/* fy_crc_pieces_add with a ws_observer's signature (`user` is the fy_crc_pieces). */
void fy_crc_pieces_observer(void *user, const void *data, size_t n, uint64_t offset);
/* The CRC-32 of a file of `size` bytes holding what was added (and zeros elsewhere). */
uint32_t fy_crc_pieces_value(const fy_crc_pieces *c, uint64_t size);

/* The CRC-32 of `len` bytes. */
uint32_t fy_crc32(const void *data, size_t len);
/* The CRC-32 of the whole file `path`, read in order; its size in `*size`. I/O errors name it. */
ferry_status fy_crc32_file(const char *path, uint32_t *crc, uint64_t *size, fy_err *err);

#endif
