/* onnx_print.c — a legalized IR graph as an ONNX ModelProto (standard ops, default domain;
 * extern nodes in the domain they name, e.g. onnxruntime's com.microsoft).
 * Field numbers are onnx.proto's. Each IR op has its ONNX op type here; attributes that ONNX
 * takes as tensors (reshape shapes, slice bounds, axes) become small initializers named after
 * the node. A reshape to a symbolic shape uses 0 (copy the input's dim) and -1 (solve one dim)
 * where they say the same thing, and otherwise reads the symbols off the graph inputs.
 *
 * A block-quantized weight is two or three initializers, `name`, `name`_scales and
 * `name`_zero_points, shaped for what reads it: for DequantizeLinear uint4/uint8 codes
 * [out, in] and zero points [out, in/block]; for onnxruntime's MatMulNBits uint8 codes
 * [out, in/block, block*bits/8] and zero points [out, ceil(in/block*bits/8)]; scales
 * [out, in/block] for both. The bytes are the same (ir/weights.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/onnx/onnx.h"
#include "io/pb.h"
#include "util/dtype.h"
#include "util/crc_pieces.h"
#include "util/fs.h"

enum { MODEL_IR_VERSION = 1, MODEL_PRODUCER_NAME = 2, MODEL_PRODUCER_VERSION = 3, MODEL_GRAPH = 7,
       MODEL_OPSET_IMPORT = 8 };
enum { OPSET_DOMAIN = 1, OPSET_VERSION = 2 };
enum { GRAPH_NODE = 1, GRAPH_NAME = 2, GRAPH_INITIALIZER = 5, GRAPH_INPUT = 11, GRAPH_OUTPUT = 12 };
enum { NODE_INPUT = 1, NODE_OUTPUT = 2, NODE_NAME = 3, NODE_OP_TYPE = 4, NODE_ATTRIBUTE = 5,
       NODE_DOMAIN = 7 };
enum { ATTR_NAME = 1, ATTR_F = 2, ATTR_I = 3, ATTR_S = 4, ATTR_INTS = 8, ATTR_TYPE = 20 };
enum { ATTR_TYPE_FLOAT = 1, ATTR_TYPE_INT = 2, ATTR_TYPE_STRING = 3, ATTR_TYPE_INTS = 7 };
enum { TENSOR_DIMS = 1, TENSOR_DATA_TYPE = 2, TENSOR_NAME = 8, TENSOR_RAW_DATA = 9,
       TENSOR_EXTERNAL_DATA = 13, TENSOR_DATA_LOCATION = 14 };
enum { ENTRY_KEY = 1, ENTRY_VALUE = 2 };
enum { VI_NAME = 1, VI_TYPE = 2 };
enum { TYPE_TENSOR = 1, TTENSOR_ELEM_TYPE = 1, TTENSOR_SHAPE = 2, SHAPE_DIM = 1, DIM_VALUE = 1,
       DIM_PARAM = 2 };
enum { LOCATION_EXTERNAL = 1 };

/* The printer's state for one graph. */
typedef struct printer {
    const g_graph *g;
    int opset;
    bool contrib;            /* an extern node in com.microsoft was printed */
    bool *dq_form;           /* per value: a quantized weight read by DequantizeLinear */
    pb_buf graph;
    char sym_tensor[G_MAX_SYMS][200]; /* name of an int64 [1] tensor holding each symbol */
} printer;

static void attr_int(pb_buf *node, const char *name, int64_t v)
{
    pb_buf a = {0};
    pb_string(&a, ATTR_NAME, name);
    pb_int(&a, ATTR_I, v);
    pb_int(&a, ATTR_TYPE, ATTR_TYPE_INT);
    pb_msg(node, NODE_ATTRIBUTE, &a);
    pb_free(&a);
}

static void attr_ints(pb_buf *node, const char *name, const int64_t *v, int n)
{
    pb_buf a = {0};
    pb_string(&a, ATTR_NAME, name);
    for (int i = 0; i < n; i++)
        pb_int(&a, ATTR_INTS, v[i]);
    pb_int(&a, ATTR_TYPE, ATTR_TYPE_INTS);
    pb_msg(node, NODE_ATTRIBUTE, &a);
    pb_free(&a);
}

static void attr_str(pb_buf *node, const char *name, const char *v)
{
    pb_buf a = {0};
    pb_string(&a, ATTR_NAME, name);
    pb_string(&a, ATTR_S, v);
    pb_int(&a, ATTR_TYPE, ATTR_TYPE_STRING);
    pb_msg(node, NODE_ATTRIBUTE, &a);
    pb_free(&a);
}

