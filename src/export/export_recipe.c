/* export_recipe.c — JSON recipes, whose keys follow transformers' AutoExportConfig.from_dict:
 * ferry_export_config_from_json reads one into a config (each key type-checked, an error names
 * it), export_config_to_json writes a config back as the recipe that makes it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/internal.h"
#include "util/json.h"
#include "util/text.h"

/* A recipe names at most 16 dims and a dozen keys: a few hundred bytes. The caps are far above
 * that and keep what the parser builds for a hostile one under ~3 MB. */
static const json_limits RECIPE_LIMITS = {
    .kind = "recipe", .max_bytes = 1u << 20, .max_values = 10000, .max_depth = 32, .utf8 = true,
};

static ferry_status parse_dtype(const char *s, ferry_dtype *out)
{
    if (!strcmp(s, "fp32") || !strcmp(s, "float32"))
        *out = FERRY_F32;
    else if (!strcmp(s, "fp16") || !strcmp(s, "float16"))
        *out = FERRY_F16;
    else if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16"))
        *out = FERRY_BF16;
    else
        return FERRY_ERR_INVALID_ARG;
    return FERRY_OK;
}

static ferry_status recipe_dynamic_shapes(ferry_export_config *cfg, const cJSON *ds, char *eb,
                                          size_t es)
{
    if (!cJSON_IsObject(ds))
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "recipe: 'dynamic_shapes' must be an object "
                       "(or null: none)");
    const cJSON *input;
    cJSON_ArrayForEach(input, ds) {
        if (cJSON_IsNull(input))
            continue; /* torch's None for an input: it stays static */
        if (!cJSON_IsObject(input))
            return exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                           "recipe: dynamic_shapes['%s'] must map axes to dims", input->string);
        const cJSON *ax;
        cJSON_ArrayForEach(ax, input) {
            char *end;
            long long axis = strtoll(ax->string, &end, 10);
            if (*end || end == ax->string)
                return exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                               "recipe: dynamic_shapes['%s'] key '%s' is not an axis number",
                               input->string, ax->string);
            const char *sym = NULL;
            long long min = 1, max = 0;
            if (cJSON_IsNull(ax) || (cJSON_IsString(ax) &&
                                     !strcmp(ax->valuestring, "DimHint(STATIC)"))) {
                continue; /* torch's None and Dim.STATIC: the axis stays static */
            } else if (cJSON_IsString(ax) && (!strcmp(ax->valuestring, "DimHint(AUTO)") ||
                                              !strcmp(ax->valuestring, "DimHint(DYNAMIC)"))) {
                /* Dim.AUTO / Dim.DYNAMIC as transformers' to_json_string writes them: named as
                 * --dynamic and ferry's Python name them */
                if (axis != 0 && axis != 1)
                    return exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                                   "recipe: dynamic_shapes['%s']['%s'] "
                                   "is %s, which names no symbol; ferry names axes 0 (batch) and 1 "
                                   "(sequence) only: give it {\"name\": ..., \"min\": ..., "
                                   "\"max\": ...}", input->string, ax->string, ax->valuestring);
                sym = axis == 0 ? "batch" : "sequence";
            } else if (cJSON_IsString(ax) && (!strncmp(ax->valuestring, "Dim(", 4) ||
                                              !strncmp(ax->valuestring, "DimHint(", 8) ||
                                              strpbrk(ax->valuestring, "*+-/ "))) {
                return exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                               "recipe: dynamic_shapes['%s']['%s'] is \"%s\", a "
                               "torch.export.Dim as transformers' to_json_string writes it (or "
                               "a hint with a range, or a dim derived from another), whose text "
                               "can drop the range (torch prints Dim('s', min=2, max=256) as "
                               "Dim('s', max=256)): write it as {\"name\": ..., \"min\": ..., "
                               "\"max\": ...}", input->string, ax->string, ax->valuestring);
            } else if (cJSON_IsString(ax)) {
                sym = ax->valuestring;
            } else if (cJSON_IsObject(ax)) {
                const cJSON *nm = cJSON_GetObjectItemCaseSensitive(ax, "name");
                const cJSON *mn = cJSON_GetObjectItemCaseSensitive(ax, "min");
                const cJSON *mx = cJSON_GetObjectItemCaseSensitive(ax, "max");
                if (!cJSON_IsString(nm) || (mn && !cJSON_IsNumber(mn)) ||
                    (mx && !cJSON_IsNumber(mx) && !cJSON_IsNull(mx)))
                    return exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                                   "recipe: dynamic_shapes['%s']['%s'] needs a string 'name' and "
                                   "numeric 'min'/'max'", input->string, ax->string);
                sym = nm->valuestring;
                uint64_t v;
                if (mn) {
                    if (!json_number_to_u64(mn, &v))
                        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "recipe: bad min");
                    min = (long long)v;
                }
                if (mx && cJSON_IsNumber(mx)) {
                    if (!json_number_to_u64(mx, &v))
                        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "recipe: bad max");
                    max = (long long)v;
                }
            } else {
                return exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                               "recipe: dynamic_shapes['%s']['%s'] must be a name or an object",
                               input->string, ax->string);
            }
            ferry_status st = exp_add_dim(cfg, input->string, axis, sym, min, max, eb, es);
            if (st != FERRY_OK)
                return st;
        }
    }
    return FERRY_OK;
}

