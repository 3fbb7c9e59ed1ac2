/* qwen2_vl.c — Qwen2VLForConditionalGeneration and Qwen2_5_VLForConditionalGeneration (the
 * same language model and components; the towers differ, qwen2_vl_vision.c): their config
 * (vision_config and the language model's text_config), where their checkpoints keep each
 * part, and their generation components as the guide names them:
 *
 *   image_encoder   pixel_values, image_grid_thw -> last_hidden_state, pooler_output (the image
 *                   features, one row per image token): the vision tower, qwen2_vl_vision.c
 *   embed_tokens    input_ids -> inputs_embeds: the text model's embedding, which no
 *                   component of transformers' holds, for a pipeline that runs without torch
 *   language_model  inputs_embeds, attention_mask, position_ids [4, b, s] -> last_hidden_state
 *                   and the cache: the text model over the prompt, whose image tokens' rows
 *                   the caller has replaced by the image features
 *   lm_head         input -> output (the logits)
 *   decode          input_ids, attention_mask, position_ids [4, b, s], the cache -> logits and
 *                   the cache
 *
 * position_ids are transformers' generate()'s: a text row, which nothing reads, then M-RoPE's
 * temporal, height and width rows (get_rope_index).
 *
 * The genai runtimes' layouts: an ONNX export also holds genai_embedding and genai_decoder
 * (onnxruntime-genai's embedding and decoder, see genai_config.c); OpenVINO's stateful export
 * is openvino-genai's VLMPipeline layout instead (plan_genai_layout). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate/generation.h"
#include "models/blocks.h"
#include "models/qwen2.h"
#include "models/qwen2_vl.h"
#include "models/vision_language.h"
#include "util/json.h"

#define OUTPUT_POOLING "transformers.modeling_outputs.BaseModelOutputWithPooling"
#define OUTPUT_HIDDEN "transformers.modeling_outputs.BaseModelOutputWithPast"
#define OUTPUT_LOGITS "transformers.modeling_outputs.MultimodalCausalLMOutputWithPast"

/* transformers' generate() passes four rows of positions */
#define POSITION_ROWS 4

typedef struct qvl {
    qvl_vision vision;
    blk_lm *text;
    int64_t image_token_id, video_token_id, vision_start_token_id;
    int64_t window_size;       /* Qwen2.5-VL's vision_config.window_size, in pixels */
    char origin[1300];
} qvl;

/* A generation's language model and tower. */
typedef struct qvl_generation {
    const char *name; /* in messages: "Qwen2-VL" */
    blk_family text;
    qvl_tower tower;
} qvl_generation;

static const qvl_generation QWEN2_VL = {
    "Qwen2-VL",
    {.model_type = "qwen2_vl", .prefix = "Qwen2VL", .base_model = "TextModel",
     .quirks = qwen2_quirks, .mrope = true},
    QVL_TOWER_QWEN2_VL,
};

static const qvl_generation QWEN2_5_VL = {
    "Qwen2.5-VL",
    {.model_type = "qwen2_5_vl", .prefix = "Qwen2_5_VL", .base_model = "TextModel",
     .quirks = qwen2_quirks, .mrope = true},
    QVL_TOWER_QWEN2_5_VL,
};

static void qvl_free(void *hparams)
{
    qvl *p = hparams;
    if (!p)
        return;
    blk_lm_destroy(p->text);
    free(p);
}

