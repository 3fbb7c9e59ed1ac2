/* infer_semantic.c — output types of the semantic ops (norms, linear, embedding, rope,
 * attention, moe, ...), which the targets lower: their inputs checked against each other and
 * their attributes, as infer.c does for the primitives. */
#include <math.h>
#include <string.h>

#include "ir/infer_ops.h"
#include "util/dtype.h"

/* ---- semantic ops ---- */

static bool last_dim_matches(const g_value *x, const g_value *w)
{
    return w->shape.rank == 1 && x->shape.rank >= 1 &&
           g_dim_match(w->shape.d[0], x->shape.d[x->shape.rank - 1]);
}

/* eps positive and finite, offset finite (an attribute a file's value reached). */
static ferry_status check_norm_attrs(inf *x)
{
    if (!(x->n->a.eps > 0) || !isfinite(x->n->a.eps) || !isfinite(x->n->a.offset))
        return inf_bad(x, "eps must be positive and finite, offset finite");
    if ((g_op_info_of(x->n->op)->attrs & GA_F32W) && x->n->a.offset != 0 && !x->n->a.f32_weight)
        return inf_bad(x, "an offset weight multiplies in fp32 (f32_weight)");
    return FERRY_OK;
}

ferry_status infer_norm(inf *x)
{
    const g_value *a = x->in[0], *w = x->in[1], *b = x->in[2];
    if (!dt_is_float(a->dtype) || w->dtype != a->dtype || !last_dim_matches(a, w) ||
        (b && (b->dtype != a->dtype || !last_dim_matches(a, b))))
        return inf_bad(x, "weight (and bias) must be 1-D, of x's dtype, and match its last dim");
    if (check_norm_attrs(x) != FERRY_OK)
        return x->err->status;
    return inf_one(x, a->dtype, &a->shape);
}

ferry_status infer_skip_norm(inf *x)
{
    const g_value *a = x->in[0], *skip = x->in[1], *w = x->in[2], *b = x->in[3];
    g_shape s;
    if (!dt_is_float(a->dtype) || skip->dtype != a->dtype || w->dtype != a->dtype ||
        !g_shape_broadcast(&a->shape, &skip->shape, &s) || !last_dim_matches(a, w) ||
        (b && (b->dtype != a->dtype || !last_dim_matches(a, b))))
        return inf_bad(x, "needs x and skip of one dtype and shape, and a matching 1-D weight "
                   "(and bias)");
    if (check_norm_attrs(x) != FERRY_OK)
        return x->err->status;
    x->out[0] = (g_typed){a->dtype, s};
    x->out[1] = (g_typed){a->dtype, s};
    x->n_out = 2;
    return FERRY_OK;
}

ferry_status infer_linear(inf *x)
{
    const g_value *a = x->in[0], *w = x->in[1], *b = x->in[2];
    if (w->dtype != a->dtype || w->shape.rank != 2 || a->shape.rank < 1 ||
        !g_dim_match(w->shape.d[1], a->shape.d[a->shape.rank - 1]))
        return inf_bad(x, "weight must be [out, in] with in = the last dim of x");
    if (b && (b->dtype != a->dtype || b->shape.rank != 1 ||
              !g_dim_match(b->shape.d[0], w->shape.d[0])))
        return inf_bad(x, "bias must be [out]");
    g_shape s = a->shape;
    s.d[s.rank - 1] = w->shape.d[0];
    return inf_one(x, a->dtype, &s);
}

ferry_status infer_embedding(inf *x)
{
    const g_value *t = x->in[0], *ids = x->in[1];
    if (t->shape.rank != 2 || (ids->dtype != FERRY_I64 && ids->dtype != FERRY_I32) ||
        ids->shape.rank + 1 > G_MAX_RANK)
        return inf_bad(x, "needs a [vocab, n] table and integer ids");
    g_shape s = ids->shape;
    s.d[s.rank++] = t->shape.d[1];
    return inf_one(x, t->dtype, &s);
}

