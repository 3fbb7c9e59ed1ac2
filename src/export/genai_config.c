/* genai_config.c — genai_config.json: what onnxruntime-genai (og.Model) needs to run an ONNX
 * generation export as it is, for the one layout it can drive: a single decoder graph that
 * takes the prompt and each new token (the multi-token decode.onnx that --for-generation
 * --dynamic writes by default) over a growing cache (past_key_values.* in, present.* out; one
 * shared buffer where GroupQueryAttention writes the cache). Derived from config.json and
 * generation_config.json; session options are left to the user but the provider. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "export/internal.h"

static const cJSON *gen_key(const model_config *mc, const char *key);
static const cJSON *pad_token(const model_config *mc);

/* The model's hyperparameters as its family gives them (its genai model type among them: a
 * checkpoint's own model_type may be a fine-tune's name genai does not know). */
static model_hparams hparams(const ferry_exported *e)
{
    model_hparams hp = {0};
    if (e->model && e->model->arch->describe)
        e->model->arch->describe(e->model->hparams, &hp);
    return hp;
}

/* Whether `v` is absent or a token id genai takes: an integer in [0, vocab), or (`list`) a
 * non-empty list of them. */
static bool token_id_ok(const cJSON *v, int64_t vocab, bool list)
{
    if (!v)
        return true;
    if (list && cJSON_IsArray(v)) {
        int n = 0;
        for (const cJSON *x = v->child; x; x = x->next, n++)
            if (!token_id_ok(x, vocab, false))
                return false;
        return n > 0;
    }
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < (double)vocab &&
           v->valuedouble == (double)(int64_t)v->valuedouble;
}

/* The first token-id key onnxruntime-genai could not take, as a reason; NULL if none. */
static const char *bad_token_ids(const ferry_exported *e)
{
    const model_config *mc = &e->model->cfg;
    int64_t vocab = hparams(e).vocab_size;
    if (!token_id_ok(gen_key(mc, "eos_token_id"), vocab, true))
        return "eos_token_id (generation_config.json or config.json) is not a token id below "
               "vocab_size or a list of them";
    if (!token_id_ok(gen_key(mc, "bos_token_id"), vocab, false))
        return "bos_token_id (generation_config.json or config.json) is not a token id below "
               "vocab_size";
    if (!token_id_ok(pad_token(mc), vocab, false))
        return "pad_token_id (generation_config.json or config.json; else the first eos) is not "
               "a token id below vocab_size";
    return NULL;
}

/* Whether decode's attention_mask has a symbol on both axes, the batch and the cache that grows
 * (--dynamic, or dims on batch and sequence: an ONNX graph does not hold their ranges, so
 * onnxruntime-genai is not bound by them). */
static bool symbolic_batch_and_sequence(const ferry_exported *e)
{
    for (int i = 0; i < e->n_components; i++) {
        const g_graph *g = e->lowered[i].graph;
        if (strcmp(e->comps[i].name, "decode") != 0)
            continue;
        for (size_t k = 0; k < g->n_inputs; k++) {
            const g_value *v = &g->values[g->inputs[k]];
            if (!strcmp(v->name, "attention_mask"))
                return v->shape.rank == 2 && !g_dim_is_const(v->shape.d[0], NULL) &&
                       !g_dim_is_const(v->shape.d[1], NULL);
        }
    }
    return false;
}

const char *genai_unsupported(const ferry_exported *e)
{
    if (e->backend->format != FERRY_FORMAT_ONNX || !e->generation)
        return "";
    if (e->gen.static_cache)
        return "its static cache counts positions itself, which onnxruntime-genai does not feed";
    if (!symbolic_batch_and_sequence(e))
        return "onnxruntime-genai grows the cache and the prompt to any length, batches of any "
               "size: export with --dynamic (or dims on both axes of input_ids)";
    if (!e->gen.multi_token_decode)
        return "onnxruntime-genai runs one decoder graph for the prompt and each token, and "
               "this decode takes one token (--single-token-decode, multi_token_decode=false)";
    if (e->cfg.dtype == FERRY_BF16)
        return "onnxruntime's CPU provider has no bf16 kernels for this graph: export fp32 or "
               "fp16";
    if (!e->model || !hparams(e).genai_type)
        return "onnxruntime-genai has no model type for this architecture";
    const char *ids = bad_token_ids(e);
    if (ids)
        return ids;
    for (int i = 0; i < e->n_components; i++)
        if (strcmp(e->comps[i].name, "decode") == 0)
            return NULL;
    return "the decode component was not exported";
}

/* Whether every cache output of the decode graph comes from GroupQueryAttention, which writes
 * the new rows into the past buffer when present is bound to it: then genai may keep one
 * buffer of max_length per layer instead of copying the whole cache every step. A graph that
 * concatenates (plain ops, MultiHeadAttention) needs a new present each call. */
static bool shares_buffer(const ferry_exported *e)
{
    const g_graph *g = NULL;
    for (int i = 0; i < e->n_components; i++)
        if (strcmp(e->comps[i].name, "decode") == 0)
            g = e->lowered[i].graph;
    int caches = 0;
    for (size_t i = 0; g && i < g->n_outputs; i++) {
        const g_value *v = &g->values[g->outputs[i]];
        if (strncmp(v->name, "present.", 8) != 0)
            continue;
        const g_node *n = v->producer >= 0 ? &g->nodes[v->producer] : NULL;
        if (!n || n->op != G_EXTERN || strcmp(n->a.ext->op_type, "GroupQueryAttention") != 0)
            return false;
        caches++;
    }
    return caches > 0;
}

