/* et_program.c — the ExecuTorch program being made: its values (EValues: the tensors, and the
 * ints, lists and scalars its kernels take as arguments), its operators and its instructions,
 * in one execution plan ("forward"). Sizes a kernel reads at run time are Int values: a
 * symbolic extent is read off the input that has it (aten::sym_size.int), and its arithmetic
 * is executorch_prim's, each computed once. Tensors are sized at their bounds, as ExecuTorch
 * plans them (docs/pte-format.md §2, §3.3). */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/executorch/executorch.h"
#include "util/dtype.h"
#include "util/grow.h"

ferry_status et_fail(et_program *p, ferry_status st, const char *fmt, ...)
{
    if (p->st != FERRY_OK)
        return p->st;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->st = st;
    if (p->where)
        return fy_fail(p->err, st, "executorch: %s (node '%s')", msg, p->where);
    return fy_fail(p->err, st, "executorch: %s", msg);
}

void et_program_init(et_program *p, const g_graph *g, fy_err *err)
{
    *p = (et_program){.g = g, .err = err};
    p->of_value = malloc((g->n_values ? g->n_values : 1) * sizeof *p->of_value);
    p->inputs = malloc((g->n_inputs ? g->n_inputs : 1) * sizeof *p->inputs);
    p->outputs = malloc((g->n_outputs + 2 * g->n_states + 1) * sizeof *p->outputs);
    if (!p->of_value || !p->inputs || !p->outputs) {
        et_fail(p, FERRY_ERR_NOMEM, "out of memory");
        return;
    }
    for (size_t i = 0; i < g->n_values; i++)
        p->of_value[i] = -1;
}

void et_program_free(et_program *p)
{
    for (size_t i = 0; i < p->n_values; i++) {
        free(p->values[i].s);
        free(p->values[i].items);
    }
    free(p->values);
    for (size_t i = 0; i < p->n_instrs; i++)
        free(p->instrs[i].args);
    free(p->instrs);
    for (size_t i = 0; i < p->n_operators; i++)
        free(p->operators[i]);
    free(p->operators);
    free(p->inputs);
    free(p->outputs);
    free(p->of_value);
    free(p->dims);
    free(p->constants);
    for (size_t i = 0; i < p->n_delegates; i++)
        free(p->delegates[i].blob);
    free(p->delegates);
    for (size_t i = 0; i < p->n_partitions; i++) {
        free(p->partitions[i].values);
        free(p->partitions[i].nodes);
        free(p->partitions[i].bytes);
    }
    free(p->partitions);
    free(p->named);
    *p = (et_program){0};
}

static int add_value(et_program *p, et_kind kind)
{
    if (p->st != FERRY_OK)
        return -1;
    if (p->n_values >= INT_MAX / 2)
        return et_fail(p, FERRY_ERR_UNSUPPORTED, "more values than a program holds"), -1;
    et_value *v = fy_grow(p->values, &p->cap_values, p->n_values + 1, sizeof *v);
    if (!v)
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory"), -1;
    p->values = v;
    v[p->n_values] = (et_value){.kind = kind, .graph_value = -1, .offset = ET_NO_PLACE,
                                .first = -1, .last = -1};
    return (int)p->n_values++;
}

int et_null(et_program *p)
{
    return add_value(p, ET_NULL);
}

int et_int(et_program *p, int64_t v)
{
    int k = add_value(p, ET_INT);
    if (k >= 0)
        p->values[k].i = v;
    return k;
}

int et_bool(et_program *p, bool v)
{
    int k = add_value(p, ET_BOOL);
    if (k >= 0)
        p->values[k].b = v;
    return k;
}

int et_double(et_program *p, double v)
{
    int k = add_value(p, ET_DOUBLE);
    if (k >= 0)
        p->values[k].d = v;
    return k;
}

int et_string(et_program *p, const char *s)
{
    int k = add_value(p, ET_STRING);
    if (k >= 0 && !(p->values[k].s = strdup(s)))
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory"), -1;
    return k;
}

int et_list(et_program *p, et_kind kind, const int *items, int n)
{
    for (int i = 0; i < n; i++)
        if (items[i] < 0 && !(kind == ET_OPT_TENSOR_LIST && items[i] == -1))
            return -1; /* an item that failed */
    int k = add_value(p, kind);
    if (k < 0)
        return -1;
    et_value *v = &p->values[k];
    if (!(v->items = malloc((n ? (size_t)n : 1) * sizeof *v->items)))
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory"), -1;
    memcpy(v->items, items, (size_t)n * sizeof *items);
    v->n_items = n;
    return k;
}

