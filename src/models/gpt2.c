/* gpt2.c — GPT2LMHeadModel: token and learned position embeddings added, N x [LayerNorm,
 * attention (one fused c_attn with bias, no rope), residual, LayerNorm, MLP (c_fc, activation,
 * c_proj, not gated), residual], a final LayerNorm and the head, tied to the token embedding by
 * default. Its projections are transformers' Conv1D: weights stored [in, out], read as the
 * [out, in] matrix of a linear (blk_conv1d_weight). The scores are scaled by 1/sqrt(head_dim)
 * unless scale_attn_weights is false, and also by 1/(layer + 1) with
 * scale_attn_by_inverse_layer_idx. reorder_and_upcast_attn and cross-attention are refused by
 * name. Checkpoints name the base model's tensors "transformer.h.0..." (save_pretrained) or
 * "h.0..." (the original GPT-2 files), whose attn.bias / attn.masked_bias mask buffers
 * transformers ignores on load, as ferry does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate/generation.h"
#include "models/blocks.h"
#include "util/json.h"

#define CONV1D_CLASS "transformers.pytorch_utils.Conv1D"
#define LAYER_NORM_CLASS "torch.nn.modules.normalization.LayerNorm"
#define GPT2_PREFIX "transformer."

typedef struct gpt2 {
    blk_lm lm;               /* sizes, heads, eps (layer_norm_epsilon), activation, tying */
    bool scale_attn_weights; /* scores / sqrt(head_dim) */
    bool scale_by_layer;     /* ... and / (layer + 1) (scale_attn_by_inverse_layer_idx) */
    const char *prefix;      /* the base model's tensor names start so: GPT2_PREFIX or "" */
} gpt2;

/* Only the names blk_lm_bind reads to settle the tie. */
static const blk_names SAVED_NAMES = {.embed = GPT2_PREFIX "wte.weight",
                                      .lm_head = "lm_head.weight"};
static const blk_names ORIGINAL_NAMES = {.embed = "wte.weight", .lm_head = "lm_head.weight"};

static const blk_family GPT2 = {.model_type = "gpt2", .prefix = "GPT2", .act_module = "act"};

/* GPT2Config's key, or the name transformers maps to it (its attribute_map: hidden_size for
 * n_embd, ...) when that is the one given; both given must agree. */
static ferry_status get_int(const model_config *cfg, const char *key, const char *alias,
                            int64_t dflt, int64_t max, int64_t *out, fy_err *err)
{
    const cJSON *own = NULL, *other = NULL;
    int64_t a;
    ferry_status st = json_get_member(cfg->text, key, false, cfg->text_origin, &own, err);
    if (st == FERRY_OK && alias)
        st = json_get_member(cfg->text, alias, false, cfg->text_origin, &other, err);
    if (st == FERRY_OK)
        st = json_get_int(cfg->text, own || !other ? key : alias, false, dflt, 1, max,
                          cfg->text_origin, out, err);
    if (st == FERRY_OK && own && other &&
        (st = json_get_int(cfg->text, alias, false, dflt, 1, max, cfg->text_origin, &a,
                           err)) == FERRY_OK &&
        a != *out)
        st = fy_fail(err, FERRY_ERR_FORMAT, "%s: keys '%s' (%lld) and '%s' (%lld) name the same "
                     "size and disagree", cfg->text_origin, key, (long long)*out, alias,
                     (long long)a);
    return st;
}

static ferry_status refuse_true(const model_config *cfg, const char *key, const char *why,
                                fy_err *err)
{
    bool set;
    ferry_status st = json_get_bool(cfg->text, key, false, false, cfg->text_origin, &set, err);
    if (st == FERRY_OK && set)
        st = fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: %s true is not supported for %s (%s)",
                     cfg->text_origin, key, cfg->architecture, why);
    return st;
}

