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
 * An int4 weight (ferry's quantizer: symmetric blocks along `in`) is XNNPACK's 8da4w, as
 * ExecuTorch's own int4 recipe lowers it: an XNNConvert quantizes the activations per token to
 * qdint8, and the fully connected layer reads the qbint4 filter, whose codes are ferry's
 * packing as it is (code = value + 8, element 2j in the low nibble, row-major [out, in]) and
 * whose block scales are bf16, the one type XNNPACK keeps them in, and positive, as it requires:
 * the weight's recipe with bf16 positive scales, its codes rounded against them (quant/rtn.h,
 * RTN_SYMMETRIC_POSITIVE).
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
#define XNN_QDINT8 9
#define XNN_QBINT4 10
#define XNN_FLAG_EXTERNAL_INPUT 1u
#define XNN_FLAG_EXTERNAL_OUTPUT 2u
#define XNN_INVALID_ID UINT32_MAX
#define XNN_NODE_FULLY_CONNECTED 2   /* XNodeUnion */
#define XNN_NODE_CONVERT 18
#define XNN_VALUE_TENSOR 1           /* XValueUnion */
#define XNN_VALUE_QUANTIZED 2
#define XNN_PER_TOKEN_DYNAMIC 3      /* XNNQuantParams */
#define XNN_PER_CHANNEL_GROUP 4
#define XNN_HEADER_SIZE 32           /* "XH00" and its fields, padded */

/* The named-data index of `want` (added on first use); -1 on failure. */
static int named(et_program *p, et_data want)
{
    for (size_t i = 0; i < p->n_named; i++)
        if (et_data_equal(&p->named[i], &want))
            return (int)i;
    const char *name = p->g->values[want.value].name;
    for (size_t i = 0; i < p->n_named; i++)
        if (p->named[i].value != want.value &&
            strcmp(p->g->values[p->named[i].value].name, name) == 0)
            return et_fail(p, FERRY_ERR_INTERNAL, "two weights named '%s'", name), -1;
    et_data *n = fy_grow(p->named, &p->cap_named, p->n_named + 1, sizeof *n);
    if (!n)
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory"), -1;
    p->named = n;
    n[p->n_named] = want;
    return (int)p->n_named++;
}

static int named_value(et_program *p, int v)
{
    return named(p, (et_data){.value = v});
}

/* Graph value v: a weight or constant of `rank` dims, of `dt` (a quantized weight: its scales
 * and what it dequantizes to), named. */
static bool constant_of(const et_program *p, int v, int rank, ferry_dtype dt)
{
    if (v < 0 || (size_t)v >= p->g->n_values)
        return false;
    const g_value *x = &p->g->values[v];
    return (x->kind == GV_WEIGHT || x->kind == GV_CONST) && x->dtype == dt &&
           x->shape.rank == rank && x->name;
}

static bool quantized(const et_program *p, int v)
{
    return v >= 0 && (size_t)v < p->g->n_values && p->g->values[v].kind == GV_WEIGHT &&
           p->g->values[v].weight.quant.bits;
}

/* An XNNTensorValue's table: `dims`, constant `buffer` (0: none), `external` id (or
 * XNN_INVALID_ID), `flags`. */
