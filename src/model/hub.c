/* hub.c — resolving a Hugging Face hub id to its snapshot folder in the local cache, offline. */
#include "model/hub.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/fs.h"
#include "util/json.h"

#define HUB_PATH_MAX PATH_MAX
/* A ref file holds one commit hash; anything much longer is not one. */
#define REF_MAX_BYTES 256
#define REVISION_MAX 255

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_id_char(char c)
{
    return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.';
}

/* "org/name" or "name": letters, digits, '-', '_', '.', at most one '/', no "..", and neither
 * part empty. */
static bool is_hub_id(const char *id)
{
    size_t slashes = 0, part_len = 0;
    if (strstr(id, ".."))
        return false;
    for (const char *p = id; *p; p++) {
        if (*p == '/') {
            if (++slashes > 1 || part_len == 0)
                return false;
            part_len = 0;
        } else if (is_id_char(*p)) {
            part_len++;
        } else {
            return false;
        }
    }
    return part_len > 0;
}

/* Written as a path, never a hub id: ./x, ../x, /x, x/, "." or "..", or with more than one
 * '/' (an id is "name" or "org/name"). */
static bool looks_like_path(const char *s)
{
    size_t n = strlen(s);
    const char *slash = strchr(s, '/');
    return !strncmp(s, "./", 2) || !strncmp(s, "../", 3) || s[0] == '/' || !strcmp(s, ".") ||
           !strcmp(s, "..") || (n > 0 && s[n - 1] == '/') || (slash && strchr(slash + 1, '/'));
}

/* A branch or tag name (refs/<revision>) or a commit hash: path components of id characters,
 * no empty, "." or ".." component, so that it stays under refs/ and snapshots/. */
static bool is_revision(const char *rev)
{
    size_t part_len = 0;
    if (strlen(rev) > REVISION_MAX || strstr(rev, "..") || rev[0] == '.')
        return false;
    for (const char *p = rev; *p; p++) {
        if (*p == '/') {
            if (part_len == 0 || p[1] == '.')
                return false;
            part_len = 0;
        } else if (is_id_char(*p)) {
            part_len++;
        } else {
            return false;
        }
    }
    return part_len > 0;
}

static bool is_commit_hash(const char *s, size_t len)
{
    if (len == 0 || len > 64)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!isxdigit((unsigned char)s[i]))
            return false;
    return true;
}

/* The cache root, as huggingface_hub computes it: HF_HUB_CACHE, else the legacy
 * HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, with HF_HOME defaulting to
 * $XDG_CACHE_HOME/huggingface and XDG_CACHE_HOME to ~/.cache. */
static ferry_status cache_root(char *buf, size_t size, fy_err *err)
{
    const char *hub = getenv("HF_HUB_CACHE");
    const char *home;
    int n;

    if (!hub || !*hub)
        hub = getenv("HUGGINGFACE_HUB_CACHE");
    if (hub && *hub) {
        n = snprintf(buf, size, "%s", hub);
    } else if ((home = getenv("HF_HOME")) && *home) {
        n = snprintf(buf, size, "%s/hub", home);
    } else if ((home = getenv("XDG_CACHE_HOME")) && *home) {
        n = snprintf(buf, size, "%s/huggingface/hub", home);
    } else if ((home = getenv("HOME")) && *home) {
        n = snprintf(buf, size, "%s/.cache/huggingface/hub", home);
    } else {
        return fy_fail(err, FERRY_ERR_IO,
                       "cannot locate the hub cache: none of HF_HUB_CACHE, HF_HOME, HOME is set");
    }
    if (n < 0 || (size_t)n >= size)
        /* the environment's fault, not the caller's arguments */
        return fy_fail(err, FERRY_ERR_IO, "hub cache path is too long");
    return FERRY_OK;
}

/* a/b/c, refused rather than cut short when it is too long. */
static ferry_status join3(char *dst, size_t size, const char *a, const char *b, const char *c,
                          fy_err *err)
{
    char mid[HUB_PATH_MAX];
    ferry_status status = fs_join(mid, sizeof mid, a, b, err);
    return status != FERRY_OK ? status : fs_join(dst, size, mid, c, err);
}

static ferry_status copy_out(const char *path, char *out, size_t out_size, fy_err *err)
{
    size_t n = strlen(path);
    if (n >= out_size)
        return fy_fail(err, FERRY_ERR_INVALID_ARG,
                       "%s: path is %zu bytes, the output buffer holds %zu", path, n,
                       out_size ? out_size - 1 : 0);
    memcpy(out, path, n + 1);
    return FERRY_OK;
}

