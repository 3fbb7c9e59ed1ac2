/* passes.c — whole-graph passes: dead-node removal, use counts, and g_check, the verifier every
 * graph passes before a backend sees it. */
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

void g_remove_dead(g_graph *g)
{
    bool *live = calloc(g->n_values ? g->n_values : 1, sizeof *live);
    if (!live) {
        g_fail(g, FERRY_ERR_NOMEM, "out of memory");
        return;
    }
    for (size_t i = 0; i < g->n_outputs; i++)
        live[g->outputs[i]] = true;
    /* Nodes are in topological order (a node only reads earlier values), so one backward sweep
     * finds everything the outputs depend on. */
    for (size_t i = g->n_nodes; i-- > 0;) {
        g_node *n = &g->nodes[i];
        bool used = false;
        for (int k = 0; k < n->n_out; k++)
            used |= live[n->out[k]];
        n->dead = !used;
        if (used)
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k] != G_NONE)
                    live[n->in[k]] = true;
    }
    free(live);
    g_count_uses(g);
}

void g_count_uses(g_graph *g)
{
    for (size_t i = 0; i < g->n_values; i++)
        g->values[i].n_uses = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const g_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] != G_NONE)
                g->values[n->in[k]].n_uses++;
    }
    for (size_t i = 0; i < g->n_outputs; i++)
        g->values[g->outputs[i]].n_uses++;
}

static ferry_status bad(fy_err *err, const g_node *n, const char *why)
{
    return fy_fail(err, FERRY_ERR_INTERNAL, "graph node '%s' (%s): %s", n->name,
                   g_op_name(n->op), why);
}

/* An attribute the op does not read must keep its zero value: a printer that ignores it would
 * otherwise silently drop what a builder meant. */
static bool attrs_clean(const g_node *n)
{
    unsigned m = g_op_info_of(n->op)->attrs;
    const g_attrs *a = &n->a;
    bool no_pads = a->pad_value == 0;
    for (int i = 0; i < G_MAX_RANK; i++)
        no_pads &= a->pad_begin[i] == 0 && a->pad_end[i] == 0;
    return ((m & GA_AXIS) || a->axis == 0) && ((m & GA_INTS) || a->n_ints == 0) &&
           ((m & GA_SHAPE) || a->shape.rank == 0) &&
           ((m & GA_RANGE) || (a->start == 0 && a->end == 0)) && ((m & GA_EPS) || a->eps == 0) &&
           ((m & GA_OFFSET) || a->offset == 0) && ((m & GA_CAP) || a->cap == 0) &&
           ((m & GA_TO) || a->to == FERRY_DTYPE_UNDEFINED) && ((m & GA_KEEPDIMS) || !a->keepdims) &&
           ((m & GA_TRANSB) || !a->transpose_b) && ((m & GA_ROPE) || !a->rope) &&
           ((m & GA_ATTN) || !a->attn) && ((m & GA_EXTERN) || !a->ext) &&
           ((m & GA_BOUNDS) || (a->lo == 0 && a->hi == 0)) && ((m & GA_PADS) || no_pads) &&
           ((m & GA_CONV) || !a->conv) && ((m & GA_MOE) || !a->moe) &&
           ((m & GA_F32W) || !a->f32_weight);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool value_live(const g_graph *g, const g_value *v)
{
    return v->kind == GV_INPUT || v->n_uses > 0 ||
           (v->kind == GV_NODE && !g->nodes[v->producer].dead);
}

/* Node names and value names must each be unique: printers use them as identifiers, and a
 * collision means two checkpoint pieces were mapped to one place. */
static ferry_status check_unique(g_graph *g, fy_err *err)
{
    size_t n = g->n_nodes > g->n_values ? g->n_nodes : g->n_values;
    const char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    ferry_status st = FERRY_OK;
    for (int pass = 0; pass < 2 && st == FERRY_OK; pass++) {
        size_t k = 0;
        if (pass == 0) {
            for (size_t i = 0; i < g->n_nodes; i++)
                if (!g->nodes[i].dead)
                    names[k++] = g->nodes[i].name;
        } else {
            for (size_t i = 0; i < g->n_values; i++)
                if (value_live(g, &g->values[i]))
                    names[k++] = g->values[i].name;
        }
        qsort(names, k, sizeof *names, cmp_str);
        for (size_t i = 1; i < k; i++)
            if (strcmp(names[i - 1], names[i]) == 0) {
                st = fy_fail(err, FERRY_ERR_INTERNAL, "graph: two %s are named '%s'",
                             pass == 0 ? "nodes" : "values", names[i]);
                break;
            }
    }
    free(names);
    return st;
}

static bool is_listed(const int *ids, size_t n, int v)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == v)
            return true;
    return false;
}

