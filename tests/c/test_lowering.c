/* test_lowering.c — what legalization makes of semantic ops, checked on the graph alone: no
 * semantic op survives; rotary tables are built once per distinct rope setting (the defect of
 * 6fe3928 keyed them by positions and dtype only, so a second theta silently reused the first
 * table); layers asking for the same mask share one; skip_rms_norm is one add feeding one
 * rms_norm; the OpenVINO target's attention and compressed weights. And g_check's refusals of
 * malformed nodes. That the lowered graphs compute the
 * right numbers is tests/python/test_op_conformance.py's part. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "backends/backend.h"
#include "backends/onnx/onnx.h"
#include "backends/openvino/openvino.h"
#include "backends/torch/torch.h"
#include "ir/legalize.h"
#include "ir/lower/rope_freq.h"

static int input(g_graph *g, const char *name, ferry_dtype dt, int rank, const int64_t *dims)
{
    g_dim d[G_MAX_RANK];
    for (int i = 0; i < rank; i++)
        d[i] = g_dim_const(dims[i]);
    return g_input(g, name, dt, rank, d);
}

static g_graph *legalize(g_graph *src, const g_target *t)
{
    fy_err err = {0};
    assert_true(g_ok(src));
    g_remove_dead(src);
    assert_int_equal(g_check(src, &err), FERRY_OK);
    g_graph *out = g_legalize(src, t, &err);
    if (!out)
        fail_msg("g_legalize for %s: %s", t->name, err.msg);
    return out;
}

static int count_op(const g_graph *g, g_op op)
{
    int n = 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        n += !g->nodes[i].dead && g->nodes[i].op == op;
    return n;
}

/* The k-th live node of `op` (k from 0). */
static const g_node *nth(const g_graph *g, g_op op, int k)
{
    int seen = 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].op == op && seen++ == k)
            return &g->nodes[i];
    fail_msg("no %s node #%d", g_op_name(op), k);
    return NULL;
}

static const g_node *producer(const g_graph *g, int v)
{
    assert_int_equal(g->values[v].kind, GV_NODE);
    return &g->nodes[g->values[v].producer];
}

static const g_rope_opts ROPE_16 = {.rope = {.type = ROPE_DEFAULT, .theta = 10000.0},
                                    .head_dim = 16, .rotary_dim = 16,
                                    .max_position_embeddings = 128};

/* One node of every semantic op, in a chain, so the list below cannot miss one: an op added to
 * ops.def without a lowering (or with one that leaves it behind) fails here. */
static g_graph *every_semantic_op(void)
{
    g_graph *g = g_new();
    const int64_t x3[3] = {2, 5, 16}, bs[2] = {2, 5}, n[1] = {16}, mat[2] = {16, 16};
    const int64_t heads[4] = {0, 0, 1, 16};
    int x = input(g, "x", FERRY_F32, 3, x3), w = input(g, "w", FERRY_F32, 1, n);
    int bias = input(g, "bias", FERRY_F32, 1, n), table = input(g, "table", FERRY_F32, 2, mat);
    int ids = input(g, "input_ids", FERRY_I64, 2, bs);
    int pos = input(g, "position_ids", FERRY_I64, 2, bs);
    int mask = input(g, "attention_mask", FERRY_I64, 2, bs);
    int h = g_embedding(g, "embedding", table, ids), sum;
    h = g_rms_norm(g, "rms_norm", h, w, 1e-6, 1.0, true);
    h = g_skip_rms_norm(g, "skip_rms_norm", h, x, w, 1e-6, 0.0, false, &sum);
    h = g_layer_norm(g, "layer_norm", h, w, bias, 1e-5);
    int layer_sum;
    h = g_skip_layer_norm(g, "skip_layer_norm", h, x, w, bias, 1e-5, &layer_sum);
    h = g_linear(g, "linear", h, table, bias);
    h = g_unary(g, G_SILU, "silu", h);
    h = g_unary(g, G_GELU, "gelu", h);
    h = g_unary(g, G_GELU_TANH, "gelu_tanh", h);
    h = g_softcap(g, "softcap", h, 30.0);
    int q = g_rope(g, "rope", g_reshape_spec(g, "heads", h, 4, heads), pos, &ROPE_16);
    g_attn_opts ao = {.num_heads = 1, .num_kv_heads = 1, .head_dim = 16, .scale = 0.25,
                      .mask = G_MASK_CAUSAL};
    g_output(g, g_attention(g, "attention", q, q, q, mask, G_NONE, G_NONE, G_NONE, &ao, NULL,
                            NULL), "y");
    g_output(g, sum, "sum");
    g_output(g, layer_sum, "layer_sum");
    const int64_t logits3[3] = {2, 5, 4}, gate_up[3] = {4, 16, 16}, down[3] = {4, 16, 8};
    g_moe_opts mo = {.num_experts = 4, .top_k = 2, .act = G_SILU};
    g_output(g, g_moe(g, "moe", x, input(g, "router_logits", FERRY_F32, 3, logits3),
                      input(g, "gate_up", FERRY_F32, 3, gate_up),
                      input(g, "down", FERRY_F32, 3, down), G_NONE, &mo), "moe");
    return g;
}

static void no_semantic_op_remains(void **state)
{
    (void)state;
    const g_target *targets[2] = {&g_target_primitives, &onnx_standard_target};
    for (int t = 0; t < 2; t++) {
        g_graph *src = every_semantic_op();
        g_graph *low = legalize(src, targets[t]);
        for (int op = 0; op < G_OP_COUNT; op++)
            if (g_op_is_semantic((g_op)op) && count_op(src, (g_op)op) == 0)
                fail_msg("the source graph lacks a %s node", g_op_name((g_op)op));
        for (size_t i = 0; i < low->n_nodes; i++) {
            const g_node *nd = &low->nodes[i];
            if (nd->dead)
                continue;
            if (g_op_is_semantic(nd->op) || targets[t]->legal(targets[t], low, nd) != G_NATIVE)
                fail_msg("%s: node '%s' (%s) is left for the printer", targets[t]->name,
                         nd->name, g_op_name(nd->op));
        }
        g_free(low);
        g_free(src);
    }
}

/* Two ropes over one x and one positions input, the second with theta `theta_2`. */
static g_graph *two_ropes(double theta_2)
{
    g_graph *g = g_new();
    const int64_t x4[4] = {2, 5, 3, 16}, bs[2] = {2, 5};
    int x = input(g, "x", FERRY_F32, 4, x4), pos = input(g, "position_ids", FERRY_I64, 2, bs);
    g_rope_opts other = ROPE_16;
    other.rope.theta = theta_2;
    g_output(g, g_rope(g, "rope", x, pos, &ROPE_16), "y");
    g_output(g, g_rope(g, "rope_2", x, pos, &other), "y_2");
    return g;
}

/* The live fp32 [8] constants: the inverse frequencies of a rotary_dim 16 rope. */
static int inv_freq_consts(const g_graph *g, const g_value **found, int max)
{
    int n = 0;
    for (size_t i = 0; i < g->n_values; i++) {
        const g_value *v = &g->values[i];
        int64_t len;
        if (v->kind == GV_CONST && v->n_uses > 0 && v->dtype == FERRY_F32 &&
            v->shape.rank == 1 && g_dim_is_const(v->shape.d[0], &len) && len == 8 && n < max)
            found[n++] = v;
    }
    return n;
}

static bool holds_inv_freq(const g_value *v, double theta)
{
    rope_config rc = ROPE_16.rope;
    rc.theta = theta;
    float want[8];
    rope_inv_freq(&rc, 16, 128, want);
    return v->nbytes == sizeof want && memcmp(v->data, want, sizeof want) == 0;
}

