/* test_config.c — config.json in transformers 4 and 5 spellings, and every refusal. */
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

#include <cjson/cJSON.h>

#include "model/config.h"
#include "models/blocks.h"
#include "models/lm_config.h"

#include "scratch.h"


static int make_tmp(void **state)
{
    (void)state;
    return scratch_make("cfg");
}


/* The keys every test config shares; each test appends its own. */
#define BASE                                                                                   \
    "\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "                  \
    "\"vocab_size\": 32000, \"hidden_size\": 64, \"intermediate_size\": 128, "                 \
    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4"

/* A config as the decoder families see it: the generic keys and the decoder's. */
typedef struct test_cfg {
    model_config m;
    lm_config lm;
} test_cfg;

static void free_both(test_cfg *cfg)
{
    lm_config_free(&cfg->lm);
    cfg_free(&cfg->m);
}

static void parse_ok(const char *json, test_cfg *cfg)
{
    fy_err err = {0};
    ferry_status status = lm_config_parse(json, strlen(json), "config.json", &cfg->m, &cfg->lm,
                                          &err);
    if (status != FERRY_OK)
        fail_msg("lm_config_parse failed: %s", err.msg);
}

/* cfg_load, then the decoder keys, as ferry_model_open reads a decoder checkpoint. */
static ferry_status load_lm(const char *dir, test_cfg *cfg, fy_err *err)
{
    memset(&cfg->lm, 0, sizeof cfg->lm);
    ferry_status st = cfg_load(dir, &cfg->m, err);
    if (st == FERRY_OK && (st = lm_config_read(&cfg->m, &cfg->lm, err)) != FERRY_OK)
        cfg_free(&cfg->m);
    return st;
}

static void expect_parse_error(const char *label, const char *json, ferry_status status,
                               const char *needle, const char *needle2)
{
    test_cfg cfg;
    fy_err err = {0};
    ferry_status got = lm_config_parse(json, strlen(json), "config.json", &cfg.m, &cfg.lm, &err);
    if (got != status)
        fail_msg("%s: status %d, expected %d (message: %s)", label, got, status, err.msg);
    assert_null(cfg.m.raw);
    assert_null(cfg.lm.layer_types);
    if (!strstr(err.msg, "config.json") || !strstr(err.msg, needle) ||
        (needle2 && !strstr(err.msg, needle2)))
        fail_msg("%s: message \"%s\" does not mention \"%s\" / \"%s\"", label, err.msg, needle,
                 needle2 ? needle2 : "");
}

static void test_transformers5_llama3(void **state)
{
    (void)state;
    test_cfg cfg;
    parse_ok("{" BASE ", \"num_key_value_heads\": 2, \"head_dim\": 32, \"rms_norm_eps\": 1e-5,"
             " \"max_position_embeddings\": 4096, \"tie_word_embeddings\": true,"
             " \"dtype\": \"bfloat16\", \"attention_bias\": true, \"sliding_window\": 16,"
             " \"layer_types\": [\"sliding_attention\", \"full_attention\"],"
             " \"custom_key\": [1, 2],"
             " \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0,"
             " \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
             " \"original_max_position_embeddings\": 8192}}", &cfg);
    assert_string_equal(cfg.m.architecture, "LlamaForCausalLM");
    assert_string_equal(cfg.m.model_type, "llama");
    assert_int_equal(cfg.lm.vocab_size, 32000);
    assert_int_equal(cfg.lm.hidden_size, 64);
    assert_int_equal(cfg.lm.intermediate_size, 128);
    assert_int_equal(cfg.lm.num_hidden_layers, 2);
    assert_int_equal(cfg.lm.num_attention_heads, 4);
    assert_int_equal(cfg.lm.num_key_value_heads, 2);
    assert_int_equal(cfg.lm.head_dim, 32);
    assert_int_equal(cfg.lm.max_position_embeddings, 4096);
    assert_true(cfg.lm.rms_norm_eps == 1e-5);
    assert_string_equal(cfg.lm.hidden_act, "silu");
    assert_true(cfg.lm.tie_word_embeddings);
    assert_true(cfg.lm.tie_word_embeddings_set);
    assert_true(cfg.lm.attention_bias);
    assert_false(cfg.lm.mlp_bias);
    assert_int_equal(cfg.lm.sliding_window, 16);
    assert_int_equal(cfg.m.dtype, FERRY_BF16);
    assert_non_null(cfg.lm.layer_types);
    assert_string_equal(cfg.lm.layer_types[0], "sliding_attention");
    assert_string_equal(cfg.lm.layer_types[1], "full_attention");
    assert_int_equal(cfg.lm.rope.type, ROPE_LLAMA3);
    assert_string_equal(cfg.lm.rope.type_name, "llama3");
    assert_true(cfg.lm.rope.theta == 500000.0);
    assert_true(cfg.lm.rope.factor == 8.0);
    assert_true(cfg.lm.rope.low_freq_factor == 1.0);
    assert_true(cfg.lm.rope.high_freq_factor == 4.0);
    assert_int_equal(cfg.lm.rope.original_max_position_embeddings, 8192);
    assert_true(cfg.lm.rope.partial_rotary_factor == 1.0);
    assert_non_null(cJSON_GetObjectItemCaseSensitive(cfg.m.raw, "custom_key"));
    assert_null(cfg.m.generation);
    free_both(&cfg);
    assert_null(cfg.m.raw);
    free_both(&cfg);    /* twice is harmless: freeing zeroes it */
    cfg_free(NULL);
}

