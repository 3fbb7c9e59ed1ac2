/* test_crc_pieces.c — the CRC-32 of a file written in pieces: equal to the CRC-32 of its bytes
 * read in order, whatever the order of the pieces, with holes and zero padding, and across the
 * 4 GiB mark; and fy_crc32_file reading a file back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libdeflate.h>

#include "scratch.h"
#include "util/crc_pieces.h"

static uint32_t next(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static void test_check_value(void **state)
{
    (void)state;
    /* CRC-32's check value (the CRC of "123456789"), whole and in two pieces added back first */
    assert_int_equal(fy_crc32("123456789", 9), 0xcbf43926u);
    fy_crc_pieces c = {0};
    fy_crc_pieces_add(&c, "6789", 4, 5);
    fy_crc_pieces_add(&c, "12345", 5, 0);
    assert_int_equal(fy_crc_pieces_value(&c, 9), 0xcbf43926u);
    fy_crc_pieces none = {0};
    assert_int_equal(fy_crc_pieces_value(&none, 0), fy_crc32("", 0));
}

static void test_any_order_with_holes(void **state)
{
    (void)state;
    uint32_t seed = 7;
    for (int round = 0; round < 50; round++) {
        size_t len = 1 + next(&seed) % 5000;
        unsigned char *file = calloc(len, 1);
        size_t cuts[64], n = 0, at = 0;
        while (at < len && n < 63) {
            cuts[n++] = at;
            at += 1 + next(&seed) % (len / 8 + 1);
        }
        cuts[n] = len;
        /* pieces in a shuffled order; every third one left unwritten (zeros) */
        size_t order[64];
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        for (size_t i = n; i > 1; i--) {
            size_t j = next(&seed) % i, t = order[i - 1];
            order[i - 1] = order[j];
            order[j] = t;
        }
        fy_crc_pieces c = {0};
        for (size_t k = 0; k < n; k++) {
            size_t i = order[k];
            if (i % 3 == 2)
                continue;
            for (size_t b = cuts[i]; b < cuts[i + 1]; b++)
                file[b] = (unsigned char)(next(&seed) | 1);
            fy_crc_pieces_add(&c, file + cuts[i], cuts[i + 1] - cuts[i], cuts[i]);
        }
        /* zero padding after the last piece, as ftruncate leaves it */
        size_t padded = len + next(&seed) % 100;
        file = realloc(file, padded);
        memset(file + len, 0, padded - len);
        assert_int_equal(fy_crc_pieces_value(&c, padded), fy_crc32(file, padded));
        free(file);
    }
}

static void test_beyond_4_gib(void **state)
{
    (void)state;
    /* a piece past 2^32 bytes of zeros, against libdeflate fed those zeros in chunks */
    const uint64_t k = (uint64_t)1 << 32;
    fy_crc_pieces c = {0};
    fy_crc_pieces_add(&c, "abc", 3, k);
    size_t chunk = (size_t)64 << 20;
    unsigned char *zeros = calloc(chunk, 1);
    assert_non_null(zeros);
    uint32_t want = 0;
    for (uint64_t done = 0; done < k; done += chunk)
        want = libdeflate_crc32(want, zeros, chunk);
    want = libdeflate_crc32(want, "abc", 3);
    free(zeros);
    assert_int_equal(fy_crc_pieces_value(&c, k + 3), want);
}

static void test_file_read_back(void **state)
{
    (void)state;
    assert_int_equal(scratch_make("crc"), 0);
    char path[128];
    snprintf(path, sizeof path, "%s/f", tmp_dir);
    size_t len = ((size_t)9 << 20) + 17;   /* more than two read chunks */
    unsigned char *b = malloc(len);
    uint32_t seed = 3;
    for (size_t i = 0; i < len; i++)
        b[i] = (unsigned char)next(&seed);
    fy_err err = {0};
    assert_int_equal(fs_write_file(path, b, len, &err), FERRY_OK);
    uint32_t crc;
    uint64_t size;
    assert_int_equal(fy_crc32_file(path, &crc, &size, &err), FERRY_OK);
    assert_int_equal(size, len);
    assert_int_equal(crc, fy_crc32(b, len));
    snprintf(path, sizeof path, "%s/missing", tmp_dir);
    assert_int_equal(fy_crc32_file(path, &crc, &size, &err), FERRY_ERR_IO);
    assert_non_null(strstr(err.msg, "missing"));
    free(b);
    scratch_remove();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_value),
        cmocka_unit_test(test_any_order_with_holes),
        cmocka_unit_test(test_beyond_4_gib),
        cmocka_unit_test(test_file_read_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
