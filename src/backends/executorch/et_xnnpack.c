/* et_xnnpack.c — what runs in the XNNPACK delegate (backend "xnnpack", docs/pte-format.md
 * §7): each call below becomes nodes of the open partition (et_xnn_graph.c), so a run of them
 * (a norm and the linears it feeds, the feed-forward and its residual) is one graph the
 * program calls once.
 *
 *   linear      XNNFullyConnected; its weight [out, in] (the checkpoint's layout, which XNNPACK
 *               packs at load time) and bias named data keyed by the weight's name, so a weight
 *               two graphs read (a tied head) is stored once, and where a portable kernel reads
 *               it too (the embedding a tied head shares) the named segment is that constant's
 *               bytes
 *   add, sub, mul, div, maximum, minimum: the binary node, with numpy broadcasting; a number
 *               operand a one-element constant in the blob
 *   sigmoid, tanh, exp, log, sqrt, neg, abs, floor, sin, cos: the unary node; reciprocal a
 *               division of one; silu sigmoid and a product; pow 2, 0.5 and -0.5 square, square
 *               root and reciprocal square root
 *   mean        over the last axis, kept: a fully connected layer whose filter is one row of
 *               1/n (XNNPACK has no reduction over a last axis)
 *   softmax     over the last axis
 *   permute     XNNStaticTranspose
 *   reshape, unsqueeze: XNNStaticReshape, where at most one extent of the result varies (its
 *               0 in the new shape, which XNNPACK infers)
 *   cat         of 2 to 5 tensors
 *   slice       where its input is of fixed extents (XNNPACK's slice is static)
 *   matmul      XNNBatchMatrixMultiply, ranks 3 to 6, a batch extent of 1 broadcast
 * Every operand and result fp32 of rank 1 to 6, or the call stays a portable kernel.
 *
 * An int4 weight (ferry's quantizer: symmetric blocks along `in`) is XNNPACK's 8da4w, as
 * ExecuTorch's own int4 recipe lowers it: an XNNConvert quantizes the activations per token to
 * qdint8 (once per tensor, however many linears read it), and the fully connected layer reads
 * the qbint4 filter, whose codes are ferry's packing as it is (code = value + 8, element 2j in
 * the low nibble, row-major [out, in]) and whose block scales are bf16, the one type XNNPACK
 * keeps them in, and positive, as it requires: the weight's recipe with bf16 positive scales,
 * its codes rounded against them (quant/rtn.h, RTN_SYMMETRIC_POSITIVE). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/executorch/et_calls.h"
#include "util/grow.h"

/* The named-data index of `want` (added on first use); -1 on failure. */
static int named(et_program *p, et_data want)
{
    for (size_t i = 0; i < p->n_named; i++)
        if (et_data_equal(&p->named[i], &want))
            return (int)i;
    const char *name = p->g->values[want.value].name;
    for (size_t i = 0; i < p->n_named; i++)
        if (p->named[i].value != want.value &&
            strcmp(p->g->values[p->named[i].value].name, name) == 0)
            return et_fail(p, FERRY_ERR_INTERNAL, "two weights named '%s'", name), -1;
    et_data *n = fy_grow(p->named, &p->cap_named, p->n_named + 1, sizeof *n);
    if (!n)
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory"), -1;
    p->named = n;
    n[p->n_named] = want;
    return (int)p->n_named++;
}

static int named_value(et_program *p, int v)
{
    return named(p, (et_data){.value = v});
}

/* Graph value v: a weight or constant of `rank` dims, of `dt` (a quantized weight: its scales
 * and what it dequantizes to), named. */
static bool constant_of(const et_program *p, int v, int rank, ferry_dtype dt)
{
    if (v < 0 || (size_t)v >= p->g->n_values)
        return false;
    const g_value *x = &p->g->values[v];
    return (x->kind == GV_WEIGHT || x->kind == GV_CONST) && x->dtype == dt &&
           x->shape.rank == rank && x->name;
}

