/* json.c — reading small JSON files and typed, range-checked getters over cJSON. */
#include "util/json.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/text.h"

/* cJSON parses numbers into doubles, where 2^53 + 1 already reads as 2^53: only magnitudes
 * below 2^53 are known to be the integer the file wrote. */
#define JSON_INT_LIMIT 9007199254740992.0

ferry_status json_read_file(const char *path, size_t max_bytes, char **text, size_t *len,
                            fy_err *err)
{
    ferry_status status = FERRY_OK;
    char *buf = NULL;
    struct stat st;
    size_t size = 0, got = 0;

    *text = NULL;
    if (len)
        *len = 0;
    /* O_NONBLOCK so that a FIFO fails the S_ISREG check instead of hanging in open. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        status = fy_fail(err, FERRY_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto cleanup;
    }
    if (fstat(fd, &st) != 0) {
        status = fy_fail(err, FERRY_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto cleanup;
    }
    if (!S_ISREG(st.st_mode)) {
        status = fy_fail(err, FERRY_ERR_IO, "%s: not a regular file", path);
        goto cleanup;
    }
    if ((uint64_t)st.st_size > max_bytes) {
        status = fy_fail(err, FERRY_ERR_FORMAT, "%s: %lld bytes exceed the limit of %zu for "
                         "this kind of file", path, (long long)st.st_size, max_bytes);
        goto cleanup;
    }
    size = (size_t)st.st_size;
    buf = malloc(size + 1);
    if (!buf) {
        status = fy_fail(err, FERRY_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, size);
        goto cleanup;
    }
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            status = fy_fail(err, FERRY_ERR_IO, "%s: read failed: %s", path, strerror(errno));
            goto cleanup;
        }
        if (n == 0) /* the file shrank while we read it */
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    *text = buf;
    buf = NULL;
    if (len)
        *len = got;

cleanup:
    free(buf);
    if (fd >= 0)
        close(fd);
    return status;
}

static bool is_json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* One linear pass over the text, before cJSON sees it: the bytes cJSON would take but other
 * readers refuse or read differently, and the number of values and depth of nesting that the
 * parse would build. Values are counted as cJSON allocates them: the root, plus one per comma
 * and one for the first element of each non-empty array or object (exact for valid JSON, and
 * never below what cJSON allocates before it finds an error). */
static ferry_status prescan(const char *text, size_t len, size_t base, const char *origin,
                            const json_limits *lim, fy_err *err)
{
    bool in_string = false, opened = false;
    size_t values = 1;
    unsigned depth = 0;

    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (in_string) {
            if (c == '"') {
                in_string = false;
            } else if (c < 0x20) {
                return fy_fail(err, FERRY_ERR_FORMAT, "%s: raw control byte 0x%02x in a string "
                               "at byte %zu (JSON needs it escaped)", origin, c, base + i);
            } else if (c == '\\' && i + 1 < len) {
                if (text[i + 1] == 'u' && i + 5 < len && memcmp(text + i + 2, "0000", 4) == 0)
                    return fy_fail(err, FERRY_ERR_FORMAT, "%s: escaped NUL (\\u0000) in a string "
                                   "at byte %zu (it would cut the string short)", origin,
                                   base + i);
                i++; /* the escaped character cannot end the string */
            }
            continue;
        }
        if (is_json_space((char)c))
            continue;
        if (c < 0x20 || c == 0x7F)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: control byte 0x%02x at byte %zu is not "
                           "JSON", origin, c, base + i);
        if (opened && c != ']' && c != '}')
            values++;
        opened = false;
        switch (c) {
        case '"':
            in_string = true;
            break;
        case '[':
        case '{':
            if (++depth > lim->max_depth)
                return fy_fail(err, FERRY_ERR_FORMAT, "%s: nesting deeper than %u levels (at "
                               "byte %zu) exceeds the limit for a %s", origin, lim->max_depth,
                               base + i, lim->kind);
            opened = true;
            break;
        case ']':
        case '}':
            if (depth > 0)
                depth--;
            break;
        case ',':
            values++;
            break;
        default:
            break;
        }
    }
    /* Counted to the end (one cheap pass), so that the message says how far over it is. */
    if (values > lim->max_values)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: %zu JSON values exceed the limit of %zu for "
                       "a %s", origin, values, lim->max_values, lim->kind);
    if (lim->utf8) {
        size_t bad = text_utf8_invalid_at((const unsigned char *)text, len);
        if (bad < len)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: not valid UTF-8 at byte %zu", origin,
                           base + bad);
    }
    return FERRY_OK;
}

