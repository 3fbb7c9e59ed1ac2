/* infer.c — output dtypes and symbolic shapes of every op, from its inputs and attributes. The
 * same functions run when a node is built and again in g_check, so a pass that rewires a graph
 * cannot leave a node whose recorded type disagrees with its inputs. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"
#include "util/dtype.h"

/* What an inference function sees: the node, its inputs (NULL where absent), the graph. */
typedef struct inf {
    const g_graph *g;
    const g_node *n;
    const g_value *in[G_MAX_IN];
    g_typed *out;
    int n_out;
    fy_err *err;
} inf;

typedef ferry_status (*infer_fn)(inf *x);

#define OP(id, name, kind, min_in, max_in, max_out, attrs, infer) static ferry_status infer(inf *x);
#include "ir/ops.def"
#undef OP

static const infer_fn INFER[] = {
#define OP(id, name, kind, min_in, max_in, max_out, attrs, infer) infer,
#include "ir/ops.def"
#undef OP
};
_Static_assert(sizeof INFER / sizeof INFER[0] == G_OP_COUNT, "inference table out of step");

static ferry_status bad(inf *x, const char *why)
{
    return fy_fail(x->err, FERRY_ERR_INTERNAL, "graph node '%s' (%s): %s", x->n->name,
                   g_op_name(x->n->op), why);
}

static int norm_axis(int64_t axis, int rank)
{
    return (int)(axis < 0 ? axis + rank : axis);
}

/* One output of `dtype` and `shape`. */
static ferry_status one(inf *x, ferry_dtype dtype, const g_shape *shape)
{
    x->out[0].dtype = dtype;
    x->out[0].shape = *shape;
    x->n_out = 1;
    return FERRY_OK;
}

ferry_status g_infer(const g_graph *g, const g_node *n, g_typed *outs, int *n_out, fy_err *err)
{
    inf x = {.g = g, .n = n, .out = outs, .err = err};
    const g_op_info *info = g_op_info_of(n->op);
    if (!info)
        return fy_fail(err, FERRY_ERR_INTERNAL, "graph node '%s': unknown op %d", n->name,
                       (int)n->op);
    if (n->n_in < info->min_in || n->n_in > info->max_in)
        return bad(&x, "wrong number of inputs");
    for (int i = 0; i < n->n_in; i++) {
        if (n->in[i] == G_NONE) {
            if (i < info->min_in)
                return bad(&x, "a required input is missing");
            continue;
        }
        if (n->in[i] < 0 || (size_t)n->in[i] >= g->n_values)
            return bad(&x, "an input refers to no value");
        x.in[i] = &g->values[n->in[i]];
    }
    if (((info->attrs & GA_ROPE) != 0) != (n->a.rope != NULL) ||
        ((info->attrs & GA_ATTN) != 0) != (n->a.attn != NULL) ||
        ((info->attrs & GA_EXTERN) != 0) != (n->a.ext != NULL) ||
        ((info->attrs & GA_CONV) != 0) != (n->a.conv != NULL) ||
        ((info->attrs & GA_MOE) != 0) != (n->a.moe != NULL))
        return bad(&x, "option struct present where the op takes none, or missing");
    memset(outs, 0, sizeof *outs * G_MAX_OUT);
    ferry_status st = INFER[n->op](&x);
    if (st == FERRY_OK && (x.n_out < 1 || x.n_out > info->max_out))
        return bad(&x, "inference gave an impossible number of outputs");
    *n_out = x.n_out;
    return st;
}

/* ---- elementwise ---- */

static ferry_status broadcast2(inf *x, ferry_dtype out_dtype)
{
    const g_value *a = x->in[0], *b = x->in[1];
    g_shape s;
    if (a->dtype != b->dtype)
        return bad(x, "operand dtypes differ");
    if (!g_shape_broadcast(&a->shape, &b->shape, &s))
        return bad(x, "shapes do not broadcast");
    return one(x, out_dtype, &s);
}

static ferry_status infer_arith(inf *x)
{
    if (x->in[0]->dtype == FERRY_BOOL)
        return bad(x, "arithmetic on bool");
    return broadcast2(x, x->in[0]->dtype);
}

static ferry_status infer_logic(inf *x)
{
    if (x->in[0]->dtype != FERRY_BOOL)
        return bad(x, "needs bool inputs");
    return broadcast2(x, FERRY_BOOL);
}

static ferry_status infer_compare(inf *x)
{
    return broadcast2(x, FERRY_BOOL);
}

static ferry_status infer_float_unary(inf *x)
{
    if (!dt_is_float(x->in[0]->dtype))
        return bad(x, "needs a float input");
    return one(x, x->in[0]->dtype, &x->in[0]->shape);
}

static ferry_status infer_same(inf *x)
{
    return one(x, x->in[0]->dtype, &x->in[0]->shape);
}

static ferry_status infer_not(inf *x)
{
    if (x->in[0]->dtype != FERRY_BOOL)
        return bad(x, "needs a bool input");
    return one(x, FERRY_BOOL, &x->in[0]->shape);
}

