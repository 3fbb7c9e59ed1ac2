/* et_target.c — the ExecuTorch target: what stays one aten op (the aten emitter spells it,
 * et_kernels.c makes it the runtime's out kernel) and what takes the generic lowerings.
 *
 *   linear, embedding, gelu, layer_norm   kept: aten::linear.out, aten::embedding.out,
 *               aten::gelu.out, aten::native_layer_norm.out
 *   silu        the generic x * sigmoid(x): the runtime registers no silu kernel
 *   attention   the generic lowering (matmuls, the mask, softmax), its scores computed keys
 *               first (every transpose here is a copy: so the cache's keys are never copied),
 *               each matmul a bmm over its batch dims; a static cache's new rows written into
 *               the cache tensor itself (aten_attention_kv: aten::index_put_), as a module that
 *               owns its cache writes it
 *               With backend xnnpack the mask is added to the scores, once made as a bias,
 *               so XNNPACK computes scores to probabilities in one graph.
 *   rotary      with backend xnnpack, rotate_half as a linear by a constant matrix of +-1
 *               (lower_rope_by_matrix), which XNNPACK runs with the products around it where
 *               the slices and concatenation of the generic one would each stop its graph
 * Everything else takes the generic lowerings (ir/lower/): RMSNorm and rotary as transformers
 * computes them. */
#include "backends/executorch/executorch.h"

static g_legality et_legal(const g_target *t, const g_graph *g, const g_node *n)
{
    (void)t, (void)g;
    switch (n->op) {
    case G_LINEAR: case G_EMBEDDING: case G_GELU: case G_GELU_TANH: case G_LAYER_NORM:
        return G_NATIVE;
    default: return g_op_is_semantic(n->op) ? G_LOWER : G_NATIVE;
    }
}

/* backend xnnpack: the program's matrix products run in XNNPACK, its slices and selects on
 * portable kernels */
static bool delegates(const g_target *t)
{
    return t->opts && be_option_value(t->opts, &fb_executorch, "backend") == 1;
}

static ferry_status et_attention(g_lower_ctx *c, const g_node *n, int *outs)
{
    int k, v;
    aten_attention_kv(c, n, &k, &v, outs);
    return lower_attention_keys_first(c, n, k, v, outs, delegates(c->target));
}

static g_lower_fn et_lowering(const g_target *t, g_op op)
{
    if (op == G_ROPE && delegates(t))
        return lower_rope_by_matrix;
    return op == G_ATTENTION ? et_attention : NULL;
}

const g_target et_target = {.name = "executorch", .legal = et_legal, .lowering = et_lowering};
