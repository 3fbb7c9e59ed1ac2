/* moe.c — the generic lowering of a mixture of experts, as transformers' Qwen2/3-MoE and Mixtral
 * blocks compute it, from primitives every backend prints.
 *
 * Router (per token, over the last axis of router_logits [B.., s, E]):
 *   p = softmax(cast(logits, f32)) ─topk(k)─> w [B.., s, k] (largest first), e [B.., s, k]
 *   [norm_topk_prob: w = w / sum(w)]  [unless scale_f32: w = cast(w, x's dtype)]
 * Experts, every one over every token, the weights first so that no weight is transposed
 * (x [B.., s, h] moves to [B.., 1, h, s] and matmul broadcasts it over the experts):
 *   gu = gate_up [E, 2ff, h] @ xᵀ -> [B.., E, 2ff, s], gate and up its two row halves (or
 *        gate [E, ff, h] @ xᵀ and up [E, ff, h] @ xᵀ);  a = act(gate) * up
 *   y  = down [E, h, ff] @ a -> [B.., E, h, s]
 * Combine: the chosen experts' outputs gathered along the experts' axis (e moved to
 * [B.., k, h, s]), each scaled by its w, summed over the k in x's dtype:
 *   out = reshape(transpose(sum_k(gather(y, e) * w))) -> [B.., s, h]
 * (scale_f32, Mixtral: the product in fp32 and cast back per expert, as its fp32 routing weights
 * scale each expert's output before index_add_ in the hidden dtype.)
 *
 * Cost: every expert runs over every token, E/top_k times the expert FLOPs of the routed form
 * (Qwen3-30B-A3B: 128/8 = 16x), and the [B.., E, 2ff, s] and [B.., E, h, s] intermediates hold
 * E rows per token. It is exact, not fast: a backend with a fused MoE kernel (onnxruntime's
 * MoE, OpenVINO's, ExecuTorch's) replaces this lowering with its own.
 *
 * The chosen outputs are gathered rather than weighted by a dense [tokens, E] matrix of routing
 * weights with zeros elsewhere: an expert a token did not choose may overflow on it in fp16, and
 * 0 * inf would be NaN where transformers never runs that expert. Quantized expert weights are
 * refused here; a target that can dequantize them passes its float stacks to lower_moe_over. */
#include "ir/legalize.h"

int lower_moe_route(g_graph *g, const g_moe_opts *o, int logits, ferry_dtype dt, int *chosen)
{
    /* fp32 softmax, top-k, renormalised, cast to x's dtype unless scaling in fp32 */
    if (g->values[logits].dtype != FERRY_F32)
        logits = g_cast(g, "Cast_logits", logits, FERRY_F32);
    int probs = g_softmax(g, "Softmax", logits, -1);
    int w = g_topk(g, "TopK", probs, o->top_k, -1, chosen);
    if (o->norm_topk_prob) {
        int64_t last = -1;
        w = g_binary(g, G_DIV, "Div_norm", w, g_reduce(g, G_REDUCE_SUM, "ReduceSum_norm", w, 1,
                                                        &last, true));
    }
    if (!o->scale_f32 && dt != FERRY_F32)
        w = g_cast(g, "Cast_weights", w, dt);
    return w;
}

ferry_status lower_moe(g_lower_ctx *c, const g_node *n, int *outs)
{
    for (int k = 2; k < n->n_in; k++) {
        const g_value *w = lw_src(c, n, k);
        if (w && w->kind == GV_WEIGHT && w->weight.quant.bits)
            return g_fail(c->dst, FERRY_ERR_UNSUPPORTED, "target %s has no form for the %d-bit "
                          "quantized experts '%s' of moe '%s' (ONNX and OpenVINO have; export "
                          "this format without --quantize)", c->target->name,
                          w->weight.quant.bits, w->name, n->name);
    }
    return lower_moe_over(c, n, lw_in(c, n, 2), lw_in(c, n, 3), lw_in(c, n, 4), outs);
}

