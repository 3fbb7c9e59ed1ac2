/* test_replace.c — what --force may replace (src/export/replace.c) and the path joins that
 * refuse instead of cutting (fs_join). replace_check accepts a directory holding a valid
 * export.json and exactly its files; replace_remove deletes only the files that were checked,
 * so that whatever appears after the check survives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "export/internal.h"
#include "util/fs.h"

#include "scratch.h"

static char out[256];

static bool present(const char *rel)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", out, rel);
    return lstat(path, &st) == 0;
}

/* out/: a transformers ONNX export of one component, as ExportedModel.save_pretrained writes
 * it. */
static int make_export(void **state)
{
    (void)state;
    if (scratch_make("replace") != 0)
        return -1;
    snprintf(out, sizeof out, "%s/out", tmp_dir);
    if (mkdir(out, 0755) != 0)
        return -1;
    scratch_write(out, "export.json",
                  "{\"schema_version\": 1, \"export_format\": \"onnx\", \"components\": "
                  "{\"model\": {\"file\": \"model.onnx\", \"metadata\": {}}}}\n");
    scratch_write(out, "model.onnx", "graph");
    scratch_write(out, "model.onnx.data", "weights");
    scratch_write(out, "config.json", "{}");
    scratch_write(out, "generation_config.json", "{}");
    return 0;
}

static ferry_status check(old_export *o, fy_err *err)
{
    fy_err_clear(err);
    return replace_check(out, out, NULL, o, err);
}

static void test_transformers_export(void **state)
{
    (void)state;
    old_export o = {0};
    fy_err err = {0};
    assert_int_equal(check(&o, &err), FERRY_OK);
    assert_int_equal(o.n, 5);
    old_export_free(&o);

    scratch_write(out, "notes.txt", "mine");
    assert_int_equal(check(&o, &err), FERRY_ERR_EXISTS);
    assert_non_null(strstr(err.msg, "'notes.txt'"));
    assert_int_equal(o.n, 0);
    assert_true(present("notes.txt") && present("model.onnx"));

    /* A remote-code config's module is what PreTrainedConfig.save_pretrained copies beside it;
     * any other module is not. */
    scratch_write(out, "config.json",
                  "{\"auto_map\": {\"AutoConfig\": \"org/repo--configuration_foo.FooConfig\"}}");
    char path[512];
    snprintf(path, sizeof path, "%s/notes.txt", out);
    assert_int_equal(unlink(path), 0);
    scratch_write(out, "configuration_foo.py", "class FooConfig: pass\n");
    assert_int_equal(check(&o, &err), FERRY_OK);
    old_export_free(&o);
    scratch_write(out, "modeling_foo.py", "");
    assert_int_equal(check(&o, &err), FERRY_ERR_EXISTS);
    assert_non_null(strstr(err.msg, "'modeling_foo.py'"));
}

static void test_transformers_manifest_rules(void **state)
{
    (void)state;
    old_export o = {0};
    fy_err err = {0};
    /* The component's file must be the one transformers names: <prefix><name><suffix>. */
    scratch_write(out, "export.json",
                  "{\"schema_version\": 1, \"export_format\": \"onnx\", \"components\": "
                  "{\"model\": {\"file\": \"../model.onnx\", \"metadata\": {}}}}");
    assert_int_equal(check(&o, &err), FERRY_ERR_EXISTS);
    assert_non_null(strstr(err.msg, "component 'model'"));
    scratch_write(out, "export.json",
                  "{\"schema_version\": 1, \"export_format\": \"onnx\", \"components\": "
                  "{\"model\": {\"file\": \"model.onnx\"}}}");
    assert_int_equal(check(&o, &err), FERRY_ERR_EXISTS);
    scratch_write(out, "export.json",
                  "{\"schema_version\": 2, \"export_format\": \"onnx\", \"components\": "
                  "{\"model\": {\"file\": \"model.onnx\", \"metadata\": {}}}}");
    assert_int_equal(check(&o, &err), FERRY_ERR_EXISTS);
    assert_non_null(strstr(err.msg, "schema_version"));
    /* OpenVINO: openvino_<name>.xml and its .bin. */
    scratch_write(out, "export.json",
                  "{\"schema_version\": 1, \"export_format\": \"openvino\", \"components\": "
                  "{\"model\": {\"file\": \"openvino_model.xml\", \"metadata\": {}}}}");
    char path[512];
    const char *onnx_files[] = {"model.onnx", "model.onnx.data"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", out, onnx_files[i]);
        assert_int_equal(unlink(path), 0);
    }
    scratch_write(out, "openvino_model.xml", "<net/>");
    scratch_write(out, "openvino_model.bin", "weights");
    assert_int_equal(check(&o, &err), FERRY_OK);
    assert_int_equal(o.n, 5);
    old_export_free(&o);
    /* A hidden file is never part of an export, even one export.json would name. */
    scratch_write(out, ".openvino_model.bin", "");
    assert_int_equal(check(&o, &err), FERRY_ERR_EXISTS);
    assert_non_null(strstr(err.msg, "'.openvino_model.bin'"));
}