static bool quantized(const et_program *p, int v)
{
    return v >= 0 && (size_t)v < p->g->n_values && p->g->values[v].kind == GV_WEIGHT &&
           p->g->values[v].weight.quant.bits;
}

/* The filter of int4 weight `v` as XNNPACK takes it, in partition x: its recipe with bf16
 * positive scales, codes and scales named data. */
static int int4_filter(et_program *p, et_partition *x, int v, int64_t out_ch, int64_t in_ch)
{
    const g_value *w = &p->g->values[v];
    const w_quant *q = &w->weight.quant;
    if (q->bits != 4 || !q->symmetric)
        return et_fail(p, FERRY_ERR_UNSUPPORTED, "weight '%s': XNNPACK's int4 takes symmetric "
                       "4-bit blocks (ferry's default quantizer), not %s %d-bit ones", w->name,
                       q->symmetric ? "symmetric" : "asymmetric", q->bits), -1;
    if (in_ch % q->block)
        return et_fail(p, FERRY_ERR_UNSUPPORTED, "weight '%s': its %lld inputs are not whole "
                       "blocks of %d, which XNNPACK's int4 needs; pick a block size that "
                       "divides them (--block-size)", w->name, (long long)in_ch, q->block), -1;
    et_data codes = {.value = v, .part_of_quantized = true, .recipe = w->weight,
                      .part = W_PART_CODES};
    codes.recipe.dtype = FERRY_BF16;
    codes.recipe.quant.packing = W_PACK_ROWS;
    codes.recipe.quant.positive_scales = true;
    et_data scales = codes;
    scales.part = W_PART_SCALES;
    int code_data = named(p, codes), scale_data = named(p, scales);
    int64_t dims[2] = {out_ch, in_ch};
    int f = code_data < 0 || scale_data < 0
                ? -1 : et_xnn_value(p, x, XNN_T_QBINT4, 2, dims, code_data);
    if (f >= 0) {
        x->values[f].group = q->block;
        x->values[f].scales = scale_data;
    }
    return f;
}

/* Tensor value `in` of x quantized per token (qdint8), made once. */
static int per_token_int8(et_program *p, et_partition *x, int in)
{
    for (size_t i = 0; i < x->n_values; i++)
        if (x->values[i].type == XNN_T_QDINT8 && x->values[i].quantizes == in)
            return (int)i;
    xnn_value v = x->values[in];
    int q = et_xnn_value(p, x, XNN_T_QDINT8, v.rank, v.dims, -1);
    if (q < 0)
        return -1;
    x->values[q].quantizes = in;
    et_xnn_node(p, x, XNN_CONVERT, &in, 1, q, NULL);
    return q;
}

/* A tensor of the program XNNPACK takes: fp32, rank 1 to 6, not a constant. */
static bool xnn_tensor(const et_program *p, int ev)
{
    if (ev < 0)
        return false;
    const et_value *t = &p->values[ev];
    return t->kind == ET_TENSOR && t->dtype == FERRY_F32 && t->rank >= 1 &&
           t->rank <= XNN_MAX_DIMS && !t->constant;
}

