/* openvino_backend.c — the OpenVINO IR format: options, file layout and writing (the target is
 * openvino_target.c, the printer ir_print.c over ir_nodes.c and ir_layers.c).
 *
 * Placement policy: each component is openvino_<name>.xml over its own openvino_<name>.bin
 * (OpenVINO reads the .bin of the same name), every Const's bytes at 64-byte aligned offsets,
 * each distinct weight or constant once.
 *
 * What it writes: the plain export (component "model"); generation as one stateful graph (one
 * "decode" for the prompt and each token, the cache in ReadValue/Assign variables, beam_idx), or
 * with stateful=false the explicit-cache components ONNX has (prefill/decode, static cache
 * pairs, named as ONNX names them); every family; fp32, fp16 or bf16, fp32 over fp16 weights
 * (compress_to_fp16), int8 or int4 weights (the stateful graph's logits always fp32, as
 * openvino-genai reads them).
 * Its options are the table below; another format's are refused by options.c. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/openvino/openvino.h"

static const be_option OPENVINO_OPTIONS[] = {
    {.key = "stateful", .type = BE_OPTION_BOOL, .def = "true", .flag = "--disable-stateful",
     .flag_value = "false", .generation_only = true,
     .help = "OpenVINO generation: the cache as explicit inputs and\n"
             "outputs (prefill/decode, as for ONNX) instead of one\n"
             "stateful graph that keeps it in variables"},
    {.key = "compress_to_fp16", .type = BE_OPTION_BOOL, .def = "false",
     .flag = "--compress-to-fp16", .flag_value = "true",
     .help = "OpenVINO: weights stored in fp16, computed in fp32 (half\n"
             "the bytes; --dtype stays fp32)"},
};

static bool stateful(const ferry_export_config *cfg)
{
    return be_option_value(cfg, &fb_openvino, "stateful");
}

static bool compress_to_fp16(const ferry_export_config *cfg)
{
    return be_option_value(cfg, &fb_openvino, "compress_to_fp16");
}

static ferry_status openvino_configure(ferry_export_config *cfg, fy_err *err)
{
    if (cfg->quantizer.bits && cfg->quantizer.accuracy_level >= 0)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "quantizer: accuracy_level is an attribute of "
                       "onnxruntime's MatMulNBits; OpenVINO has none (its CPU plugin picks how "
                       "to run compressed weights)");
    if (compress_to_fp16(cfg) && cfg->dtype != FERRY_F32)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "compress_to_fp16 stores fp32 weights in "
                       "fp16; with dtype %s the weights already are %s",
                       ferry_dtype_name(cfg->dtype), ferry_dtype_name(cfg->dtype));
    return FERRY_OK;
}

static void openvino_target_of(const ferry_export_config *cfg, g_target *out)
{
    *out = openvino_target;
    out->opts = cfg;
}

static bool is_state_value(const g_graph *g, int v)
{
    for (size_t i = 0; i < g->n_states; i++)
        if (g->states[i].in == v || g->states[i].out == v)
            return true;
    return false;
}

/* The stateful model's logits in fp32 whatever the export's dtype: openvino-genai's samplers
 * read f32 logits only (an fp16 or bf16 one fails in LLMPipeline), as optimum-intel's exports
 * give them. */
static ferry_status logits_in_f32(g_graph *g, fy_err *err)
{
    for (size_t i = 0; i < g->n_outputs; i++) {
        int v = g->outputs[i];
        if (strcmp(g->values[v].name, "logits") != 0 || g->values[v].dtype == FERRY_F32)
            continue;
        g_rename(g, v, "logits_before_cast");
        int f32 = g_cast(g, "/model/Cast_logits", v, FERRY_F32);
        if (!g_rename(g, f32, "logits"))
            return fy_fail(err, g->err.status, "%s", g->err.msg);
        g->outputs[i] = f32;
    }
    return FERRY_OK;
}

/* A graph with a cache becomes the interface of a stateful model: the cache inputs and outputs
 * leave the graph's inputs and outputs (the printer reads them with ReadValue and writes them
 * with Assign, one variable per cache tensor, named as its input), and an int32 beam_idx
 * [batch] input reorders every cache row as optimum-intel's stateful models do. */
