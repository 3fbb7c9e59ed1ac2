/* vision_language.c — the language-model side of a vision-language family's generation plan
 * (vision_language.h). */
#include "models/vision_language.h"

#include "generate/generation.h"

ferry_status vlm_plan_text(const model_plan_request *rq, model_plan *out, int position_rows,
                           vlm_text *t, fy_err *err)
{
    if (gen_check_cache_form(rq, err) != FERRY_OK)
        return err->status;
    t->batch = model_plan_axis(rq, "batch");
    t->sequence = model_plan_axis(rq, "sequence");
    out->gen = gen_resolve(rq->gen, t->sequence, &rq->syms[0]);
    gen_component pair[MODEL_MAX_COMPONENTS];
    int n = 0;
    if (gen_plan(rq->cfg, &out->gen, NULL, t->batch, t->sequence, rq->syms, pair, &n, err) !=
        FERRY_OK)
        return err->status;
    if (n != 1 && n != 2)
        return fy_fail(err, FERRY_ERR_INTERNAL, "%s: planned %d generation graphs",
                       rq->arch->architecture, n);
    /* A static cache with a multi-token decode is one graph for a text model, which the
     * prompt goes through too; here the prompt's embeddings go through the language model,
     * which writes the same cache, and decode takes the tokens after it. gen_plan gave
     * prefill's symbols to table 0 and decode's to the last. */
    t->prefill_syms = rq->syms[0];
    t->decode_syms = rq->syms[n - 1];
    t->language = pair[0].io;
    t->decode = pair[n - 1].io;
    t->language.parts = MODEL_PART_BODY;
    t->decode.parts = MODEL_PARTS_ALL;
    t->language.position_rows = t->decode.position_rows = position_rows;
    t->head = (model_io){.batch = t->batch, .sequence = t->sequence, .cache = CACHE_NONE,
                         .dtype = rq->cfg->dtype, .parts = MODEL_PART_HEAD};
    t->embed = t->head;
    t->embed.parts = MODEL_PART_EMBED;
    return FERRY_OK;
}
