/* mistral.c — MistralForCausalLM: the skeleton with a sliding window on every layer when
 * "sliding_window" is set (transformers' Mistral has no per-layer pattern). */
#include "arch/arch.h"

static ferry_status mistral_hparams(const model_config *cfg, decoder_hparams *hp, fy_err *err)
{
    (void)err;
    for (int64_t i = 0; i < hp->n_layers; i++)
        hp->window[i] = cfg->sliding_window;
    return FERRY_OK;
}

const arch_family arch_mistral = {"MistralForCausalLM", "mistral", mistral_hparams, true};
