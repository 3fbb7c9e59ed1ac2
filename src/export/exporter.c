/* exporter.c — ferry_export: config -> symbolic inputs -> architecture graph -> checks ->
 * backend lowering, kept in memory (weights still lazy) until saved. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/onnx/onnx_writer.h"
#include "export/internal.h"

static const char *const decoder_inputs[] = {"input_ids", "attention_mask", "position_ids"};

/* Works out the [batch, sequence] dims shared by the three inputs from dynamic / dims /
 * example shapes. */
static ferry_status resolve_axes(const ferry_export_config *cfg, g_symtab *syms, g_dim out[2],
                                 fy_err *err)
{
    const char *auto_names[2] = {"batch", "sequence"};
    int64_t examples[2] = {cfg->example_batch, cfg->example_sequence};
    const ferry_dim_spec *chosen[2] = {NULL, NULL};
    for (int i = 0; i < cfg->n_dims; i++) {
        const ferry_dim_spec *d = &cfg->dims[i];
        bool known = false;
        for (size_t k = 0; k < 3; k++)
            known |= strcmp(d->input, decoder_inputs[k]) == 0;
        if (!known)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dim for '%s': the model has no "
                           "such input (inputs: input_ids, attention_mask, position_ids)", d->input);
        if (d->axis > 1)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dim %s:%d: '%s' has 2 axes "
                           "(0 = batch, 1 = sequence)", d->input, d->axis, d->input);
        const ferry_dim_spec *prev = chosen[d->axis];
        if (prev && (strcmp(prev->symbol, d->symbol) != 0 || prev->min != d->min ||
                     prev->max != d->max))
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dims %s:%d and %s:%d differ, but "
                           "input_ids, attention_mask and position_ids share one [batch, sequence]",
                           prev->input, prev->axis, d->input, d->axis);
        chosen[d->axis] = d;
    }
    if (chosen[0] && chosen[1] && strcmp(chosen[0]->symbol, chosen[1]->symbol) == 0)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dims: batch and sequence axes cannot "
                       "share the symbol '%s'", chosen[0]->symbol);
    for (int a = 0; a < 2; a++) {
        if (examples[a] <= 0)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shape must be positive");
        const ferry_dim_spec *d = chosen[a];
        if (d && d->max > 0 && (examples[a] < d->min || examples[a] > d->max))
            examples[a] = d->min > 0 ? d->min : 1;
        if (d || cfg->dynamic) {
            const char *name = d ? d->symbol : auto_names[a];
            int64_t min = d ? d->min : 1, max = d ? d->max : 0;
            int s = g_symtab_add(syms, name, min, max, examples[a]);
            if (s < 0)
                return fy_fail(err, FERRY_ERR_INVALID_ARG, "too many symbols");
            out[a] = g_dim_sym(s);
        } else {
            out[a] = g_dim_const(examples[a]);
        }
    }
    return FERRY_OK;
}

static ferry_status validate_config(const ferry_export_config *cfg, fy_err *err)
{
    if (cfg->format != FERRY_FORMAT_ONNX)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "export format %d is not supported (onnx only)",
                       (int)cfg->format);
    if (cfg->dtype != FERRY_F32 && cfg->dtype != FERRY_F16 && cfg->dtype != FERRY_BF16)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "export dtype %s is not supported (fp32, fp16, "
                       "bf16)", ferry_dtype_name(cfg->dtype));
    if (cfg->opset != 0 && (cfg->opset < ONNX_MIN_OPSET || cfg->opset > ONNX_MAX_OPSET))
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "ONNX opset %d is not supported (supported: "
                       "%d to %d, default %d)", cfg->opset, ONNX_MIN_OPSET, ONNX_MAX_OPSET,
                       ONNX_DEFAULT_OPSET);
    return FERRY_OK;
}

/* Lists checkpoint tensors no graph consumed: never silently ignored. */
static char *unused_tensors(const ckpt *ck)
{
    size_t len = 0, cap = 0;
    char *out = NULL;
    for (size_t i = 0; i < ck->n_tensors; i++) {
        if (ck->used[i])
            continue;
        const char *name = ck->by_name[i]->name;
        size_t need = strlen(name) + 64;
        if (len + need >= cap) {
            cap = (len + need) * 2;
            char *n = realloc(out, cap);
            if (!n)
                break;
            out = n;
        }
        len += (size_t)snprintf(out + len, cap - len, "%scheckpoint tensor '%s' is not used by "
                                "the export", len ? "\n" : "", name);
    }
    return out;
}

static char *dup(const char *s)
{
    return s ? strdup(s) : NULL;
}

ferry_status ferry_export(ferry_model *m, const ferry_export_config *cfg_in, ferry_exported **out)
{
    *out = NULL;
    if (!m || !m->family || !m->ck)
        return m ? fy_refail(&m->err, FERRY_ERR_INVALID_ARG, "model is not open") : FERRY_ERR_INVALID_ARG;
    fy_err_clear(&m->err);
    ferry_export_config cfg = *cfg_in;
    if (cfg.opset == 0)
        cfg.opset = ONNX_DEFAULT_OPSET;
    fy_err *err = &m->err;
    decoder_hparams hp = {0};
    g_graph *g = NULL, *lowered = NULL;
    ferry_exported *e = NULL;
    if (validate_config(&cfg, err) != FERRY_OK)
        goto fail;
    if (arch_hparams(m->family, &m->cfg, &hp, err) != FERRY_OK)
        goto fail;
    if (!(g = g_new())) {
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        goto fail;
    }
    decoder_io io = {.dtype = cfg.dtype};
    g_dim axes[2];
    if (resolve_axes(&cfg, &g->syms, axes, err) != FERRY_OK)
        goto fail;
    io.batch = axes[0];
    io.sequence = axes[1];
    memset(m->ck->used, 0, m->ck->n_tensors);
    if (arch_build_decoder(&hp, m->ck, &io, g, err) != FERRY_OK)
        goto fail;
    g_remove_dead(g);
    if (g_check(g, err) != FERRY_OK)
        goto fail;
    if (!(lowered = onnx_lower(g, err)))
        goto fail;
    g_free(g);
    g = NULL;

    if (!(e = calloc(1, sizeof *e))) {
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        goto fail;
    }
    e->model = m;
    e->cfg = cfg;
    e->n_components = 1;
    exp_component *c = &e->comps[0];
    c->name = dup("model");
    c->role = dup("model");
    c->file = dup("model.onnx");
    c->data_file = dup("model.onnx.data");
    c->graph = lowered;
    lowered = NULL;
    e->warnings = unused_tensors(m->ck);
    if (!c->name || !c->role || !c->file || !c->data_file) {
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (!(e->manifest = manifest_build(e, err)) ||
        !(e->manifest_text = cJSON_Print(e->manifest))) {
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory building export.json");
        goto fail;
    }
    arch_hparams_free(&hp);
    *out = e;
    return FERRY_OK;
fail:
    arch_hparams_free(&hp);
    g_free(g);
    g_free(lowered);
    ferry_exported_free(e);
    return err->status;
}
