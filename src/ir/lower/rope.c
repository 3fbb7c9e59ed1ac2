/* rope.c — lowering of rotary embeddings. cos/sin tables are built once per (positions, dtype,
 * rope options) and shared by every node with that key: layers whose options differ (Gemma 3's
 * local layers, another theta, another set of longrope factors) get tables of their own.
 *
 *   tables: positions ─cast(f32)─unsqueeze(-1)─mul(inv_freq)─[bands]─concat(f,f)─┬─cos─[×scale]─cast─place
 *                                                                                └─sin─[×scale]─cast─place
 *   apply:  x*cos + rotate_half(x)*sin,  rotate_half(x) = concat(-x[..., r/2:r], x[..., :r/2])
 *           (lower_rope_by_matrix: a linear of fp32 x by a constant [r, r] of +-1, for a target
 *           whose matrix products are cheaper than its slices and concatenations)
 *   partial rotary (r < d): the rotation applies to x[..., :r]; x[..., r:] passes through.
 *
 * The position layouts (rope_layout), as transformers' rotary embeddings compute them:
 *   1d      positions [b, s]; tables [b, s, 1, r] (unsqueeze at the heads axis)
 *   mrope   positions [3, b, s]: f [3, b, s, r/2]; band i of mrope_section (its frequencies)
 *           taken from row i % 3, the bands concatenated ([1, b, s, r/2]) and the result doubled
 *           over both halves (Qwen2-VL's recomposition_frequencies); tables moved to
 *           [b, s, 1, r] by a transpose
 *   2d      positions [b, s, 2] of (h, w): inv_freq of default rope over r/2 dims (r/4 values),
 *           f [b, s, 2, r/4] flattened to [b, s, r/2] (the h angles, then the w angles) and
 *           doubled; the tables stay fp32 and x rotates in fp32 and is cast back (Qwen2-VL's
 *           apply_rotary_pos_emb_vision)
 * inv_freq is a constant, except for dynamic (NTK) rope, where it is computed from
 * max(position_ids) + 1, and longrope, where that length picks the short or the long factors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/legalize.h"
#include "ir/lower/rope_freq.h"

bool lw_same_rope(const g_rope_opts *a, const g_rope_opts *b)
{
    const rope_config *x = &a->rope, *y = &b->rope;
    bool same = a->head_dim == b->head_dim && a->rotary_dim == b->rotary_dim &&
                a->max_position_embeddings == b->max_position_embeddings && x->type == y->type &&
                x->theta == y->theta && x->factor == y->factor &&
                x->low_freq_factor == y->low_freq_factor &&
                x->high_freq_factor == y->high_freq_factor &&
                x->original_max_position_embeddings == y->original_max_position_embeddings &&
                x->beta_fast == y->beta_fast && x->beta_slow == y->beta_slow &&
                x->attention_factor == y->attention_factor && x->mscale == y->mscale &&
                x->mscale_all_dim == y->mscale_all_dim && x->truncate == y->truncate &&
                x->layout == y->layout && x->n_factors == y->n_factors;
    for (int i = 0; same && i < 3; i++)
        same = x->mrope_section[i] == y->mrope_section[i];
    for (int i = 0; same && i < x->n_factors && i < ROPE_MAX_FACTORS; i++)
        same = x->short_factor[i] == y->short_factor[i] && x->long_factor[i] == y->long_factor[i];
    return same;
}

/* max(positions) + 1 over every axis of the position input: transformers' seq_len for the
 * dynamic and longrope updates (torch.max over the whole position_ids tensor, M-RoPE's three
 * rows included). */
static int seq_len(g_graph *g, int positions)
{
    int rank = g_ok(g) ? g->values[positions].shape.rank : 0;
    int64_t axes[G_MAX_RANK];
    for (int i = 0; i < rank; i++)
        axes[i] = i;
    int pmax = g_reduce(g, G_REDUCE_MAX, "ReduceMax", positions, rank, axes, false);
    return g_binary(g, G_ADD, "Add", pmax, g_scalar_i64(g, 1));
}

/* inv_freq as a graph value: a constant, or for dynamic (NTK) rope computed from the largest
 * position in the batch as transformers' dynamic update does:
 * base' = base * (factor*L/max - (factor-1)) ** (r/(r-2)), L = max(max(position_ids)+1, max);
 * for longrope the long set where max(position_ids) + 1 > original_max_position_embeddings,
 * else the short set (transformers' longrope update: one set for the whole call). */
