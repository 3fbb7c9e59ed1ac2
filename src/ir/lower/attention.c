/* attention.c — lowering of attention with its cache, as plain ops.
 *
 * Cache (k, v arrive [b, s, kvh, d] and are moved to [b, kvh, s, d]):
 *   none     K = k
 *   cross    K = k, which arrives [b, kvh, t, d] already (the encoder's cross cache)
 *   append   K = present = concat(past, k) along the length axis (just k for an empty cache)
 *   static   K = present = scatter(cache, rows cache_position.., k): the rows land in the fixed
 *            buffer; the output can share the cache's buffer since nothing else reads the old one
 *
 * Grouped-query attention without repeating K/V: queries are grouped per kv head and matmul
 * broadcasts K/V over the group axis.
 *   q [b,s,h,d] ─mul(scale)─transpose─reshape─> [b,kvh,g,s,d] ─matmul(Kᵀ [b,kvh,1,d,t])
 *   ─[softcap]─cast(f32)─add(mask as a bias: 0 or min)─softmax─cast─matmul(V [b,kvh,1,t,d])
 *   ─reshape [b,h,s,d]─transpose─reshape─> [b,s,h*d]
 * Multi-head attention (kvh = h) has no group axis: q [b,h,s,d] x Kᵀ [b,h,d,t], no reshape of
 * q or the context, unless a select applies the mask.
 * A bias input (T5's relative positions) is added to the scaled scores, in fp32, before the
 * mask. Scores are masked with the most negative finite fp32, not -inf: a fully masked row (a padding
 * query) then softmaxes to a uniform row instead of NaN that would poison later layers. Added
 * as a bias (0 or that value), a score of any magnitude short of 1e31 leaves the same
 * probabilities as a select would: a hidden one still rounds to that value. The select
 * (where(mask, ·, min)) stays for ExecuTorch's portable kernels (keys first). Without
 * a mask (G_MASK_NONE) the scores go to the softmax as they are, as transformers' eager
 * attention with attention_mask None. */
#include <stdio.h>

#include "ir/legalize.h"

static const int64_t to_bnsd[4] = {0, 2, 1, 3};

/* idx = expand(range(position, position + s) as [1,1,s,1], shape(update));
 * cache' = scatter_elements(cache, idx, update, axis 2) */
static int write_rows(g_graph *g, int cache, int update, int pos)
{
    int64_t col[4] = {1, 1, -1, 1};
    int start = g_gather(g, "Gather_position", pos, g_scalar_i64(g, 0), 0);
    int ushape = g_shape_of(g, "Shape", update, 0, G_END);
    int s = g_gather(g, "Gather_s", ushape, g_scalar_i64(g, 2), 0);
    int end = g_binary(g, G_ADD, "Add", start, s);
    int slots = g_range(g, "Range", start, end, g_scalar_i64(g, 1));
    int rows = g_reshape_spec(g, "Reshape", slots, 4, col);
    int idx = g_expand(g, "Expand", rows, ushape);
    return g_scatter_elements(g, "ScatterElements", cache, idx, update, 2);
}

/* What attention reads for `which` ("key" or "value"): the new rows joined with the cache. */
static int with_cache(g_lower_ctx *c, const g_node *n, int now, int past, int pos,
                      const char *which, int out_index, int *present)
{
    g_graph *g = c->dst;
    char name[64];
    *present = G_NONE;
    switch (n->a.attn->cache) {
    case G_CACHE_NONE:
    case G_CACHE_CROSS:
        return now;
    case G_CACHE_APPEND:
        if (past != G_NONE) {
            int parts[2] = {past, now};
            snprintf(name, sizeof name, "cache_%s/Concat", which);
            now = g_concat(g, name, 2, parts, 2);
        }
        break;
    case G_CACHE_STATIC: {
        char saved[sizeof g->scope], scope[sizeof g->scope];
        snprintf(scope, sizeof scope, "%.200s/cache_%s", n->name, which);
        lw_scope_push(c, saved, sizeof saved, scope);
        now = write_rows(g, past, now, pos);
        lw_scope_pop(c, saved);
        break;
    }
    }
    lw_refine(c, now, n, out_index);
    *present = now;
    return now;
}

