/* test_moe.c — the moe op's inference rules: its output (x's shape and dtype) from the fused
 * [E, 2*ff, h] and the separate gate/up forms at symbolic and constant token extents, the shapes
 * and options it refuses with an error naming the node, g_check's refusal of its options on other
 * ops, the options' deep copy and text form, that every target lowers it to primitives, and that
 * the generic lowering refuses quantized expert weights. That the lowering computes what
 * transformers' blocks compute is test_op_conformance.py's part. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/onnx/onnx.h"
#include "backends/openvino/openvino.h"
#include "backends/torch/torch.h"
#include "ir/legalize.h"

enum { BATCH, SEQUENCE };
enum { E = 4, FF = 8, H = 32 };

static g_graph *graph(void)
{
    g_graph *g = g_new();
    assert_non_null(g);
    assert_int_equal(g_symtab_add(&g->syms, "batch", 1, 0, 2), BATCH);
    assert_int_equal(g_symtab_add(&g->syms, "sequence", 1, 0, 8), SEQUENCE);
    return g;
}

/* An input of constant extents. */
static int input(g_graph *g, const char *name, ferry_dtype dt, int rank, const int64_t *dims)
{
    g_dim d[G_MAX_RANK];
    for (int i = 0; i < rank; i++)
        d[i] = g_dim_const(dims[i]);
    return g_input(g, name, dt, rank, d);
}

/* [batch, sequence, n] */
static int tokens(g_graph *g, const char *name, ferry_dtype dt, int64_t n)
{
    g_dim d[3] = {g_dim_sym(BATCH), g_dim_sym(SEQUENCE), g_dim_const(n)};
    return g_input(g, name, dt, 3, d);
}

static int stack(g_graph *g, const char *name, ferry_dtype dt, int64_t rows, int64_t cols)
{
    const int64_t d[3] = {E, rows, cols};
    return input(g, name, dt, 3, d);
}

static g_moe_opts opts(int64_t k)
{
    return (g_moe_opts){.num_experts = E, .top_k = k, .act = G_SILU};
}

/* The fused form's moe over x [batch, sequence, H], its inputs of `dt`. */
static int fused(g_graph *g, ferry_dtype dt, const g_moe_opts *o)
{
    int x = tokens(g, "x", dt, H);
    return g_moe(g, "moe", x, tokens(g, "logits", dt, E), stack(g, "gate_up", dt, 2 * FF, H),
                 stack(g, "down", dt, H, FF), G_NONE, o);
}

/* A builder call refused by inference: G_NONE, and an error naming the node and saying why. */
static void refused(g_graph *g, int v, const char *why)
{
    assert_int_equal(v, G_NONE);
    if (!strstr(g->err.msg, "'/moe'") || !strstr(g->err.msg, why))
        fail_msg("builder said '%s', expected '/moe' and '%s'", g->err.msg, why);
    g_free(g);
}

static void moe_keeps_x_shape_in_both_forms(void **state)
{
    (void)state;
    const ferry_dtype dts[3] = {FERRY_F32, FERRY_F16, FERRY_BF16};
    for (int k = 0; k < 3; k++) {
        g_graph *g = graph();
        g_moe_opts o = opts(2);
        int y = fused(g, dts[k], &o);
        int x = tokens(g, "x2", dts[k], H);
        int y2 = g_moe(g, "separate", x, tokens(g, "logits2", dts[k], E),
                       stack(g, "gate", dts[k], FF, H), stack(g, "down2", dts[k], H, FF),
                       stack(g, "up", dts[k], FF, H), &o);
        assert_true(g_ok(g));
        assert_int_equal(g->values[y].dtype, dts[k]);
        assert_true(g_shape_eq(&g->values[y].shape, &g->values[x].shape));
        assert_true(g_shape_eq(&g->values[y2].shape, &g->values[x].shape));
        g_free(g);
    }
    /* tokens as rows [n, h], and every expert chosen (top_k = E) */
    g_graph *g = graph();
    g_moe_opts o = opts(E);
    const int64_t x2[2] = {5, H}, l2[2] = {5, E};
    int x = input(g, "x", FERRY_F32, 2, x2);
    int y = g_moe(g, "moe", x, input(g, "logits", FERRY_F32, 2, l2),
                  stack(g, "gate_up", FERRY_F32, 2 * FF, H), stack(g, "down", FERRY_F32, H, FF),
                  G_NONE, &o);
    assert_true(g_ok(g));
    assert_true(g_shape_eq(&g->values[y].shape, &g->values[x].shape));
    g_free(g);
}

