/* test_manifest_load.c — ferry_exported_load on hostile export directories: export.json that
 * is malformed, oversized or deeply nested, names files outside the directory (absolute paths,
 * "..", links that leave), repeats keys, names things that are not regular files, or records
 * sizes the files do not have (or sizes that are not sizes), or names as a component's program
 * a file that is not one of its format's (by suffix and first bytes). Each is refused with one
 * line naming export.json and the culprit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ferry.h"

#include "scratch.h"
static char exp_dir[128];


static void link_at(const char *target, const char *rel)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", exp_dir, rel);
    assert_int_equal(symlink(target, path), 0);
}

/* tmp/secret.data (outside), tmp/export/ with model.onnx, model.onnx.data, sub/x.onnx, a FIFO,
 * a directory and links: inside.onnx -> model.onnx, outside.data -> ../secret.data,
 * absolute.data -> /etc/passwd, up -> .. */
static int make_export(void **state)
{
    (void)state;
    char path[512];
    if (scratch_make("load") != 0)
        return -1;
    snprintf(path, sizeof path, "%s/secret.data", tmp_dir);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    fclose(f);
    snprintf(exp_dir, sizeof exp_dir, "%s/export", tmp_dir);
    if (mkdir(exp_dir, 0755) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/sub", exp_dir);
    if (mkdir(path, 0755) != 0)
        return -1;
    scratch_write(exp_dir, "model.onnx", "\x08\x07on"); /* ir_version 7 */
    scratch_write(exp_dir, "model.onnx.data", "data");
    scratch_write(exp_dir, "sub/x.onnx", "\x08\x07onnx");
    snprintf(path, sizeof path, "%s/fifo.onnx", exp_dir);
    if (mkfifo(path, 0600) != 0)
        return -1;
    link_at("model.onnx", "inside.onnx");
    link_at("../secret.data", "outside.data");
    link_at("/etc/passwd", "absolute.data");
    link_at("..", "up");
    return 0;
}

static int remove_export(void **state)
{
    (void)state;
    return scratch_remove();
}

#define HEAD "{\"schema_version\": 1, \"format\": \"onnx\", "
/* A manifest with one component "model" whose file and data_files are given. */
#define ONE(file, data) \
    HEAD "\"components\": {\"model\": {\"file\": " file ", \"data_files\": " data \
    ", \"role\": \"model\"}}}"

static void expect_load_error(const char *label, const char *manifest, ferry_status status,
                              const char *needle)
{
    ferry_exported *e = NULL;
    if (manifest)
        scratch_write(exp_dir, "export.json", manifest);
    ferry_status got = ferry_exported_load(exp_dir, NULL, &e);
    const char *msg = ferry_exported_errmsg(e);
    if (got != status)
        fail_msg("%s: status %d, expected %d (message: %s)", label, got, status, msg);
    if (!strstr(msg, "export.json") || !strstr(msg, needle))
        fail_msg("%s: message \"%s\" does not name export.json and \"%s\"", label, msg, needle);
    for (const char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20)
            fail_msg("%s: control byte in message: %s", label, msg);
    ferry_exported_free(e);
}

static void expect_load_ok(const char *label, const char *manifest, int components)
{
    ferry_exported *e = NULL;
    scratch_write(exp_dir, "export.json", manifest);
    ferry_status got = ferry_exported_load(exp_dir, NULL, &e);
    if (got != FERRY_OK)
        fail_msg("%s: refused: %s", label, ferry_exported_errmsg(e));
    assert_int_equal(ferry_exported_component_count(e), components);
    ferry_exported_free(e);
}

static void test_good_manifests(void **state)
{
    (void)state;
    expect_load_ok("plain", ONE("\"model.onnx\"", "[\"model.onnx.data\"]"), 1);
    expect_load_ok("in a subdirectory", ONE("\"sub/x.onnx\"", "[]"), 1);
    expect_load_ok("a link that stays inside", ONE("\"inside.onnx\"", "[\"model.onnx.data\"]"), 1);
    expect_load_ok("through up/ but back inside", ONE("\"up/export/model.onnx\"", "[]"), 1);
    expect_load_ok("two components",
                   HEAD "\"components\": {\"prefill\": {\"file\": \"model.onnx\", \"role\": "
                   "\"prefill\"}, \"decode\": {\"file\": \"sub/x.onnx\", \"role\": \"decode\"}}}",
                   2);
}

static void test_paths_that_leave(void **state)
{
    (void)state;
    static const struct {
        const char *label, *manifest, *needle;
    } cases[] = {
        {"absolute file", ONE("\"/etc/passwd\"", "[]"),
         "names the file '/etc/passwd', which is not a plain relative path"},
        {"absolute data file", ONE("\"model.onnx\"", "[\"/tmp/model.onnx.data\"]"),
         "'/tmp/model.onnx.data', which is not a plain relative path"},
        {"dotdot", ONE("\"../secret.data\"", "[]"), "'../secret.data', which is not a plain"},
        {"nested dotdot", ONE("\"sub/../../secret.data\"", "[]"), "'sub/../../secret.data'"},
        {"dotdot at the end", ONE("\"sub/..\"", "[]"), "'sub/..'"},
        {"dot part", ONE("\"./model.onnx\"", "[]"), "'./model.onnx', which is not a plain"},
        {"empty part", ONE("\"sub//x.onnx\"", "[]"), "'sub//x.onnx'"},
        {"trailing slash", ONE("\"sub/\"", "[]"), "'sub/'"},
        {"empty path", ONE("\"\"", "[]"), "names the file '', which is not a plain"},
        {"backslash", ONE("\"..\\\\secret.data\"", "[]"), "which is not a plain relative path"},
        {"newline, quoted", ONE("\"model\\n.onnx\"", "[]"), "'model\\x0a.onnx'"},
        {"DEL, quoted", ONE("\"model\\u007f.onnx\"", "[]"), "'model\\x7f.onnx'"},
        {"link to the parent's file", ONE("\"outside.data\"", "[]"),
         "file 'outside.data' is missing or leaves the export directory"},
        {"link to an absolute path", ONE("\"model.onnx\"", "[\"absolute.data\"]"),
         "file 'absolute.data' is missing or leaves the export directory"},
        {"through a link to the parent", ONE("\"up/secret.data\"", "[]"),
         "file 'up/secret.data' is missing or leaves the export directory"},
        {"missing file", ONE("\"gone.onnx\"", "[]"), "file 'gone.onnx' is missing"},
        {"a directory as a file", ONE("\"sub\"", "[]"), "file 'sub' is not a regular file"},
        {"a FIFO as a file", ONE("\"fifo.onnx\"", "[]"), "file 'fifo.onnx' is not a regular file"},
        {"the directory itself through up/", ONE("\"up/export\"", "[]"),
         "file 'up/export' is missing or leaves the export directory"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_load_error(cases[i].label, cases[i].manifest, FERRY_ERR_FORMAT, cases[i].needle);
}

static void test_malformed_manifests(void **state)
{
    (void)state;
    static const struct {
        const char *label, *manifest;
        ferry_status status;
        const char *needle;
    } cases[] = {
        {"empty", "", FERRY_ERR_FORMAT, "empty"},
        {"not JSON", "{\"schema_version\": 1,", FERRY_ERR_FORMAT, "invalid JSON"},
        {"trailing data", ONE("\"model.onnx\"", "[]") " {}", FERRY_ERR_FORMAT,
         "unexpected data after the JSON value"},
        {"an array", "[1]", FERRY_ERR_FORMAT, "not a JSON object"},
        {"no schema", "{\"format\": \"onnx\"}", FERRY_ERR_UNSUPPORTED, "schema_version must be 1"},
        {"schema 2", "{\"schema_version\": 2}", FERRY_ERR_UNSUPPORTED, "schema_version must be 1"},
        {"schema as a string", "{\"schema_version\": \"1\"}", FERRY_ERR_UNSUPPORTED,
         "schema_version must be 1"},
        {"other format", "{\"schema_version\": 1, \"format\": \"dynamo\"}",
         FERRY_ERR_UNSUPPORTED, "format must be one of: onnx, openvino, pt2"},
        {"no components", HEAD "\"x\": 1}", FERRY_ERR_FORMAT, "'components' must be a non-empty"},
        {"empty components", HEAD "\"components\": {}}", FERRY_ERR_FORMAT,
         "'components' must be a non-empty"},
        {"components as an array", HEAD "\"components\": [1]}", FERRY_ERR_FORMAT,
         "'components' must be a non-empty"},
        {"nine components",
         HEAD "\"components\": {\"a\": 1, \"b\": 1, \"c\": 1, \"d\": 1, \"e\": 1, \"f\": 1, "
         "\"g\": 1, \"h\": 1, \"i\": 1}}", FERRY_ERR_FORMAT, "more than 8 components"},
        {"component not an object", HEAD "\"components\": {\"model\": 3}}", FERRY_ERR_FORMAT,
         "component 'model' needs a string 'file' and 'role'"},
        {"file a number", HEAD "\"components\": {\"model\": {\"file\": 1, \"role\": \"m\"}}}",
         FERRY_ERR_FORMAT, "component 'model' needs a string 'file'"},
        {"no role", HEAD "\"components\": {\"model\": {\"file\": \"model.onnx\"}}}",
         FERRY_ERR_FORMAT, "needs a string 'file' and 'role'"},
        {"data_files not an array", ONE("\"model.onnx\"", "\"model.onnx.data\""),
         FERRY_ERR_FORMAT, "needs a string 'file' and 'role'"},
        {"data_files with a number", ONE("\"model.onnx\"", "[7]"), FERRY_ERR_FORMAT,
         "data_files must hold strings"},
        {"empty role", HEAD "\"components\": {\"m\": {\"file\": \"model.onnx\", \"role\": \"\"}}}",
         FERRY_ERR_FORMAT, "the name and role must be non-empty"},
        {"escape sequence in a component name",
         HEAD "\"components\": {\"\\u001b[2J\": {\"file\": \"model.onnx\", \"role\": \"m\"}}}",
         FERRY_ERR_FORMAT, "key '\\x1b[2J' holds a control, format or invalid character at "
         "byte 0"},
        /* `ferry inspect` prints metadata: no string there may drive the terminal. */
        {"escape sequence in an input name",
         HEAD "\"components\": {\"model\": {\"file\": \"model.onnx\", \"role\": \"m\", "
         "\"metadata\": {\"inputs\": [{\"name\": \"ids\\u001b]0;x\\u0007\"}]}}}}",
         FERRY_ERR_FORMAT, "key 'name': the string 'ids\\x1b]0;x\\x07' holds a control, format "
         "or invalid character at byte 3"},
        {"newline in a metadata key",
         HEAD "\"components\": {\"model\": {\"file\": \"model.onnx\", \"role\": \"m\", "
         "\"metadata\": {\"a\\nb\": 1}}}}", FERRY_ERR_FORMAT,
         "key 'a\\x0ab' holds a control, format or invalid character at byte 1"},
        /* Not only C0: C1 controls (U+009B is CSI), bidi overrides and invisible characters,
         * which text_quote escapes on output, are refused in export.json outright. */
        {"C1 CSI in an input name",
         HEAD "\"components\": {\"model\": {\"file\": \"model.onnx\", \"role\": \"m\", "
         "\"metadata\": {\"inputs\": [{\"name\": \"ids\\u009b2J\"}]}}}}", FERRY_ERR_FORMAT,
         "key 'name': the string 'ids\\u009b2J' holds a control, format or invalid character "
         "at byte 3"},
        {"right-to-left override in a metadata key",
         HEAD "\"components\": {\"model\": {\"file\": \"model.onnx\", \"role\": \"m\", "
         "\"metadata\": {\"ab\\u202ecd\": 1}}}}", FERRY_ERR_FORMAT,
         "key 'ab\\u202ecd' holds a control, format or invalid character at byte 2"},
        {"zero-width joiner in a component name",
         HEAD "\"components\": {\"mo\\u200ddel\": {\"file\": \"model.onnx\", \"role\": \"m\"}}}",
         FERRY_ERR_FORMAT, "key 'mo\\u200ddel' holds a control, format or invalid character at "
         "byte 2"},
        {"isolate in a role",
         HEAD "\"components\": {\"model\": {\"file\": \"model.onnx\", \"role\": \"\\u2066m\"}}}",
         FERRY_ERR_FORMAT, "key 'role': the string '\\u2066m' holds a control"},
        {"tag character in the architecture", HEAD "\"architecture\": \"L\\udb40\\udc41\", "
         "\"components\": {\"model\": {\"file\": \"model.onnx\", \"role\": \"m\"}}}",
         FERRY_ERR_FORMAT, "the string 'L\\udb40\\udc41' holds a control, format or invalid "
         "character at byte 1"},
        /* Repeated keys: cJSON would validate the first copy, Python's json use the last. */
        {"components twice",
         HEAD "\"components\": {\"model\": {\"file\": \"model.onnx\", \"role\": \"m\"}}, "
         "\"components\": {\"model\": {\"file\": \"/etc/passwd\", \"role\": \"m\"}}}",
         FERRY_ERR_FORMAT, "key 'components' appears more than once"},
        {"file twice", HEAD "\"components\": {\"model\": {\"file\": \"model.onnx\", \"file\": "
         "\"../secret.data\", \"role\": \"m\"}}}", FERRY_ERR_FORMAT,
         "key 'file' appears more than once"},
        {"component twice", HEAD "\"components\": {\"model\": {\"file\": \"model.onnx\", "
         "\"role\": \"m\"}, \"model\": {\"file\": \"sub/x.onnx\", \"role\": \"m\"}}}",
         FERRY_ERR_FORMAT, "key 'model' appears more than once"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_load_error(cases[i].label, cases[i].manifest, cases[i].status, cases[i].needle);
    /* A repeated key deep in metadata is refused too. */
    expect_load_error("repeat in metadata",
                      HEAD "\"components\": {\"model\": {\"file\": \"model.onnx\", \"role\": \"m\","
                      " \"metadata\": {\"inputs\": [{\"name\": \"a\", \"name\": \"b\"}]}}}}",
                      FERRY_ERR_FORMAT, "key 'name' appears more than once");

    /* Nesting past the parser's limit. */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 256);
    assert_non_null(deep);
    size_t o = (size_t)sprintf(deep, HEAD "\"x\": ");
    memset(deep + o, '[', depth);
    memset(deep + o + depth, ']', depth);
    strcpy(deep + o + 2 * depth, "}");
    expect_load_error("nested 100000 deep", deep, FERRY_ERR_FORMAT,
                      "nesting deeper than 32 levels");
    free(deep);

    /* 17 MB (sparse): over the 16 MB cap, refused from its size. */
    char path[512];
    snprintf(path, sizeof path, "%s/export.json", exp_dir);
    scratch_write(exp_dir, "export.json", "{}");
    assert_int_equal(truncate(path, (off_t)17 << 20), 0);
    expect_load_error("17 MB", NULL, FERRY_ERR_FORMAT, "exceed the limit of 16777216");

    /* export.json as a FIFO or a directory. */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkfifo(path, 0600), 0);
    expect_load_error("FIFO", NULL, FERRY_ERR_IO, "not a regular file");
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkdir(path, 0700), 0);
    expect_load_error("directory", NULL, FERRY_ERR_IO, "not a regular file");
    assert_int_equal(rmdir(path), 0);
    expect_load_error("missing", NULL, FERRY_ERR_IO, "cannot open");
}

/* A manifest with component "model" (model.onnx, model.onnx.data: 4 bytes each) and `bytes`. */
#define SIZED(bytes) \
    HEAD "\"components\": {\"model\": {\"file\": \"model.onnx\", \"data_files\": " \
    "[\"model.onnx.data\"], \"role\": \"model\", \"bytes\": " bytes "}}}"

static void test_recorded_sizes(void **state)
{
    (void)state;
    expect_load_ok("sizes that match", SIZED("{\"model.onnx\": 4, \"model.onnx.data\": 4}"), 1);
    static const struct {
        const char *label, *manifest, *needle;
    } cases[] = {
        {"a file cut short", SIZED("{\"model.onnx\": 4, \"model.onnx.data\": 5}"),
         "model.onnx.data: 4 bytes, where the export wrote 5"},
        {"a file grown", SIZED("{\"model.onnx\": 3, \"model.onnx.data\": 4}"),
         "model.onnx: 4 bytes, where the export wrote 3"},
        {"not an object", SIZED("[4, 4]"), "'bytes' must be an object"},
        {"a file left out", SIZED("{\"model.onnx\": 4}"), "size of each of its 2 files"},
        {"another name", SIZED("{\"model.onnx\": 4, \"other\": 4}"),
         "'bytes' has no entry for its file 'model.onnx.data'"},
        {"a name too many", SIZED("{\"model.onnx\": 4, \"model.onnx.data\": 4, \"x\": 1}"),
         "size of each of its 2 files"},
        {"negative", SIZED("{\"model.onnx\": -4, \"model.onnx.data\": 4}"),
         "whole number of bytes for 'model.onnx'"},
        {"a fraction", SIZED("{\"model.onnx\": 4.5, \"model.onnx.data\": 4}"),
         "whole number of bytes for 'model.onnx'"},
        {"2^53", SIZED("{\"model.onnx\": 9007199254740992, \"model.onnx.data\": 4}"),
         "whole number of bytes for 'model.onnx'"},
        {"a string", SIZED("{\"model.onnx\": \"4\", \"model.onnx.data\": 4}"),
         "whole number of bytes for 'model.onnx'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_load_error(cases[i].label, cases[i].manifest, FERRY_ERR_FORMAT, cases[i].needle);
}

/* A manifest of `format` ("onnx", ...) whose one component has `file` and no data files. */
#define PROGRAM(format, file) \
    "{\"schema_version\": 1, \"format\": \"" format "\", \"components\": {\"model\": " \
    "{\"file\": \"" file "\", \"role\": \"model\"}}}"
#define TF_PROGRAM(format, file) \
    "{\"export_format\": \"" format "\", \"components\": {\"model\": {\"file\": \"" file \
    "\", \"metadata\": {}}}}"

/* A component file of another kind than its format's programs (export.json, config.json, a
 * data file, text) passed every check and reached the runtime, whose own error named neither. */
static void test_program_files(void **state)
{
    (void)state;
    scratch_write(exp_dir, "config.json", "{\"model_type\": \"llama\"}");
    scratch_write(exp_dir, "json.onnx", "{\"model_type\": \"llama\"}");
    scratch_write(exp_dir, "text.onnx", "garbage bytes");
    scratch_write(exp_dir, "empty.onnx", "");
    scratch_write(exp_dir, "producer_first.onnx", "\x12\x05" "ferry");
    scratch_write(exp_dir, "functions_first.onnx", "\xaa\x01" "x");
    scratch_write(exp_dir, "bom.xml", "\xef\xbb\xbf \r\n\t<?xml version=\"1.0\"?>");
    scratch_write(exp_dir, "bom.bin", "");
    scratch_write(exp_dir, "net.xml", "<net/>");
    scratch_write(exp_dir, "net.bin", "");
    scratch_write(exp_dir, "nobin.xml", "<net/>");
    scratch_write(exp_dir, "text.xml", "garbage <net/>");
    scratch_write(exp_dir, "text.bin", "");
    scratch_write(exp_dir, "zip.pt2", "PK\x03\x04rest");
    scratch_write(exp_dir, "text.pt2", "garbage bytes");
    scratch_write(exp_dir, "onnx.pt2", "\x08\x07on");
    expect_load_ok("ONNX: ir_version first", PROGRAM("onnx", "model.onnx"), 1);
    expect_load_ok("ONNX: another field first", PROGRAM("onnx", "producer_first.onnx"), 1);
    expect_load_ok("ONNX: a two-byte tag first", PROGRAM("onnx", "functions_first.onnx"), 1);
    expect_load_ok("OpenVINO: BOM, whitespace, <?xml", PROGRAM("openvino", "bom.xml"), 1);
    expect_load_ok("OpenVINO: <net", PROGRAM("openvino", "net.xml"), 1);
    expect_load_ok("pt2: a zip", PROGRAM("pt2", "zip.pt2"), 1);
    static const struct {
        const char *label, *manifest, *needle;
    } cases[] = {
        {"ONNX: export.json", PROGRAM("onnx", "export.json"),
         "component 'model': file 'export.json' is not an ONNX model: onnx program files end "
         "in .onnx"},
        {"ONNX: config.json", PROGRAM("onnx", "config.json"), "file 'config.json' is not an ONNX"},
        {"ONNX: its data file", PROGRAM("onnx", "model.onnx.data"),
         "file 'model.onnx.data' is not an ONNX model"},
        {"ONNX: JSON", PROGRAM("onnx", "json.onnx"),
         "component 'model': file 'json.onnx' is not an ONNX model: its first bytes are not a "
         "protobuf ModelProto's"},
        {"ONNX: text", PROGRAM("onnx", "text.onnx"), "file 'text.onnx' is not an ONNX model"},
        {"ONNX: empty", PROGRAM("onnx", "empty.onnx"), "file 'empty.onnx' is not an ONNX model"},
        {"ONNX: a pt2 suffix", PROGRAM("onnx", "zip.pt2"), "end in .onnx"},
        {"OpenVINO: an ONNX file", PROGRAM("openvino", "model.onnx"),
         "file 'model.onnx' is not an OpenVINO IR: openvino program files end in .xml"},
        {"OpenVINO: text", PROGRAM("openvino", "text.xml"),
         "file 'text.xml' is not an OpenVINO IR: its first bytes are not <?xml or <net"},
        {"OpenVINO: no .bin", PROGRAM("openvino", "nobin.xml"), "file 'nobin.bin' is missing"},
        {"pt2: export.json", PROGRAM("pt2", "export.json"), "end in .pt2"},
        {"pt2: text", PROGRAM("pt2", "text.pt2"),
         "file 'text.pt2' is not a pt2 program: its first bytes are not a zip archive's"},
        {"pt2: ONNX bytes", PROGRAM("pt2", "onnx.pt2"), "file 'onnx.pt2' is not a pt2 program"},
        /* transformers' schema, the same checks */
        {"transformers dynamo: text", TF_PROGRAM("dynamo", "text.pt2"),
         "file 'text.pt2' is not a pt2 program"},
        {"transformers dynamo: export.json", TF_PROGRAM("dynamo", "export.json"),
         "end in .pt2"},
        {"transformers OpenVINO: text", TF_PROGRAM("openvino", "text.xml"),
         "file 'text.xml' is not an OpenVINO IR"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_load_error(cases[i].label, cases[i].manifest, FERRY_ERR_FORMAT, cases[i].needle);
}

static void test_subfolders(void **state)
{
    (void)state;
    ferry_exported *e = NULL;
    scratch_write(exp_dir, "sub/export.json",
                  "{\"schema_version\": 1, \"format\": \"onnx\", \"components\": "
                  "{\"model\": {\"file\": \"x.onnx\", \"role\": \"model\"}}}");
    assert_int_equal(ferry_exported_load(exp_dir, "sub", &e), FERRY_OK);
    ferry_exported_free(e);
    static const char *const bad[] = {"..", "../export", "/tmp", "sub/..", "./sub", "sub\\x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ferry_exported_load(exp_dir, bad[i], &e), FERRY_ERR_INVALID_ARG);
        if (!strstr(ferry_exported_errmsg(e), "must be a relative path inside"))
            fail_msg("subfolder %s: %s", bad[i], ferry_exported_errmsg(e));
        ferry_exported_free(e);
    }
    /* A subfolder that is a link leaving the directory: its export.json names files that are
     * inside the link's target, but the link itself is where the caller pointed. */
    assert_int_equal(ferry_exported_load(exp_dir, "up", &e), FERRY_ERR_IO);
    ferry_exported_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_good_manifests, make_export, remove_export),
        cmocka_unit_test_setup_teardown(test_paths_that_leave, make_export, remove_export),
        cmocka_unit_test_setup_teardown(test_malformed_manifests, make_export, remove_export),
        cmocka_unit_test_setup_teardown(test_recorded_sizes, make_export, remove_export),
        cmocka_unit_test_setup_teardown(test_subfolders, make_export, remove_export),
        cmocka_unit_test_setup_teardown(test_program_files, make_export, remove_export),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
