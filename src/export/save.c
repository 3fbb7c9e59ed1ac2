/* save.c — ExportedModel on disk: atomic save (temporary sibling directory, fsync, rename or
 * exchange) and load (manifest validated, paths confined). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/onnx/onnx_writer.h"
#include "export/internal.h"
#include "util/fs.h"
#include "util/json.h"

#define TMP_TAG ".ferry-tmp-"

/* The largest export.json ferry writes, a generation export of 1024 layers (the config cap),
 * lists ~6,000 inputs and outputs per component: ~2e5 values and ~4 MB, nested 7 deep. */
static const json_limits MANIFEST_LIMITS = {
    .kind = "manifest", .max_bytes = 16u << 20, .max_values = 1000000, .max_depth = 32,
    .utf8 = true,
};

/* Removes temporary directories that earlier, killed runs left next to `base`: they are named
 * .<base>.ferry-tmp-<pid>-XXXXXX and their pid is no longer alive. */
static void clean_stale(const char *parent, const char *base)
{
    DIR *d = opendir(parent);
    if (!d)
        return;
    char prefix[512];
    snprintf(prefix, sizeof prefix, ".%s" TMP_TAG, base);
    size_t plen = strlen(prefix);
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (strncmp(ent->d_name, prefix, plen) != 0)
            continue;
        long pid = strtol(ent->d_name + plen, NULL, 10);
        if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) {
            char path[4096 + 512];
            snprintf(path, sizeof path, "%s/%s", parent, ent->d_name);
            fs_remove_tree(path);
        }
    }
    closedir(d);
}

static void progress_adapter(void *user, uint64_t done, uint64_t total, const char *what)
{
    const ferry_export_config *cfg = user;
    if (cfg->progress)
        cfg->progress(cfg->progress_user, done, total, what);
}

static ferry_status write_contents(ferry_exported *e, const char *tmp, fy_err *err)
{
    ws_progress pr = {.fn = e->cfg.progress ? progress_adapter : NULL, .user = &e->cfg};
    /* One data file for all components: weights are stored once and share page cache at run
     * time. */
    onnx_data *data = onnx_data_new(e->comps[0].data_file);
    if (!data)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    ferry_status st = FERRY_OK;
    for (int i = 0; i < e->n_components && st == FERRY_OK; i++)
        st = onnx_data_add(data, e->comps[i].graph, err);
    if (st == FERRY_OK)
        st = onnx_data_write(data, tmp, &pr, err);
    for (int i = 0; i < e->n_components && st == FERRY_OK; i++) {
        exp_component *c = &e->comps[i];
        onnx_options opt = {.opset = e->cfg.opset, .graph_name = c->name};
        st = onnx_write_model(c->graph, data, &opt, tmp, c->file, err);
    }
    onnx_data_free(data);
    if (st != FERRY_OK)
        return st;
    char path[4096], src[4096 + 64];
    snprintf(path, sizeof path, "%s/export.json", tmp);
    if (fs_write_file(path, e->manifest_text, strlen(e->manifest_text), err) != FERRY_OK)
        return err->status;
    snprintf(src, sizeof src, "%s/config.json", e->model->dir);
    snprintf(path, sizeof path, "%s/config.json", tmp);
    if (fs_copy_file(src, path, err) != FERRY_OK)
        return err->status;
    snprintf(path, sizeof path, "%s/generation_config.json", tmp);
    if (e->generation) {
        /* The generation config the export was made for: the model's, with the cache choice. */
        const cJSON *base = e->model->cfg.generation;
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
    } else {
        snprintf(src, sizeof src, "%s/generation_config.json", e->model->dir);
        if (access(src, F_OK) == 0 && fs_copy_file(src, path, err) != FERRY_OK)
            return err->status;
    }
    return fs_sync_dir(tmp, err);
}