ferry_status infer_softcap(inf *x)
{
    if (!(x->n->a.cap > 0) || !isfinite(x->n->a.cap))
        return inf_bad(x, "cap must be positive and finite");
    return infer_float_unary(x);
}

/* The rope options' own consistency: what a builder or a config could get wrong and a lowering
 * would otherwise turn into a table of NaNs or a slice past the head. */
static ferry_status check_rope_opts(inf *x, const g_rope_opts *o)
{
    const rope_config *r = &o->rope;
    int64_t half = o->rotary_dim / 2;
    if (r->type == ROPE_LONGROPE) {
        if (r->n_factors != half || r->original_max_position_embeddings <= 0)
            return inf_bad(x, "longrope needs rotary_dim/2 short and long factors and "
                          "original_max_position_embeddings");
        for (int i = 0; i < r->n_factors; i++)
            if (!(r->short_factor[i] > 0) || !isfinite(r->short_factor[i]) ||
                !(r->long_factor[i] > 0) || !isfinite(r->long_factor[i]))
                return inf_bad(x, "longrope factors must be positive and finite");
        if (r->attention_factor >= 0 && !isfinite(r->attention_factor))
            return inf_bad(x, "longrope attention_factor must be finite");
    }
    if (r->layout == ROPE_MROPE) {
        int64_t sum = 0;
        for (int i = 0; i < 3; i++) {
            if (r->mrope_section[i] <= 0)
                return inf_bad(x, "mrope_section entries must be positive");
            sum += r->mrope_section[i];
        }
        if (sum != half)
            return inf_bad(x, "mrope_section must sum to rotary_dim/2");
    }
    if (r->layout == ROPE_VISION_2D && (r->type != ROPE_DEFAULT || o->rotary_dim % 4 != 0))
        return inf_bad(x, "2-D rope takes default frequencies and a rotary_dim of a multiple of 4");
    if ((unsigned)r->layout > ROPE_VISION_2D)
        return inf_bad(x, "unknown rope position layout");
    return FERRY_OK;
}

/* The position input each layout reads (rope_config.h): [b, s], [3, b, s] or [b, s, 2]. */
static bool rope_positions_fit(const g_value *a, const g_value *p, rope_layout layout)
{
    if (p->dtype != FERRY_I64)
        return false;
    switch (layout) {
    case ROPE_MROPE:
        return p->shape.rank == 3 && g_dim_match(p->shape.d[0], g_dim_const(3)) &&
               g_dim_match(a->shape.d[0], p->shape.d[1]) &&
               g_dim_match(a->shape.d[1], p->shape.d[2]);
    case ROPE_VISION_2D:
        return p->shape.rank == 3 && g_dim_match(p->shape.d[2], g_dim_const(2)) &&
               g_dim_match(a->shape.d[0], p->shape.d[0]) &&
               g_dim_match(a->shape.d[1], p->shape.d[1]);
    case ROPE_1D:
        break;
    }
    return p->shape.rank == 2 && g_dim_match(a->shape.d[0], p->shape.d[0]) &&
           g_dim_match(a->shape.d[1], p->shape.d[1]);
}

ferry_status infer_rope(inf *x)
{
    const g_value *a = x->in[0], *p = x->in[1];
    const g_rope_opts *o = x->n->a.rope;
    int64_t d;
    if (a->shape.rank != 4 || !dt_is_float(a->dtype))
        return inf_bad(x, "needs x [b,s,h,d] and int64 position_ids [b,s]");
    if (!rope_positions_fit(a, p, o->rope.layout))
        return inf_bad(x, o->rope.layout == ROPE_MROPE ? "M-RoPE needs int64 position_ids [3,b,s]"
                      : o->rope.layout == ROPE_VISION_2D
                          ? "2-D rope needs int64 (h, w) positions [b,s,2]"
                          : "needs x [b,s,h,d] and int64 position_ids [b,s]");
    if (!(o->rope.theta > 0) || !isfinite(o->rope.theta) || o->max_position_embeddings <= 0)
        return inf_bad(x, "rope theta must be positive and finite");
    if (!g_dim_is_const(a->shape.d[3], &d) || d != o->head_dim || o->rotary_dim <= 0 ||
        o->rotary_dim > d || o->rotary_dim % 2 != 0)
        return inf_bad(x, "rotary_dim must be even and at most the head dim");
    ferry_status st = check_rope_opts(x, o);
    return st != FERRY_OK ? st : inf_one(x, a->dtype, &a->shape);
}

