/* olmo2.c — Olmo2ForCausalLM: the standard decoder with its norms after the attention and the
 * MLP instead of before them (no input norm), RMSNorms over the whole q and k projections
 * before the heads split, every RMSNorm multiplying by its weight in fp32 before the cast
 * (Olmo2RMSNorm), "attention_bias" on q/k/v/o, rms_norm_eps defaulting to 1e-5. */
#include "generate/generation.h"
#include "models/blocks.h"
#include "util/json.h"

#define OLMO2_RMS_NORM_EPS 1e-5

static void olmo2_quirks(const lm_config *c, blk_lm *lm)
{
    lm->norms = BLK_POST_NORM;
    lm->qk_norm = BLK_QK_WHOLE;
    lm->norm_f32_weight = true;
    lm->qkv_bias = c->attention_bias;
    lm->o_bias = c->attention_bias;
}

static ferry_status olmo2_read_extra(const model_config *cfg, const lm_config *c, blk_lm *lm,
                                     fy_err *err)
{
    (void)c, (void)err;
    if (!cJSON_GetObjectItemCaseSensitive(cfg->text, "rms_norm_eps"))
        lm->eps = OLMO2_RMS_NORM_EPS;
    return FERRY_OK;
}

static const blk_family OLMO2 = {
    .model_type = "olmo2", .prefix = "Olmo2", .quirks = olmo2_quirks,
    .read_extra = olmo2_read_extra,
};

BLK_LM_DEFINE(model_olmo2, "Olmo2ForCausalLM", "olmo2", OLMO2);
