/* describe.c — ferry_exported_describe: what an export holds, as `ferry inspect` prints it,
 * read from its validated export.json (through the library's own reader) and the sizes of its
 * files. Every string from export.json, and the directory, goes through quote (text_quote):
 * the manifest was validated when loaded, but what reaches a terminal is escaped here all the
 * same. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "export/internal.h"
#include "util/strbuf.h"
#include "util/text.h"

/* Several quoted strings go into one line: each result stays valid for the next QUOTE_RING - 1
 * calls on this thread. */
#define QUOTE_RING 16

static const char *quote(const char *text)
{
    static _Thread_local char ring[QUOTE_RING][1024];
    static _Thread_local int next;
    next = (next + 1) % QUOTE_RING;
    return text_quote(text ? text : "?", ring[next], sizeof ring[next]);
}

static void print_size(strbuf *b, const char *dir, const char *file)
{
    char path[8192];
    struct stat st;
    int n = snprintf(path, sizeof path, "%s/%s", dir, file);
    if (n < 0 || (size_t)n >= sizeof path) { /* never stat a path cut short */
        sb_printf(b, "    %-28s (%s)\n", quote(file), strerror(ENAMETOOLONG));
        return;
    }
    if (stat(path, &st) != 0) {
        sb_printf(b, "    %-28s (missing)\n", quote(file));
        return;
    }
    double size = (double)st.st_size;
    const char *unit = "B";
    if (size >= 1e9) size /= 1e9, unit = "GB";
    else if (size >= 1e6) size /= 1e6, unit = "MB";
    else if (size >= 1e3) size /= 1e3, unit = "KB";
    sb_printf(b, "    %-28s %8.1f %s\n", quote(file), size, unit);
}

/* Numbers in export.json are integers as ferry writes them, but the file may have been edited:
 * one that is not an integer below 2^53 in magnitude is shown as "?" rather than converted
 * (converting 1e300 to an integer type is undefined behaviour). */
static bool int_value(const cJSON *v, long long *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d > -9007199254740992.0 && d < 9007199254740992.0))  /* also false for NaN */
        return false;
    long long i = (long long)d;
    if ((double)i != d)
        return false;
    *out = i;
    return true;
}

static const char *int_text(const cJSON *v, char *buf, size_t size)
{
    long long i;
    if (!int_value(v, &i))
        return "?";
    snprintf(buf, size, "%lld", i);
    return buf;
}

static void print_dims(const cJSON *arr, char *buf, size_t size)
{
    size_t len = 0;
    const cJSON *d;
    len += (size_t)snprintf(buf, size, "[");
    cJSON_ArrayForEach(d, arr) {
        if (len >= size)
            break;
        const char *sep = d->prev && d != arr->child ? ", " : "";
        char num[32];
        if (cJSON_IsNumber(d))
            len += (size_t)snprintf(buf + len, size - len, "%s%s", sep,
                                    int_text(d, num, sizeof num));
        else if (cJSON_IsString(d))
            len += (size_t)snprintf(buf + len, size - len, "%s%s", sep, d->valuestring);
        else
            len += (size_t)snprintf(buf + len, size - len, "%s?", sep);
    }
    if (len < size)
        snprintf(buf + len, size - len, "]");
}

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
static void print_io(strbuf *b, const char *title, const cJSON *list, bool brief)
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
        print_dims(cJSON_GetObjectItemCaseSensitive(v, "shape"), r->shape, sizeof r->shape);
        print_dims(cJSON_GetObjectItemCaseSensitive(v, "traced_shape"), r->traced,
                   sizeof r->traced);
    }
    group_rows(rows, n, brief);
    for (i = 0; i < n; i++) {
        if (rows[i].leader != i)
            continue;
        int w = (int)strlen(quote(group_name(rows, n, i, 0, name, sizeof name)));
        int sw = (int)strlen(quote(rows[i].shape));
        name_w = w > name_w && w < 80 ? w : name_w;
        shape_w = sw > shape_w && sw < 80 ? sw : shape_w;
    }
    for (i = 0; i < n; i++) {
        if (rows[i].leader != i)
            continue;
        sb_printf(b, "    %-*s %-9s %-*s traced %s", name_w,
                  quote(group_name(rows, n, i, 0, name, sizeof name)), quote(rows[i].dtype),
                  shape_w, quote(rows[i].shape), quote(rows[i].traced));
        if (rows[i].count > 1)
            sb_printf(b, "  x%d", rows[i].count);
        sb_puts(b, "\n");
    }
    free(rows);
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "?";
}

