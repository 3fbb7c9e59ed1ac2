/* onnx_moe.c — a mixture of experts in standard ONNX ops that runs each expert over the tokens
 * that chose it only, as transformers' experts loop does (onnx-standard's form, and the ort-*
 * targets' where their kernels do not fit):
 *
 *   x [T, h] (tokens flattened), routing w, e [T, k] (lower_moe_route), out = zeros [T, h]
 *   for each expert i, in order:
 *     f      = NonZero(Reshape(Equal(e, i), [-1]))      the (token, choice) slots that chose i
 *     tokens = f / k;  wi = Gather(Reshape(w, [-1]), f)  at most one slot per token
 *     y      = Gemm(act(Gemm(x[tokens], gate_i, transB)) * Gemm(x[tokens], up_i, transB),
 *                   down_i, transB) * wi                 (Mixtral: the product in fp32)
 *     out    = ScatterElements(out, tokens, y, axis 0, reduction add)
 *
 * Each expert's weights are the checkpoint's own tensors (one recipe each, named as the
 * checkpoint names them, quantized as the stack is and dequantized per expert), so a decode
 * step reads the chosen experts' weights only: the generic lowering (ir/lower/moe.c) reads
 * every expert's for every token, E/k times the bytes. Expert i's outputs are added in expert
 * order, as index_add_ adds them. A stack stored as one tensor keeps the generic lowering. */
#include <stdio.h>

#include "backends/onnx/onnx.h"

/* Weight `k` of the moe node's stack input `at` (the stack's source k), a recipe of that
 * tensor alone with the stack's dtype and quantization, dequantized when quantized. */
static int expert_weight(g_lower_ctx *c, const g_node *n, int at, int k, const char *dq)
{
    g_graph *g = c->dst;
    const g_weight *stack = &lw_src(c, n, at)->weight;
    const st_tensor *t = w_src(stack, k);
    g_weight r = w_plain(t, stack->dtype);
    r.saturate = stack->saturate;
    r.quant = stack->quant;
    if (r.quant.bits)
        /* DequantizeLinear has no implicit zero point, and reads a 4-bit row's zero points
         * packed across rows (onnx_target.c) */
        r.quant.packing = W_PACK_CONTIGUOUS;
    int v = g_weight_value(g, t->name, &r);
    return r.quant.bits ? g_dequantize(g, dq, v) : v;
}

/* Whether each stack input of `n` stacks one checkpoint tensor per expert (gate_up: an
 * expert's gate and up, stack_group 2, unless up is its own stack). */
static bool per_expert_stacks(const g_lower_ctx *c, const g_node *n)
{
    bool own_up = n->n_in > 4 && n->in[4] != G_NONE;
    for (int k = 2; k < (own_up ? 5 : 4); k++) {
        const g_value *w = lw_src(c, n, k);
        int group = k == 2 && !own_up ? 2 : 1; /* 0 and 1 both mean one source an entry */
        if (!w || w->kind != GV_WEIGHT || !w->weight.stack ||
            (w->weight.stack_group > 1 ? w->weight.stack_group : 1) != group ||
            w->weight.perm != W_PERM_NONE || w->weight.row_end != 0 || w->weight.transpose ||
            w->weight.src_transposed || w->weight.offset != 0 ||
            w->weight.n_src != (int)n->a.moe->num_experts * group)
            return false;
    }
    return true;
}

ferry_status onnx_sparse_moe(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    const g_moe_opts *o = n->a.moe;
    if (!per_expert_stacks(c, n))
        return onnx_lower_moe(c, n, outs);
    const g_value *xs = lw_src(c, n, 0);
    ferry_dtype dt = xs->dtype;
    bool own_up = n->n_in > 4 && n->in[4] != G_NONE;
    int64_t h = 0;
    g_dim_is_const(xs->shape.d[xs->shape.rank - 1], &h);
    int x = g_reshape_spec(g, "Reshape_tokens", lw_in(c, n, 0), 2, (int64_t[]){-1, h});
    int logits = g_reshape_spec(g, "Reshape_logits", lw_in(c, n, 1), 2,
                                (int64_t[]){-1, o->num_experts});
    int chosen, w = lower_moe_route(g, o, logits, dt, &chosen);
    int64_t flat[1] = {-1};
    int w_flat = g_reshape_spec(g, "Reshape_weights", w, 1, flat);
    int chosen_flat = g_reshape_spec(g, "Reshape_experts", chosen, 1, flat);
    int out = g_expand(g, "Zeros", g_scalar_f(g, dt, 0.0), g_shape_of(g, "ShapeOf", x, 0, 2));
    int k_slots = g_scalar_i64(g, o->top_k);
    for (int64_t i = 0; i < o->num_experts && g_ok(g); i++) {
        char name[600], dq[64];
        snprintf(name, sizeof name, "%s/%lld", n->name, (long long)i);
        char saved[sizeof g->scope];
        lw_scope_push(c, saved, sizeof saved, name);
        int hit = g_binary(g, G_EQUAL, "Equal", chosen_flat, g_scalar_i64(g, i));
        g_extern nz = g_extern_init("", "NonZero");
        if (!g_ok(g)) {
            lw_scope_pop(c, saved);
            break;
        }
        g_shape slots_shape = {.rank = 2, .d = {g_dim_const(1), g_dim_unknown()}};
        g_extern_out(&nz, 0, 0, FERRY_I64, &slots_shape);
        int slots = g_reshape_spec(g, "Reshape_slots", g_extern_node(g, "NonZero", &nz, 1, &hit),
                                   1, flat);
        int tokens = g_binary(g, G_DIV, "Div_tokens", slots, k_slots);
        int xe = g_gather(g, "Gather_tokens", x, tokens, 0);
        int gate_w, up_w;
        snprintf(dq, sizeof dq, "DequantizeLinear_gate");
        gate_w = expert_weight(c, n, 2, own_up ? (int)i : 2 * (int)i, dq);
        snprintf(dq, sizeof dq, "DequantizeLinear_up");
        up_w = own_up ? expert_weight(c, n, 4, (int)i, dq) : expert_weight(c, n, 2, 2 * (int)i + 1, dq);
        int a = g_unary(g, o->act, "act_fn", g_matmul(g, "Gemm_gate", xe, gate_w, true));
        a = g_binary(g, G_MUL, "Mul_up", a, g_matmul(g, "Gemm_up", xe, up_w, true));
        int y = g_matmul(g, "Gemm_down", a, expert_weight(c, n, 3, (int)i, "DequantizeLinear_down"),
                         true);
        int64_t last = -1;
        int wi = g_unsqueeze(g, "Unsqueeze_weight", g_gather(g, "Gather_weight", w_flat, slots, 0),
                             1, &last);
        if (o->scale_f32 && dt != FERRY_F32)
            y = g_cast(g, "Cast_scaled",
                       g_binary(g, G_MUL, "Mul_weight", g_cast(g, "Cast_y", y, FERRY_F32), wi), dt);
        else
            y = g_binary(g, G_MUL, "Mul_weight", y, wi);
        int rows = g_expand(g, "Expand_tokens", g_unsqueeze(g, "Unsqueeze_tokens", tokens, 1, &last),
                            g_shape_of(g, "ShapeOf_y", y, 0, 2));
        out = g_scatter_add(g, "ScatterAdd", out, rows, y, 0);
        lw_scope_pop(c, saved);
    }
    out = g_reshape(g, "Reshape_out", out, xs->shape.rank, xs->shape.d);
    lw_refine(c, out, n, 0);
    outs[0] = out;
    return g->err.status;
}
