/* stream.c — bands of weight recipes through worker threads into a data file.
 *
 * A job is one band of one recipe: rows [r0, r0 + nr) of its logical matrix (a 1-D weight is
 * one row, banded by columns). A worker
 *   1. reads the band's source bytes with pread (joined row by row for a concat along columns
 *      or across tensors); nothing is mapped, so a checkpoint truncated meanwhile is a clear
 *      error naming it, never SIGBUS,
 *   2. converts (fused with the transpose for the common widening cases) or widens to fp32,
 *      adds the offset and quantizes (the in-memory transforms are transform.h's),
 *   3. pwrites each part at its place (a transposed band lands as one strip per output row).
 * A band that needs no transform still passes through memory: its floats' NaN and inf are
 * counted there, and the observer (the writers' CRC-32) sees every byte written. */
#include "store/stream.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant/rtn.h"
#include "store/direct.h"
#include "store/packing.h"
#include "store/stream_found.h"
#include "store/transform.h"
#include "util/dtype.h"
#include "util/grow.h"

/* Elements per band: 2 Mi elements is 8 MB of fp32, large enough for sequential I/O to run at
 * disk speed, small enough to keep peak RSS flat whatever the model size. A band and its
 * transposed copy a worker: 8 Mi held 105-116 MB at peak (t5-base, whisper-small, Qwen2-VL-2B),
 * 2 Mi 43-56 MB, with the 9.3 GB OpenVINO export no slower. */
#define BAND_ELEMS ((size_t)2 << 20)
#define MAX_THREADS 4
/* fp32 values a worker converts at a time before quantizing them: 16 KiB, cache-resident */
#define QUANT_CHUNK_FLOATS ((size_t)4096)

typedef struct job {
    const ws_item *item;
    const g_weight *w;       /* the recipe as streamed (stream_view) */
    int64_t r0, nr, c0, nc;  /* logical rows/cols of the pre-transpose matrix */
} job;

typedef struct buf {
    uint8_t *p;
    size_t cap;
} buf;

typedef struct worker_bufs {
    buf src, conv, out, scales, zeros, dequantized, gather;
    dw_bounce bounce;
} worker_bufs;

typedef struct stream {
    dw_file out;             /* the file written, with its O_DIRECT twin */
    volatile int *cancel;
    job *jobs;
    size_t n_jobs, next;
    g_weight *views;         /* by item: its recipe as streamed */
    uint64_t done;
    size_t finished;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    fy_err err;              /* first failure (guarded by mu) */
    const char *what;        /* the tensor of the band finished last, for progress */
    const ws_item *items;
    ws_found *found;         /* by item (guarded by mu) */
    const ws_observer *observer;
} stream;

static bool grow(buf *b, size_t n)
{
    if (b->cap >= n)
        return true;
    uint8_t *p = realloc(b->p, n);
    if (!p)
        return false;
    b->p = p;
    b->cap = n;
    return true;
}

/* Room for `n` bytes in `b` that will be written at file offset `dst`: where that run goes out
 * directly (direct.h), placed in a page-aligned allocation at dst's offset within a page, so
 * that memory and file are aligned alike and the whole pages go to the disk from here, not
 * through the staging buffer; else at b->p. The contents are not kept. NULL: out of memory. */
static uint8_t *room_for_run(stream *s, buf *b, size_t n, uint64_t dst)
{
    if (!dw_takes_direct(&s->out, n))
        return grow(b, n) ? b->p : NULL;
    size_t align = s->out.align, skew = (size_t)(dst % align);
    if (b->cap < n + skew || (uintptr_t)b->p % align != 0) {
        void *p;
        if (posix_memalign(&p, align, n + skew) != 0)
            return NULL;
        free(b->p);
        b->p = p;
        b->cap = n + skew;
    }
    return b->p + skew;
}

uint64_t ws_item_bytes(const ws_item *item)
{
    if (item->bytes)
        return item->offset[W_PART_DATA] == WS_UNPLACED ? 0 : item->nbytes;
    uint64_t total = 0;
    for (int p = 0; p < w_n_parts(&item->w); p++) {
        int rank;
        int64_t shape[W_MAX_RANK];
        ferry_dtype dt;
        uint64_t nbytes;
        if (item->offset[p] == WS_UNPLACED)
            continue;
        w_part_info(&item->w, (w_part)p, &rank, shape, &dt, &nbytes);
        total += nbytes;
    }
    return total;
}

