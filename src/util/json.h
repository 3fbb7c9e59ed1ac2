/* json.h — typed reads from cJSON objects whose failures name the file and the key. */
#ifndef FERRY_UTIL_JSON_H
#define FERRY_UTIL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "util/err.h"

/* What one kind of JSON file may hold. cJSON builds a node of 64 bytes (80 with malloc's
 * overhead) for every value and a copy of every key and string, so a file of tiny values
 * ("[0,0,0,...]") grows about 40 times when parsed: the byte cap alone does not bound memory.
 * json_parse counts values and nesting in one linear pass first and refuses a file over these
 * caps before cJSON allocates anything; a parse then needs at most
 * max_values * 144 bytes + the text's size (two 32-byte strings per value at worst). */
typedef struct json_limits {
    const char *kind;       /* "config file", named in messages: "... limit for a config file" */
    size_t max_bytes;
    size_t max_values;      /* scalars, arrays and objects, at every depth */
    unsigned max_depth;     /* nested arrays and objects; at most cJSON's own limit (1000) */
    bool utf8;              /* refuse text that is not UTF-8, naming the byte */
} json_limits;

/* Reads a whole small file (at most `max_bytes`) into a NUL-terminated buffer. */
ferry_status json_read_file(const char *path, size_t max_bytes, char **text, size_t *len,
                            fy_err *err);
/* Parses JSON text within `limits`; errors name `origin` and the byte offset. Refused besides
 * malformed JSON and the caps: a NUL, raw or escaped (\u0000), or any other raw control byte
 * inside a string (cJSON would cut the string at the NUL and take the others, where other
 * readers refuse the file or see a different string), a control byte outside strings other
 * than JSON's four whitespace bytes (cJSON skips them all as whitespace), and data after the
 * value. */
ferry_status json_parse(const char *text, size_t len, const char *origin,
                        const json_limits *limits, cJSON **out, fy_err *err);
/* json_parse for text that starts at byte `base` of the file `origin` names (a safetensors
 * header starts at byte 8): offsets in messages are the file's. */
ferry_status json_parse_at(const char *text, size_t len, size_t base, const char *origin,
                           const json_limits *limits, cJSON **out, fy_err *err);
/* Loads and parses a file within `limits`. */
ferry_status json_load_file(const char *path, const json_limits *limits, cJSON **out,
                            fy_err *err);

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