/* GPT2Config's keys and defaults, into the lm_config blk_lm_from_config reads. */
static ferry_status read_config(const model_config *cfg, lm_config *c, gpt2 *m, fy_err *err)
{
    const char *origin = cfg->text_origin;
    ferry_status st;
    memset(c, 0, sizeof *c);
    if ((st = get_int(cfg, "vocab_size", NULL, 50257, LM_MAX_VOCAB, &c->vocab_size, err)) ||
        (st = get_int(cfg, "n_positions", "max_position_embeddings", 1024, LM_MAX_POSITIONS,
                      &c->max_position_embeddings, err)) ||
        (st = get_int(cfg, "n_embd", "hidden_size", 768, LM_MAX_HIDDEN, &c->hidden_size,
                      err)) ||
        (st = get_int(cfg, "n_layer", "num_hidden_layers", 12, LM_MAX_LAYERS,
                      &c->num_hidden_layers, err)) ||
        (st = get_int(cfg, "n_head", "num_attention_heads", 12, LM_MAX_HEADS,
                      &c->num_attention_heads, err)) ||
        (st = get_int(cfg, "n_inner", NULL, 4 * c->hidden_size, LM_MAX_INTERMEDIATE,
                      &c->intermediate_size, err)) ||
        (st = json_get_double(cfg->text, "layer_norm_epsilon", false, 1e-5, LM_EPS_MIN,
                              LM_EPS_MAX, origin, &c->rms_norm_eps, err)) ||
        (st = json_get_string(cfg->text, "activation_function", false, "gelu_new", origin,
                              c->hidden_act, sizeof c->hidden_act, err)) ||
        (st = cfg_check_name(origin, "activation_function", c->hidden_act, err)) ||
        (st = json_get_bool(cfg->text, "tie_word_embeddings", false, true, origin,
                            &c->tie_word_embeddings, err)) ||
        (st = json_get_bool(cfg->text, "scale_attn_weights", false, true, origin,
                            &m->scale_attn_weights, err)) ||
        (st = json_get_bool(cfg->text, "scale_attn_by_inverse_layer_idx", false, false, origin,
                            &m->scale_by_layer, err)) ||
        (st = refuse_true(cfg, "reorder_and_upcast_attn", "its scores are computed in float32 "
                          "whatever the dtype, which ferry's attention does not promise", err)) ||
        (st = refuse_true(cfg, "add_cross_attention", "ferry exports GPT-2 as a decoder-only "
                          "model", err)))
        return st;
    /* transformers refuses a null activation; absent, it is gelu_new */
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cfg->text, "activation_function")))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'activation_function' is null; name "
                       "one (GPT-2's is \"gelu_new\")", origin);
    if (c->hidden_size % c->num_attention_heads != 0)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: n_embd (%lld) must be a multiple of n_head "
                       "(%lld)", origin, (long long)c->hidden_size,
                       (long long)c->num_attention_heads);
    c->num_key_value_heads = c->num_attention_heads;
    c->head_dim = c->hidden_size / c->num_attention_heads;
    c->hidden_act_key = "activation_function";
    c->tie_word_embeddings_set = true;
    c->no_rope = true;
    return FERRY_OK;
}

static ferry_status gpt2_read(const model_config *cfg, void **out, fy_err *err)
{
    lm_config c;
    *out = NULL;
    gpt2 *m = calloc(1, sizeof *m);
    if (!m)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    ferry_status st = read_config(cfg, &c, m, err);
    if (st == FERRY_OK)
        st = blk_lm_from_config(&c, cfg->text_origin, cfg->architecture, false, &m->lm, err);
    m->lm.family = &GPT2;
    m->prefix = GPT2_PREFIX;
    m->lm.names = &SAVED_NAMES;
    if (st != FERRY_OK) {
        blk_lm_free(&m->lm);
        free(m);
        return st;
    }
    *out = m;
    return FERRY_OK;
}

static void gpt2_free(void *hparams)
{
    gpt2 *m = hparams;
    if (!m)
        return;
    blk_lm_free(&m->lm);
    free(m);
}

/* Which naming the checkpoint uses (by the position table, which every GPT-2 stores), then
 * the tie. A checkpoint with both is refused: transformers would load some tensors from each
 * set. */
