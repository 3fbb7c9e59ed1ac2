/* fs.c — file-system helpers (POSIX). */
#include "util/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>


static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag == FTW_DP)
        return rmdir(path) == 0 || errno == ENOENT ? 0 : -1;
    return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
}

int fs_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlink(path);
    return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *fs_short(const char *path, char *buf, size_t size)
{
    size_t len = strlen(path);
    if (size == 0)
        return "";
    if (len < size) {
        memcpy(buf, path, len + 1);
        return buf;
    }
    /* The tail names the file; the head says where the path starts. */
    size_t head = size < 16 ? 0 : (size - 4) / 4, tail = size - 4 - head;
    memcpy(buf, path, head);
    memcpy(buf + head, "...", 3);
    memcpy(buf + head + 3, path + len - tail, tail);
    buf[size - 1] = '\0';
    return buf;
}

ferry_status fs_join(char *dst, size_t size, const char *dir, const char *name, fy_err *err)
{
    size_t dlen = strlen(dir), nlen = strlen(name), len = dlen + 1 + nlen;
    if (len >= size || len >= PATH_MAX) {
        /* Built only for the message: the two halves, each cut to fit. */
        char sdir[FS_SHORT_MAX], sname[FS_SHORT_MAX];
        if (size > 0)
            dst[0] = '\0';
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s/%s: %s (the path would be %zu bytes, "
                       "at most %d are allowed)", fs_short(dir, sdir, sizeof sdir),
                       fs_short(name, sname, sizeof sname), strerror(ENAMETOOLONG), len,
                       PATH_MAX - 1);
    }
    memcpy(dst, dir, dlen);
    dst[dlen] = '/';
    memcpy(dst + dlen + 1, name, nlen + 1);
    return FERRY_OK;
}

char *fs_join_dup(const char *dir, const char *name, fy_err *err)
{
    char *path = malloc(PATH_MAX);
    if (!path) {
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (fs_join(path, PATH_MAX, dir, name, err) != FERRY_OK) {
        free(path);
        return NULL;
    }
    return path;
}

/* A full disk, a quota or a file-size limit (EFBIG, "File too large") all mean the same to the
 * user: say "no space left" in words, with the system's own reason after it. */
static ferry_status io_fail(fy_err *err, const char *path, const char *what)
{
    int e = errno;
    char shown[FS_SHORT_MAX];
    fs_short(path, shown, sizeof shown);
    if (e == ENOSPC || e == EFBIG || e == EDQUOT)
        return fy_fail(err, FERRY_ERR_NOSPACE, "%s: %s: no space left (%s)", shown, what,
                       strerror(e));
    return fy_fail(err, FERRY_ERR_IO, "%s: %s: %s", shown, what, strerror(e));
}

ferry_status fs_write_failed(fy_err *err, const char *path, int e)
{
    if (e == ENOSPC || e == EFBIG || e == EDQUOT)
        return fy_fail(err, FERRY_ERR_NOSPACE, "%s: no space left while writing (%s)", path,
                       strerror(e));
    return fy_fail(err, FERRY_ERR_IO, "%s: write failed: %s", path, strerror(e));
}

ferry_status fs_reserve(int fd, const char *path, uint64_t size, fy_err *err)
{
    if (size == 0)
        return FERRY_OK;
    int r;
    do
        r = fallocate(fd, 0, 0, (off_t)size);
    while (r != 0 && errno == EINTR);
    if (r == 0)
        return FERRY_OK;
    if (errno == ENOSPC || errno == EFBIG || errno == EDQUOT)
        return fy_fail(err, FERRY_ERR_NOSPACE, "%s: no space left for its %llu bytes (%s)", path,
                       (unsigned long long)size, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0)
        return fy_fail(err, FERRY_ERR_IO, "%s: %s", path, strerror(errno));
    if ((uint64_t)st.st_size < size && ftruncate(fd, (off_t)size) != 0)
        return fs_write_failed(err, path, errno);
    return FERRY_OK;
}

ferry_status fs_pwrite_all(int fd, const char *path, const void *data, size_t n, uint64_t offset,
                           fy_err *err)
{
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, (off_t)offset);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return fs_write_failed(err, path, errno);
        if (k == 0)
            return fy_fail(err, FERRY_ERR_NOSPACE, "%s: no space left while writing", path);
        p += k;
        n -= (size_t)k;
        offset += (uint64_t)k;
    }
    return FERRY_OK;
}

