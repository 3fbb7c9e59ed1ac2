/* op_graph.c — ferry-op-graph CASE OUTDIR [--dynamic] [--format F] [--ort-fusions EP]: a graph
 * holding one semantic op (or two, where the case is about how they share lowered pieces) over
 * weights read from OUTDIR/weights.safetensors, taken through a backend the way an export is
 * (target, finish, placement, writer): ONNX by default (model.onnx + model.onnx.data, its
 * standard target or, with --ort-fusions, onnxruntime's), OpenVINO (openvino_model.xml/.bin,
 * its cache as inputs and outputs) or pt2 (model.pt2). `ferry-op-graph --list` prints the case
 * names.
 *
 * tests/python/test_op_conformance.py writes the weights, runs each model in its runtime
 * (onnxruntime, OpenVINO, torch.export.load) and compares it with transformers' and torch's
 * own functions. Checking ops one at a time makes a lowering error name its op, instead of
 * showing up somewhere in a whole model's logits, and reaches settings no shipped family uses
 * yet (partial rotary, yarn, longrope, M-RoPE, a vision tower's 2-D rope, softcap, a given mask,
 * attention without a mask, a mixture of experts).
 * The Python side mirrors the table below (options and shapes); it checks with --list that it
 * covers every case.
 *
 * Shapes: batch B, sequence S and past P are the constants below, or with --dynamic the symbols
 * batch, sequence and past_sequence (examples B, S, P). A static cache always holds CACHE_LEN
 * rows. Test-only: built with FERRY_TESTS, not installed, not a ctest. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "ir/ir.h"
#include "model/safetensors.h"

enum {
    B = 2, S = 5, P = 3, CACHE_LEN = 8,
    HIDDEN = 24,                       /* activations' last dim (norms take it from the weight) */
    ROPE_HEADS = 3, ROPE_HEAD_DIM = 16,
    ATTN_HEAD_DIM = 8,
    PICKS = 4,               /* gather_elements / scatter_add: indices along the last axis */
    MOE_FF = 16,             /* moe: each expert's intermediate size (hidden: HIDDEN) */
};

typedef enum family {
    FAM_RMS_NORM, FAM_SKIP_RMS_NORM, FAM_LAYER_NORM, FAM_SKIP_LAYER_NORM, FAM_LINEAR,
    FAM_TIED, FAM_EMBEDDING, FAM_UNARY, FAM_REDUCE, FAM_GATHER_ELEMENTS, FAM_SCATTER_ADD,
    FAM_TOPK, FAM_CLIP, FAM_PAD, FAM_CONV, FAM_ROPE, FAM_TWO_ROPES, FAM_ATTENTION, FAM_MOE,
    FAM_COUNT
} family;

/* FAM_CONV: an extent of x that is the sequence symbol (S at static shapes), or twice it */
enum { SEQ = -1, TWO_SEQ = -2 };

typedef struct op_case {
    const char *name;
    family fam;
    ferry_dtype dtype;
    g_op op;                 /* FAM_UNARY: the activation or elementwise op; FAM_REDUCE: the
                                reduction */
    bool keepdims;           /* FAM_REDUCE: over the last axis, kept; else over axis 1 */
    double eps, offset, cap; /* norms; softcap */
    bool f32_weight;         /* rms norms: the weight multiplies in fp32 */
    bool bias;               /* layer_norm, skip_layer_norm, linear */
    g_rope_opts rope;        /* FAM_ROPE, FAM_TWO_ROPES */
    double theta_2;          /* FAM_TWO_ROPES: the second rope's theta, all else equal */
    bool long_2;             /* FAM_TWO_ROPES: the second rope's long factors doubled instead */
    g_attn_opts attn;        /* FAM_ATTENTION; scale 0 = head_dim^-0.5 */
    double lo, hi;           /* FAM_CLIP: the bounds, -INFINITY / INFINITY where absent */
    /* FAM_PAD over x [b, s, HIDDEN]: begin and end per axis, the value */
    int64_t pad_begin[3], pad_end[3];
    double pad_value;
    /* FAM_CONV: the options; x's extents after the batch (channels, then each spatial: a
     * constant, SEQ or TWO_SEQ) and the weight's; the bias is a graph input when .bias */
    g_conv_opts conv;
    int64_t conv_x[1 + G_CONV_MAX_SPATIAL], conv_w[2 + G_CONV_MAX_SPATIAL];
    /* FAM_CONV: the weight (and bias) read from the checkpoint by a weight recipe of their
     * rank, as a model's are, not given as graph inputs. FAM_LINEAR: the weight is stored
     * [in, out] (GPT-2's Conv1D; `in_out`), or is a 4-D [out, c, kh, kw] read flattened to
     * [out, c*kh*kw] (a patch embedding; `flatten`). */
    bool stored, in_out, flatten;
    /* FAM_MOE: the options, and the checkpoint keys of each expert's gate, up and down weights
     * (printf formats of the expert's index: per-expert tensors stacked by weight recipes), or
     * none: transformers' fused experts.gate_up_proj [E, 2*ff, h] and experts.down_proj
     * [E, h, ff]. The router is a linear over gate.weight [E, h] in the graph too. */
    g_moe_opts moe;
    const char *experts[3];
} op_case;

/* Rotary options over ROPE_HEAD_DIM heads rotating the first `rotary` dims; the rope_config
 * fields a type does not read stay zero. */
#define ROPE(rotary, max_pos, ...)                                                         \
    .rope = {.rope = {__VA_ARGS__}, .head_dim = ROPE_HEAD_DIM, .rotary_dim = (rotary),     \
             .max_position_embeddings = (max_pos)}
