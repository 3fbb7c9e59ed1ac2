/* gemma.c — GemmaForCausalLM: the standard decoder with RMSNorm weights stored as w - 1 (the
 * norm multiplies by 1 + w, in fp32), embeddings scaled by sqrt(hidden_size) in the compute
 * dtype, the tanh GELU (transformers maps the legacy hidden_act "gelu" of the official
 * configs to gelu_pytorch_tanh), tied embeddings unless the config says otherwise, and
 * "attention_bias" on q/k/v/o. */
#include <math.h>

#include "generate/generation.h"
#include "models/blocks.h"

static void gemma_quirks(const lm_config *c, blk_lm *lm)
{
    lm->norm_offset = 1.0;
    lm->norm_f32_weight = true;
    lm->embed_scale = sqrt((double)lm->hidden);
    lm->scaled_embedding_class = "GemmaTextScaledWordEmbedding";
    if (lm->act == G_GELU) {
        lm->act = G_GELU_TANH;
        lm->act_class = BLK_GELU_TANH_CLASS;
    }
    if (!c->tie_word_embeddings_set)
        lm->tie_embeddings = true;
    lm->qkv_bias = c->attention_bias;
    lm->o_bias = c->attention_bias;
}

/* transformers' Gemma attends both ways with use_bidirectional_attention (exported causal) */
static ferry_status gemma_read_extra(const model_config *cfg, const lm_config *c, blk_lm *lm,
                                     fy_err *err)
{
    (void)c, (void)lm;
    return blk_refuse_bidirectional(cfg, err);
}

static const blk_family GEMMA = {
    .model_type = "gemma", .prefix = "Gemma", .genai_type = "gemma", .quirks = gemma_quirks,
    .read_extra = gemma_read_extra,
};

BLK_LM_DEFINE(model_gemma, "GemmaForCausalLM", "gemma", GEMMA);
