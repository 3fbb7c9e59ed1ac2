/* pt2_writer.c — the pieces of the ExportedProgram's JSON (pt2_printer.h): unique Python
 * identifiers for every name, tensor metadata with symbolic sizes and their hints, a node and
 * its arguments (written into a frame of its own, so that an argument may first need a node of
 * its own: a SymInt, a shape made a tensor), and the SymInt nodes that read symbols off the
 * inputs (aten.sym_size) and compute from them (_operator.add/mul). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/torch/pt2_printer.h"

ferry_status pt_fail(pt_printer *p, ferry_status st, const char *fmt, ...)
{
    if (p->st != FERRY_OK)
        return p->st;
    va_list ap;
    va_start(ap, fmt);
    char msg[sizeof p->err->msg];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->st = fy_fail(p->err, st, "%s", msg);
    return p->st;
}

void pt2_json_str(strbuf *b, const char *s)
{
    sb_puts(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            sb_printf(b, "\\%c", *c);
        else if (*c < 0x20)
            sb_printf(b, "\\u%04x", *c);
        else
            sb_printf(b, "%c", *c);
    }
    sb_puts(b, "\"");
}

int pt_scalar_type(ferry_dtype dt)
{
    switch (dt) {
    case FERRY_U8: return 1;
    case FERRY_I8: return 2;
    case FERRY_I16: return 3;
    case FERRY_I32: return 4;
    case FERRY_I64: return 5;
    case FERRY_F16: return 6;
    case FERRY_F32: return 7;
    case FERRY_F64: return 8;
    case FERRY_BOOL: return 12;
    case FERRY_BF16: return 13;
    default: return 0;
    }
}

/* ---- names ---- */

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static bool is_taken(const pt_printer *p, const char *s)
{
    if (!p->cap_taken)
        return false;
    for (size_t i = hash_name(s) & (p->cap_taken - 1);; i = (i + 1) & (p->cap_taken - 1)) {
        if (!p->taken[i])
            return false;
        if (strcmp(p->taken[i], s) == 0)
            return true;
    }
}

static const char *take(pt_printer *p, const char *s)
{
    if (p->st != FERRY_OK)
        return NULL;
    if ((p->n_taken + 1) * 2 > p->cap_taken) {
        size_t cap = p->cap_taken ? p->cap_taken * 2 : 1024;
        char **t = calloc(cap, sizeof *t);
        if (!t) {
            pt_fail(p, FERRY_ERR_NOMEM, "out of memory");
            return NULL;
        }
        for (size_t i = 0; i < p->cap_taken; i++) {
            if (!p->taken[i])
                continue;
            size_t k = hash_name(p->taken[i]) & (cap - 1);
            while (t[k])
                k = (k + 1) & (cap - 1);
            t[k] = p->taken[i];
        }
        free(p->taken);
        p->taken = t, p->cap_taken = cap;
    }
    size_t k = hash_name(s) & (p->cap_taken - 1);
    while (p->taken[k])
        k = (k + 1) & (p->cap_taken - 1);
    if (!(p->taken[k] = strdup(s))) {
        pt_fail(p, FERRY_ERR_NOMEM, "out of memory");
        return NULL;
    }
    p->n_taken++;
    return p->taken[k];
}

/* A Python identifier from `base`: what the graph module's code names each node. */
const char *pt_fresh(pt_printer *p, const char *base)
{
    char s[PT_NAME_MAX + 24];
    size_t n = 0;
    for (const char *c = base; *c && n < PT_NAME_MAX; c++) {
        bool word = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                    (*c >= '0' && *c <= '9') || *c == '_';
        if (!word && (n == 0 || s[n - 1] == '_'))
            continue; /* "/model/layers.0/" -> "model_layers_0_" */
        s[n++] = word ? *c : '_';
    }
    while (n && s[n - 1] == '_')
        n--;
    if (n == 0 || (s[0] >= '0' && s[0] <= '9'))
        memmove(s + 2, s, n), s[0] = 'v', s[1] = '_', n += 2;
    s[n] = '\0';
    char cand[sizeof s + 24];
    snprintf(cand, sizeof cand, "%s", s);
    for (unsigned k = 1; is_taken(p, cand); k++)
        snprintf(cand, sizeof cand, "%s_%u", s, k);
    return take(p, cand);
}

/* ---- sizes ---- */

