/* internal.h — the structs behind the public handles (ferry_model, ferry_components,
 * ferry_exported). Only src/export/ (and white-box tests) include this. The pipeline here is
 * format-agnostic: the backend (src/backends/) decides the target, files and writing. */
#ifndef FERRY_EXPORT_INTERNAL_H
#define FERRY_EXPORT_INTERNAL_H

#include "model/tokenizer_files.h"
#include <sys/types.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "backends/backend.h"
#include "generate/generation.h"
#include "ir/ir.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "models/model.h"
#include "util/json.h"

struct ferry_model {
    fy_err err;
    char dir[4096];
    model_config cfg;
    bool cfg_loaded;
    ckpt *ck;
    const model_arch *arch;
    void *hparams;           /* the family's, from arch->read and arch->bind */
    char warning[512];       /* from arch->bind (e.g. an untied head), or "" */
    char *source;            /* the path or hub id as the caller gave it (export.json source) */
    char *revision;          /* as given, or NULL */
};


/* The decomposed, not yet lowered components of one export. */
struct ferry_components {
    ferry_model *model;
    ferry_export_config cfg;     /* the backend's defaults filled in */
    const fb_backend *backend;
    bool generation;
    ferry_generation_config gen;
    int n;
    struct {
        const char *name, *role;
        model_io io;
        const char *output_class; /* transformers' ModelOutput of its outputs */
        g_graph *graph;          /* semantic graph, checked */
    } items[MODEL_MAX_COMPONENTS];
    char *text;                  /* the last describe/dump result */
    char *warnings;
};

typedef struct exp_component {
    char *name;              /* "model", "prefill", "decode", ... */
    char *role;
    char *file;              /* "model.onnx" */
    char *data_file;         /* "model.onnx.data" */
    bool float_weights;      /* the family kept its weights float under a quantizer
                                (model_io.keep_float) */
} exp_component;

struct ferry_exported {
    fy_err err;
    ferry_model *model;      /* borrowed; NULL for a loaded export */
    ferry_export_config cfg;
    const fb_backend *backend; /* NULL for a loaded export */
    char *dir;               /* where it was saved or loaded from */
    cJSON *manifest;
    char *manifest_text;
    int n_components;
    exp_component comps[MODEL_MAX_COMPONENTS];
    be_component lowered[MODEL_MAX_COMPONENTS]; /* what the backend writes (built exports) */
    char *warnings;          /* newline-separated, may be NULL */
    char *save_warnings;     /* the last save's, likewise */
    bool generation;         /* made by ferry_export_for_generation */
    ferry_generation_config gen;
    tok_files tokenizer;     /* the checkpoint's, carried into the export (built exports) */
    char *genai_text;        /* genai_config.json, when onnxruntime-genai can run the export */
    char *genai_processor_text; /* GENAI_PROCESSOR_FILE, when it runs a vision-language one */
    char *description;       /* the last ferry_exported_describe text */
    dev_t dir_dev;           /* the directory saved or loaded (dir), so that a validation */
    ino_t dir_ino;           /* record never lands in an export swapped in since (--force) */
    bool sizes_unchecked;    /* loaded to be replaced (--force): files of another size than
                                export.json's "bytes" are still the export's own */
};

/* ferry_exported_load; with `check_sizes` false, files whose size differs from export.json's
 * "bytes" load (an export cut short is still ferry's to replace). */
ferry_status exp_load(const char *dir, const char *subfolder, bool check_sizes,
                      struct ferry_exported **out);

/* onnxruntime-genai's config (genai_config.c): NULL when it can run export `e` as it is, else
 * why not ("" for an export it has nothing to do with: not ONNX, not for generation). */
const char *genai_unsupported(const struct ferry_exported *e);
/* genai_config.json's text for an export it can run (malloc'd; NULL and `err` on failure). */
char *genai_config_text(const struct ferry_exported *e, fy_err *err);
/* The processor genai runs before the model, for a vision-language or speech export it runs:
 * its file's name (NULL: none) and text (NULL and `err` set on failure). */
const char *genai_processor_file(const struct ferry_exported *e);
char *genai_processor_text(const struct ferry_exported *e, fy_err *err);
/* Whether `name` is a processor file genai_processor_file names. */
bool genai_is_processor_file(const char *name);
#define GENAI_CONFIG_FILE "genai_config.json"
/* onnxruntime-genai's image processor steps, for a vision-language export */
#define GENAI_PROCESSOR_FILE "genai_processor_config.json"
/* its log-mel feature extraction, for a speech export (the name it reads for Whisper) */
#define GENAI_AUDIO_PROCESSOR_FILE "audio_processor_config.json"

/* Appends `line` to the newline-separated `*warnings` (NULL: none yet). */
ferry_status exp_add_warning(char **warnings, const char *line);

/* Manifest (manifest.c) */
extern const json_limits exp_manifest_limits;
cJSON *manifest_build(const struct ferry_exported *e, fy_err *err);
/* The rules every export.json obeys, whichever schema (ferry's, transformers'): no object repeats
 * a key, and no key or string holds a character text_quote would escape. Errors name
 * `dir`/export.json, the key and the byte. manifest_validate applies it first. */
