/* openvino_target.c — the OpenVINO target: every semantic op lowered to OpenVINO's operations,
 * in the forms its CPU plugin fuses.
 *
 *   linear      MatMul(x, W, transpose_b) over the weight as stored ([out, in]); a block-
 *               quantized W is its decompression (printed as OpenVINO's compressed-weight
 *               pattern, Const u4/u8 → Convert → Subtract zero → Multiply scale → Reshape),
 *               which the plugin runs as a FullyConnected on the compressed weights
 *   embedding   Gather over the table, likewise decompressed when quantized
 *   attention   ScaledDotProductAttention (opset13) over [b, h, s, d] queries and the keys and
 *               values as the cache step leaves them, ferry's mask as its additive bias (a
 *               sliding window's in the form paged attention reads: window_bias; without a
 *               mask a scalar zero, the spec's form of none). Grouped
 *               kv heads reach it as Unsqueeze → Broadcast(bidirectional) → Reshape: the
 *               pattern the CPU plugin folds, with the ReadValue → Gather(beam_idx) → Concat →
 *               Assign cache around it, into one attention node that keeps the cache itself and
 *               never materialises the repeat. SDPA takes no softcap: a softcapped attention
 *               keeps the generic lowering (grouped matmuls, softmax).
 *   moe         the "tiled" block the CPU plugin turns into GatherMatmul, which runs only the
 *               chosen experts: tokens flattened to x [T, h], Tile(x, [E, 1]) reshaped to
 *               [E, T, h], MatMul(·, W, transpose_b) by the gate, up and down stacks [E, out, in]
 *               (act(gate) * up between), reshaped to [E, T, h], times the routing weights
 *               scattered into zeros [T, E] and transposed to [E, T, 1], summed over the
 *               experts. Quantized stacks are decompressed as a linear's weight is ([E, out,
 *               in/block, block] codes), which the pass also takes. Kept generic (over the same
 *               decompressed stacks): Mixtral's fp32 scaling of a lower-precision export (the
 *               pattern multiplies in one dtype), gate and up stored as one tensor. Where the
 *               plugin does not fuse it (its pass is x64's) every expert runs, an unchosen one
 *               times zero: an fp16 overflow there would be NaN, which the generic gather form
 *               avoids.
 * Everything else takes the generic lowerings (ir/lower/). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/openvino/openvino.h"

static const int64_t to_bnsd[4] = {0, 2, 1, 3};

static g_legality openvino_legal(const g_target *t, const g_graph *g, const g_node *n)
{
    (void)t;
    (void)g;
    return g_op_is_semantic(n->op) ? G_LOWER : G_NATIVE;
}

/* Quantized recipe `w` as a new weight `name` decompressed to float. OpenVINO's pattern
 * reshapes [out, in/block, block] codes ([E, out, in/block, block] for a stack of experts) to
 * [out, in], so a row must hold whole blocks. */
static int decompressed(g_graph *g, const char *node, const char *name, const g_weight *w)
{
    int64_t rows, cols, block = w->quant.block;
    w_matrix(w, &rows, &cols);
    if (cols % block)
        return g_fail(g, FERRY_ERR_UNSUPPORTED, "OpenVINO cannot hold '%s' in blocks of %lld: "
                      "its rows of %lld are not whole blocks, and OpenVINO's compressed weights "
                      "are [out, in/block, block] (choose a block size that divides %lld)",
                      name, (long long)block, (long long)cols, (long long)cols);
    g_weight r = *w;
    /* 4-bit zero points are packed a whole byte per row; with an odd number of blocks a row
     * that is not the flat stream a u4 constant is, so they are stored one a byte (u8) */
    bool bytes = r.quant.bits == 4 && !r.quant.symmetric && (cols / block) % 2;
    r.quant.packing = bytes ? W_PACK_ZERO_BYTES : W_PACK_ROWS;
    return g_dequantize(g, node, g_weight_value(g, name, &r));
}

/* The destination value of weight input k of `n`: decompressed to float (by the node `node`)
 * when block-quantized. */
