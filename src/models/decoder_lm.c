/* decoder_lm.c — the standard decoder language model: its hyperparameters from the decoder
 * config, per-family sliding windows, tying settled against the checkpoint, and the forward
 * graph (embed, N x [norm, attention, residual, norm, mlp, residual], final norm, head), each
 * residual add fused with the norm after it; the norms may also follow each block (Gemma 2/3:
 * before and after; OLMo 2: after only, its residual adds then plain). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/blocks.h"
#include "util/json.h"

/* transformers' ACT2FN names this shape's gated MLP can use, and the module each makes. */
static const struct {
    const char *name;
    g_op op;
    const char *cls;
} ACTIVATIONS[] = {
    {"silu", G_SILU, "transformers.activations.SiLUActivation"},
    {"swish", G_SILU, "torch.nn.modules.activation.SiLU"},
    {"gelu", G_GELU, "transformers.activations.GELUActivation"},
    {"gelu_pytorch_tanh", G_GELU_TANH, BLK_GELU_TANH_CLASS},
    {"gelu_new", G_GELU_TANH, "transformers.activations.NewGELUActivation"},
};

bool blk_activation(const char *name, g_op *op, const char **cls)
{
    for (size_t a = 0; a < sizeof ACTIVATIONS / sizeof ACTIVATIONS[0]; a++)
        if (strcmp(name, ACTIVATIONS[a].name) == 0) {
            *op = ACTIVATIONS[a].op;
            *cls = ACTIVATIONS[a].cls;
            return true;
        }
    return false;
}

ferry_status blk_lm_from_config(const lm_config *cfg, const char *origin, const char *arch,
                                bool mrope, blk_lm *lm, fy_err *err)
{
    memset(lm, 0, sizeof *lm);
    size_t a = 0, n_act = sizeof ACTIVATIONS / sizeof ACTIVATIONS[0];
    while (a < n_act && strcmp(cfg->hidden_act, ACTIVATIONS[a].name) != 0)
        a++;
    if (a == n_act)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: %s '%s' is not supported for %s "
                       "(supported: silu, gelu, gelu_pytorch_tanh, gelu_new)", origin,
                       cfg->hidden_act_key, cfg->hidden_act, arch);
    if (!cfg->no_rope) {
        const rope_config *rc = &cfg->rope;
        /* these families' position_ids are one row per token: M-RoPE's three rows belong to a
         * multimodal family's graph (its rotary embedding reads them) */
        if ((rc->layout != ROPE_1D && !(mrope && rc->layout == ROPE_MROPE)) ||
            (cfg->has_rope_local && cfg->rope_local.layout != ROPE_1D))
            return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: rope type 'mrope' is not supported "
                           "for %s (its position_ids have three rows)", origin, arch);
        if (rc->type == ROPE_LLAMA3 && rc->original_max_position_embeddings <= 0)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: rope type llama3 needs "
                           "original_max_position_embeddings", origin);
        if ((rc->type == ROPE_LINEAR || rc->type == ROPE_DYNAMIC || rc->type == ROPE_LLAMA3) &&
            !(rc->factor > 0))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: rope type %s needs a positive 'factor'",
                           origin, rc->type_name);
        if (rc->type == ROPE_LLAMA3 &&
            !(rc->high_freq_factor != rc->low_freq_factor && rc->low_freq_factor > 0))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: rope type llama3 needs positive, "
                           "distinct low_freq_factor and high_freq_factor", origin);
    }
    if (!cfg->no_rope && cfg->head_dim % 2 != 0)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: head_dim %lld must be even for rotary "
                       "embeddings", origin, (long long)cfg->head_dim);
    /* transformers: int(head_dim * partial_rotary_factor) */
    int64_t rotary_dim = cfg->no_rope ? cfg->head_dim
                                      : (int64_t)((double)cfg->head_dim *
                                                  cfg->rope.partial_rotary_factor);
    if (!cfg->no_rope && (rotary_dim < 2 || rotary_dim % 2 != 0))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: partial_rotary_factor %g gives a rotary "
                       "dimension of %lld; it must be even and at least 2", origin,
                       cfg->rope.partial_rotary_factor, (long long)rotary_dim);
    lm->act = ACTIVATIONS[a].op;
    lm->act_class = ACTIVATIONS[a].cls;
    lm->n_layers = cfg->num_hidden_layers;
    lm->hidden = cfg->hidden_size;
    lm->n_heads = cfg->num_attention_heads;
    lm->n_kv_heads = cfg->num_key_value_heads;
    lm->head_dim = cfg->head_dim;
    lm->intermediate = cfg->intermediate_size;
    lm->vocab = cfg->vocab_size;
    lm->max_position_embeddings = cfg->max_position_embeddings;
    lm->eps = cfg->rms_norm_eps;
    lm->tie_embeddings = cfg->tie_word_embeddings;
    lm->names = &blk_llama_names;
    lm->tied_name = lm->names->embed;
    lm->window = calloc((size_t)lm->n_layers, sizeof *lm->window);
    lm->rope = calloc((size_t)lm->n_layers, sizeof *lm->rope);
    if (!lm->window || !lm->rope) {
        blk_lm_free(lm);
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    }
    for (int64_t i = 0; i < lm->n_layers; i++) {
        /* No window by default: which layers slide is each family's rule (blk_lm_windows). One
         * rotary setting for every layer, as these families' rotary embedding has; a
         * family with per-layer-type rope (cfg->rope_local) sets its layers in its quirks. */
        lm->rope[i] = (g_rope_opts){.rope = cfg->rope, .head_dim = cfg->head_dim,
                                    .rotary_dim = rotary_dim,
                                    .max_position_embeddings = cfg->max_position_embeddings};
    }
    return FERRY_OK;
}