static void attr_float(pb_buf *node, const char *name, float v)
{
    pb_buf a = {0};
    pb_string(&a, ATTR_NAME, name);
    pb_float(&a, ATTR_F, v);
    pb_int(&a, ATTR_TYPE, ATTR_TYPE_FLOAT);
    pb_msg(node, NODE_ATTRIBUTE, &a);
    pb_free(&a);
}

/* The initializer name of part `part` of quantized weight `x`. */
static void part_name(const g_value *x, int part, char *buf, size_t size)
{
    static const char *const suffix[] = {"", "_scales", "_zero_points"};
    snprintf(buf, size, "%s%s", x->name, suffix[part]);
}

/* An int64 initializer `name` of shape [n] (n < 0: a scalar). */
static void init_i64(printer *p, const char *name, const int64_t *v, int n)
{
    pb_buf t = {0};
    if (n >= 0)
        pb_int(&t, TENSOR_DIMS, n);
    pb_int(&t, TENSOR_DATA_TYPE, onnx_dtype(FERRY_I64));
    pb_string(&t, TENSOR_NAME, name);
    uint8_t raw[8 * 2 * G_MAX_RANK]; /* up to a pad's two per axis */
    int count = n < 0 ? 1 : n;
    for (int i = 0; i < count; i++)
        memcpy(raw + 8 * i, &v[i], 8); /* little-endian hosts only, as the data files */
    pb_bytes(&t, TENSOR_RAW_DATA, raw, (size_t)count * 8);
    pb_msg(&p->graph, GRAPH_INITIALIZER, &t);
    pb_free(&t);
}

/* A float initializer `name` of dtype `dt` and rank 0 holding v (rounded to dt). */
static ferry_status init_float(printer *p, const char *name, ferry_dtype dt, double v,
                               fy_err *err)
{
    uint8_t raw[8];
    if (dt_size(dt) > sizeof raw || dt_convert(raw, dt, &v, FERRY_F64, 1) != 0)
        return fy_fail(err, FERRY_ERR_INTERNAL, "ONNX: no %s scalar for '%s'", dt_st_name(dt),
                       name);
    pb_buf t = {0};
    pb_int(&t, TENSOR_DATA_TYPE, onnx_dtype(dt));
    pb_string(&t, TENSOR_NAME, name);
    pb_bytes(&t, TENSOR_RAW_DATA, raw, dt_size(dt));
    pb_msg(&p->graph, GRAPH_INITIALIZER, &t);
    pb_free(&t);
    return FERRY_OK;
}

/* A node with up to 4 inputs and one output; attributes added by the caller through `nb`. */
static void begin_node(pb_buf *nb, const char *op, const char *name, const char *const *in, int n_in,
                       const char *out)
{
    for (int i = 0; i < n_in; i++)
        pb_string(nb, NODE_INPUT, in[i]);
    pb_string(nb, NODE_OUTPUT, out);
    pb_string(nb, NODE_NAME, name);
    pb_string(nb, NODE_OP_TYPE, op);
}

static void end_node(printer *p, pb_buf *nb)
{
    pb_msg(&p->graph, GRAPH_NODE, nb);
    pb_free(nb);
}

/* Emits `out` = Shape(x)[axis : axis + 1], an int64 [1] extent read at run time. */
static void extent_node(printer *p, const g_value *x, int axis, const char *out)
{
    pb_buf nb = {0};
    const char *in[1] = {x->name};
    begin_node(&nb, "Shape", out, in, 1, out);
    attr_int(&nb, "start", axis);
    attr_int(&nb, "end", axis + 1);
    end_node(p, &nb);
}

/* Makes p->sym_tensor[s] name an int64 [1] tensor holding symbol s at run time, read off the
 * first graph input that has the symbol as one of its dims. */
static ferry_status symbol_tensor(printer *p, int s, fy_err *err)
{
    if (p->sym_tensor[s][0])
        return FERRY_OK;
    const g_graph *g = p->g;
    int v, axis;
    if (!g_input_dim(g, g_dim_sym(s), &v, &axis))
        return fy_fail(err, FERRY_ERR_INTERNAL, "ONNX: no graph input carries the symbol '%s'",
                       g->syms.s[s].name);
    snprintf(p->sym_tensor[s], sizeof p->sym_tensor[s], "/symbols/%s", g->syms.s[s].name);
    extent_node(p, &g->values[v], axis, p->sym_tensor[s]);
    return FERRY_OK;
}

