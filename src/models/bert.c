/* bert.c — BERT-family encoders: BertModel, RobertaModel, XLMRobertaModel, DistilBertModel,
 * and the sequence-classification heads of BERT and RoBERTa (XLM-R's is RoBERTa's).
 *
 * One shape, as transformers' modeling_bert / _roberta / _distilbert compute it: embeddings
 * (words + learned absolute positions + token types, LayerNorm), N post-norm layers
 * (self-attention over every real token, dense, add, LayerNorm; dense, GELU, dense, add,
 * LayerNorm), then BERT's pooler (the first token through dense + tanh) or a head. RoBERTa
 * counts positions from its padding index, over the tokens that are not padding; DistilBERT
 * has no token types and no pooler. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/safetensors.h"
#include "models/blocks.h"
#include "util/json.h"
#include "util/text.h"

#define MAX_LAYERS 1024
#define MAX_HIDDEN (1 << 20)
#define MAX_VOCAB (1 << 24)
#define MAX_HEADS 4096
#define MAX_POSITIONS (1 << 24)
#define MAX_TYPES 1024
#define MAX_LABELS (1 << 20)
#define EPS_MIN 1e-15
#define EPS_MAX 1.0

#define BASE_OUTPUT_POOLING                                                                 \
    "transformers.modeling_outputs.BaseModelOutputWithPoolingAndCrossAttentions"
#define BASE_OUTPUT "transformers.modeling_outputs.BaseModelOutput"
#define CLASSIFIER_OUTPUT "transformers.modeling_outputs.SequenceClassifierOutput"

typedef enum enc_flavor { ENC_BERT, ENC_ROBERTA, ENC_DISTILBERT } enc_flavor;
typedef enum enc_head { HEAD_BASE, HEAD_BERT_CLASSIFIER, HEAD_ROBERTA_CLASSIFIER } enc_head;

/* Checkpoint names of one flavour, after the base model's prefix: printf formats taking the
 * layer number. */
typedef struct enc_names {
    const char *word, *position, *token_type, *embed_norm_w, *embed_norm_b;
    const char *q, *k, *v, *o, *q_b, *k_b, *v_b, *o_b;
    const char *attn_norm_w, *attn_norm_b;
    const char *up, *up_b, *down, *down_b, *out_norm_w, *out_norm_b;
    const char *pooler_w, *pooler_b;
    const char *scope_layer, *scope_attn, *scope_attn_out, *scope_up, *scope_down;
} enc_names;

static const enc_names BERT_NAMES = {
    .word = "embeddings.word_embeddings.weight",
    .position = "embeddings.position_embeddings.weight",
    .token_type = "embeddings.token_type_embeddings.weight",
    .embed_norm_w = "embeddings.LayerNorm.weight", .embed_norm_b = "embeddings.LayerNorm.bias",
    .q = "encoder.layer.%d.attention.self.query.weight",
    .q_b = "encoder.layer.%d.attention.self.query.bias",
    .k = "encoder.layer.%d.attention.self.key.weight",
    .k_b = "encoder.layer.%d.attention.self.key.bias",
    .v = "encoder.layer.%d.attention.self.value.weight",
    .v_b = "encoder.layer.%d.attention.self.value.bias",
    .o = "encoder.layer.%d.attention.output.dense.weight",
    .o_b = "encoder.layer.%d.attention.output.dense.bias",
    .attn_norm_w = "encoder.layer.%d.attention.output.LayerNorm.weight",
    .attn_norm_b = "encoder.layer.%d.attention.output.LayerNorm.bias",
    .up = "encoder.layer.%d.intermediate.dense.weight",
    .up_b = "encoder.layer.%d.intermediate.dense.bias",
    .down = "encoder.layer.%d.output.dense.weight",
    .down_b = "encoder.layer.%d.output.dense.bias",
    .out_norm_w = "encoder.layer.%d.output.LayerNorm.weight",
    .out_norm_b = "encoder.layer.%d.output.LayerNorm.bias",
    .pooler_w = "pooler.dense.weight", .pooler_b = "pooler.dense.bias",
    .scope_layer = "encoder/layer.%d", .scope_attn = "encoder/layer.%d/attention/self",
    .scope_attn_out = "encoder/layer.%d/attention/output",
    .scope_up = "encoder/layer.%d/intermediate", .scope_down = "encoder/layer.%d/output",
};

