/* qwen2_vl.h — the pieces Qwen2-VL and Qwen2.5-VL share between their family file (qwen2_vl.c:
 * config, components, language model) and their vision tower (qwen2_vl_vision.c: the image
 * encoder). */
#ifndef FERRY_MODELS_QWEN2_VL_H
#define FERRY_MODELS_QWEN2_VL_H

#include "models/model.h"

#define QVL_MAX_DEPTH 1024

/* Which tower: Qwen2-VL's (LayerNorm, quick_gelu MLP, attention within a frame) or
 * Qwen2.5-VL's (RMSNorm, gated SiLU MLP, attention within a window of merged blocks except on
 * its full-attention layers). */
typedef enum qvl_tower { QVL_TOWER_QWEN2_VL, QVL_TOWER_QWEN2_5_VL } qvl_tower;

/* The vision tower's hyperparameters (config.json's vision_config). */
typedef struct qvl_vision {
    qvl_tower tower;
    int64_t depth, embed_dim, num_heads, head_dim, mlp_hidden;
    int64_t out_hidden;             /* the merger's output: the language model's width */
    int64_t in_channels, patch_size, temporal_patch_size, merge;
    int64_t patch_dim;              /* in_channels * temporal_patch_size * patch_size^2 */
    double theta;                   /* the 2-D rotary's base */
    double eps;                     /* its norms' (transformers fixes 1e-6) */
    int64_t window;                 /* Qwen2.5-VL: merged blocks per window side */
    bool full_attention[QVL_MAX_DEPTH]; /* Qwen2.5-VL: the layers that see the whole frame */
    const char *origin;             /* names vision_config in messages (the family's text) */
} qvl_vision;

/* Reads vision_config of config.json (`root`) for `tower` into *v; errors name `origin` and
 * the key. */
ferry_status qvl_vision_read(const struct cJSON *root, const char *origin, qvl_tower tower,
                             qvl_vision *v, fy_err *err);

/* The image encoder's graph: pixel_values [patches, patch_dim] and image_grid_thw [images, 3]
 * in, the tower's last hidden state [patches, embed_dim] and the merged image features
 * (pooler_output) [patches / merge^2, out_hidden] out, as the tower's transformers module
 * computes them (Qwen2.5-VL's last hidden state in its window order, as transformers returns
 * it). io->axes holds the model's axes in qvl_axes order. */
ferry_status qvl_vision_build(const qvl_vision *v, ckpt *ck, const model_io *io, g_graph *g,
                              fy_err *err);

/* openvino-genai's VLMPipeline splits the tower in two, and computes the positions and masks
 * itself. The patch embedding: hidden_states [patches, patch_dim] -> last_hidden_state
 * [patches, embed_dim]. */
ferry_status qvl_patch_embed_build(const qvl_vision *v, ckpt *ck, const model_io *io,
                                   g_graph *g, fy_err *err);

/* The blocks and the merger: hidden_states [patches, embed_dim] (the patch embedding's),
 * attention_mask [1, patches, patches] (additive: 0 within a frame), rotary_pos_emb [patches,
 * head_dim / 2] (each patch's h angles, then its w angles), and for Qwen2.5-VL
 * window_attention_mask (over the patches in window order) and window_index (the merge units
 * in window order) -> last_hidden_state [patches / merge^2, out_hidden], in image order. */
ferry_status qvl_merger_build(const qvl_vision *v, ckpt *ck, const model_io *io, g_graph *g,
                              fy_err *err);

/* The model's axes: batch and sequence (the language model's), patches and images. */
enum { QVL_AXIS_BATCH, QVL_AXIS_SEQUENCE, QVL_AXIS_PATCHES, QVL_AXIS_IMAGES, QVL_N_AXES };
extern const model_axis qvl_axes[QVL_N_AXES];

#endif
