/* provenance.c — where an export came from and what it was checked with: export.json's
 * "source" (the checkpoint, which a validation's eager reference reads) and "validated_with"
 * (the package versions a validation passed with, written into a saved export atomically). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export/internal.h"
#include "model/safetensors.h"
#include "util/fs.h"
#include "util/text.h"

#define VALIDATED_KEY "validated_with"
#define MAX_GROUPS 16
#define MAX_PACKAGES 64
#define MAX_NAME 128

static const json_limits record_limits = {
    .kind = "validation record", .max_bytes = 64u << 10,
    .max_values = 2 * MAX_GROUPS * MAX_PACKAGES, .max_depth = 4, .utf8 = true,
};

/* A name or version: non-empty, short, and nothing ferry_escape would change. */
static bool plain_name(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n <= MAX_NAME && text_hidden_at(s, n) == n;
}

/* `text` as a string, or null where export.json could not hold it: a path with a control or
 * invalid character would make the whole manifest refuse to load (manifest_check_tree). */
static void add_text_or_null(cJSON *o, const char *key, const char *text)
{
    if (text && text_hidden_at(text, strlen(text)) == strlen(text))
        cJSON_AddStringToObject(o, key, text);
    else
        cJSON_AddNullToObject(o, key);
}

cJSON *provenance_source(const ferry_model *m)
{
    cJSON *o = cJSON_CreateObject();
    char real[PATH_MAX];
    add_text_or_null(o, "model", m->source);
    add_text_or_null(o, "revision", m->revision);
    /* A relative directory means nothing once the working directory changes; a hub id's
     * snapshot folder is what was read at that revision. */
    add_text_or_null(o, "path", realpath(m->dir, real) ? real : NULL);
    return o;
}

/* A second member of `parent` named like `item` (cJSON's lookup returns the first). */
static bool repeated(const cJSON *parent, const cJSON *item)
{
    return cJSON_GetObjectItemCaseSensitive(parent, item->string) != item;
}

/* {"group": {"package": "version", ...}, ...} within the caps; `what` starts each message. */
static ferry_status check_versions(const cJSON *v, const char *what, ferry_status status,
                                   fy_err *err)
{
    char q1[TEXT_QUOTE_MAX], q2[TEXT_QUOTE_MAX];
    if (!cJSON_IsObject(v))
        return fy_fail(err, status, "%s must be an object of groups, each an object of package "
                       "name -> version string", what);
    int groups = 0;
    const cJSON *g, *p;
    cJSON_ArrayForEach(g, v) {
        if (++groups > MAX_GROUPS)
            return fy_fail(err, status, "%s: more than %d groups", what, MAX_GROUPS);
        if (!plain_name(g->string) || repeated(v, g) || !cJSON_IsObject(g))
            return fy_fail(err, status, "%s: group '%s' must be a unique name of 1 to %d plain "
                           "characters holding an object of package name -> version string",
                           what, text_quote(g->string, q1, sizeof q1), MAX_NAME);
        int packages = 0;
        cJSON_ArrayForEach(p, g) {
            if (++packages > MAX_PACKAGES)
                return fy_fail(err, status, "%s: group '%s' lists more than %d packages", what,
                               text_quote(g->string, q1, sizeof q1), MAX_PACKAGES);
            if (!plain_name(p->string) || repeated(g, p) || !cJSON_IsString(p) ||
                !plain_name(p->valuestring))
                return fy_fail(err, status, "%s: '%s' in group '%s' must be a unique package "
                               "name with a version string, each 1 to %d plain characters",
                               what, text_quote(p->string, q1, sizeof q1),
                               text_quote(g->string, q2, sizeof q2), MAX_NAME);
        }
    }
    return FERRY_OK;
}

ferry_status provenance_check(const cJSON *m, const char *dir, fy_err *err)
{
    char what[PATH_MAX + 64];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, VALIDATED_KEY);
    snprintf(what, sizeof what, "%s/export.json: " VALIDATED_KEY, dir);
    if (v && check_versions(v, what, FERRY_ERR_FORMAT, err) != FERRY_OK)
        return err->status;
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(m, "source"), *s;
    if (src && !cJSON_IsObject(src))
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: 'source' must be an object", dir);
    cJSON_ArrayForEach(s, src) {
        if (!cJSON_IsString(s) && !cJSON_IsNull(s))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: source's members must be "
                           "strings or null", dir);
    }
    return FERRY_OK;
}

void provenance_note_dir(struct ferry_exported *e)
{
    struct stat st;
    if (e->dir && stat(e->dir, &st) == 0) {
        e->dir_dev = st.st_dev;
        e->dir_ino = st.st_ino;
    }
}

/* `dir`/`name` replaced by `text` in one rename: a temporary file beside it, written and synced
 * first, with the mode of the file it replaces. */
