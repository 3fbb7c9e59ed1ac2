/* test_clip_pad_conv.c — the inference rules of clip, pad and conv: their output shapes at
 * constant and symbolic extents (a strided conv stays affine only where the stride divides the
 * symbols' coefficients), the attributes each refuses with an error naming the node, g_check's
 * refusal of their attributes on other ops, the conv options' deep copy through a lowering,
 * their text form, and the ONNX targets' fp32 conv and clip for bf16. That the backends print
 * them right is test_op_conformance.py's part. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/onnx/onnx.h"
#include "ir/legalize.h"

enum { BATCH, SEQUENCE };

/* A graph with the symbols batch and sequence. */
static g_graph *graph(void)
{
    g_graph *g = g_new();
    assert_non_null(g);
    assert_int_equal(g_symtab_add(&g->syms, "batch", 1, 0, 2), BATCH);
    assert_int_equal(g_symtab_add(&g->syms, "sequence", 1, 0, 8), SEQUENCE);
    return g;
}

static g_dim sym(int s, int64_t coef, int64_t c)
{
    return g_dim_add(g_dim_scale(g_dim_sym(s), coef), g_dim_const(c));
}

/* A float input of constant extents. */
static int input(g_graph *g, const char *name, ferry_dtype dt, int rank, const int64_t *dims)
{
    g_dim d[G_MAX_RANK];
    for (int i = 0; i < rank; i++)
        d[i] = g_dim_const(dims[i]);
    return g_input(g, name, dt, rank, d);
}

/* [batch, channels, extent] */
static int frames(g_graph *g, int64_t channels, g_dim extent)
{
    g_dim d[3] = {g_dim_sym(BATCH), g_dim_const(channels), extent};
    return g_input(g, "x", FERRY_F32, 3, d);
}

static void assert_dim(g_dim got, g_dim want)
{
    if (!g_dim_eq(got, want)) {
        g_graph *names = graph();
        char a[64], b[64];
        g_dim_print(got, &names->syms, a, sizeof a);
        g_dim_print(want, &names->syms, b, sizeof b);
        g_free(names);
        fail_msg("dim %s, expected %s", a, b);
    }
}

/* A builder call refused by inference: G_NONE, and an error naming the node and saying why. */
static void refused(g_graph *g, int v, const char *node, const char *why)
{
    char named[128];
    snprintf(named, sizeof named, "'/%s'", node);
    assert_int_equal(v, G_NONE);
    if (!strstr(g->err.msg, named) || !strstr(g->err.msg, why))
        fail_msg("builder said '%s', expected %s and '%s'", g->err.msg, named, why);
    g_free(g);
}

static void clip_keeps_the_shape_and_refuses_bad_bounds(void **state)
{
    (void)state;
    g_graph *g = graph();
    int x = frames(g, 4, g_dim_sym(SEQUENCE));
    int y = g_clip(g, "clip", x, -1.0, 2.0);
    int lower = g_clip(g, "lower", x, -1.0, INFINITY);
    int upper = g_clip(g, "upper", x, -INFINITY, 0.5);
    assert_true(g_ok(g));
    assert_true(g_shape_eq(&g->values[y].shape, &g->values[x].shape));
    assert_int_equal(g->values[lower].dtype, FERRY_F32);
    assert_int_equal(g->values[upper].dtype, FERRY_F32);
    g_free(g);

    g = graph();
    x = frames(g, 4, g_dim_sym(SEQUENCE));
    refused(g, g_clip(g, "crossed", x, 2.0, 1.0), "crossed", "lo <= hi");
    g = graph();
    x = frames(g, 4, g_dim_sym(SEQUENCE));
    refused(g, g_clip(g, "nan", x, NAN, 1.0), "nan", "bounds must be numbers");
    g = graph();
    g_dim ids[2] = {g_dim_sym(BATCH), g_dim_sym(SEQUENCE)};
    x = g_input(g, "ids", FERRY_I64, 2, ids);
    refused(g, g_clip(g, "ints", x, 0.0, 1.0), "ints", "float input");
}

