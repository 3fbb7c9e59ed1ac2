/* test_safetensors.c — safetensors files and checkpoint directories: what valid files yield,
 * and one refusal, naming file and tensor, for each way a header or index can be wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "util/dtype.h"

static char tmp_dir[64];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

static int make_tmp(void **state)
{
    (void)state;
    strcpy(tmp_dir, "/tmp/ferry-test-st-XXXXXX");
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static int remove_tmp(void **state)
{
    (void)state;
    return nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
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
    assert_memory_equal(st_data(t), f32, 24);

    float out[4];
    t = st_find(f, "b.f16");
    assert_int_equal(t->dtype, FERRY_F16);
    assert_int_equal(dt_convert(out, FERRY_F32, st_data(t), FERRY_F16, 4), 0);
    assert_true(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0.5f && out[3] == 65504.0f);
    t = st_find(f, "c.bf16");
    assert_int_equal(t->dtype, FERRY_BF16);
    assert_int_equal(dt_convert(out, FERRY_F32, st_data(t), FERRY_BF16, 4), 0);
    assert_true(out[0] == 1.0f && out[1] == -1.0f && out[2] == 3.0f && out[3] == 0.0f);
    t = st_find(f, "d.i64");
    assert_int_equal(t->dtype, FERRY_I64);
    assert_memory_equal(st_data(t), i64, 24);
    t = st_find(f, "e.bool");
    assert_int_equal(t->dtype, FERRY_BOOL);
    assert_int_equal(t->end - t->begin, 5);
    assert_memory_equal(st_data(t), flags, 5);
    t = st_find(f, "f.scalar");
    assert_int_equal(t->ndim, 0);
    assert_int_equal(t->numel, 1);
    assert_memory_equal(st_data(t), &scalar, 4);
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

static void test_release_keeps_data_readable(void **state)
{
    (void)state;
    enum { N = 5000 };   /* several pages of floats, starting off a page boundary */
    float *values = malloc(N * sizeof *values);
    assert_non_null(values);
    for (int i = 0; i < N; i++)
        values[i] = (float)i * 0.5f;
    char header[160];
    snprintf(header, sizeof header,
             "{\"w\": {\"dtype\": \"F32\", \"shape\": [%d], \"data_offsets\": [0, %d]}}", N,
             N * 4);
    write_st("r.safetensors", header, values, N * sizeof *values);

    char path[256];
    st_file *f = NULL;
    fy_err err = {0};
    assert_int_equal(st_open(in_tmp(path, sizeof path, "r.safetensors"), &f, &err), FERRY_OK);
    const st_tensor *t = st_find(f, "w");
    assert_memory_equal(st_data(t), values, N * 4);
    st_release(t, 0, N * 4);
    assert_memory_equal(st_data(t), values, N * 4);   /* paged back in from the file */
    st_release(t, 100, 9000);
    st_release(t, N * 4, 10);                          /* past the end: nothing */
    st_release(t, 8, UINT64_MAX);                      /* clipped, no overflow */
    st_release(t, UINT64_MAX, UINT64_MAX);
    st_release(t, 0, 0);
    assert_memory_equal(st_data(t), values, N * 4);
    st_close(f);
    free(values);
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
        {"control byte in name is quoted", "{\"x\ny\": {\"dtype\": \"F32\"}}", 4,
         FERRY_ERR_FORMAT, "tensor 'x\\x0ay': key 'shape' is missing"},
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
    memcpy(&v, st_data(norm), 4);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_mixed_dtypes, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_empty_tensors_and_header, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_release_keeps_data_readable, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_header_length_errors, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_header_content_errors, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_checkpoint_single, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_checkpoint_sharded, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_checkpoint_errors, make_tmp, remove_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
