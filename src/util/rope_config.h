/* rope_config.h — the rotary embedding's parameters, as transformers' rope init functions take
 * them: the config reader (model/config.c) fills them, the IR's rope op carries them. A header
 * of their own, so that the IR needs nothing of the config reader. */
#ifndef FERRY_UTIL_ROPE_CONFIG_H
#define FERRY_UTIL_ROPE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

typedef enum rope_type {
    ROPE_DEFAULT = 0, ROPE_LINEAR, ROPE_DYNAMIC, ROPE_LLAMA3, ROPE_YARN, ROPE_LONGROPE
} rope_type;

/* Which positions the rotary frequencies read: the rope op's position input (ops.def). */
typedef enum rope_layout {
    ROPE_1D = 0,        /* int64 [b, s]: one position per token */
    ROPE_MROPE,         /* int64 [3, b, s]: temporal, height and width rows (Qwen2-VL's language
                           model); the rotary half-dims split into mrope_section bands, band i
                           reading row i % 3, the same bands over both halves */
    ROPE_VISION_2D      /* int64 [b, s, 2]: a patch's (h, w) (Qwen2-VL's vision tower); default
                           frequencies over rotary_dim / 2, the h angles then the w angles, and
                           the rotation computed in fp32 */
} rope_layout;

/* LongRoPE's per-frequency factors: rotary_dim / 2 of each (48 or 64 in Phi-3 and Phi-4-mini),
 * held in the options themselves so that every copy of them (graph nodes, lowering memos,
 * per-layer settings) stays a plain struct copy. Heads up to 512 rotary dims. */
#define ROPE_MAX_FACTORS 256

/* Rotary parameters, from "rope_parameters" (transformers 5) or "rope_scaling" + "rope_theta"
 * (transformers 4). Fields a type does not use stay at their defaults. */
typedef struct rope_config {
    rope_type type;
    char type_name[32];             /* as written in the file, for messages */
    double theta;                   /* rope_theta, default 10000 */
    double factor;                  /* linear, dynamic, llama3, yarn; longrope: given, or
                                       max_position_embeddings / original (its attention
                                       factor's input) */
    double low_freq_factor;         /* llama3 */
    double high_freq_factor;        /* llama3 */
    int64_t original_max_position_embeddings; /* llama3, yarn, dynamic, longrope; 0 = unset */
    double beta_fast, beta_slow;    /* yarn, defaults 32 and 1 */
    double attention_factor;        /* yarn, longrope; < 0 = unset (derived from factor) */
    double mscale, mscale_all_dim;  /* yarn; 0 = unset */
    bool truncate;                  /* yarn, default true */
    double partial_rotary_factor;   /* 1.0 = whole head */
    /* longrope: inv_freq[i] = 1 / (factor[i] * theta^(2i/r)), the short set while
     * max(position_ids) + 1 <= original_max_position_embeddings, the long set past it */
    int n_factors;                  /* entries of each set: rotary_dim / 2 */
    float short_factor[ROPE_MAX_FACTORS], long_factor[ROPE_MAX_FACTORS];
    rope_layout layout;
    int64_t mrope_section[3];       /* ROPE_MROPE: band widths, summing to rotary_dim / 2 */
} rope_config;

#endif