/* str, escaped for printing. */
static const char *qstr(const cJSON *o, const char *key)
{
    return quote(str(o, key));
}

static long long num(const cJSON *o, const char *key)
{
    long long i;
    return int_value(cJSON_GetObjectItemCaseSensitive(o, key), &i) ? i : -1;
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
        rows[i].name[1] = outputs ? str(p, "output") : NULL;
        i++;
    }
    group_rows(rows, *n, brief);
    return rows;
}

/* Each pair's input, one a line: the tensors a runtime carries or the caller passes again. */
static void print_pair_inputs(strbuf *b, const cJSON *cache, bool brief)
{
    int n;
    io_row *rows = pair_rows(cache, false, brief, &n);
    char name[1024];
    if (!rows) {
        sb_puts(b, "    (out of memory)\n");
        return;
    }
    for (int i = 0; i < n; i++) {
        if (rows[i].leader != i)
            continue;
        const char *in = group_name(rows, n, i, 0, name, sizeof name);
        sb_printf(b, "    %s", quote(in ? in : "?"));
        if (rows[i].count > 1)
            sb_printf(b, "  x%d", rows[i].count);
        sb_puts(b, "\n");
    }
    free(rows);
}

static void print_cache(strbuf *b, const cJSON *cache, bool stateful, bool brief)
{
    if (!cJSON_IsObject(cache))
        return;
    const char *impl = str(cache, "implementation");
    sb_printf(b, "  cache: %s, %lld layers x %lld kv heads x head_dim %lld, %s", quote(impl),
              num(cache, "layers"), num(cache, "kv_heads"), num(cache, "head_dim"),
              qstr(cache, "dtype"));
    if (num(cache, "max_cache_len") > 0)
        sb_printf(b, ", max_cache_len %lld", num(cache, "max_cache_len"));
    if (stateful) {
        /* OpenVINO: the cache is the model's state, not its inputs and outputs */
        sb_printf(b, "\n  stateful: the cache lives in the model's variables (ReadValue/Assign), "
                  "beam_idx reorders its rows; variables:\n");
        print_pair_inputs(b, cache, brief);
        return;
    }
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cache, "pairs"), 0);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(first, "written_into_input"))) {
        /* pt2: the program writes the new rows into the tensors it is given */
        sb_puts(b, "\n  written in place into these inputs (pass the same tensors every "
                   "call):\n");
        print_pair_inputs(b, cache, brief);
        return;
    }
    sb_printf(b, "\n  %s\n", strcmp(impl, "static") == 0
                            ? "in-place pairs (bind each input and its output to one buffer):"
                            : "cache inputs -> outputs:");
    int n;
    io_row *rows = pair_rows(cache, true, brief, &n);
    char in_name[1024], out_name[1024];
    if (!rows) {
        sb_puts(b, "    (out of memory)\n");
        return;
    }
    for (int i = 0; i < n; i++) {
        if (rows[i].leader != i)
            continue;
        const char *in = group_name(rows, n, i, 0, in_name, sizeof in_name);
        sb_printf(b, "    %-44s -> %s", in ? quote(in) : "(none: starts empty)",
                  quote(group_name(rows, n, i, 1, out_name, sizeof out_name)));
        if (rows[i].count > 1)
            sb_printf(b, "  x%d", rows[i].count);
        sb_puts(b, "\n");
    }
    free(rows);
}

/* "name version, name version, ..." of transformers' metadata.packages. */
static void print_packages(strbuf *b, const cJSON *md)
{
    const cJSON *p, *pk = cJSON_GetObjectItemCaseSensitive(md, "packages");
    if (!pk || !pk->child)
        return;
    sb_printf(b, "  packages:");
    cJSON_ArrayForEach(p, pk)
        sb_printf(b, "%s %s %s", p == pk->child ? "" : ",", quote(p->string),
                  quote(cJSON_IsString(p) ? p->valuestring : "?"));
    sb_printf(b, "\n");
}

