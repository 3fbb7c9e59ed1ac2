/* ir_print.c — OpenVINO IR v11: the .xml of one lowered graph (layers, their ports with element
 * types and dims, edges) over a .bin holding every Const's bytes.
 *
 * Every graph input is a Parameter (dims -1 where symbolic), every graph output a Result fed by
 * the port whose tensor name is the output's name. Each IR node is one layer, except where
 * OpenVINO spells an attribute as an input: reshape targets, slice bounds, axes, permutations
 * and gather axes become Const layers (made as constants of the graph, so they are placed in
 * the .bin like any other), and a reshape to a shape with more than one symbolic dim computes
 * it at run time from the inputs' ShapeOf, as the ONNX printer does. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/openvino/openvino.h"
#include "util/dtype.h"
#include "util/fs.h"
#include "util/strbuf.h"

typedef struct ov_in {
    int layer, port;
    ferry_dtype dtype;
    g_shape shape;
} ov_in;

typedef struct printer {
    g_graph *g;
    pl_file *bin;
    const ov_options *opt;
    bool placing;            /* the first pass: place the bytes, write nothing */
    strbuf layers, edges;
    int next_layer;
    ov_in *at;               /* per value id: the port that carries it (layer -1: none yet) */
    int *shape_of;           /* per value id: its ShapeOf layer (-1: none yet) */
    size_t n_at;
    fy_err *err;
} printer;

static const char *ov_type(ferry_dtype dt)
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

static void xml_text(strbuf *b, const char *s)
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
        xml_text(b, names);
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
static void shape_attr(strbuf *b, const g_shape *s, const g_symtab *syms)
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

static bool grow_at(printer *p)
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

typedef struct ov_out {
    ferry_dtype dtype;
    g_shape shape;
    const char *names;       /* tensor names (NULL: none) */
} ov_out;

/* Writes one layer: `data` its attributes (NULL: none), its inputs as edges from where they are
 * produced, its outputs numbered after the inputs. Returns the layer id. */
static ov_in node_port(int layer, int port, ferry_dtype dt, const g_shape *s)
{
    return (ov_in){layer, port, dt, *s};
}

