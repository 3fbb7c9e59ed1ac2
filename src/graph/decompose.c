/* decompose.c — rewrites semantic ops (RMSNorm, Linear, RoPE, Attention, SiLU) into primitives
 * that every runtime has, matching transformers' eager arithmetic step by step. Backends that
 * map a semantic op to a fused kernel keep it by passing `keep`.
 *
 * Pieces shared by all layers (rotary cos/sin, attention masks) are built once per distinct
 * input and reused, so a 28-layer model has one mask, not 28. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "graph/rope.h"
#include "util/dtype.h"

#define MEMO_MAX 16

typedef struct memo {
    int key_a;
    int64_t key_b;
    int a, b;
} memo;

typedef struct ctx {
    const g_graph *src;
    g_graph *dst;
    int *map;                  /* src value -> dst value */
    memo ropes[MEMO_MAX];
    int n_ropes;
    memo masks[MEMO_MAX];
    int n_masks;
} ctx;

/* Copies a src value that has no producer in the node list (input, const, weight). */
static int leaf(ctx *c, int v)
{
    if (v == G_NONE)
        return G_NONE;
    if (c->map[v] != G_NONE)
        return c->map[v];
    const g_value *x = &c->src->values[v];
    int nv = G_NONE;
    if (x->kind == GV_WEIGHT) {
        nv = g_weight_value(c->dst, x->weight.src, x->weight.dtype, x->weight.transpose);
    } else if (x->kind == GV_CONST) {
        int64_t dims[G_MAX_RANK];
        for (int i = 0; i < x->shape.rank; i++)
            g_dim_is_const(x->shape.d[i], &dims[i]);
        nv = g_const(c->dst, x->dtype, x->shape.rank, dims, x->data);
    }
    c->map[v] = nv;
    return nv;
}

/* Pins a decomposition's result to the shape the semantic op had: computed reshapes lose track
 * of symbolic dims that the builder knew. */
static void refine(g_graph *g, int v, const g_shape *known)
{
    if (v == G_NONE || g->values[v].shape.rank != known->rank)
        return;
    for (int i = 0; i < known->rank; i++)
        if (g->values[v].shape.d[i].unknown)
            g->values[v].shape.d[i] = known->d[i];
}

/*  x ─Cast(f32)─┬─Mul(x,x)─ReduceMean(-1)─Add(eps)─Sqrt─Reciprocal─┐
 *               └──────────────────────────────────────────────────Mul─Cast(dtype)─Mul(w[+1])
 */
static int rms_norm(ctx *c, const g_node *n)
{
    g_graph *g = c->dst;
    int x = c->map[n->in[0]], w = c->map[n->in[1]];
    ferry_dtype dt = g->values[x].dtype;
    int64_t last = -1;
    int xf = g_cast(g, "Cast", x, FERRY_F32);
    int sq = g_binary(g, G_MUL, "Square", xf, xf);
    int var = g_reduce(g, G_REDUCE_MEAN, "ReduceMean", sq, 1, &last, true);
    int ve = g_binary(g, G_ADD, "Add", var, g_scalar_f(g, FERRY_F32, n->f[0]));
    int rs = g_unary(g, G_RECIPROCAL, "Reciprocal", g_unary(g, G_SQRT, "Sqrt", ve));
    int y = g_cast(g, "Cast_1", g_binary(g, G_MUL, "Mul", xf, rs), dt);
    if (n->f[1] != 0.0)
        w = g_binary(g, G_ADD, "WeightOffset", w, g_scalar_f(g, dt, n->f[1]));
    return g_binary(g, G_MUL, "Mul_1", y, w);
}

/* A weight also read by a Gather (tied embeddings) is multiplied as stored, [out, in], with
 * Gemm(transB=1) on a flattened x; any other weight is written transposed for a plain MatMul. */
