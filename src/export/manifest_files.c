/* manifest_files.c — what export.json records of each component's files, written at save and
 * checked at load: their sizes ("bytes"), their CRC-32s ("crc32", read against the files by
 * ferry_exported_verify), and that they are the files the format's writer gives a component,
 * the ones its programs read. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "export/internal.h"
#include "export/transformers.h"
#include "util/crc_pieces.h"
#include "util/fs.h"
#include "util/text.h"

static ferry_status file_size(const char *dir, const char *rel, long long *size, fy_err *err)
{
    char path[PATH_MAX];
    struct stat st;
    if (fs_join(path, sizeof path, dir, rel, err) != FERRY_OK)
        return err->status;
    if (stat(path, &st) != 0)
        return fy_fail(err, FERRY_ERR_IO, "%s: %s", path, strerror(errno));
    *size = (long long)st.st_size;
    return FERRY_OK;
}

/* Adds file `rel`'s size and CRC-32 to a component's "bytes" and "crc32". */
static ferry_status record_file(cJSON *bytes, cJSON *crcs, const char *dir, const char *rel,
                                const be_written *written, fy_err *err)
{
    long long size;
    if (file_size(dir, rel, &size, err) != FERRY_OK)
        return err->status;
    int at = 0;
    while (at < written->n && strcmp(written->files[at].file, rel) != 0)
        at++;
    if (at == written->n)
        return fy_fail(err, FERRY_ERR_INTERNAL, "%s/%s: written without its CRC-32", dir, rel);
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", (unsigned)written->files[at].crc);
    if (!cJSON_AddNumberToObject(bytes, rel, (double)size) ||
        !cJSON_AddStringToObject(crcs, rel, hex))
        return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
    return FERRY_OK;
}

ferry_status manifest_record_sizes(cJSON *m, const char *dir, const be_written *written,
                                   fy_err *err)
{
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "components")) {
        cJSON_DeleteItemFromObjectCaseSensitive(c, "bytes");
        cJSON_DeleteItemFromObjectCaseSensitive(c, "crc32");
        cJSON *bytes = cJSON_AddObjectToObject(c, "bytes");
        cJSON *crcs = cJSON_AddObjectToObject(c, "crc32");
        if (!bytes || !crcs)
            return fy_fail(err, FERRY_ERR_NOMEM, "out of memory");
        const cJSON *d, *file = cJSON_GetObjectItemCaseSensitive(c, "file");
        if (record_file(bytes, crcs, dir, file->valuestring, written, err) != FERRY_OK)
            return err->status;
        cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(c, "data_files"))
            if (record_file(bytes, crcs, dir, d->valuestring, written, err) != FERRY_OK)
                return err->status;
    }
    return FERRY_OK;
}

/* The `index`th file component `c` names: its file, then its data files. */
static const char *component_file(const cJSON *c, int index)
{
    if (index == 0)
        return cJSON_GetObjectItemCaseSensitive(c, "file")->valuestring;
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "data_files"),
                              index - 1)->valuestring;
}

/* A size: a whole number below 2^53, where a JSON number is still a whole number exactly. */
static bool whole_bytes(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 9007199254740992.0 &&
           v->valuedouble == (double)(long long)v->valuedouble;
}

/* A CRC-32: eight lowercase hexadecimal digits, as `crc32` prints it. */
static bool crc_hex(const cJSON *v)
{
    const char *hex = cJSON_GetStringValue(v);
    return hex && strlen(hex) == 8 && strspn(hex, "0123456789abcdef") == 8;
}

/* Component `c`'s record `key`, when present: one `valid` entry per file it names (its file and
 * data files), no other. */
static ferry_status check_record(const cJSON *c, const char *key, const char *of_each,
                                 bool (*valid)(const cJSON *), const char *needs,
                                 const char *dir, fy_err *err)
{
    const cJSON *record = cJSON_GetObjectItemCaseSensitive(c, key);
    if (!record)
        return FERRY_OK;
    char qcomp[TEXT_QUOTE_MAX], qrel[TEXT_QUOTE_MAX];
    text_quote(c->string, qcomp, sizeof qcomp);
    int named = 1 + cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c, "data_files"));
    if (!cJSON_IsObject(record) || cJSON_GetArraySize(record) != named)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': '%s' must be an "
                       "object with the %s of each of its %d files", dir, qcomp, key, of_each,
                       named);
    for (int i = 0; i < named; i++) {
        const char *rel = component_file(c, i);
        const cJSON *entry = cJSON_GetObjectItemCaseSensitive(record, rel);
        if (!entry || !valid(entry))
            return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s': '%s' %s '%s'",
                           dir, qcomp, key, entry ? needs : "has no entry for its file",
                           text_quote(rel, qrel, sizeof qrel));
    }
    return FERRY_OK;
}

ferry_status manifest_check_records(const cJSON *c, const char *dir, fy_err *err)
{
    if (check_record(c, "bytes", "size", whole_bytes, "needs a whole number of bytes for", dir,
                     err) != FERRY_OK)
        return err->status;
    return check_record(c, "crc32", "CRC-32", crc_hex,
                        "needs eight lowercase hexadecimal digits for", dir, err);
}

