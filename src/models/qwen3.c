/* qwen3.c — Qwen3ForCausalLM: RMSNorm over head_dim on q and k before rope; "attention_bias"
 * puts biases on q/k/v/o; per-layer sliding windows from "layer_types". */
#include "models/blocks.h"

static void qwen3_quirks(const lm_config *c, blk_lm *lm)
{
    lm->qk_norm = true;
    lm->qkv_bias = c->attention_bias;
    lm->o_bias = c->attention_bias;
}

static ferry_status qwen3_read(const model_config *cfg, void **out, fy_err *err)
{
    return blk_lm_read(cfg, qwen3_quirks, out, err);
}

const model_arch model_qwen3 = {"Qwen3ForCausalLM", "qwen3", qwen3_read, blk_lm_destroy,
                                blk_lm_build_hook, blk_lm_inputs, 3, true};
