/* checkpoint.c — one name lookup over every safetensors file of a checkpoint directory. */
#include "model/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/fs.h"
#include "util/json.h"
#include "util/text.h"

#define SINGLE_FILE "model.safetensors"
#define INDEX_FILE "model.safetensors.index.json"
/* Index files list one line per tensor, one JSON value each: ~9 MB and ~1e5 values for the
 * largest models (DeepSeek-V3). 64 MB and 2e6 values leave ample room and bound the parse at
 * ~350 MB. */
static const json_limits INDEX_LIMITS = {
    .kind = "safetensors index", .max_bytes = 64u << 20, .max_values = 2000000, .max_depth = 32,
    .utf8 = true,
};

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 || errno != ENOENT;
}

/* A shard must be a plain file name inside the checkpoint directory (and printable, so that
 * messages naming it stay on one line). Symlinks are followed on purpose: a hub cache snapshot
 * links every file to ../../blobs/<sha>. */
static bool is_plain_file_name(const char *name)
{
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p < 0x20 || *p == 0x7F)
            return false;
    return name[0] != '\0' && strchr(name, '/') == NULL && strstr(name, "..") == NULL &&
           strcmp(name, ".") != 0;
}

static ferry_status add_file(ckpt *c, const char *name, st_file **opened, fy_err *err)
{
    ferry_status status;
    st_file **grown;
    char *path = fs_join_dup(c->dir, name, err);

    *opened = NULL;
    if (!path)
        return err->status;
    grown = realloc(c->files, (c->n_files + 1) * sizeof *c->files);
    if (!grown) {
        status = fy_fail(err, FERRY_ERR_NOMEM, "%s: out of memory", c->dir);
        goto cleanup;
    }
    c->files = grown;
    status = st_open(path, &c->files[c->n_files], err);
    if (status == FERRY_OK)
        *opened = c->files[c->n_files++];

cleanup:
    free(path);
    return status;
}

static int compare_tensor_names(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return strcmp(x->name, y->name);
}

/* Merges every file's tensors into by_name; a name in two files is an error. */
static ferry_status build_lookup(ckpt *c, fy_err *err)
{
    size_t total = 0;
    for (size_t i = 0; i < c->n_files; i++)
        total += c->files[i]->n_tensors;
    c->by_name = malloc((total ? total : 1) * sizeof *c->by_name);
    c->used = calloc(total ? total : 1, 1);
    if (!c->by_name || !c->used)
        return fy_fail(err, FERRY_ERR_NOMEM, "%s: out of memory for %zu tensors", c->dir, total);
    for (size_t i = 0; i < c->n_files; i++)
        for (size_t j = 0; j < c->files[i]->n_tensors; j++)
            c->by_name[c->n_tensors++] = &c->files[i]->tensors[j];
    qsort(c->by_name, c->n_tensors, sizeof *c->by_name, compare_tensor_names);
    for (size_t i = 1; i < c->n_tensors; i++) {
        const st_tensor *a = c->by_name[i - 1], *b = c->by_name[i];
        char qname[TEXT_QUOTE_MAX];
        if (strcmp(a->name, b->name) == 0)
            return fy_fail(err, FERRY_ERR_FORMAT, "%s: tensor '%s' is in both %s and %s", c->dir,
                           text_quote(a->name, qname, sizeof qname), a->file->path,
                           b->file->path);
    }
    return FERRY_OK;
}

static size_t lookup_index(const ckpt *c, const char *name)
{
    size_t lo = 0, hi = c->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int cmp = strcmp(c->by_name[mid]->name, name);
        if (cmp == 0)
            return mid;
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return SIZE_MAX;
}

/* Opens the shards named by the index, then checks that every tensor the map names is in the
 * shard it names, once. Tensors a shard holds beyond the map are kept, as transformers keeps
 * them. */
