/* executorch.h — the .pte backend's pieces (ExecuTorch programs, docs/pte-format.md):
 *
 *   et_target.c    what stays an aten op, and what takes the generic lowerings
 *   et_program.c   the program being made: its values (EValues), operators and instructions,
 *                  and the sizes a kernel reads at run time (SymInts as Int values)
 *   et_kernels.c   the aten emitter's sink (src/backends/aten): each aten call recorded
 *                  (et_calls.h) and handed to its translation
 *   et_translate.c each aten call as the ExecuTorch out kernels that compute it
 *   et_xnnpack.c   the XNNPACK delegate: linears as XNNPACK graphs the program calls
 *   et_plan.c      the memory plan: every planned tensor's place in the arena
 *   et_file.c      the Program flatbuffer, its header and its constant segment, written
 *   et_backend.c   the format: options, finish, placement, export.json
 *
 * Only src/backends/executorch includes this. */
#ifndef FERRY_BACKENDS_EXECUTORCH_H
#define FERRY_BACKENDS_EXECUTORCH_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/aten/aten.h"
#include "backends/backend.h"
#include "ir/legalize.h"
#include "store/placement.h"

extern const g_target et_target;

/* ---- the program (et_program.c) ---- */

/* EValue kinds, numbered as program.fbs's KernelTypes union */
typedef enum et_kind {
    ET_NULL = 1, ET_INT, ET_BOOL, ET_DOUBLE, ET_TENSOR, ET_STRING, ET_INT_LIST, ET_DOUBLE_LIST,
    ET_BOOL_LIST, ET_TENSOR_LIST, ET_OPT_TENSOR_LIST
} et_kind;

#define ET_NO_PLACE UINT64_MAX

typedef struct et_value {
    et_kind kind;
    int64_t i;               /* INT */
    bool computed;           /* INT: a placeholder a kernel fills at run time (sym_size, the
                                prim ops' arithmetic), not a constant */
    double d;                /* DOUBLE */
    bool b;                  /* BOOL */
    char *s;                 /* STRING */
    int *items;              /* lists: EValue indices (-1: None in an optional tensor list) */
    int n_items;
    /* TENSOR */
    ferry_dtype dtype;
    int rank;
    int64_t sizes[G_MAX_RANK]; /* each extent's largest value: ExecuTorch's bound */
    bool dynamic;            /* some extent varies (DYNAMIC_BOUND) */
    uint32_t constant;       /* data_buffer_idx: its data in the constant segment (0: none) */
    int graph_value;         /* the graph value it holds (-1: a temporary) */
    bool state;              /* a cache input the program writes in place */
    bool planned;            /* has a place in the arena (allocation_info) */
    uint64_t offset;         /* ... at this offset (et_plan) */
    int first, last;         /* its lifetime in instructions (et_plan) */
} et_value;

typedef struct et_instr {
    int op;                  /* index in operators (-1: a delegate call) */
    int *args;
    int n_args;
    int delegate;            /* a delegate call's delegate (-1: a kernel call) */
} et_instr;

/* Bytes the program holds (a constant tensor, or a named datum a delegate reads): a weight or
 * constant as the graph has it, or one part (codes, scales) of a quantized weight in the form
 * its reader takes (XNNPACK's int4, embedding_4bit's). */
typedef struct et_data {
    int value;               /* the graph value */
    bool part_of_quantized;  /* `recipe`'s `part`; else the value's own bytes */
    g_weight recipe;
    w_part part;
} et_data;

/* A delegate: its backend's blob (the XNNPACK graph), inline in the Program. */
typedef struct et_delegate {
    uint8_t *blob;
    size_t len;
} et_delegate;

typedef struct et_dim_memo {
    g_dim d;
    int value;               /* the Int EValue computing it */
} et_dim_memo;

typedef struct et_program {
    const g_graph *g;
    et_value *values;
    size_t n_values, cap_values;
    et_instr *instrs;
    size_t n_instrs, cap_instrs;
    char **operators;        /* "aten::add.out" */
    size_t n_operators, cap_operators;
    int *inputs, *outputs;   /* EValue indices: the graph's inputs in order; the outputs as
                                et_emit_program lays them out */
    size_t n_inputs, n_outputs;
    size_t n_state_outputs;  /* a generation component's outputs are its N cache inputs, its
                                own outputs, then the N cache inputs again (the guide's C++
                                loop binds the last N): N here */
    int *of_value;           /* per graph value: its EValue (-1: none yet) */
    et_dim_memo *dims;       /* the SymInts computed so far */
    size_t n_dims, cap_dims;
    uint64_t arena;          /* bytes of memory id 1 (et_plan) */
    size_t n_constants, cap_constants; /* data_buffer_idx 1..n_constants */
    et_data *constants;      /* each constant's bytes (index data_buffer_idx - 1) */
    bool xnnpack;            /* linears run in the XNNPACK delegate (backend "xnnpack") */
    et_delegate *delegates;
    size_t n_delegates, cap_delegates;
    size_t n_int4_linears;   /* the delegates whose weights are int4 */
    size_t n_int4_embeddings; /* the embedding_4bit calls */
    et_data *named;         /* what the delegates read as named data, each a segment of
                                the file */
    size_t n_named, cap_named;
    const char *where;       /* the IR node being written, for messages (NULL: none) */
    ferry_status st;         /* the first failure; later calls do nothing */
    fy_err *err;
} et_program;

