/* aten_cache.c — how the aten targets (torch's .pt2, ExecuTorch's .pte) write a static cache:
 * into the cache tensor itself, as a module that owns its cache writes it. */
#include <stdio.h>

#include "backends/aten/aten.h"
#include "ir/legalize.h"

static const int64_t to_bnsd[4] = {0, 2, 1, 3};

/* A static cache's new rows [b, kvh, s, d] written into the cache itself at slots position ..
 * position + s - 1: aten.index_copy_ on the caller's tensor, as a module that owns its cache
 * writes it (torch.export keeps the in-place op, which run_decompositions makes an input
 * mutation; ExecuTorch's kernels write it with aten::index_put_). The slots are
 * arange(s) + position: s a SymInt, position a tensor. */
static int write_in_place(g_graph *g, int cache, int rows, int position)
{
    int shape = g_shape_of(g, "shape_rows", rows, 2, 3);
    int first = g_scalar_i64(g, 0);
    int s = g_gather(g, "gather_s", shape, first, 0);
    int slots = g_range(g, "arange", first, s, g_scalar_i64(g, 1));
    slots = g_binary(g, G_ADD, "slots", slots, position);
    if (!g_ok(g))
        return G_NONE;
    g_extern e = g_extern_init(ATEN_DOMAIN, ATEN_INDEX_COPY);
    g_extern_int(&e, "dim", 2);
    g_extern_out(&e, 0, 0, g->values[cache].dtype, &g->values[cache].shape);
    int in[3] = {cache, slots, rows};
    return g_extern_node(g, "index_copy_", &e, 3, in);
}

/* attention's keys and values [b, kvh, t, d], as lw_attention_kv reads them except for a
 * static cache, which is written in place */
void aten_attention_kv(g_lower_ctx *c, const g_node *n, int *k, int *v, int *outs)
{
    if (n->a.attn->cache != G_CACHE_STATIC) {
        lw_attention_kv(c, n, k, v, outs);
        return;
    }
    g_graph *g = c->dst;
    int pos = lw_in(c, n, 6);
    *k = g_transpose(g, "transpose_k", lw_in(c, n, 1), 4, to_bnsd);
    *v = g_transpose(g, "transpose_v", lw_in(c, n, 2), 4, to_bnsd);
    char saved[sizeof g->scope], scope[sizeof g->scope];
    snprintf(scope, sizeof scope, "%.200s/cache_key", n->name);
    lw_scope_push(c, saved, sizeof saved, scope);
    outs[1] = *k = write_in_place(g, lw_in(c, n, 4), *k, pos);
    lw_scope_pop(c, saved);
    snprintf(scope, sizeof scope, "%.200s/cache_value", n->name);
    lw_scope_push(c, saved, sizeof saved, scope);
    outs[2] = *v = write_in_place(g, lw_in(c, n, 5), *v, pos);
    lw_scope_pop(c, saved);
}

