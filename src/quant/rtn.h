/* rtn.h — round-to-nearest block quantization of weight rows into ferry's one int4/int8 packing
 * (ir/weights.h describes it). Pure functions over caller buffers: the weight stream calls them
 * band by band on its worker threads.
 *
 * Per block of `block` consecutive elements of a row, with B = bits, L = 2^B - 1:
 *   symmetric:  v = the element of largest magnitude (the first one on ties);
 *               scale = v / -2^(B-1); zero = 2^(B-1) (implicit)
 *   asymmetric: lo = min(0, min x), hi = max(0, max x); scale = (hi - lo) / L;
 *               zero = clamp(round(-lo / scale), 0, L)
 *   scale is rounded to the scale dtype (fp32 or fp16) first; codes use the rounded scale:
 *   code = clamp(round(x / scale) + zero, 0, L), round = to nearest, ties to even.
 *   A block whose scale is 0 (all zeros) gets codes = zero.
 * This is the arithmetic of onnxruntime's blockwise quantizer (MatMulNBits), so exports match
 * the builder's quality at the same block size. */
#ifndef FERRY_QUANT_RTN_H
#define FERRY_QUANT_RTN_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

/* Quantizes `rows` rows of `cols` fp32 values (row stride `cols`) into:
 *   codes  rows * cols * bits / 8 bytes (4-bit: two per byte, low nibble first)
 *   scales rows * (cols / block) values of `scale_dtype` (FERRY_F32 or FERRY_F16)
 *   zeros  (asymmetric, may be NULL when symmetric) rows * ceil((cols / block) * bits / 8)
 *          bytes, packed like the codes, each row padded to whole bytes.
 * `cols` must be a multiple of `block`; `block` even. */
void rtn_quantize(const float *x, size_t rows, size_t cols, int bits, int block, int symmetric,
                  ferry_dtype scale_dtype, uint8_t *codes, void *scales, uint8_t *zeros);

/* (code - zero) * scale for one row, for tests and checks. */
void rtn_dequantize_row(const uint8_t *codes, const void *scales, const uint8_t *zeros,
                        size_t cols, int bits, int block, int symmetric, ferry_dtype scale_dtype,
                        float *out);

#endif
