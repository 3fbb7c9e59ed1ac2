/* test_config_ranges.c — the documented ranges of rope and norm parameters (docs/security.md):
 * just outside each end is refused naming the key and the range; at each end, and at every
 * combination of ends, the rope tables ferry computes stay finite and positive in float32. Values
 * that are "finite and > 0" but outside the ranges used to pass: theta 1e-300 made 63 of 64
 * frequencies inf, a factor of 1e-40 24 of them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/lower/rope_freq.h"
#include "models/lm_config.h"

#define BASE                                                                                   \
    "\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "                  \
    "\"vocab_size\": 32000, \"hidden_size\": 64, \"intermediate_size\": 128, "                 \
    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4"

#define LLAMA3(low, high)                                                                      \
    "{" BASE ", \"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8, "              \
    "\"low_freq_factor\": " low ", \"high_freq_factor\": " high ", "                           \
    "\"original_max_position_embeddings\": 8192}}"
#define YARN_BARE(fields)                                                                      \
    "{" BASE ", \"rope_parameters\": {\"rope_type\": \"yarn\"" fields "}}"
#define YARN(extra) YARN_BARE(", \"factor\": 4, \"original_max_position_embeddings\": 4096" extra)

/* A config template with one %s for the value, the key, and the range as messages print it. */
typedef struct param {
    const char *json, *key, *range, *min, *max;
    const char *outside[4];      /* refused; NULL-terminated */
} param;

static const param PARAMS[] = {
    {"{" BASE ", \"rope_theta\": %s}", "rope_theta", "[10, 1e+15]", "10", "1e15",
     {"9.99", "1e-300", "1.01e15", "1e300"}},
    {"{" BASE ", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": %s}}",
     "rope_theta", "[10, 1e+15]", "10", "1e15", {"1", "0.5", "2e15", NULL}},
    {"{" BASE ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": %s}}", "factor",
     "[1, 10000]", "1", "10000", {"0.999", "1e-40", "10001", "1e300"}},
    {"{" BASE ", \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": %s}}", "factor",
     "[1, 10000]", "1", "10000", {"0.5", "1e-300", "1e5", NULL}},
    {YARN_BARE(", \"factor\": %s, \"original_max_position_embeddings\": 4096"), "factor",
     "[1, 10000]", "1", "10000", {"1e-40", "2e4", NULL}},
    {LLAMA3("%s", "1000"), "low_freq_factor", "[0.01, 1000]", "0.01", "999",
     {"0.0099", "1e-300", "1001", NULL}},
    {LLAMA3("0.5", "%s"), "high_freq_factor", "[0.01, 1000]", "0.02", "1000",
     {"0.009", "1e-300", "1e6", NULL}},
    {YARN(", \"beta_fast\": %s"), "beta_fast", "[0.01, 1000]", "0.01", "1000",
     {"0.0099", "1e-300", "1001", NULL}},
    {YARN(", \"beta_slow\": %s"), "beta_slow", "[0.01, 1000]", "0.01", "1000",
     {"0.0099", "1e-300", "1e300", NULL}},
    {YARN(", \"attention_factor\": %s"), "attention_factor", "[0.01, 100]", "0.01", "100",
     {"0.0099", "1e-300", "101", "1e6"}},
    {YARN(", \"mscale\": %s, \"mscale_all_dim\": 1"), "mscale", "[0, 10]", "0", "10",
     {"-0.1", "10.01", "1e6", NULL}},
    {YARN(", \"mscale\": 1, \"mscale_all_dim\": %s"), "mscale_all_dim", "[0, 10]", "0", "10",
     {"-1e-300", "11", NULL}},
    {"{" BASE ", \"rms_norm_eps\": %s}", "rms_norm_eps", "[1e-12, 1]", "1e-12", "1",
     {"9.9e-13", "0", "1e-300", "1.5"}},
    {YARN_BARE(", \"factor\": 4, \"original_max_position_embeddings\": %s"),
     "original_max_position_embeddings",
     "[1, 4294967296]", "1", "4294967296", {"0", "4294967297", "1e300", NULL}},
};

/* A config as the decoder families read it: the generic keys and the decoder's. */
typedef struct test_cfg {
    model_config m;
    lm_config lm;
} test_cfg;

static ferry_status parse_text(const char *json, test_cfg *cfg, fy_err *err)
{
    return lm_config_parse(json, strlen(json), "config.json", &cfg->m, &cfg->lm, err);
}

static void free_both(test_cfg *cfg)
{
    lm_config_free(&cfg->lm);
    cfg_free(&cfg->m);
}

static ferry_status parse_with(const param *p, const char *value, test_cfg *cfg, fy_err *err)
{
    char json[1024];
    snprintf(json, sizeof json, p->json, value);
    return parse_text(json, cfg, err);
}

