/* direct.c — the O_DIRECT writes of direct.h. */
#include "store/direct.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/fs.h"

/* Runs shorter than this go through the cache whole: a direct write waits for the disk, which
 * pays only for large runs. */
#define DIRECT_MIN ((size_t)256 << 10)
/* The staging buffer: 4 MiB, large enough for the disk to stream, small enough per worker. */
#define BOUNCE_BYTES ((size_t)4 << 20)
/* The held-back heads and tails (under a page each, two a run of at least DIRECT_MIN): 1 MiB
 * holds those of a few hundred runs, so the workers stop for them every few hundred MiB. */
#define HELD_BYTES ((size_t)1 << 20)
#define HELD_RECORD 12 /* offset and length before each piece's bytes */

void dw_open(dw_file *f, int fd, const char *path)
{
    long page = sysconf(_SC_PAGESIZE);
    *f = (dw_file){.fd = fd, .direct_fd = -1, .path = path,
                   .align = page > 4096 ? (size_t)page : 4096};
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    f->direct_fd = open(self, O_WRONLY | O_DIRECT | O_CLOEXEC);
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    /* a flush waits for the direct writes in flight, and new ones wait for it, however many
     * workers keep the gate shared between them */
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&f->gate, &attr);
    pthread_rwlockattr_destroy(&attr);
    pthread_mutex_init(&f->held_mu, NULL);
    if (f->direct_fd >= 0)
        f->held = malloc(HELD_BYTES);  /* NULL: the pieces are written at once */
}

void dw_close(dw_file *f)
{
    if (f->direct_fd >= 0)
        close(f->direct_fd);
    f->direct_fd = -1;
    free(f->held);
    f->held = NULL;
    f->held_len = 0;
    pthread_rwlock_destroy(&f->gate);
    pthread_mutex_destroy(&f->held_mu);
}

void dw_bounce_free(dw_bounce *b)
{
    free(b->p);
    b->p = NULL;
}

bool dw_takes_direct(dw_file *f, size_t n)
{
    return f->direct_fd >= 0 && n >= DIRECT_MIN &&
           !__atomic_load_n(&f->direct_refused, __ATOMIC_RELAXED);
}

static ferry_status buffered(dw_file *f, const uint8_t *data, size_t n, uint64_t offset,
                             fy_err *err)
{
    if (n == 0)
        return FERRY_OK;
    ferry_status st = fs_pwrite_all(f->fd, f->path, data, n, offset, err);
#ifdef SYNC_FILE_RANGE_WRITE
    /* only a hint (an error here leaves the fsync to do all of it), and only for a long run: a
     * transposed band lands as thousands of strips of a few KiB, and writing each back at
     * once wrote the pages two strips share twice, each strip as its own small I/O */
    if (st == FERRY_OK && n >= DIRECT_MIN)
        (void)sync_file_range(f->fd, (off_t)offset, (off_t)n, SYNC_FILE_RANGE_WRITE);
#endif
    return st;
}

/* Writes the held-back pieces, the gate exclusive; the caller holds held_mu. */
static ferry_status flush_held(dw_file *f, fy_err *err)
{
    ferry_status st = FERRY_OK;
    pthread_rwlock_wrlock(&f->gate);
    for (size_t at = 0; st == FERRY_OK && at < f->held_len;) {
        uint64_t offset;
        uint32_t n;
        memcpy(&offset, f->held + at, sizeof offset);
        memcpy(&n, f->held + at + sizeof offset, sizeof n);
        st = buffered(f, f->held + at + HELD_RECORD, n, offset, err);
        at += HELD_RECORD + n;
    }
    pthread_rwlock_unlock(&f->gate);
    f->held_len = 0;
    return st;
}

/* A head or tail of a direct run (under a page): held back, or written now where nothing can
 * be held. */
