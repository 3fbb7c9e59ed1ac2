/* transformers.c — interop with transformers' exporters (transformers/exporters, 5.x).
 *
 * Writing: ExportedModel.from_pretrained reads export.json's "export_format", each component's
 * "file" (and the sidecar its format derives from it) and "metadata", an ExportMetadata whose
 * runners (ONNX Runtime, OpenVINO) use `kwargs` (which call arguments to pass), `out_spec` (a
 * torch pytree spec, treespec_dumps text, that rebuilds the model's output from the flat graph
 * outputs), `out_constants` and `export_dtype`; its torch runner ("dynamo", ferry's pt2)
 * orders the kwargs by `in_spec` and returns what the program returns, so a pt2 export
 * qualifies when its program returns CausalLMOutputWithPast (model_output). ferry writes these
 * next to its own keys for the components those runners call as they call transformers' own:
 * graph inputs among input_ids / attention_mask / position_ids (and OpenVINO's beam_idx, which
 * the runner feeds), one output, logits. A cache passed in and out is named by transformers' pytree leaf paths
 * (cache.layers.<l>.keys), ferry's by the guide's (past_key_values.<l>.key), and ferry's ONNX
 * components share one model.onnx.data where transformers' loader fetches <file>.data: so an
 * ONNX generation export stays ferry's alone, and says why in export.json.
 *
 * Reading: a transformers export.json is untrusted input like ferry's: every key's type, every
 * size and index is checked before use, the spec texts parsed within their own limits. */
#include "export/transformers.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/internal.h"
#include "model/safetensors.h"
#include "util/strbuf.h"
#include "util/text.h"

static const tf_format TF_FORMATS[] = {
    {"onnx", "", ".onnx", "", ".data"},          /* model.onnx + model.onnx.data */
    {"openvino", "openvino_", ".xml", ".xml", ".bin"},
    {"dynamo", "", ".pt2", NULL, NULL},
    {"executorch", "", ".pte", NULL, NULL},
};

#define N_FORMATS (sizeof TF_FORMATS / sizeof *TF_FORMATS)

/* What the loader accepts in ExportMetadata: generous for any model transformers exports (a
 * rank-64 tensor, a 10,000-layer cache's spec), small enough that nothing read can overflow. */
#define MAX_RANK 64
#define MAX_KWARGS 4096
#define MAX_LEAF_DEPTH 8             /* kwargs "leaves" nested in one another */
#define MAX_NAME 256                 /* type names, dtypes, devices, package names */
#define MAX_SPEC_BYTES (4u << 20)

static const json_limits spec_limits = {
    .kind = "pytree spec", .max_bytes = MAX_SPEC_BYTES, .max_values = 1000000,
    .max_depth = 64, .utf8 = true,
};

const tf_format *tf_format_find(const char *name)
{
    for (size_t i = 0; name && i < N_FORMATS; i++)
        if (strcmp(name, TF_FORMATS[i].name) == 0)
            return &TF_FORMATS[i];
    return NULL;
}

const char *tf_format_names(void)
{
    return "onnx, openvino, dynamo, executorch";
}

bool tf_sidecar(const tf_format *f, const char *file, char *out, size_t size)
{
    size_t len = strlen(file), strip = f->strip ? strlen(f->strip) : 0;
    if (!f->add || len < strlen(f->suffix) || strcmp(file + len - strlen(f->suffix), f->suffix))
        return false;
    int n = snprintf(out, size, "%.*s%s", (int)(len - strip), file, f->add);
    return n > 0 && (size_t)n < size;
}

bool tf_is_transformers_manifest(const cJSON *m)
{
    return cJSON_IsObject(m) && cJSON_GetObjectItemCaseSensitive(m, "export_format") &&
           !cJSON_GetObjectItemCaseSensitive(m, "format");
}

/* ------------------------------------------------------------------------------------------ */
/* Writing */

/* The inputs a caller passes (a tokenizer's, and position_ids), as the family marked them;
 * beam_idx is OpenVINO's, which its runner feeds. */
static bool is_call_input(const g_value *v)
{
    return v->role != GI_OTHER;
}

/* Whether output `v` is a cache the graph writes (a state's new value). */
static bool is_state_output(const g_graph *g, int v)
{
    for (size_t i = 0; i < g->n_states; i++)
        if (g->states[i].out == v)
            return true;
    return false;
}