static int float_weight_by(g_lower_ctx *c, const g_node *n, int k, const char *node)
{
    const g_value *w = lw_src(c, n, k);
    if (!w || w->kind != GV_WEIGHT || !w->weight.quant.bits)
        return lw_in(c, n, k);
    return decompressed(c->dst, node, w->name, &w->weight);
}

static int float_weight(g_lower_ctx *c, const g_node *n, int k)
{
    return float_weight_by(c, n, k, "Decompress");
}

static ferry_status ov_linear(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    int y = g_matmul(g, "MatMul", lw_in(c, n, 0), float_weight(c, n, 1), true);
    if (n->n_in > 2 && n->in[2] != G_NONE)
        y = g_binary(g, G_ADD, "Add", y, lw_in(c, n, 2));
    outs[0] = y;
    return g->err.status;
}

static ferry_status ov_embedding(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    outs[0] = g_gather(g, "Gather", float_weight(c, n, 0), lw_in(c, n, 1), 0);
    return g->err.status;
}

/* [b, kvh, t, d] keys or values as the h query heads read them: Unsqueeze → Broadcast →
 * Reshape, which the CPU plugin recognises instead of repeating them. */
static int repeat_kv(g_graph *g, const char *which, int x, int64_t groups, int64_t h, int64_t d)
{
    char name[48];
    int64_t two = 2, times[5] = {1, 1, groups, 1, 1}, bhtd[4] = {0, h, -1, d};
    snprintf(name, sizeof name, "Unsqueeze_%s", which);
    x = g_unsqueeze(g, name, x, 1, &two);
    snprintf(name, sizeof name, "Broadcast_%s", which);
    x = g_expand(g, name, x, g_const_i64(g, 5, times));
    snprintf(name, sizeof name, "Reshape_%s", which);
    return g_reshape_spec(g, name, x, 4, bhtd);
}

/* An extern of OpenVINO's `version`.`type` with one output of `dt` and `shape`. */
static int ov_op(g_graph *g, const char *version, const char *type, const char *name,
                 ferry_dtype dt, const g_shape *shape, int n_in, const int *in)
{
    g_extern e = g_extern_init(version, type);
    g_extern_out(&e, 0, 0, dt, shape);
    return g_extern_node(g, name, &e, n_in, in);
}

/* A sliding window's additive mask [b, 1, s, t], in the one form OpenVINO's rewrite into paged
 * attention (openvino-genai's PA backend and ContinuousBatchingPipeline) reads a window from:
 * the gpt-oss pattern of its StateManagementPattern (transformations/sdpa_to_paged_attention/
 * state_management_pattern.cpp, OpenVINO 2026.4),
 *   Slice(Select(Broadcast(BitwiseAnd(BitwiseAnd(_, BitwiseAnd(BitwiseAnd(_, Greater(kv,
 *       Add(q, Constant -w))), _)), _)), _, _)) -> SDPA's mask,
 * taking w from the Constant. Any other form it drops without a word, and every layer is causal
 * there (past the window, tokens parted from transformers'). The mask is
 * ferry's (lw_attention_mask): causal and padding (each `_` above), and keys within w real
 * tokens of the query (kv, q: the running count of real tokens), as the generic form. */
