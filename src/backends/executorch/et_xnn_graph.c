/* et_xnn_graph.c — the XNNPACK partitions (backend "xnnpack", docs/pte-format.md §7): the
 * delegated calls the emitter makes are one XNNPACK graph, run by one DelegateCall placed
 * where the first of them was made, for as long as each call reads only what the graph makes
 * or what is as it was at that place (the kernels since may read what the graph makes; a call
 * that reads what they make, or what they may have written, starts the next graph). Its
 * arguments are known only when the whole program is: its inputs are the program's tensors it
 * reads that were made before it, its outputs those it makes that anything after it reads (a
 * kernel, a later partition, the program's outputs), inputs first; each is its graph's
 * external value of the same place. A
 * tensor made and read inside one graph lives in XNNPACK's own memory: the program holds a
 * None in its place, so the plan gives it no bytes.
 *
 * A blob is the "XH00" header and the XNNGraph flatbuffer ("XN01"), then the constants it
 * holds itself (a norm's averaging row, a scalar operand), inline in the Program. Weights are
 * named data (et_xnnpack.c). Tensors are sized at their bounds; the runtime reshapes the graph
 * to each call's inputs and resizes its outputs, so dynamic axes need nothing more. */
#include <stdlib.h>
#include <string.h>

#include "backends/executorch/executorch.h"
#include "io/flatbuf.h"
#include "util/grow.h"

#define XNN_FLAG_EXTERNAL_INPUT 1u
#define XNN_FLAG_EXTERNAL_OUTPUT 2u
#define XNN_INVALID_ID UINT32_MAX
#define XNN_VALUE_TENSOR 1           /* XValueUnion */
#define XNN_VALUE_QUANTIZED 2
#define XNN_PER_TOKEN_DYNAMIC 3      /* XNNQuantParams */
#define XNN_PER_CHANNEL_GROUP 4
#define XNN_HEADER_SIZE 32           /* "XH00" and its fields, padded */
#define XNN_CONST_ALIGN 16

/* Whether a kernel after x's call reads or writes tensor `ev` (a list's items too). */
static bool touched_after(const et_program *p, const et_partition *x, int ev)
{
    for (size_t i = x->instr + 1; i < p->n_instrs; i++)
        for (int a = 0; a < p->instrs[i].n_args; a++) {
            const et_value *v = &p->values[p->instrs[i].args[a]];
            if (p->instrs[i].args[a] == ev)
                return true;
            if (v->kind == ET_TENSOR_LIST || v->kind == ET_OPT_TENSOR_LIST)
                for (int j = 0; j < v->n_items; j++)
                    if (v->items[j] == ev)
                        return true;
        }
    return false;
}

/* Whether a kernel after x's call writes tensor `ev` in place (aten::index_put_, copy_: their
 * first argument). */
static bool written_after(const et_program *p, const et_partition *x, int ev)
{
    for (size_t i = x->instr + 1; i < p->n_instrs; i++) {
        const et_instr *in = &p->instrs[i];
        if (in->op < 0 || in->n_args < 1 || in->args[0] != ev)
            continue;
        const char *op = p->operators[in->op];
        if (op[strlen(op) - 1] == '_')
            return true;
    }
    return false;
}

/* Whether x's call can compute a node reading `reads`: each is made inside x and not written
 * since, or is as it was when x is called (no kernel since has touched it: it may have
 * written it). */
static bool can_join(const et_program *p, const et_partition *x, const int *reads, int n)
{
    for (int i = 0; i < n; i++) {
        bool inside = false;
        for (size_t j = 0; j < x->n_values && !inside; j++)
            inside = x->values[j].evalue == reads[i] && x->values[j].produced;
        if (inside ? written_after(p, x, reads[i]) : touched_after(p, x, reads[i]))
            return false;
    }
    return true;
}

