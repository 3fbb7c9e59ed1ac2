/* ferry.h — the one public header of libferry: export Hugging Face checkpoints to deployable
 * programs (ONNX, OpenVINO IR, torch.export .pt2) from C, with no Python or PyTorch in the
 * export path.
 *
 * Conventions (borrowed from SQLite and Lua):
 *  - Every function returns a ferry_status; FERRY_OK is 0.
 *  - Handles are opaque. Each has a create/open and a free; free(NULL) is a no-op.
 *  - A handle keeps the message of its last error (library-owned, valid until the next call on
 *    that handle). Opening functions hand back a handle even on failure (unless memory ran out),
 *    so that the caller can read the message, then free it.
 *  - Option structs are filled by an *_init function first, so fields can be added later.
 *  - The library never prints, never exits. A handle may be used by one thread at a time;
 *    distinct handles are independent.
 */
#ifndef FERRY_H
#define FERRY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_VERSION "0.1.0"
#define FERRY_VERSION_NUMBER 1000 /* major*1000000 + minor*1000 + patch */

/* The version compiled into the library (may differ from FERRY_VERSION of the header in use). */
const char *ferry_version(void);

typedef enum ferry_status {
    FERRY_OK = 0,
    FERRY_ERR_INVALID_ARG = 1,  /* a caller mistake: bad option value, NULL where a value is due */
    FERRY_ERR_IO = 2,           /* a file could not be read or written */
    FERRY_ERR_FORMAT = 3,       /* a file is malformed: safetensors, JSON, manifest */
    FERRY_ERR_UNSUPPORTED = 4,  /* well-formed, but ferry does not handle it (yet) */
    FERRY_ERR_NOMEM = 5,
    FERRY_ERR_EXISTS = 6,       /* output exists and overwriting was not asked for */
    FERRY_ERR_NOSPACE = 7,      /* the disk or a file-size limit ran out while writing */
    FERRY_ERR_INTERNAL = 8,     /* a bug in ferry: please report it */
    FERRY_ERR_CANCELLED = 9     /* the caller asked the save to stop (ferry_export_config.cancel) */
} ferry_status;

/* A static, never-NULL description of a status code. */
const char *ferry_status_str(ferry_status status);

/* Element types, as safetensors names them. */
typedef enum ferry_dtype {
    FERRY_DTYPE_UNDEFINED = 0,
    FERRY_F32, FERRY_F16, FERRY_BF16, FERRY_F64,
    FERRY_I8, FERRY_I16, FERRY_I32, FERRY_I64,
    FERRY_U8, FERRY_U16, FERRY_U32, FERRY_U64,
    FERRY_BOOL, FERRY_F8_E4M3, FERRY_F8_E5M2,
    FERRY_U4, FERRY_I4,          /* 4-bit codes of quantized weights, two per byte */
    FERRY_DTYPE_COUNT
} ferry_dtype;

/* "fp32", "fp16", "bf16", ... for export precisions; safetensors' names ("F32", ...) otherwise. */
const char *ferry_dtype_name(ferry_dtype dtype);

/* Writes `text` into buf (of `size` bytes, at least 8) fit for one terminal line, and returns
 * buf: C0 controls, DEL and bytes that are not valid UTF-8 become \xNN; C1 controls (U+0080 to
 * U+009F), bidirectional formatting characters (U+202A-U+202E, U+2066-U+2069, ...) and invisible
 * format characters (zero-width spaces and joiners, soft hyphen, BOM, tag characters, ...)
 * become \uXXXX; text that does not fit ends in "...". Names and values read from files
 * (architecture names, tensor names, anything from export.json, paths) are untrusted: print
 * them through this. Error messages and warnings from the library are already escaped. Returns
 * "" if buf is NULL or size < 8. */
const char *ferry_escape(const char *text, char *buf, size_t size);

/* ---------------------------------------------------------------------------------------------
 * Models: a checkpoint directory (config.json + *.safetensors) opened without loading weights.
 */
typedef struct ferry_model ferry_model;