static void test_transformers4_rope_scaling(void **state)
{
    (void)state;
    test_cfg cfg;
    parse_ok("{" BASE ", \"rope_theta\": 1000000.0, \"torch_dtype\": \"float16\","
             " \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}}", &cfg);
    assert_int_equal(cfg.lm.rope.type, ROPE_LINEAR);
    assert_true(cfg.lm.rope.theta == 1e6);
    assert_true(cfg.lm.rope.factor == 2.0);
    assert_int_equal(cfg.m.dtype, FERRY_F16);
    /* defaults */
    assert_int_equal(cfg.lm.num_key_value_heads, 4);
    assert_int_equal(cfg.lm.head_dim, 16);
    assert_int_equal(cfg.lm.max_position_embeddings, 2048);
    assert_true(cfg.lm.rms_norm_eps == 1e-6);
    assert_false(cfg.lm.tie_word_embeddings_set);
    assert_null(cfg.lm.layer_types);
    assert_int_equal(cfg.lm.sliding_window, 0);
    free_both(&cfg);

    parse_ok("{" BASE ", \"rope_theta\": 10000, \"rope_scaling\": {\"rope_type\": \"yarn\","
             " \"factor\": 4.0, \"original_max_position_embeddings\": 32768,"
             " \"beta_fast\": 16, \"mscale\": 0.707, \"truncate\": false}}", &cfg);
    assert_int_equal(cfg.lm.rope.type, ROPE_YARN);
    assert_true(cfg.lm.rope.factor == 4.0);
    assert_int_equal(cfg.lm.rope.original_max_position_embeddings, 32768);
    assert_true(cfg.lm.rope.beta_fast == 16.0);
    assert_true(cfg.lm.rope.beta_slow == 1.0);
    assert_true(cfg.lm.rope.attention_factor < 0);
    assert_true(cfg.lm.rope.mscale == 0.707);
    assert_true(cfg.lm.rope.mscale_all_dim == 0.0);
    assert_false(cfg.lm.rope.truncate);
    free_both(&cfg);

    /* "dtype" (transformers 5) wins over the older "torch_dtype". */
    parse_ok("{" BASE ", \"dtype\": \"float32\", \"torch_dtype\": \"bfloat16\","
             " \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0},"
             " \"partial_rotary_factor\": 0.5}", &cfg);
    assert_int_equal(cfg.m.dtype, FERRY_F32);
    assert_int_equal(cfg.lm.rope.type, ROPE_DYNAMIC);
    assert_int_equal(cfg.lm.rope.original_max_position_embeddings, 0);
    assert_true(cfg.lm.rope.partial_rotary_factor == 0.5);
    assert_true(cfg.lm.rope.theta == 10000.0);
    free_both(&cfg);
}

static void test_rope_variants(void **state)
{
    (void)state;
    test_cfg cfg;
    parse_ok("{" BASE "}", &cfg);
    assert_int_equal(cfg.lm.rope.type, ROPE_DEFAULT);
    assert_string_equal(cfg.lm.rope.type_name, "default");
    assert_true(cfg.lm.rope.theta == 10000.0);
    assert_true(cfg.lm.rope.factor == 1.0);
    assert_int_equal(cfg.m.dtype, FERRY_DTYPE_UNDEFINED);
    free_both(&cfg);

    parse_ok("{" BASE ", \"rope_scaling\": null, \"rope_theta\": 5e5}", &cfg);
    assert_int_equal(cfg.lm.rope.type, ROPE_DEFAULT);
    assert_true(cfg.lm.rope.theta == 5e5);
    free_both(&cfg);

    /* transformers 5 default rope with its theta and partial factor inside rope_parameters */
    parse_ok("{" BASE ", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1e6,"
             " \"partial_rotary_factor\": 0.25}}", &cfg);
    assert_int_equal(cfg.lm.rope.type, ROPE_DEFAULT);
    assert_true(cfg.lm.rope.theta == 1e6);
    assert_true(cfg.lm.rope.partial_rotary_factor == 0.25);
    free_both(&cfg);

    /* rope_parameters split by layer type: the full-attention entry is the one read */
    parse_ok("{" BASE ", \"rope_parameters\": {"
             " \"full_attention\": {\"rope_type\": \"linear\", \"factor\": 8.0,"
             " \"rope_theta\": 1e6},"
             " \"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 1e4}}}",
             &cfg);
    assert_int_equal(cfg.lm.rope.type, ROPE_LINEAR);
    assert_true(cfg.lm.rope.factor == 8.0);
    assert_true(cfg.lm.rope.theta == 1e6);
    free_both(&cfg);

    /* rope_parameters wins over a stale rope_scaling */
    parse_ok("{" BASE ", \"rope_scaling\": {\"type\": \"bogus\"},"
             " \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 2.0,"
             " \"attention_factor\": 1.5}}", &cfg);
    assert_int_equal(cfg.lm.rope.type, ROPE_YARN);
    assert_true(cfg.lm.rope.attention_factor == 1.5);
    free_both(&cfg);
}

/* Eight factors: rotary_dim/2 of BASE's head_dim 16. */
#define FACTORS_8(x) "[1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, " x "]"

/* LongRoPE as transformers reads it (Phi-3, Phi-4-mini): its trained length from the top level
 * first, then the set, then max_position_embeddings; factor given or max / original; the
 * attention factor derived later unless given; the factor sets as float32, rotary_dim/2 long
 * (partial rotary included). M-RoPE's bands, Qwen2-VL's default when absent. */
