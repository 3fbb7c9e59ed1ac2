/* onnx_backend.c — the ONNX format: its options (opset, ort_fusions), target, file layout and
 * writing.
 *
 * Placement policy: every component's weights live in one shared model.onnx.data at 4096-byte
 * aligned offsets (onnxruntime can map them), each distinct weight once: a generation export's
 * prefill and decode read the same bytes and share page cache at run time. So does every
 * constant of ONNX_EXTERNAL_CONST_BYTES or more (a fused graph's rotary tables).
 *
 * Cache states print as the guide names them (be_name_explicit_cache, cache_names.c): a state
 * updated in place (static cache) as the pair input.<name> / output.<name>, meant to be bound
 * to one buffer; an appended cache as past_key_values.<l>.key -> present.<l>.key. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/onnx/onnx.h"

static const char *const FUSIONS[] = {"none", "cpu", "cuda", "webgpu", "dml", NULL};

#define TEXT_OF(n) #n
#define NUMBER_TEXT(n) TEXT_OF(n)
#define ONNX_DEFAULT_OPSET_TEXT NUMBER_TEXT(ONNX_DEFAULT_OPSET)

static const be_option ONNX_OPTIONS[] = {
    {.key = "opset", .alias = "opset_version", .type = BE_OPTION_INT,
     .def = ONNX_DEFAULT_OPSET_TEXT,
     .min = ONNX_MIN_OPSET, .max = ONNX_MAX_OPSET, .flag = "--opset", .metavar = "N",
     .always_recorded = true,
     .help = "ONNX opset (23 with --ort-fusions, whose\n"
             "RMSNormalization is standard there)"},
    {.key = "ort_fusions", .type = BE_OPTION_CHOICE, .def = "none", .choices = FUSIONS,
     .flag = "--ort-fusions", .metavar = "EP",
     .help = "ONNX Runtime's fused ops for one execution provider:\n"
             "cpu, cuda, webgpu or dml (none = standard ONNX, the\n"
             "default); such a graph is for onnxruntime (its com.microsoft\n"
             "ops where the model has them), fp32 or\n"
             "fp16; opset 23 by default; positions up to\n"
             "max(max_position_embeddings, --max-cache-len); on webgpu\n"
             "a call of several tokens with a cache (after the first\n"
             "call, and every static-cache call) needs batch 1;\n"
             "cuda's GroupQueryAttention needs --dtype fp16\n"
             "(at fp32 its attention is MultiHeadAttention)"},
};

int onnx_opset(const ferry_export_config *cfg)
{
    return (int)be_option_value(cfg, &fb_onnx, "opset");
}

ort_fusions onnx_fusions(const ferry_export_config *cfg)
{
    return (ort_fusions)be_option_value(cfg, &fb_onnx, "ort_fusions");
}

const char *onnx_fusions_name(ort_fusions fusions)
{
    return (unsigned)fusions < sizeof FUSIONS / sizeof *FUSIONS - 1 ? FUSIONS[fusions] : "?";
}

static ferry_status onnx_configure(ferry_export_config *cfg, fy_err *err)
{
    ort_fusions fusions = onnx_fusions(cfg);
    /* onnxruntime's fused graphs take opset 23 by default: its RMSNormalization is standard
     * there (older opsets need onnxruntime's own SimplifiedLayerNormalization). */
    if (!ferry_export_config_option(cfg, "opset") && fusions != ORT_NONE &&
        be_option_set(cfg, &fb_onnx, "opset", 23, err) != FERRY_OK)
        return err->status;
    int opset = onnx_opset(cfg);
    /* fused graphs hold quantized weights as onnxruntime's MatMulNBits and GatherBlockQuantized
     * over uint8 codes, at any opset */
    if (cfg->quantizer.bits && opset < 21 && fusions == ORT_NONE)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "quantized ONNX weights need opset 21 or later "
                       "(uint4 and blocked DequantizeLinear), not %d; fused graphs "
                       "(--ort-fusions) take any", opset);
    if (fusions != ORT_NONE && cfg->dtype == FERRY_BF16)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "ort_fusions '%s': onnxruntime's kernels for "
                       "that provider take fp32 or fp16, not bf16 (--dtype)",
                       onnx_fusions_name(fusions));
    if (fusions == ORT_NONE && cfg->quantizer.bits && cfg->quantizer.accuracy_level >= 0)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "quantizer: accuracy_level (--accuracy-level) "
                       "is an attribute of onnxruntime's MatMulNBits, which only fused graphs "
                       "use (--ort-fusions); standard ONNX has none");
    if (fusions != ORT_NONE && cfg->quantizer.bits && cfg->quantizer.accuracy_level < 0)
        cfg->quantizer.accuracy_level = 4; /* int8 activations: onnxruntime's fastest on CPU */
    return FERRY_OK;
}

