/* executorch.h — the .pte backend's pieces (ExecuTorch programs, docs/pte-format.md):
 *
 *   et_target.c    what stays an aten op, and what takes the generic lowerings
 *   et_program.c   the program being made: its values (EValues), operators and instructions,
 *                  and the sizes a kernel reads at run time (SymInts as Int values)
 *   et_kernels.c   the aten emitter's sink (src/backends/aten): each aten call recorded
 *                  (et_calls.h) and handed to its translation
 *   et_translate.c each aten call as the ExecuTorch out kernels that compute it
 *   et_xnnpack.c   what runs in the XNNPACK delegate: linears, elementwise arithmetic, a
 *                  norm's mean, softmax, each as nodes of the open partition
 *   et_xnn_graph.c the XNNPACK partitions: runs of delegated calls, each one XNNPACK graph the
 *                  program calls once; their arguments (what the program reads of them, and
 *                  gives them) and their blobs
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

/* XNNPACK's node kinds (schema.fbs's XNodeUnion) and tensor types (XNNDatatype) */
typedef enum xnn_kind {
    XNN_ADD = 1, XNN_FULLY_CONNECTED = 2, XNN_SOFTMAX = 3, XNN_SIGMOID = 4,
    XNN_STATIC_TRANSPOSE = 5, XNN_DIV = 8, XNN_MINIMUM = 12, XNN_MULTIPLY = 15,
    XNN_SUBTRACT = 16, XNN_FLOOR = 17, XNN_CONVERT = 18, XNN_STATIC_RESHAPE = 20,
    XNN_SQUARE_ROOT = 22, XNN_MAXIMUM = 26, XNN_NEGATE = 27, XNN_SQUARE = 28, XNN_ABS = 30,
    XNN_CONCATENATE2 = 32, XNN_CONCATENATE3 = 33, XNN_CONCATENATE4 = 34, XNN_STATIC_SLICE = 35,
    XNN_BATCH_MATRIX_MULTIPLY = 37, XNN_CONCATENATE5 = 38, XNN_RSQRT = 40, XNN_LOG = 41,
    XNN_TANH = 43, XNN_EXP = 44, XNN_SIN = 45, XNN_COS = 47
} xnn_kind;

typedef enum xnn_type { XNN_T_FP32 = 1, XNN_T_QDINT8 = 9, XNN_T_QBINT4 = 10 } xnn_type;

#define XNN_MAX_DIMS 6

/* A tensor of an XNNPACK graph: one of the program's (an argument of the call, or one that
 * lives only inside the graph), or constant bytes (named data, or in the blob). */
typedef struct xnn_value {
    int evalue;              /* the program's tensor it is (-1: a constant) */
    int named;               /* a constant's named datum (-1: none) */
    int64_t inline_at;       /* ... or its bytes in the partition's (-1: none) */
    uint64_t inline_len;
    xnn_type type;
    int rank;
    int64_t dims[XNN_MAX_DIMS];
    int group, scales;       /* qbint4: its block size, and its scales' named datum */
    int quantizes;           /* qdint8: the value it quantizes per token */
    bool produced;           /* a node of the graph writes it */
    int external;            /* its place in the call's arguments (-1: inside the graph) */
} xnn_value;

#define XNN_MAX_NODE_INPUTS 5

typedef struct xnn_node {
    xnn_kind kind;
    int in[XNN_MAX_NODE_INPUTS]; /* values (-1: none): 2x1 nodes' two, FC's input, filter and
                                    bias, a concatenation's parts */
    int out;
    /* a transpose's perm, a reshape's new shape (0: the one extent inferred), a slice's
     * offsets then sizes (n_dims each) */
    int64_t dims[2 * XNN_MAX_DIMS];
    int n_dims;
    int axis;                /* a concatenation's */
} xnn_node;

/* Delegated calls that one XNNPACK graph computes, called by the DelegateCall `instr`. */
typedef struct et_partition {
    xnn_value *values;
    size_t n_values, cap_values;
    xnn_node *nodes;
    size_t n_nodes, cap_nodes;
    uint8_t *bytes;          /* constants held in the blob, each 16-aligned */
    size_t n_bytes, cap_bytes;
    size_t instr;
} et_partition;

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
    bool xnnpack;            /* backend "xnnpack": what XNNPACK runs is delegated */
    et_partition *partitions;
    size_t n_partitions, cap_partitions;
    bool open;               /* the last partition takes the next delegated call */
    et_delegate *delegates;  /* each partition's blob (et_xnn_finish) */
    size_t n_delegates;
    size_t n_xnn_linears;    /* the linears of checkpoint weights in XNNPACK graphs */
    size_t n_int4_linears;   /* ... of them, those whose weights are int4 */
    size_t n_xnn_nodes;      /* the XNNPACK nodes in all */
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
/* Appends a call of delegate `delegate`, its arguments given later (et_xnn_finish). */
void et_delegate_call(et_program *p, int delegate);

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

/* ---- XNNPACK partitions (et_xnn_graph.c) ---- */

/* The partition that takes a call reading the program's tensors `reads` (n of them): the open
 * one where it can compute them, else a new one, its DelegateCall placed here; NULL after a
 * failure. */
et_partition *et_xnn_open(et_program *p, const int *reads, int n);
/* Partition `x`'s value for the program's tensor `ev` (added on first use). */
int et_xnn_tensor(et_program *p, et_partition *x, int ev);
/* A constant of x: graph value `v`'s bytes as named data (fp32, its own shape). */
int et_xnn_weight(et_program *p, et_partition *x, int v);
/* A constant of x held in its blob: `n` floats of `dims`. */
int et_xnn_floats(et_program *p, et_partition *x, const float *f, size_t n, int rank,
                  const int64_t *dims);
/* A value of x of `type` and `dims` (named datum `named` for a constant, else -1). */
int et_xnn_value(et_program *p, et_partition *x, xnn_type type, int rank, const int64_t *dims,
                 int named);
/* Appends node `kind` of x reading `in` (n of them, -1 for none) and writing `out`; the
 * node's other fields from `with` (NULL: none). */
void et_xnn_node(et_program *p, et_partition *x, xnn_kind kind, const int *in, int n, int out,
                 const xnn_node *with);
/* Gives every partition its arguments (the program's tensors it reads that are made before
 * it; those it makes that anything after it reads) and its blob; a tensor made and read only
 * inside one becomes a None of the program. After et_emit_program, before the plan. */
ferry_status et_xnn_finish(et_program *p);

/* ---- what the XNNPACK delegate runs (et_xnnpack.c) ---- */

/* Writes y = x W^T + b into the open XNNPACK partition, where the program delegates and this
 * linear fits (fp32, the weight [out, in] and the bias checkpoint tensors; an int4 weight as
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