ferry_status manifest_check_size(const cJSON *c, const char *dir, const char *rel,
                                 long long size, fy_err *err)
{
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(c, "bytes"), rel);
    if (!want || size == (long long)want->valuedouble)
        return FERRY_OK;
    char qrel[TEXT_QUOTE_MAX];
    return fy_fail(err, FERRY_ERR_FORMAT, "%s/%s: %lld bytes, where the export wrote %lld "
                   "(export.json): the file was cut short or changed since; export again", dir,
                   text_quote(rel, qrel, sizeof qrel), size, (long long)want->valuedouble);
}

ferry_status manifest_verify_files(const cJSON *m, const char *dir, fy_err *err)
{
    if (tf_is_transformers_manifest(m))
        return FERRY_OK;
    _Static_assert(BE_MAX_WRITTEN >= MODEL_MAX_COMPONENTS * (1 + BE_MAX_DATA_FILES),
                   "a writer's CRC table holds every file of the most components");
    const char *done[MODEL_MAX_COMPONENTS * (1 + BE_MAX_DATA_FILES)];
    int n_done = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "components")) {
        const cJSON *crcs = cJSON_GetObjectItemCaseSensitive(c, "crc32");
        if (!crcs)
            continue;
        for (int i = 0; i < cJSON_GetArraySize(crcs); i++) {
            const char *rel = component_file(c, i);
            bool seen = false;
            for (int k = 0; k < n_done && !seen; k++)
                seen = strcmp(done[k], rel) == 0;
            if (seen)
                continue;
            if (n_done < (int)(sizeof done / sizeof *done))
                done[n_done++] = rel;
            char path[PATH_MAX], qpath[TEXT_QUOTE_MAX];
            uint32_t got;
            uint64_t size;
            if (fs_join(path, sizeof path, dir, rel, err) != FERRY_OK ||
                fy_crc32_file(path, &got, &size, err) != FERRY_OK)
                return err->status;
            const char *want = cJSON_GetObjectItemCaseSensitive(crcs, rel)->valuestring;
            if (strtoul(want, NULL, 16) != got)
                return fy_fail(err, FERRY_ERR_FORMAT, "%s: its bytes are not the ones the export "
                               "wrote (CRC-32 %08x, where export.json records %s): the file was "
                               "changed or replaced since; export again",
                               text_quote(path, qpath, sizeof qpath), (unsigned)got, want);
        }
    }
    return FERRY_OK;
}

/* Where export.json records CRCs (a ferry that writes them wrote it), they cover every file
 * the programs read: each component's file, data files and role are the ones the format's
 * writer gives it (its `files` hook, over the components in their order; ferry gives each
 * the role of its name). A data file left out of export.json would escape the CRC check while
 * its program still read it (an .xml the .bin beside it, an .onnx the external data it names).
 * An export without CRCs (an older ferry's) is taken on its sizes, as before. */
ferry_status manifest_check_layout(const cJSON *comps, const fb_backend *b, const char *dir,
                                   fy_err *err)
{
    be_component want[MODEL_MAX_COMPONENTS];
    int n = 0, with_crc = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, comps) {
        want[n] = (be_component){.name = c->string};
        with_crc += cJSON_GetObjectItemCaseSensitive(c, "crc32") != NULL;
        n++;
    }
    if (with_crc == 0)
        return FERRY_OK;
    if (with_crc < n)
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: 'crc32' is recorded for some "
                       "components and not others: export.json was edited", dir);
    if (b->files(want, n, err) != FERRY_OK)
        return err->status;
    n = 0;
    cJSON_ArrayForEach(c, comps) {
        const be_component *w = &want[n++];
        char qcomp[TEXT_QUOTE_MAX], what[600];
        text_quote(c->string, qcomp, sizeof qcomp);
        const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "role"));
        if (strcmp(role, c->string) != 0) {
            char qrole[TEXT_QUOTE_MAX];
            return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s' has role "
                           "'%s', where ferry gives it the role '%s' (its name): export.json "
                           "was edited", dir, qcomp, text_quote(role, qrole, sizeof qrole),
                           qcomp);
        }
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(c, "data_files");
        const char *file = cJSON_GetObjectItemCaseSensitive(c, "file")->valuestring;
        bool same = strcmp(file, w->file) == 0 && cJSON_GetArraySize(data) == w->n_data_files;
        for (int k = 0; same && k < w->n_data_files; k++)
            same = strcmp(cJSON_GetArrayItem(data, k)->valuestring, w->data_files[k]) == 0;
        if (same)
            continue;
        int len = snprintf(what, sizeof what, "'%s'", w->file);
        for (int k = 0; k < w->n_data_files && len > 0 && (size_t)len < sizeof what; k++)
            len += snprintf(what + len, sizeof what - (size_t)len, " and '%s'", w->data_files[k]);
        return fy_fail(err, FERRY_ERR_FORMAT, "%s/export.json: component '%s' names other "
                       "files than the %s writer gives it (%s, which its program reads): "
                       "export.json was edited", dir, qcomp, b->name, what);
    }
    return FERRY_OK;
}