#define ATTN(heads, kv_heads, ...)                                                         \
    .attn = {.num_heads = (heads), .num_kv_heads = (kv_heads), .head_dim = ATTN_HEAD_DIM,  \
             __VA_ARGS__}

/* Convolution options over `n` spatial axes in `groups` groups; the arrays are given in full */
#define CONV(n, groups_, ...) .conv = {.spatial = (n), .groups = (groups_), __VA_ARGS__}

/* A mixture of E experts, k per token, read per expert (checkpoint key formats) or fused */
#define MOE(e, k, ...) .moe = {.num_experts = (e), .top_k = (k), .act = G_SILU, __VA_ARGS__}
#define QWEN_EXPERTS {"experts.%d.gate_proj.weight", "experts.%d.up_proj.weight", \
                      "experts.%d.down_proj.weight"}
#define MIXTRAL_EXPERTS {"experts.%d.w1.weight", "experts.%d.w3.weight", "experts.%d.w2.weight"}

#define F32 FERRY_F32
#define F16 FERRY_F16

/* LongRoPE over 8 frequencies (rotary_dim 16), its trained length 64 of 256: the factor sets
 * test_op_conformance.py hands transformers' Phi3RotaryEmbedding. The attention factor is
 * derived (factor = 256 / 64). */
#define LONGROPE_SHORT {1.0f, 1.05f, 1.1f, 1.2f, 1.3f, 1.5f, 1.7f, 2.0f}
#define LONGROPE_LONG {1.0f, 1.5f, 2.5f, 4.0f, 6.0f, 9.0f, 12.0f, 16.0f}
#define LONGROPE_SHORT_4 {1.0f, 1.2f, 1.5f, 2.0f}
#define LONGROPE_LONG_4 {1.0f, 3.0f, 7.0f, 11.0f}
#define LONGROPE(rotary, short_f, long_f)                                                  \
    ROPE(rotary, 256, .type = ROPE_LONGROPE, .theta = 10000.0, .factor = 4.0,              \
         .original_max_position_embeddings = 64, .attention_factor = -1.0,                 \
         .partial_rotary_factor = (rotary) / 16.0, .n_factors = (rotary) / 2,               \
         .short_factor = short_f, .long_factor = long_f)