/* Emits `out` = the extent of the first graph input axis whose dim is `d`, if any. */
static bool input_dim(printer *p, const g_dim *d, const char *out)
{
    int v, axis;
    if (d->n == 1 && d->c == 0 && d->t[0].coef == 1)
        return false; /* a lone symbol: symbol_tensor reads it the same way, once */
    if (!g_input_dim(p->g, *d, &v, &axis))
        return false;
    extent_node(p, &p->g->values[v], axis, out);
    return true;
}

/* Emits nodes computing the int64 [rank] shape `target` at run time into tensor `out`. */
static ferry_status runtime_shape(printer *p, const char *node, const g_shape *target,
                                  const char *out, fy_err *err)
{
    char parts[G_MAX_RANK][640];
    const char *part_names[G_MAX_RANK];
    for (int i = 0; i < target->rank; i++) {
        const g_dim *d = &target->d[i];
        int64_t c;
        snprintf(parts[i], sizeof parts[i], "%s/dim%d", node, i);
        part_names[i] = parts[i];
        if (d->unknown) {
            int64_t minus1 = -1;
            init_i64(p, parts[i], &minus1, 1);
            continue;
        }
        if (g_dim_is_const(*d, &c)) {
            init_i64(p, parts[i], &c, 1);
            continue;
        }
        /* A graph input with this very dim holds it: the key length is attention_mask's, even
         * when a runtime binds a longer buffer as the past (onnxruntime-genai's shared
         * past/present buffer), where past_sequence + sequence would overshoot. */
        if (input_dim(p, d, parts[i]))
            continue;
        /* c + sum k_j * sym_j, term by term */
        char acc[700] = "";
        for (int t = 0; t < d->n; t++) {
            if (symbol_tensor(p, d->t[t].sym, err) != FERRY_OK)
                return err->status;
            char term[680], kname[700];
            snprintf(term, sizeof term, "%s/term%d", parts[i], t);
            snprintf(kname, sizeof kname, "%s_k", term);
            init_i64(p, kname, &d->t[t].coef, 1);
            pb_buf nb = {0};
            const char *mul_in[2] = {p->sym_tensor[d->t[t].sym], kname};
            begin_node(&nb, "Mul", term, mul_in, 2, term);
            end_node(p, &nb);
            if (acc[0]) {
                char sum[700];
                snprintf(sum, sizeof sum, "%s_sum", term);
                const char *add_in[2] = {acc, term};
                begin_node(&nb, "Add", sum, add_in, 2, sum);
                end_node(p, &nb);
                snprintf(acc, sizeof acc, "%s", sum);
            } else {
                snprintf(acc, sizeof acc, "%s", term);
            }
        }
        char cname[700];
        snprintf(cname, sizeof cname, "%s/c", parts[i]);
        init_i64(p, cname, &d->c, 1);
        pb_buf nb = {0};
        const char *add_in[2] = {acc, cname};
        begin_node(&nb, "Add", parts[i], add_in, 2, parts[i]);
        end_node(p, &nb);
    }
    pb_buf nb = {0};
    begin_node(&nb, "Concat", out, part_names, target->rank, out);
    attr_int(&nb, "axis", 0);
    end_node(p, &nb);
    return FERRY_OK;
}

/* The reshape's shape input: a constant using 0/-1 where they say the same thing, else a
 * tensor computed from the graph inputs. */
static ferry_status reshape_shape(printer *p, const g_node *n, char *name, size_t size,
                                  fy_err *err)
{
    const g_shape *in = &p->g->values[n->in[0]].shape, *t = &n->a.shape;
    int64_t spec[G_MAX_RANK];
    int free_dims = g_reshape_literal(in, t, spec);
    snprintf(name, size, "%s/shape", n->name);
    if (free_dims <= 1) {
        init_i64(p, name, spec, t->rank);
        return FERRY_OK;
    }
    return runtime_shape(p, n->name, t, name, err);
}

/* An extern node: its domain and type, quantized inputs as the parts it names (codes
 * flattened to [out, in*bits/8] where it asks), outputs at their positions. */
