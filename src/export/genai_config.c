/* genai_config.c — genai_config.json: what onnxruntime-genai (og.Model) needs to run an ONNX
 * generation export as it is, for the one layout it can drive: a single decoder graph that
 * takes the prompt and each new token (the multi-token decode.onnx that --for-generation
 * --dynamic writes by default) over a growing cache (past_key_values.* in, present.* out; one
 * shared buffer where GroupQueryAttention writes the cache). Derived from config.json and
 * generation_config.json; session options are left to the user but the provider.
 *
 * A vision-language model (model_hparams.image_token_id) runs as genai's multimodal pipeline:
 * its vision model is the image encoder (pixel_values, image_grid_thw -> pooler_output), its
 * embedding the genai_embedding component (which places the image features), its decoder
 * genai_decoder (inputs_embeds and M-RoPE's three rows); the image processor genai runs is
 * described in GENAI_PROCESSOR_FILE (onnxruntime-extensions' steps), from the checkpoint's
 * preprocessor_config.json. */
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

static bool multimodal(const ferry_exported *e)
{
    return hparams(e).image_token_id != 0;
}

/* An encoder-decoder over log-mel features (Whisper): genai's whisper model, an encoder that
 * makes the cross cache and a decoder fed the tokens and both caches alone. */
static bool speech(const ferry_exported *e)
{
    return hparams(e).num_mel_bins != 0;
}

const char *genai_processor_file(const ferry_exported *e)
{
    if (!e->model)
        return NULL;
    return multimodal(e) ? GENAI_PROCESSOR_FILE : speech(e) ? GENAI_AUDIO_PROCESSOR_FILE : NULL;
}

bool genai_is_processor_file(const char *name)
{
    return strcmp(name, GENAI_PROCESSOR_FILE) == 0 ||
           strcmp(name, GENAI_AUDIO_PROCESSOR_FILE) == 0;
}

/* The component genai runs as its decoder. */
static const char *decoder_name(const ferry_exported *e)
{
    return multimodal(e) ? "genai_decoder" : "decode";
}

static int component_index(const ferry_exported *e, const char *name)
{
    for (int i = 0; i < e->n_components; i++)
        if (strcmp(e->comps[i].name, name) == 0)
            return i;
    return -1;
}

/* The checkpoint's preprocessor_config.json, parsed (NULL: absent or not JSON). */
static cJSON *preprocessor(const ferry_exported *e)
{
    for (int i = 0; i < e->tokenizer.n; i++)
        if (strcmp(e->tokenizer.f[i].name, "preprocessor_config.json") == 0)
            return cJSON_ParseWithLength(e->tokenizer.f[i].data, e->tokenizer.f[i].len);
    return NULL;
}

/* A number of the image processor's config (`key`, else `alt` within `in`), or `dflt`. */
static double pp_number(const cJSON *pp, const char *key, const char *in, const char *alt,
                        double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(pp, key);
    if (!cJSON_IsNumber(v) && in)
        v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pp, in), alt);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* Whether `v` is a list of three numbers (a mean or std per channel). */
static bool three_numbers(const cJSON *v)
{
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 3)
        return false;
    for (const cJSON *x = v->child; x; x = x->next)
        if (!cJSON_IsNumber(x))
            return false;
    return true;
}

/* Why genai's image processor cannot be described from preprocessor_config.json; NULL if it
 * can. */
static const char *bad_preprocessor(const ferry_exported *e)
{
    cJSON *pp = preprocessor(e);
    const char *why = NULL;
    model_hparams hp = hparams(e);
    if (!pp)
        why = "onnxruntime-genai preprocesses images itself, as the checkpoint's "
              "preprocessor_config.json says, and the checkpoint has none";
    else if (!three_numbers(cJSON_GetObjectItemCaseSensitive(pp, "image_mean")) ||
             !three_numbers(cJSON_GetObjectItemCaseSensitive(pp, "image_std")))
        why = "preprocessor_config.json has no image_mean and image_std of 3 numbers each, "
              "which onnxruntime-genai normalizes by";
    else if (pp_number(pp, "patch_size", NULL, NULL, 14) != (double)hp.patch_size ||
             pp_number(pp, "merge_size", NULL, NULL, 2) != (double)hp.spatial_merge_size ||
             pp_number(pp, "temporal_patch_size", NULL, NULL, 2) !=
                 (double)hp.temporal_patch_size)
        why = "preprocessor_config.json's patch_size, merge_size or temporal_patch_size differ "
              "from vision_config's";
    cJSON_Delete(pp);
    return why;
}

/* Whether the component's attention_mask (input_ids where it takes none: a decoder that
 * counts its positions from its cache) has a symbol on both axes, the batch and the length
 * that grows (--dynamic, or dims on batch and sequence: an ONNX graph does not hold their
 * ranges, so onnxruntime-genai is not bound by them). */
