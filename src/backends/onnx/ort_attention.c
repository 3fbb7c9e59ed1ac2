/* ort_attention.c — the ort-* targets' attention and rope (ort_target.c's table says which
 * provider gets which): GroupQueryAttention with its lengths, packed q/k/v and rotary inside,
 * MultiHeadAttention for decoders and encoders, RotaryEmbedding where attention does not
 * rotate; what neither kernel computes falls back to the generic lowering. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/onnx/ort_lowering.h"
#include "ir/lower/rope_freq.h"
#include "util/dtype.h"

/* The rope node producing input k of attention `n`, or NULL. */
static const g_node *rope_source(const g_lower_ctx *c, const g_node *n, int k)
{
    const g_value *v = lw_src(c, n, k);
    if (!v || v->kind != GV_NODE)
        return NULL;
    const g_node *p = &c->src->nodes[v->producer];
    return p->op == G_ROPE ? p : NULL;
}

/* A rope whose cos/sin table is fixed at export and of a sane length: one position per token
 * (not M-RoPE's three rows or a vision tower's (h, w)), one table for every call (not dynamic
 * NTK, whose base grows with the positions, or longrope, which picks a factor set by them).
 * The others take the generic lowering everywhere. */
static bool fixed_table(const g_rope_opts *o)
{
    return o->rope.type != ROPE_DYNAMIC && o->rope.type != ROPE_LONGROPE &&
           o->rope.layout == ROPE_1D && o->max_position_embeddings > 0 &&
           o->max_position_embeddings <= (1 << 20) && o->rotary_dim % 2 == 0;
}

/* Whether GroupQueryAttention can rotate q and k itself: both from rope nodes with one set of
 * options, one position input, a fixed table, the whole head. */
static bool rotary_inside(const g_node *rq, const g_node *rk)
{
    if (!rq || !rk || rq->in[1] != rk->in[1])
        return false;
    const g_rope_opts *a = rq->a.rope, *b = rk->a.rope;
    return lw_same_rope(a, b) && a->rotary_dim == a->head_dim && fixed_table(a);
}

/* cos and sin caches [max_position_embeddings, rotary_dim/2] in `dtype`, as transformers'
 * rotary embedding computes them (fp32 position * inv_freq, times the attention scaling); made
 * once per graph for each set of rope options (every layer shares them). */
static ferry_status rotary_caches(g_lower_ctx *c, const g_rope_opts *o, ferry_dtype dtype,
                                  int *cos_v, int *sin_v)
{
    g_graph *g = c->dst;
    for (size_t i = 0; i < c->n_memo; i++) {
        const lw_memo *m = &c->memo[i];
        if (m->kind == LW_MEMO_ROTARY_CACHE && m->key == (int64_t)dtype &&
            lw_same_rope(&m->rope, o)) {
            *cos_v = m->out_a;
            *sin_v = m->out_b;
            return FERRY_OK;
        }
    }
    /* GroupQueryAttention and RotaryEmbedding need a row for every position a call can reach:
     * a static cache's whole buffer, which may be longer than the model's trained length */
    const ferry_export_config *cfg = ort_cfg(c);
    int64_t half = o->rotary_dim / 2, n = o->max_position_embeddings;
    if (cfg->for_generation && cfg->generation.static_cache && cfg->generation.max_cache_len > n)
        n = cfg->generation.max_cache_len;
    if (n > (1 << 20))
        return g_fail(g, FERRY_ERR_UNSUPPORTED, "ort_fusions: --max-cache-len %lld is more "
                      "positions than a fused rotary table holds (1048576)", (long long)n),
               FERRY_ERR_UNSUPPORTED;
    size_t count = (size_t)(n * half), dsize = dt_size(dtype);
    float *inv = malloc((size_t)half * sizeof *inv), *row = malloc(2 * (size_t)half * sizeof *row);
    void *cs = malloc(count * dsize), *sn = malloc(count * dsize);
    if (!inv || !row || !cs || !sn) {
        free(inv), free(row), free(cs), free(sn);
        return g_fail(g, FERRY_ERR_NOMEM, "out of memory"), FERRY_ERR_NOMEM;
    }
    rope_inv_freq(&o->rope, o->rotary_dim, o->max_position_embeddings, inv);
    float scaling = (float)rope_attention_scaling(&o->rope);
    for (int64_t p = 0; p < n; p++) { /* a row in fp32, as torch's emb.cos(), then the dtype */
        for (int64_t i = 0; i < half; i++) {
            float f = (float)p * inv[i];
            row[i] = cosf(f) * scaling;
            row[half + i] = sinf(f) * scaling;
        }
        dt_convert((uint8_t *)cs + (size_t)(p * half) * dsize, dtype, row, FERRY_F32,
                   (size_t)half);
        dt_convert((uint8_t *)sn + (size_t)(p * half) * dsize, dtype, row + half, FERRY_F32,
                   (size_t)half);
    }
    free(inv), free(row);
    int64_t dims[2] = {n, half};
    *cos_v = g_const_owned(g, dtype, 2, dims, cs);
    *sin_v = g_const_owned(g, dtype, 2, dims, sn);
    lw_memo m = {.kind = LW_MEMO_ROTARY_CACHE, .key = (int64_t)dtype, .out_a = *cos_v,
                 .out_b = *sin_v};
    m.rope = *o;
    lw_memo_add(c, &m);
    return g->err.status;
}