static ferry_status emit_extern(printer *p, const g_node *n, fy_err *err)
{
    const g_graph *g = p->g;
    const g_extern *e = n->a.ext;
    char names[G_MAX_IN][760];
    pb_buf nb = {0};
    int n_in = n->n_in;
    while (n_in > 0 && n->in[n_in - 1] == G_NONE)
        n_in--;
    for (int k = 0; k < n_in; k++) {
        const g_value *x = n->in[k] == G_NONE ? NULL : &g->values[n->in[k]];
        if (!x)
            names[k][0] = '\0';
        else if (e->part[k] >= 0)
            part_name(x, e->part[k], names[k], sizeof names[k]);
        else
            snprintf(names[k], sizeof names[k], "%s", x->name);
        if (x && e->part[k] == W_PART_CODES && (e->flat & (1u << k))) {
            int64_t rows, cols;
            w_matrix(&x->weight, &rows, &cols);
            int64_t flat[2] = {rows, cols * x->weight.quant.bits / 8};
            char shape[720], out[720];
            snprintf(shape, sizeof shape, "%s/in%d_shape", n->name, k);
            snprintf(out, sizeof out, "%s/in%d_flat", n->name, k);
            init_i64(p, shape, flat, 2);
            const char *rin[2] = {names[k], shape};
            begin_node(&nb, "Reshape", out, rin, 2, out);
            end_node(p, &nb);
            snprintf(names[k], sizeof names[k], "%s", out);
        }
    }
    for (int k = 0; k < n_in; k++)
        pb_string(&nb, NODE_INPUT, names[k]);
    for (int slot = 0, k = 0; k < n->n_out; slot++) {
        if (e->out_slot[k] == slot)
            pb_string(&nb, NODE_OUTPUT, g->values[n->out[k++]].name);
        else
            pb_string(&nb, NODE_OUTPUT, "");
    }
    pb_string(&nb, NODE_NAME, n->name);
    pb_string(&nb, NODE_OP_TYPE, e->op_type);
    if (e->domain[0])
        pb_string(&nb, NODE_DOMAIN, e->domain);
    p->contrib |= strcmp(e->domain, "com.microsoft") == 0;
    for (int i = 0; i < e->n_attr; i++) {
        if (e->attr[i].kind == 's')
            attr_str(&nb, e->attr[i].name, e->attr[i].s);
        else if (e->attr[i].kind != 'f') /* a bool is ONNX's int */
            attr_int(&nb, e->attr[i].name, e->attr[i].i);
        else
            attr_float(&nb, e->attr[i].name, (float)e->attr[i].f);
    }
    end_node(p, &nb);
    (void)err;
    return FERRY_OK;
}