static bool symbolic_batch_and_sequence(const ferry_exported *e, const char *component)
{
    for (int i = 0; i < e->n_components; i++) {
        const g_graph *g = e->lowered[i].graph;
        if (strcmp(e->comps[i].name, component) != 0)
            continue;
        const g_value *ids = NULL;
        for (size_t k = 0; k < g->n_inputs; k++) {
            const g_value *v = &g->values[g->inputs[k]];
            if (!strcmp(v->name, "input_ids"))
                ids = v;
            if (!strcmp(v->name, "attention_mask"))
                return v->shape.rank == 2 && !g_dim_is_const(v->shape.d[0], NULL) &&
                       !g_dim_is_const(v->shape.d[1], NULL);
        }
        return ids && ids->shape.rank == 2 && !g_dim_is_const(ids->shape.d[0], NULL) &&
               !g_dim_is_const(ids->shape.d[1], NULL);
    }
    return false;
}

const char *genai_unsupported(const ferry_exported *e)
{
    if (e->backend->format != FERRY_FORMAT_ONNX || !e->generation)
        return "";
    if (e->gen.static_cache)
        return "its static cache counts positions itself, which onnxruntime-genai does not feed";
    /* the shapes of the graph that takes the prompt: a one-token decode's sequence axis is 1
     * whatever shapes the export was given */
    bool one_token = !e->gen.multi_token_decode;
    if (!symbolic_batch_and_sequence(e, one_token ? "prefill" : "decode"))
        return "onnxruntime-genai grows the cache and the prompt to any length, batches of any "
               "size: export with --dynamic (or dims on both axes of input_ids)";
    if (one_token)
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
    const char *preprocessing = multimodal(e) ? bad_preprocessor(e) : NULL;
    if (preprocessing)
        return preprocessing;
    if (speech(e) && component_index(e, "encoder") < 0)
        return "the encoder component was not exported";
    if (component_index(e, decoder_name(e)) >= 0)
        return NULL;
    return multimodal(e) ? "the genai_decoder component was not exported"
                         : "the decode component was not exported";
}

/* Whether every cache output of the decode graph comes from GroupQueryAttention, which writes
 * the new rows into the past buffer when present is bound to it: then genai may keep one
 * buffer of max_length per layer instead of copying the whole cache every step. A graph that
 * concatenates (plain ops, MultiHeadAttention) needs a new present each call. */
static bool shares_buffer(const ferry_exported *e)
{
    int d = component_index(e, decoder_name(e));
    /* a speech decoder counts its positions from its past's length, which a buffer of
     * max_length would hide */
    const g_graph *g = d >= 0 && !speech(e) ? e->lowered[d].graph : NULL;
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

/* A model section's session options: the provider the graph was made for (its fused kernels
 * may exist only there). */
static void session_options(const ferry_exported *e, cJSON *section)
{
    cJSON *so = cJSON_AddObjectToObject(section, "session_options");
    cJSON_AddStringToObject(so, "log_id", "onnxruntime-genai");
    cJSON *providers = cJSON_AddArrayToObject(so, "provider_options");
    const char *provider = e->backend->runtime_provider ? e->backend->runtime_provider(&e->cfg)
                                                         : NULL;
    if (provider && strcmp(provider, "cpu") != 0) {
        cJSON *one = cJSON_CreateObject();
        cJSON_AddObjectToObject(one, provider);
        cJSON_AddItemToArray(providers, one);
    }
}

static const char *component_file(const ferry_exported *e, const char *name)
{
    int i = component_index(e, name);
    return i >= 0 ? e->comps[i].file : "";
}

/* genai's vision and embedding sections, and the token ids it places images by */
static void multimodal_sections(const ferry_exported *e, const model_hparams *hp, cJSON *model)
{
    cJSON_AddNumberToObject(model, "image_token_id", (double)hp->image_token_id);
    cJSON_AddNumberToObject(model, "video_token_id", (double)hp->video_token_id);
    cJSON_AddNumberToObject(model, "vision_start_token_id", (double)hp->vision_start_token_id);
    cJSON *vision = cJSON_AddObjectToObject(model, "vision");
    cJSON_AddStringToObject(vision, "filename", component_file(e, "image_encoder"));
    cJSON_AddStringToObject(vision, "config_filename", GENAI_PROCESSOR_FILE);
    cJSON_AddNumberToObject(vision, "spatial_merge_size", (double)hp->spatial_merge_size);
    cJSON_AddNumberToObject(vision, "patch_size", (double)hp->patch_size);
    if (hp->window_size)
        cJSON_AddNumberToObject(vision, "window_size", (double)hp->window_size);
    session_options(e, vision);
    cJSON *in = cJSON_AddObjectToObject(vision, "inputs");
    cJSON_AddStringToObject(in, "pixel_values", "pixel_values");
    cJSON_AddStringToObject(in, "image_grid_thw", "image_grid_thw");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(vision, "outputs"), "image_features",
                            "pooler_output");
    cJSON *embedding = cJSON_AddObjectToObject(model, "embedding");
    cJSON_AddStringToObject(embedding, "filename", component_file(e, "genai_embedding"));
    session_options(e, embedding);
    in = cJSON_AddObjectToObject(embedding, "inputs");
    cJSON_AddStringToObject(in, "input_ids", "input_ids");
    cJSON_AddStringToObject(in, "image_features", "image_features");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(embedding, "outputs"), "inputs_embeds",
                            "inputs_embeds");
}