void blk_lm_windows(const lm_config *cfg, int64_t window, blk_lm *lm)
{
    for (int64_t i = 0; i < lm->n_layers; i++) {
        bool sliding = cfg->layer_types ? strcmp(cfg->layer_types[i], "sliding_attention") == 0
                                        : i >= cfg->max_window_layers;
        lm->window[i] = sliding ? window : 0;
    }
}

void blk_lm_free(blk_lm *lm)
{
    free(lm->window);
    free(lm->rope);
    free(lm->no_rope);
    free(lm->moe.sparse);
    lm->moe.sparse = NULL;
    lm->window = NULL;
    lm->rope = NULL;
    lm->no_rope = NULL;
}

/* The modules outside the attention and MLP blocks: the model, its embedding, rotary
 * embedding, layers with their norms, final norm and head. */
static void declare_modules(g_graph *g, const blk_lm *lm)
{
    char cls[256], scope[96];
    blk_class(lm, "ForCausalLM", cls, sizeof cls);
    g_module_add(g, cls, G_OP_COUNT, false, GM_ROLE_NONE, "%s", "");
    blk_class(lm, lm->family->base_model ? lm->family->base_model : "Model", cls, sizeof cls);
    g_module_add(g, cls, G_OP_COUNT, false, GM_ROLE_NONE, "/model");
    if (lm->scaled_embedding_class) { /* the scaling is the embedding module's own */
        const char *t = lm->family->model_type;
        snprintf(cls, sizeof cls, "transformers.models.%s.modeling_%s.%s", t, t,
                 lm->scaled_embedding_class);
        g_module_add(g, cls, G_OP_COUNT, false, GM_ROLE_NONE, "/model/embed_tokens");
    } else {
        g_module_add(g, BLK_EMBEDDING_CLASS, G_EMBEDDING, false, GM_ROLE_NONE,
                     "/model/embed_tokens");
    }
    blk_class(lm, "RotaryEmbedding", cls, sizeof cls);
    g_module_add(g, cls, G_OP_COUNT, false, GM_ROLE_NONE, "/model/rotary_emb");
    blk_class(lm, "DecoderLayer", cls, sizeof cls);
    for (int l = 0; l < lm->n_layers; l++) {
        g_module_add(g, cls, G_OP_COUNT, true, GM_ROLE_NONE, "/model/layers.%d", l);
        if (lm->norms != BLK_POST_NORM) {
            snprintf(scope, sizeof scope, "/model/layers.%d/input_layernorm", l);
            blk_norm_module(g, lm, scope);
        }
        snprintf(scope, sizeof scope, "/model/layers.%d/post_attention_layernorm", l);
        blk_norm_module(g, lm, scope);
        if (lm->norms == BLK_SANDWICH_NORM) {
            snprintf(scope, sizeof scope, "/model/layers.%d/pre_feedforward_layernorm", l);
            blk_norm_module(g, lm, scope);
        }
        if (lm->norms != BLK_PRE_NORM) {
            snprintf(scope, sizeof scope, "/model/layers.%d/post_feedforward_layernorm", l);
            blk_norm_module(g, lm, scope);
        }
    }
    blk_norm_module(g, lm, "/model/norm");
    g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_HEAD, "/lm_head");
}