static void test_longrope_and_mrope(void **state)
{
    (void)state;
    test_cfg cfg;
    /* Phi-3-mini-128k's shape (transformers 4): the trained length at the top level */
    parse_ok("{" BASE ", \"max_position_embeddings\": 131072,"
             " \"original_max_position_embeddings\": 4096, \"rope_scaling\": {\"type\": "
             "\"longrope\", \"short_factor\": " FACTORS_8("1.7") ", \"long_factor\": "
             FACTORS_8("61.5") "}}", &cfg);
    const rope_config *r = &cfg.lm.rope;
    assert_int_equal(r->type, ROPE_LONGROPE);
    assert_string_equal(r->type_name, "longrope");
    assert_int_equal(r->layout, ROPE_1D);
    assert_int_equal(r->original_max_position_embeddings, 4096);
    assert_true(r->factor == 32.0);
    assert_true(r->attention_factor == -1.0);
    assert_int_equal(r->n_factors, 8);
    assert_true(r->short_factor[1] == 1.1f && r->short_factor[7] == 1.7f);
    assert_true(r->long_factor[0] == 1.0f && r->long_factor[7] == 61.5f);
    free_both(&cfg);

    /* transformers 5: inside rope_parameters, with factor and attention_factor given */
    parse_ok("{" BASE ", \"rope_parameters\": {\"rope_type\": \"longrope\","
             " \"original_max_position_embeddings\": 1024, \"factor\": 8, "
             "\"attention_factor\": 1.25, \"short_factor\": " FACTORS_8("2") ", \"long_factor\": "
             FACTORS_8("3") "}}", &cfg);
    assert_int_equal(cfg.lm.rope.original_max_position_embeddings, 1024);
    assert_true(cfg.lm.rope.factor == 8.0);
    assert_true(cfg.lm.rope.attention_factor == 1.25);
    free_both(&cfg);

    /* the top level wins over the set's own; neither: max_position_embeddings (factor 1) */
    parse_ok("{" BASE ", \"original_max_position_embeddings\": 512, \"rope_parameters\": {"
             "\"rope_type\": \"longrope\", \"original_max_position_embeddings\": 1024,"
             " \"short_factor\": " FACTORS_8("2") ", \"long_factor\": " FACTORS_8("3") "}}",
             &cfg);
    assert_int_equal(cfg.lm.rope.original_max_position_embeddings, 512);
    assert_true(cfg.lm.rope.factor == 4.0); /* 2048 / 512 */
    free_both(&cfg);
    parse_ok("{" BASE ", \"rope_parameters\": {\"rope_type\": \"longrope\", \"short_factor\": "
             FACTORS_8("2") ", \"long_factor\": " FACTORS_8("3") "}}", &cfg);
    assert_int_equal(cfg.lm.rope.original_max_position_embeddings, 2048);
    assert_true(cfg.lm.rope.factor == 1.0);
    free_both(&cfg);

    /* Phi-4-mini's partial rotary (0.75 of 16 = 12): 6 factors each */
    parse_ok("{" BASE ", \"partial_rotary_factor\": 0.75, \"rope_scaling\": {\"type\": "
             "\"longrope\", \"short_factor\": [1, 1, 1, 1, 1, 1], \"long_factor\": "
             "[1, 2, 3, 4, 5, 6]}}", &cfg);
    assert_int_equal(cfg.lm.rope.n_factors, 6);
    assert_true(cfg.lm.rope.long_factor[5] == 6.0f);
    free_both(&cfg);

    /* Qwen2-VL (transformers 4 spelling): default frequencies over three position rows */
    parse_ok("{" BASE ", \"rope_theta\": 1e6, \"rope_scaling\": {\"type\": \"mrope\","
             " \"mrope_section\": [2, 3, 3]}}", &cfg);
    assert_int_equal(cfg.lm.rope.type, ROPE_DEFAULT);
    assert_int_equal(cfg.lm.rope.layout, ROPE_MROPE);
    assert_string_equal(cfg.lm.rope.type_name, "mrope");
    assert_true(cfg.lm.rope.theta == 1e6);
    assert_int_equal(cfg.lm.rope.mrope_section[0], 2);
    assert_int_equal(cfg.lm.rope.mrope_section[2], 3);
    free_both(&cfg);
    /* absent bands: Qwen2-VL's [16, 24, 24], which a head of 128 takes */
    parse_ok("{" BASE ", \"head_dim\": 128, \"rope_scaling\": {\"type\": \"mrope\"}}", &cfg);
    assert_int_equal(cfg.lm.rope.mrope_section[0], 16);
    assert_int_equal(cfg.lm.rope.mrope_section[1], 24);
    assert_int_equal(cfg.lm.rope.mrope_section[2], 24);
    /* the decoder families' position_ids are one row: they refuse it, naming the type */
    blk_lm lm;
    fy_err err = {0};
    assert_int_equal(blk_lm_from_config(&cfg.lm, "config.json", "LlamaForCausalLM", false, &lm,
                                        &err),
                     FERRY_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "config.json: rope type 'mrope' is not supported for "
                                    "LlamaForCausalLM"));
    /* ... where a multimodal family's language model takes the rows */
    assert_int_equal(blk_lm_from_config(&cfg.lm, "config.json", "Qwen2VLForConditionalGeneration",
                                        true, &lm, &err),
                     FERRY_OK);
    assert_int_equal(lm.rope[0].rope.layout, ROPE_MROPE);
    blk_lm_free(&lm);
    free_both(&cfg);
    /* transformers 5 saves the type as "default" beside the bands: the bands make it M-RoPE */
    parse_ok("{" BASE ", \"rope_parameters\": {\"rope_type\": \"default\","
             " \"rope_theta\": 10000.0, \"mrope_section\": [2, 3, 3]}}", &cfg);
    assert_int_equal(cfg.lm.rope.layout, ROPE_MROPE);
    assert_int_equal(cfg.lm.rope.mrope_section[1], 3);
    free_both(&cfg);

    /* a longrope decoder goes through, its layers carrying the factors */
    parse_ok("{" BASE ", \"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": "
             FACTORS_8("2") ", \"long_factor\": " FACTORS_8("3") "}}", &cfg);
    assert_int_equal(blk_lm_from_config(&cfg.lm, "config.json", "LlamaForCausalLM", false, &lm,
                                        &err),
                     FERRY_OK);
    assert_int_equal(lm.rope[1].rope.type, ROPE_LONGROPE);
    assert_true(lm.rope[1].rope.long_factor[7] == 3.0f);
    assert_int_equal(lm.rope[1].rotary_dim, 16);
    blk_lm_free(&lm);
    free_both(&cfg);
}

