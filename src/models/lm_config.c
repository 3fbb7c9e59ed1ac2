/* lm_config.c — the hyperparameters of a decoder language model (the Llama shape and its
 * relatives) from config.json, or its text_config: sizes, norms, activation, tying, biases,
 * sliding windows and rotary parameters (one set, or one per layer type). Every value is type-
 * and range-checked; errors name the file and the key. */
#include "models/lm_config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/safetensors.h"
#include "util/json.h"
#include "util/text.h"


/* Rope and norm parameters: the range real checkpoints use, with orders of magnitude to spare,
 * inside what float32 arithmetic survives. "Finite and > 0" is not enough: a theta of 1e-300 is
 * 0 in float32 and a factor of 1e-40 a denormal, and the rope tables fill with inf; a yarn beta
 * near 0 or a theta of 1 (yarn divides by log(theta)) makes its ramp inf or NaN; an eps of 0
 * makes RMSNorm of a zero row 0/0; a yarn attention factor of 1e6 overflows fp16 cos/sin.
 * docs/security.md lists them. */
#define THETA_MIN 10.0          /* real: 1e4 (Llama 2) to ~1e10 (long-context finetunes) */
#define THETA_MAX 1e15
#define FACTOR_MIN 1.0          /* transformers warns below 1; real: 1 to 64 */
#define FACTOR_MAX 1e4
#define FREQ_FACTOR_MIN 1e-2    /* llama3 low/high_freq_factor; real: 1 and 4 */
#define FREQ_FACTOR_MAX 1e3
#define BETA_MIN 1e-2           /* yarn beta_fast/beta_slow; real: 32 and 1 */
#define BETA_MAX 1e3
#define ATTENTION_MIN 1e-2      /* yarn attention_factor, which scales cos and sin; real: 1-1.4 */
#define ATTENTION_MAX 1e2
#define MSCALE_MAX 10.0         /* yarn mscale/mscale_all_dim; real: 0.707 to 1 */
#define LONGROPE_MIN 1e-2       /* longrope short/long_factor entries; real: 1 to ~60 */
#define LONGROPE_MAX 1e4

static const struct {
    const char *name;
    rope_type type;
    rope_layout layout;
} ROPE_TYPES[] = {
    {"default", ROPE_DEFAULT, ROPE_1D}, {"linear", ROPE_LINEAR, ROPE_1D},
    {"dynamic", ROPE_DYNAMIC, ROPE_1D}, {"llama3", ROPE_LLAMA3, ROPE_1D},
    {"yarn", ROPE_YARN, ROPE_1D},       {"longrope", ROPE_LONGROPE, ROPE_1D},
    /* Qwen2-VL's: default frequencies over three position rows (transformers maps the type to
     * "default" and keeps mrope_section) */
    {"mrope", ROPE_DEFAULT, ROPE_MROPE},
};
#define ROPE_TYPE_LIST "default, linear, dynamic, llama3, yarn, longrope, mrope"

/* What a rope parameter set's own keys are checked against: the model's sizes, and for a set
 * written flat (not per layer type) the top-level object, whose original_max_position_embeddings
 * transformers puts before the set's own (Phi-3 writes it there). */
typedef struct rope_ctx {
    int64_t head_dim, max_position_embeddings;
    const cJSON *top;            /* NULL for a per-layer-type set */
    const char *top_origin;
} rope_ctx;

static const char *const LAYER_TYPES[] = {"full_attention", "sliding_attention"};

