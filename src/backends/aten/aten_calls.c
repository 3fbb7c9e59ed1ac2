/* aten_calls.c — the emitter's side of a sink call (aten_calls.h): each hands the sink one
 * piece of a call unless it has failed; a call's outputs are named after its node, or made
 * temporaries. */
#include <stdarg.h>
#include <stdio.h>

#include "backends/aten/aten_calls.h"

bool ac_failed(const aten_emitter *e)
{
    return e->sink->ops->failed(e->sink);
}

void ac_fail(aten_emitter *e, ferry_status st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    e->sink->ops->fail(e->sink, st, msg);
}

const g_value *ac_val(const aten_emitter *e, int v)
{
    return &e->g->values[v];
}

void ac_begin(aten_emitter *e, const char *op)
{
    if (!ac_failed(e))
        e->sink->ops->begin(e->sink, op);
}

void ac_arg_ref(aten_emitter *e, const char *arg, aten_t t, int kind)
{
    if (!ac_failed(e))
        e->sink->ops->tensor(e->sink, arg, kind, t);
}

void ac_arg_tensor(aten_emitter *e, const char *arg, int v, int kind)
{
    aten_t t = aten_tensor(e, v);
    if (t != ATEN_NONE)
        ac_arg_ref(e, arg, t, kind);
}

void ac_arg_int(aten_emitter *e, const char *arg, int kind, int64_t v)
{
    if (!ac_failed(e))
        e->sink->ops->integer(e->sink, arg, kind, v);
}

void ac_arg_float(aten_emitter *e, const char *arg, int kind, double v)
{
    if (!ac_failed(e))
        e->sink->ops->number(e->sink, arg, kind, v);
}

void ac_arg_bool(aten_emitter *e, const char *arg, int kind, bool v)
{
    if (!ac_failed(e))
        e->sink->ops->boolean(e->sink, arg, kind, v);
}

void ac_arg_string(aten_emitter *e, const char *arg, int kind, const char *v)
{
    if (!ac_failed(e))
        e->sink->ops->string(e->sink, arg, kind, v);
}

void ac_arg_none(aten_emitter *e, const char *arg, int kind)
{
    if (!ac_failed(e))
        e->sink->ops->none(e->sink, arg, kind);
}

void ac_arg_ints(aten_emitter *e, const char *arg, int kind, const int64_t *v, int n)
{
    if (!ac_failed(e))
        e->sink->ops->ints(e->sink, arg, kind, v, n);
}

void ac_arg_symint(aten_emitter *e, const char *arg, int kind, g_dim d)
{
    if (!ac_failed(e))
        e->sink->ops->symint(e->sink, arg, kind, d);
}

void ac_arg_symints(aten_emitter *e, const char *arg, int kind, const g_dim *d, int n)
{
    if (!ac_failed(e))
        e->sink->ops->symints(e->sink, arg, kind, d, n);
}

void ac_arg_scalar_type(aten_emitter *e, const char *arg, int kind, ferry_dtype dt)
{
    if (!ac_failed(e))
        e->sink->ops->scalar_type(e->sink, arg, kind, dt);
}

void ac_arg_device(aten_emitter *e, const char *arg, int kind)
{
    if (!ac_failed(e))
        e->sink->ops->device_cpu(e->sink, arg, kind);
}

void ac_arg_refs(aten_emitter *e, const char *arg, int kind, const aten_t *t, int n,
                 bool optional)
{
    if (!ac_failed(e))
        e->sink->ops->tensors(e->sink, arg, kind, t, n, optional);
}

/* Ends the call with its outputs; returns output 0's ref (ATEN_NONE on failure). */
aten_t ac_end_outs(aten_emitter *e, int n, const aten_out *outs, const char *node)
{
    aten_t refs[G_MAX_OUT] = {ATEN_NONE, ATEN_NONE, ATEN_NONE};
    if (ac_failed(e))
        return ATEN_NONE;
    e->sink->ops->end(e->sink, n, outs, node, refs);
    return ac_failed(e) ? ATEN_NONE : refs[0];
}

/* Ends the call with node n's first output. */
void ac_end_node(aten_emitter *e, const g_node *n)
{
    const g_value *y = ac_val(e, n->out[0]);
    aten_out out = {.value = n->out[0], .dtype = y->dtype, .shape = y->shape};
    ac_end_outs(e, 1, &out, NULL);
}

/* Ends the call with a temporary named after `base`. */
aten_t ac_end_temp(aten_emitter *e, const char *base, ferry_dtype dt, const g_shape *s)
{
    aten_out out = {.value = G_NONE, .base = base, .dtype = dt, .shape = *s};
    return ac_end_outs(e, 1, &out, NULL);
}
