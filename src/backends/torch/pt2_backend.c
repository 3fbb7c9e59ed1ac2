/* pt2_backend.c — torch.export's .pt2 format (the guide's DynamoExporter): options, file layout
 * and writing (the target is torch_target.c, the program pt2_print.c over the aten emitter, the
 * archive pt2_archive.c).
 *
 * Placement policy: each component is <name>.pt2, one archive holding its program, its
 * parameters (one blob per dtype, 64-byte aligned, each distinct weight once), constants and,
 * where it takes no cache, example inputs (pt2_sample_inputs.c).
 *
 * What it writes: the plain export (component "model") and generation with a static cache
 * (prefill/decode, or one multi-token decode), the cache written into the caller's tensors;
 * every family; fp32, fp16 or bf16; static or symbolic dims; returning a dict, or with
 * model_output transformers' CausalLMOutputWithPast; a dynamic cache returned as outputs.
 * Not yet: quantized weights (torch has no op for ferry's block-quantized codes at this level),
 * refused by name. Another format's options are refused by options.c. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/torch/pt2.h"
#include "backends/torch/torch.h"

static const be_option PT2_OPTIONS[] = {
    {.key = "model_output", .type = BE_OPTION_BOOL, .def = "false", .flag = "--model-output",
     .flag_value = "true",
     .help = "pt2: the program returns transformers' output class\n"
             "(CausalLMOutputWithPast, BaseModelOutputWithPooling, ...),\n"
             "as transformers' DynamoExporter's do, so transformers.exporters'\n"
             "ExportedModel.from_pretrained(OUT,\n"
             "trust_remote_code=True) runs a plain export (not a\n"
             "generation one: its runners name the cache otherwise);\n"
             "torch.export.load then needs\n"
             "`import transformers.modeling_outputs` first (default:\n"
             "a dict {\"logits\": ...}, which torch alone loads)"},
};

static bool model_output(const ferry_export_config *cfg)
{
    return be_option_value(cfg, &fb_pt2, "model_output");
}

static ferry_status pt2_configure(ferry_export_config *cfg, fy_err *err)
{
    if (cfg->quantizer.bits)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "quantizer int%d: the pt2 format cannot hold "
                       "ferry's quantized weights yet (export fp32, fp16 or bf16)",
                       cfg->quantizer.bits);
    return FERRY_OK;
}

static void pt2_target_of(const ferry_export_config *cfg, g_target *out)
{
    *out = torch_target;
    out->opts = cfg;
}

/* A generation component's cache is written into the caller's tensors, as a module that owns
 * its cache writes it: each state becomes a mutation of its input (the keys and values by
 * aten.index_copy_, the write position by aten.copy_ at the end: pt2_print.c), and leaves the
 * outputs; its inputs are named as identifiers ("past_key_values_0_key"), which the module's
 * forward takes as keywords. Only a cache of fixed size (static) can be written so; a growing
 * one (dynamic) is taken and returned whole, its inputs and outputs named as identifiers too. */
static ferry_status pt2_finish(g_graph *g, const ferry_export_config *cfg, fy_err *err)
{
    bool returned = g->n_states > 0 && g->states[0].form == GS_PAIR;
    for (size_t i = 1; i < g->n_states; i++)
        if ((g->states[i].form == GS_PAIR) != returned)
            return fy_fail(err, FERRY_ERR_INTERNAL, "pt2: a graph whose cache is partly written "
                           "in place and partly returned");
    if (returned && model_output(cfg))
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "model_output (--model-output) with a dynamic "
                       "cache: the program returns the cache as tensors beside the logits, which "
                       "CausalLMOutputWithPast holds only as a DynamicCache object; export without "
                       "it, or with a static cache (--static-cache --max-cache-len N)");
    if ((returned ? be_name_returned_cache(g, err) : be_mutate_cache_inputs(g, "pt2", err)) !=
        FERRY_OK)
        return err->status;
    /* the outputs left are the fields of the family's ModelOutput class (the cache it would
     * return is written into the caller's tensors instead) */
    if (model_output(cfg) && !g->output_class)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "model_output (--model-output): a component "
                       "of this export returns what no transformers ModelOutput class holds (an "
                       "encoder-decoder's encoder returns its cross cache beside "
                       "last_hidden_state; a vision-language model's embedding, the tensor "
                       "alone): export without it");
    if (aten_refine_shapes(g, err) != FERRY_OK)
        return err->status;
    return g_check(g, err);
}

