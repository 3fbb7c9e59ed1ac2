/* axes.c — the symbolic (or pinned) extents of a model's logical axes, from the export config:
 * the axes are those the family declares (model_arch.axes: batch and sequence for token
 * models); `dynamic` makes each a symbol named after it; explicit dynamic dims name an input
 * the model declares and one of its axes, and inputs sharing a logical axis must agree; example
 * shapes, by input, give the traced extents. */
#include <stdio.h>
#include <string.h>

#include "export/internal.h"

#define EXAMPLE_DIM_MAX ((int64_t)1 << 24)
/* The most elements the traced extents of all axes may multiply to: shape inference multiplies
 * them (a mask is batch x sequence x sequence), which must stay far from 64 bits */
#define EXAMPLE_ELEMENTS_MAX ((int64_t)1 << 31)

static const char *const RESERVED[] = {"past_sequence", "max_cache_len"};

const model_axis *exp_model_axes(const model_arch *arch, int *n)
{
    *n = arch->axes ? arch->n_axes : 2;
    return arch->axes ? arch->axes : model_token_axes;
}

int exp_axis_index(const exp_axes *a, const char *name)
{
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->name[i], name) == 0)
            return i;
    return -1;
}

ferry_status exp_check_shapes_given(const ferry_export_config *cfg, fy_err *err)
{
    /* the struct is public: a caller may fill it by hand */
    if (cfg->n_dims < 0 || cfg->n_dims > FERRY_MAX_DIM_SPECS)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "n_dims %d is not in [0, %d]", cfg->n_dims,
                       FERRY_MAX_DIM_SPECS);
    for (int i = 0; i < cfg->n_dims; i++)
        if (!memchr(cfg->dims[i].input, '\0', sizeof cfg->dims[i].input) ||
            !memchr(cfg->dims[i].symbol, '\0', sizeof cfg->dims[i].symbol))
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dim %d: a name of %d bytes or "
                           "more (no NUL within FERRY_NAME_MAX)", i, FERRY_NAME_MAX);
    if (cfg->n_examples < 0 || cfg->n_examples > FERRY_MAX_EXAMPLES)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "n_examples %d is not in [0, %d]",
                       cfg->n_examples, FERRY_MAX_EXAMPLES);
    for (int i = 0; i < cfg->n_examples; i++) {
        const ferry_example_shape *x = &cfg->examples[i];
        if (!memchr(x->input, '\0', sizeof x->input))
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shape %d: an input name of %d "
                           "bytes or more (no NUL within FERRY_NAME_MAX)", i, FERRY_NAME_MAX);
        if (x->rank < 1 || x->rank > FERRY_MAX_EXAMPLE_RANK)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shape of %s: %d extents (1 to "
                           "%d)", x->input, x->rank, FERRY_MAX_EXAMPLE_RANK);
        for (int d = 0; d < x->rank; d++)
            if (x->dims[d] < 1 || x->dims[d] > FERRY_DIM_BOUND_MAX)
                return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shape of %s: extent %lld "
                               "is not in [1, %lld]", x->input, (long long)x->dims[d],
                               (long long)FERRY_DIM_BOUND_MAX);
    }
    if (cfg->example_batch < 0 || cfg->example_sequence < 0)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "example_batch %lld and example_sequence %lld "
                       "must not be negative (0: not given)", (long long)cfg->example_batch,
                       (long long)cfg->example_sequence);
    return FERRY_OK;
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

static const model_input *find_input(const model_arch *arch, const char *name)
{
    for (int k = 0; k < arch->n_inputs; k++)
        if (strcmp(name, arch->inputs[k].name) == 0)
            return &arch->inputs[k];
    return NULL;
}

/* "0 = batch, 1 = sequence": an input's axes, for messages */
static void axes_text(const model_input *in, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < in->n_axes && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%d = %s", i ? ", " : "", i,
                                in->axes[i]);
}

/* "[batch, sequence]": the axes the model's token inputs share, for messages */
static void shared_text(const exp_axes *a, char *buf, size_t size)
{
    size_t len = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < a->n && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? ", " : "", a->name[i]);
    if (len < size)
        snprintf(buf + len, size - len, "]");
}

/* The examples the config gives, per logical axis (0: none), from its example shapes by input
 * and the batch/sequence shortcuts; inputs the model lacks or the export does not take, a rank
 * that is not the input's, and two extents for one axis are refused. */
