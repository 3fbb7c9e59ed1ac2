/* linear.c — generic lowering of linear and embedding, for targets whose matmul takes a
 * transposed 2-D operand (OpenVINO's MatMul, aten.linear): the weight stays [out, in] and is
 * multiplied as stored. Targets without that (standard ONNX) override linear with their own
 * choice of layout (backends/onnx). Quantized weights need the target's own lowering.
 *   linear(x, W, b)    = matmul(x, W, transpose_b) + b
 *   embedding(T, ids)  = gather(T, ids, axis 0) */
#include "ir/legalize.h"

ferry_status lower_linear(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    if (lw_refuse_quantized(c, n, 1) != FERRY_OK)
        return g->err.status;
    int w = lw_in(c, n, 1), x = lw_in(c, n, 0);
    int y = g_matmul(g, "MatMul", x, w, true);
    if (n->n_in > 2 && n->in[2] != G_NONE)
        y = g_binary(g, G_ADD, "Add", y, lw_in(c, n, 2));
    outs[0] = y;
    return g->err.status;
}

ferry_status lower_embedding(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    if (lw_refuse_quantized(c, n, 0) != FERRY_OK)
        return g->err.status;
    int ids = lw_in(c, n, 1), table = lw_in(c, n, 0);
    outs[0] = g_gather(g, "Gather", table, ids, 0);
    return g->err.status;
}
