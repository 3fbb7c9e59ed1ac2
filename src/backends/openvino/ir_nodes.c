/* ir_nodes.c — each node of a lowered graph as OpenVINO IR layers: one layer for most ops,
 * with the attributes OpenVINO takes as inputs (reshape targets, slice bounds, axes,
 * permutations, gather axes) made Const layers; a block-quantized weight's decompression as
 * OpenVINO's compressed-weight pattern; and a backend op (g_extern, e.g. ScaledDotProductAttention)
 * as its own layer. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backends/openvino/ir_printer.h"
#include "util/dtype.h"

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
    case G_ABS: return "Abs";
    case G_LOG: return "Log";
    case G_FLOOR: return "Floor";
    case G_NOT: return "LogicalNot";
    default: return NULL;
    }
}

/* A block-quantized weight as OpenVINO's compressed-weight pattern (the CPU plugin runs the
 * MatMul or Gather reading it on the compressed bytes): the codes as a u4/u8 Const
 * [out, in/block, block] ([E, out, in/block, block] for a stack of experts) → Convert →
 * Subtract the zero point (the per-block zeros part
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
    /* [out, in/block, block], led by the experts' axis for a stack [E, out, in] */
    g_shape codes = w->shape;
    int at = codes.rank - 1;
    codes.d[at] = g_dim_const(cols / q->block);
    codes.d[at + 1] = g_dim_const(q->block);
    codes.rank++;
    g_shape per_block = codes;
    per_block.d[at + 1] = g_dim_const(1);
    char name[600];
    uint64_t offset, length;
    ferry_status st;
    if ((st = ov_weight_bytes(p, &w->weight, W_PART_CODES, w->name, &offset, &length)) != FERRY_OK)
        return st;
    ov_in c = {ov_const_layer(p, w->name, code, &codes, offset, length, NULL), 0, code, codes};
    snprintf(name, sizeof name, "%s/convert", w->name);
    ov_out co = {dt, codes, NULL};
    char to[48];
    snprintf(to, sizeof to, "destination_type=\"%s\"", ov_type(dt)); /* the scales' type */
    ov_in x[2] = {ov_node_port(ov_layer(p, "Convert", "opset1", name, to, &c, 1, &co, 1), 1, dt,
                               &codes)};
    ov_in zero;
    if (q->symmetric) {
        uint8_t mid = q->bits == 4 ? 8 : 128;
        if ((st = ov_const_in(p, g_const(g, code, 0, NULL, &mid), &zero)) != FERRY_OK)
            return st;
    } else {
        if ((st = ov_weight_bytes(p, &w->weight, W_PART_ZEROS, w->name, &offset, &length)) !=
            FERRY_OK)
            return st;
        ferry_dtype zt = q->packing == W_PACK_ZERO_BYTES ? FERRY_U8 : code;
        snprintf(name, sizeof name, "%s/zero_point", w->name);
        zero = (ov_in){ov_const_layer(p, name, zt, &per_block, offset, length, NULL), 0, zt,
                       per_block};
    }
    snprintf(name, sizeof name, "%s/zero_point/convert", w->name);
    ov_out zo = {dt, zero.shape, NULL};
    x[1] = ov_node_port(ov_layer(p, "Convert", "opset1", name, to, &zero, 1, &zo, 1), 1, dt,
                        &zero.shape);
    snprintf(name, sizeof name, "%s/zero_point/subtract", w->name);
    x[0] = ov_node_port(ov_layer(p, "Subtract", "opset1", name, "auto_broadcast=\"numpy\"", x, 2,
                                 &co, 1), 2, dt, &codes);
    if ((st = ov_weight_bytes(p, &w->weight, W_PART_SCALES, w->name, &offset, &length)) != FERRY_OK)
        return st;
    snprintf(name, sizeof name, "%s/scale", w->name);
    x[1] = (ov_in){ov_const_layer(p, name, dt, &per_block, offset, length, NULL), 0, dt, per_block};
    snprintf(name, sizeof name, "%s/multiply", w->name);
    x[0] = ov_node_port(ov_layer(p, "Multiply", "opset1", name, "auto_broadcast=\"numpy\"", x, 2,
                                 &co, 1), 2, dt, &codes);
    int64_t target[G_MAX_RANK];
    for (int i = 0; i < w->shape.rank; i++)
        g_dim_is_const(w->shape.d[i], &target[i]); /* a weight's dims are constants */
    if ((st = ov_i64_in(p, w->shape.rank, target, &x[1])) != FERRY_OK)
        return st;
    const g_value *y = &g->values[n->out[0]];
    ov_out o = {dt, y->shape, y->name};
    int id = ov_layer(p, "Reshape", "opset1", n->name, "special_zero=\"false\"", x, 2, &o, 1);
    if (!ov_grow_at(p))
        return fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory");
    p->at[n->out[0]] = ov_node_port(id, 2, dt, &y->shape);
    return FERRY_OK;
}