/* The value torch's shape environment gives a symbol while it retraces (run_decompositions, AOT
 * compilation, which needs one for every size): the traced value, but never 0 or 1 where the
 * range allows 2, as torch.export's own examples must be (it specialises a symbol whose hint is
 * 0 or 1: ferry's traced batch of 1 would pin the batch). */
static int64_t symbol_hint(const g_sym *y)
{
    if (y->example >= 2 || (y->max != 0 && y->max < 2))
        return y->example;
    return 2;
}

int64_t pt2_dim_hint(g_dim d, const g_symtab *syms)
{
    int64_t v = d.c;
    for (int i = 0; i < d.n; i++)
        v += d.t[i].coef * symbol_hint(&syms->s[d.t[i].sym]);
    return v;
}

static void put_symint(strbuf *b, g_dim d, const g_symtab *syms)
{
    int64_t c;
    if (g_dim_is_const(d, &c)) {
        sb_printf(b, "{\"as_int\": %lld}", (long long)c);
        return;
    }
    char expr[256];
    aten_dim_expr(d, expr, sizeof expr);
    sb_puts(b, "{\"as_expr\": {\"expr_str\": ");
    pt2_json_str(b, expr);
    sb_printf(b, ", \"hint\": {\"as_int\": %lld}}}", (long long)pt2_dim_hint(d, syms));
}

/* A contiguous tensor's stride of axis k: the product of the later dims. */
static void put_stride(strbuf *b, const g_shape *s, int k, const g_symtab *syms)
{
    int64_t c = 1, hint = 1;
    strbuf expr = {0};
    for (int i = k + 1; i < s->rank; i++) {
        int64_t v;
        if (g_dim_is_const(s->d[i], &v)) {
            c *= v;
            continue;
        }
        char e[256];
        aten_dim_expr(s->d[i], e, sizeof e);
        sb_printf(&expr, "%s(%s)", expr.len ? "*" : "", e);
        hint *= pt2_dim_hint(s->d[i], syms);
    }
    if (!expr.len)
        sb_printf(b, "{\"as_int\": %lld}", (long long)c);
    else {
        char head[32];
        snprintf(head, sizeof head, "%lld*", (long long)c);
        sb_puts(b, "{\"as_expr\": {\"expr_str\": ");
        strbuf full = {0};
        sb_printf(&full, "%s%s", c == 1 ? "" : head, expr.data);
        pt2_json_str(b, full.data ? full.data : "");
        sb_printf(b, ", \"hint\": {\"as_int\": %lld}}}", (long long)(hint * c));
        if (full.oom)
            b->oom = true;
        sb_free(&full);
    }
    if (expr.oom)
        b->oom = true;
    sb_free(&expr);
}

void pt2_tensor_meta(strbuf *b, ferry_dtype dt, const g_shape *s, const g_symtab *syms,
                     int64_t storage_offset)
{
    sb_printf(b, "{\"dtype\": %d, \"sizes\": [", pt_scalar_type(dt));
    for (int k = 0; k < s->rank; k++) {
        sb_puts(b, k ? ", " : "");
        put_symint(b, s->d[k], syms);
    }
    sb_puts(b, "], \"requires_grad\": false, \"device\": {\"type\": \"cpu\", \"index\": null}, "
               "\"strides\": [");
    for (int k = 0; k < s->rank; k++) {
        sb_puts(b, k ? ", " : "");
        put_stride(b, s, k, syms);
    }
    sb_printf(b, "], \"storage_offset\": {\"as_int\": %lld}, \"layout\": 7}",
              (long long)storage_offset);
}

void pt_tensor_value(pt_printer *p, const char *name, ferry_dtype dt, const g_shape *s)
{
    for (int k = 0; k < s->rank; k++)
        if (s->d[k].unknown) {
            pt_fail(p, FERRY_ERR_UNSUPPORTED, "pt2: the extent of axis %d of '%s' depends on "
                    "data, which a torch program cannot size", k, name);
            return;
        }
    if (!pt_scalar_type(dt)) {
        pt_fail(p, FERRY_ERR_UNSUPPORTED, "pt2: '%s' is %s, which torch has no dtype for", name,
                ferry_dtype_name(dt));
        return;
    }
    strbuf *b = &p->tensor_values;
    sb_puts(b, p->n_tensor_values++ ? ", " : "");
    pt2_json_str(b, name);
    sb_puts(b, ": ");
    pt2_tensor_meta(b, dt, s, &p->g->syms, 0);
}

/* ---- nodes ---- */

static struct pt_frame *frame(pt_printer *p)
{
    return &p->frame[p->depth - 1];
}