static ferry_status infer_where(inf *x)
{
    const g_value *c = x->in[0], *a = x->in[1], *b = x->in[2];
    g_shape t, s;
    if (c->dtype != FERRY_BOOL || a->dtype != b->dtype)
        return bad(x, "needs a bool condition and two values of one dtype");
    if (!g_shape_broadcast(&c->shape, &a->shape, &t) || !g_shape_broadcast(&t, &b->shape, &s))
        return bad(x, "shapes do not broadcast");
    return one(x, a->dtype, &s);
}

/* ---- linear algebra and indexing ---- */

static ferry_status infer_matmul(inf *x)
{
    const g_value *a = x->in[0], *b = x->in[1];
    bool tb = x->n->a.transpose_b;
    if (a->dtype != b->dtype || !dt_is_float(a->dtype))
        return bad(x, "needs two float inputs of one dtype");
    if (a->shape.rank < 2 || b->shape.rank < 2 || (tb && b->shape.rank != 2))
        return bad(x, "needs inputs of rank >= 2 (a 2-D b when transpose_b)");
    g_shape ba = a->shape, bb = b->shape, s;
    ba.rank -= 2;
    bb.rank -= 2;
    if (!g_shape_broadcast(&ba, &bb, &s))
        return bad(x, "batch dims do not broadcast");
    g_dim k_b = b->shape.d[b->shape.rank - (tb ? 1 : 2)];
    g_dim n_b = b->shape.d[b->shape.rank - (tb ? 2 : 1)];
    if (!g_dim_match(a->shape.d[a->shape.rank - 1], k_b))
        return bad(x, "inner dims differ");
    s.d[s.rank++] = a->shape.d[a->shape.rank - 2];
    s.d[s.rank++] = n_b;
    return one(x, a->dtype, &s);
}

static ferry_status infer_gather(inf *x)
{
    const g_value *a = x->in[0], *b = x->in[1];
    int axis = norm_axis(x->n->a.axis, a->shape.rank);
    g_shape s = {0};
    if ((b->dtype != FERRY_I64 && b->dtype != FERRY_I32) || axis < 0 || axis >= a->shape.rank ||
        a->shape.rank - 1 + b->shape.rank > G_MAX_RANK)
        return bad(x, "needs integer indices and a valid axis");
    for (int i = 0; i < axis; i++)
        s.d[s.rank++] = a->shape.d[i];
    for (int i = 0; i < b->shape.rank; i++)
        s.d[s.rank++] = b->shape.d[i];
    for (int i = axis + 1; i < a->shape.rank; i++)
        s.d[s.rank++] = a->shape.d[i];
    return one(x, a->dtype, &s);
}

static ferry_status infer_topk(inf *x)
{
    const g_value *a = x->in[0];
    int axis = norm_axis(x->n->a.axis, a->shape.rank);
    int64_t k = x->n->a.n_ints == 1 ? x->n->a.ints[0] : 0, extent;
    if (!dt_is_float(a->dtype) || axis < 0 || axis >= a->shape.rank || k < 1 ||
        (g_dim_is_const(a->shape.d[axis], &extent) && k > extent))
        return bad(x, "needs a float input, a valid axis and 1 <= k <= its extent");
    g_shape s = a->shape;
    s.d[axis] = g_dim_const(k);
    x->out[0] = (g_typed){a->dtype, s};
    x->out[1] = (g_typed){FERRY_I64, s};
    x->n_out = 2;
    return FERRY_OK;
}

static ferry_status infer_gather_elements(inf *x)
{
    const g_value *a = x->in[0], *b = x->in[1];
    int axis = norm_axis(x->n->a.axis, a->shape.rank);
    if (b->dtype != FERRY_I64 || b->shape.rank != a->shape.rank || axis < 0 ||
        axis >= a->shape.rank)
        return bad(x, "needs int64 indices of data's rank and a valid axis");
    /* OpenVINO's GatherElements takes indices of data's extent off the axis, as torch's
     * gather does not need: held to what every backend runs */
    for (int i = 0; i < a->shape.rank; i++)
        if (i != axis && !g_dim_eq(a->shape.d[i], b->shape.d[i]))
            return bad(x, "indices must have data's extent on every axis but `axis`");
    return one(x, a->dtype, &b->shape);
}

/* The target may leave one dim unknown: it is solved by cancelling the dims the target shares
 * with the input; what is left of the input must be one symbolic dim times constants for the
 * solution to stay symbolic (else it stays unknown, which every backend can still print). */
