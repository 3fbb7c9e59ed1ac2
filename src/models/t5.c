/* t5.c — T5ForConditionalGeneration (T5, T5 v1.1, flan-t5), exported for generation as an
 * encoder-decoder (seq2seq.h):
 *
 *   encoder   input_ids, attention_mask [b, encoder_sequence] -> last_hidden_state and each
 *             decoder layer's cross keys and values present.<l>.cross_key / cross_value
 *   prefill   input_ids (the decoder's), encoder_attention_mask and the cross cache -> logits
 *             and the self-attention cache
 *   decode    the same with the self-attention cache
 *
 * Both stacks: the shared embedding (unscaled), N pre-norm blocks (T5LayerNorm, an RMS norm
 * without a bias; attention with no score scaling plus a relative position bias; the MLP,
 * relu or gated: act(wi_0 x) * wi_1 x), a final norm. The position bias is the first block's
 * relative_attention_bias table read at each (query, key) pair's bucket, shared by every block
 * of the stack: buckets by distance, both signs in the encoder, only keys before the query in
 * the decoder (T5Attention._relative_position_bucket). Distances beyond
 * relative_attention_max_distance share the last bucket, so the buckets of distances within
 * it are a table computed here, which the graph reads at each clipped distance. The decoder's
 * cross attention has no position bias and masks the encoder's padding. The head is tied to
 * the shared embedding unless the checkpoint holds another lm_head; its input is scaled by
 * d_model^-0.5 unless the config says otherwise (scale_decoder_outputs; an older config's
 * tie_word_embeddings false, T5 v1.1's). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/seq2seq.h"
#include "util/json.h"

#define T5_MODULE "transformers.models.t5.modeling_t5."
#define RELU_CLASS "torch.nn.modules.activation.ReLU"
#define OUTPUT_SEQ2SEQ "transformers.modeling_outputs.Seq2SeqLMOutput"

enum { T5_AXIS_BATCH, T5_AXIS_SEQUENCE, T5_AXIS_ENCODER, T5_N_AXES };

static const model_axis T5_AXES[T5_N_AXES] = {
    {"batch", 1}, {"sequence", 8}, {"encoder_sequence", 8},
};

typedef struct t5 {
    /* the decoder's sizes as blk_attend and blk_lm_bind read them (heads, d_kv, vocabulary,
     * the tie of lm_head to the shared embedding) */
    blk_lm dec;
    int64_t enc_layers, d_model, d_ff, buckets, max_distance;
    bool gated, scale_outputs;
    g_op act;                /* G_MAX is relu (max(x, 0)) */
    const char *act_class;
    /* the bucket of each distance d in [-max_distance, max_distance] at d + max_distance */
    int64_t *enc_table, *dec_table;
} t5;

static const blk_names NAMES = {.embed = "shared.weight", .lm_head = "lm_head.weight"};
static const blk_family T5_FAMILY = {.model_type = "t5", .prefix = "T5"};

static void t5_free(void *hparams)
{
    t5 *m = hparams;
    if (!m)
        return;
    blk_lm_free(&m->dec);
    free(m->enc_table);
    free(m->dec_table);
    free(m);
}

/* T5Attention._relative_position_bucket of distance d (key - query), in its float32 steps. */
static int64_t bucket(int64_t d, bool bidirectional, int64_t buckets, int64_t max_distance)
{
    int64_t base = 0, n = buckets;
    if (bidirectional) {
        n /= 2;
        base = d > 0 ? n : 0;
        d = d < 0 ? -d : d;
    } else {
        d = d < 0 ? -d : 0;
    }
    int64_t exact = n / 2;
    if (d < exact)
        return base + d;
    float scale = (float)log((double)max_distance / (double)exact);
    float large = logf((float)d / (float)exact) / scale * (float)(n - exact);
    int64_t b = exact + (int64_t)large;
    return base + (b < n - 1 ? b : n - 1);
}

static int64_t *bucket_table(const t5 *m, bool bidirectional)
{
    int64_t span = 2 * m->max_distance + 1;
    int64_t *t = malloc((size_t)span * sizeof *t);
    for (int64_t i = 0; t && i < span; i++)
        t[i] = bucket(i - m->max_distance, bidirectional, m->buckets, m->max_distance);
    return t;
}

