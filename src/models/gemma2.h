/* gemma2.h — what Gemma 3's text model reads as Gemma 2 does (transformers derives
 * modeling_gemma3 from modeling_gemma2): Gemma's norms and scaled embeddings, a norm after
 * each block as well as before it, query_pre_attn_scalar, the two soft-caps and the sliding
 * layers. */
#ifndef FERRY_MODELS_GEMMA2_H
#define FERRY_MODELS_GEMMA2_H

#include "models/blocks.h"

/* Where the two generations' configs differ. */
typedef struct gemma2_defaults {
    double attn_softcap, final_softcap; /* attn_logit_softcapping and final_logit_softcapping
                                           when the key is absent (null: none) */
    int64_t window_pattern;             /* without layer_types, layer i slides unless
                                           (i + 1) % pattern == 0 ... */
    const char *pattern_key;            /* ... pattern from this key when present, or NULL */
} gemma2_defaults;

/* The quirks both generations share: norms of 1 + w in fp32, embeddings scaled by
 * sqrt(hidden) in the compute dtype, sandwich norms, tied unless the config says otherwise,
 * "attention_bias" on q/k/v/o. */
void gemma2_quirks(const lm_config *c, blk_lm *lm);

/* Reads query_pre_attn_scalar, the soft-caps and the sliding layers (their windows in
 * lm->window; with `sliding` non-NULL, which layers are sliding_attention, whatever their
 * window); refuses use_bidirectional_attention. */
ferry_status gemma2_read_keys(const model_config *cfg, const lm_config *c, blk_lm *lm,
                              const gemma2_defaults *d, bool *sliding, fy_err *err);

#endif