static void pad_grows_each_axis_and_refuses_bad_pads(void **state)
{
    (void)state;
    g_graph *g = graph();
    int x = frames(g, 4, g_dim_sym(SEQUENCE));
    const int64_t begin[3] = {0, 1, 2}, end[3] = {0, 2, 3};
    int y = g_pad(g, "pad", x, 3, begin, end, 0.5);
    assert_true(g_ok(g));
    const g_shape *s = &g->values[y].shape;
    assert_int_equal(s->rank, 3);
    assert_dim(s->d[0], g_dim_sym(BATCH));
    assert_dim(s->d[1], g_dim_const(7));
    assert_dim(s->d[2], sym(SEQUENCE, 1, 5)); /* sequence + 5: still affine */
    g_free(g);

    const int64_t negative[3] = {0, -1, 0};
    g = graph();
    x = frames(g, 4, g_dim_sym(SEQUENCE));
    refused(g, g_pad(g, "crop", x, 3, negative, end, 0.0), "crop", "non-negative");
    g = graph();
    x = frames(g, 4, g_dim_sym(SEQUENCE));
    refused(g, g_pad(g, "nan", x, 3, begin, end, NAN), "nan", "finite pad value");
    g = graph();
    x = frames(g, 4, g_dim_sym(SEQUENCE));
    assert_int_equal(g_pad(g, "short", x, 2, begin, end, 0.0), G_NONE);
    assert_non_null(strstr(g->err.msg, "2 pairs of pads for x of rank 3"));
    g_free(g);
    g = graph();
    g_dim ids[2] = {g_dim_sym(BATCH), g_dim_sym(SEQUENCE)};
    x = g_input(g, "ids", FERRY_I64, 2, ids);
    refused(g, g_pad(g, "ints", x, 2, begin, end, 0.0), "ints", "float input");
}

/* A 1-D conv of [6, 4, k] weights over x [batch, 4, extent] with one stride and pads. */
static int conv1d(g_graph *g, const char *name, g_dim extent, int64_t k, int64_t stride,
                  int64_t pad)
{
    const int64_t w3[3] = {6, 4, k};
    int x = frames(g, 4, extent);
    int w = input(g, "w", FERRY_F32, 3, w3);
    g_conv_opts o = {.spatial = 1, .strides = {stride}, .pads_begin = {pad}, .pads_end = {pad},
                     .dilations = {1}, .groups = 1};
    return g_conv(g, name, x, w, G_NONE, &o);
}

static g_dim conv1d_extent(g_dim extent, int64_t k, int64_t stride, int64_t pad)
{
    g_graph *g = graph();
    int y = conv1d(g, "conv", extent, k, stride, pad);
    if (y == G_NONE)
        fail_msg("conv refused: %s", g->err.msg);
    assert_dim(g->values[y].shape.d[1], g_dim_const(6));
    g_dim d = g->values[y].shape.d[2];
    g_free(g);
    return d;
}