static const enc_names DISTILBERT_NAMES = {
    .word = "embeddings.word_embeddings.weight",
    .position = "embeddings.position_embeddings.weight",
    .embed_norm_w = "embeddings.LayerNorm.weight", .embed_norm_b = "embeddings.LayerNorm.bias",
    .q = "transformer.layer.%d.attention.q_lin.weight",
    .q_b = "transformer.layer.%d.attention.q_lin.bias",
    .k = "transformer.layer.%d.attention.k_lin.weight",
    .k_b = "transformer.layer.%d.attention.k_lin.bias",
    .v = "transformer.layer.%d.attention.v_lin.weight",
    .v_b = "transformer.layer.%d.attention.v_lin.bias",
    .o = "transformer.layer.%d.attention.out_lin.weight",
    .o_b = "transformer.layer.%d.attention.out_lin.bias",
    .attn_norm_w = "transformer.layer.%d.sa_layer_norm.weight",
    .attn_norm_b = "transformer.layer.%d.sa_layer_norm.bias",
    .up = "transformer.layer.%d.ffn.lin1.weight", .up_b = "transformer.layer.%d.ffn.lin1.bias",
    .down = "transformer.layer.%d.ffn.lin2.weight", .down_b = "transformer.layer.%d.ffn.lin2.bias",
    .out_norm_w = "transformer.layer.%d.output_layer_norm.weight",
    .out_norm_b = "transformer.layer.%d.output_layer_norm.bias",
    .scope_layer = "transformer/layer.%d", .scope_attn = "transformer/layer.%d/attention",
    .scope_attn_out = "transformer/layer.%d/attention",
    .scope_up = "transformer/layer.%d/ffn", .scope_down = "transformer/layer.%d/ffn",
};

/* transformers' classes of a flavour's modules (its modeling module, then each class's name
 * there; NULL where the flavour has no such module). */
typedef struct enc_classes {
    const char *module;
    const char *model, *classifier, *embeddings, *encoder, *layer, *attention, *self_attention,
        *self_output, *intermediate, *output, *pooler, *head;
} enc_classes;

#define BERT_LIKE(module_name, prefix)                                                      \
    {.module = module_name, .model = prefix "Model",                                         \
     .classifier = prefix "ForSequenceClassification", .embeddings = prefix "Embeddings",   \
     .encoder = prefix "Encoder", .layer = prefix "Layer", .attention = prefix "Attention",    \
     .self_attention = prefix "SelfAttention", .self_output = prefix "SelfOutput",           \
     .intermediate = prefix "Intermediate", .output = prefix "Output",                       \
     .pooler = prefix "Pooler", .head = prefix "ClassificationHead"}
static const enc_classes BERT_CLASSES = BERT_LIKE("transformers.models.bert.modeling_bert",
                                                  "Bert");
static const enc_classes ROBERTA_CLASSES =
    BERT_LIKE("transformers.models.roberta.modeling_roberta", "Roberta");
static const enc_classes XLM_ROBERTA_CLASSES =
    BERT_LIKE("transformers.models.xlm_roberta.modeling_xlm_roberta", "XLMRoberta");
#undef BERT_LIKE
static const enc_classes DISTILBERT_CLASSES = {
    .module = "transformers.models.distilbert.modeling_distilbert", .model = "DistilBertModel",
    .embeddings = "Embeddings", .encoder = "Transformer", .layer = "TransformerBlock",
    .attention = "DistilBertSelfAttention", .intermediate = "FFN"};

typedef struct enc {
    const enc_classes *classes;
    const char *act_class;    /* the MLP's activation module */
    enc_flavor flavor;
    enc_head head;
    const enc_names *names;
    int64_t n_layers, hidden, n_heads, intermediate, vocab, max_positions, type_vocab;
    int64_t num_labels, pad_token_id;
    double eps;
    g_op act;
    /* Settled against the checkpoint (enc_bind): where the base model's tensors are
     * ("bert." in a BertForSequenceClassification, "" in a BertModel's own checkpoint: either
     * loads into either, as transformers strips or adds base_model_prefix), and whether a base
     * model's checkpoint holds its pooler. */
    char prefix[24];
    const char *base_prefix;  /* the architecture's base_model_prefix ("bert", ...) */
    bool pooler;
} enc;

/* transformers' ACT2FN names an encoder's MLP may use. */
static const struct {
    const char *name;
    g_op op;
    const char *cls;
} ACTIVATIONS[] = {
    {"gelu", G_GELU, "transformers.activations.GELUActivation"},
    {"gelu_new", G_GELU_TANH, "transformers.activations.NewGELUActivation"},
    {"gelu_pytorch_tanh", G_GELU_TANH, BLK_GELU_TANH_CLASS},
};

static ferry_status read_activation(const cJSON *root, const char *key, const char *origin,
                                    enc *e, fy_err *err)
{
    char act[32];
    if (json_get_string(root, key, false, "gelu", origin, act, sizeof act, err) != FERRY_OK)
        return err->status;
    for (size_t i = 0; i < sizeof ACTIVATIONS / sizeof ACTIVATIONS[0]; i++)
        if (strcmp(act, ACTIVATIONS[i].name) == 0) {
            e->act = ACTIVATIONS[i].op;
            e->act_class = ACTIVATIONS[i].cls;
            return FERRY_OK;
        }
    char q[64];
    return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: %s '%s' is not supported (supported: gelu, "
                   "gelu_new, gelu_pytorch_tanh)", origin, key, text_quote(act, q, sizeof q));
}

/* The keys that would make this a model of another kind than the bidirectional encoder built
 * here: refused, naming the key. */
