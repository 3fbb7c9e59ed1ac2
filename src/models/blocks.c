/* blocks.c — the blocks decoder families share: checked weight binding by checkpoint name, a
 * layer's weights, the graph inputs of a decoder component, the attention block (projections,
 * q/k norms, rope, cache inputs, outputs and states, attention, output projection) and the
 * gated MLP. The standard decoder LM (decoder_lm.c) is a loop over them; a family of another
 * shape writes its own loop over the same blocks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/blocks.h"

const blk_names blk_llama_names = {
    BLK_LLAMA_ATTENTION_NAMES,
    .pre_ff_norm = "model.layers.%d.pre_feedforward_layernorm.weight",
    .post_ff_norm = "model.layers.%d.post_feedforward_layernorm.weight",
    .gate = "model.layers.%d.mlp.gate_proj.weight",
    .up = "model.layers.%d.mlp.up_proj.weight",
    .down = "model.layers.%d.mlp.down_proj.weight",
    .gate_bias = "model.layers.%d.mlp.gate_proj.bias",
    .up_bias = "model.layers.%d.mlp.up_proj.bias",
    .down_bias = "model.layers.%d.mlp.down_proj.bias",
};

const model_input blk_lm_inputs[3] = {
    {"input_ids", 2, {"batch", "sequence"}},
    {"attention_mask", 2, {"batch", "sequence"}},
    {"position_ids", 2, {"batch", "sequence"}},
};

static int weight(g_graph *g, ckpt *ck, const char *fmt, const char *value_fmt, int layer,
                  bool required, int64_t d0, int64_t d1, bool in_out, ferry_dtype dtype,
                  fy_err *err);

static int nd_weight(g_graph *g, ckpt *ck, const char *name, int rank, const int64_t *dims,
                     bool flatten, ferry_dtype dtype, fy_err *err);

int blk_kernel_matrix(g_graph *g, ckpt *ck, const char *name, int rank, const int64_t *dims,
                      ferry_dtype dtype, fy_err *err)
{
    return nd_weight(g, ck, name, rank, dims, true, dtype, err);
}

int blk_tensor(g_graph *g, ckpt *ck, const char *name, int rank, const int64_t *dims,
               ferry_dtype dtype, fy_err *err)
{
    return nd_weight(g, ck, name, rank, dims, false, dtype, err);
}

static int nd_weight(g_graph *g, ckpt *ck, const char *name, int rank, const int64_t *dims,
                     bool flatten, ferry_dtype dtype, fy_err *err)
{
    const st_tensor *t = ckpt_take(ck, name);
    char full[160];
    if (!ckpt_full_name(ck, name, full, sizeof full))
        snprintf(full, sizeof full, "%s", name);
    if (!t) {
        fy_fail(err, FERRY_ERR_FORMAT, "checkpoint %s: required tensor '%s' is missing", ck->dir,
                full);
        return G_NONE;
    }
    if (blk_check_shape(t, full, rank, dims, err) != FERRY_OK)
        return G_NONE;
    g_weight w = w_plain(t, dtype);
    w.flatten = flatten;
    int out = g_weight_value(g, name, &w);
    if (out == G_NONE && g->err.status != FERRY_OK)
        fy_fail(err, g->err.status, "%s", g->err.msg);
    return out;
}

int blk_weight(g_graph *g, ckpt *ck, const char *fmt, int layer, bool required, int64_t d0,
               int64_t d1, ferry_dtype dtype, fy_err *err)
{
    return weight(g, ck, fmt, NULL, layer, required, d0, d1, false, dtype, err);
}

int blk_weight_named(g_graph *g, ckpt *ck, const char *fmt, const char *value_fmt, int layer,
                     int64_t d0, int64_t d1, ferry_dtype dtype, fy_err *err)
{
    return weight(g, ck, fmt, value_fmt, layer, true, d0, d1, false, dtype, err);
}

ferry_status blk_check_shape(const st_tensor *t, const char *name, int rank, const int64_t *dims,
                             fy_err *err)
{
    bool ok = t->ndim == rank;
    for (int i = 0; ok && i < rank; i++)
        ok = t->shape[i] == dims[i];
    if (ok)
        return FERRY_OK;
    char got[128] = "", want[128] = "";
    size_t len = 0;
    for (int i = 0; i < t->ndim && len < sizeof got - 24; i++)
        len += (size_t)snprintf(got + len, sizeof got - len, "%s%lld", i ? ", " : "",
                                (long long)t->shape[i]);
    len = 0;
    for (int i = 0; i < rank && len < sizeof want - 24; i++)
        len += (size_t)snprintf(want + len, sizeof want - len, "%s%lld", i ? ", " : "",
                                (long long)dims[i]);
    return fy_fail(err, FERRY_ERR_FORMAT, "tensor '%s' in %s has shape [%s] but config.json "
                   "implies [%s]", name, t->file->path, got, want);
}

int blk_conv1d_weight(g_graph *g, ckpt *ck, const char *fmt, int layer, int64_t in, int64_t out,
                      ferry_dtype dtype, fy_err *err)
{
    return weight(g, ck, fmt, NULL, layer, true, in, out, true, dtype, err);
}

static int weight(g_graph *g, ckpt *ck, const char *fmt, const char *value_fmt, int layer,
                  bool required, int64_t d0, int64_t d1, bool in_out, ferry_dtype dtype,
                  fy_err *err)
{
    char name[256], full[512], value_name[256];
    snprintf(name, sizeof name, fmt, layer);
    snprintf(value_name, sizeof value_name, value_fmt ? value_fmt : fmt, layer);
    const st_tensor *t = ckpt_take(ck, name);
    if (!ckpt_full_name(ck, name, full, sizeof full))
        snprintf(full, sizeof full, "%s", name);
    if (!t) {
        if (required)
            fy_fail(err, FERRY_ERR_FORMAT, "checkpoint %s: required tensor '%s' is missing",
                    ck->dir, full);
        return G_NONE;
    }
    int64_t dims[2] = {d0, d1};
    if (blk_check_shape(t, full, d1 > 0 ? 2 : 1, dims, err) != FERRY_OK)
        return G_NONE;
    g_weight w = w_plain(t, dtype);
    w.src_transposed = in_out; /* the logical matrix is [out, in], as a Linear's */
    int v = g_weight_value(g, value_name, &w);
    if (v == G_NONE && g->err.status != FERRY_OK)
        fy_fail(err, g->err.status, "%s", g->err.msg);
    return v;
}