static int inv_freq(g_graph *g, const g_rope_opts *o, int positions)
{
    /* 2-D rope: default frequencies over half the rotary dims (VisionRotaryEmbedding(r/2)) */
    int64_t dim = o->rope.layout == ROPE_VISION_2D ? o->rotary_dim / 2 : o->rotary_dim;
    int64_t half = dim / 2;
    int64_t dims[1] = {half};
    float *freq = malloc(2 * (size_t)half * sizeof *freq);
    if (!freq)
        return g_fail(g, FERRY_ERR_NOMEM, "out of memory");
    int inv;
    if (o->rope.type == ROPE_DYNAMIC) {
        double r = (double)dim;
        int len = seq_len(g, positions);
        len = g_binary(g, G_MAX, "Max", len, g_scalar_i64(g, o->max_position_embeddings));
        int lenf = g_cast(g, "Cast_len", len, FERRY_F32);
        int max_pos = g_scalar_f(g, FERRY_F32, (double)o->max_position_embeddings);
        int scaled = g_binary(g, G_MUL, "Mul_factor", lenf,
                              g_scalar_f(g, FERRY_F32, o->rope.factor));
        int t = g_binary(g, G_DIV, "Div", scaled, max_pos);
        t = g_binary(g, G_SUB, "Sub", t, g_scalar_f(g, FERRY_F32, o->rope.factor - 1.0));
        t = g_binary(g, G_POW, "Pow", t, g_scalar_f(g, FERRY_F32, r / (r - 2.0)));
        int base = g_binary(g, G_MUL, "Mul_base", t, g_scalar_f(g, FERRY_F32, o->rope.theta));
        for (int64_t i = 0; i < half; i++)
            freq[i] = (float)(2 * i) / (float)dim;
        int ex = g_const(g, FERRY_F32, 1, dims, freq);
        inv = g_unary(g, G_RECIPROCAL, "Reciprocal", g_binary(g, G_POW, "Pow_1", base, ex));
    } else if (o->rope.type == ROPE_LONGROPE) {
        rope_longrope_inv_freq(&o->rope, dim, false, freq);
        rope_longrope_inv_freq(&o->rope, dim, true, freq + half);
        int short_set = g_const(g, FERRY_F32, 1, dims, freq);
        int long_set = g_const(g, FERRY_F32, 1, dims, freq + half);
        int is_long = g_binary(g, G_GREATER, "Greater", seq_len(g, positions),
                               g_scalar_i64(g, o->rope.original_max_position_embeddings));
        inv = g_where(g, "Where", is_long, long_set, short_set);
    } else {
        rope_inv_freq(&o->rope, dim, o->max_position_embeddings, freq);
        inv = g_const(g, FERRY_F32, 1, dims, freq);
    }
    free(freq);
    return inv;
}

/* M-RoPE: band i of the frequencies (mrope_section[i] wide) from position row i % 3 of
 * f [3, b, s, r/2] -> [1, b, s, r/2]. */
static int mrope_bands(g_graph *g, const g_rope_opts *o, int f)
{
    int parts[3];
    int64_t at = 0;
    for (int i = 0; i < 3; i++) {
        char name[32];
        int64_t w = o->rope.mrope_section[i];
        snprintf(name, sizeof name, "Slice_band_%d", i);
        int band = g_slice(g, name, f, -1, at, at + w);
        snprintf(name, sizeof name, "Slice_row_%d", i);
        parts[i] = g_slice(g, name, band, 0, i % 3, i % 3 + 1);
        at += w;
    }
    return g_concat(g, "Concat_bands", 3, parts, -1);
}

/* A table cast to `dtype` and moved to [b, s, 1, r]: over x's heads axis. */
static int place(g_graph *g, const g_rope_opts *o, const char *which, int t, ferry_dtype dtype)
{
    char name[32];
    snprintf(name, sizeof name, "Cast_%s", which);
    t = g_cast(g, name, t, dtype);
    if (o->rope.layout == ROPE_MROPE) {
        static const int64_t bs1r[4] = {1, 2, 0, 3}; /* [1, b, s, r] -> [b, s, 1, r] */
        snprintf(name, sizeof name, "Transpose_%s", which);
        return g_transpose(g, name, t, 4, bs1r);
    }
    int64_t two = 2;
    snprintf(name, sizeof name, "Unsqueeze_%s", which);
    return g_unsqueeze(g, name, t, 1, &two);
}