static ferry_status infer_reshape(inf *x)
{
    const g_value *in = x->in[0];
    const g_shape *spec = &x->n->a.shape;
    g_shape s = *spec;
    int64_t in_const = 1, out_const = 1;
    g_dim in_syms[G_MAX_RANK];
    int n_in_syms = 0, solve_at = -1;
    bool out_unmatched = false, in_unknown = false, overflow = false;
    if (spec->rank < 0 || spec->rank > G_MAX_RANK)
        return bad(x, "bad target rank");
    /* a one-term extent k*s counts as the constant k times the symbol s, so that [.., 3*s, ..]
     * splits into [.., 3, s, ..] as it does into [.., 3*s, ..] */
    for (int i = 0; i < in->shape.rank; i++) {
        int64_t c;
        g_dim d = in->shape.d[i];
        if (d.unknown) {
            in_unknown = true;
        } else if (g_dim_is_const(d, &c)) {
            overflow |= __builtin_mul_overflow(in_const, c, &in_const);
        } else if (d.c == 0 && d.n == 1 && d.t[0].coef > 1) {
            overflow |= __builtin_mul_overflow(in_const, d.t[0].coef, &in_const);
            in_syms[n_in_syms++] = g_dim_sym(d.t[0].sym);
        } else {
            in_syms[n_in_syms++] = d;
        }
    }
    for (int i = 0; i < spec->rank; i++) {
        g_dim d = spec->d[i];
        int64_t c;
        if (d.unknown) {
            if (solve_at >= 0)
                return bad(x, "more than one unknown dim in the target shape");
            solve_at = i;
            continue;
        }
        if (g_dim_is_const(d, &c)) {
            if (c < 0)
                return bad(x, "negative target dim");
            overflow |= __builtin_mul_overflow(out_const, c, &out_const);
            continue;
        }
        if (d.c == 0 && d.n == 1 && d.t[0].coef > 1) {
            overflow |= __builtin_mul_overflow(out_const, d.t[0].coef, &out_const);
            d = g_dim_sym(d.t[0].sym);
        }
        int k = 0;
        while (k < n_in_syms && !g_dim_eq(in_syms[k], d))
            k++;
        if (k < n_in_syms)
            in_syms[k] = in_syms[--n_in_syms];
        else
            out_unmatched = true;
    }
    if (overflow)
        return bad(x, "element count overflows 64 bits");
    /* With an input extent that depends on data nothing more can be checked here. Otherwise the
     * leftover constants must divide, and without a dim to solve every symbolic dim must have
     * been matched: dropping or inventing one changes the element count. */
    if (!in_unknown && !out_unmatched && out_const != 0 && in_const % out_const != 0)
        return bad(x, "the target shape does not divide the input's elements");
    if (solve_at >= 0) {
        if (in_unknown || out_unmatched || n_in_syms > 1 || out_const == 0)
            s.d[solve_at] = g_dim_unknown();
        else if (n_in_syms == 1)
            s.d[solve_at] = g_dim_scale(in_syms[0], in_const / out_const);
        else
            s.d[solve_at] = g_dim_const(in_const / out_const);
    } else if (!in_unknown && (n_in_syms != 0 || out_unmatched || in_const != out_const)) {
        return bad(x, "reshape changes the number of elements");
    }
    return one(x, in->dtype, &s);
}

static ferry_status infer_transpose(inf *x)
{
    const g_value *a = x->in[0];
    g_shape s = {.rank = a->shape.rank};
    bool seen[G_MAX_RANK] = {false};
    if (x->n->a.n_ints != a->shape.rank)
        return bad(x, "perm length differs from rank");
    for (int i = 0; i < s.rank; i++) {
        int64_t p = x->n->a.ints[i];
        if (p < 0 || p >= s.rank || seen[p])
            return bad(x, "perm is not a permutation");
        seen[p] = true;
        s.d[i] = a->shape.d[p];
    }
    return one(x, a->dtype, &s);
}

static ferry_status infer_concat(inf *x)
{
    const g_value *a = x->in[0];
    int axis = norm_axis(x->n->a.axis, a->shape.rank);
    if (axis < 0 || axis >= a->shape.rank)
        return bad(x, "axis out of range");
    g_shape s = a->shape;
    for (int i = 1; i < x->n->n_in; i++) {
        const g_value *b = x->in[i];
        if (!b || b->dtype != a->dtype || b->shape.rank != a->shape.rank)
            return bad(x, "inputs differ in dtype or rank");
        for (int k = 0; k < s.rank; k++)
            if (k != axis && !g_dim_match(s.d[k], b->shape.d[k]))
                return bad(x, "inputs differ off the concat axis");
        s.d[axis] = g_dim_add(s.d[axis], b->shape.d[axis]);
    }
    return one(x, a->dtype, &s);
}

/* start/end may count from the end (negative) and end may be G_END; on a symbolic axis only
 * the forms that stay symbolic are resolved, the rest become unknown. */
static g_dim slice_extent(g_dim dim, int64_t st, int64_t en)
{
    int64_t c;
    if (g_dim_is_const(dim, &c)) {
        int64_t s = st < 0 ? st + c : st, e = en == G_END ? c : (en < 0 ? en + c : en);
        s = s < 0 ? 0 : (s > c ? c : s);
        e = e < 0 ? 0 : (e > c ? c : e);
        return g_dim_const(e > s ? e - s : 0);
    }
    if (en == G_END && st >= 0)
        return g_dim_sub(dim, g_dim_const(st)); /* assumes dim >= start */
    if (en == G_END && st < 0)
        return g_dim_const(-st);                /* assumes dim >= -start */
    if (st >= 0 && en >= 0 && en >= st)
        return g_dim_const(en - st);            /* assumes dim >= end */
    return g_dim_unknown();
}