/* Opens `path_or_id`: a directory holding config.json and model.safetensors (or a sharded
 * model.safetensors.index.json), or a local Hugging Face hub cache id "org/name" resolved
 * offline under $HF_HOME/hub (default ~/.cache/huggingface/hub) to
 * models--org--name/snapshots/<rev>, where <rev> comes from `revision` (a commit hash or a ref
 * name under refs/; NULL means "main"). A revision with a directory is refused
 * (FERRY_ERR_INVALID_ARG): a directory has no revisions. Reads config.json,
 * generation_config.json when present, and every safetensors header; weights stay on disk until
 * an export streams them (with pread).
 * On failure *out still receives a handle carrying the message (NULL only when out of memory). */
ferry_status ferry_model_open(const char *path_or_id, const char *revision, ferry_model **out);
void ferry_model_free(ferry_model *model);
const char *ferry_model_errmsg(const ferry_model *model);
/* The architecture named in config.json ("LlamaForCausalLM", ...), as written there (print it
 * through ferry_escape); never NULL once opened. */
const char *ferry_model_architecture(const ferry_model *model);
/* The resolved checkpoint directory. */
const char *ferry_model_dir(const ferry_model *model);
/* The inputs the model's forward has, as FERRY_INPUT_* bits (input_ids, attention_mask and
 * position_ids for a causal LM; token_type_ids too for BERT); 0 before it is opened. A
 * tokenizer's other outputs are not the model's. */
unsigned ferry_model_inputs(const ferry_model *model);
/* Comma-separated list of the architectures this build can export. Static string. */
const char *ferry_supported_architectures(void);

/* ---------------------------------------------------------------------------------------------
 * Export configuration — the C twin of transformers' OnnxConfig / AutoExportConfig.
 */
/* ONNX; OpenVINO IR; torch.export's .pt2 (the guide's DynamoExporter, "dynamo" in a recipe);
 * ExecuTorch's .pte (the guide's ExecutorchExporter) */
typedef enum ferry_format {
    FERRY_FORMAT_ONNX = 1, FERRY_FORMAT_OPENVINO = 2, FERRY_FORMAT_PT2 = 3,
    FERRY_FORMAT_EXECUTORCH = 4
} ferry_format;

/* The format named `name` as --format and a recipe's export_format spell it ("onnx");
 * FERRY_ERR_UNSUPPORTED if this build has no such format. */
ferry_status ferry_format_from_name(const char *name, ferry_format *out);
/* "onnx" — the comma-separated names of every format this build writes. Static string. */
const char *ferry_supported_formats(void);

#define FERRY_MAX_DIM_SPECS 16
#define FERRY_NAME_MAX 64

/* A dim's min and max lie in [0, FERRY_DIM_BOUND_MAX] (2^40): far above any real extent, and
 * exact in JSON (a double), so a recipe recording them reads back the same. */
#define FERRY_DIM_BOUND_MAX ((int64_t)1 << 40)

/* One explicitly symbolic axis: `input`'s axis `axis` is named `symbol`, ranging [min, max]
 * (max 0 = unbounded; both at most FERRY_DIM_BOUND_MAX). Like torch.export.Dim in the guide's
 * dynamic_shapes. */
typedef struct ferry_dim_spec {
    char input[FERRY_NAME_MAX];
    int axis;
    char symbol[FERRY_NAME_MAX];
    int64_t min, max;
} ferry_dim_spec;

#define FERRY_MAX_EXAMPLES 8
#define FERRY_MAX_EXAMPLE_RANK 8

/* The shape `input` is traced at: its extents, one per axis (like the guide's example inputs:
 * a tokenizer's input_ids [1, 8], a feature extractor's input_features [1, 80, 3000]). Each
 * extent is the example of the logical axis the model says that axis of the input follows;
 * inputs sharing an axis must agree. */
typedef struct ferry_example_shape {
    char input[FERRY_NAME_MAX];
    int rank;
    int64_t dims[FERRY_MAX_EXAMPLE_RANK];
} ferry_example_shape;

/* Called during long exports; `done` and `total` count bytes of weights written. */
typedef void (*ferry_progress_fn)(void *user, uint64_t done, uint64_t total, const char *what);