static ferry_status read_config(const model_config *cfg, t5 *m, fy_err *err)
{
    const cJSON *c = cfg->raw;
    const char *origin = cfg->text_origin;
    blk_lm *d = &m->dec;
    int64_t d_kv, heads;
    char proj[48];
    ferry_status st;
    if ((st = json_get_int(c, "vocab_size", false, 32128, 1, LM_MAX_VOCAB, origin, &d->vocab,
                           err)) ||
        (st = json_get_int(c, "d_model", false, 512, 1, LM_MAX_HIDDEN, origin, &m->d_model,
                           err)) ||
        (st = json_get_int(c, "d_kv", false, 64, 1, LM_MAX_HEAD_DIM, origin, &d_kv, err)) ||
        (st = json_get_int(c, "d_ff", false, 2048, 1, LM_MAX_INTERMEDIATE, origin, &m->d_ff,
                           err)) ||
        (st = json_get_int(c, "num_layers", false, 6, 1, LM_MAX_LAYERS, origin, &m->enc_layers,
                           err)) ||
        (st = json_get_int(c, "num_decoder_layers", false, m->enc_layers, 1, LM_MAX_LAYERS,
                           origin, &d->n_layers, err)) ||
        (st = json_get_int(c, "num_heads", false, 8, 1, LM_MAX_HEADS, origin, &heads, err)) ||
        (st = json_get_int(c, "relative_attention_num_buckets", false, 32, 4, 1 << 16, origin,
                           &m->buckets, err)) ||
        (st = json_get_int(c, "relative_attention_max_distance", false, 128, 1, 1 << 20,
                           origin, &m->max_distance, err)) ||
        (st = json_get_double(c, "layer_norm_epsilon", false, 1e-6, LM_EPS_MIN, LM_EPS_MAX,
                              origin, &d->eps, err)) ||
        (st = json_get_string(c, "feed_forward_proj", false, "relu", origin, proj, sizeof proj,
                              err)) ||
        (st = cfg_check_name(origin, "feed_forward_proj", proj, err)))
        return st;
    /* T5Config: "ACT" or "gated-ACT"; gated-gelu is gelu_new for the checkpoints' sake */
    m->gated = strncmp(proj, "gated-", 6) == 0;
    const char *act = m->gated ? proj + 6 : proj;
    if (strcmp(proj, "gated-gelu") == 0)
        act = "gelu_new";
    if (strcmp(act, "relu") == 0) {
        m->act = G_MAX;
        m->act_class = RELU_CLASS;
    } else if (strchr(act, '-') || !blk_activation(act, &m->act, &m->act_class)) {
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: feed_forward_proj '%s' is not supported "
                       "(supported: relu, gelu, gelu_new, gelu_pytorch_tanh, silu, each alone or "
                       "as gated-ACT)", origin, proj);
    }
    /* transformers 5 reads scale_decoder_outputs, else a tie_word_embeddings that is not false */
    const cJSON *scale = cJSON_GetObjectItemCaseSensitive(c, "scale_decoder_outputs");
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(c, "tie_word_embeddings");
    if (scale && !cJSON_IsBool(scale))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'scale_decoder_outputs' must be true or "
                       "false", origin);
    m->scale_outputs = scale ? cJSON_IsTrue(scale) : !cJSON_IsFalse(tie);
    /* the decoder's exact buckets cover distances below num_buckets / 2, the encoder's below
     * num_buckets / 4: a max_distance within them makes transformers' logarithmic buckets
     * negative or undefined (a log of a ratio under 1), which ferry's table would not match */
    if (m->max_distance <= m->buckets / 2)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: relative_attention_max_distance (%lld) "
                       "must be more than relative_attention_num_buckets / 2 (%lld): the "
                       "decoder's buckets past the exact ones grow logarithmically up to it",
                       origin, (long long)m->max_distance, (long long)(m->buckets / 2));
    d->hidden = m->d_model;
    d->n_heads = d->n_kv_heads = heads;
    d->head_dim = d_kv;
    d->intermediate = m->d_ff;
    d->act = m->act;
    d->act_class = m->act_class;
    d->tie_embeddings = true; /* transformers 5 ties lm_head to shared (blk_lm_bind settles it) */
    d->family = &T5_FAMILY;
    d->names = &NAMES;
    d->window = calloc((size_t)d->n_layers, sizeof *d->window);
    m->enc_table = bucket_table(m, true);
    m->dec_table = bucket_table(m, false);
    if (!d->window || !m->enc_table || !m->dec_table)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    return FERRY_OK;
}

static ferry_status t5_read(const model_config *cfg, void **out, fy_err *err)
{
    *out = NULL;
    t5 *m = calloc(1, sizeof *m);
    if (!m)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    if (read_config(cfg, m, err) != FERRY_OK) {
        t5_free(m);
        return err->status;
    }
    *out = m;
    return FERRY_OK;
}