/* ---- reading a band of sources ---- */

/* Where row `r` of the recipe's matrix lives: source k, row within it (after the permutation
 * and the row range). Where sources lie side by side (a join along columns) every source holds
 * a piece of every row, and k is 0. */
static void locate_row(const g_weight *w, int64_t r, int *k, int64_t *row)
{
    r = w_permuted_row(w, r) + w->row_begin;
    *k = 0;
    if (w_rows_joined(w)) {
        while (*k < w->n_src - 1 && r >= w_source_rows(w, w_src(w, *k))) {
            r -= w_source_rows(w, w_src(w, *k));
            (*k)++;
        }
    }
    *row = r;
}

static int64_t src_cols(const g_weight *w, const st_tensor *t)
{
    return w_source_cols(w, t);
}

static ferry_status put(stream *s, worker_bufs *b, const void *data, size_t n, uint64_t offset,
                        fy_err *err);

/* Where the band's bytes lie when they are one contiguous range of one tensor: the tensor and
 * the byte offset in it; NULL when they must be gathered (a join along columns, a band that
 * spans two joined tensors, permuted rows, a source stored [in, out]). */
static const st_tensor *contiguous(const job *j, uint64_t *offset)
{
    const g_weight *w = j->w;
    if (w->perm != W_PERM_NONE || w->src_transposed)
        return NULL;
    size_t isz = dt_size(w_src(w, 0)->dtype);
    int k;
    int64_t row;
    locate_row(w, j->r0, &k, &row);
    const st_tensor *t = w_src(w, k);
    bool one_tensor = w->n_src == 1 || (w_rows_joined(w) &&
                                        row + j->nr <= w_source_rows(w, t));
    if (!one_tensor || (j->nc != src_cols(w, t) && j->nr != 1))
        return NULL;
    *offset = ((uint64_t)row * (uint64_t)src_cols(w, t) + (uint64_t)j->c0) * isz;
    return t;
}

/* The band of a recipe whose 2-D sources are stored [in, out]: each source's piece of the
 * band's rows is a run of its columns, read one stored row at a time (in reads of the run)
 * and transposed into the band, row-major [nr, nc]. */
static const uint8_t *read_band_transposed(const job *j, worker_bufs *b, fy_err *err)
{
    const g_weight *w = j->w;
    size_t isz = dt_size(w_src(w, 0)->dtype), nc = (size_t)j->nc;
    if (!grow(&b->gather, (size_t)j->nr * nc * isz)) {
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory reading weights");
        return NULL;
    }
    uint8_t *band = b->src.p;
    for (int64_t r = 0; r < j->nr;) {
        int k;
        int64_t row;
        locate_row(w, j->r0 + r, &k, &row);
        /* the run of band rows in this source (all sources, side by side, when joined along
         * columns) */
        int64_t run = j->nr - r;
        if (w_rows_joined(w) && w_source_rows(w, w_src(w, k)) - row < run)
            run = w_source_rows(w, w_src(w, k)) - row;
        int first = w_rows_joined(w) ? k : 0, last = w_rows_joined(w) ? k : w->n_src - 1;
        size_t col0 = 0;
        for (int si = first; si <= last; si++) {
            const st_tensor *t = w_src(w, si);
            size_t in = (size_t)t->shape[0], out = (size_t)t->shape[1], m = (size_t)run;
            for (size_t i = 0; i < in; i++)
                if (st_read(t, ((uint64_t)i * out + (uint64_t)row) * isz,
                            b->gather.p + i * m * isz, m * isz, err) != FERRY_OK)
                    return NULL;
            for (size_t x = 0; x < m; x++)
                for (size_t i = 0; i < in; i++)
                    memcpy(band + (((size_t)r + x) * nc + col0 + i) * isz,
                           b->gather.p + (i * m + x) * isz, isz);
            col0 += in;
        }
        r += run;
    }
    return band;
}

/* The band's source elements, row-major [nr, nc], in the sources' dtype, read with pread into
 * b->src (a file that shrank gives the truncation error naming it). */
