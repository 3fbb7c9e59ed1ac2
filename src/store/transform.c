/* transform.c — what the weight stream does to a band's values in memory: transposes (with the
 * widening conversion fused in), the fp16 clamp and the recipe's offset, and the counts of
 * values beyond an fp16 or bf16 export's range. Pure functions over buffers; no I/O. */
#include "store/transform.h"

#include <math.h>
#include <string.h>
#ifdef __SSE2__
#include <xmmintrin.h>
#include <emmintrin.h>
#endif

#include "quant/rtn.h"
#include "util/dtype.h"

/* Tiled transpose of [rows, cols] into [cols, rows]; inside a tile the loop walks the output
 * sequentially, which measured ~4x faster than walking the input. Loads and stores go through
 * memcpy: a tensor in a safetensors file need not be aligned. */
#define TILE 32
#define TRANSPOSE_LOOP(dst_size, src_size, load, convert, store)                              \
    for (size_t r0 = 0; r0 < rows; r0 += TILE)                                                \
        for (size_t c0 = 0; c0 < cols; c0 += TILE) {                                          \
            size_t r1 = r0 + TILE < rows ? r0 + TILE : rows;                                  \
            size_t c1 = c0 + TILE < cols ? c0 + TILE : cols;                                  \
            for (size_t c = c0; c < c1; c++)                                                  \
                for (size_t r = r0; r < r1; r++) {                                            \
                    load(v, src + (r * cols + c) * (src_size));                               \
                    store(dst + (c * rows + r) * (dst_size), convert);                        \
                }                                                                             \
        }

#define LOAD16(v, p) uint16_t v; memcpy(&v, (p), 2)
#define LOAD32(v, p) uint32_t v; memcpy(&v, (p), 4)
#define STORE16(p, x) do { uint16_t o_ = (x); memcpy((p), &o_, 2); } while (0)
#define STORE32(p, x) do { uint32_t o_ = (x); memcpy((p), &o_, 4); } while (0)
#define STOREF(p, x) do { float o_ = (x); memcpy((p), &o_, 4); } while (0)

void tf_transpose(uint8_t *restrict dst, const uint8_t *restrict src, size_t rows, size_t cols,
                  size_t esz)
{
    if (esz == 4) {
        TRANSPOSE_LOOP(4, 4, LOAD32, v, STORE32)
    } else if (esz == 2) {
        TRANSPOSE_LOOP(2, 2, LOAD16, v, STORE16)
    } else {
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++)
                memcpy(dst + (c * rows + r) * esz, src + (r * cols + c) * esz, esz);
    }
}

#ifdef __SSE2__
/* bf16 [rows, cols] -> fp32 [cols, rows], four by four: each source row's four bf16 become the
 * high halves of four 32-bit lanes (the widening is a shift, so every bit pattern, NaN's
 * included, is kept), then a 4 x 4 transpose of lanes by shuffles. The scalar loop spent a
 * quarter of an ONNX export's CPU here (every MatMul weight is stored [in, out]). */
static void transpose_bf16_to_f32(uint8_t *restrict dst, const uint8_t *restrict src,
                                  size_t rows, size_t cols)
{
    const __m128i zero = _mm_setzero_si128();
    for (size_t r0 = 0; r0 < rows; r0 += TILE)
        for (size_t c0 = 0; c0 < cols; c0 += TILE) {
            size_t r1 = r0 + TILE < rows ? r0 + TILE : rows;
            size_t c1 = c0 + TILE < cols ? c0 + TILE : cols;
            size_t r = r0;
            for (; r + 4 <= r1; r += 4) {
                size_t c = c0;
                for (; c + 4 <= c1; c += 4) {
                    __m128 v[4];
                    for (int k = 0; k < 4; k++) {
                        __m128i x = _mm_loadl_epi64(
                            (const __m128i *)(const void *)(src + ((r + k) * cols + c) * 2));
                        v[k] = _mm_castsi128_ps(_mm_unpacklo_epi16(zero, x));
                    }
                    _MM_TRANSPOSE4_PS(v[0], v[1], v[2], v[3]);
                    for (int k = 0; k < 4; k++)
                        _mm_storeu_ps((float *)(void *)(dst + ((c + k) * rows + r) * 4), v[k]);
                }
                for (; c < c1; c++)
                    for (size_t x = r; x < r + 4; x++) {
                        LOAD16(v, src + (x * cols + c) * 2);
                        STORE32(dst + (c * rows + x) * 4, (uint32_t)v << 16);
                    }
            }
            for (; r < r1; r++)
                for (size_t c = c0; c < c1; c++) {
                    LOAD16(v, src + (r * cols + c) * 2);
                    STORE32(dst + (c * rows + r) * 4, (uint32_t)v << 16);
                }
        }
}
#endif

bool tf_transpose_widen(uint8_t *restrict dst, const uint8_t *restrict src, size_t rows,
                        size_t cols, ferry_dtype from, ferry_dtype to)
{
    if (to != FERRY_F32)
        return false;
    if (from == FERRY_BF16) {
#ifdef __SSE2__
        transpose_bf16_to_f32(dst, src, rows, cols);
#else
        TRANSPOSE_LOOP(4, 2, LOAD16, (uint32_t)v << 16, STORE32)
#endif
        return true;
    }
    if (from == FERRY_F16) {
        TRANSPOSE_LOOP(4, 2, LOAD16, dt_f16_to_f32(v), STOREF)
        return true;
    }
    return false;
}