static int window_bias(g_lower_ctx *c, const g_node *n, int q, ferry_dtype dt)
{
    g_graph *g = c->dst;
    const g_attn_opts *o = n->a.attn;
    int mask = lw_in(c, n, 3);
    int64_t key = o->sliding_window * 64 + (int64_t)dt;
    for (size_t i = 0; i < c->n_memo; i++)
        if (c->memo[i].kind == LW_MEMO_WINDOW_BIAS && c->memo[i].in_a == mask &&
            c->memo[i].key == key)
            return c->memo[i].out_a;
    int causal = lw_attention_mask(c, mask, q, G_NONE, G_MASK_CAUSAL, 0); /* [b, 1, 1, s, t] */
    char saved[sizeof g->scope];
    lw_shared_scope_push(c, saved, sizeof saved, "sliding_bias_%lld",
                         (long long)o->sliding_window);
    const g_shape *qs = &c->src->values[n->in[0]].shape, *ms = &c->src->values[n->in[3]].shape;
    g_shape s4 = {.rank = 4, .d = {qs->d[0], g_dim_const(1), qs->d[1], ms->d[1]}};
    int m4 = g_reshape(g, "Reshape_mask", causal, 4, s4.d);
    int one = g_scalar_i64(g, 1);
    int t = g_gather(g, "Gather_t", g_shape_of(g, "Shape_t", mask, 0, G_END), one, 0);
    int s = g_gather(g, "Gather_s", g_shape_of(g, "Shape_s", q, 0, G_END), one, 0);
    int filled = g_cumsum(g, "CumSum_filled", mask, 1);                   /* [b, t] */
    int q_idx = g_range(g, "Range_q", g_binary(g, G_SUB, "Sub_first", t, s), t, one);
    int q_filled = g_gather(g, "Gather_q_filled", filled, q_idx, 1);      /* [b, s] */
    int64_t kv_axes[2] = {1, 2}, q_axes[2] = {1, 3};
    int kv = g_unsqueeze(g, "Unsqueeze_kv", filled, 2, kv_axes);          /* [b, 1, 1, t] */
    int qc = g_unsqueeze(g, "Unsqueeze_q", q_filled, 2, q_axes);          /* [b, 1, s, 1] */
    int low = g_binary(g, G_ADD, "Add", qc, g_scalar_i64(g, -o->sliding_window));
    int inside = g_binary(g, G_GREATER, "Greater", kv, low);             /* [b, 1, s, t] */
    /* the pattern's four ANDs, the causal mask at each free input (x & m = x here) */
    int a1 = ov_op(g, "opset13", "BitwiseAnd", "BitwiseAnd_window", FERRY_BOOL, &s4, 2,
                   (int[]){m4, inside});
    int a2 = ov_op(g, "opset13", "BitwiseAnd", "BitwiseAnd_2", FERRY_BOOL, &s4, 2,
                   (int[]){a1, m4});
    int a3 = ov_op(g, "opset13", "BitwiseAnd", "BitwiseAnd_3", FERRY_BOOL, &s4, 2,
                   (int[]){m4, a2});
    int a4 = ov_op(g, "opset13", "BitwiseAnd", "BitwiseAnd_4", FERRY_BOOL, &s4, 2,
                   (int[]){a3, m4});
    int mask_shape = g_shape_of(g, "Shape_mask", a4, 0, G_END);
    int wide = ov_op(g, "opset3", "Broadcast", "Broadcast", FERRY_BOOL, &s4, 2,
                     (int[]){a4, mask_shape});
    int lowest = g_scalar_f(g, dt, lw_lowest(dt));
    int bias = g_where(g, "Where_bias", wide, g_scalar_f(g, dt, 0.0), lowest);
    int64_t big = INT64_MAX;
    int slice[5] = {bias, g_const_i64(g, 1, (int64_t[]){0}), -1, -1, -1};
    slice[2] = g_const_i64(g, 1, &big);
    slice[3] = g_const_i64(g, 1, (int64_t[]){1});
    slice[4] = g_const_i64(g, 1, (int64_t[]){3});
    bias = ov_op(g, "opset8", "Slice", "Slice", dt, &s4, 5, slice);
    lw_scope_pop(c, saved);
    lw_memo_add(c, &(lw_memo){.kind = LW_MEMO_WINDOW_BIAS, .in_a = mask, .key = key,
                              .out_a = bias});
    return bias;
}

