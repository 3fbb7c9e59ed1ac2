/* arch.h — architecture families: each is a small table entry (name, config quirks, checkpoint
 * names) over the one shared decoder skeleton in decoder.c. */
#ifndef FERRY_ARCH_ARCH_H
#define FERRY_ARCH_ARCH_H

#include <stdbool.h>

#include "graph/graph.h"
#include "model/checkpoint.h"
#include "model/config.h"

/* Everything the skeleton needs to know about one model, derived from config.json. */
typedef struct decoder_hparams {
    int64_t n_layers, hidden, n_heads, n_kv_heads, head_dim, intermediate, vocab;
    int64_t max_position_embeddings;
    double eps;
    rope_config rope;
    bool qkv_bias;          /* q/k/v projections carry biases (Qwen2, attention_bias) */
    bool o_bias;            /* o_proj carries a bias (Llama's attention_bias) */
    bool mlp_bias;
    bool qk_norm;           /* RMSNorm over head_dim on q and k before rope (Qwen3) */
    bool tie_embeddings;    /* one tensor is both the embedding and the head (config.json's
                               tie_word_embeddings, settled against the checkpoint by
                               arch_resolve_tying) */
    const char *tied_name;  /* with tie_embeddings: the checkpoint tensor read for both */
    const char *tied_twin;  /* a stored copy with the same bytes, consumed by the tie; or NULL */
    int64_t *window;        /* per layer: sliding window or 0; owned */
} decoder_hparams;

typedef struct arch_family {
    const char *architecture;       /* config.json "architectures"[0] */
    const char *model_type;
    /* Reads family quirks from the config into hp (the skeleton filled the common part). */
    ferry_status (*hparams)(const model_config *cfg, decoder_hparams *hp, fy_err *err);
    bool generation;                /* the KV-cache graphs are verified for this family */
} arch_family;

/* How a decoder graph sees its KV cache. */
typedef enum cache_kind {
    CACHE_NONE,      /* plain forward: logits only */
    CACHE_DYNAMIC,   /* past_key_values.<l>.key/value [b,kvh,past,d] in (absent when `past` is
                        the constant 0: a prefill), present.<l>.key/value [b,kvh,past+s,d] out */
    CACHE_STATIC     /* a fixed buffer [b,kvh,max_cache_len,d] plus a per-layer write counter,
                        as input.<name> / output.<name> pairs updated in place */
} cache_kind;

/* The shapes of a decoder graph's inputs: [batch, sequence] for the new tokens, the past length
 * (dynamic cache) or cache length (static cache). */
typedef struct decoder_io {
    g_dim batch, sequence;
    cache_kind cache;
    g_dim past;             /* CACHE_DYNAMIC */
    g_dim cache_len;        /* CACHE_STATIC */
    ferry_dtype dtype;      /* compute and weight precision */
} decoder_io;

const arch_family *arch_find(const char *architecture);
/* "LlamaForCausalLM, MistralForCausalLM, ..." */
const char *arch_supported_list(void);

/* Fills hp from cfg (common keys, then the family hook); validates against the family. */
ferry_status arch_hparams(const arch_family *fam, const model_config *cfg, decoder_hparams *hp,
                          fy_err *err);
void arch_hparams_free(decoder_hparams *hp);

/* Settles hp->tie_embeddings against the checkpoint as transformers 5.x does when it loads one
 * (PreTrainedModel.tie_weights during from_pretrained):
 *   tie_word_embeddings true:  lm_head.weight absent -> tie to model.embed_tokens.weight; the
 *     embedding absent but lm_head present -> tie to lm_head; both stored with the same dtype,
 *     shape and bytes -> tie (the stored lm_head is consumed by the tie); both stored but not
 *     byte-identical -> no tie, both used, and *warning says so (transformers warns alike).
 *   tie_word_embeddings false or absent (false for every supported family): no tie; a missing
 *     lm_head.weight is an error (transformers would initialise it at random).
 * The comparison reads both tensors in 1 MiB chunks. `warning` (of `size` bytes) is set to "" or
 * one line. */
ferry_status arch_resolve_tying(decoder_hparams *hp, const ckpt *ck, char *warning, size_t size,
                                fy_err *err);

/* Builds the forward graph (input_ids, attention_mask, position_ids -> logits) of a decoder
 * into `g`, taking its weights from `ck`. Missing weights and shapes that contradict the config
 * are errors naming the tensor. */
ferry_status arch_build_decoder(const decoder_hparams *hp, ckpt *ck, const decoder_io *io,
                                g_graph *g, fy_err *err);

/* Family hooks, one file each. */
extern const arch_family arch_llama, arch_mistral, arch_qwen2, arch_qwen3;

#endif