/* An attention's bias: float [b or 1, h, s, keys] (NULL: none). */
static ferry_status check_bias(inf *x, const g_value *bias, const g_value *q, int64_t h,
                               g_dim keys)
{
    if (!bias)
        return FERRY_OK;
    if (bias->shape.rank != 4 || !dt_is_float(bias->dtype) ||
        !(g_dim_match(bias->shape.d[0], g_dim_const(1)) ||
          g_dim_match(bias->shape.d[0], q->shape.d[0])) ||
        !g_dim_match(bias->shape.d[1], g_dim_const(h)) ||
        !g_dim_match(bias->shape.d[2], q->shape.d[1]) || !g_dim_match(bias->shape.d[3], keys))
        return inf_bad(x, "bias must be float [b or 1, heads, s, keys attended to]");
    return FERRY_OK;
}

/* Cross attention: q [b, s, h, d] over the cross cache k, v [b, kvh, t, d]: every key visible,
 * or a padding mask [b, t]. */
static ferry_status infer_cross_attention(inf *x)
{
    const g_value *q = x->in[0], *k = x->in[1], *v = x->in[2];
    const g_attn_opts *o = x->n->a.attn;
    int64_t h, kvh, d;
    if (q->shape.rank != 4 || k->shape.rank != 4 || !g_shape_eq(&k->shape, &v->shape) ||
        q->dtype != k->dtype || k->dtype != v->dtype || !dt_is_float(q->dtype))
        return inf_bad(x, "cross attention needs q [b,s,h,d], k and v [b,kvh,t,d] of one float "
                          "dtype");
    if (!g_dim_is_const(q->shape.d[2], &h) || !g_dim_is_const(k->shape.d[1], &kvh) ||
        !g_dim_is_const(q->shape.d[3], &d) || h != o->num_heads || kvh != o->num_kv_heads ||
        d != o->head_dim || o->num_kv_heads <= 0 || o->num_heads % o->num_kv_heads != 0 ||
        !g_dim_match(k->shape.d[3], q->shape.d[3]) || !g_dim_match(k->shape.d[0], q->shape.d[0]))
        return inf_bad(x, "head counts, head dim or batch disagree with the options");
    const g_value *m = x->in[3];
    bool padded = o->mask == G_MASK_PADDING;
    if (!(o->scale > 0) || !isfinite(o->scale) || o->softcap != 0 || o->sliding_window != 0 ||
        !(o->mask == G_MASK_NONE || padded) || (m != NULL) != padded || x->in[4] || x->in[5] ||
        x->in[6])
        return inf_bad(x, "cross attention takes a positive finite scale, no mask or a padding "
                          "mask, and no window, softcap, past or position");
    if (m && !(m->dtype == FERRY_I64 && m->shape.rank == 2 &&
               g_dim_match(m->shape.d[1], k->shape.d[2])))
        return inf_bad(x, "cross attention's padding mask must be int64 [b, keys]");
    if (check_bias(x, x->in[7], q, h, k->shape.d[2]) != FERRY_OK)
        return x->err->status;
    g_shape out = {.rank = 3, .d = {q->shape.d[0], q->shape.d[1], g_dim_const(h * d)}};
    x->out[0] = (g_typed){q->dtype, out};
    x->n_out = 1;
    return FERRY_OK;
}