static void rope_tables_per_setting(void **state)
{
    (void)state;
    const g_value *c[4];
    g_graph *src = two_ropes(1e6);
    g_graph *low = legalize(src, &g_target_primitives);
    assert_int_equal(inv_freq_consts(low, c, 4), 2);
    assert_true((holds_inv_freq(c[0], 1e4) && holds_inv_freq(c[1], 1e6)) ||
                (holds_inv_freq(c[0], 1e6) && holds_inv_freq(c[1], 1e4)));
    assert_int_equal(count_op(low, G_COS), 2);
    assert_int_equal(count_op(low, G_SIN), 2);
    g_free(low);
    g_free(src);

    src = two_ropes(ROPE_16.rope.theta);
    low = legalize(src, &g_target_primitives);
    assert_int_equal(inv_freq_consts(low, c, 4), 1);
    assert_true(holds_inv_freq(c[0], 1e4));
    assert_int_equal(count_op(low, G_COS), 1); /* one table, read by both */
    assert_int_equal(count_op(low, G_SIN), 1);
    g_free(low);
    g_free(src);
}

/* Three full-attention layers and one sliding-window layer over one padding mask input. */
static void layers_share_one_mask(void **state)
{
    (void)state;
    g_graph *g = g_new();
    const int64_t x4[4] = {2, 5, 2, 8}, bs[2] = {2, 5};
    int q = input(g, "q", FERRY_F32, 4, x4), mask = input(g, "attention_mask", FERRY_I64, 2, bs);
    for (int l = 0; l < 4; l++) {
        char name[32];
        g_attn_opts o = {.num_heads = 2, .num_kv_heads = 2, .head_dim = 8, .scale = 0.35,
                         .sliding_window = l == 3 ? 3 : 0, .mask = G_MASK_CAUSAL};
        g_scope(g, "/model/layers.%d", l);
        snprintf(name, sizeof name, "y_%d", l);
        g_output(g, g_attention(g, "attn", q, q, q, mask, G_NONE, G_NONE, G_NONE, &o, NULL,
                                NULL), name);
    }
    g_graph *low = legalize(g, &g_target_primitives);
    /* each layer adds a bias to its scores (Add_bias, in layer order), the bias made once a
     * mask: one Where(mask, 0, min) for the causal mask, one for the sliding one */
    assert_int_equal(count_op(low, G_WHERE), 2);
    int bias[4], seen = 0;
    for (size_t i = 0; i < low->n_nodes; i++) {
        const g_node *n = &low->nodes[i];
        size_t len = strlen(n->name);
        if (!n->dead && n->op == G_ADD && len >= 9 && !strcmp(n->name + len - 9, "/Add_bias")) {
            assert_true(seen < 4);
            /* the scores plus the shared bias itself (multi-head: no group axis to add) */
            bias[seen++] = n->in[1];
        }
    }
    assert_int_equal(seen, 4);
    assert_int_equal(bias[1], bias[0]);
    assert_int_equal(bias[2], bias[0]);
    assert_int_not_equal(bias[3], bias[0]);
    assert_int_equal(producer(low, bias[0])->op, G_WHERE);
    assert_int_equal(producer(low, bias[3])->op, G_WHERE);
    /* two masks built in all: the causal one, and the sliding one (causal + window) */
    assert_int_equal(count_op(low, G_LESS_EQUAL), 2);
    assert_int_equal(count_op(low, G_GREATER), 1);
    g_free(low);
    g_free(g);
}

/* A static-cache model with sliding windows builds one windowed mask per layer (each layer
 * reads its own write position): far more shared pieces than any fixed table would hold, each
 * under its own name. */
static void many_windowed_static_layers(void **state)
{
    (void)state;
    g_graph *g = g_new();
    const int64_t q4[4] = {1, 3, 2, 8}, m4[4] = {1, 1, 3, 16}, c4[4] = {1, 2, 16, 8},
                  one[1] = {1};
    int q = input(g, "q", FERRY_F32, 4, q4), mask = input(g, "attention_mask", FERRY_BOOL, 4, m4);
    enum { LAYERS = 48 };
    for (int l = 0; l < LAYERS; l++) {
        char name[48];
        snprintf(name, sizeof name, "position_%d", l);
        int pos = input(g, name, FERRY_I64, 1, one);
        snprintf(name, sizeof name, "k_%d", l);
        int kc = input(g, name, FERRY_F32, 4, c4);
        snprintf(name, sizeof name, "v_%d", l);
        int vc = input(g, name, FERRY_F32, 4, c4);
        g_attn_opts o = {.num_heads = 2, .num_kv_heads = 2, .head_dim = 8, .scale = 0.35,
                         .sliding_window = 4, .mask = G_MASK_GIVEN, .cache = G_CACHE_STATIC};
        int pk, pv;
        g_scope(g, "/model/layers.%d", l);
        int y = g_attention(g, "attn", q, q, q, mask, kc, vc, pos, &o, &pk, &pv);
        snprintf(name, sizeof name, "y_%d", l);
        g_output(g, y, name);
        snprintf(name, sizeof name, "present_k_%d", l);
        g_output(g, pk, name);
        snprintf(name, sizeof name, "present_v_%d", l);
        g_output(g, pv, name);
    }
    g_graph *low = legalize(g, &g_target_primitives);
    assert_int_equal(count_op(low, G_GREATER), LAYERS);
    g_free(low);
    g_free(g);
}

static void skip_rms_norm_is_one_add_and_one_norm(void **state)
{
    (void)state;
    g_graph *g = g_new();
    const int64_t x3[3] = {2, 5, 16}, n[1] = {16};
    int x = input(g, "x", FERRY_F32, 3, x3), skip = input(g, "skip", FERRY_F32, 3, x3);
    int w = input(g, "w", FERRY_F32, 1, n), sum;
    g_output(g, g_skip_rms_norm(g, "norm", x, skip, w, 1e-6, 0.0, false, &sum), "y");
    g_output(g, sum, "sum");
    g_graph *low = legalize(g, &g_target_primitives);
    int x_l = low->inputs[0], skip_l = low->inputs[1], sum_l = low->outputs[1];
    /* the residual add, and rms_norm's var + eps: nothing else adds */
    assert_int_equal(count_op(low, G_ADD), 2);
    const g_node *add = producer(low, sum_l);
    assert_int_equal(add->op, G_ADD);
    assert_true((add->in[0] == x_l && add->in[1] == skip_l) ||
                (add->in[0] == skip_l && add->in[1] == x_l));
    /* one rms_norm decomposition, and it normalizes the sum (fp32: no casts) */
    assert_int_equal(count_op(low, G_REDUCE_MEAN), 1);
    assert_int_equal(count_op(low, G_SQRT), 1);
    assert_int_equal(count_op(low, G_RECIPROCAL), 1);
    const g_node *square = producer(low, nth(low, G_REDUCE_MEAN, 0)->in[0]);
    assert_int_equal(square->op, G_MUL);
    assert_int_equal(square->in[0], sum_l);
    assert_int_equal(square->in[1], sum_l);
    const g_node *scaled = producer(low, low->outputs[0]);
    assert_int_equal(scaled->op, G_MUL);
    assert_int_equal(scaled->in[1], low->inputs[2]);
    g_free(low);
    g_free(g);
}

/* x -> add(x, x) -> sqrt -> y, and an rms_norm beside it: g_check accepts it as built. */
static g_graph *small_graph(void)
{
    g_graph *g = g_new();
    const int64_t n[1] = {4};
    int x = input(g, "x", FERRY_F32, 1, n);
    int y = g_unary(g, G_SQRT, "sqrt", g_binary(g, G_ADD, "add", x, x));
    g_output(g, y, "y");
    g_output(g, g_rms_norm(g, "norm", x, x, 1e-6, 0.0, false), "z");
    g_remove_dead(g);
    return g;
}

