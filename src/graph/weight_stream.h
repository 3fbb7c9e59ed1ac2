/* weight_stream.h — materialising lazy weights into a backend's data file, a block at a time:
 * dtype conversion and 2-D transpose on the way, mapped checkpoint pages released behind, so
 * peak memory is a few blocks, not the model. */
#ifndef FERRY_GRAPH_WEIGHT_STREAM_H
#define FERRY_GRAPH_WEIGHT_STREAM_H

#include <stdint.h>

#include "graph/graph.h"

typedef struct ws_progress {
    ferry_progress_fn fn;    /* may be NULL */
    void *user;
    uint64_t done, total;    /* bytes */
} ws_progress;

/* Bytes `w` occupies once written. */
uint64_t ws_nbytes(const g_weight *w);

/* Writes `w` at byte `offset` of `fd` (the file `path`, named in errors). A full disk or a
 * file-size limit gives FERRY_ERR_NOSPACE naming the path. */
ferry_status ws_write(int fd, const char *path, uint64_t offset, const g_weight *w,
                      ws_progress *progress, fy_err *err);

/* pwrite of the whole buffer, retrying short writes; errors as above. */
ferry_status ws_pwrite_all(int fd, const char *path, const void *data, size_t n, uint64_t offset,
                           fy_err *err);

#endif