/* The head over the final hidden states: logits, scaled and soft-capped as the family's. */
static int head_logits(g_graph *g, const blk_lm *lm, int x, int head)
{
    int logits = g_linear(g, "lm_head", x, head, G_NONE);
    if (lm->logits_divisor != 0.0)
        logits = g_binary(g, G_DIV, "logits_scaling", logits,
                          g_scalar_f(g, g->values[x].dtype, lm->logits_divisor));
    if (lm->final_softcap != 0.0)
        logits = g_softcap(g, "final_logit_softcapping", logits, lm->final_softcap);
    return logits;
}

ferry_status blk_lm_head_build(const blk_lm *lm, ckpt *ck, const model_io *io, g_graph *g,
                               fy_err *err)
{
    ferry_dtype dt = io->dtype;
    const blk_names *n = lm->names;
    int head = blk_weight(g, ck, lm->tie_embeddings ? lm->tied_name : n->lm_head, 0, true,
                          lm->vocab, lm->hidden, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    if (lm->tie_embeddings && lm->tied_twin)
        ckpt_take(ck, lm->tied_twin);
    /* transformers' lm_head component is the Linear itself: its forward's argument is
     * `input`, and its output unnamed ("output"); the node sits in a module of role head, as
     * the causal LM's does, for what treats the head apart (--float-lm-head) */
    g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_HEAD, "/lm_head");
    int x = g_input(g, "input", dt, 3,
                    (g_dim[]){io->batch, io->sequence, g_dim_const(lm->hidden)});
    g_output(g, head_logits(g, lm, x, head), "output");
    if (!g_ok(g))
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    return FERRY_OK;
}

int blk_lm_embed(const blk_lm *lm, ckpt *ck, const model_io *io, g_graph *g, int *ids,
                 fy_err *err)
{
    ferry_dtype dt = io->dtype;
    int table = blk_weight(g, ck, lm->tie_embeddings ? lm->tied_name : lm->names->embed, 0, true,
                           lm->vocab, lm->hidden, dt, err);
    if (err->status != FERRY_OK)
        return G_NONE;
    g_module_add(g, BLK_EMBEDDING_CLASS, G_EMBEDDING, false, GM_ROLE_NONE, "%s", "");
    *ids = g_input(g, "input_ids", FERRY_I64, 2, (g_dim[]){io->batch, io->sequence});
    g_input_role_set(g, *ids, GI_TOKEN_IDS);
    g->values[*ids].bound = lm->vocab;
    int x = g_embedding(g, "embedding", table, *ids);
    if (lm->embed_scale != 0.0)
        x = g_binary(g, G_MUL, "scale", x, g_scalar_f(g, dt, lm->embed_scale));
    return x;
}

ferry_status blk_lm_embed_build(const blk_lm *lm, ckpt *ck, const model_io *io, g_graph *g,
                                fy_err *err)
{
    int ids;
    int x = blk_lm_embed(lm, ck, io, g, &ids, err);
    if (err->status != FERRY_OK)
        return err->status;
    g_output(g, x, "inputs_embeds");
    if (!g_ok(g))
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    return FERRY_OK;
}

