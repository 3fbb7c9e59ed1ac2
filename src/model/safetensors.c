/* safetensors.c — opening a .safetensors file: the header is distrusted and checked field by
 * field before anything it claims is used; tensor bytes are read on demand with pread. */
#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/dtype.h"
#include "util/json.h"
#include "util/text.h"

#define METADATA_KEY "__metadata__"

/* A tensor entry is about 8 JSON values: the entry, its dtype, its shape with 1 to 3 extents (up
 * to 8), data_offsets and its two numbers. The largest checkpoints published hold ~1.4e5
 * tensors in all (Kimi K2 and DeepSeek-V3 with their fp8 scales), spread over dozens of
 * shards; a GPTQ-style copy of such a model in a single file (four tensors per linear) would
 * hold ~3e5. 5e6 values leave room for ~5e5 tensors in one header and bound what cJSON builds
 * at ~0.8 GB (json.h), where a 100 MB header of tiny values would otherwise take 4 GB. The
 * format needs three levels of nesting. UTF-8 is checked after the parse, once the tensor
 * whose name is at fault can be named. */
static const json_limits HEADER_LIMITS = {
    .kind = "safetensors header", .max_bytes = ST_MAX_HEADER_BYTES, .max_values = 5000000,
    .max_depth = 32, .utf8 = false,
};

static uint64_t read_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static ferry_status parse_shape(const st_file *f, const char *qname, const cJSON *shape,
                                st_tensor *t, fy_err *err)
{
    const cJSON *dim;
    int ndim = 0;

    if (!cJSON_IsArray(shape))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: tensor '%s': 'shape' must be an array",
                       f->path, qname);
    t->numel = 1;
    cJSON_ArrayForEach(dim, shape) {
        uint64_t extent;
        if (ndim == ST_MAX_DIMS)
            return fy_fail(err, FERRY_ERR_UNSUPPORTED,
                           "%s: tensor '%s' has more than %d dimensions", f->path, qname,
                           ST_MAX_DIMS);
        if (!json_number_to_u64(dim, &extent))
            return fy_fail(err, FERRY_ERR_FORMAT,
                           "%s: tensor '%s': shape entry %d is not a non-negative integer",
                           f->path, qname, ndim);
        if (__builtin_mul_overflow(t->numel, extent, &t->numel))
            return fy_fail(err, FERRY_ERR_FORMAT,
                           "%s: tensor '%s': the product of its shape overflows", f->path, qname);
        t->shape[ndim++] = (int64_t)extent;
    }
    t->ndim = ndim;
    return FERRY_OK;
}

static ferry_status parse_offsets(const st_file *f, const char *qname, const cJSON *offsets,
                                  st_tensor *t, fy_err *err)
{
    uint64_t data_size = f->file_size - f->data_start;
    uint64_t nbytes;

    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        !json_number_to_u64(offsets->child, &t->begin) ||
        !json_number_to_u64(offsets->child->next, &t->end))
        return fy_fail(err, FERRY_ERR_FORMAT,
                       "%s: tensor '%s': 'data_offsets' must be two non-negative integers",
                       f->path, qname);
    if (t->begin > t->end)
        return fy_fail(err, FERRY_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin",
                       f->path, qname, (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end > data_size)
        return fy_fail(err, FERRY_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets [%llu, %llu] are outside the data area "
                       "(%llu bytes)", f->path, qname, (unsigned long long)t->begin,
                       (unsigned long long)t->end, (unsigned long long)data_size);
    if (__builtin_mul_overflow(t->numel, (uint64_t)dt_size(t->dtype), &nbytes))
        return fy_fail(err, FERRY_ERR_FORMAT,
                       "%s: tensor '%s': %llu elements of %s overflow a 64-bit byte count",
                       f->path, qname, (unsigned long long)t->numel, dt_st_name(t->dtype));
    if (t->end - t->begin != nbytes)
        return fy_fail(err, FERRY_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets span %llu bytes but %llu elements of %s "
                       "need %llu", f->path, qname, (unsigned long long)(t->end - t->begin),
                       (unsigned long long)t->numel, dt_st_name(t->dtype),
                       (unsigned long long)nbytes);
    return FERRY_OK;
}