static ferry_status replace_file(const char *dir, const char *name, const char *text,
                                 mode_t mode, fy_err *err)
{
    char tmp[PATH_MAX], path[PATH_MAX], tmpl[NAME_MAX + 1], shown[FS_SHORT_MAX];
    snprintf(tmpl, sizeof tmpl, ".%s.ferry-tmp-XXXXXX", name);
    if (fs_join(tmp, sizeof tmp, dir, tmpl, err) != FERRY_OK ||
        fs_join(path, sizeof path, dir, name, err) != FERRY_OK)
        return err->status;
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return fy_fail(err, errno == ENOSPC || errno == EDQUOT ? FERRY_ERR_NOSPACE : FERRY_ERR_IO,
                       "cannot create a temporary file in %s: %s",
                       fs_short(dir, shown, sizeof shown), strerror(errno));
    ferry_status st = FERRY_OK;
    if (fchmod(fd, mode & 0777) != 0)
        st = fy_fail(err, FERRY_ERR_IO, "cannot set the mode of %s: %s",
                     fs_short(tmp, shown, sizeof shown), strerror(errno));
    if (st == FERRY_OK)
        st = fs_pwrite_all(fd, tmp, text, strlen(text), 0, err);
    if (st == FERRY_OK && fsync(fd) != 0)
        st = fy_fail(err, FERRY_ERR_IO, "cannot sync %s: %s", fs_short(tmp, shown, sizeof shown),
                     strerror(errno));
    if (close(fd) != 0 && st == FERRY_OK)
        st = fy_fail(err, FERRY_ERR_IO, "cannot close %s: %s",
                     fs_short(tmp, shown, sizeof shown), strerror(errno));
    if (st == FERRY_OK && rename(tmp, path) != 0)
        st = fy_fail(err, FERRY_ERR_IO, "cannot replace %s: %s",
                     fs_short(path, shown, sizeof shown), strerror(errno));
    if (st != FERRY_OK) {
        unlink(tmp);
        return st;
    }
    return fs_sync_dir(dir, err);
}

/* Whether `a` and `b` are the same manifest apart from their validation records. */
static bool same_but_record(const cJSON *a, const cJSON *b)
{
    cJSON *ca = cJSON_Duplicate(a, 1), *cb = cJSON_Duplicate(b, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(ca, VALIDATED_KEY);
    cJSON_DeleteItemFromObjectCaseSensitive(cb, VALIDATED_KEY);
    bool same = ca && cb && cJSON_Compare(ca, cb, 1);
    cJSON_Delete(ca);
    cJSON_Delete(cb);
    return same;
}

ferry_status ferry_exported_record_validation(ferry_exported *e, const char *versions_json)
{
    if (!e)
        return FERRY_ERR_INVALID_ARG;
    fy_err_clear(&e->err);
    fy_err *err = &e->err;
    cJSON *versions = NULL, *disk = NULL;
    char *text = NULL;
    char path[PATH_MAX], shown[FS_SHORT_MAX];
    struct stat st;
    if (!e->dir || !e->manifest)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "this export is not saved: save it before "
                       "recording a validation in its export.json");
    if (!versions_json)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "no versions given to record");
    fs_short(e->dir, shown, sizeof shown);
    if (json_parse(versions_json, strlen(versions_json), VALIDATED_KEY, &record_limits, &versions,
                   err) != FERRY_OK) {
        char inner[sizeof err->msg];
        memcpy(inner, err->msg, sizeof inner);
        return fy_refail(err, FERRY_ERR_INVALID_ARG, "%s", inner);
    }
    if (check_versions(versions, VALIDATED_KEY, FERRY_ERR_INVALID_ARG, err) != FERRY_OK)
        goto done;
    if (stat(e->dir, &st) != 0 || st.st_dev != e->dir_dev || st.st_ino != e->dir_ino) {
        fy_fail(err, FERRY_ERR_EXISTS, "%s is no longer the directory this export was saved to "
                "or loaded from (replaced since?): its validation is not recorded there", shown);
        goto done;
    }
    if (fs_join(path, sizeof path, e->dir, "export.json", err) != FERRY_OK ||
        json_load_file(path, &exp_manifest_limits, &disk, err) != FERRY_OK)
        goto done;
    const cJSON *producer = cJSON_GetObjectItemCaseSensitive(disk, "producer");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(producer, "name");
    if (!cJSON_IsString(name) || strcmp(name->valuestring, "ferry") != 0) {
        fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json was not written by ferry (its producer is "
                "not \"ferry\"): no validation is recorded in it", shown);
        goto done;
    }
    if (!same_but_record(disk, e->manifest)) {
        fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json changed since this export was saved or "
                "loaded: its validation is not recorded there", shown);
        goto done;
    }
    if (stat(path, &st) != 0) {
        fy_fail(err, FERRY_ERR_IO, "%s/export.json: %s", shown, strerror(errno));
        goto done;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(disk, VALIDATED_KEY);
    if (!cJSON_AddItemToObject(disk, VALIDATED_KEY, versions)) {
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        goto done;
    }
    versions = NULL; /* disk's now */
    if (!(text = cJSON_Print(disk))) {
        fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (replace_file(e->dir, "export.json", text, st.st_mode, err) != FERRY_OK)
        goto done;
    cJSON_Delete(e->manifest);
    free(e->manifest_text);
    e->manifest = disk;
    e->manifest_text = text;
    disk = NULL;
    text = NULL;
done:
    cJSON_Delete(versions);
    cJSON_Delete(disk);
    free(text);
    return err->status;
}
