/* rtn.c — round-to-nearest block quantization (see rtn.h for the arithmetic). */
#include "quant/rtn.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "util/dtype.h"

static float round_scale(float s, ferry_dtype dt)
{
    if (dt == FERRY_F16)
        return dt_f16_to_f32(dt_f32_to_f16(s));
    if (dt == FERRY_BF16)
        return dt_bf16_to_f32(dt_f32_to_bf16(s));
    return s;
}

static void store_scale(void *scales, size_t i, float s, ferry_dtype dt)
{
    if (dt == FERRY_F16 || dt == FERRY_BF16) {
        uint16_t h = dt == FERRY_F16 ? dt_f32_to_f16(s) : dt_f32_to_bf16(s);
        memcpy((uint8_t *)scales + i * 2, &h, 2);
    } else {
        memcpy((uint8_t *)scales + i * 4, &s, 4);
    }
}

static float load_scale(const void *scales, size_t i, ferry_dtype dt)
{
    if (dt == FERRY_F16 || dt == FERRY_BF16) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)scales + i * 2, 2);
        return dt == FERRY_F16 ? dt_f16_to_f32(h) : dt_bf16_to_f32(h);
    }
    float s;
    memcpy(&s, (const uint8_t *)scales + i * 4, 4);
    return s;
}

/* Element i of a packed code array. */
static void put_code(uint8_t *p, size_t i, int bits, unsigned q)
{
    if (bits == 8) {
        p[i] = (uint8_t)q;
    } else if (i % 2 == 0) {
        p[i / 2] = (uint8_t)((p[i / 2] & 0xF0) | (q & 0x0F));
    } else {
        p[i / 2] = (uint8_t)((p[i / 2] & 0x0F) | ((q & 0x0F) << 4));
    }
}

static unsigned get_code(const uint8_t *p, size_t i, int bits)
{
    if (bits == 8)
        return p[i];
    return i % 2 == 0 ? p[i / 2] & 0x0F : p[i / 2] >> 4;
}

/* codes[i] = clamp(round(x[i] * reciprocal + zero), 0, levels) for one block, rounding halves
 * away from zero as roundf does. Branch-free so the compiler vectorizes it (roundf is a library
 * call on baseline x86-64, and this runs once per weight): clamping first is the same as
 * clamping the rounded value, since 0 and `levels` are integers (NaN fails `t > 0` and becomes
 * 0); then t >= 0, where trunc is a conversion and t - trunc(t) is exact. The clamps are
 * comparisons, not fmaxf/fminf, whose NaN rules keep them library calls. */
static inline int code_of(float x, float reciprocal, float z, float top)
{
    float t = x * reciprocal + z;
    t = t > 0.0f ? t : 0.0f;
    t = t < top ? t : top;
    int q = (int)t;
    return q + (t - (float)q >= 0.5f);
}

static void block_codes(const float *x, int n, float reciprocal, unsigned zero, unsigned levels,
                        uint8_t *codes)
{
    float z = (float)zero, top = (float)levels;
    for (int i = 0; i < n; i++)
        codes[i] = (uint8_t)code_of(x[i], reciprocal, z, top);
}

/* Four floats as one SSE/NEON register: GCC and Clang's vector extension. Plain loops over
 * lane arrays are not vectorized at -O3 (GCC 12 turns the arrays into scalar registers
 * first), and a float reduction may not be reordered by the compiler itself. */
typedef float f32x4 __attribute__((vector_size(16)));
typedef int32_t i32x4 __attribute__((vector_size(16)));

/* The smallest and largest of x[0..n), NaNs skipped, as a loop from the first element that
 * keeps the earlier of equal values would find them (onnxruntime's quantizer is such a loop).
 * The lanes only change which zero is kept when an extreme is zero, and only the minimum's
 * sign reaches the output, in a block of nothing but zeros (a symmetric scale is lo / -mid),
 * so that case is redone as the loop would. -> whether the block holds NaN or +-inf, found in
 * the same pass (an all-ones exponent, tested on the bits). */
static bool block_range(const float *x, int n, float *lo_out, float *hi_out)
{
    f32x4 lo = {FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX}, hi = -lo;
    const i32x4 exp = {0x7F800000, 0x7F800000, 0x7F800000, 0x7F800000};
    i32x4 bad = {0};
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        f32x4 v;
        memcpy(&v, x + i, sizeof v);
        i32x4 below = v < lo, above = v > hi; /* all ones where true; false for NaN */
        lo = (f32x4)(((i32x4)v & below) | ((i32x4)lo & ~below));
        hi = (f32x4)(((i32x4)v & above) | ((i32x4)hi & ~above));
        bad |= ((i32x4)v & exp) == exp;
    }
    float l = FLT_MAX, h = -FLT_MAX;
    bool nonfinite = false;
    for (int j = 0; j < 4; j++) {
        l = lo[j] < l ? lo[j] : l;
        h = hi[j] > h ? hi[j] : h;
        nonfinite |= bad[j] != 0;
    }
    for (; i < n; i++) {
        l = x[i] < l ? x[i] : l;
        h = x[i] > h ? x[i] : h;
        nonfinite |= !isfinite(x[i]);
    }
    if (l == 0.0f && h == 0.0f)
        for (i = 0; i < n; i++)
            if (x[i] == 0.0f) { /* the first that is not NaN: every other one is zero */
                l = x[i];
                break;
            }
    *lo_out = l;
    *hi_out = h;
    return nonfinite;
}