static ferry_status refuse_variants(const cJSON *root, const char *origin, fy_err *err)
{
    bool flag;
    char pe[64];
    if (json_get_bool(root, "is_decoder", false, false, origin, &flag, err) != FERRY_OK)
        return err->status;
    if (flag)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: is_decoder true (a causal BERT "
                       "decoder) is not supported: ferry exports BERT-family encoders", origin);
    if (json_get_bool(root, "add_cross_attention", false, false, origin, &flag, err) != FERRY_OK)
        return err->status;
    if (flag)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: add_cross_attention true is not "
                       "supported: ferry exports BERT-family encoders without cross-attention",
                       origin);
    if (json_get_string(root, "position_embedding_type", false, "absolute", origin, pe,
                        sizeof pe, err) != FERRY_OK)
        return err->status;
    if (strcmp(pe, "absolute") != 0) {
        char q[80];
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: position_embedding_type '%s' is not "
                       "supported (supported: absolute)", origin, text_quote(pe, q, sizeof q));
    }
    return FERRY_OK;
}

/* num_labels as transformers derives it: the size of id2label when given, else num_labels,
 * else 2. */
static ferry_status read_num_labels(const cJSON *root, const char *origin, int64_t *out,
                                    fy_err *err)
{
    const cJSON *labels;
    if (json_get_member(root, "id2label", false, origin, &labels, err) != FERRY_OK)
        return err->status;
    if (labels) {
        if (!cJSON_IsObject(labels) || cJSON_GetArraySize(labels) < 1 ||
            cJSON_GetArraySize(labels) > MAX_LABELS)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'id2label' must be an object of 1 "
                           "to %d labels", origin, MAX_LABELS);
        *out = cJSON_GetArraySize(labels);
        return FERRY_OK;
    }
    return json_get_int(root, "num_labels", false, 2, 1, MAX_LABELS, origin, out, err);
}

static ferry_status enc_read(const model_config *mc, enc_flavor flavor, enc_head head,
                             const char *base_prefix, const enc_classes *classes, void **out,
                             fy_err *err)
{
    const cJSON *r = mc->text;
    const char *o = mc->text_origin;
    enc *e = calloc(1, sizeof *e);
    if (!e)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    e->classes = classes;
    e->flavor = flavor;
    e->head = head;
    e->base_prefix = base_prefix;
    e->names = flavor == ENC_DISTILBERT ? &DISTILBERT_NAMES : &BERT_NAMES;
    bool distil = flavor == ENC_DISTILBERT;
    ferry_status st = FERRY_OK;
#define INT(key, req, dflt, min, max, field)                                                \
    if (st == FERRY_OK)                                                                     \
        st = json_get_int(r, key, req, dflt, min, max, o, &e->field, err)
    INT("vocab_size", true, 0, 1, MAX_VOCAB, vocab);
    INT(distil ? "dim" : "hidden_size", true, 0, 1, MAX_HIDDEN, hidden);
    INT(distil ? "n_layers" : "num_hidden_layers", true, 0, 1, MAX_LAYERS, n_layers);
    INT(distil ? "n_heads" : "num_attention_heads", true, 0, 1, MAX_HEADS, n_heads);
    INT(distil ? "hidden_dim" : "intermediate_size", true, 0, 1, MAX_HIDDEN * 16, intermediate);
    INT("max_position_embeddings", true, 0, 1, MAX_POSITIONS, max_positions);
    INT("pad_token_id", false, flavor == ENC_ROBERTA ? 1 : 0, 0, MAX_VOCAB, pad_token_id);
    if (!distil)
        INT("type_vocab_size", false, 2, 0, MAX_TYPES, type_vocab);
#undef INT
    e->eps = 1e-12; /* DistilBERT's LayerNorms are built with eps=1e-12 whatever the config */
    if (st == FERRY_OK && !distil)
        st = json_get_double(r, "layer_norm_eps", false, 1e-12, EPS_MIN, EPS_MAX, o, &e->eps,
                             err);
    if (st == FERRY_OK)
        st = read_activation(r, distil ? "activation" : "hidden_act", o, e, err);
    if (st == FERRY_OK && !distil)
        st = refuse_variants(r, o, err);
    if (st == FERRY_OK && head != HEAD_BASE)
        st = read_num_labels(r, o, &e->num_labels, err);
    if (st == FERRY_OK && e->hidden % e->n_heads != 0)
        st = fy_fail(err, FERRY_ERR_FORMAT, "%s: %s %lld is not a multiple of %s %lld", o,
                     distil ? "dim" : "hidden_size", (long long)e->hidden,
                     distil ? "n_heads" : "num_attention_heads", (long long)e->n_heads);
    /* RoBERTa's positions start after the padding index */
    if (st == FERRY_OK && flavor == ENC_ROBERTA && e->pad_token_id + 2 > e->max_positions)
        st = fy_fail(err, FERRY_ERR_FORMAT, "%s: max_position_embeddings %lld leaves no "
                     "position after pad_token_id %lld (RoBERTa counts positions from it)", o,
                     (long long)e->max_positions, (long long)e->pad_token_id);
    if (st == FERRY_OK && e->pad_token_id >= e->vocab)
        st = fy_fail(err, FERRY_ERR_FORMAT, "%s: pad_token_id %lld is outside the vocabulary "
                     "(vocab_size %lld)", o, (long long)e->pad_token_id, (long long)e->vocab);
    if (st != FERRY_OK) {
        free(e);
        return st;
    }
    *out = e;
    return FERRY_OK;
}

static void enc_free(void *e)
{
    free(e);
}

