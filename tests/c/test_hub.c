/* test_hub.c — hub ids resolved offline in a fake cache under a temporary HF_HOME. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/hub.h"

#define HASH_MAIN "0123456789abcdef0123456789abcdef01234567"
#define HASH_V1 "fedcba9876543210fedcba9876543210fedcba98"

#include "scratch.h"


static void make_dirs(const char *rel)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, rel);
    for (char *p = path + strlen(tmp_dir) + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0700);
            *p = '/';
        }
    }
    mkdir(path, 0700);
}

/* A cache with org/name at two revisions and a single-name model, under HF_HOME. */
static int make_cache(void **state)
{
    (void)state;
    if (scratch_make("hub") != 0)
        return -1;
    make_dirs("hf/hub/models--org--name/refs");
    make_dirs("hf/hub/models--org--name/snapshots/" HASH_MAIN);
    make_dirs("hf/hub/models--org--name/snapshots/" HASH_V1);
    scratch_write(tmp_dir, "hf/hub/models--org--name/refs/main", HASH_MAIN);
    scratch_write(tmp_dir, "hf/hub/models--org--name/refs/v1", HASH_V1 "\n");
    make_dirs("hf/hub/models--org--name/refs/feature");
    scratch_write(tmp_dir, "hf/hub/models--org--name/refs/feature/x", HASH_V1);
    scratch_write(tmp_dir, "hf/hub/models--org--name/refs/dangling", "aaaabbbbccccdddd");
    scratch_write(tmp_dir, "hf/hub/models--org--name/refs/junk", "not a hash at all");
    make_dirs("hf/hub/models--gpt2/refs");
    make_dirs("hf/hub/models--gpt2/snapshots/" HASH_MAIN);
    scratch_write(tmp_dir, "hf/hub/models--gpt2/refs/main", HASH_MAIN);
    make_dirs("local/model");

    char home[128];
    snprintf(home, sizeof home, "%s/hf", tmp_dir);
    setenv("HF_HOME", home, 1);
    unsetenv("HF_HUB_CACHE");
    unsetenv("HUGGINGFACE_HUB_CACHE");
    return 0;
}

static int remove_cache(void **state)
{
    (void)state;
    unsetenv("HF_HOME");
    unsetenv("HF_HUB_CACHE");
    return scratch_remove();
}

static void expect_path(const char *id, const char *revision, const char *rel)
{
    char out[512], want[512];
    fy_err err = {0};
    ferry_status status = hub_resolve(id, revision, out, sizeof out, &err);
    if (status != FERRY_OK)
        fail_msg("%s@%s: %s", id, revision ? revision : "(null)", err.msg);
    snprintf(want, sizeof want, "%s/%s", tmp_dir, rel);
    assert_string_equal(out, want);
}

static void expect_error(const char *id, const char *revision, ferry_status status,
                         const char *needle, const char *needle2)
{
    char out[512];
    fy_err err = {0};
    ferry_status got = hub_resolve(id, revision, out, sizeof out, &err);
    if (got != status)
        fail_msg("%s@%s: status %d, expected %d (%s)", id, revision ? revision : "(null)", got,
                 status, err.msg);
    assert_string_equal(out, "");
    if (!strstr(err.msg, needle) || (needle2 && !strstr(err.msg, needle2)))
        fail_msg("%s: message \"%s\" lacks \"%s\" / \"%s\"", id, err.msg, needle,
                 needle2 ? needle2 : "");
}

