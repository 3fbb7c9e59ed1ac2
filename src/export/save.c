/* save.c — ExportedModel on disk: atomic save (a locked temporary sibling directory, fsync,
 * rename or exchange) and load (manifest validated, paths confined). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export/internal.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/text.h"

#define TMP_TAG ".ferry-tmp-"
/* Inside each temporary directory: the lock file its writer keeps locked while it runs, and the
 * export being built (renamed out as a whole, so the lock file never ends up in an export). */
#define LOCK_NAME "lock"
#define TREE_NAME "export"
/* The longest output name whose temporary sibling, .<base>.ferry-tmp-<pid>-XXXXXX with a pid of
 * up to 10 digits (is_tmp_name), still fits in NAME_MAX: 226 bytes. */
#define BASE_NAME_MAX (NAME_MAX - (int)(sizeof "." TMP_TAG "-XXXXXX" - 1) - 10)

/* .<base>.ferry-tmp-<pid>-XXXXXX exactly, XXXXXX as mkdtemp makes it. */
static bool is_tmp_name(const char *name, const char *base)
{
    size_t blen = strlen(base), tlen = strlen(TMP_TAG), digits = 0;
    if (name[0] != '.' || strncmp(name + 1, base, blen) != 0 ||
        strncmp(name + 1 + blen, TMP_TAG, tlen) != 0)
        return false;
    const char *p = name + 1 + blen + tlen;
    while (p[digits] >= '0' && p[digits] <= '9')
        digits++;
    if (digits == 0 || digits > 10 || p[digits] != '-')
        return false;
    p += digits + 1;
    for (int i = 0; i < 6; i++)
        if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') ||
              (p[i] >= '0' && p[i] <= '9')))
            return false;
    return p[6] == '\0';
}

/* Whether directory `path` holds no entry (an error reads as "not empty": it is then treated
 * as any existing directory is). */
static bool is_empty_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return false;
    struct dirent *ent;
    bool empty = true;
    while (empty && (ent = readdir(d)) != NULL)
        empty = strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0;
    closedir(d);
    return empty;
}

/* An open file description lock: released only when its last descriptor closes, which the
 * kernel does when the process dies however it dies; it is seen across PID namespaces and, on
 * NFS, across hosts (a pid is neither). */
static int lock_exclusive(int fd)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    return fcntl(fd, F_OFD_SETLK, &fl);
}

/* A file name ferry writes into an export: a component's graph or data file (each format says
 * which names are its own: fb_backend.owns_file), the manifest, the two configs, the tokenizer
 * files. */
static bool is_export_file_name(const char *name)
{
    static const char *const exact[] = {"export.json", "config.json", "generation_config.json"};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (strcmp(name, exact[i]) == 0)
            return true;
    if (tok_is_file_name(name) || strcmp(name, GENAI_CONFIG_FILE) == 0 ||
        genai_is_processor_file(name))
        return true;
    for (int i = 0; fb_at(i); i++)
        if (fb_at(i)->owns_file(name))
            return true;
    return false;
}

/* Goes over the entries of the directory `dfd` (which it closes): with `remove`, unlinks each
 * `accept` approves; without, returns false at the first it does not. */
static bool each_entry(int dfd, bool (*accept)(int dfd, const char *name), bool remove)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return false;
    }
    bool ok = true;
    struct dirent *ent;
    while (ok && (ent = readdir(d)) != NULL) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
            continue;
        if (!accept(dirfd(d), ent->d_name))
            ok = remove;   /* removing: leave it, go on */
        else if (remove)
            unlinkat(dirfd(d), ent->d_name, 0);
    }
    closedir(d);
    return ok;
}