static ferry_status qvl_read(const qvl_generation *gen, const model_config *cfg, void **out,
                             fy_err *err)
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
    void *text = NULL;
    if (qvl_vision_read(cfg->raw, p->origin, gen->tower, &p->vision, err) != FERRY_OK ||
        blk_lm_read(cfg, &gen->text, &text, err) != FERRY_OK) {
        qvl_free(p);
        return err->status;
    }
    p->text = text;
    if (p->text->rope[0].rope.layout != ROPE_MROPE) {
        fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: %s's language model rotates by three "
                "position rows: its rope parameters need type 'default' (or 'mrope') with an "
                "'mrope_section' (they have type '%s'%s)", cfg->text_origin, gen->name,
                p->text->rope[0].rope.type_name[0] ? p->text->rope[0].rope.type_name : "default",
                p->text->rope[0].rope.type == ROPE_DEFAULT ? " and no mrope_section" : "");
        qvl_free(p);
        return err->status;
    }
    /* the special tokens the runtimes place images by (Qwen2VLConfig's defaults) */
    if (json_get_int(cfg->raw, "image_token_id", false, 151655, 0, p->text->vocab - 1,
                     p->origin, &p->image_token_id, err) ||
        json_get_int(cfg->raw, "video_token_id", false, 151656, 0, p->text->vocab - 1,
                     p->origin, &p->video_token_id, err) ||
        json_get_int(cfg->raw, "vision_start_token_id", false, 151652, 0, p->text->vocab - 1,
                     p->origin, &p->vision_start_token_id, err)) {
        qvl_free(p);
        return err->status;
    }
    /* a default past the vocabulary (a checkpoint that leaves the key out) places no image */
    const struct {
        const char *key;
        int64_t id;
    } special[] = {{"image_token_id", p->image_token_id},
                   {"video_token_id", p->video_token_id},
                   {"vision_start_token_id", p->vision_start_token_id}};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        if (special[i].id >= p->text->vocab) {
            fy_fail(err, FERRY_ERR_FORMAT, "%s: key '%s' is absent, and %s's default %lld is "
                    "past the vocabulary (vocab_size %lld): give the token's id", p->origin,
                    special[i].key, gen->name, (long long)special[i].id,
                    (long long)p->text->vocab);
            qvl_free(p);
            return err->status;
        }
    p->window_size = p->vision.window * p->vision.merge * p->vision.patch_size;
    /* the conditional model's own key decides the tie, as transformers reads it */
    bool tie;
    if (json_get_bool(cfg->raw, "tie_word_embeddings", false, p->text->tie_embeddings,
                      p->origin, &tie, err) != FERRY_OK) {
        qvl_free(p);
        return err->status;
    }
    p->text->tie_embeddings = tie;
    if (p->vision.out_hidden != p->text->hidden) {
        fy_fail(err, FERRY_ERR_FORMAT, "%s: vision_config.%s %lld (the image features' "
                "width) differs from the language model's hidden_size %lld", p->origin,
                gen->tower == QVL_TOWER_QWEN2_5_VL ? "out_hidden_size" : "hidden_size",
                (long long)p->vision.out_hidden, (long long)p->text->hidden);
        qvl_free(p);
        return err->status;
    }
    *out = p;
    return FERRY_OK;
}

static ferry_status qwen2_vl_read(const model_config *cfg, void **out, fy_err *err)
{
    return qvl_read(&QWEN2_VL, cfg, out, err);
}

static ferry_status qwen2_5_vl_read(const model_config *cfg, void **out, fy_err *err)
{
    return qvl_read(&QWEN2_5_VL, cfg, out, err);
}

/* How their checkpoints name the tower and the language model: the hub's files and
 * transformers 5's save_pretrained write "visual.", "model.layers." and "lm_head.";
 * transformers 4.52-4.57 wrote "model.visual." and "model.language_model.". Read under the
 * first's names. */
static const ckpt_layout QVL_LAYOUTS[] = {
    {.rules = {{.from = "visual.", .to = "visual."}, {.from = "model.", .to = "model."},
               {.from = "lm_head.", .to = "lm_head."}}},
    {.rules = {{.from = "visual.", .to = "model.visual."},
               {.from = "model.", .to = "model.language_model."},
               {.from = "lm_head.", .to = "lm_head."}}},
};

static ferry_status qvl_bind(void *hparams, const ckpt *ck, char *warning, size_t size,
                             fy_err *err)
{
    qvl *p = hparams;
    return blk_lm_bind(p->text, ck, warning, size, err);
}

/* The patches an export is traced at (a static one runs only there): whole merged blocks,
 * which is what the image processor gives. */
