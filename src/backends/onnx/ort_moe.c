/* ort_moe.c — a mixture of experts as onnxruntime's com.microsoft.MoE (float experts) or QMoE
 * (block-quantized ones), where the provider has a kernel for it, else plain ops (quantized
 * stacks through DequantizeLinear): on cpu onnx-standard's form, each expert over the tokens
 * that chose it; elsewhere the generic lowering. onnxruntime 1.32's kernels:
 *   MoE   cuda at any float precision; cpu at fp32 only (the cpu kernel of an fp16 graph is
 *         its fp32 one behind casts)
 *   QMoE  cpu at fp32 and fp16, 4-bit (its blockwise 8-bit kernel quantizes the activations to
 *         int8 at every accuracy level, which the DequantizeLinear form does not); cuda at fp16
 *
 *   MoE(x [b, s, h], router_logits [b*s, E], fc1 [E, 2*ff, h], -, fc2 [E, h, ff])
 *       k = top_k, activation_type swiglu, swiglu_fusion 1 (the layout its cpu kernel takes:
 *       each expert's gate and up rows interleaved, fc1[e, 2i] = gate_e[i], fc1[e, 2i+1] =
 *       up_e[i]), normalize_routing_weights = norm_topk_prob
 *   QMoE(x, router_logits, fc1 codes, fc1 scales, -, fc2 codes, fc2 scales, -, -, -, -,
 *        fc1 zeros, fc2 zeros, -, router_weights)
 *       the same routing and layout; codes [E, N, K*bits/8] as ferry packs them (low nibble
 *       first, weights_prepacked 0), scales [E, N, K/block], zero points (asymmetric) [E, N,
 *       K/block*bits/8] a whole byte per row, else its implicit mid code, which is ferry's;
 *       expert_weight_bits, block_size, accuracy_level the quantizer's. QMoE renormalises the
 *       chosen weights unless router_weights is given: without norm_topk_prob it gets the
 *       router's softmax, normalize_routing_weights 0.
 *
 * The kernels take the router's logits and apply the softmax and top-k themselves; their swiglu
 * with the default alpha 1 and beta 0 is silu(gate) * up, so only a silu family fuses. fc1 is
 * a weight recipe over the checkpoint's expert tensors, their rows interleaved as they stream
 * (W_PERM_INTERLEAVE_HALVES within each expert's 2*ff rows); a checkpoint that stores the
 * stack as one tensor keeps the generic lowering, as does Mixtral's fp32 routing weights in a
 * lower-precision graph. */
#include <stdio.h>
#include <string.h>

#include "backends/onnx/ort_lowering.h"

/* The moe node's gate_up stack as fc1: each expert's gate and up rows interleaved (quantized
 * as the stack is); G_NONE where the stack is not each expert's gate and up tensors. */
static int interleaved_fc1(g_lower_ctx *c, const g_node *n)
{
    const g_value *w = lw_src(c, n, 2);
    if (n->n_in > 4 && n->in[4] != G_NONE)
        return G_NONE;
    if (!w || w->kind != GV_WEIGHT || !w->weight.stack || w->weight.stack_group != 2 ||
        w->weight.perm != W_PERM_NONE)
        return G_NONE;
    int64_t rows, cols;
    w_matrix(&w->weight, &rows, &cols);
    g_weight r = w->weight;
    r.perm = W_PERM_INTERLEAVE_HALVES;
    r.perm_group = rows / (w->weight.n_src / 2);
    r.quant.packing = W_PACK_ROWS;
    char name[512];
    snprintf(name, sizeof name, "%s.interleaved", w->name);
    return g_weight_value(c->dst, name, &r);
}

/* Whether the provider has a kernel for these experts: `bits` 0 (float), 4 or 8. */
static bool has_kernel(const g_lower_ctx *c, ferry_dtype dt, int bits)
{
    /* by name: an export's target is a copy of the table's carrying the export's options */
    bool cuda = strcmp(c->target->name, ort_cuda_target.name) == 0;
    bool cpu = strcmp(c->target->name, ort_cpu_target.name) == 0;
    if (!bits)
        return cuda || (cpu && dt == FERRY_F32);
    return (cuda && dt == FERRY_F16) || (cpu && bits == 4 && (dt == FERRY_F32 || dt == FERRY_F16));
}

/* Plain ops where no kernel fits: on cpu each expert over its own tokens (onnx_moe.c), as
 * onnx-standard; on the other providers the generic lowering, the guide's "unfused" (their
 * NonZero and ScatterElements reductions are not relied on). */