/* MultiHeadAttention takes a bias [b, 1, s, t] only: a padding mask's [b, 1, 1, t] (the same
 * for every query) is expanded over the queries, its dims the semantic graph's. */
static int bias_over_queries(g_lower_ctx *c, const g_node *n, int q, int bias)
{
    if (n->a.attn->mask != G_MASK_PADDING || bias == G_NONE)
        return bias;
    g_graph *g = c->dst;
    int parts[4] = {g_shape_of(g, "Shape_bias_b", q, 0, 1), -1, -1, -1};
    parts[1] = g_const_i64(g, 1, (int64_t[]){1});
    parts[2] = g_shape_of(g, "Shape_bias_s", q, 1, 2);
    parts[3] = g_shape_of(g, "Shape_bias_t", bias, 3, 4);
    int full = g_expand(g, "Expand_bias", bias, g_concat(g, "Concat_bias", 4, parts, 0));
    if (full == G_NONE)
        return G_NONE;
    const g_shape *qs = &c->src->values[n->in[0]].shape, *ms = &c->src->values[n->in[3]].shape;
    g_shape *fs = &g->values[full].shape;
    fs->d[0] = qs->d[0], fs->d[1] = g_dim_const(1), fs->d[2] = qs->d[1], fs->d[3] = ms->d[1];
    return full;
}

/* MultiHeadAttention over attention's keys and values as plain ops leave them (the cache
 * joined or written in place, [b, kvh, t, d]), repeated to every query head (it has no grouped
 * form) and given in its BNSH form; ferry's mask is the bias. The cache keeps its kv heads. */