static ferry_status given_examples(const ferry_export_config *cfg, const model_arch *arch,
                                   unsigned takes, const exp_axes *a, int64_t *given,
                                   const char **from, fy_err *err)
{
    char names[256];
    exp_input_list(arch, takes, names, sizeof names);
    const struct {
        const char *axis;
        int64_t value;
    } shortcuts[2] = {{"batch", cfg->example_batch}, {"sequence", cfg->example_sequence}};
    for (int s = 0; s < 2; s++) {
        int k = exp_axis_index(a, shortcuts[s].axis);
        if (shortcuts[s].value <= 0)
            continue;
        if (k < 0)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shape: %s has no %s axis "
                           "(example_%s): give its inputs' example shapes", arch->architecture,
                           shortcuts[s].axis, shortcuts[s].axis);
        given[k] = shortcuts[s].value;
        from[k] = "example shape";
    }
    for (int i = 0; i < cfg->n_examples; i++) {
        const ferry_example_shape *x = &cfg->examples[i];
        const model_input *in = find_input(arch, x->input);
        if (!in)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shape for '%s': the model has "
                           "no such input (inputs: %s)", x->input, names);
        if (!taken(in, takes))
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shape for '%s': this export "
                           "takes no %s (inputs: %s)", x->input, x->input, names);
        if (x->rank != in->n_axes) {
            char axes[128];
            axes_text(in, axes, sizeof axes);
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shape for '%s': %d extents, but "
                           "it takes %d, one for each axis that can be symbolic (%s)",
                           x->input, x->rank, in->n_axes, axes);
        }
        for (int d = 0; d < x->rank; d++) {
            int k = exp_axis_index(a, in->axes[d]);
            if (k < 0)
                continue; /* an axis derived from others (a mask over cache and new tokens) */
            if (given[k] && given[k] != x->dims[d])
                return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shapes disagree on the %s "
                               "axis: %lld (%s) and %lld (%s)", a->name[k], (long long)given[k],
                               from[k], (long long)x->dims[d], x->input);
            given[k] = x->dims[d];
            from[k] = x->input;
        }
    }
    return FERRY_OK;
}

/* The explicit dynamic dim of each logical axis (NULL: none), checked against the inputs. */
static ferry_status chosen_dims(const ferry_export_config *cfg, const model_arch *arch,
                                unsigned takes, const exp_axes *a, const ferry_dim_spec **chosen,
                                fy_err *err)
{
    char names[256];
    exp_input_list(arch, takes, names, sizeof names);
    for (int i = 0; i < cfg->n_dims; i++) {
        const ferry_dim_spec *d = &cfg->dims[i];
        const model_input *in = find_input(arch, d->input);
        if (!in)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dim for '%s': the model has no "
                           "such input (inputs: %s)", d->input, names);
        /* a dim on an input the graph does not take would say nothing of it */
        if (!taken(in, takes))
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dim for '%s': this export "
                           "takes no %s (inputs: %s); name it in --inputs (the recipe's "
                           "input_names) to make it an input", d->input, d->input, names);
        if (d->axis < 0 || d->axis >= in->n_axes) {
            char axes[128];
            axes_text(in, axes, sizeof axes);
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dim %s:%d: '%s' has %d axes "
                           "(%s)", d->input, d->axis, d->input, in->n_axes, axes);
        }
        int k = exp_axis_index(a, in->axes[d->axis]);
        if (k < 0)
            return fy_fail(err, FERRY_ERR_UNSUPPORTED, "dynamic dim %s:%d: axis '%s' cannot be "
                           "made dynamic", d->input, d->axis, in->axes[d->axis]);
        const ferry_dim_spec *prev = chosen[k];
        if (prev && (strcmp(prev->symbol, d->symbol) != 0 || prev->min != d->min ||
                     prev->max != d->max)) {
            char shared[128];
            shared_text(a, shared, sizeof shared);
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dims %s:%d and %s:%d differ, "
                           "but %s share one %s", prev->input, prev->axis, d->input, d->axis,
                           names, shared);
        }
        chosen[k] = d;
    }
    return FERRY_OK;
}

/* Records what was traced in the export's recipe: the batch/sequence shortcuts, and the shapes
 * of the taken inputs (in the model's order) that name every axis between them. */
