/* manifest.c — export.json: built from an export's components, validated when loaded (schema,
 * components, and every file path confined to the export directory). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "export/internal.h"
#include "export/transformers.h"
#include "util/fs.h"
#include "util/text.h"

#define SCHEMA_VERSION 1

/* The largest export.json ferry writes, a generation export of 1024 layers (the config cap),
 * lists ~6,000 inputs and outputs per component: ~2e5 values and ~4 MB, nested 7 deep. The same
 * bounds serve the config.json next to an export that --force inspects. */
const json_limits exp_manifest_limits = {
    .kind = "manifest", .max_bytes = 16u << 20, .max_values = 1000000, .max_depth = 32,
    .utf8 = true,
};

const char *exp_torch_dtype_name(ferry_dtype dt)
{
    switch (dt) {
    case FERRY_F32: return "float32";
    case FERRY_F16: return "float16";
    case FERRY_BF16: return "bfloat16";
    case FERRY_I64: return "int64";
    case FERRY_I32: return "int32";
    case FERRY_BOOL: return "bool";
    default: return ferry_dtype_name(dt);
    }
}

static cJSON *io_list(const g_graph *g, const int *ids, size_t n)
{
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) {
        const g_value *v = &g->values[ids[i]];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", v->name);
        cJSON_AddStringToObject(o, "dtype", exp_torch_dtype_name(v->dtype));
        cJSON *shape = cJSON_AddArrayToObject(o, "shape");
        cJSON *traced = cJSON_AddArrayToObject(o, "traced_shape");
        for (int k = 0; k < v->shape.rank; k++) {
            int64_t c;
            char buf[256];
            if (g_dim_is_const(v->shape.d[k], &c)) {
                cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)c));
            } else {
                g_dim_print(v->shape.d[k], &g->syms, buf, sizeof buf);
                cJSON_AddItemToArray(shape, cJSON_CreateString(buf));
            }
            if (g_dim_example(v->shape.d[k], &g->syms, &c))
                cJSON_AddItemToArray(traced, cJSON_CreateNumber((double)c));
            else
                cJSON_AddItemToArray(traced, cJSON_CreateNull());
        }
        if (v->kind == GV_INPUT && v->bound > 0) { /* the values a call may hold, inclusive */
            cJSON *range = cJSON_AddArrayToObject(o, "value_range");
            cJSON_AddItemToArray(range, cJSON_CreateNumber(0));
            cJSON_AddItemToArray(range, cJSON_CreateNumber((double)(v->bound - 1)));
        }
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

/* Marks in `used` each symbol that a dim of the values `ids` names. */
static void mark_symbols(const g_graph *g, const int *ids, size_t n, bool *used)
{
    for (size_t i = 0; i < n; i++) {
        const g_shape *shape = &g->values[ids[i]].shape;
        for (int k = 0; k < shape->rank; k++)
            for (int t = 0; t < shape->d[k].n; t++)
                if (shape->d[k].t[t].sym >= 0 && shape->d[k].t[t].sym < G_MAX_SYMS)
                    used[shape->d[k].t[t].sym] = true;
    }
}

/* The symbols the component's inputs and outputs name: the export's others are not its own
 * (a single-token decode listed "sequence", which its program has not). */
static cJSON *symbols(const g_graph *g)
{
    const g_symtab *t = &g->syms;
    bool used[G_MAX_SYMS] = {false};
    mark_symbols(g, g->inputs, g->n_inputs, used);
    mark_symbols(g, g->outputs, g->n_outputs, used);
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < t->n && i < G_MAX_SYMS; i++) {
        if (!used[i])
            continue;
        cJSON *s = cJSON_AddObjectToObject(o, t->s[i].name);
        cJSON_AddNumberToObject(s, "min", (double)t->s[i].min);
        if (t->s[i].max > 0)
            cJSON_AddNumberToObject(s, "max", (double)t->s[i].max);
        else
            cJSON_AddNullToObject(s, "max");
        cJSON_AddNumberToObject(s, "traced", (double)t->s[i].example);
    }
    return o;
}

