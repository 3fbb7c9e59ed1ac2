/* safetensors.h — one .safetensors file: header parsed with every length, offset and shape
 * bounds- and overflow-checked; tensor bytes read on demand with pread (no mapping: a file
 * truncated by another process gives a short read and an error naming it, not SIGBUS).
 *
 * File layout (from the safetensors spec): u64 little-endian N, then N bytes of UTF-8 JSON
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
 * then the data area; offsets are relative to the start of the data area. */
#ifndef FERRY_MODEL_SAFETENSORS_H
#define FERRY_MODEL_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "util/err.h"

#define ST_MAX_DIMS 8
/* Headers larger than this are refused before any allocation (the reference implementation
 * uses the same cap). */
#define ST_MAX_HEADER_BYTES (100u * 1024u * 1024u)
/* Files over ST_SPARSE_MIN_BYTES with less than 1/ST_SPARSE_RATIO of their bytes stored (the rest
 * holes) are refused: see check_sparse. */
#define ST_SPARSE_MIN_BYTES (64u << 20)
#define ST_SPARSE_RATIO 8u

typedef struct st_file st_file;

typedef struct st_tensor {
    char *name;
    ferry_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t numel;          /* product of shape (1 for a scalar) */
    uint64_t begin, end;     /* byte range relative to the data area; end - begin == numel*size */
    const st_file *file;     /* the file it lives in */
} st_tensor;

struct st_file {
    char *path;
    int fd;                  /* O_RDONLY, held until st_close */
    uint64_t file_size;      /* when opened */
    uint64_t allocated;      /* st_blocks * 512 when opened: what the filesystem says it stores */
    int64_t mtime_sec, mtime_nsec; /* last modified, when opened */
    uint64_t data_start;     /* 8 + header length */
    st_tensor *tensors;      /* sorted by name */
    size_t n_tensors;
};

/* Opens and validates `path`. Checks (each failure names the file and the tensor or field):
 * file at least 8 bytes; not a sparse file (over ST_SPARSE_MIN_BYTES, less than
 * 1/ST_SPARSE_RATIO stored); header length within the file and under ST_MAX_HEADER_BYTES; header
 * valid UTF-8 JSON object, with no raw control byte or escaped NUL inside its strings; tensor
 * names free of control characters; each entry has a known dtype, a shape of non-negative
 * integers whose product does not overflow, data_offsets [begin, end] with
 * begin <= end <= data size and end - begin == numel * dtype size; no duplicate names; no two
 * tensors' byte ranges overlap.
 * On failure *out is NULL. */
ferry_status st_open(const char *path, st_file **out, fy_err *err);
void st_close(st_file *f);

/* Bytes of the file that hold data rather than holes, at least `enough` when the answer is
 * `enough` or more (counting stops there): st_blocks first, the holes counted with
 * SEEK_DATA/SEEK_HOLE only when st_blocks is below it. For the sparse check over a whole
 * checkpoint (ckpt_open), which a file split into small shards would otherwise pass. */
uint64_t st_stored_bytes(const st_file *f, uint64_t enough);

/* Binary search by name; NULL if absent. */
const st_tensor *st_find(const st_file *f, const char *name);

/* Absolute offset of the tensor's first byte in its file. */
uint64_t st_file_offset(const st_tensor *t);

/* Reads bytes [offset, offset + len) of the tensor's data into buf. A file that has shrunk since
 * it was opened gives FERRY_ERR_IO "<file>: truncated while exporting (tensor '<name>' needs
 * bytes [A, B), the file now has N)"; a range outside the tensor is FERRY_ERR_INTERNAL. */
ferry_status st_read(const st_tensor *t, uint64_t offset, void *buf, size_t len, fy_err *err);

/* The truncation error above, for callers that read the file another way. */
ferry_status st_truncated(const st_tensor *t, fy_err *err);

/* FERRY_ERR_IO naming the file if it was written to since it was opened (its size or
 * modification time differ): what was read from it before and after may not belong together.
 * A file replaced by another (renamed over) is not this one: its open descriptor still reads
 * the bytes it had. */
ferry_status st_check_unchanged(const st_file *f, fy_err *err);

/* *same = the two tensors have the same dtype, shape and bytes (read in chunks, never whole). */
ferry_status st_same_bytes(const st_tensor *a, const st_tensor *b, bool *same, fy_err *err);


#endif
