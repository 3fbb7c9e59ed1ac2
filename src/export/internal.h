/* internal.h — the structs behind the public handles ferry_model and ferry_exported. Only
 * src/export/ includes this. */
#ifndef FERRY_EXPORT_INTERNAL_H
#define FERRY_EXPORT_INTERNAL_H

#include <cjson/cJSON.h>

#include "arch/arch.h"
#include "graph/graph.h"
#include "model/checkpoint.h"
#include "model/config.h"

struct ferry_model {
    fy_err err;
    char dir[4096];
    model_config cfg;
    bool cfg_loaded;
    ckpt *ck;
    const arch_family *family;
};

#define EXP_MAX_COMPONENTS 8

typedef struct exp_component {
    char *name;              /* "model", "prefill", "decode", ... */
    char *role;
    char *file;              /* "model.onnx" */
    char *data_file;         /* "model.onnx.data" */
    g_graph *graph;          /* primitive graph, ready to print; NULL for a loaded export */
    cache_kind cache;
} exp_component;

struct ferry_exported {
    fy_err err;
    ferry_model *model;      /* borrowed; NULL for a loaded export */
    ferry_export_config cfg;
    char *dir;               /* where it was saved or loaded from */
    cJSON *manifest;
    char *manifest_text;
    int n_components;
    exp_component comps[EXP_MAX_COMPONENTS];
    char *warnings;          /* newline-separated, may be NULL */
    bool generation;         /* made by ferry_export_for_generation */
    ferry_generation_config gen;
};

/* Records the model-level message into a handle error. */
ferry_status exp_set_error(fy_err *dst, const fy_err *src);

/* Manifest (manifest.c) */
cJSON *manifest_build(const struct ferry_exported *e, fy_err *err);
ferry_status manifest_validate(const cJSON *m, const char *dir, struct ferry_exported *e,
                               fy_err *err);
cJSON *export_config_to_json(const ferry_export_config *cfg);

#endif