static void conv_extents_constant_and_symbolic(void **state)
{
    (void)state;
    g_dim s = g_dim_sym(SEQUENCE);
    /* Whisper's convs: k 3, pad 1, stride 1 over frames, then stride 2 over 2 * sequence */
    assert_dim(conv1d_extent(s, 3, 1, 1), s);
    assert_dim(conv1d_extent(sym(SEQUENCE, 2, 0), 3, 2, 1), s);
    /* floor((2s + 1 + 2 - 3) / 2) + 1 = s + 1 */
    assert_dim(conv1d_extent(sym(SEQUENCE, 2, 1), 3, 2, 1), sym(SEQUENCE, 1, 1));
    /* a negative constant part floors down: floor((2s - 5) / 2) + 1 = s - 2 */
    assert_dim(conv1d_extent(sym(SEQUENCE, 2, 0), 5, 2, 0), sym(SEQUENCE, 1, -2));
    /* no pad, stride 1: s - k + 1 */
    assert_dim(conv1d_extent(s, 4, 1, 0), sym(SEQUENCE, 1, -3));
    /* constants: floor((10 + 2 - 3) / 3) + 1 = 4 */
    assert_dim(conv1d_extent(g_dim_const(10), 3, 3, 1), g_dim_const(4));
    /* an extent that depends on data stays unknown */
    assert_true(conv1d_extent(g_dim_unknown(), 3, 2, 1).unknown);

    /* groups, unequal pads, a dilation and a stride at once, with a bias: x [2, 4, 7, 9],
     * weight [6, 2, 3, 2] in 2 groups -> [2, 6, 3, 9] (torch's conv2d over x padded to 8 x 11) */
    g_graph *g = graph();
    const int64_t x4[4] = {2, 4, 7, 9}, w4[4] = {6, 2, 3, 2}, b1[1] = {6};
    int x = input(g, "x", FERRY_F32, 4, x4);
    int w = input(g, "w", FERRY_F32, 4, w4);
    int b = input(g, "b", FERRY_F32, 1, b1);
    g_conv_opts o = {.spatial = 2, .strides = {2, 1}, .pads_begin = {1, 0}, .pads_end = {0, 2},
                     .dilations = {1, 2}, .groups = 2};
    int y = g_conv(g, "conv", x, w, b, &o);
    assert_true(g_ok(g));
    const int64_t want[4] = {2, 6, 3, 9};
    for (int i = 0; i < 4; i++)
        assert_dim(g->values[y].shape.d[i], g_dim_const(want[i]));
    g_free(g);
}

static void conv_refuses_what_cannot_be(void **state)
{
    (void)state;
    g_dim s = g_dim_sym(SEQUENCE);
    g_graph *g = graph();
    /* stride 2 over plain `sequence`: floor((s - 1) / 2) + 1 is no affine dim */
    refused(g, conv1d(g, "strided", s, 3, 2, 1), "strided", "no affine output extent");
    g = graph();
    refused(g, conv1d(g, "overreach", g_dim_const(2), 5, 1, 1), "overreach",
            "the kernel reaches past the padded input");
    g = graph();
    refused(g, conv1d(g, "negative_pad", s, 3, 1, -1), "negative_pad", "pads >= 0");
    g = graph();
    refused(g, conv1d(g, "stride0", s, 3, 0, 1), "stride0", "strides and dilations >= 1");

    const int64_t x3[3] = {1, 4, 8}, w3[3] = {6, 4, 3}, w4[4] = {6, 4, 3, 3};
    const int64_t bad_bias[1] = {4};
    g_conv_opts one = {.spatial = 1, .strides = {1}, .dilations = {1}, .groups = 1};

    g = graph();
    g_conv_opts groups3 = one;
    groups3.groups = 3; /* divides c_out 6, but x's 4 channels are not 3 * 4 */
    refused(g, g_conv(g, "groups", input(g, "x", FERRY_F32, 3, x3),
                      input(g, "w", FERRY_F32, 3, w3), G_NONE, &groups3),
            "groups", "groups must divide c_out");
    g = graph();
    g_conv_opts groups4 = one;
    groups4.groups = 4; /* 6 output channels in 4 groups */
    const int64_t w_one_channel[3] = {6, 1, 3};
    refused(g, g_conv(g, "c_out", input(g, "x", FERRY_F32, 3, x3),
                      input(g, "w", FERRY_F32, 3, w_one_channel), G_NONE, &groups4),
            "c_out", "groups must divide c_out");
    g = graph();
    refused(g, g_conv(g, "rank", input(g, "x", FERRY_F32, 3, x3),
                      input(g, "w", FERRY_F32, 4, w4), G_NONE, &one),
            "rank", "as many spatial axes as the options");
    g = graph();
    g_conv_opts two = {.spatial = 2, .strides = {1, 1}, .dilations = {1, 1}, .groups = 1};
    refused(g, g_conv(g, "options", input(g, "x", FERRY_F32, 3, x3),
                      input(g, "w", FERRY_F32, 3, w3), G_NONE, &two),
            "options", "as many spatial axes as the options");
    g = graph();
    g_conv_opts stray = one;
    stray.strides[1] = 1; /* past the one spatial axis */
    refused(g, g_conv(g, "stray", input(g, "x", FERRY_F32, 3, x3),
                      input(g, "w", FERRY_F32, 3, w3), G_NONE, &stray),
            "stray", "nothing set past the spatial axes");
    g = graph();
    g_conv_opts four = one;
    four.spatial = 4;
    refused(g, g_conv(g, "four", input(g, "x", FERRY_F32, 3, x3),
                      input(g, "w", FERRY_F32, 3, w3), G_NONE, &four),
            "four", "1 to 3 spatial axes");
    g = graph();
    refused(g, g_conv(g, "bias", input(g, "x", FERRY_F32, 3, x3),
                      input(g, "w", FERRY_F32, 3, w3), input(g, "b", FERRY_F32, 1, bad_bias),
                      &one),
            "bias", "bias must be [c_out]");
    g = graph();
    refused(g, g_conv(g, "dtypes", input(g, "x", FERRY_F32, 3, x3),
                      input(g, "w", FERRY_F16, 3, w3), G_NONE, &one),
            "dtypes", "one float dtype");
    g = graph();
    g_dim symbolic_kernel[3] = {g_dim_const(6), g_dim_const(4), s};
    refused(g, g_conv(g, "kernel", input(g, "x", FERRY_F32, 3, x3),
                      g_input(g, "w", FERRY_F32, 3, symbolic_kernel), G_NONE, &one),
            "kernel", "positive constants");
}