static void moe_refuses_bad_options(void **state)
{
    (void)state;
    g_graph *g = graph();
    g_moe_opts o = opts(E + 1);
    refused(g, fused(g, FERRY_F32, &o), "1 <= top_k <= num_experts");
    g = graph();
    o = opts(0);
    refused(g, fused(g, FERRY_F32, &o), "1 <= top_k <= num_experts");
    g = graph();
    o = opts(1);
    o.num_experts = 0;
    o.top_k = 0;
    refused(g, fused(g, FERRY_F32, &o), "num_experts >= 1");
    g = graph();
    o = opts(2);
    o.num_experts = E + 2; /* the weights say E: so do the logits' extent */
    refused(g, fused(g, FERRY_F32, &o), "router_logits must be [..., num_experts]");
    g = graph();
    o = opts(2);
    o.act = G_ADD;
    refused(g, fused(g, FERRY_F32, &o), "silu, gelu or gelu_tanh");
}

static void moe_refuses_bad_shapes(void **state)
{
    (void)state;
    g_moe_opts o = opts(2);
    const ferry_dtype f = FERRY_F32;
    /* x of rank 1, or not float */
    g_graph *g = graph();
    const int64_t h1[1] = {H}, e1[1] = {E};
    refused(g, g_moe(g, "moe", input(g, "x", f, 1, h1), input(g, "l", f, 1, e1),
                     stack(g, "gu", f, 2 * FF, H), stack(g, "d", f, H, FF), G_NONE, &o),
            "rank 2 to 7");
    g = graph();
    refused(g, g_moe(g, "moe", tokens(g, "x", FERRY_I64, H), tokens(g, "l", FERRY_I64, E),
                     stack(g, "gu", f, 2 * FF, H), stack(g, "d", f, H, FF), G_NONE, &o),
            "x must be a float");
    /* logits of another dtype, or of other tokens */
    g = graph();
    refused(g, g_moe(g, "moe", tokens(g, "x", f, H), tokens(g, "l", FERRY_F16, E),
                     stack(g, "gu", f, 2 * FF, H), stack(g, "d", f, H, FF), G_NONE, &o),
            "of x's dtype");
    g = graph();
    const int64_t l3[3] = {2, 3, E};
    refused(g, g_moe(g, "moe", tokens(g, "x", f, H), input(g, "l", f, 3, l3),
                     stack(g, "gu", f, 2 * FF, H), stack(g, "d", f, H, FF), G_NONE, &o),
            "x's leading dims");
    g = graph();
    g_dim unknown[3] = {g_dim_sym(BATCH), g_dim_unknown(), g_dim_const(H)};
    g_dim unknown_e[3] = {g_dim_sym(BATCH), g_dim_unknown(), g_dim_const(E)};
    refused(g, g_moe(g, "moe", g_input(g, "x", f, 3, unknown), g_input(g, "l", f, 3, unknown_e),
                     stack(g, "gu", f, 2 * FF, H), stack(g, "d", f, H, FF), G_NONE, &o),
            "known extents");
    /* a fused gate_up of odd rows; weights of another dtype; a 2-D weight */
    g = graph();
    refused(g, g_moe(g, "moe", tokens(g, "x", f, H), tokens(g, "l", f, E),
                     stack(g, "gu", f, 2 * FF + 1, H), stack(g, "d", f, H, FF), G_NONE, &o),
            "[E, 2*ff, h]");
    g = graph();
    refused(g, g_moe(g, "moe", tokens(g, "x", f, H), tokens(g, "l", f, E),
                     stack(g, "gu", FERRY_F16, 2 * FF, H), stack(g, "d", f, H, FF), G_NONE, &o),
            "of x's dtype, constant extents");
    g = graph();
    const int64_t w2[2] = {2 * FF, H};
    refused(g, g_moe(g, "moe", tokens(g, "x", f, H), tokens(g, "l", f, E),
                     input(g, "gu", f, 2, w2), stack(g, "d", f, H, FF), G_NONE, &o),
            "[E, rows, cols]");
    /* symbolic expert extents */
    g = graph();
    g_dim sym3[3] = {g_dim_const(E), g_dim_sym(SEQUENCE), g_dim_const(H)};
    refused(g, g_moe(g, "moe", tokens(g, "x", f, H), tokens(g, "l", f, E),
                     g_input(g, "gu", f, 3, sym3), stack(g, "d", f, H, FF), G_NONE, &o),
            "constant extents");
    /* another number of experts in one weight */
    g = graph();
    const int64_t d5[3] = {E + 1, H, FF};
    refused(g, g_moe(g, "moe", tokens(g, "x", f, H), tokens(g, "l", f, E),
                     stack(g, "gu", f, 2 * FF, H), input(g, "d", f, 3, d5), G_NONE, &o),
            "first extent must be num_experts");
    /* h other than x's; down not [E, h, ff] */
    g = graph();
    refused(g, g_moe(g, "moe", tokens(g, "x", f, H), tokens(g, "l", f, E),
                     stack(g, "gu", f, 2 * FF, H + 2), stack(g, "d", f, H + 2, FF), G_NONE,
                     &o),
            "h being x's last extent");
    g = graph();
    refused(g, g_moe(g, "moe", tokens(g, "x", f, H), tokens(g, "l", f, E),
                     stack(g, "gu", f, 2 * FF, H), stack(g, "d", f, H, 2 * FF), G_NONE, &o),
            "down [E, h, ff]");
    /* separate gate and up that disagree; down sized for a fused ff with them */
    g = graph();
    refused(g, g_moe(g, "moe", tokens(g, "x", f, H), tokens(g, "l", f, E),
                     stack(g, "g", f, FF, H), stack(g, "d", f, H, FF), stack(g, "u", f, 2 * FF, H),
                     &o),
            "up must be [E, ff, h] like gate");
    g = graph();
    refused(g, g_moe(g, "moe", tokens(g, "x", f, H), tokens(g, "l", f, E),
                     stack(g, "g", f, 2 * FF, H), stack(g, "d", f, H, FF),
                     stack(g, "u", f, 2 * FF, H), &o),
            "down [E, h, ff]");
}

