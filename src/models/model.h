/* model.h — architectures: one file per family (llama.c, bert.c, ...) exposing a model_arch
 * (what kind of model it is, its inputs, its config reader and its graph-building function),
 * registered in registry.c. A family builds the semantic graph of one component from its
 * hyperparameters, the checkpoint and the component's io (shapes, inputs taken and cache);
 * blocks.h has the pieces decoder families share, encoder_blocks.h those of encoders. */
#ifndef FERRY_MODELS_MODEL_H
#define FERRY_MODELS_MODEL_H

#include <stdbool.h>

#include "ir/ir.h"
#include "model/checkpoint.h"
#include "model/config.h"

/* How a decoder graph sees its KV cache. */
typedef enum cache_kind {
    CACHE_NONE,      /* plain forward: logits only */
    CACHE_DYNAMIC,   /* past_key_values.<l>.key/value [b,kvh,past,d] in (absent when `past` is
                        the constant 0: a prefill), present [b,kvh,past+s,d] out */
    CACHE_STATIC     /* a fixed buffer [b,kvh,max_cache_len,d] plus a per-layer write counter,
                        updated in place */
} cache_kind;

/* The most logical axes a model declares (model_arch.axes). */
#define MODEL_MAX_AXES 8

/* A component's io: its logical axes' dims (in the order the model declares them; batch and
 * sequence also by name, for the families whose inputs are tokens), the past length (dynamic
 * cache) or cache length (static cache), and which of the model's inputs the graph takes. */
typedef struct model_io {
    g_dim batch, sequence;
    g_dim axes[MODEL_MAX_AXES];
    int n_axes;
    cache_kind cache;
    g_dim past;             /* CACHE_DYNAMIC */
    g_dim cache_len;        /* CACHE_STATIC */
    ferry_dtype dtype;      /* compute and weight precision */
    /* FERRY_INPUT_* bits of the graph's inputs. An input of the model's that is not taken is
     * computed as transformers' forward computes it when not given (a mask of ones, positions
     * from 0, token types 0); generation components take input_ids, attention_mask and
     * position_ids. */
    unsigned takes;
    /* MODEL_PART_* bits of the causal LM this graph holds; 0: all of it (every text model's
     * components). A multimodal model's generation components split it: its language model
     * takes inputs_embeds and returns the last hidden state, lm_head is a component alone. */
    unsigned parts;
    /* rows of position_ids: 0 for [b, s]; 4 for Qwen2-VL's [4, b, s] (a text row, which the
     * graph does not read, then M-RoPE's temporal, height and width rows) */
    int position_rows;
    /* the component's role ("image_encoder", ...), for a family whose components are graphs of
     * different parts of the model; NULL: the role follows from the io (prefill, decode) */
    const char *component;
    /* --quantize leaves this component's weights float (a speech encoder, run once an input,
     * whose int4 features cost the transcript its words) */
    bool keep_float;
} model_io;

#define MODEL_PART_EMBED (1u << 0) /* token ids through the embedding (else inputs_embeds) */
#define MODEL_PART_BODY (1u << 1)  /* the decoder layers and the final norm */
#define MODEL_PART_HEAD (1u << 2)  /* lm_head: logits (else the last hidden state) */
#define MODEL_PARTS_ALL (MODEL_PART_EMBED | MODEL_PART_BODY | MODEL_PART_HEAD)

/* transformers' ModelOutput classes (pytree type names: the out_spec of transformers'
 * ExportMetadata and of a pt2 program with model_output). */
#define MODEL_CAUSAL_LM_OUTPUT "transformers.modeling_outputs.CausalLMOutputWithPast"
#define MODEL_MOE_CAUSAL_LM_OUTPUT "transformers.modeling_outputs.MoeCausalLMOutputWithPast"

