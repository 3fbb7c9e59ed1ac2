/* qwen2_vl_vision.c — Qwen2-VL's and Qwen2.5-VL's vision tower as the image_encoder
 * component, as Qwen2VisionTransformerPretrainedModel and Qwen2_5_VisionTransformerPretrainedModel
 * compute it:
 *
 *   patch_embed   pixel_values [patches, C*T*p*p] (the image processor's rows, merge-block
 *                 order) through the Conv3d whose kernel is the whole patch: a linear by its
 *                 weight flattened to [embed, C*T*p*p]
 *   positions     each patch's (h, w) in its image, computed in the graph from image_grid_thw
 *                 (get_vision_position_ids: rows of merge x merge blocks, raster order within
 *                 a block), and which image and frame it belongs to
 *   blocks        pre-norm: x += proj(attention(norm1(x))), x += mlp(norm2(x)); attention is
 *                 bidirectional within one frame of one image (cu_seqlens) and rotates q and k
 *                 by the 2-D rotary (h angles, then w angles). Qwen2-VL: LayerNorms and
 *                 fc2(quick_gelu(fc1(x))). Qwen2.5-VL: RMSNorms, down(silu(gate(x)) * up(x)),
 *                 and attention within a window of window x window merged blocks (cu_window_
 *                 seqlens) except on the fullatt_block_indexes layers
 *   merger        norm, merge^2 consecutive rows as one, Linear, GELU, Linear
 *
 * The positions and the masks come from image_grid_thw in the graph, so one export takes any
 * number of images of any size; the caller passes what the image processor returns.
 * transformers permutes Qwen2.5-VL's patches into window order so that each window is one
 * contiguous segment; a window mask over the patches in their own order computes the same
 * attention, and only the last hidden state, which transformers returns in window order, is
 * permuted to match. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/blocks.h"
#include "models/qwen2_vl.h"
#include "util/json.h"
#include "util/text.h"

#define MODELING "transformers.models.qwen2_vl.modeling_qwen2_vl."
#define MODELING_2_5 "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl."
#define LAYER_NORM_CLASS "torch.nn.modules.normalization.LayerNorm"
#define QUICK_GELU_CLASS "transformers.activations.QuickGELUActivation"
#define SILU_CLASS "torch.nn.modules.activation.SiLU"

/* where the tower's tensors are, under the family's checkpoint layout (qwen2_vl.c) */
#define VISION_PREFIX "visual."

#define MAX_WIDTH (1 << 20)
/* the rotary base openvino-genai's VLMPipeline computes the merger's angles with */
#define GENAI_VISION_THETA 10000.0
#define QVL_MAX_ROTARY 1024
#define MAX_PATCH 4096

const model_axis qvl_axes[QVL_N_AXES] = {
    /* 144 patches: whole merged blocks for merges of 2, 3, 4, 6 and 12 */
    {"batch", 1}, {"sequence", 8}, {"patches", 144}, {"images", 1},
};

/* fullatt_block_indexes: the layers of a Qwen2.5-VL tower that attend over the whole frame */
static ferry_status read_full_attention(const cJSON *vc, const char *origin, qvl_vision *v,
                                        fy_err *err)
{
    const cJSON *list, *item;
    if (json_get_member(vc, "fullatt_block_indexes", false, origin, &list, err) != FERRY_OK)
        return err->status;
    if (!list) { /* Qwen2_5_VLVisionConfig's default */
        static const int64_t dflt[] = {7, 15, 23, 31};
        for (size_t i = 0; i < sizeof dflt / sizeof dflt[0]; i++)
            if (dflt[i] < v->depth)
                v->full_attention[dflt[i]] = true;
        return FERRY_OK;
    }
    if (!cJSON_IsArray(list))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: vision_config.fullatt_block_indexes must be "
                       "a list of layer indexes", origin);
    int i = 0;
    cJSON_ArrayForEach(item, list) {
        uint64_t layer = 0;
        if (!json_number_to_u64(item, &layer) || layer >= (uint64_t)v->depth)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: vision_config.fullatt_block_indexes "
                           "entry %d must be a layer index in [0, %lld)", origin, i,
                           (long long)v->depth);
        v->full_attention[layer] = true;
        i++;
    }
    return FERRY_OK;
}

