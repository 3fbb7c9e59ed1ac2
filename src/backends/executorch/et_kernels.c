/* et_kernels.c — the aten emitter's sink for ExecuTorch (aten.h): each aten call the emitter
 * makes for an IR node (aten.linear, aten.reshape, ...: the level torch.export records before
 * decompositions) is recorded with its arguments by schema name, its outputs given EValues,
 * and handed to its translation (et_translate.c), which writes the out-variant kernels the
 * runtime registers. Scalars a call passes as numbers take the kernels' .Scalar overloads;
 * SymInts are Int values (et_program.c). Views are copies: every tensor has a place of its
 * own in the arena. Then the program's inputs and outputs (et_emit_program). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/executorch/et_calls.h"
#include "util/grow.h"

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
    if (n > 0) /* an empty list may come as NULL */
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
    if (n > 0) /* an empty list may come as NULL */
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
    if (n > 0)
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

const call_arg *ek_find(const call_frame *f, const char *name)
{
    for (int i = 0; i < f->n_args; i++)
        if (strcmp(f->args[i].name, name) == 0)
            return &f->args[i];
    return NULL;
}

/* an argument the emitter always passes */
const call_arg *ek_need(et_sink *k, const call_frame *f, const char *name)
{
    const call_arg *a = ek_find(f, name);
    if (!a)
        et_fail(k->p, FERRY_ERR_INTERNAL, "%s: no argument '%s'", f->op, name);
    return a;
}

int ek_ref_value(et_sink *k, aten_t t)
{
    if (t >= 0)
        return et_of_value(k->p, t);
    size_t i = (size_t)ATEN_TEMP_INDEX(t);
    if (t == ATEN_NONE || i >= k->n_temps)
        return et_fail(k->p, FERRY_ERR_INTERNAL, "no temporary %d", (int)t), -1;
    return k->temps[i];
}

const g_shape *ek_ref_shape(et_sink *k, aten_t t)
{
    if (t >= 0)
        return &k->p->g->values[t].shape;
    return &k->temp_shapes[ATEN_TEMP_INDEX(t)];
}

/* the tensor argument `name` */
int ek_tensor(et_sink *k, const call_frame *f, const char *name)
{
    const call_arg *a = ek_need(k, f, name);
    if (!a)
        return -1;
    if (a->type != A_TENSOR)
        return et_fail(k->p, FERRY_ERR_INTERNAL, "%s: '%s' is no tensor", f->op, name), -1;
    return ek_ref_value(k, a->t);
}

const g_shape *ek_tensor_shape(et_sink *k, const call_frame *f, const char *name)
{
    const call_arg *a = ek_find(f, name);
    return a && a->type == A_TENSOR ? ek_ref_shape(k, a->t) : NULL;
}

/* an optional tensor: Null when absent or None */
int ek_optional_tensor(et_sink *k, const call_frame *f, const char *name)
{
    const call_arg *a = ek_find(f, name);
    if (!a || a->type == A_NONE)
        return et_null(k->p);
    return ek_tensor(k, f, name);
}

/* a Scalar, Int or SymInt argument as its EValue */
int ek_scalar(et_sink *k, const call_arg *a)
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

int ek_scalar_arg(et_sink *k, const call_frame *f, const char *name)
{
    const call_arg *a = ek_need(k, f, name);
    return a ? ek_scalar(k, a) : -1;
}

/* an int list: constants (A_INTS) or SymInts */
int ek_int_list(et_sink *k, const call_frame *f, const char *name)
{
    const call_arg *a = ek_need(k, f, name);
    if (!a)
        return -1;
    if (a->type == A_INTS)
        return et_int_list(k->p, a->ints, a->n);
    if (a->type == A_SYMINTS)
        return et_dims(k->p, a->dims, a->n);
    return et_fail(k->p, FERRY_ERR_INTERNAL, "%s: '%s' is no int list", f->op, name), -1;
}

int ek_tensor_list(et_sink *k, const call_frame *f, const char *name)
{
    const call_arg *a = ek_need(k, f, name);
    if (!a)
        return -1;
    if (a->type != A_TENSORS)
        return et_fail(k->p, FERRY_ERR_INTERNAL, "%s: '%s' is no tensor list", f->op, name),
               -1;
    int items[MAX_LIST];
    for (int i = 0; i < a->n; i++)
        items[i] = a->optional && a->list[i] == ATEN_NONE ? -1 : ek_ref_value(k, a->list[i]);
    return et_list(k->p, a->optional ? ET_OPT_TENSOR_LIST : ET_TENSOR_LIST, items, a->n);
}

bool ek_is_number(const call_frame *f, const char *name)
{
    const call_arg *a = ek_find(f, name);
    return a && (a->type == A_INT || a->type == A_FLOAT);
}

/* ---- kernels ---- */

kargs ek_args_of(et_sink *k, const call_frame *f)
{
    return (kargs){.k = k, .f = f};
}

void ek_a_value(kargs *a, int v)
{
    if (a->n < MAX_ARGS)
        a->v[a->n++] = v;
    else
        et_fail(a->k->p, FERRY_ERR_INTERNAL, "%s: more than %d arguments", a->f->op, MAX_ARGS);
}

void ek_a_tensor(kargs *a, const char *name)
{
    ek_a_value(a, ek_tensor(a->k, a->f, name));
}

void ek_a_optional(kargs *a, const char *name)
{
    ek_a_value(a, ek_optional_tensor(a->k, a->f, name));
}

void ek_a_scalar(kargs *a, const char *name)
{
    ek_a_value(a, ek_scalar_arg(a->k, a->f, name));
}

void ek_a_ints(kargs *a, const char *name)
{
    ek_a_value(a, ek_int_list(a->k, a->f, name));
}

void ek_a_tensors(kargs *a, const char *name)
{
    ek_a_value(a, ek_tensor_list(a->k, a->f, name));
}

void ek_a_int(kargs *a, int64_t v)
{
    ek_a_value(a, et_int(a->k->p, v));
}

void ek_a_bool(kargs *a, bool v)
{
    ek_a_value(a, et_bool(a->k->p, v));
}

void ek_a_null(kargs *a)
{
    ek_a_value(a, et_null(a->k->p));
}

/* a kernel of one out: the arguments so far, then the out twice (the out argument and the
 * return slot) */
void ek_a_out(kargs *a, const char *op, int out)
{
    a->v[a->n++] = out;
    a->v[a->n++] = out;
    et_call(a->k->p, op, a->v, a->n);
}

/* A tensor of `rank` extents made inside a translation (a view's operand), each at its bound,
 * planned. */
int ek_temp_tensor(et_program *p, ferry_dtype dt, int rank, const int64_t *bounds,
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
et_value ek_value_of(const et_program *p, int v)
{
    return p->values[v];
}

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
        made[i] = in_place && i == 0 ? ek_tensor(k, f, "self")
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
    translate_fn fn = et_translation(f->op);
    if (p->st == FERRY_OK && !fn)
        et_fail(p, FERRY_ERR_UNSUPPORTED, "aten.%s has no ExecuTorch kernel in ferry's "
                "executorch format yet", f->op);
    if (p->st == FERRY_OK && !et_xnn_call(k, f, made) && p->st == FERRY_OK)
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
