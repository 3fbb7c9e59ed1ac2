/* test_validation_record.c — ferry_exported_record_validation: a validation's package versions
 * written into a saved export's export.json ("validated_with"), atomically and only into the
 * export the handle saved or loaded. Every refusal leaves export.json byte for byte as it was,
 * and no temporary file behind; a hostile record in export.json is refused on load. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ferry.h"

#include "scratch.h"

#define GOOD "{\"runtime\": {\"onnxruntime\": \"1.32.0\"}, " \
             "\"reference\": {\"transformers\": \"5.24.0\", \"torch\": \"2.13.0\"}}"

static char out[256];

static char *read_text(const char *dir, const char *rel)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 20);
    assert_non_null(buf);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Entries of `out` whose name holds "ferry-tmp" (a temporary file left behind). */
static int leftovers(void)
{
    DIR *d = opendir(out);
    assert_non_null(d);
    int n = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL)
        n += strstr(ent->d_name, "ferry-tmp") != NULL;
    closedir(d);
    return n;
}

/* The export's "validated_with" as printed JSON (malloc'd), or NULL when absent. */
static char *record_on_disk(void)
{
    char *text = read_text(out, "export.json");
    cJSON *m = cJSON_Parse(text);
    free(text);
    assert_non_null(m);
    cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "validated_with");
    char *printed = v ? cJSON_PrintUnformatted(v) : NULL;
    cJSON_Delete(m);
    return printed;
}

/* `json` refused with `status` and a message holding `needle`; export.json untouched. */
static void expect_refused(ferry_exported *e, const char *json, ferry_status status,
                           const char *needle)
{
    char *before = read_text(out, "export.json");
    ferry_status got = ferry_exported_record_validation(e, json);
    if (got != status || !strstr(ferry_exported_errmsg(e), needle))
        fail_msg("record %s: status %d (want %d), message: %s", json ? json : "(NULL)", got,
                 status, ferry_exported_errmsg(e));
    char *after = read_text(out, "export.json");
    assert_string_equal(before, after);
    assert_int_equal(leftovers(), 0);
    free(before);
    free(after);
}

/* tmp/out: the shipped tiny Llama exported to ONNX. */
static int make_export(void **state)
{
    ferry_model *m = NULL;
    ferry_exported *e = NULL;
    ferry_export_config cfg;
    if (scratch_make("record") != 0)
        return -1;
    snprintf(out, sizeof out, "%s/out", tmp_dir);
    ferry_export_config_init(&cfg);
    cfg.dynamic = 1;
    if (ferry_model_open("fixtures/tiny-llama", NULL, &m) != FERRY_OK ||
        ferry_export(m, &cfg, &e) != FERRY_OK || ferry_exported_save(e, out, 0) != FERRY_OK)
        return -1;
    ferry_exported_free(e);
    *state = m;
    return 0;
}

static int remove_export(void **state)
{
    ferry_model_free(*state);
    return scratch_remove();
}

static ferry_exported *load(void)
{
    ferry_exported *e = NULL;
    if (ferry_exported_load(out, NULL, &e) != FERRY_OK)
        fail_msg("load %s: %s", out, ferry_exported_errmsg(e));
    return e;
}

static void test_records_and_replaces(void **state)
{
    (void)state;
    ferry_exported *e = load();
    assert_int_equal(ferry_exported_record_validation(e, GOOD), FERRY_OK);
    char *rec = record_on_disk();
    assert_non_null(rec);
    assert_non_null(strstr(rec, "\"onnxruntime\":\"1.32.0\""));
    assert_non_null(strstr(rec, "\"torch\":\"2.13.0\""));
    free(rec);
    assert_int_equal(leftovers(), 0);
    /* the handle's manifest follows, and a second record replaces the first */
    assert_non_null(strstr(ferry_exported_manifest(e), "1.32.0"));
    assert_int_equal(ferry_exported_record_validation(
                         e, "{\"runtime\": {\"openvino\": \"2026.4.0\"}}"), FERRY_OK);
    rec = record_on_disk();
    assert_string_equal(rec, "{\"runtime\":{\"openvino\":\"2026.4.0\"}}");
    free(rec);
    ferry_exported_free(e);
    /* what was written loads again */
    e = load();
    assert_non_null(strstr(ferry_exported_manifest(e), "2026.4.0"));
    ferry_exported_free(e);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    assert_int_equal(ferry_exported_record_validation(NULL, GOOD), FERRY_ERR_INVALID_ARG);
    ferry_exported *e = load();
    expect_refused(e, NULL, FERRY_ERR_INVALID_ARG, "no versions");
    expect_refused(e, "{", FERRY_ERR_INVALID_ARG, "validated_with");
    expect_refused(e, "[1]", FERRY_ERR_INVALID_ARG, "must be an object of groups");
    expect_refused(e, "{\"runtime\": \"1.0\"}", FERRY_ERR_INVALID_ARG, "group 'runtime'");
    expect_refused(e, "{\"runtime\": {\"onnxruntime\": 1}}", FERRY_ERR_INVALID_ARG,
                   "'onnxruntime' in group 'runtime'");
    expect_refused(e, "{\"runtime\": {\"onnxruntime\": \"\"}}", FERRY_ERR_INVALID_ARG,
                   "'onnxruntime'");
    expect_refused(e, "{\"runtime\": {\"ort\": \"1\", \"ort\": \"2\"}}", FERRY_ERR_INVALID_ARG,
                   "unique package");
    expect_refused(e, "{\"r\": {}, \"r\": {}}", FERRY_ERR_INVALID_ARG, "unique name");
    /* a terminal escape in a version would reach `ferry inspect` and the load-time warning */
    expect_refused(e, "{\"runtime\": {\"ort\": \"1\\u001b[2J\"}}", FERRY_ERR_INVALID_ARG,
                   "'ort' in group 'runtime'");
    char many[2048] = "{";
    for (int i = 0; i < 17; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"g%d\": {}",
                 i ? ", " : "", i);
    strcat(many, "}");
    expect_refused(e, many, FERRY_ERR_INVALID_ARG, "more than 16 groups");
    ferry_exported_free(e);
}