static bool is_regular_at(int dfd, const char *name)
{
    struct stat st;
    return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

static bool is_export_file_at(int dfd, const char *name)
{
    return is_export_file_name(name) && is_regular_at(dfd, name);
}

static bool is_tmp_entry_at(int dfd, const char *name)
{
    struct stat st;
    if (strcmp(name, LOCK_NAME) == 0)
        return is_regular_at(dfd, name);
    if (strcmp(name, TREE_NAME) != 0 || fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISDIR(st.st_mode))
        return false;
    int tree = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return tree >= 0 && each_entry(tree, is_export_file_at, false);
}

/* Removes the temporary directory `path`, whose lock this process holds, if it holds only what
 * ferry puts there: `lock`, and `export` holding regular files named as ferry names them. A
 * directory named like ferry's with a lock file and anything else in it may be someone's: it is
 * left whole. The removal goes entry by entry, never a whole tree: a file added meanwhile makes
 * the last rmdir fail and stays. */
static void remove_if_ferrys(const char *path)
{
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return;
    int check = dup(dfd);
    if (check < 0 || !each_entry(check, is_tmp_entry_at, false)) {
        close(dfd);
        return;
    }
    int tree = openat(dfd, TREE_NAME, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (tree >= 0) {
        each_entry(tree, is_export_file_at, true);
        unlinkat(dfd, TREE_NAME, AT_REMOVEDIR);
    }
    unlinkat(dfd, LOCK_NAME, 0);
    close(dfd);
    rmdir(path);
}

/* Removes the temporary directories that earlier, killed runs left next to `base`: those named
 * as ferry names them whose lock file nobody holds (taking the lock proves its writer is gone,
 * wherever it ran) and that hold nothing but what ferry writes there (remove_if_ferrys). A
 * directory without a lock file is removed only when empty: a run killed between creating it
 * and its lock file. Anything else is left alone. */
static void clean_stale(const char *parent, const char *base)
{
    DIR *d = opendir(parent);
    if (!d)
        return;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        char path[PATH_MAX], lock[PATH_MAX];
        struct stat st;
        if (!is_tmp_name(ent->d_name, base) ||
            fs_join(path, sizeof path, parent, ent->d_name, NULL) != FERRY_OK ||
            fs_join(lock, sizeof lock, path, LOCK_NAME, NULL) != FERRY_OK ||
            lstat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        int fd = open(lock, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) {
            if (errno == ENOENT)
                rmdir(path);
            continue;
        }
        /* Removed while holding the lock, so that a second cleaner cannot take it meanwhile. */
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && lock_exclusive(fd) == 0)
            remove_if_ferrys(path);
        close(fd);
    }
    closedir(d);
}

/* Creates parent/.<base>.ferry-tmp-<pid>-XXXXXX holding a lock file that stays locked through
 * *lock_fd until the save ends. A cleaner may take a new directory before its lock exists
 * (then it is empty and goes) or lock its file before this process does (then it removes it):
 * either way this process notices and starts over with a new name. */
static ferry_status make_tmp(const char *parent, const char *base, char *tmp, int *lock_fd,
                             fy_err *err)
{
    char name[NAME_MAX + 64], lock[PATH_MAX], shown[FS_SHORT_MAX];
    snprintf(name, sizeof name, ".%s" TMP_TAG "%ld-XXXXXX", base, (long)getpid());
    fs_short(parent, shown, sizeof shown);
    for (int attempt = 0; attempt < 8; attempt++) {
        if (fs_join(tmp, PATH_MAX, parent, name, err) != FERRY_OK ||
            fs_join(lock, sizeof lock, tmp, LOCK_NAME, err) != FERRY_OK)
            return err->status;
        if (!mkdtemp(tmp))
            return fy_fail(err, errno == ENOSPC ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                           "cannot create a directory in %s: %s", shown, strerror(errno));
        fs_join(lock, sizeof lock, tmp, LOCK_NAME, NULL);
        int fd = open(lock, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) {
            int e = errno;
            rmdir(tmp);
            if (e == ENOENT)
                continue;
            return fy_fail(err, e == ENOSPC || e == EDQUOT ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                           "cannot create a lock file in %s: %s", shown, strerror(e));
        }
        struct stat fst, lst;
        if (lock_exclusive(fd) != 0) {
            int e = errno;
            close(fd);
            if (e == EAGAIN || e == EACCES)
                continue; /* a cleaner holds it and removes the directory */
            unlink(lock);
            rmdir(tmp);
            return fy_fail(err, FERRY_ERR_IO, "cannot lock a file in %s: %s (ferry needs "
                           "file locks to tell its live temporary directories from stale ones)",
                           shown, strerror(e));
        }
        if (fstat(fd, &fst) == 0 && fst.st_nlink > 0 && lstat(lock, &lst) == 0 &&
            lst.st_dev == fst.st_dev && lst.st_ino == fst.st_ino) {
            *lock_fd = fd;
            return FERRY_OK;
        }
        close(fd); /* a cleaner removed it between the create and the lock */
    }
    return fy_fail(err, FERRY_ERR_IO, "cannot create a temporary directory in %s: removed by "
                   "another process each time", shown);
}

/* What the export's runtime makes of a NaN next to quantized weights (the backend's note), or
 * "" where it computes in float. */
static const char *nonfinite_runtime_note(const ferry_exported *e)
{
    const char *note = e->backend && e->backend->nonfinite_note && e->cfg.quantizer.bits
                           ? e->backend->nonfinite_note(&e->cfg) : NULL;
    return note ? note : "";
}

/* The checkpoint's own NaN or inf weights: the export carries them (a quantized block of them
 * has a NaN scale), so its outputs are non-finite where transformers' are; said, since nothing
 * else shows why. */
static ferry_status warn_nonfinite(ferry_exported *e, const ws_progress *pr)
{
    char name[TEXT_QUOTE_MAX], line[TEXT_QUOTE_MAX + 500];
    snprintf(line, sizeof line, "%llu checkpoint weight value%s NaN or infinite, the first in "
             "tensor '%s': the model's outputs may be NaN or infinite, as transformers' are%s",
             (unsigned long long)pr->nonfinite, pr->nonfinite == 1 ? " is" : "s are",
             text_quote(pr->nonfinite_tensor, name, sizeof name),
             nonfinite_runtime_note(e));
    return exp_add_warning(&e->save_warnings, line);
}

/* Weights beyond the export's float range became inf: a warning, since the logits may then be
 * inf or NaN. A quantized export's scales are fp16 or fp32 (bf16 is refused), so fp32 is its
 * only way out; a block whose fp16 scale overflowed is inf or NaN whole, said so since the
 * values counted (its own beyond range) are then fewer than the ones lost. Where the runtime
 * rounds activations to int8 such a block gives finite, wrong logits instead: said as for
 * NaN weights. */
static ferry_status warn_overflow(ferry_exported *e, const ws_progress *pr)
{
    char name[TEXT_QUOTE_MAX], line[TEXT_QUOTE_MAX + 500];
    bool half = pr->overflow_dtype == FERRY_F16, one = pr->overflowed == 1;
    snprintf(line, sizeof line, "%llu exported weight value%s beyond %s's range (+-%s), where "
             "it holds only inf, the first from checkpoint tensor '%s'%s: the export's outputs "
             "may be inf or NaN%s; export in %s instead",
             (unsigned long long)pr->overflowed, one ? " is" : "s are", half ? "fp16" : "bf16",
             half ? "65504" : "3.39e38", text_quote(pr->overflow_tensor, name, sizeof name),
             !pr->scale_overflowed ? ""
             : pr->scale_overflowed == 1 ? "; its block's fp16 scale overflows, which makes the "
                                           "whole block inf or NaN"
                                         : "; their blocks' fp16 scales overflow, which makes "
                                           "those blocks inf or NaN whole",
             pr->scale_overflowed ? nonfinite_runtime_note(e) : "",
             half && !pr->overflow_quantized ? "bf16 or fp32" : "fp32");
    return exp_add_warning(&e->save_warnings, line);
}

/* compress_to_fp16 stored weights beyond fp16's range as its largest value, as OpenVINO's own
 * compression does: the export is not the checkpoint there, so it is said
 * (--dtype fp16 warned of the same weights, compress_to_fp16 did not). */
static ferry_status warn_clamped(ferry_exported *e, const ws_progress *pr)
{
    char name[TEXT_QUOTE_MAX], line[TEXT_QUOTE_MAX + 400];
    snprintf(line, sizeof line, "%llu exported weight value%s beyond fp16's range (+-65504), "
             "stored as +-65504 by compress_to_fp16, the first from checkpoint tensor '%s': the "
             "export's outputs may differ from the checkpoint's; export without "
             "compress_to_fp16 to keep them", (unsigned long long)pr->clamped,
             pr->clamped == 1 ? " is" : "s are",
             text_quote(pr->clamp_tensor, name, sizeof name));
    return exp_add_warning(&e->save_warnings, line);
}

static ferry_status write_contents(ferry_exported *e, const char *tmp, fy_err *err)
{
    ws_progress pr = {.fn = e->cfg.progress, .user = e->cfg.progress_user,
                      .cancel = e->cfg.cancel};
    be_written written = {0};
    ferry_status st = e->backend->write(e->lowered, e->n_components, &e->cfg, tmp, &pr,
                                        &written, err);
    ws_progress_free(&pr);
    if (st != FERRY_OK)
        return st;
    /* the weights written are the checkpoint's only if no one wrote to it since it was read
     * (bytes overwritten in place between export and save made NaN logits) */
    if (ckpt_check_unchanged(e->model->ck, err) != FERRY_OK)
        return err->status;
    if ((pr.nonfinite && warn_nonfinite(e, &pr) != FERRY_OK) ||
        (pr.overflowed && warn_overflow(e, &pr) != FERRY_OK) ||
        (pr.clamped && warn_clamped(e, &pr) != FERRY_OK))
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    char path[PATH_MAX];
    const model_config *cfg = &e->model->cfg;
    /* the sizes and CRC-32s written, which loading and ferry_exported_verify compare: the
     * manifest shown from now on has them */
    if (manifest_record_sizes(e->manifest, tmp, &written, err) != FERRY_OK)
        return err->status;
    char *printed = cJSON_Print(e->manifest);
    if (!printed)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    free(e->manifest_text);
    e->manifest_text = printed;
    if (fs_join(path, sizeof path, tmp, "export.json", err) != FERRY_OK ||
        fs_write_file(path, e->manifest_text, strlen(e->manifest_text), err) != FERRY_OK)
        return err->status;
    /* The bytes read and checked when the model was opened: the files themselves may have been
     * replaced since (a link to /dev/zero, a FIFO, another model's config). */
    if (!cfg->raw_text)
        return fy_fail(err, FERRY_ERR_INTERNAL, "the model's config.json was not kept");
    if (fs_join(path, sizeof path, tmp, "config.json", err) != FERRY_OK ||
        fs_write_file(path, cfg->raw_text, cfg->raw_len, err) != FERRY_OK)
        return err->status;
    if (fs_join(path, sizeof path, tmp, "generation_config.json", err) != FERRY_OK)
        return err->status;
    if (e->generation) {
        /* The generation config the export was made for: the model's, with the cache choice. */
        const cJSON *base = cfg->generation;
        cJSON *gc = base ? cJSON_Duplicate(base, 1) : cJSON_CreateObject();
        char *text = NULL;
        if (gc) {
            cJSON_DeleteItemFromObjectCaseSensitive(gc, "cache_implementation");
            cJSON_DeleteItemFromObjectCaseSensitive(gc, "max_cache_len");
            if (e->gen.static_cache) {
                cJSON_AddStringToObject(gc, "cache_implementation", "static");
                cJSON_AddNumberToObject(gc, "max_cache_len", (double)e->gen.max_cache_len);
            }
            text = cJSON_Print(gc);
            cJSON_Delete(gc);
        }
        if (!text)
            return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        ferry_status wst = fs_write_file(path, text, strlen(text), err);
        free(text);
        if (wst != FERRY_OK)
            return wst;
    } else if (cfg->generation_text &&
               fs_write_file(path, cfg->generation_text, cfg->generation_len, err) != FERRY_OK) {
        return err->status;
    }
    if (e->genai_text &&
        (fs_join(path, sizeof path, tmp, GENAI_CONFIG_FILE, err) != FERRY_OK ||
         fs_write_file(path, e->genai_text, strlen(e->genai_text), err) != FERRY_OK))
        return err->status;
    if (e->genai_processor_text &&
        (fs_join(path, sizeof path, tmp, genai_processor_file(e), err) != FERRY_OK ||
         fs_write_file(path, e->genai_processor_text, strlen(e->genai_processor_text), err) !=
             FERRY_OK))
        return err->status;
    /* the bytes read when the export was made (tokenizer_files.h) */
    for (int i = 0; i < e->tokenizer.n; i++) {
        const tok_file *f = &e->tokenizer.f[i];
        if (fs_join(path, sizeof path, tmp, f->name, err) != FERRY_OK ||
            fs_write_file(path, f->data, f->len, err) != FERRY_OK)
            return err->status;
    }
    return fs_sync_dir(tmp, err);
}

/* After the swap, `tree` holds the old export: removes the files that were checked, then the
 * directory. Anything else found there is not ferry's to delete: the directory is moved out of
 * the temporary one (which a later cleaner would remove whole) and the error says where; if
 * that fails, the caller removes the lock file, and no cleaner touches a directory without one. */
static ferry_status remove_old(const char *shown, const char *parent, const char *base,
                               const char *tmp, const char *tree, const old_export *old,
                               fy_err *err)
{
    char note[512], name[NAME_MAX + 64], kept[PATH_MAX], skept[FS_SHORT_MAX];
    if (replace_remove(tree, old, note, sizeof note) == FERRY_OK)
        return FERRY_OK;
    snprintf(name, sizeof name, "%s.ferry-kept-%s", base, tmp + strlen(tmp) - 6);
    if (fs_join(kept, sizeof kept, parent, name, NULL) == FERRY_OK &&
        renameat2(AT_FDCWD, tree, AT_FDCWD, kept, RENAME_NOREPLACE) == 0)
        return fy_fail(err, FERRY_ERR_IO, "%s now holds the new export, but the old one was not "
                       "removed (%s): it is in %s", shown, note, fs_short(kept, skept,
                       sizeof skept));
    return fy_fail(err, FERRY_ERR_IO, "%s now holds the new export, but the old one was not "
                   "removed (%s): it is in %s", shown, note, fs_short(tree, skept, sizeof skept));
}

ferry_status ferry_exported_save(ferry_exported *e, const char *dir, int force)
{
    if (!e)
        return FERRY_ERR_INVALID_ARG;
    fy_err_clear(&e->err);
    fy_err *err = &e->err;
    free(e->save_warnings);
    e->save_warnings = NULL;
    char parent[PATH_MAX], base[256], target[PATH_MAX], tmp[PATH_MAX], tree[PATH_MAX];
    char lock[PATH_MAX], shown[FS_SHORT_MAX];
    fs_made *made = NULL; /* large (room for every component of a path): on the heap */
    old_export old = {0};
    int lock_fd = -1;
    struct stat st;
    tmp[0] = '\0';
    if (!dir || fs_split(dir, parent, sizeof parent, base, sizeof base, err) != FERRY_OK)
        return err->status ? err->status : fy_fail(err, FERRY_ERR_INVALID_ARG, "no output path");
    if (!e->model || !e->backend)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "export was loaded, not built: nothing to save");
    fs_short(dir, shown, sizeof shown);
    /* Refused up front: mkdtemp would fail with ENAMETOOLONG naming only the parent. */
    if (strlen(base) > BASE_NAME_MAX)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s: name too long for ferry's temporary "
                       "directory beside it (.<name>" TMP_TAG "<pid>-XXXXXX): the name is %zu "
                       "bytes, at most %d are allowed", shown, strlen(base), BASE_NAME_MAX);
    /* The destination by parent and name: "out/" would make lstat and rename follow a link. */
    if (fs_join(target, sizeof target, parent, base, err) != FERRY_OK)
        return err->status;
    bool exists = lstat(target, &st) == 0;
    /* An empty directory holds nothing to lose: it is the destination, with or without force,
     * replaced by a plain rename(2), which refuses a directory that is no longer empty. */
    bool empty = exists && S_ISDIR(st.st_mode) && is_empty_dir(target);
    if (empty)
        exists = false;
    /* --force is suggested only where it would replace what is there (a file
     * or a directory of the user's own was told to use it, and then refused with it) */
    if (exists && !force && S_ISDIR(st.st_mode)) {
        if (replace_check(target, dir, e->model->dir, &old, err) != FERRY_OK)
            return err->status;
        old_export_free(&old);
        return fy_fail(err, FERRY_ERR_EXISTS, "%s already exists (--force, or force=True in "
                       "Python, replaces an earlier export there)", shown);
    }
    if (exists && S_ISLNK(st.st_mode))
        return fy_fail(err, FERRY_ERR_EXISTS, "not replacing %s: it is a symbolic link (force "
                       "replaces an export directory, not a link)", shown);
    if (exists && !S_ISDIR(st.st_mode))
        return fy_fail(err, FERRY_ERR_EXISTS, "%s exists and is not a directory; not replacing it",
                       shown);
    /* Checked before the work, so that a refusal costs nothing, and again before the swap. */
    if (exists && replace_check(target, dir, e->model->dir, &old, err) != FERRY_OK)
        return err->status;
    /* Its missing parents are made, as transformers' save_pretrained and mkdir -p make them,
     * and removed again if the export fails. */
    made = malloc(sizeof *made);
    if (!made) {
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (fs_make_dirs(parent, made, err) != FERRY_OK) {
        char inner[sizeof err->msg];
        memcpy(inner, err->msg, sizeof inner);
        fy_refail(err, err->status, "cannot write %s: %s", shown, inner);
        goto fail;
    }
    clean_stale(parent, base);
    if (make_tmp(parent, base, tmp, &lock_fd, err) != FERRY_OK) {
        tmp[0] = '\0';
        goto wrap;
    }
    fs_join(lock, sizeof lock, tmp, LOCK_NAME, NULL);
    if (fs_join(tree, sizeof tree, tmp, TREE_NAME, err) != FERRY_OK)
        goto wrap;
    if (mkdir(tree, 0755) != 0) {
        char stree[FS_SHORT_MAX];
        fy_fail(err, errno == ENOSPC ? FERRY_ERR_NOSPACE : FERRY_ERR_IO, "cannot create %s: %s",
                fs_short(tree, stree, sizeof stree), strerror(errno));
        goto wrap;
    }
    chmod(tree, 0755);
    if (write_contents(e, tree, err) != FERRY_OK)
        goto wrap;
    /* The last moment to stop: past it the new export is swapped in whole. */
    if (ws_cancelled(e->cfg.cancel)) {
        fy_fail(err, FERRY_ERR_CANCELLED, "interrupted");
        goto wrap;
    }
    if (exists) {
        if (replace_check(target, dir, e->model->dir, &old, err) != FERRY_OK)
            goto fail;
        /* Swap in one step: readers see the old export or the new one, never neither. */
        if (renameat2(AT_FDCWD, tree, AT_FDCWD, target, RENAME_EXCHANGE) != 0) {
            fy_fail(err, FERRY_ERR_IO, "cannot replace %s: %s", shown, strerror(errno));
            goto fail;
        }
        /* What came out must be the directory just checked; if it changed in between, it goes
         * back untouched. */
        if (lstat(tree, &st) != 0 || st.st_dev != old.dev || st.st_ino != old.ino) {
            char stree[FS_SHORT_MAX];
            if (renameat2(AT_FDCWD, tree, AT_FDCWD, target, RENAME_EXCHANGE) != 0) {
                int e_ = errno;
                unlink(lock); /* holds what was in OUT: no cleaner may remove it */
                fy_fail(err, FERRY_ERR_IO, "%s changed while it was being replaced and could not "
                        "be put back (%s): what it held is in %s", shown, strerror(e_),
                        fs_short(tree, stree, sizeof stree));
                tmp[0] = '\0';
                goto fail;
            }
            fy_fail(err, FERRY_ERR_IO, "%s changed while it was being replaced; it was put back "
                    "as it was", shown);
            goto fail;
        }
        if (remove_old(shown, parent, base, tmp, tree, &old, err) != FERRY_OK) {
            unlink(lock);
            rmdir(tmp);
            tmp[0] = '\0';
            free(e->dir);
            e->dir = strdup(dir);
            goto fail;
        }
    } else if (empty) {
        /* the new directory takes the empty one's place and its permissions (a setgid bit, a
         * group's write) */
        if (chmod(tree, st.st_mode & 07777) != 0) {
            char line[FS_SHORT_MAX + 200];
            snprintf(line, sizeof line, "%s keeps ferry's permissions (0755), not the empty "
                     "directory's %04o: %s", shown, (unsigned)(st.st_mode & 07777),
                     strerror(errno));
            if (exp_add_warning(&e->save_warnings, line) != FERRY_OK) {
                fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
                goto fail;
            }
        }
        if (rename(tree, target) != 0) {
            int e_ = errno;
            if (e_ == ENOTEMPTY || e_ == EEXIST)
                fy_fail(err, FERRY_ERR_EXISTS, "not writing into %s: it was empty when the export "
                        "started, but something was put in it since; it is left as it is",
                        shown);
            else if (e_ == EBUSY)
                fy_fail(err, FERRY_ERR_IO, "cannot use %s: it is a mount point (or in use), and "
                        "ferry puts a complete export in place by renaming a new directory over "
                        "the empty one; name a directory inside it (%s/export)", shown, shown);
            else
                fy_fail(err, FERRY_ERR_IO, "cannot create %s: %s", shown, strerror(e_));
            goto fail;
        }
    } else if (renameat2(AT_FDCWD, tree, AT_FDCWD, target, RENAME_NOREPLACE) != 0) {
        fy_fail(err, errno == EEXIST ? FERRY_ERR_EXISTS : FERRY_ERR_IO, "cannot create %s: %s",
                shown, strerror(errno));
        goto fail;
    }
    unlink(lock);
    rmdir(tmp); /* a cleaner may have taken it once it was empty */
    close(lock_fd);
    old_export_free(&old);
    free(made);
    if (fs_sync_dir(parent, err) != FERRY_OK)
        return err->status; /* the export is in place; only its durability is in doubt */
    free(e->dir);
    e->dir = strdup(dir);
    provenance_note_dir(e);
    return FERRY_OK;
wrap:
    if (err->status == FERRY_ERR_CANCELLED) {
        fy_refail(err, err->status, "export to %s interrupted: nothing was written%s", shown,
                  exists ? "; the export already there is untouched" : "");
    } else {
        /* The file at fault is inside the temporary directory, which is about to go: say which
         * export it was for. */
        char inner[sizeof err->msg];
        memcpy(inner, err->msg, sizeof inner);
        fy_refail(err, err->status, "cannot write %s: %s", shown, inner);
    }
fail:
    if (tmp[0])
        fs_remove_tree(tmp);
    if (made)
        fs_unmake_dirs(parent, made);
    free(made);
    if (lock_fd >= 0)
        close(lock_fd);
    old_export_free(&old);
    return err->status;
}

