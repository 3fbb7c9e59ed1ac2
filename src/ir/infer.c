/* infer.c — output dtypes and symbolic shapes of every op, from its inputs and attributes. The
 * same functions run when a node is built and again in g_check, so a pass that rewires a graph
 * cannot leave a node whose recorded type disagrees with its inputs. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/infer_ops.h"
#include "util/dtype.h"

static const infer_fn INFER[] = {
#define OP(id, name, kind, min_in, max_in, max_out, attrs, infer) infer,
#include "ir/ops.def"
#undef OP
};
_Static_assert(sizeof INFER / sizeof INFER[0] == G_OP_COUNT, "inference table out of step");

ferry_status inf_bad(inf *x, const char *why)
{
    return fy_fail(x->err, FERRY_ERR_INTERNAL, "graph node '%s' (%s): %s", x->n->name,
                   g_op_name(x->n->op), why);
}

int inf_axis(int64_t axis, int rank)
{
    return (int)(axis < 0 ? axis + rank : axis);
}

ferry_status inf_one(inf *x, ferry_dtype dtype, const g_shape *shape)
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
        return inf_bad(&x, "wrong number of inputs");
    for (int i = 0; i < n->n_in; i++) {
        if (n->in[i] == G_NONE) {
            if (i < info->min_in)
                return inf_bad(&x, "a required input is missing");
            continue;
        }
        if (n->in[i] < 0 || (size_t)n->in[i] >= g->n_values)
            return inf_bad(&x, "an input refers to no value");
        x.in[i] = &g->values[n->in[i]];
    }
    if (((info->attrs & GA_ROPE) != 0) != (n->a.rope != NULL) ||
        ((info->attrs & GA_ATTN) != 0) != (n->a.attn != NULL) ||
        ((info->attrs & GA_EXTERN) != 0) != (n->a.ext != NULL) ||
        ((info->attrs & GA_CONV) != 0) != (n->a.conv != NULL) ||
        ((info->attrs & GA_MOE) != 0) != (n->a.moe != NULL))
        return inf_bad(&x, "option struct present where the op takes none, or missing");
    memset(outs, 0, sizeof *outs * G_MAX_OUT);
    ferry_status st = INFER[n->op](&x);
    if (st == FERRY_OK && (x.n_out < 1 || x.n_out > info->max_out))
        return inf_bad(&x, "inference gave an impossible number of outputs");
    *n_out = x.n_out;
    return st;
}

/* ---- elementwise ---- */

static ferry_status broadcast2(inf *x, ferry_dtype out_dtype)
{
    const g_value *a = x->in[0], *b = x->in[1];
    g_shape s;
    if (a->dtype != b->dtype)
        return inf_bad(x, "operand dtypes differ");
    if (!g_shape_broadcast(&a->shape, &b->shape, &s))
        return inf_bad(x, "shapes do not broadcast");
    return inf_one(x, out_dtype, &s);
}

ferry_status infer_arith(inf *x)
{
    if (x->in[0]->dtype == FERRY_BOOL)
        return inf_bad(x, "arithmetic on bool");
    return broadcast2(x, x->in[0]->dtype);
}

ferry_status infer_logic(inf *x)
{
    if (x->in[0]->dtype != FERRY_BOOL)
        return inf_bad(x, "needs bool inputs");
    return broadcast2(x, FERRY_BOOL);
}

ferry_status infer_compare(inf *x)
{
    return broadcast2(x, FERRY_BOOL);
}

ferry_status infer_float_unary(inf *x)
{
    if (!dt_is_float(x->in[0]->dtype))
        return inf_bad(x, "needs a float input");
    return inf_one(x, x->in[0]->dtype, &x->in[0]->shape);
}

ferry_status infer_same(inf *x)
{
    return inf_one(x, x->in[0]->dtype, &x->in[0]->shape);
}

ferry_status infer_not(inf *x)
{
    if (x->in[0]->dtype != FERRY_BOOL)
        return inf_bad(x, "needs a bool input");
    return inf_one(x, FERRY_BOOL, &x->in[0]->shape);
}