static ferry_status gpt2_bind(void *hparams, const ckpt *ck, char *warning, size_t size,
                              fy_err *err)
{
    gpt2 *m = hparams;
    bool with = ckpt_find(ck, GPT2_PREFIX "wpe.weight") != NULL;
    bool without = ckpt_find(ck, "wpe.weight") != NULL;
    if (with && without)
        return fy_fail(err, FERRY_ERR_FORMAT, "checkpoint %s holds both '" GPT2_PREFIX
                       "wpe.weight' and 'wpe.weight': two namings of GPT-2's tensors, of which "
                       "transformers would mix the sets; keep one", ck->dir);
    bool saved = !without;
    m->prefix = saved ? GPT2_PREFIX : "";
    m->lm.names = saved ? &SAVED_NAMES : &ORIGINAL_NAMES;
    return blk_lm_bind(&m->lm, ck, warning, size, err);
}

/* Tensor `fmt` of the base model (layer l), with the checkpoint's prefix; a Conv1D's weight
 * when `conv1d` ([d0 = in, d1 = out]). */
static int base_weight(g_graph *g, ckpt *ck, const gpt2 *m, const char *fmt, int l, int64_t d0,
                       int64_t d1, bool conv1d, ferry_dtype dt, fy_err *err)
{
    char name[160];
    snprintf(name, sizeof name, "%s%s", m->prefix, fmt);
    if (conv1d)
        return blk_conv1d_weight(g, ck, name, l, d0, d1, dt, err);
    return blk_weight(g, ck, name, l, true, d0, d1, dt, err);
}

typedef struct gpt2_layer {
    int ln_1, ln_1_b, c_attn, c_attn_b, attn_proj, attn_proj_b;
    int ln_2, ln_2_b, c_fc, c_fc_b, mlp_proj, mlp_proj_b;
} gpt2_layer;

static ferry_status bind_layer(g_graph *g, ckpt *ck, const gpt2 *m, int l, ferry_dtype dt,
                               gpt2_layer *w, fy_err *err)
{
    int64_t h = m->lm.hidden, ff = m->lm.intermediate;
    char name[160];
    /* the causal-mask buffers of the original files, which transformers ignores on load */
    static const char *const buffers[] = {"h.%d.attn.bias", "h.%d.attn.masked_bias"};
    for (size_t k = 0; k < sizeof buffers / sizeof buffers[0]; k++) {
        char fmt[64];
        snprintf(fmt, sizeof fmt, "%s%s", m->prefix, buffers[k]);
        snprintf(name, sizeof name, fmt, l);
        ckpt_take(ck, name);
    }
#define W(slot, fmt, d0, d1, conv1d)                                                      \
    do {                                                                                 \
        w->slot = base_weight(g, ck, m, fmt, l, d0, d1, conv1d, dt, err);                \
        if (err->status != FERRY_OK)                                                     \
            return err->status;                                                          \
    } while (0)
    W(ln_1, "h.%d.ln_1.weight", h, 0, false);
    W(ln_1_b, "h.%d.ln_1.bias", h, 0, false);
    W(c_attn, "h.%d.attn.c_attn.weight", h, 3 * h, true);
    W(c_attn_b, "h.%d.attn.c_attn.bias", 3 * h, 0, false);
    W(attn_proj, "h.%d.attn.c_proj.weight", h, h, true);
    W(attn_proj_b, "h.%d.attn.c_proj.bias", h, 0, false);
    W(ln_2, "h.%d.ln_2.weight", h, 0, false);
    W(ln_2_b, "h.%d.ln_2.bias", h, 0, false);
    W(c_fc, "h.%d.mlp.c_fc.weight", h, ff, true);
    W(c_fc_b, "h.%d.mlp.c_fc.bias", ff, 0, false);
    W(mlp_proj, "h.%d.mlp.c_proj.weight", ff, h, true);
    W(mlp_proj_b, "h.%d.mlp.c_proj.bias", h, 0, false);
#undef W
    return FERRY_OK;
}

static void module(g_graph *g, const char *cls, g_op leaf, const char *fmt, int l)
{
    char scope[128];
    snprintf(scope, sizeof scope, fmt, l);
    g_module_add(g, cls, leaf, false, GM_ROLE_NONE, "%s", scope);
}

/* The modules transformers' forward runs, at the scopes the graph's nodes are named under
 * (its dropouts, the identity at inference, make no nodes). A Conv1D's forward is a view, an
 * addmm and a view: every node under it is its own. */
