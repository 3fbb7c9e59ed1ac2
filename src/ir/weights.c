/* weights.c — weight recipes: validation, logical shapes, the matrix a recipe streams as, the
 * parts it streams into. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/weights.h"
#include "util/dtype.h"
#include "util/text.h"

g_weight w_plain(const st_tensor *t, ferry_dtype dtype)
{
    g_weight w;
    memset(&w, 0, sizeof w);
    w.src[0] = t;
    w.n_src = 1;
    w.dtype = dtype;
    return w;
}

g_weight w_join(const st_tensor *const *list, int n, bool stack, ferry_dtype dtype)
{
    g_weight w;
    memset(&w, 0, sizeof w);
    for (int k = 0; k < n && k < W_INLINE_SOURCES; k++)
        w.src[k] = list[k];
    w.more = n > W_INLINE_SOURCES ? list : NULL;
    w.n_src = n;
    w.stack = stack;
    w.dtype = dtype;
    return w;
}

/* A source's rows and cols as the recipe reads it: [in, out] stored is [out, in] read; an N-D
 * tensor is [d0, d1 * ... * dn]; a vector is one row. */
int64_t w_source_rows(const g_weight *w, const st_tensor *t)
{
    if (t->ndim == 1)
        return 1;
    return w->src_transposed ? t->shape[1] : t->shape[0];
}

int64_t w_source_cols(const g_weight *w, const st_tensor *t)
{
    if (t->ndim == 1)
        return t->shape[0];
    if (w->src_transposed)
        return t->shape[0];
    int64_t c = 1;
    for (int d = 1; d < t->ndim; d++)
        c *= t->shape[d];
    return c;
}

bool w_rows_joined(const g_weight *w)
{
    return w_src(w, 0)->ndim >= 2 && (w->stack || w->concat_axis == 0);
}

/* Rows and cols of the sources joined, before the row range. */
static void joined_matrix(const g_weight *w, int64_t *rows, int64_t *cols)
{
    const st_tensor *t0 = w_src(w, 0);
    *rows = w_source_rows(w, t0);
    *cols = w_source_cols(w, t0);
    for (int k = 1; k < w->n_src; k++) {
        const st_tensor *t = w_src(w, k);
        if (t0->ndim == 1)
            *cols += t->shape[0]; /* vectors join end to end */
        else if (w->stack || w->concat_axis == 0)
            *rows += w_source_rows(w, t);
        else
            *cols += w_source_cols(w, t);
    }
}

void w_matrix(const g_weight *w, int64_t *rows, int64_t *cols)
{
    joined_matrix(w, rows, cols);
    if (w->row_end)
        *rows = w->row_end - w->row_begin;
}

/* The logical shape of a valid recipe: the sources' (read as their layout says), joined or
 * stacked, row-ranged, flattened, transposed. */
static void logical_shape(const g_weight *w, int *rank, int64_t *shape)
{
    const st_tensor *t0 = w_src(w, 0);
    int r = 0, group = w->stack && w->stack_group > 1 ? w->stack_group : 1;
    if (w->stack)
        shape[r++] = w->n_src / group;
    int first = r;
    if (w->src_transposed) {
        shape[r++] = t0->shape[1];
        shape[r++] = t0->shape[0];
    } else {
        for (int d = 0; d < t0->ndim; d++)
            shape[r++] = t0->shape[d];
    }
    shape[first] *= group;
    if (!w->stack)
        for (int k = 1; k < w->n_src; k++) {
            const st_tensor *t = w_src(w, k);
            int axis = t0->ndim == 1 ? 0 : w->concat_axis;
            shape[first + axis] += w->src_transposed ? t->shape[1 - axis] : t->shape[axis];
        }
    if (w->row_end)
        shape[first] = w->row_end - w->row_begin;
    if (w->flatten && r - first > 2) {
        for (int d = first + 2; d < r; d++)
            shape[first + 1] *= shape[d];
        r = first + 2;
    }
    if (w->transpose) {
        int64_t t = shape[0];
        shape[0] = shape[1];
        shape[1] = t;
    }
    *rank = r;
}

