/* stream.h — running weight recipes into a data file: each recipe is cut into bands of rows;
 * worker threads read a band from the checkpoint, join/slice/offset/convert it, transpose or
 * quantize it, and write the result at its place with pwrite (the order of writes does not
 * matter). Source pages are released behind, and buffers are sized by the largest band, so
 * peak memory is a few bands per worker, not the model. */
#ifndef FERRY_STORE_STREAM_H
#define FERRY_STORE_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/weights.h"
#include "util/err.h"

/* The caller's hold on a long write: progress reported out, a request to stop read in. */
typedef struct ws_progress {
    ferry_progress_fn fn;    /* may be NULL; called from the thread that called ws_write */
    void *user;
    uint64_t done, total;    /* bytes */
    /* may be NULL; non-zero (set by a signal handler, say): the workers take no further band
     * and ws_write returns FERRY_ERR_CANCELLED */
    volatile int *cancel;
    /* Found while writing, added to across calls: weight values finite in the checkpoint
     * beyond the range of an fp16 or bf16 export's weights, which are +-inf there (as stored,
     * or once dequantized), and the checkpoint tensor of the first (NULL: none; the
     * checkpoint's name, alive as long as it is open). A recipe written into several files
     * (prefill's and decode's) counts once: `seen` keeps those counted. */
    uint64_t overflowed;
    const char *overflow_tensor;
    ferry_dtype overflow_dtype;  /* the type it is inf in */
    /* Of those, the values counted because their block's fp16 scale overflowed (the whole
     * block dequantizes to inf or NaN); and whether a quantized weight was among them. */
    uint64_t scale_overflowed;
    bool overflow_quantized;
    /* The same for a saturating recipe's weights (compress_to_fp16), whose values beyond fp16's
     * range are stored as +-65504 instead. */
    uint64_t clamped;
    const char *clamp_tensor;
    g_weight *seen;              /* allocated: ws_progress_free */
    size_t n_seen, seen_cap;
    /* Float checkpoint values that are NaN or +-inf themselves, counted as they stream (every
     * export writes them, or NaN in their quantized block's place), and the checkpoint tensor
     * of the first, in item order. Values read for several recipes of the same source rows (a
     * weight in two files, or in two dtypes) count once: `nf_seen` keeps those counted. */
    uint64_t nonfinite;
    const char *nonfinite_tensor;
    g_weight *nf_seen;           /* allocated: ws_progress_free */
    size_t n_nf_seen, nf_seen_cap;
} ws_progress;

/* Frees what ws_write allocated in `p` (its `seen`). */
void ws_progress_free(ws_progress *p);

/* Whether `cancel` (may be NULL) asks to stop; safe from any thread. */
bool ws_cancelled(volatile int *cancel);

/* Told of each run of bytes a worker wrote with pwrite, from that worker's thread while the
 * bytes are still in its cache (a file's CRC-32 taken there, not by reading the file back).
 * With an observer, every band passes through memory: none is copied file to file in the
 * kernel, unseen. */
typedef struct ws_observer {
    void (*wrote)(void *user, const void *data, size_t n, uint64_t offset);
    void *user;
} ws_observer;

#define WS_UNPLACED UINT64_MAX

/* One recipe and where each of its parts goes (WS_UNPLACED: a part nobody reads); or, with
 * `bytes`, a constant the export computed (a fused graph's rotary tables), its one part at
 * offset[W_PART_DATA]. */
typedef struct ws_item {
    g_weight w;
    uint64_t offset[3];      /* by w_part */
    const void *bytes;       /* a constant's data (borrowed from its graph), or NULL */
    uint64_t nbytes, hash;   /* its length, and its hash in that graph (g_value.hash) */
} ws_item;

/* Bytes `item` writes (the parts that are placed). */
uint64_t ws_item_bytes(const ws_item *item);

/* Writes every item into `fd` (the file `path`, named in errors) with `threads` workers (0: one
 * per core, at most 4), in bands of at most `band_elems` elements (0: the default, 2 Mi; tests
 * pass tiny bands to exercise banding). Progress (if any) counts bytes written and may cancel;
 * `observer` (if any) sees what was written. Returns the first error. */
ferry_status ws_write(int fd, const char *path, const ws_item *items, size_t n, int threads,
                      size_t band_elems, ws_progress *progress, const ws_observer *observer,
                      fy_err *err);

#endif