static int linear(ctx *c, const g_node *n)
{
    g_graph *g = c->dst;
    const g_value *ws = &c->src->values[n->in[1]];
    int x = c->map[n->in[0]];
    int b = n->n_in > 2 ? leaf(c, n->in[2]) : G_NONE;
    bool shared = false;
    for (size_t i = 0; i < c->src->n_nodes; i++) {
        const g_node *o = &c->src->nodes[i];
        if (!o->dead && o->op == G_GATHER && o->in[0] == n->in[1])
            shared = true;
    }
    int y;
    if (ws->kind == GV_WEIGHT && !shared) {
        int wt = g_weight_value(g, ws->weight.src, ws->weight.dtype, true);
        y = g_matmul(g, "MatMul", x, wt);
        if (b != G_NONE)
            y = g_binary(g, G_ADD, "Add", y, b);
    } else {
        int w = leaf(c, n->in[1]);
        int64_t in_dim = -1, flat[2] = {-1, 0};
        g_dim_is_const(ws->shape.d[1], &in_dim);
        flat[1] = in_dim;
        int x2 = g_reshape(g, "Flatten", x, 2, flat);
        int y2 = g_gemm_tb(g, "Gemm", x2, w, b);
        /* target shape: x's leading dims, then out */
        int rank = g->values[x].shape.rank;
        int lead = g_shape_of(g, "Shape", x, 0, rank - 1);
        int outd = g_shape_of(g, "Shape_1", w, 0, 1);
        int parts[2] = {lead, outd};
        int tshape = g_concat(g, "Concat", 2, parts, 0);
        y = g_reshape_dyn(g, "Unflatten", y2, tshape);
    }
    refine(g, y, &c->src->values[n->out[0]].shape);
    return y;
}

/* cos/sin for `positions`, each [b, s, 1, d] in `dtype`, built once per positions value.
 *   positions ─Cast(f32)─Unsqueeze(-1)─Mul(inv_freq)─Concat(f,f)─┬─Cos─Mul(scale)─Cast─Unsqueeze(2)
 *                                                                 └─Sin─Mul(scale)─Cast─Unsqueeze(2) */
static void rope_tables(ctx *c, const g_node *n, int positions, ferry_dtype dtype, int *cos_out,
                        int *sin_out)
{
    for (int i = 0; i < c->n_ropes; i++)
        if (c->ropes[i].key_a == positions && c->ropes[i].key_b == (int64_t)dtype) {
            *cos_out = c->ropes[i].a;
            *sin_out = c->ropes[i].b;
            return;
        }
    g_graph *g = c->dst;
    const g_rope_opts *o = n->rope;
    int64_t half = o->head_dim / 2, neg1 = -1, two = 2;
    char saved[sizeof g->scope];
    memcpy(saved, g->scope, sizeof saved);
    g_scope(g, "/model/rotary_emb");
    int inv;
    double scaling = rope_attention_scaling(&o->rope);
    float *freq = malloc((size_t)half * sizeof *freq);
    if (!freq) {
        fy_fail(&g->err, FERRY_ERR_NOMEM, "out of memory");
        return;
    }
    if (o->rope.type == ROPE_DYNAMIC) {
        /* NTK-aware scaling from the largest position in the batch, as transformers' dynamic
         * update does: base' = base * (factor*L/max - (factor-1)) ** (d/(d-2)), with
         * L = max(max(position_ids)+1, max_position_embeddings). */
        int64_t axes_none[2] = {0, 1};
        double dim = (double)o->head_dim;
        int pmax = g_reduce(g, G_REDUCE_MAX, "ReduceMax", positions, 2, axes_none, false);
        int len = g_binary(g, G_ADD, "Add", pmax, g_scalar_i64(g, 1));
        len = g_binary(g, G_MAX, "Max", len, g_scalar_i64(g, o->max_position_embeddings));
        int lenf = g_cast(g, "Cast_len", len, FERRY_F32);
        int t = g_binary(g, G_DIV, "Div", g_binary(g, G_MUL, "Mul_factor", lenf,
                                                    g_scalar_f(g, FERRY_F32, o->rope.factor)),
                         g_scalar_f(g, FERRY_F32, (double)o->max_position_embeddings));
        t = g_binary(g, G_SUB, "Sub", t, g_scalar_f(g, FERRY_F32, o->rope.factor - 1.0));
        t = g_binary(g, G_POW, "Pow", t, g_scalar_f(g, FERRY_F32, dim / (dim - 2.0)));
        int base = g_binary(g, G_MUL, "Mul_base", t, g_scalar_f(g, FERRY_F32, o->rope.theta));
        for (int64_t i = 0; i < half; i++)
            freq[i] = (float)(2 * i) / (float)o->head_dim;
        int64_t dims[1] = {half};
        int ex = g_const(g, FERRY_F32, 1, dims, freq);
        inv = g_unary(g, G_RECIPROCAL, "Reciprocal", g_binary(g, G_POW, "Pow_1", base, ex));
    } else {
        rope_inv_freq(&o->rope, o->head_dim, o->max_position_embeddings, freq);
        int64_t dims[1] = {half};
        inv = g_const(g, FERRY_F32, 1, dims, freq);
    }
    free(freq);
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
    memcpy(g->scope, saved, sizeof saved);
    if (c->n_ropes < MEMO_MAX)
        c->ropes[c->n_ropes++] = (memo){positions, (int64_t)dtype, co, si};
    *cos_out = co;
    *sin_out = si;
}