/* The pad id genai pads batches with: the checkpoint's, else its (first) eos. */
static const cJSON *pad_token(const model_config *mc)
{
    const cJSON *pad = gen_key(mc, "pad_token_id"), *eos = gen_key(mc, "eos_token_id");
    return pad ? pad : cJSON_IsArray(eos) ? cJSON_GetArrayItem(eos, 0) : eos;
}

/* A generation_config.json value, else config.json's, else its text_config's (token ids), else
 * none: transformers' GenerationConfig.from_model_config fills what is unset in that order. */
static const cJSON *gen_key(const model_config *mc, const char *key)
{
    const cJSON *v = mc->generation ? cJSON_GetObjectItemCaseSensitive(mc->generation, key) : NULL;
    if (!v || cJSON_IsNull(v))
        v = cJSON_GetObjectItemCaseSensitive(mc->raw, key);
    if (!v || cJSON_IsNull(v))
        v = cJSON_GetObjectItemCaseSensitive(mc->text, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static void copy_key(cJSON *to, const char *name, const cJSON *v)
{
    if (v && (cJSON_IsNumber(v) || cJSON_IsArray(v) || cJSON_IsBool(v)))
        cJSON_AddItemToObject(to, name, cJSON_Duplicate(v, 1));
}

static void search_number(cJSON *search, const model_config *mc, const char *key, double dflt)
{
    const cJSON *v = mc->generation ? cJSON_GetObjectItemCaseSensitive(mc->generation, key) : NULL;
    cJSON_AddNumberToObject(search, key, cJSON_IsNumber(v) ? v->valuedouble : dflt);
}

char *genai_config_text(const ferry_exported *e, fy_err *err)
{
    const model_config *mc = &e->model->cfg;
    model_hparams hp = hparams(e);
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON *dec = cJSON_AddObjectToObject(model, "decoder");
    cJSON *so = cJSON_AddObjectToObject(dec, "session_options");
    cJSON_AddStringToObject(so, "log_id", "onnxruntime-genai");
    /* the provider the graph was made for (its fused kernels may exist only there) */
    cJSON *providers = cJSON_AddArrayToObject(so, "provider_options");
    const char *provider = e->backend->runtime_provider ? e->backend->runtime_provider(&e->cfg)
                                                         : NULL;
    if (provider && strcmp(provider, "cpu") != 0) {
        cJSON *one = cJSON_CreateObject();
        cJSON_AddObjectToObject(one, provider);
        cJSON_AddItemToArray(providers, one);
    }
    const char *file = "decode.onnx";
    for (int i = 0; i < e->n_components; i++)
        if (strcmp(e->comps[i].name, "decode") == 0)
            file = e->comps[i].file;
    cJSON_AddStringToObject(dec, "filename", file);
    cJSON_AddNumberToObject(dec, "head_size", (double)hp.head_dim);
    cJSON_AddNumberToObject(dec, "hidden_size", (double)hp.hidden_size);
    cJSON_AddNumberToObject(dec, "num_attention_heads", (double)hp.num_heads);
    cJSON_AddNumberToObject(dec, "num_hidden_layers", (double)hp.num_layers);
    cJSON_AddNumberToObject(dec, "num_key_value_heads", (double)hp.num_kv_heads);
    cJSON *in = cJSON_AddObjectToObject(dec, "inputs"), *out = cJSON_AddObjectToObject(dec, "outputs");
    cJSON_AddStringToObject(in, "input_ids", "input_ids");
    cJSON_AddStringToObject(in, "attention_mask", "attention_mask");
    cJSON_AddStringToObject(in, "position_ids", "position_ids");
    cJSON_AddStringToObject(in, "past_key_names", "past_key_values.%d.key");
    cJSON_AddStringToObject(in, "past_value_names", "past_key_values.%d.value");
    cJSON_AddStringToObject(out, "logits", "logits");
    cJSON_AddStringToObject(out, "present_key_names", "present.%d.key");
    cJSON_AddStringToObject(out, "present_value_names", "present.%d.value");
    cJSON_AddStringToObject(model, "type", hp.genai_type);
    cJSON_AddNumberToObject(model, "context_length", (double)hp.context_length);
    cJSON_AddNumberToObject(model, "vocab_size", (double)hp.vocab_size);
    copy_key(model, "bos_token_id", gen_key(mc, "bos_token_id"));
    copy_key(model, "eos_token_id", gen_key(mc, "eos_token_id"));
    /* Batches reach onnxruntime-genai padded on the right with pad_token_id (it masks the
     * trailing run of it); a checkpoint without one pads with eos, as generate() does. */
    copy_key(model, "pad_token_id", pad_token(mc));
    cJSON *search = cJSON_AddObjectToObject(root, "search");
    const cJSON *sample = mc->generation ? cJSON_GetObjectItemCaseSensitive(mc->generation,
                                                                            "do_sample")
                                         : NULL;
    cJSON_AddBoolToObject(search, "do_sample", cJSON_IsTrue(sample));
    cJSON_AddNumberToObject(search, "max_length", (double)hp.context_length);
    cJSON_AddNumberToObject(search, "min_length", 0);
    cJSON_AddNumberToObject(search, "num_beams", 1);
    cJSON_AddNumberToObject(search, "num_return_sequences", 1);
    cJSON_AddBoolToObject(search, "past_present_share_buffer", shares_buffer(e));
    search_number(search, mc, "temperature", 1.0);
    search_number(search, mc, "top_k", 50);
    search_number(search, mc, "top_p", 1.0);
    search_number(search, mc, "repetition_penalty", 1.0);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    return text;
}
