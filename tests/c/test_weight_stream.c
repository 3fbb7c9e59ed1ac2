/* test_weight_stream.c — the weight stream reads tensors with pread: bytes land where they
 * belong whichever way they travel (same filesystem, another filesystem; large bands written
 * past the page cache, small ones through it), and a checkpoint that shrinks after it was
 * opened is an error naming it, on every path. */
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

#include "ir/weights.h"
#include "store/stream.h"
#include "model/safetensors.h"
#include "util/dtype.h"

#include "scratch.h"

enum { ROWS = 300, COLS = 7000 };   /* 8.4 MB of F32: several pages, one band */

static int make_tmp(void **state)
{
    (void)state;
    return scratch_make("ws");
}

/* A safetensors file at `path` holding "w", F32 [ROWS, COLS] with w[r][c] = r * COLS + c, after
 * a header of odd length (so the tensor starts at an odd offset). Returns the open file. */
static st_file *write_checkpoint(const char *path)
{
    char header[160];
    int n = snprintf(header, sizeof header,
                     "{\"w\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[0,%d]}}",
                     ROWS, COLS, ROWS * COLS * 4);
    if (n % 2 == 0)
        header[n++] = ' ';
    header[n] = '\0';
    float *values = malloc((size_t)ROWS * COLS * sizeof *values);
    assert_non_null(values);
    for (size_t i = 0; i < (size_t)ROWS * COLS; i++)
        values[i] = (float)i;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t len = (uint64_t)n;
    assert_int_equal(fwrite(&len, 8, 1, f), 1);   /* little-endian host */
    assert_int_equal(fwrite(header, 1, (size_t)n, f), (size_t)n);
    assert_int_equal(fwrite(values, sizeof *values, (size_t)ROWS * COLS, f),
                     (size_t)ROWS * COLS);
    assert_int_equal(fclose(f), 0);
    free(values);
    st_file *st = NULL;
    fy_err err = {0};
    if (st_open(path, &st, &err) != FERRY_OK)
        fail_msg("%s", err.msg);
    return st;
}

/* Band sizes (elements): the default (one band of 8.4 MB, written directly where the
 * filesystem takes O_DIRECT), and bands of 128 KiB, below direct.c's threshold (written
 * through the page cache). */
static const size_t BANDS[] = {0, 32768};
#define N_BANDS (sizeof BANDS / sizeof BANDS[0])
/* Where the tensor goes in the output: at 0, and 100 bytes into its second page (a direct write
 * from memory aligned as the file is, its head through the cache). */
static const uint64_t PLACES[] = {0, 4196};
static uint64_t place;

/* Streams `w` into a new file `out` at offset 0 in bands of `band` elements; returns the
 * status, message in err. */
static ferry_status stream(const g_weight *w, const char *out, size_t band, fy_err *err)
{
    int fd = open(out, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    ws_item item = {.w = *w, .offset = {place, WS_UNPLACED, WS_UNPLACED}};
    ferry_status st = ws_write(fd, out, &item, 1, 2, band, NULL, NULL, err);
    close(fd);
    return st;
}

/* `t` as `dtype`, stored transposed or not. */
static g_weight recipe(const st_tensor *t, ferry_dtype dtype, bool transpose)
{
    g_weight w = w_plain(t, dtype);
    w.transpose = transpose;
    return w;
}

static float *read_floats(const char *path, size_t n)
{
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)place, SEEK_SET), 0);
    assert_int_equal(fread(v, sizeof *v, n, f), n);
    assert_int_equal(fclose(f), 0);
    return v;
}

/* Same dtype, untransposed: a file-to-file copy; transposed and converted: through the
 * buffers. Each output is checked value by value. */