static int layer_rt(printer *p, const char *type, const char *version, const char *name,
                    const char *data, const char *rt_attribute, const ov_in *ins, int n_in,
                    const ov_out *outs, int n_out)
{
    int id = p->next_layer++;
    if (p->placing)
        return id; /* the first pass only places bytes: no text, no edges */
    strbuf *b = &p->layers;
    sb_printf(b, "\t\t<layer id=\"%d\" name=\"", id);
    xml_text(b, name);
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

static int layer(printer *p, const char *type, const char *version, const char *name,
                 const char *data, const ov_in *ins, int n_in, const ov_out *outs, int n_out)
{
    return layer_rt(p, type, version, name, data, NULL, ins, n_in, outs, n_out);
}

/* A Const layer over `length` bytes at `offset` of the .bin. */
static int const_layer(printer *p, const char *name, ferry_dtype dt, const g_shape *s,
                       uint64_t offset, uint64_t length, const char *names)
{
    strbuf data = {0};
    sb_printf(&data, "element_type=\"%s\" shape=\"", ov_type(dt));
    shape_attr(&data, s, NULL);
    sb_printf(&data, "\" offset=\"%llu\" size=\"%llu\"", (unsigned long long)offset,
              (unsigned long long)length);
    ov_out o = {dt, *s, names};
    int id = data.oom ? -1 : layer(p, "Const", "opset1", name, data.data, NULL, 0, &o, 1);
    if (data.oom)
        p->layers.oom = true; /* the XML is then refused as a whole */
    sb_free(&data);
    return id;
}

/* Places (first pass) or finds (second) part `part` of weight recipe `w`. */
static ferry_status weight_bytes(printer *p, const g_weight *w, w_part part, const char *name,
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
static ferry_status value_in(printer *p, int v, ov_in *out)
{
    if (!grow_at(p))
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
        if ((st = weight_bytes(p, &half, W_PART_DATA, x->name, &offset, &length)) != FERRY_OK)
            return st;
        ov_in c = {const_layer(p, name, FERRY_F16, &x->shape, offset, length, NULL), 0,
                   FERRY_F16, x->shape};
        ov_out o = {FERRY_F32, x->shape, x->name};
        int id = layer_rt(p, "Convert", "opset1", x->name, "destination_type=\"f32\"",
                          "decompression", &c, 1, &o, 1);
        p->at[v] = node_port(id, 1, FERRY_F32, &x->shape);
        *out = p->at[v];
        return c.layer < 0 ? fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory") : FERRY_OK;
    }
    if (x->kind == GV_WEIGHT) {
        st = weight_bytes(p, &x->weight, W_PART_DATA, x->name, &offset, &length);
    } else if (x->nbytes) {
        if (p->placing)
            st = pl_place_const(p->bin, x, p->err);
        else if (!pl_find_const(p->bin, x, &offset))
            st = fy_fail(p->err, FERRY_ERR_INTERNAL, "constant '%s' was not placed in %s",
                         x->name, pl_name(p->bin));
    }
    if (st != FERRY_OK)
        return st;
    int id = const_layer(p, x->name, x->dtype, &x->shape, offset, length, x->name);
    if (id < 0)
        return fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory");
    p->at[v] = (ov_in){id, 0, x->dtype, x->shape};
    *out = p->at[v];
    return FERRY_OK;
}

static ferry_status const_in(printer *p, int v, ov_in *out)
{
    if (v == G_NONE)
        return fy_fail(p->err, p->g->err.status ? p->g->err.status : FERRY_ERR_NOMEM, "%s",
                       p->g->err.status ? p->g->err.msg : "out of memory");
    return value_in(p, v, out);
}

static ferry_status i64_in(printer *p, int n, const int64_t *vals, ov_in *out)
{
    return const_in(p, g_const_i64(p->g, n, vals), out);
}

static g_shape shape1(int64_t n)
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
        if (value_in(p, v, &x) != FERRY_OK)
            return p->err->status;
        char lname[600];
        snprintf(lname, sizeof lname, "%s/ShapeOf", g->values[v].name);
        ov_out o = {FERRY_I64, shape1(x.shape.rank), NULL};
        p->shape_of[v] = layer(p, "ShapeOf", "opset3", lname, "output_type=\"i64\"", &x, 1,
                               &o, 1);
    }
    ov_in ins[3];
    int64_t index = k;
    if (i64_in(p, 1, &index, &ins[1]) != FERRY_OK ||
        const_in(p, g_scalar_i64(g, 0), &ins[2]) != FERRY_OK)
        return p->err->status;
    g_shape full = shape1(g->values[v].shape.rank);
    ins[0] = node_port(p->shape_of[v], 1, FERRY_I64, &full);
    ov_out o = {FERRY_I64, shape1(1), NULL};
    int id = layer(p, "Gather", "opset8", name, "batch_dims=\"0\"", ins, 3, &o, 1);
    *out = node_port(id, 3, FERRY_I64, &o.shape);
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
    ov_out o = {FERRY_I64, shape1(1), NULL};
    int id = layer(p, type, "opset1", name, "auto_broadcast=\"numpy\"", ins, 2, &o, 1);
    *out = node_port(id, 2, FERRY_I64, &o.shape);
    return FERRY_OK;
}

/* One dim of a shape computed at run time, as int64 [1]: a constant, the extent of an input axis
 * that has this very dim, or c + sum k * symbol term by term. */
static ferry_status runtime_dim(printer *p, const char *node, int i, g_dim d, ov_in *out)
{
    g_graph *g = p->g;
    char name[700];
    int64_t c;
    int input, axis;
    if (d.unknown || g_dim_is_const(d, &c))
        return i64_in(p, 1, (int64_t[]){d.unknown ? -1 : c}, out);
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
            i64_in(p, 1, &d.t[t].coef, &k) != FERRY_OK)
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
    if (i64_in(p, 1, &d.c, &cst) != FERRY_OK)
        return p->err->status;
    snprintf(name, sizeof name, "%s/dim%d", node, i);
    return binary_i64(p, "Add", name, acc, cst, out);
}

