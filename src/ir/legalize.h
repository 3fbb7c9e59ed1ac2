/* legalize.h — per-target lowering. A target (one per backend flavour: onnx-standard,
 * ort-cpu/cuda/webgpu/dml, openvino, torch) says for
 * each node whether it prints it as is (NATIVE) or wants it lowered (LOWER) — a function, so a
 * target can decide by attributes (e.g. a matmul with transpose_b only on 2-D operands). The
 * driver rebuilds the graph, lowering what is not native, until every node is native; then
 * g_check. Lowerings are generic (ir/lower/) unless the target overrides one.
 *
 * A lowering reads its inputs as destination ids (lw_in) and builds nodes in c->dst with the
 * builder calls; the destination scope is the source node's name, so lowered nodes read as
 * "/model/layers.0/input_layernorm/mul". It returns the destination ids of the node's outputs. */
#ifndef FERRY_IR_LEGALIZE_H
#define FERRY_IR_LEGALIZE_H

#include "ir/ir.h"

typedef struct g_lower_ctx g_lower_ctx;
typedef struct g_target g_target;

typedef ferry_status (*g_lower_fn)(g_lower_ctx *c, const g_node *n, int *outs);

typedef enum g_legality { G_NATIVE, G_LOWER } g_legality;

struct g_target {
    const char *name;        /* "onnx-standard" */
    g_legality (*legal)(const g_target *t, const g_graph *g, const g_node *n);
    /* The lowering for `op`, or NULL for the generic one. */
    g_lower_fn (*lowering)(const g_target *t, g_op op);
    const void *opts;        /* the backend's own options */
};

/* Pieces shared by many lowered nodes (rotary tables per rope setting, attention masks per
 * mask/window), built once per graph. */
typedef struct lw_memo {
    int kind;                /* LW_MEMO_* */
    int in_a, in_b;          /* destination ids the piece was built from */
    int64_t key;             /* dtype, window, ... */
    g_rope_opts rope;        /* rope tables: the options they were computed for */
    int out_a, out_b, out_c;
} lw_memo;

enum { LW_MEMO_ROPE = 1, LW_MEMO_MASK = 2, LW_MEMO_PACKED = 3 /* in_a: a source node */,
       LW_MEMO_ROTARY_CACHE = 4 /* a target's cos/sin tables per rope options and dtype */,
       LW_MEMO_BIAS = 5 /* a target's additive attention bias per mask and dtype */,
       LW_MEMO_WINDOW_BIAS = 6 /* a target's own form of it for a sliding window */,
       LW_MEMO_KEY_MASK = 7 /* a target's own form of a padding mask (an int32 copy) */,
       LW_MEMO_LENGTHS = 8 /* a target's per-call lengths (key and query counts) per mask */ };

/* The words of one value's reader set (a bit per op): as many as the ops need. */
#define LW_READER_WORDS ((G_OP_COUNT + 63) / 64)

struct g_lower_ctx {
    const g_graph *src;
    g_graph *dst;
    int *map;                /* source value id -> destination value id */
    uint64_t *readers;       /* per source value: LW_READER_WORDS words, a bit for each op
                                reading it */
    const g_target *target;
    lw_memo *memo;           /* grows: one entry per distinct piece */
    size_t n_memo, cap_memo;
};

/* Remembers a shared piece; false (error on the graph) when out of memory. */
bool lw_memo_add(g_lower_ctx *c, const lw_memo *m);
/* Destination id of input k of `n` (G_NONE if absent). */
int lw_in(g_lower_ctx *c, const g_node *n, int k);
/* The source value of input k of `n` (NULL if absent): its kind, uses and recipe. */
const g_value *lw_src(const g_lower_ctx *c, const g_node *n, int k);
/* FERRY_OK unless input k of `n` is a block-quantized weight, which a lowering that only knows
 * float weights must refuse: then the error (naming the target, the op and the weight) is on
 * the graph and returned. */
ferry_status lw_refuse_quantized(g_lower_ctx *c, const g_node *n, int k);
/* Whether two rope option sets give the same tables (field by field). */
bool lw_same_rope(const g_rope_opts *a, const g_rope_opts *b);
/* Whether source value `v` is read by an op other than `op` (e.g. an embedding table that a
 * linear also reads: the tied lm_head). */
bool lw_shared(const g_lower_ctx *c, int v, g_op op);
/* Pins a lowering's result to the shape the semantic op had (computed reshapes lose track of
 * symbolic dims that the builder knew). */
void lw_refine(g_lower_ctx *c, int dst_value, const g_node *n, int out_index);
/* Runs `fn` with the destination scope set to `scope`, restoring it afterwards. */
void lw_scope_push(g_lower_ctx *c, char *saved, size_t size, const char *scope);
void lw_scope_pop(g_lower_ctx *c, const char *saved);
/* The same, with the scope `name` (printf-style) under the graph's base scope: for what a
 * lowering makes once for every layer (masks, rotary tables), which the base model's forward
 * computes. */