/* An option left to ferry: it decides from the rest of the configuration (see each field). */
#define FERRY_AUTO (-1)

/* Options of a generation export (see ferry_export_for_generation). */
typedef struct ferry_generation_config {
    /* Decode's query length: 1 (0, the guide's default), symbolic (1; needs dynamic shapes), or
     * FERRY_AUTO (-1, what init sets): symbolic where it costs nothing — dynamic shapes and the
     * dynamic cache, where decode then also takes the prompt, so onnxruntime-genai runs the
     * export — and 1 otherwise (a static cache keeps its prefill/decode pair). */
    int multi_token_decode;
    int static_cache;             /* cache_implementation = "static" */
    int64_t max_cache_len;        /* static cache length (required with static_cache) */
} ferry_generation_config;

void ferry_generation_config_init(ferry_generation_config *gen);

/* Weight-only block quantization, round to nearest (the recipe's "quantizer"). Each weight row
 * is cut into blocks of `block_size` inputs; a block keeps one scale (and, asymmetric, one zero
 * point) in the export dtype, its values become `bits`-bit codes. The arithmetic and packing
 * are onnxruntime's own (src/quant/rtn.h). The weights of every linear layer are quantized;
 * norms and biases stay float. */
/* How a quantizer chooses each block's scale: RTN takes the block's range as it is
 * (onnxruntime's quantizer, byte for byte); MSE (int4 only) searches up to 17 shrinks of it for
 * the least error weighted by each weight's square (src/quant/rtn.h), which costs export time. */
typedef enum ferry_quant_method { FERRY_QUANT_RTN = 0, FERRY_QUANT_MSE } ferry_quant_method;

typedef struct ferry_quantizer {
    int bits;                     /* 0: no quantization (default); 4 or 8 */
    int block_size;               /* 16, 32 (default when 0), 64, 128 or 256; a row's last
                                     block may be short */
    int asymmetric;               /* 1: a zero point per block; 0: symmetric (default) */
    int accuracy_level;           /* MatMulNBits' accuracy_level, 0-4 (fused graphs only); -1:
                                     the default (4 when fused) */
    int embeddings;               /* 1: quantize the embedding table too (default 0) */
    int lm_head;                  /* 1: quantize the head (default, set by init): a causal
                                     LM's lm_head, a classifier's output layer; 0 keeps it
                                     float */
    ferry_quant_method method;    /* how each block's scale is chosen (default RTN) */
} ferry_quantizer;

/* The graph inputs of a plain export ("model"), as bits of ferry_export_config.inputs. A
 * transformers export takes the inputs it was traced with, and the guide calls one with a
 * tokenizer's output: so by default ferry's plain graph takes what the family's tokenizer
 * returns (input_ids and attention_mask; token_type_ids too for an encoder that has token
 * types) and computes the positions inside, as transformers' forward does when given none
 * (0, 1, ..., sequence - 1 in every row, whatever the mask). POSITION_IDS makes them an input
 * instead (generate()'s cumsum(mask) - 1, or any other); leaving ATTENTION_MASK out makes every
 * token real, and TOKEN_TYPE_IDS out every token of type 0, as transformers' forward without
 * them. input_ids is always taken; an input the model does not have is refused. Generation
 * components take input_ids, attention_mask and position_ids, as generate() feeds them. */
#define FERRY_INPUT_IDS (1u << 0)            /* "input_ids" */
#define FERRY_INPUT_ATTENTION_MASK (1u << 1) /* "attention_mask" */
#define FERRY_INPUT_POSITION_IDS (1u << 2)   /* "position_ids" */
#define FERRY_INPUT_TOKEN_TYPE_IDS (1u << 3) /* "token_type_ids" (encoders that have them) */

#define FERRY_MAX_FORMAT_OPTIONS 8
#define FERRY_OPTION_KEY_MAX 40
#define FERRY_OPTION_VALUE_MAX 24

/* One format option as set: "opset" "23", "stateful" "false", "ort_fusions" "cpu". */
typedef struct ferry_format_option {
    char key[FERRY_OPTION_KEY_MAX];
    char value[FERRY_OPTION_VALUE_MAX];
} ferry_format_option;

