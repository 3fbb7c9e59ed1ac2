/* moe_block.c — the sparse block of a mixture-of-experts decoder (Qwen2-MoE, Qwen3-MoE,
 * Mixtral), as transformers' SparseMoeBlock computes it: the router's logits, the moe node
 * (routing and experts, ir/ops.def), and Qwen2-MoE's shared expert scaled by the sigmoid of
 * its own gate. Which layers are sparse and what routes in them comes from config.json
 * (blk_moe_read); the experts' weights are stacked from one tensor per expert, as checkpoints
 * store them, or read as the stacks transformers 5 holds in memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/blocks.h"
#include "util/json.h"

const blk_names blk_qwen_moe_names = {
    BLK_LLAMA_ATTENTION_NAMES,
    .gate = "model.layers.%d.mlp.gate_proj.weight",
    .up = "model.layers.%d.mlp.up_proj.weight",
    .down = "model.layers.%d.mlp.down_proj.weight",
    .router = "model.layers.%d.mlp.gate.weight",
    .expert_gate = "model.layers.%d.mlp.experts.%d.gate_proj.weight",
    .expert_up = "model.layers.%d.mlp.experts.%d.up_proj.weight",
    .expert_down = "model.layers.%d.mlp.experts.%d.down_proj.weight",
    .shared_gate = "model.layers.%d.mlp.shared_expert.gate_proj.weight",
    .shared_up = "model.layers.%d.mlp.shared_expert.up_proj.weight",
    .shared_down = "model.layers.%d.mlp.shared_expert.down_proj.weight",
    .shared_expert_gate = "model.layers.%d.mlp.shared_expert_gate.weight",
};

bool blk_is_sparse(const blk_lm *lm, int64_t l)
{
    return lm->moe.sparse && l >= 0 && l < lm->n_layers && lm->moe.sparse[l];
}

/* Layer l's experts as one stack named `name` ("model.layers.%d.mlp.experts.gate_up_proj",
 * transformers 5's own parameter): the checkpoint's stack of that name [E, d0, d1] if it
 * holds one, else the tensors `each` (formats taking the layer, then the expert; with two,
 * each expert's pair joined along its rows: gate then up), each [d0 / n_each, d1]. */
static int expert_stack(g_graph *g, ckpt *ck, const char *name, const char *const *each,
                        int n_each, int l, int64_t n_experts, int64_t d0, int64_t d1,
                        ferry_dtype dt, fy_err *err)
{
    char key[256], full[512];
    int64_t dims[3] = {n_experts, d0, d1};
    snprintf(key, sizeof key, name, l);
    const st_tensor *t = ckpt_take(ck, key);
    if (t) {
        if (!ckpt_full_name(ck, key, full, sizeof full))
            snprintf(full, sizeof full, "%s", key);
        if (blk_check_shape(t, full, 3, dims, err) != FERRY_OK)
            return G_NONE;
        g_weight w = w_plain(t, dt);
        int v = g_weight_value(g, key, &w);
        if (v == G_NONE)
            fy_fail(err, g->err.status, "%s", g->err.msg);
        return v;
    }
    int n = (int)n_experts * n_each;
    const st_tensor **list = malloc((size_t)n * sizeof *list);
    if (!list) {
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        return G_NONE;
    }
    dims[1] = d0 / n_each;
    for (int k = 0; k < n; k++) {
        char each_key[256];
        snprintf(each_key, sizeof each_key, each[k % n_each], l, k / n_each);
        list[k] = ckpt_take(ck, each_key);
        if (!ckpt_full_name(ck, each_key, full, sizeof full))
            snprintf(full, sizeof full, "%s", each_key);
        if (!list[k]) {
            free(list);
            fy_fail(err, FERRY_ERR_FORMAT, "checkpoint %s: required tensor '%s' is missing "
                    "(config.json gives %lld experts)", ck->dir, full, (long long)n_experts);
            return G_NONE;
        }
        if (blk_check_shape(list[k], full, 2, dims + 1, err) != FERRY_OK) {
            free(list);
            return G_NONE;
        }
    }
    g_weight w = w_join(list, n, true, dt);
    w.stack_group = n_each;
    int v = g_weight_value(g, key, &w);
    free(list);
    if (v == G_NONE)
        fy_fail(err, g->err.status, "%s", g->err.msg);
    return v;
}

