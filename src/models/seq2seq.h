/* seq2seq.h — what encoder-decoder families share (seq2seq.c): their generation plan (an
 * encoder component, then the decoders gen_plan makes) and their decoders' inputs. The
 * decoders take the tokens, the self-attention cache and each layer's cross cache, which the
 * encoder made once an input (past_key_values.<l>.cross_key / cross_value, [b, heads, keys,
 * head_dim]); they take no mask and no positions, as transformers' generate() calls them: the
 * decoder prompt is the same tokens in every row, so positions run on from the cache's length
 * and the self-attention mask is all ones. */
#ifndef FERRY_MODELS_SEQ2SEQ_H
#define FERRY_MODELS_SEQ2SEQ_H

#include "models/blocks.h"

/* How a family names its components: the encoder's name and the graph it builds for it
 * (model_io.component); the decoders' name (NULL: gen_plan's, prefill and decode) and
 * component (NULL: none); transformers' output classes of each. */
typedef struct s2s_layout {
    const char *encoder_name, *encoder_component, *encoder_output;
    const char *decoder_name, *decoder_component, *decoder_output;
    /* --quantize leaves the encoder float */
    bool encoder_float;
} s2s_layout;

/* model_arch.plan's body for an encoder-decoder's generation export: refuses a plain export
 * and a cache the format cannot write (naming the option), then component 0 is the encoder
 * over the request's batch and `encoder_sequence`, and the decoders follow, taking input_ids
 * alone (each component's symbol table is its index's). */
ferry_status s2s_plan(const model_plan_request *rq, const s2s_layout *layout,
                      g_dim encoder_sequence, model_plan *out, fy_err *err);

/* The first position of this call's tokens, a scalar: the self-attention cache's length (the
 * static cache's write position), 0 for a prefill. Nodes named under `scope`. */
int s2s_first_position(g_graph *g, const blk_lm *dec, const model_io *io, const char *scope);
/* The positions of this call's tokens, start + arange(s) [s], of input_ids `ids`. */
int s2s_positions(g_graph *g, const model_io *io, int ids, int start, const char *scope);
/* What the decoder's self-attention reads besides the cache: a padding mask of ones over the
 * cached and new tokens [b, past + s] (a dynamic cache), or the static cache's causal mask
 * [b, 1, s, slots]: slot j seen by query i when j <= start + i (`positions`). */
int s2s_self_mask(g_graph *g, const blk_lm *dec, const model_io *io, int ids, int start,
                  int positions, const char *scope);
/* Layer l's cross cache inputs, [b, heads, keys, head_dim]. */
void s2s_cross_inputs(g_graph *g, const model_io *io, int l, int64_t heads, g_dim keys,
                      int64_t head_dim, int *k, int *v);

#endif