static void check_refuses(g_graph *g, const char *why)
{
    fy_err err = {0};
    assert_int_equal(g_check(g, &err), FERRY_ERR_INTERNAL);
    if (!strstr(err.msg, why))
        fail_msg("g_check said '%s', expected '%s'", err.msg, why);
}

static void check_refuses_malformed_nodes(void **state)
{
    (void)state;
    fy_err err = {0};
    g_graph *g = small_graph();
    g_node *add = &g->nodes[0], *sqrt_node = &g->nodes[1], *norm = &g->nodes[2];
    assert_int_equal(g_check(g, &err), FERRY_OK);

    add->a.axis = 1; /* add reads no axis */
    check_refuses(g, "an attribute the op does not take is set");
    add->a.axis = 0;
    norm->a.cap = 5.0; /* nor does rms_norm read a cap */
    check_refuses(g, "an attribute the op does not take is set");
    norm->a.cap = 0;

    sqrt_node->n_out = 2;
    sqrt_node->out[1] = g->inputs[0];
    check_refuses(g, "recorded output count disagrees with inference");
    sqrt_node->n_out = 1;

    add->in[1] = sqrt_node->out[0]; /* read before it is made */
    check_refuses(g, "input is produced later");
    add->in[1] = add->in[0];

    assert_int_equal(g_check(g, &err), FERRY_OK); /* each refusal was the mutation's */
    g_free(g);
}

/* A builder call refused at build time: G_NONE, and the graph's error says why. */
static void refused(g_graph *g, int v, const char *why)
{
    assert_int_equal(v, G_NONE);
    if (!strstr(g->err.msg, why))
        fail_msg("builder said '%s', expected '%s'", g->err.msg, why);
    g_free(g);
}

/* A graph over x [batch, sequence, 4] (symbolic) and q/k/v [batch, sequence, 2, 8]. */
static g_graph *symbolic_graph(int *x, int *q)
{
    g_graph *g = g_new();
    g_symtab_add(&g->syms, "batch", 1, 0, 1);
    g_symtab_add(&g->syms, "sequence", 1, 0, 8);
    g_dim xd[3] = {g_dim_sym(0), g_dim_sym(1), g_dim_const(4)};
    g_dim qd[4] = {g_dim_sym(0), g_dim_sym(1), g_dim_const(2), g_dim_const(8)};
    *x = g_input(g, "x", FERRY_F32, 3, xd);
    *q = g_input(g, "q", FERRY_F32, 4, qd);
    return g;
}

/* What inference refuses rather than records: shapes that cannot be, attributes from a file
 * that make no sense, and symbolic dims that name the wrong axis. */
/* ONNX has no bf16 TopK, and onnxruntime no fp16 ScatterElements add: the ONNX target runs
 * both at fp32 between casts, and leaves the fp32 ones as they are. */
static void onnx_runs_some_ops_in_f32(void **state)
{
    (void)state;
    const int64_t x3[3] = {2, 5, 16}, i3[3] = {2, 5, 4};
    for (int half = 0; half < 2; half++) {
        g_graph *g = g_new();
        int x = input(g, "x", half ? FERRY_BF16 : FERRY_F32, 3, x3), idx;
        int h = input(g, "h", half ? FERRY_F16 : FERRY_F32, 3, x3);
        int at = input(g, "at", FERRY_I64, 3, i3), upd = input(g, "upd", g->values[h].dtype, 3, i3);
        g_output(g, g_topk(g, "topk", x, 4, -1, &idx), "values");
        g_output(g, idx, "indices");
        g_output(g, g_scatter_add(g, "scatter_add", h, at, upd, 2), "sum");
        g_graph *low = legalize(g, &onnx_standard_target);
        for (size_t i = 0; i < low->n_nodes; i++) {
            const g_node *n = &low->nodes[i];
            if (!n->dead && (n->op == G_TOPK || n->op == G_SCATTER_ADD))
                assert_int_equal(low->values[n->in[0]].dtype, FERRY_F32);
        }
        assert_int_equal(count_op(low, G_CAST), half ? 5 : 0); /* x, h, upd in; two back */
        assert_int_equal(low->values[low->outputs[0]].dtype, half ? FERRY_BF16 : FERRY_F32);
        assert_int_equal(low->values[low->outputs[1]].dtype, FERRY_I64);
        assert_int_equal(low->values[low->outputs[2]].dtype, half ? FERRY_F16 : FERRY_F32);
        g_free(low);
        g_free(g);
    }
}

/* Each state form has its place in the graph's interface, and g_check holds every state to
 * it: a format's finish that moves a state to another form must move its values too. */
static void states_keep_their_form(void **state)
{
    (void)state;
    const int64_t kv[4] = {1, 2, 8, 4};
    g_graph *g = g_new();
    int past = input(g, "past_key_values.0.key", FERRY_F32, 4, kv);
    int present = g_unary(g, G_NEG, "present", past);
    g_output(g, present, "present.0.key");
    g_state_add(g, "past_key_values.0.key", GS_KEY, 0, past, present, true);
    fy_err err = {0};
    assert_int_equal(g_check(g, &err), FERRY_OK);
    assert_true(g_state_fixed(GS_IN_PLACE) && g_state_fixed(GS_MUTATED) &&
                g_state_fixed(GS_BUFFER) && !g_state_fixed(GS_PAIR) &&
                !g_state_fixed(GS_VARIABLE));
    g->states[0].form = GS_VARIABLE; /* still an input and an output */
    check_refuses(g, "a state the runtime or the program carries is no graph input or output");
    g->states[0].form = GS_BUFFER;
    check_refuses(g, "a state the runtime or the program carries is no graph input or output");
    g->states[0].form = GS_MUTATED; /* still an output */
    check_refuses(g, "a state written into its input needs that input and no output");
    g->states[0].form = GS_FORM_COUNT;
    check_refuses(g, "form");
    g->states[0].form = GS_IN_PLACE;
    g->states[0].kind = GS_KIND_COUNT;
    check_refuses(g, "kind");
    g_free(g);
}

/* Rows of [b, s, 4] read four at a time as [b, ?, 16] (a vision tower's merged patches): the
 * symbol s has to supply the factor 4, which only its value shows; the extent is left to run
 * time, not refused and not made up. */
static void reshape_leaves_a_symbols_factor_to_run_time(void **state)
{
    (void)state;
    int x, q;
    g_graph *g = symbolic_graph(&x, &q);
    g_dim merged[3] = {g_dim_sym(0), g_dim_unknown(), g_dim_const(16)};
    int v = g_reshape(g, "merged", x, 3, merged);
    assert_int_not_equal(v, G_NONE);
    assert_true(g->values[v].shape.d[1].unknown);
    assert_true(g_dim_eq(g->values[v].shape.d[0], g_dim_sym(0)));
    /* ... and where it divides, the extent stays symbolic: [b, s, 4] as [b, ?, 2] is [b, 2s, 2] */
    g_dim halves[3] = {g_dim_sym(0), g_dim_unknown(), g_dim_const(2)};
    v = g_reshape(g, "halves", x, 3, halves);
    assert_true(g_dim_eq(g->values[v].shape.d[1], g_dim_scale(g_dim_sym(1), 2)));
    g_free(g);
}