static fb_ref tensor_table(fb_builder *b, uint32_t id, int datatype, const int64_t *dims,
                           int rank, uint32_t buffer, uint32_t external, uint32_t flags)
{
    uint32_t d[XNN_MAX_DIMS];
    for (int i = 0; i < rank; i++)
        d[i] = (uint32_t)dims[i];
    fb_ref vd = fb_vector(b, d, (size_t)rank, 4, 4);
    fb_table_start(b);
    fb_add_u16(b, 0, (uint16_t)datatype, 0);
    fb_add_u32(b, 1, (uint32_t)rank, 0);
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

static fb_ref fp32_value(fb_builder *b, uint32_t id, const int64_t *dims, int rank,
                         uint32_t buffer, uint32_t external, uint32_t flags)
{
    return xvalue(b, XNN_VALUE_TENSOR,
                  tensor_table(b, id, XNN_FP32, dims, rank, buffer, external, flags));
}

/* The activations quantized per token (qdint8, their last dim the channels). */
static fb_ref qdint8_value(fb_builder *b, uint32_t id, const int64_t *dims, int rank)
{
    fb_ref t = tensor_table(b, id, XNN_QDINT8, dims, rank, 0, XNN_INVALID_ID, 0);
    fb_table_start(b);
    fb_add_i32(b, 0, 1, 0);                           /* num_nonbatch_dims */
    fb_ref q = fb_table_end(b);
    fb_table_start(b);
    fb_add_ref(b, 0, t);
    fb_add_union(b, 2, XNN_PER_TOKEN_DYNAMIC, q);
    return xvalue(b, XNN_VALUE_QUANTIZED, fb_table_end(b));
}

/* The int4 filter [out, in]: codes in `buffer`, bf16 scales [out, in / group] in `scales`. */
static fb_ref qbint4_value(fb_builder *b, uint32_t id, int64_t out_ch, int64_t in_ch,
                           int group, uint32_t buffer, uint32_t scales)
{
    int64_t dims[2] = {out_ch, in_ch};
    fb_ref t = tensor_table(b, id, XNN_QBINT4, dims, 2, buffer, XNN_INVALID_ID, 0);
    fb_ref none = fb_vector(b, NULL, 0, 4, 4);
    fb_table_start(b);
    fb_add_ref(b, 0, none);                           /* scale: in the buffer instead */
    fb_add_i32(b, 1, 0, 0);                           /* channel_dim */
    fb_add_i32(b, 2, group, 0);
    fb_add_u32(b, 4, scales, 0);
    fb_add_u32(b, 5, (uint32_t)(out_ch * in_ch / group), 0);
    fb_ref q = fb_table_end(b);
    fb_table_start(b);
    fb_add_ref(b, 0, t);
    fb_add_union(b, 2, XNN_PER_CHANNEL_GROUP, q);
    return xvalue(b, XNN_VALUE_QUANTIZED, fb_table_end(b));
}

static fb_ref constant_data(fb_builder *b, et_program *p, int named_index)
{
    if (named_index < 0) {          /* entry 0: "no constant" */
        fb_table_start(b);
        return fb_table_end(b);
    }
    char name[512];
    et_named_key(p, (size_t)named_index, name, sizeof name);
    fb_ref key = fb_string(b, name);
    fb_table_start(b);
    fb_add_u64(b, 0, UINT64_MAX, 0);                  /* not in the blob: named data */
    fb_add_u64(b, 1, et_named_bytes(p, (size_t)named_index), 0);
    fb_add_ref(b, 2, key);
    return fb_table_end(b);
}

static fb_ref node_table(fb_builder *b, int kind, fb_ref node)
{
    fb_table_start(b);
    fb_add_union(b, 1, (uint8_t)kind, node);
    return fb_table_end(b);
}

static void put_le(uint8_t *at, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        at[i] = (uint8_t)(v >> (8 * i));
}

/* What one linear's graph holds: its named data (-1: absent) and the int4 group (0: fp32). */
typedef struct xnn_linear {
    int64_t out_ch, in_ch;
    int weight, scales, bias;
    int group;
} xnn_linear;

/* The blob of one fully connected layer: x [.., in] (external 0) times the filter [out, in]
 * plus the bias, into y (external 1); an int4 filter reads x quantized per token. */
static bool linear_blob(et_program *p, const et_value *x, const et_value *y,
                        const xnn_linear *l, et_delegate *out)
{
    enum { X, XQ, W, B, Y };
    uint32_t cd_weight = 1, cd_scales = 2, cd_bias = l->group ? 3 : 2;
    fb_builder b;
    fb_init(&b);
    fb_ref values[5], nodes[2];
    int n = 0, n_nodes = 0;
    int64_t wd[2] = {l->out_ch, l->in_ch};
    values[n++] = fp32_value(&b, X, x->sizes, x->rank, 0, 0, XNN_FLAG_EXTERNAL_INPUT);
    if (l->group) {
        values[n++] = qdint8_value(&b, XQ, x->sizes, x->rank);
        values[n++] = qbint4_value(&b, W, l->out_ch, l->in_ch, l->group, cd_weight, cd_scales);
    } else {
        values[n++] = fp32_value(&b, W, wd, 2, cd_weight, XNN_INVALID_ID, 0);
    }
    if (l->bias >= 0)
        values[n++] = fp32_value(&b, B, wd, 1, cd_bias, XNN_INVALID_ID, 0);
    values[n++] = fp32_value(&b, Y, y->sizes, y->rank, 0, 1, XNN_FLAG_EXTERNAL_OUTPUT);
    fb_ref xvalues = fb_ref_vector(&b, values, (size_t)n);
    if (l->group) {
        fb_table_start(&b);
        fb_add_u32(&b, 0, X, 0);
        fb_add_u32(&b, 1, XQ, 0);
        nodes[n_nodes++] = node_table(&b, XNN_NODE_CONVERT, fb_table_end(&b));
    }
    fb_table_start(&b);
    fb_add_u32(&b, 0, l->group ? XQ : X, 0);          /* input1_id */
    fb_add_u32(&b, 1, W, 0);                          /* filter_id */
    fb_add_u32(&b, 2, l->bias >= 0 ? B : XNN_INVALID_ID, 0);
    fb_add_u32(&b, 3, Y, 0);                          /* output_id */
    nodes[n_nodes++] = node_table(&b, XNN_NODE_FULLY_CONNECTED, fb_table_end(&b));
    fb_ref xnodes = fb_ref_vector(&b, nodes, (size_t)n_nodes);
    fb_ref cd[4];
    int n_cd = 0;
    cd[n_cd++] = constant_data(&b, p, -1);
    cd[n_cd++] = constant_data(&b, p, l->weight);
    if (l->group)
        cd[n_cd++] = constant_data(&b, p, l->scales);
    if (l->bias >= 0)
        cd[n_cd++] = constant_data(&b, p, l->bias);
    fb_ref constants = fb_ref_vector(&b, cd, (size_t)n_cd);
    uint32_t in_id = X, out_id = Y;
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

/* The named data of an int4 weight's XNNPACK form: its recipe with bf16 scales. */
static bool int4_weight(et_program *p, int v, int64_t in_ch, xnn_linear *l)
{
    const g_value *w = &p->g->values[v];
    const w_quant *q = &w->weight.quant;
    if (q->bits != 4 || !q->symmetric)
        return et_fail(p, FERRY_ERR_UNSUPPORTED, "weight '%s': XNNPACK's int4 takes symmetric "
                       "4-bit blocks (ferry's default quantizer), not %s %d-bit ones", w->name,
                       q->symmetric ? "symmetric" : "asymmetric", q->bits), false;
    if (in_ch % q->block)
        return et_fail(p, FERRY_ERR_UNSUPPORTED, "weight '%s': its %lld inputs are not whole "
                       "blocks of %d, which XNNPACK's int4 needs; pick a block size that "
                       "divides them (--block-size)", w->name, (long long)in_ch, q->block),
               false;
    et_data codes = {.value = v, .part_of_quantized = true, .recipe = w->weight,
                      .part = W_PART_CODES};
    codes.recipe.dtype = FERRY_BF16;
    codes.recipe.quant.packing = W_PACK_ROWS;
    codes.recipe.quant.positive_scales = true;
    et_data scales = codes;
    scales.part = W_PART_SCALES;
    l->group = q->block;
    l->weight = named(p, codes);
    l->scales = named(p, scales);
    return l->weight >= 0 && l->scales >= 0;
}

bool et_xnn_linear(et_program *p, int x, int weight, int bias, int y)
{
    if (p->st != FERRY_OK || x < 0 || y < 0)
        return false;
    bool q = quantized(p, weight);
    const char *wname = weight >= 0 ? p->g->values[weight].name : "?";
    if (!p->xnnpack && !q)
        return false;
    if (!p->xnnpack)
        return et_fail(p, FERRY_ERR_UNSUPPORTED, "weight '%s' is quantized, which only the "
                       "XNNPACK delegate runs (--et-backend xnnpack)", wname), false;
    et_value xv = p->values[x], yv = p->values[y];
    bool fits = (q || constant_of(p, weight, 2, FERRY_F32)) && xv.kind == ET_TENSOR &&
                xv.dtype == FERRY_F32 && yv.dtype == FERRY_F32 && xv.rank >= 1 &&
                xv.rank <= XNN_MAX_DIMS && yv.rank == xv.rank;
    const g_value *w = fits ? &p->g->values[weight] : NULL;
    xnn_linear l = {.weight = -1, .scales = -1, .bias = -1};
    fits = fits && g_dim_is_const(w->shape.d[0], &l.out_ch) &&
           g_dim_is_const(w->shape.d[1], &l.in_ch) && xv.sizes[xv.rank - 1] == l.in_ch &&
           yv.sizes[yv.rank - 1] == l.out_ch;
    fits = fits && (bias < 0 || (constant_of(p, bias, 1, FERRY_F32) &&
                                 g_dim_eq(p->g->values[bias].shape.d[0],
                                          g_dim_const(l.out_ch))));
    if (!fits && q)
        return et_fail(p, FERRY_ERR_UNSUPPORTED, "weight '%s' is quantized, and its linear is "
                       "not one XNNPACK's int4 runs (fp32 activations and bias)", wname), false;
    if (!fits)
        return false;
    if (q ? !int4_weight(p, weight, l.in_ch, &l) : (l.weight = named_value(p, weight)) < 0)
        return false;
    if (bias >= 0 && (l.bias = named_value(p, bias)) < 0)
        return false;
    et_delegate *d = fy_grow(p->delegates, &p->cap_delegates, p->n_delegates + 1, sizeof *d);
    if (!d)
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory"), false;
    p->delegates = d;
    d += p->n_delegates;
    *d = (et_delegate){0};
    if (!linear_blob(p, &xv, &yv, &l, d))
        return false;
    p->n_delegates++;
    if (q)
        p->n_int4_linears++;
    int args[2] = {x, y};
    et_delegate_call(p, (int)p->n_delegates - 1, args, 2);
    return p->st == FERRY_OK;
}
