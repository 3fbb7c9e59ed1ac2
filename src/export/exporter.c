/* exporter.c — the export pipeline, format-agnostic: config -> symbolic axes -> component plan
 * -> the family's semantic graph per component (checked) -> the backend's target lowering
 * (checked) -> the backend's conventions and file layout, kept in memory (weights still lazy)
 * until saved. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/internal.h"
#include "quant/apply.h"
#include "util/strbuf.h"
#include "util/text.h"

#define GENERATION_INPUTS                                                                   \
    "inputs (--inputs, the recipe's input_names) apply to plain exports: generation "         \
    "components take input_ids, attention_mask and position_ids, as generate() feeds them"

static ferry_status validate_config(ferry_export_config *cfg, const fb_backend **backend,
                                    fy_err *err)
{
    *backend = fb_find(cfg->format);
    if (!*backend)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "export format %d is not supported "
                       "(supported: %s)", (int)cfg->format, fb_names());
    if (cfg->dtype != FERRY_F32 && cfg->dtype != FERRY_F16 && cfg->dtype != FERRY_BF16)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "export dtype %s is not supported (fp32, fp16, "
                       "bf16)", ferry_dtype_name(cfg->dtype));
    if (q_check_config(&cfg->quantizer, cfg->dtype, err) != FERRY_OK ||
        exp_check_inputs(cfg->inputs, err) != FERRY_OK ||
        exp_check_shapes_given(cfg, err) != FERRY_OK)
        return err->status;
    if (cfg->for_generation && cfg->inputs)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, GENERATION_INPUTS);
    if (cfg->converted_tokenizer_dir && cfg->format != FERRY_FORMAT_OPENVINO)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "converted_tokenizer_dir: openvino-tokenizers' "
                       "files belong in an OpenVINO export, not in %s", (*backend)->title);
    if (be_options_check(cfg, *backend, err) != FERRY_OK)
        return err->status;
    return (*backend)->configure(cfg, err);
}

ferry_status ferry_export_config_check(const ferry_export_config *cfg, char *errbuf,
                                       size_t errbuf_size)
{
    if (!cfg) {
        if (errbuf && errbuf_size)
            snprintf(errbuf, errbuf_size, "no export config");
        return FERRY_ERR_INVALID_ARG;
    }
    ferry_export_config copy = *cfg; /* validate_config settles defaults (the opset) in it */
    const fb_backend *backend;
    fy_err err = {0};
    ferry_status status = validate_config(&copy, &backend, &err);
    if (status != FERRY_OK && errbuf && errbuf_size)
        snprintf(errbuf, errbuf_size, "%s", err.msg);
    return status;
}

/* `first` (a line, may be empty), then the checkpoint tensors no graph consumed: never silently
 * ignored. */
static char *export_warnings(const char *first, const ckpt *ck)
{
    strbuf b = {0};
    sb_puts(&b, first);
    for (size_t i = 0; i < ck->n_tensors; i++) {
        if (ck->used[i])
            continue;
        char name[TEXT_QUOTE_MAX];
        text_quote(ck->by_name[i]->name, name, sizeof name);
        sb_printf(&b, "%scheckpoint tensor '%s' is not used by the export", b.len ? "\n" : "",
                  name);
    }
    return sb_take(&b);
}

static char *dup(const char *s)
{
    return s ? strdup(s) : NULL;
}

ferry_status exp_add_warning(char **warnings, const char *line)
{
    strbuf b = {0};
    sb_puts(&b, *warnings ? *warnings : "");
    sb_puts(&b, b.len ? "\n" : "");
    sb_puts(&b, line);
    char *text = sb_take(&b);
    if (!text)
        return FERRY_ERR_NOMEM;
    free(*warnings);
    *warnings = text;
    return FERRY_OK;
}