typedef struct ferry_export_config {
    ferry_format format;          /* FERRY_FORMAT_ONNX (default), _OPENVINO, _PT2 or
                                     _EXECUTORCH */
    int dynamic;                  /* 1: every axis symbolic (each logical axis the model
                                     declares: batch, sequence, ...) */
    ferry_dim_spec dims[FERRY_MAX_DIM_SPECS];
    int n_dims;                   /* explicit symbolic axes; the others are static */
    /* The traced extents (a static axis's size, a symbolic one's example), by input name
     * (ferry_export_config_add_example; the recipe's example_shapes). An axis no example names
     * takes the model's default (batch 1, sequence 8), moved to a dynamic dim's min where
     * outside its range; a value given outside its dim's range is an error. The export
     * records the extents traced, as the shapes of the inputs that name every axis. */
    ferry_example_shape examples[FERRY_MAX_EXAMPLES];
    int n_examples;
    /* Shortcuts for the examples of the axes named batch and sequence (0: not given); an
     * example shape that says otherwise is refused. */
    int64_t example_batch;
    int64_t example_sequence;
    ferry_dtype dtype;            /* FERRY_F32 (default), FERRY_F16 or FERRY_BF16 */
    ferry_progress_fn progress;   /* optional */
    void *progress_user;
    int for_generation;           /* ferry_export makes the generation components */
    ferry_generation_config generation;
    ferry_quantizer quantizer;
    int skip_tokenizer;           /* 1: do not carry the checkpoint's tokenizer and chat-template
                                     files (default 0: every export carries those it has) */
    unsigned inputs;              /* plain exports: FERRY_INPUT_* bits, input_ids among them
                                     (ferry_export_config_set_inputs parses names); 0 (default):
                                     input_ids and attention_mask. A generation export refuses
                                     any other value than 0 */
    /* Each format's own options (ONNX's opset and ort_fusions, OpenVINO's stateful and
     * compress_to_fp16, pt2's model_output, ...: ferry_format_option_describe lists them), as
     * key and canonical value text, set by ferry_export_config_set_option, a recipe's keys or
     * the CLI's flags. The export's format reads its own; another format's option, at any
     * value, is refused, naming the option and the format it belongs to. */
    ferry_format_option options[FERRY_MAX_FORMAT_OPTIONS];
    int n_options;
    /* Optional (NULL: none). Once *cancel is non-zero, ferry_exported_save stops at its next
     * band of weights (tens of milliseconds), removes everything it wrote and returns
     * FERRY_ERR_CANCELLED; an existing export at the destination is untouched. A signal
     * handler may set it: it is read atomically, and an int is what sig_atomic_t is wherever
     * ferry builds (the CLI sets it on SIGINT, SIGTERM and SIGHUP). A save that has already
     * swapped its export in completes. */
    volatile int *cancel;
    /* 1: a vision-language checkpoint's language model alone, as the text-only causal LM it
     * is (Gemma3ForConditionalGeneration: its Gemma3ForCausalLM; the recipe's "text_only");
     * the vision tower and projector are left out. Such a checkpoint is refused without it,
     * and a text model is refused with it. */
    int text_only;
    /* Optional (NULL: none), OpenVINO exports only. A directory holding openvino-tokenizers'
     * conversion of the checkpoint's tokenizer: openvino_tokenizer.xml/.bin and
     * openvino_detokenizer.xml/.bin, which openvino-genai's pipelines read beside the model.
     * Each one there is read (a regular file, not a link, at most 64 MiB) when the export is
     * made, carried into it and listed in export.json's tokenizer_files with the checkpoint's
     * own; an .xml needs its .bin; any other entry is refused by name. The string is borrowed:
     * it must stay valid until ferry_export (ferry_components_export) returns. ferry converts
     * nothing itself (the converter is Python): its Python package and the `ferry` command pip
     * installs convert into a temporary directory and pass it here. Ignored with
     * skip_tokenizer. */
    const char *converted_tokenizer_dir;
} ferry_export_config;