ferry_status qvl_vision_read(const cJSON *root, const char *origin, qvl_tower tower,
                             qvl_vision *v, fy_err *err)
{
    const cJSON *vc;
    memset(v, 0, sizeof *v);
    v->tower = tower;
    v->origin = origin;
    if (json_get_member(root, "vision_config", true, origin, &vc, err) != FERRY_OK)
        return err->status;
    if (!cJSON_IsObject(vc))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'vision_config' must be an object",
                       origin);
    bool v2_5 = tower == QVL_TOWER_QWEN2_5_VL;
    double mlp_ratio = 4.0;
    int64_t window_size = 0;
    char act[32];
    const cJSON *rope;
    /* Qwen2-VL names the tower's width embed_dim and its output hidden_size; Qwen2.5-VL names
     * them hidden_size and out_hidden_size, and gives its MLP's width */
    if (json_get_int(vc, "depth", false, 32, 1, QVL_MAX_DEPTH, origin, &v->depth, err) ||
        json_get_int(vc, v2_5 ? "hidden_size" : "embed_dim", false, v2_5 ? 3584 : 1280, 1,
                     MAX_WIDTH, origin, &v->embed_dim, err) ||
        json_get_int(vc, v2_5 ? "out_hidden_size" : "hidden_size", false, 3584, 1, MAX_WIDTH,
                     origin, &v->out_hidden, err) ||
        json_get_int(vc, "num_heads", false, 16, 1, MAX_WIDTH, origin, &v->num_heads, err) ||
        (v2_5 ? json_get_int(vc, "intermediate_size", false, 3420, 1, MAX_WIDTH, origin,
                             &v->mlp_hidden, err)
              : json_get_double(vc, "mlp_ratio", false, 4.0, 1e-3, 1e3, origin, &mlp_ratio,
                                err)) ||
        json_get_int(vc, "in_channels", false, 3, 1, 64, origin, &v->in_channels, err) ||
        json_get_int(vc, "patch_size", false, 14, 1, MAX_PATCH, origin, &v->patch_size, err) ||
        json_get_int(vc, "temporal_patch_size", false, 2, 1, 64, origin,
                     &v->temporal_patch_size, err) ||
        json_get_int(vc, "spatial_merge_size", false, 2, 1, 64, origin, &v->merge, err) ||
        json_get_string(vc, "hidden_act", false, v2_5 ? "silu" : "quick_gelu", origin, act,
                        sizeof act, err) ||
        (v2_5 && json_get_int(vc, "window_size", false, 112, 1, MAX_WIDTH, origin,
                              &window_size, err)) ||
        json_get_member(vc, "rope_parameters", false, origin, &rope, err))
        return err->status;
    const char *want_act = v2_5 ? "silu" : "quick_gelu";
    if (strcmp(act, want_act) != 0) {
        char q[64];
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: vision_config.hidden_act '%s' is not "
                       "supported (supported: %s)", origin, text_quote(act, q, sizeof q),
                       want_act);
    }
    v->theta = 10000.0;
    if (rope && json_get_double(rope, "rope_theta", false, 10000.0, 1e-6, 1e30, origin,
                                &v->theta, err) != FERRY_OK)
        return err->status;
    if (v->embed_dim % v->num_heads != 0 || (v->embed_dim / v->num_heads) % 4 != 0)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: vision_config.%s %lld must split into "
                       "num_heads %lld heads of a width divisible by 4 (the 2-D rotary's h and "
                       "w halves)", origin, v2_5 ? "hidden_size" : "embed_dim",
                       (long long)v->embed_dim, (long long)v->num_heads);
    v->head_dim = v->embed_dim / v->num_heads;
    if (!v2_5) /* transformers: int(embed_dim * mlp_ratio) */
        v->mlp_hidden = (int64_t)((double)v->embed_dim * mlp_ratio);
    if (v->mlp_hidden < 1 || v->mlp_hidden > MAX_WIDTH)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: vision_config.mlp_ratio %g gives an MLP of "
                       "width %lld", origin, mlp_ratio, (long long)v->mlp_hidden);
    if (v2_5) {
        /* get_vision_window_index: window_size // spatial_merge_size // patch_size */
        v->window = window_size / v->merge / v->patch_size;
        if (v->window < 1)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: vision_config.window_size %lld is less "
                           "than one merged block (spatial_merge_size %lld x patch_size %lld "
                           "pixels)", origin, (long long)window_size, (long long)v->merge,
                           (long long)v->patch_size);
        if (read_full_attention(vc, origin, v, err) != FERRY_OK)
            return err->status;
    }
    v->patch_dim = v->in_channels * v->temporal_patch_size * v->patch_size * v->patch_size;
    v->eps = 1e-6;
    return FERRY_OK;
}

typedef struct module_decl {
    const char *cls, *scope;
    g_op leaf;
    bool list_item;
} module_decl;

static const module_decl QWEN2_BLOCK[] = {
    {MODELING "Qwen2VLVisionBlock", "", G_OP_COUNT, true},
    {LAYER_NORM_CLASS, "/norm1", G_LAYER_NORM, false},
    {LAYER_NORM_CLASS, "/norm2", G_LAYER_NORM, false},
    {MODELING "VisionAttention", "/attn", G_OP_COUNT, false},
    {BLK_LINEAR_CLASS, "/attn/qkv", G_LINEAR, false},
    {BLK_LINEAR_CLASS, "/attn/proj", G_LINEAR, false},
    {MODELING "VisionMlp", "/mlp", G_OP_COUNT, false},
    {BLK_LINEAR_CLASS, "/mlp/fc1", G_LINEAR, false},
    {QUICK_GELU_CLASS, "/mlp/act", G_OP_COUNT, false},
    {BLK_LINEAR_CLASS, "/mlp/fc2", G_LINEAR, false},
};

static const module_decl QWEN2_5_BLOCK[] = {
    {MODELING_2_5 "Qwen2_5_VLVisionBlock", "", G_OP_COUNT, true},
    {MODELING_2_5 "Qwen2_5_VLRMSNorm", "/norm1", G_RMS_NORM, false},
    {MODELING_2_5 "Qwen2_5_VLRMSNorm", "/norm2", G_RMS_NORM, false},
    {MODELING_2_5 "Qwen2_5_VLVisionAttention", "/attn", G_OP_COUNT, false},
    {BLK_LINEAR_CLASS, "/attn/qkv", G_LINEAR, false},
    {BLK_LINEAR_CLASS, "/attn/proj", G_LINEAR, false},
    {MODELING_2_5 "Qwen2_5_VLMLP", "/mlp", G_OP_COUNT, false},
    {BLK_LINEAR_CLASS, "/mlp/gate_proj", G_LINEAR, false},
    {BLK_LINEAR_CLASS, "/mlp/up_proj", G_LINEAR, false},
    {BLK_LINEAR_CLASS, "/mlp/down_proj", G_LINEAR, false},
    {SILU_CLASS, "/mlp/act_fn", G_SILU, false},
};

