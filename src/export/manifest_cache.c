/* manifest_cache.c — a generation component's "cache" in export.json, checked against the
 * names, shapes and dtypes of its inputs and outputs before anything runs it: generate() and
 * the runners feed each output back as the input its pair names, so a pair that joins layer
 * 0's key to its value (or one layer to another) would run, and give other tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/internal.h"
#include "util/text.h"

#define MAX_LAYERS 4096

typedef enum { KIND_KEY, KIND_VALUE, KIND_LENGTH, N_KINDS } cache_kind_slot;
static const char *const KINDS[N_KINDS] = {"key", "value", "cumulative_length"};

/* Layer and kind of a cache tensor named in one of ferry's spellings: past_key_values.L.K and
 * present.L.K (explicit), input. / output.past_key_values.L.K (in place), past_key_values_L_K
 * (torch's; either side where the cache is written in place) and present_L_K (torch's returned
 * cache). `side` says which: 0 input, 1 output, 2 either. */
static bool parse_name(const char *name, int *layer, int *kind, int *side)
{
    static const struct {
        const char *prefix;
        char sep;
        int side;
    } FORMS[] = {
        {"past_key_values.", '.', 0}, {"present.", '.', 1},
        {"input.past_key_values.", '.', 0}, {"output.past_key_values.", '.', 1},
        {"past_key_values_", '_', 2}, {"present_", '_', 1},
    };
    for (size_t f = 0; f < sizeof FORMS / sizeof FORMS[0]; f++) {
        size_t n = strlen(FORMS[f].prefix);
        if (strncmp(name, FORMS[f].prefix, n) != 0)
            continue;
        const char *p = name + n;
        char *end;
        if (*p < '0' || *p > '9')
            return false;
        long l = strtol(p, &end, 10);
        if (*end != FORMS[f].sep || l < 0 || l >= MAX_LAYERS || (end - p > 1 && *p == '0'))
            return false;
        for (int k = 0; k < N_KINDS; k++)
            if (strcmp(end + 1, KINDS[k]) == 0) {
                *layer = (int)l, *kind = k, *side = FORMS[f].side;
                return true;
            }
        return false;
    }
    return false;
}

/* The entry named `name` in metadata list `list` ("inputs" or "outputs"), or NULL. */
static const cJSON *io_entry(const cJSON *list, const char *name)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
        if (n && strcmp(n, name) == 0)
            return e;
    }
    return NULL;
}

/* A key or value entry's shape [batch, kv_heads, length, head_dim] against the cache's
 * kv_heads and head_dim, and its dtype against the cache's. */
static bool geometry_agrees(const cJSON *entry, double kv_heads, double head_dim,
                            const char *dtype)
{
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    const char *dt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(entry, "dtype"));
    if (cJSON_GetArraySize(shape) != 4 || !dt || !dtype || strcmp(dt, dtype) != 0)
        return false;
    const cJSON *h = cJSON_GetArrayItem(shape, 1), *d = cJSON_GetArrayItem(shape, 3);
    return cJSON_IsNumber(h) && cJSON_IsNumber(d) && h->valuedouble == kv_heads &&
           d->valuedouble == head_dim;
}

ferry_status manifest_check_cache(const cJSON *comp, const char *dir, fy_err *err)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(comp, "metadata");
    const cJSON *cache = cJSON_GetObjectItemCaseSensitive(md, "cache");
    if (!cache)
        return FERRY_OK;
    char qcomp[TEXT_QUOTE_MAX];
    text_quote(comp->string, qcomp, sizeof qcomp);
    const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(md, "inputs");
    const cJSON *outputs = cJSON_GetObjectItemCaseSensitive(md, "outputs");
    const cJSON *pairs = cJSON_GetObjectItemCaseSensitive(cache, "pairs");
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(cache, "layers");
    const cJSON *kv_heads = cJSON_GetObjectItemCaseSensitive(cache, "kv_heads");
    const cJSON *head_dim = cJSON_GetObjectItemCaseSensitive(cache, "head_dim");
    const char *dtype = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cache, "dtype"));
    if (!cJSON_IsObject(cache) || !cJSON_IsArray(pairs) || !cJSON_IsNumber(layers) ||
        !cJSON_IsNumber(kv_heads) || !cJSON_IsNumber(head_dim) || !dtype ||
        !(layers->valuedouble >= 1 && layers->valuedouble <= MAX_LAYERS) ||
        layers->valuedouble != (double)(int)layers->valuedouble)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': 'cache' needs "
                       "'pairs', 'layers' (1 to %d), 'kv_heads', 'head_dim' and 'dtype'", dir,
                       qcomp, MAX_LAYERS);
    int n_layers = (int)layers->valuedouble;
    unsigned char *seen = calloc((size_t)n_layers * N_KINDS, 1);
    if (!seen)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    ferry_status st = FERRY_OK;
    int index = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, pairs) {
        const char *in = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "input"));
        const char *out = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "output"));
        int l_in = -1, k_in = -1, s_in = -1, l_out, k_out, s_out;
        bool in_ok = !in || (parse_name(in, &l_in, &k_in, &s_in) && s_in != 1);
        bool out_ok = out && parse_name(out, &l_out, &k_out, &s_out) && s_out != 0 &&
                      l_out < n_layers;
        if (!in_ok || !out_ok || (in && (l_in != l_out || k_in != k_out))) {
            char qi[TEXT_QUOTE_MAX], qo[TEXT_QUOTE_MAX];
            st = fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': cache pair "
                         "%d joins '%s' to '%s', which are not one layer's same cache tensor "
                         "(past_key_values.L.key -> present.L.key, ...) of its %d layers", dir,
                         qcomp, index, in ? text_quote(in, qi, sizeof qi) : "(none)",
                         out ? text_quote(out, qo, sizeof qo) : "(none)", n_layers);
            break;
        }
        if (seen[l_out * N_KINDS + k_out]++) {
            st = fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': layer %d's %s "
                         "is in two cache pairs", dir, qcomp, l_out, KINDS[k_out]);
            break;
        }
        /* where the tensors are the program's inputs and outputs (not a stateful model's
         * variables), they are listed, with the cache's geometry */
        const cJSON *ie = in ? io_entry(inputs, in) : NULL;
        const cJSON *oe = io_entry(outputs, out);
        if (k_out != KIND_LENGTH &&
            ((ie && !geometry_agrees(ie, kv_heads->valuedouble, head_dim->valuedouble,
                                     dtype)) ||
             (oe && !geometry_agrees(oe, kv_heads->valuedouble, head_dim->valuedouble,
                                     dtype)))) {
            char q[TEXT_QUOTE_MAX];
            st = fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': '%s' is not "
                         "[batch, %g, length, %g] %s, the cache's kv_heads, head_dim and dtype",
                         dir, qcomp, text_quote(ie ? in : out, q, sizeof q),
                         kv_heads->valuedouble, head_dim->valuedouble, dtype);
            break;
        }
        index++;
    }
    /* every layer's key and value, and no layer but some of its kinds */
    for (int l = 0; st == FERRY_OK && l < n_layers; l++)
        for (int k = 0; k < N_KINDS; k++)
            if (seen[l * N_KINDS + k] != seen[k] || (k != KIND_LENGTH && !seen[l * N_KINDS + k])) {
                st = fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': the cache "
                             "pairs do not hold layer %d's %s as they hold layer 0's (every "
                             "layer has its key and value)", dir, qcomp, l, KINDS[k]);
                break;
            }
    free(seen);
    return st;
}