ferry_status blk_lm_build(const blk_lm *lm, ckpt *ck, const model_io *io, g_graph *g,
                          fy_err *err)
{
    const blk_names *n = lm->names;
    ferry_dtype dt = io->dtype;
    unsigned parts = io->parts ? io->parts : MODEL_PARTS_ALL;
    if (parts == MODEL_PART_HEAD)
        return blk_lm_head_build(lm, ck, io, g, err);
    if (parts == MODEL_PART_EMBED)
        return blk_lm_embed_build(lm, ck, io, g, err);
    blk_inputs in;
    blk_graph_inputs(g, io, lm->hidden, &in);

    bool embeds = parts & MODEL_PART_EMBED, logits_out = parts & MODEL_PART_HEAD;
    int embed = embeds || (logits_out && lm->tie_embeddings)
                    ? blk_weight(g, ck, lm->tie_embeddings ? lm->tied_name : n->embed, 0, true,
                                 lm->vocab, lm->hidden, dt, err)
                    : G_NONE;
    int final_norm = blk_weight(g, ck, n->final_norm, 0, true, lm->hidden, 0, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    int head = embed;
    if (!logits_out) {
        head = G_NONE;
    } else if (!lm->tie_embeddings) {
        head = blk_weight(g, ck, n->lm_head, 0, true, lm->vocab, lm->hidden, dt, err);
        if (err->status != FERRY_OK)
            return err->status;
    } else if (lm->tied_twin) {
        ckpt_take(ck, lm->tied_twin); /* same bytes as the tensor read: used through the tie */
    }

    declare_modules(g, lm);
    snprintf(g->base_scope, sizeof g->base_scope, "/model");
    g_scope(g, "/model/embed_tokens");
    int h = embeds ? g_embedding(g, "embedding", embed, in.ids) : in.embeds;
    if (embeds && lm->embed_scale != 0.0) {
        /* rounded to the compute dtype, as transformers'; in the embedding module where it
         * scales its own output (Gemma's), else in the model's forward (Granite's) */
        if (!lm->scaled_embedding_class)
            g_scope(g, "/model");
        h = g_binary(g, G_MUL, "scale", h, g_scalar_f(g, dt, lm->embed_scale));
    }
    blk_layer w;
    if (blk_bind_layer(g, ck, lm, 0, dt, &w, err) != FERRY_OK)
        return err->status;
    g_scope(g, "/model/layers.0");
    bool post = lm->norms == BLK_POST_NORM;
    int x = post ? h : blk_norm(g, lm, "input_layernorm", h, w.in_norm);
    for (int l = 0; l < lm->n_layers; l++) {
        int a = blk_attention(g, lm, &w, l, x, &in);
        g_scope(g, "/model/layers.%d", l);
        if (lm->residual_scale != 0.0)
            a = g_binary(g, G_MUL, "residual_scale", a, g_scalar_f(g, dt, lm->residual_scale));
        if (lm->norms == BLK_SANDWICH_NORM) {
            a = blk_norm(g, lm, "post_attention_layernorm", a, w.post_norm);
            x = blk_skip_norm(g, lm, "pre_feedforward_layernorm", a, h, w.pre_ff_norm, &h);
        } else if (post) {
            a = blk_norm(g, lm, "post_attention_layernorm", a, w.post_norm);
            x = h = g_binary(g, G_ADD, "residual", h, a);
        } else {
            x = blk_skip_norm(g, lm, "post_attention_layernorm", a, h, w.post_norm, &h);
        }
        int m = blk_is_sparse(lm, l) ? blk_moe_block(g, lm, &w, l, x) : blk_mlp(g, lm, &w, l, x);
        if (lm->residual_scale != 0.0) {
            g_scope(g, "/model/layers.%d", l);
            m = g_binary(g, G_MUL, "residual_scale_1", m, g_scalar_f(g, dt, lm->residual_scale));
        }
        if (lm->norms != BLK_PRE_NORM) {
            g_scope(g, "/model/layers.%d", l);
            m = blk_norm(g, lm, "post_feedforward_layernorm", m, w.post_ff_norm);
        }
        if (post && l + 1 < lm->n_layers) { /* the next layer reads the sum itself */
            x = h = g_binary(g, G_ADD, "residual_1", h, m);
            if (blk_bind_layer(g, ck, lm, l + 1, dt, &w, err) != FERRY_OK)
                return err->status;
            continue;
        }
        /* the residual add fused with the next norm: the next layer's input norm, or the
         * final one */
        int next_norm = final_norm;
        if (l + 1 < lm->n_layers) {
            if (blk_bind_layer(g, ck, lm, l + 1, dt, &w, err) != FERRY_OK)
                return err->status;
            next_norm = w.in_norm;
            g_scope(g, "/model/layers.%d", l + 1);
        } else {
            g_scope(g, "/model");
        }
        x = blk_skip_norm(g, lm, l + 1 < lm->n_layers ? "input_layernorm" : "norm", m, h,
                          next_norm, &h);
    }
    g->scope[0] = '\0';
    if (logits_out)
        g_output(g, head_logits(g, lm, x, head), "logits");
    else
        g_output(g, x, "last_hidden_state");
    /* logits (or the last hidden state) first, then the cache outputs in layer order, as
     * optimum and the guide list them */
    if (g_ok(g) && g->n_outputs > 1) {
        int last = g->outputs[g->n_outputs - 1];
        memmove(g->outputs + 1, g->outputs, (g->n_outputs - 1) * sizeof *g->outputs);
        g->outputs[0] = last;
    }
    if (!g_ok(g))
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    return FERRY_OK;
}

/* `cfg` with its text keys completed by the family's config defaults, into *view, whose text
 * *merged owns (NULL when the family has none: *view is cfg as it is). */
static ferry_status with_defaults(const model_config *cfg, const blk_family *family,
                                  model_config *view, cJSON **merged, fy_err *err)
{
    *view = *cfg;
    *merged = NULL;
    if (!family->config_defaults)
        return FERRY_OK;
    cJSON *defaults = cJSON_Parse(family->config_defaults);
    cJSON *text = cJSON_Duplicate(cfg->text, 1);
    if (!defaults || !text) {
        cJSON_Delete(defaults);
        cJSON_Delete(text);
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    }
    for (cJSON *d = defaults->child; d; d = d->next)
        if (!cJSON_GetObjectItemCaseSensitive(text, d->string))
            cJSON_AddItemToObject(text, d->string, cJSON_Duplicate(d, 1));
    cJSON_Delete(defaults);
    view->text = *merged = text;
    return FERRY_OK;
}

ferry_status blk_lm_read(const model_config *given, const blk_family *family, void **out,
                         fy_err *err)
{
    lm_config c;
    model_config view;
    cJSON *merged;
    const model_config *cfg = &view;
    *out = NULL;
    if (with_defaults(given, family, &view, &merged, err) != FERRY_OK)
        return err->status;
    blk_lm *lm = calloc(1, sizeof *lm);
    if (!lm) {
        cJSON_Delete(merged);
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    }
    ferry_status st = lm_config_read(cfg, &c, err);
    if (st == FERRY_OK) {
        if (family->act_key) { /* Gemma 2/3 name it hidden_activation */
            c.hidden_act_key = family->act_key;
            if ((st = json_get_string(cfg->text, family->act_key, false, family->act_default,
                                      cfg->text_origin, c.hidden_act, sizeof c.hidden_act,
                                      err)) == FERRY_OK)
                st = cfg_check_name(cfg->text_origin, family->act_key, c.hidden_act, err);
        }
        if (st == FERRY_OK)
            st = blk_lm_from_config(&c, cfg->text_origin, cfg->architecture, family->mrope, lm,
                                    err);
        lm->family = family;
        if (st == FERRY_OK && family->quirks)
            family->quirks(&c, lm);
        if (st == FERRY_OK && family->read_extra)
            st = family->read_extra(cfg, &c, lm, err);
        if (st == FERRY_OK && lm->rope[0].rotary_dim != lm->head_dim && !lm->allow_partial_rotary)
            st = fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: partial_rotary_factor %g is not "
                         "supported for %s (supported: 1.0)", cfg->text_origin,
                         c.rope.partial_rotary_factor, cfg->architecture);
        lm_config_free(&c);
    }
    cJSON_Delete(merged);
    if (st != FERRY_OK) {
        blk_lm_destroy(lm);
        return st;
    }
    *out = lm;
    return FERRY_OK;
}

