/* zip.c — the zip writer of zip.h (PKWARE APPNOTE 6.3: local headers, central directory, zip64
 * extended information extra field 0x0001, zip64 end of central directory record and locator).
 * CRC-32 from libdeflate; zlib joins two CRC-32s (crc32_combine64). */
#include "io/zip.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <libdeflate.h>
#include <unistd.h>
#include <zlib.h>

#include "util/crc_pieces.h"
#include "util/fs.h"
#include "util/grow.h"

#define U32_MAX_FIELD 0xFFFFFFFFu
#define PADDING_ID 0x4246    /* "FB": the extra field torch pads local headers with */
#define DOS_DATE_1980 0x21   /* 1980-01-01, the earliest a DOS date can say */
#define CRC_CHUNK (1u << 20)

typedef struct zip_entry {
    char *name;
    uint64_t header_offset, data_offset, size;
    uint32_t crc;
    bool reserved;           /* written by the caller: its CRC is found at close */
} zip_entry;

/* A run of bytes the caller wrote into a reserved entry, and their CRC-32. */
typedef struct zip_run {
    uint64_t offset, n;
    uint32_t crc;
} zip_run;

struct zip_writer {
    int fd;
    const char *path;
    zip_entry *entries;
    size_t n, cap;
    uint64_t end;            /* where the next local header goes */
    pthread_mutex_t mu;      /* guards the runs: zip_wrote is called from many threads */
    zip_run *runs;
    size_t n_runs, cap_runs;
    bool runs_lost;          /* a run not recorded, or runs overlapping: all read back */
    fy_crc_pieces whole;     /* the file's CRC-32: every byte the writer put, and the
                                reserved entries by their CRC once known */
};

typedef struct bytes {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} bytes;

static void put(bytes *b, const void *data, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void le(bytes *b, uint64_t v, int width)
{
    uint8_t raw[8];
    for (int i = 0; i < width; i++)
        raw[i] = (uint8_t)(v >> (8 * i));
    put(b, raw, (size_t)width);
}

static bool needs_zip64(uint64_t v)
{
    return v >= U32_MAX_FIELD;
}

zip_writer *zip_new(int fd, const char *path, fy_err *err)
{
    zip_writer *z = calloc(1, sizeof *z);
    if (!z) {
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory starting %s", path);
        return NULL;
    }
    z->fd = fd, z->path = path;
    pthread_mutex_init(&z->mu, NULL);
    return z;
}

void zip_free(zip_writer *z)
{
    if (!z)
        return;
    for (size_t i = 0; i < z->n; i++)
        free(z->entries[i].name);
    free(z->entries);
    free(z->runs);
    pthread_mutex_destroy(&z->mu);
    free(z);
}

uint64_t zip_end_offset(const zip_writer *z)
{
    return z->end;
}

uint32_t zip_file_crc32(const zip_writer *z)
{
    return fy_crc_pieces_value(&z->whole, z->end);
}

/* Appends the entry and writes its local header at z->end; its data follows, aligned. */
static ferry_status add_entry(zip_writer *z, const char *name, uint64_t size, uint32_t crc,
                              bool reserved, zip_entry **out, fy_err *err)
{
    size_t name_len = strlen(name);
    if (name_len == 0 || name_len > 0xFFFF)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s: zip entry name of %zu bytes", z->path,
                       name_len);
    if (z->n == z->cap) {
        size_t cap = z->cap ? 2 * z->cap : 32;
        zip_entry *e = realloc(z->entries, cap * sizeof *e);
        if (!e)
            return fy_fail(err, FERRY_ERR_NOMEM, "out of memory writing %s", z->path);
        z->entries = e, z->cap = cap;
    }
    zip_entry *e = &z->entries[z->n];
    *e = (zip_entry){.name = strdup(name), .header_offset = z->end, .size = size, .crc = crc,
                     .reserved = reserved};
    if (!e->name)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory writing %s", z->path);
    z->n++;

    bool zip64 = needs_zip64(size);
    size_t fixed = 30 + name_len + (zip64 ? 20 : 0);
    size_t pad = (ZIP_ALIGN - (z->end + fixed + 4) % ZIP_ALIGN) % ZIP_ALIGN;
    bytes h = {0};
    le(&h, 0x04034b50, 4);
    le(&h, zip64 ? 45 : 20, 2);          /* version needed: 4.5 for zip64 */
    le(&h, 0x0800, 2);                   /* names are UTF-8 */
    le(&h, 0, 2);                        /* stored */
    le(&h, 0, 2);
    le(&h, DOS_DATE_1980, 2);
    le(&h, crc, 4);                      /* a reserved entry's is written at close */
    le(&h, zip64 ? U32_MAX_FIELD : size, 4);
    le(&h, zip64 ? U32_MAX_FIELD : size, 4);
    le(&h, name_len, 2);
    le(&h, (zip64 ? 20 : 0) + 4 + pad, 2);
    put(&h, name, name_len);
    if (zip64) {
        le(&h, 0x0001, 2);
        le(&h, 16, 2);
        le(&h, size, 8);
        le(&h, size, 8);
    }
    le(&h, PADDING_ID, 2);
    le(&h, pad, 2);
    for (size_t i = 0; i < pad; i++)
        put(&h, "Z", 1);
    if (h.oom) {
        free(h.p);
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory writing %s", z->path);
    }
    ferry_status st = fs_pwrite_all(z->fd, z->path, h.p, h.len, z->end, err);
    fy_crc_pieces_add(&z->whole, h.p, h.len, z->end);
    e->data_offset = z->end + h.len;
    free(h.p);
    z->end = e->data_offset + size;
    *out = e;
    return st;
}