static const op_case CASES[] = {
    {"rms_norm", FAM_RMS_NORM, F32, .eps = 1e-6},
    {"rms_norm_offset", FAM_RMS_NORM, F32, .eps = 1e-6, .offset = 1.0,
     .f32_weight = true}, /* Gemma: 1 + w */
    {"rms_norm_f32_weight_fp16", FAM_RMS_NORM, F16, .eps = 1e-6, .f32_weight = true}, /* OLMo 2 */
    {"rms_norm_fp16", FAM_RMS_NORM, F16, .eps = 1e-6},
    {"skip_rms_norm", FAM_SKIP_RMS_NORM, F32, .eps = 1e-5},
    {"skip_rms_norm_fp16", FAM_SKIP_RMS_NORM, F16, .eps = 1e-5},
    {"layer_norm", FAM_LAYER_NORM, F32, .eps = 1e-5, .bias = true},
    {"layer_norm_nobias", FAM_LAYER_NORM, F32, .eps = 1e-5},
    {"layer_norm_fp16", FAM_LAYER_NORM, F16, .eps = 1e-5, .bias = true},
    {"skip_layer_norm", FAM_SKIP_LAYER_NORM, F32, .eps = 1e-12, .bias = true},
    {"skip_layer_norm_nobias", FAM_SKIP_LAYER_NORM, F32, .eps = 1e-5},
    {"skip_layer_norm_fp16", FAM_SKIP_LAYER_NORM, F16, .eps = 1e-5, .bias = true},
    /* a weight only linears read: stored transposed for a plain MatMul */
    {"linear", FAM_LINEAR, F32, .bias = true},
    {"linear_fp16", FAM_LINEAR, F16, .bias = true},
    {"linear_in_out", FAM_LINEAR, F32, .bias = true, .in_out = true},
    {"linear_in_out_fp16", FAM_LINEAR, F16, .bias = true, .in_out = true},
    {"linear_flatten", FAM_LINEAR, F32, .flatten = true},
    /* one table read by an embedding and a linear: stored once, multiplied by Gemm(transB) */
    {"linear_tied", FAM_TIED, F32},
    {"embedding", FAM_EMBEDDING, F32},
    {"silu", FAM_UNARY, F32, .op = G_SILU},
    {"silu_fp16", FAM_UNARY, F16, .op = G_SILU},
    {"gelu", FAM_UNARY, F32, .op = G_GELU},
    {"gelu_fp16", FAM_UNARY, F16, .op = G_GELU},
    {"gelu_tanh", FAM_UNARY, F32, .op = G_GELU_TANH},
    {"gelu_tanh_fp16", FAM_UNARY, F16, .op = G_GELU_TANH},
    {"softcap", FAM_UNARY, F32, .op = G_SOFTCAP, .cap = 5.0},
    {"softcap_fp16", FAM_UNARY, F16, .op = G_SOFTCAP, .cap = 5.0},
    {"abs", FAM_UNARY, F32, .op = G_ABS},
    {"abs_fp16", FAM_UNARY, F16, .op = G_ABS},
    {"log", FAM_UNARY, F32, .op = G_LOG},
    {"floor", FAM_UNARY, F32, .op = G_FLOOR},
    {"reduce_sum", FAM_REDUCE, F32, .op = G_REDUCE_SUM, .keepdims = true},
    {"reduce_sum_axis1", FAM_REDUCE, F32, .op = G_REDUCE_SUM},
    {"reduce_mean", FAM_REDUCE, F32, .op = G_REDUCE_MEAN, .keepdims = true},
    {"reduce_max_axis1", FAM_REDUCE, F32, .op = G_REDUCE_MAX},
    {"gather_elements", FAM_GATHER_ELEMENTS, F32},
    {"gather_elements_fp16", FAM_GATHER_ELEMENTS, F16},
    {"scatter_add", FAM_SCATTER_ADD, F32},
    {"scatter_add_fp16", FAM_SCATTER_ADD, F16}, /* onnxruntime adds in fp32: ONNX casts */
    {"topk", FAM_TOPK, F32},
    {"topk_fp16", FAM_TOPK, F16},
    {"clip", FAM_CLIP, F32, .lo = -1.5, .hi = 2.0},
    {"clip_min", FAM_CLIP, F32, .lo = -1.0, .hi = INFINITY},
    {"clip_max", FAM_CLIP, F32, .lo = -INFINITY, .hi = 0.5},
    {"clip_fp16", FAM_CLIP, F16, .lo = -2.0, .hi = 1.5},
    {"clip_max_fp16", FAM_CLIP, F16, .lo = -INFINITY, .hi = 0.75},
    /* the sequence axis grows by 3 (symbolic: sequence + 3) */
    {"pad", FAM_PAD, F32, .pad_begin = {0, 1, 2}, .pad_end = {0, 2, 3}, .pad_value = 0.5},
    {"pad_leading", FAM_PAD, F32, .pad_begin = {1, 0, 0}, .pad_end = {2, 0, 0}},
    {"pad_fp16", FAM_PAD, F16, .pad_begin = {0, 1, 2}, .pad_end = {0, 2, 3}, .pad_value = -1.25},
    /* Whisper's first conv: k 3, pad 1 over the frames (symbolic: sequence stays sequence) */
    {"conv1d", FAM_CONV, F32, .bias = true, .stored = true,
     CONV(1, 1, .strides = {1}, .pads_begin = {1}, .pads_end = {1}, .dilations = {1}),
     .conv_x = {4, SEQ}, .conv_w = {6, 4, 3}},
    {"conv1d_fp16", FAM_CONV, F16, .bias = true, .stored = true,
     CONV(1, 1, .strides = {1}, .pads_begin = {1}, .pads_end = {1}, .dilations = {1}),
     .conv_x = {4, SEQ}, .conv_w = {6, 4, 3}},
    /* its second: stride 2 over 2 * sequence frames, which stays affine (sequence) */
    {"conv1d_strided", FAM_CONV, F32, .bias = true,
     CONV(1, 1, .strides = {2}, .pads_begin = {1}, .pads_end = {1}, .dilations = {1}),
     .conv_x = {4, TWO_SEQ}, .conv_w = {6, 4, 3}},
    /* a vision patch embedding: kernel = stride = 4 over a constant image */
    {"conv2d_patch", FAM_CONV, F32, .bias = true, .stored = true,
     CONV(2, 1, .strides = {4, 4}, .dilations = {1, 1}),
     .conv_x = {3, 8, 12}, .conv_w = {8, 3, 4, 4}},
    /* groups, unequal pads, a dilation and a stride at once; no bias */
    {"conv2d_grouped", FAM_CONV, F32,
     CONV(2, 2, .strides = {2, 1}, .pads_begin = {1, 0}, .pads_end = {0, 2}, .dilations = {1, 2}),
     .conv_x = {4, 7, 9}, .conv_w = {6, 2, 3, 2}},
    {"conv2d_grouped_fp16", FAM_CONV, F16,
     CONV(2, 2, .strides = {2, 1}, .pads_begin = {1, 0}, .pads_end = {0, 2}, .dilations = {1, 2}),
     .conv_x = {4, 7, 9}, .conv_w = {6, 2, 3, 2}},
    {"conv3d", FAM_CONV, F32, .bias = true, .stored = true,
     CONV(3, 1, .strides = {1, 2, 1}, .pads_begin = {1, 0, 1}, .pads_end = {1, 0, 0},
          .dilations = {1, 1, 1}),
     .conv_x = {2, 4, 5, 6}, .conv_w = {4, 2, 2, 3, 2}},
    {"rope", FAM_ROPE, F32, ROPE(16, 256, .type = ROPE_DEFAULT, .theta = 10000.0)},
    {"rope_fp16", FAM_ROPE, F16, ROPE(16, 256, .type = ROPE_DEFAULT, .theta = 10000.0)},
    {"rope_partial", FAM_ROPE, F32,
     ROPE(8, 256, .type = ROPE_DEFAULT, .theta = 10000.0, .partial_rotary_factor = 0.5)},
    {"rope_linear", FAM_ROPE, F32, ROPE(16, 256, .type = ROPE_LINEAR, .theta = 10000.0,
                                        .factor = 2.0)},
    /* positions beyond max_position_embeddings (32) make the graph rescale its base */
    {"rope_dynamic", FAM_ROPE, F32, ROPE(16, 32, .type = ROPE_DYNAMIC, .theta = 10000.0,
                                         .factor = 2.0)},
    /* with head_dim 16 the wavelengths fall on both sides of and between 64/4 and 64/1 */
    {"rope_llama3", FAM_ROPE, F32,
     ROPE(16, 256, .type = ROPE_LLAMA3, .theta = 10000.0, .factor = 8.0, .low_freq_factor = 1.0,
          .high_freq_factor = 4.0, .original_max_position_embeddings = 64)},
    {"rope_yarn", FAM_ROPE, F32,
     ROPE(16, 256, .type = ROPE_YARN, .theta = 10000.0, .factor = 4.0,
          .original_max_position_embeddings = 64, .attention_factor = -1.0, .truncate = true)},
    /* the defect this holds: tables were shared by (positions, dtype) alone, so the second
     * rope silently used the first one's theta */
    {"two_ropes", FAM_TWO_ROPES, F32, ROPE(16, 256, .type = ROPE_DEFAULT, .theta = 10000.0),
     .theta_2 = 1e6},
    /* longrope picks its factors by max(position_ids) + 1 against 64: the short set at
     * exactly 64, the long set at 65 (for every position of the call) */
    {"rope_longrope_short", FAM_ROPE, F32, LONGROPE(16, LONGROPE_SHORT, LONGROPE_LONG)},
    {"rope_longrope_long", FAM_ROPE, F32, LONGROPE(16, LONGROPE_SHORT, LONGROPE_LONG)},
    {"rope_longrope_long_fp16", FAM_ROPE, F16, LONGROPE(16, LONGROPE_SHORT, LONGROPE_LONG)},
    /* Phi-4-mini's partial rotary: 4 factors over the first 8 dims */
    {"rope_longrope_partial", FAM_ROPE, F32,
     LONGROPE(8, LONGROPE_SHORT_4, LONGROPE_LONG_4)},
    /* a second set of long factors, all else equal: a table of its own */
    {"two_longropes", FAM_TWO_ROPES, F32, LONGROPE(16, LONGROPE_SHORT, LONGROPE_LONG),
     .long_2 = true},
    /* Qwen2-VL's M-RoPE: 8 frequencies in bands of 2 (temporal), 3 (height), 3 (width) */
    {"rope_mrope", FAM_ROPE, F32,
     ROPE(16, 256, .type = ROPE_DEFAULT, .theta = 10000.0, .layout = ROPE_MROPE,
          .mrope_section = {2, 3, 3})},
    {"rope_mrope_fp16", FAM_ROPE, F16,
     ROPE(16, 256, .type = ROPE_DEFAULT, .theta = 10000.0, .layout = ROPE_MROPE,
          .mrope_section = {2, 3, 3})},
    /* Qwen2-VL's vision tower: (h, w) per patch, 4 frequencies each, rotated in fp32 */
    {"rope_vision", FAM_ROPE, F32,
     ROPE(16, 256, .type = ROPE_DEFAULT, .theta = 10000.0, .layout = ROPE_VISION_2D)},
    {"rope_vision_fp16", FAM_ROPE, F16,
     ROPE(16, 256, .type = ROPE_DEFAULT, .theta = 10000.0, .layout = ROPE_VISION_2D)},
    {"attn_causal", FAM_ATTENTION, F32, ATTN(4, 4, .mask = G_MASK_CAUSAL)},
    /* a vision tower's or Whisper encoder's: every key visible, no mask input */
    {"attn_nomask", FAM_ATTENTION, F32, ATTN(4, 4, .mask = G_MASK_NONE)},
    {"attn_nomask_fp16", FAM_ATTENTION, F16, ATTN(4, 4, .mask = G_MASK_NONE)},
    {"attn_nomask_gqa", FAM_ATTENTION, F32, ATTN(4, 2, .mask = G_MASK_NONE)},
    {"attn_padding", FAM_ATTENTION, F32, ATTN(4, 4, .mask = G_MASK_PADDING)},
    {"attn_given", FAM_ATTENTION, F32, ATTN(4, 4, .mask = G_MASK_GIVEN)},
    {"attn_given_window", FAM_ATTENTION, F32,
     ATTN(4, 4, .mask = G_MASK_GIVEN, .sliding_window = 3)},
    {"attn_window", FAM_ATTENTION, F32, ATTN(4, 4, .mask = G_MASK_CAUSAL, .sliding_window = 3)},
    /* Gemma 2 style: a scale that is not head_dim^-0.5, then tanh capping */
    {"attn_softcap", FAM_ATTENTION, F32,
     ATTN(4, 4, .mask = G_MASK_CAUSAL, .scale = 0.25, .softcap = 2.0)},
    {"attn_gqa", FAM_ATTENTION, F32, ATTN(4, 2, .mask = G_MASK_CAUSAL)},
    {"attn_mqa", FAM_ATTENTION, F32, ATTN(4, 1, .mask = G_MASK_CAUSAL)},
    {"attn_gqa_fp16", FAM_ATTENTION, F16, ATTN(4, 2, .mask = G_MASK_CAUSAL)},
    {"attn_append", FAM_ATTENTION, F32,
     ATTN(4, 2, .mask = G_MASK_CAUSAL, .cache = G_CACHE_APPEND)},
    {"attn_append_window", FAM_ATTENTION, F32,
     ATTN(4, 2, .mask = G_MASK_CAUSAL, .cache = G_CACHE_APPEND, .sliding_window = 3)},
    {"attn_static", FAM_ATTENTION, F32,
     ATTN(4, 2, .mask = G_MASK_GIVEN, .cache = G_CACHE_STATIC)},
    {"attn_static_window", FAM_ATTENTION, F32,
     ATTN(4, 2, .mask = G_MASK_GIVEN, .cache = G_CACHE_STATIC, .sliding_window = 3)},
    /* Qwen3-MoE's block: per-expert checkpoint tensors stacked, and the fused 3-D parameters
     * transformers keeps in memory; norm_topk_prob either way */
    {"moe_qwen3", FAM_MOE, F32, MOE(8, 2), .experts = QWEN_EXPERTS},
    {"moe_qwen3_norm", FAM_MOE, F32, MOE(8, 2, .norm_topk_prob = true), .experts = QWEN_EXPERTS},
    {"moe_qwen3_fp16", FAM_MOE, F16, MOE(8, 2, .norm_topk_prob = true), .experts = QWEN_EXPERTS},
    {"moe_qwen3_fused", FAM_MOE, F32, MOE(6, 2, .norm_topk_prob = true)},
    {"moe_qwen3_fused_fp16", FAM_MOE, F16, MOE(6, 2)},
    {"moe_qwen3_top1", FAM_MOE, F32, MOE(4, 1), .experts = QWEN_EXPERTS},
    {"moe_qwen3_top1_fp16", FAM_MOE, F16, MOE(4, 1)},
    /* expert 0 overflows fp16 (inf and NaN in its outputs) and no token chooses it:
     * transformers never runs it, so none of that may reach the output */
    {"moe_qwen3_idle_inf_fp16", FAM_MOE, F16, MOE(4, 2), .experts = QWEN_EXPERTS},
    /* Mixtral's: always renormalised, its fp32 routing weights scaling in fp32 */
    {"moe_mixtral", FAM_MOE, F32, MOE(8, 2, .norm_topk_prob = true, .scale_f32 = true),
     .experts = MIXTRAL_EXPERTS},
    {"moe_mixtral_fp16", FAM_MOE, F16, MOE(8, 2, .norm_topk_prob = true, .scale_f32 = true),
     .experts = MIXTRAL_EXPERTS},
    {"moe_mixtral_fused_fp16", FAM_MOE, F16, MOE(4, 2, .norm_topk_prob = true, .scale_f32 = true)},
};

