/* placement.h — where weights go inside one data file: each distinct (recipe, part) is stored
 * once at an aligned offset, however many graphs or nodes read it. A backend owns its policy
 * (file name, alignment, how many files) and asks here for offsets, then writes the file. */
#ifndef FERRY_STORE_PLACEMENT_H
#define FERRY_STORE_PLACEMENT_H

#include "ir/ir.h"
#include "store/stream.h"

typedef struct pl_file pl_file;

pl_file *pl_new(const char *file_name, uint64_t align);
void pl_free(pl_file *f);
const char *pl_name(const pl_file *f);

/* Places `part` of recipe `w` (no I/O) if not placed yet; returns its offset and length. */
ferry_status pl_place(pl_file *f, const g_weight *w, w_part part, uint64_t *offset,
                      uint64_t *length, fy_err *err);
/* Places every part of every live weight of `g`, and every live constant of at least
 * `const_min` bytes (0: none), each distinct one once (the graph must outlive the write: the
 * file reads the constant's data from it). */
ferry_status pl_place_graph(pl_file *f, const g_graph *g, uint64_t const_min, fy_err *err);
/* Places constant `x` (its data, length and hash) if no equal one is placed yet. */
ferry_status pl_place_const(pl_file *f, const g_value *x, fy_err *err);
/* The offset of the placed constant equal to `x`; false if none. */
bool pl_find_const(const pl_file *f, const g_value *x, uint64_t *offset);
/* Offset and length of a placed part; false if it was not placed. */
bool pl_find(const pl_file *f, const g_weight *w, w_part part, uint64_t *offset,
             uint64_t *length);
/* Bytes the placed parts span (the file's size once written). */
uint64_t pl_size(const pl_file *f);
/* Streams every placed part into `fd` (the file `path`, named in errors), `base` bytes on from
 * its placed offset: the file's parts inside a larger one (a zip entry's data, whose writer
 * `observer` may be told what was written). */
ferry_status pl_write_fd(pl_file *f, int fd, const char *path, uint64_t base,
                         ws_progress *progress, const ws_observer *observer, fy_err *err);
/* Creates `dir`/<file_name> exclusively, streams every placed part into it, sets its size and
 * syncs it; `*crc` (if `crc`) is the CRC-32 of what it holds, taken as the parts went out. */
ferry_status pl_write(pl_file *f, const char *dir, ws_progress *progress, uint32_t *crc,
                      fy_err *err);

#endif
