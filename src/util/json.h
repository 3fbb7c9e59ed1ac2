/* json.h — typed reads from cJSON objects whose failures name the file and the key. */
#ifndef FERRY_UTIL_JSON_H
#define FERRY_UTIL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "util/err.h"

/* Reads a whole small file (at most `max_bytes`) into a NUL-terminated buffer. */
ferry_status json_read_file(const char *path, size_t max_bytes, char **text, size_t *len,
                            fy_err *err);
/* Parses JSON text; the error names `origin` and the byte offset. */
ferry_status json_parse(const char *text, size_t len, const char *origin, cJSON **out, fy_err *err);
/* Loads and parses a file. */
ferry_status json_load_file(const char *path, size_t max_bytes, cJSON **out, fy_err *err);

/* Each getter: key absent or JSON null -> *out = dflt and FERRY_OK (if `required`, an error);
 * wrong type or out of [min, max] -> FERRY_ERR_FORMAT naming origin and key. Integers must be
 * integral and exactly representable (|x| < 2^53). */
ferry_status json_get_int(const cJSON *obj, const char *key, bool required, int64_t dflt,
                          int64_t min, int64_t max, const char *origin, int64_t *out, fy_err *err);
ferry_status json_get_double(const cJSON *obj, const char *key, bool required, double dflt,
                             double min, double max, const char *origin, double *out, fy_err *err);
ferry_status json_get_bool(const cJSON *obj, const char *key, bool required, bool dflt,
                           const char *origin, bool *out, fy_err *err);
/* Copies a string value into buf (error if it does not fit). */
ferry_status json_get_string(const cJSON *obj, const char *key, bool required, const char *dflt,
                             const char *origin, char *buf, size_t buf_size, fy_err *err);
/* Looks up `key` (case-sensitively). Absent or null -> *out = NULL and FERRY_OK (if `required`,
 * an error). A key that appears more than once is an error: cJSON keeps every copy and returns
 * the first, Python's json (transformers' reader) keeps the last. */
ferry_status json_get_member(const cJSON *obj, const char *key, bool required, const char *origin,
                             const cJSON **out, fy_err *err);
/* Converts a number node to a uint64 exactly: integral, 0 <= x < 2^53. */
bool json_number_to_u64(const cJSON *node, uint64_t *out);

#endif
