/* test_weights.c — weight recipes run through the weight stream: each transform (convert,
 * transpose, join along rows or columns, stack, [in, out] sources, N-D sources and flatten,
 * row range and permutation, offset, block quantization) compared byte for byte with the
 * same transform done here by plain loops, with tiny bands and several worker threads so
 * banding, transposed strips and concurrency are exercised; and the recipes a validation must
 * refuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/ir.h"
#include "ir/weights.h"
#include "quant/rtn.h"
#include "store/stream.h"
#include "util/dtype.h"

#include "scratch.h"

/* The checkpoint: a [4, 6] and a [2, 6] bf16 matrix, a [4, 3] bf16 matrix, a [10] f16 vector,
 * a [3, 32] f32 matrix; then a conv-like f32 [3, 2, 4], matrices stored [in, out] (f32 [6, 4]
 * and [6, 2]) and five f16 "experts" [2, 32]; values i * 0.25 - 3 (exact in every type the
 * tensor has). */
static st_file *ckpt_file;
static float values[4 * 6 + 2 * 6 + 4 * 3 + 10 + 3 * 32 + 24 + 24 + 12 + 5 * 64];

static const struct {
    const char *name, *dtype;
    int rows, cols, depth; /* cols 0: a vector of `rows`; depth: a third dim */
} TENSORS[] = {
    {"a", "BF16", 4, 6, 0}, {"b", "BF16", 2, 6, 0}, {"c", "BF16", 4, 3, 0},
    {"n", "F16", 10, 0, 0}, {"q", "F32", 3, 32, 0}, {"k", "F32", 3, 2, 4},
    {"t", "F32", 6, 4, 0}, {"t2", "F32", 6, 2, 0}, {"e0", "F16", 2, 32, 0},
    {"e1", "F16", 2, 32, 0}, {"e2", "F16", 2, 32, 0}, {"e3", "F16", 2, 32, 0},
    {"e4", "F16", 2, 32, 0},
};
#define N_TENSORS 13