/* The float32 tables and factors derived from an accepted rope: finite, positive, normal. */
static void check_tables(const lm_config *cfg, const char *what)
{
    static const int64_t dims[] = {2, 4, 64, 128, 4096};
    float inv[2048];
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        rope_inv_freq(&cfg->rope, dims[d], 1 << 20, inv);
        for (int64_t i = 0; i < dims[d] / 2; i++)
            if (!isfinite(inv[i]) || !(inv[i] >= FLT_MIN))
                fail_msg("%s: head_dim %lld: inv_freq[%lld] = %g", what, (long long)dims[d],
                         (long long)i, (double)inv[i]);
    }
    float scaling = (float)rope_attention_scaling(&cfg->rope);
    if (!isfinite(scaling) || !(scaling >= 1e-3f && scaling <= 1e3f))
        fail_msg("%s: attention scaling %g", what, (double)scaling);
    float inv_rms = 1.0f / sqrtf((float)cfg->rms_norm_eps);   /* RMSNorm of a zero row */
    if (!isfinite(inv_rms))
        fail_msg("%s: 1/sqrt(eps) = %g", what, (double)inv_rms);
}

static void test_each_end(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof PARAMS / sizeof PARAMS[0]; i++) {
        const param *p = &PARAMS[i];
        const char *ends[2] = {p->min, p->max};
        for (int e = 0; e < 2; e++) {
            test_cfg cfg;
            fy_err err = {0};
            char what[128];
            snprintf(what, sizeof what, "%s = %s", p->key, ends[e]);
            if (parse_with(p, ends[e], &cfg, &err) != FERRY_OK)
                fail_msg("%s refused: %s", what, err.msg);
            check_tables(&cfg.lm, what);
            free_both(&cfg);
        }
        for (int k = 0; k < 4 && p->outside[k]; k++) {
            test_cfg cfg;
            fy_err err = {0};
            /* An integer key names its range unless the value is no integer at all. */
            bool integer = strcmp(p->key, "original_max_position_embeddings") == 0;
            char needle[160];
            if (integer && strchr(p->outside[k], 'e'))
                snprintf(needle, sizeof needle, "key '%s' must be an integer", p->key);
            else
                snprintf(needle, sizeof needle, "key '%s' must be %s in %s", p->key,
                         integer ? "an integer" : "a number", p->range);
            if (parse_with(p, p->outside[k], &cfg, &err) != FERRY_ERR_FORMAT)
                fail_msg("%s = %s accepted", p->key, p->outside[k]);
            if (!strstr(err.msg, "config.json") || !strstr(err.msg, needle))
                fail_msg("%s = %s: message \"%s\" does not say \"%s\"", p->key, p->outside[k],
                         err.msg, needle);
        }
    }
}

/* LongRoPE's factor sets: each end of [0.01, 10^4] for every entry, with theta's ends and the
 * attention factor given at its ends or derived from the widest factor (max 2^32 over an
 * original 2), keeps both tables finite, positive and normal and the scaling sane; just
 * outside, an entry is refused by key and index. */
