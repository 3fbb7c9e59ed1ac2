/* ir_layers.c — the OpenVINO IR printer's building blocks: element types and shapes as IR
 * spells them, one layer with its ports and edges, Const layers over bytes placed in the .bin
 * (a weight's in fp16 under compress_to_fp16), and dims computed at run time from the inputs'
 * shapes (ShapeOf, Gather, arithmetic) where a reshape needs more than one symbolic dim. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/openvino/ir_printer.h"
#include "util/dtype.h"

const char *ov_type(ferry_dtype dt)
{
    switch (dt) {
    case FERRY_F32: return "f32";
    case FERRY_F16: return "f16";
    case FERRY_BF16: return "bf16";
    case FERRY_F64: return "f64";
    case FERRY_I8: return "i8";
    case FERRY_I16: return "i16";
    case FERRY_I32: return "i32";
    case FERRY_I64: return "i64";
    case FERRY_U8: return "u8";
    case FERRY_U16: return "u16";
    case FERRY_U32: return "u32";
    case FERRY_U64: return "u64";
    case FERRY_BOOL: return "boolean";
    case FERRY_U4: return "u4";
    case FERRY_I4: return "i4";
    default: return NULL;
    }
}

/* The port precision OpenVINO writes for an element type ("FP32", "I64", "BOOL"). */
static const char *ov_precision(ferry_dtype dt)
{
    switch (dt) {
    case FERRY_F32: return "FP32";
    case FERRY_F16: return "FP16";
    case FERRY_BF16: return "BF16";
    case FERRY_F64: return "FP64";
    case FERRY_I8: return "I8";
    case FERRY_I16: return "I16";
    case FERRY_I32: return "I32";
    case FERRY_I64: return "I64";
    case FERRY_U8: return "U8";
    case FERRY_U16: return "U16";
    case FERRY_U32: return "U32";
    case FERRY_U64: return "U64";
    case FERRY_BOOL: return "BOOL";
    case FERRY_U4: return "U4";
    case FERRY_I4: return "I4";
    default: return "UNSPECIFIED";
    }
}

void ov_xml_text(strbuf *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': sb_puts(b, "&amp;"); break;
        case '<': sb_puts(b, "&lt;"); break;
        case '>': sb_puts(b, "&gt;"); break;
        case '"': sb_puts(b, "&quot;"); break;
        case '\'': sb_puts(b, "&apos;"); break;
        default: sb_printf(b, "%c", *s); break;
        }
    }
}

static void port(strbuf *b, int id, ferry_dtype dt, const g_shape *s, const char *names)
{
    sb_printf(b, "\t\t\t\t<port id=\"%d\" precision=\"%s\"", id, ov_precision(dt));
    if (names) {
        sb_puts(b, " names=\"");
        ov_xml_text(b, names);
        sb_puts(b, "\"");
    }
    sb_puts(b, s->rank ? ">\n" : " />\n");
    for (int i = 0; i < s->rank; i++) {
        int64_t c;
        sb_printf(b, "\t\t\t\t\t<dim>%lld</dim>\n",
                  g_dim_is_const(s->d[i], &c) ? (long long)c : -1LL);
    }
    if (s->rank)
        sb_puts(b, "\t\t\t\t</port>\n");
}

/* "3,4" ("" for a scalar); with `syms` (a Parameter's or variable's shape) a symbolic dim is
 * "?", or "min..max" for a bounded symbol (--dim NAME:AXIS=SYM:MIN:MAX), which OpenVINO
 * enforces. */
void ov_shape_attr(strbuf *b, const g_shape *s, const g_symtab *syms)
{
    for (int i = 0; i < s->rank; i++) {
        int64_t c;
        const g_dim *d = &s->d[i];
        sb_puts(b, i ? "," : "");
        if (g_dim_is_const(*d, &c))
            sb_printf(b, "%lld", (long long)c);
        else if (!syms)
            sb_puts(b, "-1");
        else if (!d->unknown && d->n == 1 && d->c == 0 && d->t[0].coef == 1 &&
                 syms->s[d->t[0].sym].max > 0)
            sb_printf(b, "%lld..%lld", (long long)syms->s[d->t[0].sym].min,
                      (long long)syms->s[d->t[0].sym].max);
        else
            sb_puts(b, "?");
    }
}

bool ov_grow_at(printer *p)
{
    size_t n = p->g->n_values;
    if (n <= p->n_at)
        return true;
    ov_in *grown = realloc(p->at, n * sizeof *grown);
    if (!grown)
        return false;
    p->at = grown;
    int *shapes = realloc(p->shape_of, n * sizeof *shapes);
    if (!shapes)
        return false;
    p->shape_of = shapes;
    for (size_t i = p->n_at; i < n; i++)
        grown[i].layer = shapes[i] = -1;
    p->n_at = n;
    return true;
}