/* What a family's forward returns, which decides its components and its outputs. */
typedef enum model_kind {
    MODEL_CAUSAL_LM,         /* logits over the vocabulary; generation components */
    MODEL_ENCODER            /* hidden states (and a pooler) or a head's logits; one "model"
                                component, no cache */
} model_kind;

/* A logical axis the model's inputs follow ("batch", "sequence"; an encoder-decoder's
 * "encoder_sequence", a speech model's "frames", a vision tower's "patches"), and the extent a
 * plain export traces it at when no example shape names it. */
typedef struct model_axis {
    const char *name;
    int64_t example;
} model_axis;

/* The axes of models whose inputs are tokens: batch (example 1) and sequence (example 8). */
extern const model_axis model_token_axes[2];

/* A graph input the model declares, with the logical axis each of its dims follows ("batch",
 * "sequence"; an axis the model does not declare is derived from others, as "total" = past +
 * sequence for a mask over cache and new tokens). Explicit dynamic dims and example shapes in
 * an export config must name one of these inputs and axes. */
typedef struct model_input {
    const char *name;
    int n_axes;
    const char *axes[4];
} model_input;

/* A model's hyperparameters as readers outside its graph need them (onnxruntime-genai's
 * genai_config.json; later a GGUF writer), given by the family from what it read. 0 or NULL:
 * the family has none. */
typedef struct model_hparams {
    const char *genai_type;       /* onnxruntime-genai's model type ("llama") */
    int64_t vocab_size, hidden_size, intermediate_size;
    int64_t num_layers, num_heads, num_kv_heads, head_dim;
    int64_t context_length;       /* max_position_embeddings */
    double norm_eps;
    /* a vision-language model's (onnxruntime-genai's vision and embedding sections); 0: none */
    int64_t image_token_id, video_token_id, vision_start_token_id;
    int64_t spatial_merge_size, patch_size, temporal_patch_size;
    int64_t window_size;          /* the tower's attention window in pixels (0: whole frames) */
    /* a speech encoder-decoder's (onnxruntime-genai's encoder section, its audio processor);
     * 0: none */
    int64_t num_mel_bins, encoder_layers, encoder_heads, encoder_head_dim;
} model_hparams;

/* The components one export may have (prefill and decode today; an encoder, a vision encoder,
 * a language model and a head tomorrow): the one limit every stage plans, builds, writes and
 * reads export.json with. */
#define MODEL_MAX_COMPONENTS 8

/* One component of an export as its family plans it: its name and role in export.json
 * ("model", "prefill", "decode"; "encoder", "image_encoder", "language_model", "lm_head"
 * ...), the io its graph is built for, and transformers' ModelOutput class of its outputs. */
typedef struct model_component {
    const char *name;
    const char *role;
    model_io io;
    const char *output_class;
} model_component;

struct model_arch;

/* What an export asks its family to plan: a plain export (gen NULL) or a generation one, with
 * the axes the export config resolved and what the format can print. */
typedef struct model_plan_request {
    const struct model_arch *arch;
    const ferry_export_config *cfg;
    const ferry_generation_config *gen;
    unsigned takes;           /* FERRY_INPUT_* bits of a plain export's inputs */
    int n_axes;               /* the model's axes (model_arch.axes), their names and dims */
    const char *const *axis_names;
    const g_dim *axes;
    const char *format;       /* the export's format ("onnx"), for messages */
    unsigned state_forms;     /* 1 << g_state_form for each form the format prints */
    /* the name of a format that runs generation as one graph taking the prompt and each token
     * (OpenVINO's stateful model), or NULL */
    const char *single_graph;
    g_symtab *syms;           /* per component: the plan adds its own symbols (the cache's) */
} model_plan_request;

/* The components planned, and the generation options as decided (FERRY_AUTO settled). */
typedef struct model_plan {
    model_component comps[MODEL_MAX_COMPONENTS];
    int n;
    ferry_generation_config gen;
} model_plan;

/* The dim of the request's axis `name` (a constant 1 where the model has no such axis). */
g_dim model_plan_axis(const model_plan_request *rq, const char *name);

