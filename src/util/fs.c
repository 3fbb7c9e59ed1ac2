/* fs.c — file-system helpers (POSIX). */
#include "util/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <stdint.h>
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

/* A full disk, a quota or a file-size limit (EFBIG, "File too large") all mean the same to the
 * user: say "no space left" in words, with the system's own reason after it. */
static ferry_status io_fail(fy_err *err, const char *path, const char *what)
{
    int e = errno;
    if (e == ENOSPC || e == EFBIG || e == EDQUOT)
        return fy_fail(err, FERRY_ERR_NOSPACE, "%s: %s: no space left (%s)", path, what,
                       strerror(e));
    return fy_fail(err, FERRY_ERR_IO, "%s: %s: %s", path, what, strerror(e));
}

ferry_status fs_pwrite_all(int fd, const char *path, const void *data, size_t n, uint64_t offset,
                           fy_err *err)
{
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, (off_t)offset);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == ENOSPC || errno == EFBIG || errno == EDQUOT))
            return fy_fail(err, FERRY_ERR_NOSPACE, "%s: no space left while writing (%s)", path,
                           strerror(errno));
        if (k < 0)
            return fy_fail(err, FERRY_ERR_IO, "%s: write failed: %s", path, strerror(errno));
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

ferry_status fs_copy_file(const char *src, const char *dst, fy_err *err)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return io_fail(err, src, "cannot open");
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) {
        close(in);
        return io_fail(err, dst, "cannot create");
    }
    ferry_status st = FERRY_OK;
    char buf[65536];
    uint64_t off = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            st = io_fail(err, src, "read failed");
            break;
        }
        if (n == 0)
            break;
        if ((st = fs_pwrite_all(out, dst, buf, (size_t)n, off, err)) != FERRY_OK)
            break;
        off += (uint64_t)n;
    }
    if (st == FERRY_OK && fsync(out) != 0)
        st = io_fail(err, dst, "sync failed");
    close(in);
    if (close(out) != 0 && st == FERRY_OK)
        st = io_fail(err, dst, "close failed");
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

bool fs_inside(const char *dir, const char *rel)
{
    char root[PATH_MAX], full[PATH_MAX * 2], real[PATH_MAX];
    if (!realpath(dir, root))
        return false;
    snprintf(full, sizeof full, "%s/%s", dir, rel);
    if (!realpath(full, real))
        return false;
    size_t n = strlen(root);
    return strncmp(real, root, n) == 0 && (real[n] == '/' || (n == 1 && root[0] == '/'));
}

ferry_status fs_split(const char *path, char *parent, size_t psize, char *base, size_t bsize,
                      fy_err *err)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    if (len == 0 || len >= PATH_MAX)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "bad output path '%s'", path);
    size_t cut = len;
    while (cut > 0 && path[cut - 1] != '/')
        cut--;
    size_t blen = len - cut;
    if (blen == 0 || blen >= bsize || (blen == 1 && path[cut] == '.') ||
        (blen == 2 && path[cut] == '.' && path[cut + 1] == '.'))
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "bad output path '%s'", path);
    memcpy(base, path + cut, blen);
    base[blen] = '\0';
    if (cut == 0)
        snprintf(parent, psize, ".");
    else if (cut == 1)
        snprintf(parent, psize, "/");
    else
        snprintf(parent, psize, "%.*s", (int)(cut - 1), path);
    return FERRY_OK;
}
