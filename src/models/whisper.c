/* whisper.c — WhisperForConditionalGeneration, exported for generation as three graphs:
 *
 *   encoder   input_features [b, num_mel_bins, 2 * max_source_positions] -> last_hidden_state
 *             [b, max_source_positions, d_model], and each decoder layer's cross-attention keys
 *             and values present.<l>.cross_key / cross_value [b, heads, max_source_positions,
 *             head_dim]: the encoder_attn k_proj and v_proj of the encoder's output, computed
 *             once per input instead of at every decoding step
 *   prefill   input_ids and the cross cache -> logits and the self-attention cache
 *   decode    input_ids, the self-attention cache and the cross cache -> logits and the cache
 *             (or one decode taking prompts, as the text models' plans make it)
 *
 * The encoder: two Conv1d (kernel 3, padding 1; the second of stride 2) each followed by gelu,
 * the sinusoidal position table stored in the checkpoint added, N pre-norm layers (LayerNorm,
 * attention over every frame, residual, LayerNorm, fc1, activation, fc2, residual) and a final
 * LayerNorm. transformers takes exactly 2 * max_source_positions mel frames (30 s of audio):
 * the graph takes that many, fixed.
 *
 * The decoder: token embedding (unscaled: transformers 5 reads scale_embedding and never
 * applies it) plus learned
 * positions, N pre-norm layers of causal self-attention with the cache, cross-attention over
 * the cross cache and the MLP, a final LayerNorm and proj_out, tied to the token embedding by
 * default. As transformers' generate() calls it, it takes no attention mask and no
 * position_ids: every decoder prompt of a batch is the same forced tokens, so the positions
 * run on from the cache's length and the mask is all ones (how onnxruntime-genai's whisper
 * decoder is fed too). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate/generation.h"
#include "models/seq2seq.h"
#include "util/json.h"

#define WHISPER_MODULE "transformers.models.whisper.modeling_whisper."
#define LAYER_NORM_CLASS "torch.nn.modules.normalization.LayerNorm"
#define CONV1D_CLASS "torch.nn.modules.conv.Conv1d"
#define OUTPUT_ENCODER "transformers.modeling_outputs.BaseModelOutput"
#define OUTPUT_SEQ2SEQ "transformers.modeling_outputs.Seq2SeqLMOutput"
/* nn.LayerNorm's default: Whisper's norms take no eps from the config */
#define WHISPER_LN_EPS 1e-5

typedef struct whisper {
    /* the decoder: sizes, heads, vocabulary, positions (max_target_positions), activation and
     * the tie of proj_out to embed_tokens, as blk_attend and blk_lm_bind read them */
    blk_lm dec;
    int64_t enc_layers, enc_heads, enc_head_dim, enc_ff;
    int64_t mel_bins, source_positions;
    int64_t init_tokens; /* the prompt generate() makes from the generation config */
} whisper;

static const blk_names NAMES = {.embed = "model.decoder.embed_tokens.weight",
                                .lm_head = "proj_out.weight"};
static const blk_family WHISPER = {.model_type = "whisper", .prefix = "Whisper",
                                   .act_module = "activation_fn"};

static void whisper_free(void *hparams)
{
    whisper *m = hparams;
    if (!m)
        return;
    blk_lm_free(&m->dec);
    free(m);
}

/* How many init tokens generate() starts from with the checkpoint's generation config and
 * no language= or task= passed to it: decoder_start_token_id; then the config's language and
 * task tokens where it names either (the task's "transcribe" with a language alone), else the
 * tokens forced_decoder_ids sets at 1, 2, ... (generation_config.json's, else config.json's);
 * then no_timestamps_token_id unless it is the last of them (python/ferry/whisper.py's
 * init_tokens, after transformers' _retrieve_init_tokens). Only a default: generate() checks
 * the prompt it makes against the export's shapes. */
static int64_t init_token_count(const cJSON *gen, const cJSON *config)
{
    int64_t n = 1;
    double last = -1;
    const cJSON *language = cJSON_GetObjectItemCaseSensitive(gen, "language");
    const cJSON *task = cJSON_GetObjectItemCaseSensitive(gen, "task");
    bool has_language = language && !cJSON_IsNull(language);
    bool has_task = task && !cJSON_IsNull(task);
    const cJSON *forced = cJSON_GetObjectItemCaseSensitive(gen, "forced_decoder_ids");
    if (!forced || cJSON_IsNull(forced))
        forced = cJSON_GetObjectItemCaseSensitive(config, "forced_decoder_ids");
    const cJSON *pair;
    if (has_language || has_task) {
        n += has_language;
        n += has_task || cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(gen, "task_to_id"));
    } else if (cJSON_IsArray(forced)) {
        int index = 1;
        cJSON_ArrayForEach(pair, forced) {
            const cJSON *at = cJSON_GetArrayItem(pair, 0), *token = cJSON_GetArrayItem(pair, 1);
            if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2 || !cJSON_IsNumber(at) ||
                at->valuedouble != index++)
                break;
            /* a null token is no token, but it is the last one no_timestamps is compared with */
            n += cJSON_IsNumber(token);
            last = cJSON_IsNumber(token) ? token->valuedouble : -1;
        }
    }
    const cJSON *none = cJSON_GetObjectItemCaseSensitive(gen, "no_timestamps_token_id");
    if (cJSON_IsNumber(none) && none->valuedouble != last)
        n++;
    return n;
}