ferry_status fs_write_file(const char *path, const void *data, size_t len, fy_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return io_fail(err, path, "cannot create");
    ferry_status st = fs_pwrite_all(fd, path, data, len, 0, err);
    if (st == FERRY_OK && fsync(fd) != 0)
        st = io_fail(err, path, "sync failed");
    if (close(fd) != 0 && st == FERRY_OK)
        st = io_fail(err, path, "close failed");
    return st;
}

ferry_status fs_sync_dir(const char *dir, fy_err *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return io_fail(err, dir, "cannot open directory");
    ferry_status st = FERRY_OK;
    if (fsync(fd) != 0 && errno != EINVAL)
        st = io_fail(err, dir, "directory sync failed");
    close(fd);
    return st;
}

/* Makes `path` (whose parent exists) durable there. */
static ferry_status sync_parent_of(const char *path, fy_err *err)
{
    char parent[PATH_MAX], base[NAME_MAX + 1];
    if (fs_split(path, parent, sizeof parent, base, sizeof base, err) != FERRY_OK)
        return err->status;
    return fs_sync_dir(parent, err);
}

/* Who the directory at `path` is (not following a final link); false if it cannot be told.
 * Without statx (an old kernel, a sandbox that filters it): device and inode alone. */
static bool identify_dir(const char *path, fs_made_dir *d)
{
    struct statx sx;
    if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_INO | STATX_BTIME, &sx) !=
        0) {
        struct stat st;
        if ((errno != ENOSYS && errno != EPERM) || lstat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            return false;
        d->dev = st.st_dev;
        d->ino = st.st_ino;
        d->has_birth = false;
        d->birth_sec = 0;
        d->birth_nsec = 0;
        return true;
    }
    if (!S_ISDIR(sx.stx_mode))
        return false;
    d->dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
    d->ino = (ino_t)sx.stx_ino;
    d->has_birth = (sx.stx_mask & STATX_BTIME) != 0;
    d->birth_sec = d->has_birth ? (int64_t)sx.stx_btime.tv_sec : 0;
    d->birth_nsec = d->has_birth ? sx.stx_btime.tv_nsec : 0;
    return true;
}

ferry_status fs_make_dirs(const char *dir, fs_made *made, fy_err *err)
{
    char part[PATH_MAX], shown[FS_SHORT_MAX];
    size_t len = strlen(dir);
    made->n = 0;
    if (len >= sizeof part)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s: %s", fs_short(dir, shown, sizeof shown),
                       strerror(ENAMETOOLONG));
    /* each prefix that ends a component: "a", "a/b", ... "a/b/c" */
    for (size_t end = 1; end <= len; end++) {
        if (end < len && dir[end] != '/')
            continue;
        if (end < len && dir[end - 1] == '/')
            continue; /* "a//b": the empty part between */
        memcpy(part, dir, end);
        part[end] = '\0';
        struct stat st;
        if (mkdir(part, 0777) == 0) {
            fs_made_dir *d = &made->dirs[made->n];
            if (made->n == FS_MADE_MAX || !identify_dir(part, d)) {
                int e = made->n == FS_MADE_MAX ? ENAMETOOLONG : errno;
                rmdir(part);
                fy_fail(err, FERRY_ERR_IO, "cannot create directory %s: %s",
                        fs_short(part, shown, sizeof shown), strerror(e));
                fs_unmake_dirs(dir, made);
                made->n = 0;
                return err->status;
            }
            d->len = end;
            made->n++;
            if (sync_parent_of(part, err) != FERRY_OK) {
                fs_unmake_dirs(dir, made);
                made->n = 0;
                return err->status;
            }
            continue;
        }
        int e = errno;
        if (e == EEXIST && stat(part, &st) == 0 && S_ISDIR(st.st_mode))
            continue;
        e = e == EEXIST ? ENOTDIR : e; /* a file, or a link to nothing */
        fy_fail(err, e == ENOSPC ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                "cannot create directory %s: %s", fs_short(part, shown, sizeof shown), strerror(e));
        fs_unmake_dirs(dir, made);
        made->n = 0;
        return err->status;
    }
    return FERRY_OK;
}

