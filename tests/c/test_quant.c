/* test_quant.c — the int4/int8 block packing and round-to-nearest arithmetic, bit for bit:
 * against a hand-worked block, and against a reference quantizer written here from the rules
 * in quant/rtn.h (plain loops, no shared code), over random rows, every bit width, block size,
 * scale type and symmetry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/rtn.h"
#include "store/transform.h"
#include "util/dtype.h"

/* A hand-worked asymmetric 4-bit block of 16: values 0..15 * 0.5 - 1.0 span [-1, 6.5];
 * lo = -1, hi = 6.5, scale = 7.5 / 15 = 0.5, zero = round(1 / 0.5) = 2, so element i has
 * code round(x * 2) + 2 = i, packed two per byte, low nibble first: 0x10, 0x32, ... */
static void packing_by_hand(void **state)
{
    (void)state;
    float x[16];
    for (int i = 0; i < 16; i++)
        x[i] = (float)i * 0.5f - 1.0f;
    uint8_t codes[16], zeros[1];
    float scale;
    rtn_quantize(x, 1, 16, 4, 16, 0, FERRY_F32, codes, &scale, zeros);
    assert_true(scale == 0.5f);
    assert_int_equal(zeros[0], 0x82); /* zero point 2; the pad nibble is 8 */
    for (int i = 0; i < 8; i++)
        assert_int_equal(codes[i], (uint8_t)((2 * i) | ((2 * i + 1) << 4)));
    float back[16];
    rtn_dequantize_row(codes, &scale, zeros, 16, 4, 16, 0, FERRY_F32, back);
    for (int i = 0; i < 16; i++)
        assert_true(back[i] == x[i]);

    /* symmetric: the largest magnitude (6.5) maps to code 0 (value -8 * scale): scale = 6.5/-8 */
    rtn_quantize(x, 1, 16, 4, 16, 1, FERRY_F32, codes, &scale, NULL);
    assert_true(scale == 6.5f / -8.0f);
    assert_int_equal(codes[7] >> 4, 0);        /* x[15] = 6.5 -> round(-8) + 8 = 0 */
    assert_int_equal(codes[0] & 0x0F, 8 + 1);  /* x[0] = -1 -> round(1.23) + 8 = 9 */

    /* an all-zero block: scale 0, every code the zero point */
    memset(x, 0, sizeof x);
    rtn_quantize(x, 1, 16, 8, 16, 1, FERRY_F32, codes, &scale, NULL);
    assert_true(scale == 0.0f);
    for (int i = 0; i < 16; i++)
        assert_int_equal(codes[i], 128);
}

/* ---- the reference, from rtn.h's rules ---- */

static float ref_round_scale(float s, ferry_dtype dt)
{
    return dt == FERRY_F16 ? dt_f16_to_f32(dt_f32_to_f16(s)) : s;
}

static unsigned ref_code(const uint8_t *p, size_t i, int bits)
{
    return bits == 8 ? p[i] : (p[i / 2] >> (4 * (i % 2))) & 15;
}

/* Checks one quantized row against the rules: scale per block, zero point, each code. */
static void check_row(const float *x, size_t cols, int bits, int block, int sym, ferry_dtype sdt,
                      const uint8_t *codes, const void *scales, const uint8_t *zeros)
{
    unsigned levels = (1u << bits) - 1, mid = 1u << (bits - 1);
    for (size_t b = 0; b < cols / (size_t)block; b++) {
        const float *blk = x + b * (size_t)block;
        float scale, want_scale;
        unsigned zero;
        if (sdt == FERRY_F16) {
            uint16_t h;
            memcpy(&h, (const uint8_t *)scales + 2 * b, 2);
            scale = dt_f16_to_f32(h);
        } else {
            memcpy(&scale, (const uint8_t *)scales + 4 * b, 4);
        }
        float lo = blk[0], hi = blk[0]; /* a loop keeping the first of equal values */
        for (int i = 1; i < block; i++) {
            lo = blk[i] < lo ? blk[i] : lo;
            hi = blk[i] > hi ? blk[i] : hi;
        }
        if (sym) {
            /* the larger magnitude; on a tie the negative end */
            want_scale = ref_round_scale((fabsf(hi) > fabsf(lo) ? hi : lo) / -(float)mid, sdt);
            zero = mid;
        } else {
            lo = fminf(lo, 0.0f);
            hi = fmaxf(hi, 0.0f);
            float s = (hi - lo) / (float)levels;            /* the zero point uses this, unrounded */
            float z = s == 0.0f ? 0.0f : roundf(-lo / s);
            unsigned want_zero = z < 0 ? 0 : z > (float)levels ? levels : (unsigned)z;
            want_scale = ref_round_scale(s, sdt);
            zero = ref_code(zeros, b, bits);
            assert_int_equal(zero, want_zero);
        }
        assert_true(memcmp(&scale, &want_scale, 4) == 0);
        for (int i = 0; i < block; i++) {
            unsigned want = zero;
            if (want_scale != 0.0f) {
                float q = roundf(blk[i] * (1.0f / want_scale) + (float)zero);
                want = q < 0 ? 0 : q > (float)levels ? levels : (unsigned)q;
            }
            assert_int_equal(ref_code(codes, b * (size_t)block + (size_t)i, bits), want);
        }
    }
}