static ferry_status openvino_finish(g_graph *g, const ferry_export_config *cfg, fy_err *err)
{
    if (!stateful(cfg)) { /* the cache stays explicit inputs and outputs, named as in ONNX */
        if (be_name_explicit_cache(g, err) != FERRY_OK)
            return err->status;
        return g_check(g, err);
    }
    if (!g->n_states)
        return g_check(g, err);
    for (size_t i = 0; i < g->n_states; i++)
        if (g->states[i].form != GS_PAIR || g->states[i].in == G_NONE)
            return fy_fail(err, FERRY_ERR_INTERNAL, "openvino: state '%s' is not a growing "
                           "cache read and written by one graph", g->states[i].name);
    for (size_t i = 0; i < g->n_states; i++)
        g->states[i].form = GS_VARIABLE;
    size_t n = 0;
    for (size_t i = 0; i < g->n_inputs; i++)
        if (!is_state_value(g, g->inputs[i]))
            g->inputs[n++] = g->inputs[i];
    g->n_inputs = n;
    n = 0;
    for (size_t i = 0; i < g->n_outputs; i++)
        if (!is_state_value(g, g->outputs[i]))
            g->outputs[n++] = g->outputs[i];
    g->n_outputs = n;
    if (logits_in_f32(g, err) != FERRY_OK)
        return err->status;
    g_dim batch = g->values[g->states[0].in].shape.d[0];
    if (g_input(g, OV_BEAM_IDX, FERRY_I32, 1, &batch) == G_NONE)
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    return g_check(g, err);
}

/* A lone component (the plain "model", or generation's one stateful "decode") is
 * openvino_model.xml, the name openvino-genai and optimum-intel load. */
static ferry_status openvino_files(be_component *comps, int n, fy_err *err)
{
    for (int i = 0; i < n; i++) {
        const char *name = n == 1 ? "model" : comps[i].name;
        if (snprintf(comps[i].file, sizeof comps[i].file, "openvino_%s.xml", name) >=
                (int)sizeof comps[i].file ||
            snprintf(comps[i].data_files[0], sizeof comps[i].data_files[0], "openvino_%s.bin",
                     name) >= (int)sizeof comps[i].data_files[0])
            return fy_fail(err, FERRY_ERR_INTERNAL, "component name '%s' too long",
                           comps[i].name);
        comps[i].n_data_files = 1;
    }
    return FERRY_OK;
}

static bool kv_in_variables(const g_graph *g)
{
    for (size_t i = 0; i < g->n_states; i++)
        if (g->states[i].form == GS_VARIABLE)
            return true;
    return false;
}

/* The KV cache precision OpenVINO's CPU plugin keeps the variables in: the export's own, the
 * precision its tests hold it to (the plugin's default, u8 on CPUs without bf16, moves fp32
 * logits by ~5e-4). A caller's KV_CACHE_PRECISION still wins. */
static const char *kv_precision(ferry_dtype dt)
{
    return dt == FERRY_F16 ? "f16" : dt == FERRY_BF16 ? "bf16" : "f32";
}

/* The compute precision an export is validated at: the CPU plugin's default is bf16 on
 * processors that have it, an 8-bit mantissa, far from the 1e-4 fp32 logits are held to and
 * coarser than fp16's 11 bits too (an fp16 export's logits were 5.4e-2 from
 * eager at bf16, 4.9e-3 at f32; asking for f16 on a processor without native fp16 ran as
 * coarsely), and a runtime that compiles the model with its defaults (transformers' OpenVINO
 * runner, openvino-genai) would get it. Recorded as transformers' exporter records it for
 * fp32; a bf16 export keeps the plugin's choice. */
static const char *inference_precision(ferry_dtype dt)
{
    return dt == FERRY_F32 || dt == FERRY_F16 ? "f32" : NULL;
}

