/* backend.h — what a format provides to the format-agnostic export pipeline (src/export): its
 * options (a table: options.c reads, checks and records them), the target its graphs are
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

typedef struct be_component {
    const char *name, *role;
    g_graph *graph;          /* lowered for the backend's target, finished */
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

/* One of a format's own options. The recipe, export.json, the CLI (its flag and --help) and
 * ferry_export_config_set_option all read this table, so a format's options are declared here
 * once: the pipeline and the other formats never name them. The value lives in
 * ferry_export_config.options as canonical text ("true", "23", "cpu"), read by be_option. */
typedef enum be_option_type { BE_OPTION_BOOL, BE_OPTION_INT, BE_OPTION_CHOICE } be_option_type;

typedef struct be_option {
    const char *key;          /* the recipe's and export.json's key: "opset" */
    const char *alias;        /* a second recipe key for the option, whose null means the
                                 default (transformers' "opset_version"), or NULL */
    be_option_type type;
    const char *def;          /* the default, canonical ("21", "none"); the format's configure
                                 may settle another when it is not set (ONNX's fused opset) */
    int64_t min, max;         /* INT: the range */
    const char *const *choices; /* CHOICE: NULL-terminated, the default first; a recipe may
                                   give the default as null */
    const char *flag;         /* the CLI's flag: "--opset" */
    const char *flag_value;   /* a flag that takes no argument: the value it sets ("false");
                                 NULL: the flag's argument is the value */
    const char *metavar;      /* the argument in --help: "N" */
    const char *help;         /* --help's text, lines split by '\n' */
    bool always_recorded;     /* export.json records it at its default too: a reader needs it */
    bool generation_only;     /* it changes generation exports only (the CLI refuses its flag
                                 on a plain export) */
} be_option;

typedef struct fb_backend {
    const char *name;        /* "onnx": --format, the recipe's export_format, export.json */
    const char *alias;       /* another name --format and the recipe take, or NULL ("dynamo":
                                the guide's DynamoExporter writes pt2) */
    ferry_format format;
    const char *title;       /* as messages name the format: "ONNX", "OpenVINO", "pt2" */
    const be_option *options; /* its own options (NULL: none) */
    int n_options;
    /* Checks the options in `cfg` taken together (its own are parsed already: options.c), and
     * settles the defaults that depend on others (be_option_set). */
    ferry_status (*configure)(ferry_export_config *cfg, fy_err *err);
    /* The target the semantic graphs are lowered for (its opts may point into `cfg`, which
     * outlives the lowering). */
    void (*target)(const ferry_export_config *cfg, g_target *out);
    /* Adapts a lowered graph to the format's conventions (e.g. the names of cache states). */
    ferry_status (*finish)(g_graph *g, const ferry_export_config *cfg, fy_err *err);
    /* The placement policy: which files each component has. */
    ferry_status (*files)(be_component *comps, int n, fy_err *err);
    /* Whether a file of this name is one `files` makes ("model.pte"): what ferry may remove
     * of an export directory it left behind. */
    bool (*owns_file)(const char *name);
    /* Writes every component's files into `dir` (created exclusively, synced), each one's
     * CRC-32 into `written` (may be NULL). */
    ferry_status (*write)(const be_component *comps, int n, const ferry_export_config *cfg,
                          const char *dir, ws_progress *progress, be_written *written,
                          fy_err *err);
    /* Format-specific metadata of component graph `g` in export.json (e.g. "opset"). */
    void (*describe)(const ferry_export_config *cfg, const g_graph *g, struct cJSON *metadata);
    /* Its runtimes carry the cache themselves (OpenVINO's stateful models): a generation export
     * with `cfg` is one graph for the prompt and each token, never a prefill/decode pair.
     * NULL: never. */
    bool (*one_generation_graph)(const ferry_export_config *cfg);
    /* Where its runtime rounds activations to int8 next to quantized weights, a NaN weight
     * becomes a finite code there, so the outputs come out finite though the weights hold
     * NaN: the sentence that says so for `cfg` (quantized), with the setting that keeps NaN,
     * or NULL where the runtime computes in float. NULL hook: never. */
    const char *(*nonfinite_note)(const ferry_export_config *cfg);
    /* The state forms its printer writes with `cfg` (bits 1u << g_state_form): the plan gives
     * a generation export only a cache the format can carry (a growing cache needs GS_PAIR or
     * GS_VARIABLE; torch's programs write theirs into the caller's tensors, GS_MUTATED, so
     * only one of fixed size), and every lowered state must be of one of these forms. */
    unsigned (*state_forms)(const ferry_export_config *cfg);
    /* Its quantized rows hold whole blocks only, the smallest it takes being this many
     * elements (OpenVINO's compressed weights: 16; XNNPACK's int4: 32): a weight whose rows
     * are no whole number of them stays float (q_apply). 0: a row's last block may be short
     * (ONNX). */
    int whole_block_min;
    /* The runtime's execution provider a graph made with `cfg` is for (onnxruntime's "cuda"
     * for a graph of its CUDA kernels), which a runner must use; NULL: any (NULL hook:
     * always any). */
    const char *(*runtime_provider)(const ferry_export_config *cfg);
    /* A static cache's batch axis stays at the example's batch under dynamic=true (a dim on it
     * still makes it symbolic): its callers allocate the cache from the graph's input shapes,
     * where the cache length is to be the one symbol (the guide's onnxruntime loop), as
     * StaticCache is allocated for one batch. */
    bool static_cache_batch_fixed;
} fb_backend;

