/* graph.h — ferry's IR: typed values with symbolic shapes, nodes over primitive and semantic
 * ops, lazy weights. Built by small calls that return value ids (ggml style); nothing runs while
 * building. A failed call records the error on the graph and returns G_NONE, and every call
 * given G_NONE returns G_NONE, so builders read straight and check g->err once at the end. */
#ifndef FERRY_GRAPH_GRAPH_H
#define FERRY_GRAPH_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "graph/shape.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "util/err.h"

#define G_NONE (-1)
#define G_MAX_INPUTS 6
#define G_MAX_OUTPUTS 2
#define G_MAX_INTS 8

/* Append-only: the name and arity tables in graph.c are pinned to G_OP_COUNT. */
typedef enum g_op {
    /* primitives (ONNX semantics, numpy broadcasting) */
    G_ADD, G_SUB, G_MUL, G_DIV, G_POW,
    G_SQRT, G_RECIPROCAL, G_NEG, G_EXP, G_COS, G_SIN, G_SIGMOID, G_TANH, G_ERF,
    G_AND, G_OR, G_NOT, G_EQUAL, G_LESS, G_LESS_OR_EQUAL, G_GREATER, G_GREATER_OR_EQUAL,
    G_WHERE,        /* cond, x, y */
    G_MATMUL,       /* batched, broadcasting over leading dims */
    G_GEMM,         /* a [M,K], b [N,K] (transB=1), optional c [N] */
    G_GATHER,       /* data, indices; ints[0] = axis */
    G_RESHAPE,      /* data, shape (i64 [r]); 0 copies the input dim, -1 is inferred */
    G_TRANSPOSE,    /* ints = perm */
    G_CONCAT,       /* ints[0] = axis */
    G_SLICE,        /* data, starts, ends, axes, steps (i64 1-D) */
    G_UNSQUEEZE,    /* data, axes (i64 1-D) */
    G_CAST,         /* to = dtype */
    G_SOFTMAX,      /* ints[0] = axis */
    G_REDUCE_MEAN,  /* data, axes (i64 1-D); ints[0] = keepdims */
    G_REDUCE_MAX,   /* data, axes (i64 1-D); ints[0] = keepdims */
    G_SHAPE,        /* ints[0] = start, ints[1] = end (INT64_MAX = to the end) */
    G_RANGE,        /* start, limit, delta (scalars) */
    G_EXPAND,       /* data, shape (i64 1-D) */
    G_CUMSUM,       /* data, axis (i64 scalar) */
    G_MAX,          /* elementwise max of two */
    G_MIN,
    /* semantic ops: the builder knows what they are; backends decompose or fuse them */
    G_RMS_NORM,     /* x [..., n], weight [n]; f[0] = eps, f[1] = weight offset (0 or 1) */
    G_LINEAR,       /* x [..., in], weight [out, in], optional bias [out] -> [..., out] */
    G_ROPE,         /* x [b, s, heads, d], position_ids [b, s]; rope options -> same shape */
    G_ATTENTION,    /* q [b,s,h,d], k [b,kvh,t,d], v [b,kvh,t,d], mask, [query_offset] -> [b,s,h*d];
                       mask is int64 [b,t] (1 = token; causal built inside, queries are the last s
                       of the t positions) or bool [b,1,s,t] (used as given; query i sits at cache
                       index query_offset + i, which sliding windows need) */
    G_SILU,
    G_SCATTER_ELEMENTS, /* data, indices, updates; ints[0] = axis (primitive) */
    G_KV_WRITE,     /* cache [b,kvh,m,d], new [b,kvh,s,d], position (i64 [1]) -> cache with
                       slots position..position+s-1 replaced (semantic: an in-place update) */
    G_OP_COUNT
} g_op;

const char *g_op_name(g_op op);
bool g_op_is_semantic(g_op op);

typedef enum g_value_kind { GV_INPUT, GV_NODE, GV_CONST, GV_WEIGHT } g_value_kind;

/* A weight that stays on disk: the checkpoint tensor plus the transforms applied while it is
 * streamed out (dtype conversion, 2-D transpose). */
typedef struct g_weight {
    const st_tensor *src;
    ferry_dtype dtype;       /* output element type */
    bool transpose;          /* 2-D only: write [cols, rows] */
} g_weight;

typedef struct g_value {
    char *name;
    ferry_dtype dtype;
    g_shape shape;
    g_value_kind kind;
    int producer;            /* node index for GV_NODE, else -1 */
    void *data;              /* GV_CONST: owned bytes */
    size_t nbytes;
    g_weight weight;         /* GV_WEIGHT */
    int n_uses;              /* filled by g_count_uses */
} g_value;

typedef struct g_rope_opts {
    rope_config rope;        /* type, theta and scaling parameters */
    int64_t head_dim;
    int64_t max_position_embeddings;
} g_rope_opts;

typedef struct g_attn_opts {
    int64_t num_heads, num_kv_heads, head_dim;
    double scale;            /* usually head_dim^-0.5 */
    int64_t sliding_window;  /* 0 = none: keys j with i - window < j <= i are visible */
} g_attn_opts;

typedef struct g_node {
    g_op op;
    char *name;
    int n_in, n_out;
    int in[G_MAX_INPUTS];    /* G_NONE for an absent optional input */
    int out[G_MAX_OUTPUTS];
    int64_t ints[G_MAX_INTS];
    int n_ints;
    double f[4];
    ferry_dtype to;
    g_rope_opts *rope;       /* G_ROPE, owned */
    g_attn_opts *attn;       /* G_ATTENTION, owned */
    bool dead;               /* set by g_remove_dead */
} g_node;