static ferry_status recipe_generation(ferry_export_config *cfg, const cJSON *gc, char *eb,
                                       size_t es)
{
    if (!cJSON_IsObject(gc))
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                       "recipe: 'generation_config' must be an object");
    const cJSON *item;
    cJSON_ArrayForEach(item, gc) {
        const char *k = item->string;
        if (!strcmp(k, "cache_implementation")) {
            if (!cJSON_IsString(item) || (strcmp(item->valuestring, "static") != 0 &&
                                          strcmp(item->valuestring, "dynamic") != 0))
                return exp_say(eb, es, FERRY_ERR_UNSUPPORTED, "recipe: generation_config."
                               "cache_implementation must be \"static\" or \"dynamic\"");
            cfg->generation.static_cache = strcmp(item->valuestring, "static") == 0;
        } else if (!strcmp(k, "max_cache_len")) {
            uint64_t v;
            if (!json_number_to_u64(item, &v) || v == 0 || v > (1u << 30))
                return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "recipe: generation_config."
                               "max_cache_len must be a positive integer");
            cfg->generation.max_cache_len = (int64_t)v;
        } else {
            return exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                           "recipe: unknown generation_config key '%s' "
                           "(known: cache_implementation, max_cache_len)", k);
        }
    }
    return FERRY_OK;
}