/* A backend op the target made (g_extern): its domain is the opset, its attributes the data. */
static ferry_status emit_extern(printer *p, const g_node *n)
{
    g_graph *g = p->g;
    const g_extern *e = n->a.ext;
    ov_in ins[G_MAX_IN];
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] == G_NONE || ov_value_in(p, n->in[i], &ins[i]) != FERRY_OK)
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
        else if (a->kind == 's')
            sb_puts(&data, a->s);
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
    int id = ov_layer(p, e->op_type, e->domain, n->name, e->n_attr ? data.data : NULL, ins,
                      n->n_in, o, n->n_out);
    bool oom = data.oom;
    sb_free(&data);
    if (oom || !ov_grow_at(p))
        return fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory");
    for (int k = 0; k < n->n_out; k++)
        p->at[n->out[k]] = ov_node_port(id, n->n_in + k, o[k].dtype, &o[k].shape);
    return FERRY_OK;
}

/* `attr`="<OpenVINO element type of dt>" into `data`; a dtype OpenVINO has no name for is a bug
 * (the target casts only to types its printer knows). */
static ferry_status type_attr(printer *p, strbuf *data, const g_node *n, const char *attr,
                              ferry_dtype dt)
{
    if (!ov_type(dt))
        return fy_fail(p->err, FERRY_ERR_INTERNAL, "node '%s': no OpenVINO type for %s",
                       n->name, dt_st_name(dt));
    sb_printf(data, "%s=\"%s\"", attr, ov_type(dt));
    return FERRY_OK;
}

/* TopK-11: the values and their i64 indices, largest first, k a constant input. */
static ferry_status emit_topk(printer *p, const g_node *n)
{
    g_graph *g = p->g;
    ov_in ins[2];
    if (ov_value_in(p, n->in[0], &ins[0]) != FERRY_OK ||
        ov_const_in(p, g_scalar_i64(g, n->a.ints[0]), &ins[1]) != FERRY_OK)
        return p->err->status;
    char data[160];
    snprintf(data, sizeof data, "axis=\"%lld\" mode=\"max\" sort=\"value\" "
             "index_element_type=\"i64\" stable=\"true\"", (long long)n->a.axis);
    ov_out o[2];
    for (int k = 0; k < 2; k++)
        o[k] = (ov_out){g->values[n->out[k]].dtype, g->values[n->out[k]].shape,
                        g->values[n->out[k]].name};
    int id = ov_layer(p, "TopK", "opset11", n->name, data, ins, 2, o, 2);
    if (!ov_grow_at(p))
        return fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory");
    for (int k = 0; k < 2; k++)
        p->at[n->out[k]] = ov_node_port(id, 2 + k, o[k].dtype, &o[k].shape);
    return FERRY_OK;
}

/* ` key="v0,v1,..."` into `data` */
static void ints_attr(strbuf *data, const char *key, const int64_t *v, int n)
{
    sb_printf(data, " %s=\"", key);
    for (int i = 0; i < n; i++)
        sb_printf(data, "%s%lld", i ? "," : "", (long long)v[i]);
    sb_puts(data, "\"");
}

/* Value `v` reshaped to the constant `dims` by layer `name`. */
static ferry_status reshaped(printer *p, int v, const char *name, int rank, const int64_t *dims,
                             ov_in *out)
{
    ov_in ins[2];
    if (ov_value_in(p, v, &ins[0]) != FERRY_OK || ov_i64_in(p, rank, dims, &ins[1]) != FERRY_OK)
        return p->err->status;
    g_shape s = {.rank = rank};
    for (int i = 0; i < rank; i++)
        s.d[i] = g_dim_const(dims[i]);
    ov_out o = {ins[0].dtype, s, NULL};
    int id = ov_layer(p, "Reshape", "opset1", name, "special_zero=\"false\"", ins, 2, &o, 1);
    *out = ov_node_port(id, 2, o.dtype, &s);
    return FERRY_OK;
}

/* Convolution-1, or GroupConvolution-1 over the weight reshaped to [groups, c_out/groups,
 * c_in/groups, kernel...]. Neither takes a bias: it is added after, reshaped to [1, c_out, 1...]
 * so that it broadcasts over the spatial axes. */
