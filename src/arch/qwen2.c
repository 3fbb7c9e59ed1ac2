/* qwen2.c — Qwen2ForCausalLM: biases on q/k/v (not o); sliding window only on the layers that
 * "layer_types" marks "sliding_attention" (transformers derives that list from
 * use_sliding_window and max_window_layers). */
#include "arch/arch.h"

static ferry_status qwen2_hparams(const model_config *cfg, decoder_hparams *hp, fy_err *err)
{
    (void)cfg;
    (void)err;
    hp->qkv_bias = true;
    return FERRY_OK;
}

const arch_family arch_qwen2 = {"Qwen2ForCausalLM", "qwen2", qwen2_hparams, true};
