/* test_recipe.c — export recipes (`ferry export --config`, AutoExportConfig keys) and --dim
 * specs from hostile hands: wrong types, numbers at the edges, too many dims, names with control
 * bytes. Each is refused with one line that names the key; nothing a recipe claims is
 * allocated. An accepted recipe survives the round trip through export.json's copy of it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/internal.h"

static void expect_recipe_error(const char *label, const char *json, ferry_status status,
                                const char *needle)
{
    ferry_export_config cfg;
    char eb[256] = "";
    ferry_export_config_init(&cfg);
    ferry_status got = ferry_export_config_from_json(&cfg, json, eb, sizeof eb);
    if (got != status)
        fail_msg("%s: status %d, expected %d (message: %s)", label, got, status, eb);
    if (!strstr(eb, needle))
        fail_msg("%s: message \"%s\" does not mention \"%s\"", label, eb, needle);
    for (const char *p = eb; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7F)
            fail_msg("%s: control byte in message: %s", label, eb);
}

static void expect_dim_error(const char *spec, const char *needle)
{
    ferry_export_config cfg;
    char eb[256] = "";
    ferry_export_config_init(&cfg);
    if (ferry_export_config_add_dim(&cfg, spec, eb, sizeof eb) != FERRY_ERR_INVALID_ARG)
        fail_msg("--dim %s was accepted", spec);
    if (!strstr(eb, needle))
        fail_msg("--dim %s: message \"%s\" does not mention \"%s\"", spec, eb, needle);
    assert_int_equal(cfg.n_dims, 0);
}

static void test_hostile_recipes(void **state)
{
    (void)state;
    static const struct {
        const char *label, *json;
        ferry_status status;
        const char *needle;
    } cases[] = {
        {"not JSON", "{\"dynamic\": tru", FERRY_ERR_INVALID_ARG, "recipe: invalid JSON near byte"},
        {"an array", "[]", FERRY_ERR_INVALID_ARG, "not a JSON object"},
        {"empty", "", FERRY_ERR_INVALID_ARG, "recipe: empty"},
        {"unknown key", "{\"dynamc\": true}", FERRY_ERR_INVALID_ARG, "unknown key 'dynamc'"},
        {"unknown key with an escape sequence", "{\"\\u001b[2Jx\": 1}", FERRY_ERR_INVALID_ARG,
         "unknown key '\\x1b[2Jx'"},
        {"unknown key with a newline", "{\"a\\nb\": 1}", FERRY_ERR_INVALID_ARG,
         "unknown key 'a\\x0ab'"},
        {"format", "{\"export_format\": \"pte\"}", FERRY_ERR_UNSUPPORTED, "export_format"},
        {"dynamic as a string", "{\"dynamic\": \"yes\"}", FERRY_ERR_INVALID_ARG,
         "'dynamic' must be true or false"},
        {"dtype", "{\"dtype\": \"int4\"}", FERRY_ERR_INVALID_ARG, "'dtype' must be"},
        {"opset 3", "{\"opset\": 3}", FERRY_ERR_INVALID_ARG, "'opset' must be an integer in"},
        {"opset 2^63", "{\"opset\": 9223372036854775808}", FERRY_ERR_INVALID_ARG, "'opset'"},
        {"opset -21", "{\"opset\": -21}", FERRY_ERR_INVALID_ARG, "'opset'"},
        {"opset 21.5", "{\"opset\": 21.5}", FERRY_ERR_INVALID_ARG, "'opset'"},
        {"example shape 0", "{\"example_shapes\": {\"input_ids\": [0, 8]}}",
         FERRY_ERR_INVALID_ARG, "'example_shapes' must be"},
        {"example shape negative", "{\"example_shapes\": {\"input_ids\": [1, -8]}}",
         FERRY_ERR_INVALID_ARG, "'example_shapes' must be"},
        {"example shape 1e300", "{\"example_shapes\": {\"input_ids\": [1, 1e300]}}",
         FERRY_ERR_INVALID_ARG, "'example_shapes' must be"},
        {"example shape rank 9",
         "{\"example_shapes\": {\"input_ids\": [1, 8, 1, 1, 1, 1, 1, 1, 1]}}",
         FERRY_ERR_INVALID_ARG, "'example_shapes' must be"},
        {"example shape empty", "{\"example_shapes\": {\"input_ids\": []}}",
         FERRY_ERR_INVALID_ARG, "'example_shapes' must be"},
        {"example shape of a bad name", "{\"example_shapes\": {\"a b\": [1]}}",
         FERRY_ERR_INVALID_ARG, "'example_shapes' must be"},
        {"example shapes none", "{\"example_shapes\": {}}", FERRY_ERR_INVALID_ARG,
         "'example_shapes' must be"},
        {"dynamic_shapes an array", "{\"dynamic_shapes\": []}", FERRY_ERR_INVALID_ARG,
         "'dynamic_shapes' must be an object"},
        {"axis not a number", "{\"dynamic_shapes\": {\"input_ids\": {\"one\": \"s\"}}}",
         FERRY_ERR_INVALID_ARG, "key 'one' is not an axis number"},
        {"axis 2^64", "{\"dynamic_shapes\": {\"input_ids\": {\"18446744073709551616\": \"s\"}}}",
         FERRY_ERR_INVALID_ARG, "axis"},
        {"axis -1", "{\"dynamic_shapes\": {\"input_ids\": {\"-1\": \"s\"}}}",
         FERRY_ERR_INVALID_ARG, "axis -1 out of range"},
        {"axis 8", "{\"dynamic_shapes\": {\"input_ids\": {\"8\": \"s\"}}}",
         FERRY_ERR_INVALID_ARG, "axis 8 out of range"},
        {"input name with a newline", "{\"dynamic_shapes\": {\"in\\nput\": {\"0\": \"s\"}}}",
         FERRY_ERR_INVALID_ARG, "bad input name 'in\\x0aput'"},
        {"symbol with an escape sequence",
         "{\"dynamic_shapes\": {\"input_ids\": {\"0\": \"\\u001b]0;x\\u0007\"}}}",
         FERRY_ERR_INVALID_ARG, "bad symbol name '\\x1b]0;x\\x07'"},
        {"symbol 64 bytes",
         "{\"dynamic_shapes\": {\"input_ids\": {\"0\": "
         "\"ssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssss\"}}}",
         FERRY_ERR_INVALID_ARG, "bad symbol name"},
        {"min above max",
         "{\"dynamic_shapes\": {\"input_ids\": {\"1\": {\"name\": \"s\", \"min\": 9, "
         "\"max\": 2}}}}",
         FERRY_ERR_INVALID_ARG, "need 0 <= min <= max"},
        {"min 2^52 (an integer JSON holds exactly, beyond a dim's bound)",
         "{\"dynamic_shapes\": {\"input_ids\": {\"1\": {\"name\": \"s\", "
         "\"min\": 4503599627370495, \"max\": 4503599627370495}}}}",
         FERRY_ERR_INVALID_ARG, "must be at most 1099511627776"},
        {"max 2^40 + 1",
         "{\"dynamic_shapes\": {\"input_ids\": {\"1\": {\"name\": \"s\", "
         "\"max\": 1099511627777}}}}",
         FERRY_ERR_INVALID_ARG, "must be at most 1099511627776"},
        {"min negative",
         "{\"dynamic_shapes\": {\"input_ids\": {\"1\": {\"name\": \"s\", \"min\": -1}}}}",
         FERRY_ERR_INVALID_ARG, "bad min"},
        {"max 1e300",
         "{\"dynamic_shapes\": {\"input_ids\": {\"1\": {\"name\": \"s\", \"max\": 1e300}}}}",
         FERRY_ERR_INVALID_ARG, "bad max"},
        {"name missing", "{\"dynamic_shapes\": {\"input_ids\": {\"1\": {\"min\": 1}}}}",
         FERRY_ERR_INVALID_ARG, "needs a string 'name'"},
        {"dim a number", "{\"dynamic_shapes\": {\"input_ids\": {\"1\": 5}}}",
         FERRY_ERR_INVALID_ARG, "must be a name or an object"},
        {"axis given twice",
         "{\"dynamic_shapes\": {\"input_ids\": {\"1\": \"s\", \"1\": \"t\"}}}",
         FERRY_ERR_INVALID_ARG, "dynamic dim input_ids:1 given twice"},
        {"seventeen dims", NULL, FERRY_ERR_INVALID_ARG, "too many dynamic dims (at most 16)"},
        {"cache length 0", "{\"generation_config\": {\"max_cache_len\": 0}}",
         FERRY_ERR_INVALID_ARG, "max_cache_len must be a positive integer"},
        {"cache length 2^31", "{\"generation_config\": {\"max_cache_len\": 2147483648}}",
         FERRY_ERR_INVALID_ARG, "max_cache_len must be a positive integer"},
        {"cache kind", "{\"generation_config\": {\"cache_implementation\": \"sliding\"}}",
         FERRY_ERR_UNSUPPORTED, "cache_implementation must be"},
        {"generation key", "{\"generation_config\": {\"\\u001b\": 1}}", FERRY_ERR_INVALID_ARG,
         "unknown generation_config key '\\x1b'"},
        {"quantizer-key", "{\"quantizer\": {\"bits\": 4, \"group\": 32}}", FERRY_ERR_INVALID_ARG,
         "unknown quantizer key 'group'"},
        {"quantizer-name", "{\"quantizer\": \"nf4\"}", FERRY_ERR_UNSUPPORTED,
         "quantizer \"nf4\" is not supported"},
        {"quantizer-bits", "{\"quantizer\": {\"bits\": -4}}", FERRY_ERR_INVALID_ARG,
         "quantizer.bits must be a non-negative integer"},
        /* refused as the recipe's own, so that its file is named */
        {"quantizer-3-bits", "{\"quantizer\": {\"bits\": 3}}", FERRY_ERR_UNSUPPORTED,
         "recipe: quantizer.bits 3 is not supported (4 or 8; 0 quantizes nothing)"},
        {"quantizer-block-48", "{\"quantizer\": {\"bits\": 4, \"block_size\": 48}}",
         FERRY_ERR_UNSUPPORTED, "recipe: quantizer.block_size 48 is not supported"},
        {"quantizer-flag", "{\"quantizer\": {\"bits\": 4, \"symmetric\": 1}}",
         FERRY_ERR_INVALID_ARG, "quantizer.symmetric must be true or false"},
        {"quantizer-no-bits", "{\"quantizer\": {\"block_size\": 32}}", FERRY_ERR_INVALID_ARG,
         "quantizer needs \"bits\""},
        {"ort-fusions", "{\"ort_fusions\": \"tpu\"}", FERRY_ERR_INVALID_ARG,
         "'ort_fusions' must be"},
        {"for_generation a number", "{\"for_generation\": 1}", FERRY_ERR_INVALID_ARG,
         "'for_generation' must be true or false"},
        {"model_output a string", "{\"model_output\": \"yes\"}", FERRY_ERR_INVALID_ARG,
         "'model_output' must be true or false"},
        {"input_names a string", "{\"input_names\": \"input_ids\"}", FERRY_ERR_INVALID_ARG,
         "'input_names' must be a list of input names"},
        {"input_names a number", "{\"input_names\": [\"input_ids\", 1]}",
         FERRY_ERR_INVALID_ARG, "'input_names' must hold names (strings)"},
        {"input_names unknown", "{\"input_names\": [\"input_ids\", \"pixel_values\"]}",
         FERRY_ERR_INVALID_ARG, "recipe: input_names: 'pixel_values' is not an input"},
        {"input_names without ids", "{\"input_names\": [\"attention_mask\"]}",
         FERRY_ERR_INVALID_ARG, "recipe: input_names: input_ids is missing"},
        {"input_names empty", "{\"input_names\": []}", FERRY_ERR_INVALID_ARG,
         "input_ids is missing"},
        {"input_names twice", "{\"input_names\": [\"input_ids\", \"input_ids\"]}",
         FERRY_ERR_INVALID_ARG, "'input_ids' is given twice"},
        {"input_names control byte", "{\"input_names\": [\"input_ids\", \"a\\u001bb\"]}",
         FERRY_ERR_INVALID_ARG, "is not an input"},
        /* Refused like config.json: data after the value, which the parser used to ignore. */
        {"a second object", "{\"dynamic\": true} {\"dtype\": \"fp16\"}", FERRY_ERR_INVALID_ARG,
         "recipe: unexpected data after the JSON value at byte 18"},
        {"trailing text", "{\"dynamic\": true}\ntrailing", FERRY_ERR_INVALID_ARG,
         "unexpected data after the JSON value at byte 18"},
        {"a second value after spaces", "{} \t\r\n []", FERRY_ERR_INVALID_ARG,
         "unexpected data after the JSON value at byte 7"},
        {"a control byte after the value", "{}\x01", FERRY_ERR_INVALID_ARG,
         "recipe: control byte 0x01 at byte 2 is not JSON"},
        {"escaped NUL in a symbol",
         "{\"dynamic_shapes\": {\"input_ids\": {\"1\": \"seq\\u0000uence\"}}}",
         FERRY_ERR_INVALID_ARG, "recipe: escaped NUL (\\u0000) in a string at byte 43"},
        {"escaped NUL in a key", "{\"dynamic\\u0000x\": true}", FERRY_ERR_INVALID_ARG,
         "escaped NUL"},
        {"not UTF-8", "{\"dynamic\xff\": true}", FERRY_ERR_INVALID_ARG,
         "recipe: not valid UTF-8 at byte 9"},
        {"20000 values", NULL, FERRY_ERR_INVALID_ARG,
         "recipe: 20002 JSON values exceed the limit of 10000 for a recipe"},
        /* Numbers far outside an integer's range are refused before any conversion. */
        {"opset 1e300", "{\"opset\": 1e300}", FERRY_ERR_INVALID_ARG, "'opset' must be an integer"},
        {"opset -1e300", "{\"opset\": -1e300}", FERRY_ERR_INVALID_ARG, "'opset'"},
        {"cache length 1e300", "{\"generation_config\": {\"max_cache_len\": 1e300}}",
         FERRY_ERR_INVALID_ARG, "max_cache_len must be a positive integer"},
        {"min 1e300",
         "{\"dynamic_shapes\": {\"input_ids\": {\"1\": {\"name\": \"s\", \"min\": 1e300}}}}",
         FERRY_ERR_INVALID_ARG, "bad min"},
        {"nested 100000 deep", NULL, FERRY_ERR_INVALID_ARG,
         "recipe: nesting deeper than 32 levels (at byte 37) exceeds the limit for a recipe"},
        /* transformers' tracing options: what ferry cannot do is refused, by name */
        {"strict tracer", "{\"strict\": true}", FERRY_ERR_UNSUPPORTED,
         "strict=true asks for torch.export's strict tracer"},
        {"strict as a string", "{\"strict\": \"no\"}", FERRY_ERR_INVALID_ARG,
         "'strict' must be true or false"},
        {"guards as a number", "{\"prefer_deferred_runtime_asserts_over_guards\": 1}",
         FERRY_ERR_INVALID_ARG, "'prefer_deferred_runtime_asserts_over_guards' must be true"},
        {"unoptimized", "{\"optimize\": false}", FERRY_ERR_UNSUPPORTED,
         "optimize=false asks for the graph as traced"},
        {"optimize as a string", "{\"optimize\": \"yes\"}", FERRY_ERR_INVALID_ARG,
         "'optimize' must be true or false"},
        {"opset_version 3", "{\"opset_version\": 3}", FERRY_ERR_INVALID_ARG,
         "'opset_version' must be an integer in [17, 23] (or null, the default)"},
        {"opset null", "{\"opset\": null}", FERRY_ERR_INVALID_ARG, "'opset' must be an integer"},
        {"opset and opset_version disagree", "{\"opset\": 18, \"opset_version\": 21}",
         FERRY_ERR_INVALID_ARG, "'opset' (18) and 'opset_version' (21), the same option, disagree"},
        {"opset_version and opset disagree", "{\"opset_version\": 21, \"opset\": 18}",
         FERRY_ERR_INVALID_ARG, "disagree"},
        /* the last values are compared, not the ones seen on the way */
        {"the last opset_version disagrees", "{\"opset\": 18, \"opset_version\": 18, "
         "\"opset_version\": 19}", FERRY_ERR_INVALID_ARG, "disagree"},
        {"a derived dim", "{\"dynamic_shapes\": {\"input_ids\": {\"1\": \"2*u\"}}}",
         FERRY_ERR_INVALID_ARG, "a dim derived from another"},
        {"a hint with a range", "{\"dynamic_shapes\": {\"input_ids\": {\"1\": "
         "\"DimHint(DYNAMIC, min=1, max=128)\"}}}", FERRY_ERR_INVALID_ARG, "a hint with a range"},
        /* the format is judged first: its own keys are not reported as unknown */
        {"an unknown format's recipe", "{\"alloc_graph_input\": true, \"delegate\": \"mlx\", "
         "\"export_format\": \"mlx\"}", FERRY_ERR_UNSUPPORTED,
         "export_format 'mlx' is not one ferry writes (onnx, openvino, pt2, executorch; "
         "\"dynamo\" is pt2)"},
        {"null format", "{\"export_format\": null}", FERRY_ERR_UNSUPPORTED,
         "export_format null is not one ferry writes"},
        {"the last format is the one judged", "{\"export_format\": \"onnx\", "
         "\"export_format\": \"pte\"}", FERRY_ERR_UNSUPPORTED, "export_format 'pte'"},
        /* a torch.export.Dim as transformers' to_json_string writes it: its text loses the min */
        {"Dim text", "{\"dynamic_shapes\": {\"input_ids\": {\"1\": \"Dim('seq', max=256)\"}}}",
         FERRY_ERR_INVALID_ARG, "is \"Dim('seq', max=256)\", a torch.export.Dim as transformers'"},
        {"Dim.AUTO on axis 2", "{\"dynamic_shapes\": {\"input_ids\": {\"2\": \"DimHint(AUTO)\"}}}",
         FERRY_ERR_INVALID_ARG, "is DimHint(AUTO), which names no symbol"},
    };
    char seventeen[2048];
    size_t o = (size_t)sprintf(seventeen, "{\"dynamic_shapes\": {");
    for (int i = 0; i < 17; i++)
        o += (size_t)sprintf(seventeen + o, "%s\"in%d\": {\"0\": \"s\"}", i ? ", " : "", i);
    strcpy(seventeen + o, "}}");
    char *deep = malloc(200100);
    assert_non_null(deep);
    o = (size_t)sprintf(deep, "{\"x\": ");
    memset(deep + o, '[', 100000);
    memset(deep + o + 100000, ']', 100000);
    strcpy(deep + o + 200000, "}");
    char *many = malloc(40100);
    assert_non_null(many);
    o = (size_t)sprintf(many, "{\"x\": [");
    for (int i = 0; i < 20000; i++)
        o += (size_t)sprintf(many + o, "%s0", i ? "," : "");
    strcpy(many + o, "]}");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *json = cases[i].json;
        if (!json)
            json = strstr(cases[i].label, "deep") ? deep
                   : strstr(cases[i].label, "values") ? many : seventeen;
        expect_recipe_error(cases[i].label, json, cases[i].status, cases[i].needle);
    }
    free(deep);
    free(many);

    /* A message buffer too small for the message: cut, never overrun. */
    ferry_export_config cfg;
    char tiny[12];
    memset(tiny, 'Z', sizeof tiny);
    ferry_export_config_init(&cfg);
    assert_int_equal(ferry_export_config_from_json(&cfg, "{\"zzzzzzzzzzzzzzzzzzzz\": 1}", tiny,
                                                   8), FERRY_ERR_INVALID_ARG);
    assert_true(strlen(tiny) < 8);
    assert_int_equal(tiny[8], 'Z');
}