ferry_status blk_bind_layer(g_graph *g, ckpt *ck, const blk_lm *lm, int l, ferry_dtype dt,
                            blk_layer *w, fy_err *err)
{
    const blk_names *n = lm->names;
    int64_t qd = lm->n_heads * lm->head_dim, kvd = lm->n_kv_heads * lm->head_dim;
    int64_t h = lm->hidden, ff = lm->intermediate, hd = lm->head_dim;
#define W(slot, name, required, d0, d1)                                        \
    do {                                                                       \
        w->slot = blk_weight(g, ck, name, l, required, d0, d1, dt, err);       \
        if (err->status != FERRY_OK)                                           \
            return err->status;                                                \
    } while (0)
    w->in_norm = w->pre_ff_norm = w->post_ff_norm = G_NONE;
    if (lm->norms != BLK_POST_NORM)
        W(in_norm, n->in_norm, true, h, 0);
    W(post_norm, n->post_norm, true, h, 0);
    if (lm->norms == BLK_SANDWICH_NORM)
        W(pre_ff_norm, n->pre_ff_norm, true, h, 0);
    if (lm->norms != BLK_PRE_NORM)
        W(post_ff_norm, n->post_ff_norm, true, h, 0);
    w->q = w->k = w->v = w->qkv = w->gate = w->up = w->gate_up = G_NONE;
    if ((n->qkv && lm->qkv_bias) || (n->gate_up && lm->mlp_bias))
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "checkpoint %s: biases on a fused "
                       "projection (%s) are not supported", ck->dir,
                       n->qkv && lm->qkv_bias ? "qkv_proj" : "gate_up_proj");
    if (n->qkv) {
        W(qkv, n->qkv, true, qd + 2 * kvd, h);
    } else {
        W(q, n->q, true, qd, h);
        W(k, n->k, true, kvd, h);
        W(v, n->v, true, kvd, h);
    }
    W(o, n->o, true, h, qd);
    w->q_b = w->k_b = w->v_b = w->o_b = w->q_norm = w->k_norm = G_NONE;
    w->gate_b = w->up_b = w->down_b = G_NONE;
    if (lm->qkv_bias) {
        W(q_b, n->q_bias, true, qd, 0);
        W(k_b, n->k_bias, true, kvd, 0);
        W(v_b, n->v_bias, true, kvd, 0);
    }
    if (lm->o_bias)
        W(o_b, n->o_bias, true, h, 0);
    if (lm->qk_norm) {
        bool whole = lm->qk_norm == BLK_QK_WHOLE;
        W(q_norm, n->q_norm, true, whole ? qd : hd, 0);
        W(k_norm, n->k_norm, true, whole ? kvd : hd, 0);
    }
    w->router = w->ex_gate_up = w->ex_up = w->ex_down = G_NONE;
    w->sh_gate = w->sh_up = w->sh_down = w->sh_expert_gate = G_NONE;
    w->down = G_NONE;
    if (blk_is_sparse(lm, l))
        return blk_bind_experts(g, ck, lm, l, dt, w, err);
    if (n->gate_up) {
        W(gate_up, n->gate_up, true, 2 * ff, h);
    } else {
        W(gate, n->gate, true, ff, h);
        W(up, n->up, true, ff, h);
    }
    W(down, n->down, true, h, ff);
    if (lm->mlp_bias) {
        W(gate_b, n->gate_bias, true, ff, 0);
        W(up_b, n->up_bias, true, ff, 0);
        W(down_b, n->down_bias, true, h, 0);
    }