static int setup(void **state)
{
    (void)state;
    if (scratch_make("weights") != 0)
        return -1;
    char header[2048], path[256];
    size_t hl = 0, off = 0, vi = 0;
    uint8_t data[8192];
    hl += (size_t)snprintf(header + hl, sizeof header - hl, "{");
    for (int t = 0; t < N_TENSORS; t++) {
        int n = TENSORS[t].rows * (TENSORS[t].cols ? TENSORS[t].cols : 1) *
                (TENSORS[t].depth ? TENSORS[t].depth : 1);
        size_t esz = strcmp(TENSORS[t].dtype, "F32") == 0 ? 4 : 2;
        for (int i = 0; i < n; i++, vi++) {
            float v = (float)vi * 0.25f - 3.0f;
            values[vi] = v;
            if (esz == 4) {
                memcpy(data + off + 4 * (size_t)i, &v, 4);
            } else {
                uint16_t h = strcmp(TENSORS[t].dtype, "F16") == 0 ? dt_f32_to_f16(v)
                                                                  : dt_f32_to_bf16(v);
                memcpy(data + off + 2 * (size_t)i, &h, 2);
            }
        }
        char shape[32];
        if (TENSORS[t].depth)
            snprintf(shape, sizeof shape, "[%d, %d, %d]", TENSORS[t].rows, TENSORS[t].cols,
                     TENSORS[t].depth);
        else if (TENSORS[t].cols)
            snprintf(shape, sizeof shape, "[%d, %d]", TENSORS[t].rows, TENSORS[t].cols);
        else
            snprintf(shape, sizeof shape, "[%d]", TENSORS[t].rows);
        hl += (size_t)snprintf(header + hl, sizeof header - hl,
                               "%s\"%s\": {\"dtype\": \"%s\", \"shape\": %s, "
                               "\"data_offsets\": [%zu, %zu]}", t ? ", " : "", TENSORS[t].name,
                               TENSORS[t].dtype, shape, off, off + (size_t)n * esz);
        off += (size_t)n * esz;
    }
    hl += (size_t)snprintf(header + hl, sizeof header - hl, "}");
    while (hl % 8)
        header[hl++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", tmp_dir);
    FILE *f = fopen(path, "wb");
    uint64_t n64 = hl;
    if (!f || fwrite(&n64, 8, 1, f) != 1 || fwrite(header, 1, hl, f) != hl ||
        fwrite(data, 1, off, f) != off || fclose(f) != 0)
        return -1;
    fy_err err = {0};
    return st_open(path, &ckpt_file, &err) == FERRY_OK ? 0 : -1;
}

static int teardown(void **state)
{
    st_close(ckpt_file);
    return remove_tmp(state);
}

static const st_tensor *tensor(const char *name)
{
    return st_find(ckpt_file, name);
}

/* Values of tensor `name` (row-major) as the test stored them. */
static const float *src_values(const char *name)
{
    size_t at = 0;
    for (int t = 0; t < N_TENSORS; t++) {
        if (strcmp(TENSORS[t].name, name) == 0)
            return values + at;
        at += (size_t)TENSORS[t].rows * (size_t)(TENSORS[t].cols ? TENSORS[t].cols : 1) *
              (size_t)(TENSORS[t].depth ? TENSORS[t].depth : 1);
    }
    return NULL;
}

/* Runs the recipes through the stream into a file and reads the file back. */
static uint8_t *stream(const ws_item *items, size_t n, size_t band, int threads, size_t size)
{
    char path[256];
    snprintf(path, sizeof path, "%s/out.bin", tmp_dir);
    unlink(path);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
    assert_true(fd >= 0);
    fy_err err = {0};
    ws_progress pr = {0};
    ferry_status st = ws_write(fd, path, items, n, threads, band, &pr, NULL, &err);
    if (st != FERRY_OK)
        fail_msg("ws_write: %s", err.msg);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += ws_item_bytes(&items[i]);
    assert_int_equal(pr.done, total);
    uint8_t *buf = calloc(1, size);
    assert_int_equal(ftruncate(fd, (off_t)size), 0); /* gaps read as zeros */
    assert_int_equal(pread(fd, buf, size, 0), (ssize_t)size);
    close(fd);
    return buf;
}

static float f32_at(const uint8_t *p, size_t i)
{
    float v;
    memcpy(&v, p + 4 * i, 4);
    return v;
}

/* Part `part` of `w` is `nbytes` bytes of `dt` whose rows are `cols` long. */
static void expect_part(const g_weight *w, w_part part, ferry_dtype dt, uint64_t nbytes,
                        int64_t cols)
{
    int rank;
    int64_t shape[W_MAX_RANK];
    ferry_dtype got_dt;
    uint64_t got_bytes;
    w_part_info(w, part, &rank, shape, &got_dt, &got_bytes);
    assert_int_equal(got_dt, dt);
    assert_int_equal(got_bytes, nbytes);
    assert_int_equal(shape[1], cols);
}

static ws_item item(g_weight w, uint64_t offset)
{
    ws_item it = {.w = w, .offset = {offset, WS_UNPLACED, WS_UNPLACED}};
    return it;
}

static void convert_transpose_join(void **state)
{
    (void)state;
    /* 1. a -> f32; 2. a transposed -> f32 [6, 4]; 3. rows of a then b, rows [2:5] -> [3, 6];
     * 4. a and c side by side -> [4, 9]; 5. n + 1 -> f32; 6. a -> f16 transposed */
    g_weight w1 = w_plain(tensor("a"), FERRY_F32);
    g_weight w2 = w1;
    w2.transpose = true;
    g_weight w3 = w1;
    w3.src[1] = tensor("b");
    w3.n_src = 2;
    w3.row_begin = 2;
    w3.row_end = 5;
    g_weight w4 = w1;
    w4.src[1] = tensor("c");
    w4.n_src = 2;
    w4.concat_axis = 1;
    g_weight w5 = w_plain(tensor("n"), FERRY_F32);
    w5.offset = 1.0;
    g_weight w6 = w2;
    w6.dtype = FERRY_F16;
    int rank;
    int64_t shape[W_MAX_RANK];
    fy_err err = {0};
    assert_int_equal(w_check(&w3, &rank, shape, &err), FERRY_OK);
    assert_int_equal(shape[0], 3);
    assert_int_equal(w_check(&w4, &rank, shape, &err), FERRY_OK);
    assert_int_equal(shape[1], 9);
    assert_int_equal(w_check(&w2, &rank, shape, &err), FERRY_OK);
    assert_true(shape[0] == 6 && shape[1] == 4);
    ws_item items[6] = {item(w1, 0), item(w2, 96), item(w3, 192), item(w4, 264), item(w5, 408),
                        item(w6, 448)};
    const float *a = src_values("a"), *b = src_values("b"), *c = src_values("c");
    const float *nv = src_values("n");
    /* band sizes: whole tensors, one row, and five elements (strips and 1-D chunks) */
    const size_t bands[3] = {0, 6, 5};
    for (int bi = 0; bi < 3; bi++)
        for (int threads = 1; threads <= 3; threads += 2) {
            uint8_t *out = stream(items, 6, bands[bi], threads, 496);
            for (int r = 0; r < 4; r++)
                for (int k = 0; k < 6; k++) {
                    assert_true(f32_at(out, (size_t)(r * 6 + k)) == a[r * 6 + k]);
                    assert_true(f32_at(out + 96, (size_t)(k * 4 + r)) == a[r * 6 + k]);
                    uint16_t h;
                    memcpy(&h, out + 448 + 2 * (size_t)(k * 4 + r), 2);
                    assert_true(dt_f16_to_f32(h) == a[r * 6 + k]);
                }
            for (int r = 0; r < 3; r++)
                for (int k = 0; k < 6; k++) {
                    int jr = r + 2; /* rows of a (0..3) then b (4..5) */
                    float want = jr < 4 ? a[jr * 6 + k] : b[(jr - 4) * 6 + k];
                    assert_true(f32_at(out + 192, (size_t)(r * 6 + k)) == want);
                }
            for (int r = 0; r < 4; r++)
                for (int k = 0; k < 9; k++) {
                    float want = k < 6 ? a[r * 6 + k] : c[r * 3 + k - 6];
                    assert_true(f32_at(out + 264, (size_t)(r * 9 + k)) == want);
                }
            for (int i = 0; i < 10; i++)
                assert_true(f32_at(out + 408, (size_t)i) == nv[i] + 1.0f);
            free(out);
        }
}

static void quantized(void **state)
{
    (void)state;
    const float *q = src_values("q");
    for (int sym = 0; sym < 2; sym++) {
        g_weight w = w_plain(tensor("q"), FERRY_F16);
        w.quant = (w_quant){.bits = 4, .block = 16, .symmetric = sym};
        ws_item it = {.w = w, .offset = {0, 64, sym ? WS_UNPLACED : 256}};
        assert_int_equal(w_n_parts(&w), sym ? 2 : 3);
        expect_part(&w, W_PART_CODES, FERRY_U4, 48, 32);
        expect_part(&w, W_PART_SCALES, FERRY_F16, 12, 2);
        expect_part(&w, W_PART_ZEROS, FERRY_U4, 3, 2);
        uint8_t want_codes[48], want_scales[12], want_zeros[3];
        rtn_quantize(q, 3, 32, 4, 16, sym, FERRY_F16, want_codes, want_scales,
                     sym ? NULL : want_zeros);
        uint8_t *out = stream(&it, 1, 32, 2, 260);
        assert_memory_equal(out, want_codes, 48);
        assert_memory_equal(out + 64, want_scales, 12);
        if (!sym)
            assert_memory_equal(out + 256, want_zeros, 3);
        free(out);
    }
}

/* A symmetric weight with explicit zeros (DequantizeLinear's zero-point tensor) writes every
 * zero point as the mid code, packed contiguously over the whole tensor even when a row holds
 * an odd number of 4-bit blocks (3 rows x 1 block: 3 nibbles in 2 bytes), whatever the bands;
 * and a joined recipe (packed q/k/v) quantizes the stacked rows as one matrix. */
static void quantized_explicit_zeros_and_joined(void **state)
{
    (void)state;
    const float *q = src_values("q");
    g_weight w = w_plain(tensor("q"), FERRY_F32);
    w.quant = (w_quant){.bits = 4, .block = 32, .symmetric = true,
                        .packing = W_PACK_CONTIGUOUS};
    assert_int_equal(w_n_parts(&w), 3);
    expect_part(&w, W_PART_ZEROS, FERRY_U4, 2, 1);
    uint8_t want_codes[48], want_scales[12];
    rtn_quantize(q, 3, 32, 4, 32, 1, FERRY_F32, want_codes, want_scales, NULL);
    for (int band = 32; band <= 96; band += 64) { /* one row a band, then all rows */
        ws_item it = {.w = w, .offset = {0, 64, 128}};
        uint8_t *out = stream(&it, 1, (size_t)band, 2, 136);
        assert_memory_equal(out, want_codes, 48);
        assert_memory_equal(out + 64, want_scales, 12);
        assert_int_equal(out[128], 0x88);
        assert_int_equal(out[129], 0x88);
        assert_int_equal(out[130], 0);          /* nothing past the part */
        free(out);
    }
    g_weight j = w_plain(tensor("q"), FERRY_F32);
    j.src[1] = tensor("q");
    j.n_src = 2;
    j.quant = (w_quant){.bits = 8, .block = 16, .symmetric = false};
    float stacked[6 * 32];
    memcpy(stacked, q, sizeof(float) * 96);
    memcpy(stacked + 96, q, sizeof(float) * 96);
    uint8_t jc[192], jz[12];
    float js[12];
    rtn_quantize(stacked, 6, 32, 8, 16, 0, FERRY_F32, jc, js, jz);
    ws_item it = {.w = j, .offset = {0, 256, 320}};
    uint8_t *out = stream(&it, 1, 32, 2, 332);
    assert_memory_equal(out, jc, 192);
    assert_memory_equal(out + 256, js, 48);
    assert_memory_equal(out + 320, jz, 12);
    free(out);
}

/* Asymmetric int4 zero points packed across rows (W_PACK_CONTIGUOUS, DequantizeLinear's uint4
 * tensor) where a row holds an odd number of blocks (3 rows x 1 block: 3 nibbles in 2 bytes,
 * the third row's in the second byte's low nibble), whatever the bands: bands of one row are
 * made two rows, so that no byte is shared by two bands. */
static void quantized_zeros_packed_across_rows(void **state)
{
    (void)state;
    const float *q = src_values("q");
    g_weight w = w_plain(tensor("q"), FERRY_F32);
    w.quant = (w_quant){.bits = 4, .block = 32, .symmetric = false,
                        .packing = W_PACK_CONTIGUOUS};
    expect_part(&w, W_PART_ZEROS, FERRY_U4, 2, 1);
    uint8_t want_codes[48], want_scales[12], row_zeros[3];
    rtn_quantize(q, 3, 32, 4, 32, 0, FERRY_F32, want_codes, want_scales, row_zeros);
    uint8_t packed[2] = {(uint8_t)((row_zeros[0] & 0x0f) | (row_zeros[1] & 0x0f) << 4),
                         (uint8_t)(row_zeros[2] & 0x0f)};
    for (int band = 32; band <= 96; band += 64) { /* one row a band (made two), then all */
        ws_item it = {.w = w, .offset = {0, 64, 128}};
        uint8_t *out = stream(&it, 1, (size_t)band, 2, 136);
        assert_memory_equal(out, want_codes, 48);
        assert_memory_equal(out + 64, want_scales, 12);
        assert_memory_equal(out + 128, packed, 2);
        assert_int_equal(out[130], 0);          /* nothing past the part */
        free(out);
    }
}

/* Rows shorter than a block (32 of 64): the one short block is quantized over its 32 values;
 * unpadded code rows hold 32 codes, W_PACK_PAD_BLOCKS rows a whole block with the zero code
 * after. */
static void quantized_short_block(void **state)
{
    (void)state;
    const float *q = src_values("q");
    uint8_t want_codes[48], want_scales[12];
    rtn_quantize(q, 3, 32, 4, 64, 1, FERRY_F32, want_codes, want_scales, NULL);
    for (int pad = 0; pad < 2; pad++) {
        g_weight w = w_plain(tensor("q"), FERRY_F32);
        w.quant = (w_quant){.bits = 4, .block = 64, .symmetric = true,
                            .packing = pad ? W_PACK_PAD_BLOCKS : W_PACK_ROWS};
        expect_part(&w, W_PART_CODES, FERRY_U4, pad ? 96 : 48, pad ? 64 : 32);
        expect_part(&w, W_PART_SCALES, FERRY_F32, 12, 1);
        ws_item it = {.w = w, .offset = {0, 128, WS_UNPLACED}};
        uint8_t *out = stream(&it, 1, 32, 2, 140);
        for (int r = 0; r < 3; r++) {
            const uint8_t *row = out + (size_t)r * (pad ? 32 : 16);
            assert_memory_equal(row, want_codes + 16 * r, 16);
            for (int k = 16; pad && k < 32; k++)
                assert_int_equal(row[k], 0x88);
        }
        assert_memory_equal(out + 128, want_scales, 12);
        free(out);
    }
}

static const char *const EXPERTS[5] = {"e0", "e1", "e2", "e3", "e4"};

/* Five experts [2, 32] stacked: [5, 2, 32], the rows of each after the other's, converted
 * (f16 -> f32) and, quantized, each expert's rows blocked as those of one matrix: codes
 * [5, 2, 32], scales [5, 2, 2]. More sources than a recipe holds inline: the list is read
 * through w_src, and a graph keeps its own copy of it. */
static void stacked_experts(void **state)
{
    (void)state;
    const st_tensor *list[5];
    for (int e = 0; e < 5; e++)
        list[e] = tensor(EXPERTS[e]);
    g_weight w = w_join(list, 5, true, FERRY_F32);
    int rank;
    int64_t shape[W_MAX_RANK];
    fy_err err = {0};
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_OK);
    assert_int_equal(rank, 3);
    assert_true(shape[0] == 5 && shape[1] == 2 && shape[2] == 32);
    const float *e0 = src_values("e0"); /* the experts lie one after the other */
    for (int bi = 0; bi < 3; bi++) {
        const size_t bands[3] = {0, 32, 96}; /* whole, a row, rows across two experts */
        ws_item it = item(w, 0);
        uint8_t *out = stream(&it, 1, bands[bi], 3, 5 * 64 * 4);
        for (int i = 0; i < 5 * 64; i++)
            assert_true(f32_at(out, (size_t)i) == e0[i]);
        free(out);
    }
    g_weight q = w_join(list, 5, true, FERRY_F16);
    q.quant = (w_quant){.bits = 4, .block = 16, .symmetric = false};
    int64_t codes_shape[W_MAX_RANK];
    ferry_dtype dt;
    uint64_t nbytes;
    w_part_info(&q, W_PART_CODES, &rank, codes_shape, &dt, &nbytes);
    assert_true(rank == 3 && codes_shape[0] == 5 && codes_shape[2] == 32 && nbytes == 160);
    w_part_info(&q, W_PART_SCALES, &rank, codes_shape, &dt, &nbytes);
    assert_true(rank == 3 && codes_shape[1] == 2 && codes_shape[2] == 2 && nbytes == 40);
    uint8_t want_codes[160], want_scales[40], want_zeros[10];
    rtn_quantize(e0, 10, 32, 4, 16, 0, FERRY_F16, want_codes, want_scales, want_zeros);
    ws_item it = {.w = q, .offset = {0, 256, 320}};
    uint8_t *out = stream(&it, 1, 64, 2, 336);
    assert_memory_equal(out, want_codes, 160);
    assert_memory_equal(out + 256, want_scales, 40);
    assert_memory_equal(out + 320, want_zeros, 10);
    free(out);
    /* a graph keeps its own copy of the list: the builder's may go */
    g_graph *g = g_new();
    const st_tensor *scratch[5];
    memcpy(scratch, list, sizeof list);
    g_weight s = w_join(scratch, 5, true, FERRY_F32);
    int v = g_weight_value(g, "experts", &s);
    assert_int_not_equal(v, G_NONE);
    memset(scratch, 0, sizeof scratch);
    for (int e = 0; e < 5; e++)
        assert_ptr_equal(w_src(&g->values[v].weight, e), list[e]);
    s = w_join(list, 5, true, FERRY_F32);
    assert_int_equal(g_weight_value(g, "again", &s), v); /* the same recipe is one value */
    g_free(g);
}