/* How the memory plan treats the program's edges (the format's alloc_* options). */
typedef struct et_plan_opts {
    bool alloc_graph_input, alloc_graph_output;
    bool alloc_mutable_buffers;  /* the cache inputs, which the program writes in place */
} et_plan_opts;

void et_program_init(et_program *p, const g_graph *g, fy_err *err);
void et_program_free(et_program *p);
ferry_status et_fail(et_program *p, ferry_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* New values (their index; -1 after a failure). */
int et_null(et_program *p);
int et_int(et_program *p, int64_t v);
int et_bool(et_program *p, bool v);
int et_double(et_program *p, double v);
int et_string(et_program *p, const char *s);
/* a list of `n` EValue indices (INT_LIST: of Int values; TENSOR_LIST; OPT_TENSOR_LIST: -1 for
 * None) */
int et_list(et_program *p, et_kind kind, const int *items, int n);
/* an IntList of constants */
int et_int_list(et_program *p, const int64_t *v, int n);
/* A tensor of `dt` and `shape` (each symbolic extent at its largest: the symbols' max),
 * planned. */
int et_tensor(et_program *p, ferry_dtype dt, const g_shape *shape);
/* The largest value `d` takes (its symbols at their max, or min for a negative coefficient);
 * false for an unknown dim or an unbounded symbol. */
bool et_dim_bound(const g_symtab *syms, g_dim d, int64_t *bound);

/* The Int value holding `d` at run time: a constant, or computed once (aten::sym_size.int of an
 * input with the symbol, executorch_prim's add and mul). */
int et_dim(et_program *p, g_dim d);
/* The Int value of a * b (executorch_prim::mul.Scalar; a constant when both are). */
int et_int_mul(et_program *p, int a, int b);
/* An IntList of the dims. */
int et_dims(et_program *p, const g_dim *d, int n);

/* The tensor EValue of graph value `v`: an input or a node's output already made, or a
 * weight or constant (a constant tensor, made on first use). */
int et_of_value(et_program *p, int v);
/* The constant tensor of one part of quantized weight `v` in the form `recipe` says (made on
 * first use): the codes as bytes [.., in / 2] (4-bit) or [.., in], the scales as they are. */
int et_quantized_constant(et_program *p, int v, const g_weight *recipe, w_part part);

/* Appends a call of kernel `op` ("aten::add.out") with `n` arguments (EValue indices, its
 * return slot last, as the kernels take them). */
void et_call(et_program *p, const char *op, const int *args, int n);

/* Appends a call of delegate `delegate` with its `n` arguments (its inputs, then outputs). */
void et_delegate_call(et_program *p, int delegate, const int *args, int n);
/* The bytes of weight or constant graph value `v`. */
uint64_t et_graph_value_bytes(const et_program *p, int v);
/* Whether d and e are the same bytes. */
bool et_data_equal(const et_data *d, const et_data *e);
/* The bytes of `d`. */
uint64_t et_data_bytes(const et_program *p, const et_data *d);
/* Named datum i's key ("<weight>", or "<weight>:codes" / ":scales" for a quantized one's parts)
 * and bytes. */
void et_named_key(const et_program *p, size_t i, char *buf, size_t size);
uint64_t et_named_bytes(const et_program *p, size_t i);

/* ---- the XNNPACK delegate (et_xnnpack.c) ---- */

/* Writes y = x W^T + b as an XNNPACK delegate call, where the program delegates linears and
 * this one fits (fp32, the weight [out, in] and the bias checkpoint tensors; an int4 weight as
 * XNNPACK's 8da4w: activations quantized per token, qbint4 blocks with bf16 scales); false,
 * having written nothing, where it does not (the caller writes the portable kernel). A
 * quantized weight that does not fit fails the program, naming it: no portable kernel reads
 * it. */
bool et_xnn_linear(et_program *p, int x, int weight, int bias, int y);

/* ---- the emitter's sink (et_kernels.c) ---- */

/* Writes every node of lowered graph `g` into `p` as ExecuTorch kernels: its inputs, its
 * nodes in order, its outputs. */
ferry_status et_emit_program(et_program *p, fy_err *err);

/* ---- memory (et_plan.c) ---- */

#define ET_ALIGN 64

/* Gives every planned tensor its place: lifetimes from the instructions, then each in turn at
 * the lowest offset no live tensor holds; p->arena the bytes they span. */
ferry_status et_plan_memory(et_program *p, const et_plan_opts *opts);

/* ---- the file (et_file.c) ---- */

/* Writes program `p` as the .pte `path` (created exclusively, synced): the Program flatbuffer
 * with its extended header, and the constant segment streamed from the checkpoint; its CRC-32
 * in `*crc`. */
ferry_status et_write_file(et_program *p, const char *path, ws_progress *progress,
                           uint32_t *crc, fy_err *err);

#endif