void lw_attention_kv(g_lower_ctx *c, const g_node *n, int *k, int *v, int *outs)
{
    g_graph *g = c->dst;
    int pos = lw_in(c, n, 6);
    if (n->a.attn->cache == G_CACHE_CROSS) { /* already [b, kvh, t, d]; nothing written */
        *k = lw_in(c, n, 1);
        *v = lw_in(c, n, 2);
        return;
    }
    *k = g_transpose(g, "Transpose_k", lw_in(c, n, 1), 4, to_bnsd);
    *v = g_transpose(g, "Transpose_v", lw_in(c, n, 2), 4, to_bnsd);
    *k = with_cache(c, n, *k, lw_in(c, n, 4), pos, "key", 1, &outs[1]);
    *v = with_cache(c, n, *v, lw_in(c, n, 5), pos, "value", 2, &outs[2]);
}

ferry_status lower_attention(g_lower_ctx *c, const g_node *n, int *outs)
{
    int k, v;
    lw_attention_kv(c, n, &k, &v, outs);
    return lower_attention_over(c, n, k, v, outs);
}

static ferry_status attention_over(g_lower_ctx *c, const g_node *n, int k, int v, int *outs,
                                   bool keys_first, bool added_mask);

ferry_status lower_attention_over(g_lower_ctx *c, const g_node *n, int k, int v, int *outs)
{
    return attention_over(c, n, k, v, outs, false, true);
}

ferry_status lower_attention_keys_first(g_lower_ctx *c, const g_node *n, int k, int v,
                                        int *outs, bool added_mask)
{
    return attention_over(c, n, k, v, outs, true, added_mask);
}

