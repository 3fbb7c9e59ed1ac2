/* stream_found.h — what the weight stream's workers found in the values they wrote, by item,
 * and how it is added to the caller's ws_progress (stream_found.c). Private to src/store. */
#ifndef FERRY_STORE_STREAM_FOUND_H
#define FERRY_STORE_STREAM_FOUND_H

#include "store/stream.h"

/* What a job (and, summed, an item) found in the values it wrote (ws_progress says what). */
typedef struct ws_found {
    uint64_t overflowed, scale_overflowed;
    uint64_t nonfinite;      /* NaN and inf among the recipe's source values ... */
    int nonfinite_src;       /* ... the first source holding one (when nonfinite > 0) */
} ws_found;

/* Adds `n` non-finite values found in source `k` of a recipe to `f`. */
static inline void ws_found_nonfinite(ws_found *f, int k, uint64_t n)
{
    if (!n)
        return;
    if (!f->nonfinite || k < f->nonfinite_src)
        f->nonfinite_src = k;
    f->nonfinite += n;
}

/* Adds a write's overflows and non-finite values (`found`, by item) to `p`, in item order (the
 * first tensor named is the same every save), each recipe once however many files hold it. */
ferry_status ws_note_found(ws_progress *p, const ws_item *items, size_t n,
                           const ws_found *found, fy_err *err);

#endif
