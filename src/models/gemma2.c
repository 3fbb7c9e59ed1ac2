/* gemma2.c — Gemma2ForCausalLM: Gemma's norms (1 + w, in fp32) and scaled embeddings, a norm
 * after the attention and the MLP as well as before them, the scores scaled by
 * query_pre_attn_scalar^-0.5 and soft-capped (attn_logit_softcapping), the logits soft-capped
 * (final_logit_softcapping), a sliding window on the layers layer_types marks (absent: every
 * other layer, from the first), the MLP's activation named by hidden_activation. Gemma 3's
 * text model reads the same keys (gemma2.h). */
#include <math.h>
#include <string.h>

#include "generate/generation.h"
#include "models/gemma2.h"
#include "util/json.h"

/* transformers' defaults where a key is absent */
#define GEMMA_QUERY_PRE_ATTN_SCALAR 256.0
#define GEMMA_SLIDING_WINDOW 4096

void gemma2_quirks(const lm_config *c, blk_lm *lm)
{
    lm->norm_offset = 1.0;
    lm->norm_f32_weight = true;
    lm->embed_scale = sqrt((double)lm->hidden);
    lm->norms = BLK_SANDWICH_NORM;
    if (!c->tie_word_embeddings_set)
        lm->tie_embeddings = true;
    lm->qkv_bias = c->attention_bias;
    lm->o_bias = c->attention_bias;
}

/* A soft-cap: absent -> `dflt`, null -> none, else a positive number. */
static ferry_status read_softcap(const model_config *cfg, const char *key, double dflt,
                                 double *out, fy_err *err)
{
    const cJSON *node;
    ferry_status st = json_get_member(cfg->text, key, false, cfg->text_origin, &node, err);
    if (st != FERRY_OK)
        return st;
    bool present = cJSON_GetObjectItemCaseSensitive(cfg->text, key) != NULL;
    if (!node) {
        *out = present ? 0.0 : dflt;
        return FERRY_OK;
    }
    return json_get_double(cfg->text, key, true, 0.0, 1e-6, 1e12, cfg->text_origin, out, err);
}

ferry_status gemma2_read_keys(const model_config *cfg, const lm_config *c, blk_lm *lm,
                              const gemma2_defaults *d, bool *sliding, fy_err *err)
{
    const char *origin = cfg->text_origin;
    double scalar;
    int64_t pattern = d->window_pattern;
    ferry_status st;
    if ((st = blk_refuse_bidirectional(cfg, err)) ||
        (st = json_get_double(cfg->text, "query_pre_attn_scalar", false,
                              GEMMA_QUERY_PRE_ATTN_SCALAR, 1e-6, 1e12, origin, &scalar, err)) ||
        (st = read_softcap(cfg, "attn_logit_softcapping", d->attn_softcap, &lm->attn_softcap,
                           err)) ||
        (st = read_softcap(cfg, "final_logit_softcapping", d->final_softcap, &lm->final_softcap,
                           err)) ||
        (d->pattern_key && (st = json_get_int(cfg->text, d->pattern_key, false, pattern, 1,
                                              1 << 20, origin, &pattern, err))))
        return st;
    const cJSON *scalar_node = cJSON_GetObjectItemCaseSensitive(cfg->text,
                                                                 "query_pre_attn_scalar");
    if (cJSON_IsNull(scalar_node)) /* transformers' config refuses it too */
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'query_pre_attn_scalar' is null; it "
                       "must be a positive number", origin);
    lm->attn_scale = pow(scalar, -0.5);
    /* sliding_window absent is transformers' default; null is no window */
    int64_t window = c->sliding_window;
    if (!cJSON_GetObjectItemCaseSensitive(cfg->text, "sliding_window"))
        window = GEMMA_SLIDING_WINDOW;
    for (int64_t i = 0; i < lm->n_layers; i++) {
        bool slides = c->layer_types ? strcmp(c->layer_types[i], "sliding_attention") == 0
                                     : (i + 1) % pattern != 0;
        lm->window[i] = slides ? window : 0;
        if (sliding)
            sliding[i] = slides;
    }
    return FERRY_OK;
}

static ferry_status gemma2_read_extra(const model_config *cfg, const lm_config *c, blk_lm *lm,
                                      fy_err *err)
{
    static const gemma2_defaults GEMMA2 = {.attn_softcap = 50.0, .final_softcap = 30.0,
                                           .window_pattern = 2};
    lm->scaled_embedding_class = "Gemma2TextScaledWordEmbedding";
    return gemma2_read_keys(cfg, c, lm, &GEMMA2, NULL, err);
}

static const blk_family GEMMA2 = {
    .model_type = "gemma2", .prefix = "Gemma2", .genai_type = "gemma2",
    .act_key = "hidden_activation", .act_default = "gelu_pytorch_tanh",
    .quirks = gemma2_quirks, .read_extra = gemma2_read_extra,
};

BLK_LM_DEFINE(model_gemma2, "Gemma2ForCausalLM", "gemma2", GEMMA2);