static void inference_refuses_impossible_nodes(void **state)
{
    (void)state;
    int x, q;
    g_graph *g = symbolic_graph(&x, &q);
    g_dim drop[2] = {g_dim_sym(0), g_dim_const(4)};           /* [b, s, 4] -> [b, 4] */
    refused(g, g_reshape(g, "drop", x, 2, drop), "reshape changes the number of elements");

    g = symbolic_graph(&x, &q);
    g_dim thirds[4] = {g_dim_sym(0), g_dim_sym(1), g_dim_const(3), g_dim_unknown()};
    refused(g, g_reshape(g, "thirds", x, 4, thirds), "does not divide");

    g = symbolic_graph(&x, &q);
    refused(g, g_softcap(g, "cap0", x, 0.0), "cap must be positive");

    g = symbolic_graph(&x, &q);
    const int64_t n4[1] = {4};
    int w = input(g, "w", FERRY_F32, 1, n4);
    refused(g, g_rms_norm(g, "nan_offset", x, w, 1e-6, NAN, true), "offset finite");

    g = symbolic_graph(&x, &q);
    w = input(g, "w", FERRY_F32, 1, n4);
    refused(g, g_rms_norm(g, "cast_first_offset", x, w, 1e-6, 1.0, false), "f32_weight");

    g = symbolic_graph(&x, &q);
    g_dim pd[2] = {g_dim_sym(0), g_dim_sym(1)};
    int pos = g_input(g, "position_ids", FERRY_I64, 2, pd);
    g_rope_opts bad_theta = {.rope = {.type = ROPE_DEFAULT, .theta = 0.0}, .head_dim = 8,
                             .rotary_dim = 8, .max_position_embeddings = 16};
    refused(g, g_rope(g, "theta0", q, pos, &bad_theta), "theta must be positive");

    /* attention: a mask over `batch` keys where `sequence` keys are attended */
    g = symbolic_graph(&x, &q);
    g_dim wrong[2] = {g_dim_sym(0), g_dim_sym(0)};
    int mask = g_input(g, "attention_mask", FERRY_I64, 2, wrong);
    g_attn_opts ao = {.num_heads = 2, .num_kv_heads = 2, .head_dim = 8, .scale = 0.35,
                      .mask = G_MASK_CAUSAL};
    refused(g, g_attention(g, "attn", q, q, q, mask, G_NONE, G_NONE, G_NONE, &ao, NULL, NULL),
            "key length differs");

    /* a recorded dim that names the wrong symbol is caught by the verifier */
    g = symbolic_graph(&x, &q);
    int y = g_unary(g, G_SQRT, "sqrt", x);
    g_output(g, y, "y");
    g_remove_dead(g);
    fy_err err = {0};
    assert_int_equal(g_check(g, &err), FERRY_OK);
    g->values[y].shape.d[1] = g_dim_sym(0); /* sequence recorded as batch */
    check_refuses(g, "recorded output shape disagrees with inference");
    g_free(g);
}

/* A block-quantized weight reaching the generic lowerings, which only write float weights, is
 * refused with a message naming the target and the weight, for linear and for an embedding
 * table; the onnx-standard target dequantizes it (DequantizeLinear, with its zero points
 * stored); a float weight in the same place lowers everywhere. */
static void quantized_weight_dequantized_or_refused(void **state)
{
    (void)state;
    st_tensor t = {.name = "model.layers.0.mlp.up_proj.weight", .dtype = FERRY_F32, .ndim = 2,
                   .shape = {32, 32}, .numel = 32 * 32, .begin = 0, .end = 32 * 32 * 4};
    const int64_t x3[3] = {1, 3, 32}, ids2[2] = {1, 3};
    const g_target *targets[2] = {&onnx_standard_target, &g_target_primitives};
    for (int quantized = 0; quantized < 2; quantized++) {
        for (int k = 0; k < 2; k++) {
            for (int embedding = 0; embedding < 2; embedding++) {
                g_graph *g = g_new();
                g_weight w = w_plain(&t, FERRY_F32);
                if (quantized)
                    w.quant = (w_quant){.bits = 4, .block = 32, .symmetric = true};
                int wv = g_weight_value(g, t.name, &w);
                int y = embedding
                    ? g_embedding(g, "embed", wv, input(g, "input_ids", FERRY_I64, 2, ids2))
                    : g_linear(g, "up", input(g, "x", FERRY_F32, 3, x3), wv, G_NONE);
                g_output(g, y, "y");
                g_remove_dead(g);
                fy_err err = {0};
                assert_int_equal(g_check(g, &err), FERRY_OK);
                g_graph *out = g_legalize(g, targets[k], &err);
                if (!quantized || k == 0) {
                    if (!out)
                        fail_msg("%s: %s", targets[k]->name, err.msg);
                    int dq = 0;
                    for (size_t i = 0; i < out->n_nodes; i++) {
                        const g_node *n = &out->nodes[i];
                        if (n->op != G_DEQUANTIZE || n->dead)
                            continue;
                        dq++;
                        const w_quant *q = &out->values[n->in[0]].weight.quant;
                        assert_true(q->packing == W_PACK_CONTIGUOUS && w_has_zeros(q));
                    }
                    assert_int_equal(dq, quantized);
                    g_free(out);
                } else {
                    if (out)
                        fail_msg("%s lowered a quantized %s", targets[k]->name,
                                 embedding ? "embedding" : "linear");
                    assert_int_equal(err.status, FERRY_ERR_UNSUPPORTED);
                    if (!strstr(err.msg, targets[k]->name) || !strstr(err.msg, t.name) ||
                        !strstr(err.msg, "4-bit quantized"))
                        fail_msg("message: %s", err.msg);
                }
                g_free(g);
            }
        }
    }
}

/* The OpenVINO target: each attention is one ScaledDotProductAttention (opset13) over keys and
 * values repeated by Unsqueeze → Broadcast → Reshape when kv heads are grouped (the form the CPU
 * plugin folds), every layer reading one shared additive bias; a softcapped attention keeps the
 * generic lowering (SDPA has no softcap). A quantized linear is a dequantize over the weight with
 * rows of whole blocks (no padding, no stored zeros for symmetric, asymmetric zero points one a
 * byte when a row holds an odd number of blocks); a row of a short block is refused naming the
 * weight. */
