/* test_cancel.c — a save asked to stop (ferry_export_config.cancel, what the CLI's signal
 * handler sets) stops: the weight stream takes no band once the flag is up, and
 * ferry_exported_save removes everything it wrote, leaves an existing export as it was, and
 * returns FERRY_ERR_CANCELLED; the same export then saves once the flag is down. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ferry.h"
#include "ir/weights.h"
#include "model/safetensors.h"
#include "store/stream.h"

#include "scratch.h"

#define FIXTURE "fixtures/tiny-llama"

static int make_tmp(void **state)
{
    (void)state;
    return scratch_make("cancel");
}

/* ---- the weight stream ---- */

typedef struct bands_seen {
    volatile int *cancel;
    int runs;                 /* runs written (observer) */
} bands_seen;

/* Raises the flag from inside the worker that has just written its first run. */
static void cancel_after_first(void *user, const void *data, size_t n, uint64_t offset)
{
    (void)data, (void)n, (void)offset;
    bands_seen *b = user;
    if (b->runs++ == 0)
        *b->cancel = 1;
}

/* The fixture's embedding table (F32 [512, 64]) as bf16, so that every band is converted and
 * written with pwrite (seen by the observer), in bands of one row: 512 bands. */
static ferry_status stream_embedding(volatile int *cancel, bands_seen *seen, uint64_t *done,
                                     fy_err *err)
{
    st_file *f = NULL;
    if (st_open(FIXTURE "/model.safetensors", &f, err) != FERRY_OK)
        fail_msg("%s", err->msg);
    const st_tensor *t = st_find(f, "model.embed_tokens.weight");
    assert_non_null(t);
    char out[256];
    snprintf(out, sizeof out, "%s/w.bin", tmp_dir);
    int fd = open(out, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    ws_item item = {.w = w_plain(t, FERRY_BF16), .offset = {0, WS_UNPLACED, WS_UNPLACED}};
    ws_progress pr = {.cancel = cancel};
    ws_observer obs = {cancel_after_first, seen};
    ferry_status st = ws_write(fd, out, &item, 1, 1, 64, &pr, seen ? &obs : NULL, err);
    *done = pr.done;
    close(fd);
    st_close(f);
    return st;
}

static void test_stream_cancelled_before_start(void **state)
{
    (void)state;
    volatile int cancel = 1;
    uint64_t done = 1;
    fy_err err = {0};
    assert_int_equal(stream_embedding(&cancel, NULL, &done, &err), FERRY_ERR_CANCELLED);
    assert_string_equal(err.msg, "interrupted");
    assert_int_equal(done, 0);
}

static void test_stream_cancelled_midway(void **state)
{
    (void)state;
    volatile int cancel = 0;
    bands_seen seen = {&cancel, 0};
    uint64_t done = 0;
    fy_err err = {0};
    assert_int_equal(stream_embedding(&cancel, &seen, &done, &err), FERRY_ERR_CANCELLED);
    /* one worker: the band that raised the flag is the last one written, of 512 */
    assert_int_equal(seen.runs, 1);
    assert_int_equal(done, 64 * 2);
}

static void test_stream_runs_whole_with_the_flag_down(void **state)
{
    (void)state;
    volatile int cancel = 0;
    uint64_t done = 0;
    fy_err err = {0};
    if (stream_embedding(&cancel, NULL, &done, &err) != FERRY_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(done, 512 * 64 * 2);
}

/* ---- ferry_exported_save ---- */

/* Entries of tmp_dir other than "." and "..", "|"-joined in readdir order after sorting. */
static void list_tmp(char *buf, size_t cap)
{
    struct dirent **names = NULL;
    int n = scandir(tmp_dir, &names, NULL, alphasort);
    assert_true(n >= 0);
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i]->d_name, ".") && strcmp(names[i]->d_name, "..")) {
            strncat(buf, names[i]->d_name, cap - strlen(buf) - 1);
            strncat(buf, "|", cap - strlen(buf) - 1);
        }
        free(names[i]);
    }
    free(names);
}

/* Raises the flag at the stream's last report: every weight is written, the graph, manifest
 * and config follow; the check just before the swap must still stop the save. */
static void cancel_when_written(void *user, uint64_t done, uint64_t total, const char *what)
{
    (void)what;
    if (done == total && total > 0)
        *(volatile int *)user = 1;
}

