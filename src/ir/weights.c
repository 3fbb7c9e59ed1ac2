/* weights.c — weight recipes: validation, logical shapes, the parts a recipe streams into. */
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

/* Shape of the joined sources, before the row range and transpose. */
static void joined_shape(const g_weight *w, int *rank, int64_t *shape)
{
    const st_tensor *t = w->src[0];
    *rank = t->ndim;
    for (int i = 0; i < t->ndim && i < 2; i++)
        shape[i] = t->shape[i];
    for (int k = 1; k < w->n_src; k++)
        shape[w->concat_axis] += w->src[k]->shape[w->concat_axis];
}

void w_matrix(const g_weight *w, int64_t *rows, int64_t *cols)
{
    int rank;
    int64_t s[2] = {1, 1};
    joined_shape(w, &rank, s);
    if (rank == 1) {
        *rows = 1;
        *cols = s[0];
        return;
    }
    *rows = w->row_end ? w->row_end - w->row_begin : s[0];
    *cols = s[1];
}

ferry_status w_check(const g_weight *w, int *rank, int64_t *shape, fy_err *err)
{
    char what[512];
    if (w->n_src < 1 || w->n_src > W_MAX_SOURCES)
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight recipe with %d sources", w->n_src);
    w_describe(w, what, sizeof what);
    const st_tensor *t0 = w->src[0];
    if (t0->ndim < 1 || t0->ndim > 2)
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: rank %d (1 or 2 supported)", what,
                       t0->ndim);
    for (int k = 0; k < w->n_src; k++) {
        const st_tensor *t = w->src[k];
        if (!(t->dtype == FERRY_F32 || t->dtype == FERRY_F16 || t->dtype == FERRY_BF16))
            return fy_fail(err, FERRY_ERR_UNSUPPORTED, "tensor '%s' in %s has dtype %s; ferry "
                           "reads F32, F16 and BF16 weights", t->name, t->file->path,
                           dt_st_name(t->dtype));
        if (t->ndim != t0->ndim || t->dtype != t0->dtype)
            return fy_fail(err, FERRY_ERR_UNSUPPORTED, "weight %s: tensors '%s' and '%s' differ "
                           "in rank or dtype and cannot be joined", what, t0->name, t->name);
        for (int d = 0; d < t->ndim; d++)
            if (d != w->concat_axis && t->shape[d] != t0->shape[d])
                return fy_fail(err, FERRY_ERR_FORMAT, "weight %s: tensors '%s' and '%s' cannot "
                               "be joined along axis %d", what, t0->name, t->name,
                               w->concat_axis);
    }
    if (w->concat_axis < 0 || w->concat_axis >= t0->ndim)
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: bad concat axis", what);
    joined_shape(w, rank, shape);
    if (w->row_begin != 0 && w->row_end == 0)
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: a row range needs its end", what);
    if (!isfinite(w->offset))
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: offset %g", what, w->offset);
    if (w->row_end != 0) {
        if (*rank != 2 || w->row_begin < 0 || w->row_end <= w->row_begin ||
            w->row_end > shape[0])
            return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: bad row range", what);
        shape[0] = w->row_end - w->row_begin;
    }
    if (!(w->dtype == FERRY_F32 || w->dtype == FERRY_F16 || w->dtype == FERRY_BF16))
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "weight %s: cannot be stored as %s", what,
                       dt_st_name(w->dtype));
    if (w->transpose && *rank != 2)
        return fy_fail(err, FERRY_ERR_INTERNAL, "weight %s: transpose needs 2 dims", what);
    if (w->quant.bits) {
        if ((w->quant.bits != 4 && w->quant.bits != 8) || *rank != 2 || w->transpose ||
            w->offset != 0 || (w->dtype != FERRY_F32 && w->dtype != FERRY_F16))
            return fy_fail(err, FERRY_ERR_UNSUPPORTED, "weight %s: int%d block quantization "
                           "needs a 2-D weight, fp32 or fp16 scales, no transpose or offset",
                           what, w->quant.bits);
        if (w->quant.block < 16 || w->quant.block > 256 ||
            (w->quant.block & (w->quant.block - 1)) != 0 ||
            (w->quant.bits == 4 && shape[1] % 2 != 0))
            return fy_fail(err, FERRY_ERR_UNSUPPORTED, "weight %s: int%d blocks of %d over rows "
                           "of %lld elements (blocks are powers of two from 16 to 256; 4-bit rows "
                           "need an even length)", what, w->quant.bits, w->quant.block,
                           (long long)shape[1]);
    }
    if (w->transpose) {
        int64_t r = shape[0];
        shape[0] = shape[1];
        shape[1] = r;
    }
    return FERRY_OK;
}