ferry_status json_parse_at(const char *text, size_t len, size_t base, const char *origin,
                           const json_limits *limits, cJSON **out, fy_err *err)
{
    const char *end = NULL;
    ferry_status status;

    *out = NULL;
    if (len == 0)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: empty, expected JSON", origin);
    if (len > limits->max_bytes)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: %zu bytes exceed the limit of %zu for a %s",
                       origin, len, limits->max_bytes, limits->kind);
    if ((status = prescan(text, len, base, origin, limits, err)) != FERRY_OK)
        return status;
    /* cJSON says only "failed" when an allocation fails, as for malformed text; malloc's
     * ENOMEM tells the two apart (errno is per thread). */
    errno = 0;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        if (errno == ENOMEM)
            return fy_fail(err, FERRY_ERR_NOMEM, "%s: out of memory parsing %zu bytes of JSON "
                           "(a memory limit is lower than this file needs)", origin, len);
        size_t offset = end && end >= text ? (size_t)(end - text) : 0;
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: invalid JSON near byte %zu", origin,
                       base + offset);
    }
    /* cJSON stops after the first value; anything but whitespace after it is malformed. */
    size_t offset = (size_t)(end - text);
    while (offset < len && is_json_space(text[offset]))
        offset++;
    if (offset < len) {
        cJSON_Delete(root);
        return fy_fail(err, FERRY_ERR_FORMAT,
                       "%s: unexpected data after the JSON value at byte %zu", origin,
                       base + offset);
    }
    *out = root;
    return FERRY_OK;
}

ferry_status json_parse(const char *text, size_t len, const char *origin,
                        const json_limits *limits, cJSON **out, fy_err *err)
{
    return json_parse_at(text, len, 0, origin, limits, out, err);
}

ferry_status json_load_file(const char *path, const json_limits *limits, cJSON **out,
                            fy_err *err)
{
    char *text = NULL;
    size_t len = 0;

    *out = NULL;
    ferry_status status = json_read_file(path, limits->max_bytes, &text, &len, err);
    if (status == FERRY_OK)
        status = json_parse(text, len, path, limits, out, err);
    free(text);
    return status;
}

static const char *type_name(const cJSON *node)
{
    if (cJSON_IsNumber(node)) return "a number";
    if (cJSON_IsString(node)) return "a string";
    if (cJSON_IsBool(node)) return "a boolean";
    if (cJSON_IsArray(node)) return "an array";
    if (cJSON_IsObject(node)) return "an object";
    if (cJSON_IsNull(node)) return "null";
    return "an invalid value";
}

/* Refusing repeated keys avoids reading a value other than the one transformers reads. */
ferry_status json_get_member(const cJSON *obj, const char *key, bool required,
                                const char *origin, const cJSON **node, fy_err *err)
{
    const cJSON *found = NULL;
    const cJSON *child;

    *node = NULL;
    if (cJSON_IsObject(obj)) {
        cJSON_ArrayForEach(child, obj) {
            if (child->string && strcmp(child->string, key) == 0) {
                if (found)
                    return fy_fail(err, FERRY_ERR_FORMAT, "%s: key '%s' appears more than once",
                                   origin, key);
                found = child;
            }
        }
    }
    if (found && cJSON_IsNull(found))
        found = NULL;
    if (!found && required)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key '%s' is missing", origin, key);
    *node = found;
    return FERRY_OK;
}

bool json_number_to_u64(const cJSON *node, uint64_t *out)
{
    if (!cJSON_IsNumber(node))
        return false;
    double v = node->valuedouble;
    if (!isfinite(v) || v < 0 || v >= JSON_INT_LIMIT || floor(v) != v)
        return false;
    *out = (uint64_t)v;
    return true;
}