/* Cache geometry and the in/out names that belong together, read off the component's state
 * table, so a runtime needs no config. */
static cJSON *cache_info(const struct ferry_exported *e, const g_graph *g)
{
    cJSON *o = cJSON_CreateObject();
    bool in_place = false;
    int layers = 0;
    const g_value *key = NULL;
    for (size_t i = 0; i < g->n_states; i++) {
        const g_state *s = &g->states[i];
        in_place |= g_state_fixed(s->form);
        layers = s->layer + 1 > layers ? s->layer + 1 : layers;
        if (!key && s->kind == GS_KEY)
            key = &g->values[s->out];
    }
    int64_t kv_heads = 0, head_dim = 0;
    if (key && key->shape.rank == 4) {
        g_dim_is_const(key->shape.d[1], &kv_heads);
        g_dim_is_const(key->shape.d[3], &head_dim);
    }
    cJSON_AddStringToObject(o, "implementation", in_place ? "static" : "dynamic");
    cJSON_AddNumberToObject(o, "layers", layers);
    cJSON_AddNumberToObject(o, "kv_heads", (double)kv_heads);
    cJSON_AddNumberToObject(o, "head_dim", (double)head_dim);
    cJSON_AddStringToObject(o, "dtype", exp_torch_dtype_name(key ? key->dtype : e->cfg.dtype));
    if (in_place)
        cJSON_AddNumberToObject(o, "max_cache_len", (double)e->gen.max_cache_len);
    else
        cJSON_AddNullToObject(o, "max_cache_len");
    cJSON_AddStringToObject(o, "layout", "[batch, kv_heads, length, head_dim]");
    cJSON *pairs = cJSON_AddArrayToObject(o, "pairs");
    for (size_t i = 0; i < g->n_states; i++) {
        const g_state *s = &g->states[i];
        cJSON *p = cJSON_CreateObject();
        if (s->in != G_NONE)
            cJSON_AddStringToObject(p, "input", g->values[s->in].name);
        else
            cJSON_AddNullToObject(p, "input");
        /* a state written into its input (pt2) has no output: the input holds the new value */
        bool mutated = s->form == GS_MUTATED;
        cJSON_AddStringToObject(p, "output", g->values[mutated ? s->in : s->out].name);
        cJSON_AddBoolToObject(p, "in_place", g_state_fixed(s->form));
        if (mutated)
            cJSON_AddBoolToObject(p, "written_into_input", true);
        cJSON_AddItemToArray(pairs, p);
    }
    return o;
}