static ferry_status read_config(const model_config *cfg, whisper *m, fy_err *err)
{
    const cJSON *c = cfg->raw;
    const char *origin = cfg->text_origin;
    blk_lm *d = &m->dec;
    int64_t d_model, dec_heads;
    char act[32];
    ferry_status st;
    if ((st = json_get_int(c, "vocab_size", false, 51865, 1, LM_MAX_VOCAB, origin, &d->vocab,
                           err)) ||
        (st = json_get_int(c, "num_mel_bins", false, 80, 1, 4096, origin, &m->mel_bins, err)) ||
        (st = json_get_int(c, "d_model", false, 384, 1, LM_MAX_HIDDEN, origin, &d_model, err)) ||
        (st = json_get_int(c, "encoder_layers", false, 4, 1, LM_MAX_LAYERS, origin,
                           &m->enc_layers, err)) ||
        (st = json_get_int(c, "decoder_layers", false, 4, 1, LM_MAX_LAYERS, origin,
                           &d->n_layers, err)) ||
        (st = json_get_int(c, "encoder_attention_heads", false, 6, 1, LM_MAX_HEADS, origin,
                           &m->enc_heads, err)) ||
        (st = json_get_int(c, "decoder_attention_heads", false, 6, 1, LM_MAX_HEADS, origin,
                           &dec_heads, err)) ||
        (st = json_get_int(c, "encoder_ffn_dim", false, 1536, 1, LM_MAX_INTERMEDIATE, origin,
                           &m->enc_ff, err)) ||
        (st = json_get_int(c, "decoder_ffn_dim", false, 1536, 1, LM_MAX_INTERMEDIATE, origin,
                           &d->intermediate, err)) ||
        (st = json_get_int(c, "max_source_positions", false, 1500, 1, 1 << 20, origin,
                           &m->source_positions, err)) ||
        (st = json_get_int(c, "max_target_positions", false, 448, 1, LM_MAX_POSITIONS, origin,
                           &d->max_position_embeddings, err)) ||
        (st = json_get_bool(c, "tie_word_embeddings", false, true, origin, &d->tie_embeddings,
                            err)) ||
        (st = json_get_string(c, "activation_function", false, "gelu", origin, act, sizeof act,
                              err)) ||
        (st = cfg_check_name(origin, "activation_function", act, err)))
        return st;
    if (!blk_activation(act, &d->act, &d->act_class))
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: activation_function '%s' is not "
                       "supported for %s (supported: gelu, gelu_new, gelu_pytorch_tanh, silu)",
                       origin, act, cfg->architecture);
    if (d_model % m->enc_heads != 0 || d_model % dec_heads != 0)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: d_model (%lld) must be a multiple of "
                       "encoder_attention_heads (%lld) and decoder_attention_heads (%lld)", origin,
                       (long long)d_model, (long long)m->enc_heads, (long long)dec_heads);
    d->hidden = d_model;
    d->n_heads = d->n_kv_heads = dec_heads;
    d->head_dim = d_model / dec_heads;
    d->eps = WHISPER_LN_EPS;
    m->enc_head_dim = d_model / m->enc_heads;
    d->family = &WHISPER;
    d->names = &NAMES;
    m->init_tokens = init_token_count(cfg->generation, cfg->raw);
    if (m->init_tokens >= d->max_position_embeddings)
        m->init_tokens = 0; /* generate() refuses it by name; the axis keeps its example */
    d->window = calloc((size_t)d->n_layers, sizeof *d->window);
    if (!d->window)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    return FERRY_OK;
}

static ferry_status whisper_read(const model_config *cfg, void **out, fy_err *err)
{
    *out = NULL;
    whisper *m = calloc(1, sizeof *m);
    if (!m)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    if (read_config(cfg, m, err) != FERRY_OK) {
        whisper_free(m);
        return err->status;
    }
    *out = m;
    return FERRY_OK;
}

static ferry_status whisper_bind(void *hparams, const ckpt *ck, char *warning, size_t size,
                                 fy_err *err)
{
    return blk_lm_bind(&((whisper *)hparams)->dec, ck, warning, size, err);
}

