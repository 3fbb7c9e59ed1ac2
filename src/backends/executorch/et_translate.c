/* et_translate.c — each aten call the emitter makes, as the ExecuTorch out kernels that
 * compute it (docs/pte-format.md §3, §4): every argument of the kernel's schema in order and
 * the return slot last; a matmul as bmm over its batch dims flattened (broadcast trailing dims
 * folded into the rows), a linear in the XNNPACK delegate where the program delegates it. */
#include <stdio.h>
#include <string.h>

#include "backends/executorch/et_calls.h"


/* add/sub: a tensor's .out or a number's .Scalar_out, alpha 1 */
static void t_add_sub(et_sink *k, const call_frame *f, const int *outs)
{
    bool sub = strncmp(f->op, "sub", 3) == 0, number = ek_is_number(f, "other");
    kargs a = ek_args_of(k, f);
    ek_a_tensor(&a, "self");
    if (number)
        ek_a_scalar(&a, "other");
    else
        ek_a_tensor(&a, "other");
    ek_a_int(&a, 1);
    ek_a_out(&a, number ? (sub ? "aten::sub.Scalar_out" : "aten::add.Scalar_out")
                     : (sub ? "aten::sub.out" : "aten::add.out"),
          outs[0]);
}

/* ops whose .Tensor overload becomes <name>.out (comparisons: .Tensor_out; pow:
 * .Tensor_Tensor_out), a number's <name>.Scalar_out (pow: .Tensor_Scalar_out) */
static void t_binary(et_sink *k, const call_frame *f, const int *outs)
{
    char name[48], op[80];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(f->op, "."), f->op);
    const char *second = ek_find(f, "exponent") ? "exponent" : "other";
    bool pow = strcmp(name, "pow") == 0, number = ek_is_number(f, second);
    bool compare = strcmp(name, "eq") == 0 || strcmp(name, "lt") == 0 ||
                   strcmp(name, "le") == 0 || strcmp(name, "gt") == 0 || strcmp(name, "ge") == 0;
    if (number)
        snprintf(op, sizeof op, "aten::%s.%s", name, pow ? "Tensor_Scalar_out" : "Scalar_out");
    else
        snprintf(op, sizeof op, "aten::%s.%s", name,
                 compare ? "Tensor_out" : pow ? "Tensor_Tensor_out" : "out");
    kargs a = ek_args_of(k, f);
    ek_a_tensor(&a, "self");
    if (number)
        ek_a_scalar(&a, second);
    else
        ek_a_tensor(&a, second);
    ek_a_out(&a, op, outs[0]);
}

static void t_div_mode(et_sink *k, const call_frame *f, const int *outs)
{
    const call_arg *mode = ek_need(k, f, "rounding_mode");
    if (!mode)
        return;
    kargs a = ek_args_of(k, f);
    ek_a_tensor(&a, "self");
    ek_a_tensor(&a, "other");
    ek_a_value(&a, et_string(k->p, mode->s));
    ek_a_out(&a, "aten::div.out_mode", outs[0]);
}

static void t_unary(et_sink *k, const call_frame *f, const int *outs)
{
    char op[80];
    snprintf(op, sizeof op, "aten::%.*s.out", (int)strcspn(f->op, "."), f->op);
    kargs a = ek_args_of(k, f);
    ek_a_tensor(&a, "self");
    ek_a_out(&a, op, outs[0]);
}

/* no silu kernel: x * sigmoid(x) */
static void t_silu(et_sink *k, const call_frame *f, const int *outs)
{
    et_program *p = k->p;
    et_value y = ek_value_of(p, outs[0]);
    int x = ek_tensor(k, f, "self");
    int s = ek_temp_tensor(p, y.dtype, y.rank, y.sizes, y.dynamic);
    kargs a = ek_args_of(k, f);
    ek_a_value(&a, x);
    ek_a_out(&a, "aten::sigmoid.out", s);
    kargs b = ek_args_of(k, f);
    ek_a_value(&b, x);
    ek_a_value(&b, s);
    ek_a_out(&b, "aten::mul.out", outs[0]);
}

static void t_gelu(et_sink *k, const call_frame *f, const int *outs)
{
    const call_arg *mode = ek_find(f, "approximate");
    kargs a = ek_args_of(k, f);
    ek_a_tensor(&a, "self");
    ek_a_value(&a, et_string(k->p, mode ? mode->s : "none"));
    ek_a_out(&a, "aten::gelu.out", outs[0]);
}