static ferry_status read_layer_types(const cJSON *root, const char *origin, lm_config *cfg,
                                     fy_err *err)
{
    const cJSON *list, *item;
    size_t i = 0;
    ferry_status status = json_get_member(root, "layer_types", false, origin, &list, err);
    if (status != FERRY_OK || !list)
        return status;
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != cfg->num_hidden_layers)
        return fy_fail(err, FERRY_ERR_FORMAT,
                       "%s: key 'layer_types' must be a list of num_hidden_layers (%lld) strings",
                       origin, (long long)cfg->num_hidden_layers);
    cfg->layer_types = calloc((size_t)cfg->num_hidden_layers, sizeof *cfg->layer_types);
    if (!cfg->layer_types)
        return fy_fail(err, FERRY_ERR_NOMEM, "%s: out of memory", origin);
    cJSON_ArrayForEach(item, list) {
        const char *value = cJSON_GetStringValue(item);
        bool known = false;
        char quoted[72];
        for (size_t k = 0; value && k < sizeof LAYER_TYPES / sizeof LAYER_TYPES[0]; k++)
            known = known || strcmp(value, LAYER_TYPES[k]) == 0;
        if (!known)
            return fy_fail(err, FERRY_ERR_UNSUPPORTED,
                           "%s: key 'layer_types' entry %zu is '%s'; supported: "
                           "full_attention, sliding_attention", origin, i,
                           value ? text_quote(value, quoted, sizeof quoted)
                                 : "(not a string)");
        if (strcmp(value, "sliding_attention") == 0 && cfg->sliding_window == 0)
            return fy_fail(err, FERRY_ERR_FORMAT,
                           "%s: key 'layer_types' entry %zu is sliding_attention but "
                           "'sliding_window' is not set", origin, i);
        strcpy(cfg->layer_types[i++], value);
    }
    return FERRY_OK;
}

/* transformers: int(head_dim * partial_rotary_factor) */
static int64_t rotary_dim_of(const rope_ctx *ctx, const rope_config *rope)
{
    return (int64_t)((double)ctx->head_dim * rope->partial_rotary_factor);
}

/* A longrope factor set: a list of exactly rotary_dim/2 numbers in [LONGROPE_MIN, LONGROPE_MAX]
 * (transformers makes a float32 tensor of it). */
static ferry_status read_factors(const cJSON *params, const char *key, int64_t half,
                                 const char *origin, float *out, fy_err *err)
{
    const cJSON *list, *item;
    ferry_status status = json_get_member(params, key, true, origin, &list, err);
    if (status != FERRY_OK)
        return status;
    if (half > ROPE_MAX_FACTORS)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: key '%s' would hold rotary_dim/2 = %lld "
                       "factors; ferry holds at most %d", origin, key, (long long)half,
                       ROPE_MAX_FACTORS);
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != half)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key '%s' must be a list of rotary_dim/2 "
                       "(%lld) numbers", origin, key, (long long)half);
    int i = 0;
    cJSON_ArrayForEach(item, list) {
        double v = cJSON_IsNumber(item) ? item->valuedouble : NAN;
        if (!isfinite(v) || v < LONGROPE_MIN || v > LONGROPE_MAX)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: key '%s' entry %d must be a number in "
                           "[%g, %g]", origin, key, i, LONGROPE_MIN, LONGROPE_MAX);
        out[i++] = (float)v;
    }
    return FERRY_OK;
}

/* LongRoPE (Phi-3, Phi-4-mini), as transformers' _compute_longrope_parameters reads it:
 * original_max_position_embeddings from the top level, else the set, else
 * max_position_embeddings; factor given, else max_position_embeddings / original (it only
 * feeds the default attention factor); attention_factor given or derived later
 * (rope_attention_scaling). */
static ferry_status read_longrope(const cJSON *params, const char *origin, const rope_ctx *ctx,
                                  rope_config *rope, fy_err *err)
{
    ferry_status status;
    const cJSON *factor;
    int64_t half = rotary_dim_of(ctx, rope) / 2, orig = 0;
    if ((ctx->top && (status = json_get_int(ctx->top, "original_max_position_embeddings", false,
                                            0, 1, LM_MAX_POSITIONS, ctx->top_origin, &orig, err))) ||
        (orig == 0 &&
         (status = json_get_int(params, "original_max_position_embeddings", false,
                                ctx->max_position_embeddings, 1, LM_MAX_POSITIONS, origin, &orig,
                                err))) ||
        (status = json_get_member(params, "factor", false, origin, &factor, err)) ||
        (factor && (status = json_get_double(params, "factor", true, 1.0, FACTOR_MIN, FACTOR_MAX,
                                             origin, &rope->factor, err))) ||
        (status = json_get_double(params, "attention_factor", false, -1.0, ATTENTION_MIN,
                                  ATTENTION_MAX, origin, &rope->attention_factor, err)) ||
        (status = read_factors(params, "short_factor", half, origin, rope->short_factor, err)) ||
        (status = read_factors(params, "long_factor", half, origin, rope->long_factor, err)))
        return status;
    rope->original_max_position_embeddings = orig;
    if (!factor)
        rope->factor = (double)ctx->max_position_embeddings / (double)orig;
    /* the derived attention factor divides by ln(original): transformers fails there too */
    if (orig < 2 && rope->factor > 1.0 && rope->attention_factor < 0)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'original_max_position_embeddings' is 1, "
                       "and longrope's attention factor divides by its logarithm (set "
                       "'attention_factor')", origin);
    rope->n_factors = (int)half;
    return FERRY_OK;
}

