/* packing.c — a quantized weight's zero points in the layout its consumer reads (w_packing). */
#include "store/packing.h"

#include <stdlib.h>
#include <string.h>

static uint8_t *room(uint8_t **scratch, size_t *cap, size_t n)
{
    if (*cap >= n)
        return *scratch;
    uint8_t *p = realloc(*scratch, n);
    if (!p)
        return NULL;
    *scratch = p;
    *cap = n;
    return p;
}

int ws_packing_row_step(const w_quant *q)
{
    return q->packing == W_PACK_CONTIGUOUS && !q->symmetric && q->bits == 4 ? 2 : 1;
}

const uint8_t *ws_pack_zeros(const w_quant *q, size_t r0, size_t rows, size_t blocks,
                             const uint8_t *row_zeros, size_t zero_row, uint8_t **scratch,
                             size_t *cap, uint64_t *at, size_t *len)
{
    uint8_t *out;
    if (q->packing == W_PACK_CONTIGUOUS && q->symmetric) {
        /* Every zero point is the mid code, packed contiguously over the whole tensor: this
         * band writes the bytes its rows' nibbles start in, a byte it shares with the previous
         * band being that band's (no byte is written twice: direct.h's pages must not be). */
        uint64_t bits_per_row = (uint64_t)blocks * (uint64_t)q->bits;
        uint64_t first = ((uint64_t)r0 * bits_per_row + 7) / 8;
        uint64_t end = (((uint64_t)r0 + rows) * bits_per_row + 7) / 8;
        if (!(out = room(scratch, cap, (size_t)(end - first) + 1)))
            return NULL;
        memset(out, q->bits == 4 ? 0x88 : 0x80, (size_t)(end - first));
        *at = first;
        *len = (size_t)(end - first);
        return out;
    }
    if (q->packing == W_PACK_CONTIGUOUS && q->bits == 4) {
        /* packed across rows: this band's nibbles from nibble r0 * blocks on, which is a byte's
         * first (bands start on an even row: ws_packing_row_step); a last band of odd rows and
         * blocks ends on a low nibble, its high one the pad */
        size_t nibbles = rows * blocks, bytes = (nibbles + 1) / 2;
        if (!(out = room(scratch, cap, bytes)))
            return NULL;
        memset(out, 0, bytes);
        for (size_t r = 0; r < rows; r++)
            for (size_t k = 0; k < blocks; k++) {
                uint8_t pair = row_zeros[r * zero_row + k / 2];
                size_t i = r * blocks + k;
                out[i / 2] |= (uint8_t)((k % 2 ? pair >> 4 : pair & 0x0f) << (i % 2 * 4));
            }
        *at = (uint64_t)r0 * blocks / 2;
        *len = bytes;
        return out;
    }
    if (q->packing == W_PACK_ZERO_BYTES) {
        /* one zero point a byte: each row's nibbles (low first) spread out */
        if (!(out = room(scratch, cap, rows * blocks)))
            return NULL;
        for (size_t r = 0; r < rows; r++)
            for (size_t k = 0; k < blocks; k++) {
                uint8_t pair = row_zeros[r * zero_row + k / 2];
                out[r * blocks + k] = k % 2 ? pair >> 4 : pair & 0x0f;
            }
        *at = (uint64_t)r0 * blocks;
        *len = rows * blocks;
        return out;
    }
    /* each row from a whole byte, as the quantizer wrote them (8-bit rows are whole bytes in
     * every layout) */
    *at = (uint64_t)r0 * zero_row;
    *len = rows * zero_row;
    return row_zeros;
}