/* the graph value a tensor argument names (-1: a temporary, None or absent) */
static int graph_value_arg(const call_frame *f, const char *name)
{
    const call_arg *a = ek_find(f, name);
    return a && a->type == A_TENSOR && a->t >= 0 ? a->t : -1;
}

/* a linear: in the XNNPACK delegate where the program delegates it, else the portable kernel */
static void t_linear(et_sink *k, const call_frame *f, const int *outs)
{
    if (et_xnn_linear(k->p, ek_tensor(k, f, "input"), graph_value_arg(f, "weight"),
                      graph_value_arg(f, "bias"), outs[0]) || k->p->st != FERRY_OK)
        return;
    kargs a = ek_args_of(k, f);
    ek_a_tensor(&a, "input");
    ek_a_tensor(&a, "weight");
    ek_a_optional(&a, "bias");
    ek_a_out(&a, "aten::linear.out", outs[0]);
}

/* A copy of `x` viewed as `rank` extents `d` (Int values) with bounds `bounds`. */
static int view_as(et_sink *k, const call_frame *f, int x, int rank, const int *d,
                   const int64_t *bounds)
{
    et_program *p = k->p;
    if (x < 0)
        return -1;
    bool dynamic = false;
    for (int i = 0; i < rank; i++)
        dynamic |= d[i] < 0 || p->values[d[i]].computed;
    ferry_dtype dt = p->values[x].dtype;
    int y = ek_temp_tensor(p, dt, rank, bounds, dynamic);
    kargs a = ek_args_of(k, f);
    ek_a_value(&a, x);
    ek_a_value(&a, et_list(p, ET_INT_LIST, d, rank));
    ek_a_out(&a, "aten::view_copy.out", y);
    return y;
}

/* `x` of `s` expanded to batch dims `batch` (n of them) and its own last two */
static int expand_batch(et_sink *k, const call_frame *f, int x, const g_shape *s,
                        const g_dim *batch, int n)
{
    et_program *p = k->p;
    bool same = s->rank == n + 2;
    for (int i = 0; same && i < n; i++)
        same = g_dim_eq(s->d[i], batch[i]);
    if (same || x < 0)
        return x;
    g_shape to = {.rank = n + 2};
    memcpy(to.d, batch, (size_t)n * sizeof *batch);
    to.d[n] = s->d[s->rank - 2];
    to.d[n + 1] = s->d[s->rank - 1];
    ferry_dtype dt = p->values[x].dtype;
    int y = et_tensor(p, dt, &to);
    kargs a = ek_args_of(k, f);
    ek_a_value(&a, x);
    ek_a_value(&a, et_dims(p, to.d, to.rank));
    ek_a_bool(&a, false);
    ek_a_out(&a, "aten::expand_copy.out", y);
    return y;
}

/* The product of dims d[0..n) as an Int value, its bound in *bound. */
static int product(et_program *p, const g_dim *d, int n, int64_t *bound)
{
    int v = et_int(p, 1);
    *bound = 1;
    for (int i = 0; i < n; i++) {
        int64_t b;
        if (!et_dim_bound(&p->g->syms, d[i], &b))
            return et_fail(p, FERRY_ERR_UNSUPPORTED, "a matmul over an unbounded extent"), -1;
        *bound *= b;
        v = et_int_mul(p, v, et_dim(p, d[i]));
    }
    return v;
}

/* the g_shape of a translation's out (a graph value's, or the temporary's) */
static const g_shape *out_shape(et_sink *k, int out)
{
    int v = k->p->values[out].graph_value;
    return v >= 0 ? &k->p->g->values[v].shape : &k->out_shapes[0];
}

/* Where the second operand of a batched matmul is broadcast along the first's trailing batch
 * dims (grouped-query attention: a key [b, kv, 1, d, t] read by queries [b, kv, g, s, d]), the
 * first's rows already run over them in order: its [b, kv, g * s, d] times the key [b, kv, d, t]
 * is the product without expanding the key g times. The first batch dim of that suffix (n: no
 * such suffix). */