static ferry_status emit_node(printer *p, const g_node *n, fy_err *err)
{
    const g_graph *g = p->g;
    if (n->op == G_EXTERN)
        return emit_extern(p, n, err);
    const char *op = onnx_op(n->op);
    if (!op)
        return fy_fail(err, FERRY_ERR_INTERNAL, "node '%s': %s reached the ONNX printer "
                       "unlowered", n->name, g_op_name(n->op));
    char aux[3][600];
    const char *in[G_MAX_IN + 3];
    int n_in = 0;
    for (int i = 0; i < n->n_in; i++)
        in[n_in++] = n->in[i] == G_NONE ? "" : g->values[n->in[i]].name;
    pb_buf nb = {0};
    bool axes_as_attr = false;
    switch (n->op) {
    case G_MATMUL:
        if (n->a.transpose_b)
            op = "Gemm";
        break;
    case G_DEQUANTIZE: {
        const g_value *w = &g->values[n->in[0]];
        if (w_n_parts(&w->weight) != 3)
            return fy_fail(err, FERRY_ERR_INTERNAL, "node '%s': DequantizeLinear of '%s' needs "
                           "its zero points stored", n->name, w->name);
        n_in = 0;
        for (int part = 0; part < 3; part++) {
            part_name(w, part, aux[part], sizeof aux[part]);
            in[n_in++] = aux[part];
        }
        break;
    }
    case G_RESHAPE:
        if (reshape_shape(p, n, aux[0], sizeof aux[0], err) != FERRY_OK)
            return err->status;
        in[n_in++] = aux[0];
        break;
    case G_SLICE: {
        int64_t st = n->a.start, en = n->a.end, ax = n->a.axis;
        snprintf(aux[0], sizeof aux[0], "%s/starts", n->name);
        snprintf(aux[1], sizeof aux[1], "%s/ends", n->name);
        snprintf(aux[2], sizeof aux[2], "%s/axes", n->name);
        init_i64(p, aux[0], &st, 1);
        init_i64(p, aux[1], &en, 1); /* G_END is INT64_MAX, ONNX's "to the end" too */
        init_i64(p, aux[2], &ax, 1);
        in[n_in++] = aux[0];
        in[n_in++] = aux[1];
        in[n_in++] = aux[2];
        break;
    }
    case G_CUMSUM:
        snprintf(aux[0], sizeof aux[0], "%s/axis", n->name);
        init_i64(p, aux[0], &n->a.axis, -1); /* a scalar */
        in[n_in++] = aux[0];
        break;
    case G_UNSQUEEZE:
        snprintf(aux[0], sizeof aux[0], "%s/axes", n->name);
        init_i64(p, aux[0], n->a.ints, n->a.n_ints);
        in[n_in++] = aux[0];
        break;
    case G_TOPK: /* K is an int64 [1] input */
        snprintf(aux[0], sizeof aux[0], "%s/k", n->name);
        init_i64(p, aux[0], n->a.ints, 1);
        in[n_in++] = aux[0];
        break;
    case G_CLIP: {
        /* the bounds are inputs of x's dtype; an absent one is an empty name (trailing ones
         * left off) */
        const double bound[2] = {n->a.lo, n->a.hi}, absent[2] = {-INFINITY, INFINITY};
        ferry_dtype dt = g->values[n->in[0]].dtype;
        for (int k = 0; k < 2; k++) {
            in[n_in++] = "";
            if (bound[k] == absent[k])
                continue;
            snprintf(aux[k], sizeof aux[k], "%s/%s", n->name, k ? "max" : "min");
            if (init_float(p, aux[k], dt, bound[k], err) != FERRY_OK)
                return err->status;
            in[n_in - 1] = aux[k];
        }
        while (n_in > 1 && !in[n_in - 1][0])
            n_in--;
        break;
    }
    case G_PAD: { /* pads int64 [2 * rank]: every axis' begin, then every axis' end */
        int rank = g->values[n->in[0]].shape.rank;
        int64_t pads[2 * G_MAX_RANK];
        for (int i = 0; i < rank; i++) {
            pads[i] = n->a.pad_begin[i];
            pads[rank + i] = n->a.pad_end[i];
        }
        snprintf(aux[0], sizeof aux[0], "%s/pads", n->name);
        snprintf(aux[1], sizeof aux[1], "%s/value", n->name);
        init_i64(p, aux[0], pads, 2 * rank);
        if (init_float(p, aux[1], g->values[n->in[0]].dtype, n->a.pad_value, err) != FERRY_OK)
            return err->status;
        in[n_in++] = aux[0];
        in[n_in++] = aux[1];
        break;
    }
    case G_REDUCE_MEAN: case G_REDUCE_MAX: case G_REDUCE_SUM:
        /* axes became an input in opset 18 (ReduceSum's in 13, below ferry's opsets) */
        axes_as_attr = n->op != G_REDUCE_SUM && p->opset < 18;
        if (!axes_as_attr) {
            snprintf(aux[0], sizeof aux[0], "%s/axes", n->name);
            init_i64(p, aux[0], n->a.ints, n->a.n_ints);
            in[n_in++] = aux[0];
        }
        break;
    default:
        break;
    }
    begin_node(&nb, op, n->name, in, n_in, g->values[n->out[0]].name);
    for (int k = 1; k < n->n_out; k++) /* repeated outputs: their order is the op's */
        pb_string(&nb, NODE_OUTPUT, g->values[n->out[k]].name);
    switch (n->op) {
    case G_MATMUL:
        if (n->a.transpose_b)
            attr_int(&nb, "transB", 1);
        break;
    case G_GATHER: case G_CONCAT: case G_SOFTMAX: case G_SCATTER_ELEMENTS:
    case G_GATHER_ELEMENTS:
        attr_int(&nb, "axis", n->a.axis);
        break;
    case G_TOPK:
        attr_int(&nb, "axis", n->a.axis);
        attr_int(&nb, "largest", 1);
        attr_int(&nb, "sorted", 1);
        break;
    case G_SCATTER_ADD: /* reduction from opset 16, below ferry's opsets */
        attr_int(&nb, "axis", n->a.axis);
        attr_str(&nb, "reduction", "add");
        break;
    case G_TRANSPOSE:
        attr_ints(&nb, "perm", n->a.ints, n->a.n_ints);
        break;
    case G_CAST:
        attr_int(&nb, "to", onnx_dtype(n->a.to));
        break;
    case G_REDUCE_MEAN: case G_REDUCE_MAX: case G_REDUCE_SUM:
        attr_int(&nb, "keepdims", n->a.keepdims);
        if (axes_as_attr)
            attr_ints(&nb, "axes", n->a.ints, n->a.n_ints);
        break;
    case G_DEQUANTIZE: /* blocks along the rows: the last axis of a matrix or a stack */
        attr_int(&nb, "axis", g->values[n->in[0]].shape.rank - 1);
        attr_int(&nb, "block_size", g->values[n->in[0]].weight.quant.block);
        break;
    case G_PAD:
        attr_str(&nb, "mode", "constant");
        break;
    case G_CONV: {
        const g_conv_opts *o = n->a.conv;
        const g_shape *w = &g->values[n->in[1]].shape;
        int64_t kernel[G_CONV_MAX_SPATIAL], pads[2 * G_CONV_MAX_SPATIAL];
        for (int i = 0; i < o->spatial; i++) {
            g_dim_is_const(w->d[2 + i], &kernel[i]); /* inference holds them constant */
            pads[i] = o->pads_begin[i];
            pads[o->spatial + i] = o->pads_end[i];
        }
        attr_ints(&nb, "kernel_shape", kernel, o->spatial);
        attr_ints(&nb, "strides", o->strides, o->spatial);
        attr_ints(&nb, "pads", pads, 2 * o->spatial);
        attr_ints(&nb, "dilations", o->dilations, o->spatial);
        attr_int(&nb, "group", o->groups);
        break;
    }
    case G_SHAPE_OF:
        if (n->a.start != 0)
            attr_int(&nb, "start", n->a.start);
        if (n->a.end != G_END)
            attr_int(&nb, "end", n->a.end);
        break;
    default:
        break;
    }
    end_node(p, &nb);
    return FERRY_OK;
}

