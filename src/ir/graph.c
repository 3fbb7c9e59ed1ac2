/* graph.c — the IR's storage: values (inputs, node outputs, constants, lazy weights), nodes,
 * the state table, and the op table generated from ops.def. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "util/dtype.h"
#include "util/grow.h"

static const g_op_info OPS[] = {
#define PRIM false
#define SEM true
#define OP(id, name, kind, min_in, max_in, max_out, attrs, infer) \
    {name, kind, min_in, max_in, max_out, attrs},
#include "ir/ops.def"
#undef OP
#undef PRIM
#undef SEM
};
_Static_assert(sizeof OPS / sizeof OPS[0] == G_OP_COUNT, "op table out of step with ops.def");

const g_op_info *g_op_info_of(g_op op)
{
    return (unsigned)op < G_OP_COUNT ? &OPS[op] : NULL;
}

const char *g_op_name(g_op op)
{
    return (unsigned)op < G_OP_COUNT ? OPS[op].name : "?";
}

bool g_op_is_semantic(g_op op)
{
    return (unsigned)op < G_OP_COUNT && OPS[op].semantic;
}

/* Frees the owned option structs of an attribute set (and forgets them). */
static void free_opts(g_attrs *a)
{
    free(a->rope);
    free(a->attn);
    free(a->ext);
    free(a->conv);
    free(a->moe);
    a->rope = NULL;
    a->attn = NULL;
    a->ext = NULL;
    a->conv = NULL;
    a->moe = NULL;
}

g_graph *g_new(void)
{
    return calloc(1, sizeof(g_graph));
}

void g_free(g_graph *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->n_values; i++) {
        free(g->values[i].name);
        free(g->values[i].data);
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        free(g->nodes[i].name);
        free_opts(&g->nodes[i].a);
    }
    for (size_t i = 0; i < g->n_states; i++)
        free(g->states[i].name);
    for (size_t i = 0; i < g->n_modules; i++) {
        free(g->modules[i].scope);
        free(g->modules[i].fqn);
        free(g->modules[i].cls);
    }
    free(g->modules);
    free(g->module_slots);
    for (size_t i = 0; i < g->n_source_lists; i++)
        free(g->source_lists[i]);
    free(g->source_lists);
    free(g->values);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    free(g->states);
    free(g->leaf_slots);
    free(g);
}

bool g_ok(const g_graph *g)
{
    return g && g->err.status == FERRY_OK;
}

int g_fail(g_graph *g, ferry_status status, const char *fmt, ...)
{
    if (g->err.status != FERRY_OK)
        return G_NONE;
    char msg[sizeof g->err.msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fy_fail(&g->err, status, "%s", msg);
    return G_NONE;
}

void g_scope(g_graph *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->scope, sizeof g->scope, fmt, ap);
    va_end(ap);
}

static int oom(g_graph *g)
{
    return g_fail(g, FERRY_ERR_NOMEM, "out of memory while building the graph");
}

int g_add_value(g_graph *g, const char *name, ferry_dtype dtype, const g_shape *shape,
                g_value_kind kind)
{
    g_value *grown = fy_grow(g->values, &g->cap_values, g->n_values + 1, sizeof *grown);
    if (!grown)
        return oom(g);
    g->values = grown;
    g_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->name = strdup(name);
    if (!v->name)
        return oom(g);
    v->dtype = dtype;
    if (shape)
        v->shape = *shape;
    v->kind = kind;
    v->producer = -1;
    return (int)g->n_values++;
}

static bool push_id(g_graph *g, int **arr, size_t *n, int v)
{
    int *grown = realloc(*arr, (*n + 1) * sizeof **arr);
    if (!grown) {
        oom(g);
        return false;
    }
    *arr = grown;
    (*arr)[(*n)++] = v;
    return true;
}

