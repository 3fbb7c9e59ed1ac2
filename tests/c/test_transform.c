/* test_transform.c — store/transform.h's fused transpose: bf16 [rows, cols] widened into fp32
 * [cols, rows] gives every element at its transposed place with its bits shifted up 16 (NaN
 * payloads, infinities and negative zero included), for shapes that fill the 4 x 4 blocks and
 * tiles and shapes that leave remainders, from memory at any alignment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "store/transform.h"

static uint16_t bf16_at(size_t i)
{
    static const uint16_t special[] = {0x7fc1, 0xffff, 0x7f80, 0xff80, 0x8000, 0x0000, 0x0001};
    size_t n = sizeof special / sizeof special[0];
    return i % 13 < n ? special[i % 13] : (uint16_t)(i * 2654435761u >> 9);
}

static void check_shape(size_t rows, size_t cols, size_t skew)
{
    size_t n = rows * cols;
    uint8_t *src = malloc(n * 2 + skew + 1), *dst = malloc(n * 4 + skew + 1);
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < n; i++) {
        uint16_t v = bf16_at(i);
        memcpy(src + skew + 2 * i, &v, 2);
    }
    memset(dst, 0xa5, n * 4 + skew + 1);
    assert_true(tf_transpose_widen(dst + skew, src + skew, rows, cols, FERRY_BF16, FERRY_F32));
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            uint32_t got;
            memcpy(&got, dst + skew + 4 * (c * rows + r), 4);
            uint32_t want = (uint32_t)bf16_at(r * cols + c) << 16;
            if (got != want)
                fail_msg("%zu x %zu (skew %zu): [%zu, %zu] is %08x, not %08x", rows, cols, skew,
                         r, c, got, want);
        }
    assert_int_equal(dst[skew + n * 4], 0xa5); /* nothing past the end */
    free(src);
    free(dst);
}

static void bf16_widened_transposed_every_shape(void **state)
{
    (void)state;
    static const size_t shapes[][2] = {{1, 1}, {1, 7}, {7, 1}, {4, 4}, {3, 5}, {33, 31},
                                       {64, 64}, {37, 45}, {130, 66}, {8, 96}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (size_t skew = 0; skew < 3; skew++)
            check_shape(shapes[k][0], shapes[k][1], skew);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bf16_widened_transposed_every_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
