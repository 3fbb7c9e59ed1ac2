/* config.c — config.json and generation_config.json: the keys every model has (architecture,
 * model_type, dtype) and where the language model's keys are; each family reads its own keys
 * afterwards (src/models/). */
#include "model/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/safetensors.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/text.h"

/* config.json and generation_config.json are a few KB (the largest, multimodal configs with
 * label maps or module lists, a few hundred KB): 16 MB and a million values are far above
 * any of them and bound what the parser builds at ~160 MB. Sub-configs nest a few levels. */
static const json_limits CONFIG_LIMITS = {
    .kind = "config file", .max_bytes = 16u << 20, .max_values = 1000000, .max_depth = 128,
    .utf8 = true,
};


static const struct {
    const char *name;
    ferry_dtype dtype;
} CONFIG_DTYPES[] = {
    {"float32", FERRY_F32}, {"bfloat16", FERRY_BF16}, {"float16", FERRY_F16},
    {"float64", FERRY_F64},
};

/* Names the file gives (class names, activations) are echoed by later messages and recorded in
 * export.json: a control character there (a newline, an escape sequence, a C1 CSI) would break
 * the one-line error contract or drive the terminal, a bidi override or an invisible character
 * make the name show as another. No real config has them. */
ferry_status cfg_check_name(const char *origin, const char *key, const char *value,
                               fy_err *err)
{
    char quoted[TEXT_QUOTE_MAX];
    size_t len = strlen(value), at = text_hidden_at(value, len);
    if (at == len)
        return FERRY_OK;
    return fy_fail(err, FERRY_ERR_FORMAT, "%s: key '%s' holds a control, format or invalid "
                   "character at byte %zu ('%s')", origin, key, at,
                   text_quote(value, quoted, sizeof quoted));
}

static ferry_status read_architecture(const cJSON *root, const char *origin, model_config *cfg,
                                      fy_err *err)
{
    const cJSON *list;
    ferry_status status = json_get_member(root, "architectures", true, origin, &list, err);
    if (status != FERRY_OK)
        return status;
    const char *first = cJSON_IsArray(list) ? cJSON_GetStringValue(list->child) : NULL;
    if (!first || first[0] == '\0')
        return fy_fail(err, FERRY_ERR_FORMAT,
                       "%s: key 'architectures' must be a list starting with a class name",
                       origin);
    if (strlen(first) >= sizeof cfg->architecture)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'architectures': name too long", origin);
    if ((status = cfg_check_name(origin, "architectures", first, err)) != FERRY_OK)
        return status;
    strcpy(cfg->architecture, first);
    return FERRY_OK;
}

/* "dtype" (transformers 5) or "torch_dtype" (transformers 4); the newer key wins. */
static ferry_status read_dtype(const cJSON *root, const char *origin, model_config *cfg,
                               fy_err *err)
{
    char name[32], quoted[TEXT_QUOTE_MAX];
    const char *key = "dtype";
    const cJSON *node;
    ferry_status status = json_get_member(root, key, false, origin, &node, err);
    if (status == FERRY_OK && !node) {
        key = "torch_dtype";
        status = json_get_member(root, key, false, origin, &node, err);
    }
    if (status != FERRY_OK || !node)
        return status;
    if ((status = json_get_string(root, key, true, NULL, origin, name, sizeof name, err)) !=
        FERRY_OK)
        return status;
    for (size_t i = 0; i < sizeof CONFIG_DTYPES / sizeof CONFIG_DTYPES[0]; i++) {
        if (strcmp(name, CONFIG_DTYPES[i].name) == 0) {
            cfg->dtype = CONFIG_DTYPES[i].dtype;
            return FERRY_OK;
        }
    }
    return fy_fail(err, FERRY_ERR_UNSUPPORTED,
                   "%s: key '%s' is '%s'; supported: float32, bfloat16, float16, float64", origin,
                   key, text_quote(name, quoted, sizeof quoted));
}

