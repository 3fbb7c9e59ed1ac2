/* et_xnnpack.c — the XNNPACK delegate (backend "xnnpack", docs/pte-format.md §7): a linear
 * whose weight is a checkpoint tensor runs as a graph of its own in the runtime's
 * XnnpackBackend, one XNNFullyConnected, called by a DelegateCall instruction whose arguments
 * are its input and output tensors (external ids 0 and 1: their places in the arguments).
 *
 * A delegate's blob is the "XH00" header and the XNNGraph flatbuffer ("XN01"), inline in the
 * Program (backend_delegate_data). Its weights are not in the blob: each is named data (the
 * Program's named_data, its bytes a segment of the file) keyed by the weight's name, so a
 * weight two delegates read (a tied head) is stored once, and where a portable kernel reads
 * it too (the embedding a tied head shares) the named segment is that constant's bytes. The
 * filter is [out, in], the checkpoint's layout; XNNPACK packs it at load time.
 *
 * The graph's tensors are sized at their bounds; the runtime reshapes the delegate to each
 * call's input and resizes the output, so dynamic axes need nothing more. */
#include <stdlib.h>
#include <string.h>

#include "backends/executorch/executorch.h"
#include "io/flatbuf.h"
#include "util/grow.h"

/* XNNPACK's limits and numbers (schema.fbs, xnnpack.h) */
#define XNN_MAX_DIMS 6
#define XNN_FP32 1
#define XNN_FLAG_EXTERNAL_INPUT 1u
#define XNN_FLAG_EXTERNAL_OUTPUT 2u
#define XNN_INVALID_ID UINT32_MAX
#define XNN_NODE_FULLY_CONNECTED 2   /* XNodeUnion */
#define XNN_VALUE_TENSOR 1           /* XValueUnion */
#define XNN_HEADER_SIZE 32           /* "XH00" and its fields, padded */

/* The named-data index of graph value `v` (added on first use); -1 on failure. */
static int named(et_program *p, int v)
{
    for (size_t i = 0; i < p->n_named; i++)
        if (p->named[i] == v)
            return (int)i;
    const char *name = p->g->values[v].name;
    for (size_t i = 0; i < p->n_named; i++)
        if (strcmp(p->g->values[p->named[i]].name, name) == 0)
            return et_fail(p, FERRY_ERR_INTERNAL, "two weights named '%s'", name), -1;
    int *n = fy_grow(p->named, &p->cap_named, p->n_named + 1, sizeof *n);
    if (!n)
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory"), -1;
    p->named = n;
    n[p->n_named] = v;
    return (int)p->n_named++;
}

static bool constant_of(const et_program *p, int v, int rank, ferry_dtype dt)
{
    if (v < 0 || (size_t)v >= p->g->n_values)
        return false;
    const g_value *x = &p->g->values[v];
    return (x->kind == GV_WEIGHT || x->kind == GV_CONST) && x->dtype == dt &&
           x->shape.rank == rank && x->name;
}

/* An XNNTensorValue: `dims`, constant `buffer` (0: none), `external` id or XNN_INVALID_ID. */
static fb_ref tensor_value(fb_builder *b, uint32_t id, const int64_t *dims, int rank,
                           uint32_t buffer, uint32_t external, uint32_t flags)
{
    uint32_t d[XNN_MAX_DIMS];
    for (int i = 0; i < rank; i++)
        d[i] = (uint32_t)dims[i];
    fb_ref vd = fb_vector(b, d, (size_t)rank, 4, 4);
    fb_table_start(b);
    fb_add_u16(b, 0, XNN_FP32, 0);                    /* datatype */
    fb_add_u32(b, 1, (uint32_t)rank, 0);
    fb_add_ref(b, 2, vd);
    fb_add_u32(b, 3, buffer, 0);
    fb_add_u32(b, 4, external, 0);
    fb_add_u32(b, 5, flags, 0);
    fb_add_u32(b, 6, id, 0);
    fb_ref t = fb_table_end(b);
    fb_table_start(b);
    fb_add_union(b, 1, XNN_VALUE_TENSOR, t);
    return fb_table_end(b);
}

static fb_ref constant_data(fb_builder *b, et_program *p, int named_index)
{
    if (named_index < 0) {          /* entry 0: "no constant" */
        fb_table_start(b);
        return fb_table_end(b);
    }
    const g_value *x = &p->g->values[p->named[named_index]];
    fb_ref key = fb_string(b, x->name);
    fb_table_start(b);
    fb_add_u64(b, 0, UINT64_MAX, 0);                  /* not in the blob: named data */
    fb_add_u64(b, 1, et_graph_value_bytes(p, p->named[named_index]), 0);
    fb_add_ref(b, 2, key);
    return fb_table_end(b);
}

static void put_le(uint8_t *at, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        at[i] = (uint8_t)(v >> (8 * i));
}

/* The blob of one fully connected layer: x [.., in] (external 0) times the filter [out, in]
 * plus the bias (when `bias` >= 0), into y (external 1). */
