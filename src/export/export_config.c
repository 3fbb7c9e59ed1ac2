/* export_config.c — ferry_export_config: defaults, the inputs a graph takes, and the CLI's
 * --dim, --example-shape and --inputs syntax (JSON recipes: export_recipe.c). */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/internal.h"
#include "util/json.h"
#include "util/text.h"

void ferry_export_config_init(ferry_export_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->format = FERRY_FORMAT_ONNX;
    cfg->dtype = FERRY_F32;
    ferry_generation_config_init(&cfg->generation);
    cfg->quantizer.accuracy_level = -1;
    cfg->quantizer.lm_head = 1;
}

size_t ferry_export_config_size(void)
{
    return sizeof(ferry_export_config);
}

/* The names of the FERRY_INPUT_* bits, bit i at index i, in the order a graph takes them. */
static const char *const INPUT_NAMES[] = {"input_ids", "attention_mask", "position_ids",
                                          "token_type_ids"};
#define N_INPUT_NAMES (sizeof INPUT_NAMES / sizeof *INPUT_NAMES)

unsigned exp_input_bit(const char *name)
{
    for (size_t i = 0; i < N_INPUT_NAMES; i++)
        if (!strcmp(name, INPUT_NAMES[i]))
            return 1u << i;
    return 0;
}

unsigned exp_plain_inputs(const ferry_export_config *cfg)
{
    return cfg->inputs ? cfg->inputs : FERRY_INPUT_IDS | FERRY_INPUT_ATTENTION_MASK;
}

ferry_status exp_check_model_inputs(const model_arch *arch, unsigned takes, fy_err *err)
{
    for (size_t i = 0; i < N_INPUT_NAMES; i++) {
        if (!(takes & (1u << i)))
            continue;
        bool has = false;
        for (int k = 0; k < arch->n_inputs && !has; k++)
            has = strcmp(arch->inputs[k].name, INPUT_NAMES[i]) == 0;
        if (has)
            continue;
        char list[256];
        exp_input_list(arch, ~0u, list, sizeof list);
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "inputs: %s has no input %s (its inputs: "
                       "%s)", arch->architecture, INPUT_NAMES[i], list);
    }
    return FERRY_OK;
}

ferry_status exp_check_inputs(unsigned inputs, fy_err *err)
{
    if (inputs == 0)
        return FERRY_OK;
    if (inputs & ~((1u << N_INPUT_NAMES) - 1))
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "export config: inputs 0x%x has bits that "
                       "name no input (FERRY_INPUT_*: %s)", inputs, EXP_INPUT_LIST);
    if (!(inputs & FERRY_INPUT_IDS))
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "export config: inputs leave out input_ids, "
                       "which every graph takes");
    return FERRY_OK;
}


/* Messages echo names and keys from the recipe; quoting them (control bytes and invalid UTF-8
 * as \xNN) keeps a hostile recipe from breaking the one-line error. */
ferry_status exp_say(char *buf, size_t size, ferry_status st, const char *fmt, ...)
{
    if (buf && size) {
        char raw[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(raw, sizeof raw, fmt, ap);
        va_end(ap);
        if (size >= 8)
            text_quote(raw, buf, size);
        else
            buf[0] = '\0';
    }
    return st;
}

static bool valid_name(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '.')
            return false;
    return true;
}

ferry_status exp_add_dim(ferry_export_config *cfg, const char *input, long long axis,
                            const char *symbol, long long min, long long max, char *eb, size_t es)
{
    if (cfg->n_dims >= FERRY_MAX_DIM_SPECS)
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "too many dynamic dims (at most %d)",
                       FERRY_MAX_DIM_SPECS);
    if (strlen(input) >= FERRY_NAME_MAX || !valid_name(input))
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "dynamic dim: bad input name '%s'", input);
    if (strlen(symbol) >= FERRY_NAME_MAX || !valid_name(symbol))
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "dynamic dim: bad symbol name '%s'", symbol);
    if (axis < 0 || axis > 7)
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                       "dynamic dim %s: axis %lld out of range", input,
                       axis);
    if (min < 0 || max < 0 || (max != 0 && max < min))
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "dynamic dim %s:%lld: need 0 <= min <= max",
                       input, axis);
    /* The bounds are recorded in export.json as JSON numbers and must read back exactly. */
    if (min > FERRY_DIM_BOUND_MAX || max > FERRY_DIM_BOUND_MAX)
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "dynamic dim %s:%lld: min %lld and max %lld "
                       "must be at most %lld = 2^40 (max 0 = unbounded)", input, axis, min, max,
                       (long long)FERRY_DIM_BOUND_MAX);
    for (int i = 0; i < cfg->n_dims; i++)
        if (strcmp(cfg->dims[i].input, input) == 0 && cfg->dims[i].axis == axis)
            return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "dynamic dim %s:%lld given twice", input,
                           axis);
    ferry_dim_spec *d = &cfg->dims[cfg->n_dims++];
    snprintf(d->input, sizeof d->input, "%s", input);
    snprintf(d->symbol, sizeof d->symbol, "%s", symbol);
    d->axis = (int)axis;
    d->min = min;
    d->max = max;
    return FERRY_OK;
}

