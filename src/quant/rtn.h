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
 *   the scale is then stored in the scale dtype (fp32, fp16, or bf16 as XNNPACK reads block
 *   scales), and the codes use the stored
 *   value: code = clamp(round(x * (1 / scale) + zero), 0, L) (every code = zero when scale is 0);
 *   round = to nearest, ties away from zero.
 *   A block holding NaN or +-inf gets a NaN scale, every code and its zero point the mid code
 *   M: each runtime's dequantization then gives NaN for the whole block, as the checkpoint's
 *   non-finite weights give transformers non-finite outputs, where any finite scale would make
 *   them finite weights without a word. (onnxruntime's quantizer has no such rule.)
 * These are the arithmetic and rounding points of onnxruntime's blockwise quantizer (the one
 * behind MatMulNBits' quantize_matmul_4bits/8bits): tests/python/test_quant_vs_ort.py checks the
 * bytes against it, so an export's int4 weights are the ones onnxruntime's own tools make.
 *
 * With `search` (the quantizer's "mse" method) the scale is searched per block instead: the
 * rules above applied to the range shrunk by a factor f (symmetric: v * f; asymmetric: lo' * f
 * and hi' * f) for f = 1, 1 - 1/32, ..., 1/2 (RTN_SEARCH_STEPS + 1 candidates), keeping the
 * first f whose codes give the least sum of (x - (code - zero) * scale)^2 * x^2 (fp32, summed
 * in four lanes) and stopping after RTN_SEARCH_PATIENCE candidates in a row that do no better
 * (the error rarely falls again once it has risen that long; the search costs ~4x RTN). Clipping the
 * extremes buys finer steps for the rest; weighting each error by the weight's own square keeps
 * the large weights, which matter most, precise (unweighted, the search clips them and a
 * 128-wide block loses quality: measured on SmolLM2, docs/benchmarks-quantization.md). f = 1
 * is RTN, so a block's weighted error is never above RTN's. */
#define RTN_SEARCH_STEPS 16
#define RTN_SEARCH_PATIENCE 3
#ifndef FERRY_QUANT_RTN_H
#define FERRY_QUANT_RTN_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

/* The `symmetric` argument: asymmetric, symmetric as above (onnxruntime's: a block whose
 * extreme is positive gets a negative scale, mapping it to code 0), or symmetric with every
 * scale positive and normal, as XNNPACK's blockwise int4 requires: a positive extreme v maps to
 * +(M - 1) (scale v / (M - 1)), a negative one to -M (scale v / -M, as above), an all-zero
 * block gets scale 1, and no scale is below the smallest normal float. */
enum { RTN_ASYMMETRIC = 0, RTN_SYMMETRIC = 1, RTN_SYMMETRIC_POSITIVE = 2 };

/* rtn_quantize_rows with unpadded code rows (code_row = cols). */
void rtn_quantize(const float *x, size_t rows, size_t cols, int bits, int block, int symmetric,
                  ferry_dtype scale_dtype, uint8_t *codes, void *scales, uint8_t *zeros);

/* Quantizes `rows` rows of `cols` fp32 values (row stride `cols`), scales by RTN or, with
 * `search`, searched (above), into:
 *   codes  rows of `code_row` codes, code_row * bits / 8 bytes each (4-bit: two per byte, low
 *          nibble first): code_row = cols, or ceil(cols / block) * block where a short last
 *          block is padded (MatMulNBits' B) with the zero code
 *   scales rows * ceil(cols / block) values of `scale_dtype` (FERRY_F32, FERRY_F16 or FERRY_BF16)
 *   zeros  (asymmetric, may be NULL when symmetric) rows * ceil(ceil(cols / block) * bits / 8)
 *          bytes, packed like the codes, each row padded to whole bytes (a pad nibble is 8).
 * A short last block is quantized over the elements it has, which gives what onnxruntime's
 * quantizer gives for it (it reads the missing ones as zeros). `block` even, at most 256;
 * 4-bit rows need an even `cols`. */
void rtn_quantize_rows(const float *x, size_t rows, size_t cols, int bits, int block,
                       int symmetric, int search, ferry_dtype scale_dtype, size_t code_row,
                       uint8_t *codes, void *scales, uint8_t *zeros);

/* (code - zero) * scale for one row, for tests and checks. */
void rtn_dequantize_row(const uint8_t *codes, const void *scales, const uint8_t *zeros,
                        size_t cols, int bits, int block, int symmetric, ferry_dtype scale_dtype,
                        float *out);

#endif