static void test_unsaved_export(void **state)
{
    ferry_export_config cfg;
    ferry_exported *e = NULL;
    ferry_export_config_init(&cfg);
    assert_int_equal(ferry_export(*state, &cfg, &e), FERRY_OK);
    assert_int_equal(ferry_exported_record_validation(e, GOOD), FERRY_ERR_INVALID_ARG);
    assert_non_null(strstr(ferry_exported_errmsg(e), "not saved"));
    ferry_exported_free(e);
}

static void rewrite_manifest(const char *from, const char *to)
{
    char *text = read_text(out, "export.json");
    char *at = strstr(text, from);
    assert_non_null(at);
    char *edited = calloc(1, strlen(text) + strlen(to) + 1);
    memcpy(edited, text, (size_t)(at - text));
    strcat(edited, to);
    strcat(edited, at + strlen(from));
    char path[512];
    snprintf(path, sizeof path, "%s/export.json", out);
    unlink(path);
    scratch_write(out, "export.json", edited);
    free(text);
    free(edited);
}

static void test_changed_since_load(void **state)
{
    (void)state;
    ferry_exported *e = load();
    rewrite_manifest("\"format\":\t\"onnx\"", "\"format\":\t\"onnx\",\n\t\"note\":\t\"edited\"");
    expect_refused(e, GOOD, FERRY_ERR_FORMAT, "changed since");
    ferry_exported_free(e);
    rewrite_manifest(",\n\t\"note\":\t\"edited\"", "");
}

static void test_not_written_by_ferry(void **state)
{
    (void)state;
    rewrite_manifest("\"name\":\t\"ferry\"", "\"name\":\t\"someone\"");
    ferry_exported *e = load();
    expect_refused(e, GOOD, FERRY_ERR_FORMAT, "not written by ferry");
    ferry_exported_free(e);
    rewrite_manifest("\"name\":\t\"someone\"", "\"name\":\t\"ferry\"");
}

/* A directory swapped in after the load (what --force does) is another export. */
static void test_directory_replaced(void **state)
{
    (void)state;
    char moved[512], cmd[1200];
    ferry_exported *e = load();
    snprintf(moved, sizeof moved, "%s/moved", tmp_dir);
    assert_int_equal(rename(out, moved), 0);
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", moved, out);
    assert_int_equal(system(cmd), 0);
    expect_refused(e, GOOD, FERRY_ERR_EXISTS, "no longer the directory");
    ferry_exported_free(e);
    /* a handle loaded from the new directory records there */
    e = load();
    assert_int_equal(ferry_exported_record_validation(e, GOOD), FERRY_OK);
    ferry_exported_free(e);
    snprintf(cmd, sizeof cmd, "rm -r '%s'", moved);
    assert_int_equal(system(cmd), 0);
}

/* export.json with `key` set to the JSON `value` (NULL: removed). */
static void set_member(const char *key, const char *value)
{
    char *text = read_text(out, "export.json");
    cJSON *m = cJSON_Parse(text);
    assert_non_null(m);
    cJSON_DeleteItemFromObjectCaseSensitive(m, key);
    if (value) {
        cJSON *v = cJSON_Parse(value);
        assert_non_null(v);
        cJSON_AddItemToObject(m, key, v);
    }
    char *printed = cJSON_Print(m);
    char path[512];
    snprintf(path, sizeof path, "%s/export.json", out);
    unlink(path);
    scratch_write(out, "export.json", printed);
    free(printed);
    cJSON_Delete(m);
    free(text);
}

static void test_hostile_record_refused_on_load(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        {"validated_with", "3"},
        {"validated_with", "{\"runtime\": {\"ort\": 1}}"},
        {"validated_with", "{\"runtime\": [\"1.0\"]}"},
        {"validated_with", "{\"runtime\": {\"ort\": \"\"}}"},
        {"source", "[\"elsewhere\"]"},
        {"source", "{\"path\": 7}"},
    };
    char *source = read_text(out, "export.json");
    cJSON *m = cJSON_Parse(source);
    char *original_source = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(m, "source"));
    assert_non_null(original_source);
    cJSON_Delete(m);
    free(source);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        set_member("validated_with", NULL);
        set_member("source", original_source);
        set_member(bad[i][0], bad[i][1]);
        ferry_exported *e = NULL;
        assert_int_equal(ferry_exported_load(out, NULL, &e), FERRY_ERR_FORMAT);
        const char *msg = ferry_exported_errmsg(e);
        if (!strstr(msg, bad[i][0]))
            fail_msg("%s = %s: %s", bad[i][0], bad[i][1], msg);
        ferry_exported_free(e);
    }
    set_member("validated_with", NULL);
    set_member("source", original_source);
    free(original_source);
    ferry_exported_free(load());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records_and_replaces),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_unsaved_export),
        cmocka_unit_test(test_changed_since_load),
        cmocka_unit_test(test_not_written_by_ferry),
        cmocka_unit_test(test_directory_replaced),
        cmocka_unit_test(test_hostile_record_refused_on_load),
    };
    return cmocka_run_group_tests(tests, make_export, remove_export);
}