static void emit_value_info(const g_graph *g, int v, pb_buf *graph, uint32_t field)
{
    const g_value *x = &g->values[v];
    pb_buf vi = {0}, type = {0}, tt = {0}, shape = {0}, dim = {0};
    for (int i = 0; i < x->shape.rank; i++) {
        int64_t c;
        pb_reset(&dim);
        if (g_dim_is_const(x->shape.d[i], &c)) {
            pb_int(&dim, DIM_VALUE, c);
        } else if (!x->shape.d[i].unknown) {
            char buf[256];
            g_dim_print(x->shape.d[i], &g->syms, buf, sizeof buf);
            pb_string(&dim, DIM_PARAM, buf);
        }
        pb_msg(&shape, SHAPE_DIM, &dim);
    }
    pb_int(&tt, TTENSOR_ELEM_TYPE, onnx_dtype(x->dtype));
    pb_msg(&tt, TTENSOR_SHAPE, &shape);
    pb_msg(&type, TYPE_TENSOR, &tt);
    pb_string(&vi, VI_NAME, x->name);
    pb_msg(&vi, VI_TYPE, &type);
    pb_msg(graph, field, &vi);
    pb_free(&vi);
    pb_free(&type);
    pb_free(&tt);
    pb_free(&shape);
    pb_free(&dim);
}

static void entry(pb_buf *t, const char *key, const char *value)
{
    pb_buf e = {0};
    pb_string(&e, ENTRY_KEY, key);
    pb_string(&e, ENTRY_VALUE, value);
    pb_msg(t, TENSOR_EXTERNAL_DATA, &e);
    pb_free(&e);
}

/* Dims and element type of part `part` of quantized weight `x` as its reader takes it. A
 * stack of E matrices ([E, out, in], a mixture's experts) leads each part's dims with E, its
 * codes [E, out, in*bits/8] as QMoE reads them (or [E, out, in] for DequantizeLinear). */
