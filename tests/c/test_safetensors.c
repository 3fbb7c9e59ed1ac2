/* test_safetensors.c — safetensors files and checkpoint directories: what valid files yield,
 * and one refusal, naming file and tensor, for each way a header or index can be wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "util/dtype.h"

#include "scratch.h"


static int make_tmp(void **state)
{
    (void)state;
    return scratch_make("st");
}


static const char *in_tmp(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", tmp_dir, name);
    return buf;
}

static void write_bytes(FILE *f, const void *data, size_t len)
{
    if (len)
        assert_int_equal(fwrite(data, 1, len, f), len);
}

/* A file whose first 8 bytes claim `claimed_len`, followed by `header` and `data_len` bytes of
 * `data` (zeros when data is NULL). */
static void write_raw(const char *name, uint64_t claimed_len, const char *header,
                      const void *data, size_t data_len)
{
    char path[256];
    uint8_t len_bytes[8];
    FILE *f = fopen(in_tmp(path, sizeof path, name), "wb");
    assert_non_null(f);
    for (int i = 0; i < 8; i++)
        len_bytes[i] = (uint8_t)(claimed_len >> (8 * i));
    write_bytes(f, len_bytes, 8);
    write_bytes(f, header, strlen(header));
    void *zeros = data ? NULL : calloc(data_len ? data_len : 1, 1);
    write_bytes(f, data ? data : zeros, data_len);
    free(zeros);
    assert_int_equal(fclose(f), 0);
}

static void write_st(const char *name, const char *header, const void *data, size_t data_len)
{
    write_raw(name, strlen(header), header, data, data_len);
}

static void write_text(const char *name, const char *text)
{
    char path[256];
    FILE *f = fopen(in_tmp(path, sizeof path, name), "wb");
    assert_non_null(f);
    write_bytes(f, text, strlen(text));
    assert_int_equal(fclose(f), 0);
}

#define assert_msg_has(err, needle)                                                            \
    do {                                                                                       \
        if (!strstr((err).msg, (needle)))                                                      \
            fail_msg("message \"%s\" does not mention \"%s\"", (err).msg, (needle));          \
    } while (0)

/* Opens `name` in the temp dir, expecting failure with `status` and a message naming the file
 * and `needle`. */
static void expect_st_error(const char *label, const char *name, ferry_status status,
                            const char *needle)
{
    char path[256];
    st_file *f = (st_file *)&f;
    fy_err err = {0};
    ferry_status got = st_open(in_tmp(path, sizeof path, name), &f, &err);
    if (got != status)
        fail_msg("%s: status %d, expected %d (message: %s)", label, got, status, err.msg);
    assert_null(f);
    assert_int_equal(err.status, status);
    if (!strstr(err.msg, path) || !strstr(err.msg, needle))
        fail_msg("%s: message \"%s\" does not name the file and \"%s\"", label, err.msg, needle);
    if (strchr(err.msg, '\n'))
        fail_msg("%s: message spans lines: %s", label, err.msg);
}

/* The tensor's bytes, read with st_read into a buffer the caller frees. */
static uint8_t *read_all(const st_tensor *t)
{
    fy_err err = {0};
    uint8_t *buf = malloc(t->end - t->begin + 1);
    assert_non_null(buf);
    if (st_read(t, 0, buf, (size_t)(t->end - t->begin), &err) != FERRY_OK)
        fail_msg("st_read %s: %s", t->name, err.msg);
    return buf;
}

#define assert_tensor_bytes(t, expected, n)                                                    \
    do {                                                                                       \
        uint8_t *got_ = read_all(t);                                                           \
        assert_memory_equal(got_, (expected), (n));                                            \
        free(got_);                                                                            \
    } while (0)

static void test_open_mixed_dtypes(void **state)
{
    (void)state;
    uint8_t data[73] = {0};
    float f32[6] = {0, 1, 2, 3, 4, 5};
    uint16_t f16[4] = {0x3C00, 0xC000, 0x3800, 0x7BFF};      /* 1, -2, 0.5, 65504 */
    uint16_t bf16[4] = {0x3F80, 0xBF80, 0x4040, 0x0000};     /* 1, -1, 3, 0 */
    int64_t i64[3] = {-1, 0, INT64_C(1) << 40};
    uint8_t flags[5] = {1, 0, 1, 1, 0};
    float scalar = 2.5f;
    memcpy(data, f32, 24);
    memcpy(data + 24, f16, 8);
    memcpy(data + 32, bf16, 8);
    memcpy(data + 40, i64, 24);
    memcpy(data + 64, flags, 5);
    memcpy(data + 69, &scalar, 4);   /* at an unaligned offset */
    write_st("m.safetensors",
             "{\"__metadata__\": {\"format\": \"pt\"},"
             " \"a.f32\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]},"
             " \"b.f16\": {\"dtype\": \"F16\", \"shape\": [4], \"data_offsets\": [24, 32]},"
             " \"c.bf16\": {\"dtype\": \"BF16\", \"shape\": [2, 2], \"data_offsets\": [32, 40]},"
             " \"d.i64\": {\"dtype\": \"I64\", \"shape\": [3], \"data_offsets\": [40, 64]},"
             " \"e.bool\": {\"dtype\": \"BOOL\", \"shape\": [5], \"data_offsets\": [64, 69]},"
             " \"g.empty\": {\"dtype\": \"F32\", \"shape\": [0, 4], \"data_offsets\": [73, 73]},"
             " \"f.scalar\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [69, 73]}}"
             "      ",
             data, sizeof data);

    char path[256];
    st_file *f = NULL;
    fy_err err = {0};
    assert_int_equal(st_open(in_tmp(path, sizeof path, "m.safetensors"), &f, &err), FERRY_OK);
    assert_int_equal(err.status, FERRY_OK);
    assert_int_equal(f->n_tensors, 7);
    assert_string_equal(f->path, path);
    for (size_t i = 1; i < f->n_tensors; i++)
        assert_true(strcmp(f->tensors[i - 1].name, f->tensors[i].name) < 0);
    assert_null(st_find(f, "__metadata__"));
    assert_null(st_find(f, "missing"));

    const st_tensor *t = st_find(f, "a.f32");
    assert_non_null(t);
    assert_int_equal(t->dtype, FERRY_F32);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->numel, 6);
    assert_ptr_equal(t->file, f);
    assert_tensor_bytes(t, f32, 24);

    float out[4];
    uint8_t *raw;
    t = st_find(f, "b.f16");
    assert_int_equal(t->dtype, FERRY_F16);
    raw = read_all(t);
    assert_int_equal(dt_convert(out, FERRY_F32, raw, FERRY_F16, 4), 0);
    free(raw);
    assert_true(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0.5f && out[3] == 65504.0f);
    t = st_find(f, "c.bf16");
    assert_int_equal(t->dtype, FERRY_BF16);
    raw = read_all(t);
    assert_int_equal(dt_convert(out, FERRY_F32, raw, FERRY_BF16, 4), 0);
    free(raw);
    assert_true(out[0] == 1.0f && out[1] == -1.0f && out[2] == 3.0f && out[3] == 0.0f);
    t = st_find(f, "d.i64");
    assert_int_equal(t->dtype, FERRY_I64);
    assert_tensor_bytes(t, i64, 24);
    t = st_find(f, "e.bool");
    assert_int_equal(t->dtype, FERRY_BOOL);
    assert_int_equal(t->end - t->begin, 5);
    assert_tensor_bytes(t, flags, 5);
    t = st_find(f, "f.scalar");
    assert_int_equal(t->ndim, 0);
    assert_int_equal(t->numel, 1);
    assert_int_equal(st_file_offset(t), f->data_start + 69);
    assert_tensor_bytes(t, &scalar, 4);
    t = st_find(f, "g.empty");
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->numel, 0);
    assert_int_equal(t->begin, t->end);
    st_close(f);
    st_close(NULL);
}

