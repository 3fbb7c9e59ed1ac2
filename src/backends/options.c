/* options.c — a format's own options, read from its table (backend.h: be_option): their values
 * in ferry_export_config.options, the refusal of another format's, their export.json record.
 * Nothing here names an option: every format's come from its table. */
#include <assert.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"

const be_option *be_option_find(const fb_backend *be, const char *key)
{
    for (int i = 0; be && i < be->n_options; i++)
        if (!strcmp(be->options[i].key, key) ||
            (be->options[i].alias && !strcmp(be->options[i].alias, key)))
            return &be->options[i];
    return NULL;
}

/* The text set for option `key` in cfg, or NULL. */
static const char *set_text(const ferry_export_config *cfg, const char *key)
{
    if (cfg->n_options < 0 || cfg->n_options > FERRY_MAX_FORMAT_OPTIONS)
        return NULL; /* refused by be_options_check before any export reads an option */
    for (int i = 0; i < cfg->n_options; i++)
        if (!strcmp(cfg->options[i].key, key))
            return cfg->options[i].value;
    return NULL;
}

/* A canonical text's value (it was parsed when set). */
static int64_t value_of(const be_option *o, const char *text)
{
    switch (o->type) {
    case BE_OPTION_BOOL:
        return !strcmp(text, "true");
    case BE_OPTION_INT:
        return strtoll(text, NULL, 10);
    case BE_OPTION_CHOICE:
        for (int i = 0; o->choices[i]; i++)
            if (!strcmp(o->choices[i], text))
                return i;
        return 0;
    }
    return 0;
}

const char *be_option_text(const ferry_export_config *cfg, const fb_backend *be, const char *key)
{
    const be_option *o = be_option_find(be, key);
    if (!o)
        return NULL;
    const char *text = set_text(cfg, o->key);
    return text ? text : o->def;
}

bool be_option_is_set(const ferry_export_config *cfg, const fb_backend *be, const char *key)
{
    const be_option *o = be_option_find(be, key);
    return o && set_text(cfg, o->key);
}

int64_t be_option_value(const ferry_export_config *cfg, const fb_backend *be, const char *key)
{
    const be_option *o = be_option_find(be, key);
    assert(o && "a format reads only the options its table declares");
    return o ? value_of(o, be_option_text(cfg, be, key)) : 0;
}

void be_option_expects(const be_option *o, char *buf, size_t size)
{
    switch (o->type) {
    case BE_OPTION_BOOL:
        snprintf(buf, size, "true or false");
        return;
    case BE_OPTION_INT:
        snprintf(buf, size, "an integer in [%lld, %lld]", (long long)o->min, (long long)o->max);
        return;
    case BE_OPTION_CHOICE: {
        size_t len = 0;
        buf[0] = '\0';
        for (int i = 0; o->choices[i] && len < size; i++)
            len += (size_t)snprintf(buf + len, size - len, "%s%s", i == 0 ? "" :
                                    o->choices[i + 1] ? ", " : " or ", o->choices[i]);
        return;
    }
    }
}

ferry_status be_option_parse(const be_option *o, const char *what, const char *text,
                             char *canon, size_t size, fy_err *err)
{
    char expects[160];
    be_option_expects(o, expects, sizeof expects);
    switch (o->type) {
    case BE_OPTION_BOOL:
        if (!strcmp(text, "true") || !strcmp(text, "false")) {
            snprintf(canon, size, "%s", text);
            return FERRY_OK;
        }
        break;
    case BE_OPTION_INT: {
        const char *digits = text + (text[0] == '-');
        if (digits[0] < '0' || digits[0] > '9' || strspn(digits, "0123456789") != strlen(digits))
            break;
        errno = 0;
        long long v = strtoll(text, NULL, 10);
        if (errno || v < o->min || v > o->max)
            break;
        snprintf(canon, size, "%lld", v);
        return FERRY_OK;
    }
    case BE_OPTION_CHOICE:
        for (int i = 0; o->choices[i]; i++)
            if (!strcmp(o->choices[i], text)) {
                snprintf(canon, size, "%s", text);
                return FERRY_OK;
            }
        break;
    }
    return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s must be %s", what, expects);
}

