/* backend.h — what a format (ONNX today; OpenVINO IR, pt2, pte next) provides to the
 * format-agnostic export pipeline (src/export): its options, the target its graphs are
 * lowered for, its file layout (placement policy), the writer and its manifest metadata.
 * Adding a format is a folder under src/backends/ and one line in registry.c. */
#ifndef FERRY_BACKENDS_BACKEND_H
#define FERRY_BACKENDS_BACKEND_H

#include "ferry.h"
#include "ir/legalize.h"
#include "store/stream.h"

struct cJSON;

#define BE_MAX_DATA_FILES 2

/* One component as a backend writes it. The pipeline fills name, role and graph; the backend's
 * `files` hook fills file and data_files. */

/* The transformers classes of the modules a component's nodes came from, for a format that
 * records them (torch.export's nn_module_stack): "<module>.<prefix>Model",
 * "<module>.<prefix>DecoderLayer", ... */
typedef struct be_module_classes {
    char module[160];        /* "transformers.models.llama.modeling_llama" */
    char prefix[128];        /* "Llama" */
    char root[128];          /* "LlamaForCausalLM" */
    const char *activation;  /* "transformers.activations.SiLUActivation" */
    const char *scaled_embedding; /* "GemmaTextScaledWordEmbedding" (in `module`): an
                                     embed_tokens that scales its output; NULL: torch's */
} be_module_classes;

typedef struct be_component {
    const char *name, *role;
    g_graph *graph;          /* lowered for the backend's target, finished */
    const be_module_classes *classes; /* NULL: not known */
    char file[128];          /* "decode.onnx" */
    char data_files[BE_MAX_DATA_FILES][128];
    int n_data_files;
} be_component;

/* The CRC-32 of every file a backend's writer wrote, taken as its bytes went out (never read
 * back): export.json records them ("crc32"), and ferry_exported_verify checks the files
 * against them. */
#define BE_MAX_WRITTEN 32
typedef struct be_written {
    int n;
    struct {
        char file[128];
        uint32_t crc;
    } files[BE_MAX_WRITTEN];
} be_written;

/* Records that `file` was written with CRC-32 `crc` (`w` NULL: nothing recorded). A full
 * table is an internal error. */
ferry_status be_wrote(be_written *w, const char *file, uint32_t crc, fy_err *err);

typedef struct fb_backend {
    const char *name;        /* "onnx": --format, the recipe's export_format, export.json */
    const char *alias;       /* another name --format and the recipe take, or NULL ("dynamo":
                                the guide's DynamoExporter writes pt2) */
    ferry_format format;
    /* Checks the backend's options in `cfg` (opset, ...) and fills their defaults. */
    ferry_status (*configure)(ferry_export_config *cfg, fy_err *err);
    /* The target the semantic graphs are lowered for (its opts may point into `cfg`, which
     * outlives the lowering). */
    void (*target)(const ferry_export_config *cfg, g_target *out);
    /* Adapts a lowered graph to the format's conventions (e.g. the names of cache states). */
    ferry_status (*finish)(g_graph *g, const ferry_export_config *cfg, fy_err *err);
    /* The placement policy: which files each component has. */
    ferry_status (*files)(be_component *comps, int n, fy_err *err);
    /* Writes every component's files into `dir` (created exclusively, synced), each one's
     * CRC-32 into `written` (may be NULL). */
    ferry_status (*write)(const be_component *comps, int n, const ferry_export_config *cfg,
                          const char *dir, ws_progress *progress, be_written *written,
                          fy_err *err);
    /* Format-specific metadata of component graph `g` in export.json (e.g. "opset"). */
    void (*describe)(const ferry_export_config *cfg, const g_graph *g, struct cJSON *metadata);
    /* Its runtimes carry the cache themselves (OpenVINO's stateful models): a generation export
     * is one graph for the prompt and each token, never a prefill/decode pair. */
    bool one_generation_graph;
    /* Its programs write the cache into the caller's tensors (torch's input mutations): only a
     * cache of fixed size can be written so, and a generation export needs a static cache. */
    bool cache_in_place_only;
} fb_backend;

/* Names a graph's explicit cache as the guide does (cache_names.c): a state updated in place
 * (static cache) as input.<name> / output.<name>, an appended one as past_key_values.<l>.key ->
 * present.<l>.key. For the formats whose cache is the graph's inputs and outputs. */
ferry_status be_name_explicit_cache(g_graph *g, fy_err *err);

const fb_backend *fb_find(ferry_format format);
/* By export.json / recipe name ("onnx") or alias ("dynamo"); NULL if unknown. */
const fb_backend *fb_find_name(const char *name);
/* "onnx" (comma-separated names of every backend in this build). */
const char *fb_names(void);

extern const fb_backend fb_onnx;
extern const fb_backend fb_openvino;
extern const fb_backend fb_pt2;

#endif
