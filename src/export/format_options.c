/* format_options.c — the public face of the formats' own options (backends/options.c holds
 * their reading): setting one by name, a recipe's option keys, the list the CLI builds its
 * flags and --help from, and the config as an opaque handle for bindings. No option is named
 * here: every one comes from a format's table. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/internal.h"
#include "util/json.h"

ferry_export_config *ferry_export_config_new(void)
{
    ferry_export_config *cfg = malloc(sizeof *cfg);
    if (cfg)
        ferry_export_config_init(cfg);
    return cfg;
}

void ferry_export_config_free(ferry_export_config *cfg)
{
    free(cfg);
}

void ferry_export_config_set_cancel(ferry_export_config *cfg, volatile int *cancel)
{
    if (cfg)
        cfg->cancel = cancel;
}

void ferry_export_config_set_converted_tokenizer_dir(ferry_export_config *cfg, const char *dir)
{
    if (cfg)
        cfg->converted_tokenizer_dir = dir;
}

/* The option named `key` (or its alias) in any format of this build, and that format. */
static const be_option *any_option(const char *key, const fb_backend **owner)
{
    const fb_backend *be;
    for (int i = 0; (be = fb_at(i)); i++) {
        const be_option *o = be_option_find(be, key);
        if (o) {
            if (owner)
                *owner = be;
            return o;
        }
    }
    return NULL;
}

void exp_format_option_keys(char *buf, size_t size)
{
    const fb_backend *be;
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; (be = fb_at(i)) && len < size; i++) {
        if (!be->n_options)
            continue;
        len += (size_t)snprintf(buf + len, size - len, "%s", len ? "; " : "");
        for (int k = 0; k < be->n_options && len < size; k++)
            len += (size_t)snprintf(buf + len, size - len, "%s%s%s%s", k ? ", " : "",
                                    be->options[k].key, be->options[k].alias ? " or " : "",
                                    be->options[k].alias ? be->options[k].alias : "");
        if (len < size)
            len += (size_t)snprintf(buf + len, size - len, " (%s)", be->name);
    }
}

/* Whether cfg->n_options can be trusted (the struct is public: a caller may fill it). */
static bool count_ok(const ferry_export_config *cfg)
{
    return cfg->n_options >= 0 && cfg->n_options <= FERRY_MAX_FORMAT_OPTIONS;
}

static ferry_status unset(ferry_export_config *cfg, const char *key, fy_err *err)
{
    if (!count_ok(cfg))
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "export config: n_options %d is outside "
                       "[0, %d]", cfg->n_options, FERRY_MAX_FORMAT_OPTIONS);
    for (int i = 0; i < cfg->n_options; i++)
        if (!strcmp(cfg->options[i].key, key)) {
            memmove(&cfg->options[i], &cfg->options[i + 1],
                    (size_t)(cfg->n_options - i - 1) * sizeof cfg->options[i]);
            cfg->n_options--;
            return FERRY_OK;
        }
    return FERRY_OK;
}

ferry_status ferry_export_config_set_option(ferry_export_config *cfg, const char *key,
                                            const char *value, char *errbuf, size_t errbuf_size)
{
    fy_err err = {0};
    ferry_status st;
    const be_option *o = key ? any_option(key, NULL) : NULL;
    if (!cfg || !key) {
        st = fy_fail(&err, FERRY_ERR_INVALID_ARG, "no export config or no key");
    } else if (!o) {
        char known[512];
        exp_format_option_keys(known, sizeof known);
        st = fy_fail(&err, FERRY_ERR_INVALID_ARG, "'%.64s' is not an option of any format "
                     "(options: %s)", key, known);
    } else if (!value) {
        st = unset(cfg, o->key, &err);
    } else {
        char what[96], canon[FERRY_OPTION_VALUE_MAX];
        snprintf(what, sizeof what, "option '%s'", key);
        st = be_option_parse(o, what, value, canon, sizeof canon, &err);
        if (st == FERRY_OK)
            st = be_option_store(cfg, o, canon, &err);
    }
    if (st != FERRY_OK && errbuf && errbuf_size)
        snprintf(errbuf, errbuf_size, "%s", err.msg);
    return st;
}

const char *ferry_export_config_option(const ferry_export_config *cfg, const char *key)
{
    const be_option *o = cfg && key ? any_option(key, NULL) : NULL;
    if (!o || !count_ok(cfg))
        return NULL;
    for (int i = 0; i < cfg->n_options; i++)
        if (!strncmp(cfg->options[i].key, o->key, sizeof cfg->options[i].key))
            return cfg->options[i].value;
    return NULL;
}

/* --- the list for the CLI --- */

#define MAX_LISTED 32
static char expects[MAX_LISTED][160];
static pthread_once_t expects_once = PTHREAD_ONCE_INIT;

static void fill_expects(void)
{
    const fb_backend *be;
    int n = 0;
    for (int i = 0; (be = fb_at(i)); i++)
        for (int k = 0; k < be->n_options && n < MAX_LISTED; k++)
            be_option_expects(&be->options[k], expects[n++], sizeof expects[0]);
}