uint64_t tf_clamp_to_f16_range(uint8_t *p, size_t n)
{
    const float most = 65504.0f; /* fp16's largest finite value; NaN stays NaN */
    uint64_t clamped = 0;
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        if (v > most || v < -most) {
            /* counted where the value was finite and fp16's rounding alone would have made it
             * inf (>= 65520): below that it rounds to 65504 anyway */
            clamped += isfinite(v) && fabsf(v) >= 65520.0f;
            v = v > most ? most : -most;
            memcpy(p + 4 * i, &v, 4);
        }
    }
    return clamped;
}

static bool finite_at(const void *src, ferry_dtype dt, size_t i)
{
    const uint8_t *p = (const uint8_t *)src;
    uint16_t h;
    float f;
    double d;
    switch (dt) {
    case FERRY_F32:
        memcpy(&f, p + 4 * i, 4);
        return isfinite(f);
    case FERRY_F64:
        memcpy(&d, p + 8 * i, 8);
        return isfinite(d);
    case FERRY_BF16:
        memcpy(&h, p + 2 * i, 2);
        return isfinite(dt_bf16_to_f32(h));
    case FERRY_F16:
        memcpy(&h, p + 2 * i, 2);
        return isfinite(dt_f16_to_f32(h));
    default:
        return true;
    }
}

uint64_t tf_count_overflow(const void *out, ferry_dtype to, const void *src, ferry_dtype from,
                           size_t n)
{
    if ((to != FERRY_F16 && to != FERRY_BF16) || from == to)
        return 0;
    const uint16_t inf = to == FERRY_F16 ? 0x7C00 : 0x7F80;
    const uint8_t *o = (const uint8_t *)out;
    uint64_t count = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, o + 2 * i, 2);
        if ((h & 0x7FFF) == inf && finite_at(src, from, i))
            count++;
    }
    return count;
}

uint64_t tf_count_nonfinite(const void *p, ferry_dtype dt, size_t n)
{
    const uint8_t *b = (const uint8_t *)p;
    uint64_t count = 0;
    /* an all-ones exponent is inf or NaN in every IEEE format; integer tests, so the loops
     * vectorize and no float is loaded from bits that may be a signalling NaN */
    switch (dt) {
    case FERRY_F32:
        for (size_t i = 0; i < n; i++) {
            uint32_t v;
            memcpy(&v, b + 4 * i, 4);
            count += (v & 0x7F800000u) == 0x7F800000u;
        }
        break;
    case FERRY_F64:
        for (size_t i = 0; i < n; i++) {
            uint64_t v;
            memcpy(&v, b + 8 * i, 8);
            count += (v & 0x7FF0000000000000ull) == 0x7FF0000000000000ull;
        }
        break;
    case FERRY_F16:
    case FERRY_BF16: {
        const uint16_t exp = dt == FERRY_F16 ? 0x7C00 : 0x7F80;
        for (size_t i = 0; i < n; i++) {
            uint16_t v;
            memcpy(&v, b + 2 * i, 2);
            count += (v & exp) == exp;
        }
        break;
    }
    default:
        break;
    }
    return count;
}

/* What fp16 holds only as inf: 65520 and up round there (65504 is its largest finite value). */
static bool past_f16(float v)
{
    return !(fabsf(v) < 65520.0f);
}

/* One block's count for tf_count_f16_dequantized_overflow; `deq` its dequantized values. */
static uint64_t block_overflow(const float *x, const float *deq, size_t n, float scale,
                               uint64_t *scale_overflowed)
{
    uint64_t count = 0;
    for (size_t k = 0; k < n; k++)
        if (!isfinite(x[k]))
            return 0;
    if (isinf(scale)) {
        for (size_t k = 0; k < n; k++)
            count += past_f16(x[k]);
        *scale_overflowed += count;
        return count;
    }
    for (size_t k = 0; k < n; k++)
        count += past_f16(deq[k]);
    return count;
}

uint64_t tf_count_f16_dequantized_overflow(const g_weight *w, const float *x, size_t rows,
                                           size_t cols, const uint8_t *codes, size_t code_row,
                                           const uint8_t *scales, size_t scale_row,
                                           const uint8_t *zeros, size_t zero_row, float *row,
                                           uint64_t *scale_overflowed)
{
    uint64_t count = 0;
    size_t block = (size_t)w->quant.block;
    for (size_t r = 0; r < rows; r++) {
        const uint8_t *s = scales + r * scale_row;
        rtn_dequantize_row(codes + r * code_row, s,
                           w->quant.symmetric ? NULL : zeros + r * zero_row, cols,
                           w->quant.bits, w->quant.block, w->quant.symmetric, FERRY_F16, row);
        for (size_t at = 0, b = 0; at < cols; at += block, b++) {
            uint16_t h;
            memcpy(&h, s + 2 * b, 2);
            size_t n = cols - at < block ? cols - at : block;
            count += block_overflow(x + r * cols + at, row + at, n, dt_f16_to_f32(h),
                                    scale_overflowed);
        }
    }
    return count;
}

void tf_add_offset(uint8_t *p, size_t n, double offset)
{
    float off = (float)offset;
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        v += off;
        memcpy(p + 4 * i, &v, 4);
    }
}