/* M-RoPE's bands: three positive integers summing to rotary_dim/2; absent, Qwen2-VL's
 * [16, 24, 24] (as its rotary embedding defaults them). */
static ferry_status read_mrope_section(const cJSON *params, const char *origin,
                                       const rope_ctx *ctx, rope_config *rope, fy_err *err)
{
    const cJSON *list, *item;
    int64_t half = rotary_dim_of(ctx, rope) / 2, sum = 0;
    static const int64_t dflt[3] = {16, 24, 24};
    ferry_status status = json_get_member(params, "mrope_section", false, origin, &list, err);
    if (status != FERRY_OK)
        return status;
    memcpy(rope->mrope_section, dflt, sizeof dflt);
    if (list) {
        if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != 3)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'mrope_section' must be a list of 3 "
                           "positive integers", origin);
        int i = 0;
        cJSON_ArrayForEach(item, list) {
            uint64_t v = 0;
            if (!json_number_to_u64(item, &v) || v == 0 || v > LM_MAX_HEAD_DIM)
                return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'mrope_section' entry %d must be "
                               "an integer in [1, %d]", origin, i, LM_MAX_HEAD_DIM);
            rope->mrope_section[i++] = (int64_t)v;
        }
    }
    for (int i = 0; i < 3; i++)
        sum += rope->mrope_section[i];
    if (sum != half)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'mrope_section' must sum to rotary_dim/2 "
                       "(%lld); its entries sum to %lld%s", origin, (long long)half,
                       (long long)sum, list ? "" : " (the default [16, 24, 24])");
    return FERRY_OK;
}

/* The parameters of the chosen rope type. Keys a type does not use are ignored, as
 * transformers ignores them. */
static ferry_status read_rope_fields(const cJSON *params, const char *origin,
                                     const rope_ctx *ctx, rope_config *rope, fy_err *err)
{
    ferry_status status = FERRY_OK;
    if (rope->type == ROPE_LONGROPE)
        return read_longrope(params, origin, ctx, rope, err);
    if (rope->layout == ROPE_MROPE)
        return read_mrope_section(params, origin, ctx, rope, err);
    bool needs_factor = rope->type != ROPE_DEFAULT;
    bool is_llama3 = rope->type == ROPE_LLAMA3, is_yarn = rope->type == ROPE_YARN;

    if (needs_factor &&
        (status = json_get_double(params, "factor", true, 1.0, FACTOR_MIN, FACTOR_MAX, origin,
                                  &rope->factor, err)))
        return status;
    if (is_llama3 &&
        ((status = json_get_double(params, "low_freq_factor", true, 1.0, FREQ_FACTOR_MIN,
                                   FREQ_FACTOR_MAX, origin, &rope->low_freq_factor, err)) ||
         (status = json_get_double(params, "high_freq_factor", true, 4.0, FREQ_FACTOR_MIN,
                                   FREQ_FACTOR_MAX, origin, &rope->high_freq_factor, err))))
        return status;
    if (needs_factor && rope->type != ROPE_LINEAR &&
        (status = json_get_int(params, "original_max_position_embeddings", is_llama3, 0, 1,
                               LM_MAX_POSITIONS, origin, &rope->original_max_position_embeddings,
                               err)))
        return status;
    if (is_yarn &&
        ((status = json_get_double(params, "beta_fast", false, 32.0, BETA_MIN, BETA_MAX, origin,
                                   &rope->beta_fast, err)) ||
         (status = json_get_double(params, "beta_slow", false, 1.0, BETA_MIN, BETA_MAX, origin,
                                   &rope->beta_slow, err)) ||
         /* -1 (absent) means "derive it from factor and mscale". */
         (status = json_get_double(params, "attention_factor", false, -1.0, ATTENTION_MIN,
                                   ATTENTION_MAX, origin, &rope->attention_factor, err)) ||
         (status = json_get_double(params, "mscale", false, 0.0, 0.0, MSCALE_MAX, origin,
                                   &rope->mscale, err)) ||
         (status = json_get_double(params, "mscale_all_dim", false, 0.0, 0.0, MSCALE_MAX, origin,
                                   &rope->mscale_all_dim, err)) ||
         (status = json_get_bool(params, "truncate", false, true, origin, &rope->truncate, err))))
        return status;
    return FERRY_OK;
}

