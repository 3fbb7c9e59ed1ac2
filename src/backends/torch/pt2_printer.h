/* pt2_printer.h — the ExportedProgram printer's state, shared by the program (pt2_print.c:
 * placeholders, signature, the JSON around the nodes), its writer (pt2_writer.c: names, tensor
 * metadata, the aten sink that writes each call the emitter hands it as a JSON node, its
 * arguments and SymInts) and the nodes' provenance (pt2_modules.c: nn_module_stack). The calls
 * themselves come from the aten emitter (src/backends/aten). Only those three files include
 * this. */
#ifndef FERRY_BACKENDS_TORCH_PT2_PRINTER_H
#define FERRY_BACKENDS_TORCH_PT2_PRINTER_H

#include "backends/aten/aten.h"
#include "backends/torch/pt2.h"
#include "backends/torch/torch.h"
#include "util/strbuf.h"

/* argument kinds as torch's schema numbers them */
enum { PT_POSITIONAL = 1, PT_KEYWORD = 2 };

#define PT_MAX_DEPTH 6
/* the longest name pt_fresh makes, before a _<n> that makes it unique */
#define PT_NAME_MAX 160

typedef struct pt_sym {
    g_dim d;
    char *name;
} pt_sym;

typedef struct pt_printer {
    aten_sink sink;          /* what the emitter hands its calls to (pt2_writer.c) */
    aten_emitter emit;
    g_graph *g;
    aten_ints *ints;         /* the known integers of every value (aten_symbolic.c) */
    char **names;            /* per value: its name in the program, once it has one */
    const char **temps;      /* the names of the temporaries calls made (aten.h: ATEN_TEMP) */
    size_t n_temps, cap_temps;
    strbuf nodes, tensor_values, sym_int_values;
    int n_nodes, n_tensor_values, n_sym_int_values;
    /* the nodes being written: a node's argument may need a node of its own first (a SymInt,
     * a shape made a tensor), which is finished and placed before it */
    struct pt_frame {
        strbuf b;
        bool first_arg;
        char target[96];     /* the aten op */
    } frame[PT_MAX_DEPTH];
    int depth;
    pt_sym *syms;            /* SymInt nodes made so far, by the dim they compute */
    size_t n_syms, cap_syms;
    char **taken;            /* every name in the program (open addressing) */
    size_t cap_taken, n_taken;
    pt2_program *prog;
    const char *tied_head;   /* the placeholder of a tied head's weight, once made ... */
    char tied_key[256];      /* ... and its state_dict key ("lm_head.weight") */
    bool model_output;       /* returns CausalLMOutputWithPast, not a dict (model_output) */
    const char *ir_name;     /* the IR node being written (NULL: one of the program's own) */
    g_op ir_op;              /* ... and its op */
    char **modules;          /* every module a node came from, in order of first use */
    size_t n_modules, cap_modules;
    const g_module *stack_module; /* the innermost module of the last stack written ... */
    char *stack_json;        /* ... and that stack's metadata (NULL: none yet) */
    fy_err *err;
    ferry_status st;         /* the first failure; later calls do nothing */
} pt_printer;

/* Records the first failure (the message names what the target cannot express). */
ferry_status pt_fail(pt_printer *p, ferry_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The name of value `v` as a tensor argument: a parameter, a lifted constant, a user input or
 * an earlier node's output; an integer the IR computed from shapes is made a tensor by the
 * emitter. NULL (with the failure recorded) if it cannot be. */
const char *pt_tensor(pt_printer *p, int v);
/* The name of the SymInt node computing `d` (made on first use); NULL for a constant dim. */
const char *pt_symint(pt_printer *p, g_dim d);
/* The placeholder of parameter "lm_head.weight" over weight value `v` (the embedding table a
 * tied lm_head reads): the module's own second name for the one tensor, as transformers' model
 * holds it (both state_dict keys, one storage). */
const char *pt_tied_head(pt_printer *p, int v, const char *key);
/* Adds the TensorMeta of `name` (a placeholder or a node's output) to the graph's
 * tensor_values; a size that stays unknown, or a dtype torch lacks, is refused by name. */
void pt_tensor_value(pt_printer *p, const char *name, ferry_dtype dt, const g_shape *s);
/* A fresh unique name from `base` ("linear" -> "linear", then "linear_1", ...). */
const char *pt_fresh(pt_printer *p, const char *base);

/* Writing one node: begin, its arguments, end with its output (for the program's own nodes:
 * SymInts, the mutations' copies; the emitter's calls come through pt_sink_ops). */
void pt_node_begin(pt_printer *p, const char *target);
void pt_arg_tensor(pt_printer *p, const char *arg, int v, int kind);
/* an argument whose value is JSON text: {"as_int": 3}, {"as_bool": true}, ... */
void pt_arg(pt_printer *p, const char *arg, int kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void pt_arg_symint(pt_printer *p, const char *arg, int kind, g_dim d);
/* a list of SymInts: as_ints when every one is constant, as_sym_ints otherwise */
void pt_arg_symints(pt_printer *p, const char *arg, int kind, const g_dim *d, int n);
/* ends the node with tensor output `out` named `name`, of dtype/shape of value `like` */
void pt_node_end_tensor(pt_printer *p, const char *name, ferry_dtype dt, const g_shape *s);
/* Ends node `node` that returns several tensors (aten.topk's values and indices), in that
 * order: the loader names each output after its tensor, so the node needs a name of its own. */
void pt_node_end_tensors(pt_printer *p, const char *node, int n, const char *const *names,
                         const ferry_dtype *dts, const g_shape *shapes);

/* A node's metadata (JSON object): the nn_module_stack of the aten node being ended, made for
 * IR node p->ir_name (nothing when the graph declares no modules); records its modules for
 * pt_module_calls. */
void pt_module_metadata(pt_printer *p, strbuf *b);
/* Whether IR node `n` lies in an item of a ModuleList (a decoder layer). */
bool pt_module_in_layer(const pt_printer *p, const g_node *n);
/* The module call graph's entries after the root's: `, {"fqn": ..., "signature": null}` for
 * every module pt_module_metadata met. */
void pt_module_calls(const pt_printer *p, strbuf *b);

/* The sink's calls (pt2_writer.c): each aten call the emitter hands it, a JSON node. */
extern const aten_sink_ops pt_sink_ops;
/* aten's ScalarType number of a dtype (0 if it has none). */
int pt_scalar_type(ferry_dtype dt);

#endif
