/* onnx_backend.c — the ONNX format: options (opset), target, file layout and writing.
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

static ferry_status onnx_configure(ferry_export_config *cfg, fy_err *err)
{
    if (cfg->stateless)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "stateful=False is an OpenVINO option: an "
                       "ONNX export's cache is always explicit inputs and outputs");
    if (cfg->compress_to_fp16)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "compress_to_fp16 is an OpenVINO option; for "
                       "fp16 ONNX weights export with dtype fp16");
    if (cfg->model_output)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "model_output is a pt2 option: an ONNX "
                       "graph's outputs are named, and transformers' runner builds its "
                       "CausalLMOutputWithPast from them already");
    /* onnxruntime's fused graphs take opset 23 by default: its RMSNormalization is standard
     * there (older opsets need onnxruntime's own SimplifiedLayerNormalization). */
    if (cfg->opset == 0)
        cfg->opset = cfg->ort_fusions != FERRY_ORT_NONE ? 23 : ONNX_DEFAULT_OPSET;
    if (cfg->opset < ONNX_MIN_OPSET || cfg->opset > ONNX_MAX_OPSET)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "ONNX opset %d is not supported (supported: "
                       "%d to %d, default %d)", cfg->opset, ONNX_MIN_OPSET, ONNX_MAX_OPSET,
                       ONNX_DEFAULT_OPSET);
    /* fused graphs hold quantized weights as onnxruntime's MatMulNBits and GatherBlockQuantized
     * over uint8 codes, at any opset */
    if (cfg->quantizer.bits && cfg->opset < 21 && cfg->ort_fusions == FERRY_ORT_NONE)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "quantized ONNX weights need opset 21 or later "
                       "(uint4 and blocked DequantizeLinear), not %d; fused graphs "
                       "(--ort-fusions) take any", cfg->opset);
    if (cfg->ort_fusions != FERRY_ORT_NONE && cfg->dtype == FERRY_BF16)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "ort_fusions '%s': onnxruntime's kernels for "
                       "that provider take fp32 or fp16, not bf16 (--dtype)",
                       ferry_ort_fusions_name(cfg->ort_fusions));
    if (cfg->ort_fusions == FERRY_ORT_NONE && cfg->quantizer.bits &&
        cfg->quantizer.accuracy_level >= 0)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "quantizer: accuracy_level is an attribute of "
                       "onnxruntime's MatMulNBits, which only fused graphs use (--ort-fusions); "
                       "standard ONNX has none");
    if (cfg->ort_fusions != FERRY_ORT_NONE && cfg->quantizer.bits &&
        cfg->quantizer.accuracy_level < 0)
        cfg->quantizer.accuracy_level = 4; /* int8 activations: onnxruntime's fastest on CPU */
    return FERRY_OK;
}

static void onnx_target(const ferry_export_config *cfg, g_target *out)
{
    switch (cfg->ort_fusions) {
    case FERRY_ORT_CPU: *out = ort_cpu_target; break;
    case FERRY_ORT_CUDA: *out = ort_cuda_target; break;
    case FERRY_ORT_WEBGPU: *out = ort_webgpu_target; break;
    case FERRY_ORT_DML: *out = ort_dml_target; break;
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
        if ((st = onnx_write_model(comps[i].graph, data, cfg->opset, comps[i].name, dir,
                                   comps[i].file, &crc, err)) == FERRY_OK)
            st = be_wrote(written, comps[i].file, crc, err);
    pl_free(data);
    return st;
}

static void onnx_describe(const ferry_export_config *cfg, const g_graph *g, cJSON *metadata)
{
    (void)g;
    cJSON_AddNumberToObject(metadata, "opset", cfg->opset);
}

const fb_backend fb_onnx = {
    .name = "onnx",
    .format = FERRY_FORMAT_ONNX,
    .configure = onnx_configure,
    .target = onnx_target,
    .finish = onnx_finish,
    .files = onnx_files,
    .write = onnx_write,
    .describe = onnx_describe,
};

int ferry_default_opset(void) { return ONNX_DEFAULT_OPSET; }
int ferry_min_opset(void) { return ONNX_MIN_OPSET; }
int ferry_max_opset(void) { return ONNX_MAX_OPSET; }