static ferry_status ort_mha(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    const g_attn_opts *o = n->a.attn;
    int q = lw_in(c, n, 0), k, v;
    lw_attention_kv(c, n, &k, &v, outs);
    if (!g_ok(g))
        return g->err.status;
    ferry_dtype dt = g->values[q].dtype;
    int64_t h = o->num_heads, kvh = o->num_kv_heads, d = o->head_dim, groups = h / kvh;
    int64_t q3[3] = {0, 0, h * d};
    q = g_reshape_spec(g, "Reshape_q", q, 3, q3);
    if (groups > 1) { /* [b, kvh, t, d] -> [b, kvh, g, t, d] -> [b, h, t, d] */
        /* the dims as the cache step left them: after the repeat they are computed at run time */
        g_dim bhtd[4] = {g->values[k].shape.d[0], g_dim_const(h), g->values[k].shape.d[2],
                         g_dim_const(d)};
        int64_t two = 2;
        int kv[2] = {k, v};
        for (int i = 0; i < 2 && g_ok(g); i++) {
            int u = g_unsqueeze(g, i ? "Unsqueeze_v" : "Unsqueeze_k", kv[i], 1, &two);
            int shp = g_shape_of(g, i ? "Shape_v" : "Shape_k", u, 0, G_END);
            int64_t ones[5] = {1, 1, groups, 1, 1};
            shp = g_binary(g, G_MUL, i ? "Mul_v" : "Mul_k", shp, g_const_i64(g, 5, ones));
            u = g_expand(g, i ? "Expand_v" : "Expand_k", u, shp);
            kv[i] = g_reshape(g, i ? "Reshape_v" : "Reshape_k", u, 4, bhtd);
        }
        k = kv[0], v = kv[1];
    }
    g_extern e = g_extern_init("com.microsoft", "MultiHeadAttention");
    g_extern_int(&e, "num_heads", h);
    g_extern_float(&e, "scale", o->scale);
    g_extern_out(&e, 0, 0, dt, &c->src->values[n->out[0]].shape);
    /* no bias where every key is visible (lw_attention_bias gives none) */
    int in[6] = {q, k, v, G_NONE, G_NONE,
                 bias_over_queries(c, n, q, lw_attention_bias(c, n, q, dt))};
    outs[0] = g_extern_node(g, "MultiHeadAttention", &e, in[5] == G_NONE ? 3 : 6, in);
    return g->err.status;
}

/* An encoder's padding mask as MultiHeadAttention's key_padding_mask: int32 [b, t], one copy
 * for every layer. */
static int key_padding_mask(g_lower_ctx *c, int mask)
{
    for (size_t i = 0; i < c->n_memo; i++)
        if (c->memo[i].kind == LW_MEMO_KEY_MASK && c->memo[i].in_a == mask)
            return c->memo[i].out_a;
    g_graph *g = c->dst;
    char saved[sizeof g->scope];
    lw_shared_scope_push(c, saved, sizeof saved, "padding_mask");
    int m = g_cast(g, "Cast", mask, FERRY_I32);
    lw_scope_pop(c, saved);
    if (m != G_NONE)
        lw_memo_add(c, &(lw_memo){.kind = LW_MEMO_KEY_MASK, .in_a = mask, .out_a = m});
    return m;
}

/* An encoder's attention (no cache, a padding mask or none): MultiHeadAttention over q, k and
 * v as the linears give them, [b, s, h*d], masked by key_padding_mask, or without one where
 * every key is visible (a vision tower, Whisper's encoder). A padded query attends as any other
 * (its row is ignored downstream, as in transformers). */
static ferry_status ort_encoder_mha(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    const g_attn_opts *o = n->a.attn;
    int64_t hd[3] = {0, 0, o->num_heads * o->head_dim};
    int q = g_reshape_spec(g, "Reshape_q", lw_in(c, n, 0), 3, hd);
    int k = g_reshape_spec(g, "Reshape_k", lw_in(c, n, 1), 3, hd);
    int v = g_reshape_spec(g, "Reshape_v", lw_in(c, n, 2), 3, hd);
    bool masked = o->mask != G_MASK_NONE;
    int mask = masked ? key_padding_mask(c, lw_in(c, n, 3)) : G_NONE;
    if (!g_ok(g))
        return g->err.status;
    g_extern e = g_extern_init("com.microsoft", "MultiHeadAttention");
    g_extern_int(&e, "num_heads", o->num_heads);
    g_extern_float(&e, "scale", o->scale);
    g_extern_out(&e, 0, 0, g->values[q].dtype, &c->src->values[n->out[0]].shape);
    int in[5] = {q, k, v, G_NONE, mask};
    outs[0] = g_extern_node(g, "MultiHeadAttention", &e, masked ? 5 : 3, in);
    return g->err.status;
}

/* Cross attention over an encoder's cross cache: MultiHeadAttention takes keys and values in
 * the cache's BNSH form [b, heads, t, d] as they are, every key visible. */