#undef W
    return FERRY_OK;
}

/* [b, s, heads*d] -> [b, s, heads, d] */
static int split_heads(g_graph *g, const char *name, int x, int64_t heads, int64_t head_dim)
{
    int64_t spec[4] = {0, 0, heads, head_dim};
    return g_reshape_spec(g, name, x, 4, spec);
}

/* The graph input named `name`, made as g_input makes it unless the graph has it already (a
 * family that reads a cache input before its layer, blk_cache_inputs). */
static int cache_input(g_graph *g, const char *name, ferry_dtype dt, int rank, const g_dim *d)
{
    for (size_t i = 0; i < g->n_inputs; i++)
        if (strcmp(g->values[g->inputs[i]].name, name) == 0)
            return g->inputs[i];
    return g_input(g, name, dt, rank, d);
}

void blk_cache_inputs(g_graph *g, const blk_lm *lm, const model_io *io, int l, int *pk, int *pv,
                      int *pos)
{
    char name[96];
    *pk = *pv = *pos = G_NONE;
    g_dim d[4] = {io->batch, g_dim_const(lm->n_kv_heads), io->past, g_dim_const(lm->head_dim)};
    if (io->cache == CACHE_DYNAMIC && (!g_dim_is_const(io->past, NULL) || io->past.c != 0)) {
        snprintf(name, sizeof name, "past_key_values.%d.key", l);
        *pk = cache_input(g, name, io->dtype, 4, d);
        snprintf(name, sizeof name, "past_key_values.%d.value", l);
        *pv = cache_input(g, name, io->dtype, 4, d);
    } else if (io->cache == CACHE_STATIC) {
        g_dim one[1] = {g_dim_const(1)};
        d[2] = io->cache_len;
        snprintf(name, sizeof name, "past_key_values.%d.cumulative_length", l);
        *pos = cache_input(g, name, FERRY_I64, 1, one);
        snprintf(name, sizeof name, "past_key_values.%d.key", l);
        *pk = cache_input(g, name, io->dtype, 4, d);
        snprintf(name, sizeof name, "past_key_values.%d.value", l);
        *pv = cache_input(g, name, io->dtype, 4, d);
    }
}

void blk_cache_outputs(g_graph *g, const model_io *io, int l, int pk, int pv, int pos,
                       int present_k, int present_v, int attn_out)
{
    char name[96], state[96];
    bool in_place = io->cache == CACHE_STATIC;
    snprintf(name, sizeof name, "present.%d.key", l);
    snprintf(state, sizeof state, "past_key_values.%d.key", l);
    g_output(g, present_k, name);
    g_state_add(g, state, GS_KEY, l, pk, present_k, in_place);
    snprintf(name, sizeof name, "present.%d.value", l);
    snprintf(state, sizeof state, "past_key_values.%d.value", l);
    g_output(g, present_v, name);
    g_state_add(g, state, GS_VALUE, l, pv, present_v, in_place);
    if (pos == G_NONE)
        return;
    /* position' = position + s. s is read off the attention output so that the position is
     * written only after every read of the old one: its buffer is shared in place. */
    int64_t zero = 0;
    int first = g_scalar_i64(g, 0);
    int s = g_gather(g, "cache_length/Gather", g_shape_of(g, "cache_length/Shape", attn_out, 1, 2),
                     first, 0);
    int next = g_binary(g, G_ADD, "cache_length/Add", pos,
                        g_unsqueeze(g, "cache_length/Unsqueeze", s, 1, &zero));
    snprintf(name, sizeof name, "present.%d.cumulative_length", l);
    snprintf(state, sizeof state, "past_key_values.%d.cumulative_length", l);
    g_output(g, next, name);
    g_state_add(g, state, GS_LENGTH, l, pos, next, true);
}