/*  x*cos + rotate_half(x)*sin,  rotate_half(x) = Concat(-x[..., d/2:], x[..., :d/2]) */
static int rope(ctx *c, const g_node *n)
{
    g_graph *g = c->dst;
    int x = c->map[n->in[0]], pos = c->map[n->in[1]];
    int co = G_NONE, si = G_NONE;
    rope_tables(c, n, pos, g->values[x].dtype, &co, &si);
    if (!g_ok(g))
        return G_NONE;
    int64_t half = n->rope->head_dim / 2;
    int x1 = g_slice(g, "Slice", x, -1, 0, half);
    int x2 = g_slice(g, "Slice_1", x, -1, half, INT64_MAX);
    int parts[2] = {g_unary(g, G_NEG, "Neg", x2), x1};
    int rot = g_concat(g, "Concat", 2, parts, -1);
    int y = g_binary(g, G_ADD, "Add", g_binary(g, G_MUL, "Mul", x, co),
                     g_binary(g, G_MUL, "Mul_1", rot, si));
    refine(g, y, &c->src->values[n->out[0]].shape);
    return y;
}

/* The bool mask [b, 1, 1, s, t] shared by every layer with the same window. From a 2-D
 * attention_mask (1 = token): query i (at cache index t - s + i) sees key j when j <= its index
 * and the key is not padding — transformers' causal and padding masks. From a bool [b, 1, s, t]
 * mask: as given. Either way, with a window, also j > index - window (the sliding mask). */
static int attention_mask(ctx *c, int mask, int q, int offset, int64_t window)
{
    for (int i = 0; i < c->n_masks; i++)
        if (c->masks[i].key_a == mask && c->masks[i].key_b == window)
            return c->masks[i].a;
    g_graph *g = c->dst;
    char saved[sizeof g->scope];
    memcpy(saved, g->scope, sizeof saved);
    g_scope(g, window ? "/model/sliding_mask_%lld" : "/model/causal_mask", (long long)window);
    bool given = g->values[mask].shape.rank == 4;
    int64_t zero = 0, one = 1, pad_axes[3] = {1, 2, 3};
    int t = g_gather(g, "Gather_t", g_shape_of(g, "Shape_t", mask, 0, INT64_MAX),
                     g_scalar_i64(g, given ? 3 : 1), 0);
    int s = g_gather(g, "Gather_s", g_shape_of(g, "Shape_s", q, 0, INT64_MAX), g_scalar_i64(g, 1), 0);
    int first = given ? (offset != G_NONE ? g_gather(g, "Gather_offset", offset, g_scalar_i64(g, 0), 0)
                                          : g_scalar_i64(g, 0))
                      : g_binary(g, G_SUB, "Sub", t, s);
    int m;
    if (given) {
        m = g_unsqueeze(g, "Unsqueeze_mask", mask, 1, &one); /* [b, 1, 1, s, t] */
    } else {
        int kv_idx = g_range(g, "Range_kv", g_scalar_i64(g, 0), t, g_scalar_i64(g, 1));
        int q_idx = g_range(g, "Range_q", first, t, g_scalar_i64(g, 1));
        int kv_row = g_unsqueeze(g, "Unsqueeze_kv", kv_idx, 1, &zero); /* [1, t] */
        int q_col = g_unsqueeze(g, "Unsqueeze_q", q_idx, 1, &one);     /* [s, 1] */
        int allowed = g_binary(g, G_LESS_OR_EQUAL, "LessOrEqual", kv_row, q_col);
        int keep = g_unsqueeze(g, "Unsqueeze_pad", g_cast(g, "Cast", mask, FERRY_BOOL), 3, pad_axes);
        m = g_binary(g, G_AND, "And", allowed, keep);                   /* [b, 1, 1, s, t] */
    }
    if (window > 0) {
        int kv_idx = g_range(g, "Range_kv_window", g_scalar_i64(g, 0), t, g_scalar_i64(g, 1));
        int q_end = g_binary(g, G_ADD, "Add_q_end", first, s);
        int q_idx = g_range(g, "Range_q_window", first, q_end, g_scalar_i64(g, 1));
        int kv_row = g_unsqueeze(g, "Unsqueeze_kv_window", kv_idx, 1, &zero);
        int q_col = g_unsqueeze(g, "Unsqueeze_q_window", q_idx, 1, &one);
        int lo = g_binary(g, G_SUB, "Sub_window", q_col, g_scalar_i64(g, window));
        m = g_binary(g, G_AND, "And_window", m, g_binary(g, G_GREATER, "Greater", kv_row, lo));
    }
    memcpy(g->scope, saved, sizeof saved);
    if (c->n_masks < MEMO_MAX)
        c->masks[c->n_masks++] = (memo){mask, window, m, 0};
    return m;
}