static ferry_status infer_slice(inf *x)
{
    const g_value *a = x->in[0];
    int axis = norm_axis(x->n->a.axis, a->shape.rank);
    if (axis < 0 || axis >= a->shape.rank)
        return bad(x, "axis out of range");
    g_shape s = a->shape;
    s.d[axis] = slice_extent(a->shape.d[axis], x->n->a.start, x->n->a.end);
    return one(x, a->dtype, &s);
}

static ferry_status infer_unsqueeze(inf *x)
{
    const g_value *a = x->in[0];
    int na = x->n->a.n_ints;
    g_shape s = {.rank = a->shape.rank + na};
    bool is_new[G_MAX_RANK] = {false};
    if (na < 1 || s.rank > G_MAX_RANK)
        return bad(x, "bad axes");
    for (int i = 0; i < na; i++) {
        int k = norm_axis(x->n->a.ints[i], s.rank);
        if (k < 0 || k >= s.rank || is_new[k])
            return bad(x, "axis out of range or repeated");
        is_new[k] = true;
    }
    for (int i = 0, j = 0; i < s.rank; i++)
        s.d[i] = is_new[i] ? g_dim_const(1) : a->shape.d[j++];
    return one(x, a->dtype, &s);
}

static ferry_status infer_cast(inf *x)
{
    if (x->n->a.to <= FERRY_DTYPE_UNDEFINED || x->n->a.to >= FERRY_DTYPE_COUNT)
        return bad(x, "bad target dtype");
    return one(x, x->n->a.to, &x->in[0]->shape);
}

static ferry_status infer_softmax(inf *x)
{
    int axis = norm_axis(x->n->a.axis, x->in[0]->shape.rank);
    if (axis < 0 || axis >= x->in[0]->shape.rank)
        return bad(x, "axis out of range");
    return infer_float_unary(x);
}

static ferry_status infer_reduce(inf *x)
{
    const g_value *a = x->in[0];
    bool red[G_MAX_RANK] = {false};
    g_shape s = {0};
    if (x->n->a.n_ints < 1)
        return bad(x, "no axes");
    /* torch sums integers into int64: a sum stays in floats, where every backend keeps it */
    if (x->n->op == G_REDUCE_SUM && !dt_is_float(a->dtype))
        return bad(x, "reduce_sum needs a float input");
    for (int i = 0; i < x->n->a.n_ints; i++) {
        int k = norm_axis(x->n->a.ints[i], a->shape.rank);
        if (k < 0 || k >= a->shape.rank || red[k])
            return bad(x, "axis out of range, or given twice");
        red[k] = true;
    }
    for (int i = 0; i < a->shape.rank; i++) {
        if (!red[i])
            s.d[s.rank++] = a->shape.d[i];
        else if (x->n->a.keepdims)
            s.d[s.rank++] = g_dim_const(1);
    }
    return one(x, a->dtype, &s);
}

static ferry_status infer_shape_of(inf *x)
{
    int64_t r = x->in[0]->shape.rank, st = x->n->a.start, en = x->n->a.end;
    st = st < 0 ? st + r : st;
    en = en == G_END || en > r ? r : (en < 0 ? en + r : en);
    if (st < 0 || en < st)
        return bad(x, "bad start/end");
    g_shape s = {.rank = 1, .d = {g_dim_const(en - st)}};
    return one(x, FERRY_I64, &s);
}

static ferry_status infer_range(inf *x)
{
    const g_value *a = x->in[0], *b = x->in[1], *c = x->in[2];
    if (a->dtype != b->dtype || b->dtype != c->dtype || a->shape.rank != 0 ||
        b->shape.rank != 0 || c->shape.rank != 0)
        return bad(x, "needs three scalars of one dtype");
    g_shape s = {.rank = 1, .d = {g_dim_unknown()}};
    return one(x, a->dtype, &s);
}

static ferry_status infer_expand(inf *x)
{
    const g_value *a = x->in[0], *b = x->in[1];
    int64_t len;
    if (b->dtype != FERRY_I64 || b->shape.rank != 1 || !g_dim_is_const(b->shape.d[0], &len) ||
        len > G_MAX_RANK)
        return bad(x, "needs an int64 1-D shape of known length");
    g_shape t = {.rank = (int)len}, s;
    /* a constant shape gives its dims (an axis of 1 in both stays 1, a repeat count is known) */
    const int64_t *given = b->kind == GV_CONST && b->data && b->nbytes == (size_t)len * 8
                               ? b->data : NULL;
    for (int i = 0; i < t.rank; i++)
        t.d[i] = given && given[i] >= 1 ? g_dim_const(given[i]) : g_dim_unknown();
    if (!g_shape_broadcast(&a->shape, &t, &s))
        return bad(x, "shapes do not broadcast");
    return one(x, a->dtype, &s);
}

static ferry_status infer_scatter(inf *x)
{
    const g_value *a = x->in[0], *b = x->in[1], *c = x->in[2];
    int axis = norm_axis(x->n->a.axis, a->shape.rank);
    if (b->dtype != FERRY_I64 || c->dtype != a->dtype || b->shape.rank != a->shape.rank ||
        c->shape.rank != a->shape.rank || axis < 0 || axis >= a->shape.rank)
        return bad(x, "needs data, int64 indices and updates of one rank, and a valid axis");
    return one(x, a->dtype, &a->shape);
}

