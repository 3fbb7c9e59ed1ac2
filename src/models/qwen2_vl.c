/* qwen2_vl.c — Qwen2VLForConditionalGeneration: its config (vision_config and the language
 * model's text_config), where its checkpoint keeps each part, and its generation components
 * as the guide names them. The vision tower is qwen2_vl_vision.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/blocks.h"
#include "models/qwen2_vl.h"
#include "util/json.h"

#define OUTPUT_POOLING "transformers.modeling_outputs.BaseModelOutputWithPooling"

typedef struct qvl {
    qvl_vision vision;
    char origin[1300];
} qvl;

static void qvl_free(void *p)
{
    free(p);
}

static ferry_status qvl_read(const model_config *cfg, void **out, fy_err *err)
{
    *out = NULL;
    qvl *p = calloc(1, sizeof *p);
    if (!p)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    /* text_origin names the text config ("<path> (text_config)"): the file alone for
     * vision_config */
    snprintf(p->origin, sizeof p->origin, "%s", cfg->text_origin);
    char *paren = strstr(p->origin, " (text_config)");
    if (paren)
        *paren = '\0';
    if (qvl_vision_read(cfg->raw, p->origin, &p->vision, err) != FERRY_OK) {
        free(p);
        return err->status;
    }
    *out = p;
    return FERRY_OK;
}

/* Where the checkpoint keeps the tower: save_pretrained writes "visual." (the hub's layout);
 * transformers 4.52-4.57 wrote "model.visual.". */
static ferry_status qvl_bind(void *hparams, const ckpt *ck, char *warning, size_t size,
                             fy_err *err)
{
    qvl *p = hparams;
    if (size > 0)
        warning[0] = '\0';
    static const char *const prefixes[] = {"visual.", "model.visual."};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "%spatch_embed.proj.weight", prefixes[i]);
        if (ckpt_find(ck, name)) {
            snprintf(p->vision.prefix, sizeof p->vision.prefix, "%s", prefixes[i]);
            return FERRY_OK;
        }
    }
    return fy_fail(err, FERRY_ERR_FORMAT, "checkpoint %s: required tensor "
                   "'visual.patch_embed.proj.weight' is missing (nor is it under "
                   "'model.visual.')", ck->dir);
}

static ferry_status qvl_plan(const void *hparams, const model_plan_request *rq, model_plan *out,
                             fy_err *err)
{
    (void)hparams;
    if (!rq->gen)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: export it for generation "
                       "(--for-generation; export_for_generation), which writes its image "
                       "encoder, language model, lm_head and decode components",
                       rq->arch->architecture);
    model_component *c = &out->comps[0];
    *c = (model_component){.name = "image_encoder", .role = "image_encoder",
                           .output_class = OUTPUT_POOLING};
    c->io = (model_io){.batch = g_dim_const(1), .sequence = g_dim_const(1),
                       .cache = CACHE_NONE, .dtype = rq->cfg->dtype};
    out->gen = *rq->gen;
    out->n = 1;
    return FERRY_OK;
}

static ferry_status qvl_build(const void *hparams, ckpt *ck, const model_io *io, g_graph *g,
                              fy_err *err)
{
    const qvl *p = hparams;
    return qvl_vision_build(&p->vision, ck, io, g, err);
}

static const model_input QVL_INPUTS[] = {
    {"input_ids", 2, {"batch", "sequence"}},
    {"attention_mask", 2, {"batch", "sequence"}},
    {"pixel_values", 1, {"patches"}},
    {"image_grid_thw", 1, {"images"}},
};

const model_arch model_qwen2_vl = {
    .architecture = "Qwen2VLForConditionalGeneration", .model_type = "qwen2_vl",
    .kind = MODEL_CAUSAL_LM, .output_class = OUTPUT_POOLING, .read = qvl_read,
    .free_hparams = qvl_free, .bind = qvl_bind, .plan = qvl_plan, .build = qvl_build,
    .inputs = QVL_INPUTS, .n_inputs = sizeof QVL_INPUTS / sizeof QVL_INPUTS[0],
    .axes = qvl_axes, .n_axes = QVL_N_AXES,
};
