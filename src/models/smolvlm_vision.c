/* smolvlm_vision.c — SmolVLM's vision tower (SmolVLMVisionTransformer, SigLIP's with NaViT's
 * position buckets) as the image_encoder component, and its connector as the connector
 * component:
 *
 *   embeddings   pixel_values [n, C, S, S] cut into side x side patches of C*p*p values (the
 *                Conv2d whose kernel and stride are the patch: a linear by its weight
 *                flattened to [hidden, C*p*p], plus its bias), plus the position embedding's row
 *                of each patch
 *   layers       x += out_proj(attention(layer_norm1(x))), x += fc2(gelu_tanh(fc1(
 *                layer_norm2(x)))); every patch of a tile sees every other
 *   post_layernorm
 *   connector    pixel shuffle by scale_factor s (each s x s block of patches as one row of
 *                s^2 * hidden, in transformers' order), then modality_projection.proj
 *
 * A tile is whole (the image processor resizes and splits images into image_size tiles): its
 * patch mask is all ones and patch i takes position row i. transformers buckets each patch's
 * fractional (h, w) by float32 boundaries from torch.arange, which for some sides (19, 25, ...
 * patches) put a patch in its neighbour's bucket, differently by the CPU's vector width; for
 * the sides of SmolVLM's checkpoints (27, 32) the buckets are exact and the rows are i. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/blocks.h"
#include "models/smolvlm.h"
#include "util/json.h"
#include "util/text.h"

#define MODELING "transformers.models.smolvlm.modeling_smolvlm."
#define LAYER_NORM_CLASS "torch.nn.modules.normalization.LayerNorm"

/* where the tower's and the connector's tensors are, under the family's checkpoint layout */
#define VISION_PREFIX "vision."
#define CONNECTOR_PREFIX "connector."

#define MAX_LAYERS 1024
#define MAX_WIDTH (1 << 20)

const model_axis svlm_axes[SVLM_N_AXES] = {{"batch", 1}, {"sequence", 8}, {"images", 1}};

ferry_status svlm_vision_read(const cJSON *root, const char *origin, int64_t text_hidden,
                              svlm_vision *v, fy_err *err)
{
    const cJSON *vc;
    memset(v, 0, sizeof *v);
    if (json_get_member(root, "vision_config", true, origin, &vc, err) != FERRY_OK)
        return err->status;
    if (!cJSON_IsObject(vc))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'vision_config' must be an object",
                       origin);
    char act[32];
    /* SmolVLMVisionConfig's defaults */
    if (json_get_int(vc, "num_hidden_layers", false, 32, 1, MAX_LAYERS, origin, &v->layers,
                     err) ||
        json_get_int(vc, "hidden_size", false, 1152, 1, MAX_WIDTH, origin, &v->hidden, err) ||
        json_get_int(vc, "num_attention_heads", false, 16, 1, MAX_WIDTH, origin, &v->heads,
                     err) ||
        json_get_int(vc, "intermediate_size", false, 3072, 1, MAX_WIDTH, origin,
                     &v->intermediate, err) ||
        json_get_int(vc, "num_channels", false, 3, 1, 64, origin, &v->channels, err) ||
        json_get_int(vc, "image_size", false, 224, 1, 1 << 16, origin, &v->image_size, err) ||
        json_get_int(vc, "patch_size", false, 32, 1, 1 << 16, origin, &v->patch_size, err) ||
        json_get_double(vc, "layer_norm_eps", false, 1e-6, 0.0, 1.0, origin, &v->eps, err) ||
        json_get_string(vc, "hidden_act", false, "gelu_pytorch_tanh", origin, act, sizeof act,
                        err) ||
        json_get_int(root, "scale_factor", false, 2, 1, 64, origin, &v->scale_factor, err))
        return err->status;
    if (strcmp(act, "gelu_pytorch_tanh") != 0) {
        char q[64];
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: vision_config.hidden_act '%s' is not "
                       "supported (supported: gelu_pytorch_tanh)", origin,
                       text_quote(act, q, sizeof q));
    }
    if (v->hidden % v->heads != 0)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: vision_config.hidden_size %lld must split "
                       "into num_attention_heads %lld heads", origin, (long long)v->hidden,
                       (long long)v->heads);
    if (v->image_size % v->patch_size != 0)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: vision_config.image_size %lld is not a whole "
                       "number of patch_size %lld patches", origin, (long long)v->image_size,
                       (long long)v->patch_size);
    v->side = v->image_size / v->patch_size;
    if (v->side % v->scale_factor != 0)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: scale_factor %lld does not divide the %lld "
                       "patches of a tile's side (vision_config.image_size / patch_size): the "
                       "pixel shuffle needs whole blocks", origin, (long long)v->scale_factor,
                       (long long)v->side);
    v->head_dim = v->hidden / v->heads;
    v->text_hidden = text_hidden;
    return FERRY_OK;
}