void ferry_export_config_init(ferry_export_config *cfg);
/* An initialized config on the heap, for bindings that hold it as an opaque handle (NULL when
 * out of memory); ferry_export_config_free releases it. */
ferry_export_config *ferry_export_config_new(void);
void ferry_export_config_free(ferry_export_config *cfg);
/* Sets cfg->cancel (see the field): for bindings that do not mirror the struct. */
void ferry_export_config_set_cancel(ferry_export_config *cfg, volatile int *cancel);
/* Sets cfg->converted_tokenizer_dir (see the field; borrowed, NULL unsets it): for bindings that
 * do not mirror the struct. */
void ferry_export_config_set_converted_tokenizer_dir(ferry_export_config *cfg, const char *dir);

/* Sets format option `key` (a format's recipe key, or its alias: "opset_version") to `value`
 * as text ("true", "23", "cpu"); NULL `value` unsets it (its default). The key must be an option
 * of some format and the value one it takes (FERRY_ERR_INVALID_ARG otherwise, the message
 * saying what it takes); whether it is the export's format's is checked when the export
 * starts (ferry_export_config_check). */
ferry_status ferry_export_config_set_option(ferry_export_config *cfg, const char *key,
                                            const char *value, char *errbuf,
                                            size_t errbuf_size);
/* The canonical text set for format option `key`, or NULL when it is not set. */
const char *ferry_export_config_option(const ferry_export_config *cfg, const char *key);

/* One format option as its format declares it (the CLI builds its flags and --help from these). */
typedef struct ferry_format_option_info {
    const char *format;       /* "onnx" */
    const char *key;          /* "opset" (the recipe's and export.json's key) */
    const char *alias;        /* another recipe key for it ("opset_version"), or NULL */
    const char *default_value; /* canonical text ("21", "true", "none") */
    const char *expects;      /* what it takes: "an integer in [17, 23]", "true or false" */
    const char *flag;         /* the CLI's flag: "--opset" */
    const char *flag_value;   /* a flag without an argument: the value it sets; NULL: the flag
                                 takes the value as its argument */
    const char *metavar;      /* the flag's argument in --help ("N"), or NULL */
    const char *help;         /* --help's text, lines split by '\n' */
    int generation_only;      /* 1: it changes generation exports only (its flag given without
                                 --for-generation is a usage error) */
} ferry_format_option_info;

/* The i-th format option of this build (every format's, from 0): FERRY_OK, or
 * FERRY_ERR_INVALID_ARG past the last. The strings are static. */
ferry_status ferry_format_option_describe(int i, ferry_format_option_info *out);
/* sizeof(ferry_export_config) as this library was built: bindings that mirror the struct check
 * it before use. */
size_t ferry_export_config_size(void);

/* Fills `cfg` from a JSON recipe whose keys follow AutoExportConfig.from_dict: "export_format",
 * "dynamic", "dynamic_shapes" ({"input_ids": {"0": "batch" | {"name":..,"min":..,"max":..}}}),
 * "dtype", "example_shapes" ({"input_ids": [1, 8]}), and for generation exports
 * "for_generation", "multi_token_decode" and "generation_config" ({"cache_implementation":
 * "static" | "dynamic", "max_cache_len": N}), "quantizer" (null, "int4", "int8", or {"bits":
 * 4 | 8, "block_size": N, "symmetric": bool, "accuracy_level": 0-4, "quantize_embeddings":
 * bool, "quantize_lm_head": bool, "method": "rtn" | "mse"}, omitted fields keeping their
 * defaults), ferry's "input_names" (a plain export's graph inputs, a list of "input_ids",
 * "attention_mask", "position_ids", "token_type_ids"; null or absent: the default, see
 * ferry_export_config.inputs), and every format's options by their keys (ONNX's "opset" and
 * "ort_fusions", OpenVINO's "stateful" and "compress_to_fp16", pt2's "model_output":
 * ferry_format_option_describe), a JSON bool, number or string, null for the default.
 * Unknown keys are an error. `errbuf` (may be NULL) receives a message on failure. */
ferry_status ferry_export_config_from_json(ferry_export_config *cfg, const char *json,
                                           char *errbuf, size_t errbuf_size);