static int folded_batch(const g_shape *sa, const g_shape *sb, const g_shape *sy, int n)
{
    if (sa->rank != n + 2 || sb->rank != n + 2)
        return n;
    int j = n;
    while (j > 0 && g_dim_eq(sb->d[j - 1], g_dim_const(1)) &&
           g_dim_eq(sa->d[j - 1], sy->d[j - 1]))
        j--;
    for (int i = 0; i < j; i++)
        if (!g_dim_eq(sa->d[i], sy->d[i]) || !g_dim_eq(sb->d[i], sy->d[i]))
            return n;
    return j;
}

/* matmul: mm for two matrices; otherwise both operands expanded to the output's batch dims
 * (but for the broadcast folded_batch finds, folded into the rows instead), flattened to
 * [batch, m, k] and [batch, k, n], bmm, and the result viewed as the output */
static void t_matmul(et_sink *k, const call_frame *f, const int *outs)
{
    et_program *p = k->p;
    const g_shape *sa = ek_tensor_shape(k, f, "self"), *sb = ek_tensor_shape(k, f, "other");
    const g_shape *sy = out_shape(k, outs[0]);
    ferry_dtype dt = p->values[outs[0]].dtype;
    int x = ek_tensor(k, f, "self"), w = ek_tensor(k, f, "other");
    if (x < 0 || w < 0 || !sa || !sb)
        return;
    kargs a = ek_args_of(k, f);
    if (sa->rank == 2 && sb->rank == 2) {
        ek_a_value(&a, x);
        ek_a_value(&a, w);
        ek_a_out(&a, "aten::mm.out", outs[0]);
        return;
    }
    if (sa->rank < 2 || sb->rank < 2 || sy->rank < 3)
        return (void)et_fail(p, FERRY_ERR_UNSUPPORTED, "a matmul of ranks %d and %d", sa->rank,
                             sb->rank);
    int n = sy->rank - 2;
    int64_t batch_bound, m, kk, nn;
    int fold = folded_batch(sa, sb, sy, n);
    int batch = product(p, sy->d, fold, &batch_bound);
    if (fold < n) {
        /* rows: the folded batch dims and m, in the first operand's order */
        g_dim rows[G_MAX_RANK];
        memcpy(rows, sa->d + fold, (size_t)(n - fold) * sizeof *rows);
        rows[n - fold] = sa->d[sa->rank - 2];
        int64_t rows_bound;
        int r_rows = product(p, rows, n - fold + 1, &rows_bound);
        if (!et_dim_bound(&p->g->syms, sa->d[sa->rank - 1], &kk) ||
            !et_dim_bound(&p->g->syms, sb->d[sb->rank - 1], &nn) || r_rows < 0 || batch < 0)
            return (void)et_fail(p, FERRY_ERR_UNSUPPORTED, "a matmul over an unbounded extent");
        int da[3] = {batch, r_rows, et_dim(p, sa->d[sa->rank - 1])};
        int db[3] = {batch, da[2], et_dim(p, sb->d[sb->rank - 1])};
        x = view_as(k, f, x, 3, da, (const int64_t[]){batch_bound, rows_bound, kk});
        w = view_as(k, f, w, 3, db, (const int64_t[]){batch_bound, kk, nn});
        if (x < 0 || w < 0)
            return;
        bool dynamic = p->values[x].dynamic || p->values[w].dynamic;
        int r = ek_temp_tensor(p, dt, 3, (const int64_t[]){batch_bound, rows_bound, nn}, dynamic);
        ek_a_value(&a, x);
        ek_a_value(&a, w);
        ek_a_out(&a, "aten::bmm.out", r);
        kargs v = ek_args_of(k, f);
        ek_a_value(&v, r);
        ek_a_value(&v, et_dims(p, sy->d, sy->rank));
        ek_a_out(&v, "aten::view_copy.out", outs[0]);
        return;
    }
    x = expand_batch(k, f, x, sa, sy->d, n);
    w = expand_batch(k, f, w, sb, sy->d, n);
    if (!et_dim_bound(&p->g->syms, sa->d[sa->rank - 2], &m) ||
        !et_dim_bound(&p->g->syms, sa->d[sa->rank - 1], &kk) ||
        !et_dim_bound(&p->g->syms, sb->d[sb->rank - 1], &nn))
        return (void)et_fail(p, FERRY_ERR_UNSUPPORTED, "a matmul over an unbounded extent");
    if (n == 1) {
        ek_a_value(&a, x);
        ek_a_value(&a, w);
        ek_a_out(&a, "aten::bmm.out", outs[0]);
        return;
    }
    int da[3] = {batch, -1, -1}, db[3] = {batch, -1, -1};
    da[1] = et_dim(p, sa->d[sa->rank - 2]);
    da[2] = db[1] = et_dim(p, sa->d[sa->rank - 1]);
    db[2] = et_dim(p, sb->d[sb->rank - 1]);
    x = view_as(k, f, x, 3, da, (const int64_t[]){batch_bound, m, kk});
    w = view_as(k, f, w, 3, db, (const int64_t[]){batch_bound, kk, nn});
    if (x < 0 || w < 0)
        return;
    bool dynamic = p->values[x].dynamic || p->values[w].dynamic;
    int r = ek_temp_tensor(p, dt, 3, (const int64_t[]){batch_bound, m, nn}, dynamic);
    ek_a_value(&a, x);
    ek_a_value(&a, w);
    ek_a_out(&a, "aten::bmm.out", r);
    kargs v = ek_args_of(k, f);
    ek_a_value(&v, r);
    ek_a_value(&v, et_dims(p, sy->d, sy->rank));
    ek_a_out(&v, "aten::view_copy.out", outs[0]);
}

