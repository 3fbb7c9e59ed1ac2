/* shape.h — symbolic dimensions: affine expressions c + sum(k_i * sym_i) over named symbols
 * (batch, sequence, past_sequence, ...) with [min, max] ranges, plus an "unknown" dim for
 * values whose extent depends on data (the result of a computed reshape, say). */
#ifndef FERRY_IR_SHAPE_H
#define FERRY_IR_SHAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define G_MAX_RANK 8
#define G_MAX_TERMS 3
#define G_MAX_SYMS 16
#define G_SYM_NAME_MAX 64

typedef struct g_term {
    int sym;
    int64_t coef;
} g_term;

typedef struct g_dim {
    int64_t c;
    int n;                   /* number of terms */
    bool unknown;
    g_term t[G_MAX_TERMS];   /* sorted by sym, coef != 0 */
} g_dim;

typedef struct g_shape {
    int rank;
    g_dim d[G_MAX_RANK];
} g_shape;

typedef struct g_sym {
    char name[G_SYM_NAME_MAX];
    int64_t min, max;        /* max 0 = unbounded */
    int64_t example;         /* the traced value */
} g_sym;

typedef struct g_symtab {
    g_sym s[G_MAX_SYMS];
    int n;
} g_symtab;

g_dim g_dim_const(int64_t c);
g_dim g_dim_sym(int sym);
g_dim g_dim_unknown(void);
/* a + b, a - b and k * a; unknown if either is unknown or the terms do not fit. */
g_dim g_dim_add(g_dim a, g_dim b);
g_dim g_dim_sub(g_dim a, g_dim b);
g_dim g_dim_scale(g_dim a, int64_t k);
bool g_dim_eq(g_dim a, g_dim b);
/* A reshape target `t` of `in` as the literal ONNX and OpenVINO take (special zero): each dim a
 * constant, 0 where it is the input's dim at the same axis, or -1 (solved from the element
 * count); returns how many are -1 (more than one: the shape must be computed at run time). */
int g_reshape_literal(const g_shape *in, const g_shape *t, int64_t *spec);
bool g_dim_is_const(g_dim a, int64_t *value);
/* Whether two dims that must agree do: the same expression, or either unknown (data-dependent,
 * checked at run time). */
bool g_dim_match(g_dim a, g_dim b);

/* Prints "7", "sequence" or "past_sequence + sequence" (unknown prints "?"). Returns the
 * snprintf-style length. */
int g_dim_print(g_dim a, const g_symtab *syms, char *buf, size_t size);
/* Value of the dim with every symbol at its example value; false if unknown. */
bool g_dim_example(g_dim a, const g_symtab *syms, int64_t *value);

/* Adds a symbol or returns the index of the one with that name (updating nothing). -1 if full. */
int g_symtab_add(g_symtab *t, const char *name, int64_t min, int64_t max, int64_t example);
int g_symtab_find(const g_symtab *t, const char *name);
/* Recounts the symbol that `d` is (alone, coefficient 1) in units of `k`: the symbol becomes
 * `prefix` + its name, its range and example divided by k (the range rounded inwards), and *d
 * becomes k times it. An extent that is a whole number of units can then be divided by k
 * exactly (affine dims hold no division), as torch's programs need every extent to be an
 * expression of their inputs' symbols. False (nothing changed) where `d` is not one symbol,
 * the new name does not fit or the range holds no multiple of k. */
bool g_sym_count_in_units(g_symtab *t, g_dim *d, int64_t k, const char *prefix);

/* Numpy-style broadcast of two shapes; false if they cannot broadcast. */
bool g_shape_broadcast(const g_shape *a, const g_shape *b, g_shape *out);
bool g_shape_eq(const g_shape *a, const g_shape *b);

#endif