static const char *const DIM_FORM =
    "expected NAME:AXIS=SYMBOL[:MIN:MAX], e.g. input_ids:1=sequence:1:2048";

/* Copies the text from *p up to `stop` (or the end) into buf; false when it does not fit. */
static bool take_field(const char **p, char stop, char *buf, size_t size)
{
    size_t n = strcspn(*p, (char[]){stop, '\0'});
    if (n >= size)
        return false;
    memcpy(buf, *p, n);
    buf[n] = '\0';
    *p += n;
    return true;
}

/* A decimal integer at *p: an optional '-' and digits, nothing else (strtoll alone would take
 * spaces and '+', and sscanf's %lld saturates silently). The digits are copied into `text` for
 * messages. 0 on success, else -1 (no number) or ERANGE (outside long long). */
static int take_int(const char **p, long long *out, char *text, size_t size)
{
    const char *s = *p;
    size_t n = (*s == '-') + strspn(s + (*s == '-'), "0123456789");
    if (n == (size_t)(*s == '-'))
        return -1;
    snprintf(text, size, "%.*s", (int)(n < size ? n : size - 1), s);
    char *end;
    errno = 0;
    *out = strtoll(s, &end, 10);
    if (errno == ERANGE)
        return ERANGE;
    *p = end;
    return 0;
}

/* One number of a --dim spec at *p, followed by `next` ('\0': the end). */
static ferry_status dim_number(const char *spec, const char **p, const char *what, char next,
                               long long *out, char *eb, size_t es)
{
    char num[32];
    int r = take_int(p, out, num, sizeof num);
    if (r == ERANGE)
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "--dim '%s': %s %s%s is out of range (%s)",
                       spec, what, num, strlen(num) == sizeof num - 1 ? "..." : "",
                       what[0] == 'A' ? "0 to 7" : "at most 1099511627776 = 2^40");
    if (r != 0 || **p != next)
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "--dim '%s': %s", spec,
                       what[0] == 'A' ? DIM_FORM : "expected ':MIN:MAX' after the symbol, two "
                       "integers");
    if (next)
        (*p)++;
    return FERRY_OK;
}

ferry_status ferry_export_config_add_dim(ferry_export_config *cfg, const char *spec, char *eb,
                                         size_t es)
{
    char input[FERRY_NAME_MAX], symbol[FERRY_NAME_MAX];
    long long axis, min = 1, max = 0;
    const char *p = spec;
    ferry_status st;

    if (!take_field(&p, ':', input, sizeof input) || *p++ != ':')
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "--dim '%s': %s", spec, DIM_FORM);
    if ((st = dim_number(spec, &p, "AXIS", '=', &axis, eb, es)) != FERRY_OK)
        return st;
    if (!take_field(&p, ':', symbol, sizeof symbol) || !*symbol)
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "--dim '%s': %s", spec, DIM_FORM);
    if (*p == ':') {
        p++;
        if ((st = dim_number(spec, &p, "MIN", ':', &min, eb, es)) != FERRY_OK ||
            (st = dim_number(spec, &p, "MAX", '\0', &max, eb, es)) != FERRY_OK)
            return st;
    }
    return exp_add_dim(cfg, input, axis, symbol, min, max, eb, es);
}

