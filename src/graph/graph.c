/* graph.c — building the IR: values, nodes, constants, lazy weights, and the dtype/shape
 * inference every node goes through when it is added (and again in g_check). */
#include "graph/graph.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/dtype.h"

typedef struct op_info {
    const char *name;        /* the ONNX op type for primitives */
    bool semantic;
} op_info;

static const op_info ops[] = {
    {"Add", false}, {"Sub", false}, {"Mul", false}, {"Div", false}, {"Pow", false},
    {"Sqrt", false}, {"Reciprocal", false}, {"Neg", false}, {"Exp", false}, {"Cos", false},
    {"Sin", false}, {"Sigmoid", false}, {"Tanh", false}, {"Erf", false},
    {"And", false}, {"Or", false}, {"Not", false}, {"Equal", false}, {"Less", false},
    {"LessOrEqual", false}, {"Greater", false}, {"GreaterOrEqual", false},
    {"Where", false}, {"MatMul", false}, {"Gemm", false}, {"Gather", false},
    {"Reshape", false}, {"Transpose", false}, {"Concat", false}, {"Slice", false},
    {"Unsqueeze", false}, {"Cast", false}, {"Softmax", false}, {"ReduceMean", false},
    {"ReduceMax", false}, {"Shape", false}, {"Range", false}, {"Expand", false},
    {"CumSum", false}, {"Max", false}, {"Min", false},
    {"RMSNorm", true}, {"Linear", true}, {"RoPE", true}, {"Attention", true}, {"SiLU", true},
    {"ScatterElements", false}, {"KVWrite", true},
};
_Static_assert(sizeof ops / sizeof ops[0] == G_OP_COUNT, "op table out of date");

const char *g_op_name(g_op op)
{
    return (op >= 0 && op < G_OP_COUNT) ? ops[op].name : "?";
}

bool g_op_is_semantic(g_op op)
{
    return op >= 0 && op < G_OP_COUNT && ops[op].semantic;
}

g_graph *g_new(void)
{
    return calloc(1, sizeof(g_graph));
}

void g_free(g_graph *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->n_values; i++) {
        free(g->values[i].name);
        free(g->values[i].data);
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        free(g->nodes[i].name);
        free(g->nodes[i].rope);
        free(g->nodes[i].attn);
    }
    free(g->values);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    free(g);
}

bool g_ok(const g_graph *g)
{
    return g && g->err.status == FERRY_OK;
}

void g_scope(g_graph *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->scope, sizeof g->scope, fmt, ap);
    va_end(ap);
}

static int oom(g_graph *g)
{
    fy_fail(&g->err, FERRY_ERR_NOMEM, "out of memory while building the graph");
    return G_NONE;
}

static bool valid(const g_graph *g, int v)
{
    return v >= 0 && (size_t)v < g->n_values;
}

int g_add_value(g_graph *g, const char *name, ferry_dtype dtype, const g_shape *shape,
                     g_value_kind kind)
{
    if (g->n_values == g->cap_values) {
        size_t cap = g->cap_values ? g->cap_values * 2 : 256;
        g_value *nv = realloc(g->values, cap * sizeof *nv);
        if (!nv)
            return oom(g);
        g->values = nv;
        g->cap_values = cap;
    }
    g_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->name = strdup(name);
    if (!v->name)
        return oom(g);
    v->dtype = dtype;
    if (shape)
        v->shape = *shape;
    v->kind = kind;
    v->producer = -1;
    return (int)g->n_values++;
}

int g_input(g_graph *g, const char *name, ferry_dtype dtype, int rank, const g_dim *dims)
{
    if (!g_ok(g))
        return G_NONE;
    g_shape s = {.rank = rank};
    for (int i = 0; i < rank; i++)
        s.d[i] = dims[i];
    int v = g_add_value(g, name, dtype, &s, GV_INPUT);
    if (v == G_NONE)
        return v;
    int *ni = realloc(g->inputs, (g->n_inputs + 1) * sizeof *ni);
    if (!ni)
        return oom(g);
    g->inputs = ni;
    g->inputs[g->n_inputs++] = v;
    return v;
}

void g_output(g_graph *g, int v, const char *name)
{
    if (!g_ok(g) || !valid(g, v))
        return;
    char *n = strdup(name);
    int *no = realloc(g->outputs, (g->n_outputs + 1) * sizeof *no);
    if (!n || !no) {
        free(n);
        if (no)
            g->outputs = no;
        oom(g);
        return;
    }
    g->outputs = no;
    free(g->values[v].name);
    g->values[v].name = n;
    g->outputs[g->n_outputs++] = v;
}

