/* mixtral.c — MixtralForCausalLM: Mistral's attention (a sliding window on every layer when
 * "sliding_window" is set) with a sparse block on every layer: softmax over num_local_experts
 * router logits, the top num_experts_per_tok always renormalised, kept fp32 to scale each
 * expert's output; experts of intermediate_size, stored as w1 (gate), w3 (up) and w2 (down)
 * under block_sparse_moe. */
#include "generate/generation.h"
#include "models/blocks.h"

static const blk_names MIXTRAL_NAMES = {
    BLK_LLAMA_ATTENTION_NAMES,
    .router = "model.layers.%d.block_sparse_moe.gate.weight",
    .expert_gate = "model.layers.%d.block_sparse_moe.experts.%d.w1.weight",
    .expert_up = "model.layers.%d.block_sparse_moe.experts.%d.w3.weight",
    .expert_down = "model.layers.%d.block_sparse_moe.experts.%d.w2.weight",
};

static void mixtral_quirks(const lm_config *c, blk_lm *lm)
{
    for (int64_t i = 0; i < lm->n_layers; i++)
        lm->window[i] = c->sliding_window;
    lm->names = &MIXTRAL_NAMES;
    lm->tied_name = MIXTRAL_NAMES.embed;
}

static ferry_status mixtral_read_extra(const model_config *cfg, const lm_config *c, blk_lm *lm,
                                       fy_err *err)
{
    (void)c;
    static const blk_moe_keys keys = {.experts = "num_local_experts",
                                      .experts_alias = "num_experts",
                                      .experts_default = 8, .scale_f32 = true};
    return blk_moe_read(cfg, &keys, lm, err);
}

static const blk_family MIXTRAL = {
    .model_type = "mixtral", .prefix = "Mixtral",
    /* onnxruntime-genai has no type of its own for it; it runs the graph as Mistral's, whose inputs
     * and outputs it has */
    .genai_type = "mistral", .quirks = mixtral_quirks,
    .read_extra = mixtral_read_extra,
    /* MixtralConfig's defaults */
    .config_defaults = "{\"num_experts_per_tok\": 2}",
};

BLK_MOE_LM_DEFINE(model_mixtral, "MixtralForCausalLM", "mixtral", MIXTRAL);