void blk_class(const blk_lm *lm, const char *suffix, char *out, size_t size)
{
    const char *t = lm->family->model_type;
    snprintf(out, size, "transformers.models.%s.modeling_%s.%s%s", t, t, lm->family->prefix,
             suffix);
}

/* Declares a torch.nn.Linear at `scope` (printf-style, one layer number). */
static void linear_module(g_graph *g, const char *scope, int l)
{
    char path[128];
    snprintf(path, sizeof path, scope, l);
    g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_NONE, "%s", path);
}

void blk_norm_module(g_graph *g, const blk_lm *lm, const char *scope)
{
    char cls[256];
    blk_class(lm, "RMSNorm", cls, sizeof cls);
    g_module_add(g, cls, G_OP_COUNT, false, GM_ROLE_NONE, "%s", scope);
}

int blk_norm(g_graph *g, const blk_lm *lm, const char *name, int x, int weight)
{
    return g_rms_norm(g, name, x, weight, lm->eps, lm->norm_offset, lm->norm_f32_weight);
}

int blk_skip_norm(g_graph *g, const blk_lm *lm, const char *name, int x, int skip, int weight,
                  int *sum)
{
    return g_skip_rms_norm(g, name, x, skip, weight, lm->eps, lm->norm_offset,
                           lm->norm_f32_weight, sum);
}

int blk_attention(g_graph *g, const blk_lm *lm, const blk_layer *w, int l, int x,
                  const blk_inputs *in)
{
    char cls[256], scope[96];
    blk_class(lm, "Attention", cls, sizeof cls);
    g_module_add(g, cls, G_OP_COUNT, false, GM_ROLE_NONE, "/model/layers.%d/self_attn", l);
    bool fused = lm->names->qkv != NULL;
    if (fused) {
        linear_module(g, "/model/layers.%d/self_attn/qkv_proj", l);
    } else {
        linear_module(g, "/model/layers.%d/self_attn/q_proj", l);
        linear_module(g, "/model/layers.%d/self_attn/k_proj", l);
        linear_module(g, "/model/layers.%d/self_attn/v_proj", l);
    }
    linear_module(g, "/model/layers.%d/self_attn/o_proj", l);
    if (lm->qk_norm) {
        snprintf(scope, sizeof scope, "/model/layers.%d/self_attn/q_norm", l);
        blk_norm_module(g, lm, scope);
        snprintf(scope, sizeof scope, "/model/layers.%d/self_attn/k_norm", l);
        blk_norm_module(g, lm, scope);
    }
    g_scope(g, "/model/layers.%d/self_attn", l);
    bool whole = lm->qk_norm == BLK_QK_WHOLE;
    int q, k, v;
    if (fused) { /* one linear, then q, k and v as its slices */
        int64_t qd = lm->n_heads * lm->head_dim, kvd = lm->n_kv_heads * lm->head_dim;
        int qkv = g_linear(g, "qkv_proj", x, w->qkv, G_NONE);
        q = g_slice(g, "Slice", qkv, 2, 0, qd);
        k = g_slice(g, "Slice_1", qkv, 2, qd, qd + kvd);
        v = g_slice(g, "Slice_2", qkv, 2, qd + kvd, qd + 2 * kvd);
        if (whole) {
            q = blk_norm(g, lm, "q_norm", q, w->q_norm);
            k = blk_norm(g, lm, "k_norm", k, w->k_norm);
        }
        q = split_heads(g, "Reshape", q, lm->n_heads, lm->head_dim);
        k = split_heads(g, "Reshape_1", k, lm->n_kv_heads, lm->head_dim);
        v = split_heads(g, "Reshape_2", v, lm->n_kv_heads, lm->head_dim);
    } else {
        q = g_linear(g, "q_proj", x, w->q, w->q_b);
        if (whole)
            q = blk_norm(g, lm, "q_norm", q, w->q_norm);
        q = split_heads(g, "q_proj/Reshape", q, lm->n_heads, lm->head_dim);
        k = g_linear(g, "k_proj", x, w->k, w->k_b);
        if (whole)
            k = blk_norm(g, lm, "k_norm", k, w->k_norm);
        k = split_heads(g, "k_proj/Reshape", k, lm->n_kv_heads, lm->head_dim);
        v = split_heads(g, "v_proj/Reshape", g_linear(g, "v_proj", x, w->v, w->v_b),
                        lm->n_kv_heads, lm->head_dim);
    }
    if (lm->qk_norm == BLK_QK_PER_HEAD) {
        q = blk_norm(g, lm, "q_norm", q, w->q_norm);
        k = blk_norm(g, lm, "k_norm", k, w->k_norm);
    }
    if (!lm->no_rope || !lm->no_rope[l]) {
        q = g_rope(g, "q_rope", q, in->positions, &lm->rope[l]);
        k = g_rope(g, "k_rope", k, in->positions, &lm->rope[l]);
    }
    int a = blk_attend(g, lm, l, q, k, v, in,
                       lm->attn_scale != 0.0 ? lm->attn_scale : 1.0 / sqrt((double)lm->head_dim));
    return g_linear(g, "o_proj", a, w->o, w->o_b);
}

