/* vision_language.h — what the vision-language families (qwen2_vl.c, smolvlm.c) plan alike:
 * their language model's generation graphs, around which each places its vision components. */
#ifndef FERRY_MODELS_VISION_LANGUAGE_H
#define FERRY_MODELS_VISION_LANGUAGE_H

#include "models/model.h"

/* The language model's components: its body over the prompt's embeddings (language_model:
 * inputs_embeds -> last hidden state, writing the cache), decode (tokens -> logits, the cache
 * carried on), the embedding alone and the head alone, with the symbols of the prompt's graphs
 * and of decode's. */
typedef struct vlm_text {
    g_dim batch, sequence;
    model_io language, decode, embed, head;
    g_symtab prefill_syms, decode_syms;
} vlm_text;

/* Refuses a cache the format cannot write (gen_check_cache_form: a growing one where it writes
 * in place only), then plans `t` (out->gen resolved) with `position_rows` rows of
 * positions (0: [b, s]). */
ferry_status vlm_plan_text(const model_plan_request *rq, model_plan *out, int position_rows,
                           vlm_text *t, fy_err *err);

#endif
