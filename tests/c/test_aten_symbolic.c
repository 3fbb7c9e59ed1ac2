/* test_aten_symbolic.c — the aten targets' shape arithmetic (backends/aten/aten_symbolic.c):
 * dims printed as the sympy text torch's serializer reads, integers followed from shape_of
 * through gather, slice, concat, sums and products to the dims they hold, data-dependent values
 * left unknown, and an arange's length refined from its bounds (a position held in a tensor
 * plus a known count included). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/aten/aten.h"

static void dims_print_as_sympy(void **state)
{
    (void)state;
    char buf[64];
    g_dim d = g_dim_add(g_dim_scale(g_dim_sym(0), 2), g_dim_sym(1));
    aten_dim_expr(d, buf, sizeof buf);
    assert_string_equal(buf, "2*s0 + s1");
    aten_dim_expr(g_dim_sub(g_dim_const(3), g_dim_sym(2)), buf, sizeof buf);
    assert_string_equal(buf, "-s2 + 3");
    aten_dim_expr(g_dim_add(g_dim_sym(1), g_dim_const(-1)), buf, sizeof buf);
    assert_string_equal(buf, "s1 - 1");
    aten_dim_expr(g_dim_const(-7), buf, sizeof buf);
    assert_string_equal(buf, "-7");
    assert_int_equal(aten_dim_expr(d, buf, 4), -1); /* too small: refused, not cut */
}

/* x [batch, sequence, 4]: shape_of -> gather(1) -> add(shape_of[0]) ; a mask input's values */
static void integers_follow_shapes(void **state)
{
    (void)state;
    g_graph *g = g_new();
    int b = g_symtab_add(&g->syms, "batch", 1, 0, 2), s = g_symtab_add(&g->syms, "sequence", 1, 0, 8);
    g_dim dims[3] = {g_dim_sym(b), g_dim_sym(s), g_dim_const(4)};
    int x = g_input(g, "x", FERRY_F32, 3, dims);
    g_dim one = g_dim_const(1);
    int pos = g_input(g, "position", FERRY_I64, 1, &one);
    int shape = g_shape_of(g, "shape", x, 0, G_END);
    int seq = g_gather(g, "seq", shape, g_scalar_i64(g, 1), 0);
    int bat = g_gather(g, "bat", shape, g_scalar_i64(g, 0), 0);
    int sum = g_binary(g, G_ADD, "sum", seq, bat);
    int twice = g_binary(g, G_MUL, "twice", sum, g_scalar_i64(g, 2));
    int tail = g_slice(g, "tail", shape, 0, 1, G_END);
    int both = g_concat(g, "both", 2, (int[]){tail, g_const_i64(g, 1, (int64_t[]){5})}, 0);
    int data = g_binary(g, G_ADD, "data", pos, g_scalar_i64(g, 1));
    /* arange(position, position + sequence): a count known, a start that is data */
    int start = g_gather(g, "start", pos, g_scalar_i64(g, 0), 0);
    int end = g_binary(g, G_ADD, "end", start, seq);
    int range = g_range(g, "range", start, end, g_scalar_i64(g, 1));
    int known = g_range(g, "known", g_scalar_i64(g, 0), twice, g_scalar_i64(g, 1));
    assert_true(g_ok(g));
    aten_ints *ints = aten_track(g);
    assert_non_null(ints);
    assert_true(ints[seq].known && ints[seq].scalar);
    assert_true(g_dim_eq(ints[seq].d[0], g_dim_sym(s)));
    assert_true(g_dim_eq(ints[sum].d[0], g_dim_add(g_dim_sym(s), g_dim_sym(b))));
    assert_true(g_dim_eq(ints[twice].d[0],
                         g_dim_scale(g_dim_add(g_dim_sym(s), g_dim_sym(b)), 2)));
    assert_int_equal(ints[both].n, 3);
    assert_true(g_dim_eq(ints[both].d[0], g_dim_sym(s)));
    assert_true(g_dim_eq(ints[both].d[2], g_dim_const(5)));
    assert_false(ints[data].known); /* a tensor's values are data */
    assert_false(ints[pos].known);
    const g_node *rn = &g->nodes[g->values[range].producer];
    int count = aten_range_offset_length(g, rn, ints);
    assert_int_equal(count, seq);
    free(ints);
    fy_err err = {0};
    assert_int_equal(aten_refine_shapes(g, &err), FERRY_OK);
    assert_true(g_dim_eq(g->values[range].shape.d[0], g_dim_sym(s)));
    assert_true(g_dim_eq(g->values[known].shape.d[0],
                         g_dim_scale(g_dim_add(g_dim_sym(s), g_dim_sym(b)), 2)));
    g_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(dims_print_as_sympy),
        cmocka_unit_test(integers_follow_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