static ferry_status parse_entry(const st_file *f, const cJSON *entry, st_tensor *t, fy_err *err)
{
    char qname[TEXT_QUOTE_MAX];
    char origin[sizeof ((fy_err *)0)->msg + TEXT_QUOTE_MAX]; /* path and name, uncut */
    char dtype_name[64], qdtype[TEXT_QUOTE_MAX];
    const cJSON *shape, *offsets;
    ferry_status status;
    size_t name_len = strlen(entry->string);

    text_quote(entry->string, qname, sizeof qname);
    if (text_utf8_invalid_at((const unsigned char *)entry->string, name_len) != name_len)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: tensor name '%s' is not valid UTF-8", f->path,
                       qname);
    /* Names travel into warnings, graph node names and the exported file; a newline or an
     * escape sequence there could forge lines or drive the terminal. No checkpoint has them. */
    for (size_t i = 0; i < name_len; i++)
        if ((unsigned char)entry->string[i] < 0x20 || entry->string[i] == 0x7F)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: tensor name '%s' holds control "
                           "characters", f->path, qname);
    if (!cJSON_IsObject(entry))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: tensor '%s': expected an object", f->path,
                       qname);
    snprintf(origin, sizeof origin, "%s: tensor '%s'", f->path, qname);

    status = json_get_string(entry, "dtype", true, NULL, origin, dtype_name, sizeof dtype_name,
                             err);
    if (status != FERRY_OK)
        return status;
    t->dtype = dt_from_st_name(dtype_name);
    if (t->dtype == FERRY_DTYPE_UNDEFINED)
        return fy_fail(err, FERRY_ERR_UNSUPPORTED,
                       "%s: tensor '%s' has dtype '%s', which ferry does not read (it reads F64, "
                       "F32, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, BOOL, F8_E4M3, "
                       "F8_E5M2)", f->path, qname,
                       text_quote(dtype_name, qdtype, sizeof qdtype));
    if ((status = json_get_member(entry, "shape", true, origin, &shape, err)) ||
        (status = parse_shape(f, qname, shape, t, err)) ||
        (status = json_get_member(entry, "data_offsets", true, origin, &offsets, err)) ||
        (status = parse_offsets(f, qname, offsets, t, err)))
        return status;
    t->name = strdup(entry->string);
    if (!t->name)
        return fy_fail(err, FERRY_ERR_NOMEM, "%s: out of memory", f->path);
    t->file = f;
    return FERRY_OK;
}