/* `name` with the base model's prefix, as a printf format (the prefix holds no '%'). */
static const char *prefixed(const enc *e, const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s%s", e->prefix, name);
    return buf;
}

static bool has(const ckpt *ck, const char *prefix, const char *name)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s%s", prefix, name);
    return ckpt_find(ck, buf) != NULL;
}

/* Where the base model's tensors are, and whether a base model has its pooler. A head's
 * checkpoint keeps them under base_model_prefix; a base model's own has none, and a base model
 * read out of a head's checkpoint has them under it. */
static ferry_status enc_bind(void *hparams, const ckpt *ck, char *warning, size_t size,
                             fy_err *err)
{
    enc *e = hparams;
    char with[24];
    snprintf(with, sizeof with, "%s.", e->base_prefix);
    if (size > 0)
        warning[0] = '\0';
    bool bare = has(ck, "", e->names->word), under = has(ck, with, e->names->word);
    bool head = e->head != HEAD_BASE;
    snprintf(e->prefix, sizeof e->prefix, "%s", under && (head || !bare) ? with : "");
    if (!bare && !under)
        return fy_fail(err, FERRY_ERR_FORMAT, "checkpoint %s: required tensor '%s%s' is "
                       "missing", ck->dir, head ? with : "", e->names->word);
    /* RoBERTa's classifier reads the first token itself: a pooler there is not used */
    e->pooler = e->names->pooler_w && e->head != HEAD_ROBERTA_CLASSIFIER &&
                has(ck, e->prefix, e->names->pooler_w);
    if (e->head == HEAD_BASE && e->names->pooler_w && !e->pooler)
        snprintf(warning, size, "checkpoint %s has no pooler (%s%s): the export returns "
                 "last_hidden_state alone (transformers would add a pooler of random weights)",
                 ck->dir, e->prefix, e->names->pooler_w);
    if (e->head == HEAD_BERT_CLASSIFIER && !e->pooler)
        return fy_fail(err, FERRY_ERR_FORMAT, "checkpoint %s: required tensor '%s%s' is "
                       "missing (the classifier reads the pooler's output)", ck->dir, e->prefix,
                       e->names->pooler_w);
    return FERRY_OK;
}

typedef struct enc_layer {
    int q, k, v, o, q_b, k_b, v_b, o_b, attn_w, attn_b, up, up_b, down, down_b, out_w, out_b;
} enc_layer;

static ferry_status bind_layer(g_graph *g, ckpt *ck, const enc *e, int l, ferry_dtype dt,
                               enc_layer *w, fy_err *err)
{
    const enc_names *n = e->names;
    int64_t h = e->hidden, ff = e->intermediate;
    char name[256];
#define W(slot, fmt, d0, d1)                                                                \
    do {                                                                                    \
        w->slot = blk_weight(g, ck, prefixed(e, fmt, name, sizeof name), l, true, d0, d1,   \
                             dt, err);                                                      \
        if (err->status != FERRY_OK)                                                        \
            return err->status;                                                             \
    } while (0)
    W(q, n->q, h, h);
    W(q_b, n->q_b, h, 0);
    W(k, n->k, h, h);
    W(k_b, n->k_b, h, 0);
    W(v, n->v, h, h);
    W(v_b, n->v_b, h, 0);
    W(o, n->o, h, h);
    W(o_b, n->o_b, h, 0);
    W(attn_w, n->attn_norm_w, h, 0);
    W(attn_b, n->attn_norm_b, h, 0);
    W(up, n->up, ff, h);
    W(up_b, n->up_b, ff, 0);
    W(down, n->down, h, ff);
    W(down_b, n->down_b, h, 0);
    W(out_w, n->out_norm_w, h, 0);
    W(out_b, n->out_norm_b, h, 0);
#undef W
    return FERRY_OK;
}

/* [b, s, hidden] -> [b, s, heads, head_dim] */
static int split_heads(g_graph *g, const char *name, int x, const enc *e)
{
    int64_t spec[4] = {0, 0, e->n_heads, e->hidden / e->n_heads};
    return g_reshape_spec(g, name, x, 4, spec);
}

/* A scope of the base model: "/bert/encoder/layer.3" in a head's graph, "/encoder/layer.3" in
 * a base model's (the module paths transformers gives them). */
static void enc_scope(g_graph *g, const enc *e, const char *fmt, int l)
{
    char rel[128];
    snprintf(rel, sizeof rel, fmt, l);
    g_scope(g, "%s%s/%s", e->head == HEAD_BASE ? "" : "/", e->head == HEAD_BASE ? "" :
            e->base_prefix, rel);
}

/* Declares module `cls` of the flavour's modeling module (NULL: none) at the base model's
 * scope `fmt` (a layer number) as enc_scope makes it. */
static void enc_module(g_graph *g, const enc *e, const char *cls, g_op leaf_op, bool list_item,
                       const char *fmt, int l)
{
    if (!cls)
        return;
    char rel[128], full[256];
    snprintf(rel, sizeof rel, fmt, l);
    snprintf(full, sizeof full, "%s.%s", e->classes->module, cls);
    if (e->head == HEAD_BASE)
        g_module_add(g, full, leaf_op, list_item, GM_ROLE_NONE, "%s%s", rel[0] ? "/" : "", rel);
    else
        g_module_add(g, full, leaf_op, list_item, GM_ROLE_NONE, "/%s%s%s", e->base_prefix,
                     rel[0] ? "/" : "", rel);
}

