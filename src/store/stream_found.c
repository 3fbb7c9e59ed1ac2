/* stream_found.c — what a weight stream found in the values it wrote (overflows beyond the
 * export's range, clamps, NaN and inf), summed into the caller's ws_progress once per recipe
 * and per run of source rows, however many files or dtypes hold them. */
#include "store/stream_found.h"

#include <stdlib.h>

#include "util/grow.h"

/* Whether two recipes read the same checkpoint values (whatever they make of them). */
static bool same_sources(const g_weight *a, const g_weight *b)
{
    if (a->n_src != b->n_src || a->concat_axis != b->concat_axis || a->stack != b->stack ||
        a->src_transposed != b->src_transposed || a->perm != b->perm ||
        a->perm_group != b->perm_group || a->row_begin != b->row_begin ||
        a->row_end != b->row_end)
        return false;
    for (int k = 0; k < a->n_src; k++)
        if (w_src(a, k) != w_src(b, k))
            return false;
    return true;
}

/* Whether `w` is in `list`, by `same`; if not, added (false, or NOMEM). */
static ferry_status seen_before(g_weight **list, size_t *n, size_t *cap, const g_weight *w,
                                bool (*same)(const g_weight *, const g_weight *), bool *seen,
                                fy_err *err)
{
    *seen = false;
    for (size_t k = 0; k < *n && !*seen; k++)
        *seen = same(&(*list)[k], w);
    if (*seen)
        return FERRY_OK;
    g_weight *grown = fy_grow(*list, cap, *n + 1, sizeof *grown);
    if (!grown)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    *list = grown;
    (*list)[(*n)++] = *w;
    return FERRY_OK;
}

/* Adds this write's non-finite checkpoint values to `p`: item order, so the first tensor named
 * is the same every save; each run of source rows once, however many files or dtypes hold it. */
static ferry_status note_nonfinite(ws_progress *p, const ws_item *item, const ws_found *c,
                                   fy_err *err)
{
    uint64_t total = c->nonfinite;
    if (!total)
        return FERRY_OK;
    bool seen;
    if (seen_before(&p->nf_seen, &p->n_nf_seen, &p->nf_seen_cap, &item->w, same_sources, &seen,
                    err) != FERRY_OK)
        return err->status;
    if (seen)
        return FERRY_OK;
    if (!p->nonfinite_tensor)
        p->nonfinite_tensor = w_src(&item->w, c->nonfinite_src)->name;
    p->nonfinite += total;
    return FERRY_OK;
}

ferry_status ws_note_found(ws_progress *p, const ws_item *items, size_t n,
                           const ws_found *count, fy_err *err)
{
    for (size_t i = 0; count && i < n; i++) {
        if (note_nonfinite(p, &items[i], &count[i], err) != FERRY_OK)
            return err->status;
        if (!count[i].overflowed)
            continue;
        bool seen;
        if (seen_before(&p->seen, &p->n_seen, &p->seen_cap, &items[i].w, w_equal, &seen, err) !=
            FERRY_OK)
            return err->status;
        if (seen)
            continue;
        if (items[i].w.saturate) {
            if (!p->clamp_tensor)
                p->clamp_tensor = w_src(&items[i].w, 0)->name;
            p->clamped += count[i].overflowed;
            continue;
        }
        if (!p->overflow_tensor) {
            p->overflow_tensor = w_src(&items[i].w, 0)->name;
            p->overflow_dtype = items[i].w.dtype;
        }
        p->overflowed += count[i].overflowed;
        p->scale_overflowed += count[i].scale_overflowed;
        p->overflow_quantized |= items[i].w.quant.bits != 0;
    }
    return FERRY_OK;
}

void ws_progress_free(ws_progress *p)
{
    free(p->seen);
    p->seen = NULL;
    p->n_seen = p->seen_cap = 0;
    free(p->nf_seen);
    p->nf_seen = NULL;
    p->n_nf_seen = p->nf_seen_cap = 0;
}

