/* qwen2_vl_vision.c — Qwen2-VL's vision tower as the image_encoder component, as
 * Qwen2VisionTransformerPretrainedModel computes it:
 *
 *   patch_embed   pixel_values [patches, C*T*p*p] (the image processor's rows, merge-block
 *                 order) through the Conv3d whose kernel is the whole patch: a linear by its
 *                 weight flattened to [embed, C*T*p*p]
 *   positions     each patch's (h, w) in its image, computed in the graph from image_grid_thw
 *                 (get_vision_position_ids: rows of merge x merge blocks, raster order within
 *                 a block), and which image and frame it belongs to
 *   blocks        pre-norm: x += proj(attention(LayerNorm(x))), x += fc2(act(fc1(LayerNorm(x))));
 *                 attention is bidirectional within one frame of one image (cu_seqlens) and
 *                 rotates q and k by the 2-D rotary (h angles, then w angles)
 *   merger        LayerNorm, merge^2 consecutive rows as one, Linear, GELU, Linear
 *
 * The positions and the frame mask come from image_grid_thw in the graph, so one export takes
 * any number of images of any size; the caller passes what the image processor returns. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/blocks.h"
#include "models/qwen2_vl.h"
#include "util/json.h"
#include "util/text.h"

#define MODELING "transformers.models.qwen2_vl.modeling_qwen2_vl."
#define LAYER_NORM_CLASS "torch.nn.modules.normalization.LayerNorm"
#define QUICK_GELU_CLASS "transformers.activations.QuickGELUActivation"

/* where the tower's tensors are, under the family's checkpoint layout (qwen2_vl.c) */
#define VISION_PREFIX "visual."

#define MAX_DEPTH 1024
#define MAX_WIDTH (1 << 20)
#define MAX_PATCH 4096

const model_axis qvl_axes[QVL_N_AXES] = {
    {"batch", 1}, {"sequence", 8}, {"patches", 16}, {"images", 1},
};

ferry_status qvl_vision_read(const cJSON *root, const char *origin, qvl_vision *v, fy_err *err)
{
    const cJSON *vc;
    memset(v, 0, sizeof *v);
    v->origin = origin;
    if (json_get_member(root, "vision_config", true, origin, &vc, err) != FERRY_OK)
        return err->status;
    if (!cJSON_IsObject(vc))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'vision_config' must be an object",
                       origin);
    double mlp_ratio;
    char act[32];
    const cJSON *rope;
    if (json_get_int(vc, "depth", false, 32, 1, MAX_DEPTH, origin, &v->depth, err) ||
        json_get_int(vc, "embed_dim", false, 1280, 1, MAX_WIDTH, origin, &v->embed_dim, err) ||
        json_get_int(vc, "hidden_size", false, 3584, 1, MAX_WIDTH, origin, &v->out_hidden,
                     err) ||
        json_get_int(vc, "num_heads", false, 16, 1, MAX_WIDTH, origin, &v->num_heads, err) ||
        json_get_double(vc, "mlp_ratio", false, 4.0, 1e-3, 1e3, origin, &mlp_ratio, err) ||
        json_get_int(vc, "in_channels", false, 3, 1, 64, origin, &v->in_channels, err) ||
        json_get_int(vc, "patch_size", false, 14, 1, MAX_PATCH, origin, &v->patch_size, err) ||
        json_get_int(vc, "temporal_patch_size", false, 2, 1, 64, origin,
                     &v->temporal_patch_size, err) ||
        json_get_int(vc, "spatial_merge_size", false, 2, 1, 64, origin, &v->merge, err) ||
        json_get_string(vc, "hidden_act", false, "quick_gelu", origin, act, sizeof act, err) ||
        json_get_member(vc, "rope_parameters", false, origin, &rope, err))
        return err->status;
    if (strcmp(act, "quick_gelu") != 0) {
        char q[64];
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: vision_config.hidden_act '%s' is not "
                       "supported (supported: quick_gelu)", origin, text_quote(act, q, sizeof q));
    }
    v->theta = 10000.0;
    if (rope && json_get_double(rope, "rope_theta", false, 10000.0, 1e-6, 1e30, origin,
                                &v->theta, err) != FERRY_OK)
        return err->status;
    if (v->embed_dim % v->num_heads != 0 || (v->embed_dim / v->num_heads) % 4 != 0)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: vision_config.embed_dim %lld must split into "
                       "num_heads %lld heads of a width divisible by 4 (the 2-D rotary's h and "
                       "w halves)", origin, (long long)v->embed_dim, (long long)v->num_heads);
    v->head_dim = v->embed_dim / v->num_heads;
    /* transformers: int(embed_dim * mlp_ratio) */
    v->mlp_hidden = (int64_t)((double)v->embed_dim * mlp_ratio);
    if (v->mlp_hidden < 1 || v->mlp_hidden > MAX_WIDTH)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: vision_config.mlp_ratio %g gives an MLP of "
                       "width %lld", origin, mlp_ratio, (long long)v->mlp_hidden);
    v->patch_dim = v->in_channels * v->temporal_patch_size * v->patch_size * v->patch_size;
    v->eps = 1e-6;
    return FERRY_OK;
}

