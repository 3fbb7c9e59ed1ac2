/* et_backend.c — ExecuTorch's .pte format (the guide's ExecutorchExporter): options, finish,
 * file layout and writing (the target is et_target.c, the kernels et_kernels.c over the aten
 * emitter, the memory plan et_plan.c, the file et_file.c; docs/pte-format.md holds the format
 * facts, checked against executorch 1.5.1).
 *
 * Placement policy: each component is <name>.pte, one file holding its program and, in its
 * constant segment, every weight and constant once.
 *
 * What it writes: the plain export (component "model") and generation with a static cache
 * (prefill/decode, or one multi-token decode: the cache written into its input tensors) of
 * every family, fp32, fp16 or bf16, with static or bounded dynamic dims, on the runtime's
 * portable kernels, with backend xnnpack (the default, as the guide's) the fp32 linears,
 * norms, elementwise arithmetic, rotary and attention in XNNPACK graphs (et_xnnpack.c,
 * et_xnn_graph.c). ExecuTorch plans every tensor at its largest size, so
 * each dynamic axis has a bound: its own max, or max_batch_size for batch and max_seq_len for
 * the others. --quantize int4 (symmetric blocks) makes the delegate's linears XNNPACK's
 * 8da4w, and --quantize-embeddings the table quantized_decomposed::embedding_4bit's. Not yet,
 * refused by name: other quantizers, a dynamic cache. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backends/executorch/executorch.h"
#include "util/fs.h"

static const char *const ET_BACKENDS[] = {"portable", "xnnpack", NULL};

static const be_option ET_OPTIONS[] = {
    {.key = "backend", .type = BE_OPTION_CHOICE, .def = "xnnpack", .choices = ET_BACKENDS,
     .flag = "--et-backend", .metavar = "NAME", .always_recorded = true,
     .help = "executorch: where the program's ops run: xnnpack (the\n"
             "default: fp32 linears, norms, elementwise arithmetic,\n"
             "rotary and attention in the runtime's XNNPACK delegate,\n"
             "the rest on its portable kernels); portable (every op on\n"
             "the portable kernels)"},
    {.key = "alloc_graph_input", .type = BE_OPTION_BOOL, .def = "true",
     .flag = "--no-alloc-graph-input", .flag_value = "false",
     .help = "executorch: the inputs get no place in the program's\n"
             "memory plan; the runtime reads the caller's tensors where\n"
             "they are (ExecutorchConfig(alloc_graph_input=False))"},
    {.key = "alloc_graph_output", .type = BE_OPTION_BOOL, .def = "true",
     .flag = "--no-alloc-graph-output", .flag_value = "false",
     .help = "executorch: the outputs get no place in the memory plan;\n"
             "the caller binds each (Method::set_output_data_ptr)\n"
             "(ExecutorchConfig(alloc_graph_output=False))"},
    {.key = "alloc_mutable_buffers", .type = BE_OPTION_BOOL, .def = "true",
     .flag = "--no-alloc-mutable-buffers", .flag_value = "false", .generation_only = true,
     .help = "executorch generation: the cache tensors (the program\n"
             "writes them in place) get no place in the memory plan:\n"
             "the runtime writes the caller's buffers\n"
             "(ExecutorchConfig(alloc_mutable_buffers=False); only the\n"
             "C++ runtime binds them, the Python one cannot)"},
    {.key = "max_seq_len", .type = BE_OPTION_INT, .def = "128", .min = 1, .max = INT32_MAX,
     .flag = "--max-seq-len", .metavar = "N",
     .help = "executorch: the largest extent of each dynamic axis but\n"
             "batch (ExecuTorch plans every tensor at its largest\n"
             "size): the bound of an axis with no max of its own\n"
             "(default 128), and given, a cap on every axis's max (a\n"
             "--dim's, the model's position table's)"},
    {.key = "max_batch_size", .type = BE_OPTION_INT, .def = "4", .min = 1, .max = INT32_MAX,
     .flag = "--max-batch-size", .metavar = "N",
     .help = "executorch: the largest batch of a dynamic batch axis (an\n"
             "input's first): its bound where it has no max of its own\n"
             "(default 4), and given, a cap on the max it has"},
};

static ferry_status et_configure(ferry_export_config *cfg, fy_err *err)
{
    /* int4 linears are XNNPACK's 8da4w (et_xnnpack.c); what else a quantizer asks for has no
     * kernel here yet */
    const ferry_quantizer *q = &cfg->quantizer;
    if (q->bits && be_option_value(cfg, &fb_executorch, "backend") != 1)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "quantizer int%d: executorch runs quantized "
                       "weights in the XNNPACK delegate only (--et-backend xnnpack)", q->bits);
    if (q->bits && q->bits != 4)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "quantizer int%d: executorch writes int4 "
                       "weights only (--quantize int4)", q->bits);
    if (q->bits && q->asymmetric)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "quantizer int4 asymmetric: XNNPACK's int4 "
                       "blocks are symmetric (drop --asymmetric)");
    /* XNNPACK's blockwise int4 kernels take blocks of whole multiples of 32 (the wheel's
     * lowering asserts it; a block of 16 fails when the method loads) and fp32 activations */
    if (q->bits && q->block_size % 32 != 0)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "quantizer: block size %d: XNNPACK's int4 "
                       "takes blocks of 32, 64, 128 or 256 inputs (--block-size)",
                       q->block_size);
    if (q->bits && cfg->dtype != FERRY_F32)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "quantizer int4: XNNPACK's int4 linears "
                       "read fp32 activations, so executorch's int4 export is fp32 (drop "
                       "--dtype %s)", ferry_dtype_name(cfg->dtype));
    if (q->bits && q->accuracy_level >= 0)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "quantizer: accuracy_level is onnxruntime's "
                       "MatMulNBits setting; executorch has none (drop --accuracy-level)");
    static const char *const bounds[] = {"max_seq_len", "max_batch_size"};
    for (int i = 0; i < 2; i++)
        if (be_option_is_set(cfg, &fb_executorch, bounds[i]) && !cfg->dynamic &&
            cfg->n_dims == 0)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "executorch: %s bounds the dynamic axes, "
                           "and this export has none (it takes --dynamic or a --dim)", bounds[i]);
    return FERRY_OK;
}

