/* placement.c — offsets of weight parts in one data file, and writing the file. */
#include "store/placement.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/crc_pieces.h"
#include "util/fs.h"
#include "util/grow.h"

struct pl_file {
    char *name;
    uint64_t align, size;
    ws_item *items;          /* one per recipe, with the offsets of its placed parts */
    size_t n, cap;
};

pl_file *pl_new(const char *file_name, uint64_t align)
{
    pl_file *f = calloc(1, sizeof *f);
    if (f && !(f->name = strdup(file_name))) {
        free(f);
        return NULL;
    }
    if (f)
        f->align = align ? align : 1;
    return f;
}

void pl_free(pl_file *f)
{
    if (!f)
        return;
    free(f->name);
    free(f->items);
    free(f);
}

const char *pl_name(const pl_file *f)
{
    return f->name;
}

static ws_item *find_item(const pl_file *f, const g_weight *w)
{
    for (size_t i = 0; i < f->n; i++)
        if (!f->items[i].bytes && w_equal(&f->items[i].w, w))
            return &f->items[i];
    return NULL;
}

static ws_item *find_const(const pl_file *f, const g_value *x)
{
    for (size_t i = 0; i < f->n; i++) {
        const ws_item *it = &f->items[i];
        if (it->bytes && it->hash == x->hash && it->nbytes == x->nbytes &&
            memcmp(it->bytes, x->data, x->nbytes) == 0)
            return &f->items[i];
    }
    return NULL;
}

bool pl_find_const(const pl_file *f, const g_value *x, uint64_t *offset)
{
    const ws_item *it = find_const(f, x);
    if (!it)
        return false;
    *offset = it->offset[W_PART_DATA];
    return true;
}

ferry_status pl_place_const(pl_file *f, const g_value *x, fy_err *err)
{
    if (find_const(f, x))
        return FERRY_OK;
    ws_item *grown = fy_grow(f->items, &f->cap, f->n + 1, sizeof *grown);
    if (!grown)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    f->items = grown;
    ws_item *it = &f->items[f->n++];
    memset(it, 0, sizeof *it);
    for (int p = 0; p < 3; p++)
        it->offset[p] = WS_UNPLACED;
    it->bytes = x->data;
    it->nbytes = x->nbytes;
    it->hash = x->hash;
    it->offset[W_PART_DATA] = (f->size + f->align - 1) / f->align * f->align;
    f->size = it->offset[W_PART_DATA] + x->nbytes;
    return FERRY_OK;
}

bool pl_find(const pl_file *f, const g_weight *w, w_part part, uint64_t *offset,
             uint64_t *length)
{
    const ws_item *it = find_item(f, w);
    if (!it || it->offset[part] == WS_UNPLACED)
        return false;
    int rank;
    int64_t shape[W_MAX_RANK];
    ferry_dtype dt;
    *offset = it->offset[part];
    w_part_info(w, part, &rank, shape, &dt, length);
    return true;
}

ferry_status pl_place(pl_file *f, const g_weight *w, w_part part, uint64_t *offset,
                      uint64_t *length, fy_err *err)
{
    ws_item *it = find_item(f, w);
    if (!it) {
        ws_item *grown = fy_grow(f->items, &f->cap, f->n + 1, sizeof *grown);
        if (!grown)
            return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        f->items = grown;
        it = &f->items[f->n++];
        memset(it, 0, sizeof *it);
        it->w = *w;
        for (int p = 0; p < 3; p++)
            it->offset[p] = WS_UNPLACED;
    }
    int rank;
    int64_t shape[W_MAX_RANK];
    ferry_dtype dt;
    w_part_info(w, part, &rank, shape, &dt, length);
    if (it->offset[part] == WS_UNPLACED) {
        it->offset[part] = (f->size + f->align - 1) / f->align * f->align;
        f->size = it->offset[part] + *length;
    }
    *offset = it->offset[part];
    return FERRY_OK;
}

ferry_status pl_place_graph(pl_file *f, const g_graph *g, uint64_t const_min, fy_err *err)
{
    for (size_t i = 0; i < g->n_values; i++) {
        const g_value *x = &g->values[i];
        if (x->kind == GV_CONST && x->n_uses > 0 && const_min && x->nbytes >= const_min) {
            if (pl_place_const(f, x, err) != FERRY_OK)
                return err->status;
            continue;
        }
        if (x->kind != GV_WEIGHT || x->n_uses == 0)
            continue;
        for (int p = 0; p < w_n_parts(&x->weight); p++) {
            uint64_t off, len;
            if (pl_place(f, &x->weight, (w_part)p, &off, &len, err) != FERRY_OK)
                return err->status;
        }
    }
    return FERRY_OK;
}

static bool no_space(int e)
{
    return e == ENOSPC || e == EFBIG || e == EDQUOT;
}

uint64_t pl_size(const pl_file *f)
{
    return f->size;
}

ferry_status pl_write_fd(pl_file *f, int fd, const char *path, uint64_t base,
                         ws_progress *progress, const ws_observer *observer, fy_err *err)
{
    if (!base)
        return ws_write(fd, path, f->items, f->n, 0, 0, progress, observer, err);
    ws_item *items = malloc((f->n ? f->n : 1) * sizeof *items);
    if (!items)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < f->n; i++) {
        items[i] = f->items[i];
        for (int p = 0; p < 3; p++)
            if (items[i].offset[p] != WS_UNPLACED)
                items[i].offset[p] += base;
    }
    ferry_status st = ws_write(fd, path, items, f->n, 0, 0, progress, observer, err);
    free(items);
    return st;
}

ferry_status pl_write(pl_file *f, const char *dir, ws_progress *progress, uint32_t *crc,
                      fy_err *err)
{
    char path[PATH_MAX];
    if (fs_join(path, sizeof path, dir, f->name, err) != FERRY_OK)
        return err->status;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return fy_fail(err, no_space(errno) ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                       "%s: cannot create: %s", path, strerror(errno));
    fy_crc_pieces pieces = {0};
    const ws_observer seen = {fy_crc_pieces_observer, &pieces};
    ferry_status st = fs_reserve(fd, path, f->size, err);
    if (st == FERRY_OK)
        st = pl_write_fd(f, fd, path, 0, progress, crc ? &seen : NULL, err);
    if (crc)
        *crc = fy_crc_pieces_value(&pieces, f->size);
    if (st == FERRY_OK && fsync(fd) != 0 && errno != EINVAL)
        st = fy_fail(err, no_space(errno) ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                     "%s: sync failed: %s", path, strerror(errno));
    if (close(fd) != 0 && st == FERRY_OK)
        st = fy_fail(err, no_space(errno) ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                     "%s: close failed: %s", path, strerror(errno));
    return st;
}
