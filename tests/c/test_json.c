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

/* Generous for the tests that are not about limits. */
static const json_limits TEST_LIMITS = {
    .kind = "test file", .max_bytes = 1u << 20, .max_values = 1000, .max_depth = 16, .utf8 = true,
};
static const json_limits SMALL_FILE = {
    .kind = "small file", .max_bytes = 100, .max_values = 1000, .max_depth = 16, .utf8 = true,
};

static cJSON *parse(const char *text)
{
    cJSON *root = NULL;
    fy_err err = {0};
    assert_int_equal(json_parse(text, strlen(text), "t.json", &TEST_LIMITS, &root, &err),
                     FERRY_OK);
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
    assert_int_equal(json_load_file(path, &SMALL_FILE, &root, &err), FERRY_OK);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(root, "a")->valueint, 1);
    cJSON_Delete(root);

    assert_int_equal(json_read_file(path, 8, &text, &len, &err), FERRY_ERR_FORMAT);
    assert_null(text);
    assert_msg_has(err, path);
    assert_msg_has(err, "9 bytes");

    fy_err_clear(&err);
    snprintf(path, sizeof path, "%s/missing.json", tmp_dir);
    assert_int_equal(json_load_file(path, &SMALL_FILE, &root, &err), FERRY_ERR_IO);
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
    assert_int_equal(json_load_file(path, &SMALL_FILE, &root, &err), FERRY_ERR_FORMAT);
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
        assert_int_equal(json_parse(cases[i].text, strlen(cases[i].text), "origin.json",
                                    &TEST_LIMITS, &root, &err), FERRY_ERR_FORMAT);
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
        /* an integer past a double's exact ones: the range it can be in */
        {"big", 0, INT64_MAX, "key 'big' must be an integer in [0, 9007199254740991] (got "
                              "9007199254740992"},
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

/* Parses `len` bytes (which may hold NULs) and expects a refusal mentioning each needle. */
static void expect_refused(const char *label, const char *text, size_t len,
                           const json_limits *lim, ferry_status status, const char *needle,
                           const char *needle2)
{
    cJSON *root = (cJSON *)1;
    fy_err err = {0};
    ferry_status got = json_parse(text, len, "f.json", lim, &root, &err);
    if (got != status)
        fail_msg("%s: status %d, expected %d (%s)", label, got, status, err.msg);
    assert_null(root);
    if (!strstr(err.msg, "f.json") || !strstr(err.msg, needle) ||
        (needle2 && !strstr(err.msg, needle2)))
        fail_msg("%s: message \"%s\" does not mention f.json, \"%s\" and \"%s\"", label, err.msg,
                 needle, needle2 ? needle2 : "");
}

#define REFUSED(label, lit, needle, needle2)                                                   \
    expect_refused(label, lit, sizeof lit - 1, &TEST_LIMITS, FERRY_ERR_FORMAT, needle, needle2)

/* A NUL in a string, escaped or raw, is cut by cJSON: ferry would validate "LlamaForCausalLM"
 * where every other reader sees the whole string. Every string ferry parses goes through
 * json_parse, so one refusal there covers config.json, generation_config.json, the index,
 * export.json, recipes and safetensors headers. */
static void test_nul_and_control_bytes(void **state)
{
    (void)state;
    REFUSED("escaped NUL in a value", "{\"architectures\": [\"LlamaForCausalLM\\u0000junk\"]}",
            "escaped NUL (\\u0000) in a string at byte 36", NULL);
    REFUSED("escaped NUL in a key", "{\"a\\u0000b\": 1}", "escaped NUL", "byte 3");
    REFUSED("escaped NUL in a path", "{\"file\": \"model.onnx\\u0000/../../x\"}",
            "escaped NUL", "byte 20");
    REFUSED("raw NUL in a string", "{\"a\": \"x\0y\"}",
            "raw control byte 0x00 in a string at byte 8", NULL);
    REFUSED("raw newline in a string", "{\"a\": \"x\ny\"}", "raw control byte 0x0a", NULL);
    REFUSED("raw escape byte in a key", "{\"\x1b[2J\": 1}",
            "raw control byte 0x1b in a string at byte 2", NULL);
    REFUSED("NUL after the value", "{\"a\": 1}\0", "control byte 0x00 at byte 8 is not JSON",
            NULL);
    REFUSED("NUL then a second object", "{\"a\": 1}\0{\"b\": 2}", "control byte 0x00", NULL);
    REFUSED("NUL between tokens", "{\"a\":\0 1}", "control byte 0x00 at byte 5", NULL);
    REFUSED("control byte between tokens", "{\"a\":\x01 1}", "control byte 0x01", NULL);
    REFUSED("DEL between tokens", "{\"a\": 1\x7f}", "control byte 0x7f", NULL);

    /* Not NULs: an escaped backslash followed by "u0000", other escapes, \u0001. */
    cJSON *root = parse("{\"a\": \"\\\\u0000\", \"b\": \"\\u0001\\n\\t\\\"\", \"c\\u00e9\": 1}");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(root, "a")->valuestring, "\\u0000");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(root, "b")->valuestring, "\x01\n\t\"");
    assert_non_null(cJSON_GetObjectItemCaseSensitive(root, "c\xc3\xa9"));
    cJSON_Delete(root);

    /* Offsets are the file's when the text starts further in (a safetensors header at 8). */
    fy_err err = {0};
    const char text[] = "{\"a\\u0000\": 1}";
    assert_int_equal(json_parse_at(text, sizeof text - 1, 8, "f.st", &TEST_LIMITS, &root, &err),
                     FERRY_ERR_FORMAT);
    assert_msg_has(err, "at byte 11");
    fy_err_clear(&err);
    assert_int_equal(json_parse_at("{\"a\": }", 7, 8, "f.st", &TEST_LIMITS, &root, &err),
                     FERRY_ERR_FORMAT);
    assert_msg_has(err, "invalid JSON near byte 14");
}

