/* qwen3_moe.c — Qwen3MoeForCausalLM: Qwen3's attention (q/k norms over head_dim,
 * "attention_bias" on q/k/v/o) with a sparse block on the layers decoder_sparse_step picks and
 * mlp_only_layers leaves out: softmax over num_experts router logits, the top
 * num_experts_per_tok, renormalised when norm_topk_prob, experts of moe_intermediate_size.
 * With use_sliding_window, every layer slides. */
#include "generate/generation.h"
#include "models/blocks.h"

static void qwen3_moe_quirks(const lm_config *c, blk_lm *lm)
{
    for (int64_t i = 0; i < lm->n_layers; i++)
        lm->window[i] = c->use_sliding_window_set ? c->sliding_window : 0;
    lm->qk_norm = BLK_QK_PER_HEAD;
    lm->qkv_bias = c->attention_bias;
    lm->o_bias = c->attention_bias;
    lm->names = &blk_qwen_moe_names;
    lm->tied_name = blk_qwen_moe_names.embed;
}

static ferry_status qwen3_moe_read_extra(const model_config *cfg, const lm_config *c,
                                         blk_lm *lm, fy_err *err)
{
    (void)c;
    static const blk_moe_keys keys = {.experts = "num_experts",
                                      .experts_alias = "num_local_experts",
                                      .experts_default = 128,
                                      .expert_ff = "moe_intermediate_size",
                                      .routed_layers = true, .norm_key = true};
    return blk_moe_read(cfg, &keys, lm, err);
}

static const blk_family QWEN3_MOE = {
    .model_type = "qwen3_moe", .prefix = "Qwen3Moe",
    /* onnxruntime-genai has no type of its own for it; it runs the graph as Qwen3's, whose inputs
     * and outputs it has */
    .genai_type = "qwen3", .quirks = qwen3_moe_quirks,
    .read_extra = qwen3_moe_read_extra,
    /* Qwen3MoeConfig's defaults */
    .config_defaults = "{\"num_experts_per_tok\": 8, "
                       "\"moe_intermediate_size\": 768, \"norm_topk_prob\": false, "
                       "\"decoder_sparse_step\": 1}",
};

BLK_MOE_LM_DEFINE(model_qwen3_moe, "Qwen3MoeForCausalLM", "qwen3_moe", QWEN3_MOE);