static ferry_status ort_cross_mha(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    const g_attn_opts *o = n->a.attn;
    int64_t hd[3] = {0, 0, o->num_heads * o->head_dim};
    int q = g_reshape_spec(g, "Reshape_q", lw_in(c, n, 0), 3, hd);
    if (!g_ok(g))
        return g->err.status;
    g_extern e = g_extern_init("com.microsoft", "MultiHeadAttention");
    g_extern_int(&e, "num_heads", o->num_heads);
    g_extern_float(&e, "scale", o->scale);
    g_extern_out(&e, 0, 0, g->values[q].dtype, &c->src->values[n->out[0]].shape);
    int in[3] = {q, lw_in(c, n, 1), lw_in(c, n, 2)};
    outs[0] = g_extern_node(g, "MultiHeadAttention", &e, 3, in);
    return g->err.status;
}

/* A rope with a fixed table as onnxruntime's RotaryEmbedding, on x as [b, s, h*d]: where the
 * provider rotates apart from attention (webgpu, dml, and cuda's prefill). On cpu, and where
 * GroupQueryAttention rotates q and k itself, plain ops (then left dead). */
ferry_status ort_rope(g_lower_ctx *c, const g_node *n, int *outs)
{
    const g_rope_opts *o = n->a.rope;
    if (onnx_fusions(ort_cfg(c)) == ORT_CPU || !fixed_table(o))
        return lower_rope(c, n, outs);
    g_graph *g = c->dst;
    int x = lw_in(c, n, 0), pos = lw_in(c, n, 1);
    if (!g_ok(g))
        return g->err.status;
    g_shape xshape = g->values[x].shape; /* copies: adding values moves the table */
    ferry_dtype dt = g->values[x].dtype;
    int64_t heads = 0;
    if (xshape.rank != 4 || !g_dim_is_const(xshape.d[2], &heads))
        return lower_rope(c, n, outs);
    int64_t x3[3] = {0, 0, heads * o->head_dim};
    int cos_v, sin_v;
    if (rotary_caches(c, o, dt, &cos_v, &sin_v) != FERRY_OK)
        return g->err.status;
    int flat = g_reshape_spec(g, "Reshape", x, 3, x3);
    g_extern e = g_extern_init("com.microsoft", "RotaryEmbedding");
    g_extern_int(&e, "num_heads", heads);
    g_extern_int(&e, "rotary_embedding_dim", o->rotary_dim);
    g_extern_int(&e, "interleaved", 0);
    if (g_ok(g))
        g_extern_out(&e, 0, 0, dt, &g->values[flat].shape);
    int in[4] = {flat, pos, cos_v, sin_v};
    int y = g_extern_node(g, "RotaryEmbedding", &e, 4, in);
    y = g_reshape(g, "Reshape_1", y, 4, xshape.d);
    lw_refine(c, y, n, 0);
    outs[0] = y;
    return g->err.status;
}

/* The per-head RMS norm producing rope `r`'s input (Qwen3's q_norm / k_norm: a weight of
 * head_dim on [b, s, h, d]), or NULL. */
static const g_node *head_norm_source(const g_lower_ctx *c, const g_node *r)
{
    const g_value *x = &c->src->values[r->in[0]];
    if (x->kind != GV_NODE)
        return NULL;
    const g_node *p = &c->src->nodes[x->producer];
    const g_value *w = &c->src->values[p->in[1]];
    int64_t len = 0;
    return p->op == G_RMS_NORM && x->shape.rank == 4 && w->kind == GV_WEIGHT &&
                   w->shape.rank == 1 && g_dim_is_const(w->shape.d[0], &len) &&
                   len == r->a.rope->head_dim
               ? p
               : NULL;
}

/* What onnxruntime's GroupQueryAttention refuses at session creation ("head_size shall be a
 * multiple of ..."): heads of another multiple of 8 at all, of 16 with the rotary inside. */
#define GQA_HEAD_MULTIPLE 8
#define GQA_ROTARY_HEAD_MULTIPLE 16