void pt_node_begin(pt_printer *p, const char *target)
{
    if (p->depth == PT_MAX_DEPTH) {
        pt_fail(p, FERRY_ERR_INTERNAL, "pt2: nodes nested too deep");
        return;
    }
    struct pt_frame *f = &p->frame[p->depth++];
    f->b = (strbuf){0};
    f->first_arg = true;
    snprintf(f->target, sizeof f->target, "%s", target);
    sb_printf(&f->b, "{\"target\": \"%s\", \"inputs\": [", target);
}

static strbuf *arg_begin(pt_printer *p, const char *arg, int kind)
{
    struct pt_frame *f = frame(p);
    sb_printf(&f->b, "%s{\"name\": \"%s\", \"kind\": %d, \"arg\": ", f->first_arg ? "" : ", ",
              arg, kind);
    f->first_arg = false;
    return &f->b;
}

void pt_arg(pt_printer *p, const char *arg, int kind, const char *fmt, ...)
{
    if (!p->depth)
        return;
    strbuf *b = arg_begin(p, arg, kind);
    char text[512], *heap = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof text) { /* a long list of names (a concat's tensors) */
        if (!(heap = malloc((size_t)n + 1))) {
            b->oom = true;
            return;
        }
        va_start(ap, fmt);
        vsnprintf(heap, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    sb_printf(b, "%s}", heap ? heap : text);
    free(heap);
}

void pt_arg_tensor(pt_printer *p, const char *arg, int v, int kind)
{
    const char *name = pt_tensor(p, v);
    if (!name || !p->depth)
        return;
    strbuf *b = arg_begin(p, arg, kind);
    sb_puts(b, "{\"as_tensor\": {\"name\": ");
    pt2_json_str(b, name);
    sb_puts(b, "}}}");
}

void pt_arg_symint(pt_printer *p, const char *arg, int kind, g_dim d)
{
    int64_t c;
    if (g_dim_is_const(d, &c)) {
        pt_arg(p, arg, kind, "{\"as_int\": %lld}", (long long)c);
        return;
    }
    const char *name = pt_symint(p, d);
    if (name)
        pt_arg(p, arg, kind, "{\"as_sym_int\": {\"as_name\": \"%s\"}}", name);
}

void pt_arg_symints(pt_printer *p, const char *arg, int kind, const g_dim *d, int n)
{
    const char *names[G_MAX_RANK] = {0};
    bool symbolic = false;
    for (int i = 0; i < n; i++) {
        int64_t c;
        if (!g_dim_is_const(d[i], &c)) {
            symbolic = true;
            if (!(names[i] = pt_symint(p, d[i])))
                return;
        }
    }
    if (!p->depth)
        return;
    strbuf *b = arg_begin(p, arg, kind);
    sb_puts(b, symbolic ? "{\"as_sym_ints\": [" : "{\"as_ints\": [");
    for (int i = 0; i < n; i++) {
        int64_t c = 0;
        g_dim_is_const(d[i], &c);
        if (!symbolic)
            sb_printf(b, "%s%lld", i ? ", " : "", (long long)c);
        else if (names[i])
            sb_printf(b, "%s{\"as_name\": \"%s\"}", i ? ", " : "", names[i]);
        else
            sb_printf(b, "%s{\"as_int\": %lld}", i ? ", " : "", (long long)c);
    }
    sb_puts(b, "]}}");
}

static void node_end(pt_printer *p, const char *outputs, const char *name)
{
    if (!p->depth)
        return;
    struct pt_frame *f = frame(p);
    sb_printf(&f->b, "], \"outputs\": [%s], \"metadata\": ", outputs);
    pt_module_metadata(p, &f->b);
    sb_printf(&f->b, ", \"name\": \"%s\"}", name);
    if (f->b.oom)
        p->nodes.oom = true;
    sb_puts(&p->nodes, p->n_nodes++ ? ",\n" : "");
    sb_puts(&p->nodes, f->b.data ? f->b.data : "");
    sb_free(&f->b);
    p->depth--;
}

void pt_node_end_tensor(pt_printer *p, const char *name, ferry_dtype dt, const g_shape *s)
{
    if (!name)
        return;
    char out[PT_NAME_MAX + 64];
    snprintf(out, sizeof out, "{\"as_tensor\": {\"name\": \"%s\"}}", name);
    node_end(p, out, name);
    pt_tensor_value(p, name, dt, s);
}

void pt_node_end_tensors(pt_printer *p, const char *node, int n, const char *const *names,
                         const ferry_dtype *dts, const g_shape *shapes)
{
    strbuf out = {0};
    for (int i = 0; i < n; i++) {
        if (!names[i]) {
            sb_free(&out);
            return;
        }
        sb_printf(&out, "%s{\"as_tensor\": {\"name\": \"%s\"}}", i ? ", " : "", names[i]);
    }
    if (out.oom) {
        p->nodes.oom = true;
        sb_free(&out);
        return;
    }
    node_end(p, out.data, node ? node : names[0]);
    sb_free(&out);
    for (int i = 0; i < n; i++)
        pt_tensor_value(p, names[i], dts[i], &shapes[i]);
}

static void sym_value(pt_printer *p, const char *name, g_dim d)
{
    strbuf *b = &p->sym_int_values;
    sb_printf(b, "%s\"%s\": ", p->n_sym_int_values++ ? ", " : "", name);
    put_symint(b, d, &p->g->syms);
}

static void node_end_symint(pt_printer *p, const char *name, g_dim d)
{
    if (!name)
        return;
    char out[PT_NAME_MAX + 64];
    snprintf(out, sizeof out, "{\"as_sym_int\": {\"as_name\": \"%s\"}}", name);
    node_end(p, out, name);
    sym_value(p, name, d);
}

/* ---- SymInts ---- */

static const char *memo(pt_printer *p, g_dim d, const char *name)
{
    if (!name)
        return NULL;
    if (p->n_syms == p->cap_syms) {
        size_t cap = p->cap_syms ? p->cap_syms * 2 : 32;
        pt_sym *s = realloc(p->syms, cap * sizeof *s);
        if (!s) {
            pt_fail(p, FERRY_ERR_NOMEM, "out of memory");
            return NULL;
        }
        p->syms = s, p->cap_syms = cap;
    }
    p->syms[p->n_syms++] = (pt_sym){d, (char *)name};
    return name;
}

/* The SymInt already computed for `d`, or NULL. */
static const char *known(const pt_printer *p, g_dim d)
{
    for (size_t i = 0; i < p->n_syms; i++)
        if (g_dim_eq(p->syms[i].d, d))
            return p->syms[i].name;
    return NULL;
}

/* a op b over SymInts (b a name, or a constant when b_name is NULL) */
static const char *sym_op(pt_printer *p, const char *op, const char *a, const char *b_name,
                          int64_t b, g_dim result)
{
    const char *name = pt_fresh(p, op);
    if (!a || !name)
        return NULL;
    char target[32];
    snprintf(target, sizeof target, "_operator.%s", op);
    pt_node_begin(p, target);
    pt_arg(p, "a", PT_POSITIONAL, "{\"as_sym_int\": {\"as_name\": \"%s\"}}", a);
    if (b_name)
        pt_arg(p, "b", PT_POSITIONAL, "{\"as_sym_int\": {\"as_name\": \"%s\"}}", b_name);
    else
        pt_arg(p, "b", PT_POSITIONAL, "{\"as_int\": %lld}", (long long)b);
    node_end_symint(p, name, result);
    return name;
}

/* sym_size of the input axis `sym` is read off (g_input_symbol), divided by the axis's
 * multiple of it where it is one */
static const char *symbol_node(pt_printer *p, int sym)
{
    int v, axis;
    int64_t k;
    g_dim d = g_dim_sym(sym);
    if (!g_input_symbol(p->g, sym, &v, &axis, &k)) {
        pt_fail(p, FERRY_ERR_UNSUPPORTED, "pt2: symbol '%s' is no input's axis, so the program "
                "cannot read it", p->g->syms.s[sym].name);
        return NULL;
    }
    g_dim extent = g_dim_scale(d, k);
    const char *x = pt_tensor(p, v);
    const char *name = pt_fresh(p, "sym_size_int");
    if (!x || !name)
        return NULL;
    pt_node_begin(p, "torch.ops.aten.sym_size.int");
    pt_arg_tensor(p, "self", v, PT_POSITIONAL);
    pt_arg(p, "dim", PT_POSITIONAL, "{\"as_int\": %d}", axis);
    node_end_symint(p, name, extent);
    if (k == 1)
        return name;
    memo(p, extent, name);
    return sym_op(p, "floordiv", name, NULL, k, d);
}

const char *pt_symint(pt_printer *p, g_dim d)
{
    int64_t c;
    if (p->st != FERRY_OK || g_dim_is_const(d, &c))
        return NULL;
    if (d.unknown) {
        pt_fail(p, FERRY_ERR_UNSUPPORTED, "pt2: a size that depends on data, which a torch "
                "program cannot compute from its symbols");
        return NULL;
    }
    const char *named = known(p, d);
    if (named)
        return named;
    g_term last = d.t[d.n - 1];
    if (d.c != 0) { /* (the terms) + c */
        g_dim terms = d;
        terms.c = 0;
        return memo(p, d, sym_op(p, "add", pt_symint(p, terms), NULL, d.c, d));
    }
    if (d.n > 1) { /* (the other terms) + k * s */
        g_dim head = d, tail = g_dim_scale(g_dim_sym(last.sym), last.coef);
        head.n--;
        const char *a = pt_symint(p, head), *b = pt_symint(p, tail);
        return memo(p, d, b ? sym_op(p, "add", a, b, 0, d) : NULL);
    }
    if (last.coef != 1) { /* k * s, which reading s may have read off an input's axis */
        const char *s = pt_symint(p, g_dim_sym(last.sym));
        const char *read = s ? known(p, d) : NULL;
        return read ? read : memo(p, d, sym_op(p, "mul", s, NULL, last.coef, d));
    }
    return memo(p, d, symbol_node(p, last.sym));
}

/* ---- the aten sink: each call the emitter hands over, a JSON node ---- */

static pt_printer *printer(aten_sink *s)
{
    return (pt_printer *)(void *)s; /* the sink is the printer's first member */
}

/* The program's name of tensor `t`: a graph value's, or a temporary's. */
static const char *ref_name(pt_printer *p, aten_t t)
{
    if (t >= 0)
        return pt_tensor(p, t);
    size_t k = (size_t)ATEN_TEMP_INDEX(t);
    if (t == ATEN_NONE || k >= p->n_temps) {
        pt_fail(p, FERRY_ERR_INTERNAL, "pt2: no tensor %d", t);
        return NULL;
    }
    return p->temps[k];
}

/* A temporary named `name`: its ref. */
static aten_t add_temp(pt_printer *p, const char *name)
{
    if (!name)
        return ATEN_NONE;
    if (p->n_temps == p->cap_temps) {
        size_t cap = p->cap_temps ? p->cap_temps * 2 : 64;
        const char **t = realloc(p->temps, cap * sizeof *t);
        if (!t) {
            pt_fail(p, FERRY_ERR_NOMEM, "out of memory");
            return ATEN_NONE;
        }
        p->temps = t, p->cap_temps = cap;
    }
    p->temps[p->n_temps] = name;
    return ATEN_TEMP((int)p->n_temps++);
}

static void sink_begin(aten_sink *s, const char *op)
{
    char t[96];
    snprintf(t, sizeof t, "torch.ops.aten.%s", op);
    pt_node_begin(printer(s), t);
}

static void sink_tensor(aten_sink *s, const char *arg, int kind, aten_t t)
{
    pt_printer *p = printer(s);
    const char *name = ref_name(p, t);
    if (!name || !p->depth)
        return;
    strbuf *b = arg_begin(p, arg, kind);
    sb_puts(b, "{\"as_tensor\": {\"name\": ");
    pt2_json_str(b, name);
    sb_puts(b, "}}}");
}

static void sink_tensors(aten_sink *s, const char *arg, int kind, const aten_t *t, int n,
                         bool optional)
{
    pt_printer *p = printer(s);
    strbuf list = {0};
    for (int i = 0; i < n; i++) {
        sb_puts(&list, i ? ", " : "");
        if (optional && t[i] == ATEN_NONE) {
            sb_puts(&list, "{\"as_none\": true}");
            continue;
        }
        const char *name = ref_name(p, t[i]);
        if (!name) {
            sb_free(&list);
            return;
        }
        sb_printf(&list, optional ? "{\"as_tensor\": {\"name\": \"%s\"}}" : "{\"name\": \"%s\"}",
                  name);
    }
    if (list.oom) {
        sb_free(&list);
        pt_fail(p, FERRY_ERR_NOMEM, "out of memory");
        return;
    }
    pt_arg(p, arg, kind, optional ? "{\"as_optional_tensors\": [%s]}" : "{\"as_tensors\": [%s]}",
           list.data ? list.data : "");
    sb_free(&list);
}

static void sink_integer(aten_sink *s, const char *arg, int kind, int64_t v)
{
    pt_arg(printer(s), arg, kind, "{\"as_int\": %lld}", (long long)v);
}

static void sink_number(aten_sink *s, const char *arg, int kind, double v)
{
    if (isfinite(v))
        pt_arg(printer(s), arg, kind, "{\"as_float\": %.17g}", v);
    else
        pt_arg(printer(s), arg, kind, "{\"as_float\": \"%s\"}",
               isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
}

static void sink_boolean(aten_sink *s, const char *arg, int kind, bool v)
{
    pt_arg(printer(s), arg, kind, "{\"as_bool\": %s}", v ? "true" : "false");
}

static void sink_string(aten_sink *s, const char *arg, int kind, const char *v)
{
    pt_arg(printer(s), arg, kind, "{\"as_string\": \"%s\"}", v);
}

static void sink_none(aten_sink *s, const char *arg, int kind)
{
    pt_arg(printer(s), arg, kind, "{\"as_none\": true}");
}

static void sink_ints(aten_sink *s, const char *arg, int kind, const int64_t *v, int n)
{
    char list[G_MAX_INTS * 2 * 24 + 64] = "";
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%lld", i ? ", " : "",
                                (long long)v[i]);
    pt_arg(printer(s), arg, kind, "{\"as_ints\": [%s]}", list);
}

static void sink_symint(aten_sink *s, const char *arg, int kind, g_dim d)
{
    pt_arg_symint(printer(s), arg, kind, d);
}

static void sink_symints(aten_sink *s, const char *arg, int kind, const g_dim *d, int n)
{
    pt_arg_symints(printer(s), arg, kind, d, n);
}

static void sink_scalar_type(aten_sink *s, const char *arg, int kind, ferry_dtype dt)
{
    pt_arg(printer(s), arg, kind, "{\"as_scalar_type\": %d}", pt_scalar_type(dt));
}

static void sink_device_cpu(aten_sink *s, const char *arg, int kind)
{
    pt_arg(printer(s), arg, kind, "{\"as_device\": {\"type\": \"cpu\", \"index\": null}}");
}

/* A graph value's name in the program: the IR's, less the "_output_0" it gives node outputs. */
static const char *value_name(pt_printer *p, int v)
{
    char trimmed[200];
    snprintf(trimmed, sizeof trimmed, "%s", p->g->values[v].name);
    size_t len = strlen(trimmed);
    const char *suffix = "_output_0";
    if (len > strlen(suffix) && strcmp(trimmed + len - strlen(suffix), suffix) == 0)
        trimmed[len - strlen(suffix)] = '\0';
    const char *name = pt_fresh(p, trimmed);
    if (name)
        p->names[v] = (char *)name;
    return name;
}

static void sink_end(aten_sink *s, int n, const aten_out *outs, const char *node, aten_t *refs)
{
    pt_printer *p = printer(s);
    const char *names[G_MAX_OUT];
    ferry_dtype dts[G_MAX_OUT];
    g_shape shapes[G_MAX_OUT];
    for (int k = 0; k < n && k < G_MAX_OUT; k++) {
        if (outs[k].value != G_NONE) {
            names[k] = value_name(p, outs[k].value);
            refs[k] = names[k] ? outs[k].value : ATEN_NONE;
        } else {
            names[k] = pt_fresh(p, outs[k].base);
            refs[k] = add_temp(p, names[k]);
        }
        dts[k] = outs[k].dtype;
        shapes[k] = outs[k].shape;
    }
    if (n == 1)
        pt_node_end_tensor(p, names[0], dts[0], &shapes[0]);
    else
        pt_node_end_tensors(p, pt_fresh(p, node), n, names, dts, shapes);
}

static aten_t sink_tied_head(aten_sink *s, int value, const char *key)
{
    pt_printer *p = printer(s);
    return add_temp(p, pt_tied_head(p, value, key));
}

static bool sink_failed(const aten_sink *s)
{
    return ((const pt_printer *)(const void *)s)->st != FERRY_OK;
}

static void sink_fail(aten_sink *s, ferry_status st, const char *msg)
{
    pt_fail(printer(s), st, "pt2: %s", msg);
}

const aten_sink_ops pt_sink_ops = {
    .begin = sink_begin, .tensor = sink_tensor, .tensors = sink_tensors,
    .integer = sink_integer, .number = sink_number, .boolean = sink_boolean,
    .string = sink_string, .none = sink_none, .ints = sink_ints, .symint = sink_symint,
    .symints = sink_symints, .scalar_type = sink_scalar_type, .device_cpu = sink_device_cpu,
    .end = sink_end, .tied_head = sink_tied_head, .failed = sink_failed, .fail = sink_fail,
};