/* A torch module of the base model at scope `fmt` (a layer number). */
static void enc_torch_module(g_graph *g, const enc *e, const char *cls, g_op leaf_op,
                             const char *fmt, int l)
{
    char rel[128];
    snprintf(rel, sizeof rel, fmt, l);
    if (e->head == HEAD_BASE)
        g_module_add(g, cls, leaf_op, false, GM_ROLE_NONE, "/%s", rel);
    else
        g_module_add(g, cls, leaf_op, false, GM_ROLE_NONE, "/%s/%s", e->base_prefix, rel);
}

#define LAYER_NORM_CLASS "torch.nn.modules.normalization.LayerNorm"

/* The modules transformers' forward runs, at the scopes enc_build names its nodes under (its
 * dropouts, the identity at inference, make no nodes). */
static void declare_modules(g_graph *g, const enc *e)
{
    const enc_classes *c = e->classes;
    const enc_names *n = e->names;
    bool distil = e->flavor == ENC_DISTILBERT;
    char full[256];
    if (e->head != HEAD_BASE) {
        snprintf(full, sizeof full, "%s.%s", c->module, c->classifier);
        g_module_add(g, full, G_OP_COUNT, false, GM_ROLE_NONE, "%s", "");
    }
    enc_module(g, e, c->model, G_OP_COUNT, false, "", 0);
    enc_module(g, e, c->embeddings, G_OP_COUNT, false, "embeddings", 0);
    enc_torch_module(g, e, BLK_EMBEDDING_CLASS, G_EMBEDDING, "embeddings/word_embeddings", 0);
    enc_torch_module(g, e, BLK_EMBEDDING_CLASS, G_EMBEDDING, "embeddings/position_embeddings",
                     0);
    if (e->type_vocab > 0)
        enc_torch_module(g, e, BLK_EMBEDDING_CLASS, G_EMBEDDING,
                         "embeddings/token_type_embeddings", 0);
    enc_torch_module(g, e, LAYER_NORM_CLASS, G_LAYER_NORM, "embeddings/LayerNorm", 0);
    enc_module(g, e, c->encoder, G_OP_COUNT, false, distil ? "transformer" : "encoder", 0);
    for (int l = 0; l < e->n_layers; l++) {
        enc_module(g, e, c->layer, G_OP_COUNT, true, n->scope_layer, l);
        char scope[128];
        const char *const linears[2][4] = {{"query", "key", "value", NULL},
                                           {"q_lin", "k_lin", "v_lin", "out_lin"}};
        if (distil) {
            enc_module(g, e, c->attention, G_OP_COUNT, false, n->scope_attn, l);
            enc_torch_module(g, e, LAYER_NORM_CLASS, G_LAYER_NORM,
                             "transformer/layer.%d/sa_layer_norm", l);
            enc_module(g, e, c->intermediate, G_OP_COUNT, false, n->scope_up, l);
            enc_torch_module(g, e, BLK_LINEAR_CLASS, G_LINEAR, "transformer/layer.%d/ffn/lin1",
                             l);
            enc_torch_module(g, e, BLK_LINEAR_CLASS, G_LINEAR, "transformer/layer.%d/ffn/lin2",
                             l);
            enc_torch_module(g, e, e->act_class, e->act, "transformer/layer.%d/ffn/activation",
                             l);
            enc_torch_module(g, e, LAYER_NORM_CLASS, G_LAYER_NORM,
                             "transformer/layer.%d/output_layer_norm", l);
        } else {
            enc_module(g, e, c->attention, G_OP_COUNT, false, "encoder/layer.%d/attention", l);
            enc_module(g, e, c->self_attention, G_OP_COUNT, false, n->scope_attn, l);
            enc_module(g, e, c->self_output, G_OP_COUNT, false, n->scope_attn_out, l);
            enc_torch_module(g, e, BLK_LINEAR_CLASS, G_LINEAR,
                             "encoder/layer.%d/attention/output/dense", l);
            enc_torch_module(g, e, LAYER_NORM_CLASS, G_LAYER_NORM,
                             "encoder/layer.%d/attention/output/LayerNorm", l);
            enc_module(g, e, c->intermediate, G_OP_COUNT, false, n->scope_up, l);
            enc_torch_module(g, e, BLK_LINEAR_CLASS, G_LINEAR,
                             "encoder/layer.%d/intermediate/dense", l);
            enc_torch_module(g, e, e->act_class, e->act,
                             "encoder/layer.%d/intermediate/intermediate_act_fn", l);
            enc_module(g, e, c->output, G_OP_COUNT, false, n->scope_down, l);
            enc_torch_module(g, e, BLK_LINEAR_CLASS, G_LINEAR, "encoder/layer.%d/output/dense",
                             l);
            enc_torch_module(g, e, LAYER_NORM_CLASS, G_LAYER_NORM,
                             "encoder/layer.%d/output/LayerNorm", l);
        }
        for (int k = 0; k < 4 && linears[distil][k]; k++) {
            snprintf(scope, sizeof scope, "%s/%s", n->scope_attn, linears[distil][k]);
            enc_torch_module(g, e, BLK_LINEAR_CLASS, G_LINEAR, scope, l);
        }
    }
    if (e->pooler) {
        enc_module(g, e, c->pooler, G_OP_COUNT, false, "pooler", 0);
        enc_torch_module(g, e, BLK_LINEAR_CLASS, G_LINEAR, "pooler/dense", 0);
        enc_torch_module(g, e, "torch.nn.modules.activation.Tanh", G_TANH, "pooler/activation",
                         0);
    }
    if (e->head == HEAD_BERT_CLASSIFIER) {
        g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_HEAD, "/classifier");
    } else if (e->head == HEAD_ROBERTA_CLASSIFIER) {
        snprintf(full, sizeof full, "%s.%s", c->module, c->head);
        g_module_add(g, full, G_OP_COUNT, false, GM_ROLE_NONE, "/classifier");
        g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_NONE, "/classifier/dense");
        g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_HEAD,
                     "/classifier/out_proj");
    }
}