/* GroupQueryAttention's lengths. Every row's cache holds `filled` keys after this call (left
 * padding is the bias's business): seqlens_k = filled - 1 per row. total_sequence_length is
 * the key length the bias spans: filled for a growing cache, the whole buffer for a static
 * one. With a past, query_seqlens (s per row: no right padding) lets a batch feed several
 * tokens a call; only cpu and cuda take it (the others must reject the node when it is given).
 * A growing cache's lengths depend on the mask alone, the same for every layer: they are made
 * once per graph (a per-layer copy cost the decode of a small model a few percent). A static
 * cache's read each layer's own position input. */
static void gqa_lengths(g_lower_ctx *c, const g_node *n, int q, int mask, int pos, bool chunks,
                        int *seqlens, int *total32, int *query_lens)
{
    g_graph *g = c->dst;
    bool static_cache = n->a.attn->cache == G_CACHE_STATIC;
    if (!static_cache)
        for (size_t i = 0; i < c->n_memo; i++)
            if (c->memo[i].kind == LW_MEMO_LENGTHS && c->memo[i].in_a == mask &&
                c->memo[i].key == chunks) {
                *seqlens = c->memo[i].out_a;
                *total32 = c->memo[i].out_b;
                *query_lens = c->memo[i].out_c;
                return;
            }
    char saved[sizeof g->scope];
    if (!static_cache)
        lw_shared_scope_push(c, saved, sizeof saved, "attention_lengths_%d", mask);
    int s = g_shape_of(g, "Shape_s", q, 1, 2), batch = g_shape_of(g, "Shape_b", q, 0, 1);
    int filled = static_cache ? g_binary(g, G_ADD, "Add_filled", pos, s)
                              : g_shape_of(g, "Shape_t", mask, 1, 2);
    int span = static_cache ? g_shape_of(g, "Shape_t", mask, 3, 4) : filled;
    int last = g_binary(g, G_SUB, "Sub_one", filled, g_const_i64(g, 1, (int64_t[]){1}));
    *seqlens = g_cast(g, "Cast_seqlens", g_expand(g, "Expand_seqlens", last, batch), FERRY_I32);
    g_dim scalar[1];
    *total32 = g_cast(g, "Cast_total", g_reshape(g, "Reshape_total", span, 0, scalar),
                      FERRY_I32);
    *query_lens = chunks ? g_cast(g, "Cast_query_seqlens",
                                  g_expand(g, "Expand_query_seqlens", s, batch), FERRY_I32)
                         : G_NONE;
    if (static_cache)
        return;
    lw_scope_pop(c, saved);
    lw_memo_add(c, &(lw_memo){.kind = LW_MEMO_LENGTHS, .in_a = mask, .key = chunks,
                              .out_a = *seqlens, .out_b = *total32, .out_c = *query_lens});
}

/* The slice of the last axis that value `v` [b, s, heads, d] of the lowered graph was cut
 * from, split into heads: its input, start and end (false if `v` is not one). */
static bool head_slice(const g_graph *g, int v, int *from, int64_t *start, int64_t *end)
{
    const g_value *x = &g->values[v];
    if (x->kind != GV_NODE || g->nodes[x->producer].op != G_RESHAPE)
        return false;
    const g_value *s = &g->values[g->nodes[x->producer].in[0]];
    if (s->kind != GV_NODE)
        return false;
    const g_node *sl = &g->nodes[s->producer];
    const g_value *in = &g->values[sl->in[0]];
    if (sl->op != G_SLICE || sl->a.axis != in->shape.rank - 1 || in->shape.rank != 3)
        return false;
    *from = sl->in[0], *start = sl->a.start, *end = sl->a.end;
    return true;
}

/* The joined q/k/v projection that q, k and v are consecutive slices of ([0, qd), then kvd
 * each), all of it: GroupQueryAttention then takes it whole as its packed query, with no key
 * or value, and no slice or reshape runs. G_NONE if they are not so. */
