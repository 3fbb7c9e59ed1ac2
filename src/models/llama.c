/* llama.c — LlamaForCausalLM: the standard decoder; "attention_bias" puts biases on q/k/v/o,
 * "mlp_bias" on the MLP. No sliding window, whatever sliding_window or layer_types say:
 * transformers' Llama attention has none. */
#include "generate/generation.h"
#include "models/blocks.h"

static void llama_quirks(const lm_config *c, blk_lm *lm)
{
    lm->qkv_bias = c->attention_bias;
    lm->o_bias = c->attention_bias;
    lm->mlp_bias = c->mlp_bias;
}

static const blk_family LLAMA = {
    .model_type = "llama", .prefix = "Llama", .genai_type = "llama", .quirks = llama_quirks,
};

static ferry_status llama_read(const model_config *cfg, void **out, fy_err *err)
{
    return blk_lm_read(cfg, &LLAMA, out, err);
}

const model_arch model_llama = {
    .architecture = "LlamaForCausalLM", .model_type = "llama", .kind = MODEL_CAUSAL_LM,
    .output_class = MODEL_CAUSAL_LM_OUTPUT, .read = llama_read,
    .free_hparams = blk_lm_destroy, .bind = blk_lm_bind, .plan = gen_decoder_plan,
    .build = blk_lm_build_hook,
    .inputs = blk_lm_inputs, .n_inputs = 3, .generation = true,
    .describe = blk_lm_describe,
};
