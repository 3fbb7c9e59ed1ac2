/* qwen2_moe.c — Qwen2MoeForCausalLM: Qwen2's attention ("qkv_bias" on q/k/v, none on o) with
 * a sparse block on the layers decoder_sparse_step picks and mlp_only_layers leaves out, each
 * with a shared expert of shared_expert_intermediate_size added, scaled by the sigmoid of its
 * own one-output gate. Sliding windows on the layers "layer_types" marks sliding_attention;
 * without it, as Qwen2MoeConfig derives it: every other layer from the first, below
 * max_window_layers. */
#include <string.h>

#include "generate/generation.h"
#include "models/blocks.h"
#include "util/json.h"

static void qwen2_moe_quirks(const lm_config *c, blk_lm *lm)
{
    int64_t window = c->use_sliding_window_set ? c->sliding_window : 0;
    for (int64_t i = 0; i < lm->n_layers; i++) {
        bool sliding = c->layer_types ? strcmp(c->layer_types[i], "sliding_attention") == 0
                                      : (i + 1) % 2 != 0 && i < c->max_window_layers;
        lm->window[i] = sliding ? window : 0;
    }
    lm->names = &blk_qwen_moe_names;
    lm->tied_name = blk_qwen_moe_names.embed;
}

static ferry_status qwen2_moe_read_extra(const model_config *cfg, const lm_config *c,
                                         blk_lm *lm, fy_err *err)
{
    (void)c;
    static const blk_moe_keys keys = {.experts = "num_experts", .experts_default = 60,
                                      .expert_ff = "moe_intermediate_size",
                                      .shared_ff = "shared_expert_intermediate_size",
                                      .routed_layers = true, .norm_key = true};
    if (json_get_bool(cfg->text, "qkv_bias", true, true, cfg->text_origin, &lm->qkv_bias, err))
        return err->status;
    return blk_moe_read(cfg, &keys, lm, err);
}

static const blk_family QWEN2_MOE = {
    .model_type = "qwen2_moe", .prefix = "Qwen2Moe",
    /* onnxruntime-genai has no type of its own for it; it runs the graph as Qwen2's, whose inputs
     * and outputs it has */
    .genai_type = "qwen2", .quirks = qwen2_moe_quirks,
    .read_extra = qwen2_moe_read_extra,
    /* Qwen2MoeConfig's defaults */
    .config_defaults = "{\"num_experts_per_tok\": 4, "
                       "\"moe_intermediate_size\": 1408, "
                       "\"shared_expert_intermediate_size\": 5632, \"norm_topk_prob\": false, "
                       "\"decoder_sparse_step\": 1, \"qkv_bias\": true}",
};

BLK_MOE_LM_DEFINE(model_qwen2_moe, "Qwen2MoeForCausalLM", "qwen2_moe", QWEN2_MOE);
