/* torch_target.c — the torch target (the .pt2 backend): aten ops at the level torch.export
 * produces before decompositions.
 *
 *   linear, embedding, silu, gelu, layer_norm   kept: aten.linear, aten.embedding, aten.silu,
 *               aten.gelu, aten.layer_norm (the aten emitter, aten_nodes.c, spells them)
 *   linear of a weight stored [in, out]   transformers' Conv1D (GPT-2's): aten.matmul by the
 *               weight as stored, [in, out], so that the program's state dict is the
 *               checkpoint's, then aten.add of the bias (Conv1D's forward is one addmm over x
 *               viewed 2-D, whose row count batch * sequence a pt2 shape cannot say)
 *   attention   aten.scaled_dot_product_attention over [b, h, s, d] queries and the keys and
 *               values as the cache step leaves them ([b, kvh, t, d]); grouped kv heads by
 *               enable_gqa, so no repeated K/V is ever made; ferry's mask as an additive bias
 *               (a row that sees no key, a padded query, then averages instead of giving NaN,
 *               which a bool mask would spread through the next layer's values), or no
 *               attn_mask at all where every key is visible. A softcapped
 *               attention keeps the generic scores (matmuls, softmax): SDPA takes no
 *               softcap. A static cache is written in place (aten_attention_kv,
 *               src/backends/aten), whichever computes the scores.
 * Everything else takes the generic lowerings (ir/lower/): RMSNorm as transformers writes it
 * (in fp32, then back), rotary from inv_freq in the graph, as transformers computes it. */
#include <stdio.h>

#include "backends/torch/torch.h"

static const int64_t to_bnsd[4] = {0, 2, 1, 3};

static bool quantized(const g_graph *g, const g_node *n, int k)
{
    return k < n->n_in && n->in[k] != G_NONE && g->values[n->in[k]].kind == GV_WEIGHT &&
           g->values[n->in[k]].weight.quant.bits;
}

static bool conv1d(const g_graph *g, const g_node *n)
{
    const g_value *w = &g->values[n->in[1]];
    return w->kind == GV_WEIGHT && w->weight.src_transposed && !w->weight.quant.bits;
}

static g_legality torch_legal(const g_target *t, const g_graph *g, const g_node *n)
{
    (void)t;
    switch (n->op) {
    case G_LINEAR: return quantized(g, n, 1) || conv1d(g, n) ? G_LOWER : G_NATIVE;
    case G_EMBEDDING: return quantized(g, n, 0) ? G_LOWER : G_NATIVE;
    case G_SILU: case G_GELU: case G_GELU_TANH: case G_LAYER_NORM: return G_NATIVE;
    default: return g_op_is_semantic(n->op) ? G_LOWER : G_NATIVE;
    }
}

static ferry_status torch_attention(g_lower_ctx *c, const g_node *n, int *outs)
{
    const g_attn_opts *o = n->a.attn;
    g_graph *g = c->dst;
    int q = lw_in(c, n, 0), k, v;
    aten_attention_kv(c, n, &k, &v, outs);
    if (!g_ok(g))
        return g->err.status;
    if (o->softcap > 0)
        return lower_attention_over(c, n, k, v, outs);
    ferry_dtype dt = g->values[q].dtype;
    int bias = lw_attention_bias(c, n, q, dt);
    int position_bias = lw_in(c, n, 7); /* [b or 1, h, s, t], added to the mask's */
    if (position_bias != G_NONE) {
        int pb = g_cast(g, "cast_position_bias", position_bias, dt);
        bias = bias == G_NONE ? pb : g_binary(g, G_ADD, "add_position_bias", bias, pb);
    }
    int qt = g_transpose(g, "transpose_q", q, 4, to_bnsd);
    if (!g_ok(g))
        return g->err.status;
    g_extern e = g_extern_init(ATEN_DOMAIN, ATEN_SDPA);
    g_extern_float(&e, "scale", o->scale);
    g_extern_bool(&e, "enable_gqa", o->num_heads != o->num_kv_heads);
    g_shape out = g->values[qt].shape; /* [b, h, s, d] */
    g_extern_out(&e, 0, 0, dt, &out);
    int in[4] = {qt, k, v, bias};
    int y = g_extern_node(g, "sdpa", &e, 4, in);
    int64_t out3[3] = {0, 0, o->num_heads * o->head_dim};
    y = g_reshape_spec(g, "reshape_out", g_transpose(g, "transpose_out", y, 4, to_bnsd), 3, out3);
    lw_refine(c, y, n, 0);
    outs[0] = y;
    return g->err.status;
}

static ferry_status torch_linear(g_lower_ctx *c, const g_node *n, int *outs)
{
    if (!conv1d(c->src, n))
        return lower_linear(c, n, outs);
    g_graph *g = c->dst;
    const g_value *w = lw_src(c, n, 1);
    g_weight stored = w->weight;
    stored.transpose = true; /* [in, out], as the checkpoint holds it */
    int y = g_matmul(g, "matmul", lw_in(c, n, 0), g_weight_value(g, w->name, &stored), false);
    if (n->n_in > 2 && n->in[2] != G_NONE)
        y = g_binary(g, G_ADD, "add", y, lw_in(c, n, 2));
    outs[0] = y;
    return g->err.status;
}

static g_lower_fn torch_lowering(const g_target *t, g_op op)
{
    (void)t;
    return op == G_ATTENTION ? torch_attention : op == G_LINEAR ? torch_linear : NULL;
}

const g_target torch_target = {.name = "torch", .legal = torch_legal,
                               .lowering = torch_lowering};