static void check_refuses(g_graph *g, const char *why)
{
    fy_err err = {0};
    assert_int_equal(g_check(g, &err), FERRY_ERR_INTERNAL);
    if (!strstr(err.msg, why))
        fail_msg("g_check said '%s', expected '%s'", err.msg, why);
}

/* Bounds, pads and conv options on an op that reads none of them are refused, as every other
 * attribute is: a printer would drop them without a word. */
static void other_ops_take_none_of_their_attributes(void **state)
{
    (void)state;
    g_graph *g = graph();
    int x = frames(g, 4, g_dim_sym(SEQUENCE));
    g_output(g, g_unary(g, G_NEG, "neg", x), "y");
    g_remove_dead(g);
    fy_err err = {0};
    assert_int_equal(g_check(g, &err), FERRY_OK);
    g_node *neg = &g->nodes[0];
    neg->a.hi = 1.0;
    check_refuses(g, "an attribute the op does not take is set");
    neg->a.hi = 0;
    neg->a.pad_end[2] = 1;
    check_refuses(g, "an attribute the op does not take is set");
    neg->a.pad_end[2] = 0;
    neg->a.pad_value = 1.0;
    check_refuses(g, "an attribute the op does not take is set");
    neg->a.pad_value = 0;
    static g_conv_opts opts = {.spatial = 1, .strides = {1}, .dilations = {1}, .groups = 1};
    neg->a.conv = &opts;
    check_refuses(g, "an attribute the op does not take is set");
    neg->a.conv = NULL;
    assert_int_equal(g_check(g, &err), FERRY_OK);
    g_free(g);
}

/* A conv node copied into the lowered graph owns a copy of its options (both graphs free
 * theirs), and each op's attributes read back in the text form. */
