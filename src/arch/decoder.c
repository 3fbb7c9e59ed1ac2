/* decoder.c — the shared decoder skeleton: embed, N x [norm, attention, residual, norm, mlp,
 * residual], final norm, head. Families differ only through decoder_hparams flags. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch.h"

/* Checkpoint names, one table (llama.cpp style). */
#define N_EMBED "model.embed_tokens.weight"
#define N_FINAL_NORM "model.norm.weight"
#define N_LM_HEAD "lm_head.weight"
#define N_LAYER(fmt) "model.layers.%d." fmt

typedef struct layer_weights {
    int in_norm, post_norm;
    int q, k, v, o, q_b, k_b, v_b, o_b;
    int q_norm, k_norm;
    int gate, up, down, gate_b, up_b, down_b;
} layer_weights;

ferry_status arch_hparams(const arch_family *fam, const model_config *cfg, decoder_hparams *hp,
                          fy_err *err)
{
    memset(hp, 0, sizeof *hp);
    if (strcmp(cfg->hidden_act, "silu") != 0)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED,
                       "config.json: hidden_act '%s' is not supported for %s (supported: silu)",
                       cfg->hidden_act, fam->architecture);
    if (cfg->rope.partial_rotary_factor != 1.0)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED,
                       "config.json: partial_rotary_factor %g is not supported (supported: 1.0)",
                       cfg->rope.partial_rotary_factor);
    if (cfg->head_dim % 2 != 0)
        return fy_fail(err, FERRY_ERR_FORMAT, "config.json: head_dim %lld must be even for rotary "
                       "embeddings", (long long)cfg->head_dim);
    hp->n_layers = cfg->num_hidden_layers;
    hp->hidden = cfg->hidden_size;
    hp->n_heads = cfg->num_attention_heads;
    hp->n_kv_heads = cfg->num_key_value_heads;
    hp->head_dim = cfg->head_dim;
    hp->intermediate = cfg->intermediate_size;
    hp->vocab = cfg->vocab_size;
    hp->max_position_embeddings = cfg->max_position_embeddings;
    hp->eps = cfg->rms_norm_eps;
    hp->rope = cfg->rope;
    hp->tie_embeddings = cfg->tie_word_embeddings;
    hp->tied_name = N_EMBED;
    hp->window = calloc((size_t)hp->n_layers, sizeof *hp->window);
    if (!hp->window)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < hp->n_layers && cfg->layer_types; i++) {
        if (strcmp(cfg->layer_types[i], "sliding_attention") == 0) {
            if (cfg->sliding_window <= 0)
                return fy_fail(err, FERRY_ERR_FORMAT, "config.json: layer_types[%lld] is "
                               "sliding_attention but sliding_window is not set", (long long)i);
            hp->window[i] = cfg->sliding_window;
        } else if (strcmp(cfg->layer_types[i], "full_attention") != 0) {
            return fy_fail(err, FERRY_ERR_UNSUPPORTED, "config.json: layer_types[%lld] '%s' is not "
                           "supported (supported: full_attention, sliding_attention)",
                           (long long)i, cfg->layer_types[i]);
        }
    }
    if ((hp->rope.type == ROPE_LLAMA3 || hp->rope.type == ROPE_YARN) &&
        hp->rope.original_max_position_embeddings <= 0 && hp->rope.type == ROPE_LLAMA3)
        return fy_fail(err, FERRY_ERR_FORMAT, "config.json: rope type llama3 needs "
                       "original_max_position_embeddings");
    if ((hp->rope.type == ROPE_LINEAR || hp->rope.type == ROPE_DYNAMIC ||
         hp->rope.type == ROPE_LLAMA3) && !(hp->rope.factor > 0))
        return fy_fail(err, FERRY_ERR_FORMAT, "config.json: rope type %s needs a positive 'factor'",
                       hp->rope.type_name);
    if (hp->rope.type == ROPE_LLAMA3 && !(hp->rope.high_freq_factor != hp->rope.low_freq_factor &&
                                          hp->rope.low_freq_factor > 0))
        return fy_fail(err, FERRY_ERR_FORMAT, "config.json: rope type llama3 needs positive, "
                       "distinct low_freq_factor and high_freq_factor");
    return fam->hparams(cfg, hp, err);
}