int g_weight_value(g_graph *g, const st_tensor *t, ferry_dtype dtype, bool transpose)
{
    if (!g_ok(g))
        return G_NONE;
    for (size_t i = 0; i < g->n_values; i++) {
        const g_value *v = &g->values[i];
        if (v->kind == GV_WEIGHT && v->weight.src == t && v->weight.dtype == dtype &&
            v->weight.transpose == transpose)
            return (int)i;
    }
    if (transpose && t->ndim != 2) {
        fy_fail(&g->err, FERRY_ERR_INTERNAL, "tensor '%s': transpose needs 2 dims", t->name);
        return G_NONE;
    }
    g_shape s = {.rank = t->ndim};
    for (int i = 0; i < t->ndim; i++)
        s.d[i] = g_dim_const(t->shape[transpose ? t->ndim - 1 - i : i]);
    char name[512];
    snprintf(name, sizeof name, "%s%s", t->name, transpose ? ".T" : "");
    int v = g_add_value(g, name, dtype, &s, GV_WEIGHT);
    if (v == G_NONE)
        return v;
    g->values[v].weight.src = t;
    g->values[v].weight.dtype = dtype;
    g->values[v].weight.transpose = transpose;
    return v;
}

int g_const(g_graph *g, ferry_dtype dtype, int rank, const int64_t *dims, const void *data)
{
    if (!g_ok(g))
        return G_NONE;
    size_t n = 1;
    g_shape s = {.rank = rank};
    for (int i = 0; i < rank; i++) {
        s.d[i] = g_dim_const(dims[i]);
        n *= (size_t)dims[i];
    }
    size_t nbytes = n * dt_size(dtype);
    for (size_t i = 0; i < g->n_values; i++) {
        const g_value *v = &g->values[i];
        if (v->kind == GV_CONST && v->dtype == dtype && v->nbytes == nbytes &&
            g_shape_eq(&v->shape, &s) && memcmp(v->data, data, nbytes) == 0)
            return (int)i;
    }
    char name[64];
    snprintf(name, sizeof name, "/const/%zu", g->n_values);
    int v = g_add_value(g, name, dtype, &s, GV_CONST);
    if (v == G_NONE)
        return v;
    g->values[v].data = malloc(nbytes ? nbytes : 1);
    if (!g->values[v].data)
        return oom(g);
    memcpy(g->values[v].data, data, nbytes);
    g->values[v].nbytes = nbytes;
    return v;
}

int g_const_i64(g_graph *g, int n, const int64_t *vals)
{
    int64_t dims[1] = {n};
    return g_const(g, FERRY_I64, 1, dims, vals);
}

int g_scalar_i64(g_graph *g, int64_t v)
{
    return g_const(g, FERRY_I64, 0, NULL, &v);
}

int g_scalar_f(g_graph *g, ferry_dtype dtype, double v)
{
    unsigned char buf[8];
    float f = (float)v;
    uint16_t h;
    switch (dtype) {
    case FERRY_F32: memcpy(buf, &f, 4); break;
    case FERRY_F64: memcpy(buf, &v, 8); break;
    case FERRY_F16: h = dt_f32_to_f16(f); memcpy(buf, &h, 2); break;
    case FERRY_BF16: h = dt_f32_to_bf16(f); memcpy(buf, &h, 2); break;
    default:
        fy_fail(&g->err, FERRY_ERR_INTERNAL, "scalar constant of non-float dtype");
        return G_NONE;
    }
    return g_const(g, dtype, 0, NULL, buf);
}

/* ------------------------------------------------------------------------------------------
 * Inference: what dtype and shape a node's output has, given its inputs. */

static const g_value *in_val(const g_graph *g, const g_node *n, int i)
{
    return (i < n->n_in && n->in[i] != G_NONE) ? &g->values[n->in[i]] : NULL;
}

/* Reads a constant i64 vector input; false if the input is not a constant. */
static bool const_ints(const g_graph *g, const g_node *n, int i, int64_t *vals, int *count, int max)
{
    const g_value *v = in_val(g, n, i);
    if (!v || v->kind != GV_CONST || v->dtype != FERRY_I64 || v->shape.rank > 1)
        return false;
    int c = (int)(v->nbytes / 8);
    if (c > max)
        return false;
    memcpy(vals, v->data, (size_t)c * 8);
    *count = c;
    return true;
}

static int norm_axis(int64_t axis, int rank)
{
    return (int)(axis < 0 ? axis + rank : axis);
}

static ferry_status bad(fy_err *err, const g_node *n, const char *why)
{
    return fy_fail(err, FERRY_ERR_INTERNAL, "graph node '%s' (%s): %s", n->name, g_op_name(n->op),
                   why);
}