static ferry_status unfused(g_lower_ctx *c, const g_node *n, int *outs)
{
    if (strcmp(c->target->name, ort_cpu_target.name) == 0)
        return onnx_sparse_moe(c, n, outs);
    return onnx_lower_moe(c, n, outs);
}

/* QMoE over quantized stacks fc1 (interleaved) and fc2 (the down stack). */
static int qmoe(g_lower_ctx *c, const g_node *n, int x, int logits, int fc1, int fc2,
                ferry_dtype dt)
{
    g_graph *g = c->dst;
    const g_moe_opts *o = n->a.moe;
    const w_quant *q = &g->values[fc1].weight.quant;
    g_extern e = g_extern_init("com.microsoft", "QMoE");
    g_extern_int(&e, "k", o->top_k);
    g_extern_str(&e, "activation_type", "swiglu");
    g_extern_int(&e, "swiglu_fusion", 1);
    g_extern_int(&e, "normalize_routing_weights", o->norm_topk_prob);
    g_extern_int(&e, "expert_weight_bits", q->bits);
    g_extern_int(&e, "block_size", q->block);
    g_extern_int(&e, "weights_prepacked", 0);
    g_extern_int(&e, "accuracy_level", ort_cfg(c)->quantizer.accuracy_level);
    if (!g_ok(g))
        return G_NONE;
    g_extern_out(&e, 0, 0, dt, &g->values[x].shape);
    int in[15];
    for (int k = 0; k < 15; k++)
        in[k] = G_NONE;
    in[0] = x;
    in[1] = logits;
    in[2] = in[3] = fc1;
    in[5] = in[6] = fc2;
    e.part[2] = e.part[5] = W_PART_CODES;
    e.part[3] = e.part[6] = W_PART_SCALES;
    if (!q->symmetric) {
        in[11] = fc1;
        in[12] = fc2;
        e.part[11] = e.part[12] = W_PART_ZEROS;
    }
    int n_in = 13;
    if (!o->norm_topk_prob) {
        int p = g_softmax(g, "Softmax_router", g_cast(g, "Cast_router", logits, FERRY_F32), -1);
        in[14] = dt == FERRY_F32 ? p : g_cast(g, "Cast_router_weights", p, dt);
        n_in = 15;
    }
    return g_extern_node(g, "QMoE", &e, n_in, in);
}

ferry_status ort_moe(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    const g_moe_opts *o = n->a.moe;
    ferry_dtype dt = lw_src(c, n, 0)->dtype;
    const g_value *gate_up = lw_src(c, n, 2), *down = lw_src(c, n, 3);
    int bits = gate_up->kind == GV_WEIGHT ? gate_up->weight.quant.bits : 0;
    bool alike = down->kind == GV_WEIGHT && down->weight.quant.bits == bits &&
                 (!bits || (down->weight.quant.block == gate_up->weight.quant.block &&
                            down->weight.quant.symmetric == gate_up->weight.quant.symmetric));
    if (bits && alike) {
        /* QMoE's blocks divide both hidden and intermediate sizes */
        int64_t rows, h, ff;
        w_matrix(&gate_up->weight, &rows, &h);
        w_matrix(&down->weight, &rows, &ff);
        int64_t block = gate_up->weight.quant.block;
        alike = alike && h % block == 0 && ff % block == 0;
    }
    if (!has_kernel(c, dt, bits) || !alike || o->act != G_SILU || (o->scale_f32 && dt != FERRY_F32))
        return unfused(c, n, outs);
    int fc1 = interleaved_fc1(c, n);
    if (fc1 == G_NONE)
        return g_ok(g) ? unfused(c, n, outs) : g->err.status;
    int x = lw_in(c, n, 0);
    int logits = g_reshape_spec(g, "Reshape_logits", lw_in(c, n, 1), 2,
                                (int64_t[]){-1, o->num_experts});
    int y;
    if (bits) {
        y = qmoe(c, n, x, logits, fc1, lw_in(c, n, 3), dt);
    } else {
        g_extern e = g_extern_init("com.microsoft", "MoE");
        g_extern_int(&e, "k", o->top_k);
        g_extern_str(&e, "activation_type", "swiglu");
        g_extern_int(&e, "swiglu_fusion", 1);
        g_extern_int(&e, "normalize_routing_weights", o->norm_topk_prob);
        if (!g_ok(g))
            return g->err.status;
        g_extern_out(&e, 0, 0, dt, &g->values[x].shape);
        int in[5] = {x, logits, fc1, G_NONE, lw_in(c, n, 3)};
        y = g_extern_node(g, "MoE", &e, 5, in);
    }
    if (!g_ok(g))
        return g->err.status;
    lw_refine(c, y, n, 0);
    outs[0] = y;
    return g->err.status;
}