void arch_hparams_free(decoder_hparams *hp)
{
    free(hp->window);
    hp->window = NULL;
}

ferry_status arch_resolve_tying(decoder_hparams *hp, const ckpt *ck, char *warning, size_t size,
                                fy_err *err)
{
    const st_tensor *embed = ckpt_find(ck, N_EMBED), *head = ckpt_find(ck, N_LM_HEAD);
    bool same = false;

    if (size > 0)
        warning[0] = '\0';
    hp->tied_name = N_EMBED;
    hp->tied_twin = NULL;
    if (!hp->tie_embeddings) {
        if (!head)
            return fy_fail(err, FERRY_ERR_FORMAT, "checkpoint %s: required tensor '" N_LM_HEAD
                           "' is missing, and config.json does not tie it to '" N_EMBED "' "
                           "(tie_word_embeddings is false or absent; transformers would "
                           "initialise it at random)", ck->dir);
        return FERRY_OK;
    }
    if (!head)
        return FERRY_OK;
    if (!embed) {
        /* transformers ties "symmetrically": the stored head becomes the embedding. */
        hp->tied_name = N_LM_HEAD;
        return FERRY_OK;
    }
    if (st_same_bytes(embed, head, &same, err) != FERRY_OK)
        return err->status;
    if (same) {
        hp->tied_twin = N_LM_HEAD;
        return FERRY_OK;
    }
    hp->tie_embeddings = false;
    snprintf(warning, size, "config.json sets tie_word_embeddings, but the checkpoint stores '"
             N_LM_HEAD "' and it is not byte-identical to '" N_EMBED "': both are used, untied, "
             "as transformers does (set tie_word_embeddings to false to silence this)");
    return FERRY_OK;
}

/* Takes a checkpoint tensor, checks its shape (rank 1 or 2) and makes it a graph weight. */
static int weight(g_graph *g, ckpt *ck, const char *name, bool required, int64_t d0, int64_t d1,
                  ferry_dtype dtype, fy_err *err)
{
    const st_tensor *t = ckpt_take(ck, name);
    if (!t) {
        if (required)
            fy_fail(err, FERRY_ERR_FORMAT, "checkpoint %s: required tensor '%s' is missing",
                    ck->dir, name);
        return G_NONE;
    }
    int want_rank = d1 > 0 ? 2 : 1;
    bool ok = t->ndim == want_rank && t->shape[0] == d0 && (want_rank == 1 || t->shape[1] == d1);
    if (!ok) {
        char got[128] = "", want[64];
        size_t len = 0;
        for (int i = 0; i < t->ndim && len < sizeof got - 24; i++)
            len += (size_t)snprintf(got + len, sizeof got - len, "%s%lld", i ? ", " : "",
                                    (long long)t->shape[i]);
        if (want_rank == 2)
            snprintf(want, sizeof want, "%lld, %lld", (long long)d0, (long long)d1);
        else
            snprintf(want, sizeof want, "%lld", (long long)d0);
        fy_fail(err, FERRY_ERR_FORMAT,
                "tensor '%s' in %s has shape [%s] but config.json implies [%s]", name,
                t->file->path, got, want);
        return G_NONE;
    }
    if (!(t->dtype == FERRY_F32 || t->dtype == FERRY_F16 || t->dtype == FERRY_BF16)) {
        fy_fail(err, FERRY_ERR_UNSUPPORTED, "tensor '%s' in %s has dtype %s; ferry reads F32, "
                "F16 and BF16 weights", name, t->file->path, ferry_dtype_name(t->dtype));
        return G_NONE;
    }
    return g_weight_value(g, t, dtype, false);
}