static const uint8_t *read_band(const job *j, worker_bufs *b, fy_err *err)
{
    const g_weight *w = j->w;
    size_t isz = dt_size(w_src(w, 0)->dtype), n = (size_t)(j->nr * j->nc) * isz;
    if (!grow(&b->src, n)) {
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory reading weights");
        return NULL;
    }
    if (w->src_transposed)
        return read_band_transposed(j, b, err);
    uint64_t off;
    const st_tensor *t = contiguous(j, &off);
    if (t)
        return st_read(t, off, b->src.p, n, err) == FERRY_OK ? b->src.p : NULL;
    if (w_rows_joined(w) && j->c0 == 0 && w->perm == W_PERM_NONE) {
        /* whole rows of tensors joined along rows: one read per run of rows of one tensor
         * (row by row, a joined q/k/v was thousands of small reads) */
        for (int64_t r = 0; r < j->nr;) {
            int k;
            int64_t row;
            locate_row(w, j->r0 + r, &k, &row);
            const st_tensor *ts = w_src(w, k);
            int64_t left = w_source_rows(w, ts) - row;
            int64_t run = left < j->nr - r ? left : j->nr - r;
            size_t row_bytes = (size_t)j->nc * isz;
            if (src_cols(w, ts) != j->nc)
                break; /* not whole rows after all: the general path below */
            if (st_read(ts, (uint64_t)row * row_bytes, b->src.p + (size_t)r * row_bytes,
                        (size_t)run * row_bytes, err) != FERRY_OK)
                return NULL;
            r += run;
            if (r == j->nr)
                return b->src.p;
        }
    }
    bool vectors = w_src(w, 0)->ndim == 1;
    for (int64_t r = 0; r < j->nr; r++) {
        uint8_t *dst = b->src.p + (size_t)(r * j->nc) * isz;
        int k;
        int64_t row;
        locate_row(w, j->r0 + r, &k, &row);
        if (w_rows_joined(w) || vectors) {
            /* one source holds the whole row (for 1-D joins, walk the column range) */
            int64_t c = j->c0, left = j->nc;
            int si = vectors ? 0 : k;
            while (vectors && c >= src_cols(w, w_src(w, si)))
                c -= src_cols(w, w_src(w, si++));
            while (left > 0) {
                const st_tensor *ts = w_src(w, si);
                int64_t take = src_cols(w, ts) - c < left ? src_cols(w, ts) - c : left;
                uint64_t base = vectors ? 0 : (uint64_t)row * (uint64_t)src_cols(w, ts);
                if (st_read(ts, (base + (uint64_t)c) * isz, dst, (size_t)take * isz, err) !=
                    FERRY_OK)
                    return NULL;
                dst += (size_t)take * isz;
                left -= take;
                c = 0;
                si++;
            }
        } else {
            /* join along columns: the row is the sources' rows side by side */
            for (int si = 0; si < w->n_src; si++) {
                const st_tensor *ts = w_src(w, si);
                size_t len = (size_t)src_cols(w, ts) * isz;
                if (st_read(ts, (uint64_t)row * len, dst, len, err) != FERRY_OK)
                    return NULL;
                dst += len;
            }
        }
    }
    return b->src.p;
}

/* Adds to `f` the NaN and inf among rows [r, r + nr) of job `j`'s band, laid out as read_band
 * reads them ([nr, nc] row-major) in `dt` (the sources', or fp32 once converted), noting the
 * first source that holds one, so that the warning names it. */