ferry_status blk_refuse_bidirectional(const model_config *cfg, fy_err *err)
{
    bool bidirectional;
    ferry_status st = json_get_bool(cfg->text, "use_bidirectional_attention", false, false,
                                    cfg->text_origin, &bidirectional, err);
    if (st == FERRY_OK && bidirectional)
        st = fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: use_bidirectional_attention true is not "
                     "supported (ferry exports %s as a causal decoder)", cfg->text_origin,
                     cfg->architecture);
    return st;
}

void blk_llama_biases(const lm_config *c, blk_lm *lm)
{
    lm->qkv_bias = c->attention_bias;
    lm->o_bias = c->attention_bias;
    lm->mlp_bias = c->mlp_bias;
}

void blk_lm_destroy(void *lm)
{
    if (!lm)
        return;
    blk_lm_free(lm);
    free(lm);
}

void blk_lm_describe(const void *hparams, model_hparams *out)
{
    const blk_lm *lm = hparams;
    *out = (model_hparams){.genai_type = lm->family->genai_type, .vocab_size = lm->vocab,
                           .hidden_size = lm->hidden, .intermediate_size = lm->intermediate,
                           .num_layers = lm->n_layers, .num_heads = lm->n_heads,
                           .num_kv_heads = lm->n_kv_heads, .head_dim = lm->head_dim,
                           .context_length = lm->max_position_embeddings, .norm_eps = lm->eps};
}