static ferry_status check_states(const g_graph *g, fy_err *err)
{
    for (size_t i = 0; i < g->n_states; i++) {
        const g_state *s = &g->states[i];
        if ((unsigned)s->form >= GS_FORM_COUNT || (unsigned)s->kind >= GS_KIND_COUNT)
            return fy_fail(err, FERRY_ERR_INTERNAL, "graph state '%s': form %d, kind %d",
                           s->name, (int)s->form, (int)s->kind);
        if (s->form == GS_MUTATED &&
            (s->in == G_NONE || !is_listed(g->inputs, g->n_inputs, s->in) ||
             is_listed(g->outputs, g->n_outputs, s->out)))
            return fy_fail(err, FERRY_ERR_INTERNAL, "graph state '%s': a state written into its "
                           "input needs that input and no output", s->name);
        if ((s->form == GS_PAIR || s->form == GS_IN_PLACE) &&
            (!is_listed(g->outputs, g->n_outputs, s->out) ||
             (s->in != G_NONE && !is_listed(g->inputs, g->n_inputs, s->in))))
            return fy_fail(err, FERRY_ERR_INTERNAL, "graph state '%s': its values are not a graph "
                           "input and output", s->name);
        if ((s->form == GS_VARIABLE || s->form == GS_BUFFER) &&
            ((s->in != G_NONE && is_listed(g->inputs, g->n_inputs, s->in)) ||
             is_listed(g->outputs, g->n_outputs, s->out)))
            return fy_fail(err, FERRY_ERR_INTERNAL, "graph state '%s': a state the runtime or "
                           "the program carries is no graph input or output", s->name);
        if (g_state_fixed(s->form) &&
            (s->in == G_NONE || g->values[s->in].dtype != g->values[s->out].dtype ||
             !g_shape_eq(&g->values[s->in].shape, &g->values[s->out].shape)))
            return fy_fail(err, FERRY_ERR_INTERNAL, "graph state '%s': an in-place state needs "
                           "an input of the output's dtype and shape", s->name);
        for (size_t k = 0; k < i; k++)
            if (strcmp(g->states[k].name, s->name) == 0)
                return fy_fail(err, FERRY_ERR_INTERNAL, "graph: two states are named '%s'",
                               s->name);
    }
    return FERRY_OK;
}

ferry_status g_check(g_graph *g, fy_err *err)
{
    if (!g_ok(g))
        return fy_fail(err, g->err.status, "%s", g->err.msg);
    for (size_t i = 0; i < g->n_nodes; i++) {
        const g_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            if (v == G_NONE)
                continue;
            if (v < 0 || (size_t)v >= g->n_values)
                return bad(err, n, "input refers to no value");
            const g_value *x = &g->values[v];
            if (x->kind == GV_NODE && (size_t)x->producer >= i)
                return bad(err, n, "input is produced later (graph not topologically ordered)");
        }
        for (int k = 0; k < n->n_in; k++) {
            const g_value *x = n->in[k] == G_NONE ? NULL : &g->values[n->in[k]];
            /* moe's expert stacks may be quantized (each expert's rows blocked alike) for a
             * backend's own kernel; the generic lowering refuses them */
            bool takes = (n->op == G_LINEAR && k == 1) || (n->op == G_EMBEDDING && k == 0) ||
                         (n->op == G_MOE && k >= 2) || n->op == G_DEQUANTIZE ||
                         n->op == G_EXTERN;
            if (x && x->kind == GV_WEIGHT && x->weight.quant.bits && !takes)
                return bad(err, n, "reads a block-quantized weight it cannot take");
        }
        if (!attrs_clean(n))
            return bad(err, n, "an attribute the op does not take is set");
        g_typed outs[G_MAX_OUT];
        int n_out = 0;
        if (g_infer(g, n, outs, &n_out, err) != FERRY_OK)
            return err->status;
        if (n_out != n->n_out)
            return bad(err, n, "recorded output count disagrees with inference");
        for (int o = 0; o < n_out; o++) {
            const g_value *v = &g->values[n->out[o]];
            if (v->producer != (int)i)
                return bad(err, n, "an output value names another producer");
            if (outs[o].dtype != v->dtype)
                return bad(err, n, "recorded output dtype disagrees with inference");
            if (outs[o].shape.rank != v->shape.rank)
                return bad(err, n, "recorded output rank disagrees with inference");
            for (int k = 0; k < v->shape.rank; k++)
                if (!outs[o].shape.d[k].unknown &&
                    !g_dim_match(outs[o].shape.d[k], v->shape.d[k]))
                    return bad(err, n, "recorded output shape disagrees with inference");
        }
    }
    for (size_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] < 0 || (size_t)g->outputs[i] >= g->n_values)
            return fy_fail(err, FERRY_ERR_INTERNAL, "graph output %zu refers to no value", i);
    g_count_uses(g);
    if (check_states(g, err) != FERRY_OK)
        return err->status;
    return check_unique(g, err);
}
