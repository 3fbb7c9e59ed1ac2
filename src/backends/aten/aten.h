/* aten.h — graphs lowered for an aten target written as aten calls, for the formats that hold
 * aten programs: torch.export's .pt2 (src/backends/torch) and ExecuTorch's .pte
 * (src/backends/executorch). The emitter (aten_nodes.c) turns each IR node into the calls
 * torch.export records for it, at the level it produces before decompositions (aten.linear,
 * aten.reshape, aten.scaled_dot_product_attention, ...), with their arguments by aten's schema
 * names, and hands them to a sink, which writes them its way: the .pt2 printer as the
 * ExportedProgram's JSON nodes, the .pte writer as ExecuTorch's out kernels. The integer
 * arithmetic the IR does on shapes makes no call: it reaches the sink as SymInt arguments
 * (aten_symbolic.c follows it), or as a tensor the emitter makes where a tensor op reads it. */
#ifndef FERRY_BACKENDS_ATEN_H
#define FERRY_BACKENDS_ATEN_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"

/* ---- symbolic integers (aten_symbolic.c) ----
 * aten's view, expand and arange take SymInts where ONNX takes int64 tensors: the IR's shape
 * arithmetic (shape_of, and gathers, slices, sums and products of it) is followed to the dims
 * it stands for, so a sink spells it as the size of an input and SymInt expressions. */
typedef struct aten_ints {
    bool known;              /* every element is a known dim */
    bool scalar;             /* rank 0 */
    int n;
    g_dim d[G_MAX_RANK];
} aten_ints;

/* The integers of every value of `g` that are known (malloc'd, one per value; NULL when out of
 * memory): small int64/int32 constants and what the live nodes compute from them and shapes. */
aten_ints *aten_track(const g_graph *g);
/* Gives every dim the IR left unknown (an arange's length, what it broadcasts into) its
 * expression where inference can derive it now (an aten program writes every tensor's size;
 * a sink refuses one that stays unknown, naming it). */
ferry_status aten_refine_shapes(g_graph *g, fy_err *err);
/* For range(start, start + n, 1) with n known and start data (a cache position): the value
 * n; else G_NONE. aten spells it arange(n) + start. */
int aten_range_offset_length(const g_graph *g, const g_node *range, const aten_ints *ints);
/* "2*s0 + s1 - 1": a dim as the sympy expression torch's serializer reads (symbol k is s<k>). */
int aten_dim_expr(g_dim d, char *buf, size_t size);

/* ---- the emitter and its sinks (aten_nodes.c) ---- */

/* A tensor an argument names: a graph value (>= 0), or one a call made (a temporary: the sink
 * numbers them, ATEN_TEMP(k)). */
typedef int aten_t;
#define ATEN_NONE (-1)
#define ATEN_TEMP(k) (-2 - (k))
#define ATEN_TEMP_INDEX(t) (-2 - (t))

/* how an argument is passed, as torch's schema numbers it */
enum { ATEN_POSITIONAL = 1, ATEN_KEYWORD = 2 };

/* One output of a call: a graph value, or a temporary (value G_NONE) named after `base`. */
typedef struct aten_out {
    int value;
    const char *base;
    ferry_dtype dtype;
    g_shape shape;
} aten_out;

typedef struct aten_sink aten_sink;

/* What a format does with the calls. A call is `begin`, its arguments in schema order, `end`;
 * an argument's own call (a tensor made of shape integers) may come between a call's `begin`
 * and `end`, and is ended first. Arguments name the schema's argument and how it is passed. */