static ferry_status t5_bind(void *hparams, const ckpt *ck, char *warning, size_t size,
                            fy_err *err)
{
    t5 *m = hparams;
    /* the stacks' own copies of the shared embedding, which transformers ties on load */
    static const char *const tied[] = {"encoder.embed_tokens.weight",
                                       "decoder.embed_tokens.weight"};
    for (size_t i = 0; i < sizeof tied / sizeof tied[0]; i++) {
        const st_tensor *t = ckpt_find(ck, tied[i]), *shared = ckpt_find(ck, NAMES.embed);
        bool same = false;
        if (t && shared && st_same_bytes(t, shared, &same, err) != FERRY_OK)
            return err->status;
        if (t && !same)
            return fy_fail(err, FERRY_ERR_UNSUPPORTED, "checkpoint %s: '%s' differs from '%s', "
                           "which transformers ties it to on load; ferry would read the shared "
                           "one", ck->dir, tied[i], NAMES.embed);
    }
    return blk_lm_bind(&m->dec, ck, warning, size, err);
}

static ferry_status t5_plan(const void *hparams, const model_plan_request *rq, model_plan *out,
                            fy_err *err)
{
    (void)hparams;
    if (rq->gen && rq->cfg->dtype == FERRY_F16)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s in fp16: transformers clamps T5's fp16 "
                       "states to a bound that depends on whether any is infinite, which ferry "
                       "does not reproduce; export fp32 or bf16", rq->arch->architecture);
    /* the encoder returns the cross cache beside last_hidden_state: no ModelOutput class of
     * transformers' holds both */
    static const s2s_layout layout = {.encoder_name = "encoder", .encoder_component = "encoder",
                                      .decoder_output = OUTPUT_SEQ2SEQ};
    return s2s_plan(rq, &layout, model_plan_axis(rq, "encoder_sequence"), out, err);
}

static void module(g_graph *g, const char *cls, g_op leaf, bool item, g_module_role role,
                   const char *fmt, int l)
{
    char scope[160];
    snprintf(scope, sizeof scope, fmt, l);
    g_module_add(g, cls, leaf, item, role, "%s", scope);
}

/* T5Attention at `at` ("/encoder/block.%d/layer.0/SelfAttention"), its projections and, in
 * block 0 of a self-attention, its relative_attention_bias. */
static void attention_modules(g_graph *g, const char *at, int l, bool cross)
{
    char fmt[160];
    module(g, T5_MODULE "T5Attention", G_OP_COUNT, false, GM_ROLE_NONE, at, l);
    static const char *const proj[] = {"q", "k", "v", "o"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(fmt, sizeof fmt, "%.100s/%s", at, proj[i]);
        module(g, BLK_LINEAR_CLASS, G_LINEAR, false,
               cross && (i == 1 || i == 2) ? GM_ROLE_CROSS_KV : GM_ROLE_NONE, fmt, l);
    }
    if (!cross && l == 0) {
        snprintf(fmt, sizeof fmt, "%.100s/relative_attention_bias", at);
        module(g, BLK_EMBEDDING_CLASS, G_OP_COUNT, false, GM_ROLE_NONE, fmt, l);
    }
}

static void ff_modules(g_graph *g, const t5 *m, const char *at, int l)
{
    char fmt[160];
    module(g, T5_MODULE "T5LayerFF", G_OP_COUNT, false, GM_ROLE_NONE, at, l);
    snprintf(fmt, sizeof fmt, "%.100s/layer_norm", at);
    module(g, T5_MODULE "T5LayerNorm", G_OP_COUNT, false, GM_ROLE_NONE, fmt, l);
    snprintf(fmt, sizeof fmt, "%.100s/DenseReluDense", at);
    module(g, m->gated ? T5_MODULE "T5DenseGatedActDense" : T5_MODULE "T5DenseActDense",
           G_OP_COUNT, false, GM_ROLE_NONE, fmt, l);
    static const char *const plain[] = {"wi", "wo"}, *const gated[] = {"wi_0", "wi_1", "wo"};
    const char *const *names = m->gated ? gated : plain;
    for (int i = 0; i < (m->gated ? 3 : 2); i++) {
        snprintf(fmt, sizeof fmt, "%.100s/DenseReluDense/%s", at, names[i]);
        module(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_NONE, fmt, l);
    }
    snprintf(fmt, sizeof fmt, "%.100s/DenseReluDense/act", at);
    module(g, m->act_class, m->act, false, GM_ROLE_NONE, fmt, l);
}

