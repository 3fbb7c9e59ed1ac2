/* replace.c — what `--force` may replace: an earlier export, and nothing else.
 *
 * A directory the user names may hold anything; deleting it because a flag was passed loses
 * data no one meant to lose. So the directory is replaced only when every entry in it is
 * accounted for by its own export.json (ferry's schema, or transformers' ExportedModel
 * save_pretrained), and never when it is, holds, or lies inside the model being exported.
 * What was checked (each file's name and inode) is remembered, so that removing the old export
 * after the swap removes exactly those files and leaves whatever appeared meanwhile. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export/internal.h"
#include "export/transformers.h"
#include "model/safetensors.h"
#include "util/fs.h"
#include "util/grow.h"
#include "util/json.h"
#include "util/text.h"

/* An existing export.json is read before --force replaces its directory: any export, of ferry
 * or of transformers (which may hold more components than ferry writes), up to this many. */
#define MAX_COMPONENTS 64

typedef struct names {
    char **v;
    size_t n, cap;
} names;

static ferry_status names_add(names *s, const char *name, size_t len, fy_err *err)
{
    char **grown = fy_grow(s->v, &s->cap, s->n + 1, sizeof *grown);
    if (!grown)
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    s->v = grown;
    if (!(s->v[s->n] = strndup(name, len)))
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    s->n++;
    return FERRY_OK;
}

static bool names_has(const names *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], name) == 0)
            return true;
    return false;
}