cJSON *manifest_build(const struct ferry_exported *e, fy_err *err)
{
    /* transformers' loader reads "export_format" and its ExportMetadata keys in each
     * component's metadata: written where its runners call the components (transformers.c) */
    const char *tf_why_not = tf_unsupported(e);
    const char *arch = e->model ? e->model->cfg.architecture : "";
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "schema_version", SCHEMA_VERSION);
    cJSON_AddStringToObject(m, "format", e->backend->name);
    if (!tf_why_not) /* transformers' name of the format: "dynamo" for pt2 */
        cJSON_AddStringToObject(m, "export_format", tf_format_of(e)->name);
    cJSON *prod = cJSON_AddObjectToObject(m, "producer");
    cJSON_AddStringToObject(prod, "name", "ferry");
    cJSON_AddStringToObject(prod, "version", FERRY_VERSION);
    cJSON_AddStringToObject(m, "architecture", arch);
    if (e->model)
        cJSON_AddItemToObject(m, "source", provenance_source(e->model));
    cJSON *comps = cJSON_AddObjectToObject(m, "components");
    for (int i = 0; i < e->n_components; i++) {
        const exp_component *c = &e->comps[i];
        const g_graph *g = e->lowered[i].graph;
        cJSON *o = cJSON_AddObjectToObject(comps, c->name);
        cJSON_AddStringToObject(o, "file", c->file);
        cJSON *df = cJSON_AddArrayToObject(o, "data_files");
        for (int k = 0; k < e->lowered[i].n_data_files; k++)
            cJSON_AddItemToArray(df, cJSON_CreateString(e->lowered[i].data_files[k]));
        cJSON_AddStringToObject(o, "role", c->role);
        cJSON *md = cJSON_AddObjectToObject(o, "metadata");
        cJSON_AddStringToObject(md, "architecture", arch);
        cJSON_AddItemToObject(md, "inputs", io_list(g, g->inputs, g->n_inputs));
        cJSON_AddItemToObject(md, "outputs", io_list(g, g->outputs, g->n_outputs));
        /* transformers' class of the outputs; absent: a causal LM's (every export before
         * encoders, whose export.json says nothing) */
        if (g->output_class && strcmp(g->output_class, MODEL_CAUSAL_LM_OUTPUT) != 0)
            cJSON_AddStringToObject(md, "output_class", g->output_class);
        cJSON_AddStringToObject(md, "precision", ferry_dtype_name(e->cfg.dtype));
        e->backend->describe(&e->cfg, g, md);
        cJSON_AddItemToObject(md, "symbols", symbols(g));
        cJSON_AddItemToObject(md, "export_config", export_config_to_json(&e->cfg));
        /* the export's quantizer left this component float (a speech encoder) */
        if (c->float_weights)
            cJSON_AddBoolToObject(md, "float_weights", true);
        if (g->n_states)
            cJSON_AddItemToObject(md, "cache", cache_info(e, g));
        if (!tf_why_not && tf_describe_component(e, i, md, err) != FERRY_OK) {
            cJSON_Delete(m);
            return NULL;
        }
    }
    if (tf_why_not)
        cJSON_AddStringToObject(cJSON_AddObjectToObject(m, "transformers"), "unsupported",
                                tf_why_not);
    cJSON *tok = cJSON_AddArrayToObject(m, "tokenizer_files");
    for (int i = 0; i < e->tokenizer.n; i++)
        cJSON_AddItemToArray(tok, cJSON_CreateString(e->tokenizer.f[i].name));
    const char *why_not = genai_unsupported(e);
    if (!why_not || *why_not) { /* a generation export in ONNX: whether genai runs it */
        cJSON *og = cJSON_AddObjectToObject(m, "onnxruntime_genai");
        if (!why_not)
            cJSON_AddStringToObject(og, "config", GENAI_CONFIG_FILE);
        if (!why_not && e->genai_processor_text)
            cJSON_AddStringToObject(og, "processor_config", genai_processor_file(e));
        else
            cJSON_AddStringToObject(og, "unsupported", why_not);
    }
    if (e->generation) {
        cJSON *gen = cJSON_AddObjectToObject(m, "generation");
        cJSON_AddBoolToObject(gen, "multi_token_decode", e->gen.multi_token_decode);
        cJSON_AddStringToObject(gen, "cache_implementation",
                                e->gen.static_cache ? "static" : "dynamic");
        if (e->gen.static_cache)
            cJSON_AddNumberToObject(gen, "max_cache_len", (double)e->gen.max_cache_len);
        /* the rows of a learned position table (Whisper's, GPT-2's): a runner refuses a call
         * past them, which onnxruntime fails inside the graph and OpenVINO runs on with zeros */
        const model_arch *family = e->model ? e->model->arch : NULL;
        int64_t positions = family && family->max_sequence
                                ? family->max_sequence(e->model->hparams) : 0;
        if (positions > 0)
            cJSON_AddNumberToObject(gen, "max_positions", (double)positions);
        cJSON_AddStringToObject(gen, "generation_config", "generation_config.json");
    }
    return m;
}

/* Names and paths from export.json are quoted (control bytes and invalid UTF-8 as \xNN) so that
 * a hostile manifest cannot break the one-line error message. */