typedef struct model_arch {
    const char *architecture;       /* config.json "architectures"[0] */
    const char *model_type;
    model_kind kind;
    /* transformers' ModelOutput class of the forward's outputs
     * ("transformers.modeling_outputs.CausalLMOutputWithPast"); the graph carries it */
    const char *output_class;
    /* Reads the family's hyperparameters (owned by *out; free with free_hparams). Errors name
     * the file and the key. */
    ferry_status (*read)(const model_config *cfg, void **out, fy_err *err);
    void (*free_hparams)(void *hparams);
    /* Settles what depends on the checkpoint's contents, not only on its config (tying a
     * head to the embedding), once the checkpoint is open; may be NULL. `warning` (of `size`
     * bytes) receives "" or one line for the user. */
    ferry_status (*bind)(void *hparams, const ckpt *ck, char *warning, size_t size,
                         fy_err *err);
    /* Plans the export's components: their names, roles, io and output classes. Encoders and
     * other one-graph models take model_plan_plain; decoders of the standard shape
     * gen_decoder_plan (src/generate), which adds generation's prefill and decode. Errors
     * name the option that cannot be honoured. */
    ferry_status (*plan)(const void *hparams, const model_plan_request *rq, model_plan *out,
                         fy_err *err);
    /* Builds the component's forward graph into `g`, taking weights from `ck`, and declares
     * the transformers module each node scope is (g_module_add: the root, then every module
     * the graph's nodes are named under). Missing weights and shapes that contradict the
     * config are errors naming the tensor. */
    ferry_status (*build)(const void *hparams, ckpt *ck, const model_io *io, g_graph *g,
                          fy_err *err);
    const model_input *inputs;      /* the plain forward's inputs */
    int n_inputs;
    /* The logical axes its inputs follow, with their default examples; NULL:
     * model_token_axes (batch, sequence) */
    const model_axis *axes;
    int n_axes;
    /* The inputs (FERRY_INPUT_* bits) a plain export takes when the export config names none:
     * what the family's tokenizer returns. NULL: input_ids and attention_mask. */
    unsigned (*default_inputs)(const void *hparams);
    /* The longest sequence the model takes (its position table's); NULL or 0: unbounded. The
     * sequence axis's range stops there, so that a longer input is refused, never read past
     * the table. */
    int64_t (*max_sequence)(const void *hparams);
    /* The decoder prompt generate() starts from where the checkpoint fixes it (Whisper's init
     * tokens, T5's decoder_start_token_id): a generation export's default example sequence,
     * so that a static-shape export takes the prompt its loop makes. NULL or 0: the sequence
     * axis's example. */
    int64_t (*generation_prompt)(const void *hparams);
    bool generation;                /* the KV-cache graphs are verified for this family */
    /* A vision-language architecture exported text-only (ferry_export_config.text_only): how
     * the checkpoint names its language model's tensors (each a way transformers has saved
     * it), which are read under the causal LM's names; every other tensor is left out. NULL:
     * a text model. */
    const ckpt_layout *text_layouts;
    size_t n_text_layouts;
    /* How the checkpoint may name the model's tensors, each a way transformers has saved it,
     * all read under the first's names (NULL: as they are). */
    const ckpt_layout *layouts;
    size_t n_layouts;
    /* Fills the hyperparameters record; may be NULL (then it is all zeros). */
    void (*describe)(const void *hparams, model_hparams *out);
} model_arch;

/* model_arch.plan of a model exported as one graph: one "model" component over the export's
 * axes and inputs; a generation export is refused, naming the architecture. */
ferry_status model_plan_plain(const void *hparams, const model_plan_request *rq, model_plan *out,
                              fy_err *err);

const model_arch *model_find(const char *architecture);
/* "LlamaForCausalLM, MistralForCausalLM, ..." */
const char *model_supported_list(void);

#endif