static bool has_internal_state(const g_graph *g)
{
    for (size_t i = 0; i < g->n_states; i++)
        if (g->states[i].form == GS_VARIABLE)
            return true;
    return false;
}

const tf_format *tf_format_of(const struct ferry_exported *e)
{
    if (!e->backend)
        return NULL;
    const tf_format *f = tf_format_find(e->backend->name);
    return f || !e->backend->alias ? f : tf_format_find(e->backend->alias);
}

const char *tf_unsupported(const struct ferry_exported *e)
{
    static _Thread_local char why[512];
    const tf_format *f = tf_format_of(e);
    if (!f)
        return "transformers has no runner for this format";
    for (int i = 0; i < e->n_components; i++) {
        const be_component *c = &e->lowered[i];
        const g_graph *g = c->graph;
        char sidecar[160];
        /* its generate() calls the model's own get_image_features before the first forward,
         * and its export_for_generation writes no component for it */
        if (c->role && (strcmp(c->role, "image_encoder") == 0 ||
                        strcmp(c->role, "vision_embeddings_model") == 0)) {
            snprintf(why, sizeof why, "component '%s': transformers' generate() over an export "
                     "encodes images with the torch model's vision tower, and its runners "
                     "have no image encoder to call; ferry's generate() runs this one",
                     c->name);
            return why;
        }
        /* the same for an encoder-decoder's encoder (Whisper's, T5's): generate() runs the
         * torch model's encoder before the first decoder forward */
        if (c->role && strcmp(c->role, "encoder") == 0) {
            snprintf(why, sizeof why, "component '%s': transformers' generate() over an export "
                     "runs the torch model's encoder, and its runners have no encoder to call; "
                     "ferry's generate() runs this one", c->name);
            return why;
        }
        for (size_t k = 0; k < g->n_inputs; k++) {
            const g_value *v = &g->values[g->inputs[k]];
            bool fed = is_call_input(v) ||
                       (!strcmp(v->name, "beam_idx") && has_internal_state(g));
            if (!fed) {
                snprintf(why, sizeof why, "component '%s' takes '%s': transformers' runners "
                         "feed a cache by their own pytree names (cache.layers.<l>.keys), not "
                         "ferry's (the guide's past_key_values.<l>.key)", c->name, v->name);
                return why;
            }
            for (int d = 0; d < v->shape.rank; d++) {
                int64_t traced;
                if (!g_dim_example(v->shape.d[d], &g->syms, &traced)) {
                    snprintf(why, sizeof why, "component '%s': input '%s' has no traced shape "
                             "(transformers' kwargs record one)", c->name, v->name);
                    return why;
                }
            }
        }
        for (size_t k = 0; k < g->n_outputs; k++) {
            const char *name = g->values[g->outputs[k]].name;
            if (is_state_output(g, g->outputs[k])) {
                snprintf(why, sizeof why, "component '%s' returns '%s': transformers' runners "
                         "rebuild a returned cache by their own pytree names "
                         "(cache.layers.<l>.keys), not ferry's (the guide's present.<l>.key)",
                         c->name, name);
                return why;
            }
        }
        if (!g->output_class) {
            snprintf(why, sizeof why, "component '%s' returns what no transformers ModelOutput "
                     "class holds", c->name);
            return why;
        }
        /* transformers' torch runner returns what the program returns */
        if (e->cfg.format == FERRY_FORMAT_PT2 &&
            !be_option_value(&e->cfg, e->backend, "model_output")) {
            snprintf(why, sizeof why, "component '%s' returns a dict, and transformers' runner "
                     "returns what a torch program returns: export with --model-output "
                     "(recipe \"model_output\": true) for its %s", c->name,
                     strrchr(g->output_class, '.') + 1);
            return why;
        }
        if (!f->add) { /* the program holds its weights */
            if (c->n_data_files == 0)
                continue;
            snprintf(why, sizeof why, "component '%s': transformers' loader reads %s alone, and "
                     "this export keeps weights in %s", c->name, c->file, c->data_files[0]);
            return why;
        }
        if (c->n_data_files != 1 || !tf_sidecar(f, c->file, sidecar, sizeof sidecar) ||
            strcmp(sidecar, c->data_files[0])) {
            snprintf(why, sizeof why, "component '%s': transformers' loader reads %s next to "
                     "%s, and this export keeps its weights in %s", c->name,
                     tf_sidecar(f, c->file, sidecar, sizeof sidecar) ? sidecar : "a sidecar",
                     c->file, c->n_data_files ? c->data_files[0] : "no file");
            return why;
        }
    }
    return NULL;
}

