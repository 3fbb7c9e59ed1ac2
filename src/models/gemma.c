/* gemma.c — GemmaForCausalLM: the standard decoder with RMSNorm weights stored as w - 1 (the
 * norm multiplies by 1 + w, in fp32), embeddings scaled by sqrt(hidden_size) in the compute
 * dtype, the tanh GELU (transformers maps the legacy hidden_act "gelu" of the official
 * configs to gelu_pytorch_tanh), tied embeddings unless the config says otherwise, and
 * "attention_bias" on q/k/v/o. */
#include <math.h>

#include "generate/generation.h"
#include "models/blocks.h"
#include "util/json.h"

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

static const blk_family GEMMA = {
    .model_type = "gemma", .prefix = "Gemma", .genai_type = "gemma", .quirks = gemma_quirks,
};

static ferry_status gemma_read(const model_config *cfg, void **out, fy_err *err)
{
    /* transformers' Gemma attends both ways with it (it was exported causal) */
    bool bidirectional;
    ferry_status status = json_get_bool(cfg->text, "use_bidirectional_attention", false, false,
                                        cfg->text_origin, &bidirectional, err);
    if (status != FERRY_OK)
        return status;
    if (bidirectional)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: use_bidirectional_attention true is not "
                       "supported (ferry exports GemmaForCausalLM as a causal decoder)",
                       cfg->text_origin);
    return blk_lm_read(cfg, &GEMMA, out, err);
}

const model_arch model_gemma = BLK_LM_ARCH("GemmaForCausalLM", "gemma", gemma_read);