/* A quantized checkpoint (GPTQ, AWQ, bitsandbytes, fp8 ...) stores packed codes and scales
 * under names and dtypes that read as float weights would give wrong numbers, not an error. */
static ferry_status refuse_quantized(const cJSON *root, const char *origin, fy_err *err)
{
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    if (!q || cJSON_IsNull(q))
        return FERRY_OK;
    char quoted[TEXT_QUOTE_MAX];
    const char *method = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(q, "quant_method"));
    return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: the checkpoint is quantized already "
                   "(quantization_config, quant_method '%s'); ferry reads float checkpoints "
                   "and quantizes them itself (--quantize)", origin,
                   text_quote(method ? method : "?", quoted, sizeof quoted));
}

/* Multimodal and composite configs keep the language model's keys in "text_config"; the
 * architecture, model_type and dtype stay at the top. */
static ferry_status read_config(const cJSON *root, const char *origin, model_config *cfg,
                                fy_err *err)
{
    ferry_status status;
    const cJSON *text;

    if (!cJSON_IsObject(root))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: expected a JSON object", origin);
    if ((status = read_architecture(root, origin, cfg, err)) ||
        (status = json_get_string(root, "model_type", false, "", origin, cfg->model_type,
                                  sizeof cfg->model_type, err)) ||
        (status = cfg_check_name(origin, "model_type", cfg->model_type, err)) ||
        (status = read_dtype(root, origin, cfg, err)) ||
        (status = json_get_member(root, "text_config", false, origin, &text, err)))
        return status;
    if (text && !cJSON_IsObject(text))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'text_config' must be an object", origin);
    if ((status = refuse_quantized(root, origin, err)) ||
        (text && (status = refuse_quantized(text, origin, err))))
        return status;
    cfg->text = text ? text : root;
    snprintf(cfg->text_origin, sizeof cfg->text_origin, "%s%s", origin,
             text ? " (text_config)" : "");
    return FERRY_OK;
}

ferry_status cfg_parse(const char *json_text, size_t len, const char *origin,
                       model_config *out, fy_err *err)
{
    memset(out, 0, sizeof *out);
    ferry_status status = json_parse(json_text, len, origin, &CONFIG_LIMITS, &out->raw, err);
    if (status == FERRY_OK)
        status = read_config(out->raw, origin, out, err);
    if (status != FERRY_OK)
        cfg_free(out);
    return status;
}

ferry_status cfg_load(const char *dir, model_config *out, fy_err *err)
{
    ferry_status status;
    char *text = NULL;
    size_t len = 0;
    struct stat st;
    char *config_path = NULL, *generation_path = NULL;

    memset(out, 0, sizeof *out);
    if (!(config_path = fs_join_dup(dir, "config.json", err)) ||
        !(generation_path = fs_join_dup(dir, "generation_config.json", err))) {
        status = err->status;
        goto cleanup;
    }
    if ((status = json_read_file(config_path, CONFIG_LIMITS.max_bytes, &text, &len, err)) ||
        (status = cfg_parse(text, len, config_path, out, err)))
        goto cleanup;
    out->raw_text = text;
    out->raw_len = len;
    text = NULL;
    if (stat(generation_path, &st) == 0 || errno != ENOENT) {
        if ((status = json_read_file(generation_path, CONFIG_LIMITS.max_bytes, &text, &len,
                                     err)) ||
            (status = json_parse(text, len, generation_path, &CONFIG_LIMITS, &out->generation,
                                 err)))
            goto cleanup;
        out->generation_text = text;
        out->generation_len = len;
        text = NULL;
    }

cleanup:
    if (status != FERRY_OK)
        cfg_free(out);
    free(text);
    free(config_path);
    free(generation_path);
    return status;
}

void cfg_free(model_config *cfg)
{
    if (!cfg)
        return;
    cJSON_Delete(cfg->raw);
    cJSON_Delete(cfg->generation);
    free(cfg->raw_text);
    free(cfg->generation_text);
    memset(cfg, 0, sizeof *cfg);
}