static ferry_status ov_attention(g_lower_ctx *c, const g_node *n, int *outs)
{
    const g_attn_opts *o = n->a.attn;
    if (o->softcap > 0)
        return lower_attention(c, n, outs);
    g_graph *g = c->dst;
    int q = lw_in(c, n, 0), k, v;
    lw_attention_kv(c, n, &k, &v, outs);
    if (!g_ok(g))
        return g->err.status;
    ferry_dtype dt = g->values[q].dtype;
    int64_t h = o->num_heads, kvh = o->num_kv_heads, d = o->head_dim;
    int bias = o->sliding_window > 0 && o->mask == G_MASK_CAUSAL ? window_bias(c, n, q, dt)
                                                                 : lw_attention_bias(c, n, q, dt);
    /* every key visible: the spec's "scalar zero" mask, which stands for none and keeps the
     * scale input in its place */
    if (o->mask == G_MASK_NONE)
        bias = g_scalar_f(g, dt, 0.0);
    int position_bias = lw_in(c, n, 7); /* [b or 1, h, s, t], added to the mask's */
    if (position_bias != G_NONE)
        bias = g_binary(g, G_ADD, "Add_position_bias", bias,
                        g_cast(g, "Cast_position_bias", position_bias, dt));
    if (h != kvh) {
        k = repeat_kv(g, "k", k, h / kvh, h, d);
        v = repeat_kv(g, "v", v, h / kvh, h, d);
    }
    int qt = g_transpose(g, "Transpose_q", q, 4, to_bnsd);
    if (!g_ok(g))
        return g->err.status;
    g_extern e = g_extern_init("opset13", "ScaledDotProductAttention");
    g_extern_bool(&e, "causal", false); /* ferry's mask says what each query sees */
    g_shape out = g->values[qt].shape;  /* [b, h, s, d] */
    g_extern_out(&e, 0, 0, dt, &out);
    int in[5] = {qt, k, v, bias, g_scalar_f(g, dt, o->scale)};
    int y = g_extern_node(g, "ScaledDotProductAttention", &e, 5, in);
    int64_t out3[3] = {0, 0, h * d};
    y = g_reshape_spec(g, "Reshape_out", g_transpose(g, "Transpose_out", y, 4, to_bnsd), 3, out3);
    lw_refine(c, y, n, 0);
    outs[0] = y;
    return g->err.status;
}

/* Whether weight `w` stacks each expert's gate and up tensors (stack_group 2), which
 * expert_half can part. */
static bool grouped_stack(const g_value *w)
{
    return w && w->kind == GV_WEIGHT && w->weight.stack && w->weight.stack_group == 2;
}

/* The gate (which 0) or up (1) rows of a moe node's gate_up stack (grouped_stack) as their own
 * stack [E, ff, h], quantized as the stack is and then decompressed. */
static int expert_half(g_lower_ctx *c, const g_node *n, int which)
{
    g_graph *g = c->dst;
    const g_value *w = lw_src(c, n, 2);
    int experts = w->weight.n_src / 2;
    const st_tensor **list = malloc((size_t)experts * sizeof *list);
    if (!list)
        return g_fail(g, FERRY_ERR_NOMEM, "out of memory");
    for (int e = 0; e < experts; e++)
        list[e] = w_src(&w->weight, 2 * e + which);
    g_weight r = w_join(list, experts, true, w->weight.dtype);
    r.saturate = w->weight.saturate;
    r.quant = w->weight.quant;
    char name[512];
    snprintf(name, sizeof name, "%s.%s", w->name, which ? "up" : "gate");
    int v = r.quant.bits ? decompressed(g, which ? "Decompress_up" : "Decompress_gate", name, &r)
                         : g_weight_value(g, name, &r);
    free(list);
    return v;
}

/* MatMul(a [E, T, in], b [E, out, in], transpose_b) -> [E, T, out]: the batched form IR matmul
 * (transposing only 2-D weights) does not print. */
static int batched_matmul_bt(g_graph *g, const char *name, int a, int b)
{
    g_extern e = g_extern_init("opset1", "MatMul");
    g_extern_bool(&e, "transpose_a", false);
    g_extern_bool(&e, "transpose_b", true);
    if (!g_ok(g))
        return G_NONE;
    g_shape out = g->values[a].shape;
    out.d[2] = g->values[b].shape.d[1];
    g_extern_out(&e, 0, 0, g->values[a].dtype, &out);
    int in[2] = {a, b};
    return g_extern_node(g, name, &e, 2, in);
}

