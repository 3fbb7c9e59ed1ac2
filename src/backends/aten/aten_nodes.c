/* aten_nodes.c — each IR node as the aten calls torch.export records for it (argument names
 * and kinds from aten's schemas, native_functions.yaml), handed to a format's sink (aten.h):
 * elementwise ops over their .Tensor overloads (a scalar constant as a number where aten takes
 * one), shapes passed as SymInts, gathers as aten.index, the kept semantic ops as aten.linear,
 * aten.embedding, aten.silu, aten.gelu and aten.layer_norm, attention as
 * aten.scaled_dot_product_attention. The integer arithmetic the IR does on shapes makes no
 * call: it becomes SymInts where it is read (aten_symbolic.c), or a tensor where a tensor op
 * reads it (aten_tensor). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/aten/aten_calls.h"
#include "util/dtype.h"

/* ---- helpers ---- */

/* A rank-0 constant's value as a number, when aten can take it so. */
static bool scalar_const(const aten_emitter *e, int v, double *out)
{
    const g_value *x = ac_val(e, v);
    if (x->kind != GV_CONST || x->shape.rank != 0 || !x->data)
        return false;
    switch (x->dtype) {
    case FERRY_F32: *out = *(const float *)x->data; return true;
    case FERRY_F64: *out = *(const double *)x->data; return true;
    case FERRY_F16: *out = dt_f16_to_f32(*(const uint16_t *)x->data); return true;
    case FERRY_BF16: *out = dt_bf16_to_f32(*(const uint16_t *)x->data); return true;
    case FERRY_I64: *out = (double)*(const int64_t *)x->data; return true;
    case FERRY_I32: *out = *(const int32_t *)x->data; return true;
    default: return false;
    }
}

/* a number as the dtype of value v takes it: an int for an integer tensor */
static void arg_number(aten_emitter *e, const char *arg, int kind, int v, double x)
{
    if (!dt_is_float(ac_val(e, v)->dtype))
        ac_arg_int(e, arg, kind, (int64_t)x);
    else
        ac_arg_float(e, arg, kind, x);
}

static int norm_axis(int64_t axis, int rank)
{
    return (int)(axis < 0 ? axis + rank : axis);
}

/* ---- integers made tensors ---- */

static aten_t full(aten_emitter *e, g_dim d, ferry_dtype dt)
{
    ac_begin(e, "full.default");
    ac_arg_ints(e, "size", ATEN_POSITIONAL, NULL, 0);
    ac_arg_symint(e, "fill_value", ATEN_POSITIONAL, d);
    ac_arg_scalar_type(e, "dtype", ATEN_KEYWORD, dt);
    ac_arg_device(e, "device", ATEN_KEYWORD);
    ac_arg_bool(e, "pin_memory", ATEN_KEYWORD, false);
    g_shape scalar = {0};
    return ac_end_temp(e, "full", dt, &scalar);
}

static aten_t materialize(aten_emitter *e, int v)
{
    const aten_ints *r = &e->ints[v];
    const g_value *x = ac_val(e, v);
    if (r->scalar)
        return full(e, r->d[0], x->dtype);
    aten_t parts[G_MAX_RANK];
    for (int i = 0; i < r->n; i++)
        if ((parts[i] = full(e, r->d[i], x->dtype)) == ATEN_NONE)
            return ATEN_NONE;
    ac_begin(e, "stack.default");
    ac_arg_refs(e, "tensors", ATEN_POSITIONAL, parts, r->n, false);
    ac_arg_int(e, "dim", ATEN_POSITIONAL, 0);
    return ac_end_temp(e, x->name, x->dtype, &x->shape);
}

bool aten_emitter_init(aten_emitter *e, const g_graph *g, const aten_ints *ints, aten_sink *sink)
{
    *e = (aten_emitter){.g = g, .ints = ints, .sink = sink};
    e->made = malloc((g->n_values ? g->n_values : 1) * sizeof *e->made);
    if (!e->made)
        return false;
    for (size_t i = 0; i < g->n_values; i++)
        e->made[i] = ATEN_NONE;
    return true;
}