static void test_hostile_dims(void **state)
{
    (void)state;
    expect_dim_error("input_ids", "expected NAME:AXIS=SYMBOL");
    expect_dim_error("input_ids:x=s", "expected NAME:AXIS=SYMBOL");
    expect_dim_error("input_ids:1=", "expected NAME:AXIS=SYMBOL");
    expect_dim_error("input_ids:99999999999999999999=s", "out of range");
    expect_dim_error("input_ids:-1=s", "axis -1 out of range");
    expect_dim_error("input_ids:1=s:5:2", "need 0 <= min <= max");
    expect_dim_error("input_ids:1=s:-5:2", "need 0 <= min <= max");
    expect_dim_error("input_ids:1=s:1", "expected ':MIN:MAX'");
    expect_dim_error("input_ids:1=s:1:2:3", "expected ':MIN:MAX'");
    expect_dim_error("in\x1b[2Jput:1=s", "bad input name 'in\\x1b[2Jput'");
    expect_dim_error("input_ids:1=s\n", "bad symbol name 's\\x0a'");
    /* Numbers too large for 64 bits were saturated by sscanf's %lld, and a min of 2^63 - 1
     * became the traced example extent; bounds are capped at 2^40 (exact as JSON numbers). */
    expect_dim_error("input_ids:1=s:99999999999999999999:99999999999999999999",
                     "MIN 99999999999999999999 is out of range");
    expect_dim_error("input_ids:1=s:1:99999999999999999999", "MAX 99999999999999999999 is out");
    expect_dim_error("input_ids:1=s:-99999999999999999999:1", "MIN -99999999999999999999 is out");
    expect_dim_error("input_ids:1=s:1099511627777:0", "must be at most 1099511627776");
    expect_dim_error("input_ids:1=s:1:1099511627777", "must be at most 1099511627776");
    expect_dim_error("input_ids:1=s:9223372036854775807:9223372036854775807", "at most");
    /* Junk strtoll or %lld would have skipped or stopped at. */
    expect_dim_error("input_ids: 1=s", "expected NAME:AXIS=SYMBOL");
    expect_dim_error("input_ids:+1=s", "expected NAME:AXIS=SYMBOL");
    expect_dim_error("input_ids:1=s: 1:4", "expected ':MIN:MAX'");
    expect_dim_error("input_ids:1=s:1:4 ", "expected ':MIN:MAX'");
    expect_dim_error("input_ids:1=s:0x10:20", "expected ':MIN:MAX'");
    expect_dim_error("input_ids:1=s:1:", "expected ':MIN:MAX'");
    /* 64 characters: one more than a name holds. */
    expect_dim_error("iiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiii:1=s",
                     "expected NAME:AXIS=SYMBOL");
}