ferry_status infer_where(inf *x)
{
    const g_value *c = x->in[0], *a = x->in[1], *b = x->in[2];
    g_shape t, s;
    if (c->dtype != FERRY_BOOL || a->dtype != b->dtype)
        return inf_bad(x, "needs a bool condition and two values of one dtype");
    if (!g_shape_broadcast(&c->shape, &a->shape, &t) || !g_shape_broadcast(&t, &b->shape, &s))
        return inf_bad(x, "shapes do not broadcast");
    return inf_one(x, a->dtype, &s);
}

/* ---- linear algebra and indexing ---- */

ferry_status infer_matmul(inf *x)
{
    const g_value *a = x->in[0], *b = x->in[1];
    bool tb = x->n->a.transpose_b;
    if (a->dtype != b->dtype || !dt_is_float(a->dtype))
        return inf_bad(x, "needs two float inputs of one dtype");
    if (a->shape.rank < 2 || b->shape.rank < 2 || (tb && b->shape.rank != 2))
        return inf_bad(x, "needs inputs of rank >= 2 (a 2-D b when transpose_b)");
    g_shape ba = a->shape, bb = b->shape, s;
    ba.rank -= 2;
    bb.rank -= 2;
    if (!g_shape_broadcast(&ba, &bb, &s))
        return inf_bad(x, "batch dims do not broadcast");
    g_dim k_b = b->shape.d[b->shape.rank - (tb ? 1 : 2)];
    g_dim n_b = b->shape.d[b->shape.rank - (tb ? 2 : 1)];
    if (!g_dim_match(a->shape.d[a->shape.rank - 1], k_b))
        return inf_bad(x, "inner dims differ");
    s.d[s.rank++] = a->shape.d[a->shape.rank - 2];
    s.d[s.rank++] = n_b;
    return inf_one(x, a->dtype, &s);
}

ferry_status infer_gather(inf *x)
{
    const g_value *a = x->in[0], *b = x->in[1];
    int axis = inf_axis(x->n->a.axis, a->shape.rank);
    g_shape s = {0};
    if ((b->dtype != FERRY_I64 && b->dtype != FERRY_I32) || axis < 0 || axis >= a->shape.rank ||
        a->shape.rank - 1 + b->shape.rank > G_MAX_RANK)
        return inf_bad(x, "needs integer indices and a valid axis");
    for (int i = 0; i < axis; i++)
        s.d[s.rank++] = a->shape.d[i];
    for (int i = 0; i < b->shape.rank; i++)
        s.d[s.rank++] = b->shape.d[i];
    for (int i = axis + 1; i < a->shape.rank; i++)
        s.d[s.rank++] = a->shape.d[i];
    return inf_one(x, a->dtype, &s);
}

ferry_status infer_topk(inf *x)
{
    const g_value *a = x->in[0];
    int axis = inf_axis(x->n->a.axis, a->shape.rank);
    int64_t k = x->n->a.n_ints == 1 ? x->n->a.ints[0] : 0, extent;
    if (!dt_is_float(a->dtype) || axis < 0 || axis >= a->shape.rank || k < 1 ||
        (g_dim_is_const(a->shape.d[axis], &extent) && k > extent))
        return inf_bad(x, "needs a float input, a valid axis and 1 <= k <= its extent");
    g_shape s = a->shape;
    s.d[axis] = g_dim_const(k);
    x->out[0] = (g_typed){a->dtype, s};
    x->out[1] = (g_typed){FERRY_I64, s};
    x->n_out = 2;
    return FERRY_OK;
}

ferry_status infer_gather_elements(inf *x)
{
    const g_value *a = x->in[0], *b = x->in[1];
    int axis = inf_axis(x->n->a.axis, a->shape.rank);
    if (b->dtype != FERRY_I64 || b->shape.rank != a->shape.rank || axis < 0 ||
        axis >= a->shape.rank)
        return inf_bad(x, "needs int64 indices of data's rank and a valid axis");
    /* OpenVINO's GatherElements takes indices of data's extent off the axis, as torch's
     * gather does not need: held to what every backend runs */
    for (int i = 0; i < a->shape.rank; i++)
        if (i != axis && !g_dim_eq(a->shape.d[i], b->shape.d[i]))
            return inf_bad(x, "indices must have data's extent on every axis but `axis`");
    return inf_one(x, a->dtype, &b->shape);
}

