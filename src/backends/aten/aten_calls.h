/* aten_calls.h — the emitter's side of a sink call (src/backends/aten only): a call begun,
 * each argument handed over by aten's schema name and kind, the call ended with its outputs;
 * nothing is handed on once the sink has failed. aten_calls.c holds them, aten_nodes.c and
 * aten_cache.c make the calls. */
#ifndef FERRY_BACKENDS_ATEN_CALLS_H
#define FERRY_BACKENDS_ATEN_CALLS_H

#include "backends/aten/aten.h"

bool ac_failed(const aten_emitter *e);
void ac_fail(aten_emitter *e, ferry_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const g_value *ac_val(const aten_emitter *e, int v);
void ac_begin(aten_emitter *e, const char *op);
void ac_arg_ref(aten_emitter *e, const char *arg, aten_t t, int kind);
void ac_arg_tensor(aten_emitter *e, const char *arg, int v, int kind);
void ac_arg_int(aten_emitter *e, const char *arg, int kind, int64_t v);
void ac_arg_float(aten_emitter *e, const char *arg, int kind, double v);
void ac_arg_bool(aten_emitter *e, const char *arg, int kind, bool v);
void ac_arg_string(aten_emitter *e, const char *arg, int kind, const char *v);
void ac_arg_none(aten_emitter *e, const char *arg, int kind);
void ac_arg_ints(aten_emitter *e, const char *arg, int kind, const int64_t *v, int n);
void ac_arg_symint(aten_emitter *e, const char *arg, int kind, g_dim d);
void ac_arg_symints(aten_emitter *e, const char *arg, int kind, const g_dim *d, int n);
void ac_arg_scalar_type(aten_emitter *e, const char *arg, int kind, ferry_dtype dt);
void ac_arg_device(aten_emitter *e, const char *arg, int kind);
void ac_arg_refs(aten_emitter *e, const char *arg, int kind, const aten_t *t, int n,
                 bool optional);
aten_t ac_end_outs(aten_emitter *e, int n, const aten_out *outs, const char *node);
void ac_end_node(aten_emitter *e, const g_node *n);
aten_t ac_end_temp(aten_emitter *e, const char *base, ferry_dtype dt, const g_shape *s);

#endif