static void test_empty_tensors_and_header(void **state)
{
    (void)state;
    uint8_t data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    /* Zero-size tensors occupy no bytes, so one may sit inside another's range. */
    write_st("z.safetensors",
             "{\"a\": {\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [0, 8]},"
             " \"z\": {\"dtype\": \"F64\", \"shape\": [3, 0], \"data_offsets\": [4, 4]},"
             " \"y\": {\"dtype\": \"I8\", \"shape\": [0], \"data_offsets\": [8, 8]}}",
             data, sizeof data);
    write_st("none.safetensors", "{}", NULL, 0);
    write_st("meta.safetensors", "{\"__metadata__\": {}}", NULL, 0);

    char path[256];
    st_file *f = NULL;
    fy_err err = {0};
    assert_int_equal(st_open(in_tmp(path, sizeof path, "z.safetensors"), &f, &err), FERRY_OK);
    assert_int_equal(f->n_tensors, 3);
    assert_int_equal(st_find(f, "z")->numel, 0);
    st_close(f);
    assert_int_equal(st_open(in_tmp(path, sizeof path, "none.safetensors"), &f, &err), FERRY_OK);
    assert_int_equal(f->n_tensors, 0);
    assert_null(st_find(f, "a"));
    st_close(f);
    assert_int_equal(st_open(in_tmp(path, sizeof path, "meta.safetensors"), &f, &err), FERRY_OK);
    assert_int_equal(f->n_tensors, 0);
    st_close(f);
}

static void test_read_ranges_and_truncation(void **state)
{
    (void)state;
    enum { N = 5000 };   /* several pages of floats */
    float *values = malloc(N * sizeof *values);
    assert_non_null(values);
    for (int i = 0; i < N; i++)
        values[i] = (float)i * 0.5f;
    char header[200];
    snprintf(header, sizeof header,
             "{\"w\": {\"dtype\": \"F32\", \"shape\": [%d], \"data_offsets\": [0, %d]},"
             " \"x\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [0, 0]}}",
             N, N * 4);
    write_st("r.safetensors", header, values, N * sizeof *values);

    char path[256];
    st_file *f = NULL;
    fy_err err = {0};
    float part[10];
    assert_int_equal(st_open(in_tmp(path, sizeof path, "r.safetensors"), &f, &err), FERRY_OK);
    const st_tensor *t = st_find(f, "w");
    assert_tensor_bytes(t, values, N * 4);
    assert_int_equal(st_read(t, 4 * 100, part, sizeof part, &err), FERRY_OK);
    assert_memory_equal(part, values + 100, sizeof part);
    assert_int_equal(st_read(t, N * 4, part, 0, &err), FERRY_OK);          /* empty, at the end */
    assert_int_equal(st_read(st_find(f, "x"), 0, part, 0, &err), FERRY_OK);
    /* Outside the tensor: a caller's bug, refused without reading. */
    assert_int_equal(st_read(t, N * 4 - 4, part, 8, &err), FERRY_ERR_INTERNAL);
    fy_err_clear(&err);
    assert_int_equal(st_read(t, UINT64_MAX, part, 8, &err), FERRY_ERR_INTERNAL);
    fy_err_clear(&err);

    /* Another process truncates the file after it was opened: the read that runs short is an
     * error naming the file, the tensor, the bytes it needs and what is left. */
    assert_int_equal(truncate(path, (off_t)(f->data_start + 4000)), 0);
    assert_int_equal(st_read(t, 0, part, sizeof part, &err), FERRY_OK);     /* still there */
    assert_int_equal(st_read(t, 3996, part, 8, &err), FERRY_ERR_IO);
    assert_msg_has(err, path);
    assert_msg_has(err, "truncated while exporting");
    assert_msg_has(err, "tensor 'w'");
    char needle[96];
    snprintf(needle, sizeof needle, "needs bytes [%llu, %llu), the file now has %llu",
             (unsigned long long)f->data_start, (unsigned long long)f->data_start + N * 4,
             (unsigned long long)f->data_start + 4000);
    assert_msg_has(err, needle);
    fy_err_clear(&err);
    uint8_t *buf = malloc(N * 4);
    assert_non_null(buf);
    assert_int_equal(st_read(t, 0, buf, N * 4, &err), FERRY_ERR_IO);
    free(buf);
    st_close(f);
    free(values);
}

/* st_same_bytes: equal only with the same dtype, shape and every byte, including bytes past the
 * first comparison chunk (1 MiB). */