static int quant_part_dims(const g_value *x, int part, bool dq_form, int64_t *dims,
                           ferry_dtype *dtype, uint64_t *nbytes)
{
    const w_quant *q = &x->weight.quant;
    int64_t rows, cols, experts = 0;
    w_matrix(&x->weight, &rows, &cols);
    bool stack = x->shape.rank == 3 && x->weight.stack;
    if (stack)
        g_dim_is_const(x->shape.d[0], &experts); /* a weight's dims are constants */
    int lead = stack ? 1 : 0;
    if (stack)
        dims[0] = experts;
    dims[lead] = stack ? rows / experts : rows;
    int64_t blocks = (cols + q->block - 1) / q->block; /* the last may be short */
    ferry_dtype code = dq_form && q->bits == 4 ? FERRY_U4 : FERRY_U8;
    if (part == W_PART_SCALES) {
        dims[lead + 1] = blocks;
        *dtype = x->weight.dtype;
        *nbytes = (uint64_t)rows * (uint64_t)blocks * dt_size(*dtype);
        return lead + 2;
    }
    *dtype = code;
    if (part == W_PART_ZEROS) {
        dims[lead + 1] = dq_form ? blocks : (blocks * q->bits + 7) / 8;
        *nbytes = q->packing == W_PACK_CONTIGUOUS
                      ? ((uint64_t)rows * (uint64_t)blocks * (uint64_t)q->bits + 7) / 8
                      : (uint64_t)rows * (uint64_t)((blocks * q->bits + 7) / 8);
        return lead + 2;
    }
    /* MatMulNBits' B holds whole blocks (a short last one padded: W_PACK_PAD_BLOCKS); unpadded
     * rows with a short block (GatherBlockQuantized's) are [out, in*bits/8] */
    bool whole = q->packing == W_PACK_PAD_BLOCKS || cols % q->block == 0;
    *nbytes = (uint64_t)rows * (uint64_t)(dq_form || !whole ? cols : blocks * q->block) *
              (uint64_t)q->bits / 8;
    if (dq_form) {
        dims[lead + 1] = cols;
        return lead + 2;
    }
    if (!whole || stack) {
        dims[lead + 1] = cols * q->bits / 8;
        return lead + 2;
    }
    dims[1] = blocks;
    dims[2] = q->block * q->bits / 8;
    return 3;
}

static void external_location(pb_buf *t, const pl_file *data, uint64_t offset, uint64_t length);

/* The parts of a quantized weight, each its own initializer in the data file. */
static ferry_status emit_quantized(printer *p, const g_value *x, int v, const pl_file *data,
                                   fy_err *err)
{
    for (int part = 0; part < w_n_parts(&x->weight); part++) {
        int64_t dims[3];
        ferry_dtype dtype;
        uint64_t nbytes, offset, length;
        int rank = quant_part_dims(x, part, p->dq_form[v], dims, &dtype, &nbytes);
        char name[700];
        part_name(x, part, name, sizeof name);
        if (!pl_find(data, &x->weight, (w_part)part, &offset, &length) || length != nbytes)
            return fy_fail(err, FERRY_ERR_INTERNAL, "weight '%s' was not placed in %s as %llu "
                           "bytes", name, pl_name(data), (unsigned long long)nbytes);
        pb_buf t = {0};
        for (int i = 0; i < rank; i++)
            pb_int(&t, TENSOR_DIMS, dims[i]);
        pb_int(&t, TENSOR_DATA_TYPE, onnx_dtype(dtype));
        pb_string(&t, TENSOR_NAME, name);
        external_location(&t, data, offset, length);
        pb_msg(&p->graph, GRAPH_INITIALIZER, &t);
        pb_free(&t);
    }
    return FERRY_OK;
}

static void external_location(pb_buf *t, const pl_file *data, uint64_t offset, uint64_t length)
{
    char num[32];
    entry(t, "location", pl_name(data));
    snprintf(num, sizeof num, "%llu", (unsigned long long)offset);
    entry(t, "offset", num);
    snprintf(num, sizeof num, "%llu", (unsigned long long)length);
    entry(t, "length", num);
    pb_int(t, TENSOR_DATA_LOCATION, LOCATION_EXTERNAL);
}

static ferry_status emit_initializer(printer *p, const g_value *x, int v, const pl_file *data,
                                     fy_err *err)
{
    if (x->kind == GV_WEIGHT && x->weight.quant.bits)
        return emit_quantized(p, x, v, data, err);
    pb_buf t = {0};
    for (int i = 0; i < x->shape.rank; i++) {
        int64_t c = 0;
        g_dim_is_const(x->shape.d[i], &c);
        pb_int(&t, TENSOR_DIMS, c);
    }
    pb_int(&t, TENSOR_DATA_TYPE, onnx_dtype(x->dtype));
    pb_string(&t, TENSOR_NAME, x->name);
    uint64_t at;
    if (x->kind == GV_CONST && x->nbytes >= ONNX_EXTERNAL_CONST_BYTES &&
        pl_find_const(data, x, &at)) {
        external_location(&t, data, at, x->nbytes);
    } else if (x->kind == GV_CONST) {
        pb_bytes(&t, TENSOR_RAW_DATA, x->data, x->nbytes);
    } else {
        uint64_t offset, length;
        if (!pl_find(data, &x->weight, W_PART_DATA, &offset, &length)) {
            pb_free(&t);
            return fy_fail(err, FERRY_ERR_INTERNAL, "weight '%s' was not placed in %s", x->name,
                           pl_name(data));
        }
        external_location(&t, data, offset, length);
    }
    pb_msg(&p->graph, GRAPH_INITIALIZER, &t);
    pb_free(&t);
    return FERRY_OK;
}

