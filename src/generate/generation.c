/* generation.c — the prefill / decode plan for each cache kind, as the guide describes it, and
 * a decoder family's plan of its components. */
#include <string.h>

#include "generate/generation.h"

void ferry_generation_config_init(ferry_generation_config *gen)
{
    gen->multi_token_decode = FERRY_AUTO;
    gen->static_cache = 0;
    gen->max_cache_len = 0;
}

static int add_sym(g_symtab *t, const char *name, int64_t min, int64_t max, int64_t example,
                   fy_err *err)
{
    int s = g_symtab_add(t, name, min, max, example);
    if (s < 0)
        fy_fail(err, FERRY_ERR_INVALID_ARG, "too many symbols");
    return s;
}

/* The least value of `d` (a constant, or one symbol); 1 when it is not that simple. */
static int64_t dim_min(g_dim d, const g_symtab *syms)
{
    int64_t c;
    if (g_dim_is_const(d, &c))
        return c;
    if (d.n == 1 && d.t[0].coef == 1 && !d.unknown)
        return d.c + syms->s[d.t[0].sym].min;
    return 1;
}

ferry_generation_config gen_resolve(const ferry_generation_config *gen, g_dim sequence,
                                    const g_symtab *syms)
{
    ferry_generation_config g = *gen;
    /* a decode that also takes single tokens: not when the sequence's dim starts above 1 */
    if (g.multi_token_decode < 0)
        g.multi_token_decode = !g.static_cache && !g_dim_is_const(sequence, NULL) &&
                               dim_min(sequence, syms) <= 1;
    else
        g.multi_token_decode = g.multi_token_decode != 0;
    return g;
}

ferry_status gen_plan(const ferry_export_config *cfg, const ferry_generation_config *gen,
                      const char *single, g_dim batch, g_dim sequence, g_symtab *syms,
                      gen_component *out, int *n, fy_err *err)
{
    *n = 0;
    /* `single` is a stateful format's; stateful=False gives it the components below instead */
    if (single && gen->static_cache)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s: a static cache (--static-cache) is not "
                       "supported by a stateful model, which keeps a growing cache; "
                       "stateful=False (--disable-stateful) exports it as explicit inputs and "
                       "outputs", single);
    /* A symbolic sequence axis (--dynamic, or a --dim on it) makes the cache grow: decode's
     * past length is then a symbol of its own. */
    bool growing = !g_dim_is_const(sequence, NULL);
    if (single && !growing)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s runs generation as one graph whose cache "
                       "grows from call to call: it needs dynamic shapes on the sequence axis "
                       "(dynamic=true / --dynamic, or a dim on it), or stateful=False "
                       "(--disable-stateful) for prefill and decode components", single);
    int64_t least = dim_min(sequence, &syms[0]);
    if ((single || gen->multi_token_decode > 0) && growing && least > 1)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s takes the prompt, then 1 token a call, "
                       "but the sequence axis starts at %lld: give its dim min 1 (--dim "
                       "input_ids:1=NAME:1:MAX)%s", single ? "the stateful graph" :
                       "a multi-token decode", (long long)least,
                       single ? "" : ", or take a prefill/decode pair (--single-token-decode)");
    if (single && !gen->multi_token_decode)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s runs generation as one graph that takes "
                       "the prompt and each new token: it needs a multi-token decode (dynamic "
                       "shapes, and not --single-token-decode), or stateful=False "
                       "(--disable-stateful) for prefill and decode components", single);
    if (gen->multi_token_decode > 0 && !growing)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "multi_token_decode needs dynamic shapes "
                       "(dynamic=true / --dynamic, or a symbolic sequence axis): a static export "
                       "would freeze the query length at the example's length");
    /* the prompt traced: the example, moved into the sequence dim's range */
    int64_t prompt = cfg->example_sequence;
    if (!g_dim_example(sequence, &syms[0], &prompt))
        prompt = cfg->example_sequence;
    if (gen->static_cache) {
        if (gen->max_cache_len <= 0)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "a static cache needs max_cache_len "
                           "(max_cache_len / --max-cache-len N)");
        if (gen->max_cache_len < prompt)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "max_cache_len %lld is smaller than the "
                           "example prompt (%lld tokens): the prompt would not fit in the cache",
                           (long long)gen->max_cache_len, (long long)prompt);
        if (!growing && gen->max_cache_len == prompt)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "max_cache_len %lld: the prompt of a "
                           "static-shape export (%lld token%s, the example's) would fill the "
                           "cache, leaving no slot for a decoded token; give a larger "
                           "max_cache_len%s, or dynamic shapes", (long long)gen->max_cache_len,
                           (long long)prompt, prompt == 1 ? "" : "s",
                           prompt > 1 ? ", a shorter example shape" : "");
        /* A cache of a fixed max_cache_len slots holds no longer prompt: the sequence axis
         * stops there (a dynamic export's cache length is a symbol, sized by the caller). */
        if (growing && !cfg->dynamic && sequence.n == 1 && sequence.c == 0 &&
            sequence.t[0].coef == 1) {
            int k = sequence.t[0].sym;
            const g_sym *s = &syms[0].s[k];
            for (int i = 0; i < cfg->n_dims; i++)
                if (strcmp(cfg->dims[i].symbol, s->name) == 0 && cfg->dims[i].max > 0 &&
                    cfg->dims[i].max > gen->max_cache_len)
                    return fy_fail(err, FERRY_ERR_INVALID_ARG, "dynamic dim %s:%d: max %lld is "
                                   "past max_cache_len %lld: a longer prompt does not fit the "
                                   "static cache (give a max up to it, or a longer cache)",
                                   cfg->dims[i].input, cfg->dims[i].axis,
                                   (long long)cfg->dims[i].max, (long long)gen->max_cache_len);
            if (s->max == 0 || s->max > gen->max_cache_len)
                for (int i = 0; i < MODEL_MAX_COMPONENTS; i++)
                    syms[i].s[k].max = gen->max_cache_len;
        }
    } else if (gen->max_cache_len != 0) {
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "max_cache_len is only meaningful with a "
                       "static cache (--static-cache)");
    }
    bool one_graph = (single != NULL || gen->static_cache) && gen->multi_token_decode;
    int count = one_graph ? 1 : 2;
    for (int i = 0; i < count; i++) {
        gen_component *c = &out[i];
        *c = (gen_component){0}; /* what a plan does not set (parts, position rows) is 0 */
        bool is_decode = one_graph || i == 1;
        c->name = is_decode ? "decode" : "prefill";
        c->role = c->name;
        c->io.batch = batch;
        c->io.sequence = is_decode && !gen->multi_token_decode ? g_dim_const(1) : sequence;
        c->io.dtype = cfg->dtype;
        c->io.takes = FERRY_INPUT_IDS | FERRY_INPUT_ATTENTION_MASK | FERRY_INPUT_POSITION_IDS;
        if (gen->static_cache) {
            c->io.cache = CACHE_STATIC;
            if (cfg->dynamic) {
                int s = add_sym(&syms[i], "max_cache_len", 1, 0, gen->max_cache_len, err);
                if (s < 0)
                    return err->status;
                c->io.cache_len = g_dim_sym(s);
            } else {
                c->io.cache_len = g_dim_const(gen->max_cache_len);
            }
        } else {
            c->io.cache = CACHE_DYNAMIC;
            c->io.past = g_dim_const(0);
            if (is_decode) {
                if (growing) {
                    int s = add_sym(&syms[i], "past_sequence", 0, 0, prompt, err);
                    if (s < 0)
                        return err->status;
                    c->io.past = g_dim_sym(s);
                } else {
                    c->io.past = g_dim_const(prompt);
                }
            }
        }
    }
    *n = count;
    return FERRY_OK;
}

