/* weight_stream.h — materialising lazy weights into a backend's data file, a block at a time:
 * dtype conversion and 2-D transpose on the calling thread, writes on a background thread (so
 * conversion and I/O overlap), mapped checkpoint pages released behind, so peak memory is a few
 * blocks, not the model. */
#ifndef FERRY_GRAPH_WEIGHT_STREAM_H
#define FERRY_GRAPH_WEIGHT_STREAM_H

#include <stdint.h>

#include "graph/graph.h"

typedef struct ws_progress {
    ferry_progress_fn fn;    /* may be NULL */
    void *user;
    uint64_t done, total;    /* bytes */
} ws_progress;

typedef struct ws_writer ws_writer;

/* Bytes `w` occupies once written. */
uint64_t ws_nbytes(const g_weight *w);

/* A writer appending to `fd` (the file `path`, named in errors). Progress is reported from the
 * calling thread. */
ferry_status ws_writer_open(int fd, const char *path, ws_progress *progress, ws_writer **out,
                            fy_err *err);
/* Queues `w` to be written at byte `offset`. May return an error from an earlier write. */
ferry_status ws_writer_put(ws_writer *wr, const g_weight *w, uint64_t offset, fy_err *err);
/* Waits for every queued write, frees the writer, and returns the first error. */
ferry_status ws_writer_close(ws_writer *wr, fy_err *err);

/* pwrite of the whole buffer, retrying short writes. A full disk or a file-size limit gives
 * FERRY_ERR_NOSPACE naming the path. */
ferry_status ws_pwrite_all(int fd, const char *path, const void *data, size_t n, uint64_t offset,
                           fy_err *err);

#endif