static ferry_status hold(dw_file *f, const uint8_t *data, size_t n, uint64_t offset,
                         fy_err *err)
{
    if (n == 0)
        return FERRY_OK;
    if (!f->held || HELD_RECORD + n > HELD_BYTES)
        return buffered(f, data, n, offset, err);
    ferry_status st = FERRY_OK;
    pthread_mutex_lock(&f->held_mu);
    if (f->held_len + HELD_RECORD + n > HELD_BYTES)
        st = flush_held(f, err);
    if (st == FERRY_OK) {
        uint32_t len = (uint32_t)n;
        memcpy(f->held + f->held_len, &offset, sizeof offset);
        memcpy(f->held + f->held_len + sizeof offset, &len, sizeof len);
        memcpy(f->held + f->held_len + HELD_RECORD, data, n);
        f->held_len += HELD_RECORD + n;
    }
    pthread_mutex_unlock(&f->held_mu);
    return st;
}

ferry_status dw_flush(dw_file *f, fy_err *err)
{
    pthread_mutex_lock(&f->held_mu);
    ferry_status st = flush_held(f, err);
    pthread_mutex_unlock(&f->held_mu);
    return st;
}

/* One direct write of `n` bytes (a multiple of the alignment, from aligned memory, to an
 * aligned offset). Returns the bytes written: fewer than `n` when the filesystem refused
 * (direct_refused set; the caller writes the rest buffered) or stopped short. */
static size_t direct(dw_file *f, const uint8_t *data, size_t n, uint64_t offset, fy_err *err,
                     ferry_status *st)
{
    size_t done = 0;
    while (done < n) {
        pthread_rwlock_rdlock(&f->gate);
        ssize_t k = pwrite(f->direct_fd, data + done, n - done, (off_t)(offset + done));
        pthread_rwlock_unlock(&f->gate);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno != EINVAL && errno != EOPNOTSUPP) {
            *st = fs_write_failed(err, f->path, errno);
            return done;
        }
        if (k < 0)
            __atomic_store_n(&f->direct_refused, true, __ATOMIC_RELAXED);
        if (k <= 0 || (size_t)k % f->align != 0)
            return done + (k > 0 ? (size_t)k : 0);   /* the rest, buffered */
        done += (size_t)k;
    }
    return done;
}

ferry_status dw_pwrite(dw_file *f, dw_bounce *bounce, const void *data, size_t n,
                       uint64_t offset, fy_err *err)
{
    const uint8_t *p = data;
    uint64_t first = (offset + f->align - 1) / f->align * f->align;
    uint64_t last = (offset + n) / f->align * f->align;   /* the whole pages: [first, last) */
    if (!bounce || last <= first || !dw_takes_direct(f, n))
        return buffered(f, p, n, offset, err);
    size_t head = (size_t)(first - offset);
    ferry_status st = hold(f, p, head, offset, err);
    uint64_t at = first;
    const uint8_t *src = p + head;
    bool aligned = (uintptr_t)src % f->align == 0;
    /* the staging buffer, only where one is needed; without it the run goes through the cache */
    if (!aligned && !bounce->p &&
        posix_memalign((void **)&bounce->p, f->align, BOUNCE_BYTES) != 0) {
        bounce->p = NULL;
        last = at;
    }
    while (st == FERRY_OK && at < last) {
        size_t want = (size_t)(last - at);
        const uint8_t *from = src;
        if (!aligned) {
            want = want < BOUNCE_BYTES ? want : BOUNCE_BYTES;
            memcpy(bounce->p, src, want);
            from = bounce->p;
        }
        size_t k = direct(f, from, want, at, err, &st);
        at += k, src += k;
        if (st == FERRY_OK && k < want)
            break;   /* refused or short: the rest through the cache */
    }
    /* the tail, or what the file system would not take directly */
    if (st == FERRY_OK)
        st = at == last ? hold(f, src, (size_t)(offset + n - at), at, err)
                        : buffered(f, src, (size_t)(offset + n - at), at, err);
    return st;
}