static ferry_status infer_reshape(const g_graph *g, const g_node *n, g_shape *out, fy_err *err)
{
    const g_value *x = in_val(g, n, 0);
    int64_t spec[G_MAX_RANK];
    int r;
    if (!const_ints(g, n, 1, spec, &r, G_MAX_RANK)) {
        const g_value *s = in_val(g, n, 1);
        int64_t len;
        if (!s || s->shape.rank != 1 || !g_dim_is_const(s->shape.d[0], &len) || len > G_MAX_RANK)
            return bad(err, n, "shape input must be a 1-D tensor of known length");
        out->rank = (int)len;
        for (int i = 0; i < out->rank; i++)
            out->d[i] = g_dim_unknown();
        return FERRY_OK;
    }
    out->rank = r;
    /* Cancel dims the output copies or repeats from the input; what is left of the input must
     * be one symbolic dim times constants for the inferred (-1) dim to stay symbolic. */
    int64_t in_const = 1, out_const = 1;
    g_dim in_syms[G_MAX_RANK];
    int n_in_syms = 0, infer_at = -1, out_syms = 0;
    bool unknown = false;
    bool overflow = false;
    for (int i = 0; i < x->shape.rank; i++) {
        int64_t c;
        if (g_dim_is_const(x->shape.d[i], &c))
            overflow |= __builtin_mul_overflow(in_const, c, &in_const);
        else
            in_syms[n_in_syms++] = x->shape.d[i];
    }
    for (int i = 0; i < r; i++) {
        g_dim d;
        if (spec[i] == -1) {
            if (infer_at >= 0)
                return bad(err, n, "more than one -1 in reshape");
            infer_at = i;
            continue;
        }
        if (spec[i] == 0) {
            if (i >= x->shape.rank)
                return bad(err, n, "reshape copies a dim the input lacks");
            d = x->shape.d[i];
        } else if (spec[i] > 0) {
            d = g_dim_const(spec[i]);
        } else {
            return bad(err, n, "negative reshape dim");
        }
        out->d[i] = d;
        int64_t c;
        if (g_dim_is_const(d, &c)) {
            overflow |= __builtin_mul_overflow(out_const, c, &out_const);
            continue;
        }
        int k;
        for (k = 0; k < n_in_syms; k++)
            if (g_dim_eq(in_syms[k], d))
                break;
        if (k < n_in_syms)
            in_syms[k] = in_syms[--n_in_syms];
        else
            out_syms++, unknown = true;
    }
    if (overflow)
        return bad(err, n, "element count overflows 64 bits");
    if (infer_at >= 0) {
        if (unknown || n_in_syms > 1 || out_const == 0 || in_const % out_const != 0)
            out->d[infer_at] = g_dim_unknown();
        else if (n_in_syms == 1)
            out->d[infer_at] = g_dim_scale(in_syms[0], in_const / out_const);
        else
            out->d[infer_at] = g_dim_const(in_const / out_const);
    } else if (n_in_syms == 0 && out_syms == 0 && in_const != out_const) {
        return bad(err, n, "reshape changes the number of elements");
    }
    return FERRY_OK;
}

static ferry_status infer_slice(const g_graph *g, const g_node *n, g_shape *out, fy_err *err)
{
    const g_value *x = in_val(g, n, 0);
    int64_t st[G_MAX_RANK], en[G_MAX_RANK], ax[G_MAX_RANK];
    int ns, ne, na;
    *out = x->shape;
    if (!const_ints(g, n, 1, st, &ns, G_MAX_RANK) || !const_ints(g, n, 2, en, &ne, G_MAX_RANK) ||
        !const_ints(g, n, 3, ax, &na, G_MAX_RANK)) {
        int64_t nax;
        const g_value *a = in_val(g, n, 3);
        if (a && a->kind == GV_CONST && a->shape.rank == 1 && g_dim_is_const(a->shape.d[0], &nax) &&
            nax <= G_MAX_RANK) {
            memcpy(ax, a->data, (size_t)nax * 8);
            for (int i = 0; i < nax; i++) {
                int k = norm_axis(ax[i], x->shape.rank);
                if (k < 0 || k >= x->shape.rank)
                    return bad(err, n, "slice axis out of range");
                out->d[k] = g_dim_unknown();
            }
            return FERRY_OK;
        }
        for (int i = 0; i < out->rank; i++)
            out->d[i] = g_dim_unknown();
        return FERRY_OK;
    }
    if (ns != ne || ns != na)
        return bad(err, n, "slice starts/ends/axes lengths differ");
    for (int i = 0; i < na; i++) {
        int k = norm_axis(ax[i], x->shape.rank);
        if (k < 0 || k >= x->shape.rank)
            return bad(err, n, "slice axis out of range");
        int64_t dim;
        if (g_dim_is_const(x->shape.d[k], &dim)) {
            int64_t s = st[i] < 0 ? st[i] + dim : st[i];
            int64_t e = en[i] < 0 ? en[i] + dim : en[i];
            s = s < 0 ? 0 : (s > dim ? dim : s);
            e = e < 0 ? 0 : (e > dim ? dim : e);
            out->d[k] = g_dim_const(e > s ? e - s : 0);
        } else if (st[i] == 0 && en[i] >= INT64_MAX / 2) {
            /* whole axis */
        } else if (st[i] >= 0 && en[i] >= INT64_MAX / 2) {
            out->d[k] = g_dim_sub(x->shape.d[k], g_dim_const(st[i])); /* assumes dim >= start */
        } else if (st[i] < 0 && en[i] >= INT64_MAX / 2) {
            out->d[k] = g_dim_const(-st[i]); /* assumes dim >= -start */
        } else {
            out->d[k] = g_dim_unknown();
        }
    }
    return FERRY_OK;
}