int et_int_list(et_program *p, const int64_t *v, int n)
{
    int items[G_MAX_RANK * 2];
    if (n > (int)(sizeof items / sizeof items[0]))
        return et_fail(p, FERRY_ERR_INTERNAL, "an int list of %d", n), -1;
    for (int i = 0; i < n; i++)
        items[i] = et_int(p, v[i]);
    return et_list(p, ET_INT_LIST, items, n);
}

bool et_dim_bound(const g_symtab *syms, g_dim d, int64_t *bound)
{
    if (d.unknown)
        return false;
    __int128 b = d.c;
    for (int i = 0; i < d.n; i++) {
        const g_sym *s = &syms->s[d.t[i].sym];
        if (d.t[i].coef > 0 && s->max <= 0)
            return false;
        b += (__int128)d.t[i].coef * (d.t[i].coef > 0 ? s->max : s->min);
    }
    if (b < 0 || b > INT32_MAX)
        return false;
    *bound = (int64_t)b;
    return true;
}

int et_tensor(et_program *p, ferry_dtype dt, const g_shape *shape)
{
    int k = add_value(p, ET_TENSOR);
    if (k < 0)
        return -1;
    et_value *v = &p->values[k];
    v->dtype = dt;
    v->rank = shape->rank;
    v->planned = true;
    for (int i = 0; i < shape->rank; i++) {
        int64_t c;
        if (!g_dim_is_const(shape->d[i], &c))
            v->dynamic = true;
        if (!et_dim_bound(&p->g->syms, shape->d[i], &v->sizes[i])) {
            char text[96] = "?";
            g_dim_print(shape->d[i], &p->g->syms, text, sizeof text);
            return et_fail(p, FERRY_ERR_UNSUPPORTED, "a tensor extent (%s) with no largest "
                           "value of at most 2^31 - 1: ExecuTorch plans every tensor at its "
                           "largest size, which its sizes hold as 32-bit integers: lower the "
                           "dynamic axes' bounds (max_seq_len, max_batch_size, or a --dim "
                           "max)", text), -1;
        }
    }
    return k;
}

/* ---- sizes at run time ---- */

/* The value already computed for `d`, or -1. */
static int known(const et_program *p, g_dim d)
{
    for (size_t i = 0; i < p->n_dims; i++)
        if (g_dim_eq(p->dims[i].d, d))
            return p->dims[i].value;
    return -1;
}

static int remember(et_program *p, g_dim d, int value)
{
    if (value < 0)
        return -1;
    et_dim_memo *m = fy_grow(p->dims, &p->cap_dims, p->n_dims + 1, sizeof *m);
    if (!m)
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory"), -1;
    p->dims = m;
    m[p->n_dims++] = (et_dim_memo){d, value};
    return value;
}

static int computed_int(et_program *p)
{
    int k = et_int(p, 0);
    if (k >= 0)
        p->values[k].computed = true;
    return k;
}

/* executorch_prim::<op>.Scalar(a, b) -> a new Int */
static int prim(et_program *p, const char *op, int a, int b)
{
    int out = computed_int(p);
    int args[3] = {a, b, out};
    if (a < 0 || b < 0 || out < 0)
        return -1;
    et_call(p, op, args, 3);
    return p->st == FERRY_OK ? out : -1;
}

/* A symbol's value: the size of the input axis it is read off (g_input_symbol), divided by
 * the axis's multiple of it where it is one. */
static int symbol_size(et_program *p, int sym)
{
    int v, axis;
    int64_t k;
    g_dim d = g_dim_sym(sym);
    if (!g_input_symbol(p->g, sym, &v, &axis, &k)) {
        char text[96] = "?";
        g_dim_print(d, &p->g->syms, text, sizeof text);
        return et_fail(p, FERRY_ERR_UNSUPPORTED, "the extent %s is on no input's axis, so the "
                       "program cannot read it", text), -1;
    }
    int args[3];
    args[0] = et_of_value(p, v);
    args[1] = et_int(p, axis);
    args[2] = computed_int(p);
    int out = args[2];
    if (args[0] < 0 || args[1] < 0 || out < 0)
        return -1;
    et_call(p, "aten::sym_size.int", args, 3);
    if (p->st != FERRY_OK)
        return -1;
    if (k == 1)
        return out;
    remember(p, g_dim_scale(d, k), out);
    return prim(p, "executorch_prim::floordiv.Scalar", out, et_int(p, k));
}