void aten_emitter_free(aten_emitter *e)
{
    free(e->made);
    e->made = NULL;
}

aten_t aten_tensor(aten_emitter *e, int v)
{
    if (ac_failed(e))
        return ATEN_NONE;
    if (v < 0 || (size_t)v >= e->g->n_values) {
        ac_fail(e, FERRY_ERR_INTERNAL, "no value %d", v);
        return ATEN_NONE;
    }
    if (e->made[v] != ATEN_NONE)
        return e->made[v];
    const g_value *x = ac_val(e, v);
    if (x->kind == GV_NODE && e->ints[v].known)
        return e->made[v] = materialize(e, v);
    return v;
}

/* ---- op families ---- */

static const char *const BINARY[G_OP_COUNT] = {
    [G_ADD] = "add.Tensor", [G_SUB] = "sub.Tensor", [G_MUL] = "mul.Tensor",
    [G_DIV] = "div.Tensor", [G_POW] = "pow.Tensor_Tensor", [G_MAX] = "maximum.default",
    [G_MIN] = "minimum.default", [G_AND] = "logical_and.default",
    [G_OR] = "logical_or.default", [G_EQUAL] = "eq.Tensor", [G_LESS] = "lt.Tensor",
    [G_LESS_EQUAL] = "le.Tensor", [G_GREATER] = "gt.Tensor", [G_GREATER_EQUAL] = "ge.Tensor",
};

static const char *const UNARY[G_OP_COUNT] = {
    [G_SQRT] = "sqrt", [G_RECIPROCAL] = "reciprocal", [G_EXP] = "exp", [G_COS] = "cos",
    [G_SIN] = "sin", [G_SIGMOID] = "sigmoid", [G_TANH] = "tanh", [G_ERF] = "erf",
    [G_NEG] = "neg", [G_NOT] = "logical_not", [G_SILU] = "silu", [G_GELU] = "gelu",
    [G_GELU_TANH] = "gelu", [G_ABS] = "abs", [G_LOG] = "log", [G_FLOOR] = "floor",
};

static void emit_binary(aten_emitter *e, const g_node *n)
{
    double x = 0.0;
    const g_value *a = ac_val(e, n->in[0]);
    bool number = scalar_const(e, n->in[1], &x) && n->op != G_AND && n->op != G_OR &&
                  ac_val(e, n->in[1])->dtype == a->dtype;
    if (n->op == G_DIV && !dt_is_float(a->dtype)) {
        /* ONNX's integer division truncates; aten.div divides exactly unless told */
        ac_begin(e, "div.Tensor_mode");
        ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
        ac_arg_tensor(e, "other", n->in[1], ATEN_POSITIONAL);
        ac_arg_string(e, "rounding_mode", ATEN_KEYWORD, "trunc");
        ac_end_node(e, n);
        return;
    }
    if (n->op == G_POW && number) {
        ac_begin(e, "pow.Tensor_Scalar");
        ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
        arg_number(e, "exponent", ATEN_POSITIONAL, n->in[1], x);
        ac_end_node(e, n);
        return;
    }
    if (number && (n->op == G_MAX || n->op == G_MIN))
        number = false; /* maximum/minimum take tensors only */
    /* aten's schemas name the second operand "other", except pow's "exponent" */
    const char *second = n->op == G_POW ? "exponent" : "other";
    bool compare = n->op == G_EQUAL || n->op == G_LESS || n->op == G_LESS_EQUAL ||
                   n->op == G_GREATER || n->op == G_GREATER_EQUAL;
    if (number && compare) {
        /* a comparison's .Tensor overload refuses a number where add's takes one: its
         * .Scalar overload ("gt.Tensor" -> "gt.Scalar") */
        char op[32];
        snprintf(op, sizeof op, "%.*s.Scalar", (int)(strchr(BINARY[n->op], '.') -
                                                     BINARY[n->op]), BINARY[n->op]);
        ac_begin(e, op);
    } else {
        ac_begin(e, BINARY[n->op]);
    }
    ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
    if (number)
        arg_number(e, second, ATEN_POSITIONAL, n->in[1], x);
    else
        ac_arg_tensor(e, second, n->in[1], ATEN_POSITIONAL);
    ac_end_node(e, n);
}