/* Grouped-query attention without repeating K/V: queries are grouped per kv head and MatMul
 * broadcasts K/V over the group axis.
 *   q [b,s,h,d] ─Transpose─Reshape─> [b,kvh,g,s,d] ─MatMul(kᵀ [b,kvh,1,d,t])─Mul(scale)
 *   ─Where(mask, ·, min)─Softmax(f32)─MatMul(v [b,kvh,1,t,d])─Reshape [b,h,s,d]─Transpose
 *   ─Reshape─> [b,s,h*d] */
static int attention(ctx *c, const g_node *n)
{
    g_graph *g = c->dst;
    const g_attn_opts *o = n->attn;
    int q = c->map[n->in[0]], k = c->map[n->in[1]], v = c->map[n->in[2]];
    int mask = c->map[n->in[3]];
    int offset = n->n_in > 4 && n->in[4] != G_NONE ? c->map[n->in[4]] : G_NONE;
    ferry_dtype dt = g->values[q].dtype;
    int64_t groups = o->num_heads / o->num_kv_heads;
    int64_t p0213[4] = {0, 2, 1, 3}, p0132[4] = {0, 1, 3, 2}, two = 2;
    int64_t q5[5] = {0, o->num_kv_heads, groups, -1, o->head_dim};
    int64_t h4[4] = {0, o->num_heads, -1, o->head_dim};
    int64_t out3[3] = {0, 0, o->num_heads * o->head_dim};
    int m = attention_mask(c, mask, q, offset, o->sliding_window);
    int qt = g_reshape(g, "Reshape_q", g_transpose(g, "Transpose_q", q, 4, p0213), 5, q5);
    int kt = g_unsqueeze(g, "Unsqueeze_k", g_transpose(g, "Transpose_k", k, 4, p0132), 1, &two);
    int vt = g_unsqueeze(g, "Unsqueeze_v", v, 1, &two);
    int scores = g_matmul(g, "MatMul", qt, kt);
    scores = g_binary(g, G_MUL, "Mul_scale", scores, g_scalar_f(g, dt, o->scale));
    scores = g_cast(g, "Cast", scores, FERRY_F32);
    /* The most negative finite value, not -inf: a fully masked row (a padding query) then
     * softmaxes to a uniform row instead of NaN that would poison later layers. */
    scores = g_where(g, "Where", m, scores, g_scalar_f(g, FERRY_F32, -3.4028234663852886e38));
    int probs = g_cast(g, "Cast_1", g_softmax(g, "Softmax", scores, -1), dt);
    int ctxv = g_matmul(g, "MatMul_1", probs, vt);
    int y = g_reshape(g, "Reshape_heads", ctxv, 4, h4);
    y = g_reshape(g, "Reshape_out", g_transpose(g, "Transpose_out", y, 4, p0213), 3, out3);
    refine(g, y, &c->src->values[n->out[0]].shape);
    return y;
}

/* Static-cache write: the update's rows land at slots position.. along the cache axis.
 *   idx = Expand(Range(position, position + s) as [1,1,s,1], shape(update))
 *   cache' = ScatterElements(cache, idx, update, axis=2)
 * The output can share the cache's buffer: nothing else reads the old cache. */
static int kv_write(ctx *c, const g_node *n)
{
    g_graph *g = c->dst;
    int cache = c->map[n->in[0]], update = c->map[n->in[1]], pos = c->map[n->in[2]];
    int64_t col[4] = {1, 1, -1, 1};
    int start = g_gather(g, "Gather_position", pos, g_scalar_i64(g, 0), 0);
    int ushape = g_shape_of(g, "Shape", update, 0, INT64_MAX);
    int s = g_gather(g, "Gather_s", ushape, g_scalar_i64(g, 2), 0);
    int slots = g_range(g, "Range", start, g_binary(g, G_ADD, "Add", start, s), g_scalar_i64(g, 1));
    int idx = g_expand(g, "Expand", g_reshape(g, "Reshape", slots, 4, col), ushape);
    int y = g_scatter_elements(g, "ScatterElements", cache, idx, update, 2);
    refine(g, y, &c->src->values[n->out[0]].shape);
    return y;
}