static ferry_status check_traced_patches(const qvl *p, const model_plan_request *rq,
                                         fy_err *err)
{
    int64_t patches = 0, group = p->vision.merge * p->vision.merge;
    /* ferry's pipelines and onnxruntime-genai call the image encoder one image at a time */
    g_dim images = model_plan_axis(rq, "images");
    int64_t fixed;
    if (g_dim_is_const(images, &fixed) ? fixed != 1
                                       : images.n == 1 && rq->syms[0].s[images.t[0].sym].min > 1)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "image_grid_thw's images axis must take 1: "
                       "the pipelines call the image encoder one image at a time (give its dim "
                       "a range from 1, or no example shape for it)");
    /* a range's max in whole blocks: the tower counts the symbol in them, which would round
     * a max of 50 down to 48 unsaid */
    for (int i = 0; i < rq->cfg->n_dims; i++) {
        const ferry_dim_spec *d = &rq->cfg->dims[i];
        if (strcmp(d->input, "pixel_values") == 0 && d->axis == 0 && d->max > 0 &&
            d->max % group != 0)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "--dim pixel_values: max %lld patches "
                           "is not a whole number of merged blocks (spatial_merge_size^2 = "
                           "%lld), which the image processor always gives: give a max that is "
                           "a multiple of %lld", (long long)d->max, (long long)group,
                           (long long)group);
    }
    if (!g_dim_example(model_plan_axis(rq, "patches"), &rq->syms[0], &patches) ||
        patches % group == 0)
        return FERRY_OK;
    bool given = false;
    for (int i = 0; i < rq->cfg->n_examples; i++)
        given |= strcmp(rq->cfg->examples[i].input, "pixel_values") == 0;
    return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s %lld patches is not a whole number of "
                   "merged blocks (spatial_merge_size^2 = %lld): the image processor gives "
                   "t * h * w patches with h and w multiples of %lld%s",
                   given ? "example shape for 'pixel_values':" : "the default example of",
                   (long long)patches, (long long)group, (long long)p->vision.merge,
                   given ? "" : "; give one with --example-shape pixel_values=N");
}

/* OpenVINO's stateful export, laid out as openvino-genai's VLMPipeline loads it (and as
 * optimum-intel names the files): the patch embedding and the rest of the tower as two
 * graphs, whose positions and masks the pipeline computes; the text embedding; the language
 * model as one stateful graph from inputs_embeds and M-RoPE's three rows to the logits. */
static ferry_status plan_genai_layout(const model_plan_request *rq, model_plan *out,
                                      fy_err *err)
{
    const char *arch = rq->arch->architecture;
    /* the pipeline hands f32 tensors from graph to graph and adds an f32 scale to the text
     * embedding's output */
    if (rq->cfg->dtype != FERRY_F32)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s on %s: openvino-genai's VLMPipeline "
                       "passes f32 tensors between the stateful export's graphs, so it is "
                       "written in fp32; --compress-to-fp16 stores its weights in fp16, or "
                       "--quantize int8|int4 compresses them (--disable-stateful writes %s "
                       "components)", arch, rq->format, ferry_dtype_name(rq->cfg->dtype));
    g_dim batch = model_plan_axis(rq, "batch"), sequence = model_plan_axis(rq, "sequence");
    out->gen = gen_resolve(rq->gen, sequence, &rq->syms[0]);
    gen_component lm[MODEL_MAX_COMPONENTS];
    int n = 0;
    if (gen_plan(rq->cfg, &out->gen, rq->single_graph, batch, sequence, rq->syms, lm, &n,
                 err) != FERRY_OK)
        return err->status;
    if (n != 1)
        return fy_fail(err, FERRY_ERR_INTERNAL, "%s: planned %d stateful graphs", arch, n);
    /* the stateful graph's symbols (table 0) serve every component: each lists its own */
    for (int i = 1; i < 4; i++)
        rq->syms[i] = rq->syms[0];
    model_io language = lm[0].io;
    language.parts = MODEL_PART_BODY | MODEL_PART_HEAD;
    language.position_rows = 3; /* no text row: the pipeline passes M-RoPE's rows alone */
    model_io patches = {.batch = g_dim_const(1), .sequence = g_dim_const(1), .cache = CACHE_NONE,
                        .dtype = rq->cfg->dtype, .component = "vision_embeddings"};
    model_io merger = patches;
    merger.component = "vision_embeddings_merger";
    model_io text = {.batch = batch, .sequence = sequence, .cache = CACHE_NONE,
                     .dtype = rq->cfg->dtype, .parts = MODEL_PART_EMBED};
    /* named (and so given roles) as the files it loads are */
    out->comps[0] = (model_component){"vision_embeddings_model", "vision_embeddings_model",
                                      patches, NULL};
    out->comps[1] = (model_component){"vision_embeddings_merger_model",
                                      "vision_embeddings_merger_model", merger, NULL};
    out->comps[2] = (model_component){"text_embeddings_model", "text_embeddings_model", text,
                                      NULL};
    out->comps[3] = (model_component){"language_model", "language_model", language,
                                      OUTPUT_LOGITS};
    out->n = 4;
    return FERRY_OK;
}