static ferry_status ov_moe(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    const g_moe_opts *o = n->a.moe;
    const g_value *xs = lw_src(c, n, 0);
    ferry_dtype dt = xs->dtype;
    bool own_up = n->n_in > 4 && n->in[4] != G_NONE;
    if ((o->scale_f32 && dt != FERRY_F32) || (!own_up && !grouped_stack(lw_src(c, n, 2))))
        return lower_moe_over(c, n, float_weight_by(c, n, 2, "Decompress_gate_up"),
                              float_weight_by(c, n, 3, "Decompress_down"),
                              own_up ? float_weight_by(c, n, 4, "Decompress_up") : G_NONE, outs);
    int gate = own_up ? float_weight_by(c, n, 2, "Decompress_gate") : expert_half(c, n, 0);
    int up = own_up ? float_weight_by(c, n, 4, "Decompress_up") : expert_half(c, n, 1);
    int down = float_weight_by(c, n, 3, "Decompress_down");
    if (!g_ok(g))
        return g->err.status;
    int64_t experts = o->num_experts, h = 0;
    g_dim_is_const(lw_src(c, n, 3)->shape.d[1], &h);
    int x = g_reshape_spec(g, "Reshape_tokens", lw_in(c, n, 0), 2, (int64_t[]){-1, h});
    int logits = g_reshape_spec(g, "Reshape_logits", lw_in(c, n, 1), 2,
                                (int64_t[]){-1, experts});
    int chosen, w = lower_moe_route(g, o, logits, dt, &chosen);
    /* routing weights [T, E], zero where an expert was not chosen, as [E, T, 1] */
    int zeros = g_expand(g, "Zeros", g_scalar_f(g, dt, 0.0), g_shape_of(g, "ShapeOf", logits,
                                                                          0, 2));
    int dense = g_scatter_elements(g, "ScatterElements", zeros, chosen, w, 1);
    int64_t swap[2] = {1, 0}, last = -1;
    int routing = g_unsqueeze(g, "Unsqueeze_routing", g_transpose(g, "Transpose_routing", dense,
                                                                  2, swap), 1, &last);
    /* every expert over every token, which the plugin narrows to the chosen ones */
    g_extern tile = g_extern_init("opset1", "Tile");
    if (!g_ok(g))
        return g->err.status;
    g_shape tiled_shape = g->values[x].shape;
    tiled_shape.d[0] = g_dim_scale(tiled_shape.d[0], experts);
    g_extern_out(&tile, 0, 0, dt, &tiled_shape);
    int tile_in[2] = {x, g_const_i64(g, 2, (int64_t[]){experts, 1})};
    int tiled = g_extern_node(g, "Tile", &tile, 2, tile_in);
    int64_t per_expert[3] = {experts, -1, h};
    int xe = g_reshape_spec(g, "Reshape_experts", tiled, 3, per_expert);
    int a = g_unary(g, o->act, "act_fn", batched_matmul_bt(g, "MatMul_gate", xe, gate));
    a = g_binary(g, G_MUL, "Mul_up", a, batched_matmul_bt(g, "MatMul_up", xe, up));
    int y = g_reshape_spec(g, "Reshape_down",
                           batched_matmul_bt(g, "MatMul_down", a, down), 3, per_expert);
    int64_t first = 0;
    int sum = g_reduce(g, G_REDUCE_SUM, "ReduceSum", g_binary(g, G_MUL, "Mul_routing", y, routing),
                       1, &first, false);
    int out = g_reshape(g, "Reshape_out", sum, xs->shape.rank, xs->shape.d);
    lw_refine(c, out, n, 0);
    outs[0] = out;
    return g->err.status;
}

static g_lower_fn openvino_lowering(const g_target *t, g_op op)
{
    (void)t;
    switch (op) {
    case G_LINEAR: return ov_linear;
    case G_EMBEDDING: return ov_embedding;
    case G_ATTENTION: return ov_attention;
    case G_MOE: return ov_moe;
    default: return NULL;
    }
}

const g_target openvino_target = {.name = "openvino", .legal = openvino_legal,
                                  .lowering = openvino_lowering};