/* Sets input `input`'s example shape (replacing one it had). */
ferry_status exp_set_example(ferry_export_config *cfg, const char *input, int rank,
                                const int64_t *dims, char *eb, size_t es)
{
    if (strlen(input) >= FERRY_NAME_MAX || !valid_name(input))
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "example shape: bad input name '%s'", input);
    if (rank < 1 || rank > FERRY_MAX_EXAMPLE_RANK)
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "example shape of %s: %d extents (1 to %d)",
                       input, rank, FERRY_MAX_EXAMPLE_RANK);
    int at = 0;
    while (at < cfg->n_examples && strcmp(cfg->examples[at].input, input) != 0)
        at++;
    if (at == cfg->n_examples && cfg->n_examples >= FERRY_MAX_EXAMPLES)
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "too many example shapes (at most %d inputs)",
                       FERRY_MAX_EXAMPLES);
    ferry_example_shape *x = &cfg->examples[at];
    snprintf(x->input, sizeof x->input, "%s", input);
    x->rank = rank;
    memcpy(x->dims, dims, (size_t)rank * sizeof *dims);
    if (at == cfg->n_examples)
        cfg->n_examples++;
    return FERRY_OK;
}

static const char *const EXAMPLE_FORM =
    "expected NAME=D0xD1..., each extent a positive integer, e.g. input_ids=1x8";

ferry_status ferry_export_config_add_example(ferry_export_config *cfg, const char *spec,
                                             char *eb, size_t es)
{
    char input[FERRY_NAME_MAX];
    const char *p = spec;
    int64_t dims[FERRY_MAX_EXAMPLE_RANK];
    int rank = 0;
    if (!cfg || !spec)
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "no config or example shape given");
    if (!take_field(&p, '=', input, sizeof input) || *p++ != '=' || !*input)
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "example shape '%s': %s", spec, EXAMPLE_FORM);
    for (;;) {
        /* strtoll, not sscanf's %lld, which saturates silently: 10^20 became 2^63 - 1 */
        size_t digits = strspn(p, "0123456789");
        char *end;
        errno = 0;
        long long v = digits ? strtoll(p, &end, 10) : 0;
        if (digits && errno == ERANGE)
            return exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                           "example shape '%s': %.*s is out of range",
                           spec, (int)digits, p);
        if (!digits || v <= 0 || rank == FERRY_MAX_EXAMPLE_RANK)
            return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "example shape '%s': %s", spec,
                           EXAMPLE_FORM);
        dims[rank++] = v;
        p = end;
        if (*p == '\0')
            break;
        if (*p++ != 'x')
            return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "example shape '%s': %s", spec,
                           EXAMPLE_FORM);
    }
    return exp_set_example(cfg, input, rank, dims, eb, es);
}

/* One input name (`len` bytes at `name`) into *bits; `what` names the option in messages. */
ferry_status exp_add_input(unsigned *bits, const char *name, size_t len, const char *what,
                              char *eb, size_t es)
{
    char one[FERRY_NAME_MAX];
    if (len == 0)
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG,
                       "%s: an empty input name (give names from %s, "
                       "comma-separated)", what, EXP_INPUT_LIST);
    snprintf(one, sizeof one, "%.*s", (int)(len < sizeof one ? len : sizeof one - 1), name);
    unsigned bit = len < sizeof one ? exp_input_bit(one) : 0;
    if (!bit)
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "%s: '%.*s' is not an input ferry's graphs "
                       "take (%s)", what, (int)len, name, EXP_INPUT_LIST);
    if (*bits & bit)
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "%s: '%s' is given twice", what, one);
    *bits |= bit;
    return FERRY_OK;
}

ferry_status exp_inputs_done(unsigned bits, const char *what, char *eb, size_t es)
{
    if (!(bits & FERRY_INPUT_IDS))
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "%s: input_ids is missing: every graph takes "
                       "it, beside those of attention_mask and position_ids its calls pass", what);
    return FERRY_OK;
}

ferry_status ferry_export_config_set_inputs(ferry_export_config *cfg, const char *names,
                                            char *eb, size_t es)
{
    if (!cfg || !names)
        return exp_say(eb, es, FERRY_ERR_INVALID_ARG, "--inputs: no %s given",
                       cfg ? "names" : "export config");
    char what[96];
    snprintf(what, sizeof what, "--inputs '%.64s%s'", names, strlen(names) > 64 ? "..." : "");
    unsigned bits = 0;
    for (const char *p = names;; p++) {
        size_t n = strcspn(p, ",");
        ferry_status st = exp_add_input(&bits, p, n, what, eb, es);
        if (st != FERRY_OK)
            return st;
        p += n;
        if (!*p)
            break;
    }
    ferry_status st = exp_inputs_done(bits, what, eb, es);
    if (st == FERRY_OK)
        cfg->inputs = bits;
    return st;
}

const char *exp_input_name(unsigned i)
{
    return i < N_INPUT_NAMES ? INPUT_NAMES[i] : NULL;
}
