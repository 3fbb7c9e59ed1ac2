/* et_calls.h — an aten call as et_kernels.c records it from the emitter, and what the
 * translations (et_translate.c) read of it and build from it: its arguments by schema name,
 * and a kernel call's argument list. Only src/backends/executorch includes this. */
#ifndef FERRY_BACKENDS_ET_CALLS_H
#define FERRY_BACKENDS_ET_CALLS_H

#include "backends/executorch/executorch.h"

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

/* A kernel call's arguments, appended one statement at a time: each may make values and
 * instructions of its own (a SymInt), so their order is the program's, whatever the compiler. */
typedef struct kargs {
    et_sink *k;
    const call_frame *f;
    int v[MAX_ARGS + 3];
    int n;
} kargs;

/* Writes the out kernels of recorded call `f`, whose outputs are the EValues `outs`. */
typedef void (*translate_fn)(et_sink *k, const call_frame *f, const int *outs);

/* The translation of aten op `op` ("add.Tensor"), or NULL: no kernel in this format yet. */
translate_fn et_translation(const char *op);

/* Writes call `f` into the open XNNPACK partition where the program delegates and the
 * call is one XNNPACK runs (et_xnnpack.c: elementwise arithmetic, a mean or softmax over the
 * last axis); false, having written nothing, where it is not (its portable translation
 * follows). Linears go by et_xnn_linear. */
bool et_xnn_call(et_sink *k, const call_frame *f, const int *outs);

/* ---- reading a call's arguments (et_kernels.c) ---- */
const call_arg *ek_find(const call_frame *f, const char *name);
const call_arg *ek_need(et_sink *k, const call_frame *f, const char *name);
int ek_ref_value(et_sink *k, aten_t t);
const g_shape *ek_ref_shape(et_sink *k, aten_t t);
int ek_tensor(et_sink *k, const call_frame *f, const char *name);
const g_shape *ek_tensor_shape(et_sink *k, const call_frame *f, const char *name);
int ek_optional_tensor(et_sink *k, const call_frame *f, const char *name);
int ek_scalar(et_sink *k, const call_arg *a);
int ek_scalar_arg(et_sink *k, const call_frame *f, const char *name);
int ek_int_list(et_sink *k, const call_frame *f, const char *name);
int ek_tensor_list(et_sink *k, const call_frame *f, const char *name);
bool ek_is_number(const call_frame *f, const char *name);
kargs ek_args_of(et_sink *k, const call_frame *f);
void ek_a_value(kargs *a, int v);
void ek_a_tensor(kargs *a, const char *name);
void ek_a_optional(kargs *a, const char *name);
void ek_a_scalar(kargs *a, const char *name);
void ek_a_ints(kargs *a, const char *name);
void ek_a_tensors(kargs *a, const char *name);
void ek_a_int(kargs *a, int64_t v);
void ek_a_bool(kargs *a, bool v);
void ek_a_null(kargs *a);
void ek_a_out(kargs *a, const char *op, int out);
int ek_temp_tensor(et_program *p, ferry_dtype dt, int rank, const int64_t *bounds,
                   bool dynamic);
et_value ek_value_of(const et_program *p, int v);

#endif