static ferry_status infer(const g_graph *g, const g_node *n, ferry_dtype *dt, g_shape *out,
                          fy_err *err)
{
    const g_value *a = in_val(g, n, 0), *b = in_val(g, n, 1), *c = in_val(g, n, 2);
    if (!a && n->op != G_RANGE)
        return bad(err, n, "missing input");
    memset(out, 0, sizeof *out);
    switch (n->op) {
    case G_SQRT: case G_RECIPROCAL: case G_NEG: case G_EXP: case G_COS: case G_SIN:
    case G_SIGMOID: case G_TANH: case G_ERF: case G_SILU: case G_SOFTMAX: case G_CUMSUM:
        if (n->op != G_NEG && n->op != G_CUMSUM && !dt_is_float(a->dtype))
            return bad(err, n, "needs a float input");
        *dt = a->dtype;
        *out = a->shape;
        return FERRY_OK;
    case G_NOT:
        if (a->dtype != FERRY_BOOL)
            return bad(err, n, "needs a bool input");
        *dt = FERRY_BOOL;
        *out = a->shape;
        return FERRY_OK;
    case G_ADD: case G_SUB: case G_MUL: case G_DIV: case G_POW: case G_MAX: case G_MIN:
    case G_AND: case G_OR: case G_EQUAL: case G_LESS: case G_LESS_OR_EQUAL: case G_GREATER:
    case G_GREATER_OR_EQUAL:
        if (!b)
            return bad(err, n, "missing second input");
        if (a->dtype != b->dtype)
            return bad(err, n, "operand dtypes differ");
        if ((n->op == G_AND || n->op == G_OR) && a->dtype != FERRY_BOOL)
            return bad(err, n, "needs bool inputs");
        if (!g_shape_broadcast(&a->shape, &b->shape, out))
            return bad(err, n, "shapes do not broadcast");
        *dt = (n->op >= G_AND && n->op <= G_GREATER_OR_EQUAL) ? FERRY_BOOL : a->dtype;
        return FERRY_OK;
    case G_WHERE: {
        g_shape t;
        if (!b || !c || a->dtype != FERRY_BOOL || b->dtype != c->dtype)
            return bad(err, n, "needs a bool condition and two values of one dtype");
        if (!g_shape_broadcast(&a->shape, &b->shape, &t) || !g_shape_broadcast(&t, &c->shape, out))
            return bad(err, n, "shapes do not broadcast");
        *dt = b->dtype;
        return FERRY_OK;
    }
    case G_MATMUL: {
        if (!b || a->dtype != b->dtype || !dt_is_float(a->dtype))
            return bad(err, n, "needs two float inputs of one dtype");
        if (a->shape.rank < 2 || b->shape.rank < 2)
            return bad(err, n, "needs inputs of rank >= 2");
        g_shape ba = a->shape, bb = b->shape;
        ba.rank -= 2;
        bb.rank -= 2;
        if (!g_shape_broadcast(&ba, &bb, out))
            return bad(err, n, "batch dims do not broadcast");
        if (!g_dim_compatible(a->shape.d[a->shape.rank - 1], b->shape.d[b->shape.rank - 2]))
            return bad(err, n, "inner dims differ");
        out->d[out->rank++] = a->shape.d[a->shape.rank - 2];
        out->d[out->rank++] = b->shape.d[b->shape.rank - 1];
        *dt = a->dtype;
        return FERRY_OK;
    }
    case G_GEMM:
        if (!b || a->dtype != b->dtype || a->shape.rank != 2 || b->shape.rank != 2 ||
            !g_dim_compatible(a->shape.d[1], b->shape.d[1]))
            return bad(err, n, "needs a [M,K] and a [N,K] of one dtype");
        out->rank = 2;
        out->d[0] = a->shape.d[0];
        out->d[1] = b->shape.d[0];
        *dt = a->dtype;
        return FERRY_OK;
    case G_GATHER: {
        int axis = norm_axis(n->ints[0], a->shape.rank);
        if (!b || (b->dtype != FERRY_I64 && b->dtype != FERRY_I32) || axis < 0 ||
            axis >= a->shape.rank || a->shape.rank - 1 + b->shape.rank > G_MAX_RANK)
            return bad(err, n, "needs integer indices and a valid axis");
        for (int i = 0; i < axis; i++)
            out->d[out->rank++] = a->shape.d[i];
        for (int i = 0; i < b->shape.rank; i++)
            out->d[out->rank++] = b->shape.d[i];
        for (int i = axis + 1; i < a->shape.rank; i++)
            out->d[out->rank++] = a->shape.d[i];
        *dt = a->dtype;
        return FERRY_OK;
    }
    case G_RESHAPE:
        if (!b || b->dtype != FERRY_I64)
            return bad(err, n, "needs an int64 shape");
        *dt = a->dtype;
        return infer_reshape(g, n, out, err);
    case G_TRANSPOSE:
        if (n->n_ints != a->shape.rank)
            return bad(err, n, "perm length differs from rank");
        out->rank = a->shape.rank;
        for (int i = 0; i < out->rank; i++) {
            if (n->ints[i] < 0 || n->ints[i] >= out->rank)
                return bad(err, n, "perm out of range");
            out->d[i] = a->shape.d[n->ints[i]];
        }
        *dt = a->dtype;
        return FERRY_OK;
    case G_CONCAT: {
        int axis = norm_axis(n->ints[0], a->shape.rank);
        if (axis < 0 || axis >= a->shape.rank)
            return bad(err, n, "axis out of range");
        *out = a->shape;
        for (int i = 1; i < n->n_in; i++) {
            const g_value *x = in_val(g, n, i);
            if (!x || x->dtype != a->dtype || x->shape.rank != a->shape.rank)
                return bad(err, n, "inputs differ in dtype or rank");
            for (int k = 0; k < out->rank; k++)
                if (k != axis && !g_dim_compatible(out->d[k], x->shape.d[k]))
                    return bad(err, n, "inputs differ off the concat axis");
            out->d[axis] = g_dim_add(out->d[axis], x->shape.d[axis]);
        }
        *dt = a->dtype;
        return FERRY_OK;
    }
    case G_SLICE:
        *dt = a->dtype;
        return infer_slice(g, n, out, err);
    case G_UNSQUEEZE: {
        int64_t axes[G_MAX_RANK];
        int na;
        if (!const_ints(g, n, 1, axes, &na, G_MAX_RANK) || a->shape.rank + na > G_MAX_RANK)
            return bad(err, n, "axes must be a small constant");
        out->rank = a->shape.rank + na;
        bool is_new[G_MAX_RANK] = {false};
        for (int i = 0; i < na; i++) {
            int k = norm_axis(axes[i], out->rank);
            if (k < 0 || k >= out->rank || is_new[k])
                return bad(err, n, "axis out of range or repeated");
            is_new[k] = true;
        }
        for (int i = 0, j = 0; i < out->rank; i++)
            out->d[i] = is_new[i] ? g_dim_const(1) : a->shape.d[j++];
        *dt = a->dtype;
        return FERRY_OK;
    }
    case G_CAST:
        *dt = n->to;
        *out = a->shape;
        return FERRY_OK;
    case G_REDUCE_MEAN: case G_REDUCE_MAX: {
        int64_t axes[G_MAX_RANK];
        int na;
        if (!const_ints(g, n, 1, axes, &na, G_MAX_RANK))
            return bad(err, n, "axes must be a small constant");
        bool red[G_MAX_RANK] = {false};
        for (int i = 0; i < na; i++) {
            int k = norm_axis(axes[i], a->shape.rank);
            if (k < 0 || k >= a->shape.rank)
                return bad(err, n, "axis out of range");
            red[k] = true;
        }
        for (int i = 0; i < a->shape.rank; i++) {
            if (!red[i])
                out->d[out->rank++] = a->shape.d[i];
            else if (n->ints[0])
                out->d[out->rank++] = g_dim_const(1);
        }
        *dt = a->dtype;
        return FERRY_OK;
    }
    case G_SHAPE: {
        int64_t s = n->ints[0], e = n->ints[1], r = a->shape.rank;
        s = s < 0 ? s + r : s;
        e = e > r ? r : (e < 0 ? e + r : e);
        if (s < 0 || e < s)
            return bad(err, n, "bad start/end");
        out->rank = 1;
        out->d[0] = g_dim_const(e - s);
        *dt = FERRY_I64;
        return FERRY_OK;
    }
    case G_RANGE:
        if (!a || !b || !c || a->dtype != b->dtype || b->dtype != c->dtype || a->shape.rank != 0 ||
            b->shape.rank != 0 || c->shape.rank != 0)
            return bad(err, n, "needs three scalars of one dtype");
        out->rank = 1;
        out->d[0] = g_dim_unknown();
        *dt = a->dtype;
        return FERRY_OK;
    case G_EXPAND: {
        int64_t len;
        if (!b || b->shape.rank != 1 || !g_dim_is_const(b->shape.d[0], &len) || len > G_MAX_RANK)
            return bad(err, n, "needs a 1-D shape of known length");
        g_shape t = {.rank = (int)len};
        for (int i = 0; i < t.rank; i++)
            t.d[i] = g_dim_unknown();
        if (!g_shape_broadcast(&a->shape, &t, out))
            return bad(err, n, "shapes do not broadcast");
        *dt = a->dtype;
        return FERRY_OK;
    }
    case G_RMS_NORM:
        if (!b || !dt_is_float(a->dtype) || b->shape.rank != 1 || a->shape.rank < 1 ||
            !g_dim_compatible(b->shape.d[0], a->shape.d[a->shape.rank - 1]))
            return bad(err, n, "weight must be 1-D and match the last dim");
        *dt = a->dtype;
        *out = a->shape;
        return FERRY_OK;
    case G_LINEAR:
        if (!b || b->dtype != a->dtype || b->shape.rank != 2 || a->shape.rank < 1 ||
            !g_dim_compatible(b->shape.d[1], a->shape.d[a->shape.rank - 1]))
            return bad(err, n, "weight must be [out, in] with in = the last dim of x");
        if (c && (c->dtype != a->dtype || c->shape.rank != 1 ||
                  !g_dim_compatible(c->shape.d[0], b->shape.d[0])))
            return bad(err, n, "bias must be [out]");
        *out = a->shape;
        out->d[out->rank - 1] = b->shape.d[0];
        *dt = a->dtype;
        return FERRY_OK;
    case G_ROPE:
        if (!b || a->shape.rank != 4 || b->shape.rank != 2 || b->dtype != FERRY_I64 || !n->rope)
            return bad(err, n, "needs x [b,s,h,d] and int64 position_ids [b,s]");
        *dt = a->dtype;
        *out = a->shape;
        return FERRY_OK;
    case G_ATTENTION: {
        const g_value *m = in_val(g, n, 3), *off = in_val(g, n, 4);
        if (!b || !c || !m || !n->attn || a->shape.rank != 4 || b->shape.rank != 4 ||
            c->shape.rank != 4 || a->dtype != b->dtype || b->dtype != c->dtype ||
            !((m->shape.rank == 2 && m->dtype == FERRY_I64) ||
              (m->shape.rank == 4 && m->dtype == FERRY_BOOL)) ||
            (off && off->dtype != FERRY_I64))
            return bad(err, n, "needs q [b,s,h,d], k and v [b,kvh,t,d], an int64 [b,t] or bool "
                       "[b,1,s,t] mask");
        *out = a->shape;
        out->rank = 3;
        out->d[2] = g_dim_const(n->attn->num_heads * n->attn->head_dim);
        *dt = a->dtype;
        return FERRY_OK;
    }
    case G_SCATTER_ELEMENTS:
        if (!b || !c || b->dtype != FERRY_I64 || c->dtype != a->dtype ||
            b->shape.rank != a->shape.rank || c->shape.rank != a->shape.rank)
            return bad(err, n, "needs data, int64 indices and updates of one rank");
        *dt = a->dtype;
        *out = a->shape;
        return FERRY_OK;
    case G_KV_WRITE:
        if (!b || !c || a->shape.rank != 4 || b->shape.rank != 4 || a->dtype != b->dtype ||
            c->dtype != FERRY_I64 || !g_dim_compatible(a->shape.d[3], b->shape.d[3]))
            return bad(err, n, "needs cache [b,kvh,m,d], update [b,kvh,s,d], int64 position");
        *dt = a->dtype;
        *out = a->shape;
        return FERRY_OK;
    case G_OP_COUNT:
        break;
    }
    return bad(err, n, "unknown op");
}