/* Each expert's gate and up joined, as transformers' gate_up_proj: sources g0, u0, g1, u1
 * stacked in groups of two are [2, 4, 32], the same bytes as the plain stack of four; with the
 * rows interleaved within each expert's 4 (onnxruntime's fused swiglu: gate i at 2i, up i at
 * 2i + 1) every row comes from its own source. A group that does not divide the sources, or
 * a group without a stack, is refused. */
static void grouped_stack(void **state)
{
    (void)state;
    const st_tensor *list[4];
    for (int e = 0; e < 4; e++)
        list[e] = tensor(EXPERTS[e]);
    g_weight w = w_join(list, 4, true, FERRY_F32);
    w.stack_group = 2;
    int rank;
    int64_t shape[W_MAX_RANK];
    fy_err err = {0};
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_OK);
    assert_true(rank == 3 && shape[0] == 2 && shape[1] == 4 && shape[2] == 32);
    const float *e0 = src_values("e0");
    ws_item it = item(w, 0);
    uint8_t *out = stream(&it, 1, 64, 2, 4 * 64 * 4);
    for (int i = 0; i < 4 * 64; i++)
        assert_true(f32_at(out, (size_t)i) == e0[i]);
    free(out);
    w.perm = W_PERM_INTERLEAVE_HALVES;
    w.perm_group = 4;
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_OK);
    it = item(w, 0);
    out = stream(&it, 1, 32, 2, 4 * 64 * 4);
    /* rows of the plain stack: g0 0-1, u0 2-3, g1 4-5, u1 6-7 */
    const int from[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    for (int r = 0; r < 8; r++)
        for (int k = 0; k < 32; k++)
            assert_true(f32_at(out, (size_t)(r * 32 + k)) == e0[from[r] * 32 + k]);
    free(out);
    w = w_join(list, 3, true, FERRY_F32);
    w.stack_group = 2;
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_INTERNAL);
    w = w_join(list, 4, false, FERRY_F32);
    w.stack_group = 2;
    err = (fy_err){0};
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_INTERNAL);
}