static void test_resolve(void **state)
{
    (void)state;
    expect_path("org/name", NULL, "hf/hub/models--org--name/snapshots/" HASH_MAIN);
    expect_path("org/name", "main", "hf/hub/models--org--name/snapshots/" HASH_MAIN);
    expect_path("org/name", HASH_V1, "hf/hub/models--org--name/snapshots/" HASH_V1);
    expect_path("org/name", "v1", "hf/hub/models--org--name/snapshots/" HASH_V1);
    expect_path("org/name", "feature/x", "hf/hub/models--org--name/snapshots/" HASH_V1);
    expect_path("gpt2", NULL, "hf/hub/models--gpt2/snapshots/" HASH_MAIN);

    /* An existing directory is taken as it is, even if it also looks like an id. */
    char local[256];
    snprintf(local, sizeof local, "%s/local/model", tmp_dir);
    char out[512];
    fy_err err = {0};
    assert_int_equal(hub_resolve(local, NULL, out, sizeof out, &err), FERRY_OK);
    assert_string_equal(out, local);
    /* ... but not with a revision, which a directory cannot honour. */
    expect_error(local, "v1", FERRY_ERR_INVALID_ARG, "is a local directory",
                 "revision ('v1') applies only to a hub id");
    expect_error(local, "main", FERRY_ERR_INVALID_ARG, local, "is a local directory");

    /* HF_HUB_CACHE replaces $HF_HOME/hub. */
    char cache[256];
    snprintf(cache, sizeof cache, "%s/hf/hub", tmp_dir);
    setenv("HF_HOME", "/nonexistent", 1);
    setenv("HF_HUB_CACHE", cache, 1);
    expect_path("org/name", NULL, "hf/hub/models--org--name/snapshots/" HASH_MAIN);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("org/missing", NULL, FERRY_ERR_IO,
                 "org/missing is not a directory and not in the Hugging Face cache (looked for ",
                 "models--org--missing); this ferry works offline: download it first (hf "
                 "download org/missing)");
    expect_error("org/name", "dev", FERRY_ERR_IO, "in the cache; download it first",
                 "(hf download org/name --revision dev)");
    expect_error("org/name", "dev", FERRY_ERR_IO, "revision 'dev'", "refs/dev");
    expect_error("org/name", "dangling", FERRY_ERR_IO, "refs/dangling points to",
                 "snapshots/aaaabbbbccccdddd");
    expect_error("org/name", "junk", FERRY_ERR_FORMAT, "refs/junk: does not hold a commit hash",
                 NULL);
    expect_error("org/name", "feature", FERRY_ERR_IO, "revision 'feature'", NULL);
    expect_error("org/name", "../../../etc", FERRY_ERR_INVALID_ARG,
                 "revision '../../../etc' is not a valid", NULL);
    expect_error("org/name", "a/./b", FERRY_ERR_INVALID_ARG, "is not a valid", NULL);
    expect_error("org/name", "", FERRY_ERR_INVALID_ARG, "is not a valid", NULL);
    /* written as a path: a missing directory, never looked up as an id */
    static const char *const paths[] = {"a/b/c", "../x", "./my-lama", "/org", "org/", "x/"};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        char want[64];
        snprintf(want, sizeof want, "%s: no such directory", paths[i]);
        expect_error(paths[i], NULL, FERRY_ERR_IO, want, NULL);
        fy_err err = {0};
        char out[512];
        hub_resolve(paths[i], NULL, out, sizeof out, &err);
        assert_string_equal(err.msg, want);
    }
    expect_error("~/x", NULL, FERRY_ERR_IO, "~/x: no such directory (a quoted ~ is not expanded",
                 NULL);
    expect_error("org/na me", NULL, FERRY_ERR_IO, "not a hub id", NULL);
    /* a file is not a checkpoint, whatever its name */
    char file[512];
    snprintf(file, sizeof file, "%s/hf/hub/models--org--name/refs/main", tmp_dir);
    expect_error(file, NULL, FERRY_ERR_IO, "refs/main: not a directory", NULL);
    expect_error("", NULL, FERRY_ERR_INVALID_ARG, "no model path", NULL);
    expect_error(NULL, NULL, FERRY_ERR_INVALID_ARG, "no model path", NULL);

    char out[16];
    fy_err err = {0};
    assert_int_equal(hub_resolve("org/name", NULL, out, sizeof out, &err), FERRY_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "output buffer"));

    /* No cache location at all. */
    unsetenv("HF_HOME");
    unsetenv("XDG_CACHE_HOME");
    char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    unsetenv("HOME");
    expect_error("org/name", NULL, FERRY_ERR_IO, "cannot locate the hub cache", NULL);
    if (home) {
        setenv("HOME", home, 1);
        free(home);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_resolve, make_cache, remove_cache),
        cmocka_unit_test_setup_teardown(test_errors, make_cache, remove_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