et_partition *et_xnn_open(et_program *p, const int *reads, int n)
{
    if (p->st != FERRY_OK)
        return NULL;
    if (p->open && can_join(p, &p->partitions[p->n_partitions - 1], reads, n))
        return &p->partitions[p->n_partitions - 1];
    et_partition *x = fy_grow(p->partitions, &p->cap_partitions, p->n_partitions + 1, sizeof *x);
    if (!x)
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory"), NULL;
    p->partitions = x;
    x += p->n_partitions;
    *x = (et_partition){.instr = p->n_instrs};
    et_delegate_call(p, (int)p->n_partitions);
    if (p->st != FERRY_OK)
        return NULL;
    p->n_partitions++;
    p->open = true;
    return x;
}

static int add_value(et_program *p, et_partition *x, xnn_value v)
{
    if (p->st != FERRY_OK)
        return -1;
    if (v.rank < 0 || v.rank > XNN_MAX_DIMS)
        return et_fail(p, FERRY_ERR_INTERNAL, "an XNNPACK tensor of rank %d", v.rank), -1;
    xnn_value *n = fy_grow(x->values, &x->cap_values, x->n_values + 1, sizeof *n);
    if (!n)
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory"), -1;
    x->values = n;
    v.external = -1;
    n[x->n_values] = v;
    return (int)x->n_values++;
}

int et_xnn_value(et_program *p, et_partition *x, xnn_type type, int rank, const int64_t *dims,
                 int named)
{
    xnn_value v = {.evalue = -1, .named = named, .inline_at = -1, .type = type, .rank = rank,
                   .scales = -1, .quantizes = -1};
    if (rank > 0 && rank <= XNN_MAX_DIMS)
        memcpy(v.dims, dims, (size_t)rank * sizeof *dims);
    return add_value(p, x, v);
}

int et_xnn_tensor(et_program *p, et_partition *x, int ev)
{
    if (p->st != FERRY_OK || ev < 0)
        return -1;
    for (size_t i = 0; i < x->n_values; i++)
        if (x->values[i].evalue == ev)
            return (int)i;
    const et_value *t = &p->values[ev];
    if (t->kind != ET_TENSOR || t->dtype != FERRY_F32 || t->constant)
        return et_fail(p, FERRY_ERR_INTERNAL, "an XNNPACK operand that is no fp32 tensor"), -1;
    int v = et_xnn_value(p, x, XNN_T_FP32, t->rank, t->sizes, -1);
    if (v >= 0)
        x->values[v].evalue = ev;
    return v;
}

int et_xnn_floats(et_program *p, et_partition *x, const float *f, size_t n, int rank,
                  const int64_t *dims)
{
    size_t at = (x->n_bytes + XNN_CONST_ALIGN - 1) / XNN_CONST_ALIGN * XNN_CONST_ALIGN;
    uint8_t *b = fy_grow(x->bytes, &x->cap_bytes, at + n * sizeof *f, 1);
    if (!b)
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory"), -1;
    x->bytes = b;
    memset(b + x->n_bytes, 0, at - x->n_bytes);
    for (size_t i = 0; i < n; i++) { /* little-endian, as the blob is read */
        uint32_t u;
        memcpy(&u, &f[i], 4);
        for (int j = 0; j < 4; j++)
            b[at + 4 * i + (size_t)j] = (uint8_t)(u >> (8 * j));
    }
    x->n_bytes = at + n * sizeof *f;
    int v = et_xnn_value(p, x, XNN_T_FP32, rank, dims, -1);
    if (v >= 0) {
        x->values[v].inline_at = (int64_t)at;
        x->values[v].inline_len = n * sizeof *f;
    }
    return v;
}