static void emit_unary(aten_emitter *e, const g_node *n)
{
    char op[48];
    snprintf(op, sizeof op, "%s.default", UNARY[n->op]);
    ac_begin(e, op);
    ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
    if (n->op == G_GELU_TANH)
        ac_arg_string(e, "approximate", ATEN_KEYWORD, "tanh");
    ac_end_node(e, n);
}

static void emit_matmul(aten_emitter *e, const g_node *n)
{
    if (n->a.transpose_b) { /* b is [n, k]: aten.linear's weight as stored */
        ac_begin(e, "linear.default");
        ac_arg_tensor(e, "input", n->in[0], ATEN_POSITIONAL);
        ac_arg_tensor(e, "weight", n->in[1], ATEN_POSITIONAL);
    } else {
        ac_begin(e, "matmul.default");
        ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
        ac_arg_tensor(e, "other", n->in[1], ATEN_POSITIONAL);
    }
    ac_end_node(e, n);
}

/* ONNX-style gather along `axis`: aten.index with the indices at that position */
static void emit_gather(aten_emitter *e, const g_node *n)
{
    int rank = ac_val(e, n->in[0])->shape.rank;
    int axis = norm_axis(n->a.axis, rank);
    aten_t idx = aten_tensor(e, n->in[1]);
    if (idx == ATEN_NONE)
        return;
    aten_t list[G_MAX_RANK + 1];
    int count = 0;
    for (int k = 0; k < axis && count < G_MAX_RANK; k++)
        list[count++] = ATEN_NONE;
    list[count++] = idx;
    ac_begin(e, "index.Tensor");
    ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
    ac_arg_refs(e, "indices", ATEN_POSITIONAL, list, count, true);
    ac_end_node(e, n);
}

/* the output's shape as SymInts: -1 for the one extent the IR could not name */
static void emit_reshape(aten_emitter *e, const g_node *n)
{
    const g_shape *s = &ac_val(e, n->out[0])->shape;
    g_dim d[G_MAX_RANK];
    for (int k = 0; k < s->rank; k++)
        d[k] = s->d[k].unknown ? g_dim_const(-1) : s->d[k];
    ac_begin(e, "reshape.default");
    ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
    ac_arg_symints(e, "shape", ATEN_POSITIONAL, d, s->rank);
    ac_end_node(e, n);
}

static void emit_expand(aten_emitter *e, const g_node *n)
{
    const g_shape *s = &ac_val(e, n->out[0])->shape;
    ac_begin(e, "expand.default");
    ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
    ac_arg_symints(e, "size", ATEN_POSITIONAL, s->d, s->rank);
    ac_end_node(e, n);
}

static void emit_transpose(aten_emitter *e, const g_node *n)
{
    ac_begin(e, "permute.default");
    ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
    ac_arg_ints(e, "dims", ATEN_POSITIONAL, n->a.ints, n->a.n_ints);
    ac_end_node(e, n);
}

static void emit_concat(aten_emitter *e, const g_node *n)
{
    aten_t list[G_MAX_IN];
    for (int k = 0; k < n->n_in; k++)
        if ((list[k] = aten_tensor(e, n->in[k])) == ATEN_NONE)
            return;
    ac_begin(e, "cat.default");
    ac_arg_refs(e, "tensors", ATEN_POSITIONAL, list, n->n_in, false);
    ac_arg_int(e, "dim", ATEN_POSITIONAL, n->a.axis);
    ac_end_node(e, n);
}

static void emit_slice(aten_emitter *e, const g_node *n)
{
    ac_begin(e, "slice.Tensor");
    ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
    ac_arg_int(e, "dim", ATEN_POSITIONAL, n->a.axis);
    ac_arg_int(e, "start", ATEN_POSITIONAL, n->a.start);
    ac_arg_int(e, "end", ATEN_POSITIONAL, n->a.end);
    ac_end_node(e, n);
}