static void matches_reference(void **state)
{
    (void)state;
    enum { ROWS = 7, COLS = 256 };
    static float x[ROWS * COLS];
    srand(7);
    for (int i = 0; i < ROWS * COLS; i++)
        x[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * (i % 97 == 0 ? 40.0f : 2.0f);
    for (int i = 0; i < COLS; i++)
        x[2 * COLS + i] = (float)rand() / (float)RAND_MAX;      /* an all-positive row */
    for (int i = 0; i < 32; i++)
        x[3 * COLS + i] = 0.0f;                                  /* a zero block */
    for (int i = 0; i < COLS; i++)                               /* ties: +-1, +-0.5 steps */
        x[4 * COLS + i] = (float)((i % 5) - 2) * 0.5f;
    for (int i = 0; i < 128; i++) /* zero blocks of mixed signs, led by -0 then by +0: a */
        x[6 * COLS + i] = (i % 2 == 0) == (i < 64) ? -0.0f : 0.0f; /* symmetric scale's sign */
    const int bits_list[2] = {4, 8}, blocks[3] = {32, 64, 128};
    const ferry_dtype sdts[2] = {FERRY_F32, FERRY_F16};
    for (int bi = 0; bi < 2; bi++)
        for (int bl = 0; bl < 3; bl++)
            for (int sym = 0; sym < 2; sym++)
                for (int sd = 0; sd < 2; sd++) {
                    int bits = bits_list[bi], block = blocks[bl];
                    size_t nb = COLS / (size_t)block, code_row = COLS * (size_t)bits / 8;
                    size_t zero_row = (nb * (size_t)bits + 7) / 8, ssz = sdts[sd] == FERRY_F16 ? 2 : 4;
                    uint8_t *codes = malloc(ROWS * code_row), *zeros = malloc(ROWS * zero_row);
                    uint8_t *scales = malloc(ROWS * nb * ssz);
                    assert_non_null(codes);
                    assert_non_null(zeros);
                    assert_non_null(scales);
                    rtn_quantize(x, ROWS, COLS, bits, block, sym, sdts[sd], codes, scales,
                                 sym ? NULL : zeros);
                    for (size_t r = 0; r < ROWS; r++)
                        check_row(x + r * COLS, COLS, bits, block, sym, sdts[sd],
                                  codes + r * code_row, scales + r * nb * ssz,
                                  zeros + r * zero_row);
                    free(codes);
                    free(zeros);
                    free(scales);
                }
}

/* Dequantized values stay within half a step of the input (the round-to-nearest promise). */
static void error_bound(void **state)
{
    (void)state;
    enum { COLS = 128 };
    float x[COLS], back[COLS], scale;
    uint8_t codes[COLS], zeros[1];
    srand(11);
    for (int i = 0; i < COLS; i++)
        x[i] = (float)rand() / (float)RAND_MAX * 3.0f - 1.0f;
    for (int bits = 4; bits <= 8; bits += 4) {
        rtn_quantize(x, 1, COLS, bits, COLS, 0, FERRY_F32, codes, &scale, zeros);
        rtn_dequantize_row(codes, &scale, zeros, COLS, bits, COLS, 0, FERRY_F32, back);
        for (int i = 0; i < COLS; i++)
            assert_true(fabsf(back[i] - x[i]) <= scale * 0.5f + 1e-6f);
    }
}

/* sum over a block of (x - back)^2 * x^2: the error the search minimizes */
static double weighted_error(const float *x, const float *back, int n)
{
    double e = 0;
    for (int i = 0; i < n; i++) {
        double d = (double)x[i] - back[i];
        e += d * d * x[i] * x[i];
    }
    return e;
}

/* Searched scales: every block's weighted error at most RTN's (its scale is a candidate), the
 * codes those of the stored scale (round to nearest), the scale one of the candidates rtn.h
 * lists, and a strictly smaller error for many blocks. */
static void search_never_worse(void **state)
{
    (void)state;
    enum { COLS = 256, BLOCK = 32, NB = COLS / BLOCK };
    float x[COLS], back_rtn[COLS], back_mse[COLS];
    int better[2] = {0, 0}; /* blocks whose error the search lowered: int8, int4 */
    srand(13);
    for (int trial = 0; trial < 40; trial++) {
        for (int i = 0; i < COLS; i++) {
            float u = 0.0f; /* roughly normal, as trained weights are */
            for (int k = 0; k < 4; k++)
                u += (float)rand() / (float)RAND_MAX - 0.5f;
            x[i] = u;
        }
        for (int bits = 4; bits <= 8; bits += 4)
            for (int sym = 0; sym < 2; sym++) {
                uint8_t codes[COLS], zeros[NB], rcodes[COLS], rzeros[NB];
                float scales[NB], rscales[NB];
                rtn_quantize_rows(x, 1, COLS, bits, BLOCK, sym, 0, FERRY_F32, COLS, rcodes,
                                  rscales, rzeros);
                rtn_quantize_rows(x, 1, COLS, bits, BLOCK, sym, 1, FERRY_F32, COLS, codes,
                                  scales, zeros);
                rtn_dequantize_row(rcodes, rscales, rzeros, COLS, bits, BLOCK, sym, FERRY_F32,
                                   back_rtn);
                rtn_dequantize_row(codes, scales, zeros, COLS, bits, BLOCK, sym, FERRY_F32,
                                   back_mse);
                for (int b = 0; b < NB; b++) {
                    double er = weighted_error(x + b * BLOCK, back_rtn + b * BLOCK, BLOCK);
                    double em = weighted_error(x + b * BLOCK, back_mse + b * BLOCK, BLOCK);
                    assert_true(em <= er * (1 + 1e-5) + 1e-12);
                    better[bits == 4] += em < er * (1 - 1e-3);
                    /* the stored scale is the RTN scale of the range shrunk by 1 - k/32 */
                    float ratio = scales[b] / rscales[b];
                    int k = (int)lroundf((1.0f - ratio) * 2 * RTN_SEARCH_STEPS);
                    assert_true(k >= 0 && k <= RTN_SEARCH_STEPS);
                    if (sym)
                        assert_true(fabsf(ratio - (1.0f - (float)k / (2 * RTN_SEARCH_STEPS))) <
                                    1e-5f);
                    unsigned levels = (1u << bits) - 1;
                    unsigned zero = sym ? 1u << (bits - 1) : ref_code(zeros, (size_t)b, bits);
                    for (int i = 0; i < BLOCK; i++) {
                        float q = roundf(x[b * BLOCK + i] * (1.0f / scales[b]) + (float)zero);
                        unsigned want = q < 0 ? 0 : q > (float)levels ? levels : (unsigned)q;
                        assert_int_equal(ref_code(codes, (size_t)(b * BLOCK + i), bits), want);
                    }
                }
            }
    }
    /* the search is not RTN under another name: it finds better int4 scales for many blocks
     * (at int8 the steps are already fine: clipping never pays on these rows) */
    print_message("search lowered the error of %d of %d int4 blocks, %d int8\n", better[1],
                  40 * 2 * NB, better[0]);
    assert_true(better[1] > 40 * 2 * NB / 8);
}

/* A block holding NaN, +inf or -inf gets a NaN scale and the mid code everywhere (its zero
 * point too), so that every runtime dequantizes it to NaN as transformers computes with it; the
 * finite block beside it is quantized as it would be alone. Every width, symmetry, method and
 * scale type, the bad value first, in the middle and last (the vector lanes and the tail). */
static void nonfinite_block_dequantizes_to_nan(void **state)
{
    (void)state;
    enum { BLOCK = 32, COLS = 2 * BLOCK + 6 }; /* a short third block: the scalar tail */
    const float bad[] = {NAN, INFINITY, -INFINITY};
    const int where[] = {0, 13, BLOCK - 1};
    for (int v = 0; v < 3; v++)
        for (int at = 0; at < 3; at++)
            for (int bits = 4; bits <= 8; bits += 4)
                for (int sym = 0; sym < 2; sym++)
                    for (int search = 0; search <= (bits == 4); search++)
                        for (int f16 = 0; f16 < 2; f16++) {
                            ferry_dtype sd = f16 ? FERRY_F16 : FERRY_F32;
                            float x[COLS], back[COLS], alone_back[COLS];
                            for (int i = 0; i < COLS; i++)
                                x[i] = sinf((float)i * 0.7f) * 3.0f;
                            uint8_t codes[COLS], zeros[3], acodes[COLS], azeros[3];
                            float scales[3], ascales[3];
                            rtn_quantize_rows(x, 1, COLS, bits, BLOCK, sym, search, sd, COLS,
                                              acodes, ascales, azeros);
                            rtn_dequantize_row(acodes, ascales, azeros, COLS, bits, BLOCK, sym,
                                               sd, alone_back);
                            /* the bad value in block 1, and in the short block 2 */
                            x[BLOCK + where[at]] = bad[v];
                            x[2 * BLOCK + where[at] % 6] = bad[v];
                            rtn_quantize_rows(x, 1, COLS, bits, BLOCK, sym, search, sd, COLS,
                                              codes, scales, zeros);
                            rtn_dequantize_row(codes, scales, zeros, COLS, bits, BLOCK, sym, sd,
                                               back);
                            for (int i = 0; i < BLOCK; i++)
                                assert_true(back[i] == alone_back[i]);
                            for (int i = BLOCK; i < COLS; i++)
                                assert_true(isnan(back[i]));
                            unsigned mid = 1u << (bits - 1);
                            for (int i = BLOCK; i < COLS; i++) {
                                unsigned code = bits == 8 ? codes[i]
                                                          : (codes[i / 2] >> (4 * (i % 2))) & 15;
                                assert_int_equal(code, mid);
                            }
                            if (!sym)
                                for (int b = 1; b < 3; b++) {
                                    unsigned z = bits == 8 ? zeros[b]
                                                           : (zeros[b / 2] >> (4 * (b % 2))) & 15;
                                    assert_int_equal(z, mid);
                                }
                        }
}

/* NaN and inf counted by their exponent bits in every float type, whatever the alignment;
 * the largest finite values, subnormals and zeros are not counted; integers never are. */
static void counts_nonfinite_by_bits(void **state)
{
    (void)state;
    uint8_t buf[8 * 9 + 1];
    float f[] = {NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 1e-45f, -0.0f, 1.0f};
    memcpy(buf + 1, f, sizeof f); /* odd address: as a checkpoint may hold it */
    assert_int_equal(tf_count_nonfinite(buf + 1, FERRY_F32, 8), 3);
    double d[] = {NAN, INFINITY, -INFINITY, DBL_MAX, 5e-324, 0.0};
    memcpy(buf + 1, d, sizeof d);
    assert_int_equal(tf_count_nonfinite(buf + 1, FERRY_F64, 6), 3);
    uint16_t h[] = {0x7E00, 0x7C00, 0xFC00, 0x7BFF, 0xFBFF, 0x0001, 0x8000, 0x7C01};
    memcpy(buf + 1, h, sizeof h);
    assert_int_equal(tf_count_nonfinite(buf + 1, FERRY_F16, 8), 4);
    uint16_t b[] = {0x7FC0, 0x7F80, 0xFF80, 0x7F7F, 0xFF7F, 0x0001, 0x8000, 0x7F81};
    memcpy(buf + 1, b, sizeof b);
    assert_int_equal(tf_count_nonfinite(buf + 1, FERRY_BF16, 8), 4);
    memset(buf, 0xFF, sizeof buf);
    assert_int_equal(tf_count_nonfinite(buf, FERRY_I32, 8), 0);
    assert_int_equal(tf_count_nonfinite(buf, FERRY_I64, 4), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(packing_by_hand),
        cmocka_unit_test(matches_reference),
        cmocka_unit_test(error_bound),
        cmocka_unit_test(search_never_worse),
        cmocka_unit_test(nonfinite_block_dequantizes_to_nan),
        cmocka_unit_test(counts_nonfinite_by_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