void et_xnn_node(et_program *p, et_partition *x, xnn_kind kind, const int *in, int n, int out,
                 const xnn_node *with)
{
    if (p->st != FERRY_OK)
        return;
    if (n > XNN_MAX_NODE_INPUTS || out < 0 || (size_t)out >= x->n_values ||
        x->values[out].produced)
        return (void)et_fail(p, FERRY_ERR_INTERNAL, "an XNNPACK node's output");
    xnn_node node = with ? *with : (xnn_node){0};
    node.kind = kind;
    node.out = out;
    for (int i = 0; i < XNN_MAX_NODE_INPUTS; i++)
        node.in[i] = -1;
    for (int i = 0; i < n; i++) {
        if (in[i] < -1 || in[i] >= (int)x->n_values)
            return (void)et_fail(p, FERRY_ERR_INTERNAL, "an XNNPACK node's input");
        node.in[i] = in[i];
    }
    xnn_node *nodes = fy_grow(x->nodes, &x->cap_nodes, x->n_nodes + 1, sizeof *nodes);
    if (!nodes)
        return (void)et_fail(p, FERRY_ERR_NOMEM, "out of memory");
    x->nodes = nodes;
    nodes[x->n_nodes++] = node;
    x->values[out].produced = true;
    p->n_xnn_nodes++;
}

/* ---- the blob ---- */

/* An XNNTensorValue's table: `dims`, constant `buffer` (0: none), `external` id (or
 * XNN_INVALID_ID), `flags`. */
static fb_ref tensor_table(fb_builder *b, uint32_t id, const xnn_value *v, uint32_t buffer,
                           uint32_t external, uint32_t flags)
{
    uint32_t d[XNN_MAX_DIMS];
    for (int i = 0; i < v->rank; i++)
        d[i] = (uint32_t)v->dims[i];
    fb_ref vd = fb_vector(b, d, (size_t)v->rank, 4, 4);
    fb_table_start(b);
    fb_add_u16(b, 0, (uint16_t)v->type, 0);
    fb_add_u32(b, 1, (uint32_t)v->rank, 0);
    fb_add_ref(b, 2, vd);
    fb_add_u32(b, 3, buffer, 0);
    fb_add_u32(b, 4, external, 0);
    fb_add_u32(b, 5, flags, 0);
    fb_add_u32(b, 6, id, 0);
    return fb_table_end(b);
}

static fb_ref xvalue(fb_builder *b, int kind, fb_ref value)
{
    fb_table_start(b);
    fb_add_union(b, 1, (uint8_t)kind, value);
    return fb_table_end(b);
}

/* Value `id` of x: fp32; qdint8, quantized per token (its last dim the channels); qbint4 [out,
 * in], its codes in constant `buffer`, bf16 scales [out, in / group] in constant `scales`. */
static fb_ref value_table(fb_builder *b, uint32_t id, const xnn_value *v, uint32_t buffer,
                          uint32_t scales)
{
    uint32_t external = v->external >= 0 ? (uint32_t)v->external : XNN_INVALID_ID;
    uint32_t flags = v->external < 0 ? 0 : v->produced ? XNN_FLAG_EXTERNAL_OUTPUT
                                                        : XNN_FLAG_EXTERNAL_INPUT;
    fb_ref t = tensor_table(b, id, v, buffer, external, flags);
    if (v->type == XNN_T_FP32)
        return xvalue(b, XNN_VALUE_TENSOR, t);
    int params;
    if (v->type == XNN_T_QDINT8) {
        fb_table_start(b);
        fb_add_i32(b, 0, 1, 0);                       /* num_nonbatch_dims */
        params = XNN_PER_TOKEN_DYNAMIC;
    } else {
        fb_ref none = fb_vector(b, NULL, 0, 4, 4);
        fb_table_start(b);
        fb_add_ref(b, 0, none);                       /* scale: in the buffer instead */
        fb_add_i32(b, 1, 0, 0);                       /* channel_dim */
        fb_add_i32(b, 2, v->group, 0);
        fb_add_u32(b, 4, scales, 0);
        fb_add_u32(b, 5, (uint32_t)(v->dims[0] * v->dims[1] / v->group), 0);
        params = XNN_PER_CHANNEL_GROUP;
    }
    fb_ref q = fb_table_end(b);
    fb_table_start(b);
    fb_add_ref(b, 0, t);
    fb_add_union(b, 2, (uint8_t)params, q);
    return xvalue(b, XNN_VALUE_QUANTIZED, fb_table_end(b));
}

/* A ConstantDataOffset: named datum `named`, or `len` bytes at `at` of the blob's constants,
 * or (both absent) entry 0, "no constant". */