/* The tower's modules at the scopes its nodes are named under (the component's root is the
 * tower itself). */
static void declare_modules(g_graph *g, const qvl_vision *v)
{
    bool v2_5 = v->tower == QVL_TOWER_QWEN2_5_VL;
    g_module_add(g, v2_5 ? MODELING_2_5 "Qwen2_5_VisionTransformerPretrainedModel"
                         : MODELING "Qwen2VisionTransformerPretrainedModel",
                 G_OP_COUNT, false, GM_ROLE_NONE, "%s", "");
    g_module_add(g, v2_5 ? MODELING_2_5 "Qwen2_5_VisionPatchEmbed" : MODELING "PatchEmbed",
                 G_OP_COUNT, false, GM_ROLE_NONE, "/patch_embed");
    g_module_add(g, "torch.nn.modules.conv.Conv3d", G_LINEAR, false, GM_ROLE_PATCH_EMBED,
                 "/patch_embed/proj");
    g_module_add(g, v2_5 ? MODELING_2_5 "Qwen2_5_VLVisionRotaryEmbedding"
                         : MODELING "VisionRotaryEmbedding",
                 G_OP_COUNT, false, GM_ROLE_NONE, "/rotary_pos_emb");
    const module_decl *block = v2_5 ? QWEN2_5_BLOCK : QWEN2_BLOCK;
    size_t n = v2_5 ? sizeof QWEN2_5_BLOCK / sizeof QWEN2_5_BLOCK[0]
                    : sizeof QWEN2_BLOCK / sizeof QWEN2_BLOCK[0];
    for (int l = 0; l < (int)v->depth; l++)
        for (size_t i = 0; i < n; i++)
            g_module_add(g, block[i].cls, block[i].leaf, block[i].list_item, GM_ROLE_NONE,
                         "/blocks.%d%s", l, block[i].scope);
    g_module_add(g, v2_5 ? MODELING_2_5 "Qwen2_5_VLPatchMerger" : MODELING "PatchMerger",
                 G_OP_COUNT, false, GM_ROLE_NONE, "/merger");
    if (v2_5)
        g_module_add(g, MODELING_2_5 "Qwen2_5_VLRMSNorm", G_RMS_NORM, false, GM_ROLE_NONE,
                     "/merger/ln_q");
    else
        g_module_add(g, LAYER_NORM_CLASS, G_LAYER_NORM, false, GM_ROLE_NONE, "/merger/ln_q");
    g_module_add(g, "torch.nn.modules.container.Sequential", G_OP_COUNT, false, GM_ROLE_NONE,
                 "/merger/mlp");
    g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_NONE, "/merger/mlp/0");
    g_module_add(g, "torch.nn.modules.activation.GELU", G_GELU, false, GM_ROLE_NONE,
                 "/merger/mlp/1");
    g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_NONE, "/merger/mlp/2");
}

/* Column `k` of the grid [images, 3] (t, h or w of each image): [images]. */
static int grid_column(g_graph *g, const char *name, int grid, int64_t k)
{
    return g_gather(g, name, grid, g_scalar_i64(g, k), 1);
}

/* a - (a / b) * b for non-negative a and positive b */
static int remainder_of(g_graph *g, const char *name, int a, int quotient, int b)
{
    char n[96];
    snprintf(n, sizeof n, "%s/Mul", name);
    return g_binary(g, G_SUB, name, a, g_binary(g, G_MUL, n, quotient, b));
}

/* Where each patch is, computed from image_grid_thw in the graph. */
typedef struct patch_layout {
    int positions;    /* int64 [1, patches, 2]: its (h, w) (get_vision_position_ids) */
    int frame_mask;   /* bool [1, 1, patches, patches]: same frame of the same image
                         (cu_seqlens) */
    int window_mask;  /* Qwen2.5-VL: ... and the same window (cu_window_seqlens) */
    int window_order; /* Qwen2.5-VL: int64 [patches], the patch at each row of transformers'
                         window order (window_index, over patches) */
} patch_layout;

/* i // d as a value, and i % d in *rest */
static int divide(g_graph *g, const char *name, int i, int d, int *rest)
{
    char n[48];
    int q = g_binary(g, G_DIV, name, i, d);
    snprintf(n, sizeof n, "%s_rest", name);
    *rest = remainder_of(g, n, i, q, d);
    return q;
}

/* The row of each patch in transformers' window order (get_vision_window_index): images in
 * turn, frames in turn, windows in raster order, merged blocks in raster order within a
 * window (the windows at the right and bottom edges may be narrower), the merge^2 patches of
 * a block in their own order. Returns [patches] destinations; `blocks_before` is the merged
 * blocks of the images before each patch's; `at` where its block is among the windows. */
typedef struct window_place {
    int row, col; /* the window's, in windows */
    int r, c;     /* the block's within its window, in blocks */
} window_place;