void lm_rope_default(rope_config *rope, double theta)
{
    *rope = (rope_config){.type = ROPE_DEFAULT, .type_name = "default", .theta = theta,
                          .factor = 1.0, .beta_fast = 32.0, .beta_slow = 1.0,
                          .attention_factor = -1.0, .truncate = true,
                          .partial_rotary_factor = 1.0};
}

/* transformers 5: "rope_parameters": {"rope_type", "rope_theta", ...}. transformers 4:
 * top-level "rope_theta" plus optional "rope_scaling": {"type" or "rope_type", ...}. Where
 * rope_parameters is split per layer type, the full-attention entry is `rope` and the
 * sliding-attention entry `rope_local`. */
static ferry_status read_rope_params(const cJSON *params, const char *section,
                                     const char *origin, const rope_ctx *ctx, rope_config *rope,
                                     fy_err *err);

static ferry_status read_rope(const cJSON *root, const char *path, lm_config *cfg,
                              fy_err *err)
{
    rope_config *rope = &cfg->rope;
    const cJSON *params, *nested, *local;
    const char *section = "rope_parameters";
    char origin[1100];
    ferry_status status;

    lm_rope_default(rope, 10000.0);
    if ((status = json_get_double(root, "rope_theta", false, 10000.0, THETA_MIN, THETA_MAX, path,
                                  &rope->theta, err)) ||
        (status = json_get_double(root, "partial_rotary_factor", false, 1.0, 1e-6, 1.0, path,
                                  &rope->partial_rotary_factor, err)) ||
        (status = json_get_member(root, section, false, path, &params, err)))
        return status;
    if (!params) {
        section = "rope_scaling";
        if ((status = json_get_member(root, section, false, path, &params, err)))
            return status;
    }
    if (!params)
        return FERRY_OK;
    rope_ctx ctx = {.head_dim = cfg->head_dim,
                    .max_position_embeddings = cfg->max_position_embeddings,
                    .top = root, .top_origin = path};
    rope_ctx nested_ctx = ctx;
    nested_ctx.top = NULL; /* per layer type: transformers reads only the set's own keys */
    snprintf(origin, sizeof origin, "%s (%s)", path, section);
    if (!cJSON_IsObject(params))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key '%s' must be an object", path, section);
    if ((status = json_get_member(params, "full_attention", false, origin, &nested, err)) ||
        (status = json_get_member(params, "sliding_attention", false, origin, &local, err)))
        return status;
    if (local) {
        /* Per layer type: the sliding layers' own set, read like the main one. */
        char local_origin[1100];
        snprintf(local_origin, sizeof local_origin, "%s (%s.sliding_attention)", path, section);
        if (!cJSON_IsObject(local))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: expected an object", local_origin);
        cfg->rope_local = *rope;
        if ((status = read_rope_params(local, section, local_origin, &nested_ctx,
                                       &cfg->rope_local, err)))
            return status;
        cfg->has_rope_local = true;
    }
    if (nested) {
        snprintf(origin, sizeof origin, "%s (%s.full_attention)", path, section);
        if (!cJSON_IsObject(nested))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: expected an object", origin);
        params = nested;
    }
    return read_rope_params(params, section, origin, nested ? &nested_ctx : &ctx, rope, err);
}