/* "quantizer": null, "int4", "int8" or an object of the fields below. */
static ferry_status recipe_quantizer(ferry_quantizer *q, const cJSON *item, char *eb, size_t es)
{
    if (cJSON_IsNull(item)) {
        q->bits = 0;
        return FERRY_OK;
    }
    if (cJSON_IsString(item)) {
        if (strcmp(item->valuestring, "int4") != 0 && strcmp(item->valuestring, "int8") != 0)
            return exp_say(eb, es, FERRY_ERR_UNSUPPORTED, "recipe: quantizer \"%s\" is not "
                           "supported (int4, int8, or an object with \"bits\")", item->valuestring);
        q->bits = item->valuestring[3] == '4' ? 4 : 8;
        return FERRY_OK;
    }
    if (!cJSON_IsObject(item))
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "recipe: 'quantizer' must be null, \"int4\", "
                       "\"int8\" or an object");
    const cJSON *f;
    cJSON_ArrayForEach(f, item) {
        const char *k = f->string;
        uint64_t v;
        if (!strcmp(k, "bits") || !strcmp(k, "block_size") || !strcmp(k, "accuracy_level")) {
            if (!json_number_to_u64(f, &v) || v > 4096)
                return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "recipe: quantizer.%s must be a "
                               "non-negative integer", k);
            /* values q_check_config refuses, refused here too so that the recipe's file is
             * named ("quantizer: 3 bits is not supported" named none); bits 0
             * is no quantization, as q_check_config takes it */
            if (k[0] == 'b' && k[1] == 'i' && v != 0 && v != 4 && v != 8)
                return exp_say(eb, es, FERRY_ERR_UNSUPPORTED, "recipe: quantizer.bits %llu is not "
                               "supported (4 or 8; 0 quantizes nothing)", (unsigned long long)v);
            if (k[0] == 'b' && k[1] == 'l' && v != 0 && (v < 16 || v > 256 || (v & (v - 1))))
                return exp_say(eb, es, FERRY_ERR_UNSUPPORTED,
                               "recipe: quantizer.block_size %llu is "
                               "not supported (16, 32, 64, 128 or 256)", (unsigned long long)v);
            if (k[0] == 'b' && k[1] == 'i')
                q->bits = (int)v;
            else if (k[0] == 'b')
                q->block_size = (int)v;
            else
                q->accuracy_level = (int)v;
        } else if (!strcmp(k, "symmetric") || !strcmp(k, "quantize_embeddings") ||
                   !strcmp(k, "quantize_lm_head")) {
            if (!cJSON_IsBool(f))
                return exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                               "recipe: quantizer.%s must be true or "
                               "false", k);
            int on = cJSON_IsTrue(f);
            if (k[0] == 's')
                q->asymmetric = !on;
            else if (!strcmp(k, "quantize_embeddings"))
                q->embeddings = on;
            else
                q->lm_head = on;
        } else if (!strcmp(k, "method")) {
            if (!cJSON_IsString(f) || (strcmp(f->valuestring, "rtn") && strcmp(f->valuestring,
                                                                             "mse")))
                return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "recipe: quantizer.method must be "
                               "\"rtn\" or \"mse\"");
            q->method = f->valuestring[0] == 'm' ? FERRY_QUANT_MSE : FERRY_QUANT_RTN;
        } else {
            return exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                           "recipe: unknown quantizer key '%s' (known: "
                           "bits, block_size, symmetric, accuracy_level, quantize_embeddings, "
                           "quantize_lm_head, method)", k);
        }
    }
    /* after the keys: a misspelt one is named rather than reported as bits missing */
    if (!cJSON_GetObjectItemCaseSensitive(item, "bits"))
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "recipe: quantizer needs \"bits\" (4 or 8)");
    return FERRY_OK;
}

/* Keys whose value adds to the config rather than replacing it: given twice, only the last is
 * read, as every other key ends with its last value. */
static bool adds_up(const char *key)
{
    return !strcmp(key, "dynamic_shapes") || !strcmp(key, "quantizer") ||
           !strcmp(key, "generation_config") || !strcmp(key, "example_shapes");
}

static bool repeated_later(const cJSON *item)
{
    for (const cJSON *n = item->next; n; n = n->next)
        if (!strcmp(n->string, item->string))
            return true;
    return false;
}