ferry_status w_check(const g_weight *w, int *rank, int64_t *shape, fy_err *err)
{
    char what[512];
    if (w->n_src < 1 || w->n_src > W_MAX_SOURCES || (w->n_src > W_INLINE_SOURCES && !w->more))
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight recipe with %d sources", w->n_src);
    w_describe(w, what, sizeof what);
    const st_tensor *t0 = w_src(w, 0);
    int max_rank = W_MAX_RANK - (w->stack ? 1 : 0);
    if (t0->ndim < 1 || t0->ndim > (max_rank < 5 ? max_rank : 5))
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: rank %d (1 to 5 supported)", what,
                       t0->ndim);
    if (w->src_transposed && t0->ndim != 2)
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: an [in, out] layout needs 2 dims",
                       what);
    if (w->concat_axis < 0 || w->concat_axis >= t0->ndim || (w->concat_axis && t0->ndim != 2) ||
        (w->stack && w->concat_axis))
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: bad concat axis", what);
    if (w->stack_group < 0 || (w->stack_group > 1 && (!w->stack || t0->ndim < 2 ||
                                                      w->n_src % w->stack_group != 0)))
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: a stack group of %d over %d "
                       "sources", what, w->stack_group, w->n_src);
    for (int k = 0; k < w->n_src; k++) {
        const st_tensor *t = w_src(w, k);
        if (!t)
            return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: source %d missing", what, k);
        if (!(t->dtype == FERRY_F32 || t->dtype == FERRY_F16 || t->dtype == FERRY_BF16))
            return fy_fail(err, FERRY_ERR_UNSUPPORTED, "tensor '%s' in %s has dtype %s; ferry "
                           "reads F32, F16 and BF16 weights", t->name, t->file->path,
                           dt_st_name(t->dtype));
        if (t->ndim != t0->ndim || t->dtype != t0->dtype)
            return fy_fail(err, FERRY_ERR_UNSUPPORTED, "weight %s: tensors '%s' and '%s' differ "
                           "in rank or dtype and cannot be joined", what, t0->name, t->name);
        /* the joined axis, in the sources' own layout */
        int joined = w->stack ? -1 : w->src_transposed ? 1 - w->concat_axis : w->concat_axis;
        for (int d = 0; d < t->ndim; d++)
            if (d != joined && t->shape[d] != t0->shape[d])
                return fy_fail(err, FERRY_ERR_FORMAT, "weight %s: tensors '%s' and '%s' cannot "
                               "be %s%s", what, t0->name, t->name,
                               w->stack ? "stacked (their shapes differ)" : "joined along axis ",
                               w->stack ? "" : (w->concat_axis ? "1" : "0"));
    }
    int64_t rows, cols;
    joined_matrix(w, &rows, &cols);
    if (w->row_begin != 0 && w->row_end == 0)
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: a row range needs its end", what);
    if (!isfinite(w->offset))
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: offset %g", what, w->offset);
    if (w->row_end != 0 && (t0->ndim != 2 || w->stack || w->row_begin < 0 ||
                            w->row_end <= w->row_begin || w->row_end > rows))
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: bad row range", what);
    if (w->flatten && (t0->ndim < 3 || w->stack))
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: flatten takes one N-D source", what);
    if ((unsigned)w->perm >= W_PERM_COUNT ||
        (w->perm != W_PERM_NONE &&
         (t0->ndim != 2 || w->perm_group < 2 || w->perm_group % 2 != 0 ||
          (w->row_end ? w->row_end - w->row_begin : rows) % w->perm_group != 0)))
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: a row permutation needs 2-D rows "
                       "in whole groups of an even size", what);
    if (w->perm != W_PERM_NONE && w->src_transposed)
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: a row permutation of an [in, out] "
                       "source is not supported", what);
    if (!(w->dtype == FERRY_F32 || w->dtype == FERRY_F16 || w->dtype == FERRY_BF16))
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "weight %s: cannot be stored as %s", what,
                       dt_st_name(w->dtype));
    logical_shape(w, rank, shape);
    bool matrix = *rank == 2 || (w->stack && *rank == 3 && t0->ndim == 2);
    if (w->transpose && (*rank != 2 || w->stack))
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: transpose needs 2 dims", what);
    if (w->quant.bits) {
        if ((unsigned)w->quant.packing >= W_PACK_COUNT ||
            ((w->quant.packing == W_PACK_ZERO_BYTES || w->quant.high_nibble_first) &&
             w->quant.bits != 4))
            return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: bad packing", what);
        if ((w->quant.bits != 4 && w->quant.bits != 8) || !matrix || w->transpose ||
            w->offset != 0 || (w->dtype != FERRY_F32 && w->dtype != FERRY_F16))
            return fy_fail(err, FERRY_ERR_UNSUPPORTED, "weight %s: int%d block quantization "
                           "needs a 2-D weight (or a stack of them), fp32 or fp16 scales, no "
                           "transpose or offset", what, w->quant.bits);
        if (w->quant.block < 16 || w->quant.block > 256 ||
            (w->quant.block & (w->quant.block - 1)) != 0 || (w->quant.bits == 4 && cols % 2 != 0))
            return fy_fail(err, FERRY_ERR_UNSUPPORTED, "weight %s: int%d blocks of %d over rows "
                           "of %lld elements (blocks are powers of two from 16 to 256; 4-bit rows "
                           "need an even length)", what, w->quant.bits, w->quant.block,
                           (long long)cols);
    }
    return FERRY_OK;
}

