/* openvino_backend.c — the OpenVINO IR format: options, target, file layout and writing.
 *
 * Placement policy: each component is openvino_<name>.xml over its own openvino_<name>.bin
 * (OpenVINO reads the .bin of the same name), every Const's bytes at 64-byte aligned offsets,
 * each distinct weight or constant once.
 *
 * What this backend writes so far: the plain export (component "model") of every family, fp32,
 * fp16 or bf16. Generation exports (states as ReadValue/Assign), quantized weights and
 * onnxruntime's fusions are refused with a message saying so. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/openvino/openvino.h"

static ferry_status openvino_configure(ferry_export_config *cfg, fy_err *err)
{
    if (cfg->opset != 0)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "opset %d: an opset is an ONNX option; "
                       "OpenVINO IR has none to choose", cfg->opset);
    if (cfg->ort_fusions != FERRY_ORT_NONE)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "ort_fusions '%s' are onnxruntime's kernels: "
                       "they apply to --format onnx, not openvino",
                       ferry_ort_fusions_name(cfg->ort_fusions));
    if (cfg->quantizer.bits)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "OpenVINO: quantized weights (--quantize "
                       "int%d) are not supported yet; export fp32, fp16 or bf16",
                       cfg->quantizer.bits);
    return FERRY_OK;
}

static g_legality openvino_legal(const g_target *t, const g_graph *g, const g_node *n)
{
    (void)t;
    (void)g;
    return g_op_is_semantic(n->op) ? G_LOWER : G_NATIVE;
}

static g_lower_fn openvino_lowering(const g_target *t, g_op op)
{
    (void)t;
    (void)op;
    return NULL; /* the generic ones: linear as MatMul(transpose_b) over the stored weight */
}

const g_target openvino_target = {.name = "openvino", .legal = openvino_legal,
                                  .lowering = openvino_lowering};

static void openvino_target_of(const ferry_export_config *cfg, g_target *out)
{
    *out = openvino_target;
    out->opts = cfg;
}

static ferry_status openvino_finish(g_graph *g, const ferry_export_config *cfg, fy_err *err)
{
    (void)cfg;
    if (g->n_states)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "OpenVINO: generation exports (a KV cache, "
                       "--for-generation) are not supported yet; export the plain model");
    return g_check(g, err);
}

static ferry_status openvino_files(be_component *comps, int n, fy_err *err)
{
    for (int i = 0; i < n; i++) {
        if (snprintf(comps[i].file, sizeof comps[i].file, "openvino_%s.xml", comps[i].name) >=
                (int)sizeof comps[i].file ||
            snprintf(comps[i].data_files[0], sizeof comps[i].data_files[0], "openvino_%s.bin",
                     comps[i].name) >= (int)sizeof comps[i].data_files[0])
            return fy_fail(err, FERRY_ERR_INTERNAL, "component name '%s' too long",
                           comps[i].name);
        comps[i].n_data_files = 1;
    }
    return FERRY_OK;
}

static ferry_status openvino_write(const be_component *comps, int n,
                                   const ferry_export_config *cfg, const char *dir,
                                   ws_progress *progress, fy_err *err)
{
    (void)cfg;
    ferry_status st = FERRY_OK;
    for (int i = 0; i < n && st == FERRY_OK; i++) {
        pl_file *bin = pl_new(comps[i].data_files[0], OV_BIN_ALIGN);
        if (!bin)
            return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        st = ov_print_model(comps[i].graph, bin, comps[i].name, dir, NULL, err);
        if (st == FERRY_OK)
            st = pl_write(bin, dir, progress, err);
        if (st == FERRY_OK)
            st = ov_print_model(comps[i].graph, bin, comps[i].name, dir, comps[i].file, err);
        pl_free(bin);
    }
    return st;
}

static void openvino_describe(const ferry_export_config *cfg, cJSON *metadata)
{
    (void)cfg;
    cJSON_AddNumberToObject(metadata, "ir_version", 11);
}

const fb_backend fb_openvino = {
    .name = "openvino",
    .format = FERRY_FORMAT_OPENVINO,
    .configure = openvino_configure,
    .target = openvino_target_of,
    .finish = openvino_finish,
    .files = openvino_files,
    .write = openvino_write,
    .describe = openvino_describe,
};