static ferry_status whisper_plan(const void *hparams, const model_plan_request *rq,
                                 model_plan *out, fy_err *err)
{
    (void)hparams;
    /* XNNPACK's and the portable kernels' fp16 overflow in the encoder's last norm (tiny.en's
     * states reach 626, whose square fp16 cannot hold): NaN from every call */
    if (rq->gen && rq->cfg->dtype == FERRY_F16 && strcmp(rq->format, "executorch") == 0)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s on executorch in fp16: ExecuTorch's fp16 "
                       "kernels overflow in the encoder's layer norms (tiny.en's encoder gives "
                       "NaN); export fp32", rq->arch->architecture);
    if (rq->gen && rq->single_graph && rq->cfg->dtype != FERRY_F32)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s on %s: openvino-genai's WhisperPipeline "
                       "hands the encoder's f32 output to the stateful decoder, so it is "
                       "written in fp32; --compress-to-fp16 stores its weights in fp16, or "
                       "--quantize int8|int4 compresses them (--disable-stateful writes %s "
                       "components)", rq->arch->architecture, rq->format,
                       ferry_dtype_name(rq->cfg->dtype));
    /* OpenVINO's stateful graph is laid out as openvino-genai's WhisperPipeline loads it
     * (optimum-intel's file names): the encoder, then one decoder from the tokens and the
     * encoder's output, its self-attention cache in the model's variables. The encoder runs
     * once an input: quantizing it saves little time and costs words (tiny.en int4 heard
     * "roundfog stump" for "brown fox jump"), so only the decoders' linears are. */
    /* ferry's encoder returns the cross cache beside last_hidden_state: no ModelOutput class
     * of transformers' holds both */
    static const s2s_layout ferry_layout = {
        .encoder_name = "encoder", .encoder_component = "encoder",
        .decoder_output = OUTPUT_SEQ2SEQ, .encoder_float = true};
    static const s2s_layout genai_layout = {
        .encoder_name = "encoder_model", .encoder_component = "genai_encoder",
        .encoder_output = OUTPUT_ENCODER, .decoder_name = "decoder_model",
        .decoder_component = "genai_decoder", .decoder_output = OUTPUT_SEQ2SEQ,
        .encoder_float = true};
    return s2s_plan(rq, rq->single_graph ? &genai_layout : &ferry_layout, g_dim_const(1), out,
                    err);
}

static void module(g_graph *g, const char *cls, g_op leaf, bool item, const char *fmt, int l)
{
    char scope[128];
    snprintf(scope, sizeof scope, fmt, l);
    g_module_add(g, cls, leaf, item, GM_ROLE_NONE, "%s", scope);
}

/* An attention module at `at` (a format taking the layer): WhisperAttention and its
 * projections; a cross-attention's key and value projections, of the encoder's output, have
 * that role. */
static void attention_modules(g_graph *g, const char *at, int l, bool cross)
{
    char scope[128];
    module(g, WHISPER_MODULE "WhisperAttention", G_OP_COUNT, false, at, l);
    static const char *const proj[] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    for (size_t i = 0; i < sizeof proj / sizeof proj[0]; i++) {
        char fmt[128];
        snprintf(fmt, sizeof fmt, "%s/%s", at, proj[i]);
        snprintf(scope, sizeof scope, fmt, l);
        bool kv = cross && (i == 1 || i == 2);
        g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, kv ? GM_ROLE_CROSS_KV : GM_ROLE_NONE,
                     "%s", scope);
    }
}

/* A layer's norms and MLP at `at` ("/model/encoder/layers.%d"). */
static void mlp_modules(g_graph *g, const whisper *m, const char *at, int l)
{
    char fmt[128];
    static const char *const norms[] = {"self_attn_layer_norm", "final_layer_norm"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(fmt, sizeof fmt, "%s/%s", at, norms[i]);
        module(g, LAYER_NORM_CLASS, G_LAYER_NORM, false, fmt, l);
    }
    snprintf(fmt, sizeof fmt, "%s/fc1", at);
    module(g, BLK_LINEAR_CLASS, G_LINEAR, false, fmt, l);
    snprintf(fmt, sizeof fmt, "%s/fc2", at);
    module(g, BLK_LINEAR_CLASS, G_LINEAR, false, fmt, l);
    snprintf(fmt, sizeof fmt, "%s/activation_fn", at);
    module(g, m->dec.act_class, m->dec.act, false, fmt, l);
}