static void test_sliding_window_switch(void **state)
{
    (void)state;
    test_cfg cfg;
    /* Qwen2 writes a window that is off unless use_sliding_window is set. */
    parse_ok("{" BASE ", \"sliding_window\": 4096, \"use_sliding_window\": false}", &cfg);
    assert_int_equal(cfg.lm.sliding_window, 0);
    free_both(&cfg);
    parse_ok("{" BASE ", \"sliding_window\": 4096, \"use_sliding_window\": true}", &cfg);
    assert_int_equal(cfg.lm.sliding_window, 4096);
    free_both(&cfg);
    parse_ok("{" BASE ", \"sliding_window\": null, \"head_dim\": null}", &cfg);
    assert_int_equal(cfg.lm.sliding_window, 0);
    assert_int_equal(cfg.lm.head_dim, 16);
    free_both(&cfg);
}

static void test_parse_errors(void **state)
{
    (void)state;
    static const struct {
        const char *label, *json;
        ferry_status status;
        const char *needle, *needle2;
    } cases[] = {
        {"not json", "{", FERRY_ERR_FORMAT, "invalid JSON", NULL},
        {"not an object", "[1]", FERRY_ERR_FORMAT, "expected a JSON object", NULL},
        {"no architectures", "{\"vocab_size\": 1}", FERRY_ERR_FORMAT,
         "config.json: key 'architectures' is missing", NULL},
        {"empty architectures", "{\"architectures\": []}", FERRY_ERR_FORMAT,
         "key 'architectures' must be a list", NULL},
        {"architectures not strings", "{\"architectures\": [1]}", FERRY_ERR_FORMAT,
         "key 'architectures'", NULL},
        {"repeated key", "{" BASE ", \"num_hidden_layers\": 0}", FERRY_ERR_FORMAT,
         "key 'num_hidden_layers' appears more than once", NULL},
        {"missing vocab",
         "{\"architectures\": [\"X\"], \"hidden_size\": 64, \"intermediate_size\": 1,"
         " \"num_hidden_layers\": 1, \"num_attention_heads\": 1}", FERRY_ERR_FORMAT,
         "config.json: key 'vocab_size' is missing", NULL},
        {"hidden too big",
         "{\"architectures\": [\"X\"], \"vocab_size\": 10, \"hidden_size\": 2097152}",
         FERRY_ERR_FORMAT,
         "config.json: key 'hidden_size' must be an integer in [1, 1048576] (got 2097152)",
         NULL},
        {"vocab as string", "{\"architectures\": [\"X\"], \"vocab_size\": \"10\"}",
         FERRY_ERR_FORMAT, "config.json: key 'vocab_size' must be an integer (got a string)",
         NULL},
        {"fractional heads",
         "{\"architectures\": [\"X\"], \"vocab_size\": 10, \"hidden_size\": 64,"
         " \"intermediate_size\": 1, \"num_hidden_layers\": 1, \"num_attention_heads\": 2.5}",
         FERRY_ERR_FORMAT, "key 'num_attention_heads' must be an integer (got 2.5)", NULL},
        {"kv heads do not divide", "{" BASE ", \"num_key_value_heads\": 3}", FERRY_ERR_FORMAT,
         "key 'num_key_value_heads' (3) must divide num_attention_heads (4)", NULL},
        {"head_dim underivable",
         "{\"architectures\": [\"X\"], \"vocab_size\": 10, \"hidden_size\": 66,"
         " \"intermediate_size\": 1, \"num_hidden_layers\": 1, \"num_attention_heads\": 4}",
         FERRY_ERR_FORMAT, "key 'head_dim' is missing and hidden_size (66)", NULL},
        {"head_dim too big", "{" BASE ", \"head_dim\": 8192}", FERRY_ERR_FORMAT,
         "key 'head_dim' must be an integer in [1, 4096] (got 8192)", NULL},
        {"negative eps", "{" BASE ", \"rms_norm_eps\": -1}", FERRY_ERR_FORMAT,
         "key 'rms_norm_eps' must be a number in [1e-12, 1] (got -1)", NULL},
        {"tie not bool", "{" BASE ", \"tie_word_embeddings\": 1}", FERRY_ERR_FORMAT,
         "key 'tie_word_embeddings' must be true or false", NULL},
        {"unknown dtype", "{" BASE ", \"torch_dtype\": \"int8\"}", FERRY_ERR_UNSUPPORTED,
         "key 'torch_dtype' is 'int8'", "bfloat16"},
        {"dtype not a string", "{" BASE ", \"dtype\": 16}", FERRY_ERR_FORMAT,
         "key 'dtype' must be a string", NULL},
        {"layer_types wrong length", "{" BASE ", \"layer_types\": [\"full_attention\"]}",
         FERRY_ERR_FORMAT, "key 'layer_types' must be a list of num_hidden_layers (2)", NULL},
        {"layer_types unknown",
         "{" BASE ", \"layer_types\": [\"full_attention\", \"linear_attention\"]}",
         FERRY_ERR_UNSUPPORTED, "key 'layer_types' entry 1 is 'linear_attention'",
         "sliding_attention"},
        {"layer_types not strings", "{" BASE ", \"layer_types\": [1, 2]}",
         FERRY_ERR_UNSUPPORTED, "key 'layer_types' entry 0", NULL},
        {"sliding without window",
         "{" BASE ", \"layer_types\": [\"sliding_attention\", \"full_attention\"]}",
         FERRY_ERR_FORMAT, "entry 0 is sliding_attention but 'sliding_window' is not set",
         NULL},
        {"unknown rope type (5)",
         "{" BASE ", \"rope_parameters\": {\"rope_type\": \"proportional\"}}",
         FERRY_ERR_UNSUPPORTED, "rope type 'proportional' is not supported",
         "default, linear, dynamic, llama3, yarn, longrope, mrope"},
        {"longrope without short factors",
         "{" BASE ", \"rope_scaling\": {\"type\": \"longrope\", \"long_factor\": "
         FACTORS_8("2") "}}", FERRY_ERR_FORMAT, "(rope_scaling): key 'short_factor' is missing",
         NULL},
        {"longrope factors too short",
         "{" BASE ", \"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": [1, 1],"
         " \"long_factor\": " FACTORS_8("2") "}}", FERRY_ERR_FORMAT,
         "key 'short_factor' must be a list of rotary_dim/2 (8) numbers", NULL},
        {"longrope factors not a list",
         "{" BASE ", \"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": "
         FACTORS_8("2") ", \"long_factor\": 2}}", FERRY_ERR_FORMAT,
         "key 'long_factor' must be a list of rotary_dim/2 (8) numbers", NULL},
        {"longrope factor a string",
         "{" BASE ", \"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": "
         FACTORS_8("2") ", \"long_factor\": " FACTORS_8("\"x\"") "}}", FERRY_ERR_FORMAT,
         "(rope_scaling): key 'long_factor' entry 7 must be a number in [0.01, 10000]", NULL},
        {"longrope factor infinite",
         "{" BASE ", \"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": "
         FACTORS_8("1e999") ", \"long_factor\": " FACTORS_8("2") "}}", FERRY_ERR_FORMAT,
         "key 'short_factor' entry 7 must be a number", NULL},
        {"longrope factor zero",
         "{" BASE ", \"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": "
         FACTORS_8("0") ", \"long_factor\": " FACTORS_8("2") "}}", FERRY_ERR_FORMAT,
         "key 'short_factor' entry 7 must be a number", NULL},
        {"longrope factor below 1",
         "{" BASE ", \"rope_scaling\": {\"type\": \"longrope\", \"factor\": 0.5, "
         "\"short_factor\": " FACTORS_8("2") ", \"long_factor\": " FACTORS_8("2") "}}",
         FERRY_ERR_FORMAT, "key 'factor' must be a number in [1, 10000] (got 0.5)", NULL},
        {"longrope attention factor huge",
         "{" BASE ", \"rope_scaling\": {\"type\": \"longrope\", \"attention_factor\": 1e6,"
         " \"short_factor\": " FACTORS_8("2") ", \"long_factor\": " FACTORS_8("2") "}}",
         FERRY_ERR_FORMAT, "key 'attention_factor' must be a number in [0.01, 100]", NULL},
        {"longrope top-level original max 0",
         "{" BASE ", \"original_max_position_embeddings\": 0, \"rope_scaling\": {\"type\": "
         "\"longrope\", \"short_factor\": " FACTORS_8("2") ", \"long_factor\": "
         FACTORS_8("2") "}}", FERRY_ERR_FORMAT,
         "config.json: key 'original_max_position_embeddings' must be an integer in", NULL},
        {"longrope of more factors than held",
         "{" BASE ", \"head_dim\": 1024, \"rope_scaling\": {\"type\": \"longrope\","
         " \"short_factor\": [1], \"long_factor\": [1]}}", FERRY_ERR_UNSUPPORTED,
         "key 'short_factor' would hold rotary_dim/2 = 512 factors; ferry holds at most 256",
         NULL},
        {"mrope bands of the wrong sum",
         "{" BASE ", \"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [2, 3, 4]}}",
         FERRY_ERR_FORMAT, "key 'mrope_section' must sum to rotary_dim/2 (8); its entries sum "
         "to 9", NULL},
        {"mrope default bands on a small head",
         "{" BASE ", \"rope_scaling\": {\"type\": \"mrope\"}}", FERRY_ERR_FORMAT,
         "key 'mrope_section' must sum to rotary_dim/2 (8)", "the default [16, 24, 24]"},
        {"mrope two bands",
         "{" BASE ", \"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [4, 4]}}",
         FERRY_ERR_FORMAT, "key 'mrope_section' must be a list of 3 positive integers", NULL},
        {"mrope band zero",
         "{" BASE ", \"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [0, 4, 4]}}",
         FERRY_ERR_FORMAT, "key 'mrope_section' entry 0 must be an integer in [1, 4096]", NULL},
        {"mrope band fractional",
         "{" BASE ", \"rope_scaling\": {\"type\": \"mrope\","
         " \"mrope_section\": [2, 2.5, 3.5]}}", FERRY_ERR_FORMAT,
         "key 'mrope_section' entry 1 must be an integer", NULL},
        {"unknown rope type (4)",
         "{" BASE ", \"rope_scaling\": {\"type\": \"su\", \"factor\": 2.0}}",
         FERRY_ERR_UNSUPPORTED, "rope type 'su' is not supported", "llama3"},
        {"rope_scaling without type", "{" BASE ", \"rope_scaling\": {\"factor\": 2.0}}",
         FERRY_ERR_FORMAT, "(rope_scaling): key 'rope_type' is missing", NULL},
        {"rope type not a string", "{" BASE ", \"rope_parameters\": {\"rope_type\": 3}}",
         FERRY_ERR_FORMAT, "key 'rope_type' must be a string", NULL},
        {"rope not an object", "{" BASE ", \"rope_scaling\": 2}", FERRY_ERR_FORMAT,
         "key 'rope_scaling' must be an object", NULL},
        {"linear without factor",
         "{" BASE ", \"rope_parameters\": {\"rope_type\": \"linear\"}}", FERRY_ERR_FORMAT,
         "(rope_parameters): key 'factor' is missing", NULL},
        {"negative factor",
         "{" BASE ", \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": -2}}",
         FERRY_ERR_FORMAT, "(rope_scaling): key 'factor'", NULL},
        {"zero factor", "{" BASE ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 0}}",
         FERRY_ERR_FORMAT, "key 'factor' must be a number in [1, 10000] (got 0)", NULL},
        {"llama3 without low_freq_factor",
         "{" BASE ", \"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8,"
         " \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}}",
         FERRY_ERR_FORMAT, "key 'low_freq_factor' is missing", NULL},
        {"llama3 without original max",
         "{" BASE ", \"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8,"
         " \"low_freq_factor\": 1, \"high_freq_factor\": 4}}",
         FERRY_ERR_FORMAT, "key 'original_max_position_embeddings' is missing", NULL},
        {"theta zero", "{" BASE ", \"rope_theta\": 0}", FERRY_ERR_FORMAT,
         "key 'rope_theta' must be a number in [10, 1e+15] (got 0)", NULL},
        {"theta inside wrong",
         "{" BASE ", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": \"x\"}}",
         FERRY_ERR_FORMAT, "(rope_parameters): key 'rope_theta' must be a number", NULL},
        {"partial factor too big", "{" BASE ", \"partial_rotary_factor\": 1.5}",
         FERRY_ERR_FORMAT, "key 'partial_rotary_factor' must be a number in", NULL},
        {"yarn truncate not bool",
         "{" BASE ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 2,"
         " \"truncate\": \"no\"}}", FERRY_ERR_FORMAT, "key 'truncate' must be true or false",
         NULL},
        {"nested rope not an object",
         "{" BASE ", \"rope_parameters\": {\"full_attention\": 1}}", FERRY_ERR_FORMAT,
         "(rope_parameters.full_attention): expected an object", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_parse_error(cases[i].label, cases[i].json, cases[i].status, cases[i].needle,
                           cases[i].needle2);
}

