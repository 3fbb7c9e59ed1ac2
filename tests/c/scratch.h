/* scratch.h — one scratch directory under /tmp per C test file: made by scratch_make(tag) in a
 * group or test setup, removed with everything in it by scratch_remove(). Path in tmp_dir. */
#ifndef FERRY_TESTS_SCRATCH_H
#define FERRY_TESTS_SCRATCH_H

#include <stdio.h>
#include <stdlib.h>

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

/* cmocka teardown removing the scratch directory. */
static inline int remove_tmp(void **state)
{
    (void)state;
    return scratch_remove();
}

#endif
