/* onnx_target.c — the onnx-standard target: every semantic op lowered to standard ops, and a
 * matmul with a transposed operand only in its 2-D form (printed as Gemm transB=1).
 *
 * layer_norm is ONNX LayerNormalization.
 *
 * Linear is lowered here, not generically, because standard ONNX has no transposed MatMul: a
 * weight read only by linears is stored transposed ([in, out], the weight stream transposes it
 * while writing) for a plain MatMul; a weight also read by an embedding (a tied lm_head) is
 * stored once as [out, in] and multiplied with Gemm(transB=1) on x flattened to 2-D:
 *   x [.., in] ─reshape [?, in]─gemm(W, transB)─reshape [.., out]─(+ bias)
 *
 * A block-quantized weight (of a linear, an embedding or a mixture's expert stack) is
 * DequantizeLinear (opset 21: uint4 / uint8 codes, blocks along the last axis) into the same
 * Gemm, Gather or experts' MatMuls. A mixture of experts runs each expert over the tokens that
 * chose it (onnx_moe.c). DequantizeLinear has no
 * implicit zero point, so a symmetric weight is stored with its zeros part (every entry the mid
 * code, packed contiguously); an asymmetric weight's zeros part is DequantizeLinear's zero-point
 * tensor, packed across rows (W_PACK_CONTIGUOUS) where 4-bit rows hold an odd number of
 * blocks. */
#include <stdio.h>

#include "backends/onnx/onnx.h"

/* The opset being written: the export's, or the default for a bare target (tests lower
 * without an export's options). */
static int opset_of(const g_lower_ctx *c)
{
    const ferry_export_config *cfg = c->target->opts;
    return cfg ? onnx_opset(cfg) : ONNX_DEFAULT_OPSET;
}

/* The destination value of weight input k of `n`, dequantized to float when it is quantized
 * (by the node `node`). */
static int float_weight_by(g_lower_ctx *c, const g_node *n, int k, const char *node)
{
    g_graph *g = c->dst;
    const g_value *w = lw_src(c, n, k);
    if (!w || w->kind != GV_WEIGHT || !w->weight.quant.bits)
        return lw_in(c, n, k);
    int64_t rows, cols, block = w->weight.quant.block, blocks;
    w_matrix(&w->weight, &rows, &cols);
    blocks = (cols + block - 1) / block;
    g_weight r = w->weight;
    /* DequantizeLinear has no implicit zero point (a symmetric weight writes its mid codes out),
     * and reads 4-bit zero points packed across rows: MatMulNBits' rows start on a byte each,
     * the same layout only when a row holds an even number of blocks */
    bool packed = r.quant.bits == 4 && !r.quant.symmetric && blocks % 2 != 0;
    r.quant.packing = r.quant.symmetric || packed ? W_PACK_CONTIGUOUS : W_PACK_ROWS;
    return g_dequantize(g, node, g_weight_value(g, w->name, &r));
}

static int float_weight(g_lower_ctx *c, const g_node *n, int k)
{
    return float_weight_by(c, n, k, "DequantizeLinear");
}

/* A mixture's experts, dequantized first when quantized (DequantizeLinear of each [E, out, in]
 * stack, blocks along its last axis), then the generic lowering. */
ferry_status onnx_lower_moe(g_lower_ctx *c, const g_node *n, int *outs)
{
    int up = n->n_in > 4 ? float_weight_by(c, n, 4, "DequantizeLinear_up") : G_NONE;
    return lower_moe_over(c, n, float_weight_by(c, n, 2, "DequantizeLinear_gate_up"),
                          float_weight_by(c, n, 3, "DequantizeLinear_down"), up, outs);
}

static ferry_status onnx_embedding(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    outs[0] = g_gather(g, "Gather", float_weight(c, n, 0), lw_in(c, n, 1), 0);
    return g->err.status;
}

ferry_status onnx_lower_linear(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    const g_value *w = lw_src(c, n, 1);
    int x = lw_in(c, n, 0), bias = lw_in(c, n, 2);
    bool quantized = w->kind == GV_WEIGHT && w->weight.quant.bits;
    int y;
    if (w->kind == GV_WEIGHT && !quantized && !lw_shared(c, n->in[1], G_LINEAR)) {
        g_weight t = w->weight;
        t.transpose = !t.transpose;
        y = g_matmul(g, "MatMul", x, g_weight_value(g, w->name, &t), false);
    } else {
        const g_shape *xs = &g->values[x].shape;
        g_dim flat[2] = {g_dim_unknown(), xs->d[xs->rank - 1]};
        g_shape out = *xs;
        out.d[out.rank - 1] = w->shape.d[0];
        int x2 = g_reshape(g, "Flatten", x, 2, flat);
        int y2 = g_matmul(g, "Gemm", x2, float_weight(c, n, 1), true);
        y = g_reshape(g, "Unflatten", y2, out.rank, out.d);
    }
    if (bias != G_NONE)
        y = g_binary(g, G_ADD, "Add", y, bias);
    outs[0] = y;
    return g->err.status;
}