static void count_nonfinite(const job *j, int64_t r, int64_t nr, const uint8_t *p, ferry_dtype dt,
                            ws_found *f)
{
    const g_weight *w = j->w;
    size_t esz = dt_size(dt);
    if (!dt_is_float(dt))
        return;
    if (w->n_src == 1) {
        ws_found_nonfinite(f, 0, tf_count_nonfinite(p, dt, (size_t)(nr * j->nc)));
        return;
    }
    for (int64_t i = 0; i < nr; i++, p += (size_t)j->nc * esz) {
        int k;
        int64_t row;
        locate_row(w, j->r0 + r + i, &k, &row);
        if (w_rows_joined(w)) {
            ws_found_nonfinite(f, k, tf_count_nonfinite(p, dt, (size_t)j->nc));
            continue;
        }
        /* pieces of several sources side by side: a join along columns (whole rows of each),
         * or of vectors (the band's column range c0.. of the joined vector) */
        int64_t c = w_src(w, 0)->ndim == 1 ? j->c0 : 0, left = j->nc;
        int si = 0;
        while (si < w->n_src - 1 && c >= src_cols(w, w_src(w, si)))
            c -= src_cols(w, w_src(w, si++));
        const uint8_t *q = p;
        for (; left > 0 && si < w->n_src; si++, c = 0) {
            int64_t cols = src_cols(w, w_src(w, si));
            int64_t take = cols - c < left ? cols - c : left;
            ws_found_nonfinite(f, si, tf_count_nonfinite(q, dt, (size_t)take));
            q += (size_t)take * esz;
            left -= take;
        }
    }
}

/* A band that needs no transform: read into b->src and written past the page cache where the
 * output takes direct writes (direct.h), through the cache otherwise; the observer sees it as
 * it is put. Float bands have their NaN and inf added to `found` (source k's; a bit test on memory
 * just read costs little next to the read). A source that ends early (the file shrank) is the
 * truncation error. */
static ferry_status copy_band(stream *s, const st_tensor *t, int k, uint64_t src_off,
                              uint64_t dst, size_t len, worker_bufs *b, ws_found *found,
                              fy_err *err)
{
    uint8_t *room = room_for_run(s, &b->src, len, dst);
    if (!room)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory reading weights");
    if (st_read(t, src_off, room, len, err) != FERRY_OK)
        return err->status;
    if (dt_is_float(t->dtype))
        ws_found_nonfinite(found, k, tf_count_nonfinite(room, t->dtype,
                                                        len / dt_size(t->dtype)));
    return put(s, b, room, len, dst, err);
}

/* ---- one band ---- */

/* Writes a band (direct.h: past the page cache where it can, through `b`'s staging buffer;
 * `b` NULL: buffered) and shows it to the observer. No byte is put twice: a page written
 * directly must not also be written through the cache. */
static ferry_status put(stream *s, worker_bufs *b, const void *data, size_t n, uint64_t offset,
                        fy_err *err)
{
    ferry_status st = dw_pwrite(&s->out, b ? &b->bounce : NULL, data, n, offset, err);
    if (st == FERRY_OK && s->observer)
        s->observer->wrote(s->observer->user, data, n, offset);
    return st;
}

/* Quantizes the band's rows (`src`, in `from`) a few at a time: each chunk is converted to
 * fp32 (plus the recipe's offset) in a buffer that stays in cache, instead of the whole band
 * going through memory once more as fp32. */