/* The scale and zero point of a block whose range [lo, hi] is shrunk by `shrink` (1: RTN's,
 * the rules in rtn.h). */
static void range_scale(float lo, float hi, float shrink, int bits, int symmetric,
                        ferry_dtype scale_dtype, float *scale, unsigned *zero)
{
    unsigned levels = (1u << bits) - 1, mid = 1u << (bits - 1);
    if (symmetric == RTN_SYMMETRIC_POSITIVE) {
        float v = fabsf(hi) > fabsf(lo) ? hi : lo;
        float s = v > 0.0f ? v * shrink / (float)(mid - 1) : v * shrink / -(float)mid;
        if (v == 0.0f)
            s = 1.0f;
        *scale = round_scale(s < FLT_MIN ? FLT_MIN : s, scale_dtype);
        *zero = mid;
        return;
    }
    if (symmetric) {
        float v = fabsf(hi) > fabsf(lo) ? hi : lo;
        *scale = round_scale(v * shrink / -(float)mid, scale_dtype);
        *zero = mid;
        return;
    }
    lo = lo < 0.0f ? lo * shrink : 0.0f;
    hi = hi > 0.0f ? hi * shrink : 0.0f;
    float s = (hi - lo) / (float)levels;
    float z = s != 0.0f ? 0.0f - lo / s : lo;
    /* tested so that NaN (an inf scale over an infinite lo) gives 0: converting NaN to an
     * integer is undefined */
    *zero = !(z > 0.0f) ? 0 : z > (float)levels ? levels : (unsigned)roundf(z);
    *scale = round_scale(s, scale_dtype);
}

/* The error of a block's codes under scale/zero, each element's squared error weighted by its
 * own square, the codes as block_codes makes them; four lanes at a time (a float sum is not
 * reordered by the compiler itself), so the search costs little more than its arithmetic. */
static float block_error(const float *x, int n, float scale, unsigned zero, unsigned levels)
{
    float reciprocal = scale != 0.0f ? 1.0f / scale : 0.0f, z = (float)zero, top = (float)levels;
    f32x4 r4 = {reciprocal, reciprocal, reciprocal, reciprocal}, z4 = {z, z, z, z};
    f32x4 top4 = {top, top, top, top}, s4 = {scale, scale, scale, scale}, zero4 = {0}, sum = {0};
    f32x4 half = {0.5f, 0.5f, 0.5f, 0.5f}, one = {1.0f, 1.0f, 1.0f, 1.0f};
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        f32x4 v;
        memcpy(&v, x + i, sizeof v);
        f32x4 t = v * r4 + z4;
        i32x4 pos = t > zero4, below = t < top4;
        t = (f32x4)((i32x4)t & pos);                           /* NaN and negatives: 0 */
        t = (f32x4)(((i32x4)t & below) | ((i32x4)top4 & ~below));
        f32x4 q = __builtin_convertvector(__builtin_convertvector(t, i32x4), f32x4);
        i32x4 up = t - q >= half;
        f32x4 code = q + (f32x4)((i32x4)one & up);
        f32x4 d = v - (code - z4) * s4;
        sum += d * d * v * v;
    }
    float err = sum[0] + sum[1] + sum[2] + sum[3];
    for (; i < n; i++) { /* the rest as block_codes makes them */
        float d = x[i] - ((float)code_of(x[i], reciprocal, z, top) - z) * scale;
        err += d * d * x[i] * x[i];
    }
    return err;
}

/* The search (rtn.h): the range shrunk by 1, 1 - 1/32, ... 1/2, keeping the first shrink with
 * the least error, stopping after RTN_SEARCH_PATIENCE shrinks in a row that do no better. */