ferry_status manifest_check_tree(const cJSON *m, const char *dir, fy_err *err);
/* `components` of an export.json (ferry's or transformers'): a non-empty object of at most
 * MODEL_MAX_COMPONENTS entries, else one line naming `dir`/export.json. */
ferry_status manifest_check_components(const cJSON *comps, const char *dir, fy_err *err);
/* Loads export.json `m` into `e`, either schema: ferry's, or transformers' (transformers.c). */
ferry_status manifest_validate(const cJSON *m, const char *dir, struct ferry_exported *e,
                               fy_err *err);
/* A file export.json names for component `comp`: a plain relative path to a regular file inside
 * `dir`, links resolved; its size into `size` (may be NULL). */
ferry_status manifest_check_file(const char *dir, const char *comp, const char *rel,
                                 long long *size, fy_err *err);
/* Component `comp`'s program file `rel` (manifest_check_file passed) is one of `format`'s
 * ("onnx", "openvino", "pt2", or transformers' "dynamo", "executorch"): its suffix, an
 * OpenVINO .xml's .bin beside it, and with `content` its first bytes (a --force replacing a
 * damaged export reads only names, as it skips the recorded sizes). */
ferry_status manifest_check_program(const char *dir, const char *comp, const char *rel,
                                    const char *format, bool content, fy_err *err);
/* Component `c`'s "bytes" and "crc32" (manifest_files.c), when present: one entry per file it
 * names (its file and data files), no other; sizes whole numbers below 2^53, CRC-32s eight
 * lowercase hex digits. Errors name export.json, the component and the file. */
ferry_status manifest_check_records(const cJSON *c, const char *dir, fy_err *err);
/* File `rel` of component `c`, `size` bytes on disk, against the size "bytes" records for it
 * (manifest_check_records passed). */
ferry_status manifest_check_size(const cJSON *c, const char *dir, const char *rel,
                                 long long size, fy_err *err);
/* Where export.json records CRCs, each component's file, data files and role are the ones
 * format `b`'s writer gives it (what its programs read, so that the CRCs cover them). */
ferry_status manifest_check_layout(const cJSON *comps, const fb_backend *b, const char *dir,
                                   fy_err *err);
/* Each component's "bytes" in export.json: the size of its file and data files as written into
 * `dir`, which loading compares (a copy cut short, a disk that filled); and its "crc32": each
 * file's CRC-32 as `written` reports it, which ferry_exported_verify compares (a file replaced
 * by another of the same size, a graph edited in place). */
ferry_status manifest_record_sizes(cJSON *m, const char *dir, const be_written *written,
                                   fy_err *err);
/* A component's metadata "cache" (manifest_cache.c): each pair joins one layer's same cache
 * tensor (past_key_values.L.key -> present.L.key, and the in-place and torch spellings), every
 * layer's key and value once, and where the tensors are the program's inputs and outputs their
 * shapes and dtypes are the cache's. Errors name export.json, the component and the pair. */
ferry_status manifest_check_cache(const cJSON *comp, const char *dir, fy_err *err);
/* Reads every file of every component of export.json `m` (manifest_validate passed) and
 * compares its CRC-32 with the one "crc32" records; a component without "crc32" (an export
 * by an older ferry, or transformers') is not read. A file read once serves every component
 * naming it. */
ferry_status manifest_verify_files(const cJSON *m, const char *dir, fy_err *err);
/* torch's name of a dtype ("float32", "int64"), as transformers writes it. */
const char *exp_torch_dtype_name(ferry_dtype dt);
cJSON *export_config_to_json(const ferry_export_config *cfg);

/* A recipe's format-option keys (format_options.c), collected as the recipe is read (each
 * key's last value) and applied once it is all read, so that a key and its alias are compared
 * whatever their order. */
#define EXP_RECIPE_OPTIONS (2 * FERRY_MAX_FORMAT_OPTIONS)
typedef struct exp_recipe_options {
    int n;
    struct exp_recipe_given {
        const be_option *opt;
        const char *key;     /* as the recipe spells it (the option's key or its alias) */
        bool alias, null;
        char text[FERRY_OPTION_VALUE_MAX]; /* canonical */
    } given[EXP_RECIPE_OPTIONS];
} exp_recipe_options;
/* "opset, ort_fusions (onnx); stateful, compress_to_fp16 (openvino); ...", for messages. */
void exp_format_option_keys(char *buf, size_t size);
/* Whether `key` is some format's option (or an alias of one). */
bool exp_is_format_option(const char *key);
ferry_status exp_recipe_option(exp_recipe_options *ro, const char *key, const cJSON *item,
                               char *eb, size_t es);
ferry_status exp_recipe_options_apply(const exp_recipe_options *ro, ferry_export_config *cfg,
                                      char *eb, size_t es);