/* Reshape's target: a constant with 0 (the input's dim) and -1 (the one dim solved) where they
 * say the same thing, else a shape computed at run time. */
static ferry_status reshape_target(printer *p, const g_node *n, ov_in *out)
{
    const g_graph *g = p->g;
    const g_shape *in = &g->values[n->in[0]].shape, *t = &n->a.shape;
    int64_t spec[G_MAX_RANK];
    int free_dims = g_reshape_literal(in, t, spec);
    if (free_dims <= 1)
        return i64_in(p, t->rank, spec, out);
    ov_in parts[G_MAX_RANK];
    for (int i = 0; i < t->rank; i++)
        if (runtime_dim(p, n->name, i, t->d[i], &parts[i]) != FERRY_OK)
            return p->err->status;
    char name[600];
    snprintf(name, sizeof name, "%s/shape", n->name);
    ov_out o = {FERRY_I64, shape1(t->rank), NULL};
    int id = layer(p, "Concat", "opset1", name, "axis=\"0\"", parts, t->rank, &o, 1);
    *out = node_port(id, t->rank, FERRY_I64, &o.shape);
    return FERRY_OK;
}

static const char *binary_type(g_op op)
{
    switch (op) {
    case G_ADD: return "Add";
    case G_SUB: return "Subtract";
    case G_MUL: return "Multiply";
    case G_DIV: return "Divide";
    case G_POW: return "Power";
    case G_MAX: return "Maximum";
    case G_MIN: return "Minimum";
    case G_AND: return "LogicalAnd";
    case G_OR: return "LogicalOr";
    case G_EQUAL: return "Equal";
    case G_LESS: return "Less";
    case G_LESS_EQUAL: return "LessEqual";
    case G_GREATER: return "Greater";
    case G_GREATER_EQUAL: return "GreaterEqual";
    case G_WHERE: return "Select";
    default: return NULL;
    }
}

static const char *unary_type(g_op op)
{
    switch (op) {
    case G_SQRT: return "Sqrt";
    case G_EXP: return "Exp";
    case G_COS: return "Cos";
    case G_SIN: return "Sin";
    case G_SIGMOID: return "Sigmoid";
    case G_TANH: return "Tanh";
    case G_ERF: return "Erf";
    case G_NEG: return "Negative";
    case G_NOT: return "LogicalNot";
    default: return NULL;
    }
}

/* A block-quantized weight as OpenVINO's compressed-weight pattern (the CPU plugin runs the
 * MatMul or Gather reading it on the compressed bytes): the codes as a u4/u8 Const
 * [out, in/block, block] → Convert → Subtract the zero point (the per-block zeros part
 * [out, in/block, 1], u4 or one a byte, or the mid code when symmetric) → Multiply the scales [out, in/block, 1]
 * → Reshape [out, in]. Codes, zeros and scales are the bytes the weight stream makes for
 * every backend (ir/weights.h); the target checked that rows are whole blocks. */
