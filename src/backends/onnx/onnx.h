/* onnx.h — the ONNX backend's pieces: the onnx-standard target (which ops print as is, and its
 * own lowering of linear), and the ModelProto printer. Only src/backends/onnx includes this. */
#ifndef FERRY_BACKENDS_ONNX_H
#define FERRY_BACKENDS_ONNX_H

#include "ir/legalize.h"
#include "store/placement.h"

#define ONNX_DEFAULT_OPSET 21
#define ONNX_MIN_OPSET 17
#define ONNX_MAX_OPSET 23
#define ONNX_DATA_ALIGN 4096
#define ONNX_DATA_FILE "model.onnx.data"
/* Constants at least this large (a fused graph's rotary tables) go to the shared data file,
 * once for every component, instead of inside each .onnx */
#define ONNX_EXTERNAL_CONST_BYTES ((uint64_t)64 << 10)

/* The execution provider a graph's onnxruntime fusions are for (the option ort_fusions, in
 * the order of its choices): NONE keeps the graph standard ONNX; the others use onnxruntime's
 * contrib ops (com.microsoft) that provider runs fastest, and such a graph runs only on
 * onnxruntime. */
typedef enum ort_fusions {
    ORT_NONE = 0, ORT_CPU, ORT_CUDA, ORT_WEBGPU, ORT_DML
} ort_fusions;

/* The export's ONNX options (the table in onnx_backend.c), as the lowerings and the writer read
 * them. */
int onnx_opset(const ferry_export_config *cfg);
ort_fusions onnx_fusions(const ferry_export_config *cfg);
/* "none", "cpu", ...: the provider as the option and onnxruntime-genai name it. */
const char *onnx_fusions_name(ort_fusions fusions);

/* Standard ONNX ops only: every semantic op lowered (onnx_target.c). */
extern const g_target onnx_standard_target;
/* onnxruntime's CPU provider: its fused contrib ops where it has them (ort_target.c). */
extern const g_target ort_cpu_target;
/* ... its CUDA provider (q/k norms inside GroupQueryAttention; MultiHeadAttention for a prefill
 * and without a cache), its WebGPU provider (RotaryEmbedding separate, MultiHeadAttention without
 * a cache) and DirectML (MultiHeadAttention everywhere, RotaryEmbedding separate). */
extern const g_target ort_cuda_target;
extern const g_target ort_webgpu_target;
extern const g_target ort_dml_target;
/* onnx-standard's legality (semantic ops lowered; primitives and extern nodes printed) and its
 * lowering of linear (float weights; quantized ones through DequantizeLinear), which the ORT
 * targets share. */
g_legality onnx_legal(const g_target *t, const g_graph *g, const g_node *n);
ferry_status onnx_lower_linear(g_lower_ctx *c, const g_node *n, int *outs);
ferry_status onnx_lower_layer_norm(g_lower_ctx *c, const g_node *n, int *outs);
/* moe, its quantized experts dequantized, over the generic lowering */
ferry_status onnx_lower_moe(g_lower_ctx *c, const g_node *n, int *outs);
/* moe running each expert over the tokens that chose it (onnx_moe.c); the generic lowering
 * where the stacks are not one checkpoint tensor per expert */
ferry_status onnx_sparse_moe(g_lower_ctx *c, const g_node *n, int *outs);
/* The lowering of a primitive the ONNX targets take only at fp32 (onnx_legal says which). */
g_lower_fn onnx_primitive_lowering(g_op op);

/* Writes `dir`/`file`, a ModelProto of `g` (every node native for onnx_standard_target) whose
 * weights point into `data` (every live weight placed). Created exclusively, synced; its
 * CRC-32 in `*crc`. */
ferry_status onnx_write_model(const g_graph *g, const pl_file *data, int opset,
                              const char *graph_name, const char *dir, const char *file,
                              uint32_t *crc, fy_err *err);

/* The ONNX IR version that goes with an opset (the one onnx.helper would pick). */
int onnx_ir_version(int opset);
/* The ONNX op type of an IR primitive (NULL: not printable, lowered before printing). */
const char *onnx_op(g_op op);
/* The TensorProto data type of a dtype (0: none). */
int onnx_dtype(ferry_dtype dt);

#endif