ferry_status ferry_export_config_from_json(ferry_export_config *cfg, const char *json, char *eb,
                                           size_t es)
{
    cJSON *root = NULL;
    fy_err err = {0};
    ferry_status st = json_parse(json, strlen(json), "recipe", &RECIPE_LIMITS, &root, &err);
    if (st != FERRY_OK) {
        st = exp_say(eb, es, st == FERRY_ERR_NOMEM ? st : FERRY_ERR_INVALID_ARG, "%s", err.msg);
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        st = exp_say(eb, es, FERRY_ERR_INVALID_ARG, "recipe: not a JSON object");
        goto done;
    }
    /* The format first: keys of a format ferry lacks (ExecutorchConfig's alloc_graph_input)
     * would otherwise be named as unknown before the format is. */
    const cJSON *item, *format = NULL;
    cJSON_ArrayForEach(item, root)
        if (!strcmp(item->string, "export_format"))
            format = item; /* the last one, as for every key */
    if (format) {
        const fb_backend *be = cJSON_IsString(format) ? fb_find_name(format->valuestring) : NULL;
        if (!be) {
            st = exp_say(eb, es, FERRY_ERR_UNSUPPORTED, "recipe: export_format %s%s%s is not one "
                         "ferry writes (%s; \"dynamo\" is pt2)",
                         cJSON_IsString(format) ? "'" : "",
                         cJSON_IsString(format) ? format->valuestring
                         : cJSON_IsNull(format) ? "null" : "of this type",
                         cJSON_IsString(format) ? "'" : "", fb_names());
            goto done;
        }
        cfg->format = be->format;
    }
    exp_recipe_options format_options = {.n = 0};
    cJSON_ArrayForEach(item, root) {
        const char *k = item->string;
        if (!strcmp(k, "export_format") || (adds_up(k) && repeated_later(item))) {
            continue;
        } else if (!strcmp(k, "dynamic")) {
            if (!cJSON_IsBool(item)) {
                st = exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                             "recipe: 'dynamic' must be true or false");
                goto done;
            }
            cfg->dynamic = cJSON_IsTrue(item);
        } else if (!strcmp(k, "dynamic_shapes")) {
            /* null: transformers' to_json_string of a config that sets none */
            if (!cJSON_IsNull(item) && (st = recipe_dynamic_shapes(cfg, item, eb, es)) != FERRY_OK)
                goto done;
        } else if (!strcmp(k, "dtype")) {
            if (!cJSON_IsString(item) || parse_dtype(item->valuestring, &cfg->dtype) != FERRY_OK) {
                st = exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                             "recipe: 'dtype' must be \"fp32\", \"fp16\" or \"bf16\" (or "
                             "torch's \"float32\", \"float16\", \"bfloat16\")");
                goto done;
            }
        } else if (!strcmp(k, "strict") || !strcmp(k, "prefer_deferred_runtime_asserts_over_guards")) {
            /* torch.export's tracing modes, kept by transformers' recipes. ferry does not trace:
             * its graph holds over every declared range by construction, with no guard to
             * defer, which is what the second asks for. The strict tracer's extra checks are
             * not done, so strict=true is refused. */
            if (!cJSON_IsBool(item)) {
                st = exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                             "recipe: '%s' must be true or false", k);
                goto done;
            }
            if (k[1] == 't' && cJSON_IsTrue(item)) {
                st = exp_say(eb, es, FERRY_ERR_UNSUPPORTED, "recipe: strict=true asks for "
                             "torch.export's strict tracer; ferry builds the graph from the "
                             "checkpoint without tracing, so it has no strict mode (leave strict "
                             "false)");
                goto done;
            }
        } else if (!strcmp(k, "example_shapes")) {
            /* {input name: [extents]}: whether the model has the input, with as many axes,
             * the export checks */
            bool ok = cJSON_IsObject(item) && cJSON_GetArraySize(item) >= 1 &&
                      cJSON_GetArraySize(item) <= FERRY_MAX_EXAMPLES;
            cfg->n_examples = 0;
            for (const cJSON *x = ok ? item->child : NULL; x && ok; x = x->next) {
                int64_t dims[FERRY_MAX_EXAMPLE_RANK];
                int rank = cJSON_IsArray(x) ? cJSON_GetArraySize(x) : 0;
                ok = rank >= 1 && rank <= FERRY_MAX_EXAMPLE_RANK;
                for (int i = 0; i < rank && ok; i++) {
                    uint64_t v;
                    ok = json_number_to_u64(cJSON_GetArrayItem(x, i), &v) && v >= 1 &&
                         v <= (uint64_t)FERRY_DIM_BOUND_MAX;
                    dims[i] = (int64_t)v;
                }
                ok = ok && exp_set_example(cfg, x->string, rank, dims, eb, es) == FERRY_OK;
            }
            if (!ok) {
                st = exp_say(eb, es, FERRY_ERR_INVALID_ARG, "recipe: 'example_shapes' must be "
                             "{input name: [extent, ...]} of at most %d inputs, each extent a "
                             "positive integer (e.g. {\"input_ids\": [1, 8]})", FERRY_MAX_EXAMPLES);
                goto done;
            }
        } else if (!strcmp(k, "text_only")) {
            if (!cJSON_IsBool(item)) {
                st = exp_say(eb, es, FERRY_ERR_INVALID_ARG, "recipe: 'text_only' must be true or "
                             "false");
                goto done;
            }
            cfg->text_only = cJSON_IsTrue(item);
        } else if (!strcmp(k, "for_generation") || !strcmp(k, "multi_token_decode")) {
            if (!cJSON_IsBool(item)) {
                st = exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                             "recipe: '%s' must be true or false", k);
                goto done;
            }
            if (k[0] == 'f')
                cfg->for_generation = cJSON_IsTrue(item);
            else
                cfg->generation.multi_token_decode = cJSON_IsTrue(item);
        } else if (!strcmp(k, "generation_config")) {
            if ((st = recipe_generation(cfg, item, eb, es)) != FERRY_OK)
                goto done;
        } else if (!strcmp(k, "quantizer")) {
            if ((st = recipe_quantizer(&cfg->quantizer, item, eb, es)) != FERRY_OK)
                goto done;
        } else if (!strcmp(k, "optimize")) {
            /* transformers' default, true: onnxscript's optimizer (constant folding, dead code
             * removal), which ferry's graphs need not (they are built folded) */
            if (!cJSON_IsNull(item) && !cJSON_IsBool(item)) {
                st = exp_say(eb, es, FERRY_ERR_INVALID_ARG, "recipe: 'optimize' must be true or "
                             "false");
                goto done;
            }
            if (cJSON_IsFalse(item)) {
                st = exp_say(eb, es, FERRY_ERR_UNSUPPORTED, "recipe: optimize=false asks for the "
                             "graph as traced, before optimization; ferry has no such graph (it "
                             "builds the optimized one directly): leave optimize true");
                goto done;
            }
        } else if (!strcmp(k, "input_names")) {
            /* ferry's own key (transformers' exports take the inputs their example holds): a
             * list, as torch.onnx.export's input_names; null is the default */
            unsigned bits = 0;
            if (!cJSON_IsNull(item)) {
                const cJSON *name;
                if (!cJSON_IsArray(item)) {
                    st = exp_say(eb, es, FERRY_ERR_INVALID_ARG, "recipe: 'input_names' must be a "
                                 "list of input names (%s) or null", EXP_INPUT_LIST);
                    goto done;
                }
                cJSON_ArrayForEach(name, item) {
                    if (!cJSON_IsString(name)) {
                        st = exp_say(eb, es, FERRY_ERR_INVALID_ARG, "recipe: 'input_names' must "
                                     "hold names (strings), not other values");
                        goto done;
                    }
                    st = exp_add_input(&bits, name->valuestring, strlen(name->valuestring),
                                       "recipe: input_names", eb, es);
                    if (st != FERRY_OK)
                        goto done;
                }
                if ((st = exp_inputs_done(bits, "recipe: input_names", eb, es)) != FERRY_OK)
                    goto done;
            }
            cfg->inputs = bits;
        } else if (exp_is_format_option(k)) {
            if ((st = exp_recipe_option(&format_options, k, item, eb, es)) != FERRY_OK)
                goto done;
        } else if (!strcmp(k, "schema_version") || !strcmp(k, "components")) {
            st = exp_say(eb, es, FERRY_ERR_INVALID_ARG, "recipe: key '%s' is an export's "
                         "export.json, not a recipe: the recipe an export was made with is its "
                         "components.<name>.metadata.export_config", k);
            goto done;
        } else {
            char options[512];
            exp_format_option_keys(options, sizeof options);
            st = exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                         "recipe: unknown key '%s' (known: export_format, dynamic, dynamic_shapes, "
                         "dtype, example_shapes, for_generation, multi_token_decode, "
                         "generation_config, quantizer, input_names, text_only; the formats' "
                         "options: %s; "
                         "and transformers' optimize, strict, "
                         "prefer_deferred_runtime_asserts_over_guards)", k, options);
            goto done;
        }
    }
    st = exp_recipe_options_apply(&format_options, cfg, eb, es);