static ferry_status openvino_write(const be_component *comps, int n,
                                   const ferry_export_config *cfg, const char *dir,
                                   ws_progress *progress, be_written *written, fy_err *err)
{
    ferry_status st = FERRY_OK;
    uint32_t crc;
    for (int i = 0; i < n && st == FERRY_OK; i++) {
        pl_file *bin = pl_new(comps[i].data_files[0], OV_BIN_ALIGN);
        if (!bin)
            return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        ov_options opt = {.compress_to_fp16 = compress_to_fp16(cfg),
                          .inference_precision = inference_precision(cfg->dtype)};
        if (kv_in_variables(comps[i].graph))
            opt.kv_cache_precision = kv_precision(cfg->dtype);
        st = ov_print_model(comps[i].graph, bin, &opt, comps[i].name, dir, NULL, NULL, err);
        if (st == FERRY_OK && (st = pl_write(bin, dir, progress, &crc, err)) == FERRY_OK)
            st = be_wrote(written, comps[i].data_files[0], crc, err);
        if (st == FERRY_OK &&
            (st = ov_print_model(comps[i].graph, bin, &opt, comps[i].name, dir, comps[i].file,
                                 &crc, err)) == FERRY_OK)
            st = be_wrote(written, comps[i].file, crc, err);
        pl_free(bin);
    }
    return st;
}

static void openvino_describe(const ferry_export_config *cfg, const g_graph *g, cJSON *metadata)
{
    cJSON_AddNumberToObject(metadata, "ir_version", 11);
    /* the cache pairs' inputs name the model's variables; beam_idx is an input. A stateful
     * export's graphs without a cache (a vision-language model's tower and embedding) are
     * plain ones. */
    bool in_variables = cfg->for_generation && stateful(cfg) && (!g || kv_in_variables(g));
    cJSON_AddBoolToObject(metadata, "stateful", in_variables);
    if (!in_variables && !inference_precision(cfg->dtype))
        return;
    /* as the printer writes them into the model's rt_info */
    cJSON *options = cJSON_AddObjectToObject(metadata, "runtime_options");
    if (inference_precision(cfg->dtype))
        cJSON_AddStringToObject(options, "INFERENCE_PRECISION_HINT",
                                inference_precision(cfg->dtype));
    if (in_variables)
        cJSON_AddStringToObject(options, "KV_CACHE_PRECISION", kv_precision(cfg->dtype));
}

static const char *openvino_nonfinite_note(const ferry_export_config *cfg)
{
    (void)cfg;
    return "; OpenVINO's CPU plugin rounds activations to int8 next to quantized weights, "
           "which makes NaN finite, unless compiled with DYNAMIC_QUANTIZATION_GROUP_SIZE 0";
}

/* stateful: the runtime's variables (the plan gives it a growing cache only); stateless: the
 * cache as ONNX names it, past/present or input./output. pairs */
static unsigned openvino_state_forms(const ferry_export_config *cfg)
{
    return stateful(cfg) ? 1u << GS_VARIABLE : 1u << GS_PAIR | 1u << GS_IN_PLACE;
}

/* openvino_<component>.xml over openvino_<component>.bin */
static bool openvino_owns_file(const char *name)
{
    return strncmp(name, "openvino_", 9) == 0 &&
           (be_name_ends_with(name + 9, ".xml") || be_name_ends_with(name + 9, ".bin"));
}

const fb_backend fb_openvino = {
    .name = "openvino",
    .format = FERRY_FORMAT_OPENVINO,
    .title = "OpenVINO",
    .options = OPENVINO_OPTIONS,
    .n_options = sizeof OPENVINO_OPTIONS / sizeof OPENVINO_OPTIONS[0],
    .configure = openvino_configure,
    .target = openvino_target_of,
    .finish = openvino_finish,
    .files = openvino_files,
    .owns_file = openvino_owns_file,
    .write = openvino_write,
    .describe = openvino_describe,
    .one_generation_graph = stateful,
    .state_forms = openvino_state_forms,
    .static_cache_batch_fixed = true,
    .whole_block_min = 16,
    .nonfinite_note = openvino_nonfinite_note,
};
