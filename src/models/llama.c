/* llama.c — LlamaForCausalLM: the standard decoder; "attention_bias" puts biases on q/k/v/o,
 * "mlp_bias" on the MLP. No sliding window, whatever sliding_window or layer_types say:
 * transformers' Llama attention has none. */
#include "generate/generation.h"
#include "models/blocks.h"

static const blk_family LLAMA = {
    .model_type = "llama", .prefix = "Llama", .genai_type = "llama", .quirks = blk_llama_biases,
};

BLK_LM_DEFINE(model_llama, "LlamaForCausalLM", "llama", LLAMA);