/* ONNX and OpenVINO take updates of the indices' shape, and data's extent off the axis (torch
 * would ignore extra updates): scatter_add is held to what every backend runs alike. */
static ferry_status infer_scatter_add(inf *x)
{
    const g_value *a = x->in[0], *b = x->in[1], *c = x->in[2];
    int axis = norm_axis(x->n->a.axis, a->shape.rank);
    if (infer_scatter(x) != FERRY_OK)
        return x->err->status;
    if (!dt_is_float(a->dtype) || !g_shape_eq(&b->shape, &c->shape))
        return bad(x, "needs float data and updates of the indices' shape");
    for (int i = 0; i < a->shape.rank; i++)
        if (i != axis && !g_dim_eq(a->shape.d[i], b->shape.d[i]))
            return bad(x, "indices must have data's extent on every axis but `axis`");
    return FERRY_OK;
}

static ferry_status infer_dequantize(inf *x)
{
    const g_value *w = x->in[0];
    if (w->kind != GV_WEIGHT || !w->weight.quant.bits || w->shape.rank != 2)
        return bad(x, "needs a block-quantized weight");
    return one(x, w->dtype, &w->shape);
}

static ferry_status infer_extern(inf *x)
{
    const g_extern *e = x->n->a.ext;
    if (!e->op_type[0] || e->n_out < 1 || e->n_out > G_MAX_OUT || e->n_attr < 0 ||
        e->n_attr > G_EXT_MAX_ATTRS)
        return bad(x, "an extern op needs a type, 1 to 3 outputs and at most 12 attributes");
    for (int k = 0; k < x->n->n_in; k++) {
        const g_value *v = x->in[k];
        bool quantized = v && v->kind == GV_WEIGHT && v->weight.quant.bits;
        if (quantized != (e->part[k] >= 0) ||
            (quantized && e->part[k] >= w_n_parts(&v->weight)))
            return bad(x, "an input's part does not match its weight");
    }
    for (int k = 0; k < e->n_out; k++) {
        if (e->out_slot[k] < 0 || e->out_slot[k] >= G_EXT_OUT_SLOTS ||
            (k > 0 && e->out_slot[k] <= e->out_slot[k - 1]))
            return bad(x, "output positions must increase");
        x->out[k].dtype = e->out_dtype[k];
        x->out[k].shape = e->out_shape[k];
    }
    x->n_out = e->n_out;
    return FERRY_OK;
}

static ferry_status infer_clip(inf *x)
{
    double lo = x->n->a.lo, hi = x->n->a.hi;
    if (isnan(lo) || isnan(hi) || lo > hi)
        return bad(x, "bounds must be numbers (or infinite where absent) with lo <= hi");
    return infer_float_unary(x);
}

/* Pads and conv attributes are held under 2^31 so that no extent arithmetic overflows. */
#define ATTR_LIMIT ((int64_t)1 << 31)

static ferry_status infer_pad(inf *x)
{
    const g_value *a = x->in[0];
    const g_attrs *at = &x->n->a;
    if (!dt_is_float(a->dtype) || !isfinite(at->pad_value))
        return bad(x, "needs a float input and a finite pad value");
    g_shape s = a->shape;
    for (int i = 0; i < G_MAX_RANK; i++) {
        int64_t b = at->pad_begin[i], e = at->pad_end[i];
        bool valid = i < s.rank ? b >= 0 && e >= 0 && b < ATTR_LIMIT && e < ATTR_LIMIT
                                : b == 0 && e == 0;
        if (!valid)
            return bad(x, "pads must be non-negative (under 2^31), one pair per axis of x");
        if (i < s.rank)
            s.d[i] = g_dim_add(s.d[i], g_dim_const(b + e));
    }
    return one(x, a->dtype, &s);
}

/* floor(a / b) for b > 0 */
static int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && a < 0);
}

/* A spatial output extent: floor(span / stride) + 1 over span = in + pads - dilated kernel.
 * A symbolic span stays affine when the stride divides each coefficient: the symbols' part is
 * then an exact multiple, and only the constant is floored. */
static ferry_status conv_extent(inf *x, g_dim in, int64_t pads, int64_t reach, int64_t stride,
                                g_dim *out)
{
    if (in.unknown) {
        *out = g_dim_unknown();
        return FERRY_OK;
    }
    g_dim span = g_dim_add(in, g_dim_const(pads - reach));
    int64_t c;
    if (g_dim_is_const(span, &c)) {
        if (c < 0)
            return bad(x, "the kernel reaches past the padded input");
        *out = g_dim_const(c / stride + 1);
        return FERRY_OK;
    }
    for (int t = 0; t < span.n; t++) {
        if (span.t[t].coef % stride != 0)
            return bad(x, "a stride over a symbolic extent that is no multiple of it gives no "
                       "affine output extent (declare the input extent as stride * symbol)");
        span.t[t].coef /= stride;
    }
    span.c = floor_div(span.c, stride) + 1;
    *out = span;
    return FERRY_OK;
}