bool et_xnn_linear(et_program *p, int x, int weight, int bias, int y)
{
    if (p->st != FERRY_OK || x < 0 || y < 0)
        return false;
    bool q = quantized(p, weight);
    const char *wname = weight >= 0 ? p->g->values[weight].name : "?";
    if (!p->xnnpack && !q)
        return false;
    if (!p->xnnpack)
        return et_fail(p, FERRY_ERR_UNSUPPORTED, "weight '%s' is quantized, which only the "
                       "XNNPACK delegate runs (--et-backend xnnpack)", wname), false;
    et_value xv = p->values[x], yv = p->values[y];
    bool fits = (q || constant_of(p, weight, 2, FERRY_F32)) && xnn_tensor(p, x) &&
                xnn_tensor(p, y) && yv.rank == xv.rank;
    const g_value *w = fits ? &p->g->values[weight] : NULL;
    int64_t out_ch = 0, in_ch = 0;
    fits = fits && g_dim_is_const(w->shape.d[0], &out_ch) &&
           g_dim_is_const(w->shape.d[1], &in_ch) && xv.sizes[xv.rank - 1] == in_ch &&
           yv.sizes[yv.rank - 1] == out_ch;
    fits = fits && (bias < 0 || (constant_of(p, bias, 1, FERRY_F32) &&
                                 g_dim_eq(p->g->values[bias].shape.d[0],
                                          g_dim_const(out_ch))));
    if (!fits && q)
        return et_fail(p, FERRY_ERR_UNSUPPORTED, "weight '%s' is quantized, and its linear is "
                       "not one XNNPACK's int4 runs (fp32 activations and bias)", wname), false;
    if (!fits)
        return false;
    et_partition *part = et_xnn_open(p, &x, 1);
    if (!part)
        return false;
    int in[3] = {et_xnn_tensor(p, part, x), -1, -1};
    if (q) {
        in[1] = int4_filter(p, part, weight, out_ch, in_ch);
        in[0] = per_token_int8(p, part, in[0]);
    } else {
        int64_t dims[2] = {out_ch, in_ch};
        in[1] = et_xnn_value(p, part, XNN_T_FP32, 2, dims, named_value(p, weight));
    }
    if (bias >= 0) {
        int64_t dims[1] = {out_ch};
        in[2] = et_xnn_value(p, part, XNN_T_FP32, 1, dims, named_value(p, bias));
    }
    int out = et_xnn_tensor(p, part, y);
    if (p->st != FERRY_OK)
        return false;
    et_xnn_node(p, part, XNN_FULLY_CONNECTED, in, 3, out, NULL);
    p->n_xnn_linears += p->g->values[weight].kind == GV_WEIGHT;
    p->n_int4_linears += q;
    return p->st == FERRY_OK;
}

/* ---- elementwise calls, means, softmax ---- */

/* The most bytes of a graph constant a blob holds itself. */
#define XNN_INLINE_MAX 4096

/* One operand of a call, before anything is made for it: a number, a weight or constant of
 * the graph, or a tensor of the program. */
typedef struct operand {
    enum { OP_NUMBER, OP_WEIGHT, OP_CONST, OP_TENSOR } kind;
    double number;
    int value;               /* OP_WEIGHT, OP_CONST: the graph value; OP_TENSOR: the EValue */
} operand;

/* Argument `name` of f as an operand XNNPACK takes; false where it is none. */
static bool operand_of(et_sink *k, const call_frame *f, const char *name, operand *o)
{
    et_program *p = k->p;
    const call_arg *a = ek_find(f, name);
    if (!a)
        return false;
    if (a->type == A_INT || a->type == A_FLOAT) {
        *o = (operand){.kind = OP_NUMBER, .number = a->type == A_INT ? (double)a->i : a->d};
        return true;
    }
    if (a->type != A_TENSOR || a->t == ATEN_NONE)
        return false;
    if (a->t >= 0 && (p->g->values[a->t].kind == GV_WEIGHT ||
                      p->g->values[a->t].kind == GV_CONST)) {
        const g_value *v = &p->g->values[a->t];
        if (v->dtype != FERRY_F32 || v->shape.rank > XNN_MAX_DIMS || !v->name)
            return false;
        for (int i = 0; i < v->shape.rank; i++)
            if (!g_dim_is_const(v->shape.d[i], NULL))
                return false;
        if (v->kind == GV_CONST)
            *o = (operand){.kind = OP_CONST, .value = a->t};
        else if (v->kind == GV_WEIGHT && !v->weight.quant.bits && v->shape.rank >= 1)
            *o = (operand){.kind = OP_WEIGHT, .value = a->t};
        else
            return false;
        return true;
    }
    int ev = ek_ref_value(k, a->t);
    if (!xnn_tensor(p, ev))
        return false;
    *o = (operand){.kind = OP_TENSOR, .value = ev};
    return true;
}