/* Positions 0 .. s - 1 as one row [1, s]: transformers' position_ids buffer, whose one row of
 * the table is added to every sequence of the batch by broadcasting. */
static int positions_row(g_graph *g, int shape, const g_dim *bs)
{
    int64_t zero = 0;
    int one = g_scalar_i64(g, 1);
    int s = g_gather(g, "sequence", shape, one, 0);
    int r = g_range(g, "arange", g_scalar_i64(g, 0), s, one);
    int row = g_unsqueeze(g, "unsqueeze", r, 1, &zero);
    if (row != G_NONE)
        g->values[row].shape = (g_shape){.rank = 2, .d = {g_dim_const(1), bs[1]}};
    return row;
}

/* RoBERTa's positions: (cumsum(ids != pad) * (ids != pad)) + pad, as
 * create_position_ids_from_input_ids computes them (padding tokens sit at the padding index). */
static int roberta_positions(g_graph *g, const enc *e, int ids)
{
    int pad = g_const_i64(g, 1, &e->pad_token_id); /* [1]: torch's eq.Tensor takes no scalar */
    int real = g_cast(g, "position_ids/Cast",
                      g_unary(g, G_NOT, "position_ids/Not",
                              g_binary(g, G_EQUAL, "position_ids/Equal", ids, pad)), FERRY_I64);
    int counted = g_binary(g, G_MUL, "position_ids/Mul",
                           g_cumsum(g, "position_ids/CumSum", real, 1), real);
    return g_binary(g, G_ADD, "position_ids/Add", counted, pad);
}

