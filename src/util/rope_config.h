/* rope_config.h — the rotary embedding's parameters, as transformers' rope init functions take
 * them: the config reader (model/config.c) fills them, the IR's rope op carries them. A header
 * of their own, so that the IR needs nothing of the config reader. */
#ifndef FERRY_UTIL_ROPE_CONFIG_H
#define FERRY_UTIL_ROPE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

typedef enum rope_type {
    ROPE_DEFAULT = 0, ROPE_LINEAR, ROPE_DYNAMIC, ROPE_LLAMA3, ROPE_YARN
} rope_type;

/* Rotary parameters, from "rope_parameters" (transformers 5) or "rope_scaling" + "rope_theta"
 * (transformers 4). Fields a type does not use stay at their defaults. */
typedef struct rope_config {
    rope_type type;
    char type_name[32];             /* as written in the file, for messages */
    double theta;                   /* rope_theta, default 10000 */
    double factor;                  /* linear, dynamic, llama3, yarn */
    double low_freq_factor;         /* llama3 */
    double high_freq_factor;        /* llama3 */
    int64_t original_max_position_embeddings; /* llama3, yarn, dynamic; 0 = unset */
    double beta_fast, beta_slow;    /* yarn, defaults 32 and 1 */
    double attention_factor;        /* yarn; < 0 = unset (derived from factor/mscale) */
    double mscale, mscale_all_dim;  /* yarn; 0 = unset */
    bool truncate;                  /* yarn, default true */
    double partial_rotary_factor;   /* 1.0 = whole head */
} rope_config;

#endif