#define N_CASES (sizeof CASES / sizeof CASES[0])

typedef struct bld {
    g_graph *g;
    const op_case *c;
    const st_file *file;
    g_dim batch, seq, past;
} bld;

/* Checkpoint tensor `name` as a weight in the case's dtype (the weight stream converts it, as
 * it does a checkpoint's). */
static int weight(bld *b, const char *name)
{
    const st_tensor *t = st_find(b->file, name);
    if (!t)
        return g_fail(b->g, FERRY_ERR_FORMAT, "%s: no tensor '%s'", b->file->path, name);
    g_weight w = w_plain(t, b->c->dtype);
    return g_weight_value(b->g, name, &w);
}

/* Extent `axis` of weight `w` (weights have constant shapes). */
static g_dim extent(const bld *b, int w, int axis)
{
    return b->g->values[w].shape.d[axis];
}

/* [batch, seq, n] */
static int activations(bld *b, const char *name, g_dim n)
{
    g_dim d[3] = {b->batch, b->seq, n};
    return g_input(b->g, name, b->c->dtype, 3, d);
}

static int token_ids(bld *b, const char *name)
{
    g_dim d[2] = {b->batch, b->seq};
    return g_input(b->g, name, FERRY_I64, 2, d);
}

static void build_rms_norm(bld *b)
{
    g_graph *g = b->g;
    int w = weight(b, "weight");
    if (!g_ok(g))
        return;
    int x = activations(b, "x", extent(b, w, 0));
    g_output(g, g_rms_norm(g, "rms_norm", x, w, b->c->eps, b->c->offset, b->c->f32_weight), "y");
}

