/* gemma3.c — Gemma3ForCausalLM: Gemma 2's shape (gemma2.h) with RMSNorms of 1 + w over
 * head_dim on q and k before rope, the logits soft-capped only when final_logit_softcapping
 * is set (attn_logit_softcapping, which transformers' Gemma 3 ignores, is refused), the sliding
 * layers from layer_types (absent: five of every sliding_window_pattern = 6), and a rotary
 * setting per layer type: the sliding layers' own (rope_parameters.sliding_attention, or
 * transformers 4's rope_local_base_freq, default theta 10000, no scaling), the full layers'
 * with any scaling (rope_parameters.full_attention, or rope_theta + rope_scaling, default
 * theta 1000000). */
#include <stdlib.h>
#include <string.h>

#include "generate/generation.h"
#include "models/gemma2.h"
#include "util/json.h"

#define GEMMA3_GLOBAL_THETA 1000000.0
#define GEMMA3_LOCAL_THETA 10000.0

static bool has_key(const cJSON *obj, const char *key)
{
    return obj && cJSON_GetObjectItemCaseSensitive(obj, key) != NULL;
}

/* The two rotary settings as Gemma3TextConfig.convert_rope_params_to_dict makes them: each
 * layer type's set from rope_parameters, its theta defaulting to rope_theta (full) or
 * rope_local_base_freq (sliding), then to the generation's defaults. */
static ferry_status read_ropes(const model_config *cfg, const lm_config *c, rope_config *full,
                               rope_config *local, fy_err *err)
{
    const char *origin = cfg->text_origin;
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(cfg->text, "rope_parameters");
    if (cJSON_IsObject(params) && !has_key(params, "full_attention") &&
        !has_key(params, "sliding_attention"))
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: key 'rope_parameters' must hold a set "
                       "per layer type ('full_attention', 'sliding_attention') for %s",
                       origin, cfg->architecture);
    const cJSON *full_set = cJSON_IsObject(params)
                                ? cJSON_GetObjectItemCaseSensitive(params, "full_attention")
                                : NULL;
    const cJSON *local_set = cJSON_IsObject(params)
                                 ? cJSON_GetObjectItemCaseSensitive(params, "sliding_attention")
                                 : NULL;
    *full = c->rope;
    if (!has_key(full_set, "rope_theta") && !has_key(cfg->text, "rope_theta"))
        full->theta = GEMMA3_GLOBAL_THETA;
    double local_theta;
    ferry_status st = json_get_double(cfg->text, "rope_local_base_freq", false,
                                      GEMMA3_LOCAL_THETA, 1e-6, 1e12, origin, &local_theta, err);
    if (st != FERRY_OK)
        return st;
    if (c->has_rope_local) {
        *local = c->rope_local;
        if (!has_key(local_set, "rope_theta"))
            local->theta = local_theta;
    } else {
        lm_rope_default(local, local_theta);
    }
    if (local->partial_rotary_factor != full->partial_rotary_factor)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: rope_parameters.sliding_attention's "
                       "partial_rotary_factor %g differs from full_attention's %g; ferry "
                       "supports one", origin, local->partial_rotary_factor,
                       full->partial_rotary_factor);
    return FERRY_OK;
}

static ferry_status gemma3_read_extra(const model_config *cfg, const lm_config *c, blk_lm *lm,
                                      fy_err *err)
{
    static const gemma2_defaults GEMMA3 = {.window_pattern = 6,
                                           .pattern_key = "sliding_window_pattern"};
    rope_config full, local;
    bool *sliding = calloc((size_t)lm->n_layers, sizeof *sliding);
    if (!sliding)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    ferry_status st = gemma2_read_keys(cfg, c, lm, &GEMMA3, sliding, err);
    /* Gemma3Attention keeps the key but never hands it to the attention: a config that sets
     * it asks for what transformers does not compute */
    if (st == FERRY_OK && lm->attn_softcap != 0.0)
        st = fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: key 'attn_logit_softcapping' is set "
                     "(%g), but transformers' Gemma 3 attention does not apply it; ferry "
                     "refuses rather than export other numbers than transformers' (set it to "
                     "null)", cfg->text_origin, lm->attn_softcap);
    if (st == FERRY_OK)
        st = read_ropes(cfg, c, &full, &local, err);
    if (st != FERRY_OK) {
        free(sliding);
        return st;
    }
    lm->qk_norm = BLK_QK_PER_HEAD;
    lm->scaled_embedding_class = "Gemma3TextScaledWordEmbedding";
    for (int64_t i = 0; i < lm->n_layers; i++)
        lm->rope[i].rope = sliding[i] ? local : full;
    free(sliding);
    return FERRY_OK;
}

static const blk_family GEMMA3 = {
    .model_type = "gemma3", .prefix = "Gemma3", .genai_type = "gemma3_text",
    .base_model = "TextModel", .act_key = "hidden_activation",
    .act_default = "gelu_pytorch_tanh", .quirks = gemma2_quirks,
    .read_extra = gemma3_read_extra,
    /* Gemma3TextConfig's (google/gemma-3-4b-it's text_config names only five keys) */
    .config_defaults = "{\"vocab_size\": 262208, \"hidden_size\": 2304, "
                       "\"intermediate_size\": 9216, \"num_hidden_layers\": 26, "
                       "\"num_attention_heads\": 8, \"num_key_value_heads\": 4, "
                       "\"head_dim\": 256, \"max_position_embeddings\": 131072, "
                       "\"rms_norm_eps\": 1e-6}",
};

BLK_LM_DEFINE(model_gemma3, "Gemma3ForCausalLM", "gemma3_text", GEMMA3);

/* Gemma3ForConditionalGeneration, text-only: its language model (config.json's text_config),
 * which runs as Gemma3ForCausalLM does when no image is given, but for two things the
 * conditional model decides: whether the head is tied (tie_word_embeddings at the top of
 * config.json, default true, as transformers reads the model's own config), and the logits,
 * which its forward never soft-caps (final_logit_softcapping is Gemma3ForCausalLM's alone). */
static ferry_status gemma3_conditional_read(const model_config *cfg, void **out, fy_err *err)
{
    if (cfg->text == cfg->raw)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'text_config' is missing; %s keeps its "
                       "language model's keys there", cfg->text_origin, cfg->architecture);
    bool tie;
    ferry_status st = json_get_bool(cfg->raw, "tie_word_embeddings", false, true,
                                    cfg->text_origin, &tie, err);
    if (st == FERRY_OK)
        st = blk_lm_read(cfg, &GEMMA3, out, err);
    if (st != FERRY_OK)
        return st;
    blk_lm *lm = *out;
    lm->tie_embeddings = tie;
    lm->final_softcap = 0.0;
    return FERRY_OK;
}

/* Where its checkpoints keep the language model: transformers 4.50-4.51 and 5 save
 * "language_model.model.*" and "language_model.lm_head.weight"; 4.52-4.57 saved
 * "model.language_model.*" beside "model.vision_tower.*", with the head at "lm_head.weight". */
static const ckpt_layout GEMMA3_TEXT_LAYOUTS[] = {
    {.rules = {{.from = "", .to = "language_model."}}},
    {.rules = {{.from = "model.", .to = "model.language_model."},
               {.from = "lm_head.", .to = "lm_head."}}},
};

const model_arch model_gemma3_conditional = BLK_LM_TEXT_ARCH(
    "Gemma3ForConditionalGeneration", "gemma3", gemma3_conditional_read, GEMMA3_TEXT_LAYOUTS);