/* Checks `cfg` as an export would before reading any checkpoint: its format, dtype, quantizer
 * and the options its format takes together (compress_to_fp16 with dtype fp16, an opset for
 * OpenVINO, ...). FERRY_OK, or the status an export with it would fail with, and the message
 * in `errbuf` (may be NULL). `cfg` is not changed. What depends on the model (its dims, its
 * rows and a block size) is checked by the export itself. */
ferry_status ferry_export_config_check(const ferry_export_config *cfg, char *errbuf,
                                       size_t errbuf_size);

/* Parses "NAME:AXIS=SYMBOL[:MIN:MAX]" (the CLI's --dim; AXIS, MIN and MAX decimal integers,
 * nothing else) and appends it to cfg->dims. A number too large for 64 bits or a bound outside
 * [0, FERRY_DIM_BOUND_MAX] is FERRY_ERR_INVALID_ARG naming it. */
ferry_status ferry_export_config_add_dim(ferry_export_config *cfg, const char *spec,
                                         char *errbuf, size_t errbuf_size);

/* Parses "NAME=D0xD1x..." (the CLI's --example-shape: "input_ids=1x8"; each extent a positive
 * decimal integer) and sets input NAME's example shape, replacing one it had. A malformed spec,
 * an extent out of range (1 to 2^24) or more than FERRY_MAX_EXAMPLES inputs is
 * FERRY_ERR_INVALID_ARG naming it; whether the model has the input, and that many axes, is
 * checked by the export. */
ferry_status ferry_export_config_add_example(ferry_export_config *cfg, const char *spec,
                                             char *errbuf, size_t errbuf_size);

/* Sets cfg->inputs from comma-separated input names ("input_ids,attention_mask,position_ids",
 * the CLI's --inputs; any order, each once). A name ferry's graphs do not take, one given
 * twice, an empty one, or a list without input_ids is FERRY_ERR_INVALID_ARG naming it. */
ferry_status ferry_export_config_set_inputs(ferry_export_config *cfg, const char *names,
                                            char *errbuf, size_t errbuf_size);

int ferry_default_opset(void);
int ferry_min_opset(void);
int ferry_max_opset(void);

/* ---------------------------------------------------------------------------------------------
 * Exported models: what an export produced (in memory, weights still lazy), or what a saved
 * export directory holds.
 */
typedef struct ferry_exported ferry_exported;

/* Builds the export of `model` under `cfg`: graphs are made and checked, weights stay lazy.
 * The result refers to `model`, which must outlive it. On failure the message is on the model
 * handle and *out is NULL. */
ferry_status ferry_export(ferry_model *model, const ferry_export_config *cfg, ferry_exported **out);

/* ---------------------------------------------------------------------------------------------
 * Generation export — the twins of export_for_generation and decompose_for_generation.
 *
 * Components (each its own graph; inputs input_ids, attention_mask, position_ids; output logits):
 *  - dynamic cache (default): "prefill" (no cache in; present.<l>.key/value out) and "decode"
 *    (past_key_values.<l>.key/value [batch, kv_heads, past_sequence, head_dim] in,
 *    present.<l>.* out, attention_mask [batch, past_sequence + sequence]); decode's query
 *    length is the symbol "sequence" with multi_token_decode (the default with dynamic shapes),
 *    else 1.
 *  - static cache: the cache is a fixed buffer [batch, kv_heads, max_cache_len, head_dim] plus a
 *    per-layer write counter, as input.past_key_values.<l>.{key,value,cumulative_length} /
 *    output.past_key_values.<l>.* pairs meant to be bound to one buffer each; attention_mask is
 *    bool [batch, 1, sequence, max_cache_len]. With multi_token_decode a single "decode" serves
 *    prompt and steps; without it, "prefill" (query symbolic) and "decode" (query 1).
 */
typedef struct ferry_components ferry_components;

/* Decomposes `model` into the components `cfg` asks for — "model" for a plain export, the
 * generation components (below) when cfg->for_generation — as checked graphs that can be
 * described, dumped or exported one by one. The twin of decompose_for_generation for any
 * export. cfg->generation other than its defaults without cfg->for_generation is an error
 * (FERRY_ERR_INVALID_ARG: it would change nothing). Errors are on the model handle. */
