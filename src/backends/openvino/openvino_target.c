/* openvino_target.c — the OpenVINO target: every semantic op lowered to OpenVINO's operations,
 * in the forms its CPU plugin fuses.
 *
 *   linear      MatMul(x, W, transpose_b) over the weight as stored ([out, in]); a block-
 *               quantized W is its decompression (printed as OpenVINO's compressed-weight
 *               pattern, Const u4/u8 → Convert → Subtract zero → Multiply scale → Reshape),
 *               which the plugin runs as a FullyConnected on the compressed weights
 *   embedding   Gather over the table, likewise decompressed when quantized
 *   attention   ScaledDotProductAttention (opset13) over [b, h, s, d] queries and the keys and
 *               values as the cache step leaves them, ferry's mask as its additive bias. Grouped
 *               kv heads reach it as Unsqueeze → Broadcast(bidirectional) → Reshape: the
 *               pattern the CPU plugin folds, with the ReadValue → Gather(beam_idx) → Concat →
 *               Assign cache around it, into one attention node that keeps the cache itself and
 *               never materialises the repeat. SDPA takes no softcap: a softcapped attention
 *               keeps the generic lowering (grouped matmuls, softmax).
 * Everything else takes the generic lowerings (ir/lower/). */
#include <stdio.h>

#include "backends/openvino/openvino.h"

static const int64_t to_bnsd[4] = {0, 2, 1, 3};

static g_legality openvino_legal(const g_target *t, const g_graph *g, const g_node *n)
{
    (void)t;
    (void)g;
    return g_op_is_semantic(n->op) ? G_LOWER : G_NATIVE;
}

/* The destination value of weight input k of `n`: decompressed to float when block-quantized.
 * OpenVINO's pattern reshapes [out, in/block, block] codes to [out, in], so a row must hold
 * whole blocks. */
static int float_weight(g_lower_ctx *c, const g_node *n, int k)
{
    g_graph *g = c->dst;
    const g_value *w = lw_src(c, n, k);
    if (!w || w->kind != GV_WEIGHT || !w->weight.quant.bits)
        return lw_in(c, n, k);
    int64_t rows, cols, block = w->weight.quant.block;
    w_matrix(&w->weight, &rows, &cols);
    if (cols % block)
        return g_fail(g, FERRY_ERR_UNSUPPORTED, "OpenVINO cannot hold '%s' in blocks of %lld: "
                      "its rows of %lld are not whole blocks, and OpenVINO's compressed weights "
                      "are [out, in/block, block] (choose a block size that divides %lld)",
                      w->name, (long long)block, (long long)cols, (long long)cols);
    g_weight r = w->weight;
    r.quant.pad_blocks = false;
    r.quant.explicit_zeros = false;
    /* 4-bit zero points are packed a whole byte per row; with an odd number of blocks a row
     * that is not the flat stream a u4 constant is, so they are stored one a byte (u8) */
    r.quant.zeros_bytes = r.quant.bits == 4 && !r.quant.symmetric && (cols / block) % 2;
    return g_dequantize(g, "Decompress", g_weight_value(g, w->name, &r));
}

static ferry_status ov_linear(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    int y = g_matmul(g, "MatMul", lw_in(c, n, 0), float_weight(c, n, 1), true);
    if (n->n_in > 2 && n->in[2] != G_NONE)
        y = g_binary(g, G_ADD, "Add", y, lw_in(c, n, 2));
    outs[0] = y;
    return g->err.status;
}

static ferry_status ov_embedding(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    outs[0] = g_gather(g, "Gather", float_weight(c, n, 0), lw_in(c, n, 1), 0);
    return g->err.status;
}

/* [b, kvh, t, d] keys or values as the h query heads read them: Unsqueeze → Broadcast →
 * Reshape, which the CPU plugin recognises instead of repeating them. */
static int repeat_kv(g_graph *g, const char *which, int x, int64_t groups, int64_t h, int64_t d)
{
    char name[48];
    int64_t two = 2, times[5] = {1, 1, groups, 1, 1}, bhtd[4] = {0, h, -1, d};
    snprintf(name, sizeof name, "Unsqueeze_%s", which);
    x = g_unsqueeze(g, name, x, 1, &two);
    snprintf(name, sizeof name, "Broadcast_%s", which);
    x = g_expand(g, name, x, g_const_i64(g, 5, times));
    snprintf(name, sizeof name, "Reshape_%s", which);
    return g_reshape_spec(g, name, x, 4, bhtd);
}

static ferry_status ov_attention(g_lower_ctx *c, const g_node *n, int *outs)
{
    const g_attn_opts *o = n->a.attn;
    if (o->softcap > 0)
        return lower_attention(c, n, outs);
    g_graph *g = c->dst;
    int q = lw_in(c, n, 0), k, v;
    lw_attention_kv(c, n, &k, &v, outs);
    if (!g_ok(g))
        return g->err.status;
    ferry_dtype dt = g->values[q].dtype;
    int64_t h = o->num_heads, kvh = o->num_kv_heads, d = o->head_dim;
    int bias = lw_attention_bias(c, n, q, dt);
    if (h != kvh) {
        k = repeat_kv(g, "k", k, h / kvh, h, d);
        v = repeat_kv(g, "v", v, h / kvh, h, d);
    }
    int qt = g_transpose(g, "Transpose_q", q, 4, to_bnsd);
    g_extern e = g_extern_init("opset13", "ScaledDotProductAttention");
    g_extern_bool(&e, "causal", false); /* ferry's mask says what each query sees */
    g_shape out = g->values[qt].shape;  /* [b, h, s, d] */
    g_extern_out(&e, 0, 0, dt, &out);
    int in[5] = {qt, k, v, bias, g_scalar_f(g, dt, o->scale)};
    int y = g_extern_node(g, "ScaledDotProductAttention", &e, 5, in);
    int64_t out3[3] = {0, 0, h * d};
    y = g_reshape_spec(g, "Reshape_out", g_transpose(g, "Transpose_out", y, 4, to_bnsd), 3, out3);
    lw_refine(c, y, n, 0);
    outs[0] = y;
    return g->err.status;
}

static g_lower_fn openvino_lowering(const g_target *t, g_op op)
{
    (void)t;
    switch (op) {
    case G_LINEAR: return ov_linear;
    case G_EMBEDDING: return ov_embedding;
    case G_ATTENTION: return ov_attention;
    default: return NULL;
    }
}

const g_target openvino_target = {.name = "openvino", .legal = openvino_legal,
                                  .lowering = openvino_lowering};