/* The moe options on an op that reads none are refused, as every other attribute is; a moe
 * node without its options is too. */
static void options_only_on_moe(void **state)
{
    (void)state;
    g_graph *g = graph();
    int x = tokens(g, "x", FERRY_F32, H);
    g_output(g, g_unary(g, G_NEG, "neg", x), "y");
    g_remove_dead(g);
    fy_err err = {0};
    assert_int_equal(g_check(g, &err), FERRY_OK);
    static g_moe_opts o = {.num_experts = E, .top_k = 1, .act = G_SILU};
    g->nodes[0].a.moe = &o;
    assert_int_equal(g_check(g, &err), FERRY_ERR_INTERNAL);
    if (!strstr(err.msg, "an attribute the op does not take is set"))
        fail_msg("g_check said '%s'", err.msg);
    g->nodes[0].a.moe = NULL;
    g_free(g);

    g = graph();
    refused(g, fused(g, FERRY_F32, NULL), "option struct");
}

/* A target that keeps moe as it is (a backend with its own kernel would): the copied node owns
 * a copy of the options. */
static g_legality keep_moe(const g_target *t, const g_graph *g, const g_node *n)
{
    (void)t;
    (void)g;
    return n->op == G_MOE || !g_op_is_semantic(n->op) ? G_NATIVE : G_LOWER;
}

