/* describe_listing.c — `ferry inspect`'s listings of a component's inputs, outputs and cache:
 * one line a tensor, or, brief, one line for the tensors whose names differ only in a layer
 * number and agree in everything else. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/describe.h"

/* One line of a listing: an input or output (name[0]; dtype and shapes), or a cache pair
 * (name[0] its input, NULL for none, and name[1] its output). Rows whose names differ only in
 * a layer number, and agree in everything else, form a group that prints as one line. */
typedef struct io_row {
    const char *name[2];
    const char *dtype;
    char shape[256], traced[256];
    size_t at[2], len[2];    /* where each name's layer number is, and its digits */
    long layer;
    bool numbered;           /* every name holds the same layer number */
    int leader;              /* the row that prints this one's group */
    int count;               /* a leader's: the rows of its group */
} io_row;

/* The first run of digits in `name` that is a part of it of its own (past_key_values.3.key,
 * past_key_values_3_cumulative_length), written without a leading zero: a layer number. */
static bool layer_number(const char *name, size_t *at, size_t *len, long *value)
{
    for (const char *p = name; *p;) {
        if (!isdigit((unsigned char)*p)) {
            p++;
            continue;
        }
        const char *q = p;
        while (isdigit((unsigned char)*q))
            q++;
        bool alone = (p == name || !isalnum((unsigned char)p[-1])) &&
                     !isalnum((unsigned char)*q);
        if (alone && q - p <= 6 && (*p != '0' || q - p == 1)) {
            *at = (size_t)(p - name);
            *len = (size_t)(q - p);
            *value = strtol(p, NULL, 10);
            return true;
        }
        p = q;
    }
    return false;
}

static void row_number(io_row *r)
{
    int named = 0;
    r->numbered = true;
    for (int k = 0; k < 2 && r->numbered; k++) {
        long v = 0;
        if (!r->name[k])
            continue;
        r->numbered = layer_number(r->name[k], &r->at[k], &r->len[k], &v) &&
                      (named == 0 || v == r->layer);
        r->layer = v;
        named++;
    }
    r->numbered = r->numbered && named > 0;
}

/* a and b are one pattern at two layers, and alike otherwise. */
static bool same_pattern(const io_row *a, const io_row *b)
{
    if (!a->numbered || !b->numbered || a->layer == b->layer ||
        (a->dtype && b->dtype && strcmp(a->dtype, b->dtype)) || !a->dtype != !b->dtype ||
        strcmp(a->shape, b->shape) || strcmp(a->traced, b->traced))
        return false;
    for (int k = 0; k < 2; k++) {
        if (!a->name[k] || !b->name[k]) {
            if (a->name[k] != b->name[k])
                return false;
            continue;
        }
        if (a->at[k] != b->at[k] || strncmp(a->name[k], b->name[k], a->at[k]) ||
            strcmp(a->name[k] + a->at[k] + a->len[k], b->name[k] + b->at[k] + b->len[k]))
            return false;
    }
    return true;
}

/* Each row's group: its own in a full listing; in a brief one, with every later row of its
 * pattern (a group prints where its first row stood). */
static void group_rows(io_row *rows, int n, bool brief)
{
    for (int i = 0; i < n; i++) {
        rows[i].leader = -1;
        rows[i].count = 0;
        row_number(&rows[i]);
    }
    for (int i = 0; i < n; i++) {
        if (rows[i].leader >= 0)
            continue;
        rows[i].leader = i;
        rows[i].count = 1;
        for (int j = i + 1; brief && j < n; j++)
            if (rows[j].leader < 0 && same_pattern(&rows[i], &rows[j])) {
                rows[j].leader = i;
                rows[i].count++;
            }
    }
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* The group led by rows[g]'s name k: the name itself for a group of one, else the pattern with
 * its layers, "past_key_values.{0..29}.key" ("{0..4,6..10}" where layers are left out). */
static const char *group_name(const io_row *rows, int n, int g, int k, char *buf, size_t size)
{
    const io_row *r = &rows[g];
    if (!r->name[k])
        return NULL;
    if (r->count < 2)
        return r->name[k];
    long *layers = malloc((size_t)r->count * sizeof *layers);
    if (!layers)
        return r->name[k];
    int m = 0;
    for (int i = g; i < n && m < r->count; i++)
        if (rows[i].leader == g)
            layers[m++] = rows[i].layer;
    qsort(layers, (size_t)m, sizeof *layers, cmp_long);
    size_t used = 0;
    int w = snprintf(buf, size, "%.*s{", (int)r->at[k], r->name[k]);
    used = w > 0 ? (size_t)w : 0;
    for (int i = 0; i < m && used < size;) {
        int j = i;
        while (j + 1 < m && layers[j + 1] == layers[j] + 1)
            j++;
        w = j - i >= 2 ? snprintf(buf + used, size - used, "%s%ld..%ld", i ? "," : "",
                                  layers[i], layers[j])
            : j > i    ? snprintf(buf + used, size - used, "%s%ld,%ld", i ? "," : "", layers[i],
                                  layers[j])
                       : snprintf(buf + used, size - used, "%s%ld", i ? "," : "", layers[i]);
        used += w > 0 ? (size_t)w : 0;
        i = j + 1;
    }
    if (used < size)
        snprintf(buf + used, size - used, "}%s", r->name[k] + r->at[k] + r->len[k]);
    free(layers);
    return buf;
}

/* The columns as wide as the longest name and shape (a static cache's
 * past_key_values_0_cumulative_length, a 4-D mask's shape), at least 20 and 32. */
void desc_print_io(strbuf *b, const char *title, const cJSON *list, bool brief)
{
    const cJSON *v;
    int n = cJSON_GetArraySize(list), i = 0, name_w = 20, shape_w = 32;
    io_row *rows = calloc(n > 0 ? (size_t)n : 1, sizeof *rows);
    char name[1024];
    sb_printf(b, "  %s:\n", title);
    if (!rows) {
        sb_puts(b, "    (out of memory)\n");
        return;
    }
    cJSON_ArrayForEach(v, list) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(v, "name");
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(v, "dtype");
        io_row *r = &rows[i++];
        r->name[0] = cJSON_IsString(nm) ? nm->valuestring : "?";
        r->dtype = cJSON_IsString(dt) ? dt->valuestring : "?";
        snprintf(r->shape, sizeof r->shape, "[]");
        snprintf(r->traced, sizeof r->traced, "[]");
        desc_print_dims(cJSON_GetObjectItemCaseSensitive(v, "shape"), r->shape, sizeof r->shape);
        desc_print_dims(cJSON_GetObjectItemCaseSensitive(v, "traced_shape"), r->traced,
                   sizeof r->traced);
    }
    group_rows(rows, n, brief);
    for (i = 0; i < n; i++) {
        if (rows[i].leader != i)
            continue;
        int w = (int)strlen(desc_quote(group_name(rows, n, i, 0, name, sizeof name)));
        int sw = (int)strlen(desc_quote(rows[i].shape));
        name_w = w > name_w && w < 80 ? w : name_w;
        shape_w = sw > shape_w && sw < 80 ? sw : shape_w;
    }
    for (i = 0; i < n; i++) {
        if (rows[i].leader != i)
            continue;
        sb_printf(b, "    %-*s %-9s %-*s traced %s", name_w,
                  desc_quote(group_name(rows, n, i, 0, name, sizeof name)),
                  desc_quote(rows[i].dtype), shape_w, desc_quote(rows[i].shape),
                  desc_quote(rows[i].traced));
        if (rows[i].count > 1)
            sb_printf(b, "  x%d", rows[i].count);
        sb_puts(b, "\n");
    }
    free(rows);
}