/* One onnxruntime-extensions step {"operation": {name, type, attrs}}; returns attrs. */
/* genai's whisper encoder: input_features in; the hidden states and each decoder layer's cross
 * keys and values out, which genai hands the decoder as they are. */
static void encoder_section(const ferry_exported *e, const model_hparams *hp, cJSON *model)
{
    cJSON *enc = cJSON_AddObjectToObject(model, "encoder");
    session_options(e, enc);
    cJSON_AddStringToObject(enc, "filename", component_file(e, "encoder"));
    cJSON_AddNumberToObject(enc, "head_size", (double)hp->encoder_head_dim);
    cJSON_AddNumberToObject(enc, "hidden_size", (double)hp->hidden_size);
    cJSON_AddNumberToObject(enc, "num_attention_heads", (double)hp->encoder_heads);
    cJSON_AddNumberToObject(enc, "num_hidden_layers", (double)hp->encoder_layers);
    cJSON_AddNumberToObject(enc, "num_key_value_heads", (double)hp->encoder_heads);
    cJSON *in = cJSON_AddObjectToObject(enc, "inputs"), *out = cJSON_AddObjectToObject(enc, "outputs");
    cJSON_AddStringToObject(in, "audio_features", "input_features");
    cJSON_AddStringToObject(out, "encoder_hidden_states", "last_hidden_state");
    cJSON_AddStringToObject(out, "cross_present_key_names", "present.%d.cross_key");
    cJSON_AddStringToObject(out, "cross_present_value_names", "present.%d.cross_value");
}

static cJSON *step(cJSON *steps, const char *name, const char *type)
{
    cJSON *s = cJSON_CreateObject(), *op = cJSON_AddObjectToObject(s, "operation");
    cJSON_AddStringToObject(op, "name", name);
    cJSON_AddStringToObject(op, "type", type);
    cJSON_AddItemToArray(steps, s);
    return cJSON_AddObjectToObject(op, "attrs");
}

/* onnxruntime-extensions' log-mel steps for a speech export, from the feature extractor's
 * preprocessor_config.json (WhisperFeatureExtractor's defaults where it says nothing). */
static char *audio_processor_text(const ferry_exported *e, fy_err *err)
{
    model_hparams hp = hparams(e);
    cJSON *pp = preprocessor(e);
    double n_fft = pp_number(pp, "n_fft", NULL, NULL, 400);
    double hop = pp_number(pp, "hop_length", NULL, NULL, 160);
    double chunk = pp_number(pp, "chunk_length", NULL, NULL, 30);
    cJSON_Delete(pp);
    cJSON *root = cJSON_CreateObject(), *fe = cJSON_AddObjectToObject(root, "feature_extraction");
    cJSON *steps = cJSON_AddArrayToObject(fe, "sequence");
    step(steps, "audio_decoder", "AudioDecoder");
    cJSON *stft = step(steps, "STFT", "STFTNorm");
    cJSON_AddNumberToObject(stft, "n_fft", n_fft);
    cJSON_AddNumberToObject(stft, "frame_length", n_fft);
    cJSON_AddNumberToObject(stft, "hop_length", hop);
    cJSON *mel = step(steps, "log_mel_spectrogram", "LogMelSpectrum");
    cJSON_AddNumberToObject(mel, "chunk_size", chunk);
    cJSON_AddNumberToObject(mel, "hop_length", hop);
    cJSON_AddNumberToObject(mel, "n_fft", n_fft);
    cJSON_AddNumberToObject(mel, "n_mel", (double)hp.num_mel_bins);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    return text;
}

