/* openvino.h — the OpenVINO backend's pieces: its target (openvino_target.c: semantic ops
 * lowered to OpenVINO's operations, in the forms its CPU plugin fuses) and the IR v11 printer. Only src/backends/openvino includes this. */
#ifndef FERRY_BACKENDS_OPENVINO_H
#define FERRY_BACKENDS_OPENVINO_H

#include "ir/legalize.h"
#include "store/placement.h"

/* Const data offsets in the .bin: OpenVINO maps the file, and any alignment works; 64 keeps
 * every tensor on its own cache lines. */
#define OV_BIN_ALIGN 64
/* The stateful model's input that reorders the cache rows (beam search), as optimum-intel's */
#define OV_BEAM_IDX "beam_idx"

extern const g_target openvino_target;

typedef struct ov_options {
    bool compress_to_fp16;   /* fp32 weights stored as fp16 constants, converted on load */
    /* the model's runtime option KV_CACHE_PRECISION (the cache precision the export was
     * checked with); NULL: none */
    const char *kv_cache_precision;
    /* the model's runtime option INFERENCE_PRECISION_HINT; NULL: none */
    const char *inference_precision;
} ov_options;

/* The printer runs twice over `g` with the same calls. First with `xml_file` NULL: it only
 * adds the small constants the IR spells as inputs (reshape targets, slice bounds, axes) to `g`
 * and places every constant and weight a Const layer will read into `bin`. Then, after the
 * .bin is written, with `xml_file`: it writes `dir`/`xml_file` (created exclusively, synced),
 * each Const pointing at its placed bytes, and its CRC-32 into `*crc`. */
ferry_status ov_print_model(g_graph *g, pl_file *bin, const ov_options *opt,
                            const char *graph_name, const char *dir, const char *xml_file,
                            uint32_t *crc, fy_err *err);

#endif
