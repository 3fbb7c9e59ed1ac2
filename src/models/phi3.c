/* phi3.c — Phi3ForCausalLM (Phi-3, Phi-3.5, Phi-4-mini): the standard decoder whose q/k/v and
 * gate/up projections are stored fused (qkv_proj rows q, k, v; gate_up_proj rows gate, up)
 * and kept so: one linear each, sliced after, as transformers computes them; partial
 * rotary (Phi-4-mini's 0.75), LongRoPE with its short/long factors and attention scaling, a
 * sliding window on every layer when "sliding_window" is set, rms_norm_eps defaulting to
 * 1e-5. */
#include "generate/generation.h"
#include "models/blocks.h"
#include "util/json.h"

#define PHI3_RMS_NORM_EPS 1e-5

static const blk_names PHI3_NAMES = {
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .in_norm = "model.layers.%d.input_layernorm.weight",
    .post_norm = "model.layers.%d.post_attention_layernorm.weight",
    .qkv = "model.layers.%d.self_attn.qkv_proj.weight",
    .o = "model.layers.%d.self_attn.o_proj.weight",
    .gate_up = "model.layers.%d.mlp.gate_up_proj.weight",
    .down = "model.layers.%d.mlp.down_proj.weight",
};

static void phi3_quirks(const lm_config *c, blk_lm *lm)
{
    for (int64_t i = 0; i < lm->n_layers; i++)
        lm->window[i] = c->sliding_window;
    lm->allow_partial_rotary = true;
    lm->names = &PHI3_NAMES;
    lm->tied_name = PHI3_NAMES.embed;
}

static ferry_status phi3_read_extra(const model_config *cfg, const lm_config *c, blk_lm *lm,
                                    fy_err *err)
{
    if (c->rope.type == ROPE_YARN)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: rope type 'yarn' in a %s config is "
                       "transformers' old name for longrope, which ferry does not rename: set "
                       "rope_type to \"longrope\"", cfg->text_origin, cfg->architecture);
    if (c->rope.type != ROPE_DEFAULT && c->rope.type != ROPE_LONGROPE)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: rope type '%s' is not supported for %s "
                       "(transformers' Phi-3 takes default and longrope)", cfg->text_origin,
                       c->rope.type_name, cfg->architecture);
    if (!cJSON_GetObjectItemCaseSensitive(cfg->text, "rms_norm_eps"))
        lm->eps = PHI3_RMS_NORM_EPS;
    return FERRY_OK;
}

static const blk_family PHI3 = {
    .model_type = "phi3", .prefix = "Phi3", .genai_type = "phi3", .act_module = "activation_fn",
    .quirks = phi3_quirks, .read_extra = phi3_read_extra,
};

BLK_LM_DEFINE(model_phi3, "Phi3ForCausalLM", "phi3", PHI3);