/* One rope parameter set: its type, theta, partial factor and the type's own fields. */
static ferry_status read_rope_params(const cJSON *params, const char *section,
                                     const char *origin, const rope_ctx *ctx, rope_config *rope,
                                     fy_err *err)
{
    const cJSON *type_node = NULL;
    ferry_status status;

    if ((status = json_get_member(params, "rope_type", false, origin, &type_node, err)) ||
        (!type_node && (status = json_get_member(params, "type", false, origin, &type_node, err))))
        return status;
    if (type_node) {
        const char *name = cJSON_GetStringValue(type_node);
        if (!name)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'rope_type' must be a string", origin);
        size_t i = 0, n = sizeof ROPE_TYPES / sizeof ROPE_TYPES[0];
        while (i < n && strcmp(name, ROPE_TYPES[i].name) != 0)
            i++;
        char quoted[72];
        if (i == n)
            return fy_fail(err, FERRY_ERR_UNSUPPORTED,
                           "%s: rope type '%s' is not supported (supported: " ROPE_TYPE_LIST
                           ")", origin, text_quote(name, quoted, sizeof quoted));
        rope->type = ROPE_TYPES[i].type;
        rope->layout = ROPE_TYPES[i].layout;
        /* transformers 5 saves Qwen2-VL's "mrope" as type "default" beside its mrope_section:
         * the section is what makes the three position rows */
        if (rope->type == ROPE_DEFAULT && cJSON_GetObjectItemCaseSensitive(params,
                                                                           "mrope_section"))
            rope->layout = ROPE_MROPE;
        snprintf(rope->type_name, sizeof rope->type_name, "%s", name);
    } else if (strcmp(section, "rope_scaling") == 0) {
        /* transformers 4 required a type in rope_scaling; a scaling with none is ambiguous. */
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'rope_type' is missing", origin);
    }
    /* In rope_parameters the theta and partial factor live inside; they override the top-level
     * keys that transformers 4 used. */
    if ((status = json_get_double(params, "rope_theta", false, rope->theta, THETA_MIN, THETA_MAX,
                                  origin, &rope->theta, err)) ||
        (status = json_get_double(params, "partial_rotary_factor", false,
                                  rope->partial_rotary_factor, 1e-6, 1.0, origin,
                                  &rope->partial_rotary_factor, err)))
        return status;
    return read_rope_fields(params, origin, ctx, rope, err);
}