typedef struct g_graph {
    g_value *values;
    size_t n_values, cap_values;
    g_node *nodes;
    size_t n_nodes, cap_nodes;
    g_symtab syms;
    int *inputs;             /* value ids, in order */
    size_t n_inputs;
    int *outputs;
    size_t n_outputs;
    char scope[256];         /* prefix for node names, e.g. "/model/layers.3/attn" */
    fy_err err;
} g_graph;

g_graph *g_new(void);
void g_free(g_graph *g);
bool g_ok(const g_graph *g);

/* Sets the name prefix of the nodes made next (printf-style). */
void g_scope(g_graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Values */
int g_input(g_graph *g, const char *name, ferry_dtype dtype, int rank, const g_dim *dims);
void g_output(g_graph *g, int v, const char *name);
/* A lazy weight from the checkpoint, converted to `dtype` when written. Reuses an existing
 * value for the same (tensor, dtype, transpose). */
int g_weight_value(g_graph *g, const st_tensor *t, ferry_dtype dtype, bool transpose);
/* Small constants, stored inside the graph; de-duplicated by content. */
int g_const(g_graph *g, ferry_dtype dtype, int rank, const int64_t *dims, const void *data);
int g_const_i64(g_graph *g, int n, const int64_t *vals);     /* 1-D */
int g_scalar_i64(g_graph *g, int64_t v);                      /* rank 0 */
int g_scalar_f(g_graph *g, ferry_dtype dtype, double v);      /* rank 0, float dtype */

/* Nodes. `name` is appended to the current scope. Each returns the (first) output value. */
int g_unary(g_graph *g, g_op op, const char *name, int x);
int g_binary(g_graph *g, g_op op, const char *name, int a, int b);
int g_where(g_graph *g, const char *name, int cond, int x, int y);
int g_matmul(g_graph *g, const char *name, int a, int b);
int g_gemm_tb(g_graph *g, const char *name, int a, int b, int c);
int g_gather(g_graph *g, const char *name, int data, int indices, int axis);
int g_reshape(g_graph *g, const char *name, int x, int n, const int64_t *spec);
int g_reshape_dyn(g_graph *g, const char *name, int x, int shape);
int g_transpose(g_graph *g, const char *name, int x, int n, const int64_t *perm);
int g_concat(g_graph *g, const char *name, int n, const int *xs, int axis);
int g_slice(g_graph *g, const char *name, int x, int64_t axis, int64_t start, int64_t end);
int g_slice_dyn(g_graph *g, const char *name, int x, int starts, int ends, int axes);
int g_unsqueeze(g_graph *g, const char *name, int x, int n, const int64_t *axes);
int g_cast(g_graph *g, const char *name, int x, ferry_dtype to);
int g_softmax(g_graph *g, const char *name, int x, int axis);
int g_reduce(g_graph *g, g_op op, const char *name, int x, int n, const int64_t *axes, bool keepdims);
int g_shape_of(g_graph *g, const char *name, int x, int64_t start, int64_t end);
int g_range(g_graph *g, const char *name, int start, int limit, int delta);
int g_cumsum(g_graph *g, const char *name, int x, int axis_value);
int g_expand(g_graph *g, const char *name, int x, int shape);

int g_rms_norm(g_graph *g, const char *name, int x, int weight, double eps, double offset);
int g_linear(g_graph *g, const char *name, int x, int weight, int bias);
int g_rope(g_graph *g, const char *name, int x, int position_ids, const g_rope_opts *opts);
int g_attention(g_graph *g, const char *name, int q, int k, int v, int mask,
                const g_attn_opts *opts);
int g_silu(g_graph *g, const char *name, int x);
int g_scatter_elements(g_graph *g, const char *name, int data, int indices, int updates, int axis);
int g_kv_write(g_graph *g, const char *name, int cache, int update, int position);
/* Attention with a query offset input (bool 4-D masks); g_attention passes none. */
int g_attention_at(g_graph *g, const char *name, int q, int k, int v, int mask, int query_offset,
                   const g_attn_opts *opts);

/* Passes */
/* Marks nodes that no output depends on as dead and drops unused weights/consts from use. */
void g_remove_dead(g_graph *g);
/* Recounts value uses among live nodes and outputs. */
void g_count_uses(g_graph *g);
/* Re-derives every live node's output dtype and shape from its inputs and compares with what
 * is recorded; checks operand dtypes. Returns an error naming the node on any disagreement. */
ferry_status g_check(g_graph *g, fy_err *err);
/* Rewrites semantic ops into primitives (graph/decompose.c). `keep` (may be NULL) says, per op,
 * whether the backend maps it itself. Returns a new graph; `src` is unchanged. */
g_graph *g_decompose(const g_graph *src, const bool *keep, fy_err *err);

/* Internal helpers shared by graph.c and decompose.c: append a bare value / node (no inference;
 * g_check re-derives). */
int g_add_value(g_graph *g, const char *name, ferry_dtype dtype, const g_shape *shape,
                g_value_kind kind);
int g_add_node(g_graph *g, g_op op, const char *name, int n_in, const int *in,
               const int64_t *ints, int n_ints);

#endif