ferry_status infer_attention(inf *x)
{
    const g_value *q = x->in[0], *k = x->in[1], *v = x->in[2], *m = x->in[3];
    const g_value *pk = x->in[4], *pv = x->in[5], *pos = x->in[6];
    const g_attn_opts *o = x->n->a.attn;
    int64_t h, kvh, d;
    if (o->cache == G_CACHE_CROSS)
        return infer_cross_attention(x);
    if (q->shape.rank != 4 || k->shape.rank != 4 || v->shape.rank != 4 ||
        q->dtype != k->dtype || k->dtype != v->dtype || !dt_is_float(q->dtype))
        return inf_bad(x, "needs q [b,s,h,d], k and v [b,t,kvh,d] of one float dtype");
    if (!g_dim_is_const(q->shape.d[2], &h) || !g_dim_is_const(k->shape.d[2], &kvh) ||
        !g_dim_is_const(q->shape.d[3], &d) || h != o->num_heads || kvh != o->num_kv_heads ||
        d != o->head_dim || o->num_kv_heads <= 0 || o->num_heads % o->num_kv_heads != 0 ||
        !g_dim_match(k->shape.d[3], q->shape.d[3]) || !g_dim_eq(v->shape.d[2], k->shape.d[2]))
        return inf_bad(x, "head counts or head dim disagree with the options");
    if (!g_dim_match(v->shape.d[3], q->shape.d[3]) || !g_dim_match(v->shape.d[1], k->shape.d[1]))
        return inf_bad(x, "v must be [b, t, kvh, d] like k");
    if (!(o->scale > 0) || !isfinite(o->scale) || !(o->softcap >= 0) || !isfinite(o->softcap) ||
        o->sliding_window < 0)
        return inf_bad(x, "scale must be positive and finite, softcap and window not negative");
    bool given = o->mask == G_MASK_GIVEN;
    if (o->mask == G_MASK_NONE) {
        /* every key visible: an encoder's or a vision tower's attention over unpadded input; a
         * cache (a decoder's keys) or a window would need positions that no mask gives */
        if (m || o->cache != G_CACHE_NONE || o->sliding_window != 0)
            return inf_bad(x, "attention without a mask takes no mask input, cache or window");
    } else if ((unsigned)o->mask > G_MASK_NONE || !m) {
        return inf_bad(x, "mask kind unknown, or its mask input missing");
    } else if (given ? !(m->dtype == FERRY_BOOL && m->shape.rank == 4)
                     : !(m->dtype == FERRY_I64 && m->shape.rank == 2)) {
        return inf_bad(x, "mask must be int64 [b, t] (causal, padding) or bool [b, 1, s, t] (given)");
    }
    if ((pos && (pos->dtype != FERRY_I64 || pos->shape.rank != 1 ||
                 !g_dim_match(pos->shape.d[0], g_dim_const(1)))) ||
        (o->cache == G_CACHE_STATIC && !pos))
        return inf_bad(x, "cache_position must be int64 [1] (required with a static cache)");
    if ((pk == NULL) != (pv == NULL) || (o->cache == G_CACHE_NONE && pk) ||
        (o->cache == G_CACHE_STATIC && !pk))
        return inf_bad(x, "past key and value go together, and only with a cache");
    if (pk && (pk->shape.rank != 4 || pk->dtype != q->dtype || pv->dtype != q->dtype ||
               !g_dim_match(pk->shape.d[1], g_dim_const(kvh)) ||
               !g_dim_match(pk->shape.d[3], g_dim_const(d)) ||
               !g_shape_eq(&pk->shape, &pv->shape)))
        return inf_bad(x, "past key/value must be [b, kvh, length, d] of q's dtype");
    /* The keys attended to: the cache's length (static), past + new (append), or the new. */
    g_dim keys = o->cache == G_CACHE_STATIC ? pk->shape.d[2]
                 : pk ? g_dim_add(pk->shape.d[2], k->shape.d[1]) : k->shape.d[1];
    if (m && (!g_dim_match(m->shape.d[m->shape.rank - 1], keys) ||
              (given && !g_dim_match(m->shape.d[2], q->shape.d[1]))))
        return inf_bad(x, "the mask's key length differs from the keys attended to");
    if (check_bias(x, x->in[7], q, h, keys) != FERRY_OK)
        return x->err->status;
    g_shape out = {.rank = 3, .d = {q->shape.d[0], q->shape.d[1], g_dim_const(h * d)}};
    x->out[0] = (g_typed){q->dtype, out};
    x->n_out = 1;
    if (o->cache == G_CACHE_NONE)
        return FERRY_OK;
    g_shape present;
    if (o->cache == G_CACHE_STATIC) {
        present = pk->shape;
    } else {
        g_dim len = pk ? g_dim_add(pk->shape.d[2], k->shape.d[1]) : k->shape.d[1];
        present = (g_shape){.rank = 4, .d = {q->shape.d[0], g_dim_const(kvh), len,
                                             g_dim_const(d)}};
    }
    x->out[1] = (g_typed){q->dtype, present};
    x->out[2] = (g_typed){q->dtype, present};
    x->n_out = 3;
    return FERRY_OK;
}

