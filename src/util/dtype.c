/* dtype.c — element sizes, safetensors and public names (ferry_dtype_name: the backends print
 * it, so it lives with the types), and bit-exact float conversions (round to nearest
 * even, as torch's .to() rounds). */
#include "util/dtype.h"

#include <string.h>

typedef struct dtype_info {
    const char *st_name;     /* NULL: not a safetensors type */
    size_t size;             /* bytes per element; 0 for sub-byte types */
    int is_float;
    int bits;
} dtype_info;

static const dtype_info INFO[FERRY_DTYPE_COUNT] = {
    [FERRY_DTYPE_UNDEFINED] = {NULL, 0, 0, 0},
    [FERRY_F32] = {"F32", 4, 1, 32},
    [FERRY_F16] = {"F16", 2, 1, 16},
    [FERRY_BF16] = {"BF16", 2, 1, 16},
    [FERRY_F64] = {"F64", 8, 1, 64},
    [FERRY_I8] = {"I8", 1, 0, 8},
    [FERRY_I16] = {"I16", 2, 0, 16},
    [FERRY_I32] = {"I32", 4, 0, 32},
    [FERRY_I64] = {"I64", 8, 0, 64},
    [FERRY_U8] = {"U8", 1, 0, 8},
    [FERRY_U16] = {"U16", 2, 0, 16},
    [FERRY_U32] = {"U32", 4, 0, 32},
    [FERRY_U64] = {"U64", 8, 0, 64},
    [FERRY_BOOL] = {"BOOL", 1, 0, 8},
    [FERRY_F8_E4M3] = {"F8_E4M3", 1, 1, 8},
    [FERRY_F8_E5M2] = {"F8_E5M2", 1, 1, 8},
    [FERRY_U4] = {NULL, 0, 0, 4},
    [FERRY_I4] = {NULL, 0, 0, 4},
};
_Static_assert(FERRY_DTYPE_COUNT == 18, "a new ferry_dtype needs its entry in INFO");

size_t dt_size(ferry_dtype dt)
{
    return (unsigned)dt < FERRY_DTYPE_COUNT ? INFO[dt].size : 0;
}

int dt_bits(ferry_dtype dt)
{
    return (unsigned)dt < FERRY_DTYPE_COUNT ? INFO[dt].bits : 0;
}

uint64_t dt_nbytes(ferry_dtype dt, uint64_t numel)
{
    return (numel * (uint64_t)dt_bits(dt) + 7) / 8;
}

const char *dt_st_name(ferry_dtype dt)
{
    return (unsigned)dt < FERRY_DTYPE_COUNT && INFO[dt].st_name ? INFO[dt].st_name : "UNDEFINED";
}

ferry_dtype dt_from_st_name(const char *name)
{
    if (!name)
        return FERRY_DTYPE_UNDEFINED;
    for (int dt = 1; dt < FERRY_DTYPE_COUNT; dt++)
        if (INFO[dt].st_name && strcmp(INFO[dt].st_name, name) == 0)
            return (ferry_dtype)dt;
    return FERRY_DTYPE_UNDEFINED;
}

int dt_is_float(ferry_dtype dt)
{
    return (unsigned)dt < FERRY_DTYPE_COUNT && INFO[dt].is_float;
}

/* ---- scalar conversions -------------------------------------------------------------------
 * Written branch-free (every case computed, then selected with masks) so that the loops below,
 * which inline them, vectorize: with a ?: the compiler may sink the float arithmetic of one
 * case into a branch, and it will not vectorize a loop with branches in it. Bit patterns move
 * through memcpy: no aliasing or alignment UB. The float-add tricks below assume the default
 * round-to-nearest mode; flush-to-zero does not affect them (their operands and results are
 * normal floats). */