static ferry_status write_quantized(stream *s, const job *j, const uint8_t *src, ferry_dtype from,
                                    worker_bufs *b, uint64_t *written, ws_found *c, fy_err *err)
{
    const g_weight *w = j->w;
    const uint64_t *off = j->item->offset;
    size_t rows = (size_t)j->nr, cols = (size_t)j->nc, block = (size_t)w->quant.block;
    size_t blocks = (cols + block - 1) / block;
    size_t codes_in_row = w->quant.packing == W_PACK_PAD_BLOCKS ? blocks * block : cols;
    size_t code_row = codes_in_row * (size_t)w->quant.bits / 8;
    size_t scale_row = blocks * dt_size(w->dtype);
    size_t zero_row = (blocks * (size_t)w->quant.bits + 7) / 8;
    if (!grow(&b->out, rows * code_row) || !grow(&b->scales, rows * scale_row) ||
        !grow(&b->zeros, rows * zero_row + 1))
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory quantizing weights");
    size_t chunk = cols >= QUANT_CHUNK_FLOATS ? 1 : QUANT_CHUNK_FLOATS / cols;
    if (!grow(&b->conv, (chunk < rows ? chunk : rows) * cols * 4))
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory quantizing weights");
    size_t in_row = cols * dt_size(from);
    for (size_t r = 0; r < rows; r += chunk) {
        size_t nr = rows - r < chunk ? rows - r : chunk, n = nr * cols;
        const float *x = (const float *)(const void *)(src + r * in_row);
        if (from != FERRY_F32 || w->offset != 0) {
            dt_convert(b->conv.p, FERRY_F32, src + r * in_row, from, n);
            tf_add_offset(b->conv.p, w->offset != 0 ? n : 0, w->offset);
            x = (const float *)b->conv.p;
        }
        /* counted here, on the chunk in cache, where the quantizer reads it next */
        count_nonfinite(j, (int64_t)r, (int64_t)nr, (const uint8_t *)x, FERRY_F32, c);
        /* a non-finite block's scale is NaN (rtn.h), which XNNPACK refuses when the program
         * loads: refused here, naming the weight, rather than written */
        if (w->quant.positive_scales && tf_count_nonfinite(x, FERRY_F32, n)) {
            char name[256];
            w_describe(w, name, sizeof name);
            return fy_fail(err, FERRY_ERR_UNSUPPORTED, "weight '%s' holds NaN or infinite "
                           "values, which XNNPACK's int4 blocks cannot hold (their scales must "
                           "be finite): export it without --quantize", name);
        }
        int symmetric = !w->quant.symmetric ? RTN_ASYMMETRIC
                        : w->quant.positive_scales ? RTN_SYMMETRIC_POSITIVE : RTN_SYMMETRIC;
        rtn_quantize_rows(x, nr, cols, w->quant.bits, w->quant.block, symmetric,
                          w->quant.search, w->dtype, codes_in_row, b->out.p + r * code_row,
                          b->scales.p + r * scale_row, b->zeros.p + r * zero_row);
        if (w->dtype == FERRY_F16) {
            if (!grow(&b->dequantized, cols * sizeof(float)))
                return fy_fail(err, FERRY_ERR_NOMEM, "out of memory quantizing weights");
            c->overflowed += tf_count_f16_dequantized_overflow(
                w, x, nr, cols, b->out.p + r * code_row, code_row, b->scales.p + r * scale_row,
                scale_row, b->zeros.p + r * zero_row, zero_row, (float *)(void *)b->dequantized.p,
                &c->scale_overflowed);
        }
    }
    if (w->quant.high_nibble_first) /* rtn writes element 2j in the low nibble */
        for (size_t i = 0; i < rows * code_row; i++)
            b->out.p[i] = (uint8_t)(b->out.p[i] << 4 | b->out.p[i] >> 4);
    ferry_status st = FERRY_OK;
    *written = 0;
    if (off[W_PART_CODES] != WS_UNPLACED) {
        st = put(s, b, b->out.p, rows * code_row, off[W_PART_CODES] + (uint64_t)j->r0 * code_row,
                 err);
        *written += rows * code_row;
    }
    if (st == FERRY_OK && off[W_PART_SCALES] != WS_UNPLACED) {
        st = put(s, b, b->scales.p, rows * scale_row,
                 off[W_PART_SCALES] + (uint64_t)j->r0 * scale_row, err);
        *written += rows * scale_row;
    }
    if (st == FERRY_OK && w_has_zeros(&w->quant) && off[W_PART_ZEROS] != WS_UNPLACED) {
        uint64_t at;
        size_t len;
        const uint8_t *zeros = ws_pack_zeros(&w->quant, (size_t)j->r0, rows, blocks, b->zeros.p,
                                             zero_row, &b->conv.p, &b->conv.cap, &at, &len);
        if (!zeros)
            return fy_fail(err, FERRY_ERR_NOMEM, "out of memory quantizing weights");
        st = put(s, b, zeros, len, off[W_PART_ZEROS] + at, err);
        *written += len;
    }
    return st;
}

