/* llama.c — LlamaForCausalLM: the standard decoder; "attention_bias" puts biases on q/k/v/o,
 * "mlp_bias" on the MLP. No sliding window, whatever sliding_window or layer_types say:
 * transformers' Llama attention has none. */
#include "generate/generation.h"
#include "models/blocks.h"

static const blk_family LLAMA = {
    .model_type = "llama", .prefix = "Llama", .genai_type = "llama", .quirks = blk_llama_biases,
};

static ferry_status llama_read(const model_config *cfg, void **out, fy_err *err)
{
    return blk_lm_read(cfg, &LLAMA, out, err);
}

const model_arch model_llama = BLK_LM_ARCH("LlamaForCausalLM", "llama", llama_read);