int g_add_node(g_graph *g, g_op op, const char *name, int n_in, const int *in,
               const int64_t *ints, int n_ints)
{
    if (!g_ok(g))
        return G_NONE;
    for (int i = 0; i < n_in; i++)
        if (in[i] != G_NONE && !valid(g, in[i]))
            return G_NONE;
    if (g->n_nodes == g->cap_nodes) {
        size_t cap = g->cap_nodes ? g->cap_nodes * 2 : 256;
        g_node *nn = realloc(g->nodes, cap * sizeof *nn);
        if (!nn)
            return oom(g);
        g->nodes = nn;
        g->cap_nodes = cap;
    }
    g_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    char full[512];
    snprintf(full, sizeof full, "%s/%s", g->scope, name);
    n->name = strdup(full);
    if (!n->name)
        return oom(g);
    n->op = op;
    n->n_in = n_in;
    memcpy(n->in, in, (size_t)n_in * sizeof *in);
    n->n_ints = n_ints;
    if (n_ints)
        memcpy(n->ints, ints, (size_t)n_ints * sizeof *ints);
    n->n_out = 1;
    g->n_nodes++;
    return (int)g->n_nodes - 1;
}

/* Infers the node's output and creates its value; returns the value id. */
static int finish(g_graph *g, int node)
{
    if (node == G_NONE)
        return G_NONE;
    g_node *n = &g->nodes[node];
    ferry_dtype dt = FERRY_DTYPE_UNDEFINED;
    g_shape s;
    if (infer(g, n, &dt, &s, &g->err) != FERRY_OK)
        return G_NONE;
    char name[600];
    snprintf(name, sizeof name, "%s_output_0", n->name);
    int v = g_add_value(g, name, dt, &s, GV_NODE);
    if (v == G_NONE)
        return v;
    g->values[v].producer = node;
    g->nodes[node].out[0] = v;
    return v;
}