static void openvino_attention_and_weights(void **state)
{
    (void)state;
    const int64_t x4[4] = {1, 3, 4, 16}, kv4[4] = {1, 3, 2, 16}, bs[2] = {1, 3};
    for (int softcap = 0; softcap < 2; softcap++) {
        g_graph *g = g_new();
        int mask = input(g, "attention_mask", FERRY_I64, 2, bs);
        g_attn_opts ao = {.num_heads = 4, .num_kv_heads = 2, .head_dim = 16, .scale = 0.25,
                          .softcap = softcap ? 50.0 : 0.0, .mask = G_MASK_CAUSAL};
        for (int layer = 0; layer < 2; layer++) {
            char name[32];
            snprintf(name, sizeof name, "attn%d", layer);
            int q = input(g, layer ? "q1" : "q0", FERRY_F32, 4, x4);
            int k = input(g, layer ? "k1" : "k0", FERRY_F32, 4, kv4);
            g_output(g, g_attention(g, name, q, k, k, mask, G_NONE, G_NONE, G_NONE, &ao, NULL,
                                    NULL), layer ? "y1" : "y0");
        }
        g_graph *out = legalize(g, &openvino_target);
        int sdpa = 0;
        for (size_t i = 0; i < out->n_nodes; i++) {
            const g_node *n = &out->nodes[i];
            if (n->dead || n->op != G_EXTERN)
                continue;
            assert_string_equal(n->a.ext->domain, "opset13");
            assert_string_equal(n->a.ext->op_type, "ScaledDotProductAttention");
            assert_int_equal(n->n_in, 5);
            const g_node *rk = producer(out, n->in[1]);
            assert_int_equal(rk->op, G_RESHAPE);
            assert_int_equal(producer(out, rk->in[0])->op, G_EXPAND);
            assert_int_equal(producer(out, producer(out, rk->in[0])->in[0])->op, G_UNSQUEEZE);
            sdpa++;
        }
        if (softcap) {
            assert_int_equal(sdpa, 0);
            assert_int_equal(count_op(out, G_SOFTMAX), 2);
        } else {
            assert_int_equal(sdpa, 2);
            assert_int_equal(count_op(out, G_SOFTMAX), 0);
            assert_int_equal(nth(out, G_EXTERN, 0)->in[3], nth(out, G_EXTERN, 1)->in[3]);
        }
        g_free(out);
        g_free(g);
    }
    st_tensor t = {.name = "model.layers.0.mlp.down_proj.weight", .dtype = FERRY_F32, .ndim = 2,
                   .shape = {32, 96}, .numel = 32 * 96, .begin = 0, .end = 32 * 96 * 4};
    const int64_t x3[3] = {1, 3, 96};
    for (int block = 32; block <= 64; block *= 2) {
        for (int symmetric = 0; symmetric < 2; symmetric++) {
            g_graph *g = g_new();
            g_weight w = w_plain(&t, FERRY_F32);
            w.quant = (w_quant){.bits = 4, .block = block, .symmetric = symmetric};
            g_output(g, g_linear(g, "down", input(g, "x", FERRY_F32, 3, x3),
                                 g_weight_value(g, t.name, &w), G_NONE), "y");
            g_remove_dead(g);
            fy_err err = {0};
            assert_int_equal(g_check(g, &err), FERRY_OK);
            g_graph *out = g_legalize(g, &openvino_target, &err);
            if (block == 32) {
                if (!out)
                    fail_msg("openvino: %s", err.msg);
                const g_node *dq = nth(out, G_DEQUANTIZE, 0);
                const w_quant *q = &out->values[dq->in[0]].weight.quant;
                /* 3 blocks a row: asymmetric zero points one a byte */
                assert_int_equal(q->packing, symmetric ? W_PACK_ROWS : W_PACK_ZERO_BYTES);
                assert_int_equal(producer(out, nth(out, G_MATMUL, 0)->in[1])->op, G_DEQUANTIZE);
                assert_true(nth(out, G_MATMUL, 0)->a.transpose_b);
                g_free(out);
            } else {
                assert_null(out); /* 96 inputs are 1.5 blocks of 64 */
                if (!strstr(err.msg, t.name) || !strstr(err.msg, "blocks of 64"))
                    fail_msg("message: %s", err.msg);
            }
            g_free(g);
        }
    }
}

/* ---- rope modes (longrope, M-RoPE, 2-D) and attention without a mask ---- */

/* LongRoPE over 16 rotary dims: 8 short and 8 long factors, trained length 64 of 256. */
static g_rope_opts longrope_16(void)
{
    g_rope_opts o = {.rope = {.type = ROPE_LONGROPE, .theta = 10000.0, .factor = 4.0,
                              .original_max_position_embeddings = 64, .attention_factor = -1.0,
                              .n_factors = 8},
                     .head_dim = 16, .rotary_dim = 16, .max_position_embeddings = 256};
    snprintf(o.rope.type_name, sizeof o.rope.type_name, "longrope");
    for (int i = 0; i < 8; i++) {
        o.rope.short_factor[i] = 1.0f + 0.1f * (float)i;
        o.rope.long_factor[i] = 1.0f + 2.0f * (float)i;
    }
    return o;
}

static g_rope_opts mrope_16(void)
{
    g_rope_opts o = ROPE_16;
    o.rope.layout = ROPE_MROPE;
    o.rope.mrope_section[0] = 2, o.rope.mrope_section[1] = 3, o.rope.mrope_section[2] = 3;
    snprintf(o.rope.type_name, sizeof o.rope.type_name, "mrope");
    return o;
}

static g_rope_opts vision_16(void)
{
    g_rope_opts o = ROPE_16;
    o.rope.layout = ROPE_VISION_2D;
    return o;
}

/* position input for `o`'s layout over batch 2, sequence 5 */
static int positions_for(g_graph *g, const g_rope_opts *o)
{
    const int64_t bs[2] = {2, 5}, tbs[3] = {3, 2, 5}, bs2[3] = {2, 5, 2};
    if (o->rope.layout == ROPE_MROPE)
        return input(g, "position_ids", FERRY_I64, 3, tbs);
    if (o->rope.layout == ROPE_VISION_2D)
        return input(g, "position_ids", FERRY_I64, 3, bs2);
    return input(g, "position_ids", FERRY_I64, 2, bs);
}

/* Two ropes over one x and one position input, options a and b. */
static g_graph *rope_pair(const g_rope_opts *a, const g_rope_opts *b)
{
    g_graph *g = g_new();
    const int64_t x4[4] = {2, 5, 3, 16};
    int x = input(g, "x", FERRY_F32, 4, x4), pos = positions_for(g, a);
    g_output(g, g_rope(g, "rope", x, pos, a), "y");
    g_output(g, g_rope(g, "rope_2", x, pos, b), "y_2");
    return g;
}

/* A second set of longrope factors (or M-RoPE bands), all else equal, is a table of its own;
 * the same options share one. */
static void rope_modes_tables_per_setting(void **state)
{
    (void)state;
    g_rope_opts a = longrope_16(), b = a;
    b.rope.long_factor[5] *= 2.0f;
    assert_false(lw_same_rope(&a, &b));
    g_graph *src = rope_pair(&a, &b), *low = legalize(src, &g_target_primitives);
    assert_int_equal(count_op(low, G_WHERE), 2); /* each picks its set */
    assert_int_equal(count_op(low, G_COS), 2);
    g_free(low);
    g_free(src);
    src = rope_pair(&a, &a);
    low = legalize(src, &g_target_primitives);
    assert_int_equal(count_op(low, G_WHERE), 1);
    assert_int_equal(count_op(low, G_COS), 1);
    /* the set is picked by max(position_ids) + 1 > 64 */
    const g_node *pick = nth(low, G_WHERE, 0);
    const g_node *gt = producer(low, pick->in[0]);
    assert_int_equal(gt->op, G_GREATER);
    assert_int_equal(*(const int64_t *)low->values[gt->in[1]].data, 64);
    assert_int_equal(producer(low, producer(low, gt->in[0])->in[0])->op, G_REDUCE_MAX);
    g_free(low);
    g_free(src);

    g_rope_opts m = mrope_16(), m2 = m;
    m2.rope.mrope_section[0] = 4, m2.rope.mrope_section[1] = 2, m2.rope.mrope_section[2] = 2;
    assert_false(lw_same_rope(&m, &m2));
    src = rope_pair(&m, &m2);
    low = legalize(src, &g_target_primitives);
    assert_int_equal(count_op(low, G_COS), 2);
    g_free(low);
    g_free(src);
    g_rope_opts v = vision_16(), plain = ROPE_16;
    assert_false(lw_same_rope(&v, &plain));
    assert_false(lw_same_rope(&m, &plain));
}

/* LongRoPE's attention factor as transformers derives it: sqrt(1 + ln(factor) / ln(original))
 * past the trained length, 1 within it, the given one when set. */
static void longrope_attention_factor(void **state)
{
    (void)state;
    g_rope_opts o = longrope_16();
    assert_true(fabs(rope_attention_scaling(&o.rope) - sqrt(1.0 + log(4.0) / log(64.0))) < 1e-12);
    o.rope.factor = 1.0;
    assert_true(rope_attention_scaling(&o.rope) == 1.0);
    o.rope.attention_factor = 1.25;
    assert_true(rope_attention_scaling(&o.rope) == 1.25);
    /* the table at init is the short set: 1 / (short[i] * theta^(2i/16)) */
    float inv[8];
    o = longrope_16();
    rope_inv_freq(&o.rope, 16, 256, inv);
    assert_true(inv[0] == 1.0f);
    assert_true(fabsf(inv[2] - 1.0f / (1.2f * powf(10000.0f, 0.25f))) < 1e-9f);
}