static void check_outputs_in_bands(const st_tensor *t, const char *out_dir, size_t band)
{
    char out[512];
    fy_err err = {0};
    size_t n = (size_t)ROWS * COLS;

    snprintf(out, sizeof out, "%s/plain.bin", out_dir);
    g_weight plain = recipe(t, FERRY_F32, false);
    if (stream(&plain, out, band, &err) != FERRY_OK)
        fail_msg("plain copy: %s", err.msg);
    float *v = read_floats(out, n);
    for (size_t i = 0; i < n; i++)
        if (v[i] != (float)i)
            fail_msg("plain copy: element %zu is %g", i, (double)v[i]);
    free(v);

    snprintf(out, sizeof out, "%s/transposed.bin", out_dir);
    g_weight tr = recipe(t, FERRY_F32, true);
    if (stream(&tr, out, band, &err) != FERRY_OK)
        fail_msg("transpose: %s", err.msg);
    v = read_floats(out, n);
    for (size_t c = 0; c < COLS; c++)
        for (size_t r = 0; r < ROWS; r++)
            if (v[c * ROWS + r] != (float)(r * COLS + c))
                fail_msg("transpose: [%zu][%zu] is %g", c, r, (double)v[c * ROWS + r]);
    free(v);

    snprintf(out, sizeof out, "%s/bf16.bin", out_dir);
    g_weight narrow = recipe(t, FERRY_BF16, false);
    if (stream(&narrow, out, band, &err) != FERRY_OK)
        fail_msg("bf16: %s", err.msg);
    uint16_t *h = (uint16_t *)read_floats(out, n / 2);
    for (size_t i = 0; i < n; i += 997)
        assert_int_equal(h[i], dt_f32_to_bf16((float)i));
    free(h);
}

static void check_outputs(const st_tensor *t, const char *out_dir)
{
    for (size_t at = 0; at < sizeof PLACES / sizeof PLACES[0]; at++)
        for (size_t b = 0; b < N_BANDS; b++) {
            place = PLACES[at];
            check_outputs_in_bands(t, out_dir, BANDS[b]);
        }
    place = 0;
}

static void test_copies_same_filesystem(void **state)
{
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/m.safetensors", tmp_dir);
    st_file *f = write_checkpoint(path);
    check_outputs(st_find(f, "w"), tmp_dir);
    st_close(f);
}

/* Output on another filesystem than the checkpoint (tmpfs takes no O_DIRECT: every band goes
 * through the page cache). /dev/shm is a tmpfs on Linux; skipped where it is missing or the
 * same filesystem as the scratch directory. */
static void test_copies_across_filesystems(void **state)
{
    (void)state;
    char path[256], other[] = "/dev/shm/ferry-test-ws-XXXXXX";
    struct stat a, b;
    if (stat(tmp_dir, &a) != 0 || stat("/dev/shm", &b) != 0 || a.st_dev == b.st_dev ||
        !mkdtemp(other)) {
        skip();
        return;
    }
    snprintf(path, sizeof path, "%s/m.safetensors", tmp_dir);
    st_file *f = write_checkpoint(path);
    check_outputs(st_find(f, "w"), other);
    st_close(f);
    assert_int_equal(fs_remove_tree(other), 0);
}

/* The checkpoint shrinks after st_open: every way the stream reads the tensor reports it. */
static void test_truncated_checkpoint(void **state)
{
    (void)state;
    char path[256], out[256];
    snprintf(path, sizeof path, "%s/m.safetensors", tmp_dir);
    snprintf(out, sizeof out, "%s/out.bin", tmp_dir);
    st_file *f = write_checkpoint(path);
    const st_tensor *t = st_find(f, "w");
    uint64_t keep = st_file_offset(t) + 5000;
    assert_int_equal(truncate(path, (off_t)keep), 0);
    char needle[128];
    snprintf(needle, sizeof needle, "needs bytes [%llu, %llu), the file now has %llu",
             (unsigned long long)st_file_offset(t),
             (unsigned long long)(st_file_offset(t) + (uint64_t)ROWS * COLS * 4),
             (unsigned long long)keep);
    const g_weight cases[] = {
        recipe(t, FERRY_F32, false),   /* copied: direct, or through the cache */
        recipe(t, FERRY_F32, true),    /* pread, transpose */
        recipe(t, FERRY_F16, false),   /* pread, convert */
        recipe(t, FERRY_BF16, true),   /* pread, convert, transpose */
    };
    for (size_t b = 0; b < N_BANDS; b++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            fy_err err = {0};
            ferry_status st = stream(&cases[i], out, BANDS[b], &err);
            if (st != FERRY_ERR_IO || !strstr(err.msg, path) ||
                !strstr(err.msg, "truncated while exporting (tensor 'w'"))
                fail_msg("bands %zu, case %zu: status %d, message: %s", BANDS[b], i, st,
                         err.msg);
            /* the whole tensor's range where one band reads it all */
            if (BANDS[b] == 0 && !strstr(err.msg, needle))
                fail_msg("case %zu: message: %s", i, err.msg);
        }
    st_close(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_copies_same_filesystem, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_copies_across_filesystems, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_truncated_checkpoint, make_tmp, remove_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