static ferry_status read_sizes(const cJSON *root, const char *origin, lm_config *cfg,
                               fy_err *err)
{
    ferry_status status;
    bool use_sliding = true;
    const cJSON *use_node;

    if ((status = json_get_int(root, "vocab_size", true, 0, 1, LM_MAX_VOCAB, origin,
                               &cfg->vocab_size, err)) ||
        (status = json_get_int(root, "hidden_size", true, 0, 1, LM_MAX_HIDDEN, origin,
                               &cfg->hidden_size, err)) ||
        (status = json_get_int(root, "intermediate_size", true, 0, 1, LM_MAX_INTERMEDIATE, origin,
                               &cfg->intermediate_size, err)) ||
        (status = json_get_int(root, "num_hidden_layers", true, 0, 1, LM_MAX_LAYERS, origin,
                               &cfg->num_hidden_layers, err)) ||
        (status = json_get_int(root, "num_attention_heads", true, 0, 1, LM_MAX_HEADS, origin,
                               &cfg->num_attention_heads, err)) ||
        (status = json_get_int(root, "num_key_value_heads", false, cfg->num_attention_heads, 1,
                               LM_MAX_HEADS, origin, &cfg->num_key_value_heads, err)) ||
        (status = json_get_int(root, "head_dim", false, 0, 1, LM_MAX_HEAD_DIM, origin,
                               &cfg->head_dim, err)) ||
        (status = json_get_int(root, "max_position_embeddings", false, 2048, 1, LM_MAX_POSITIONS,
                               origin, &cfg->max_position_embeddings, err)) ||
        (status = json_get_int(root, "sliding_window", false, 0, 0, LM_MAX_POSITIONS, origin,
                               &cfg->sliding_window, err)) ||
        (status = json_get_member(root, "use_sliding_window", false, origin, &use_node, err)) ||
        (status = json_get_bool(root, "use_sliding_window", false, true, origin, &use_sliding,
                                err)) ||
        (status = json_get_int(root, "max_window_layers", false, 28, 0, LM_MAX_LAYERS, origin,
                               &cfg->max_window_layers, err)))
        return status;
    cfg->use_sliding_window_set = use_node != NULL;
    if (cfg->num_attention_heads % cfg->num_key_value_heads != 0)
        return fy_fail(err, FERRY_ERR_FORMAT,
                       "%s: key 'num_key_value_heads' (%lld) must divide num_attention_heads "
                       "(%lld)", origin, (long long)cfg->num_key_value_heads,
                       (long long)cfg->num_attention_heads);
    if (cfg->head_dim == 0) {
        if (cfg->hidden_size % cfg->num_attention_heads != 0)
            return fy_fail(err, FERRY_ERR_FORMAT,
                           "%s: key 'head_dim' is missing and hidden_size (%lld) is not a "
                           "multiple of num_attention_heads (%lld)", origin,
                           (long long)cfg->hidden_size, (long long)cfg->num_attention_heads);
        cfg->head_dim = cfg->hidden_size / cfg->num_attention_heads;
        if (cfg->head_dim > LM_MAX_HEAD_DIM)
            return fy_fail(err, FERRY_ERR_FORMAT,
                           "%s: key 'head_dim' (derived: %lld) must be at most %d", origin,
                           (long long)cfg->head_dim, LM_MAX_HEAD_DIM);
    }
    /* Qwen2-style configs carry a window that is in effect only when use_sliding_window is set
     * (families where the key is absent decide its default). */
    if (!use_sliding)
        cfg->sliding_window = 0;
    return FERRY_OK;
}

ferry_status lm_config_read(const model_config *mc, lm_config *cfg, fy_err *err)
{
    ferry_status status;
    const cJSON *tie;
    const cJSON *root = mc->text;
    const char *origin = mc->text_origin;

    memset(cfg, 0, sizeof *cfg);
    if (!cJSON_IsObject(root))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: expected a JSON object", origin);
    if ((status = read_sizes(root, origin, cfg, err)) ||
        (status = json_get_double(root, "rms_norm_eps", false, 1e-6, LM_EPS_MIN, LM_EPS_MAX, origin,
                                  &cfg->rms_norm_eps, err)) ||
        (status = json_get_string(root, "hidden_act", false, "silu", origin, cfg->hidden_act,
                                  sizeof cfg->hidden_act, err)) ||
        (status = cfg_check_name(origin, "hidden_act", cfg->hidden_act, err)) ||
        (status = json_get_member(root, "tie_word_embeddings", false, origin, &tie, err)) ||
        (status = json_get_bool(root, "tie_word_embeddings", false, false, origin,
                                &cfg->tie_word_embeddings, err)) ||
        (status = json_get_bool(root, "attention_bias", false, false, origin,
                                &cfg->attention_bias, err)) ||
        (status = json_get_bool(root, "mlp_bias", false, false, origin, &cfg->mlp_bias, err)) ||
        (status = read_layer_types(root, origin, cfg, err)) ||
        (status = read_rope(root, origin, cfg, err))) {
        lm_config_free(cfg);
        return status;
    }
    cfg->tie_word_embeddings_set = tie != NULL;
    cfg->hidden_act_key = "hidden_act";
    return FERRY_OK;
}

void lm_config_free(lm_config *cfg)
{
    if (!cfg)
        return;
    free(cfg->layer_types);
    memset(cfg, 0, sizeof *cfg);
}

ferry_status lm_config_parse(const char *json_text, size_t len, const char *origin,
                             model_config *mc, lm_config *lm, fy_err *err)
{
    memset(lm, 0, sizeof *lm);
    ferry_status status = cfg_parse(json_text, len, origin, mc, err);
    if (status == FERRY_OK && (status = lm_config_read(mc, lm, err)) != FERRY_OK)
        cfg_free(mc);
    return status;
}