ferry_status ferry_decompose(ferry_model *model, const ferry_export_config *cfg,
                             ferry_components **out);

/* Decomposes `model` into the generation components described above, as graphs that can be
 * inspected (ferry_components_describe) or exported one by one (ferry_components_export).
 * `gen` at its defaults (ferry_generation_config_init) takes cfg->generation (a recipe's
 * generation_config and multi_token_decode); where both are set they must be equal.
 * Errors (on the model handle): multi_token_decode without dynamic shapes, static_cache
 * without max_cache_len, max_cache_len below the example prompt length, an architecture
 * without generation support. */
ferry_status ferry_decompose_for_generation(ferry_model *model, const ferry_export_config *cfg,
                                            const ferry_generation_config *gen,
                                            ferry_components **out);
void ferry_components_free(ferry_components *components);
int ferry_components_count(const ferry_components *components);
const char *ferry_components_name(const ferry_components *components, int index);
const char *ferry_components_role(const ferry_components *components, int index);
/* A text description of one component: inputs and outputs as the export format names them, with
 * dtypes and symbolic shapes, and the count of each semantic op. Owned by the handle, valid
 * until the next call on it; NULL on failure (the message is on the model handle). */
const char *ferry_components_describe(ferry_components *components, int index);
/* Which form of a component's graph ferry_components_dump prints. */
typedef enum ferry_graph_stage {
    FERRY_STAGE_SEMANTIC = 0,   /* as the architecture built it: semantic ops (attention,
                                   rms_norm, rope, linear, ...) over lazy checkpoint weights */
    FERRY_STAGE_LOWERED = 1     /* lowered for the export format's target, as it is written */
} ferry_graph_stage;

/* The graph of one component as text: one line per input, weight (with its checkpoint
 * source), constant, node (op, inputs, attributes, output dtypes and symbolic shapes), output
 * and cache state. Deterministic, for reading and for golden tests. Owned by the handle, valid
 * until the next call on it; NULL on failure (the message is on the model handle). */
const char *ferry_components_dump(ferry_components *components, int index,
                                  ferry_graph_stage stage);

/* Lowers the named components (`names` NULL or `n_names` 0: all) into an export ready to save.
 * The result refers to the model, which must outlive it. Errors are on the model handle. */
ferry_status ferry_components_export(ferry_components *components, const char *const *names,
                                     int n_names, ferry_exported **out);

/* ferry_decompose_for_generation + ferry_components_export of every component. */
ferry_status ferry_export_for_generation(ferry_model *model, const ferry_export_config *cfg,
                                         const ferry_generation_config *gen,
                                         ferry_exported **out);

/* Writes the export to `dir` atomically: files are built in a temporary sibling directory,
 * synced, then renamed into place. An existing `dir` is refused (FERRY_ERR_EXISTS) unless
 * `force` and it is an earlier export: a directory holding a valid export.json (ferry's or
 * transformers') and nothing but the files it names, config.json and generation_config.json,
 * and neither the model's directory nor one holding it or inside it. It is replaced only once
 * the new export is complete. An empty directory `dir` is the destination with or without
 * `force` (replaced with rename(2); if something appeared in it meanwhile, FERRY_ERR_EXISTS and
 * it is left as it is). Missing parents of `dir` are made, as mkdir -p makes them. Nothing is
 * left behind on failure: the parents it made are removed again, those still empty. */
ferry_status ferry_exported_save(ferry_exported *exported, const char *dir, int force);

/* Loads a saved export (`subfolder` may be NULL): validates export.json and refuses any file
 * path that leaves the directory. ferry's export.json, or the one transformers'
 * ExportedModel.save_pretrained writes (its components, files and metadata checked alike; each
 * component's role is its name). On failure *out carries the message. */
ferry_status ferry_exported_load(const char *dir, const char *subfolder, ferry_exported **out);