static void declare_modules(g_graph *g, const whisper *m, bool encoder)
{
    g_module_add(g, WHISPER_MODULE "WhisperForConditionalGeneration", G_OP_COUNT, false,
                 GM_ROLE_NONE, "%s", "");
    module(g, WHISPER_MODULE "WhisperModel", G_OP_COUNT, false, "/model", 0);
    module(g, WHISPER_MODULE "WhisperDecoder", G_OP_COUNT, false, "/model/decoder", 0);
    if (encoder) {
        module(g, WHISPER_MODULE "WhisperEncoder", G_OP_COUNT, false, "/model/encoder", 0);
        module(g, CONV1D_CLASS, G_CONV, false, "/model/encoder/conv1", 0);
        module(g, CONV1D_CLASS, G_CONV, false, "/model/encoder/conv2", 0);
        for (int l = 0; l < m->enc_layers; l++) {
            module(g, WHISPER_MODULE "WhisperEncoderLayer", G_OP_COUNT, true,
                   "/model/encoder/layers.%d", l);
            attention_modules(g, "/model/encoder/layers.%d/self_attn", l, false);
            mlp_modules(g, m, "/model/encoder/layers.%d", l);
        }
        module(g, LAYER_NORM_CLASS, G_LAYER_NORM, false, "/model/encoder/layer_norm", 0);
        /* the decoder layers' cross projections of the encoder's output */
        for (int l = 0; l < m->dec.n_layers; l++) {
            module(g, WHISPER_MODULE "WhisperDecoderLayer", G_OP_COUNT, true,
                   "/model/decoder/layers.%d", l);
            attention_modules(g, "/model/decoder/layers.%d/encoder_attn", l, true);
        }
        return;
    }
    module(g, BLK_EMBEDDING_CLASS, G_EMBEDDING, false, "/model/decoder/embed_tokens", 0);
    module(g, WHISPER_MODULE "WhisperPositionalEmbedding", G_EMBEDDING, false,
           "/model/decoder/embed_positions", 0);
    for (int l = 0; l < m->dec.n_layers; l++) {
        module(g, WHISPER_MODULE "WhisperDecoderLayer", G_OP_COUNT, true,
               "/model/decoder/layers.%d", l);
        attention_modules(g, "/model/decoder/layers.%d/self_attn", l, false);
        attention_modules(g, "/model/decoder/layers.%d/encoder_attn", l, true);
        module(g, LAYER_NORM_CLASS, G_LAYER_NORM, false,
               "/model/decoder/layers.%d/encoder_attn_layer_norm", l);
        mlp_modules(g, m, "/model/decoder/layers.%d", l);
    }
    module(g, LAYER_NORM_CLASS, G_LAYER_NORM, false, "/model/decoder/layer_norm", 0);
    g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_HEAD, "/proj_out");
}

/* The weights of one attention (bias on q, v and out; k_proj has none). */
typedef struct attn_w {
    int q, q_b, k, v, v_b, o, o_b;
} attn_w;

/* One layer's weights: its attention(s), norms and MLP. */
typedef struct layer_w {
    attn_w self, cross;
    int ln_self, ln_self_b, ln_cross, ln_cross_b, ln_ff, ln_ff_b;
    int fc1, fc1_b, fc2, fc2_b;
} layer_w;

#define W(slot, fmt, d0, d1)                                                              \
    do {                                                                                 \
        (slot) = blk_weight(g, ck, fmt, l, true, d0, d1, dt, err);                       \
        if (err->status != FERRY_OK)                                                     \
            return err->status;                                                          \
    } while (0)

/* The k and v projections of attention `at` ("model.decoder.layers.%d.encoder_attn"). */
static ferry_status bind_kv(g_graph *g, ckpt *ck, const char *at, int l, int64_t d,
                            ferry_dtype dt, attn_w *w, fy_err *err)
{
    char name[160];
    snprintf(name, sizeof name, "%s.k_proj.weight", at);
    W(w->k, name, d, d);
    snprintf(name, sizeof name, "%s.v_proj.weight", at);
    W(w->v, name, d, d);
    snprintf(name, sizeof name, "%s.v_proj.bias", at);
    W(w->v_b, name, d, 0);
    return FERRY_OK;
}

static ferry_status bind_attention(g_graph *g, ckpt *ck, const char *at, int l, int64_t d,
                                   bool kv, ferry_dtype dt, attn_w *w, fy_err *err)
{
    char name[160];
    w->k = w->v = w->v_b = G_NONE;
    if (kv && bind_kv(g, ck, at, l, d, dt, w, err) != FERRY_OK)
        return err->status;
    snprintf(name, sizeof name, "%s.q_proj.weight", at);
    W(w->q, name, d, d);
    snprintf(name, sizeof name, "%s.q_proj.bias", at);
    W(w->q_b, name, d, 0);
    snprintf(name, sizeof name, "%s.out_proj.weight", at);
    W(w->o, name, d, d);
    snprintf(name, sizeof name, "%s.out_proj.bias", at);
    W(w->o_b, name, d, 0);
    return FERRY_OK;
}