/* A spec without children, as treespec_dumps writes it (json.dumps' default separators). */
#define LEAF_SPEC "{\"type\": null, \"context\": null, \"children_spec\": []}"

/* in_spec: the call's (args, kwargs), args empty, kwargs a dict of the caller's inputs. The
 * names in the dict's context are JSON text inside a JSON string, hence the escaped quotes;
 * they are the identifiers the family names the caller's inputs with (input_ids, ...), which
 * need no other escaping. */
static char *in_spec(const g_graph *g)
{
    strbuf b = {0};
    int n = 0;
    sb_puts(&b, "[1, {\"type\": \"builtins.tuple\", \"context\": \"null\", \"children_spec\": "
                "[{\"type\": \"builtins.tuple\", \"context\": \"null\", \"children_spec\": []}, "
                "{\"type\": \"builtins.dict\", \"context\": \"[");
    for (size_t k = 0; k < g->n_inputs; k++) {
        const g_value *v = &g->values[g->inputs[k]];
        if (is_call_input(v))
            sb_printf(&b, "%s\\\"%s\\\"", n++ ? ", " : "", v->name);
    }
    sb_puts(&b, "]\", \"children_spec\": [");
    for (int k = 0; k < n; k++)
        sb_printf(&b, "%s" LEAF_SPEC, k ? ", " : "");
    sb_puts(&b, "]}]}]");
    return sb_take(&b);
}

/* out_spec: what the family's forward returns, its ModelOutput class with the outputs as its
 * fields (names the family made: identifiers, as its inputs', needing no escaping). */
static char *out_spec(const g_graph *g)
{
    strbuf b = {0};
    sb_printf(&b, "[1, {\"type\": \"%s\", \"context\": \"[", g->output_class);
    for (size_t k = 0; k < g->n_outputs; k++)
        sb_printf(&b, "%s\\\"%s\\\"", k ? ", " : "", g->values[g->outputs[k]].name);
    sb_puts(&b, "]\", \"children_spec\": [");
    for (size_t k = 0; k < g->n_outputs; k++)
        sb_printf(&b, "%s" LEAF_SPEC, k ? ", " : "");
    sb_puts(&b, "]}]");
    return sb_take(&b);
}

ferry_status tf_describe_component(const struct ferry_exported *e, int i, cJSON *md,
                                   fy_err *err)
{
    const g_graph *g = e->lowered[i].graph;
    cJSON_AddStringToObject(md, "export_dtype", exp_torch_dtype_name(e->cfg.dtype));
    cJSON_AddStringToObject(md, "export_device", "cpu");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(md, "packages"), "ferry", FERRY_VERSION);
    cJSON *kwargs = cJSON_AddObjectToObject(md, "kwargs");
    for (size_t k = 0; k < g->n_inputs; k++) {
        const g_value *v = &g->values[g->inputs[k]];
        if (!is_call_input(v))
            continue;
        cJSON *t = cJSON_AddObjectToObject(kwargs, v->name);
        cJSON_AddNumberToObject(t, "rank", v->shape.rank);
        cJSON *shape = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < v->shape.rank; d++) {
            int64_t traced = 0;
            g_dim_example(v->shape.d[d], &g->syms, &traced); /* tf_unsupported checked it */
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)traced));
        }
        cJSON_AddStringToObject(t, "dtype", exp_torch_dtype_name(v->dtype));
    }
    char *spec = in_spec(g);
    if (!spec)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    cJSON_AddStringToObject(md, "in_spec", spec);
    free(spec);
    if (!(spec = out_spec(g)))
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    cJSON_AddStringToObject(md, "out_spec", spec);
    free(spec);
    cJSON_AddObjectToObject(md, "in_constants");
    cJSON_AddArrayToObject(md, "out_constants");
    return FERRY_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Reading */

typedef struct where {
    const char *dir, *comp;
} where;

#define FAIL(w, ...) tf_fail(w, err, __VA_ARGS__)