static void options_copied_and_dumped(void **state)
{
    (void)state;
    g_graph *g = graph();
    g_moe_opts o = {.num_experts = E, .top_k = 2, .norm_topk_prob = true, .scale_f32 = true,
                    .act = G_GELU_TANH};
    int y = fused(g, FERRY_F16, &o);
    g_output(g, y, "y");
    assert_true(g_ok(g));
    g_remove_dead(g);
    fy_err err = {0};
    assert_int_equal(g_check(g, &err), FERRY_OK);
    const g_target keep = {.name = "keep-moe", .legal = keep_moe};
    g_graph *low = g_legalize(g, &keep, &err);
    if (!low)
        fail_msg("g_legalize: %s", err.msg);
    const g_node *a = &g->nodes[g->values[y].producer], *b = NULL;
    for (size_t i = 0; i < low->n_nodes; i++)
        if (!low->nodes[i].dead && low->nodes[i].op == G_MOE)
            b = &low->nodes[i];
    assert_non_null(b);
    assert_ptr_not_equal(a->a.moe, b->a.moe);
    assert_memory_equal(a->a.moe, b->a.moe, sizeof *a->a.moe);
    char *text = g_dump(low);
    assert_non_null(text);
    const char *want = "moe(x, logits, gate_up, down) {experts=4 top_k=2 norm_topk_prob=1 "
                       "scale_f32=1 act=gelu_tanh}";
    if (!strstr(text, want))
        fail_msg("no '%s' in:\n%s", want, text);
    free(text);
    g_free(low);
    g_free(g);
}

/* Every backend's target lowers moe in both forms to the primitives the generic lowering
 * makes (no moe, and no silu left where the target does not keep silu; torch does:
 * aten.silu), but OpenVINO's with gate and up apart: its tiled block (Tile and three batched
 * MatMuls of its own, the routing scattered into zeros). The ort targets' MoE needs the
 * experts' checkpoint tensors (ort_moe_from_expert_tensors). */
static void every_target_lowers_moe(void **state)
{
    (void)state;
    const g_target *targets[] = {&onnx_standard_target, &ort_cpu_target, &ort_cuda_target,
                                 &openvino_target, &torch_target, &g_target_primitives};
    for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
        for (int separate = 0; separate < 2; separate++) {
            g_graph *g = graph();
            g_moe_opts o = opts(2);
            o.norm_topk_prob = separate;
            int y;
            if (separate) {
                int x = tokens(g, "x", FERRY_F16, H);
                y = g_moe(g, "moe", x, tokens(g, "logits", FERRY_F16, E),
                          stack(g, "gate", FERRY_F16, FF, H), stack(g, "down", FERRY_F16, H, FF),
                          stack(g, "up", FERRY_F16, FF, H), &o);
            } else {
                y = fused(g, FERRY_F16, &o);
            }
            g_output(g, y, "y");
            g_remove_dead(g);
            fy_err err = {0};
            assert_int_equal(g_check(g, &err), FERRY_OK);
            g_graph *low = g_legalize(g, targets[t], &err);
            if (!low)
                fail_msg("%s: %s", targets[t]->name, err.msg);
            int count[G_OP_COUNT] = {0};
            for (size_t i = 0; i < low->n_nodes; i++)
                if (!low->nodes[i].dead)
                    count[low->nodes[i].op]++;
            bool tiled = targets[t] == &openvino_target && separate;
            assert_int_equal(count[G_MOE], 0);
            assert_int_equal(count[G_TOPK], 1);
            assert_int_equal(count[G_GATHER_ELEMENTS], !tiled);
            assert_int_equal(count[G_MATMUL], tiled ? 0 : separate ? 3 : 2);
            assert_int_equal(count[G_EXTERN], tiled ? 4 : 0);
            assert_int_equal(count[G_SCATTER_ELEMENTS], tiled);
            assert_int_equal(count[G_SILU], targets[t] == &torch_target);
            const g_value *out = &low->values[low->outputs[0]];
            assert_int_equal(out->dtype, FERRY_F16);
            assert_true(g_shape_eq(&out->shape, &g->values[y].shape));
            g_free(low);
            g_free(g);
        }
    }
}