static ferry_status qvl_plan(const void *hparams, const model_plan_request *rq, model_plan *out,
                             fy_err *err)
{
    const char *arch = rq->arch->architecture;
    if (!rq->gen)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: export it for generation "
                       "(--for-generation; export_for_generation), which writes its "
                       "image_encoder, language_model, lm_head and decode components", arch);
    if (check_traced_patches(hparams, rq, err) != FERRY_OK)
        return err->status;
    if (rq->single_graph)
        return plan_genai_layout(rq, out, err);
    vlm_text t;
    if (vlm_plan_text(rq, out, POSITION_ROWS, &t, err) != FERRY_OK)
        return err->status;
    /* each component's index is its symbol table's */
    for (int i = 0; i < 4; i++)
        rq->syms[i] = t.prefill_syms;
    rq->syms[4] = t.decode_syms;
    model_io image = {.batch = g_dim_const(1), .sequence = g_dim_const(1), .cache = CACHE_NONE,
                      .dtype = rq->cfg->dtype, .component = "image_encoder"};
    out->comps[0] = (model_component){"image_encoder", "image_encoder", image, OUTPUT_POOLING};
    out->comps[1] = (model_component){"embed_tokens", "embed_tokens", t.embed, NULL};
    out->comps[2] = (model_component){"language_model", "language_model", t.language,
                                      OUTPUT_HIDDEN};
    out->comps[3] = (model_component){"lm_head", "lm_head", t.head, NULL};
    out->comps[4] = (model_component){"decode", "decode", t.decode, OUTPUT_LOGITS};
    out->n = 5;
    /* onnxruntime-genai's pipeline: image_encoder as its vision model, then an embedding that
     * places the image features itself and one decoder from inputs_embeds and M-RoPE's three
     * rows over the same weights (ONNX's external data holds each tensor once) */
    if (strcmp(rq->format, "onnx") == 0 && !out->gen.static_cache &&
        out->gen.multi_token_decode && !g_dim_is_const(t.batch, NULL) &&
        !g_dim_is_const(t.sequence, NULL) && rq->cfg->dtype != FERRY_BF16) {
        model_io merge = t.embed;
        merge.component = "genai_embedding";
        model_io decoder = t.decode;
        decoder.parts = MODEL_PART_BODY | MODEL_PART_HEAD;
        decoder.position_rows = 3;
        rq->syms[5] = t.prefill_syms;
        rq->syms[6] = t.decode_syms;
        out->comps[5] = (model_component){"genai_embedding", "genai_embedding", merge, NULL};
        out->comps[6] = (model_component){"genai_decoder", "genai_decoder", decoder,
                                          OUTPUT_LOGITS};
        out->n = 7;
    }
    return FERRY_OK;
}

/* onnxruntime-genai's embedding: input_ids [b, s] and image_features [n, hidden] (the image
 * encoder's pooler_output for every image of the prompt, in order; [0, hidden] at decode and
 * for text) -> inputs_embeds, the image tokens' rows replaced by the features in row-major
 * order, as masked_scatter places them. */