typedef struct aten_sink_ops {
    void (*begin)(aten_sink *s, const char *op);          /* "add.Tensor" (aten's name) */
    void (*tensor)(aten_sink *s, const char *arg, int kind, aten_t t);
    /* a list of tensors; `optional`: a list of optional tensors, ATEN_NONE for None */
    void (*tensors)(aten_sink *s, const char *arg, int kind, const aten_t *t, int n,
                    bool optional);
    void (*integer)(aten_sink *s, const char *arg, int kind, int64_t v);
    void (*number)(aten_sink *s, const char *arg, int kind, double v);   /* a float */
    void (*boolean)(aten_sink *s, const char *arg, int kind, bool v);
    void (*string)(aten_sink *s, const char *arg, int kind, const char *v);
    void (*none)(aten_sink *s, const char *arg, int kind);
    void (*ints)(aten_sink *s, const char *arg, int kind, const int64_t *v, int n);
    void (*symint)(aten_sink *s, const char *arg, int kind, g_dim d);
    void (*symints)(aten_sink *s, const char *arg, int kind, const g_dim *d, int n);
    void (*scalar_type)(aten_sink *s, const char *arg, int kind, ferry_dtype dt);
    void (*device_cpu)(aten_sink *s, const char *arg, int kind);
    /* Ends the call with its `n` outputs; a call of several outputs is named after `node`.
     * refs[k] receives how later arguments name output k. */
    void (*end)(aten_sink *s, int n, const aten_out *outs, const char *node, aten_t *refs);
    /* The tensor a tied head's linear reads for its weight `value`, its module's parameter
     * `key` ("lm_head.weight"), or ATEN_NONE on failure: a format that names parameters
     * gives it a name of its own over the embedding's storage. NULL: the value itself. */
    aten_t (*tied_head)(aten_sink *s, int value, const char *key);
    /* Whether the sink has failed: the emitter stops. */
    bool (*failed)(const aten_sink *s);
    /* Records a failure (the first one wins). */
    void (*fail)(aten_sink *s, ferry_status st, const char *msg);
} aten_sink_ops;

struct aten_sink {
    const aten_sink_ops *ops;
};

typedef struct aten_emitter {
    const g_graph *g;
    const aten_ints *ints;   /* aten_track's */
    aten_sink *sink;
    aten_t *made;            /* per value: the tensor a call made of it (ATEN_NONE: none yet) */
} aten_emitter;

/* Starts an emitter over lowered graph `g` (its ints from aten_track); false when out of
 * memory. aten_emitter_free releases it. */
bool aten_emitter_init(aten_emitter *e, const g_graph *g, const aten_ints *ints, aten_sink *sink);
void aten_emitter_free(aten_emitter *e);
/* The tensor that stands for value `v` in a call: the value itself, or, for an integer the
 * IR computed from shapes, a tensor made of it (aten.full, stacked) on first use. */
aten_t aten_tensor(aten_emitter *e, int v);
/* Writes node `i` of the graph (nothing for the integer arithmetic the program spells as
 * SymInts). */
void aten_emit_node(aten_emitter *e, size_t i);
/* Writes each state that is not written in place already (a static cache's position) into its
 * input: aten.copy_, after every other node. */
void aten_emit_mutations(aten_emitter *e);

/* ---- what the aten targets make ---- */

/* the extern node an aten target makes for attention, written as aten's SDPA */
#define ATEN_DOMAIN "aten"
#define ATEN_SDPA "scaled_dot_product_attention"
/* ... and for a static cache's write into the caller's tensor */
#define ATEN_INDEX_COPY "index_copy_"

/* Attention n's keys and values [b, kvh, t, d] as it reads them (aten_cache.c): a static
 * cache's new rows written into the cache tensor itself (aten.index_copy_ at slots
 * arange(s) + position, an ATEN_INDEX_COPY extern), outs[1] and outs[2] the written caches;
 * otherwise lw_attention_kv's. */
struct g_lower_ctx;
void aten_attention_kv(struct g_lower_ctx *c, const g_node *n, int *k, int *v, int *outs);

/* The embedding weight a tied head node `n` of `g` reads (transformers' module reads it through
 * a parameter of its own, its module's "<fqn>.weight" in `key`, one storage with it), or NULL:
 * `n` is not the head (the linear of role head the family declared), or it has a weight of
 * its own. */
const g_value *aten_tied_head_weight(const g_graph *g, const g_node *n, char *key, size_t size);

#endif
