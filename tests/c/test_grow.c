/* test_grow.c — fy_grow, the growth behind every table and buffer: room for what is asked,
 * amortised doubling, and on an impossible size NULL with the array and capacity untouched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "util/grow.h"

static void test_appends_keep_contents(void **state)
{
    (void)state;
    int *items = NULL;
    size_t cap = 0, reallocs = 0;
    for (size_t n = 0; n < 10000; n++) {
        size_t before = cap;
        int *grown = fy_grow(items, &cap, n + 1, sizeof *grown);
        assert_non_null(grown);
        assert_true(cap >= n + 1);
        reallocs += cap != before;
        items = grown;
        items[n] = (int)n;
    }
    for (size_t n = 0; n < 10000; n++)
        assert_int_equal(items[n], (int)n);
    assert_true(reallocs <= 12); /* doubling: log2(10000 / 16) + 1 */
    free(items);
}

static void test_first_call_with_nothing_needed(void **state)
{
    (void)state;
    size_t cap = 0;
    char *p = fy_grow(NULL, &cap, 0, 1); /* an empty array still gets a buffer to point at */
    assert_non_null(p);
    assert_true(cap > 0);
    free(p);
}

static void test_overflow_refused_untouched(void **state)
{
    (void)state;
    size_t cap = 0;
    uint64_t *items = fy_grow(NULL, &cap, 4, sizeof *items);
    assert_non_null(items);
    items[3] = 42;
    size_t cap_before = cap;
    assert_null(fy_grow(items, &cap, SIZE_MAX / 4, sizeof *items));
    assert_int_equal(cap, cap_before);
    assert_null(fy_grow(items, &cap, SIZE_MAX / 2 + 1, 2));
    assert_int_equal(cap, cap_before);
    assert_int_equal(items[3], 42);
    free(items);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_appends_keep_contents),
        cmocka_unit_test(test_first_call_with_nothing_needed),
        cmocka_unit_test(test_overflow_refused_untouched),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