static int compare_by_name(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int compare_by_range(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* Sorted by begin, ranges are disjoint exactly when each non-empty one starts at or after the
 * furthest end seen so far. Empty tensors occupy no bytes and may sit anywhere. */
static ferry_status check_overlaps(st_file *f, fy_err *err)
{
    ferry_status status = FERRY_OK;
    const st_tensor *furthest = NULL;
    const st_tensor **order = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *order);

    if (!order)
        return fy_fail(err, FERRY_ERR_NOMEM, "%s: out of memory", f->path);
    for (size_t i = 0; i < f->n_tensors; i++)
        order[i] = &f->tensors[i];
    qsort(order, f->n_tensors, sizeof *order, compare_by_range);
    for (size_t i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = order[i];
        if (t->begin == t->end)
            continue;
        if (furthest && t->begin < furthest->end) {
            char qa[TEXT_QUOTE_MAX], qb[TEXT_QUOTE_MAX];
            status = fy_fail(err, FERRY_ERR_FORMAT,
                             "%s: tensors '%s' and '%s' overlap (bytes [%llu, %llu) and "
                             "[%llu, %llu))", f->path,
                             text_quote(furthest->name, qa, sizeof qa),
                             text_quote(t->name, qb, sizeof qb),
                             (unsigned long long)furthest->begin,
                             (unsigned long long)furthest->end, (unsigned long long)t->begin,
                             (unsigned long long)t->end);
            goto cleanup;
        }
        if (!furthest || t->end > furthest->end)
            furthest = t;
    }

cleanup:
    free(order);
    return status;
}

static ferry_status parse_header(st_file *f, const char *text, size_t len, fy_err *err)
{
    ferry_status status = FERRY_OK;
    cJSON *root = NULL;
    const cJSON *entry;
    size_t n_entries = 0, n_metadata = 0;
    size_t bad_at;

    if ((status = json_parse_at(text, len, 8, f->path, &HEADER_LIMITS, &root, err)) != FERRY_OK)
        goto cleanup;
    if (!cJSON_IsObject(root)) {
        status = fy_fail(err, FERRY_ERR_FORMAT, "%s: header is not a JSON object", f->path);
        goto cleanup;
    }
    cJSON_ArrayForEach(entry, root) {
        if (strcmp(entry->string, METADATA_KEY) == 0)
            n_metadata++;
        else
            n_entries++;
    }
    if (n_entries > 0) {
        f->tensors = calloc(n_entries, sizeof *f->tensors);
        if (!f->tensors) {
            status = fy_fail(err, FERRY_ERR_NOMEM, "%s: out of memory for %zu tensors", f->path,
                             n_entries);
            goto cleanup;
        }
    }
    cJSON_ArrayForEach(entry, root) {
        if (strcmp(entry->string, METADATA_KEY) == 0) {
            if (n_metadata > 1 || !cJSON_IsObject(entry)) {
                status = fy_fail(err, FERRY_ERR_FORMAT,
                                 "%s: '" METADATA_KEY "' must be a single object", f->path);
                goto cleanup;
            }
            continue;
        }
        /* n_tensors counts the entries parsed so far, so st_close frees exactly those. */
        status = parse_entry(f, entry, &f->tensors[f->n_tensors], err);
        if (status != FERRY_OK)
            goto cleanup;
        f->n_tensors++;
    }
    /* Names were checked above, with the tensor named; the rest (metadata) is checked here. */
    if ((bad_at = text_utf8_invalid_at((const unsigned char *)text, len)) < len) {
        status = fy_fail(err, FERRY_ERR_FORMAT, "%s: header is not valid UTF-8 at byte %zu",
                         f->path, 8 + bad_at);
        goto cleanup;
    }
    if (f->n_tensors > 1)
        qsort(f->tensors, f->n_tensors, sizeof *f->tensors, compare_by_name);
    for (size_t i = 1; i < f->n_tensors; i++) {
        if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0) {
            char qname[TEXT_QUOTE_MAX];
            status = fy_fail(err, FERRY_ERR_FORMAT, "%s: tensor '%s' appears twice in the header",
                             f->path, text_quote(f->tensors[i].name, qname, sizeof qname));
            goto cleanup;
        }
    }
    status = check_overlaps(f, err);

cleanup:
    cJSON_Delete(root);
    return status;
}

/* pread of exactly n bytes at `offset`, retrying short reads. Returns the number of bytes read:
 * less than n only at end of file. -1 with errno on a read error. */
static int64_t pread_full(int fd, void *buf, size_t n, uint64_t offset)
{
    uint8_t *p = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t k = pread(fd, p + done, n - done, (off_t)(offset + done));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            break;
        done += (size_t)k;
    }
    return (int64_t)done;
}

/* Bytes of [0, size) that hold data rather than holes, counted with SEEK_DATA/SEEK_HOLE and
 * given up once `enough` is reached. A filesystem without hole reporting answers "all data". */
static uint64_t data_bytes(int fd, uint64_t size, uint64_t enough)
{
    uint64_t total = 0;
    off_t at = 0;
    while ((uint64_t)at < size && total < enough) {
        off_t data = lseek(fd, at, SEEK_DATA);
        if (data < 0)
            return errno == ENXIO ? total : size;   /* ENXIO: only a hole is left */
        off_t hole = lseek(fd, data, SEEK_HOLE);
        if (hole < 0 || hole <= data)
            return size;
        total += (uint64_t)(hole - data);
        at = hole;
    }
    return total;
}

/* A sparse file reads its holes as zeros at no cost on disk: a few KB downloaded as a tar or
 * rsync'd with --sparse could claim terabytes of weights and make an export that large. A real
 * checkpoint is stored in full. st_blocks is the cheap first look; it can be small for a dense
 * file on a compressing filesystem (ZFS, btrfs report compressed usage) or where a filesystem
 * does not fill it in, so the holes themselves are then counted, which compression does not
 * create. */
uint64_t st_stored_bytes(const st_file *f, uint64_t enough)
{
    if (f->allocated >= enough || f->allocated >= f->file_size)
        return f->allocated < f->file_size ? f->allocated : f->file_size;
    return data_bytes(f->fd, f->file_size, enough);
}