/* The directory's own entries are removed only when they are the very files checked. */
static void test_remove_only_what_was_checked(void **state)
{
    (void)state;
    old_export o = {0};
    fy_err err = {0};
    assert_int_equal(check(&o, &err), FERRY_OK);
    scratch_write(out, "late.txt", "appeared after the check");
    char note[256];
    assert_int_equal(replace_remove(out, &o, note, sizeof note), FERRY_ERR_IO);
    assert_non_null(strstr(note, "appeared"));
    assert_true(present("late.txt"));
    assert_false(present("model.onnx") || present("export.json") || present("config.json"));
    old_export_free(&o);
}

/* A checked name replaced by another file since the check, or a checked file rewritten in
 * place: either stays. */
static void test_remove_skips_replaced_file(void **state)
{
    (void)state;
    old_export o = {0};
    fy_err err = {0};
    char path[512];
    assert_int_equal(check(&o, &err), FERRY_OK);
    snprintf(path, sizeof path, "%s/model.onnx", out);
    assert_int_equal(unlink(path), 0);
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL); /* the inode may be reused: its ctime tells the files apart */
    scratch_write(out, "model.onnx", "someone else's file, same name");
    char note[256];
    assert_int_equal(replace_remove(out, &o, note, sizeof note), FERRY_ERR_IO);
    assert_non_null(strstr(note, "'model.onnx'"));
    assert_true(present("model.onnx"));
    assert_false(present("model.onnx.data") || present("export.json"));
    old_export_free(&o);
}

static void test_remove_skips_rewritten_file(void **state)
{
    (void)state;
    old_export o = {0};
    fy_err err = {0};
    assert_int_equal(check(&o, &err), FERRY_OK);
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL); /* a coarse clock must still see a new ctime */
    scratch_write(out, "config.json", "{\"rewritten\": true}");
    char note[256];
    assert_int_equal(replace_remove(out, &o, note, sizeof note), FERRY_ERR_IO);
    assert_non_null(strstr(note, "'config.json'"));
    assert_true(present("config.json"));
    assert_false(present("model.onnx"));
    old_export_free(&o);
}

static void test_remove_all(void **state)
{
    (void)state;
    old_export o = {0};
    fy_err err = {0};
    char note[256];
    assert_int_equal(check(&o, &err), FERRY_OK);
    assert_int_equal(replace_remove(out, &o, note, sizeof note), FERRY_OK);
    struct stat st;
    assert_int_not_equal(lstat(out, &st), 0);
    old_export_free(&o);
}

static void test_join_refuses_instead_of_cutting(void **state)
{
    (void)state;
    static char dir[PATH_MAX + 16], dst[PATH_MAX];
    fy_err err = {0};
    /* dir + "/" + "ab" is exactly PATH_MAX - 1 bytes: fits. One more byte does not. */
    memset(dir, 'd', PATH_MAX - 4);
    dir[0] = '/';
    dir[PATH_MAX - 4] = '\0';
    assert_int_equal(fs_join(dst, sizeof dst, dir, "ab", &err), FERRY_OK);
    assert_int_equal(strlen(dst), PATH_MAX - 1);
    assert_int_equal(fs_join(dst, sizeof dst, dir, "abc", &err), FERRY_ERR_INVALID_ARG);
    assert_string_equal(dst, "");
    assert_non_null(strstr(err.msg, "/abc: File name too long"));
    assert_true(strlen(err.msg) < 2 * FS_SHORT_MAX + 100);
    /* A smaller buffer is respected as well. */
    char small[8];
    fy_err_clear(&err);
    assert_int_equal(fs_join(small, sizeof small, "/a", "bcde", &err), FERRY_OK);
    assert_int_equal(fs_join(small, sizeof small, "/a", "bcdef", &err), FERRY_ERR_INVALID_ARG);
    char *dup = fs_join_dup(dir, "abc", &err);
    assert_null(dup);
    dup = fs_join_dup("/x", "y", &err);
    assert_string_equal(dup, "/x/y");
    free(dup);
}