static ferry_status pt2_files(be_component *comps, int n, fy_err *err)
{
    for (int i = 0; i < n; i++) {
        if (snprintf(comps[i].file, sizeof comps[i].file, "%s.pt2", comps[i].name) >=
            (int)sizeof comps[i].file)
            return fy_fail(err, FERRY_ERR_INTERNAL, "component name '%s' too long",
                           comps[i].name);
        comps[i].n_data_files = 0;
    }
    return FERRY_OK;
}

static ferry_status pt2_write(const be_component *comps, int n, const ferry_export_config *cfg,
                              const char *dir, ws_progress *progress, be_written *written,
                              fy_err *err)
{
    uint32_t crc;
    for (int i = 0; i < n; i++)
        if (pt2_write_archive(&comps[i], model_output(cfg), dir, progress, &crc, err) !=
                FERRY_OK ||
            be_wrote(written, comps[i].file, crc, err) != FERRY_OK)
            return err->status;
    return FERRY_OK;
}

static void pt2_describe(const ferry_export_config *cfg, const g_graph *g, cJSON *metadata)
{
    (void)cfg;
    /* what torch.export.load reads: the serialized ExportedProgram's schema and IR level */
    cJSON_AddStringToObject(metadata, "schema_version", "8.20");
    cJSON_AddStringToObject(metadata, "verifier", "TRAINING");
    /* the program's name of each symbol (its range_constraints key), as pt2_print.c names
     * them: s<k> for the k-th symbol of the graph, where an input has it */
    cJSON *syms = cJSON_AddObjectToObject(metadata, "torch_symbols");
    for (int k = 0; k < g->syms.n; k++) {
        char name[24];
        snprintf(name, sizeof name, "s%d", k);
        if (pt2_input_has_symbol(g, k))
            cJSON_AddStringToObject(syms, g->syms.s[k].name, name);
    }
    int params = 0;
    for (size_t i = 0; i < g->n_values; i++)
        params += g->values[i].kind == GV_WEIGHT && g->values[i].n_uses > 0;
    /* torch's count (one short of it for a tied lm_head, which the program
     * lists as a parameter of its own over the embedding's storage, as the module does) */
    for (size_t i = 0; i < g->n_nodes; i++) {
        char key[256];
        const g_value *w = g->nodes[i].dead ? NULL : aten_tied_head_weight(g, &g->nodes[i], key,
                                                                          sizeof key);
        if (w) {
            params++;
            cJSON_AddStringToObject(metadata, "lm_head_shares", w->name);
        }
    }
    cJSON_AddNumberToObject(metadata, "parameters", params);
    /* what torch.export.load gives as example_inputs, which AOTInductor compiles against */
    const char *no_example = pt2_sample_inputs_missing(g);
    if (no_example)
        cJSON_AddStringToObject(metadata, "no_example_inputs", no_example);
    else
        cJSON_AddBoolToObject(metadata, "example_inputs", 1);
}

/* a static cache written into the caller's tensors; a dynamic one taken and returned whole
 * (past_key_values_<l>_key in, present_<l>_key out), as transformers' DynamoExporter's
 * programs take and return a DynamicCache */
static unsigned pt2_state_forms(const ferry_export_config *cfg)
{
    (void)cfg;
    return 1u << GS_MUTATED | 1u << GS_PAIR;
}

static bool pt2_owns_file(const char *name)
{
    return be_name_ends_with(name, ".pt2");
}

const fb_backend fb_pt2 = {
    .name = "pt2",
    .alias = "dynamo",
    .format = FERRY_FORMAT_PT2,
    .configure = pt2_configure,
    .target = pt2_target_of,
    .finish = pt2_finish,
    .files = pt2_files,
    .owns_file = pt2_owns_file,
    .write = pt2_write,
    .describe = pt2_describe,
    .state_forms = pt2_state_forms,
    .title = "pt2",
    .options = PT2_OPTIONS,
    .n_options = sizeof PT2_OPTIONS / sizeof PT2_OPTIONS[0],
};