/* Both outputs are graph outputs: the sum is the next residual, and must be x + skip exactly. */
static void build_skip_rms_norm(bld *b)
{
    g_graph *g = b->g;
    int w = weight(b, "weight");
    if (!g_ok(g))
        return;
    int x = activations(b, "x", extent(b, w, 0));
    int skip = activations(b, "skip", extent(b, w, 0));
    int sum = G_NONE;
    int y = g_skip_rms_norm(g, "skip_rms_norm", x, skip, w, b->c->eps, b->c->offset,
                            b->c->f32_weight, &sum);
    g_output(g, y, "y");
    g_output(g, sum, "sum");
}

static void build_layer_norm(bld *b)
{
    g_graph *g = b->g;
    int w = weight(b, "weight");
    int bias = b->c->bias ? weight(b, "bias") : G_NONE;
    if (!g_ok(g))
        return;
    int x = activations(b, "x", extent(b, w, 0));
    g_output(g, g_layer_norm(g, "layer_norm", x, w, bias, b->c->eps), "y");
}

static void build_skip_layer_norm(bld *b)
{
    g_graph *g = b->g;
    int w = weight(b, "weight");
    int bias = b->c->bias ? weight(b, "bias") : G_NONE;
    if (!g_ok(g))
        return;
    int x = activations(b, "x", extent(b, w, 0));
    int skip = activations(b, "skip", extent(b, w, 0));
    int sum = G_NONE;
    int y = g_skip_layer_norm(g, "skip_layer_norm", x, skip, w, bias, b->c->eps, &sum);
    g_output(g, y, "y");
    g_output(g, sum, "sum");
}

static void build_linear(bld *b)
{
    g_graph *g = b->g;
    int w;
    if (b->c->in_out || b->c->flatten) {
        const st_tensor *t = st_find(b->file, "weight");
        if (!t) {
            g_fail(g, FERRY_ERR_FORMAT, "%s: no tensor 'weight'", b->file->path);
            return;
        }
        g_weight r = w_plain(t, b->c->dtype);
        r.src_transposed = b->c->in_out;
        r.flatten = b->c->flatten;
        w = g_weight_value(g, "weight", &r);
    } else {
        w = weight(b, "weight");
    }
    int bias = b->c->bias ? weight(b, "bias") : G_NONE;
    if (!g_ok(g))
        return;
    int x = activations(b, "x", extent(b, w, 1));
    g_output(g, g_linear(g, "linear", x, w, bias), "y");
}

/* A tied lm_head: the embedding table is also the linear's weight. */
static void build_tied(bld *b)
{
    g_graph *g = b->g;
    int table = weight(b, "table");
    if (!g_ok(g))
        return;
    int ids = token_ids(b, "input_ids");
    int x = activations(b, "x", extent(b, table, 1));
    g_output(g, g_embedding(g, "embedding", table, ids), "embeds");
    g_output(g, g_linear(g, "lm_head", x, table, G_NONE), "logits");
}