typedef struct module_decl {
    const char *cls, *scope;
    g_op leaf;
    bool list_item;
} module_decl;

static const module_decl LAYER[] = {
    {MODELING "SmolVLMEncoderLayer", "", G_OP_COUNT, true},
    {LAYER_NORM_CLASS, "/layer_norm1", G_LAYER_NORM, false},
    {LAYER_NORM_CLASS, "/layer_norm2", G_LAYER_NORM, false},
    {MODELING "SmolVLMVisionAttention", "/self_attn", G_OP_COUNT, false},
    {BLK_LINEAR_CLASS, "/self_attn/q_proj", G_LINEAR, false},
    {BLK_LINEAR_CLASS, "/self_attn/k_proj", G_LINEAR, false},
    {BLK_LINEAR_CLASS, "/self_attn/v_proj", G_LINEAR, false},
    {BLK_LINEAR_CLASS, "/self_attn/out_proj", G_LINEAR, false},
    {MODELING "SmolVLMVisionMLP", "/mlp", G_OP_COUNT, false},
    {BLK_LINEAR_CLASS, "/mlp/fc1", G_LINEAR, false},
    {BLK_GELU_TANH_CLASS, "/mlp/activation_fn", G_GELU_TANH, false},
    {BLK_LINEAR_CLASS, "/mlp/fc2", G_LINEAR, false},
};

static void declare_tower(g_graph *g, const svlm_vision *v)
{
    g_module_add(g, MODELING "SmolVLMVisionTransformer", G_OP_COUNT, false, GM_ROLE_NONE, "%s",
                 "");
    g_module_add(g, MODELING "SmolVLMVisionEmbeddings", G_OP_COUNT, false, GM_ROLE_NONE,
                 "/embeddings");
    g_module_add(g, "torch.nn.modules.conv.Conv2d", G_LINEAR, false, GM_ROLE_PATCH_EMBED,
                 "/embeddings/patch_embedding");
    g_module_add(g, BLK_EMBEDDING_CLASS, G_OP_COUNT, false, GM_ROLE_NONE,
                 "/embeddings/position_embedding");
    g_module_add(g, MODELING "SmolVLMEncoder", G_OP_COUNT, false, GM_ROLE_NONE, "/encoder");
    for (int l = 0; l < (int)v->layers; l++)
        for (size_t i = 0; i < sizeof LAYER / sizeof LAYER[0]; i++)
            g_module_add(g, LAYER[i].cls, LAYER[i].leaf, LAYER[i].list_item, GM_ROLE_NONE,
                         "/encoder/layers.%d%s", l, LAYER[i].scope);
    g_module_add(g, LAYER_NORM_CLASS, G_LAYER_NORM, false, GM_ROLE_NONE, "/post_layernorm");
}

/* The patch embedding's Conv2d weight [hidden, C, p, p] as the matrix [hidden, C*p*p]. */
static int patch_weight(g_graph *g, ckpt *ck, const svlm_vision *v, ferry_dtype dt, fy_err *err)
{
    const int64_t dims[4] = {v->hidden, v->channels, v->patch_size, v->patch_size};
    return blk_kernel_matrix(g, ck, VISION_PREFIX "embeddings.patch_embedding.weight", 4, dims,
                             dt, err);
}