static bool conv_opts_valid(const g_conv_opts *o)
{
    if (o->spatial < 1 || o->spatial > G_CONV_MAX_SPATIAL || o->groups < 1 ||
        o->groups >= ATTR_LIMIT)
        return false;
    for (int i = 0; i < G_CONV_MAX_SPATIAL; i++) {
        /* strides and dilations from 1, pads from 0; all zero past the spatial axes */
        const int64_t v[4] = {o->strides[i], o->dilations[i], o->pads_begin[i], o->pads_end[i]};
        const int64_t least[4] = {1, 1, 0, 0};
        for (int k = 0; k < 4; k++) {
            bool valid = i < o->spatial ? v[k] >= least[k] && v[k] < ATTR_LIMIT : v[k] == 0;
            if (!valid)
                return false;
        }
    }
    return true;
}

static ferry_status infer_conv(inf *x)
{
    const g_value *a = x->in[0], *w = x->in[1], *b = x->in[2];
    const g_conv_opts *o = x->n->a.conv;
    if (!conv_opts_valid(o))
        return bad(x, "1 to 3 spatial axes, strides and dilations >= 1, pads >= 0, groups >= 1 "
                   "(all under 2^31; nothing set past the spatial axes)");
    if (!dt_is_float(a->dtype) || w->dtype != a->dtype || (b && b->dtype != a->dtype))
        return bad(x, "x, weight and bias must be of one float dtype");
    if (a->shape.rank != o->spatial + 2 || w->shape.rank != o->spatial + 2)
        return bad(x, "x must be [n, c_in, spatial...] and weight [c_out, c_in/groups, "
                   "kernel...], with as many spatial axes as the options");
    int64_t wd[G_MAX_RANK];
    for (int i = 0; i < w->shape.rank; i++)
        if (!g_dim_is_const(w->shape.d[i], &wd[i]) || wd[i] < 1 || wd[i] >= ATTR_LIMIT)
            return bad(x, "the weight's extents must be positive constants");
    if (wd[0] % o->groups != 0 || !g_dim_match(a->shape.d[1], g_dim_const(wd[1] * o->groups)))
        return bad(x, "groups must divide c_out, and x's channels be groups times the "
                   "weight's c_in/groups");
    if (b && (b->shape.rank != 1 || !g_dim_match(b->shape.d[0], g_dim_const(wd[0]))))
        return bad(x, "bias must be [c_out]");
    g_shape s = {.rank = a->shape.rank, .d = {a->shape.d[0], g_dim_const(wd[0])}};
    for (int i = 0; i < o->spatial; i++) {
        int64_t reach = o->dilations[i] * (wd[2 + i] - 1) + 1;
        if (conv_extent(x, a->shape.d[2 + i], o->pads_begin[i] + o->pads_end[i], reach,
                        o->strides[i], &s.d[2 + i]) != FERRY_OK)
            return x->err->status;
    }
    return one(x, a->dtype, &s);
}

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
        return bad(x, "eps must be positive and finite, offset finite");
    return FERRY_OK;
}

static ferry_status infer_norm(inf *x)
{
    const g_value *a = x->in[0], *w = x->in[1], *b = x->in[2];
    if (!dt_is_float(a->dtype) || w->dtype != a->dtype || !last_dim_matches(a, w) ||
        (b && (b->dtype != a->dtype || !last_dim_matches(a, b))))
        return bad(x, "weight (and bias) must be 1-D, of x's dtype, and match its last dim");
    if (check_norm_attrs(x) != FERRY_OK)
        return x->err->status;
    return one(x, a->dtype, &a->shape);
}

static ferry_status infer_skip_norm(inf *x)
{
    const g_value *a = x->in[0], *skip = x->in[1], *w = x->in[2], *b = x->in[3];
    g_shape s;
    if (!dt_is_float(a->dtype) || skip->dtype != a->dtype || w->dtype != a->dtype ||
        !g_shape_broadcast(&a->shape, &skip->shape, &s) || !last_dim_matches(a, w) ||
        (b && (b->dtype != a->dtype || !last_dim_matches(a, b))))
        return bad(x, "needs x and skip of one dtype and shape, and a matching 1-D weight "
                   "(and bias)");
    if (check_norm_attrs(x) != FERRY_OK)
        return x->err->status;
    x->out[0] = (g_typed){a->dtype, s};
    x->out[1] = (g_typed){a->dtype, s};
    x->n_out = 2;
    return FERRY_OK;
}

static ferry_status infer_linear(inf *x)
{
    const g_value *a = x->in[0], *w = x->in[1], *b = x->in[2];
    if (w->dtype != a->dtype || w->shape.rank != 2 || a->shape.rank < 1 ||
        !g_dim_match(w->shape.d[1], a->shape.d[a->shape.rank - 1]))
        return bad(x, "weight must be [out, in] with in = the last dim of x");
    if (b && (b->dtype != a->dtype || b->shape.rank != 1 ||
              !g_dim_match(b->shape.d[0], w->shape.d[0])))
        return bad(x, "bias must be [out]");
    g_shape s = a->shape;
    s.d[s.rank - 1] = w->shape.d[0];
    return one(x, a->dtype, &s);
}