static int node1(g_graph *g, g_op op, const char *name, int n_in, const int *in,
                 const int64_t *ints, int n_ints)
{
    for (int i = 0; i < n_in; i++)
        if (in[i] == G_NONE && !(op == G_LINEAR && i == 2) && !(op == G_GEMM && i == 2))
            return G_NONE;
    return finish(g, g_add_node(g, op, name, n_in, in, ints, n_ints));
}

int g_unary(g_graph *g, g_op op, const char *name, int x)
{
    return node1(g, op, name, 1, &x, NULL, 0);
}

int g_binary(g_graph *g, g_op op, const char *name, int a, int b)
{
    int in[2] = {a, b};
    return node1(g, op, name, 2, in, NULL, 0);
}

int g_where(g_graph *g, const char *name, int cond, int x, int y)
{
    int in[3] = {cond, x, y};
    return node1(g, G_WHERE, name, 3, in, NULL, 0);
}

int g_matmul(g_graph *g, const char *name, int a, int b)
{
    return g_binary(g, G_MATMUL, name, a, b);
}

int g_gemm_tb(g_graph *g, const char *name, int a, int b, int c)
{
    int in[3] = {a, b, c};
    return node1(g, G_GEMM, name, c == G_NONE ? 2 : 3, in, NULL, 0);
}

