/* pt2_nodes.c — each IR node as the aten call torch.export records for it (argument names
 * and kinds from aten's schemas, native_functions.yaml): elementwise ops over their .Tensor
 * overloads (a scalar constant as a number where aten takes one), shapes passed as SymInts,
 * gathers as aten.index, the kept semantic ops as aten.linear, aten.embedding, aten.silu,
 * aten.gelu and aten.layer_norm, attention as aten.scaled_dot_product_attention. The integer
 * arithmetic the IR does on shapes writes no node: it becomes SymInts where it is read
 * (pt2_symbolic.c), or a tensor where a tensor op reads it (pt_materialize). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/torch/pt2_printer.h"
#include "util/dtype.h"

/* ---- helpers ---- */

static const g_value *val(const pt_printer *p, int v)
{
    return &p->g->values[v];
}

static const char *out_name(pt_printer *p, const g_node *n, int k)
{
    const char *base = val(p, n->out[k])->name;
    char trimmed[200];
    snprintf(trimmed, sizeof trimmed, "%s", base);
    size_t len = strlen(trimmed);
    const char *suffix = "_output_0";
    if (len > strlen(suffix) && strcmp(trimmed + len - strlen(suffix), suffix) == 0)
        trimmed[len - strlen(suffix)] = '\0';
    const char *name = pt_fresh(p, trimmed);
    if (name)
        p->names[n->out[k]] = (char *)name;
    return name;
}

static void end_node(pt_printer *p, const g_node *n)
{
    const g_value *y = val(p, n->out[0]);
    pt_node_end_tensor(p, out_name(p, n, 0), y->dtype, &y->shape);
}