static void declare_modules(g_graph *g, const t5 *m, bool encoder)
{
    g_module_add(g, T5_MODULE "T5ForConditionalGeneration", G_OP_COUNT, false, GM_ROLE_NONE,
                 "%s", "");
    const char *stack = encoder ? "/encoder" : "/decoder";
    char fmt[160];
    module(g, T5_MODULE "T5Stack", G_OP_COUNT, false, GM_ROLE_NONE, stack, 0);
    snprintf(fmt, sizeof fmt, "%s/embed_tokens", stack);
    module(g, BLK_EMBEDDING_CLASS, G_EMBEDDING, false, GM_ROLE_NONE, fmt, 0);
    int64_t layers = encoder ? m->enc_layers : m->dec.n_layers;
    for (int l = 0; l < layers; l++) {
        snprintf(fmt, sizeof fmt, "%s/block.%%d", stack);
        module(g, T5_MODULE "T5Block", G_OP_COUNT, true, GM_ROLE_NONE, fmt, l);
        snprintf(fmt, sizeof fmt, "%s/block.%%d/layer.0", stack);
        module(g, T5_MODULE "T5LayerSelfAttention", G_OP_COUNT, false, GM_ROLE_NONE, fmt, l);
        snprintf(fmt, sizeof fmt, "%s/block.%%d/layer.0/layer_norm", stack);
        module(g, T5_MODULE "T5LayerNorm", G_OP_COUNT, false, GM_ROLE_NONE, fmt, l);
        snprintf(fmt, sizeof fmt, "%s/block.%%d/layer.0/SelfAttention", stack);
        attention_modules(g, fmt, l, false);
        if (!encoder) {
            module(g, T5_MODULE "T5LayerCrossAttention", G_OP_COUNT, false, GM_ROLE_NONE,
                   "/decoder/block.%d/layer.1", l);
            module(g, T5_MODULE "T5LayerNorm", G_OP_COUNT, false, GM_ROLE_NONE,
                   "/decoder/block.%d/layer.1/layer_norm", l);
        }
        snprintf(fmt, sizeof fmt, "%s/block.%%d/layer.%d", stack, encoder ? 1 : 2);
        ff_modules(g, m, fmt, l);
    }
    snprintf(fmt, sizeof fmt, "%s/final_layer_norm", stack);
    module(g, T5_MODULE "T5LayerNorm", G_OP_COUNT, false, GM_ROLE_NONE, fmt, 0);
    /* the decoder blocks' cross attention: its keys and values in the encoder's graph */
    for (int l = 0; l < m->dec.n_layers; l++) {
        if (encoder) {
            module(g, T5_MODULE "T5Stack", G_OP_COUNT, false, GM_ROLE_NONE, "/decoder", 0);
            module(g, T5_MODULE "T5Block", G_OP_COUNT, true, GM_ROLE_NONE, "/decoder/block.%d",
                   l);
            module(g, T5_MODULE "T5LayerCrossAttention", G_OP_COUNT, false, GM_ROLE_NONE,
                   "/decoder/block.%d/layer.1", l);
        }
        attention_modules(g, "/decoder/block.%d/layer.1/EncDecAttention", l, true);
    }
    if (!encoder)
        g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_HEAD, "/lm_head");
}

/* A block's weights (G_NONE where it has none). */
typedef struct block_w {
    int ln_self, q, k, v, o, ln_cross, cq, co, ln_ff, wi, wi_1, wo;
} block_w;

static ferry_status bind_block(g_graph *g, ckpt *ck, const t5 *m, bool encoder, int l,
                               ferry_dtype dt, block_w *w, fy_err *err)
{
    const char *s = encoder ? "encoder" : "decoder";
    int64_t d = m->d_model, inner = m->dec.n_heads * m->dec.head_dim, ff = m->d_ff;
    char name[160];
    *w = (block_w){G_NONE, G_NONE, G_NONE, G_NONE, G_NONE, G_NONE, G_NONE, G_NONE, G_NONE,
                   G_NONE, G_NONE, G_NONE};
#define W(slot, fmt, d0, d1)                                                              \
    do {                                                                                 \
        snprintf(name, sizeof name, "%s.block.%%d." fmt, s);                             \
        w->slot = blk_weight(g, ck, name, l, true, d0, d1, dt, err);                     \
        if (err->status != FERRY_OK)                                                     \
            return err->status;                                                          \
    } while (0)
    W(ln_self, "layer.0.layer_norm.weight", d, 0);
    W(q, "layer.0.SelfAttention.q.weight", inner, d);
    W(k, "layer.0.SelfAttention.k.weight", inner, d);
    W(v, "layer.0.SelfAttention.v.weight", inner, d);
    W(o, "layer.0.SelfAttention.o.weight", d, inner);
    const char *ff_at = encoder ? "layer.1" : "layer.2";
    if (!encoder) {
        W(ln_cross, "layer.1.layer_norm.weight", d, 0);
        W(cq, "layer.1.EncDecAttention.q.weight", inner, d);
        W(co, "layer.1.EncDecAttention.o.weight", d, inner);
    }
    char fmt[96];
    snprintf(fmt, sizeof fmt, "%s.block.%%d.%s.layer_norm.weight", s, ff_at);
    w->ln_ff = blk_weight(g, ck, fmt, l, true, d, 0, dt, err);
    snprintf(fmt, sizeof fmt, "%s.block.%%d.%s.DenseReluDense.%s.weight", s, ff_at,
             m->gated ? "wi_0" : "wi");
    w->wi = blk_weight(g, ck, fmt, l, true, ff, d, dt, err);
    if (m->gated) {
        snprintf(fmt, sizeof fmt, "%s.block.%%d.%s.DenseReluDense.wi_1.weight", s, ff_at);
        w->wi_1 = blk_weight(g, ck, fmt, l, true, ff, d, dt, err);
    }
    snprintf(fmt, sizeof fmt, "%s.block.%%d.%s.DenseReluDense.wo.weight", s, ff_at);
    w->wo = blk_weight(g, ck, fmt, l, true, d, ff, dt, err);
#undef W
    return err->status;
}

