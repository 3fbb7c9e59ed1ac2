/* et_kernels.c — the aten emitter's sink for ExecuTorch (aten.h): each aten call the emitter
 * makes for an IR node (aten.linear, aten.reshape, ...: the level torch.export records before
 * decompositions) becomes the out-variant kernels the ExecuTorch runtime registers, with
 * every argument of their schemas in order and the return slot last (docs/pte-format.md §3,
 * §4): aten::linear.out, aten::view_copy.out, aten::native_layer_norm.out with its mean and
 * rstd, a matmul as bmm over its batch dims flattened, dtype casts as aten::_to_copy.out.
 * Scalars a call passes as numbers take the kernels' .Scalar overloads; SymInts are Int
 * values (et_program.c). Views are copies: every tensor has a place of its own in the arena. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/executorch/executorch.h"
#include "util/grow.h"

/* ---- a call as the emitter hands it over ---- */

typedef enum arg_type {
    A_TENSOR, A_TENSORS, A_INT, A_FLOAT, A_BOOL, A_STRING, A_NONE, A_INTS, A_SYMINT, A_SYMINTS,
    A_DTYPE, A_DEVICE
} arg_type;

#define MAX_ARGS 16
#define MAX_LIST 64
#define MAX_DEPTH 4

typedef struct call_arg {
    const char *name;
    arg_type type;
    aten_t t;
    aten_t list[MAX_LIST];
    int n;
    bool optional;
    int64_t i;
    double d;
    bool b;
    char s[24];
    int64_t ints[2 * G_MAX_RANK];
    g_dim dims[2 * G_MAX_RANK];
    ferry_dtype dt;
} call_arg;

typedef struct call_frame {
    char op[64];
    call_arg args[MAX_ARGS];
    int n_args;
} call_frame;

typedef struct et_sink {
    aten_sink sink;          /* first: the emitter hands this pointer back */
    aten_emitter emit;
    et_program *p;
    int *temps;              /* per emitter temporary: its EValue */
    g_shape *temp_shapes;
    size_t n_temps, cap_temps, cap_shapes;
    call_frame frame[MAX_DEPTH];
    int depth;
    g_shape out_shapes[G_MAX_OUT]; /* the outs of the call being translated */
} et_sink;

static et_sink *sink_of(aten_sink *s)
{
    return (et_sink *)(void *)s;
}

static call_arg *new_arg(aten_sink *s, const char *name, arg_type type)
{
    et_sink *k = sink_of(s);
    if (k->p->st != FERRY_OK)
        return NULL;
    call_frame *f = &k->frame[k->depth - 1];
    if (k->depth < 1 || f->n_args >= MAX_ARGS) {
        et_fail(k->p, FERRY_ERR_INTERNAL, "a call of more than %d arguments", MAX_ARGS);
        return NULL;
    }
    call_arg *a = &f->args[f->n_args++];
    memset(a, 0, sizeof *a);
    a->name = name;
    a->type = type;
    return a;
}

static void s_begin(aten_sink *s, const char *op)
{
    et_sink *k = sink_of(s);
    if (k->p->st != FERRY_OK)
        return;
    if (k->depth >= MAX_DEPTH) {
        et_fail(k->p, FERRY_ERR_INTERNAL, "calls nested %d deep", MAX_DEPTH);
        return;
    }
    call_frame *f = &k->frame[k->depth++];
    snprintf(f->op, sizeof f->op, "%s", op);
    f->n_args = 0;
}

static void s_tensor(aten_sink *s, const char *arg, int kind, aten_t t)
{
    (void)kind;
    call_arg *a = new_arg(s, arg, A_TENSOR);
    if (a)
        a->t = t;
}

static void s_tensors(aten_sink *s, const char *arg, int kind, const aten_t *t, int n,
                      bool optional)
{
    (void)kind;
    call_arg *a = new_arg(s, arg, A_TENSORS);
    if (!a)
        return;
    if (n > MAX_LIST) {
        et_fail(sink_of(s)->p, FERRY_ERR_UNSUPPORTED, "a list of %d tensors (at most %d)", n,
                MAX_LIST);
        return;
    }
    memcpy(a->list, t, (size_t)n * sizeof *t);
    a->n = n;
    a->optional = optional;
}

static void s_integer(aten_sink *s, const char *arg, int kind, int64_t v)
{
    (void)kind;
    call_arg *a = new_arg(s, arg, A_INT);
    if (a)
        a->i = v;
}