/* Shared by export_config.c (the CLI's syntax) and export_recipe.c (JSON recipes), both of
 * which fill a ferry_export_config and word their errors alike. */
#define EXP_INPUT_LIST "input_ids, attention_mask, position_ids, token_type_ids"
/* Writes the message into buf (quoted: names and keys from a recipe may hold control bytes)
 * and returns st. */
ferry_status exp_say(char *buf, size_t size, ferry_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Adds one dynamic dim (input, axis, symbol, [min, max]), checked. */
ferry_status exp_add_dim(ferry_export_config *cfg, const char *input, long long axis,
                         const char *symbol, long long min, long long max, char *eb, size_t es);
/* Sets input `input`'s example shape (replacing one it had). */
ferry_status exp_set_example(ferry_export_config *cfg, const char *input, int rank,
                             const int64_t *dims, char *eb, size_t es);
/* One input name (`len` bytes at `name`) into *bits; `what` names the option in messages. */
ferry_status exp_add_input(unsigned *bits, const char *name, size_t len, const char *what,
                           char *eb, size_t es);
/* Refuses a set of inputs without input_ids. */
ferry_status exp_inputs_done(unsigned bits, const char *what, char *eb, size_t es);
/* The name of the FERRY_INPUT_* bit i, or NULL past the last. */
const char *exp_input_name(unsigned i);
/* The FERRY_INPUT_* bit of input `name`, or 0 (export_config.c). */
unsigned exp_input_bit(const char *name);
/* The inputs a plain export's graph takes: cfg->inputs, or the default (input_ids and
 * attention_mask) when 0. */
unsigned exp_plain_inputs(const ferry_export_config *cfg);
/* Refuses dims and example shapes a caller filled in by hand that no parser would have made
 * (counts past the arrays, names without their NUL, extents out of range) (axes.c). */
ferry_status exp_check_shapes_given(const ferry_export_config *cfg, fy_err *err);
/* The logical axes of an export as resolved (axes.c): each the model declares, its dim and the
 * extent traced. */
typedef struct exp_axes {
    int n;
    const char *name[MODEL_MAX_AXES];
    g_dim dim[MODEL_MAX_AXES];
    int64_t example[MODEL_MAX_AXES];
} exp_axes;
/* The axes `arch` declares (model_token_axes when it declares none); *n their count. */
const model_axis *exp_model_axes(const model_arch *arch, int *n);
/* The index of the axis named `name`, or -1. */
int exp_axis_index(const exp_axes *a, const char *name);
/* Stops the axis named sequence at the model's longest sequence (arch->max_sequence): a
 * symbol's max becomes it where unbounded; a larger max, or a static or example extent past
 * it, is refused naming the bound. */
ferry_status exp_bound_sequence(const model_arch *arch, const void *hparams, const exp_axes *a,
                                g_symtab *syms, fy_err *err);
/* "input_ids, attention_mask, position_ids": those of `arch`'s inputs `takes` holds (an input
 * ferry has no bit for is the model's own, always listed). */
void exp_input_list(const model_arch *arch, unsigned takes, char *buf, size_t size);
/* Refuses `takes` naming an input `arch` does not have, naming it and the model's inputs. */
ferry_status exp_check_model_inputs(const model_arch *arch, unsigned takes, fy_err *err);
/* Refuses inputs bits that name no input or leave out input_ids (0, the default, passes). */
ferry_status exp_check_inputs(unsigned inputs, fy_err *err);

/* Provenance (provenance.c): export.json's "source" (the checkpoint an export was made from)
 * and "validated_with" (the package versions a validation passed with). */
cJSON *provenance_source(const ferry_model *m);
/* Checks the two keys when present; errors name `dir`/export.json and the key. */
ferry_status provenance_check(const cJSON *manifest, const char *dir, fy_err *err);
/* Remembers which directory `e->dir` is (after a save or load). */
void provenance_note_dir(struct ferry_exported *e);

/* Symbolic axes (axes.c): the dims of the model's logical axes (those it declares: "batch",
 * "sequence", ...) from the export config's dynamic flag, explicit dynamic dims (checked
 * against the inputs the model declares and the export takes, `takes` of FERRY_INPUT_* bits)
 * and example shapes by input. Symbols are added to `syms`; the extents traced are written
 * back into cfg's example shapes. The default example sequence is at most `sequence_cap`
 * where that is positive (a static cache's length), less one with a static sequence axis, and
 * at most `model_max` where that is positive (the model's longest sequence); `prompt`, where
 * positive, replaces the axis's own default (model_arch.generation_prompt). `fixed_batch`
 * keeps the batch axis at its example unless a dim names it (fb_backend's
 * static_cache_batch_fixed, for a static cache). */
ferry_status exp_resolve_axes(ferry_export_config *cfg, const model_arch *arch, unsigned takes,
                              int64_t sequence_cap, int64_t model_max, int64_t prompt,
                              bool fixed_batch,
                              g_symtab *syms, exp_axes *out, fy_err *err);
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
