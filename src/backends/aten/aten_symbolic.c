/* aten_symbolic.c — the integers an aten graph computes from shapes (aten.h). The IR computes
 * a reshape target, an arange's bounds or a mask's offset as int64 tensors from shape_of; aten
 * programs compute them as SymInts. Following each small integer tensor to the dims it holds
 * lets the emitter pass them where aten takes SymInts, and gives every tensor a size an aten
 * program can write. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/aten/aten.h"

static bool int_dtype(ferry_dtype dt)
{
    return dt == FERRY_I64 || dt == FERRY_I32;
}

static void from_const(const g_value *x, aten_ints *out)
{
    if (!int_dtype(x->dtype) || x->shape.rank > 1)
        return;
    int64_t n = x->shape.rank ? 0 : 1;
    if (x->shape.rank && !g_dim_is_const(x->shape.d[0], &n))
        return;
    if (n < 1 || n > G_MAX_RANK || !x->data)
        return;
    out->n = (int)n;
    out->scalar = x->shape.rank == 0;
    for (int i = 0; i < out->n; i++) {
        int64_t v = x->dtype == FERRY_I64 ? ((const int64_t *)x->data)[i]
                                          : ((const int32_t *)x->data)[i];
        out->d[i] = g_dim_const(v);
    }
    out->known = true;
}

static bool all_known(aten_ints *r)
{
    for (int i = 0; i < r->n; i++)
        if (r->d[i].unknown)
            return false;
    return true;
}

/* elementwise a op b, one side possibly a single element */
static bool arith(g_op op, const aten_ints *a, const aten_ints *b, aten_ints *r)
{
    if (a->n != b->n && a->n != 1 && b->n != 1)
        return false;
    r->n = a->n > b->n ? a->n : b->n;
    r->scalar = a->scalar && b->scalar;
    for (int i = 0; i < r->n; i++) {
        g_dim x = a->d[a->n == 1 ? 0 : i], y = b->d[b->n == 1 ? 0 : i];
        int64_t k;
        if (op == G_ADD)
            r->d[i] = g_dim_add(x, y);
        else if (op == G_SUB)
            r->d[i] = g_dim_sub(x, y);
        else if (g_dim_is_const(y, &k))
            r->d[i] = g_dim_scale(x, k);
        else if (g_dim_is_const(x, &k))
            r->d[i] = g_dim_scale(y, k);
        else
            return false;
    }
    return all_known(r);
}

static void track_node(const g_graph *g, const g_node *n, aten_ints *ints)
{
    const g_value *y = &g->values[n->out[0]];
    if (!int_dtype(y->dtype) || y->shape.rank > 1)
        return;
    aten_ints r = {.scalar = y->shape.rank == 0};
    const aten_ints *a = n->n_in > 0 && n->in[0] != G_NONE ? &ints[n->in[0]] : NULL;
    const aten_ints *b = n->n_in > 1 && n->in[1] != G_NONE ? &ints[n->in[1]] : NULL;
    switch (n->op) {
    case G_SHAPE_OF: {
        const g_shape *s = &g->values[n->in[0]].shape;
        int64_t start = n->a.start < 0 ? n->a.start + s->rank : n->a.start;
        int64_t end = n->a.end == G_END ? s->rank : n->a.end < 0 ? n->a.end + s->rank : n->a.end;
        if (start < 0 || end > s->rank || start >= end)
            return;
        r.n = (int)(end - start);
        for (int i = 0; i < r.n; i++)
            r.d[i] = s->d[start + i];
        r.known = all_known(&r);
        break;
    }
    case G_GATHER:
        if (!a->known || !b || !b->known || n->a.axis != 0 || a->scalar)
            return;
        r.n = b->n;
        for (int i = 0; i < b->n; i++) {
            int64_t k;
            if (!g_dim_is_const(b->d[i], &k))
                return;
            if (k < 0)
                k += a->n;
            if (k < 0 || k >= a->n)
                return;
            r.d[i] = a->d[k];
        }
        r.known = true;
        break;
    case G_SLICE: {
        if (!a->known || a->scalar || (n->a.axis != 0 && n->a.axis != -1))
            return;
        int64_t start = n->a.start, end = n->a.end == G_END ? a->n : n->a.end;
        start = start < 0 ? start + a->n : start;
        end = end < 0 ? end + a->n : end;
        start = start < 0 ? 0 : start > a->n ? a->n : start;
        end = end < start ? start : end > a->n ? a->n : end;
        r.n = (int)(end - start);
        for (int i = 0; i < r.n; i++)
            r.d[i] = a->d[start + i];
        r.known = r.n > 0;
        break;
    }
    case G_CONCAT:
        for (int k = 0; k < n->n_in; k++) {
            const aten_ints *p = &ints[n->in[k]];
            if (!p->known || r.n + p->n > G_MAX_RANK)
                return;
            for (int i = 0; i < p->n; i++)
                r.d[r.n++] = p->d[i];
        }
        r.known = true;
        break;
    case G_RESHAPE: case G_UNSQUEEZE: case G_CAST:
        if (!a->known)
            return;
        r.n = a->n;
        memcpy(r.d, a->d, sizeof r.d);
        r.known = true;
        break;
    case G_ADD: case G_SUB: case G_MUL:
        if (!a->known || !b->known)
            return;
        r.known = arith(n->op, a, b, &r);
        break;
    default:
        return;
    }
    if (r.known)
        ints[n->out[0]] = r;
}