static int packed_qkv(const g_graph *g, int q, int k, int v, int64_t qd, int64_t kvd)
{
    int fq, fk, fv;
    int64_t s[3], e[3], width = 0;
    if (!head_slice(g, q, &fq, &s[0], &e[0]) || !head_slice(g, k, &fk, &s[1], &e[1]) ||
        !head_slice(g, v, &fv, &s[2], &e[2]) || fq != fk || fk != fv)
        return G_NONE;
    const g_shape *joined = &g->values[fq].shape;
    if (!g_dim_is_const(joined->d[2], &width) || width != qd + 2 * kvd)
        return G_NONE;
    bool consecutive = s[0] == 0 && e[0] == qd && s[1] == qd && e[1] == qd + kvd &&
                       s[2] == qd + kvd && e[2] == width;
    return consecutive ? fq : G_NONE;
}

static ferry_status ort_gqa(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    const g_attn_opts *o = n->a.attn;
    ort_fusions provider = onnx_fusions(ort_cfg(c));
    const g_node *rq = rope_source(c, n, 0), *rk = rope_source(c, n, 1);
    /* cpu and cuda rotate inside; cuda also takes the q/k norms before the rotation.
     * onnxruntime rotates inside only heads of a multiple of 16 (it refuses the node else):
     * other heads are rotated before, as webgpu's are */
    bool rotary = provider != ORT_WEBGPU && o->head_dim % GQA_ROTARY_HEAD_MULTIPLE == 0 &&
                  rotary_inside(rq, rk);
    const g_node *nq = rotary ? head_norm_source(c, rq) : NULL;
    const g_node *nk = rotary ? head_norm_source(c, rk) : NULL;
    bool norms = provider == ORT_CUDA && nq && nk;
    int q = norms ? c->map[nq->in[0]] : rotary ? c->map[rq->in[0]] : lw_in(c, n, 0);
    int k = norms ? c->map[nk->in[0]] : rotary ? c->map[rk->in[0]] : lw_in(c, n, 1);
    int v = lw_in(c, n, 2), mask = lw_in(c, n, 3), pos = lw_in(c, n, 6);
    ferry_dtype dt = g->values[q].dtype;
    /* A first call with no cache gets an empty one [b, kvh, 0, d]: GroupQueryAttention's
     * no-past path reads its inputs as right-padded, which left padding is not. */
    int past_k = lw_in(c, n, 4), past_v = lw_in(c, n, 5);
    if (past_k == G_NONE) {
        static const int64_t bnsd[4] = {0, 2, 1, 3};
        int kt = g_transpose(g, "Transpose_empty", k, 4, bnsd);
        past_k = g_slice(g, "Slice_empty_key", kt, 2, 0, 0);
        past_v = g_slice(g, "Slice_empty_value", kt, 2, 0, 0);
    }
    int64_t q3[3] = {0, 0, o->num_heads * o->head_dim}, kv3[3] = {0, 0, o->num_kv_heads * o->head_dim};
    /* not with the q/k norms inside, which no kernel here shows to read a packed input */
    int packed = norms ? G_NONE : packed_qkv(g, q, k, v, q3[2], kv3[2]);
    if (packed != G_NONE) {
        q = packed;
        k = v = G_NONE;
    } else {
        q = g_reshape_spec(g, "Reshape_q", q, 3, q3);
        k = g_reshape_spec(g, "Reshape_k", k, 3, kv3);
        v = g_reshape_spec(g, "Reshape_v", v, 3, kv3);
    }

    bool chunks = provider == ORT_CPU || provider == ORT_CUDA;
    int seqlens, total32, query_lens;
    gqa_lengths(c, n, q, mask, pos, chunks, &seqlens, &total32, &query_lens);

    /* ferry's own mask as an additive bias [b, 1, s, t] */
    int bias = lw_attention_bias(c, n, q, dt);

    int cos_v = G_NONE, sin_v = G_NONE;
    if (rotary && rotary_caches(c, rq->a.rope, dt, &cos_v, &sin_v) != FERRY_OK)
        return g->err.status;

    g_extern e = g_extern_init("com.microsoft", "GroupQueryAttention");
    g_extern_int(&e, "num_heads", o->num_heads);
    g_extern_int(&e, "kv_num_heads", o->num_kv_heads);
    g_extern_float(&e, "scale", o->scale);
    if (o->softcap > 0)
        g_extern_float(&e, "softcap", o->softcap);
    g_extern_int(&e, "do_rotary", rotary);
    g_extern_int(&e, "rotary_interleaved", 0);
    if (norms) {
        g_extern_float(&e, "q_norm_epsilon", nq->a.eps);
        g_extern_float(&e, "k_norm_epsilon", nk->a.eps);
    }
    const g_value *src_out = &c->src->values[n->out[0]];
    g_extern_out(&e, 0, 0, dt, &src_out->shape);
    for (int i = 1; i < 3; i++)
        g_extern_out(&e, i, i, dt, &c->src->values[n->out[i]].shape);
    int in[17] = {q, k, v, past_k, past_v, seqlens, total32, cos_v, sin_v,
                  rotary ? c->map[rq->in[1]] : G_NONE, bias, G_NONE, G_NONE, G_NONE,
                  norms ? ort_offset_weight(c, nq, 1, nq->a.offset) : G_NONE,
                  norms ? ort_offset_weight(c, nk, 1, nk->a.offset) : G_NONE, query_lens};
    int y = g_extern_node(g, "GroupQueryAttention", &e, chunks ? 17 : norms ? 16 : 11, in);
    outs[0] = y;
    outs[1] = g_node_out(g, y, 1);
    outs[2] = g_node_out(g, y, 2);
    return g->err.status;
}

