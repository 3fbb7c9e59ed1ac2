/* shape.c — arithmetic and printing of symbolic dimensions. */
#include "ir/shape.h"

#include <stdio.h>
#include <string.h>

g_dim g_dim_const(int64_t c)
{
    g_dim d;
    memset(&d, 0, sizeof d);
    d.c = c;
    return d;
}

g_dim g_dim_sym(int sym)
{
    g_dim d = g_dim_const(0);
    d.n = 1;
    d.t[0].sym = sym;
    d.t[0].coef = 1;
    return d;
}

g_dim g_dim_unknown(void)
{
    g_dim d = g_dim_const(0);
    d.unknown = true;
    return d;
}

/* Merges the sorted term lists of a and k*b. */
static g_dim combine(g_dim a, g_dim b, int64_t k)
{
    if (a.unknown || b.unknown)
        return g_dim_unknown();
    g_dim r = g_dim_const(a.c + k * b.c);
    int i = 0, j = 0;
    while (i < a.n || j < b.n) {
        g_term t;
        if (j >= b.n || (i < a.n && a.t[i].sym < b.t[j].sym)) {
            t = a.t[i++];
        } else if (i >= a.n || b.t[j].sym < a.t[i].sym) {
            t = b.t[j++];
            t.coef *= k;
        } else {
            t = a.t[i++];
            t.coef += k * b.t[j++].coef;
        }
        if (t.coef == 0)
            continue;
        if (r.n == G_MAX_TERMS)
            return g_dim_unknown();
        r.t[r.n++] = t;
    }
    return r;
}

g_dim g_dim_add(g_dim a, g_dim b) { return combine(a, b, 1); }
g_dim g_dim_sub(g_dim a, g_dim b) { return combine(a, b, -1); }

g_dim g_dim_scale(g_dim a, int64_t k)
{
    if (a.unknown)
        return a;
    if (k == 0)
        return g_dim_const(0);
    a.c *= k;
    for (int i = 0; i < a.n; i++)
        a.t[i].coef *= k;
    return a;
}

bool g_dim_eq(g_dim a, g_dim b)
{
    if (a.unknown || b.unknown || a.c != b.c || a.n != b.n)
        return false;
    for (int i = 0; i < a.n; i++)
        if (a.t[i].sym != b.t[i].sym || a.t[i].coef != b.t[i].coef)
            return false;
    return true;
}

bool g_dim_is_const(g_dim a, int64_t *value)
{
    if (a.unknown || a.n != 0)
        return false;
    if (value)
        *value = a.c;
    return true;
}

bool g_dim_match(g_dim a, g_dim b)
{
    /* Builders derive every dim from the same symbols, so dims that must agree are the same
     * canonical expression; "sequence" where "batch" was meant is a mistake, not a coincidence
     * to allow for. Only an extent that depends on data cannot be checked. */
    return a.unknown || b.unknown || g_dim_eq(a, b);
}

int g_dim_print(g_dim a, const g_symtab *syms, char *buf, size_t size)
{
    if (a.unknown)
        return snprintf(buf, size, "?");
    size_t len = 0;
    int w;
    buf[0] = '\0';
#define APPEND(...)                                                                 \
    do {                                                                            \
        w = snprintf(buf + (len < size ? len : size), len < size ? size - len : 0, \
                     __VA_ARGS__);                                                  \
        len += (size_t)w;                                                           \
    } while (0)
    for (int i = 0; i < a.n; i++) {
        const char *name = (syms && a.t[i].sym < syms->n) ? syms->s[a.t[i].sym].name : "?";
        int64_t k = a.t[i].coef;
        const char *sep = i == 0 ? (k < 0 ? "-" : "") : (k < 0 ? " - " : " + ");
        int64_t mag = k < 0 ? -k : k;
        if (mag == 1)
            APPEND("%s%s", sep, name);
        else
            APPEND("%s%lld*%s", sep, (long long)mag, name);
    }
    if (a.n == 0)
        APPEND("%lld", (long long)a.c);
    else if (a.c > 0)
        APPEND(" + %lld", (long long)a.c);
    else if (a.c < 0)
        APPEND(" - %lld", (long long)-a.c);
#undef APPEND
    return (int)len;
}

