/* test_shape.c — symbolic dimensions: arithmetic, printing, broadcasting, and the shape
 * inference that graph building runs (reshape with -1, slices, concat of symbolic dims). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ir/ir.h"
#include "ir/shape.h"

static g_symtab syms(void)
{
    g_symtab t = {0};
    assert_int_equal(g_symtab_add(&t, "batch", 1, 32, 2), 0);
    assert_int_equal(g_symtab_add(&t, "sequence", 1, 0, 8), 1);
    assert_int_equal(g_symtab_add(&t, "past_sequence", 0, 0, 5), 2);
    assert_int_equal(g_symtab_add(&t, "batch", 1, 32, 2), 0); /* existing name: same index */
    return t;
}

static void affine(void **state)
{
    (void)state;
    g_symtab t = syms();
    g_dim total = g_dim_add(g_dim_sym(2), g_dim_sym(1));
    char buf[128];
    g_dim_print(total, &t, buf, sizeof buf);
    assert_string_equal(buf, "sequence + past_sequence");
    int64_t v;
    assert_true(g_dim_example(total, &t, &v));
    assert_int_equal(v, 13);
    /* (past + seq) - seq == past */
    assert_true(g_dim_eq(g_dim_sub(total, g_dim_sym(1)), g_dim_sym(2)));
    /* seq - seq == 0, a constant */
    assert_true(g_dim_is_const(g_dim_sub(g_dim_sym(1), g_dim_sym(1)), &v));
    assert_int_equal(v, 0);
    g_dim x = g_dim_add(g_dim_scale(g_dim_sym(1), 2), g_dim_const(-3));
    g_dim_print(x, &t, buf, sizeof buf);
    assert_string_equal(buf, "2*sequence - 3");
    assert_false(g_dim_eq(x, g_dim_sym(1)));
    assert_true(g_dim_add(g_dim_unknown(), g_dim_sym(0)).unknown);
    g_dim_print(g_dim_unknown(), &t, buf, sizeof buf);
    assert_string_equal(buf, "?");
}

/* A symbol recounted in units of k: its range rounds inwards, the dim becomes k times it, and a
 * reshape of the k-multiple axis into rows of k solves its -1 as the new symbol; a program
 * reads it off that axis divided by k. */
static void counted_in_units(void **state)
{
    (void)state;
    g_symtab t = {0};
    assert_int_equal(g_symtab_add(&t, "patches", 5, 66, 16), 0);
    g_dim d = g_dim_sym(0);
    assert_true(g_sym_count_in_units(&t, &d, 4, "merged_"));
    assert_string_equal(t.s[0].name, "merged_patches");
    assert_int_equal(t.s[0].min, 2);
    assert_int_equal(t.s[0].max, 16);
    assert_int_equal(t.s[0].example, 4);
    assert_true(g_dim_eq(d, g_dim_scale(g_dim_sym(0), 4)));
    /* not a symbol alone, and a range that holds no multiple: refused, nothing changed */
    g_dim twice = g_dim_scale(g_dim_sym(0), 2);
    assert_false(g_sym_count_in_units(&t, &twice, 4, "x"));
    g_symtab narrow = {0};
    g_symtab_add(&narrow, "n", 5, 7, 6);
    g_dim n = g_dim_sym(0);
    assert_false(g_sym_count_in_units(&narrow, &n, 4, "m_"));
    assert_string_equal(narrow.s[0].name, "n");

    g_graph *g = g_new();
    g->syms = t;
    int x = g_input(g, "x", FERRY_F32, 2, (g_dim[]){d, g_dim_const(3)});
    int rows = g_reshape_spec(g, "rows", x, 2, (int64_t[]){-1, 12});
    assert_true(g_ok(g));
    assert_true(g_dim_eq(g->values[rows].shape.d[0], g_dim_sym(0)));
    int value, axis;
    int64_t k;
    assert_true(g_input_symbol(g, 0, &value, &axis, &k));
    assert_int_equal(value, x);
    assert_int_equal(axis, 0);
    assert_int_equal(k, 4);
    g_free(g);
}

static void too_many_terms(void **state)
{
    (void)state;
    g_dim d = g_dim_const(0);
    for (int i = 0; i < G_MAX_TERMS; i++)
        d = g_dim_add(d, g_dim_sym(i));
    assert_false(d.unknown);
    assert_true(g_dim_add(d, g_dim_sym(G_MAX_TERMS)).unknown);
}