static ferry_status run_job(stream *s, const job *j, worker_bufs *b, uint64_t *written,
                            ws_found *found, fy_err *err)
{
    const g_weight *w = j->w;
    ferry_dtype from = w_src(w, 0)->dtype, to = w->dtype;
    size_t n = (size_t)(j->nr * j->nc), osz = dt_size(to);
    bool saturate = w->saturate && to == FERRY_F16;
    bool via_f32 = w->offset != 0 || w->quant.bits || saturate;
    uint64_t src_off;
    const st_tensor *t = !via_f32 && !w->transpose && from == to ? contiguous(j, &src_off) : NULL;
    if (t) {
        int k = 0;
        while (k < w->n_src - 1 && w_src(w, k) != t)
            k++;
        *written = n * osz;
        return copy_band(s, t, k, src_off,
                         j->item->offset[W_PART_DATA] + (uint64_t)(j->r0 * j->nc + j->c0) * osz,
                         n * osz, b, found, err);
    }
    const uint8_t *src = read_band(j, b, err);
    if (!src)
        return err->status;
    const uint8_t *data = src;
    if (w->quant.bits)
        return write_quantized(s, j, src, from, b, written, found, err);
    if (!via_f32) /* converted or transposed as it is: counted on the source band */
        count_nonfinite(j, 0, j->nr, src, from, found);
    if (via_f32) {
        if (!grow(&b->conv, n * 4))
            return fy_fail(err, FERRY_ERR_NOMEM, "out of memory converting weights");
        if (from == FERRY_F32)
            memcpy(b->conv.p, src, n * 4);
        else
            dt_convert(b->conv.p, FERRY_F32, src, from, n);
        /* before the clamp, which makes inf +-65504 */
        count_nonfinite(j, 0, j->nr, b->conv.p, FERRY_F32, found);
        tf_add_offset(b->conv.p, w->offset != 0 ? n : 0, w->offset);
        if (saturate)
            found->overflowed += tf_clamp_to_f16_range(b->conv.p, n);
        from = FERRY_F32;
        data = b->conv.p;
    }
    if (!w->transpose) {
        uint64_t dst = j->item->offset[W_PART_DATA] + (uint64_t)(j->r0 * j->nc + j->c0) * osz;
        if (from != to) {
            uint8_t *room = room_for_run(s, &b->out, n * osz, dst);
            if (!room)
                return fy_fail(err, FERRY_ERR_NOMEM, "out of memory converting weights");
            if (dt_convert(room, to, data, from, n) != 0)
                return fy_fail(err, FERRY_ERR_UNSUPPORTED, "weight '%s': cannot convert %s to %s",
                               w_src(w, 0)->name, dt_st_name(from), dt_st_name(to));
            found->overflowed += tf_count_overflow(room, to, data, from, n);
            data = room;
        }
        *written = n * osz;
        return put(s, b, data, n * osz, dst, err);
    }
    /* transposed: logical [R, C] stored [C, R]; this band is rows r0..r0+nr of columns
     * c0..c0+nc */
    int64_t rows_total, cols = j->nc;
    w_matrix(w, &rows_total, &(int64_t){0});
    size_t rows = (size_t)j->nr;
    if (!grow(&b->out, n * osz))
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory transposing weights");
    if (from == to) {
        tf_transpose(b->out.p, data, rows, (size_t)cols, osz);
    } else if (!tf_transpose_widen(b->out.p, data, rows, (size_t)cols, from, to)) {
        if (!grow(&b->conv, n * osz) || dt_convert(b->conv.p, to, data, from, n) != 0)
            return fy_fail(err, FERRY_ERR_NOMEM, "out of memory converting weights");
        found->overflowed += tf_count_overflow(b->conv.p, to, data, from, n);
        tf_transpose(b->out.p, b->conv.p, rows, (size_t)cols, osz);
    }
    *written = n * osz;
    uint64_t base = j->item->offset[W_PART_DATA] + (uint64_t)j->c0 * (uint64_t)rows_total * osz;
    if ((int64_t)rows == rows_total)
        return put(s, b, b->out.p, n * osz, base, err);
    for (int64_t c = 0; c < cols; c++) {
        ferry_status st = put(s, b, b->out.p + (size_t)c * rows * osz, rows * osz,
                              base + ((uint64_t)c * (uint64_t)rows_total + (uint64_t)j->r0) * osz,
                              err);
        if (st != FERRY_OK)
            return st;
    }
    return FERRY_OK;
}

bool ws_cancelled(volatile int *cancel)
{
    /* an atomic load: the flag is set by a signal handler, on whichever thread took the signal */
    return cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED) != 0;
}