ferry_status blk_bind_experts(g_graph *g, ckpt *ck, const blk_lm *lm, int l, ferry_dtype dt,
                              blk_layer *w, fy_err *err)
{
    const blk_names *n = lm->names;
    const blk_moe *m = &lm->moe;
    int64_t h = lm->hidden, ff = m->expert_ff, e = m->opts.num_experts;
    /* named as transformers 5 holds it in memory (Mixtral's router included, which
     * checkpoints keep under block_sparse_moe, or under that name where a checkpoint was
     * saved from memory as it is) */
    static const char *const memory_name = "model.layers.%d.mlp.gate.weight";
    char key[256];
    snprintf(key, sizeof key, n->router, l);
    const char *stored = ckpt_find(ck, key) ? n->router : memory_name;
    w->router = blk_weight_named(g, ck, stored, memory_name, l, e, h, dt, err);
    if (err->status != FERRY_OK)
        return err->status;
    const char *gate_up[2] = {n->expert_gate, n->expert_up};
    w->ex_gate_up = expert_stack(g, ck, "model.layers.%d.mlp.experts.gate_up_proj", gate_up, 2,
                                 l, e, 2 * ff, h, dt, err);
    if (err->status == FERRY_OK)
        w->ex_down = expert_stack(g, ck, "model.layers.%d.mlp.experts.down_proj",
                                  &n->expert_down, 1, l, e, h, ff, dt, err);
    if (err->status != FERRY_OK || !m->shared_ff)
        return err->status;
    int64_t sff = m->shared_ff;
    w->sh_gate = blk_weight(g, ck, n->shared_gate, l, true, sff, h, dt, err);
    if (err->status == FERRY_OK)
        w->sh_up = blk_weight(g, ck, n->shared_up, l, true, sff, h, dt, err);
    if (err->status == FERRY_OK)
        w->sh_down = blk_weight(g, ck, n->shared_down, l, true, h, sff, dt, err);
    if (err->status == FERRY_OK)
        w->sh_expert_gate = blk_weight(g, ck, n->shared_expert_gate, l, true, 1, h, dt, err);
    return err->status;
}

int blk_moe_block(g_graph *g, const blk_lm *lm, const blk_layer *w, int l, int x)
{
    char cls[256], scope[96];
    blk_class(lm, "SparseMoeBlock", cls, sizeof cls);
    g_module_add(g, cls, G_OP_COUNT, false, GM_ROLE_NONE, "/model/layers.%d/mlp", l);
    /* the router's forward is its linear; softmax and top-k are the moe node's */
    blk_class(lm, "TopKRouter", cls, sizeof cls);
    g_module_add(g, cls, G_LINEAR, false, GM_ROLE_ROUTER, "/model/layers.%d/mlp/gate", l);
    blk_class(lm, "Experts", cls, sizeof cls);
    g_module_add(g, cls, G_OP_COUNT, false, GM_ROLE_EXPERT, "/model/layers.%d/mlp/experts", l);
    g_module_add(g, lm->act_class, lm->act, false, GM_ROLE_NONE,
                 "/model/layers.%d/mlp/experts/act_fn", l);
    g_scope(g, "/model/layers.%d/mlp", l);
    int logits = g_linear(g, "gate", x, w->router, G_NONE);
    g_moe_opts o = lm->moe.opts;
    o.act = lm->act;
    int out = g_moe(g, "experts", x, logits, w->ex_gate_up, w->ex_down, w->ex_up, &o);
    if (!lm->moe.shared_ff)
        return out;
    /* out + sigmoid(shared_expert_gate(x)) * shared_expert(x) */
    snprintf(scope, sizeof scope, "/model/layers.%d/mlp/shared_expert", l);
    int shared = blk_gated_mlp(g, lm, scope, lm->moe.shared_ff, x, G_NONE, w->sh_gate, w->sh_up,
                               w->sh_down, G_NONE, G_NONE, G_NONE);
    /* a gate, kept float like the router */
    g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_ROUTER,
                 "/model/layers.%d/mlp/shared_expert_gate", l);
    g_scope(g, "/model/layers.%d/mlp", l);
    int gate = g_unary(g, G_SIGMOID, "Sigmoid",
                       g_linear(g, "shared_expert_gate", x, w->sh_expert_gate, G_NONE));
    shared = g_binary(g, G_MUL, "Mul", gate, shared);
    return g_binary(g, G_ADD, "Add", out, shared);
}

/* mlp_only_layers: a list of integers; the layers it names keep the dense MLP (an index that
 * names no layer is ignored, as transformers' `layer_idx not in mlp_only_layers` does). */