static fb_ref constant_entry(fb_builder *b, et_program *p, int named, int64_t at, uint64_t len)
{
    if (named < 0 && at < 0) {
        fb_table_start(b);
        return fb_table_end(b);
    }
    if (named < 0) {
        fb_table_start(b);
        fb_add_u64(b, 0, (uint64_t)at, UINT64_MAX);
        fb_add_u64(b, 1, len, 0);
        return fb_table_end(b);
    }
    char name[512];
    et_named_key(p, (size_t)named, name, sizeof name);
    fb_ref key = fb_string(b, name);
    fb_table_start(b);
    fb_add_u64(b, 0, UINT64_MAX, 0);                  /* not in the blob: named data */
    fb_add_u64(b, 1, et_named_bytes(p, (size_t)named), 0);
    fb_add_ref(b, 2, key);
    return fb_table_end(b);
}

static fb_ref node_table(fb_builder *b, const xnn_node *n)
{
    uint32_t in[XNN_MAX_NODE_INPUTS], d[2 * XNN_MAX_DIMS];
    for (int i = 0; i < XNN_MAX_NODE_INPUTS; i++)
        in[i] = n->in[i] >= 0 ? (uint32_t)n->in[i] : XNN_INVALID_ID;
    for (int i = 0; i < 2 * n->n_dims; i++)
        d[i] = (uint32_t)n->dims[i];
    fb_ref first = 0, second = 0;
    if (n->kind == XNN_STATIC_TRANSPOSE || n->kind == XNN_STATIC_RESHAPE ||
        n->kind == XNN_STATIC_SLICE)
        first = fb_vector(b, d, (size_t)n->n_dims, 4, 4);
    if (n->kind == XNN_STATIC_SLICE)
        second = fb_vector(b, d + n->n_dims, (size_t)n->n_dims, 4, 4);
    fb_table_start(b);
    if (n->kind == XNN_STATIC_TRANSPOSE || n->kind == XNN_STATIC_RESHAPE) {
        fb_add_u32(b, 0, (uint32_t)n->n_dims, 0);     /* num_dims */
        fb_add_ref(b, 1, first);                      /* perm, new_shape */
        fb_add_u32(b, 2, in[0], 0);
        fb_add_u32(b, 3, (uint32_t)n->out, 0);
    } else if (n->kind == XNN_STATIC_SLICE) {
        fb_add_u32(b, 0, (uint32_t)n->n_dims, 0);
        fb_add_ref(b, 1, first);                      /* offsets */
        fb_add_ref(b, 2, second);                     /* sizes */
        fb_add_u32(b, 3, in[0], 0);
        fb_add_u32(b, 4, (uint32_t)n->out, 0);
    } else if (n->kind == XNN_CONCATENATE2 || n->kind == XNN_CONCATENATE3 ||
               n->kind == XNN_CONCATENATE4 || n->kind == XNN_CONCATENATE5) {
        fb_add_u32(b, 0, (uint32_t)n->axis, 0);
        for (int i = 0; i < 4; i++)
            if (n->in[i] >= 0)
                fb_add_u32(b, 1 + i, in[i], 0);
        fb_add_u32(b, 5, (uint32_t)n->out, 0);
        if (n->in[4] >= 0)
            fb_add_u32(b, 7, in[4], 0);
    } else if (n->kind == XNN_FULLY_CONNECTED) {
        fb_add_u32(b, 0, in[0], 0);                   /* input1_id */
        fb_add_u32(b, 1, in[1], 0);                   /* filter_id */
        fb_add_u32(b, 2, in[2], 0);                   /* bias_id */
        fb_add_u32(b, 3, (uint32_t)n->out, 0);
    } else if (n->in[1] >= 0) {                       /* _XNNNode2x1 */
        fb_add_u32(b, 0, in[0], 0);
        fb_add_u32(b, 1, in[1], 0);
        fb_add_u32(b, 2, (uint32_t)n->out, 0);
    } else {                                          /* _XNNNode1x1 */
        fb_add_u32(b, 0, in[0], 0);
        fb_add_u32(b, 1, (uint32_t)n->out, 0);
    }
    fb_ref node = fb_table_end(b);
    fb_table_start(b);
    fb_add_union(b, 1, (uint8_t)n->kind, node);
    return fb_table_end(b);
}