void ferry_components_free(ferry_components *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        g_free(c->items[i].graph);
    free(c->text);
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

/* The input whose axis 1 is the decoder's sequence (T5's decoder_input_ids; Whisper's and every
 * decoder-only model's input_ids): what a dim on the sequence names. */
static const char *sequence_input(const model_arch *arch)
{
    for (int i = 0; arch->inputs && i < arch->n_inputs; i++)
        if (arch->inputs[i].n_axes >= 2 && !strcmp(arch->inputs[i].axes[1], "sequence"))
            return arch->inputs[i].name;
    return "input_ids";
}

/* Plans the components (plain: one "model"; generation: gen_plan) and builds each one's
 * semantic graph with the model's family. */
static ferry_status decompose(ferry_model *m, const ferry_export_config *cfg_in,
                              const ferry_generation_config *gen, ferry_components **out)
{
    *out = NULL;
    if (!m || !m->arch || !m->ck)
        return m ? fy_refail(&m->err, FERRY_ERR_INVALID_ARG, "model is not open")
                 : FERRY_ERR_INVALID_ARG;
    fy_err_clear(&m->err);
    fy_err *err = &m->err;
    ferry_components *c = calloc(1, sizeof *c);
    if (!c)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    c->model = m;
    c->cfg = *cfg_in;
    if (validate_config(&c->cfg, &c->backend, err) != FERRY_OK)
        goto fail;
    /* ferry_export_for_generation is handed a config without for_generation too */
    if (gen && c->cfg.inputs) {
        fy_fail(err, FERRY_ERR_INVALID_ARG, GENERATION_INPUTS);
        goto fail;
    }
    /* generation components take what generate() feeds, of the inputs the model has (the
     * plan refuses a model without generation components, naming it) */
    unsigned model_inputs = 0;
    for (int k = 0; k < m->arch->n_inputs; k++)
        model_inputs |= exp_input_bit(m->arch->inputs[k].name);
    unsigned takes = gen ? (FERRY_INPUT_IDS | FERRY_INPUT_ATTENTION_MASK |
                            FERRY_INPUT_POSITION_IDS) & model_inputs
                   : c->cfg.inputs ? c->cfg.inputs
                   : m->arch->default_inputs ? m->arch->default_inputs(m->hparams)
                                             : exp_plain_inputs(&c->cfg);
    if (exp_check_model_inputs(m->arch, takes, err) != FERRY_OK)
        goto fail;
    g_symtab syms[MODEL_MAX_COMPONENTS] = {{.n = 0}};
    exp_axes ax;
    int64_t cache_len = gen && gen->static_cache ? gen->max_cache_len : 0;
    if (c->cfg.text_only && !m->arch->text_layouts) {
        if (m->arch->axes) /* a model with inputs beside tokens: its components are exported */
            fy_fail(err, FERRY_ERR_INVALID_ARG, "text_only (--text-only) is for a "
                    "vision-language checkpoint whose vision tower ferry does not export; %s's "
                    "is exported (export it for generation without text_only)",
                    m->arch->architecture);
        else
            fy_fail(err, FERRY_ERR_INVALID_ARG, "text_only (--text-only) exports a "
                    "vision-language checkpoint's language model; %s is a text model already",
                    m->arch->architecture);
        goto fail;
    }
    if (!c->cfg.text_only && m->arch->text_layouts) {
        fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: its vision tower is not exported yet; "
                "text_only exports its language model alone (--text-only; the Python "
                "configs' text_only=True; recipe key text_only)",
                m->arch->architecture);
        goto fail;
    }
    int64_t model_max = m->arch->max_sequence ? m->arch->max_sequence(m->hparams) : 0;
    if (model_max > 0 && cache_len > model_max) {
        fy_fail(err, FERRY_ERR_INVALID_ARG, "--max-cache-len %lld is past the %lld positions %s "
                "takes (its position embeddings): the tokens there would have none",
                (long long)cache_len, (long long)model_max, m->arch->architecture);
        goto fail;
    }
    int64_t gen_prompt = gen && m->arch->generation_prompt
                             ? m->arch->generation_prompt(m->hparams) : 0;
    if (cache_len > 0 && gen_prompt > 0 && cache_len < gen_prompt) {
        /* the checkpoint fixes the decoder's prompt: a cache shorter than it could never
         * generate a token */
        fy_fail(err, FERRY_ERR_INVALID_ARG, "--max-cache-len %lld is shorter than the "
                "%lld-token decoder prompt %s's generate() starts from: give at least %lld, "
                "and a slot more for each new token after the first",
                (long long)cache_len, (long long)gen_prompt, m->arch->architecture,
                (long long)gen_prompt);
        goto fail;
    }
    bool fixed_batch = cache_len > 0 && c->backend->static_cache_batch_fixed;
    if (exp_resolve_axes(&c->cfg, m->arch, takes, cache_len, model_max, gen_prompt, fixed_batch,
                         &syms[0], &ax, err) != FERRY_OK ||
        exp_bound_sequence(m->arch, m->hparams, &ax, &syms[0], err) != FERRY_OK)
        goto fail;
    int b_axis = exp_axis_index(&ax, "batch"), s_axis = exp_axis_index(&ax, "sequence");
    g_dim axes[2] = {b_axis >= 0 ? ax.dim[b_axis] : g_dim_const(1),
                     s_axis >= 0 ? ax.dim[s_axis] : g_dim_const(1)};
    for (int i = 1; i < MODEL_MAX_COMPONENTS; i++)
        syms[i] = syms[0];
    const char *axis_names[MODEL_MAX_AXES];
    for (int k = 0; k < ax.n; k++)
        axis_names[k] = ax.name[k];
    const char *one_graph = gen && c->backend->one_generation_graph &&
                                    c->backend->one_generation_graph(&c->cfg)
                                ? c->backend->name : NULL;
    model_plan_request rq = {.arch = m->arch, .cfg = &c->cfg, .gen = gen, .takes = takes,
                             .n_axes = ax.n, .axis_names = axis_names, .axes = ax.dim,
                             .format = c->backend->name, .state_forms = c->backend->state_forms(&c->cfg),
                             .single_graph = one_graph, .syms = syms};
    model_plan plan = {.n = 0};
    if (!m->arch->plan) {
        fy_fail(err, FERRY_ERR_INTERNAL, "%s plans no components", m->arch->architecture);
        goto fail;
    }
    if (m->arch->plan(m->hparams, &rq, &plan, err) != FERRY_OK)
        goto fail;
    if (plan.n < 1 || plan.n > MODEL_MAX_COMPONENTS) {
        fy_fail(err, FERRY_ERR_INTERNAL, "%s planned %d components", m->arch->architecture,
                plan.n);
        goto fail;
    }
    c->n = plan.n;
    c->generation = gen != NULL;
    if (gen)
        c->gen = plan.gen;
    for (int i = 0; i < c->n; i++) {
        c->items[i].name = plan.comps[i].name;
        c->items[i].role = plan.comps[i].role;
        c->items[i].io = plan.comps[i].io;
        c->items[i].output_class = plan.comps[i].output_class;
    }
    /* each component's dims of the model's axes: its batch and sequence where it has them (a
     * decode's query length), the export's for the others */
    for (int i = 0; i < c->n; i++) {
        model_io *io = &c->items[i].io;
        io->n_axes = ax.n;
        for (int k = 0; k < ax.n; k++)
            io->axes[k] = k == b_axis ? io->batch : k == s_axis ? io->sequence : ax.dim[k];
    }
    q_kept_float kept = {.n = 0};
    memset(m->ck->used, 0, m->ck->n_tensors);
    /* a text-only export leaves the rest of the checkpoint (a vision tower, a projector) out
     * by request: not a tensor to warn of */
    for (size_t t = 0; t < m->ck->n_tensors; t++)
        if (!ckpt_in_layout(m->ck, m->ck->by_name[t]->name))
            m->ck->used[t] = 1;
    for (int i = 0; i < c->n; i++) {
        g_graph *g = g_new();
        if (!g) {
            fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
            goto fail;
        }
        c->items[i].graph = g;
        g->syms = syms[i];
        g->output_class = c->items[i].output_class;
        if (m->arch->build(m->hparams, m->ck, &c->items[i].io, g, err) != FERRY_OK)
            goto fail;
        g_remove_dead(g);
        if ((!c->items[i].io.keep_float &&
             q_apply(g, &c->cfg.quantizer, c->backend->whole_block_min, &kept, err) !=
                 FERRY_OK) ||
            g_check(g, err) != FERRY_OK)
            goto fail;
    }
    c->warnings = export_warnings(m->warning, m->ck);
    if (kept.n) {
        char line[600];
        int min = c->backend->whole_block_min;
        const char *title = c->backend->title;
        /* --quantize must change something: an export of float weights labelled int4 is not
         * what was asked for */
        if (!kept.quantized) {
            fy_fail(err, FERRY_ERR_UNSUPPORTED, "--quantize int%d: no weight can be quantized "
                    "for %s, whose smallest block is %d: no weight's rows are a whole number "
                    "of such blocks (the first: '%s', %lld inputs); export without --quantize",
                    c->cfg.quantizer.bits, title, min, kept.first, (long long)kept.width);
            goto fail;
        }
        if (kept.n == 1)
            snprintf(line, sizeof line, "--quantize: '%s' stays float: its rows of %lld inputs "
                     "are no whole number of blocks of %d, the smallest block %s quantizes",
                     kept.first, (long long)kept.width, min, title);
        else
            snprintf(line, sizeof line, "--quantize: some weights stay float: their rows are "
                     "no whole number of blocks of %d, the smallest block %s quantizes (the "
                     "first: '%s', %lld inputs)", min, title, kept.first,
                     (long long)kept.width);
        if (exp_add_warning(&c->warnings, line) != FERRY_OK) {
            fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    int64_t prompt;
    if (c->generation && !c->gen.static_cache && g_dim_is_const(axes[1], &prompt)) {
        char line[400];
        snprintf(line, sizeof line, "decode's cache holds exactly %lld position%s (the example "
                 "prompt's; the sequence axis is static): it runs one step after such a prompt. "
                 "For a generation loop make the sequence symbolic (--dynamic / dynamic=True, "
                 "or a dim on %s' axis 1), or use a static cache", (long long)prompt,
                 prompt == 1 ? "" : "s", sequence_input(m->arch));
        if (exp_add_warning(&c->warnings, line) != FERRY_OK) {
            fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    *out = c;
    return FERRY_OK;
fail:
    ferry_components_free(c);
    return err->status;
}

static bool generation_is_default(const ferry_generation_config *g)
{
    return g->multi_token_decode == FERRY_AUTO && !g->static_cache && !g->max_cache_len;
}

static bool generation_equal(const ferry_generation_config *a, const ferry_generation_config *b)
{
    return a->multi_token_decode == b->multi_token_decode &&
           a->static_cache == b->static_cache && a->max_cache_len == b->max_cache_len;
}

ferry_status ferry_decompose(ferry_model *m, const ferry_export_config *cfg,
                             ferry_components **out)
{
    if (!cfg) {
        *out = NULL;
        return m ? fy_refail(&m->err, FERRY_ERR_INVALID_ARG, "no export config given")
                 : FERRY_ERR_INVALID_ARG;
    }
    /* generation options on a plain export would change nothing (a Python
     * recipe's generation_config was dropped without a word) */
    if (!cfg->for_generation && !generation_is_default(&cfg->generation)) {
        *out = NULL;
        return m ? fy_refail(&m->err, FERRY_ERR_INVALID_ARG, "multi_token_decode and "
                             "generation_config (a static cache, max_cache_len) apply to "
                             "generation exports (for_generation, export_for_generation)")
                 : FERRY_ERR_INVALID_ARG;
    }
    return decompose(m, cfg, cfg->for_generation ? &cfg->generation : NULL, out);
}

ferry_status ferry_decompose_for_generation(ferry_model *m, const ferry_export_config *cfg,
                                            const ferry_generation_config *gen,
                                            ferry_components **out)
{
    if (!gen || !cfg) {
        *out = NULL;
        return m ? fy_refail(&m->err, FERRY_ERR_INVALID_ARG, "no export or generation config "
                             "given") : FERRY_ERR_INVALID_ARG;
    }
    /* The config's own generation options (a recipe's generation_config, multi_token_decode)
     * count where `gen` leaves everything at its default (they were ignored);
     * where both say something, they must agree. */
    if (generation_is_default(gen))
        gen = &cfg->generation;
    else if (!generation_is_default(&cfg->generation) && !generation_equal(gen, &cfg->generation)) {
        *out = NULL;
        return m ? fy_refail(&m->err, FERRY_ERR_INVALID_ARG, "the export config's "
                             "generation_config / multi_token_decode and the generation config "
                             "given beside it differ: give them once")
                 : FERRY_ERR_INVALID_ARG;
    }
    return decompose(m, cfg, gen, out);
}

/* The component's graph lowered for the backend and adapted to its conventions. */
static g_graph *lower(const ferry_components *c, int i, fy_err *err)
{
    g_target t;
    c->backend->target(&c->cfg, &t);
    g_graph *g = g_legalize(c->items[i].graph, &t, err);
    if (g && c->backend->finish(g, &c->cfg, err) != FERRY_OK) {
        g_free(g);
        return NULL;
    }
    for (size_t k = 0; g && k < g->n_states; k++)
        if (!(c->backend->state_forms(&c->cfg) & 1u << g->states[k].form)) {
            fy_fail(err, FERRY_ERR_INTERNAL, "%s: state '%s' is of a form the format does not "
                    "print (%d)", c->backend->name, g->states[k].name, (int)g->states[k].form);
            g_free(g);
            return NULL;
        }
    return g;
}

const char *ferry_components_describe(ferry_components *c, int i)
{
    if (!c || i < 0 || i >= c->n)
        return NULL;
    const g_graph *sem = c->items[i].graph;
    int counts[G_OP_COUNT] = {0};
    for (size_t k = 0; k < sem->n_nodes; k++)
        if (!sem->nodes[k].dead)
            counts[sem->nodes[k].op]++;
    /* Inputs and outputs as the format names them (its cache pairs, say). */
    fy_err_clear(&c->model->err);
    g_graph *g = lower(c, i, &c->model->err);
    if (!g)
        return NULL;
    strbuf b = {0};
    sb_printf(&b, "component %s (role %s)\n", c->items[i].name, c->items[i].role);
    for (int pass = 0; pass < 2; pass++) {
        const int *ids = pass ? g->outputs : g->inputs;
        size_t n = pass ? g->n_outputs : g->n_inputs;
        sb_printf(&b, "%s:\n", pass ? "outputs" : "inputs");
        for (size_t k = 0; k < n; k++) {
            const g_value *v = &g->values[ids[k]];
            sb_printf(&b, "  %s %s [", v->name, ferry_dtype_name(v->dtype));
            for (int d = 0; d < v->shape.rank; d++) {
                char dim[128];
                g_dim_print(v->shape.d[d], &g->syms, dim, sizeof dim);
                sb_printf(&b, "%s%s", d ? ", " : "", dim);
            }
            sb_puts(&b, "]\n");
        }
    }
    sb_puts(&b, "nodes:");
    for (int op = 0; op < G_OP_COUNT; op++)
        if (counts[op])
            sb_printf(&b, " %s=%d", g_op_name((g_op)op), counts[op]);
    sb_puts(&b, "\n");
    g_free(g);
    char *text = sb_take(&b);
    if (!text)
        return NULL;
    free(c->text);
    c->text = text;
    return text;
}

const char *ferry_components_dump(ferry_components *c, int i, ferry_graph_stage stage)
{
    if (!c || i < 0 || i >= c->n)
        return NULL;
    fy_err *err = &c->model->err;
    fy_err_clear(err);
    char *text = NULL;
    if (stage == FERRY_STAGE_SEMANTIC) {
        text = g_dump(c->items[i].graph);
    } else if (stage == FERRY_STAGE_LOWERED) {
        g_graph *g = lower(c, i, err);
        if (!g)
            return NULL;
        char *body = g_dump(g);
        g_free(g);
        strbuf b = {0};
        g_target t;
        c->backend->target(&c->cfg, &t);
        if (body) /* which target: the same IR can be lowered for several */
            sb_printf(&b, "target %s\n%s", t.name, body);
        free(body);
        text = sb_take(&b);
    } else {
        fy_fail(err, FERRY_ERR_INVALID_ARG, "unknown graph stage %d", (int)stage);
        return NULL;
    }
    if (!text) {
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        return NULL;
    }
    free(c->text);
    c->text = text;
    return text;
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
    e->backend = c->backend;
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
            char q[TEXT_QUOTE_MAX];
            fy_fail(err, FERRY_ERR_INVALID_ARG, "no component named '%s'",
                    text_quote(names[k], q, sizeof q));
            goto fail;
        }
    }
    for (int i = 0; i < c->n; i++) {
        bool wanted = n_names == 0;
        for (int k = 0; k < n_names; k++)
            wanted |= strcmp(names[k], c->items[i].name) == 0;
        if (!wanted)
            continue;
        be_component *bc = &e->lowered[e->n_components];
        exp_component *ec = &e->comps[e->n_components++];
        bc->name = c->items[i].name;
        bc->role = c->items[i].role;
        if (!(bc->graph = lower(c, i, err)))
            goto fail;
        ec->name = dup(c->items[i].name);
        ec->role = dup(c->items[i].role);
        ec->float_weights = c->items[i].io.keep_float && c->cfg.quantizer.bits != 0;
        if (!ec->name || !ec->role) {
            fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    if (e->backend->files(e->lowered, e->n_components, err) != FERRY_OK)
        goto fail;
    for (int i = 0; i < e->n_components; i++) {
        exp_component *ec = &e->comps[i];
        ec->file = dup(e->lowered[i].file);
        ec->data_file = e->lowered[i].n_data_files ? dup(e->lowered[i].data_files[0]) : NULL;
        if (!ec->file || (e->lowered[i].n_data_files && !ec->data_file)) {
            fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    e->warnings = dup(c->warnings);
    if (!e->cfg.skip_tokenizer) {
        if (tok_files_read(m->dir, &e->tokenizer, err) != FERRY_OK ||
            (e->cfg.converted_tokenizer_dir &&
             tok_files_read_converted(e->cfg.converted_tokenizer_dir, &e->tokenizer, err) !=
                 FERRY_OK))
            goto fail;
        if (e->tokenizer.n == 0 &&
            exp_add_warning(&e->warnings, "the checkpoint has no tokenizer files (tokenizer.json, "
                        "tokenizer_config.json, ...): the export carries none") != FERRY_OK) {
            fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    e->cfg.converted_tokenizer_dir = NULL; /* the caller's string: read above, not kept */
    if (!genai_unsupported(e) && (!(e->genai_text = genai_config_text(e, err)) ||
                                  (genai_processor_file(e) &&
                                   !(e->genai_processor_text = genai_processor_text(e, err)))))
        goto fail;
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
    ferry_status st = ferry_decompose(m, cfg, &c);
    if (st == FERRY_OK)
        st = ferry_components_export(c, NULL, 0, out);
    ferry_components_free(c);
    return st;
}