/* Operand o as a value of partition x. */
static int operand_value(et_program *p, et_partition *x, const operand *o)
{
    int64_t one = 1;
    if (o->kind == OP_NUMBER) {
        float f = (float)o->number;
        return et_xnn_floats(p, x, &f, 1, 1, &one);
    }
    if (o->kind == OP_TENSOR)
        return et_xnn_tensor(p, x, o->value);
    const g_value *v = &p->g->values[o->value];
    int64_t dims[XNN_MAX_DIMS];
    size_t n = 1;
    for (int i = 0; i < v->shape.rank; i++) {
        g_dim_is_const(v->shape.d[i], &dims[i]);
        n *= (size_t)dims[i];
    }
    /* a weight, or a constant too large to copy into each graph that reads it: named data */
    if (o->kind == OP_WEIGHT || (v->shape.rank && n * sizeof(float) > XNN_INLINE_MAX))
        return et_xnn_value(p, x, XNN_T_FP32, v->shape.rank, dims,
                            named_value(p, o->value));
    if (!v->data || v->nbytes != n * sizeof(float))
        return et_fail(p, FERRY_ERR_INTERNAL, "constant '%s' holds no data", v->name), -1;
    return v->shape.rank ? et_xnn_floats(p, x, v->data, n, v->shape.rank, dims)
                         : et_xnn_floats(p, x, v->data, 1, 1, &one);
}

/* out = kind(a, b), or kind(a) where b is NULL */
static bool xnn_elementwise(et_program *p, xnn_kind kind, const operand *a, const operand *b,
                            int out)
{
    int reads[2], n = 0;
    if (a->kind == OP_TENSOR)
        reads[n++] = a->value;
    if (b && b->kind == OP_TENSOR)
        reads[n++] = b->value;
    et_partition *x = et_xnn_open(p, reads, n);
    if (!x)
        return false;
    int in[2] = {operand_value(p, x, a), b ? operand_value(p, x, b) : -1};
    int y = et_xnn_tensor(p, x, out);
    if (p->st != FERRY_OK)
        return false;
    et_xnn_node(p, x, kind, in, b ? 2 : 1, y, NULL);
    return p->st == FERRY_OK;
}

static const struct {
    const char *op;
    xnn_kind kind;
} BINARY[] = {
    {"add.Tensor", XNN_ADD}, {"sub.Tensor", XNN_SUBTRACT}, {"mul.Tensor", XNN_MULTIPLY},
    {"div.Tensor", XNN_DIV}, {"maximum.default", XNN_MAXIMUM},
    {"minimum.default", XNN_MINIMUM},
}, UNARY[] = {
    {"sigmoid.default", XNN_SIGMOID}, {"tanh.default", XNN_TANH}, {"exp.default", XNN_EXP},
    {"log.default", XNN_LOG}, {"sqrt.default", XNN_SQUARE_ROOT},
    {"neg.default", XNN_NEGATE}, {"abs.default", XNN_ABS}, {"floor.default", XNN_FLOOR},
    {"sin.default", XNN_SIN}, {"cos.default", XNN_COS},
};

/* A softmax over the last axis, or a mean over it that keeps it: their one tensor operand. */
static bool last_axis(et_sink *k, const call_frame *f, const char *dim_arg, operand *x)
{
    const call_arg *dim = ek_find(f, dim_arg);
    if (!operand_of(k, f, "self", x) || x->kind != OP_TENSOR || !dim)
        return false;
    int rank = k->p->values[x->value].rank;
    int64_t d = dim->type == A_INTS && dim->n == 1 ? dim->ints[0]
                : dim->type == A_INT ? dim->i : INT64_MIN;
    return d == -1 || d == rank - 1;
}

/* ---- moving data: transposes, reshapes, concatenations, slices, batched matmuls ---- */

