/* axes.c — the symbolic (or pinned) extents of a model's logical axes, from the export config:
 * `dynamic` names them batch and sequence; explicit dynamic dims name an input the model
 * declares and one of its axes, and inputs sharing a logical axis must agree; example shapes
 * give the traced extents. */
#include <stdio.h>
#include <string.h>

#include "export/internal.h"

#define EXAMPLE_DIM_MAX ((int64_t)1 << 24)
#define EXAMPLE_BATCH_DEFAULT 1
#define EXAMPLE_SEQUENCE_DEFAULT 8

static const char *const LOGICAL[2] = {"batch", "sequence"};
static const char *const RESERVED[] = {"past_sequence", "max_cache_len"};

static int logical_index(const char *axis)
{
    for (int i = 0; i < 2; i++)
        if (strcmp(axis, LOGICAL[i]) == 0)
            return i;
    return -1;
}

/* Whether the export's graphs take the model's input `in`: an input ferry has no bit for is
 * the model's own, always taken. */
static bool taken(const model_input *in, unsigned takes)
{
    unsigned bit = exp_input_bit(in->name);
    return !bit || (takes & bit);
}

void exp_input_list(const model_arch *arch, unsigned takes, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < arch->n_inputs && len < size; i++)
        if (taken(&arch->inputs[i], takes))
            len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? ", " : "",
                                    arch->inputs[i].name);
}

