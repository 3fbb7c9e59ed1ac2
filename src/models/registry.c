/* registry.c — the architecture name -> family table; adding a family is its file plus one line
 * here (in both lists below: the X-macro keeps them one). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "models/model.h"

#define FAMILIES(X)                                                                        \
    X(model_llama) X(model_mistral) X(model_qwen2) X(model_qwen3) X(model_gemma)             \
    X(model_smollm3) X(model_granite) X(model_gemma2) X(model_gemma3) X(model_olmo2)         \
    X(model_phi3) X(model_gpt2) X(model_gemma3_conditional) X(model_qwen3_moe)               \
    X(model_qwen2_moe) X(model_mixtral) X(model_qwen2_vl) X(model_qwen2_5_vl) X(model_smolvlm) \
    X(model_bert) X(model_bert_classifier) X(model_roberta) X(model_roberta_classifier)      \
    X(model_xlm_roberta) X(model_distilbert) X(model_whisper)    \
    X(model_t5)

#define DECLARE(name) extern const model_arch name;
FAMILIES(DECLARE)
#undef DECLARE

static const model_arch *const TABLE[] = {
#define ENTRY(name) &name,
    FAMILIES(ENTRY)
#undef ENTRY
};
#define N_FAMILIES (sizeof TABLE / sizeof TABLE[0])

const model_axis model_token_axes[2] = {{"batch", 1}, {"sequence", 8}};

g_dim model_plan_axis(const model_plan_request *rq, const char *name)
{
    for (int k = 0; k < rq->n_axes; k++)
        if (strcmp(rq->axis_names[k], name) == 0)
            return rq->axes[k];
    return g_dim_const(1);
}

ferry_status model_plan_plain(const void *hparams, const model_plan_request *rq, model_plan *out,
                              fy_err *err)
{
    (void)hparams;
    const model_arch *arch = rq->arch;
    if (rq->gen)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s is %s: it has no generation components "
                       "(no KV cache, nothing generated); export it without for_generation "
                       "(--for-generation)", arch->architecture,
                       arch->kind == MODEL_ENCODER ? "an encoder" : "exported as one graph");
    model_component *c = &out->comps[0];
    *c = (model_component){.name = "model", .role = "model", .output_class = arch->output_class};
    c->io = (model_io){.batch = model_plan_axis(rq, "batch"),
                       .sequence = model_plan_axis(rq, "sequence"), .cache = CACHE_NONE,
                       .dtype = rq->cfg->dtype, .takes = rq->takes};
    out->n = 1;
    return FERRY_OK;
}

const model_arch *model_find(const char *architecture)
{
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (strcmp(TABLE[i]->architecture, architecture) == 0)
            return TABLE[i];
    return NULL;
}

static char supported[N_FAMILIES * 64];
static pthread_once_t supported_once = PTHREAD_ONCE_INIT;

static void list_supported(void)
{
    size_t len = 0;
    for (size_t i = 0; i < N_FAMILIES && len < sizeof supported; i++)
        len += (size_t)snprintf(supported + len, sizeof supported - len, "%s%s", i ? ", " : "",
                                TABLE[i]->architecture);
}

const char *model_supported_list(void)
{
    pthread_once(&supported_once, list_supported);
    return supported;
}