/* [b, s, heads * d_kv] -> [b, s, heads, d_kv] */
static int split_heads(g_graph *g, const char *name, const t5 *m, int x)
{
    return g_reshape_spec(g, name, x, 4, (int64_t[]){0, 0, m->dec.n_heads, m->dec.head_dim});
}

static int act(g_graph *g, const t5 *m, int x)
{
    if (m->act == G_MAX)
        return g_binary(g, G_MAX, "act", x, g_scalar_f(g, g->values[x].dtype, 0.0));
    return g_unary(g, m->act, "act", x);
}

/* The MLP at `at` ("/encoder/block.0/layer.1"): wo(act(wi x)) or wo(act(wi_0 x) * wi_1 x). */
static int mlp(g_graph *g, const t5 *m, const block_w *w, const char *at, int x)
{
    g_scope(g, "%s/DenseReluDense", at);
    int h = act(g, m, g_linear(g, m->gated ? "wi_0" : "wi", x, w->wi, G_NONE));
    if (m->gated)
        h = g_binary(g, G_MUL, "Mul", h, g_linear(g, "wi_1", x, w->wi_1, G_NONE));
    return g_linear(g, "wo", h, w->wo, G_NONE);
}

/* The stack's relative position bias [1, heads, s, keys]: `table` (its weight) at the bucket of
 * each (key - query) distance, queries at `query_pos` [s], keys 0 .. `keys` - 1 (a scalar). */
static int position_bias(g_graph *g, const t5 *m, bool bidirectional, int weight, int query_pos,
                         int keys, g_dim s_dim, g_dim keys_dim)
{
    int64_t span = 2 * m->max_distance + 1, zero = 0, one = 1;
    int64_t *copy = malloc((size_t)span * sizeof *copy);
    if (!copy)
        return g_fail(g, FERRY_ERR_NOMEM, "out of memory");
    memcpy(copy, bidirectional ? m->enc_table : m->dec_table, (size_t)span * sizeof *copy);
    int table = g_const_owned(g, FERRY_I64, 1, &span, copy);
    int key_pos = g_range(g, "memory_position", g_scalar_i64(g, 0), keys, g_scalar_i64(g, 1));
    if (key_pos != G_NONE)
        g->values[key_pos].shape.d[0] = keys_dim;
    int rel = g_binary(g, G_SUB, "relative_position", g_unsqueeze(g, "keys", key_pos, 1, &zero),
                       g_unsqueeze(g, "queries", query_pos, 1, &one));
    rel = g_binary(g, G_MIN, "clip_high", g_binary(g, G_MAX, "clip_low", rel,
                                                  g_scalar_i64(g, -m->max_distance)),
                   g_scalar_i64(g, m->max_distance));
    int idx = g_binary(g, G_ADD, "table_index", rel, g_scalar_i64(g, m->max_distance));
    int buckets = g_gather(g, "relative_position_bucket", table, idx, 0);
    int values = g_gather(g, "relative_attention_bias", weight, buckets, 0); /* [s, t, h] */
    int bias = g_unsqueeze(g, "unsqueeze", g_transpose(g, "permute", values, 3,
                                                       (int64_t[]){2, 0, 1}),
                           1, &zero);
    if (bias != G_NONE) {
        g_shape *sh = &g->values[bias].shape;
        sh->d[2] = s_dim;
        sh->d[3] = keys_dim;
    }
    return bias;
}