/* reshape: a copy into the output's extents (which the IR knows, where aten takes a -1) */
static void t_reshape(et_sink *k, const call_frame *f, const int *outs)
{
    const g_shape *sy = out_shape(k, outs[0]);
    kargs a = ek_args_of(k, f);
    ek_a_tensor(&a, "self");
    ek_a_value(&a, et_dims(k->p, sy->d, sy->rank));
    ek_a_out(&a, "aten::view_copy.out", outs[0]);
}

static void t_reduce(et_sink *k, const call_frame *f, const int *outs)
{
    bool amax = strncmp(f->op, "amax", 4) == 0, mean = strncmp(f->op, "mean", 4) == 0;
    kargs a = ek_args_of(k, f);
    ek_a_tensor(&a, "self");
    ek_a_ints(&a, "dim");
    ek_a_scalar(&a, "keepdim");
    if (!amax)
        ek_a_null(&a); /* dtype */
    ek_a_out(&a, amax ? "aten::amax.out" : mean ? "aten::mean.out" : "aten::sum.IntList_out",
          outs[0]);
}

/* two outs, then the list of them as the return slot */
static void t_topk(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = ek_args_of(k, f);
    ek_a_tensor(&a, "self");
    ek_a_scalar(&a, "k");
    ek_a_scalar(&a, "dim");
    ek_a_bool(&a, true);
    ek_a_bool(&a, true);
    ek_a_value(&a, outs[0]);
    ek_a_value(&a, outs[1]);
    ek_a_value(&a, et_list(k->p, ET_TENSOR_LIST, outs, 2));
    et_call(k->p, "aten::topk.values", a.v, a.n);
}

static void t_scatter(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = ek_args_of(k, f);
    ek_a_tensor(&a, "self");
    ek_a_scalar(&a, "dim");
    ek_a_tensor(&a, "index");
    ek_a_tensor(&a, "src");
    ek_a_out(&a, strncmp(f->op, "scatter_add", 11) == 0 ? "aten::scatter_add.out"
                                                     : "aten::scatter.src_out",
          outs[0]);
}

static void t_conv(et_sink *k, const call_frame *f, const int *outs)
{
    const call_arg *stride = ek_need(k, f, "stride");
    if (!stride)
        return;
    if (stride->n > 2)
        return (void)et_fail(k->p, FERRY_ERR_UNSUPPORTED, "a %d-D convolution: the runtime's "
                             "aten::convolution.out computes 1-D and 2-D ones", stride->n);
    int64_t zeros[G_CONV_MAX_SPATIAL] = {0};
    kargs a = ek_args_of(k, f);
    ek_a_tensor(&a, "input");
    ek_a_tensor(&a, "weight");
    ek_a_optional(&a, "bias");
    ek_a_ints(&a, "stride");
    ek_a_ints(&a, "padding");
    ek_a_ints(&a, "dilation");
    ek_a_bool(&a, false);
    ek_a_value(&a, et_int_list(k->p, zeros, stride->n));
    ek_a_scalar(&a, "groups");
    ek_a_out(&a, "aten::convolution.out", outs[0]);
}