static ferry_status emit_dequantize(printer *p, const g_node *n)
{
    g_graph *g = p->g;
    const g_value *w = &g->values[n->in[0]];
    const w_quant *q = &w->weight.quant;
    int64_t rows, cols;
    w_matrix(&w->weight, &rows, &cols);
    ferry_dtype code = q->bits == 4 ? FERRY_U4 : FERRY_U8, dt = w->dtype;
    g_shape codes = {.rank = 3, .d = {g_dim_const(rows), g_dim_const(cols / q->block),
                                      g_dim_const(q->block)}};
    g_shape per_block = codes;
    per_block.d[2] = g_dim_const(1);
    char name[600];
    uint64_t offset, length;
    ferry_status st;
    if ((st = weight_bytes(p, &w->weight, W_PART_CODES, w->name, &offset, &length)) != FERRY_OK)
        return st;
    ov_in c = {const_layer(p, w->name, code, &codes, offset, length, NULL), 0, code, codes};
    snprintf(name, sizeof name, "%s/convert", w->name);
    ov_out co = {dt, codes, NULL};
    char to[48];
    snprintf(to, sizeof to, "destination_type=\"%s\"", ov_type(dt)); /* the scales' type */
    ov_in x[2] = {node_port(layer(p, "Convert", "opset1", name, to, &c, 1, &co, 1), 1, dt,
                            &codes)};
    ov_in zero;
    if (q->symmetric) {
        uint8_t mid = q->bits == 4 ? 8 : 128;
        if ((st = const_in(p, g_const(g, code, 0, NULL, &mid), &zero)) != FERRY_OK)
            return st;
    } else {
        if ((st = weight_bytes(p, &w->weight, W_PART_ZEROS, w->name, &offset, &length)) !=
            FERRY_OK)
            return st;
        ferry_dtype zt = q->zeros_bytes ? FERRY_U8 : code;
        snprintf(name, sizeof name, "%s/zero_point", w->name);
        zero = (ov_in){const_layer(p, name, zt, &per_block, offset, length, NULL), 0, zt,
                       per_block};
    }
    snprintf(name, sizeof name, "%s/zero_point/convert", w->name);
    ov_out zo = {dt, zero.shape, NULL};
    x[1] = node_port(layer(p, "Convert", "opset1", name, to, &zero, 1, &zo, 1), 1, dt,
                     &zero.shape);
    snprintf(name, sizeof name, "%s/zero_point/subtract", w->name);
    x[0] = node_port(layer(p, "Subtract", "opset1", name, "auto_broadcast=\"numpy\"", x, 2,
                           &co, 1), 2, dt, &codes);
    if ((st = weight_bytes(p, &w->weight, W_PART_SCALES, w->name, &offset, &length)) != FERRY_OK)
        return st;
    snprintf(name, sizeof name, "%s/scale", w->name);
    x[1] = (ov_in){const_layer(p, name, dt, &per_block, offset, length, NULL), 0, dt, per_block};
    snprintf(name, sizeof name, "%s/multiply", w->name);
    x[0] = node_port(layer(p, "Multiply", "opset1", name, "auto_broadcast=\"numpy\"", x, 2,
                           &co, 1), 2, dt, &codes);
    int64_t target[2] = {rows, cols};
    if ((st = i64_in(p, 2, target, &x[1])) != FERRY_OK)
        return st;
    const g_value *y = &g->values[n->out[0]];
    ov_out o = {dt, y->shape, y->name};
    int id = layer(p, "Reshape", "opset1", n->name, "special_zero=\"false\"", x, 2, &o, 1);
    if (!grow_at(p))
        return fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory");
    p->at[n->out[0]] = node_port(id, 2, dt, &y->shape);
    return FERRY_OK;
}

/* A backend op the target made (g_extern): its domain is the opset, its attributes the data. */
static ferry_status emit_extern(printer *p, const g_node *n)
{
    g_graph *g = p->g;
    const g_extern *e = n->a.ext;
    ov_in ins[G_MAX_IN];
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] == G_NONE || value_in(p, n->in[i], &ins[i]) != FERRY_OK)
            return n->in[i] == G_NONE
                       ? fy_fail(p->err, FERRY_ERR_INTERNAL, "node '%s': an absent input "
                                 "reached the OpenVINO printer", n->name)
                       : p->err->status;
    strbuf data = {0};
    for (int i = 0; i < e->n_attr; i++) {
        const g_ext_attr *a = &e->attr[i];
        sb_printf(&data, "%s%s=\"", i ? " " : "", a->name);
        if (a->kind == 'b')
            sb_puts(&data, a->i ? "true" : "false");
        else if (a->kind == 'i')
            sb_printf(&data, "%lld", (long long)a->i);
        else
            sb_printf(&data, "%.9g", a->f);
        sb_puts(&data, "\"");
    }
    ov_out o[G_MAX_OUT];
    for (int k = 0; k < n->n_out; k++)
        o[k] = (ov_out){g->values[n->out[k]].dtype, g->values[n->out[k]].shape,
                        g->values[n->out[k]].name};
    int id = layer(p, e->op_type, e->domain, n->name, e->n_attr ? data.data : NULL, ins,
                   n->n_in, o, n->n_out);
    bool oom = data.oom;
    sb_free(&data);
    if (oom || !grow_at(p))
        return fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory");
    for (int k = 0; k < n->n_out; k++)
        p->at[n->out[k]] = node_port(id, n->n_in + k, o[k].dtype, &o[k].shape);
    return FERRY_OK;
}