/* Names a graph's explicit cache as the guide does (cache_names.c): a state updated in place
 * (static cache) as input.<name> / output.<name>, an appended one as past_key_values.<l>.key ->
 * present.<l>.key. For the formats whose cache is the graph's inputs and outputs. */
ferry_status be_name_explicit_cache(g_graph *g, fy_err *err);
/* Names each cache input of a graph that writes its cache into its inputs (torch's and
 * ExecuTorch's programs), and an encoder-decoder's cross cache inputs and outputs, as a Python
 * identifier, "past_key_values_0_key": torch's module takes its inputs as keywords, its output
 * spec keys them by name, and both formats' runners feed them by these names. */
ferry_status be_name_mutated_cache(g_graph *g, fy_err *err);
/* A growing cache returned by a program whose inputs are keywords (torch's, with a dynamic
 * cache): named as be_name_explicit_cache names it, then every input and output as a Python
 * identifier ("past_key_values_0_key" -> "present_0_key"). */
ferry_status be_name_returned_cache(g_graph *g, fy_err *err);
/* For those formats: every cache state (the plan wrote it in place) becomes a mutation of its
 * input, named as be_name_mutated_cache says, and leaves the graph's outputs. `format` names
 * the format in the internal error for a state not written in place. */
ferry_status be_mutate_cache_inputs(g_graph *g, const char *format, fy_err *err);

/* Whether `name` is longer than `suffix` and ends with it (a file a format owns). */
bool be_name_ends_with(const char *name, const char *suffix);

/* --- options (options.c) --- */
/* `be`'s option named `key` (or its alias), or NULL. */
const be_option *be_option_find(const fb_backend *be, const char *key);
/* The value of `be`'s option `key` in `cfg`: what is set, else its default. BOOL 0 or 1, INT
 * the number, CHOICE the index in its choices; 0 for a key `be` does not have (an internal
 * misuse, caught by the tests that run each option). */
int64_t be_option_value(const ferry_export_config *cfg, const fb_backend *be,
                        const char *key);
/* Whether `cfg` sets `be`'s option `key` (at any value, its default too). */
bool be_option_is_set(const ferry_export_config *cfg, const fb_backend *be, const char *key);
/* The same value as its canonical text (a static string or cfg's own); NULL for an unknown key. */
const char *be_option_text(const ferry_export_config *cfg, const fb_backend *be, const char *key);
/* Sets `be`'s option `key` to `value` (a configure settling a default). */
ferry_status be_option_set(ferry_export_config *cfg, const fb_backend *be, const char *key,
                           int64_t value, fy_err *err);
/* Stores canonical `text` as option `o`'s value (under its own key), replacing one set before;
 * a count outside [0, FERRY_MAX_FORMAT_OPTIONS] or a full table is refused. */
ferry_status be_option_store(ferry_export_config *cfg, const be_option *o, const char *text,
                             fy_err *err);
/* Parses `text` as option `o`'s value: its canonical text into `canon`. Errors name `what`
 * ("recipe: 'opset'") and say what the option takes. */
ferry_status be_option_parse(const be_option *o, const char *what, const char *text,
                             char *canon, size_t size, fy_err *err);
/* What option `o` takes, for messages: "an integer from 17 to 23", "true or false",
 * "none, cpu, cuda, webgpu or dml". */
void be_option_expects(const be_option *o, char *buf, size_t size);
/* Every option set in `cfg` is one of `be`'s, with a value it takes; otherwise one line
 * naming the option, the format that has it and the export's format (set at any value: the
 * caller asked for something this format does not do). */
ferry_status be_options_check(const ferry_export_config *cfg, const fb_backend *be, fy_err *err);
/* Adds `be`'s options to export.json's export_config `o`: those always recorded (`always`),
 * or those set away from their default (!`always`), as JSON bools, numbers and strings. */
void be_options_to_json(const ferry_export_config *cfg, const fb_backend *be, bool always,
                        struct cJSON *o);

const fb_backend *fb_find(ferry_format format);
/* The i-th backend of this build (from 0), NULL past the last. */
const fb_backend *fb_at(int i);
/* By export.json / recipe name ("onnx") or alias ("dynamo"); NULL if unknown. */
const fb_backend *fb_find_name(const char *name);
/* "onnx" (comma-separated names of every backend in this build). */
const char *fb_names(void);

extern const fb_backend fb_onnx;
extern const fb_backend fb_openvino;
extern const fb_backend fb_pt2;
extern const fb_backend fb_executorch;

#endif
