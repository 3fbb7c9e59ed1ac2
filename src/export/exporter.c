/* exporter.c — ferry_export: config -> symbolic inputs -> architecture graph -> checks ->
 * backend lowering, kept in memory (weights still lazy) until saved. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/onnx/onnx_writer.h"
#include "export/internal.h"
#include "generate/generation.h"

#define EXAMPLE_DIM_MAX ((int64_t)1 << 24)

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
        /* Traced extents size nothing ferry allocates, but they are multiplied in shape
         * inference and printed in metadata: keep them far from overflow. */
        if (examples[a] <= 0 || examples[a] > EXAMPLE_DIM_MAX)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "example shape: %s %lld is out of range "
                           "(1 to %lld)", auto_names[a], (long long)examples[a],
                           (long long)EXAMPLE_DIM_MAX);
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

/* `first` (a line, may be empty), then the checkpoint tensors no graph consumed: never silently
 * ignored. */
static char *export_warnings(const char *first, const ckpt *ck)
{
    size_t len = strlen(first), cap = len + 1;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    memcpy(out, first, cap);
    for (size_t i = 0; i < ck->n_tensors; i++) {
        if (ck->used[i])
            continue;
        char name[ST_QUOTE_MAX];
        st_quote_name(ck->by_name[i]->name, name, sizeof name);
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

/* The decomposed, not yet lowered components of one export. */
struct ferry_components {
    ferry_model *model;
    ferry_export_config cfg;
    bool generation;
    ferry_generation_config gen;
    int n;
    struct {
        const char *name, *role;
        decoder_io io;
        g_graph *graph;      /* semantic graph, checked */
    } items[GEN_MAX_COMPONENTS];
    char *description;
    char *warnings;
};

void ferry_components_free(ferry_components *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        g_free(c->items[i].graph);
    free(c->description);
    free(c->warnings);
    free(c);
}

int ferry_components_count(const ferry_components *c)
{
    return c ? c->n : 0;
}

const char *ferry_components_name(const ferry_components *c, int i)
{
    return c && i >= 0 && i < c->n ? c->items[i].name : NULL;
}

const char *ferry_components_role(const ferry_components *c, int i)
{
    return c && i >= 0 && i < c->n ? c->items[i].role : NULL;
}

/* Decomposes `model` into `n` components whose io the caller planned (plain: one "model"). */
static ferry_status decompose(ferry_model *m, const ferry_export_config *cfg_in,
                              const ferry_generation_config *gen, ferry_components **out)
{
    *out = NULL;
    if (!m || !m->family || !m->ck)
        return m ? fy_refail(&m->err, FERRY_ERR_INVALID_ARG, "model is not open")
                 : FERRY_ERR_INVALID_ARG;
    fy_err_clear(&m->err);
    fy_err *err = &m->err;
    decoder_hparams hp = {0};
    ferry_components *c = calloc(1, sizeof *c);
    if (!c)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    c->model = m;
    c->cfg = *cfg_in;
    if (c->cfg.opset == 0)
        c->cfg.opset = ONNX_DEFAULT_OPSET;
    if (validate_config(&c->cfg, err) != FERRY_OK)
        goto fail;
    char tie_warning[512];
    if (arch_hparams(m->family, &m->cfg, &hp, err) != FERRY_OK ||
        arch_resolve_tying(&hp, m->ck, tie_warning, sizeof tie_warning, err) != FERRY_OK)
        goto fail;
    g_symtab syms[GEN_MAX_COMPONENTS] = {{.n = 0}};
    g_dim axes[2];
    if (resolve_axes(&c->cfg, &syms[0], axes, err) != FERRY_OK)
        goto fail;
    for (int i = 1; i < GEN_MAX_COMPONENTS; i++)
        syms[i] = syms[0];
    if (gen) {
        gen_component plan[GEN_MAX_COMPONENTS];
        if (!m->family->generation) {
            fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: generation export is not supported for "
                    "this architecture yet", m->family->architecture);
            goto fail;
        }
        if (gen_plan(&c->cfg, gen, axes[0], axes[1], syms, plan, &c->n, err) != FERRY_OK)
            goto fail;
        c->generation = true;
        c->gen = *gen;
        for (int i = 0; i < c->n; i++) {
            c->items[i].name = plan[i].name;
            c->items[i].role = plan[i].role;
            c->items[i].io = plan[i].io;
        }
    } else {
        c->n = 1;
        c->items[0].name = "model";
        c->items[0].role = "model";
        c->items[0].io = (decoder_io){.batch = axes[0], .sequence = axes[1], .cache = CACHE_NONE,
                                      .dtype = c->cfg.dtype};
    }
    memset(m->ck->used, 0, m->ck->n_tensors);
    for (int i = 0; i < c->n; i++) {
        g_graph *g = g_new();
        if (!g) {
            fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
            goto fail;
        }
        c->items[i].graph = g;
        g->syms = syms[i];
        if (arch_build_decoder(&hp, m->ck, &c->items[i].io, g, err) != FERRY_OK)
            goto fail;
        g_remove_dead(g);
        if (g_check(g, err) != FERRY_OK)
            goto fail;
    }
    c->warnings = export_warnings(tie_warning, m->ck);
    arch_hparams_free(&hp);
    *out = c;
    return FERRY_OK;
fail:
    arch_hparams_free(&hp);
    ferry_components_free(c);
    return err->status;
}

ferry_status ferry_decompose_for_generation(ferry_model *m, const ferry_export_config *cfg,
                                            const ferry_generation_config *gen,
                                            ferry_components **out)
{
    if (!gen) {
        *out = NULL;
        return m ? fy_refail(&m->err, FERRY_ERR_INVALID_ARG, "no generation config given")
                 : FERRY_ERR_INVALID_ARG;
    }
    return decompose(m, cfg, gen, out);
}

const char *ferry_components_describe(ferry_components *c, int i)
{
    if (!c || i < 0 || i >= c->n)
        return NULL;
    const g_graph *g = c->items[i].graph;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    int counts[G_OP_COUNT] = {0};
    for (size_t k = 0; k < g->n_nodes; k++)
        if (!g->nodes[k].dead)
            counts[g->nodes[k].op]++;
#define PUT(...)                                                              \
    do {                                                                      \
        int w_ = snprintf(buf + len, cap - len, __VA_ARGS__);                  \
        if (w_ > 0)                                                           \
            len = len + (size_t)w_ < cap ? len + (size_t)w_ : cap - 1;         \
    } while (0)
    PUT("component %s (role %s)\n", c->items[i].name, c->items[i].role);
    for (int pass = 0; pass < 2; pass++) {
        const int *ids = pass ? g->outputs : g->inputs;
        size_t n = pass ? g->n_outputs : g->n_inputs;
        PUT("%s:\n", pass ? "outputs" : "inputs");
        for (size_t k = 0; k < n && len + 256 < cap; k++) {
            const g_value *v = &g->values[ids[k]];
            PUT("  %s %s [", v->name, ferry_dtype_name(v->dtype));
            for (int d = 0; d < v->shape.rank; d++) {
                char dim[128];
                g_dim_print(v->shape.d[d], &g->syms, dim, sizeof dim);
                PUT("%s%s", d ? ", " : "", dim);
            }
            PUT("]\n");
        }
    }
    PUT("nodes:");
    for (int op = 0; op < G_OP_COUNT; op++)
        if (counts[op])
            PUT(" %s=%d", g_op_name((g_op)op), counts[op]);
    PUT("\n");
#undef PUT
    free(c->description);
    c->description = buf;
    return buf;
}

ferry_status ferry_components_export(ferry_components *c, const char *const *names, int n_names,
                                     ferry_exported **out)
{
    *out = NULL;
    if (!c)
        return FERRY_ERR_INVALID_ARG;
    ferry_model *m = c->model;
    fy_err_clear(&m->err);
    fy_err *err = &m->err;
    ferry_exported *e = calloc(1, sizeof *e);
    if (!e)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    e->model = m;
    e->cfg = c->cfg;
    e->generation = c->generation;
    e->gen = c->gen;
    if (c->generation) {
        e->cfg.for_generation = 1;
        e->cfg.generation = c->gen;
    }
    for (int k = 0; k < n_names; k++) {
        bool found = false;
        for (int i = 0; i < c->n; i++)
            found |= strcmp(names[k], c->items[i].name) == 0;
        if (!found) {
            fy_fail(err, FERRY_ERR_INVALID_ARG, "no component named '%s'", names[k]);
            goto fail;
        }
    }
    for (int i = 0; i < c->n; i++) {
        bool wanted = n_names == 0;
        for (int k = 0; k < n_names; k++)
            wanted |= strcmp(names[k], c->items[i].name) == 0;
        if (!wanted)
            continue;
        exp_component *ec = &e->comps[e->n_components++];
        char file[128];
        snprintf(file, sizeof file, "%s.onnx", c->items[i].name);
        ec->name = dup(c->items[i].name);
        ec->role = dup(c->items[i].role);
        ec->file = dup(file);
        ec->data_file = dup("model.onnx.data");
        ec->cache = c->items[i].io.cache;
        if (!ec->name || !ec->role || !ec->file || !ec->data_file) {
            fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
            goto fail;
        }
        if (!(ec->graph = onnx_lower(c->items[i].graph, err)))
            goto fail;
    }
    e->warnings = dup(c->warnings);
    if (!(e->manifest = manifest_build(e, err)) ||
        !(e->manifest_text = cJSON_Print(e->manifest))) {
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory building export.json");
        goto fail;
    }
    *out = e;
    return FERRY_OK;
fail:
    ferry_exported_free(e);
    return err->status;
}

ferry_status ferry_export_for_generation(ferry_model *m, const ferry_export_config *cfg,
                                         const ferry_generation_config *gen, ferry_exported **out)
{
    ferry_components *c = NULL;
    *out = NULL;
    ferry_status st = ferry_decompose_for_generation(m, cfg, gen, &c);
    if (st == FERRY_OK)
        st = ferry_components_export(c, NULL, 0, out);
    ferry_components_free(c);
    return st;
}

ferry_status ferry_export(ferry_model *m, const ferry_export_config *cfg, ferry_exported **out)
{
    ferry_components *c = NULL;
    *out = NULL;
    ferry_status st = decompose(m, cfg, cfg->for_generation ? &cfg->generation : NULL, &c);
    if (st == FERRY_OK)
        st = ferry_components_export(c, NULL, 0, out);
    ferry_components_free(c);
    return st;
}