ferry_status json_get_int(const cJSON *obj, const char *key, bool required, int64_t dflt,
                          int64_t min, int64_t max, const char *origin, int64_t *out, fy_err *err)
{
    const cJSON *node;
    ferry_status status = json_get_member(obj, key, required, origin, &node, err);
    if (status != FERRY_OK)
        return status;
    if (!node) {
        *out = dflt;
        return FERRY_OK;
    }
    if (!cJSON_IsNumber(node))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key '%s' must be an integer (got %s)", origin,
                       key, type_name(node));
    double v = node->valuedouble;
    if (!isfinite(v) || floor(v) != v)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key '%s' must be an integer (got %.17g)",
                       origin, key, v);
    if (fabs(v) >= JSON_INT_LIMIT) { /* an integer all the same: say the range,
                                      * as far as a double holds integers exactly */
        int64_t exact = (int64_t)JSON_INT_LIMIT - 1;
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key '%s' must be an integer in [%lld, %lld] "
                       "(got %.17g)", origin, key, (long long)(min > -exact ? min : -exact),
                       (long long)(max < exact ? max : exact), v);
    }
    int64_t value = (int64_t)v;
    if (value < min || value > max)
        return fy_fail(err, FERRY_ERR_FORMAT,
                       "%s: key '%s' must be an integer in [%lld, %lld] (got %lld)", origin, key,
                       (long long)min, (long long)max, (long long)value);
    *out = value;
    return FERRY_OK;
}

ferry_status json_get_double(const cJSON *obj, const char *key, bool required, double dflt,
                             double min, double max, const char *origin, double *out, fy_err *err)
{
    const cJSON *node;
    ferry_status status = json_get_member(obj, key, required, origin, &node, err);
    if (status != FERRY_OK)
        return status;
    if (!node) {
        *out = dflt;
        return FERRY_OK;
    }
    if (!cJSON_IsNumber(node))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key '%s' must be a number (got %s)", origin,
                       key, type_name(node));
    double v = node->valuedouble;
    /* cJSON turns an out-of-range literal such as 1e999 into infinity. */
    if (!isfinite(v) || v < min || v > max)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key '%s' must be a number in [%g, %g] (got %g)",
                       origin, key, min, max, v);
    *out = v;
    return FERRY_OK;
}

ferry_status json_get_bool(const cJSON *obj, const char *key, bool required, bool dflt,
                           const char *origin, bool *out, fy_err *err)
{
    const cJSON *node;
    ferry_status status = json_get_member(obj, key, required, origin, &node, err);
    if (status != FERRY_OK)
        return status;
    if (!node) {
        *out = dflt;
        return FERRY_OK;
    }
    if (!cJSON_IsBool(node))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: key '%s' must be true or false (got %s)",
                       origin, key, type_name(node));
    *out = cJSON_IsTrue(node);
    return FERRY_OK;
}

ferry_status json_get_string(const cJSON *obj, const char *key, bool required, const char *dflt,
                             const char *origin, char *buf, size_t buf_size, fy_err *err)
{
    const cJSON *node;
    if (buf_size == 0)
        return fy_fail(err, FERRY_ERR_INTERNAL, "%s: no room for key '%s'", origin, key);
    ferry_status status = json_get_member(obj, key, required, origin, &node, err);
    if (status != FERRY_OK)
        return status;
    const char *value = dflt ? dflt : "";
    if (node) {
        if (!cJSON_IsString(node) || !node->valuestring)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: key '%s' must be a string (got %s)",
                           origin, key, type_name(node));
        value = node->valuestring;
    }
    size_t n = strlen(value);
    if (n >= buf_size)
        return fy_fail(err, FERRY_ERR_FORMAT,
                       "%s: key '%s' is too long (%zu bytes, at most %zu)", origin, key, n,
                       buf_size - 1);
    memcpy(buf, value, n + 1);
    return FERRY_OK;
}