void lw_shared_scope_push(g_lower_ctx *c, char *saved, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The generic lowering of a semantic op (ir/lower/); NULL for primitives. */
g_lower_fn g_generic_lowering(g_op op);

/* Lowers `src` for target `t` into a new graph (src is unchanged) and checks it. */
g_graph *g_legalize(const g_graph *src, const g_target *t, fy_err *err);

/* A target that lowers every semantic op and keeps every primitive (what the standard ONNX
 * backend prints, and what tests use to compare lowerings). */
extern const g_target g_target_primitives;

/* The generic lowerings, one file per op family (ir/lower/). */
ferry_status lower_rms_norm(g_lower_ctx *c, const g_node *n, int *outs);
ferry_status lower_skip_rms_norm(g_lower_ctx *c, const g_node *n, int *outs);
ferry_status lower_layer_norm(g_lower_ctx *c, const g_node *n, int *outs);
ferry_status lower_skip_layer_norm(g_lower_ctx *c, const g_node *n, int *outs);
ferry_status lower_linear(g_lower_ctx *c, const g_node *n, int *outs);
ferry_status lower_embedding(g_lower_ctx *c, const g_node *n, int *outs);
ferry_status lower_activation(g_lower_ctx *c, const g_node *n, int *outs);
ferry_status lower_rope(g_lower_ctx *c, const g_node *n, int *outs);
/* ... rotate_half as a linear of fp32 x by a constant [r, r] of +-1 (exact for finite x) */
ferry_status lower_rope_by_matrix(g_lower_ctx *c, const g_node *n, int *outs);
ferry_status lower_attention(g_lower_ctx *c, const g_node *n, int *outs);
ferry_status lower_moe(g_lower_ctx *c, const g_node *n, int *outs);
/* The same over the float expert stacks `gate_up`, `down` and `up` (dst ids; `up` G_NONE when
 * gate_up holds both) that the caller made: a target that dequantizes quantized experts. */
ferry_status lower_moe_over(g_lower_ctx *c, const g_node *n, int gate_up, int down, int up,
                            int *outs);
/* A moe node's routing from its router logits [..., E] (of x's dtype `dt`): the top_k weights
 * [..., k] (largest first, renormalised as opts say, cast to dt unless scale_f32) and their
 * experts in *chosen (int64 [..., k]). */
int lower_moe_route(g_graph *g, const g_moe_opts *opts, int logits, ferry_dtype dt, int *chosen);

/* The generic attention of `n` over keys `k` and values `v` ([b, kvh, t, d], dst ids) that the
 * caller made (a target that writes a static cache its own way): outs[0] gets the output;
 * outs[1] and outs[2] are the caller's. The mask is added to the scores as a bias. */
ferry_status lower_attention_over(g_lower_ctx *c, const g_node *n, int k, int v, int *outs);
/* The same, its scores computed keys first, K [b, kvh, t, d] times the queries transposed
 * [b, kvh, d, groups * s], and the small [t, groups * s] result transposed back: for a target
 * whose transposes are copies (ExecuTorch's), which then never copies the keys. `added_mask`:
 * the mask added to the scores as a bias (lw_attention_bias) rather than selected, for a
 * target that adds where it cannot select. */
ferry_status lower_attention_keys_first(g_lower_ctx *c, const g_node *n, int k, int v,
                                        int *outs, bool added_mask);

/* attention's keys and values as it reads them, [b, kvh, t, d] each: the new rows joined with
 * the cache as the node's cache kind says (ir/lower/attention.c); outs[1] and outs[2] get the
 * present cache when there is one. For a target's own attention kernel over the whole cache. */
void lw_attention_kv(g_lower_ctx *c, const g_node *n, int *k, int *v, int *outs);

/* attention's mask (ir/lower/mask.c): the bool [b, 1, 1, s, t] mask for query `q` (dst id),
 * shared by every layer with the same mask input, kind and window. */
int lw_attention_mask(g_lower_ctx *c, int mask, int q, int offset, g_mask_kind kind,
                      int64_t window);

/* attention `n`'s mask as an additive bias [b, 1, s, t] in `dt` (0 where a key is seen, the
 * lowest finite value where not), made once per graph for each mask: for a target's own
 * attention kernel. `q` (dst id) is any value whose axis 1 is the query length. G_NONE (and no
 * error) for an attention without a mask (G_MASK_NONE): the kernel then takes no bias. */
int lw_attention_bias(g_lower_ctx *c, const g_node *n, int q, ferry_dtype dt);
/* The lowest finite value of float type `dt`: where an additive bias hides a key. */
double lw_lowest(ferry_dtype dt);

#endif