static ferry_status emit_node(printer *p, size_t index)
{
    g_graph *g = p->g;
    const g_node n = g->nodes[index];
    if (n.op == G_DEQUANTIZE)
        return emit_dequantize(p, &n);
    if (n.op == G_EXTERN)
        return emit_extern(p, &n);
    ov_in ins[G_MAX_IN + 4];
    int n_in = 0;
    /* ops whose attributes OpenVINO takes as inputs get them first (constants of the graph) */
    if (n.op == G_RECIPROCAL) {
        if (const_in(p, g_scalar_f(g, g->values[n.in[0]].dtype, 1.0), &ins[n_in++]) != FERRY_OK)
            return p->err->status;
    }
    for (int i = 0; i < n.n_in; i++) {
        if (n.in[i] == G_NONE)
            return fy_fail(p->err, FERRY_ERR_INTERNAL, "node '%s': an absent input reached the "
                           "OpenVINO printer", n.name);
        if (value_in(p, n.in[i], &ins[n_in++]) != FERRY_OK)
            return p->err->status;
    }
    const char *type = binary_type(n.op), *version = "opset1";
    strbuf data = {0};
    ferry_status st = FERRY_OK;
    if (type) {
        sb_puts(&data, "auto_broadcast=\"numpy\"");
        if (n.op == G_DIV)
            sb_puts(&data, " m_pythondiv=\"false\""); /* integer division truncates, as ONNX's */
    } else if ((type = unary_type(n.op))) {
    } else {
        switch (n.op) {
        case G_RECIPROCAL:
            type = "Divide";
            sb_puts(&data, "auto_broadcast=\"numpy\" m_pythondiv=\"false\"");
            break;
        case G_MATMUL:
            type = "MatMul";
            sb_printf(&data, "transpose_a=\"false\" transpose_b=\"%s\"",
                      n.a.transpose_b ? "true" : "false");
            break;
        case G_GATHER:
            type = "Gather", version = "opset8";
            sb_puts(&data, "batch_dims=\"0\"");
            st = const_in(p, g_scalar_i64(g, n.a.axis), &ins[n_in++]);
            break;
        case G_RESHAPE:
            type = "Reshape";
            sb_puts(&data, "special_zero=\"true\"");
            st = reshape_target(p, &n, &ins[n_in++]);
            break;
        case G_TRANSPOSE:
            type = "Transpose";
            st = i64_in(p, n.a.n_ints, n.a.ints, &ins[n_in++]);
            break;
        case G_CONCAT:
            type = "Concat";
            sb_printf(&data, "axis=\"%lld\"", (long long)n.a.axis);
            break;
        case G_SLICE: {
            type = "Slice", version = "opset8";
            int64_t one = 1;
            if ((st = i64_in(p, 1, &n.a.start, &ins[n_in++])) == FERRY_OK &&
                (st = i64_in(p, 1, &n.a.end, &ins[n_in++])) == FERRY_OK && /* G_END: INT64_MAX */
                (st = i64_in(p, 1, &one, &ins[n_in++])) == FERRY_OK)
                st = i64_in(p, 1, &n.a.axis, &ins[n_in++]);
            break;
        }
        case G_UNSQUEEZE:
            type = "Unsqueeze";
            st = i64_in(p, n.a.n_ints, n.a.ints, &ins[n_in++]);
            break;
        case G_CAST:
            type = "Convert";
            if (!ov_type(n.a.to))
                st = fy_fail(p->err, FERRY_ERR_INTERNAL, "node '%s': no OpenVINO type for %s",
                             n.name, dt_st_name(n.a.to));
            else
                sb_printf(&data, "destination_type=\"%s\"", ov_type(n.a.to));
            break;
        case G_SOFTMAX:
            type = "SoftMax", version = "opset8";
            sb_printf(&data, "axis=\"%lld\"", (long long)n.a.axis);
            break;
        case G_REDUCE_MEAN: case G_REDUCE_MAX:
            type = n.op == G_REDUCE_MEAN ? "ReduceMean" : "ReduceMax";
            sb_printf(&data, "keep_dims=\"%s\"", n.a.keepdims ? "true" : "false");
            st = i64_in(p, n.a.n_ints, n.a.ints, &ins[n_in++]);
            break;
        case G_SHAPE_OF:
            type = "ShapeOf", version = "opset3";
            sb_puts(&data, "output_type=\"i64\"");
            break;
        case G_RANGE:
            type = "Range", version = "opset4";
            if (!ov_type(g->values[n.out[0]].dtype))
                st = fy_fail(p->err, FERRY_ERR_INTERNAL, "node '%s': no OpenVINO type for %s",
                             n.name, dt_st_name(g->values[n.out[0]].dtype));
            else
                sb_printf(&data, "output_type=\"%s\"", ov_type(g->values[n.out[0]].dtype));
            break;
        case G_EXPAND:
            type = "Broadcast", version = "opset3";
            sb_puts(&data, "mode=\"bidirectional\"");
            break;
        case G_CUMSUM:
            type = "CumSum", version = "opset3";
            sb_puts(&data, "exclusive=\"false\" reverse=\"false\"");
            st = const_in(p, g_scalar_i64(g, n.a.axis), &ins[n_in++]);
            break;
        case G_SCATTER_ELEMENTS:
            type = "ScatterElementsUpdate", version = "opset12";
            sb_puts(&data, "reduction=\"none\" use_init_val=\"true\"");
            st = const_in(p, g_scalar_i64(g, n.a.axis), &ins[n_in++]);
            break;
        default:
            st = fy_fail(p->err, g_op_is_semantic(n.op) ? FERRY_ERR_INTERNAL
                                                        : FERRY_ERR_UNSUPPORTED,
                         "node '%s': %s is not supported by the OpenVINO backend yet", n.name,
                         g_op_name(n.op));
            break;
        }
    }
    if (st != FERRY_OK) {
        sb_free(&data);
        return st;
    }
    const g_value *y = &g->values[n.out[0]];
    ov_out o = {y->dtype, y->shape, y->name};
    int id;
    if (n.op == G_SHAPE_OF && (n.a.start != 0 || n.a.end != G_END)) {
        /* ShapeOf, then the axes [start, end) of it */
        int rank = g->values[n.in[0]].shape.rank;
        char name[600];
        snprintf(name, sizeof name, "%s/full", n.name);
        ov_out full = {FERRY_I64, shape1(rank), NULL};
        int s = layer(p, type, version, name, data.data, ins, n_in, &full, 1);
        ov_in sl[5] = {node_port(s, 1, FERRY_I64, &full.shape)};
        int64_t one = 1, zero = 0;
        if (i64_in(p, 1, &n.a.start, &sl[1]) != FERRY_OK ||
            i64_in(p, 1, &n.a.end, &sl[2]) != FERRY_OK || i64_in(p, 1, &one, &sl[3]) != FERRY_OK ||
            i64_in(p, 1, &zero, &sl[4]) != FERRY_OK) {
            sb_free(&data);
            return p->err->status;
        }
        id = layer(p, "Slice", "opset8", n.name, NULL, sl, 5, &o, 1);
        n_in = 5;
    } else {
        id = layer(p, type, version, n.name, data.data, ins, n_in, &o, 1);
    }
    bool oom = data.oom;
    sb_free(&data);
    if (oom || !grow_at(p))
        return fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory");
    p->at[n.out[0]] = node_port(id, n_in, o.dtype, &o.shape);
    return FERRY_OK;
}

