/* torch.h — the .pt2 backend's pieces: its target (torch_target.c: what stays an aten op, and
 * attention as aten's SDPA), the ExportedProgram printer (pt2_print.c, a sink of the aten
 * emitter: src/backends/aten) and the archive (pt2_archive.c). Only src/backends/torch
 * includes this. */
#ifndef FERRY_BACKENDS_TORCH_H
#define FERRY_BACKENDS_TORCH_H

#include "backends/aten/aten.h"
#include "backends/backend.h"
#include "ir/legalize.h"
#include "store/placement.h"

extern const g_target torch_target;

/* ---- the archive (pt2_archive.c over pt2_print.c) ---- */

/* Writes component `c` as the .pt2 archive `dir`/`c->file` (created exclusively, synced): the
 * ExportedProgram (returning CausalLMOutputWithPast with `model_output`, else a dict), its
 * weights streamed into one blob per dtype, its constants; the archive's CRC-32 in `*crc`. */
ferry_status pt2_write_archive(const be_component *c, bool model_output, const char *dir,
                               ws_progress *progress, uint32_t *crc, fy_err *err);

#endif
