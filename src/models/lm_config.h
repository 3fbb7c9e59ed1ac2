/* lm_config.h — the hyperparameters of a decoder language model (Llama and its relatives), read
 * from config.json (or its text_config) by the families that have this shape. */
#ifndef FERRY_MODELS_LM_CONFIG_H
#define FERRY_MODELS_LM_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "model/config.h"

/* The ranges config values are read in; the sizes are sane caps far above real checkpoints'. */
#define LM_MAX_LAYERS 1024
#define LM_MAX_HIDDEN (1 << 20)
#define LM_MAX_VOCAB (1 << 24)
#define LM_MAX_HEADS 4096
#define LM_MAX_HEAD_DIM 4096
#define LM_MAX_INTERMEDIATE (1 << 24)
#define LM_MAX_POSITIONS (INT64_C(1) << 32)
#define LM_EPS_MIN 1e-12        /* a norm's eps; real: 1e-6 and 1e-5 */
#define LM_EPS_MAX 1.0

typedef struct lm_config {
    int64_t vocab_size;
    int64_t hidden_size;
    int64_t intermediate_size;
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t num_key_value_heads;    /* defaults to num_attention_heads */
    int64_t head_dim;               /* defaults to hidden_size / num_attention_heads */
    int64_t max_position_embeddings;
    double rms_norm_eps;
    char hidden_act[32];            /* "silu", ... */
    const char *hidden_act_key;     /* the key it was read from ("hidden_act") */
    bool tie_word_embeddings;       /* default false here */
    bool tie_word_embeddings_set;   /* whether the key was present */
    bool attention_bias;            /* q/k/v (and o) biases, Llama-style key */
    bool mlp_bias;
    int64_t sliding_window;         /* 0 = none (also when "use_sliding_window" is false) */
    bool use_sliding_window_set;    /* the key is present (its absence means false to Qwen2/3) */
    int64_t max_window_layers;      /* Qwen2/3: layers from this index slide (default 28) */
    char (*layer_types)[32];        /* "layer_types" if present: num_hidden_layers entries, else NULL */
    rope_config rope;               /* the rotary parameters (of full-attention layers) */
    rope_config rope_local;         /* sliding-attention layers' own, when has_rope_local */
    bool has_rope_local;
    bool no_rope;                   /* the model has no rotary embedding (GPT-2's learned
                                       positions): `rope` is unused and not checked */
} lm_config;

/* Reads the decoder keys of `mc` (its text_config when there is one). Sizes must be positive
 * and below sane caps (layers <= 1024, hidden <= 1<<20, vocab <= 1<<24, heads <= 4096,
 * head_dim <= 4096), num_key_value_heads must divide num_attention_heads; errors name the file
 * and the key. */
ferry_status lm_config_read(const model_config *mc, lm_config *out, fy_err *err);
void lm_config_free(lm_config *cfg);

/* The default rotary parameters (rope_type "default", whole head) with base `theta`. */
void lm_rope_default(rope_config *rope, double theta);

/* cfg_parse + lm_config_read of JSON text (tests and fuzzing); on failure both are freed. */
ferry_status lm_config_parse(const char *json_text, size_t len, const char *origin,
                             model_config *mc, lm_config *lm, fy_err *err);

#endif