/* Layer l of the encoder (`side` "encoder") or the decoder. */
static ferry_status bind_layer(g_graph *g, ckpt *ck, const whisper *m, const char *side, int l,
                               ferry_dtype dt, layer_w *w, fy_err *err)
{
    bool decoder = strcmp(side, "decoder") == 0;
    int64_t d = m->dec.hidden, ff = decoder ? m->dec.intermediate : m->enc_ff;
    char at[128], name[160];
    snprintf(at, sizeof at, "model.%s.layers.%%d.self_attn", side);
    if (bind_attention(g, ck, at, l, d, true, dt, &w->self, err) != FERRY_OK)
        return err->status;
    w->ln_cross = w->ln_cross_b = G_NONE;
    if (decoder) {
        if (bind_attention(g, ck, "model.decoder.layers.%d.encoder_attn", l, d, false, dt,
                           &w->cross, err) != FERRY_OK)
            return err->status;
        W(w->ln_cross, "model.decoder.layers.%d.encoder_attn_layer_norm.weight", d, 0);
        W(w->ln_cross_b, "model.decoder.layers.%d.encoder_attn_layer_norm.bias", d, 0);
    }
#define L(slot, suffix, d0, d1)                                                           \
    do {                                                                                 \
        snprintf(name, sizeof name, "model.%s.layers.%%d.%s", side, suffix);             \
        W(slot, name, d0, d1);                                                           \
    } while (0)
    L(w->ln_self, "self_attn_layer_norm.weight", d, 0);
    L(w->ln_self_b, "self_attn_layer_norm.bias", d, 0);
    L(w->ln_ff, "final_layer_norm.weight", d, 0);
    L(w->ln_ff_b, "final_layer_norm.bias", d, 0);
    L(w->fc1, "fc1.weight", ff, d);
    L(w->fc1_b, "fc1.bias", ff, 0);
    L(w->fc2, "fc2.weight", d, ff);
    L(w->fc2_b, "fc2.bias", d, 0);
#undef L
    return FERRY_OK;
}
#undef W

/* [b, s, heads * d] -> [b, s, heads, d] */
static int split_heads(g_graph *g, const char *name, int x, int64_t heads, int64_t head_dim)
{
    return g_reshape_spec(g, name, x, 4, (int64_t[]){0, 0, heads, head_dim});
}

/* The MLP of the layer at the current scope: fc2(act(fc1(x))). */
static int mlp(g_graph *g, const whisper *m, const layer_w *w, int x)
{
    int h = g_unary(g, m->dec.act, "activation_fn", g_linear(g, "fc1", x, w->fc1, w->fc1_b));
    return g_linear(g, "fc2", h, w->fc2, w->fc2_b);
}

/* Encoder layer l's self-attention over every frame, on x (after its norm). */
static int encoder_attention(g_graph *g, const whisper *m, const layer_w *w, int l, int x)
{
    int64_t h = m->enc_heads, hd = m->enc_head_dim;
    g_scope(g, "/model/encoder/layers.%d/self_attn", l);
    int q = split_heads(g, "q_proj/Reshape", g_linear(g, "q_proj", x, w->self.q, w->self.q_b),
                        h, hd);
    int k = split_heads(g, "k_proj/Reshape", g_linear(g, "k_proj", x, w->self.k, G_NONE), h, hd);
    int v = split_heads(g, "v_proj/Reshape", g_linear(g, "v_proj", x, w->self.v, w->self.v_b),
                        h, hd);
    g_attn_opts ao = {.num_heads = h, .num_kv_heads = h, .head_dim = hd,
                      .scale = 1.0 / sqrt((double)hd), .mask = G_MASK_NONE,
                      .cache = G_CACHE_NONE};
    int a = g_attention(g, "attn", q, k, v, G_NONE, G_NONE, G_NONE, G_NONE, &ao, NULL, NULL);
    return g_linear(g, "out_proj", a, w->self.o, w->self.o_b);
}

/* Decoder layer l's cross keys and values of the encoder's output `hidden`: encoder_attn's
 * k_proj and v_proj as [b, heads, frames, head_dim]. */
