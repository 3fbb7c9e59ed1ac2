/* fuzz_index.c — libFuzzer target for sharded checkpoints: the input is written as
 * model.safetensors.index.json into a scratch checkpoint directory holding two valid shards,
 * a link to one of them, and a shard-looking file outside the directory; ckpt_open then reads
 * the index, opens the shards it names and cross-checks the weight map.
 *
 * An accepted index must only have opened files of the checkpoint directory, and every name
 * in the merged lookup must be found. */
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "model/checkpoint.h"
#include "util/fs.h"

static char root[PATH_MAX], dir[PATH_MAX], index_path[PATH_MAX + 64];

/* A shard of F32 scalars named `names`. */
static void shard(const char *path, const char *const *names, int n)
{
    char header[512];
    size_t o = (size_t)snprintf(header, sizeof header, "{");
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(header + o, sizeof header - o,
                              "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[%d,%d]}",
                              i ? "," : "", names[i], 4 * i, 4 * i + 4);
    o += (size_t)snprintf(header + o, sizeof header - o, "}");
    FILE *f = fopen(path, "wb");
    check(f != NULL, "create shard");
    uint64_t len = o;
    for (int i = 0; i < 8; i++)
        fputc((int)(len >> (8 * i)) & 0xff, f);
    fwrite(header, 1, o, f);
    for (int i = 0; i < 4 * n; i++)
        fputc(0, f);
    fclose(f);
}

static void cleanup(void)
{
    fs_remove_tree(root);
}

static void setup(void)
{
    static const char *const A[] = {"model.embed_tokens.weight", "model.norm.weight"};
    static const char *const B[] = {"lm_head.weight"};
    static const char *const C[] = {"model.layers.0.mlp.up_proj.weight"};
    const char *tmp = getenv("TMPDIR");
    char p[PATH_MAX * 2];
    snprintf(root, sizeof root, "%s/ferry-fuzz-index-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    check(mkdtemp(root) != NULL, "mkdtemp");
    atexit(cleanup);
    snprintf(p, sizeof p, "%s/outside.safetensors", root);
    shard(p, C, 1);
    snprintf(dir, sizeof dir, "%s/ckpt", root);
    check(mkdir(dir, 0755) == 0, "mkdir ckpt");
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    shard(p, A, 2);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    shard(p, B, 1);
    snprintf(p, sizeof p, "%s/linked.safetensors", dir);
    check(symlink("model-00002-of-00002.safetensors", p) == 0, "symlink");
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0])
        setup();
    int fd = open(index_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    check(fd >= 0, "open index");
    for (size_t done = 0; done < size;) {
        ssize_t n = write(fd, data + done, size - done);
        check(n > 0, "write index");
        done += (size_t)n;
    }
    close(fd);

    ckpt *c = NULL;
    fy_err err = {0};
    if (ckpt_open(dir, &c, &err) != FERRY_OK) {
        check(c == NULL, "a failed open returns no handle");
        check_message(err.msg);
        return 0;
    }
    size_t dlen = strlen(dir);
    for (size_t i = 0; i < c->n_files; i++) {
        const char *p = c->files[i]->path;
        check(strncmp(p, dir, dlen) == 0 && p[dlen] == '/' && strchr(p + dlen + 1, '/') == NULL,
              "only files of the checkpoint directory are opened");
    }
    for (size_t i = 0; i < c->n_tensors; i++)
        check(ckpt_find(c, c->by_name[i]->name) == c->by_name[i], "lookup");
    ckpt_close(c);
    return 0;
}