ferry_status manifest_check_file(const char *dir, const char *comp, const char *rel,
                                 long long *size, fy_err *err)
{
    char qcomp[TEXT_QUOTE_MAX], qrel[TEXT_QUOTE_MAX];
    text_quote(comp, qcomp, sizeof qcomp);
    text_quote(rel, qrel, sizeof qrel);
    if (!fs_safe_relative(rel))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s' names the file "
                       "'%s', which is not a plain relative path inside the export", dir, qcomp,
                       qrel);
    int inside = fs_inside(dir, rel);
    if (inside < 0 && errno == ENAMETOOLONG)
        return fy_fail(err, FERRY_ERR_IO, "%s/export.json: component '%s': file '%s': path too "
                       "long to resolve (its real path, the working directory's included for a "
                       "relative one, must fit in %d bytes to be checked)", dir, qcomp, qrel,
                       PATH_MAX - 1);
    if (inside < 0)
        return fy_fail(err, FERRY_ERR_IO, "%s/export.json: component '%s': file '%s': cannot "
                       "resolve its real path: %s", dir, qcomp, qrel, strerror(errno));
    if (!inside)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': file '%s' is "
                       "missing or leaves the export directory", dir, qcomp, qrel);
    /* A directory, FIFO or device in place of a model file would make a runtime fail or hang
     * later, far from the cause. */
    char path[PATH_MAX];
    struct stat st;
    if (fs_join(path, sizeof path, dir, rel, err) != FERRY_OK)
        return err->status;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': file '%s' is not "
                       "a regular file", dir, qcomp, qrel);
    if (size)
        *size = (long long)st.st_size;
    return FERRY_OK;
}

/* A serialized ModelProto begins with a field's tag: ferry, onnx and torch.onnx write fields in
 * number order, so 0x08 (ir_version, a varint), but protobuf allows any order. These are the
 * tags of ModelProto's fields with their wire types: 1 ir_version, 2-4 producer_name,
 * producer_version, domain, 5 model_version, 6 doc_string, 7 graph, 8 opset_import,
 * 14 metadata_props, and the two-byte tags of 20 training_info, 21 functions, 25
 * configuration. JSON ('{'), XML ('<'), a zip ('P') and text start with none of them. */
static bool onnx_magic(const unsigned char *b, size_t n)
{
    static const unsigned char one[] = {0x08, 0x12, 0x1a, 0x22, 0x28, 0x32, 0x3a, 0x42, 0x72};
    if (n >= 1 && memchr(one, b[0], sizeof one))
        return true;
    return n >= 2 && (b[0] == 0xa2 || b[0] == 0xaa || b[0] == 0xca) && b[1] == 0x01;
}

/* OpenVINO's reader takes <?xml ...?> or the <net> element first, after an optional UTF-8 BOM
 * and whitespace. */
static bool openvino_magic(const unsigned char *b, size_t n)
{
    size_t i = n >= 3 && b[0] == 0xef && b[1] == 0xbb && b[2] == 0xbf ? 3 : 0;
    while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n'))
        i++;
    return (n - i >= 5 && memcmp(b + i, "<?xml", 5) == 0) ||
           (n - i >= 4 && memcmp(b + i, "<net", 4) == 0);
}

/* a .pt2 is a zip archive, its first entry's local header at byte 0 */
static bool pt2_magic(const unsigned char *b, size_t n)
{
    return n >= 4 && memcmp(b, "PK\x03\x04", 4) == 0;
}

/* The program files each format's runtime reads, by export.json's format name (ferry's, and
 * transformers' names for the same formats). A file of another kind (export.json, config.json)
 * named as a component's would pass every other check and fail in the runtime with its own
 * words (onnxruntime's InvalidProtobuf), naming neither the component nor the file. */
static const struct program_kind {
    const char *format, *suffix, *what, *first_bytes;
    bool (*magic)(const unsigned char *b, size_t n);
} PROGRAM_KINDS[] = {
    {"onnx", ".onnx", "an ONNX model", "a protobuf ModelProto's", onnx_magic},
    {"openvino", ".xml", "an OpenVINO IR", "<?xml or <net (after any BOM and whitespace)",
     openvino_magic},
    {"pt2", ".pt2", "a pt2 program", "a zip archive's (PK\\x03\\x04)", pt2_magic},
    {"dynamo", ".pt2", "a pt2 program", "a zip archive's (PK\\x03\\x04)", pt2_magic},
    {"executorch", ".pte", "an ExecuTorch program", NULL, NULL},
};

