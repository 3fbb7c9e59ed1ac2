/* infer_ops.h — what the inference functions share (src/ir/ only): the context each gets, one
 * function per op (ops.def names them), and the helpers that report and fill. infer.c holds
 * the table and the generic ops' functions, infer_semantic.c the semantic ops'. */
#ifndef FERRY_IR_INFER_OPS_H
#define FERRY_IR_INFER_OPS_H

#include "ir/ir.h"

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

#define OP(id, name, kind, min_in, max_in, max_out, attrs, infer) ferry_status infer(inf *x);
#include "ir/ops.def"
#undef OP

/* Attributes (pads, conv and rope settings) are held under 2^31 so that no extent arithmetic
 * overflows. */
#define ATTR_LIMIT ((int64_t)1 << 31)

/* The node is malformed: `why`, naming it (an internal error). */
ferry_status inf_bad(inf *x, const char *why);
/* One output of `dtype` and `shape`. */
ferry_status inf_one(inf *x, ferry_dtype dtype, const g_shape *shape);
/* `axis` counted from the end when negative. */
int inf_axis(int64_t axis, int rank);

#endif