bool g_sym_count_in_units(g_symtab *t, g_dim *d, int64_t k, const char *prefix)
{
    if (k < 1 || d->unknown || d->c != 0 || d->n != 1 || d->t[0].coef != 1 ||
        d->t[0].sym < 0 || d->t[0].sym >= t->n)
        return false;
    g_sym *y = &t->s[d->t[0].sym];
    char name[G_SYM_NAME_MAX];
    if (snprintf(name, sizeof name, "%s%s", prefix, y->name) >= (int)sizeof name)
        return false;
    int64_t min = (y->min + k - 1) / k, max = y->max / k;
    if (min < 1)
        min = 1;
    if (y->max && max < min)
        return false;
    memcpy(y->name, name, sizeof name);
    y->min = min;
    y->max = max;
    y->example = y->example / k > min ? y->example / k : min;
    *d = g_dim_scale(*d, k);
    return true;
}

bool g_dim_example(g_dim a, const g_symtab *syms, int64_t *value)
{
    if (a.unknown)
        return false;
    int64_t v = a.c;
    for (int i = 0; i < a.n; i++) {
        if (!syms || a.t[i].sym >= syms->n)
            return false;
        v += a.t[i].coef * syms->s[a.t[i].sym].example;
    }
    *value = v;
    return true;
}

int g_symtab_find(const g_symtab *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->s[i].name, name) == 0)
            return i;
    return -1;
}

int g_symtab_add(g_symtab *t, const char *name, int64_t min, int64_t max, int64_t example)
{
    int i = g_symtab_find(t, name);
    if (i >= 0)
        return i;
    if (t->n == G_MAX_SYMS || strlen(name) >= G_SYM_NAME_MAX)
        return -1;
    g_sym *s = &t->s[t->n];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->min = min;
    s->max = max;
    s->example = example;
    return t->n++;
}

bool g_shape_broadcast(const g_shape *a, const g_shape *b, g_shape *out)
{
    int rank = a->rank > b->rank ? a->rank : b->rank;
    g_shape r;
    r.rank = rank;
    for (int i = 0; i < rank; i++) {
        int ia = a->rank - rank + i, ib = b->rank - rank + i;
        g_dim da = ia >= 0 ? a->d[ia] : g_dim_const(1);
        g_dim db = ib >= 0 ? b->d[ib] : g_dim_const(1);
        int64_t ca, cb;
        bool ka = g_dim_is_const(da, &ca), kb = g_dim_is_const(db, &cb);
        if (ka && ca == 1)
            r.d[i] = db;
        else if (kb && cb == 1)
            r.d[i] = da;
        else if (g_dim_eq(da, db))
            r.d[i] = da;
        else if (ka && kb)
            return false;
        else if (da.unknown)
            r.d[i] = db;
        else if (db.unknown)
            r.d[i] = da;
        else
            r.d[i] = g_dim_unknown();
    }
    *out = r;
    return true;
}

bool g_shape_eq(const g_shape *a, const g_shape *b)
{
    if (a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank; i++) {
        if (a->d[i].unknown && b->d[i].unknown)
            continue;
        if (!g_dim_eq(a->d[i], b->d[i]))
            return false;
    }
    return true;
}

int g_reshape_literal(const g_shape *in, const g_shape *t, int64_t *spec)
{
    int free_dims = 0;
    for (int i = 0; i < t->rank; i++) {
        int64_t c;
        if (g_dim_is_const(t->d[i], &c))
            spec[i] = c;
        else if (!t->d[i].unknown && i < in->rank && g_dim_eq(t->d[i], in->d[i]))
            spec[i] = 0;
        else
            spec[i] = -1, free_dims++;
    }
    return free_dims;
}