static void s_number(aten_sink *s, const char *arg, int kind, double v)
{
    (void)kind;
    call_arg *a = new_arg(s, arg, A_FLOAT);
    if (a)
        a->d = v;
}

static void s_boolean(aten_sink *s, const char *arg, int kind, bool v)
{
    (void)kind;
    call_arg *a = new_arg(s, arg, A_BOOL);
    if (a)
        a->b = v;
}

static void s_string(aten_sink *s, const char *arg, int kind, const char *v)
{
    (void)kind;
    call_arg *a = new_arg(s, arg, A_STRING);
    if (a)
        snprintf(a->s, sizeof a->s, "%s", v);
}

static void s_none(aten_sink *s, const char *arg, int kind)
{
    (void)kind;
    new_arg(s, arg, A_NONE);
}

static void s_ints(aten_sink *s, const char *arg, int kind, const int64_t *v, int n)
{
    (void)kind;
    call_arg *a = new_arg(s, arg, A_INTS);
    if (!a)
        return;
    if (n > 2 * G_MAX_RANK) {
        et_fail(sink_of(s)->p, FERRY_ERR_INTERNAL, "an int list of %d", n);
        return;
    }
    memcpy(a->ints, v, (size_t)n * sizeof *v);
    a->n = n;
}

static void s_symint(aten_sink *s, const char *arg, int kind, g_dim d)
{
    (void)kind;
    call_arg *a = new_arg(s, arg, A_SYMINT);
    if (a)
        a->dims[0] = d;
}

static void s_symints(aten_sink *s, const char *arg, int kind, const g_dim *d, int n)
{
    (void)kind;
    call_arg *a = new_arg(s, arg, A_SYMINTS);
    if (!a)
        return;
    if (n > 2 * G_MAX_RANK) {
        et_fail(sink_of(s)->p, FERRY_ERR_INTERNAL, "a size list of %d", n);
        return;
    }
    memcpy(a->dims, d, (size_t)n * sizeof *d);
    a->n = n;
}

static void s_scalar_type(aten_sink *s, const char *arg, int kind, ferry_dtype dt)
{
    (void)kind;
    call_arg *a = new_arg(s, arg, A_DTYPE);
    if (a)
        a->dt = dt;
}

static void s_device_cpu(aten_sink *s, const char *arg, int kind)
{
    (void)kind;
    new_arg(s, arg, A_DEVICE);
}

static bool s_failed(const aten_sink *s)
{
    return ((const et_sink *)(const void *)s)->p->st != FERRY_OK;
}

static void s_fail(aten_sink *s, ferry_status st, const char *msg)
{
    et_fail(sink_of(s)->p, st, "%s", msg);
}

/* ---- reading a call's arguments ---- */

static const call_arg *find(const call_frame *f, const char *name)
{
    for (int i = 0; i < f->n_args; i++)
        if (strcmp(f->args[i].name, name) == 0)
            return &f->args[i];
    return NULL;
}

/* an argument the emitter always passes */
static const call_arg *need(et_sink *k, const call_frame *f, const char *name)
{
    const call_arg *a = find(f, name);
    if (!a)
        et_fail(k->p, FERRY_ERR_INTERNAL, "%s: no argument '%s'", f->op, name);
    return a;
}

static int ref_value(et_sink *k, aten_t t)
{
    if (t >= 0)
        return et_of_value(k->p, t);
    size_t i = (size_t)ATEN_TEMP_INDEX(t);
    if (t == ATEN_NONE || i >= k->n_temps)
        return et_fail(k->p, FERRY_ERR_INTERNAL, "no temporary %d", (int)t), -1;
    return k->temps[i];
}

static const g_shape *ref_shape(et_sink *k, aten_t t)
{
    if (t >= 0)
        return &k->p->g->values[t].shape;
    return &k->temp_shapes[ATEN_TEMP_INDEX(t)];
}

/* the tensor argument `name` */
static int tensor(et_sink *k, const call_frame *f, const char *name)
{
    const call_arg *a = need(k, f, name);
    if (!a)
        return -1;
    if (a->type != A_TENSOR)
        return et_fail(k->p, FERRY_ERR_INTERNAL, "%s: '%s' is no tensor", f->op, name), -1;
    return ref_value(k, a->t);
}

static const g_shape *tensor_shape(et_sink *k, const call_frame *f, const char *name)
{
    const call_arg *a = find(f, name);
    return a && a->type == A_TENSOR ? ref_shape(k, a->t) : NULL;
}