ferry_status exp_resolve_axes(ferry_export_config *cfg, const model_arch *arch, unsigned takes,
                              int64_t sequence_cap, g_symtab *syms, g_dim out[2], fy_err *err)
{
    const int64_t given[2] = {cfg->example_batch, cfg->example_sequence};
    int64_t examples[2] = {given[0] ? given[0] : EXAMPLE_BATCH_DEFAULT,
                           given[1] ? given[1] : EXAMPLE_SEQUENCE_DEFAULT};
    const ferry_dim_spec *chosen[2] = {NULL, NULL};
    char names[256];
    exp_input_list(arch, takes, names, sizeof names);
    for (int i = 0; i < cfg->n_dims; i++) {
        const ferry_dim_spec *d = &cfg->dims[i];
        const model_input *in = NULL;
        for (int k = 0; k < arch->n_inputs && !in; k++)
            if (strcmp(d->input, arch->inputs[k].name) == 0)
                in = &arch->inputs[k];
        if (!in)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dim for '%s': the model has no "
                           "such input (inputs: %s)", d->input, names);
        /* a dim on an input the graph does not take would say nothing of it */
        if (!taken(in, takes))
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dim for '%s': this export "
                           "takes no %s (inputs: %s); name it in --inputs (the recipe's "
                           "input_names) to make it an input", d->input, d->input, names);
        if (d->axis < 0 || d->axis >= in->n_axes)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dim %s:%d: '%s' has %d axes "
                           "(0 = %s, 1 = %s)", d->input, d->axis, d->input, in->n_axes,
                           in->axes[0], in->axes[1]);
        int a = logical_index(in->axes[d->axis]);
        if (a < 0)
            return fy_fail(err, FERRY_ERR_UNSUPPORTED, "dynamic dim %s:%d: axis '%s' cannot be "
                           "made dynamic", d->input, d->axis, in->axes[d->axis]);
        const ferry_dim_spec *prev = chosen[a];
        if (prev && (strcmp(prev->symbol, d->symbol) != 0 || prev->min != d->min ||
                     prev->max != d->max))
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dims %s:%d and %s:%d differ, but "
                           "%s share one [batch, sequence]", prev->input, prev->axis, d->input,
                           d->axis, names);
        chosen[a] = d;
    }
    /* the default prompt fits a static cache shorter than it (the caller,
     * who gave no example, was told the example did not fit); with static shapes it is the only
     * prompt the export takes, and leaves a slot for decode's token (a prompt
     * that filled the cache made an export whose every decode call failed) */
    int64_t cap = sequence_cap;
    if (cap > 1 && !chosen[1] && !cfg->dynamic)
        cap--;
    if (!given[1] && cap > 0 && examples[1] > cap)
        examples[1] = cap;
    const char *names_of[2];
    for (int a = 0; a < 2; a++) {
        names_of[a] = chosen[a] ? chosen[a]->symbol : LOGICAL[a];
        /* The cache axes of generation exports have these names: sharing one would make the
         * query length and the cache length one dim. */
        for (size_t r = 0; r < sizeof RESERVED / sizeof RESERVED[0]; r++)
            if ((chosen[a] || cfg->dynamic) && strcmp(names_of[a], RESERVED[r]) == 0)
                return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dims: the symbol name '%s' "
                               "is ferry's own (for the cache); pick another", names_of[a]);
    }
    if ((chosen[0] || cfg->dynamic) && (chosen[1] || cfg->dynamic) &&
        strcmp(names_of[0], names_of[1]) == 0)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dims: batch and sequence axes cannot "
                       "share the symbol '%s'", names_of[0]);
    for (int a = 0; a < 2; a++) {
        const ferry_dim_spec *d = chosen[a];
        /* The struct is public: a caller may fill dims without ferry_export_config_add_dim. */
        if (d && (d->min < 0 || d->min > FERRY_DIM_BOUND_MAX || d->max < 0 ||
                  d->max > FERRY_DIM_BOUND_MAX || (d->max > 0 && d->max < d->min)))
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dim %s:%d: min %lld and max %lld "
                           "must satisfy 0 <= min <= max <= %lld (max 0 = unbounded)", d->input,
                           d->axis, (long long)d->min, (long long)d->max,
                           (long long)FERRY_DIM_BOUND_MAX);
        /* The default example outside the dim's range is traced at its min instead; one the
         * caller gave is refused (it was moved without a word). */
        if (d && (examples[a] < d->min || (d->max > 0 && examples[a] > d->max))) {
            if (given[a]) {
                char max[32] = "unbounded";
                if (d->max > 0)
                    snprintf(max, sizeof max, "%lld", (long long)d->max);
                return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shape: %s %lld is outside "
                               "dynamic dim %s:%d's range (min %lld, max %s): give an example "
                               "inside it, or none (the range's min is traced then)", LOGICAL[a],
                               (long long)examples[a], d->input, d->axis, (long long)d->min,
                               max);
            }
            examples[a] = d->min > 0 ? d->min : 1;
        }
        /* Traced extents size nothing ferry allocates, but they are multiplied in shape
         * inference and printed in metadata: keep them far from overflow. Checked after the
         * move above, which a min of 2^63 - 1 used to take past this cap. */
        if (examples[a] <= 0 || examples[a] > EXAMPLE_DIM_MAX) {
            if (d && examples[a] == d->min && d->min > EXAMPLE_DIM_MAX)
                return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dim %s:%d: min %lld is "
                               "above %lld, the largest %s ferry traces an export with",
                               d->input, d->axis, (long long)d->min,
                               (long long)EXAMPLE_DIM_MAX, LOGICAL[a]);
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shape: %s %lld is out of range "
                           "(1 to %lld)", LOGICAL[a], (long long)examples[a],
                           (long long)EXAMPLE_DIM_MAX);
        }
        if (d || cfg->dynamic) {
            const char *name = d ? d->symbol : LOGICAL[a];
            int64_t min = d ? d->min : 1, max = d ? d->max : 0;
            int s = g_symtab_add(syms, name, min, max, examples[a]);
            if (s < 0)
                return fy_fail(err, FERRY_ERR_INVALID_ARG, "too many symbols");
            out[a] = g_dim_sym(s);
        } else {
            out[a] = g_dim_const(examples[a]);
        }
    }
    /* what was traced, which the export's recorded recipe says */
    cfg->example_batch = examples[0];
    cfg->example_sequence = examples[1];
    return FERRY_OK;
}

ferry_status exp_bound_sequence(const model_arch *arch, const void *hparams, g_dim sequence,
                                g_symtab *syms, fy_err *err)
{
    int64_t cap = arch->max_sequence ? arch->max_sequence(hparams) : 0, extent;
    if (cap <= 0)
        return FERRY_OK;
    if (g_dim_is_const(sequence, &extent)) {
        if (extent > cap)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shape: sequence %lld is longer "
                           "than %s takes (%lld positions, from max_position_embeddings)",
                           (long long)extent, arch->architecture, (long long)cap);
        return FERRY_OK;
    }
    if (sequence.n != 1 || sequence.c != 0 || sequence.t[0].coef != 1)
        return FERRY_OK;
    g_sym *s = &syms->s[sequence.t[0].sym];
    if (s->max > cap || s->min > cap || s->example > cap)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dim '%s': %s %lld is past the "
                       "%lld positions %s takes (max_position_embeddings)", s->name,
                       s->example > cap && s->max <= cap ? "example" : "max",
                       (long long)(s->example > cap && s->max <= cap ? s->example : s->max),
                       (long long)cap, arch->architecture);
    if (s->max == 0)
        s->max = cap;
    return FERRY_OK;
}
