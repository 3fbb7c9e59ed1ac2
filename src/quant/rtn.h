/* rtn.h — round-to-nearest block quantization of weight rows into ferry's one int4/int8 packing
 * (ir/weights.h describes it). Pure functions over caller buffers: the weight stream calls them
 * band by band on its worker threads.
 *
 * Per block of `block` consecutive elements of a row, with B = bits, L = 2^B - 1, M = 2^(B-1),
 * lo and hi the block's smallest and largest values:
 *   symmetric:  v = hi if |hi| > |lo| else lo (ties: the negative one); scale = v / -M; the
 *               zero point is M (implicit)
 *   asymmetric: lo' = min(0, lo), hi' = max(0, hi); s = (hi' - lo') / L (fp32);
 *               zero = clamp(round(-lo' / s), 0, L) (0 when s is 0); scale = s
 *   the scale is then stored in the scale dtype (fp32 or fp16), and the codes use the stored
 *   value: code = clamp(round(x * (1 / scale) + zero), 0, L) (every code = zero when scale is 0);
 *   round = to nearest, ties away from zero.
 * These are the arithmetic and rounding points of onnxruntime's blockwise quantizer (the one
 * behind MatMulNBits' quantize_matmul_4bits/8bits): tests/python/test_quant_vs_ort.py checks the
 * bytes against it, so an export's int4 weights are the ones onnxruntime's own tools make. */
#ifndef FERRY_QUANT_RTN_H
#define FERRY_QUANT_RTN_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

/* Quantizes `rows` rows of `cols` fp32 values (row stride `cols`) into:
 *   codes  rows * cols * bits / 8 bytes (4-bit: two per byte, low nibble first)
 *   scales rows * (cols / block) values of `scale_dtype` (FERRY_F32 or FERRY_F16)
 *   zeros  (asymmetric, may be NULL when symmetric) rows * ceil((cols / block) * bits / 8)
 *          bytes, packed like the codes, each row padded to whole bytes (a pad nibble is 8).
 * `cols` must be a multiple of `block`; `block` even. */
void rtn_quantize(const float *x, size_t rows, size_t cols, int bits, int block, int symmetric,
                  ferry_dtype scale_dtype, uint8_t *codes, void *scales, uint8_t *zeros);

/* (code - zero) * scale for one row, for tests and checks. */
void rtn_dequantize_row(const uint8_t *codes, const void *scales, const uint8_t *zeros,
                        size_t cols, int bits, int block, int symmetric, ferry_dtype scale_dtype,
                        float *out);

#endif
