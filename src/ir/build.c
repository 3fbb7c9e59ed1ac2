/* build.c — the builder calls: one small function per op that fills the attributes, appends the
 * node (which infers its outputs) and returns its first output. Any G_NONE input (a failed
 * earlier call) makes the call return G_NONE. */
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"

/* Appends `op` and returns its output `k`. */
static int node(g_graph *g, g_op op, const char *name, int n_in, const int *in, const g_attrs *a)
{
    int id = g_add_node(g, op, name, n_in, in, a);
    return id == G_NONE ? G_NONE : g->nodes[id].out[0];
}

/* An op over x whose attribute is a list of n integers (perm or axes), from min_n to G_MAX_INTS. */
static int list_node(g_graph *g, g_op op, const char *name, int x, int n, const int64_t *ints,
                     int min_n, bool keepdims)
{
    g_attrs at = {.n_ints = n, .keepdims = keepdims};
    if (n < min_n || n > G_MAX_INTS)
        return g_fail(g, FERRY_ERR_INTERNAL, "%s '%s': %d axes (%d to %d)", g_op_name(op), name,
                      n, min_n, G_MAX_INTS);
    if (n > 0)
        memcpy(at.ints, ints, (size_t)n * sizeof *ints);
    return node(g, op, name, 1, &x, &at);
}

int g_unary(g_graph *g, g_op op, const char *name, int x)
{
    return node(g, op, name, 1, &x, NULL);
}

int g_binary(g_graph *g, g_op op, const char *name, int a, int b)
{
    int in[2] = {a, b};
    return node(g, op, name, 2, in, NULL);
}

int g_where(g_graph *g, const char *name, int cond, int x, int y)
{
    int in[3] = {cond, x, y};
    return node(g, G_WHERE, name, 3, in, NULL);
}

int g_matmul(g_graph *g, const char *name, int a, int b, bool transpose_b)
{
    int in[2] = {a, b};
    g_attrs at = {.transpose_b = transpose_b};
    return node(g, G_MATMUL, name, 2, in, &at);
}

int g_gather(g_graph *g, const char *name, int data, int indices, int axis)
{
    int in[2] = {data, indices};
    g_attrs at = {.axis = axis};
    return node(g, G_GATHER, name, 2, in, &at);
}

int g_reshape(g_graph *g, const char *name, int x, int rank, const g_dim *dims)
{
    if (rank < 0 || rank > G_MAX_RANK)
        return g_fail(g, FERRY_ERR_INTERNAL, "reshape '%s': rank %d", name, rank);
    g_attrs at = {.shape.rank = rank};
    memcpy(at.shape.d, dims, (size_t)rank * sizeof *dims);
    return node(g, G_RESHAPE, name, 1, &x, &at);
}

int g_reshape_spec(g_graph *g, const char *name, int x, int rank, const int64_t *spec)
{
    if (x == G_NONE || !g_ok(g))
        return G_NONE;
    g_dim dims[G_MAX_RANK];
    const g_shape *xs = &g->values[x].shape;
    if (rank < 0 || rank > G_MAX_RANK)
        return g_fail(g, FERRY_ERR_INTERNAL, "reshape '%s': rank %d", name, rank);
    for (int i = 0; i < rank; i++) {
        if (spec[i] == 0 && i >= xs->rank)
            return g_fail(g, FERRY_ERR_INTERNAL, "reshape '%s' copies a dim the input lacks",
                          name);
        dims[i] = spec[i] == 0 ? xs->d[i] : spec[i] < 0 ? g_dim_unknown() : g_dim_const(spec[i]);
    }
    return g_reshape(g, name, x, rank, dims);
}

int g_transpose(g_graph *g, const char *name, int x, int n, const int64_t *perm)
{
    return list_node(g, G_TRANSPOSE, name, x, n, perm, 0, false);
}

int g_concat(g_graph *g, const char *name, int n, const int *xs, int axis)
{
    g_attrs at = {.axis = axis};
    return node(g, G_CONCAT, name, n, xs, &at);
}

int g_slice(g_graph *g, const char *name, int x, int64_t axis, int64_t start, int64_t end)
{
    g_attrs at = {.axis = axis, .start = start, .end = end};
    return node(g, G_SLICE, name, 1, &x, &at);
}

int g_unsqueeze(g_graph *g, const char *name, int x, int n, const int64_t *axes)
{
    return list_node(g, G_UNSQUEEZE, name, x, n, axes, 1, false);
}

int g_cast(g_graph *g, const char *name, int x, ferry_dtype to)
{
    if (x != G_NONE && g_ok(g) && g->values[x].dtype == to)
        return x;
    g_attrs at = {.to = to};
    return node(g, G_CAST, name, 1, &x, &at);
}

int g_softmax(g_graph *g, const char *name, int x, int axis)
{
    g_attrs at = {.axis = axis};
    return node(g, G_SOFTMAX, name, 1, &x, &at);
}