/* cond ? a : b, without a branch. */
static inline uint32_t select_u32(int cond, uint32_t a, uint32_t b)
{
    uint32_t mask = 0u - (uint32_t)(cond != 0);
    return (a & mask) | (b & ~mask);
}

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float bf16_to_f32(uint16_t h)
{
    return f32_from_bits((uint32_t)h << 16);
}

/* Adding 0x7FFF plus the lowest kept bit rounds the discarded 16 bits to nearest even; a NaN
 * becomes the canonical quiet NaN 0x7FC0, which is what torch produces. */
static inline uint16_t f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    int is_nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
    return (uint16_t)select_u32(is_nan, 0x7FC0u, rounded);
}

static inline float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t magnitude = h & 0x7FFFu;
    /* Normal numbers: move exponent and mantissa into place and rebias by 127 - 15. Inf and NaN
     * (exponent 31) need the exponent pushed all the way to 255; the payload comes along. */
    uint32_t normal = (magnitude << 13) + 0x38000000u;
    uint32_t special = (magnitude << 13) + 0x70000000u;
    /* Subnormals are magnitude * 2^-24. 0.5f has an ulp of exactly 2^-24, so planting the
     * magnitude in 0.5f's mantissa and subtracting 0.5f gives the value exactly. */
    float subnormal = f32_from_bits(0x3F000000u + magnitude) - 0.5f;
    uint32_t bits = select_u32(magnitude < 0x0400u, f32_bits(subnormal),
                               select_u32(magnitude >= 0x7C00u, special, normal));
    return f32_from_bits(bits | sign);
}

static inline uint16_t f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t magnitude = u & 0x7FFFFFFFu;
    /* Normal range: rebias the exponent (subtract (127 - 15) << 23, done by adding its two's
     * complement) and round the 13 dropped mantissa bits to nearest even. A carry out of the
     * mantissa correctly bumps the exponent. */
    uint32_t normal = (magnitude + 0xC8000FFFu + ((magnitude >> 13) & 1u)) >> 13;
    /* Below 2^-14 the result is subnormal, in steps of 2^-24. Adding 0.5f (ulp 2^-24) makes the
     * FPU round the value to that step, nearest even; the step count lands in the low bits. */
    float shifted = f32_from_bits(magnitude) + 0.5f;
    uint32_t subnormal = f32_bits(shifted) - 0x3F000000u;
    /* 65520 and above round to infinity (65504 is the largest half; ties go to even = inf). */
    uint32_t overflow = select_u32(magnitude <= 0x7F800000u, 0x7C00u,
                                   0x7E00u); /* infinity, or NaN: canonical quiet NaN */
    uint32_t result = select_u32(magnitude < 0x38800000u, subnormal,
                                 select_u32(magnitude < 0x477FF000u, normal, overflow));
    return (uint16_t)(result | sign);
}

float dt_bf16_to_f32(uint16_t h) { return bf16_to_f32(h); }
float dt_f16_to_f32(uint16_t h) { return f16_to_f32(h); }
uint16_t dt_f32_to_bf16(float f) { return f32_to_bf16(f); }
uint16_t dt_f32_to_f16(float f) { return f32_to_f16(f); }

/* ---- array conversions ---------------------------------------------------------------------
 * One load-convert-store loop per pair; byte pointers and memcpy keep unaligned tensors (a
 * safetensors offset need not be aligned) legal. */

static inline float load_f32(const uint8_t *p) { float v; memcpy(&v, p, 4); return v; }
static inline double load_f64(const uint8_t *p) { double v; memcpy(&v, p, 8); return v; }
static inline uint16_t load_u16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline void store_f32(uint8_t *p, float v) { memcpy(p, &v, 4); }
static inline void store_f64(uint8_t *p, double v) { memcpy(p, &v, 8); }
static inline void store_u16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* F64 reaches F16 and BF16 through float, which is what torch does (c10::Half and
 * c10::BFloat16 are built from a float), so the double rounding matches torch's. Each (from, to)
 * pair is its own straight loop so that each one vectorizes. */