/* Values no real model has: each refused with one line naming config.json and the key, before
 * anything is sized by them. */
static void test_absurd_values(void **state)
{
    (void)state;
#define SIZES(layers, heads, kv, head_dim, vocab, hidden)                                       \
    "{\"architectures\": [\"LlamaForCausalLM\"], \"intermediate_size\": 128, "                   \
    "\"num_hidden_layers\": " layers ", \"num_attention_heads\": " heads                       \
    ", \"num_key_value_heads\": " kv head_dim ", \"vocab_size\": " vocab                       \
    ", \"hidden_size\": " hidden "}"
    static const struct {
        const char *label, *json;
        ferry_status status;
        const char *needle;
    } cases[] = {
        {"zero layers", SIZES("0", "4", "2", "", "100", "64"), FERRY_ERR_FORMAT,
         "key 'num_hidden_layers' must be an integer in [1, 1024] (got 0)"},
        {"a billion layers", SIZES("1000000000", "4", "2", "", "100", "64"), FERRY_ERR_FORMAT,
         "key 'num_hidden_layers' must be an integer in [1, 1024] (got 1000000000)"},
        {"negative layers", SIZES("-3", "4", "2", "", "100", "64"), FERRY_ERR_FORMAT,
         "(got -3)"},
        {"layers 1e300", SIZES("1e300", "4", "2", "", "100", "64"), FERRY_ERR_FORMAT,
         "key 'num_hidden_layers' must be an integer in [1, 1024] (got 1.0000000000000001e+300)"},
        {"layers as a boolean", SIZES("true", "4", "2", "", "100", "64"), FERRY_ERR_FORMAT,
         "key 'num_hidden_layers' must be an integer (got a boolean)"},
        {"layers as an array", SIZES("[2]", "4", "2", "", "100", "64"), FERRY_ERR_FORMAT,
         "key 'num_hidden_layers' must be an integer (got an array)"},
        {"head_dim 0", SIZES("2", "4", "2", ", \"head_dim\": 0", "100", "64"), FERRY_ERR_FORMAT,
         "key 'head_dim' must be an integer in [1, 4096] (got 0)"},
        {"vocab 0", SIZES("2", "4", "2", "", "0", "64"), FERRY_ERR_FORMAT,
         "key 'vocab_size' must be an integer in [1, 16777216] (got 0)"},
        {"vocab 2^53", SIZES("2", "4", "2", "", "9007199254740992", "64"), FERRY_ERR_FORMAT,
         "key 'vocab_size' must be an integer in [1, 16777216] (got 9007199254740992)"},
        {"hidden 0", SIZES("2", "4", "2", "", "100", "0"), FERRY_ERR_FORMAT,
         "key 'hidden_size' must be an integer in [1, 1048576] (got 0)"},
        {"zero heads (a division by zero)", SIZES("2", "0", "2", "", "100", "64"),
         FERRY_ERR_FORMAT, "key 'num_attention_heads' must be an integer in [1, 4096] (got 0)"},
        {"zero kv heads (a division by zero)", SIZES("2", "4", "0", "", "100", "64"),
         FERRY_ERR_FORMAT, "key 'num_key_value_heads' must be an integer in [1, 4096] (got 0)"},
        {"more kv heads than heads", SIZES("2", "4", "8", "", "100", "64"), FERRY_ERR_FORMAT,
         "key 'num_key_value_heads' (8) must divide num_attention_heads (4)"},
        {"heads do not divide hidden", SIZES("2", "3", "1", "", "100", "64"), FERRY_ERR_FORMAT,
         "key 'head_dim' is missing and hidden_size (64) is not a multiple of "
         "num_attention_heads (3)"},
        {"one head of 2^20", SIZES("2", "1", "1", "", "100", "1048576"), FERRY_ERR_FORMAT,
         "key 'head_dim' (derived: 1048576) must be at most 4096"},
        {"a million heads", SIZES("2", "1000000", "1", "", "100", "64"), FERRY_ERR_FORMAT,
         "key 'num_attention_heads' must be an integer in [1, 4096] (got 1000000)"},
        {"intermediate 0",
         "{\"architectures\": [\"X\"], \"vocab_size\": 10, \"hidden_size\": 64,"
         " \"intermediate_size\": 0}", FERRY_ERR_FORMAT,
         "key 'intermediate_size' must be an integer in [1, 16777216] (got 0)"},
        {"max positions 0", "{" BASE ", \"max_position_embeddings\": 0}", FERRY_ERR_FORMAT,
         "key 'max_position_embeddings' must be an integer in [1, 4294967296] (got 0)"},
        {"max positions 2^40", "{" BASE ", \"max_position_embeddings\": 1099511627776}",
         FERRY_ERR_FORMAT, "key 'max_position_embeddings' must be an integer in [1, 4294967296]"},
        {"negative window", "{" BASE ", \"sliding_window\": -1}", FERRY_ERR_FORMAT,
         "key 'sliding_window' must be an integer in [0, 4294967296] (got -1)"},
        {"infinite theta", "{" BASE ", \"rope_theta\": 1e999}", FERRY_ERR_FORMAT,
         "key 'rope_theta' must be a number in"},
        {"eps 2", "{" BASE ", \"rms_norm_eps\": 2}", FERRY_ERR_FORMAT,
         "key 'rms_norm_eps' must be a number in [1e-12, 1] (got 2)"},
        {"yarn factor 1e300",
         "{" BASE ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 1e300}}",
         FERRY_ERR_FORMAT, "key 'factor' must be a number in"},
        {"llama3 original max 0",
         "{" BASE ", \"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8,"
         " \"low_freq_factor\": 1, \"high_freq_factor\": 4,"
         " \"original_max_position_embeddings\": 0}}", FERRY_ERR_FORMAT,
         "key 'original_max_position_embeddings' must be an integer in [1, 4294967296] (got 0)"},
        {"100000 layer_types for 2 layers",
         NULL, FERRY_ERR_FORMAT, "key 'layer_types' must be a list of num_hidden_layers (2)"},
        {"nested 100000 deep", NULL, FERRY_ERR_FORMAT,
         "nesting deeper than 128 levels (at byte 311) exceeds the limit for a config file"},
        /* Strings that later messages echo: control bytes are refused or quoted. */
        {"newline in the class name",
         "{\"architectures\": [\"Llama\\nForCausalLM\"], \"vocab_size\": 1}", FERRY_ERR_FORMAT,
         "key 'architectures' holds a control, format or invalid character at byte 5 "
         "('Llama\\x0aForCausalLM')"},
        {"escape sequence in hidden_act", "{" BASE ", \"hidden_act\": \"\\u001b[2Jsilu\"}",
         FERRY_ERR_FORMAT, "key 'hidden_act' holds a control, format or invalid character at "
         "byte 0 ('\\x1b[2Jsilu')"},
        {"newline in model_type",
         "{\"architectures\": [\"X\"], \"model_type\": \"a\\rb\", \"vocab_size\": 1}",
         FERRY_ERR_FORMAT, "key 'model_type' holds a control, format or invalid character at "
         "byte 1 ('a\\x0db')"},
        /* C1 controls, bidi and invisible characters too: refused, not only escaped. */
        {"C1 CSI in the class name",
         "{\"architectures\": [\"Llama\\u009b31mForCausalLM\"], \"vocab_size\": 1}",
         FERRY_ERR_FORMAT, "key 'architectures' holds a control, format or invalid character "
         "at byte 5 ('Llama\\u009b31mForCausalLM')"},
        {"right-to-left override in model_type",
         "{\"architectures\": [\"X\"], \"model_type\": \"lla\\u202ema\", \"vocab_size\": 1}",
         FERRY_ERR_FORMAT, "key 'model_type' holds a control, format or invalid character at "
         "byte 3 ('lla\\u202ema')"},
        {"zero-width space in hidden_act", "{" BASE ", \"hidden_act\": \"si\\u200blu\"}",
         FERRY_ERR_FORMAT, "key 'hidden_act' holds a control, format or invalid character at "
         "byte 2 ('si\\u200blu')"},
        {"tag character in the class name",
         "{\"architectures\": [\"LlamaForCausalLM\\udb40\\udc41\"], \"vocab_size\": 1}",
         FERRY_ERR_FORMAT, "key 'architectures' holds a control, format or invalid character "
         "at byte 16 ('LlamaForCausalLM\\udb40\\udc41')"},
        {"newline in dtype", "{" BASE ", \"torch_dtype\": \"bf\\n16\"}", FERRY_ERR_UNSUPPORTED,
         "key 'torch_dtype' is 'bf\\x0a16'"},
        {"newline in rope type", "{" BASE ", \"rope_parameters\": {\"rope_type\": \"yarn\\n\"}}",
         FERRY_ERR_UNSUPPORTED, "rope type 'yarn\\x0a' is not supported"},
        {"newline in a layer type",
         "{" BASE ", \"layer_types\": [\"full_attention\", \"full\\nattention\"]}",
         FERRY_ERR_UNSUPPORTED, "entry 1 is 'full\\x0aattention'"},
    };