/* Expert weights quantized by a recipe (a stack of per-expert tensors, each blocked alike):
 * targets that dequantize a stack (onnx-standard, ort-cpu where no kernel takes it, openvino)
 * read it through one dequantize node of its [E, out, in] shape; torch, which writes float
 * weights only, refuses naming the target and the weight. */
static void quantized_experts_dequantized_or_refused(void **state)
{
    (void)state;
    st_tensor t = {.name = "model.layers.0.mlp.experts.0.gate_proj.weight", .dtype = FERRY_F32,
                   .ndim = 2, .shape = {FF, H}, .numel = FF * H, .begin = 0,
                   .end = FF * H * 4};
    const st_tensor *list[E] = {&t, &t, &t, &t};
    const g_target *targets[] = {&onnx_standard_target, &ort_cpu_target, &openvino_target,
                                 &torch_target};
    for (size_t k = 0; k < sizeof targets / sizeof targets[0]; k++) {
        g_graph *g = graph();
        g_weight w = w_join(list, E, true, FERRY_F32);
        w.quant = (w_quant){.bits = 4, .block = 32, .symmetric = true};
        int gate = g_weight_value(g, "model.layers.0.mlp.experts.gate_proj", &w);
        g_moe_opts o = opts(2);
        int x = tokens(g, "x", FERRY_F32, H);
        int y = g_moe(g, "moe", x, tokens(g, "logits", FERRY_F32, E), gate,
                      stack(g, "down", FERRY_F32, H, FF), stack(g, "up", FERRY_F32, FF, H), &o);
        g_output(g, y, "y");
        assert_true(g_ok(g));
        g_remove_dead(g);
        fy_err err = {0};
        if (g_check(g, &err) != FERRY_OK)
            fail_msg("g_check: %s", err.msg);
        g_graph *low = g_legalize(g, targets[k], &err);
        if (targets[k] == &torch_target) {
            if (low)
                fail_msg("%s lowered quantized experts", targets[k]->name);
            assert_int_equal(err.status, FERRY_ERR_UNSUPPORTED);
            if (!strstr(err.msg, targets[k]->name) || !strstr(err.msg, "4-bit quantized") ||
                !strstr(err.msg, "experts.gate_proj"))
                fail_msg("message: %s", err.msg);
        } else {
            if (!low)
                fail_msg("%s: %s", targets[k]->name, err.msg);
            int dequantized = 0;
            for (size_t i = 0; i < low->n_nodes; i++) {
                const g_node *n = &low->nodes[i];
                if (n->dead || n->op != G_DEQUANTIZE)
                    continue;
                const g_value *q = &low->values[n->in[0]];
                assert_int_equal(q->weight.quant.bits, 4);
                assert_int_equal(low->values[n->out[0]].shape.rank, 3);
                dequantized++;
            }
            assert_int_equal(dequantized, 1);
            g_free(low);
        }
        g_free(g);
    }
}

/* Experts stacked from their checkpoint tensors (gate and up joined per expert): ort-cpu at
 * fp32 and ort-cuda at fp16 write one com.microsoft.MoE over fc1 = the same sources with each
 * expert's rows interleaved (gate i at 2i, up i at 2i + 1) and the down stack; ort-cpu at fp16
 * (its kernel is fp32) and ort-webgpu keep the generic lowering. */
