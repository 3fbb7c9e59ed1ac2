/* test_transformers_manifest.c — ferry_exported_load on the export.json transformers'
 * ExportedModel.save_pretrained writes, and on its ExportMetadata keys in ferry's own: what it
 * accepts (components, files and the sidecar transformers' loader fetches), and each malformed
 * key, size or index refused with one line naming export.json, the component and the key. */
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

/* tmp/secret.data (outside); tmp/export/ with model.onnx + model.onnx.data, decode.onnx without
 * its .data, openvino_model.xml + .bin, model.pt2 */
static int make_export(void **state)
{
    (void)state;
    char path[512];
    if (scratch_make("tfload") != 0)
        return -1;
    snprintf(path, sizeof path, "%s/secret.data", tmp_dir);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    fclose(f);
    snprintf(exp_dir, sizeof exp_dir, "%s/export", tmp_dir);
    if (mkdir(exp_dir, 0755) != 0)
        return -1;
    scratch_write(exp_dir, "model.onnx", "\x08\x07onnx");
    scratch_write(exp_dir, "model.onnx.data", "data");
    scratch_write(exp_dir, "decode.onnx", "\x08\x07onnx");
    scratch_write(exp_dir, "openvino_model.xml", "<net/>");
    scratch_write(exp_dir, "openvino_model.bin", "bin");
    scratch_write(exp_dir, "model.pt2", "PK\x03\x04pt2");
    return 0;
}

static int remove_export(void **state)
{
    (void)state;
    return scratch_remove();
}

/* `raw` as a JSON string literal (quotes and backslashes escaped), for spec texts. */
static const char *jstr(const char *raw)
{
    static char ring[4][8192];
    static int next;
    char *out = ring[next = (next + 1) % 4], *p = out;
    *p++ = '"';
    for (; *raw; raw++) {
        if (*raw == '"' || *raw == '\\')
            *p++ = '\\';
        *p++ = *raw;
    }
    *p++ = '"';
    *p = 0;
    return out;
}

#define LEAF "{\"type\": null, \"context\": null, \"children_spec\": []}"
/* out_spec of a CausalLMOutputWithPast with two tensor leaves */
#define OUT2 "[1, {\"type\": \"transformers.modeling_outputs.CausalLMOutputWithPast\", " \
             "\"context\": \"[\\\"logits\\\", \\\"loss\\\"]\", \"children_spec\": [" LEAF \
             ", " LEAF "]}]"

/* A transformers export.json whose one component "model" (model.onnx) has metadata `md`. */
static const char *tf_manifest(const char *md)
{
    static char text[1 << 20];
    snprintf(text, sizeof text, "{\"schema_version\": 1, \"export_format\": \"onnx\", "
             "\"components\": {\"model\": {\"file\": \"model.onnx\", \"metadata\": %s}}}", md);
    return text;
}