static int silu(ctx *c, const g_node *n)
{
    int x = c->map[n->in[0]];
    return g_binary(c->dst, G_MUL, "Mul", x, g_unary(c->dst, G_SIGMOID, "Sigmoid", x));
}

static int copy_node(ctx *c, const g_node *n)
{
    g_graph *g = c->dst;
    int in[G_MAX_INPUTS];
    for (int i = 0; i < n->n_in; i++)
        in[i] = n->in[i] == G_NONE ? G_NONE : c->map[n->in[i]];
    g->scope[0] = '\0';
    int node = g_add_node(g, n->op, n->name + (n->name[0] == '/'), n->n_in, in, n->ints, n->n_ints);
    if (node == G_NONE)
        return G_NONE;
    g_node *nn = &g->nodes[node];
    nn->to = n->to;
    memcpy(nn->f, n->f, sizeof nn->f);
    /* The copy is not re-inferred here: g_check re-derives every node of the result. */
    if (n->rope && !(nn->rope = malloc(sizeof *nn->rope)))
        return fy_fail(&g->err, FERRY_ERR_NOMEM, "out of memory"), G_NONE;
    if (n->rope)
        *nn->rope = *n->rope;
    if (n->attn && !(nn->attn = malloc(sizeof *nn->attn)))
        return fy_fail(&g->err, FERRY_ERR_NOMEM, "out of memory"), G_NONE;
    if (n->attn)
        *nn->attn = *n->attn;
    const g_value *o = &c->src->values[n->out[0]];
    int v = g_add_value(g, o->name, o->dtype, &o->shape, GV_NODE);
    if (v == G_NONE)
        return G_NONE;
    g->values[v].producer = node;
    nn->out[0] = v;
    return v;
}

g_graph *g_decompose(const g_graph *src, const bool *keep, fy_err *err)
{
    ctx c = {.src = src};
    c.dst = g_new();
    c.map = malloc((src->n_values ? src->n_values : 1) * sizeof *c.map);
    if (!c.dst || !c.map) {
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < src->n_values; i++)
        c.map[i] = G_NONE;
    c.dst->syms = src->syms;
    for (size_t i = 0; i < src->n_inputs; i++) {
        const g_value *x = &src->values[src->inputs[i]];
        c.map[src->inputs[i]] = g_input(c.dst, x->name, x->dtype, x->shape.rank, x->shape.d);
    }
    for (size_t i = 0; i < src->n_nodes && g_ok(c.dst); i++) {
        const g_node *n = &src->nodes[i];
        if (n->dead)
            continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] != G_NONE && c.map[n->in[k]] == G_NONE)
                leaf(&c, n->in[k]);
        int out;
        if (!g_op_is_semantic(n->op) || (keep && keep[n->op])) {
            out = copy_node(&c, n);
        } else {
            g_scope(c.dst, "%s", n->name);
            switch (n->op) {
            case G_RMS_NORM: out = rms_norm(&c, n); break;
            case G_LINEAR: out = linear(&c, n); break;
            case G_ROPE: out = rope(&c, n); break;
            case G_ATTENTION: out = attention(&c, n); break;
            case G_SILU: out = silu(&c, n); break;
            case G_KV_WRITE: out = kv_write(&c, n); break;
            default:
                fy_fail(&c.dst->err, FERRY_ERR_INTERNAL, "no decomposition for %s",
                        g_op_name(n->op));
                out = G_NONE;
            }
        }
        c.map[n->out[0]] = out;
    }
    for (size_t i = 0; i < src->n_outputs && g_ok(c.dst); i++) {
        int v = src->outputs[i];
        int nv = c.map[v] != G_NONE ? c.map[v] : leaf(&c, v);
        g_output(c.dst, nv, src->values[v].name);
    }
    if (!g_ok(c.dst)) {
        fy_fail(err, c.dst->err.status, "%s", c.dst->err.msg);
        goto fail;
    }
    free(c.map);
    g_remove_dead(c.dst);
    return c.dst;
fail:
    free(c.map);
    g_free(c.dst);
    return NULL;
}