/* one aten.unsqueeze per new axis, in increasing order of where it lands */
static void emit_unsqueeze(aten_emitter *e, const g_node *n)
{
    const g_value *y = ac_val(e, n->out[0]);
    int rank = y->shape.rank;
    int64_t axes[G_MAX_INTS];
    for (int k = 0; k < n->a.n_ints; k++)
        axes[k] = norm_axis(n->a.ints[k], rank);
    for (int i = 1; i < n->a.n_ints; i++)
        for (int k = i; k > 0 && axes[k] < axes[k - 1]; k--) {
            int64_t t = axes[k];
            axes[k] = axes[k - 1], axes[k - 1] = t;
        }
    aten_t x = aten_tensor(e, n->in[0]);
    g_shape s = ac_val(e, n->in[0])->shape;
    for (int k = 0; k < n->a.n_ints && x != ATEN_NONE; k++) {
        for (int d = s.rank; d > axes[k]; d--)
            s.d[d] = s.d[d - 1];
        s.d[axes[k]] = g_dim_const(1);
        s.rank++;
        ac_begin(e, "unsqueeze.default");
        ac_arg_ref(e, "self", x, ATEN_POSITIONAL);
        ac_arg_int(e, "dim", ATEN_POSITIONAL, axes[k]);
        if (k == n->a.n_ints - 1) {
            aten_out out = {.value = n->out[0], .dtype = y->dtype, .shape = s};
            x = ac_end_outs(e, 1, &out, NULL);
        } else {
            x = ac_end_temp(e, "unsqueeze", y->dtype, &s);
        }
    }
}

static void emit_cast(aten_emitter *e, const g_node *n)
{
    ac_begin(e, "to.dtype");
    ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
    ac_arg_scalar_type(e, "dtype", ATEN_POSITIONAL, n->a.to);
    ac_end_node(e, n);
}

static void emit_reduce(aten_emitter *e, const g_node *n)
{
    ac_begin(e, n->op == G_REDUCE_MEAN  ? "mean.dim"
             : n->op == G_REDUCE_MAX ? "amax.default"
                                     : "sum.dim_IntList");
    ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
    ac_arg_ints(e, "dim", ATEN_POSITIONAL, n->a.ints, n->a.n_ints);
    ac_arg_bool(e, "keepdim", ATEN_POSITIONAL, n->a.keepdims);
    ac_end_node(e, n);
}

static void arange(aten_emitter *e, g_dim start, g_dim end, g_dim step, ferry_dtype dt)
{
    ac_begin(e, "arange.start_step");
    ac_arg_symint(e, "start", ATEN_POSITIONAL, start);
    ac_arg_symint(e, "end", ATEN_POSITIONAL, end);
    ac_arg_symint(e, "step", ATEN_POSITIONAL, step);
    ac_arg_scalar_type(e, "dtype", ATEN_KEYWORD, dt);
    ac_arg_device(e, "device", ATEN_KEYWORD);
    ac_arg_bool(e, "pin_memory", ATEN_KEYWORD, false);
}

static void emit_range(aten_emitter *e, const g_node *n)
{
    const aten_ints *s = &e->ints[n->in[0]], *l = &e->ints[n->in[1]], *d = &e->ints[n->in[2]];
    const g_value *y = ac_val(e, n->out[0]);
    int length = aten_range_offset_length(e->g, n, e->ints);
    if (length != G_NONE && !s->known) {
        /* from a position held in a tensor: arange(n) + position */
        aten_t start = aten_tensor(e, n->in[0]);
        if (start == ATEN_NONE)
            return;
        arange(e, g_dim_const(0), e->ints[length].d[0], g_dim_const(1), y->dtype);
        aten_t counted = ac_end_temp(e, "arange", y->dtype, &y->shape);
        if (counted == ATEN_NONE)
            return;
        ac_begin(e, "add.Tensor");
        ac_arg_ref(e, "self", counted, ATEN_POSITIONAL);
        ac_arg_tensor(e, "other", n->in[0], ATEN_POSITIONAL);
        ac_end_node(e, n);
        return;
    }
    if (!s->known || !l->known || !d->known) {
        ac_fail(e, FERRY_ERR_UNSUPPORTED, "the bounds of '%s' come from data, not shapes, so an "
             "aten program cannot size it", n->name);
        return;
    }
    arange(e, s->d[0], l->d[0], d->d[0], y->dtype);
    ac_end_node(e, n);
}