static int window_destination(g_graph *g, const qvl_vision *v, int blocks_before, int frame,
                              int block_rows, int block_cols, window_place at, int in_block)
{
    int ws = g_scalar_i64(g, v->window);
    int window_row = at.row, window_col = at.col, r = at.r, c = at.c;
    /* the window's extent: ws, or what is left at an edge */
    int rows_in = g_binary(g, G_MIN, "window_rows", ws,
                           g_binary(g, G_SUB, "rows_left", block_rows,
                                    g_binary(g, G_MUL, "rows_before", window_row, ws)));
    int cols_in = g_binary(g, G_MIN, "window_cols", ws,
                           g_binary(g, G_SUB, "cols_left", block_cols,
                                    g_binary(g, G_MUL, "cols_before", window_col, ws)));
    int frame_blocks = g_binary(g, G_MUL, "frame_blocks", block_rows, block_cols);
    /* blocks before this one: earlier images, frames, window rows (ws full block rows each),
     * windows of this window row (ws columns of rows_in rows each), rows of this window */
    int terms[] = {
        blocks_before,
        g_binary(g, G_MUL, "frames_before", frame, frame_blocks),
        g_binary(g, G_MUL, "window_rows_before",
                 g_binary(g, G_MUL, "window_row_blocks", window_row, ws), block_cols),
        g_binary(g, G_MUL, "windows_before",
                 g_binary(g, G_MUL, "window_col_blocks", window_col, ws), rows_in),
        g_binary(g, G_MUL, "rows_in_window", r, cols_in),
        c,
    };
    int block = terms[0];
    for (size_t i = 1; i < sizeof terms / sizeof terms[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "window_block_%zu", i);
        block = g_binary(g, G_ADD, name, block, terms[i]);
    }
    return g_binary(g, G_ADD, "window_patch",
                    g_binary(g, G_MUL, "window_block_patches", block,
                             g_scalar_i64(g, v->merge * v->merge)),
                    in_block);
}

/* The pairwise mask [1, 1, n, n] of the patches whose `key` ([n]) values are equal. */
static int same(g_graph *g, const char *name, int key)
{
    char col[64], row[64];
    snprintf(col, sizeof col, "%s_col", name);
    snprintf(row, sizeof row, "%s_row", name);
    int64_t last = 1, first = 0;
    return g_binary(g, G_EQUAL, name, g_unsqueeze(g, col, key, 1, &last),
                    g_unsqueeze(g, row, key, 1, &first));
}

/* What get_vision_position_ids, cu_seqlens and (Qwen2.5-VL) the windows say of each patch.
 * `patches` is the pixel rows' count (a scalar). */
static patch_layout layout_patches(g_graph *g, const qvl_vision *v, int grid, int patches,
                                   g_dim n_patches)
{
    patch_layout out = {G_NONE, G_NONE, G_NONE, G_NONE};
    g_scope(g, "/rotary_pos_emb");
    int one = g_scalar_i64(g, 1), m = g_scalar_i64(g, v->merge);
    int t = grid_column(g, "t", grid, 0), h = grid_column(g, "h", grid, 1),
        w = grid_column(g, "w", grid, 2);
    int frame_size = g_binary(g, G_MUL, "frame_size", h, w);
    int per_image = g_binary(g, G_MUL, "per_image", t, frame_size);
    int ends = g_cumsum(g, "ends", per_image, 0);
    int starts = g_binary(g, G_SUB, "starts", ends, per_image);
    int p = g_range(g, "patch", g_scalar_i64(g, 0), patches, one);
    if (p != G_NONE)
        g->values[p].shape = (g_shape){.rank = 1, .d = {n_patches}};
    /* the image of patch p: how many images end at or before it */
    int64_t last = 1;
    int past = g_binary(g, G_GREATER_EQUAL, "past_end", g_unsqueeze(g, "patch_col", p, 1, &last),
                        g_unsqueeze(g, "ends_row", ends, 1, (int64_t[]){0}));
    /* counted in fp32 (reduce_sum is a float op), exact for any count of images */
    int image = g_cast(g, "image/Cast",
                       g_reduce(g, G_REDUCE_SUM, "image", g_cast(g, "past_end/Cast", past,
                                                                 FERRY_F32),
                                1, &last, false),
                       FERRY_I64);
    int start = g_gather(g, "start", starts, image, 0);
    int local = g_binary(g, G_SUB, "local", p, start);
    int in_frame;
    int frame = divide(g, "frame", local, g_gather(g, "size", frame_size, image, 0), &in_frame);
    int block_rows = g_binary(g, G_DIV, "block_rows", g_gather(g, "height", h, image, 0), m);
    int block_cols = g_binary(g, G_DIV, "block_cols", g_gather(g, "width", w, image, 0), m);
    int in_block, block_row, block_col, row_in, col_in;
    int block = divide(g, "block", in_frame, g_scalar_i64(g, v->merge * v->merge), &in_block);
    block_row = divide(g, "block_row", block, block_cols, &block_col);
    row_in = divide(g, "row_in_block", in_block, m, &col_in);
    int hpos = g_binary(g, G_ADD, "hpos", g_binary(g, G_MUL, "hpos/Mul", block_row, m), row_in);
    int wpos = g_binary(g, G_ADD, "wpos", g_binary(g, G_MUL, "wpos/Mul", block_col, m), col_in);
    int pair[2] = {g_unsqueeze(g, "hpos_col", hpos, 1, &last),
                   g_unsqueeze(g, "wpos_col", wpos, 1, &last)};
    out.positions = g_unsqueeze(g, "position_ids", g_concat(g, "hw", 2, pair, 1), 1,
                                (int64_t[]){0});
    g_scope(g, "%s", "");
    /* cu_seqlens: a segment is one frame (h * w patches) of one image */
    int segment = g_binary(g, G_AND, "same_segment", same(g, "same_image", image),
                           same(g, "same_frame", frame));
    out.frame_mask = g_unsqueeze(g, "attention_mask", segment, 2, (int64_t[]){0, 1});
    if (v->tower != QVL_TOWER_QWEN2_5_VL)
        return out;
    g_scope(g, "/window");
    int ws = g_scalar_i64(g, v->window);
    window_place at;
    at.row = divide(g, "window_row", block_row, ws, &at.r);
    at.col = divide(g, "window_col", block_col, ws, &at.c);
    int in_window = g_binary(g, G_AND, "same_window", same(g, "same_window_row", at.row),
                             same(g, "same_window_col", at.col));
    g_scope(g, "%s", "");
    out.window_mask = g_unsqueeze(g, "window_attention_mask",
                                  g_binary(g, G_AND, "same_window_segment", segment, in_window),
                                  2, (int64_t[]){0, 1});
    g_scope(g, "/window");
    int blocks_before = g_binary(g, G_DIV, "blocks_before", start,
                                 g_scalar_i64(g, v->merge * v->merge));
    int dest = window_destination(g, v, blocks_before, frame, block_rows, block_cols, at,
                                  in_block);
    /* window_index over patches: the inverse of dest, order[dest[p]] = p */
    out.window_order = g_scatter_elements(g, "window_index", p, dest, p, 0);
    g_scope(g, "%s", "");
    return out;
}

