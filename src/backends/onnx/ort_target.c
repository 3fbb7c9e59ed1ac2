/* ort_target.c — the ort-cpu, ort-cuda, ort-webgpu and ort-dml targets: the ONNX graph with
 * onnxruntime's fused kernels (com.microsoft contrib ops) where that provider has them, emitted
 * straight from the semantic ops, never found by matching ferry's own output:
 *
 *   rms_norm          RMSNormalization(x, w + offset) (opset 23, standard; axis -1, fp32 stash),
 *                     SimplifiedLayerNormalization, onnxruntime's own, at older opsets
 *   skip_rms_norm     SkipSimplifiedLayerNormalization(x, skip, w + offset) -> out 0 and 3 (sum)
 *   skip_layer_norm   SkipLayerNormalization(x, skip, w, [b]) -> out 0 and 3 (sum), except
 *                     on cpu (the add and LayerNormalization, as for onnx-standard)
 *   linear, int4/8    MatMulNBits(x, codes, scales, [zero points], -, [bias])
 *   linears sharing   one MatMul / MatMulNBits over their weights joined (q, k, v; gate, up),
 *     their input     then a Slice per linear: the weight recipe joins the checkpoint tensors
 *                     as they stream, named after them ("...self_attn.q_k_v_proj.weight")
 *   embedding, int4/8 GatherBlockQuantized(codes as [vocab, n*bits/8], ids, scales, [zeros])
 *   gelu, gelu_tanh   Gelu, FastGelu (the erf and the tanh forms)
 *   attention + cache GroupQueryAttention(q, k, v, past_k, past_v, seqlens_k, total_len,
 *                     cos, sin, position_ids, bias, -, -, -, [q_norm, k_norm], [query_seqlens]),
 *                     q, k and v one packed input (no key, no value) where they are all of
 *                     one joined projection, sliced in order:
 *                     rotary inside when q and k come straight from rope nodes with static
 *                     tables (the rope nodes are then left dead); the bias is ferry's own mask
 *                     (causal, padding, window) as 0 / most negative, so left padding and given
 *                     masks keep their meaning
 *   other attention   MultiHeadAttention(q, K, V, -, -, bias) over the keys and values the
 *                     plain cache step leaves (joined, or written in place), repeated to every
 *                     query head; an encoder's (no cache; a padding mask as key_padding_mask,
 *                     or no mask at all) MultiHeadAttention(q, k, v, -, [key_padding_mask])
 *   rope              RotaryEmbedding where attention does not rotate; a rope whose table is
 *                     not one fixed table over one position per token (dynamic, longrope,
 *                     M-RoPE, 2-D) takes the generic lowering on every provider
 *
 * The providers differ as the guide's table says:
 *             cache: first call  cache: later calls     no cache             rope
 *   cpu       GQA, rotary inside GQA, rotary inside     plain ops            plain / inside
 *   cuda      MHA                GQA, rotary + q/k norm MHA                  RotaryEmbedding /
 *                                inside (fp16; MHA at                        inside
 *                                fp32: no CUDA kernel)
 *   webgpu    GQA                GQA                    MHA                  RotaryEmbedding
 *   dml       MHA                MHA                    MHA                  RotaryEmbedding
 * onnxruntime has a CPU kernel for every one of these ops, and runs all but GroupQueryAttention
 * with q/k norms (cuda and webgpu only), so the tests run every graph without those norms.
 * GroupQueryAttention takes heads of a multiple of 8 only, and rotates inside heads of a
 * multiple of 16 only: other heads rotate before it (as on webgpu), and heads of no multiple
 * of 8 get the attention without GroupQueryAttention (MultiHeadAttention, plain ops on cpu).
 *
 * Attention and rope are in ort_attention.c, mixtures of experts (MoE on cuda, and on cpu at
 * fp32) in ort_moe.c. Everything else lowers as for onnx-standard (float linears included). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/onnx/ort_lowering.h"
#include "util/dtype.h"

/* w + offset as a weight recipe when w is a stored weight, else computed. */
int ort_offset_weight(g_lower_ctx *c, const g_node *n, int k, double offset)
{
    const g_value *w = lw_src(c, n, k);
    if (offset == 0.0)
        return lw_in(c, n, k);
    if (w->kind == GV_WEIGHT) {
        g_weight r = w->weight;
        r.offset += offset;
        return g_weight_value(c->dst, w->name, &r);
    }
    g_graph *g = c->dst;
    int wv = lw_in(c, n, k);
    return g_binary(g, G_ADD, "WeightOffset", wv, g_scalar_f(g, g->values[wv].dtype, offset));
}

