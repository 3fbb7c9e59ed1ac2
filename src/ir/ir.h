/* ir.h — ferry's IR: typed values with symbolic shapes, nodes over ferry's own ops (ops.def),
 * lazy weights (recipes, weights.h) and a table of states (KV caches). Built by small calls
 * that return value ids (ggml style); nothing runs while building. A failed call records the
 * error on the graph and returns G_NONE, and every call given G_NONE returns G_NONE, so
 * builders read straight and check g_ok() once at the end.
 *
 * Files: graph.c (values, nodes, constants, weights, states), infer.c (dtype/shape inference),
 * build.c (the builder calls), passes.c (dead code, uses, g_check), dump.c (text form),
 * legalize.c + lower/ (semantic ops -> what a target prints). */
#ifndef FERRY_IR_IR_H
#define FERRY_IR_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "ir/shape.h"
#include "ir/weights.h"
#include "util/err.h"
#include "util/rope_config.h"

#define G_NONE (-1)
#define G_MAX_IN 17        /* onnxruntime's GroupQueryAttention takes 17 */
#define G_MAX_OUT 3
#define G_MAX_INTS 8
#define G_END INT64_MAX      /* slice / shape_of end: to the end of the axis */

/* Attribute bits (which g_attrs fields an op reads). */
enum {
    GA_AXIS = 1 << 0, GA_INTS = 1 << 1, GA_SHAPE = 1 << 2, GA_RANGE = 1 << 3, GA_EPS = 1 << 4,
    GA_OFFSET = 1 << 5, GA_CAP = 1 << 6, GA_TO = 1 << 7, GA_KEEPDIMS = 1 << 8,
    GA_TRANSB = 1 << 9, GA_ROPE = 1 << 10, GA_ATTN = 1 << 11, GA_EXTERN = 1 << 12,
    GA_BOUNDS = 1 << 13, GA_PADS = 1 << 14, GA_CONV = 1 << 15, GA_MOE = 1 << 16,
    GA_F32W = 1 << 17,
};

typedef enum g_op {
#define OP(id, name, kind, min_in, max_in, max_out, attrs, infer) G_##id,
#include "ir/ops.def"
#undef OP
    G_OP_COUNT
} g_op;

typedef struct g_op_info {
    const char *name;
    bool semantic;
    int min_in, max_in, max_out;
    unsigned attrs;
} g_op_info;

const g_op_info *g_op_info_of(g_op op);
const char *g_op_name(g_op op);
bool g_op_is_semantic(g_op op);

/* Rotary embedding options, one set per node (layers may differ: Gemma 3's local layers use
 * another theta). */
typedef struct g_rope_opts {
    rope_config rope;        /* type, theta and scaling parameters */
    int64_t head_dim;
    int64_t rotary_dim;      /* the leading part of head_dim that rotates (partial rotary) */
    int64_t max_position_embeddings;
} g_rope_opts;

typedef enum g_mask_kind {
    G_MASK_CAUSAL,           /* int64 [b, t] padding mask; query i sees keys j <= t - s + i */
    G_MASK_PADDING,          /* int64 [b, t] padding mask only: bidirectional or cross */
    G_MASK_GIVEN,            /* bool [b, 1, s, t], used as given */
    G_MASK_NONE              /* no mask input: every query sees every key (an encoder's or a
                                vision tower's bidirectional attention over unpadded input);
                                only without a cache or window */
} g_mask_kind;

typedef enum g_cache_kind {
    G_CACHE_NONE,            /* no cache outputs */
    G_CACHE_APPEND,          /* present = concat(past, new) along the length axis (past may be
                                absent: an empty cache) */
    G_CACHE_STATIC,          /* present = past with the new rows written at cache_position */
    G_CACHE_CROSS            /* k and v are an encoder-decoder's cross-attention cache
                                [b, kvh, t, d], computed once from the encoder's output and only
                                read here: no past inputs, no outputs (mask kind none) */
} g_cache_kind;

