/* onnx_target.c — the onnx-standard target: every semantic op lowered to standard ops, and a
 * matmul with a transposed operand only in its 2-D form (printed as Gemm transB=1).
 *
 * Linear is lowered here, not generically, because standard ONNX has no transposed MatMul: a
 * weight read only by linears is stored transposed ([in, out], the weight stream transposes it
 * while writing) for a plain MatMul; a weight also read by an embedding (a tied lm_head) is
 * stored once as [out, in] and multiplied with Gemm(transB=1) on x flattened to 2-D:
 *   x [.., in] ─reshape [?, in]─gemm(W, transB)─reshape [.., out]─(+ bias) */
#include "backends/onnx/onnx.h"

static ferry_status onnx_linear(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    const g_value *w = lw_src(c, n, 1);
    int x = lw_in(c, n, 0), bias = lw_in(c, n, 2);
    if (lw_refuse_quantized(c, n, 1) != FERRY_OK)
        return g->err.status;
    int y;
    if (w->kind == GV_WEIGHT && !lw_shared(c, n->in[1], G_LINEAR)) {
        g_weight t = w->weight;
        t.transpose = !t.transpose;
        y = g_matmul(g, "MatMul", x, g_weight_value(g, w->name, &t), false);
    } else {
        const g_shape *xs = &g->values[x].shape;
        g_dim flat[2] = {g_dim_unknown(), xs->d[xs->rank - 1]};
        g_shape out = *xs;
        out.d[out.rank - 1] = w->shape.d[0];
        int x2 = g_reshape(g, "Flatten", x, 2, flat);
        int y2 = g_matmul(g, "Gemm", x2, lw_in(c, n, 1), true);
        y = g_reshape(g, "Unflatten", y2, out.rank, out.d);
    }
    if (bias != G_NONE)
        y = g_binary(g, G_ADD, "Add", y, bias);
    outs[0] = y;
    return g->err.status;
}

static g_legality onnx_legal(const g_target *t, const g_graph *g, const g_node *n)
{
    (void)t;
    if (g_op_is_semantic(n->op))
        return G_LOWER;
    if (n->op == G_MATMUL && n->a.transpose_b && g->values[n->in[0]].shape.rank != 2)
        return G_LOWER; /* only ever built 2-D here; a generic graph may hold others */
    return G_NATIVE;
}

static g_lower_fn onnx_lowering(const g_target *t, g_op op)
{
    (void)t;
    return op == G_LINEAR ? onnx_linear : NULL;
}

const g_target onnx_standard_target = {.name = "onnx-standard", .legal = onnx_legal,
                                       .lowering = onnx_lowering};