/* A block's weights; Qwen2.5-VL's norms have no bias (G_NONE) and its MLP is gated:
 * fc1 = gate_proj, fc2 = down_proj, up = up_proj (G_NONE for Qwen2-VL). */
typedef struct block_weights {
    int norm1_w, norm1_b, norm2_w, norm2_b, qkv, qkv_b, proj, proj_b, fc1, fc1_b, fc2, fc2_b,
        up, up_b;
} block_weights;

static ferry_status bind_block(g_graph *g, ckpt *ck, const qvl_vision *v, int l, ferry_dtype dt,
                               block_weights *w, fy_err *err)
{
    char fmt[96];
    int64_t e = v->embed_dim, ff = v->mlp_hidden;
    bool v2_5 = v->tower == QVL_TOWER_QWEN2_5_VL;
    w->norm1_b = w->norm2_b = w->up = w->up_b = G_NONE;
#define W(slot, name, d0, d1)                                                                \
    do {                                                                                     \
        snprintf(fmt, sizeof fmt, VISION_PREFIX "blocks.%%d.%s", name);                     \
        w->slot = blk_weight(g, ck, fmt, l, true, d0, d1, dt, err);                          \
        if (err->status != FERRY_OK)                                                         \
            return err->status;                                                              \
    } while (0)
    W(norm1_w, "norm1.weight", e, 0);
    W(norm2_w, "norm2.weight", e, 0);
    W(qkv, "attn.qkv.weight", 3 * e, e);
    W(qkv_b, "attn.qkv.bias", 3 * e, 0);
    W(proj, "attn.proj.weight", e, e);
    W(proj_b, "attn.proj.bias", e, 0);
    if (v2_5) {
        W(fc1, "mlp.gate_proj.weight", ff, e);
        W(fc1_b, "mlp.gate_proj.bias", ff, 0);
        W(up, "mlp.up_proj.weight", ff, e);
        W(up_b, "mlp.up_proj.bias", ff, 0);
        W(fc2, "mlp.down_proj.weight", e, ff);
        W(fc2_b, "mlp.down_proj.bias", e, 0);
    } else {
        W(norm1_b, "norm1.bias", e, 0);
        W(norm2_b, "norm2.bias", e, 0);
        W(fc1, "mlp.fc1.weight", ff, e);
        W(fc1_b, "mlp.fc1.bias", ff, 0);
        W(fc2, "mlp.fc2.weight", e, ff);
        W(fc2_b, "mlp.fc2.bias", e, 0);
    }
#undef W
    return FERRY_OK;
}

/* Qwen2-VL's LayerNorm or Qwen2.5-VL's RMSNorm (computed in fp32, cast, then scaled) */
static int norm(g_graph *g, const qvl_vision *v, const char *name, int x, int weight, int bias)
{
    if (v->tower == QVL_TOWER_QWEN2_5_VL)
        return g_rms_norm(g, name, x, weight, v->eps, 0.0, false);
    return g_layer_norm(g, name, x, weight, bias, v->eps);
}

/* ... of x + skip, the sum in *sum */
static int skip_norm(g_graph *g, const qvl_vision *v, const char *name, int x, int skip,
                     int weight, int bias, int *sum)
{
    if (v->tower == QVL_TOWER_QWEN2_5_VL)
        return g_skip_rms_norm(g, name, x, skip, weight, v->eps, 0.0, false, sum);
    return g_skip_layer_norm(g, name, x, skip, weight, bias, v->eps, sum);
}