static ferry_status enc_build(const void *hparams, ckpt *ck, const model_io *io, g_graph *g,
                              fy_err *err)
{
    const enc *e = hparams;
    const enc_names *n = e->names;
    ferry_dtype dt = io->dtype;
    int64_t h = e->hidden;
    char name[256];
    g_dim bs[2] = {io->batch, io->sequence};
    int ids = g_input(g, "input_ids", FERRY_I64, 2, bs);
    int mask = io->takes & FERRY_INPUT_ATTENTION_MASK
                   ? g_input(g, "attention_mask", FERRY_I64, 2, bs) : G_NONE;
    int types = io->takes & FERRY_INPUT_TOKEN_TYPE_IDS
                    ? g_input(g, "token_type_ids", FERRY_I64, 2, bs) : G_NONE;
    int positions = io->takes & FERRY_INPUT_POSITION_IDS
                        ? g_input(g, "position_ids", FERRY_I64, 2, bs) : G_NONE;
    /* what each gathers from: a call's values are checked against these (export.json) */
    const int64_t bounds[4] = {e->vocab, 0, e->type_vocab, e->max_positions};
    const int ins[4] = {ids, mask, types, positions};
    const g_input_role roles[4] = {GI_TOKEN_IDS, GI_ATTENTION_MASK, GI_TOKEN_TYPE_IDS,
                                   GI_POSITION_IDS};
    for (int i = 0; i < 4; i++) {
        g_input_role_set(g, ins[i], roles[i]);
        if (ins[i] != G_NONE && bounds[i] > 0)
            g->values[ins[i]].bound = bounds[i];
    }

    int word = blk_weight(g, ck, prefixed(e, n->word, name, sizeof name), 0, true, e->vocab, h,
                          dt, err);
    int pos_table = blk_weight(g, ck, prefixed(e, n->position, name, sizeof name), 0, true,
                               e->max_positions, h, dt, err);
    int type_table = e->type_vocab > 0 ? blk_weight(g, ck, prefixed(e, n->token_type, name,
                                                                    sizeof name),
                                                    0, true, e->type_vocab, h, dt, err)
                                       : G_NONE;
    int ln_w = blk_weight(g, ck, prefixed(e, n->embed_norm_w, name, sizeof name), 0, true, h, 0,
                          dt, err);
    int ln_b = blk_weight(g, ck, prefixed(e, n->embed_norm_b, name, sizeof name), 0, true, h, 0,
                          dt, err);
    if (err->status != FERRY_OK)
        return err->status;

    declare_modules(g, e);
    /* the base model computes the mask: the root of a base model, its module in a head's */
    snprintf(g->base_scope, sizeof g->base_scope, "%s%s", e->head == HEAD_BASE ? "" : "/",
             e->head == HEAD_BASE ? "" : e->base_prefix);
    enc_scope(g, e, "embeddings", 0);
    int shape = g_shape_of(g, "input_shape", ids, 0, G_END);
    int x = g_embedding(g, "word_embeddings", word, ids);
    if (type_table != G_NONE) {
        /* no token_type_ids: every token is of type 0, as the forward's zero buffer says */
        if (types == G_NONE)
            types = blk_like_ids(g, g_expand(g, "token_type_ids", g_scalar_i64(g, 0), shape),
                                 bs);
        x = g_binary(g, G_ADD, "Add", x, g_embedding(g, "token_type_embeddings", type_table,
                                                     types));
    }
    if (positions == G_NONE)
        positions = e->flavor == ENC_ROBERTA ? roberta_positions(g, e, ids)
                                             : positions_row(g, shape, bs);
    x = g_binary(g, G_ADD, "Add_1", x, g_embedding(g, "position_embeddings", pos_table,
                                                   positions));
    x = g_layer_norm(g, "LayerNorm", x, ln_w, ln_b, e->eps);
    if (mask == G_NONE) {
        enc_scope(g, e, "attention_mask", 0);
        mask = blk_like_ids(g, g_expand(g, "ones", g_scalar_i64(g, 1), shape), bs);
    }

    int64_t hd = h / e->n_heads;
    g_attn_opts ao = {.num_heads = e->n_heads, .num_kv_heads = e->n_heads, .head_dim = hd,
                      .scale = 1.0 / sqrt((double)hd), .mask = G_MASK_PADDING,
                      .cache = G_CACHE_NONE};
    for (int l = 0; l < e->n_layers; l++) {
        enc_layer w;
        if (bind_layer(g, ck, e, l, dt, &w, err) != FERRY_OK)
            return err->status;
        enc_scope(g, e, n->scope_attn, l);
        int q = split_heads(g, "query/Reshape", g_linear(g, e->flavor == ENC_DISTILBERT
                                                               ? "q_lin" : "query", x, w.q, w.q_b),
                            e);
        int k = split_heads(g, "key/Reshape", g_linear(g, e->flavor == ENC_DISTILBERT
                                                             ? "k_lin" : "key", x, w.k, w.k_b),
                            e);
        int v = split_heads(g, "value/Reshape", g_linear(g, e->flavor == ENC_DISTILBERT
                                                               ? "v_lin" : "value", x, w.v, w.v_b),
                            e);
        int a = g_attention(g, "attn", q, k, v, mask, G_NONE, G_NONE, G_NONE, &ao, NULL, NULL);
        enc_scope(g, e, n->scope_attn_out, l);
        a = g_linear(g, e->flavor == ENC_DISTILBERT ? "out_lin" : "dense", a, w.o, w.o_b);
        if (e->flavor == ENC_DISTILBERT)
            enc_scope(g, e, n->scope_layer, l);
        x = g_skip_layer_norm(g, e->flavor == ENC_DISTILBERT ? "sa_layer_norm" : "LayerNorm",
                              a, x, w.attn_w, w.attn_b, e->eps, NULL);
        enc_scope(g, e, n->scope_up, l);
        /* the activation under transformers' attribute name, which is its module's */
        int f = g_unary(g, e->act, e->flavor == ENC_DISTILBERT ? "activation"
                                                                : "intermediate_act_fn",
                        g_linear(g, e->flavor == ENC_DISTILBERT ? "lin1" : "dense", x, w.up,
                                 w.up_b));
        enc_scope(g, e, n->scope_down, l);
        f = g_linear(g, e->flavor == ENC_DISTILBERT ? "lin2" : "dense", f, w.down, w.down_b);
        if (e->flavor == ENC_DISTILBERT)
            enc_scope(g, e, n->scope_layer, l);
        x = g_skip_layer_norm(g, e->flavor == ENC_DISTILBERT ? "output_layer_norm"
                                                              : "LayerNorm",
                              f, x, w.out_w, w.out_b, e->eps, NULL);
    }
    int pooled = G_NONE;
    if (e->pooler) {
        int pw = blk_weight(g, ck, prefixed(e, n->pooler_w, name, sizeof name), 0, true, h, h,
                            dt, err);
        int pb = blk_weight(g, ck, prefixed(e, n->pooler_b, name, sizeof name), 0, true, h, 0,
                            dt, err);
        if (err->status != FERRY_OK)
            return err->status;
        enc_scope(g, e, "pooler", 0);
        int first = g_gather(g, "Gather", x, g_scalar_i64(g, 0), 1);
        pooled = g_unary(g, G_TANH, "activation", g_linear(g, "dense", first, pw, pb));
    }
    g->scope[0] = '\0';
    if (e->head == HEAD_BASE) {
        g_output(g, x, "last_hidden_state");
        if (pooled != G_NONE)
            g_output(g, pooled, "pooler_output");
    } else if (e->head == HEAD_BERT_CLASSIFIER) {
        int cw = blk_weight(g, ck, "classifier.weight", 0, true, e->num_labels, h, dt, err);
        int cb = blk_weight(g, ck, "classifier.bias", 0, true, e->num_labels, 0, dt, err);
        if (err->status != FERRY_OK)
            return err->status;
        g_output(g, g_linear(g, "classifier", pooled, cw, cb), "logits");
    } else {
        int dw = blk_weight(g, ck, "classifier.dense.weight", 0, true, h, h, dt, err);
        int db = blk_weight(g, ck, "classifier.dense.bias", 0, true, h, 0, dt, err);
        int ow = blk_weight(g, ck, "classifier.out_proj.weight", 0, true, e->num_labels, h, dt,
                            err);
        int ob = blk_weight(g, ck, "classifier.out_proj.bias", 0, true, e->num_labels, 0, dt,
                            err);
        if (err->status != FERRY_OK)
            return err->status;
        g_scope(g, "/classifier");
        int first = g_gather(g, "Gather", x, g_scalar_i64(g, 0), 1);
        int d = g_unary(g, G_TANH, "Tanh", g_linear(g, "dense", first, dw, db));
        g->scope[0] = '\0';
        g_output(g, g_linear(g, "classifier/out_proj", d, ow, ob), "logits");
    }
    if (!g_ok(g))
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    return FERRY_OK;
}