static void build_embedding(bld *b)
{
    g_graph *g = b->g;
    int table = weight(b, "table");
    if (!g_ok(g))
        return;
    g_output(g, g_embedding(g, "embedding", table, token_ids(b, "input_ids")), "y");
}

static void build_unary(bld *b)
{
    g_graph *g = b->g;
    int x = activations(b, "x", g_dim_const(HIDDEN));
    int y = b->c->op == G_SOFTCAP ? g_softcap(g, "softcap", x, b->c->cap)
                                  : g_unary(g, b->c->op, g_op_name(b->c->op), x);
    g_output(g, y, "y");
}

static void build_reduce(bld *b)
{
    g_graph *g = b->g;
    int x = activations(b, "x", g_dim_const(HIDDEN));
    int64_t axis = b->c->keepdims ? -1 : 1;
    g_output(g, g_reduce(g, b->c->op, g_op_name(b->c->op), x, 1, &axis, b->c->keepdims), "y");
}

/* x [b, s, HIDDEN] and indices [b, s, PICKS] into its last axis */
static void build_gather_elements(bld *b)
{
    g_graph *g = b->g;
    int x = activations(b, "x", g_dim_const(HIDDEN));
    g_dim d[3] = {b->batch, b->seq, g_dim_const(PICKS)};
    int idx = g_input(g, "indices", FERRY_I64, 3, d);
    g_output(g, g_gather_elements(g, "gather_elements", x, idx, -1), "y");
}

/* x [b, s, HIDDEN] plus updates [b, s, PICKS] at indices [b, s, PICKS] (repeats add up) */
static void build_scatter_add(bld *b)
{
    g_graph *g = b->g;
    int x = activations(b, "x", g_dim_const(HIDDEN));
    g_dim d[3] = {b->batch, b->seq, g_dim_const(PICKS)};
    int idx = g_input(g, "indices", FERRY_I64, 3, d);
    int upd = g_input(g, "updates", b->c->dtype, 3, d);
    g_output(g, g_scatter_add(g, "scatter_add", x, idx, upd, 2), "y");
}

/* the PICKS largest of x [b, s, HIDDEN] along its last axis, and where they are */
static void build_topk(bld *b)
{
    g_graph *g = b->g;
    int x = activations(b, "x", g_dim_const(HIDDEN)), idx;
    g_output(g, g_topk(g, "topk", x, PICKS, -1, &idx), "y");
    g_output(g, idx, "indices");
}

static void build_clip(bld *b)
{
    g_graph *g = b->g;
    int x = activations(b, "x", g_dim_const(HIDDEN));
    g_output(g, g_clip(g, "clip", x, b->c->lo, b->c->hi), "y");
}

static void build_pad(bld *b)
{
    g_graph *g = b->g;
    int x = activations(b, "x", g_dim_const(HIDDEN));
    const op_case *c = b->c;
    g_output(g, g_pad(g, "pad", x, 3, c->pad_begin, c->pad_end, c->pad_value), "y");
}

/* x [b, c_in, spatial...]; the weight (and bias) read from the checkpoint (`stored`, an N-D
 * weight recipe, as a model's conv) or given as graph inputs: the op takes any value there */
static void build_conv(bld *b)
{
    g_graph *g = b->g;
    const op_case *c = b->c;
    int rank = c->conv.spatial + 2;
    g_dim xd[G_MAX_RANK] = {b->batch}, wd[G_MAX_RANK];
    for (int i = 1; i < rank; i++) {
        int64_t e = c->conv_x[i - 1];
        xd[i] = e == SEQ ? b->seq : e == TWO_SEQ ? g_dim_scale(b->seq, 2) : g_dim_const(e);
    }
    for (int i = 0; i < rank; i++)
        wd[i] = g_dim_const(c->conv_w[i]);
    int x = g_input(g, "x", c->dtype, rank, xd), w, bias = G_NONE;
    if (c->stored) {
        w = weight(b, "weight");
        if (c->bias)
            bias = weight(b, "bias");
        if (!g_ok(g))
            return;
    } else {
        w = g_input(g, "weight", c->dtype, rank, wd);
        bias = c->bias ? g_input(g, "bias", c->dtype, 1, wd) : G_NONE;
    }
    g_output(g, g_conv(g, "conv", x, w, bias, &c->conv), "y");
}

static void build_rope(bld *b)
{
    g_graph *g = b->g;
    const g_rope_opts *o = &b->c->rope;
    g_dim x4[4] = {b->batch, b->seq, g_dim_const(ROPE_HEADS), g_dim_const(o->head_dim)};
    int x = g_input(g, "x", b->c->dtype, 4, x4);
    int pos;
    if (o->rope.layout == ROPE_MROPE) { /* [3, b, s]: temporal, height, width */
        g_dim p3[3] = {g_dim_const(3), b->batch, b->seq};
        pos = g_input(g, "position_ids", FERRY_I64, 3, p3);
    } else if (o->rope.layout == ROPE_VISION_2D) { /* [b, s, 2]: (h, w) */
        g_dim p3[3] = {b->batch, b->seq, g_dim_const(2)};
        pos = g_input(g, "position_ids", FERRY_I64, 3, p3);
    } else {
        pos = token_ids(b, "position_ids");
    }
    g_output(g, g_rope(g, "rope", x, pos, o), "y");
    if (b->c->fam == FAM_TWO_ROPES) {
        g_rope_opts o2 = *o;
        if (b->c->long_2) {
            for (int i = 0; i < o2.rope.n_factors; i++)
                o2.rope.long_factor[i] *= 2.0f;
        } else {
            o2.rope.theta = b->c->theta_2;
        }
        g_output(g, g_rope(g, "rope_2", x, pos, &o2), "y_2");
    }
}