static ferry_status bind_layer(g_graph *g, ckpt *ck, const decoder_hparams *hp, int l,
                               ferry_dtype dt, layer_weights *w, fy_err *err)
{
    char name[160];
    int64_t qd = hp->n_heads * hp->head_dim, kvd = hp->n_kv_heads * hp->head_dim;
#define W(slot, fmt, required, d0, d1)                                       \
    do {                                                                     \
        snprintf(name, sizeof name, N_LAYER(fmt), l);                        \
        w->slot = weight(g, ck, name, required, d0, d1, dt, err);            \
        if (err->status != FERRY_OK)                                         \
            return err->status;                                              \
    } while (0)
    W(in_norm, "input_layernorm.weight", true, hp->hidden, 0);
    W(post_norm, "post_attention_layernorm.weight", true, hp->hidden, 0);
    W(q, "self_attn.q_proj.weight", true, qd, hp->hidden);
    W(k, "self_attn.k_proj.weight", true, kvd, hp->hidden);
    W(v, "self_attn.v_proj.weight", true, kvd, hp->hidden);
    W(o, "self_attn.o_proj.weight", true, hp->hidden, qd);
    W(q_b, "self_attn.q_proj.bias", hp->qkv_bias, qd, 0);
    W(k_b, "self_attn.k_proj.bias", hp->qkv_bias, kvd, 0);
    W(v_b, "self_attn.v_proj.bias", hp->qkv_bias, kvd, 0);
    W(o_b, "self_attn.o_proj.bias", hp->o_bias, hp->hidden, 0);
    if (!hp->qkv_bias)
        w->q_b = w->k_b = w->v_b = G_NONE;
    if (!hp->o_bias)
        w->o_b = G_NONE;
    w->q_norm = w->k_norm = G_NONE;
    if (hp->qk_norm) {
        W(q_norm, "self_attn.q_norm.weight", true, hp->head_dim, 0);
        W(k_norm, "self_attn.k_norm.weight", true, hp->head_dim, 0);
    }
    W(gate, "mlp.gate_proj.weight", true, hp->intermediate, hp->hidden);
    W(up, "mlp.up_proj.weight", true, hp->intermediate, hp->hidden);
    W(down, "mlp.down_proj.weight", true, hp->hidden, hp->intermediate);
    w->gate_b = w->up_b = w->down_b = G_NONE;
    if (hp->mlp_bias) {
        W(gate_b, "mlp.gate_proj.bias", true, hp->intermediate, 0);
        W(up_b, "mlp.up_proj.bias", true, hp->intermediate, 0);
        W(down_b, "mlp.down_proj.bias", true, hp->hidden, 0);
    }
#undef W
    return FERRY_OK;
}

/* [b, s, heads*d] -> [b, s, heads, d] */
static int split_heads(g_graph *g, const char *name, int x, int64_t heads, int64_t head_dim)
{
    int64_t spec[4] = {0, 0, heads, head_dim};
    return g_reshape(g, name, x, 4, spec);
}

/* Per-graph inputs the attention blocks read. */
typedef struct attn_inputs {
    int mask, positions;
    const decoder_io *io;
} attn_inputs;

static const int64_t to_bnsh[4] = {0, 2, 1, 3};

/* Joins this step's k or v ([b,kvh,s,d]) with the cache the io asks for and exposes the result
 * as a graph output; returns what attention reads. `which` is "key" or "value". */