int g_gather(g_graph *g, const char *name, int data, int indices, int axis)
{
    int in[2] = {data, indices};
    int64_t ax = axis;
    return node1(g, G_GATHER, name, 2, in, &ax, 1);
}

int g_reshape(g_graph *g, const char *name, int x, int n, const int64_t *spec)
{
    return g_reshape_dyn(g, name, x, g_const_i64(g, n, spec));
}

int g_reshape_dyn(g_graph *g, const char *name, int x, int shape)
{
    int in[2] = {x, shape};
    return node1(g, G_RESHAPE, name, 2, in, NULL, 0);
}

int g_transpose(g_graph *g, const char *name, int x, int n, const int64_t *perm)
{
    return node1(g, G_TRANSPOSE, name, 1, &x, perm, n);
}

int g_concat(g_graph *g, const char *name, int n, const int *xs, int axis)
{
    int64_t ax = axis;
    if (n > G_MAX_INPUTS)
        return fy_fail(&g->err, FERRY_ERR_INTERNAL, "concat of too many inputs"), G_NONE;
    return node1(g, G_CONCAT, name, n, xs, &ax, 1);
}

int g_slice(g_graph *g, const char *name, int x, int64_t axis, int64_t start, int64_t end)
{
    return g_slice_dyn(g, name, x, g_const_i64(g, 1, &start), g_const_i64(g, 1, &end),
                       g_const_i64(g, 1, &axis));
}

int g_slice_dyn(g_graph *g, const char *name, int x, int starts, int ends, int axes)
{
    int in[4] = {x, starts, ends, axes};
    return node1(g, G_SLICE, name, 4, in, NULL, 0);
}

int g_unsqueeze(g_graph *g, const char *name, int x, int n, const int64_t *axes)
{
    int in[2] = {x, g_const_i64(g, n, axes)};
    return node1(g, G_UNSQUEEZE, name, 2, in, NULL, 0);
}

int g_cast(g_graph *g, const char *name, int x, ferry_dtype to)
{
    if (x != G_NONE && g->values[x].dtype == to)
        return x;
    int node = G_NONE;
    if (x != G_NONE)
        node = g_add_node(g, G_CAST, name, 1, &x, NULL, 0);
    if (node != G_NONE)
        g->nodes[node].to = to;
    return finish(g, node);
}

int g_softmax(g_graph *g, const char *name, int x, int axis)
{
    int64_t ax = axis;
    return node1(g, G_SOFTMAX, name, 1, &x, &ax, 1);
}

int g_reduce(g_graph *g, g_op op, const char *name, int x, int n, const int64_t *axes, bool keepdims)
{
    int in[2] = {x, g_const_i64(g, n, axes)};
    int64_t kd = keepdims ? 1 : 0;
    return node1(g, op, name, 2, in, &kd, 1);
}

int g_shape_of(g_graph *g, const char *name, int x, int64_t start, int64_t end)
{
    int64_t se[2] = {start, end};
    return node1(g, G_SHAPE, name, 1, &x, se, 2);
}

int g_range(g_graph *g, const char *name, int start, int limit, int delta)
{
    int in[3] = {start, limit, delta};
    return node1(g, G_RANGE, name, 3, in, NULL, 0);
}

int g_expand(g_graph *g, const char *name, int x, int shape)
{
    int in[2] = {x, shape};
    return node1(g, G_EXPAND, name, 2, in, NULL, 0);
}

int g_cumsum(g_graph *g, const char *name, int x, int axis_value)
{
    int in[2] = {x, axis_value};
    return node1(g, G_CUMSUM, name, 2, in, NULL, 0);
}

int g_rms_norm(g_graph *g, const char *name, int x, int weight, double eps, double offset)
{
    int in[2] = {x, weight};
    int node = G_NONE;
    if (x != G_NONE && weight != G_NONE)
        node = g_add_node(g, G_RMS_NORM, name, 2, in, NULL, 0);
    if (node != G_NONE) {
        g->nodes[node].f[0] = eps;
        g->nodes[node].f[1] = offset;
    }
    return finish(g, node);
}

int g_linear(g_graph *g, const char *name, int x, int weight, int bias)
{
    int in[3] = {x, weight, bias};
    return node1(g, G_LINEAR, name, bias == G_NONE ? 2 : 3, in, NULL, 0);
}

int g_rope(g_graph *g, const char *name, int x, int position_ids, const g_rope_opts *opts)
{
    int in[2] = {x, position_ids};
    if (x == G_NONE || position_ids == G_NONE || !g_ok(g))
        return G_NONE;
    g_rope_opts *o = malloc(sizeof *o);
    if (!o)
        return oom(g);
    *o = *opts;
    int node = g_add_node(g, G_ROPE, name, 2, in, NULL, 0);
    if (node == G_NONE) {
        free(o);
        return G_NONE;
    }
    g->nodes[node].rope = o;
    return finish(g, node);
}

int g_attention(g_graph *g, const char *name, int q, int k, int v, int mask,
                const g_attn_opts *opts)
{
    return g_attention_at(g, name, q, k, v, mask, G_NONE, opts);
}