/* q [b,s,h,d], k and v [b,s,kvh,d]; the mask spans the keys (new, past + new, or the static
 * buffer); a given mask and a static cache take cache_position. A cache is declared as states
 * so that the backend's finish names it (past_key_values.0.key -> present.0.key, or
 * input./output. for the in-place static one). */
static void build_attention(bld *b)
{
    g_graph *g = b->g;
    g_attn_opts o = b->c->attn;
    ferry_dtype dt = b->c->dtype;
    if (o.scale == 0)
        o.scale = 1.0 / sqrt((double)o.head_dim);
    g_dim q4[4] = {b->batch, b->seq, g_dim_const(o.num_heads), g_dim_const(o.head_dim)};
    g_dim kv4[4] = {b->batch, b->seq, g_dim_const(o.num_kv_heads), g_dim_const(o.head_dim)};
    int q = g_input(g, "q", dt, 4, q4);
    int k = g_input(g, "k", dt, 4, kv4);
    int v = g_input(g, "v", dt, 4, kv4);
    g_dim keys = o.cache == G_CACHE_APPEND   ? g_dim_add(b->past, b->seq)
                 : o.cache == G_CACHE_STATIC ? g_dim_const(CACHE_LEN)
                                             : b->seq;
    int mask = G_NONE;
    if (o.mask == G_MASK_NONE) {
        /* every key visible: no mask input */
    } else if (o.mask == G_MASK_GIVEN) {
        g_dim m4[4] = {b->batch, g_dim_const(1), b->seq, keys};
        mask = g_input(g, "attention_mask", FERRY_BOOL, 4, m4);
    } else {
        g_dim m2[2] = {b->batch, keys};
        mask = g_input(g, "attention_mask", FERRY_I64, 2, m2);
    }
    int pos = G_NONE, pk = G_NONE, pv = G_NONE;
    if (o.mask == G_MASK_GIVEN || o.cache == G_CACHE_STATIC) {
        g_dim one[1] = {g_dim_const(1)};
        pos = g_input(g, "cache_position", FERRY_I64, 1, one);
    }
    if (o.cache != G_CACHE_NONE) {
        g_dim c4[4] = {b->batch, g_dim_const(o.num_kv_heads),
                       o.cache == G_CACHE_APPEND ? b->past : g_dim_const(CACHE_LEN),
                       g_dim_const(o.head_dim)};
        pk = g_input(g, "past_key_values.0.key", dt, 4, c4);
        pv = g_input(g, "past_key_values.0.value", dt, 4, c4);
    }
    int present_k = G_NONE, present_v = G_NONE;
    int y = g_attention(g, "attention", q, k, v, mask, pk, pv, pos, &o, &present_k, &present_v);
    g_output(g, y, "y");
    if (o.cache == G_CACHE_NONE)
        return;
    bool in_place = o.cache == G_CACHE_STATIC;
    g_output(g, present_k, "present.0.key");
    g_state_add(g, "past_key_values.0.key", GS_KEY, 0, pk, present_k, in_place);
    g_output(g, present_v, "present.0.value");
    g_state_add(g, "past_key_values.0.value", GS_VALUE, 0, pv, present_v, in_place);
}

/* checkpoint tensors `fmt` % 0 .. n-1 stacked into one [n, ...] weight named `name` */
static int expert_stack(bld *b, const char *fmt, int n, const char *name)
{
    const st_tensor *list[64];
    if (n > (int)(sizeof list / sizeof list[0]))
        return g_fail(b->g, FERRY_ERR_INTERNAL, "%d experts: at most 64 here", n);
    for (int e = 0; e < n; e++) {
        char key[128];
        snprintf(key, sizeof key, fmt, e);
        if (!(list[e] = st_find(b->file, key)))
            return g_fail(b->g, FERRY_ERR_FORMAT, "%s: no tensor '%s'", b->file->path, key);
    }
    g_weight w = w_join(list, n, true, b->c->dtype);
    return g_weight_value(b->g, name, &w);
}

/* x [b, s, HIDDEN] -> the router linear (gate.weight) -> moe over the experts' weights */
static void build_moe(bld *b)
{
    g_graph *g = b->g;
    const op_case *c = b->c;
    int n = (int)c->moe.num_experts;
    int router = weight(b, "gate.weight"), gate_up, down, up = G_NONE;
    if (c->experts[0]) {
        gate_up = expert_stack(b, c->experts[0], n, "experts.gate_proj");
        up = expert_stack(b, c->experts[1], n, "experts.up_proj");
        down = expert_stack(b, c->experts[2], n, "experts.down_proj");
    } else {
        gate_up = weight(b, "experts.gate_up_proj");
        down = weight(b, "experts.down_proj");
    }
    if (!g_ok(g))
        return;
    int x = activations(b, "x", g_dim_const(HIDDEN));
    int logits = g_linear(g, "gate", x, router, G_NONE);
    g_output(g, g_moe(g, "experts", x, logits, gate_up, down, up, &c->moe), "y");
}