/* The block's MLP, in the scope /blocks.N/mlp */
static int mlp(g_graph *g, const qvl_vision *v, const block_weights *w, int y, ferry_dtype dt)
{
    if (v->tower == QVL_TOWER_QWEN2_5_VL) {
        int gate = g_unary(g, G_SILU, "act_fn", g_linear(g, "gate_proj", y, w->fc1, w->fc1_b));
        int up = g_linear(g, "up_proj", y, w->up, w->up_b);
        return g_linear(g, "down_proj", g_binary(g, G_MUL, "Mul", gate, up), w->fc2, w->fc2_b);
    }
    int f = g_linear(g, "fc1", y, w->fc1, w->fc1_b);
    /* quick_gelu: x * sigmoid(1.702 x) */
    f = g_binary(g, G_MUL, "act/Mul_1", f,
                 g_unary(g, G_SIGMOID, "act/Sigmoid",
                         g_binary(g, G_MUL, "act/Mul", f, g_scalar_f(g, dt, 1.702))));
    return g_linear(g, "fc2", f, w->fc2, w->fc2_b);
}

static int heads(g_graph *g, const char *name, int x, const qvl_vision *v)
{
    int64_t spec[4] = {0, 0, v->num_heads, v->head_dim};
    return g_reshape_spec(g, name, x, 4, spec);
}

/* The patch embedding's Conv3d weight [embed, C, T, p, p] as the matrix [embed, C*T*p*p]. */
static int patch_weight(g_graph *g, ckpt *ck, const qvl_vision *v, ferry_dtype dt, fy_err *err)
{
    const int64_t dims[5] = {v->embed_dim, v->in_channels, v->temporal_patch_size,
                             v->patch_size, v->patch_size};
    return blk_kernel_matrix(g, ck, VISION_PREFIX "patch_embed.proj.weight", 5, dims, dt, err);
}

/* How a block's attention finds its positions and its keys: the 2-D rotary from each patch's
 * (h, w), or from angles the caller gives; the frame mask, and Qwen2.5-VL's window mask for the
 * layers outside fullatt_block_indexes. */
typedef struct block_inputs {
    int positions;       /* int64 [1, n, 2], or G_NONE */
    int cos, sin;        /* [1, n, 1, head_dim] from given angles, where positions is G_NONE */
    int frame_mask, window_mask;
} block_inputs;

/* q * cos + rotate_half(q) * sin (apply_rotary_pos_emb_vision), x [1, n, heads, head_dim] */
static int rotate(g_graph *g, const char *name, int x, const block_inputs *in, int64_t hd)
{
    char n[64];
    snprintf(n, sizeof n, "%s/x1", name);
    int x1 = g_slice(g, n, x, 3, 0, hd / 2);
    snprintf(n, sizeof n, "%s/x2", name);
    int x2 = g_slice(g, n, x, 3, hd / 2, hd);
    snprintf(n, sizeof n, "%s/Neg", name);
    int halves[2] = {g_unary(g, G_NEG, n, x2), x1};
    snprintf(n, sizeof n, "%s/rotate_half", name);
    int rotated = g_concat(g, n, 2, halves, 3);
    snprintf(n, sizeof n, "%s/Mul", name);
    int a = g_binary(g, G_MUL, n, x, in->cos);
    snprintf(n, sizeof n, "%s/Mul_1", name);
    int b = g_binary(g, G_MUL, n, rotated, in->sin);
    return g_binary(g, G_ADD, name, a, b);
}

/* The tower's blocks over h [1, n, embed]: returns the last block's output. */
static int tower_blocks(g_graph *g, ckpt *ck, const qvl_vision *v, ferry_dtype dt, int h,
                        const block_inputs *in, fy_err *err)
{
    int64_t e = v->embed_dim;
    g_rope_opts rope = {.rope = {.type = ROPE_DEFAULT, .theta = v->theta,
                                 .partial_rotary_factor = 1.0, .layout = ROPE_VISION_2D},
                        .head_dim = v->head_dim, .rotary_dim = v->head_dim,
                        /* read by scaled rotary types only; default frequencies have no
                         * table length */
                        .max_position_embeddings = 1 << 20};
    snprintf(rope.rope.type_name, sizeof rope.rope.type_name, "axial");
    g_attn_opts ao = {.num_heads = v->num_heads, .num_kv_heads = v->num_heads,
                      .head_dim = v->head_dim, .scale = 1.0 / sqrt((double)v->head_dim),
                      .mask = G_MASK_GIVEN, .cache = G_CACHE_NONE};
    bool windowed = v->tower == QVL_TOWER_QWEN2_5_VL;
    block_weights w;
    for (int l = 0; l < (int)v->depth; l++) {
        if (bind_block(g, ck, v, l, dt, &w, err) != FERRY_OK)
            return G_NONE;
        int mask = windowed && !v->full_attention[l] ? in->window_mask : in->frame_mask;
        g_scope(g, "/blocks.%d", l);
        int y = norm(g, v, "norm1", h, w.norm1_w, w.norm1_b);
        g_scope(g, "/blocks.%d/attn", l);
        int qkv = g_linear(g, "qkv", y, w.qkv, w.qkv_b);
        int q = heads(g, "Reshape", g_slice(g, "Slice", qkv, 2, 0, e), v);
        int k = heads(g, "Reshape_1", g_slice(g, "Slice_1", qkv, 2, e, 2 * e), v);
        int val = heads(g, "Reshape_2", g_slice(g, "Slice_2", qkv, 2, 2 * e, 3 * e), v);
        if (in->positions != G_NONE) {
            q = g_rope(g, "q_rope", q, in->positions, &rope);
            k = g_rope(g, "k_rope", k, in->positions, &rope);
        } else {
            q = rotate(g, "q_rope", q, in, v->head_dim);
            k = rotate(g, "k_rope", k, in, v->head_dim);
        }
        int a = g_attention(g, "attention", q, k, val, mask, G_NONE, G_NONE, G_NONE, &ao, NULL,
                            NULL);
        a = g_linear(g, "proj", a, w.proj, w.proj_b);
        g_scope(g, "/blocks.%d", l);
        y = skip_norm(g, v, "norm2", a, h, w.norm2_w, w.norm2_b, &h);
        g_scope(g, "/blocks.%d/mlp", l);
        int f = mlp(g, v, &w, y, dt);
        g_scope(g, "/blocks.%d", l);
        h = g_binary(g, G_ADD, "Add_1", h, f);
    }
    g_scope(g, "%s", "");
    return h;
}