ov_in ov_node_port(int layer, int port, ferry_dtype dt, const g_shape *s)
{
    return (ov_in){layer, port, dt, *s};
}

/* Writes one layer (and an rt_info attribute when `rt_attribute`): `data` its attributes (NULL: none), its
 * inputs as edges from where they are produced, its outputs numbered after the inputs. Returns the layer id. */
static int layer_rt(printer *p, const char *type, const char *version, const char *name,
                    const char *data, const char *rt_attribute, const ov_in *ins, int n_in,
                    const ov_out *outs, int n_out)
{
    int id = p->next_layer++;
    if (p->placing)
        return id; /* the first pass only places bytes: no text, no edges */
    strbuf *b = &p->layers;
    sb_printf(b, "\t\t<layer id=\"%d\" name=\"", id);
    ov_xml_text(b, name);
    sb_printf(b, "\" type=\"%s\" version=\"%s\">\n", type, version);
    if (data)
        sb_printf(b, "\t\t\t<data %s />\n", data);
    if (rt_attribute)
        sb_printf(b, "\t\t\t<rt_info>\n\t\t\t\t<attribute name=\"%s\" version=\"0\" />\n"
                  "\t\t\t</rt_info>\n", rt_attribute);
    if (n_in) {
        sb_puts(b, "\t\t\t<input>\n");
        for (int i = 0; i < n_in; i++) {
            port(b, i, ins[i].dtype, &ins[i].shape, NULL);
            sb_printf(&p->edges, "\t\t<edge from-layer=\"%d\" from-port=\"%d\" to-layer=\"%d\" "
                      "to-port=\"%d\" />\n", ins[i].layer, ins[i].port, id, i);
        }
        sb_puts(b, "\t\t\t</input>\n");
    }
    if (n_out) {
        sb_puts(b, "\t\t\t<output>\n");
        for (int i = 0; i < n_out; i++)
            port(b, n_in + i, outs[i].dtype, &outs[i].shape, outs[i].names);
        sb_puts(b, "\t\t\t</output>\n");
    }
    sb_puts(b, "\t\t</layer>\n");
    return id;
}

int ov_layer(printer *p, const char *type, const char *version, const char *name,
             const char *data, const ov_in *ins, int n_in, const ov_out *outs, int n_out)
{
    return layer_rt(p, type, version, name, data, NULL, ins, n_in, outs, n_out);
}

/* A Const layer over `length` bytes at `offset` of the .bin. */
int ov_const_layer(printer *p, const char *name, ferry_dtype dt, const g_shape *s,
                   uint64_t offset, uint64_t length, const char *names)
{
    strbuf data = {0};
    sb_printf(&data, "element_type=\"%s\" shape=\"", ov_type(dt));
    ov_shape_attr(&data, s, NULL);
    sb_printf(&data, "\" offset=\"%llu\" size=\"%llu\"", (unsigned long long)offset,
              (unsigned long long)length);
    ov_out o = {dt, *s, names};
    int id = data.oom ? -1 : ov_layer(p, "Const", "opset1", name, data.data, NULL, 0, &o, 1);
    if (data.oom)
        p->layers.oom = true; /* the XML is then refused as a whole */
    sb_free(&data);
    return id;
}

/* Places (first pass) or finds (second) part `part` of weight recipe `w`. */
ferry_status ov_weight_bytes(printer *p, const g_weight *w, w_part part, const char *name,
                             uint64_t *offset, uint64_t *length)
{
    if (p->placing)
        return pl_place(p->bin, w, part, offset, length, p->err);
    if (pl_find(p->bin, w, part, offset, length))
        return FERRY_OK;
    return fy_fail(p->err, FERRY_ERR_INTERNAL, "weight '%s' was not placed in %s", name,
                   pl_name(p->bin));
}

/* The port carrying value `v`: a Const layer the first time a constant or weight is read (its
 * bytes placed in the first pass, found in the second). */
