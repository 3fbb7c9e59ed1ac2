/* qwen3.c — Qwen3ForCausalLM: RMSNorm over head_dim on q and k before rope; "attention_bias"
 * puts biases on q/k/v/o; per-layer sliding windows from "layer_types". */
#include "arch/arch.h"

static ferry_status qwen3_hparams(const model_config *cfg, decoder_hparams *hp, fy_err *err)
{
    (void)err;
    hp->qk_norm = true;
    hp->qkv_bias = cfg->attention_bias;
    hp->o_bias = cfg->attention_bias;
    return FERRY_OK;
}

const arch_family arch_qwen3 = {"Qwen3ForCausalLM", "qwen3", qwen3_hparams, true};