/* The target may leave one dim unknown: it is solved by cancelling the dims the target shares
 * with the input; what is left of the input must be one symbolic dim times constants for the
 * solution to stay symbolic (else it stays unknown, which every backend can still print). */
ferry_status infer_reshape(inf *x)
{
    const g_value *in = x->in[0];
    const g_shape *spec = &x->n->a.shape;
    g_shape s = *spec;
    int64_t in_const = 1, out_const = 1;
    g_dim in_syms[G_MAX_RANK];
    int n_in_syms = 0, solve_at = -1;
    bool out_unmatched = false, in_unknown = false, overflow = false;
    if (spec->rank < 0 || spec->rank > G_MAX_RANK)
        return inf_bad(x, "bad target rank");
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
                return inf_bad(x, "more than one unknown dim in the target shape");
            solve_at = i;
            continue;
        }
        if (g_dim_is_const(d, &c)) {
            if (c < 0)
                return inf_bad(x, "negative target dim");
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
        return inf_bad(x, "element count overflows 64 bits");
    /* With an input extent that depends on data nothing more can be checked here. Otherwise the
     * leftover constants must divide, unless a symbol is left to supply the factor (rows of
     * [s, 32] taken four at a time as [s / 4, 128]: s's value decides, at run time), and
     * without a dim to solve every symbolic dim must have been matched: dropping or inventing
     * one changes the element count. */
    bool symbol_divides = solve_at >= 0 && n_in_syms > 0;
    if (!in_unknown && !out_unmatched && out_const != 0 && in_const % out_const != 0 &&
        !symbol_divides)
        return inf_bad(x, "the target shape does not divide the input's elements");
    if (solve_at >= 0) {
        if (in_unknown || out_unmatched || n_in_syms > 1 || out_const == 0 ||
            in_const % out_const != 0)
            s.d[solve_at] = g_dim_unknown();
        else if (n_in_syms == 1)
            s.d[solve_at] = g_dim_scale(in_syms[0], in_const / out_const);
        else
            s.d[solve_at] = g_dim_const(in_const / out_const);
    } else if (!in_unknown && (n_in_syms != 0 || out_unmatched || in_const != out_const)) {
        return inf_bad(x, "reshape changes the number of elements");
    }
    return inf_one(x, in->dtype, &s);
}

ferry_status infer_transpose(inf *x)
{
    const g_value *a = x->in[0];
    g_shape s = {.rank = a->shape.rank};
    bool seen[G_MAX_RANK] = {false};
    if (x->n->a.n_ints != a->shape.rank)
        return inf_bad(x, "perm length differs from rank");
    for (int i = 0; i < s.rank; i++) {
        int64_t p = x->n->a.ints[i];
        if (p < 0 || p >= s.rank || seen[p])
            return inf_bad(x, "perm is not a permutation");
        seen[p] = true;
        s.d[i] = a->shape.d[p];
    }
    return inf_one(x, a->dtype, &s);
}

