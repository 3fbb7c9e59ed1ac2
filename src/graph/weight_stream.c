/* weight_stream.c — block-wise conversion and transpose of checkpoint tensors into data files. */
#include "graph/weight_stream.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/dtype.h"

/* Elements per block: 8 Mi elements is 32 MB of fp32, large enough for sequential I/O to run at
 * disk speed, small enough to keep peak RSS flat whatever the model size. */
#define BLOCK_ELEMS ((size_t)8 << 20)

uint64_t ws_nbytes(const g_weight *w)
{
    return w->src->numel * dt_size(w->dtype);
}

ferry_status ws_pwrite_all(int fd, const char *path, const void *data, size_t n, uint64_t offset,
                           fy_err *err)
{
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, (off_t)offset);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == ENOSPC || errno == EFBIG || errno == EDQUOT))
            return fy_fail(err, FERRY_ERR_NOSPACE, "%s: no space left while writing (%s)", path,
                           strerror(errno));
        if (k < 0)
            return fy_fail(err, FERRY_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        if (k == 0)
            return fy_fail(err, FERRY_ERR_NOSPACE, "%s: no space left while writing", path);
        p += k;
        n -= (size_t)k;
        offset += (uint64_t)k;
    }
    return FERRY_OK;
}

static void report(ws_progress *pr, uint64_t bytes, const char *what)
{
    if (!pr)
        return;
    pr->done += bytes;
    if (pr->fn)
        pr->fn(pr->user, pr->done, pr->total, what);
}

static void transpose(uint8_t *dst, const uint8_t *src, size_t rows, size_t cols, size_t esz)
{
    const size_t T = 32;
    for (size_t r0 = 0; r0 < rows; r0 += T)
        for (size_t c0 = 0; c0 < cols; c0 += T) {
            size_t r1 = r0 + T < rows ? r0 + T : rows, c1 = c0 + T < cols ? c0 + T : cols;
            for (size_t r = r0; r < r1; r++)
                for (size_t c = c0; c < c1; c++)
                    memcpy(dst + (c * rows + r) * esz, src + (r * cols + c) * esz, esz);
        }
}

static ferry_status convert(void *dst, const g_weight *w, const uint8_t *src, size_t n, fy_err *err)
{
    if (w->dtype == w->src->dtype) {
        memcpy(dst, src, n * dt_size(w->dtype));
        return FERRY_OK;
    }
    if (dt_convert(dst, w->dtype, src, w->src->dtype, n) != 0)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED, "tensor '%s': cannot convert %s to %s",
                       w->src->name, ferry_dtype_name(w->src->dtype), ferry_dtype_name(w->dtype));
    return FERRY_OK;
}

static ferry_status write_plain(int fd, const char *path, uint64_t offset, const g_weight *w,
                                ws_progress *pr, fy_err *err)
{
    const st_tensor *t = w->src;
    size_t isz = dt_size(t->dtype), osz = dt_size(w->dtype);
    const uint8_t *src = st_data(t);
    uint8_t *buf = NULL;
    ferry_status st = FERRY_OK;
    if (t->dtype != w->dtype && !(buf = malloc(BLOCK_ELEMS * osz)))
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory converting '%s'", t->name);
    for (uint64_t e = 0; e < t->numel; e += BLOCK_ELEMS) {
        size_t n = (size_t)(t->numel - e < BLOCK_ELEMS ? t->numel - e : BLOCK_ELEMS);
        const void *out = src + e * isz; /* same dtype: written straight from the mapping */
        if (buf) {
            if ((st = convert(buf, w, src + e * isz, n, err)) != FERRY_OK)
                break;
            out = buf;
        }
        if ((st = ws_pwrite_all(fd, path, out, n * osz, offset + e * osz, err)) != FERRY_OK)
            break;
        st_release(t, e * isz, (uint64_t)n * isz);
        report(pr, n * osz, t->name);
    }
    free(buf);
    return st;
}

/* [rows, cols] -> [cols, rows], a band of source rows at a time; each band lands as one strip
 * per output row. */
static ferry_status write_transposed(int fd, const char *path, uint64_t offset, const g_weight *w,
                                     ws_progress *pr, fy_err *err)
{
    const st_tensor *t = w->src;
    size_t rows = (size_t)t->shape[0], cols = (size_t)t->shape[1];
    size_t isz = dt_size(t->dtype), osz = dt_size(w->dtype);
    size_t band = cols ? BLOCK_ELEMS / cols : rows;
    if (band == 0)
        band = 1;
    if (band > rows)
        band = rows;
    ferry_status st = FERRY_OK;
    uint8_t *conv = malloc(band * cols * osz + 1), *tr = malloc(band * cols * osz + 1);
    if (!conv || !tr) {
        st = fy_fail(err, FERRY_ERR_NOMEM, "out of memory transposing '%s'", t->name);
        goto done;
    }
    for (size_t r0 = 0; r0 < rows; r0 += band) {
        size_t nr = rows - r0 < band ? rows - r0 : band;
        if ((st = convert(conv, w, st_data(t) + r0 * cols * isz, nr * cols, err)) != FERRY_OK)
            goto done;
        transpose(tr, conv, nr, cols, osz);
        if (nr == rows) {
            st = ws_pwrite_all(fd, path, tr, rows * cols * osz, offset, err);
        } else {
            for (size_t c = 0; c < cols && st == FERRY_OK; c++)
                st = ws_pwrite_all(fd, path, tr + c * nr * osz, nr * osz,
                                   offset + (c * rows + r0) * osz, err);
        }
        if (st != FERRY_OK)
            goto done;
        st_release(t, r0 * cols * isz, (uint64_t)nr * cols * isz);
        report(pr, nr * cols * osz, t->name);
    }
done:
    free(conv);
    free(tr);
    return st;
}

ferry_status ws_write(int fd, const char *path, uint64_t offset, const g_weight *w,
                      ws_progress *progress, fy_err *err)
{
    if (w->transpose)
        return write_transposed(fd, path, offset, w, progress, err);
    return write_plain(fd, path, offset, w, progress, err);
}