int g_input(g_graph *g, const char *name, ferry_dtype dtype, int rank, const g_dim *dims)
{
    if (!g_ok(g))
        return G_NONE;
    if (rank < 0 || rank > G_MAX_RANK)
        return g_fail(g, FERRY_ERR_INTERNAL, "input '%s': rank %d", name, rank);
    g_shape s = {.rank = rank};
    for (int i = 0; i < rank; i++)
        s.d[i] = dims[i];
    int v = g_add_value(g, name, dtype, &s, GV_INPUT);
    if (v == G_NONE || !push_id(g, &g->inputs, &g->n_inputs, v))
        return G_NONE;
    return v;
}

void g_input_role_set(g_graph *g, int v, g_input_role role)
{
    if (v != G_NONE && g->values[v].kind == GV_INPUT)
        g->values[v].role = role;
}

int g_value_axis(const g_value *x, g_dim d)
{
    for (int k = 0; k < x->shape.rank; k++)
        if (!x->shape.d[k].unknown && g_dim_eq(x->shape.d[k], d))
            return k;
    return -1;
}

bool g_input_dim(const g_graph *g, g_dim d, int *value, int *axis)
{
    for (size_t i = 0; i < g->n_inputs; i++) {
        int k = g_value_axis(&g->values[g->inputs[i]], d);
        if (k >= 0) {
            *value = g->inputs[i];
            *axis = k;
            return true;
        }
    }
    return false;
}

bool g_input_symbol(const g_graph *g, int sym, int *value, int *axis, int64_t *k)
{
    *k = 0;
    for (size_t i = 0; i < g->n_inputs; i++) {
        const g_shape *x = &g->values[g->inputs[i]].shape;
        for (int a = 0; a < x->rank; a++) {
            g_dim d = x->d[a];
            if (d.unknown || d.c != 0 || d.n != 1 || d.t[0].sym != sym || d.t[0].coef < 1 ||
                (*k && d.t[0].coef >= *k))
                continue;
            *value = g->inputs[i];
            *axis = a;
            *k = d.t[0].coef;
        }
    }
    return *k > 0;
}

bool g_rename(g_graph *g, int v, const char *name)
{
    if (!g_ok(g) || v < 0 || (size_t)v >= g->n_values)
        return false;
    char *n = strdup(name);
    if (!n) {
        oom(g);
        return false;
    }
    free(g->values[v].name);
    g->values[v].name = n;
    return true;
}

void g_output(g_graph *g, int v, const char *name)
{
    if (!g_ok(g) || v < 0 || (size_t)v >= g->n_values)
        return;
    if (push_id(g, &g->outputs, &g->n_outputs, v))
        g_rename(g, v, name);
}

/* ---- the index of weights and constants: one of each distinct recipe or content per graph,
 * found by hash (a linear scan made building a 1024-layer model quadratic) ---- */

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static uint64_t weight_hash(const g_weight *w)
{
    uint64_t h = 14695981039346656037ull;
    for (int k = 0; k < w->n_src; k++) {
        const st_tensor *t = w_src(w, k);
        h = fnv(h, &t, sizeof t);
    }
    int64_t fields[8] = {w->concat_axis, w->row_begin, w->row_end, w->dtype, w->transpose,
                         w->quant.bits, w->quant.block, w->quant.symmetric};
    /* the newer fields mix in only when set, so older recipes keep their hash */
    if (w->stack || w->src_transposed || w->flatten || w->perm) {
        int64_t more[4] = {w->stack + 2 * w->stack_group, w->src_transposed, w->flatten,
                           w->perm * 65536 + w->perm_group};
        h = fnv(h, more, sizeof more);
    }
    h = fnv(h, fields, sizeof fields);
    return fnv(h, &w->offset, sizeof w->offset);
}

/* fnv's mixing a word at a time: constants can be large (a fused graph's rotary tables are
 * tens of MB), and the index only needs a spread, equality being checked byte by byte. */
static uint64_t words_hash(uint64_t h, const void *data, size_t n)
{
    const uint8_t *p = data;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 1099511628211ull;
        h ^= h >> 29;
    }
    return fnv(h, p + i, n - i);
}