static void emit_topk(aten_emitter *e, const g_node *n)
{
    ac_begin(e, "topk.default");
    ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
    ac_arg_int(e, "k", ATEN_POSITIONAL, n->a.ints[0]);
    ac_arg_int(e, "dim", ATEN_POSITIONAL, n->a.axis);
    aten_out outs[2];
    for (int k = 0; k < 2; k++)
        outs[k] = (aten_out){.value = n->out[k], .dtype = ac_val(e, n->out[k])->dtype,
                             .shape = ac_val(e, n->out[k])->shape};
    ac_end_outs(e, 2, outs, "topk");
}

static void emit_gather_elements(aten_emitter *e, const g_node *n)
{
    ac_begin(e, "gather.default");
    ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
    ac_arg_int(e, "dim", ATEN_POSITIONAL, n->a.axis);
    ac_arg_tensor(e, "index", n->in[1], ATEN_POSITIONAL);
    ac_end_node(e, n);
}

static void emit_scatter(aten_emitter *e, const g_node *n)
{
    ac_begin(e, n->op == G_SCATTER_ADD ? "scatter_add.default" : "scatter.src");
    ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
    ac_arg_int(e, "dim", ATEN_POSITIONAL, n->a.axis);
    ac_arg_tensor(e, "index", n->in[1], ATEN_POSITIONAL);
    ac_arg_tensor(e, "src", n->in[2], ATEN_POSITIONAL);
    ac_end_node(e, n);
}

static void emit_simple_axis(aten_emitter *e, const g_node *n, const char *op)
{
    ac_begin(e, op);
    ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
    ac_arg_int(e, "dim", ATEN_POSITIONAL, n->a.axis);
    ac_end_node(e, n);
}

static void emit_where(aten_emitter *e, const g_node *n)
{
    ac_begin(e, "where.self");
    ac_arg_tensor(e, "condition", n->in[0], ATEN_POSITIONAL);
    ac_arg_tensor(e, "self", n->in[1], ATEN_POSITIONAL);
    ac_arg_tensor(e, "other", n->in[2], ATEN_POSITIONAL);
    ac_end_node(e, n);
}

/* an infinite bound is an absent one: None */
static void emit_clip(aten_emitter *e, const g_node *n)
{
    ac_begin(e, "clamp.default");
    ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
    if (n->a.lo == -INFINITY)
        ac_arg_none(e, "min", ATEN_POSITIONAL);
    else
        arg_number(e, "min", ATEN_POSITIONAL, n->in[0], n->a.lo);
    if (n->a.hi == INFINITY)
        ac_arg_none(e, "max", ATEN_POSITIONAL);
    else
        arg_number(e, "max", ATEN_POSITIONAL, n->in[0], n->a.hi);
    ac_end_node(e, n);
}

/* aten.pad(x, pad, "constant", value): pad lists (begin, end) pairs from the last axis back,
 * as F.pad takes them; the leading axes without padding are left off (one pair at least). */
static void pad_call(aten_emitter *e, aten_t x, int rank, const int64_t *begin_at,
                     const int64_t *end_at, double value)
{
    int pairs = 1;
    for (int i = 0; i < rank; i++)
        if (begin_at[i] || end_at[i]) {
            pairs = rank - i;
            break;
        }
    int64_t list[2 * G_MAX_RANK];
    for (int k = 0; k < pairs; k++) {
        int axis = rank - 1 - k;
        list[2 * k] = begin_at[axis];
        list[2 * k + 1] = end_at[axis];
    }
    ac_begin(e, "pad.default");
    ac_arg_ref(e, "self", x, ATEN_POSITIONAL);
    ac_arg_ints(e, "pad", ATEN_POSITIONAL, list, 2 * pairs);
    ac_arg_string(e, "mode", ATEN_POSITIONAL, "constant");
    ac_arg_float(e, "value", ATEN_POSITIONAL, value);
}