/* Self-attention of block l at `at` on x (after its norm). */
static int self_attention(g_graph *g, const t5 *m, const block_w *w, int l, const char *at,
                          int x, int mask, int bias, const blk_inputs *dec_in)
{
    g_scope(g, "%s", at);
    int q = split_heads(g, "q/Reshape", m, g_linear(g, "q", x, w->q, G_NONE));
    int k = split_heads(g, "k/Reshape", m, g_linear(g, "k", x, w->k, G_NONE));
    int v = split_heads(g, "v/Reshape", m, g_linear(g, "v", x, w->v, G_NONE));
    const blk_lm *d = &m->dec;
    int a;
    if (dec_in) {
        /* the decoder's, with its cache: blk_attend's inputs and states, and the bias */
        int pk, pv, pos, present_k, present_v;
        blk_cache_inputs(g, d, dec_in->io, l, &pk, &pv, &pos);
        const model_io *io = dec_in->io;
        g_attn_opts ao = {.num_heads = d->n_heads, .num_kv_heads = d->n_heads,
                          .head_dim = d->head_dim, .scale = 1.0,
                          .mask = io->cache == CACHE_STATIC ? G_MASK_GIVEN : G_MASK_CAUSAL,
                          .cache = io->cache == CACHE_DYNAMIC ? G_CACHE_APPEND
                                                              : G_CACHE_STATIC};
        a = g_attention_biased(g, "attn", q, k, v, dec_in->mask, pk, pv, pos, bias, &ao,
                               &present_k, &present_v);
        blk_cache_outputs(g, io, l, pk, pv, pos, present_k, present_v, a);
    } else {
        g_attn_opts ao = {.num_heads = d->n_heads, .num_kv_heads = d->n_heads,
                          .head_dim = d->head_dim, .scale = 1.0, .mask = G_MASK_PADDING};
        a = g_attention_biased(g, "attn", q, k, v, mask, G_NONE, G_NONE, G_NONE, bias, &ao, NULL,
                               NULL);
    }
    return g_linear(g, "o", a, w->o, G_NONE);
}