typedef struct layer_weights {
    int ln1_w, ln1_b, ln2_w, ln2_b, q, q_b, k, k_b, v, v_b, o, o_b, fc1, fc1_b, fc2, fc2_b;
} layer_weights;

static ferry_status bind_layer(g_graph *g, ckpt *ck, const svlm_vision *v, int l,
                               ferry_dtype dt, layer_weights *w, fy_err *err)
{
    char fmt[128];
    int64_t h = v->hidden, ff = v->intermediate;
#define W(slot, name, d0, d1)                                                                \
    do {                                                                                     \
        snprintf(fmt, sizeof fmt, VISION_PREFIX "encoder.layers.%%d.%s", name);             \
        w->slot = blk_weight(g, ck, fmt, l, true, d0, d1, dt, err);                          \
        if (err->status != FERRY_OK)                                                         \
            return err->status;                                                              \
    } while (0)
    W(ln1_w, "layer_norm1.weight", h, 0);
    W(ln1_b, "layer_norm1.bias", h, 0);
    W(ln2_w, "layer_norm2.weight", h, 0);
    W(ln2_b, "layer_norm2.bias", h, 0);
    W(q, "self_attn.q_proj.weight", h, h);
    W(q_b, "self_attn.q_proj.bias", h, 0);
    W(k, "self_attn.k_proj.weight", h, h);
    W(k_b, "self_attn.k_proj.bias", h, 0);
    W(v, "self_attn.v_proj.weight", h, h);
    W(v_b, "self_attn.v_proj.bias", h, 0);
    W(o, "self_attn.out_proj.weight", h, h);
    W(o_b, "self_attn.out_proj.bias", h, 0);
    W(fc1, "mlp.fc1.weight", ff, h);
    W(fc1_b, "mlp.fc1.bias", ff, 0);
    W(fc2, "mlp.fc2.weight", h, ff);
    W(fc2_b, "mlp.fc2.bias", h, 0);
#undef W
    return FERRY_OK;
}

static int heads(g_graph *g, const char *name, int x, const svlm_vision *v)
{
    return g_reshape_spec(g, name, x, 4, (int64_t[]){0, 0, v->heads, v->head_dim});
}