/* A quantized table (--quantize-embeddings) as embedding_4bit reads it: its codes with element
 * 2j in the high nibble, fp32 scales [vocab, dim / block], no zero points (symmetric: the
 * kernel's code - 8 is ferry's value). The kernel's groups must divide each row. */
static void quantized_embedding(et_sink *k, const call_frame *f, int table, const int *outs)
{
    et_program *p = k->p;
    const g_value *w = &p->g->values[table];
    const w_quant *q = &w->weight.quant;
    int64_t dim = 0;
    g_dim_is_const(w->shape.d[w->shape.rank - 1], &dim);
    if (q->bits != 4 || !q->symmetric || w->weight.dtype != FERRY_F32)
        return (void)et_fail(p, FERRY_ERR_UNSUPPORTED, "embedding '%s': executorch's "
                             "embedding_4bit reads symmetric 4-bit blocks with fp32 scales, "
                             "not these", w->name);
    if (w->shape.rank != 2 || dim % q->block)
        return (void)et_fail(p, FERRY_ERR_UNSUPPORTED, "embedding '%s': its rows of %lld are "
                             "not whole blocks of %d, which embedding_4bit needs; pick a block "
                             "size that divides them (--block-size), or %s", w->name,
                             (long long)dim, q->block,
                             dim % 32 ? "keep the table in float (drop --quantize-embeddings): "
                                        "no block XNNPACK takes does"
                                      : "keep the table in float (drop --quantize-embeddings)");
    g_weight recipe = w->weight;
    recipe.quant.high_nibble_first = true;
    recipe.quant.packing = W_PACK_ROWS;
    recipe.quant.positive_scales = false;
    /* embedding_4bit reads whatever row an id names: the ids are checked first, by the portable
     * embedding kernel over the table's scales (a few bytes a token), which stops the method
     * with InvalidArgument on one outside the vocabulary, as the float table's lookup does */
    int scales = et_quantized_constant(p, table, &recipe, W_PART_SCALES);
    int64_t n_blocks = dim / q->block;
    const g_shape *ids = ek_tensor_shape(k, f, "indices");
    if (!ids || scales < 0)
        return;
    g_shape checked = *ids;
    checked.d[checked.rank++] = g_dim_const(n_blocks);
    int check = et_tensor(p, FERRY_F32, &checked);
    kargs c = ek_args_of(k, f);
    ek_a_value(&c, scales);
    ek_a_tensor(&c, "indices");
    ek_a_int(&c, -1);
    ek_a_bool(&c, false);
    ek_a_bool(&c, false);
    ek_a_out(&c, "aten::embedding.out", check);
    kargs a = ek_args_of(k, f);
    ek_a_value(&a, et_quantized_constant(p, table, &recipe, W_PART_CODES));
    ek_a_value(&a, scales);
    ek_a_null(&a);
    ek_a_int(&a, -8);
    ek_a_int(&a, 7);
    ek_a_tensor(&a, "indices");
    ek_a_out(&a, "quantized_decomposed::embedding_4bit.out", outs[0]);
    p->n_int4_embeddings++;
}

static void t_embedding(et_sink *k, const call_frame *f, const int *outs)
{
    int table = graph_value_arg(f, "weight");
    if (table >= 0 && k->p->g->values[table].kind == GV_WEIGHT &&
        k->p->g->values[table].weight.quant.bits)
        return quantized_embedding(k, f, table, outs);
    kargs a = ek_args_of(k, f);
    ek_a_tensor(&a, "weight");
    ek_a_tensor(&a, "indices");
    ek_a_int(&a, -1);
    ek_a_bool(&a, false);
    ek_a_bool(&a, false);
    ek_a_out(&a, "aten::embedding.out", outs[0]);
}

/* native_layer_norm also returns each row's mean and rstd ([..., 1] per normalized axis):
 * three outs, then the list of them as the return slot */