done:
    cJSON_Delete(root);
    return st;
}

cJSON *export_config_to_json(const ferry_export_config *cfg)
{
    cJSON *o = cJSON_CreateObject();
    const fb_backend *be = fb_find(cfg->format);
    cJSON_AddStringToObject(o, "export_format", be ? be->name : "?");
    cJSON_AddBoolToObject(o, "dynamic", cfg->dynamic);
    cJSON *ds = cJSON_AddObjectToObject(o, "dynamic_shapes");
    for (int i = 0; i < cfg->n_dims; i++) {
        const ferry_dim_spec *d = &cfg->dims[i];
        cJSON *in = cJSON_GetObjectItemCaseSensitive(ds, d->input);
        if (!in)
            in = cJSON_AddObjectToObject(ds, d->input);
        char axis[16];
        snprintf(axis, sizeof axis, "%d", d->axis);
        cJSON *dim = cJSON_AddObjectToObject(in, axis);
        cJSON_AddStringToObject(dim, "name", d->symbol);
        cJSON_AddNumberToObject(dim, "min", (double)d->min);
        if (d->max > 0)
            cJSON_AddNumberToObject(dim, "max", (double)d->max);
        else
            cJSON_AddNullToObject(dim, "max");
    }
    cJSON_AddStringToObject(o, "dtype", ferry_dtype_name(cfg->dtype));
    be_options_to_json(cfg, be, true, o);
    if (cfg->n_examples > 0) {
        cJSON *ex = cJSON_AddObjectToObject(o, "example_shapes");
        for (int i = 0; i < cfg->n_examples; i++) {
            const ferry_example_shape *x = &cfg->examples[i];
            cJSON *dims = cJSON_AddArrayToObject(ex, x->input);
            for (int d = 0; d < x->rank; d++)
                cJSON_AddItemToArray(dims, cJSON_CreateNumber((double)x->dims[d]));
        }
    } else if (cfg->example_batch > 0 && cfg->example_sequence > 0) { /* else the defaults */
        cJSON *ex = cJSON_AddObjectToObject(o, "example_shapes");
        cJSON *ids = cJSON_AddArrayToObject(ex, "input_ids");
        cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)cfg->example_batch));
        cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)cfg->example_sequence));
    }
    be_options_to_json(cfg, be, false, o);
    /* the default (input_ids, attention_mask) is left out, as recipes before the key read */
    if (exp_plain_inputs(cfg) != (FERRY_INPUT_IDS | FERRY_INPUT_ATTENTION_MASK)) {
        cJSON *names = cJSON_AddArrayToObject(o, "input_names");
        for (unsigned i = 0; exp_input_name(i); i++)
            if (cfg->inputs & (1u << i))
                cJSON_AddItemToArray(names, cJSON_CreateString(exp_input_name(i)));
    }
    if (cfg->text_only)
        cJSON_AddBoolToObject(o, "text_only", 1);
    if (cfg->quantizer.bits) {
        const ferry_quantizer *q = &cfg->quantizer;
        cJSON *qo = cJSON_AddObjectToObject(o, "quantizer");
        cJSON_AddNumberToObject(qo, "bits", q->bits);
        cJSON_AddNumberToObject(qo, "block_size", q->block_size);
        cJSON_AddBoolToObject(qo, "symmetric", !q->asymmetric);
        if (q->accuracy_level >= 0)
            cJSON_AddNumberToObject(qo, "accuracy_level", q->accuracy_level);
        cJSON_AddBoolToObject(qo, "quantize_embeddings", q->embeddings);
        cJSON_AddBoolToObject(qo, "quantize_lm_head", q->lm_head);
        cJSON_AddStringToObject(qo, "method", q->method == FERRY_QUANT_MSE ? "mse" : "rtn");
    }
    if (cfg->for_generation) {
        cJSON_AddBoolToObject(o, "for_generation", 1);
        if (cfg->generation.multi_token_decode != FERRY_AUTO)
            cJSON_AddBoolToObject(o, "multi_token_decode", cfg->generation.multi_token_decode);
        cJSON *gc = cJSON_AddObjectToObject(o, "generation_config");
        cJSON_AddStringToObject(gc, "cache_implementation",
                                cfg->generation.static_cache ? "static" : "dynamic");
        /* A recipe may leave the length to --max-cache-len; 0 ("not given") is not a length
         * the reader would take back. */
        if (cfg->generation.static_cache && cfg->generation.max_cache_len > 0)
            cJSON_AddNumberToObject(gc, "max_cache_len", (double)cfg->generation.max_cache_len);
    }
    return o;
}