typedef struct g_attn_opts {
    int64_t num_heads, num_kv_heads, head_dim;
    double scale;            /* usually head_dim^-0.5 */
    double softcap;          /* 0 = none: scores = tanh(scores / cap) * cap */
    int64_t sliding_window;  /* 0 = none: keys j with i - window < j <= i are visible */
    g_mask_kind mask;
    g_cache_kind cache;
} g_attn_opts;

/* Convolution options (op CONV), one set per node. Entry i of each array is spatial axis i
 * (axis 2 + i of x); entries from `spatial` on stay zero. */
#define G_CONV_MAX_SPATIAL 3

typedef struct g_conv_opts {
    int spatial;                             /* 1, 2 or 3 spatial axes */
    int64_t strides[G_CONV_MAX_SPATIAL];     /* >= 1 */
    int64_t pads_begin[G_CONV_MAX_SPATIAL];  /* zeros added before each axis, >= 0 */
    int64_t pads_end[G_CONV_MAX_SPATIAL];    /* ... and after it */
    int64_t dilations[G_CONV_MAX_SPATIAL];   /* >= 1 */
    int64_t groups;                          /* >= 1, dividing c_in and c_out */
} g_conv_opts;

/* Mixture-of-experts options (op MOE), one set per node: what Qwen2-MoE, Qwen3-MoE and Mixtral
 * differ by. The expert and hidden sizes are the weights'. */
typedef struct g_moe_opts {
    int64_t num_experts;     /* E: the weights' first extent and router_logits' last */
    int64_t top_k;           /* experts per token, 1 to E (num_experts_per_tok) */
    bool norm_topk_prob;     /* the chosen k probabilities divided by their sum (Mixtral always;
                                Qwen2/3-MoE by config) */
    bool scale_f32;          /* the routing weights stay fp32: each expert's output is scaled in
                                fp32 and cast back to x's dtype (Mixtral); otherwise they are
                                cast to x's dtype first and scale in it (Qwen2/3-MoE) */
    g_op act;                /* act(gate) * up: G_SILU, G_GELU or G_GELU_TANH (hidden_act) */
} g_moe_opts;

/* A backend's own op (op EXTERN): what its writer prints, e.g. onnxruntime's
 * com.microsoft.MatMulNBits. Only that backend's target lowerings make one. */
#define G_EXT_MAX_ATTRS 12
#define G_EXT_OUT_SLOTS 8

typedef struct g_ext_attr {
    char name[32];
    char kind;               /* 'i' int, 'f' float, 'b' bool (i 0 or 1), 's' string */
    int64_t i;
    double f;
    char s[32];
} g_ext_attr;

typedef struct g_extern {
    char domain[32];         /* "com.microsoft" ("" = the format's default domain) */
    char op_type[48];        /* "MatMulNBits" */
    g_ext_attr attr[G_EXT_MAX_ATTRS];
    int n_attr;
    /* input k that is a block-quantized weight stands for this part of it (w_part); -1 (any
     * other input) is the value itself */
    signed char part[G_MAX_IN];
    unsigned flat;           /* bit k: input k's codes are read as 2-D [out, in*bits/8] */
    int out_slot[G_MAX_OUT]; /* the op's output position of each output (gaps print empty) */
    ferry_dtype out_dtype[G_MAX_OUT];
    g_shape out_shape[G_MAX_OUT];
    int n_out;
} g_extern;

typedef struct g_attrs {
    int64_t axis;
    int64_t ints[G_MAX_INTS];    /* perm, axes; topk's k */
    int n_ints;
    g_shape shape;               /* reshape target */
    int64_t start, end;          /* slice, shape_of */
    double eps, offset, cap;
    ferry_dtype to;
    bool keepdims, transpose_b;
    bool f32_weight;             /* rms norms: the weight (+ offset) multiplies in fp32, then the
                                    cast (Gemma, OLMo 2); else the cast first (Llama) */
    double lo, hi;               /* clip: the bounds, -INFINITY / INFINITY where absent */
    int64_t pad_begin[G_MAX_RANK], pad_end[G_MAX_RANK]; /* pad: per axis of x, >= 0 */
    double pad_value;            /* pad: the value of the elements added */
    g_rope_opts *rope;           /* owned */
    g_attn_opts *attn;           /* owned */
    g_extern *ext;               /* owned */
    g_conv_opts *conv;           /* owned */
    g_moe_opts *moe;             /* owned */
} g_attrs;

