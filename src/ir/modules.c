/* modules.c — the graph's module table: which transformers module each node scope is, as the
 * family that built the graph declares it, and the modules a node came from. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "util/grow.h"

#define SCOPE_MAX 512

/* The index is looked up for every prefix of every node's name: a linear scan made a
 * 1024-layer model's pt2 export quadratic in its modules. */
static uint64_t scope_hash(const char *s, size_t len)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* Rebuilds the index at twice the modules' count (at least 64 slots); false: out of memory. */
static bool reindex(g_graph *g, size_t want)
{
    size_t cap = 64;
    while (cap < 2 * want)
        cap *= 2;
    int *slots = malloc(cap * sizeof *slots);
    if (!slots)
        return false;
    for (size_t i = 0; i < cap; i++)
        slots[i] = -1;
    for (size_t m = 0; m < g->n_modules; m++) {
        const char *sc = g->modules[m].scope;
        size_t at = (size_t)scope_hash(sc, strlen(sc)) & (cap - 1);
        while (slots[at] >= 0)
            at = (at + 1) & (cap - 1);
        slots[at] = (int)m;
    }
    free(g->module_slots);
    g->module_slots = slots;
    g->module_slot_cap = cap;
    return true;
}

void g_module_add(g_graph *g, const char *cls, g_op leaf_op, bool list_item, g_module_role role,
                  const char *scope_fmt, ...)
{
    if (!g_ok(g))
        return;
    char scope[SCOPE_MAX];
    va_list ap;
    va_start(ap, scope_fmt);
    int len = vsnprintf(scope, sizeof scope, scope_fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof scope || (len > 0 && scope[0] != '/') || !cls) {
        g_fail(g, FERRY_ERR_INTERNAL, "module scope '%s' is not a node-name path", scope);
        return;
    }
    if (g_module_at(g, scope, (size_t)len))
        return;
    g_module *grown = fy_grow(g->modules, &g->cap_modules, g->n_modules + 1, sizeof *grown);
    if (grown)
        g->modules = grown;
    if (!grown || (2 * (g->n_modules + 1) > g->module_slot_cap &&
                   !reindex(g, g->n_modules + 1))) {
        g_fail(g, FERRY_ERR_NOMEM, "out of memory while building the graph");
        return;
    }
    g_module *m = &g->modules[g->n_modules];
    *m = (g_module){.scope = strdup(scope), .fqn = strdup(len ? scope + 1 : ""),
                    .cls = strdup(cls), .leaf_op = leaf_op, .list_item = list_item,
                    .role = role};
    if (!m->scope || !m->fqn || !m->cls) {
        free(m->scope), free(m->fqn), free(m->cls);
        g_fail(g, FERRY_ERR_NOMEM, "out of memory while building the graph");
        return;
    }
    for (char *c = m->fqn; *c; c++)
        if (*c == '/')
            *c = '.';
    size_t at = (size_t)scope_hash(m->scope, (size_t)len) & (g->module_slot_cap - 1);
    while (g->module_slots[at] >= 0)
        at = (at + 1) & (g->module_slot_cap - 1);
    g->module_slots[at] = (int)g->n_modules++;
}

const g_module *g_module_at(const g_graph *g, const char *scope, size_t len)
{
    if (!g->module_slot_cap)
        return NULL;
    for (size_t at = (size_t)scope_hash(scope, len) & (g->module_slot_cap - 1);
         g->module_slots[at] >= 0; at = (at + 1) & (g->module_slot_cap - 1)) {
        const g_module *m = &g->modules[g->module_slots[at]];
        if (strlen(m->scope) == len && memcmp(m->scope, scope, len) == 0)
            return m;
    }
    return NULL;
}

int g_node_modules(const g_graph *g, const char *name, g_op op, const g_module **stack, int max)
{
    int depth = 0;
    if (!name || name[0] != '/')
        return 0;
    /* every prefix of the name that ends at a '/' boundary, shortest first */
    for (size_t len = 1; name[len - 1] && depth < max; len++) {
        if (name[len] != '/' && name[len] != '\0')
            continue;
        const g_module *m = g_module_at(g, name, len);
        if (m)
            stack[depth++] = m;
        if (!name[len])
            break;
    }
    /* a leaf module holds only its own op: anything else named under it is its parent's */
    if (depth > 0 && stack[depth - 1]->leaf_op != G_OP_COUNT && stack[depth - 1]->leaf_op != op)
        depth--;
    return depth;
}

g_module_role g_node_role(const g_graph *g, const g_node *n)
{
    const g_module *m = n->name ? g_module_at(g, n->name, strlen(n->name)) : NULL;
    return m && m->leaf_op == n->op ? m->role : GM_ROLE_NONE;
}

void g_modules_copy(g_graph *dst, const g_graph *src)
{
    for (size_t i = 0; i < src->n_modules; i++) {
        const g_module *m = &src->modules[i];
        g_module_add(dst, m->cls, m->leaf_op, m->list_item, m->role, "%s", m->scope);
    }
}