static ferry_status cross_kv(g_graph *g, ckpt *ck, const whisper *m, int l, int hidden,
                             ferry_dtype dt, int *k, int *v, fy_err *err)
{
    const blk_lm *dec = &m->dec;
    static const int64_t to_bnsd[4] = {0, 2, 1, 3};
    attn_w w;
    if (bind_kv(g, ck, "model.decoder.layers.%d.encoder_attn", l, dec->hidden, dt, &w, err) !=
        FERRY_OK)
        return err->status;
    g_scope(g, "/model/decoder/layers.%d/encoder_attn", l);
    *k = split_heads(g, "k_proj/Reshape", g_linear(g, "k_proj", hidden, w.k, G_NONE),
                     dec->n_heads, dec->head_dim);
    *v = split_heads(g, "v_proj/Reshape", g_linear(g, "v_proj", hidden, w.v, w.v_b),
                     dec->n_heads, dec->head_dim);
    *k = g_transpose(g, "k_proj/Transpose", *k, 4, to_bnsd);
    *v = g_transpose(g, "v_proj/Transpose", *v, 4, to_bnsd);
    g->scope[0] = '\0';
    return FERRY_OK;
}

static int conv(g_graph *g, ckpt *ck, const whisper *m, const char *which, int x, int64_t c_in,
                int64_t stride, ferry_dtype dt, fy_err *err)
{
    char name[64];
    int64_t d = m->dec.hidden;
    snprintf(name, sizeof name, "model.encoder.%s.weight", which);
    int w = blk_tensor(g, ck, name, 3, (int64_t[]){d, c_in, 3}, dt, err);
    snprintf(name, sizeof name, "model.encoder.%s.bias", which);
    int b = blk_weight(g, ck, name, 0, true, d, 0, dt, err);
    if (err->status != FERRY_OK)
        return G_NONE;
    g_conv_opts o = {.spatial = 1, .strides = {stride}, .pads_begin = {1}, .pads_end = {1},
                     .dilations = {1}, .groups = 1};
    return g_conv(g, which, x, w, b, &o);
}

