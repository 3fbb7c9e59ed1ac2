/* pt2_print.c — a lowered graph as torch.export's serialized ExportedProgram (models/model.json
 * of a .pt2; torch/_export/serde/schema.py, schema 8): the placeholders and their signature
 * (parameters by their state_dict keys, constants as non-persistent buffers, the user inputs),
 * the nodes (the aten emitter's calls, written by pt2_writer.c's sink: tensor metadata,
 * SymInts), each symbol's range, and the call specs of a kwargs-only call returning a dict of
 * the outputs.
 *
 * The graph is at the level torch.export produces before decompositions ("TRAINING" verifier),
 * as torch.export.export would trace the module. Symbols are s0, s1, ... in the order of the
 * graph's symbol table; every symbolic size carries a hint (pt2_writer.c). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/torch/pt2_printer.h"

/* ---- placeholders ---- */

static bool push_lifted(pt_printer *p, pt2_lifted **list, size_t *n, size_t *cap, int v,
                        const char *fqn)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        pt2_lifted *l = realloc(*list, c * sizeof *l);
        if (!l)
            return pt_fail(p, FERRY_ERR_NOMEM, "out of memory"), false;
        *list = l, *cap = c;
    }
    char *copy = strdup(fqn);
    if (!copy)
        return pt_fail(p, FERRY_ERR_NOMEM, "out of memory"), false;
    (*list)[(*n)++] = (pt2_lifted){v, copy};
    return true;
}

/* A state_dict key the module can hold: dotted names none of whose parts is empty. */
static bool module_path(const char *s)
{
    if (!*s || *s == '.' || s[strlen(s) - 1] == '.' || strstr(s, ".."))
        return false;
    for (; *s; s++)
        if ((unsigned char)*s < 0x20)
            return false;
    return true;
}

static const char *lift(pt_printer *p, int v)
{
    const g_value *x = &p->g->values[v];
    pt2_program *prog = p->prog;
    char base[PT_NAME_MAX + 8];
    if (x->kind == GV_WEIGHT) {
        if (!module_path(x->name)) {
            pt_fail(p, FERRY_ERR_UNSUPPORTED, "pt2: weight '%s' has no name a module can hold "
                    "as a parameter", x->name);
            return NULL;
        }
        snprintf(base, sizeof base, "p_%s", x->name);
        const char *name = pt_fresh(p, base);
        if (!name || !push_lifted(p, &prog->params, &prog->n_params, &prog->cap_params, v,
                                  x->name))
            return NULL;
        pt_tensor_value(p, name, x->dtype, &x->shape);
        return name;
    }
    /* a constant: a non-persistent buffer, named as the graph names it */
    snprintf(base, sizeof base, "c_%s", x->name);
    const char *name = pt_fresh(p, base);
    if (!name || !push_lifted(p, &prog->buffers, &prog->n_buffers, &prog->cap_buffers, v,
                              name + 2))
        return NULL;
    pt_tensor_value(p, name, x->dtype, &x->shape);
    return name;
}

const char *pt_tied_head(pt_printer *p, int v, const char *key)
{
    if (p->tied_head)
        return p->tied_head;
    const g_value *x = &p->g->values[v];
    char base[PT_NAME_MAX + 8];
    snprintf(base, sizeof base, "p_%s", key);
    snprintf(p->tied_key, sizeof p->tied_key, "%s", key);
    const char *name = pt_fresh(p, base);
    if (!name || !push_lifted(p, &p->prog->params, &p->prog->n_params, &p->prog->cap_params, v,
                              key))
        return NULL;
    pt_tensor_value(p, name, x->dtype, &x->shape);
    return p->tied_head = name;
}

const char *pt_tensor(pt_printer *p, int v)
{
    if (p->st != FERRY_OK)
        return NULL;
    if (v < 0 || (size_t)v >= p->g->n_values) {
        pt_fail(p, FERRY_ERR_INTERNAL, "pt2: no value %d", v);
        return NULL;
    }
    if (p->names[v])
        return p->names[v];
    const g_value *x = &p->g->values[v];
    const char *name = NULL;
    if (x->kind == GV_WEIGHT || x->kind == GV_CONST)
        name = lift(p, v);
    else if (x->kind == GV_NODE && p->ints[v].known) {
        aten_t t = aten_tensor(&p->emit, v); /* its tensor, made by the emitter's calls */
        name = p->st == FERRY_OK && t != ATEN_NONE && t != v ? p->temps[ATEN_TEMP_INDEX(t)]
                                                            : NULL;
    } else
        pt_fail(p, FERRY_ERR_INTERNAL, "pt2: '%s' is read before it is made", x->name);
    if (name && !p->names[v])
        p->names[v] = (char *)name;
    return name;
}