static void record_examples(ferry_export_config *cfg, const model_arch *arch, unsigned takes,
                            const exp_axes *a)
{
    int b = exp_axis_index(a, "batch"), s = exp_axis_index(a, "sequence");
    cfg->example_batch = b >= 0 ? a->example[b] : 0;
    cfg->example_sequence = s >= 0 ? a->example[s] : 0;
    bool covered[MODEL_MAX_AXES] = {false};
    cfg->n_examples = 0;
    for (int i = 0; i < arch->n_inputs && cfg->n_examples < FERRY_MAX_EXAMPLES; i++) {
        const model_input *in = &arch->inputs[i];
        bool adds = false;
        for (int d = 0; d < in->n_axes; d++) {
            int k = exp_axis_index(a, in->axes[d]);
            adds |= k >= 0 && !covered[k];
        }
        if (!taken(in, takes) || !adds || in->n_axes > FERRY_MAX_EXAMPLE_RANK)
            continue;
        ferry_example_shape *x = &cfg->examples[cfg->n_examples++];
        snprintf(x->input, sizeof x->input, "%s", in->name);
        x->rank = in->n_axes;
        for (int d = 0; d < in->n_axes; d++) {
            int k = exp_axis_index(a, in->axes[d]);
            x->dims[d] = k >= 0 ? a->example[k] : 1;
            if (k >= 0)
                covered[k] = true;
        }
    }
}

ferry_status exp_resolve_axes(ferry_export_config *cfg, const model_arch *arch, unsigned takes,
                              int64_t sequence_cap, int64_t model_max, int64_t prompt,
                              bool fixed_batch, g_symtab *syms, exp_axes *out, fy_err *err)
{
    int n_axes;
    const model_axis *axes = exp_model_axes(arch, &n_axes);
    if (n_axes < 1 || n_axes > MODEL_MAX_AXES)
        return fy_fail(err, FERRY_ERR_INTERNAL, "%s declares %d axes", arch->architecture,
                       n_axes);
    out->n = n_axes;
    for (int k = 0; k < n_axes; k++)
        out->name[k] = axes[k].name;
    int64_t given[MODEL_MAX_AXES] = {0};
    const char *from[MODEL_MAX_AXES] = {NULL};
    const ferry_dim_spec *chosen[MODEL_MAX_AXES] = {NULL};
    if (given_examples(cfg, arch, takes, out, given, from, err) != FERRY_OK ||
        chosen_dims(cfg, arch, takes, out, chosen, err) != FERRY_OK)
        return err->status;
    int seq = exp_axis_index(out, "sequence");
    for (int k = 0; k < n_axes; k++)
        out->example[k] = given[k] ? given[k] : axes[k].example;
    if (seq >= 0 && !given[seq] && prompt > 0)
        out->example[seq] = prompt;
    /* the default prompt fits a static cache shorter than it (the caller,
     * who gave no example, was told the example did not fit); with static shapes it is the only
     * prompt the export takes, and leaves a slot for decode's token (a prompt
     * that filled the cache made an export whose every decode call failed) */
    if (seq >= 0) {
        int64_t cap = sequence_cap;
        if (cap > 1 && !chosen[seq] && !cfg->dynamic)
            cap--;
        if (!given[seq] && cap > 0 && out->example[seq] > cap)
            out->example[seq] = cap;
        /* nor past the model's position table (an encoder of 6 positions was refused for an
         * example of 8 the caller never gave) */
        if (!given[seq] && model_max > 0 && out->example[seq] > model_max)
            out->example[seq] = model_max;
    }
    const char *symbol[MODEL_MAX_AXES];
    for (int k = 0; k < n_axes; k++) {
        symbol[k] = chosen[k] ? chosen[k]->symbol : axes[k].name;
        /* The cache axes of generation exports have these names: sharing one would make the
         * query length and the cache length one dim. */
        for (size_t r = 0; r < sizeof RESERVED / sizeof RESERVED[0]; r++)
            if ((chosen[k] || cfg->dynamic) && strcmp(symbol[k], RESERVED[r]) == 0)
                return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dims: the symbol name '%s' "
                               "is ferry's own (for the cache); pick another", symbol[k]);
        for (int j = 0; j < k; j++)
            if ((chosen[j] || cfg->dynamic) && (chosen[k] || cfg->dynamic) &&
                strcmp(symbol[j], symbol[k]) == 0)
                return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dims: %s and %s axes "
                               "cannot share the symbol '%s'", axes[j].name, axes[k].name,
                               symbol[k]);
    }
    for (int k = 0; k < n_axes; k++) {
        const ferry_dim_spec *d = chosen[k];
        int64_t *ex = &out->example[k];
        /* The struct is public: a caller may fill dims without ferry_export_config_add_dim. */
        if (d && (d->min < 0 || d->min > FERRY_DIM_BOUND_MAX || d->max < 0 ||
                  d->max > FERRY_DIM_BOUND_MAX || (d->max > 0 && d->max < d->min)))
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dim %s:%d: min %lld and max %lld "
                           "must satisfy 0 <= min <= max <= %lld (max 0 = unbounded)", d->input,
                           d->axis, (long long)d->min, (long long)d->max,
                           (long long)FERRY_DIM_BOUND_MAX);
        /* The default example outside the dim's range is traced at its min instead; one the
         * caller gave is refused (it was moved without a word). */
        if (d && (*ex < d->min || (d->max > 0 && *ex > d->max))) {
            if (given[k]) {
                char max[32] = "unbounded";
                if (d->max > 0)
                    snprintf(max, sizeof max, "%lld", (long long)d->max);
                return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shape: %s %lld is outside "
                               "dynamic dim %s:%d's range (min %lld, max %s): give an example "
                               "inside it, or none (the range's min is traced then)",
                               axes[k].name, (long long)*ex, d->input, d->axis,
                               (long long)d->min, max);
            }
            *ex = d->min > 0 ? d->min : 1;
        }
        /* Traced extents size nothing ferry allocates, but they are multiplied in shape
         * inference and printed in metadata: keep them far from overflow. Checked after the
         * move above, which a min of 2^63 - 1 used to take past this cap. */
        if (*ex <= 0 || *ex > EXAMPLE_DIM_MAX) {
            if (d && *ex == d->min && d->min > EXAMPLE_DIM_MAX)
                return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dim %s:%d: min %lld is "
                               "above %lld, the largest %s ferry traces an export with",
                               d->input, d->axis, (long long)d->min,
                               (long long)EXAMPLE_DIM_MAX, axes[k].name);
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shape: %s %lld is out of range "
                           "(1 to %lld)", axes[k].name, (long long)*ex,
                           (long long)EXAMPLE_DIM_MAX);
        }
        bool fixed = fixed_batch && !d && strcmp(axes[k].name, "batch") == 0;
        if (d || (cfg->dynamic && !fixed)) {
            int64_t min = d ? d->min : 1, max = d ? d->max : 0;
            int s = g_symtab_add(syms, symbol[k], min, max, *ex);
            if (s < 0)
                return fy_fail(err, FERRY_ERR_INVALID_ARG, "too many symbols");
            out->dim[k] = g_dim_sym(s);
        } else {
            out->dim[k] = g_dim_const(*ex);
        }
    }
    int64_t elements = 1;
    for (int k = 0; k < n_axes; k++) {
        if (out->example[k] > EXAMPLE_ELEMENTS_MAX / elements) {
            char list[256];
            size_t len = 0;
            for (int j = 0; j < n_axes && len < sizeof list; j++)
                len += (size_t)snprintf(list + len, sizeof list - len, "%s%s %lld", j ? " x " : "",
                                        axes[j].name, (long long)out->example[j]);
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shapes: %s is more than the %lld "
                           "elements ferry traces an export with", list,
                           (long long)EXAMPLE_ELEMENTS_MAX);
        }
        elements *= out->example[k];
    }
    /* what was traced, which the export's recorded recipe says */
    record_examples(cfg, arch, takes, out);
    return FERRY_OK;
}

