/* qwen2.h — what Qwen2's language model adds to the standard block, shared by the families
 * whose text model is Qwen2's (Qwen2-VL, Qwen2.5-VL). */
#ifndef FERRY_MODELS_QWEN2_H
#define FERRY_MODELS_QWEN2_H

#include "models/blocks.h"

/* "qkv_bias" on q/k/v; a sliding window only when use_sliding_window says so (it defaults to
 * false here, unlike the generic reading). */
void qwen2_quirks(const lm_config *c, blk_lm *lm);

#endif
