/* rope_freq.h — rotary inverse frequencies for each rope type, computed the way transformers'
 * modeling_rope_utils does (float32 steps where it uses float32 tensors). */
#ifndef FERRY_IR_LOWER_ROPE_FREQ_H
#define FERRY_IR_LOWER_ROPE_FREQ_H

#include <stdbool.h>
#include <stdint.h>

#include "util/rope_config.h"

/* Fills inv_freq[head_dim/2]. For ROPE_DYNAMIC this is the table at the original length (the
 * graph recomputes it from the positions it sees); for ROPE_LONGROPE the short set (the graph
 * picks a set from the positions it sees). `max_position_embeddings` is used by yarn when its
 * factor is unset. */
void rope_inv_freq(const rope_config *rope, int64_t head_dim, int64_t max_position_embeddings,
                   float *inv_freq);
/* LongRoPE's table of one factor set: 1 / (factor[i] * theta^(2i/dim)), i < dim/2 (the rope's
 * n_factors must be dim/2). */
void rope_longrope_inv_freq(const rope_config *rope, int64_t dim, bool long_set, float *inv_freq);
/* The factor cos and sin are multiplied by (yarn's and longrope's attention factor, given or
 * derived from `factor`; 1 for the others). */
double rope_attention_scaling(const rope_config *rope);

#endif