/* how many leading bytes the checks read: whitespace before <?xml beyond this is refused */
#define MAGIC_BYTES 256

ferry_status manifest_check_program(const char *dir, const char *comp, const char *rel,
                                    const char *format, bool content, fy_err *err)
{
    const struct program_kind *k = NULL;
    for (size_t i = 0; i < sizeof PROGRAM_KINDS / sizeof *PROGRAM_KINDS; i++)
        if (strcmp(PROGRAM_KINDS[i].format, format) == 0)
            k = &PROGRAM_KINDS[i];
    if (!k)
        return FERRY_OK; /* the manifest's format was refused before, or has no program file */
    char qcomp[TEXT_QUOTE_MAX], qrel[TEXT_QUOTE_MAX];
    text_quote(comp, qcomp, sizeof qcomp);
    text_quote(rel, qrel, sizeof qrel);
    size_t len = strlen(rel), sl = strlen(k->suffix);
    if (len <= sl || strcmp(rel + len - sl, k->suffix) != 0)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': file '%s' is "
                       "not %s: %s program files end in %s", dir, qcomp, qrel, k->what,
                       format, k->suffix);
    char path[PATH_MAX];
    if (fs_join(path, sizeof path, dir, rel, err) != FERRY_OK)
        return err->status;
    if (k->magic && content) {
        unsigned char head[MAGIC_BYTES];
        FILE *f = fopen(path, "rb");
        if (!f)
            return fy_fail(err, FERRY_ERR_IO, "%s/export.json: component '%s': file '%s': "
                           "cannot open it: %s", dir, qcomp, qrel, strerror(errno));
        size_t n = fread(head, 1, sizeof head, f);
        bool failed = ferror(f) != 0;
        fclose(f);
        if (failed)
            return fy_fail(err, FERRY_ERR_IO, "%s/export.json: component '%s': file '%s': "
                           "cannot read it", dir, qcomp, qrel);
        if (!k->magic(head, n))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': file '%s' "
                           "is not %s: its first bytes are not %s", dir, qcomp, qrel, k->what,
                           k->first_bytes);
    }
    /* OpenVINO reads the weights from the .bin of the same stem, whatever export.json lists */
    if (strcmp(k->format, "openvino") == 0) {
        char bin[PATH_MAX];
        int w = snprintf(bin, sizeof bin, "%.*s.bin", (int)(len - sl), rel);
        if (w < 0 || (size_t)w >= sizeof bin)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': file '%s': "
                           "path too long", dir, qcomp, qrel);
        if (manifest_check_file(dir, comp, bin, NULL, err) != FERRY_OK)
            return err->status;
    }
    return FERRY_OK;
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool plain_text(const char *s);

/* Two rules for the whole of export.json, checked in one walk:
 * - cJSON keeps every copy of a repeated key and its lookups return the first, while Python's
 *   json (the bindings, and most tools reading `ferry inspect --json`) keeps the last: a manifest
 *   with two "components" or two "file" keys could be validated in one reading and used in the
 *   other. So no object may repeat a key (sorting keeps this O(n log n)).
 * - `ferry inspect` and the bindings print names, dtypes and shapes from the metadata: no key or
 *   string may hold a character text_quote would escape (C0 and C1 controls, bidi and invisible
 *   format characters, invalid UTF-8): a terminal escape sequence there would drive the user's
 *   terminal, a bidi override make one name show as another. ferry writes identifiers only.
 * `key` is the nearest key above `node`, naming the string in messages. */
