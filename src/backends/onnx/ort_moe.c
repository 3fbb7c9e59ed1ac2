/* ort_moe.c — a mixture of experts as onnxruntime's com.microsoft.MoE, where the provider has
 * a kernel for it (onnxruntime 1.32: cuda at any float precision, cpu at fp32 only; the cpu
 * kernel of an fp16 graph is its fp32 one behind casts), else the generic lowering:
 *
 *   MoE(x [b, s, h], router_logits [b*s, E], fc1 [E, 2*ff, h], -, fc2 [E, h, ff])
 *       k = top_k, activation_type swiglu, swiglu_fusion 1 (the layout its cpu kernel takes:
 *       each expert's gate and up rows interleaved, fc1[e, 2i] = gate_e[i], fc1[e, 2i+1] =
 *       up_e[i]), normalize_routing_weights = norm_topk_prob
 *
 * The kernel takes the router's logits and applies the softmax and top-k itself; its swiglu
 * with the default alpha 1 and beta 0 is silu(gate) * up, so only a silu family fuses. fc1 is
 * a weight recipe over the checkpoint's expert tensors, their rows interleaved as they stream
 * (W_PERM_INTERLEAVE_HALVES within each expert's 2*ff rows); a checkpoint that stores the
 * stack as one tensor keeps the generic lowering, as do quantized experts (QMoE is not
 * written yet) and Mixtral's fp32 routing weights in a lower-precision graph. */
#include <stdio.h>
#include <string.h>

#include "backends/onnx/ort_lowering.h"

/* The moe node's gate_up stack as fc1: each expert's gate and up rows interleaved; G_NONE
 * where the stack is not each expert's gate and up tensors. */
static int interleaved_fc1(g_lower_ctx *c, const g_node *n)
{
    const g_value *w = lw_src(c, n, 2);
    if (n->n_in > 4 && n->in[4] != G_NONE)
        return G_NONE;
    if (!w || w->kind != GV_WEIGHT || !w->weight.stack || w->weight.stack_group != 2 ||
        w->weight.quant.bits || w->weight.perm != W_PERM_NONE)
        return G_NONE;
    int64_t rows, cols;
    w_matrix(&w->weight, &rows, &cols);
    g_weight r = w->weight;
    r.perm = W_PERM_INTERLEAVE_HALVES;
    r.perm_group = rows / (w->weight.n_src / 2);
    char name[512];
    snprintf(name, sizeof name, "%s.interleaved", w->name);
    return g_weight_value(c->dst, name, &r);
}

ferry_status ort_moe(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    const g_moe_opts *o = n->a.moe;
    ferry_dtype dt = lw_src(c, n, 0)->dtype;
    const g_value *down = lw_src(c, n, 3);
    /* by name: an export's target is a copy of the table's carrying the export's options */
    bool kernel = strcmp(c->target->name, ort_cuda_target.name) == 0 ||
                  (strcmp(c->target->name, ort_cpu_target.name) == 0 && dt == FERRY_F32);
    if (!kernel || o->act != G_SILU || (o->scale_f32 && dt != FERRY_F32) ||
        (down->kind == GV_WEIGHT && down->weight.quant.bits))
        return lower_moe(c, n, outs);
    int fc1 = interleaved_fc1(c, n);
    if (fc1 == G_NONE)
        return g_ok(g) ? lower_moe(c, n, outs) : g->err.status;
    int x = lw_in(c, n, 0);
    int logits = g_reshape_spec(g, "Reshape_logits", lw_in(c, n, 1), 2,
                                (int64_t[]){-1, o->num_experts});
    g_extern e = g_extern_init("com.microsoft", "MoE");
    g_extern_int(&e, "k", o->top_k);
    g_extern_str(&e, "activation_type", "swiglu");
    g_extern_int(&e, "swiglu_fusion", 1);
    g_extern_int(&e, "normalize_routing_weights", o->norm_topk_prob);
    if (!g_ok(g))
        return g->err.status;
    g_extern_out(&e, 0, 0, dt, &g->values[x].shape);
    int in[5] = {x, logits, fc1, G_NONE, lw_in(c, n, 3)};
    int y = g_extern_node(g, "MoE", &e, 5, in);
    lw_refine(c, y, n, 0);
    outs[0] = y;
    return g->err.status;
}