/* ferry_export_config_add_example: NAME=D0xD1..., one shape per input (a second replaces the
 * first), extents positive and within 64 bits, at most FERRY_MAX_EXAMPLES inputs. */
static void test_add_example(void **state)
{
    (void)state;
    ferry_export_config cfg;
    char eb[256];
    ferry_export_config_init(&cfg);
    assert_int_equal(ferry_export_config_add_example(&cfg, "input_features=1x80x3000", eb,
                                                     sizeof eb), FERRY_OK);
    assert_int_equal(ferry_export_config_add_example(&cfg, "input_ids=2x7", eb, sizeof eb),
                     FERRY_OK);
    assert_int_equal(ferry_export_config_add_example(&cfg, "input_ids=3x5", eb, sizeof eb),
                     FERRY_OK);
    assert_int_equal(cfg.n_examples, 2);
    assert_true(cfg.examples[0].rank == 3 && cfg.examples[0].dims[2] == 3000);
    assert_true(cfg.examples[1].dims[0] == 3 && cfg.examples[1].dims[1] == 5);
    const struct {
        const char *spec, *needle;
    } bad[] = {
        {"input_ids", "expected NAME=D0xD1"}, {"=1x8", "expected NAME=D0xD1"},
        {"input_ids=1x", "expected NAME=D0xD1"}, {"input_ids=0x8", "expected NAME=D0xD1"},
        {"input_ids=1x-8", "expected NAME=D0xD1"}, {"input_ids=1x8y", "expected NAME=D0xD1"},
        {"input_ids=1x99999999999999999999", "99999999999999999999 is out of range"},
        {"a b=1", "bad input name"}, {"x=1x1x1x1x1x1x1x1x1", "expected NAME=D0xD1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        eb[0] = '\0';
        assert_int_equal(ferry_export_config_add_example(&cfg, bad[i].spec, eb, sizeof eb),
                         FERRY_ERR_INVALID_ARG);
        if (!strstr(eb, bad[i].needle))
            fail_msg("'%s': %s", bad[i].spec, eb);
    }
    assert_int_equal(cfg.n_examples, 2); /* a refused spec changes nothing */
    for (int i = 0; i < FERRY_MAX_EXAMPLES - 2; i++) {
        char spec[32];
        snprintf(spec, sizeof spec, "in%d=1", i);
        assert_int_equal(ferry_export_config_add_example(&cfg, spec, eb, sizeof eb), FERRY_OK);
    }
    assert_int_equal(ferry_export_config_add_example(&cfg, "one_more=1", eb, sizeof eb),
                     FERRY_ERR_INVALID_ARG);
    assert_non_null(strstr(eb, "too many example shapes"));
    /* a struct filled by hand: counts past the arrays, names without their NUL, extents out of
     * range and negative shortcuts are refused before anything reads them */
    ferry_export_config hand;
    const char *needles[5] = {"n_examples 50", "no NUL", "extent 0", "example_batch -3",
                              "n_dims -1"};
    for (int i = 0; i < 5; i++) {
        hand = cfg;
        if (i == 0)
            hand.n_examples = 50;
        else if (i == 1)
            memset(hand.examples[0].input, 'a', sizeof hand.examples[0].input);
        else if (i == 2)
            hand.examples[1].dims[0] = 0;
        else if (i == 3)
            hand.example_batch = -3;
        else
            hand.n_dims = -1;
        eb[0] = '\0';
        assert_int_equal(ferry_export_config_check(&hand, eb, sizeof eb), FERRY_ERR_INVALID_ARG);
        if (!strstr(eb, needles[i]))
            fail_msg("case %d: %s", i, eb);
    }
    assert_int_equal(ferry_export_config_check(&cfg, eb, sizeof eb), FERRY_OK);
}

static void test_round_trip(void **state)
{
    (void)state;
    ferry_export_config cfg, back;
    char eb[256];
    const char *recipe =
        "{\"export_format\": \"onnx\", \"dynamic\": false, \"dtype\": \"bf16\", \"opset\": 18,"
        " \"dynamic_shapes\": {\"input_ids\": {\"0\": \"batch\", \"1\": {\"name\": \"sequence\","
        " \"min\": 2, \"max\": 4096}}, \"attention_mask\": {\"1\": {\"name\": \"sequence\","
        " \"max\": null}}}, \"example_shapes\": {\"input_ids\": [2, 16],"
        " \"attention_mask\": [2, 16]},"
        " \"for_generation\": true, \"multi_token_decode\": true,"
        " \"generation_config\": {\"cache_implementation\": \"static\", \"max_cache_len\": 128}}";
    ferry_export_config_init(&cfg);
    if (ferry_export_config_from_json(&cfg, recipe, eb, sizeof eb) != FERRY_OK)
        fail_msg("refused: %s", eb);
    cJSON *json = export_config_to_json(&cfg);
    char *text = cJSON_PrintUnformatted(json);
    ferry_export_config_init(&back);
    if (ferry_export_config_from_json(&back, text, eb, sizeof eb) != FERRY_OK)
        fail_msg("export.json's copy refused: %s\n%s", eb, text);
    assert_int_equal(back.n_dims, 3);
    assert_int_equal(back.dtype, FERRY_BF16);
    assert_string_equal(ferry_export_config_option(&back, "opset"), "18");
    /* example shapes by input, as given */
    assert_int_equal(back.n_examples, 2);
    assert_string_equal(back.examples[0].input, "input_ids");
    assert_string_equal(back.examples[1].input, "attention_mask");
    assert_true(back.examples[1].rank == 2 && back.examples[1].dims[0] == 2 &&
                back.examples[1].dims[1] == 16);
    assert_int_equal(back.generation.max_cache_len, 128);
    assert_true(back.generation.static_cache && back.generation.multi_token_decode);
    cJSON_free(text);
    cJSON_Delete(json);

    /* pt2's model_output is recorded, so an export's recipe makes the same program again */
    ferry_export_config_init(&cfg);
    if (ferry_export_config_from_json(&cfg, "{\"export_format\": \"dynamo\", "
                                      "\"model_output\": true}", eb, sizeof eb) != FERRY_OK)
        fail_msg("model_output refused: %s", eb);
    assert_string_equal(ferry_export_config_option(&cfg, "model_output"), "true");
    json = export_config_to_json(&cfg);
    text = cJSON_PrintUnformatted(json);
    ferry_export_config_init(&back);
    if (ferry_export_config_from_json(&back, text, eb, sizeof eb) != FERRY_OK)
        fail_msg("export.json's copy refused: %s\n%s", eb, text);
    assert_string_equal(ferry_export_config_option(&back, "model_output"), "true");
    assert_int_equal(back.format, FERRY_FORMAT_PT2);
    cJSON_free(text);
    cJSON_Delete(json);

    /* A plain export's inputs are recorded unless they are the default, which recipes from
     * before the key read as */
    ferry_export_config_init(&cfg);
    if (ferry_export_config_from_json(&cfg, "{\"input_names\": [\"position_ids\", "
                                      "\"input_ids\"]}", eb, sizeof eb) != FERRY_OK)
        fail_msg("input_names refused: %s", eb);
    assert_int_equal(cfg.inputs, FERRY_INPUT_IDS | FERRY_INPUT_POSITION_IDS);
    json = export_config_to_json(&cfg);
    text = cJSON_PrintUnformatted(json);
    if (!strstr(text, "\"input_names\":[\"input_ids\",\"position_ids\"]"))
        fail_msg("input_names not recorded in graph order: %s", text);
    ferry_export_config_init(&back);
    if (ferry_export_config_from_json(&back, text, eb, sizeof eb) != FERRY_OK)
        fail_msg("export.json's copy refused: %s\n%s", eb, text);
    assert_int_equal(back.inputs, cfg.inputs);
    cJSON_free(text);
    cJSON_Delete(json);
    for (int pass = 0; pass < 2; pass++) {
        ferry_export_config_init(&cfg);
        if (pass && ferry_export_config_from_json(&cfg, "{\"input_names\": [\"input_ids\", "
                                                  "\"attention_mask\"]}", eb,
                                                  sizeof eb) != FERRY_OK)
            fail_msg("default input_names refused: %s", eb);
        json = export_config_to_json(&cfg);
        assert_null(cJSON_GetObjectItemCaseSensitive(json, "input_names"));
        cJSON_Delete(json);
    }
    ferry_export_config_init(&cfg);
    if (ferry_export_config_from_json(&cfg, "{\"input_names\": [\"input_ids\"]}", eb,
                                      sizeof eb) != FERRY_OK ||
        ferry_export_config_from_json(&cfg, "{\"input_names\": null}", eb, sizeof eb) !=
            FERRY_OK)
        fail_msg("input_names refused: %s", eb);
    assert_int_equal(cfg.inputs, 0); /* null: back to the default */

    /* Every bound a --dim accepts reads back: the ends of [0, 2^40] and unbounded must be
     * accepted; beyond 2^53 (not exact as a double) and 2^63 - 1 (what %lld made of larger
     * numbers) may only be refused. */
    static const struct { const char *spec; bool accept; } DIMS[] = {
        {"input_ids:0=b:0:0", true}, {"input_ids:0=b:1099511627776:1099511627776", true},
        {"input_ids:1=s:0:1099511627776", true}, {"input_ids:1=s:1099511627776:0", true},
        {"input_ids:1=s", true}, {"input_ids:1=s:16777216:16777217", true},
        {"input_ids:1=s:9007199254740993:0", false},
        {"input_ids:1=s:1:9223372036854775807", false},
    };
    for (size_t i = 0; i < sizeof DIMS / sizeof DIMS[0]; i++) {
        ferry_export_config_init(&cfg);
        if (ferry_export_config_add_dim(&cfg, DIMS[i].spec, eb, sizeof eb) != FERRY_OK) {
            if (DIMS[i].accept)
                fail_msg("--dim %s refused: %s", DIMS[i].spec, eb);
            continue;
        }
        json = export_config_to_json(&cfg);
        text = cJSON_PrintUnformatted(json);
        ferry_export_config_init(&back);
        if (ferry_export_config_from_json(&back, text, eb, sizeof eb) != FERRY_OK)
            fail_msg("--dim %s: export.json's copy refused: %s\n%s", DIMS[i].spec, eb, text);
        assert_int_equal(back.n_dims, 1);
        assert_memory_equal(&back.dims[0], &cfg.dims[0], sizeof cfg.dims[0]);
        cJSON_free(text);
        cJSON_Delete(json);
    }

    /* Found by fuzz_recipe: a static cache whose length is left to --max-cache-len was
     * recorded as "max_cache_len": 0, which the reader refuses. */
    ferry_export_config_init(&cfg);
    assert_int_equal(ferry_export_config_from_json(&cfg, "{\"for_generation\": true, "
                     "\"generation_config\": {\"cache_implementation\": \"static\"}}", eb,
                     sizeof eb), FERRY_OK);
    json = export_config_to_json(&cfg);
    text = cJSON_PrintUnformatted(json);
    ferry_export_config_init(&back);
    if (ferry_export_config_from_json(&back, text, eb, sizeof eb) != FERRY_OK)
        fail_msg("export.json's copy refused: %s\n%s", eb, text);
    assert_true(back.generation.static_cache);
    assert_int_equal(back.generation.max_cache_len, 0);
    cJSON_free(text);
    cJSON_Delete(json);
}

/* What transformers' to_json_string writes for OnnxConfig(dynamic=True, opset_version=18),
 * DynamoConfig(dynamic=True) and OpenVINOConfig(dynamic=True): read as ferry's own keys. */
static void test_transformers_recipes(void **state)
{
    (void)state;
    static const char *const recipes[] = {
        "{\"dynamic\": true, \"dynamic_shapes\": null, \"export_format\": \"onnx\", "
        "\"opset_version\": 18, \"optimize\": true, \"ort_fusions\": null, "
        "\"prefer_deferred_runtime_asserts_over_guards\": false, \"strict\": false}",
        "{\"dynamic\": true, \"dynamic_shapes\": null, \"export_format\": \"dynamo\", "
        "\"prefer_deferred_runtime_asserts_over_guards\": true, \"strict\": false}",
        "{\"compress_to_fp16\": false, \"dynamic\": true, \"dynamic_shapes\": null, "
        "\"export_format\": \"openvino\", \"prefer_deferred_runtime_asserts_over_guards\": "
        "false, \"stateful\": true, \"strict\": false}",
    };
    static const ferry_format formats[] = {FERRY_FORMAT_ONNX, FERRY_FORMAT_PT2,
                                           FERRY_FORMAT_OPENVINO};
    for (size_t i = 0; i < sizeof recipes / sizeof recipes[0]; i++) {
        ferry_export_config cfg;
        char eb[256] = "";
        ferry_export_config_init(&cfg);
        if (ferry_export_config_from_json(&cfg, recipes[i], eb, sizeof eb) != FERRY_OK)
            fail_msg("recipe %zu refused: %s", i, eb);
        assert_int_equal(cfg.format, formats[i]);
        assert_int_equal(cfg.dynamic, 1);
        assert_int_equal(cfg.n_dims, 0);
        const char *opset = ferry_export_config_option(&cfg, "opset");
        if (i == 0)
            assert_string_equal(opset, "18");
        else
            assert_null(opset);
    }
    /* null opset_version keeps an opset given beside it, in either order; a key given twice
     * takes its last value, as every key does */
    static const char *const kept[] = {"{\"opset\": 19, \"opset_version\": null}",
                                       "{\"opset_version\": null, \"opset\": 19}",
                                       "{\"opset\": 19, \"opset_version\": 19}",
                                       "{\"opset\": 18, \"opset\": 19}",
                                       "{\"opset_version\": 17, \"opset_version\": 19}",
                                       ("{\"opset_version\": 18, \"opset\": 19, "
                                        "\"opset_version\": 19}"),
                                       "{\"opset\": 18, \"opset_version\": 19, \"opset\": 19}"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        ferry_export_config cfg;
        char eb[256] = "";
        ferry_export_config_init(&cfg);
        if (ferry_export_config_from_json(&cfg, kept[i], eb, sizeof eb) != FERRY_OK)
            fail_msg("%s refused: %s", kept[i], eb);
        assert_string_equal(ferry_export_config_option(&cfg, "opset"), "19");
    }
    /* Dim.AUTO / DYNAMIC / STATIC and None as transformers writes them; the last format wins */
    ferry_export_config cfg;
    char eb[256] = "";
    ferry_export_config_init(&cfg);
    if (ferry_export_config_from_json(&cfg, "{\"export_format\": \"onnx\", \"dynamic_shapes\": "
                                      "{\"input_ids\": {\"0\": \"DimHint(AUTO)\", \"1\": "
                                      "\"DimHint(DYNAMIC)\"}, \"attention_mask\": {\"1\": null}, "
                                      "\"position_ids\": {\"0\": \"DimHint(STATIC)\"}}, "
                                      "\"export_format\": \"dynamo\"}", eb, sizeof eb) != FERRY_OK)
        fail_msg("refused: %s", eb);
    assert_int_equal(cfg.format, FERRY_FORMAT_PT2);
    assert_int_equal(cfg.n_dims, 2);
    assert_string_equal(cfg.dims[0].symbol, "batch");
    assert_int_equal(cfg.dims[0].axis, 0);
    assert_string_equal(cfg.dims[1].symbol, "sequence");
    assert_int_equal(cfg.dims[1].axis, 1);
    /* a key whose value adds up, given twice: the last one only (both were
     * applied, and a last null did not clear the first) */
    static const struct { const char *json; int n_dims; } repeats[] = {
        {"{\"dynamic_shapes\": {\"input_ids\": {\"0\": \"batch\"}}, \"dynamic_shapes\": "
         "{\"input_ids\": {\"1\": \"seq\"}}}", 1},
        {"{\"dynamic_shapes\": {\"input_ids\": {\"1\": \"DimHint(AUTO)\"}}, "
         "\"dynamic_shapes\": null}", 0},
        {"{\"dynamic_shapes\": {\"input_ids\": {\"1\": \"s\"}, \"position_ids\": null}}", 1},
    };
    for (size_t i = 0; i < sizeof repeats / sizeof repeats[0]; i++) {
        ferry_export_config_init(&cfg);
        if (ferry_export_config_from_json(&cfg, repeats[i].json, eb, sizeof eb) != FERRY_OK)
            fail_msg("%s refused: %s", repeats[i].json, eb);
        assert_int_equal(cfg.n_dims, repeats[i].n_dims);
    }
    ferry_export_config_init(&cfg);
    assert_int_equal(ferry_export_config_from_json(&cfg, "{\"dynamic_shapes\": {\"input_ids\": "
                     "{\"0\": \"batch\"}}, \"dynamic_shapes\": {\"input_ids\": {\"1\": "
                     "\"seq\"}}}", eb, sizeof eb), FERRY_OK);
    assert_string_equal(cfg.dims[0].symbol, "seq");
}

/* ferry_export_config_check: each recipe parses, and the check refuses its options taken
 * together as an export would, naming them, leaving the config as it was. */
static void test_config_check(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        ferry_status status;
        const char *needle;
    } cases[] = {
        {"{\"export_format\": \"openvino\", \"dtype\": \"fp16\", \"compress_to_fp16\": true}",
         FERRY_ERR_INVALID_ARG, "compress_to_fp16 stores fp32 weights in fp16"},
        {"{\"export_format\": \"openvino\", \"opset\": 21}", FERRY_ERR_INVALID_ARG,
         "'opset' (the flag --opset) is an ONNX option: it applies to --format onnx, not "
         "openvino"},
        {"{\"export_format\": \"dynamo\", \"quantizer\": \"int4\"}", FERRY_ERR_UNSUPPORTED,
         "the pt2 format cannot hold"},
        {"{\"export_format\": \"onnx\", \"dtype\": \"bf16\", \"quantizer\": \"int8\"}",
         FERRY_ERR_UNSUPPORTED, "must be fp32 or fp16 to quantize"},
        {"{\"export_format\": \"onnx\", \"stateful\": false}", FERRY_ERR_INVALID_ARG,
         "'stateful' (the flag --disable-stateful) is an OpenVINO option"},
        {"{\"export_format\": \"openvino\", \"stateful\": false}", FERRY_OK, ""},
        {"{\"export_format\": \"onnx\", \"dynamic\": true}", FERRY_OK, ""},
        {"{\"input_names\": [\"input_ids\"], \"for_generation\": true}",
         FERRY_ERR_INVALID_ARG, "apply to plain exports: generation components take"},
        {"{\"input_names\": [\"input_ids\", \"position_ids\"]}", FERRY_OK, ""},
        /* transformers' ExecutorchConfig: its backend is the format's own option */
        {"{\"export_format\": \"executorch\", \"backend\": \"portable\", "
         "\"alloc_graph_input\": false}", FERRY_OK, ""},
        {"{\"export_format\": \"executorch\", \"backend\": \"xnnpack\"}", FERRY_OK, ""},
        {"{\"export_format\": \"onnx\", \"backend\": null}", FERRY_OK, ""},
        {"{\"export_format\": \"onnx\", \"backend\": \"portable\"}", FERRY_ERR_INVALID_ARG,
         "'backend' (the flag --et-backend) is an ExecuTorch option"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ferry_export_config cfg, before;
        char eb[256] = "";
        ferry_export_config_init(&cfg);
        assert_int_equal(ferry_export_config_from_json(&cfg, cases[i].json, eb, sizeof eb),
                         FERRY_OK);
        memcpy(&before, &cfg, sizeof cfg); /* padding too */
        ferry_status got = ferry_export_config_check(&cfg, eb, sizeof eb);
        if (got != cases[i].status || !strstr(eb, cases[i].needle))
            fail_msg("%s: status %d, message \"%s\"", cases[i].json, got, eb);
        assert_memory_equal(&cfg, &before, sizeof cfg);
    }
    /* the struct is public: bits set by hand are checked as a recipe's names are */
    static const struct { unsigned inputs; const char *needle; } bits[] = {
        {FERRY_INPUT_ATTENTION_MASK, "leave out input_ids"},
        {FERRY_INPUT_IDS | (1u << 7), "inputs 0x81 has bits that name no input"},
    };
    for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++) {
        ferry_export_config cfg;
        char eb[256] = "";
        ferry_export_config_init(&cfg);
        cfg.inputs = bits[i].inputs;
        ferry_status got = ferry_export_config_check(&cfg, eb, sizeof eb);
        if (got != FERRY_ERR_INVALID_ARG || !strstr(eb, bits[i].needle))
            fail_msg("inputs 0x%x: status %d, message \"%s\"", bits[i].inputs, got, eb);
    }
    assert_int_equal(ferry_export_config_check(NULL, NULL, 0), FERRY_ERR_INVALID_ARG);
    char eb[64] = "";
    assert_int_equal(ferry_export_config_check(NULL, eb, sizeof eb), FERRY_ERR_INVALID_ARG);
    assert_string_equal(eb, "no export config");
}