static ferry_status check_sparse(const st_file *f, fy_err *err)
{
    if (f->file_size <= ST_SPARSE_MIN_BYTES)
        return FERRY_OK;
    uint64_t stored = st_stored_bytes(f, f->file_size / ST_SPARSE_RATIO);
    if (stored >= f->file_size / ST_SPARSE_RATIO)
        return FERRY_OK;
    return fy_fail(err, FERRY_ERR_UNSUPPORTED,
                   "%s: a sparse file: %llu bytes long but only %llu hold data, the rest are "
                   "holes that read as zeros (ferry refuses checkpoints over %u MiB with less "
                   "than 1/%u of their bytes stored)", f->path,
                   (unsigned long long)f->file_size, (unsigned long long)stored,
                   ST_SPARSE_MIN_BYTES >> 20, ST_SPARSE_RATIO);
}

ferry_status st_open(const char *path, st_file **out, fy_err *err)
{
    ferry_status status = FERRY_OK;
    char *header = NULL;
    struct stat st;
    uint8_t len_bytes[8];
    uint64_t header_len;

    *out = NULL;
    st_file *f = calloc(1, sizeof *f);
    if (!f)
        return fy_fail(err, FERRY_ERR_NOMEM, "%s: out of memory", path);
    f->fd = -1;
    f->path = strdup(path);
    if (!f->path) {
        status = fy_fail(err, FERRY_ERR_NOMEM, "%s: out of memory", path);
        goto cleanup;
    }
    /* O_NONBLOCK: a FIFO in place of the file must fail the S_ISREG check below, not hang open;
     * for regular files it changes nothing. */
    f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (f->fd < 0) {
        status = fy_fail(err, FERRY_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto cleanup;
    }
    if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        status = fy_fail(err, FERRY_ERR_IO, "%s: not a readable regular file", path);
        goto cleanup;
    }
    f->file_size = (uint64_t)st.st_size;
    f->allocated = (uint64_t)st.st_blocks * 512;
    f->mtime_sec = (int64_t)st.st_mtim.tv_sec;
    f->mtime_nsec = (int64_t)st.st_mtim.tv_nsec;
    if (f->file_size < 8) {
        status = fy_fail(err, FERRY_ERR_FORMAT,
                         "%s: %llu bytes, too short for a safetensors file (at least 8)", path,
                         (unsigned long long)f->file_size);
        goto cleanup;
    }
    errno = 0;
    if (pread_full(f->fd, len_bytes, 8, 0) != 8) {
        status = fy_fail(err, FERRY_ERR_IO, "%s: cannot read the header length: %s", path,
                         errno ? strerror(errno) : "the file shrank");
        goto cleanup;
    }
    header_len = read_le64(len_bytes);
    if (header_len > f->file_size - 8) {
        status = fy_fail(err, FERRY_ERR_FORMAT,
                         "%s: header length %llu runs past the end of the file (%llu bytes)",
                         path, (unsigned long long)header_len, (unsigned long long)f->file_size);
        goto cleanup;
    }
    if (header_len > ST_MAX_HEADER_BYTES) {
        status = fy_fail(err, FERRY_ERR_FORMAT, "%s: header length %llu exceeds the limit of %u",
                         path, (unsigned long long)header_len, ST_MAX_HEADER_BYTES);
        goto cleanup;
    }
    if ((status = check_sparse(f, err)) != FERRY_OK)
        goto cleanup;
    f->data_start = 8 + header_len;
    /* A private NUL-terminated copy: the parser never reads past it. The size was checked
     * against the file's real size above. */
    header = malloc((size_t)header_len + 1);
    if (!header) {
        status = fy_fail(err, FERRY_ERR_NOMEM, "%s: out of memory for the header", path);
        goto cleanup;
    }
    errno = 0;
    if (pread_full(f->fd, header, (size_t)header_len, 8) != (int64_t)header_len) {
        status = fy_fail(err, FERRY_ERR_IO, "%s: cannot read the %llu-byte header: %s", path,
                         (unsigned long long)header_len,
                         errno ? strerror(errno) : "the file shrank");
        goto cleanup;
    }
    header[header_len] = '\0';
    status = parse_header(f, header, (size_t)header_len, err);

cleanup:
    free(header);
    if (status != FERRY_OK) {
        st_close(f);
        f = NULL;
    }
    *out = f;
    return status;
}

