/* norm.c — lowering of the norms, following transformers' eager arithmetic step by step so that
 * fp32 logits agree to ~1e-6.
 *
 *  rms_norm:  x ─cast(f32)─┬─mul(x,x)─reduce_mean(-1)─add(eps)─sqrt─reciprocal─┐
 *                          └──────────────────────────────────────────────────mul─cast(dtype)─mul(w)
 *             f32_weight (Gemma, OLMo 2): ... mul ─ mul(cast(w, f32) [+ offset]) ─ cast(dtype)
 *  skip_rms_norm(x, skip, w) = (rms_norm(x + skip), x + skip)
 *  layer_norm: in fp32, (x - mean) / sqrt(var + eps) * w + b, cast back
 *  skip_layer_norm(x, skip, w, b) = (layer_norm(x + skip), x + skip) */
#include "ir/legalize.h"

ferry_status lower_rms_norm(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    int x = lw_in(c, n, 0), w = lw_in(c, n, 1);
    ferry_dtype dt = g->values[x].dtype;
    int64_t last = -1;
    int xf = g_cast(g, "Cast", x, FERRY_F32);
    int sq = g_binary(g, G_MUL, "Square", xf, xf);
    int var = g_reduce(g, G_REDUCE_MEAN, "ReduceMean", sq, 1, &last, true);
    int ve = g_binary(g, G_ADD, "Add", var, g_scalar_f(g, FERRY_F32, n->a.eps));
    int rs = g_unary(g, G_RECIPROCAL, "Reciprocal", g_unary(g, G_SQRT, "Sqrt", ve));
    int normed = g_binary(g, G_MUL, "Mul", xf, rs);
    if (n->a.f32_weight) {
        /* Gemma: output * (offset + weight) in fp32, then cast; OLMo 2: the same, offset 0 */
        int wf = g_cast(g, "Cast_w", w, FERRY_F32);
        if (n->a.offset != 0.0) {
            int offset = g_scalar_f(g, FERRY_F32, n->a.offset);
            wf = g_binary(g, G_ADD, "WeightOffset", wf, offset);
        }
        outs[0] = g_cast(g, "Cast_1", g_binary(g, G_MUL, "Mul_1", normed, wf), dt);
    } else {
        /* Llama: weight * output.to(input dtype) */
        outs[0] = g_binary(g, G_MUL, "Mul_1", g_cast(g, "Cast_1", normed, dt), w);
    }
    return g->err.status;
}

ferry_status lower_skip_rms_norm(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    int residual = lw_in(c, n, 1), x = lw_in(c, n, 0);
    int sum = g_binary(g, G_ADD, "Add", x, residual);
    outs[0] = g_rms_norm(g, "rms_norm", sum, lw_in(c, n, 2), n->a.eps, n->a.offset,
                         n->a.f32_weight);
    outs[1] = sum;
    return g->err.status;
}

ferry_status lower_layer_norm(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    int x = lw_in(c, n, 0), w = lw_in(c, n, 1), b = lw_in(c, n, 2);
    ferry_dtype dt = g->values[x].dtype;
    int64_t last = -1;
    int xf = g_cast(g, "Cast", x, FERRY_F32);
    int mean = g_reduce(g, G_REDUCE_MEAN, "ReduceMean", xf, 1, &last, true);
    int d = g_binary(g, G_SUB, "Sub", xf, mean);
    int var = g_reduce(g, G_REDUCE_MEAN, "ReduceMean_1", g_binary(g, G_MUL, "Square", d, d), 1,
                       &last, true);
    int den = g_unary(g, G_SQRT, "Sqrt",
                      g_binary(g, G_ADD, "Add", var, g_scalar_f(g, FERRY_F32, n->a.eps)));
    int wf = g_cast(g, "Cast_w", w, FERRY_F32);
    int y = g_binary(g, G_MUL, "Mul", g_binary(g, G_DIV, "Div", d, den), wf);
    if (b != G_NONE)
        y = g_binary(g, G_ADD, "Add_bias", y, g_cast(g, "Cast_b", b, FERRY_F32));
    outs[0] = g_cast(g, "Cast_1", y, dt);
    return g->err.status;
}

ferry_status lower_skip_layer_norm(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    int residual = lw_in(c, n, 1), x = lw_in(c, n, 0);
    int sum = g_binary(g, G_ADD, "Add", x, residual);
    int bias = lw_in(c, n, 3), weight = lw_in(c, n, 2);
    outs[0] = g_layer_norm(g, "layer_norm", sum, weight, bias, n->a.eps);
    outs[1] = sum;
    return g->err.status;
}