static bool no_space(int e)
{
    return e == ENOSPC || e == EFBIG || e == EDQUOT;
}

ferry_status onnx_write_model(const g_graph *g, const pl_file *data, int opset,
                              const char *graph_name, const char *dir, const char *file,
                              uint32_t *crc, fy_err *err)
{
    char path[PATH_MAX];
    if (fs_join(path, sizeof path, dir, file, err) != FERRY_OK)
        return err->status;
    printer *p = calloc(1, sizeof *p);
    if (!p)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    p->g = g;
    p->opset = opset;
    p->dq_form = calloc(g->n_values ? g->n_values : 1, sizeof *p->dq_form);
    if (!p->dq_form) {
        free(p);
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].op == G_DEQUANTIZE)
            p->dq_form[g->nodes[i].in[0]] = true;
    pb_buf model = {0}, os = {0};
    int fd = -1;
    ferry_status st = FERRY_OK;
    for (size_t i = 0; i < g->n_nodes && st == FERRY_OK; i++)
        if (!g->nodes[i].dead)
            st = emit_node(p, &g->nodes[i], err);
    if (st != FERRY_OK)
        goto done;
    pb_string(&p->graph, GRAPH_NAME, graph_name ? graph_name : "ferry");
    for (size_t i = 0; i < g->n_values && st == FERRY_OK; i++) {
        const g_value *x = &g->values[i];
        if ((x->kind == GV_WEIGHT || x->kind == GV_CONST) && x->n_uses > 0)
            st = emit_initializer(p, x, (int)i, data, err);
    }
    if (st != FERRY_OK)
        goto done;
    for (size_t i = 0; i < g->n_inputs; i++)
        emit_value_info(g, g->inputs[i], &p->graph, GRAPH_INPUT);
    for (size_t i = 0; i < g->n_outputs; i++)
        emit_value_info(g, g->outputs[i], &p->graph, GRAPH_OUTPUT);
    pb_int(&model, MODEL_IR_VERSION, onnx_ir_version(opset));
    pb_string(&model, MODEL_PRODUCER_NAME, "ferry");
    pb_string(&model, MODEL_PRODUCER_VERSION, FERRY_VERSION);
    pb_msg(&model, MODEL_GRAPH, &p->graph);
    pb_string(&os, OPSET_DOMAIN, "");
    pb_int(&os, OPSET_VERSION, opset);
    pb_msg(&model, MODEL_OPSET_IMPORT, &os);
    if (p->contrib) {
        pb_reset(&os);
        pb_string(&os, OPSET_DOMAIN, "com.microsoft");
        pb_int(&os, OPSET_VERSION, 1);
        pb_msg(&model, MODEL_OPSET_IMPORT, &os);
    }
    if (model.oom || p->graph.oom || os.oom) {
        st = fy_fail(err, FERRY_ERR_NOMEM, "out of memory encoding %s", path);
        goto done;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = fy_fail(err, no_space(errno) ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                     "%s: cannot create: %s", path, strerror(errno));
        goto done;
    }
    if ((st = fs_pwrite_all(fd, path, model.data, model.len, 0, err)) != FERRY_OK)
        goto done;
    *crc = fy_crc32(model.data, model.len);
    if (fsync(fd) != 0 && errno != EINVAL)
        st = fy_fail(err, no_space(errno) ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                     "%s: sync failed: %s", path, strerror(errno));
    if (close(fd) != 0 && st == FERRY_OK)
        st = fy_fail(err, no_space(errno) ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                     "%s: close failed: %s", path, strerror(errno));
    fd = -1;
done:
    if (fd >= 0)
        close(fd);
    pb_free(&p->graph);
    pb_free(&model);
    pb_free(&os);
    free(p->dq_form);
    free(p);
    return st;
}
