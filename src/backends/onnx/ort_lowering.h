/* ort_lowering.h — what the ort-* targets' lowerings share between ort_target.c (norms,
 * linears, embeddings, the table of lowerings) and ort_attention.c (attention and rope). */
#ifndef FERRY_BACKENDS_ONNX_ORT_LOWERING_H
#define FERRY_BACKENDS_ONNX_ORT_LOWERING_H

#include "backends/onnx/onnx.h"

/* The export's options, which every ort-* target carries as its opts. */
static inline const ferry_export_config *ort_cfg(const g_lower_ctx *c)
{
    return c->target->opts;
}

/* Input k of n (a stored weight) plus `offset` (Gemma's 1 + w) as a weight recipe, else
 * computed. */
int ort_offset_weight(g_lower_ctx *c, const g_node *n, int k, double offset);

/* GroupQueryAttention, MultiHeadAttention or plain ops, per provider and shape. */
ferry_status ort_attention(g_lower_ctx *c, const g_node *n, int *outs);
/* com.microsoft.MoE where the provider has a kernel for it; else the generic lowering. */
ferry_status ort_moe(g_lower_ctx *c, const g_node *n, int *outs);
/* RotaryEmbedding over a fixed table; else the generic lowering. */
ferry_status ort_rope(g_lower_ctx *c, const g_node *n, int *outs);

#endif
