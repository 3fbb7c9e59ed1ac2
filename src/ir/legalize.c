/* legalize.c — the lowering driver: rebuilds a graph for a target, lowering every node the
 * target does not take as is, round after round until all are native; then checks the result. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/legalize.h"
#include "util/grow.h"

/* Semantic ops lower to primitives or to other semantic ops (skip_rms_norm -> add + rms_norm),
 * so a few rounds always suffice; more means two lowerings feed each other. */
#define MAX_ROUNDS 6

bool lw_memo_add(g_lower_ctx *c, const lw_memo *m)
{
    lw_memo *grown = fy_grow(c->memo, &c->cap_memo, c->n_memo + 1, sizeof *grown);
    if (!grown) {
        g_fail(c->dst, FERRY_ERR_NOMEM, "out of memory");
        return false;
    }
    c->memo = grown;
    c->memo[c->n_memo++] = *m;
    return true;
}

int lw_in(g_lower_ctx *c, const g_node *n, int k)
{
    return k < n->n_in && n->in[k] != G_NONE ? c->map[n->in[k]] : G_NONE;
}

const g_value *lw_src(const g_lower_ctx *c, const g_node *n, int k)
{
    return k < n->n_in && n->in[k] != G_NONE ? &c->src->values[n->in[k]] : NULL;
}

ferry_status lw_refuse_quantized(g_lower_ctx *c, const g_node *n, int k)
{
    const g_value *w = lw_src(c, n, k);
    if (!w || w->kind != GV_WEIGHT || !w->weight.quant.bits)
        return FERRY_OK;
    g_fail(c->dst, FERRY_ERR_UNSUPPORTED, "target %s cannot express the %d-bit quantized weight "
           "'%s' of %s '%s'", c->target->name, w->weight.quant.bits, w->name, g_op_name(n->op),
           n->name);
    return FERRY_ERR_UNSUPPORTED;
}

bool lw_shared(const g_lower_ctx *c, int v, g_op op)
{
    const uint64_t *set = &c->readers[(size_t)v * LW_READER_WORDS];
    for (int w = 0; w < LW_READER_WORDS; w++) {
        uint64_t others = set[w];
        if (w == (int)op / 64)
            others &= ~(UINT64_C(1) << ((int)op % 64));
        if (others)
            return true;
    }
    return false;
}

/* Which ops read each source value (a bit per op, LW_READER_WORDS words a value), once per
 * round: asked per linear, a scan of the whole graph made lowering quadratic in the number of
 * layers. */
static uint64_t *reader_sets(const g_graph *src)
{
    uint64_t *r = calloc((src->n_values ? src->n_values : 1) * LW_READER_WORDS, sizeof *r);
    if (!r)
        return NULL;
    for (size_t i = 0; i < src->n_nodes; i++) {
        const g_node *o = &src->nodes[i];
        if (o->dead)
            continue;
        for (int k = 0; k < o->n_in; k++)
            if (o->in[k] != G_NONE)
                r[(size_t)o->in[k] * LW_READER_WORDS + o->op / 64] |= UINT64_C(1) << (o->op % 64);
    }
    return r;
}

void lw_refine(g_lower_ctx *c, int v, const g_node *n, int out_index)
{
    g_graph *g = c->dst;
    const g_shape *known = &c->src->values[n->out[out_index]].shape;
    if (v == G_NONE || g->values[v].shape.rank != known->rank)
        return;
    for (int i = 0; i < known->rank; i++)
        if (g->values[v].shape.d[i].unknown)
            g->values[v].shape.d[i] = known->d[i];
}

void lw_scope_push(g_lower_ctx *c, char *saved, size_t size, const char *scope)
{
    memcpy(saved, c->dst->scope, size < sizeof c->dst->scope ? size : sizeof c->dst->scope);
    g_scope(c->dst, "%s", scope);
}

void lw_shared_scope_push(g_lower_ctx *c, char *saved, size_t size, const char *fmt, ...)
{
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    memcpy(saved, c->dst->scope, size < sizeof c->dst->scope ? size : sizeof c->dst->scope);
    g_scope(c->dst, "%s/%s", c->src->base_scope, name);
}

void lw_scope_pop(g_lower_ctx *c, const char *saved)
{
    g_scope(c->dst, "%s", saved);
}

g_lower_fn g_generic_lowering(g_op op)
{
    switch (op) {
    case G_RMS_NORM: return lower_rms_norm;
    case G_SKIP_RMS_NORM: return lower_skip_rms_norm;
    case G_LAYER_NORM: return lower_layer_norm;
    case G_SKIP_LAYER_NORM: return lower_skip_layer_norm;
    case G_LINEAR: return lower_linear;
    case G_EMBEDDING: return lower_embedding;
    case G_SILU: case G_GELU: case G_GELU_TANH: case G_SOFTCAP: return lower_activation;
    case G_ROPE: return lower_rope;
    case G_ATTENTION: return lower_attention;
    case G_MOE: return lower_moe;
    default: return NULL;
    }
}

/* Copies a source value that no node produces (constant or weight) on first use. */
static int leaf(g_lower_ctx *c, int v)
{
    if (c->map[v] != G_NONE)
        return c->map[v];
    const g_value *x = &c->src->values[v];
    int nv = G_NONE;
    if (x->kind == GV_WEIGHT) {
        nv = g_weight_value(c->dst, x->name, &x->weight);
    } else if (x->kind == GV_CONST) {
        nv = g_const_copy(c->dst, x);
    }
    c->map[v] = nv;
    return nv;
}