static void test_same_bytes(void **state)
{
    (void)state;
    enum { N = (1 << 20) / 2 + 3 };     /* 2 x N bytes of F16: a chunk and a bit */
    size_t n = 2 * (size_t)N;
    uint8_t *data = malloc(6 * n);
    assert_non_null(data);
    for (size_t i = 0; i < n; i++)
        data[i] = data[n + i] = data[2 * n + i] = data[3 * n + i] = data[4 * n + i] =
            data[5 * n + i] = (uint8_t)(i * 13 + 1);
    data[2 * n + n - 1] ^= 1;            /* c: the last byte differs */
    data[5 * n + 7] ^= 0x80;             /* f: an early byte differs */
    char header[1024];
    snprintf(header, sizeof header,
             "{\"a\": {\"dtype\": \"F16\", \"shape\": [%d], \"data_offsets\": [0, %zu]},"
             " \"b\": {\"dtype\": \"F16\", \"shape\": [%d], \"data_offsets\": [%zu, %zu]},"
             " \"c\": {\"dtype\": \"F16\", \"shape\": [%d], \"data_offsets\": [%zu, %zu]},"
             " \"d\": {\"dtype\": \"BF16\", \"shape\": [%d], \"data_offsets\": [%zu, %zu]},"
             " \"e\": {\"dtype\": \"F16\", \"shape\": [1, %d], \"data_offsets\": [%zu, %zu]},"
             " \"f\": {\"dtype\": \"F16\", \"shape\": [%d], \"data_offsets\": [%zu, %zu]}}",
             N, n, N, n, 2 * n, N, 2 * n, 3 * n, N, 3 * n, 4 * n, N, 4 * n, 5 * n, N, 5 * n,
             6 * n);
    write_st("s.safetensors", header, data, 6 * n);

    char path[256];
    st_file *f = NULL;
    fy_err err = {0};
    bool same = false;
    assert_int_equal(st_open(in_tmp(path, sizeof path, "s.safetensors"), &f, &err), FERRY_OK);
    const st_tensor *a = st_find(f, "a");
    assert_int_equal(st_same_bytes(a, st_find(f, "b"), &same, &err), FERRY_OK);
    assert_true(same);
    assert_int_equal(st_same_bytes(a, a, &same, &err), FERRY_OK);
    assert_true(same);
    const char *differ[] = {"c", "d", "e", "f"};   /* last byte, dtype, shape, early byte */
    for (size_t i = 0; i < 4; i++) {
        same = true;
        assert_int_equal(st_same_bytes(a, st_find(f, differ[i]), &same, &err), FERRY_OK);
        if (same)
            fail_msg("'a' and '%s' compared equal", differ[i]);
    }
    /* A file cut short while comparing is the truncation error, not "different". */
    assert_int_equal(truncate(path, (off_t)(f->data_start + n + n / 2)), 0);
    assert_int_equal(st_same_bytes(a, st_find(f, "b"), &same, &err), FERRY_ERR_IO);
    assert_false(same);
    assert_msg_has(err, "truncated while exporting");
    assert_msg_has(err, "tensor 'b'");
    st_close(f);
    free(data);
}

/* A file `total` bytes long holding one U8 tensor `tensor` over its data area, of which only
 * the first `stored` bytes are written; the rest is a hole left by extending the file. */
static void write_sparse_tensor(const char *name, const char *tensor, uint64_t total,
                                size_t stored)
{
    char path[256], header[128];
    int n = snprintf(header, sizeof header,
                     "{\"%s\":{\"dtype\":\"U8\",\"shape\":[%llu],\"data_offsets\":[0,%llu]}}",
                     tensor, (unsigned long long)(total - 104), (unsigned long long)(total - 104));
    assert_true(n < 96);
    memset(header + n, ' ', (size_t)(96 - n));   /* 8 + 96 bytes before the data */
    header[96] = '\0';
    uint8_t *block = malloc(stored ? stored : 1);
    assert_non_null(block);
    memset(block, 0x5a, stored);
    write_st(name, header, block, stored);
    free(block);
    assert_int_equal(truncate(in_tmp(path, sizeof path, name), (off_t)total), 0);
}

static void write_sparse(const char *name, uint64_t total, size_t stored)
{
    write_sparse_tensor(name, "x", total, stored);
}

static void test_sparse_files(void **state)
{
    (void)state;
    char path[256];
    st_file *f = NULL;
    fy_err err = {0};

    write_sparse("holes.safetensors", (uint64_t)128 << 20, 0);
    expect_st_error("all holes", "holes.safetensors", FERRY_ERR_UNSUPPORTED,
                    "a sparse file: 134217728 bytes long but only");
    write_sparse("sixteenth.safetensors", (uint64_t)128 << 20, (size_t)8 << 20);
    expect_st_error("1/16 stored", "sixteenth.safetensors", FERRY_ERR_UNSUPPORTED,
                    "less than 1/8 of their bytes stored");
    /* Above 1/8 stored, or at most 64 MiB long: a checkpoint like any other. */
    write_sparse("fifth.safetensors", (uint64_t)128 << 20, (size_t)26 << 20);
    assert_int_equal(st_open(in_tmp(path, sizeof path, "fifth.safetensors"), &f, &err), FERRY_OK);
    st_close(f);
    write_sparse("small.safetensors", (uint64_t)64 << 20, 0);
    assert_int_equal(st_open(in_tmp(path, sizeof path, "small.safetensors"), &f, &err), FERRY_OK);
    st_close(f);
}

static void expect_ckpt_error(const char *label, ferry_status status, const char *needle,
                              const char *needle2);

/* Four shards of 40 MiB, one tensor each, with `stored` bytes of each written. */
static void write_sparse_shards(size_t stored)
{
    char index[512] = "{\"weight_map\": {", shard[64], tensor[8];
    for (int i = 0; i < 4; i++) {
        snprintf(shard, sizeof shard, "model-0000%d-of-00004.safetensors", i + 1);
        snprintf(tensor, sizeof tensor, "t%d", i);
        write_sparse_tensor(shard, tensor, (uint64_t)40 << 20, stored);
        size_t used = strlen(index);
        snprintf(index + used, sizeof index - used, "%s\"%s\": \"%s\"", i ? ", " : "", tensor,
                 shard);
    }
    strcat(index, "}}");
    write_text("model.safetensors.index.json", index);
}

/* Each shard under 64 MiB passes st_open's own check; the checkpoint as a whole (160 MiB, 1/16
 * or nothing stored) is as sparse as one file refused above, and is refused the same way. */
static void test_sparse_shards(void **state)
{
    (void)state;
    ckpt *c = NULL;
    fy_err err = {0};

    write_sparse_shards(0);
    expect_ckpt_error("shards of holes", FERRY_ERR_UNSUPPORTED, tmp_dir,
                      "a sparse checkpoint: its 4 safetensors files are 167772160 bytes long but "
                      "only ");
    write_sparse_shards(((size_t)5 << 20) / 2);   /* 2.5 MiB of 40: 1/16 */
    expect_ckpt_error("1/16 stored", FERRY_ERR_UNSUPPORTED, tmp_dir,
                      "less than 1/8 of their bytes stored");
    write_sparse_shards((size_t)6 << 20);       /* 6 MiB of 40: above 1/8 */
    assert_int_equal(ckpt_open(tmp_dir, &c, &err), FERRY_OK);
    assert_int_equal(c->n_files, 4);
    ckpt_close(c);
}

static void test_header_length_errors(void **state)
{
    (void)state;
    char path[256];

    write_text("short.safetensors", "12345");
    expect_st_error("short", "short.safetensors", FERRY_ERR_FORMAT, "too short");
    write_raw("huge.safetensors", UINT64_MAX - 7, "{}", NULL, 0);
    expect_st_error("near 2^64", "huge.safetensors", FERRY_ERR_FORMAT, "runs past the end");
    write_raw("past.safetensors", 1000, "{}", NULL, 10);
    expect_st_error("past end", "past.safetensors", FERRY_ERR_FORMAT,
                    "header length 1000 runs past the end of the file (20 bytes)");
    write_raw("zero.safetensors", 0, "", NULL, 0);
    expect_st_error("zero header", "zero.safetensors", FERRY_ERR_FORMAT, "empty");
    expect_st_error("missing", "absent.safetensors", FERRY_ERR_IO, "cannot open");
    assert_int_equal(mkdir(in_tmp(path, sizeof path, "dir.safetensors"), 0700), 0);
    expect_st_error("directory", "dir.safetensors", FERRY_ERR_IO, "regular file");
    assert_int_equal(mkfifo(in_tmp(path, sizeof path, "fifo.safetensors"), 0600), 0);
    expect_st_error("fifo", "fifo.safetensors", FERRY_ERR_IO, "regular file");   /* no hang */

    /* Over the cap but inside the file: a sparse file, so the test stays cheap. */
    write_raw("cap.safetensors", ST_MAX_HEADER_BYTES + UINT64_C(1), "{}", NULL, 0);
    assert_int_equal(truncate(in_tmp(path, sizeof path, "cap.safetensors"),
                              (off_t)ST_MAX_HEADER_BYTES + 64), 0);
    expect_st_error("cap", "cap.safetensors", FERRY_ERR_FORMAT, "exceeds the limit");
}