/* out = kind(the tensors `in`), the node's other fields from `with` */
static bool xnn_tensors_node(et_program *p, xnn_kind kind, const int *in, int n, int out,
                             const xnn_node *with)
{
    et_partition *x = et_xnn_open(p, in, n);
    if (!x)
        return false;
    int v[XNN_MAX_NODE_INPUTS];
    for (int i = 0; i < n; i++)
        v[i] = et_xnn_tensor(p, x, in[i]);
    int y = et_xnn_tensor(p, x, out);
    if (p->st != FERRY_OK)
        return false;
    et_xnn_node(p, x, kind, v, n, y, with);
    return p->st == FERRY_OK;
}

/* the g_shape of out (its graph value's, or the call's temporary's) */
static const g_shape *shape_of_out(et_sink *k, int out)
{
    int v = k->p->values[out].graph_value;
    return v >= 0 ? &k->p->g->values[v].shape : &k->out_shapes[0];
}

/* A reshape to the extents of `out`: XNNPACK infers at most one (a 0 in the new shape). */
static bool xnn_reshape(et_sink *k, int in, int out)
{
    const g_shape *s = shape_of_out(k, out);
    xnn_node with = {.n_dims = s->rank};
    int inferred = 0;
    for (int i = 0; i < s->rank; i++) {
        if (!g_dim_is_const(s->d[i], &with.dims[i]))
            with.dims[i] = 0, inferred++;
        else if (with.dims[i] <= 0)
            return false;
    }
    return inferred <= 1 && xnn_tensor(k->p, in) &&
           xnn_tensors_node(k->p, XNN_STATIC_RESHAPE, &in, 1, out, &with);
}

static bool xnn_permute(et_sink *k, const call_frame *f, int in, int out)
{
    const call_arg *dims = ek_find(f, "dims");
    int rank = xnn_tensor(k->p, in) ? k->p->values[in].rank : 0;
    if (!dims || dims->type != A_INTS || dims->n != rank || !rank)
        return false;
    xnn_node with = {.n_dims = rank};
    for (int i = 0; i < rank; i++) {
        int64_t d = dims->ints[i] < 0 ? dims->ints[i] + rank : dims->ints[i];
        if (d < 0 || d >= rank)
            return false;
        with.dims[i] = d;
    }
    return xnn_tensors_node(k->p, XNN_STATIC_TRANSPOSE, &in, 1, out, &with);
}

static bool xnn_concat(et_sink *k, const call_frame *f, int out)
{
    static const xnn_kind KIND[] = {XNN_CONCATENATE2, XNN_CONCATENATE3, XNN_CONCATENATE4,
                                    XNN_CONCATENATE5};
    const call_arg *list = ek_find(f, "tensors"), *dim = ek_find(f, "dim");
    int rank = k->p->values[out].rank;
    if (!list || list->type != A_TENSORS || list->optional || list->n < 2 ||
        list->n > XNN_MAX_NODE_INPUTS || !dim || dim->type != A_INT)
        return false;
    int in[XNN_MAX_NODE_INPUTS];
    for (int i = 0; i < list->n; i++) {
        if (list->list[i] >= 0 && (k->p->g->values[list->list[i]].kind == GV_WEIGHT ||
                                   k->p->g->values[list->list[i]].kind == GV_CONST))
            return false;
        in[i] = ek_ref_value(k, list->list[i]);
        if (!xnn_tensor(k->p, in[i]) || k->p->values[in[i]].rank != rank)
            return false;
    }
    int64_t axis = dim->i < 0 ? dim->i + rank : dim->i;
    if (axis < 0 || axis >= rank)
        return false;
    xnn_node with = {.axis = (int)axis};
    return xnn_tensors_node(k->p, KIND[list->n - 2], in, list->n, out, &with);
}

