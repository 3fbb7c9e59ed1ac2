/* transformers.h — interop with transformers' exporters (transformers/exporters/base.py and
 * metadata.py, 5.x): its export.json keys in ferry's, and its export.json read by ferry. */
#ifndef FERRY_EXPORT_TRANSFORMERS_H
#define FERRY_EXPORT_TRANSFORMERS_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "util/err.h"

struct ferry_exported;

/* How transformers names a format's files: component `name` is saved as
 * <prefix><name><suffix>, and its loader also fetches the sidecar that program_files() derives
 * from the file (`strip` removed, `add` appended; none where `add` is NULL). */
typedef struct tf_format {
    const char *name, *prefix, *suffix, *strip, *add;
} tf_format;

/* The format transformers registers under `name` ("onnx", "openvino", "dynamo",
 * "executorch"), or NULL. */
const tf_format *tf_format_find(const char *name);
/* "onnx, openvino, dynamo, executorch" */
const char *tf_format_names(void);
/* The sidecar transformers' loader reads next to `file` into `out`; false if the format has none
 * or `file` does not end as the format's files do. */
bool tf_sidecar(const tf_format *f, const char *file, char *out, size_t size);

/* An export.json in transformers' schema: "export_format" and no ferry "format". */
bool tf_is_transformers_manifest(const cJSON *m);

/* The format transformers knows export `e` by ("dynamo" for ferry's pt2), or NULL. */
const tf_format *tf_format_of(const struct ferry_exported *e);
/* NULL when transformers' ExportedModel.from_pretrained loads export `e` and its runners call
 * each component as they would its own; else why not, for export.json's "transformers" key. */
const char *tf_unsupported(const struct ferry_exported *e);
/* Adds to component `i`'s metadata what transformers' ExportMetadata holds beyond ferry's keys:
 * export_dtype, export_device, packages, kwargs, in_spec, out_spec, in_constants,
 * out_constants. Only for an export tf_unsupported accepts. NULL-safe on `md`; fails only for
 * memory. */
ferry_status tf_describe_component(const struct ferry_exported *e, int i, cJSON *md,
                                   fy_err *err);

/* Checks the ExportMetadata keys present in a component's `md` (either schema): types, and every
 * size (shapes, ranks, spec texts, constant indices) before anything uses them. Errors name
 * `dir`/export.json, the component and the key. */
ferry_status tf_check_metadata(const cJSON *md, const char *dir, const char *comp, fy_err *err);

/* Loads an export.json in transformers' schema into `e` (its components, files and sidecars,
 * each confined to `dir`): the twin of manifest_validate. */
ferry_status tf_manifest_validate(const cJSON *m, const char *dir, struct ferry_exported *e,
                                  fy_err *err);

#endif