/* The merger over the blocks' output h [1, n, embed]: [n / merge^2, out_hidden]. */
static int tower_merger(g_graph *g, ckpt *ck, const qvl_vision *v, ferry_dtype dt, int h,
                        fy_err *err)
{
    int64_t e = v->embed_dim, group = v->merge * v->merge;
    bool windowed = v->tower == QVL_TOWER_QWEN2_5_VL;
    char name[96];
    int ln_w, ln_b = G_NONE, m0, m0_b, m2, m2_b;
#define W(slot, suffix, d0, d1)                                                              \
    do {                                                                                     \
        snprintf(name, sizeof name, VISION_PREFIX "merger.%s", suffix);                     \
        slot = blk_weight(g, ck, name, 0, true, d0, d1, dt, err);                            \
        if (err->status != FERRY_OK)                                                         \
            return G_NONE;                                                                   \
    } while (0)
    W(ln_w, "ln_q.weight", e, 0);
    if (!windowed)
        W(ln_b, "ln_q.bias", e, 0);
    W(m0, "mlp.0.weight", e * group, e * group);
    W(m0_b, "mlp.0.bias", e * group, 0);
    W(m2, "mlp.2.weight", v->out_hidden, e * group);
    W(m2_b, "mlp.2.bias", v->out_hidden, 0);
#undef W
    g_scope(g, "/merger");
    int merged = g_reshape_spec(g, "view", norm(g, v, "ln_q", h, ln_w, ln_b), 2,
                                (int64_t[]){-1, e * group});
    merged = g_linear(g, "mlp/0", merged, m0, m0_b);
    merged = g_unary(g, G_GELU, "mlp/1", merged);
    merged = g_linear(g, "mlp/2", merged, m2, m2_b);
    g_scope(g, "%s", "");
    return merged;
}

static ferry_status finish(g_graph *g, fy_err *err)
{
    if (!g_ok(g))
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    return FERRY_OK;
}