/* a slice whose input and output are of fixed extents: XNNPACK's slice is static */
static bool xnn_slice(et_sink *k, const call_frame *f, int in, int out)
{
    const call_arg *dim = ek_find(f, "dim"), *start = ek_find(f, "start"),
                   *step = ek_find(f, "step");
    const g_shape *so = shape_of_out(k, out);
    if (!xnn_tensor(k->p, in) || !dim || dim->type != A_INT || !start ||
        start->type != A_INT || (step && !(step->type == A_INT && step->i == 1)))
        return false;
    const et_value *x = &k->p->values[in];
    int rank = x->rank;
    int64_t axis = dim->i < 0 ? dim->i + rank : dim->i;
    if (x->dynamic || so->rank != rank || axis < 0 || axis >= rank)
        return false;
    xnn_node with = {.n_dims = rank};
    for (int i = 0; i < rank; i++) {
        if (!g_dim_is_const(so->d[i], &with.dims[rank + i]))
            return false;
        with.dims[i] = 0;
    }
    int64_t at = start->i < 0 ? start->i + x->sizes[axis] : start->i;
    if (at < 0 || at + with.dims[rank + axis] > x->sizes[axis])
        return false;
    with.dims[axis] = at;
    return xnn_tensors_node(k->p, XNN_STATIC_SLICE, &in, 1, out, &with);
}

/* a batched matmul of equal ranks (3 to 6), each batch extent equal or one of them 1 */
static bool xnn_matmul(et_sink *k, int a, int b, int out)
{
    et_program *p = k->p;
    if (!xnn_tensor(p, a) || !xnn_tensor(p, b))
        return false;
    const et_value *x = &p->values[a], *w = &p->values[b];
    int rank = x->rank;
    if (rank < 3 || w->rank != rank || p->values[out].rank != rank)
        return false;
    return xnn_tensors_node(p, XNN_BATCH_MATRIX_MULTIPLY, (const int[]){a, b}, 2, out, NULL);
}

/* A tensor argument of f that is no weight nor constant: its EValue; -1 otherwise. */
static int computed_tensor(et_sink *k, const call_frame *f, const char *name)
{
    const call_arg *a = ek_find(f, name);
    if (!a || a->type != A_TENSOR || a->t == ATEN_NONE)
        return -1;
    if (a->t >= 0 && (k->p->g->values[a->t].kind == GV_WEIGHT ||
                      k->p->g->values[a->t].kind == GV_CONST))
        return -1;
    return ek_ref_value(k, a->t);
}