static ferry_status ort_rms_norm(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    bool skip = n->op == G_SKIP_RMS_NORM;
    int x = lw_in(c, n, 0);
    if (!g_ok(g))
        return g->err.status;
    const g_value *xs = &g->values[x]; /* read before anything adds values */
    const char *op = skip                          ? "SkipSimplifiedLayerNormalization"
                     : onnx_opset(ort_cfg(c)) >= 23 ? "RMSNormalization"
                                                   : "SimplifiedLayerNormalization";
    g_extern e = g_extern_init(skip ? "com.microsoft" : "", op);
    g_extern_float(&e, "epsilon", n->a.eps);
    if (!skip) {
        g_extern_int(&e, "axis", -1);
        g_extern_int(&e, "stash_type", 1);
    }
    g_extern_out(&e, 0, 0, xs->dtype, &xs->shape);
    if (skip)
        g_extern_out(&e, 1, 3, xs->dtype, &xs->shape);
    int in[3] = {x, skip ? lw_in(c, n, 1) : ort_offset_weight(c, n, 1, n->a.offset), G_NONE};
    if (skip)
        in[2] = ort_offset_weight(c, n, 2, n->a.offset);
    int y = g_extern_node(g, op, &e, skip ? 3 : 2, in);
    outs[0] = y;
    if (skip)
        outs[1] = g_node_out(g, y, 1);
    return g->err.status;
}

/* A residual add fused with a layer norm as onnxruntime's SkipLayerNormalization -> out 0 and
 * 3 (the sum). Not on cpu: its CPU kernel takes several times longer than the add and the
 * standard LayerNormalization it replaces (all-MiniLM-L6-v2, batch 32 x 128 tokens). */
static ferry_status ort_skip_layer_norm(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    if (onnx_fusions(ort_cfg(c)) == ORT_CPU)
        return lower_skip_layer_norm(c, n, outs);
    int x = lw_in(c, n, 0);
    if (!g_ok(g))
        return g->err.status;
    const g_value *xs = &g->values[x];
    g_extern e = g_extern_init("com.microsoft", "SkipLayerNormalization");
    g_extern_float(&e, "epsilon", n->a.eps);
    g_extern_out(&e, 0, 0, xs->dtype, &xs->shape);
    g_extern_out(&e, 1, 3, xs->dtype, &xs->shape);
    int in[4], n_in = 0;
    for (int k = 0; k < n->n_in; k++)
        in[n_in++] = lw_in(c, n, k);
    int y = g_extern_node(g, "SkipLayerNormalization", &e, n_in, in);
    outs[0] = y;
    outs[1] = g_node_out(g, y, 1);
    return g->err.status;
}

/* MatMulNBits of x by the quantized weight `name` with recipe `w`. B holds whole blocks: when
 * the rows do not divide into them, the codes are stored padded (a recipe of its own, named
 * "<name>_padded"; GatherBlockQuantized reads unpadded rows). */
static int matmul_nbits(g_lower_ctx *c, int x, const char *name, const g_weight *w, int bias)
{
    g_graph *g = c->dst;
    const w_quant *q = &w->quant;
    int64_t rows, cols;
    w_matrix(w, &rows, &cols);
    g_weight r = *w;
    char padded[600];
    bool pad = cols % q->block != 0;
    r.quant.packing = pad ? W_PACK_PAD_BLOCKS : W_PACK_ROWS;
    snprintf(padded, sizeof padded, "%s%s", name, pad ? "_padded" : "");
    int wv = g_weight_value(g, padded, &r);
    int accuracy = ort_cfg(c)->quantizer.accuracy_level; /* configure made it 0-4 */
    g_extern e = g_extern_init("com.microsoft", "MatMulNBits");
    g_extern_int(&e, "K", cols);
    g_extern_int(&e, "N", rows);
    g_extern_int(&e, "bits", q->bits);
    g_extern_int(&e, "block_size", q->block);
    g_extern_int(&e, "accuracy_level", accuracy);
    if (!g_ok(g))
        return G_NONE;
    g_shape ys = g->values[x].shape;
    ys.d[ys.rank - 1] = g_dim_const(rows);
    g_extern_out(&e, 0, 0, g->values[x].dtype, &ys);
    e.part[1] = W_PART_CODES;
    e.part[2] = W_PART_SCALES;
    int in[6] = {x, wv, wv, G_NONE, G_NONE, bias};
    if (!q->symmetric) {
        in[3] = wv;
        e.part[3] = W_PART_ZEROS;
    }
    return g_extern_node(g, "MatMulNBits", &e, bias == G_NONE ? 4 : 6, in);
}

/* ---- linears sharing an input ---- */

#define MAX_PACK W_INLINE_SOURCES

/* A plain stored weight (or bias) that can be one source of a joined recipe: one tensor read
 * as it is stored. */
static bool joinable(const g_value *v)
{
    const g_weight *w = v ? &v->weight : NULL;
    return w && v->kind == GV_WEIGHT && w->n_src == 1 && w->row_end == 0 && w->offset == 0 &&
           !w->transpose && !w->src_transposed && !w->stack && !w->flatten &&
           w->perm == W_PERM_NONE;
}