int g_cumsum(g_graph *g, const char *name, int x, int axis)
{
    g_attrs at = {.axis = axis};
    return node(g, G_CUMSUM, name, 1, &x, &at);
}

int g_reduce(g_graph *g, g_op op, const char *name, int x, int n, const int64_t *axes,
             bool keepdims)
{
    return list_node(g, op, name, x, n, axes, 1, keepdims);
}

int g_shape_of(g_graph *g, const char *name, int x, int64_t start, int64_t end)
{
    g_attrs at = {.start = start, .end = end};
    return node(g, G_SHAPE_OF, name, 1, &x, &at);
}

int g_range(g_graph *g, const char *name, int start, int limit, int delta)
{
    int in[3] = {start, limit, delta};
    return node(g, G_RANGE, name, 3, in, NULL);
}

int g_expand(g_graph *g, const char *name, int x, int shape)
{
    int in[2] = {x, shape};
    return node(g, G_EXPAND, name, 2, in, NULL);
}

int g_scatter_elements(g_graph *g, const char *name, int data, int indices, int updates, int axis)
{
    int in[3] = {data, indices, updates};
    g_attrs at = {.axis = axis};
    return node(g, G_SCATTER_ELEMENTS, name, 3, in, &at);
}

int g_scatter_add(g_graph *g, const char *name, int data, int indices, int updates, int axis)
{
    int in[3] = {data, indices, updates};
    g_attrs at = {.axis = axis};
    return node(g, G_SCATTER_ADD, name, 3, in, &at);
}

int g_topk(g_graph *g, const char *name, int x, int64_t k, int axis, int *indices)
{
    g_attrs at = {.axis = axis, .n_ints = 1, .ints = {k}};
    int id = g_add_node(g, G_TOPK, name, 1, &x, &at);
    *indices = id == G_NONE ? G_NONE : g->nodes[id].out[1];
    return id == G_NONE ? G_NONE : g->nodes[id].out[0];
}

int g_gather_elements(g_graph *g, const char *name, int data, int indices, int axis)
{
    int in[2] = {data, indices};
    g_attrs at = {.axis = axis};
    return node(g, G_GATHER_ELEMENTS, name, 2, in, &at);
}

int g_clip(g_graph *g, const char *name, int x, double lo, double hi)
{
    g_attrs at = {.lo = lo, .hi = hi};
    return node(g, G_CLIP, name, 1, &x, &at);
}

int g_pad(g_graph *g, const char *name, int x, int n, const int64_t *begin, const int64_t *end,
          double value)
{
    if (x == G_NONE || !g_ok(g))
        return G_NONE;
    if (n != g->values[x].shape.rank)
        return g_fail(g, FERRY_ERR_INTERNAL, "pad '%s/%s': %d pairs of pads for x of rank %d",
                      g->scope, name, n, g->values[x].shape.rank);
    g_attrs at = {.pad_value = value};
    if (n > 0) {
        memcpy(at.pad_begin, begin, (size_t)n * sizeof *begin);
        memcpy(at.pad_end, end, (size_t)n * sizeof *end);
    }
    return node(g, G_PAD, name, 1, &x, &at);
}

int g_conv(g_graph *g, const char *name, int x, int weight, int bias, const g_conv_opts *opts)
{
    int in[3] = {x, weight, bias};
    g_attrs at = {.conv = (g_conv_opts *)opts};
    return node(g, G_CONV, name, bias == G_NONE ? 2 : 3, in, &at);
}

int g_rms_norm(g_graph *g, const char *name, int x, int weight, double eps, double offset,
               bool f32_weight)
{
    int in[2] = {x, weight};
    g_attrs at = {.eps = eps, .offset = offset, .f32_weight = f32_weight};
    return node(g, G_RMS_NORM, name, 2, in, &at);
}

int g_skip_rms_norm(g_graph *g, const char *name, int x, int skip, int weight, double eps,
                    double offset, bool f32_weight, int *sum)
{
    int in[3] = {x, skip, weight};
    g_attrs at = {.eps = eps, .offset = offset, .f32_weight = f32_weight};
    int id = g_add_node(g, G_SKIP_RMS_NORM, name, 3, in, &at);
    *sum = id == G_NONE ? G_NONE : g->nodes[id].out[1];
    return id == G_NONE ? G_NONE : g->nodes[id].out[0];
}

int g_skip_layer_norm(g_graph *g, const char *name, int x, int skip, int weight, int bias,
                      double eps, int *sum)
{
    int in[4] = {x, skip, weight, bias};
    g_attrs at = {.eps = eps};
    int id = g_add_node(g, G_SKIP_LAYER_NORM, name, bias == G_NONE ? 3 : 4, in, &at);
    if (sum)
        *sum = id == G_NONE ? G_NONE : g->nodes[id].out[1];
    return id == G_NONE ? G_NONE : g->nodes[id].out[0];
}

int g_layer_norm(g_graph *g, const char *name, int x, int weight, int bias, double eps)
{
    int in[3] = {x, weight, bias};
    g_attrs at = {.eps = eps};
    return node(g, G_LAYER_NORM, name, bias == G_NONE ? 2 : 3, in, &at);
}