static ferry_status attention_over(g_lower_ctx *c, const g_node *n, int k, int v, int *outs,
                                   bool keys_first, bool added_mask)
{
    g_graph *g = c->dst;
    const g_attn_opts *o = n->a.attn;
    int q = lw_in(c, n, 0), mask = lw_in(c, n, 3);
    int pos = lw_in(c, n, 6);
    if (!g_ok(g))
        return g->err.status;

    ferry_dtype dt = g->values[q].dtype;
    int64_t groups = o->num_heads / o->num_kv_heads;
    int64_t p0132[4] = {0, 1, 3, 2}, two = 2;
    int64_t q5[5] = {0, o->num_kv_heads, groups, -1, o->head_dim};
    int64_t h4[4] = {0, o->num_heads, -1, o->head_dim};
    int64_t out3[3] = {0, 0, o->num_heads * o->head_dim};
    bool add_bias = o->mask == G_MASK_PADDING || (added_mask && o->mask != G_MASK_NONE);
    int m = o->mask == G_MASK_NONE || add_bias
                ? G_NONE
                : lw_attention_mask(c, mask, q, pos, o->mask, o->sliding_window);
    /* the scale goes on the queries, s x d values instead of s x t scores, and where
     * onnxruntime cannot fold it into the scores' matmul as alpha: its one-query matmul with an
     * alpha takes half as long again as without (Whisper's cross attention each step). A
     * power-of-two scale (head_dim 64, 256) gives the same bits either way. */
    if (o->scale != 1.0)
        q = g_binary(g, G_MUL, "Mul_scale", q, g_scalar_f(g, dt, o->scale));
    /* Multi-head attention (one query head per kv head) needs no group axis: the 4-D form
     * saves four ops per layer that a one-token decode step pays for in dispatch (Whisper-small:
     * 96 a step). A select keeps the 5-D form its shared [b, 1, 1, s, t] mask broadcasts in. */
    bool grouped = groups > 1 || !(add_bias || o->mask == G_MASK_NONE);
    int qt = g_transpose(g, "Transpose_q", q, 4, to_bnsd);
    if (grouped)
        qt = g_reshape_spec(g, "Reshape_q", qt, 5, q5);
    int scores, vt;
    if (!grouped) {
        if (keys_first) {
            /* [b, h, t, d] x [b, h, d, s], transposed back to [b, h, s, t] */
            int st = g_matmul(g, "MatMul", k, g_transpose(g, "Transpose_qt", qt, 4, p0132), false);
            scores = g_transpose(g, "Transpose_scores", st, 4, p0132);
        } else {
            scores = g_matmul(g, "MatMul", qt, g_transpose(g, "Transpose_kt", k, 4, p0132), false);
        }
        vt = v;
    } else if (keys_first) {
        /* [b, kvh, t, d] x [b, kvh, d, groups * s] = [b, kvh, t, groups * s], transposed and
         * split back into [b, kvh, groups, s, t] */
        int64_t p01423[5] = {0, 1, 4, 2, 3}, qk[4] = {0, o->num_kv_heads, o->head_dim, -1};
        int qtt = g_reshape_spec(g, "Reshape_qt", g_transpose(g, "Transpose_qt", qt, 5, p01423),
                                 4, qk);
        int st = g_matmul(g, "MatMul", k, qtt, false);
        int s4 = g_transpose(g, "Transpose_scores", st, 4, p0132);
        if (!g_ok(g))
            return g->err.status;
        const g_shape *ss = &g->values[s4].shape;
        g_dim s5[5] = {ss->d[0], g_dim_const(o->num_kv_heads), g_dim_const(groups),
                       g_dim_unknown(), ss->d[3]};
        scores = g_reshape(g, "Reshape_scores", s4, 5, s5);
        vt = g_unsqueeze(g, "Unsqueeze_v", v, 1, &two);
    } else {
        /* Keys read from a cache: the group axis first and the transpose last, straight into
         * the matmul, which runtimes fold into it (onnxruntime's FusedMatMul transB, OpenVINO's
         * transpose_b) instead of copying every cached key each call. Keys made here: the
         * transpose first, which onnxruntime merges with the keys' own into one 4-D axis move
         * (the 5-D merge it makes of the other order took 20 times as long: 13 vs 0.7 ms a
         * layer over Whisper's 1500 frames). */
        int kt;
        if (o->cache == G_CACHE_NONE) {
            kt = g_unsqueeze(g, "Unsqueeze_k", g_transpose(g, "Transpose_kt", k, 4, p0132), 1,
                             &two);
        } else {
            int64_t p01243[5] = {0, 1, 2, 4, 3};
            kt = g_transpose(g, "Transpose_kt", g_unsqueeze(g, "Unsqueeze_k", k, 1, &two), 5,
                             p01243);
        }
        vt = g_unsqueeze(g, "Unsqueeze_v", v, 1, &two);
        scores = g_matmul(g, "MatMul", qt, kt, false);
    }
    if (o->softcap > 0)
        scores = g_softcap(g, "softcap", scores, o->softcap);
    scores = g_cast(g, "Cast", scores, FERRY_F32);
    int position_bias = lw_in(c, n, 7);
    if (position_bias != G_NONE) {
        /* [b or 1, h, s, t] as the scores' [b, kvh, groups, s, t] */
        const g_shape *bs = &g->values[position_bias].shape;
        g_dim b5[5] = {bs->d[0], g_dim_const(o->num_kv_heads), g_dim_const(groups), bs->d[2],
                       bs->d[3]};
        int b = g_cast(g, "Cast_position_bias", position_bias, FERRY_F32);
        if (grouped)
            b = g_reshape(g, "Reshape_position_bias", b, 5, b5);
        scores = g_binary(g, G_ADD, "Add_position_bias", scores, b);
    }
    if (add_bias) {
        /* the mask made a bias once and added: onnxruntime's broadcast add and softmax take a
         * quarter of its Where and softmax (16 heads over 1024 x 1024 scores: 28 vs 110 ms);
         * a padding mask is the same for every query, [b, 1, 1, 1, t], any other
         * [b, 1, 1, s, t] */
        int64_t one = 1;
        int bias = lw_attention_bias(c, n, q, FERRY_F32);
        if (grouped)
            bias = g_unsqueeze(g, "Unsqueeze_bias", bias, 1, &one);
        scores = g_binary(g, G_ADD, "Add_bias", scores, bias);
    } else if (o->mask != G_MASK_NONE) {
        scores = g_where(g, "Where", m, scores, g_scalar_f(g, FERRY_F32, -3.4028234663852886e38));
    }
    int probs = g_cast(g, "Cast_1", g_softmax(g, "Softmax", scores, -1), dt);
    int ctxv = g_matmul(g, "MatMul_1", probs, vt, false);
    int y = grouped ? g_reshape_spec(g, "Reshape_heads", ctxv, 4, h4) : ctxv;
    y = g_reshape_spec(g, "Reshape_out", g_transpose(g, "Transpose_out", y, 4, to_bnsd), 3, out3);
    lw_refine(c, y, n, 0);
    outs[0] = y;
    return g->err.status;
}