/* A cache's pairs as rows: their input (NULL for none) and, with `outputs`, their output; NULL
 * when out of memory. */
static io_row *pair_rows(const cJSON *cache, bool outputs, bool brief, int *n)
{
    const cJSON *pairs = cJSON_GetObjectItemCaseSensitive(cache, "pairs"), *p;
    *n = cJSON_GetArraySize(pairs);
    io_row *rows = calloc(*n > 0 ? (size_t)*n : 1, sizeof *rows);
    int i = 0;
    if (!rows)
        return NULL;
    cJSON_ArrayForEach(p, pairs) {
        const cJSON *in = cJSON_GetObjectItemCaseSensitive(p, "input");
        rows[i].name[0] = cJSON_IsString(in) ? in->valuestring : NULL;
        rows[i].name[1] = outputs ? desc_str(p, "output") : NULL;
        i++;
    }
    group_rows(rows, *n, brief);
    return rows;
}

/* The cache's pairs, one line a group: with `outputs`, "input -> output" (a pair without an
 * input starts empty); without, the input alone (the tensors a runtime carries, or the caller
 * passes again). */
static void print_pairs(strbuf *b, const cJSON *cache, bool outputs, bool brief)
{
    int n;
    io_row *rows = pair_rows(cache, outputs, brief, &n);
    char in_name[1024], out_name[1024];
    if (!rows) {
        sb_puts(b, "    (out of memory)\n");
        return;
    }
    for (int i = 0; i < n; i++) {
        if (rows[i].leader != i)
            continue;
        const char *in = group_name(rows, n, i, 0, in_name, sizeof in_name);
        if (outputs)
            sb_printf(b, "    %-44s -> %s", in ? desc_quote(in) : "(none: starts empty)",
                      desc_quote(group_name(rows, n, i, 1, out_name, sizeof out_name)));
        else
            sb_printf(b, "    %s", desc_quote(in ? in : "?"));
        if (rows[i].count > 1)
            sb_printf(b, "  x%d", rows[i].count);
        sb_puts(b, "\n");
    }
    free(rows);
}

void desc_print_cache(strbuf *b, const cJSON *cache, bool stateful, bool brief)
{
    if (!cJSON_IsObject(cache))
        return;
    const char *impl = desc_str(cache, "implementation");
    sb_printf(b, "  cache: %s, %lld layers x %lld kv heads x head_dim %lld, %s", desc_quote(impl),
              desc_num(cache, "layers"), desc_num(cache, "kv_heads"), desc_num(cache, "head_dim"),
              desc_qstr(cache, "dtype"));
    if (desc_num(cache, "max_cache_len") > 0)
        sb_printf(b, ", max_cache_len %lld", desc_num(cache, "max_cache_len"));
    if (stateful) {
        /* OpenVINO: the cache is the model's state, not its inputs and outputs */
        sb_printf(b, "\n  stateful: the cache lives in the model's variables (ReadValue/Assign), "
                  "beam_idx reorders its rows; variables:\n");
        print_pairs(b, cache, false, brief);
        return;
    }
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cache, "pairs"), 0);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(first, "written_into_input"))) {
        /* pt2: the program writes the new rows into the tensors it is given */
        sb_puts(b, "\n  written in place into these inputs (pass the same tensors every "
                   "call):\n");
        print_pairs(b, cache, false, brief);
        return;
    }
    sb_printf(b, "\n  %s\n", strcmp(impl, "static") == 0
                            ? "in-place pairs (bind each input and its output to one buffer):"
                            : "cache inputs -> outputs:");
    print_pairs(b, cache, true, brief);
}