/* Reads every file of every component of a saved or loaded export and compares its CRC-32 with
 * the one export.json records ("crc32", taken as the export wrote the bytes): a file replaced
 * by another of the same size, or edited in place, fails (FERRY_ERR_FORMAT) naming it. This
 * catches accidents (a copy from another export, a bit flipped on disk), not a writer who edits
 * export.json as well. An export without "crc32" (by an older ferry, or transformers') passes.
 * Costs one read of the export's files. */
ferry_status ferry_exported_verify(ferry_exported *exported);

void ferry_exported_free(ferry_exported *exported);
const char *ferry_exported_errmsg(const ferry_exported *exported);

/* The export.json text (for a fresh export: what save will write). Owned by the handle. */
const char *ferry_exported_manifest(const ferry_exported *exported);
/* What the export holds, as `ferry inspect` prints it: each component with its role, file
 * sizes, inputs and outputs (dtype, symbolic and traced shape), precision, the format's own
 * settings, cache and symbol ranges; for an export transformers wrote, its traced inputs and
 * what it returns. Read from the validated export.json and the files' sizes; every string is
 * escaped for a terminal. Owned by the handle, valid until the next call or its free; NULL
 * before a save or load. */
const char *ferry_exported_describe(ferry_exported *exported);
/* ferry_exported_describe with the per-layer repetition folded, as `ferry inspect` prints it
 * by default: inputs, outputs and cache entries whose names differ only in a layer number, and
 * agree in dtype and shapes, are one line with the layers and their count
 * ("past_key_values.{0..29}.key  float32 ...  x30"). The text is owned as
 * ferry_exported_describe's is (each call replaces the other's). */
const char *ferry_exported_describe_brief(ferry_exported *exported);
/* The directory a loaded or saved export lives in, or NULL if not yet saved. */
const char *ferry_exported_dir(const ferry_exported *exported);

/* Warnings from building the export, one per line (e.g. checkpoint tensors the export did not
 * use); "" if none. Owned by the handle. */
const char *ferry_exported_warnings(const ferry_exported *exported);
/* Warnings from the last ferry_exported_save, one per line, found in the weights as they were
 * written (values beyond an fp16 export's range that became inf); "" if none. Owned by the
 * handle, replaced by the next save. */
const char *ferry_exported_save_warnings(const ferry_exported *exported);

/* Records in the saved export's export.json, under "validated_with", the package versions a
 * validation of it passed with (`ferry validate`, ferry.validate() in Python), so that a later
 * load can say when the runtime installed differs from the one it was checked with.
 * `versions_json` is a JSON object of groups, each an object of package name -> version string:
 * {"runtime": {"onnxruntime": "1.32.0"}, "reference": {"transformers": "5.24.0", "torch": "2.13.0"}}
 * (at most 16 groups of 64 packages; names and versions plain text of at most 128 bytes). An
 * earlier record is replaced. The export must be one this handle saved or loaded, still in the
 * same directory (an export swapped in since, e.g. by --force, is refused), whose export.json
 * ferry wrote (producer "ferry") and still holds what the handle has (apart from an earlier
 * "validated_with"). export.json is rewritten atomically: a temporary file in the directory,
 * synced, renamed over it; on any failure it is left as it was. Errors: FERRY_ERR_INVALID_ARG
 * (NULL, an export not saved, `versions_json` malformed or of another shape),
 * FERRY_ERR_FORMAT (export.json is not ferry's or changed since), FERRY_ERR_EXISTS (the
 * directory now holds another export), FERRY_ERR_IO / FERRY_ERR_NOSPACE (writing it). */
ferry_status ferry_exported_record_validation(ferry_exported *exported, const char *versions_json);

/* Components ("model" for a plain export). Index in [0, count). Strings owned by the handle. */
int ferry_exported_component_count(const ferry_exported *exported);
const char *ferry_exported_component_name(const ferry_exported *exported, int index);
const char *ferry_exported_component_file(const ferry_exported *exported, int index);
/* The weights file beside component `index`'s file: ferry's data file, or for a transformers
 * export the sidecar its loader reads (model.onnx.data, openvino_model.bin); NULL if none. */
const char *ferry_exported_component_data_file(const ferry_exported *exported, int index);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_H */