static void et_target_of(const ferry_export_config *cfg, g_target *out)
{
    *out = et_target;
    out->opts = cfg;
}

/* Whether symbol `sym` is a batch: the extent of some input's first axis. */
static bool batch_symbol(const g_graph *g, int sym)
{
    for (size_t i = 0; i < g->n_inputs; i++) {
        const g_value *x = &g->values[g->inputs[i]];
        if (x->shape.rank > 0 && g_dim_eq(x->shape.d[0], g_dim_sym(sym)))
            return true;
    }
    return false;
}

/* Every symbol gets a largest value (ExecuTorch sizes each tensor at its bound): the format's
 * max_batch_size (a batch axis) or max_seq_len (the others) where the symbol has none, and as
 * a cap on the one it has where the option is given. The traced extent moves into range (it is
 * a hint only). */
static ferry_status bound_symbols(g_graph *g, const ferry_export_config *cfg, fy_err *err)
{
    for (int i = 0; i < g->syms.n; i++) {
        g_sym *s = &g->syms.s[i];
        bool batch = batch_symbol(g, i);
        const char *key = batch ? "max_batch_size" : "max_seq_len";
        const char *flag = batch ? "--max-batch-size" : "--max-seq-len";
        int64_t bound = be_option_value(cfg, &fb_executorch, key);
        bool given = be_option_is_set(cfg, &fb_executorch, key);
        /* a static cache's length is what the runners allocate (export.json's max_cache_len),
         * not a hint a bound may move */
        if (given && bound < s->example && strcmp(s->name, "max_cache_len") == 0)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "executorch: %s %lld is below the "
                           "static cache's %lld slots (--max-cache-len), which every call takes "
                           "whole: give %s %lld or more, or a smaller --max-cache-len", flag,
                           (long long)bound, (long long)s->example, flag, (long long)s->example);
        /* the default never bounds below what was traced (a max_cache_len of 2048) */
        if (s->max <= 0)
            s->max = !given && s->example > bound ? s->example : bound;
        else if (given && bound < s->max)
            s->max = bound;
        if (s->min < 1)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "executorch: the dynamic axis %s has min "
                           "%lld: the runtime's kernels take no empty tensors; give it a min "
                           "of 1", s->name, (long long)s->min);
        if (s->max < s->min)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "executorch: %s %lld is below the min of "
                           "%s (%lld)", key, (long long)s->max, s->name, (long long)s->min);
        if (s->example > s->max)
            s->example = s->max;
    }
    return FERRY_OK;
}

/* A generation component's cache is written into its input tensors, as a module that owns
 * its cache writes it (the keys and values by aten::index_put_, the write position by
 * aten::copy_ at the end): each state becomes a mutation of its input and leaves the graph's
 * outputs; the program lists the cache tensors among its outputs itself (et_kernels.c). */
static ferry_status et_finish(g_graph *g, const ferry_export_config *cfg, fy_err *err)
{
    if (be_mutate_cache_inputs(g, "executorch", err) != FERRY_OK)
        return err->status;
    if (bound_symbols(g, cfg, err) != FERRY_OK || aten_refine_shapes(g, err) != FERRY_OK)
        return err->status;
    return g_check(g, err);
}

static ferry_status et_files(be_component *comps, int n, fy_err *err)
{
    for (int i = 0; i < n; i++) {
        if (snprintf(comps[i].file, sizeof comps[i].file, "%s.pte", comps[i].name) >=
            (int)sizeof comps[i].file)
            return fy_fail(err, FERRY_ERR_INTERNAL, "component name '%s' too long",
                           comps[i].name);
        comps[i].n_data_files = 0;
    }
    return FERRY_OK;
}

