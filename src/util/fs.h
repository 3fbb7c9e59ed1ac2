/* fs.h — file-system helpers for atomic exports: recursive removal, durable copies, directory
 * syncs, and checks that a relative path stays inside a directory. */
#ifndef FERRY_UTIL_FS_H
#define FERRY_UTIL_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/err.h"

/* The error of a write into `path` that failed with errno `e`: "no space left while writing"
 * for a full disk, a quota or a file-size limit, "write failed" otherwise; the system's reason
 * after. */
ferry_status fs_write_failed(fy_err *err, const char *path, int e);
/* Makes the file `fd` at least `size` bytes long, its blocks allocated where the file system
 * can (fallocate), before the weights are written into it: they then fill blocks that exist in
 * a file that no longer grows, which lets the direct writes of several threads run at once
 * (ext4 serialises a direct write that extends a file or fills a hole), and a disk too small
 * for the whole file fails here, before anything is written. A file system that cannot
 * allocate ahead gets a sparse file of that size. Never shortens the file. */
ferry_status fs_reserve(int fd, const char *path, uint64_t size, fy_err *err);
/* pwrite of the whole buffer, retrying short writes. A full disk or a file-size limit gives
 * FERRY_ERR_NOSPACE naming the path. */
ferry_status fs_pwrite_all(int fd, const char *path, const void *data, size_t n, uint64_t offset,
                           fy_err *err);
/* Removes `path` and everything under it, never following symbolic links. Missing is fine. */
int fs_remove_tree(const char *path);
/* fsync on a directory, so that renames and creations in it are durable. */
ferry_status fs_sync_dir(const char *dir, fy_err *err);
/* The directories fs_make_dirs made: each a prefix of the path it was given (by length) and
 * the directory that was (device, inode, and birth time where the file system keeps one, so
 * that a directory made later at the same name, even on a reused inode, is not taken for it),
 * so that fs_unmake_dirs removes those and nothing else, however the path is spelt ("a/../b",
 * "a/./b", "a//b"). A path of PATH_MAX bytes has fewer components than FS_MADE_MAX. */
#define FS_MADE_MAX (PATH_MAX / 2)
typedef struct fs_made_dir {
    size_t len;
    dev_t dev;
    ino_t ino;
    bool has_birth;
    int64_t birth_sec;
    uint32_t birth_nsec;
} fs_made_dir;
typedef struct fs_made {
    int n;
    fs_made_dir dirs[FS_MADE_MAX];
} fs_made;
/* Creates `dir` and whichever of its parents are missing, as mkdir -p does, each made durable
 * in its parent, and records them in `made` (n = 0: `dir` was there). A part that exists and is
 * not a directory, or cannot be created, fails naming it, after removing what it made. */
ferry_status fs_make_dirs(const char *dir, fs_made *made, fy_err *err);
/* Undoes fs_make_dirs(dir, made): removes each directory it made, deepest first, if it is still
 * that directory and empty (rmdir), so that nothing put in one meanwhile is lost. */
void fs_unmake_dirs(const char *dir, const fs_made *made);
/* Writes `len` bytes as a new file (exclusive create) and fsyncs it. */
ferry_status fs_write_file(const char *path, const void *data, size_t len, fy_err *err);
/* True if `rel` is a plain relative path (not absolute, no "..", no empty or "." parts, no
 * backslash or control characters). */
bool fs_safe_relative(const char *rel);
/* 1 if `dir`/`rel` exists and its real path (links resolved) lies inside realpath(dir); 0 if it
 * does not, or is missing (a dangling link included); -1 with errno set when a real path cannot
 * be made: ENAMETOOLONG for one over PATH_MAX (a relative path under a working directory deeper
 * than PATH_MAX resolves to such a path), EACCES, ELOOP... */
int fs_inside(const char *dir, const char *rel);
/* Longest message form of a path: fs_short cuts longer ones in the middle. */
#define FS_SHORT_MAX 160
/* `path` for a message: as is if it fits in `size` bytes, else its head and tail around "...",
 * so that a path near PATH_MAX cannot push the reason out of a one-line message. */
const char *fs_short(const char *path, char *buf, size_t size);
/* Writes `dir`/`name` into `dst` (`size` bytes). A result longer than PATH_MAX - 1 bytes (or than
 * `dst`) is never cut short: it fails with FERRY_ERR_INVALID_ARG, "<path>: File name too long". */
ferry_status fs_join(char *dst, size_t size, const char *dir, const char *name, fy_err *err);
/* fs_join into a new allocation (free it); NULL on failure, with `err` filled. */
char *fs_join_dup(const char *dir, const char *name, fy_err *err);
/* Splits `path` into its parent directory and last component (trailing slashes ignored). */
ferry_status fs_split(const char *path, char *parent, size_t psize, char *base, size_t bsize,
                      fy_err *err);

#endif