/* A rank-0 constant's value as a number, when aten can take it so. */
static bool scalar_const(const pt_printer *p, int v, double *out)
{
    const g_value *x = val(p, v);
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

static void arg_number(pt_printer *p, const char *arg, int kind, int v, double x)
{
    if (!dt_is_float(val(p, v)->dtype))
        pt_arg(p, arg, kind, "{\"as_int\": %lld}", (long long)x);
    else if (isfinite(x))
        pt_arg(p, arg, kind, "{\"as_float\": %.17g}", x);
    else
        pt_arg(p, arg, kind, "{\"as_float\": \"%s\"}",
               isnan(x) ? "NaN" : x > 0 ? "Infinity" : "-Infinity");
}

static int norm_axis(int64_t axis, int rank)
{
    return (int)(axis < 0 ? axis + rank : axis);
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

static void target(pt_printer *p, const char *op)
{
    char t[96];
    snprintf(t, sizeof t, "torch.ops.aten.%s", op);
    pt_node_begin(p, t);
}

static void emit_binary(pt_printer *p, const g_node *n)
{
    double x;
    const g_value *a = val(p, n->in[0]);
    bool number = scalar_const(p, n->in[1], &x) && n->op != G_AND && n->op != G_OR &&
                  val(p, n->in[1])->dtype == a->dtype;
    if (n->op == G_DIV && !dt_is_float(a->dtype)) {
        /* ONNX's integer division truncates; aten.div divides exactly unless told */
        target(p, "div.Tensor_mode");
        pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
        pt_arg_tensor(p, "other", n->in[1], PT_POSITIONAL);
        pt_arg(p, "rounding_mode", PT_KEYWORD, "{\"as_string\": \"trunc\"}");
        end_node(p, n);
        return;
    }
    if (n->op == G_POW && number) {
        target(p, "pow.Tensor_Scalar");
        pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
        arg_number(p, "exponent", PT_POSITIONAL, n->in[1], x);
        end_node(p, n);
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
        target(p, op);
    } else {
        target(p, BINARY[n->op]);
    }
    pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
    if (number)
        arg_number(p, second, PT_POSITIONAL, n->in[1], x);
    else
        pt_arg_tensor(p, second, n->in[1], PT_POSITIONAL);
    end_node(p, n);
}

static void emit_unary(pt_printer *p, const g_node *n)
{
    char op[48];
    snprintf(op, sizeof op, "%s.default", UNARY[n->op]);
    target(p, op);
    pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
    if (n->op == G_GELU_TANH)
        pt_arg(p, "approximate", PT_KEYWORD, "{\"as_string\": \"tanh\"}");
    end_node(p, n);
}

static void emit_matmul(pt_printer *p, const g_node *n)
{
    if (n->a.transpose_b) { /* b is [n, k]: aten.linear's weight as stored */
        target(p, "linear.default");
        pt_arg_tensor(p, "input", n->in[0], PT_POSITIONAL);
        pt_arg_tensor(p, "weight", n->in[1], PT_POSITIONAL);
    } else {
        target(p, "matmul.default");
        pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
        pt_arg_tensor(p, "other", n->in[1], PT_POSITIONAL);
    }
    end_node(p, n);
}

/* ONNX-style gather along `axis`: aten.index with the indices at that position */
static void emit_gather(pt_printer *p, const g_node *n)
{
    int rank = val(p, n->in[0])->shape.rank;
    int axis = norm_axis(n->a.axis, rank);
    const char *idx = pt_tensor(p, n->in[1]);
    if (!idx)
        return;
    char list[600] = "";
    size_t len = 0;
    for (int k = 0; k < axis && len < sizeof list; k++)
        len += (size_t)snprintf(list + len, sizeof list - len, "{\"as_none\": true}, ");
    if (len < sizeof list)
        snprintf(list + len, sizeof list - len, "{\"as_tensor\": {\"name\": \"%s\"}}", idx);
    target(p, "index.Tensor");
    pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
    pt_arg(p, "indices", PT_POSITIONAL, "{\"as_optional_tensors\": [%s]}", list);
    end_node(p, n);
}

/* the output's shape as SymInts: -1 for the one extent the IR could not name */
static void emit_reshape(pt_printer *p, const g_node *n)
{
    const g_shape *s = &val(p, n->out[0])->shape;
    g_dim d[G_MAX_RANK];
    for (int k = 0; k < s->rank; k++)
        d[k] = s->d[k].unknown ? g_dim_const(-1) : s->d[k];
    target(p, "reshape.default");
    pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
    pt_arg_symints(p, "shape", PT_POSITIONAL, d, s->rank);
    end_node(p, n);
}

static void emit_expand(pt_printer *p, const g_node *n)
{
    const g_shape *s = &val(p, n->out[0])->shape;
    target(p, "expand.default");
    pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
    pt_arg_symints(p, "size", PT_POSITIONAL, s->d, s->rank);
    end_node(p, n);
}

static void ints_text(char *buf, size_t size, const int64_t *v, int n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%lld", i ? ", " : "", (long long)v[i]);
}

static void emit_transpose(pt_printer *p, const g_node *n)
{
    char dims[200];
    ints_text(dims, sizeof dims, n->a.ints, n->a.n_ints);
    target(p, "permute.default");
    pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
    pt_arg(p, "dims", PT_POSITIONAL, "{\"as_ints\": [%s]}", dims);
    end_node(p, n);
}

static void emit_concat(pt_printer *p, const g_node *n)
{
    char list[G_MAX_IN * 200] = "";
    size_t len = 0;
    for (int k = 0; k < n->n_in; k++) {
        const char *x = pt_tensor(p, n->in[k]);
        if (!x)
            return;
        len += (size_t)snprintf(list + len, sizeof list - len, "%s{\"name\": \"%s\"}",
                                k ? ", " : "", x);
        if (len >= sizeof list)
            return (void)pt_fail(p, FERRY_ERR_INTERNAL, "pt2: concat names too long");
    }
    target(p, "cat.default");
    pt_arg(p, "tensors", PT_POSITIONAL, "{\"as_tensors\": [%s]}", list);
    pt_arg(p, "dim", PT_POSITIONAL, "{\"as_int\": %lld}", (long long)n->a.axis);
    end_node(p, n);
}

static void emit_slice(pt_printer *p, const g_node *n)
{
    target(p, "slice.Tensor");
    pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
    pt_arg(p, "dim", PT_POSITIONAL, "{\"as_int\": %lld}", (long long)n->a.axis);
    pt_arg(p, "start", PT_POSITIONAL, "{\"as_int\": %lld}", (long long)n->a.start);
    pt_arg(p, "end", PT_POSITIONAL, "{\"as_int\": %lld}", (long long)n->a.end);
    end_node(p, n);
}

/* one aten.unsqueeze per new axis, in increasing order of where it lands */
static void emit_unsqueeze(pt_printer *p, const g_node *n)
{
    const g_value *y = val(p, n->out[0]);
    int rank = y->shape.rank;
    int64_t axes[G_MAX_INTS];
    for (int k = 0; k < n->a.n_ints; k++)
        axes[k] = norm_axis(n->a.ints[k], rank);
    for (int i = 1; i < n->a.n_ints; i++)
        for (int k = i; k > 0 && axes[k] < axes[k - 1]; k--) {
            int64_t t = axes[k];
            axes[k] = axes[k - 1], axes[k - 1] = t;
        }
    const char *x = pt_tensor(p, n->in[0]);
    g_shape s = val(p, n->in[0])->shape;
    for (int k = 0; k < n->a.n_ints && x; k++) {
        for (int d = s.rank; d > axes[k]; d--)
            s.d[d] = s.d[d - 1];
        s.d[axes[k]] = g_dim_const(1);
        s.rank++;
        target(p, "unsqueeze.default");
        pt_arg(p, "self", PT_POSITIONAL, "{\"as_tensor\": {\"name\": \"%s\"}}", x);
        pt_arg(p, "dim", PT_POSITIONAL, "{\"as_int\": %lld}", (long long)axes[k]);
        const char *name = k == n->a.n_ints - 1 ? out_name(p, n, 0) : pt_fresh(p, "unsqueeze");
        pt_node_end_tensor(p, name, y->dtype, &s);
        x = name;
    }
}

static void emit_cast(pt_printer *p, const g_node *n)
{
    target(p, "to.dtype");
    pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
    pt_arg(p, "dtype", PT_POSITIONAL, "{\"as_scalar_type\": %d}", pt_scalar_type(n->a.to));
    end_node(p, n);
}

static void emit_reduce(pt_printer *p, const g_node *n)
{
    char dims[200];
    ints_text(dims, sizeof dims, n->a.ints, n->a.n_ints);
    target(p, n->op == G_REDUCE_MEAN  ? "mean.dim"
              : n->op == G_REDUCE_MAX ? "amax.default"
                                      : "sum.dim_IntList");
    pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
    pt_arg(p, "dim", PT_POSITIONAL, "{\"as_ints\": [%s]}", dims);
    pt_arg(p, "keepdim", PT_POSITIONAL, "{\"as_bool\": %s}", n->a.keepdims ? "true" : "false");
    end_node(p, n);
}

static void arange(pt_printer *p, g_dim start, g_dim end, g_dim step, ferry_dtype dt)
{
    target(p, "arange.start_step");
    pt_arg_symint(p, "start", PT_POSITIONAL, start);
    pt_arg_symint(p, "end", PT_POSITIONAL, end);
    pt_arg_symint(p, "step", PT_POSITIONAL, step);
    pt_arg(p, "dtype", PT_KEYWORD, "{\"as_scalar_type\": %d}", pt_scalar_type(dt));
    pt_arg(p, "device", PT_KEYWORD, "{\"as_device\": {\"type\": \"cpu\", \"index\": null}}");
    pt_arg(p, "pin_memory", PT_KEYWORD, "{\"as_bool\": false}");
}

static void emit_range(pt_printer *p, const g_node *n)
{
    const pt_ints *s = &p->ints[n->in[0]], *l = &p->ints[n->in[1]], *d = &p->ints[n->in[2]];
    const g_value *y = val(p, n->out[0]);
    int length = pt_range_offset_length(p->g, n, p->ints);
    if (length != G_NONE && !s->known) {
        /* from a position held in a tensor: arange(n) + position */
        const char *start = pt_tensor(p, n->in[0]);
        const char *name = pt_fresh(p, "arange");
        if (!start || !name)
            return;
        arange(p, g_dim_const(0), p->ints[length].d[0], g_dim_const(1), y->dtype);
        pt_node_end_tensor(p, name, y->dtype, &y->shape);
        target(p, "add.Tensor");
        pt_arg(p, "self", PT_POSITIONAL, "{\"as_tensor\": {\"name\": \"%s\"}}", name);
        pt_arg_tensor(p, "other", n->in[0], PT_POSITIONAL);
        end_node(p, n);
        return;
    }
    if (!s->known || !l->known || !d->known) {
        pt_fail(p, FERRY_ERR_UNSUPPORTED, "pt2: the bounds of '%s' come from data, not shapes, "
                "so torch cannot size it", n->name);
        return;
    }
    arange(p, s->d[0], l->d[0], d->d[0], y->dtype);
    end_node(p, n);
}

static void emit_topk(pt_printer *p, const g_node *n)
{
    target(p, "topk.default");
    pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
    pt_arg(p, "k", PT_POSITIONAL, "{\"as_int\": %lld}", (long long)n->a.ints[0]);
    pt_arg(p, "dim", PT_POSITIONAL, "{\"as_int\": %lld}", (long long)n->a.axis);
    const char *names[2] = {out_name(p, n, 0), out_name(p, n, 1)};
    ferry_dtype dts[2] = {val(p, n->out[0])->dtype, val(p, n->out[1])->dtype};
    g_shape shapes[2] = {val(p, n->out[0])->shape, val(p, n->out[1])->shape};
    pt_node_end_tensors(p, pt_fresh(p, "topk"), 2, names, dts, shapes);
}

static void emit_gather_elements(pt_printer *p, const g_node *n)
{
    target(p, "gather.default");
    pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
    pt_arg(p, "dim", PT_POSITIONAL, "{\"as_int\": %lld}", (long long)n->a.axis);
    pt_arg_tensor(p, "index", n->in[1], PT_POSITIONAL);
    end_node(p, n);
}

static void emit_scatter(pt_printer *p, const g_node *n)
{
    target(p, n->op == G_SCATTER_ADD ? "scatter_add.default" : "scatter.src");
    pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
    pt_arg(p, "dim", PT_POSITIONAL, "{\"as_int\": %lld}", (long long)n->a.axis);
    pt_arg_tensor(p, "index", n->in[1], PT_POSITIONAL);
    pt_arg_tensor(p, "src", n->in[2], PT_POSITIONAL);
    end_node(p, n);
}

static void emit_simple_axis(pt_printer *p, const g_node *n, const char *op)
{
    target(p, op);
    pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
    pt_arg(p, "dim", PT_POSITIONAL, "{\"as_int\": %lld}", (long long)n->a.axis);
    end_node(p, n);
}

static void emit_where(pt_printer *p, const g_node *n)
{
    target(p, "where.self");
    pt_arg_tensor(p, "condition", n->in[0], PT_POSITIONAL);
    pt_arg_tensor(p, "self", n->in[1], PT_POSITIONAL);
    pt_arg_tensor(p, "other", n->in[2], PT_POSITIONAL);
    end_node(p, n);
}

/* an infinite bound is an absent one: None */
static void emit_clip(pt_printer *p, const g_node *n)
{
    target(p, "clamp.default");
    pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
    if (n->a.lo == -INFINITY)
        pt_arg(p, "min", PT_POSITIONAL, "{\"as_none\": true}");
    else
        arg_number(p, "min", PT_POSITIONAL, n->in[0], n->a.lo);
    if (n->a.hi == INFINITY)
        pt_arg(p, "max", PT_POSITIONAL, "{\"as_none\": true}");
    else
        arg_number(p, "max", PT_POSITIONAL, n->in[0], n->a.hi);
    end_node(p, n);
}

/* aten.pad(x, pad, "constant", value): pad lists (begin, end) pairs from the last axis back,
 * as F.pad takes them; the leading axes without padding are left off (one pair at least). */
static void pad_node(pt_printer *p, const char *x, int rank, const int64_t *begin,
                     const int64_t *end, double value)
{
    int pairs = 1;
    for (int i = 0; i < rank; i++)
        if (begin[i] || end[i]) {
            pairs = rank - i;
            break;
        }
    char list[2 * G_MAX_RANK * 24] = "";
    size_t len = 0;
    for (int k = 0; k < pairs && len < sizeof list; k++) {
        int axis = rank - 1 - k;
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%lld, %lld", k ? ", " : "",
                                (long long)begin[axis], (long long)end[axis]);
    }
    target(p, "pad.default");
    pt_arg(p, "self", PT_POSITIONAL, "{\"as_tensor\": {\"name\": \"%s\"}}", x);
    pt_arg(p, "pad", PT_POSITIONAL, "{\"as_ints\": [%s]}", list);
    pt_arg(p, "mode", PT_POSITIONAL, "{\"as_string\": \"constant\"}");
    pt_arg(p, "value", PT_POSITIONAL, "{\"as_float\": %.17g}", value);
}

static void emit_pad(pt_printer *p, const g_node *n)
{
    const char *x = pt_tensor(p, n->in[0]);
    if (!x)
        return;
    pad_node(p, x, val(p, n->in[0])->shape.rank, n->a.pad_begin, n->a.pad_end, n->a.pad_value);
    end_node(p, n);
}

/* aten.conv1d/2d/3d, as torch.export records nn.Conv1d/2d/3d. Their padding is one extent per
 * axis on both sides: unequal pads are an aten.pad of zeros first, then no padding (what
 * torch's own convolution does for padding="same" with an even kernel). */
static void emit_conv(pt_printer *p, const g_node *n)
{
    const g_conv_opts *o = n->a.conv;
    const g_value *xv = val(p, n->in[0]);
    const char *x = pt_tensor(p, n->in[0]);
    if (!x)
        return;
    int64_t padding[G_CONV_MAX_SPATIAL];
    bool even = true;
    for (int i = 0; i < o->spatial; i++) {
        even &= o->pads_begin[i] == o->pads_end[i];
        padding[i] = o->pads_begin[i];
    }
    if (!even) {
        int64_t begin[G_MAX_RANK] = {0}, end[G_MAX_RANK] = {0};
        g_shape padded = xv->shape;
        for (int i = 0; i < o->spatial; i++) {
            begin[2 + i] = o->pads_begin[i];
            end[2 + i] = o->pads_end[i];
            padded.d[2 + i] = g_dim_add(padded.d[2 + i],
                                        g_dim_const(o->pads_begin[i] + o->pads_end[i]));
            padding[i] = 0;
        }
        const char *name = pt_fresh(p, "pad");
        if (!name)
            return;
        pad_node(p, x, xv->shape.rank, begin, end, 0.0);
        pt_node_end_tensor(p, name, xv->dtype, &padded);
        x = name;
    }
    char op[24], strides[80], pads[80], dilations[80];
    snprintf(op, sizeof op, "conv%dd.default", o->spatial);
    ints_text(strides, sizeof strides, o->strides, o->spatial);
    ints_text(pads, sizeof pads, padding, o->spatial);
    ints_text(dilations, sizeof dilations, o->dilations, o->spatial);
    target(p, op);
    pt_arg(p, "input", PT_POSITIONAL, "{\"as_tensor\": {\"name\": \"%s\"}}", x);
    pt_arg_tensor(p, "weight", n->in[1], PT_POSITIONAL);
    if (n->n_in > 2 && n->in[2] != G_NONE)
        pt_arg_tensor(p, "bias", n->in[2], PT_POSITIONAL);
    else
        pt_arg(p, "bias", PT_POSITIONAL, "{\"as_none\": true}");
    pt_arg(p, "stride", PT_POSITIONAL, "{\"as_ints\": [%s]}", strides);
    pt_arg(p, "padding", PT_POSITIONAL, "{\"as_ints\": [%s]}", pads);
    pt_arg(p, "dilation", PT_POSITIONAL, "{\"as_ints\": [%s]}", dilations);
    pt_arg(p, "groups", PT_POSITIONAL, "{\"as_int\": %lld}", (long long)o->groups);
    end_node(p, n);
}

const g_value *pt2_tied_head_weight(const g_graph *g, const g_node *n, char *key,
                                    size_t size)
{
    if (n->op != G_LINEAR || n->n_in < 2 || n->in[1] < 0 || g_node_role(g, n) != GM_ROLE_HEAD)
        return NULL;
    const g_module *m = g_module_at(g, n->name, strlen(n->name));
    snprintf(key, size, "%s.weight", m->fqn);
    const g_value *w = &g->values[n->in[1]];
    return w->kind == GV_WEIGHT && strcmp(w->name, key) != 0 ? w : NULL;
}

static void emit_linear(pt_printer *p, const g_node *n)
{
    /* The head of a tied checkpoint reads the embedding table: as transformers' module does,
     * through its own parameter (lm_head.weight), one storage with the embedding's. */
    char key[256];
    bool tied_head = pt2_tied_head_weight(p->g, n, key, sizeof key) != NULL;
    const char *tied = tied_head ? pt_tied_head(p, n->in[1], key) : NULL;
    if (tied_head && !tied)
        return;
    target(p, "linear.default");
    pt_arg_tensor(p, "input", n->in[0], PT_POSITIONAL);
    if (tied)
        pt_arg(p, "weight", PT_POSITIONAL, "{\"as_tensor\": {\"name\": \"%s\"}}", tied);
    else
        pt_arg_tensor(p, "weight", n->in[1], PT_POSITIONAL);
    if (n->n_in > 2 && n->in[2] != G_NONE)
        pt_arg_tensor(p, "bias", n->in[2], PT_POSITIONAL);
    end_node(p, n);
}

static void emit_embedding(pt_printer *p, const g_node *n)
{
    target(p, "embedding.default");
    pt_arg_tensor(p, "weight", n->in[0], PT_POSITIONAL);
    pt_arg_tensor(p, "indices", n->in[1], PT_POSITIONAL);
    end_node(p, n);
}

static void emit_layer_norm(pt_printer *p, const g_node *n)
{
    const g_shape *s = &val(p, n->in[1])->shape;
    target(p, "layer_norm.default");
    pt_arg_tensor(p, "input", n->in[0], PT_POSITIONAL);
    pt_arg_symints(p, "normalized_shape", PT_POSITIONAL, s->d, s->rank);
    pt_arg_tensor(p, "weight", n->in[1], PT_POSITIONAL);
    if (n->n_in > 2 && n->in[2] != G_NONE)
        pt_arg_tensor(p, "bias", n->in[2], PT_POSITIONAL);
    else
        pt_arg(p, "bias", PT_POSITIONAL, "{\"as_none\": true}");
    pt_arg(p, "eps", PT_POSITIONAL, "{\"as_float\": %.17g}", n->a.eps);
    end_node(p, n);
}

static const g_ext_attr *ext_attr(const g_extern *e, const char *name)
{
    for (int i = 0; i < e->n_attr; i++)
        if (strcmp(e->attr[i].name, name) == 0)
            return &e->attr[i];
    return NULL;
}

/* a static cache's write into the caller's tensor (torch_target.c) */
static void emit_index_copy(pt_printer *p, const g_node *n)
{
    const g_ext_attr *dim = ext_attr(n->a.ext, "dim");
    target(p, "index_copy_.default");
    pt_arg_tensor(p, "self", n->in[0], PT_POSITIONAL);
    pt_arg(p, "dim", PT_POSITIONAL, "{\"as_int\": %lld}", (long long)(dim ? dim->i : 0));
    pt_arg_tensor(p, "index", n->in[1], PT_POSITIONAL);
    pt_arg_tensor(p, "source", n->in[2], PT_POSITIONAL);
    end_node(p, n);
}

static void emit_extern(pt_printer *p, const g_node *n)
{
    const g_extern *e = n->a.ext;
    if (strcmp(e->domain, PT_ATEN) == 0 && strcmp(e->op_type, PT_INDEX_COPY) == 0 &&
        n->n_in == 3) {
        emit_index_copy(p, n);
        return;
    }
    if (strcmp(e->domain, PT_ATEN) != 0 || strcmp(e->op_type, PT_SDPA) != 0 || n->n_in != 4) {
        pt_fail(p, FERRY_ERR_INTERNAL, "pt2: node '%s' is %s.%s, which the torch target never "
                "makes", n->name, e->domain, e->op_type);
        return;
    }
    const g_ext_attr *scale = ext_attr(e, "scale"), *gqa = ext_attr(e, "enable_gqa");
    target(p, "scaled_dot_product_attention.default");
    pt_arg_tensor(p, "query", n->in[0], PT_POSITIONAL);
    pt_arg_tensor(p, "key", n->in[1], PT_POSITIONAL);
    pt_arg_tensor(p, "value", n->in[2], PT_POSITIONAL);
    if (n->in[3] == G_NONE) /* attention without a mask: every key visible */
        pt_arg(p, "attn_mask", PT_POSITIONAL, "{\"as_none\": true}");
    else
        pt_arg_tensor(p, "attn_mask", n->in[3], PT_POSITIONAL);
    if (scale)
        pt_arg(p, "scale", PT_KEYWORD, "{\"as_float\": %.17g}", scale->f);
    if (gqa && gqa->i)
        pt_arg(p, "enable_gqa", PT_KEYWORD, "{\"as_bool\": true}");
    end_node(p, n);
}

/* ---- integers made tensors ---- */

static const char *full(pt_printer *p, g_dim d, ferry_dtype dt)
{
    const char *name = pt_fresh(p, "full");
    target(p, "full.default");
    pt_arg(p, "size", PT_POSITIONAL, "{\"as_ints\": []}");
    pt_arg_symint(p, "fill_value", PT_POSITIONAL, d);
    pt_arg(p, "dtype", PT_KEYWORD, "{\"as_scalar_type\": %d}", pt_scalar_type(dt));
    pt_arg(p, "device", PT_KEYWORD, "{\"as_device\": {\"type\": \"cpu\", \"index\": null}}");
    pt_arg(p, "pin_memory", PT_KEYWORD, "{\"as_bool\": false}");
    g_shape scalar = {0};
    pt_node_end_tensor(p, name, dt, &scalar);
    return name;
}

const char *pt_materialize(pt_printer *p, int v)
{
    const pt_ints *r = &p->ints[v];
    const g_value *x = val(p, v);
    if (r->scalar)
        return full(p, r->d[0], x->dtype);
    char list[G_MAX_RANK * 200] = "";
    size_t len = 0;
    for (int i = 0; i < r->n; i++) {
        const char *e = full(p, r->d[i], x->dtype);
        if (!e)
            return NULL;
        len += (size_t)snprintf(list + len, sizeof list - len, "%s{\"name\": \"%s\"}",
                                i ? ", " : "", e);
    }
    char base[200];
    snprintf(base, sizeof base, "%s", x->name);
    const char *name = pt_fresh(p, base);
    target(p, "stack.default");
    pt_arg(p, "tensors", PT_POSITIONAL, "{\"as_tensors\": [%s]}", list);
    pt_arg(p, "dim", PT_POSITIONAL, "{\"as_int\": 0}");
    pt_node_end_tensor(p, name, x->dtype, &x->shape);
    return name;
}

/* ---- dispatch ---- */

void pt_emit_node(pt_printer *p, size_t i)
{
    const g_node *n = &p->g->nodes[i];
    /* shape arithmetic: SymInts where read, a tensor only if a tensor op reads it */
    if (n->op == G_SHAPE_OF || p->ints[n->out[0]].known)
        return;
    if (BINARY[n->op]) {
        emit_binary(p, n);
        return;
    }
    if (UNARY[n->op]) {
        emit_unary(p, n);
        return;
    }
    switch (n->op) {
    case G_WHERE: emit_where(p, n); break;
    case G_MATMUL: emit_matmul(p, n); break;
    case G_GATHER: emit_gather(p, n); break;
    case G_RESHAPE: emit_reshape(p, n); break;
    case G_TRANSPOSE: emit_transpose(p, n); break;
    case G_CONCAT: emit_concat(p, n); break;
    case G_SLICE: emit_slice(p, n); break;
    case G_UNSQUEEZE: emit_unsqueeze(p, n); break;
    case G_CAST: emit_cast(p, n); break;
    case G_SOFTMAX: emit_simple_axis(p, n, "softmax.int"); break;
    case G_CUMSUM: emit_simple_axis(p, n, "cumsum.default"); break;
    case G_REDUCE_MEAN: case G_REDUCE_MAX: case G_REDUCE_SUM: emit_reduce(p, n); break;
    case G_RANGE: emit_range(p, n); break;
    case G_EXPAND: emit_expand(p, n); break;
    case G_SCATTER_ELEMENTS: case G_SCATTER_ADD: emit_scatter(p, n); break;
    case G_GATHER_ELEMENTS: emit_gather_elements(p, n); break;
    case G_TOPK: emit_topk(p, n); break;
    case G_CLIP: emit_clip(p, n); break;
    case G_PAD: emit_pad(p, n); break;
    case G_CONV: emit_conv(p, n); break;
    case G_LINEAR: emit_linear(p, n); break;
    case G_EMBEDDING: emit_embedding(p, n); break;
    case G_LAYER_NORM: emit_layer_norm(p, n); break;
    case G_EXTERN: emit_extern(p, n); break;
    default:
        pt_fail(p, FERRY_ERR_UNSUPPORTED, "pt2: node '%s' (%s) has no aten form in ferry's torch "
                "target", n->name, g_op_name(n->op));
    }
}

/* Whether value `out` is input `in` written in place by aten.index_copy_. */
static bool written_into(const g_graph *g, int out, int in)
{
    const g_value *x = &g->values[out];
    if (x->kind != GV_NODE)
        return false;
    const g_node *n = &g->nodes[x->producer];
    return n->op == G_EXTERN && strcmp(n->a.ext->op_type, PT_INDEX_COPY) == 0 && n->in[0] == in;
}

void pt_emit_mutations(pt_printer *p)
{
    const g_graph *g = p->g;
    for (size_t i = 0; i < g->n_states && p->st == FERRY_OK; i++) {
        const g_state *s = &g->states[i];
        if (s->form != GS_MUTATED || written_into(g, s->out, s->in))
            continue;
        /* the new value copied into the caller's tensor, after every read of the old one */
        const g_value *x = &g->values[s->in];
        char base[200];
        snprintf(base, sizeof base, "copy_%s", x->name);
        const char *name = pt_fresh(p, base);
        target(p, "copy_.default");
        pt_arg_tensor(p, "self", s->in, PT_POSITIONAL);
        pt_arg_tensor(p, "src", s->out, PT_POSITIONAL);
        pt_node_end_tensor(p, name, x->dtype, &x->shape);
    }
}
