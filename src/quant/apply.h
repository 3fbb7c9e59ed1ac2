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

/* What q_apply left float although the quantizer names it (rows no block size divides): how
 * many weights, the first one's name and its row length; and how many it quantized. */
typedef struct q_kept_float {
    int quantized; /* the weights it did quantize */
    int n;
    char first[256];
    int64_t width;
} q_kept_float;

/* Quantizes the weights of every linear (the model's head, the linear its family declared of
 * role head, only when q->lm_head: a causal LM's lm_head, a classifier's output) and,
 * when q->embeddings, the embedding tables. A weight read both by something quantized and by
 * something not (a tied table when only the head is quantized) is stored twice: the float
 * value keeps its name and the quantized one gets "_q4" / "_q8" appended. For a format whose
 * rows hold whole blocks of at least `whole_block_min` elements (fb_backend), a weight whose
 * rows are no whole number of them stays float, counted into `kept` (Qwen2.5-VL's tower MLP is
 * 3420 wide; rows of whole minimal blocks that the chosen block does not divide are the
 * format's to refuse, naming a block size); with `whole_block_min` 0 a row's last block may be
 * short, and int4 rows of odd length are an error naming the tensor. (Integer-typed
 * checkpoint tensors, as a quantized checkpoint has, never get here: the checkpoint reader
 * refuses them.) */
ferry_status q_apply(g_graph *g, const ferry_quantizer *q, int whole_block_min,
                     q_kept_float *kept, fy_err *err);

#endif