static ferry_status open_sharded(ckpt *c, const char *index_path, fy_err *err)
{
    ferry_status status;
    cJSON *index = NULL;
    const cJSON *weight_map, *entry;
    unsigned char *mapped = NULL;
    char qname[TEXT_QUOTE_MAX], qshard[TEXT_QUOTE_MAX];

    if ((status = json_load_file(index_path, &INDEX_LIMITS, &index, err)) != FERRY_OK ||
        (status = json_get_member(index, "weight_map", true, index_path, &weight_map, err)) !=
            FERRY_OK)
        goto cleanup;
    if (!cJSON_IsObject(weight_map) || !weight_map->child) {
        status = fy_fail(err, FERRY_ERR_FORMAT, "%s: 'weight_map' must be a non-empty object",
                         index_path);
        goto cleanup;
    }
    cJSON_ArrayForEach(entry, weight_map) {
        const char *shard = cJSON_GetStringValue(entry);
        st_file *opened = NULL;
        if (!shard) {
            status = fy_fail(err, FERRY_ERR_FORMAT,
                             "%s: weight_map entry for tensor '%s' must be a file name string",
                             index_path, text_quote(entry->string, qname, sizeof qname));
            goto cleanup;
        }
        if (!is_plain_file_name(shard)) {
            status = fy_fail(err, FERRY_ERR_FORMAT,
                             "%s: tensor '%s' is mapped to '%s', which is not a plain file name "
                             "inside the checkpoint directory", index_path,
                             text_quote(entry->string, qname, sizeof qname),
                             text_quote(shard, qshard, sizeof qshard));
            goto cleanup;
        }
        for (size_t i = 0; i < c->n_files && !opened; i++)
            if (strcmp(strrchr(c->files[i]->path, '/') + 1, shard) == 0)
                opened = c->files[i];
        if (!opened && (status = add_file(c, shard, &opened, err)) != FERRY_OK) {
            /* The shard's own message names the shard; say which index entry led there. */
            if (err && status == FERRY_ERR_IO) {
                char shard_msg[sizeof err->msg];
                memcpy(shard_msg, err->msg, sizeof shard_msg);
                fy_refail(err, status, "%s: tensor '%s' is mapped to %s", index_path,
                          text_quote(entry->string, qname, sizeof qname), shard_msg);
            }
            goto cleanup;
        }
    }
    if ((status = build_lookup(c, err)) != FERRY_OK)
        goto cleanup;

    mapped = calloc(c->n_tensors ? c->n_tensors : 1, 1);
    if (!mapped) {
        status = fy_fail(err, FERRY_ERR_NOMEM, "%s: out of memory", index_path);
        goto cleanup;
    }
    cJSON_ArrayForEach(entry, weight_map) {
        const char *shard = cJSON_GetStringValue(entry);
        size_t at = lookup_index(c, entry->string);
        if (at == SIZE_MAX || strcmp(strrchr(c->by_name[at]->file->path, '/') + 1, shard) != 0) {
            status = fy_fail(err, FERRY_ERR_FORMAT,
                             "%s: tensor '%s' is mapped to %s, but that file does not hold it",
                             index_path, text_quote(entry->string, qname, sizeof qname),
                             text_quote(shard, qshard, sizeof qshard));
            goto cleanup;
        }
        if (mapped[at]) {
            status = fy_fail(err, FERRY_ERR_FORMAT, "%s: weight_map lists tensor '%s' twice",
                             index_path, text_quote(entry->string, qname, sizeof qname));
            goto cleanup;
        }
        mapped[at] = 1;
    }

cleanup:
    free(mapped);
    cJSON_Delete(index);
    return status;
}

static uint64_t add_saturating(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* st_open's sparse rule, over the whole checkpoint: shards of at most 64 MiB each pass it one
 * by one, however many of them are holes. Same threshold and ratio, applied to the totals. */
static ferry_status check_sparse_total(const ckpt *c, fy_err *err)
{
    uint64_t size = 0, stored = 0;
    for (size_t i = 0; i < c->n_files; i++)
        size = add_saturating(size, c->files[i]->file_size);
    if (size <= ST_SPARSE_MIN_BYTES)
        return FERRY_OK;
    uint64_t enough = size / ST_SPARSE_RATIO;
    for (size_t i = 0; i < c->n_files && stored < enough; i++)
        stored = add_saturating(stored, st_stored_bytes(c->files[i], enough - stored));
    if (stored >= enough)
        return FERRY_OK;
    return fy_fail(err, FERRY_ERR_UNSUPPORTED,
                   "%s: a sparse checkpoint: its %zu safetensors files are %llu bytes long but "
                   "only %llu hold data, the rest are holes that read as zeros (ferry refuses "
                   "checkpoints over %u MiB with less than 1/%u of their bytes stored)", c->dir,
                   c->n_files, (unsigned long long)size, (unsigned long long)stored,
                   ST_SPARSE_MIN_BYTES >> 20, ST_SPARSE_RATIO);
}

/* Files a checkpoint directory can hold besides the weights that are not weights: a Trainer's
 * state beside them. */
static bool trainer_state(const char *name)
{
    return !strcmp(name, "training_args.bin") || !strcmp(name, "optimizer.pt") ||
           !strcmp(name, "scheduler.pt") || !strncmp(name, "rng_state", 9);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The class config.json's architectures names (for a line of Python to paste), if it is a plain
 * identifier; else NULL. */
static char *config_class(const char *dir)
{
    char *path = fs_join_dup(dir, "config.json", &(fy_err){0}), *text = NULL, *cls = NULL;
    size_t len = 0;
    if (path && json_read_file(path, 1u << 20, &text, &len, NULL) == FERRY_OK) {
        cJSON *cfg = cJSON_ParseWithLength(text, len);
        const cJSON *arch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cfg,
                                                                               "architectures"),
                                               0);
        const char *name = cJSON_GetStringValue(arch);
        size_t n = name ? strlen(name) : 0;
        if (n > 0 && n < 128 && strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                             "0123456789_") == n)
            cls = strdup(name);
        cJSON_Delete(cfg);
    }
    free(text);
    free(path);
    return cls;
}

