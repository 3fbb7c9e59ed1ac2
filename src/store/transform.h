/* transform.h — a band's values transformed in memory by the weight stream (stream.c): pure
 * functions over buffers, which need not be aligned (a tensor in a safetensors file is not). */
#ifndef FERRY_STORE_TRANSFORM_H
#define FERRY_STORE_TRANSFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/weights.h"

/* [rows, cols] of `esz`-byte elements into [cols, rows], tiled. */
void tf_transpose(uint8_t *restrict dst, const uint8_t *restrict src, size_t rows, size_t cols,
                  size_t esz);
/* The transpose with the conversion fused in, for the widening pairs (bf16 or fp16 to fp32: one
 * pass over memory); false, with nothing written, for a pair that needs convert-then-transpose. */
bool tf_transpose_widen(uint8_t *restrict dst, const uint8_t *restrict src, size_t rows,
                        size_t cols, ferry_dtype from, ferry_dtype to);
/* `n` fp32 values beyond fp16's range set to its largest finite one, in place (a saturating
 * recipe's); NaN stays NaN. -> how many of those were finite and would have rounded to inf
 * (>= 65520): the values the clamp changed. */
uint64_t tf_clamp_to_f16_range(uint8_t *p, size_t n);
/* `n` fp32 values plus `offset`, in place (Gemma's "1 + weight" norms). */
void tf_add_offset(uint8_t *p, size_t n, double offset);

/* Of the `n` values converted from `src` (of `from`) to `out` (of `to`), how many were finite
 * and became +-inf: beyond an fp16 (or bf16) export's range. 0 for any other `to`. */
uint64_t tf_count_overflow(const void *out, ferry_dtype to, const void *src, ferry_dtype from,
                           size_t n);
/* How many of the `n` values at `p` (of float type `dt`; 0 for any other) are NaN or +-inf: a
 * test of the exponent bits, so it takes the values as the checkpoint stores them, whatever
 * their alignment. */
uint64_t tf_count_nonfinite(const void *p, ferry_dtype dt, size_t n);

/* Of `rows` rows of weight `w` quantized with fp16 scales (codes, scales and zeros as
 * rtn_quantize_rows wrote them, each row `code_row`, `scale_row`, `zero_row` bytes, from the
 * values `x`), how many values dequantize, (code - zero) * scale in fp16 as DequantizeLinear
 * computes it, to +-inf or NaN where the checkpoint's were finite, block by block:
 *   - a block holding NaN or inf: none (those are the checkpoint's own, counted as such; its
 *     scale is NaN, rtn.h);
 *   - a block whose fp16 scale overflowed (|max| / qmax past 65504) dequantizes whole to inf or
 *     NaN: its values beyond fp16's range in `x` (>= 65520, as the fp16 conversion makes inf)
 *     are counted, which are what caused it, also added to `*scale_overflowed`;
 *   - else each value dequantized to 65520 and up once rounded, which a zero point's rounding
 *     can make of a value within range.
 * `row` is room for `cols` floats. */
uint64_t tf_count_f16_dequantized_overflow(const g_weight *w, const float *x, size_t rows,
                                           size_t cols, const uint8_t *codes, size_t code_row,
                                           const uint8_t *scales, size_t scale_row,
                                           const uint8_t *zeros, size_t zero_row, float *row,
                                           uint64_t *scale_overflowed);

#endif