bool et_xnn_call(et_sink *k, const call_frame *f, const int *outs)
{
    et_program *p = k->p;
    if (!p->xnnpack || p->st != FERRY_OK || !xnn_tensor(p, outs[0]))
        return false;
    operand a, b;
    for (size_t i = 0; i < sizeof BINARY / sizeof BINARY[0]; i++)
        if (strcmp(f->op, BINARY[i].op) == 0) {
            const call_arg *alpha = ek_find(f, "alpha");
            if ((alpha && !(alpha->type == A_INT ? alpha->i == 1
                            : alpha->type == A_FLOAT && alpha->d == 1)) ||
                !operand_of(k, f, "self", &a) || !operand_of(k, f, "other", &b) ||
                (a.kind == OP_NUMBER && b.kind == OP_NUMBER))
                return false;
            return xnn_elementwise(p, BINARY[i].kind, &a, &b, outs[0]);
        }
    for (size_t i = 0; i < sizeof UNARY / sizeof UNARY[0]; i++)
        if (strcmp(f->op, UNARY[i].op) == 0)
            return operand_of(k, f, "self", &a) && a.kind == OP_TENSOR &&
                   xnn_elementwise(p, UNARY[i].kind, &a, NULL, outs[0]);
    if (strcmp(f->op, "reciprocal.default") == 0) {
        operand one = {.kind = OP_NUMBER, .number = 1};
        return operand_of(k, f, "self", &a) && a.kind == OP_TENSOR &&
               xnn_elementwise(p, XNN_DIV, &one, &a, outs[0]);
    }
    if (strcmp(f->op, "pow.Tensor_Scalar") == 0) {
        if (!operand_of(k, f, "self", &a) || a.kind != OP_TENSOR ||
            !operand_of(k, f, "exponent", &b) || b.kind != OP_NUMBER)
            return false;
        xnn_kind kind = b.number == 2 ? XNN_SQUARE : b.number == 0.5 ? XNN_SQUARE_ROOT
                        : b.number == -0.5 ? XNN_RSQRT : 0;
        return kind && xnn_elementwise(p, kind, &a, NULL, outs[0]);
    }
    if (strcmp(f->op, "silu.default") == 0) {
        if (!operand_of(k, f, "self", &a) || a.kind != OP_TENSOR)
            return false;
        et_value y = ek_value_of(p, outs[0]);
        operand s = {.kind = OP_TENSOR,
                     .value = ek_temp_tensor(p, y.dtype, y.rank, y.sizes, y.dynamic)};
        return s.value >= 0 && xnn_elementwise(p, XNN_SIGMOID, &a, NULL, s.value) &&
               xnn_elementwise(p, XNN_MULTIPLY, &a, &s, outs[0]);
    }
    if (strcmp(f->op, "softmax.int") == 0) {
        const call_arg *half = ek_find(f, "half_to_float");
        return (!half || !half->b) && last_axis(k, f, "dim", &a) &&
               xnn_elementwise(p, XNN_SOFTMAX, &a, NULL, outs[0]);
    }
    if (strcmp(f->op, "reshape.default") == 0 || strcmp(f->op, "unsqueeze.default") == 0) {
        int in = computed_tensor(k, f, "self");
        return in >= 0 && xnn_reshape(k, in, outs[0]);
    }
    if (strcmp(f->op, "permute.default") == 0) {
        int in = computed_tensor(k, f, "self");
        return in >= 0 && xnn_permute(k, f, in, outs[0]);
    }
    if (strcmp(f->op, "slice.Tensor") == 0) {
        int in = computed_tensor(k, f, "self");
        return in >= 0 && xnn_slice(k, f, in, outs[0]);
    }
    if (strcmp(f->op, "cat.default") == 0)
        return xnn_concat(k, f, outs[0]);
    if (strcmp(f->op, "matmul.default") == 0) {
        int lhs = computed_tensor(k, f, "self"), rhs = computed_tensor(k, f, "other");
        return lhs >= 0 && rhs >= 0 && xnn_matmul(k, lhs, rhs, outs[0]);
    }
    if (strcmp(f->op, "mean.dim") == 0) {
        const call_arg *keep = ek_find(f, "keepdim"), *dtype = ek_find(f, "dtype");
        if (!keep || !(keep->type == A_BOOL ? keep->b : keep->type == A_INT && keep->i) ||
            (dtype && dtype->type != A_NONE) || !last_axis(k, f, "dim", &a))
            return false;
        /* the averaging row is 1/n for one n: the axis must not vary (sizes are bounds) */
        const g_shape *shape = ek_ref_shape(k, ek_find(f, "self")->t);
        const et_value *t = &p->values[a.value];
        int64_t n = t->sizes[t->rank - 1];
        if (!g_dim_is_const(shape->d[shape->rank - 1], NULL) || n < 1 || n > (1 << 24) ||
            p->values[outs[0]].sizes[t->rank - 1] != 1)
            return false;
        float *row = malloc((size_t)n * sizeof *row);
        if (!row)
            return et_fail(p, FERRY_ERR_NOMEM, "out of memory"), false;
        for (int64_t i = 0; i < n; i++)
            row[i] = 1.0f / (float)n;
        et_partition *x = et_xnn_open(p, &a.value, 1);
        int64_t dims[2] = {1, n};
        int in[3] = {x ? et_xnn_tensor(p, x, a.value) : -1,
                     x ? et_xnn_floats(p, x, row, (size_t)n, 2, dims) : -1, -1};
        free(row);
        int y = x ? et_xnn_tensor(p, x, outs[0]) : -1;
        if (p->st != FERRY_OK)
            return false;
        et_xnn_node(p, x, XNN_FULLY_CONNECTED, in, 3, y, NULL);
        return p->st == FERRY_OK;
    }
    return false;
}