static void test_utf8(void **state)
{
    (void)state;
    REFUSED("stray continuation byte", "{\"a\": \"caf\xa9\"}", "not valid UTF-8 at byte 10", NULL);
    REFUSED("overlong slash", "{\"a\xc0\xaf\": 1}", "not valid UTF-8 at byte 3", NULL);
    REFUSED("surrogate", "{\"a\": \"\xed\xa0\x80\"}", "not valid UTF-8 at byte 7", NULL);
    REFUSED("cut short at the end", "{\"a\": \"\xe2\x82\"}", "not valid UTF-8", NULL);
    cJSON *root = parse("{\"caf\xc3\xa9\": \"\xf0\x9f\x98\x80\"}");
    cJSON_Delete(root);

    /* A kind that checks UTF-8 itself (a safetensors header, to name the tensor) can opt out. */
    json_limits lax = TEST_LIMITS;
    lax.utf8 = false;
    fy_err err = {0};
    assert_int_equal(json_parse("{\"a\": \"\xff\"}", 10, "f.json", &lax, &root, &err), FERRY_OK);
    cJSON_Delete(root);
}

/* The caps are checked before cJSON allocates anything, and reported as limits. */
static void test_limits(void **state)
{
    (void)state;
    json_limits lim = {.kind = "test file", .max_bytes = 64, .max_values = 5, .max_depth = 3,
                       .utf8 = true};
    static const struct { const char *text; size_t values; } counted[] = {
        {"1", 1}, {"[]", 1}, {"{}", 1}, {"[1]", 2}, {"[ [ ] , [ ] ]", 3},
        {"{\"a\": [1, 2], \"b\": {}}", 5}, {"[\"a,b\", \"[{\"]", 3}, {"[[[]]]", 3},
        {"{\"a\": {\"b\": {\"c\": 1}}}", 4},
    };
    cJSON *root;
    fy_err err = {0};
    for (size_t i = 0; i < sizeof counted / sizeof counted[0]; i++) {
        /* At the cap, accepted; one below it, refused with the exact count. */
        lim.max_values = counted[i].values;
        if (json_parse(counted[i].text, strlen(counted[i].text), "f.json", &lim, &root, &err) !=
            FERRY_OK)
            fail_msg("'%s' at its count %zu: %s", counted[i].text, counted[i].values, err.msg);
        cJSON_Delete(root);
        lim.max_values = counted[i].values - 1;
        char needle[96];
        snprintf(needle, sizeof needle, "%zu JSON values exceed the limit of %zu for a test file",
                 counted[i].values, counted[i].values - 1);
        expect_refused(counted[i].text, counted[i].text, strlen(counted[i].text), &lim,
                       FERRY_ERR_FORMAT, needle, NULL);
    }
    lim.max_values = 100;
    expect_refused("four levels", "[[[[]]]]", 8, &lim, FERRY_ERR_FORMAT,
                   "nesting deeper than 3 levels (at byte 3) exceeds the limit for a test file",
                   NULL);
    expect_refused("four levels of objects", "{\"a\":{\"b\":{\"c\":{}}}}", 20, &lim,
                   FERRY_ERR_FORMAT, "nesting deeper than 3 levels", NULL);
    /* Brackets inside strings are not nesting. */
    assert_int_equal(json_parse("[\"[[[[[[\"]", 10, "f.json", &lim, &root, &err), FERRY_OK);
    cJSON_Delete(root);
    char big[80];
    memset(big, ' ', sizeof big);
    big[0] = '1';
    expect_refused("65 bytes", big, 65, &lim, FERRY_ERR_FORMAT,
                   "65 bytes exceed the limit of 64 for a test file", NULL);

    /* Nesting past cJSON's own limit (1000) is a limit too, never a recursion. */
    lim.max_depth = 1000;
    lim.max_bytes = 1u << 20;
    char *deep = malloc(200001);
    assert_non_null(deep);
    memset(deep, '[', 100000);
    memset(deep + 100000, ']', 100000);
    expect_refused("100000 levels", deep, 200000, &lim, FERRY_ERR_FORMAT,
                   "nesting deeper than 1000 levels (at byte 1000)", NULL);
    free(deep);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_read_and_load, make_tmp, remove_tmp),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_get_int),
        cmocka_unit_test(test_get_double_bool_string),
        cmocka_unit_test(test_member_and_u64),
        cmocka_unit_test(test_nul_and_control_bytes),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