static ferry_status read_dense_layers(const model_config *cfg, bool *sparse, int64_t n_layers,
                                      fy_err *err)
{
    const cJSON *list;
    if (json_get_member(cfg->text, "mlp_only_layers", false, cfg->text_origin, &list, err))
        return err->status;
    if (!list)
        return FERRY_OK;
    if (!cJSON_IsArray(list))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'mlp_only_layers' must be a list of "
                       "layer numbers", cfg->text_origin);
    const cJSON *item;
    cJSON_ArrayForEach(item, list) {
        double v = item->valuedouble;
        /* integral and exactly representable, as json_get_int takes integers */
        if (!cJSON_IsNumber(item) || !(v > -9007199254740992.0 && v < 9007199254740992.0) ||
            v != (double)(int64_t)v)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'mlp_only_layers' must be a list of "
                           "layer numbers (integers)", cfg->text_origin);
        if (v >= 0 && v < (double)n_layers)
            sparse[(int64_t)v] = false;
    }
    return FERRY_OK;
}

/* The most experts a layer may have: a recipe stacks at most W_MAX_SOURCES tensors, and
 * gate_up stacks two per expert (real mixtures have up to 256). */
#define MOE_MAX_EXPERTS (W_MAX_SOURCES / 2)

/* The experts' count under its name or its alias; both given must agree (which one
 * transformers keeps would depend on the order it sets them). */
static ferry_status read_experts(const model_config *cfg, const blk_moe_keys *keys,
                                 int64_t *experts, fy_err *err)
{
    const char *o = cfg->text_origin;
    int64_t alias = -1;
    if (json_get_int(cfg->text, keys->experts, false, -1, 0, MOE_MAX_EXPERTS, o, experts,
                     err) ||
        (keys->experts_alias && json_get_int(cfg->text, keys->experts_alias, false, -1, 0,
                                             MOE_MAX_EXPERTS, o, &alias, err)))
        return err->status;
    if (*experts >= 0 && alias >= 0 && *experts != alias)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: keys '%s' (%lld) and '%s' (%lld) name the "
                       "experts' count twice and disagree", o, keys->experts,
                       (long long)*experts, keys->experts_alias, (long long)alias);
    if (*experts < 0)
        *experts = alias >= 0 ? alias : keys->experts_default;
    return FERRY_OK;
}

ferry_status blk_moe_read(const model_config *cfg, const blk_moe_keys *keys, blk_lm *lm,
                          fy_err *err)
{
    const char *o = cfg->text_origin;
    blk_moe *m = &lm->moe;
    int64_t experts, top_k, step = 1;
    if (read_experts(cfg, keys, &experts, err) ||
        json_get_int(cfg->text, "num_experts_per_tok", true, 0, 1, MOE_MAX_EXPERTS, o, &top_k,
                     err))
        return err->status;
    if (keys->routed_layers &&
        json_get_int(cfg->text, "decoder_sparse_step", true, 1, 1, INT64_C(1) << 40, o, &step,
                     err))
        return err->status;
    m->expert_ff = lm->intermediate;
    if (keys->expert_ff && json_get_int(cfg->text, keys->expert_ff, true, 0, 1,
                                        LM_MAX_INTERMEDIATE, o, &m->expert_ff, err))
        return err->status;
    if (keys->shared_ff && json_get_int(cfg->text, keys->shared_ff, true, 0, 1,
                                        LM_MAX_INTERMEDIATE, o, &m->shared_ff, err))
        return err->status;
    bool norm = true;
    if (keys->norm_key && json_get_bool(cfg->text, "norm_topk_prob", true, false, o, &norm, err))
        return err->status;
    if (experts == 0) { /* transformers: every layer keeps the dense MLP */
        if (!keys->routed_layers)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: key '%s' is 0: a mixture needs experts",
                           o, keys->experts);
        return FERRY_OK;
    }
    if (top_k > experts)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key 'num_experts_per_tok' is %lld, more than "
                       "the %lld experts ('%s')", o, (long long)top_k, (long long)experts,
                       keys->experts);
    m->opts = (g_moe_opts){.num_experts = experts, .top_k = top_k, .norm_topk_prob = norm,
                           .scale_f32 = keys->scale_f32, .act = lm->act};
    m->sparse = calloc((size_t)lm->n_layers, sizeof *m->sparse);
    if (!m->sparse)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    for (int64_t l = 0; l < lm->n_layers; l++)
        m->sparse[l] = (l + 1) % step == 0;
    if (keys->routed_layers && read_dense_layers(cfg, m->sparse, lm->n_layers, err))
        return err->status;
    return FERRY_OK;
}