static ferry_status check_tree(const cJSON *node, const char *key, const char *dir, fy_err *err)
{
    char quoted[TEXT_QUOTE_MAX], qname[TEXT_QUOTE_MAX];
    size_t len, at;
    if (node->string) {
        key = node->string;
        len = strlen(key);
        if ((at = text_hidden_at(key, len)) < len)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: key '%s' holds a control, "
                           "format or invalid character at byte %zu", dir,
                           text_quote(key, quoted, sizeof quoted), at);
    }
    if (cJSON_IsString(node) &&
        (at = text_hidden_at(node->valuestring, strlen(node->valuestring))) <
            strlen(node->valuestring))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: key '%s': the string '%s' holds a "
                       "control, format or invalid character at byte %zu", dir,
                       text_quote(key ? key : "", qname, sizeof qname),
                       text_quote(node->valuestring, quoted, sizeof quoted), at);
    if (!cJSON_IsObject(node) && !cJSON_IsArray(node))
        return FERRY_OK;
    const cJSON *child;
    size_t n = 0;
    cJSON_ArrayForEach(child, node) {
        if (check_tree(child, key, dir, err) != FERRY_OK)
            return err->status;
        n++;
    }
    if (!cJSON_IsObject(node) || n < 2)
        return FERRY_OK;
    const char **keys = malloc(n * sizeof *keys);
    if (!keys)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    n = 0;
    cJSON_ArrayForEach(child, node)
        keys[n++] = child->string;
    qsort(keys, n, sizeof *keys, compare_strings);
    ferry_status status = FERRY_OK;
    for (size_t i = 1; i < n && status == FERRY_OK; i++) {
        char qkey[TEXT_QUOTE_MAX];
        if (strcmp(keys[i - 1], keys[i]) == 0)
            status = fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: key '%s' appears more than "
                             "once in one object", dir, text_quote(keys[i], qkey, sizeof qkey));
    }
    free(keys);
    return status;
}

ferry_status manifest_check_tree(const cJSON *m, const char *dir, fy_err *err)
{
    return check_tree(m, NULL, dir, err);
}

static bool plain_text(const char *s)
{
    size_t len = strlen(s);
    return len > 0 && text_hidden_at(s, len) == len;
}

static char *dup_string(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
}

ferry_status manifest_check_components(const cJSON *comps, const char *dir, fy_err *err)
{
    if (!cJSON_IsObject(comps) || cJSON_GetArraySize(comps) == 0)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: 'components' must be a non-empty "
                       "object", dir);
    if (cJSON_GetArraySize(comps) > MODEL_MAX_COMPONENTS)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: more than %d components", dir,
                       MODEL_MAX_COMPONENTS);
    return FERRY_OK;
}

/* A component's "precision" (which the runners compile with) is the dtype its export_config
 * records, one of ferry's three. */
static ferry_status check_precision(const cJSON *md, const char *dir, const char *comp,
                                    fy_err *err)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(md, "precision");
    if (!p)
        return FERRY_OK;
    const char *dtype = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(md, "export_config"), "dtype"));
    const char *pr = cJSON_GetStringValue(p);
    bool known = pr && (!strcmp(pr, "fp32") || !strcmp(pr, "fp16") || !strcmp(pr, "bf16"));
    if (known && dtype && strcmp(pr, dtype) == 0)
        return FERRY_OK;
    char q[TEXT_QUOTE_MAX];
    return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': 'precision' must be "
                   "fp32, fp16 or bf16, the dtype its export_config records: export.json was "
                   "edited", dir, text_quote(comp, q, sizeof q));
}

/* An OpenVINO component's "stateful": its cache in the model's variables, fed beam_idx and no
 * cache input (an encoder-decoder's cross cache aside); else none. The runners build a stateful model's calls from it. */
static ferry_status check_stateful(const cJSON *c, const char *dir, fy_err *err)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(c, "metadata");
    const cJSON *stateful = cJSON_GetObjectItemCaseSensitive(md, "stateful");
    if (!stateful)
        return FERRY_OK;
    bool beam = false, cache_input = false;
    const cJSON *in;
    cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(md, "inputs")) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(in, "name"));
        beam |= name && strcmp(name, "beam_idx") == 0;
        /* an encoder-decoder's cross cache is an input of every call, made by its encoder */
        cache_input |= name && strncmp(name, "past_key_values", 15) == 0 &&
                       !strstr(name, ".cross_");
    }
    bool has_cache = cJSON_GetObjectItemCaseSensitive(md, "cache") != NULL;
    bool says = cJSON_IsTrue(stateful);
    if (!cJSON_IsBool(stateful) || (says && (!beam || cache_input || !has_cache)) ||
        (!says && beam)) {
        char q[TEXT_QUOTE_MAX];
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': 'stateful' is "
                       "%s, and its inputs say otherwise (a stateful model takes beam_idx and "
                       "no cache input)", dir, text_quote(c->string, q, sizeof q),
                       says ? "true" : "false");
    }
    return FERRY_OK;
}