/* Layer l's cross keys and values of the encoder's output `hidden` [b, heads, t, d_kv]. */
static ferry_status cross_kv(g_graph *g, ckpt *ck, const t5 *m, int l, int hidden,
                             ferry_dtype dt, int *k, int *v, fy_err *err)
{
    int64_t inner = m->dec.n_heads * m->dec.head_dim;
    static const int64_t to_bnsd[4] = {0, 2, 1, 3};
    int wk = blk_weight(g, ck, "decoder.block.%d.layer.1.EncDecAttention.k.weight", l, true,
                        inner, m->d_model, dt, err);
    int wv = blk_weight(g, ck, "decoder.block.%d.layer.1.EncDecAttention.v.weight", l, true,
                        inner, m->d_model, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    g_scope(g, "/decoder/block.%d/layer.1/EncDecAttention", l);
    *k = g_transpose(g, "k/Transpose",
                     split_heads(g, "k/Reshape", m, g_linear(g, "k", hidden, wk, G_NONE)), 4,
                     to_bnsd);
    *v = g_transpose(g, "v/Transpose",
                     split_heads(g, "v/Reshape", m, g_linear(g, "v", hidden, wv, G_NONE)), 4,
                     to_bnsd);
    g->scope[0] = '\0';
    return FERRY_OK;
}

static ferry_status build_encoder(const t5 *m, ckpt *ck, const model_io *io, g_graph *g,
                                  fy_err *err)
{
    ferry_dtype dt = io->dtype;
    const blk_lm *d = &m->dec;
    g_dim seq = io->axes[T5_AXIS_ENCODER];
    g_dim bs[2] = {io->batch, seq};
    snprintf(g->base_scope, sizeof g->base_scope, "/encoder");
    int ids = g_input(g, "input_ids", FERRY_I64, 2, bs);
    g_input_role_set(g, ids, GI_TOKEN_IDS);
    int mask = g_input(g, "attention_mask", FERRY_I64, 2, bs);
    g_input_role_set(g, mask, GI_ATTENTION_MASK);
    int embed = blk_weight(g, ck, d->tied_name ? d->tied_name : NAMES.embed, 0, true, d->vocab,
                           m->d_model, dt, err);
    int rel = blk_weight(g, ck, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias."
                         "weight", 0, true, m->buckets, d->n_heads, dt, err);
    int final_norm = blk_weight(g, ck, "encoder.final_layer_norm.weight", 0, true, m->d_model, 0,
                                dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    declare_modules(g, m, true);
    g_scope(g, "/encoder/embed_tokens");
    int x = g_embedding(g, "embedding", embed, ids);
    g_scope(g, "/encoder/block.0/layer.0/SelfAttention");
    int s = g_gather(g, "sequence", g_shape_of(g, "ids_shape", ids, 0, G_END),
                     g_scalar_i64(g, 1), 0);
    int pos = g_range(g, "context_position", g_scalar_i64(g, 0), s, g_scalar_i64(g, 1));
    if (pos != G_NONE)
        g->values[pos].shape.d[0] = seq;
    int bias = position_bias(g, m, true, rel, pos, s, seq, seq);
    for (int l = 0; l < m->enc_layers; l++) {
        block_w w;
        char at[96];
        if (bind_block(g, ck, m, true, l, dt, &w, err) != FERRY_OK)
            return err->status;
        snprintf(at, sizeof at, "/encoder/block.%d/layer.0", l);
        g_scope(g, "%s", at);
        int h = blk_norm(g, d, "layer_norm", x, w.ln_self);
        snprintf(at, sizeof at, "/encoder/block.%d/layer.0/SelfAttention", l);
        x = g_binary(g, G_ADD, "add", x, self_attention(g, m, &w, l, at, h, mask, bias, NULL));
        snprintf(at, sizeof at, "/encoder/block.%d/layer.1", l);
        g_scope(g, "%s", at);
        h = blk_norm(g, d, "layer_norm", x, w.ln_ff);
        int f = mlp(g, m, &w, at, h);
        g_scope(g, "%s", at);
        x = g_binary(g, G_ADD, "add", x, f);
    }
    g_scope(g, "/encoder");
    x = blk_norm(g, d, "final_layer_norm", x, final_norm);
    g->scope[0] = '\0';
    g_output(g, x, "last_hidden_state");
    for (int l = 0; l < d->n_layers; l++) {
        char name[96];
        int k, v;
        if (cross_kv(g, ck, m, l, x, dt, &k, &v, err) != FERRY_OK)
            return err->status;
        snprintf(name, sizeof name, "present.%d.cross_key", l);
        g_output(g, k, name);
        snprintf(name, sizeof name, "present.%d.cross_value", l);
        g_output(g, v, name);
    }
    if (!g_ok(g))
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    return FERRY_OK;
}

static ferry_status build_decoder(const t5 *m, ckpt *ck, const model_io *io, g_graph *g,
                                  fy_err *err)
{
    const blk_lm *d = &m->dec;
    ferry_dtype dt = io->dtype;
    g_dim enc_seq = io->axes[T5_AXIS_ENCODER];
    snprintf(g->base_scope, sizeof g->base_scope, "/decoder");
    blk_inputs in = {.embeds = G_NONE, .positions = G_NONE, .io = io};
    in.ids = g_input(g, "input_ids", FERRY_I64, 2, (g_dim[]){io->batch, io->sequence});
    g_input_role_set(g, in.ids, GI_TOKEN_IDS);
    int enc_mask = g_input(g, "encoder_attention_mask", FERRY_I64, 2,
                           (g_dim[]){io->batch, enc_seq});
    int embed = blk_weight(g, ck, d->tied_name ? d->tied_name : NAMES.embed, 0, true, d->vocab,
                           m->d_model, dt, err);
    int rel = blk_weight(g, ck, "decoder.block.0.layer.0.SelfAttention.relative_attention_bias."
                         "weight", 0, true, m->buckets, d->n_heads, dt, err);
    int final_norm = blk_weight(g, ck, "decoder.final_layer_norm.weight", 0, true, m->d_model, 0,
                                dt, err);
    int head = d->tie_embeddings ? embed
                                 : blk_weight(g, ck, NAMES.lm_head, 0, true, d->vocab,
                                              m->d_model, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    if (d->tie_embeddings && d->tied_twin)
        ckpt_take(ck, d->tied_twin); /* same bytes as the tensor read: used through the tie */
    /* the decoder's cross attention has no position bias of its own: a stored one is unused,
     * as transformers ignores it on load */
    ckpt_take(ck, "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight");
    declare_modules(g, m, false);
    const char *at0 = "/decoder/block.0/layer.0/SelfAttention";
    int start = s2s_first_position(g, d, io, at0);
    int pos = s2s_positions(g, io, in.ids, start, at0);
    in.mask = s2s_self_mask(g, d, io, in.ids, start, pos, "/decoder/attention_mask");
    g_scope(g, "%s", at0);
    int keys;
    g_dim keys_dim;
    if (io->cache == CACHE_STATIC) {
        int pk, pv, cpos;
        blk_cache_inputs(g, d, io, 0, &pk, &pv, &cpos);
        keys = g_gather(g, "slots", g_shape_of(g, "cache_shape", pk, 0, G_END),
                        g_scalar_i64(g, 2), 0);
        keys_dim = io->cache_len;
    } else {
        keys = g_binary(g, G_ADD, "key_length", start,
                        g_gather(g, "query_length",
                                 g_shape_of(g, "query_shape", in.ids, 0, G_END),
                                 g_scalar_i64(g, 1), 0));
        keys_dim = g_dim_add(io->past, io->sequence);
    }
    int bias = position_bias(g, m, false, rel, pos, keys, io->sequence, keys_dim);
    g_scope(g, "/decoder/embed_tokens");
    int x = g_embedding(g, "embedding", embed, in.ids);
    for (int l = 0; l < d->n_layers; l++) {
        block_w w;
        char at[96];
        if (bind_block(g, ck, m, false, l, dt, &w, err) != FERRY_OK)
            return err->status;
        snprintf(at, sizeof at, "/decoder/block.%d/layer.0", l);
        g_scope(g, "%s", at);
        int h = blk_norm(g, d, "layer_norm", x, w.ln_self);
        snprintf(at, sizeof at, "/decoder/block.%d/layer.0/SelfAttention", l);
        x = g_binary(g, G_ADD, "add", x, self_attention(g, m, &w, l, at, h, G_NONE, bias, &in));
        /* cross attention over the cross cache, the encoder's padding masked */
        int ck_in, cv_in;
        s2s_cross_inputs(g, io, l, d->n_heads, enc_seq, d->head_dim, &ck_in, &cv_in);
        snprintf(at, sizeof at, "/decoder/block.%d/layer.1", l);
        g_scope(g, "%s", at);
        h = blk_norm(g, d, "layer_norm", x, w.ln_cross);
        snprintf(at, sizeof at, "/decoder/block.%d/layer.1/EncDecAttention", l);
        g_scope(g, "%s", at);
        int q = split_heads(g, "q/Reshape", m, g_linear(g, "q", h, w.cq, G_NONE));
        g_attn_opts ao = {.num_heads = d->n_heads, .num_kv_heads = d->n_heads,
                          .head_dim = d->head_dim, .scale = 1.0, .mask = G_MASK_PADDING,
                          .cache = G_CACHE_CROSS};
        int c = g_attention(g, "attn", q, ck_in, cv_in, enc_mask, G_NONE, G_NONE, G_NONE, &ao,
                            NULL, NULL);
        c = g_linear(g, "o", c, w.co, G_NONE);
        snprintf(at, sizeof at, "/decoder/block.%d/layer.1", l);
        g_scope(g, "%s", at);
        x = g_binary(g, G_ADD, "add", x, c);
        snprintf(at, sizeof at, "/decoder/block.%d/layer.2", l);
        g_scope(g, "%s", at);
        h = blk_norm(g, d, "layer_norm", x, w.ln_ff);
        int f = mlp(g, m, &w, at, h);
        g_scope(g, "%s", at);
        x = g_binary(g, G_ADD, "add", x, f);
    }
    g_scope(g, "/decoder");
    x = blk_norm(g, d, "final_layer_norm", x, final_norm);
    g->scope[0] = '\0';
    if (m->scale_outputs)
        x = g_binary(g, G_MUL, "scale_decoder_outputs", x,
                     g_scalar_f(g, dt, pow((double)m->d_model, -0.5)));
    g_output(g, g_linear(g, "lm_head", x, head, G_NONE), "logits");
    blk_logits_first(g);
    if (!g_ok(g))
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    return FERRY_OK;
}

static ferry_status t5_build(const void *hparams, ckpt *ck, const model_io *io, g_graph *g,
                             fy_err *err)
{
    const t5 *m = hparams;
    if (io->component && strcmp(io->component, "encoder") == 0)
        return build_encoder(m, ck, io, g, err);
    return build_decoder(m, ck, io, g, err);
}

/* generate() starts the decoder from decoder_start_token_id alone */
static int64_t t5_generation_prompt(const void *hparams)
{
    (void)hparams;
    return 1;
}

static void t5_describe(const void *hparams, model_hparams *out)
{
    blk_lm_describe(&((const t5 *)hparams)->dec, out);
    out->genai_type = NULL; /* onnxruntime-genai has no T5 model type */
}

static const model_input T5_INPUTS[] = {
    {"input_ids", 2, {"batch", "encoder_sequence"}},
    {"attention_mask", 2, {"batch", "encoder_sequence"}},
    {"decoder_input_ids", 2, {"batch", "sequence"}},
};

const model_arch model_t5 = {
    .architecture = "T5ForConditionalGeneration", .model_type = "t5", .kind = MODEL_CAUSAL_LM,
    .output_class = OUTPUT_SEQ2SEQ, .read = t5_read, .free_hparams = t5_free, .bind = t5_bind,
    .plan = t5_plan, .build = t5_build, .inputs = T5_INPUTS,
    .n_inputs = sizeof T5_INPUTS / sizeof T5_INPUTS[0], .axes = T5_AXES, .n_axes = T5_N_AXES,
    .generation = true, .generation_prompt = t5_generation_prompt, .describe = t5_describe,
};