static void put_le(uint8_t *at, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        at[i] = (uint8_t)(v >> (8 * i));
}

/* Partition x's blob, its external values numbered already (`ins`, `outs`: their ids). */
static bool write_blob(et_program *p, const et_partition *x, const uint32_t *ids, size_t n_ids,
                       size_t n_ins, et_delegate *out)
{
    fb_builder b;
    fb_init(&b);
    size_t n = x->n_values, n_cd = 1;
    /* constant entries: "none", then up to two a value (its data, an int4 weight's scales) */
    fb_ref *refs = malloc((3 * n + x->n_nodes + 1) * sizeof *refs);
    bool ok = refs != NULL;
    fb_ref *cd = refs, *values = refs + 2 * n + 1, *nodes = refs + 3 * n + 1;
    if (ok)
        cd[0] = constant_entry(&b, p, -1, -1, 0);
    for (size_t i = 0; ok && i < n; i++) {
        const xnn_value *v = &x->values[i];
        uint32_t buffer = 0, scales = 0;
        if (v->named >= 0 || v->inline_at >= 0) {
            buffer = (uint32_t)n_cd;
            cd[n_cd++] = constant_entry(&b, p, v->named, v->inline_at, v->inline_len);
        }
        if (v->scales >= 0) {
            scales = (uint32_t)n_cd;
            cd[n_cd++] = constant_entry(&b, p, v->scales, -1, 0);
        }
        values[i] = value_table(&b, (uint32_t)i, v, buffer, scales);
    }
    for (size_t i = 0; ok && i < x->n_nodes; i++)
        nodes[i] = node_table(&b, &x->nodes[i]);
    const uint8_t *graph = NULL;
    size_t len = 0;
    if (ok) {
        fb_ref xvalues = fb_ref_vector(&b, values, n);
        fb_ref xnodes = fb_ref_vector(&b, nodes, x->n_nodes);
        fb_ref constants = fb_ref_vector(&b, cd, n_cd);
        fb_ref ins = fb_vector(&b, ids, n_ins, 4, 4);
        fb_ref outs = fb_vector(&b, ids + n_ins, n_ids - n_ins, 4, 4);
        fb_ref version = fb_string(&b, "0");
        fb_table_start(&b);
        fb_add_ref(&b, 0, version);
        fb_add_ref(&b, 1, xnodes);
        fb_add_ref(&b, 2, xvalues);
        fb_add_u32(&b, 3, (uint32_t)n_ids, 0);        /* num_externs */
        fb_add_ref(&b, 4, ins);
        fb_add_ref(&b, 5, outs);
        fb_add_ref(&b, 8, constants);
        graph = fb_finish(&b, fb_table_end(&b), "XN01", &len);
        ok = graph != NULL;
    }
    if (ok) {
        size_t padded = (len + 15) / 16 * 16;
        out->len = XNN_HEADER_SIZE + padded + x->n_bytes;
        ok = (out->blob = calloc(1, out->len)) != NULL;
        if (ok) {
            memcpy(out->blob + 4, "XH00", 4);
            put_le(out->blob + 8, 30, 2);                /* the header's own length */
            put_le(out->blob + 10, XNN_HEADER_SIZE, 4);  /* the flatbuffer's offset */
            put_le(out->blob + 14, len, 4);              /* ... and size */
            put_le(out->blob + 18, XNN_HEADER_SIZE + padded, 4); /* the constants' offset */
            put_le(out->blob + 22, x->n_bytes, 8);       /* ... and size */
            memcpy(out->blob + XNN_HEADER_SIZE, graph, len);
            if (x->n_bytes)
                memcpy(out->blob + XNN_HEADER_SIZE + padded, x->bytes, x->n_bytes);
        }
    }
    free(refs);
    fb_free(&b);
    if (!ok)
        et_fail(p, FERRY_ERR_NOMEM, "out of memory (an XNNPACK graph)");
    return ok;
}