static ferry_status build_genai_embedding(const qvl *p, ckpt *ck, const model_io *io,
                                          g_graph *g, fy_err *err)
{
    int ids, hidden = (int)p->text->hidden;
    int embeds = blk_lm_embed(p->text, ck, io, g, &ids, err);
    if (err->status != FERRY_OK)
        return err->status;
    int features = g_input(g, "image_features", io->dtype, 2,
                           (g_dim[]){g_dim_unknown(), g_dim_const(hidden)});
    g_scope(g, "/image_features");
    int is_image = g_binary(g, G_EQUAL, "is_image", ids, g_scalar_i64(g, p->image_token_id));
    int flat = g_reshape_spec(g, "flat", g_cast(g, "count", is_image, FERRY_I64), 1,
                              (int64_t[]){-1});
    /* the k-th image token takes row k of [zeros; features] (1-based), others row 0 */
    int rank = g_binary(g, G_MUL, "rank", g_cumsum(g, "cumsum", flat, 0), flat);
    int zeros = g_expand(g, "zeros", g_scalar_f(g, io->dtype, 0.0),
                         g_const_i64(g, 2, (int64_t[]){1, hidden}));
    int rows[2] = {zeros, features};
    int padded = g_concat(g, "padded", 2, rows, 0);
    int placed = g_gather(g, "placed", padded, rank, 0);
    placed = g_reshape(g, "placed_rows", placed, 3,
                       (g_dim[]){io->batch, io->sequence, g_dim_const(hidden)});
    int merged = g_where(g, "merged", g_unsqueeze(g, "is_image_rows", is_image, 1,
                                                  (int64_t[]){2}),
                         placed, embeds);
    g->scope[0] = '\0';
    g_output(g, merged, "inputs_embeds");
    if (!g_ok(g))
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    return FERRY_OK;
}

static void qvl_describe(const void *hparams, model_hparams *out)
{
    const qvl *p = hparams;
    blk_lm_describe(p->text, out);
    /* Qwen2-VL's language model, prompt layout and M-RoPE are Qwen2.5-VL's: genai has one
     * type for both, and its vision model is the export's own graph */
    out->genai_type = "qwen2_5_vl";
    out->image_token_id = p->image_token_id;
    out->video_token_id = p->video_token_id;
    out->vision_start_token_id = p->vision_start_token_id;
    out->spatial_merge_size = p->vision.merge;
    out->patch_size = p->vision.patch_size;
    out->temporal_patch_size = p->vision.temporal_patch_size;
    out->window_size = p->window_size;
}

static ferry_status qvl_build(const void *hparams, ckpt *ck, const model_io *io, g_graph *g,
                              fy_err *err)
{
    const qvl *p = hparams;
    if (io->component && strcmp(io->component, "genai_embedding") == 0)
        return build_genai_embedding(p, ck, io, g, err);
    if (io->component && strcmp(io->component, "image_encoder") == 0)
        return qvl_vision_build(&p->vision, ck, io, g, err);
    if (io->component && strcmp(io->component, "vision_embeddings") == 0)
        return qvl_patch_embed_build(&p->vision, ck, io, g, err);
    if (io->component && strcmp(io->component, "vision_embeddings_merger") == 0)
        return qvl_merger_build(&p->vision, ck, io, g, err);
    return blk_lm_build(p->text, ck, io, g, err);
}

static const model_input QVL_INPUTS[] = {
    {"input_ids", 2, {"batch", "sequence"}},
    {"attention_mask", 2, {"batch", "sequence"}},
    {"pixel_values", 1, {"patches"}},
    {"image_grid_thw", 1, {"images"}},
};

#define QVL_ARCH(arch_name, type, reader)                                                   \
    {.architecture = arch_name, .model_type = type, .kind = MODEL_CAUSAL_LM,                   \
     .output_class = OUTPUT_LOGITS, .read = reader, .free_hparams = qvl_free,                  \
     .bind = qvl_bind, .plan = qvl_plan, .build = qvl_build, .inputs = QVL_INPUTS,             \
     .n_inputs = sizeof QVL_INPUTS / sizeof QVL_INPUTS[0], .axes = qvl_axes,                   \
     .n_axes = QVL_N_AXES, .generation = true, .layouts = QVL_LAYOUTS,                         \
     .n_layouts = sizeof QVL_LAYOUTS / sizeof QVL_LAYOUTS[0], .describe = qvl_describe}

const model_arch model_qwen2_vl =
    QVL_ARCH("Qwen2VLForConditionalGeneration", "qwen2_vl", qwen2_vl_read);
const model_arch model_qwen2_5_vl =
    QVL_ARCH("Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", qwen2_5_vl_read);