ferry_status lower_moe_over(g_lower_ctx *c, const g_node *n, int gate_up, int down, int up,
                            int *outs)
{
    g_graph *g = c->dst;
    const g_moe_opts *o = n->a.moe;
    if (!g_ok(g))
        return g->err.status;
    int x = lw_in(c, n, 0), logits = lw_in(c, n, 1);
    const g_value *xs = lw_src(c, n, 0), *ws = lw_src(c, n, 2);
    ferry_dtype dt = xs->dtype;
    int r = xs->shape.rank;
    int64_t ff = 0, h = 0;
    g_dim_is_const(ws->shape.d[1], &ff);
    g_dim_is_const(ws->shape.d[2], &h);
    if (up == G_NONE)
        ff /= 2;

    /* perm: the last two axes swapped; the experts' (and then the k choices') axis is r - 2 of
     * the rank r + 1 values below */
    int64_t perm[G_MAX_RANK];
    for (int i = 0; i < r; i++)
        perm[i] = i;
    perm[r - 2] = r - 1;
    perm[r - 1] = r - 2;
    int64_t at_e = r - 2, before_s = r - 1;

    int chosen;
    int w = lower_moe_route(g, o, logits, dt, &chosen);

    /* experts: x [B.., s, h] -> [B.., 1, h, s], broadcast over the experts by matmul */
    int xt = g_unsqueeze(g, "Unsqueeze_x", g_transpose(g, "Transpose_x", x, r, perm), 1, &at_e);
    int gate, upv;
    if (up == G_NONE) {
        int gu = g_matmul(g, "MatMul_gate_up", gate_up, xt, false);
        gate = g_slice(g, "Slice_gate", gu, before_s, 0, ff);
        upv = g_slice(g, "Slice_up", gu, before_s, ff, 2 * ff);
    } else {
        gate = g_matmul(g, "MatMul_gate", gate_up, xt, false);
        upv = g_matmul(g, "MatMul_up", up, xt, false);
    }
    /* the activation stays semantic: a target that keeps it (torch's aten.silu) prints it */
    /* named as transformers' experts module names its activation */
    int act = g_unary(g, o->act, "act_fn", gate);
    int y = g_matmul(g, "MatMul_down", down, g_binary(g, G_MUL, "Mul_up", act, upv), false);

    /* combine: e and w [B.., s, k] -> [B.., k, 1, s]; e spread over h to gather y's rows */
    int64_t spread[G_MAX_RANK + 1];
    for (int i = 0; i <= r; i++)
        spread[i] = i == before_s ? h : 1;
    int e = g_unsqueeze(g, "Unsqueeze_experts",
                        g_transpose(g, "Transpose_experts", chosen, r, perm), 1, &before_s);
    e = g_expand(g, "Expand_experts", e, g_const_i64(g, r + 1, spread));
    w = g_unsqueeze(g, "Unsqueeze_weights", g_transpose(g, "Transpose_weights", w, r, perm), 1,
                    &before_s);
    int picked = g_gather_elements(g, "GatherElements", y, e, at_e);
    int scaled;
    if (o->scale_f32 && dt != FERRY_F32)
        scaled = g_cast(g, "Cast_scaled",
                        g_binary(g, G_MUL, "Mul_weights",
                                 g_cast(g, "Cast_picked", picked, FERRY_F32), w),
                        dt);
    else
        scaled = g_binary(g, G_MUL, "Mul_weights", picked, w);
    /* the sum keeps its axis and the reshape drops it: OpenVINO 2026.4's CPU plugin moves a
     * transpose across a reduction that drops its axis and gets the shape wrong when the
     * sequence is 1 ([1, h, 1] -> [1, h, h] against the residual) */
    int sum = g_reduce(g, G_REDUCE_SUM, "ReduceSum", scaled, 1, &at_e, true);
    int64_t perm_kept[G_MAX_RANK + 1];
    for (int i = 0; i <= r; i++)
        perm_kept[i] = i;
    perm_kept[r - 1] = r;
    perm_kept[r] = r - 1;
    int out = g_reshape(g, "Reshape_out", g_transpose(g, "Transpose_out", sum, r + 1, perm_kept),
                        r, xs->shape.d);
    lw_refine(c, out, n, 0);
    outs[0] = out;
    return g->err.status;
}