/* ---- the arguments ---- */

static void mark(const et_program *p, bool *read, int v)
{
    const et_value *x = &p->values[v];
    if (x->kind == ET_TENSOR)
        read[v] = true;
    else if (x->kind == ET_TENSOR_LIST || x->kind == ET_OPT_TENSOR_LIST)
        for (int i = 0; i < x->n_items; i++)
            if (x->items[i] >= 0)
                read[x->items[i]] = true;
}

static bool is_input(const xnn_value *v)
{
    return v->evalue >= 0 && !v->produced;
}

ferry_status et_xnn_finish(et_program *p)
{
    if (p->st != FERRY_OK || !p->n_partitions)
        return p->st;
    p->open = false;
    bool *read = calloc(p->n_values ? p->n_values : 1, sizeof *read);
    p->delegates = calloc(p->n_partitions, sizeof *p->delegates);
    if (!read || !p->delegates) {
        free(read);
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory");
    }
    /* what is read outside the graph that makes it: by a kernel, a graph it does not make, or
     * the program's caller */
    for (size_t i = 0; i < p->n_instrs; i++)
        for (int a = 0; a < p->instrs[i].n_args; a++)
            mark(p, read, p->instrs[i].args[a]);
    for (size_t i = 0; i < p->n_outputs; i++)
        mark(p, read, p->outputs[i]);
    for (size_t i = 0; i < p->n_partitions; i++)
        for (size_t j = 0; j < p->partitions[i].n_values; j++)
            if (is_input(&p->partitions[i].values[j]))
                read[p->partitions[i].values[j].evalue] = true;
    for (size_t i = 0; i < p->n_partitions && p->st == FERRY_OK; i++) {
        et_partition *x = &p->partitions[i];
        size_t n_ins = 0, n_args = 0;
        for (size_t j = 0; j < x->n_values; j++)
            n_ins += is_input(&x->values[j]);
        int *args = malloc((x->n_values + 1) * sizeof *args);
        uint32_t *ids = malloc((x->n_values + 1) * sizeof *ids);
        if (!args || !ids) {
            free(args), free(ids);
            et_fail(p, FERRY_ERR_NOMEM, "out of memory");
            break;
        }
        for (int outputs = 0; outputs < 2; outputs++)
            for (size_t j = 0; j < x->n_values; j++) {
                xnn_value *v = &x->values[j];
                if (v->evalue < 0 || (outputs ? !v->produced || !read[v->evalue] : v->produced))
                    continue;
                v->external = (int)n_args;
                ids[n_args] = (uint32_t)j;
                args[n_args++] = v->evalue;
            }
        if (n_args == n_ins && x->n_nodes) { /* nothing reads its results: its last one out */
            xnn_value *v = &x->values[x->nodes[x->n_nodes - 1].out];
            if (v->evalue >= 0) {
                v->external = (int)n_args;
                ids[n_args] = (uint32_t)x->nodes[x->n_nodes - 1].out;
                args[n_args++] = v->evalue;
            }
        }
        if (n_args == n_ins) {
            free(args), free(ids);
            et_fail(p, FERRY_ERR_INTERNAL, "an XNNPACK graph without a result");
            break;
        }
        et_instr *call = &p->instrs[x->instr];
        call->args = args;
        call->n_args = (int)n_args;
        write_blob(p, x, ids, n_args, n_ins, &p->delegates[i]);
        free(ids);
        p->n_delegates = i + 1;
    }
    /* the tensors that live inside a graph: no place in the program */
    for (size_t i = 0; i < p->n_partitions && p->st == FERRY_OK; i++)
        for (size_t j = 0; j < p->partitions[i].n_values; j++) {
            const xnn_value *v = &p->partitions[i].values[j];
            if (v->evalue >= 0 && v->external < 0)
                p->values[v->evalue].kind = ET_NULL;
        }
    free(read);
    return p->st;
}