static void ort_moe_from_expert_tensors(void **state)
{
    (void)state;
    st_tensor gate = {.name = "gate", .dtype = FERRY_F32, .ndim = 2, .shape = {FF, H},
                      .numel = FF * H, .end = FF * H * 4};
    st_tensor up = gate, down = gate;
    up.name = "up";
    down.name = "down";
    down.shape[0] = H;
    down.shape[1] = FF;
    const st_tensor *pairs[2 * E], *downs[E];
    for (int e = 0; e < E; e++) {
        pairs[2 * e] = &gate;
        pairs[2 * e + 1] = &up;
        downs[e] = &down;
    }
    const struct {
        const g_target *target;
        ferry_dtype dt;
        bool fused;
    } cases[] = {{&ort_cpu_target, FERRY_F32, true}, {&ort_cuda_target, FERRY_F16, true},
                 {&ort_cpu_target, FERRY_F16, false}, {&ort_webgpu_target, FERRY_F32, false}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        g_graph *g = graph();
        g_weight w = w_join(pairs, 2 * E, true, cases[k].dt);
        w.stack_group = 2;
        int gate_up = g_weight_value(g, "experts.gate_up_proj", &w);
        w = w_join(downs, E, true, cases[k].dt);
        int dw = g_weight_value(g, "experts.down_proj", &w);
        g_moe_opts o = opts(2);
        o.norm_topk_prob = true;
        int x = tokens(g, "x", cases[k].dt, H);
        int y = g_moe(g, "moe", x, tokens(g, "logits", cases[k].dt, E), gate_up, dw, G_NONE, &o);
        g_output(g, y, "y");
        fy_err err = {0};
        if (g_check(g, &err) != FERRY_OK)
            fail_msg("g_check: %s", err.msg);
        g_graph *low = g_legalize(g, cases[k].target, &err);
        if (!low)
            fail_msg("%s: %s", cases[k].target->name, err.msg);
        const g_node *moe = NULL;
        for (size_t i = 0; i < low->n_nodes; i++)
            if (!low->nodes[i].dead && low->nodes[i].op == G_EXTERN &&
                strcmp(low->nodes[i].a.ext->op_type, "MoE") == 0)
                moe = &low->nodes[i];
        assert_int_equal(moe != NULL, cases[k].fused);
        if (moe) {
            const g_extern *e = moe->a.ext;
            assert_string_equal(e->domain, "com.microsoft");
            int checked = 0;
            for (int i = 0; i < e->n_attr; i++) {
                const g_ext_attr *a = &e->attr[i];
                if (strcmp(a->name, "k") == 0 || strcmp(a->name, "swiglu_fusion") == 0 ||
                    strcmp(a->name, "normalize_routing_weights") == 0)
                    checked += a->i == (strcmp(a->name, "k") == 0 ? 2 : 1);
                if (strcmp(a->name, "activation_type") == 0)
                    checked += strcmp(a->s, "swiglu") == 0;
            }
            assert_int_equal(checked, 4);
            const g_value *fc1 = &low->values[moe->in[2]];
            assert_int_equal(fc1->kind, GV_WEIGHT);
            assert_int_equal(fc1->weight.perm, W_PERM_INTERLEAVE_HALVES);
            assert_int_equal(fc1->weight.perm_group, 2 * FF);
            assert_int_equal(fc1->weight.stack_group, 2);
            assert_ptr_equal(w_src(&fc1->weight, 1), &up);
            assert_int_equal(moe->in[3], G_NONE);
            assert_ptr_equal(w_src(&low->values[moe->in[4]].weight, 0), &down);
        }
        g_free(low);
        g_free(g);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(moe_keeps_x_shape_in_both_forms),
        cmocka_unit_test(moe_refuses_bad_options),
        cmocka_unit_test(moe_refuses_bad_shapes),
        cmocka_unit_test(options_only_on_moe),
        cmocka_unit_test(options_copied_and_dumped),
        cmocka_unit_test(every_target_lowers_moe),
        cmocka_unit_test(quantized_experts_dequantized_or_refused),
        cmocka_unit_test(ort_moe_from_expert_tensors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