typedef enum g_value_kind { GV_INPUT, GV_NODE, GV_CONST, GV_WEIGHT } g_value_kind;

/* What a graph input holds, as the family that made it says (g_input_role): how a caller (or
 * a format that carries example inputs, torch's sample inputs) fills it. */
typedef enum g_input_role {
    GI_OTHER,                /* nothing a caller derives (a cache, a beam index) */
    GI_TOKEN_IDS,            /* token ids: an example holds token 0 */
    GI_ATTENTION_MASK,       /* 1 for a real token, 0 for padding: an example holds ones */
    GI_POSITION_IDS,         /* positions: an example counts 0, 1, ... along the sequence */
    GI_TOKEN_TYPE_IDS,       /* segment ids: an example holds 0 */
    GI_ROLE_COUNT
} g_input_role;

typedef struct g_value {
    char *name;
    ferry_dtype dtype;
    g_shape shape;
    g_value_kind kind;
    int producer;            /* node index for GV_NODE, else -1 */
    void *data;              /* GV_CONST: owned bytes */
    size_t nbytes;
    g_weight weight;         /* GV_WEIGHT: the recipe; dtype/shape above are its logical ones */
    int n_uses;              /* filled by g_count_uses */
    /* GV_INPUT of an integer type: its values lie in [0, bound) (ids gathered from a table: a
     * value past it would be read past the table, or as zeros); 0: not said */
    int64_t bound;
    g_input_role role;       /* GV_INPUT: what it holds */
    uint64_t hash;           /* GV_WEIGHT, GV_CONST: its key in the leaf index (graph.c), kept so
                                growing the index never rehashes a large constant */
} g_value;

typedef struct g_node {
    g_op op;
    char *name;
    int n_in, n_out;
    int in[G_MAX_IN];        /* G_NONE for an absent optional input */
    int out[G_MAX_OUT];
    g_attrs a;
    bool dead;               /* set by g_remove_dead */
} g_node;

/* A state carried between calls (a KV cache tensor or its write position). `name` is the
 * guide's cache name ("past_key_values.3.key"); `in` is the graph input holding the state
 * before the call (G_NONE when it starts empty), `out` the graph output after it. Each backend
 * prints states its own way (ONNX input./output. pairs or past/present names, OpenVINO
 * ReadValue/Assign, pt2 input mutations, pte mutable buffers). */
typedef enum g_state_kind {
    GS_KEY, GS_VALUE, GS_LENGTH,
    /* cross-attention's keys and values (encoder-decoders): written once, by the call that
     * reads the encoder's output, and only read after */
    GS_CROSS_KEY, GS_CROSS_VALUE,
    GS_KIND_COUNT
} g_state_kind;

/* How a state travels between calls, which is what a format prints for it. A family's plan
 * makes PAIR (a cache that grows) or IN_PLACE (one of fixed size); a backend's finish turns
 * them into the form it prints (backend.h: state_forms). */
typedef enum g_state_form {
    GS_PAIR,                 /* a graph input and a new graph output (ONNX past/present) */
    GS_IN_PLACE,             /* a graph input and an output of its dtype and shape, which may
                                share its buffer (a static cache: input./output. bound to one) */
    GS_VARIABLE,             /* carried by the runtime (OpenVINO's ReadValue/Assign): neither a
                                graph input nor an output */
    GS_MUTATED,              /* of fixed size, written into its input (torch's input
                                mutations): a graph input, not an output */
    GS_BUFFER,               /* of fixed size, the program's own buffer (ExecuTorch's mutable
                                buffers): neither a graph input nor an output */
    GS_FORM_COUNT
} g_state_form;