static void t_layer_norm(et_sink *k, const call_frame *f, const int *outs)
{
    et_program *p = k->p;
    const call_arg *norm = ek_need(k, f, "normalized_shape");
    if (!norm)
        return;
    et_value y = ek_value_of(p, outs[0]);
    int64_t stat[G_MAX_RANK];
    memcpy(stat, y.sizes, sizeof stat);
    for (int i = y.rank - norm->n; i < y.rank; i++)
        stat[i] = 1;
    kargs a = ek_args_of(k, f);
    ek_a_tensor(&a, "input");
    ek_a_ints(&a, "normalized_shape");
    ek_a_optional(&a, "weight");
    ek_a_optional(&a, "bias");
    ek_a_scalar(&a, "eps");
    int three[3] = {outs[0], -1, -1};
    three[1] = ek_temp_tensor(p, y.dtype, y.rank, stat, y.dynamic);
    three[2] = ek_temp_tensor(p, y.dtype, y.rank, stat, y.dynamic);
    for (int i = 0; i < 3; i++)
        ek_a_value(&a, three[i]);
    ek_a_value(&a, et_list(p, ET_TENSOR_LIST, three, 3));
    et_call(p, "aten::native_layer_norm.out", a.v, a.n);
}

/* a static cache's rows written into it: index_put_ over (None, ..., slots) at `dim` */
static void t_index_copy(et_sink *k, const call_frame *f, const int *outs)
{
    const call_arg *dim = ek_need(k, f, "dim");
    if (!dim)
        return;
    if (dim->i < 0 || dim->i >= G_MAX_RANK)
        return (void)et_fail(k->p, FERRY_ERR_INTERNAL, "index_copy_ on axis %lld",
                             (long long)dim->i);
    int items[G_MAX_RANK];
    for (int i = 0; i < dim->i; i++)
        items[i] = -1;
    items[dim->i] = ek_tensor(k, f, "index");
    kargs a = ek_args_of(k, f);
    ek_a_tensor(&a, "self");
    ek_a_value(&a, et_list(k->p, ET_OPT_TENSOR_LIST, items, (int)dim->i + 1));
    ek_a_tensor(&a, "source");
    ek_a_bool(&a, false);
    ek_a_value(&a, outs[0]);
    et_call(k->p, "aten::index_put_", a.v, a.n);
}

/* a state written back into its input after every read of the old value */
static void t_copy(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = ek_args_of(k, f);
    ek_a_tensor(&a, "self");
    ek_a_tensor(&a, "src");
    ek_a_bool(&a, false);
    ek_a_value(&a, outs[0]);
    et_call(k->p, "aten::copy_", a.v, a.n);
}

/* Calls that are their kernel's arguments in schema order and one out: each argument as
 * `spec` says, a space-separated list of
 *   t:NAME  the tensor argument NAME       T:NAME  its tensor list
 *   s:NAME  the scalar argument NAME       i:NAME  its int list
 *   false   Bool(false)    1   Int(1)    none   None */
static const struct {
    const char *op, *kernel, *spec;
} PLAIN[] = {
    {"where.self", "aten::where.self_out", "t:condition t:self t:other"},
    {"index.Tensor", "aten::index.Tensor_out", "t:self T:indices"},
    {"expand.default", "aten::expand_copy.out", "t:self i:size false"},
    {"permute.default", "aten::permute_copy.out", "t:self i:dims"},
    {"cat.default", "aten::cat.out", "T:tensors s:dim"},
    {"stack.default", "aten::stack.out", "T:tensors s:dim"},
    {"slice.Tensor", "aten::slice_copy.Tensor_out", "t:self s:dim s:start s:end 1"},
    {"unsqueeze.default", "aten::unsqueeze_copy.out", "t:self s:dim"},
    /* the dtype lives in the out tensor */
    {"to.dtype", "aten::_to_copy.out", "t:self false none"},
    {"softmax.int", "aten::_softmax.out", "t:self s:dim false"},
    {"cumsum.default", "aten::cumsum.out", "t:self s:dim none"},
    {"arange.start_step", "aten::arange.start_out", "s:start s:end s:step"},
    {"full.default", "aten::full.out", "i:size s:fill_value"},
    {"gather.default", "aten::gather.out", "t:self s:dim t:index false"},
    {"clamp.default", "aten::clamp.out", "t:self s:min s:max"},
    {"pad.default", "aten::constant_pad_nd.out", "t:self i:pad s:value"},
};

