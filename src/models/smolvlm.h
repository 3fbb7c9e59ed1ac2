/* smolvlm.h — SmolVLM's pieces shared by its family file (smolvlm.c: config, components,
 * language model) and its vision tower and connector (smolvlm_vision.c). */
#ifndef FERRY_MODELS_SMOLVLM_H
#define FERRY_MODELS_SMOLVLM_H

#include "models/model.h"

/* The vision tower's hyperparameters (config.json's vision_config) and the connector's. */
typedef struct svlm_vision {
    int64_t layers, hidden, heads, head_dim, intermediate;
    int64_t channels, image_size, patch_size;
    int64_t side;               /* patches per side: image_size / patch_size */
    double eps;                 /* layer_norm_eps */
    int64_t scale_factor;       /* the connector's pixel shuffle */
    int64_t text_hidden;        /* the connector's output: the language model's width */
} svlm_vision;

/* Reads vision_config and scale_factor of config.json (`root`); errors name `origin` and the
 * key. `text_hidden` is the language model's width. */
ferry_status svlm_vision_read(const struct cJSON *root, const char *origin, int64_t text_hidden,
                              svlm_vision *v, fy_err *err);

/* image_encoder: pixel_values [images, channels, image_size, image_size] (whole tiles, as the
 * image processor makes them) -> last_hidden_state [images, side^2, hidden], as
 * SmolVLMVisionTransformer computes it for an all-ones patch mask. */
ferry_status svlm_vision_build(const svlm_vision *v, ckpt *ck, const model_io *io, g_graph *g,
                               fy_err *err);

/* connector: image_hidden_states [images, side^2, hidden] -> the image features [images,
 * side^2 / scale^2, text_hidden] (pixel shuffle, then the projection). */
ferry_status svlm_connector_build(const svlm_vision *v, ckpt *ck, const model_io *io,
                                  g_graph *g, fy_err *err);

/* The model's axes: batch and sequence (the language model's) and images. */
enum { SVLM_AXIS_BATCH, SVLM_AXIS_SEQUENCE, SVLM_AXIS_IMAGES, SVLM_N_AXES };
extern const model_axis svlm_axes[SVLM_N_AXES];

#endif
