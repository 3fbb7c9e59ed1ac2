/* test_pb.c — protobuf wire encoding against hand-checked bytes from the protobuf spec. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "io/pb.h"

static void expect_bytes(const pb_buf *b, const uint8_t *want, size_t n)
{
    assert_false(b->oom);
    assert_int_equal(b->len, n);
    assert_memory_equal(b->data, want, n);
}

static void varints(void **state)
{
    (void)state;
    pb_buf b = {0};
    pb_varint(&b, 0);
    pb_varint(&b, 1);
    pb_varint(&b, 127);
    pb_varint(&b, 128);
    pb_varint(&b, 300);
    const uint8_t want[] = {0x00, 0x01, 0x7f, 0x80, 0x01, 0xac, 0x02};
    expect_bytes(&b, want, sizeof want);
    pb_reset(&b);
    pb_varint(&b, UINT64_MAX);
    const uint8_t max[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    expect_bytes(&b, max, sizeof max);
    pb_free(&b);
}

static void fields(void **state)
{
    (void)state;
    pb_buf b = {0};
    pb_int(&b, 1, 150);              /* the spec's example: 08 96 01 */
    pb_string(&b, 2, "testing");     /* 12 07 74 65 73 74 69 6e 67 */
    pb_int(&b, 3, -1);               /* negative int64: ten bytes */
    pb_float(&b, 4, 1.0f);           /* fixed32 little endian */
    const uint8_t want[] = {0x08, 0x96, 0x01, 0x12, 0x07, 't', 'e', 's', 't', 'i', 'n', 'g',
                            0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
                            0x25, 0x00, 0x00, 0x80, 0x3f};
    expect_bytes(&b, want, sizeof want);
    pb_free(&b);
}

static void nested(void **state)
{
    (void)state;
    pb_buf inner = {0}, outer = {0};
    pb_int(&inner, 1, 150);
    pb_msg(&outer, 3, &inner);       /* the spec's embedded-message example: 1a 03 08 96 01 */
    const uint8_t want[] = {0x1a, 0x03, 0x08, 0x96, 0x01};
    expect_bytes(&outer, want, sizeof want);
    pb_free(&inner);
    pb_free(&outer);
}

static void large_field_number_and_empty(void **state)
{
    (void)state;
    pb_buf b = {0}, empty = {0};
    pb_int(&b, 20, 7);               /* AttributeProto.type: tag (20<<3)|0 = 160 = a0 01 */
    pb_msg(&b, 5, &empty);           /* empty message: 2a 00 */
    const uint8_t want[] = {0xa0, 0x01, 0x07, 0x2a, 0x00};
    expect_bytes(&b, want, sizeof want);
    pb_free(&b);
}

static void growth(void **state)
{
    (void)state;
    pb_buf b = {0};
    for (int i = 0; i < 100000; i++)
        pb_int(&b, 1, i);
    assert_false(b.oom);
    assert_true(b.len > 100000 * 2);
    pb_free(&b);
    assert_null(b.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(varints),
        cmocka_unit_test(fields),
        cmocka_unit_test(nested),
        cmocka_unit_test(large_field_number_and_empty),
        cmocka_unit_test(growth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
