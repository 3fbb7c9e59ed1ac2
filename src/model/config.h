/* config.h — config.json (and generation_config.json) read into a typed struct for the
 * keys every model has, the rotary parameters families share, and the raw JSON for the rest. */
#ifndef FERRY_MODEL_CONFIG_H
#define FERRY_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "ferry.h"
#include "util/err.h"
#include "util/rope_config.h"

struct cJSON;

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
