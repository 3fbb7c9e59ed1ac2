/* test_dtype.c — dtype sizes and names, and float conversions checked bit-exactly against an
 * independent reference (exact arithmetic in double). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/dtype.h"

static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* The value of a half, decoded by its definition. */
static double ref_f16_value(uint16_t h)
{
    int exponent = (h >> 10) & 31, mantissa = h & 1023;
    double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (exponent == 0)
        return sign * ldexp(mantissa, -24);
    if (exponent == 31)
        return mantissa ? NAN : sign * INFINITY;
    return sign * ldexp(1024 + mantissa, exponent - 25);
}

/* Rounds a finite float to half by searching the positive halves for the nearest one (ties to
 * the even bit pattern); values at or beyond 65520 become infinity. */
static uint16_t ref_f32_to_f16(float f)
{
    double x = fabs((double)f);
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (x >= 65520.0)
        return sign | 0x7C00;
    unsigned lo = 0, hi = 0x7BFF;
    while (lo < hi) {                 /* largest half <= x */
        unsigned mid = (lo + hi + 1) / 2;
        if (ref_f16_value((uint16_t)mid) <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo == 0x7BFF)                 /* in [65504, 65520): nearer the largest half */
        return sign | 0x7BFF;
    double below = ref_f16_value((uint16_t)lo), above = ref_f16_value((uint16_t)(lo + 1));
    unsigned pick;
    if (x - below < above - x)
        pick = lo;
    else if (x - below > above - x)
        pick = lo + 1;
    else
        pick = (lo & 1) ? lo + 1 : lo;
    return (uint16_t)(sign | pick);
}

static void test_sizes_and_names(void **state)
{
    (void)state;
    static const struct { ferry_dtype dt; const char *name; size_t size; int is_float; } cases[] = {
        {FERRY_F64, "F64", 8, 1},   {FERRY_F32, "F32", 4, 1},   {FERRY_F16, "F16", 2, 1},
        {FERRY_BF16, "BF16", 2, 1}, {FERRY_I8, "I8", 1, 0},     {FERRY_I16, "I16", 2, 0},
        {FERRY_I32, "I32", 4, 0},   {FERRY_I64, "I64", 8, 0},   {FERRY_U8, "U8", 1, 0},
        {FERRY_U16, "U16", 2, 0},   {FERRY_U32, "U32", 4, 0},   {FERRY_U64, "U64", 8, 0},
        {FERRY_BOOL, "BOOL", 1, 0}, {FERRY_F8_E4M3, "F8_E4M3", 1, 1},
        {FERRY_F8_E5M2, "F8_E5M2", 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(dt_size(cases[i].dt), cases[i].size);
        assert_string_equal(dt_st_name(cases[i].dt), cases[i].name);
        assert_int_equal(dt_from_st_name(cases[i].name), cases[i].dt);
        assert_int_equal(!!dt_is_float(cases[i].dt), cases[i].is_float);
    }
    assert_int_equal(dt_size(FERRY_DTYPE_UNDEFINED), 0);
    assert_int_equal(dt_size(FERRY_DTYPE_COUNT), 0);
    assert_int_equal(dt_from_st_name("F33"), FERRY_DTYPE_UNDEFINED);
    assert_int_equal(dt_from_st_name("f32"), FERRY_DTYPE_UNDEFINED);
    assert_int_equal(dt_from_st_name(""), FERRY_DTYPE_UNDEFINED);
    assert_int_equal(dt_from_st_name(NULL), FERRY_DTYPE_UNDEFINED);
}

static void test_bf16_rounding(void **state)
{
    (void)state;
    assert_int_equal(dt_f32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(dt_f32_to_bf16(-2.0f), 0xC000);
    assert_int_equal(dt_f32_to_bf16(from_bits(0x3F808000)), 0x3F80); /* tie, even stays */
    assert_int_equal(dt_f32_to_bf16(from_bits(0x3F818000)), 0x3F82); /* tie, odd rounds up */
    assert_int_equal(dt_f32_to_bf16(from_bits(0x3F808001)), 0x3F81); /* above the tie */
    assert_int_equal(dt_f32_to_bf16(from_bits(0x3F807FFF)), 0x3F80); /* below the tie */
    assert_int_equal(dt_f32_to_bf16(INFINITY), 0x7F80);
    assert_int_equal(dt_f32_to_bf16(-INFINITY), 0xFF80);
    assert_int_equal(dt_f32_to_bf16(from_bits(0x7F7FFFFF)), 0x7F80);  /* FLT_MAX overflows */
    assert_int_equal(dt_f32_to_bf16(NAN), 0x7FC0);
    assert_int_equal(dt_f32_to_bf16(from_bits(0xFFC00001)), 0x7FC0); /* any NaN: canonical */
    assert_int_equal(dt_f32_to_bf16(from_bits(0x7F800001)), 0x7FC0); /* signalling NaN too */
    assert_int_equal(dt_f32_to_bf16(from_bits(0x00000001)), 0x0000); /* tiny denormal */
    assert_int_equal(dt_f32_to_bf16(-0.0f), 0x8000);
    /* Every bf16 value survives the round trip through float. */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = dt_bf16_to_f32((uint16_t)h);
        assert_int_equal(to_bits(f), h << 16);
        uint16_t back = dt_f32_to_bf16(f);
        assert_int_equal(back, isnan(f) ? 0x7FC0 : h);
    }
}

static void test_f16_decode_all(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = dt_f16_to_f32((uint16_t)h);
        double want = ref_f16_value((uint16_t)h);
        if (isnan(want)) {
            assert_true(isnan(f));
            /* the payload is kept: 10 mantissa bits move to the top of float's 23 */
            assert_int_equal(to_bits(f) & 0x7FFFFF, (h & 1023u) << 13);
        } else {
            assert_true((double)f == want);
            assert_int_equal(!!signbit(f), !!(h & 0x8000));
        }
        uint16_t back = dt_f32_to_f16(f);
        assert_int_equal(back, isnan(f) ? ((h & 0x8000) | 0x7E00) : h);
    }
}

static void test_f16_rounding(void **state)
{
    (void)state;
    assert_int_equal(dt_f32_to_f16(65504.0f), 0x7BFF);
    assert_int_equal(dt_f32_to_f16(65519.996f), 0x7BFF);
    assert_int_equal(dt_f32_to_f16(65520.0f), 0x7C00);            /* tie goes to even = inf */
    assert_int_equal(dt_f32_to_f16(-1e30f), 0xFC00);
    assert_int_equal(dt_f32_to_f16(INFINITY), 0x7C00);
    assert_int_equal(dt_f32_to_f16(-INFINITY), 0xFC00);
    assert_int_equal(dt_f32_to_f16(NAN), 0x7E00);
    assert_int_equal(dt_f32_to_f16(from_bits(0xFFC00000)), 0xFE00);
    assert_int_equal(dt_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);    /* smallest subnormal */
    assert_int_equal(dt_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);    /* tie to even = 0 */
    assert_int_equal(dt_f32_to_f16(ldexpf(1.5f, -24)), 0x0002);    /* tie to even = 2 */
    assert_int_equal(dt_f32_to_f16(ldexpf(1.0f, -14)), 0x0400);    /* smallest normal */
    assert_int_equal(dt_f32_to_f16(-0.0f), 0x8000);
    /* Around every half: the midpoint to its successor (a tie) and the floats just beside it. */
    for (uint32_t h = 0; h < 0x7BFF; h++) {
        float mid = (float)((ref_f16_value((uint16_t)h) + ref_f16_value((uint16_t)(h + 1))) / 2);
        float probes[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 3; k++) {
            assert_int_equal(dt_f32_to_f16(probes[k]), ref_f32_to_f16(probes[k]));
            assert_int_equal(dt_f32_to_f16(-probes[k]), ref_f32_to_f16(-probes[k]));
        }
    }
    /* A sweep over float bit patterns of every exponent. */
    for (uint64_t u = 0; u < 0x7F800000u; u += 65521) {
        float f = from_bits((uint32_t)u);
        assert_int_equal(dt_f32_to_f16(f), ref_f32_to_f16(f));
    }
}

/* The array paths must agree with the scalar ones, also at unaligned addresses. */
static void test_convert_arrays(void **state)
{
    (void)state;
    enum { N = 1003 };
    float *src = malloc(N * sizeof *src);
    uint8_t *buf_a = malloc(N * 8 + 1), *buf_b = malloc(N * 8 + 1);
    assert_non_null(src);
    assert_non_null(buf_a);
    assert_non_null(buf_b);
    uint32_t seed = 12345;
    for (int i = 0; i < N; i++) {
        seed = seed * 1664525u + 1013904223u;
        src[i] = from_bits(seed);
    }
    src[0] = NAN; src[1] = INFINITY; src[2] = -INFINITY; src[3] = 0.0f; src[4] = -0.0f;
    src[5] = 65520.0f; src[6] = 1e-8f;

    uint8_t *half = buf_a + 1, *wide = buf_b + 1;   /* deliberately unaligned */
    assert_int_equal(dt_convert(half, FERRY_F16, src, FERRY_F32, N), 0);
    for (int i = 0; i < N; i++) {
        uint16_t h;
        memcpy(&h, half + 2 * i, 2);
        assert_int_equal(h, dt_f32_to_f16(src[i]));
    }
    assert_int_equal(dt_convert(wide, FERRY_F32, half, FERRY_F16, N), 0);
    for (int i = 0; i < N; i++) {
        uint16_t h;
        float f;
        memcpy(&h, half + 2 * i, 2);
        memcpy(&f, wide + 4 * i, 4);
        assert_int_equal(to_bits(f), to_bits(dt_f16_to_f32(h)));
    }
    assert_int_equal(dt_convert(half, FERRY_BF16, src, FERRY_F32, N), 0);
    for (int i = 0; i < N; i++) {
        uint16_t h;
        memcpy(&h, half + 2 * i, 2);
        assert_int_equal(h, dt_f32_to_bf16(src[i]));
    }
    assert_int_equal(dt_convert(wide, FERRY_F32, half, FERRY_BF16, N), 0);
    for (int i = 0; i < N; i++) {
        uint16_t h;
        float f;
        memcpy(&h, half + 2 * i, 2);
        memcpy(&f, wide + 4 * i, 4);
        assert_int_equal(to_bits(f), (uint32_t)h << 16);
    }
    /* bf16 -> f16 goes through float exactly. */
    assert_int_equal(dt_convert(wide, FERRY_F16, half, FERRY_BF16, N), 0);
    for (int i = 0; i < N; i++) {
        uint16_t b, h;
        memcpy(&b, half + 2 * i, 2);
        memcpy(&h, wide + 2 * i, 2);
        assert_int_equal(h, dt_f32_to_f16(dt_bf16_to_f32(b)));
    }
    /* f32 -> f64 -> f32 is lossless; f64 -> f16 agrees with f32 -> f16. */
    assert_int_equal(dt_convert(wide, FERRY_F64, src, FERRY_F32, N), 0);
    assert_int_equal(dt_convert(half, FERRY_F16, wide, FERRY_F64, N), 0);
    for (int i = 0; i < N; i++) {
        uint16_t h;
        double d;
        memcpy(&d, wide + 8 * i, 8);
        memcpy(&h, half + 2 * i, 2);
        assert_true(isnan(src[i]) ? isnan(d) : d == (double)src[i]);
        assert_int_equal(h, dt_f32_to_f16(src[i]));
    }
    free(src);
    free(buf_a);
    free(buf_b);
}

static void test_convert_from_f64_matches_torch(void **state)
{
    (void)state;
    /* 1 + 2^-11 + 2^-40 lies just above a half tie; torch rounds through float, where it
     * becomes the tie itself, which then goes to even: 1.0. */
    double x = 1.0 + ldexp(1.0, -11) + ldexp(1.0, -40);
    uint16_t h, b;
    float f;
    assert_int_equal(dt_convert(&h, FERRY_F16, &x, FERRY_F64, 1), 0);
    assert_int_equal(h, 0x3C00);
    assert_int_equal(dt_convert(&b, FERRY_BF16, &x, FERRY_F64, 1), 0);
    assert_int_equal(b, 0x3F80);
    assert_int_equal(dt_convert(&f, FERRY_F32, &x, FERRY_F64, 1), 0);
    assert_true(f == (float)x);
    uint16_t in16 = 0x3C01;
    double out = 0;
    assert_int_equal(dt_convert(&out, FERRY_F64, &in16, FERRY_F16, 1), 0);
    assert_true(out == 1.0 + ldexp(1.0, -10));
    in16 = 0x3F81;
    assert_int_equal(dt_convert(&out, FERRY_F64, &in16, FERRY_BF16, 1), 0);
    assert_true(out == 1.0 + ldexp(1.0, -7));
}

static void test_convert_same_type_and_unsupported(void **state)
{
    (void)state;
    int32_t data[6] = {1, 2, 3, 4, 5, 6};
    assert_int_equal(dt_convert(data + 1, FERRY_I32, data, FERRY_I32, 5), 0); /* overlapping */
    assert_int_equal(data[0], 1);
    assert_int_equal(data[1], 1);
    assert_int_equal(data[5], 5);
    float f = 1.0f;
    assert_int_equal(dt_convert(&f, FERRY_F32, data, FERRY_I32, 1), -1);
    assert_int_equal(dt_convert(data, FERRY_I32, &f, FERRY_F32, 1), -1);
    assert_int_equal(dt_convert(&f, FERRY_F32, data, FERRY_F8_E4M3, 1), -1);
    assert_int_equal(dt_convert(&f, FERRY_DTYPE_UNDEFINED, &f, FERRY_DTYPE_UNDEFINED, 1), -1);
    assert_int_equal(dt_convert(NULL, FERRY_F16, NULL, FERRY_F32, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_and_names),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_f16_decode_all),
        cmocka_unit_test(test_f16_rounding),
        cmocka_unit_test(test_convert_arrays),
        cmocka_unit_test(test_convert_from_f64_matches_torch),
        cmocka_unit_test(test_convert_same_type_and_unsupported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
