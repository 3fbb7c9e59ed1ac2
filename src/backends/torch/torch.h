/* torch.h — the .pt2 backend's pieces: its target (torch_target.c: what stays an aten op, and
 * attention as aten's SDPA), the symbolic integers of its graphs (pt2_symbolic.c: shape
 * arithmetic as SymInts), the ExportedProgram printer (pt2_print.c over pt2_nodes.c) and the
 * archive (pt2_archive.c). Only src/backends/torch includes this. */
#ifndef FERRY_BACKENDS_TORCH_H
#define FERRY_BACKENDS_TORCH_H

#include "backends/backend.h"
#include "ir/legalize.h"
#include "store/placement.h"

/* the extern node the target makes for attention, printed as aten's SDPA */
#define PT_ATEN "aten"
#define PT_SDPA "scaled_dot_product_attention"
/* ... and for a static cache's write into the caller's tensor */
#define PT_INDEX_COPY "index_copy_"

extern const g_target torch_target;

/* ---- symbolic integers (pt2_symbolic.c) ----
 * aten's view, expand and arange take SymInts where ONNX takes int64 tensors: the IR's shape
 * arithmetic (shape_of, and gathers, slices, sums and products of it) is followed here to the
 * dims it stands for, so the printer spells it as sym_size nodes and SymInt expressions. */
typedef struct pt_ints {
    bool known;              /* every element is a known dim */
    bool scalar;             /* rank 0 */
    int n;
    g_dim d[G_MAX_RANK];
} pt_ints;

/* The integers of every value of `g` that are known (malloc'd, one per value; NULL when out of
 * memory): small int64/int32 constants and what the live nodes compute from them and shapes. */
pt_ints *pt_track(const g_graph *g);
/* Gives every dim the IR left unknown (an arange's length, what it broadcasts into) its
 * expression, and names the value whose extent stays unknown: the torch target writes every
 * tensor's size. */
ferry_status pt_refine_shapes(g_graph *g, fy_err *err);
/* For range(start, start + n, 1) with n known and start data (a cache position): the value
 * n; else G_NONE. torch spells it arange(n) + start. */
int pt_range_offset_length(const g_graph *g, const g_node *range, const pt_ints *ints);
/* "2*s0 + s1 - 1": a dim as the sympy expression torch's serializer reads (symbol k is s<k>). */
int pt_dim_expr(g_dim d, char *buf, size_t size);

/* ---- the archive (pt2_archive.c over pt2_print.c) ---- */

/* Writes component `c` as the .pt2 archive `dir`/`c->file` (created exclusively, synced): the
 * ExportedProgram (returning CausalLMOutputWithPast with `model_output`, else a dict), its
 * weights streamed into one blob per dtype, its constants; the archive's CRC-32 in `*crc`. */
ferry_status pt2_write_archive(const be_component *c, bool model_output, const char *dir,
                               ws_progress *progress, uint32_t *crc, fy_err *err);

#endif