/* The fixture exported (dynamic ONNX) with `cancel` and, if not NULL, `progress` (given the
 * flag as its user pointer). */
static ferry_exported *export_tiny(ferry_model **m, volatile int *cancel,
                                   ferry_progress_fn progress)
{
    ferry_export_config cfg;
    ferry_export_config_init(&cfg);
    assert_null(cfg.cancel);
    cfg.dynamic = 1;
    cfg.cancel = cancel;
    cfg.progress = progress;
    cfg.progress_user = (void *)cancel;
    ferry_exported *e = NULL;
    if (ferry_model_open(FIXTURE, NULL, m) != FERRY_OK || ferry_export(*m, &cfg, &e) != FERRY_OK)
        fail_msg("%s", ferry_model_errmsg(*m));
    return e;
}

static void test_save_cancelled_before_start_then_saved(void **state)
{
    (void)state;
    volatile int cancel = 1;
    ferry_model *m = NULL;
    ferry_exported *e = export_tiny(&m, &cancel, NULL);
    char out[256], listing[512], want[300];
    snprintf(out, sizeof out, "%s/out", tmp_dir);
    assert_int_equal(ferry_exported_save(e, out, 0), FERRY_ERR_CANCELLED);
    snprintf(want, sizeof want, "export to %s interrupted: nothing was written", out);
    assert_string_equal(ferry_exported_errmsg(e), want);
    assert_string_equal(ferry_status_str(FERRY_ERR_CANCELLED), "cancelled");
    list_tmp(listing, sizeof listing);
    assert_string_equal(listing, "");
    cancel = 0; /* the same export, asked again */
    if (ferry_exported_save(e, out, 0) != FERRY_OK)
        fail_msg("%s", ferry_exported_errmsg(e));
    list_tmp(listing, sizeof listing);
    assert_string_equal(listing, "out|");
    ferry_exported_free(e);
    ferry_model_free(m);
}

static char *read_whole(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = malloc(1 << 20);
    assert_non_null(buf);
    *len = fread(buf, 1, 1 << 20, f);
    assert_true(feof(f)); /* the whole file: a longer one would be compared in part */
    fclose(f);
    return buf;
}

static void test_save_cancelled_after_the_weights_keeps_the_old_export(void **state)
{
    (void)state;
    volatile int cancel = 0;
    ferry_model *m = NULL;
    ferry_exported *e = export_tiny(&m, &cancel, NULL);
    char out[256], data[300], listing[512];
    snprintf(out, sizeof out, "%s/out", tmp_dir);
    snprintf(data, sizeof data, "%s/model.onnx.data", out);
    if (ferry_exported_save(e, out, 0) != FERRY_OK)
        fail_msg("%s", ferry_exported_errmsg(e));
    /* mark the old export's weights: a replaced file would lose the mark */
    int fd = open(data, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "OLD!", 4, 0), 4);
    close(fd);
    size_t before_len, after_len;
    char *before = read_whole(data, &before_len);

    ferry_exported_free(e);
    ferry_model_free(m);
    /* the export's progress raises the flag once the weights are all written */
    e = export_tiny(&m, &cancel, cancel_when_written);
    assert_int_equal(ferry_exported_save(e, out, 1), FERRY_ERR_CANCELLED);
    assert_true(cancel == 1);
    assert_non_null(strstr(ferry_exported_errmsg(e),
                           "interrupted: nothing was written; the export already there is "
                           "untouched"));
    char *after = read_whole(data, &after_len);
    assert_int_equal(before_len, after_len);
    assert_memory_equal(before, after, before_len);
    list_tmp(listing, sizeof listing);
    assert_string_equal(listing, "out|");
    free(before);
    free(after);
    ferry_exported_free(e);
    ferry_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stream_cancelled_before_start, make_tmp,
                                        remove_tmp),
        cmocka_unit_test_setup_teardown(test_stream_cancelled_midway, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_stream_runs_whole_with_the_flag_down, make_tmp,
                                        remove_tmp),
        cmocka_unit_test_setup_teardown(test_save_cancelled_before_start_then_saved, make_tmp,
                                        remove_tmp),
        cmocka_unit_test_setup_teardown(test_save_cancelled_after_the_weights_keeps_the_old_export,
                                        make_tmp, remove_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