static void test_short(void **state)
{
    (void)state;
    char buf[32];
    assert_string_equal(fs_short("/short/path", buf, sizeof buf), "/short/path");
    const char *lng = "/head/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/tail.json";
    fs_short(lng, buf, sizeof buf);
    assert_int_equal(strlen(buf), sizeof buf - 1);
    assert_memory_equal(buf, "/head/", 6);
    assert_non_null(strstr(buf, "..."));
    assert_non_null(strstr(buf, "/tail.json"));
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* fs_make_dirs makes what is missing and records it; fs_unmake_dirs removes exactly that,
 * however the path is spelt, and nothing that holds a file or was there before (found by
 * review: "x/../y" removed the user's empty y, through x/..). */
static void test_make_and_unmake_dirs(void **state)
{
    (void)state;
    assert_int_equal(scratch_make("dirs"), 0);
    char base[128], deep[256], path[256];
    fs_made made;
    fy_err err = {0};
    snprintf(base, sizeof base, "%s/kept", tmp_dir);
    assert_int_equal(mkdir(base, 0755), 0);
    snprintf(deep, sizeof deep, "%s//a/b/c", base);
    assert_int_equal(fs_make_dirs(deep, &made, &err), FERRY_OK);
    assert_true(is_dir(deep));
    assert_int_equal(made.n, 3);
    /* all there already: nothing made */
    fs_made none;
    assert_int_equal(fs_make_dirs(deep, &none, &err), FERRY_OK);
    assert_int_equal(none.n, 0);
    /* a file put in a/ meanwhile: c and b go, a stays with it, and so does kept/ */
    snprintf(path, sizeof path, "%s/a", base);
    scratch_write(path, "theirs", "x");
    fs_unmake_dirs(deep, &made);
    snprintf(path, sizeof path, "%s/a/b", base);
    assert_false(is_dir(path));
    snprintf(path, sizeof path, "%s/a/theirs", base);
    assert_int_equal(unlink(path), 0);
    /* now empty: a goes too; kept/, there before, stays */
    fs_unmake_dirs(deep, &made);
    snprintf(path, sizeof path, "%s/a", base);
    assert_false(is_dir(path));
    assert_true(is_dir(base));
    /* "x/../y/z" with the user's empty y: only x is made... and only x removed */
    snprintf(path, sizeof path, "%s/y", base);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(deep, sizeof deep, "%s/x/../y/./w/", base);
    assert_int_equal(fs_make_dirs(deep, &made, &err), FERRY_OK);
    assert_int_equal(made.n, 2); /* x and y/w */
    fs_unmake_dirs(deep, &made);
    assert_true(is_dir(path)); /* y */
    snprintf(path, sizeof path, "%s/x", base);
    assert_false(is_dir(path));
    snprintf(path, sizeof path, "%s/y/w", base);
    assert_false(is_dir(path));
    /* a directory made, then moved aside and another made at its name: that one is not the
     * directory made (another inode, both being alive), and is kept */
    snprintf(deep, sizeof deep, "%s/r", base);
    assert_int_equal(fs_make_dirs(deep, &made, &err), FERRY_OK);
    snprintf(path, sizeof path, "%s/r-aside", base);
    assert_int_equal(rename(deep, path), 0);
    assert_int_equal(mkdir(deep, 0755), 0);
    fs_unmake_dirs(deep, &made);
    assert_true(is_dir(deep));
    assert_true(is_dir(path));
    assert_int_equal(rmdir(deep), 0);
    assert_int_equal(rmdir(path), 0);
    /* made, removed, and made again by someone else: the file system may give it the same
     * inode (ext4 does), but not the same birth time, where it keeps one */
    assert_int_equal(fs_make_dirs(deep, &made, &err), FERRY_OK);
    assert_int_equal(rmdir(deep), 0);
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
    assert_int_equal(mkdir(deep, 0755), 0);
    if (made.dirs[0].has_birth) {
        fs_unmake_dirs(deep, &made);
        assert_true(is_dir(deep));
    }
    assert_int_equal(rmdir(deep), 0);
    /* a file in the way: one error naming it; kept/ is not removed, not made by that call */
    scratch_write(base, "file", "x");
    snprintf(deep, sizeof deep, "%s/file/z", base);
    assert_int_equal(fs_make_dirs(deep, &made, &err), FERRY_ERR_IO);
    assert_non_null(strstr(err.msg, "kept/file: Not a directory"));
    assert_int_equal(made.n, 0);
    assert_true(is_dir(base));
    /* a part that cannot be made after one that was: that one is removed again */
    char name[NAME_MAX + 2];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    static char toolong[PATH_MAX];
    snprintf(toolong, sizeof toolong, "%s/new/%s/z", base, name);
    fy_err_clear(&err);
    assert_int_equal(fs_make_dirs(toolong, &made, &err), FERRY_ERR_IO);
    assert_non_null(strstr(err.msg, "File name too long"));
    assert_int_equal(made.n, 0);
    snprintf(path, sizeof path, "%s/new", base);
    assert_false(is_dir(path));
    assert_int_equal(scratch_remove(), 0);
}

/* In this process from now on, the statx system call fails with `error`, as an old kernel
 * (ENOSYS) or a sandbox filtering it (EPERM) makes it fail; false if seccomp is not allowed
 * here. glibc answers ENOSYS itself, from fstatat, with no birth time (the has_birth false
 * path); EPERM reaches identify_dir's own fallback to lstat. */
static bool refuse_statx(int error)
{
#ifdef __NR_statx
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_statx, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (unsigned)error),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = {.len = sizeof filter / sizeof filter[0], .filter = filter};
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
           prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
#else
    (void)error;
    return false;
#endif
}

static int failed_at(int line)
{
    fprintf(stderr, "test_replace.c:%d: failed in the child without statx\n", line);
    return 1;
}

/* fs_make_dirs and fs_unmake_dirs where statx fails: device and inode alone tell the
 * directories made; -> 0 all held, 77 statx could not be refused here, 1 a check failed. */
static int dirs_without_statx(int error)
{
    if (!refuse_statx(error))
        return 77;
    char base[128], deep[256], path[256];
    fs_made made;
    fy_err err = {0};
    struct stat st;
    if (stat(tmp_dir, &st) != 0)
        return failed_at(__LINE__); /* stat itself still works: fstatat, not statx, on this libc */
    snprintf(base, sizeof base, "%s/nostatx-%d", tmp_dir, error);
    if (mkdir(base, 0755) != 0)
        return failed_at(__LINE__);
    snprintf(deep, sizeof deep, "%s/a/b", base);
    if (fs_make_dirs(deep, &made, &err) != FERRY_OK || made.n != 2 || made.dirs[0].has_birth)
        return failed_at(__LINE__);
    /* b moved aside and another made at its name: kept, as is a/ holding it */
    snprintf(path, sizeof path, "%s/b-aside", base);
    if (rename(deep, path) != 0 || mkdir(deep, 0755) != 0)
        return failed_at(__LINE__);
    fs_unmake_dirs(deep, &made);
    if (!is_dir(deep) || rmdir(deep) != 0 || rename(path, deep) != 0)
        return failed_at(__LINE__);
    /* untouched since: both go, base stays */
    fs_unmake_dirs(deep, &made);
    snprintf(path, sizeof path, "%s/a", base);
    if (is_dir(path) || !is_dir(base) || rmdir(base) != 0)
        return failed_at(__LINE__);
    return 0;
}

static void test_make_dirs_without_statx(void **state)
{
    (void)state;
    assert_int_equal(scratch_make("nostatx"), 0);
    int errors[] = {ENOSYS, EPERM};
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0)
            _exit(dirs_without_statx(errors[i]));
        int status;
        assert_int_equal(waitpid(child, &status, 0), child);
        assert_true(WIFEXITED(status));
        if (WEXITSTATUS(status) == 77) {
            assert_int_equal(scratch_remove(), 0);
            skip();
        }
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    assert_int_equal(scratch_remove(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_transformers_export, make_export, remove_tmp),
        cmocka_unit_test_setup_teardown(test_transformers_manifest_rules, make_export, remove_tmp),
        cmocka_unit_test_setup_teardown(test_remove_only_what_was_checked, make_export, remove_tmp),
        cmocka_unit_test_setup_teardown(test_remove_skips_replaced_file, make_export, remove_tmp),
        cmocka_unit_test_setup_teardown(test_remove_skips_rewritten_file, make_export, remove_tmp),
        cmocka_unit_test_setup_teardown(test_remove_all, make_export, remove_tmp),
        cmocka_unit_test(test_join_refuses_instead_of_cutting),
        cmocka_unit_test(test_short),
        cmocka_unit_test(test_make_and_unmake_dirs),
        cmocka_unit_test(test_make_dirs_without_statx),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