ferry_status ferry_exported_save(ferry_exported *e, const char *dir, int force)
{
    if (!e)
        return FERRY_ERR_INVALID_ARG;
    fy_err_clear(&e->err);
    fy_err *err = &e->err;
    char parent[4096], base[256], tmp[4096 + 512];
    struct stat st;
    tmp[0] = '\0';
    if (!dir || fs_split(dir, parent, sizeof parent, base, sizeof base, err) != FERRY_OK)
        return err->status ? err->status : fy_fail(err, FERRY_ERR_INVALID_ARG, "no output path");
    if (!e->model || !e->comps[0].graph)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "export was loaded, not built: nothing to save");
    bool exists = lstat(dir, &st) == 0;
    if (exists && !force)
        return fy_fail(err, FERRY_ERR_EXISTS, "%s already exists (pass --force to replace it)", dir);
    if (exists && !S_ISDIR(st.st_mode))
        return fy_fail(err, FERRY_ERR_EXISTS, "%s exists and is not a directory; not replacing it",
                       dir);
    if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
        return fy_fail(err, FERRY_ERR_IO, "cannot write %s: parent directory %s does not exist "
                       "or is not a directory", dir, parent);
    clean_stale(parent, base);
    snprintf(tmp, sizeof tmp, "%s/.%s" TMP_TAG "%ld-XXXXXX", parent, base, (long)getpid());
    if (!mkdtemp(tmp)) {
        tmp[0] = '\0';
        return fy_fail(err, errno == ENOSPC ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                       "cannot write %s: cannot create a directory in %s: %s", dir, parent,
                       strerror(errno));
    }
    chmod(tmp, 0755);
    if (write_contents(e, tmp, err) != FERRY_OK) {
        /* The file at fault is inside the temporary directory, which is about to go: say which
         * export it was for. */
        char inner[sizeof err->msg];
        memcpy(inner, err->msg, sizeof inner);
        fy_refail(err, err->status, "cannot write %s: %s", dir, inner);
        goto fail;
    }
    if (exists) {
        /* Swap in one step: readers see the old export or the new one, never neither. */
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) != 0) {
            fy_fail(err, FERRY_ERR_IO, "cannot replace %s: %s", dir, strerror(errno));
            goto fail;
        }
        fs_remove_tree(tmp); /* now the old export */
    } else if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_NOREPLACE) != 0) {
        fy_fail(err, errno == EEXIST ? FERRY_ERR_EXISTS : FERRY_ERR_IO, "cannot create %s: %s", dir,
                strerror(errno));
        goto fail;
    }
    if (fs_sync_dir(parent, err) != FERRY_OK)
        return err->status; /* the export is in place; only its durability is in doubt */
    free(e->dir);
    e->dir = strdup(dir);
    return FERRY_OK;
fail:
    if (tmp[0])
        fs_remove_tree(tmp);
    return err->status;
}

ferry_status ferry_exported_load(const char *dir, const char *subfolder, ferry_exported **out)
{
    ferry_exported *e = calloc(1, sizeof *e);
    *out = e;
    if (!e)
        return FERRY_ERR_NOMEM;
    fy_err *err = &e->err;
    char path[4096];
    if (!dir)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "no export directory given");
    if (subfolder && *subfolder) {
        if (!fs_safe_relative(subfolder))
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "subfolder '%s' must be a relative path "
                           "inside %s", subfolder, dir);
        snprintf(path, sizeof path, "%s/%s", dir, subfolder);
    } else {
        snprintf(path, sizeof path, "%s", dir);
    }
    e->dir = strdup(path);
    if (!e->dir)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    char mpath[4096 + 16];
    snprintf(mpath, sizeof mpath, "%s/export.json", path);
    if (json_load_file(mpath, &MANIFEST_LIMITS, &e->manifest, err) != FERRY_OK)
        return err->status;
    if (manifest_validate(e->manifest, path, e, err) != FERRY_OK)
        return err->status;
    if (!(e->manifest_text = cJSON_Print(e->manifest)))
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
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
        g_free(e->comps[i].graph);
    }
    cJSON_Delete(e->manifest);
    free(e->manifest_text);
    free(e->dir);
    free(e->warnings);
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