/* `crc` carried on over `n` bytes. */
static uint32_t crc_of(uint32_t crc, const void *data, size_t n)
{
    return n ? libdeflate_crc32(crc, data, n) : crc;
}

ferry_status zip_put(zip_writer *z, const char *name, const void *data, size_t n, fy_err *err)
{
    zip_entry *e;
    uint32_t crc = crc_of(0, data, n);
    ferry_status st = add_entry(z, name, n, crc, false, &e, err);
    if (st == FERRY_OK && n)
        st = fs_pwrite_all(z->fd, z->path, data, n, e->data_offset, err);
    if (st == FERRY_OK)
        fy_crc_pieces_add_crc(&z->whole, crc, n, e->data_offset);
    return st;
}

ferry_status zip_reserve(zip_writer *z, const char *name, uint64_t size, uint64_t *data_offset,
                         fy_err *err)
{
    zip_entry *e;
    ferry_status st = add_entry(z, name, size, 0, true, &e, err);
    if (st == FERRY_OK)
        *data_offset = e->data_offset;
    return st;
}

void zip_wrote(zip_writer *z, const void *data, size_t n, uint64_t offset)
{
    if (n == 0)
        return;
    uint32_t crc = crc_of(0, data, n);   /* here, in the caller's thread, while data is hot */
    pthread_mutex_lock(&z->mu);
    zip_run *runs = fy_grow(z->runs, &z->cap_runs, z->n_runs + 1, sizeof *runs);
    if (runs) {
        z->runs = runs;
        z->runs[z->n_runs++] = (zip_run){offset, n, crc};
    } else {
        z->runs_lost = true;
    }
    pthread_mutex_unlock(&z->mu);
}

void zip_wrote_observer(void *user, const void *data, size_t n, uint64_t offset)
{
    zip_wrote(user, data, n, offset);
}

/* `crc` carried on over the file's bytes [offset, offset + n), read back (from the page
 * cache) through `buf` (CRC_CHUNK bytes). */
static ferry_status read_back(zip_writer *z, const zip_entry *e, uint64_t offset, uint64_t n,
                              uint8_t *buf, uint32_t *crc, fy_err *err)
{
    for (uint64_t done = 0; done < n;) {
        size_t want = n - done < CRC_CHUNK ? (size_t)(n - done) : CRC_CHUNK;
        ssize_t k = pread(z->fd, buf, want, (off_t)(offset + done));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return fy_fail(err, FERRY_ERR_IO, "cannot read back %s (entry %s): %s", z->path,
                           e->name, k < 0 ? strerror(errno) : "short file");
        *crc = crc_of(*crc, buf, (size_t)k);
        done += (uint64_t)k;
    }
    return FERRY_OK;
}

static int by_offset(const void *a, const void *b)
{
    uint64_t x = ((const zip_run *)a)->offset, y = ((const zip_run *)b)->offset;
    return x < y ? -1 : x > y;
}

/* CRC-32 of a reserved entry's bytes, as the caller wrote them: the reported runs (z->runs,
 * sorted by offset, none overlapping another: zip_close checked) folded in order with
 * crc32_combine, the bytes between them read back. A run crossing the entry's bounds may have
 * been overwritten by the next entry's header: the whole entry is read back then. */
static ferry_status reserved_crc(zip_writer *z, zip_entry *e, uint8_t *buf, fy_err *err)
{
    uint64_t pos = e->data_offset, end = e->data_offset + e->size;
    uint32_t crc = 0;
    bool trusted = !z->runs_lost;
    size_t lo = 0, hi = z->n_runs;      /* the first run ending past the entry's start */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->runs[mid].offset + z->runs[mid].n <= e->data_offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    ferry_status st = FERRY_OK;
    for (size_t i = lo; trusted && i < z->n_runs && z->runs[i].offset < end; i++) {
        const zip_run *r = &z->runs[i];
        if (r->offset < pos || r->n > end - r->offset) {
            trusted = false;
            break;
        }
        if (r->offset > pos) {
            st = read_back(z, e, pos, r->offset - pos, buf, &crc, err);
            if (st != FERRY_OK)
                return st;
        }
        crc = (uint32_t)crc32_combine64(crc, r->crc, (z_off64_t)r->n);
        pos = r->offset + r->n;
    }
    if (!trusted) {
        crc = 0;
        pos = e->data_offset;
    }
    st = read_back(z, e, pos, end - pos, buf, &crc, err);
    if (st != FERRY_OK)
        return st;
    e->crc = crc;
    uint8_t raw[4] = {(uint8_t)crc, (uint8_t)(crc >> 8), (uint8_t)(crc >> 16),
                      (uint8_t)(crc >> 24)};
    /* the header's CRC field was written as zeros, which added nothing */
    fy_crc_pieces_add(&z->whole, raw, 4, e->header_offset + 14);
    fy_crc_pieces_add_crc(&z->whole, crc, e->size, e->data_offset);
    return fs_pwrite_all(z->fd, z->path, raw, 4, e->header_offset + 14, err);
}