/* What a transformers runner returns: out_spec's root type and, for a ModelOutput or a dict, its
 * keys (the context, JSON text), then how many leaves are tensors (not out_constants). The
 * spec was checked when loaded. */
static void print_out_spec(strbuf *b, const cJSON *md)
{
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(md, "out_spec");
    cJSON *spec = cJSON_IsString(text) ? cJSON_Parse(text->valuestring) : NULL;
    const cJSON *root = cJSON_GetArrayItem(spec, 1);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "type");
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(root, "context");
    cJSON *keys = cJSON_IsString(ctx) ? cJSON_Parse(ctx->valuestring) : NULL;
    sb_printf(b, "  returns: %s", cJSON_IsString(type) ? quote(type->valuestring)
                            : cJSON_IsObject(root) ? "a tensor" : "(no out_spec)");
    if (cJSON_IsArray(keys) && keys->child) {
        const cJSON *k;
        sb_printf(b, " (");
        cJSON_ArrayForEach(k, keys)
            sb_printf(b, "%s%s", k == keys->child ? "" : ", ",
                      quote(cJSON_IsString(k) ? k->valuestring : "?"));
        sb_printf(b, ")");
    }
    sb_printf(b, "\n");
    cJSON_Delete(keys);
    cJSON_Delete(spec);
}

/* transformers' traced kwargs: a tensor's dtype and traced shape, a mapping's leaves, or the
 * type of anything else (a cache object). */
static void print_kwargs(strbuf *b, const cJSON *kwargs, int depth)
{
    const cJSON *k;
    cJSON_ArrayForEach(k, kwargs) {
        const cJSON *leaves = cJSON_GetObjectItemCaseSensitive(k, "leaves");
        const cJSON *container = cJSON_GetObjectItemCaseSensitive(k, "container");
        char traced[256] = "[]";
        sb_printf(b, "    %*s%-20s ", 2 * depth, "", quote(k->string));
        if (cJSON_IsObject(leaves)) {
            sb_printf(b, "(mapping)\n");
            if (depth < 4)
                print_kwargs(b, leaves, depth + 1);
        } else if (cJSON_IsString(container)) {
            sb_printf(b, "(%s)\n", quote(container->valuestring));
        } else {
            print_dims(cJSON_GetObjectItemCaseSensitive(k, "shape"), traced, sizeof traced);
            sb_printf(b, "%-9s traced %s\n", qstr(k, "dtype"), quote(traced));
        }
    }
}

/* An export transformers' ExportedModel.save_pretrained wrote: its schema has no producer,
 * roles, data files or symbolic shapes, but each component's ExportMetadata. */
static void inspect_transformers(strbuf *b, const ferry_exported *e, const cJSON *m)
{
    const cJSON *comps = cJSON_GetObjectItemCaseSensitive(m, "components"), *c;
    const cJSON *first_md = cJSON_GetObjectItemCaseSensitive(comps ? comps->child : NULL,
                                                             "metadata");
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(first_md, "packages"), "transformers");
    sb_printf(b, "export %s\n  format %s, producer transformers %s, architecture %s\n"
              "  schema: transformers' (ExportedModel.save_pretrained; its from_pretrained loads "
              "it)\n", quote(ferry_exported_dir(e)), qstr(m, "export_format"),
              quote(cJSON_IsString(version) ? version->valuestring : "?"),
              qstr(first_md, "architecture"));
    int i = 0;
    cJSON_ArrayForEach(c, comps) {
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(c, "metadata");
        sb_printf(b, "\ncomponent %s (precision %s, traced on %s)\n  files:\n", quote(c->string),
                  qstr(md, "export_dtype"), qstr(md, "export_device"));
        print_size(b, ferry_exported_dir(e), ferry_exported_component_file(e, i));
        if (ferry_exported_component_data_file(e, i))
            print_size(b, ferry_exported_dir(e), ferry_exported_component_data_file(e, i));
        sb_printf(b, "  inputs (the call's keyword arguments, as traced):\n");
        print_kwargs(b, cJSON_GetObjectItemCaseSensitive(md, "kwargs"), 0);
        print_out_spec(b, md);
        print_packages(b, md);
        i++;
    }
}

/* Whether some component's metadata (kwargs, the inputs transformers' runner passes) names
 * position_ids, which transformers' own exports compute inside and its callers do not pass. */