/* Copies a native node as is: same name, same output names. */
static ferry_status copy_node(g_lower_ctx *c, const g_node *n, int *outs)
{
    g_graph *g = c->dst;
    int in[G_MAX_IN];
    for (int i = 0; i < n->n_in; i++)
        in[i] = lw_in(c, n, i);
    g->scope[0] = '\0';
    /* g_add_node prefixes the scope and a '/'; the source name already starts with one. */
    int id = g_add_node(g, n->op, n->name[0] == '/' ? n->name + 1 : n->name, n->n_in, in, &n->a);
    if (id == G_NONE)
        return g->err.status;
    for (int k = 0; k < g->nodes[id].n_out; k++) {
        int v = g->nodes[id].out[k];
        if (!g_rename(g, v, c->src->values[n->out[k]].name))
            return g->err.status;
        /* a dim the source recorded where inference knows less (an expand to a shape tensor
         * built from an input: blk_graph_inputs' positions) stays known */
        lw_refine(c, v, n, k);
        outs[k] = v;
    }
    return FERRY_OK;
}

/* One round: every node copied or lowered once. *lowered counts the lowered ones. */
static g_graph *round_trip(const g_graph *src, const g_target *t, int *lowered, fy_err *err)
{
    g_lower_ctx c = {.src = src, .target = t};
    c.dst = g_new();
    c.map = malloc((src->n_values ? src->n_values : 1) * sizeof *c.map);
    c.readers = reader_sets(src);
    *lowered = 0;
    if (!c.dst || !c.map || !c.readers) {
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < src->n_values; i++)
        c.map[i] = G_NONE;
    c.dst->syms = src->syms;
    c.dst->output_class = src->output_class;
    memcpy(c.dst->base_scope, src->base_scope, sizeof c.dst->base_scope);
    g_modules_copy(c.dst, src);
    for (size_t i = 0; i < src->n_inputs; i++) {
        const g_value *x = &src->values[src->inputs[i]];
        c.map[src->inputs[i]] = g_input(c.dst, x->name, x->dtype, x->shape.rank, x->shape.d);
        if (c.map[src->inputs[i]] != G_NONE) {
            c.dst->values[c.map[src->inputs[i]]].bound = x->bound;
            c.dst->values[c.map[src->inputs[i]]].role = x->role;
        }
    }
    for (size_t i = 0; i < src->n_nodes && g_ok(c.dst); i++) {
        const g_node *n = &src->nodes[i];
        if (n->dead)
            continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] != G_NONE && c.map[n->in[k]] == G_NONE)
                leaf(&c, n->in[k]);
        int outs[G_MAX_OUT] = {G_NONE, G_NONE, G_NONE};
        ferry_status st;
        if (t->legal(t, src, n) == G_NATIVE) {
            st = copy_node(&c, n, outs);
        } else {
            g_lower_fn fn = t->lowering ? t->lowering(t, n->op) : NULL;
            if (!fn)
                fn = g_generic_lowering(n->op);
            if (!fn) {
                fy_fail(err, FERRY_ERR_UNSUPPORTED, "target %s cannot express %s (node '%s')",
                        t->name, g_op_name(n->op), n->name);
                goto fail;
            }
            g_scope(c.dst, "%s", n->name);
            st = fn(&c, n, outs);
            (*lowered)++;
        }
        if (st != FERRY_OK && g_ok(c.dst))
            g_fail(c.dst, st, "lowering %s (node '%s') failed", g_op_name(n->op), n->name);
        for (int k = 0; k < n->n_out; k++)
            c.map[n->out[k]] = outs[k];
    }
    for (size_t i = 0; i < src->n_outputs && g_ok(c.dst); i++) {
        int v = src->outputs[i];
        int nv = c.map[v] != G_NONE ? c.map[v] : leaf(&c, v);
        g_output(c.dst, nv, src->values[v].name);
    }
    for (size_t i = 0; i < src->n_states && g_ok(c.dst); i++) {
        const g_state *s = &src->states[i];
        g_state_add(c.dst, s->name, s->kind, s->layer, s->in == G_NONE ? G_NONE : c.map[s->in],
                    c.map[s->out], s->form == GS_IN_PLACE);
        if (c.dst->n_states && g_ok(c.dst))
            c.dst->states[c.dst->n_states - 1].form = s->form;
    }
    if (!g_ok(c.dst)) {
        fy_fail(err, c.dst->err.status, "%s", c.dst->err.msg);
        goto fail;
    }
    free(c.map);
    free(c.memo);
    free(c.readers);
    g_remove_dead(c.dst);
    return c.dst;
fail:
    free(c.map);
    free(c.memo);
    free(c.readers);
    g_free(c.dst);
    return NULL;
}

g_graph *g_legalize(const g_graph *src, const g_target *t, fy_err *err)
{
    const g_graph *cur = src;
    g_graph *next = NULL;
    for (int round = 0; round < MAX_ROUNDS; round++) {
        int lowered = 0;
        next = round_trip(cur, t, &lowered, err);
        if (cur != src)
            g_free((g_graph *)cur);
        if (!next)
            return NULL;
        if (lowered == 0) {
            if (g_check(next, err) != FERRY_OK) {
                g_free(next);
                return NULL;
            }
            return next;
        }
        cur = next;
    }
    g_free(next);
    fy_fail(err, FERRY_ERR_INTERNAL, "target %s: lowering did not settle after %d rounds",
            t->name, MAX_ROUNDS);
    return NULL;
}

static g_legality primitives_only(const g_target *t, const g_graph *g, const g_node *n)
{
    (void)t;
    (void)g;
    return g_op_is_semantic(n->op) ? G_LOWER : G_NATIVE;
}

const g_target g_target_primitives = {.name = "primitives", .legal = primitives_only};