/* Whether linear `s` can share one matmul with linear `n`: the same input, weights of one
 * kind (dtype, quantization, input size) and a bias for both or neither. */
static bool packs_with(const g_graph *src, const g_node *n, const g_node *s)
{
    if (s->op != G_LINEAR || s->dead || s->in[0] != n->in[0])
        return false;
    const g_value *a = &src->values[n->in[1]], *b = &src->values[s->in[1]];
    bool bias_a = n->n_in > 2 && n->in[2] != G_NONE, bias_b = s->n_in > 2 && s->in[2] != G_NONE;
    if (!joinable(a) || !joinable(b) || bias_a != bias_b ||
        (bias_a && (!joinable(&src->values[n->in[2]]) || !joinable(&src->values[s->in[2]]) ||
                    src->values[n->in[2]].weight.src[0]->dtype !=
                        src->values[s->in[2]].weight.src[0]->dtype)))
        return false;
    return a->weight.dtype == b->weight.dtype && a->weight.src[0]->ndim == 2 &&
           a->weight.src[0]->dtype == b->weight.src[0]->dtype && /* a join reads one dtype */
           b->weight.src[0]->ndim == 2 && a->weight.src[0]->shape[1] == b->weight.src[0]->shape[1] &&
           memcmp(&a->weight.quant, &b->weight.quant, sizeof a->weight.quant) == 0;
}

/* "model.layers.0.self_attn.q_proj.weight" + k + v -> "model.layers.0.self_attn.q_k_v_proj.weight":
 * the common prefix and suffix around the differing middles joined by '_'. */
static void joined_name(const char *const *names, int n, char *buf, size_t size)
{
    size_t pre = strlen(names[0]), suf = pre;
    for (int i = 1; i < n; i++) {
        size_t len = strlen(names[i]), p = 0, s = 0;
        while (p < pre && p < len && names[i][p] == names[0][p])
            p++;
        size_t len0 = strlen(names[0]);
        while (s < suf && s < len && s < len0 && names[i][len - 1 - s] == names[0][len0 - 1 - s])
            s++;
        pre = p, suf = s;
    }
    size_t used = (size_t)snprintf(buf, size, "%.*s", (int)pre, names[0]);
    for (int i = 0; i < n && used < size; i++) {
        size_t len = strlen(names[i]);
        size_t mid = len > pre + suf ? len - pre - suf : 0;
        used += (size_t)snprintf(buf + used, size - used, "%s%.*s", i ? "_" : "", (int)mid,
                                 names[i] + pre);
    }
    if (used < size)
        snprintf(buf + used, size - used, "%s", names[0] + strlen(names[0]) - suf);
}

/* Lowers the linears that read n's input with n as one matmul over their joined weights (n is
 * the first of them); each one's output is a slice, remembered for when its turn comes. False
 * when n has no partner. */
static bool lower_packed(g_lower_ctx *c, const g_node *n, int *outs)
{
    const g_graph *src = c->src;
    const g_node *pack[MAX_PACK];
    int np = 0;
    size_t first = (size_t)(n - src->nodes);
    for (size_t i = first; i < src->n_nodes && np < MAX_PACK; i++)
        if (&src->nodes[i] == n || packs_with(src, n, &src->nodes[i]))
            pack[np++] = &src->nodes[i];
    if (np < 2)
        return false;
    g_graph *g = c->dst;
    const char *wnames[MAX_PACK], *bnames[MAX_PACK], *scopes[MAX_PACK];
    g_weight w = src->values[n->in[1]].weight, b = {0};
    bool bias = n->n_in > 2 && n->in[2] != G_NONE;
    if (bias)
        b = src->values[n->in[2]].weight;
    w.n_src = b.n_src = np;
    w.concat_axis = b.concat_axis = 0;
    for (int i = 0; i < np; i++) {
        const g_value *wi = &src->values[pack[i]->in[1]];
        w.src[i] = wi->weight.src[0];
        wnames[i] = wi->name;
        scopes[i] = pack[i]->name;
        if (bias) {
            b.src[i] = src->values[pack[i]->in[2]].weight.src[0];
            bnames[i] = src->values[pack[i]->in[2]].name;
        }
    }
    char wname[512], bname[512], scope[512], saved[sizeof g->scope];
    joined_name(wnames, np, wname, sizeof wname);
    joined_name(scopes, np, scope, sizeof scope);
    lw_scope_push(c, saved, sizeof saved, scope);
    int x = lw_in(c, n, 0), bv = G_NONE, y;
    if (bias) {
        joined_name(bnames, np, bname, sizeof bname);
        bv = g_weight_value(g, bname, &b);
    }
    if (w.quant.bits) {
        y = matmul_nbits(c, x, wname, &w, bv);
    } else {
        w.transpose = true; /* [in, out] for a plain MatMul */
        y = g_matmul(g, "MatMul", x, g_weight_value(g, wname, &w), false);
        if (bias)
            y = g_binary(g, G_ADD, "Add", y, bv);
    }
    int64_t at = 0;
    for (int i = 0; i < np && g_ok(g); i++) {
        int64_t rows = w.src[i]->shape[0];
        char name[64];
        snprintf(name, sizeof name, "Slice_%d", i);
        int part = g_slice(g, name, y, g->values[y].shape.rank - 1, at, at + rows);
        at += rows;
        lw_refine(c, part, pack[i], 0);
        if (i == 0)
            outs[0] = part;
        else
            lw_memo_add(c, &(lw_memo){.kind = LW_MEMO_PACKED,
                                      .in_a = (int)(pack[i] - src->nodes), .out_a = part});
    }
    lw_scope_pop(c, saved);
    return true;
}