static void declare_modules(g_graph *g, const gpt2 *m)
{
    const blk_lm *lm = &m->lm;
    char cls[256];
    blk_class(lm, "LMHeadModel", cls, sizeof cls);
    g_module_add(g, cls, G_OP_COUNT, false, GM_ROLE_NONE, "%s", "");
    blk_class(lm, "Model", cls, sizeof cls);
    module(g, cls, G_OP_COUNT, "/transformer", 0);
    module(g, BLK_EMBEDDING_CLASS, G_EMBEDDING, "/transformer/wte", 0);
    module(g, BLK_EMBEDDING_CLASS, G_EMBEDDING, "/transformer/wpe", 0);
    for (int l = 0; l < lm->n_layers; l++) {
        blk_class(lm, "Block", cls, sizeof cls);
        g_module_add(g, cls, G_OP_COUNT, true, GM_ROLE_NONE, "/transformer/h.%d", l);
        module(g, LAYER_NORM_CLASS, G_LAYER_NORM, "/transformer/h.%d/ln_1", l);
        blk_class(lm, "Attention", cls, sizeof cls);
        module(g, cls, G_OP_COUNT, "/transformer/h.%d/attn", l);
        module(g, CONV1D_CLASS, G_OP_COUNT, "/transformer/h.%d/attn/c_attn", l);
        module(g, CONV1D_CLASS, G_OP_COUNT, "/transformer/h.%d/attn/c_proj", l);
        module(g, LAYER_NORM_CLASS, G_LAYER_NORM, "/transformer/h.%d/ln_2", l);
        blk_class(lm, "MLP", cls, sizeof cls);
        module(g, cls, G_OP_COUNT, "/transformer/h.%d/mlp", l);
        module(g, CONV1D_CLASS, G_OP_COUNT, "/transformer/h.%d/mlp/c_fc", l);
        module(g, lm->act_class, lm->act, "/transformer/h.%d/mlp/act", l);
        module(g, CONV1D_CLASS, G_OP_COUNT, "/transformer/h.%d/mlp/c_proj", l);
    }
    module(g, LAYER_NORM_CLASS, G_LAYER_NORM, "/transformer/ln_f", 0);
    g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_HEAD, "/lm_head");
}

/* [b, s, n_embd] -> [b, s, heads, head_dim] */
static int heads(g_graph *g, const char *name, const blk_lm *lm, int x)
{
    int64_t spec[4] = {0, 0, lm->n_heads, lm->head_dim};
    return g_reshape_spec(g, name, x, 4, spec);
}

/* Layer l's attention on x (after ln_1) -> [b, s, n_embd] (after c_proj). */
static int attention(g_graph *g, const gpt2 *m, const gpt2_layer *w, int l, int x,
                     const blk_inputs *in)
{
    const blk_lm *lm = &m->lm;
    int64_t h = lm->hidden;
    g_scope(g, "/transformer/h.%d/attn", l);
    int qkv = g_linear(g, "c_attn", x, w->c_attn, w->c_attn_b);
    int q = heads(g, "Reshape", lm, g_slice(g, "Split", qkv, 2, 0, h));
    int k = heads(g, "Reshape_1", lm, g_slice(g, "Split_1", qkv, 2, h, 2 * h));
    int v = heads(g, "Reshape_2", lm, g_slice(g, "Split_2", qkv, 2, 2 * h, 3 * h));
    double scale = m->scale_attn_weights ? 1.0 / sqrt((double)lm->head_dim) : 1.0;
    if (m->scale_by_layer)
        scale /= (double)(l + 1);
    int a = blk_attend(g, lm, l, q, k, v, in, scale);
    return g_linear(g, "c_proj", a, w->attn_proj, w->attn_proj_b);
}

static int mlp(g_graph *g, const gpt2 *m, const gpt2_layer *w, int l, int x)
{
    g_scope(g, "/transformer/h.%d/mlp", l);
    int u = g_unary(g, m->lm.act, "act", g_linear(g, "c_fc", x, w->c_fc, w->c_fc_b));
    return g_linear(g, "c_proj", u, w->mlp_proj, w->mlp_proj_b);
}

