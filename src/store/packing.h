/* packing.h — the byte layouts of a quantized weight's zero points (w_packing in
 * ir/weights.h names them; packing.c writes them): from the zero points the quantizer gives a
 * band of rows, each row from a whole byte (quant/rtn.h), to the bytes each consumer reads. */
#ifndef FERRY_STORE_PACKING_H
#define FERRY_STORE_PACKING_H

#include <stddef.h>
#include <stdint.h>

#include "ir/weights.h"

/* The zero-point bytes of rows [r0, r0 + rows) of a weight quantized as `q`, `blocks` blocks a
 * row, from `row_zeros` (rtn's: `zero_row` bytes a row, rows padded to whole bytes): *at
 * receives where they go in the zeros part and *len how many; the bytes are `row_zeros`
 * itself or made in *scratch (grown, *cap its size). NULL: out of memory. A band of
 * W_PACK_CONTIGUOUS 4-bit zero points starts on an even row (ws_packing_row_step). */
const uint8_t *ws_pack_zeros(const w_quant *q, size_t r0, size_t rows, size_t blocks,
                             const uint8_t *row_zeros, size_t zero_row, uint8_t **scratch,
                             size_t *cap, uint64_t *at, size_t *len);

/* The rows a band of the weight must be a multiple of, so that no byte of its zero points is
 * written by two bands (2 where 4-bit zero points are packed across rows, else 1). */
int ws_packing_row_step(const w_quant *q);

#endif