static uint64_t const_hash(ferry_dtype dtype, const g_shape *s, const void *data, size_t nbytes)
{
    int64_t head[2 + G_MAX_RANK] = {dtype, s->rank};
    for (int i = 0; i < s->rank; i++)
        g_dim_is_const(s->d[i], &head[2 + i]);
    return words_hash(fnv(14695981039346656037ull, head, sizeof head), data, nbytes);
}

/* Adds value v to the index (growing it at half full). */
static bool index_add(g_graph *g, int v)
{
    if (2 * (g->leaf_n + 1) > g->leaf_cap) {
        size_t cap = g->leaf_cap ? g->leaf_cap * 2 : 256;
        int *slots = malloc(cap * sizeof *slots);
        if (!slots)
            return false;
        for (size_t i = 0; i < cap; i++)
            slots[i] = G_NONE;
        for (size_t i = 0; i < g->leaf_cap; i++) {
            int id = g->leaf_slots[i];
            if (id == G_NONE)
                continue;
            size_t at = (size_t)g->values[id].hash & (cap - 1);
            while (slots[at] != G_NONE)
                at = (at + 1) & (cap - 1);
            slots[at] = id;
        }
        free(g->leaf_slots);
        g->leaf_slots = slots;
        g->leaf_cap = cap;
    }
    size_t at = (size_t)g->values[v].hash & (g->leaf_cap - 1);
    while (g->leaf_slots[at] != G_NONE)
        at = (at + 1) & (g->leaf_cap - 1);
    g->leaf_slots[at] = v;
    g->leaf_n++;
    return true;
}

static int find_weight(const g_graph *g, const g_weight *w, uint64_t hash)
{
    if (!g->leaf_cap)
        return G_NONE;
    for (size_t at = (size_t)hash & (g->leaf_cap - 1); g->leaf_slots[at] != G_NONE;
         at = (at + 1) & (g->leaf_cap - 1)) {
        const g_value *v = &g->values[g->leaf_slots[at]];
        if (v->kind == GV_WEIGHT && w_equal(&v->weight, w))
            return g->leaf_slots[at];
    }
    return G_NONE;
}

static int find_const(const g_graph *g, ferry_dtype dtype, const g_shape *s, const void *data,
                      size_t nbytes, uint64_t hash)
{
    if (!g->leaf_cap)
        return G_NONE;
    for (size_t at = (size_t)hash & (g->leaf_cap - 1);
         g->leaf_slots[at] != G_NONE; at = (at + 1) & (g->leaf_cap - 1)) {
        const g_value *v = &g->values[g->leaf_slots[at]];
        if (v->kind == GV_CONST && v->dtype == dtype && v->nbytes == nbytes &&
            g_shape_eq(&v->shape, s) && (nbytes == 0 || memcmp(v->data, data, nbytes) == 0))
            return g->leaf_slots[at];
    }
    return G_NONE;
}

int g_weight_value(g_graph *g, const char *name, const g_weight *recipe)
{
    if (!g_ok(g))
        return G_NONE;
    uint64_t hash = weight_hash(recipe);
    int found = find_weight(g, recipe, hash);
    if (found != G_NONE)
        return found;
    int rank;
    int64_t dims[W_MAX_RANK];
    if (w_check(recipe, &rank, dims, &g->err) != FERRY_OK)
        return G_NONE;
    g_shape s = {.rank = rank};
    for (int i = 0; i < rank; i++)
        s.d[i] = g_dim_const(dims[i]);
    /* a long source list becomes the graph's own: the builder's may not outlive the call */
    const st_tensor **list = NULL;
    if (recipe->more) {
        list = malloc((size_t)recipe->n_src * sizeof *list);
        const st_tensor ***grown = list ? fy_grow(g->source_lists, &g->cap_source_lists,
                                                  g->n_source_lists + 1, sizeof *grown)
                                        : NULL;
        if (!grown) {
            free(list);
            return oom(g);
        }
        g->source_lists = grown;
        g->source_lists[g->n_source_lists++] = list;
        memcpy(list, recipe->more, (size_t)recipe->n_src * sizeof *list);
    }
    int v = g_add_value(g, name, recipe->dtype, &s, GV_WEIGHT);
    if (v == G_NONE)
        return v;
    g->values[v].weight = *recipe;
    if (list)
        g->values[v].weight.more = list;
    g->values[v].hash = hash;
    return index_add(g, v) ? v : oom(g);
}