/* Whether a state of `form` has a fixed size (its buffer is written in place). */
bool g_state_fixed(g_state_form form);

typedef struct g_state {
    char *name;
    g_state_kind kind;
    int layer;
    int in, out;
    g_state_form form;
} g_state;

/* Where nodes came from: a module of the model's transformers class tree at a node-name scope,
 * declared by the family that builds the graph (its modeling code knows its modules; nobody
 * else guesses them from names). Formats that record provenance (torch.export's
 * nn_module_stack and module call graph) and passes that treat a module by what it is (the
 * quantizer and the head) read this table. A node belongs to the innermost declared module
 * whose scope is a prefix of its name at a '/' boundary, by the leaf rule below; lowering
 * keeps names under the node lowered, so lowered nodes stay in their module. */
typedef enum g_module_role {
    GM_ROLE_NONE,
    GM_ROLE_HEAD,            /* the output projection (a causal LM's lm_head, a classifier) */
    GM_ROLE_ROUTER,          /* a mixture of experts' gate, which picks the experts */
    GM_ROLE_EXPERT,          /* a linear of one expert (or of all of them, stacked) */
    GM_ROLE_PATCH_EMBED,     /* a vision tower's patch embedding */
    GM_ROLE_CROSS_KV,        /* an encoder-decoder's cross-attention key or value projection,
                                of the encoder's output */
    GM_ROLE_COUNT
} g_module_role;

typedef struct g_module {
    char *scope;             /* "/model/layers.0/self_attn"; "" is the root (the whole model) */
    char *fqn;               /* its path in the model: "model.layers.0.self_attn"; "" the root */
    char *cls;               /* transformers' (or torch's) class, fully qualified:
                                "transformers.models.llama.modeling_llama.LlamaAttention" */
    /* G_OP_COUNT: every node named under the scope is the module's. Otherwise a leaf module
     * whose forward is this one op (torch's Linear, Embedding, LayerNorm, an activation): it
     * holds only nodes of that op, and any other node named under it (a reshape of a
     * projection's output) is its parent's, as in the parent's forward. */
    g_op leaf_op;
    /* an item of a ModuleList (a decoder layer): the list (the fqn up to its last '.') is a
     * module too, and what the items read but none of them makes (rotary tables, masks) is
     * computed before the list */
    bool list_item;
    g_module_role role;
} g_module;

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
    g_state *states;
    size_t n_states;
    char scope[256];         /* prefix for node names, e.g. "/model/layers.3/self_attn" */
    /* the scope of the module whose forward computes what every layer shares (the masks, the
     * rotary tables): lowerings name those nodes under it. "/model" (LlamaModel) in a causal
     * LM; "" (the root) where the graph is the base model itself */
    char base_scope[64];
    /* transformers' ModelOutput class whose fields the outputs are
     * ("transformers.modeling_outputs.CausalLMOutputWithPast"); static; NULL: none */
    const char *output_class;
    g_module *modules;       /* declared by the family (g_module_add); the root first */
    size_t n_modules, cap_modules;
    int *module_slots;       /* hash index of the modules by scope (modules.c) */
    size_t module_slot_cap;
    const st_tensor ***source_lists; /* the long source lists of its weights' recipes */
    size_t n_source_lists, cap_source_lists;
    fy_err err;
    int *leaf_slots;         /* hash index of weight and constant values (graph.c) */
    size_t leaf_cap, leaf_n;
} g_graph;