static void searched_scale(const float *x, int n, float lo, float hi, int bits, int symmetric,
                           ferry_dtype scale_dtype, float *scale, unsigned *zero)
{
    unsigned levels = (1u << bits) - 1;
    range_scale(lo, hi, 1.0f, bits, symmetric, scale_dtype, scale, zero);
    float best = block_error(x, n, *scale, *zero, levels);
    for (int k = 1, since = 0; k <= RTN_SEARCH_STEPS && best > 0.0f && since < RTN_SEARCH_PATIENCE;
         k++, since++) {
        float s;
        unsigned z;
        range_scale(lo, hi, 1.0f - (float)k / (2.0f * RTN_SEARCH_STEPS), bits, symmetric,
                    scale_dtype, &s, &z);
        float e = block_error(x, n, s, z, levels);
        if (e < best) {
            best = e;
            *scale = s;
            *zero = z;
            since = -1;
        }
    }
}

void rtn_quantize_rows(const float *x, size_t rows, size_t cols, int bits, int block,
                       int symmetric, int search, ferry_dtype scale_dtype, size_t code_row,
                       uint8_t *codes, void *scales, uint8_t *zeros)
{
    size_t blocks = (cols + (size_t)block - 1) / (size_t)block;
    unsigned levels = (1u << bits) - 1;
    size_t zero_row_bytes = (blocks * (size_t)bits + 7) / 8;
    /* A row of 4-bit zero points ending in half a byte pads it with 8, as onnxruntime does. */
    if (!symmetric && zeros)
        memset(zeros, bits == 4 ? 0x88 : 0, rows * zero_row_bytes);
    for (size_t r = 0; r < rows; r++) {
        const float *row = x + r * cols;
        uint8_t *row_codes = codes + r * code_row * (size_t)bits / 8;
        for (size_t b = 0; b < blocks; b++) {
            const float *blk = row + b * (size_t)block;
            /* the last block may be short: its missing elements count as zeros, which move
             * neither scale (asymmetric ranges hold 0 anyway; a symmetric one keeps its
             * largest magnitude) and get the zero code where the codes are padded */
            int n = (int)(cols - b * (size_t)block < (size_t)block ? cols - b * (size_t)block
                                                                    : (size_t)block);
            float lo, hi, scale;
            unsigned zero;
            bool nonfinite = block_range(blk, n, &lo, &hi);
            if (nonfinite) {
                /* NaN or inf in the checkpoint: any scale from such a range turns the block
                 * into finite codes (or inf's codes into 0 * inf), which every runtime would
                 * dequantize to finite weights, hiding what transformers computes with. A NaN
                 * scale makes each runtime's (code - zero) * scale NaN for the whole block,
                 * whatever the codes; they are all the mid code, as is the zero point. */
                scale = NAN;
                zero = 1u << (bits - 1);
            } else if (search) {
                searched_scale(blk, n, lo, hi, bits, symmetric, scale_dtype, &scale, &zero);
            } else {
                range_scale(lo, hi, 1.0f, bits, symmetric, scale_dtype, &scale, &zero);
            }
            if (!symmetric)
                put_code(zeros + r * zero_row_bytes, b, bits, zero);
            store_scale(scales, r * blocks + b, scale, scale_dtype);
            float reciprocal = scale != 0.0f ? 1.0f / scale : 0.0f;
            size_t at = b * (size_t)block;
            int span = at + (size_t)block <= code_row ? block : (int)(code_row - at);
            uint8_t tmp[256];
            if (nonfinite)
                memset(tmp, (int)zero, (size_t)n);
            else
                block_codes(blk, n, reciprocal, zero, levels, tmp);
            memset(tmp + n, (int)zero, (size_t)(block - n));
            if (bits == 8) {
                memcpy(row_codes + at, tmp, (size_t)span);
            } else { /* blocks start at even elements and spans are even: whole bytes */
                uint8_t *out = row_codes + at / 2;
                for (int i = 0; i < span / 2; i++)
                    out[i] = (uint8_t)(tmp[2 * i] | tmp[2 * i + 1] << 4);
            }
        }
    }
}

void rtn_quantize(const float *x, size_t rows, size_t cols, int bits, int block, int symmetric,
                  ferry_dtype scale_dtype, uint8_t *codes, void *scales, uint8_t *zeros)
{
    rtn_quantize_rows(x, rows, cols, bits, block, symmetric, 0, scale_dtype, cols, codes, scales,
                      zeros);
}

void rtn_dequantize_row(const uint8_t *codes, const void *scales, const uint8_t *zeros,
                        size_t cols, int bits, int block, int symmetric, ferry_dtype scale_dtype,
                        float *out)
{
    size_t blocks = (cols + (size_t)block - 1) / (size_t)block;
    for (size_t b = 0; b < blocks; b++) {
        float scale = load_scale(scales, b, scale_dtype);
        unsigned zero = symmetric ? 1u << (bits - 1) : get_code(zeros, b, bits);
        for (int i = 0; i < block && b * (size_t)block + (size_t)i < cols; i++) {
            size_t k = b * (size_t)block + (size_t)i;
            out[k] = ((float)get_code(codes, k, bits) - (float)zero) * scale;
        }
    }
}