static ferry_status tf_fail(const where *w, fy_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "<dir>/export.json: component '<name>': metadata.<what>" */
static ferry_status tf_fail(const where *w, fy_err *err, const char *fmt, ...)
{
    char what[768], qcomp[TEXT_QUOTE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': %s", w->dir,
                   text_quote(w->comp, qcomp, sizeof qcomp), what);
}

/* A type, dtype, device or package name: printable ASCII without quotes, at most MAX_NAME. */
static bool plain_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > MAX_NAME)
        return false;
    for (; *s; s++)
        if (*s <= ' ' || *s > '~' || *s == '"' || *s == '\\')
            return false;
    return true;
}

static bool is_scalar(const cJSON *v)
{
    return cJSON_IsNull(v) || cJSON_IsBool(v) || cJSON_IsNumber(v) || cJSON_IsString(v);
}

/* A key absent or null passes (ExportMetadata's defaults); else it must be a plain name. */
static ferry_status check_name_key(const cJSON *md, const char *key, const where *w,
                                   fy_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(md, key);
    if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && plain_name(v->valuestring)))
        return FAIL(w, "metadata.%s must be a name of 1 to %d printable characters, or null",
                    key, MAX_NAME);
    return FERRY_OK;
}

/* One traced kwarg, as _describe_traced_kwarg writes it: a tensor {rank, shape, dtype}, a
 * mapping {leaves: {key: kwarg}}, or any other value {container: type name}. */
static ferry_status check_kwarg(const cJSON *k, const char *path, int depth, const where *w,
                                fy_err *err)
{
    const cJSON *rank = cJSON_GetObjectItemCaseSensitive(k, "rank");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(k, "shape");
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(k, "dtype");
    const cJSON *leaves = cJSON_GetObjectItemCaseSensitive(k, "leaves");
    const cJSON *container = cJSON_GetObjectItemCaseSensitive(k, "container");
    uint64_t r, d;
    if (!cJSON_IsObject(k))
        return FAIL(w, "metadata.kwargs: '%s' must be an object", path);
    if (rank || shape || dtype) {
        if (!json_number_to_u64(rank, &r) || r > MAX_RANK)
            return FAIL(w, "metadata.kwargs: '%s': rank must be an integer from 0 to %d", path,
                        MAX_RANK);
        if (!cJSON_IsArray(shape) || (uint64_t)cJSON_GetArraySize(shape) != r)
            return FAIL(w, "metadata.kwargs: '%s': shape must be an array of rank (%d) sizes",
                        path, (int)r);
        const cJSON *s;
        cJSON_ArrayForEach(s, shape)
            if (!json_number_to_u64(s, &d))
                return FAIL(w, "metadata.kwargs: '%s': shape holds a size that is not an "
                            "integer from 0 to 2^53", path);
        if (!cJSON_IsString(dtype) || !plain_name(dtype->valuestring))
            return FAIL(w, "metadata.kwargs: '%s': dtype must be a name (\"int64\")", path);
        return FERRY_OK;
    }
    if (cJSON_IsObject(leaves)) {
        if (depth >= MAX_LEAF_DEPTH)
            return FAIL(w, "metadata.kwargs: '%s': leaves nested more than %d deep", path,
                        MAX_LEAF_DEPTH);
        const cJSON *leaf;
        cJSON_ArrayForEach(leaf, leaves)
            if (check_kwarg(leaf, leaf->string, depth + 1, w, err) != FERRY_OK)
                return err->status;
        return FERRY_OK;
    }
    if (cJSON_IsString(container) && plain_name(container->valuestring))
        return FERRY_OK;
    return FAIL(w, "metadata.kwargs: '%s' must describe a tensor (rank, shape, dtype), a "
                "mapping (leaves) or a container (its type's name)", path);
}

/* One node of a pytree spec: {"type": name or null, "context": text or null, "children_spec":
 * [nodes]}. Counts the leaves (nodes without a type). Depth is bounded by spec_limits. */
static ferry_status check_spec_node(const cJSON *n, const char *key, size_t *leaves,
                                    const where *w, fy_err *err)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(n, "type");
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(n, "context");
    const cJSON *children = cJSON_GetObjectItemCaseSensitive(n, "children_spec");
    if (!cJSON_IsObject(n) || !type || !ctx || !cJSON_IsArray(children) ||
        !(cJSON_IsNull(type) || (cJSON_IsString(type) && plain_name(type->valuestring))) ||
        !(cJSON_IsNull(ctx) || cJSON_IsString(ctx)))
        return FAIL(w, "metadata.%s: a node must be {\"type\": name or null, \"context\": text "
                    "or null, \"children_spec\": [...]}", key);
    if (cJSON_IsNull(type)) {
        if (children->child)
            return FAIL(w, "metadata.%s: a leaf (type null) has children", key);
        ++*leaves;
        return FERRY_OK;
    }
    const cJSON *c;
    cJSON_ArrayForEach(c, children)
        if (check_spec_node(c, key, leaves, w, err) != FERRY_OK)
            return err->status;
    return FERRY_OK;
}