int g_attention_at(g_graph *g, const char *name, int q, int k, int v, int mask, int query_offset,
                   const g_attn_opts *opts)
{
    int in[5] = {q, k, v, mask, query_offset};
    if (q == G_NONE || k == G_NONE || v == G_NONE || mask == G_NONE || !g_ok(g))
        return G_NONE;
    g_attn_opts *o = malloc(sizeof *o);
    if (!o)
        return oom(g);
    *o = *opts;
    int node = g_add_node(g, G_ATTENTION, name, query_offset == G_NONE ? 4 : 5, in, NULL, 0);
    if (node == G_NONE) {
        free(o);
        return G_NONE;
    }
    g->nodes[node].attn = o;
    return finish(g, node);
}

int g_silu(g_graph *g, const char *name, int x)
{
    return g_unary(g, G_SILU, name, x);
}

int g_scatter_elements(g_graph *g, const char *name, int data, int indices, int updates, int axis)
{
    int in[3] = {data, indices, updates};
    int64_t ax = axis;
    return node1(g, G_SCATTER_ELEMENTS, name, 3, in, &ax, 1);
}

int g_kv_write(g_graph *g, const char *name, int cache, int update, int position)
{
    int in[3] = {cache, update, position};
    return node1(g, G_KV_WRITE, name, 3, in, NULL, 0);
}

/* ------------------------------------------------------------------------------------------
 * Passes */

void g_remove_dead(g_graph *g)
{
    bool *live = calloc(g->n_values ? g->n_values : 1, sizeof *live);
    if (!live) {
        oom(g);
        return;
    }
    for (size_t i = 0; i < g->n_outputs; i++)
        live[g->outputs[i]] = true;
    /* Nodes are in topological order (a node only reads earlier values), so one backward sweep
     * finds everything the outputs depend on. */
    for (size_t i = g->n_nodes; i-- > 0;) {
        g_node *n = &g->nodes[i];
        bool used = false;
        for (int k = 0; k < n->n_out; k++)
            used |= live[n->out[k]];
        n->dead = !used;
        if (used)
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k] != G_NONE)
                    live[n->in[k]] = true;
    }
    free(live);
    g_count_uses(g);
}

void g_count_uses(g_graph *g)
{
    for (size_t i = 0; i < g->n_values; i++)
        g->values[i].n_uses = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const g_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] != G_NONE)
                g->values[n->in[k]].n_uses++;
    }
    for (size_t i = 0; i < g->n_outputs; i++)
        g->values[g->outputs[i]].n_uses++;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Node names and value names must each be unique: printers use them as identifiers, and a
 * collision means two checkpoint pieces were mapped to one place. */
static ferry_status check_unique(g_graph *g, fy_err *err)
{
    size_t n = g->n_nodes > g->n_values ? g->n_nodes : g->n_values;
    const char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    ferry_status st = FERRY_OK;
    for (int pass = 0; pass < 2 && st == FERRY_OK; pass++) {
        size_t k = 0;
        if (pass == 0) {
            for (size_t i = 0; i < g->n_nodes; i++)
                if (!g->nodes[i].dead)
                    names[k++] = g->nodes[i].name;
        } else {
            for (size_t i = 0; i < g->n_values; i++)
                if (g->values[i].kind == GV_INPUT || g->values[i].n_uses > 0 ||
                    (g->values[i].kind == GV_NODE && !g->nodes[g->values[i].producer].dead))
                    names[k++] = g->values[i].name;
        }
        qsort(names, k, sizeof *names, cmp_str);
        for (size_t i = 1; i < k; i++)
            if (strcmp(names[i - 1], names[i]) == 0) {
                st = fy_fail(err, FERRY_ERR_INTERNAL, "graph: two %s are named '%s'",
                             pass == 0 ? "nodes" : "values", names[i]);
                break;
            }
    }
    free(names);
    return st;
}

ferry_status g_check(g_graph *g, fy_err *err)
{
    if (!g_ok(g))
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    for (size_t i = 0; i < g->n_nodes; i++) {
        const g_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            if (v == G_NONE)
                continue;
            if (!valid(g, v))
                return bad(err, n, "input refers to no value");
            const g_value *x = &g->values[v];
            if (x->kind == GV_NODE && (size_t)x->producer >= i)
                return bad(err, n, "input is produced later (graph not topologically ordered)");
        }
        ferry_dtype dt;
        g_shape s;
        if (infer(g, n, &dt, &s, err) != FERRY_OK)
            return err->status;
        const g_value *o = &g->values[n->out[0]];
        if (dt != o->dtype)
            return bad(err, n, "recorded output dtype disagrees with inference");
        if (s.rank != o->shape.rank)
            return bad(err, n, "recorded output rank disagrees with inference");
        for (int k = 0; k < s.rank; k++)
            if (!s.d[k].unknown && !g_dim_compatible(s.d[k], o->shape.d[k]))
                return bad(err, n, "recorded output shape disagrees with inference");
    }
    for (size_t i = 0; i < g->n_outputs; i++)
        if (!valid(g, g->outputs[i]))
            return fy_fail(err, FERRY_ERR_INTERNAL, "graph output %zu refers to no value", i);
    g_count_uses(g);
    return check_unique(g, err);
}