static et_plan_opts plan_opts(const ferry_export_config *cfg)
{
    return (et_plan_opts){
        .alloc_graph_input = be_option_value(cfg, &fb_executorch, "alloc_graph_input"),
        .alloc_graph_output = be_option_value(cfg, &fb_executorch, "alloc_graph_output"),
        .alloc_mutable_buffers = be_option_value(cfg, &fb_executorch, "alloc_mutable_buffers"),
    };
}

/* The program of `g`, planned. */
static ferry_status make_program(et_program *p, const g_graph *g,
                                 const ferry_export_config *cfg, fy_err *err)
{
    et_plan_opts opts = plan_opts(cfg);
    et_program_init(p, g, err);
    p->xnnpack = be_option_value(cfg, &fb_executorch, "backend") == 1;
    if (et_emit_program(p, err) != FERRY_OK || et_xnn_finish(p) != FERRY_OK)
        return p->st;
    return et_plan_memory(p, &opts);
}

static ferry_status et_write(const be_component *comps, int n, const ferry_export_config *cfg,
                             const char *dir, ws_progress *progress, be_written *written,
                             fy_err *err)
{
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        uint32_t crc = 0;
        if (fs_join(path, sizeof path, dir, comps[i].file, err) != FERRY_OK)
            return err->status;
        et_program p;
        ferry_status st = make_program(&p, comps[i].graph, cfg, err);
        if (st == FERRY_OK)
            st = et_write_file(&p, path, progress, &crc, err);
        et_program_free(&p);
        if (st != FERRY_OK || be_wrote(written, comps[i].file, crc, err) != FERRY_OK)
            return err->status;
    }
    return FERRY_OK;
}

static void et_describe(const ferry_export_config *cfg, const g_graph *g, cJSON *metadata)
{
    /* what the runtime will be asked for: the plan's arena and the kernels it must register */
    et_program p;
    fy_err err = {0};
    if (make_program(&p, g, cfg, &err) == FERRY_OK) {
        cJSON_AddStringToObject(metadata, "method", "forward");
        cJSON_AddNumberToObject(metadata, "planned_memory_bytes", (double)p.arena);
        cJSON_AddNumberToObject(metadata, "instructions", (double)p.n_instrs);
        cJSON_AddNumberToObject(metadata, "constants", (double)p.n_constants);
        /* the method's outputs in order: a generation component lists its cache tensors
         * (the inputs it writes in place) before and after its own outputs */
        cJSON *outs = cJSON_AddArrayToObject(metadata, "method_outputs");
        for (size_t i = 0; i < p.n_outputs; i++) {
            int v = p.values[p.outputs[i]].graph_value;
            cJSON_AddItemToArray(outs, cJSON_CreateString(v >= 0 ? g->values[v].name : "?"));
        }
        cJSON *ops = cJSON_AddArrayToObject(metadata, "operators");
        for (size_t i = 0; i < p.n_operators; i++)
            cJSON_AddItemToArray(ops, cJSON_CreateString(p.operators[i]));
        /* the delegate calls, each one XNNPACK graph of a run of delegated calls, and the
         * weights they read (named data: a segment each, or a constant's bytes where a kernel
         * reads it too) */
        cJSON_AddNumberToObject(metadata, "delegates", (double)p.n_delegates);
        if (p.n_delegates) {
            uint64_t named = 0;
            for (size_t i = 0; i < p.n_named; i++)
                named += et_named_bytes(&p, i);
            cJSON_AddStringToObject(metadata, "delegate_backend", "XnnpackBackend");
            cJSON_AddNumberToObject(metadata, "delegate_nodes", (double)p.n_xnn_nodes);
            cJSON_AddNumberToObject(metadata, "delegated_linears", (double)p.n_xnn_linears);
            cJSON_AddNumberToObject(metadata, "int4_linears", (double)p.n_int4_linears);
            cJSON_AddNumberToObject(metadata, "delegate_weight_bytes", (double)named);
        }
        if (p.n_int4_embeddings)
            cJSON_AddNumberToObject(metadata, "int4_embeddings", (double)p.n_int4_embeddings);
    }
    et_program_free(&p);
}

/* the cache written into the program's input tensors: of fixed size only */
static unsigned et_state_forms(const ferry_export_config *cfg)
{
    (void)cfg;
    return 1u << GS_MUTATED;
}

static bool et_owns_file(const char *name)
{
    return be_name_ends_with(name, ".pte");
}

const fb_backend fb_executorch = {
    .name = "executorch",
    .format = FERRY_FORMAT_EXECUTORCH,
    .configure = et_configure,
    .target = et_target_of,
    .finish = et_finish,
    .files = et_files,
    .owns_file = et_owns_file,
    .write = et_write,
    .describe = et_describe,
    .state_forms = et_state_forms,
    .whole_block_min = 32,
    .title = "ExecuTorch",
    .options = ET_OPTIONS,
    .n_options = sizeof ET_OPTIONS / sizeof ET_OPTIONS[0],
};