static void broadcast(void **state)
{
    (void)state;
    g_shape a = {.rank = 3, .d = {g_dim_sym(0), g_dim_sym(1), g_dim_const(64)}};
    g_shape b = {.rank = 1, .d = {g_dim_const(64)}};
    g_shape c = {.rank = 2, .d = {g_dim_const(1), g_dim_const(64)}};
    g_shape r;
    assert_true(g_shape_broadcast(&a, &b, &r));
    assert_true(g_shape_eq(&r, &a));
    assert_true(g_shape_broadcast(&c, &a, &r));
    assert_true(g_shape_eq(&r, &a));
    g_shape bad = {.rank = 1, .d = {g_dim_const(63)}};
    assert_false(g_shape_broadcast(&a, &bad, &r));
}

static void inference(void **state)
{
    (void)state;
    g_graph *g = g_new();
    g->syms = syms();
    g_dim bs[3] = {g_dim_sym(0), g_dim_sym(1), g_dim_const(64)};
    int x = g_input(g, "x", FERRY_F32, 3, bs);
    /* [b, s, 64] -> [b, s, 4, 16] -> [b, 4, s, 16] -> [b, 2, 2, s, 16] via -1 */
    int64_t split[4] = {0, 0, 4, 16}, perm[4] = {0, 2, 1, 3}, five[5] = {0, 2, 2, -1, 16};
    int y = g_reshape_spec(g, "split", x, 4, split);
    y = g_transpose(g, "t", y, 4, perm);
    y = g_reshape_spec(g, "group", y, 5, five);
    assert_true(g_ok(g));
    const g_shape *s = &g->values[y].shape;
    assert_int_equal(s->rank, 5);
    assert_true(g_dim_eq(s->d[0], g_dim_sym(0)));
    assert_true(g_dim_eq(s->d[3], g_dim_sym(1)));
    /* concat along a symbolic axis adds the dims */
    int parts[2] = {x, x};
    int c = g_concat(g, "cat", 2, parts, 1);
    assert_true(g_dim_eq(g->values[c].shape.d[1], g_dim_scale(g_dim_sym(1), 2)));
    /* slicing a constant axis */
    int h = g_slice(g, "half", x, -1, 0, 32);
    int64_t v;
    assert_true(g_dim_is_const(g->values[h].shape.d[2], &v));
    assert_int_equal(v, 32);
    /* matmul with a mismatched inner dim is an internal error naming the node */
    int64_t wd[2] = {63, 8};
    float w[63 * 8] = {0};
    int bad = g_matmul(g, "mm", x, g_const(g, FERRY_F32, 2, wd, w), false);
    assert_int_equal(bad, G_NONE);
    assert_false(g_ok(g));
    assert_non_null(strstr(g->err.msg, "/mm"));
    g_free(g);
}

static void check_pass_and_dead_code(void **state)
{
    (void)state;
    g_graph *g = g_new();
    g->syms = syms();
    g_dim bs[2] = {g_dim_sym(0), g_dim_const(8)};
    int x = g_input(g, "x", FERRY_F32, 2, bs);
    int used = g_unary(g, G_SIGMOID, "used", x);
    int unused = g_unary(g, G_COS, "unused", x);
    g_output(g, used, "y");
    g_remove_dead(g);
    assert_false(g->nodes[g->values[used].producer].dead);
    assert_true(g->nodes[g->values[unused].producer].dead);
    fy_err err = {0};
    assert_int_equal(g_check(g, &err), FERRY_OK);
    /* a recorded dtype that inference contradicts is caught */
    g->values[used].dtype = FERRY_F16;
    assert_int_equal(g_check(g, &err), FERRY_ERR_INTERNAL);
    assert_non_null(strstr(err.msg, "/used"));
    g_free(g);
}

static void name_collisions_are_errors(void **state)
{
    (void)state;
    g_graph *g = g_new();
    g_dim d[1] = {g_dim_const(4)};
    int x = g_input(g, "x", FERRY_F32, 1, d);
    int a = g_unary(g, G_SIGMOID, "same", x);
    int b = g_unary(g, G_COS, "same", a);
    g_output(g, b, "y");
    g_remove_dead(g);
    fy_err err = {0};
    assert_int_equal(g_check(g, &err), FERRY_ERR_INTERNAL);
    assert_non_null(strstr(err.msg, "/same"));
    g_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(affine),
        cmocka_unit_test(too_many_terms),
        cmocka_unit_test(broadcast),
        cmocka_unit_test(inference),
        cmocka_unit_test(counted_in_units),
        cmocka_unit_test(check_pass_and_dead_code),
        cmocka_unit_test(name_collisions_are_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