/* A 3-D source [3, 2, 4] keeps its shape and bytes; flattened it is the matrix [3, 8], which
 * may be stored transposed [8, 3] like any matrix. */
static void nd_and_flatten(void **state)
{
    (void)state;
    const float *k = src_values("k");
    g_weight w = w_plain(tensor("k"), FERRY_F16);
    int rank;
    int64_t shape[W_MAX_RANK];
    fy_err err = {0};
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_OK);
    assert_true(rank == 3 && shape[0] == 3 && shape[1] == 2 && shape[2] == 4);
    g_weight f = w_plain(tensor("k"), FERRY_F32);
    f.flatten = true;
    f.transpose = true;
    assert_int_equal(w_check(&f, &rank, shape, &err), FERRY_OK);
    assert_true(rank == 2 && shape[0] == 8 && shape[1] == 3);
    ws_item items[2] = {item(w, 0), item(f, 64)};
    for (int band = 0; band <= 8; band += 8) {
        uint8_t *out = stream(items, 2, (size_t)band, 2, 160);
        for (int r = 0; r < 3; r++)
            for (int c = 0; c < 8; c++) {
                uint16_t h;
                memcpy(&h, out + 2 * (size_t)(r * 8 + c), 2);
                assert_true(dt_f16_to_f32(h) == k[r * 8 + c]);
                assert_true(f32_at(out + 64, (size_t)(c * 3 + r)) == k[r * 8 + c]);
            }
        free(out);
    }
}