static void central_entry(bytes *cd, const zip_entry *e)
{
    bool big_size = needs_zip64(e->size), big_offset = needs_zip64(e->header_offset);
    size_t extra = (big_size ? 16 : 0) + (big_offset ? 8 : 0);
    size_t name_len = strlen(e->name);
    le(cd, 0x02014b50, 4);
    le(cd, extra ? 45 : 20, 2);          /* version made by (MS-DOS attributes) */
    le(cd, extra ? 45 : 20, 2);
    le(cd, 0x0800, 2);
    le(cd, 0, 2);
    le(cd, 0, 2);
    le(cd, DOS_DATE_1980, 2);
    le(cd, e->crc, 4);
    le(cd, big_size ? U32_MAX_FIELD : e->size, 4);
    le(cd, big_size ? U32_MAX_FIELD : e->size, 4);
    le(cd, name_len, 2);
    le(cd, extra ? extra + 4 : 0, 2);
    le(cd, 0, 2);                        /* comment */
    le(cd, 0, 2);                        /* disk */
    le(cd, 0, 2);                        /* internal attributes */
    le(cd, 0, 4);                        /* external attributes */
    le(cd, big_offset ? U32_MAX_FIELD : e->header_offset, 4);
    put(cd, e->name, name_len);
    if (extra) {
        le(cd, 0x0001, 2);
        le(cd, extra, 2);
        if (big_size) {
            le(cd, e->size, 8);
            le(cd, e->size, 8);
        }
        if (big_offset)
            le(cd, e->header_offset, 8);
    }
}

ferry_status zip_close(zip_writer *z, fy_err *err)
{
    uint8_t *buf = malloc(CRC_CHUNK);
    if (!buf)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory writing %s", z->path);
    ferry_status st = FERRY_OK;
    if (z->n_runs)
        qsort(z->runs, z->n_runs, sizeof *z->runs, by_offset);
    /* Runs that overlap one another cannot all be what the file holds, and the search in
     * reserved_crc needs their ends in order too: any overlap, and every entry is read back. */
    for (size_t i = 1; i < z->n_runs; i++)
        if (z->runs[i].offset < z->runs[i - 1].offset + z->runs[i - 1].n)
            z->runs_lost = true;
    for (size_t i = 0; i < z->n && st == FERRY_OK; i++)
        if (z->entries[i].reserved)
            st = reserved_crc(z, &z->entries[i], buf, err);
    free(buf);
    if (st != FERRY_OK)
        return st;

    bytes cd = {0};
    for (size_t i = 0; i < z->n; i++)
        central_entry(&cd, &z->entries[i]);
    uint64_t cd_offset = z->end, cd_size = cd.len, zip64_end = cd_offset + cd_size;
    le(&cd, 0x06064b50, 4);              /* zip64 end of central directory record */
    le(&cd, 44, 8);
    le(&cd, 45, 2);
    le(&cd, 45, 2);
    le(&cd, 0, 4);
    le(&cd, 0, 4);
    le(&cd, z->n, 8);
    le(&cd, z->n, 8);
    le(&cd, cd_size, 8);
    le(&cd, cd_offset, 8);
    le(&cd, 0x07064b50, 4);              /* its locator */
    le(&cd, 0, 4);
    le(&cd, zip64_end, 8);
    le(&cd, 1, 4);
    le(&cd, 0x06054b50, 4);              /* end of central directory */
    le(&cd, 0, 2);
    le(&cd, 0, 2);
    le(&cd, z->n >= 0xFFFF ? 0xFFFF : z->n, 2);
    le(&cd, z->n >= 0xFFFF ? 0xFFFF : z->n, 2);
    le(&cd, needs_zip64(cd_size) ? U32_MAX_FIELD : cd_size, 4);
    le(&cd, needs_zip64(cd_offset) ? U32_MAX_FIELD : cd_offset, 4);
    le(&cd, 0, 2);
    if (cd.oom)
        st = fy_fail(err, FERRY_ERR_NOMEM, "out of memory writing %s", z->path);
    else
        st = fs_pwrite_all(z->fd, z->path, cd.p, cd.len, cd_offset, err);
    if (st == FERRY_OK)
        fy_crc_pieces_add(&z->whole, cd.p, cd.len, cd_offset);
    free(cd.p);
    if (st == FERRY_OK)
        z->end = cd_offset + cd.len;
    return st;
}
