/* test_json.c — file reading, parsing and the typed getters, including every failure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/json.h"

#include "scratch.h"


static int make_tmp(void **state)
{
    (void)state;
    return scratch_make("json");
}


static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

#define assert_msg_has(err, needle)                                                            \
    do {                                                                                       \
        if (!strstr((err).msg, (needle)))                                                      \
            fail_msg("message \"%s\" does not mention \"%s\"", (err).msg, (needle));          \
    } while (0)

static cJSON *parse(const char *text)
{
    cJSON *root = NULL;
    fy_err err = {0};
    assert_int_equal(json_parse(text, strlen(text), "t.json", &root, &err), FERRY_OK);
    return root;
}

static void test_read_and_load(void **state)
{
    (void)state;
    char path[128], *text = NULL;
    size_t len = 0;
    fy_err err = {0};
    cJSON *root = NULL;

    snprintf(path, sizeof path, "%s/a.json", tmp_dir);
    write_file(path, "{\"a\": 1}\n");
    assert_int_equal(json_read_file(path, 100, &text, &len, &err), FERRY_OK);
    assert_int_equal(len, 9);
    assert_string_equal(text, "{\"a\": 1}\n");
    free(text);
    assert_int_equal(json_load_file(path, 100, &root, &err), FERRY_OK);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(root, "a")->valueint, 1);
    cJSON_Delete(root);

    assert_int_equal(json_read_file(path, 8, &text, &len, &err), FERRY_ERR_FORMAT);
    assert_null(text);
    assert_msg_has(err, path);
    assert_msg_has(err, "9 bytes");

    fy_err_clear(&err);
    snprintf(path, sizeof path, "%s/missing.json", tmp_dir);
    assert_int_equal(json_load_file(path, 100, &root, &err), FERRY_ERR_IO);
    assert_null(root);
    assert_msg_has(err, path);
    assert_msg_has(err, "No such file");

    fy_err_clear(&err);
    assert_int_equal(json_read_file(tmp_dir, 100, &text, &len, &err), FERRY_ERR_IO);
    assert_msg_has(err, "not a regular file");

    fy_err_clear(&err);
    snprintf(path, sizeof path, "%s/fifo.json", tmp_dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(json_read_file(path, 100, &text, &len, &err), FERRY_ERR_IO); /* no hang */
    assert_msg_has(err, "not a regular file");

    fy_err_clear(&err);
    snprintf(path, sizeof path, "%s/bad.json", tmp_dir);
    write_file(path, "{\"a\": }");
    assert_int_equal(json_load_file(path, 100, &root, &err), FERRY_ERR_FORMAT);
    assert_msg_has(err, path);
    assert_msg_has(err, "byte");
}