ferry_status qvl_vision_build(const qvl_vision *v, ckpt *ck, const model_io *io, g_graph *g,
                              fy_err *err)
{
    ferry_dtype dt = io->dtype;
    int64_t e = v->embed_dim;
    g_dim n_patches = io->axes[QVL_AXIS_PATCHES], n_images = io->axes[QVL_AXIS_IMAGES];
    /* the image processor gives whole merged blocks: counting the symbol in them sizes the
     * merger's rows (n_patches / merge^2) as an expression of the input's */
    g_sym_count_in_units(&g->syms, &n_patches, v->merge * v->merge, "merged_");
    int pixels = g_input(g, "pixel_values", dt, 2,
                         (g_dim[]){n_patches, g_dim_const(v->patch_dim)});
    int grid = g_input(g, "image_grid_thw", FERRY_I64, 2, (g_dim[]){n_images, g_dim_const(3)});
    int patch_w = patch_weight(g, ck, v, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    declare_modules(g, v);

    int patches = g_gather(g, "patches", g_shape_of(g, "pixel_shape", pixels, 0, 1),
                           g_scalar_i64(g, 0), 0);
    patch_layout at = layout_patches(g, v, grid, patches, n_patches);
    g_scope(g, "/patch_embed");
    int x = g_unsqueeze(g, "batch", g_linear(g, "proj", pixels, patch_w, G_NONE), 1,
                        (int64_t[]){0});
    g_scope(g, "%s", "");
    block_inputs in = {.positions = at.positions, .cos = G_NONE, .sin = G_NONE,
                       .frame_mask = at.frame_mask, .window_mask = at.window_mask};
    int h = tower_blocks(g, ck, v, dt, x, &in, err);
    if (err->status != FERRY_OK)
        return err->status;
    int merged = tower_merger(g, ck, v, dt, h, err);
    if (err->status != FERRY_OK)
        return err->status;
    int hidden = g_reshape_spec(g, "last_hidden_state/Reshape", h, 2, (int64_t[]){-1, e});
    if (v->tower == QVL_TOWER_QWEN2_5_VL)
        hidden = g_gather(g, "last_hidden_state/window_order", hidden, at.window_order, 0);
    g_output(g, hidden, "last_hidden_state");
    g_output(g, merged, "pooler_output");
    return finish(g, err);
}

ferry_status qvl_patch_embed_build(const qvl_vision *v, ckpt *ck, const model_io *io,
                                   g_graph *g, fy_err *err)
{
    ferry_dtype dt = io->dtype;
    int pixels = g_input(g, "hidden_states", dt, 2,
                         (g_dim[]){io->axes[QVL_AXIS_PATCHES], g_dim_const(v->patch_dim)});
    int patch_w = patch_weight(g, ck, v, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    declare_modules(g, v);
    g_scope(g, "/patch_embed");
    int x = g_linear(g, "proj", pixels, patch_w, G_NONE);
    g_scope(g, "%s", "");
    g_output(g, x, "last_hidden_state");
    return finish(g, err);
}

/* rows [n, width] of x in merge units taken in `order` ([n / merge^2] unit indexes): Qwen2.5-VL's
 * permute_input_for_window_attn */
static int units_in_order(g_graph *g, const char *name, int x, int order, int64_t width,
                          int64_t group)
{
    char n[64];
    snprintf(n, sizeof n, "%s/units", name);
    int units = g_reshape_spec(g, n, x, 3, (int64_t[]){-1, group, width});
    snprintf(n, sizeof n, "%s/Gather", name);
    int taken = g_gather(g, n, units, order, 0);
    return g_reshape_spec(g, name, taken, 2, (int64_t[]){-1, width});
}

ferry_status qvl_merger_build(const qvl_vision *v, ckpt *ck, const model_io *io, g_graph *g,
                              fy_err *err)
{
    ferry_dtype dt = io->dtype;
    int64_t e = v->embed_dim, group = v->merge * v->merge, half = v->head_dim / 2;
    g_dim n = io->axes[QVL_AXIS_PATCHES];
    bool windowed = v->tower == QVL_TOWER_QWEN2_5_VL;
    int h = g_input(g, "hidden_states", dt, 2, (g_dim[]){n, g_dim_const(e)});
    int mask = g_input(g, "attention_mask", dt, 3, (g_dim[]){g_dim_const(1), n, n});
    int angles = g_input(g, "rotary_pos_emb", dt, 2, (g_dim[]){n, g_dim_const(half)});
    int window_mask = G_NONE, window_index = G_NONE;
    if (windowed) {
        window_mask = g_input(g, "window_attention_mask", dt, 3,
                              (g_dim[]){g_dim_const(1), n, n});
        window_index = g_input(g, "window_index", FERRY_I64, 1, (g_dim[]){g_dim_unknown()});
    }
    declare_modules(g, v);
    g_scope(g, "/rotary_pos_emb");
    /* openvino-genai computes the angles with base 10000 whatever the config says: a tower of
     * another rope_theta gets each frequency's angles rescaled to its own,
     * (10000 / theta)^(i / (D/2)) for the i-th of the D/2 frequencies of each half */
    if (v->theta != GENAI_VISION_THETA) {
        float scale[2 * QVL_MAX_ROTARY];
        if (half > 2 * QVL_MAX_ROTARY)
            return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: a vision head of %lld rotary angles "
                           "is wider than ferry rescales for openvino-genai (%d)", v->origin,
                           (long long)half, 2 * QVL_MAX_ROTARY);
        for (int64_t i = 0; i < half / 2; i++)
            scale[i] = scale[i + half / 2] =
                (float)pow(GENAI_VISION_THETA / v->theta, (double)i / (double)(half / 2));
        angles = g_binary(g, G_MUL, "theta_scale", angles,
                          g_const(g, FERRY_F32, 1, (int64_t[]){half}, scale));
    }
    if (windowed) {
        h = units_in_order(g, "hidden_states_in_windows", h, window_index, e, group);
        angles = units_in_order(g, "angles_in_windows", angles, window_index, half, group);
    }
    /* emb = cat(angles, angles); cos and sin of it, one row per patch, broadcast over heads */
    int twice[2] = {angles, angles};
    int emb = g_unsqueeze(g, "emb", g_concat(g, "cat", 2, twice, 1), 2, (int64_t[]){0, 2});
    block_inputs in = {.positions = G_NONE, .cos = g_unary(g, G_COS, "cos", emb),
                       .sin = g_unary(g, G_SIN, "sin", emb)};
    /* the runtime's additive masks: 0 where a patch may attend, -inf (or the lowest float)
     * elsewhere */
    g_scope(g, "%s", "");
    int zero = g_scalar_f(g, dt, 0.0);
    in.frame_mask = g_unsqueeze(g, "frame_mask", g_binary(g, G_EQUAL, "frame_visible", mask,
                                                          zero), 1, (int64_t[]){1});
    if (windowed)
        in.window_mask = g_unsqueeze(g, "window_mask",
                                     g_binary(g, G_EQUAL, "window_visible", window_mask, zero),
                                     1, (int64_t[]){1});
    int x = g_unsqueeze(g, "batch", h, 1, (int64_t[]){0});
    int out = tower_blocks(g, ck, v, dt, x, &in, err);
    if (err->status != FERRY_OK)
        return err->status;
    out = tower_merger(g, ck, v, dt, out, err);
    if (err->status != FERRY_OK)
        return err->status;
    if (windowed) {
        /* back from window order: reverse[window_index[i]] = i */
        int units = g_gather(g, "units", g_shape_of(g, "window_shape", window_index, 0, 1),
                             g_scalar_i64(g, 0), 0);
        int i = g_range(g, "unit", g_scalar_i64(g, 0), units, g_scalar_i64(g, 1));
        int reverse = g_scatter_elements(g, "reverse_indices", i, window_index, i, 0);
        out = g_gather(g, "in_image_order", out, reverse, 0);
    }
    g_output(g, out, "last_hidden_state");
    return finish(g, err);
}
