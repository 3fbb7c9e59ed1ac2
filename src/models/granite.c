/* granite.c — GraniteForCausalLM: the standard decoder with four multipliers, each where
 * transformers' Granite applies it: the embeddings times embedding_multiplier, the attention
 * scores times attention_multiplier (in place of 1/sqrt(head_dim)), each attention and MLP
 * output times residual_multiplier before its residual add, and the logits divided by
 * logits_scaling; "attention_bias" on q/k/v/o, "mlp_bias". */
#include "generate/generation.h"
#include "models/blocks.h"
#include "util/json.h"

static ferry_status granite_read_extra(const model_config *cfg, const lm_config *c, blk_lm *lm,
                                       fy_err *err)
{
    (void)c;
    static const char *const KEYS[4] = {"embedding_multiplier", "attention_multiplier",
                                        "residual_multiplier", "logits_scaling"};
    double v[4];
    for (int i = 0; i < 4; i++) {
        ferry_status st = json_get_double(cfg->text, KEYS[i], false, 1.0, 1e-12, 1e12,
                                          cfg->text_origin, &v[i], err);
        if (st != FERRY_OK)
            return st;
    }
    /* a multiplier of 1 changes no value: the graph leaves it out (the scores' scale is always
     * attention_multiplier, which replaces 1/sqrt(head_dim)) */
    lm->embed_scale = v[0] != 1.0 ? v[0] : 0.0;
    lm->attn_scale = v[1];
    lm->residual_scale = v[2] != 1.0 ? v[2] : 0.0;
    lm->logits_divisor = v[3] != 1.0 ? v[3] : 0.0;
    return FERRY_OK;
}

static const blk_family GRANITE = {
    .model_type = "granite", .prefix = "Granite", .genai_type = "granite",
    .quirks = blk_llama_biases, .read_extra = granite_read_extra,
};

BLK_LM_DEFINE(model_granite, "GraniteForCausalLM", "granite", GRANITE);