/* The tower's modules at the scopes its nodes are named under (the component's root is the
 * tower itself). */
static void declare_modules(g_graph *g, const qvl_vision *v)
{
    g_module_add(g, MODELING "Qwen2VisionTransformerPretrainedModel", G_OP_COUNT, false,
                 GM_ROLE_NONE, "%s", "");
    g_module_add(g, MODELING "PatchEmbed", G_OP_COUNT, false, GM_ROLE_NONE, "/patch_embed");
    g_module_add(g, "torch.nn.modules.conv.Conv3d", G_LINEAR, false, GM_ROLE_PATCH_EMBED,
                 "/patch_embed/proj");
    g_module_add(g, MODELING "VisionRotaryEmbedding", G_OP_COUNT, false, GM_ROLE_NONE,
                 "/rotary_pos_emb");
    static const struct {
        const char *cls, *scope;
        g_op leaf;
        bool list_item;
    } BLOCK[] = {
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
    for (int l = 0; l < (int)v->depth; l++)
        for (size_t i = 0; i < sizeof BLOCK / sizeof BLOCK[0]; i++)
            g_module_add(g, BLOCK[i].cls, BLOCK[i].leaf, BLOCK[i].list_item, GM_ROLE_NONE,
                         "/blocks.%d%s", l, BLOCK[i].scope);
    g_module_add(g, MODELING "PatchMerger", G_OP_COUNT, false, GM_ROLE_NONE, "/merger");
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
    char n[64];
    snprintf(n, sizeof n, "%s/Mul", name);
    return g_binary(g, G_SUB, name, a, g_binary(g, G_MUL, n, quotient, b));
}

/* What get_vision_position_ids and cu_seqlens say of each patch: its (h, w) as int64
 * [1, patches, 2] and the bool [1, 1, patches, patches] mask of the patches in the same frame
 * of the same image. `patches` is the pixel rows' count (a scalar). */
static void patch_layout(g_graph *g, const qvl_vision *v, int grid, int patches, g_dim n_patches,
                         int *positions, int *mask)
{
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
    int local = g_binary(g, G_SUB, "local", p, g_gather(g, "start", starts, image, 0));
    int size = g_gather(g, "size", frame_size, image, 0);
    int frame = g_binary(g, G_DIV, "frame", local, size);
    int in_frame = remainder_of(g, "in_frame", local, frame, size);
    int block_cols = g_binary(g, G_DIV, "block_cols", g_gather(g, "width", w, image, 0), m);
    int block_size = g_scalar_i64(g, v->merge * v->merge);
    int block = g_binary(g, G_DIV, "block", in_frame, block_size);
    int in_block = remainder_of(g, "in_block", in_frame, block, block_size);
    int block_row = g_binary(g, G_DIV, "block_row", block, block_cols);
    int block_col = remainder_of(g, "block_col", block, block_row, block_cols);
    int row_in = g_binary(g, G_DIV, "row_in_block", in_block, m);
    int col_in = remainder_of(g, "col_in_block", in_block, row_in, m);
    int hpos = g_binary(g, G_ADD, "hpos", g_binary(g, G_MUL, "hpos/Mul", block_row, m), row_in);
    int wpos = g_binary(g, G_ADD, "wpos", g_binary(g, G_MUL, "wpos/Mul", block_col, m), col_in);
    int pair[2] = {g_unsqueeze(g, "hpos_col", hpos, 1, &last),
                   g_unsqueeze(g, "wpos_col", wpos, 1, &last)};
    *positions = g_unsqueeze(g, "position_ids", g_concat(g, "hw", 2, pair, 1), 1,
                             (int64_t[]){0});
    g_scope(g, "%s", "");
    /* cu_seqlens: a segment is one frame (h * w patches) of one image */
    int same_image = g_binary(g, G_EQUAL, "same_image",
                              g_unsqueeze(g, "image_col", image, 1, &last),
                              g_unsqueeze(g, "image_row", image, 1, (int64_t[]){0}));
    int same_frame = g_binary(g, G_EQUAL, "same_frame",
                              g_unsqueeze(g, "frame_col", frame, 1, &last),
                              g_unsqueeze(g, "frame_row", frame, 1, (int64_t[]){0}));
    *mask = g_unsqueeze(g, "attention_mask", g_binary(g, G_AND, "same_segment", same_image,
                                                      same_frame),
                        2, (int64_t[]){0, 1});
}

typedef struct block_weights {
    int norm1_w, norm1_b, norm2_w, norm2_b, qkv, qkv_b, proj, proj_b, fc1, fc1_b, fc2, fc2_b;
} block_weights;

static ferry_status bind_block(g_graph *g, ckpt *ck, const qvl_vision *v, int l, ferry_dtype dt,
                               block_weights *w, fy_err *err)
{
    char fmt[96];
    int64_t e = v->embed_dim, ff = v->mlp_hidden;
#define W(slot, name, d0, d1)                                                                \
    do {                                                                                     \
        snprintf(fmt, sizeof fmt, VISION_PREFIX "blocks.%%d.%s", name);                     \
        w->slot = blk_weight(g, ck, fmt, l, true, d0, d1, dt, err);                          \
        if (err->status != FERRY_OK)                                                         \
            return err->status;                                                              \
    } while (0)
    W(norm1_w, "norm1.weight", e, 0);
    W(norm1_b, "norm1.bias", e, 0);
    W(norm2_w, "norm2.weight", e, 0);
    W(norm2_b, "norm2.bias", e, 0);
    W(qkv, "attn.qkv.weight", 3 * e, e);
    W(qkv_b, "attn.qkv.bias", 3 * e, 0);
    W(proj, "attn.proj.weight", e, e);
    W(proj_b, "attn.proj.bias", e, 0);
    W(fc1, "mlp.fc1.weight", ff, e);
    W(fc1_b, "mlp.fc1.bias", ff, 0);
    W(fc2, "mlp.fc2.weight", e, ff);
    W(fc2_b, "mlp.fc2.bias", e, 0);
#undef W
    return FERRY_OK;
}

static int heads(g_graph *g, const char *name, int x, const qvl_vision *v)
{
    int64_t spec[4] = {0, 0, v->num_heads, v->head_dim};
    return g_reshape_spec(g, name, x, 4, spec);
}

/* The patch embedding's Conv3d weight [embed, C, T, p, p] as the matrix [embed, C*T*p*p]. */
static int patch_weight(g_graph *g, ckpt *ck, const qvl_vision *v, ferry_dtype dt, fy_err *err)
{
    char name[64];
    snprintf(name, sizeof name, VISION_PREFIX "patch_embed.proj.weight");
    const st_tensor *t = ckpt_take(ck, name);
    char full[128];
    if (!ckpt_full_name(ck, name, full, sizeof full))
        snprintf(full, sizeof full, "%s", name);
    if (!t) {
        fy_fail(err, FERRY_ERR_FORMAT, "checkpoint %s: required tensor '%s' is missing", ck->dir,
                full);
        return G_NONE;
    }
    const int64_t dims[5] = {v->embed_dim, v->in_channels, v->temporal_patch_size,
                             v->patch_size, v->patch_size};
    if (blk_check_shape(t, full, 5, dims, err) != FERRY_OK)
        return G_NONE;
    g_weight w = w_plain(t, dt);
    w.flatten = true;
    int out = g_weight_value(g, name, &w);
    if (out == G_NONE && g->err.status != FERRY_OK)
        fy_fail(err, g->err.status, "%s", g->err.msg);
    return out;
}

ferry_status qvl_vision_build(const qvl_vision *v, ckpt *ck, const model_io *io, g_graph *g,
                              fy_err *err)
{
    ferry_dtype dt = io->dtype;
    int64_t e = v->embed_dim, group = v->merge * v->merge;
    g_dim n_patches = io->axes[QVL_AXIS_PATCHES], n_images = io->axes[QVL_AXIS_IMAGES];
    int pixels = g_input(g, "pixel_values", dt, 2,
                         (g_dim[]){n_patches, g_dim_const(v->patch_dim)});
    int grid = g_input(g, "image_grid_thw", FERRY_I64, 2, (g_dim[]){n_images, g_dim_const(3)});
    int patch_w = patch_weight(g, ck, v, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    declare_modules(g, v);

    int patches = g_gather(g, "patches", g_shape_of(g, "pixel_shape", pixels, 0, 1),
                           g_scalar_i64(g, 0), 0);
    int positions, mask;
    patch_layout(g, v, grid, patches, n_patches, &positions, &mask);
    g_scope(g, "/patch_embed");
    int x = g_unsqueeze(g, "batch", g_linear(g, "proj", pixels, patch_w, G_NONE), 1,
                        (int64_t[]){0});

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
    block_weights w;
    int h = x;
    for (int l = 0; l < (int)v->depth; l++) {
        if (bind_block(g, ck, v, l, dt, &w, err) != FERRY_OK)
            return err->status;
        g_scope(g, "/blocks.%d", l);
        int y = g_layer_norm(g, "norm1", h, w.norm1_w, w.norm1_b, v->eps);
        g_scope(g, "/blocks.%d/attn", l);
        int qkv = g_linear(g, "qkv", y, w.qkv, w.qkv_b);
        int q = heads(g, "Reshape", g_slice(g, "Slice", qkv, 2, 0, e), v);
        int k = heads(g, "Reshape_1", g_slice(g, "Slice_1", qkv, 2, e, 2 * e), v);
        int val = heads(g, "Reshape_2", g_slice(g, "Slice_2", qkv, 2, 2 * e, 3 * e), v);
        q = g_rope(g, "q_rope", q, positions, &rope);
        k = g_rope(g, "k_rope", k, positions, &rope);
        int a = g_attention(g, "attention", q, k, val, mask, G_NONE, G_NONE, G_NONE, &ao, NULL,
                            NULL);
        a = g_linear(g, "proj", a, w.proj, w.proj_b);
        g_scope(g, "/blocks.%d", l);
        y = g_skip_layer_norm(g, "norm2", a, h, w.norm2_w, w.norm2_b, v->eps, &h);
        g_scope(g, "/blocks.%d/mlp", l);
        int f = g_linear(g, "fc1", y, w.fc1, w.fc1_b);
        /* quick_gelu: x * sigmoid(1.702 x) */
        f = g_binary(g, G_MUL, "act/Mul_1", f,
                     g_unary(g, G_SIGMOID, "act/Sigmoid",
                             g_binary(g, G_MUL, "act/Mul", f, g_scalar_f(g, dt, 1.702))));
        f = g_linear(g, "fc2", f, w.fc2, w.fc2_b);
        g_scope(g, "/blocks.%d", l);
        h = g_binary(g, G_ADD, "Add_1", h, f);
    }

    char name[96];
    int ln_w, ln_b, m0, m0_b, m2, m2_b;
#define W(slot, suffix, d0, d1)                                                              \
    do {                                                                                     \
        snprintf(name, sizeof name, VISION_PREFIX "merger.%s", suffix);                     \
        slot = blk_weight(g, ck, name, 0, true, d0, d1, dt, err);                            \
        if (err->status != FERRY_OK)                                                         \
            return err->status;                                                              \
    } while (0)
    W(ln_w, "ln_q.weight", e, 0);
    W(ln_b, "ln_q.bias", e, 0);
    W(m0, "mlp.0.weight", e * group, e * group);
    W(m0_b, "mlp.0.bias", e * group, 0);
    W(m2, "mlp.2.weight", v->out_hidden, e * group);
    W(m2_b, "mlp.2.bias", v->out_hidden, 0);
#undef W
    g_scope(g, "%s", "");
    int hidden = g_reshape_spec(g, "last_hidden_state/Reshape", h, 2, (int64_t[]){-1, e});
    g_scope(g, "/merger");
    int merged = g_reshape_spec(g, "view", g_layer_norm(g, "ln_q", h, ln_w, ln_b, v->eps), 2,
                                (int64_t[]){-1, e * group});
    merged = g_linear(g, "mlp/0", merged, m0, m0_b);
    merged = g_unary(g, G_GELU, "mlp/1", merged);
    merged = g_linear(g, "mlp/2", merged, m2, m2_b);
    g->scope[0] = '\0';
    g_output(g, hidden, "last_hidden_state");
    g_output(g, merged, "pooler_output");
    if (!g_ok(g))
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    return FERRY_OK;
}