/* The export an ONNX writer lowers for with --ort-fusions `ep` (cfg must outlive t). */
static void ort_target_for(const char *ep, ferry_export_config *cfg, g_target *t)
{
    char eb[256];
    fy_err err = {0};
    ferry_export_config_init(cfg);
    cfg->format = fb_onnx.format;
    if (ferry_export_config_set_option(cfg, "ort_fusions", ep, eb, sizeof eb) != FERRY_OK)
        fail_msg("ort_fusions %s: %s", ep, eb);
    assert_int_equal(fb_onnx.configure(cfg, &err), FERRY_OK);
    fb_onnx.target(cfg, t);
}

static int count_extern(const g_graph *g, const char *op_type)
{
    int n = 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        n += !g->nodes[i].dead && g->nodes[i].op == G_EXTERN &&
             strcmp(g->nodes[i].a.ext->op_type, op_type) == 0;
    return n;
}

/* onnxruntime's fused targets fold a rope into RotaryEmbedding (webgpu, dml, cuda) or into
 * GroupQueryAttention (cpu) only for one fixed table over one position per token: longrope,
 * M-RoPE and the 2-D rope take the generic lowering on every provider, a default rope (the
 * control) does not. */
static void ort_rope_modes_stay_generic(void **state)
{
    (void)state;
    static const char *const eps[4] = {"cpu", "cuda", "webgpu", "dml"};
    g_rope_opts modes[4] = {ROPE_16, longrope_16(), mrope_16(), vision_16()};
    for (int e = 0; e < 4; e++) {
        ferry_export_config cfg;
        g_target t;
        ort_target_for(eps[e], &cfg, &t);
        for (int m = 0; m < 4; m++) {
            g_graph *g = g_new();
            const int64_t x4[4] = {2, 5, 3, 16};
            int x = input(g, "x", FERRY_F32, 4, x4), pos = positions_for(g, &modes[m]);
            g_output(g, g_rope(g, "rope", x, pos, &modes[m]), "y");
            g_graph *low = legalize(g, &t);
            bool fused = m == 0 && e != 0; /* cpu rotates inside attention only */
            assert_int_equal(count_extern(low, "RotaryEmbedding"), fused);
            assert_int_equal(count_op(low, G_COS), !fused);
            g_free(low);
            g_free(g);
        }
    }
    /* a decoder layer on cpu: GroupQueryAttention rotates default rope's q and k itself, and
     * takes longrope's and M-RoPE's rotated before it */
    for (int m = 0; m < 3; m++) {
        ferry_export_config cfg;
        g_target t;
        ort_target_for("cpu", &cfg, &t);
        g_graph *g = g_new();
        const int64_t q4[4] = {2, 5, 2, 16}, past[4] = {2, 2, 3, 16}, keys[2] = {2, 8};
        int q = input(g, "q", FERRY_F32, 4, q4), pos = positions_for(g, &modes[m]);
        int mask = input(g, "attention_mask", FERRY_I64, 2, keys);
        int pk = input(g, "past_key_values.0.key", FERRY_F32, 4, past);
        int pv = input(g, "past_key_values.0.value", FERRY_F32, 4, past);
        int rq = g_rope(g, "q_rope", q, pos, &modes[m]);
        int rk = g_rope(g, "k_rope", q, pos, &modes[m]);
        g_attn_opts ao = {.num_heads = 2, .num_kv_heads = 2, .head_dim = 16, .scale = 0.25,
                          .mask = G_MASK_CAUSAL, .cache = G_CACHE_APPEND};
        int present_k, present_v;
        g_output(g, g_attention(g, "attn", rq, rk, q, mask, pk, pv, G_NONE, &ao, &present_k,
                                &present_v), "y");
        g_output(g, present_k, "present.0.key");
        g_output(g, present_v, "present.0.value");
        g_graph *low = legalize(g, &t);
        const g_node *gqa = nth(low, G_EXTERN, count_extern(low, "GroupQueryAttention") - 1);
        assert_string_equal(gqa->a.ext->op_type, "GroupQueryAttention");
        int64_t do_rotary = -1;
        for (int i = 0; i < gqa->a.ext->n_attr; i++)
            if (strcmp(gqa->a.ext->attr[i].name, "do_rotary") == 0)
                do_rotary = gqa->a.ext->attr[i].i;
        assert_int_equal(do_rotary, m == 0);
        assert_int_equal(count_op(low, G_COS), m != 0);
        g_free(low);
        g_free(g);
    }
}

/* What inference refuses of the new rope options: positions of another layout, factor sets of
 * the wrong length, bands that do not cover the rotary half, a 2-D rope whose halves do not
 * split into (h, w). */
static void rope_modes_refused_when_malformed(void **state)
{
    (void)state;
    const int64_t x4[4] = {2, 5, 3, 16}, bs[2] = {2, 5};
    struct {
        g_rope_opts o;
        bool one_d;           /* give [b, s] positions whatever the layout */
        const char *why;
    } cases[6];
    cases[0].o = mrope_16(), cases[0].one_d = true, cases[0].why = "M-RoPE needs int64";
    cases[1].o = vision_16(), cases[1].one_d = true, cases[1].why = "2-D rope needs int64";
    cases[2].o = longrope_16(), cases[2].o.rope.n_factors = 6, cases[2].one_d = false;
    cases[2].why = "longrope needs rotary_dim/2";
    cases[3].o = longrope_16(), cases[3].o.rope.long_factor[7] = 0.0f, cases[3].one_d = false;
    cases[3].why = "factors must be positive";
    cases[4].o = mrope_16(), cases[4].o.rope.mrope_section[2] = 4, cases[4].one_d = false;
    cases[4].why = "must sum to rotary_dim/2";
    cases[5].o = vision_16(), cases[5].o.rotary_dim = 6, cases[5].one_d = false;
    cases[5].why = "multiple of 4";
    for (int i = 0; i < 6; i++) {
        g_graph *g = g_new();
        int x = input(g, "x", FERRY_F32, 4, x4);
        int pos = cases[i].one_d ? input(g, "position_ids", FERRY_I64, 2, bs)
                                 : positions_for(g, &cases[i].o);
        refused(g, g_rope(g, "rope", x, pos, &cases[i].o), cases[i].why);
    }
}

/* q, k, v [1, 3, heads/kv_heads, 8] and one attention with no mask input. */
static g_graph *unmasked_attention(int64_t heads, int64_t kv_heads, g_attn_opts *ao)
{
    g_graph *g = g_new();
    const int64_t q4[4] = {1, 3, heads, 8}, kv4[4] = {1, 3, kv_heads, 8};
    int q = input(g, "q", FERRY_F32, 4, q4), k = input(g, "k", FERRY_F32, 4, kv4);
    int v = input(g, "v", FERRY_F32, 4, kv4);
    *ao = (g_attn_opts){.num_heads = heads, .num_kv_heads = kv_heads, .head_dim = 8,
                        .scale = 0.35, .mask = G_MASK_NONE};
    g_output(g, g_attention(g, "attn", q, k, v, G_NONE, G_NONE, G_NONE, G_NONE, ao, NULL, NULL),
             "y");
    return g;
}

/* Attention without a mask (every key visible) in every target: the generic lowering's
 * softmax over the scaled scores as they are (no select, no mask built), onnxruntime's
 * MultiHeadAttention without key_padding_mask or bias, OpenVINO's ScaledDotProductAttention
 * with the spec's scalar-zero mask, torch's sdpa with no attn_mask. Refused with a mask input,
 * a cache or a window; printed as mask=none. */