static void test_parse_errors(void **state)
{
    (void)state;
    static const struct { const char *text; const char *needle; } cases[] = {
        {"", "empty"},
        {"{\"a\": 1", "invalid JSON"},
        {"{\"a\": 1} x", "after the JSON value at byte 9"},
        {"{} {}", "after the JSON value"},
        {"nul", "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *root = (cJSON *)1;
        fy_err err = {0};
        assert_int_equal(json_parse(cases[i].text, strlen(cases[i].text), "origin.json", &root,
                                    &err), FERRY_ERR_FORMAT);
        assert_null(root);
        assert_msg_has(err, "origin.json");
        assert_msg_has(err, cases[i].needle);
    }
    /* trailing whitespace, as safetensors pads its header, is fine */
    cJSON *root = parse("{\"a\": 1}   \n\t ");
    cJSON_Delete(root);
}

static void test_get_int(void **state)
{
    (void)state;
    cJSON *root = parse("{\"n\": 12, \"neg\": -3, \"frac\": 1.5, \"s\": \"x\", \"nul\": null,"
                        " \"big\": 9007199254740993, \"exp\": 1e3, \"dup\": 1, \"dup\": 2}");
    int64_t v = 0;
    fy_err err = {0};

    assert_int_equal(json_get_int(root, "n", true, 0, 0, 100, "c.json", &v, &err), FERRY_OK);
    assert_int_equal(v, 12);
    assert_int_equal(json_get_int(root, "neg", true, 0, -10, 10, "c.json", &v, &err), FERRY_OK);
    assert_int_equal(v, -3);
    assert_int_equal(json_get_int(root, "exp", true, 0, 0, 10000, "c.json", &v, &err), FERRY_OK);
    assert_int_equal(v, 1000);
    assert_int_equal(json_get_int(root, "absent", false, 7, 0, 10, "c.json", &v, &err), FERRY_OK);
    assert_int_equal(v, 7);
    assert_int_equal(json_get_int(root, "nul", false, 8, 0, 10, "c.json", &v, &err), FERRY_OK);
    assert_int_equal(v, 8);
    assert_int_equal(err.status, FERRY_OK);

    static const struct { const char *key; int64_t min, max; const char *needle; } bad[] = {
        {"absent", 0, 10, "c.json: key 'absent' is missing"},
        {"nul", 0, 10, "c.json: key 'nul' is missing"},
        {"n", 13, 20, "c.json: key 'n' must be an integer in [13, 20] (got 12)"},
        {"frac", 0, 10, "key 'frac' must be an integer (got 1.5)"},
        {"s", 0, 10, "key 's' must be an integer (got a string)"},
        {"big", 0, INT64_MAX, "key 'big' must be an integer (got 9007199254740992"},
        {"dup", 0, 10, "key 'dup' appears more than once"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fy_err_clear(&err);
        assert_int_equal(json_get_int(root, bad[i].key, true, 0, bad[i].min, bad[i].max,
                                      "c.json", &v, &err), FERRY_ERR_FORMAT);
        assert_msg_has(err, bad[i].needle);
    }
    cJSON_Delete(root);
}

static void test_get_double_bool_string(void **state)
{
    (void)state;
    cJSON *root = parse("{\"x\": 0.25, \"inf\": 1e999, \"b\": true, \"s\": \"silu\", \"n\": 3,"
                        " \"long\": \"abcdefghij\"}");
    double d = 0;
    bool b = false;
    char buf[8];
    fy_err err = {0};

    assert_int_equal(json_get_double(root, "x", true, 0, 0, 1, "c", &d, &err), FERRY_OK);
    assert_true(d == 0.25);
    assert_int_equal(json_get_double(root, "n", true, 0, 0, 10, "c", &d, &err), FERRY_OK);
    assert_true(d == 3.0);
    assert_int_equal(json_get_double(root, "absent", false, 0.5, 0, 1, "c", &d, &err), FERRY_OK);
    assert_true(d == 0.5);
    assert_int_equal(json_get_bool(root, "b", true, false, "c", &b, &err), FERRY_OK);
    assert_true(b);
    assert_int_equal(json_get_bool(root, "absent", false, true, "c", &b, &err), FERRY_OK);
    assert_true(b);
    assert_int_equal(json_get_string(root, "s", true, NULL, "c", buf, sizeof buf, &err),
                     FERRY_OK);
    assert_string_equal(buf, "silu");
    assert_int_equal(json_get_string(root, "absent", false, "gelu", "c", buf, sizeof buf, &err),
                     FERRY_OK);
    assert_string_equal(buf, "gelu");
    assert_int_equal(json_get_string(root, "absent", false, NULL, "c", buf, sizeof buf, &err),
                     FERRY_OK);
    assert_string_equal(buf, "");
    assert_int_equal(err.status, FERRY_OK);

    assert_int_equal(json_get_double(root, "x", true, 0, 0.5, 1, "c", &d, &err), FERRY_ERR_FORMAT);
    assert_msg_has(err, "key 'x' must be a number in [0.5, 1] (got 0.25)");
    fy_err_clear(&err);
    assert_int_equal(json_get_double(root, "inf", true, 0, 0, 1e300, "c", &d, &err),
                     FERRY_ERR_FORMAT);
    assert_msg_has(err, "key 'inf'");
    fy_err_clear(&err);
    assert_int_equal(json_get_double(root, "s", true, 0, 0, 1, "c", &d, &err), FERRY_ERR_FORMAT);
    assert_msg_has(err, "key 's' must be a number (got a string)");
    fy_err_clear(&err);
    assert_int_equal(json_get_bool(root, "n", true, false, "c", &b, &err), FERRY_ERR_FORMAT);
    assert_msg_has(err, "key 'n' must be true or false (got a number)");
    fy_err_clear(&err);
    assert_int_equal(json_get_bool(root, "absent", true, false, "c", &b, &err), FERRY_ERR_FORMAT);
    assert_msg_has(err, "key 'absent' is missing");
    fy_err_clear(&err);
    assert_int_equal(json_get_string(root, "n", true, NULL, "c", buf, sizeof buf, &err),
                     FERRY_ERR_FORMAT);
    assert_msg_has(err, "key 'n' must be a string (got a number)");
    fy_err_clear(&err);
    assert_int_equal(json_get_string(root, "long", true, NULL, "c", buf, sizeof buf, &err),
                     FERRY_ERR_FORMAT);
    assert_msg_has(err, "key 'long' is too long (10 bytes, at most 7)");
    cJSON_Delete(root);
}

static void test_member_and_u64(void **state)
{
    (void)state;
    cJSON *root = parse("{\"o\": {\"k\": 1}, \"arr\": [0, 1.0, -0, 9007199254740991,"
                        " 9007199254740992, -1, 0.5, \"7\", 1e400]}");
    const cJSON *node = NULL;
    fy_err err = {0};
    uint64_t u = 99;

    assert_int_equal(json_get_member(root, "o", true, "c", &node, &err), FERRY_OK);
    assert_true(cJSON_IsObject(node));
    assert_int_equal(json_get_member(root, "absent", false, "c", &node, &err), FERRY_OK);
    assert_null(node);
    assert_int_equal(json_get_member(NULL, "o", false, "c", &node, &err), FERRY_OK);
    assert_null(node);
    assert_int_equal(json_get_member(root, "absent", true, "c", &node, &err), FERRY_ERR_FORMAT);
    assert_msg_has(err, "c: key 'absent' is missing");

    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "arr");
    static const int ok[] = {1, 1, 1, 1, 0, 0, 0, 0, 0};
    static const uint64_t want[] = {0, 1, 0, UINT64_C(9007199254740991)};
    int i = 0;
    cJSON_ArrayForEach(node, arr) {
        assert_int_equal(json_number_to_u64(node, &u), ok[i]);
        if (ok[i])
            assert_int_equal(u, want[i]);
        i++;
    }
    assert_int_equal(i, 9);
    assert_false(json_number_to_u64(NULL, &u));
    cJSON_Delete(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_read_and_load, make_tmp, remove_tmp),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_get_int),
        cmocka_unit_test(test_get_double_bool_string),
        cmocka_unit_test(test_member_and_u64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