static void (*const BUILD[FAM_COUNT])(bld *b) = {
    [FAM_RMS_NORM] = build_rms_norm, [FAM_SKIP_RMS_NORM] = build_skip_rms_norm,
    [FAM_LAYER_NORM] = build_layer_norm, [FAM_SKIP_LAYER_NORM] = build_skip_layer_norm,
    [FAM_LINEAR] = build_linear, [FAM_TIED] = build_tied,
    [FAM_EMBEDDING] = build_embedding, [FAM_UNARY] = build_unary, [FAM_REDUCE] = build_reduce,
    [FAM_GATHER_ELEMENTS] = build_gather_elements, [FAM_SCATTER_ADD] = build_scatter_add,
    [FAM_TOPK] = build_topk, [FAM_CLIP] = build_clip, [FAM_PAD] = build_pad,
    [FAM_CONV] = build_conv, [FAM_ROPE] = build_rope,
    [FAM_TWO_ROPES] = build_rope, [FAM_ATTENTION] = build_attention, [FAM_MOE] = build_moe,
};

/* The semantic graph is checked as ferry_decompose checks a family's; then lowered, finished,
 * placed and written by the ONNX backend as ferry_components_export and save do. */
/* Which backend writes the case, and its options ("openvino" "stateful" "false"). */
typedef struct op_writer {
    const fb_backend *be;
    const char *option, *value;
} op_writer;

/* A .pte names neither its inputs nor its outputs (an export's export.json does): the runner
 * reads them, in the program's order, from model.io ("in NAME" / "out NAME" lines). */
static ferry_status write_io_names(const g_graph *g, const char *dir, fy_err *err)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/model.io", dir) >= (int)sizeof path)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s: path too long", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return fy_fail(err, FERRY_ERR_IO, "%s: cannot create", path);
    for (size_t i = 0; i < g->n_inputs; i++)
        fprintf(f, "in %s\n", g->values[g->inputs[i]].name);
    for (size_t i = 0; i < g->n_outputs; i++)
        fprintf(f, "out %s\n", g->values[g->outputs[i]].name);
    return fclose(f) == 0 ? FERRY_OK : fy_fail(err, FERRY_ERR_IO, "%s: write failed", path);
}

static ferry_status run(const op_case *c, const char *dir, bool dynamic, const op_writer *w,
                        fy_err *err)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/weights.safetensors", dir) >= (int)sizeof path)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s: path too long", dir);
    st_file *file = NULL;
    if (st_open(path, &file, err) != FERRY_OK)
        return err->status;
    g_graph *g = g_new();
    be_component comp = {.name = "model", .role = "model"};
    ferry_export_config cfg;
    ferry_export_config_init(&cfg);
    cfg.format = w->be->format;
    const fb_backend *be = w->be;
    ferry_status st = FERRY_OK;
    char eb[256];
    if (w->option && ferry_export_config_set_option(&cfg, w->option, w->value, eb, sizeof eb))
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s", eb);
    if (!g) {
        st = fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        goto done;
    }
    bld b = {.g = g, .c = c, .file = file};
    if (dynamic) {
        b.batch = g_dim_sym(g_symtab_add(&g->syms, "batch", 1, 0, B));
        b.seq = g_dim_sym(g_symtab_add(&g->syms, "sequence", 1, 0, S));
        b.past = g_dim_sym(g_symtab_add(&g->syms, "past_sequence", 1, 0, P));
    } else {
        b.batch = g_dim_const(B);
        b.seq = g_dim_const(S);
        b.past = g_dim_const(P);
    }
    BUILD[c->fam](&b);
    if (!g_ok(g)) {
        st = fy_fail(err, g->err.status, "%s", g->err.msg);
        goto done;
    }
    g_remove_dead(g);
    if ((st = g_check(g, err)) != FERRY_OK || (st = be->configure(&cfg, err)) != FERRY_OK)
        goto done;
    g_target target;
    be->target(&cfg, &target);
    if (!(comp.graph = g_legalize(g, &target, err))) {
        st = err->status;
        goto done;
    }
    if ((st = be->finish(comp.graph, &cfg, err)) == FERRY_OK &&
        (st = be->files(&comp, 1, err)) == FERRY_OK)
        st = be->write(&comp, 1, &cfg, dir, NULL, NULL, err);
    if (st == FERRY_OK && be == &fb_executorch)
        st = write_io_names(comp.graph, dir, err);
done:
    g_free(comp.graph);
    g_free(g);
    st_close(file);
    return st;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < N_CASES; i++)
            printf("%s\n", CASES[i].name);
        return 0;
    }
    bool dynamic = false, usage = argc < 3;
    /* OpenVINO's plain export carries a cache in variables by default; a case's cache is the
     * graph's inputs and outputs, as the reference feeds them */
    op_writer w = {.be = &fb_onnx};
    for (int i = 3; i < argc && !usage; i++) {
        if (strcmp(argv[i], "--dynamic") == 0)
            dynamic = true;
        else if (strcmp(argv[i], "--format") == 0 && i + 1 < argc)
            usage = !(w.be = fb_find_name(argv[++i]));
        else if (strcmp(argv[i], "--ort-fusions") == 0 && i + 1 < argc)
            w.option = "ort_fusions", w.value = argv[++i];
        else
            usage = true;
    }
    if (w.be == &fb_openvino)
        w.option = "stateful", w.value = "false";
    if (usage) {
        fprintf(stderr, "usage: ferry-op-graph CASE OUTDIR [--dynamic] [--format onnx|openvino|"
                        "pt2|executorch] [--ort-fusions EP] | --list\n");
        return 2;
    }
    const op_case *c = NULL;
    for (size_t i = 0; i < N_CASES && !c; i++)
        if (strcmp(CASES[i].name, argv[1]) == 0)
            c = &CASES[i];
    if (!c) {
        fprintf(stderr, "ferry-op-graph: no case '%s' (--list names them)\n", argv[1]);
        return 2;
    }
    fy_err err = {0};
    if (run(c, argv[2], dynamic, &w, &err) != FERRY_OK) {
        fprintf(stderr, "ferry-op-graph %s: %s\n", c->name, err.msg);
        return 1;
    }
    return 0;
}