static void attention_without_mask_everywhere(void **state)
{
    (void)state;
    g_attn_opts ao;
    g_graph *g = unmasked_attention(2, 2, &ao), *low = legalize(g, &g_target_primitives);
    assert_int_equal(count_op(low, G_SOFTMAX), 1);
    assert_int_equal(count_op(low, G_WHERE) + count_op(low, G_LESS_EQUAL) +
                         count_op(low, G_AND) + count_op(low, G_ADD), 0);
    char *text = g_dump(g);
    assert_non_null(strstr(text, "attention(q, k, v, -) {heads=2 kv_heads=2 head_dim=8"));
    assert_non_null(strstr(text, "mask=none cache=none"));
    free(text);
    g_free(low);

    for (int gqa = 0; gqa < 2; gqa++) {
        static const char *const eps[2] = {"cpu", "webgpu"};
        for (int e = 0; e < 2; e++) {
            ferry_export_config cfg;
            g_target t;
            ort_target_for(eps[e], &cfg, &t);
            g_graph *src = gqa ? unmasked_attention(4, 2, &ao) : g;
            low = legalize(src, &t);
            if (gqa && e == 0) { /* grouped heads on cpu: the generic lowering */
                assert_int_equal(count_extern(low, "MultiHeadAttention"), 0);
                assert_int_equal(count_op(low, G_SOFTMAX), 1);
                assert_int_equal(count_op(low, G_WHERE), 0);
            } else {
                assert_int_equal(count_extern(low, "MultiHeadAttention"), 1);
                assert_int_equal(nth(low, G_EXTERN, 0)->n_in, 3); /* q, k, v: no mask */
            }
            g_free(low);
            if (gqa)
                g_free(src);
        }
    }

    low = legalize(g, &openvino_target);
    const g_node *sdpa = nth(low, G_EXTERN, 0);
    assert_string_equal(sdpa->a.ext->op_type, "ScaledDotProductAttention");
    const g_value *zero = &low->values[sdpa->in[3]];
    assert_int_equal(zero->kind, GV_CONST);
    assert_int_equal(zero->shape.rank, 0);
    assert_true(*(const float *)zero->data == 0.0f);
    g_free(low);

    low = legalize(g, &torch_target);
    sdpa = nth(low, G_EXTERN, 0);
    assert_string_equal(sdpa->a.ext->op_type, ATEN_SDPA);
    assert_int_equal(sdpa->in[3], G_NONE);
    g_free(low);
    g_free(g);

    /* refusals: a mask input, a cache, a window */
    const int64_t q4[4] = {1, 3, 2, 8}, m2[2] = {1, 3}, c4[4] = {1, 2, 4, 8};
    for (int bad = 0; bad < 3; bad++) {
        g = g_new();
        int q = input(g, "q", FERRY_F32, 4, q4);
        int mask = bad == 0 ? input(g, "attention_mask", FERRY_I64, 2, m2) : G_NONE;
        int pk = bad == 1 ? input(g, "past_key", FERRY_F32, 4, c4) : G_NONE;
        int pv = bad == 1 ? input(g, "past_value", FERRY_F32, 4, c4) : G_NONE;
        ao = (g_attn_opts){.num_heads = 2, .num_kv_heads = 2, .head_dim = 8, .scale = 0.35,
                           .mask = G_MASK_NONE, .cache = bad == 1 ? G_CACHE_APPEND : G_CACHE_NONE,
                           .sliding_window = bad == 2 ? 4 : 0};
        int pkv[2];
        refused(g, g_attention(g, "attn", q, q, q, mask, pk, pv, G_NONE, &ao, &pkv[0], &pkv[1]),
                "without a mask takes no mask input, cache or window");
    }
    /* and a masked kind without its mask input */
    g = g_new();
    int q = input(g, "q", FERRY_F32, 4, q4);
    ao.mask = G_MASK_PADDING, ao.cache = G_CACHE_NONE, ao.sliding_window = 0;
    refused(g, g_attention(g, "attn", q, q, q, G_NONE, G_NONE, G_NONE, G_NONE, &ao, NULL, NULL),
            "mask input missing");
}

/* q [1, 3, heads, 8] over a cross cache k, v [1, kv_heads, 5, 8]. */
static g_graph *cross_attention(int64_t heads, int64_t kv_heads, g_attn_opts *ao)
{
    g_graph *g = g_new();
    const int64_t q4[4] = {1, 3, heads, 8}, kv4[4] = {1, kv_heads, 5, 8};
    int q = input(g, "q", FERRY_F32, 4, q4), k = input(g, "cross_key", FERRY_F32, 4, kv4);
    int v = input(g, "cross_value", FERRY_F32, 4, kv4);
    *ao = (g_attn_opts){.num_heads = heads, .num_kv_heads = kv_heads, .head_dim = 8,
                        .scale = 0.35, .mask = G_MASK_NONE, .cache = G_CACHE_CROSS};
    g_output(g, g_attention(g, "attn", q, k, v, G_NONE, G_NONE, G_NONE, G_NONE, ao, NULL, NULL),
             "y");
    return g;
}

/* Cross attention (an encoder-decoder's decoder over the cross cache its encoder made): the
 * keys and values are read as given, [b, kvh, t, d], in every target: no transpose of them in
 * the generic lowering, onnxruntime's MultiHeadAttention taking them as its BNSH key and value
 * (grouped heads: the generic lowering), OpenVINO's and torch's attention over them as they
 * are. One output, [b, s, h*d]; printed as cache=cross; refused with a mask, a past, a window,
 * or keys in the [b, t, kvh, d] layout. */