/* LayerNormalization is standard from opset 17, ferry's lowest */
_Static_assert(ONNX_MIN_OPSET >= 17, "layer_norm needs LayerNormalization");

/* layer_norm as ONNX LayerNormalization (axis -1, computed in fp32 as transformers computes
 * it). */
ferry_status onnx_lower_layer_norm(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    int x = lw_in(c, n, 0);
    if (!g_ok(g))
        return g->err.status;
    const g_value *xs = &g->values[x];
    g_extern e = g_extern_init("", "LayerNormalization");
    g_extern_float(&e, "epsilon", n->a.eps);
    g_extern_int(&e, "axis", -1);
    g_extern_int(&e, "stash_type", 1);
    g_extern_out(&e, 0, 0, xs->dtype, &xs->shape);
    int in[3] = {x, lw_in(c, n, 1), -1};
    in[2] = lw_in(c, n, 2);
    outs[0] = g_extern_node(g, "LayerNormalization", &e, in[2] == G_NONE ? 2 : 3, in);
    return g->err.status;
}

/* gelu (the erf form) as ONNX Gelu from opset 20; the generic arithmetic before, and for the
 * tanh form, whose arithmetic Gemma's exports have always carried. */
static ferry_status onnx_gelu(g_lower_ctx *c, const g_node *n, int *outs)
{
    if (opset_of(c) < 20 || n->op != G_GELU)
        return lower_activation(c, n, outs);
    g_graph *g = c->dst;
    int x = lw_in(c, n, 0);
    if (!g_ok(g))
        return g->err.status;
    g_extern e = g_extern_init("", "Gelu");
    g_extern_out(&e, 0, 0, g->values[x].dtype, &g->values[x].shape);
    outs[0] = g_extern_node(g, "Gelu", &e, 1, &x);
    return g->err.status;
}

/* Ops ONNX or onnxruntime's CPU kernels take at fp32 only: ScatterElements' add reduction has
 * no fp16 kernel in onnxruntime, TopK no bf16 type up to opset 23, Conv none below opset 22 and
 * no bf16 kernel in onnxruntime after, nor has Clip. */
static bool needs_f32(const g_graph *g, const g_node *n)
{
    ferry_dtype dt = g->values[n->in[0]].dtype;
    bool no_bf16 = n->op == G_TOPK || n->op == G_CONV || n->op == G_CLIP;
    return (n->op == G_SCATTER_ADD && dt != FERRY_F32) || (no_bf16 && dt == FERRY_BF16);
}

/* The op over its float inputs cast to fp32, its float outputs cast back. */
static ferry_status lower_in_f32(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    int in[G_MAX_IN];
    ferry_dtype dt = c->src->values[n->in[0]].dtype;
    for (int k = 0; k < n->n_in; k++) {
        in[k] = lw_in(c, n, k);
        char name[32];
        snprintf(name, sizeof name, "Cast_%d", k);
        if (in[k] != G_NONE && g->values[in[k]].dtype == dt)
            in[k] = g_cast(g, name, in[k], FERRY_F32);
    }
    int id = g_add_node(g, n->op, g_op_name(n->op), n->n_in, in, &n->a);
    for (int k = 0; k < n->n_out && id != G_NONE; k++) {
        int y = g->nodes[id].out[k];
        char name[32];
        snprintf(name, sizeof name, "Cast_back_%d", k);
        outs[k] = g->values[y].dtype == FERRY_F32 ? g_cast(g, name, y, dt) : y;
    }
    return g->err.status;
}

g_legality onnx_legal(const g_target *t, const g_graph *g, const g_node *n)
{
    (void)t;
    if (g_op_is_semantic(n->op) || needs_f32(g, n))
        return G_LOWER;
    if (n->op == G_MATMUL && n->a.transpose_b && g->values[n->in[0]].shape.rank != 2)
        return G_LOWER; /* only ever built 2-D here; a generic graph may hold others */
    return G_NATIVE;
}

g_lower_fn onnx_primitive_lowering(g_op op)
{
    switch (op) {
    case G_SCATTER_ADD: case G_TOPK: case G_CONV: case G_CLIP: return lower_in_f32;
    default: return NULL;
    }
}

static g_lower_fn onnx_lowering(const g_target *t, g_op op)
{
    (void)t;
    switch (op) {
    case G_LINEAR: return onnx_lower_linear;
    case G_EMBEDDING: return onnx_embedding;
    case G_MOE: return onnx_sparse_moe;
    case G_LAYER_NORM: return onnx_lower_layer_norm;
    case G_GELU: return onnx_gelu;
    default: return onnx_primitive_lowering(op);
    }
}

const g_target onnx_standard_target = {.name = "onnx-standard", .legal = onnx_legal,
                                       .lowering = onnx_lowering};