g_graph *g_new(void);
void g_free(g_graph *g);
bool g_ok(const g_graph *g);
/* Records an error on the graph (the first one wins); returns G_NONE. */
int g_fail(g_graph *g, ferry_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sets the name prefix of the nodes made next (printf-style). */
void g_scope(g_graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- modules (modules.c) ---- */
/* Declares the module at node-name scope `scope` (printf-style path; "" the root): its class,
 * leaf op (G_OP_COUNT: not a leaf), whether it is an item of a ModuleList, and its role. The
 * fqn is the scope with '/' read as '.'. Declaring a scope twice keeps the first. */
void g_module_add(g_graph *g, const char *cls, g_op leaf_op, bool list_item, g_module_role role,
                  const char *scope_fmt, ...) __attribute__((format(printf, 6, 7)));
/* The module declared at exactly `scope` (its first `len` bytes), or NULL. */
const g_module *g_module_at(const g_graph *g, const char *scope, size_t len);
/* The modules node `name` of op `op` came from, outermost first, root excluded: every declared
 * scope along the name, by the leaf rule. Returns how many (at most `max`). */
int g_node_modules(const g_graph *g, const char *name, g_op op, const g_module **stack, int max);
/* The role of the module node `n` is the whole of (a linear's module), or GM_ROLE_NONE. */
g_module_role g_node_role(const g_graph *g, const g_node *n);
/* Copies every module of `src` into `dst` (lowering keeps them). */
void g_modules_copy(g_graph *dst, const g_graph *src);

/* ---- values (graph.c) ---- */
int g_input(g_graph *g, const char *name, ferry_dtype dtype, int rank, const g_dim *dims);
/* Says what graph input `v` holds (a no-op on G_NONE). */
void g_input_role_set(g_graph *g, int v, g_input_role role);
/* The axis of `x` whose dim is exactly `d` (never an unknown one), or -1. */
int g_value_axis(const g_value *x, g_dim d);
/* The first graph input with an axis of dim `d`: its value id and axis; false if none. The
 * printers read a symbolic extent at run time off such an axis. */
bool g_input_dim(const g_graph *g, g_dim d, int *value, int *axis);
/* The input axis a program reads symbol `sym` off: one whose dim is k * sym alone, the
 * smallest k first (g_sym_count_in_units leaves a symbol on no axis by itself); its value id,
 * axis and k (the symbol is the axis's extent divided by k); false if none. */
bool g_input_symbol(const g_graph *g, int sym, int *value, int *axis, int64_t *k);
/* Renames value `v` (false, with the graph's error set, when out of memory). */
bool g_rename(g_graph *g, int v, const char *name);
/* Makes `v` a graph output named `name` (the value is renamed). */
void g_output(g_graph *g, int v, const char *name);
/* A lazy weight; reuses an existing value with an equal recipe. The value is named `name`
 * (a state_dict key, so pt2/pte parameters keep the checkpoint's names). */
int g_weight_value(g_graph *g, const char *name, const g_weight *recipe);
/* Small constants, stored inside the graph; de-duplicated by content. */
int g_const(g_graph *g, ferry_dtype dtype, int rank, const int64_t *dims, const void *data);
/* ... taking `data` (malloc'd, of the shape's size) as the graph's own, freed on any failure
 * or when an equal constant exists: for large tables made once. */
int g_const_owned(g_graph *g, ferry_dtype dtype, int rank, const int64_t *dims, void *data);
/* ... equal to constant `x` of another graph (its hash reused). */
int g_const_copy(g_graph *g, const g_value *x);
int g_const_i64(g_graph *g, int n, const int64_t *vals);     /* 1-D */
int g_scalar_i64(g_graph *g, int64_t v);                      /* rank 0 */
int g_scalar_f(g_graph *g, ferry_dtype dtype, double v);      /* rank 0, float dtype */
/* Declares a state (see g_state); `in` may be G_NONE. */
void g_state_add(g_graph *g, const char *name, g_state_kind kind, int layer, int in, int out,
                 bool in_place);

/* ---- nodes (build.c). `name` is appended to the current scope. Each returns the first
 * output value; g_node_out() gives the others. ---- */
int g_unary(g_graph *g, g_op op, const char *name, int x);
int g_binary(g_graph *g, g_op op, const char *name, int a, int b);
int g_where(g_graph *g, const char *name, int cond, int x, int y);
int g_matmul(g_graph *g, const char *name, int a, int b, bool transpose_b);
int g_gather(g_graph *g, const char *name, int data, int indices, int axis);
/* To the symbolic shape `dims` (at most one g_dim_unknown(), solved from the element count). */
int g_reshape(g_graph *g, const char *name, int x, int rank, const g_dim *dims);
/* Convenience: `spec` entries are extents, 0 = x's dim at that position, -1 = solved. */
int g_reshape_spec(g_graph *g, const char *name, int x, int rank, const int64_t *spec);
int g_transpose(g_graph *g, const char *name, int x, int n, const int64_t *perm);
int g_concat(g_graph *g, const char *name, int n, const int *xs, int axis);
int g_slice(g_graph *g, const char *name, int x, int64_t axis, int64_t start, int64_t end);
int g_unsqueeze(g_graph *g, const char *name, int x, int n, const int64_t *axes);
int g_cast(g_graph *g, const char *name, int x, ferry_dtype to);
int g_softmax(g_graph *g, const char *name, int x, int axis);
int g_cumsum(g_graph *g, const char *name, int x, int axis);
int g_reduce(g_graph *g, g_op op, const char *name, int x, int n, const int64_t *axes,
             bool keepdims);
int g_shape_of(g_graph *g, const char *name, int x, int64_t start, int64_t end);
int g_range(g_graph *g, const char *name, int start, int limit, int delta);
int g_expand(g_graph *g, const char *name, int x, int shape);
int g_scatter_elements(g_graph *g, const char *name, int data, int indices, int updates, int axis);
/* data with updates added at indices along axis (ScatterElements' reduction add) */
int g_scatter_add(g_graph *g, const char *name, int data, int indices, int updates, int axis);
/* the k largest values of x along axis, largest first; their int64 indices in *indices */
int g_topk(g_graph *g, const char *name, int x, int64_t k, int axis, int *indices);
/* data's values at indices along axis: out[..i..] = data[..indices[..i..]..] */
int g_gather_elements(g_graph *g, const char *name, int data, int indices, int axis);
/* x clamped to [lo, hi]; -INFINITY / INFINITY for an absent bound */
int g_clip(g_graph *g, const char *name, int x, double lo, double hi);
/* x with begin[i] elements of `value` added before axis i and end[i] after it; n is x's rank */
int g_pad(g_graph *g, const char *name, int x, int n, const int64_t *begin, const int64_t *end,
          double value);
/* N-D convolution of x [n, c_in, spatial...] with weight [c_out, c_in/groups, kernel...] (any
 * value), plus bias [c_out] unless G_NONE; `opts` is copied */
int g_conv(g_graph *g, const char *name, int x, int weight, int bias, const g_conv_opts *opts);

/* RMSNorm of x over its last axis times (offset + weight): with f32_weight the product is
 * taken in fp32 and then cast to x's dtype (Gemma's (1 + w), OLMo 2's w), else the normalized
 * value is cast first and then multiplied by the weight (Llama's; offset must be 0). */
int g_rms_norm(g_graph *g, const char *name, int x, int weight, double eps, double offset,
               bool f32_weight);
/* Returns the normalized value; *sum receives x + skip. */
int g_skip_rms_norm(g_graph *g, const char *name, int x, int skip, int weight, double eps,
                    double offset, bool f32_weight, int *sum);
int g_layer_norm(g_graph *g, const char *name, int x, int weight, int bias, double eps);
/* layer_norm(x + skip) and the sum (in *sum, unless NULL: a post-norm layer reads the norm
 * alone), as g_skip_rms_norm; bias may be G_NONE */
int g_skip_layer_norm(g_graph *g, const char *name, int x, int skip, int weight, int bias,
                      double eps, int *sum);
int g_linear(g_graph *g, const char *name, int x, int weight, int bias);
int g_embedding(g_graph *g, const char *name, int table, int ids);
int g_softcap(g_graph *g, const char *name, int x, double cap);
int g_rope(g_graph *g, const char *name, int x, int position_ids, const g_rope_opts *opts);
/* Attention (see ops.def). mask is G_NONE exactly when opts->mask is G_MASK_NONE;
 * past_k/past_v/cache_position may be G_NONE; with a cache the
 * present key and value come back in *present_k / *present_v (may be NULL otherwise). */
int g_attention(g_graph *g, const char *name, int q, int k, int v, int mask, int past_k,
                int past_v, int cache_position, const g_attn_opts *opts, int *present_k,
                int *present_v);
/* ... with `bias` (float [b or 1, h, s, T]) added to the scaled scores; G_NONE: none. */
int g_attention_biased(g_graph *g, const char *name, int q, int k, int v, int mask, int past_k,
                       int past_v, int cache_position, int bias, const g_attn_opts *opts,
                       int *present_k, int *present_v);
/* A mixture of experts (see ops.def): x [..., h] routed by router_logits [..., E] through
 * gate_up [E, 2*ff, h] (up G_NONE), or gate [E, ff, h] and up [E, ff, h], and down [E, h, ff].
 * `opts` is copied. */
int g_moe(g_graph *g, const char *name, int x, int router_logits, int gate_up, int down, int up,
          const g_moe_opts *opts);

/* Appends a bare value without inference (legalization copies, tests). */
int g_add_value(g_graph *g, const char *name, ferry_dtype dtype, const g_shape *shape,
                g_value_kind kind);

/* Output `k` of the node that produced value `v` (G_NONE if there is none). */
int g_node_out(const g_graph *g, int v, int k);
/* A block-quantized weight value -> its float values [out, in] (op DEQUANTIZE). */
int g_dequantize(g_graph *g, const char *name, int weight);
/* A backend's own op (see g_extern): `e` is copied; its outputs are e->n_out values of the
 * given types. Returns the first output. */
int g_extern_node(g_graph *g, const char *name, const g_extern *e, int n_in, const int *in);
/* A g_extern for `domain`.`op_type` with no attributes, every input plain, outputs unset. */
g_extern g_extern_init(const char *domain, const char *op_type);
/* Appends an int or float attribute (past G_EXT_MAX_ATTRS the node fails inference). */
void g_extern_int(g_extern *e, const char *name, int64_t v);
void g_extern_float(g_extern *e, const char *name, double v);
void g_extern_bool(g_extern *e, const char *name, bool v);
/* a string attribute (onnxruntime's activation_type="swiglu"); at most 31 bytes */
void g_extern_str(g_extern *e, const char *name, const char *v);
/* Declares output k at op output position `slot` with its type. */
void g_extern_out(g_extern *e, int k, int slot, ferry_dtype dtype, const g_shape *shape);

/* Low-level: appends a node with explicit attributes (the option structs are copied), infers
 * its outputs and creates their values. Returns the node index or G_NONE. */
int g_add_node(g_graph *g, g_op op, const char *name, int n_in, const int *in, const g_attrs *a);

/* ---- inference (infer.c) ---- */
typedef struct g_typed {
    ferry_dtype dtype;
    g_shape shape;
} g_typed;
/* The output types of node `n` from its inputs (and how many outputs it has: attention has one
 * or three); errors name the node. */
ferry_status g_infer(const g_graph *g, const g_node *n, g_typed *outs, int *n_out, fy_err *err);

/* ---- passes (passes.c) ---- */
/* Marks nodes that no output depends on as dead and recounts uses. */
void g_remove_dead(g_graph *g);
void g_count_uses(g_graph *g);
/* Re-derives every live node's outputs and compares with what is recorded; checks operand
 * counts and attributes against the op table, topological order, unique names and the state
 * table. Returns an error naming the node on any disagreement. */
ferry_status g_check(g_graph *g, fy_err *err);

/* ---- text form (dump.c): one line per input, weight, constant, node, output and state;
 * deterministic, for golden tests and `ferry graph`. Returns malloc'd text or NULL. ---- */
char *g_dump(const g_graph *g);

#endif
