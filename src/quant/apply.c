/* apply.c — the quantizer's options checked, and the weights they name turned into block-
 * quantized recipes on a semantic graph. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/apply.h"

ferry_status q_check_config(ferry_quantizer *q, ferry_dtype dtype, fy_err *err)
{
    if (q->bits == 0) {
        if (q->block_size || q->asymmetric || q->accuracy_level != -1 || q->embeddings ||
            !q->lm_head || q->method != FERRY_QUANT_RTN)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "quantizer options (block size, "
                           "asymmetric, accuracy level, embeddings, lm_head, method) apply only when "
                           "quantizing: give bits 4 or 8 (--quantize int4|int8)");
        return FERRY_OK;
    }
    if (q->bits != 4 && q->bits != 8)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "quantizer: %d bits is not supported (4 or 8)",
                       q->bits);
    if (q->block_size == 0)
        q->block_size = 32;
    if (q->block_size < 16 || q->block_size > 256 || (q->block_size & (q->block_size - 1)))
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "quantizer: block size %d is not supported "
                       "(16, 32, 64, 128 or 256)", q->block_size);
    if (q->method != FERRY_QUANT_RTN && q->method != FERRY_QUANT_MSE)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "quantizer: unknown method %d (rtn or mse)",
                       (int)q->method);
    /* measured: at int8 the search keeps RTN's scales (its steps are fine already), so it would
     * cost export time and change nothing */
    if (q->method == FERRY_QUANT_MSE && q->bits != 4)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "quantizer: method mse applies to int4 (at "
                       "int8 it finds round-to-nearest's own scales)");
    if (q->accuracy_level < -1 || q->accuracy_level > 4)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "quantizer: accuracy level %d is not in 0-4",
                       q->accuracy_level);
    if (dtype != FERRY_F32 && dtype != FERRY_F16)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "quantizer: scales are stored in the export "
                       "dtype, which must be fp32 or fp16 to quantize (not %s)",
                       ferry_dtype_name(dtype));
    return FERRY_OK;
}

/* Input k of `n` is a weight the quantizer takes. The head is the linear the family declared
 * as its module of role head (a causal LM's lm_head, a classifier); the embedding table is
 * the one the token ids index (not a table of learned positions or token types). */
static bool wanted(const g_graph *g, const g_node *n, int k, const ferry_quantizer *q)
{
    if (n->dead)
        return false;
    /* a router (a mixture's gate, Qwen2-MoE's shared expert gate) stays float: a rounded
     * logit may pick other experts; so does a vision tower's patch embedding, whose rows
     * (C*T*p*p = 1176 in Qwen2-VL) no block size divides and which reads raw pixels once; and
     * the cross keys and values of an encoder-decoder, which the encoder side makes once an
     * input (Whisper tiny.en with them int4 heard "fog stump" for "fox jump") */
    if (n->op == G_LINEAR) {
        g_module_role role = g_node_role(g, n);
        return k == 1 && (q->lm_head || role != GM_ROLE_HEAD) && role != GM_ROLE_ROUTER &&
               role != GM_ROLE_PATCH_EMBED && role != GM_ROLE_CROSS_KV;
    }
    /* a mixture's expert stacks (each expert's rows blocked alike) */
    if (n->op == G_MOE)
        return k >= 2;
    if (n->op == G_EMBEDDING) {
        const g_value *ids = &g->values[n->in[1]];
        return k == 0 && q->embeddings && ids->kind == GV_INPUT && ids->role == GI_TOKEN_IDS;
    }
    return false;
}

/* The quantized recipe of weight value `v`, checked; errors name the tensor. */
static ferry_status quantized_recipe(const g_value *x, const ferry_quantizer *q, g_weight *out,
                                     fy_err *err)
{
    char what[256];
    w_describe(&x->weight, what, sizeof what);
    int64_t rows, cols;
    w_matrix(&x->weight, &rows, &cols);
    bool stack = x->shape.rank == 3 && x->weight.stack;
    if (x->shape.rank == 3 && !stack) /* a checkpoint's own [E, out, in] expert stack */
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "cannot quantize the experts '%s': a stack "
                       "stored as one [E, out, in] tensor is not quantized yet (export without "
                       "--quantize, or from a checkpoint of one tensor per expert, as "
                       "save_pretrained writes)", what);
    if ((x->shape.rank != 2 && !stack) || x->weight.transpose || x->weight.offset != 0)
        return fy_fail(err, FERRY_ERR_INTERNAL, "cannot quantize '%s': not a plain 2-D weight "
                       "or a stack of them", what);
    if (q->bits == 4 && cols % 2 != 0)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "cannot quantize '%s' [%lld, %lld] to int4: "
                       "its rows have an odd number of inputs (int8 can)", what,
                       (long long)rows, (long long)cols);
    *out = x->weight;
    out->quant = (w_quant){.bits = q->bits, .block = q->block_size, .symmetric = !q->asymmetric,
                           .search = q->method == FERRY_QUANT_MSE};
    return FERRY_OK;
}

/* Whether weight `x` (a matrix or a stack of them) has rows that are no whole number of
 * blocks of `min_block` (0: never). */
static bool rows_fit_no_block(const g_value *x, int min_block, int64_t *width)
{
    int64_t rows;
    w_matrix(&x->weight, &rows, width);
    return min_block > 0 && *width % min_block != 0;
}

ferry_status q_apply(g_graph *g, const ferry_quantizer *q, int whole_block_min,
                     q_kept_float *kept, fy_err *err)
{
    if (!q->bits)
        return FERRY_OK;
    size_t n_values = g->n_values;
    /* per value: how many readers keep it float, and its quantized twin */
    int *keep = calloc(n_values, sizeof *keep), *twin = malloc(n_values * sizeof *twin);
    if (!keep || !twin) {
        free(keep), free(twin);
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    }
    for (size_t v = 0; v < n_values; v++)
        twin[v] = G_NONE;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const g_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            if (v != G_NONE && g->values[v].kind == GV_WEIGHT && !wanted(g, n, k, q))
                keep[v]++;
        }
    }
    ferry_status st = FERRY_OK;
    for (size_t i = 0; i < g->n_nodes && st == FERRY_OK; i++) {
        g_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in && st == FERRY_OK; k++) {
            int v = n->in[k];
            if (v == G_NONE || g->values[v].kind != GV_WEIGHT || !wanted(g, n, k, q))
                continue;
            int64_t width;
            if (twin[v] == G_NONE &&
                rows_fit_no_block(&g->values[v], whole_block_min, &width)) {
                if (kept->n++ == 0) {
                    w_describe(&g->values[v].weight, kept->first, sizeof kept->first);
                    kept->width = width;
                }
                twin[v] = v; /* read as it is, counted once */
            }
            if (twin[v] == G_NONE) {
                g_weight recipe;
                if ((st = quantized_recipe(&g->values[v], q, &recipe, err)) != FERRY_OK)
                    break;
                /* an unused float value may keep the name: graphs check and print only the
                 * values something reads */
                char name[512];
                snprintf(name, sizeof name, keep[v] ? "%s_q%d" : "%s", g->values[v].name,
                         q->bits);
                twin[v] = g_weight_value(g, name, &recipe);
                kept->quantized++;
                if (twin[v] == G_NONE) {
                    st = fy_fail(err, g->err.status ? g->err.status : FERRY_ERR_INTERNAL, "%s",
                                 g->err.msg);
                    break;
                }
            }
            n->in[k] = twin[v];
        }
    }
    free(keep), free(twin);
    if (st == FERRY_OK)
        g_remove_dead(g);
    return st;
}
