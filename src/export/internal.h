/* internal.h — the structs behind the public handles ferry_model and ferry_exported. Only
 * src/export/ includes this. */
#ifndef FERRY_EXPORT_INTERNAL_H
#define FERRY_EXPORT_INTERNAL_H

#include <sys/types.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "arch/arch.h"
#include "graph/graph.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "util/json.h"

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
extern const json_limits exp_manifest_limits;
cJSON *manifest_build(const struct ferry_exported *e, fy_err *err);
ferry_status manifest_validate(const cJSON *m, const char *dir, struct ferry_exported *e,
                               fy_err *err);
cJSON *export_config_to_json(const ferry_export_config *cfg);

/* Replacing an existing export under --force (replace.c). */
typedef struct old_file {
    char *name;
    dev_t dev;
    ino_t ino;
    struct timespec ctime;   /* with the inode: the file as it was, not a later one */
} old_file;

typedef struct old_export {
    dev_t dev;               /* the directory that was checked */
    ino_t ino;
    old_file *files;         /* every entry in it, each a file its export.json accounts for */
    size_t n;
} old_export;

/* Fills `o` if `out` (a directory, `shown` in messages) is an export that --force may replace:
 * a valid export.json (ferry's or transformers'), and nothing else in the directory but the
 * files it names, config.json and generation_config.json; and neither the model directory
 * `src` nor inside it nor holding it. Otherwise FERRY_ERR_EXISTS saying why. */
ferry_status replace_check(const char *out, const char *shown, const char *src, old_export *o,
                           fy_err *err);
/* Removes from `old_dir` exactly the files `o` lists (same inode as checked), then the
 * directory. If anything else is left, leaves it and says why in `note`. */
ferry_status replace_remove(const char *old_dir, const old_export *o, char *note,
                            size_t note_size);
void old_export_free(old_export *o);

#endif