static void test_header_content_errors(void **state)
{
    (void)state;
    static const struct {
        const char *label, *header;
        size_t data_len;
        ferry_status status;
        const char *needle;
    } cases[] = {
        {"invalid json", "{\"w\": ", 0, FERRY_ERR_FORMAT, "invalid JSON"},
        {"trailing data", "{} []", 0, FERRY_ERR_FORMAT, "after the JSON value"},
        {"not an object", "[1, 2]", 0, FERRY_ERR_FORMAT, "header is not a JSON object"},
        {"entry not an object", "{\"w\": 5}", 0, FERRY_ERR_FORMAT,
         "tensor 'w': expected an object"},
        {"unknown dtype",
         "{\"model.layers.0.q.weight\": {\"dtype\": \"F33\", \"shape\": [1], "
         "\"data_offsets\": [0, 4]}}", 4, FERRY_ERR_UNSUPPORTED,
         "tensor 'model.layers.0.q.weight' has dtype 'F33'"},
        {"dtype not a string",
         "{\"w\": {\"dtype\": 4, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         FERRY_ERR_FORMAT, "tensor 'w': key 'dtype' must be a string"},
        {"missing dtype", "{\"w\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         FERRY_ERR_FORMAT, "tensor 'w': key 'dtype' is missing"},
        {"repeated key in entry",
         "{\"w\": {\"dtype\": \"F32\", \"dtype\": \"F16\", \"shape\": [1], "
         "\"data_offsets\": [0, 4]}}", 4, FERRY_ERR_FORMAT,
         "tensor 'w': key 'dtype' appears more than once"},
        {"missing shape", "{\"w\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4,
         FERRY_ERR_FORMAT, "tensor 'w': key 'shape' is missing"},
        {"shape not an array",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}", 4,
         FERRY_ERR_FORMAT, "tensor 'w': 'shape' must be an array"},
        {"negative shape",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [2, -1], \"data_offsets\": [0, 4]}}", 4,
         FERRY_ERR_FORMAT, "tensor 'w': shape entry 1 is not a non-negative integer"},
        {"fractional shape",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4,
         FERRY_ERR_FORMAT, "tensor 'w': shape entry 0 is not a non-negative integer"},
        {"string shape",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [\"1\"], \"data_offsets\": [0, 4]}}", 4,
         FERRY_ERR_FORMAT, "tensor 'w': shape entry 0"},
        {"shape product overflow",
         "{\"w\": {\"dtype\": \"U8\", \"shape\": [4294967296, 4294967296, 2], "
         "\"data_offsets\": [0, 4]}}", 4, FERRY_ERR_FORMAT,
         "tensor 'w': the product of its shape overflows"},
        {"byte count overflow",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [2147483648, 2147483648], "
         "\"data_offsets\": [0, 4]}}", 4, FERRY_ERR_FORMAT,
         "tensor 'w': 4611686018427387904 elements of F32 overflow"},
        {"too many dims",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], "
         "\"data_offsets\": [0, 4]}}", 4, FERRY_ERR_UNSUPPORTED,
         "tensor 'w' has more than 8 dimensions"},
        {"byte length mismatch",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 8,
         FERRY_ERR_FORMAT, "tensor 'w': data_offsets span 4 bytes but 2 elements of F32 need 8"},
        {"offsets past the data",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [250], \"data_offsets\": [0, 1000]}}", 8,
         FERRY_ERR_FORMAT, "tensor 'w': data_offsets [0, 1000] are outside the data area"},
        {"offsets reversed",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 8,
         FERRY_ERR_FORMAT, "tensor 'w': data_offsets [8, 4] end before they begin"},
        {"offsets near 2^64",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], "
         "\"data_offsets\": [18446744073709551612, 18446744073709551616]}}", 8,
         FERRY_ERR_FORMAT, "tensor 'w': 'data_offsets' must be two non-negative integers"},
        {"one offset", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 8,
         FERRY_ERR_FORMAT, "tensor 'w': 'data_offsets' must be two"},
        {"negative offset",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 8,
         FERRY_ERR_FORMAT, "tensor 'w': 'data_offsets' must be two"},
        {"missing offsets", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}", 8,
         FERRY_ERR_FORMAT, "tensor 'w': key 'data_offsets' is missing"},
        {"overlap",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
         " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 12,
         FERRY_ERR_FORMAT, "tensors 'a' and 'b' overlap"},
        {"overlap inside",
         "{\"big\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
         " \"mid\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]},"
         " \"end\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [12, 16]}}", 16,
         FERRY_ERR_FORMAT, "tensors 'big' and 'mid' overlap"},
        {"duplicate name",
         "{\"model.layers.0.q.weight\": {\"dtype\": \"F32\", \"shape\": [1], "
         "\"data_offsets\": [0, 4]}, \"model.layers.0.q.weight\": {\"dtype\": \"F32\", "
         "\"shape\": [1], \"data_offsets\": [4, 8]}}", 8, FERRY_ERR_FORMAT,
         "tensor 'model.layers.0.q.weight' appears twice"},
        {"non-UTF-8 name",
         "{\"bad\xff\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         FERRY_ERR_FORMAT, "tensor name 'bad\\xff' is not valid UTF-8"},
        {"overlong UTF-8 name",
         "{\"a\xc0\xaf\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         FERRY_ERR_FORMAT, "tensor name 'a\\xc0\\xaf' is not valid UTF-8"},
        {"surrogate in name",
         "{\"s\xed\xa0\x80\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         FERRY_ERR_FORMAT, "is not valid UTF-8"},
        {"escaped NUL in name",
         "{\"a\\u0000b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         FERRY_ERR_FORMAT, "escaped NUL"},
        {"control byte in name is refused, quoted", "{\"x\\ny\": {\"dtype\": \"F32\"}}", 4,
         FERRY_ERR_FORMAT, "tensor name 'x\\x0ay' holds control characters"},
        {"DEL in name", "{\"x\\u007f\": {\"dtype\": \"F32\"}}", 4, FERRY_ERR_FORMAT,
         "tensor name 'x\\x7f' holds control characters"},
        {"metadata not UTF-8", "{\"__metadata__\": {\"k\": \"\xfe\"}}", 0, FERRY_ERR_FORMAT,
         "header is not valid UTF-8 at byte"},
        {"metadata not an object", "{\"__metadata__\": [1]}", 0, FERRY_ERR_FORMAT,
         "'__metadata__' must be a single object"},
        {"metadata twice", "{\"__metadata__\": {}, \"__metadata__\": {}}", 0, FERRY_ERR_FORMAT,
         "'__metadata__' must be a single object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_st("case.safetensors", cases[i].header, NULL, cases[i].data_len);
        expect_st_error(cases[i].label, "case.safetensors", cases[i].status, cases[i].needle);
    }
    /* UTF-8 names are fine, and are printed as they are. */
    write_st("utf8.safetensors",
             "{\"caf\xc3\xa9.\xf0\x9f\x98\x80\": {\"dtype\": \"F32\", \"shape\": [2], "
             "\"data_offsets\": [0, 4]}}", NULL, 4);
    expect_st_error("utf-8 name", "utf8.safetensors", FERRY_ERR_FORMAT,
                    "tensor 'caf\xc3\xa9.\xf0\x9f\x98\x80': data_offsets span 4 bytes");
}

/* Hostile headers beyond the field-by-field cases above: sizes that are claimed but not there,
 * nesting and bulk, numbers at the edges of 64 bits, bytes JSON forbids. Each is refused with
 * one line naming the file, without allocating what the header claims. */
static void test_hostile_headers(void **state)
{
    (void)state;
    char path[256];

    /* Header lengths at the top of the 64-bit range: never wrapped into a small one. */
    static const uint64_t huge[] = {UINT64_MAX, UINT64_MAX - 8, UINT64_C(1) << 63,
                                    (UINT64_C(1) << 63) - 1, UINT64_C(1) << 32};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        write_raw("len.safetensors", huge[i], "{}", NULL, 64);
        expect_st_error("huge header length", "len.safetensors", FERRY_ERR_FORMAT,
                        "runs past the end of the file (74 bytes)");
    }
    /* A length one past the real header: the parser must not read the byte after it. */
    write_raw("plus1.safetensors", 3, "{}", NULL, 0);
    expect_st_error("length one past the file", "plus1.safetensors", FERRY_ERR_FORMAT,
                    "header length 3 runs past the end of the file (10 bytes)");

    /* Nesting deeper than a header needs is refused before the parser recurses into it. */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 64);
    assert_non_null(deep);
    size_t o = (size_t)sprintf(deep, "{\"__metadata__\": ");
    memset(deep + o, '[', depth);
    memset(deep + o + depth, ']', depth);
    strcpy(deep + o + 2 * depth, "}");
    write_st("deep.safetensors", deep, NULL, 0);
    expect_st_error("nesting 100000 deep", "deep.safetensors", FERRY_ERR_FORMAT,
                    "nesting deeper than 32 levels (at byte 56) exceeds the limit");
    /* ...and nesting inside the limit (32 levels) is only as costly as its size. */
    depth = 30;
    o = (size_t)sprintf(deep, "{\"w\": {\"dtype\": \"F32\", \"shape\": ");
    memset(deep + o, '[', depth);
    memset(deep + o + depth, ']', depth);
    strcpy(deep + o + 2 * depth, ", \"data_offsets\": [0, 0]}}");
    write_st("deep2.safetensors", deep, NULL, 0);
    expect_st_error("shape nested 30 deep", "deep2.safetensors", FERRY_ERR_FORMAT,
                    "tensor 'w': shape entry 0 is not a non-negative integer");
    free(deep);

    /* A large real header (50,000 tensors, ~3.5 MB): accepted, memory proportional to it. */
    enum { N = 50000 };
    char *big = malloc((size_t)N * 100 + 16);
    assert_non_null(big);
    o = (size_t)sprintf(big, "{");
    for (int i = 0; i < N; i++)
        o += (size_t)sprintf(big + o, "%s\"model.layers.%d.w\": {\"dtype\": \"U8\", "
                             "\"shape\": [1], \"data_offsets\": [%d, %d]}", i ? "," : "", i, i,
                             i + 1);
    strcpy(big + o, "}");
    write_st("big.safetensors", big, NULL, N);
    st_file *f = NULL;
    fy_err err = {0};
    assert_int_equal(st_open(in_tmp(path, sizeof path, "big.safetensors"), &f, &err), FERRY_OK);
    assert_int_equal(f->n_tensors, N);
    assert_non_null(st_find(f, "model.layers.49999.w"));
    st_close(f);
    /* The same header with the last range pushed past the data: refused, naming the tensor. */
    big[o - 3] = '2';   /* [49999, 50000] -> [49999, 50002] */
    write_st("big.safetensors", big, NULL, N);
    expect_st_error("50000 tensors, last out of range", "big.safetensors", FERRY_ERR_FORMAT,
                    "tensor 'model.layers.49999.w': data_offsets [49999, 50002] are outside");
    free(big);

    static const struct {
        const char *label, *header;
        size_t data_len;
        ferry_status status;
        const char *needle;
    } cases[] = {
        /* Shapes whose product needs more than 64 bits, whatever comes after: the reference
         * implementation (checked_mul) refuses these too, even with a 0 extent at the end. */
        {"product overflow before a zero",
         "{\"w\": {\"dtype\": \"U8\", \"shape\": [4503599627370495, 4503599627370495, 0], "
         "\"data_offsets\": [0, 0]}}", 0, FERRY_ERR_FORMAT, "the product of its shape overflows"},
        {"product of eight large extents",
         "{\"w\": {\"dtype\": \"BF16\", \"shape\": [256, 256, 256, 256, 256, 256, 256, 256], "
         "\"data_offsets\": [0, 2]}}", 2, FERRY_ERR_FORMAT, "the product of its shape overflows"},
        {"byte count just over 2^64",
         "{\"w\": {\"dtype\": \"F64\", \"shape\": [2147483648, 1073741824], "
         "\"data_offsets\": [0, 8]}}", 8, FERRY_ERR_FORMAT,
         "2305843009213693952 elements of F64 overflow a 64-bit byte count"},
        {"extent at 2^53, past exact JSON integers",
         "{\"w\": {\"dtype\": \"U8\", \"shape\": [9007199254740992], "
         "\"data_offsets\": [0, 1]}}", 1, FERRY_ERR_FORMAT,
         "shape entry 0 is not a non-negative integer"},
        {"extent 1e300", "{\"w\": {\"dtype\": \"U8\", \"shape\": [1e300], "
         "\"data_offsets\": [0, 1]}}", 1, FERRY_ERR_FORMAT, "shape entry 0 is not"},
        {"claimed 1 TB tensor in a small file",
         "{\"w\": {\"dtype\": \"F32\", \"shape\": [262144, 1048576], "
         "\"data_offsets\": [0, 1099511627776]}}", 16, FERRY_ERR_FORMAT,
         "data_offsets [0, 1099511627776] are outside the data area (16 bytes)"},
        {"offsets as floats past 2^53",
         "{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1e19]}}", 1,
         FERRY_ERR_FORMAT, "'data_offsets' must be two non-negative integers"},
        {"three offsets",
         "{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1, 2]}}", 2,
         FERRY_ERR_FORMAT, "'data_offsets' must be two non-negative integers"},
        {"end one past the data",
         "{\"w\": {\"dtype\": \"U8\", \"shape\": [5], \"data_offsets\": [0, 5]}}", 4,
         FERRY_ERR_FORMAT, "data_offsets [0, 5] are outside the data area (4 bytes)"},
        {"same range twice",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
         " \"b\": {\"dtype\": \"I32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         FERRY_ERR_FORMAT, "tensors 'a' and 'b' overlap"},
        {"dtype says 2 bytes, shape and range say 4",
         "{\"w\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8,
         FERRY_ERR_FORMAT, "data_offsets span 8 bytes but 2 elements of F16 need 4"},
        {"long dtype", "{\"w\": {\"dtype\": \"F32F32F32F32F32F32F32F32F32F32F32F32F32F32F32F32"
         "F32F32F32F32F32F32F32F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         FERRY_ERR_FORMAT, "key 'dtype' is too long"},
        {"control bytes in dtype are quoted",
         "{\"w\": {\"dtype\": \"F3\\n2\\u001b[2J\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
         4, FERRY_ERR_UNSUPPORTED, "has dtype 'F3\\x0a2\\x1b[2J'"},
        {"raw newline inside a name",
         "{\"x\ny\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         FERRY_ERR_FORMAT, "raw control byte 0x0a in a string at byte 11"},
        {"raw tab inside metadata", "{\"__metadata__\": {\"k\": \"a\tb\"}}", 0, FERRY_ERR_FORMAT,
         "raw control byte 0x09 in a string"},
        {"duplicate names differing after an escaped NUL",
         "{\"w\\u0000a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]},"
         " \"w\\u0000b\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}", 2,
         FERRY_ERR_FORMAT, "escaped NUL"},
        {"duplicate names, one escaped",
         "{\"wa\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]},"
         " \"w\\u0061\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}", 2,
         FERRY_ERR_FORMAT, "tensor 'wa' appears twice"},
        {"lone surrogate escape in a name",
         "{\"w\\ud800\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1,
         FERRY_ERR_FORMAT, "invalid JSON"},
        {"only spaces", "        ", 0, FERRY_ERR_FORMAT, "invalid JSON"},
        {"a string, not an object", "\"{}\"", 0, FERRY_ERR_FORMAT, "header is not a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_st("case.safetensors", cases[i].header, NULL, cases[i].data_len);
        expect_st_error(cases[i].label, "case.safetensors", cases[i].status, cases[i].needle);
    }

    /* A raw NUL inside a name would silently cut it short in C. */
    static const char nul_name[] = "{\"a\0b\": {\"dtype\": \"U8\", \"shape\": [1], "
                                   "\"data_offsets\": [0, 1]}}";
    FILE *fp = fopen(in_tmp(path, sizeof path, "nul.safetensors"), "wb");
    assert_non_null(fp);
    uint64_t n = sizeof nul_name - 1;
    uint8_t len_bytes[8];
    for (int i = 0; i < 8; i++)
        len_bytes[i] = (uint8_t)(n >> (8 * i));
    write_bytes(fp, len_bytes, 8);
    write_bytes(fp, nul_name, sizeof nul_name - 1);
    write_bytes(fp, "x", 1);
    assert_int_equal(fclose(fp), 0);
    expect_st_error("raw NUL in a name", "nul.safetensors", FERRY_ERR_FORMAT,
                    "raw control byte 0x00 in a string at byte 11");

    /* A 5000-byte name: the message stays bounded and ends in "...". */
    char *long_header = malloc(6000);
    assert_non_null(long_header);
    o = (size_t)sprintf(long_header, "{\"");
    memset(long_header + o, 'n', 5000);
    strcpy(long_header + o + 5000,
           "\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}");
    write_st("longname.safetensors", long_header, NULL, 4);
    fy_err lerr = {0};
    f = NULL;
    assert_int_equal(st_open(in_tmp(path, sizeof path, "longname.safetensors"), &f, &lerr),
                     FERRY_ERR_FORMAT);
    assert_msg_has(lerr, "nnn...");
    assert_true(strlen(lerr.msg) < sizeof lerr.msg - 1);
    free(long_header);
}

/* ---- checkpoints -------------------------------------------------------------------------- */

/* A shard holding one F32 scalar per name, valued by its position. */
static void write_shard(const char *file, const char *const *names, size_t n)
{
    char header[2048];
    float values[16];
    size_t o = (size_t)snprintf(header, sizeof header, "{");
    assert_true(n <= 16);
    for (size_t i = 0; i < n; i++) {
        values[i] = (float)i + 1.0f;
        o += (size_t)snprintf(header + o, sizeof header - o,
                              "%s\"%s\": {\"dtype\": \"F32\", \"shape\": [], "
                              "\"data_offsets\": [%zu, %zu]}", i ? ", " : "", names[i], 4 * i,
                              4 * i + 4);
    }
    snprintf(header + o, sizeof header - o, "}");
    write_st(file, header, values, 4 * n);
}

static const char *const SHARD1[] = {"model.embed_tokens.weight", "model.layers.0.q.weight"};
static const char *const SHARD2[] = {"lm_head.weight", "model.norm.weight"};
static const char *const INDEX_OK =
    "{\"metadata\": {\"total_size\": 16}, \"weight_map\": {"
    "\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\","
    " \"model.layers.0.q.weight\": \"model-00001-of-00002.safetensors\","
    " \"lm_head.weight\": \"model-00002-of-00002.safetensors\","
    " \"model.norm.weight\": \"model-00002-of-00002.safetensors\"}}";

static void expect_ckpt_error(const char *label, ferry_status status, const char *needle,
                              const char *needle2)
{
    ckpt *c = (ckpt *)&c;
    fy_err err = {0};
    ferry_status got = ckpt_open(tmp_dir, &c, &err);
    if (got != status)
        fail_msg("%s: status %d, expected %d (message: %s)", label, got, status, err.msg);
    assert_null(c);
    if (!strstr(err.msg, needle) || (needle2 && !strstr(err.msg, needle2)))
        fail_msg("%s: message \"%s\" does not mention \"%s\" and \"%s\"", label, err.msg, needle,
                 needle2 ? needle2 : "");
}

static void test_checkpoint_single(void **state)
{
    (void)state;
    write_shard("model.safetensors", SHARD1, 2);
    ckpt *c = NULL;
    fy_err err = {0};
    assert_int_equal(ckpt_open(tmp_dir, &c, &err), FERRY_OK);
    assert_int_equal(c->n_files, 1);
    assert_int_equal(c->n_tensors, 2);
    assert_string_equal(c->dir, tmp_dir);
    const st_tensor *t = ckpt_find(c, "model.layers.0.q.weight");
    assert_non_null(t);
    assert_int_equal(c->used[1], 0);
    assert_ptr_equal(ckpt_take(c, "model.layers.0.q.weight"), t);
    assert_int_equal(c->used[1], 1);
    assert_int_equal(c->used[0], 0);
    assert_null(ckpt_find(c, "nope"));
    assert_null(ckpt_take(c, "nope"));
    ckpt_close(c);
    ckpt_close(NULL);
}

static void test_checkpoint_sharded(void **state)
{
    (void)state;
    write_shard("model-00001-of-00002.safetensors", SHARD1, 2);
    write_shard("model-00002-of-00002.safetensors", SHARD2, 2);
    write_text("model.safetensors.index.json", INDEX_OK);
    ckpt *c = NULL;
    fy_err err = {0};
    assert_int_equal(ckpt_open(tmp_dir, &c, &err), FERRY_OK);
    assert_int_equal(c->n_files, 2);
    assert_int_equal(c->n_tensors, 4);
    for (size_t i = 1; i < c->n_tensors; i++)
        assert_true(strcmp(c->by_name[i - 1]->name, c->by_name[i]->name) < 0);
    const st_tensor *norm = ckpt_find(c, "model.norm.weight");
    assert_non_null(norm);
    assert_non_null(strstr(norm->file->path, "model-00002-of-00002.safetensors"));
    float v;
    assert_int_equal(st_read(norm, 0, &v, 4, &err), FERRY_OK);
    assert_true(v == 2.0f);
    const st_tensor *q = ckpt_find(c, "model.layers.0.q.weight");
    assert_non_null(strstr(q->file->path, "model-00001-of-00002.safetensors"));
    ckpt_close(c);

    /* With both present, the single file wins, as in from_pretrained. */
    write_shard("model.safetensors", SHARD2, 1);
    assert_int_equal(ckpt_open(tmp_dir, &c, &err), FERRY_OK);
    assert_int_equal(c->n_tensors, 1);
    ckpt_close(c);
}

static void test_checkpoint_errors(void **state)
{
    (void)state;
    expect_ckpt_error("empty dir", FERRY_ERR_IO, tmp_dir, "no model.safetensors and no "
                      "model.safetensors.index.json");
    /* a Trainer's state beside the weights is not weights of another format */
    write_text("training_args.bin", "x");
    write_text("optimizer.pt", "x");
    expect_ckpt_error("trainer state alone", FERRY_ERR_IO, "no model.safetensors and no", NULL);
    /* weights ferry does not read: a line that converts them */
    write_text("pytorch_model.bin", "x");
    expect_ckpt_error("pytorch_model.bin", FERRY_ERR_UNSUPPORTED,
                      "holds PyTorch weights (pytorch_model.bin) and no safetensors",
                      "transformers.AutoModelForCausalLM.from_pretrained('");
    write_text("config.json", "{\"architectures\": [\"GPT2LMHeadModel\"]}");
    expect_ckpt_error("pytorch_model.bin with config", FERRY_ERR_UNSUPPORTED,
                      "transformers.GPT2LMHeadModel.from_pretrained(",
                      "save_pretrained('NEW_DIR', safe_serialization=True)");
    write_text("b.gguf", "x");
    write_text("a.gguf", "x");
    expect_ckpt_error("gguf", FERRY_ERR_UNSUPPORTED, "holds GGUF weights (a.gguf and 1 other GGUF "
                      "file) and no safetensors", "gguf_file='a.gguf').save_pretrained('NEW_DIR')");
    static const char *const others[] = {"training_args.bin", "optimizer.pt", "pytorch_model.bin",
                                         "config.json", "a.gguf", "b.gguf"};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", tmp_dir, others[i]);
        assert_int_equal(remove(path), 0);
    }

    write_shard("model-00001-of-00002.safetensors", SHARD1, 2);
    write_shard("model-00002-of-00002.safetensors", SHARD2, 2);
    static const struct { const char *label, *index; ferry_status status; const char *n1, *n2; }
    cases[] = {
        {"bad json", "{\"weight_map\": ", FERRY_ERR_FORMAT, "model.safetensors.index.json",
         "invalid JSON"},
        {"no weight_map", "{\"metadata\": {}}", FERRY_ERR_FORMAT, "model.safetensors.index.json",
         "key 'weight_map' is missing"},
        {"empty weight_map", "{\"weight_map\": {}}", FERRY_ERR_FORMAT, "index.json",
         "'weight_map' must be a non-empty object"},
        {"shard not a string", "{\"weight_map\": {\"lm_head.weight\": 3}}", FERRY_ERR_FORMAT,
         "lm_head.weight", "must be a file name string"},
        {"slash", "{\"weight_map\": {\"lm_head.weight\": \"sub/x.safetensors\"}}",
         FERRY_ERR_FORMAT, "lm_head.weight", "'sub/x.safetensors', which is not a plain file"},
        {"dotdot", "{\"weight_map\": {\"lm_head.weight\": \"..\"}}", FERRY_ERR_FORMAT,
         "lm_head.weight", "'..'"},
        {"escape", "{\"weight_map\": {\"lm_head.weight\": \"../../etc/passwd\"}}",
         FERRY_ERR_FORMAT, "lm_head.weight", "not a plain file name"},
        {"absolute", "{\"weight_map\": {\"lm_head.weight\": \"/etc/passwd\"}}",
         FERRY_ERR_FORMAT, "lm_head.weight", "not a plain file name"},
        {"hidden dotdot", "{\"weight_map\": {\"lm_head.weight\": \"a..safetensors\"}}",
         FERRY_ERR_FORMAT, "lm_head.weight", "not a plain file name"},
        {"control byte", "{\"weight_map\": {\"lm_head.weight\": \"a\\nb\"}}",
         FERRY_ERR_FORMAT, "'a\\x0ab', which is not a plain file name", NULL},
        {"missing shard", "{\"weight_map\": {\"lm_head.weight\": \"gone.safetensors\"}}",
         FERRY_ERR_IO, "index.json: tensor 'lm_head.weight' is mapped to ",
         "gone.safetensors: cannot open"},
        {"tensor not in shard",
         "{\"weight_map\": {\"model.layers.0.k.weight\": \"model-00001-of-00002.safetensors\"}}",
         FERRY_ERR_FORMAT, "tensor 'model.layers.0.k.weight' is mapped to "
         "model-00001-of-00002.safetensors, but that file does not hold it", NULL},
        {"tensor in the other shard",
         "{\"weight_map\": {\"model.norm.weight\": \"model-00002-of-00002.safetensors\","
         " \"lm_head.weight\": \"model-00001-of-00002.safetensors\"}}",
         FERRY_ERR_FORMAT, "tensor 'lm_head.weight' is mapped to "
         "model-00001-of-00002.safetensors", NULL},
        {"listed twice",
         "{\"weight_map\": {\"model.norm.weight\": \"model-00002-of-00002.safetensors\","
         " \"model.norm.weight\": \"model-00002-of-00002.safetensors\"}}",
         FERRY_ERR_FORMAT, "weight_map lists tensor 'model.norm.weight' twice", NULL},
        {"weight_map twice", "{\"weight_map\": {}, \"weight_map\": {}}", FERRY_ERR_FORMAT,
         "key 'weight_map' appears more than once", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text("model.safetensors.index.json", cases[i].index);
        expect_ckpt_error(cases[i].label, cases[i].status, cases[i].n1, cases[i].n2);
    }

    /* The same tensor in two shards. */
    static const char *const DUP[] = {"model.norm.weight"};
    write_shard("model-00003.safetensors", DUP, 1);
    write_text("model.safetensors.index.json",
               "{\"weight_map\": {\"model.norm.weight\": \"model-00002-of-00002.safetensors\","
               " \"lm_head.weight\": \"model-00002-of-00002.safetensors\","
               " \"model.layers.0.q.weight\": \"model-00003.safetensors\"}}");
    expect_ckpt_error("duplicate across shards", FERRY_ERR_FORMAT,
                      "tensor 'model.norm.weight' is in both", "model-00003.safetensors");

    /* A broken shard: its own error comes through, naming the shard and the tensor. */
    write_st("model-00004.safetensors",
             "{\"model.layers.1.q.weight\": {\"dtype\": \"F32\", \"shape\": [2], "
             "\"data_offsets\": [0, 4]}}", NULL, 4);
    write_text("model.safetensors.index.json",
               "{\"weight_map\": {\"model.layers.1.q.weight\": \"model-00004.safetensors\"}}");
    expect_ckpt_error("broken shard", FERRY_ERR_FORMAT, "model-00004.safetensors",
                      "model.layers.1.q.weight");
}

/* Index files that point elsewhere or at things that are not shards. */
static void test_hostile_index(void **state)
{
    (void)state;
    char path[256];
    write_shard("model-00001-of-00002.safetensors", SHARD1, 2);
    assert_int_equal(mkdir(in_tmp(path, sizeof path, "subdir"), 0700), 0);
    assert_int_equal(mkfifo(in_tmp(path, sizeof path, "pipe.safetensors"), 0600), 0);
    assert_int_equal(symlink("pipe.safetensors", in_tmp(path, sizeof path, "tofifo")), 0);
    assert_int_equal(symlink("/dev/zero", in_tmp(path, sizeof path, "zero.safetensors")), 0);
    static const struct { const char *label, *index; ferry_status status; const char *n1, *n2; }
    cases[] = {
        {"empty name", "{\"weight_map\": {\"lm_head.weight\": \"\"}}", FERRY_ERR_FORMAT,
         "'', which is not a plain file name", NULL},
        {"dot", "{\"weight_map\": {\"lm_head.weight\": \".\"}}", FERRY_ERR_FORMAT,
         "'.', which is not a plain file name", NULL},
        {"DEL in the name", "{\"weight_map\": {\"lm_head.weight\": \"a\\u007f\"}}",
         FERRY_ERR_FORMAT, "'a\\x7f', which is not a plain file name", NULL},
        {"escape sequence in the tensor name",
         "{\"weight_map\": {\"\\u001b[2J\": \"/etc/passwd\"}}", FERRY_ERR_FORMAT,
         "tensor '\\x1b[2J' is mapped to '/etc/passwd'", NULL},
        {"the index as its own shard",
         "{\"weight_map\": {\"lm_head.weight\": \"model.safetensors.index.json\"}}",
         FERRY_ERR_FORMAT, "model.safetensors.index.json: header length", "runs past the end"},
        {"a directory", "{\"weight_map\": {\"lm_head.weight\": \"subdir\"}}", FERRY_ERR_IO,
         "subdir: not a readable regular file", NULL},
        {"a FIFO through a link", "{\"weight_map\": {\"lm_head.weight\": \"tofifo\"}}",
         FERRY_ERR_IO, "tofifo: not a readable regular file", NULL},
        {"a device through a link",
         "{\"weight_map\": {\"lm_head.weight\": \"zero.safetensors\"}}", FERRY_ERR_IO,
         "zero.safetensors: not a readable regular file", NULL},
        {"weight_map an array", "{\"weight_map\": [\"a\"]}", FERRY_ERR_FORMAT,
         "'weight_map' must be a non-empty object", NULL},
        {"index an array", "[]", FERRY_ERR_FORMAT, "key 'weight_map' is missing", NULL},
        {"nested 100000 deep", NULL, FERRY_ERR_FORMAT, "nesting deeper than 32 levels", NULL},
    };
    char *deep = malloc(200100);
    assert_non_null(deep);
    size_t o = (size_t)sprintf(deep, "{\"metadata\": ");
    memset(deep + o, '[', 100000);
    memset(deep + o + 100000, ']', 100000);
    strcpy(deep + o + 200000, "}");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text("model.safetensors.index.json", cases[i].index ? cases[i].index : deep);
        expect_ckpt_error(cases[i].label, cases[i].status, cases[i].n1, cases[i].n2);
    }
    free(deep);

    /* 100,000 entries naming one shard that holds two of them: refused at the first stranger,
     * with the shard opened once. */
    char *big = malloc(100000 * 80 + 64);
    assert_non_null(big);
    o = (size_t)sprintf(big, "{\"weight_map\": {");
    for (int i = 0; i < 100000; i++)
        o += (size_t)sprintf(big + o, "%s\"model.layers.%d.w\": "
                             "\"model-00001-of-00002.safetensors\"", i ? ", " : "", i);
    strcpy(big + o, "}}");
    write_text("model.safetensors.index.json", big);
    expect_ckpt_error("100000 strangers", FERRY_ERR_FORMAT, "tensor 'model.layers.0.w' is mapped",
                      "but that file does not hold it");
    free(big);

    /* Over the 64 MB cap (sparse): refused from its size. */
    write_text("model.safetensors.index.json", "{}");
    assert_int_equal(truncate(in_tmp(path, sizeof path, "model.safetensors.index.json"),
                              (off_t)65 << 20), 0);
    expect_ckpt_error("65 MB index", FERRY_ERR_FORMAT, "model.safetensors.index.json",
                      "exceed the limit of 67108864");
    /* The index as a FIFO: refused at once. */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkfifo(path, 0600), 0);
    expect_ckpt_error("FIFO index", FERRY_ERR_IO, "model.safetensors.index.json",
                      "not a regular file");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_mixed_dtypes, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_empty_tensors_and_header, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_read_ranges_and_truncation, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_same_bytes, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_sparse_files, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_sparse_shards, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_header_length_errors, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_header_content_errors, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_hostile_headers, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_checkpoint_single, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_checkpoint_sharded, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_checkpoint_errors, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_hostile_index, make_tmp, remove_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