static void options_copied_and_dumped(void **state)
{
    (void)state;
    g_graph *g = graph();
    const int64_t x4[4] = {2, 4, 7, 9}, w4[4] = {6, 2, 3, 2};
    int x = input(g, "x", FERRY_F32, 4, x4);
    int w = input(g, "w", FERRY_F32, 4, w4);
    g_conv_opts o = {.spatial = 2, .strides = {2, 1}, .pads_begin = {1, 0}, .pads_end = {0, 2},
                     .dilations = {1, 2}, .groups = 2};
    const int64_t begin[4] = {0, 0, 1, 0}, end[4] = {0, 0, 0, 2};
    int y = g_conv(g, "conv", g_pad(g, "pad", g_clip(g, "clip", x, -INFINITY, 2.0), 4, begin,
                                    end, 0.5),
                   w, G_NONE, &o);
    g_output(g, y, "y");
    assert_true(g_ok(g));
    g_remove_dead(g);
    fy_err err = {0};
    assert_int_equal(g_check(g, &err), FERRY_OK);
    g_graph *low = g_legalize(g, &onnx_standard_target, &err);
    if (!low)
        fail_msg("g_legalize: %s", err.msg);
    const g_node *a = &g->nodes[g->values[y].producer];
    const g_node *b = NULL;
    for (size_t i = 0; i < low->n_nodes; i++)
        if (!low->nodes[i].dead && low->nodes[i].op == G_CONV)
            b = &low->nodes[i];
    assert_non_null(b);
    assert_ptr_not_equal(a->a.conv, b->a.conv);
    assert_memory_equal(a->a.conv, b->a.conv, sizeof *a->a.conv);

    char *text = g_dump(low);
    assert_non_null(text);
    const char *want[] = {
        "clip(x) {lo=-inf, hi=2}",
        "{begin=[0,0,1,0], end=[0,0,0,2], value=0.5}",
        "{strides=[2,1], pads_begin=[1,0], pads_end=[0,2], dilations=[1,2], groups=2}",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(text, want[i]))
            fail_msg("no '%s' in:\n%s", want[i], text);
    free(text);
    g_free(low);
    g_free(g);
}

/* onnxruntime has no bf16 Conv or Clip (nor does ONNX a bf16 Conv below opset 22): the ONNX
 * targets run them at fp32 between casts; fp16 and pad stay as they are. */
static void onnx_runs_bf16_conv_and_clip_in_f32(void **state)
{
    (void)state;
    const ferry_dtype dts[2] = {FERRY_BF16, FERRY_F16};
    for (int k = 0; k < 2; k++) {
        g_graph *g = graph();
        const int64_t x3[3] = {2, 4, 8}, w3[3] = {6, 4, 3}, b1[1] = {6};
        const int64_t begin[3] = {0, 0, 1}, end[3] = {0, 0, 1};
        int x = input(g, "x", dts[k], 3, x3);
        g_conv_opts o = {.spatial = 1, .strides = {1}, .dilations = {1}, .groups = 1};
        int y = g_conv(g, "conv", g_pad(g, "pad", x, 3, begin, end, 0.0),
                       input(g, "w", dts[k], 3, w3), input(g, "b", dts[k], 1, b1), &o);
        g_output(g, g_clip(g, "clip", y, -1.0, 1.0), "y");
        assert_true(g_ok(g));
        g_remove_dead(g);
        fy_err err = {0};
        assert_int_equal(g_check(g, &err), FERRY_OK);
        g_graph *low = g_legalize(g, &onnx_standard_target, &err);
        if (!low)
            fail_msg("g_legalize: %s", err.msg);
        int casts = 0;
        for (size_t i = 0; i < low->n_nodes; i++) {
            const g_node *n = &low->nodes[i];
            casts += !n->dead && n->op == G_CAST;
            if (!n->dead && n->op != G_CAST)
                assert_int_equal(low->values[n->in[0]].dtype,
                                 n->op == G_PAD || k == 1 ? dts[k] : FERRY_F32);
        }
        assert_int_equal(casts, k == 0 ? 6 : 0); /* x, w, b and back; x and back */
        assert_int_equal(low->values[low->outputs[0]].dtype, dts[k]);
        g_free(low);
        g_free(g);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(clip_keeps_the_shape_and_refuses_bad_bounds),
        cmocka_unit_test(pad_grows_each_axis_and_refuses_bad_pads),
        cmocka_unit_test(conv_extents_constant_and_symbolic),
        cmocka_unit_test(conv_refuses_what_cannot_be),
        cmocka_unit_test(other_ops_take_none_of_their_attributes),
        cmocka_unit_test(options_copied_and_dumped),
        cmocka_unit_test(onnx_runs_bf16_conv_and_clip_in_f32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