/* Sources stored [in, out] (GPT-2's Conv1D): the logical [out, in] matrix is their transpose,
 * alone or joined along rows (t's columns, then t2's); stored [in, out] again, the sources'
 * bytes as they lie (side by side for the join); quantized, the rows of the transpose. */
static void stored_in_out(void **state)
{
    (void)state;
    const float *t = src_values("t"), *t2 = src_values("t2");
    g_weight w = w_plain(tensor("t"), FERRY_F32);
    w.src_transposed = true;
    int rank;
    int64_t shape[W_MAX_RANK];
    fy_err err = {0};
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_OK);
    assert_true(rank == 2 && shape[0] == 4 && shape[1] == 6);
    g_weight back = w;
    back.transpose = true;
    g_weight j = w;
    j.src[1] = tensor("t2");
    j.n_src = 2; /* logical rows: t's 4 columns, then t2's 2 */
    assert_int_equal(w_check(&j, &rank, shape, &err), FERRY_OK);
    assert_true(shape[0] == 6 && shape[1] == 6);
    g_weight jback = j;
    jback.transpose = true;
    g_weight h = w;
    h.dtype = FERRY_F16;
    ws_item items[5] = {item(w, 0), item(back, 96), item(j, 192), item(jback, 336),
                        item(h, 480)};
    const size_t bands[3] = {0, 6, 12};
    for (int bi = 0; bi < 3; bi++)
        for (int threads = 1; threads <= 3; threads += 2) {
            uint8_t *out = stream(items, 5, bands[bi], threads, 528);
            for (int i = 0; i < 6; i++)
                for (int o = 0; o < 4; o++) {
                    assert_true(f32_at(out, (size_t)(o * 6 + i)) == t[i * 4 + o]);
                    assert_true(f32_at(out + 96, (size_t)(i * 4 + o)) == t[i * 4 + o]);
                    uint16_t hv;
                    memcpy(&hv, out + 480 + 2 * (size_t)(o * 6 + i), 2);
                    assert_true(dt_f16_to_f32(hv) == t[i * 4 + o]);
                }
            for (int i = 0; i < 6; i++)
                for (int o = 0; o < 6; o++) {
                    float want = o < 4 ? t[i * 4 + o] : t2[i * 2 + o - 4];
                    assert_true(f32_at(out + 192, (size_t)(o * 6 + i)) == want);
                    assert_true(f32_at(out + 336, (size_t)(i * 6 + o)) == want);
                }
            free(out);
        }
    float logical[4 * 6];
    for (int i = 0; i < 6; i++)
        for (int o = 0; o < 4; o++)
            logical[o * 6 + i] = t[i * 4 + o];
    g_weight q = w;
    q.quant = (w_quant){.bits = 8, .block = 16, .symmetric = true};
    uint8_t want_codes[24], want_scales[16];
    rtn_quantize(logical, 4, 6, 8, 16, 1, FERRY_F32, want_codes, want_scales, NULL);
    ws_item it = {.w = q, .offset = {0, 64, WS_UNPLACED}};
    uint8_t *out = stream(&it, 1, 6, 2, 80);
    assert_memory_equal(out, want_codes, 24);
    assert_memory_equal(out + 64, want_scales, 16);
    free(out);
}