static ferry_status infer_embedding(inf *x)
{
    const g_value *t = x->in[0], *ids = x->in[1];
    if (t->shape.rank != 2 || (ids->dtype != FERRY_I64 && ids->dtype != FERRY_I32) ||
        ids->shape.rank + 1 > G_MAX_RANK)
        return bad(x, "needs a [vocab, n] table and integer ids");
    g_shape s = ids->shape;
    s.d[s.rank++] = t->shape.d[1];
    return one(x, t->dtype, &s);
}

static ferry_status infer_softcap(inf *x)
{
    if (!(x->n->a.cap > 0) || !isfinite(x->n->a.cap))
        return bad(x, "cap must be positive and finite");
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
            return bad(x, "longrope needs rotary_dim/2 short and long factors and "
                          "original_max_position_embeddings");
        for (int i = 0; i < r->n_factors; i++)
            if (!(r->short_factor[i] > 0) || !isfinite(r->short_factor[i]) ||
                !(r->long_factor[i] > 0) || !isfinite(r->long_factor[i]))
                return bad(x, "longrope factors must be positive and finite");
        if (r->attention_factor >= 0 && !isfinite(r->attention_factor))
            return bad(x, "longrope attention_factor must be finite");
    }
    if (r->layout == ROPE_MROPE) {
        int64_t sum = 0;
        for (int i = 0; i < 3; i++) {
            if (r->mrope_section[i] <= 0)
                return bad(x, "mrope_section entries must be positive");
            sum += r->mrope_section[i];
        }
        if (sum != half)
            return bad(x, "mrope_section must sum to rotary_dim/2");
    }
    if (r->layout == ROPE_VISION_2D && (r->type != ROPE_DEFAULT || o->rotary_dim % 4 != 0))
        return bad(x, "2-D rope takes default frequencies and a rotary_dim of a multiple of 4");
    if ((unsigned)r->layout > ROPE_VISION_2D)
        return bad(x, "unknown rope position layout");
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

static ferry_status infer_rope(inf *x)
{
    const g_value *a = x->in[0], *p = x->in[1];
    const g_rope_opts *o = x->n->a.rope;
    int64_t d;
    if (a->shape.rank != 4 || !dt_is_float(a->dtype))
        return bad(x, "needs x [b,s,h,d] and int64 position_ids [b,s]");
    if (!rope_positions_fit(a, p, o->rope.layout))
        return bad(x, o->rope.layout == ROPE_MROPE ? "M-RoPE needs int64 position_ids [3,b,s]"
                      : o->rope.layout == ROPE_VISION_2D
                          ? "2-D rope needs int64 (h, w) positions [b,s,2]"
                          : "needs x [b,s,h,d] and int64 position_ids [b,s]");
    if (!(o->rope.theta > 0) || !isfinite(o->rope.theta) || o->max_position_embeddings <= 0)
        return bad(x, "rope theta must be positive and finite");
    if (!g_dim_is_const(a->shape.d[3], &d) || d != o->head_dim || o->rotary_dim <= 0 ||
        o->rotary_dim > d || o->rotary_dim % 2 != 0)
        return bad(x, "rotary_dim must be even and at most the head dim");
    ferry_status st = check_rope_opts(x, o);
    return st != FERRY_OK ? st : one(x, a->dtype, &a->shape);
}