static void emit_pad(aten_emitter *e, const g_node *n)
{
    aten_t x = aten_tensor(e, n->in[0]);
    if (x == ATEN_NONE)
        return;
    pad_call(e, x, ac_val(e, n->in[0])->shape.rank, n->a.pad_begin, n->a.pad_end, n->a.pad_value);
    ac_end_node(e, n);
}

/* aten.conv1d/2d/3d, as torch.export records nn.Conv1d/2d/3d. Their padding is one extent per
 * axis on both sides: unequal pads are an aten.pad of zeros first, then no padding (what
 * torch's own convolution does for padding="same" with an even kernel). */
static void emit_conv(aten_emitter *e, const g_node *n)
{
    const g_conv_opts *o = n->a.conv;
    const g_value *xv = ac_val(e, n->in[0]);
    aten_t x = aten_tensor(e, n->in[0]);
    if (x == ATEN_NONE)
        return;
    int64_t padding[G_CONV_MAX_SPATIAL];
    bool even = true;
    for (int i = 0; i < o->spatial; i++) {
        even &= o->pads_begin[i] == o->pads_end[i];
        padding[i] = o->pads_begin[i];
    }
    if (!even) {
        int64_t begin_at[G_MAX_RANK] = {0}, end_at[G_MAX_RANK] = {0};
        g_shape padded = xv->shape;
        for (int i = 0; i < o->spatial; i++) {
            begin_at[2 + i] = o->pads_begin[i];
            end_at[2 + i] = o->pads_end[i];
            padded.d[2 + i] = g_dim_add(padded.d[2 + i],
                                        g_dim_const(o->pads_begin[i] + o->pads_end[i]));
            padding[i] = 0;
        }
        pad_call(e, x, xv->shape.rank, begin_at, end_at, 0.0);
        if ((x = ac_end_temp(e, "pad", xv->dtype, &padded)) == ATEN_NONE)
            return;
    }
    char op[24];
    snprintf(op, sizeof op, "conv%dd.default", o->spatial);
    ac_begin(e, op);
    ac_arg_ref(e, "input", x, ATEN_POSITIONAL);
    ac_arg_tensor(e, "weight", n->in[1], ATEN_POSITIONAL);
    if (n->n_in > 2 && n->in[2] != G_NONE)
        ac_arg_tensor(e, "bias", n->in[2], ATEN_POSITIONAL);
    else
        ac_arg_none(e, "bias", ATEN_POSITIONAL);
    ac_arg_ints(e, "stride", ATEN_POSITIONAL, o->strides, o->spatial);
    ac_arg_ints(e, "padding", ATEN_POSITIONAL, padding, o->spatial);
    ac_arg_ints(e, "dilation", ATEN_POSITIONAL, o->dilations, o->spatial);
    ac_arg_int(e, "groups", ATEN_POSITIONAL, o->groups);
    ac_end_node(e, n);
}

const g_value *aten_tied_head_weight(const g_graph *g, const g_node *n, char *key, size_t size)
{
    if (n->op != G_LINEAR || n->n_in < 2 || n->in[1] < 0 || g_node_role(g, n) != GM_ROLE_HEAD)
        return NULL;
    const g_module *m = g_module_at(g, n->name, strlen(n->name));
    snprintf(key, size, "%s.weight", m->fqn);
    const g_value *w = &g->values[n->in[1]];
    return w->kind == GV_WEIGHT && strcmp(w->name, key) != 0 ? w : NULL;
}