/* Rows reordered within groups of 4: interleaving the halves takes rows 0, 2, 1, 3 of a;
 * splitting them is its inverse, which takes the same rows here (a group of 4 is its own
 * inverse), so both are checked on a joined [6, 6] (a then b) in groups of 6 too. */
static void permuted_rows(void **state)
{
    (void)state;
    const float *a = src_values("a"), *b = src_values("b");
    g_weight w = w_plain(tensor("a"), FERRY_F32);
    w.perm = W_PERM_INTERLEAVE_HALVES;
    w.perm_group = 4;
    g_weight j = w_plain(tensor("a"), FERRY_F32);
    j.src[1] = tensor("b");
    j.n_src = 2;
    j.perm_group = 6;
    g_weight ji = j, js = j;
    ji.perm = W_PERM_INTERLEAVE_HALVES;
    js.perm = W_PERM_SPLIT_HALVES;
    const int interleave6[6] = {0, 3, 1, 4, 2, 5}, split6[6] = {0, 2, 4, 1, 3, 5};
    ws_item items[3] = {item(w, 0), item(ji, 96), item(js, 240)};
    for (int band = 0; band <= 6; band += 6) {
        uint8_t *out = stream(items, 3, (size_t)band, 2, 384);
        const int order4[4] = {0, 2, 1, 3};
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 6; c++)
                assert_true(f32_at(out, (size_t)(r * 6 + c)) == a[order4[r] * 6 + c]);
        for (int r = 0; r < 6; r++)
            for (int c = 0; c < 6; c++) {
                int si = interleave6[r], ss = split6[r];
                float wi = si < 4 ? a[si * 6 + c] : b[(si - 4) * 6 + c];
                float ws = ss < 4 ? a[ss * 6 + c] : b[(ss - 4) * 6 + c];
                assert_true(f32_at(out + 96, (size_t)(r * 6 + c)) == wi);
                assert_true(f32_at(out + 240, (size_t)(r * 6 + c)) == ws);
            }
        free(out);
    }
}