ferry_status ov_value_in(printer *p, int v, ov_in *out)
{
    if (!ov_grow_at(p))
        return fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory");
    if (p->at[v].layer >= 0) {
        *out = p->at[v];
        return FERRY_OK;
    }
    const g_value *x = &p->g->values[v];
    if (x->kind != GV_CONST && x->kind != GV_WEIGHT)
        return fy_fail(p->err, FERRY_ERR_INTERNAL, "OpenVINO: '%s' is read before it is made",
                       x->name);
    if (x->kind == GV_WEIGHT && x->weight.quant.bits)
        return fy_fail(p->err, FERRY_ERR_INTERNAL, "OpenVINO: the quantized weight '%s' is read "
                       "without its decompression", x->name);
    const char *type = ov_type(x->dtype);
    if (!type)
        return fy_fail(p->err, FERRY_ERR_INTERNAL, "OpenVINO: '%s' has dtype %s, which it has no "
                       "element type for", x->name, dt_st_name(x->dtype));
    uint64_t offset = 0, length = x->kind == GV_CONST ? x->nbytes : 0;
    ferry_status st = FERRY_OK;
    if (x->kind == GV_WEIGHT && p->opt->compress_to_fp16 && x->dtype == FERRY_F32) {
        /* compress_to_fp16: the weight's bytes in fp16, converted on load; the "decompression"
         * mark is what keeps OpenVINO from folding it back to fp32 in memory */
        g_weight half = x->weight;
        half.dtype = FERRY_F16;
        half.saturate = true; /* as OpenVINO's own compression: no weight becomes inf */
        char name[600];
        snprintf(name, sizeof name, "%s/compressed", x->name);
        if ((st = ov_weight_bytes(p, &half, W_PART_DATA, x->name, &offset, &length)) != FERRY_OK)
            return st;
        ov_in c = {ov_const_layer(p, name, FERRY_F16, &x->shape, offset, length, NULL), 0,
                   FERRY_F16, x->shape};
        ov_out o = {FERRY_F32, x->shape, x->name};
        int id = layer_rt(p, "Convert", "opset1", x->name, "destination_type=\"f32\"",
                          "decompression", &c, 1, &o, 1);
        p->at[v] = ov_node_port(id, 1, FERRY_F32, &x->shape);
        *out = p->at[v];
        return c.layer < 0 ? fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory") : FERRY_OK;
    }
    if (x->kind == GV_WEIGHT) {
        st = ov_weight_bytes(p, &x->weight, W_PART_DATA, x->name, &offset, &length);
    } else if (x->nbytes) {
        if (p->placing)
            st = pl_place_const(p->bin, x, p->err);
        else if (!pl_find_const(p->bin, x, &offset))
            st = fy_fail(p->err, FERRY_ERR_INTERNAL, "constant '%s' was not placed in %s",
                         x->name, pl_name(p->bin));
    }
    if (st != FERRY_OK)
        return st;
    int id = ov_const_layer(p, x->name, x->dtype, &x->shape, offset, length, x->name);
    if (id < 0)
        return fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory");
    p->at[v] = (ov_in){id, 0, x->dtype, x->shape};
    *out = p->at[v];
    return FERRY_OK;
}

ferry_status ov_const_in(printer *p, int v, ov_in *out)
{
    if (v == G_NONE)
        return fy_fail(p->err, p->g->err.status ? p->g->err.status : FERRY_ERR_NOMEM, "%s",
                       p->g->err.status ? p->g->err.msg : "out of memory");
    return ov_value_in(p, v, out);
}

ferry_status ov_i64_in(printer *p, int n, const int64_t *vals, ov_in *out)
{
    return ov_const_in(p, g_const_i64(p->g, n, vals), out);
}

g_shape ov_shape1(int64_t n)
{
    g_shape s = {.rank = 1};
    s.d[0] = g_dim_const(n);
    return s;
}

/* The int64 [1] extent of axis k of value `v` (a graph input or a cache read), at run time. */
static ferry_status input_extent(printer *p, int v, int k, const char *name, ov_in *out)
{
    g_graph *g = p->g;
    if (p->shape_of[v] < 0) {
        ov_in x;
        if (ov_value_in(p, v, &x) != FERRY_OK)
            return p->err->status;
        char lname[600];
        snprintf(lname, sizeof lname, "%s/ShapeOf", g->values[v].name);
        ov_out o = {FERRY_I64, ov_shape1(x.shape.rank), NULL};
        p->shape_of[v] = ov_layer(p, "ShapeOf", "opset3", lname, "output_type=\"i64\"", &x, 1,
                                  &o, 1);
    }
    ov_in ins[3];
    int64_t index = k;
    if (ov_i64_in(p, 1, &index, &ins[1]) != FERRY_OK ||
        ov_const_in(p, g_scalar_i64(g, 0), &ins[2]) != FERRY_OK)
        return p->err->status;
    g_shape full = ov_shape1(g->values[v].shape.rank);
    ins[0] = ov_node_port(p->shape_of[v], 1, FERRY_I64, &full);
    ov_out o = {FERRY_I64, ov_shape1(1), NULL};
    int id = ov_layer(p, "Gather", "opset8", name, "batch_dims=\"0\"", ins, 3, &o, 1);
    *out = ov_node_port(id, 3, FERRY_I64, &o.shape);
    return FERRY_OK;
}