/* A stateful model's caches (openvino_finish took them out of the graph's inputs and outputs):
 * each is a variable named as its input, read with ReadValue, its rows reordered by beam_idx,
 * and written back with Assign. A variable starts as its ReadValue's initialiser, zeros
 * [batch, kv heads, 0, head dim] (the batch read off an input at run time): the empty cache of a
 * first call. The CPU plugin needs the initialiser once it folds the cache into its attention
 * node. */
static ferry_status read_states(printer *p)
{
    g_graph *g = p->g;
    int beam = G_NONE;
    for (size_t i = 0; i < g->n_inputs; i++)
        if (strcmp(g->values[g->inputs[i]].name, OV_BEAM_IDX) == 0)
            beam = g->inputs[i];
    for (size_t i = 0; i < g->n_states; i++) {
        if (!g->states[i].internal)
            continue; /* an explicit cache: a Parameter and a Result like any other */
        if (beam == G_NONE)
            return fy_fail(p->err, FERRY_ERR_INTERNAL, "OpenVINO: a cache without %s",
                           OV_BEAM_IDX);
        int v = g->states[i].in;
        g_shape s = g->values[v].shape;
        ferry_dtype dt = g->values[v].dtype;
        const char *type = ov_type(dt);
        if (s.rank != 4 || !type)
            return fy_fail(p->err, FERRY_ERR_INTERNAL, "OpenVINO: cache '%s' is not a float "
                           "[batch, kv heads, length, head dim]", g->values[v].name);
        char name[600];
        /* the first call's cache: zeros [batch, kv heads, 0, head dim] */
        ov_in init[2], dims[4];
        for (int k = 0; k < 4; k++) {
            snprintf(name, sizeof name, "%s/init", g->values[v].name);
            if (runtime_dim(p, name, k, k == 2 ? g_dim_const(0) : s.d[k], &dims[k]) != FERRY_OK)
                return p->err->status;
        }
        snprintf(name, sizeof name, "%s/init/shape", g->values[v].name);
        ov_out so = {FERRY_I64, shape1(4), NULL};
        init[1] = node_port(layer(p, "Concat", "opset1", name, "axis=\"0\"", dims, 4, &so, 1), 4,
                            FERRY_I64, &so.shape);
        if (const_in(p, g_scalar_f(g, dt, 0.0), &init[0]) != FERRY_OK)
            return p->err->status;
        g_shape empty = s;
        empty.d[2] = g_dim_const(0);
        ov_out io = {dt, empty, NULL};
        snprintf(name, sizeof name, "%s/init", g->values[v].name);
        ov_in first = node_port(layer(p, "Broadcast", "opset3", name, "mode=\"numpy\"", init, 2,
                                      &io, 1), 2, dt, &empty);
        strbuf data = {0};
        sb_puts(&data, "variable_id=\"");
        xml_text(&data, g->values[v].name);
        sb_printf(&data, "\" variable_type=\"%s\" variable_shape=\"", type);
        shape_attr(&data, &s, &g->syms);
        sb_puts(&data, "\"");
        ov_out ro = {dt, s, NULL};
        snprintf(name, sizeof name, "%s/read", g->values[v].name);
        int id = layer(p, "ReadValue", "opset6", name, data.data, &first, 1, &ro, 1);
        bool oom = data.oom;
        sb_free(&data);
        if (oom)
            return fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory");
        ov_in gin[3] = {node_port(id, 1, dt, &s)};
        if (value_in(p, beam, &gin[1]) != FERRY_OK ||
            const_in(p, g_scalar_i64(g, 0), &gin[2]) != FERRY_OK)
            return p->err->status;
        ov_out go = {dt, s, g->values[v].name};
        id = layer(p, "Gather", "opset8", g->values[v].name, "batch_dims=\"0\"", gin, 3, &go, 1);
        p->at[v] = node_port(id, 3, dt, &s);
    }
    return FERRY_OK;
}

