/* scratch.h — one scratch directory under /tmp per C test file: made by scratch_make(tag) in a
 * group or test setup, removed with everything in it by scratch_remove(). Path in tmp_dir.
 * Include after cmocka.h. */
#ifndef FERRY_TESTS_SCRATCH_H
#define FERRY_TESTS_SCRATCH_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"

static char tmp_dir[64];

static inline int scratch_make(const char *tag)
{
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/ferry-test-%s-XXXXXX", tag);
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static inline int scratch_remove(void)
{
    return fs_remove_tree(tmp_dir);
}

/* Writes `text` to dir/rel, failing the test on any error (cmocka.h comes first). */
static inline void scratch_write(const char *dir, const char *rel, const char *text)
{
    char path[1024];
    int n = snprintf(path, sizeof path, "%s/%s", dir, rel);
    assert_true(n > 0 && (size_t)n < sizeof path);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

/* cmocka teardown removing the scratch directory. */
static inline int remove_tmp(void **state)
{
    (void)state;
    return scratch_remove();
}

#endif