static bool takes_positions(const cJSON *m)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "components")) {
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(c, "metadata");
        if (cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(md, "kwargs"),
                                             "position_ids"))
            return true;
    }
    return false;
}

/* A component reads its table with the runtime's quantized kernels (embedding_4bit), which
 * register only when executorch.kernels.quantized is imported */
static bool needs_quantized_kernels(const cJSON *m)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "components")) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(c, "metadata"), "int4_embeddings");
        if (cJSON_IsNumber(n) && n->valueint > 0)
            return true;
    }
    return false;
}

/* Whether the export was asked for a vision-language checkpoint's language model alone (its
 * components' recipe says text_only). */
static bool text_only(const cJSON *m)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "components")) {
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(c, "metadata");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(md, "export_config"), "text_only")))
            return true;
    }
    return false;
}

static void describe(strbuf *b, const ferry_exported *e, bool brief)
{
    cJSON *m = cJSON_Parse(ferry_exported_manifest(e));
    if (!m) { /* it parsed when loaded: only memory can fail here */
        sb_puts(b, "(out of memory)\n");
        return;
    }
    if (!cJSON_GetObjectItemCaseSensitive(m, "format")) { /* transformers' schema */
        inspect_transformers(b, e, m);
        cJSON_Delete(m);
        return;
    }
    const cJSON *prod = cJSON_GetObjectItemCaseSensitive(m, "producer");
    sb_printf(b, "export %s\n  format %s, producer %s %s, architecture %s\n",
              quote(ferry_exported_dir(e)),
              qstr(m, "format"), qstr(prod, "name"), qstr(prod, "version"),
              qstr(m, "architecture"));
    if (text_only(m))
        sb_puts(b, "  text-only: the checkpoint's language model alone (its vision tower is not "
                   "in this export)\n");
    const cJSON *gen = cJSON_GetObjectItemCaseSensitive(m, "generation");
    /* a stateful export says so in its components' metadata; an explicit cache does not */
    bool stateful = false, vision = false, speech = false;
    const cJSON *comp;
    cJSON_ArrayForEach(comp, cJSON_GetObjectItemCaseSensitive(m, "components")) {
        stateful |= cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(comp, "metadata"), "stateful"));
        vision |= strcmp(comp->string, "vision_embeddings_model") == 0;
        speech |= strcmp(comp->string, "encoder_model") == 0;
    }
    /* openvino-genai's pipelines read the converted tokenizer beside the model */
    int converted = 0;
    const cJSON *name;
    cJSON_ArrayForEach(name, cJSON_GetObjectItemCaseSensitive(m, "tokenizer_files"))
        converted += cJSON_IsString(name) &&
                     (!strcmp(name->valuestring, "openvino_tokenizer.xml") ||
                      !strcmp(name->valuestring, "openvino_detokenizer.xml"));
    const char *ready = converted == 2 ? "with the converted tokenizer it carries"
                                       : "once openvino-tokenizers has converted its tokenizer";
    if (cJSON_IsObject(gen))
        sb_printf(b, "  generation: %s cache%s, %s%s%s\n", qstr(gen, "cache_implementation"),
                  cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(gen, "multi_token_decode"))
                   ? ", multi-token decode" : "",
                  !stateful ? "components are run by the caller's loop"
                  : vision ? "a stateful language model beside the tower's and the text "
                             "embedding's graphs (openvino-genai's VLMPipeline runs this "
                             "directory "
                  : speech ? "a stateful decoder beside the encoder's graph (openvino-genai's "
                             "WhisperPipeline runs this directory "
                           : "one stateful graph (openvino-genai's LLMPipeline runs this "
                             "directory ",
                  stateful ? ready : "", stateful ? ")" : "");
    const cJSON *og = cJSON_GetObjectItemCaseSensitive(m, "onnxruntime_genai");
    if (cJSON_IsObject(og)) {
        const cJSON *cf = cJSON_GetObjectItemCaseSensitive(og, "config");
        const cJSON *tf = cJSON_GetObjectItemCaseSensitive(m, "tokenizer_files");
        /* og.Tokenizer reads tokenizer.json and tokenizer_config.json; a checkpoint's other
         * files (preprocessor_config.json) do not stand in for them */
        int found = 0;
        const cJSON *f;
        cJSON_ArrayForEach(f, tf)
            found += cJSON_IsString(f) && (strcmp(f->valuestring, "tokenizer.json") == 0 ||
                                           strcmp(f->valuestring, "tokenizer_config.json") == 0);
        if (cJSON_IsString(cf))
            sb_printf(b, "  onnxruntime-genai: runs this directory as it is (%s)%s\n",
                      quote(cf->valuestring),
                      cJSON_IsArray(tf) && found < 2
                       ? "; og.Tokenizer needs tokenizer.json and tokenizer_config.json, which "
                         "it does not carry" : "");
        else
            sb_printf(b, "  onnxruntime-genai: cannot run it: %s\n", qstr(og, "unsupported"));
    }
    const cJSON *tf = cJSON_GetObjectItemCaseSensitive(m, "transformers");
    const cJSON *tf_fmt = cJSON_GetObjectItemCaseSensitive(m, "export_format");
    if (tf_fmt)
        sb_printf(b, "  transformers: ExportedModel.from_pretrained loads it%s and runs each "
                  "component, given every input it takes%s\n",
                  cJSON_IsString(tf_fmt) && !strcmp(tf_fmt->valuestring, "dynamo")
                   ? " (with trust_remote_code=True: it gates every pickled torch program)"
                   : cJSON_IsString(tf_fmt) && !strcmp(tf_fmt->valuestring, "executorch") &&
                           needs_quantized_kernels(m)
                   ? " (where torchao is installed: transformers' ExecuTorch support imports it; "
                     "and after `import executorch.kernels.quantized`, which its loader does "
                     "not do)"
                   : cJSON_IsString(tf_fmt) && !strcmp(tf_fmt->valuestring, "executorch")
                   ? " (where torchao is installed: transformers' ExecuTorch support imports it)"
                   : "",
                  takes_positions(m) ? " (position_ids too: transformers derives none)" : "");
    else if (cJSON_IsObject(tf))
        sb_printf(b, "  transformers: ExportedModel.from_pretrained cannot run it: %s\n",
                  qstr(tf, "unsupported"));
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(m, "tokenizer_files"), *t;
    if (cJSON_IsArray(tok)) { /* exports made before ferry carried them have no such key */
        sb_printf(b, "  tokenizer files:");
        cJSON_ArrayForEach(t, tok)
            sb_printf(b, "%s %s", t == tok->child ? "" : ",", quote(t->valuestring));
        sb_printf(b, "%s\n",
                  tok->child ? "" : " none (the checkpoint had none, or --no-tokenizer)");
    }
    const cJSON *comps = cJSON_GetObjectItemCaseSensitive(m, "components"), *c;
    cJSON_ArrayForEach(c, comps) {
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(c, "metadata");
        const cJSON *opset = cJSON_GetObjectItemCaseSensitive(md, "opset");
        char num[32], opset_text[48] = "";
        if (opset) /* a format's own metadata: ONNX's opset */
            snprintf(opset_text, sizeof opset_text, ", opset %s", int_text(opset, num, sizeof num));
        /* what the recipe changed about the weights and ops (export_config, as recorded) */
        const cJSON *ec = cJSON_GetObjectItemCaseSensitive(md, "export_config");
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(ec, "quantizer");
        const cJSON *fu = cJSON_GetObjectItemCaseSensitive(ec, "ort_fusions");
        char quant_text[192] = "", bits[32], block[32];
        bool half = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ec, "compress_to_fp16"));
        if (half && !cJSON_IsObject(q))
            snprintf(quant_text, sizeof quant_text, ", weights stored fp16 (compress_to_fp16)");
        else if (cJSON_IsObject(q))
            snprintf(quant_text, sizeof quant_text, ", weights int%s in blocks of %s (%s%s%s%s)",
                     int_text(cJSON_GetObjectItemCaseSensitive(q, "bits"), bits, sizeof bits),
                     int_text(cJSON_GetObjectItemCaseSensitive(q, "block_size"), block,
                              sizeof block),
                     cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(q, "symmetric"))
                         ? "asymmetric" : "symmetric",
                     cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(q, "quantize_embeddings"))
                         ? ", embeddings too" : "",
                     cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(q, "quantize_lm_head"))
                         ? ", lm_head float" : "",
                     cJSON_IsString(cJSON_GetObjectItemCaseSensitive(q, "method")) &&
                             !strcmp(cJSON_GetObjectItemCaseSensitive(q, "method")->valuestring,
                                     "mse")
                         ? ", mse-searched scales" : "");
        if (half && cJSON_IsObject(q)) /* the float weights that are not quantized */
            snprintf(quant_text + strlen(quant_text), sizeof quant_text - strlen(quant_text),
                     ", other weights stored fp16");
        sb_printf(b, "\ncomponent %s (role %s, precision %s%s%s%s%s)\n  files:\n", quote(c->string),
                  qstr(c, "role"), qstr(md, "precision"), opset_text, quant_text,
                  cJSON_IsString(fu) ? ", fused for onnxruntime " : "",
                  cJSON_IsString(fu) ? qstr(ec, "ort_fusions") : "");
        print_size(b, ferry_exported_dir(e), str(c, "file"));
        const cJSON *df;
        cJSON_ArrayForEach(df, cJSON_GetObjectItemCaseSensitive(c, "data_files"))
            if (cJSON_IsString(df))
                print_size(b, ferry_exported_dir(e), df->valuestring);
        print_io(b, "inputs", cJSON_GetObjectItemCaseSensitive(md, "inputs"), brief);
        print_io(b, "outputs", cJSON_GetObjectItemCaseSensitive(md, "outputs"), brief);
        print_cache(b, cJSON_GetObjectItemCaseSensitive(md, "cache"),
                    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(md, "stateful")), brief);
        const cJSON *ro = cJSON_GetObjectItemCaseSensitive(md, "runtime_options"), *opt;
        if (cJSON_IsObject(ro) && cJSON_GetArraySize(ro) > 0) {
            /* OpenVINO 2026.4 applies KV_CACHE_PRECISION from rt_info, not the inference
             * precision (docs/design.md): a caller of another runner must pass it */
            sb_printf(b, "  runtime options (in rt_info; ferry's runner compiles with them, other "
                      "callers pass INFERENCE_PRECISION_HINT themselves):\n");
            cJSON_ArrayForEach(opt, ro)
                if (cJSON_IsString(opt))
                    sb_printf(b, "    %-24s %s\n", quote(opt->string),
                              quote(opt->valuestring));
        }
        const cJSON *planned = cJSON_GetObjectItemCaseSensitive(md, "planned_memory_bytes");
        if (cJSON_IsNumber(planned)) {
            /* an ExecuTorch program: what its method asks of the runtime */
            char bytes[32], instrs[32], consts[32];
            int n_ops = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(md, "operators"));
            const cJSON *nd = cJSON_GetObjectItemCaseSensitive(md, "delegates");
            int n_delegates = cJSON_IsNumber(nd) ? nd->valueint : 0;
            sb_printf(b, "  ExecuTorch program: method %s, %s instructions over %d kernels "
                      "(backend %s, %d delegate calls), %s constants; memory plan %s bytes (every "
                      "tensor at its largest size); load it with executorch.runtime's "
                      "Runtime.get().load_program(file)\n", qstr(md, "method"),
                      int_text(cJSON_GetObjectItemCaseSensitive(md, "instructions"), instrs,
                               sizeof instrs),
                      n_ops, qstr(ec, "backend"), n_delegates,
                      int_text(cJSON_GetObjectItemCaseSensitive(md, "constants"), consts,
                               sizeof consts),
                      int_text(planned, bytes, sizeof bytes));
            const cJSON *lin = cJSON_GetObjectItemCaseSensitive(md, "delegated_linears");
            if (cJSON_IsNumber(lin)) {
                char n_lin[32], n_nodes[32], wbytes[32];
                sb_printf(b, "  %s: %d graphs of %s nodes in all (%s of them linears; norms, "
                          "elementwise arithmetic and softmax run there too); %s bytes of their "
                          "weights as named data (XNNPACK packs them when the method loads)\n",
                          qstr(md, "delegate_backend"), n_delegates,
                          int_text(cJSON_GetObjectItemCaseSensitive(md, "delegate_nodes"),
                                   n_nodes, sizeof n_nodes),
                          int_text(lin, n_lin, sizeof n_lin),
                          int_text(cJSON_GetObjectItemCaseSensitive(md,
                                                                    "delegate_weight_bytes"),
                                   wbytes, sizeof wbytes));
            }
            const cJSON *tables = cJSON_GetObjectItemCaseSensitive(md, "int4_embeddings");
            if (cJSON_IsNumber(tables) && tables->valueint > 0)
                sb_printf(b, "  embedding table: int4 blocks read by "
                          "quantized_decomposed::embedding_4bit, one of the runtime's quantized "
                          "kernels (Python: import executorch.kernels.quantized; C++: link "
                          "libexecutorch_kernels_quantized)\n");
        }
        const cJSON *tsyms = cJSON_GetObjectItemCaseSensitive(md, "torch_symbols");
        if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(md, "verifier"))) {
            char params[32], shared[300] = "";
            bool model_output = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ec, "model_output"));
            /* the class's own name (absent: a causal LM's), and the outputs as its fields */
            const char *cls = cJSON_GetStringValue(
                cJSON_GetObjectItemCaseSensitive(md, "output_class"));
            cls = cls && strrchr(cls, '.') ? strrchr(cls, '.') + 1 : "CausalLMOutputWithPast";
            char fields[256] = "";
            size_t flen = 0;
            const cJSON *out;
            cJSON_ArrayForEach(out, cJSON_GetObjectItemCaseSensitive(md, "outputs")) {
                const char *oname = cJSON_GetStringValue(
                    cJSON_GetObjectItemCaseSensitive(out, "name"));
                if (oname && flen < sizeof fields)
                    flen += (size_t)snprintf(fields + flen, sizeof fields - flen,
                                             model_output ? "%s.%s" : "%s\"%s\": ...",
                                             flen ? ", " : "", oname);
            }
            if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(md, "lm_head_shares")))
                snprintf(shared, sizeof shared, " (lm_head.weight over %s's storage, stored "
                         "once)", qstr(md, "lm_head_shares"));
            sb_printf(b, "  torch.export program: schema %s, %s IR, %s parameters%s; call "
                      "torch.export.load(file).module() with the inputs as keywords, it returns "
                      "%s%s%s%s%s\n", qstr(md, "schema_version"), qstr(md, "verifier"),
                      int_text(cJSON_GetObjectItemCaseSensitive(md, "parameters"), params,
                            sizeof params), shared,
                      model_output ? "transformers' " : "{", model_output ? cls : "",
                      model_output ? " (" : "", quote(fields),
                      model_output ? "; import transformers.modeling_outputs before loading it)"
                                : "}");
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(md, "example_inputs")))
                sb_printf(b, "  example inputs: in the archive (program.example_inputs), so "
                          "AOTInductor compiles the program as loaded\n");
            else if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(md, "no_example_inputs")))
                sb_printf(b, "  example inputs: none (%s): set program.example_inputs before "
                          "AOTInductor compiles it\n", qstr(md, "no_example_inputs"));
        }
        const cJSON *syms = cJSON_GetObjectItemCaseSensitive(md, "symbols"), *s;
        if (cJSON_IsObject(syms) && cJSON_GetArraySize(syms) > 0) {
            sb_printf(b, "  symbols:\n");
            cJSON_ArrayForEach(s, syms) {
                const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "min");
                const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "max");
                const cJSON *tr = cJSON_GetObjectItemCaseSensitive(s, "traced");
                const cJSON *ts = cJSON_GetObjectItemCaseSensitive(tsyms, s->string);
                char mins[32], maxs[32], trs[32];
                sb_printf(b, "    %-20s min %s, max %s, traced %s%s%s\n", quote(s->string),
                          int_text(mn, mins, sizeof mins),
                          cJSON_IsNumber(mx) ? int_text(mx, maxs, sizeof maxs) : "unbounded",
                          int_text(tr, trs, sizeof trs), cJSON_IsString(ts) ? ", torch " : "",
                          cJSON_IsString(ts) ? quote(ts->valuestring) : "");
            }
        }
    }
    cJSON_Delete(m);
}

static const char *describe_into(ferry_exported *e, bool brief)
{
    if (!e || !e->manifest_text)
        return NULL;
    strbuf b = {0};
    describe(&b, e, brief);
    free(e->description);
    e->description = sb_take(&b);
    return e->description;
}

const char *ferry_exported_describe(ferry_exported *e)
{
    return describe_into(e, false);
}

const char *ferry_exported_describe_brief(ferry_exported *e)
{
    return describe_into(e, true);
}