static int with_cache(g_graph *g, const decoder_hparams *hp, const decoder_io *io, int l,
                      const char *which, int now, int counter)
{
    char in_name[96], out_name[96];
    g_dim d[4] = {io->batch, g_dim_const(hp->n_kv_heads), io->past, g_dim_const(hp->head_dim)};
    int all = now;
    switch (io->cache) {
    case CACHE_NONE:
        return now;
    case CACHE_DYNAMIC:
        if (!g_dim_is_const(io->past, NULL) || io->past.c != 0) {
            snprintf(in_name, sizeof in_name, "past_key_values.%d.%s", l, which);
            int past = g_input(g, in_name, io->dtype, 4, d);
            int parts[2] = {past, now};
            all = g_concat(g, which[0] == 'k' ? "cache_key/Concat" : "cache_value/Concat", 2,
                           parts, 2);
        }
        snprintf(out_name, sizeof out_name, "present.%d.%s", l, which);
        break;
    case CACHE_STATIC:
        d[2] = io->cache_len;
        snprintf(in_name, sizeof in_name, "input.past_key_values.%d.%s", l, which);
        snprintf(out_name, sizeof out_name, "output.past_key_values.%d.%s", l, which);
        all = g_kv_write(g, which[0] == 'k' ? "cache_key" : "cache_value",
                         g_input(g, in_name, io->dtype, 4, d), now, counter);
        break;
    }
    g_output(g, all, out_name);
    return all;
}

static int attention_block(g_graph *g, const decoder_hparams *hp, const layer_weights *w, int l,
                           int x, const attn_inputs *ai)
{
    const decoder_io *io = ai->io;
    g_scope(g, "/model/layers.%d/self_attn", l);
    int q = split_heads(g, "q_proj/Reshape", g_linear(g, "q_proj", x, w->q, w->q_b), hp->n_heads,
                        hp->head_dim);
    int k = split_heads(g, "k_proj/Reshape", g_linear(g, "k_proj", x, w->k, w->k_b),
                        hp->n_kv_heads, hp->head_dim);
    int v = split_heads(g, "v_proj/Reshape", g_linear(g, "v_proj", x, w->v, w->v_b),
                        hp->n_kv_heads, hp->head_dim);
    if (hp->qk_norm) {
        q = g_rms_norm(g, "q_norm", q, w->q_norm, hp->eps, 0.0);
        k = g_rms_norm(g, "k_norm", k, w->k_norm, hp->eps, 0.0);
    }
    g_rope_opts ro = {.rope = hp->rope, .head_dim = hp->head_dim,
                      .max_position_embeddings = hp->max_position_embeddings};
    q = g_rope(g, "q_rope", q, ai->positions, &ro);
    k = g_rope(g, "k_rope", k, ai->positions, &ro);
    k = g_transpose(g, "k_rope/Transpose", k, 4, to_bnsh);
    v = g_transpose(g, "v_proj/Transpose", v, 4, to_bnsh);
    int counter = G_NONE;
    if (io->cache == CACHE_STATIC) {
        char name[96];
        g_dim one[1] = {g_dim_const(1)};
        snprintf(name, sizeof name, "input.past_key_values.%d.cumulative_length", l);
        counter = g_input(g, name, FERRY_I64, 1, one);
    }
    k = with_cache(g, hp, io, l, "key", k, counter);
    v = with_cache(g, hp, io, l, "value", v, counter);
    g_attn_opts ao = {.num_heads = hp->n_heads, .num_kv_heads = hp->n_kv_heads,
                      .head_dim = hp->head_dim, .scale = 1.0 / sqrt((double)hp->head_dim),
                      .sliding_window = hp->window[l]};
    int a = g_attention_at(g, "attn", q, k, v, ai->mask, counter, &ao);
    if (counter != G_NONE) {
        /* counter' = counter + s. s is read off the attention output so that the counter is
         * written only after every read of the old one: its buffer is shared in place. */
        char name[96];
        int64_t zero = 0;
        int s_after = g_gather(g, "cache_length/Gather",
                               g_shape_of(g, "cache_length/Shape", a, 1, 2), g_scalar_i64(g, 0), 0);
        int next = g_binary(g, G_ADD, "cache_length/Add", counter,
                            g_unsqueeze(g, "cache_length/Unsqueeze", s_after, 1, &zero));
        snprintf(name, sizeof name, "output.past_key_values.%d.cumulative_length", l);
        g_output(g, next, name);
    }
    return g_linear(g, "o_proj", a, w->o, w->o_b);
}

