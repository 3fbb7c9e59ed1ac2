/* mistral.c — MistralForCausalLM: the standard decoder with a sliding window on every layer
 * when "sliding_window" is set (transformers' Mistral has no per-layer pattern). */
#include "generate/generation.h"
#include "models/blocks.h"

static void mistral_quirks(const lm_config *c, blk_lm *lm)
{
    for (int64_t i = 0; i < lm->n_layers; i++)
        lm->window[i] = c->sliding_window;
}

static const blk_family MISTRAL = {
    .model_type = "mistral", .prefix = "Mistral", .genai_type = "mistral", .quirks = mistral_quirks,
};

BLK_LM_DEFINE(model_mistral, "MistralForCausalLM", "mistral", MISTRAL);