static void to_f32(uint8_t *restrict d, const uint8_t *restrict s, ferry_dtype from, size_t n)
{
    switch (from) {
    case FERRY_F16:
        for (size_t i = 0; i < n; i++) store_f32(d + 4 * i, f16_to_f32(load_u16(s + 2 * i)));
        break;
    case FERRY_BF16:
        for (size_t i = 0; i < n; i++) store_f32(d + 4 * i, bf16_to_f32(load_u16(s + 2 * i)));
        break;
    default:
        for (size_t i = 0; i < n; i++) store_f32(d + 4 * i, (float)load_f64(s + 8 * i));
        break;
    }
}

static void to_f16(uint8_t *restrict d, const uint8_t *restrict s, ferry_dtype from, size_t n)
{
    switch (from) {
    case FERRY_F32:
        for (size_t i = 0; i < n; i++) store_u16(d + 2 * i, f32_to_f16(load_f32(s + 4 * i)));
        break;
    case FERRY_BF16:
        for (size_t i = 0; i < n; i++)
            store_u16(d + 2 * i, f32_to_f16(bf16_to_f32(load_u16(s + 2 * i))));
        break;
    default:
        for (size_t i = 0; i < n; i++)
            store_u16(d + 2 * i, f32_to_f16((float)load_f64(s + 8 * i)));
        break;
    }
}

static void to_bf16(uint8_t *restrict d, const uint8_t *restrict s, ferry_dtype from, size_t n)
{
    switch (from) {
    case FERRY_F32:
        for (size_t i = 0; i < n; i++) store_u16(d + 2 * i, f32_to_bf16(load_f32(s + 4 * i)));
        break;
    case FERRY_F16:
        for (size_t i = 0; i < n; i++)
            store_u16(d + 2 * i, f32_to_bf16(f16_to_f32(load_u16(s + 2 * i))));
        break;
    default:
        for (size_t i = 0; i < n; i++)
            store_u16(d + 2 * i, f32_to_bf16((float)load_f64(s + 8 * i)));
        break;
    }
}

static void to_f64(uint8_t *restrict d, const uint8_t *restrict s, ferry_dtype from, size_t n)
{
    switch (from) {
    case FERRY_F32:
        for (size_t i = 0; i < n; i++) store_f64(d + 8 * i, (double)load_f32(s + 4 * i));
        break;
    case FERRY_F16:
        for (size_t i = 0; i < n; i++)
            store_f64(d + 8 * i, (double)f16_to_f32(load_u16(s + 2 * i)));
        break;
    default:
        for (size_t i = 0; i < n; i++)
            store_f64(d + 8 * i, (double)bf16_to_f32(load_u16(s + 2 * i)));
        break;
    }
}

static int is_convertible(ferry_dtype dt)
{
    return dt == FERRY_F32 || dt == FERRY_F16 || dt == FERRY_BF16 || dt == FERRY_F64;
}

int dt_convert(void *dst, ferry_dtype to, const void *src, ferry_dtype from, size_t n)
{
    if (from == to) {
        size_t size = dt_size(from);
        if (size == 0)
            return -1;
        if (n > 0)
            memmove(dst, src, n * size);
        return 0;
    }
    if (!is_convertible(from) || !is_convertible(to))
        return -1;
    if (n == 0)
        return 0;
    switch (to) {
    case FERRY_F32: to_f32(dst, src, from, n); break;
    case FERRY_F16: to_f16(dst, src, from, n); break;
    case FERRY_BF16: to_bf16(dst, src, from, n); break;
    default: to_f64(dst, src, from, n); break;
    }
    return 0;
}

const char *ferry_dtype_name(ferry_dtype dtype)
{
    switch (dtype) {
    case FERRY_F32: return "fp32";
    case FERRY_F16: return "fp16";
    case FERRY_BF16: return "bf16";
    case FERRY_U4: return "uint4";
    case FERRY_I4: return "int4";
    default: return dt_st_name(dtype);
    }
}