/* ---- the program ---- */

static void treespec_leaves(strbuf *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sb_printf(b, "%s{\"type\": null, \"context\": null, \"children_spec\": []}",
                  i ? ", " : "");
}

/* pytree's dumps of a dict with these keys, or of a ModelOutput (`type`) with these fields:
 * either's context is JSON text of the key list */
static void keyed_spec(strbuf *b, const char *type, const g_graph *g, const int *vals, size_t n)
{
    strbuf keys = {0};
    sb_puts(&keys, "[");
    for (size_t i = 0; i < n; i++) {
        sb_puts(&keys, i ? ", " : "");
        pt2_json_str(&keys, g->values[vals[i]].name);
    }
    sb_puts(&keys, "]");
    sb_printf(b, "{\"type\": \"%s\", \"context\": ", type);
    pt2_json_str(b, keys.data ? keys.data : "[]");
    sb_puts(b, ", \"children_spec\": [");
    treespec_leaves(b, n);
    sb_puts(b, "]}");
    if (keys.oom)
        b->oom = true;
    sb_free(&keys);
}

static void call_specs(strbuf *b, const g_graph *g, bool model_output)
{
    strbuf in = {0}, out = {0};
    /* the module is called with keywords only, as transformers' models are */
    sb_puts(&in, "[1, {\"type\": \"builtins.tuple\", \"context\": \"null\", \"children_spec\": "
                 "[{\"type\": \"builtins.tuple\", \"context\": \"null\", \"children_spec\": []}, ");
    keyed_spec(&in, "builtins.dict", g, g->inputs, g->n_inputs);
    sb_puts(&in, "]}]");
    /* and returns a dict of its outputs, out["logits"] as from transformers' output classes,
     * which torch rebuilds alone; or the output class itself, which transformers registers
     * (pt2_finish checks that every output is one of its fields) */
    sb_puts(&out, "[1, ");
    keyed_spec(&out, model_output ? g->output_class : "builtins.dict", g, g->outputs,
               g->n_outputs);
    sb_puts(&out, "]");
    sb_puts(b, "\"in_spec\": ");
    pt2_json_str(b, in.data ? in.data : "");
    sb_puts(b, ", \"out_spec\": ");
    pt2_json_str(b, out.data ? out.data : "");
    if (in.oom || out.oom)
        b->oom = true;
    sb_free(&in);
    sb_free(&out);
}

static void placeholders(strbuf *b, const pt_printer *p, bool specs)
{
    const g_graph *g = p->g;
    int k = 0;
    for (size_t i = 0; i < p->prog->n_params; i++, k++) {
        const pt2_lifted *l = &p->prog->params[i];
        /* the tied head's own placeholder reads the embedding's value */
        const char *name = p->tied_head && strcmp(l->fqn, p->tied_key) == 0 &&
                                   strcmp(p->g->values[l->value].name, p->tied_key) != 0
                               ? p->tied_head : p->names[l->value];
        if (!specs) {
            sb_printf(b, "%s{\"as_tensor\": {\"name\": \"%s\"}}", k ? ", " : "", name);
            continue;
        }
        sb_printf(b, "%s{\"parameter\": {\"arg\": {\"name\": \"%s\"}, \"parameter_name\": ",
                  k ? ", " : "", name);
        pt2_json_str(b, l->fqn);
        sb_puts(b, "}}");
    }
    for (size_t i = 0; i < p->prog->n_buffers; i++, k++) {
        const pt2_lifted *l = &p->prog->buffers[i];
        if (!specs) {
            sb_printf(b, "%s{\"as_tensor\": {\"name\": \"%s\"}}", k ? ", " : "",
                      p->names[l->value]);
            continue;
        }
        sb_printf(b, "%s{\"buffer\": {\"arg\": {\"name\": \"%s\"}, \"buffer_name\": \"%s\", "
                  "\"persistent\": false}}", k ? ", " : "", p->names[l->value], l->fqn);
    }
    for (size_t i = 0; i < g->n_inputs; i++, k++) {
        const char *name = p->names[g->inputs[i]];
        if (specs)
            sb_printf(b, "%s{\"user_input\": {\"arg\": {\"as_tensor\": {\"name\": \"%s\"}}}}",
                      k ? ", " : "", name);
        else
            sb_printf(b, "%s{\"as_tensor\": {\"name\": \"%s\"}}", k ? ", " : "", name);
    }
}