int et_dim(et_program *p, g_dim d)
{
    int64_t c;
    if (p->st != FERRY_OK)
        return -1;
    if (g_dim_is_const(d, &c))
        return et_int(p, c);
    if (d.unknown)
        return et_fail(p, FERRY_ERR_UNSUPPORTED, "a size that depends on data, which the "
                       "program cannot compute from its inputs' sizes"), -1;
    int value = known(p, d);
    if (value >= 0)
        return value;
    g_term last = d.t[d.n - 1];
    /* each operand made before the next (their values and instructions in this order) */
    int a, b;
    if (d.c != 0) {
        g_dim terms = d;
        terms.c = 0;
        a = et_dim(p, terms);
        b = et_int(p, d.c);
        return remember(p, d, prim(p, "executorch_prim::add.Scalar", a, b));
    }
    if (d.n > 1) {
        g_dim head = d, tail = g_dim_scale(g_dim_sym(last.sym), last.coef);
        head.n--;
        a = et_dim(p, head);
        b = et_dim(p, tail);
        return remember(p, d, prim(p, "executorch_prim::add.Scalar", a, b));
    }
    if (last.coef != 1) { /* k * s, which reading s may have read off an input's axis */
        a = et_dim(p, g_dim_sym(last.sym));
        if (a >= 0 && (value = known(p, d)) >= 0)
            return value;
        b = et_int(p, last.coef);
        return remember(p, d, prim(p, "executorch_prim::mul.Scalar", a, b));
    }
    return remember(p, d, symbol_size(p, last.sym));
}

int et_int_mul(et_program *p, int a, int b)
{
    if (a < 0 || b < 0)
        return -1;
    const et_value *x = &p->values[a], *y = &p->values[b];
    if (!x->computed && !y->computed)
        return et_int(p, x->i * y->i);
    if (!x->computed && x->i == 1)
        return b;
    if (!y->computed && y->i == 1)
        return a;
    return prim(p, "executorch_prim::mul.Scalar", a, b);
}

int et_dims(et_program *p, const g_dim *d, int n)
{
    int items[G_MAX_RANK * 2];
    if (n > (int)(sizeof items / sizeof items[0]))
        return et_fail(p, FERRY_ERR_INTERNAL, "a size list of %d", n), -1;
    for (int i = 0; i < n; i++)
        items[i] = et_dim(p, d[i]);
    return et_list(p, ET_INT_LIST, items, n);
}

/* ---- graph values ---- */

/* A constant tensor of `dt` and `shape` holding `d`'s bytes. */
static int constant(et_program *p, const et_data *d, ferry_dtype dt, const g_shape *shape)
{
    int k = et_tensor(p, dt, shape);
    if (k < 0)
        return -1;
    if (p->values[k].dynamic)
        return et_fail(p, FERRY_ERR_INTERNAL, "constant '%s' of a symbolic size",
                       p->g->values[d->value].name), -1;
    et_data *c = fy_grow(p->constants, &p->cap_constants, p->n_constants + 1, sizeof *c);
    if (!c)
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory"), -1;
    p->constants = c;
    c[p->n_constants++] = *d;
    p->values[k].constant = (uint32_t)p->n_constants;
    p->values[k].planned = false;
    p->values[k].graph_value = d->value;
    return k;
}

int et_quantized_constant(et_program *p, int v, const g_weight *recipe, w_part part)
{
    if (p->st != FERRY_OK)
        return -1;
    et_data want = {.value = v, .part_of_quantized = true, .recipe = *recipe, .part = part};
    for (size_t i = 0; i < p->n_values; i++) {
        const et_value *x = &p->values[i];
        if (x->kind == ET_TENSOR && x->constant &&
            et_data_equal(&p->constants[x->constant - 1], &want))
            return (int)i;
    }
    int rank;
    int64_t dims[W_MAX_RANK];
    ferry_dtype dt;
    uint64_t len;
    w_part_info(recipe, part, &rank, dims, &dt, &len);
    if (dt == FERRY_U4) { /* two codes a byte, each row whole bytes (its length is even) */
        dt = FERRY_U8;
        dims[rank - 1] /= 2;
    }
    g_shape shape = {.rank = rank};
    for (int i = 0; i < rank; i++)
        shape.d[i] = g_dim_const(dims[i]);
    return constant(p, &want, dt, &shape);
}