ferry_status hub_resolve(const char *path_or_id, const char *revision, char *out, size_t out_size,
                         fy_err *err)
{
    ferry_status status;
    char root[HUB_PATH_MAX], repo[HUB_PATH_MAX], ref_path[HUB_PATH_MAX];
    char snapshot[HUB_PATH_MAX];
    char *ref_text = NULL;
    size_t ref_len = 0;
    int n;

    if (out_size > 0)
        out[0] = '\0';
    if (!path_or_id || !*path_or_id)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "no model path or hub id given");
    if (is_dir(path_or_id)) {
        /* A directory has no revisions: taking it while ignoring the revision asked for would
         * export something other than what the caller named. */
        if (revision)
            return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s is a local directory, and a revision "
                           "('%s') applies only to a hub id (org/name) in the hub cache",
                           path_or_id, revision);
        return copy_out(path_or_id, out, out_size, err);
    }
    struct stat st;
    if (stat(path_or_id, &st) == 0)
        return fy_fail(err, FERRY_ERR_IO, "%s: not a directory (a checkpoint is the directory "
                       "holding config.json and the weights)", path_or_id);
    /* a path that cannot be an id is named as the directory it was meant to be: looking it up
     * in the hub cache would only make the message about something the user did not mean */
    if (path_or_id[0] == '~')
        return fy_fail(err, FERRY_ERR_IO, "%s: no such directory (a quoted ~ is not expanded: "
                       "write $HOME)", path_or_id);
    if (looks_like_path(path_or_id))
        return fy_fail(err, FERRY_ERR_IO, "%s: no such directory", path_or_id);
    if (!is_hub_id(path_or_id))
        return fy_fail(err, FERRY_ERR_IO, "%s: no such directory, and not a hub id (org/name)",
                       path_or_id);
    if (!revision)
        revision = "main";
    if (!is_revision(revision))
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "revision '%s' is not a valid name or hash",
                       revision);
    if ((status = cache_root(root, sizeof root, err)) != FERRY_OK)
        return status;

    /* models--org--name: the cache's spelling of org/name. */
    n = snprintf(repo, sizeof repo, "%s/models--", root);
    for (const char *p = path_or_id; *p && n > 0 && (size_t)n + 3 < sizeof repo; p++) {
        if (*p == '/') {
            memcpy(repo + n, "--", 2);
            n += 2;
        } else {
            repo[n++] = *p;
        }
    }
    if (n < 0 || (size_t)n + 3 >= sizeof repo)
        return fy_fail(err, FERRY_ERR_INVALID_ARG, "%s: hub cache path is too long", path_or_id);
    repo[n] = '\0';
    /* the library reads only the cache (the Python package and the ferry command pip installs
     * download into it first) */
    if (!is_dir(repo))
        return fy_fail(err, FERRY_ERR_IO,
                       "%s is not a directory and not in the Hugging Face cache (looked for %s); "
                       "this ferry works offline: download it first (hf download %s) or use the "
                       "ferry command `pip install` gives, which downloads",
                       path_or_id, repo, path_or_id);

    if ((status = join3(snapshot, sizeof snapshot, repo, "snapshots", revision, err)) != FERRY_OK)
        return status;
    if (is_dir(snapshot))
        return copy_out(snapshot, out, out_size, err);

    if ((status = join3(ref_path, sizeof ref_path, repo, "refs", revision, err)) != FERRY_OK)
        return status;
    if ((status = json_read_file(ref_path, REF_MAX_BYTES, &ref_text, &ref_len, NULL)) !=
        FERRY_OK) {
        status = fy_fail(err, FERRY_ERR_IO,
                         "hub id '%s': revision '%s' is neither a snapshot (%s) nor a ref (%s) "
                         "in the cache; download it first (hf download %s --revision %s)",
                         path_or_id, revision, snapshot, ref_path, path_or_id, revision);
        goto cleanup;
    }
    while (ref_len > 0 && isspace((unsigned char)ref_text[ref_len - 1]))
        ref_text[--ref_len] = '\0';
    if (!is_commit_hash(ref_text, ref_len)) {
        status = fy_fail(err, FERRY_ERR_FORMAT, "%s: does not hold a commit hash", ref_path);
        goto cleanup;
    }
    if ((status = join3(snapshot, sizeof snapshot, repo, "snapshots", ref_text, err)) != FERRY_OK)
        goto cleanup;
    if (!is_dir(snapshot)) {
        status = fy_fail(err, FERRY_ERR_IO, "hub id '%s': %s points to %s, which does not exist",
                         path_or_id, ref_path, snapshot);
        goto cleanup;
    }
    status = copy_out(snapshot, out, out_size, err);

cleanup:
    free(ref_text);
    return status;
}