ferry_status blk_lm_build_hook(const void *lm, ckpt *ck, const model_io *io, g_graph *g,
                               fy_err *err)
{
    return blk_lm_build(lm, ck, io, g, err);
}

ferry_status blk_lm_bind(void *hparams, const ckpt *ck, char *warning, size_t size, fy_err *err)
{
    blk_lm *lm = hparams;
    const blk_names *n = lm->names;
    const st_tensor *embed = ckpt_find(ck, n->embed), *head = ckpt_find(ck, n->lm_head);
    bool same = false;
    if (size > 0)
        warning[0] = '\0';
    lm->tied_name = n->embed;
    lm->tied_twin = NULL;
    if (!lm->tie_embeddings) {
        if (!head)
            return fy_fail(err, FERRY_ERR_FORMAT, "checkpoint %s: required tensor '%s' is "
                           "missing, and config.json does not tie it to '%s' "
                           "(tie_word_embeddings is false or absent; transformers would "
                           "initialise it at random)", ck->dir, n->lm_head, n->embed);
        return FERRY_OK;
    }
    if (!head)
        return FERRY_OK;
    if (!embed) {
        /* transformers ties "symmetrically": the stored head becomes the embedding. */
        lm->tied_name = n->lm_head;
        return FERRY_OK;
    }
    if (st_same_bytes(embed, head, &same, err) != FERRY_OK)
        return err->status;
    if (same) {
        lm->tied_twin = n->lm_head;
        return FERRY_OK;
    }
    lm->tie_embeddings = false;
    snprintf(warning, size, "config.json sets tie_word_embeddings, but the checkpoint stores '%s' "
             "and it is not byte-identical to '%s': both are used, untied, as transformers does "
             "(set tie_word_embeddings to false to silence this)", n->lm_head, n->embed);
    return FERRY_OK;
}