/* --inputs: comma-separated names in any order, each once, input_ids among them. */
static void test_set_inputs(void **state)
{
    (void)state;
    ferry_export_config cfg;
    char eb[256] = "";
    ferry_export_config_init(&cfg);
    assert_int_equal(cfg.inputs, 0);
    assert_int_equal(ferry_export_config_set_inputs(&cfg, "position_ids,input_ids,attention_mask",
                                                    eb, sizeof eb), FERRY_OK);
    assert_int_equal(cfg.inputs, FERRY_INPUT_IDS | FERRY_INPUT_ATTENTION_MASK |
                                     FERRY_INPUT_POSITION_IDS);
    assert_int_equal(ferry_export_config_set_inputs(&cfg, "input_ids", eb, sizeof eb), FERRY_OK);
    assert_int_equal(cfg.inputs, FERRY_INPUT_IDS);
    static const struct { const char *names, *needle; } bad[] = {
        {"input_ids,positions", "--inputs 'input_ids,positions': 'positions' is not an input"},
        {"attention_mask", "input_ids is missing"},
        {"input_ids,,attention_mask", "an empty input name"},
        {",input_ids", "an empty input name"},
        {"input_ids,input_ids", "'input_ids' is given twice"},
        {"input_ids, attention_mask", "' attention_mask' is not an input"},
        {"input_ids,attention_mask_but_far_longer_than_any_name_ferry_takes_by_a_long_way",
         "is not an input"},
        {"input_ids,\x1b[31m", "\\x1b"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ferry_export_config_init(&cfg);
        ferry_status got = ferry_export_config_set_inputs(&cfg, bad[i].names, eb, sizeof eb);
        if (got != FERRY_ERR_INVALID_ARG || !strstr(eb, bad[i].needle))
            fail_msg("%s: status %d, message \"%s\"", bad[i].names, got, eb);
        for (const char *p = eb; *p; p++)
            if ((unsigned char)*p < 0x20)
                fail_msg("%s: control byte in message: %s", bad[i].names, eb);
        assert_int_equal(cfg.inputs, 0); /* unchanged by a refusal */
    }
    assert_int_equal(ferry_export_config_set_inputs(&cfg, NULL, eb, sizeof eb),
                     FERRY_ERR_INVALID_ARG);
    assert_int_equal(ferry_export_config_set_inputs(NULL, "input_ids", NULL, 0),
                     FERRY_ERR_INVALID_ARG);
}

/* The formats' own options: each declared once in its format's table, set by name, checked by
 * the format chosen, recorded in export.json from the table. */
static void test_format_options(void **state)
{
    (void)state;
    ferry_export_config cfg;
    char eb[512] = "";
    ferry_export_config_init(&cfg);
    /* a key no format has: refused at once, naming it and listing what there is */
    assert_int_equal(ferry_export_config_set_option(&cfg, "opsett", "21", eb, sizeof eb),
                     FERRY_ERR_INVALID_ARG);
    assert_non_null(strstr(eb, "'opsett' is not an option of any format"));
    assert_non_null(strstr(eb, "opset or opset_version, ort_fusions (onnx)"));
    assert_non_null(strstr(eb, "model_output (pt2)"));
    /* a value the option does not take, in any of its forms */
    static const struct { const char *key, *value, *needle; } bad[] = {
        {"opset", "3", "an integer in [17, 23]"}, {"opset", "21x", "an integer"},
        {"opset", "", "an integer"}, {"opset", "99999999999999999999", "an integer"},
        {"ort_fusions", "tpu", "none, cpu, cuda, webgpu or dml"},
        {"stateful", "no", "true or false"}, {"model_output", "1", "true or false"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ferry_export_config_set_option(&cfg, bad[i].key, bad[i].value, eb,
                                                        sizeof eb), FERRY_ERR_INVALID_ARG);
        if (!strstr(eb, bad[i].needle))
            fail_msg("%s=%s: %s", bad[i].key, bad[i].value, eb);
    }
    assert_int_equal(cfg.n_options, 0);
    /* an alias sets the option itself; a second value replaces the first; NULL unsets */
    assert_int_equal(ferry_export_config_set_option(&cfg, "opset_version", "18", eb, sizeof eb),
                     FERRY_OK);
    assert_string_equal(ferry_export_config_option(&cfg, "opset"), "18");
    assert_int_equal(ferry_export_config_set_option(&cfg, "opset", "19", eb, sizeof eb),
                     FERRY_OK);
    assert_int_equal(cfg.n_options, 1);
    assert_string_equal(ferry_export_config_option(&cfg, "opset_version"), "19");
    assert_int_equal(ferry_export_config_set_option(&cfg, "opset", NULL, eb, sizeof eb),
                     FERRY_OK);
    assert_null(ferry_export_config_option(&cfg, "opset"));
    /* another format's option: refused by the export's format, naming both */
    assert_int_equal(ferry_export_config_set_option(&cfg, "compress_to_fp16", "true", eb,
                                                    sizeof eb), FERRY_OK);
    assert_int_equal(ferry_export_config_check(&cfg, eb, sizeof eb), FERRY_ERR_INVALID_ARG);
    assert_string_equal(eb, "'compress_to_fp16' (the flag --compress-to-fp16) is an OpenVINO "
                            "option: it applies to --format openvino, not onnx");
    cfg.format = FERRY_FORMAT_OPENVINO;
    assert_int_equal(ferry_export_config_check(&cfg, eb, sizeof eb), FERRY_OK);
    /* a value that no setter wrote (the struct is public): refused as a recipe's would be */
    ferry_export_config_init(&cfg);
    snprintf(cfg.options[0].key, sizeof cfg.options[0].key, "opset");
    snprintf(cfg.options[0].value, sizeof cfg.options[0].value, "5");
    cfg.n_options = 1;
    assert_int_equal(ferry_export_config_check(&cfg, eb, sizeof eb), FERRY_ERR_INVALID_ARG);
    assert_non_null(strstr(eb, "'opset' must be an integer in [17, 23]"));
    memset(cfg.options[0].key, 'x', sizeof cfg.options[0].key); /* no NUL */
    assert_int_equal(ferry_export_config_check(&cfg, eb, sizeof eb), FERRY_ERR_INVALID_ARG);
    cfg.n_options = FERRY_MAX_FORMAT_OPTIONS + 1;
    assert_int_equal(ferry_export_config_check(&cfg, eb, sizeof eb), FERRY_ERR_INVALID_ARG);
    /* a count no setter wrote: refused by every reader and writer, never walked past */
    ferry_export_config_init(&cfg);
    assert_int_equal(ferry_export_config_set_option(&cfg, "opset", "18", eb, sizeof eb),
                     FERRY_OK);
    cfg.n_options = 1000000;
    assert_int_equal(ferry_export_config_set_option(&cfg, "opset", NULL, eb, sizeof eb),
                     FERRY_ERR_INVALID_ARG);
    assert_int_equal(ferry_export_config_set_option(&cfg, "opset", "19", eb, sizeof eb),
                     FERRY_ERR_INVALID_ARG);
    assert_null(ferry_export_config_option(&cfg, "opset"));
    assert_int_equal(ferry_export_config_from_json(&cfg, "{\"ort_fusions\": null}", eb,
                                                   sizeof eb), FERRY_ERR_INVALID_ARG);
    cfg.n_options = -1;
    assert_int_equal(ferry_export_config_check(&cfg, eb, sizeof eb), FERRY_ERR_INVALID_ARG);
    /* an entry under an alias, or one key twice: refused, not read as something else */
    ferry_export_config_init(&cfg);
    snprintf(cfg.options[0].key, sizeof cfg.options[0].key, "opset_version");
    snprintf(cfg.options[0].value, sizeof cfg.options[0].value, "17");
    cfg.n_options = 1;
    assert_int_equal(ferry_export_config_check(&cfg, eb, sizeof eb), FERRY_ERR_INVALID_ARG);
    assert_non_null(strstr(eb, "stored under its alias; its key is 'opset'"));
    snprintf(cfg.options[0].key, sizeof cfg.options[0].key, "opset");
    cfg.options[1] = cfg.options[0];
    cfg.n_options = 2;
    assert_int_equal(ferry_export_config_check(&cfg, eb, sizeof eb), FERRY_ERR_INVALID_ARG);
    assert_non_null(strstr(eb, "'opset' is set twice"));

    /* export.json records a format's options from its table: the ones a reader needs always,
     * the others only away from their default, and never another format's */
    ferry_export_config_init(&cfg);
    if (ferry_export_config_from_json(&cfg, "{\"export_format\": \"openvino\", "
                                      "\"stateful\": false, \"compress_to_fp16\": false}", eb,
                                      sizeof eb) != FERRY_OK)
        fail_msg("refused: %s", eb);
    cJSON *json = export_config_to_json(&cfg);
    char *text = cJSON_PrintUnformatted(json);
    assert_non_null(strstr(text, "\"stateful\":false"));
    assert_null(strstr(text, "compress_to_fp16"));
    assert_null(strstr(text, "opset"));
    cJSON_free(text);
    cJSON_Delete(json);
    ferry_export_config_init(&cfg);
    json = export_config_to_json(&cfg);
    text = cJSON_PrintUnformatted(json);
    assert_non_null(strstr(text, "\"dtype\":\"fp32\",\"opset\":21"));
    cJSON_free(text);
    cJSON_Delete(json);

    /* the list the CLI builds its flags and --help from: every option once, with a flag */
    ferry_format_option_info info;
    int n = 0;
    char seen[512] = "";
    for (; ferry_format_option_describe(n, &info) == FERRY_OK; n++) {
        assert_true(info.flag && !strncmp(info.flag, "--", 2) && info.help && info.help[0]);
        assert_non_null(info.default_value);
        assert_non_null(info.expects);
        char key[64];
        snprintf(key, sizeof key, " %s ", info.key);
        assert_null(strstr(seen, key));
        strncat(seen, key, sizeof seen - strlen(seen) - 1);
    }
    assert_int_equal(n, 11);
    assert_int_equal(ferry_format_option_describe(n, &info), FERRY_ERR_INVALID_ARG);
    assert_int_equal(ferry_format_option_describe(-1, &info), FERRY_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_inputs),
        cmocka_unit_test(test_hostile_recipes),
        cmocka_unit_test(test_hostile_dims),
        cmocka_unit_test(test_add_example),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_transformers_recipes),
        cmocka_unit_test(test_config_check),
        cmocka_unit_test(test_format_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