static ferry_status infer_attention(inf *x)
{
    const g_value *q = x->in[0], *k = x->in[1], *v = x->in[2], *m = x->in[3];
    const g_value *pk = x->in[4], *pv = x->in[5], *pos = x->in[6];
    const g_attn_opts *o = x->n->a.attn;
    int64_t h, kvh, d;
    if (q->shape.rank != 4 || k->shape.rank != 4 || v->shape.rank != 4 ||
        q->dtype != k->dtype || k->dtype != v->dtype || !dt_is_float(q->dtype))
        return bad(x, "needs q [b,s,h,d], k and v [b,t,kvh,d] of one float dtype");
    if (!g_dim_is_const(q->shape.d[2], &h) || !g_dim_is_const(k->shape.d[2], &kvh) ||
        !g_dim_is_const(q->shape.d[3], &d) || h != o->num_heads || kvh != o->num_kv_heads ||
        d != o->head_dim || o->num_kv_heads <= 0 || o->num_heads % o->num_kv_heads != 0 ||
        !g_dim_match(k->shape.d[3], q->shape.d[3]) || !g_dim_eq(v->shape.d[2], k->shape.d[2]))
        return bad(x, "head counts or head dim disagree with the options");
    if (!g_dim_match(v->shape.d[3], q->shape.d[3]) || !g_dim_match(v->shape.d[1], k->shape.d[1]))
        return bad(x, "v must be [b, t, kvh, d] like k");
    if (!(o->scale > 0) || !isfinite(o->scale) || !(o->softcap >= 0) || !isfinite(o->softcap) ||
        o->sliding_window < 0)
        return bad(x, "scale must be positive and finite, softcap and window not negative");
    bool given = o->mask == G_MASK_GIVEN;
    if (o->mask == G_MASK_NONE) {
        /* every key visible: an encoder's or a vision tower's attention over unpadded input; a
         * cache (a decoder's keys) or a window would need positions that no mask gives */
        if (m || o->cache != G_CACHE_NONE || o->sliding_window != 0)
            return bad(x, "attention without a mask takes no mask input, cache or window");
    } else if ((unsigned)o->mask > G_MASK_NONE || !m) {
        return bad(x, "mask kind unknown, or its mask input missing");
    } else if (given ? !(m->dtype == FERRY_BOOL && m->shape.rank == 4)
                     : !(m->dtype == FERRY_I64 && m->shape.rank == 2)) {
        return bad(x, "mask must be int64 [b, t] (causal, padding) or bool [b, 1, s, t] (given)");
    }
    if ((pos && (pos->dtype != FERRY_I64 || pos->shape.rank != 1 ||
                 !g_dim_match(pos->shape.d[0], g_dim_const(1)))) ||
        (o->cache == G_CACHE_STATIC && !pos))
        return bad(x, "cache_position must be int64 [1] (required with a static cache)");
    if ((pk == NULL) != (pv == NULL) || (o->cache == G_CACHE_NONE && pk) ||
        (o->cache == G_CACHE_STATIC && !pk))
        return bad(x, "past key and value go together, and only with a cache");
    if (pk && (pk->shape.rank != 4 || pk->dtype != q->dtype || pv->dtype != q->dtype ||
               !g_dim_match(pk->shape.d[1], g_dim_const(kvh)) ||
               !g_dim_match(pk->shape.d[3], g_dim_const(d)) ||
               !g_shape_eq(&pk->shape, &pv->shape)))
        return bad(x, "past key/value must be [b, kvh, length, d] of q's dtype");
    /* The keys attended to: the cache's length (static), past + new (append), or the new. */
    g_dim keys = o->cache == G_CACHE_STATIC ? pk->shape.d[2]
                 : pk ? g_dim_add(pk->shape.d[2], k->shape.d[1]) : k->shape.d[1];
    if (m && (!g_dim_match(m->shape.d[m->shape.rank - 1], keys) ||
              (given && !g_dim_match(m->shape.d[2], q->shape.d[1]))))
        return bad(x, "the mask's key length differs from the keys attended to");
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

static ferry_status infer_moe(inf *x)
{
    const g_value *a = x->in[0], *logits = x->in[1], *gu = x->in[2], *down = x->in[3];
    const g_value *up = x->in[4];
    const g_moe_opts *o = x->n->a.moe;
    int r = a->shape.rank;
    if (o->num_experts < 1 || o->num_experts >= ATTR_LIMIT || o->top_k < 1 ||
        o->top_k > o->num_experts)
        return bad(x, "needs num_experts >= 1 and 1 <= top_k <= num_experts");
    if (o->act != G_SILU && o->act != G_GELU && o->act != G_GELU_TANH)
        return bad(x, "the activation must be silu, gelu or gelu_tanh");
    /* the lowering adds the experts' axis to x's */
    if (!dt_is_float(a->dtype) || r < 2 || r >= G_MAX_RANK)
        return bad(x, "x must be a float [..., h] of rank 2 to 7");
    if (logits->dtype != a->dtype || logits->shape.rank != r ||
        !g_dim_match(logits->shape.d[r - 1], g_dim_const(o->num_experts)))
        return bad(x, "router_logits must be [..., num_experts] of x's dtype");
    /* the lowering gathers each token's chosen experts by position, which needs the token
     * extents of both known and equal (an unknown one could not be checked to agree) */
    for (int i = 0; i < r - 1; i++)
        if (a->shape.d[i].unknown || !g_dim_eq(logits->shape.d[i], a->shape.d[i]))
            return bad(x, "router_logits must have x's leading dims (one row per token), "
                          "known extents");
    int64_t g[3], d[3], u[3];
    if (!expert_stack(gu, a->dtype, g) || !expert_stack(down, a->dtype, d) ||
        (up && !expert_stack(up, a->dtype, u)))
        return bad(x, "expert weights must be [E, rows, cols] of x's dtype, constant extents");
    int64_t ff = up ? g[1] : g[1] / 2;
    if (g[0] != o->num_experts || d[0] != o->num_experts)
        return bad(x, "the expert weights' first extent must be num_experts");
    if (up ? !(u[0] == g[0] && u[1] == g[1] && u[2] == g[2]) : g[1] % 2 != 0)
        return bad(x, up ? "up must be [E, ff, h] like gate"
                         : "a fused gate_up must be [E, 2*ff, h]");
    if (!g_dim_match(a->shape.d[r - 1], g_dim_const(g[2])) || d[1] != g[2] || d[2] != ff)
        return bad(x, "gate/up must be [E, ff, h] (fused [E, 2*ff, h]) and down [E, h, ff], "
                   "h being x's last extent");
    return one(x, a->dtype, &a->shape);
}