static ferry_status emit_conv(printer *p, const g_node *n)
{
    g_graph *g = p->g;
    const g_conv_opts *o = n->a.conv;
    const g_value *y = &g->values[n->out[0]];
    const g_shape *ws = &g->values[n->in[1]].shape;
    bool bias = n->n_in > 2 && n->in[2] != G_NONE;
    int64_t wd[G_MAX_RANK + 1];
    for (int i = 0; i < ws->rank; i++)
        g_dim_is_const(ws->d[i], &wd[i]); /* inference holds them constant */
    char name[600];
    ov_in ins[2];
    if (ov_value_in(p, n->in[0], &ins[0]) != FERRY_OK)
        return p->err->status;
    if (o->groups > 1) {
        int64_t grouped[G_MAX_RANK + 1] = {o->groups, wd[0] / o->groups};
        for (int i = 1; i < ws->rank; i++)
            grouped[i + 1] = wd[i];
        snprintf(name, sizeof name, "%s/grouped_weight", n->name);
        if (reshaped(p, n->in[1], name, ws->rank + 1, grouped, &ins[1]) != FERRY_OK)
            return p->err->status;
    } else if (ov_value_in(p, n->in[1], &ins[1]) != FERRY_OK) {
        return p->err->status;
    }
    strbuf data = {0};
    sb_puts(&data, "auto_pad=\"explicit\"");
    ints_attr(&data, "strides", o->strides, o->spatial);
    ints_attr(&data, "dilations", o->dilations, o->spatial);
    ints_attr(&data, "pads_begin", o->pads_begin, o->spatial);
    ints_attr(&data, "pads_end", o->pads_end, o->spatial);
    snprintf(name, sizeof name, "%s%s", n->name, bias ? "/conv" : "");
    ov_out co = {y->dtype, y->shape, bias ? NULL : y->name};
    int id = ov_layer(p, o->groups > 1 ? "GroupConvolution" : "Convolution", "opset1", name,
                      data.data, ins, 2, &co, 1);
    bool oom = data.oom;
    sb_free(&data);
    if (oom)
        return fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory");
    ov_in at = ov_node_port(id, 2, y->dtype, &y->shape);
    if (bias) {
        int64_t across[G_MAX_RANK] = {1, wd[0]};
        for (int i = 2; i < y->shape.rank; i++)
            across[i] = 1;
        ov_in sum[2] = {at};
        snprintf(name, sizeof name, "%s/bias", n->name);
        if (reshaped(p, n->in[2], name, y->shape.rank, across, &sum[1]) != FERRY_OK)
            return p->err->status;
        ov_out so = {y->dtype, y->shape, y->name};
        id = ov_layer(p, "Add", "opset1", n->name, "auto_broadcast=\"numpy\"", sum, 2, &so, 1);
        at = ov_node_port(id, 2, y->dtype, &y->shape);
    }
    if (!ov_grow_at(p))
        return fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory");
    p->at[n->out[0]] = at;
    return FERRY_OK;
}

