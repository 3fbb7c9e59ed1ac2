/* fuzz_manifest.c — libFuzzer target for export.json (ferry_exported_load, then
 * ferry_exported_describe on what it accepts): the input is
 * written as export.json into a scratch export directory that holds a few real files, a
 * subdirectory, a link that stays inside and links that leave it.
 *
 * An accepted manifest must name only files that exist inside the directory: every component
 * file and data file must resolve (links followed) to a path under the directory's real path.
 * Either schema: ferry's, or transformers' (whose sidecars ferry derives from the file). */
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "ferry.h"
#include "util/fs.h"

static char root[PATH_MAX], dir[PATH_MAX], real_dir[PATH_MAX], manifest[PATH_MAX + 16];

static void put(const char *rel, const char *text)
{
    char p[PATH_MAX * 2];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    FILE *f = fopen(p, "wb");
    check(f != NULL, "create scratch file");
    fputs(text, f);
    fclose(f);
}

static void cleanup(void)
{
    fs_remove_tree(root);
}

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    char p[PATH_MAX * 2];
    snprintf(root, sizeof root, "%s/ferry-fuzz-manifest-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    check(mkdtemp(root) != NULL, "mkdtemp");
    atexit(cleanup);
    snprintf(p, sizeof p, "%s/secret.data", root);          /* outside the export */
    FILE *f = fopen(p, "wb");
    check(f != NULL, "create secret");
    fclose(f);
    snprintf(dir, sizeof dir, "%s/export", root);
    check(mkdir(dir, 0755) == 0, "mkdir export");
    snprintf(p, sizeof p, "%s/onnx", dir);
    check(mkdir(p, 0755) == 0, "mkdir onnx");
    put("model.onnx", "\x08\x07onnx");
    put("model.onnx.data", "data");
    put("onnx/model.onnx", "\x08\x07onnx");
    put("prefill.onnx", "\x08\x07onnx");
    put("decode.onnx", "\x08\x07onnx");
    snprintf(p, sizeof p, "%s/inside.onnx", dir);
    check(symlink("model.onnx", p) == 0, "symlink inside");
    snprintf(p, sizeof p, "%s/outside.data", dir);
    check(symlink("../secret.data", p) == 0, "symlink outside");
    snprintf(p, sizeof p, "%s/absolute.data", dir);
    check(symlink("/etc/passwd", p) == 0, "symlink absolute");
    snprintf(p, sizeof p, "%s/up", dir);
    check(symlink("..", p) == 0, "symlink to the parent");
    check(realpath(dir, real_dir) != NULL, "realpath");
    snprintf(manifest, sizeof manifest, "%s/export.json", dir);
}

static void check_inside(const char *rel)
{
    char p[PATH_MAX * 2], real[PATH_MAX];
    size_t n = strlen(real_dir);
    check(rel != NULL && rel[0] != '/', "relative path");
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    check(realpath(p, real) != NULL, "an accepted file exists");
    check(strncmp(real, real_dir, n) == 0 && real[n] == '/', "an accepted file is inside");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0])
        setup();
    int fd = open(manifest, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    check(fd >= 0, "open export.json");
    for (size_t done = 0; done < size;) {
        ssize_t n = write(fd, data + done, size - done);
        check(n > 0, "write export.json");
        done += (size_t)n;
    }
    close(fd);

    ferry_exported *e = NULL;
    if (ferry_exported_load(dir, NULL, &e) != FERRY_OK) {
        check_message(ferry_exported_errmsg(e));
    } else {
        int n = ferry_exported_component_count(e);
        check(n >= 1, "an accepted export has components");
        for (int i = 0; i < n; i++) {
            check(ferry_exported_component_name(e, i) != NULL, "component name");
            check_inside(ferry_exported_component_file(e, i));
            /* a transformers export's sidecar is derived, not listed: it must be inside too */
            if (ferry_exported_component_data_file(e, i))
                check_inside(ferry_exported_component_data_file(e, i));
        }
        check(ferry_exported_manifest(e) != NULL, "manifest text");
        /* what `ferry inspect` prints reads every field the loader let through */
        check(ferry_exported_describe(e) != NULL, "description");
        check(ferry_exported_describe_brief(e) != NULL, "brief description");
    }
    ferry_exported_free(e);
    return 0;
}