/* `s` as a Python string literal ('...', quotes, backslashes and control bytes escaped), so
 * that the line of Python a message gives is one literal whatever the file is named: a name
 * holding a quote would otherwise end the literal and run the rest when the line is pasted.
 * Into out[size]; "'?'" where it does not fit. */
static const char *py_literal(const char *s, char *out, size_t size)
{
    size_t n = 0;
    if (size < 8)
        return "'?'";
    out[n++] = '\'';
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (n + 6 >= size)
            return "'?'";
        if (*c == '\'' || *c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)*c;
        } else if (*c < 0x20 || *c == 0x7f) {
            n += (size_t)snprintf(out + n, size - n, "\\x%02x", *c);
        } else {
            out[n++] = (char)*c;
        }
    }
    out[n++] = '\'';
    out[n] = '\0';
    return out;
}

ferry_status ckpt_check_weights_format(const char *dir, fy_err *err)
{
    fy_err unused = {0};
    char *single = fs_join_dup(dir, SINGLE_FILE, &unused);
    char *index = fs_join_dup(dir, INDEX_FILE, &unused);
    bool has_safetensors = !single || !index || file_exists(single) || file_exists(index);
    free(single);
    free(index);
    if (has_safetensors) /* or the path is too long to say: ckpt_open says it */
        return FERRY_OK;
    DIR *d = opendir(dir);
    if (!d)
        return FERRY_OK;
    /* the first by name of each kind, so that the message does not depend on readdir's order */
    char gguf[256] = "", pickle[256] = "";
    int n_gguf = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        const char *name = ent->d_name;
        if (strlen(name) >= sizeof gguf)
            continue;
        if (ends_with(name, ".gguf")) {
            n_gguf++;
            if (!gguf[0] || strcmp(name, gguf) < 0)
                strcpy(gguf, name);
        } else if ((ends_with(name, ".bin") || ends_with(name, ".pt") || ends_with(name, ".pth")) &&
                   !trainer_state(name)) {
            if (!pickle[0] || strcmp(name, pickle) < 0)
                strcpy(pickle, name);
        }
    }
    closedir(d);
    if (gguf[0]) {
        char others[48] = "";
        if (n_gguf > 1)
            snprintf(others, sizeof others, " and %d other GGUF file%s", n_gguf - 1,
                     n_gguf > 2 ? "s" : "");
        char qdir[1024], qgguf[600];
        return fy_fail(err, FERRY_ERR_UNSUPPORTED,
                       "%s: holds GGUF weights (%s%s) and no safetensors, the format ferry reads "
                       "(" SINGLE_FILE " or " INDEX_FILE "); make them in Python (with the gguf "
                       "package): transformers.AutoModelForCausalLM.from_pretrained(%s, "
                       "gguf_file=%s).save_pretrained('NEW_DIR')",
                       dir, gguf, others, py_literal(dir, qdir, sizeof qdir),
                       py_literal(gguf, qgguf, sizeof qgguf));
    }
    if (pickle[0]) {
        char *cls = config_class(dir);
        char qdir[1024];
        fy_fail(err, FERRY_ERR_UNSUPPORTED,
                "%s: holds PyTorch weights (%s) and no safetensors, the format ferry reads "
                "(" SINGLE_FILE " or " INDEX_FILE "); make them in Python: "
                "transformers.%s.from_pretrained(%s).save_pretrained('NEW_DIR', "
                "safe_serialization=True)",
                dir, pickle, cls ? cls : "AutoModelForCausalLM",
                py_literal(dir, qdir, sizeof qdir));
        free(cls);
        return err->status;
    }
    return FERRY_OK;
}

