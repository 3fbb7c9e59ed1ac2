/* apply.h — which weights an export quantizes. The user's quantizer (ferry_quantizer) is
 * checked once per export, then applied to each component's semantic graph before any target
 * lowering: a quantized weight is only a recipe with block quantization (ir/weights.h), so
 * every backend sees the same decision and prints it its own way (MatMulNBits,
 * DequantizeLinear, OpenVINO's compressed constants). */
#ifndef FERRY_QUANT_APPLY_H
#define FERRY_QUANT_APPLY_H

#include "ferry.h"
#include "ir/ir.h"
#include "util/err.h"

/* Checks the options (bits 0, 4 or 8; block a power of two in [16, 256]; accuracy level in
 * [-1, 4]; no option without bits; scales need fp32 or fp16) and fills the block size's
 * default. Errors name the option. */
ferry_status q_check_config(ferry_quantizer *q, ferry_dtype dtype, fy_err *err);

/* Quantizes the weights of every linear (the model's head, the linear its family declared of
 * role head, only when q->lm_head: a causal LM's lm_head, a classifier's output) and,
 * when q->embeddings, the embedding tables. A weight read both by something quantized and by
 * something not (a tied table when only the head is quantized) is stored twice: the float
 * value keeps its name and the quantized one gets "_q4" / "_q8" appended. Rows need not divide
 * into blocks (the last one is short); int4 rows of odd length are an error naming the
 * tensor. (Integer-typed checkpoint tensors, as a
 * quantized checkpoint has, never get here: the checkpoint reader refuses them.) */
ferry_status q_apply(g_graph *g, const ferry_quantizer *q, fy_err *err);

#endif
