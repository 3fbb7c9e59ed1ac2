/* smolvlm.c — SmolVLMForConditionalGeneration: its config (vision_config, scale_factor and the
 * Llama language model's text_config), where its checkpoint keeps each part, and its generation
 * components as the guide names them:
 *
 *   image_encoder   pixel_values [images, C, S, S] -> last_hidden_state: the vision tower
 *                   (smolvlm_vision.c), over whole tiles
 *   connector       image_hidden_states -> image_features [images, tokens, hidden]: the pixel
 *                   shuffle and the projection, the guide's projector component
 *   embed_tokens    input_ids -> inputs_embeds (the text embedding, for a pipeline without
 *                   torch)
 *   language_model  inputs_embeds, attention_mask, position_ids -> last_hidden_state and the
 *                   cache: the text model over the prompt, whose image tokens' rows the caller
 *                   has replaced by the image features
 *   lm_head         input -> output (the logits)
 *   decode          input_ids, attention_mask, position_ids, the cache -> logits and the cache */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate/generation.h"
#include "models/blocks.h"
#include "models/smolvlm.h"
#include "models/vision_language.h"
#include "util/json.h"

#define OUTPUT_HIDDEN "transformers.modeling_outputs.BaseModelOutputWithPast"
#define OUTPUT_LOGITS "transformers.models.smolvlm.modeling_smolvlm.SmolVLMCausalLMOutputWithPast"
#define OUTPUT_VISION "transformers.modeling_outputs.BaseModelOutputWithPooling"

typedef struct svlm {
    svlm_vision vision;
    blk_lm *text;
    char origin[1300];
} svlm;

static const blk_family SMOLVLM_TEXT = {
    .model_type = "llama", .prefix = "Llama", .quirks = blk_llama_biases,
};

static void svlm_free(void *hparams)
{
    svlm *p = hparams;
    if (!p)
        return;
    blk_lm_destroy(p->text);
    free(p);
}

static ferry_status svlm_read(const model_config *cfg, void **out, fy_err *err)
{
    *out = NULL;
    svlm *p = calloc(1, sizeof *p);
    if (!p)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    snprintf(p->origin, sizeof p->origin, "%s", cfg->text_origin);
    char *paren = strstr(p->origin, " (text_config)");
    if (paren)
        *paren = '\0';
    void *text = NULL;
    if (blk_lm_read(cfg, &SMOLVLM_TEXT, &text, err) != FERRY_OK) {
        svlm_free(p);
        return err->status;
    }
    p->text = text;
    bool tie;
    if (svlm_vision_read(cfg->raw, p->origin, p->text->hidden, &p->vision, err) != FERRY_OK ||
        json_get_bool(cfg->raw, "tie_word_embeddings", false, p->text->tie_embeddings,
                      p->origin, &tie, err) != FERRY_OK) {
        svlm_free(p);
        return err->status;
    }
    p->text->tie_embeddings = tie;
    *out = p;
    return FERRY_OK;
}

/* transformers 5's save_pretrained (and the hub's SmolVLM files) keep the text model under
 * model.text_model., the tower under model.vision_model., the connector under model.connector. */
static const ckpt_layout SVLM_LAYOUTS[] = {
    {.rules = {{.from = "vision.", .to = "model.vision_model."},
               {.from = "connector.", .to = "model.connector."},
               {.from = "model.", .to = "model.text_model."},
               {.from = "lm_head.", .to = "lm_head."}}},
};

static ferry_status svlm_bind(void *hparams, const ckpt *ck, char *warning, size_t size,
                              fy_err *err)
{
    svlm *p = hparams;
    return blk_lm_bind(p->text, ck, warning, size, err);
}

static ferry_status svlm_plan(const void *hparams, const model_plan_request *rq,
                              model_plan *out, fy_err *err)
{
    (void)hparams;
    const char *arch = rq->arch->architecture;
    if (!rq->gen)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: export it for generation "
                       "(--for-generation; export_for_generation), which writes its "
                       "image_encoder, connector, language_model, lm_head and decode components",
                       arch);
    if (rq->single_graph)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s on %s: the stateful single graph is not "
                       "written for SmolVLM; stateful=False (--disable-stateful) writes its "
                       "components", arch, rq->format);
    vlm_text t;
    if (vlm_plan_text(rq, out, 0, &t, err) != FERRY_OK)
        return err->status;
    /* each component's index is its symbol table's */
    for (int i = 0; i < 5; i++)
        rq->syms[i] = t.prefill_syms;
    rq->syms[5] = t.decode_syms;
    model_io image = {.batch = g_dim_const(1), .sequence = g_dim_const(1), .cache = CACHE_NONE,
                      .dtype = rq->cfg->dtype, .component = "image_encoder"};
    model_io connector = image;
    connector.component = "connector";
    out->comps[0] = (model_component){"image_encoder", "image_encoder", image, OUTPUT_VISION};
    out->comps[1] = (model_component){"connector", "connector", connector, NULL};
    out->comps[2] = (model_component){"embed_tokens", "embed_tokens", t.embed, NULL};
    out->comps[3] = (model_component){"language_model", "language_model", t.language,
                                      OUTPUT_HIDDEN};
    out->comps[4] = (model_component){"lm_head", "lm_head", t.head, NULL};
    out->comps[5] = (model_component){"decode", "decode", t.decode, OUTPUT_LOGITS};
    out->n = 6;
    return FERRY_OK;
}

static ferry_status svlm_build(const void *hparams, ckpt *ck, const model_io *io, g_graph *g,
                               fy_err *err)
{
    const svlm *p = hparams;
    if (io->component && strcmp(io->component, "image_encoder") == 0)
        return svlm_vision_build(&p->vision, ck, io, g, err);
    if (io->component && strcmp(io->component, "connector") == 0)
        return svlm_connector_build(&p->vision, ck, io, g, err);
    return blk_lm_build(p->text, ck, io, g, err);
}

static const model_input SVLM_INPUTS[] = {
    {"input_ids", 2, {"batch", "sequence"}},
    {"attention_mask", 2, {"batch", "sequence"}},
    {"pixel_values", 1, {"images"}},
};

const model_arch model_smolvlm = {
    .architecture = "SmolVLMForConditionalGeneration", .model_type = "smolvlm",
    .kind = MODEL_CAUSAL_LM, .output_class = OUTPUT_LOGITS, .read = svlm_read,
    .free_hparams = svlm_free, .bind = svlm_bind, .plan = svlm_plan, .build = svlm_build,
    .inputs = SVLM_INPUTS, .n_inputs = sizeof SVLM_INPUTS / sizeof SVLM_INPUTS[0],
    .axes = svlm_axes, .n_axes = SVLM_N_AXES, .generation = true, .layouts = SVLM_LAYOUTS,
    .n_layouts = sizeof SVLM_LAYOUTS / sizeof SVLM_LAYOUTS[0],
};