char *genai_processor_text(const ferry_exported *e, fy_err *err)
{
    if (speech(e))
        return audio_processor_text(e, err);
    model_hparams hp = hparams(e);
    cJSON *pp = preprocessor(e); /* genai_unsupported checked it */
    cJSON *root = cJSON_CreateObject(), *proc = cJSON_AddObjectToObject(root, "processor");
    cJSON_AddStringToObject(proc, "name", "qwen2_5_image_processor");
    cJSON *steps = cJSON_AddArrayToObject(proc, "transforms");
    cJSON_AddStringToObject(step(steps, "decode_image", "DecodeImage"), "color_space", "RGB");
    step(steps, "convert_to_rgb", "ConvertRGB");
    cJSON *resize = step(steps, "resize", "Resize");
    cJSON_AddNumberToObject(resize, "smart_resize", 1);
    /* transformers 5 saves the pixel bounds as size's shortest and longest edge */
    cJSON_AddNumberToObject(resize, "min_pixels",
                            pp_number(pp, "min_pixels", "size", "shortest_edge", 56 * 56));
    cJSON_AddNumberToObject(resize, "max_pixels",
                            pp_number(pp, "max_pixels", "size", "longest_edge", 28 * 28 * 1280));
    cJSON_AddNumberToObject(resize, "patch_size", (double)hp.patch_size);
    cJSON_AddNumberToObject(resize, "merge_size", (double)hp.spatial_merge_size);
    cJSON_AddNumberToObject(step(steps, "rescale", "Rescale"), "rescale_factor",
                            pp_number(pp, "rescale_factor", NULL, NULL, 1.0 / 255.0));
    cJSON *normalize = step(steps, "normalize", "Normalize");
    cJSON_AddItemToObject(normalize, "mean",
                          cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(pp, "image_mean"), 1));
    cJSON_AddItemToObject(normalize, "std",
                          cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(pp, "image_std"), 1));
    cJSON_AddNumberToObject(normalize, "qwen2_5_vl", 1);
    cJSON *patch = step(steps, "patch_image", "PatchImage");
    cJSON_AddNumberToObject(patch, "patch_size", (double)hp.patch_size);
    cJSON_AddNumberToObject(patch, "temporal_patch_size", (double)hp.temporal_patch_size);
    cJSON_AddNumberToObject(patch, "merge_size", (double)hp.spatial_merge_size);
    cJSON_Delete(pp);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    return text;
}

char *genai_config_text(const ferry_exported *e, fy_err *err)
{
    const model_config *mc = &e->model->cfg;
    model_hparams hp = hparams(e);
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    if (multimodal(e))
        multimodal_sections(e, &hp, model);
    if (speech(e))
        encoder_section(e, &hp, model);
    cJSON *dec = cJSON_AddObjectToObject(model, "decoder");
    session_options(e, dec);
    cJSON_AddStringToObject(dec, "filename", component_file(e, decoder_name(e)));
    cJSON_AddNumberToObject(dec, "head_size", (double)hp.head_dim);
    cJSON_AddNumberToObject(dec, "hidden_size", (double)hp.hidden_size);
    cJSON_AddNumberToObject(dec, "num_attention_heads", (double)hp.num_heads);
    cJSON_AddNumberToObject(dec, "num_hidden_layers", (double)hp.num_layers);
    cJSON_AddNumberToObject(dec, "num_key_value_heads", (double)hp.num_kv_heads);
    cJSON *in = cJSON_AddObjectToObject(dec, "inputs"), *out = cJSON_AddObjectToObject(dec, "outputs");
    if (multimodal(e))
        cJSON_AddStringToObject(in, "inputs_embeds", "inputs_embeds");
    else
        cJSON_AddStringToObject(in, "input_ids", "input_ids");
    if (speech(e)) {
        cJSON_AddStringToObject(in, "cross_past_key_names", "past_key_values.%d.cross_key");
        cJSON_AddStringToObject(in, "cross_past_value_names", "past_key_values.%d.cross_value");
    } else {
        cJSON_AddStringToObject(in, "attention_mask", "attention_mask");
        cJSON_AddStringToObject(in, "position_ids", "position_ids");
    }
    cJSON_AddStringToObject(in, "past_key_names", "past_key_values.%d.key");
    cJSON_AddStringToObject(in, "past_value_names", "past_key_values.%d.value");
    cJSON_AddStringToObject(out, "logits", "logits");
    cJSON_AddStringToObject(out, "present_key_names", "present.%d.key");
    cJSON_AddStringToObject(out, "present_value_names", "present.%d.value");
    cJSON_AddStringToObject(model, "type", hp.genai_type);
    cJSON_AddNumberToObject(model, "context_length", (double)hp.context_length);
    cJSON_AddNumberToObject(model, "vocab_size", (double)hp.vocab_size);
    copy_key(model, "bos_token_id", gen_key(mc, "bos_token_id"));
    if (speech(e))
        copy_key(model, "decoder_start_token_id", gen_key(mc, "decoder_start_token_id"));
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