static int mlp_block(g_graph *g, const layer_weights *w, int l, int x)
{
    g_scope(g, "/model/layers.%d/mlp", l);
    int gate = g_silu(g, "act_fn", g_linear(g, "gate_proj", x, w->gate, w->gate_b));
    int up = g_linear(g, "up_proj", x, w->up, w->up_b);
    return g_linear(g, "down_proj", g_binary(g, G_MUL, "Mul", gate, up), w->down, w->down_b);
}

ferry_status arch_build_decoder(const decoder_hparams *hp, ckpt *ck, const decoder_io *io,
                                g_graph *g, fy_err *err)
{
    ferry_dtype dt = io->dtype;
    g_dim bs[2] = {io->batch, io->sequence};
    int ids = g_input(g, "input_ids", FERRY_I64, 2, bs);
    int mask;
    if (io->cache == CACHE_STATIC) {
        g_dim m4[4] = {io->batch, g_dim_const(1), io->sequence, io->cache_len};
        mask = g_input(g, "attention_mask", FERRY_BOOL, 4, m4);
    } else {
        g_dim bt[2] = {io->batch, io->cache == CACHE_DYNAMIC ? g_dim_add(io->past, io->sequence)
                                                              : io->sequence};
        mask = g_input(g, "attention_mask", FERRY_I64, 2, bt);
    }
    int positions = g_input(g, "position_ids", FERRY_I64, 2, bs);
    attn_inputs ai = {.mask = mask, .positions = positions, .io = io};

    int embed = weight(g, ck, hp->tie_embeddings ? hp->tied_name : N_EMBED, true, hp->vocab,
                       hp->hidden, dt, err);
    int final_norm = weight(g, ck, N_FINAL_NORM, true, hp->hidden, 0, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    int head = embed;
    if (!hp->tie_embeddings) {
        head = weight(g, ck, N_LM_HEAD, true, hp->vocab, hp->hidden, dt, err);
        if (err->status != FERRY_OK)
            return err->status;
    } else if (hp->tied_twin) {
        ckpt_take(ck, hp->tied_twin); /* same bytes as the tensor read: used through the tie */
    }

    g_scope(g, "/model/embed_tokens");
    int h = g_gather(g, "Gather", embed, ids, 0);
    for (int l = 0; l < hp->n_layers; l++) {
        layer_weights w;
        if (bind_layer(g, ck, hp, l, dt, &w, err) != FERRY_OK)
            return err->status;
        g_scope(g, "/model/layers.%d", l);
        int x = g_rms_norm(g, "input_layernorm", h, w.in_norm, hp->eps, 0.0);
        int a = attention_block(g, hp, &w, l, x, &ai);
        g_scope(g, "/model/layers.%d", l);
        h = g_binary(g, G_ADD, "residual_attn", h, a);
        x = g_rms_norm(g, "post_attention_layernorm", h, w.post_norm, hp->eps, 0.0);
        int m = mlp_block(g, &w, l, x);
        g_scope(g, "/model/layers.%d", l);
        h = g_binary(g, G_ADD, "residual_mlp", h, m);
    }
    g_scope(g, "/model");
    h = g_rms_norm(g, "norm", h, final_norm, hp->eps, 0.0);
    g->scope[0] = '\0';
    int logits = g_linear(g, "lm_head", h, head, G_NONE);
    g_output(g, logits, "logits");
    /* logits first, then the cache outputs in layer order, as optimum and the guide list them */
    if (g_ok(g) && g->n_outputs > 1) {
        int last = g->outputs[g->n_outputs - 1];
        memmove(g->outputs + 1, g->outputs, (g->n_outputs - 1) * sizeof *g->outputs);
        g->outputs[0] = last;
    }
    if (!g_ok(g))
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    return FERRY_OK;
}