int g_linear(g_graph *g, const char *name, int x, int weight, int bias)
{
    int in[3] = {x, weight, bias};
    return node(g, G_LINEAR, name, bias == G_NONE ? 2 : 3, in, NULL);
}

int g_embedding(g_graph *g, const char *name, int table, int ids)
{
    int in[2] = {table, ids};
    return node(g, G_EMBEDDING, name, 2, in, NULL);
}

int g_softcap(g_graph *g, const char *name, int x, double cap)
{
    g_attrs at = {.cap = cap};
    return node(g, G_SOFTCAP, name, 1, &x, &at);
}

int g_rope(g_graph *g, const char *name, int x, int position_ids, const g_rope_opts *opts)
{
    int in[2] = {x, position_ids};
    g_attrs at = {.rope = (g_rope_opts *)opts};
    return node(g, G_ROPE, name, 2, in, &at);
}

int g_attention(g_graph *g, const char *name, int q, int k, int v, int mask, int past_k,
                int past_v, int cache_position, const g_attn_opts *opts, int *present_k,
                int *present_v)
{
    return g_attention_biased(g, name, q, k, v, mask, past_k, past_v, cache_position, G_NONE,
                              opts, present_k, present_v);
}

int g_attention_biased(g_graph *g, const char *name, int q, int k, int v, int mask, int past_k,
                       int past_v, int cache_position, int bias, const g_attn_opts *opts,
                       int *present_k, int *present_v)
{
    int in[8] = {q, k, v, mask, past_k, past_v, cache_position, bias};
    int n_in = bias != G_NONE ? 8 : cache_position != G_NONE ? 7 : past_k != G_NONE ? 6 : 4;
    g_attrs at = {.attn = (g_attn_opts *)opts};
    int id = g_add_node(g, G_ATTENTION, name, n_in, in, &at);
    bool cached = id != G_NONE && g->nodes[id].n_out == 3;
    if (present_k)
        *present_k = cached ? g->nodes[id].out[1] : G_NONE;
    if (present_v)
        *present_v = cached ? g->nodes[id].out[2] : G_NONE;
    return id == G_NONE ? G_NONE : g->nodes[id].out[0];
}

int g_moe(g_graph *g, const char *name, int x, int router_logits, int gate_up, int down, int up,
          const g_moe_opts *opts)
{
    int in[5] = {x, router_logits, gate_up, down, up};
    g_attrs at = {.moe = (g_moe_opts *)opts};
    return node(g, G_MOE, name, up == G_NONE ? 4 : 5, in, &at);
}

int g_dequantize(g_graph *g, const char *name, int weight)
{
    return node(g, G_DEQUANTIZE, name, 1, &weight, NULL);
}

g_extern g_extern_init(const char *domain, const char *op_type)
{
    g_extern e;
    memset(&e, 0, sizeof e);
    snprintf(e.domain, sizeof e.domain, "%s", domain);
    snprintf(e.op_type, sizeof e.op_type, "%s", op_type);
    memset(e.part, -1, sizeof e.part);
    return e;
}

static g_ext_attr *ext_attr(g_extern *e, const char *name, char kind)
{
    if (e->n_attr >= G_EXT_MAX_ATTRS) {
        e->n_attr = G_EXT_MAX_ATTRS + 1; /* the node then fails inference */
        return NULL;
    }
    g_ext_attr *a = &e->attr[e->n_attr++];
    snprintf(a->name, sizeof a->name, "%s", name);
    a->kind = kind;
    return a;
}

void g_extern_int(g_extern *e, const char *name, int64_t v)
{
    g_ext_attr *a = ext_attr(e, name, 'i');
    if (a)
        a->i = v;
}

void g_extern_bool(g_extern *e, const char *name, bool v)
{
    g_ext_attr *a = ext_attr(e, name, 'b');
    if (a)
        a->i = v;
}

void g_extern_str(g_extern *e, const char *name, const char *v)
{
    g_ext_attr *a = ext_attr(e, name, 's');
    if (a)
        snprintf(a->s, sizeof a->s, "%s", v);
}

void g_extern_float(g_extern *e, const char *name, double v)
{
    g_ext_attr *a = ext_attr(e, name, 'f');
    if (a)
        a->f = v;
}

void g_extern_out(g_extern *e, int k, int slot, ferry_dtype dtype, const g_shape *shape)
{
    if (k < 0 || k >= G_MAX_OUT)
        return;
    e->out_slot[k] = slot;
    e->out_dtype[k] = dtype;
    e->out_shape[k] = *shape;
    if (e->n_out < k + 1)
        e->n_out = k + 1;
}

int g_extern_node(g_graph *g, const char *name, const g_extern *e, int n_in, const int *in)
{
    g_attrs at = {.ext = (g_extern *)e};
    return node(g, G_EXTERN, name, n_in, in, &at);
}