ferry_status infer_concat(inf *x)
{
    const g_value *a = x->in[0];
    int axis = inf_axis(x->n->a.axis, a->shape.rank);
    if (axis < 0 || axis >= a->shape.rank)
        return inf_bad(x, "axis out of range");
    g_shape s = a->shape;
    for (int i = 1; i < x->n->n_in; i++) {
        const g_value *b = x->in[i];
        if (!b || b->dtype != a->dtype || b->shape.rank != a->shape.rank)
            return inf_bad(x, "inputs differ in dtype or rank");
        for (int k = 0; k < s.rank; k++)
            if (k != axis && !g_dim_match(s.d[k], b->shape.d[k]))
                return inf_bad(x, "inputs differ off the concat axis");
        s.d[axis] = g_dim_add(s.d[axis], b->shape.d[axis]);
    }
    return inf_one(x, a->dtype, &s);
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

ferry_status infer_slice(inf *x)
{
    const g_value *a = x->in[0];
    int axis = inf_axis(x->n->a.axis, a->shape.rank);
    if (axis < 0 || axis >= a->shape.rank)
        return inf_bad(x, "axis out of range");
    g_shape s = a->shape;
    s.d[axis] = slice_extent(a->shape.d[axis], x->n->a.start, x->n->a.end);
    return inf_one(x, a->dtype, &s);
}

ferry_status infer_unsqueeze(inf *x)
{
    const g_value *a = x->in[0];
    int na = x->n->a.n_ints;
    g_shape s = {.rank = a->shape.rank + na};
    bool is_new[G_MAX_RANK] = {false};
    if (na < 1 || s.rank > G_MAX_RANK)
        return inf_bad(x, "bad axes");
    for (int i = 0; i < na; i++) {
        int k = inf_axis(x->n->a.ints[i], s.rank);
        if (k < 0 || k >= s.rank || is_new[k])
            return inf_bad(x, "axis out of range or repeated");
        is_new[k] = true;
    }
    for (int i = 0, j = 0; i < s.rank; i++)
        s.d[i] = is_new[i] ? g_dim_const(1) : a->shape.d[j++];
    return inf_one(x, a->dtype, &s);
}

ferry_status infer_cast(inf *x)
{
    if (x->n->a.to <= FERRY_DTYPE_UNDEFINED || x->n->a.to >= FERRY_DTYPE_COUNT)
        return inf_bad(x, "bad target dtype");
    return inf_one(x, x->n->a.to, &x->in[0]->shape);
}

ferry_status infer_softmax(inf *x)
{
    int axis = inf_axis(x->n->a.axis, x->in[0]->shape.rank);
    if (axis < 0 || axis >= x->in[0]->shape.rank)
        return inf_bad(x, "axis out of range");
    return infer_float_unary(x);
}

ferry_status infer_reduce(inf *x)
{
    const g_value *a = x->in[0];
    bool red[G_MAX_RANK] = {false};
    g_shape s = {0};
    if (x->n->a.n_ints < 1)
        return inf_bad(x, "no axes");
    /* torch sums integers into int64: a sum stays in floats, where every backend keeps it */
    if (x->n->op == G_REDUCE_SUM && !dt_is_float(a->dtype))
        return inf_bad(x, "reduce_sum needs a float input");
    for (int i = 0; i < x->n->a.n_ints; i++) {
        int k = inf_axis(x->n->a.ints[i], a->shape.rank);
        if (k < 0 || k >= a->shape.rank || red[k])
            return inf_bad(x, "axis out of range, or given twice");
        red[k] = true;
    }
    for (int i = 0; i < a->shape.rank; i++) {
        if (!red[i])
            s.d[s.rank++] = a->shape.d[i];
        else if (x->n->a.keepdims)
            s.d[s.rank++] = g_dim_const(1);
    }
    return inf_one(x, a->dtype, &s);
}

ferry_status infer_shape_of(inf *x)
{
    int64_t r = x->in[0]->shape.rank, st = x->n->a.start, en = x->n->a.end;
    st = st < 0 ? st + r : st;
    en = en == G_END || en > r ? r : (en < 0 ? en + r : en);
    if (st < 0 || en < st)
        return inf_bad(x, "bad start/end");
    g_shape s = {.rank = 1, .d = {g_dim_const(en - st)}};
    return inf_one(x, FERRY_I64, &s);
}

ferry_status infer_range(inf *x)
{
    const g_value *a = x->in[0], *b = x->in[1], *c = x->in[2];
    if (a->dtype != b->dtype || b->dtype != c->dtype || a->shape.rank != 0 ||
        b->shape.rank != 0 || c->shape.rank != 0)
        return inf_bad(x, "needs three scalars of one dtype");
    g_shape s = {.rank = 1, .d = {g_dim_unknown()}};
    return inf_one(x, a->dtype, &s);
}

ferry_status infer_expand(inf *x)
{
    const g_value *a = x->in[0], *b = x->in[1];
    int64_t len;
    if (b->dtype != FERRY_I64 || b->shape.rank != 1 || !g_dim_is_const(b->shape.d[0], &len) ||
        len > G_MAX_RANK)
        return inf_bad(x, "needs an int64 1-D shape of known length");
    g_shape t = {.rank = (int)len}, s;
    /* a constant shape gives its dims (an axis of 1 in both stays 1, a repeat count is known) */
    const int64_t *given = b->kind == GV_CONST && b->data && b->nbytes == (size_t)len * 8
                               ? b->data : NULL;
    for (int i = 0; i < t.rank; i++)
        t.d[i] = given && given[i] >= 1 ? g_dim_const(given[i]) : g_dim_unknown();
    if (!g_shape_broadcast(&a->shape, &t, &s))
        return inf_bad(x, "shapes do not broadcast");
    return inf_one(x, a->dtype, &s);
}

ferry_status infer_scatter(inf *x)
{
    const g_value *a = x->in[0], *b = x->in[1], *c = x->in[2];
    int axis = inf_axis(x->n->a.axis, a->shape.rank);
    if (b->dtype != FERRY_I64 || c->dtype != a->dtype || b->shape.rank != a->shape.rank ||
        c->shape.rank != a->shape.rank || axis < 0 || axis >= a->shape.rank)
        return inf_bad(x, "needs data, int64 indices and updates of one rank, and a valid axis");
    return inf_one(x, a->dtype, &a->shape);
}

/* ONNX and OpenVINO take updates of the indices' shape, and data's extent off the axis (torch
 * would ignore extra updates): scatter_add is held to what every backend runs alike. */
ferry_status infer_scatter_add(inf *x)
{
    const g_value *a = x->in[0], *b = x->in[1], *c = x->in[2];
    int axis = inf_axis(x->n->a.axis, a->shape.rank);
    if (infer_scatter(x) != FERRY_OK)
        return x->err->status;
    if (!dt_is_float(a->dtype))
        return inf_bad(x, "needs float data and updates of the indices' shape");
    /* a data-dependent extent (the tokens an expert chose) is checked at run time */
    for (int i = 0; i < a->shape.rank; i++)
        if (!g_dim_match(b->shape.d[i], c->shape.d[i]))
            return inf_bad(x, "needs float data and updates of the indices' shape");
    for (int i = 0; i < a->shape.rank; i++)
        if (i != axis && !g_dim_match(a->shape.d[i], b->shape.d[i]))
            return inf_bad(x, "indices must have data's extent on every axis but `axis`");
    return FERRY_OK;
}

ferry_status infer_dequantize(inf *x)
{
    const g_value *w = x->in[0];
    /* a matrix, or a stack of them (a mixture's experts) */
    if (w->kind != GV_WEIGHT || !w->weight.quant.bits ||
        !(w->shape.rank == 2 || (w->shape.rank == 3 && w->weight.stack)))
        return inf_bad(x, "needs a block-quantized matrix or stack of matrices");
    return inf_one(x, w->dtype, &w->shape);
}

ferry_status infer_extern(inf *x)
{
    const g_extern *e = x->n->a.ext;
    if (!e->op_type[0] || e->n_out < 1 || e->n_out > G_MAX_OUT || e->n_attr < 0 ||
        e->n_attr > G_EXT_MAX_ATTRS)
        return inf_bad(x, "an extern op needs a type, 1 to 3 outputs and at most 12 attributes");
    for (int k = 0; k < x->n->n_in; k++) {
        const g_value *v = x->in[k];
        bool quantized = v && v->kind == GV_WEIGHT && v->weight.quant.bits;
        if (quantized != (e->part[k] >= 0) ||
            (quantized && e->part[k] >= w_n_parts(&v->weight)))
            return inf_bad(x, "an input's part does not match its weight");
    }
    for (int k = 0; k < e->n_out; k++) {
        if (e->out_slot[k] < 0 || e->out_slot[k] >= G_EXT_OUT_SLOTS ||
            (k > 0 && e->out_slot[k] <= e->out_slot[k - 1]))
            return inf_bad(x, "output positions must increase");
        x->out[k].dtype = e->out_dtype[k];
        x->out[k].shape = e->out_shape[k];
    }
    x->n_out = e->n_out;
    return FERRY_OK;
}

ferry_status infer_clip(inf *x)
{
    double lo = x->n->a.lo, hi = x->n->a.hi;
    if (isnan(lo) || isnan(hi) || lo > hi)
        return inf_bad(x, "bounds must be numbers (or infinite where absent) with lo <= hi");
    return infer_float_unary(x);
}


ferry_status infer_pad(inf *x)
{
    const g_value *a = x->in[0];
    const g_attrs *at = &x->n->a;
    if (!dt_is_float(a->dtype) || !isfinite(at->pad_value))
        return inf_bad(x, "needs a float input and a finite pad value");
    g_shape s = a->shape;
    for (int i = 0; i < G_MAX_RANK; i++) {
        int64_t b = at->pad_begin[i], e = at->pad_end[i];
        bool valid = i < s.rank ? b >= 0 && e >= 0 && b < ATTR_LIMIT && e < ATTR_LIMIT
                                : b == 0 && e == 0;
        if (!valid)
            return inf_bad(x, "pads must be non-negative (under 2^31), one pair per axis of x");
        if (i < s.rank)
            s.d[i] = g_dim_add(s.d[i], g_dim_const(b + e));
    }
    return inf_one(x, a->dtype, &s);
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
            return inf_bad(x, "the kernel reaches past the padded input");
        *out = g_dim_const(c / stride + 1);
        return FERRY_OK;
    }
    for (int t = 0; t < span.n; t++) {
        if (span.t[t].coef % stride != 0)
            return inf_bad(x, "a stride over a symbolic extent that is no multiple of it gives no "
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

ferry_status infer_conv(inf *x)
{
    const g_value *a = x->in[0], *w = x->in[1], *b = x->in[2];
    const g_conv_opts *o = x->n->a.conv;
    if (!conv_opts_valid(o))
        return inf_bad(x, "1 to 3 spatial axes, strides and dilations >= 1, pads >= 0, groups >= 1 "
                   "(all under 2^31; nothing set past the spatial axes)");
    if (!dt_is_float(a->dtype) || w->dtype != a->dtype || (b && b->dtype != a->dtype))
        return inf_bad(x, "x, weight and bias must be of one float dtype");
    if (a->shape.rank != o->spatial + 2 || w->shape.rank != o->spatial + 2)
        return inf_bad(x, "x must be [n, c_in, spatial...] and weight [c_out, c_in/groups, "
                   "kernel...], with as many spatial axes as the options");
    int64_t wd[G_MAX_RANK];
    for (int i = 0; i < w->shape.rank; i++)
        if (!g_dim_is_const(w->shape.d[i], &wd[i]) || wd[i] < 1 || wd[i] >= ATTR_LIMIT)
            return inf_bad(x, "the weight's extents must be positive constants");
    if (wd[0] % o->groups != 0 || !g_dim_match(a->shape.d[1], g_dim_const(wd[1] * o->groups)))
        return inf_bad(x, "groups must divide c_out, and x's channels be groups times the "
                   "weight's c_in/groups");
    if (b && (b->shape.rank != 1 || !g_dim_match(b->shape.d[0], g_dim_const(wd[0]))))
        return inf_bad(x, "bias must be [c_out]");
    g_shape s = {.rank = a->shape.rank, .d = {a->shape.d[0], g_dim_const(wd[0])}};
    for (int i = 0; i < o->spatial; i++) {
        int64_t reach = o->dilations[i] * (wd[2 + i] - 1) + 1;
        if (conv_extent(x, a->shape.d[2 + i], o->pads_begin[i] + o->pads_end[i], reach,
                        o->strides[i], &s.d[2 + i]) != FERRY_OK)
            return x->err->status;
    }
    return inf_one(x, a->dtype, &s);
}