static ferry_status gpt2_build(const void *hparams, ckpt *ck, const model_io *io, g_graph *g,
                               fy_err *err)
{
    const gpt2 *m = hparams;
    const blk_lm *lm = &m->lm;
    ferry_dtype dt = io->dtype;
    int64_t h = lm->hidden;
    snprintf(g->base_scope, sizeof g->base_scope, "/transformer");
    blk_inputs in;
    blk_graph_inputs(g, io, h, &in);

    int wte = blk_weight(g, ck, lm->tie_embeddings ? lm->tied_name : lm->names->embed, 0, true,
                         lm->vocab, h, dt, err);
    int wpe = base_weight(g, ck, m, "wpe.weight", 0, lm->max_position_embeddings, h, false,
                          dt, err);
    int ln_f = base_weight(g, ck, m, "ln_f.weight", 0, h, 0, false, dt, err);
    int ln_f_b = base_weight(g, ck, m, "ln_f.bias", 0, h, 0, false, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    int head = wte;
    if (!lm->tie_embeddings) {
        head = blk_weight(g, ck, lm->names->lm_head, 0, true, lm->vocab, h, dt, err);
        if (err->status != FERRY_OK)
            return err->status;
    } else if (lm->tied_twin) {
        ckpt_take(ck, lm->tied_twin); /* same bytes as the tensor read: used through the tie */
    }

    declare_modules(g, m);
    g_scope(g, "/transformer/wte");
    int tokens = g_embedding(g, "embedding", wte, in.ids);
    g_scope(g, "/transformer/wpe");
    int positions = g_embedding(g, "embedding", wpe, in.positions);
    g_scope(g, "/transformer");
    int res = g_binary(g, G_ADD, "Add", tokens, positions);
    gpt2_layer w;
    if (bind_layer(g, ck, m, 0, dt, &w, err) != FERRY_OK)
        return err->status;
    g_scope(g, "/transformer/h.0");
    int x = g_layer_norm(g, "ln_1", res, w.ln_1, w.ln_1_b, lm->eps);
    for (int l = 0; l < lm->n_layers; l++) {
        int a = attention(g, m, &w, l, x, &in);
        g_scope(g, "/transformer/h.%d", l);
        x = g_skip_layer_norm(g, "ln_2", a, res, w.ln_2, w.ln_2_b, lm->eps, &res);
        int f = mlp(g, m, &w, l, x);
        /* the residual add fused with the next norm: the next layer's ln_1, or ln_f */
        int next = ln_f, next_b = ln_f_b;
        if (l + 1 < lm->n_layers) {
            if (bind_layer(g, ck, m, l + 1, dt, &w, err) != FERRY_OK)
                return err->status;
            next = w.ln_1;
            next_b = w.ln_1_b;
            g_scope(g, "/transformer/h.%d", l + 1);
        } else {
            g_scope(g, "/transformer");
        }
        x = g_skip_layer_norm(g, l + 1 < lm->n_layers ? "ln_1" : "ln_f", f, res, next, next_b,
                              lm->eps, &res);
    }
    g->scope[0] = '\0';
    g_output(g, g_linear(g, "lm_head", x, head, G_NONE), "logits");
    blk_logits_first(g);
    if (!g_ok(g))
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    return FERRY_OK;
}

static int64_t gpt2_max_sequence(const void *hparams)
{
    return ((const gpt2 *)hparams)->lm.max_position_embeddings;
}

static void gpt2_describe(const void *hparams, model_hparams *out)
{
    blk_lm_describe(&((const gpt2 *)hparams)->lm, out);
}

const model_arch model_gpt2 = {
    .architecture = "GPT2LMHeadModel", .model_type = "gpt2", .kind = MODEL_CAUSAL_LM,
    .output_class = "transformers.modeling_outputs.CausalLMOutputWithCrossAttentions",
    .read = gpt2_read, .free_hparams = gpt2_free, .bind = gpt2_bind, .plan = gen_decoder_plan,
    .build = gpt2_build, .inputs = blk_lm_inputs, .n_inputs = 3, .generation = true,
    .max_sequence = gpt2_max_sequence, .describe = gpt2_describe,
};