/* g_const's work: `owned` data is the graph's once added (freed when it is not), `hash` is
 * const_hash's when the caller has it (0 when not). */
static int add_const(g_graph *g, ferry_dtype dtype, int rank, const int64_t *dims,
                     const void *data, void *owned, uint64_t hash)
{
    if (!g_ok(g)) {
        free(owned);
        return G_NONE;
    }
    uint64_t n = 1;
    g_shape s = {.rank = rank};
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0 || __builtin_mul_overflow(n, (uint64_t)dims[i], &n)) {
            free(owned);
            return g_fail(g, FERRY_ERR_INTERNAL, "constant of impossible shape");
        }
        s.d[i] = g_dim_const(dims[i]);
    }
    size_t nbytes = (size_t)dt_nbytes(dtype, n);
    if (!hash)
        hash = const_hash(dtype, &s, data, nbytes);
    int found = find_const(g, dtype, &s, data, nbytes, hash);
    if (found != G_NONE) {
        free(owned);
        return found;
    }
    char name[64];
    snprintf(name, sizeof name, "const_%zu", g->n_values);
    int v = g_add_value(g, name, dtype, &s, GV_CONST);
    if (v == G_NONE) {
        free(owned);
        return v;
    }
    g->values[v].data = owned ? owned : malloc(nbytes ? nbytes : 1);
    if (!g->values[v].data)
        return oom(g);
    if (nbytes && !owned)
        memcpy(g->values[v].data, data, nbytes);
    g->values[v].nbytes = nbytes;
    g->values[v].hash = hash;
    return index_add(g, v) ? v : oom(g);
}

int g_const(g_graph *g, ferry_dtype dtype, int rank, const int64_t *dims, const void *data)
{
    return add_const(g, dtype, rank, dims, data, NULL, 0);
}

int g_const_owned(g_graph *g, ferry_dtype dtype, int rank, const int64_t *dims, void *data)
{
    return add_const(g, dtype, rank, dims, data, data, 0);
}

int g_const_copy(g_graph *g, const g_value *x)
{
    int64_t dims[G_MAX_RANK];
    for (int i = 0; i < x->shape.rank; i++)
        g_dim_is_const(x->shape.d[i], &dims[i]);
    return add_const(g, x->dtype, x->shape.rank, dims, x->data, NULL, x->hash);
}

int g_const_i64(g_graph *g, int n, const int64_t *vals)
{
    int64_t d = n;
    return g_const(g, FERRY_I64, 1, &d, vals);
}

int g_scalar_i64(g_graph *g, int64_t v)
{
    return g_const(g, FERRY_I64, 0, NULL, &v);
}

int g_scalar_f(g_graph *g, ferry_dtype dtype, double v)
{
    uint8_t buf[8];
    float f = (float)v;
    if (dtype == FERRY_F32) {
        memcpy(buf, &f, 4);
    } else if (dtype == FERRY_F16 || dtype == FERRY_BF16) {
        uint16_t h = dtype == FERRY_F16 ? dt_f32_to_f16(f) : dt_f32_to_bf16(f);
        memcpy(buf, &h, 2);
    } else if (dtype == FERRY_F64) {
        memcpy(buf, &v, 8);
    } else {
        return g_fail(g, FERRY_ERR_INTERNAL, "float scalar of dtype %s", dt_st_name(dtype));
    }
    return g_const(g, dtype, 0, NULL, buf);
}

void g_state_add(g_graph *g, const char *name, g_state_kind kind, int layer, int in, int out,
                 bool in_place)
{
    if (!g_ok(g) || out == G_NONE)
        return;
    g_state *grown = realloc(g->states, (g->n_states + 1) * sizeof *grown);
    char *n = strdup(name);
    if (!grown || !n) {
        free(n);
        if (grown)
            g->states = grown;
        oom(g);
        return;
    }
    g->states = grown;
    g->states[g->n_states++] = (g_state){.name = n, .kind = kind, .layer = layer, .in = in,
                                         .out = out, .form = in_place ? GS_IN_PLACE : GS_PAIR};
}