int blk_attend(g_graph *g, const blk_lm *lm, int l, int q, int k, int v, const blk_inputs *in,
               double scale)
{
    const model_io *io = in->io;
    int pk, pv, pos;
    blk_cache_inputs(g, lm, io, l, &pk, &pv, &pos);
    g_attn_opts ao = {.num_heads = lm->n_heads, .num_kv_heads = lm->n_kv_heads,
                      .head_dim = lm->head_dim, .softcap = lm->attn_softcap, .scale = scale,
                      .sliding_window = lm->window[l],
                      .mask = io->cache == CACHE_STATIC ? G_MASK_GIVEN : G_MASK_CAUSAL,
                      .cache = io->cache == CACHE_NONE      ? G_CACHE_NONE
                               : io->cache == CACHE_DYNAMIC ? G_CACHE_APPEND
                                                            : G_CACHE_STATIC};
    int present_k, present_v;
    int a = g_attention(g, "attn", q, k, v, in->mask, pk, pv, pos, &ao, &present_k, &present_v);
    if (io->cache != CACHE_NONE)
        blk_cache_outputs(g, io, l, pk, pv, pos, present_k, present_v, a);
    return a;
}

int blk_mlp(g_graph *g, const blk_lm *lm, const blk_layer *w, int l, int x)
{
    char scope[96];
    snprintf(scope, sizeof scope, "/model/layers.%d/mlp", l);
    return blk_gated_mlp(g, lm, scope, lm->intermediate, x, w->gate_up, w->gate, w->up, w->down,
                         w->gate_b, w->up_b, w->down_b);
}

int blk_gated_mlp(g_graph *g, const blk_lm *lm, const char *scope, int64_t ff, int x,
                  int gate_up, int gate_w, int up_w, int down_w, int gate_b, int up_b, int down_b)
{
    char cls[256];
    blk_class(lm, "MLP", cls, sizeof cls);
    g_module_add(g, cls, G_OP_COUNT, false, GM_ROLE_NONE, "%s", scope);
    const char *act = lm->family->act_module ? lm->family->act_module : "act_fn";
    if (gate_up != G_NONE) {
        g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_NONE, "%s/gate_up_proj",
                     scope);
    } else {
        g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_NONE, "%s/gate_proj", scope);
        g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_NONE, "%s/up_proj", scope);
    }
    g_module_add(g, BLK_LINEAR_CLASS, G_LINEAR, false, GM_ROLE_NONE, "%s/down_proj", scope);
    g_module_add(g, lm->act_class, lm->act, false, GM_ROLE_NONE, "%s/%s", scope, act);
    g_scope(g, "%s", scope);
    int gate, up;
    if (gate_up != G_NONE) { /* chunk(2): gate, then up */
        int gu = g_linear(g, "gate_up_proj", x, gate_up, G_NONE);
        gate = g_unary(g, lm->act, act, g_slice(g, "Slice", gu, 2, 0, ff));
        up = g_slice(g, "Slice_1", gu, 2, ff, 2 * ff);
    } else {
        gate = g_unary(g, lm->act, act, g_linear(g, "gate_proj", x, gate_w, gate_b));
        up = g_linear(g, "up_proj", x, up_w, up_b);
    }
    return g_linear(g, "down_proj", g_binary(g, G_MUL, "Mul", gate, up), down_w, down_b);
}

