/* direct.h — the weight stream's writes past the page cache. Each run's whole pages go out
 * through a second descriptor of the same file opened with O_DIRECT (the disk reads them from
 * the worker's buffer), its unaligned head and tail through the ordinary one. Writing an export
 * through the page cache costs a copy into freshly allocated pages and leaves the export's
 * gigabytes there, evicting the checkpoint being read; on a VM whose freed pages go back to
 * the host, those fresh pages fault in the host too (the same 2.2 GB export took 1.1 to 7 s
 * buffered, 1.2 to 1.6 s direct). Where O_DIRECT is refused (tmpfs on older kernels, FUSE, an
 * alignment the device wants larger than a page), everything goes through the ordinary one.
 *
 * Pages written directly are never also written through the cache (a head or tail shares its
 * page only with other buffered bytes) as long as the caller writes no byte twice: runs must not
 * overlap. The kernel then keeps the two paths coherent without invalidation races (a buffered
 * write into a page a direct one is writing could leave a stale cached copy that writeback
 * later puts over the direct data); the caller's closing fsync makes both durable.
 *
 * The heads and tails of direct runs are held back and written together, while no direct write
 * is in flight: a buffered write takes the file's lock that every direct write holds shared
 * until its disk write ends (ext4, xfs), so written at once each waited for another worker's
 * megabytes to reach the disk and the workers took turns at the disk instead of sharing it. */
#ifndef FERRY_STORE_DIRECT_H
#define FERRY_STORE_DIRECT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

typedef struct dw_file {
    int fd;                  /* the caller's descriptor: heads, tails, small runs */
    int direct_fd;           /* the same file with O_DIRECT, or -1 */
    const char *path;        /* named in errors */
    bool direct_refused;     /* a direct write failed with EINVAL once: buffered from then on */
    size_t align;            /* the page size, at least 4 KiB */
    /* held shared by each direct write, exclusively while the held-back pieces are written */
    pthread_rwlock_t gate;
    pthread_mutex_t held_mu;
    uint8_t *held;           /* records: offset (8 bytes), length (4), the bytes; NULL: none */
    size_t held_len;
} dw_file;

/* A worker's page-aligned staging buffer for runs whose data is not page-aligned in memory. */
typedef struct dw_bounce {
    uint8_t *p;
} dw_bounce;

/* Sets up writes into `fd` (the file `path`): reopens it with O_DIRECT through /proc/self/fd,
 * or, where that fails, leaves every write buffered. Never fails. */
void dw_open(dw_file *f, int fd, const char *path);
/* Writes what is held back (errors as fs_pwrite_all's). Call once every dw_pwrite has
 * returned, before the file is synced. */
ferry_status dw_flush(dw_file *f, fy_err *err);
/* Frees what dw_open set up; what is still held back is dropped (call dw_flush first). */
void dw_close(dw_file *f);
void dw_bounce_free(dw_bounce *b);

/* Whether a run of `n` bytes would be written directly (a band copied unchanged is then read
 * and written, not copied in the kernel through the page cache). */
bool dw_takes_direct(dw_file *f, size_t n);

/* Writes `n` bytes at `offset` (errors as fs_pwrite_all's): the whole pages of a large run
 * directly, staged through `bounce` when `data` is not page-aligned (bounce NULL: buffered);
 * the unaligned head and tail of such a run held back for dw_flush (or written when the held
 * bytes fill their buffer); a run not written directly buffered, its writeback started at once
 * (sync_file_range) so that the closing fsync finds most of it done. Safe from several threads
 * at once. */
ferry_status dw_pwrite(dw_file *f, dw_bounce *bounce, const void *data, size_t n,
                       uint64_t offset, fy_err *err);

#endif