void fs_unmake_dirs(const char *dir, const fs_made *made)
{
    char path[PATH_MAX];
    for (int i = made->n - 1; i >= 0; i--) {
        const fs_made_dir *d = &made->dirs[i];
        fs_made_dir now;
        if (d->len >= sizeof path || d->len > strlen(dir))
            continue;
        memcpy(path, dir, d->len);
        path[d->len] = '\0';
        /* the directory made, not another put at its name since (nor one a link leads to) */
        if (identify_dir(path, &now) && now.dev == d->dev && now.ino == d->ino &&
            now.has_birth == d->has_birth && now.birth_sec == d->birth_sec &&
            now.birth_nsec == d->birth_nsec)
            rmdir(path); /* fails, keeping it, if anything was put in it */
    }
}

bool fs_safe_relative(const char *rel)
{
    if (!rel || !*rel || rel[0] == '/')
        return false;
    for (const char *p = rel; *p; p++)
        if (*p == '\\' || (unsigned char)*p < 0x20 || *p == 0x7F)
            return false;
    const char *part = rel;
    for (;;) {
        const char *slash = strchr(part, '/');
        size_t n = slash ? (size_t)(slash - part) : strlen(part);
        if (n == 0 || (n == 1 && part[0] == '.') || (n == 2 && part[0] == '.' && part[1] == '.'))
            return false;
        if (!slash)
            return true;
        part = slash + 1;
    }
}

int fs_inside(const char *dir, const char *rel)
{
    char root[PATH_MAX], full[PATH_MAX], real[PATH_MAX];
    if (!realpath(dir, root))
        return errno == ENOENT ? 0 : -1;
    if (fs_join(full, sizeof full, dir, rel, NULL) != FERRY_OK) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (!realpath(full, real))
        return errno == ENOENT ? 0 : -1;
    size_t n = strlen(root);
    return strncmp(real, root, n) == 0 && (real[n] == '/' || (n == 1 && root[0] == '/'));
}

ferry_status fs_split(const char *path, char *parent, size_t psize, char *base, size_t bsize,
                      fy_err *err)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    char shown[FS_SHORT_MAX];
    if (len == 0)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "bad output path '%s'", path);
    size_t cut = len;
    while (cut > 0 && path[cut - 1] != '/')
        cut--;
    size_t blen = len - cut;
    if (len >= PATH_MAX || blen > NAME_MAX || blen >= bsize)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s: %s", fs_short(path, shown, sizeof shown),
                       strerror(ENAMETOOLONG));
    if (blen == 0 || (blen == 1 && path[cut] == '.') ||
        (blen == 2 && path[cut] == '.' && path[cut + 1] == '.'))
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "bad output path '%s': the export is a "
                       "directory put in place by name, so name it (e.g. ./out), not '.' or "
                       "'..'", fs_short(path, shown, sizeof shown));
    memcpy(base, path + cut, blen);
    base[blen] = '\0';
    const char *p = cut == 0 ? "." : cut == 1 ? "/" : path;
    size_t plen = cut <= 1 ? 1 : cut - 1;
    if (plen >= psize)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "bad output path '%s'", path);
    memcpy(parent, p, plen);
    parent[plen] = '\0';
    return FERRY_OK;
}