ferry_status ferry_exported_load(const char *dir, const char *subfolder, ferry_exported **out)
{
    return exp_load(dir, subfolder, true, out);
}

ferry_status ferry_exported_verify(ferry_exported *e)
{
    if (!e)
        return FERRY_ERR_INVALID_ARG;
    fy_err_clear(&e->err);
    if (!e->dir || !e->manifest)
        return fy_fail(&e->err, FERRY_ERR_INVALID_ARG, "export not saved: no files to verify");
    return manifest_verify_files(e->manifest, e->dir, &e->err);
}

ferry_status exp_load(const char *dir, const char *subfolder, bool check_sizes,
                      ferry_exported **out)
{
    ferry_exported *e = calloc(1, sizeof *e);
    *out = e;
    if (!e)
        return FERRY_ERR_NOMEM;
    e->sizes_unchecked = !check_sizes;
    fy_err *err = &e->err;
    char path[PATH_MAX];
    if (!dir)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "no export directory given");
    if (subfolder && *subfolder) {
        if (!fs_safe_relative(subfolder))
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "subfolder '%s' must be a relative path "
                           "inside %s", subfolder, dir);
        if (fs_join(path, sizeof path, dir, subfolder, err) != FERRY_OK)
            return err->status;
    } else if (strlen(dir) < sizeof path) {
        memcpy(path, dir, strlen(dir) + 1);
    } else {
        char shown[FS_SHORT_MAX];
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s: %s", fs_short(dir, shown, sizeof shown),
                       strerror(ENAMETOOLONG));
    }
    e->dir = strdup(path);
    if (!e->dir)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    char mpath[PATH_MAX];
    if (fs_join(mpath, sizeof mpath, path, "export.json", err) != FERRY_OK)
        return err->status;
    if (json_load_file(mpath, &exp_manifest_limits, &e->manifest, err) != FERRY_OK)
        return err->status;
    if (manifest_validate(e->manifest, path, e, err) != FERRY_OK)
        return err->status;
    /* The directory checked, not its name: the runtimes open the files later, perhaps after
     * the working directory changed, and must open these files. */
    char *real = realpath(path, NULL);
    if (real) {
        free(e->dir);
        e->dir = real;
    }
    if (!(e->manifest_text = cJSON_Print(e->manifest)))
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    provenance_note_dir(e);
    return FERRY_OK;
}