ferry_status exp_bound_sequence(const model_arch *arch, const void *hparams, const exp_axes *a,
                                g_symtab *syms, fy_err *err)
{
    int64_t cap = arch->max_sequence ? arch->max_sequence(hparams) : 0, extent;
    int k = exp_axis_index(a, "sequence");
    if (cap <= 0 || k < 0)
        return FERRY_OK;
    g_dim sequence = a->dim[k];
    if (g_dim_is_const(sequence, &extent)) {
        if (extent > cap)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shape: sequence %lld is longer "
                           "than %s takes (%lld positions: its position embeddings)",
                           (long long)extent, arch->architecture, (long long)cap);
        return FERRY_OK;
    }
    if (sequence.n != 1 || sequence.c != 0 || sequence.t[0].coef != 1)
        return FERRY_OK;
    g_sym *s = &syms->s[sequence.t[0].sym];
    if (s->max > cap || s->min > cap || s->example > cap)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dim '%s': %s %lld is past the "
                       "%lld positions %s takes (its position embeddings)", s->name,
                       s->example > cap && s->max <= cap ? "example" : "max",
                       (long long)(s->example > cap && s->max <= cap ? s->example : s->max),
                       (long long)cap, arch->architecture);
    if (s->max == 0)
        s->max = cap;
    return FERRY_OK;
}