#undef SIZES
    char *layer_types = malloc(100000 * 18 + 256);
    char *deep = malloc(200000 + 1024);
    assert_non_null(layer_types);
    assert_non_null(deep);
    size_t o = (size_t)sprintf(layer_types, "{" BASE ", \"layer_types\": [");
    for (int i = 0; i < 100000; i++)
        o += (size_t)sprintf(layer_types + o, "%s\"full_attention\"", i ? "," : "");
    strcpy(layer_types + o, "]}");
    o = (size_t)sprintf(deep, "{" BASE ", \"x\": ");
    memset(deep + o, '[', 100000);
    memset(deep + o + 100000, ']', 100000);
    strcpy(deep + o + 200000, "}");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *json = cases[i].json;
        if (!json)
            json = strstr(cases[i].label, "deep") ? deep : layer_types;
        expect_parse_error(cases[i].label, json, cases[i].status, cases[i].needle, NULL);
    }

    /* Nesting up to the limit (the root object and 127 arrays), under a key ferry does not
     * read, is fine. */
    o = (size_t)sprintf(deep, "{" BASE ", \"x\": ");
    memset(deep + o, '[', 127);
    memset(deep + o + 127, ']', 127);
    strcpy(deep + o + 254, "}");
    test_cfg cfg;
    parse_ok(deep, &cfg);
    free_both(&cfg);
    free(layer_types);
    free(deep);
}