/* the integers known before any node: the small integer constants (NULL when out of memory) */
static aten_ints *constant_ints(const g_graph *g)
{
    aten_ints *ints = calloc(g->n_values ? g->n_values : 1, sizeof *ints);
    for (size_t v = 0; ints && v < g->n_values; v++)
        if (g->values[v].kind == GV_CONST)
            from_const(&g->values[v], &ints[v]);
    return ints;
}

aten_ints *aten_track(const g_graph *g)
{
    aten_ints *ints = constant_ints(g);
    if (!ints)
        return NULL;
    for (size_t i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead)
            track_node(g, &g->nodes[i], ints);
    return ints;
}

int aten_range_offset_length(const g_graph *g, const g_node *n, const aten_ints *ints)
{
    const aten_ints *d = &ints[n->in[2]];
    int64_t step;
    const g_value *limit = &g->values[n->in[1]];
    if (!d->known || !g_dim_is_const(d->d[0], &step) || step != 1 || limit->kind != GV_NODE)
        return G_NONE;
    const g_node *add = &g->nodes[limit->producer];
    if (add->op != G_ADD)
        return G_NONE;
    for (int k = 0; k < 2; k++)
        if (add->in[k] == n->in[0] && ints[add->in[1 - k]].known &&
            ints[add->in[1 - k]].n == 1)
            return add->in[1 - k];
    return G_NONE;
}

/* an arange from `start` to `limit` by 1 holds limit - start integers */
static g_dim range_length(const g_graph *g, const g_node *n, const aten_ints *ints)
{
    const aten_ints *s = &ints[n->in[0]], *l = &ints[n->in[1]], *d = &ints[n->in[2]];
    int64_t step;
    int length = aten_range_offset_length(g, n, ints);
    if (length != G_NONE)
        return ints[length].d[0];
    if (!s->known || !l->known || !d->known || !g_dim_is_const(d->d[0], &step) || step != 1)
        return g_dim_unknown();
    return g_dim_sub(l->d[0], s->d[0]);
}

ferry_status aten_refine_shapes(g_graph *g, fy_err *err)
{
    aten_ints *ints = constant_ints(g);
    if (!ints)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    ferry_status st = FERRY_OK;
    for (size_t i = 0; i < g->n_nodes && st == FERRY_OK; i++) {
        g_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        if (n->op == G_RANGE) {
            g_value *y = &g->values[n->out[0]];
            if (y->shape.d[0].unknown)
                y->shape.d[0] = range_length(g, n, ints);
        } else {
            g_typed outs[G_MAX_OUT];
            int n_out = 0;
            if ((st = g_infer(g, n, outs, &n_out, err)) != FERRY_OK)
                break;
            for (int k = 0; k < n_out && k < n->n_out; k++) {
                g_value *y = &g->values[n->out[k]];
                for (int d = 0; d < y->shape.rank && d < outs[k].shape.rank; d++)
                    if (y->shape.d[d].unknown && !outs[k].shape.d[d].unknown)
                        y->shape.d[d] = outs[k].shape.d[d];
            }
        }
        track_node(g, n, ints);
    }
    free(ints);
    return st;
}

int aten_dim_expr(g_dim d, char *buf, size_t size)
{
    size_t len = 0;
    int w = 0;
    buf[0] = '\0';
    for (int i = 0; i < d.n; i++) {
        int64_t k = d.t[i].coef;
        const char *sign = i == 0 ? (k < 0 ? "-" : "") : (k < 0 ? " - " : " + ");
        int64_t mag = k < 0 ? -k : k;
        if (mag == 1)
            w = snprintf(buf + len, size - len, "%ss%d", sign, d.t[i].sym);
        else
            w = snprintf(buf + len, size - len, "%s%lld*s%d", sign, (long long)mag, d.t[i].sym);
        if (w < 0 || (size_t)w >= size - len)
            return -1;
        len += (size_t)w;
    }
    if (d.c != 0 || d.n == 0) {
        if (d.n == 0)
            w = snprintf(buf + len, size - len, "%lld", (long long)d.c);
        else
            w = snprintf(buf + len, size - len, " %s %lld", d.c < 0 ? "-" : "+",
                         (long long)(d.c < 0 ? -d.c : d.c));
        if (w < 0 || (size_t)w >= size - len)
            return -1;
        len += (size_t)w;
    }
    return (int)len;
}