static ferry_status write_states(printer *p)
{
    g_graph *g = p->g;
    for (size_t i = 0; i < g->n_states; i++) {
        const g_state st = g->states[i];
        if (!st.internal)
            continue;
        ov_in y;
        if (value_in(p, st.out, &y) != FERRY_OK)
            return p->err->status;
        strbuf data = {0}, name = {0};
        sb_puts(&data, "variable_id=\"");
        xml_text(&data, g->values[st.in].name);
        sb_puts(&data, "\"");
        sb_printf(&name, "%s/assign", g->values[st.in].name);
        ov_out o = {y.dtype, y.shape, NULL};
        layer(p, "Assign", "opset6", name.data ? name.data : "", data.data, &y, 1, &o, 1);
        bool oom = data.oom || name.oom;
        sb_free(&data);
        sb_free(&name);
        if (oom)
            return fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory");
    }
    return FERRY_OK;
}

ferry_status ov_print_model(g_graph *g, pl_file *bin, const ov_options *opt,
                            const char *graph_name, const char *dir, const char *xml_file,
                            fy_err *err)
{
    printer p = {.g = g, .bin = bin, .opt = opt, .placing = xml_file == NULL, .err = err};
    ferry_status st = FERRY_OK;
    if (!grow_at(&p)) {
        st = fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < g->n_inputs; i++) {
        const g_value *x = &g->values[g->inputs[i]];
        const char *type = ov_type(x->dtype);
        if (!type) {
            st = fy_fail(err, FERRY_ERR_INTERNAL, "OpenVINO: input '%s' has dtype %s", x->name,
                         dt_st_name(x->dtype));
            goto done;
        }
        strbuf data = {0};
        sb_printf(&data, "shape=\"");
        shape_attr(&data, &x->shape, &g->syms);
        sb_printf(&data, "\" element_type=\"%s\"", type);
        if (data.oom) {
            sb_free(&data);
            st = fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
            goto done;
        }
        ov_out o = {x->dtype, x->shape, x->name};
        int id = layer(&p, "Parameter", "opset1", x->name, data.data, NULL, 0, &o, 1);
        sb_free(&data);
        p.at[g->inputs[i]] = node_port(id, 0, x->dtype, &x->shape);
    }
    if ((st = read_states(&p)) != FERRY_OK)
        goto done;
    /* nodes in order (inputs before their readers); the printer may add constants, never nodes */
    size_t n_nodes = g->n_nodes;
    for (size_t i = 0; i < n_nodes && st == FERRY_OK; i++)
        if (!g->nodes[i].dead)
            st = emit_node(&p, i);
    for (size_t i = 0; i < g->n_outputs && st == FERRY_OK; i++) {
        ov_in y;
        if ((st = value_in(&p, g->outputs[i], &y)) != FERRY_OK)
            break;
        char name[600];
        snprintf(name, sizeof name, "%s/sink_port_0", g->values[g->outputs[i]].name);
        layer(&p, "Result", "opset1", name, NULL, &y, 1, NULL, 0);
    }
    if (st == FERRY_OK)
        st = write_states(&p);
    if (st != FERRY_OK || p.placing)
        goto done;
    strbuf xml = {0};
    sb_puts(&xml, "<?xml version=\"1.0\"?>\n<net name=\"");
    xml_text(&xml, graph_name ? graph_name : "ferry");
    sb_printf(&xml, "\" version=\"11\">\n\t<layers>\n%s\t</layers>\n\t<edges>\n%s\t</edges>\n"
              "\t<rt_info>\n\t\t<info name=\"producer\" value=\"ferry %s\" />\n",
              p.layers.data ? p.layers.data : "", p.edges.data ? p.edges.data : "",
              FERRY_VERSION);
    if (opt->kv_cache_precision)
        /* compile options the runtime takes from the model unless the caller sets them */
        sb_printf(&xml, "\t\t<runtime_options>\n\t\t\t<KV_CACHE_PRECISION value=\"%s\" />\n"
                  "\t\t</runtime_options>\n", opt->kv_cache_precision);
    sb_puts(&xml, "\t</rt_info>\n</net>\n");
    if (xml.oom || p.layers.oom || p.edges.oom)
        st = fy_fail(err, FERRY_ERR_NOMEM, "out of memory writing %s", xml_file);
    else {
        char path[PATH_MAX];
        st = fs_join(path, sizeof path, dir, xml_file, err);
        if (st == FERRY_OK)
            st = fs_write_file(path, xml.data, xml.len, err);
    }
    sb_free(&xml);
done:
    if (st == FERRY_OK && !g_ok(g))
        st = fy_fail(err, g->err.status, "%s", g->err.msg);
    sb_free(&p.layers);
    sb_free(&p.edges);
    free(p.at);
    free(p.shape_of);
    return st;
}