static void refused_recipes(void **state)
{
    (void)state;
    int rank;
    int64_t shape[W_MAX_RANK];
    fy_err err = {0};
    g_weight w = w_plain(tensor("c"), FERRY_F32); /* [4, 3]: 4-bit rows of odd length */
    w.quant = (w_quant){.bits = 4, .block = 32};
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "4-bit rows need an even length"));
    fy_err_clear(&err);
    w = w_plain(tensor("a"), FERRY_F32);
    w.src[1] = tensor("n");
    w.n_src = 2;
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "cannot be joined"));
    fy_err_clear(&err);
    w = w_plain(tensor("a"), FERRY_F32);
    w.src[1] = tensor("c");
    w.n_src = 2; /* [4, 6] and [4, 3] along rows */
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "'a' and 'c'"));
    fy_err_clear(&err);
    w = w_plain(tensor("a"), FERRY_F32);
    w.row_begin = 3;
    w.row_end = 9;
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_INTERNAL);
    fy_err_clear(&err);
    w = w_plain(tensor("n"), FERRY_F32);
    w.transpose = true;
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_INTERNAL);
    fy_err_clear(&err);
    w = w_plain(tensor("a"), FERRY_F32);
    w.row_begin = 2; /* a range without its end */
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_INTERNAL);
    assert_non_null(strstr(err.msg, "needs its end"));
    fy_err_clear(&err);
    w = w_plain(tensor("n"), FERRY_F32);
    w.offset = NAN;
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_INTERNAL);
    fy_err_clear(&err);
    w = w_plain(tensor("q"), FERRY_F32);
    w.quant = (w_quant){.bits = 4, .block = 512};
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_UNSUPPORTED);
    fy_err_clear(&err);
    w = w_plain(tensor("a"), FERRY_F32); /* a flatten takes an N-D source */
    w.flatten = true;
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_INTERNAL);
    fy_err_clear(&err);
    w = w_plain(tensor("k"), FERRY_F32); /* an [in, out] layout is of matrices */
    w.src_transposed = true;
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_INTERNAL);
    fy_err_clear(&err);
    w = w_plain(tensor("t"), FERRY_F32);
    w.src_transposed = true;
    w.perm = W_PERM_SPLIT_HALVES;
    w.perm_group = 2;
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_INTERNAL);
    fy_err_clear(&err);
    w = w_plain(tensor("a"), FERRY_F32); /* 4 rows are not whole groups of 3 (nor is 3 even) */
    w.perm = W_PERM_INTERLEAVE_HALVES;
    w.perm_group = 3;
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_INTERNAL);
    fy_err_clear(&err);
    const st_tensor *mixed[2] = {tensor("e0"), tensor("q")}; /* f16 [2, 32], f32 [3, 32] */
    w = w_join(mixed, 2, true, FERRY_F32);
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_UNSUPPORTED);
    fy_err_clear(&err);
    const st_tensor *shapes[2] = {tensor("a"), tensor("b")}; /* [4, 6] and [2, 6] */
    w = w_join(shapes, 2, true, FERRY_F32);
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "cannot be stacked"));
    fy_err_clear(&err);
    w.transpose = true; /* a stack is stored as it is */
    shapes[1] = tensor("a");
    w = w_join(shapes, 2, true, FERRY_F32);
    w.transpose = true;
    assert_int_equal(w_check(&w, &rank, shape, &err), FERRY_ERR_INTERNAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(convert_transpose_join),
        cmocka_unit_test(quantized),
        cmocka_unit_test(quantized_explicit_zeros_and_joined),
        cmocka_unit_test(quantized_short_block),
        cmocka_unit_test(quantized_zeros_packed_across_rows),
        cmocka_unit_test(stacked_experts),
        cmocka_unit_test(grouped_stack),
        cmocka_unit_test(nd_and_flatten),
        cmocka_unit_test(stored_in_out),
        cmocka_unit_test(permuted_rows),
        cmocka_unit_test(refused_recipes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
