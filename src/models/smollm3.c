/* smollm3.c — SmolLM3ForCausalLM: the standard decoder whose NoPE layers do not rotate q and k
 * ("no_rope_layers": 1 rotates, 0 does not; absent, every no_rope_layer_interval-th layer is
 * NoPE), a sliding window on the layers "layer_types" marks (absent: the NoPE layers, when
 * use_sliding_window is set), "attention_bias" on q/k/v/o, "mlp_bias", tied embeddings unless
 * the config says otherwise. */
#include <stdlib.h>
#include <string.h>

#include "generate/generation.h"
#include "models/blocks.h"
#include "util/json.h"

static void smollm3_quirks(const lm_config *c, blk_lm *lm)
{
    blk_llama_biases(c, lm);
    if (!c->tie_word_embeddings_set)
        lm->tie_embeddings = true;
}

/* Which layers are NoPE, as SmolLM3Config derives it: no_rope_layers[i] == 0, or, without the
 * list, (i + 1) % no_rope_layer_interval == 0. */
static ferry_status read_no_rope(const model_config *cfg, int64_t n_layers, bool *no_rope,
                                 fy_err *err)
{
    const char *origin = cfg->text_origin;
    const cJSON *list, *item;
    ferry_status st = json_get_member(cfg->text, "no_rope_layers", false, origin, &list, err);
    if (st != FERRY_OK)
        return st;
    if (!list) {
        int64_t interval;
        st = json_get_int(cfg->text, "no_rope_layer_interval", false, 4, 1, 1 << 20, origin,
                          &interval, err);
        for (int64_t i = 0; st == FERRY_OK && i < n_layers; i++)
            no_rope[i] = (i + 1) % interval == 0;
        return st;
    }
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != n_layers)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'no_rope_layers' must be a list of "
                       "num_hidden_layers (%lld) entries of 0 or 1", origin, (long long)n_layers);
    int64_t i = 0;
    cJSON_ArrayForEach(item, list) {
        if (!cJSON_IsNumber(item) || (item->valuedouble != 0 && item->valuedouble != 1))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'no_rope_layers' entry %lld is not "
                           "0 or 1", origin, (long long)i);
        no_rope[i++] = item->valuedouble == 0;
    }
    return FERRY_OK;
}

static ferry_status smollm3_read_extra(const model_config *cfg, const lm_config *c, blk_lm *lm,
                                       fy_err *err)
{
    lm->no_rope = calloc((size_t)lm->n_layers, sizeof *lm->no_rope);
    if (!lm->no_rope)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    ferry_status st = read_no_rope(cfg, lm->n_layers, lm->no_rope, err);
    if (st != FERRY_OK)
        return st;
    /* sliding_window is 0 unless use_sliding_window is set (lm_config) */
    for (int64_t i = 0; i < lm->n_layers; i++) {
        bool sliding = c->layer_types ? strcmp(c->layer_types[i], "sliding_attention") == 0
                                      : lm->no_rope[i];
        lm->window[i] = sliding ? c->sliding_window : 0;
    }
    return FERRY_OK;
}

static const blk_family SMOLLM3 = {
    .model_type = "smollm3", .prefix = "SmolLM3", .genai_type = "smollm3",
    .quirks = smollm3_quirks, .read_extra = smollm3_read_extra,
};

BLK_LM_DEFINE(model_smollm3, "SmolLM3ForCausalLM", "smollm3", SMOLLM3);