static void test_longrope_ends(void **state)
{
    (void)state;
    static const char *const ends[] = {"0.01", "10000"}, *const theta[] = {"10", "1e15"},
                             *const attn[] = {"", ", \"attention_factor\": 0.01",
                                              ", \"attention_factor\": 100"};
    for (int f = 0; f < 2; f++)
        for (int t = 0; t < 2; t++)
            for (int a = 0; a < 3; a++) {
                char json[1024], set[128];
                snprintf(set, sizeof set, "[%s, %s, %s, %s, %s, %s, %s, %s]", ends[f], ends[f],
                         ends[f], ends[f], ends[f], ends[f], ends[f], ends[f]);
                snprintf(json, sizeof json,
                         "{" BASE ", \"max_position_embeddings\": 4294967296, "
                         "\"rope_parameters\": {\"rope_type\": \"longrope\", "
                         "\"rope_theta\": %s, \"original_max_position_embeddings\": 2, "
                         "\"short_factor\": %s, \"long_factor\": %s%s}}",
                         theta[t], set, set, attn[a]);
                test_cfg cfg;
                fy_err err = {0};
                if (parse_text(json, &cfg, &err) != FERRY_OK)
                    fail_msg("longrope refused: %s\n%s", err.msg, json);
                float inv[8];
                for (int which = 0; which < 2; which++) {
                    rope_longrope_inv_freq(&cfg.lm.rope, 16, which, inv);
                    for (int i = 0; i < 8; i++)
                        if (!isfinite(inv[i]) || !(inv[i] >= FLT_MIN))
                            fail_msg("%s: inv_freq[%d] = %g", json, i, (double)inv[i]);
                }
                float scaling = (float)rope_attention_scaling(&cfg.lm.rope);
                if (!isfinite(scaling) || !(scaling >= 1e-3f && scaling <= 1e3f))
                    fail_msg("%s: attention scaling %g", json, (double)scaling);
                free_both(&cfg);
            }
    static const char *const outside[] = {"0.0099", "10001", "1e-300", "1e300", "-1"};
    for (size_t k = 0; k < sizeof outside / sizeof outside[0]; k++) {
        char json[1024];
        snprintf(json, sizeof json,
                 "{" BASE ", \"rope_parameters\": {\"rope_type\": \"longrope\", "
                 "\"short_factor\": [1, 1, 1, 1, 1, 1, 1, 1], "
                 "\"long_factor\": [1, 1, 1, %s, 1, 1, 1, 1]}}", outside[k]);
        test_cfg cfg;
        fy_err err = {0};
        if (parse_text(json, &cfg, &err) != FERRY_ERR_FORMAT)
            fail_msg("long_factor entry %s accepted", outside[k]);
        if (!strstr(err.msg, "config.json (rope_parameters): key 'long_factor' entry 3 must be "
                             "a number in [0.01, 10000]"))
            fail_msg("long_factor entry %s: message \"%s\"", outside[k], err.msg);
    }
    /* an original length of 1 leaves the derived attention factor ln(f) / ln(1) */
    static const char *const one =
        "{" BASE ", \"rope_parameters\": {\"rope_type\": \"longrope\", "
        "\"original_max_position_embeddings\": 1, \"short_factor\": [1, 1, 1, 1, 1, 1, 1, 1], "
        "\"long_factor\": [1, 1, 1, 1, 1, 1, 1, 1]}}";
    test_cfg cfg;
    fy_err err = {0};
    assert_int_equal(parse_text(one, &cfg, &err), FERRY_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "key 'original_max_position_embeddings' is 1"));
}

/* Every combination of range ends for each rope type: the ends are safe together, not only
 * one at a time (theta 1e15 with factor 1e4, beta 0.01 with theta 10, ...). */
static void test_corners(void **state)
{
    (void)state;
    static const char *const theta[] = {"10", "1e15"}, *const factor[] = {"1", "10000"},
                             *const small[] = {"0.01", "1000"}, *const orig[] = {"1", "4294967296"},
                             *const attn[] = {"0.01", "100"}, *const mscale[] = {"0", "10"},
                             *const eps[] = {"1e-12", "1"};
    int combos = 0;
    for (int m = 0; m < 1 << 10; m++) {
        char json[1024];
#define PICK(arr, bit) arr[(m >> (bit)) & 1]
        const char *type = (m & 1) ? "yarn" : "llama3";
        if (m & 1) {
            /* attention_factor, when given, replaces what mscale derives */
            char attention[64] = "";
            if ((m >> 9) & 1)
                snprintf(attention, sizeof attention, ", \"attention_factor\": %s",
                         PICK(attn, 7));
            snprintf(json, sizeof json,
                     "{" BASE ", \"rms_norm_eps\": %s, \"rope_parameters\": {\"rope_type\": "
                     "\"yarn\", \"rope_theta\": %s, \"factor\": %s, \"beta_fast\": %s, "
                     "\"beta_slow\": %s, \"original_max_position_embeddings\": %s, "
                     "\"mscale\": %s, \"mscale_all_dim\": %s%s}}",
                     PICK(eps, 1), PICK(theta, 2), PICK(factor, 3), PICK(small, 4),
                     PICK(small, 5), PICK(orig, 6), PICK(mscale, 7), PICK(mscale, 8),
                     attention);
        } else {
            if (m >> 7)
                continue;   /* llama3 has fewer parameters: 6 bits */
            if (strcmp(PICK(small, 4), PICK(small, 5)) == 0)
                continue;   /* low and high must differ */
            snprintf(json, sizeof json,
                     "{" BASE ", \"rms_norm_eps\": %s, \"rope_parameters\": {\"rope_type\": "
                     "\"llama3\", \"rope_theta\": %s, \"factor\": %s, \"low_freq_factor\": %s, "
                     "\"high_freq_factor\": %s, \"original_max_position_embeddings\": %s}}",
                     PICK(eps, 1), PICK(theta, 2), PICK(factor, 3), PICK(small, 4),
                     PICK(small, 5), PICK(orig, 6));
        }
#undef PICK
        test_cfg cfg;
        fy_err err = {0};
        if (parse_text(json, &cfg, &err) != FERRY_OK)
            fail_msg("%s corner refused: %s\n%s", type, err.msg, json);
        check_tables(&cfg.lm, json);
        free_both(&cfg);
        combos++;
    }
    assert_true(combos > 500);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_end),
        cmocka_unit_test(test_corners),
        cmocka_unit_test(test_longrope_ends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