/* The longest sequence the position table covers (RoBERTa's start after the padding index). */
static int64_t enc_max_sequence(const void *hparams)
{
    const enc *e = hparams;
    return e->flavor == ENC_ROBERTA ? e->max_positions - e->pad_token_id - 1 : e->max_positions;
}

/* What the family's tokenizer returns: BERT's token types too (a second segment). */
static unsigned enc_default_inputs(const void *hparams)
{
    const enc *e = hparams;
    return FERRY_INPUT_IDS | FERRY_INPUT_ATTENTION_MASK |
           (e->flavor == ENC_BERT ? FERRY_INPUT_TOKEN_TYPE_IDS : 0);
}

static const model_input BERT_INPUTS[] = {
    {"input_ids", 2, {"batch", "sequence"}},
    {"attention_mask", 2, {"batch", "sequence"}},
    {"token_type_ids", 2, {"batch", "sequence"}},
    {"position_ids", 2, {"batch", "sequence"}},
};
static const model_input DISTILBERT_INPUTS[] = {
    {"input_ids", 2, {"batch", "sequence"}},
    {"attention_mask", 2, {"batch", "sequence"}},
};

#define READER(fn, flavor, head, prefix, classes)                                           \
    static ferry_status fn(const model_config *cfg, void **out, fy_err *err)                \
    {                                                                                       \
        return enc_read(cfg, flavor, head, prefix, &classes, out, err);                     \
    }
READER(bert_read, ENC_BERT, HEAD_BASE, "bert", BERT_CLASSES)
READER(bert_classifier_read, ENC_BERT, HEAD_BERT_CLASSIFIER, "bert", BERT_CLASSES)
READER(roberta_read, ENC_ROBERTA, HEAD_BASE, "roberta", ROBERTA_CLASSES)
READER(roberta_classifier_read, ENC_ROBERTA, HEAD_ROBERTA_CLASSIFIER, "roberta",
       ROBERTA_CLASSES)
READER(xlm_roberta_read, ENC_ROBERTA, HEAD_BASE, "roberta", XLM_ROBERTA_CLASSES)
READER(distilbert_read, ENC_DISTILBERT, HEAD_BASE, "distilbert", DISTILBERT_CLASSES)
#undef READER

#define ENCODER(arch_name, type, reader, out_class, ins)                                    \
    {.architecture = arch_name, .model_type = type, .kind = MODEL_ENCODER,                  \
     .output_class = out_class, .read = reader, .free_hparams = enc_free, .bind = enc_bind,   \
     .plan = model_plan_plain, .build = enc_build, .inputs = ins, .n_inputs = sizeof ins / sizeof ins[0],             \
     .default_inputs = enc_default_inputs, .max_sequence = enc_max_sequence}

const model_arch model_bert = ENCODER("BertModel", "bert", bert_read, BASE_OUTPUT_POOLING,
                                      BERT_INPUTS);
const model_arch model_bert_classifier =
    ENCODER("BertForSequenceClassification", "bert", bert_classifier_read, CLASSIFIER_OUTPUT,
            BERT_INPUTS);
const model_arch model_roberta = ENCODER("RobertaModel", "roberta", roberta_read,
                                         BASE_OUTPUT_POOLING, BERT_INPUTS);
const model_arch model_roberta_classifier =
    ENCODER("RobertaForSequenceClassification", "roberta", roberta_classifier_read,
            CLASSIFIER_OUTPUT, BERT_INPUTS);
const model_arch model_xlm_roberta = ENCODER("XLMRobertaModel", "xlm-roberta", xlm_roberta_read,
                                             BASE_OUTPUT_POOLING, BERT_INPUTS);
const model_arch model_distilbert = ENCODER("DistilBertModel", "distilbert", distilbert_read,
                                            BASE_OUTPUT, DISTILBERT_INPUTS);