static void cross_attention_everywhere(void **state)
{
    (void)state;
    g_attn_opts ao;
    g_graph *g = cross_attention(2, 2, &ao), *low = legalize(g, &g_target_primitives);
    const g_value *y = &g->values[g->outputs[0]];
    assert_int_equal(g->n_outputs, 1);
    assert_int_equal(y->shape.rank, 3);
    assert_true(g_dim_match(y->shape.d[1], g_dim_const(3)) &&
                g_dim_match(y->shape.d[2], g_dim_const(16)));
    char *text = g_dump(g);
    assert_non_null(strstr(text, "mask=none cache=cross"));
    free(text);
    /* q and the output move between layouts and k is transposed for the product; keys and
     * values are not moved to [b, kvh, t, d] as the new keys of a self-attention are */
    assert_int_equal(count_op(low, G_TRANSPOSE), 3);
    assert_int_equal(count_op(low, G_CONCAT) + count_op(low, G_SCATTER_ELEMENTS), 0);
    g_free(low);
    for (int gqa = 0; gqa < 2; gqa++) {
        ferry_export_config cfg;
        g_target t;
        ort_target_for("cpu", &cfg, &t);
        g_graph *src = gqa ? cross_attention(4, 2, &ao) : g;
        low = legalize(src, &t);
        assert_int_equal(count_extern(low, "MultiHeadAttention"), gqa ? 0 : 1);
        assert_int_equal(count_extern(low, "GroupQueryAttention"), 0);
        if (!gqa) {
            const g_node *mha = nth(low, G_EXTERN, 0);
            assert_int_equal(mha->n_in, 3);
            assert_int_equal(low->values[mha->in[1]].shape.rank, 4); /* BNSH key, as given */
            assert_string_equal(low->values[mha->in[1]].name, "cross_key");
        }
        g_free(low);
        if (gqa)
            g_free(src);
    }
    low = legalize(g, &openvino_target);
    const g_node *sdpa = nth(low, G_EXTERN, 0);
    assert_string_equal(sdpa->a.ext->op_type, "ScaledDotProductAttention");
    assert_string_equal(low->values[sdpa->in[1]].name, "cross_key");
    g_free(low);
    low = legalize(g, &torch_target);
    sdpa = nth(low, G_EXTERN, 0);
    assert_string_equal(sdpa->a.ext->op_type, ATEN_SDPA);
    assert_string_equal(low->values[sdpa->in[1]].name, "cross_key");
    g_free(low);
    g_free(g);

    const int64_t q4[4] = {1, 3, 2, 8}, m2[2] = {1, 5}, kv4[4] = {1, 2, 5, 8};
    const int64_t bshd[4] = {1, 5, 2, 8};
    for (int bad = 0; bad < 4; bad++) {
        g = g_new();
        int q = input(g, "q", FERRY_F32, 4, q4);
        int k = input(g, "k", FERRY_F32, 4, bad == 3 ? bshd : kv4);
        int mask = bad == 0 ? input(g, "attention_mask", FERRY_I64, 2, m2) : G_NONE;
        int past = bad == 1 ? input(g, "past", FERRY_F32, 4, kv4) : G_NONE;
        ao = (g_attn_opts){.num_heads = 2, .num_kv_heads = 2, .head_dim = 8, .scale = 0.35,
                           .mask = bad == 0 ? G_MASK_CAUSAL : G_MASK_NONE,
                           .cache = G_CACHE_CROSS, .sliding_window = bad == 2 ? 4 : 0};
        refused(g, g_attention(g, "attn", q, k, k, mask, past, past, G_NONE, &ao, NULL, NULL),
                bad == 3 ? "head counts, head dim or batch disagree"
                         : "no mask or a padding mask, and no window");
    }
    /* an encoder's padding over the keys (T5's): masked in the generic lowering, which
     * onnxruntime's fusions keep */
    g = g_new();
    int q = input(g, "q", FERRY_F32, 4, q4), k = input(g, "k", FERRY_F32, 4, kv4);
    int mask = input(g, "encoder_attention_mask", FERRY_I64, 2, m2);
    ao = (g_attn_opts){.num_heads = 2, .num_kv_heads = 2, .head_dim = 8, .scale = 0.35,
                       .mask = G_MASK_PADDING, .cache = G_CACHE_CROSS};
    g_output(g, g_attention(g, "attn", q, k, k, mask, G_NONE, G_NONE, G_NONE, &ao, NULL, NULL),
             "y");
    assert_true(g_ok(g));
    ferry_export_config cfg;
    g_target t;
    ort_target_for("cpu", &cfg, &t);
    low = legalize(g, &t);
    assert_int_equal(count_extern(low, "MultiHeadAttention"), 0);
    assert_int_equal(count_op(low, G_SOFTMAX), 1);
    g_free(low);
    g_free(g);
}

/* An additive bias [1, h, s, t] (T5's relative positions): added to the scaled scores in the
 * generic lowering, to the mask's bias in OpenVINO's and torch's attention; refused when its
 * shape is not the scores'. */
static void attention_bias_everywhere(void **state)
{
    (void)state;
    const int64_t q4[4] = {1, 3, 2, 8}, m2[2] = {1, 3}, b4[4] = {1, 2, 3, 3};
    g_graph *g = g_new();
    int q = input(g, "q", FERRY_F32, 4, q4), mask = input(g, "attention_mask", FERRY_I64, 2, m2);
    int bias = input(g, "position_bias", FERRY_F32, 4, b4);
    g_attn_opts ao = {.num_heads = 2, .num_kv_heads = 2, .head_dim = 8, .scale = 1.0,
                      .mask = G_MASK_PADDING};
    g_output(g, g_attention_biased(g, "attn", q, q, q, mask, G_NONE, G_NONE, G_NONE, bias, &ao,
                                   NULL, NULL), "y");
    assert_true(g_ok(g));
    g_graph *low = legalize(g, &g_target_primitives);
    assert_int_equal(count_op(low, G_SOFTMAX), 1);
    assert_true(count_op(low, G_ADD) >= 2); /* the position bias, then the padding's */
    g_free(low);
    ferry_export_config cfg;
    g_target t;
    ort_target_for("cpu", &cfg, &t);
    low = legalize(g, &t);
    assert_int_equal(count_extern(low, "MultiHeadAttention"), 0); /* no fused kernel takes it */
    g_free(low);
    const g_target *sdpa_targets[2] = {&openvino_target, &torch_target};
    for (int i = 0; i < 2; i++) {
        low = legalize(g, sdpa_targets[i]);
        const g_node *sdpa = nth(low, G_EXTERN, 0);
        const g_value *b = &low->values[sdpa->in[3]];
        assert_int_equal(b->shape.rank, 4); /* the mask's bias plus the position bias */
        assert_true(g_dim_match(b->shape.d[1], g_dim_const(2)));
        g_free(low);
    }
    g_free(g);
    const int64_t wrong[4] = {1, 2, 3, 4};
    g = g_new();
    q = input(g, "q", FERRY_F32, 4, q4);
    mask = input(g, "attention_mask", FERRY_I64, 2, m2);
    bias = input(g, "position_bias", FERRY_F32, 4, wrong);
    refused(g, g_attention_biased(g, "attn", q, q, q, mask, G_NONE, G_NONE, G_NONE, bias, &ao,
                                  NULL, NULL),
            "bias must be float [b or 1, heads, s, keys attended to]");
}

/* The new options print what tells two of them apart; a default rope prints as before. */
static void rope_modes_print(void **state)
{
    (void)state;
    g_rope_opts a = longrope_16(), b = a;
    b.rope.long_factor[0] = 3.0f;
    g_graph *g = rope_pair(&a, &b);
    char *text = g_dump(g);
    assert_non_null(strstr(text, "{rope=longrope theta=10000 factor=4 head_dim=16 rotary_dim=16 "
                                 "original_max=64 factors=8 short#"));
    const char *l1 = strstr(text, " long#"), *l2 = l1 ? strstr(l1 + 1, " long#") : NULL;
    assert_non_null(l2);
    assert_true(strncmp(l1, l2, 15) != 0); /* the two long sets hash apart */
    free(text);
    g_free(g);
    g_rope_opts m = mrope_16();
    g = rope_pair(&m, &m);
    text = g_dump(g);
    assert_non_null(strstr(text, "rotary_dim=16 mrope_section=2,3,3}"));
    free(text);
    g_free(g);
    g_rope_opts v = vision_16();
    g = rope_pair(&v, &v);
    text = g_dump(g);
    assert_non_null(strstr(text, "rotary_dim=16 positions=hw}"));
    free(text);
    g_free(g);
    g = rope_pair(&ROPE_16, &ROPE_16);
    text = g_dump(g);
    assert_non_null(strstr(text, "head_dim=16 rotary_dim=16}"));
    free(text);
    g_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(no_semantic_op_remains),
        cmocka_unit_test(rope_tables_per_setting),
        cmocka_unit_test(layers_share_one_mask),
        cmocka_unit_test(many_windowed_static_layers),
        cmocka_unit_test(skip_rms_norm_is_one_add_and_one_norm),
        cmocka_unit_test(check_refuses_malformed_nodes),
        cmocka_unit_test(states_keep_their_form),
        cmocka_unit_test(onnx_runs_some_ops_in_f32),
        cmocka_unit_test(inference_refuses_impossible_nodes),
        cmocka_unit_test(reshape_leaves_a_symbols_factor_to_run_time),
        cmocka_unit_test(quantized_weight_dequantized_or_refused),
        cmocka_unit_test(openvino_attention_and_weights),
        cmocka_unit_test(rope_modes_tables_per_setting),
        cmocka_unit_test(longrope_attention_factor),
        cmocka_unit_test(ort_rope_modes_stay_generic),
        cmocka_unit_test(rope_modes_refused_when_malformed),
        cmocka_unit_test(attention_without_mask_everywhere),
        cmocka_unit_test(cross_attention_everywhere),
        cmocka_unit_test(attention_bias_everywhere),
        cmocka_unit_test(rope_modes_print),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