void ferry_exported_free(ferry_exported *e)
{
    if (!e)
        return;
    for (int i = 0; i < e->n_components; i++) {
        free(e->comps[i].name);
        free(e->comps[i].role);
        free(e->comps[i].file);
        free(e->comps[i].data_file);
        g_free(e->lowered[i].graph);
    }
    cJSON_Delete(e->manifest);
    free(e->manifest_text);
    free(e->dir);
    free(e->warnings);
    free(e->save_warnings);
    tok_files_free(&e->tokenizer);
    free(e->genai_text);
    free(e->genai_processor_text);
    free(e->description);
    free(e);
}

const char *ferry_exported_errmsg(const ferry_exported *e)
{
    if (!e)
        return "out of memory";
    return e->err.status == FERRY_OK ? "" : e->err.msg;
}

const char *ferry_exported_manifest(const ferry_exported *e)
{
    return e ? e->manifest_text : NULL;
}

const char *ferry_exported_dir(const ferry_exported *e)
{
    return e ? e->dir : NULL;
}

const char *ferry_exported_warnings(const ferry_exported *e)
{
    return e && e->warnings ? e->warnings : "";
}

const char *ferry_exported_save_warnings(const ferry_exported *e)
{
    return e && e->save_warnings ? e->save_warnings : "";
}

int ferry_exported_component_count(const ferry_exported *e)
{
    return e ? e->n_components : 0;
}

const char *ferry_exported_component_name(const ferry_exported *e, int i)
{
    return e && i >= 0 && i < e->n_components ? e->comps[i].name : NULL;
}

const char *ferry_exported_component_file(const ferry_exported *e, int i)
{
    return e && i >= 0 && i < e->n_components ? e->comps[i].file : NULL;
}

const char *ferry_exported_component_data_file(const ferry_exported *e, int i)
{
    return e && i >= 0 && i < e->n_components ? e->comps[i].data_file : NULL;
}