static void test_load_directory(void **state)
{
    (void)state;
    model_config cfg;
    test_cfg lcfg;
    fy_err err = {0};
    char path[256];

    snprintf(path, sizeof path, "%s/config.json", tmp_dir);
    assert_int_equal(cfg_load(tmp_dir, &cfg, &err), FERRY_ERR_IO);
    assert_non_null(strstr(err.msg, path));
    assert_null(cfg.raw);

    scratch_write(tmp_dir, "config.json", "{" BASE ", \"num_hidden_layers\": 0}");
    fy_err_clear(&err);
    assert_int_equal(load_lm(tmp_dir, &lcfg, &err), FERRY_ERR_FORMAT);
    assert_non_null(strstr(err.msg, path));

    scratch_write(tmp_dir, "config.json",
               "{\"architectures\": [\"X\"], \"vocab_size\": 10, \"hidden_size\": 64,"
               " \"intermediate_size\": 1, \"num_hidden_layers\": 0, \"num_attention_heads\": 1}");
    fy_err_clear(&err);
    assert_int_equal(load_lm(tmp_dir, &lcfg, &err), FERRY_ERR_FORMAT);
    if (!strstr(err.msg, "config.json: key 'num_hidden_layers' must be an integer in [1, 1024]"
                         " (got 0)"))
        fail_msg("unexpected message: %s", err.msg);

    scratch_write(tmp_dir, "config.json", "{" BASE "}");
    fy_err_clear(&err);
    assert_int_equal(cfg_load(tmp_dir, &cfg, &err), FERRY_OK);
    assert_null(cfg.generation);
    assert_string_equal(cfg.architecture, "LlamaForCausalLM");
    cfg_free(&cfg);

    scratch_write(tmp_dir, "generation_config.json",
                  "{\"eos_token_id\": [1, 2], \"do_sample\": false}");
    assert_int_equal(cfg_load(tmp_dir, &cfg, &err), FERRY_OK);
    assert_non_null(cfg.generation);
    assert_true(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(cfg.generation, "eos_token_id")));
    cfg_free(&cfg);

    scratch_write(tmp_dir, "generation_config.json", "{\"eos_token_id\": ");
    assert_int_equal(cfg_load(tmp_dir, &cfg, &err), FERRY_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "generation_config.json"));
    assert_null(cfg.raw);
    assert_null(cfg.generation);
}