bool g_state_fixed(g_state_form form)
{
    return form == GS_IN_PLACE || form == GS_MUTATED || form == GS_BUFFER;
}

int g_node_out(const g_graph *g, int v, int k)
{
    if (v < 0 || (size_t)v >= g->n_values || g->values[v].producer < 0)
        return G_NONE;
    const g_node *n = &g->nodes[g->values[v].producer];
    return k >= 0 && k < n->n_out ? n->out[k] : G_NONE;
}

/* A copy of `size` bytes of option struct `src` (NULL for none); clears *ok when out of
 * memory. */
static void *copy_opts(const void *src, size_t size, bool *ok)
{
    if (!src)
        return NULL;
    void *copy = malloc(size);
    if (copy)
        memcpy(copy, src, size);
    else
        *ok = false;
    return copy;
}

/* Deep-copies the owned option structs of an attribute set. */
static bool copy_attrs(g_attrs *dst, const g_attrs *src)
{
    bool ok = true;
    *dst = *src;
    dst->rope = copy_opts(src->rope, sizeof *src->rope, &ok);
    dst->attn = copy_opts(src->attn, sizeof *src->attn, &ok);
    dst->ext = copy_opts(src->ext, sizeof *src->ext, &ok);
    dst->conv = copy_opts(src->conv, sizeof *src->conv, &ok);
    dst->moe = copy_opts(src->moe, sizeof *src->moe, &ok);
    if (!ok)
        free_opts(dst);
    return ok;
}

int g_add_node(g_graph *g, g_op op, const char *name, int n_in, const int *in, const g_attrs *a)
{
    if (!g_ok(g))
        return G_NONE;
    const g_op_info *info = g_op_info_of(op);
    if (!info || n_in < info->min_in || n_in > info->max_in)
        return g_fail(g, FERRY_ERR_INTERNAL, "node '%s/%s': %s takes %d to %d inputs, not %d",
                      g->scope, name, g_op_name(op), info ? info->min_in : 0,
                      info ? info->max_in : 0, n_in);
    for (int i = 0; i < n_in; i++) {
        /* The graph is still healthy here, so a missing required input is a builder bug. */
        if (in[i] == G_NONE && i < info->min_in)
            return g_fail(g, FERRY_ERR_INTERNAL, "node '%s/%s': required input %d is missing",
                          g->scope, name, i);
        if (in[i] != G_NONE && (in[i] < 0 || (size_t)in[i] >= g->n_values))
            return g_fail(g, FERRY_ERR_INTERNAL, "node '%s/%s': input %d refers to no value",
                          g->scope, name, i);
    }
    g_node *grown = fy_grow(g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *grown);
    if (!grown)
        return oom(g);
    g->nodes = grown;
    g_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    char full[512];
    snprintf(full, sizeof full, "%s/%s", g->scope, name);
    if (!(n->name = strdup(full)))
        return oom(g);
    if (a && !copy_attrs(&n->a, a)) {
        free(n->name);
        return oom(g);
    }
    n->op = op;
    n->n_in = n_in;
    memcpy(n->in, in, (size_t)n_in * sizeof *in);
    g->n_nodes++;
    int node = (int)g->n_nodes - 1;

    g_typed outs[G_MAX_OUT];
    int n_out = 0;
    if (g_infer(g, &g->nodes[node], outs, &n_out, &g->err) != FERRY_OK)
        return G_NONE;
    n = &g->nodes[node];
    n->n_out = n_out;
    for (int k = 0; k < n->n_out; k++) {
        char vname[600];
        snprintf(vname, sizeof vname, "%s_output_%d", n->name, k);
        int v = g_add_value(g, vname, outs[k].dtype, &outs[k].shape, GV_NODE);
        if (v == G_NONE)
            return G_NONE;
        g->values[v].producer = node;
        g->nodes[node].out[k] = v;
    }
    return node;
}
