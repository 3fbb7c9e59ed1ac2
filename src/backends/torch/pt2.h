/* pt2.h — what the ExportedProgram printer (pt2_print.c) hands the archive writer
 * (pt2_archive.c): the program's JSON and the tensors its signature lifts. */
#ifndef FERRY_BACKENDS_TORCH_PT2_H
#define FERRY_BACKENDS_TORCH_PT2_H

#include "backends/backend.h"
#include "ir/ir.h"

typedef struct pt2_lifted {
    int value;               /* a weight (parameter) or constant (non-persistent buffer) */
    char *fqn;               /* its name in the module's state: "model.norm.weight" */
} pt2_lifted;

typedef struct pt2_program {
    char *json;              /* models/model.json */
    size_t json_len;
    pt2_lifted *params, *buffers;
    size_t n_params, n_buffers, cap_params, cap_buffers;
} pt2_program;

/* Prints lowered graph `g` as an ExportedProgram (torch's serialized schema 8); each node
 * records the transformers modules it came from, from the graph's module table
 * (pt2_modules.c; none where the graph declares none). The
 * program returns a dict of its outputs, or with `model_output` transformers'
 * CausalLMOutputWithPast of them. `g` gains nothing; its unknown dims must have been refined
 * (aten_refine_shapes). */
ferry_status pt2_print_program(g_graph *g, bool model_output, pt2_program *out, fy_err *err);
void pt2_program_free(pt2_program *prog);


/* Whether an input's extent has symbol `sym` in it, alone or in an expression (an input of
 * 2 * frames): the program declares its range all the same, as torch.export does for a
 * derived dim (pt2_print.c). */
bool pt2_input_has_symbol(const g_graph *g, int sym);

struct strbuf;
/* The size torch's shape environment gives dim `d` while it retraces: its traced value, each
 * symbol at least 2 where its range allows (pt2_writer.c). */
int64_t pt2_dim_hint(g_dim d, const g_symtab *syms);
/* Appends to `out` what torch.save writes for the example inputs of `g`, ((), {name: tensor}),
 * each at its hint shape (token 0, a mask of ones, positions from 0), when `g` takes the call's
 * token inputs alone (input_ids, attention_mask, position_ids: int64, rank 2) of at most 2^16
 * elements each; appends nothing otherwise (a cache input: the example would be as large as
 * the cache). */
ferry_status pt2_sample_inputs(const g_graph *g, struct strbuf *out, fy_err *err);
/* NULL when pt2_sample_inputs writes `g`'s example inputs, else why it writes none. */
const char *pt2_sample_inputs_missing(const g_graph *g);
/* `s` as a JSON string (quoted, escaped). */
void pt2_json_str(struct strbuf *b, const char *s);
/* TensorMeta (JSON) of a contiguous CPU tensor whose data starts `storage_offset` elements into
 * its storage: sizes symbolic where the shape is (s0, s1, ... by the symbol table). */
void pt2_tensor_meta(struct strbuf *b, ferry_dtype dt, const g_shape *s, const g_symtab *syms,
                     int64_t storage_offset);

#endif