ferry_status ckpt_open(const char *dir, ckpt **out, fy_err *err)
{
    ferry_status status = FERRY_OK;
    char *single_path = NULL, *index_path = NULL;
    st_file *opened;

    *out = NULL;
    ckpt *c = calloc(1, sizeof *c);
    if (!c)
        return fy_fail(err, FERRY_ERR_NOMEM, "%s: out of memory", dir);
    c->dir = strdup(dir);
    if (!c->dir) {
        status = fy_fail(err, FERRY_ERR_NOMEM, "%s: out of memory", dir);
        goto cleanup;
    }
    if (!(single_path = fs_join_dup(dir, SINGLE_FILE, err))) {
        status = err->status;
        goto cleanup;
    }
    /* The single file wins when both exist, as in transformers' from_pretrained. */
    if (file_exists(single_path)) {
        if ((status = add_file(c, SINGLE_FILE, &opened, err)) == FERRY_OK)
            status = build_lookup(c, err);
    } else if (!(index_path = fs_join_dup(dir, INDEX_FILE, err))) {
        status = err->status;
    } else if (file_exists(index_path)) {
        status = open_sharded(c, index_path, err);
    } else if ((status = ckpt_check_weights_format(dir, err)) == FERRY_OK) {
        status = fy_fail(err, FERRY_ERR_IO, "%s: no " SINGLE_FILE " and no " INDEX_FILE
                         " in this directory", dir);
    }
    if (status == FERRY_OK)
        status = check_sparse_total(c, err);

cleanup:
    free(single_path);
    free(index_path);
    if (status != FERRY_OK) {
        ckpt_close(c);
        c = NULL;
    }
    *out = c;
    return status;
}

void ckpt_close(ckpt *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_files; i++)
        st_close(c->files[i]);
    free(c->files);
    free(c->by_name);
    free(c->used);
    free(c->dir);
    free(c);
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

void ckpt_use_layout(ckpt *c, const ckpt_layout *layouts, size_t n)
{
    c->layout = &layouts[0];
    for (size_t l = 0; l < n; l++)
        for (size_t t = 0; t < c->n_tensors; t++)
            if (starts_with(c->by_name[t]->name, layouts[l].rules[0].to)) {
                c->layout = &layouts[l];
                return;
            }
}

bool ckpt_in_layout(const ckpt *c, const char *stored_name)
{
    if (!c->layout)
        return true;
    for (size_t r = 0; r < CKPT_MAX_RENAMES && c->layout->rules[r].to; r++)
        if (starts_with(stored_name, c->layout->rules[r].to))
            return true;
    return false;
}

const char *ckpt_full_name(const ckpt *c, const char *name, char *buf, size_t size)
{
    const char *to = "", *rest = name;
    if (c->layout) {
        size_t r = 0;
        while (r < CKPT_MAX_RENAMES && c->layout->rules[r].to &&
               !starts_with(name, c->layout->rules[r].from))
            r++;
        if (r == CKPT_MAX_RENAMES || !c->layout->rules[r].to)
            return NULL;
        to = c->layout->rules[r].to;
        rest = name + strlen(c->layout->rules[r].from);
    }
    int n = snprintf(buf, size, "%s%s", to, rest);
    return n >= 0 && (size_t)n < size ? buf : NULL;
}

/* Index of `name` under the layout; SIZE_MAX if absent (or too long to be a name). */
static size_t lookup_prefixed(const ckpt *c, const char *name)
{
    char full[1024];
    if (!c->layout)
        return lookup_index(c, name);
    return ckpt_full_name(c, name, full, sizeof full) ? lookup_index(c, full) : SIZE_MAX;
}

const st_tensor *ckpt_find(const ckpt *c, const char *name)
{
    size_t at = lookup_prefixed(c, name);
    return at == SIZE_MAX ? NULL : c->by_name[at];
}

const st_tensor *ckpt_take(ckpt *c, const char *name)
{
    size_t at = lookup_prefixed(c, name);
    if (at == SIZE_MAX)
        return NULL;
    c->used[at] = 1;
    return c->by_name[at];
}

ferry_status ckpt_check_unchanged(const ckpt *c, fy_err *err)
{
    for (size_t i = 0; i < c->n_files; i++)
        if (st_check_unchanged(c->files[i], err) != FERRY_OK)
            return err->status;
    return FERRY_OK;
}