static ferry_status ort_gelu(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    int x = lw_in(c, n, 0);
    if (!g_ok(g))
        return g->err.status;
    const char *op = n->op == G_GELU ? "Gelu" : "FastGelu";
    g_extern e = g_extern_init("com.microsoft", op);
    g_extern_out(&e, 0, 0, g->values[x].dtype, &g->values[x].shape);
    outs[0] = g_extern_node(g, op, &e, 1, &x);
    return g->err.status;
}

static ferry_status ort_linear(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    int self = (int)(n - c->src->nodes);
    for (size_t i = 0; i < c->n_memo; i++)
        if (c->memo[i].kind == LW_MEMO_PACKED && c->memo[i].in_a == self) {
            outs[0] = c->memo[i].out_a; /* made with the first linear of its pack */
            return g->err.status;
        }
    if (lower_packed(c, n, outs))
        return g->err.status;
    const g_value *w = lw_src(c, n, 1);
    if (w->kind != GV_WEIGHT || !w->weight.quant.bits)
        return onnx_lower_linear(c, n, outs);
    int bias = lw_in(c, n, 2), x = lw_in(c, n, 0);
    outs[0] = matmul_nbits(c, x, w->name, &w->weight, bias);
    lw_refine(c, outs[0], n, 0);
    return g->err.status;
}

static ferry_status ort_embedding(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    const g_value *w = lw_src(c, n, 0);
    if (w->kind != GV_WEIGHT || !w->weight.quant.bits)
        return lower_embedding(c, n, outs);
    const w_quant *q = &w->weight.quant;
    g_extern e = g_extern_init("com.microsoft", "GatherBlockQuantized");
    g_extern_int(&e, "bits", q->bits);
    g_extern_int(&e, "block_size", q->block);
    g_extern_int(&e, "gather_axis", 0);
    g_extern_int(&e, "quantize_axis", 1);
    int wv = lw_in(c, n, 0), ids = lw_in(c, n, 1);
    g_shape ys = g->values[ids].shape;
    ys.d[ys.rank++] = w->shape.d[1];
    g_extern_out(&e, 0, 0, w->dtype, &ys);
    e.part[0] = W_PART_CODES;
    e.part[2] = W_PART_SCALES;
    e.flat = 1u << 0;
    int in[4] = {wv, ids, wv, G_NONE};
    if (!q->symmetric) {
        in[3] = wv;
        e.part[3] = W_PART_ZEROS;
    }
    outs[0] = g_extern_node(g, "GatherBlockQuantized", &e, q->symmetric ? 3 : 4, in);
    lw_refine(c, outs[0], n, 0);
    return g->err.status;
}

static g_lower_fn ort_lowering(const g_target *t, g_op op)
{
    (void)t;
    switch (op) {
    case G_RMS_NORM: case G_SKIP_RMS_NORM: return ort_rms_norm;
    case G_LAYER_NORM: return onnx_lower_layer_norm;
    case G_SKIP_LAYER_NORM: return ort_skip_layer_norm;
    case G_LINEAR: return ort_linear;
    case G_EMBEDDING: return ort_embedding;
    case G_ATTENTION: return ort_attention;
    case G_ROPE: return ort_rope;
    case G_GELU: case G_GELU_TANH: return ort_gelu;
    case G_MOE: return ort_moe;
    default: return onnx_primitive_lowering(op);
    }
}

const g_target ort_cpu_target = {.name = "ort-cpu", .legal = onnx_legal, .lowering = ort_lowering};
const g_target ort_cuda_target = {.name = "ort-cuda", .legal = onnx_legal, .lowering = ort_lowering};
const g_target ort_webgpu_target = {.name = "ort-webgpu", .legal = onnx_legal,
                                    .lowering = ort_lowering};
const g_target ort_dml_target = {.name = "ort-dml", .legal = onnx_legal, .lowering = ort_lowering};