/* an optional tensor: Null when absent or None */
static int optional_tensor(et_sink *k, const call_frame *f, const char *name)
{
    const call_arg *a = find(f, name);
    if (!a || a->type == A_NONE)
        return et_null(k->p);
    return tensor(k, f, name);
}

/* a Scalar, Int or SymInt argument as its EValue */
static int scalar(et_sink *k, const call_arg *a)
{
    switch (a->type) {
    case A_INT: return et_int(k->p, a->i);
    case A_FLOAT: return et_double(k->p, a->d);
    case A_BOOL: return et_bool(k->p, a->b);
    case A_SYMINT: return et_dim(k->p, a->dims[0]);
    case A_NONE: return et_null(k->p);
    default:
        return et_fail(k->p, FERRY_ERR_INTERNAL, "argument '%s' is no scalar", a->name), -1;
    }
}

static int scalar_arg(et_sink *k, const call_frame *f, const char *name)
{
    const call_arg *a = need(k, f, name);
    return a ? scalar(k, a) : -1;
}

/* an int list: constants (A_INTS) or SymInts */
static int int_list(et_sink *k, const call_frame *f, const char *name)
{
    const call_arg *a = need(k, f, name);
    if (!a)
        return -1;
    if (a->type == A_INTS)
        return et_int_list(k->p, a->ints, a->n);
    if (a->type == A_SYMINTS)
        return et_dims(k->p, a->dims, a->n);
    return et_fail(k->p, FERRY_ERR_INTERNAL, "%s: '%s' is no int list", f->op, name), -1;
}

static int tensor_list(et_sink *k, const call_frame *f, const char *name)
{
    const call_arg *a = need(k, f, name);
    if (!a)
        return -1;
    if (a->type != A_TENSORS)
        return et_fail(k->p, FERRY_ERR_INTERNAL, "%s: '%s' is no tensor list", f->op, name),
               -1;
    int items[MAX_LIST];
    for (int i = 0; i < a->n; i++)
        items[i] = a->optional && a->list[i] == ATEN_NONE ? -1 : ref_value(k, a->list[i]);
    return et_list(k->p, a->optional ? ET_OPT_TENSOR_LIST : ET_TENSOR_LIST, items, a->n);
}

static bool is_number(const call_frame *f, const char *name)
{
    const call_arg *a = find(f, name);
    return a && (a->type == A_INT || a->type == A_FLOAT);
}

/* ---- kernels ---- */

/* A kernel call's arguments, appended one statement at a time: each may make values and
 * instructions of its own (a SymInt), so their order is the program's, whatever the compiler. */
typedef struct kargs {
    et_sink *k;
    const call_frame *f;
    int v[MAX_ARGS + 3];
    int n;
} kargs;

static kargs args_of(et_sink *k, const call_frame *f)
{
    return (kargs){.k = k, .f = f};
}

static void a_value(kargs *a, int v)
{
    if (a->n < MAX_ARGS)
        a->v[a->n++] = v;
    else
        et_fail(a->k->p, FERRY_ERR_INTERNAL, "%s: more than %d arguments", a->f->op, MAX_ARGS);
}

static void a_tensor(kargs *a, const char *name)
{
    a_value(a, tensor(a->k, a->f, name));
}

static void a_optional(kargs *a, const char *name)
{
    a_value(a, optional_tensor(a->k, a->f, name));
}

static void a_scalar(kargs *a, const char *name)
{
    a_value(a, scalar_arg(a->k, a->f, name));
}

static void a_ints(kargs *a, const char *name)
{
    a_value(a, int_list(a->k, a->f, name));
}

static void a_tensors(kargs *a, const char *name)
{
    a_value(a, tensor_list(a->k, a->f, name));
}

static void a_int(kargs *a, int64_t v)
{
    a_value(a, et_int(a->k->p, v));
}

static void a_bool(kargs *a, bool v)
{
    a_value(a, et_bool(a->k->p, v));
}

static void a_null(kargs *a)
{
    a_value(a, et_null(a->k->p));
}

/* a kernel of one out: the arguments so far, then the out twice (the out argument and the
 * return slot) */
static void a_out(kargs *a, const char *op, int out)
{
    a->v[a->n++] = out;
    a->v[a->n++] = out;
    et_call(a->k->p, op, a->v, a->n);
}

/* A tensor of `rank` extents made inside a translation (a view's operand), each at its bound,
 * planned. */