static void names_free(names *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

void old_export_free(old_export *o)
{
    for (size_t i = 0; i < o->n; i++)
        free(o->files[i].name);
    free(o->files);
    memset(o, 0, sizeof *o);
}

/* Every refusal: "not replacing OUT: <why>", with OUT as the user spelled it (shortened). */
static ferry_status refuse(fy_err *err, const char *out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ferry_status refuse(fy_err *err, const char *out, const char *fmt, ...)
{
    char shown[FS_SHORT_MAX], why[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return fy_refail(err, FERRY_ERR_EXISTS, "not replacing %s: %s",
                     fs_short(out, shown, sizeof shown), why);
}

/* Whether directory `inner` is `outer` or lies under it: 1, 0, or -1 with errno set when that
 * cannot be told. Walks up through ".." from the directory itself (O_PATH descriptors), comparing
 * device and inode with `outer`, so that a bind mount or a second spelling of the same directory
 * is still recognised, and a path longer than PATH_MAX (a relative one under a deep working
 * directory), which realpath cannot spell, is walked all the same. */
static int is_within(const char *inner, const struct stat *outer)
{
    int fd = open(inner, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st, up;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    for (;;) {
        if (st.st_dev == outer->st_dev && st.st_ino == outer->st_ino) {
            close(fd);
            return 1;
        }
        int parent = openat(fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
        int e = errno;
        close(fd);
        if (parent < 0) {
            errno = e;
            return -1;
        }
        if (fstat(parent, &up) != 0) {
            e = errno;
            close(parent);
            errno = e;
            return -1;
        }
        if (up.st_dev == st.st_dev && up.st_ino == st.st_ino) {   /* "/" is its own parent */
            close(parent);
            return 0;
        }
        fd = parent;
        st = up;
    }
}

static ferry_status check_source(const char *out, const char *shown, const struct stat *out_st,
                                 const char *src, fy_err *err)
{
    struct stat src_st;
    char qsrc[FS_SHORT_MAX];
    fs_short(src, qsrc, sizeof qsrc);
    if (stat(src, &src_st) != 0)
        return FERRY_OK; /* nothing left to protect */
    if (src_st.st_dev == out_st->st_dev && src_st.st_ino == out_st->st_ino)
        return refuse(err, shown, "it is the model being exported (%s)", qsrc);
    int within = is_within(src, out_st);
    if (within > 0)
        return refuse(err, shown, "it contains the model being exported (%s)", qsrc);
    if (within == 0 && (within = is_within(out, &src_st)) > 0)
        return refuse(err, shown, "it is inside the model being exported (%s)", qsrc);
    if (within < 0)
        return refuse(err, shown, "cannot tell whether it holds or lies inside the model being "
                      "exported (%s): %s", qsrc, strerror(errno));
    return FERRY_OK;
}

/* The model's files may be links into `out` (a hand-made layout): removing `out` would
 * break the checkpoint just exported. Compares every link target in `src` with `o`'s files. */
static ferry_status check_links_into(const char *shown, const char *src, const old_export *o,
                                     fy_err *err)
{
    DIR *d = opendir(src);
    if (!d)
        return FERRY_OK;
    struct dirent *ent;
    ferry_status status = FERRY_OK;
    while (status == FERRY_OK && (ent = readdir(d)) != NULL) {
        struct stat lst, st;
        if (fstatat(dirfd(d), ent->d_name, &lst, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISLNK(lst.st_mode) || fstatat(dirfd(d), ent->d_name, &st, 0) != 0)
            continue;
        for (size_t i = 0; i < o->n; i++)
            if (o->files[i].dev == st.st_dev && o->files[i].ino == st.st_ino) {
                char qname[TEXT_QUOTE_MAX], qfile[TEXT_QUOTE_MAX];
                status = refuse(err, shown, "the model being exported links '%s' to its file "
                                "'%s'", text_quote(ent->d_name, qname, sizeof qname),
                                text_quote(o->files[i].name, qfile, sizeof qfile));
                break;
            }
    }
    closedir(d);
    return status;
}

/* A component name transformers turns into a file name: no path, nothing hidden, printable. */
static bool plain_name(const char *s)
{
    if (!*s || *s == '.')
        return false;
    for (; *s; s++)
        if (*s == '/' || *s == '\\' || (unsigned char)*s < 0x20 || *s == 0x7F)
            return false;
    return true;
}

/* config.json of a model whose config class lives in its repository (auto_map.AutoConfig,
 * "module.Class" or "repo--module.Class"): PreTrainedConfig.save_pretrained copies that module
 * next to it (custom_object_save). Relative imports it copies too cannot be told from the
 * config: a directory holding them is refused. */
static ferry_status custom_config_module(const char *out, names *allowed, fy_err *err)
{
    char path[PATH_MAX];
    cJSON *cfg = NULL;
    if (fs_join(path, sizeof path, out, "config.json", NULL) != FERRY_OK ||
        json_load_file(path, &exp_manifest_limits, &cfg, NULL) != FERRY_OK)
        return FERRY_OK; /* no module named: nothing more is allowed */
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(cfg, "auto_map");
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(map, "AutoConfig");
    ferry_status status = FERRY_OK;
    if (cJSON_IsString(ref)) {
        const char *s = ref->valuestring, *repo = strstr(s, "--");
        if (repo)
            s = repo + 2;
        const char *dot = strrchr(s, '.');
        size_t len = dot ? (size_t)(dot - s) : 0;
        bool ident = len > 0 && len < 200;
        for (size_t i = 0; i < len && ident; i++)
            ident = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
                    (s[i] >= '0' && s[i] <= '9') || s[i] == '_';
        if (ident) {
            char file[256];
            snprintf(file, sizeof file, "%.*s.py", (int)len, s);
            status = names_add(allowed, file, strlen(file), err);
        }
    }
    cJSON_Delete(cfg);
    return status;
}

/* transformers' ExportedModel.save_pretrained: {"schema_version": 1, "export_format": F,
 * "components": {name: {"file": <prefix><name><suffix>, "metadata": {...}}}}; the program files
 * are each component's file and its format's sidecar, then config.json and
 * generation_config.json (and a remote-code config's module). */
static ferry_status transformers_files(const cJSON *m, const char *out, const char *mpath,
                                       names *allowed, fy_err *err)
{
    char qmpath[FS_SHORT_MAX], qname[TEXT_QUOTE_MAX];
    fs_short(mpath, qmpath, sizeof qmpath);
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(m, "schema_version");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(m, "export_format");
    const cJSON *comps = cJSON_GetObjectItemCaseSensitive(m, "components");
    if (!cJSON_IsNumber(ver) || ver->valuedouble != 1)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: schema_version must be 1", qmpath);
    const tf_format *f = cJSON_IsString(fmt) ? tf_format_find(fmt->valuestring) : NULL;
    if (!f)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: export_format must be one of %s", qmpath,
                       tf_format_names());
    int n = cJSON_GetArraySize(comps);
    if (!cJSON_IsObject(comps) || n == 0 || n > MAX_COMPONENTS)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s: 'components' must be an object of 1 to %d "
                       "components", qmpath, MAX_COMPONENTS);
    const cJSON *c;
    cJSON_ArrayForEach(c, comps) {
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(c, "file");
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(c, "metadata");
        text_quote(c->string, qname, sizeof qname);
        if (!plain_name(c->string) || strlen(c->string) > 200)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: component name '%s' is not a plain name",
                           qmpath, qname);
        char want[256], sidecar[256];
        snprintf(want, sizeof want, "%s%s%s", f->prefix, c->string, f->suffix);
        if (!cJSON_IsObject(c) || !cJSON_IsString(file) || strcmp(file->valuestring, want) != 0 ||
            !cJSON_IsObject(meta))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: component '%s' needs \"file\": \"%s\" and "
                           "a \"metadata\" object, as transformers writes them", qmpath, qname,
                           want);
        char path[PATH_MAX];
        struct stat st;
        if (fs_join(path, sizeof path, out, want, err) != FERRY_OK)
            return err->status;
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: component '%s': '%s' is missing or not a "
                           "regular file", qmpath, qname, want);
        if (names_add(allowed, want, strlen(want), err) != FERRY_OK)
            return err->status;
        if (tf_sidecar(f, want, sidecar, sizeof sidecar) &&
            names_add(allowed, sidecar, strlen(sidecar), err) != FERRY_OK)
            return err->status;
    }
    return custom_config_module(out, allowed, err);
}

/* ferry's own schema: validated as ferry_exported_load does (files inside, regular), then
 * every "file" and "data_files" entry is one of the export's files. */
static ferry_status ferry_files(const char *out, names *allowed, fy_err *err)
{
    ferry_exported *x = NULL;
    ferry_status status = exp_load(out, NULL, false, &x);
    if (status != FERRY_OK) {
        fy_refail(err, status, "%s", x ? x->err.msg : "out of memory");
        ferry_exported_free(x);
        return status;
    }
    const cJSON *c, *d;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(x->manifest, "components")) {
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(c, "file");
        if ((status = names_add(allowed, file->valuestring, strlen(file->valuestring), err)))
            break;
        cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(c, "data_files"))
            if ((status = names_add(allowed, d->valuestring, strlen(d->valuestring), err)))
                break;
        if (status)
            break;
    }
    /* onnxruntime-genai's config, when it lists one (loading checked its name) */
    const cJSON *og = cJSON_GetObjectItemCaseSensitive(x->manifest, "onnxruntime_genai");
    if (!status && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(og, "config")))
        status = names_add(allowed, GENAI_CONFIG_FILE, strlen(GENAI_CONFIG_FILE), err);
    const cJSON *processor = cJSON_GetObjectItemCaseSensitive(og, "processor_config");
    if (!status && cJSON_IsString(processor)) /* loading checked it is a processor's name */
        status = names_add(allowed, processor->valuestring, strlen(processor->valuestring), err);
    /* the tokenizer files it lists (loading checked each is a tokenizer file name) */
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(x->manifest, "tokenizer_files"))
        if (!status)
            status = names_add(allowed, c->valuestring, strlen(c->valuestring), err);
    ferry_exported_free(x);
    return status;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every entry of `out`, sorted (so that the one named in a refusal does not depend on the
 * file system's order). */
static ferry_status list_dir(const char *out, const char *shown, names *entries, fy_err *err)
{
    DIR *d = opendir(out);
    if (!d)
        return refuse(err, shown, "cannot list it: %s", strerror(errno));
    struct dirent *ent;
    ferry_status status = FERRY_OK;
    while (status == FERRY_OK && (ent = readdir(d)) != NULL)
        if (strcmp(ent->d_name, ".") != 0 && strcmp(ent->d_name, "..") != 0)
            status = names_add(entries, ent->d_name, strlen(ent->d_name), err);
    closedir(d);
    if (status == FERRY_OK && entries->n > 1)
        qsort(entries->v, entries->n, sizeof *entries->v, compare_names);
    return status;
}

/* An export made before ferry carried openvino-tokenizers' files, completed by hand with them:
 * ferry cannot tell that it wrote them (export.json does not list them), and a user's own
 * conversion (other options, another openvino-tokenizers) is not ferry's to delete. Refused,
 * naming every such file and what to do. */
static ferry_status refuse_converted(fy_err *err, const char *shown, const names *entries,
                                     const names *allowed)
{
    char files[256] = "";
    size_t n = 0;
    for (size_t i = 0; i < entries->n; i++) /* those checked already were moved out (NULL) */
        if (entries->v[i] && tok_is_converted_name(entries->v[i]) &&
            !names_has(allowed, entries->v[i])) {
            size_t used = strlen(files);
            snprintf(files + used, sizeof files - used, "%s%s", n++ ? ", " : "", entries->v[i]);
        }
    return refuse(err, shown, "it holds %s, which its export.json does not list (converted from "
                  "the tokenizer after the export was written; ferry deletes only the files it "
                  "wrote): delete or move %s, then --force replaces the export (ferry's Python "
                  "API and the `ferry` command pip installs now write them with an OpenVINO "
                  "export)", files, n == 1 ? "it" : "them");
}

ferry_status replace_check(const char *out, const char *shown, const char *src, old_export *o,
                           fy_err *err)
{
    struct stat st;
    names allowed = {0}, entries = {0};
    char mpath[PATH_MAX], qname[TEXT_QUOTE_MAX];
    cJSON *m = NULL;
    ferry_status status;

    old_export_free(o);
    if (lstat(out, &st) != 0)
        return refuse(err, shown, "%s", strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return refuse(err, shown, "%s", S_ISLNK(st.st_mode) ? "it is a symbolic link, not an "
                      "export directory" : "it is not a directory");
    o->dev = st.st_dev;
    o->ino = st.st_ino;
    if (src && (status = check_source(out, shown, &st, src, err)) != FERRY_OK)
        return status;
    if ((status = fs_join(mpath, sizeof mpath, out, "export.json", err)) != FERRY_OK)
        return status;
    if (lstat(mpath, &st) != 0 || !S_ISREG(st.st_mode))
        return refuse(err, shown, "it holds no export.json, so it is not an export (--force "
                      "replaces only an earlier ferry or transformers export)");
    if ((status = json_load_file(mpath, &exp_manifest_limits, &m, err)) != FERRY_OK)
        goto refused;
    status = names_add(&allowed, "export.json", 11, err);
    if (!status)
        status = names_add(&allowed, "config.json", 11, err);
    if (!status)
        status = names_add(&allowed, "generation_config.json", 22, err);
    if (status)
        goto done;
    /* Repeated keys: cJSON would check the first "components" or "file", Python's json (which
     * transformers loads it with) use the last. ferry's schema gets this in ferry_files. */
    if (tf_is_transformers_manifest(m))
        status = manifest_check_tree(m, out, err) ? err->status
                                                  : transformers_files(m, out, mpath, &allowed, err);
    else
        status = ferry_files(out, &allowed, err);
    if (status != FERRY_OK)
        goto refused;
    if ((status = list_dir(out, shown, &entries, err)) != FERRY_OK)
        goto done;
    for (size_t i = 0; i < entries.n; i++) {
        const char *name = entries.v[i];
        text_quote(name, qname, sizeof qname);
        if (tok_is_converted_name(name) && !names_has(&allowed, name)) {
            status = refuse_converted(err, shown, &entries, &allowed);
            goto done;
        }
        if (name[0] == '.' || !names_has(&allowed, name)) {
            status = refuse(err, shown, "it holds '%s', which is not a file of the export its "
                            "export.json describes", qname);
            goto done;
        }
        char path[PATH_MAX];
        if ((status = fs_join(path, sizeof path, out, name, err)) != FERRY_OK)
            goto done;
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            status = refuse(err, shown, "'%s' is %s, not a file of an export", qname,
                            S_ISDIR(st.st_mode) ? "a directory" : S_ISLNK(st.st_mode)
                                ? "a symbolic link" : "not a regular file");
            goto done;
        }
        old_file *grown = realloc(o->files, (o->n + 1) * sizeof *grown);
        if (!grown) {
            status = fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
            goto done;
        }
        o->files = grown;
        o->files[o->n] = (old_file){.name = entries.v[i], .dev = st.st_dev, .ino = st.st_ino,
                                    .ctime = st.st_ctim};
        entries.v[i] = NULL;
        o->n++;
    }
    if (src)
        status = check_links_into(shown, src, o, err);
    goto done;
refused: {
        char inner[sizeof err->msg];
        memcpy(inner, err->msg, sizeof inner);
        status = refuse(err, shown, "%s (--force replaces only a valid export)", inner);
    }
done:
    for (size_t i = 0; i < entries.n; i++)
        free(entries.v[i]);
    free(entries.v);
    names_free(&allowed);
    cJSON_Delete(m);
    if (status != FERRY_OK)
        old_export_free(o);
    return status;
}

ferry_status replace_remove(const char *old_dir, const old_export *o, char *kept_note,
                            size_t note_size)
{
    int fd = open(old_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    kept_note[0] = '\0';
    if (fd < 0) {
        snprintf(kept_note, note_size, "%s", strerror(errno));
        return FERRY_ERR_IO;
    }
    const char *first_left = NULL;
    for (size_t i = 0; i < o->n; i++) {
        struct stat st;
        /* Only the very file that was checked, unchanged: a name replaced or a file rewritten
         * since then is left alone. */
        const old_file *f = &o->files[i];
        if (fstatat(fd, f->name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (!S_ISREG(st.st_mode) || st.st_dev != f->dev || st.st_ino != f->ino ||
            st.st_ctim.tv_sec != f->ctime.tv_sec || st.st_ctim.tv_nsec != f->ctime.tv_nsec ||
            unlinkat(fd, f->name, 0) != 0)
            first_left = first_left ? first_left : f->name;
    }
    close(fd);
    if (!first_left && rmdir(old_dir) == 0)
        return FERRY_OK;
    char q[TEXT_QUOTE_MAX];
    if (first_left)
        snprintf(kept_note, note_size, "its '%s' changed after it was checked",
                 text_quote(first_left, q, sizeof q));
    else if (errno == ENOTEMPTY || errno == EEXIST)
        snprintf(kept_note, note_size, "files appeared in it after it was checked");
    else
        snprintf(kept_note, note_size, "%s", strerror(errno));
    return FERRY_ERR_IO;
}