/* The guide's table: attention with a cache is GroupQueryAttention (cpu, webgpu, and cuda
 * after the first call, fp16 only) or MultiHeadAttention (dml, cuda's prefill, and cuda at
 * fp32); attention without
 * one is MultiHeadAttention except a decoder's on cpu, which stays plain ops. What neither kernel
 * computes (softcapped scores; GroupQueryAttention is causal) stays plain ops too. */
ferry_status ort_attention(g_lower_ctx *c, const g_node *n, int *outs)
{
    const g_attn_opts *o = n->a.attn;
    ort_fusions provider = onnx_fusions(ort_cfg(c));
    bool prefill = lw_in(c, n, 4) == G_NONE;
    /* onnxruntime's CUDA GroupQueryAttention has fp16 and bf16 kernels only: at fp32 its nodes
     * would run on the CPU provider, and Qwen3's (q/k norms inside) on none */
    bool half = ort_cfg(c)->dtype == FERRY_F16 || ort_cfg(c)->dtype == FERRY_BF16;
    /* a bias (T5's relative positions) goes to no fused kernel yet */
    if (lw_in(c, n, 7) != G_NONE)
        return lower_attention(c, n, outs);
    if (o->cache == G_CACHE_CROSS)
        return o->num_heads == o->num_kv_heads && o->mask == G_MASK_NONE
                   ? ort_cross_mha(c, n, outs)
                   : lower_attention(c, n, outs);
    if (o->cache != G_CACHE_NONE && o->mask != G_MASK_PADDING && provider != ORT_DML &&
        !(provider == ORT_CUDA && (prefill || !half)) &&
        o->head_dim % GQA_HEAD_MULTIPLE == 0)
        return ort_gqa(c, n, outs);
    /* an encoder's bidirectional attention (padded, or every key visible) is
     * MultiHeadAttention on cpu too: the kernel onnxruntime runs for encoders there */
    if (o->cache == G_CACHE_NONE && (o->mask == G_MASK_PADDING || o->mask == G_MASK_NONE) &&
        o->softcap == 0 && o->num_heads == o->num_kv_heads)
        return ort_encoder_mha(c, n, outs);
    if (provider != ORT_CPU && o->softcap == 0 && o->num_heads % o->num_kv_heads == 0)
        return ort_mha(c, n, outs);
    return lower_attention(c, n, outs);
}