static void *worker_main(void *arg)
{
    stream *s = arg;
    worker_bufs b = {0};
    pthread_mutex_lock(&s->mu);
    while (s->next < s->n_jobs && s->err.status == FERRY_OK) {
        if (ws_cancelled(s->cancel)) {
            fy_fail(&s->err, FERRY_ERR_CANCELLED, "interrupted");
            pthread_cond_broadcast(&s->cv);
            break;
        }
        const job *j = &s->jobs[s->next++];
        pthread_mutex_unlock(&s->mu);
        fy_err e = {0};
        uint64_t written = 0;
        ws_found c = {0};
        ferry_status st = run_job(s, j, &b, &written, &c, &e);
        pthread_mutex_lock(&s->mu);
        if (st != FERRY_OK && s->err.status == FERRY_OK)
            s->err = e;
        s->done += written;
        ws_found *sum = &s->found[j->item - s->items];
        sum->overflowed += c.overflowed;
        sum->scale_overflowed += c.scale_overflowed;
        ws_found_nonfinite(sum, c.nonfinite_src, c.nonfinite);
        s->finished++;
        s->what = w_src(j->w, 0)->name;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    free(b.src.p);
    free(b.conv.p);
    free(b.out.p);
    free(b.scales.p);
    free(b.zeros.p);
    free(b.dequantized.p);
    free(b.gather.p);
    dw_bounce_free(&b.bounce);
    return NULL;
}

/* A recipe as the stream runs it: one whose sources are stored [in, out] and which is stored
 * [in, out] too is the sources' bytes as they lie (joined along the other axis). */
static g_weight stream_view(const g_weight *w)
{
    g_weight v = *w;
    if (w->src_transposed && w->transpose && !w->row_end) {
        v.src_transposed = v.transpose = false;
        v.concat_axis = w->n_src > 1 ? 1 - w->concat_axis : 0;
    }
    return v;
}

/* Whether a matrix stored transposed is cut into bands of whole columns (`columns_a_band` of
 * them, a band's worth of elements): its bands' output rows are then whole and adjacent, one write each (past the page
 * cache), where a band of rows lands as one strip per output row (21 KB buffered writes for an
 * MLP's 8960 x 1536 up projection). The reads gather a piece of each source row instead, from
 * the page cache: worth it while the pieces are 256 bytes or more (Qwen2-VL-2B's 8960 x 1536 up
 * projection gives 468-byte pieces, and its ONNX export took 14.2 s instead of 14.7-16.5 s, as
 * strips cost more in buffered writes than pieces in reads; not a 151936-row embedding read as
 * a head); a join along columns reads whole rows only. */
static bool column_bands(const g_weight *w, int64_t columns_a_band)
{
    size_t piece = (size_t)columns_a_band * dt_size(w_src(w, 0)->dtype);
    return w->transpose && !w->src_transposed && !w->quant.bits && !w->stack &&
           w_src(w, 0)->ndim == 2 && w_rows_joined(w) && piece >= 256;
}

/* Cuts every item into bands of at most `band` elements: whole rows for matrices, whole
 * columns for the transposed ones column_bands picks. */
static ferry_status plan_jobs(stream *s, const ws_item *items, size_t n, size_t band,
                              fy_err *err)
{
    size_t cap = 0;
    s->views = malloc((n ? n : 1) * sizeof *s->views);
    if (!s->views)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory planning the weights");
    for (size_t i = 0; i < n; i++) {
        int64_t rows, cols;
        if (items[i].bytes || ws_item_bytes(&items[i]) == 0)
            continue; /* constants are written whole by ws_write itself */
        s->views[i] = stream_view(&items[i].w);
        const g_weight *w = &s->views[i];
        w_matrix(w, &rows, &cols);
        bool vector = w_src(w, 0)->ndim == 1;
        int64_t per = vector ? (int64_t)band : (cols > 0 ? (int64_t)(band / (size_t)cols) : rows);
        if (per < 1)
            per = 1; /* a row longer than a band is still one band */
        const w_quant *q = &items[i].w.quant;
        int step = ws_packing_row_step(q);
        if (!vector && step > 1 && per % step != 0 && per < rows)
            per = per > step ? per - per % step : step; /* bands on whole bytes of zeros */
        int64_t columns_a_band = rows > 0 ? (int64_t)(band / (size_t)rows) : 0;
        bool by_columns = !vector && column_bands(w, columns_a_band);
        if (by_columns)
            per = columns_a_band;
        int64_t span = vector || by_columns ? cols : rows;
        for (int64_t at = 0; at < span; at += per) {
            job *grown = fy_grow(s->jobs, &cap, s->n_jobs + 1, sizeof *grown);
            if (!grown)
                return fy_fail(err, FERRY_ERR_NOMEM, "out of memory planning the weights");
            s->jobs = grown;
            int64_t len = span - at < per ? span - at : per;
            s->jobs[s->n_jobs++] = vector       ? (job){&items[i], w, 0, 1, at, len}
                                   : by_columns ? (job){&items[i], w, 0, rows, at, len}
                                                : (job){&items[i], w, at, len, 0, cols};
        }
    }
    return FERRY_OK;
}

ferry_status ws_write(int fd, const char *path, const ws_item *items, size_t n, int threads,
                      size_t band_elems, ws_progress *progress, const ws_observer *observer,
                      fy_err *err)
{
    stream s = {.observer = observer, .cancel = progress ? progress->cancel : NULL,
                .items = items, .found = calloc(n ? n : 1, sizeof(ws_found))};
    dw_open(&s.out, fd, path);
    if (!s.found || plan_jobs(&s, items, n, band_elems ? band_elems : BAND_ELEMS, err) !=
                             FERRY_OK) {
        if (!s.found)
            fy_fail(err, FERRY_ERR_NOMEM, "out of memory planning the weights");
        dw_close(&s.out);
        free(s.jobs);
        free(s.views);
        free(s.found);
        return err->status;
    }
    if (threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (int)cores : 1;
    }
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    if ((size_t)threads > s.n_jobs)
        threads = s.n_jobs ? (int)s.n_jobs : 1;
    if (progress) {
        progress->done = 0;
        progress->total = 0;
        for (size_t i = 0; i < n; i++)
            progress->total += ws_item_bytes(&items[i]);
    }
    /* a first report before any work: a progress bar shows at once, and a caller (or test)
     * watching it knows the file exists and the stream has started, however fast it runs */
    if (progress && progress->fn)
        progress->fn(progress->user, 0, progress->total, path);
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    pthread_t tid[MAX_THREADS];
    int started = 0;
    for (; started < threads; started++)
        if (pthread_create(&tid[started], NULL, worker_main, &s) != 0)
            break;
    if (started == 0) {
        worker_main(&s); /* no thread could start: do the work here */
    } else {
        pthread_mutex_lock(&s.mu);
        while (s.finished < s.n_jobs && s.err.status == FERRY_OK) {
            pthread_cond_wait(&s.cv, &s.mu);
            if (progress && progress->fn && s.done != progress->done) {
                progress->done = s.done;
                uint64_t done = s.done, total = progress->total;
                const char *what = s.what ? s.what : path;
                pthread_mutex_unlock(&s.mu);
                progress->fn(progress->user, done, total, what);
                pthread_mutex_lock(&s.mu);
            }
        }
        pthread_mutex_unlock(&s.mu);
        for (int i = 0; i < started; i++)
            pthread_join(tid[i], NULL);
    }
    /* the constants, already in memory: one write each */
    for (size_t i = 0; i < n && s.err.status == FERRY_OK; i++)
        if (items[i].bytes && items[i].offset[W_PART_DATA] != WS_UNPLACED) {
            fy_err e = {0};
            if (put(&s, NULL, items[i].bytes, (size_t)items[i].nbytes,
                    items[i].offset[W_PART_DATA], &e) != FERRY_OK)
                s.err = e;
            else
                s.done += items[i].nbytes;
        }
    if (progress) {
        if (s.err.status == FERRY_OK)
            ws_note_found(progress, items, n, s.found, &s.err);
        bool changed = progress->done != s.done;
        progress->done = s.done;
        /* the last report, which the loop above may not have made (the constants, or work
         * that finished between two waits) */
        if (progress->fn && changed && s.err.status == FERRY_OK)
            progress->fn(progress->user, s.done, progress->total, path);
    }
    if (s.err.status == FERRY_OK)
        dw_flush(&s.out, &s.err);
    ferry_status st = s.err.status;
    if (st != FERRY_OK)
        fy_fail(err, st, "%s", s.err.msg);
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
    dw_close(&s.out);
    free(s.jobs);
    free(s.views);
    free(s.found);
    return st;
}