ferry_status ferry_format_option_describe(int i, ferry_format_option_info *out)
{
    if (!out || i < 0)
        return FERRY_ERR_INVALID_ARG;
    pthread_once(&expects_once, fill_expects);
    const fb_backend *be;
    int n = 0;
    for (int b = 0; (be = fb_at(b)); b++)
        for (int k = 0; k < be->n_options; k++, n++) {
            if (n != i)
                continue;
            if (n >= MAX_LISTED)
                return FERRY_ERR_INVALID_ARG;
            const be_option *o = &be->options[k];
            *out = (ferry_format_option_info){
                .format = be->name, .key = o->key, .alias = o->alias,
                .default_value = o->def, .expects = expects[n], .flag = o->flag,
                .flag_value = o->flag_value, .metavar = o->metavar, .help = o->help,
                .generation_only = o->generation_only};
            return FERRY_OK;
        }
    return FERRY_ERR_INVALID_ARG;
}

/* --- a recipe's option keys --- */

bool exp_is_format_option(const char *key)
{
    return any_option(key, NULL) != NULL;
}

/* The JSON value as the option's text; false when it is of another JSON type. */
static bool as_text(const be_option *o, const cJSON *item, char *text, size_t size)
{
    uint64_t v;
    switch (o->type) {
    case BE_OPTION_BOOL:
        if (!cJSON_IsBool(item))
            return false;
        snprintf(text, size, "%s", cJSON_IsTrue(item) ? "true" : "false");
        return true;
    case BE_OPTION_INT:
        if (!json_number_to_u64(item, &v) || v > (uint64_t)INT64_MAX)
            return false;
        snprintf(text, size, "%llu", (unsigned long long)v);
        return true;
    case BE_OPTION_CHOICE:
        if (!cJSON_IsString(item))
            return false;
        snprintf(text, size, "%.*s", (int)size - 1, item->valuestring);
        return strlen(item->valuestring) < size;
    }
    return false;
}

ferry_status exp_recipe_option(exp_recipe_options *ro, const char *key, const cJSON *item,
                               char *eb, size_t es)
{
    const be_option *o = any_option(key, NULL);
    bool alias = o && strcmp(o->key, key) != 0;
    /* null is the default where the option has one a recipe may name so: transformers writes
     * opset_version null, and ort_fusions null is standard ONNX */
    bool null_ok = alias || (o && o->type == BE_OPTION_CHOICE);
    char text[FERRY_OPTION_VALUE_MAX] = "", canon[FERRY_OPTION_VALUE_MAX] = "";
    bool null = cJSON_IsNull(item);
    fy_err err = {0};
    char what[96];
    snprintf(what, sizeof what, "recipe: '%s'", key);
    if (!o || (null && !null_ok) ||
        (!null && (!as_text(o, item, text, sizeof text) ||
                   be_option_parse(o, what, text, canon, sizeof canon, &err) != FERRY_OK))) {
        char takes[160];
        if (o)
            be_option_expects(o, takes, sizeof takes);
        if (eb && es)
            snprintf(eb, es, "recipe: '%s' must be %s%s", key, o ? takes : "known",
                     null_ok ? " (or null, the default)" : "");
        return FERRY_ERR_INVALID_ARG;
    }
    int slot = 0;
    while (slot < ro->n && !(ro->given[slot].opt == o && ro->given[slot].alias == alias))
        slot++;
    if (slot == EXP_RECIPE_OPTIONS) {
        if (eb && es)
            snprintf(eb, es, "recipe: more than %d format options", EXP_RECIPE_OPTIONS);
        return FERRY_ERR_INVALID_ARG;
    }
    ro->n += slot == ro->n;
    ro->given[slot].opt = o;
    ro->given[slot].key = key;
    ro->given[slot].alias = alias;
    ro->given[slot].null = null;
    snprintf(ro->given[slot].text, sizeof ro->given[slot].text, "%s", canon);
    return FERRY_OK;
}

ferry_status exp_recipe_options_apply(const exp_recipe_options *ro, ferry_export_config *cfg,
                                      char *eb, size_t es)
{
    fy_err err = {0};
    for (int i = 0; i < ro->n; i++) {
        const struct exp_recipe_given *a = &ro->given[i], *other = NULL;
        for (int k = 0; k < ro->n; k++)
            if (k != i && ro->given[k].opt == a->opt)
                other = &ro->given[k];
        /* an option given as its key and as its alias: each name's last value, which must
         * agree; the alias's null gives way to the key */
        if (other && a->alias)
            continue; /* taken with its key */
        if (other && !other->null && strcmp(a->text, other->text) != 0) {
            if (eb && es)
                snprintf(eb, es, "recipe: '%s' (%s) and '%s' (%s), the same option, disagree",
                         a->key, a->text, other->key, other->text);
            return FERRY_ERR_INVALID_ARG;
        }
        if (a->null) {
            if (!a->alias && unset(cfg, a->opt->key, &err) != FERRY_OK) {
                if (eb && es)
                    snprintf(eb, es, "recipe: %s", err.msg);
                return err.status;
            }
            continue;
        }
        if (be_option_store(cfg, a->opt, a->text, &err) != FERRY_OK) {
            if (eb && es)
                snprintf(eb, es, "recipe: %s", err.msg);
            return err.status;
        }
    }
    return FERRY_OK;
}