int et_of_value(et_program *p, int v)
{
    if (p->st != FERRY_OK)
        return -1;
    if (v < 0 || (size_t)v >= p->g->n_values)
        return et_fail(p, FERRY_ERR_INTERNAL, "no value %d", v), -1;
    if (p->of_value[v] >= 0)
        return p->of_value[v];
    const g_value *x = &p->g->values[v];
    if (x->kind == GV_WEIGHT || x->kind == GV_CONST)
        return p->of_value[v] = constant(p, &(et_data){.value = v}, x->dtype, &x->shape);
    return et_fail(p, FERRY_ERR_INTERNAL, "'%s' is read before it is made", x->name), -1;
}

/* ---- instructions ---- */

static int operator_index(et_program *p, const char *op)
{
    for (size_t i = 0; i < p->n_operators; i++)
        if (strcmp(p->operators[i], op) == 0)
            return (int)i;
    char **o = fy_grow(p->operators, &p->cap_operators, p->n_operators + 1, sizeof *o);
    if (!o)
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory"), -1;
    p->operators = o;
    if (!(o[p->n_operators] = strdup(op)))
        return et_fail(p, FERRY_ERR_NOMEM, "out of memory"), -1;
    return (int)p->n_operators++;
}

void et_call(et_program *p, const char *op, const int *args, int n)
{
    if (p->st != FERRY_OK)
        return;
    for (int i = 0; i < n; i++)
        if (args[i] < 0 || (size_t)args[i] >= p->n_values) {
            et_fail(p, FERRY_ERR_INTERNAL, "%s: argument %d is no value", op, i);
            return;
        }
    int k = operator_index(p, op);
    if (k < 0)
        return;
    et_instr *in = fy_grow(p->instrs, &p->cap_instrs, p->n_instrs + 1, sizeof *in);
    if (!in) {
        et_fail(p, FERRY_ERR_NOMEM, "out of memory");
        return;
    }
    p->instrs = in;
    int *a = malloc((n ? (size_t)n : 1) * sizeof *a);
    if (!a) {
        et_fail(p, FERRY_ERR_NOMEM, "out of memory");
        return;
    }
    memcpy(a, args, (size_t)n * sizeof *a);
    in[p->n_instrs++] = (et_instr){k, a, n, -1};
}

void et_delegate_call(et_program *p, int delegate)
{
    if (p->st != FERRY_OK)
        return;
    et_instr *in = fy_grow(p->instrs, &p->cap_instrs, p->n_instrs + 1, sizeof *in);
    if (!in) {
        et_fail(p, FERRY_ERR_NOMEM, "out of memory");
        return;
    }
    p->instrs = in;
    in[p->n_instrs++] = (et_instr){-1, NULL, 0, delegate};
}

bool et_data_equal(const et_data *d, const et_data *e)
{
    return d->value == e->value && d->part_of_quantized == e->part_of_quantized &&
           (!d->part_of_quantized || (d->part == e->part && w_equal(&d->recipe, &e->recipe)));
}

uint64_t et_data_bytes(const et_program *p, const et_data *d)
{
    if (!d->part_of_quantized)
        return et_graph_value_bytes(p, d->value);
    int rank;
    int64_t shape[W_MAX_RANK];
    ferry_dtype dt;
    uint64_t len;
    w_part_info(&d->recipe, d->part, &rank, shape, &dt, &len);
    return len;
}

void et_named_key(const et_program *p, size_t i, char *buf, size_t size)
{
    const et_data *nd = &p->named[i];
    const char *name = p->g->values[nd->value].name;
    if (nd->part_of_quantized)
        snprintf(buf, size, "%s:%s", name, nd->part == W_PART_SCALES ? "scales" : "codes");
    else
        snprintf(buf, size, "%s", name);
}

uint64_t et_named_bytes(const et_program *p, size_t i)
{
    return et_data_bytes(p, &p->named[i]);
}

uint64_t et_graph_value_bytes(const et_program *p, int v)
{
    const g_value *x = &p->g->values[v];
    uint64_t numel = 1;
    for (int i = 0; i < x->shape.rank; i++) {
        int64_t c = 0;
        g_dim_is_const(x->shape.d[i], &c);
        numel *= (uint64_t)c;
    }
    return dt_nbytes(x->dtype, numel);
}