bool pt2_input_has_symbol(const g_graph *g, int sym)
{
    for (size_t i = 0; i < g->n_inputs; i++) {
        const g_shape *x = &g->values[g->inputs[i]].shape;
        for (int k = 0; k < x->rank; k++)
            for (int t = 0; !x->d[k].unknown && t < x->d[k].n; t++)
                if (x->d[k].t[t].sym == sym)
                    return true;
    }
    return false;
}

static void assemble(strbuf *b, pt_printer *p)
{
    const g_graph *g = p->g;
    sb_puts(b, "{\"graph_module\": {\"graph\": {\"inputs\": [");
    placeholders(b, p, false);
    sb_puts(b, "], \"outputs\": [");
    for (size_t i = 0; i < g->n_outputs; i++)
        sb_printf(b, "%s{\"as_tensor\": {\"name\": \"%s\"}}", i ? ", " : "",
                  p->names[g->outputs[i]]);
    sb_puts(b, "],\n\"nodes\": [\n");
    sb_puts(b, p->nodes.data ? p->nodes.data : "");
    sb_puts(b, "],\n\"tensor_values\": {");
    sb_puts(b, p->tensor_values.data ? p->tensor_values.data : "");
    sb_puts(b, "},\n\"sym_int_values\": {");
    sb_puts(b, p->sym_int_values.data ? p->sym_int_values.data : "");
    sb_puts(b, "}, \"sym_bool_values\": {}, \"is_single_tensor_return\": false, "
               "\"custom_obj_values\": {}, \"sym_float_values\": {}},\n"
               "\"signature\": {\"input_specs\": [");
    placeholders(b, p, true);
    sb_puts(b, "], \"output_specs\": [");
    for (size_t i = 0; i < g->n_outputs; i++)
        sb_printf(b, "%s{\"user_output\": {\"arg\": {\"as_tensor\": {\"name\": \"%s\"}}}}",
                  i ? ", " : "", p->names[g->outputs[i]]);
    sb_puts(b, "]},\n\"module_call_graph\": [{\"fqn\": \"\", \"signature\": {\"inputs\": [], "
               "\"outputs\": [], ");
    call_specs(b, g, p->model_output);
    sb_puts(b, ", \"forward_arg_names\": [");
    for (size_t i = 0; i < g->n_inputs; i++) {
        sb_puts(b, i ? ", " : "");
        pt2_json_str(b, g->values[g->inputs[i]].name);
    }
    sb_puts(b, "]}}");
    pt_module_calls(p, b);
    sb_puts(b, "], \"metadata\": {}, \"treespec_namedtuple_fields\": {}},\n"
               "\"opset_version\": {\"aten\": 10}, \"range_constraints\": {");
    int listed = 0;
    for (int s = 0; s < g->syms.n; s++) {
        const g_sym *y = &g->syms.s[s];
        if (!pt2_input_has_symbol(g, s))
            continue; /* a symbol no input has (decode's query of 1): not in the program */
        sb_printf(b, "%s\"s%d\": {\"min_val\": %lld, ", listed++ ? ", " : "", s,
                  (long long)y->min);
        if (y->max)
            sb_printf(b, "\"max_val\": %lld}", (long long)y->max);
        else
            sb_puts(b, "\"max_val\": null}");
    }
    sb_puts(b, "}, \"schema_version\": {\"major\": 8, \"minor\": 20}, "
               /* the torch whose serialized schema this follows (kept as metadata only) */
               "\"verifiers\": [\"TRAINING\"], \"torch_version\": \"2.13.0\"}\n");
}

static void user_inputs(pt_printer *p)
{
    const g_graph *g = p->g;
    for (size_t i = 0; i < g->n_inputs && p->st == FERRY_OK; i++) {
        const g_value *x = &g->values[g->inputs[i]];
        const char *name = pt_fresh(p, x->name);
        if (!name)
            return;
        p->names[g->inputs[i]] = (char *)name;
        pt_tensor_value(p, name, x->dtype, &x->shape);
    }
}

/* Every live node; first those outside the decoder layers that the layers read and that need
 * nothing a layer computes (the embedding, the rotary tables and the mask, which lowering
 * makes where layer 0 first reads them): each module's nodes then lie together, as
 * torch.export.unflatten needs, and in transformers' order (the model computes them before its
 * layers). */
