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

/* Writes `dir`/`file` (the model) and `dir`/`data_file` (the weights); `g` must hold primitive
 * ops only. Files are created exclusively: an existing file is an error. */
ferry_status onnx_write(const g_graph *g, const onnx_options *opt, const char *dir,
                        const char *file, const char *data_file, fy_err *err);

/* The ONNX IR version that goes with an opset (the one onnx.helper would pick). */
int onnx_ir_version(int opset);

#endif
