/* model.h — architectures: one file per family (llama.c, mistral.c, ...) exposing a model_arch
 * (its config reader and its graph-building function), registered in registry.c. A family
 * builds the semantic graph of one component from its hyperparameters, the checkpoint and the
 * component's io (shapes and cache); blocks.h has the pieces families share. */
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

/* The shapes of a component's inputs: [batch, sequence] for the new tokens, the past length
 * (dynamic cache) or cache length (static cache). */
typedef struct decoder_io {
    g_dim batch, sequence;
    cache_kind cache;
    g_dim past;             /* CACHE_DYNAMIC */
    g_dim cache_len;        /* CACHE_STATIC */
    ferry_dtype dtype;      /* compute and weight precision */
    /* CACHE_NONE only: no attention_mask / position_ids input; the graph computes them as
     * transformers' forward does when not given them (every token real; positions from 0) */
    bool computed_mask, computed_positions;
} decoder_io;

/* A graph input the model declares, with the logical axis each of its dims follows ("batch",
 * "sequence"; "total" = past + sequence for a mask over cache and new tokens). Explicit dynamic
 * dims in an export config must name one of these inputs and axes. */
typedef struct model_input {
    const char *name;
    int n_axes;
    const char *axes[4];
} model_input;

/* What transformers makes of a checkpoint's modules where it depends on the config. */
typedef struct model_module_classes {
    const char *activation;       /* act_fn: "transformers.activations.SiLUActivation" */
    const char *scaled_embedding; /* embed_tokens when it scales its output, a class of the
                                     family's modeling module ("GemmaTextScaledWordEmbedding");
                                     NULL: torch's Embedding */
} model_module_classes;

typedef struct model_arch {
    const char *architecture;       /* config.json "architectures"[0] */
    const char *model_type;
    /* Reads the family's hyperparameters (owned by *out; free with free_hparams). Errors name
     * the file and the key. */
    ferry_status (*read)(const model_config *cfg, void **out, fy_err *err);
    void (*free_hparams)(void *hparams);
    /* Settles what depends on the checkpoint's contents, not only on its config (tying a
     * head to the embedding), once the checkpoint is open; may be NULL. `warning` (of `size`
     * bytes) receives "" or one line for the user. */
    ferry_status (*bind)(void *hparams, const ckpt *ck, char *warning, size_t size,
                         fy_err *err);
    /* Builds the component's forward graph into `g`, taking weights from `ck`. Missing weights
     * and shapes that contradict the config are errors naming the tensor. */
    ferry_status (*build)(const void *hparams, ckpt *ck, const decoder_io *io, g_graph *g,
                          fy_err *err);
    const model_input *inputs;      /* the plain forward's inputs */
    int n_inputs;
    bool generation;                /* the KV-cache graphs are verified for this family */
    /* The transformers classes of the modules that differ within the family, for formats that
     * record where each node came from (torch.export's nn_module_stack); may be NULL. */
    void (*module_classes)(const void *hparams, model_module_classes *out);
} model_arch;

const model_arch *model_find(const char *architecture);
/* "LlamaForCausalLM, MistralForCausalLM, ..." */
const char *model_supported_list(void);

#endif