static void emit_nodes(pt_printer *p)
{
    const g_graph *g = p->g;
    if (p->st != FERRY_OK) /* p->ints may be missing */
        return;
    bool *early = calloc(g->n_values ? g->n_values : 1, sizeof *early);
    bool *wanted = calloc(g->n_values ? g->n_values : 1, sizeof *wanted);
    bool *hoisted = calloc(g->n_nodes ? g->n_nodes : 1, sizeof *hoisted);
    bool *in_layer = calloc(g->n_nodes ? g->n_nodes : 1, sizeof *in_layer);
    if (!early || !wanted || !hoisted || !in_layer) {
        pt_fail(p, FERRY_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t v = 0; v < g->n_values; v++)
        early[v] = true; /* inputs, weights and constants; node outputs are cleared below */
    for (size_t i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_out; k++) {
            int v = g->nodes[i].out[k];
            /* an integer known from the symbols is spelt from the inputs, not computed */
            if (v != G_NONE && !p->ints[v].known)
                early[v] = false;
        }
    /* the candidates: outside the layers, over inputs and other candidates only */
    for (size_t i = 0; i < g->n_nodes; i++) {
        const g_node *n = &g->nodes[i];
        in_layer[i] = pt_module_in_layer(p, n);
        bool ok = !n->dead && !in_layer[i];
        for (int k = 0; k < n->n_in && ok; k++)
            ok = n->in[k] == G_NONE || early[n->in[k]];
        if (!ok)
            continue;
        hoisted[i] = true;
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] != G_NONE)
                early[n->out[k]] = true;
    }
    /* of those, the ones a layer reads, directly or through another (backwards: consumers
     * follow producers); the rest (the final norm's weight offset) stay in their module */
    for (size_t i = g->n_nodes; i-- > 0;) {
        const g_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        if (hoisted[i]) {
            bool used = false;
            for (int k = 0; k < n->n_out; k++)
                used |= n->out[k] != G_NONE && wanted[n->out[k]];
            hoisted[i] = used;
        }
        if (hoisted[i] || in_layer[i])
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k] != G_NONE)
                    wanted[n->in[k]] = true;
    }
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < g->n_nodes && p->st == FERRY_OK; i++)
            if (!g->nodes[i].dead && hoisted[i] == (pass == 0)) {
                p->ir_name = g->nodes[i].name;
                p->ir_op = g->nodes[i].op;
                aten_emit_node(&p->emit, i);
            }
    p->ir_name = NULL;
done:
    free(early);
    free(wanted);
    free(hoisted);
    free(in_layer);
}

ferry_status pt2_print_program(g_graph *g, bool model_output, pt2_program *out, fy_err *err)
{
    *out = (pt2_program){0};
    pt_printer p = {.sink = {&pt_sink_ops}, .g = g, .prog = out, .err = err,
                    .model_output = model_output};
    p.ints = aten_track(g);
    p.names = calloc(g->n_values ? g->n_values : 1, sizeof *p.names);
    if (!p.ints || !p.names || !aten_emitter_init(&p.emit, g, p.ints, &p.sink))
        pt_fail(&p, FERRY_ERR_NOMEM, "out of memory");
    /* the user inputs keep their names (parameters and constants are named when first read) */
    user_inputs(&p);
    emit_nodes(&p);
    aten_emit_mutations(&p.emit);
    for (size_t i = 0; i < g->n_outputs && p.st == FERRY_OK; i++)
        pt_tensor(&p, g->outputs[i]);
    strbuf b = {0};
    if (p.st == FERRY_OK) {
        assemble(&b, &p);
        if (b.oom || p.nodes.oom || p.tensor_values.oom || p.sym_int_values.oom)
            pt_fail(&p, FERRY_ERR_NOMEM, "out of memory printing the program");
    }
    if (p.st == FERRY_OK) {
        out->json_len = b.len;
        out->json = sb_take(&b);
    }
    sb_free(&b);
    sb_free(&p.nodes);
    sb_free(&p.tensor_values);
    sb_free(&p.sym_int_values);
    for (int i = 0; i < p.depth; i++)
        sb_free(&p.frame[i].b);
    for (size_t i = 0; i < p.cap_taken; i++)
        free(p.taken[i]);
    free(p.taken);
    for (size_t i = 0; i < p.n_modules; i++)
        free(p.modules[i]);
    free(p.modules);
    free(p.stack_json);
    free(p.syms);
    free(p.names);
    free(p.temps);
    free(p.ints);
    aten_emitter_free(&p.emit);
    if (p.st != FERRY_OK)
        pt2_program_free(out);
    return p.st;
}

void pt2_program_free(pt2_program *prog)
{
    free(prog->json);
    for (size_t i = 0; i < prog->n_params; i++)
        free(prog->params[i].fqn);
    for (size_t i = 0; i < prog->n_buffers; i++)
        free(prog->buffers[i].fqn);
    free(prog->params);
    free(prog->buffers);
    *prog = (pt2_program){0};
}