ferry_status manifest_validate(const cJSON *m, const char *dir, struct ferry_exported *e,
                               fy_err *err)
{
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(m, "schema_version");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(m, "format");
    const cJSON *comps = cJSON_GetObjectItemCaseSensitive(m, "components");
    if (!cJSON_IsObject(m))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: not a JSON object", dir);
    if (manifest_check_tree(m, dir, err) != FERRY_OK)
        return err->status;
    if (provenance_check(m, dir, err) != FERRY_OK)
        return err->status;
    if (tf_is_transformers_manifest(m))
        return tf_manifest_validate(m, dir, e, err);
    if (!cJSON_IsNumber(ver) || ver->valuedouble != SCHEMA_VERSION)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s/export.json: schema_version must be %d",
                       dir, SCHEMA_VERSION);
    /* the format's own name: a recipe's alias ("dynamo") is not what ferry writes here */
    const fb_backend *b = cJSON_IsString(fmt) ? fb_find_name(fmt->valuestring) : NULL;
    if (!b || strcmp(b->name, fmt->valuestring) != 0)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s/export.json: format must be one of: %s",
                       dir, fb_names());
    if (manifest_check_components(comps, dir, err) != FERRY_OK)
        return err->status;
    /* transformers' keys, where ferry wrote them: the same format, or why they are absent */
    const cJSON *tf_fmt = cJSON_GetObjectItemCaseSensitive(m, "export_format");
    const cJSON *tf = cJSON_GetObjectItemCaseSensitive(m, "transformers");
    /* transformers' name of the same format ("dynamo" for pt2), as ferry writes it */
    if (tf_fmt && (!cJSON_IsString(tf_fmt) || !tf_format_find(tf_fmt->valuestring) ||
                   fb_find_name(tf_fmt->valuestring) != b))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: export_format (transformers' "
                       "key) must be transformers' name of the format 'format' names", dir);
    if (tf_fmt && tf)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: export_format says transformers "
                       "loads the export, and 'transformers' says why it cannot: one of them "
                       "was edited", dir);
    const cJSON *tc;
    cJSON_ArrayForEach(tc, comps) {
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(tc, "metadata");
        char q[TEXT_QUOTE_MAX];
        if (tf_fmt && (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(md, "in_spec")) ||
                       !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(md, "out_spec"))))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': export_format "
                           "says transformers loads the export, and its metadata has no "
                           "in_spec and out_spec, which transformers' runners read", dir,
                           text_quote(tc->string, q, sizeof q));
    }
    if (tf && (!cJSON_IsObject(tf) ||
               !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(tf, "unsupported"))))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: 'transformers' must be an object "
                       "whose 'unsupported' says why transformers cannot load the export", dir);
    const cJSON *c;
    char qcomp[TEXT_QUOTE_MAX];
    cJSON_ArrayForEach(c, comps) {
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(c, "file");
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(c, "role");
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(c, "data_files");
        if (!cJSON_IsObject(c) || !cJSON_IsString(file) || !cJSON_IsString(role) ||
            (data && !cJSON_IsArray(data)))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s' needs a string "
                           "'file' and 'role'", dir, text_quote(c->string, qcomp, sizeof qcomp));
        /* Names and roles are printed by `ferry inspect` and used as keys by the bindings. */
        if (!plain_text(c->string) || !plain_text(role->valuestring))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': the name and "
                           "role must be non-empty and free of control characters", dir,
                           text_quote(c->string, qcomp, sizeof qcomp));
        const cJSON *d;
        cJSON_ArrayForEach(d, data)
            if (!cJSON_IsString(d))
                return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': "
                               "data_files must hold strings", dir,
                               text_quote(c->string, qcomp, sizeof qcomp));
        long long size;
        if (manifest_check_records(c, dir, err) != FERRY_OK ||
            manifest_check_file(dir, c->string, file->valuestring, &size, err) != FERRY_OK ||
            (!e->sizes_unchecked &&
             manifest_check_size(c, dir, file->valuestring, size, err) != FERRY_OK) ||
            manifest_check_program(dir, c->string, file->valuestring, b->name,
                                   !e->sizes_unchecked, err) != FERRY_OK)
            return err->status;
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(c, "metadata");
        if (md && (tf_check_metadata(md, dir, c->string, err) != FERRY_OK ||
                   check_precision(md, dir, c->string, err) != FERRY_OK))
            return err->status;
        const char *first_data = NULL;
        cJSON_ArrayForEach(d, data) {
            if (manifest_check_file(dir, c->string, d->valuestring, &size, err) != FERRY_OK ||
                (!e->sizes_unchecked &&
                 manifest_check_size(c, dir, d->valuestring, size, err) != FERRY_OK))
                return err->status;
            if (!first_data)
                first_data = d->valuestring;
        }
        exp_component *ec = &e->comps[e->n_components++];
        ec->name = strdup(c->string);
        ec->role = dup_string(c, "role");
        ec->file = dup_string(c, "file");
        ec->data_file = first_data ? strdup(first_data) : NULL;
        if (!ec->name || !ec->role || !ec->file || (first_data && !ec->data_file))
            return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        if (manifest_check_cache(c, dir, err) != FERRY_OK ||
            check_stateful(c, dir, err) != FERRY_OK)
            return err->status;
    }
    /* read to be replaced (--force): its names alone matter */
    if (!e->sizes_unchecked && manifest_check_layout(comps, b, dir, err) != FERRY_OK)
        return err->status;
    /* onnxruntime-genai's config, the one name it may have */
    const cJSON *og = cJSON_GetObjectItemCaseSensitive(m, "onnxruntime_genai");
    const cJSON *ogc = cJSON_GetObjectItemCaseSensitive(og, "config");
    if (og && (!cJSON_IsObject(og) ||
               (ogc && (!cJSON_IsString(ogc) || strcmp(ogc->valuestring, GENAI_CONFIG_FILE)))))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: 'onnxruntime_genai' must be an "
                       "object whose 'config' is \"%s\"", dir, GENAI_CONFIG_FILE);
    if (ogc && manifest_check_file(dir, "onnxruntime_genai", ogc->valuestring, NULL, err) != FERRY_OK)
        return err->status;
    /* ... and its processor's, for a vision-language or speech export */
    const cJSON *ogp = cJSON_GetObjectItemCaseSensitive(og, "processor_config");
    if (ogp && (!ogc || !cJSON_IsString(ogp) || !genai_is_processor_file(ogp->valuestring)))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: 'onnxruntime_genai' "
                       "'processor_config' must be \"%s\" or \"%s\", beside its 'config'", dir,
                       GENAI_PROCESSOR_FILE, GENAI_AUDIO_PROCESSOR_FILE);
    if (ogp && manifest_check_file(dir, "onnxruntime_genai", ogp->valuestring, NULL, err) !=
                   FERRY_OK)
        return err->status;
    /* the tokenizer files it carries: only names ferry takes (a --force replacing this export
     * deletes what is listed here), each present */
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(m, "tokenizer_files"), *t;
    if (tok && !cJSON_IsArray(tok))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: 'tokenizer_files' must be an "
                       "array", dir);
    cJSON_ArrayForEach(t, tok) {
        char qname[TEXT_QUOTE_MAX];
        if (!cJSON_IsString(t) || !tok_is_file_name(t->valuestring))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: tokenizer_files: '%s' is not "
                           "a tokenizer file name (%s; %s)", dir,
                           cJSON_IsString(t) ? text_quote(t->valuestring, qname, sizeof qname)
                                             : "(not a string)", tok_file_names(),
                           tok_converted_names());
        if (manifest_check_file(dir, "tokenizer_files", t->valuestring, NULL, err) != FERRY_OK)
            return err->status;
    }
    return FERRY_OK;
}
