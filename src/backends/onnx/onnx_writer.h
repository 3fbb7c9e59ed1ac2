/* onnx_writer.h — prints a primitive-only IR graph as an ONNX ModelProto (standard ops, default
 * domain) with weights in an external data file at 4096-aligned offsets. */
#ifndef FERRY_ONNX_WRITER_H
#define FERRY_ONNX_WRITER_H

#include "graph/graph.h"
#include "graph/weight_stream.h"

#define ONNX_DEFAULT_OPSET 21
#define ONNX_MIN_OPSET 17
#define ONNX_MAX_OPSET 23
#define ONNX_DATA_ALIGN 4096

typedef struct onnx_options {
    int opset;
    const char *graph_name;
    ws_progress *progress;       /* may be NULL */
} onnx_options;

/* Decomposes `g`'s semantic ops for ONNX (standard ops only) and checks the result. */
g_graph *onnx_lower(const g_graph *g, fy_err *err);

/* The external-data file shared by the components of one export: each distinct weight (same
 * checkpoint tensor, dtype and layout) is stored once, whatever number of graphs use it. */
typedef struct onnx_data onnx_data;

onnx_data *onnx_data_new(const char *file_name);
void onnx_data_free(onnx_data *d);
/* Assigns 4096-aligned offsets to the live weights of `g` not placed yet (no I/O). */
ferry_status onnx_data_add(onnx_data *d, const g_graph *g, fy_err *err);
/* Creates `dir`/<file_name> exclusively and streams every placed weight into it, synced. */
ferry_status onnx_data_write(onnx_data *d, const char *dir, ws_progress *progress, fy_err *err);

/* Writes `dir`/`file`, a ModelProto whose weights point into `data` (every live weight of `g`
 * must have been added); `g` must hold primitive ops only. Created exclusively, synced. */
ferry_status onnx_write_model(const g_graph *g, const onnx_data *data, const onnx_options *opt,
                              const char *dir, const char *file, fy_err *err);

/* The ONNX IR version that goes with an opset (the one onnx.helper would pick). */
int onnx_ir_version(int opset);

#endif