/* cos/sin [b, s, 1, r] in `dtype` for `positions` under options `o`, built once per key. */
static void rope_tables(g_lower_ctx *c, const g_rope_opts *o, int positions, ferry_dtype dtype,
                        int *cos_out, int *sin_out)
{
    for (size_t i = 0; i < c->n_memo; i++) {
        const lw_memo *m = &c->memo[i];
        if (m->kind == LW_MEMO_ROPE && m->in_a == positions && m->key == (int64_t)dtype &&
            lw_same_rope(&m->rope, o)) {
            *cos_out = m->out_a;
            *sin_out = m->out_b;
            return;
        }
    }
    g_graph *g = c->dst;
    char saved[sizeof g->scope];
    int k = 0;
    for (size_t i = 0; i < c->n_memo; i++)
        k += c->memo[i].kind == LW_MEMO_ROPE;
    if (k == 0)
        lw_shared_scope_push(c, saved, sizeof saved, "rotary_emb");
    else
        lw_shared_scope_push(c, saved, sizeof saved, "rotary_emb_%d", k);
    int64_t neg1 = -1;
    rope_layout layout = o->rope.layout;
    double scaling = rope_attention_scaling(&o->rope);
    int inv = inv_freq(g, o, positions);
    int p = g_unsqueeze(g, "Unsqueeze", g_cast(g, "Cast", positions, FERRY_F32), 1, &neg1);
    int f = g_binary(g, G_MUL, "Mul", p, inv);
    if (layout == ROPE_MROPE) {
        f = mrope_bands(g, o, f);                          /* [1, b, s, r/2] */
    } else if (layout == ROPE_VISION_2D) {
        int64_t flat[3] = {0, 0, o->rotary_dim / 2};
        f = g_reshape_spec(g, "Reshape_hw", f, 3, flat);   /* [b, s, r/2]: h, then w */
    }
    int ff[2] = {f, f};
    int emb = g_concat(g, "Concat", 2, ff, -1);
    int co = g_unary(g, G_COS, "Cos", emb), si = g_unary(g, G_SIN, "Sin", emb);
    if (scaling != 1.0) {
        int s = g_scalar_f(g, FERRY_F32, scaling);
        co = g_binary(g, G_MUL, "Mul_cos", co, s);
        si = g_binary(g, G_MUL, "Mul_sin", si, s);
    }
    co = place(g, o, "cos", co, dtype);
    si = place(g, o, "sin", si, dtype);
    lw_scope_pop(c, saved);
    lw_memo_add(c, &(lw_memo){.kind = LW_MEMO_ROPE, .in_a = positions, .key = (int64_t)dtype,
                              .rope = *o, .out_a = co, .out_b = si});
    *cos_out = co;
    *sin_out = si;
}

/* rotate_half over the last axis (r wide) as a product with the constant [r, r] matrix whose
 * row j < r/2 takes -x[j + r/2] and row j >= r/2 takes x[j - r/2]: each output one input
 * times +-1 plus zeros, exact for finite x */
static int rotation_by_matrix(g_graph *g, int xr, int64_t r)
{
    float *m = calloc((size_t)(r * r), sizeof *m);
    if (!m)
        return g_fail(g, FERRY_ERR_NOMEM, "out of memory");
    for (int64_t j = 0; j < r; j++)
        m[j * r + (j < r / 2 ? j + r / 2 : j - r / 2)] = j < r / 2 ? -1.0f : 1.0f;
    int64_t dims[2] = {r, r};
    int w = g_const(g, FERRY_F32, 2, dims, m);
    free(m);
    return g_linear(g, "Rotate", xr, w, G_NONE);
}

static ferry_status rope_lowering(g_lower_ctx *c, const g_node *n, int *outs, bool by_matrix);

ferry_status lower_rope(g_lower_ctx *c, const g_node *n, int *outs)
{
    return rope_lowering(c, n, outs, false);
}

ferry_status lower_rope_by_matrix(g_lower_ctx *c, const g_node *n, int *outs)
{
    return rope_lowering(c, n, outs, true);
}

static ferry_status rope_lowering(g_lower_ctx *c, const g_node *n, int *outs, bool by_matrix)
{
    g_graph *g = c->dst;
    const g_rope_opts *o = n->a.rope;
    int x = lw_in(c, n, 0), pos = lw_in(c, n, 1);
    if (!g_ok(g))
        return g->err.status;
    ferry_dtype dt = g->values[x].dtype;
    /* the 2-D rotation runs in fp32 whatever x's type (apply_rotary_pos_emb_vision); casts to
     * a value's own type make no node */
    bool vision = o->rope.layout == ROPE_VISION_2D;
    int co = G_NONE, si = G_NONE;
    rope_tables(c, o, pos, vision ? FERRY_F32 : dt, &co, &si);
    if (vision)
        x = g_cast(g, "Cast_x", x, FERRY_F32);
    if (!g_ok(g))
        return g->err.status;
    int64_t r = o->rotary_dim, half = r / 2;
    bool partial = r < o->head_dim;
    int xr = partial ? g_slice(g, "Slice_rot", x, -1, 0, r) : x;
    int rot;
    if (by_matrix && g->values[x].dtype == FERRY_F32) {
        rot = rotation_by_matrix(g, xr, r);
    } else {
        int x1 = g_slice(g, "Slice", xr, -1, 0, half);
        int x2 = g_slice(g, "Slice_1", xr, -1, half, G_END);
        int parts[2] = {g_unary(g, G_NEG, "Neg", x2), x1};
        rot = g_concat(g, "Concat", 2, parts, -1);
    }
    int rot_sin = g_binary(g, G_MUL, "Mul_1", rot, si);
    int y = g_binary(g, G_ADD, "Add", g_binary(g, G_MUL, "Mul", xr, co), rot_sin);
    if (partial) {
        int pass[2] = {y, g_slice(g, "Slice_pass", x, -1, r, G_END)};
        y = g_concat(g, "Concat_pass", 2, pass, -1);
    }
    if (vision)
        y = g_cast(g, "Cast_y", y, dt);
    lw_refine(c, y, n, 0);
    outs[0] = y;
    return g->err.status;
}