static int temp_tensor(et_program *p, ferry_dtype dt, int rank, const int64_t *bounds,
                       bool dynamic)
{
    g_shape s = {.rank = rank};
    for (int i = 0; i < rank; i++)
        s.d[i] = g_dim_const(bounds[i]);
    int k = et_tensor(p, dt, &s);
    if (k >= 0)
        p->values[k].dynamic = dynamic;
    return k;
}

/* what a translation reads of a tensor value, copied: making values moves p->values */
static et_value value_of(const et_program *p, int v)
{
    return p->values[v];
}

typedef void (*translate_fn)(et_sink *k, const call_frame *f, const int *outs);

/* add/sub: a tensor's .out or a number's .Scalar_out, alpha 1 */
static void t_add_sub(et_sink *k, const call_frame *f, const int *outs)
{
    bool sub = strncmp(f->op, "sub", 3) == 0, number = is_number(f, "other");
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    if (number)
        a_scalar(&a, "other");
    else
        a_tensor(&a, "other");
    a_int(&a, 1);
    a_out(&a, number ? (sub ? "aten::sub.Scalar_out" : "aten::add.Scalar_out")
                     : (sub ? "aten::sub.out" : "aten::add.out"),
          outs[0]);
}

/* ops whose .Tensor overload becomes <name>.out (comparisons: .Tensor_out; pow:
 * .Tensor_Tensor_out), a number's <name>.Scalar_out (pow: .Tensor_Scalar_out) */
static void t_binary(et_sink *k, const call_frame *f, const int *outs)
{
    char name[48], op[80];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(f->op, "."), f->op);
    const char *second = find(f, "exponent") ? "exponent" : "other";
    bool pow = strcmp(name, "pow") == 0, number = is_number(f, second);
    bool compare = strcmp(name, "eq") == 0 || strcmp(name, "lt") == 0 ||
                   strcmp(name, "le") == 0 || strcmp(name, "gt") == 0 || strcmp(name, "ge") == 0;
    if (number)
        snprintf(op, sizeof op, "aten::%s.%s", name, pow ? "Tensor_Scalar_out" : "Scalar_out");
    else
        snprintf(op, sizeof op, "aten::%s.%s", name,
                 compare ? "Tensor_out" : pow ? "Tensor_Tensor_out" : "out");
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    if (number)
        a_scalar(&a, second);
    else
        a_tensor(&a, second);
    a_out(&a, op, outs[0]);
}

static void t_div_mode(et_sink *k, const call_frame *f, const int *outs)
{
    const call_arg *mode = need(k, f, "rounding_mode");
    if (!mode)
        return;
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_tensor(&a, "other");
    a_value(&a, et_string(k->p, mode->s));
    a_out(&a, "aten::div.out_mode", outs[0]);
}

static void t_unary(et_sink *k, const call_frame *f, const int *outs)
{
    char op[80];
    snprintf(op, sizeof op, "aten::%.*s.out", (int)strcspn(f->op, "."), f->op);
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_out(&a, op, outs[0]);
}

/* no silu kernel: x * sigmoid(x) */
static void t_silu(et_sink *k, const call_frame *f, const int *outs)
{
    et_program *p = k->p;
    et_value y = value_of(p, outs[0]);
    int x = tensor(k, f, "self");
    int s = temp_tensor(p, y.dtype, y.rank, y.sizes, y.dynamic);
    kargs a = args_of(k, f);
    a_value(&a, x);
    a_out(&a, "aten::sigmoid.out", s);
    kargs b = args_of(k, f);
    a_value(&b, x);
    a_value(&b, s);
    a_out(&b, "aten::mul.out", outs[0]);
}

static void t_gelu(et_sink *k, const call_frame *f, const int *outs)
{
    const call_arg *mode = find(f, "approximate");
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_value(&a, et_string(k->p, mode ? mode->s : "none"));
    a_out(&a, "aten::gelu.out", outs[0]);
}

static void t_where(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensor(&a, "condition");
    a_tensor(&a, "self");
    a_tensor(&a, "other");
    a_out(&a, "aten::where.self_out", outs[0]);
}

/* the graph value a tensor argument names (-1: a temporary, None or absent) */
static int graph_value_arg(const call_frame *f, const char *name)
{
    const call_arg *a = find(f, name);
    return a && a->type == A_TENSOR && a->t >= 0 ? a->t : -1;
}