static void onnx_target(const ferry_export_config *cfg, g_target *out)
{
    switch (onnx_fusions(cfg)) {
    case ORT_CPU: *out = ort_cpu_target; break;
    case ORT_CUDA: *out = ort_cuda_target; break;
    case ORT_WEBGPU: *out = ort_webgpu_target; break;
    case ORT_DML: *out = ort_dml_target; break;
    default: *out = onnx_standard_target; break;
    }
    out->opts = cfg;
}

static ferry_status onnx_finish(g_graph *g, const ferry_export_config *cfg, fy_err *err)
{
    (void)cfg;
    if (be_name_explicit_cache(g, err) != FERRY_OK)
        return err->status;
    return g_check(g, err);
}

static ferry_status onnx_files(be_component *comps, int n, fy_err *err)
{
    for (int i = 0; i < n; i++) {
        if (snprintf(comps[i].file, sizeof comps[i].file, "%s.onnx", comps[i].name) >=
            (int)sizeof comps[i].file)
            return fy_fail(err, FERRY_ERR_INTERNAL, "component name '%s' too long",
                           comps[i].name);
        snprintf(comps[i].data_files[0], sizeof comps[i].data_files[0], "%s", ONNX_DATA_FILE);
        comps[i].n_data_files = 1;
    }
    return FERRY_OK;
}

static ferry_status onnx_write(const be_component *comps, int n, const ferry_export_config *cfg,
                               const char *dir, ws_progress *progress, be_written *written,
                               fy_err *err)
{
    uint32_t crc;
    pl_file *data = pl_new(ONNX_DATA_FILE, ONNX_DATA_ALIGN);
    if (!data)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    ferry_status st = FERRY_OK;
    for (int i = 0; i < n && st == FERRY_OK; i++)
        st = pl_place_graph(data, comps[i].graph, ONNX_EXTERNAL_CONST_BYTES, err);
    if (st == FERRY_OK && (st = pl_write(data, dir, progress, &crc, err)) == FERRY_OK)
        st = be_wrote(written, ONNX_DATA_FILE, crc, err);
    for (int i = 0; i < n && st == FERRY_OK; i++)
        if ((st = onnx_write_model(comps[i].graph, data, onnx_opset(cfg), comps[i].name, dir,
                                   comps[i].file, &crc, err)) == FERRY_OK)
            st = be_wrote(written, comps[i].file, crc, err);
    pl_free(data);
    return st;
}

static void onnx_describe(const ferry_export_config *cfg, const g_graph *g, cJSON *metadata)
{
    (void)g;
    cJSON_AddNumberToObject(metadata, "opset", onnx_opset(cfg));
}

static const char *onnx_nonfinite_note(const ferry_export_config *cfg)
{
    if (onnx_fusions(cfg) != ORT_NONE &&
        (cfg->quantizer.accuracy_level == 4 || cfg->quantizer.accuracy_level < 0)) /* -1: 4 */
        return "; MatMulNBits at accuracy_level 4 rounds activations to int8, which makes NaN "
               "finite in onnxruntime: accuracy_level 0 keeps it";
    return NULL;
}

/* a growing cache as past/present pairs, a static one as input./output. pairs */
static unsigned onnx_state_forms(const ferry_export_config *cfg)
{
    (void)cfg;
    return 1u << GS_PAIR | 1u << GS_IN_PLACE;
}

/* a fused graph holds the kernels of the provider it was fused for */
static const char *onnx_runtime_provider(const ferry_export_config *cfg)
{
    ort_fusions fusions = onnx_fusions(cfg);
    return fusions == ORT_NONE ? NULL : onnx_fusions_name(fusions);
}

static bool onnx_owns_file(const char *name)
{
    return be_name_ends_with(name, ".onnx") || be_name_ends_with(name, ".onnx.data");
}

const fb_backend fb_onnx = {
    .name = "onnx",
    .format = FERRY_FORMAT_ONNX,
    .title = "ONNX",
    .options = ONNX_OPTIONS,
    .n_options = sizeof ONNX_OPTIONS / sizeof ONNX_OPTIONS[0],
    .configure = onnx_configure,
    .target = onnx_target,
    .finish = onnx_finish,
    .files = onnx_files,
    .owns_file = onnx_owns_file,
    .write = onnx_write,
    .describe = onnx_describe,
    .nonfinite_note = onnx_nonfinite_note,
    .state_forms = onnx_state_forms, .runtime_provider = onnx_runtime_provider,
    .static_cache_batch_fixed = true,
};

int ferry_default_opset(void) { return ONNX_DEFAULT_OPSET; }
int ferry_min_opset(void) { return ONNX_MIN_OPSET; }
int ferry_max_opset(void) { return ONNX_MAX_OPSET; }