/* Finds the graph input (or, in a stateful model, cache read) axis whose dim is `d` exactly. */
static bool find_input_dim(const g_graph *g, g_dim d, int *value, int *axis)
{
    if (g_input_dim(g, d, value, axis))
        return true;
    for (size_t i = 0; i < g->n_states; i++) {
        int v = g->states[i].in;
        if (v != G_NONE && (*axis = g_value_axis(&g->values[v], d)) >= 0) {
            *value = v;
            return true;
        }
    }
    return false;
}

static ferry_status binary_i64(printer *p, const char *type, const char *name, ov_in a, ov_in b,
                               ov_in *out)
{
    ov_in ins[2] = {a, b};
    ov_out o = {FERRY_I64, ov_shape1(1), NULL};
    int id = ov_layer(p, type, "opset1", name, "auto_broadcast=\"numpy\"", ins, 2, &o, 1);
    *out = ov_node_port(id, 2, FERRY_I64, &o.shape);
    return FERRY_OK;
}

/* One dim of a shape computed at run time, as int64 [1]: a constant, the extent of an input axis
 * that has this very dim, or c + sum k * symbol term by term. */
ferry_status ov_runtime_dim(printer *p, const char *node, int i, g_dim d, ov_in *out)
{
    g_graph *g = p->g;
    char name[700];
    int64_t c;
    int input, axis;
    if (d.unknown || g_dim_is_const(d, &c))
        return ov_i64_in(p, 1, (int64_t[]){d.unknown ? -1 : c}, out);
    snprintf(name, sizeof name, "%s/dim%d", node, i);
    if (find_input_dim(g, d, &input, &axis))
        return input_extent(p, input, axis, name, out);
    ov_in acc = {.layer = -1};
    for (int t = 0; t < d.n; t++) {
        g_dim lone = g_dim_sym(d.t[t].sym);
        if (!find_input_dim(g, lone, &input, &axis))
            return fy_fail(p->err, FERRY_ERR_INTERNAL, "OpenVINO: no graph input carries the "
                           "symbol '%s'", g->syms.s[d.t[t].sym].name);
        ov_in term, k;
        snprintf(name, sizeof name, "%s/dim%d/term%d", node, i, t);
        if (input_extent(p, input, axis, name, &term) != FERRY_OK ||
            ov_i64_in(p, 1, &d.t[t].coef, &k) != FERRY_OK)
            return p->err->status;
        snprintf(name, sizeof name, "%s/dim%d/term%d/mul", node, i, t);
        binary_i64(p, "Multiply", name, term, k, &term);
        if (acc.layer < 0) {
            acc = term;
        } else {
            snprintf(name, sizeof name, "%s/dim%d/term%d/add", node, i, t);
            binary_i64(p, "Add", name, acc, term, &acc);
        }
    }
    ov_in cst;
    if (ov_i64_in(p, 1, &d.c, &cst) != FERRY_OK)
        return p->err->status;
    snprintf(name, sizeof name, "%s/dim%d", node, i);
    return binary_i64(p, "Add", name, acc, cst, out);
}

/* Reshape's target: a constant with 0 (the input's dim) and -1 (the one dim solved) where they
 * say the same thing, else a shape computed at run time. */
ferry_status ov_reshape_target(printer *p, const g_node *n, ov_in *out)
{
    const g_graph *g = p->g;
    const g_shape *in = &g->values[n->in[0]].shape, *t = &n->a.shape;
    int64_t spec[G_MAX_RANK];
    int free_dims = g_reshape_literal(in, t, spec);
    if (free_dims <= 1)
        return ov_i64_in(p, t->rank, spec, out);
    ov_in parts[G_MAX_RANK];
    for (int i = 0; i < t->rank; i++)
        if (ov_runtime_dim(p, n->name, i, t->d[i], &parts[i]) != FERRY_OK)
            return p->err->status;
    char name[600];
    snprintf(name, sizeof name, "%s/shape", n->name);
    ov_out o = {FERRY_I64, ov_shape1(t->rank), NULL};
    int id = ov_layer(p, "Concat", "opset1", name, "axis=\"0\"", parts, t->rank, &o, 1);
    *out = ov_node_port(id, t->rank, FERRY_I64, &o.shape);
    return FERRY_OK;
}