static void expect_error(const char *label, const char *manifest, ferry_status status,
                         const char *needle)
{
    ferry_exported *e = NULL;
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

static ferry_exported *expect_ok(const char *label, const char *manifest)
{
    ferry_exported *e = NULL;
    scratch_write(exp_dir, "export.json", manifest);
    if (ferry_exported_load(exp_dir, NULL, &e) != FERRY_OK)
        fail_msg("%s: refused: %s", label, ferry_exported_errmsg(e));
    return e;
}

static void test_accepted(void **state)
{
    (void)state;
    /* what transformers 5.24 writes for a tiny Llama (abridged packages and export_config) */
    char md[8192];
    snprintf(md, sizeof md,
             "{\"architecture\": \"LlamaForCausalLM\", \"packages\": {\"transformers\": "
             "\"5.24.0\", \"torch\": \"2.13.0+cpu\"}, \"export_config\": {\"dynamic\": true}, "
             "\"export_dtype\": \"float32\", \"export_device\": \"cpu\", \"kwargs\": "
             "{\"input_ids\": {\"rank\": 2, \"shape\": [2, 5], \"dtype\": \"int64\"}, "
             "\"cache\": {\"container\": \"DynamicCache\"}, \"pixel\": {\"leaves\": {\"a\": "
             "{\"rank\": 0, \"shape\": [], \"dtype\": \"float32\"}}}}, "
             "\"in_spec\": %s, \"out_spec\": %s, \"in_constants\": {\"use_cache\": true, "
             "\"x\": null}, \"out_constants\": [[1, null]]}",
             jstr("[1, {\"type\": \"builtins.dict\", \"context\": \"[\\\"input_ids\\\"]\", "
                  "\"children_spec\": [" LEAF "]}]"), jstr(OUT2));
    ferry_exported *e = expect_ok("transformers' metadata", tf_manifest(md));
    assert_int_equal(ferry_exported_component_count(e), 1);
    assert_string_equal(ferry_exported_component_name(e, 0), "model");
    assert_string_equal(ferry_exported_component_file(e, 0), "model.onnx");
    assert_string_equal(ferry_exported_component_data_file(e, 0), "model.onnx.data");
    ferry_exported_free(e);

    e = expect_ok("an architecture with a space and a non-ASCII letter",
                  tf_manifest("{\"architecture\": \"My Llama\u00e9ForCausalLM\"}"));
    ferry_exported_free(e);
    e = expect_ok("no version, empty metadata, nulls",
                  "{\"export_format\": \"onnx\", \"components\": {\"model\": {\"file\": "
                  "\"model.onnx\", \"metadata\": {\"architecture\": null, \"in_spec\": null, "
                  "\"out_spec\": null}}}}");
    ferry_exported_free(e);
    e = expect_ok("openvino", "{\"schema_version\": 1, \"export_format\": \"openvino\", "
                  "\"components\": {\"model\": {\"file\": \"openvino_model.xml\", "
                  "\"metadata\": {}}}}");
    assert_string_equal(ferry_exported_component_data_file(e, 0), "openvino_model.bin");
    ferry_exported_free(e);
    e = expect_ok("dynamo, no sidecar", "{\"export_format\": \"dynamo\", \"components\": "
                  "{\"model\": {\"file\": \"model.pt2\", \"metadata\": {}}}}");
    assert_null(ferry_exported_component_data_file(e, 0));
    ferry_exported_free(e);
}

static void test_malformed_top(void **state)
{
    (void)state;
    static const struct {
        const char *label, *manifest, *needle;
        ferry_status status;
    } cases[] = {
        {"schema 2", "{\"schema_version\": 2, \"export_format\": \"onnx\", \"components\": {}}",
         "schema_version must be 1", FERRY_ERR_UNSUPPORTED},
        {"unknown format", "{\"export_format\": \"tflite\", \"components\": {}}",
         "export_format must be one of transformers' formats: onnx, openvino",
         FERRY_ERR_UNSUPPORTED},
        {"format not a string", "{\"export_format\": 3, \"components\": {}}",
         "export_format must be one of", FERRY_ERR_UNSUPPORTED},
        {"no components", "{\"export_format\": \"onnx\", \"components\": {}}",
         "'components' must be a non-empty object", FERRY_ERR_FORMAT},
        {"components an array", "{\"export_format\": \"onnx\", \"components\": [1]}",
         "'components' must be a non-empty object", FERRY_ERR_FORMAT},
        {"nine components", "{\"export_format\": \"dynamo\", \"components\": {\"a\": 1, "
         "\"b\": 1, \"c\": 1, \"d\": 1, \"e\": 1, \"f\": 1, \"g\": 1, \"h\": 1, \"i\": 1}}",
         "more than 8 components", FERRY_ERR_FORMAT},
        {"name with a slash", "{\"export_format\": \"onnx\", \"components\": {\"../model\": "
         "{\"file\": \"model.onnx\", \"metadata\": {}}}}",
         "component name '../model' is not a plain name", FERRY_ERR_FORMAT},
        {"hidden name", "{\"export_format\": \"onnx\", \"components\": {\".model\": "
         "{\"file\": \"model.onnx\", \"metadata\": {}}}}", "is not a plain name",
         FERRY_ERR_FORMAT},
        {"file not a string", "{\"export_format\": \"onnx\", \"components\": {\"model\": "
         "{\"file\": 1, \"metadata\": {}}}}", "component 'model' needs a string 'file'",
         FERRY_ERR_FORMAT},
        {"component not an object", "{\"export_format\": \"onnx\", \"components\": "
         "{\"model\": \"model.onnx\"}}", "component 'model' needs a string 'file'",
         FERRY_ERR_FORMAT},
        {"no metadata", "{\"export_format\": \"onnx\", \"components\": {\"model\": "
         "{\"file\": \"model.onnx\"}}}", "metadata must be an object", FERRY_ERR_FORMAT},
        {"file outside", "{\"export_format\": \"onnx\", \"components\": {\"model\": "
         "{\"file\": \"../secret.data\", \"metadata\": {}}}}",
         "'../secret.data', which is not a plain relative path", FERRY_ERR_FORMAT},
        {"file missing", "{\"export_format\": \"onnx\", \"components\": {\"model\": "
         "{\"file\": \"prefill.onnx\", \"metadata\": {}}}}",
         "file 'prefill.onnx' is missing", FERRY_ERR_FORMAT},
        {"sidecar missing", "{\"export_format\": \"onnx\", \"components\": {\"decode\": "
         "{\"file\": \"decode.onnx\", \"metadata\": {}}}}",
         "file 'decode.onnx.data' is missing", FERRY_ERR_FORMAT},
        {"wrong suffix", "{\"export_format\": \"openvino\", \"components\": {\"model\": "
         "{\"file\": \"model.onnx\", \"metadata\": {}}}}",
         "an openvino file must end in .xml", FERRY_ERR_FORMAT},
        {"repeated key", "{\"export_format\": \"onnx\", \"export_format\": \"dynamo\", "
         "\"components\": {}}", "key 'export_format' appears more than once", FERRY_ERR_FORMAT},
        /* ferry's own schema carrying transformers' keys */
        {"ferry: export_format differs", "{\"schema_version\": 1, \"format\": \"onnx\", "
         "\"export_format\": \"openvino\", \"components\": {\"model\": {\"file\": "
         "\"model.onnx\", \"role\": \"model\"}}}",
         "export_format (transformers' key) must be transformers' name of the format",
         FERRY_ERR_FORMAT},
        /* ferry's name, not transformers' (which refuses "pt2") */
        {"ferry: export_format pt2", "{\"schema_version\": 1, \"format\": \"pt2\", "
         "\"export_format\": \"pt2\", \"components\": {\"model\": {\"file\": "
         "\"model.pt2\", \"role\": \"model\"}}}",
         "export_format (transformers' key) must be transformers' name of the format",
         FERRY_ERR_FORMAT},
        {"ferry: export_format and a refusal", "{\"schema_version\": 1, \"format\": \"onnx\", "
         "\"export_format\": \"onnx\", \"transformers\": {\"unsupported\": \"x\"}, "
         "\"components\": {\"model\": {\"file\": \"model.onnx\", \"role\": \"model\"}}}",
         "one of them was edited", FERRY_ERR_FORMAT},
        {"ferry: export_format without specs", "{\"schema_version\": 1, \"format\": \"onnx\", "
         "\"export_format\": \"onnx\", \"components\": {\"model\": {\"file\": "
         "\"model.onnx\", \"role\": \"model\", \"metadata\": {}}}}",
         "component 'model': export_format says transformers loads the export, and its "
         "metadata has no in_spec and out_spec", FERRY_ERR_FORMAT},
        {"ferry: transformers not an object", "{\"schema_version\": 1, \"format\": \"onnx\", "
         "\"transformers\": \"no\", \"components\": {\"model\": {\"file\": \"model.onnx\", "
         "\"role\": \"model\"}}}", "'transformers' must be an object", FERRY_ERR_FORMAT},
        {"ferry: bad kwargs", "{\"schema_version\": 1, \"format\": \"onnx\", \"components\": "
         "{\"model\": {\"file\": \"model.onnx\", \"role\": \"model\", \"metadata\": "
         "{\"kwargs\": {\"input_ids\": {\"rank\": 2, \"shape\": [1], \"dtype\": "
         "\"int64\"}}}}}}", "component 'model': metadata.kwargs: 'input_ids': shape must be",
         FERRY_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_error(cases[i].label, cases[i].manifest, cases[i].status, cases[i].needle);
}

static void test_malformed_metadata(void **state)
{
    (void)state;
    static const struct {
        const char *label, *md, *needle;
    } cases[] = {
        {"metadata a list", "[]", "metadata must be an object"},
        {"dtype with a space", "{\"export_dtype\": \"float 32\"}",
         "metadata.export_dtype must be a name"},
        {"device a number", "{\"export_device\": 0}", "metadata.export_device must be a name"},
        {"architecture empty", "{\"architecture\": \"\"}", "metadata.architecture must be"},
        {"packages a list", "{\"packages\": []}", "metadata.packages must be an object"},
        {"package version a number", "{\"packages\": {\"torch\": 2}}",
         "metadata.packages: each entry must be"},
        {"export_config a string", "{\"export_config\": \"x\"}",
         "metadata.export_config must be an object"},
        {"kwargs a list", "{\"kwargs\": []}", "metadata.kwargs must be an object"},
        {"kwarg a number", "{\"kwargs\": {\"input_ids\": 1}}",
         "metadata.kwargs: 'input_ids' must be an object"},
        {"kwarg empty", "{\"kwargs\": {\"input_ids\": {}}}",
         "'input_ids' must describe a tensor (rank, shape, dtype)"},
        {"rank 65", "{\"kwargs\": {\"x\": {\"rank\": 65, \"shape\": [], \"dtype\": \"int64\"}}}",
         "'x': rank must be an integer from 0 to 64"},
        {"rank -1", "{\"kwargs\": {\"x\": {\"rank\": -1, \"shape\": [], \"dtype\": \"int64\"}}}",
         "rank must be an integer"},
        {"rank 1.5", "{\"kwargs\": {\"x\": {\"rank\": 1.5, \"shape\": [1], \"dtype\": \"i\"}}}",
         "rank must be an integer"},
        {"rank a string", "{\"kwargs\": {\"x\": {\"rank\": \"2\", \"shape\": [1, 1], "
         "\"dtype\": \"int64\"}}}", "rank must be an integer"},
        {"rank without shape", "{\"kwargs\": {\"x\": {\"rank\": 1, \"dtype\": \"int64\"}}}",
         "'x': shape must be an array of rank (1) sizes"},
        {"shape longer than rank", "{\"kwargs\": {\"x\": {\"rank\": 1, \"shape\": [1, 2], "
         "\"dtype\": \"int64\"}}}", "shape must be an array of rank (1) sizes"},
        {"negative size", "{\"kwargs\": {\"x\": {\"rank\": 1, \"shape\": [-1], "
         "\"dtype\": \"int64\"}}}", "'x': shape holds a size that is not an integer"},
        {"huge size", "{\"kwargs\": {\"x\": {\"rank\": 1, \"shape\": [1e300], "
         "\"dtype\": \"int64\"}}}", "shape holds a size that is not an integer"},
        {"size 2^53", "{\"kwargs\": {\"x\": {\"rank\": 1, \"shape\": [9007199254740992], "
         "\"dtype\": \"int64\"}}}", "shape holds a size that is not an integer"},
        {"no dtype", "{\"kwargs\": {\"x\": {\"rank\": 0, \"shape\": []}}}",
         "'x': dtype must be a name"},
        {"leaves a list", "{\"kwargs\": {\"x\": {\"leaves\": []}}}", "'x' must describe"},
        {"container empty", "{\"kwargs\": {\"x\": {\"container\": \"\"}}}", "'x' must describe"},
        {"bad leaf", "{\"kwargs\": {\"x\": {\"leaves\": {\"y\": {\"rank\": 1, \"shape\": [], "
         "\"dtype\": \"int64\"}}}}}", "'y': shape must be an array"},
        {"in_spec a number", "{\"in_spec\": 1}", "metadata.in_spec must be a string"},
        {"in_spec not JSON", "{\"in_spec\": \"[1, {\"}", "metadata.in_spec"},
        {"in_spec protocol 2", "{\"in_spec\": \"[2, null]\"}",
         "metadata.in_spec must be [1, node]"},
        {"in_spec three items", "{\"in_spec\": \"[1, {}, 3]\"}", "must be [1, node]"},
        {"out_spec node without children",
         "{\"out_spec\": \"[1, {\\\"type\\\": null, \\\"context\\\": null}]\"}",
         "metadata.out_spec: a node must be"},
        {"out_spec type with a quote",
         "{\"out_spec\": \"[1, {\\\"type\\\": \\\"a\\\\\\\"b\\\", \\\"context\\\": null, "
         "\\\"children_spec\\\": []}]\"}", "metadata.out_spec: a node must be"},
        {"out_spec context a number",
         "{\"out_spec\": \"[1, {\\\"type\\\": \\\"t\\\", \\\"context\\\": 1, "
         "\\\"children_spec\\\": []}]\"}", "metadata.out_spec: a node must be"},
        {"out_spec leaf with children",
         "{\"out_spec\": \"[1, {\\\"type\\\": null, \\\"context\\\": null, "
         "\\\"children_spec\\\": [1]}]\"}", "a leaf (type null) has children"},
        {"in_constants a list", "{\"in_constants\": []}", "metadata.in_constants must be"},
        {"in_constant an object", "{\"in_constants\": {\"a\": {}}}",
         "metadata.in_constants: each value must be"},
        {"out_constants an object", "{\"out_constants\": {}}",
         "metadata.out_constants must be an array"},
        {"out_constant a pair of three", "{\"out_constants\": [[0, 1, 2]]}",
         "metadata.out_constants: each entry must be"},
        {"out_constant index negative", "{\"out_constants\": [[-1, 1]]}",
         "each entry must be [leaf index"},
        {"out_constant a list value", "{\"out_constants\": [[0, [1]]]}",
         "each entry must be [leaf index"},
        {"out_constant without out_spec", "{\"out_constants\": [[0, 1]]}",
         "leaf index 0 is out of order or not below out_spec's 0 leaves"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char needle[256];
        snprintf(needle, sizeof needle, "component 'model': %s", cases[i].needle);
        /* the first cases' needles start with "metadata" and are found after the component;
         * the others are found anywhere after it */
        expect_error(cases[i].label, tf_manifest(cases[i].md), FERRY_ERR_FORMAT,
                     strncmp(cases[i].needle, "metadata", 8) == 0 ? needle : cases[i].needle);
    }
}

/* Sizes that only a generated file reaches: deep specs and leaves, long specs, many kwargs,
 * constant indices past the spec's leaves. */
static void test_bounds(void **state)
{
    (void)state;
    char *spec = malloc(1 << 20), *md = malloc(6 << 20);
    assert_non_null(spec);
    assert_non_null(md);

    /* out_constants against out_spec's two leaves: [1] fits, [2] does not, nor an order that
     * goes back */
    snprintf(md, 1 << 20, "{\"out_spec\": %s, \"out_constants\": [[2, 0]]}", jstr(OUT2));
    expect_error("constant past the leaves", tf_manifest(md), FERRY_ERR_FORMAT,
                 "leaf index 2 is out of order or not below out_spec's 2 leaves");
    snprintf(md, 1 << 20, "{\"out_spec\": %s, \"out_constants\": [[1, 0], [0, 0]]}",
             jstr(OUT2));
    expect_error("constants out of order", tf_manifest(md), FERRY_ERR_FORMAT,
                 "leaf index 0 is out of order");
    snprintf(md, 1 << 20, "{\"out_spec\": %s, \"out_constants\": [[1, 0], [1, 0]]}",
             jstr(OUT2));
    expect_error("a constant twice", tf_manifest(md), FERRY_ERR_FORMAT,
                 "leaf index 1 is out of order");

    /* a spec nested 40 nodes deep (80 JSON levels) passes the manifest's own depth, as a
     * string, and is refused by the spec's */
    size_t n = 0;
    n += (size_t)sprintf(spec + n, "[1, ");
    for (int i = 0; i < 40; i++)
        n += (size_t)sprintf(spec + n, "{\"type\": \"t\", \"context\": null, \"children_spec\": [");
    n += (size_t)sprintf(spec + n, LEAF);
    for (int i = 0; i < 40; i++)
        n += (size_t)sprintf(spec + n, "]}");
    sprintf(spec + n, "]");
    snprintf(md, 6 << 20, "{\"out_spec\": %s}", jstr(spec));
    expect_error("spec 40 nodes deep", tf_manifest(md), FERRY_ERR_FORMAT, "metadata.out_spec");

    /* a spec over 4 MiB, inside a manifest under its 16 MiB */
    memset(spec, ' ', 1 << 20);
    spec[(1 << 20) - 1] = 0;
    n = (size_t)sprintf(md, "{\"in_spec\": \"[1,");
    for (int i = 0; i < 5; i++)
        n += (size_t)sprintf(md + n, "%s", spec);
    sprintf(md + n, "null]\"}");
    char *manifest = malloc(7 << 20);
    assert_non_null(manifest);
    snprintf(manifest, 7 << 20, "{\"export_format\": \"onnx\", \"components\": {\"model\": "
             "{\"file\": \"model.onnx\", \"metadata\": %s}}}", md);
    expect_error("5 MiB spec", manifest, FERRY_ERR_FORMAT,
                 "bytes, over the 4194304 a spec may have");

    /* kwargs leaves 9 deep (within the manifest's own nesting limit of 32) */
    n = (size_t)sprintf(md, "{\"kwargs\": {\"x\": ");
    for (int i = 0; i < 9; i++)
        n += (size_t)sprintf(md + n, "{\"leaves\": {\"l%d\": ", i);
    n += (size_t)sprintf(md + n, "{\"container\": \"c\"}");
    for (int i = 0; i < 9; i++)
        n += (size_t)sprintf(md + n, "}}");
    sprintf(md + n, "}}");
    expect_error("leaves 9 deep", tf_manifest(md), FERRY_ERR_FORMAT,
                 "leaves nested more than 8 deep");

    /* 4097 kwargs */
    n = (size_t)sprintf(md, "{\"kwargs\": {");
    for (int i = 0; i < 4097; i++)
        n += (size_t)sprintf(md + n, "%s\"k%d\": {\"container\": \"c\"}", i ? ", " : "", i);
    sprintf(md + n, "}}");
    snprintf(manifest, 7 << 20, "%s", tf_manifest(md));
    expect_error("4097 kwargs", manifest, FERRY_ERR_FORMAT,
                 "metadata.kwargs has more than 4096 entries");

    /* a name of 257 bytes */
    memset(spec, 'a', 257);
    spec[257] = 0;
    snprintf(md, 1 << 20, "{\"export_dtype\": \"%s\"}", spec);
    expect_error("257-byte dtype", tf_manifest(md), FERRY_ERR_FORMAT,
                 "metadata.export_dtype must be a name of 1 to 256 printable characters");
    free(manifest);
    free(md);
    free(spec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_accepted, make_export, remove_export),
        cmocka_unit_test_setup_teardown(test_malformed_top, make_export, remove_export),
        cmocka_unit_test_setup_teardown(test_malformed_metadata, make_export, remove_export),
        cmocka_unit_test_setup_teardown(test_bounds, make_export, remove_export),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
