/* config.h — config.json (and generation_config.json) read into a typed struct for the
 * Llama-family decoder; the raw JSON is kept for metadata and for family-specific keys. */
#ifndef FERRY_MODEL_CONFIG_H
#define FERRY_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "ferry.h"
#include "util/err.h"

struct cJSON;

typedef enum rope_type {
    ROPE_DEFAULT = 0, ROPE_LINEAR, ROPE_DYNAMIC, ROPE_LLAMA3, ROPE_YARN
} rope_type;

/* Rotary parameters, from "rope_parameters" (transformers 5) or "rope_scaling" + "rope_theta"
 * (transformers 4). Fields a type does not use stay at their defaults. */
typedef struct rope_config {
    rope_type type;
    char type_name[32];             /* as written in the file, for messages */
    double theta;                   /* rope_theta, default 10000 */
    double factor;                  /* linear, dynamic, llama3, yarn */
    double low_freq_factor;         /* llama3 */
    double high_freq_factor;        /* llama3 */
    int64_t original_max_position_embeddings; /* llama3, yarn, dynamic; 0 = unset */
    double beta_fast, beta_slow;    /* yarn, defaults 32 and 1 */
    double attention_factor;        /* yarn; < 0 = unset (derived from factor/mscale) */
    double mscale, mscale_all_dim;  /* yarn; 0 = unset */
    bool truncate;                  /* yarn, default true */
    double partial_rotary_factor;   /* 1.0 = whole head */
} rope_config;

typedef struct model_config {
    char architecture[128];         /* architectures[0] */
    char model_type[64];
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
    bool tie_word_embeddings;       /* default false here; families override via raw if absent */
    bool tie_word_embeddings_set;   /* whether the key was present */
    bool attention_bias;            /* q/k/v (and o) biases, Llama-style key */
    bool mlp_bias;
    int64_t sliding_window;         /* 0 = none (also when "use_sliding_window" is false) */
    char (*layer_types)[32];        /* "layer_types" if present: num_hidden_layers entries, else NULL */
    ferry_dtype dtype;              /* "dtype" / "torch_dtype"; UNDEFINED if absent */
    rope_config rope;
    struct cJSON *raw;              /* config.json, owned */
    struct cJSON *generation;       /* generation_config.json, owned; NULL if absent */
} model_config;

/* Reads `dir`/config.json (required) and `dir`/generation_config.json (optional). Every value
 * is type- and range-checked: sizes must be positive and below sane caps (layers <= 1024,
 * hidden <= 1<<20, vocab <= 1<<24, heads <= 4096, head_dim <= 4096), num_key_value_heads must
 * divide num_attention_heads; errors name the file and the key. Unknown keys are kept in raw. */
ferry_status cfg_load(const char *dir, model_config *out, fy_err *err);
void cfg_free(model_config *cfg);

/* Parses config JSON text (for tests and fuzzing); `origin` names it in messages. */
ferry_status cfg_parse(const char *json_text, size_t len, const char *origin,
                       model_config *out, fy_err *err);

#endif
