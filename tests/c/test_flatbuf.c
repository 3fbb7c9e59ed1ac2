/* test_flatbuf.c — the FlatBuffers builder against a reader written here from the format's
 * specification: root and file identifier, a table's vtable (absent fields, defaults left
 * out), scalars of each width at their alignment, strings, vectors of scalars with a forced
 * alignment, vectors of tables, union fields; misuse fails the build instead of writing a
 * malformed buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "io/flatbuf.h"

static uint64_t rd(const uint8_t *p, size_t size)
{
    uint64_t v = 0;
    for (size_t i = 0; i < size; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* The address of field `id` of the table at `t`, or NULL when the table leaves it out. */
static const uint8_t *field_at(const uint8_t *t, int id)
{
    const uint8_t *vt = t - (int32_t)rd(t, 4);
    uint16_t vt_len = (uint16_t)rd(vt, 2);
    if (4 + 2 * id >= vt_len)
        return NULL;
    uint16_t off = (uint16_t)rd(vt + 4 + 2 * id, 2);
    return off ? t + off : NULL;
}

static const uint8_t *deref(const uint8_t *at)
{
    return at + rd(at, 4);
}

static void builds_what_a_reader_reads(void **state)
{
    (void)state;
    fb_builder b;
    fb_init(&b);
    /* two tables for a vector of tables: {x: long = 7} */
    fb_ref subs[2];
    for (int i = 0; i < 2; i++) {
        fb_table_start(&b);
        fb_add_i64(&b, 0, i ? 42 : 7, 7); /* the first equals the default: left out */
        subs[i] = fb_table_end(&b);
    }
    fb_ref name = fb_string(&b, "forward");
    const uint8_t data[5] = {1, 2, 3, 4, 5};
    fb_ref bytes = fb_vector(&b, data, 5, 1, 16);
    const int64_t longs[3] = {-1, 0, (int64_t)1 << 40};
    fb_ref nums = fb_vector(&b, longs, 3, 8, 8);
    fb_ref list = fb_ref_vector(&b, subs, 2);
    fb_table_start(&b);
    fb_add_u8(&b, 9, 1, 0);
    fb_add_i32(&b, 0, -5, 0);
    fb_add_ref(&b, 1, name);
    fb_add_ref(&b, 2, bytes);
    fb_add_ref(&b, 3, list);
    fb_add_union(&b, 5, 3, subs[1]);
    fb_add_ref(&b, 6, nums);
    fb_add_f64(&b, 7, 0.5, 0.0);
    fb_add_u64(&b, 8, 0, 0); /* a default: absent */
    fb_ref root = fb_table_end(&b);
    size_t len;
    const uint8_t *buf = fb_finish(&b, root, "ET12", &len);
    assert_non_null(buf);
    assert_memory_equal(buf + 4, "ET12", 4);
    assert_int_equal(len % 8, 0); /* the largest alignment used, so addresses are aligned */
    const uint8_t *t = deref(buf);
    assert_int_equal((int32_t)rd(field_at(t, 0), 4), -5);
    const uint8_t *s = deref(field_at(t, 1));
    assert_int_equal(rd(s, 4), 7);
    assert_string_equal((const char *)s + 4, "forward");
    const uint8_t *v = deref(field_at(t, 2));
    assert_int_equal(rd(v, 4), 5);
    assert_int_equal((uintptr_t)(v + 4 - buf) % 16, 0); /* force_align */
    assert_memory_equal(v + 4, data, 5);
    const uint8_t *n = deref(field_at(t, 6));
    assert_int_equal((uintptr_t)(n + 4 - buf) % 8, 0);
    assert_true((int64_t)rd(n + 4, 8) == -1 && rd(n + 12, 8) == 0 &&
                rd(n + 20, 8) == (uint64_t)1 << 40);
    const uint8_t *l = deref(field_at(t, 3));
    assert_int_equal(rd(l, 4), 2);
    const uint8_t *t0 = deref(l + 4), *t1 = deref(l + 8);
    assert_null(field_at(t0, 0));                      /* the default */
    assert_int_equal(rd(field_at(t1, 0), 8), 42);
    assert_int_equal(rd(field_at(t, 4), 1), 3);       /* the union's type, at id - 1 */
    assert_ptr_equal(deref(field_at(t, 5)), t1);       /* and its value: the same table */
    double half;
    uint64_t bits = rd(field_at(t, 7), 8);
    memcpy(&half, &bits, 8);
    assert_true(half == 0.5);
    assert_null(field_at(t, 8));
    assert_int_equal(rd(field_at(t, 9), 1), 1);
    assert_null(field_at(t, 20));                      /* past the vtable */
    fb_free(&b);
}

static void misuse_fails_the_build(void **state)
{
    (void)state;
    fb_builder b;
    size_t len;
    fb_init(&b); /* a string while a table is open */
    fb_table_start(&b);
    fb_string(&b, "x");
    fb_ref t = fb_table_end(&b);
    assert_null(fb_finish(&b, t, NULL, &len));
    fb_free(&b);
    fb_init(&b); /* two tables open at once */
    fb_table_start(&b);
    fb_table_start(&b);
    t = fb_table_end(&b);
    assert_null(fb_finish(&b, t, NULL, &len));
    fb_free(&b);
    fb_init(&b); /* an offset to an object not built */
    fb_table_start(&b);
    fb_add_ref(&b, 0, 1000);
    t = fb_table_end(&b);
    assert_null(fb_finish(&b, t, NULL, &len));
    fb_free(&b);
    fb_init(&b); /* a field id past the limit; a bad element size */
    fb_table_start(&b);
    fb_add_i32(&b, FB_MAX_FIELDS, 1, 0);
    t = fb_table_end(&b);
    assert_null(fb_finish(&b, t, NULL, &len));
    fb_free(&b);
    fb_init(&b);
    fb_vector(&b, "abc", 1, 3, 4);
    fb_table_start(&b);
    t = fb_table_end(&b);
    assert_null(fb_finish(&b, t, NULL, &len));
    fb_free(&b);
    fb_init(&b); /* no root */
    assert_null(fb_finish(&b, 0, NULL, &len));
    fb_free(&b);
}

/* Many objects: the buffer grows and moves, and offsets stay right. */
static void grows(void **state)
{
    (void)state;
    fb_builder b;
    fb_init(&b);
    enum { N = 3000 };
    static fb_ref refs[N];
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "value %d", i);
        fb_ref s = fb_string(&b, name);
        fb_table_start(&b);
        fb_add_ref(&b, 0, s);
        fb_add_i64(&b, 1, i, -1);
        refs[i] = fb_table_end(&b);
    }
    fb_ref list = fb_ref_vector(&b, refs, N);
    fb_table_start(&b);
    fb_add_ref(&b, 0, list);
    fb_ref root = fb_table_end(&b);
    size_t len;
    const uint8_t *buf = fb_finish(&b, root, NULL, &len);
    assert_non_null(buf);
    const uint8_t *l = deref(field_at(deref(buf), 0));
    assert_int_equal(rd(l, 4), N);
    for (int i = 0; i < N; i += 299) {
        const uint8_t *t = deref(l + 4 + 4 * (size_t)i);
        snprintf(name, sizeof name, "value %d", i);
        assert_string_equal((const char *)deref(field_at(t, 0)) + 4, name);
        assert_int_equal((int64_t)rd(field_at(t, 1), 8), i);
    }
    fb_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(builds_what_a_reader_reads),
        cmocka_unit_test(misuse_fails_the_build),
        cmocka_unit_test(grows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