void st_close(st_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n_tensors; i++)
        free(f->tensors[i].name);
    free(f->tensors);
    if (f->fd >= 0)
        close(f->fd);
    free(f->path);
    free(f);
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    size_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->tensors[mid].name, name);
        if (c == 0)
            return &f->tensors[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

uint64_t st_file_offset(const st_tensor *t)
{
    return t->file->data_start + t->begin;
}

ferry_status st_truncated(const st_tensor *t, fy_err *err)
{
    char qname[TEXT_QUOTE_MAX];
    struct stat st;
    char now[64] = "cannot be examined";
    if (fstat(t->file->fd, &st) == 0)
        snprintf(now, sizeof now, "now has %llu", (unsigned long long)st.st_size);
    return fy_fail(err, FERRY_ERR_IO, "%s: truncated while exporting (tensor '%s' needs bytes "
                   "[%llu, %llu), the file %s)", t->file->path,
                   text_quote(t->name, qname, sizeof qname),
                   (unsigned long long)st_file_offset(t),
                   (unsigned long long)(t->file->data_start + t->end), now);
}

ferry_status st_check_unchanged(const st_file *f, fy_err *err)
{
    struct stat st;
    if (fstat(f->fd, &st) != 0)
        return fy_fail(err, FERRY_ERR_IO, "%s: cannot be examined: %s", f->path, strerror(errno));
    if ((uint64_t)st.st_size == f->file_size && (int64_t)st.st_mtim.tv_sec == f->mtime_sec &&
        (int64_t)st.st_mtim.tv_nsec == f->mtime_nsec)
        return FERRY_OK;
    return fy_fail(err, FERRY_ERR_IO, "%s: written to while the export read it (%s): its "
                   "weights may mix old and new values; export again", f->path,
                   (uint64_t)st.st_size != f->file_size ? "its size changed"
                                                        : "its modification time changed");
}

ferry_status st_read(const st_tensor *t, uint64_t offset, void *buf, size_t len, fy_err *err)
{
    uint64_t size = t->end - t->begin;
    if (offset > size || len > size - offset)
        return fy_fail(err, FERRY_ERR_INTERNAL, "%s: read of [%llu, +%zu) outside tensor of %llu "
                       "bytes", t->file->path, (unsigned long long)offset, len,
                       (unsigned long long)size);
    errno = 0;
    int64_t got = pread_full(t->file->fd, buf, len, st_file_offset(t) + offset);
    if (got < 0) {
        char qname[TEXT_QUOTE_MAX];
        return fy_fail(err, FERRY_ERR_IO, "%s: cannot read tensor '%s': %s", t->file->path,
                       text_quote(t->name, qname, sizeof qname), strerror(errno));
    }
    if ((size_t)got < len)
        return st_truncated(t, err);
    return FERRY_OK;
}

/* Chunk of the byte comparison: large enough for sequential reads, small next to the stream's
 * buffers. */
#define COMPARE_CHUNK ((size_t)1 << 20)

ferry_status st_same_bytes(const st_tensor *a, const st_tensor *b, bool *same, fy_err *err)
{
    ferry_status status = FERRY_OK;
    uint64_t size = a->end - a->begin;
    uint8_t *x = NULL, *y = NULL;

    *same = a->dtype == b->dtype && a->ndim == b->ndim && size == b->end - b->begin &&
            memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]) == 0;
    if (!*same || a == b || size == 0)
        return FERRY_OK;
    x = malloc(COMPARE_CHUNK);
    y = malloc(COMPARE_CHUNK);
    if (!x || !y) {
        status = fy_fail(err, FERRY_ERR_NOMEM, "out of memory comparing tensors");
        goto cleanup;
    }
    for (uint64_t at = 0; at < size && *same; at += COMPARE_CHUNK) {
        size_t n = (size_t)(size - at < COMPARE_CHUNK ? size - at : COMPARE_CHUNK);
        if ((status = st_read(a, at, x, n, err)) != FERRY_OK ||
            (status = st_read(b, at, y, n, err)) != FERRY_OK)
            goto cleanup;
        *same = memcmp(x, y, n) == 0;
    }

cleanup:
    free(x);
    free(y);
    if (status != FERRY_OK)
        *same = false;
    return status;
}