static void t_plain(et_sink *k, const call_frame *f, const int *outs)
{
    size_t i = 0;
    while (i < sizeof PLAIN / sizeof PLAIN[0] && strcmp(PLAIN[i].op, f->op) != 0)
        i++;
    if (i == sizeof PLAIN / sizeof PLAIN[0])
        return (void)et_fail(k->p, FERRY_ERR_INTERNAL, "aten.%s: no plain translation", f->op);
    kargs a = ek_args_of(k, f);
    char name[32];
    for (const char *at = PLAIN[i].spec; *at;) {
        size_t len = strcspn(at, " ");
        const char *colon = memchr(at, ':', len);
        if (colon)
            snprintf(name, sizeof name, "%.*s", (int)(len - (size_t)(colon + 1 - at)), colon + 1);
        switch (*at) {
        case 't': ek_a_tensor(&a, name); break;
        case 'T': ek_a_tensors(&a, name); break;
        case 's': ek_a_scalar(&a, name); break;
        case 'i': ek_a_ints(&a, name); break;
        case 'f': ek_a_bool(&a, false); break;
        case '1': ek_a_int(&a, 1); break;
        default: ek_a_null(&a); break; /* none */
        }
        at += len + (at[len] == ' ');
    }
    ek_a_out(&a, PLAIN[i].kernel, outs[0]);
}

static const struct {
    const char *op;
    translate_fn fn;
} TRANSLATE[] = {
    {"index_copy_.default", t_index_copy}, {"copy_.default", t_copy},
    {"add.Tensor", t_add_sub}, {"sub.Tensor", t_add_sub}, {"mul.Tensor", t_binary},
    {"div.Tensor", t_binary}, {"pow.Tensor_Tensor", t_binary}, {"pow.Tensor_Scalar", t_binary},
    {"maximum.default", t_binary}, {"minimum.default", t_binary},
    {"logical_and.default", t_binary}, {"logical_or.default", t_binary},
    {"eq.Tensor", t_binary}, {"lt.Tensor", t_binary}, {"le.Tensor", t_binary},
    {"gt.Tensor", t_binary}, {"ge.Tensor", t_binary}, {"eq.Scalar", t_binary},
    {"lt.Scalar", t_binary}, {"le.Scalar", t_binary}, {"gt.Scalar", t_binary},
    {"ge.Scalar", t_binary}, {"div.Tensor_mode", t_div_mode},
    {"sqrt.default", t_unary}, {"reciprocal.default", t_unary}, {"exp.default", t_unary},
    {"cos.default", t_unary}, {"sin.default", t_unary}, {"sigmoid.default", t_unary},
    {"tanh.default", t_unary}, {"erf.default", t_unary}, {"neg.default", t_unary},
    {"logical_not.default", t_unary}, {"abs.default", t_unary}, {"log.default", t_unary},
    {"floor.default", t_unary}, {"silu.default", t_silu}, {"gelu.default", t_gelu},
    {"where.self", t_plain}, {"linear.default", t_linear}, {"matmul.default", t_matmul},
    {"index.Tensor", t_plain}, {"reshape.default", t_reshape}, {"expand.default", t_plain},
    {"permute.default", t_plain}, {"cat.default", t_plain},
    {"stack.default", t_plain}, {"slice.Tensor", t_plain},
    {"unsqueeze.default", t_plain}, {"to.dtype", t_plain}, {"mean.dim", t_reduce},
    {"amax.default", t_reduce}, {"sum.dim_IntList", t_reduce}, {"softmax.int", t_plain},
    {"cumsum.default", t_plain}, {"arange.start_step", t_plain}, {"full.default", t_plain},
    {"topk.default", t_topk}, {"gather.default", t_plain}, {"scatter.src", t_scatter},
    {"scatter_add.default", t_scatter}, {"clamp.default", t_plain}, {"pad.default", t_plain},
    {"conv1d.default", t_conv}, {"conv2d.default", t_conv}, {"conv3d.default", t_conv},
    {"embedding.default", t_embedding}, {"layer_norm.default", t_layer_norm},
};


translate_fn et_translation(const char *op)
{
    for (size_t i = 0; i < sizeof TRANSLATE / sizeof TRANSLATE[0]; i++)
        if (strcmp(TRANSLATE[i].op, op) == 0)
            return TRANSLATE[i].fn;
    return NULL;
}