static ferry_status build_encoder(const whisper *m, ckpt *ck, const model_io *io, g_graph *g,
                                  fy_err *err)
{
    ferry_dtype dt = io->dtype;
    int64_t d = m->dec.hidden, frames = m->source_positions;
    snprintf(g->base_scope, sizeof g->base_scope, "/model/encoder");
    int feats = g_input(g, "input_features", dt, 3,
                        (g_dim[]){io->batch, g_dim_const(m->mel_bins),
                                  g_dim_const(2 * frames)});
    int table = blk_weight(g, ck, "model.encoder.embed_positions.weight", 0, true, frames, d, dt,
                           err);
    int ln = blk_weight(g, ck, "model.encoder.layer_norm.weight", 0, true, d, 0, dt, err);
    int ln_b = blk_weight(g, ck, "model.encoder.layer_norm.bias", 0, true, d, 0, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    declare_modules(g, m, true);
    g_scope(g, "/model/encoder");
    int x = conv(g, ck, m, "conv1", feats, m->mel_bins, 1, dt, err);
    g_scope(g, "/model/encoder");
    x = g_unary(g, G_GELU, "gelu", x);
    x = conv(g, ck, m, "conv2", x, d, 2, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    g_scope(g, "/model/encoder");
    x = g_unary(g, G_GELU, "gelu_1", x);
    x = g_transpose(g, "permute", x, 3, (int64_t[]){0, 2, 1});
    int res = g_binary(g, G_ADD, "add", x, table);
    layer_w w;
    if (bind_layer(g, ck, m, "encoder", 0, dt, &w, err) != FERRY_OK)
        return err->status;
    g_scope(g, "/model/encoder/layers.0");
    x = g_layer_norm(g, "self_attn_layer_norm", res, w.ln_self, w.ln_self_b, WHISPER_LN_EPS);
    for (int l = 0; l < m->enc_layers; l++) {
        int a = encoder_attention(g, m, &w, l, x);
        g_scope(g, "/model/encoder/layers.%d", l);
        x = g_skip_layer_norm(g, "final_layer_norm", a, res, w.ln_ff, w.ln_ff_b,
                              WHISPER_LN_EPS, &res);
        int f = mlp(g, m, &w, x);
        /* the residual add fused with the next norm: the next layer's, or the encoder's */
        int next = ln, next_b = ln_b;
        if (l + 1 < m->enc_layers) {
            if (bind_layer(g, ck, m, "encoder", l + 1, dt, &w, err) != FERRY_OK)
                return err->status;
            next = w.ln_self;
            next_b = w.ln_self_b;
            g_scope(g, "/model/encoder/layers.%d", l + 1);
        } else {
            g_scope(g, "/model/encoder");
        }
        x = g_skip_layer_norm(g, l + 1 < m->enc_layers ? "self_attn_layer_norm" : "layer_norm",
                              f, res, next, next_b, WHISPER_LN_EPS, &res);
    }
    g->scope[0] = '\0';
    g_output(g, x, "last_hidden_state");
    /* each decoder layer's cross keys and values, unless the decoder makes its own (genai's
     * OpenVINO layout) */
    bool cross = !(io->component && strcmp(io->component, "genai_encoder") == 0);
    for (int l = 0; cross && l < m->dec.n_layers; l++) {
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

/* Decoder layer l's cross-attention on x (after its norm): over the cross cache inputs, or
 * over the keys and values it makes of `hidden`, the encoder's output (G_NONE: none given). */
static int cross_attention(g_graph *g, ckpt *ck, const whisper *m, const layer_w *w, int l,
                           int x, int hidden, const model_io *io, fy_err *err)
{
    const blk_lm *d = &m->dec;
    int k, v;
    if (hidden != G_NONE) {
        if (cross_kv(g, ck, m, l, hidden, io->dtype, &k, &v, err) != FERRY_OK)
            return G_NONE;
    } else {
        s2s_cross_inputs(g, io, l, d->n_heads, g_dim_const(m->source_positions), d->head_dim,
                         &k, &v);
    }
    g_scope(g, "/model/decoder/layers.%d/encoder_attn", l);
    int q = split_heads(g, "q_proj/Reshape", g_linear(g, "q_proj", x, w->cross.q, w->cross.q_b),
                        d->n_heads, d->head_dim);
    g_attn_opts ao = {.num_heads = d->n_heads, .num_kv_heads = d->n_heads,
                      .head_dim = d->head_dim, .scale = 1.0 / sqrt((double)d->head_dim),
                      .mask = G_MASK_NONE, .cache = G_CACHE_CROSS};
    int a = g_attention(g, "attn", q, k, v, G_NONE, G_NONE, G_NONE, G_NONE, &ao, NULL, NULL);
    return g_linear(g, "out_proj", a, w->cross.o, w->cross.o_b);
}

/* Decoder layer l's causal self-attention on x (after its norm), with the cache. */
static int self_attention(g_graph *g, const whisper *m, const layer_w *w, int l, int x,
                          const blk_inputs *in)
{
    const blk_lm *d = &m->dec;
    g_scope(g, "/model/decoder/layers.%d/self_attn", l);
    int q = split_heads(g, "q_proj/Reshape", g_linear(g, "q_proj", x, w->self.q, w->self.q_b),
                        d->n_heads, d->head_dim);
    int k = split_heads(g, "k_proj/Reshape", g_linear(g, "k_proj", x, w->self.k, G_NONE),
                        d->n_heads, d->head_dim);
    int v = split_heads(g, "v_proj/Reshape", g_linear(g, "v_proj", x, w->self.v, w->self.v_b),
                        d->n_heads, d->head_dim);
    int a = blk_attend(g, d, l, q, k, v, in, 1.0 / sqrt((double)d->head_dim));
    return g_linear(g, "out_proj", a, w->self.o, w->self.o_b);
}

static ferry_status build_decoder(const whisper *m, ckpt *ck, const model_io *io, g_graph *g,
                                  fy_err *err)
{
    const blk_lm *d = &m->dec;
    ferry_dtype dt = io->dtype;
    int64_t h = d->hidden;
    snprintf(g->base_scope, sizeof g->base_scope, "/model/decoder");
    blk_inputs in = {.embeds = G_NONE, .positions = G_NONE, .io = io};
    in.ids = g_input(g, "input_ids", FERRY_I64, 2, (g_dim[]){io->batch, io->sequence});
    g_input_role_set(g, in.ids, GI_TOKEN_IDS);
    /* genai's OpenVINO decoder takes the encoder's output and makes the cross keys itself */
    int hidden = G_NONE;
    if (io->component && strcmp(io->component, "genai_decoder") == 0)
        hidden = g_input(g, "encoder_hidden_states", dt, 3,
                         (g_dim[]){io->batch, g_dim_const(m->source_positions),
                                   g_dim_const(h)});
    int embed = blk_weight(g, ck, d->tie_embeddings ? d->tied_name : d->names->embed, 0, true,
                           d->vocab, h, dt, err);
    int table = blk_weight(g, ck, "model.decoder.embed_positions.weight", 0, true,
                           d->max_position_embeddings, h, dt, err);
    int ln = blk_weight(g, ck, "model.decoder.layer_norm.weight", 0, true, h, 0, dt, err);
    int ln_b = blk_weight(g, ck, "model.decoder.layer_norm.bias", 0, true, h, 0, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    int head = embed;
    if (!d->tie_embeddings) {
        head = blk_weight(g, ck, d->names->lm_head, 0, true, d->vocab, h, dt, err);
        if (err->status != FERRY_OK)
            return err->status;
    } else if (d->tied_twin) {
        ckpt_take(ck, d->tied_twin); /* same bytes as the tensor read: used through the tie */
    }
    declare_modules(g, m, false);
    const char *at = "/model/decoder/embed_positions";
    int start = s2s_first_position(g, d, io, at);
    int positions = s2s_positions(g, io, in.ids, start, at);
    g_scope(g, "%s", at);
    int pos_embeds = g_embedding(g, "embedding", table, positions);
    in.mask = s2s_self_mask(g, d, io, in.ids, start, positions, "/model/decoder/attention_mask");
    g_scope(g, "/model/decoder/embed_tokens");
    int tokens = g_embedding(g, "embedding", embed, in.ids);
    g_scope(g, "/model/decoder");
    int res = g_binary(g, G_ADD, "add", tokens, pos_embeds);
    layer_w w;
    if (bind_layer(g, ck, m, "decoder", 0, dt, &w, err) != FERRY_OK)
        return err->status;
    g_scope(g, "/model/decoder/layers.0");
    int x = g_layer_norm(g, "self_attn_layer_norm", res, w.ln_self, w.ln_self_b, d->eps);
    for (int l = 0; l < d->n_layers; l++) {
        int a = self_attention(g, m, &w, l, x, &in);
        g_scope(g, "/model/decoder/layers.%d", l);
        x = g_skip_layer_norm(g, "encoder_attn_layer_norm", a, res, w.ln_cross, w.ln_cross_b,
                              d->eps, &res);
        int c = cross_attention(g, ck, m, &w, l, x, hidden, io, err);
        if (err->status != FERRY_OK)
            return err->status;
        g_scope(g, "/model/decoder/layers.%d", l);
        x = g_skip_layer_norm(g, "final_layer_norm", c, res, w.ln_ff, w.ln_ff_b, d->eps, &res);
        int f = mlp(g, m, &w, x);
        int next = ln, next_b = ln_b;
        if (l + 1 < d->n_layers) {
            if (bind_layer(g, ck, m, "decoder", l + 1, dt, &w, err) != FERRY_OK)
                return err->status;
            next = w.ln_self;
            next_b = w.ln_self_b;
            g_scope(g, "/model/decoder/layers.%d", l + 1);
        } else {
            g_scope(g, "/model/decoder");
        }
        x = g_skip_layer_norm(g, l + 1 < d->n_layers ? "self_attn_layer_norm" : "layer_norm", f,
                              res, next, next_b, d->eps, &res);
    }
    g->scope[0] = '\0';
    g_output(g, g_linear(g, "proj_out", x, head, G_NONE), "logits");
    blk_logits_first(g);
    if (!g_ok(g))
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    return FERRY_OK;
}

static ferry_status whisper_build(const void *hparams, ckpt *ck, const model_io *io, g_graph *g,
                                  fy_err *err)
{
    const whisper *m = hparams;
    if (io->component && (strcmp(io->component, "encoder") == 0 ||
                          strcmp(io->component, "genai_encoder") == 0))
        return build_encoder(m, ck, io, g, err);
    return build_decoder(m, ck, io, g, err);
}

static int64_t whisper_max_sequence(const void *hparams)
{
    return ((const whisper *)hparams)->dec.max_position_embeddings;
}

static int64_t whisper_generation_prompt(const void *hparams)
{
    return ((const whisper *)hparams)->init_tokens;
}

static void whisper_describe(const void *hparams, model_hparams *out)
{
    const whisper *m = hparams;
    blk_lm_describe(&m->dec, out);
    out->genai_type = "whisper";
    out->context_length = m->dec.max_position_embeddings;
    out->num_mel_bins = m->mel_bins;
    out->encoder_layers = m->enc_layers;
    out->encoder_heads = m->enc_heads;
    out->encoder_head_dim = m->enc_head_dim;
}

/* What the processor gives: the features (the decoder prompt is the generation config's). */
static unsigned whisper_default_inputs(const void *hparams)
{
    (void)hparams;
    return FERRY_INPUT_IDS;
}

static const model_input WHISPER_INPUTS[] = {
    {"input_features", 1, {"batch"}},
    {"input_ids", 2, {"batch", "sequence"}},
};

const model_arch model_whisper = {
    .architecture = "WhisperForConditionalGeneration", .model_type = "whisper",
    .kind = MODEL_CAUSAL_LM, .output_class = OUTPUT_SEQ2SEQ, .read = whisper_read,
    .free_hparams = whisper_free, .bind = whisper_bind, .plan = whisper_plan,
    .build = whisper_build, .inputs = WHISPER_INPUTS,
    .n_inputs = sizeof WHISPER_INPUTS / sizeof WHISPER_INPUTS[0], .generation = true,
    .default_inputs = whisper_default_inputs, .max_sequence = whisper_max_sequence,
    .generation_prompt = whisper_generation_prompt,
    .describe = whisper_describe,
};