/* config.json files that are not small regular files: refused before they are read. */
static void test_load_hostile_files(void **state)
{
    (void)state;
    model_config cfg;
    fy_err err = {0};
    char path[256];

    /* 17 MB (sparse): over the 16 MB cap, refused from its size without reading it. */
    snprintf(path, sizeof path, "%s/config.json", tmp_dir);
    scratch_write(tmp_dir, "config.json", "{}");
    assert_int_equal(truncate(path, (off_t)17 << 20), 0);
    assert_int_equal(cfg_load(tmp_dir, &cfg, &err), FERRY_ERR_FORMAT);
    if (!strstr(err.msg, path) ||
        !strstr(err.msg, "17825792 bytes exceed the limit of 16777216"))
        fail_msg("unexpected message: %s", err.msg);
    assert_int_equal(unlink(path), 0);

    /* A FIFO: refused at once, not waited on. */
    assert_int_equal(mkfifo(path, 0600), 0);
    fy_err_clear(&err);
    assert_int_equal(cfg_load(tmp_dir, &cfg, &err), FERRY_ERR_IO);
    if (!strstr(err.msg, path) || !strstr(err.msg, "not a regular file"))
        fail_msg("unexpected message: %s", err.msg);
    assert_int_equal(unlink(path), 0);

    /* A directory. */
    assert_int_equal(mkdir(path, 0700), 0);
    fy_err_clear(&err);
    assert_int_equal(cfg_load(tmp_dir, &cfg, &err), FERRY_ERR_IO);
    if (!strstr(err.msg, path) || !strstr(err.msg, "not a regular file"))
        fail_msg("unexpected message: %s", err.msg);
    assert_int_equal(rmdir(path), 0);

    /* An empty file. */
    scratch_write(tmp_dir, "config.json", "");
    fy_err_clear(&err);
    assert_int_equal(cfg_load(tmp_dir, &cfg, &err), FERRY_ERR_FORMAT);
    if (!strstr(err.msg, path) || !strstr(err.msg, "empty"))
        fail_msg("unexpected message: %s", err.msg);

    /* A good config.json with a generation_config.json that is a FIFO. */
    scratch_write(tmp_dir, "config.json", "{" BASE "}");
    snprintf(path, sizeof path, "%s/generation_config.json", tmp_dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    fy_err_clear(&err);
    assert_int_equal(cfg_load(tmp_dir, &cfg, &err), FERRY_ERR_IO);
    if (!strstr(err.msg, "generation_config.json") || !strstr(err.msg, "not a regular file"))
        fail_msg("unexpected message: %s", err.msg);
    assert_null(cfg.raw);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transformers5_llama3),
        cmocka_unit_test(test_transformers4_rope_scaling),
        cmocka_unit_test(test_rope_variants),
        cmocka_unit_test(test_longrope_and_mrope),
        cmocka_unit_test(test_sliding_window_switch),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_absurd_values),
        cmocka_unit_test_setup_teardown(test_load_directory, make_tmp, remove_tmp),
        cmocka_unit_test_setup_teardown(test_load_hostile_files, make_tmp, remove_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