/* in_spec / out_spec: treespec_dumps text, [protocol 1, root node]; `leaves` counts its leaves
 * (0 when absent or null). */
static ferry_status check_spec(const cJSON *md, const char *key, size_t *leaves,
                               const where *w, fy_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(md, key);
    *leaves = 0;
    if (!v || cJSON_IsNull(v))
        return FERRY_OK;
    if (!cJSON_IsString(v))
        return FAIL(w, "metadata.%s must be a string (torch's treespec_dumps text) or null", key);
    size_t len = strlen(v->valuestring);
    if (len > MAX_SPEC_BYTES)
        return FAIL(w, "metadata.%s is %zu bytes, over the %u a spec may have", key, len,
                    MAX_SPEC_BYTES);
    cJSON *spec = NULL;
    char origin[64];
    fy_err inner = {0};
    snprintf(origin, sizeof origin, "metadata.%s", key);
    if (json_parse(v->valuestring, len, origin, &spec_limits, &spec, &inner) != FERRY_OK)
        return FAIL(w, "%s", inner.msg);
    const cJSON *protocol = cJSON_GetArrayItem(spec, 0), *root = cJSON_GetArrayItem(spec, 1);
    ferry_status st = FERRY_OK;
    if (!cJSON_IsArray(spec) || cJSON_GetArraySize(spec) != 2 || !cJSON_IsNumber(protocol) ||
        protocol->valuedouble != 1)
        st = FAIL(w, "metadata.%s must be [1, node]: treespec_dumps' protocol 1", key);
    else
        st = check_spec_node(root, key, leaves, w, err);
    cJSON_Delete(spec);
    return st;
}

ferry_status tf_check_metadata(const cJSON *md, const char *dir, const char *comp, fy_err *err)
{
    where w = {dir, comp};
    if (!cJSON_IsObject(md))
        return FAIL(&w, "metadata must be an object");
    /* the architecture is the checkpoint's class name as ferry or transformers read it, shown
     * and never used: any visible text (manifest_check_tree refused the hidden) of bounded
     * length */
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(md, "architecture");
    if (arch && !cJSON_IsNull(arch) &&
        !(cJSON_IsString(arch) && *arch->valuestring && strlen(arch->valuestring) <= MAX_NAME))
        return FAIL(&w, "metadata.architecture must be a class name of 1 to %d bytes, or null",
                    MAX_NAME);
    if (check_name_key(md, "export_dtype", &w, err) || check_name_key(md, "export_device", &w, err))
        return err->status;
    const cJSON *pk = cJSON_GetObjectItemCaseSensitive(md, "packages"), *p;
    if (pk && !cJSON_IsObject(pk))
        return FAIL(&w, "metadata.packages must be an object of versions");
    cJSON_ArrayForEach(p, pk)
        if (!plain_name(p->string) || !cJSON_IsString(p) || !plain_name(p->valuestring))
            return FAIL(&w, "metadata.packages: each entry must be \"name\": \"version\"");
    const cJSON *ec = cJSON_GetObjectItemCaseSensitive(md, "export_config");
    if (ec && !cJSON_IsObject(ec))
        return FAIL(&w, "metadata.export_config must be an object");
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(md, "kwargs"), *k;
    if (kw && !cJSON_IsObject(kw))
        return FAIL(&w, "metadata.kwargs must be an object");
    if (cJSON_GetArraySize(kw) > MAX_KWARGS)
        return FAIL(&w, "metadata.kwargs has more than %d entries", MAX_KWARGS);
    cJSON_ArrayForEach(k, kw)
        if (check_kwarg(k, k->string, 0, &w, err) != FERRY_OK)
            return err->status;
    size_t in_leaves, out_leaves;
    if (check_spec(md, "in_spec", &in_leaves, &w, err) ||
        check_spec(md, "out_spec", &out_leaves, &w, err))
        return err->status;
    const cJSON *ic = cJSON_GetObjectItemCaseSensitive(md, "in_constants"), *c;
    if (ic && !cJSON_IsObject(ic))
        return FAIL(&w, "metadata.in_constants must be an object");
    cJSON_ArrayForEach(c, ic)
        if (!is_scalar(c))
            return FAIL(&w, "metadata.in_constants: each value must be null, a boolean, a "
                        "number or a string");
    /* [leaf index, value] pairs, indices rising and below out_spec's leaf count: transformers
     * fills those leaves with the values and the graph's outputs the rest */
    const cJSON *oc = cJSON_GetObjectItemCaseSensitive(md, "out_constants");
    if (oc && !cJSON_IsArray(oc))
        return FAIL(&w, "metadata.out_constants must be an array of [leaf index, value]");
    uint64_t next = 0, index;
    cJSON_ArrayForEach(c, oc) {
        if (!cJSON_IsArray(c) || cJSON_GetArraySize(c) != 2 ||
            !json_number_to_u64(c->child, &index) || !is_scalar(c->child->next))
            return FAIL(&w, "metadata.out_constants: each entry must be [leaf index, null, "
                        "boolean, number or string]");
        if (index < next || index >= out_leaves)
            return FAIL(&w, "metadata.out_constants: leaf index %llu is out of order or not "
                        "below out_spec's %zu leaves", (unsigned long long)index, out_leaves);
        next = index + 1;
    }
    return FERRY_OK;
}