bool w_equal(const g_weight *a, const g_weight *b)
{
    if (a->n_src != b->n_src)
        return false;
    for (int k = 0; k < a->n_src; k++)
        if (a->src[k] != b->src[k])
            return false;
    return a->concat_axis == b->concat_axis && a->row_begin == b->row_begin &&
           a->row_end == b->row_end && a->offset == b->offset && a->dtype == b->dtype &&
           a->transpose == b->transpose && a->saturate == b->saturate &&
           a->quant.bits == b->quant.bits &&
           a->quant.block == b->quant.block && a->quant.symmetric == b->quant.symmetric &&
           a->quant.search == b->quant.search &&
           a->quant.explicit_zeros == b->quant.explicit_zeros &&
           a->quant.zeros_bytes == b->quant.zeros_bytes &&
           a->quant.zeros_packed == b->quant.zeros_packed &&
           a->quant.pad_blocks == b->quant.pad_blocks;
}

int w_n_parts(const g_weight *w)
{
    if (!w->quant.bits)
        return 1;
    return w->quant.symmetric && !w->quant.explicit_zeros ? 2 : 3;
}

void w_part_info(const g_weight *w, w_part part, int *rank, int64_t *shape, ferry_dtype *dtype,
                 uint64_t *nbytes)
{
    int64_t rows, cols;
    w_matrix(w, &rows, &cols);
    if (!w->quant.bits) {
        int r;
        int64_t s[2] = {0, 0};
        joined_shape(w, &r, s);
        if (r == 2) {
            s[0] = rows;
            if (w->transpose) {
                s[0] = cols;
                s[1] = rows;
            }
        }
        *rank = r;
        shape[0] = s[0];
        shape[1] = r == 2 ? s[1] : 0;
        *dtype = w->dtype;
        *nbytes = (uint64_t)rows * (uint64_t)cols * dt_size(w->dtype);
        return;
    }
    ferry_dtype code = w->quant.bits == 4 ? FERRY_U4 : FERRY_U8;
    int64_t blocks = (cols + w->quant.block - 1) / w->quant.block;
    int64_t code_row = w->quant.pad_blocks ? blocks * w->quant.block : cols;
    *rank = 2;
    shape[0] = rows;
    switch (part) {
    case W_PART_DATA:
        shape[1] = code_row;
        *dtype = code;
        *nbytes = dt_nbytes(code, (uint64_t)rows * (uint64_t)code_row);
        break;
    case W_PART_SCALES:
        shape[1] = blocks;
        *dtype = w->dtype;
        *nbytes = (uint64_t)rows * (uint64_t)blocks * dt_size(w->dtype);
        break;
    case W_PART_ZEROS:
        shape[1] = blocks;
        if (w->quant.zeros_bytes) {
            *dtype = FERRY_U8;
            *nbytes = (uint64_t)rows * (uint64_t)blocks;
            break;
        }
        *dtype = code;
        /* rows padded to whole bytes (MatMulNBits' zero_points layout); zeros_packed, and
         * explicit zeros of a symmetric weight (all the mid code), packed contiguously
         * (DequantizeLinear's) */
        *nbytes = w->quant.explicit_zeros || w->quant.zeros_packed
                      ? dt_nbytes(code, (uint64_t)rows * (uint64_t)blocks)
                      : (uint64_t)rows * dt_nbytes(code, (uint64_t)blocks);
        break;
    }
}

void w_describe(const g_weight *w, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 0; k < w->n_src && len < size; k++) {
        char q[TEXT_QUOTE_MAX];
        len += (size_t)snprintf(buf + len, size - len, "%s%s", k ? "+" : "",
                                text_quote(w->src[k]->name, q, sizeof q));
    }
    if (w->row_end && len < size)
        snprintf(buf + len, size - len, "[%lld:%lld]", (long long)w->row_begin,
                 (long long)w->row_end);
}