/* Whether `w` is a rank-3 weight of x's dtype with constant extents, given in e[3]. */
static bool expert_stack(const g_value *w, ferry_dtype dt, int64_t *e)
{
    if (w->shape.rank != 3 || w->dtype != dt)
        return false;
    for (int i = 0; i < 3; i++)
        if (!g_dim_is_const(w->shape.d[i], &e[i]) || e[i] < 1 || e[i] >= ATTR_LIMIT)
            return false;
    return true;
}

ferry_status infer_moe(inf *x)
{
    const g_value *a = x->in[0], *logits = x->in[1], *gu = x->in[2], *down = x->in[3];
    const g_value *up = x->in[4];
    const g_moe_opts *o = x->n->a.moe;
    int r = a->shape.rank;
    if (o->num_experts < 1 || o->num_experts >= ATTR_LIMIT || o->top_k < 1 ||
        o->top_k > o->num_experts)
        return inf_bad(x, "needs num_experts >= 1 and 1 <= top_k <= num_experts");
    if (o->act != G_SILU && o->act != G_GELU && o->act != G_GELU_TANH)
        return inf_bad(x, "the activation must be silu, gelu or gelu_tanh");
    /* the lowering adds the experts' axis to x's */
    if (!dt_is_float(a->dtype) || r < 2 || r >= G_MAX_RANK)
        return inf_bad(x, "x must be a float [..., h] of rank 2 to 7");
    if (logits->dtype != a->dtype || logits->shape.rank != r ||
        !g_dim_match(logits->shape.d[r - 1], g_dim_const(o->num_experts)))
        return inf_bad(x, "router_logits must be [..., num_experts] of x's dtype");
    /* the lowering gathers each token's chosen experts by position, which needs the token
     * extents of both known and equal (an unknown one could not be checked to agree) */
    for (int i = 0; i < r - 1; i++)
        if (a->shape.d[i].unknown || !g_dim_eq(logits->shape.d[i], a->shape.d[i]))
            return inf_bad(x, "router_logits must have x's leading dims (one row per token), "
                          "known extents");
    int64_t g[3], d[3], u[3];
    if (!expert_stack(gu, a->dtype, g) || !expert_stack(down, a->dtype, d) ||
        (up && !expert_stack(up, a->dtype, u)))
        return inf_bad(x, "expert weights must be [E, rows, cols] of x's dtype, constant extents");
    int64_t ff = up ? g[1] : g[1] / 2;
    if (g[0] != o->num_experts || d[0] != o->num_experts)
        return inf_bad(x, "the expert weights' first extent must be num_experts");
    if (up ? !(u[0] == g[0] && u[1] == g[1] && u[2] == g[2]) : g[1] % 2 != 0)
        return inf_bad(x, up ? "up must be [E, ff, h] like gate"
                         : "a fused gate_up must be [E, 2*ff, h]");
    if (!g_dim_match(a->shape.d[r - 1], g_dim_const(g[2])) || d[1] != g[2] || d[2] != ff)
        return inf_bad(x, "gate/up must be [E, ff, h] (fused [E, 2*ff, h]) and down [E, h, ff], "
                   "h being x's last extent");
    return inf_one(x, a->dtype, &a->shape);
}