int64_t w_permuted_row(const g_weight *w, int64_t r)
{
    if (w->perm == W_PERM_NONE)
        return r;
    int64_t g = w->perm_group, half = g / 2, base = r - r % g, i = r % g;
    if (w->perm == W_PERM_INTERLEAVE_HALVES)
        return base + (i % 2 ? half + i / 2 : i / 2);
    return base + (i < half ? 2 * i : 2 * (i - half) + 1);
}

bool w_equal(const g_weight *a, const g_weight *b)
{
    if (a->n_src != b->n_src)
        return false;
    for (int k = 0; k < a->n_src; k++)
        if (w_src(a, k) != w_src(b, k))
            return false;
    return a->concat_axis == b->concat_axis && a->stack == b->stack &&
           a->stack_group == b->stack_group &&
           a->src_transposed == b->src_transposed && a->flatten == b->flatten &&
           a->perm == b->perm && a->perm_group == b->perm_group &&
           a->row_begin == b->row_begin &&
           a->row_end == b->row_end && a->offset == b->offset && a->dtype == b->dtype &&
           a->transpose == b->transpose && a->saturate == b->saturate &&
           a->quant.bits == b->quant.bits &&
           a->quant.block == b->quant.block && a->quant.symmetric == b->quant.symmetric &&
           a->quant.search == b->quant.search &&
           a->quant.positive_scales == b->quant.positive_scales &&
           a->quant.high_nibble_first == b->quant.high_nibble_first &&
           a->quant.packing == b->quant.packing;
}

int w_n_parts(const g_weight *w)
{
    if (!w->quant.bits)
        return 1;
    return w_has_zeros(&w->quant) ? 3 : 2;
}

void w_part_info(const g_weight *w, w_part part, int *rank, int64_t *shape, ferry_dtype *dtype,
                 uint64_t *nbytes)
{
    int64_t rows, cols;
    w_matrix(w, &rows, &cols);
    logical_shape(w, rank, shape);
    if (!w->quant.bits) {
        *dtype = w->dtype;
        *nbytes = (uint64_t)rows * (uint64_t)cols * dt_size(w->dtype);
        return;
    }
    /* a matrix [out, in] or a stack [E, out, in]: each part keeps the leading dims */
    ferry_dtype code = w->quant.bits == 4 ? FERRY_U4 : FERRY_U8;
    int64_t blocks = (cols + w->quant.block - 1) / w->quant.block;
    int64_t code_row = w->quant.packing == W_PACK_PAD_BLOCKS ? blocks * w->quant.block : cols;
    int last = *rank - 1;
    switch (part) {
    case W_PART_DATA:
        shape[last] = code_row;
        *dtype = code;
        *nbytes = dt_nbytes(code, (uint64_t)rows * (uint64_t)code_row);
        break;
    case W_PART_SCALES:
        shape[last] = blocks;
        *dtype = w->dtype;
        *nbytes = (uint64_t)rows * (uint64_t)blocks * dt_size(w->dtype);
        break;
    case W_PART_ZEROS:
        shape[last] = blocks;
        if (w->quant.packing == W_PACK_ZERO_BYTES) {
            *dtype = FERRY_U8;
            *nbytes = (uint64_t)rows * (uint64_t)blocks;
            break;
        }
        *dtype = code;
        /* rows padded to whole bytes (MatMulNBits' zero_points layout), or packed
         * contiguously, a symmetric weight's all the mid code (DequantizeLinear's) */
        *nbytes = w->quant.packing == W_PACK_CONTIGUOUS
                      ? dt_nbytes(code, (uint64_t)rows * (uint64_t)blocks)
                      : (uint64_t)rows * dt_nbytes(code, (uint64_t)blocks);
        break;
    }
}

void w_describe(const g_weight *w, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    /* a long stack reads as its first and last sources */
    for (int k = 0; k < w->n_src && len < size; k++) {
        if (w->n_src > 4 && k == 2) {
            len += (size_t)snprintf(buf + len, size - len, "%s...(%d sources)",
                                    w->stack ? "," : "+", w->n_src);
            k = w->n_src - 2;
        }
        char q[TEXT_QUOTE_MAX];
        len += (size_t)snprintf(buf + len, size - len, "%s%s", k ? (w->stack ? "," : "+") : "",
                                text_quote(w_src(w, k)->name, q, sizeof q));
    }
    if (w->stack && len < size)
        len += (size_t)snprintf(buf + len, size - len, " stacked");
    if (w->row_end && len < size)
        snprintf(buf + len, size - len, "[%lld:%lld]", (long long)w->row_begin,
                 (long long)w->row_end);
}
