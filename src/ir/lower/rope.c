/* rope.c — lowering of rotary embeddings. cos/sin tables are built once per (positions, dtype,
 * rope options) and shared by every node with that key: layers whose options differ (Gemma 3's
 * local layers, another theta) get tables of their own.
 *
 *   tables: positions ─cast(f32)─unsqueeze(-1)─mul(inv_freq)─concat(f,f)─┬─cos─[mul(scale)]─cast─unsqueeze(2)
 *                                                                        └─sin─[mul(scale)]─cast─unsqueeze(2)
 *   apply:  x*cos + rotate_half(x)*sin,  rotate_half(x) = concat(-x[..., r/2:r], x[..., :r/2])
 *   partial rotary (r < d): the rotation applies to x[..., :r]; x[..., r:] passes through. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/legalize.h"
#include "ir/lower/rope_freq.h"

bool lw_same_rope(const g_rope_opts *a, const g_rope_opts *b)
{
    const rope_config *x = &a->rope, *y = &b->rope;
    return a->head_dim == b->head_dim && a->rotary_dim == b->rotary_dim &&
           a->max_position_embeddings == b->max_position_embeddings && x->type == y->type &&
           x->theta == y->theta && x->factor == y->factor &&
           x->low_freq_factor == y->low_freq_factor && x->high_freq_factor == y->high_freq_factor &&
           x->original_max_position_embeddings == y->original_max_position_embeddings &&
           x->beta_fast == y->beta_fast && x->beta_slow == y->beta_slow &&
           x->attention_factor == y->attention_factor && x->mscale == y->mscale &&
           x->mscale_all_dim == y->mscale_all_dim && x->truncate == y->truncate;
}

/* inv_freq [r/2] as a graph value: a constant, or for dynamic (NTK) rope computed from the
 * largest position in the batch as transformers' dynamic update does:
 * base' = base * (factor*L/max - (factor-1)) ** (r/(r-2)), L = max(max(position_ids)+1, max). */
static int inv_freq(g_graph *g, const g_rope_opts *o, int positions)
{
    int64_t half = o->rotary_dim / 2;
    int64_t dims[1] = {half};
    float *freq = malloc((size_t)half * sizeof *freq);
    if (!freq)
        return g_fail(g, FERRY_ERR_NOMEM, "out of memory");
    int inv;
    if (o->rope.type == ROPE_DYNAMIC) {
        int64_t all_axes[2] = {0, 1};
        double dim = (double)o->rotary_dim;
        int pmax = g_reduce(g, G_REDUCE_MAX, "ReduceMax", positions, 2, all_axes, false);
        int len = g_binary(g, G_ADD, "Add", pmax, g_scalar_i64(g, 1));
        len = g_binary(g, G_MAX, "Max", len, g_scalar_i64(g, o->max_position_embeddings));
        int lenf = g_cast(g, "Cast_len", len, FERRY_F32);
        int t = g_binary(g, G_DIV, "Div",
                         g_binary(g, G_MUL, "Mul_factor", lenf,
                                  g_scalar_f(g, FERRY_F32, o->rope.factor)),
                         g_scalar_f(g, FERRY_F32, (double)o->max_position_embeddings));
        t = g_binary(g, G_SUB, "Sub", t, g_scalar_f(g, FERRY_F32, o->rope.factor - 1.0));
        t = g_binary(g, G_POW, "Pow", t, g_scalar_f(g, FERRY_F32, dim / (dim - 2.0)));
        int base = g_binary(g, G_MUL, "Mul_base", t, g_scalar_f(g, FERRY_F32, o->rope.theta));
        for (int64_t i = 0; i < half; i++)
            freq[i] = (float)(2 * i) / (float)o->rotary_dim;
        int ex = g_const(g, FERRY_F32, 1, dims, freq);
        inv = g_unary(g, G_RECIPROCAL, "Reciprocal", g_binary(g, G_POW, "Pow_1", base, ex));
    } else {
        rope_inv_freq(&o->rope, o->rotary_dim, o->max_position_embeddings, freq);
        inv = g_const(g, FERRY_F32, 1, dims, freq);
    }
    free(freq);
    return inv;
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
    int64_t neg1 = -1, two = 2;
    double scaling = rope_attention_scaling(&o->rope);
    int inv = inv_freq(g, o, positions);
    int p = g_unsqueeze(g, "Unsqueeze", g_cast(g, "Cast", positions, FERRY_F32), 1, &neg1);
    int f = g_binary(g, G_MUL, "Mul", p, inv);
    int ff[2] = {f, f};
    int emb = g_concat(g, "Concat", 2, ff, -1);
    int co = g_unary(g, G_COS, "Cos", emb), si = g_unary(g, G_SIN, "Sin", emb);
    if (scaling != 1.0) {
        int s = g_scalar_f(g, FERRY_F32, scaling);
        co = g_binary(g, G_MUL, "Mul_cos", co, s);
        si = g_binary(g, G_MUL, "Mul_sin", si, s);
    }
    co = g_unsqueeze(g, "Unsqueeze_cos", g_cast(g, "Cast_cos", co, dtype), 1, &two);
    si = g_unsqueeze(g, "Unsqueeze_sin", g_cast(g, "Cast_sin", si, dtype), 1, &two);
    lw_scope_pop(c, saved);
    lw_memo_add(c, &(lw_memo){.kind = LW_MEMO_ROPE, .in_a = positions, .key = (int64_t)dtype,
                              .rope = *o, .out_a = co, .out_b = si});
    *cos_out = co;
    *sin_out = si;
}

ferry_status lower_rope(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    const g_rope_opts *o = n->a.rope;
    int x = lw_in(c, n, 0), pos = lw_in(c, n, 1);
    int co = G_NONE, si = G_NONE;
    rope_tables(c, o, pos, g->values[x].dtype, &co, &si);
    if (!g_ok(g))
        return g->err.status;
    int64_t r = o->rotary_dim, half = r / 2;
    bool partial = r < o->head_dim;
    int xr = partial ? g_slice(g, "Slice_rot", x, -1, 0, r) : x;
    int x1 = g_slice(g, "Slice", xr, -1, 0, half);
    int x2 = g_slice(g, "Slice_1", xr, -1, half, G_END);
    int parts[2] = {g_unary(g, G_NEG, "Neg", x2), x1};
    int rot = g_concat(g, "Concat", 2, parts, -1);
    int y = g_binary(g, G_ADD, "Add", g_binary(g, G_MUL, "Mul", xr, co),
                     g_binary(g, G_MUL, "Mul_1", rot, si));
    if (partial) {
        int pass[2] = {y, g_slice(g, "Slice_pass", x, -1, r, G_END)};
        y = g_concat(g, "Concat_pass", 2, pass, -1);
    }
    lw_refine(c, y, n, 0);
    outs[0] = y;
    return g->err.status;
}