static void emit_linear(aten_emitter *e, const g_node *n)
{
    /* The head of a tied checkpoint reads the embedding table: as transformers' module does,
     * through its own parameter (lm_head.weight), one storage with the embedding's. */
    char key[256];
    bool tied_head = aten_tied_head_weight(e->g, n, key, sizeof key) != NULL &&
                     e->sink->ops->tied_head;
    aten_t tied = tied_head ? e->sink->ops->tied_head(e->sink, n->in[1], key) : ATEN_NONE;
    if (tied_head && tied == ATEN_NONE)
        return;
    ac_begin(e, "linear.default");
    ac_arg_tensor(e, "input", n->in[0], ATEN_POSITIONAL);
    if (tied_head)
        ac_arg_ref(e, "weight", tied, ATEN_POSITIONAL);
    else
        ac_arg_tensor(e, "weight", n->in[1], ATEN_POSITIONAL);
    if (n->n_in > 2 && n->in[2] != G_NONE)
        ac_arg_tensor(e, "bias", n->in[2], ATEN_POSITIONAL);
    ac_end_node(e, n);
}

static void emit_embedding(aten_emitter *e, const g_node *n)
{
    ac_begin(e, "embedding.default");
    ac_arg_tensor(e, "weight", n->in[0], ATEN_POSITIONAL);
    ac_arg_tensor(e, "indices", n->in[1], ATEN_POSITIONAL);
    ac_end_node(e, n);
}

static void emit_layer_norm(aten_emitter *e, const g_node *n)
{
    const g_shape *s = &ac_val(e, n->in[1])->shape;
    ac_begin(e, "layer_norm.default");
    ac_arg_tensor(e, "input", n->in[0], ATEN_POSITIONAL);
    ac_arg_symints(e, "normalized_shape", ATEN_POSITIONAL, s->d, s->rank);
    ac_arg_tensor(e, "weight", n->in[1], ATEN_POSITIONAL);
    if (n->n_in > 2 && n->in[2] != G_NONE)
        ac_arg_tensor(e, "bias", n->in[2], ATEN_POSITIONAL);
    else
        ac_arg_none(e, "bias", ATEN_POSITIONAL);
    ac_arg_float(e, "eps", ATEN_POSITIONAL, n->a.eps);
    ac_end_node(e, n);
}

static const g_ext_attr *ext_attr(const g_extern *x, const char *name)
{
    for (int i = 0; i < x->n_attr; i++)
        if (strcmp(x->attr[i].name, name) == 0)
            return &x->attr[i];
    return NULL;
}

/* a static cache's write into the caller's tensor (the aten targets' index_copy_) */
static void emit_index_copy(aten_emitter *e, const g_node *n)
{
    const g_ext_attr *dim = ext_attr(n->a.ext, "dim");
    ac_begin(e, "index_copy_.default");
    ac_arg_tensor(e, "self", n->in[0], ATEN_POSITIONAL);
    ac_arg_int(e, "dim", ATEN_POSITIONAL, dim ? dim->i : 0);
    ac_arg_tensor(e, "index", n->in[1], ATEN_POSITIONAL);
    ac_arg_tensor(e, "source", n->in[2], ATEN_POSITIONAL);
    ac_end_node(e, n);
}

static void emit_extern(aten_emitter *e, const g_node *n)
{
    const g_extern *x = n->a.ext;
    if (strcmp(x->domain, ATEN_DOMAIN) == 0 && strcmp(x->op_type, ATEN_INDEX_COPY) == 0 &&
        n->n_in == 3) {
        emit_index_copy(e, n);
        return;
    }
    if (strcmp(x->domain, ATEN_DOMAIN) != 0 || strcmp(x->op_type, ATEN_SDPA) != 0 ||
        n->n_in != 4) {
        ac_fail(e, FERRY_ERR_INTERNAL, "node '%s' is %s.%s, which the aten targets never make",
             n->name, x->domain, x->op_type);
        return;
    }
    const g_ext_attr *scale = ext_attr(x, "scale"), *gqa = ext_attr(x, "enable_gqa");
    ac_begin(e, "scaled_dot_product_attention.default");
    ac_arg_tensor(e, "query", n->in[0], ATEN_POSITIONAL);
    ac_arg_tensor(e, "key", n->in[1], ATEN_POSITIONAL);
    ac_arg_tensor(e, "value", n->in[2], ATEN_POSITIONAL);
    if (n->in[3] == G_NONE) /* attention without a mask: every key visible */
        ac_arg_none(e, "attn_mask", ATEN_POSITIONAL);
    else
        ac_arg_tensor(e, "attn_mask", n->in[3], ATEN_POSITIONAL);
    if (scale)
        ac_arg_float(e, "scale", ATEN_KEYWORD, scale->f);
    if (gqa && gqa->i)
        ac_arg_bool(e, "enable_gqa", ATEN_KEYWORD, true);
    ac_end_node(e, n);
}