ferry_status svlm_vision_build(const svlm_vision *v, ckpt *ck, const model_io *io, g_graph *g,
                               fy_err *err)
{
    ferry_dtype dt = io->dtype;
    int64_t c = v->channels, p = v->patch_size, s = v->side, h = v->hidden;
    int pixels = g_input(g, "pixel_values", dt, 4,
                         (g_dim[]){io->axes[SVLM_AXIS_IMAGES], g_dim_const(c),
                                   g_dim_const(v->image_size), g_dim_const(v->image_size)});
    int patch_w = patch_weight(g, ck, v, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    int patch_b = blk_weight(g, ck, VISION_PREFIX "embeddings.patch_embedding.bias", 0, true, h,
                             0, dt, err);
    int table = blk_weight(g, ck, VISION_PREFIX "embeddings.position_embedding.weight", 0, true,
                           s * s, h, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    declare_tower(g, v);
    g_scope(g, "/embeddings/patch_embedding");
    /* [n, C, S, S] -> [n, C, s, p, s, p] -> [n, s, s, C, p, p] -> [n, s*s, C*p*p] */
    int x = g_reshape_spec(g, "patches", pixels, 6, (int64_t[]){0, c, s, p, s, p});
    x = g_transpose(g, "patch_order", x, 6, (int64_t[]){0, 2, 4, 1, 3, 5});
    x = g_reshape_spec(g, "patch_rows", x, 3, (int64_t[]){0, s * s, c * p * p});
    x = g_linear(g, "proj", x, patch_w, patch_b);
    g_scope(g, "/embeddings");
    /* every patch of a whole tile takes its own row of the table (see the file's comment) */
    x = g_binary(g, G_ADD, "add_positions", x, table);
    int ln1_w, ln1_b;
    layer_weights w;
    g_attn_opts ao = {.num_heads = v->heads, .num_kv_heads = v->heads, .head_dim = v->head_dim,
                      .scale = 1.0 / sqrt((double)v->head_dim), .mask = G_MASK_NONE,
                      .cache = G_CACHE_NONE};
    for (int l = 0; l < (int)v->layers; l++) {
        if (bind_layer(g, ck, v, l, dt, &w, err) != FERRY_OK)
            return err->status;
        g_scope(g, "/encoder/layers.%d", l);
        int y = g_layer_norm(g, "layer_norm1", x, w.ln1_w, w.ln1_b, v->eps);
        g_scope(g, "/encoder/layers.%d/self_attn", l);
        int q = heads(g, "q", g_linear(g, "q_proj", y, w.q, w.q_b), v);
        int k = heads(g, "k", g_linear(g, "k_proj", y, w.k, w.k_b), v);
        int val = heads(g, "v", g_linear(g, "v_proj", y, w.v, w.v_b), v);
        int a = g_attention(g, "attention", q, k, val, G_NONE, G_NONE, G_NONE, G_NONE, &ao, NULL,
                            NULL);
        a = g_linear(g, "out_proj", a, w.o, w.o_b);
        g_scope(g, "/encoder/layers.%d", l);
        y = g_skip_layer_norm(g, "layer_norm2", a, x, w.ln2_w, w.ln2_b, v->eps, &x);
        g_scope(g, "/encoder/layers.%d/mlp", l);
        int f = g_unary(g, G_GELU_TANH, "activation_fn", g_linear(g, "fc1", y, w.fc1, w.fc1_b));
        f = g_linear(g, "fc2", f, w.fc2, w.fc2_b);
        g_scope(g, "/encoder/layers.%d", l);
        x = g_binary(g, G_ADD, "residual", x, f);
    }
    ln1_w = blk_weight(g, ck, VISION_PREFIX "post_layernorm.weight", 0, true, h, 0, dt, err);
    ln1_b = blk_weight(g, ck, VISION_PREFIX "post_layernorm.bias", 0, true, h, 0, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    g_scope(g, "%s", "");
    x = g_layer_norm(g, "post_layernorm", x, ln1_w, ln1_b, v->eps);
    g->scope[0] = '\0';
    g_output(g, x, "last_hidden_state");
    if (!g_ok(g))
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    return FERRY_OK;
}

ferry_status svlm_connector_build(const svlm_vision *v, ckpt *ck, const model_io *io,
                                  g_graph *g, fy_err *err)
{
    ferry_dtype dt = io->dtype;
    int64_t s = v->side, f = v->scale_factor, h = v->hidden;
    int x = g_input(g, "image_hidden_states", dt, 3,
                    (g_dim[]){io->axes[SVLM_AXIS_IMAGES], g_dim_const(s * s), g_dim_const(h)});
    int proj = blk_weight(g, ck, CONNECTOR_PREFIX "modality_projection.proj.weight", 0, true,
                          v->text_hidden, h * f * f, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    g_module_add(g, MODELING "SmolVLMConnector", G_OP_COUNT, false, GM_ROLE_NONE, "%s", "");
    g_module_add(g, MODELING "SmolVLMSimpleMLP", G_OP_COUNT, false, GM_ROLE_NONE,
                 "/modality_projection");
    g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_NONE,
                 "/modality_projection/proj");
    /* pixel_shuffle: view [n, s, s/f, h*f], permute, reshape [n, s/f, s/f, h*f*f], permute,
     * reshape [n, s*s/f^2, h*f*f] */
    x = g_reshape_spec(g, "view", x, 4, (int64_t[]){0, s, s / f, h * f});
    x = g_transpose(g, "permute", x, 4, (int64_t[]){0, 2, 1, 3});
    x = g_reshape_spec(g, "reshape", x, 4, (int64_t[]){0, s / f, s / f, h * f * f});
    x = g_transpose(g, "permute_1", x, 4, (int64_t[]){0, 2, 1, 3});
    x = g_reshape_spec(g, "reshape_1", x, 3, (int64_t[]){0, s * s / (f * f), h * f * f});
    g_scope(g, "/modality_projection");
    x = g_linear(g, "proj", x, proj, G_NONE);
    g->scope[0] = '\0';
    g_output(g, x, "image_features");
    if (!g_ok(g))
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    return FERRY_OK;
}