/* What transformers' forward uses for an input it is not given, when there is no cache: a
 * mask of ones (every token real) and positions arange(sequence) in every row, whatever the
 * mask (LlamaModel.forward: position_ids = arange(seq_len) + past_seen_tokens, past 0). Both
 * are made [batch, sequence] from input_ids' shape, as the inputs they stand for are. */
int blk_like_ids(g_graph *g, int v, const g_dim *bs)
{
    /* expand's inference cannot read extents out of a shape tensor: they are input_ids' */
    for (int i = 0; v != G_NONE && i < 2; i++)
        g->values[v].shape.d[i] = bs[i];
    return v;
}

static int ones_like_ids(g_graph *g, int shape, const g_dim *bs)
{
    return blk_like_ids(g, g_expand(g, "ones", g_scalar_i64(g, 1), shape), bs);
}

int blk_positions_from_zero(g_graph *g, int shape, const g_dim *bs)
{
    int64_t zero = 0;
    int one = g_scalar_i64(g, 1);
    int s = g_gather(g, "sequence", shape, one, 0);
    int r = g_range(g, "arange", g_scalar_i64(g, 0), s, one);
    return blk_like_ids(g, g_expand(g, "expand", g_unsqueeze(g, "unsqueeze", r, 1, &zero), shape),
                        bs);
}

void blk_graph_inputs(g_graph *g, const model_io *io, int64_t hidden, blk_inputs *in)
{
    g_dim bs[2] = {io->batch, io->sequence};
    in->ids = in->embeds = G_NONE;
    if (!io->parts || (io->parts & MODEL_PART_EMBED)) {
        in->ids = g_input(g, "input_ids", FERRY_I64, 2, bs);
        g_input_role_set(g, in->ids, GI_TOKEN_IDS);
    } else {
        in->embeds = g_input(g, "inputs_embeds", io->dtype, 3,
                             (g_dim[]){io->batch, io->sequence, g_dim_const(hidden)});
    }
    bool plain = io->cache == CACHE_NONE;
    int shape = G_NONE;
    bool computed_mask = !(io->takes & FERRY_INPUT_ATTENTION_MASK);
    bool computed_positions = !(io->takes & FERRY_INPUT_POSITION_IDS);
    /* the base model's scope (GPT-2's is /transformer) */
    const char *base = g->base_scope[0] ? g->base_scope : "/model";
    if (plain && (computed_mask || computed_positions)) {
        /* in the model's own scope: transformers computes them in the base model's forward */
        g_scope(g, "%s", base);
        shape = g_shape_of(g, "input_shape", in->ids, 0, G_END);
    }
    if (plain && computed_mask) {
        g_scope(g, "%s/attention_mask", base);
        in->mask = ones_like_ids(g, shape, bs);
    } else if (io->cache == CACHE_STATIC) {
        g_dim m4[4] = {io->batch, g_dim_const(1), io->sequence, io->cache_len};
        in->mask = g_input(g, "attention_mask", FERRY_BOOL, 4, m4);
        g_input_role_set(g, in->mask, GI_ATTENTION_MASK);
    } else {
        g_dim bt[2] = {io->batch, io->cache == CACHE_DYNAMIC ? g_dim_add(io->past, io->sequence)
                                                              : io->sequence};
        in->mask = g_input(g, "attention_mask", FERRY_I64, 2, bt);
        g_input_role_set(g, in->mask, GI_ATTENTION_MASK);
    }
    if (plain && computed_positions) {
        g_scope(g, "%s/position_ids", base);
        in->positions = blk_positions_from_zero(g, shape, bs);
    } else if (io->position_rows > 0) {
        g_dim rbs[3] = {g_dim_const(io->position_rows), io->batch, io->sequence};
        int rows = g_input(g, "position_ids", FERRY_I64, 3, rbs);
        g_input_role_set(g, rows, GI_POSITION_IDS);
        /* the text row leads; the rotary reads the three M-RoPE rows after it */
        g_scope(g, "%s/position_ids", base);
        in->positions = g_slice(g, "Slice", rows, 0, io->position_rows - 3, io->position_rows);
    } else {
        in->positions = g_input(g, "position_ids", FERRY_I64, 2, bs);
        g_input_role_set(g, in->positions, GI_POSITION_IDS);
    }
    g->scope[0] = '\0';
    in->io = io;
}

void blk_logits_first(g_graph *g)
{
    if (!g_ok(g) || g->n_outputs < 2)
        return;
    int last = g->outputs[g->n_outputs - 1];
    memmove(g->outputs + 1, g->outputs, (g->n_outputs - 1) * sizeof *g->outputs);
    g->outputs[0] = last;
}