static bool linear_blob(et_program *p, const et_value *x, const et_value *y, int64_t out_ch,
                        int64_t in_ch, int filter, int bias, et_delegate *out)
{
    fb_builder b;
    fb_init(&b);
    fb_ref values[4];
    int n = 0;
    values[n++] = tensor_value(&b, 0, x->sizes, x->rank, 0, 0, XNN_FLAG_EXTERNAL_INPUT);
    int64_t wd[2] = {out_ch, in_ch};
    values[n++] = tensor_value(&b, 1, wd, 2, 1, XNN_INVALID_ID, 0);
    if (bias >= 0)
        values[n++] = tensor_value(&b, 2, wd, 1, 2, XNN_INVALID_ID, 0);
    values[n++] = tensor_value(&b, 3, y->sizes, y->rank, 0, 1, XNN_FLAG_EXTERNAL_OUTPUT);
    fb_ref xvalues = fb_ref_vector(&b, values, (size_t)n);
    fb_table_start(&b);
    fb_add_u32(&b, 0, 0, 0);             /* input1_id */
    fb_add_u32(&b, 1, 1, 0);             /* filter_id */
    fb_add_u32(&b, 2, bias >= 0 ? 2 : XNN_INVALID_ID, 0);
    fb_add_u32(&b, 3, 3, 0);             /* output_id */
    fb_ref fc = fb_table_end(&b);
    fb_table_start(&b);
    fb_add_union(&b, 1, XNN_NODE_FULLY_CONNECTED, fc);
    fb_ref node = fb_table_end(&b);
    fb_ref xnodes = fb_ref_vector(&b, &node, 1);
    fb_ref cd[3];
    int n_cd = 0;
    cd[n_cd++] = constant_data(&b, p, -1);
    cd[n_cd++] = constant_data(&b, p, filter);
    if (bias >= 0)
        cd[n_cd++] = constant_data(&b, p, bias);
    fb_ref constants = fb_ref_vector(&b, cd, (size_t)n_cd);
    uint32_t in_id = 0, out_id = 3;
    fb_ref ins = fb_vector(&b, &in_id, 1, 4, 4), outs = fb_vector(&b, &out_id, 1, 4, 4);
    fb_ref version = fb_string(&b, "0");
    fb_table_start(&b);
    fb_add_ref(&b, 0, version);
    fb_add_ref(&b, 1, xnodes);
    fb_add_ref(&b, 2, xvalues);
    fb_add_u32(&b, 3, 2, 0);                          /* num_externs */
    fb_add_ref(&b, 4, ins);
    fb_add_ref(&b, 5, outs);
    fb_add_ref(&b, 8, constants);
    fb_ref root = fb_table_end(&b);
    size_t len = 0;
    const uint8_t *graph = fb_finish(&b, root, "XN01", &len);
    bool ok = graph != NULL;
    if (ok) {
        size_t padded = (len + 15) / 16 * 16;
        out->len = XNN_HEADER_SIZE + padded;
        ok = (out->blob = calloc(1, out->len)) != NULL;
        if (ok) {
            memcpy(out->blob + 4, "XH00", 4);
            put_le(out->blob + 8, 30, 2);                /* the header's own length */
            put_le(out->blob + 10, XNN_HEADER_SIZE, 4);  /* the flatbuffer's offset */
            put_le(out->blob + 14, len, 4);              /* ... and size */
            put_le(out->blob + 18, XNN_HEADER_SIZE + padded, 4); /* constant data: none */
            put_le(out->blob + 22, 0, 8);
            memcpy(out->blob + XNN_HEADER_SIZE, graph, len);
        }
    }
    fb_free(&b);
    if (!ok)
        et_fail(p, FERRY_ERR_NOMEM, "out of memory (an XNNPACK graph)");
    return ok;
}

bool et_xnn_linear(et_program *p, int x, int weight, int bias, int y)
{
    if (p->st != FERRY_OK || !p->xnnpack || x < 0 || y < 0)
        return false;
    et_value xv = p->values[x], yv = p->values[y];
    if (!constant_of(p, weight, 2, FERRY_F32) || xv.kind != ET_TENSOR ||
        xv.dtype != FERRY_F32 || yv.dtype != FERRY_F32 || xv.rank < 1 ||
        xv.rank > XNN_MAX_DIMS || yv.rank != xv.rank)
        return false;
    const g_value *w = &p->g->values[weight];
    int64_t out_ch, in_ch;
    if (!g_dim_is_const(w->shape.d[0], &out_ch) || !g_dim_is_const(w->shape.d[1], &in_ch) ||
        xv.sizes[xv.rank - 1] != in_ch || yv.sizes[yv.rank - 1] != out_ch)
        return false;
    if (bias >= 0 && (!constant_of(p, bias, 1, FERRY_F32) ||
                      !g_dim_eq(p->g->values[bias].shape.d[0], g_dim_const(out_ch))))
        return false;
    int f = named(p, weight), bi = bias >= 0 ? named(p, bias) : -1;
    if (f < 0 || (bias >= 0 && bi < 0))
        return false;
    et_delegate *d = fy_grow(p->delegates, &p->cap_delegates, p->n_delegates + 1, sizeof *d);
    if (!d)
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory"), false;
    p->delegates = d;
    d += p->n_delegates;
    *d = (et_delegate){0};
    if (!linear_blob(p, &xv, &yv, out_ch, in_ch, f, bi, d))
        return false;
    p->n_delegates++;
    int args[2] = {x, y};
    et_delegate_call(p, (int)p->n_delegates - 1, args, 2);
    return p->st == FERRY_OK;
}