/* a linear: in the XNNPACK delegate where the program delegates it, else the portable kernel */
static void t_linear(et_sink *k, const call_frame *f, const int *outs)
{
    if (et_xnn_linear(k->p, tensor(k, f, "input"), graph_value_arg(f, "weight"),
                      graph_value_arg(f, "bias"), outs[0]) || k->p->st != FERRY_OK)
        return;
    kargs a = args_of(k, f);
    a_tensor(&a, "input");
    a_tensor(&a, "weight");
    a_optional(&a, "bias");
    a_out(&a, "aten::linear.out", outs[0]);
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
    int y = temp_tensor(p, dt, rank, bounds, dynamic);
    kargs a = args_of(k, f);
    a_value(&a, x);
    a_value(&a, et_list(p, ET_INT_LIST, d, rank));
    a_out(&a, "aten::view_copy.out", y);
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
    kargs a = args_of(k, f);
    a_value(&a, x);
    a_value(&a, et_dims(p, to.d, to.rank));
    a_bool(&a, false);
    a_out(&a, "aten::expand_copy.out", y);
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
    const g_shape *sa = tensor_shape(k, f, "self"), *sb = tensor_shape(k, f, "other");
    const g_shape *sy = out_shape(k, outs[0]);
    ferry_dtype dt = p->values[outs[0]].dtype;
    int x = tensor(k, f, "self"), w = tensor(k, f, "other");
    if (x < 0 || w < 0 || !sa || !sb)
        return;
    kargs a = args_of(k, f);
    if (sa->rank == 2 && sb->rank == 2) {
        a_value(&a, x);
        a_value(&a, w);
        a_out(&a, "aten::mm.out", outs[0]);
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
        int r = temp_tensor(p, dt, 3, (const int64_t[]){batch_bound, rows_bound, nn}, dynamic);
        a_value(&a, x);
        a_value(&a, w);
        a_out(&a, "aten::bmm.out", r);
        kargs v = args_of(k, f);
        a_value(&v, r);
        a_value(&v, et_dims(p, sy->d, sy->rank));
        a_out(&v, "aten::view_copy.out", outs[0]);
        return;
    }
    x = expand_batch(k, f, x, sa, sy->d, n);
    w = expand_batch(k, f, w, sb, sy->d, n);
    if (!et_dim_bound(&p->g->syms, sa->d[sa->rank - 2], &m) ||
        !et_dim_bound(&p->g->syms, sa->d[sa->rank - 1], &kk) ||
        !et_dim_bound(&p->g->syms, sb->d[sb->rank - 1], &nn))
        return (void)et_fail(p, FERRY_ERR_UNSUPPORTED, "a matmul over an unbounded extent");
    if (n == 1) {
        a_value(&a, x);
        a_value(&a, w);
        a_out(&a, "aten::bmm.out", outs[0]);
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
    int r = temp_tensor(p, dt, 3, (const int64_t[]){batch_bound, m, nn}, dynamic);
    a_value(&a, x);
    a_value(&a, w);
    a_out(&a, "aten::bmm.out", r);
    kargs v = args_of(k, f);
    a_value(&v, r);
    a_value(&v, et_dims(p, sy->d, sy->rank));
    a_out(&v, "aten::view_copy.out", outs[0]);
}

static void t_index(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_tensors(&a, "indices");
    a_out(&a, "aten::index.Tensor_out", outs[0]);
}

/* reshape: a copy into the output's extents (which the IR knows, where aten takes a -1) */
static void t_reshape(et_sink *k, const call_frame *f, const int *outs)
{
    const g_shape *sy = out_shape(k, outs[0]);
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_value(&a, et_dims(k->p, sy->d, sy->rank));
    a_out(&a, "aten::view_copy.out", outs[0]);
}

static void t_expand(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_ints(&a, "size");
    a_bool(&a, false);
    a_out(&a, "aten::expand_copy.out", outs[0]);
}

static void t_permute(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_ints(&a, "dims");
    a_out(&a, "aten::permute_copy.out", outs[0]);
}

static void t_cat_stack(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensors(&a, "tensors");
    a_scalar(&a, "dim");
    a_out(&a, f->op[0] == 'c' ? "aten::cat.out" : "aten::stack.out", outs[0]);
}

static void t_slice(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_scalar(&a, "dim");
    a_scalar(&a, "start");
    a_scalar(&a, "end");
    a_int(&a, 1);
    a_out(&a, "aten::slice_copy.Tensor_out", outs[0]);
}

static void t_unsqueeze(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_scalar(&a, "dim");
    a_out(&a, "aten::unsqueeze_copy.out", outs[0]);
}

/* the dtype lives in the out tensor */
static void t_to(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_bool(&a, false);
    a_null(&a);
    a_out(&a, "aten::_to_copy.out", outs[0]);
}

static void t_reduce(et_sink *k, const call_frame *f, const int *outs)
{
    bool amax = strncmp(f->op, "amax", 4) == 0, mean = strncmp(f->op, "mean", 4) == 0;
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_ints(&a, "dim");
    a_scalar(&a, "keepdim");
    if (!amax)
        a_null(&a); /* dtype */
    a_out(&a, amax ? "aten::amax.out" : mean ? "aten::mean.out" : "aten::sum.IntList_out",
          outs[0]);
}

static void t_softmax(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_scalar(&a, "dim");
    a_bool(&a, false);
    a_out(&a, "aten::_softmax.out", outs[0]);
}

static void t_cumsum(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_scalar(&a, "dim");
    a_null(&a);
    a_out(&a, "aten::cumsum.out", outs[0]);
}

static void t_arange(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_scalar(&a, "start");
    a_scalar(&a, "end");
    a_scalar(&a, "step");
    a_out(&a, "aten::arange.start_out", outs[0]);
}

static void t_full(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_ints(&a, "size");
    a_scalar(&a, "fill_value");
    a_out(&a, "aten::full.out", outs[0]);
}

/* two outs, then the list of them as the return slot */
static void t_topk(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_scalar(&a, "k");
    a_scalar(&a, "dim");
    a_bool(&a, true);
    a_bool(&a, true);
    a_value(&a, outs[0]);
    a_value(&a, outs[1]);
    a_value(&a, et_list(k->p, ET_TENSOR_LIST, outs, 2));
    et_call(k->p, "aten::topk.values", a.v, a.n);
}

static void t_gather(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_scalar(&a, "dim");
    a_tensor(&a, "index");
    a_bool(&a, false);
    a_out(&a, "aten::gather.out", outs[0]);
}

static void t_scatter(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_scalar(&a, "dim");
    a_tensor(&a, "index");
    a_tensor(&a, "src");
    a_out(&a, strncmp(f->op, "scatter_add", 11) == 0 ? "aten::scatter_add.out"
                                                     : "aten::scatter.src_out",
          outs[0]);
}

static void t_clamp(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_scalar(&a, "min");
    a_scalar(&a, "max");
    a_out(&a, "aten::clamp.out", outs[0]);
}

static void t_pad(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_ints(&a, "pad");
    a_scalar(&a, "value");
    a_out(&a, "aten::constant_pad_nd.out", outs[0]);
}

static void t_conv(et_sink *k, const call_frame *f, const int *outs)
{
    const call_arg *stride = need(k, f, "stride");
    if (!stride)
        return;
    if (stride->n > 2)
        return (void)et_fail(k->p, FERRY_ERR_UNSUPPORTED, "a %d-D convolution: the runtime's "
                             "aten::convolution.out computes 1-D and 2-D ones", stride->n);
    int64_t zeros[G_CONV_MAX_SPATIAL] = {0};
    kargs a = args_of(k, f);
    a_tensor(&a, "input");
    a_tensor(&a, "weight");
    a_optional(&a, "bias");
    a_ints(&a, "stride");
    a_ints(&a, "padding");
    a_ints(&a, "dilation");
    a_bool(&a, false);
    a_value(&a, et_int_list(k->p, zeros, stride->n));
    a_scalar(&a, "groups");
    a_out(&a, "aten::convolution.out", outs[0]);
}

static void t_embedding(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensor(&a, "weight");
    a_tensor(&a, "indices");
    a_int(&a, -1);
    a_bool(&a, false);
    a_bool(&a, false);
    a_out(&a, "aten::embedding.out", outs[0]);
}

/* native_layer_norm also returns each row's mean and rstd ([..., 1] per normalized axis):
 * three outs, then the list of them as the return slot */
static void t_layer_norm(et_sink *k, const call_frame *f, const int *outs)
{
    et_program *p = k->p;
    const call_arg *norm = need(k, f, "normalized_shape");
    if (!norm)
        return;
    et_value y = value_of(p, outs[0]);
    int64_t stat[G_MAX_RANK];
    memcpy(stat, y.sizes, sizeof stat);
    for (int i = y.rank - norm->n; i < y.rank; i++)
        stat[i] = 1;
    kargs a = args_of(k, f);
    a_tensor(&a, "input");
    a_ints(&a, "normalized_shape");
    a_optional(&a, "weight");
    a_optional(&a, "bias");
    a_scalar(&a, "eps");
    int three[3] = {outs[0], -1, -1};
    three[1] = temp_tensor(p, y.dtype, y.rank, stat, y.dynamic);
    three[2] = temp_tensor(p, y.dtype, y.rank, stat, y.dynamic);
    for (int i = 0; i < 3; i++)
        a_value(&a, three[i]);
    a_value(&a, et_list(p, ET_TENSOR_LIST, three, 3));
    et_call(p, "aten::native_layer_norm.out", a.v, a.n);
}

/* a static cache's rows written into it: index_put_ over (None, ..., slots) at `dim` */
static void t_index_copy(et_sink *k, const call_frame *f, const int *outs)
{
    const call_arg *dim = need(k, f, "dim");
    if (!dim)
        return;
    if (dim->i < 0 || dim->i >= G_MAX_RANK)
        return (void)et_fail(k->p, FERRY_ERR_INTERNAL, "index_copy_ on axis %lld",
                             (long long)dim->i);
    int items[G_MAX_RANK];
    for (int i = 0; i < dim->i; i++)
        items[i] = -1;
    items[dim->i] = tensor(k, f, "index");
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_value(&a, et_list(k->p, ET_OPT_TENSOR_LIST, items, (int)dim->i + 1));
    a_tensor(&a, "source");
    a_bool(&a, false);
    a_value(&a, outs[0]);
    et_call(k->p, "aten::index_put_", a.v, a.n);
}

/* a state written back into its input after every read of the old value */
static void t_copy(et_sink *k, const call_frame *f, const int *outs)
{
    kargs a = args_of(k, f);
    a_tensor(&a, "self");
    a_tensor(&a, "src");
    a_bool(&a, false);
    a_value(&a, outs[0]);
    et_call(k->p, "aten::copy_", a.v, a.n);
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
    {"where.self", t_where}, {"linear.default", t_linear}, {"matmul.default", t_matmul},
    {"index.Tensor", t_index}, {"reshape.default", t_reshape}, {"expand.default", t_expand},
    {"permute.default", t_permute}, {"cat.default", t_cat_stack},
    {"stack.default", t_cat_stack}, {"slice.Tensor", t_slice},
    {"unsqueeze.default", t_unsqueeze}, {"to.dtype", t_to}, {"mean.dim", t_reduce},
    {"amax.default", t_reduce}, {"sum.dim_IntList", t_reduce}, {"softmax.int", t_softmax},
    {"cumsum.default", t_cumsum}, {"arange.start_step", t_arange}, {"full.default", t_full},
    {"topk.default", t_topk}, {"gather.default", t_gather}, {"scatter.src", t_scatter},
    {"scatter_add.default", t_scatter}, {"clamp.default", t_clamp}, {"pad.default", t_pad},
    {"conv1d.default", t_conv}, {"conv2d.default", t_conv}, {"conv3d.default", t_conv},
    {"embedding.default", t_embedding}, {"layer_norm.default", t_layer_norm},
};

static bool push_temp(et_sink *k, int value, const g_shape *s)
{
    int *t = fy_grow(k->temps, &k->cap_temps, k->n_temps + 1, sizeof *t);
    if (t)
        k->temps = t;
    g_shape *sh = fy_grow(k->temp_shapes, &k->cap_shapes, k->n_temps + 1, sizeof *sh);
    if (sh)
        k->temp_shapes = sh;
    if (!t || !sh)
        return et_fail(k->p, FERRY_ERR_NOMEM, "out of memory"), false;
    k->temps[k->n_temps] = value;
    k->temp_shapes[k->n_temps++] = *s;
    return true;
}

static void s_end(aten_sink *s, int n, const aten_out *outs, const char *node, aten_t *refs)
{
    (void)node;
    et_sink *k = sink_of(s);
    et_program *p = k->p;
    if (p->st != FERRY_OK || k->depth < 1)
        return;
    call_frame *f = &k->frame[k->depth - 1];
    int made[G_MAX_OUT];
    if (n > G_MAX_OUT)
        return (void)et_fail(p, FERRY_ERR_INTERNAL, "a call of %d outputs", n);
    /* an in-place op ("copy_.default") returns its self: its output is that tensor */
    bool in_place = f->op[strcspn(f->op, ".") - 1] == '_';
    for (int i = 0; i < n && p->st == FERRY_OK; i++) {
        k->out_shapes[i] = outs[i].shape;
        made[i] = in_place && i == 0 ? tensor(k, f, "self")
                                     : et_tensor(p, outs[i].dtype, &outs[i].shape);
        if (made[i] < 0)
            break;
        if (outs[i].value != G_NONE) {
            if (!(in_place && i == 0))
                p->values[made[i]].graph_value = outs[i].value;
            p->of_value[outs[i].value] = made[i];
            refs[i] = outs[i].value;
        } else if (push_temp(k, made[i], &outs[i].shape)) {
            refs[i] = ATEN_TEMP((int)k->n_temps - 1);
        }
    }
    translate_fn fn = NULL;
    for (size_t i = 0; i < sizeof TRANSLATE / sizeof TRANSLATE[0] && !fn; i++)
        if (strcmp(TRANSLATE[i].op, f->op) == 0)
            fn = TRANSLATE[i].fn;
    if (p->st == FERRY_OK && !fn)
        et_fail(p, FERRY_ERR_UNSUPPORTED, "aten.%s has no ExecuTorch kernel in ferry's "
                "executorch format yet", f->op);
    if (p->st == FERRY_OK)
        fn(k, f, made);
    k->depth--;
}

static const aten_sink_ops ET_SINK_OPS = {
    .begin = s_begin, .tensor = s_tensor, .tensors = s_tensors, .integer = s_integer,
    .number = s_number, .boolean = s_boolean, .string = s_string, .none = s_none,
    .ints = s_ints, .symint = s_symint, .symints = s_symints, .scalar_type = s_scalar_type,
    .device_cpu = s_device_cpu, .end = s_end, .tied_head = NULL, .failed = s_failed,
    .fail = s_fail,
};

/* ---- the program ---- */

/* an output the graph does not compute (an input or a constant passed through): a copy */
static int output_value(et_program *p, int v)
{
    int x = et_of_value(p, v);
    if (x < 0 || (p->values[x].graph_value == v && p->g->values[v].kind == GV_NODE))
        return x;
    const g_value *gv = &p->g->values[v];
    int y = et_tensor(p, gv->dtype, &gv->shape);
    int args[4] = {x, et_null(p), y, y};
    et_call(p, "aten::clone.out", args, 4);
    return y;
}

ferry_status et_emit_program(et_program *p, fy_err *err)
{
    const g_graph *g = p->g;
    if (p->st != FERRY_OK)
        return p->st;
    for (size_t i = 0; i < g->n_inputs && p->st == FERRY_OK; i++) {
        const g_value *x = &g->values[g->inputs[i]];
        int k = et_tensor(p, x->dtype, &x->shape);
        if (k < 0)
            break;
        p->values[k].graph_value = g->inputs[i];
        p->of_value[g->inputs[i]] = k;
        p->inputs[p->n_inputs++] = k;
    }
    et_sink k = {.sink = {.ops = &ET_SINK_OPS}, .p = p};
    aten_ints *ints = p->st == FERRY_OK ? aten_track(g) : NULL;
    if (p->st == FERRY_OK && (!ints || !aten_emitter_init(&k.emit, g, ints, &k.sink)))
        et_fail(p, FERRY_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < g->n_nodes && p->st == FERRY_OK; i++) {
        if (g->nodes[i].dead)
            continue;
        p->where = g->nodes[i].name;
        aten_emit_node(&k.emit, i);
    }
    if (p->st == FERRY_OK)
        aten_emit_mutations(&k.emit);
    p->where = NULL;
    /* a generation component: its cache tensors (written in place) first, its outputs, then
     * the cache tensors again, as transformers' programs list their mutated inputs and the
     * cache they return, which the guide's C++ loop binds (the same tensors here: no copy) */
    size_t first = p->n_outputs;
    for (size_t i = 0; i < g->n_inputs && p->st == FERRY_OK; i++)
        for (size_t j = 0; j < g->n_states; j++)
            if (g->states[j].in == g->inputs[i]) {
                p->values[p->inputs[i]].state = true;
                p->outputs[p->n_outputs++] = p->inputs[i];
            }
    p->n_state_outputs = p->n_outputs - first;
    for (size_t i = 0; i < g->n_outputs && p->st == FERRY_OK; i++) {
        int y = output_value(p, g->outputs[i]);
        if (y >= 0)
            p->outputs[p->n_outputs++] = y;
    }
    for (size_t i = 0; i < p->n_state_outputs && p->st == FERRY_OK; i++)
        p->outputs[p->n_outputs++] = p->outputs[first + i];
    aten_emitter_free(&k.emit);
    free(ints);
    free(k.temps);
    free(k.temp_shapes);
    (void)err;
    return p->st;
}
