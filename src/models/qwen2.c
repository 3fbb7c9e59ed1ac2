/* qwen2.c — Qwen2ForCausalLM: biases on q/k/v (not o); sliding window only on the layers that
 * "layer_types" marks "sliding_attention" (transformers derives that list from
 * use_sliding_window and max_window_layers). */
#include "generate/generation.h"
#include "models/blocks.h"
#include "models/qwen2.h"

void qwen2_quirks(const lm_config *c, blk_lm *lm)
{
    blk_lm_windows(c, c->use_sliding_window_set ? c->sliding_window : 0, lm);
    lm->qkv_bias = true;
}

static const blk_family QWEN2 = {
    .model_type = "qwen2", .prefix = "Qwen2", .genai_type = "qwen2", .quirks = qwen2_quirks,
};

BLK_LM_DEFINE(model_qwen2, "Qwen2ForCausalLM", "qwen2", QWEN2);
