/* llama.c — LlamaForCausalLM: the plain skeleton; "attention_bias" puts biases on q/k/v/o. */
#include "arch/arch.h"

static ferry_status llama_hparams(const model_config *cfg, decoder_hparams *hp, fy_err *err)
{
    (void)err;
    hp->qkv_bias = cfg->attention_bias;
    hp->o_bias = cfg->attention_bias;
    hp->mlp_bias = cfg->mlp_bias;
    return FERRY_OK;
}

const arch_family arch_llama = {"LlamaForCausalLM", "llama", llama_hparams, true};
