/* config.h — config.json (and generation_config.json) read into a typed struct for the
 * keys every model has, the rotary parameters families share, and the raw JSON for the rest. */
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

/* The keys every checkpoint has; the family reads the rest from `text` (src/models/). */
typedef struct model_config {
    char architecture[128];         /* architectures[0] */
    char model_type[64];
    ferry_dtype dtype;              /* "dtype" / "torch_dtype"; UNDEFINED if absent */
    struct cJSON *raw;              /* config.json, owned */
    const struct cJSON *text;       /* the language model's keys: raw["text_config"] or raw */
    char text_origin[1200];         /* names `text` in messages: "<path> (text_config)" */
    struct cJSON *generation;       /* generation_config.json, owned; NULL if absent */
    /* The bytes of config.json and generation_config.json as cfg_load read and checked them
     * (owned; NULL from cfg_parse, and for a generation config that is absent). An export
     * saves these, not the files as they are at save time: those may have become a link to
     * /dev/zero, a FIFO or another config since the model was opened. */
    char *raw_text;
    size_t raw_len;
    char *generation_text;
    size_t generation_len;
} model_config;

/* Reads `dir`/config.json (required) and `dir`/generation_config.json (optional): the
 * architecture, model_type and dtype, type-checked; errors name the file and the key. The
 * family's own keys are read later by the family (src/models/lm_config.h for decoders). */
ferry_status cfg_load(const char *dir, model_config *out, fy_err *err);
void cfg_free(model_config *cfg);

/* Names a file gives (class names, activations) are echoed by later messages and export.json:
 * fails naming `origin`, `key` and the byte offset if `value` holds a character text_quote
 * would escape (util/text.h text_hidden_at: controls, bidi, invisible, invalid UTF-8). */
ferry_status cfg_check_name(const char *origin, const char *key, const char *value, fy_err *err);

/* Parses config JSON text (for tests and fuzzing); `origin` names it in messages. */
ferry_status cfg_parse(const char *json_text, size_t len, const char *origin,
                       model_config *out, fy_err *err);

#endif