ferry_status gen_check_cache_form(const model_plan_request *rq, fy_err *err)
{
    /* (a static cache where the format keeps a growing one, OpenVINO's stateful graph, is
     * refused with the format's own advice when the options are checked) */
    unsigned grows = 1u << GS_PAIR | 1u << GS_VARIABLE;
    if (!rq->gen->static_cache && !(rq->state_forms & grows))
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: generation exports write their cache in "
                       "place, so they need a static cache (--static-cache --max-cache-len N; "
                       "the recipe's generation_config cache_implementation \"static\"); a "
                       "dynamic cache is not written for %s yet", rq->format, rq->format);
    return FERRY_OK;
}

ferry_status gen_decoder_plan(const void *hparams, const model_plan_request *rq,
                              model_plan *out, fy_err *err)
{
    const model_arch *arch = rq->arch;
    if (!rq->gen)
        return model_plan_plain(hparams, rq, out, err);
    if (!arch->generation)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s: generation export is not supported for "
                       "this architecture yet", arch->architecture);
    /* refused at planning, so that `ferry graph` and describe refuse what export would */
    if (gen_check_cache_form(rq, err) != FERRY_OK)
        return err->status;
    g_dim batch = model_plan_axis(rq, "batch"), sequence = model_plan_axis(rq, "sequence");
    out->gen = gen_resolve(rq->gen, sequence, &rq->syms[0]);
    gen_component plan[MODEL_MAX_COMPONENTS];
    int n = 0;
    if (gen_plan(rq->cfg, &out->gen, rq->single_graph, batch, sequence, rq->syms, plan, &n,
                 err) != FERRY_OK)
        return err->status;
    for (int i = 0; i < n; i++)
        out->comps[i] = (model_component){.name = plan[i].name, .role = plan[i].role,
                                          .io = plan[i].io, .output_class = arch->output_class};
    out->n = n;
    return FERRY_OK;
}