/* ---- dispatch ---- */

void aten_emit_node(aten_emitter *e, size_t i)
{
    const g_node *n = &e->g->nodes[i];
    /* shape arithmetic: SymInts where read, a tensor only if a tensor op reads it */
    if (n->op == G_SHAPE_OF || e->ints[n->out[0]].known)
        return;
    if (BINARY[n->op]) {
        emit_binary(e, n);
        return;
    }
    if (UNARY[n->op]) {
        emit_unary(e, n);
        return;
    }
    switch (n->op) {
    case G_WHERE: emit_where(e, n); break;
    case G_MATMUL: emit_matmul(e, n); break;
    case G_GATHER: emit_gather(e, n); break;
    case G_RESHAPE: emit_reshape(e, n); break;
    case G_TRANSPOSE: emit_transpose(e, n); break;
    case G_CONCAT: emit_concat(e, n); break;
    case G_SLICE: emit_slice(e, n); break;
    case G_UNSQUEEZE: emit_unsqueeze(e, n); break;
    case G_CAST: emit_cast(e, n); break;
    case G_SOFTMAX: emit_simple_axis(e, n, "softmax.int"); break;
    case G_CUMSUM: emit_simple_axis(e, n, "cumsum.default"); break;
    case G_REDUCE_MEAN: case G_REDUCE_MAX: case G_REDUCE_SUM: emit_reduce(e, n); break;
    case G_RANGE: emit_range(e, n); break;
    case G_EXPAND: emit_expand(e, n); break;
    case G_SCATTER_ELEMENTS: case G_SCATTER_ADD: emit_scatter(e, n); break;
    case G_GATHER_ELEMENTS: emit_gather_elements(e, n); break;
    case G_TOPK: emit_topk(e, n); break;
    case G_CLIP: emit_clip(e, n); break;
    case G_PAD: emit_pad(e, n); break;
    case G_CONV: emit_conv(e, n); break;
    case G_LINEAR: emit_linear(e, n); break;
    case G_EMBEDDING: emit_embedding(e, n); break;
    case G_LAYER_NORM: emit_layer_norm(e, n); break;
    case G_EXTERN: emit_extern(e, n); break;
    default:
        ac_fail(e, FERRY_ERR_UNSUPPORTED, "node '%s' (%s) has no aten form in ferry's aten targets",
             n->name, g_op_name(n->op));
    }
}

/* Whether value `out` is input `in` written in place by aten.index_copy_. */
static bool written_into(const g_graph *g, int out, int in)
{
    const g_value *x = &g->values[out];
    if (x->kind != GV_NODE)
        return false;
    const g_node *n = &g->nodes[x->producer];
    return n->op == G_EXTERN && strcmp(n->a.ext->op_type, ATEN_INDEX_COPY) == 0 &&
           n->in[0] == in;
}

void aten_emit_mutations(aten_emitter *e)
{
    const g_graph *g = e->g;
    for (size_t i = 0; i < g->n_states && !ac_failed(e); i++) {
        const g_state *s = &g->states[i];
        if (s->form != GS_MUTATED || written_into(g, s->out, s->in))
            continue;
        /* the new value copied into the caller's tensor, after every read of the old one */
        const g_value *x = &g->values[s->in];
        char base[200];
        snprintf(base, sizeof base, "copy_%s", x->name);
        ac_begin(e, "copy_.default");
        ac_arg_tensor(e, "self", s->in, ATEN_POSITIONAL);
        ac_arg_tensor(e, "src", s->out, ATEN_POSITIONAL);
        ac_end_temp(e, base, x->dtype, &x->shape);
    }
}