ferry_status be_option_set(ferry_export_config *cfg, const fb_backend *be, const char *key,
                           int64_t value, fy_err *err)
{
    const be_option *o = be_option_find(be, key);
    if (!o)
        return fy_fail(err, FERRY_ERR_INTERNAL, "%s has no option '%s'", be->name, key);
    char text[FERRY_OPTION_VALUE_MAX];
    if (o->type == BE_OPTION_BOOL)
        snprintf(text, sizeof text, "%s", value ? "true" : "false");
    else if (o->type == BE_OPTION_INT)
        snprintf(text, sizeof text, "%lld", (long long)value);
    else
        snprintf(text, sizeof text, "%s", o->choices[value]);
    return be_option_store(cfg, o, text, err);
}

ferry_status be_option_store(ferry_export_config *cfg, const be_option *o, const char *text,
                             fy_err *err)
{
    if (cfg->n_options < 0 || cfg->n_options > FERRY_MAX_FORMAT_OPTIONS)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "export config: n_options %d is outside "
                       "[0, %d]", cfg->n_options, FERRY_MAX_FORMAT_OPTIONS);
    for (int i = 0; i < cfg->n_options; i++)
        if (!strncmp(cfg->options[i].key, o->key, sizeof cfg->options[i].key)) {
            snprintf(cfg->options[i].value, sizeof cfg->options[i].value, "%s", text);
            return FERRY_OK;
        }
    if (cfg->n_options == FERRY_MAX_FORMAT_OPTIONS)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "more than %d format options",
                       FERRY_MAX_FORMAT_OPTIONS);
    ferry_format_option *slot = &cfg->options[cfg->n_options++];
    snprintf(slot->key, sizeof slot->key, "%s", o->key);
    snprintf(slot->value, sizeof slot->value, "%s", text);
    return FERRY_OK;
}

/* "an ONNX", "a pt2": the format as messages name it. */
static const char *article(const char *title)
{
    return strchr("AEIOUaeiou", title[0]) ? "an" : "a";
}

ferry_status be_options_check(const ferry_export_config *cfg, const fb_backend *be, fy_err *err)
{
    if (cfg->n_options < 0 || cfg->n_options > FERRY_MAX_FORMAT_OPTIONS)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "export config: n_options %d is outside "
                       "[0, %d]", cfg->n_options, FERRY_MAX_FORMAT_OPTIONS);
    for (int i = 0; i < cfg->n_options; i++) {
        const ferry_format_option *set = &cfg->options[i];
        if (!memchr(set->key, '\0', sizeof set->key) ||
            !memchr(set->value, '\0', sizeof set->value))
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "export config: option %d is not a "
                           "NUL-terminated key and value", i);
        for (int k = 0; k < i; k++)
            if (!strcmp(cfg->options[k].key, set->key))
                return fy_fail(err, FERRY_ERR_INVALID_ARG, "export config: option '%s' is set "
                               "twice (ferry_export_config_set_option replaces a value)",
                               set->key);
        const be_option *own = be_option_find(be, set->key);
        char canon[FERRY_OPTION_VALUE_MAX], what[96];
        snprintf(what, sizeof what, "'%s'", set->key);
        if (own && strcmp(own->key, set->key) != 0)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "export config: option '%s' is stored "
                           "under its alias; its key is '%s' (ferry_export_config_set_option "
                           "takes either)", set->key, own->key);
        if (own) {
            if (be_option_parse(own, what, set->value, canon, sizeof canon, err) != FERRY_OK)
                return err->status;
            continue;
        }
        const fb_backend *other = NULL;
        const be_option *theirs = NULL;
        for (int k = 0; (other = fb_at(k)) && !(theirs = be_option_find(other, set->key)); k++)
            ;
        if (!theirs)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "'%s' is not an option of any format "
                           "(set by ferry_export_config_set_option, which checks the key)",
                           set->key);
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "'%s' (the flag %s) is %s %s option: it "
                       "applies to --format %s, not %s", theirs->key, theirs->flag,
                       article(other->title), other->title, other->name, be->name);
    }
    return FERRY_OK;
}

void be_options_to_json(const ferry_export_config *cfg, const fb_backend *be, bool always,
                        cJSON *o)
{
    for (int i = 0; be && i < be->n_options; i++) {
        const be_option *opt = &be->options[i];
        const char *text = be_option_text(cfg, be, opt->key);
        if (opt->always_recorded != always || (!always && !strcmp(text, opt->def)))
            continue;
        int64_t v = value_of(opt, text);
        if (opt->type == BE_OPTION_BOOL)
            cJSON_AddBoolToObject(o, opt->key, (int)v);
        else if (opt->type == BE_OPTION_INT)
            cJSON_AddNumberToObject(o, opt->key, (double)v);
        else
            cJSON_AddStringToObject(o, opt->key, text);
    }
}
