/* qwen3.c — Qwen3ForCausalLM: RMSNorm over head_dim on q and k before rope; "attention_bias"
 * puts biases on q/k/v/o; per-layer sliding windows from "layer_types". */
#include "generate/generation.h"
#include "models/blocks.h"

static void qwen3_quirks(const lm_config *c, blk_lm *lm)
{
    /* use_sliding_window defaults to false here, unlike the generic reading */
    blk_lm_windows(c, c->use_sliding_window_set ? c->sliding_window : 0, lm);
    lm->qk_norm = BLK_QK_PER_HEAD;
    lm->qkv_bias = c->attention_bias;
    lm->o_bias = c->attention_bias;
}

static const blk_family QWEN3 = {
    .model_type = "qwen3", .prefix = "Qwen3", .genai_type = "qwen3", .quirks = qwen3_quirks,
};

BLK_LM_DEFINE(model_qwen3, "Qwen3ForCausalLM", "qwen3", QWEN3);