/* A component name transformers makes a file name of: no path, not hidden, printable. */
static bool component_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 200 || *s == '.' || text_hidden_at(s, n) < n)
        return false;
    return !strchr(s, '/') && !strchr(s, '\\');
}

ferry_status tf_manifest_validate(const cJSON *m, const char *dir, struct ferry_exported *e,
                                  fy_err *err)
{
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(m, "schema_version");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(m, "export_format");
    const cJSON *comps = cJSON_GetObjectItemCaseSensitive(m, "components");
    /* transformers reads a missing version as 1 and only warns above it; ferry reads what it
     * knows */
    if (ver && (!cJSON_IsNumber(ver) || ver->valuedouble != 1))
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s/export.json: schema_version must be 1 "
                       "(transformers' export schema)", dir);
    const tf_format *f = cJSON_IsString(fmt) ? tf_format_find(fmt->valuestring) : NULL;
    if (!f)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "%s/export.json: export_format must be one of "
                       "transformers' formats: %s", dir, tf_format_names());
    if (manifest_check_components(comps, dir, err) != FERRY_OK)
        return err->status;
    const cJSON *c;
    char qcomp[TEXT_QUOTE_MAX], sidecar[PATH_MAX];
    cJSON_ArrayForEach(c, comps) {
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(c, "file");
        text_quote(c->string, qcomp, sizeof qcomp);
        if (!component_name(c->string))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component name '%s' is not "
                           "a plain name of 1 to 200 bytes", dir, qcomp);
        if (!cJSON_IsObject(c) || !cJSON_IsString(file))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s' needs a "
                           "string 'file' and a 'metadata' object", dir, qcomp);
        if (tf_check_metadata(cJSON_GetObjectItemCaseSensitive(c, "metadata"), dir, c->string,
                              err) != FERRY_OK)
            return err->status;
        if (manifest_check_file(dir, c->string, file->valuestring, NULL, err) != FERRY_OK)
            return err->status;
        /* transformers' loader fetches the sidecar too, and fails without it */
        bool has_sidecar = f->add != NULL;
        if (has_sidecar && !tf_sidecar(f, file->valuestring, sidecar, sizeof sidecar))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': an %s file "
                           "must end in %s", dir, qcomp, f->name, f->suffix);
        if (has_sidecar && manifest_check_file(dir, c->string, sidecar, NULL, err) != FERRY_OK)
            return err->status;
        if (manifest_check_program(dir, c->string, file->valuestring, f->name,
                                   !e->sizes_unchecked, err) != FERRY_OK)
            return err->status;
        exp_component *ec = &e->comps[e->n_components++];
        ec->name = strdup(c->string);
        ec->role = strdup(c->string); /* transformers names components by their stage */
        ec->file = strdup(file->valuestring);
        ec->data_file = has_sidecar ? strdup(sidecar) : NULL;
        if (!ec->name || !ec->role || !ec->file || (has_sidecar && !ec->data_file))
            return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    }
    return FERRY_OK;
}