ferry_status ov_emit_node(printer *p, size_t index)
{
    g_graph *g = p->g;
    const g_node n = g->nodes[index];
    if (n.op == G_DEQUANTIZE)
        return emit_dequantize(p, &n);
    if (n.op == G_EXTERN)
        return emit_extern(p, &n);
    if (n.op == G_TOPK)
        return emit_topk(p, &n);
    if (n.op == G_CONV)
        return emit_conv(p, &n);
    ov_in ins[G_MAX_IN + 4];
    int n_in = 0;
    /* ops whose attributes OpenVINO takes as inputs get them first (constants of the graph) */
    if (n.op == G_RECIPROCAL) {
        if (ov_const_in(p, g_scalar_f(g, g->values[n.in[0]].dtype, 1.0), &ins[n_in++]) != FERRY_OK)
            return p->err->status;
    }
    for (int i = 0; i < n.n_in; i++) {
        if (n.in[i] == G_NONE)
            return fy_fail(p->err, FERRY_ERR_INTERNAL, "node '%s': an absent input reached the "
                           "OpenVINO printer", n.name);
        if (ov_value_in(p, n.in[i], &ins[n_in++]) != FERRY_OK)
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
            st = ov_const_in(p, g_scalar_i64(g, n.a.axis), &ins[n_in++]);
            break;
        case G_RESHAPE:
            type = "Reshape";
            sb_puts(&data, "special_zero=\"true\"");
            st = ov_reshape_target(p, &n, &ins[n_in++]);
            break;
        case G_TRANSPOSE:
            type = "Transpose";
            st = ov_i64_in(p, n.a.n_ints, n.a.ints, &ins[n_in++]);
            break;
        case G_CONCAT:
            type = "Concat";
            sb_printf(&data, "axis=\"%lld\"", (long long)n.a.axis);
            break;
        case G_SLICE: {
            type = "Slice", version = "opset8";
            int64_t one = 1;
            if ((st = ov_i64_in(p, 1, &n.a.start, &ins[n_in++])) == FERRY_OK &&
                (st = ov_i64_in(p, 1, &n.a.end, &ins[n_in++])) == FERRY_OK && /* G_END: INT64_MAX */
                (st = ov_i64_in(p, 1, &one, &ins[n_in++])) == FERRY_OK)
                st = ov_i64_in(p, 1, &n.a.axis, &ins[n_in++]);
            break;
        }
        case G_UNSQUEEZE:
            type = "Unsqueeze";
            st = ov_i64_in(p, n.a.n_ints, n.a.ints, &ins[n_in++]);
            break;
        case G_CAST:
            type = "Convert";
            st = type_attr(p, &data, &n, "destination_type", n.a.to);
            break;
        case G_SOFTMAX:
            type = "SoftMax", version = "opset8";
            sb_printf(&data, "axis=\"%lld\"", (long long)n.a.axis);
            break;
        case G_REDUCE_MEAN: case G_REDUCE_MAX: case G_REDUCE_SUM:
            type = n.op == G_REDUCE_MEAN  ? "ReduceMean"
                   : n.op == G_REDUCE_MAX ? "ReduceMax"
                                          : "ReduceSum";
            sb_printf(&data, "keep_dims=\"%s\"", n.a.keepdims ? "true" : "false");
            st = ov_i64_in(p, n.a.n_ints, n.a.ints, &ins[n_in++]);
            break;
        case G_SHAPE_OF:
            type = "ShapeOf", version = "opset3";
            sb_puts(&data, "output_type=\"i64\"");
            break;
        case G_RANGE:
            type = "Range", version = "opset4";
            st = type_attr(p, &data, &n, "output_type", g->values[n.out[0]].dtype);
            break;
        case G_EXPAND:
            type = "Broadcast", version = "opset3";
            sb_puts(&data, "mode=\"bidirectional\"");
            break;
        case G_CUMSUM:
            type = "CumSum", version = "opset3";
            sb_puts(&data, "exclusive=\"false\" reverse=\"false\"");
            st = ov_const_in(p, g_scalar_i64(g, n.a.axis), &ins[n_in++]);
            break;
        case G_SCATTER_ELEMENTS: case G_SCATTER_ADD:
            type = "ScatterElementsUpdate", version = "opset12";
            sb_printf(&data, "reduction=\"%s\" use_init_val=\"true\"",
                      n.op == G_SCATTER_ADD ? "sum" : "none");
            st = ov_const_in(p, g_scalar_i64(g, n.a.axis), &ins[n_in++]);
            break;
        case G_GATHER_ELEMENTS:
            type = "GatherElements", version = "opset6";
            sb_printf(&data, "axis=\"%lld\"", (long long)n.a.axis);
            break;
        case G_CLIP: /* an absent bound is an infinite one, which Clamp takes as it is */
            type = "Clamp";
            sb_printf(&data, "min=\"%.17g\" max=\"%.17g\"", n.a.lo, n.a.hi);
            break;
        case G_PAD: {
            type = "Pad", version = "opset12";
            sb_puts(&data, "pad_mode=\"constant\"");
            int rank = g->values[n.in[0]].shape.rank;
            ferry_dtype dt = g->values[n.in[0]].dtype;
            if ((st = ov_i64_in(p, rank, n.a.pad_begin, &ins[n_in++])) == FERRY_OK &&
                (st = ov_i64_in(p, rank, n.a.pad_end, &ins[n_in++])) == FERRY_OK)
                st = ov_const_in(p, g_scalar_f(g, dt, n.a.pad_value), &ins[n_in++]);
            break;
        }
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
        ov_out full = {FERRY_I64, ov_shape1(rank), NULL};
        int s = ov_layer(p, type, version, name, data.data, ins, n_in, &full, 1);
        ov_in sl[5] = {ov_node_port(s, 1, FERRY_I64, &full.shape)};
        int64_t one = 1, zero = 0;
        if (ov_i64_in(p, 1, &n.a.start, &sl[1]) != FERRY_OK ||
            ov_i64_in(p, 1, &n.a.end, &sl[2]) != FERRY_OK || ov_i64_in(p, 1, &one, &sl[3]) != FERRY_OK ||
            ov_i64_in(p, 1, &zero, &sl[4]) != FERRY_OK) {
            sb_free(&data);
            return p->err->status;
        }
        id = ov_layer(p, "Slice", "opset8", n.name, NULL, sl, 5, &o, 1);
        n_in = 5;
    } else {
        id = ov_layer(p, type, version, n.name, data.data, ins, n_in, &o, 1);
    }
    bool oom = data.oom;
    sb_free(&data);
    if (oom || !ov_grow_at(p))
        return fy_fail(p->err, FERRY_ERR_NOMEM, "out of memory");
    p->at[n.out[0]] = ov_node_port(id, n_in, o.dtype, &o.shape);
    return FERRY_OK;
}
