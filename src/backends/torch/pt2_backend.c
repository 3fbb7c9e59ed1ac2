/* pt2_backend.c — torch.export's .pt2 format (the guide's DynamoExporter): options, file layout
 * and writing (the target is torch_target.c, the program pt2_print.c over pt2_nodes.c, the
 * archive pt2_archive.c).
 *
 * Placement policy: each component is <name>.pt2, one archive holding its program, its
 * parameters (one blob per dtype, 64-byte aligned, each distinct weight once) and constants.
 *
 * What it writes today: the plain export (component "model") for every family, fp32, fp16 or
 * bf16, static or symbolic dims. Not yet: generation components, and quantized weights (torch
 * has no op for ferry's block-quantized codes at this level) — refused by name. onnxruntime's
 * and OpenVINO's options are refused as theirs. */
#include <cjson/cJSON.h>
#include <stdio.h>

#include "backends/backend.h"
#include "backends/torch/torch.h"

static ferry_status pt2_configure(ferry_export_config *cfg, fy_err *err)
{
    if (cfg->opset != 0)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "opset %d: an opset is an ONNX option; a "
                       "torch program has none to choose", cfg->opset);
    if (cfg->ort_fusions != FERRY_ORT_NONE)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "ort_fusions '%s' are onnxruntime's kernels: "
                       "they apply to --format onnx, not pt2",
                       ferry_ort_fusions_name(cfg->ort_fusions));
    if (cfg->stateless || cfg->compress_to_fp16)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s is an OpenVINO option: it applies to "
                       "--format openvino, not pt2",
                       cfg->stateless ? "stateful=false" : "compress_to_fp16");
    if (cfg->quantizer.bits)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "quantizer int%d: the pt2 format cannot hold "
                       "ferry's quantized weights yet (export fp32, fp16 or bf16)",
                       cfg->quantizer.bits);
    if (cfg->for_generation)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "for_generation: the pt2 format writes the "
                       "plain export only so far (its generation components are not written "
                       "yet); export without --for-generation, or use --format onnx or "
                       "openvino");
    return FERRY_OK;
}

static void pt2_target_of(const ferry_export_config *cfg, g_target *out)
{
    *out = torch_target;
    out->opts = cfg;
}

static ferry_status pt2_finish(g_graph *g, const ferry_export_config *cfg, fy_err *err)
{
    (void)cfg;
    if (pt_refine_shapes(g, err) != FERRY_OK)
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
                              const char *dir, ws_progress *progress, fy_err *err)
{
    (void)cfg;
    for (int i = 0; i < n; i++)
        if (pt2_write_archive(comps[i].graph, dir, comps[i].file, progress, err) != FERRY_OK)
            return err->status;
    return FERRY_OK;
}

static void pt2_describe(const ferry_export_config *cfg, cJSON *metadata)
{
    (void)cfg;
    /* what torch.export.load reads: the serialized ExportedProgram's schema and IR level */
    cJSON_AddStringToObject(metadata, "schema_version", "8.20");
    cJSON_AddStringToObject(metadata, "verifier", "TRAINING");
}

const fb_backend fb_pt2 = {
    .name = "pt2",
    .alias = "dynamo",
    .format = FERRY_FORMAT_PT2,
    .configure = pt2_configure,
    .target = pt2_target_of,
    .finish = pt2_finish,
    .files = pt2_files,
    .write = pt2_write,
    .describe = pt2_describe,
};
